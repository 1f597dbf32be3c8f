use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
        match noesis_modules::judge_vector(&v) {
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
