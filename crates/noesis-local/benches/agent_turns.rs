//! `cargo bench -p noesis-local --bench agent_turns` — an agent run on the
//! local model, turn by turn: the engine starting every turn from nothing
//! (`fresh`, what every turn cost before the engine kept its state) against
//! the engine that keeps what it evaluated and prefills only the new end of
//! the conversation (`kept`, the default). Side by side in one process, the
//! runs interleaved, the same model file, threads and tool grammar.
//!
//! The run: the agent loop (`noesis_agent::AgentRun`) with the seven
//! built-in tools over a folder of notes, the provider's tool grammar, 128
//! output tokens a turn. Turns 1–4 must call a tool (`tool_choice =
//! required`), so every run reaches turn 5 whatever the 135M model would
//! rather do; turn 5 may answer. Malformed calls (an unknown tool, arguments
//! the schema refuses) are counted per mode.
//!
//! Options (after `--`): `--model FILE` (default: the installed model),
//! `--threads N` (default 2), `--runs N` (default 3), `--turns N` (default 5).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use noesis_agent::{Action, AgentRun, ApprovalPolicy, Limits, RunConfig, Toolbox, Workspace};
use noesis_llm::{Provider, ToolChoice};
use noesis_local::{LocalConfig, LocalModel, install};

struct Opts {
    model: PathBuf,
    threads: u32,
    runs: usize,
    turns: usize,
}

fn parse() -> Opts {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let home = install::home(&env).unwrap_or_else(|| PathBuf::from(".noesis"));
    let mut o = Opts { model: install::default_model_path(&home), threads: 2, runs: 3, turns: 5 };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--model" => o.model = PathBuf::from(val()),
            "--threads" => o.threads = val().parse().unwrap_or(2),
            "--runs" => o.runs = val().parse().unwrap_or(3).max(1),
            "--turns" => o.turns = val().parse().unwrap_or(5).max(1),
            _ => {} // --bench and friends from cargo
        }
    }
    o
}

/// Seconds per turn of one run, the input tokens of each turn, and the
/// malformed calls it made.
struct Turns {
    secs: Vec<f64>,
    tokens: Vec<u64>,
    malformed: usize,
    calls: usize,
}

fn run_once(model: &LocalModel, tools: &Arc<Toolbox>, turns: usize, i: usize) -> Turns {
    let config = RunConfig {
        tools: tools.decls(),
        approval: ApprovalPolicy::Auto,
        limits: Limits {
            max_turns: u32::try_from(turns).unwrap_or(5),
            max_tool_calls: 50,
            // Neutral here: the bench measures turns, not the stall rule.
            stall_steps: 100,
            ..Limits::default()
        },
        max_output_tokens: Some(128),
        ..RunConfig::default()
    };
    let task = format!(
        "List the folder, then read note{}.txt, note{}.txt and note{}.txt one by one, and say which words they hold.",
        i % 8,
        (i + 3) % 8,
        (i + 5) % 8
    );
    let mut run = AgentRun::new(format!("bench-{i}"), task, config, 0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut out = Turns { secs: Vec::new(), tokens: Vec::new(), malformed: 0, calls: 0 };
    loop {
        match run.next(0) {
            Action::CallModel(mut request) => {
                if out.secs.len() + 1 < turns {
                    request.tool_choice = ToolChoice::Required;
                }
                let t = Instant::now();
                let reply = rt.block_on(model.chat(&request));
                out.secs.push(t.elapsed().as_secs_f64());
                match reply {
                    Ok(reply) => {
                        out.tokens.push(reply.usage.map_or(0, |u| u.input_tokens));
                        run.on_model_reply(&reply, 0.0).unwrap();
                    }
                    Err(e) => {
                        eprintln!("turn {}: {e}", out.secs.len());
                        break;
                    }
                }
            }
            Action::ExecuteTools(batch) => {
                for call in batch {
                    run.started(&call.call_id, 0).unwrap();
                    let output = tools.run(&call);
                    run.finished(&call.call_id, output, 0).unwrap();
                }
            }
            _ => break,
        }
    }
    for c in &run.calls {
        out.calls += 1;
        let result = c.result.as_deref().unwrap_or_default();
        if result.contains("invalid arguments") || result.contains("there is no tool") {
            out.malformed += 1;
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let o = parse();
    if !o.model.is_file() {
        eprintln!("{} is not installed: run `noesis model install` first", o.model.display());
        std::process::exit(2);
    }
    let dir = tempfile::tempdir().unwrap();
    let words = ["apple", "river", "stone", "cloud", "maple", "amber", "tiger", "lemon"];
    for (i, w) in words.iter().enumerate() {
        std::fs::write(dir.path().join(format!("note{i}.txt")), format!("The word is {w}.\n")).unwrap();
    }
    let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), Vec::new()));
    let model = |reuse_prefix: bool| {
        let mut config = LocalConfig::new(o.model.clone());
        config.engine.threads = o.threads;
        config.engine.reuse_prefix = reuse_prefix;
        let m = LocalModel::new(config);
        m.load().expect("the model loads");
        m
    };
    let modes = [("fresh", model(false)), ("kept", model(true))];
    let mut all: Vec<Vec<Turns>> = vec![Vec::new(), Vec::new()];
    for i in 0..o.runs {
        for (m, (name, model)) in modes.iter().enumerate() {
            let turns = run_once(model, &tools, o.turns, i);
            eprintln!("run {} {name}: {:?}", i + 1, turns.secs.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>());
            all[m].push(turns);
        }
    }
    println!(
        "agent run on {} ({} thread(s), {} run(s) per mode, median seconds per model turn)",
        o.model.file_name().unwrap_or_default().to_string_lossy(),
        o.threads,
        o.runs
    );
    println!("{:>4} {:>12} {:>9} {:>9} {:>7}", "turn", "prompt tok", "fresh s", "kept s", "ratio");
    for t in 0..o.turns {
        let at = |m: usize| -> Vec<f64> { all[m].iter().filter_map(|r| r.secs.get(t).copied()).collect() };
        let (fresh, kept) = (at(0), at(1));
        if fresh.is_empty() || kept.is_empty() {
            continue;
        }
        let tokens: Vec<f64> = all[1].iter().filter_map(|r| r.tokens.get(t)).map(|n| *n as f64).collect();
        let (f, k) = (median(fresh), median(kept));
        println!("{:>4} {:>12.0} {:>9.2} {:>9.2} {:>6.1}x", t + 1, median(tokens), f, k, f / k);
    }
    for (m, (name, _)) in modes.iter().enumerate() {
        let calls: usize = all[m].iter().map(|r| r.calls).sum();
        let malformed: usize = all[m].iter().map(|r| r.malformed).sum();
        println!("{name}: {calls} tool call(s), {malformed} malformed");
    }
}
