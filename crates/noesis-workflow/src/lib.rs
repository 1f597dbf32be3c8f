//! The verified coding workflow's state.
//!
//! A [`CognitiveState`](state) is the JSON object the seed's workflow
//! (imlazy) keeps — exactly its fields, in its order — and this crate owns
//! the rules over it: which node may follow which ([`Node::next`]), the
//! retry budget (each entry into REFLECTOR spends one; at `max_retries` the
//! episode escalates instead), and the path operations of imlazy's state
//! manager (`get`, `set`, `update`, `transition`). Everything here is pure:
//! the caller supplies the clock and the ids and stores the result.
//! [`snapshot`] touches the disk: the working-tree snapshots the anchor
//! rule restores.
//!
//! The episode itself — PLANNER → REASONER → CODER → VERIFIER →
//! CONSOLIDATOR, REFLECTOR on failure, anchors restored, escalation, resume
//! — is [`episode::Episode`], a state machine without I/O, and
//! [`driver`] performs its steps with the real engine: module runs, CODER's
//! agent run, sandboxed test runs, snapshots and the project's versioned
//! state in the store ([`versions`]). [`served`] keeps the episodes a
//! server runs for its clients: their event logs, approvals and the
//! one-episode rule, read by the HTTP routes and the dashboard alike.

pub mod commands;
pub mod driver;
pub mod episode;
pub mod judge;
pub mod junit;
pub mod served;
/// Working-tree snapshots (noesis-fs's, where the agent host's rewind
/// uses them too).
pub use noesis_fs::snapshot;
pub mod state;
pub mod versions;

pub use state::{NODES, Node, StateError, Transitioned, append, current, get, initial, parse_value, set, transition};
