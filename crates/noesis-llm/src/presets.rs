//! Named endpoints: which wire format they speak, where they live, which
//! variables configure them and which model to ask for when none is named.

use std::sync::Arc;

use crate::Provider;
use crate::error::ProviderError;
use crate::http::EndpointConfig;

/// The API dialect an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// OpenAI chat completions (and every compatible server).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini generateContent.
    Gemini,
    /// Ollama's native `/api/chat`.
    Ollama,
}

impl Wire {
    /// Its name in config files (`openai`, `anthropic`, `gemini`, `ollama`).
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Gemini => "gemini",
            Wire::Ollama => "ollama",
        }
    }

    /// The provider for `config`.
    pub fn connect(self, config: EndpointConfig) -> Result<Arc<dyn Provider>, ProviderError> {
        Ok(match self {
            Wire::OpenAi => Arc::new(crate::OpenAiCompatible::new(config)?),
            Wire::Anthropic => Arc::new(crate::Anthropic::new(config)?),
            Wire::Gemini => Arc::new(crate::Gemini::new(config)?),
            Wire::Ollama => Arc::new(crate::Ollama::new(config)?),
        })
    }
}

/// One endpoint known by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name used with `--provider` and shown in `meta.model`.
    pub name: &'static str,
    /// The API dialect.
    pub wire: Wire,
    /// Base URL up to and including the version.
    pub base_url: &'static str,
    /// Variable holding the API key; `None` for servers that take none.
    pub key_var: Option<&'static str>,
    /// Variable that overrides [`Preset::base_url`].
    pub base_url_var: &'static str,
    /// The model used when none is named.
    pub default_model: &'static str,
    /// Variable that names the model for this provider alone (`OLLAMA_MODEL`).
    pub model_var: Option<&'static str>,
}

/// Every preset. Order matters: auto-detection picks the first whose key
/// variable is set, so `openai` stays first to keep its long-standing priority.
pub const PRESETS: &[Preset] = &[
    Preset {
        wire: Wire::OpenAi,
        name: "openai",
        base_url: "https://api.openai.com/v1",
        key_var: Some("OPENAI_API_KEY"),
        base_url_var: "OPENAI_BASE_URL",
        default_model: "gpt-4o-mini",
        model_var: None,
    },
    Preset {
        wire: Wire::Anthropic,
        name: "anthropic",
        base_url: "https://api.anthropic.com",
        key_var: Some("ANTHROPIC_API_KEY"),
        base_url_var: "ANTHROPIC_BASE_URL",
        default_model: "claude-sonnet-4-5",
        model_var: None,
    },
    Preset {
        wire: Wire::Gemini,
        name: "gemini",
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        key_var: Some("GEMINI_API_KEY"),
        base_url_var: "GEMINI_BASE_URL",
        default_model: "gemini-2.5-flash",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "deepseek",
        base_url: "https://api.deepseek.com/v1",
        key_var: Some("DEEPSEEK_API_KEY"),
        base_url_var: "DEEPSEEK_BASE_URL",
        default_model: "deepseek-chat",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "qwen",
        base_url: "https://dashscope.aliyuncs.com/compatible-mode/v1",
        key_var: Some("DASHSCOPE_API_KEY"),
        base_url_var: "DASHSCOPE_BASE_URL",
        default_model: "qwen-plus",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "moonshot",
        base_url: "https://api.moonshot.cn/v1",
        key_var: Some("MOONSHOT_API_KEY"),
        base_url_var: "MOONSHOT_BASE_URL",
        default_model: "moonshot-v1-8k",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "minimax",
        base_url: "https://api.minimax.chat/v1",
        key_var: Some("MINIMAX_API_KEY"),
        base_url_var: "MINIMAX_BASE_URL",
        default_model: "abab6.5s-chat",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        key_var: Some("OPENROUTER_API_KEY"),
        base_url_var: "OPENROUTER_BASE_URL",
        default_model: "openai/gpt-4o-mini",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "vllm",
        base_url: "http://127.0.0.1:8000/v1",
        // vLLM only checks a key when started with `--api-key`.
        key_var: Some("VLLM_API_KEY"),
        base_url_var: "VLLM_BASE_URL",
        default_model: "default",
        model_var: None,
    },
    Preset {
        wire: Wire::OpenAi,
        name: "lmstudio",
        base_url: "http://127.0.0.1:1234/v1",
        key_var: None,
        base_url_var: "LMSTUDIO_BASE_URL",
        default_model: "local-model",
        model_var: None,
    },
    Preset {
        wire: Wire::Ollama,
        name: "ollama",
        base_url: "http://127.0.0.1:11434",
        key_var: None,
        // Ollama's own variable; `host:port` forms are normalised.
        base_url_var: "OLLAMA_HOST",
        default_model: "llama3.2",
        model_var: Some("OLLAMA_MODEL"),
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The configuration for `preset`, reading variables through `env` and
/// using `model` when given.
///
/// `env` is injected so callers (and tests) decide where variables come
/// from; blank values count as unset, as an exported-but-empty variable
/// almost always means "not configured".
pub fn resolve(preset: &Preset, env: &dyn Fn(&str) -> Option<String>, model: Option<String>) -> EndpointConfig {
    let lookup = |var: &str| env(var).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let model = model.map(|m| m.trim().to_owned()).filter(|m| !m.is_empty());
    let mut base_url = lookup(preset.base_url_var).unwrap_or_else(|| preset.base_url.to_owned());
    if preset.wire == Wire::Ollama {
        base_url = crate::ollama::normalize_host(&base_url);
    }
    let model = model.or_else(|| preset.model_var.and_then(lookup)).unwrap_or_else(|| preset.default_model.to_owned());
    let mut cfg = EndpointConfig::new(preset.name, &base_url, &model);
    cfg.api_key = preset.key_var.and_then(lookup);
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn names_are_unique_and_found() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert_eq!(preset(p.name), Some(p));
            assert!(PRESETS[i + 1..].iter().all(|q| q.name != p.name), "duplicate {}", p.name);
        }
        assert_eq!(preset("nope"), None);
        assert_eq!(preset("OpenAI"), None);
    }

    #[test]
    fn openai_comes_first() {
        assert_eq!(PRESETS[0].name, "openai");
    }

    #[test]
    fn resolve_without_env_uses_the_table() {
        let cfg = resolve(preset("qwen").unwrap(), &no_env, None);
        assert_eq!(cfg.name, "qwen");
        assert_eq!(cfg.base_url, "https://dashscope.aliyuncs.com/compatible-mode/v1");
        assert_eq!(cfg.model, "qwen-plus");
        assert_eq!(cfg.api_key, None);
    }

    #[test]
    fn blank_values_count_as_unset() {
        let env = |_: &str| Some("  \t".to_owned());
        let cfg = resolve(preset("moonshot").unwrap(), &env, Some(" ".to_owned()));
        assert_eq!(cfg.base_url, "https://api.moonshot.cn/v1");
        assert_eq!(cfg.api_key, None);
        assert_eq!(cfg.model, "moonshot-v1-8k");
    }
}
