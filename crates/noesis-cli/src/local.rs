//! The embedded local model's glue: which GGUF file, whether it is
//! installed, and the provider itself (with the `local` feature).

use std::path::PathBuf;
use std::sync::Arc;

use noesis_llm::Provider;
use serde_json::{Value, json};

use crate::config::Config;
use crate::provider::ProviderArgs;

/// The default model's file name under `$NOESIS_HOME/models`.
const DEFAULT_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    crate::memory::home_from(env)
}

/// The model file a local run uses: `--model-path`, else
/// `[providers.local] model_path`, else the installed default model.
pub(crate) fn model_path(
    args: &ProviderArgs,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    args.model_path
        .clone()
        .or_else(|| config.providers.get("local").and_then(|e| e.model_path.clone()))
        .or_else(|| home(env).map(|h| h.join("models").join(DEFAULT_FILE)))
}

/// Whether a run with no provider configured can use the local model: the
/// binary has it and its file is there.
pub(crate) fn available(args: &ProviderArgs, config: &Config, env: &dyn Fn(&str) -> Option<String>) -> bool {
    cfg!(feature = "local") && model_path(args, config, env).is_some_and(|p| p.is_file())
}

/// Threads for the local model: `NOESIS_LOCAL_THREADS`, default 2.
fn threads(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<u32> {
    match env("NOESIS_LOCAL_THREADS") {
        None => Ok(2),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => anyhow::bail!("NOESIS_LOCAL_THREADS must be a positive number of threads, got `{v}`"),
        },
    }
}

/// The local provider.
pub(crate) fn connect(
    args: &ProviderArgs,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Arc<dyn Provider>> {
    let Some(path) = model_path(args, config, env) else {
        anyhow::bail!("no model file for the local provider: pass --model-path FILE.gguf or set NOESIS_HOME/HOME");
    };
    let threads = threads(env)?;
    #[cfg(feature = "local")]
    {
        let mut cfg = noesis_local::LocalConfig::new(path);
        cfg.engine.threads = threads;
        Ok(Arc::new(noesis_local::LocalModel::new(cfg)))
    }
    #[cfg(not(feature = "local"))]
    {
        let _ = (path, threads);
        anyhow::bail!("this noesis was built without the `local` feature (cargo build -p noesis-cli --features local)")
    }
}

/// Says on stderr when the local model cannot enforce a module's schema
/// (the run then generates unconstrained text, repaired and re-asked).
pub(crate) fn note_schema(provider: &dyn Provider, schema: &Value) {
    #[cfg(feature = "local")]
    if provider.name() == noesis_local::NAME
        && let Err(e) = noesis_local::check_schema(schema)
    {
        crate::out::note(&format!(
            "note: the local model cannot enforce this module's schema ({e}); generating without a grammar, then repair and re-ask"
        ));
    }
    #[cfg(not(feature = "local"))]
    let _ = (provider, schema);
}

/// `doctor`'s row for the local model: shown when it is installed,
/// selected or configured.
pub(crate) fn doctor_row(
    args: &ProviderArgs,
    config: &Config,
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
