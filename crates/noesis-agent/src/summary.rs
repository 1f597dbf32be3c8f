//! A run as the people and programs that watch it see it: the one JSON
//! shape of where a run stands (`noesis agent --json`, `approve --json`),
//! one line per live event (the same events `noesis serve` streams), a
//! call's arguments in one short line, and what a process that drove the
//! run exits with.

use serde_json::{Value, json};

use std::collections::BTreeMap;

use crate::events::Event;
use crate::record::CallStatus;
use crate::run::{AgentRun, Entry, Outcome, StopReason, ToolEvidence};

/// Exit status of a process whose run waits for a person's decision.
pub const EXIT_AWAITING_APPROVAL: u8 = 3;
/// Exit status of a process whose run was cancelled (resumable), as a
/// shell reports Ctrl-C.
pub const EXIT_CANCELLED: u8 = 130;

/// The run's outcome, calls and usage as JSON: its id, status, step, task,
/// where it was forked from, the outcome and the answer's text, usage,
/// every call and the calls that wait for a decision.
pub fn outcome_json(run: &AgentRun) -> Value {
    let pending: Vec<Value> = run
        .calls
        .iter()
        .filter(|c| c.status == CallStatus::AwaitingApproval)
        .map(|c| json!({"call_id": c.id, "tool": c.tool, "arguments": c.arguments, "arguments_hash": c.arguments_hash}))
        .collect();
    json!({
        "run_id": run.id,
        "status": run.status(),
        "step": run.step,
        "task": run.host.get("task").cloned().unwrap_or_else(|| json!(run.task)),
        "forked_from": run.forked_from.as_ref().map(|(id, step)| json!({"run_id": id, "step": step})),
        "outcome": run.outcome,
        "answer": match &run.outcome { Some(Outcome::Answer { text }) => json!(text), _ => Value::Null },
        // The validated answer as JSON, when the run has an output schema.
        "output": run.output(),
        "usage": run.usage,
        "calls": run.calls,
        "pending": pending,
    })
}

/// What a process that drove `run` exits with: 0 for an answer,
/// [`EXIT_CANCELLED`], [`EXIT_AWAITING_APPROVAL`], else 1.
pub fn exit_status(run: &AgentRun) -> u8 {
    match &run.outcome {
        Some(Outcome::Answer { .. }) => 0,
        Some(Outcome::Cancelled) => EXIT_CANCELLED,
        None if run.awaiting_approval() => EXIT_AWAITING_APPROVAL,
        _ => 1,
    }
}

/// One line of the live view, read from the step's event.
pub fn event_line(e: &Event) -> String {
    let d = &e.data;
    let turn = d["turn"].as_u64().unwrap_or(0) + 1;
    let tool = d["tool"].as_str().unwrap_or("?");
    match e.kind.as_str() {
        "model_call" => format!("  think   turn {turn}"),
        "model_reply" => format!(
            "  think   turn {turn} done in {} ms: {} tool call(s)",
            d["ms"].as_u64().unwrap_or(0),
            d["tool_calls"].as_u64().unwrap_or(0)
        ),
        "tool_call" => format!("  act     {tool} {}", short_args(&d["arguments"])),
        "tool_result" => format!(
            "  act     {tool} {} in {} ms",
            if d["is_error"].as_bool().unwrap_or(false) { "failed" } else { "done" },
            d["ms"].as_u64().unwrap_or(0)
        ),
        "tools_changed" => format!("  tools   changed: {} offered now", d["tools"].as_u64().unwrap_or(0)),
        other => format!("  {other}"),
    }
}

/// Arguments in one short line: `key=value` with long values cut.
pub fn short_args(args: &Value) -> String {
    let Some(map) = args.as_object() else { return clip(&args.to_string(), 60) };
    map.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{k}={}", clip(&v.replace('\n', "⏎"), 40))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

/// What a person is told where a run stopped short of an answer, and
/// what to do next (nothing for an answer): why it stopped, how to go on,
/// or which calls wait for a decision and how to give it.
pub fn next_steps(run: &AgentRun) -> Vec<String> {
    match &run.outcome {
        Some(Outcome::Answer { .. }) => Vec::new(),
        Some(Outcome::Stopped { reason, detail }) => {
            let name = serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned));
            let mut notes = vec![format!("run {} stopped ({}): {detail}", run.id, name.unwrap_or_default())];
            if matches!(reason, StopReason::Stalled | StopReason::Provider) {
                notes.push(format!("continue it with `noesis agent resume {}`", run.id));
            }
            notes
        }
        Some(Outcome::Cancelled) => {
            vec![format!("run {} cancelled; continue it with `noesis agent resume {}`", run.id, run.id)]
        }
        Some(Outcome::Aborted { message }) => {
            vec![format!("run {} aborted{}", run.id, message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
        }
        None if run.awaiting_approval() => {
            let mut notes = vec![format!("run {} waits for approval:", run.id)];
            for c in run.calls.iter().filter(|c| c.status == CallStatus::AwaitingApproval) {
                notes.push(format!("  {}  {} {}  (hash {})", c.id, c.tool, short_args(&c.arguments), c.arguments_hash));
            }
            notes.push(format!(
                "decide with `noesis agent approve {0} [CALL]` or `noesis agent deny {0} [CALL] -m WHY`, then `noesis agent resume {0}`",
                run.id
            ));
            notes
        }
        None => vec![format!("run {} is paused; `noesis agent resume {}` continues it", run.id, run.id)],
    }
}

/// The run as a person reads it (`noesis agent show`): id, task (as
/// stored), status at `step`, where it was forked from, model and usage,
/// then every turn, call and result, the routes the router chose and the
/// outcome.
pub fn run_text(run: &AgentRun, task: &str, step: i64) -> String {
    let mut t = String::new();
    t.push_str(&format!("run      {}\n", run.id));
    t.push_str(&format!("task     {task}\n"));
    t.push_str(&format!("status   {} (step {step})\n", run.status()));
    if let Some((from, step)) = &run.forked_from {
        t.push_str(&format!("forked   from {from} at step {step}\n"));
    }
    if let Some(p) = run.host["provider"].as_str() {
        t.push_str(&format!("model    {p}/{}\n", run.host["model"].as_str().unwrap_or_default()));
    }
    let u = run.usage;
    t.push_str(&format!(
        "usage    {} turns, {} tool calls, {} tokens in, {} out, ${:.4}\n",
        u.turns, u.tool_calls, u.input_tokens, u.output_tokens, u.cost_usd
    ));
    t.push('\n');
    for e in &run.entries {
        match e {
            Entry::Assistant { content, calls } => {
                if !content.is_empty() {
                    t.push_str(&format!("model: {}\n", content.trim()));
                }
                for id in calls {
                    if let Some(c) = run.call(id) {
                        t.push_str(&format!(
                            "  call {} {} {} → {}\n",
                            c.id,
                            c.tool,
                            short_args(&c.arguments),
                            c.status.as_str()
                        ));
                        if c.status == CallStatus::AwaitingApproval {
                            t.push_str(&format!("    arguments hash {}\n", c.arguments_hash));
                        }
                    }
                }
            }
            Entry::ToolResult { call_id } => {
                if let Some(r) = run.call(call_id).and_then(|c| c.result.as_deref()) {
                    let first: String = r.lines().next().unwrap_or_default().chars().take(100).collect();
                    t.push_str(&format!("  result {call_id}: {first}\n"));
                }
            }
            Entry::Note { content } => t.push_str(&format!("note: {}\n", content.trim())),
            Entry::Compaction(c) => {
                t.push_str(&format!(
                    "compacted ({}): the turns above were summarised for the model; {} fact(s) carried\n",
                    c.reason,
                    c.facts.len()
                ));
                for f in &c.facts {
                    t.push_str(&format!("  fact: {} [call {}]\n", f.text, f.call_id));
                }
            }
        }
    }
    let routes: Vec<&str> = run.replies.iter().filter_map(|r| r.route.as_deref()).collect();
    if !routes.is_empty() {
        t.push_str("\nroutes\n");
        for (i, r) in routes.iter().enumerate() {
            t.push_str(&format!("  {}. {r}\n", i + 1));
        }
    }
    if let Some(o) = &run.outcome {
        t.push_str(&format!("\noutcome  {}\n", serde_json::to_string(o).unwrap_or_default()));
    }
    t
}

/// [`spend`]'s rows as a table under `run_text`, when the run spent on more
/// than one agent, role or model (else the usage line says it all).
pub fn spend_text(rows: &[SpendRow]) -> String {
    if rows.len() < 2 {
        return String::new();
    }
    let mut t = String::from("\nspend    agent / role / model: calls, tokens in, out, cost\n");
    for r in rows {
        let under = r.parent.as_deref().map_or(String::new(), |p| format!(" (under {p})"));
        t.push_str(&format!(
            "  {}{under} / {} / {}: {}, {}, {}, ${:.4}\n",
            r.agent, r.role, r.model, r.calls, r.input_tokens, r.output_tokens, r.cost_usd
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;

    #[test]
    fn spend_is_per_agent_role_and_model_and_adds_up_to_the_run() {
        use crate::run::{Action, ToolOutput, ToolSpend};
        use crate::tool::ToolDecl;
        use noesis_llm::{ChatResponse, StructuredMode, ToolCall, Usage};
        let reply = |calls: Vec<(&str, &str)>, input: u64, output: u64| ChatResponse {
            tool_calls: calls
                .into_iter()
                .map(|(id, name)| ToolCall { id: id.into(), name: name.into(), arguments: json!({}) })
                .collect(),
            usage: Some(Usage { input_tokens: input, output_tokens: output }),
            ..ChatResponse::text("done", "m", StructuredMode::Text)
        };
        let tools = vec![
            ToolDecl::read_only("run_module", "m", json!({"type": "object"})),
            ToolDecl::read_only("sub_agent", "s", json!({"type": "object"})),
        ];
        let config = RunConfig { tools, approval: crate::ApprovalPolicy::Auto, ..RunConfig::default() };
        let mut parent = AgentRun::new("p", "t", config.clone(), 0);
        parent.host = json!({"provider": "openai"});
        assert!(matches!(parent.next(0), Action::CallModel(_)));
        parent.on_model_reply(&reply(vec![("m1", "run_module"), ("s1", "sub_agent")], 10, 5), 0.01).unwrap();
        let Action::ExecuteTools(batch) = parent.next(0) else { panic!("the calls run") };
        assert_eq!(batch.len(), 2);
        let spent = |calls, input, output, cost, model: Option<&str>| ToolSpend {
            calls,
            input_tokens: input,
            output_tokens: output,
            cost_usd: cost,
            model: model.map(str::to_owned),
        };
        for c in &batch {
            parent.started(&c.call_id, 0).unwrap();
        }
        parent.finished("m1", ToolOutput::ok("{}").with_spent(spent(1, 100, 50, 0.1, Some("openai/x"))), 0).unwrap();
        let child_out = ToolOutput::ok("found")
            .with_evidence(ToolEvidence::SubAgent { run_id: "p.s1".into() })
            .with_spent(spent(2, 200, 20, 0.2, None));
        parent.finished("s1", child_out, 0).unwrap();
        // The tools' spend is the run's.
        assert_eq!((parent.usage.input_tokens, parent.usage.output_tokens), (310, 75));
        let mut child = AgentRun::new("p.s1", "sub", RunConfig::default(), 0);
        for _ in 0..2 {
            assert!(matches!(child.next(0), Action::CallModel(_)));
            child.on_model_reply(&reply(vec![("r", "read_file")], 100, 10), 0.1).unwrap();
            if let Action::ExecuteTools(b) = child.next(0) {
                child.started(&b[0].call_id, 0).unwrap();
                child.finished(&b[0].call_id, ToolOutput::ok("x"), 0).unwrap();
            }
        }
        let children = BTreeMap::from([("p.s1".to_owned(), child)]);
        let rows = spend(&parent, &children);
        let key = |r: &SpendRow| (r.agent.clone(), r.parent.clone(), r.role.clone(), r.model.clone(), r.calls);
        assert_eq!(
            rows.iter().map(key).collect::<Vec<_>>(),
            [
                ("p".into(), None, "run_module".into(), "openai/x".into(), 1),
                ("p".into(), None, "think".into(), "openai/m".into(), 1),
                ("p.s1".into(), Some("p".into()), "think".into(), "m".into(), 2),
            ]
        );
        let tokens: u64 = rows.iter().map(|r| r.input_tokens + r.output_tokens).sum();
        assert_eq!(tokens, parent.usage.input_tokens + parent.usage.output_tokens);
        // Without the child's run, its call's report stands for it.
        let rows = spend(&parent, &BTreeMap::new());
        let sub = rows.iter().find(|r| r.agent == "p.s1").unwrap();
        assert_eq!((sub.role.as_str(), sub.calls, sub.input_tokens), ("sub_agent", 2, 200));
    }

    #[test]
    fn arguments_are_one_line_with_long_values_cut() {
        assert_eq!(short_args(&json!({"path": "a.rs", "n": 3})), "path=a.rs n=3");
        assert_eq!(short_args(&json!({"text": "one\ntwo"})), "text=one⏎two");
        let long = "x".repeat(50);
        assert_eq!(short_args(&json!({ "s": long })), format!("s={}…", "x".repeat(40)));
        assert_eq!(short_args(&json!([1, 2])), "[1,2]");
        // Not an object: the JSON text, cut by characters, not bytes.
        assert_eq!(short_args(&json!("é".repeat(61))), format!("\"{}…", "é".repeat(59)));
    }

    #[test]
    fn each_event_is_one_line_of_the_live_view() {
        let e = |kind: &str, data: Value| Event::new("t", kind, "r", data);
        assert_eq!(event_line(&e("model_call", json!({"turn": 0}))), "  think   turn 1");
        assert_eq!(
            event_line(&e("model_reply", json!({"turn": 1, "ms": 20, "tool_calls": 2}))),
            "  think   turn 2 done in 20 ms: 2 tool call(s)"
        );
        assert_eq!(
            event_line(&e("tool_call", json!({"tool": "read_file", "arguments": {"path": "a"}}))),
            "  act     read_file path=a"
        );
        assert_eq!(
            event_line(&e("tool_result", json!({"tool": "run", "is_error": true, "ms": 5}))),
            "  act     run failed in 5 ms"
        );
        assert_eq!(event_line(&e("tools_changed", json!({"tools": 4}))), "  tools   changed: 4 offered now");
        assert_eq!(event_line(&e("answer", json!({}))), "  answer");
    }

    #[test]
    fn the_exit_status_and_the_json_say_where_the_run_stands() {
        let mut run = AgentRun::new("r1", "task", RunConfig::default(), 0);
        assert_eq!(exit_status(&run), 1);
        assert_eq!(outcome_json(&run)["status"], "running");
        assert_eq!(outcome_json(&run)["answer"], Value::Null);
        run.outcome = Some(Outcome::Cancelled);
        assert_eq!(exit_status(&run), EXIT_CANCELLED);
        run.outcome = Some(Outcome::Answer { text: "42".into() });
        assert_eq!(exit_status(&run), 0);
        let v = outcome_json(&run);
        assert_eq!(
            (v["run_id"].as_str(), v["answer"].as_str(), v["task"].as_str()),
            (Some("r1"), Some("42"), Some("task"))
        );
        run.host = json!({"task": "as typed"});
        run.forked_from = Some(("r0".into(), 4));
        let v = outcome_json(&run);
        assert_eq!((v["task"].as_str(), &v["forked_from"]), (Some("as typed"), &json!({"run_id": "r0", "step": 4})));
    }

    #[test]
    fn next_steps_say_why_a_run_stopped_and_how_to_go_on() {
        let mut run = AgentRun::new("r1", "task", RunConfig::default(), 0);
        assert_eq!(next_steps(&run), ["run r1 is paused; `noesis agent resume r1` continues it"]);
        run.outcome = Some(Outcome::Aborted { message: Some("no".into()) });
        assert_eq!(next_steps(&run), ["run r1 aborted: no"]);
        run.outcome = Some(Outcome::Cancelled);
        assert_eq!(next_steps(&run), ["run r1 cancelled; continue it with `noesis agent resume r1`"]);
        run.outcome = Some(Outcome::Answer { text: "a".into() });
        assert!(next_steps(&run).is_empty());
    }

    #[test]
    fn a_run_reads_as_its_header_its_entries_and_its_outcome() {
        let mut run = AgentRun::new("r1", "task", RunConfig::default(), 0);
        run.host = json!({"provider": "test", "model": "m"});
        run.forked_from = Some(("r0".into(), 2));
        run.entries.push(Entry::Note { content: " look \n".into() });
        run.outcome = Some(Outcome::Answer { text: "42".into() });
        let t = run_text(&run, "the task", 3);
        assert!(
            t.starts_with(
                "run      r1\ntask     the task\nstatus   done (step 3)\nforked   from r0 at step 2\nmodel    test/m\n"
            ),
            "{t}"
        );
        assert!(t.contains("\nnote: look\n"), "{t}");
        assert!(t.ends_with("\noutcome  {\"outcome\":\"answer\",\"text\":\"42\"}\n"), "{t}");
    }
}

/// What one agent of a run tree spent on one role and model.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SpendRow {
    /// The run that made the calls (the root run or a sub-agent's).
    pub agent: String,
    /// The run that started it, for a sub-agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// `plan`, `think`, `reflect`, or `run_module` for a module's calls.
    pub role: String,
    /// `provider/model` that answered, or the reply's model.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars, as priced when the calls were made.
    pub cost_usd: f64,
}

/// What `run` and its sub-agents (`children`, by run id, however deep)
/// spent, per agent, role and model: the run's own replies, the module
/// runs its `run_module` calls made, then each sub-agent's rows. A
/// sub-agent not in `children` is one row of what its call reported.
/// The rows add up to `run.usage`'s tokens and cost.
pub fn spend(run: &AgentRun, children: &BTreeMap<String, AgentRun>) -> Vec<SpendRow> {
    let mut rows = Vec::new();
    spend_into(run, None, children, &mut rows, 0);
    rows
}

fn spend_into(
    run: &AgentRun,
    parent: Option<&str>,
    children: &BTreeMap<String, AgentRun>,
    rows: &mut Vec<SpendRow>,
    depth: usize,
) {
    let provider = run.host["provider"].as_str();
    let mut own: BTreeMap<(String, String), SpendRow> = BTreeMap::new();
    let mut add = |role: &str, model: String, calls: u64, input: u64, output: u64, cost: f64| {
        let row = own.entry((role.to_owned(), model.clone())).or_insert_with(|| SpendRow {
            agent: run.id.clone(),
            parent: parent.map(str::to_owned),
            role: role.to_owned(),
            model,
            ..SpendRow::default()
        });
        row.calls += calls;
        row.input_tokens += input;
        row.output_tokens += output;
        row.cost_usd += cost;
    };
    for r in &run.replies {
        let model = r.answered_by(provider);
        let (input, output) = r.usage.map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
        add(r.role.as_deref().unwrap_or("think"), model, 1, input, output, r.cost_usd);
    }
    let mut subs = Vec::new();
    for c in &run.calls {
        let Some(s) = &c.spent else { continue };
        let child = c.evidence.iter().find_map(|e| match e {
            ToolEvidence::SubAgent { run_id } => Some(run_id.as_str()),
            _ => None,
        });
        match child {
            // The host's depth limit keeps trees shallow; the bound here
            // only keeps a hand-edited cycle from recursing forever.
            Some(id) if depth < 16 && children.contains_key(id) => subs.push(id.to_owned()),
            Some(id) => rows.push(SpendRow {
                agent: id.to_owned(),
                parent: Some(run.id.clone()),
                role: "sub_agent".into(),
                model: s.model.clone().unwrap_or_else(|| "?".into()),
                calls: u64::from(s.calls),
                input_tokens: s.input_tokens,
                output_tokens: s.output_tokens,
                cost_usd: s.cost_usd,
            }),
            None => add(
                "run_module",
                s.model.clone().unwrap_or_else(|| "?".into()),
                u64::from(s.calls),
                s.input_tokens,
                s.output_tokens,
                s.cost_usd,
            ),
        }
    }
    rows.extend(own.into_values());
    for id in subs {
        if let Some(child) = children.get(&id) {
            spend_into(child, Some(&run.id), children, rows, depth + 1);
        }
    }
}
