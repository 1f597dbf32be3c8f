//! `noesis init`: `noesis_dist::scaffold`, a new module folder.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name (lowercase, digits and hyphens; starts with a letter).
    name: String,
    /// Parent folder for the module.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Tier: exec, decision or exploration.
    #[arg(long, default_value = "decision")]
    tier: String,
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let dir = noesis_dist::scaffold::create(&a.dir, &a.name, &a.tier)?;
    out::data(&format!("created {}", dir.display()))?;
    out::note(&format!("next: edit {0}/prompt.md and {0}/schema.json, then `noesis validate {0}`", dir.display()));
    Ok(ExitCode::SUCCESS)
}
