//! The span tree of a run with two tool calls, as the SDK's in-memory
//! exporter receives it: the model over the OpenAI wire (the fake server on
//! 127.0.0.1), the built-in tools on a temporary workspace.

use std::sync::Arc;

use noesis_agent::{AgentRun, ApprovalPolicy, RunConfig, Toolbox, Workspace, drive};
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
    let _guard = tracing::subscriber::set_default(noesis_trace::subscriber(&provider));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cfg = EndpointConfig::openai("gpt-test");
        cfg.base_url = server.base_url();
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        let llm = OpenAiCompatible::new(cfg).unwrap();
        let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
        let config = RunConfig { tools: tools.decls(), approval: ApprovalPolicy::Auto, ..RunConfig::default() };
        let mut run = AgentRun::new("run-7", "What does a.txt say?", config, 0);
        drive(&mut run, &llm, &tools, &|| 0, &|_| 0.0, &mut |_: &AgentRun| {}).await.unwrap();
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
    // One trace; no prompt or reply text on any span.
    assert!(spans.iter().all(|s| s.span_context.trace_id() == agent.span_context.trace_id()));
    let all = format!("{spans:?}");
    assert!(!all.contains("alpha") && !all.contains("What does a.txt say"), "texts leaked into spans");
}
