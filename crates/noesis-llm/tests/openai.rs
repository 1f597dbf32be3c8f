//! Request bodies the OpenAI-compatible provider sends, as the fake server
//! sees them: parameters by model family and the JSON-mode fallback.

use std::time::Duration;

use noesis_llm::{ChatRequest, EndpointConfig, Message, OpenAiCompatible, Provider, ResponseFormat, RetryPolicy};
use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

fn provider(server: &FakeServer, model: &str) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai(model);
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry = RetryPolicy::none();
    OpenAiCompatible::new(cfg).unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// The body sent for one call with a temperature and an output cap.
fn body_for(model: &str) -> Value {
    let server = FakeServer::start(vec![Reply::Chat("ok".into())]).unwrap();
    let p = provider(&server, model);
    let request =
        ChatRequest { max_tokens: Some(300), temperature: Some(0.2), ..ChatRequest::new(vec![Message::user("hi")]) };
    assert_eq!(block(p.chat(&request)).unwrap().text, "ok");
    server.received()[0].json()
}

#[test]
fn chat_models_get_max_tokens_and_temperature() {
    let body = body_for("gpt-4o-mini");
    assert_eq!(body["max_tokens"], json!(300));
    assert_eq!(body["temperature"], json!(0.2));
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
}

#[test]
fn reasoning_models_get_max_completion_tokens_and_no_temperature() {
    for model in ["o3-mini", "gpt-5-mini", "o1", "o4-mini", "openai/gpt-5"] {
        let body = body_for(model);
        assert_eq!(body["max_completion_tokens"], json!(300), "{model}: {body}");
        assert!(body.get("max_tokens").is_none(), "{model}: {body}");
        assert!(body.get("temperature").is_none(), "{model}: {body}");
    }
}

#[test]
fn json_mode_fallback_puts_the_schema_in_the_prompt() {
    let refusal = r#"{"error": {"message": "response_format json_schema is not supported"}}"#;
    let server = FakeServer::start(vec![
        Reply::Status(400, refusal.into(), vec![]),
        Reply::Chat("{\"verdict\": \"yes\"}".into()),
    ])
    .unwrap();
    let p = provider(&server, "gpt-4o-mini");
    let schema = json!({"type": "object", "properties": {"verdict_field_xyz": {"enum": ["yes", "no"]}},
                        "required": ["verdict_field_xyz"]});
    let request = ChatRequest {
        response_format: ResponseFormat::JsonSchema { name: "verdict".into(), schema },
        ..ChatRequest::new(vec![Message::system("Decide."), Message::user("is it?")])
    };
    assert_eq!(block(p.chat(&request)).unwrap().text, "{\"verdict\": \"yes\"}");
    let got = server.received();
    assert_eq!(got.len(), 2);
    let first = got[0].json();
    assert_eq!(first["response_format"]["type"], "json_schema");
    assert_eq!(first["messages"][0]["content"], "Decide.", "the schema goes to the API, not the prompt");
    let fallback = got[1].json();
    assert_eq!(fallback["response_format"], json!({"type": "json_object"}));
    let system = fallback["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("Decide.\n\n"), "{system}");
    assert!(system.contains("verdict_field_xyz") && system.contains("JSON Schema"), "{system}");
    assert_eq!(fallback["messages"][1]["content"], "is it?");

    // Later calls go straight to JSON mode, still with the schema.
    assert!(block(p.chat(&request)).is_ok());
    let later = server.received()[2].json();
    assert_eq!(later["response_format"], json!({"type": "json_object"}));
    assert!(later["messages"][0]["content"].as_str().unwrap().contains("verdict_field_xyz"));
}

/// Asked to stream, a server that answers with one JSON body instead (some
/// OpenAI-compatible servers ignore `stream`) still gives its reply, shown
/// whole, tool calls included.
#[test]
fn a_server_that_ignores_stream_and_answers_whole_still_answers() {
    let mut call = noesis_testkit::chat_completion("", "tool_calls");
    call["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}
    ]});
    let server =
        FakeServer::start(vec![Reply::Chat("whole text".into()), Reply::Status(200, call.to_string(), vec![])])
            .unwrap();
    let p = provider(&server, "gpt-test");
    let pieces = std::sync::Mutex::new(Vec::<String>::new());
    let sink = |t: &str| pieces.lock().unwrap().push(t.to_owned());
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let reply = block(p.chat_stream(&request, &sink)).unwrap();
    assert_eq!(reply.text, "whole text");
    assert_eq!(*pieces.lock().unwrap(), ["whole text"]);
    assert_eq!(server.received()[0].json()["stream"], true);
    let reply = block(p.chat_stream(&request, &sink)).unwrap();
    assert_eq!(reply.tool_calls[0].name, "read_file");
}
