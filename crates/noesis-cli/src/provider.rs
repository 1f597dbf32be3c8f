//! Choosing a provider from flags and the environment.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use noesis_llm::{OpenAiCompatible, PRESETS, Provider, Scripted, TestModel};

/// Flags shared by every command that calls a model.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProviderArgs {
    /// Provider: openai, deepseek, qwen, moonshot, minimax, openrouter, vllm,
    /// lmstudio, test, scripted [env: LLM_PROVIDER]. Default: the first of
    /// those whose API key variable is set (OPENAI_API_KEY, DEEPSEEK_API_KEY,
    /// DASHSCOPE_API_KEY, …), else openai when OPENAI_BASE_URL is set, else
    /// the test model.
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
    /// Most HTTP requests in flight at once to the provider, across every run
    /// in this process. 0 means no limit.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_concurrency: usize,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub(crate) fn select(args: &ProviderArgs) -> anyhow::Result<Arc<dyn Provider>> {
    let explicit = args.provider.clone().or_else(|| env("LLM_PROVIDER"));
    let name = match explicit {
        Some(p) => p,
        None => match detect(&env) {
            Some(name) => name.to_owned(),
            None => {
                crate::out::note(
                    "note: no provider configured (set LLM_PROVIDER or a provider key such as OPENAI_API_KEY); using the schema-driven test model",
                );
                "test".to_owned()
            }
        },
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
        other => {
            let Some(preset) = noesis_llm::preset(other) else {
                bail!("unknown provider `{other}` (known: {})", known_names());
            };
            let mut cfg = noesis_llm::resolve(preset, &env, model);
            cfg.http.timeout = Duration::from_secs(args.timeout.max(1));
            cfg.http.retry.max_retries = args.retries;
            cfg.http.max_concurrency = args.max_concurrency;
            Arc::new(OpenAiCompatible::new(cfg).with_context(|| format!("cannot set up the {other} provider"))?)
        }
    })
}

/// The provider to use when none is named, if the environment points at one.
fn detect(env: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|p| p.key_var.is_some_and(|v| env(v).is_some()))
        .map(|p| p.name)
        // A base URL alone means a local or proxied OpenAI-style server that
        // needs no key; only OPENAI_BASE_URL is taken that way, as before.
        .or_else(|| env("OPENAI_BASE_URL").map(|_| "openai"))
}

fn known_names() -> String {
    let mut names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    names.extend(["test", "scripted"]);
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned()).filter(|v| !v.trim().is_empty())
    }

    #[test]
    fn detect_prefers_table_order() {
        assert_eq!(detect(&env_of(&[])), None);
        assert_eq!(detect(&env_of(&[("MOONSHOT_API_KEY", "k"), ("DEEPSEEK_API_KEY", "k")])), Some("deepseek"));
        assert_eq!(detect(&env_of(&[("DEEPSEEK_API_KEY", "k"), ("OPENAI_API_KEY", "k")])), Some("openai"));
        assert_eq!(detect(&env_of(&[("VLLM_API_KEY", "k")])), Some("vllm"));
    }

    #[test]
    fn detect_falls_back_to_openai_base_url_only() {
        assert_eq!(detect(&env_of(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")])), Some("openai"));
        assert_eq!(detect(&env_of(&[("DEEPSEEK_BASE_URL", "http://127.0.0.1:1/v1")])), None);
        assert_eq!(detect(&env_of(&[("LMSTUDIO_BASE_URL", "http://127.0.0.1:1/v1")])), None);
        // A blank key is no key.
        assert_eq!(detect(&env_of(&[("DEEPSEEK_API_KEY", " ")])), None);
    }

    #[test]
    fn known_names_lists_presets_and_builtins() {
        let names = known_names();
        assert!(names.starts_with("openai, deepseek, "), "{names}");
        assert!(names.ends_with("lmstudio, test, scripted"), "{names}");
    }
}
