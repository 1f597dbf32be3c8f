//! What the workflow itself costs: `noesis solve` episodes against a
//! zero-latency fake model on 127.0.0.1 and a test command that does
//! nothing (`true`), so what is measured is the process, the store's
//! versioned writes, the snapshot, the three module runs and CODER's run,
//! not a model or a test suite. Each episode is six node steps (baseline,
//! PLANNER, REASONER, CODER, VERIFIER, CONSOLIDATOR) in one process; a bare
//! `noesis state get` (start, open the store, one read) is measured beside it.
//!
//! `cargo bench -p noesis-cli --bench solve -- [EPISODES]` (default 20);
//! `bench/solve.sh` runs it.
#![allow(clippy::print_stdout)]

use std::process::Command;
use std::time::{Duration, Instant};

use noesis_testkit::{FakeServer, Reply};
use serde_json::json;

const NODES: f64 = 6.0;

fn envelope(data: serde_json::Value) -> Reply {
    Reply::Chat(
        json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "b"}, "data": data}).to_string(),
    )
}

fn noesis(home: &std::path::Path, server: &FakeServer) -> Command {
    noesis_testkit::command_against(std::path::Path::new(env!("CARGO_BIN_EXE_noesis")), home, home, server)
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    let episodes: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("proj");
    std::fs::create_dir_all(&ws).unwrap();
    for i in 0..200 {
        std::fs::write(ws.join(format!("m{i}.py")), format!("x = {i}\n").repeat(20)).unwrap();
    }
    let mut replies = Vec::new();
    for _ in 0..episodes {
        replies.push(envelope(json!({"problem_reflection": {"goal": "g"}, "possible_solutions": ["s"],
                                     "selected_solution": "s", "rationale": "r"})));
        replies.push(envelope(json!({"plan": ["p"], "thoughts": ["t"], "rationale": "r"})));
        replies.push(Reply::Chat("Nothing to change.".into()));
    }
    let server = FakeServer::start(replies).unwrap();
    let mut solve = Vec::new();
    for i in 0..episodes {
        let t = Instant::now();
        let o = noesis(dir.path(), &server)
            .args(["solve", &format!("episode {i}"), "--workspace", "proj", "--test", "true", "--quiet"])
            .output()
            .unwrap();
        solve.push(t.elapsed());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let mut bare = Vec::new();
    for _ in 0..episodes {
        let t = Instant::now();
        let o = noesis(dir.path(), &server).args(["state", "get", "current_node"]).output().unwrap();
        bare.push(t.elapsed());
        assert!(o.status.success());
    }
    let (solve_ms, bare_ms) = (median(solve), median(bare));
    println!(
        "{episodes} `noesis solve` episodes, zero-latency model, `true` as the test, 200-file workspace (median):"
    );
    println!("  episode (6 node steps, 3 model calls):  {solve_ms:8.1} ms");
    println!("  per node step:                           {:8.1} ms", solve_ms / NODES);
    println!("  `noesis state get` (start + one read):   {bare_ms:8.1} ms");
    println!("  per node step beyond process start:      {:8.1} ms", (solve_ms - bare_ms) / NODES);
}
