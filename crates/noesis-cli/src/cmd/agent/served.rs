//! Agent runs started over HTTP (`noesis serve`): the same runs as `noesis
//! agent`'s — the same tools over a workspace, the same store, frames when
//! they finish — created from a request, with the provider a request may
//! choose limited to the server's allow-list, and the approval policy,
//! limits and tools limited to what the operator set (a request narrows).

use std::sync::Arc;

use noesis_agent::{AgentRun, ApprovalPolicy, RunConfig, Strategy, ToolFilter, Toolbox, Workspace};
use noesis_llm::{ChatResponse, PriceTable, Provider};
use noesis_modules::search::SearchPath;
use noesis_serve::agents::{AgentHost, AgentRequest, Ceiling};
use noesis_store::Store;
use serde_json::{Value, json};

use super::drive::{now_ms, state_of};
use crate::config::Config;
use crate::provider::Providers;

/// What `noesis serve` gives its agent runs.
pub(crate) struct ServedAgents {
    pub(crate) providers: Arc<Providers>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) project: noesis_frames::project::Project,
    pub(crate) workspace: Workspace,
    pub(crate) config: Config,
    pub(crate) search: SearchPath,
    pub(crate) prices: Arc<PriceTable>,
    /// The configured MCP servers, started once for every run.
    pub(crate) mcp: Option<Arc<noesis_mcp::McpServers>>,
    /// How the runs' commands are confined (the operator's settings).
    pub(crate) sandbox: noesis_sandbox::Settings,
    /// Who starts the runs: `http` (`noesis serve`) or `mcp` (`noesis
    /// mcp`); each resumes the unfinished runs of its own kind.
    pub(crate) origin: &'static str,
    /// Which runs this process may drive (see [`super::lease`]).
    pub(crate) leases: Arc<super::lease::Leases>,
    /// The most a run gets (the operator's `--approve`, `[agent]`, `[budget]`).
    pub(crate) ceiling: Ceiling,
}

impl ServedAgents {
    fn provider(&self, name: Option<&str>, model: Option<&str>) -> Result<Arc<dyn Provider>, String> {
        let provider = self.providers.for_agent(name, model)?;
        Ok(super::drive::with_text_tools(provider, &self.config))
    }

    fn router(&self, provider: &Arc<dyn Provider>) -> Arc<dyn noesis_agent::ModelRouter> {
        super::drive::router(
            provider,
            &crate::provider::ProviderArgs::default(),
            &self.config,
            Some(Arc::clone(&self.providers)),
        )
    }

    /// The operator's rules for a run: `[permissions]` and the config's
    /// `allow_commands` (a request may add rules that only narrow them).
    fn permissions(&self) -> Result<noesis_agent::Permissions, String> {
        let commands: Vec<(&str, &str)> =
            self.config.agent.allow_commands.iter().map(|c| (c.as_str(), "[agent] allow_commands")).collect();
        super::rules::operator(&self.config, &super::rules::RuleFlags::default(), &commands, &self.workspace)
            .map_err(|e| format!("{e:#}"))
    }

    fn tools(
        &self,
        run_id: &str,
        depth: u64,
        provider: Arc<dyn Provider>,
        permissions: noesis_agent::Permissions,
        sandbox: noesis_sandbox::Settings,
    ) -> Toolbox {
        let host = super::tools::Host {
            search: self.search.clone(),
            provider: Arc::clone(&provider),
            store: Arc::clone(&self.store),
            project_id: self.project.project_id.clone(),
            run_id: run_id.to_owned(),
            depth,
            router: Some(ServedAgents::router(self, &provider)),
            visible: None,
            redactor: self.config.redactor(),
        };
        let tools = super::tools::with_host_tools(
            Toolbox::with_permissions(self.workspace.clone(), permissions)
                .with_sandbox(sandbox, Vec::new())
                .with_redactor(self.config.redactor()),
            &host,
        );
        super::drive::with_mcp(tools, self.mcp.as_ref())
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
        let all = self.tools(id, 0, Arc::clone(&provider), permissions.clone(), self.sandbox.clone()).decls();
        for name in &request.tools {
            if !all.iter().any(|d| &d.name == name) {
                let known: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
                return Err(format!("`tools`: no tool `{name}` (the tools are {})", known.join(", ")));
            }
        }
        let limits = self.ceiling.limits(&request.limits)?;
        let offered = all.into_iter().filter(|d| request.tools.is_empty() || request.tools.contains(&d.name)).collect();
        let config = RunConfig {
            strategy,
            system_prompt: request.system.clone(),
            tools: if strategy == Strategy::SingleShot { Vec::new() } else { offered },
            approval,
            limits,
            reflect: request.reflect,
            tool_filter: ToolFilter { only: request.tools.clone(), except: Vec::new() },
            permissions,
            ..RunConfig::default()
        };
        let mut run = AgentRun::new(id, request.task.clone(), config, now_ms());
        run.host = json!({
            "task": request.task,
            "workspace": self.workspace.root().to_string_lossy(),
            "allow_commands": self.config.agent.allow_commands,
            "provider": provider.name(),
            "model": provider.model(),
            "project_id": self.project.project_id,
            "origin": self.origin,
            "sandbox": self.sandbox,
            "lease": self.leases.own(),
        });
        Ok(run)
    }

    fn router(&self, provider: &Arc<dyn Provider>) -> Option<Arc<dyn noesis_agent::ModelRouter>> {
        Some(ServedAgents::router(self, provider))
    }

    async fn equip(&self, run: &AgentRun) -> Result<(Arc<dyn Provider>, Arc<Toolbox>), String> {
        let provider = match run.host["provider"].as_str() {
            Some(name) => {
                super::drive::with_text_tools(self.providers.pinned(name, run.host["model"].as_str())?, &self.config)
            }
            None => self.provider(None, None)?,
        };
        let depth = run.host["depth"].as_u64().unwrap_or(0);
        let sandbox = crate::cmd::sandbox::recorded(&run.host).map_err(|e| format!("{e:#}"))?;
        let tools = self.tools(&run.id, depth, Arc::clone(&provider), run.config.permissions.clone(), sandbox);
        Ok((provider, Arc::new(tools)))
    }

    async fn save(&self, run: &AgentRun) -> Result<(), String> {
        self.store.save_agent_state(&state_of(run, &self.project.project_id)).await.map_err(|e| e.to_string())
    }

    async fn load(&self, id: &str) -> Result<Option<AgentRun>, String> {
        let Some(state) = self.store.agent_state(id, None).await.map_err(|e| e.to_string())? else { return Ok(None) };
        let mut run = AgentRun::from_json(&state.state).map_err(|e| format!("run `{id}` cannot be read: {e}"))?;
        super::rules::restore(&mut run);
        Ok(Some(run))
    }

    async fn list(&self, limit: u32) -> Result<Vec<Value>, String> {
        let runs = self.store.agent_runs(&self.project.project_id, limit).await.map_err(|e| e.to_string())?;
        Ok(runs
            .into_iter()
            .map(|r| {
                json!({"run_id": r.run_id, "task": r.task, "status": r.status, "step": r.latest_step,
                       "forked_from": r.forked_from})
            })
            .collect())
    }

    async fn unfinished(&self) -> Result<Vec<String>, String> {
        let runs = self.store.agent_runs(&self.project.project_id, 1000).await.map_err(|e| e.to_string())?;
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

    async fn finished(&self, run: &mut AgentRun) {
        if let Err(e) = super::drive::record_frames(self.store.as_ref(), &self.project, run).await {
            crate::out::note(&format!("warning: run {} was not recorded as frames: {e:#}", run.id));
        }
    }
}
