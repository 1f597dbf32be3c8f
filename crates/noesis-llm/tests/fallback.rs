//! The fallback chain over real HTTP: streamed text from one provider is
//! never followed by another provider's reply in the same sink.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_llm::{ChatRequest, EndpointConfig, ErrorKind, Fallback, Message, OpenAiCompatible, Provider, RetryPolicy};
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::json;

fn provider(server: &FakeServer, name: &str) -> Arc<dyn Provider> {
    let mut cfg = EndpointConfig::new(name, &server.base_url(), "m");
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry = RetryPolicy::none();
    Arc::new(OpenAiCompatible::new(cfg).unwrap())
}

fn piece(text: &str) -> serde_json::Value {
    json!({"choices": [{"index": 0, "delta": {"content": text}}]})
}

fn whole_stream(text: &str) -> Reply {
    Reply::Stream(
        sse(&[
            ("", piece(text)),
            ("", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            ("", json!("[DONE]")),
        ]),
        Duration::ZERO,
    )
}

/// Streams through a chain of `first` then `second`; returns the result and
/// every piece the sink received.
fn stream(first: &FakeServer, second: &FakeServer) -> (Result<String, noesis_llm::ProviderError>, Vec<String>) {
    let chain = Fallback::new(vec![provider(first, "first"), provider(second, "second")]).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink_seen = Arc::clone(&seen);
    let sink = move |t: &str| sink_seen.lock().unwrap().push(t.to_owned());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = rt.block_on(chain.chat_stream(&ChatRequest::new(vec![Message::user("hi")]), &sink)).map(|r| r.text);
    let pieces = seen.lock().unwrap().clone();
    (result, pieces)
}

#[test]
fn a_provider_that_fails_after_streaming_text_ends_the_chain() {
    let cut = Reply::StreamCut(sse(&[("", piece("The first provider's half"))]), Duration::ZERO);
    let first = FakeServer::start(vec![cut]).unwrap();
    let second = FakeServer::start(vec![whole_stream("A whole other reply")]).unwrap();
    let (result, pieces) = stream(&first, &second);
    let e = result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(e.provider, "first");
    assert!(e.message.contains("after part of the reply was streamed"), "{e}");
    assert_eq!(pieces, ["The first provider's half"], "the sink got text from one provider only");
    assert_eq!(second.received().len(), 0, "the next provider was not asked");
}

#[test]
fn a_provider_that_fails_before_any_text_hands_over_to_the_next() {
    let first = FakeServer::start(vec![Reply::Status(503, "down".into(), vec![])]).unwrap();
    let second = FakeServer::start(vec![whole_stream("from the second")]).unwrap();
    let (result, pieces) = stream(&first, &second);
    assert_eq!(result.unwrap(), "from the second");
    assert_eq!(pieces, ["from the second"]);
    assert_eq!((first.received().len(), second.received().len()), (1, 1));
}
