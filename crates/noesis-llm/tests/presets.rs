//! The preset table and how a preset turns into a configuration.

use std::collections::HashMap;

use noesis_llm::{PRESETS, preset, resolve};

fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |name| map.get(name).cloned()
}

#[test]
fn table_matches_the_documented_endpoints() {
    let got: Vec<_> =
        PRESETS.iter().map(|p| (p.name, p.base_url, p.key_var, p.base_url_var, p.default_model)).collect();
    assert_eq!(
        got,
        [
            ("openai", "https://api.openai.com/v1", Some("OPENAI_API_KEY"), "OPENAI_BASE_URL", "gpt-4o-mini"),
            (
                "anthropic",
                "https://api.anthropic.com",
                Some("ANTHROPIC_API_KEY"),
                "ANTHROPIC_BASE_URL",
                "claude-sonnet-4-5"
            ),
            (
                "gemini",
                "https://generativelanguage.googleapis.com/v1beta",
                Some("GEMINI_API_KEY"),
                "GEMINI_BASE_URL",
                "gemini-2.5-flash"
            ),
            ("deepseek", "https://api.deepseek.com/v1", Some("DEEPSEEK_API_KEY"), "DEEPSEEK_BASE_URL", "deepseek-chat"),
            (
                "qwen",
                "https://dashscope.aliyuncs.com/compatible-mode/v1",
                Some("DASHSCOPE_API_KEY"),
                "DASHSCOPE_BASE_URL",
                "qwen-plus"
            ),
            ("moonshot", "https://api.moonshot.cn/v1", Some("MOONSHOT_API_KEY"), "MOONSHOT_BASE_URL", "moonshot-v1-8k"),
            ("minimax", "https://api.minimax.chat/v1", Some("MINIMAX_API_KEY"), "MINIMAX_BASE_URL", "abab6.5s-chat"),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                Some("OPENROUTER_API_KEY"),
                "OPENROUTER_BASE_URL",
                "openai/gpt-4o-mini"
            ),
            ("vllm", "http://127.0.0.1:8000/v1", Some("VLLM_API_KEY"), "VLLM_BASE_URL", "default"),
            ("lmstudio", "http://127.0.0.1:1234/v1", None, "LMSTUDIO_BASE_URL", "local-model"),
            ("ollama", "http://127.0.0.1:11434", None, "OLLAMA_HOST", "llama3.2"),
        ]
    );
}

#[test]
fn every_preset_is_found_by_name() {
    for p in PRESETS {
        assert_eq!(preset(p.name).map(|q| q.name), Some(p.name));
    }
    assert!(preset("test").is_none());
    assert!(preset("scripted").is_none());
    assert!(preset("").is_none());
}

#[test]
fn defaults_come_from_the_table() {
    for p in PRESETS {
        let cfg = resolve(p, &env_of(&[]), None);
        assert_eq!(cfg.name, p.name);
        assert_eq!(cfg.base_url, p.base_url);
        assert_eq!(cfg.model, p.default_model);
        assert_eq!(cfg.api_key, None, "{}", p.name);
        assert_eq!(cfg.http.max_concurrency, 64);
    }
}

#[test]
fn env_overrides_base_url_and_sets_key() {
    let env = env_of(&[("DEEPSEEK_API_KEY", "sk-ds"), ("DEEPSEEK_BASE_URL", "http://127.0.0.1:9/v1")]);
    let cfg = resolve(preset("deepseek").unwrap(), &env, None);
    assert_eq!(cfg.base_url, "http://127.0.0.1:9/v1");
    assert_eq!(cfg.api_key.as_deref(), Some("sk-ds"));
    assert_eq!(format!("{}/{}", cfg.name, cfg.model), "deepseek/deepseek-chat");
}

#[test]
fn other_presets_variables_are_ignored() {
    let env = env_of(&[("OPENAI_API_KEY", "sk-oa"), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]);
    let cfg = resolve(preset("moonshot").unwrap(), &env, None);
    assert_eq!(cfg.base_url, "https://api.moonshot.cn/v1");
    assert_eq!(cfg.api_key, None);
}

#[test]
fn model_override_wins_over_default() {
    let cfg = resolve(preset("qwen").unwrap(), &env_of(&[]), Some("qwen-max".to_owned()));
    assert_eq!(cfg.model, "qwen-max");
    let cfg = resolve(preset("qwen").unwrap(), &env_of(&[]), Some("  ".to_owned()));
    assert_eq!(cfg.model, "qwen-plus");
}

#[test]
fn blank_variables_count_as_unset() {
    let env = env_of(&[("OPENROUTER_API_KEY", ""), ("OPENROUTER_BASE_URL", "  \n")]);
    let cfg = resolve(preset("openrouter").unwrap(), &env, None);
    assert_eq!(cfg.api_key, None);
    assert_eq!(cfg.base_url, "https://openrouter.ai/api/v1");
}

#[test]
fn preset_without_key_var_never_sets_a_key() {
    // Every variable answers, so nothing the resolver might ask for is missing.
    let anything = |_: &str| Some("sk-leak".to_owned());
    let cfg = resolve(preset("lmstudio").unwrap(), &anything, None);
    assert_eq!(cfg.api_key, None);
    assert_eq!(cfg.base_url, "sk-leak", "LMSTUDIO_BASE_URL is still honoured");
}

#[test]
fn debug_output_hides_the_key() {
    let env = env_of(&[("MINIMAX_API_KEY", "sk-secret-minimax")]);
    let cfg = resolve(preset("minimax").unwrap(), &env, None);
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("sk-secret-minimax"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn ollama_reads_its_own_host_and_model_variables() {
    let env = env_of(&[("OLLAMA_HOST", "0.0.0.0:9999"), ("OLLAMA_MODEL", "qwen3:0.6b")]);
    let cfg = resolve(preset("ollama").unwrap(), &env, None);
    assert_eq!(cfg.base_url, "http://127.0.0.1:9999");
    assert_eq!(cfg.model, "qwen3:0.6b");
    // An explicit model still wins over OLLAMA_MODEL.
    let cfg = resolve(preset("ollama").unwrap(), &env, Some("llama3.2".into()));
    assert_eq!(cfg.model, "llama3.2");
}

#[test]
fn every_wire_format_is_represented() {
    use noesis_llm::Wire;
    for w in [Wire::OpenAi, Wire::Anthropic, Wire::Gemini, Wire::Ollama] {
        assert!(PRESETS.iter().any(|p| p.wire == w), "{w:?}");
    }
}
