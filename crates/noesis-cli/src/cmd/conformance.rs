use std::path::{Path, PathBuf};
use std::process::ExitCode;

use noesis_modules::validate_envelope;
use serde_json::Value;

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Folder holding test vectors (`*.json` files with a `$test` header), searched recursively.
    dir: PathBuf,
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// The verdict for one vector: `Ok(detail)` when it behaved as expected.
fn judge(v: &Value) -> Result<String, String> {
    let test = &v["$test"];
    let expects = test["expects"].as_str().unwrap_or("");
    let envelope = v.get("envelope").cloned().unwrap_or(Value::Null);
    let violations = validate_envelope(&envelope);
    match expects {
        "accept" if violations.is_empty() => Ok("accepted".to_owned()),
        "accept" => Err(format!(
            "expected accept, rejected: {}",
            violations.iter().map(|v| format!("{} {}", v.pointer, v.message)).collect::<Vec<_>>().join("; ")
        )),
        "reject" if violations.is_empty() => Err("expected reject, accepted".to_owned()),
        "reject" => {
            // Every envelope-schema violation is E3001 (OUTPUT_SCHEMA_VIOLATION).
            let code = "E3001";
            let listed: Vec<&str> =
                test["error_codes"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect());
            if listed.is_empty() || listed.contains(&code) {
                Ok(format!(
                    "rejected with {code} at {}",
                    if violations[0].pointer.is_empty() { "(root)" } else { &violations[0].pointer }
                ))
            } else {
                Err(format!("rejected with {code}, expected one of {listed:?}"))
            }
        }
        other => Err(format!("unknown expectation `{other}`")),
    }
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    collect(&a.dir, &mut files).map_err(|e| anyhow::anyhow!("{}: {e}", a.dir.display()))?;
    let (mut passed, mut failed) = (0, 0);
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&text) else { continue };
        if v.get("$test").is_none() {
            continue;
        }
        let rel = f.strip_prefix(&a.dir).unwrap_or(f).display().to_string();
        match judge(&v) {
            Ok(detail) => {
                passed += 1;
                out::data(&format!("pass {rel}: {detail}"))?;
            }
            Err(why) => {
                failed += 1;
                out::data(&format!("FAIL {rel}: {why}"))?;
            }
        }
    }
    out::data(&format!("{passed} passed, {failed} failed"))?;
    if passed + failed == 0 {
        out::error(&format!("no test vectors under {}", a.dir.display()));
        return Ok(ExitCode::from(2));
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
