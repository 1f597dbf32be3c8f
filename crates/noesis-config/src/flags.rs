//! The flags every command that calls a model takes, and the environment
//! as the provider choice reads it.

use std::path::PathBuf;

/// Flags shared by every command that calls a model.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ProviderArgs {
    /// Provider: openai, anthropic, gemini, deepseek, qwen, moonshot, minimax,
    /// openrouter, vllm, lmstudio, ollama, a name defined in noesis.toml,
    /// local, test, scripted [env: LLM_PROVIDER]. Default: a routing rule or
    /// `provider` from noesis.toml, else the first provider whose API key
    /// variable is set (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, …),
    /// else openai when OPENAI_BASE_URL is set, ollama when OLLAMA_HOST is
    /// set, else the local model when it is installed; else nothing runs
    /// (`test` is the schema-driven test model, only when named).
    #[cfg_attr(feature = "clap", arg(long, value_name = "P"))]
    pub provider: Option<String>,
    /// GGUF model file for --provider local [default: $NOESIS_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf].
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub model_path: Option<PathBuf>,
    /// Model name [env: LLM_MODEL].
    #[cfg_attr(feature = "clap", arg(long, value_name = "M"))]
    pub model: Option<String>,
    /// Script file for --provider scripted (a JSON array of replies, or one reply).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub script: Option<PathBuf>,
    /// Whole-call timeout in seconds for HTTP providers [default: 120].
    #[cfg_attr(feature = "clap", arg(long, value_name = "SECS"))]
    pub timeout: Option<u64>,
    /// Retries of transient HTTP failures (429, 5xx, dropped connections),
    /// with exponential backoff that honours Retry-After; 0 disables them [default: 2].
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub retries: Option<u32>,
    /// Most HTTP requests in flight at once to a provider, across every run
    /// in this process; 0 means no limit [default: 64].
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub max_concurrency: Option<usize>,
    /// Providers to try, in order, when the chosen one fails (comma list).
    #[cfg_attr(feature = "clap", arg(long, value_name = "P,P", value_delimiter = ','))]
    pub fallback: Vec<String>,
    /// Record every provider request and answer into DIR.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR", conflicts_with = "replay"))]
    pub record: Option<PathBuf>,
    /// Answer from recordings in DIR; a request with no recording fails.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub replay: Option<PathBuf>,
    /// Stop a run that would use more tokens (input + output) than this.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub max_total_tokens: Option<u64>,
    /// Stop a run that has cost more US dollars than this.
    // Negative numbers reach the range check, which says what is wrong.
    #[cfg_attr(feature = "clap", arg(long, value_name = "USD", allow_negative_numbers = true))]
    pub max_cost: Option<f64>,
}

/// An environment variable that is set and not blank (a blank key is no key).
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
