//! The steps of a `composition:` block by its pattern: sequential,
//! parallel waves, conditional routing, and the result they make.

use super::*;

impl Exec<'_> {
    /// The steps of a composition, by its pattern.
    pub(super) async fn steps(&self, frame: &mut Frame<'_>, c: &Composition, input: Value) -> Pass {
        let mut state = State { scope: Map::new(), output: None, contributors: Vec::new(), last: None, abort: None };
        state.scope.insert("input".into(), input.clone());
        let routed: Vec<&str> = c.routing.iter().filter_map(|r| r.next.as_deref()).collect();
        let deferred = |f: &Flow| {
            c.pattern == Pattern::Conditional
                && (f.to.iter().all(|t| match t {
                    Target::Module(m) => routed.contains(&m.as_str()),
                    Target::Output => true,
                }))
        };
        match c.pattern {
            Pattern::Parallel => self.waves(frame, c, &mut state).await?,
            _ => {
                for (index, flow) in c.dataflow.iter().enumerate() {
                    if deferred(flow) {
                        continue;
                    }
                    let runs = self.prepare(frame, &mut state, flow, index);
                    if let Some(envelope) = state.abort.take() {
                        return Err(with_partial(envelope, &state.scope));
                    }
                    for (target, child_input) in runs {
                        let result =
                            self.child(frame, &target, child_input, None, frame.step, Via::Dataflow { index }).await;
                        self.settle(frame, &mut state, &target, result)?;
                    }
                }
            }
        }
        if c.pattern == Pattern::Conditional {
            if state.last.is_none() {
                // Routing with no step before it routes on the module's own answer.
                let own = self.own_run(frame, input.clone(), true).await?;
                state.scope.insert(frame.node.module.name.clone(), own.clone());
                state.last = Some((frame.node.module.name.clone(), own));
            }
            let scope = Value::Object(state.scope.clone());
            if let Some((index, rule)) = c.routing.iter().enumerate().find(|(_, r)| r.condition.eval(&scope))
                && let Some(next) = &rule.next
            {
                let feed = c.dataflow.iter().enumerate().find(|(_, f)| f.targets(next));
                let child_input = match feed {
                    Some((_, flow)) => {
                        let value = flow.value(|s| lookup(&state.scope, s));
                        module_input(&flow.map(&value))
                    }
                    None => {
                        let prev = state.last.as_ref().map(|(m, e)| previous_result(m, e));
                        Ok(frame.with_context(input.clone(), prev.map(|p| ("previous_result", p))))
                    }
                };
                let result = match child_input {
                    Ok(v) => {
                        let v = frame.with_context(v, None);
                        self.child(frame, next, v, None, frame.step, Via::Route { index }).await
                    }
                    Err(f) => self.refused_step(frame, next, *f, Via::Route { index }),
                };
                self.settle(frame, &mut state, next, result)?;
            }
            for (index, flow) in c.dataflow.iter().enumerate() {
                if deferred(flow) && flow.to_output() {
                    let _ = self.prepare(frame, &mut state, flow, index);
                }
            }
        }
        self.result(frame, c, state)
    }

    /// Evaluates a step's value, condition and mapping; records `to: output`
    /// and skipped targets; returns the modules to run with their inputs.
    pub(super) fn prepare(
        &self,
        frame: &Frame<'_>,
        state: &mut State,
        flow: &Flow,
        index: usize,
    ) -> Vec<(String, Value)> {
        let value = flow.value(|s| lookup(&state.scope, s));
        if let Some(cond) = &flow.condition
            && !cond.eval(&value)
        {
            let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
            for t in &flow.to {
                if let Target::Module(m) = t {
                    let s = self.begin(m, depth, Some(frame.step), Via::Dataflow { index }, frame.round, Value::Null);
                    let reason = format!("condition `{}` is false", cond.as_str());
                    self.finish(s, &Value::Null, Outcome::Skipped { reason });
                }
            }
            return Vec::new();
        }
        let mapped = flow.map(&value);
        let mut runs = Vec::new();
        for t in &flow.to {
            match t {
                Target::Output => {
                    state.output = Some(match state.output.take() {
                        Some(old) => deep_merge(old, mapped.clone()),
                        None => mapped.clone(),
                    });
                    for s in &flow.from {
                        if let Source::Output(m) = s
                            && let Some(env) = state.scope.get(m).filter(|e| !e.is_null())
                        {
                            state.contributors.push((m.clone(), env.clone()));
                        }
                    }
                }
                Target::Module(m) => match module_input(&mapped) {
                    Ok(v) => runs.push((m.clone(), frame.with_context(v, None))),
                    Err(f) => {
                        let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
                        let s = self.begin(
                            m,
                            depth,
                            Some(frame.step),
                            Via::Dataflow { index },
                            frame.round,
                            mapped.clone(),
                        );
                        let envelope = (*f).into_envelope();
                        self.finish(s, &envelope, outcome_of(&envelope));
                        let optional = frame.config.and_then(|c| c.requirement(m)).is_some_and(|r| r.optional);
                        state.scope.insert(m.clone(), Value::Null);
                        if !optional {
                            state.abort.get_or_insert(envelope);
                        }
                    }
                },
            }
        }
        runs
    }

    pub(super) fn refused_step(&self, frame: &Frame<'_>, name: &str, f: Failure, via: Via) -> Child {
        let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
        let s = self.begin(name, depth, Some(frame.step), via, frame.round, Value::Null);
        let envelope = f.into_envelope();
        self.finish(s, &envelope, outcome_of(&envelope));
        if frame.config.and_then(|c| c.requirement(name)).is_some_and(|r| r.optional) {
            Child::Null
        } else {
            Child::Abort(envelope)
        }
    }

    /// Records a child's result in the scope; a required failure stops the
    /// composition, with what succeeded so far as `partial_data`.
    pub(super) fn settle(
        &self,
        frame: &mut Frame<'_>,
        state: &mut State,
        target: &str,
        result: Child,
    ) -> Result<(), Value> {
        match result {
            Child::Value { envelope, emitted, module, mode } => {
                frame.absorb(&emitted, mode);
                state.scope.insert(target.to_owned(), envelope.clone());
                if module != target {
                    state.scope.insert(module.clone(), envelope.clone());
                }
                state.last = Some((target.to_owned(), envelope));
                Ok(())
            }
            Child::Null => {
                state.scope.insert(target.to_owned(), Value::Null);
                Ok(())
            }
            Child::Abort(envelope) => Err(with_partial(envelope, &state.scope)),
        }
    }

    /// `parallel`: each wave runs every step whose sources are settled, its
    /// modules concurrently.
    pub(super) async fn waves(&self, frame: &mut Frame<'_>, c: &Composition, state: &mut State) -> Result<(), Value> {
        let mut pending: Vec<usize> = (0..c.dataflow.len()).collect();
        while !pending.is_empty() {
            let targeted_by_pending = |m: &str, pending: &[usize]| pending.iter().any(|&i| c.dataflow[i].targets(m));
            let (ready, waiting): (Vec<usize>, Vec<usize>) = pending.iter().partition(|&&i| {
                c.dataflow[i].from.iter().all(|s| match s {
                    Source::Input => true,
                    Source::Output(m) => state.scope.contains_key(m) || !targeted_by_pending(m, &pending),
                })
            });
            if ready.is_empty() {
                return Err(dataflow_cycle(c, &waiting, &state.scope));
            }
            let mut runs = Vec::new();
            for &index in &ready {
                for (target, input) in self.prepare(frame, state, &c.dataflow[index], index) {
                    runs.push((index, target, input));
                }
            }
            if let Some(envelope) = state.abort.take() {
                return Err(with_partial(envelope, &state.scope));
            }
            // The wave's steps share a token below the module's: when a
            // required step fails, the composition is over, so its siblings'
            // calls are dropped rather than paid for and thrown away.
            let wave = frame.node.cancel.child_token();
            let wave_node = Node {
                module: Arc::clone(&frame.node.module),
                input: frame.node.input.clone(),
                arguments: frame.node.arguments.clone(),
                chain: frame.node.chain.clone(),
                parent: frame.node.parent,
                via: frame.node.via.clone(),
                round: frame.node.round,
                cancel: wave.clone(),
            };
            let wave_frame = Frame {
                node: &wave_node,
                step: frame.step,
                config: frame.config,
                context: frame.context.clone(),
                emitted: Map::new(),
                round: frame.round,
            };
            let first_abort: Mutex<Option<usize>> = Mutex::new(None);
            let results = futures_util::future::join_all(runs.iter().enumerate().map(|(k, (index, target, input))| {
                let (wave, wave_frame, first_abort) = (&wave, &wave_frame, &first_abort);
                async move {
                    let step = wave_frame.step;
                    let result = self
                        .child(wave_frame, target, input.clone(), None, step, Via::Dataflow { index: *index })
                        .await;
                    if matches!(result, Child::Abort(_)) && !wave.is_cancelled() {
                        if let Ok(mut first) = first_abort.lock() {
                            first.get_or_insert(k);
                        }
                        wave.cancel();
                    }
                    result
                }
            }))
            .await;
            let first_abort = first_abort.into_inner().ok().flatten();
            let mut abort = None;
            for (k, ((_, target, _), result)) in runs.iter().zip(results).enumerate() {
                match (&result, first_abort) {
                    // A sibling cancelled because of the first failure: that
                    // failure, not the cancellation, is the composition's answer.
                    (Child::Abort(_), Some(first)) => {
                        if k == first {
                            abort = Some((target, result));
                        }
                    }
                    _ => self.settle(frame, state, target, result)?,
                }
            }
            if let Some((target, result)) = abort {
                self.settle(frame, state, target, result)?;
            }
            // A step whose targets never ran still counts its targets as settled.
            for &index in &ready {
                for t in &c.dataflow[index].to {
                    if let Target::Module(m) = t {
                        state.scope.entry(m.clone()).or_insert(Value::Null);
                    }
                }
            }
            pending = waiting;
        }
        Ok(())
    }

    /// The envelope a composition's steps produce.
    pub(super) fn result(&self, frame: &Frame<'_>, c: &Composition, state: State) -> Pass {
        let root = &frame.node.module.name;
        if let Some(value) = state.output {
            let mut contributors = state.contributors;
            if contributors.is_empty() {
                contributors = self.envelopes_ok();
            }
            return Ok(output_envelope(root, c.pattern, &value, &contributors));
        }
        if let Some((_, envelope)) = state.last {
            return Ok(envelope);
        }
        Err(Failure::new(ErrorCode::E2004, format!("no step of `{root}` ran: every condition was false"))
            .details(json!({"module": root}))
            .into_envelope())
    }
}
