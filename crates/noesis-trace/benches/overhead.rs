//! What tracing costs: N module runs (code-simplifier, one model call each)
//! against a zero-latency fake provider on 127.0.0.1, with tracing off (no
//! subscriber, as when no OTLP endpoint is set) and on (every run's
//! `run_module` and `chat` spans exported over OTLP/HTTP to a receiver on
//! 127.0.0.1 through the batch processor), in alternating rounds, side by
//! side in one process.
//!
//! `cargo bench -p noesis-trace --bench overhead -- [RUNS] [ROUNDS]`
//! (defaults 1000 and 5); `bench/traces.sh` runs it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_modules::search::Found;
use noesis_runtime::{RunOptions, run};
use noesis_testkit::{FakeServer, Reply};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::json;

/// An OTLP/HTTP receiver that answers 200 and counts the bytes it got.
fn receiver() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = format!("http://{}", listener.local_addr().expect("addr"));
    let bytes = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&bytes);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let Ok(clone) = conn.try_clone() else { return };
                let mut reader = BufReader::new(clone);
                let mut conn = conn;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0usize;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    seen.fetch_add(length, Ordering::Relaxed);
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if conn.write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, bytes)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let reply = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
        "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                 "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string();
    let fake = FakeServer::start(vec![Reply::Chat(reply)]).expect("fake provider");
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = fake.base_url();
    cfg.api_key = Some("sk-bench".into());
    cfg.http.retry = RetryPolicy::none();
    let llm = OpenAiCompatible::new(cfg).expect("provider");
    let module = Found::Builtin("code-simplifier").load().expect("module");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (endpoint, received) = receiver();
    let exporter = {
        // The endpoint given directly: `noesis` reads the same from
        // OTEL_EXPORTER_OTLP_ENDPOINT (plus /v1/traces).
        let url = format!("{endpoint}/v1/traces");
        opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(url).build().expect("exporter")
    };
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).build();
    let batch = |traced: bool| -> Duration {
        let started = Instant::now();
        let go = || {
            rt.block_on(async {
                for _ in 0..runs {
                    let r = run(&module, &llm, json!({"code": "x = 1 + 0"}), &RunOptions::default()).await;
                    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
                }
            });
        };
        if traced {
            tracing::subscriber::with_default(noesis_trace::subscriber(&provider, false), go);
        } else {
            go();
        }
        started.elapsed()
    };
    // Warm-up: connections, allocator, the exporter's client.
    batch(false);
    batch(true);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        off.push(batch(false));
        on.push(batch(true));
    }
    let _ = provider.force_flush();
    off.sort();
    on.sort();
    let (off_ms, on_ms) = (off[rounds / 2].as_secs_f64() * 1000.0, on[rounds / 2].as_secs_f64() * 1000.0);
    println!("{runs} module runs against a zero-latency fake provider, median of {rounds} alternating rounds:");
    println!("  tracing off (no endpoint):           {off_ms:9.1} ms  ({:.1} µs/run)", off_ms * 1000.0 / runs as f64);
    println!("  tracing on (OTLP/HTTP to loopback):  {on_ms:9.1} ms  ({:.1} µs/run)", on_ms * 1000.0 / runs as f64);
    println!("  overhead: {:+.1} %  (target ≤ 5 %)", (on_ms / off_ms - 1.0) * 100.0);
    println!("  exported: {} KB of OTLP protobuf", received.load(Ordering::Relaxed) / 1024);
    let _ = provider.shutdown();
}
