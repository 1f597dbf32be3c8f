//! `noesis test`: a module's own test cases (`tests:` in module.yaml, or
//! `tests/*.input.json` beside `*.expected.json`), each run through the
//! runtime and its envelope checked against the `$validate` fragments.
//!
//! Unless `--provider` or `--replay` says otherwise, each case is answered
//! by its own `$example` envelope (`--examples`): offline and deterministic,
//! expected failures included. `LLM_PROVIDER`, routes, `provider` in
//! noesis.toml and API keys in the environment are not consulted, so a test
//! run never spends money by accident. Case files must lie inside the
//! module folder.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::bail;
use noesis_llm::{Provider, Scripted};
use noesis_modules::search::SearchPath;
use noesis_runtime::compose::{ComposeOptions, SearchResolver, execute};
use noesis_runtime::{RunOptions, cases};
use serde_json::json;

use crate::out;
use crate::provider::{ProviderArgs, budget, prices, select};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name, a path to a module folder, or a folder of modules (each is tested).
    target: String,
    #[command(flatten)]
    provider: ProviderArgs,
    /// Print a machine-readable report on stdout instead of one line per case.
    #[arg(long)]
    json: bool,
    /// Answer each case with its own `$example` envelope (offline, no model):
    /// checks the cases against the module's contract, expected failures
    /// included. The default when no provider is named.
    #[arg(long)]
    examples: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn run(search: &SearchPath, mut a: Args) -> anyhow::Result<ExitCode> {
    // Read and check every file before the first model call: a typo in case
    // 9 should not cost eight live calls.
    let mut suites = Vec::new();
    for dir in cases::module_dirs(search, &a.target)? {
        let suite = cases::load_suite(&dir)?;
        if suite.cases.is_empty() {
            out::note(&format!("note: {} has no test cases ({})", suite.module.name, dir.display()));
        }
        suites.push(suite);
    }
    let total: usize = suites.iter().map(|s| s.cases.len()).sum();
    if total == 0 {
        bail!("no test cases under {} (module.yaml `tests:`, or tests/*.input.json with *.expected.json)", a.target);
    }

    let named = a.provider.provider.is_some() || a.provider.replay.is_some();
    if a.examples && (a.provider.provider.is_some() || a.provider.replay.is_some()) {
        bail!("--examples answers from the case files; it takes no --provider or --replay");
    }
    if !named && !a.examples {
        a.examples = true;
        out::note(
            "note: answering each case with its own `$example` (offline); --provider P runs the cases against a model, --replay DIR against recordings",
        );
    }
    let config =
        crate::config::load(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), &std::env::current_dir()?)?.config;
    let options = ComposeOptions {
        run: RunOptions {
            // One meter for the whole test run: --max-cost caps all cases together.
            budget: budget(&a.provider, &config)?,
            prices: Some(prices(&config)),
            ..RunOptions::default()
        },
        timeout: None,
        // A test run stays on the provider it was given, children included.
        providers: None,
    };
    let resolver = SearchResolver::new(cases::resolve_in(search, &suites));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (mut passed, mut failed) = (0usize, 0usize);
    let mut report = Vec::new();
    let progress = crate::progress::Progress::bar(a.quiet, total as u64, "testing");
    for suite in &suites {
        let module = &suite.module;
        if suite.cases.is_empty() {
            continue;
        }
        let provider = if a.examples {
            None
        } else {
            let p = select(&a.provider, &config, Some((&module.name, Some(module.policy.tier.as_str()))))?;
            crate::local::note_schema(p.as_ref(), &module.reply_schema());
            if let Some(w) = noesis_host::provider::unpriced_warning(&a.provider, &config, p.as_ref()) {
                out::note(&w);
            }
            Some(p)
        };
        for case in &suite.cases {
            let answer: Arc<dyn Provider> = match (&provider, &case.example) {
                (Some(p), _) => Arc::clone(p),
                (None, Some(example)) => Arc::new(Scripted::new(vec![example.to_string()])),
                (None, None) => {
                    failed += 1;
                    let why = format!("{}: no `$example` to answer with", case.expected_path.display());
                    if a.json {
                        report.push(json!({"module": module.name, "case": case.name, "passed": false, "error": why}));
                    } else {
                        progress.suspend(|| out::data(&format!("FAIL {} {}\n  {why}", module.name, case.name)))?;
                    }
                    progress.inc();
                    continue;
                }
            };
            let record =
                rt.block_on(execute(Arc::clone(module), &resolver, answer.as_ref(), case.input.clone(), &options));
            progress.inc();
            let envelope = record.envelope;
            let violations = case.judge(&envelope);
            let ok = violations.is_empty();
            if ok {
                passed += 1;
            } else {
                failed += 1;
            }
            if a.json {
                report.push(json!({
                    "module": module.name,
                    "case": case.name,
                    "input": case.input_path,
                    "expected": case.expected_path,
                    "passed": ok,
                    "violations": violations,
                    "envelope": envelope,
                }));
                continue;
            }
            let mut lines = format!("{} {} {}", if ok { "PASS" } else { "FAIL" }, module.name, case.name);
            for v in &violations {
                let at = if v.pointer.is_empty() { "(root)" } else { v.pointer.as_str() };
                lines.push_str(&format!("\n  {at}: {} (rule: {})", v.message, v.keyword));
            }
            if !ok && envelope["ok"] == json!(false) {
                lines.push_str(&format!(
                    "\n  the run returned {}: {}",
                    envelope["error"]["code"].as_str().unwrap_or("?"),
                    envelope["error"]["message"].as_str().unwrap_or("")
                ));
            }
            progress.suspend(|| out::data(&lines))?;
        }
    }
    progress.finish();
    let summary = format!("{passed} passed, {failed} failed");
    if a.json {
        out::json(&json!({"passed": passed, "failed": failed, "cases": report}), true)?;
        out::note(&summary);
    } else {
        out::data(&summary)?;
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
