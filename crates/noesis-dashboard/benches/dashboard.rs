//! The dashboard under a big session: a SQLite store with one session of
//! 10,000 frames (100 branches of 99), served by this process on
//! 127.0.0.1. Times each page kind, loads pages 1,000 times (`BENCH_LOADS`) round-robin and
//! reports the process's resident memory before and after; with
//! `NOESIS_PLAYWRIGHT` set, also runs `bench/dashboard-first-screen.cjs`,
//! which times the session's tree to its first screen in headless Chromium.
//! Run by `bench/dashboard.sh`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use noesis_frames::{Draft, SessionArtifacts, Timestamp};
use noesis_store::Store;

const PROJECT: &str = "bench";

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn get(addr: &str, path: &str) -> usize {
    let mut s = std::net::TcpStream::connect(addr).expect("the server");
    write!(s, "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").expect("write");
    let mut body = Vec::new();
    s.read_to_end(&mut body).expect("read");
    assert!(body.starts_with(b"HTTP/1.1 200"), "{path}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]));
    body.len()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store: Arc<dyn Store> = Arc::from(rt.block_on(noesis_store::open(&url)).expect("store"));
    let now = Timestamp::now();
    let (session_id, root_id, some_frame) = rt.block_on(async {
        store.ensure_project(PROJECT, "/bench").await.expect("project");
        let root = Draft { conclusion: "a big session".into(), ..Draft::new("bench session") }
            .into_frame(PROJECT, Some("s-bench"), None, now)
            .expect("root");
        let session = SessionArtifacts {
            session_id: "s-bench".into(),
            project_id: PROJECT.into(),
            initial_prompt: Some("10,000 frames".into()),
            files: Default::default(),
            scope: vec![String::new()],
            root_frame_id: Some(root.frame_id.clone()),
            conversation_log: None,
            created_at: now,
        };
        store.begin_session(&session, &root, &[]).await.expect("session");
        let mut frames = Vec::with_capacity(10_000);
        for b in 0..100 {
            let branch = Draft {
                conclusion: format!("branch {b} holds 99 steps"),
                confidence: 0.8,
                ..Draft::new(format!("branch {b}: look at part {b} of the code"))
            }
            .into_frame(PROJECT, None, Some(&root), now)
            .expect("branch");
            for i in 0..99 {
                let leaf = Draft {
                    conclusion: format!("step {i} of branch {b}: a conclusion of ordinary length for a frame"),
                    confidence: 0.5,
                    ..Draft::new(format!("step {i} of branch {b}"))
                }
                .into_frame(PROJECT, None, Some(&branch), now)
                .expect("leaf");
                frames.push(leaf);
            }
            frames.insert(frames.len() - 99, branch);
        }
        let some = frames[5000].frame_id.to_string();
        for chunk in frames.chunks(1000) {
            store.insert_frames(chunk).await.expect("insert");
        }
        ("s-bench".to_owned(), root.frame_id.to_string(), some)
    });
    let app = noesis_dashboard::router(noesis_dashboard::Dashboard {
        store,
        project_id: PROJECT.into(),
        modules: None,
        agents: None,
        episodes: None,
    });
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let pages = [
        ("sessions", "/".to_owned()),
        ("session of 10,000 frames", format!("/sessions/{session_id}")),
        ("the session's root frame (10,000 below)", format!("/frames/{root_id}")),
        ("frame", format!("/frames/{some_frame}")),
        ("search", "/frames?text=branch+7".to_owned()),
    ];
    let mut report = Vec::new();
    for (name, path) in &pages {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let t = Instant::now();
            bytes = get(&addr, path);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        report.push(serde_json::json!({"page": name, "median_ms": median(times), "bytes": bytes}));
    }
    // Memory over 1,000 loads, round-robin over every page kind.
    for i in 0..50 {
        get(&addr, &pages[i % pages.len()].1);
    }
    let before = rss_kb();
    let loads_started = Instant::now();
    // Sampled every 250 loads: a plateau (the store's page cache, the
    // allocator's high-water mark) is flat; a leak keeps climbing.
    let mut samples = vec![before];
    let loads: usize = std::env::var("BENCH_LOADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    for i in 0..loads {
        get(&addr, &pages[i % pages.len()].1);
        if (i + 1) % 250 == 0 {
            samples.push(rss_kb());
        }
    }
    let after = rss_kb();
    let browser = std::env::var("NOESIS_PLAYWRIGHT").ok().map(|_| {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/dashboard-first-screen.cjs");
        let out = std::process::Command::new("node")
            .arg(script)
            .arg(format!("http://{addr}/sessions/{session_id}"))
            .output()
            .expect("node");
        if !out.status.success() {
            eprintln!("the browser run failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or(serde_json::Value::Null)
    });
    println!(
        "{}",
        serde_json::json!({
            "pages": report,
            "loads": loads,
            "loads_seconds": loads_started.elapsed().as_secs_f64(),
            "rss_kb_before": before,
            "rss_kb_after": after,
            "rss_kb_per_load": (after as f64 - before as f64) / loads as f64,
            "rss_kb_every_250_loads": samples,
            "rss_kb_per_load_second_half": (after as f64 - samples[samples.len() / 2] as f64) / (loads / 2) as f64,
            "first_screen": browser,
        })
    );
}
