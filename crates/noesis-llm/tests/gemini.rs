//! The Gemini provider over real HTTP against the fake server speaking
//! `generateContent` and `streamGenerateContent?alt=sse`.

use std::sync::Mutex;
use std::time::Duration;

use noesis_llm::{
    ChatRequest, ChatResponse, EndpointConfig, ErrorKind, FinishReason, Gemini, Message, Provider, ProviderError,
    ResponseFormat, RetryPolicy, StructuredMode, ToolCall, ToolChoice, ToolSpec, Usage,
};
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::{Value, json};

const KEY: &str = "AIza-test-key-123";

fn provider(server: &FakeServer) -> Gemini {
    let mut cfg = EndpointConfig::new("gemini", &format!("http://{}/v1beta", server.addr()), "gemini-test");
    cfg.api_key = Some(KEY.to_owned());
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry =
        RetryPolicy { max_retries: 1, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(20) };
    Gemini::new(cfg).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn chat(p: &Gemini, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    rt().block_on(p.chat(request))
}

fn ok(body: Value) -> Reply {
    Reply::Status(200, body.to_string(), vec![])
}

fn status(code: u16, body: Value) -> Reply {
    Reply::Status(code, body.to_string(), vec![])
}

fn text_reply(text: &str, finish: &str) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5, "totalTokenCount": 17},
        "modelVersion": "gemini-test-001"
    })
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::system("Answer briefly."), Message::user("hi")])
}

#[test]
fn plain_reply_with_usage_auth_header_and_no_key_in_url() {
    let server = FakeServer::start(vec![ok(text_reply("Hello there", "STOP"))]).unwrap();
    let p = provider(&server);
    let r = chat(&p, &hello()).unwrap();
    assert_eq!(r.text, "Hello there");
    assert_eq!(r.model, "gemini-test-001");
    assert_eq!(r.usage, Some(Usage { input_tokens: 12, output_tokens: 5 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.structured, StructuredMode::Text);
    assert!(r.tool_calls.is_empty());

    let got = server.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(got[0].header("x-goog-api-key"), Some(KEY));
    assert!(!got[0].path.contains(KEY) && !got[0].path.contains("key="), "{}", got[0].path);
    assert!(got[0].header("authorization").is_none());
    assert_eq!(
        got[0].json(),
        json!({
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "systemInstruction": {"parts": [{"text": "Answer briefly."}]}
        })
    );
}

#[test]
fn schema_that_converts_goes_as_response_schema() {
    let server = FakeServer::start(vec![ok(text_reply("{\"answer\": \"4\"}", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.temperature = Some(0.0);
    req.max_tokens = Some(200);
    req.response_format = ResponseFormat::JsonSchema {
        name: "answer".into(),
        schema: json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "additionalProperties": false, "required": ["answer"],
            "properties": {"answer": {"type": "string", "maxLength": 10}, "note": {"type": ["string", "null"]}}}),
    };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.text, "{\"answer\": \"4\"}");
    assert_eq!(r.structured, StructuredMode::JsonSchemaStrict);
    assert_eq!(
        server.received()[0].json()["generationConfig"],
        json!({
            "temperature": 0.0,
            "maxOutputTokens": 200,
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "required": ["answer"], "properties": {
                "answer": {"type": "STRING"},
                "note": {"type": "STRING", "nullable": true}
            }}
        })
    );
}

#[test]
fn schema_that_does_not_convert_goes_as_response_json_schema() {
    let schema = json!({"type": "object", "required": ["tags"], "properties": {
        "tags": {"type": "object", "additionalProperties": {"type": "string"}}}});
    let server = FakeServer::start(vec![ok(text_reply("{\"tags\": {}}", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.response_format = ResponseFormat::JsonSchema { name: "tags".into(), schema: schema.clone() };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.structured, StructuredMode::JsonSchemaStrict);
    let config = &server.received()[0].json()["generationConfig"];
    assert_eq!(config, &json!({"responseMimeType": "application/json", "responseJsonSchema": schema}));
}

#[test]
fn json_object_asks_only_for_the_mime_type() {
    let server = FakeServer::start(vec![ok(text_reply("{}", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.response_format = ResponseFormat::JsonObject;
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.structured, StructuredMode::JsonObject);
    assert_eq!(server.received()[0].json()["generationConfig"], json!({"responseMimeType": "application/json"}));
}

#[test]
fn refused_schema_falls_back_to_json_mode_once() {
    let refusal = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "Invalid JSON payload received. Unknown name \"minimum\" at 'generation_config.response_schema.properties[0].value': Cannot find field."}});
    let server = FakeServer::start(vec![status(400, refusal), ok(text_reply("{\"n\": 1}", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.response_format = ResponseFormat::JsonSchema {
        name: "n".into(),
        schema: json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}),
    };
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.text, "{\"n\": 1}");
    assert_eq!(r.structured, StructuredMode::JsonObject);
    let got = server.received();
    assert_eq!(got.len(), 2);
    assert!(got[0].json()["generationConfig"].get("responseSchema").is_some());
    assert_eq!(got[1].json()["generationConfig"], json!({"responseMimeType": "application/json"}));
    // The API no longer has the schema, so the prompt carries it.
    let system = got[1].json()["systemInstruction"]["parts"][0]["text"].as_str().unwrap().to_owned();
    assert!(system.starts_with("Answer briefly.\n\n"), "{system}");
    assert!(system.contains("JSON Schema") && system.contains("\"minimum\": 0"), "{system}");
    let first = got[0].json()["systemInstruction"]["parts"][0]["text"].clone();
    assert_eq!(first, json!("Answer briefly."), "the schema travels in the prompt only after the fallback");
}

#[test]
fn tools_with_a_json_reply_fall_back_to_text_where_the_model_cannot_combine_them() {
    let refusal = gemini_error(
        400,
        "INVALID_ARGUMENT",
        "Function calling with a response mime type: 'application/json' is unsupported",
    );
    let server = FakeServer::start(vec![status(400, refusal), ok(text_reply("{\"done\": true}", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.tools = vec![read_tool()];
    req.response_format = ResponseFormat::JsonObject;
    let r = chat(&p, &req).unwrap();
    assert_eq!(r.structured, StructuredMode::Text);
    let got = server.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].json()["generationConfig"], json!({"responseMimeType": "application/json"}));
    assert!(got[1].json().get("generationConfig").is_none());
    assert!(got[1].json().get("tools").is_some());
}

fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "required": ["path"], "additionalProperties": false,
            "properties": {"path": {"type": "string"}}}),
    }
}

#[test]
fn tool_calls_are_parsed_and_sent_back() {
    let calls = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "Let me look."},
            {"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}, "thoughtSignature": "SIG-A"},
            {"functionCall": {"id": "fc-b", "name": "read_file", "args": {"path": "b.txt"}}}
        ]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 9}
    });
    let server = FakeServer::start(vec![ok(calls), ok(text_reply("Both files say hi.", "STOP"))]).unwrap();
    let p = provider(&server);
    let mut req = ChatRequest::new(vec![Message::user("What do a.txt and b.txt say?")]);
    req.tools = vec![read_tool()];
    req.tool_choice = ToolChoice::Required;

    let first = chat(&p, &req).unwrap();
    assert_eq!(first.text, "Let me look.");
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.tool_calls,
        vec![
            ToolCall { id: "call_0".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) },
            ToolCall { id: "fc-b".into(), name: "read_file".into(), arguments: json!({"path": "b.txt"}) },
        ]
    );
    let sent = server.received()[0].json();
    assert_eq!(
        sent["tools"],
        json!([{"functionDeclarations": [{"name": "read_file", "description": "Reads a file.", "parameters":
            {"type": "OBJECT", "required": ["path"], "properties": {"path": {"type": "STRING"}}}}]}])
    );
    assert_eq!(sent["toolConfig"], json!({"functionCallingConfig": {"mode": "ANY"}}));

    req.messages.push(Message::assistant_turn(&first));
    req.messages.push(Message::tool_result(&first.tool_calls[0], "hi from a"));
    req.messages.push(Message::tool_result(&first.tool_calls[1], "{\"text\": \"hi from b\"}"));
    req.tool_choice = ToolChoice::Auto;
    let second = chat(&p, &req).unwrap();
    assert_eq!(second.text, "Both files say hi.");
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));

    let sent = server.received()[1].json();
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [{"text": "What do a.txt and b.txt say?"}]},
            {"role": "model", "parts": [
                {"text": "Let me look."},
                // The signature goes back with its call; the made-up id does not.
                {"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}, "thoughtSignature": "SIG-A"},
                {"functionCall": {"name": "read_file", "args": {"path": "b.txt"}, "id": "fc-b"}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read_file", "response": {"output": "hi from a"}}},
                {"functionResponse": {"name": "read_file", "response": {"text": "hi from b"}, "id": "fc-b"}}
            ]}
        ])
    );
    assert_eq!(sent["toolConfig"], json!({"functionCallingConfig": {"mode": "AUTO"}}));
}

#[test]
fn max_tokens_cut_is_length() {
    let server = FakeServer::start(vec![ok(text_reply("{\"a\": \"trunc", "MAX_TOKENS"))]).unwrap();
    let r = chat(&provider(&server), &hello()).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
    assert_eq!(r.text, "{\"a\": \"trunc");
}

#[test]
fn safety_stop_is_other_and_blocked_prompt_is_bad_response() {
    let safety = json!({"candidates": [{"finishReason": "SAFETY", "safetyRatings": []}]});
    let server = FakeServer::start(vec![ok(safety)]).unwrap();
    let r = chat(&provider(&server), &hello()).unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Other));
    assert_eq!(r.text, "");

    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 8}});
    let server = FakeServer::start(vec![ok(blocked)]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadResponse);
    assert!(e.message.contains("blocked (PROHIBITED_CONTENT)"), "{e}");
}

fn gemini_error(code: u16, status: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "status": status}})
}

#[test]
fn bad_request_is_rejected_with_the_api_message() {
    let server = FakeServer::start(vec![status(
        400,
        gemini_error(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified"),
    )])
    .unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected { status: 400 });
    assert!(e.message.contains("contents is not specified"), "{e}");
    assert_eq!(server.received().len(), 1, "a 400 is not retried");
}

#[test]
fn bad_keys_are_unavailable_and_never_echoed() {
    // Gemini says "bad key" with a 400, and may quote the key back.
    let body = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "API key not valid. Please pass a valid API key.",
        "details": [{"reason": "API_KEY_INVALID"}, {"detail": format!("Invalid API key: {KEY}")}]}});
    let server = FakeServer::start(vec![status(400, body)]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("API key"), "{e}");
    assert!(!e.to_string().contains(KEY), "{e}");
    assert!(e.message.contains("<redacted>"), "the quoted key should have been there to redact: {e}");

    let server =
        FakeServer::start(vec![status(403, gemini_error(403, "PERMISSION_DENIED", "Permission denied."))]).unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("API key"), "{e}");
}

#[test]
fn too_long_prompt_is_context_overflow() {
    let server = FakeServer::start(vec![status(
        400,
        gemini_error(
            400,
            "INVALID_ARGUMENT",
            "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        ),
    )])
    .unwrap();
    let e = chat(&provider(&server), &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ContextOverflow);
    assert!(e.message.contains("1200293"), "{e}");
}

#[test]
fn overload_is_retried() {
    let server = FakeServer::start(vec![
        status(503, gemini_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")),
        ok(text_reply("fine now", "STOP")),
    ])
    .unwrap();
    let r = chat(&provider(&server), &hello()).unwrap();
    assert_eq!(r.text, "fine now");
    assert_eq!(server.received().len(), 2);
}

fn chunk(text: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
           "usageMetadata": {"promptTokenCount": 7}, "modelVersion": "gemini-test-001"})
}

fn last_chunk(text: &str, finish: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish, "index": 0}],
           "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10},
           "modelVersion": "gemini-test-001"})
}

fn stream(p: &Gemini, request: &ChatRequest) -> (Result<ChatResponse, ProviderError>, Vec<String>) {
    let pieces = Mutex::new(Vec::new());
    let sink = |t: &str| pieces.lock().unwrap().push(t.to_owned());
    let result = rt().block_on(p.chat_stream(request, &sink));
    (result, pieces.into_inner().unwrap())
}

#[test]
fn streamed_text_arrives_in_order_and_adds_up() {
    let chunks = sse(&[("", chunk("Hel")), ("", chunk("lo, ")), ("", last_chunk("world", "STOP"))]);
    let server = FakeServer::start(vec![Reply::Stream(chunks, Duration::from_millis(5))]).unwrap();
    let p = provider(&server);
    let (r, pieces) = stream(&p, &hello());
    let r = r.unwrap();
    assert_eq!(pieces, ["Hel", "lo, ", "world"]);
    assert_eq!(r.text, pieces.concat());
    assert_eq!(r.usage, Some(Usage { input_tokens: 7, output_tokens: 3 }));
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(r.model, "gemini-test-001");
    let got = server.received();
    assert_eq!(got[0].path, "/v1beta/models/gemini-test:streamGenerateContent?alt=sse");
    assert_eq!(got[0].header("x-goog-api-key"), Some(KEY));
}

#[test]
fn streamed_tool_call_and_length_cut() {
    let call = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "read_file", "args": {"path": "x"}}, "thoughtSignature": "SIG"}]},
        "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}});
    let server = FakeServer::start(vec![
        Reply::Stream(sse(&[("", call)]), Duration::ZERO),
        Reply::Stream(sse(&[("", chunk("par")), ("", last_chunk("tial", "MAX_TOKENS"))]), Duration::ZERO),
    ])
    .unwrap();
    let p = provider(&server);
    let mut req = hello();
    req.tools = vec![read_tool()];
    let (r, pieces) = stream(&p, &req);
    let r = r.unwrap();
    assert!(pieces.is_empty());
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, json!({"path": "x"}));

    let (r, pieces) = stream(&p, &hello());
    let r = r.unwrap();
    assert_eq!(pieces, ["par", "tial"]);
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
}

#[test]
fn stream_cut_midway_is_an_error_not_a_short_reply() {
    let server =
        FakeServer::start(vec![Reply::StreamCut(sse(&[("", chunk("Hel")), ("", chunk("lo"))]), Duration::ZERO)])
            .unwrap();
    let (r, pieces) = stream(&provider(&server), &hello());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(pieces, ["Hel", "lo"]);
    assert_eq!(server.received().len(), 1, "text was shown: no retry");
}

#[test]
fn stream_that_ends_without_a_finish_reason_is_an_error() {
    let server = FakeServer::start(vec![Reply::Stream(sse(&[("", chunk("Hel"))]), Duration::ZERO)]).unwrap();
    let (r, _) = stream(&provider(&server), &hello());
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("ended early"), "{e}");
}

#[test]
fn error_inside_the_stream_is_an_error() {
    let err = gemini_error(500, "INTERNAL", "An internal error has occurred.");
    let server = FakeServer::start(vec![Reply::Stream(sse(&[("", chunk("Hel")), ("", err)]), Duration::ZERO)]).unwrap();
    let (r, _) = stream(&provider(&server), &hello());
    let e = r.unwrap_err();
    assert!(e.message.contains("internal error"), "{e}");
}
