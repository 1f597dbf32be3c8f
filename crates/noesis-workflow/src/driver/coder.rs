//! CODER: an agent run with the file tools confined to the workspace, the
//! files that judge it protected, every step stored before the next.

use std::path::PathBuf;
use std::sync::Arc;

use noesis_agent::{Action, AgentRun, ApprovalPolicy, Checkpoint, Permissions, RunConfig, Toolbox, Workspace};
use noesis_llm::ChatResponse;
use noesis_store::{AgentState, Store};
use serde_json::{Value, json};

use super::{DriveError, Driver, load_manifest, now_ms};
use crate::episode::{CoderReport, CoderRun};
use crate::judge;
use crate::snapshot::{self, Snapshot};

/// Stores each state of the run before the next step.
struct Keep<'a> {
    store: &'a dyn Store,
    project_id: String,
}

#[async_trait::async_trait]
impl Checkpoint for Keep<'_> {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        let state = AgentState {
            run_id: run.id.clone(),
            project_id: self.project_id.clone(),
            task: run.host.get("task").and_then(Value::as_str).unwrap_or(&run.task).to_owned(),
            status: run.status().to_owned(),
            step: i64::try_from(run.step).unwrap_or(i64::MAX),
            forked_from: run.forked_from.as_ref().map(|(id, _)| id.clone()),
            state: run.to_json(),
            at: i64::try_from(now_ms()).unwrap_or(i64::MAX),
        };
        self.store.save_agent_state(&state).await.map_err(|e| e.to_string())
    }
}

impl Driver {
    /// Runs (or continues) CODER's run and says what it changed.
    pub(super) async fn coder(&self, c: &CoderRun) -> Result<CoderReport, DriveError> {
        let run_id = c.run_id.clone();
        let workspace = Workspace::new(&self.workspace).map_err(|e| DriveError::failed("the workspace", e))?;
        let snap = load_manifest(&c.snapshot)?;
        let permissions = self.coder_permissions(c, &snap)?;
        let mut run = match self.store().agent_state(&run_id, None).await? {
            Some(stored) => {
                let mut run = AgentRun::from_json(&stored.state)
                    .map_err(|e| DriveError::failed(format!("agent run {run_id}"), e))?;
                if !run.config.permissions.has_rules() {
                    run.config.permissions = permissions;
                }
                run.resume();
                run
            }
            None => {
                let decls = Toolbox::with_permissions(workspace.clone(), permissions.clone()).decls();
                let config =
                    RunConfig { tools: decls, approval: ApprovalPolicy::Auto, permissions, ..RunConfig::default() };
                let mut run = AgentRun::new(run_id.clone(), c.task.clone(), config, now_ms());
                let episode = run_id.split("-coder-").next().unwrap_or_default();
                run.host = json!({"task": format!("CODER of episode {episode}"),
                                  "workspace": self.workspace.to_string_lossy(), "provider": self.provider.name(),
                                  "model": self.provider.model(), "project_id": self.states.project_id, "solve": true});
                run
            }
        };
        // CODER's commands may not change what judges it either: the same
        // paths are read-only in its sandbox.
        let protected: Vec<PathBuf> = run.config.permissions.extra_protected().iter().map(PathBuf::from).collect();
        let tools = Arc::new(tracked_only(
            Toolbox::with_permissions(workspace, run.config.permissions.clone())
                .with_sandbox(self.sandbox.clone(), protected)
                .with_redactor(Arc::clone(&self.redactor)),
        ));
        if run.outcome.is_none() {
            let prices = Arc::clone(&self.prices);
            let price = move |r: &ChatResponse| r.usage.and_then(|u| prices.cost(&r.model, u)).unwrap_or(0.0);
            let observer = Arc::clone(&self.observer);
            let id = run.id.clone();
            let observe = move |p: &noesis_agent::Progress| observer.agent(&id, p);
            let driver = noesis_agent::Driver {
                now: &now_ms,
                price: &price,
                observe: Some(&observe),
                meter: self.budget.clone(),
                prices: Some(Arc::clone(&self.prices)),
                ..noesis_agent::Driver::new(self.provider.as_ref(), Arc::clone(&tools))
            };
            let mut keep = Keep { store: self.store(), project_id: self.states.project_id.clone() };
            // Only an `ask` rule makes CODER wait: the approver decides (in
            // the CLI no person is there, so the call is denied and the
            // model told, and the run goes on).
            loop {
                let action = driver
                    .drive(&mut run, &mut keep)
                    .await
                    .map_err(|e| DriveError::failed(format!("CODER's run {run_id}"), e))?;
                let Action::AwaitApproval(pending) = action else { break };
                let denied = self.approver.decide(&run_id, pending).await;
                run.decide(&denied).map_err(|e| DriveError::failed(format!("CODER's run {run_id}"), e))?;
            }
        }
        let outcome = run.outcome.as_ref().map_or_else(|| "unfinished".to_owned(), noesis_agent::outcome_name);
        let changes = snapshot::diff(&self.workspace, &snap)?;
        let errors = run.calls.iter().filter(|c| c.is_error).filter_map(|c| c.result.as_deref());
        let refused = judge::protected_refusals(errors);
        let kept_ai_tests = c.ai_tests.iter().filter(|f| self.workspace.join(f).is_file()).cloned().collect();
        Ok(CoderReport { outcome, changes, refused, kept_ai_tests })
    }

    /// CODER's rules: the operator's, the test commands admitted as
    /// `--allow-command` does, and what judges CODER protected.
    fn coder_permissions(&self, c: &CoderRun, snap: &Snapshot) -> Result<Permissions, DriveError> {
        let mut permissions = self.permissions.clone();
        let mut layer = noesis_agent::Layer::granting("tests");
        for t in &c.tests {
            // A test line the tool could not split is no command it runs.
            let _ = layer.add_command(t, "--test");
        }
        permissions.push(layer);
        for path in judge::judged_files(snap, &c.tests, &c.anchors, &c.ai_tests) {
            permissions.protect(&path).map_err(|e| DriveError::failed(format!("protecting {path}"), e))?;
        }
        Ok(permissions)
    }
}

/// CODER's `write_file` and `edit_file`, refusing paths the snapshot leaves
/// out (git-ignored ones, `.git`): a change there could not be restored if
/// it broke an anchor. Commands CODER may run (the tests, `[agent]
/// allow_commands`) can still write there — caches and build output, which
/// the tests make again.
fn tracked_only(tools: Toolbox) -> Toolbox {
    let workspace = tools.workspace().clone();
    let permissions = tools.permissions().clone();
    let mut tools = tools;
    for decl in noesis_agent::builtin::file_tools() {
        if decl.name != "write_file" && decl.name != "edit_file" {
            continue;
        }
        let (ws, name, rules) = (workspace.clone(), decl.name.clone(), permissions.clone());
        let run: noesis_agent::ToolFn = Arc::new(move |args: Value| {
            let (ws, name, rules) = (ws.clone(), name.clone(), rules.clone());
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    let path = args["path"].as_str().unwrap_or_default();
                    // A path the workspace refuses gets the tool's own message.
                    if let Ok(real) = ws.confine(path) {
                        // The rules by the real path, as the built-in checks them.
                        if let Err(why) = rules.check_path(&name, &ws.shown(&real)) {
                            return noesis_agent::ToolOutput::error(why);
                        }
                        if snapshot::outside(ws.root(), &ws.shown(&real)) {
                            return noesis_agent::ToolOutput::error(format!(
                                "`{path}` is git-ignored (or under .git): it is outside the snapshot solve restores when a change breaks a test, so it may not be changed here; change tracked files only"
                            ));
                        }
                    }
                    noesis_agent::builtin::run_file_tool(&ws, &name, &args)
                        .unwrap_or_else(|| noesis_agent::ToolOutput::error(format!("no tool `{name}`")))
                })
                .await
                .unwrap_or_else(|e| noesis_agent::ToolOutput::error(format!("the tool failed: {e}")))
            })
        });
        tools = tools.with_tool(decl, run);
    }
    tools
}
