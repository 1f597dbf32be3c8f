//! Choosing a provider from flags, the environment and the config, and
//! the providers a process keeps: one per (provider, model), shared by its
//! runs, limited to an allow-list on a server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_config::{Config, ProviderArgs, env};
use noesis_llm::{
    Budget, BudgetMeter, EndpointConfig, Fallback, PRESETS, Preset, PriceTable, Provider, Recorder, Replayer, Scripted,
    TestModel, Wire,
};
use noesis_modules::Module;
use noesis_runtime::compose::ProviderFor;

use crate::{HostError, Result, bail};

/// Where a choice came from, for `doctor` and notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--provider`.
    Flag,
    /// `LLM_PROVIDER`.
    Env,
    /// The config's routing rule at this index.
    Route(usize),
    /// `provider` in the config.
    Config,
    /// A key (or base URL) found in the environment.
    Detected,
    /// Nothing said: the local model or the test model.
    Default,
}

impl Source {
    /// Where the choice came from, in words.
    pub fn describe(&self) -> String {
        match self {
            Source::Flag => "--provider".into(),
            Source::Env => "LLM_PROVIDER".into(),
            Source::Route(i) => format!("routes[{i}] in the config"),
            Source::Config => "`provider` in the config".into(),
            Source::Detected => "detected from the environment".into(),
            Source::Default => "default".into(),
        }
    }
}

/// The provider name (and model) to use, and why.
pub fn choose(
    args: &ProviderArgs,
    config: &Config,
    module: Option<(&str, Option<&str>)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> (String, Option<String>, Source) {
    let model = args.model.clone().or_else(|| env("LLM_MODEL"));
    if let Some(p) = &args.provider {
        return (p.clone(), model, Source::Flag);
    }
    if let Some(p) = env("LLM_PROVIDER") {
        return (p, model, Source::Env);
    }
    if let Some((name, tier)) = module
        && let Some(r) = noesis_llm::route(&config.routes, name, tier)
    {
        let i = config.routes.iter().position(|x| x == r).unwrap_or(0);
        return (r.provider.clone(), model.or_else(|| r.model.clone()), Source::Route(i));
    }
    if let Some(p) = &config.provider {
        return (p.clone(), model, Source::Config);
    }
    match detect(env) {
        Some(name) => (name.to_owned(), model, Source::Detected),
        None if crate::local::available(args, config, env) => ("local".to_owned(), model, Source::Default),
        None => ("test".to_owned(), model, Source::Default),
    }
}

/// The endpoint settings for `name`: preset table, then config, then
/// environment, then flags.
pub fn endpoint(
    name: &str,
    model: Option<String>,
    args: &ProviderArgs,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Wire, EndpointConfig)> {
    let entry = config.providers.get(name);
    let (wire, mut cfg) = match noesis_llm::preset(name) {
        Some(preset) => {
            let model = model
                .or_else(|| preset.model_var.and_then(env))
                .or_else(|| entry.and_then(|e| e.model.clone()))
                .or_else(|| config.model.clone().filter(|_| config.provider.as_deref() == Some(name)));
            let mut cfg = noesis_llm::resolve(preset, env, model);
            if let Some(url) = entry.and_then(|e| e.base_url.as_ref()) {
                // The preset's variable still wins over the file.
                if env(preset.base_url_var).is_none() {
                    cfg.base_url = url.trim_end_matches('/').to_owned();
                }
            }
            if entry.and_then(|e| e.wire).is_some_and(|w| w != preset.wire) {
                bail!("providers.{name}.wire: `{name}` is a built-in provider that speaks {}", preset.wire.as_str());
            }
            (preset.wire, cfg)
        }
        None => {
            let Some(entry) = entry else {
                bail!("unknown provider `{name}` (known: {})", known_names(config));
            };
            let Some(wire) = entry.wire else {
                bail!(
                    "providers.{name}: a provider that is not built in needs `wire` (openai, anthropic, gemini, ollama)"
                );
            };
            let Some(base_url) = &entry.base_url else {
                bail!("providers.{name}: a provider that is not built in needs `base_url`");
            };
            let Some(model) = model
                .or_else(|| entry.model.clone())
                .or_else(|| config.model.clone().filter(|_| config.provider.as_deref() == Some(name)))
            else {
                bail!("providers.{name}: no model (set `model` there, or pass --model)");
            };
            (wire, EndpointConfig::new(name, base_url, &model))
        }
    };
    if let Some(var) = entry.and_then(|e| e.api_key_env.as_deref()) {
        cfg.api_key = env(var);
    }
    cfg.http.timeout = Duration::from_secs(args.timeout.or(config.timeout).unwrap_or(120).max(1));
    cfg.http.retry.max_retries = args.retries.or(config.retries).unwrap_or(2);
    cfg.http.max_concurrency = args.max_concurrency.or(config.max_concurrency).unwrap_or(64);
    Ok((wire, cfg))
}

fn connect(name: &str, model: Option<String>, args: &ProviderArgs, config: &Config) -> Result<Arc<dyn Provider>> {
    Ok(match name {
        "test" => Arc::new(TestModel),
        "local" => crate::local::connect(args, config, &env)?,
        "scripted" => {
            let Some(path) = &args.script else {
                bail!("--provider scripted needs --script FILE");
            };
            Arc::new(Scripted::from_file(path)?)
        }
        _ => {
            let (wire, cfg) = endpoint(name, model, args, config, &env)?;
            wire.connect(cfg).map_err(|e| HostError::Message(format!("cannot set up the {name} provider: {e}")))?
        }
    })
}

/// Why nothing runs when no provider is configured: the test model makes
/// answers up, so it runs only when asked for by name.
pub const NO_PROVIDER: &str = if cfg!(feature = "local") {
    "no provider configured: set a provider key such as OPENAI_API_KEY (or LLM_PROVIDER, or `provider` in \
     noesis.toml), or run `noesis model install` to run modules offline on the local model; \
     `--provider test` answers with made-up, schema-valid data for trying things out"
} else {
    "no provider configured: set a provider key such as OPENAI_API_KEY (or LLM_PROVIDER, or `provider` in \
     noesis.toml); `--provider test` answers with made-up, schema-valid data for trying things out"
};

/// The provider for a run of `module` (name, tier), wrapped in a fallback
/// chain and a recorder when asked; or a replayer. `note` hears what the
/// person should know (the local model chosen for want of any other).
pub fn select(
    args: &ProviderArgs,
    config: &Config,
    module: Option<(&str, Option<&str>)>,
    note: &dyn Fn(&str),
) -> Result<Arc<dyn Provider>> {
    let (name, model, source) = choose(args, config, module, &env);
    if source == Source::Default && args.replay.is_none() {
        if name != "local" {
            bail!("{NO_PROVIDER}");
        }
        note(
            "note: no provider configured (set LLM_PROVIDER, a provider key such as OPENAI_API_KEY, or `provider` in noesis.toml); using the local model, offline",
        );
    }
    if let Some(dir) = &args.replay {
        // The recording decides the model when none is named.
        let model = match model {
            Some(m) => m,
            None => match name.as_str() {
                "test" => "schema".to_owned(),
                "scripted" => "script".to_owned(),
                "local" => crate::local::model_path(args, config, &env)
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_owned()))
                    .unwrap_or_default(),
                _ => endpoint(&name, None, args, config, &|_| None).map(|(_, c)| c.model).unwrap_or_default(),
            },
        };
        return Ok(Arc::new(Replayer::open(dir, &name, &model)?));
    }
    let primary = connect(&name, model, args, config)?;
    let names = if args.fallback.is_empty() { &config.fallback } else { &args.fallback };
    let mut provider = primary;
    if !names.is_empty() {
        let mut chain = vec![provider];
        for n in names.iter().filter(|n| **n != name) {
            chain.push(
                connect(n, None, args, config)
                    .map_err(|e| HostError::Message(format!("fallback provider `{n}`: {e}")))?,
            );
        }
        provider = Arc::new(Fallback::new(chain).ok_or_else(|| HostError::Message("empty fallback chain".into()))?);
    }
    if let Some(dir) = &args.record {
        provider = Arc::new(Recorder::new(provider, dir)?);
    }
    Ok(provider)
}

/// The run's budget from flags and config; `None` when unlimited.
pub fn budget(args: &ProviderArgs, config: &Config) -> Result<Option<Arc<BudgetMeter>>> {
    let budget = Budget {
        max_tokens: args.max_total_tokens.or(config.budget.max_tokens),
        max_cost_usd: args.max_cost.or(config.budget.max_cost_usd),
    };
    if let Some(c) = budget.max_cost_usd
        && !(c.is_finite() && c >= 0.0)
    {
        bail!("--max-cost must be a non-negative number of US dollars, got {c}");
    }
    Ok((budget != Budget::default()).then(|| Arc::new(BudgetMeter::new(budget))))
}

/// What to tell a person whose cost limit cannot hold `provider`'s model:
/// with no price known, its calls are neither held before they go out nor
/// counted after. `None` when there is no cost limit or the price is known.
pub fn unpriced_warning(args: &ProviderArgs, config: &Config, provider: &dyn Provider) -> Option<String> {
    let limit = args.max_cost.or(config.budget.max_cost_usd)?;
    let model = provider.model();
    if prices(config).price(model).is_some() {
        return None;
    }
    Some(format!(
        "warning: no price is known for `{model}`, so --max-cost {limit} cannot hold its calls; \
         give it one in noesis.toml ([prices] \"{model}\" = {{ input = USD, output = USD }} per million tokens) \
         or limit tokens with --max-total-tokens"
    ))
}

/// `provider`, speaking the JSON tool protocol in text when it has no tool
/// calling of its own or the config says so (`[providers.NAME] tools = false`).
pub fn with_text_tools(provider: Arc<dyn Provider>, config: &Config) -> Arc<dyn Provider> {
    let off = config.providers.get(provider.name()).and_then(|e| e.tools) == Some(false);
    if off || !provider.capabilities().tools { Arc::new(noesis_llm::TextTools::new(provider)) } else { provider }
}

/// The built-in price table with the config's overrides.
pub fn prices(config: &Config) -> Arc<PriceTable> {
    let mut table = PriceTable::builtin();
    for (model, price) in &config.prices {
        table.set(model, *price);
    }
    Arc::new(table)
}

/// The provider to use when none is named, if the environment points at one.
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|p| p.key_var.is_some_and(|v| env(v).is_some()))
        .map(|p| p.name)
        // A base URL alone means a local or proxied server that needs no
        // key; only OPENAI_BASE_URL and OLLAMA_HOST are taken that way.
        .or_else(|| env("OPENAI_BASE_URL").map(|_| "openai"))
        .or_else(|| env("OLLAMA_HOST").map(|_| "ollama"))
}

/// Every provider name the config makes known, presets first.
pub fn known_names(config: &Config) -> String {
    let mut names: Vec<&str> = PRESETS.iter().map(|p: &Preset| p.name).collect();
    names.extend(
        config.providers.keys().filter(|k| noesis_llm::preset(k).is_none() && *k != "local").map(String::as_str),
    );
    names.extend(["local", "test", "scripted"]);
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
        assert_eq!(detect(&env_of(&[("GEMINI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")])), Some("anthropic"));
        assert_eq!(detect(&env_of(&[("VLLM_API_KEY", "k")])), Some("vllm"));
    }

    #[test]
    fn detect_falls_back_to_base_urls_only_for_keyless_servers() {
        assert_eq!(detect(&env_of(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")])), Some("openai"));
        assert_eq!(detect(&env_of(&[("OLLAMA_HOST", "127.0.0.1")])), Some("ollama"));
        assert_eq!(detect(&env_of(&[("DEEPSEEK_BASE_URL", "http://127.0.0.1:1/v1")])), None);
        assert_eq!(detect(&env_of(&[("LMSTUDIO_BASE_URL", "http://127.0.0.1:1/v1")])), None);
        // A blank key is no key.
        assert_eq!(detect(&env_of(&[("DEEPSEEK_API_KEY", " ")])), None);
    }

    #[test]
    fn known_names_lists_presets_config_and_builtins() {
        let mut config = Config::default();
        config.providers.insert("corp".into(), Default::default());
        config.providers.insert("openai".into(), Default::default());
        let names = known_names(&config);
        assert!(names.starts_with("openai, anthropic, gemini, deepseek, "), "{names}");
        assert!(names.ends_with("lmstudio, ollama, corp, local, test, scripted"), "{names}");
    }

    fn cfg(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn endpoint_layers_preset_config_env_and_flags() {
        let config = cfg(
            "provider = \"openai\"\nmodel = \"m-top\"\ntimeout = 7\n[providers.openai]\nbase_url = \"http://file/v1\"\napi_key_env = \"MY_KEY\"",
        );
        let args = ProviderArgs::default();
        let (wire, c) = endpoint("openai", None, &args, &config, &env_of(&[("MY_KEY", "k1")])).unwrap();
        assert_eq!(wire, Wire::OpenAi);
        assert_eq!(
            (c.base_url.as_str(), c.model.as_str(), c.api_key.as_deref()),
            ("http://file/v1", "m-top", Some("k1"))
        );
        assert_eq!(c.http.timeout, Duration::from_secs(7));
        // Env beats the file; flags beat both.
        let env = env_of(&[("OPENAI_BASE_URL", "http://env/v1"), ("MY_KEY", "k1")]);
        let args = ProviderArgs { timeout: Some(3), ..ProviderArgs::default() };
        let (_, c) = endpoint("openai", Some("m-flag".into()), &args, &config, &env).unwrap();
        assert_eq!((c.base_url.as_str(), c.model.as_str()), ("http://env/v1", "m-flag"));
        assert_eq!(c.http.timeout, Duration::from_secs(3));
    }

    #[test]
    fn custom_endpoints_need_wire_base_url_and_model() {
        let args = ProviderArgs::default();
        let ok = cfg("[providers.corp]\nwire = \"anthropic\"\nbase_url = \"http://c/\"\nmodel = \"m\"");
        let (wire, c) = endpoint("corp", None, &args, &ok, &env_of(&[])).unwrap();
        assert_eq!((wire, c.base_url.as_str(), c.name.as_str()), (Wire::Anthropic, "http://c", "corp"));
        for (text, want) in [
            ("[providers.corp]\nbase_url = \"http://c\"\nmodel = \"m\"", "needs `wire`"),
            ("[providers.corp]\nwire = \"openai\"\nmodel = \"m\"", "needs `base_url`"),
            ("[providers.corp]\nwire = \"openai\"\nbase_url = \"http://c\"", "no model"),
            ("[providers.openai]\nwire = \"gemini\"", "built-in provider that speaks openai"),
        ] {
            let e = endpoint(
                if text.contains("providers.openai") { "openai" } else { "corp" },
                None,
                &args,
                &cfg(text),
                &env_of(&[]),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = endpoint("nope", None, &args, &Config::default(), &env_of(&[])).unwrap_err().to_string();
        assert!(e.starts_with("unknown provider `nope`"), "{e}");
    }

    #[test]
    fn routes_pick_by_tier_unless_a_flag_names_the_provider() {
        let config = cfg(
            "provider = \"openai\"\n[[routes]]\ntier = \"exec\"\nprovider = \"deepseek\"\nmodel = \"deepseek-chat\"",
        );
        let args = ProviderArgs::default();
        let none = env_of(&[]);
        let (p, m, s) = choose(&args, &config, Some(("code-simplifier", Some("exec"))), &none);
        assert_eq!((p.as_str(), m.as_deref(), s), ("deepseek", Some("deepseek-chat"), Source::Route(0)));
        let (p, _, s) = choose(&args, &config, Some(("x", Some("decision"))), &none);
        assert_eq!((p.as_str(), s), ("openai", Source::Config));
        // LLM_PROVIDER and flags beat routes; LLM_MODEL beats the route's model.
        let env = env_of(&[("LLM_PROVIDER", "gemini"), ("LLM_MODEL", "g")]);
        let (p, m, s) = choose(&args, &config, Some(("code-simplifier", Some("exec"))), &env);
        assert_eq!((p.as_str(), m.as_deref(), s), ("gemini", Some("g"), Source::Env));
        let flagged = ProviderArgs { provider: Some("anthropic".into()), ..ProviderArgs::default() };
        let (p, _, s) = choose(&flagged, &config, Some(("code-simplifier", Some("exec"))), &env);
        assert_eq!((p.as_str(), s), ("anthropic", Source::Flag));
        // Nothing configured: keys in the environment, else the test model.
        let (p, _, s) = choose(&args, &Config::default(), None, &env_of(&[("GEMINI_API_KEY", "k")]));
        assert_eq!((p.as_str(), s), ("gemini", Source::Detected));
        let (p, _, s) = choose(&args, &Config::default(), None, &none);
        assert_eq!((p.as_str(), s), ("test", Source::Default));
    }
}

/// One entry of a server's allow-list: a provider, and one model of it or
/// any (`provider`, `provider:*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    provider: String,
    model: Option<String>,
}

impl std::str::FromStr for Allowed {
    type Err = String;

    fn from_str(text: &str) -> Result<Allowed, String> {
        let (provider, model) = match text.split_once(':') {
            Some((p, "*")) => (p, None),
            Some((p, m)) if !m.trim().is_empty() => (p, Some(m.trim().to_owned())),
            Some(_) => return Err(format!("`{text}`: no model after `:` (use `provider:*` for any)")),
            None => (text, None),
        };
        let provider = provider.trim();
        if provider.is_empty() || provider.contains(char::is_whitespace) {
            return Err(format!("`{text}` is not `provider[:model]`"));
        }
        Ok(Allowed { provider: provider.to_owned(), model })
    }
}

/// A provider being made, or made: requests for the same one wait for it
/// here, not on the whole cache.
type Slot = Arc<Mutex<Option<Arc<dyn Provider>>>>;

/// At most this many providers are kept; the least recently used goes.
const CACHE_CAP: usize = 16;

/// The providers made so far, by (provider, model), least recently used
/// first out.
#[derive(Default)]
struct Cache {
    slots: HashMap<(String, Option<String>), (Slot, u64)>,
    tick: u64,
}

impl Cache {
    /// The slot for `key`, made if new; evicts the least recently used one
    /// beyond [`CACHE_CAP`].
    fn slot(&mut self, key: (String, Option<String>)) -> Slot {
        self.tick += 1;
        let tick = self.tick;
        let slot = match self.slots.get_mut(&key) {
            Some((slot, used)) => {
                *used = tick;
                Arc::clone(slot)
            }
            None => {
                let slot: Slot = Arc::default();
                self.slots.insert(key, (Arc::clone(&slot), tick));
                slot
            }
        };
        while self.slots.len() > CACHE_CAP {
            let Some(oldest) = self.slots.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else {
                break;
            };
            self.slots.remove(&oldest);
        }
        slot
    }
}

/// Providers as `noesis run` picks them, with a request's provider and
/// model layered over the flags. One provider per (provider, model), kept
/// while in use (at most [`CACHE_CAP`]), so runs share its connections and
/// concurrency cap. A server's requests choose only from an allow-list.
pub struct Providers {
    flags: ProviderArgs,
    config: Config,
    /// What a request may name; `None`: anything (a run's own children).
    allowed: Option<Vec<Allowed>>,
    cache: Mutex<Cache>,
}

impl Providers {
    /// Providers as `flags` and `config` choose them; a request may name any.
    pub fn new(flags: ProviderArgs, config: Config) -> Providers {
        Providers { flags, config, allowed: None, cache: Mutex::default() }
    }

    /// For `serve` and `mcp`: requests may choose the default or what
    /// `allowed` lists.
    pub fn for_server(flags: ProviderArgs, config: Config, allowed: Vec<Allowed>) -> Providers {
        Providers { allowed: Some(allowed), ..Providers::new(flags, config) }
    }

    /// A server's providers: requests choose only among the operator's
    /// default and what `allow_model` (`--allow-model`) and `[serve]
    /// allow_models` allow; an entry that does not parse is refused, named.
    pub fn for_operator(flags: ProviderArgs, config: Config, allow_model: &[String]) -> Result<Providers> {
        let mut allowed = Vec::new();
        for (text, from) in allow_model
            .iter()
            .map(|t| (t, "--allow-model"))
            .chain(config.serve.allow_models.iter().map(|t| (t, "serve.allow_models in the config")))
        {
            allowed.push(text.parse::<Allowed>().map_err(|e| HostError::Message(format!("{from}: {e}")))?);
        }
        Ok(Providers::for_server(flags, config, allowed))
    }

    /// The provider `args` choose (for `module`, by its routes), made once
    /// per (provider, model) and kept.
    pub fn get(&self, args: &ProviderArgs, module: Option<(&str, Option<&str>)>) -> Result<Arc<dyn Provider>> {
        let (name, model, source) = choose(args, &self.config, module, &env);
        if source == Source::Default && name != "local" && args.replay.is_none() {
            bail!("{NO_PROVIDER}");
        }
        let slot = self
            .cache
            .lock()
            .map_err(|_| HostError::Message("provider cache poisoned".into()))?
            .slot((name.clone(), model.clone()));
        // Made outside the cache's lock; two requests for the same provider
        // still make it once (a local model must not load twice).
        let mut made = slot.lock().map_err(|_| HostError::Message("provider slot poisoned".into()))?;
        if let Some(p) = made.as_ref() {
            return Ok(Arc::clone(p));
        }
        let pinned = ProviderArgs { provider: Some(name), model, ..args.clone() };
        let provider = select(&pinned, &self.config, None, &|_| {})?;
        *made = Some(Arc::clone(&provider));
        Ok(provider)
    }

    /// The provider of an agent run a request started: the request's
    /// provider and model if the allow-list permits them, else the default.
    pub fn for_agent(&self, name: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Provider>, String> {
        let model = self.permitted(name, model).map_err(|e| e.to_string())?;
        let mut args = self.flags.clone();
        if let Some(n) = name {
            args.provider = Some(n.to_owned());
        }
        if let Some(m) = model {
            args.model = Some(m);
        }
        self.get(&args, None).map_err(|e| format!("{e:#}"))
    }

    /// The provider a run was started with (its choice was checked then):
    /// exactly this provider and model, no allow-list.
    pub fn pinned(&self, name: &str, model: Option<&str>) -> Result<Arc<dyn Provider>, String> {
        let args =
            ProviderArgs { provider: Some(name.to_owned()), model: model.map(str::to_owned), ..self.flags.clone() };
        self.get(&args, None).map_err(|e| format!("{e:#}"))
    }

    /// Puts a provider already made for `module` in the cache, so the
    /// modules a run calls share it (one connection pool, one cap) when
    /// their route picks the same provider and model.
    pub fn seed(&self, args: &ProviderArgs, module: Option<(&str, Option<&str>)>, provider: Arc<dyn Provider>) {
        let (name, model, _) = choose(args, &self.config, module, &env);
        let slot = match self.cache.lock() {
            Ok(mut cache) => cache.slot((name, model)),
            Err(_) => return,
        };
        if let Ok(mut made) = slot.lock() {
            made.get_or_insert(provider);
        }
    }

    /// The request's provider and model if the allow-list permits them,
    /// with the model pinned when only one model of the provider is allowed.
    fn permitted(&self, name: Option<&str>, model: Option<&str>) -> Result<Option<String>> {
        let Some(allowed) = &self.allowed else { return Ok(model.map(str::to_owned)) };
        if name.is_none() && model.is_none() {
            return Ok(None);
        }
        let (default_name, default_model, _) = choose(&self.flags, &self.config, None, &env);
        let provider = name.unwrap_or(&default_name);
        if provider == default_name && (model.is_none() || model == default_model.as_deref()) {
            return Ok(model.map(str::to_owned));
        }
        let mut of_provider = allowed.iter().filter(|a| a.provider == provider);
        let found = match model {
            Some(m) => of_provider.find(|a| a.model.as_deref().is_none_or(|am| am == m)).map(|_| Some(m.to_owned())),
            None => of_provider.next().map(|a| a.model.clone()),
        };
        found.ok_or_else(|| {
            let asked = match model {
                Some(m) => format!("{provider}:{m}"),
                None => provider.to_owned(),
            };
            let mut listed: Vec<String> =
                allowed.iter().map(|a| format!("{}:{}", a.provider, a.model.as_deref().unwrap_or("*"))).collect();
            listed.insert(0, format!("{default_name}:{} (the default)", default_model.as_deref().unwrap_or("*")));
            HostError::NotAllowed(format!(
                "`{asked}` is not allowed on this server; it allows {} (the operator adds more with --allow-model)",
                listed.join(", ")
            ))
        })
    }
}

impl Providers {
    /// The provider a server's request for `module` gets: the request's
    /// provider and model when the allow-list permits them
    /// ([`HostError::NotAllowed`] when not), layered over the flags, routed
    /// by the module's name and tier.
    pub fn for_module(&self, name: Option<&str>, model: Option<&str>, module: &Module) -> Result<Arc<dyn Provider>> {
        let model = self.permitted(name, model)?;
        let mut args = self.flags.clone();
        if let Some(n) = name {
            args.provider = Some(n.to_owned());
        }
        if let Some(m) = model {
            args.model = Some(m);
        }
        self.get(&args, Some((&module.name, Some(module.policy.tier.as_str()))))
    }

    /// The config the providers are made from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The flags the providers are made from.
    pub fn flags(&self) -> &ProviderArgs {
        &self.flags
    }
}

/// The modules a `noesis run` calls get providers as the run's own module
/// does: flags, then the environment, then routes by tier and name.
impl ProviderFor for Providers {
    fn provider_for(&self, module: &Module) -> Result<Option<Arc<dyn Provider>>, String> {
        self.get(&self.flags, Some((&module.name, Some(module.policy.tier.as_str()))))
            .map(Some)
            .map_err(|e| format!("{e:#}"))
    }
}

#[cfg(test)]
mod provider_cache_tests {
    use super::*;

    #[test]
    fn allow_list_entries_parse() {
        assert_eq!("openai:gpt-4o".parse(), Ok(Allowed { provider: "openai".into(), model: Some("gpt-4o".into()) }));
        assert_eq!("anthropic:*".parse(), Ok(Allowed { provider: "anthropic".into(), model: None }));
        assert_eq!("ollama".parse(), Ok(Allowed { provider: "ollama".into(), model: None }));
        assert!("openai:".parse::<Allowed>().unwrap_err().contains("no model"));
        assert!(":gpt".parse::<Allowed>().is_err());
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used() {
        let mut cache = Cache::default();
        let key = |i: usize| (format!("p{i}"), None);
        let first = cache.slot(key(0));
        for i in 1..CACHE_CAP {
            cache.slot(key(i));
        }
        // Touch the first, then one more: the second goes, not the first.
        assert!(Arc::ptr_eq(&first, &cache.slot(key(0))));
        cache.slot(key(CACHE_CAP));
        assert_eq!(cache.slots.len(), CACHE_CAP);
        assert!(cache.slots.contains_key(&key(0)) && !cache.slots.contains_key(&key(1)));
    }
}
