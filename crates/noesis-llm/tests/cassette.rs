//! Record / replay: recording real HTTP calls to the fake server through
//! `OpenAiCompatible`, then answering from the cassettes with no server.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_llm::{
    ChatRequest, ChatResponse, EndpointConfig, ErrorKind, FinishReason, Message, OpenAiCompatible, Provider,
    ProviderError, Recorder, Replayer, ResponseFormat, RetryPolicy, StructuredMode, ToolSpec, Usage,
};
use noesis_testkit::{FakeServer, Reply, chat_completion, sse};
use serde_json::{Value, json};

const KEY: &str = "sk-cassette-secret-0123456789";

fn openai(server: &FakeServer) -> Arc<dyn Provider> {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.api_key = Some(KEY.to_owned());
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::default() };
    Arc::new(OpenAiCompatible::new(cfg).unwrap())
}

fn block_on<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn ask(p: &dyn Provider, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    block_on(p.chat(request))
}

/// The pieces handed to `on_text`, and the final reply.
fn ask_streaming(p: &dyn Provider, request: &ChatRequest) -> (Vec<String>, Result<ChatResponse, ProviderError>) {
    let pieces = Mutex::new(Vec::new());
    let on_text = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    let result = block_on(p.chat_stream(request, &on_text));
    (pieces.into_inner().unwrap(), result)
}

fn structured(prompt: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("Answer in JSON."), Message::user(prompt)],
        response_format: ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
        },
        max_tokens: Some(200),
        temperature: Some(0.2),
        ..ChatRequest::default()
    }
}

/// Every file in `dir`, sorted by name.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Each cassette is `KEY.json` holding its key, and nothing else is left in
/// the directory (no temporary files).
fn assert_only_whole_cassettes(dir: &Path, expected: usize) {
    let paths = files(dir);
    assert_eq!(paths.len(), expected, "{paths:?}");
    for path in paths {
        let name = path.file_name().unwrap().to_str().unwrap();
        let stem = name.strip_suffix(".json").unwrap_or_else(|| panic!("not a cassette: {name}"));
        assert_eq!(read_json(&path)["key"], stem, "{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(KEY), "the API key is in {name}");
    }
}

#[test]
fn a_recording_replays_with_no_server_and_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::Chat("{\"ok\":true}".into())]).unwrap();
    let recorder = Recorder::new(openai(&server), dir.path()).unwrap();
    let recorded_caps = recorder.capabilities();
    let request = structured("Is water wet?");
    let recorded = ask(&recorder, &request).unwrap();
    assert_eq!(recorded.text, "{\"ok\":true}");
    assert_eq!(recorded.structured, StructuredMode::JsonSchemaStrict);
    assert_eq!(recorded.usage, Some(Usage { input_tokens: 11, output_tokens: 7 }));
    assert_eq!(server.received().len(), 1);
    assert_eq!(server.received()[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));

    assert_only_whole_cassettes(dir.path(), 1);
    let path = &files(dir.path())[0];
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.starts_with("{\n  \"version\": 1,\n  \"key\": "), "not pretty-printed:\n{text}");
    let cassette = read_json(path);
    assert_eq!(cassette["provider"], "openai");
    assert_eq!(cassette["model"], "gpt-test");
    assert_eq!(
        cassette["capabilities"],
        json!({"json_schema": true, "json_mode": true, "tools": true, "streaming": true})
    );
    assert_eq!(cassette["request"]["messages"][1], json!({"role": "user", "content": "Is water wet?"}));
    assert_eq!(cassette["request"]["temperature"], json!(0.2));
    assert_eq!(
        cassette["response"],
        json!({
            "text": "{\"ok\":true}",
            "model": "fake-model",
            "usage": {"input_tokens": 11, "output_tokens": 7},
            "finish_reason": "stop",
            "structured": "json_schema_strict",
            "tool_calls": []
        })
    );

    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    assert_eq!((replayer.name(), replayer.model()), ("openai", "gpt-test"));
    assert_eq!(replayer.capabilities(), recorded_caps);
    assert_eq!(ask(&replayer, &request).unwrap(), recorded);
    assert_eq!(server.received().len(), 1, "replay reached the server");

    drop(server);
    assert_eq!(ask(&replayer, &request).unwrap(), recorded);
    let (pieces, streamed) = ask_streaming(&replayer, &request);
    assert_eq!(streamed.unwrap(), recorded);
    assert_eq!(pieces.concat(), recorded.text);
}

#[test]
fn a_changed_prompt_fails_closed_naming_the_nearest_recording() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::Chat("{\"ok\":true}".into())]).unwrap();
    let recorder = Recorder::new(openai(&server), dir.path()).unwrap();
    let long = format!("Summarise this report. {} The budget is 40 units.", "Background text. ".repeat(20));
    ask(&recorder, &structured(&long)).unwrap();
    let mut other = ChatRequest::new(vec![Message::system("Translate."), Message::user("bonjour")]);
    other.max_tokens = Some(5);
    ask(&recorder, &other).unwrap();
    drop(server);
    let nearest = files(dir.path())
        .into_iter()
        .find(|p| read_json(p)["request"]["messages"][1]["content"] == long.as_str())
        .unwrap();

    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    let changed = long.replace("40 units", "45 units");
    let e = ask(&replayer, &structured(&changed)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotRecorded);
    let message = e.to_string();
    assert!(message.contains(&dir.path().display().to_string()), "{message}");
    assert!(message.contains(&nearest.display().to_string()), "{message}");
    assert!(message.contains("differs in 1 place:"), "{message}");
    assert!(
        message.contains("/messages/1/content: recorded …\"") && message.contains("budget is 40 units.\" vs now …\""),
        "{message}"
    );
    assert!(message.contains("budget is 45 units.\" (first difference at character"), "{message}");

    // Another model is another key; the nearest recording says so.
    let replayer = Replayer::open(dir.path(), "openai", "gpt-other").unwrap();
    let e = ask(&replayer, &structured(&long)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotRecorded);
    assert!(e.message.contains("/model: recorded \"gpt-test\" vs now \"gpt-other\""), "{}", e.message);
}

#[test]
fn an_empty_directory_has_no_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    let e = ask(&replayer, &structured("hi")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotRecorded);
    assert!(e.message.starts_with(&format!("no recordings in {}", dir.path().display())), "{}", e.message);
}

#[test]
fn a_missing_directory_is_an_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = Replayer::open(&missing, "openai", "gpt-test").err().unwrap();
    assert!(e.message.contains(&missing.display().to_string()), "{}", e.message);
}

#[test]
fn a_corrupt_cassette_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::Chat("fine".into())]).unwrap();
    ask(&Recorder::new(openai(&server), dir.path()).unwrap(), &structured("hi")).unwrap();
    std::fs::write(dir.path().join("broken.json"), "{\"version\": 1, \"key\": ").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a cassette, not read").unwrap();
    let e = Replayer::open(dir.path(), "openai", "gpt-test").err().unwrap();
    assert!(e.message.contains("broken.json: not valid JSON: EOF while parsing"), "{}", e.message);

    std::fs::write(dir.path().join("broken.json"), "{\"version\": 1, \"key\": \"k\"}").unwrap();
    let e = Replayer::open(dir.path(), "openai", "gpt-test").err().unwrap();
    assert!(e.message.contains("broken.json: not a valid cassette: missing field"), "{}", e.message);
}

#[test]
fn streaming_through_the_recorder_records_the_joined_text() {
    let dir = tempfile::tempdir().unwrap();
    let events = sse(&[
        ("", json!({"model": "fake-model", "choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": "lo\nwor"}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": "ld"}, "finish_reason": "stop"}]})),
        ("", json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})),
        ("", json!("[DONE]")),
    ]);
    let server = FakeServer::start(vec![Reply::Stream(events, Duration::from_millis(5))]).unwrap();
    let recorder = Recorder::new(openai(&server), dir.path()).unwrap();
    let request = ChatRequest::new(vec![Message::user("greet")]);
    let (pieces, result) = ask_streaming(&recorder, &request);
    let recorded = result.unwrap();
    assert_eq!(pieces, ["Hel", "lo\nwor", "ld"]);
    assert_eq!(recorded.text, "Hello\nworld");
    assert_eq!(server.received()[0].json()["stream"], true);
    drop(server);

    assert_only_whole_cassettes(dir.path(), 1);
    let cassette = read_json(&files(dir.path())[0]);
    assert_eq!(cassette["response"]["text"], "Hello\nworld");
    assert_eq!(cassette["response"]["usage"], json!({"input_tokens": 5, "output_tokens": 3}));

    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    let (pieces, replayed) = ask_streaming(&replayer, &request);
    assert_eq!(pieces, ["Hello\n", "world"]);
    assert_eq!(replayed.unwrap(), recorded);
    // A recording made while streaming serves a plain call too: the request is the same.
    assert_eq!(ask(&replayer, &request).unwrap(), recorded);
}

#[test]
fn tool_calls_survive_the_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut body = chat_completion("", "tool_calls");
    body["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}
    ]});
    let server = FakeServer::start(vec![Reply::Status(200, body.to_string(), vec![])]).unwrap();
    let recorder = Recorder::new(openai(&server), dir.path()).unwrap();
    let mut request = ChatRequest::new(vec![Message::user("read a.txt")]);
    request.tools = vec![ToolSpec {
        name: "read".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    let recorded = ask(&recorder, &request).unwrap();
    assert_eq!(recorded.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(recorded.tool_calls[0].arguments, json!({"path": "a.txt"}));
    drop(server);

    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    assert_eq!(ask(&replayer, &request).unwrap(), recorded);
    // The follow-up turn is a new request: not recorded.
    request.messages.push(Message::assistant_turn(&recorded));
    request.messages.push(Message::tool_result(&recorded.tool_calls[0], "contents"));
    let e = ask(&replayer, &request).unwrap_err();
    assert!(e.message.contains("/messages/1: recorded (absent) vs now {\"role\":\"assistant\""), "{}", e.message);
}

#[test]
fn failed_calls_are_returned_unchanged_and_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let error = json!({"error": {"message": "model not allowed", "type": "invalid_request_error"}});
    let server = FakeServer::start(vec![Reply::Status(400, error.to_string(), vec![])]).unwrap();
    let inner = openai(&server);
    let direct = ask(inner.as_ref(), &structured("hi")).unwrap_err();
    let recorder = Recorder::new(inner, dir.path()).unwrap();
    let through = ask(&recorder, &structured("hi")).unwrap_err();
    assert_eq!(through.kind, ErrorKind::Rejected { status: 400 });
    assert_eq!(through.to_string(), direct.to_string());
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_recording_that_cannot_be_written_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("nested").join("cassettes");
    let server = FakeServer::start(vec![Reply::Chat("answer".into())]).unwrap();
    let recorder = Recorder::new(openai(&server), &target).unwrap();
    assert!(target.is_dir(), "the recorder creates its directory");
    std::fs::remove_dir(&target).unwrap();
    let e = ask(&recorder, &structured("hi")).unwrap_err();
    assert_eq!(server.received().len(), 1);
    assert!(e.message.starts_with("the model answered but its recording "), "{}", e.message);
    assert!(e.message.contains(&target.display().to_string()) && e.message.contains(".json"), "{}", e.message);
    assert!(!dir.path().join("nested").join("cassettes").exists());
}

#[test]
fn recording_many_calls_at_once_leaves_only_whole_cassettes() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::Chat("{\"ok\":true}".into())]).unwrap();
    let recorder = Arc::new(Recorder::new(openai(&server), dir.path()).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..12)
            .map(|i| {
                let recorder = Arc::clone(&recorder);
                tokio::spawn(async move { recorder.chat(&structured(&format!("question {}", i % 4))).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    });
    assert_eq!(server.received().len(), 12);
    drop(server);
    assert_only_whole_cassettes(dir.path(), 4);
    let replayer = Replayer::open(dir.path(), "openai", "gpt-test").unwrap();
    for i in 0..4 {
        assert_eq!(ask(&replayer, &structured(&format!("question {i}"))).unwrap().text, "{\"ok\":true}");
    }
}
