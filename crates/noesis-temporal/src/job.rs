//! What the engine's history carries, and nothing more: a run's id going
//! in, where one stretch of it ended coming out, a bare "decided" signal.
//! The conversation, the calls and their results stay in the noesis store
//! (Temporal's 2 MB payload and 50 MB history limits never come near).
//! Also the record a cluster run keeps of where it was submitted
//! (`run.host.cluster`), so `agent approve` knows whom to tell.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The workflow type of an agent run.
pub const AGENT_WORKFLOW: &str = "noesis.agent";
/// The activity that drives one stretch of an agent run.
pub const STRETCH_ACTIVITY: &str = "noesis.agent.stretch";
/// The signal that says the decisions a paused run waited for are stored.
pub const DECIDED_SIGNAL: &str = "decided";
/// The task queue when none is named.
pub const DEFAULT_TASK_QUEUE: &str = "noesis";
/// The namespace when none is named.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The error type of a stretch that can never succeed (no such run, a
/// workspace this worker cannot reach): not retried.
pub const REFUSED: &str = "NoesisRefused";

/// The workflow id of agent run `run_id`: one workflow per run, so a
/// second submission of the same run is refused by the engine.
pub fn agent_workflow_id(run_id: &str) -> String {
    format!("noesis-agent-{run_id}")
}

/// An agent run handed to the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentJob {
    /// The run, as stored.
    pub run_id: String,
    /// How often the stretch's activity must be heard from before the
    /// engine hands it to another worker (ms).
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_timeout_ms: u64,
    /// How long a pause may wait for a decision (ms) before the calls that
    /// wait are denied and the run goes on (none: as long as it takes). A
    /// durable timer of the workflow's: it holds no worker either.
    #[serde(default)]
    pub approval_timeout_ms: Option<u64>,
}

fn default_heartbeat_ms() -> u64 {
    5_000
}

impl AgentJob {
    /// A job for `run_id` with the default heartbeat timeout.
    pub fn new(run_id: &str) -> AgentJob {
        AgentJob { run_id: run_id.to_owned(), heartbeat_timeout_ms: default_heartbeat_ms(), approval_timeout_ms: None }
    }
}

/// What the model is told of a call denied because nobody decided in time.
pub fn expired_message(timeout_ms: u64) -> String {
    format!("nobody decided on this call within {} s, so it was not run", timeout_ms.div_ceil(1000))
}

/// Calls of a paused run denied for want of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiry {
    /// The run.
    pub run_id: String,
    /// The step it paused at: a run that moved on since (someone decided)
    /// is left alone.
    pub step: u64,
    /// What the model is told.
    pub message: String,
}

/// Where one stretch of a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stretch", rename_all = "snake_case")]
pub enum Stretch {
    /// The run ended (answered, stopped by a limit, aborted): `status` as
    /// `agent list` says it.
    Ended {
        /// done, stopped, aborted.
        status: String,
        /// The stored step it ended at.
        step: u64,
    },
    /// Calls wait for a person's decision; the workflow waits for
    /// [`DECIDED_SIGNAL`] holding no worker.
    Paused {
        /// The stored step it paused at.
        step: u64,
        /// The calls that wait.
        pending: Vec<String>,
    },
    /// Cancelled (the workflow was cancelled); resumable.
    Cancelled {
        /// The stored step it stopped at.
        step: u64,
    },
}

impl Stretch {
    /// Whether the workflow is finished with the run.
    pub fn is_final(&self) -> bool {
        !matches!(self, Stretch::Paused { .. })
    }
}

/// What the workflow does after a stretch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Returns this as the workflow's result.
    Finish(Stretch),
    /// Waits until more decisions were signalled than `seen`, then drives
    /// the next stretch.
    WaitForDecision {
        /// Decisions signalled when the stretch that paused began.
        seen: u64,
    },
}

/// The workflow's step after `stretch`, with `decided` the signals counted
/// when the stretch began: the pause waits for one more, so a decision
/// signalled before the stretch's end reached the workflow (the person was
/// quicker than the engine) lets it go on at once.
pub fn next(stretch: Stretch, decided: u64) -> Next {
    if stretch.is_final() { Next::Finish(stretch) } else { Next::WaitForDecision { seen: decided } }
}

/// The workflow type of a module batch.
pub const BATCH_WORKFLOW: &str = "noesis.batch";
/// The activity that answers one slice of a batch's inputs.
pub const SLICE_ACTIVITY: &str = "noesis.batch.slice";
/// Inputs per slice when the submitter does not say.
pub const DEFAULT_SLICE: i64 = 20;

/// The workflow id of batch `batch_id`.
pub fn batch_workflow_id(batch_id: &str) -> String {
    format!("noesis-batch-{batch_id}")
}

/// A module batch handed to the cluster: its inputs are in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchJob {
    /// The batch, as stored.
    pub batch_id: String,
    /// How many inputs.
    pub total: i64,
    /// Inputs per activity.
    #[serde(default = "default_slice")]
    pub slice: i64,
    /// As for [`AgentJob::heartbeat_timeout_ms`].
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_timeout_ms: u64,
}

fn default_slice() -> i64 {
    DEFAULT_SLICE
}

impl BatchJob {
    /// A job for a stored batch of `total` inputs, in slices of `slice`.
    pub fn new(batch_id: &str, total: i64, slice: i64) -> BatchJob {
        BatchJob { batch_id: batch_id.to_owned(), total, slice, heartbeat_timeout_ms: default_heartbeat_ms() }
    }

    /// The slices: `[from, to)` ranges covering every input once, in order.
    pub fn slices(&self) -> Vec<Slice> {
        let size = self.slice.max(1);
        let mut out = Vec::new();
        let mut from = 0;
        while from < self.total {
            let to = (from + size).min(self.total);
            out.push(Slice { batch_id: self.batch_id.clone(), from, to });
            from = to;
        }
        out
    }
}

/// Inputs `from..to` of a batch: one activity's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slice {
    /// The batch.
    pub batch_id: String,
    /// The first input.
    pub from: i64,
    /// One past the last.
    pub to: i64,
}

/// What a slice did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceDone {
    /// Inputs this attempt answered (its answer kept).
    pub answered: i64,
    /// Inputs found answered already (by an earlier attempt).
    pub already: i64,
}

/// Where a batch ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDone {
    /// Its inputs.
    pub total: i64,
    /// Answers kept by the last attempt of each slice.
    pub answered: i64,
    /// Answers found kept by an earlier attempt.
    pub already: i64,
}

/// Whether `envelope` says the provider could not be had (unavailable,
/// rate-limited) rather than answering: on a cluster such an input is not
/// answered but its slice tried again later.
pub fn provider_failed(envelope: &Value) -> bool {
    envelope["ok"] == Value::Bool(false) && matches!(envelope["error"]["code"].as_str(), Some("E4001" | "E4002"))
}

/// Where a cluster run was submitted, kept in its record (`run.host.cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    /// The Temporal frontend (`host:port`, or a URL).
    pub address: String,
    /// Its namespace.
    pub namespace: String,
    /// The task queue its workers poll.
    pub task_queue: String,
    /// The run's workflow.
    pub workflow_id: String,
}

impl ClusterRecord {
    /// The record in run record `host`, if the run was submitted to a
    /// cluster; an unreadable one is an error naming the field.
    pub fn of(host: &Value) -> Result<Option<ClusterRecord>, String> {
        match host.get("cluster") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| format!("the run's record `host.cluster` is not readable: {e}")),
        }
    }

    /// Writes the record into `host` (an object).
    pub fn record(&self, host: &mut Value) {
        if let Value::Object(m) = host
            && let Ok(v) = serde_json::to_value(self)
        {
            m.insert("cluster".into(), v);
        }
    }
}

/// `address` as the URL the client connects to: `host:port` is plain
/// HTTP/2 (`http://host:port`), a URL is kept.
pub fn endpoint(address: &str) -> Result<String, String> {
    let address = address.trim();
    if address.is_empty() {
        return Err("the Temporal address is empty; give HOST:PORT (e.g. 127.0.0.1:7233)".into());
    }
    if address.starts_with("http://") || address.starts_with("https://") {
        return Ok(address.to_owned());
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("`{address}` names no port; give HOST:PORT (e.g. 127.0.0.1:7233)"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("`{address}` is not HOST:PORT (e.g. 127.0.0.1:7233)"));
    }
    Ok(format!("http://{address}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stretch_is_carried_as_tagged_json() {
        let paused = Stretch::Paused { step: 7, pending: vec!["c1".into()] };
        let v = serde_json::to_value(&paused).unwrap();
        assert_eq!(v, json!({"stretch": "paused", "step": 7, "pending": ["c1"]}));
        assert_eq!(serde_json::from_value::<Stretch>(v).unwrap(), paused);
        let ended = json!({"stretch": "ended", "status": "done", "step": 12});
        assert_eq!(
            serde_json::from_value::<Stretch>(ended).unwrap(),
            Stretch::Ended { status: "done".into(), step: 12 }
        );
    }

    #[test]
    fn the_workflow_finishes_on_an_end_and_waits_on_a_pause() {
        let ended = Stretch::Ended { status: "done".into(), step: 3 };
        assert_eq!(next(ended.clone(), 0), Next::Finish(ended));
        let cancelled = Stretch::Cancelled { step: 2 };
        assert_eq!(next(cancelled.clone(), 5), Next::Finish(cancelled));
        let paused = Stretch::Paused { step: 4, pending: vec![] };
        assert_eq!(next(paused, 2), Next::WaitForDecision { seen: 2 });
    }

    #[test]
    fn slices_cover_every_input_once_in_order() {
        let job = BatchJob::new("b", 45, 20);
        let cut: Vec<(i64, i64)> = job.slices().iter().map(|s| (s.from, s.to)).collect();
        assert_eq!(cut, [(0, 20), (20, 40), (40, 45)]);
        assert!(BatchJob::new("b", 0, 20).slices().is_empty());
        assert_eq!(BatchJob::new("b", 3, 0).slices().len(), 3, "a slice of nothing is a slice of one");
        let job: BatchJob = serde_json::from_value(json!({"batch_id": "b", "total": 2})).unwrap();
        assert_eq!((job.slice, job.heartbeat_timeout_ms), (DEFAULT_SLICE, 5_000));
        assert_eq!(batch_workflow_id("b"), "noesis-batch-b");
    }

    #[test]
    fn only_an_unavailable_or_rate_limited_provider_is_tried_again() {
        let failed = |code: &str| json!({"ok": false, "error": {"code": code, "message": "m"}});
        assert!(provider_failed(&failed("E4001")));
        assert!(provider_failed(&failed("E4002")));
        assert!(!provider_failed(&failed("E3001")), "a bad reply is an answer");
        assert!(!provider_failed(&failed("E2002")));
        assert!(!provider_failed(&json!({"ok": true, "data": {}})));
    }

    #[test]
    fn a_job_without_a_heartbeat_gets_the_default() {
        let job: AgentJob = serde_json::from_value(json!({"run_id": "r1"})).unwrap();
        assert_eq!(job, AgentJob::new("r1"));
        assert_eq!(job.approval_timeout_ms, None);
        assert_eq!(expired_message(1_500), "nobody decided on this call within 2 s, so it was not run");
        assert_eq!(agent_workflow_id("r1"), "noesis-agent-r1");
    }

    #[test]
    fn the_cluster_record_round_trips_through_the_run_record() {
        let mut host = json!({"workspace": "/w"});
        assert_eq!(ClusterRecord::of(&host).unwrap(), None);
        let record = ClusterRecord {
            address: "127.0.0.1:7233".into(),
            namespace: "default".into(),
            task_queue: "noesis".into(),
            workflow_id: agent_workflow_id("r1"),
        };
        record.record(&mut host);
        assert_eq!(host["workspace"], "/w");
        assert_eq!(ClusterRecord::of(&host).unwrap(), Some(record));
        let e = ClusterRecord::of(&json!({"cluster": {"address": 1}})).unwrap_err();
        assert!(e.contains("host.cluster"), "{e}");
    }

    #[test]
    fn addresses_become_urls_and_bad_ones_are_named() {
        assert_eq!(endpoint("127.0.0.1:7233").unwrap(), "http://127.0.0.1:7233");
        assert_eq!(endpoint("https://ns.tmprl.cloud:7233").unwrap(), "https://ns.tmprl.cloud:7233");
        assert!(endpoint("").unwrap_err().contains("empty"));
        assert!(endpoint("localhost").unwrap_err().contains("no port"));
        assert!(endpoint("localhost:http").unwrap_err().contains("not HOST:PORT"));
    }
}
