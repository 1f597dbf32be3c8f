//! The Ollama provider over real HTTP against the fake server speaking
//! Ollama's native `/api/chat` wire format.

use std::sync::Mutex;
use std::time::Duration;

use noesis_llm::{
    ChatRequest, ChatResponse, EndpointConfig, ErrorKind, FinishReason, Message, Ollama, Provider, ProviderError,
    ResponseFormat, RetryPolicy, StructuredMode, ToolCall, ToolSpec, Usage, normalize_host,
};
use noesis_testkit::{FakeServer, Reply, ndjson};
use serde_json::{Value, json};

const KEY: &str = "ollama-secret-key";

fn provider(server: &FakeServer, key: Option<&str>) -> Ollama {
    let mut cfg = EndpointConfig::new("ollama", &format!("http://{}", server.addr()), "llama3.2");
    cfg.api_key = key.map(str::to_owned);
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry =
        RetryPolicy { max_retries: 1, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(20) };
    Ollama::new(cfg).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn chat(p: &Ollama, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    rt().block_on(p.chat(request))
}

/// Streams `request`, returning the pieces handed to `on_text` and the result.
fn chat_stream(p: &Ollama, request: &ChatRequest) -> (Vec<String>, Result<ChatResponse, ProviderError>) {
    let pieces = Mutex::new(Vec::new());
    let sink = |s: &str| pieces.lock().unwrap().push(s.to_owned());
    let result = rt().block_on(p.chat_stream(request, &sink));
    (pieces.into_inner().unwrap(), result)
}

fn ok(body: Value) -> Reply {
    Reply::Status(200, body.to_string(), vec![])
}

fn status(code: u16, body: &str) -> Reply {
    Reply::Status(code, body.to_owned(), vec![])
}

fn reply(content: &str, done_reason: &str) -> Value {
    json!({
        "model": "llama3.2",
        "created_at": "2024-12-06T00:46:58.265747Z",
        "message": {"role": "assistant", "content": content},
        "done_reason": done_reason,
        "done": true,
        "total_duration": 2_254_970_291_u64,
        "prompt_eval_count": 34,
        "eval_count": 12
    })
}

fn chunk(content: &str) -> Value {
    json!({"model": "llama3.2", "created_at": "2024-12-06T00:46:58Z",
           "message": {"role": "assistant", "content": content}, "done": false})
}

fn last(done_reason: &str) -> Value {
    json!({"model": "llama3.2", "created_at": "2024-12-06T00:46:59Z",
           "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": done_reason,
           "prompt_eval_count": 26, "eval_count": 3})
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")])
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }
}

#[test]
fn plain_reply_posts_to_api_chat_and_reads_text_usage_and_stop() {
    let server = FakeServer::start(vec![ok(reply("Hello there.", "stop"))]).unwrap();
    let p = provider(&server, None);
    let mut request = hello();
    request.temperature = Some(0.5);
    request.max_tokens = Some(100);
    let r = chat(&p, &request).unwrap();
    assert_eq!(r.text, "Hello there.");
    assert_eq!(r.model, "llama3.2");
    assert_eq!(r.usage, Some(Usage { input_tokens: 34, output_tokens: 12 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.structured, StructuredMode::Text);
    assert!(r.tool_calls.is_empty());

    let got = server.received();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("POST", "/api/chat"));
    assert_eq!(
        got[0].json(),
        json!({
            "model": "llama3.2",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "stream": false,
            "options": {"temperature": 0.5, "num_predict": 100}
        })
    );
    assert_eq!(got[0].header("authorization"), None);
}

#[test]
fn json_schema_is_sent_as_format_and_recorded_as_strict() {
    let schema = json!({
        "type": "object",
        "properties": {"age": {"type": "integer"}, "available": {"type": "boolean"}},
        "required": ["age", "available"]
    });
    let server = FakeServer::start(vec![ok(reply("{\"age\": 22, \"available\": false}", "stop"))]).unwrap();
    let p = provider(&server, None);
    let mut request = ChatRequest::new(vec![Message::user("Ollama is 22 and busy.")]);
    request.response_format = ResponseFormat::JsonSchema { name: "person".into(), schema: schema.clone() };
    let r = chat(&p, &request).unwrap();
    assert_eq!(r.structured, StructuredMode::JsonSchemaStrict);
    assert_eq!(r.text, "{\"age\": 22, \"available\": false}");
    let body = server.received()[0].json();
    assert_eq!(body["format"], schema, "the schema goes as is, not rewritten");
    assert_eq!(body["stream"], json!(false));
}

#[test]
fn json_object_is_sent_as_format_json() {
    let server = FakeServer::start(vec![ok(reply("{}", "stop"))]).unwrap();
    let p = provider(&server, None);
    let mut request = ChatRequest::new(vec![Message::user("JSON please")]);
    request.response_format = ResponseFormat::JsonObject;
    let r = chat(&p, &request).unwrap();
    assert_eq!(r.structured, StructuredMode::JsonObject);
    assert_eq!(server.received()[0].json()["format"], json!("json"));
}

#[test]
fn tool_calls_in_the_reply_become_tool_calls_with_ids() {
    let answer = json!({
        "model": "llama3.2",
        "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
        ]},
        "done_reason": "stop", "done": true, "prompt_eval_count": 122, "eval_count": 33
    });
    let server = FakeServer::start(vec![ok(answer)]).unwrap();
    let p = provider(&server, None);
    let mut request = ChatRequest::new(vec![Message::user("Weather in Paris and Oslo?")]);
    request.tools = vec![weather_tool()];
    let r = chat(&p, &request).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall { id: "call_0".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
            ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments: json!({"city": "Oslo"}) },
        ]
    );
    assert_eq!(
        server.received()[0].json()["tools"],
        json!([{"type": "function", "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }}])
    );
}

#[test]
fn follow_up_sends_the_assistant_turn_and_the_tool_result() {
    let first = json!({
        "model": "llama3.2",
        "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ]},
        "done_reason": "stop", "done": true
    });
    let server = FakeServer::start(vec![ok(first), ok(reply("It is 22C in Paris.", "stop"))]).unwrap();
    let p = provider(&server, None);
    let mut request = ChatRequest::new(vec![Message::user("Weather in Paris?")]);
    request.tools = vec![weather_tool()];
    let r1 = chat(&p, &request).unwrap();
    request.messages.push(Message::assistant_turn(&r1));
    request.messages.push(Message::tool_result(&r1.tool_calls[0], "22C"));
    let r2 = chat(&p, &request).unwrap();
    assert_eq!(r2.text, "It is 22C in Paris.");
    assert_eq!(r2.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        server.received()[1].json()["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ]},
            {"role": "tool", "content": "22C", "tool_name": "get_weather"}
        ])
    );
}

#[test]
fn streaming_hands_pieces_over_in_order_and_returns_the_whole_reply() {
    let lines = ndjson(&[chunk("The"), chunk(" sky"), chunk(" is"), chunk(" blue."), last("stop")]);
    let server = FakeServer::start(vec![Reply::Stream(lines, Duration::from_millis(20))]).unwrap();
    let p = provider(&server, None);
    let (pieces, result) = chat_stream(&p, &hello());
    let r = result.unwrap();
    assert_eq!(pieces, ["The", " sky", " is", " blue."]);
    assert_eq!(r.text, pieces.concat());
    assert_eq!(r.usage, Some(Usage { input_tokens: 26, output_tokens: 3 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.model, "llama3.2");
    assert_eq!(server.received()[0].json()["stream"], json!(true));
}

#[test]
fn streamed_tool_calls_are_collected() {
    let call = json!({"model": "llama3.2", "message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    ]}, "done": false});
    let server =
        FakeServer::start(vec![Reply::Stream(ndjson(&[call, last("stop")]), Duration::from_millis(5))]).unwrap();
    let p = provider(&server, None);
    let mut request = ChatRequest::new(vec![Message::user("Weather in Paris?")]);
    request.tools = vec![weather_tool()];
    let (pieces, result) = chat_stream(&p, &request);
    let r = result.unwrap();
    assert!(pieces.is_empty());
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        r.tool_calls,
        vec![ToolCall { id: "call_0".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) }]
    );
}

#[test]
fn a_stream_cut_mid_way_is_an_error_not_a_short_reply() {
    let server =
        FakeServer::start(vec![Reply::StreamCut(ndjson(&[chunk("The"), chunk(" sky")]), Duration::from_millis(5))])
            .unwrap();
    let p = provider(&server, None);
    let (pieces, result) = chat_stream(&p, &hello());
    assert_eq!(pieces, ["The", " sky"]);
    let e = result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(server.received().len(), 1, "no retry after text was shown");
}

#[test]
fn a_stream_that_ends_cleanly_without_done_is_an_error() {
    let server =
        FakeServer::start(vec![Reply::Stream(ndjson(&[chunk("The"), chunk(" sky")]), Duration::ZERO)]).unwrap();
    let p = provider(&server, None);
    let (_, result) = chat_stream(&p, &hello());
    let e = result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("without its final `done` line"), "{}", e.message);
}

#[test]
fn an_error_line_in_the_stream_is_an_error() {
    let lines = ndjson(&[chunk("The"), json!({"error": "an error was encountered while running the model"})]);
    let server = FakeServer::start(vec![Reply::Stream(lines, Duration::ZERO)]).unwrap();
    let p = provider(&server, None);
    let (_, result) = chat_stream(&p, &hello());
    let e = result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("while running the model"), "{}", e.message);
}

#[test]
fn a_length_cut_is_reported_as_length() {
    let server = FakeServer::start(vec![
        ok(reply("The sky is", "length")),
        Reply::Stream(ndjson(&[chunk("The sky"), last("length")]), Duration::ZERO),
    ])
    .unwrap();
    let p = provider(&server, None);
    assert_eq!(chat(&p, &hello()).unwrap().finish_reason, Some(FinishReason::Length));
    assert_eq!(chat_stream(&p, &hello()).1.unwrap().finish_reason, Some(FinishReason::Length));
}

#[test]
fn a_missing_model_is_rejected_with_a_pull_hint() {
    let server =
        FakeServer::start(vec![status(404, r#"{"error":"model \"llama3.2\" not found, try pulling it first"}"#)])
            .unwrap();
    let p = provider(&server, None);
    for e in [chat(&p, &hello()).unwrap_err(), chat_stream(&p, &hello()).1.unwrap_err()] {
        assert_eq!(e.kind, ErrorKind::Rejected { status: 404 });
        assert!(e.message.contains("not found, try pulling it first"), "{}", e.message);
        assert!(e.message.contains("ollama pull llama3.2"), "{}", e.message);
    }
    assert_eq!(server.received().len(), 2, "a 404 is not retried");
}

#[test]
fn a_wrong_base_url_404_says_to_use_the_server_root() {
    let server = FakeServer::start(vec![status(404, "404 page not found")]).unwrap();
    let p = provider(&server, None);
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected { status: 404 });
    assert!(e.message.contains("server root"), "{}", e.message);
}

#[test]
fn an_error_body_is_rejected_with_its_message() {
    let server = FakeServer::start(vec![status(400, r#"{"error":"invalid options: num_predict"}"#)]).unwrap();
    let p = provider(&server, None);
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected { status: 400 });
    assert!(e.message.contains("invalid options: num_predict"), "{}", e.message);
}

#[test]
fn an_error_in_a_200_body_is_an_error() {
    let server = FakeServer::start(vec![ok(json!({"error": "something went wrong"}))]).unwrap();
    let p = provider(&server, None);
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("something went wrong"), "{}", e.message);
}

#[test]
fn unauthorized_is_unavailable_and_mentions_the_key() {
    let server = FakeServer::start(vec![status(401, r#"{"error":"unauthorized"}"#)]).unwrap();
    let p = provider(&server, Some(KEY));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("API key"), "{}", e.message);
    assert!(!e.message.contains(KEY) && !format!("{e:?}").contains(KEY));
}

#[test]
fn a_prompt_over_the_context_length_is_context_overflow() {
    let server =
        FakeServer::start(vec![status(400, r#"{"error":"the input length exceeds the context length"}"#)]).unwrap();
    let p = provider(&server, None);
    assert_eq!(chat(&p, &hello()).unwrap_err().kind, ErrorKind::ContextOverflow);
}

#[test]
fn the_key_goes_in_a_bearer_header_never_in_the_url() {
    let server = FakeServer::start(vec![ok(reply("hi", "stop"))]).unwrap();
    let p = provider(&server, Some(KEY));
    chat(&p, &hello()).unwrap();
    let got = &server.received()[0];
    assert_eq!(got.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert!(!got.path.contains(KEY));
    assert!(!got.body.contains(KEY));
    assert!(!format!("{p:?}").contains(KEY));
}

#[test]
fn a_transient_failure_is_retried_through_the_shared_client() {
    let server = FakeServer::start(vec![status(503, "busy"), ok(reply("second", "stop"))]).unwrap();
    let p = provider(&server, None);
    assert_eq!(chat(&p, &hello()).unwrap().text, "second");
    assert_eq!(server.received().len(), 2);
}

#[test]
fn an_unreachable_server_hints_at_ollama_serve() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cfg = EndpointConfig::new("ollama", &addr.to_string(), "llama3.2");
    cfg.http.retry.max_retries = 0;
    let p = Ollama::new(cfg).unwrap();
    let e = rt().block_on(p.chat(&hello())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("ollama serve"), "{}", e.message);
}

#[test]
fn capabilities_are_all_there() {
    let server = FakeServer::start(vec![ok(reply("", "stop"))]).unwrap();
    let c = provider(&server, None).capabilities();
    assert!(c.json_schema && c.json_mode && c.tools && c.streaming);
}

#[test]
fn normalize_host_reads_ollama_host_like_the_ollama_cli() {
    for (given, want) in [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("localhost:11434", "http://localhost:11434"),
        ("  gpu-box  ", "http://gpu-box:11434"),
        (":11435", "http://127.0.0.1:11435"),
        ("gpu-box:notaport", "http://gpu-box:11434"),
        ("gpu-box:99999", "http://gpu-box:11434"),
        ("http://h:1234/", "http://h:1234"),
        ("http://0.0.0.0:11434", "http://127.0.0.1:11434"),
        ("HTTP://h:1", "http://h:1"),
        // An explicit scheme keeps its own default port, as `ollama` does.
        ("http://h", "http://h"),
        ("https://ollama.example.com/", "https://ollama.example.com"),
        ("example.com/ollama/", "http://example.com:11434/ollama"),
        ("https://proxy:8443/ollama/", "https://proxy:8443/ollama"),
        ("::1", "http://[::1]:11434"),
        ("[::1]", "http://[::1]:11434"),
        ("[::1]:9999", "http://[::1]:9999"),
        ("[::]", "http://[::1]:11434"),
        ("ollama.com", "https://ollama.com"),
    ] {
        assert_eq!(normalize_host(given), want, "OLLAMA_HOST={given:?}");
    }
}

#[test]
fn new_accepts_an_ollama_host_value_as_base_url() {
    let server = FakeServer::start(vec![ok(reply("hi", "stop"))]).unwrap();
    let port = server.addr().port();
    let p = Ollama::new(EndpointConfig::new("ollama", &format!("0.0.0.0:{port}"), "llama3.2")).unwrap();
    assert_eq!(chat(&p, &hello()).unwrap().text, "hi");
    assert_eq!(server.received()[0].path, "/api/chat");
}
