//! `noesis doctor`: which providers are configured, which one a run would
//! use and why, and whether each configured endpoint answers
//! (`noesis_host::doctor` finds out; this prints the table). Keys are
//! never printed: only the name of the variable and whether it is set.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config;
use crate::out;
use crate::provider::{ProviderArgs, env};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Do not contact any endpoint.
    #[arg(long)]
    no_probe: bool,
    /// Seconds to wait for each endpoint.
    #[arg(long, value_name = "SECS", default_value_t = 3)]
    probe_timeout: u64,
    #[command(flatten)]
    provider: ProviderArgs,
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let loaded = config::load(&env, &std::env::current_dir()?)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let probe = (!a.no_probe).then(|| Duration::from_secs(a.probe_timeout.max(1)));
    let report = rt.block_on(noesis_host::doctor::check(&a.provider, &loaded, &env, probe));
    if a.json {
        out::json(&report.json, true)?;
    } else {
        print_table(&report.json)?;
    }
    Ok(if report.selected_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_table(report: &Value) -> anyhow::Result<()> {
    let files: Vec<&str> = report["config_files"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    out::data(&format!("config: {}", if files.is_empty() { "none".to_owned() } else { files.join(", ") }))?;
    out::data(&format!(
        "selected: {} ({})",
        report["selected"]["provider"].as_str().unwrap_or("-"),
        report["selected"]["because"].as_str().unwrap_or("-")
    ))?;
    if let Some(f) = report["fallback"].as_array().filter(|f| !f.is_empty()) {
        let names: Vec<&str> = f.iter().filter_map(Value::as_str).collect();
        out::data(&format!("fallback: {}", names.join(" → ")))?;
    }
    out::data(&format!("{:2}{:11} {:10} {:22} {:28} STATUS", "", "PROVIDER", "WIRE", "MODEL", "KEY"))?;
    for r in report["providers"].as_array().into_iter().flatten() {
        let s = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
        let mark = if r["selected"] == json!(true) { "* " } else { "  " };
        if let Some(e) = r["error"].as_str() {
            out::data(&format!("{mark}{:11} error: {e}", s("provider")))?;
            continue;
        }
        if r["wire"] == "gguf" {
            let status = r["problem"].as_str().unwrap_or("installed");
            let (name, wire, model, path) = (s("provider"), s("wire"), s("model"), s("model_path"));
            out::data(&format!("{mark}{name:11} {wire:10} {model:22} {:28} {status} {path}", "no key needed"))?;
            continue;
        }
        let key = match r["key_variable"].as_str() {
            Some(v) => format!("{v} {}", if r["key_set"] == json!(true) { "set" } else { "unset" }),
            None => "no key needed".to_owned(),
        };
        let status = match r.get("probe") {
            Some(p) if p["problem"].is_null() => {
                format!("reachable (HTTP {}, {} ms) {}", p["status"], p["latency_ms"], s("base_url"))
            }
            Some(p) => format!("{} {}", p["problem"].as_str().unwrap_or("failed"), s("base_url")),
            None if r["configured"] == json!(true) => format!("not probed {}", s("base_url")),
            None => "not configured".to_owned(),
        };
        out::data(&format!("{mark}{:11} {:10} {:22} {:28} {status}", s("provider"), s("wire"), s("model"), key))?;
    }
    Ok(())
}
