//! A whole run over real HTTP: the OpenAI wire format from the fake server
//! on 127.0.0.1, the built-in tools on a real temporary workspace. Read,
//! edit, run a command, answer — each reply and each result checkpointed.

use std::sync::Arc;
use std::time::Duration;

use noesis_agent::{Action, AgentRun, ApprovalPolicy, CallStatus, Outcome, RunConfig, Toolbox, Workspace, drive};
use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_testkit::{FakeServer, Reply, chat_completion};
use serde_json::{Value, json};

fn tool_call(id: &str, name: &str, args: Value) -> Reply {
    let mut body = chat_completion("", "tool_calls");
    body["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}
    ]});
    Reply::Status(200, body.to_string(), vec![])
}

fn provider(server: &FakeServer) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.retry = RetryPolicy::none();
    cfg.http.timeout = Duration::from_secs(30);
    OpenAiCompatible::new(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_edit_run_and_answer_over_openai_http() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "teh cat\n").unwrap();
    let server = FakeServer::start(vec![
        tool_call("c1", "read_file", json!({"path": "a.txt"})),
        tool_call("c2", "edit_file", json!({"path": "a.txt", "old": "teh", "new": "the"})),
        tool_call("c3", "run_command", json!({"command": "cat a.txt"})),
        Reply::Chat("Fixed: it now reads `the cat`.".into()),
    ])
    .unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec!["cat".into()]));
    // The run decides on the same rules the toolbox checks.
    let config = RunConfig {
        tools: tools.decls(),
        approval: ApprovalPolicy::Auto,
        permissions: tools.permissions().clone(),
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("r1", "Fix the typo in a.txt and show it.", config, 0);
    let mut stored: Vec<Value> = Vec::new();
    let end =
        drive(&mut run, &provider(&server), &tools, &|| 0, &|_| 0.0, &mut |r: &AgentRun| stored.push(r.to_json()))
            .await
            .unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "Fixed: it now reads `the cat`.".into() }));
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "the cat\n");
    assert!(run.calls.iter().all(|c| c.status == CallStatus::Completed), "{:?}", run.calls);
    assert!(run.calls[2].result.as_deref().unwrap().contains("the cat"));
    // What the model saw: its calls sent back, each answered right after it.
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    let last = requests[3].json();
    let messages = last["messages"].as_array().unwrap();
    let tool_results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(tool_results, ["c1", "c2", "c3"]);
    assert!(last["tools"].as_array().unwrap().iter().any(|t| t["function"]["name"] == "grep"));
    // Every checkpoint is a run that continues where it stood.
    assert!(stored.len() >= 8, "{}", stored.len());
    for s in &stored {
        AgentRun::from_json(s).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_approval_and_an_unreachable_model_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        FakeServer::start(vec![tool_call("w", "write_file", json!({"path": "b.txt", "content": "x"}))]).unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let config = RunConfig { tools: tools.decls(), ..RunConfig::default() };
    let mut run = AgentRun::new("r2", "Write b.txt.", config, 0);
    let end = drive(&mut run, &provider(&server), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert!(matches!(end, Action::AwaitApproval(ref p) if p[0].call_id == "w"), "{end:?}");
    assert!(!dir.path().join("b.txt").exists(), "nothing is written before approval");
    drop(server);
    // The model's server is gone: after approval the run stops, typed.
    let Action::AwaitApproval(p) = end else { unreachable!() };
    run.decide(&[noesis_agent::Decision {
        call_id: p[0].call_id.clone(),
        tool: p[0].tool.clone(),
        arguments_hash: p[0].arguments_hash.clone(),
        verdict: noesis_agent::Verdict::Approve,
    }])
    .unwrap();
    let dead = FakeServer::start(vec![Reply::Reset]).unwrap();
    let end = drive(&mut run, &provider(&dead), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("b.txt")).unwrap(), "x", "the approved write ran");
    assert!(
        matches!(end, Action::Done(Outcome::Stopped { reason: noesis_agent::StopReason::Provider, .. })),
        "{end:?}"
    );
}

fn cfg(name: &str, base: String, model: &str) -> EndpointConfig {
    let mut c = EndpointConfig::new(name, &base, model);
    c.api_key = Some("k".into());
    c.http.retry = RetryPolicy::none();
    c.http.timeout = Duration::from_secs(30);
    c
}

fn ok(v: Value) -> Reply {
    Reply::Status(200, v.to_string(), vec![])
}

/// Two read-only calls in one turn (run together), their results sent back
/// in the provider's own format, then the answer — for each wire format.
async fn two_reads_then_answer(provider: &dyn noesis_llm::Provider, server: &FakeServer, tools: &Arc<Toolbox>) {
    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("r", "What do a.txt and b.txt say?", config, 0);
    let end = drive(&mut run, provider, tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "Both say hi.".into() }), "{:?}", run.calls);
    assert_eq!(run.calls.len(), 2);
    assert!(run.calls.iter().all(|c| c.status == CallStatus::Completed));
    let second = server.received()[1].body.clone();
    assert!(second.contains("hi from a") && second.contains("hi from b"), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gemini_and_ollama_wire_formats_carry_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hi from a").unwrap();
    std::fs::write(dir.path().join("b.txt"), "hi from b").unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));

    let anthropic = |content: Value, stop: &str| {
        ok(json!({"id": "m", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
                  "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}))
    };
    let server = FakeServer::start(vec![
        anthropic(
            json!([{"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.txt"}},
                   {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b.txt"}}]),
            "tool_use",
        ),
        anthropic(json!([{"type": "text", "text": "Both say hi."}]), "end_turn"),
    ])
    .unwrap();
    let p = noesis_llm::Anthropic::new(cfg("anthropic", format!("http://{}", server.addr()), "claude-test")).unwrap();
    two_reads_then_answer(&p, &server, &tools).await;

    let gemini_text = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Both say hi."}]}, "finishReason": "STOP"}]});
    let server = FakeServer::start(vec![
        ok(json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}},
            {"functionCall": {"name": "read_file", "args": {"path": "b.txt"}}}
        ]}, "finishReason": "STOP"}]})),
        ok(gemini_text),
    ])
    .unwrap();
    let p = noesis_llm::Gemini::new(cfg("gemini", format!("http://{}/v1beta", server.addr()), "gemini-test")).unwrap();
    two_reads_then_answer(&p, &server, &tools).await;

    let server = FakeServer::start(vec![
        ok(json!({"model": "llama3.2", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "read_file", "arguments": {"path": "a.txt"}}},
            {"function": {"name": "read_file", "arguments": {"path": "b.txt"}}}
        ]}, "done_reason": "stop", "done": true})),
        ok(json!({"model": "llama3.2", "message": {"role": "assistant", "content": "Both say hi."}, "done_reason": "stop", "done": true})),
    ])
    .unwrap();
    let p = noesis_llm::Ollama::new(cfg("ollama", format!("http://{}", server.addr()), "llama3.2")).unwrap();
    two_reads_then_answer(&p, &server, &tools).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_loop_remembers_across_cycles() {
    use noesis_agent::{CognitiveConfig, CognitiveLoop, MemoryKind, ReactAgent, ThoughtStep};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "the answer is 42").unwrap();
    let server = FakeServer::start(vec![
        tool_call("c1", "read_file", json!({"path": "a.txt"})),
        Reply::Chat("It says 42.".into()),
        Reply::Chat("You asked about a.txt; it says 42.".into()),
    ])
    .unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let mut agent =
        ReactAgent::new(Arc::new(provider(&server)), tools, CognitiveConfig::react().with_max_iterations(4));
    // Phase by phase: perceive, think (a tool call), act (its observation), think (the answer).
    let p = agent.perceive("What does a.txt say?").await;
    let plan = agent.think(&p).await;
    assert!(matches!(&plan.steps[..], [ThoughtStep::Call(c)] if c.name == "read_file"), "{plan:?}");
    let acted = agent.act(&plan).await;
    assert_eq!(acted.observations[0].content, "the answer is 42");
    assert!(acted.outcome.is_none());
    let plan = agent.think(&p).await;
    assert_eq!(plan.final_answer.as_deref(), Some("It says 42."));
    let done = agent.act(&plan).await;
    assert_eq!(done.outcome, Some(Outcome::Answer { text: "It says 42.".into() }));
    let kinds: Vec<MemoryKind> = agent.memory_buffer().recent(10).iter().map(|i| i.kind).collect();
    assert_eq!(kinds, [MemoryKind::User, MemoryKind::Observation, MemoryKind::Response]);
    // The next cycle sees what the agent remembers.
    let outcome = agent.run_cycle("What did I ask before?").await;
    assert_eq!(outcome, Outcome::Answer { text: "You asked about a.txt; it says 42.".into() });
    let last = server.received()[2].json();
    let task = last["messages"].as_array().unwrap().iter().find(|m| m["role"] == "user").unwrap()["content"].clone();
    assert!(task.as_str().unwrap().contains("[observed] read_file: the answer is 42"), "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_tool_calling_gets_the_json_protocol_in_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
    let server = FakeServer::start(vec![
        Reply::Chat(r#"{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}"#.into()),
        Reply::Chat(r#"{"response": "It says alpha."}"#.into()),
    ])
    .unwrap();
    let provider = noesis_llm::TextTools::new(Arc::new(provider(&server)));
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("t", "What does a.txt say?", config, 0);
    let end = drive(&mut run, &provider, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "It says alpha.".into() }));
    assert_eq!(run.calls[0].status, CallStatus::Completed);
    let requests = server.received();
    let first = requests[0].json();
    assert!(first.get("tools").is_none(), "no native tools are sent: {first}");
    assert_eq!(first["response_format"]["type"], "json_schema", "the protocol is asked for as a schema");
    assert!(first["messages"][0]["content"].as_str().unwrap().contains("- read_file:"), "{first}");
    let second = requests[1].json();
    let last = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    assert!(last["content"].as_str().unwrap().starts_with("Result of read_file"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_from_the_server_shortens_the_conversation_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha ".repeat(200)).unwrap();
    std::fs::write(dir.path().join("b.txt"), "beta").unwrap();
    let too_long = json!({"error": {"message": "This model's maximum context length is 8 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}});
    let server = FakeServer::start(vec![
        tool_call("c1", "read_file", json!({"path": "a.txt"})),
        tool_call("c2", "read_file", json!({"path": "b.txt"})),
        Reply::Status(400, too_long.to_string(), vec![]),
        Reply::Chat("b says beta.".into()),
    ])
    .unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("o", "What does b.txt say?", config, 0);
    let end = drive(&mut run, &provider(&server), &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "b says beta.".into() }));
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    let (refused, retried) = (&requests[2].body, &requests[3].body);
    assert!(retried.len() < refused.len(), "{} !< {}", retried.len(), refused.len());
    assert!(retried.contains("left out") && !retried.contains("alpha alpha") && retried.contains("beta"), "{retried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_hangs_times_out_and_a_batch_runs_within_its_concurrency_bound() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (Arc::clone(&now), Arc::clone(&most));
    let slow: noesis_agent::ToolFn = Arc::new(move |args| {
        let (n, m) = (Arc::clone(&n), Arc::clone(&m));
        Box::pin(async move {
            // Leaving counts on drop too: a call that times out is dropped
            // mid-sleep, and must not look as if it were still inside.
            struct Inside(Arc<AtomicUsize>);
            impl Drop for Inside {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let inside = n.fetch_add(1, Ordering::SeqCst) + 1;
            let _leaving = Inside(Arc::clone(&n));
            m.fetch_max(inside, Ordering::SeqCst);
            let ms = args["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            noesis_agent::ToolOutput::ok(format!("slept {ms}"))
        })
    });
    let decl = noesis_agent::ToolDecl::read_only(
        "nap",
        "Sleeps.",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
    );
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]).with_tool(decl.clone(), slow));
    let mut three = chat_completion("", "tool_calls");
    three["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "n1", "type": "function", "function": {"name": "nap", "arguments": "{\"ms\": 50}"}},
        {"id": "n2", "type": "function", "function": {"name": "nap", "arguments": "{\"ms\": 50}"}},
        {"id": "n3", "type": "function", "function": {"name": "nap", "arguments": "{\"ms\": 60000}"}}
    ]});
    let server =
        FakeServer::start(vec![Reply::Status(200, three.to_string(), vec![]), Reply::Chat("Rested.".into())]).unwrap();
    let config = RunConfig { tools: vec![decl], approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("t", "Nap.", config, 0);
    let p = provider(&server);
    let driver = noesis_agent::Driver {
        tool_timeout: Duration::from_millis(300),
        max_concurrent_tools: 1,
        ..noesis_agent::Driver::new(&p, Arc::clone(&tools))
    };
    let end = driver.drive(&mut run, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "Rested.".into() }));
    assert_eq!(most.load(Ordering::SeqCst), 1, "the batch ran one at a time");
    let statuses: Vec<CallStatus> = run.calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [CallStatus::Completed, CallStatus::Completed, CallStatus::Failed]);
    assert!(run.calls[2].result.as_deref().unwrap().contains("timed out after"), "{:?}", run.calls[2]);
}

/// A streaming drive publishes the reply's text piece by piece, before the
/// reply is taken in, and a streamed tool call is a call like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_drive_publishes_the_text_as_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "the cat\n").unwrap();
    let chunk = |delta: Value, finish: Option<&str>| {
        ("", json!({"model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let call = noesis_testkit::sse(&[
        chunk(json!({"role": "assistant", "content": "Reading."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}}]}),
            Some("tool_calls"),
        ),
        ("", json!("[DONE]")),
    ]);
    let answer = noesis_testkit::sse(&[
        chunk(json!({"content": "It says "}), None),
        chunk(json!({"content": "the cat."}), Some("stop")),
        ("", json!("[DONE]")),
    ]);
    let server = FakeServer::start(vec![
        Reply::Stream(call, Duration::from_millis(10)),
        Reply::Stream(answer, Duration::from_millis(10)),
    ])
    .unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("s", "What does a.txt say?", config, 0);
    let p = provider(&server);
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let observe = |progress: &noesis_agent::Progress| {
        let line = match progress {
            noesis_agent::Progress::TextDelta { turn, text } => format!("delta {turn} {text}"),
            noesis_agent::Progress::ModelReply { turn, .. } => format!("reply {turn}"),
            _ => return,
        };
        seen.lock().unwrap().push(line);
    };
    let driver = noesis_agent::Driver { stream: true, observe: Some(&observe), ..noesis_agent::Driver::new(&p, tools) };
    let end = driver.drive(&mut run, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "It says the cat.".into() }));
    assert_eq!(
        *seen.lock().unwrap(),
        ["delta 0 Reading.", "reply 0", "delta 1 It says ", "delta 1 the cat.", "reply 1"],
        "every piece before its reply"
    );
    assert!(run.calls[0].result.as_deref().unwrap().contains("the cat"), "{:?}", run.calls[0]);
    assert_eq!(server.received()[0].json()["stream"], true);
}

/// Issue 29: calls of a concurrent tool run at the same time, each knows
/// its own call id, and the tool's batch end sees all their results (in
/// call order) before the run takes in what it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_tools_calls_overlap_and_their_batch_end_judges_them_together() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (Arc::clone(&now), Arc::clone(&most));
    let helper: noesis_agent::ToolFn = Arc::new(move |_| {
        let (n, m) = (Arc::clone(&n), Arc::clone(&m));
        Box::pin(async move {
            m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            n.fetch_sub(1, Ordering::SeqCst);
            noesis_agent::ToolOutput::ok(format!("I am {}", noesis_agent::current_call_id().unwrap_or_default()))
        })
    });
    let decl = noesis_agent::ToolDecl::read_only("helper", "Helps.", json!({"type": "object"}))
        .with_effects(noesis_agent::Effects { writes_files: true, ..noesis_agent::Effects::default() })
        .concurrent();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let end: noesis_agent::BatchEndFn = Arc::new(move |ended: Vec<(String, noesis_agent::ToolOutput)>| {
        s.lock().unwrap().push(ended.iter().map(|(id, o)| format!("{id}: {}", o.content)).collect::<Vec<_>>());
        let n = ended.len();
        // It may quote what it judged: its results are redacted too.
        Box::pin(async move {
            ended
                .into_iter()
                .map(|(_, o)| {
                    noesis_agent::ToolOutput::ok(format!("{}; judged with {n} sekrit-token-value", o.content))
                })
                .collect()
        })
    });
    let tools = Arc::new(
        Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![])
            .with_tool(decl.clone(), helper)
            .with_batch_end("helper", end)
            .with_redactor(Arc::new(noesis_sandbox::Redactor::new(&[], &[], &["sekrit-token-value".into()]))),
    );
    let mut three = chat_completion("", "tool_calls");
    three["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "h1", "type": "function", "function": {"name": "helper", "arguments": "{}"}},
        {"id": "h2", "type": "function", "function": {"name": "helper", "arguments": "{}"}},
        {"id": "h3", "type": "function", "function": {"name": "helper", "arguments": "{}"}}
    ]});
    let server =
        FakeServer::start(vec![Reply::Status(200, three.to_string(), vec![]), Reply::Chat("Helped.".into())]).unwrap();
    let config = RunConfig { tools: vec![decl], approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("t", "Help.", config, 0);
    let p = provider(&server);
    let end = drive(&mut run, &p, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "Helped.".into() }));
    assert_eq!(most.load(Ordering::SeqCst), 3, "the three calls ran at the same time");
    assert_eq!(*seen.lock().unwrap(), [vec!["h1: I am h1", "h2: I am h2", "h3: I am h3"]]);
    let results: Vec<&str> = run.calls.iter().map(|c| c.result.as_deref().unwrap()).collect();
    assert!(results.iter().all(|r| !r.contains("sekrit")), "{results:?}");
    assert!(results[0].starts_with("I am h1; judged with 3 ") && results[2].starts_with("I am h3; "), "{results:?}");
}

/// Ollama's `/api/chat` as the fake server speaks it: a reply that calls
/// `read_file`, or answers, reporting `prompt_eval_count` prompt tokens.
fn ollama_reply(call: Option<(&str, &str)>, text: &str, prompt_tokens: u64) -> Reply {
    let mut message = json!({"role": "assistant", "content": text});
    if let Some((id, path)) = call {
        message["tool_calls"] = json!([{"id": id, "function": {"name": "read_file", "arguments": {"path": path}}}]);
    }
    let body = json!({"model": "llama3.2", "message": message, "done": true, "done_reason": "stop",
                      "prompt_eval_count": prompt_tokens, "eval_count": 5});
    Reply::Status(200, body.to_string(), vec![])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ollama_server_that_cuts_the_prompt_to_its_num_ctx_is_caught_and_the_run_compacts() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            format!("fact {i}: the port is 80{i}0\n{}", "filler text. ".repeat(200)),
        )
        .unwrap();
    }
    // Five reads, each reported whole; then the server cuts the prompt to
    // 1024 tokens, as Ollama does past its num_ctx, and says it read 1024.
    let mut script: Vec<Reply> =
        (0..5).map(|i| ollama_reply(Some((&format!("c{i}"), &format!("f{i}.txt"))), "", 600 * (i + 1))).collect();
    script.push(ollama_reply(None, "I cannot see the task.", 1024));
    script.push(ollama_reply(None, "Summary: five files read, each naming a port.", 500));
    script.push(ollama_reply(None, "The ports are 8000 to 8040.", 1400));
    let server = FakeServer::start(script).unwrap();
    let mut cfg = EndpointConfig::new("ollama", &format!("http://{}", server.addr()), "llama3.2");
    cfg.http.retry = RetryPolicy::none();
    let ollama = noesis_llm::Ollama::new(cfg).unwrap();
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
    let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
    let mut run = AgentRun::new("cut", "Which ports do the files name?", config, 0);
    let end = drive(&mut run, &ollama, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
    assert_eq!(end, Action::Done(Outcome::Answer { text: "The ports are 8000 to 8040.".into() }));
    let requests = server.received();
    assert_eq!(requests.len(), 8);
    // The reply made on the cut prompt was set aside: no entry holds it.
    assert!(
        !run.entries
            .iter()
            .any(|e| matches!(e, noesis_agent::Entry::Assistant { content, .. } if content.contains("cannot see")))
    );
    let (_, c) = run.compaction().expect("compacted");
    assert_eq!(c.reason, "truncated");
    assert!(c.facts.iter().any(|f| f.text.starts_with("read f0.txt (blake3 ")), "{:?}", c.facts);
    // The request asked again is shorter than the cut one, and carries the summary.
    let (cut, again) = (&requests[5].body, &requests[7].body);
    assert!(again.len() < cut.len(), "{} !< {}", again.len(), cut.len());
    assert!(again.contains("five files read") && again.contains("read f0.txt (blake3 "), "{again}");
}
