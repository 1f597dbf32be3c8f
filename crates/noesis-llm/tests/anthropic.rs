//! The Anthropic Messages provider over real HTTP against the fake server.

use std::sync::Mutex;
use std::time::Duration;

use noesis_llm::{
    ANTHROPIC_VERSION, Anthropic, Capabilities, ChatRequest, ChatResponse, EndpointConfig, ErrorKind, FinishReason,
    Message, Provider, ProviderError, ResponseFormat, RetryPolicy, StructuredMode, ToolCall, ToolChoice, ToolSpec,
    Usage,
};
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-key";

fn provider(server: &FakeServer) -> Anthropic {
    let mut cfg = EndpointConfig::new("anthropic", &format!("http://{}", server.addr()), "claude-test");
    cfg.api_key = Some(KEY.to_owned());
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry =
        RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) };
    Anthropic::new(cfg).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn chat(p: &Anthropic, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    runtime().block_on(p.chat(request))
}

/// The reply and the pieces `on_text` saw, in order.
fn stream(p: &Anthropic, request: &ChatRequest) -> (Result<ChatResponse, ProviderError>, Vec<String>) {
    let seen = Mutex::new(Vec::new());
    let sink = |s: &str| seen.lock().unwrap().push(s.to_owned());
    let result = runtime().block_on(p.chat_stream(request, &sink));
    (result, seen.into_inner().unwrap())
}

fn ok(body: Value) -> Reply {
    Reply::Status(200, body.to_string(), vec![])
}

fn message(content: Value, stop_reason: &str) -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-20250101",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 21, "output_tokens": 8}
    })
}

fn error_body(kind: &str, msg: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": msg}}).to_string()
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::system("You are terse."), Message::user("hi")])
}

/// The v2.2 envelope's shape at its root: an object with `oneOf`.
fn envelope_schema() -> Value {
    json!({
        "type": "object",
        "oneOf": [
            {"properties": {"ok": {"const": true}, "data": {"type": "object"}}, "required": ["ok", "data"]},
            {"properties": {"ok": {"const": false}, "error": {"type": "object"}}, "required": ["ok", "error"]}
        ]
    })
}

fn structured() -> ChatRequest {
    ChatRequest {
        response_format: ResponseFormat::JsonSchema { name: "envelope v2.2".into(), schema: envelope_schema() },
        ..hello()
    }
}

fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

fn events(list: &[(&str, Value)]) -> Vec<String> {
    sse(list)
}

fn text_stream(pieces: &[&str], stop: &str) -> Vec<String> {
    let mut list = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_s", "type": "message",
            "role": "assistant", "model": "claude-test-20250101", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 30, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
    ];
    for p in pieces {
        list.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    list.push(("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
    list.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 17}}),
    ));
    list.push(("message_stop", json!({"type": "message_stop"})));
    events(&list)
}

#[test]
fn plain_reply_sends_the_key_in_a_header_and_reads_usage() {
    let server = FakeServer::start(vec![ok(message(json!([{"type": "text", "text": "Hello."}]), "end_turn"))]).unwrap();
    let p = provider(&server);
    let r = chat(&p, &hello()).unwrap();
    assert_eq!(r.text, "Hello.");
    assert_eq!(r.model, "claude-test-20250101");
    assert_eq!(r.usage, Some(Usage { input_tokens: 21, output_tokens: 8 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.structured, StructuredMode::Text);
    assert!(r.tool_calls.is_empty());

    let got = server.received();
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/v1/messages"));
    assert!(!req.path.contains(KEY));
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some(ANTHROPIC_VERSION));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.json(),
        json!({"model": "claude-test", "max_tokens": 4096, "system": "You are terse.",
               "messages": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn capabilities_say_schema_through_tools_and_no_json_mode() {
    let server = FakeServer::start(vec![]).unwrap();
    assert_eq!(
        provider(&server).capabilities(),
        Capabilities { json_schema: true, json_mode: false, tools: true, streaming: true }
    );
}

#[test]
fn json_schema_is_a_forced_tool_whose_input_is_the_reply() {
    let reply = message(
        json!([{"type": "tool_use", "id": "toolu_01", "name": "envelope_v2_2",
                "input": {"ok": true, "data": {"answer": 42}}}]),
        "tool_use",
    );
    let server = FakeServer::start(vec![ok(reply)]).unwrap();
    let p = provider(&server);
    let r = chat(&p, &structured()).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&r.text).unwrap(), json!({"ok": true, "data": {"answer": 42}}));
    assert_eq!(r.structured, StructuredMode::ForcedTool);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert!(r.tool_calls.is_empty(), "the forced call is the answer, not a tool call");

    let body = server.received()[0].json();
    assert_eq!(
        body["tools"],
        json!([{"name": "envelope_v2_2",
                "description": "Give your final answer by calling this tool; its input is the answer.",
                "input_schema": envelope_schema()}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "envelope_v2_2"}));
    assert_eq!(body.get("response_format"), None);
}

#[test]
fn json_object_is_requested_as_text() {
    let server =
        FakeServer::start(vec![ok(message(json!([{"type": "text", "text": "{\"a\": 1}"}]), "end_turn"))]).unwrap();
    let p = provider(&server);
    let req = ChatRequest { response_format: ResponseFormat::JsonObject, ..hello() };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.text, "{\"a\": 1}");
    assert_eq!(r.structured, StructuredMode::Text);
    let body = server.received()[0].json();
    assert_eq!((body.get("tools"), body.get("tool_choice")), (None, None));
}

#[test]
fn tool_calls_round_trip() {
    let first = message(
        json!([{"type": "text", "text": "Let me read it."},
               {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.txt"}},
               {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b.txt"}}]),
        "tool_use",
    );
    let second = message(json!([{"type": "text", "text": "Both say hi."}]), "end_turn");
    let server = FakeServer::start(vec![ok(first), ok(second)]).unwrap();
    let p = provider(&server);
    let mut req = ChatRequest { tools: vec![read_tool()], tool_choice: ToolChoice::Required, ..hello() };

    let r = chat(&p, &req).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.text, "Let me read it.");
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall { id: "toolu_a".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) },
            ToolCall { id: "toolu_b".into(), name: "read_file".into(), arguments: json!({"path": "b.txt"}) },
        ]
    );

    req.messages.push(Message::assistant_turn(&r));
    req.messages.push(Message::tool_result(&r.tool_calls[0], "hi from a"));
    req.messages.push(Message::tool_result(&r.tool_calls[1], "hi from b"));
    req.tool_choice = ToolChoice::Auto;
    assert_eq!(chat(&p, &req).unwrap().text, "Both say hi.");

    let got = server.received();
    assert_eq!(
        got[0].json()["tools"],
        json!([{"name": "read_file", "description": "Reads a file.", "input_schema": read_tool().parameters}])
    );
    assert_eq!(got[0].json()["tool_choice"], json!({"type": "any"}));
    let follow_up = got[1].json();
    assert_eq!(follow_up["tool_choice"], json!({"type": "auto"}));
    assert_eq!(
        follow_up["messages"],
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me read it."},
                {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b.txt"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "hi from a"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "hi from b"}
            ]}
        ])
    );
}

#[test]
fn structured_output_keeps_the_callers_tools() {
    let reply = message(
        json!([{"type": "tool_use", "id": "toolu_r", "name": "read_file", "input": {"path": "x"}}]),
        "tool_use",
    );
    let server = FakeServer::start(vec![ok(reply)]).unwrap();
    let p = provider(&server);
    let req = ChatRequest { tools: vec![read_tool()], ..structured() };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.structured, StructuredMode::ForcedTool);
    let body = server.received()[0].json();
    let names: Vec<Value> = body["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("read_file"), json!("envelope_v2_2")]);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
}

#[test]
fn max_tokens_cut_is_length() {
    let server =
        FakeServer::start(vec![ok(message(json!([{"type": "text", "text": "It was a dark and"}]), "max_tokens"))])
            .unwrap();
    let p = provider(&server);
    let req = ChatRequest { max_tokens: Some(5), ..hello() };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
    assert_eq!(r.text, "It was a dark and");
    assert_eq!(server.received()[0].json()["max_tokens"], json!(5));
}

#[test]
fn streaming_hands_over_text_in_order() {
    let pieces = ["Once", " upon", " a", " time."];
    let server =
        FakeServer::start(vec![Reply::Stream(text_stream(&pieces, "end_turn"), Duration::from_millis(5))]).unwrap();
    let p = provider(&server);
    let (r, seen) = stream(&p, &hello());
    let r = r.unwrap();
    assert_eq!(seen, pieces);
    assert_eq!(r.text, pieces.concat());
    assert_eq!(r.usage, Some(Usage { input_tokens: 30, output_tokens: 17 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.model, "claude-test-20250101");
    let req = &server.received()[0];
    assert_eq!(req.json()["stream"], json!(true));
    assert_eq!(req.header("x-api-key"), Some(KEY));
}

#[test]
fn streaming_max_tokens_is_length() {
    let server = FakeServer::start(vec![Reply::Stream(text_stream(&["cut"], "max_tokens"), Duration::ZERO)]).unwrap();
    let (r, _) = stream(&provider(&server), &hello());
    assert_eq!(r.unwrap().finish_reason, Some(FinishReason::Length));
}

#[test]
fn streaming_structured_output_shows_the_json_as_it_is_written() {
    let parts = ["{\"ok\": tr", "ue, \"data\": {", "\"answer\": 42}}"];
    let mut list = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-test-20250101",
            "content": [], "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_e", "name": "envelope_v2_2", "input": {}}}),
        ),
    ];
    for part in parts {
        list.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": part}}),
        ));
    }
    list.push(("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
    list.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
    ));
    list.push(("message_stop", json!({"type": "message_stop"})));
    let server = FakeServer::start(vec![Reply::Stream(events(&list), Duration::from_millis(5))]).unwrap();
    let (r, seen) = stream(&provider(&server), &structured());
    let r = r.unwrap();
    assert_eq!(seen, parts);
    assert_eq!(r.text, parts.concat());
    assert_eq!(r.structured, StructuredMode::ForcedTool);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.usage, Some(Usage { input_tokens: 40, output_tokens: 12 }));
    assert!(r.tool_calls.is_empty());
    assert_eq!(server.received()[0].json()["tool_choice"], json!({"type": "tool", "name": "envelope_v2_2"}));
}

#[test]
fn streamed_tool_call_is_assembled_from_json_pieces() {
    let list = [
        ("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_s", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ": \"a.txt\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let server = FakeServer::start(vec![Reply::Stream(events(&list), Duration::ZERO)]).unwrap();
    let req = ChatRequest { tools: vec![read_tool()], ..hello() };
    let (r, seen) = stream(&provider(&server), &req);
    let r = r.unwrap();
    assert!(seen.is_empty(), "tool arguments are not reply text: {seen:?}");
    assert_eq!(
        r.tool_calls,
        vec![ToolCall { id: "toolu_s".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) }]
    );
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
}

#[test]
fn stream_cut_midway_is_an_error_not_a_short_reply() {
    let mut chunks = text_stream(&["Once", " upon"], "end_turn");
    chunks.truncate(4); // message_start, block start, ping, first delta
    let server = FakeServer::start(vec![Reply::StreamCut(chunks, Duration::from_millis(5))]).unwrap();
    let p = provider(&server);
    let (r, seen) = stream(&p, &hello());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert_eq!(seen, ["Once"]);
    assert_eq!(server.received().len(), 1, "text was shown, so the call must not be repeated");
}

#[test]
fn stream_that_ends_without_message_stop_is_an_error() {
    let mut chunks = text_stream(&["Once"], "end_turn");
    chunks.pop();
    let server = FakeServer::start(vec![Reply::Stream(chunks, Duration::ZERO)]).unwrap();
    let (r, _) = stream(&provider(&server), &hello());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("message_stop"), "{e}");
}

#[test]
fn overloaded_error_event_is_unavailable() {
    let mut chunks = text_stream(&["Once"], "end_turn");
    chunks.truncate(4);
    chunks.extend(events(&[(
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )]));
    let server = FakeServer::start(vec![Reply::Stream(chunks, Duration::ZERO)]).unwrap();
    let (r, _) = stream(&provider(&server), &hello());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("overloaded_error") && e.message.contains("Overloaded"), "{e}");
}

#[test]
fn invalid_request_is_rejected_with_the_apis_message() {
    let body = error_body("invalid_request_error", "max_tokens: must be greater than or equal to 1");
    let server = FakeServer::start(vec![Reply::Status(400, body, vec![])]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected { status: 400 });
    assert!(e.message.contains("max_tokens: must be greater than or equal to 1"), "{e}");
    assert_eq!(server.received().len(), 1);
}

#[test]
fn bad_key_is_unavailable_and_names_the_key_not_its_value() {
    let body = error_body("authentication_error", "invalid x-api-key");
    let server = FakeServer::start(vec![Reply::Status(401, body, vec![])]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("API key"), "{e}");
    assert!(!e.to_string().contains(KEY));
    assert_eq!(server.received().len(), 1);
}

#[test]
fn prompt_too_long_is_context_overflow() {
    let body = error_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum");
    let server = FakeServer::start(vec![Reply::Status(400, body, vec![])]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ContextOverflow);
}

#[test]
fn overloaded_529_is_retried() {
    let server = FakeServer::start(vec![
        Reply::Status(529, error_body("overloaded_error", "Overloaded"), vec![]),
        ok(message(json!([{"type": "text", "text": "back"}]), "end_turn")),
    ])
    .unwrap();
    let r = chat(&provider(&server), &hello()).unwrap();
    assert_eq!(r.text, "back");
    assert_eq!(server.received().len(), 2);
}

#[test]
fn reply_that_is_not_a_message_is_a_bad_response() {
    let server = FakeServer::start(vec![ok(json!({"choices": []}))]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadResponse);
}

#[test]
fn base_url_ending_in_v1_is_not_doubled() {
    let server = FakeServer::start(vec![ok(message(json!([{"type": "text", "text": "x"}]), "end_turn"))]).unwrap();
    let mut cfg = EndpointConfig::new("anthropic", &server.base_url(), "claude-test");
    cfg.api_key = None;
    let p = Anthropic::new(cfg).unwrap();
    chat(&p, &hello()).unwrap();
    let req = &server.received()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), None);
}
