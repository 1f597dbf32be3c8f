//! The embedded local model: which GGUF file a local run uses, whether it
//! is installed, and the provider itself (with the `local` feature).

use std::path::PathBuf;
use std::sync::Arc;

use noesis_config::{Config, ProviderArgs};
use noesis_llm::Provider;

use crate::{Result, bail};

/// The default model's file name under `$NOESIS_HOME/models`.
pub const DEFAULT_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The model file a local run uses: `--model-path`, else
/// `[providers.local] model_path`, else the installed default model.
pub fn model_path(args: &ProviderArgs, config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    args.model_path
        .clone()
        .or_else(|| config.providers.get("local").and_then(|e| e.model_path.clone()))
        .or_else(|| noesis_config::home_from(env).map(|h| h.join("models").join(DEFAULT_FILE)))
}

/// Whether a run with no provider configured can use the local model: this
/// build has it and its file is there.
pub fn available(args: &ProviderArgs, config: &Config, env: &dyn Fn(&str) -> Option<String>) -> bool {
    cfg!(feature = "local") && model_path(args, config, env).is_some_and(|p| p.is_file())
}

/// Threads for the local model: `NOESIS_LOCAL_THREADS`, default 2.
fn threads(env: &dyn Fn(&str) -> Option<String>) -> Result<u32> {
    match env("NOESIS_LOCAL_THREADS") {
        None => Ok(2),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("NOESIS_LOCAL_THREADS must be a positive number of threads, got `{v}`"),
        },
    }
}

/// The local provider.
pub fn connect(
    args: &ProviderArgs,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>> {
    let Some(path) = model_path(args, config, env) else {
        bail!("no model file for the local provider: pass --model-path FILE.gguf or set NOESIS_HOME/HOME");
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
        bail!("this noesis was built without the `local` feature (cargo build -p noesis-cli --features local)")
    }
}
