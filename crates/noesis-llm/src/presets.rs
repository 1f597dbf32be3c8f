//! Named OpenAI-compatible endpoints: where they live, which variables
//! configure them and which model to ask for when none is named.

use crate::http::EndpointConfig;

/// One OpenAI-compatible endpoint known by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name used with `--provider` and shown in `meta.model`.
    pub name: &'static str,
    /// Base URL up to and including the version.
    pub base_url: &'static str,
    /// Variable holding the API key; `None` for servers that take none.
    pub key_var: Option<&'static str>,
    /// Variable that overrides [`Preset::base_url`].
    pub base_url_var: &'static str,
    /// The model used when none is named.
    pub default_model: &'static str,
}

/// Every preset. Order matters: auto-detection picks the first whose key
/// variable is set, so `openai` stays first to keep its long-standing priority.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        key_var: Some("OPENAI_API_KEY"),
        base_url_var: "OPENAI_BASE_URL",
        default_model: "gpt-4o-mini",
    },
    Preset {
        name: "deepseek",
        base_url: "https://api.deepseek.com/v1",
        key_var: Some("DEEPSEEK_API_KEY"),
        base_url_var: "DEEPSEEK_BASE_URL",
        default_model: "deepseek-chat",
    },
    Preset {
        name: "qwen",
        base_url: "https://dashscope.aliyuncs.com/compatible-mode/v1",
        key_var: Some("DASHSCOPE_API_KEY"),
        base_url_var: "DASHSCOPE_BASE_URL",
        default_model: "qwen-plus",
    },
    Preset {
        name: "moonshot",
        base_url: "https://api.moonshot.cn/v1",
        key_var: Some("MOONSHOT_API_KEY"),
        base_url_var: "MOONSHOT_BASE_URL",
        default_model: "moonshot-v1-8k",
    },
    Preset {
        name: "minimax",
        base_url: "https://api.minimax.chat/v1",
        key_var: Some("MINIMAX_API_KEY"),
        base_url_var: "MINIMAX_BASE_URL",
        default_model: "abab6.5s-chat",
    },
    Preset {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        key_var: Some("OPENROUTER_API_KEY"),
        base_url_var: "OPENROUTER_BASE_URL",
        default_model: "openai/gpt-4o-mini",
    },
    Preset {
        name: "vllm",
        base_url: "http://127.0.0.1:8000/v1",
        // vLLM only checks a key when started with `--api-key`.
        key_var: Some("VLLM_API_KEY"),
        base_url_var: "VLLM_BASE_URL",
        default_model: "default",
    },
    Preset {
        name: "lmstudio",
        base_url: "http://127.0.0.1:1234/v1",
        key_var: None,
        base_url_var: "LMSTUDIO_BASE_URL",
        default_model: "local-model",
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
    let base_url = lookup(preset.base_url_var).unwrap_or_else(|| preset.base_url.to_owned());
    let model = model.unwrap_or_else(|| preset.default_model.to_owned());
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
