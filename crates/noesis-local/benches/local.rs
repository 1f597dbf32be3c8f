//! `cargo bench -p noesis-local` — the local provider against llama.cpp's
//! own decode, on the same model file, thread count and vendored llama.cpp.
//!
//! Each generation runs in a child process of its own (so load time and
//! peak RSS are its own): the parent re-runs this binary with `--child MODE`,
//! interleaving the rows run by run, and prints the medians side by side.
//!
//! - `llama.cpp`: the vendored llama.cpp driven through `llama-cpp-2` the
//!   way llama.cpp's own `simple` example does it — one `llama_decode` per
//!   token, llama.cpp's greedy sampler (`llama_sampler_init_greedy`), no
//!   grammar, a fixed number of tokens. This is what noesis adds nothing to.
//! - `noesis free`: the noesis engine with no constraint.
//! - `noesis grammar`: the provider's path for a module run — the
//!   code-simplifier envelope schema tightened and compiled by llguidance,
//!   a mask per token, fast-forward off.
//! - `noesis grammar+ff`: the same with fast-forward (grammar-forced tokens
//!   appended in one batch without sampling).
//!
//! Options (after `--`): `--model FILE` (default: the installed model),
//! `--threads N` (default 2), `--runs N` (default 3), `--tokens N` (tokens
//! for the llama.cpp row, default 128).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use noesis_llm::Message;
use noesis_local::engine::Request;
use noesis_local::schema::{Limits, fit};
use noesis_local::{Constraint, ConstraintCompiler, Engine, EngineOptions, Llg, install};
use noesis_modules::search::Found;
use noesis_modules::{PromptParts, build_prompt};
use serde_json::{Value, json};

#[derive(Debug, Clone)]
struct Opts {
    model: PathBuf,
    threads: u32,
    runs: usize,
    tokens: u32,
}

fn parse() -> (Opts, Option<String>) {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let home = install::home(&env).unwrap_or_else(|| PathBuf::from(".noesis"));
    let mut o = Opts { model: install::default_model_path(&home), threads: 2, runs: 3, tokens: 128 };
    let mut child = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--model" => o.model = PathBuf::from(val()),
            "--threads" => o.threads = val().parse().unwrap_or(2),
            "--runs" => o.runs = val().parse().unwrap_or(3).max(1),
            "--tokens" => o.tokens = val().parse().unwrap_or(128),
            "--child" => child = Some(val()),
            _ => {} // --bench and friends from cargo
        }
    }
    (o, child)
}

/// The code-simplifier module's conversation and reply schema.
fn workload() -> (Vec<Message>, Value) {
    let module = Found::Builtin("code-simplifier").load().expect("built-in module");
    let input = json!({"code": "def calc(x):\n    if x > 0:\n        if x < 10:\n            return x * 2\n        else:\n            return x\n    else:\n        return 0", "language": "python"});
    let prompt = build_prompt(PromptParts {
        template: &module.prompt,
        input: &input,
        arguments: None,
        data_schema: module.data.as_ref().map(|s| &s.schema),
        include_schema: false,
    });
    let messages = vec![
        Message::system(
            "You are a Cognitive Module. Follow the instructions and answer with exactly one JSON object: the v2.2 response envelope.",
        ),
        Message::user(prompt),
    ];
    (messages, module.reply_schema())
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// llama.cpp's own decode: load, prefill, then `tokens` greedy steps with
/// llama.cpp's sampler, one decode call each.
fn child_llama(o: &Opts) -> Value {
    let (messages, _) = workload();
    let t = Instant::now();
    let mut backend = LlamaBackend::init().unwrap();
    backend.void_logs();
    let model = LlamaModel::load_from_file(&backend, &o.model, &LlamaModelParams::default()).unwrap();
    let load = secs(t.elapsed());
    let template = model.chat_template(None).unwrap();
    let chat: Vec<LlamaChatMessage> = noesis_local::engine::chat_turns(&messages)
        .into_iter()
        .map(|(r, c)| LlamaChatMessage::new(r.to_owned(), c).unwrap())
        .collect();
    let prompt = model.apply_chat_template(&template, &chat, true).unwrap();
    let tokens = model.vocab().tokenize(prompt.as_bytes(), true, true);
    let n = u32::try_from(tokens.len()).unwrap();
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..o.runs {
        let n_batch = n.clamp(64, 512);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n + o.tokens + 1))
            .with_n_batch(n_batch)
            .with_n_ubatch(n_batch)
            .with_n_threads(o.threads as i32)
            .with_n_threads_batch(o.threads as i32);
        let mut ctx = model.new_context(&backend, params).unwrap();
        let mut batch = LlamaBatch::new(n_batch as usize, 1);
        let t = Instant::now();
        let mut pos = 0;
        for chunk in tokens.chunks(n_batch as usize) {
            batch.clear();
            for tok in chunk {
                pos += 1;
                batch.add(*tok, pos - 1, &[0], pos as usize == tokens.len()).unwrap();
            }
            ctx.decode(&mut batch).unwrap();
        }
        prefill.push(f64::from(n) / secs(t.elapsed()));
        let mut sampler = LlamaSampler::greedy();
        let t = Instant::now();
        for _ in 0..o.tokens {
            let tok = sampler.sample(&ctx, batch.n_tokens() - 1);
            sampler.accept(tok);
            batch.clear();
            batch.add(tok, pos, &[0], true).unwrap();
            pos += 1;
            ctx.decode(&mut batch).unwrap();
        }
        decode.push(f64::from(o.tokens) / secs(t.elapsed()));
    }
    json!({"load_s": load, "prompt_tokens": n, "prefill_tps": median(prefill), "decode_tps": median(decode),
           "tokens": o.tokens, "rss_mb": peak_rss_mb()})
}

/// The noesis engine, free or under the module's grammar.
fn child_noesis(o: &Opts, grammar: bool, fast_forward: bool) -> Value {
    let (messages, schema) = workload();
    let t = Instant::now();
    let engine =
        Engine::load(&o.model, EngineOptions { threads: o.threads, fast_forward, reuse_prefix: false }).unwrap();
    let env = engine.tok_env();
    let compiler = Llg::new(&env).unwrap();
    let load = secs(t.elapsed());
    let prompt = engine.format(&messages).unwrap();
    let budget = 2048;
    let tight = fit(&schema, budget, Limits::default()).schema;
    let t = Instant::now();
    drop(compiler.compile(&tight).unwrap());
    let compile = secs(t.elapsed());
    let cancel = AtomicBool::new(false);
    let mut rows = Vec::new();
    for _ in 0..o.runs {
        let constraint: Option<Box<dyn Constraint>> = grammar.then(|| compiler.compile(&tight).unwrap());
        let g = engine
            .generate(Request {
                prompt: &prompt,
                max_tokens: if grammar { budget as u32 } else { o.tokens },
                constraint,
                temperature: None,
                seed: 1,
                cancel: &cancel,
                on_text: &mut |_| {},
            })
            .unwrap();
        if grammar {
            let v: Result<Value, _> = serde_json::from_str(&g.text);
            assert!(v.is_ok_and(|v| v.is_object()), "grammar output does not parse: {}", g.text);
        }
        rows.push(g);
    }
    let per = |f: &dyn Fn(&noesis_local::Generation) -> f64| median(rows.iter().map(f).collect());
    json!({
        "load_s": load,
        "grammar_compile_s": compile,
        "prompt_tokens": rows[0].prompt_tokens,
        "prefill_tps": per(&|g| f64::from(g.prompt_tokens) / secs(g.timings.prefill)),
        // Tokens appended per second of generation (forced ones included).
        "decode_tps": per(&|g| f64::from(g.output_tokens) / secs(g.timings.generate)),
        // Per llama.cpp decode call (one per token without fast-forward):
        // the step-for-step comparison with llama.cpp's own loop.
        "ms_per_call": per(&|g| secs(g.timings.generate) * 1000.0 / f64::from(g.decode_calls.max(1))),
        "tokens": per(&|g| f64::from(g.output_tokens)),
        "forced": per(&|g| f64::from(g.forced_tokens)),
        "constraint_ms_per_token": per(&|g| secs(g.timings.constraint) * 1000.0 / f64::from(g.output_tokens.max(1))),
        "constraint_share": per(&|g| secs(g.timings.constraint) / secs(g.timings.generate)),
        "sample_ms_per_token": per(&|g| secs(g.timings.sample) * 1000.0 / f64::from(g.output_tokens.max(1))),
        "finish": format!("{:?}", rows[0].finish),
        "rss_mb": peak_rss_mb(),
    })
}

fn main() {
    let (o, child) = parse();
    if let Some(mode) = child {
        let v = match mode.as_str() {
            "llama" => child_llama(&o),
            "free" => child_noesis(&o, false, false),
            "grammar" => child_noesis(&o, true, false),
            "grammar-ff" => child_noesis(&o, true, true),
            m => panic!("unknown mode {m}"),
        };
        println!("{v}");
        return;
    }
    if !o.model.is_file() {
        eprintln!("SKIPPED: {} is not installed (run `noesis model install`)", o.model.display());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let modes = [
        ("llama", "llama.cpp own decode"),
        ("free", "noesis, no grammar"),
        ("grammar", "noesis, grammar"),
        ("grammar-ff", "noesis, grammar + ff"),
    ];
    // Interleaved, one generation per child: a machine whose load changes
    // over minutes then weighs on every row alike.
    let mut runs: Vec<Vec<Value>> = vec![Vec::new(); modes.len()];
    for _ in 0..o.runs {
        for (i, (mode, _)) in modes.iter().enumerate() {
            let out = Command::new(&exe)
                .args(["--child", mode, "--model"])
                .arg(&o.model)
                .args(["--threads", &o.threads.to_string(), "--runs", "1", "--tokens", &o.tokens.to_string()])
                .output()
                .unwrap();
            assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
            runs[i].push(serde_json::from_slice(&out.stdout).unwrap());
        }
    }
    let results: Vec<(&str, Value)> = modes
        .iter()
        .zip(&runs)
        .map(|((_, label), rs)| {
            let mut merged = rs[0].clone();
            for (k, v) in merged.as_object_mut().unwrap() {
                if v.is_number() {
                    *v = json!(median(rs.iter().filter_map(|r| r[k.as_str()].as_f64()).collect()));
                }
            }
            (*label, merged)
        })
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "model: {} · threads: {} · medians of {} interleaved runs · load average after: {}\n",
        o.model.display(),
        o.threads,
        o.runs,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!(
        "{:24} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>12} {:>10} {:>8}",
        "", "load s", "prompt", "prefill/s", "decode/s", "tokens", "forced", "constr ms/t", "constr %", "RSS MB"
    );
    for (label, v) in &results {
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let c = |k: &str, scale: f64, digits: usize| {
            v.get(k).and_then(Value::as_f64).map_or("-".to_owned(), |x| format!("{:.digits$}", x * scale))
        };
        println!(
            "{:24} {:>8.3} {:>9.0} {:>10.0} {:>10.1} {:>8.0} {:>8} {:>12} {:>10} {:>8.0}",
            label,
            f("load_s"),
            f("prompt_tokens"),
            f("prefill_tps"),
            f("decode_tps"),
            f("tokens"),
            c("forced", 1.0, 0),
            c("constraint_ms_per_token", 1.0, 3),
            c("constraint_share", 100.0, 1),
            f("rss_mb")
        );
    }
    let tps = |i: usize| results[i].1["decode_tps"].as_f64().unwrap_or(f64::NAN);
    let llama = tps(0);
    println!();
    println!(
        "grammar compile (once per schema, then cached): {:.0} ms",
        results[2].1["grammar_compile_s"].as_f64().unwrap_or(f64::NAN) * 1000.0
    );
    println!(
        "decode vs llama.cpp's own: no grammar {:.2}x · grammar {:.2}x · grammar + fast-forward {:.2}x (target >= 0.9x with the grammar on)",
        tps(1) / llama,
        tps(2) / llama,
        tps(3) / llama
    );
    println!(
        "time per decode call: llama.cpp {:.2} ms · grammar + ff {:.2} ms",
        1000.0 / llama,
        results[3].1["ms_per_call"].as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "constraint share of decode time: grammar {:.1}% · grammar + ff {:.1}% (target <= 5%)",
        results[2].1["constraint_share"].as_f64().unwrap_or(f64::NAN) * 100.0,
        results[3].1["constraint_share"].as_f64().unwrap_or(f64::NAN) * 100.0
    );
}
