//! Runs in the store: each state kept before the next step, found again by
//! id or prefix, and a finished run written as frames.

use std::collections::BTreeMap;

use noesis_agent::{
    AgentRun, CallRecord, CallStatus, Checkpoint, Decision, MemoryBuffer, MemoryKind, Replayed, ToolEvidence, Verdict,
};
use noesis_store::{AgentState, AgentSummary, Store};
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
    /// The leases the states are written under (none: the run must not be
    /// held by anyone else).
    pub holds: Option<&'a crate::hold::Holds>,
    /// What was stored last.
    pub log: RunLog,
}

impl<'a> Keep<'a> {
    /// Keeps states in `store` under `project_id`, without a lease.
    pub fn new(store: &'a dyn Store, project_id: String) -> Keep<'a> {
        Keep { store, project_id, holds: None, log: RunLog::default() }
    }
}

/// The summary of `run` now, without its state.
fn summary_of(run: &AgentRun, project_id: &str, state: Value) -> AgentState {
    AgentState {
        run_id: run.id.clone(),
        project_id: project_id.to_owned(),
        task: run.host.get("task").and_then(Value::as_str).unwrap_or(&run.task).to_owned(),
        status: run.status().to_owned(),
        step: i64::try_from(run.step).unwrap_or(i64::MAX),
        forked_from: run.forked_from.as_ref().map(|(id, _)| id.clone()),
        state,
        at: i64::try_from(now_ms()).unwrap_or(i64::MAX),
    }
}

/// The stored form of `run` now.
pub fn state_of(run: &AgentRun, project_id: &str) -> AgentState {
    summary_of(run, project_id, run.to_json())
}

/// Writes one run's states as what changed since the last one
/// ([`AgentRun::change_since`]), whole again once the changes since the
/// last whole state add up to its size (at least
/// [`noesis_store::MIN_SNAPSHOT_GAP`]): a step costs what it added, a read
/// applies at most a whole state's worth of changes.
#[derive(Debug, Default)]
pub struct RunLog {
    cursor: Option<noesis_agent::RunCursor>,
    since: usize,
    whole: usize,
    written: u64,
}

impl RunLog {
    /// Bytes of state written so far (whole states and changes).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Stores `run` as it is now (under `lease` when given).
    ///
    /// # Errors
    /// As the store's: [`noesis_store::StoreError::Fenced`] when another
    /// driver holds the run.
    pub async fn save(
        &mut self,
        store: &dyn Store,
        lease: Option<&noesis_store::Lease>,
        run: &AgentRun,
        project_id: &str,
    ) -> Result<(), noesis_store::StoreError> {
        let (change, cursor) = run.change_since(self.cursor.take().as_ref());
        if let noesis_agent::RunChange::Delta { base, delta } = &change {
            let len = delta.to_string().len();
            if self.since + len < self.whole.max(noesis_store::MIN_SNAPSHOT_GAP) {
                let base = i64::try_from(*base).unwrap_or(i64::MAX);
                match store.save_agent_delta(&summary_of(run, project_id, Value::Null), base, delta, lease).await {
                    Ok(()) => {
                        self.since += len;
                        self.written += len as u64;
                        self.cursor = Some(cursor);
                        return Ok(());
                    }
                    // Another writer moved the run: the whole state is still right.
                    Err(noesis_store::StoreError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let whole = match change {
            noesis_agent::RunChange::Whole(v) => v,
            noesis_agent::RunChange::Delta { .. } => run.to_json(),
        };
        let state = summary_of(run, project_id, whole);
        store.save_agent_state_held(&state, lease).await?;
        self.whole = state.state.to_string().len();
        self.written += self.whole as u64;
        self.since = 0;
        self.cursor = Some(cursor);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Checkpoint for Keep<'_> {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        let lease = self.holds.and_then(|h| h.lease(&run.id));
        let saved = self.log.save(self.store, lease.as_ref(), run, &self.project_id).await;
        if let (Err(e), Some(holds)) = (&saved, self.holds)
            && e.is_fenced()
        {
            holds.lost(&run.id);
        }
        saved.map_err(|e| e.to_string())
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

/// The sub-agent runs under `run`, however deep, by id (those that are
/// stored and readable).
pub async fn sub_agent_runs(store: &dyn Store, run: &AgentRun) -> Result<BTreeMap<String, AgentRun>> {
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
    Ok(children)
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
    let children = sub_agent_runs(store, run).await?;
    let frames = crate::frames::frames_of(run, project, parent.as_ref(), noesis_frames::Timestamp::now(), &children)
        .map_err(|e| HostError::Message(e.to_string()))?;
    store.insert_frames(&frames).await?;
    if let Some(root) = frames.first() {
        run.host["frame_id"] = json!(root.frame_id.to_string());
        store.save_agent_state(&state_of(run, &project_id)).await?;
    }
    Ok(())
}

/// A listed run as JSON (`noesis agent list --json`).
pub fn summary_json(r: &AgentSummary) -> Value {
    json!({"run_id": r.run_id, "task": r.task, "status": r.status, "step": r.latest_step,
           "forked_from": r.forked_from, "updated_at": noesis_frames::Timestamp::from_millis(r.updated_at).to_string()})
}

/// Listed runs as text (`noesis agent list`): a line each with id,
/// status, step, when it last changed and the task's start.
pub fn list_text(runs: &[AgentSummary]) -> String {
    let mut text = String::new();
    for r in runs {
        let task: String = r.task.replace('\n', " ").chars().take(60).collect();
        text.push_str(&format!(
            "{}  {:<17}  step {:<4}  {}  {task}\n",
            r.run_id,
            r.status,
            r.latest_step,
            noesis_frames::Timestamp::from_millis(r.updated_at)
        ));
    }
    text
}

/// Decisions on a paused run's calls: on `call`, else on every call that
/// waits, each with `verdict`. With `hash` (the arguments hash the person
/// saw) a call whose arguments are not those is refused when decided.
pub fn decisions(
    run: &AgentRun,
    call: Option<&str>,
    hash: Option<&str>,
    verdict: &dyn Fn(&CallRecord) -> Verdict,
) -> Result<Vec<Decision>> {
    let pending: Vec<&CallRecord> = run.calls.iter().filter(|c| c.status == CallStatus::AwaitingApproval).collect();
    if pending.is_empty() {
        bail!("run {} has no call waiting for a decision (it is {})", run.id, run.status());
    }
    let chosen: Vec<&CallRecord> = match call {
        Some(c) => {
            let Some(found) = pending.iter().find(|p| p.id == c) else {
                let ids: Vec<&str> = pending.iter().map(|p| p.id.as_str()).collect();
                bail!("call `{c}` of run {} is not waiting for a decision (waiting: {})", run.id, ids.join(", "));
            };
            vec![*found]
        }
        None => pending,
    };
    Ok(chosen
        .into_iter()
        .map(|c| Decision {
            call_id: c.id.clone(),
            tool: c.tool.clone(),
            arguments_hash: hash.map_or_else(|| c.arguments_hash.clone(), str::to_owned),
            verdict: verdict(c),
        })
        .collect())
}

/// Applies `decisions` to stored run `run` (as read from the store) and
/// keeps it under `project_id`, holding its lease meanwhile: refused when
/// another driver holds the run (the decision is that driver's to take) or
/// stepped it since it was read.
pub async fn decide(store: &dyn Store, project_id: &str, run: &mut AgentRun, decisions: &[Decision]) -> Result<()> {
    let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
    let holder = crate::hold::holder_name("cli");
    let lease = match store.acquire_run_lease(&run.id, &holder, 30_000, now).await? {
        noesis_store::LeaseGrant::Granted(lease) => lease,
        noesis_store::LeaseGrant::Held(h) => bail!(
            "agent run {} is {}; decide through that driver (a server's POST /agents/runs/{}/approvals or its \
             dashboard)",
            run.id,
            h.describe(now),
            run.id
        ),
    };
    let decided = async {
        let stored = store.agent_state(&run.id, None).await?.map(|s| s.step);
        let read_at = i64::try_from(run.step).unwrap_or(i64::MAX);
        if stored.is_some_and(|s| s != read_at) {
            bail!(
                "agent run {}: it moved on (to step {}) since it was read; decide again",
                run.id,
                stored.unwrap_or(0)
            );
        }
        run.decide(decisions).map_err(|e| HostError::Message(format!("run {}: {e}", run.id)))?;
        store.save_agent_state_held(&state_of(run, project_id), Some(&lease)).await?;
        Ok(())
    }
    .await;
    // A lease not given up lapses by itself.
    let _ = store.release_run_lease(&lease).await;
    decided
}

/// Replays run `id` (or the project's one run whose id starts with it)
/// from its state at step `from` (0 or less: as it began), with the
/// model's replies and the tools' results served from its record.
pub async fn replay(store: &dyn Store, project_id: &str, id: &str, from: i64) -> Result<(AgentRun, Replayed)> {
    let (record, _) = find(store, project_id, id, None).await?;
    let start = if from <= 0 {
        // The run as it began: its first stored state, else rebuilt.
        match find(store, project_id, &record.id, Some(0)).await {
            Ok((run, _)) => run,
            Err(_) => first_state(&record),
        }
    } else {
        find(store, project_id, &record.id, Some(from)).await?.0
    };
    let replayed = noesis_agent::replay(start, &record);
    Ok((record, replayed))
}

/// A replay as JSON (`noesis agent replay --json`).
pub fn replay_json(record: &AgentRun, from: i64, replayed: &Replayed) -> Value {
    json!({"run_id": record.id, "from_step": from, "steps": replayed.steps, "diverged": replayed.diverged,
           "matches": replayed.matches, "outcome": replayed.run.outcome})
}

/// The run rebuilt as it began, for a record whose first state is gone.
fn first_state(record: &AgentRun) -> AgentRun {
    let mut run = AgentRun::new(record.id.clone(), record.task.clone(), record.config.clone(), record.started_ms);
    run.host = record.host.clone();
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(id: &str) -> CallRecord {
        CallRecord {
            id: id.into(),
            turn: 0,
            tool: "write_file".into(),
            arguments: json!({"path": "a"}),
            arguments_hash: format!("hash-{id}"),
            status: CallStatus::AwaitingApproval,
            result: None,
            is_error: false,
            started_ms: None,
            finished_ms: None,
            evidence: Vec::new(),
            span: None,
            spent: None,
        }
    }

    #[test]
    fn decisions_cover_every_waiting_call_or_the_one_named() {
        let mut run = AgentRun::new("r1", "t", noesis_agent::RunConfig::default(), 0);
        let e = decisions(&run, None, None, &|_| Verdict::Approve).err().unwrap().to_string();
        assert_eq!(e, "run r1 has no call waiting for a decision (it is running)");
        run.calls = vec![waiting("c1"), waiting("c2")];
        let all = decisions(&run, None, None, &|_| Verdict::Approve).unwrap();
        let ids: Vec<(&str, &str)> = all.iter().map(|d| (d.call_id.as_str(), d.arguments_hash.as_str())).collect();
        assert_eq!(ids, [("c1", "hash-c1"), ("c2", "hash-c2")]);
        let one = decisions(&run, Some("c2"), Some("seen"), &|_| Verdict::Deny { message: None }).unwrap();
        assert_eq!((one.len(), one[0].arguments_hash.as_str()), (1, "seen"));
        assert_eq!(one[0].verdict, Verdict::Deny { message: None });
        let e = decisions(&run, Some("c9"), None, &|_| Verdict::Approve).err().unwrap().to_string();
        assert_eq!(e, "call `c9` of run r1 is not waiting for a decision (waiting: c1, c2)");
    }

    #[test]
    fn a_listed_run_is_one_line_with_its_task_cut() {
        let r = AgentSummary {
            run_id: "r1".into(),
            task: format!("two\nlines{}", "x".repeat(80)),
            status: "done".into(),
            latest_step: 3,
            forked_from: None,
            updated_at: 0,
        };
        let text = list_text(std::slice::from_ref(&r));
        assert_eq!(text.lines().count(), 1);
        assert!(text.starts_with("r1  done               step 3     1970-01-01"), "{text}");
        assert!(text.ends_with(&format!("two lines{}\n", "x".repeat(51))), "{text}");
        assert_eq!(summary_json(&r)["updated_at"], json!(noesis_frames::Timestamp::from_millis(0).to_string()));
    }

    #[test]
    fn a_run_whose_first_state_is_gone_is_rebuilt_as_it_began() {
        let mut record = AgentRun::new("r1", "t", noesis_agent::RunConfig::default(), 7);
        record.host = json!({"workspace": "/w"});
        record.step = 9;
        let first = first_state(&record);
        assert_eq!((first.step, first.started_ms, &first.host), (0, 7, &record.host));
    }
}
