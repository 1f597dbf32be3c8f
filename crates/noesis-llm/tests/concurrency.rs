//! The per-provider concurrency cap, over real HTTP against the fake server.
//!
//! Overlap is read from the server (`max_in_flight`: how many requests it
//! was answering at once), never from how long the burst took, so a slow
//! machine cannot fail these tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use noesis_llm::{ChatRequest, EndpointConfig, Message, OpenAiCompatible, Provider, RetryPolicy};
use noesis_testkit::{FakeServer, Reply};

const CALLS: usize = 12;

fn provider(base_url: String, max_concurrency: usize) -> Arc<OpenAiCompatible> {
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = base_url;
    cfg.http.timeout = Duration::from_secs(30);
    cfg.http.retry = RetryPolicy::none();
    cfg.http.max_concurrency = max_concurrency;
    Arc::new(OpenAiCompatible::new(cfg).unwrap())
}

/// Fires `CALLS` chats at once on one shared provider; returns how long all took.
async fn burst(p: Arc<OpenAiCompatible>) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLS)
        .map(|_| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { p.chat(&ChatRequest::new(vec![Message::user("hi")])).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().text, "ok");
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cap_of_four_runs_twelve_calls_in_three_waves() {
    let latency = Duration::from_millis(200);
    let server = FakeServer::start_with(vec![Reply::Chat("ok".into())], 0, latency).unwrap();
    let elapsed = burst(provider(server.base_url(), 4)).await;
    assert_eq!(server.received().len(), CALLS);
    assert_eq!(server.max_in_flight(), 4, "the cap is four at once, and four were sent together");
    // A lower bound only: three waves cannot finish sooner.
    assert!(elapsed >= 3 * latency, "cap not enforced: {elapsed:?}");
}

// The server holds each answer for a whole second, so a burst sent at once
// is still in flight when its last request arrives, however busy the machine.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cap_as_wide_as_the_burst_runs_it_in_one_wave() {
    let server = FakeServer::start_with(vec![Reply::Chat("ok".into())], 0, Duration::from_secs(1)).unwrap();
    burst(provider(server.base_url(), CALLS)).await;
    assert_eq!(server.received().len(), CALLS);
    assert_eq!(server.max_in_flight(), CALLS, "calls were serialised");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_means_unlimited() {
    let server = FakeServer::start_with(vec![Reply::Chat("ok".into())], 0, Duration::from_secs(1)).unwrap();
    burst(provider(server.base_url(), 0)).await;
    assert_eq!(server.max_in_flight(), CALLS, "calls were serialised");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_does_not_hold_a_permit() {
    // One call fails and sleeps a second before retrying; with a cap of one,
    // a second call must get through during that sleep rather than wait
    // behind it: the server sees first, second, then the first's retry.
    let server = FakeServer::start(vec![
        Reply::Status(503, "busy".into(), vec![("retry-after".into(), "1".into())]),
        Reply::Chat("ok".into()),
    ])
    .unwrap();
    let mut cfg = EndpointConfig::openai("gpt-test");
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_secs(30);
    cfg.http.retry =
        RetryPolicy { max_retries: 1, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(10) };
    cfg.http.max_concurrency = 1;
    let p = Arc::new(OpenAiCompatible::new(cfg).unwrap());
    let first = {
        let p = Arc::clone(&p);
        tokio::spawn(async move { p.chat(&ChatRequest::new(vec![Message::user("first")])).await })
    };
    // Let the first call take its failure and start sleeping.
    while server.received().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = p.chat(&ChatRequest::new(vec![Message::user("second")])).await.unwrap();
    assert_eq!(second.text, "ok");
    assert_eq!(first.await.unwrap().unwrap().text, "ok");
    let order: Vec<String> = server
        .received()
        .iter()
        .map(|r| r.json()["messages"][0]["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(order, ["first", "second", "first"], "the second call waited behind a backoff");
}
