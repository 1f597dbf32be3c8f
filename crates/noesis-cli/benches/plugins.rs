//! The plugins' scenario: a generated 200-file Python repository (20
//! packages of 10 modules, two functions each) under git. `docs sync`,
//! `review` (of every file) and `testgen` run once; then three files change
//! — one only inside a function body, two in a signature — and each runs
//! again. The second runs must make exactly as many model calls (counted at
//! the fake server on 127.0.0.1) as there are invalidated nodes, reviews and
//! specs; every untouched docs node must stay byte-identical; the body-only
//! change must send no spec back to the model. Prints counts and times.
//!
//! `cargo bench -p noesis-cli --bench plugins`; `bench/plugins.sh` runs it.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use noesis_testkit::{FakeServer, Reply, said};
use serde_json::{Value, json};

fn envelope(data: Value) -> Reply {
    Reply::Chat(
        json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "b"}, "data": data}).to_string(),
    )
}

fn field(text: &str, key: &str) -> String {
    let Some(at) = text.find(&format!("\"{key}\"")) else { return String::new() };
    let rest = &text[at + key.len() + 2..];
    let Some(start) = rest.find('"').map(|s| s + 1) else { return String::new() };
    rest[start..].split('"').next().unwrap_or_default().to_owned()
}

/// The model: a docs node, a review or a test spec, by the module's prompt.
fn model() -> Reply {
    Reply::respond(|req| {
        let text = said(req);
        if text.contains("# Documentation node") {
            envelope(json!({"purpose": format!("Unit {}.", field(&text, "unit")), "rationale": "b"}))
        } else if text.contains("# Code review") {
            let file = field(&text, "path");
            envelope(
                json!({"findings": [{"severity": "note", "category": "maintainability", "file": file, "start_line": 1,
                            "end_line": 1, "title": "Module has no docstring", "message": "Say what it is for.",
                            "resolves_when": "a docstring is added"}], "summary": "ok", "rationale": "b"}),
            )
        } else {
            let function = field(&text, "function");
            let hash = field(&text, "signature_hash");
            envelope(json!({"function": function, "signature_hash": hash, "rationale": "b",
                            "cases": [{"name": "small", "inputs": [1, 2], "expected": {"value": 3}, "kind": "normal"}]}))
        }
    })
}

fn module(p: usize, m: usize, extra: &str) -> String {
    format!(
        "import os\n\n\ndef f{p}_{m}(a, b{extra}):\n    return a + b\n\n\ndef g{p}_{m}(x: int) -> int:\n    return x * {m}\n"
    )
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn noesis(home: &Path, dir: &Path, server: &FakeServer) -> Command {
    noesis_testkit::command_against(Path::new(env!("CARGO_BIN_EXE_noesis")), dir, home, server)
}

/// Runs a command; its model calls and wall time.
fn timed(server: &FakeServer, mut c: Command) -> (usize, f64) {
    let before = server.received().len();
    let t = Instant::now();
    let o = c.output().unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    assert!(
        o.status.success(),
        "{:?}: {}\n{}",
        c,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (server.received().len() - before, ms)
}

fn nodes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("repo");
    for p in 0..20 {
        for m in 0..10 {
            let f = repo.join(format!("pkg{p}/mod{m}.py"));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, module(p, m, "")).unwrap();
        }
    }
    std::fs::write(repo.join(".gitignore"), "docs/\ntests/\n__pycache__/\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "start"]);
    let empty_tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    let range = format!("{empty_tree}..HEAD");
    let server = FakeServer::start(vec![model()]).unwrap();
    let run = |args: &[&str]| {
        let mut c = noesis(home.path(), &repo, &server);
        c.args(args).arg("--quiet");
        timed(&server, c)
    };

    let docs1 = run(&["docs", "sync"]);
    let review1 = run(&["review", "--git", &range]);
    let testgen1 = run(&["testgen", "."]);
    let before = nodes(&repo.join("docs/noesis"));

    // Three files change: one body, two signatures, in three packages.
    std::fs::write(repo.join("pkg3/mod1.py"), module(3, 1, "").replace("return a + b", "return b + a")).unwrap();
    std::fs::write(repo.join("pkg7/mod2.py"), module(7, 2, ", c=0")).unwrap();
    std::fs::write(repo.join("pkg12/mod5.py"), module(12, 5, ", *rest")).unwrap();
    git(&repo, &["commit", "-qam", "change three files"]);

    let docs2 = run(&["docs", "sync"]);
    let review2 = run(&["review", "--git", &range]);
    let testgen2 = run(&["testgen", "--changed"]);
    let after = nodes(&repo.join("docs/noesis"));

    let touched = ["pkg3.", "pkg7.", "pkg12."];
    let untouched: Vec<&String> = before.keys().filter(|k| !touched.iter().any(|t| k.starts_with(t))).collect();
    let identical = untouched.iter().filter(|k| before[**k] == after[**k]).count();
    let remade = touched.iter().filter(|t| before.iter().any(|(k, v)| k.starts_with(**t) && after[k] != *v)).count();

    println!(
        "scenario: 200 files (20 packages x 10 modules, 2 functions each) + .gitignore; then 3 files change (1 body-only, 2 signatures)"
    );
    println!(
        "{:<10} {:>12} {:>10}   {:>12} {:>10} {:>10}",
        "", "first calls", "first ms", "second calls", "expected", "second ms"
    );
    for (name, a, b, want) in
        [("docs", docs1, docs2, 3), ("review", review1, review2, 3), ("testgen", testgen1, testgen2, 2)]
    {
        println!("{:<10} {:>12} {:>10.0}   {:>12} {:>10} {:>10.0}", name, a.0, a.1, b.0, want, b.1);
    }
    println!(
        "docs nodes: {identical} of {} untouched files byte-identical; {remade} of 3 units remade",
        untouched.len()
    );
    // The first review covers every file of the diff: the 200 modules and
    // the .gitignore.
    assert_eq!((docs1.0, review1.0, testgen1.0), (20, 201, 400), "first runs");
    assert_eq!(docs2.0, 3, "docs: one call per invalidated node");
    assert_eq!(review2.0, 3, "review: one call per changed file");
    assert_eq!(testgen2.0, 2, "testgen: the body-only change sends no spec back");
    assert_eq!(identical, untouched.len(), "every untouched node is byte-identical");
    assert_eq!(remade, 3);
}
