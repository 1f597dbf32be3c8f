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

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use noesis_llm::{Provider, Scripted};
use noesis_modules::search::{Found, SearchPath};
use noesis_modules::{CompiledSchema, Module, Violation, load_dir, validate_envelope};
use noesis_runtime::RunOptions;
use noesis_runtime::compose::{ComposeOptions, SearchResolver, execute};
use serde_json::{Value, json};

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

/// One `$validate` fragment: the part of the envelope it checks, compiled.
struct Fragment {
    key: String,
    schema: CompiledSchema,
}

struct Case {
    name: String,
    input_path: PathBuf,
    expected_path: PathBuf,
    input: Value,
    fragments: Vec<Fragment>,
    /// The sample envelope (`$example`), if the file has one.
    example: Option<Value>,
}

struct Suite {
    module: Arc<Module>,
    cases: Vec<Case>,
}

const MARKERS: [&str; 3] = ["module.yaml", "MODULE.md", "module.md"];

fn is_module_dir(p: &Path) -> bool {
    MARKERS.iter().any(|m| p.join(m).is_file())
}

/// Module folders under `dir`, depth first in name order; a module's own
/// subfolders are not searched and hidden folders are skipped.
fn modules_under(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if is_module_dir(dir) {
        found.push(dir.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let hidden = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if p.is_dir() && !hidden {
            modules_under(&p, found)?;
        }
    }
    Ok(())
}

fn module_dirs(search: &SearchPath, target: &str) -> anyhow::Result<Vec<PathBuf>> {
    let dir = match search.resolve(target) {
        Ok(Found::Dir(d)) => d,
        Ok(Found::Builtin(name)) => bail!(
            "`{name}` is a built-in module, which carries no test files; pass the path of a module folder that has a tests/ folder"
        ),
        Err(not_found) => {
            let p = Path::new(target);
            if p.is_dir() {
                p.to_path_buf()
            } else {
                return Err(not_found.into());
            }
        }
    };
    let mut found = Vec::new();
    modules_under(&dir, &mut found).with_context(|| format!("{}: cannot read the folder", dir.display()))?;
    if found.is_empty() {
        bail!("{}: no modules in this folder", dir.display());
    }
    Ok(found)
}

fn read_json(path: &Path, what: &str) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: cannot read the {what}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow!("{}: the {what} is not JSON: {e}", path.display()))
}

/// `(input, expected)` paths of a module's cases, in the order written.
fn case_files(module: &Module, dir: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    if !module.manifest.tests.is_empty() {
        return module
            .manifest
            .tests
            .iter()
            .map(|t| match t.split_once("->") {
                Some((i, e)) => Ok((contained(dir, i.trim())?, contained(dir, e.trim())?)),
                None => Err(anyhow!(
                    "{}: tests: `{t}` is not of the form `tests/x.input.json -> tests/x.expected.json`",
                    dir.join("module.yaml").display()
                )),
            })
            .collect();
    }
    let tests = dir.join("tests");
    let Ok(entries) = std::fs::read_dir(&tests) else { return Ok(Vec::new()) };
    let mut inputs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".input.json")))
        .collect();
    inputs.sort();
    inputs
        .into_iter()
        .map(|i| {
            let stem = i.file_name().unwrap_or_default().to_string_lossy().trim_end_matches(".input.json").to_owned();
            let rel = |name: String| format!("tests/{name}");
            let input = contained(dir, &rel(format!("{stem}.input.json")))?;
            Ok((input, contained(dir, &rel(format!("{stem}.expected.json")))?))
        })
        .collect()
}

/// `rel` inside the module folder `dir`, or an error naming the module
/// file: a case file may not be absolute, climb out with `..`, or be a
/// symlink (or under one) that leads out of the folder — a test run may
/// send what it reads to a provider. A symlink loop is an error, not a hang.
fn contained(dir: &Path, rel: &str) -> anyhow::Result<PathBuf> {
    let manifest = dir.join("module.yaml");
    let refuse = |why: &str| anyhow!("{}: tests: `{rel}` {why}", manifest.display());
    let path = Path::new(rel);
    if path.is_absolute() || path.has_root() {
        return Err(refuse("is an absolute path; case files must be inside the module folder"));
    }
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(refuse("leaves the module folder (`..`)"));
    }
    let joined = dir.join(path);
    let root = dir.canonicalize().map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    match joined.canonicalize() {
        Ok(real) if real.starts_with(&root) => Ok(joined),
        Ok(real) => Err(refuse(&format!("leads out of the module folder (to {})", real.display()))),
        // A missing file is reported when it is read, with its own message.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(&joined).is_err() => Ok(joined),
        Err(e) => Err(refuse(&format!("cannot be resolved: {e}"))),
    }
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn load_case(input_path: PathBuf, expected_path: PathBuf) -> anyhow::Result<Case> {
    let name = input_path.file_name().unwrap_or_default().to_string_lossy().trim_end_matches(".input.json").to_owned();
    let input = read_json(&input_path, "test input")?;
    if !input.is_object() {
        bail!("{}: the test input must be a JSON object", input_path.display());
    }
    let expected = read_json(&expected_path, "expected result")?;
    let Some(validate) = expected.get("$validate").and_then(Value::as_object) else {
        bail!("{}: no `$validate` object (JSON Schema fragments for ok, meta, data, error)", expected_path.display());
    };
    let mut fragments = Vec::new();
    for key in validate.keys() {
        // Compiled inside the whole file so a `$ref` to its own definitions resolves.
        let schema = CompiledSchema::compile_section(&expected, &format!("/$validate/{}", escape_pointer(key)))
            .map_err(|e| {
                anyhow!("{}: `$validate.{key}` is not a valid schema: {}", expected_path.display(), e.message)
            })?;
        fragments.push(Fragment { key: key.clone(), schema });
    }
    let example = expected.get("$example").cloned();
    Ok(Case { name, input_path, expected_path, input, fragments, example })
}

/// Every violation of the envelope: the official envelope schema, then each
/// fragment against its part, pointers relative to the envelope.
fn judge(envelope: &Value, fragments: &[Fragment]) -> Vec<Violation> {
    let mut violations = validate_envelope(envelope);
    for f in fragments {
        let at = format!("/{}", escape_pointer(&f.key));
        match envelope.get(&f.key) {
            None => violations.push(Violation {
                pointer: at,
                keyword: "required".to_owned(),
                message: format!("the envelope has no `{}`", f.key),
            }),
            Some(part) => violations.extend(f.schema.violations(part).into_iter().map(|mut v| {
                v.pointer = format!("{at}{}", v.pointer);
                v
            })),
        }
    }
    violations
}

pub(crate) fn run(search: &SearchPath, mut a: Args) -> anyhow::Result<ExitCode> {
    // Read and check every file before the first model call: a typo in case
    // 9 should not cost eight live calls.
    let mut suites = Vec::new();
    for dir in module_dirs(search, &a.target)? {
        let module = load_dir(&dir).with_context(|| format!("cannot load module {}", dir.display()))?;
        let cases =
            case_files(&module, &dir)?.into_iter().map(|(i, e)| load_case(i, e)).collect::<anyhow::Result<Vec<_>>>()?;
        if cases.is_empty() {
            out::note(&format!("note: {} has no test cases ({})", module.name, dir.display()));
        }
        suites.push(Suite { module: Arc::new(module), cases });
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
    // `@call`s and composition steps find the modules of the search path,
    // then the siblings of the module under test.
    let mut resolve_in = search.clone();
    for suite in &suites {
        if let Some(parent) = suite.module.location.parent()
            && !resolve_in.dirs.iter().any(|d| d == parent)
        {
            resolve_in.dirs.push(parent.to_path_buf());
        }
    }
    let resolver = SearchResolver::new(resolve_in);
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
            let violations = judge(&envelope, &case.fragments);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fragments(validate: Value) -> Vec<Fragment> {
        let doc = json!({ "$validate": validate });
        doc["$validate"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| Fragment {
                key: k.clone(),
                schema: CompiledSchema::compile_section(&doc, &format!("/$validate/{k}")).unwrap(),
            })
            .collect()
    }

    #[test]
    fn violations_point_into_the_envelope() {
        let env =
            json!({"ok": true, "meta": {"confidence": 0.3, "risk": "low", "explain": "e"}, "data": {"rationale": "r"}});
        let f = fragments(json!({
            "ok": {"const": true},
            "meta": {"properties": {"confidence": {"minimum": 0.5}}},
            "data": {"required": ["summary"]},
            "error": {"type": "object"}
        }));
        let got: Vec<(String, String)> = judge(&env, &f).into_iter().map(|v| (v.pointer, v.keyword)).collect();
        assert_eq!(
            got,
            [
                ("/meta/confidence".to_owned(), "minimum".to_owned()),
                ("/data/summary".to_owned(), "required".to_owned()),
                ("/error".to_owned(), "required".to_owned()),
            ]
        );
    }
}
