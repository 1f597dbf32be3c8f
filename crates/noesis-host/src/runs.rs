//! Runs in the store: each state kept before the next step, found again by
//! id or prefix, and a finished run written as frames.

use std::collections::BTreeMap;

use noesis_agent::{AgentRun, Checkpoint, MemoryBuffer, MemoryKind, ToolEvidence};
use noesis_store::{AgentState, Store};
use serde_json::{Value, json};

use crate::{HostError, Result, bail};

/// Milliseconds since the Unix epoch: runs are continued by other
/// processes, so their clock must be the machine's, not a process's.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Stores each state of the run before the next step.
pub struct Keep<'a> {
    /// Where.
    pub store: &'a dyn Store,
    /// The project the run belongs to.
    pub project_id: String,
}

/// The stored form of `run` now.
pub fn state_of(run: &AgentRun, project_id: &str) -> AgentState {
    AgentState {
        run_id: run.id.clone(),
        project_id: project_id.to_owned(),
        task: run.host.get("task").and_then(Value::as_str).unwrap_or(&run.task).to_owned(),
        status: run.status().to_owned(),
        step: i64::try_from(run.step).unwrap_or(i64::MAX),
        forked_from: run.forked_from.as_ref().map(|(id, _)| id.clone()),
        state: run.to_json(),
        at: i64::try_from(now_ms()).unwrap_or(i64::MAX),
    }
}

#[async_trait::async_trait]
impl Checkpoint for Keep<'_> {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        self.store.save_agent_state(&state_of(run, &self.project_id)).await.map_err(|e| e.to_string())
    }
}

/// Run `id` of project `project_id` (or the project's one run whose id
/// starts with it), as it stands or as it stood at `step`; a run stored
/// before its rules were recorded gets them back ([`crate::rules::restore`]).
pub async fn find(store: &dyn Store, project_id: &str, id: &str, step: Option<i64>) -> Result<(AgentRun, AgentState)> {
    let stored = match store.agent_state(id, step).await? {
        Some(s) => s,
        None => {
            let runs = store.agent_runs(project_id, u32::MAX).await?;
            let matching: Vec<_> = runs.iter().filter(|r| r.run_id.starts_with(id)).collect();
            match matching.as_slice() {
                [one] => store.agent_state(&one.run_id, step).await?.ok_or_else(|| {
                    HostError::Message(format!(
                        "run {} has no state at or before step {}",
                        one.run_id,
                        step.unwrap_or(0)
                    ))
                })?,
                [] => bail!("no agent run `{id}` in this project (`noesis agent list` shows them)"),
                many => bail!(
                    "`{id}` names {} runs ({}); give more of the id",
                    many.len(),
                    many.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    };
    let mut run = AgentRun::from_json(&stored.state)
        .map_err(|e| HostError::Message(format!("agent run {}: {e}", stored.run_id)))?;
    crate::rules::restore(&mut run);
    Ok((run, stored))
}

/// What earlier runs of session `name` asked and answered, oldest first.
pub async fn session_memory(store: &dyn Store, project_id: &str, name: &str) -> Result<String> {
    let mut memory = MemoryBuffer::new(20);
    let runs = store.agent_runs(project_id, 200).await?;
    for summary in runs.iter().rev() {
        let Some(state) = store.agent_state(&summary.run_id, None).await? else { continue };
        if state.state["host"]["session"].as_str() != Some(name) {
            continue;
        }
        memory.push(MemoryKind::User, summary.task.clone());
        if let Some(text) = state.state["outcome"]["text"].as_str() {
            memory.push(MemoryKind::Response, text);
        }
    }
    Ok(memory.to_context_string())
}

fn sub_agent_ids(run: &AgentRun) -> Vec<String> {
    run.calls
        .iter()
        .flat_map(|c| &c.evidence)
        .filter_map(|e| match e {
            ToolEvidence::SubAgent { run_id } => Some(run_id.clone()),
            _ => None,
        })
        .collect()
}

/// Writes a finished run's frames (once), under the session's root when a
/// session is open, and notes the root frame in the run.
pub async fn record_frames(
    store: &dyn Store,
    project: &noesis_frames::project::Project,
    run: &mut AgentRun,
) -> Result<()> {
    if run.host.get("frame_id").is_some_and(|f| !f.is_null()) {
        return Ok(());
    }
    let project_id = run.host["project_id"].as_str().unwrap_or(&project.project_id).to_owned();
    let parent = match store.latest_session_root(&project_id).await? {
        Some(id) => store.frame(&id).await?.filter(|f| f.status != noesis_frames::Status::Invalidated),
        None => None,
    };
    // Sub-agent runs, to hang under the calls that started them.
    let mut children = BTreeMap::new();
    let mut queue: Vec<String> = sub_agent_ids(run);
    while let Some(id) = queue.pop() {
        if children.contains_key(&id) {
            continue;
        }
        if let Some(state) = store.agent_state(&id, None).await?
            && let Ok(child) = AgentRun::from_json(&state.state)
        {
            queue.extend(sub_agent_ids(&child));
            children.insert(id, child);
        }
    }
    let frames = crate::frames::frames_of(run, project, parent.as_ref(), noesis_frames::Timestamp::now(), &children)
        .map_err(|e| HostError::Message(e.to_string()))?;
    store.insert_frames(&frames).await?;
    if let Some(root) = frames.first() {
        run.host["frame_id"] = json!(root.frame_id.to_string());
        store.save_agent_state(&state_of(run, &project_id)).await?;
    }
    Ok(())
}
