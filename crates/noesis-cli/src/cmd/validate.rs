use std::path::PathBuf;
use std::process::ExitCode;

use noesis::module::{Found, SearchPath};

use super::{Loaded, load};
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name or path (omit with --envelope).
    #[arg(required_unless_present = "envelope")]
    module: Option<String>,
    /// Validate these envelope files (or test-vector files) instead.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with = "module")]
    envelope: Vec<PathBuf>,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    if !a.envelope.is_empty() {
        return envelopes(&a.envelope);
    }
    let name = a.module.unwrap_or_default();
    let module = match load(search, &name)? {
        Loaded::Module(m) => m,
        Loaded::NotFound(env) => {
            out::error(env["error"]["message"].as_str().unwrap_or("module not found"));
            return Ok(ExitCode::from(1));
        }
    };
    let mut problems = module.warnings.clone();
    if let Found::Dir(dir) = search.resolve(&name).unwrap_or(Found::Builtin("")) {
        for t in &module.manifest.tests {
            for file in t.split("->").map(str::trim) {
                if !dir.join(file).is_file() {
                    problems.push(format!("{}: tests: `{file}` does not exist", dir.join("module.yaml").display()));
                }
            }
        }
    }
    if module.data.is_none() {
        problems.push(format!(
            "{}: no data schema (schema.json#/data); replies are checked against the envelope only",
            module.location.display()
        ));
    }
    for p in &problems {
        out::note(&format!("warning: {p}"));
    }
    out::data(&format!(
        "valid: {} {} ({}, tier {}) at {}",
        module.name,
        module.manifest.version,
        module.format,
        module.policy.tier.as_str(),
        module.location.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn envelopes(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut bad = 0;
    for f in files {
        let verdict = match std::fs::read_to_string(f) {
            Err(e) => Err(vec![format!("cannot read: {e}")]),
            Ok(text) => {
                let problems = noesis_modules::envelope_file_problems(&text);
                if problems.is_empty() { Ok(()) } else { Err(problems) }
            }
        };
        match verdict {
            Ok(()) => out::data(&format!("{}: valid", f.display()))?,
            Err(lines) => {
                bad += 1;
                out::data(&format!("{}: invalid (E3001)", f.display()))?;
                for l in lines {
                    out::data(&format!("  {l}"))?;
                }
            }
        }
    }
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
