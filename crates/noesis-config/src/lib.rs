//! noesis's settings as typed data: `noesis.toml` (the project's) and the
//! user config, read, checked and merged; and the provider flags every
//! front end takes.
//!
//! Precedence, highest first: flags, environment variables, the project's
//! `noesis.toml` (found in the working directory or an ancestor), the user
//! config (`$NOESIS_CONFIG`, else `$XDG_CONFIG_HOME/noesis/config.toml`, else
//! `~/.config/noesis/config.toml`), built-in defaults.
//!
//! Architecture invariant: reading files is all the I/O here; every mistake
//! is an error naming the file and the field. The trust rules live here too:
//! a project's own file (which may come with a hostile repository) cannot
//! turn the sandbox off, grant the network or paths outside the project, or
//! trust an MCP server; the user config and the flags can.
//!
//! ```
//! let c = noesis_config::parse(std::path::Path::new("noesis.toml"), "provider = \"openai\"\n[budget]\nmax_tokens = 5000\n").unwrap();
//! assert_eq!((c.provider.as_deref(), c.budget.max_tokens), (Some("openai"), Some(5000)));
//! let e = noesis_config::parse(std::path::Path::new("noesis.toml"), "provder = 1").unwrap_err();
//! assert!(e.to_string().starts_with("noesis.toml:"));
//! ```
#![deny(missing_docs)]

mod flags;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use noesis_llm::{Price, Route, Wire};

pub use flags::{ProviderArgs, env};

/// What is wrong with the settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file (or flag) says something it may not; the message names the
    /// file and the field.
    #[error("{0}")]
    Invalid(String),
    /// A config file exists but cannot be read.
    #[error("{}: cannot read the config file: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        err: std::io::Error,
    },
}

/// Results of this crate.
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

macro_rules! bail {
    ($($t:tt)*) => { return Err(ConfigError::Invalid(format!($($t)*))) };
}

/// Everything a config file may say.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The provider to use when no flag or `LLM_PROVIDER` names one.
    pub provider: Option<String>,
    /// The model for that provider.
    pub model: Option<String>,
    /// Whole-call timeout in seconds.
    pub timeout: Option<u64>,
    /// Retries of transient failures.
    pub retries: Option<u32>,
    /// Requests in flight per provider.
    pub max_concurrency: Option<usize>,
    /// Providers tried in order after the chosen one fails.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Settings per provider name; a name that is not a preset defines a
    /// new endpoint (it then needs `wire` and `base_url`).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderEntry>,
    /// Routing rules, first match wins.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Prices in USD per million tokens, by model.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// Spending limits per run.
    #[serde(default)]
    pub budget: BudgetEntry,
    /// What the host grants modules.
    #[serde(default)]
    pub policies: PoliciesEntry,
    /// What `serve` and `mcp` let requests choose.
    #[serde(default)]
    pub serve: ServeEntry,
    /// Defaults of `noesis agent`.
    #[serde(default)]
    pub agent: AgentEntry,
    /// MCP servers whose tools agents may call.
    #[serde(default)]
    pub mcp: McpEntry,
    /// The verified coding workflow (`noesis state`, `noesis solve`).
    #[serde(default)]
    pub workflow: WorkflowEntry,
    /// The module registry index (`noesis install NAME`, `search`).
    #[serde(default)]
    pub registry: RegistryEntry,
    /// Plugins run as programs (`[plugins.NAME]`), by name.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginEntry>,
    /// The frame plugins' settings (`[frames]`).
    #[serde(default)]
    pub frames: FramesEntry,
    /// Rules for agent tools (`[permissions]`).
    #[serde(default)]
    pub permissions: PermissionsEntry,
    /// How commands chosen by a model are confined (`[sandbox]`).
    #[serde(default)]
    pub sandbox: SandboxEntry,
    /// Secrets to redact besides the environment's (`[redact]`).
    #[serde(default)]
    pub redact: RedactEntry,
}

/// `[sandbox]`: how processes chosen by a model run (see noesis-sandbox).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxEntry {
    /// `on` (default) or `off` (commands run unconfined; the user config
    /// only — a project's file cannot turn the sandbox off).
    pub mode: Option<noesis_sandbox::Mode>,
    /// TCP/UDP for commands (the user config only).
    pub network: Option<bool>,
    /// More paths commands may read (`~/` is the home folder).
    #[serde(default)]
    pub read_extra: Vec<PathBuf>,
    /// More paths commands may write.
    #[serde(default)]
    pub write_extra: Vec<PathBuf>,
    /// More environment variables commands get, by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// CPU seconds per process.
    pub cpu_seconds: Option<u64>,
    /// Memory per process, MiB.
    pub memory_mb: Option<u64>,
    /// Largest file a process may write, MiB.
    pub file_mb: Option<u64>,
}

/// `[redact]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactEntry {
    /// Values replaced by `[redacted:value]` wherever tool output goes.
    #[serde(default)]
    pub values: Vec<String>,
    /// Variables whose values are secrets though their names do not say
    /// so (the `api_key_env` of each provider is one already).
    #[serde(default)]
    pub names: Vec<String>,
}

impl Config {
    /// The sandbox settings: `[sandbox]`, then the flags (`--sandbox`,
    /// `--allow-network`), with `~/` expanded against `home`.
    pub fn sandbox_settings(
        &self,
        mode: Option<noesis_sandbox::Mode>,
        allow_network: bool,
        home: Option<&Path>,
    ) -> noesis_sandbox::Settings {
        let e = &self.sandbox;
        let defaults = noesis_sandbox::Settings::default();
        let expand = |p: &PathBuf| match (p.strip_prefix("~"), home) {
            (Ok(rest), Some(h)) => h.join(rest),
            _ => std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        };
        noesis_sandbox::Settings {
            mode: mode.or(e.mode).unwrap_or_default(),
            network: allow_network || e.network.unwrap_or(false),
            read_extra: e.read_extra.iter().map(expand).collect(),
            write_extra: e.write_extra.iter().map(expand).collect(),
            env: e.env.clone(),
            set_env: std::collections::BTreeMap::new(),
            cpu_seconds: e.cpu_seconds.or(defaults.cpu_seconds),
            memory_mb: e.memory_mb.or(defaults.memory_mb),
            file_mb: e.file_mb.or(defaults.file_mb),
        }
    }

    /// What redacts tool output: the environment's secret-like variables,
    /// each provider's `api_key_env`, and `[redact]`.
    pub fn redactor(&self) -> std::sync::Arc<noesis_sandbox::Redactor> {
        let mut names: Vec<String> = self.providers.values().filter_map(|p| p.api_key_env.clone()).collect();
        names.extend(self.redact.names.iter().cloned());
        std::sync::Arc::new(noesis_sandbox::Redactor::from_env(&names, &self.redact.values))
    }
}

/// `[permissions]`: `allow`, `ask` and `deny` rules for agent tools
/// (`run_command(cargo test *)`, `write_file(src/**)`, `mcp:fs__*`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsEntry {
    /// Calls that run without asking.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Calls that wait for a person.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Calls refused (deny wins).
    #[serde(default)]
    pub deny: Vec<String>,
    /// Every rule of every file read, with where it was written
    /// (`FILE: permissions.deny[0]`): the user's and the project's rules
    /// both count, so a project's file cannot drop the user's deny rules.
    #[serde(skip)]
    pub sourced: Vec<(noesis_agent::Effect, String, String)>,
}

/// `[plugins.NAME]`: a plugin that is a program speaking JSON lines.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// Program and arguments (no shell), e.g. `["python3", "plugins/mine.py"]`.
    pub command: Vec<String>,
    /// Seconds one call may take before the plugin is stopped (default 30).
    pub timeout_seconds: Option<u64>,
    /// The module that is the plugin's model (default: none; the plugin's
    /// slice input is then the answer).
    pub module: Option<String>,
}

/// `[frames]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FramesEntry {
    /// Where `noesis docs sync` writes its nodes (project-relative; default
    /// `docs/noesis`).
    pub docs_dir: Option<String>,
    /// The confidence at or above which a verified `ask` answer is promoted
    /// to memory (default 0.8).
    pub promote_at: Option<f64>,
}

/// `[registry]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// The index: an `http(s)://` URL or a file (`cognitive-registry.json`).
    pub url: Option<String>,
    /// How long a fetched index is used before it is fetched again.
    pub ttl_seconds: Option<u64>,
}

/// `[workflow]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowEntry {
    /// Rewrite imlazy's state file after every mutation, so its hooks
    /// keep reading a current state.
    pub mirror_imlazy: Option<bool>,
    /// That file (default `~/.imlazy/working/state.json`).
    pub imlazy_state: Option<PathBuf>,
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpEntry {
    /// `[mcp.servers.NAME]`, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerEntry>,
}

/// `[mcp.servers.NAME]`: a program to start (`command`, `args`, `env`,
/// `cwd`) or a streamable-HTTP endpoint (`url`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// The program to start.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working folder.
    pub cwd: Option<PathBuf>,
    /// A streamable-HTTP endpoint instead of a program.
    pub url: Option<String>,
    /// Headers sent to the endpoint with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The environment variable holding a bearer token for the endpoint
    /// (read when the server is reached; the token is never written down).
    pub bearer_token_env: Option<String>,
    /// Seconds one call may take.
    pub timeout: Option<u64>,
    /// The operator vouches for the server: its process runs unconfined
    /// and its tools' `readOnlyHint` is believed (default false).
    pub trusted: Option<bool>,
    /// Its process may use the network (it still runs confined).
    #[serde(default)]
    pub network: bool,
}

impl McpServerEntry {
    /// The server as the MCP client takes it; `file` names where it came from.
    pub fn spec(&self, name: &str, file: &str) -> Result<noesis_mcp::ServerSpec> {
        let at = format!("{file}: mcp.servers.{name}");
        noesis_mcp::check_server_name(name).map_err(|e| ConfigError::Invalid(format!("{at}: {e}")))?;
        let mut spec = match (&self.command, &self.url) {
            (Some(_), None) if !self.headers.is_empty() || self.bearer_token_env.is_some() => {
                bail!("{at}: `headers` and `bearer_token_env` go with `url`, not `command`")
            }
            (Some(command), None) => {
                let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
                let mut spec = noesis_mcp::ServerSpec::command(name, command, &args);
                if let noesis_mcp::Transport::Command { env, cwd, .. } = &mut spec.transport {
                    env.clone_from(&self.env);
                    cwd.clone_from(&self.cwd);
                }
                spec
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    bail!("{at}: `args`, `env` and `cwd` go with `command`, not `url`");
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    bail!("{at}.url: `{url}` is not an http(s) URL");
                }
                let mut spec = noesis_mcp::ServerSpec::http(name, url);
                if let noesis_mcp::Transport::Http { headers, bearer_env, .. } = &mut spec.transport {
                    headers.clone_from(&self.headers);
                    bearer_env.clone_from(&self.bearer_token_env);
                }
                spec
            }
            (Some(_), Some(_)) => bail!("{at}: give `command` or `url`, not both"),
            (None, None) => bail!("{at}: give `command` (a program to start) or `url` (streamable HTTP)"),
        };
        match self.timeout {
            Some(0) => bail!("{at}.timeout: must be at least 1 second"),
            Some(secs) => spec.call_timeout = std::time::Duration::from_secs(secs),
            None => {}
        }
        spec.trusted = self.trusted.unwrap_or(false);
        spec.network = self.network;
        Ok(spec)
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// Commands `run_command` may run, by leading words (`cargo test`).
    #[serde(default)]
    pub allow_commands: Vec<String>,
    /// `ask`, `auto` or `never` when `--approve` is not given.
    pub approve: Option<String>,
    /// Model turns per run when `--max-iterations` is not given.
    pub max_iterations: Option<u32>,
    /// Offer a run the small tool set with short descriptions (`true`),
    /// every tool as written (`false`); unset: the small set for the
    /// embedded local model only, whose prompt every tool lengthens.
    pub compact_tools: Option<bool>,
    /// The model's context window in tokens, where the built-in table does
    /// not know it (or knows it wrong); runs compact near it.
    pub context_window: Option<u64>,
    /// `[agent.roles.ROLE]`: who answers each kind of model call (`plan`,
    /// `think`, `reflect`, `sub_agent`, and `mcp_sampling`: an MCP server's
    /// request for a completion).
    #[serde(default)]
    pub roles: BTreeMap<String, noesis_llm::policy::RolePolicy>,
    /// Where sub-agents work: `"none"` (the parent's workspace, the
    /// default) or `"worktree"` (each its own git worktree of what the
    /// parent sees; their changes compared before any is merged).
    pub isolation: Option<String>,
    /// Commands that must pass after isolated sub-agents' changes are
    /// merged into the workspace; a failure undoes the merge.
    #[serde(default)]
    pub anchors: Vec<String>,
}

/// `[serve]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeEntry {
    /// `provider[:model]` entries requests may choose besides the default.
    #[serde(default)]
    pub allow_models: Vec<String>,
    /// Host names requests may give besides the loopback names and the
    /// bound address (`--allow-host` adds to them); the server checks them.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

/// `[policies]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoliciesEntry {
    /// Capabilities granted to every run (`network`, `filesystem_write`,
    /// `side_effects`, `code_execution`, or a module's own policy name).
    #[serde(default)]
    pub allow: Vec<String>,
}

/// What the host grants a run: `--allow` on top of `[policies] allow`.
pub fn granted(config: &Config, flags: &[String]) -> Result<Vec<String>> {
    let mut all = config.policies.allow.clone();
    for f in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        if !is_policy_name(f) {
            bail!(
                "--allow {f}: not a policy name (network, filesystem_write, side_effects, code_execution, or a module's own)"
            );
        }
        if !all.iter().any(|a| a == f) {
            all.push(f.to_owned());
        }
    }
    Ok(all)
}

/// Whether `name` can be a policy: lower-case words joined by `_`.
pub fn is_policy_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `[providers.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// The dialect, for endpoints that are not presets.
    pub wire: Option<Wire>,
    /// Base URL.
    pub base_url: Option<String>,
    /// Default model.
    pub model: Option<String>,
    /// The variable that holds the key (instead of the preset's).
    pub api_key_env: Option<String>,
    /// For `local`: the GGUF model file.
    pub model_path: Option<PathBuf>,
    /// `false` for an endpoint without tool calling: agents then use the
    /// JSON protocol in text.
    pub tools: Option<bool>,
    /// `true` for an endpoint on this machine: `local_only` routes may use it.
    pub local: Option<bool>,
}

/// `[budget]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetEntry {
    /// Most tokens (in + out) per run.
    pub max_tokens: Option<u64>,
    /// Most US dollars per run.
    pub max_cost_usd: Option<f64>,
}

/// The merged config and where it came from.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The settings, merged.
    pub config: Config,
    /// Files read, lowest precedence first.
    pub files: Vec<PathBuf>,
}

impl Config {
    /// `over` on top of `self`: its values win, maps merge by key, lists
    /// replace when non-empty.
    fn overlay(mut self, over: Config) -> Config {
        self.provider = over.provider.or(self.provider);
        self.model = over.model.or(self.model);
        self.timeout = over.timeout.or(self.timeout);
        self.retries = over.retries.or(self.retries);
        self.max_concurrency = over.max_concurrency.or(self.max_concurrency);
        if !over.fallback.is_empty() {
            self.fallback = over.fallback;
        }
        for (name, entry) in over.providers {
            let base = self.providers.remove(&name).unwrap_or_default();
            self.providers.insert(
                name,
                ProviderEntry {
                    wire: entry.wire.or(base.wire),
                    base_url: entry.base_url.or(base.base_url),
                    model: entry.model.or(base.model),
                    api_key_env: entry.api_key_env.or(base.api_key_env),
                    model_path: entry.model_path.or(base.model_path),
                    tools: entry.tools.or(base.tools),
                    local: entry.local.or(base.local),
                },
            );
        }
        if !over.routes.is_empty() {
            self.routes = over.routes;
        }
        self.prices.extend(over.prices);
        self.budget.max_tokens = over.budget.max_tokens.or(self.budget.max_tokens);
        self.budget.max_cost_usd = over.budget.max_cost_usd.or(self.budget.max_cost_usd);
        if !over.policies.allow.is_empty() {
            self.policies.allow = over.policies.allow;
        }
        if !over.serve.allow_models.is_empty() {
            self.serve.allow_models = over.serve.allow_models;
        }
        if !over.serve.allow_hosts.is_empty() {
            self.serve.allow_hosts = over.serve.allow_hosts;
        }
        if !over.agent.allow_commands.is_empty() {
            self.agent.allow_commands = over.agent.allow_commands;
        }
        self.plugins.extend(over.plugins);
        self.frames.docs_dir = over.frames.docs_dir.or(self.frames.docs_dir);
        self.frames.promote_at = over.frames.promote_at.or(self.frames.promote_at);
        self.agent.approve = over.agent.approve.or(self.agent.approve);
        self.agent.max_iterations = over.agent.max_iterations.or(self.agent.max_iterations);
        self.agent.compact_tools = over.agent.compact_tools.or(self.agent.compact_tools);
        self.agent.context_window = over.agent.context_window.or(self.agent.context_window);
        self.agent.isolation = over.agent.isolation.or(self.agent.isolation);
        if !over.agent.anchors.is_empty() {
            self.agent.anchors = over.agent.anchors;
        }
        // A role named again in a closer file replaces its whole policy.
        self.agent.roles.extend(over.agent.roles);
        // A server named again in a closer file replaces the whole entry.
        self.mcp.servers.extend(over.mcp.servers);
        self.workflow.mirror_imlazy = over.workflow.mirror_imlazy.or(self.workflow.mirror_imlazy);
        self.workflow.imlazy_state = over.workflow.imlazy_state.or(self.workflow.imlazy_state);
        self.registry.url = over.registry.url.or(self.registry.url);
        self.registry.ttl_seconds = over.registry.ttl_seconds.or(self.registry.ttl_seconds);
        // Rules add up (deny wins over the files together): a closer file
        // cannot take back a rule of the user's.
        self.permissions.allow.extend(over.permissions.allow);
        self.permissions.ask.extend(over.permissions.ask);
        self.permissions.deny.extend(over.permissions.deny);
        self.permissions.sourced.extend(over.permissions.sourced);
        let (sb, o) = (&mut self.sandbox, over.sandbox);
        sb.mode = o.mode.or(sb.mode);
        sb.network = o.network.or(sb.network);
        sb.read_extra.extend(o.read_extra);
        sb.write_extra.extend(o.write_extra);
        sb.env.extend(o.env);
        sb.cpu_seconds = o.cpu_seconds.or(sb.cpu_seconds);
        sb.memory_mb = o.memory_mb.or(sb.memory_mb);
        sb.file_mb = o.file_mb.or(sb.file_mb);
        self.redact.values.extend(over.redact.values);
        self.redact.names.extend(over.redact.names);
        self
    }

    /// Checks what serde cannot: names that must exist, numbers in range.
    fn validate(&self, path: &Path) -> Result<()> {
        let bad = |msg: String| ConfigError::Invalid(format!("{}: {msg}", path.display()));
        for (name, p) in &self.prices {
            if !(p.input.is_finite() && p.output.is_finite() && p.input >= 0.0 && p.output >= 0.0) {
                return Err(bad(format!("prices.\"{name}\": input and output must be non-negative numbers")));
            }
        }
        if let Some(c) = self.budget.max_cost_usd
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(bad("budget.max_cost_usd: must be a non-negative number".into()));
        }
        for (i, p) in self.policies.allow.iter().enumerate() {
            if !is_policy_name(p) {
                return Err(bad(format!(
                    "policies.allow[{i}]: `{p}` is not a policy name (network, filesystem_write, side_effects, code_execution, …)"
                )));
            }
        }
        for (role, policy) in &self.agent.roles {
            let at = format!("agent.roles.{role}");
            if !matches!(role.as_str(), "plan" | "think" | "reflect" | "sub_agent" | "mcp_sampling") {
                return Err(bad(format!(
                    "{at}: `{role}` is not a role (plan, think, reflect, sub_agent, mcp_sampling)"
                )));
            }
            for (i, f) in policy.fallback.iter().enumerate() {
                if noesis_llm::policy::Candidate::parse(f).is_none() {
                    return Err(bad(format!("{at}.fallback[{i}]: `{f}` is not `provider` or `provider:model`")));
                }
            }
            if let Some(c) = policy.max_cost_usd
                && !(c.is_finite() && c >= 0.0)
            {
                return Err(bad(format!("{at}.max_cost_usd: must be a non-negative number")));
            }
            if policy.max_latency_ms == Some(0) {
                return Err(bad(format!("{at}.max_latency_ms: must be at least 1")));
            }
        }
        for (name, server) in &self.mcp.servers {
            server.spec(name, &path.display().to_string())?;
        }
        let mut check = noesis_agent::Layer::granting("check");
        for (effect, rule, from) in &self.permissions.sourced {
            check.add(*effect, rule, from).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        for (name, plugin) in &self.plugins {
            if plugin.command.first().is_none_or(|p| p.trim().is_empty()) {
                return Err(bad(format!(
                    "plugins.{name}.command: name the program and its arguments, e.g. [\"python3\", \"plugin.py\"]"
                )));
            }
            if plugin.timeout_seconds == Some(0) {
                return Err(bad(format!("plugins.{name}.timeout_seconds: must be at least 1")));
            }
            if matches!(name.as_str(), "docs" | "review" | "testgen" | "recall") {
                return Err(bad(format!("plugins.{name}: `{name}` is a built-in plugin; choose another name")));
            }
        }
        if let Some(d) = &self.frames.docs_dir
            && (d.is_empty()
                || Path::new(d).is_absolute()
                || Path::new(d).components().any(|c| matches!(c, std::path::Component::ParentDir)))
        {
            return Err(bad(format!("frames.docs_dir: `{d}` must be a folder inside the project (relative, no `..`)")));
        }
        if let Some(t) = self.frames.promote_at
            && !(0.0..=1.0).contains(&t)
        {
            return Err(bad("frames.promote_at: must be a number from 0 to 1".into()));
        }
        if self.sandbox.memory_mb == Some(0) || self.sandbox.file_mb == Some(0) || self.sandbox.cpu_seconds == Some(0) {
            return Err(bad("sandbox: cpu_seconds, memory_mb and file_mb must be at least 1".into()));
        }
        for (i, v) in self.redact.values.iter().enumerate() {
            if v.len() < noesis_sandbox::MIN_NAMED_LEN {
                return Err(bad(format!(
                    "redact.values[{i}]: a value shorter than {} characters would blank ordinary text",
                    noesis_sandbox::MIN_NAMED_LEN
                )));
            }
        }
        if let Some(a) = &self.agent.approve
            && !matches!(a.as_str(), "ask" | "auto" | "never")
        {
            return Err(bad(format!("agent.approve: `{a}` is not ask, auto or never")));
        }
        if let Some(i) = &self.agent.isolation
            && !matches!(i.as_str(), "none" | "worktree")
        {
            return Err(bad(format!("agent.isolation: `{i}` is not none or worktree")));
        }
        for (i, a) in self.agent.anchors.iter().enumerate() {
            if a.trim().is_empty() {
                return Err(bad(format!("agent.anchors[{i}]: an empty command")));
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            if let Some(t) = &r.tier
                && !matches!(t.as_str(), "exec" | "decision" | "exploration")
            {
                return Err(bad(format!("routes[{i}].tier: `{t}` is not exec, decision or exploration")));
            }
        }
        Ok(())
    }
}

/// One config file's text, checked; `path` names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<Config> {
    let mut config: Config =
        toml::from_str(text).map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
    let p = &config.permissions;
    let sourced = [
        (noesis_agent::Effect::Allow, &p.allow),
        (noesis_agent::Effect::Ask, &p.ask),
        (noesis_agent::Effect::Deny, &p.deny),
    ]
    .into_iter()
    .flat_map(|(effect, rules)| {
        rules
            .iter()
            .enumerate()
            .map(move |(i, r)| (effect, r.clone(), format!("{}: permissions.{}[{i}]", path.display(), effect.as_str())))
    })
    .collect();
    config.permissions.sourced = sourced;
    config.validate(path)?;
    Ok(config)
}

fn read(path: &Path) -> Result<Option<Config>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ConfigError::Read { path: path.to_owned(), err }),
    }
}

/// The user config file's path.
pub fn user_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("NOESIS_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = env("XDG_CONFIG_HOME") {
        return Some(Path::new(&x).join("noesis").join("config.toml"));
    }
    let home = env("HOME")?;
    let home = Path::new(&home);
    if cfg!(target_os = "macos") {
        let mac = home.join("Library/Application Support/noesis/config.toml");
        if mac.exists() {
            return Some(mac);
        }
    }
    Some(home.join(".config").join("noesis").join("config.toml"))
}

/// noesis's home folder: `$NOESIS_HOME`, else `$HOME/.noesis`, reading
/// variables through `env` (blank counts as unset). The one place that
/// decides where it is.
pub fn home_from(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    set("NOESIS_HOME").map(PathBuf::from).or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".noesis")))
}

/// The nearest `noesis.toml` from `dir` upwards.
pub fn project_path(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().map(|d| d.join("noesis.toml")).find(|p| p.is_file())
}

/// What a project's own `noesis.toml` may not say about the sandbox: a
/// file that came with a repository (perhaps a hostile one) cannot turn
/// the sandbox off, grant the network, or open paths outside the project;
/// the user config and the flags can.
fn check_project_sandbox(c: &Config, path: &Path) -> Result<()> {
    let at = |key: &str| format!("{}: sandbox.{key}", path.display());
    if c.sandbox.mode == Some(noesis_sandbox::Mode::Off) {
        bail!(
            "{}: a project's noesis.toml cannot turn the sandbox off; use `--sandbox off` or the user config",
            at("mode")
        );
    }
    if c.sandbox.network == Some(true) {
        bail!(
            "{}: a project's noesis.toml cannot grant commands the network; use `--allow-network` or the user config",
            at("network")
        );
    }
    for (name, server) in &c.mcp.servers {
        if server.trusted == Some(true) || server.network {
            bail!(
                "{}: mcp.servers.{name}: a project's noesis.toml cannot mark an MCP server trusted or give it the network (its process would run unconfined, or reach out); say it in the user config",
                path.display()
            );
        }
    }
    for (key, list) in [("read_extra", &c.sandbox.read_extra), ("write_extra", &c.sandbox.write_extra)] {
        for p in list {
            if p.is_absolute()
                || p.starts_with("~")
                || p.components().any(|c| matches!(c, std::path::Component::ParentDir))
            {
                bail!(
                    "{}: `{}` is outside the project; a project's noesis.toml may only name paths inside it (the user config may name any)",
                    at(key),
                    p.display()
                );
            }
        }
    }
    Ok(())
}

/// Reads and merges both files.
pub fn load(env: &dyn Fn(&str) -> Option<String>, cwd: &Path) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    let user = user_path(env);
    for path in [user.clone(), project_path(cwd)].into_iter().flatten() {
        if let Some(mut c) = read(&path)? {
            if Some(&path) != user.as_ref() {
                check_project_sandbox(&c, &path)?;
                // Relative paths of a project's file are the project's.
                let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
                for p in c.sandbox.read_extra.iter_mut().chain(c.sandbox.write_extra.iter_mut()) {
                    *p = base.join(&*p);
                }
            }
            loaded.config = std::mem::take(&mut loaded.config).overlay(c);
            loaded.files.push(path);
        }
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests;
