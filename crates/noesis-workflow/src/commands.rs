//! imlazy's state manager's commands (`init`, `get`, `set`, `update`,
//! `transition`, `reset`, `dump`) and noesis's own (`show --at`,
//! `checkout`, `import`) over the project's versioned state ([`States`]),
//! answering with imlazy's JSON shapes: a result, or `{"error": …}` in
//! imlazy's wording. Where imlazy's hooks find the state file is here too.

use std::path::{Path, PathBuf};

use noesis_frames::Timestamp;
use noesis_store::WorkflowVersion;
use serde_json::{Value, json};

use crate::state::{self, StateError};
use crate::versions::{self, States, VersionsError};

/// How a command ends: a JSON result, or imlazy's refusal (its message).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The result.
    Ok(Value),
    /// Refused, with imlazy's message.
    Refused(String),
}

impl From<StateError> for Reply {
    fn from(e: StateError) -> Reply {
        Reply::Refused(e.to_string())
    }
}

impl Reply {
    /// The reply as imlazy prints it: the result, or `{"error": …}`.
    pub fn to_json(&self) -> Value {
        match self {
            Reply::Ok(v) => v.clone(),
            Reply::Refused(e) => json!({"error": e}),
        }
    }
}

/// imlazy's answer when there is no state yet.
pub const NO_STATE: &str = "No active state. Run 'init' first.";

/// Where to mirror the state for imlazy's hooks, when asked (by `flag` or
/// `[workflow] mirror_imlazy`, given as `configured`): `[workflow]
/// imlazy_state` (`path`), else imlazy's own file.
pub fn mirror_path(
    flag: bool,
    configured: Option<bool>,
    path: Option<PathBuf>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    (flag || configured == Some(true)).then(|| path.or_else(|| imlazy_file(env))).flatten()
}

/// imlazy's state file: `~/.imlazy/working/state.json`.
pub fn imlazy_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("HOME").map(|h| Path::new(&h).join(".imlazy").join("working").join("state.json"))
}

/// The versions as `noesis state history --json` lists them.
pub fn history_json(versions: &[WorkflowVersion]) -> Value {
    Value::Array(
        versions
            .iter()
            .map(|v| {
                json!({"version": v.version, "at": Timestamp::from_millis(v.at).to_string(),
                       "episode_id": v.episode_id, "node": v.node, "status": v.status, "command": v.command})
            })
            .collect(),
    )
}

/// The commands over the project's versioned state, answering as imlazy's
/// state manager does.
pub struct Commands<'a> {
    /// The project's state.
    pub states: &'a States,
}

impl Commands<'_> {
    /// The newest version.
    pub async fn head(&self) -> Result<Option<WorkflowVersion>, VersionsError> {
        Ok(self.states.head().await?)
    }

    /// Applies `op` to the head and writes the result, again on the new
    /// head whenever another writer got there first: no update is lost.
    pub async fn mutate(
        &self,
        command: &str,
        op: impl Fn(&mut Value) -> Result<Value, StateError>,
    ) -> Result<Reply, VersionsError> {
        Ok(match self.try_mutate(command, op).await? {
            Ok(v) => Reply::Ok(v),
            Err(Some(e)) => e.into(),
            Err(None) => Reply::Refused(NO_STATE.into()),
        })
    }

    /// [`Commands::mutate`], with the refusal typed (`None`: no state yet).
    async fn try_mutate(
        &self,
        command: &str,
        op: impl Fn(&mut Value) -> Result<Value, StateError>,
    ) -> Result<Result<Value, Option<StateError>>, VersionsError> {
        Ok(self.states.try_step(command, |s, _| op(s)).await?.map(|(_, v)| v))
    }

    /// A new episode with `project_hash`.
    pub async fn init(&self, project_hash: &str, command: &str) -> Result<Reply, VersionsError> {
        Ok(Reply::Ok(self.states.init(project_hash, command).await?.state))
    }

    /// A new episode for the head's project hash (else `fallback`).
    pub async fn reset(&self, fallback: impl FnOnce() -> String) -> Result<Reply, VersionsError> {
        let kept = self.head().await?.and_then(|h| h.state["project_hash"].as_str().map(str::to_owned));
        self.init(&kept.unwrap_or_else(fallback), "reset").await
    }

    /// The whole state.
    pub async fn dump(&self) -> Result<Reply, VersionsError> {
        Ok(match self.head().await? {
            Some(h) => Reply::Ok(h.state),
            None => Reply::Refused("No active state".into()),
        })
    }

    /// The state, or `{"key", "value"}` of `key`.
    pub async fn get(&self, key: Option<&str>) -> Result<Reply, VersionsError> {
        let Some(head) = self.head().await? else { return Ok(Reply::Refused(NO_STATE.into())) };
        Ok(match key {
            None => Reply::Ok(head.state),
            Some(k) => match state::get(&head.state, k) {
                Ok(v) => Reply::Ok(json!({"key": k, "value": v})),
                Err(e) => e.into(),
            },
        })
    }

    /// Sets `key` to `value` (JSON when it starts with `[` or `{`).
    pub async fn set(&self, key: &str, value: &str) -> Result<Reply, VersionsError> {
        let value = state::parse_value(value);
        self.mutate(&format!("set {key}"), |s| {
            state::set(s, key, value.clone())?;
            Ok(json!({"success": true, "key": key, "value": value}))
        })
        .await
    }

    /// Appends `value` to the list at `key`.
    pub async fn update(&self, key: &str, value: &str) -> Result<Reply, VersionsError> {
        let value = state::parse_value(value);
        self.mutate(&format!("update {key}"), |s| {
            state::append(s, key, value.clone())?;
            Ok(json!({"success": true, "key": key, "appended": value}))
        })
        .await
    }

    /// Moves to `node` when the transition table allows it; a spent retry
    /// budget marks the episode escalated.
    pub async fn transition(&self, node: &str) -> Result<Reply, VersionsError> {
        let now = Timestamp::now().to_string();
        let command = format!("transition {}", node.trim().to_uppercase());
        let done = self
            .try_mutate(&command, |s| {
                let t = state::transition(s, node, &now)?;
                Ok(json!({"success": true, "from": t.from.as_str(), "to": t.to.as_str()}))
            })
            .await?;
        Ok(match done {
            Ok(v) => Reply::Ok(v),
            Err(None) => Reply::Refused(NO_STATE.into()),
            Err(Some(e @ StateError::Escalate { .. })) => {
                // The budget is spent: the episode is marked escalated (a
                // version of its own, the state otherwise unchanged).
                if let Some(head) = self.head().await?
                    && head.status != "escalated"
                {
                    let state = head.state.clone();
                    let command = format!("{command} (escalated)");
                    self.states.write(Some(&head), state, None, &command, "escalated".into()).await?;
                }
                e.into()
            }
            Err(Some(e)) => e.into(),
        })
    }

    /// The state as it was at version `at` (default: the head).
    pub async fn show(&self, at: Option<i64>) -> Result<Reply, VersionsError> {
        Ok(match self.states.store.workflow_state(&self.states.project_id, at).await? {
            Some(v) => Reply::Ok(v.state),
            None => match at {
                Some(n) => Reply::Refused(format!("no version {n} of the state")),
                None => Reply::Refused(NO_STATE.into()),
            },
        })
    }

    /// Every version, oldest first.
    pub async fn history(&self) -> Result<Vec<WorkflowVersion>, VersionsError> {
        Ok(self.states.store.workflow_history(&self.states.project_id).await?)
    }

    /// Makes version `version`'s state the new head (the history is kept).
    pub async fn checkout(&self, version: i64) -> Result<Reply, VersionsError> {
        let Some(old) = self.states.store.workflow_state(&self.states.project_id, Some(version)).await? else {
            return Ok(Reply::Refused(format!("no version {version} of the state")));
        };
        let v = self
            .states
            .replace(&format!("checkout {version}"), || (old.state.clone(), old.episode.clone(), old.status.clone()))
            .await?;
        Ok(Reply::Ok(json!({"success": true, "checked_out": version, "version": v.version})))
    }

    /// Brings in a state file written by imlazy.
    pub async fn import(&self, file: &Path) -> Result<Reply, VersionsError> {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => return Ok(Reply::Refused(format!("{}: {e}", file.display()))),
        };
        let state = match importable(&text) {
            Ok(s) => s,
            Err(why) => return Ok(Reply::Refused(format!("{}: {why}", file.display()))),
        };
        let status = versions::status_of(&state, "active");
        let command = format!("import {}", file.display());
        let v = self.states.replace(&command, || (state.clone(), json!({}), status.clone())).await?;
        Ok(Reply::Ok(v.state))
    }
}

/// The state an imlazy file holds, or why it cannot be imported.
fn importable(text: &str) -> Result<Value, String> {
    let state: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Err("not a JSON object".into()),
        Err(e) => return Err(format!("not JSON: {e}")),
    };
    if let Err(e) = state::current(&state) {
        return Err(format!("current_node: {e}"));
    }
    for field in ["episode_id", "project_hash"] {
        if !state[field].is_string() {
            return Err(format!("{field} is missing or not text"));
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_is_asked_for_by_the_flag_or_the_config_and_defaults_to_imlazys_file() {
        let home = |k: &str| (k == "HOME").then(|| "/h".to_owned());
        let none = |_: &str| None;
        let imlazy = PathBuf::from("/h/.imlazy/working/state.json");
        assert_eq!(mirror_path(false, None, None, &home), None);
        assert_eq!(mirror_path(false, Some(false), Some("/x".into()), &home), None);
        assert_eq!(mirror_path(true, None, None, &home), Some(imlazy.clone()));
        assert_eq!(mirror_path(false, Some(true), None, &home), Some(imlazy));
        assert_eq!(mirror_path(true, None, Some("/x".into()), &home), Some(PathBuf::from("/x")));
        assert_eq!(mirror_path(true, None, None, &none), None);
    }

    #[test]
    fn an_import_needs_an_object_with_a_node_an_episode_and_a_project_hash() {
        let good = state::initial("e1", "p1", "2026-01-01T00:00:00Z");
        assert_eq!(importable(&good.to_string()), Ok(good.clone()));
        assert_eq!(importable("[]"), Err("not a JSON object".into()));
        assert!(importable("{").unwrap_err().starts_with("not JSON: "));
        let mut bad = good.clone();
        bad["current_node"] = json!("NOWHERE");
        assert!(importable(&bad.to_string()).unwrap_err().starts_with("current_node: "));
        let mut bad = good;
        bad["project_hash"] = json!(3);
        assert_eq!(importable(&bad.to_string()), Err("project_hash is missing or not text".into()));
    }

    #[test]
    fn a_refusal_is_printed_as_imlazys_error_object() {
        assert_eq!(Reply::Refused(NO_STATE.into()).to_json(), json!({"error": NO_STATE}));
        assert_eq!(Reply::Ok(json!({"a": 1})).to_json(), json!({"a": 1}));
    }
}
