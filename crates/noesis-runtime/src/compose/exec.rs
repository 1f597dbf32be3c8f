//! The engine: one module's invocation — its `@call`s, its own run, its
//! children and their attempts (resolution, version, cycle, depth, policy,
//! timeout).

use super::*;

impl Exec<'_> {
    pub(super) fn elapsed(&self) -> f64 {
        ms(self.started.elapsed())
    }

    pub(super) fn begin(
        &self,
        module: &str,
        depth: u32,
        parent: Option<usize>,
        via: Via,
        round: Option<u32>,
        input: Value,
    ) -> usize {
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        let id = steps.len();
        steps.push(StepTrace {
            id,
            module: module.to_owned(),
            depth,
            parent,
            via,
            round,
            start_ms: self.elapsed(),
            elapsed_ms: 0.0,
            outcome: Outcome::Running,
            input,
            envelope: Value::Null,
            usage: None,
            calls: 0,
            cost_usd: None,
            span: None,
        });
        id
    }

    pub(super) fn update(&self, id: usize, f: impl FnOnce(&mut StepTrace)) {
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = steps.get_mut(id) {
            f(s);
        }
    }

    pub(super) fn finish(&self, id: usize, envelope: &Value, outcome: Outcome) {
        let now = self.elapsed();
        self.update(id, |s| {
            s.elapsed_ms = ((now - s.start_ms) * 1e3).round() / 1e3;
            s.envelope = envelope.clone();
            s.outcome = outcome;
        });
    }

    pub(super) fn envelopes_ok(&self) -> Vec<(String, Value)> {
        let steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        steps
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && s.depth > 0)
            .map(|s| (s.module.clone(), s.envelope.clone()))
            .collect()
    }

    /// The E2002 envelope for a cancelled run, saying which timeout it was.
    pub(super) fn timeout_envelope(&self, own: Option<(u64, &AtomicBool)>, module: &str) -> Option<Value> {
        if let Some((limit, fired)) = own
            && fired.load(Ordering::SeqCst)
        {
            return Some(
                Failure::new(
                    ErrorCode::E2002,
                    format!("`{module}` did not finish within its timeout_ms of {limit} ms"),
                )
                .details(json!({"module": module, "timeout_ms": limit}))
                .into_envelope(),
            );
        }
        self.total_fired.load(Ordering::SeqCst).then(|| {
            Failure::new(
                ErrorCode::E2002,
                format!("the composition's timeout_ms of {} ms was up while `{module}` ran", self.total_ms),
            )
            .details(json!({"module": module, "timeout_ms": self.total_ms, "scope": "composition"}))
            .into_envelope()
        })
    }

    /// Runs a module: its steps, or its own prompt with its `@call`s.
    pub(super) fn invoke<'s>(&'s self, node: Node) -> BoxFuture<'s, Done> {
        Box::pin(async move {
            let depth = u32::try_from(node.chain.len()).unwrap_or(u32::MAX);
            let step =
                self.begin(&node.module.name, depth, node.parent, node.via.clone(), node.round, node.input.clone());
            if node.cancel.is_cancelled() {
                let envelope = self.timeout_envelope(None, &node.module.name).unwrap_or_else(|| {
                    Failure::new(
                        ErrorCode::E2002,
                        format!("`{}` was not started: the run was cancelled", node.module.name),
                    )
                    .into_envelope()
                });
                self.finish(step, &envelope, Outcome::TimedOut);
                return Done { envelope, emitted: Map::new(), step };
            }
            let config = match Composition::of(&node.module.manifest) {
                Ok(c) => c,
                Err(errors) => {
                    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    let envelope = Failure::new(
                        ErrorCode::E1004,
                        format!("`{}` has an invalid composition block: {}", node.module.name, list.join("; ")),
                    )
                    .details(json!({"fields": errors.iter().map(|e| e.pointer()).collect::<Vec<_>>()}))
                    .suggest("Fix the module's composition block (noesis validate names each field).")
                    .into_envelope();
                    self.finish(step, &envelope, outcome_of(&envelope));
                    return Done { envelope, emitted: Map::new(), step };
                }
            };
            let context = match node.input.get("_context") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            let mut frame =
                Frame { node: &node, step, config: config.as_ref(), context, emitted: Map::new(), round: None };
            let result = match frame.config {
                Some(c) if c.pattern == Pattern::Iterative => self.iterate(&mut frame, c).await,
                _ => self.pass(&mut frame, node.input.clone(), false).await,
            };
            let envelope = match result {
                Ok(e) | Err(e) => e,
            };
            let envelope = self.hold_to_schema(&node.module, envelope);
            let outcome = if envelope.pointer("/error/code") == Some(&json!("E2002")) && node.cancel.is_cancelled() {
                Outcome::TimedOut
            } else {
                outcome_of(&envelope)
            };
            self.finish(step, &envelope, outcome);
            Done { envelope, emitted: frame.emitted, step }
        })
    }

    /// A composed success must still fit the module's own data schema.
    pub(super) fn hold_to_schema(&self, module: &Module, envelope: Value) -> Value {
        let composed = Composition::of(&module.manifest).ok().flatten().is_some_and(|c| c.has_steps());
        if !composed || !is_ok(&envelope) || module.policy.strictness == Strictness::Low {
            return envelope;
        }
        let Some(schema) = &module.data else { return envelope };
        let violations = schema.compiled.violations(&envelope["data"]);
        if violations.is_empty() {
            return envelope;
        }
        Failure::new(
            ErrorCode::E3001,
            format!("the composed result does not fit `{}`'s data schema: {}", module.name, violations[0].message),
        )
        .details(json!({"violations": violations}))
        .partial(envelope.get("data").cloned())
        .into_envelope()
    }

    /// One pass: the steps when the module has some, else its own prompt
    /// (`traced`: as a step of its own under the module's).
    pub(super) async fn pass(&self, frame: &mut Frame<'_>, input: Value, traced: bool) -> Pass {
        match frame.config {
            Some(c) if c.has_steps() => self.steps(frame, c, input).await,
            _ => self.own_run(frame, input, traced).await,
        }
    }

    pub(super) async fn iterate(&self, frame: &mut Frame<'_>, c: &Composition) -> Pass {
        let original = frame.node.input.clone();
        let mut input = original.clone();
        let mut rounds = 0u32;
        let mut last = Value::Null;
        while rounds < c.iteration.max_iterations {
            frame.round = Some(rounds);
            // Without steps each round is a run of the module's own prompt,
            // traced as a step of its own under the module.
            let envelope = self.pass(frame, input.clone(), true).await?;
            rounds += 1;
            if !is_ok(&envelope) {
                return Err(envelope);
            }
            let mut probe = envelope.clone();
            probe["iteration"] = json!(rounds);
            let stop = c.iteration.stop_condition.as_ref().is_some_and(|s| s.eval(&probe));
            let go_on = c.iteration.continue_condition.as_ref().map(|s| s.eval(&probe));
            last = envelope;
            if stop || go_on == Some(false) || (go_on.is_none() && c.iteration.stop_condition.is_none()) {
                break;
            }
            if frame.node.cancel.is_cancelled() {
                break;
            }
            let module = frame.node.module.name.clone();
            let mut next = original.clone();
            if let Some(obj) = next.as_object_mut() {
                let mut ctx = match obj.get("_context") {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                ctx.insert("previous_result".into(), previous_result(&module, &last));
                obj.insert("_context".into(), Value::Object(ctx));
            }
            input = next;
        }
        frame.round = None;
        if let Some(meta) = last.get_mut("meta").and_then(Value::as_object_mut) {
            meta.insert("iterations".into(), json!(rounds));
        }
        Ok(last)
    }

    /// The module's own prompt, after its `@call`s.
    pub(super) async fn own_run(&self, frame: &mut Frame<'_>, input: Value, traced: bool) -> Pass {
        let node = frame.node;
        let step = if traced {
            let depth = u32::try_from(node.chain.len()).unwrap_or(u32::MAX);
            self.begin(&node.module.name, depth, Some(frame.step), Via::Prompt, frame.round, input.clone())
        } else {
            frame.step
        };
        let calls = find_calls(&node.module.prompt);
        let mut replacements = Vec::with_capacity(calls.len());
        for call in &calls {
            let (child_input, child_args) = match &call.args {
                CallArgs::None => (input.clone(), None),
                CallArgs::Text(t) if t == "$INPUT" => (input.clone(), None),
                CallArgs::Text(t) if t == "$ARGUMENTS" => (json!({}), node.arguments.clone()),
                CallArgs::Text(t) => (json!({}), Some(t.clone())),
                CallArgs::Input(v) => (v.clone(), None),
            };
            let child_input = frame.with_context(child_input, None);
            match self.child(frame, &call.name, child_input, child_args, step, Via::Call).await {
                Child::Value { envelope, emitted, mode, .. } => {
                    frame.absorb(&emitted, mode);
                    replacements.push(inject(&envelope));
                }
                Child::Null => replacements.push("null".to_owned()),
                Child::Abort(envelope) => {
                    if traced {
                        self.finish(step, &envelope, outcome_of(&envelope));
                    }
                    return Err(envelope);
                }
            }
        }
        let module: Arc<Module> = if calls.is_empty() {
            Arc::clone(&node.module)
        } else {
            let mut m = (*node.module).clone();
            m.prompt = replace_calls(&node.module.prompt, &calls, &replacements);
            Arc::new(m)
        };
        let is_root = node.via == Via::Root;
        let options = RunOptions {
            arguments: node.arguments.clone(),
            trace_id: if is_root { self.options.run.trace_id.clone() } else { None },
            on_text: if is_root { self.options.run.on_text.clone() } else { None },
            cancel: Some(node.cancel.clone()),
            ..self.options.run.clone()
        };
        let input = frame.with_context(input, None);
        if node.cancel.is_cancelled() {
            let envelope = self
                .timeout_envelope(None, &module.name)
                .unwrap_or_else(|| Failure::new(ErrorCode::E2002, "the run was cancelled").into_envelope());
            if traced {
                self.finish(step, &envelope, Outcome::TimedOut);
            }
            return Err(envelope);
        }
        let routed = match (&self.options.providers, is_root) {
            (Some(ChildProviders(p)), false) => match p.provider_for(&module) {
                Ok(routed) => routed,
                Err(reason) => {
                    let envelope =
                        Failure::new(ErrorCode::E4001, format!("no provider for `{}`: {reason}", module.name))
                            .into_envelope();
                    if traced {
                        self.finish(step, &envelope, outcome_of(&envelope));
                    }
                    return Err(envelope);
                }
            },
            _ => None,
        };
        let provider: &dyn Provider = routed.as_deref().unwrap_or(self.provider);
        let record = run(&module, provider, input, &options).await;
        if let Some(Value::Object(emitted)) = &record.emitted_context {
            for (k, v) in emitted {
                frame.emitted.insert(k.clone(), v.clone());
            }
        }
        let mut envelope = record.envelope.clone();
        if !is_ok(&envelope)
            && node.cancel.is_cancelled()
            && let Some(e) = self.timeout_envelope(None, &module.name)
        {
            envelope = e;
        }
        self.update(step, |s| {
            s.usage = record.usage;
            s.calls = record.calls;
            s.cost_usd = record.cost_usd;
            s.span = record.span.clone();
        });
        if traced {
            let outcome =
                if node.cancel.is_cancelled() && !is_ok(&envelope) { Outcome::TimedOut } else { outcome_of(&envelope) };
            self.finish(step, &envelope, outcome);
        }
        if is_root {
            *self.root_record.lock().unwrap_or_else(PoisonError::into_inner) = Some(record);
        }
        if is_ok(&envelope) { Ok(envelope) } else { Err(envelope) }
    }

    /// Resolves a child, checks it may run here, runs it (with its timeout
    /// and fallback) and says what its caller gets.
    pub(super) async fn child(
        &self,
        frame: &Frame<'_>,
        name: &str,
        input: Value,
        arguments: Option<String>,
        parent: usize,
        via: Via,
    ) -> Child {
        let req = frame.config.and_then(|c| c.requirement(name));
        let optional = req.is_some_and(|r| r.optional);
        let mut attempt = self.attempt(frame, name, &input, arguments.clone(), parent, via).await;
        if !is_ok(&attempt.envelope)
            && let Some(fallback) = req.and_then(|r| r.fallback.as_deref())
        {
            let code = attempt.envelope.pointer("/error/code").and_then(Value::as_str).unwrap_or("E4000").to_owned();
            self.update(attempt.step, |s| s.outcome = Outcome::FellBack { code, to: fallback.to_owned() });
            attempt =
                self.attempt(frame, fallback, &input, arguments, parent, Via::Fallback { of: name.to_owned() }).await;
        }
        let Attempt { envelope, emitted, module, mode, .. } = attempt;
        if is_ok(&envelope) {
            return Child::Value { envelope, emitted, module, mode };
        }
        if optional {
            return Child::Null;
        }
        Child::Abort(envelope)
    }

    /// One try of one module as a child: resolution, version, cycle, depth,
    /// policies, then the run under its own timeout. Returns the envelope,
    /// what it emitted, the module's name and context mode, and its step.
    pub(super) async fn attempt(
        &self,
        frame: &Frame<'_>,
        name: &str,
        input: &Value,
        arguments: Option<String>,
        parent: usize,
        via: Via,
    ) -> Attempt {
        let chain = frame.chain();
        let depth = u32::try_from(chain.len()).unwrap_or(u32::MAX);
        let req = frame.config.and_then(|c| c.requirement(name));
        let refuse = |failure: Failure, skipped: bool| {
            let envelope = failure.into_envelope();
            let step = self.begin(name, depth, Some(parent), via.clone(), frame.round, input.clone());
            let outcome = if skipped && req.is_some_and(|r| r.optional) {
                Outcome::Skipped { reason: envelope["error"]["message"].as_str().unwrap_or_default().to_owned() }
            } else {
                outcome_of(&envelope)
            };
            self.finish(step, &envelope, outcome);
            Attempt { envelope, emitted: Map::new(), module: name.to_owned(), mode: ContextMode::Fork, step }
        };
        let module = match self.resolver.resolve_from(name, &frame.node.module) {
            Ok(m) => m,
            Err(f) => return refuse(f, true),
        };
        if let Some(range) = req.and_then(|r| r.version.as_ref()) {
            let fits =
                noesis_modules::version::Version::parse(&module.manifest.version).is_ok_and(|v| range.matches(&v));
            if !fits {
                let f = Failure::new(
                    ErrorCode::E4006,
                    format!(
                        "module `{name}` is version {}, which is outside the required range `{range}`",
                        if module.manifest.version.is_empty() { "(none)" } else { &module.manifest.version }
                    ),
                )
                .details(json!({"module": name, "version": module.manifest.version, "required": range.to_string()}))
                .suggest("Install a version in the range, or widen composition.requires[].version.");
                return refuse(f, true);
            }
        }
        if chain.contains(&module.name) {
            let from = chain.iter().position(|m| *m == module.name).unwrap_or(0);
            let cycle: Vec<&str> = chain[from..].iter().map(String::as_str).chain([module.name.as_str()]).collect();
            let f = Failure::new(ErrorCode::E4004, format!("circular dependency: {}", cycle.join(" → ")))
                .details(json!({"chain": cycle}));
            return refuse(f, false);
        }
        if depth > self.max_depth {
            let path: Vec<&str> = chain.iter().map(String::as_str).chain([module.name.as_str()]).collect();
            let f = Failure::new(
                ErrorCode::E4005,
                format!("maximum composition depth ({}) exceeded: {}", self.max_depth, path.join(" → ")),
            )
            .details(json!({"max_depth": self.max_depth, "chain": path}));
            return refuse(f, false);
        }
        // A child may not be allowed what its caller is denied (policies, tools).
        if let Err(f) = noesis_modules::enforce::child_within(&frame.node.module.manifest, &module.manifest) {
            return refuse(f, false);
        }
        let cancel = frame.node.cancel.child_token();
        let limit = req.and_then(|r| r.timeout_ms);
        let fired = Arc::new(AtomicBool::new(false));
        let timer = limit.and_then(|l| Timer::start(Duration::from_millis(l), cancel.clone(), Arc::clone(&fired)));
        let mode = module.manifest.context_mode();
        let node = Node {
            module: Arc::clone(&module),
            input: input.clone(),
            arguments,
            chain,
            parent: Some(parent),
            via,
            round: frame.round,
            cancel: cancel.clone(),
        };
        let done = self.invoke(node).await;
        drop(timer);
        let mut envelope = done.envelope;
        if !is_ok(&envelope)
            && cancel.is_cancelled()
            && let Some(e) = self.timeout_envelope(limit.map(|l| (l, fired.as_ref())), &module.name)
        {
            envelope = e;
            self.update(done.step, |s| {
                s.envelope = envelope.clone();
                s.outcome = Outcome::TimedOut;
            });
        }
        Attempt { envelope, emitted: done.emitted, module: module.name.clone(), mode, step: done.step }
    }
}
