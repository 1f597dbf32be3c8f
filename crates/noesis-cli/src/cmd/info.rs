use std::process::ExitCode;

use noesis_modules::search::SearchPath;

use super::{Loaded, load};
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Module name or path.
    module: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let m = match load(search, &a.module)? {
        Loaded::Module(m) => m,
        Loaded::NotFound(env) => {
            out::error(env["error"]["message"].as_str().unwrap_or("module not found"));
            return Ok(ExitCode::from(1));
        }
    };
    let sections = m.schema_sections();
    let info = m.summary();
    if a.json {
        out::json(&info, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let p = &m.policy;
    let mut text = format!(
        "{} {} ({})\n  {}\n  location:    {}\n  tier:        {} (strictness {:?}, enums {:?}, overflow {} max {}, min confidence {})\n  risk rule:   {}\n  schemas:     {}\n  prompt:      {} chars\n",
        m.name,
        m.manifest.version,
        m.format,
        m.manifest.responsibility,
        m.location.display(),
        p.tier.as_str(),
        p.strictness,
        p.enums,
        if p.overflow_enabled { "on" } else { "off" },
        p.max_items,
        p.min_confidence,
        p.risk_rule.map_or("default (changes, else issues, else explicit)".to_owned(), |r| format!("{r:?}")),
        sections.join(", "),
        m.prompt.chars().count(),
    );
    if !m.manifest.excludes.is_empty() {
        text.push_str(&format!("  excludes:    {}\n", m.manifest.excludes.join("; ")));
    }
    if !m.manifest.tests.is_empty() {
        text.push_str(&format!("  tests:       {}\n", m.manifest.tests.len()));
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
