//! A new run as a person asks for it (`noesis agent "TASK"` and its
//! flags, or any front end's equivalent): a [`Launch`] of plain data
//! checked against the settings into a [`Prepared`] run — workspace,
//! permission rules, strategy, limits, approval policy — then started on a
//! [`Host`] with its MCP servers, its session's memory and its record.
//! Also how a stored run is continued: the provider it goes on with.

use std::path::PathBuf;
use std::sync::Arc;

use noesis_agent::{AgentRun, ApprovalPolicy, Limits, RunConfig, Strategy, ToolFilter, Workspace};
use noesis_config::{Config, ProviderArgs};
use noesis_llm::Provider;
use serde_json::json;

use crate::host::{Equipped, Host, NewRun, connect_mcp, mcp_specs};
use crate::rules::RuleFlags;
use crate::runs::{now_ms, session_memory};
use crate::{HostError, Result, bail};

/// The approval policy of a run: `flag` (ask, auto, never), else `[agent]
/// approve`, else ask.
pub fn approval(flag: Option<&str>, config: &Config) -> ApprovalPolicy {
    match flag.or(config.agent.approve.as_deref()) {
        Some("auto") => ApprovalPolicy::Auto,
        Some("never") => ApprovalPolicy::Never,
        _ => ApprovalPolicy::Ask,
    }
}

/// A strategy by name (single-shot, chain-of-thought; anything else is
/// react).
pub fn strategy(name: &str) -> Strategy {
    match name {
        "single-shot" => Strategy::SingleShot,
        "chain-of-thought" => Strategy::ChainOfThought,
        _ => Strategy::React,
    }
}

/// A new run as a person asks for it: the task and the choices a front
/// end's flags make, as plain data.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// What the agent should do.
    pub task: String,
    /// The folder the tools may touch.
    pub workspace: PathBuf,
    /// react, single-shot or chain-of-thought.
    pub strategy: String,
    /// Most model turns (else `[agent] max_iterations`, else the default).
    pub max_iterations: Option<u32>,
    /// Most tool calls over the run.
    pub max_tool_calls: u32,
    /// Stop after this many seconds.
    pub max_seconds: Option<u64>,
    /// Critique each answer and go on while the goal is not achieved.
    pub reflect: bool,
    /// Offer only these tools (empty: all).
    pub tools: Vec<String>,
    /// Do not offer these tools.
    pub no_tools: Vec<String>,
    /// Commands `run_command` may run, added to `[agent] allow_commands`.
    pub allow_commands: Vec<String>,
    /// The permission rules given besides the config's.
    pub rules: RuleFlags,
    /// The agent session whose earlier runs it remembers.
    pub session: Option<String>,
    /// Instructions placed before the task.
    pub system: Option<String>,
    /// MCP servers given as `NAME=COMMAND` or `NAME=URL`, added to
    /// `[mcp.servers]`.
    pub mcp: Vec<String>,
    /// Its id (default: a new UUIDv7).
    pub run_id: Option<String>,
    /// The approval policy asked for (ask, auto, never).
    pub approve: Option<String>,
    /// A JSON Schema file the final answer must validate against.
    pub output_schema: Option<PathBuf>,
}

/// A new run checked against the settings, ready to start on a host.
pub struct Prepared {
    task: String,
    workspace: Workspace,
    config: RunConfig,
    session: Option<String>,
    mcp: Vec<String>,
    run_id: Option<String>,
    allow_commands: Vec<String>,
}

impl Launch {
    /// Checks the task, the workspace, the rules and the budget flags
    /// against `config`; `provider` are the provider flags (their token
    /// and cost budgets become the run's limits).
    pub fn prepare(self, config: &Config, provider: &ProviderArgs) -> Result<Prepared> {
        if self.task.trim().is_empty() {
            bail!("the task is empty; say what the agent should do: noesis agent \"TASK\"");
        }
        let workspace = Workspace::new(&self.workspace).map_err(|e| {
            HostError::Message(format!("--workspace {}: not a usable folder: {e}", self.workspace.display()))
        })?;
        let mut allow_commands = config.agent.allow_commands.clone();
        allow_commands.extend(self.allow_commands.iter().cloned());
        let commands: Vec<(&str, &str)> = config
            .agent
            .allow_commands
            .iter()
            .map(|c| (c.as_str(), "[agent] allow_commands"))
            .chain(self.allow_commands.iter().map(|c| (c.as_str(), "--allow-command")))
            .collect();
        let permissions = crate::rules::operator(config, &self.rules, &commands, &workspace)?;
        // Checks --max-cost; the run keeps the figures in its limits.
        crate::provider::budget(provider, config)?;
        let limits = Limits {
            max_turns: self.max_iterations.or(config.agent.max_iterations).unwrap_or(Limits::default().max_turns),
            max_tool_calls: self.max_tool_calls,
            max_tokens: provider.max_total_tokens.or(config.budget.max_tokens),
            max_cost_usd: provider.max_cost.or(config.budget.max_cost_usd),
            max_wall_ms: self.max_seconds.map(|s| s.saturating_mul(1000)),
            ..Limits::default()
        };
        let output_schema = self.output_schema.as_deref().map(read_output_schema).transpose()?;
        let run_config = RunConfig {
            strategy: strategy(&self.strategy),
            system_prompt: self.system,
            approval: approval(self.approve.as_deref(), config),
            limits,
            reflect: self.reflect,
            tool_filter: ToolFilter { only: self.tools, except: self.no_tools },
            permissions,
            output_schema,
            ..RunConfig::default()
        };
        Ok(Prepared {
            task: self.task,
            workspace,
            config: run_config,
            session: self.session,
            mcp: self.mcp,
            run_id: self.run_id,
            allow_commands,
        })
    }
}

/// The output schema in `path`: JSON that compiles as a JSON Schema; the
/// error names the file and what is wrong.
fn read_output_schema(path: &std::path::Path) -> Result<serde_json::Value> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| HostError::Message(format!("--output-schema {shown}: cannot be read: {e}")))?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| HostError::Message(format!("--output-schema {shown}: not JSON: {e}")))?;
    if let Some(problem) = noesis_agent::output_schema_problem(&schema) {
        bail!("--output-schema {shown}: not a usable JSON Schema: {problem}");
    }
    Ok(schema)
}

impl Prepared {
    /// The run's workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Starts the run on `host` with `provider` as its own: its MCP servers
    /// started for it (confined by `sandbox`; `note` hears which), the
    /// session's memory, a fresh id (one that exists is refused) and its
    /// record. A tool filter naming no tool is refused with the tools
    /// there are.
    pub async fn start(
        self,
        host: &Host,
        provider: Arc<dyn Provider>,
        sandbox: noesis_sandbox::Settings,
    ) -> Result<(AgentRun, Equipped)> {
        let note = host.note.as_deref();
        let mcp = connect_mcp(mcp_specs(host.config(), &self.mcp)?, sandbox.clone(), &self.workspace, note).await?;
        let project_id = host.project.project_id.clone();
        let remembered = match &self.session {
            Some(name) => session_memory(host.store.as_ref(), &project_id, name).await?,
            None => String::new(),
        };
        let id = self.run_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        if host.store.agent_state(&id, None).await?.is_some() {
            bail!("--run-id {id}: a run with this id exists; resume it with `noesis agent resume {id}`");
        }
        let record = json!({"allow_commands": self.allow_commands, "session": self.session, "mcp": self.mcp});
        let new = NewRun {
            id,
            task: self.task,
            remembered,
            workspace: self.workspace,
            config: self.config,
            provider,
            sandbox,
            mcp,
            owns_mcp: true,
            record: record.as_object().cloned().unwrap_or_default(),
        };
        match host.start(new, now_ms()) {
            Err(HostError::UnknownTool { name, known }) => {
                bail!("--tool/--no-tool {name}: no such tool (the tools are {})", known.join(", "))
            }
            other => other,
        }
    }
}

/// The provider flags a stored run goes on with: `flags` when they (or
/// `LLM_PROVIDER`) name a provider, else the run's own provider, and its
/// model unless the flags (or `LLM_MODEL`) name one.
pub fn continued_flags(run: &AgentRun, flags: &ProviderArgs, env: &dyn Fn(&str) -> Option<String>) -> ProviderArgs {
    let mut flags = flags.clone();
    if flags.provider.is_none() && env("LLM_PROVIDER").is_none() {
        flags.provider = run.host["provider"].as_str().map(str::to_owned);
        if flags.model.is_none() && env("LLM_MODEL").is_none() {
            flags.model = run.host["model"].as_str().map(str::to_owned);
        }
    }
    flags
}

/// A new run from `run` as it stood at `step`: a fresh id, the original
/// and the step it was forked at recorded, ready to be driven on.
pub fn fork(mut run: AgentRun, step: i64) -> AgentRun {
    let original = std::mem::take(&mut run.id);
    run.id = uuid::Uuid::now_v7().to_string();
    run.forked_from = Some((original, u64::try_from(step).unwrap_or_default()));
    run.resume();
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_flag_wins_over_the_config_and_ask_is_the_default() {
        let mut config = Config::default();
        assert_eq!(approval(None, &config), ApprovalPolicy::Ask);
        config.agent.approve = Some("never".into());
        assert_eq!(approval(None, &config), ApprovalPolicy::Never);
        assert_eq!(approval(Some("auto"), &config), ApprovalPolicy::Auto);
        assert_eq!(approval(Some("ask"), &config), ApprovalPolicy::Ask);
    }

    #[test]
    fn strategies_by_name_default_to_react() {
        assert_eq!(strategy("single-shot"), Strategy::SingleShot);
        assert_eq!(strategy("chain-of-thought"), Strategy::ChainOfThought);
        assert_eq!(strategy("react"), Strategy::React);
    }

    #[test]
    fn a_launch_becomes_limits_rules_and_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.agent.allow_commands = vec!["cargo".into()];
        config.agent.max_iterations = Some(7);
        let launch = Launch {
            task: "fix it".into(),
            workspace: dir.path().to_path_buf(),
            strategy: "single-shot".into(),
            max_tool_calls: 5,
            max_seconds: Some(2),
            allow_commands: vec!["make".into()],
            tools: vec!["read_file".into()],
            approve: Some("auto".into()),
            ..Launch::default()
        };
        let p = launch.prepare(&config, &ProviderArgs::default()).unwrap();
        assert_eq!(p.config.strategy, Strategy::SingleShot);
        assert_eq!(p.config.approval, ApprovalPolicy::Auto);
        assert_eq!((p.config.limits.max_turns, p.config.limits.max_tool_calls), (7, 5));
        assert_eq!(p.config.limits.max_wall_ms, Some(2000));
        assert_eq!(p.config.tool_filter.only, ["read_file"]);
        assert_eq!(p.allow_commands, ["cargo", "make"]);
        assert_eq!(p.workspace().root(), Workspace::new(dir.path()).unwrap().root());
    }

    #[test]
    fn an_empty_task_or_a_missing_workspace_is_refused() {
        let config = Config::default();
        let flags = ProviderArgs::default();
        let empty = Launch { task: "  ".into(), ..Launch::default() };
        let e = empty.prepare(&config, &flags).err().unwrap().to_string();
        assert!(e.starts_with("the task is empty"), "{e}");
        let nowhere = Launch { task: "t".into(), workspace: "/no/such/folder".into(), ..Launch::default() };
        let e = nowhere.prepare(&config, &flags).err().unwrap().to_string();
        assert!(e.starts_with("--workspace /no/such/folder: not a usable folder"), "{e}");
    }

    #[test]
    fn a_continued_run_keeps_its_provider_unless_the_flags_or_the_environment_name_one() {
        let mut run = AgentRun::new("r1", "t", RunConfig::default(), 0);
        run.host = json!({"provider": "anthropic", "model": "claude"});
        let none = |_: &str| None;
        let kept = continued_flags(&run, &ProviderArgs::default(), &none);
        assert_eq!((kept.provider.as_deref(), kept.model.as_deref()), (Some("anthropic"), Some("claude")));
        let flags = ProviderArgs { provider: Some("openai".into()), ..ProviderArgs::default() };
        let chosen = continued_flags(&run, &flags, &none);
        assert_eq!((chosen.provider.as_deref(), chosen.model), (Some("openai"), None));
        let model_env = |k: &str| (k == "LLM_MODEL").then(|| "m".to_owned());
        let mixed = continued_flags(&run, &ProviderArgs::default(), &model_env);
        assert_eq!((mixed.provider.as_deref(), mixed.model), (Some("anthropic"), None));
        let provider_env = |k: &str| (k == "LLM_PROVIDER").then(|| "ollama".to_owned());
        assert_eq!(continued_flags(&run, &ProviderArgs::default(), &provider_env).provider, None);
    }

    #[test]
    fn a_fork_is_a_new_run_that_names_its_origin() {
        let run = AgentRun::new("r1", "t", RunConfig::default(), 0);
        let forked = fork(run, 4);
        assert_ne!(forked.id, "r1");
        assert_eq!(forked.forked_from, Some(("r1".to_owned(), 4)));
    }
}
