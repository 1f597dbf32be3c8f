//! What confinement costs per command: each command run plain (the sandbox
//! off: the same scrubbed environment, process group and output handling)
//! and confined (helper, new pid and mount namespaces, Landlock, seccomp),
//! interleaved,
//! median of N (`SANDBOX_BENCH_RUNS`, default 20). Prints one line per
//! command and the added milliseconds; the goal is at most 5 ms added.
//! Run by `bench/sandbox.sh` (a release build, pytest installed).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::time::{Duration, Instant};

use noesis_sandbox::{Mode, RunOptions, Sandbox, Settings};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn timed(sandbox: &Sandbox, argv: &[String], cwd: &Path) -> Duration {
    let began = Instant::now();
    let opts = RunOptions { cwd, timeout: Duration::from_secs(120), max_output: 1 << 20, cancelled: &|| false };
    let done = sandbox.run(argv, &opts).expect("the sandbox runs it");
    assert!(done.success(), "{argv:?}: {}{}", done.stdout, done.stderr);
    began.elapsed()
}

fn main() {
    let runs: usize = std::env::var("SANDBOX_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    for i in 0..20 {
        std::fs::write(ws.join(format!("test_m{i}.py")), format!("def test_{i}():\n    assert {i} + 1 == {}\n", i + 1))
            .unwrap();
    }
    let mut commands: Vec<(&str, Vec<String>)> =
        vec![("true", vec!["true".into()]), ("python3 -c pass", vec!["python3".into(), "-c".into(), "pass".into()])];
    let pytest = std::env::var("NOESIS_PYTEST").ok().filter(|p| Path::new(p).exists());
    let mut settings = Settings::default();
    match &pytest {
        Some(p) => {
            settings.read_extra.extend(noesis_sandbox::paths::program_root(p));
            commands.push(("pytest, 20 tests", vec![p.clone(), "-q".into(), "-p".into(), "no:cacheprovider".into()]));
        }
        None => eprintln!("NOESIS_PYTEST is not set: the pytest row is left out (bench/sandbox.sh installs it)"),
    }
    let sandbox = Sandbox::new(&settings, &ws, &[]).expect("the sandbox is available here (noesis sandbox check)");
    // The same command, the same scrubbed environment and output handling,
    // unconfined: what is measured is the confinement alone.
    let off = Sandbox::new(&Settings { mode: Mode::Off, ..settings.clone() }, &ws, &[]).unwrap();
    println!("{:<22} {:>12} {:>12} {:>12}   (median of {runs}, ms)", "command", "plain", "confined", "added");
    let mut worst = Duration::ZERO;
    for (name, argv) in &commands {
        // Warm both paths (page cache, the helper's first load).
        timed(&off, argv, &ws);
        timed(&sandbox, argv, &ws);
        let (mut p, mut c) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            p.push(timed(&off, argv, &ws));
            c.push(timed(&sandbox, argv, &ws));
        }
        let (p, c) = (median(p), median(c));
        let added = c.saturating_sub(p);
        worst = worst.max(added);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!("{name:<22} {:>12.2} {:>12.2} {:>12.2}", ms(p), ms(c), ms(added));
    }
    println!(
        "most added per command: {:.2} ms (goal: at most 5 ms) — {}",
        worst.as_secs_f64() * 1000.0,
        if worst <= Duration::from_millis(5) { "met" } else { "MISSED" }
    );
}
