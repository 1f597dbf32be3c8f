//! The CognitiveState and the operations on it.
//!
//! The state is kept as a JSON object so that what imlazy's hooks wrote and
//! read round-trips untouched (a field a hook added survives), while every
//! operation here checks what it relies on and says which key was wrong.

use std::fmt;

use serde_json::{Map, Value, json};

/// A node of the workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// Understands the problem and picks a solution.
    Planner,
    /// Turns the solution into a plan.
    Reasoner,
    /// Changes the code (an agent run).
    Coder,
    /// Runs the public, AI and anchor tests.
    Verifier,
    /// Critiques a failed attempt and routes back.
    Reflector,
    /// Archives the episode.
    Consolidator,
}

/// Every node, in imlazy's order (its `VALID_NODES`).
pub const NODES: [Node; 6] =
    [Node::Planner, Node::Reasoner, Node::Coder, Node::Verifier, Node::Reflector, Node::Consolidator];

impl Node {
    /// The node's name as the state spells it (`PLANNER`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Node::Planner => "PLANNER",
            Node::Reasoner => "REASONER",
            Node::Coder => "CODER",
            Node::Verifier => "VERIFIER",
            Node::Reflector => "REFLECTOR",
            Node::Consolidator => "CONSOLIDATOR",
        }
    }

    /// A node by name, in any case (imlazy upper-cases what it is given).
    pub fn parse(name: &str) -> Option<Node> {
        NODES.into_iter().find(|n| n.as_str().eq_ignore_ascii_case(name.trim()))
    }

    /// The nodes that may follow this one. CONSOLIDATOR ends the episode:
    /// nothing follows it (`reset` starts the next).
    pub fn next(self) -> &'static [Node] {
        match self {
            Node::Planner => &[Node::Reasoner],
            Node::Reasoner => &[Node::Coder],
            Node::Coder => &[Node::Verifier],
            Node::Verifier => &[Node::Consolidator, Node::Reflector],
            Node::Reflector => &[Node::Planner, Node::Reasoner, Node::Coder],
            Node::Consolidator => &[],
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operation the state refuses; the state is left as it was.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    /// `get` of a key the state does not have (imlazy's wording).
    #[error("Key not found: {0}")]
    KeyNotFound(String),
    /// `update` of a key that holds something other than a list (imlazy's
    /// wording).
    #[error("Key {0} is not a list")]
    NotAList(String),
    /// A key whose path runs through something other than an object.
    #[error("cannot reach {key}: {at} is not an object")]
    NotAnObject {
        /// The key asked for.
        key: String,
        /// The part of its path that holds a non-object.
        at: String,
    },
    /// A key only transitions may change.
    #[error("{key} changes only through `transition` (the transition table and the retry budget)")]
    Guarded {
        /// The key.
        key: String,
    },
    /// A key that is empty or has an empty part.
    #[error("the key {0:?} is empty or has an empty part")]
    BadKey(String),
    /// Not a node (imlazy's wording, with the list).
    #[error("Invalid node: {node}. Valid: {}", valid())]
    InvalidNode {
        /// What was given, upper-cased.
        node: String,
    },
    /// A node that may not follow the current one.
    #[error("illegal transition {from} → {to}: {}", legal_after(*.from))]
    Illegal {
        /// The current node.
        from: Node,
        /// The node asked for.
        to: Node,
    },
    /// Another REFLECTOR visit with the retry budget spent: the episode
    /// escalates to a person instead.
    #[error("the retry budget is spent ({retries} of {max}): the episode escalates instead of entering REFLECTOR")]
    Escalate {
        /// `retry_count`.
        retries: u64,
        /// `max_retries`.
        max: u64,
    },
    /// The stored state lacks something every state has.
    #[error("the state is damaged: {0}")]
    Damaged(String),
}

fn valid() -> String {
    let names: Vec<String> = NODES.iter().map(|n| format!("'{n}'")).collect();
    format!("[{}]", names.join(", "))
}

fn legal_after(from: Node) -> String {
    match from.next() {
        [] => format!("{from} ends the episode (reset starts the next)"),
        [one] => format!("after {from} comes {one}"),
        many => {
            let names: Vec<&str> = many.iter().map(|n| n.as_str()).collect();
            format!("after {from} come {}", names.join(" or "))
        }
    }
}

/// A new episode's state: imlazy's fields in imlazy's order.
pub fn initial(episode_id: &str, project_hash: &str, now: &str) -> Value {
    json!({
        "user_query": "",
        "problem_reflection": {"goal": "", "inputs": [], "outputs": [], "constraints": [], "edge_cases": []},
        "current_plan": [],
        "thought_trace": [],
        "critiques": [],
        "possible_solutions": [],
        "selected_solution": "",
        "file_context": {},
        "test_results": {"public_tests": [], "ai_tests": [], "anchor_tests": []},
        "error_log": [],
        "current_node": "PLANNER",
        "retry_count": 0,
        "max_retries": 3,
        "episode_id": episode_id,
        "project_hash": project_hash,
        "created_at": now,
        "updated_at": now,
    })
}

/// A command-line value: JSON when it starts with `[` or `{` and parses,
/// the text itself otherwise (imlazy's rule).
pub fn parse_value(raw: &str) -> Value {
    if (raw.starts_with('[') || raw.starts_with('{'))
        && let Ok(v) = serde_json::from_str(raw)
    {
        return v;
    }
    Value::String(raw.to_owned())
}

fn parts(key: &str) -> Result<Vec<&str>, StateError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(StateError::BadKey(key.to_owned()));
    }
    Ok(parts)
}

/// The value at `key` (`a.b.c` walks objects).
pub fn get<'s>(state: &'s Value, key: &str) -> Result<&'s Value, StateError> {
    let mut at = state;
    for p in parts(key)? {
        at = at.as_object().and_then(|o| o.get(p)).ok_or_else(|| StateError::KeyNotFound(key.to_owned()))?;
    }
    Ok(at)
}

/// The object that holds `key`'s last part, made on the way where missing.
fn parent<'s>(state: &'s mut Value, key: &str) -> Result<(&'s mut Map<String, Value>, String), StateError> {
    let parts = parts(key)?;
    if matches!(parts[0], "current_node" | "retry_count") {
        return Err(StateError::Guarded { key: parts[0].to_owned() });
    }
    let (last, path) = parts.split_last().ok_or_else(|| StateError::BadKey(key.to_owned()))?;
    let mut at = state;
    let mut walked = Vec::new();
    for p in path {
        walked.push(*p);
        let here = walked.join(".");
        let obj =
            at.as_object_mut().ok_or_else(|| StateError::NotAnObject { key: key.to_owned(), at: here.clone() })?;
        at = obj.entry((*p).to_owned()).or_insert_with(|| Value::Object(Map::new()));
    }
    let here = if path.is_empty() { "the state".to_owned() } else { path.join(".") };
    let obj = at.as_object_mut().ok_or(StateError::NotAnObject { key: key.to_owned(), at: here })?;
    Ok((obj, (*last).to_owned()))
}

/// Sets `key` to `value`, making missing objects on the way.
pub fn set(state: &mut Value, key: &str, value: Value) -> Result<(), StateError> {
    let (obj, last) = parent(state, key)?;
    obj.insert(last, value);
    Ok(())
}

/// Appends `value` to the list at `key` (a missing key becomes a list).
pub fn append(state: &mut Value, key: &str, value: Value) -> Result<(), StateError> {
    let (obj, last) = parent(state, key)?;
    match obj.entry(last).or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(items) => {
            items.push(value);
            Ok(())
        }
        _ => Err(StateError::NotAList(key.to_owned())),
    }
}

/// A transition made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transitioned {
    /// The node left.
    pub from: Node,
    /// The node entered.
    pub to: Node,
}

fn count(state: &Value, key: &str, default: u64) -> Result<u64, StateError> {
    match state.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().ok_or_else(|| StateError::Damaged(format!("{key} is {v}, not a count"))),
    }
}

/// Moves the state to `to` when the table allows it: records the
/// transition in `thought_trace` (imlazy's entry) and spends a retry on
/// entering REFLECTOR, or refuses with [`StateError::Escalate`] when none
/// is left. A refused transition changes nothing.
pub fn transition(state: &mut Value, to: &str, now: &str) -> Result<Transitioned, StateError> {
    let to = Node::parse(to).ok_or_else(|| StateError::InvalidNode { node: to.trim().to_uppercase() })?;
    let current = state.get("current_node").and_then(Value::as_str).unwrap_or_default();
    let from = Node::parse(current).ok_or_else(|| StateError::Damaged(format!("current_node is {current:?}")))?;
    if !from.next().contains(&to) {
        return Err(StateError::Illegal { from, to });
    }
    if !state.get("thought_trace").is_none_or(Value::is_array) {
        return Err(StateError::Damaged("thought_trace is not a list".into()));
    }
    let retries = count(state, "retry_count", 0)?;
    let max = count(state, "max_retries", 3)?;
    if to == Node::Reflector && retries >= max {
        return Err(StateError::Escalate { retries, max });
    }
    let obj = state.as_object_mut().ok_or_else(|| StateError::Damaged("the state is not an object".into()))?;
    if to == Node::Reflector {
        obj.insert("retry_count".into(), json!(retries + 1));
    }
    obj.insert("current_node".into(), json!(to.as_str()));
    let entry = json!({"type": "transition", "from": from.as_str(), "to": to.as_str(), "timestamp": now});
    // A list or missing: checked above.
    if let Value::Array(items) = obj.entry("thought_trace").or_insert_with(|| Value::Array(Vec::new())) {
        items.push(entry);
    }
    Ok(Transitioned { from, to })
}

/// The node the state is at.
pub fn current(state: &Value) -> Result<Node, StateError> {
    let name = state.get("current_node").and_then(Value::as_str).unwrap_or_default();
    Node::parse(name).ok_or_else(|| StateError::Damaged(format!("current_node is {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Value {
        initial("ep1", "abcd1234", "T0")
    }

    #[test]
    fn the_initial_state_has_imlazys_fields_in_its_order() {
        let s = fresh();
        let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "user_query",
                "problem_reflection",
                "current_plan",
                "thought_trace",
                "critiques",
                "possible_solutions",
                "selected_solution",
                "file_context",
                "test_results",
                "error_log",
                "current_node",
                "retry_count",
                "max_retries",
                "episode_id",
                "project_hash",
                "created_at",
                "updated_at"
            ]
        );
        assert_eq!(s["max_retries"], 3);
        assert_eq!(current(&s).unwrap(), Node::Planner);
    }

    #[test]
    fn paths_get_set_and_append_like_the_state_manager() {
        let mut s = fresh();
        set(&mut s, "problem_reflection.goal", json!("fix it")).unwrap();
        assert_eq!(get(&s, "problem_reflection.goal").unwrap(), "fix it");
        set(&mut s, "new.deep.key", json!(1)).unwrap();
        assert_eq!(s["new"], json!({"deep": {"key": 1}}));
        append(&mut s, "critiques", json!({"a": 1})).unwrap();
        append(&mut s, "fresh_list", json!("x")).unwrap();
        assert_eq!(s["critiques"], json!([{"a": 1}]));
        assert_eq!(s["fresh_list"], json!(["x"]));
        assert_eq!(get(&s, "nope.x"), Err(StateError::KeyNotFound("nope.x".into())));
        assert_eq!(get(&s, "user_query.x"), Err(StateError::KeyNotFound("user_query.x".into())));
        assert_eq!(append(&mut s, "user_query", json!(1)), Err(StateError::NotAList("user_query".into())));
        let e = set(&mut s, "user_query.x", json!(1)).unwrap_err();
        assert_eq!(e.to_string(), "cannot reach user_query.x: user_query is not an object");
        assert!(matches!(set(&mut s, "current_node", json!("CODER")), Err(StateError::Guarded { .. })));
        assert!(matches!(append(&mut s, "retry_count", json!(1)), Err(StateError::Guarded { .. })));
        assert!(matches!(set(&mut s, "a..b", json!(1)), Err(StateError::BadKey(_))));
    }

    #[test]
    fn values_that_look_like_json_are_parsed() {
        assert_eq!(parse_value("[1, 2]"), json!([1, 2]));
        assert_eq!(parse_value("{\"a\": true}"), json!({"a": true}));
        assert_eq!(parse_value("[not json"), json!("[not json"));
        assert_eq!(parse_value("42"), json!("42"), "only [ and {{ are parsed, as imlazy does");
    }

    #[test]
    fn only_the_table_s_transitions_are_allowed() {
        for from in NODES {
            for to in NODES {
                let mut s = fresh();
                s["current_node"] = json!(from.as_str());
                let before = s.clone();
                let r = transition(&mut s, to.as_str(), "T1");
                if from.next().contains(&to) {
                    assert_eq!(r, Ok(Transitioned { from, to }));
                    assert_eq!(s["current_node"], to.as_str());
                    assert_eq!(
                        s["thought_trace"],
                        json!([{"type": "transition", "from": from.as_str(), "to": to.as_str(), "timestamp": "T1"}])
                    );
                } else {
                    assert_eq!(r, Err(StateError::Illegal { from, to }));
                    assert_eq!(s, before, "a refused transition changes nothing");
                }
            }
        }
        let e = transition(&mut fresh(), "CODER", "T").unwrap_err().to_string();
        assert_eq!(e, "illegal transition PLANNER → CODER: after PLANNER comes REASONER");
        let mut s = fresh();
        s["current_node"] = json!("REFLECTOR");
        let e = transition(&mut s, "verifier", "T").unwrap_err().to_string();
        assert_eq!(e, "illegal transition REFLECTOR → VERIFIER: after REFLECTOR come PLANNER or REASONER or CODER");
        let e = transition(&mut fresh(), "tester", "T").unwrap_err().to_string();
        assert_eq!(
            e,
            "Invalid node: TESTER. Valid: ['PLANNER', 'REASONER', 'CODER', 'VERIFIER', 'REFLECTOR', 'CONSOLIDATOR']"
        );
    }

    #[test]
    fn each_reflection_spends_a_retry_and_the_last_one_escalates() {
        let mut s = fresh();
        for node in ["REASONER", "CODER", "VERIFIER"] {
            transition(&mut s, node, "T").unwrap();
        }
        for spent in 1..=3 {
            transition(&mut s, "REFLECTOR", "T").unwrap();
            assert_eq!(s["retry_count"], spent);
            transition(&mut s, "CODER", "T").unwrap();
            transition(&mut s, "VERIFIER", "T").unwrap();
        }
        let before = s.clone();
        assert_eq!(transition(&mut s, "REFLECTOR", "T"), Err(StateError::Escalate { retries: 3, max: 3 }));
        assert_eq!(s, before);
        // Success is still possible with the budget spent.
        transition(&mut s, "CONSOLIDATOR", "T").unwrap();
        assert!(matches!(transition(&mut s, "PLANNER", "T"), Err(StateError::Illegal { .. })));
    }

    #[test]
    fn a_damaged_state_is_named() {
        let mut s = fresh();
        s["current_node"] = json!("NOWHERE");
        assert_eq!(
            transition(&mut s, "REASONER", "T").unwrap_err().to_string(),
            "the state is damaged: current_node is \"NOWHERE\""
        );
        let mut s = fresh();
        s["retry_count"] = json!("two");
        s["current_node"] = json!("VERIFIER");
        assert!(matches!(transition(&mut s, "REFLECTOR", "T"), Err(StateError::Damaged(_))));
    }
}
