//! The changes a [`Step::Commit`](super::Step::Commit) writes, as data, and
//! [`apply`], which makes them on the newest head.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::judge::strings;
use crate::state::{self, Node, StateError};

/// One change to a version, applied by [`apply`] to the newest head when
/// the driver writes it (again on the next head if another writer got
/// there first, so no update is lost).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Sets a state path.
    Set {
        /// Dotted path.
        key: String,
        /// Value.
        value: Value,
    },
    /// Appends to a state list.
    Append {
        /// Dotted path.
        key: String,
        /// Value.
        value: Value,
    },
    /// Moves to a node by the transition table.
    Transition {
        /// The node's name (REFLECTOR's route may name any).
        to: String,
    },
    /// Enters REFLECTOR, or, with no retry left, marks the episode escalated.
    ReflectOrEscalate,
    /// Sets a field of the episode's record.
    Record {
        /// The field.
        key: String,
        /// Value.
        value: Value,
    },
    /// Replaces the episode's record.
    NewRecord {
        /// The record.
        record: Value,
    },
    /// One more attempt in the record.
    NextAttempt,
    /// Adds tests that pass to the anchors (those on record kept first).
    AddAnchors {
        /// Names of passing tests.
        passing: Vec<String>,
    },
    /// A person looked at an escalated episode: one more attempt than was
    /// spent, and no longer escalated.
    Reopen,
}

/// Applies `ops` to a head's state and record; `now` stamps transitions.
/// Nothing is changed when an op is refused (the caller discards both).
pub fn apply(ops: &[Op], state: &mut Value, episode: &mut Value, now: &str) -> Result<(), StateError> {
    for op in ops {
        match op {
            Op::Set { key, value } => state::set(state, key, value.clone())?,
            Op::Append { key, value } => state::append(state, key, value.clone())?,
            Op::Transition { to } => {
                state::transition(state, to, now)?;
            }
            Op::ReflectOrEscalate => match state::transition(state, Node::Reflector.as_str(), now) {
                Ok(_) => {}
                // No retry left: the episode stops here for a person.
                Err(StateError::Escalate { .. }) => episode["escalated"] = json!(true),
                Err(other) => return Err(other),
            },
            Op::Record { key, value } => record(episode)?.insert(key.clone(), value.clone()).map_or((), drop),
            Op::NewRecord { record } => *episode = record.clone(),
            Op::NextAttempt => {
                let next = episode["attempt"].as_u64().unwrap_or(0) + 1;
                record(episode)?.insert("attempt".into(), json!(next));
            }
            Op::AddAnchors { passing } => {
                let mut all = strings(&state["test_results"]["anchor_tests"]);
                let new: Vec<String> = passing.iter().filter(|p| !all.contains(p)).cloned().collect();
                all.extend(new);
                state::set(state, "test_results.anchor_tests", json!(all))?;
            }
            Op::Reopen => {
                if episode["escalated"] == json!(true) {
                    let spent = state["retry_count"].as_u64().unwrap_or(0);
                    state::set(state, "max_retries", json!(spent + 1))?;
                    episode["escalated"] = json!(false);
                }
            }
        }
    }
    Ok(())
}

fn record(episode: &mut Value) -> Result<&mut Map<String, Value>, StateError> {
    if episode.is_null() {
        *episode = json!({});
    }
    episode.as_object_mut().ok_or_else(|| StateError::Damaged("the episode's record is not an object".into()))
}
