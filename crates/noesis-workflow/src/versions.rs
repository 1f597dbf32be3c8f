//! The project's state in the store: numbered versions, each the
//! CognitiveState and `solve`'s record of the episode together. Writes are
//! retried on the new head when another writer (`noesis state set` from a
//! hook, a second `solve`) got there first, so no update is lost; a mirror
//! file for imlazy's hooks is rewritten atomically after every write.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use noesis_frames::Timestamp;
use noesis_store::{Store, StoreError, WorkflowVersion};
use serde_json::{Value, json};

use crate::episode::Head;
use crate::state::{self, Node, StateError};

/// Why a version could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Other writers kept winning.
    #[error("the state kept changing under {ATTEMPTS} attempts to write `{0}`; try again")]
    Busy(String),
    /// The mirror file could not be written.
    #[error("{path}: {message}")]
    Mirror {
        /// The file or its folder.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// How often a writer that lost the race to another reads the new head
/// and tries again before giving up.
const ATTEMPTS: u32 = 200;

/// Eight hex digits naming the project, as imlazy's field holds.
pub fn project_hash(root: &Path) -> String {
    blake3::hash(root.to_string_lossy().as_bytes()).to_hex()[..8].to_owned()
}

/// Eight random hex digits (a v7 UUID's tail: its head is the clock).
pub fn new_episode_id() -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    id[id.len() - 8..].to_owned()
}

/// The episode's status after a version: archived once consolidated.
pub fn status_of(state: &Value, previous: &str) -> String {
    match state::current(state) {
        Ok(Node::Consolidator) => "archived".into(),
        _ if previous == "archived" => "active".into(),
        _ => previous.to_owned(),
    }
}

/// A stored version as the episode sees it.
pub fn head_of(v: &WorkflowVersion) -> Head {
    Head {
        version: v.version,
        episode_id: v.episode_id.clone(),
        status: v.status.clone(),
        state: v.state.clone(),
        episode: v.episode.clone(),
    }
}

/// The project's state in the store.
#[derive(Clone)]
pub struct States {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The project.
    pub project_id: String,
    /// imlazy's state file to rewrite after every change, if asked.
    pub mirror: Option<PathBuf>,
}

impl States {
    /// The newest version.
    pub async fn head(&self) -> Result<Option<WorkflowVersion>, StoreError> {
        self.store.workflow_state(&self.project_id, None).await
    }

    /// Writes `state` (and `episode`, else the head's) as the version after
    /// `head`; `None` when another writer got there first.
    pub async fn write(
        &self,
        head: Option<&WorkflowVersion>,
        mut state: Value,
        episode: Option<Value>,
        command: &str,
        status: String,
    ) -> Result<Option<WorkflowVersion>, VersionsError> {
        let now = Timestamp::now();
        state["updated_at"] = json!(now.to_string());
        let version = WorkflowVersion {
            project_id: self.project_id.clone(),
            version: head.map_or(1, |h| h.version + 1),
            episode_id: state["episode_id"].as_str().unwrap_or_default().to_owned(),
            node: state["current_node"].as_str().unwrap_or_default().to_owned(),
            status,
            command: command.to_owned(),
            state,
            // Kept from the head unless given: `noesis solve`'s own record.
            episode: episode.unwrap_or_else(|| head.map_or_else(|| json!({}), |h| h.episode.clone())),
            at: now.millis(),
        };
        match self.store.append_workflow_state(&version).await {
            Ok(()) => {
                if let Some(path) = &self.mirror {
                    mirror(path, &version.state)?;
                }
                Ok(Some(version))
            }
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) if e.is_busy() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies `op` to the head's state and episode record and writes both
    /// as one version, again on the new head when another writer got there
    /// first; the version written and `op`'s value, or the refusal (`None`:
    /// no state yet).
    pub async fn try_step<T>(
        &self,
        command: &str,
        op: impl Fn(&mut Value, &mut Value) -> Result<T, StateError>,
    ) -> Result<Result<(WorkflowVersion, T), Option<StateError>>, VersionsError> {
        for attempt in 0..ATTEMPTS {
            let Some(head) = self.head().await? else { return Ok(Err(None)) };
            let mut state = head.state.clone();
            let mut episode = head.episode.clone();
            let reply = match op(&mut state, &mut episode) {
                Ok(r) => r,
                Err(e) => return Ok(Err(Some(e))),
            };
            // `noesis solve` marks an escalation in its record.
            let status = if episode.get("escalated") == Some(&json!(true)) {
                "escalated".to_owned()
            } else {
                status_of(&state, &head.status)
            };
            if let Some(v) = self.write(Some(&head), state, Some(episode), command, status).await? {
                return Ok(Ok((v, reply)));
            }
            backoff(attempt).await;
        }
        Err(VersionsError::Busy(command.to_owned()))
    }

    /// Writes what `make` gives (state, episode record, status) as the
    /// next version whatever the head holds — a new episode, a checkout, an
    /// import — again on the new head when another writer got there first.
    pub async fn replace(
        &self,
        command: &str,
        make: impl Fn() -> (Value, Value, String),
    ) -> Result<WorkflowVersion, VersionsError> {
        for attempt in 0..ATTEMPTS {
            let head = self.head().await?;
            let (state, episode, status) = make();
            if let Some(v) = self.write(head.as_ref(), state, Some(episode), command, status).await? {
                return Ok(v);
            }
            backoff(attempt).await;
        }
        Err(VersionsError::Busy(command.to_owned()))
    }

    /// A new episode (the previous versions stay in the history).
    pub async fn init(&self, project_hash: &str, command: &str) -> Result<WorkflowVersion, VersionsError> {
        self.replace(command, || {
            let now = Timestamp::now().to_string();
            (state::initial(&new_episode_id(), project_hash, &now), json!({}), "active".into())
        })
        .await
    }
}

/// A short, growing, jittered pause, so writers that collided spread out.
async fn backoff(attempt: u32) {
    let jitter = u64::from(uuid::Uuid::now_v7().as_bytes()[15]) % 8;
    let ms = (2u64 << attempt.min(5)) + jitter;
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// Writes `state` to imlazy's file through a temporary file in the same
/// folder and a rename: a reader sees the old state or the new, never half.
fn mirror(path: &Path, state: &Value) -> Result<(), VersionsError> {
    use std::io::Write;
    let fail = |path: &Path, e: &dyn std::fmt::Display| VersionsError::Mirror {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, &e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(dir, &e))?;
    let text = serde_json::to_string_pretty(state).map_err(|e| fail(path, &e))?;
    tmp.write_all(text.as_bytes()).map_err(|e| fail(path, &e))?;
    tmp.as_file().sync_all().map_err(|e| fail(path, &e))?;
    tmp.persist(path).map_err(|e| fail(path, &e))?;
    Ok(())
}
