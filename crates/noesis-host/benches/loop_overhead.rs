//! The agent loop's overhead per iteration against a zero-latency fake
//! OpenAI server: one model call and one call of a trivial tool per
//! iteration, driven through the real provider over HTTP, in memory or
//! checkpointed as `noesis agent` does. Run by
//! `bench/agent-loop.sh`, which starts the server (`fake-llm --tool-loop
//! add_one:N`) and runs LangGraph and pydantic-ai against the same one.
//!
//! Env: `BENCH_BASE_URL` (the server), `BENCH_ITERATIONS` (N, as the server
//! was started with), `BENCH_RUNS` (runs to time), `BENCH_STORE` (a store
//! URL or SQLite file: checkpoint every step there too), `BENCH_LABEL` (the
//! row's name), `BENCH_LONG` (set: one run of N iterations, timed early and
//! late). Prints one JSON line.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use noesis_agent::{
    AgentRun, ApprovalPolicy, Checkpoint, Driver, RunConfig, ToolDecl, ToolFn, ToolOutput, Toolbox, Workspace,
};
use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use serde_json::json;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The floor: one POST over a kept-alive socket with nothing but std.
fn raw_roundtrips(base: &str, n: usize) -> Duration {
    let addr = base.trim_start_matches("http://").split('/').next().unwrap_or_default().to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).expect("the fake server");
    stream.set_nodelay(true).ok();
    let mut reader = BufReader::new(stream.try_clone().expect("socket"));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]}).to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let began = Instant::now();
    for _ in 0..n {
        stream.write_all(request.as_bytes()).expect("write");
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).expect("read");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0; length];
        reader.read_exact(&mut buf).expect("body");
    }
    began.elapsed()
}

/// Checkpoints in a store as `noesis agent` does ([`noesis_host::runs::Keep`]),
/// noting when each model turn's reply came and the bytes written by then.
struct Timed<'a> {
    keep: Option<noesis_host::runs::Keep<'a>>,
    turns: u32,
    marks: Vec<(Instant, u64)>,
}

#[async_trait::async_trait]
impl Checkpoint for Timed<'_> {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        if let Some(keep) = &mut self.keep {
            keep.save(run).await?;
        }
        if run.usage.turns != self.turns {
            self.turns = run.usage.turns;
            let bytes = self.keep.as_ref().map_or(0, |k| k.log.bytes_written());
            self.marks.push((Instant::now(), bytes));
        }
        Ok(())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let base = std::env::var("BENCH_BASE_URL").expect("BENCH_BASE_URL: the fake server's base URL");
    let iterations: u32 = env("BENCH_ITERATIONS", 10);
    let runs: usize = env("BENCH_RUNS", 200);
    let store_url = std::env::var("BENCH_STORE").ok();
    let label = std::env::var("BENCH_LABEL").unwrap_or_else(|_| "noesis".into());
    let long = std::env::var("BENCH_LONG").is_ok();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut cfg = EndpointConfig::openai("fake");
    cfg.base_url = base.clone();
    cfg.api_key = Some("sk-bench".into());
    cfg.http.retry = RetryPolicy::none();
    let provider = OpenAiCompatible::new(cfg).expect("provider");
    let dir = tempfile::tempdir().expect("tempdir");
    let add_one: ToolFn =
        Arc::new(|args| Box::pin(async move { ToolOutput::ok((args["x"].as_i64().unwrap_or(0) + 1).to_string()) }));
    let decl = ToolDecl::read_only(
        "add_one",
        "Adds one to x.",
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
    );
    let tools = Arc::new(
        Toolbox::new(Workspace::new(dir.path()).expect("workspace"), Vec::new()).with_tool(decl.clone(), add_one),
    );
    let config = RunConfig {
        tools: vec![decl],
        approval: ApprovalPolicy::Auto,
        limits: noesis_agent::Limits {
            max_turns: iterations + 2,
            max_tool_calls: iterations + 2,
            ..noesis_agent::Limits::default()
        },
        ..RunConfig::default()
    };
    let store: Option<Box<dyn noesis_store::Store>> = store_url.map(|u| {
        let url = if u.contains("://") { u } else { format!("sqlite://{u}") };
        rt.block_on(noesis_store::open(&url)).expect("store")
    });
    if let Some(s) = &store {
        rt.block_on(s.ensure_project("bench", "/bench")).expect("project");
    }
    let prefix = uuid_like();
    // One run; when it began, and each reply's time and bytes written by then.
    let drive_once = |i: usize| -> (Instant, Vec<(Instant, u64)>) {
        let mut run = AgentRun::new(format!("bench-{prefix}-{i}"), "Add one ten times.", config.clone(), 0);
        let driver = Driver::new(&provider, Arc::clone(&tools));
        let keep = store.as_deref().map(|s| noesis_host::runs::Keep::new(s, "bench".into()));
        let mut timed = Timed { keep, turns: 0, marks: Vec::with_capacity(iterations as usize + 2) };
        let began = Instant::now();
        let end = rt.block_on(driver.drive(&mut run, &mut timed));
        let ok = matches!(end, Ok(noesis_agent::Action::Done(noesis_agent::Outcome::Answer { .. })));
        assert!(ok && run.usage.tool_calls == iterations, "a run did not finish as scripted: {end:?} {:?}", run.usage);
        (began, timed.marks)
    };
    if long {
        // One long run: each iteration's time, and the bytes it wrote, early and late.
        let (began, marks) = drive_once(0);
        let mut at = vec![(began, 0)];
        at.extend(marks);
        let steps: Vec<(f64, f64)> = at
            .windows(2)
            .map(|w| (w[1].0.duration_since(w[0].0).as_secs_f64() * 1e6, (w[1].1 - w[0].1) as f64))
            .collect();
        let window = (steps.len() / 10).max(1);
        let first: Vec<(f64, f64)> = steps.iter().skip(1).take(window).copied().collect();
        let last: Vec<(f64, f64)> = steps.iter().rev().take(window).copied().collect();
        let us = |w: &[(f64, f64)]| median(&mut w.iter().map(|s| s.0).collect::<Vec<_>>());
        let bytes = |w: &[(f64, f64)]| w.iter().map(|s| s.1).sum::<f64>() / w.len() as f64;
        println!(
            "{}",
            json!({
                "framework": label,
                "iterations": iterations,
                "window": window,
                "first_us_per_iteration": us(&first),
                "last_us_per_iteration": us(&last),
                "first_bytes_per_iteration": bytes(&first),
                "last_bytes_per_iteration": bytes(&last),
            })
        );
        return;
    }
    for i in 0..runs.min(20) {
        drive_once(i);
    }
    let mut per_iteration = Vec::with_capacity(runs);
    let mut bytes = 0u64;
    for i in 0..runs {
        let (began, marks) = drive_once(1000 + i);
        per_iteration.push(began.elapsed().as_secs_f64() * 1e6 / f64::from(iterations));
        bytes += marks.last().map_or(0, |m| m.1);
    }
    let median = median(&mut per_iteration);
    // The same number of HTTP round trips with nothing around them.
    let n = runs * usize::try_from(iterations + 1).unwrap_or(1);
    let floor = raw_roundtrips(&base, n.min(5000)).as_secs_f64() * 1e6 / n.min(5000) as f64;
    let per_roundtrip_in_iteration = floor * f64::from(iterations + 1) / f64::from(iterations);
    println!(
        "{}",
        json!({
            "framework": label,
            "us_per_iteration": median,
            "http_floor_us_per_iteration": per_roundtrip_in_iteration,
            "overhead_us_per_iteration": (median - per_roundtrip_in_iteration).max(0.0),
            "bytes_per_iteration": bytes as f64 / (runs as f64 * f64::from(iterations)),
            "runs": runs,
            "iterations": iterations,
        })
    );
}

/// Run ids that differ between bench processes sharing one store.
fn uuid_like() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}-{}", std::process::id(), t.as_nanos())
}
