//! `cargo bench -p noesis-local --bench retention` — how many of 20 facts
//! an agent run still has in front of its model after its context was
//! compacted five times or more, with the embedded local model writing the
//! summaries: noesis's compaction (a summary plus every fact with evidence
//! carried verbatim) against a plain "summarise the conversation"
//! compaction, the same script and the same summariser side by side.
//!
//! The script is `noesis_agent::retention`: 20 facts (files read and
//! changed with their hashes, test runs with their outcome, a person's
//! refusals, errors) between bulky reads that fill a small window. A fact
//! is retained when all its probe strings are in the final request.
//!
//! Options (after `--`): `--model FILE` (default: the installed model),
//! `--threads N` (default 2), `--window N` (tokens, default 4000).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::Instant;

use noesis_agent::retention;
use noesis_llm::Provider;
use noesis_local::{LocalConfig, LocalModel, install};

fn main() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let home = install::home(&env).unwrap_or_else(|| PathBuf::from(".noesis"));
    let (mut model_path, mut threads, mut window) = (install::default_model_path(&home), 2u32, 4_000u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--model" => model_path = PathBuf::from(val()),
            "--threads" => threads = val().parse().unwrap_or(2),
            "--window" => window = val().parse().unwrap_or(4_000),
            _ => {} // --bench and friends from cargo
        }
    }
    if !model_path.is_file() {
        eprintln!("{} is not installed: run `noesis model install` first", model_path.display());
        std::process::exit(2);
    }
    let mut config = LocalConfig::new(model_path.clone());
    config.engine.threads = threads;
    let model = LocalModel::new(config);
    model.load().expect("the model loads");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut rows = Vec::new();
    for (name, keep_facts) in [("summary + facts (noesis)", true), ("plain summary (baseline)", false)] {
        let began = Instant::now();
        let mut calls = 0;
        let mut summarize = |request: &noesis_llm::ChatRequest| {
            calls += 1;
            match rt.block_on(model.chat(request)) {
                Ok(reply) => reply.text,
                Err(e) => {
                    eprintln!("{name}: summary {calls}: {e}");
                    String::new()
                }
            }
        };
        let report = retention::run(keep_facts, window, &mut summarize);
        eprintln!("{name}: missing {:?}", report.missing);
        rows.push((name, report, began.elapsed().as_secs_f64()));
    }
    println!(
        "fact retention after compaction ({}, {} thread(s), window {window} tokens)",
        model_path.file_name().unwrap_or_default().to_string_lossy(),
        threads
    );
    println!("{:<26} {:>9} {:>8} {:>12} {:>8}", "compaction", "retained", "percent", "compactions", "seconds");
    for (name, r, secs) in &rows {
        println!(
            "{name:<26} {:>6}/{:<2} {:>7.1}% {:>12} {:>8.1}",
            r.retained,
            r.total,
            r.percent(),
            r.compactions,
            secs
        );
    }
    let goal = rows[0].1.percent() >= 95.0;
    println!("goal (>= 95% retained with noesis's compaction): {}", if goal { "met" } else { "NOT met" });
}
