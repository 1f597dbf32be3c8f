//! The agent host: what turns a stored run into a drivable one. A run's
//! record (`run.host`) says where it works and how it is confined — its
//! workspace, sandbox settings, the MCP servers it had, its depth — and its
//! config carries its permission rules; [`Host::equip`] rebuilds exactly
//! that around it, with the provider the front end chose, the role router
//! and the prices. A front end that cannot provide what the run recorded (a
//! server bound to another folder, an MCP server it cannot start) is
//! refused with a message saying where the run can go on, never silently
//! given tools over some other folder.

use std::sync::Arc;

use noesis_agent::{AgentRun, ModelRouter, Permissions, RunConfig, Strategy, ToolDecl, Toolbox, Workspace};
use noesis_config::Config;
use noesis_frames::project::Project;
use noesis_llm::{PriceTable, Provider};
use noesis_mcp::{McpServers, ServerSpec};
use noesis_modules::search::SearchPath;
use noesis_sandbox::Settings;
use noesis_store::Store;
use serde_json::{Value, json};

use crate::provider::{Providers, prices};
use crate::tools::{HostTools, with_host_tools};
use crate::{HostError, Result, bail};

/// Where a host's remarks go: the front end's way of telling a person.
pub type Note = Arc<dyn Fn(&str) + Send + Sync>;

/// Where a front end may drive runs.
pub enum Reach {
    /// In whatever workspace a run recorded, with the MCP servers it was
    /// started with started again for it (the command line).
    Anywhere,
    /// In one workspace only, with MCP servers started once for every run
    /// (a server): a run recorded elsewhere, or with an MCP server not
    /// among these, is refused.
    Bound {
        /// The workspace.
        workspace: Workspace,
        /// The MCP servers every run shares.
        mcp: Option<Arc<McpServers>>,
    },
}

/// What a front end offers the runs it drives.
pub struct Host {
    /// Where `run_module` finds modules.
    pub search: SearchPath,
    /// Runs and frames.
    pub store: Arc<dyn Store>,
    /// The project runs belong to unless they recorded their own.
    pub project: Project,
    /// Providers, and the config and flags they are made from.
    pub providers: Arc<Providers>,
    /// Where runs may be driven.
    pub reach: Reach,
    /// Where the host's remarks go (`starting MCP server …`); none: nowhere.
    pub note: Option<Note>,
    /// The noesis home (`$NOESIS_HOME`, else `~/.noesis`), whose `skills/`
    /// holds the person's own skills; none: only a workspace's skills.
    pub home: Option<std::path::PathBuf>,
}

/// A run made drivable: hand these to a [`noesis_agent::Driver`].
pub struct Equipped {
    /// The run's own provider.
    pub provider: Arc<dyn Provider>,
    /// Its tools, over its workspace, under its rules and sandbox.
    pub tools: Arc<Toolbox>,
    /// Chooses each call's provider by its role.
    pub router: Arc<dyn ModelRouter>,
    /// Prices of replies.
    pub prices: Arc<PriceTable>,
    /// MCP servers started for this run alone: stop them when the drive ends.
    pub started: Option<Arc<McpServers>>,
    /// Questions its MCP servers ask mid-call, for the front end that
    /// drives it ([`crate::drive`] relays them).
    pub questions: crate::questions::Questions,
}

/// A new run, as a front end asks for it.
pub struct NewRun {
    /// Its id.
    pub id: String,
    /// The task as the person gave it (what is listed and recorded).
    pub task: String,
    /// What the model is told after the task (an agent session's memory).
    pub remembered: String,
    /// Its workspace.
    pub workspace: Workspace,
    /// Its settings; `tools` is made here from what is offered and the
    /// `tool_filter` (none for a single shot).
    pub config: RunConfig,
    /// Its own provider.
    pub provider: Arc<dyn Provider>,
    /// How its commands are confined.
    pub sandbox: Settings,
    /// The MCP servers whose tools it has.
    pub mcp: Option<Arc<McpServers>>,
    /// Whether those servers were started for this run alone (the caller
    /// then stops them when the drive ends).
    pub owns_mcp: bool,
    /// What else its record says (`session`, `mcp` flags, `origin`,
    /// `lease`, `allow_commands`).
    pub record: serde_json::Map<String, Value>,
}

/// What a run's record says about where and how it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Its workspace.
    pub workspace: std::path::PathBuf,
    /// How its commands are confined.
    pub sandbox: Settings,
    /// MCP servers given on its command line (`NAME=COMMAND`), started
    /// again from the record.
    pub mcp_flags: Vec<String>,
    /// Every MCP server whose tools it had, by name (runs recorded before
    /// this was kept: unknown).
    pub mcp_servers: Option<Vec<String>>,
    /// How deep a sub-agent it is (0: started by a person).
    pub depth: u64,
    /// The project it belongs to, when it recorded one.
    pub project_id: Option<String>,
}

/// The settings a stored run was started with (`host.sandbox`); a run
/// stored before the sandbox existed is confined with the defaults.
pub fn recorded_sandbox(host: &Value) -> Result<Settings> {
    match host.get("sandbox") {
        None | Some(Value::Null) => Ok(Settings::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| HostError::Message(format!("the run's recorded sandbox settings: {e}"))),
    }
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

impl Recorded {
    /// Reads `run.host`.
    pub fn of(run: &AgentRun) -> Result<Recorded> {
        let Some(workspace) = run.host["workspace"].as_str() else {
            bail!("run {} does not name its workspace", run.id);
        };
        Ok(Recorded {
            workspace: workspace.into(),
            sandbox: recorded_sandbox(&run.host)?,
            mcp_flags: strings(&run.host["mcp"]).unwrap_or_default(),
            mcp_servers: strings(&run.host["mcp_servers"]),
            depth: run.host["depth"].as_u64().unwrap_or(0),
            project_id: run.host["project_id"].as_str().map(str::to_owned),
        })
    }
}

/// The MCP servers of `config` and of `flags` (`--mcp NAME=CMD`, which win
/// over the config's of the same name).
pub fn mcp_specs(config: &Config, flags: &[String]) -> Result<Vec<ServerSpec>> {
    let mut specs = Vec::new();
    for (name, entry) in &config.mcp.servers {
        specs.push(entry.spec(name, "noesis.toml")?);
    }
    for flag in flags {
        let spec = ServerSpec::parse_flag(flag).map_err(|e| HostError::Message(format!("--mcp {flag}: {e}")))?;
        specs.retain(|s| s.name != spec.name);
        specs.push(spec);
    }
    Ok(specs)
}

/// Starts `specs` confined by `settings` over `workspace`; `None` when
/// there are none, or none started. `note` hears which, and each that
/// could not start (it is left out; the others serve the run).
pub async fn connect_mcp(
    specs: Vec<ServerSpec>,
    settings: Settings,
    workspace: &Workspace,
    note: Option<&(dyn Fn(&str) + Send + Sync)>,
) -> Result<Option<Arc<McpServers>>> {
    if specs.is_empty() {
        return Ok(None);
    }
    if let Some(note) = note {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        note(&format!("starting MCP server{} {}", if names.len() == 1 { "" } else { "s" }, names.join(", ")));
    }
    let confine = noesis_mcp::Confine { settings, workspace: workspace.root().to_path_buf() };
    let (servers, failed) =
        McpServers::connect_each(specs, confine).await.map_err(|e| HostError::Message(e.to_string()))?;
    // One server that cannot start costs its own tools, not the run.
    if let Some(note) = note {
        for e in &failed {
            note(&format!("warning: left out: {e}"));
        }
    }
    Ok((!servers.names().is_empty()).then(|| Arc::new(servers)))
}

/// `tools` with the MCP servers' tools.
pub fn with_mcp(tools: Toolbox, mcp: Option<&Arc<McpServers>>) -> Toolbox {
    match mcp {
        Some(servers) => tools.with_source(Arc::clone(servers) as Arc<dyn noesis_agent::ToolSource>),
        None => tools,
    }
}

/// `tools` with the MCP servers' tools as one run's: a server's model call
/// made during one of its calls goes through `router` (as
/// [`noesis_mcp::SAMPLING_ROLE`]), priced with `prices` and counted as the
/// call's spend, so the run's budget meters it. It is made only within a
/// call the run's rules already let run, so it needs no decision of its
/// own. A server's question for a person goes to `questions`, which the
/// drive hands to its front end.
pub fn with_mcp_for_run(
    tools: Toolbox,
    mcp: Option<&Arc<McpServers>>,
    router: Arc<dyn ModelRouter>,
    prices: Arc<PriceTable>,
    questions: &crate::questions::Questions,
) -> Toolbox {
    match mcp {
        Some(servers) => {
            let sampler = noesis_mcp::RouterSampler { router, prices };
            let elicitor: Arc<dyn noesis_mcp::Elicitor> = Arc::new(questions.clone());
            let answers = noesis_mcp::Answers { sampler: Some(Arc::new(sampler)), elicitor: Some(elicitor) };
            tools.with_source(Arc::new(servers.for_run(answers)) as Arc<dyn noesis_agent::ToolSource>)
        }
        None => tools,
    }
}

/// What one run's toolbox is made of.
pub struct ToolsFor<'a> {
    /// The run.
    pub run_id: &'a str,
    /// Its depth.
    pub depth: u64,
    /// The project whose frames its tools search (none: the host's).
    pub project_id: Option<&'a str>,
    /// Its workspace.
    pub workspace: &'a Workspace,
    /// Its rules.
    pub permissions: Permissions,
    /// Its confinement.
    pub sandbox: Settings,
    /// Its provider (what `run_module` calls).
    pub provider: &'a Arc<dyn Provider>,
    /// The MCP servers whose tools it has.
    pub mcp: Option<&'a Arc<McpServers>>,
    /// Where their questions for a person go.
    pub questions: &'a crate::questions::Questions,
}

impl Host {
    /// The config the host's providers are made from.
    pub fn config(&self) -> &Config {
        self.providers.config()
    }

    /// The prices of replies.
    pub fn prices(&self) -> Arc<PriceTable> {
        prices(self.config())
    }

    /// The router of a run whose own provider is `provider`.
    pub fn router(&self, provider: &Arc<dyn Provider>) -> Arc<dyn ModelRouter> {
        Arc::new(crate::route::Router {
            default: Arc::clone(provider),
            providers: Arc::clone(&self.providers),
            config: self.config().clone(),
            prices: self.prices(),
        })
    }

    /// The skill folders of a run over `workspace`.
    pub fn skill_roots(&self, workspace: &Workspace) -> noesis_skills::Roots {
        noesis_skills::Roots { workspace: workspace.root().to_path_buf(), home: self.home.clone() }
    }

    /// The built-in tools over the workspace, checking the run's rules,
    /// commands confined and results redacted, with the host's own tools
    /// and the MCP servers'.
    pub fn toolbox(&self, t: ToolsFor<'_>) -> Toolbox {
        let redactor = self.config().redactor();
        let router = self.router(t.provider);
        let host = HostTools {
            search: self.search.clone(),
            provider: Arc::clone(t.provider),
            store: Arc::clone(&self.store),
            project_id: t.project_id.unwrap_or(&self.project.project_id).to_owned(),
            run_id: t.run_id.to_owned(),
            depth: t.depth,
            router: Some(Arc::clone(&router)),
            visible: None,
            redactor: Arc::clone(&redactor),
            skills: Some(self.skill_roots(t.workspace)),
        };
        let tools = Toolbox::with_permissions(t.workspace.clone(), t.permissions)
            .with_sandbox(t.sandbox, Vec::new())
            .with_redactor(redactor);
        with_mcp_for_run(with_host_tools(tools, &host), t.mcp, router, self.prices(), t.questions)
    }

    /// Every tool a new run over `workspace` may be offered, MCP tools
    /// included (the same list wherever the run is resumed).
    pub fn offered(&self, workspace: &Workspace, mcp: Option<&Arc<McpServers>>) -> Vec<ToolDecl> {
        let mut all = with_mcp(Toolbox::new(workspace.clone(), Vec::new()), mcp).decls();
        all.extend(crate::tools::decls(0));
        all
    }

    /// A new run made and equipped: the tools it is offered (every tool,
    /// or those its `tool_filter` keeps; a name nobody offers is
    /// [`HostError::UnknownTool`]), its record (task, workspace, provider,
    /// project, sandbox, the MCP servers it has, and `new.record`) and what
    /// drives it. `now` is its start in milliseconds.
    pub fn start(&self, new: NewRun, now: u64) -> Result<(AgentRun, Equipped)> {
        let NewRun { id, task, remembered, workspace, mut config, provider, sandbox, mcp, owns_mcp, record } = new;
        let all = self.offered(&workspace, mcp.as_ref());
        let filter = &config.tool_filter;
        if let Some(name) = filter.only.iter().chain(&filter.except).find(|n| !all.iter().any(|d| &d.name == *n)) {
            return Err(HostError::UnknownTool {
                name: name.clone(),
                known: all.iter().map(|d| d.name.clone()).collect(),
            });
        }
        // Found once, here: the index goes into the run's own config and
        // `load_skill` is declared in its tools only when there are skills,
        // so a resumed run keeps both as they were wherever it goes on.
        let skills = noesis_skills::discover(&self.skill_roots(&workspace));
        if let Some(note) = &self.note {
            for p in &skills.problems {
                note(&format!("warning: skill left out: {p}"));
            }
        }
        let offered: Vec<ToolDecl> = all
            .into_iter()
            .filter(|d| filter.only.is_empty() || filter.only.contains(&d.name))
            .filter(|d| !filter.except.contains(&d.name))
            .filter(|d| d.name != crate::tools::LOAD_SKILL || !skills.skills.is_empty())
            .collect();
        // A small model reads every tool's schema on every turn: unless the
        // person chose tools or said otherwise, it gets the compact set.
        let compact = self.config().agent.compact_tools.unwrap_or(provider.name() == "local") && filter.only.is_empty();
        let offered = if compact { crate::tools::compact(offered) } else { offered };
        config.tools = if config.strategy == Strategy::SingleShot { Vec::new() } else { offered };
        // Where the run compacts: the person's window, else the model's.
        if config.context.window_tokens.is_none() {
            config.context.window_tokens = self.config().agent.context_window.or_else(|| provider.context_window());
        }
        if config.tools.iter().any(|d| d.name == crate::tools::LOAD_SKILL) {
            let index = crate::tools::skill_index(&skills);
            config.system_prompt = Some(match config.system_prompt.take() {
                Some(p) if !p.trim().is_empty() => format!("{p}\n\n{index}"),
                _ => index,
            });
        }
        let full =
            if remembered.is_empty() { task.clone() } else { format!("{task}\n\nWhat you remember:\n{remembered}") };
        let mut run = AgentRun::new(id, full, config, now);
        let mcp_servers: Vec<&str> = mcp.as_ref().map(|m| m.names()).unwrap_or_default();
        let mut host = json!({
            "task": task,
            "workspace": workspace.root().to_string_lossy(),
            "provider": provider.name(),
            "model": provider.model(),
            "project_id": self.project.project_id,
            "sandbox": sandbox,
            "mcp_servers": mcp_servers,
        });
        // Recorded so the run's sub-agents keep them wherever it goes on.
        let agent = &self.config().agent;
        if agent.isolation.as_deref() == Some("worktree") {
            host["isolation"] = json!("worktree");
        }
        if !agent.anchors.is_empty() {
            host["anchors"] = json!(agent.anchors);
        }
        if let Some(h) = host.as_object_mut() {
            h.extend(record);
        }
        run.host = host;
        let questions = crate::questions::Questions::default();
        let tools = self.toolbox(ToolsFor {
            run_id: &run.id,
            depth: 0,
            project_id: None,
            workspace: &workspace,
            permissions: run.config.permissions.clone(),
            sandbox,
            provider: &provider,
            mcp: mcp.as_ref(),
            questions: &questions,
        });
        let equipped = Equipped {
            router: self.router(&provider),
            prices: self.prices(),
            tools: Arc::new(tools),
            provider,
            started: if owns_mcp { mcp } else { None },
            questions,
        };
        Ok((run, equipped))
    }

    /// Whether this host can drive `run` as recorded; the refusal says why    /// Whether this host can drive `run` as recorded; the refusal says why
    /// not and where it can go on.
    pub fn check(&self, run: &AgentRun) -> Result<Recorded> {
        let recorded = Recorded::of(run)?;
        let Reach::Bound { workspace, mcp } = &self.reach else { return Ok(recorded) };
        // A cluster's workflow waits on the run (`agent --on`): a server
        // that drove it would leave that workflow waiting for ever.
        if let Some(address) = run.host["cluster"]["address"].as_str() {
            return Err(HostError::Refused(format!(
                "run {} runs on the Temporal cluster at {address}; approve, deny and cancel it with `noesis agent approve/deny/cancel {}`",
                run.id, run.id
            )));
        }
        let same = Workspace::new(&recorded.workspace).is_ok_and(|w| w.root() == workspace.root());
        if !same {
            return Err(HostError::Refused(format!(
                "run {} works in {}, not in this server's workspace {}; resume it there with `noesis agent resume {}`",
                run.id,
                recorded.workspace.display(),
                workspace.root().display(),
                run.id
            )));
        }
        if !recorded.mcp_flags.is_empty() {
            return Err(HostError::Refused(format!(
                "run {} was started with MCP servers given on its command line ({}); this server cannot start them: resume it with `noesis agent resume {}`",
                run.id,
                recorded.mcp_flags.join(", "),
                run.id
            )));
        }
        let here: Vec<&str> = mcp.as_ref().map(|m| m.names()).unwrap_or_default();
        if let Some(missing) = recorded.mcp_servers.iter().flatten().find(|n| !here.contains(&n.as_str())) {
            return Err(HostError::Refused(format!(
                "run {} used the MCP server `{missing}`, which this server has not started; add it to [mcp.servers] of the server's config, or resume the run with `noesis agent resume {}`",
                run.id, run.id
            )));
        }
        Ok(recorded)
    }

    /// `run` made drivable with `provider` as its own: its recorded
    /// workspace, rules, sandbox and MCP servers, or the refusal of
    /// [`Host::check`].
    pub async fn equip(&self, run: &AgentRun, provider: Arc<dyn Provider>) -> Result<Equipped> {
        let recorded = self.check(run)?;
        let workspace = Workspace::new(&recorded.workspace)
            .map_err(|e| HostError::Message(format!("the run's workspace {}: {e}", recorded.workspace.display())))?;
        let (mcp, started) = match &self.reach {
            Reach::Bound { mcp, .. } => (mcp.clone(), None),
            Reach::Anywhere => {
                let specs = mcp_specs(self.config(), &recorded.mcp_flags)?;
                if let Some(missing) =
                    recorded.mcp_servers.iter().flatten().find(|n| !specs.iter().any(|s| &s.name == *n))
                {
                    return Err(HostError::Refused(format!(
                        "run {} used the MCP server `{missing}`, which is not configured here ([mcp.servers] of noesis.toml or the user config)",
                        run.id
                    )));
                }
                let note = self.note.as_deref();
                let started = connect_mcp(specs, recorded.sandbox.clone(), &workspace, note).await?;
                (started.clone(), started)
            }
        };
        let questions = crate::questions::Questions::default();
        let tools = self.toolbox(ToolsFor {
            run_id: &run.id,
            depth: recorded.depth,
            project_id: recorded.project_id.as_deref(),
            workspace: &workspace,
            permissions: run.config.permissions.clone(),
            sandbox: recorded.sandbox,
            provider: &provider,
            mcp: mcp.as_ref(),
            questions: &questions,
        });
        Ok(Equipped {
            router: self.router(&provider),
            provider,
            tools: Arc::new(tools),
            prices: self.prices(),
            started,
            questions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use noesis_agent::RunConfig;

    #[test]
    fn a_server_refuses_a_run_a_cluster_drives() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let store = rt.block_on(noesis_store::open(&dir.path().join("s.db").to_string_lossy())).unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let host = Host {
            search: SearchPath::new(&[], None, dir.path(), None),
            store: Arc::from(store),
            project: noesis_frames::project::identify(dir.path()).unwrap(),
            providers: Arc::new(crate::provider::Providers::new(Default::default(), Config::default())),
            reach: Reach::Bound { workspace, mcp: None },
            note: None,
            home: None,
        };
        let mut run = AgentRun::new("r1", "t", RunConfig::default(), 0);
        run.host = json!({"workspace": dir.path().to_string_lossy()});
        assert!(host.check(&run).is_ok(), "a run of the server's own workspace");
        run.host["cluster"] =
            json!({"address": "127.0.0.1:7233", "namespace": "default", "task_queue": "noesis", "workflow_id": "w"});
        let e = host.check(&run).unwrap_err().to_string();
        assert!(e.contains("runs on the Temporal cluster at 127.0.0.1:7233"), "{e}");
    }
}
