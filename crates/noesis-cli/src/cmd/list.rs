use std::process::ExitCode;

use noesis::module::{Found, SearchPath};
use serde_json::json;

use super::location;
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also ask git sources for newer tags (the network); the registry's
    /// cached index is always consulted.
    #[arg(long)]
    updates: bool,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    // Where installed modules came from: the project's and the user's
    // cognitive.lock.
    let installers: Vec<noesis_dist::Installer> =
        [false, true].into_iter().filter_map(|g| super::install::installer_for(g).ok()).collect();
    let origin = |dir: &std::path::Path, name: &str| {
        installers.iter().find(|i| dir == i.modules_dir.join(name)).and_then(|i| {
            let lock = i.lockfile().ok()?;
            let entry = lock.modules.get(name)?.clone();
            let update = i.update_available(&entry, a.updates);
            Some((entry, update))
        })
    };
    let mut rows = Vec::new();
    for l in search.list() {
        let loc = location(&l.found);
        let from = match &l.found {
            Found::Dir(d) => origin(d, &l.name),
            _ => None,
        };
        let mut row = match l.found.load() {
            Ok(m) => json!({
                "name": m.name, "version": m.manifest.version, "format": m.format.to_string(),
                "tier": m.policy.tier.as_str(), "responsibility": m.manifest.responsibility,
                "location": loc, "valid": true
            }),
            Err(e) => json!({"name": l.name, "location": loc, "valid": false, "error": e.to_string()}),
        };
        if let Some((entry, update)) = from {
            row["source"] = json!(entry.source);
            row["installed"] = json!(entry.version.or(entry.commit));
            row["update"] = json!(update);
        }
        rows.push(row);
    }
    if a.json {
        out::json(&json!(rows), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let width = rows.iter().filter_map(|r| r["name"].as_str()).map(str::len).max().unwrap_or(4).max(4);
    out::data(&format!("{:width$}  {:7}  {:6}  {:11}  LOCATION", "NAME", "VERSION", "FORMAT", "TIER"))?;
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
        let from = match (r["source"].as_str(), r["update"].as_str()) {
            (Some(src), Some(v)) => format!(" (from {src}; {v} available)"),
            (Some(src), None) => format!(" (from {src})"),
            _ => String::new(),
        };
        if r["valid"] == json!(true) {
            out::data(&format!(
                "{:width$}  {:7}  {:6}  {:11}  {}{from}",
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
