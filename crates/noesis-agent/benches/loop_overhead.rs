//! The agent loop's overhead per iteration against a zero-latency fake
//! OpenAI server: one model call and one call of a trivial tool per
//! iteration, driven through the real provider over HTTP. Run by
//! `bench/agent-loop.sh`, which starts the server (`fake-llm --tool-loop
//! add_one:N`) and runs LangGraph and pydantic-ai against the same one.
//!
//! Env: `BENCH_BASE_URL` (the server), `BENCH_ITERATIONS` (N, as the server
//! was started with), `BENCH_RUNS` (runs to time), `BENCH_STORE` (a SQLite
//! file: checkpoint every step there too). Prints one JSON line.
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

struct Sqlite(Box<dyn noesis_store::Store>);

#[async_trait::async_trait]
impl Checkpoint for Sqlite {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        let state = noesis_store::AgentState {
            run_id: run.id.clone(),
            project_id: "bench".into(),
            task: run.task.clone(),
            status: "running".into(),
            step: i64::try_from(run.step).unwrap_or(i64::MAX),
            forked_from: None,
            state: run.to_json(),
            at: 0,
        };
        self.0.save_agent_state(&state).await.map_err(|e| e.to_string())
    }
}

fn main() {
    let base = std::env::var("BENCH_BASE_URL").expect("BENCH_BASE_URL: the fake server's base URL");
    let iterations: u32 = env("BENCH_ITERATIONS", 10);
    let runs: usize = env("BENCH_RUNS", 200);
    let store_path = std::env::var("BENCH_STORE").ok();
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
        limits: noesis_agent::Limits { max_turns: iterations + 2, ..noesis_agent::Limits::default() },
        ..RunConfig::default()
    };
    let mut store = store_path.map(|p| {
        let url = format!("sqlite://{p}");
        Sqlite(rt.block_on(noesis_store::open(&url)).expect("store"))
    });
    if let Some(s) = &store {
        rt.block_on(s.0.ensure_project("bench", "/bench")).expect("project");
    }
    let drive_once = |i: usize, store: &mut Option<Sqlite>| {
        let mut run = AgentRun::new(format!("bench-{i}"), "Add one ten times.", config.clone(), 0);
        let driver = Driver::new(&provider, Arc::clone(&tools));
        let mut nothing = |_: &AgentRun| {};
        let end = match store {
            Some(s) => rt.block_on(driver.drive(&mut run, s)),
            None => rt.block_on(driver.drive(&mut run, &mut nothing)),
        };
        let ok = matches!(end, Ok(noesis_agent::Action::Done(noesis_agent::Outcome::Answer { .. })));
        assert!(ok && run.usage.tool_calls == iterations, "a run did not finish as scripted: {end:?} {:?}", run.usage);
    };
    for i in 0..runs.min(20) {
        drive_once(i, &mut store);
    }
    let mut per_iteration = Vec::with_capacity(runs);
    for i in 0..runs {
        let began = Instant::now();
        drive_once(1000 + i, &mut store);
        per_iteration.push(began.elapsed().as_secs_f64() * 1e6 / f64::from(iterations));
    }
    per_iteration.sort_by(f64::total_cmp);
    let median = per_iteration[per_iteration.len() / 2];
    // The same number of HTTP round trips with nothing around them.
    let n = runs * usize::try_from(iterations + 1).unwrap_or(1);
    let floor = raw_roundtrips(&base, n.min(5000)).as_secs_f64() * 1e6 / n.min(5000) as f64;
    let per_roundtrip_in_iteration = floor * f64::from(iterations + 1) / f64::from(iterations);
    println!(
        "{}",
        json!({
            "framework": if store.is_some() { "noesis (SQLite checkpoint every step)" } else { "noesis" },
            "us_per_iteration": median,
            "http_floor_us_per_iteration": per_roundtrip_in_iteration,
            "overhead_us_per_iteration": (median - per_roundtrip_in_iteration).max(0.0),
            "runs": runs,
            "iterations": iterations,
        })
    );
}
