//! Compaction: a run near its model's window (or refused as too long, or
//! silently cut by the provider) has its older turns summarised, with every
//! fact their calls rest on carried verbatim, nothing deleted, and any
//! earlier call's result a `recall` away.

use noesis_agent::{
    Action, AgentRun, ApprovalPolicy, ContextConfig, Entry, FactKind, Outcome, RunConfig, StopReason, ToolDecl,
    ToolEvidence, ToolOutput, retention,
};
use noesis_llm::{ChatRequest, ChatResponse, StructuredMode, ToolCall, Usage};
use serde_json::{Value, json};

fn text(t: &str) -> ChatResponse {
    ChatResponse::text(t, "m", StructuredMode::Text)
}

fn read(id: &str, path: &str) -> ChatResponse {
    ChatResponse {
        tool_calls: vec![ToolCall { id: id.into(), name: "read_file".into(), arguments: json!({"path": path}) }],
        ..text("")
    }
}

fn with_usage(mut r: ChatResponse, input: u64) -> ChatResponse {
    r.usage = Some(Usage { input_tokens: input, output_tokens: 5 });
    r
}

fn config(window: Option<u64>) -> RunConfig {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    RunConfig {
        tools: vec![ToolDecl::read_only("read_file", "Reads a file.", schema)],
        approval: ApprovalPolicy::Auto,
        context: ContextConfig { window_tokens: window, ..ContextConfig::default() },
        ..RunConfig::default()
    }
}

/// A file's text: a distinct first line, then bulk.
fn body(path: &str) -> String {
    format!("FIRST LINE OF {path}\n{}", "padding words for the context window. ".repeat(40))
}

fn hash(s: &str) -> String {
    blake3::hash(s.as_bytes()).to_hex().to_string()
}

fn read_tool(args: &Value) -> ToolOutput {
    let path = args["path"].as_str().unwrap_or_default();
    if path == "missing.rs" {
        return ToolOutput::error("no such file: missing.rs");
    }
    let b = body(path);
    ToolOutput::ok(b.clone()).with_evidence(ToolEvidence::File { path: path.into(), blake3: hash(&b) })
}

/// Drives `run` through JSON at every step: model replies from `replies`
/// (compaction requests answered by `summary`), tools by `read_tool`.
/// Returns the end, the requests the model got, and the compaction
/// requests.
fn drive(
    run: &mut AgentRun,
    replies: Vec<ChatResponse>,
    summary: &dyn Fn(&ChatRequest) -> String,
) -> (Action, Vec<ChatRequest>, Vec<ChatRequest>) {
    let mut replies = replies.into_iter();
    let (mut asked, mut compactions) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        *run = AgentRun::from_json(&run.to_json()).unwrap();
        match run.next(0) {
            Action::CallModel(r) if run.role() == "compact" => {
                let s = summary(&r);
                compactions.push(r);
                run.on_model_reply(&text(&s), 0.0).unwrap();
            }
            Action::CallModel(r) => {
                asked.push(r);
                run.on_model_reply(&replies.next().expect("the script ran out"), 0.0).unwrap();
            }
            Action::ExecuteTools(batch) => {
                for c in &batch {
                    run.started(&c.call_id, 0).unwrap();
                }
                for c in batch {
                    run.finished(&c.call_id, read_tool(&c.arguments), 0).unwrap();
                }
            }
            other => return (other, asked, compactions),
        }
    }
    panic!("the run did not end");
}

fn all_text(r: &ChatRequest) -> String {
    r.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n")
}

#[test]
fn twenty_facts_survive_five_compactions_where_a_plain_summary_keeps_few() {
    // A summariser that keeps the gist of the first lines it is shown, as a
    // hurried model would.
    let mut skim = |r: &ChatRequest| {
        let history = &r.messages[1].content;
        history.chars().take(300).collect::<String>()
    };
    let kept = retention::run(true, 4_000, &mut skim);
    assert!(kept.compactions >= 5, "{kept:?}");
    assert_eq!((kept.retained, kept.total), (20, 20), "{kept:?}");
    assert!(kept.final_tokens < 4_000, "the final request fits the window: {kept:?}");
    let plain = retention::run(false, 4_000, &mut skim);
    assert!(plain.compactions >= 5, "{plain:?}");
    assert!(plain.retained < 10, "a plain summary keeps only what the summariser chose: {plain:?}");
}

#[test]
fn older_turns_are_compacted_not_deleted_and_recall_shows_a_compacted_call() {
    let mut run = AgentRun::new("r", "Read the files.", config(Some(1_500)), 0);
    let mut replies: Vec<ChatResponse> = (0..8).map(|i| read(&format!("c{i}"), &format!("f{i}.rs"))).collect();
    replies.push(read("m", "missing.rs"));
    replies.push(ChatResponse {
        tool_calls: vec![
            ToolCall { id: "r1".into(), name: "recall".into(), arguments: json!({"call_id": "c0"}) },
            ToolCall { id: "r2".into(), name: "recall".into(), arguments: json!({"call_id": "nope"}) },
        ],
        ..text("")
    });
    replies.push(text("done"));
    let summary = |r: &ChatRequest| {
        assert_eq!(r.messages[0].role, noesis_llm::Role::System);
        assert!(r.tools.is_empty(), "a summary is asked for without tools");
        "Read files f0 onwards; nothing is wrong with them.".to_owned()
    };
    let (end, asked, compactions) = drive(&mut run, replies, &summary);
    assert_eq!(end, Action::Done(Outcome::Answer { text: "done".into() }));
    assert!(!compactions.is_empty());
    // Every turn is still in the run: 11 replies, one entry each.
    let turns = run.entries.iter().filter(|e| matches!(e, Entry::Assistant { .. })).count();
    assert_eq!(turns, 11);
    let (_, c) = run.compaction().unwrap();
    assert!(c.facts.iter().any(|f| f.kind == FactKind::Read && f.text.starts_with("read f0.rs (blake3 ")));
    // The model sees the compaction in place of the older turns, the task first.
    let last = asked.last().unwrap();
    assert_eq!(last.messages[1].content, "Read the files.");
    assert!(last.messages[2].content.contains("Summary of the work so far:\nRead files f0 onwards"));
    assert!(
        last.messages[2].content.contains(&format!("- read f0.rs (blake3 {}) [call c0]", &hash(&body("f0.rs"))[..16]))
    );
    let before_recall = &asked[asked.len() - 2];
    assert!(!all_text(before_recall).contains("FIRST LINE OF f0.rs"), "the old result itself is not sent again");
    assert!(last.tools.iter().any(|t| t.name == "recall"), "recall is offered once compacted");
    // `recall` answered by the run itself: the whole result, or an error.
    let r1 = run.call("r1").unwrap();
    assert!(r1.result.as_deref().unwrap().contains("FIRST LINE OF f0.rs"), "{:?}", r1.result);
    assert!(r1.result.as_deref().unwrap().contains("\"kind\":\"file\""));
    let r2 = run.call("r2").unwrap();
    assert!(r2.is_error && r2.result.as_deref().unwrap().contains("no finished call `nope`"));
}

#[test]
fn a_run_with_no_window_known_never_compacts_on_its_own() {
    let mut run = AgentRun::new("r", "Read.", config(None), 0);
    let mut replies: Vec<ChatResponse> = (0..8).map(|i| read(&format!("c{i}"), &format!("f{i}.rs"))).collect();
    replies.push(text("done"));
    let (_, asked, compactions) = drive(&mut run, replies, &|_| unreachable!());
    assert!(compactions.is_empty() && run.compaction().is_none());
    assert!(all_text(asked.last().unwrap()).contains("FIRST LINE OF f0.rs"));
    assert!(!asked.last().unwrap().tools.iter().any(|t| t.name == "recall"));
}

/// Six turns of `read_file` on f0.rs … f5.rs, their results in.
fn six_reads(run: &mut AgentRun) {
    for i in 0..6 {
        let Action::CallModel(_) = run.next(0) else { panic!() };
        run.on_model_reply(&read(&format!("c{i}"), &format!("f{i}.rs")), 0.0).unwrap();
        let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
        for c in batch {
            run.started(&c.call_id, 0).unwrap();
            run.finished(&c.call_id, read_tool(&c.arguments), 0).unwrap();
        }
    }
}

#[test]
fn a_request_refused_as_too_long_is_compacted_and_asked_again() {
    let mut run = AgentRun::new("r", "THE TASK", config(None), 0);
    six_reads(&mut run);
    let Action::CallModel(full) = run.next(0) else { panic!() };
    assert_eq!(run.on_context_overflow(), Ok(true));
    let Action::CallModel(summary_request) = run.next(0) else { panic!() };
    assert_eq!(run.role(), "compact");
    assert!(summary_request.messages[1].content.contains("FIRST LINE OF f0.rs"));
    run.on_model_reply(&text("Four files read."), 0.0).unwrap();
    let Action::CallModel(shorter) = run.next(0) else { panic!("asked again") };
    assert_eq!(run.role(), "think");
    assert!(noesis_llm::estimate_request_tokens(&shorter) < noesis_llm::estimate_request_tokens(&full));
    assert_eq!(shorter.messages[1].content, "THE TASK");
    assert!(shorter.messages[2].content.contains("Four files read."));
    let (_, c) = run.compaction().unwrap();
    assert_eq!((c.reason.as_str(), c.facts.len()), ("overflow", 4));

    // Refused again, then the summary request refused too: the summary is
    // written by rule, and the facts are still there.
    let mut run = AgentRun::from_json(&run.to_json()).unwrap();
    run.on_model_reply(&read("c6", "f6.rs"), 0.0).unwrap();
    let Action::ExecuteTools(batch) = run.next(0) else { panic!() };
    for c in batch {
        run.started(&c.call_id, 0).unwrap();
        run.finished(&c.call_id, read_tool(&c.arguments), 0).unwrap();
    }
    // The window learned from the refusal holds: the run compacts before it
    // asks; that request is refused too.
    let Action::CallModel(_) = run.next(0) else { panic!() };
    assert_eq!(run.role(), "compact");
    assert_eq!(run.on_context_overflow(), Ok(true));
    let (_, c) = run.compaction().unwrap();
    assert!(c.by_rule && c.summary.contains("Four files read.") && c.summary.contains("read_file"), "{c:?}");
    assert_eq!(c.facts.len(), 5, "the earlier facts and the new one");
    let Action::CallModel(_) = run.next(0) else { panic!() };
    assert_eq!(run.role(), "think");
}

#[test]
fn a_provider_that_silently_cuts_the_prompt_is_caught_by_the_tokens_it_reports() {
    let mut run = AgentRun::new("r", "Read.", config(None), 0);
    six_reads(&mut run);
    let Action::CallModel(sent) = run.next(0) else { panic!() };
    let estimate = noesis_llm::estimate_request_tokens(&sent);
    assert!(estimate > 1_500, "{estimate}");
    // It read 600 tokens of about twice as many or more: cut, like Ollama beyond num_ctx.
    let entries = run.entries.len();
    run.on_model_reply(&with_usage(text("I only see the end."), 600), 0.0).unwrap();
    assert_eq!(run.entries.len(), entries, "the reply made on a cut prompt is set aside");
    let Action::CallModel(_) = run.next(0) else { panic!() };
    assert_eq!(run.role(), "compact");
    run.on_model_reply(&text("Six files read."), 0.0).unwrap();
    let Action::CallModel(again) = run.next(0) else { panic!() };
    assert!(again.messages[2].content.contains("Six files read."));
    assert_eq!(run.compaction().unwrap().1.reason, "truncated");
    // A report that the prompt was read whole is no cut.
    run.on_model_reply(&with_usage(text("done"), noesis_llm::estimate_request_tokens(&again)), 0.0).unwrap();
    assert_eq!(run.next(0), Action::Done(Outcome::Answer { text: "done".into() }));
    // Test servers that report a fixed handful of tokens are not read as cuts.
    let mut run = AgentRun::new("r", "Read.", config(None), 0);
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&with_usage(text("fine"), 11), 0.0).unwrap();
    assert!(matches!(run.next(0), Action::Done(Outcome::Answer { .. })));
}

#[test]
fn a_cut_with_nothing_left_to_compact_stops_the_run_saying_so() {
    let task = format!("Summarise this: {}", "long words in the task itself ".repeat(400));
    let mut run = AgentRun::new("r", task, config(None), 0);
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&with_usage(text("partial"), 1_024), 0.0).unwrap();
    let Action::Done(Outcome::Stopped { reason, detail }) = run.next(0) else { panic!() };
    assert_eq!(reason, StopReason::Provider);
    assert!(detail.contains("read only 1024 of about") && detail.contains("num_ctx"), "{detail}");
}

#[test]
fn a_replay_follows_a_run_compacted_on_a_refusal_and_on_its_window() {
    // On a refusal: the refusal is played again where the record compacted.
    let start = AgentRun::new("r", "THE TASK", config(None), 0);
    let mut run = start.clone();
    six_reads(&mut run);
    let Action::CallModel(_) = run.next(0) else { panic!() };
    assert_eq!(run.on_context_overflow(), Ok(true));
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&text("Six files read."), 0.0).unwrap();
    let Action::CallModel(_) = run.next(0) else { panic!() };
    run.on_model_reply(&text("done"), 0.0).unwrap();
    assert!(matches!(run.next(0), Action::Done(Outcome::Answer { .. })));
    // On its window: the same compactions come at the same turns.
    let windowed = AgentRun::new("w", "Read the files.", config(Some(1_500)), 0);
    let mut wrun = windowed.clone();
    let mut replies: Vec<ChatResponse> = (0..8).map(|i| read(&format!("c{i}"), &format!("f{i}.rs"))).collect();
    replies.push(text("done"));
    drive(&mut wrun, replies, &|_| "Read some files.".to_owned());
    assert!(wrun.compactions() >= 2);
    for (start, record) in [(start, &run), (windowed, &wrun)] {
        let replayed = noesis_agent::replay(start, record);
        assert_eq!(replayed.diverged, None, "{:?}", replayed.steps);
        assert!(replayed.matches, "{:?}", replayed.steps);
        assert_eq!(replayed.run.compactions(), record.compactions());
    }
}
