//! Fault injection: each way an HTTP provider can fail, through a whole
//! module run over real HTTP against the fake server, gives the right
//! E-code with the tries counted. Also cancellation, budgets and the
//! fallback chain, which are decided at the same boundary. No test bounds
//! the wall clock from above: an outcome that only a wait could give (a
//! timeout's E2002, a reply never received) shows what happened instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use noesis_llm::{
    Budget, BudgetMeter, EndpointConfig, Fallback, OpenAiCompatible, Price, PriceTable, Provider, RetryPolicy,
};
use noesis_modules::Module;
use noesis_modules::search::Found;
use noesis_runtime::{CancellationToken, OnText, RunOptions, run};
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_millis(800);

fn module() -> Module {
    Found::Builtin("code-simplifier").load().unwrap()
}

fn input() -> Value {
    json!({"code": "x = 1 + 0"})
}

fn good_reply() -> String {
    json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
           "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                    "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string()
}

fn provider(server: &FakeServer, retries: u32) -> OpenAiCompatible {
    provider_with(server, retries, TIMEOUT)
}

fn provider_with(server: &FakeServer, retries: u32, timeout: Duration) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.timeout = timeout;
    cfg.http.connect_timeout = timeout;
    cfg.http.retry = RetryPolicy {
        max_retries: retries,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    OpenAiCompatible::new(cfg).unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

struct Outcome {
    envelope: Value,
    elapsed: Duration,
    requests: usize,
}

fn run_against(replies: Vec<Reply>, retries: u32, options: &RunOptions) -> Outcome {
    run_against_with(replies, retries, TIMEOUT, options)
}

fn run_against_with(replies: Vec<Reply>, retries: u32, timeout: Duration, options: &RunOptions) -> Outcome {
    let server = FakeServer::start(replies).unwrap();
    let p = provider_with(&server, retries, timeout);
    let started = Instant::now();
    let record = block(run(&module(), &p, input(), options));
    Outcome { envelope: record.envelope, elapsed: started.elapsed(), requests: server.received().len() }
}

fn code(o: &Outcome) -> &str {
    o.envelope["error"]["code"].as_str().unwrap_or("(none)")
}

fn message(o: &Outcome) -> &str {
    o.envelope["error"]["message"].as_str().unwrap_or("")
}

fn assert_failure(o: &Outcome, want_code: &str, want_requests: usize) {
    assert_eq!(code(o), want_code, "{}", o.envelope);
    assert_eq!(o.requests, want_requests, "requests made: {}", o.envelope);
    assert!(noesis_modules::validate_envelope(&o.envelope).is_empty(), "{}", o.envelope);
    if want_requests > 1 {
        let counted = format!("after {want_requests} attempts");
        assert!(message(o).contains(&counted), "attempts not counted: {}", message(o));
    }
}

#[test]
fn rate_limit_with_retry_after_is_honoured_then_e4002() {
    let limited =
        Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.into(), vec![("retry-after".into(), "1".into())]);
    // The whole call may take 5 s, so the 1 s wait fits in it.
    let o = run_against_with(vec![limited], 1, Duration::from_secs(5), &RunOptions::default());
    assert_failure(&o, "E4002", 2);
    assert!(o.elapsed >= Duration::from_secs(1), "Retry-After ignored: {:?}", o.elapsed);
}

#[test]
fn server_errors_500_and_503_are_retried_then_e4001() {
    for status in [500, 503] {
        let o = run_against(vec![Reply::Status(status, "boom".into(), vec![])], 2, &RunOptions::default());
        assert_failure(&o, "E4001", 3);
        assert!(message(&o).contains(&format!("HTTP {status}")), "{}", message(&o));
    }
}

#[test]
fn one_503_then_success_is_a_success() {
    let o = run_against(
        vec![Reply::Status(503, "busy".into(), vec![]), Reply::Chat(good_reply())],
        2,
        &RunOptions::default(),
    );
    assert_eq!(o.envelope["ok"], true, "{}", o.envelope);
    assert_eq!(o.requests, 2);
}

#[test]
fn connection_reset_is_retried_then_e4001() {
    let o = run_against(vec![Reply::Reset], 2, &RunOptions::default());
    assert_failure(&o, "E4001", 3);
}

#[test]
fn no_answer_in_time_is_e2002_without_retrying() {
    // The reply would come after 5 s and be valid: E2002 shows the run
    // stopped waiting for it.
    let slow = Reply::Delay(Duration::from_secs(5), Box::new(Reply::Chat(good_reply())));
    let o = run_against(vec![slow], 2, &RunOptions::default());
    assert_failure(&o, "E2002", 1);
    assert!(o.elapsed >= TIMEOUT, "gave up before the timeout: {:?}", o.elapsed);
}

#[test]
fn the_timeout_is_the_whole_call_across_retries_e2002() {
    // Every answer is a 503 after 300 ms. Five retries would take 1.8 s;
    // the whole call has 0.8 s, so the third attempt is cut short.
    let slow_503 = Reply::Delay(Duration::from_millis(300), Box::new(Reply::Status(503, "busy".into(), vec![])));
    let o = run_against(vec![slow_503], 5, &RunOptions::default());
    assert_eq!(code(&o), "E2002", "{}", o.envelope);
    // Six attempts cannot fit in 0.8 s, so fewer than six shows the retries
    // stopped with the deadline. How many fit depends on the machine's load.
    assert!((1..6).contains(&o.requests), "{} requests: the retries outlived the timeout", o.requests);
    if o.requests > 1 {
        assert!(message(&o).contains(&format!("after {} attempts", o.requests)), "{}", message(&o));
    }
    assert!(noesis_modules::validate_envelope(&o.envelope).is_empty(), "{}", o.envelope);
}

#[test]
fn credentials_in_the_base_url_stay_out_of_e4001() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = format!("http://proxy-user:pr0xy-s3cret@127.0.0.1:{port}/v1");
    cfg.http.retry = RetryPolicy::none();
    let p = OpenAiCompatible::new(cfg).unwrap();
    let envelope = block(run(&module(), &p, input(), &RunOptions::default())).envelope;
    assert_eq!(envelope["error"]["code"], "E4001", "{envelope}");
    let text = envelope.to_string();
    assert!(text.contains(&format!("http://127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("pr0xy-s3cret") && !text.contains("proxy-user"), "{text}");
}

#[test]
fn truncated_body_is_retried_then_e4001() {
    let o =
        run_against(vec![Reply::Truncated(r#"{"choices":[{"message":{"content":"#.into())], 2, &RunOptions::default());
    assert_failure(&o, "E4001", 3);
    assert!(message(&o).contains("cut off"), "{}", message(&o));
}

#[test]
fn non_json_body_is_e4001_and_not_retried() {
    let o = run_against(vec![Reply::Status(200, "<html>gateway</html>".into(), vec![])], 2, &RunOptions::default());
    assert_failure(&o, "E4001", 1);
    assert!(message(&o).contains("not JSON"), "{}", message(&o));
}

#[test]
fn slow_drip_is_cut_by_the_total_timeout_e2002() {
    // 2,000 bytes at one per 20 ms would take 40 s; the timeout is 0.8 s.
    let body = noesis_testkit::chat_completion(&"x".repeat(1900), "stop").to_string();
    let o = run_against(vec![Reply::Drip(body, Duration::from_millis(20))], 2, &RunOptions::default());
    assert_failure(&o, "E2002", 1);
}

#[test]
fn a_stream_cut_midway_is_e4001_not_a_short_envelope() {
    let chunks = sse(&[("", json!({"choices": [{"index": 0, "delta": {"content": "{\"ok\": tr"}}]}))]);
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    let options = RunOptions {
        on_text: Some(OnText(Arc::new(move |t: &str| sink.lock().unwrap().push_str(t)))),
        ..RunOptions::default()
    };
    let o = run_against(vec![Reply::StreamCut(chunks, Duration::ZERO)], 2, &options);
    // Streamed text was shown, so the call is not repeated.
    assert_failure(&o, "E4001", 1);
    assert_eq!(*seen.lock().unwrap(), "{\"ok\": tr");
}

#[test]
fn streaming_shows_text_and_ends_with_the_validated_envelope() {
    let reply = good_reply();
    let (a, b) = reply.split_at(reply.len() / 2);
    let chunks = sse(&[
        ("", json!({"model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": a}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": b}, "finish_reason": "stop"}]})),
        ("", json!({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}})),
        ("", json!("[DONE]")),
    ]);
    let pieces = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&pieces);
    let options = RunOptions {
        on_text: Some(OnText(Arc::new(move |t: &str| sink.lock().unwrap().push(t.to_owned())))),
        ..RunOptions::default()
    };
    let o = run_against(vec![Reply::Stream(chunks, Duration::from_millis(30))], 2, &options);
    assert_eq!(o.envelope["ok"], true, "{}", o.envelope);
    assert_eq!(*pieces.lock().unwrap(), vec![a.to_owned(), b.to_owned()]);
    assert_eq!(
        o.envelope["meta"]["usage"],
        json!({"input_tokens": 1000, "output_tokens": 100, "calls": 1, "cost_usd": 0.00021})
    );
}

#[test]
fn cancelling_stops_the_in_flight_call_with_e2002() {
    let server =
        FakeServer::start(vec![Reply::Delay(Duration::from_secs(5), Box::new(Reply::Chat(good_reply())))]).unwrap();
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.http.timeout = Duration::from_secs(30);
    let p = OpenAiCompatible::new(cfg).unwrap();
    let token = CancellationToken::new();
    let options = RunOptions { cancel: Some(token.clone()), ..RunOptions::default() };
    let envelope = block(async {
        let canceller = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            canceller.cancel();
        });
        run(&module(), &p, input(), &options).await.envelope
    });
    // The reply would have been valid: a cancelled E2002 shows the run
    // stopped waiting for it.
    assert_eq!(envelope["error"]["code"], "E2002", "{envelope}");
    assert!(envelope["error"]["message"].as_str().unwrap().contains("cancelled"));
    assert_eq!(server.received().len(), 1);
}

#[test]
fn token_budget_refuses_the_call_before_any_request() {
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: Some(50), max_cost_usd: None }));
    let o =
        run_against(vec![Reply::Chat(good_reply())], 0, &RunOptions { budget: Some(meter), ..RunOptions::default() });
    assert_failure(&o, "E4007", 0);
    assert!(message(&o).contains("token budget exceeded"), "{}", message(&o));
}

/// A 200 chat completion whose usage says `output_tokens` were generated.
fn reply_with_usage(content: &str, output_tokens: u64) -> Reply {
    let mut body = noesis_testkit::chat_completion(content, "stop");
    body["usage"] = json!({"prompt_tokens": 11, "completion_tokens": output_tokens});
    Reply::Status(200, body.to_string(), vec![])
}

/// Prices where only output costs: $1000 per million tokens.
fn output_priced() -> Arc<PriceTable> {
    let mut prices = PriceTable::default();
    prices.set("gpt-4o-mini", Price { input: 0.0, output: 1000.0 });
    Arc::new(prices)
}

#[test]
fn cost_budget_stops_the_reask_once_spent() {
    // The first reply is invalid, so the run would re-ask. Each call may
    // cost up to $0.02 (20 output tokens); the first one really spent that,
    // so the second would break the $0.03 limit and is refused.
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(0.03) }));
    let options = RunOptions {
        budget: Some(Arc::clone(&meter)),
        prices: Some(output_priced()),
        max_tokens: Some(20),
        ..RunOptions::default()
    };
    let o = run_against(vec![reply_with_usage("not json", 20), Reply::Chat(good_reply())], 0, &options);
    assert_failure(&o, "E4007", 1);
    assert!(message(&o).contains("cost budget exceeded"), "{}", message(&o));
    assert!((meter.spent().cost_usd - 0.02).abs() < 1e-9, "{:?}", meter.spent());
    assert_eq!(meter.reserved(), (0, 0.0), "nothing stays held after the run");
}

#[test]
fn a_call_whose_estimate_exceeds_the_remaining_budget_is_never_sent() {
    // Nothing is spent yet, but 100,000 output tokens at $1000 per million
    // could cost $100: more than the $50 limit.
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(50.0) }));
    let options = RunOptions {
        budget: Some(Arc::clone(&meter)),
        prices: Some(output_priced()),
        max_tokens: Some(100_000),
        ..RunOptions::default()
    };
    let o = run_against(vec![Reply::Chat(good_reply())], 0, &options);
    assert_failure(&o, "E4007", 0);
    assert!(message(&o).contains("this call may cost up to $100.0000"), "{}", message(&o));
    assert_eq!(meter.spent().cost_usd, 0.0);
}

#[test]
fn parallel_runs_never_overspend_a_shared_budget() {
    // Each call may cost $100 (its output cap) and really does; $250
    // admits two. Six runs start together on one meter: the first two
    // reservations fit, every later one finds $200 spent or held.
    const RUNS: usize = 6;
    let slow = Reply::Delay(Duration::from_millis(200), Box::new(reply_with_usage(&good_reply(), 100_000)));
    let server = FakeServer::start(vec![slow]).unwrap();
    let p = provider_with(&server, 0, Duration::from_secs(10));
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(250.0) }));
    let options = RunOptions {
        budget: Some(Arc::clone(&meter)),
        prices: Some(output_priced()),
        max_tokens: Some(100_000),
        ..RunOptions::default()
    };
    let m = module();
    let runs = (0..RUNS).map(|_| run(&m, &p, input(), &options));
    let records = block(futures_util::future::join_all(runs));
    let codes: Vec<&str> = records.iter().map(|r| r.envelope["error"]["code"].as_str().unwrap_or("ok")).collect();
    assert_eq!(server.received().len(), 2, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == "ok").count(), 2, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == "E4007").count(), RUNS - 2, "{codes:?}");
    assert!((meter.spent().cost_usd - 200.0).abs() < 1e-6, "{:?}", meter.spent());
    assert_eq!(meter.reserved(), (0, 0.0));
}

#[test]
fn a_failed_call_releases_its_reservation() {
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(150.0) }));
    let options = RunOptions {
        budget: Some(Arc::clone(&meter)),
        prices: Some(output_priced()),
        max_tokens: Some(100_000),
        ..RunOptions::default()
    };
    let server = FakeServer::start(vec![Reply::Status(503, "down".into(), vec![]), Reply::Chat(good_reply())]).unwrap();
    let p = provider(&server, 0);
    let first = block(run(&module(), &p, input(), &options));
    assert_eq!(first.envelope["error"]["code"], "E4001", "{}", first.envelope);
    assert_eq!(meter.reserved(), (0, 0.0));
    assert_eq!(meter.spent().cost_usd, 0.0);
    // The $100 the failed call held is free again for the next one.
    let second = block(run(&module(), &p, input(), &options));
    assert_eq!(second.envelope["ok"], true, "{}", second.envelope);
    assert_eq!(server.received().len(), 2);
}

#[test]
fn fallback_chain_answers_from_the_next_provider_and_says_which() {
    let down = FakeServer::start(vec![Reply::Status(503, "down".into(), vec![])]).unwrap();
    let up = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let mut second = EndpointConfig::new("deepseek", &up.base_url(), "deepseek-chat");
    second.http.retry = RetryPolicy::none();
    let chain: Vec<Arc<dyn Provider>> =
        vec![Arc::new(provider(&down, 1)), Arc::new(OpenAiCompatible::new(second).unwrap())];
    let fallback = Fallback::new(chain).unwrap();
    let record = block(run(&module(), &fallback, input(), &RunOptions::default()));
    assert_eq!(record.envelope["ok"], true, "{}", record.envelope);
    assert_eq!(record.envelope["meta"]["model"], "deepseek/deepseek-chat");
    assert_eq!(down.received().len(), 2, "the first provider gets its retries");
    assert_eq!(up.received().len(), 1);
    // Every member down: one error naming each failure.
    let chain: Vec<Arc<dyn Provider>> = vec![Arc::new(provider(&down, 0)), Arc::new(provider(&down, 0))];
    let record = block(run(&module(), &Fallback::new(chain).unwrap(), input(), &RunOptions::default()));
    assert_eq!(record.envelope["error"]["code"], "E4001");
    assert!(
        record.envelope["error"]["message"].as_str().unwrap().contains("every provider in the fallback chain failed")
    );
}
