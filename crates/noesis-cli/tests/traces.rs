//! OpenTelemetry over OTLP/HTTP for real: `noesis agent` with
//! OTEL_EXPORTER_OTLP_ENDPOINT pointing at a receiver this test runs on
//! 127.0.0.1, which decodes the protobuf export requests it gets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::json;

use crate::support::{Work, output};

/// What the receiver got: each request's path and decoded body.
pub(crate) type Received = Arc<Mutex<Vec<(String, ExportTraceServiceRequest)>>>;

/// Accepts OTLP/HTTP export requests (keep-alive honoured), answers 200,
/// and keeps (path, decoded request).
pub(crate) fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&got);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let mut length = 0usize;
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf body");
                    sink.lock().unwrap().push((path, request));
                    let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if conn.write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, got)
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|a| a.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[test]
fn an_agent_run_is_exported_over_otlp_http_as_a_genai_span_tree() {
    let work = Work::new();
    std::fs::create_dir_all(work.path().join("ws")).unwrap();
    work.write("ws/a.txt", "alpha");
    let llm = FakeServer::start(vec![
        Reply::Status(200, tool_call_completion("c1", "read_file", &json!({"path": "a.txt"})).to_string(), vec![]),
        Reply::Chat("It says alpha.".into()),
    ])
    .unwrap();
    let (endpoint, got) = receiver();
    let ws = work.path().join("ws");
    let o = output(
        work.noesis_bare()
            .args(["agent", "What does a.txt say?", "--workspace", ws.to_str().unwrap(), "--run-id", "traced"])
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
    );
    assert_eq!((o.code, o.stdout.as_str()), (0, "It says alpha.\n"), "{}", o.stderr);
    let got = got.lock().unwrap();
    assert!(!got.is_empty(), "nothing was exported");
    assert!(got.iter().all(|(path, _)| path == "/v1/traces"), "{:?}", got.iter().map(|g| &g.0).collect::<Vec<_>>());
    let resource_spans: Vec<_> = got.iter().flat_map(|(_, r)| &r.resource_spans).collect();
    let service = resource_spans[0]
        .resource
        .as_ref()
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .map(|kv| text(&kv.value));
    assert_eq!(service.as_deref(), Some("noesis"));
    let spans: Vec<_> = resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).collect();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let agent = spans.iter().find(|s| s.name == "invoke_agent noesis").unwrap_or_else(|| panic!("{names:?}"));
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str| {
        s.attributes.iter().find(|kv| kv.key == k).map(|kv| text(&kv.value))
    };
    assert_eq!(attr(agent, "gen_ai.conversation.id").as_deref(), Some("traced"));
    let children: Vec<&str> =
        spans.iter().filter(|s| s.parent_span_id == agent.span_id).map(|s| s.name.as_str()).collect();
    assert_eq!(children.iter().filter(|n| n.starts_with("chat ")).count(), 2, "{names:?}");
    assert!(children.contains(&"execute_tool read_file"), "{names:?}");
    let chat = spans.iter().find(|s| s.name.starts_with("chat ")).unwrap();
    assert_eq!(attr(chat, "gen_ai.provider.name").as_deref(), Some("openai"));
    assert_eq!(attr(chat, "gen_ai.usage.input_tokens").as_deref(), Some("11"));
    // Opted in by the standard variable: the messages are on the chat span.
    let sent = attr(chat, "gen_ai.input.messages").unwrap_or_default();
    assert!(sent.contains("What does a.txt say?"), "{sent}");
    // The run's frames carry the ids the receiver got.
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let frames = output(work.noesis_bare().args(["frames", "list", "--json"])).json();
    let all = frames.as_array().unwrap();
    let slice = |q: &str| -> serde_json::Value {
        let f = all.iter().find(|f| f["query"].as_str().is_some_and(|x| x.starts_with(q))).unwrap();
        serde_json::from_str(f["context_slice"].as_str().unwrap()).unwrap()
    };
    let root = slice("What does a.txt say?");
    assert_eq!(root["otel"], json!([{"trace_id": hex(&agent.trace_id), "span_id": hex(&agent.span_id)}]));
    let tool = spans.iter().find(|s| s.name == "execute_tool read_file").unwrap();
    assert_eq!(slice("read_file")["otel"]["span_id"], hex(&tool.span_id));
    assert_eq!(slice("model turn 1")["otel"]["trace_id"], hex(&agent.trace_id));
}
