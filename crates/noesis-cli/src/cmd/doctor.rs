//! `noesis doctor`: which providers are configured, which one a run would
//! use and why, and whether each configured endpoint answers. Keys are
//! never printed: only the name of the variable and whether it is set.

use std::process::ExitCode;
use std::time::Duration;

use noesis_llm::{PRESETS, Wire};
use serde_json::{Value, json};

use crate::config;
use crate::out;
use crate::provider::env;
use crate::provider::{ProviderArgs, choose, endpoint};

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
    let cfg = &loaded.config;
    let (selected, selected_model, source) = choose(&a.provider, cfg, None, &env);
    let mut names: Vec<String> = PRESETS.iter().map(|p| p.name.to_owned()).collect();
    names.extend(cfg.providers.keys().filter(|k| noesis_llm::preset(k).is_none() && *k != "local").cloned());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let timeout = Duration::from_secs(a.probe_timeout.max(1));
    let mut rows = Vec::new();
    let mut selected_ok = true;
    for name in &names {
        let model = if *name == selected { selected_model.clone() } else { None };
        let (wire, ep) = match endpoint(name, model, &a.provider, cfg, &env) {
            Ok(x) => x,
            Err(e) => {
                rows.push(json!({"provider": name, "configured": true, "error": format!("{e:#}")}));
                if *name == selected {
                    selected_ok = false;
                }
                continue;
            }
        };
        let preset = noesis_llm::preset(name);
        let key_var = cfg
            .providers
            .get(name)
            .and_then(|e| e.api_key_env.clone())
            .or_else(|| preset.and_then(|p| p.key_var).map(str::to_owned));
        let key_set = ep.api_key.is_some();
        // Keyless servers count as configured once their address is given;
        // so does every provider the config sends runs to.
        let configured = key_set
            || *name == selected
            || cfg.providers.contains_key(name)
            || cfg.fallback.contains(name)
            || cfg.routes.iter().any(|r| r.provider == *name)
            || preset.is_some_and(|p| p.key_var.is_none() && env(p.base_url_var).is_some())
            || (wire == Wire::Ollama && env("OLLAMA_HOST").is_some());
        let mut row = json!({
            "provider": name,
            "wire": wire.as_str(),
            "model": ep.model,
            "base_url": noesis_llm::redact_url(&ep.base_url),
            "key_variable": key_var,
            "key_set": key_set,
            "configured": configured,
            "selected": *name == selected,
        });
        if configured && !a.no_probe {
            let p = rt.block_on(noesis_llm::probe(wire, &ep, timeout));
            if *name == selected && !p.ok() {
                selected_ok = false;
            }
            row["probe"] = serde_json::to_value(&p)?;
        }
        rows.push(row);
    }
    if let Some(row) = crate::local::doctor_row(&a.provider, cfg, &env, selected == "local") {
        selected_ok &= !(selected == "local" && row.get("problem").is_some());
        rows.push(row);
    }
    // Nothing configured: the test model is not a choice anyone made.
    let unconfigured = source == crate::provider::Source::Default && selected != "local";
    let selected_json = if unconfigured {
        selected_ok = false;
        json!({"provider": null, "because": crate::provider::NO_PROVIDER})
    } else {
        json!({"provider": selected, "because": source.describe()})
    };
    let report = json!({
        "config_files": loaded.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "selected": selected_json,
        "fallback": cfg.fallback,
        "routes": cfg.routes.len(),
        "providers": rows,
    });
    if a.json {
        out::json(&report, true)?;
    } else {
        print_table(&report)?;
    }
    Ok(if selected_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
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
