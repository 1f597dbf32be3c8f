//! 1,000 module runs started at once against a fake provider with 200 ms
//! latency and a cap of 64 in flight: total time against the ideal
//! (⌈1000/64⌉ × 200 ms) and the runtime's own cost per run.
//!
//! `cargo bench -p noesis-runtime --bench burst` (args: RUNS CAP LATENCY_MS).
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use noesis_llm::{EndpointConfig, OpenAiCompatible, Provider, RetryPolicy};
use noesis_modules::search::Found;
use noesis_runtime::{RunOptions, run};
use noesis_testkit::{FakeServer, Reply};
use serde_json::json;

/// User + system CPU time of this process so far (Linux), for the
/// per-run cost; `None` elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let cap: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let latency = Duration::from_millis(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200));

    let reply = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
        "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                 "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string();
    let server = FakeServer::start_with(vec![Reply::Chat(reply)], 0, latency).expect("fake server");
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.http.max_concurrency = cap;
    cfg.http.retry = RetryPolicy::none();
    cfg.http.timeout = Duration::from_secs(60);
    let provider: Arc<dyn Provider> = Arc::new(OpenAiCompatible::new(cfg).expect("provider"));
    let module = Arc::new(Found::Builtin("code-simplifier").load().expect("module"));

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    // One warm-up run opens the pool and faults in the code paths.
    rt.block_on(run(&module, provider.as_ref(), json!({"code": "x = 1 + 0"}), &RunOptions::default()));
    let warm = server.received().len();

    let cpu0 = cpu_time();
    let started = Instant::now();
    let ok = rt.block_on(async {
        let tasks: Vec<_> = (0..runs)
            .map(|i| {
                let (p, m) = (Arc::clone(&provider), Arc::clone(&module));
                tokio::spawn(async move {
                    let r = run(&m, p.as_ref(), json!({"code": format!("x = {i} + 0")}), &RunOptions::default()).await;
                    r.envelope["ok"] == true
                })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            ok += usize::from(t.await.unwrap_or(false));
        }
        ok
    });
    let total = started.elapsed();
    let cpu = cpu0.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    let requests = server.received().len() - warm;

    let waves = runs.div_ceil(cap.max(1)) as u32;
    let ideal = latency * waves;
    let ratio = total.as_secs_f64() / ideal.as_secs_f64();
    println!("runs {runs}, cap {cap}, provider latency {latency:?}: {ok} ok, {requests} requests");
    println!("total      {:>8.3} s", total.as_secs_f64());
    println!("ideal      {:>8.3} s  (⌈{runs}/{cap}⌉ = {waves} waves × {latency:?})", ideal.as_secs_f64());
    println!("ratio      {ratio:>8.3} ×  (target ≤ 1.2)");
    println!(
        "overhead   {:>8.3} ms per run of wall time beyond the ideal, {:.3} ms per wave",
        (total.as_secs_f64() - ideal.as_secs_f64()) * 1000.0 / runs as f64,
        (total.as_secs_f64() - ideal.as_secs_f64()) * 1000.0 / f64::from(waves)
    );
    if let Some(cpu) = cpu {
        // Includes the fake server's threads, which share this process.
        println!(
            "cpu        {:>8.3} ms per run (client, runtime and fake server together)",
            cpu.as_secs_f64() * 1000.0 / runs as f64
        );
    }
    if ok != runs {
        println!("FAILED: {} runs did not succeed", runs - ok);
        std::process::exit(1);
    }
}
