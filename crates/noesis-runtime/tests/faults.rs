//! Fault injection: each way an HTTP provider can fail, through a whole
//! module run over real HTTP against the fake server, gives the right
//! E-code within the timeout, with the tries counted. Also cancellation,
//! budgets and the fallback chain, which are decided at the same boundary.

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
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.timeout = TIMEOUT;
    cfg.http.connect_timeout = TIMEOUT;
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
    let server = FakeServer::start(replies).unwrap();
    let p = provider(&server, retries);
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

fn assert_failure(o: &Outcome, want_code: &str, want_requests: usize, within: Duration) {
    assert_eq!(code(o), want_code, "{}", o.envelope);
    assert_eq!(o.requests, want_requests, "requests made: {}", o.envelope);
    assert!(o.elapsed < within, "took {:?}, bound {within:?}", o.elapsed);
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
    let o = run_against(vec![limited], 1, &RunOptions::default());
    assert_failure(&o, "E4002", 2, Duration::from_secs(3));
    assert!(o.elapsed >= Duration::from_secs(1), "Retry-After ignored: {:?}", o.elapsed);
}

#[test]
fn server_errors_500_and_503_are_retried_then_e4001() {
    for status in [500, 503] {
        let o = run_against(vec![Reply::Status(status, "boom".into(), vec![])], 2, &RunOptions::default());
        assert_failure(&o, "E4001", 3, Duration::from_secs(2));
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
    assert_failure(&o, "E4001", 3, Duration::from_secs(2));
}

#[test]
fn no_answer_in_time_is_e2002_without_retrying() {
    let slow = Reply::Delay(Duration::from_secs(5), Box::new(Reply::Chat(good_reply())));
    let o = run_against(vec![slow], 2, &RunOptions::default());
    assert_failure(&o, "E2002", 1, TIMEOUT + Duration::from_millis(700));
}

#[test]
fn truncated_body_is_retried_then_e4001() {
    let o =
        run_against(vec![Reply::Truncated(r#"{"choices":[{"message":{"content":"#.into())], 2, &RunOptions::default());
    assert_failure(&o, "E4001", 3, Duration::from_secs(2));
    assert!(message(&o).contains("cut off"), "{}", message(&o));
}

#[test]
fn non_json_body_is_e4001_and_not_retried() {
    let o = run_against(vec![Reply::Status(200, "<html>gateway</html>".into(), vec![])], 2, &RunOptions::default());
    assert_failure(&o, "E4001", 1, Duration::from_secs(2));
    assert!(message(&o).contains("not JSON"), "{}", message(&o));
}

#[test]
fn slow_drip_is_cut_by_the_total_timeout_e2002() {
    // 2,000 bytes at one per 20 ms would take 40 s; the timeout is 0.8 s.
    let body = noesis_testkit::chat_completion(&"x".repeat(1900), "stop").to_string();
    let o = run_against(vec![Reply::Drip(body, Duration::from_millis(20))], 2, &RunOptions::default());
    assert_failure(&o, "E2002", 1, TIMEOUT + Duration::from_millis(700));
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
    assert_failure(&o, "E4001", 1, Duration::from_secs(2));
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
    let started = Instant::now();
    let envelope = block(async {
        let canceller = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            canceller.cancel();
        });
        run(&module(), &p, input(), &options).await.envelope
    });
    assert_eq!(envelope["error"]["code"], "E2002", "{envelope}");
    assert!(envelope["error"]["message"].as_str().unwrap().contains("cancelled"));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn token_budget_refuses_the_call_before_any_request() {
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: Some(50), max_cost_usd: None }));
    let o =
        run_against(vec![Reply::Chat(good_reply())], 0, &RunOptions { budget: Some(meter), ..RunOptions::default() });
    assert_failure(&o, "E4007", 0, Duration::from_secs(2));
    assert!(message(&o).contains("token budget exceeded"), "{}", message(&o));
}

#[test]
fn cost_budget_stops_the_reask_once_spent() {
    // The first reply is invalid, so the run would re-ask; the first call
    // already spent the budget, so the second is refused.
    let mut prices = PriceTable::default();
    prices.set("gpt-4o-mini", Price { input: 1000.0, output: 1000.0 });
    let meter = Arc::new(BudgetMeter::new(Budget { max_tokens: None, max_cost_usd: Some(0.001) }));
    let options =
        RunOptions { budget: Some(Arc::clone(&meter)), prices: Some(Arc::new(prices)), ..RunOptions::default() };
    let o = run_against(vec![Reply::Chat("not json".into()), Reply::Chat(good_reply())], 0, &options);
    assert_failure(&o, "E4007", 1, Duration::from_secs(2));
    assert!(message(&o).contains("cost budget exceeded"), "{}", message(&o));
    // The fake server reports 11 + 7 tokens: 18 × $1000 / 1M = $0.018.
    assert!((meter.spent().cost_usd - 0.018).abs() < 1e-9, "{:?}", meter.spent());
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
