//! The span tree of a run with two tool calls, as the SDK's in-memory
//! exporter receives it: the model over the OpenAI wire (the fake server on
//! 127.0.0.1), the built-in tools on a temporary workspace.

use std::sync::Arc;

use noesis_agent::{AgentRun, ApprovalPolicy, RunConfig, Strategy, Toolbox, Workspace, drive};
use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;

fn attr(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
}

#[test]
fn a_two_tool_run_is_one_agent_span_with_chat_and_tool_spans_under_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
    let server = FakeServer::start(vec![
        Reply::Status(200, tool_call_completion("c1", "read_file", &json!({"path": "a.txt"})).to_string(), vec![]),
        Reply::Status(200, tool_call_completion("c2", "list_dir", &json!({"path": "."})).to_string(), vec![]),
        Reply::Chat("a.txt says alpha".into()),
    ])
    .unwrap();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let _guard = tracing::subscriber::set_default(noesis_trace::subscriber(&provider, false));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(async {
        let mut cfg = EndpointConfig::openai("gpt-test");
        cfg.base_url = server.base_url();
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        let llm = OpenAiCompatible::new(cfg).unwrap();
        let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
        let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
        let mut run = AgentRun::new("run-7", "What does a.txt say?", config, 0);
        drive(&mut run, &llm, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
        run
    });
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let agent = spans.iter().find(|s| s.name == "invoke_agent noesis").unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(attr(agent, "gen_ai.operation.name"), Some("invoke_agent".into()));
    assert_eq!(attr(agent, "gen_ai.conversation.id"), Some("run-7".into()));
    assert_eq!(agent.span_kind, opentelemetry::trace::SpanKind::Internal);
    let under = |s: &&SpanData| s.parent_span_id == agent.span_context.span_id();
    let chats: Vec<&SpanData> = spans.iter().filter(|s| s.name == "chat gpt-test").filter(under).collect();
    assert_eq!(chats.len(), 3, "{names:?}");
    for c in &chats {
        assert_eq!(c.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(attr(c, "gen_ai.provider.name"), Some("openai".into()));
        assert_eq!(attr(c, "gen_ai.request.model"), Some("gpt-test".into()));
        assert!(attr(c, "gen_ai.usage.input_tokens").is_some(), "{c:?}");
    }
    let tools: Vec<&SpanData> = spans.iter().filter(|s| s.name.starts_with("execute_tool")).filter(under).collect();
    let tool_names: Vec<&str> = tools.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(tool_names, ["execute_tool read_file", "execute_tool list_dir"]);
    assert_eq!(attr(tools[0], "gen_ai.tool.name"), Some("read_file".into()));
    assert_eq!(attr(tools[0], "gen_ai.tool.call.id"), Some("c1".into()));
    // The steps the event bus publishes, by the same kinds, are the run
    // span's events.
    let events: Vec<&str> = agent.events.iter().map(|e| e.name.as_ref()).collect();
    let turn = ["model_call", "model_reply", "tool_call", "tool_result"];
    assert_eq!(events, [&turn[..], &turn[..], &turn[..2]].concat());
    let tool_result = agent.events.iter().find(|e| e.name == "tool_result").unwrap();
    assert!(tool_result.attributes.iter().any(|kv| kv.key.as_str() == "call_id" && kv.value.as_str() == "c1"));
    // One trace; no prompt or reply text on any span.
    assert!(spans.iter().all(|s| s.span_context.trace_id() == agent.span_context.trace_id()));
    let all = format!("{spans:?}");
    assert!(!all.contains("alpha") && !all.contains("What does a.txt say"), "texts leaked into spans");
    // The run keeps the ids its frames will carry: the drive's span, each
    // reply's chat span and each call's execute_tool span.
    assert_eq!(run.traces, [ids(agent)]);
    let reply_spans: Vec<_> = run.replies.iter().map(|r| r.span.clone().unwrap()).collect();
    assert_eq!(reply_spans, chats.iter().map(|c| ids(c)).collect::<Vec<_>>());
    let call_spans: Vec<_> = run.calls.iter().map(|c| c.span.clone().unwrap()).collect();
    assert_eq!(call_spans, tools.iter().map(|t| ids(t)).collect::<Vec<_>>());
}

fn ids(span: &SpanData) -> noesis_trace::SpanIds {
    noesis_trace::SpanIds {
        trace_id: span.span_context.trace_id().to_string(),
        span_id: span.span_context.span_id().to_string(),
    }
}

fn text(v: Option<Value>) -> String {
    v.map(|v| v.as_str().into_owned()).unwrap_or_default()
}

#[test]
fn planning_and_critique_are_spans_of_their_own_and_texts_are_kept_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
    let server = FakeServer::start(vec![
        Reply::Chat("1. Read a.txt".into()),
        Reply::Status(200, tool_call_completion("c1", "read_file", &json!({"path": "a.txt"})).to_string(), vec![]),
        Reply::Chat("It says alpha.".into()),
        Reply::Chat("a.txt says alpha".into()),
        Reply::Chat(json!({"goal_achieved": true, "what_went_wrong": "", "next_step": ""}).to_string()),
    ])
    .unwrap();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let _guard = tracing::subscriber::set_default(noesis_trace::subscriber(&provider, true));
    assert!(noesis_trace::capturing());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(async {
        let mut cfg = EndpointConfig::openai("gpt-test");
        cfg.base_url = server.base_url();
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        let llm = OpenAiCompatible::new(cfg).unwrap();
        let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
        let config = RunConfig {
            tools: tools.decls(),
            approval: ApprovalPolicy::Auto,
            strategy: Strategy::ChainOfThought,
            reflect: true,
            ..RunConfig::default()
        };
        let mut run = AgentRun::new("run-8", "What does a.txt say?", config, 0);
        drive(&mut run, &llm, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
        run
    });
    assert_eq!(noesis_agent::outcome_name(run.outcome.as_ref().unwrap()), "answer", "{:?}", run.outcome);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let agent = spans.iter().find(|s| s.name == "invoke_agent noesis").unwrap_or_else(|| panic!("{names:?}"));
    let children_of = |parent: &SpanData| -> Vec<&SpanData> {
        spans.iter().filter(|s| s.parent_span_id == parent.span_context.span_id()).collect()
    };
    let top: Vec<&str> = children_of(agent).iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        top,
        ["plan noesis", "chat gpt-test", "execute_tool read_file", "chat gpt-test", "chat gpt-test", "reflect noesis"],
        "{names:?}"
    );
    for (phase, role) in [("plan noesis", "plan"), ("reflect noesis", "reflect")] {
        let span = spans.iter().find(|s| s.name == phase).unwrap();
        assert_eq!(attr(span, "gen_ai.operation.name"), Some(role.into()));
        let under = children_of(span);
        assert_eq!(under.len(), 1, "{phase}: {names:?}");
        assert_eq!(under[0].name, "chat gpt-test");
        assert_eq!(attr(under[0], "gen_ai.agent.role"), Some(role.into()));
    }
    // Opted in: the conventions' message JSON on chat spans, arguments and
    // results on tool spans.
    let plan_chat = children_of(spans.iter().find(|s| s.name == "plan noesis").unwrap())[0];
    let input: serde_json::Value = serde_json::from_str(&text(attr(plan_chat, "gen_ai.input.messages"))).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[0]["parts"][0]["type"], "text");
    assert!(input[0]["parts"][0]["content"].as_str().unwrap().contains("What does a.txt say?"), "{input}");
    let output: serde_json::Value = serde_json::from_str(&text(attr(plan_chat, "gen_ai.output.messages"))).unwrap();
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["parts"][0]["content"], "1. Read a.txt");
    let asked = spans
        .iter()
        .find(|s| text(attr(s, "gen_ai.output.messages")).contains("\"tool_call\""))
        .unwrap_or_else(|| panic!("no reply with a tool call part"));
    let out: serde_json::Value = serde_json::from_str(&text(attr(asked, "gen_ai.output.messages"))).unwrap();
    assert_eq!(
        out[0]["parts"][0],
        json!({"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}})
    );
    let after = children_of(agent).into_iter().filter(|s| s.name == "chat gpt-test").nth(1).unwrap();
    let sent = text(attr(after, "gen_ai.input.messages"));
    assert!(sent.contains("\"tool_call_response\"") && sent.contains("alpha"), "{sent}");
    let tool = spans.iter().find(|s| s.name == "execute_tool read_file").unwrap();
    assert_eq!(text(attr(tool, "gen_ai.tool.call.arguments")), r#"{"path":"a.txt"}"#);
    assert!(text(attr(tool, "gen_ai.tool.call.result")).contains("alpha"));
    assert_eq!(run.traces, [ids(agent)]);
}
