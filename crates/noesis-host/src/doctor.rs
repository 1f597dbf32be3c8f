//! What `noesis doctor` finds, as data: which providers are configured,
//! which one a run would use and why, and whether each configured endpoint
//! answers. Keys are never in it: only the name of the variable and
//! whether it is set.

use std::time::Duration;

use noesis_config::{Loaded, ProviderArgs};
use noesis_llm::{PRESETS, Wire};
use serde_json::{Value, json};

use crate::local::model_path;
use crate::provider::{NO_PROVIDER, Source, choose, endpoint};

/// The report, and whether the provider a run would use is usable.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `config_files`, `selected` (`provider`, `because`), `fallback`,
    /// `routes` and a row per provider.
    pub json: Value,
    /// The selected provider is configured, set up and (when probed)
    /// answers.
    pub selected_ok: bool,
}

/// Checks every provider `flags` and `loaded` know of; each configured
/// endpoint is contacted unless `probe` is `None` (else it is how long to
/// wait for each).
pub async fn check(
    flags: &ProviderArgs,
    loaded: &Loaded,
    env: &dyn Fn(&str) -> Option<String>,
    probe: Option<Duration>,
) -> Report {
    let cfg = &loaded.config;
    let (selected, selected_model, source) = choose(flags, cfg, None, env);
    let mut names: Vec<String> = PRESETS.iter().map(|p| p.name.to_owned()).collect();
    names.extend(cfg.providers.keys().filter(|k| noesis_llm::preset(k).is_none() && *k != "local").cloned());
    let mut rows = Vec::new();
    let mut selected_ok = true;
    for name in &names {
        let model = if *name == selected { selected_model.clone() } else { None };
        let (wire, ep) = match endpoint(name, model, flags, cfg, env) {
            Ok(x) => x,
            Err(e) => {
                rows.push(json!({"provider": name, "configured": true, "error": e.to_string()}));
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
        if configured && let Some(timeout) = probe {
            let p = noesis_llm::probe(wire, &ep, timeout).await;
            if *name == selected && !p.ok() {
                selected_ok = false;
            }
            row["probe"] = serde_json::to_value(&p).unwrap_or(Value::Null);
        }
        rows.push(row);
    }
    if let Some(row) = local_row(flags, cfg, env, selected == "local") {
        selected_ok &= !(selected == "local" && row.get("problem").is_some());
        rows.push(row);
    }
    // Nothing configured: the test model is not a choice anyone made.
    let unconfigured = source == Source::Default && selected != "local";
    let selected_json = if unconfigured {
        selected_ok = false;
        json!({"provider": null, "because": NO_PROVIDER})
    } else {
        json!({"provider": selected, "because": source.describe()})
    };
    let json = json!({
        "config_files": loaded.files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "selected": selected_json,
        "fallback": cfg.fallback,
        "routes": cfg.routes.len(),
        "providers": rows,
    });
    Report { json, selected_ok }
}

/// The local model's row: shown when it is installed, selected or
/// configured.
fn local_row(
    args: &ProviderArgs,
    config: &noesis_config::Config,
    env: &dyn Fn(&str) -> Option<String>,
    selected: bool,
) -> Option<Value> {
    let path = model_path(args, config, env);
    let installed = path.as_ref().is_some_and(|p| p.is_file());
    let configured = config.providers.contains_key("local") || config.fallback.iter().any(|f| f == "local");
    if !(installed || selected || configured) {
        return None;
    }
    let mut row = json!({
        "provider": "local",
        "wire": "gguf",
        "model": path.as_ref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned()),
        "model_path": path.as_ref().map(|p| p.display().to_string()),
        "key_variable": null,
        "key_set": false,
        "configured": installed || selected,
        "selected": selected,
        "built_in": cfg!(feature = "local"),
    });
    if !cfg!(feature = "local") {
        row["problem"] = json!("this noesis was built without the `local` feature");
    } else if !installed {
        row["problem"] = json!("model file not found (run `noesis model install`)");
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_nothing_configured_no_provider_is_selected_and_nothing_is_probed() {
        let env = |_: &str| None;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(check(&ProviderArgs::default(), &Loaded::default(), &env, Some(Duration::from_millis(1))));
        assert!(!r.selected_ok);
        assert_eq!(r.json["selected"], json!({"provider": null, "because": NO_PROVIDER}));
        let rows = r.json["providers"].as_array().unwrap();
        assert!(rows.iter().all(|row| row["probe"].is_null()), "{rows:?}");
        assert!(rows.iter().all(|row| row["provider"] != "local"), "no local row without a home: {rows:?}");
    }

    #[test]
    fn a_key_in_the_environment_configures_its_provider_and_is_never_shown() {
        let env = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-secret".to_owned());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(check(&ProviderArgs::default(), &Loaded::default(), &env, None));
        let openai = r.json["providers"].as_array().unwrap().iter().find(|row| row["provider"] == "openai").unwrap();
        assert_eq!((openai["key_set"].as_bool(), openai["configured"].as_bool()), (Some(true), Some(true)));
        assert!(!r.json.to_string().contains("sk-secret"));
    }

    #[test]
    fn the_local_row_says_what_is_missing() {
        let env = |_: &str| None;
        let flags = ProviderArgs { model_path: Some("/no/such.gguf".into()), ..ProviderArgs::default() };
        let row = local_row(&flags, &noesis_config::Config::default(), &env, true).unwrap();
        assert_eq!(row["model"], "such");
        assert!(row["problem"].is_string());
        assert!(local_row(&flags, &noesis_config::Config::default(), &env, false).is_none());
    }
}
