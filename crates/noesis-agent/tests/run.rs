//! The state machine driven by scripted replies: multi-round tool use,
//! errors fed back, budgets, approvals, repeats, reflection, plans, and
//! stopping and continuing through JSON at any step.

use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, CallStatus, Decision, Effect, Effects, Entry, INTERRUPTED, Layer, NO_RESULT,
    Outcome, Permissions, RunConfig, SCHEMA_VERSION, StepError, StopReason, Strategy, ToolDecl, ToolOutput, Verdict,
};
use noesis_llm::{ChatRequest, ChatResponse, ResponseFormat, Role, StructuredMode, ToolCall, Usage};
use serde_json::{Value, json};

fn text(t: &str) -> ChatResponse {
    ChatResponse::text(t, "m", StructuredMode::Text)
}

fn calls(list: &[(&str, &str, Value)]) -> ChatResponse {
    ChatResponse {
        tool_calls: list
            .iter()
            .map(|(id, name, args)| ToolCall { id: (*id).into(), name: (*name).into(), arguments: args.clone() })
            .collect(),
        ..text("")
    }
}

fn path_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false})
}

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::read_only("read_file", "Reads a file.", path_schema()),
        ToolDecl::read_only("list_dir", "Lists a folder.", path_schema()),
        ToolDecl::read_only(
            "edit_file",
            "Replaces text in a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}, "required": ["path", "old", "new"]}),
        )
        .with_effects(Effects { writes_files: true, ..Effects::default() }),
        ToolDecl::read_only("run_command", "Runs a command.", json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}))
            .with_effects(Effects { runs_commands: true, ..Effects::default() }),
    ]
}

/// The commands the scripts run are admitted as `--allow-command` does.
fn config(approval: ApprovalPolicy) -> RunConfig {
    let commands = ["cargo test", "rm", "ls"].map(str::to_owned);
    RunConfig { tools: tools(), approval, permissions: Permissions::from_commands(&commands), ..RunConfig::default() }
}

/// `config(approval)` with an operator's layer of rules.
fn with_rules(approval: ApprovalPolicy, allow: &[&str], ask: &[&str], deny: &[&str]) -> RunConfig {
    let mut layer = Layer::granting("operator");
    for (effect, rules) in [(Effect::Allow, allow), (Effect::Ask, ask), (Effect::Deny, deny)] {
        for r in rules {
            layer.add(effect, r, "noesis.toml").unwrap();
        }
    }
    RunConfig { permissions: Permissions::default().with_layer(layer), ..config(approval) }
}

/// What the scripted world did: requests seen, tools executed.
#[derive(Default)]
struct Log {
    requests: Vec<ChatRequest>,
    executed: Vec<(String, Value)>,
    batches: Vec<usize>,
}

/// Drives `run` with `replies` and a tool function until it is done or
/// waits for approval; with `roundtrip`, the run goes through JSON before
/// every step, as if each step were taken by a new process.
fn drive(
    run: &mut AgentRun,
    replies: &mut std::vec::IntoIter<ChatResponse>,
    tool: &mut dyn FnMut(&str, &Value) -> ToolOutput,
    log: &mut Log,
    roundtrip: bool,
) -> Action {
    for _ in 0..200 {
        if roundtrip {
            *run = AgentRun::from_json(&run.to_json()).unwrap();
        }
        match run.next(0) {
            Action::CallModel(request) => {
                log.requests.push(request);
                let reply = replies.next().expect("the script ran out of replies");
                run.on_model_reply(&reply, 0.01).unwrap();
            }
            Action::ExecuteTools(batch) => {
                log.batches.push(batch.len());
                for call in &batch {
                    run.started(&call.call_id, 0).unwrap();
                }
                for call in batch {
                    log.executed.push((call.tool.clone(), call.arguments.clone()));
                    let out = tool(&call.tool, &call.arguments);
                    run.finished(&call.call_id, out, 0).unwrap();
                }
            }
            other => return other,
        }
    }
    panic!("the run did not finish");
}

fn echo_tool(name: &str, args: &Value) -> ToolOutput {
    ToolOutput::ok(format!("{name} {args}"))
}

/// The tool messages of a request, in order: (call id, content).
fn tool_messages(r: &ChatRequest) -> Vec<(String, String)> {
    r.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.clone().unwrap_or_default(), m.content.clone()))
        .collect()
}

fn answer(action: Action) -> String {
    match action {
        Action::Done(Outcome::Answer { text }) => text,
        other => panic!("not an answer: {other:?}"),
    }
}

#[test]
fn read_edit_run_then_answer_over_several_rounds() {
    for roundtrip in [false, true] {
        let mut run = AgentRun::new("r", "Fix the typo in a.txt and run the tests.", config(ApprovalPolicy::Auto), 0);
        let mut replies = vec![
            calls(&[("c1", "read_file", json!({"path": "a.txt"}))]),
            calls(&[("c2", "edit_file", json!({"path": "a.txt", "old": "teh", "new": "the"}))]),
            calls(&[("c3", "run_command", json!({"command": "cargo test"}))]),
            text("Fixed and the tests pass."),
        ]
        .into_iter();
        let mut log = Log::default();
        let end = drive(&mut run, &mut replies, &mut echo_tool, &mut log, roundtrip);
        assert_eq!(answer(end), "Fixed and the tests pass.");
        let names: Vec<&str> = log.executed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["read_file", "edit_file", "run_command"]);
        assert!(run.calls.iter().all(|c| c.status == CallStatus::Completed));
        // The last request carries every call's result, each right after its call.
        let last = log.requests.last().unwrap();
        let ids: Vec<String> = tool_messages(last).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["c1", "c2", "c3"]);
        let roles: Vec<Role> = last.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles[..3], [Role::System, Role::User, Role::Assistant]);
        assert_eq!(roles[3], Role::Tool);
        assert_eq!(last.tools.len(), 4);
        assert_eq!((run.usage.turns, run.usage.tool_calls), (4, 3));
    }
}

#[test]
fn a_tool_error_is_fed_back_and_the_model_recovers() {
    let mut run = AgentRun::new("r", "Read b.txt", config(ApprovalPolicy::Auto), 0);
    let mut replies = vec![
        calls(&[("c1", "read_file", json!({"path": "b.txt"}))]),
        calls(&[("c2", "list_dir", json!({"path": "."}))]),
        calls(&[("c3", "read_file", json!({"path": "B.txt"}))]),
        text("done"),
    ]
    .into_iter();
    let mut log = Log::default();
    let mut tool = |name: &str, args: &Value| {
        if name == "read_file" && args["path"] == "b.txt" {
            ToolOutput::error("b.txt: no such file")
        } else {
            ToolOutput::ok("B.txt")
        }
    };
    assert_eq!(answer(drive(&mut run, &mut replies, &mut tool, &mut log, false)), "done");
    let seen = &tool_messages(&log.requests[1])[0].1;
    assert!(seen.starts_with("error: b.txt: no such file") && seen.contains("try again"), "{seen}");
    assert_eq!(run.calls[0].status, CallStatus::Failed);
    assert_eq!(run.calls[2].status, CallStatus::Completed);
}

#[test]
fn invalid_arguments_and_unknown_tools_are_fed_back_without_running() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    let mut replies = vec![
        calls(&[("c1", "read_file", json!({"file": "a"})), ("c2", "rm_rf", json!({}))]),
        calls(&[("c3", "read_file", json!({"path": "a"}))]),
        text("ok"),
    ]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "ok");
    assert_eq!(log.executed.len(), 1, "only the valid call ran");
    let fed = tool_messages(&log.requests[1]);
    assert!(fed[0].1.contains("invalid arguments for `read_file`") && fed[0].1.contains("path"), "{}", fed[0].1);
    assert!(fed[0].1.contains("Fix the errors and try again"));
    assert!(fed[1].1.contains("there is no tool `rm_rf`") && fed[1].1.contains("read_file, list_dir"), "{}", fed[1].1);
}

#[test]
fn a_tool_that_keeps_failing_is_withdrawn() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.tools[0].max_failures = 2;
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![
        calls(&[("c1", "read_file", json!({"path": "a"}))]),
        calls(&[("c2", "read_file", json!({"path": "a"}))]),
        calls(&[("c3", "read_file", json!({"path": "a"}))]),
        text("gave up"),
    ]
    .into_iter();
    let mut log = Log::default();
    let mut tool = |_: &str, _: &Value| ToolOutput::error("disk on fire");
    drive(&mut run, &mut replies, &mut tool, &mut log, false);
    assert_eq!(log.executed.len(), 2);
    assert!(run.calls[2].result.as_deref().unwrap().contains("no longer available"));
    assert!(!log.requests[2].tools.iter().any(|t| t.name == "read_file"), "withdrawn from the request too");
}

#[test]
fn read_only_calls_of_a_turn_run_together_and_results_keep_call_order() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    let mut replies = vec![
        calls(&[
            ("a", "read_file", json!({"path": "1"})),
            ("b", "list_dir", json!({"path": "."})),
            ("c", "read_file", json!({"path": "2"})),
            ("d", "edit_file", json!({"path": "1", "old": "x", "new": "y"})),
            ("e", "read_file", json!({"path": "3"})),
        ]),
        text("ok"),
    ]
    .into_iter();
    let mut log = Log::default();
    drive(&mut run, &mut replies, &mut echo_tool, &mut log, false);
    assert_eq!(log.batches, [3, 1, 1], "three reads together, the write alone, then the last read");
    let ids: Vec<String> = tool_messages(&log.requests[1]).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
}

/// Issue 29: the sub-agent calls of one turn are handed out together,
/// like reads, though each may write; a call of another kind between them
/// ends the batch, and reads never join a batch of such calls.
#[test]
fn calls_of_a_tool_that_may_run_beside_its_siblings_are_handed_out_together() {
    let sub_agent = ToolDecl::read_only(
        "sub_agent",
        "Hands a sub-task to a new agent.",
        json!({"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}),
    )
    .with_effects(Effects { writes_files: true, runs_commands: true, ..Effects::default() })
    .concurrent();
    let mut config = config(ApprovalPolicy::Auto);
    config.tools.push(sub_agent);
    let task = |t: &str| json!({"task": t});
    let mut run = AgentRun::new("r", "t", config, 0);
    let mut replies = vec![
        calls(&[
            ("a", "sub_agent", task("one")),
            ("b", "sub_agent", task("two")),
            ("c", "sub_agent", task("three")),
            ("d", "read_file", json!({"path": "1"})),
            ("e", "sub_agent", task("four")),
            ("f", "edit_file", json!({"path": "1", "old": "x", "new": "y"})),
            ("g", "sub_agent", task("five")),
            ("h", "sub_agent", task("six")),
        ]),
        text("ok"),
    ]
    .into_iter();
    let mut log = Log::default();
    drive(&mut run, &mut replies, &mut echo_tool, &mut log, false);
    assert_eq!(log.batches, [3, 1, 1, 1, 2], "three sub-agents, the read, one, the write, two");
    let ids: Vec<String> = tool_messages(&log.requests[1]).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e", "f", "g", "h"]);
    // The flag is left out of a declaration that does not set it, so runs
    // stored before it existed read back the same and go on one at a time.
    let stored = serde_json::to_value(&run.config.tools).unwrap();
    assert_eq!(stored.as_array().unwrap().iter().filter(|t| t.get("concurrent").is_some()).count(), 1);
    let old: ToolDecl =
        serde_json::from_value(json!({"name": "sub_agent", "description": "", "parameters": {}})).unwrap();
    assert!(!old.concurrent);
}

/// A tool world for stall tests: files by path, `edit_file` replaces the
/// whole file, `run_command` reports a test run whose timing varies.
struct World {
    files: std::collections::BTreeMap<String, String>,
    runs: u32,
}

impl World {
    fn new(files: &[(&str, &str)]) -> World {
        World { files: files.iter().map(|(p, c)| ((*p).to_owned(), (*c).to_owned())).collect(), runs: 0 }
    }

    fn call(&mut self, tool: &str, args: &Value) -> ToolOutput {
        let path = args["path"].as_str().unwrap_or_default().to_owned();
        let evidence = |content: &str| noesis_agent::ToolEvidence::File {
            path: path.clone(),
            blake3: blake3::hash(content.as_bytes()).to_hex().to_string(),
        };
        match tool {
            "read_file" => match self.files.get(&path) {
                Some(c) => ToolOutput::ok(c.clone()).with_evidence(evidence(c)),
                None => ToolOutput::error(format!("no file {path}")),
            },
            "edit_file" => {
                let new = args["new"].as_str().unwrap_or_default().to_owned();
                let out = ToolOutput::ok(format!("wrote {} bytes to {path}", new.len())).with_evidence(evidence(&new));
                self.files.insert(path, new);
                out
            }
            "run_command" => {
                self.runs += 1;
                let passing = self.files.get("lib.rs").is_some_and(|c| c.contains("fixed"));
                let verdict = if passing { "1 passed" } else { "1 failed" };
                ToolOutput::ok(format!("exit 1\n{verdict} in 0.{:02}s", self.runs % 100))
            }
            _ => ToolOutput::ok("listed"),
        }
    }
}

fn stalled_run(replies: Vec<ChatResponse>, world: &mut World) -> (AgentRun, Action, Log) {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_turns = 100;
    cfg.limits.max_tool_calls = 200;
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = replies.into_iter();
    let mut log = Log::default();
    let end = drive(&mut run, &mut replies, &mut |t, a| world.call(t, a), &mut log, true);
    (run, end, log)
}

fn warnings(run: &AgentRun) -> usize {
    run.entries.iter().filter(|e| matches!(e, Entry::Note { content } if content.contains("added nothing new"))).count()
}

fn stop_reason(end: &Action) -> StopReason {
    match end {
        Action::Done(Outcome::Stopped { reason, .. }) => *reason,
        other => panic!("not stopped: {other:?}"),
    }
}

#[test]
fn the_same_call_over_and_over_is_warned_once_then_stopped_as_stalled() {
    let mut world = World::new(&[("a", "alpha")]);
    let same = || calls(&[("", "read_file", json!({"path": "a"}))]);
    let (run, end, log) = stalled_run((0..10).map(|_| same()).collect(), &mut world);
    assert_eq!(stop_reason(&end), StopReason::Stalled, "{end:?}");
    // One read that taught something, three that did not (then the
    // warning), and one more.
    assert_eq!(log.executed.len(), 5);
    assert_eq!(warnings(&run), 1);
    let warning = tool_messages(&log.requests[4]);
    assert_eq!(warning.len(), 4, "the warning came after the fourth read");
    let note = log.requests[4].messages.last().unwrap();
    assert!(note.content.contains(r#"`read_file` {"path":"a"} (3 times)"#), "{}", note.content);
    let Action::Done(Outcome::Stopped { detail, .. }) = &end else { unreachable!() };
    assert!(detail.contains("4 turns in a row"), "{detail}");
    // Ids the provider left empty were made unique.
    let mut ids: Vec<&str> = run.calls.iter().map(|c| c.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 5);
}

#[test]
fn reading_two_unchanged_files_by_turns_is_a_stall_too() {
    // Never the same call twice in a row: a detector of repeats misses it.
    let mut world = World::new(&[("a", "alpha"), ("b", "beta")]);
    let replies =
        (0..10).map(|i| calls(&[("", "read_file", json!({"path": if i % 2 == 0 { "a" } else { "b" }}))])).collect();
    let (run, end, log) = stalled_run(replies, &mut world);
    assert_eq!(stop_reason(&end), StopReason::Stalled);
    assert_eq!(log.executed.len(), 6, "two reads that taught something, four that did not");
    assert_eq!(warnings(&run), 1);
}

#[test]
fn rewriting_the_same_fix_and_rerunning_the_failing_tests_is_a_stall() {
    // The test output differs in its timing only, the file gets the same
    // bytes each time.
    let mut world = World::new(&[("lib.rs", "broken")]);
    let mut replies = Vec::new();
    for _ in 0..8 {
        replies.push(calls(&[("", "edit_file", json!({"path": "lib.rs", "old": "", "new": "still broken"}))]));
        replies.push(calls(&[("", "run_command", json!({"command": "cargo test"}))]));
    }
    let (run, end, log) = stalled_run(replies, &mut world);
    assert_eq!(stop_reason(&end), StopReason::Stalled);
    assert_eq!(log.executed.len(), 6, "the first edit and test run were news, four turns after them were not");
    assert!(world.runs >= 2);
    assert_eq!(warnings(&run), 1);
}

#[test]
fn a_long_run_that_keeps_learning_is_never_stopped() {
    // 30 turns, each reading a file not read before or editing one, tests
    // that change outcome once the fix is in; then the answer.
    let files: Vec<(String, String)> = (0..20).map(|i| (format!("f{i}"), format!("content {i}"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let mut world = World::new(&refs);
    let mut replies: Vec<ChatResponse> =
        (0..20).map(|i| calls(&[("", "read_file", json!({"path": format!("f{i}")}))])).collect();
    replies.push(calls(&[("", "run_command", json!({"command": "cargo test"}))]));
    for i in 0..8 {
        replies.push(calls(&[("", "edit_file", json!({"path": "lib.rs", "old": "", "new": format!("attempt {i}")}))]));
    }
    replies.push(calls(&[("", "edit_file", json!({"path": "lib.rs", "old": "", "new": "fixed"}))]));
    replies.push(calls(&[("", "run_command", json!({"command": "cargo test"}))]));
    replies.push(text("fixed it"));
    let (run, end, log) = stalled_run(replies, &mut world);
    assert_eq!(answer(end), "fixed it");
    assert_eq!(log.executed.len(), 31);
    assert_eq!(warnings(&run), 0);
}

#[test]
fn progress_after_the_warning_clears_it_and_a_resumed_stall_goes_on() {
    let mut world = World::new(&[("a", "alpha"), ("b", "beta"), ("c", "gamma")]);
    let read = |p: &str| calls(&[("", "read_file", json!({"path": p}))]);
    // Warned after four reads of `a`; reading `b` is news and clears the
    // warning, so three more idle turns warn again rather than stop.
    let mut replies: Vec<ChatResponse> = (0..4).map(|_| read("a")).collect();
    replies.push(read("b"));
    replies.extend((0..5).map(|_| read("b")));
    let (mut run, end, _) = stalled_run(replies, &mut world);
    assert_eq!(stop_reason(&end), StopReason::Stalled);
    assert_eq!(warnings(&run), 2);
    assert_eq!(run.status(), "stopped");
    // A person resumes it: the model is told, and goes on.
    run.resume();
    assert!(run.outcome.is_none());
    let mut log = Log::default();
    let mut replies = vec![read("c"), text("done")].into_iter();
    let end = drive(&mut run, &mut replies, &mut |t, a| world.call(t, a), &mut log, false);
    assert_eq!(answer(end), "done");
    let told = &log.requests[0].messages.last().unwrap().content;
    assert!(told.contains("a person resumed it"), "{told}");
}

#[test]
fn runs_stored_with_the_repeat_limit_load_with_it_as_the_stall_limit() {
    let mut stored = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0).to_json();
    let limits = stored["config"]["limits"].as_object_mut().unwrap();
    let k = limits.remove("stall_steps").unwrap();
    limits.insert("repeat_limit".into(), json!(5));
    assert_eq!(k, json!(3));
    stored.as_object_mut().unwrap().remove("stall");
    stored.as_object_mut().unwrap().insert("repeat".into(), json!(["abc", 2]));
    stored.as_object_mut().unwrap().insert("corrected".into(), json!(true));
    let run = AgentRun::from_json(&stored).unwrap();
    assert_eq!(run.config.limits.stall_steps, 5);
}

#[test]
fn each_budget_ends_the_run_with_its_reason() {
    let looping = || (0..30).map(|i| calls(&[("", "read_file", json!({"path": i.to_string()}))])).collect::<Vec<_>>();
    let stop = |cfg: RunConfig, replies: Vec<ChatResponse>| {
        let mut run = AgentRun::new("r", "t", cfg, 1_000);
        let mut log = Log::default();
        match drive(&mut run, &mut replies.into_iter(), &mut echo_tool, &mut log, false) {
            Action::Done(Outcome::Stopped { reason, detail }) => (reason, detail, run),
            other => panic!("{other:?}"),
        }
    };
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_turns = 3;
    let (reason, detail, run) = stop(cfg, looping());
    assert_eq!((reason, run.usage.turns), (StopReason::MaxTurns, 3));
    assert!(detail.contains("limit is 3"), "{detail}");

    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_tool_calls = 2;
    let (reason, _, run) = stop(cfg, looping());
    assert_eq!(reason, StopReason::MaxToolCalls);
    assert_eq!(run.calls.iter().filter(|c| c.status == CallStatus::Completed).count(), 2);
    assert!(run.calls[2].result.as_deref().unwrap().contains("budget (2) is used up"));

    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_tokens = Some(250);
    let with_usage: Vec<ChatResponse> = looping()
        .into_iter()
        .map(|mut r| {
            r.usage = Some(Usage { input_tokens: 100, output_tokens: 20 });
            r
        })
        .collect();
    let (reason, _, run) = stop(cfg, with_usage);
    assert_eq!((reason, run.usage.turns), (StopReason::TokenBudget, 3));

    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_cost_usd = Some(0.025);
    let (reason, _, run) = stop(cfg, looping());
    assert_eq!((reason, run.usage.turns), (StopReason::CostBudget, 3));

    // The wall clock is the driver's: a run started at 1 000 ms, asked at 61 000.
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_wall_ms = Some(60_000);
    let mut run = AgentRun::new("r", "t", cfg, 1_000);
    assert!(matches!(run.next(60_999), Action::CallModel(_)));
    run.on_model_reply(&text("thinking"), 0.0).ok();
    let mut run = AgentRun::new("r", "t", run.config.clone(), 1_000);
    assert!(matches!(run.next(61_000), Action::Done(Outcome::Stopped { reason: StopReason::WallClock, .. })));
}

fn pending(action: &Action) -> Vec<noesis_agent::Pending> {
    match action {
        Action::AwaitApproval(p) => p.clone(),
        other => panic!("not awaiting approval: {other:?}"),
    }
}

fn decision(p: &noesis_agent::Pending, verdict: Verdict) -> Decision {
    Decision { call_id: p.call_id.clone(), tool: p.tool.clone(), arguments_hash: p.arguments_hash.clone(), verdict }
}

#[test]
fn approvals_are_bound_to_the_call_and_its_arguments() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Ask), 0);
    let mut replies = vec![
        calls(&[
            ("r1", "read_file", json!({"path": "a"})),
            ("w1", "edit_file", json!({"path": "a", "old": "x", "new": "y"})),
            ("x1", "run_command", json!({"command": "rm -rf /"})),
        ]),
        text("done"),
    ]
    .into_iter();
    let mut log = Log::default();
    let waiting = drive(&mut run, &mut replies, &mut echo_tool, &mut log, true);
    let p = pending(&waiting);
    // Both calls that change the world wait together; the read was approved by itself.
    assert_eq!(p.iter().map(|p| p.call_id.as_str()).collect::<Vec<_>>(), ["w1", "x1"]);
    assert_eq!(run.call("r1").unwrap().status, CallStatus::Approved);
    assert!(log.executed.is_empty(), "nothing runs before the turn is decided");
    assert!(run.awaiting_approval());

    // A decision made for other arguments or another tool changes nothing.
    let before = run.to_json();
    let mut stale = decision(&p[0], Verdict::Approve);
    stale.arguments_hash = "0".repeat(64);
    assert!(matches!(run.decide(&[stale]), Err(StepError::StaleDecision { what: "arguments", .. })));
    let mut wrong_tool = decision(&p[0], Verdict::Approve);
    wrong_tool.tool = "read_file".into();
    assert!(matches!(
        run.decide(&[decision(&p[1], Verdict::Approve), wrong_tool]),
        Err(StepError::StaleDecision { .. })
    ));
    // Edited arguments must fit the tool's schema.
    let bad_edit = decision(&p[0], Verdict::ApproveEdited { arguments: json!({"path": "a"}) });
    assert!(matches!(run.decide(&[bad_edit]), Err(StepError::InvalidEdit { .. })));
    assert_eq!(run.to_json(), before, "refused decisions leave the run as it was");

    let edited = json!({"path": "a", "old": "x", "new": "z"});
    run.decide(&[
        decision(&p[0], Verdict::ApproveEdited { arguments: edited.clone() }),
        decision(&p[1], Verdict::Deny { message: Some("never delete the root".into()) }),
    ])
    .unwrap();
    let end = drive(&mut run, &mut replies, &mut echo_tool, &mut log, true);
    assert_eq!(answer(end), "done");
    assert_eq!(log.executed, [("read_file".into(), json!({"path": "a"})), ("edit_file".into(), edited)]);
    let fed = tool_messages(log.requests.last().unwrap());
    assert_eq!(fed[2].1, "denied by the user: never delete the root");
    assert_eq!(run.call("x1").unwrap().status, CallStatus::Denied);
    // Deciding again on a decided call is refused.
    assert!(run.decide(&[decision(&p[0], Verdict::Approve)]).is_err());
}

#[test]
fn abort_ends_the_run_and_never_policy_denies_without_asking() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Ask), 0);
    let mut replies = vec![calls(&[("w1", "edit_file", json!({"path": "a", "old": "x", "new": "y"}))])].into_iter();
    let mut log = Log::default();
    let p = pending(&drive(&mut run, &mut replies, &mut echo_tool, &mut log, false));
    run.decide(&[decision(&p[0], Verdict::Abort { message: Some("wrong task".into()) })]).unwrap();
    assert_eq!(run.next(0), Action::Done(Outcome::Aborted { message: Some("wrong task".into()) }));
    assert_eq!(run.call("w1").unwrap().status, CallStatus::Denied);
    assert!(log.executed.is_empty());

    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Never), 0);
    let mut replies =
        vec![calls(&[("w1", "edit_file", json!({"path": "a", "old": "x", "new": "y"}))]), text("ok")].into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "ok");
    assert!(log.executed.is_empty());
    assert!(tool_messages(&log.requests[1])[0].1.starts_with("denied:"));
}

#[test]
fn malformed_replies_are_corrected_then_stop_the_run_at_three() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    let broken = || calls(&[("", "read_file", json!("{\"path\": \"a"))]);
    let mut replies = vec![text(""), broken(), text("  "), text("fine"), text(""), broken(), broken()].into_iter();
    let mut log = Log::default();
    // Empty, broken, empty: three in a row.
    let end = drive(&mut run, &mut replies, &mut echo_tool, &mut log, false);
    assert!(matches!(end, Action::Done(Outcome::Stopped { reason: StopReason::FormatErrors, .. })), "{end:?}");
    assert!(log.executed.is_empty(), "a call with unparsable arguments never runs");
    let fed = tool_messages(&log.requests[2]);
    assert!(fed[0].1.contains("not a JSON object"), "{fed:?}");
    assert!(log.requests[1].messages.iter().any(|m| m.content.contains("Your reply was empty")));
}

#[test]
fn a_good_reply_resets_the_format_error_count() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    let mut replies = vec![
        text(""),
        text(""),
        calls(&[("c", "read_file", json!({"path": "a"}))]),
        text(""),
        text(""),
        text("answer"),
    ]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "answer");
}

#[test]
fn a_stored_run_of_another_schema_version_is_refused() {
    let run = AgentRun::new("r", "t", RunConfig::default(), 0);
    let mut stored = run.to_json();
    assert_eq!(stored["schema_version"], SCHEMA_VERSION);
    assert_eq!(AgentRun::from_json(&stored).unwrap(), run);
    stored["schema_version"] = json!(SCHEMA_VERSION + 1);
    let e = AgentRun::from_json(&stored).unwrap_err();
    assert!(e.to_string().contains(&format!("schema version {}", SCHEMA_VERSION + 1)), "{e}");
    stored.as_object_mut().unwrap().remove("schema_version");
    assert!(matches!(AgentRun::from_json(&stored), Err(StepError::Corrupt(_))));
    assert!(matches!(AgentRun::from_json(&json!({"schema_version": SCHEMA_VERSION})), Err(StepError::Corrupt(_))));
}

#[test]
fn a_run_stored_before_permissions_existed_loads_and_keeps_its_policy() {
    // A run as an earlier build stored it: no `permissions` in its config.
    let mut stored = AgentRun::new("r", "t", config(ApprovalPolicy::Ask), 0).to_json();
    stored["config"].as_object_mut().unwrap().remove("permissions");
    let mut run = AgentRun::from_json(&stored).unwrap();
    assert!(!run.config.permissions.has_rules());
    let mut replies = vec![
        calls(&[
            ("r1", "read_file", json!({"path": "a"})),
            ("w1", "edit_file", json!({"path": "a", "old": "x", "new": "y"})),
            ("x1", "run_command", json!({"command": "ls"})),
        ]),
        text("done"),
    ]
    .into_iter();
    let mut log = Log::default();
    let p = pending(&drive(&mut run, &mut replies, &mut echo_tool, &mut log, true));
    // The policy asks as before; a command no rule names is refused, as the
    // toolbox refused it before (now without asking anyone first).
    assert_eq!(p.iter().map(|p| p.call_id.as_str()).collect::<Vec<_>>(), ["w1"]);
    assert_eq!(run.call("r1").unwrap().status, CallStatus::Approved);
    let x1 = run.call("x1").unwrap();
    assert_eq!(x1.status, CallStatus::Denied);
    assert!(x1.result.as_deref().unwrap().contains("no rule admits the command `ls`"), "{x1:?}");
}

#[test]
fn deny_wins_and_names_the_rule_ask_asks_under_auto_allow_runs_under_ask() {
    // Under auto: the deny refuses, the ask waits for a person.
    let cfg = with_rules(
        ApprovalPolicy::Auto,
        &["edit_file", "run_command(cargo *)"],
        &["edit_file(src/**)"],
        &["edit_file(src/secret.rs)", "run_command(cargo publish *)"],
    );
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![
        calls(&[
            ("d1", "edit_file", json!({"path": "src/secret.rs", "old": "x", "new": "y"})),
            ("d2", "run_command", json!({"command": "cargo --locked publish"})),
            ("a1", "edit_file", json!({"path": "src/lib.rs", "old": "x", "new": "y"})),
            ("ok", "edit_file", json!({"path": "docs/a.md", "old": "x", "new": "y"})),
        ]),
        text("done"),
    ]
    .into_iter();
    let mut log = Log::default();
    let p = pending(&drive(&mut run, &mut replies, &mut echo_tool, &mut log, true));
    assert_eq!(p.iter().map(|p| p.call_id.as_str()).collect::<Vec<_>>(), ["a1"]);
    let d1 = run.call("d1").unwrap();
    assert_eq!(d1.status, CallStatus::Denied);
    assert_eq!(d1.result.as_deref(), Some("denied by the rule `edit_file(src/secret.rs)` (deny, noesis.toml)"));
    let d2 = run.call("d2").unwrap().result.clone().unwrap();
    assert!(d2.contains("`run_command(cargo publish *)`"), "a global option in between does not slip past: {d2}");
    assert_eq!(run.call("ok").unwrap().status, CallStatus::Approved);
    run.decide(&[decision(&p[0], Verdict::Approve)]).unwrap();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, true)), "done");
    let ran: Vec<&str> = log.executed.iter().map(|(_, a)| a["path"].as_str().unwrap()).collect();
    assert_eq!(ran, ["src/lib.rs", "docs/a.md"], "the denied calls never ran");

    // Under ask: an explicit allow runs without asking.
    let cfg = with_rules(ApprovalPolicy::Ask, &["run_command(cargo test *)"], &[], &[]);
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![calls(&[("c", "run_command", json!({"command": "cargo test -q"}))]), text("ok")].into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "ok");
    assert_eq!(log.executed.len(), 1);
}

#[test]
fn an_edited_approval_is_decided_again_so_no_edit_smuggles_in_a_refused_call() {
    let cfg = with_rules(ApprovalPolicy::Ask, &[], &["run_command(cargo test *)"], &["run_command(rm *)"]);
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![calls(&[("c", "run_command", json!({"command": "cargo test"}))]), text("ok")].into_iter();
    let mut log = Log::default();
    let p = pending(&drive(&mut run, &mut replies, &mut echo_tool, &mut log, true));
    let before = run.to_json();
    for (edit, says) in [
        ("rm -rf /", "denied by the rule `run_command(rm *)`"),
        ("cargo test --config target.x.runner=evil", "`--config`"),
        ("sh -c evil", "no rule admits"),
    ] {
        let e =
            run.decide(&[decision(&p[0], Verdict::ApproveEdited { arguments: json!({"command": edit}) })]).unwrap_err();
        assert!(
            matches!(&e, StepError::RefusedEdit { call_id, reason } if call_id == "c" && reason.contains(says)),
            "{edit}: {e}"
        );
        assert_eq!(run.to_json(), before, "a refused edit changes nothing");
    }
    run.decide(&[decision(&p[0], Verdict::ApproveEdited { arguments: json!({"command": "cargo test -p x"}) })])
        .unwrap();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, true)), "ok");
    assert_eq!(log.executed, [("run_command".to_owned(), json!({"command": "cargo test -p x"}))]);
}

#[test]
fn a_write_to_a_protected_path_is_refused_and_said_so() {
    let mut cfg = with_rules(ApprovalPolicy::Auto, &["edit_file"], &[], &[]);
    cfg.permissions.protect("tests/test_calc.py").unwrap();
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let edit = |path: &str| json!({"path": path, "old": "x", "new": "y"});
    let mut replies = vec![
        calls(&[
            ("g", "edit_file", edit(".git/config")),
            ("t", "edit_file", edit("tests/../tests/test_calc.py")),
            ("n", "edit_file", edit("noesis.toml")),
            ("ok", "edit_file", edit("calc.py")),
        ]),
        text("done"),
    ]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, true)), "done");
    assert_eq!(log.executed.len(), 1, "only calc.py was edited");
    for (id, path) in [("g", ".git/config"), ("t", "tests/test_calc.py"), ("n", "noesis.toml")] {
        let c = run.call(id).unwrap();
        assert_eq!(c.status, CallStatus::Denied);
        assert!(c.result.as_deref().unwrap().contains(&format!("`{path}` is a protected path")), "{c:?}");
        assert_eq!(run.config.permissions.protected_write(&c.tool, &c.arguments).as_deref(), Some(path));
    }
}

#[test]
fn resume_after_a_kill_never_runs_a_call_twice() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.tools[0].idempotent = true;
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![
        calls(&[
            ("done", "read_file", json!({"path": "a"})),
            ("w", "edit_file", json!({"path": "a", "old": "x", "new": "y"})),
            ("again", "read_file", json!({"path": "b"})),
        ]),
        text("ok"),
    ]
    .into_iter();
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&replies.next().unwrap(), 0.0).unwrap();
    // The first batch (one read) completes; the write starts and the
    // process is killed: what was stored is all that is left.
    let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
    assert_eq!(batch.len(), 1);
    run.started("done", 0).unwrap();
    run.finished("done", ToolOutput::ok("A"), 0).unwrap();
    let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
    assert_eq!(batch[0].call_id, "w");
    run.started("w", 0).unwrap();
    let stored = run.to_json();

    let mut resumed = AgentRun::from_json(&stored).unwrap();
    resumed.resume();
    let w = resumed.call("w").unwrap();
    assert_eq!((w.status, w.result.as_deref()), (CallStatus::Interrupted, Some(INTERRUPTED)));
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut resumed, &mut replies, &mut echo_tool, &mut log, false)), "ok");
    // Only the call that had not run, runs.
    assert_eq!(log.executed, [("read_file".into(), json!({"path": "b"}))]);
    assert_eq!(resumed.call("done").unwrap().result.as_deref(), Some("A"));
    let fed = tool_messages(&log.requests[0]);
    assert_eq!(fed.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["done", "w", "again"]);
    assert_eq!(fed[1].1, INTERRUPTED);

    // While the write runs alone, nothing else may start.
    let mut run = AgentRun::from_json(&stored).unwrap();
    assert!(matches!(run.started("again", 0), Err(StepError::NotDispatched(_))));
    // An idempotent tool that was running simply runs again.
    run.finished("w", ToolOutput::ok("written"), 0).unwrap();
    let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
    assert_eq!(batch[0].call_id, "again");
    run.started("again", 0).unwrap();
    let mut run = AgentRun::from_json(&run.to_json()).unwrap();
    run.resume();
    assert_eq!(run.call("again").unwrap().status, CallStatus::Approved);
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies_after(), &mut echo_tool, &mut log, false)), "ok");
    assert_eq!(log.executed, [("read_file".into(), json!({"path": "b"}))]);
}

fn replies_after() -> std::vec::IntoIter<ChatResponse> {
    vec![text("ok")].into_iter()
}

#[test]
fn no_request_ever_carries_a_call_without_a_result() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Ask), 0);
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&calls(&[("w", "edit_file", json!({"path": "a", "old": "x", "new": "y"}))]), 0.0).unwrap();
    assert!(run.awaiting_approval());
    // A run stored by a writer that moved on without results (hand-edited,
    // or an older build): the phase says think, the call has no result.
    let mut stored = run.to_json();
    stored["phase"] = json!({"phase": "think"});
    let mut run = AgentRun::from_json(&stored).unwrap();
    let Action::CallModel(request) = run.next(0) else { panic!() };
    assert_eq!(tool_messages(&request), [("w".to_owned(), NO_RESULT.to_owned())]);
}

#[test]
fn reflection_is_fed_back_until_the_goal_is_achieved() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.reflect = true;
    let mut run = AgentRun::new("r", "Name three primes.", cfg, 0);
    let mut replies = vec![
        text("2, 4, 5"),
        text(r#"{"goal_achieved": false, "what_went_wrong": "4 is not prime", "next_step": "replace 4"}"#),
        text("2, 3, 5"),
        text(r#"{"goal_achieved": true, "what_went_wrong": "", "next_step": ""}"#),
    ]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, true)), "2, 3, 5");
    assert!(matches!(log.requests[1].response_format, ResponseFormat::JsonSchema { .. }));
    assert!(log.requests[1].tools.is_empty());
    let critique = log.requests[2].messages.last().unwrap();
    assert!(
        critique.role == Role::User
            && critique.content.contains("4 is not prime")
            && critique.content.contains("replace 4")
    );
    assert_eq!(run.usage.turns, 4);
}

#[test]
fn reflections_are_bounded_and_an_unreadable_critique_keeps_the_answer() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.reflect = true;
    cfg.max_reflections = 1;
    let no = || text(r#"{"goal_achieved": false, "what_went_wrong": "w", "next_step": "n"}"#);
    let mut run = AgentRun::new("r", "t", cfg.clone(), 0);
    let mut replies = vec![text("a1"), no(), text("a2")].into_iter();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut Log::default(), false)), "a2");
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![text("a1"), text("I think it is fine")].into_iter();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut Log::default(), false)), "a1");
}

#[test]
fn chain_of_thought_plans_then_acts_on_each_step() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.strategy = Strategy::ChainOfThought;
    let mut run = AgentRun::new("r", "Summarise a.txt", cfg, 0);
    let mut replies = vec![
        text("1. Read a.txt\n2. Summarise it"),
        calls(&[("c", "read_file", json!({"path": "a.txt"}))]),
        text("It says hello."),
        text("A greeting."),
        text("Summary: a greeting."),
    ]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, true)), "Summary: a greeting.");
    assert!(
        log.requests[0].tools.is_empty() && log.requests[0].messages.last().unwrap().content.contains("numbered list")
    );
    assert!(log.requests[1].messages.last().unwrap().content.starts_with("Step 1 of 2: Read a.txt"));
    assert!(log.requests[3].messages.last().unwrap().content.starts_with("Step 2 of 2: Summarise it"));
    assert!(log.requests[4].messages.last().unwrap().content.contains("final answer"));
    assert_eq!(log.executed.len(), 1);
}

#[test]
fn single_shot_is_one_call_without_tools() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.strategy = Strategy::SingleShot;
    cfg.system_prompt = Some("Be brief.".into());
    let mut run = AgentRun::new("r", "Hi", cfg, 0);
    let mut replies = vec![ChatResponse {
        tool_calls: vec![ToolCall { id: "x".into(), name: "read_file".into(), arguments: json!({}) }],
        ..text("Hello")
    }]
    .into_iter();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "Hello");
    assert!(log.requests[0].tools.is_empty() && run.calls.is_empty());
    assert_eq!(log.requests[0].messages[0].content, "Be brief.");
}

#[test]
fn the_oldest_turns_are_left_out_when_the_conversation_outgrows_the_context() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.limits.max_context_chars = Some(2_000);
    let mut run = AgentRun::new("r", "THE TASK", cfg, 0);
    let mut replies = (0..8).map(|i| calls(&[("", "read_file", json!({"path": i.to_string()}))])).collect::<Vec<_>>();
    replies.push(text("ok"));
    let mut log = Log::default();
    let mut tool = |_: &str, args: &Value| ToolOutput::ok(format!("{args}{}", "x".repeat(600)));
    drive(&mut run, &mut replies.into_iter(), &mut tool, &mut log, false);
    let last = log.requests.last().unwrap();
    assert_eq!(last.messages[1].content, "THE TASK", "the task is always kept");
    assert!(last.messages[2].content.contains("earlier part(s) of this conversation were left out"));
    let size: usize = last.messages.iter().map(|m| m.content.len()).sum();
    assert!(size < 3_000, "{size}");
    // Every call that is sent still has its result right after it.
    for (i, m) in last.messages.iter().enumerate() {
        for call in &m.tool_calls {
            assert_eq!(last.messages[i + 1].tool_call_id.as_deref(), Some(call.id.as_str()));
        }
    }
}

#[test]
fn a_cancelled_run_resumes_where_it_stopped() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    let mut replies = vec![calls(&[("c", "read_file", json!({"path": "a"}))]), text("ok")].into_iter();
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&replies.next().unwrap(), 0.0).unwrap();
    run.cancel();
    assert_eq!(run.next(0), Action::Done(Outcome::Cancelled));
    assert!(matches!(run.started("c", 0), Err(StepError::Finished)));
    let mut run = AgentRun::from_json(&run.to_json()).unwrap();
    run.resume();
    let mut log = Log::default();
    assert_eq!(answer(drive(&mut run, &mut replies, &mut echo_tool, &mut log, false)), "ok");
    assert_eq!(log.executed.len(), 1);
}

#[test]
fn reports_out_of_turn_are_refused() {
    let mut run = AgentRun::new("r", "t", config(ApprovalPolicy::Auto), 0);
    assert!(matches!(run.on_model_reply(&text("x"), 0.0), Err(StepError::UnexpectedReply("thinking"))));
    assert!(matches!(run.started("nope", 0), Err(StepError::UnknownCall(_))));
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&calls(&[("c", "read_file", json!({"path": "a"}))]), 0.0).unwrap();
    assert!(matches!(run.finished("c", ToolOutput::ok("x"), 0), Err(StepError::Transition { .. })));
    assert!(matches!(run.on_model_reply(&text("x"), 0.0), Err(StepError::UnexpectedReply("acting"))));
}

mod props {
    use proptest::prelude::{Just, any, prop_assert, prop_assert_eq, prop_oneof, proptest};
    use proptest::strategy::Strategy as _;

    use super::*;

    fn reply() -> impl proptest::strategy::Strategy<Value = ChatResponse> {
        let name = prop_oneof![
            Just("read_file".to_owned()),
            Just("edit_file".to_owned()),
            Just("run_command".to_owned()),
            "[a-z]{1,6}".prop_map(|s: String| s),
        ];
        let args = prop_oneof![
            Just(json!({"path": "a"})),
            Just(json!({"path": "a", "old": "x", "new": "y"})),
            Just(json!({"command": "ls"})),
            Just(json!({})),
            Just(json!("{broken")),
            Just(json!([1, 2])),
        ];
        let call = ("[a-z0-9]{0,3}", name, args).prop_map(|(id, name, arguments): (String, String, Value)| ToolCall {
            id,
            name,
            arguments,
        });
        let words = prop_oneof![Just(String::new()), "[a-z ]{0,12}".prop_map(|s: String| s)];
        (words, proptest::collection::vec(call, 0..4))
            .prop_map(|(t, tool_calls): (String, Vec<ToolCall>)| ChatResponse { tool_calls, ..text(&t) })
    }

    proptest! {
        /// Whatever the model says and the tools return, and wherever the
        /// run goes through JSON: it never panics, ends within its turn
        /// limit (or waits for a person), every request answers every call
        /// right after it, and no call runs twice.
        #[test]
        fn prop_any_script_ends_well_formed(
            replies in proptest::collection::vec(reply(), 1..12),
            outputs in proptest::collection::vec(any::<bool>(), 0..64),
            approval in prop_oneof![Just(ApprovalPolicy::Auto), Just(ApprovalPolicy::Ask), Just(ApprovalPolicy::Never)],
            roundtrip in any::<bool>(),
            reflect in any::<bool>(),
        ) {
            let mut cfg = config(approval);
            cfg.limits.max_turns = 8;
            cfg.reflect = reflect;
            let mut run = AgentRun::new("r", "t", cfg, 0);
            let n = replies.len();
            let mut script = replies.into_iter().chain(std::iter::repeat_with(|| text("final"))).take(n + 16);
            let mut outputs = outputs.into_iter().cycle();
            let mut executed = std::collections::BTreeSet::new();
            let mut requests = 0;
            for _ in 0..100 {
                if roundtrip {
                    run = AgentRun::from_json(&run.to_json()).unwrap();
                }
                match run.next(0) {
                    Action::CallModel(request) => {
                        requests += 1;
                        for (i, m) in request.messages.iter().enumerate() {
                            for (k, call) in m.tool_calls.iter().enumerate() {
                                let answered = request.messages.get(i + 1 + k).and_then(|r| r.tool_call_id.as_deref());
                                prop_assert_eq!(answered, Some(call.id.as_str()));
                            }
                        }
                        let reply = script.next().unwrap_or_else(|| text("final"));
                        run.on_model_reply(&reply, 0.0).unwrap();
                    }
                    Action::ExecuteTools(batch) => {
                        for call in batch {
                            prop_assert!(executed.insert(call.call_id.clone()), "{} ran twice", call.call_id);
                            run.started(&call.call_id, 0).unwrap();
                            let ok = outputs.next().unwrap_or(true);
                            let out = if ok { ToolOutput::ok("r") } else { ToolOutput::error("e") };
                            run.finished(&call.call_id, out, 0).unwrap();
                        }
                    }
                    Action::AwaitApproval(p) => {
                        prop_assert_eq!(approval, ApprovalPolicy::Ask);
                        prop_assert!(!p.is_empty());
                        break;
                    }
                    Action::Busy(_) => prop_assert!(false, "busy with nothing handed out"),
                    Action::Done(_) => break,
                }
            }
            prop_assert!(run.outcome.is_some() || run.awaiting_approval(), "the run neither ended nor waits");
            prop_assert!(requests <= 8);
        }
    }
}

#[test]
fn a_context_overflow_compacts_then_leaves_out_the_oldest_turns_and_asks_again_never_a_surprise_stop() {
    let mut run = AgentRun::new("r", "THE TASK", config(ApprovalPolicy::Auto), 0);
    let tool = |_: &str, args: &Value| ToolOutput::ok(format!("{args}{}", "x".repeat(900)));
    // Six rounds of reads fill the conversation; then the model says it is too long.
    let mut replies =
        (0..6).map(|i| calls(&[("", "read_file", json!({"path": i.to_string()}))])).collect::<Vec<_>>().into_iter();
    for _ in 0..6 {
        let Action::CallModel(_) = run.next(0) else { panic!() };
        run.on_model_reply(&replies.next().unwrap(), 0.0).unwrap();
        let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
        for c in batch {
            run.started(&c.call_id, 0).unwrap();
            run.finished(&c.call_id, tool(&c.tool, &c.arguments), 0).unwrap();
        }
    }
    let Action::CallModel(full) = run.next(0) else { panic!() };
    let size = |r: &ChatRequest| r.messages.iter().map(|m| m.content.len()).sum::<usize>();
    assert_eq!(run.on_context_overflow(), Ok(true));
    // The older turns are compacted first (tests/compact.rs): a summary is
    // asked for, then the request again.
    let Action::CallModel(_) = run.next(0) else { panic!("a summary is asked for") };
    run.on_model_reply(&text("Six files read."), 0.0).unwrap();
    let Action::CallModel(shorter) = run.next(0) else { panic!("asked again") };
    assert!(size(&shorter) <= size(&full) * 2 / 3 + 200, "{} vs {}", size(&shorter), size(&full));
    assert_eq!(shorter.messages[1].content, "THE TASK");
    assert!(shorter.messages[2].content.contains("compacted"));
    // Survives JSON, and keeps shrinking until only the task and the last turn remain.
    run = AgentRun::from_json(&run.to_json()).unwrap();
    let mut rounds = 0;
    while run.on_context_overflow() == Ok(true) {
        rounds += 1;
        assert!(matches!(run.next(0), Action::CallModel(_)));
        assert!(rounds < 20);
    }
    assert!(matches!(
        run.next(0),
        Action::Done(Outcome::Stopped { reason: StopReason::Provider, ref detail }) if detail.contains("does not fit")
    ));
}

#[test]
fn a_sources_changed_tools_are_offered_from_the_next_request_and_the_model_is_told() {
    let mcp = |name: &str| ToolDecl::read_only(name, "from a server", path_schema());
    let mut config = config(ApprovalPolicy::Auto);
    config.tools.extend([mcp("srv__a"), mcp("srv__b")]);
    config.tool_filter = noesis_agent::ToolFilter { only: Vec::new(), except: vec!["srv__hidden".into()] };
    let mut run = AgentRun::new("r", "task", config, 0);
    let before = [mcp("srv__a"), mcp("srv__b")];
    // b removed, a changed, c and hidden added: hidden stays out by the filter.
    let mut changed_a = mcp("srv__a");
    changed_a.description = "changed".into();
    let now = [changed_a, mcp("srv__c"), mcp("srv__hidden")];
    let step = run.step;
    assert!(run.update_tools(&before, &now));
    assert_eq!(run.step, step + 1);
    let Action::CallModel(request) = run.next(0) else { panic!() };
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(offered.contains(&"srv__a") && offered.contains(&"srv__c"), "{offered:?}");
    assert!(!offered.contains(&"srv__b") && !offered.contains(&"srv__hidden"), "{offered:?}");
    assert_eq!(request.tools.iter().find(|t| t.name == "srv__a").unwrap().description, "changed");
    let Some(Entry::Note { content }) = run.entries.last() else { panic!("{:?}", run.entries) };
    assert_eq!(content, "The tools changed (now available: srv__c; changed: srv__a; no longer available: srv__b).");
    // The same list again changes nothing; the built-ins were never touched.
    assert!(!run.update_tools(&now, &now));
    assert!(offered.contains(&"read_file"));
    // A finished run, or a single-shot one, is left alone.
    let mut single = AgentRun::new("s", "t", RunConfig { strategy: Strategy::SingleShot, ..RunConfig::default() }, 0);
    assert!(!single.update_tools(&[], &now));
}

fn person_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
           "required": ["name", "age"], "additionalProperties": false})
}

#[test]
fn an_answer_outside_the_output_schema_is_sent_back_with_its_violations() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.output_schema = Some(person_schema());
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![
        calls(&[("c1", "read_file", json!({"path": "person.txt"}))]),
        text("Ada, 36"),
        text(r#"{"name": "Ada", "age": "36"}"#),
        text("Here it is:\n```json\n{\"name\": \"Ada\", \"age\": 36}\n```"),
    ]
    .into_iter();
    let mut log = Log::default();
    let end = drive(&mut run, &mut replies, &mut echo_tool, &mut log, true);
    assert_eq!(answer(end), r#"{"name":"Ada","age":36}"#, "stored as compact JSON, in the order written");
    assert_eq!(run.output(), Some(json!({"name": "Ada", "age": 36})));
    // The schema is in the instructions; tools stay offered, so the
    // provider is not asked to force the format.
    let system = &log.requests[0].messages[0].content;
    assert!(system.contains("validates against this JSON Schema") && system.contains("\"minimum\":0"), "{system}");
    assert_eq!(log.requests[0].response_format, ResponseFormat::Text);
    let first = &log.requests[2].messages.last().unwrap().content;
    assert!(first.contains("holds no JSON value"), "{first}");
    let second = &log.requests[3].messages.last().unwrap().content;
    assert!(second.contains("/age: ") && second.contains("integer"), "{second}");
}

#[test]
fn an_answer_that_never_fits_the_schema_stops_the_run_after_the_re_asks() {
    let mut cfg = config(ApprovalPolicy::Auto);
    cfg.output_schema = Some(person_schema());
    cfg.limits.max_output_retries = 1;
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![text(r#"{"name": "Ada"}"#), text(r#"{"name": "Ada", "extra": 1}"#)].into_iter();
    let end = drive(&mut run, &mut replies, &mut echo_tool, &mut Log::default(), false);
    let Action::Done(Outcome::Stopped { reason: StopReason::InvalidOutput, detail }) = end else { panic!("{end:?}") };
    assert!(detail.contains("after 1 re-ask") && detail.contains("extra"), "{detail}");
    assert_eq!(run.output(), None);
}

#[test]
fn without_tools_the_provider_is_asked_for_the_schema_and_a_critique_sees_the_json() {
    let cfg = RunConfig {
        strategy: Strategy::SingleShot,
        output_schema: Some(person_schema()),
        reflect: true,
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("r", "t", cfg, 0);
    let mut replies = vec![
        text(r#"{"name": "Ada", "age": 36}"#),
        text(r#"{"goal_achieved": true, "what_went_wrong": "", "next_step": ""}"#),
    ]
    .into_iter();
    let mut log = Log::default();
    let end = drive(&mut run, &mut replies, &mut echo_tool, &mut log, false);
    assert_eq!(answer(end), r#"{"name":"Ada","age":36}"#);
    assert_eq!(
        log.requests[0].response_format,
        ResponseFormat::JsonSchema { name: "output".into(), schema: person_schema() }
    );
    assert!(noesis_agent::output_schema_problem(&person_schema()).is_none());
    assert!(noesis_agent::output_schema_problem(&json!({"type": "no-such-type"})).is_some());
}
