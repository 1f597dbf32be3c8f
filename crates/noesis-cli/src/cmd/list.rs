use std::process::ExitCode;

use noesis_modules::search::SearchPath;
use serde_json::json;

use super::location;
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    for l in search.list() {
        let loc = location(&l.found);
        match l.found.load() {
            Ok(m) => rows.push(json!({
                "name": m.name, "version": m.manifest.version, "format": m.format.to_string(),
                "tier": m.policy.tier.as_str(), "responsibility": m.manifest.responsibility,
                "location": loc, "valid": true
            })),
            Err(e) => rows.push(json!({"name": l.name, "location": loc, "valid": false, "error": e.to_string()})),
        }
    }
    if a.json {
        out::json(&json!(rows), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = rows.iter().filter_map(|r| r["name"].as_str()).map(str::len).max().unwrap_or(4).max(4);
    out::data(&format!("{:width$}  {:7}  {:6}  {:11}  LOCATION", "NAME", "VERSION", "FORMAT", "TIER"))?;
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
        if r["valid"] == json!(true) {
            out::data(&format!(
                "{:width$}  {:7}  {:6}  {:11}  {}",
                s("name"),
                s("version"),
                s("format"),
                s("tier"),
                s("location")
            ))?;
        } else {
            out::data(&format!(
                "{:width$}  {:7}  {:6}  {:11}  {} (invalid: {})",
                s("name"),
                "-",
                "-",
                "-",
                s("location"),
                s("error")
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
