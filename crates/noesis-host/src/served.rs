//! Agent runs started by clients of a server (`noesis serve`, `noesis
//! mcp`): the same runs as `noesis agent`'s — the same tools over a
//! workspace, the same store, frames when they finish — created from a
//! request, with the provider a request may choose limited to the server's
//! allow-list, and the approval policy, limits and tools limited to what
//! the operator set (a request narrows). A run is resumed only in the
//! workspace it recorded, with the MCP servers it had: otherwise it is
//! refused (see [`Host::check`]).

use std::sync::Arc;

use noesis_agent::supervisor::{AgentHost, AgentRequest, Ceiling, RunsPolicy};
use noesis_agent::{AgentRun, ApprovalPolicy, RunConfig, Strategy, ToolFilter, Toolbox};
use noesis_llm::{ChatResponse, PriceTable, Provider};
use serde_json::{Value, json};

use crate::HostError;
use crate::host::{Host, NewRun, Reach};
use crate::provider::with_text_tools;
use crate::runs::{now_ms, record_frames};

/// What a server gives its agent runs.
pub struct ServedAgents {
    /// The host, bound to the server's workspace (see [`Reach::Bound`]).
    pub host: Host,
    /// How the runs' commands are confined (the operator's settings).
    pub sandbox: noesis_sandbox::Settings,
    /// Who starts the runs: `http` (`noesis serve`) or `mcp` (`noesis
    /// mcp`); each resumes the unfinished runs of its own kind.
    pub origin: &'static str,
    /// Which runs this process may drive (see [`crate::lease`]).
    pub leases: Arc<crate::lease::Leases>,
    /// The most a run gets (the operator's `--approve`, `[agent]`, `[budget]`).
    pub ceiling: Ceiling,
    /// Where a warning goes (a run not recorded as frames).
    pub warn: crate::host::Note,
    prices: Arc<PriceTable>,
    /// The store leases of the runs this server steps.
    holds: crate::hold::Holds,
    /// What was stored last of each run it steps.
    logs: std::sync::Mutex<std::collections::HashMap<String, crate::runs::RunLog>>,
}

impl ServedAgents {
    /// Runs over `host`, which must be bound to one workspace.
    pub fn new(
        host: Host,
        sandbox: noesis_sandbox::Settings,
        origin: &'static str,
        leases: Arc<crate::lease::Leases>,
        ceiling: Ceiling,
        warn: crate::host::Note,
    ) -> ServedAgents {
        let prices = host.prices();
        let kind = if origin == "http" { "serve" } else { origin };
        let holds = crate::hold::Holds::new(Arc::clone(&host.store), crate::hold::holder_name(kind));
        ServedAgents { host, sandbox, origin, leases, ceiling, warn, prices, holds, logs: Default::default() }
    }

    fn workspace(&self) -> Result<&noesis_agent::Workspace, String> {
        match &self.host.reach {
            Reach::Bound { workspace, .. } => Ok(workspace),
            Reach::Anywhere => Err("a server's agent host must be bound to its workspace".into()),
        }
    }

    fn mcp(&self) -> Option<&Arc<noesis_mcp::McpServers>> {
        match &self.host.reach {
            Reach::Bound { mcp, .. } => mcp.as_ref(),
            Reach::Anywhere => None,
        }
    }

    fn provider(&self, name: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Provider>, String> {
        let provider = self.host.providers.for_agent(name, model)?;
        Ok(with_text_tools(provider, self.host.config()))
    }

    /// The operator's rules for a run: `[permissions]` and the config's
    /// `allow_commands` (a request may add rules that only narrow them).
    fn permissions(&self) -> Result<noesis_agent::Permissions, String> {
        let config = self.host.config();
        let commands: Vec<(&str, &str)> =
            config.agent.allow_commands.iter().map(|c| (c.as_str(), "[agent] allow_commands")).collect();
        crate::rules::operator(config, &crate::rules::RuleFlags::default(), &commands, self.workspace()?)
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl AgentHost for ServedAgents {
    fn create(&self, id: &str, request: &AgentRequest) -> Result<AgentRun, String> {
        let strategy = match request.strategy.as_deref() {
            None | Some("react") => Strategy::React,
            Some("single-shot") => Strategy::SingleShot,
            Some("chain-of-thought") => Strategy::ChainOfThought,
            Some(other) => {
                return Err(format!("`strategy`: `{other}` is not react, single-shot or chain-of-thought"));
            }
        };
        let mut approval = self.ceiling.approval(request.approve.as_deref())?;
        if self.origin == "mcp" && approval == ApprovalPolicy::Ask {
            // Nobody can be asked over MCP: under an operator's `ask`, calls
            // that change anything are denied (and the agent told).
            approval = ApprovalPolicy::Never;
        }
        let provider = self.provider(request.provider.as_deref(), request.model.as_deref())?;
        let permissions = self.permissions()?;
        let limits = self.ceiling.limits(&request.limits)?;
        if let Some(problem) = request.output_schema.as_ref().and_then(noesis_agent::output_schema_problem) {
            return Err(format!("`output_schema`: not a usable JSON Schema: {problem}"));
        }
        let config = RunConfig {
            strategy,
            system_prompt: request.system.clone(),
            approval,
            limits,
            reflect: request.reflect,
            tool_filter: ToolFilter { only: request.tools.clone(), except: Vec::new() },
            permissions,
            output_schema: request.output_schema.clone(),
            ..RunConfig::default()
        };
        let record = json!({
            "allow_commands": self.host.config().agent.allow_commands,
            "origin": self.origin,
            "lease": self.leases.own(),
            "stream": request.stream,
        });
        let new = NewRun {
            id: id.to_owned(),
            task: request.task.clone(),
            remembered: String::new(),
            workspace: self.workspace()?.clone(),
            config,
            provider,
            sandbox: self.sandbox.clone(),
            mcp: self.mcp().cloned(),
            owns_mcp: false,
            record: record.as_object().cloned().unwrap_or_default(),
        };
        match self.host.start(new, now_ms()) {
            Ok((run, _)) => Ok(run),
            Err(HostError::UnknownTool { name, known }) => {
                Err(format!("`tools`: no tool `{name}` (the tools are {})", known.join(", ")))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    fn check(&self, run: &AgentRun) -> Result<(), String> {
        self.host.check(run).map(|_| ()).map_err(|e| e.to_string())
    }

    fn router(&self, provider: &Arc<dyn Provider>) -> Option<Arc<dyn noesis_agent::ModelRouter>> {
        Some(self.host.router(provider))
    }

    async fn equip(&self, run: &AgentRun) -> Result<(Arc<dyn Provider>, Arc<Toolbox>), String> {
        // Checked first: a run this server cannot provide for is refused
        // before any provider is made.
        self.host.check(run).map_err(|e| e.to_string())?;
        let provider = match run.host["provider"].as_str() {
            Some(name) => {
                with_text_tools(self.host.providers.pinned(name, run.host["model"].as_str())?, self.host.config())
            }
            None => self.provider(None, None)?,
        };
        let equipped = self.host.equip(run, provider).await.map_err(|e| e.to_string())?;
        Ok((equipped.provider, equipped.tools))
    }

    async fn save(&self, run: &AgentRun) -> Result<(), String> {
        let taken = self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&run.id);
        let mut log = taken.unwrap_or_default();
        let lease = self.holds.lease(&run.id);
        let saved = log.save(self.host.store.as_ref(), lease.as_ref(), run, &self.host.project.project_id).await;
        match &saved {
            Err(e) if e.is_fenced() => self.holds.lost(&run.id),
            Err(_) => {}
            Ok(()) => {
                self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(run.id.clone(), log);
                // As the command line's drive does: files snapshotted before
                // a batch that may change them, so the run can be rewound.
                if let (Some(home), Ok(workspace)) = (&self.host.home, self.workspace())
                    && let Err(e) = crate::rewind::Rewinds::new(home).before_changes(run, workspace.root())
                {
                    (self.warn)(&crate::rewind::unsnapshotted(run, &e));
                }
            }
        }
        saved.map_err(|e| e.to_string())
    }

    async fn hold(&self, id: &str) -> Result<noesis_runtime::CancellationToken, String> {
        self.holds.hold(id).await.map_err(|e| e.to_string())
    }

    async fn record_events(&self, id: &str, events: &[noesis_agent::events::Event]) -> Result<(), String> {
        let at = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        let kept: Vec<noesis_store::RunEvent> = events
            .iter()
            .map(|e| noesis_store::RunEvent {
                seq: i64::try_from(e.id).unwrap_or(i64::MAX),
                kind: e.kind.clone(),
                data: e.data.clone(),
                at,
            })
            .collect();
        self.host.store.append_run_events(id, &kept).await.map_err(|e| e.to_string())
    }

    async fn recorded_events(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<noesis_agent::events::Event>, String> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let kept = self.host.store.run_events(id, after, limit).await.map_err(|e| e.to_string())?;
        let topic = noesis_agent::events::run_topic(id);
        Ok(kept
            .into_iter()
            .map(|e| noesis_agent::events::Event {
                id: u64::try_from(e.seq).unwrap_or_default(),
                ..noesis_agent::events::Event::new(&topic, &e.kind, id, e.data)
            })
            .collect())
    }

    async fn last_event(&self, id: &str) -> Result<u64, String> {
        let last = self.host.store.last_run_event(id).await.map_err(|e| e.to_string())?;
        Ok(u64::try_from(last).unwrap_or_default())
    }

    async fn release(&self, id: &str) {
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        self.holds.release(id).await;
    }

    async fn load(&self, id: &str) -> Result<Option<AgentRun>, String> {
        let Some(state) = self.host.store.agent_state(id, None).await.map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let mut run = AgentRun::from_json(&state.state).map_err(|e| format!("run `{id}` cannot be read: {e}"))?;
        crate::rules::restore(&mut run);
        Ok(Some(run))
    }

    async fn list(&self, limit: u32) -> Result<Vec<Value>, String> {
        let runs = self.host.store.agent_runs(&self.host.project.project_id, limit).await.map_err(|e| e.to_string())?;
        Ok(runs
            .into_iter()
            .map(|r| {
                json!({"run_id": r.run_id, "task": r.task, "status": r.status, "step": r.latest_step,
                       "forked_from": r.forked_from})
            })
            .collect())
    }

    async fn unfinished(&self) -> Result<Vec<String>, String> {
        let runs = self.host.store.agent_runs(&self.host.project.project_id, 1000).await.map_err(|e| e.to_string())?;
        let mut ids = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        for r in runs {
            // Only runs a process of this kind started: a run of `noesis
            // agent` that stopped is its owner's to resume.
            let open = matches!(r.status.as_str(), "running" | "awaiting_approval" | "cancelled");
            if !open {
                continue;
            }
            let Some(run) = self.load(&r.run_id).await? else { continue };
            if run.host["origin"] != self.origin || (r.status == "cancelled" && run.host["server_stopped"] != true) {
                continue;
            }
            match run.host["lease"].as_str() {
                Some(lease) => {
                    named.insert(lease.to_owned());
                    // A run whose process lives is that process's.
                    if self.leases.take(lease) {
                        ids.push(r.run_id);
                    }
                }
                // Started before leases: only a server resumed those.
                None if self.origin == "http" => ids.push(r.run_id),
                None => {}
            }
        }
        self.leases.sweep(&named);
        Ok(ids)
    }

    async fn claim(&self, id: &str) -> Result<bool, String> {
        let Some(run) = self.load(id).await? else { return Ok(true) };
        Ok(run.host["lease"].as_str().is_none_or(|lease| self.leases.take(lease)))
    }

    fn price(&self, reply: &ChatResponse) -> f64 {
        reply.usage.and_then(|u| self.prices.cost(&reply.model, u)).unwrap_or(0.0)
    }

    fn prices(&self) -> Option<Arc<noesis_llm::PriceTable>> {
        Some(Arc::clone(&self.prices))
    }

    async fn finished(&self, run: &mut AgentRun) {
        if let Err(e) = record_frames(self.host.store.as_ref(), &self.host.project, run).await {
            (self.warn)(&format!("warning: run {} was not recorded as frames: {e}", run.id));
        }
    }
}

/// What agent runs get at most, and how many may be live: the operator's
/// `approve` (else `[agent] approve`, else ask), `[agent] max_iterations`
/// and `[budget]`; `http`: whether clients may start them over HTTP.
pub fn runs_policy(
    approve: Option<&str>,
    config: &noesis_config::Config,
    http: bool,
    max_runs: usize,
) -> crate::Result<RunsPolicy> {
    let approve = match approve.or(config.agent.approve.as_deref()) {
        Some(text) => noesis_agent::supervisor::parse_approval(text).map_err(HostError::Message)?,
        None => ApprovalPolicy::Ask,
    };
    let limits = noesis_agent::Limits {
        max_turns: config.agent.max_iterations.unwrap_or(noesis_agent::Limits::default().max_turns),
        max_tokens: config.budget.max_tokens,
        max_cost_usd: config.budget.max_cost_usd,
        ..noesis_agent::Limits::default()
    };
    Ok(RunsPolicy { http, max_runs, ceiling: Ceiling { approve, limits } })
}

/// What a server's agent runs are bound to.
pub struct Binding {
    /// Where `run_module` finds modules.
    pub search: noesis_modules::search::SearchPath,
    /// Runs and frames.
    pub store: Arc<dyn noesis_store::Store>,
    /// The server's project.
    pub project: noesis_frames::project::Project,
    /// The server's providers.
    pub providers: Arc<crate::provider::Providers>,
    /// The one workspace of every run: the server's folder.
    pub folder: std::path::PathBuf,
    /// The noesis home, for the operator's own skills (`skills/`).
    pub home: Option<std::path::PathBuf>,
    /// How the runs' commands (and the MCP servers) are confined.
    pub sandbox: noesis_sandbox::Settings,
    /// `http` or `mcp` (see [`ServedAgents::origin`]).
    pub origin: &'static str,
    /// Where the leases of the runs this process drives are kept
    /// (`$NOESIS_HOME/agent-leases`).
    pub leases: std::path::PathBuf,
    /// The most a run gets.
    pub ceiling: Ceiling,
    /// Where remarks and warnings go (`starting MCP server …`).
    pub note: crate::host::Note,
}

/// The agent runs of a server: bound to its folder, with `[mcp.servers]`
/// started once for every run.
pub async fn bind(b: Binding) -> crate::Result<ServedAgents> {
    let workspace = noesis_agent::Workspace::new(&b.folder)
        .map_err(|e| HostError::Message(format!("the current folder cannot be the agents' workspace: {e}")))?;
    let specs = crate::host::mcp_specs(b.providers.config(), &[])?;
    let mcp = crate::host::connect_mcp(specs, b.sandbox.clone(), &workspace, Some(b.note.as_ref())).await?;
    let host = Host {
        search: b.search,
        store: b.store,
        project: b.project,
        providers: b.providers,
        reach: Reach::Bound { workspace, mcp },
        note: None,
        home: b.home,
    };
    let leases = Arc::new(crate::lease::Leases::new(b.leases)?);
    Ok(ServedAgents::new(host, b.sandbox, b.origin, leases, b.ceiling, b.note))
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn the_operators_flag_wins_over_the_config_and_the_config_sets_the_limits() {
        let mut config = noesis_config::Config::default();
        config.agent.approve = Some("never".into());
        config.agent.max_iterations = Some(4);
        config.budget.max_cost_usd = Some(1.5);
        let p = runs_policy(None, &config, true, 3).unwrap();
        assert_eq!((p.http, p.max_runs, p.ceiling.approve), (true, 3, ApprovalPolicy::Never));
        assert_eq!((p.ceiling.limits.max_turns, p.ceiling.limits.max_cost_usd), (4, Some(1.5)));
        assert_eq!(runs_policy(Some("auto"), &config, false, 1).unwrap().ceiling.approve, ApprovalPolicy::Auto);
        assert!(runs_policy(Some("sometimes"), &config, false, 1).is_err());
        let p = runs_policy(None, &noesis_config::Config::default(), false, 1).unwrap();
        assert_eq!(p.ceiling.approve, ApprovalPolicy::Ask);
    }
}
