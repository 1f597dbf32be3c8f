//! Choosing a provider from flags and the environment.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use noesis_llm::{OpenAiCompatible, OpenAiConfig, Provider, Scripted, TestModel};

/// Flags shared by every command that calls a model.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProviderArgs {
    /// Provider: openai, test, scripted [env: LLM_PROVIDER]. Default: openai
    /// when OPENAI_API_KEY or OPENAI_BASE_URL is set, else the test model.
    #[arg(long, value_name = "P")]
    pub provider: Option<String>,
    /// Model name [env: LLM_MODEL].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Script file for --provider scripted (a JSON array of replies, or one reply).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Whole-call timeout in seconds for HTTP providers.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    /// Retries of transient HTTP failures (429, 5xx, dropped connections),
    /// with exponential backoff that honours Retry-After. 0 disables them.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub retries: u32,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub(crate) fn select(args: &ProviderArgs) -> anyhow::Result<Arc<dyn Provider>> {
    let explicit = args.provider.clone().or_else(|| env("LLM_PROVIDER"));
    let name = match explicit {
        Some(p) => p,
        None if env("OPENAI_API_KEY").is_some() || env("OPENAI_BASE_URL").is_some() => "openai".to_owned(),
        None => {
            crate::out::note(
                "note: no provider configured (LLM_PROVIDER, OPENAI_API_KEY); using the schema-driven test model",
            );
            "test".to_owned()
        }
    };
    let model = args.model.clone().or_else(|| env("LLM_MODEL"));
    Ok(match name.as_str() {
        "test" => Arc::new(TestModel),
        "scripted" => {
            let Some(path) = &args.script else {
                bail!("--provider scripted needs --script FILE");
            };
            Arc::new(Scripted::from_file(path)?)
        }
        "openai" => {
            let mut cfg = OpenAiConfig::openai(model.unwrap_or_else(|| "gpt-4o-mini".to_owned()));
            if let Some(base) = env("OPENAI_BASE_URL") {
                cfg.base_url = base;
            }
            cfg.api_key = env("OPENAI_API_KEY");
            cfg.timeout = Duration::from_secs(args.timeout.max(1));
            cfg.connect_timeout = cfg.connect_timeout.min(cfg.timeout);
            cfg.retry.max_retries = args.retries;
            Arc::new(OpenAiCompatible::new(cfg).context("cannot set up the openai provider")?)
        }
        other => bail!("unknown provider `{other}` (known: openai, test, scripted)"),
    })
}
