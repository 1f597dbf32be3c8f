//! Retries of the OpenAI-compatible provider, over real HTTP against the fake server.

use std::time::{Duration, Instant};

use noesis_llm::{
    ChatRequest, EndpointConfig, ErrorKind, Message, OpenAiCompatible, Provider, ProviderError, ResponseFormat,
    RetryPolicy,
};
use noesis_testkit::{FakeServer, Reply};
use serde_json::json;

/// Tiny delays so the suite stays fast; Retry-After still applies in full.
fn fast(max_retries: u32) -> RetryPolicy {
    RetryPolicy { max_retries, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) }
}

fn provider(base_url: String, retry: RetryPolicy) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = base_url;
    cfg.api_key = Some("sk-test-key".to_owned());
    cfg.http.timeout = Duration::from_secs(5);
    cfg.http.retry = retry;
    OpenAiCompatible::new(cfg).unwrap()
}

fn chat(p: &OpenAiCompatible, request: &ChatRequest) -> Result<String, ProviderError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(p.chat(request)).map(|r| r.text)
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

fn status(code: u16, body: &str) -> Reply {
    Reply::Status(code, body.to_owned(), vec![])
}

#[test]
fn rate_limit_waits_for_retry_after_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::Status(429, "{}".into(), vec![("retry-after".into(), "1".into())]),
        Reply::Chat("hello".into()),
    ])
    .unwrap();
    let p = provider(server.base_url(), fast(2));
    let started = Instant::now();
    assert_eq!(chat(&p, &hello()).unwrap(), "hello");
    let elapsed = started.elapsed();
    assert_eq!(server.received().len(), 2);
    assert!(elapsed >= Duration::from_secs(1), "Retry-After ignored: waited only {elapsed:?}");
}

#[test]
fn service_unavailable_twice_then_success() {
    let server =
        FakeServer::start(vec![status(503, "busy"), status(503, "busy"), Reply::Chat("third".into())]).unwrap();
    let p = provider(server.base_url(), fast(2));
    assert_eq!(chat(&p, &hello()).unwrap(), "third");
    assert_eq!(server.received().len(), 3);
}

#[test]
fn every_transient_status_is_retried() {
    for code in [429, 500, 502, 503, 504] {
        let server = FakeServer::start(vec![status(code, "{}"), Reply::Chat("ok".into())]).unwrap();
        let p = provider(server.base_url(), fast(1));
        assert_eq!(chat(&p, &hello()).unwrap(), "ok", "HTTP {code}");
        assert_eq!(server.received().len(), 2, "HTTP {code}");
    }
}

#[test]
fn cloudflare_520_to_524_and_other_transient_5xx_are_retried() {
    for code in [520, 521, 522, 523, 524, 529, 507, 599] {
        let server =
            FakeServer::start(vec![status(code, "<html>origin error</html>"), Reply::Chat("ok".into())]).unwrap();
        let p = provider(server.base_url(), fast(1));
        assert_eq!(chat(&p, &hello()).unwrap(), "ok", "HTTP {code}");
        assert_eq!(server.received().len(), 2, "HTTP {code}");
    }
}

#[test]
fn permanent_5xx_are_not_retried() {
    for code in [501, 505, 511, 526] {
        let server = FakeServer::start(vec![status(code, "no"), Reply::Chat("never".into())]).unwrap();
        let p = provider(server.base_url(), fast(2));
        let e = chat(&p, &hello()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "HTTP {code}");
        assert_eq!(server.received().len(), 1, "HTTP {code} was retried");
    }
}

#[test]
fn persistent_server_error_gives_up_after_max_retries() {
    let server = FakeServer::start(vec![status(500, "boom")]).unwrap();
    let p = provider(server.base_url(), fast(2));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(e.attempts, 3);
    assert_eq!(server.received().len(), 3);
    assert!(e.to_string().contains("after 3 attempts"), "{e}");
    assert!(e.to_string().contains("HTTP 500"), "{e}");
}

#[test]
fn persistent_rate_limit_keeps_its_kind_and_retry_after() {
    let server =
        FakeServer::start(vec![Reply::Status(429, "{}".into(), vec![("retry-after".into(), "0".into())])]).unwrap();
    let p = provider(server.base_url(), fast(1));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited { retry_after: Some(Duration::ZERO) });
    assert_eq!(e.attempts, 2);
    assert_eq!(server.received().len(), 2);
}

#[test]
fn client_errors_are_not_retried() {
    for (code, body) in [(400, r#"{"error": {"message": "bad"}}"#), (401, "bad key"), (404, "nope"), (422, "no")] {
        let server = FakeServer::start(vec![status(code, body), Reply::Chat("never".into())]).unwrap();
        let p = provider(server.base_url(), fast(2));
        let e = chat(&p, &hello()).unwrap_err();
        assert_eq!(e.attempts, 1, "HTTP {code}");
        assert_eq!(server.received().len(), 1, "HTTP {code} was retried");
        assert!(!e.to_string().contains("attempts"), "{e}");
    }
}

#[test]
fn success_that_is_not_json_is_not_retried() {
    let server = FakeServer::start(vec![status(200, "not json at all"), Reply::Chat("never".into())]).unwrap();
    let p = provider(server.base_url(), fast(2));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadResponse);
    assert_eq!(server.received().len(), 1);
}

#[test]
fn dropped_connection_is_retried() {
    let server = FakeServer::start(vec![Reply::Close, Reply::Chat("after the drop".into())]).unwrap();
    let p = provider(server.base_url(), fast(2));
    assert_eq!(chat(&p, &hello()).unwrap(), "after the drop");
    assert_eq!(server.received().len(), 2);
}

#[test]
fn refused_connection_is_retried_then_reported_as_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = provider(format!("http://127.0.0.1:{port}/v1"), fast(2));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(e.attempts, 3);
    assert!(e.to_string().contains("cannot reach"), "{e}");
}

#[test]
fn timeouts_are_not_retried() {
    let server =
        FakeServer::start(vec![Reply::Delay(Duration::from_secs(3), Box::new(Reply::Chat("late".into())))]).unwrap();
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_millis(300);
    cfg.http.retry = fast(2);
    let p = OpenAiCompatible::new(cfg).unwrap();
    let e = chat(&p, &hello()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Timeout(_)), "{e:?}");
    assert_eq!(e.attempts, 1);
    assert_eq!(server.received().len(), 1);
}

#[test]
fn the_timeout_covers_every_attempt_and_the_waits_between() {
    // Each answer is a 503 after 300 ms; five retries would take 1.8 s, the
    // whole call has 0.8 s, so the third attempt is cut by the deadline.
    let slow_503 = Reply::Delay(Duration::from_millis(300), Box::new(status(503, "busy")));
    let server = FakeServer::start(vec![slow_503]).unwrap();
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_millis(800);
    cfg.http.retry = fast(5);
    let p = OpenAiCompatible::new(cfg).unwrap();
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout(Duration::from_millis(800)), "{e}");
    let sent = server.received().len();
    assert!((2..6).contains(&sent), "{sent} requests: the deadline did not stop the retries");
    assert_eq!(e.attempts as usize, sent, "{e}");
}

#[test]
fn a_retry_after_past_the_deadline_ends_the_call_with_the_servers_answer() {
    let server = FakeServer::start(vec![
        Reply::Status(429, "{}".into(), vec![("retry-after".into(), "30".into())]),
        Reply::Chat("never".into()),
    ])
    .unwrap();
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_secs(2);
    cfg.http.retry = fast(3);
    let p = OpenAiCompatible::new(cfg).unwrap();
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited { retry_after: Some(Duration::from_secs(30)) });
    assert_eq!((e.attempts, server.received().len()), (1, 1));
}

#[test]
fn credentials_in_the_base_url_never_reach_an_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = provider(format!("http://proxy-user:s3cret-pass@127.0.0.1:{port}/v1"), fast(0));
    let e = chat(&p, &hello()).unwrap_err();
    assert!(e.to_string().contains(&format!("cannot reach http://127.0.0.1:{port}")), "{e}");
    assert!(!e.to_string().contains("s3cret") && !e.to_string().contains("proxy-user"), "{e}");
    let bad = provider("http://u:s3cret@[::1".to_owned(), fast(0));
    let e = chat(&bad, &hello()).unwrap_err();
    assert!(e.to_string().contains("base URL http://***@[::1 is not usable"), "{e}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[test]
fn zero_retries_means_one_request() {
    let server = FakeServer::start(vec![status(503, "busy"), Reply::Chat("never".into())]).unwrap();
    let p = provider(server.base_url(), fast(0));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.attempts, 1);
    assert_eq!(server.received().len(), 1);
}

#[test]
fn json_schema_fallback_does_not_use_up_a_retry() {
    let server = FakeServer::start(vec![
        status(400, r#"{"error": {"message": "response_format json_schema is not supported"}}"#),
        status(503, "busy"),
        Reply::Chat("{}".into()),
    ])
    .unwrap();
    let p = provider(server.base_url(), fast(1));
    let mut req = hello();
    req.response_format = ResponseFormat::JsonSchema { name: "out".into(), schema: json!({"type": "object"}) };
    assert_eq!(chat(&p, &req).unwrap(), "{}");
    let formats: Vec<_> = server.received().iter().map(|r| r.json()["response_format"]["type"].clone()).collect();
    assert_eq!(formats, [json!("json_schema"), json!("json_object"), json!("json_object")]);
}

#[test]
fn dropped_connection_without_retries_fails() {
    // Guards the test above: the HTTP client itself must not be what recovers.
    let server = FakeServer::start(vec![Reply::Close, Reply::Chat("never".into())]).unwrap();
    let p = provider(server.base_url(), fast(0));
    let e = chat(&p, &hello()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(server.received().len(), 1);
}
