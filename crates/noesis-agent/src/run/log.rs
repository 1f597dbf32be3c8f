//! A run's checkpoints as changes: what changed since the state last
//! stored, in the form of `noesis_json::delta`, found without serialising
//! the whole run — so a checkpoint costs what the step added, not what the
//! run holds.
//!
//! It rests on how a run changes: the conversation, the replies and the
//! trace ids only grow; a reply is changed only while it is the last one
//! (its route, its span); a call changes only until it is final (the
//! lifecycle moves forward only), except for the span noted once it ran,
//! which the run marks. So a change is: the small fields that differ, the
//! entries, replies and trace ids added, the last reply again, and the
//! calls that were open at the last checkpoint, marked since, or new.

use serde_json::{Map, Value, json};

use super::AgentRun;

/// What a checkpoint writer remembers of the state it stored last.
#[derive(Debug, Clone, Default)]
pub struct RunCursor {
    id: String,
    step: u64,
    entries: usize,
    calls: usize,
    replies: usize,
    traces: usize,
    /// Calls not final when stored: they may have changed since.
    open: Vec<usize>,
    /// How many late marks (see [`AgentRun::note_call_span`]) were seen.
    marks: usize,
    /// Each small field as stored.
    head: Map<String, Value>,
    /// The whole state as stored, to check each change against (debug
    /// builds only: it costs what the change saves).
    #[cfg(debug_assertions)]
    whole: Value,
}

impl RunCursor {
    /// The run's step when it was stored.
    pub fn step(&self) -> u64 {
        self.step
    }
}

/// A state to store: whole, or the change from the state stored at step
/// `base`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunChange {
    /// The whole run ([`AgentRun::to_json`]).
    Whole(Value),
    /// What changed since step `base`.
    Delta {
        /// The step of the state it changes.
        base: u64,
        /// The change (`noesis_json::delta`).
        delta: Value,
    },
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // A run holds only strings, numbers and JSON values: it always serialises.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn replace(v: Value) -> Value {
    json!({"=": v})
}

impl AgentRun {
    fn head(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("schema_version".into(), to_value(&self.schema_version));
        m.insert("id".into(), to_value(&self.id));
        m.insert("forked_from".into(), to_value(&self.forked_from));
        m.insert("task".into(), to_value(&self.task));
        m.insert("config".into(), to_value(&self.config));
        m.insert("usage".into(), to_value(&self.usage));
        m.insert("outcome".into(), to_value(&self.outcome));
        m.insert("step".into(), to_value(&self.step));
        m.insert("started_ms".into(), to_value(&self.started_ms));
        m.insert("phase".into(), to_value(&self.phase));
        m.insert("awaiting_reply".into(), to_value(&self.awaiting_reply));
        m.insert("plan".into(), to_value(&self.plan));
        m.insert("plan_step".into(), to_value(&self.plan_step));
        m.insert("reflections".into(), to_value(&self.reflections));
        m.insert("format_errors".into(), to_value(&self.format_errors));
        m.insert("failures".into(), to_value(&self.failures));
        m.insert("stall".into(), to_value(&self.stall));
        m.insert("output_retries".into(), to_value(&self.output_retries));
        m.insert("seen_context".into(), to_value(&self.seen_context));
        m.insert("budget_stop".into(), to_value(&self.budget_stop));
        m.insert("dispatched".into(), to_value(&self.dispatched));
        m.insert("host".into(), self.host.clone());
        m
    }

    fn cursor(&self, head: Map<String, Value>) -> RunCursor {
        RunCursor {
            id: self.id.clone(),
            step: self.step,
            entries: self.entries.len(),
            calls: self.calls.len(),
            replies: self.replies.len(),
            traces: self.traces.len(),
            open: self.calls.iter().enumerate().filter(|(_, c)| !c.status.is_final()).map(|(i, _)| i).collect(),
            marks: self.late_marks.0.len(),
            head,
            #[cfg(debug_assertions)]
            whole: Value::Null,
        }
    }

    /// The run to store now: the change since `last` (the cursor of the
    /// state stored before, at a lower step), else whole; and the cursor
    /// of what is stored once it is.
    pub fn change_since(&self, last: Option<&RunCursor>) -> (RunChange, RunCursor) {
        let head = self.head();
        let fits = |c: &RunCursor| {
            c.id == self.id
                && c.step < self.step
                && c.entries <= self.entries.len()
                && c.calls <= self.calls.len()
                && c.replies <= self.replies.len()
                && c.traces <= self.traces.len()
                && c.marks <= self.late_marks.0.len()
        };
        let Some(last) = last.filter(|c| fits(c)) else {
            let whole = self.to_json();
            #[allow(unused_mut)]
            let mut cursor = self.cursor(head);
            #[cfg(debug_assertions)]
            {
                cursor.whole = whole.clone();
            }
            return (RunChange::Whole(whole), cursor);
        };
        let mut fields = Map::new();
        for (k, v) in &head {
            if last.head.get(k) != Some(v) {
                fields.insert(k.clone(), replace(v.clone()));
            }
        }
        let grown = |from: usize, items: Vec<Value>| json!({"[": from, "+": items});
        if self.entries.len() > last.entries {
            fields.insert(
                "entries".into(),
                grown(last.entries, self.entries[last.entries..].iter().map(to_value).collect()),
            );
        }
        // The last reply stored may have changed since; later ones are new.
        let from = last.replies.saturating_sub(1);
        if self.replies.len() > from {
            fields.insert("replies".into(), grown(from, self.replies[from..].iter().map(to_value).collect()));
        }
        if self.traces.len() > last.traces {
            let added = self.traces[last.traces..].iter().map(to_value).collect();
            // An empty list is not stored at all.
            fields.insert(
                "traces".into(),
                if last.traces == 0 { replace(Value::Array(added)) } else { grown(last.traces, added) },
            );
        }
        let mut changed: Vec<usize> = last.open.clone();
        changed.extend(self.late_marks.0[last.marks..].iter().copied().filter(|&i| i < last.calls));
        changed.sort_unstable();
        changed.dedup();
        let mut calls = Map::from_iter([("[".to_owned(), json!(last.calls))]);
        if !changed.is_empty() {
            let patched: Map<String, Value> =
                changed.iter().map(|&i| (i.to_string(), replace(to_value(&self.calls[i])))).collect();
            calls.insert("~".into(), Value::Object(patched));
        }
        if self.calls.len() > last.calls {
            calls.insert("+".into(), Value::Array(self.calls[last.calls..].iter().map(to_value).collect()));
        }
        if calls.len() > 1 {
            fields.insert("calls".into(), Value::Object(calls));
        }
        let delta = json!({"{": fields});
        #[allow(unused_mut)]
        let mut cursor = self.cursor(head);
        #[cfg(debug_assertions)]
        {
            let mut whole = last.whole.clone();
            if !whole.is_null() {
                let applied = noesis_json::delta::apply(&mut whole, &delta);
                debug_assert!(applied.is_ok() && whole == self.to_json(), "a run's change does not rebuild it");
            }
            cursor.whole = whole;
        }
        (RunChange::Delta { base: last.step, delta }, cursor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::RunConfig;
    use crate::run::{Action, ToolOutput};
    use crate::tool::ToolDecl;

    fn rebuilt(stored: &mut Value, change: &RunChange) {
        match change {
            RunChange::Whole(v) => *stored = v.clone(),
            RunChange::Delta { delta, .. } => noesis_json::delta::apply(stored, delta).unwrap(),
        }
    }

    #[test]
    fn every_change_rebuilds_the_run_and_carries_only_what_the_step_added() {
        let decl = ToolDecl::read_only("add", "adds", json!({"type": "object"}));
        let mut config = RunConfig { tools: vec![decl], ..RunConfig::default() };
        config.limits.max_turns = 100;
        let mut run = AgentRun::new("r", "count", config, 0);
        let (first, mut cursor) = run.change_since(None);
        assert!(matches!(first, RunChange::Whole(_)));
        let mut stored = run.to_json();
        let mut sizes = Vec::new();
        for turn in 0..40u64 {
            let Action::CallModel(_) = run.next(0) else { panic!("{:?}", run.next(0)) };
            let reply = noesis_llm::ChatResponse {
                tool_calls: vec![noesis_llm::ToolCall {
                    id: format!("c{turn}"),
                    name: "add".into(),
                    arguments: json!({"x": turn}),
                }],
                ..noesis_llm::ChatResponse::text("", "m", noesis_llm::StructuredMode::Text)
            };
            run.on_model_reply(&reply, 0.0).unwrap();
            run.note_route(format!("route {turn}"));
            let id = format!("c{turn}");
            for step in 0..3 {
                match step {
                    0 => {
                        let Action::ExecuteTools(_) = run.next(0) else { panic!() };
                        run.started(&id, turn).unwrap();
                    }
                    1 => run.finished(&id, ToolOutput::ok("x".repeat(512)), turn).unwrap(),
                    _ => run.note_call_span(
                        &id,
                        noesis_trace::SpanIds { trace_id: "t".into(), span_id: format!("s{turn}") },
                    ),
                }
                let (change, next) = run.change_since(Some(&cursor));
                if let RunChange::Delta { delta, .. } = &change {
                    sizes.push(delta.to_string().len());
                }
                rebuilt(&mut stored, &change);
                assert_eq!(stored, run.to_json(), "turn {turn}, step {step}");
                cursor = next;
            }
        }
        // What a step writes does not grow with the run.
        let (early, late) = (sizes[..30].iter().max().unwrap(), sizes[sizes.len() - 30..].iter().max().unwrap());
        assert!(late < &(early + 64), "early {early} bytes, late {late}");
    }

    #[test]
    fn a_cursor_that_does_not_fit_gives_the_whole_run() {
        let mut run = AgentRun::new("r", "t", RunConfig::default(), 0);
        let (_, cursor) = run.change_since(None);
        // The same step again (asking for the next action changes the run
        // without a step): whole, to replace what that step stored.
        let _ = run.next(0);
        assert!(matches!(run.change_since(Some(&cursor)).0, RunChange::Whole(_)));
        let reply = noesis_llm::ChatResponse::text("done", "m", noesis_llm::StructuredMode::Text);
        run.on_model_reply(&reply, 0.0).unwrap();
        let (change, _) = run.change_since(Some(&cursor));
        assert!(matches!(change, RunChange::Delta { base: 0, .. }), "{change:?}");
        // A run that lost entries (another run under the same id): whole.
        run.entries.clear();
        let mut bigger = cursor.clone();
        bigger.entries = 5;
        bigger.step = 0;
        assert!(matches!(run.change_since(Some(&bigger)).0, RunChange::Whole(_)));
    }
}
