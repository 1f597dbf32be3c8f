//! The agent host: everything between a stored agent run and a driver that
//! can step it, as a library the command line, the server, the dashboard
//! and workers share.
//!
//! - [`provider`]: which provider answers (flags, environment, config,
//!   routes), the providers a process keeps, budgets and prices;
//! - [`host`]: a run made drivable from its record — workspace, rules,
//!   sandbox, MCP servers, router — or refused where that cannot be had;
//! - [`rules`], [`tools`], [`route`]: the operator's permission layer, the
//!   host's own tools (`run_module`, frames, `sub_agent`), the role router;
//! - [`worktree`], [`merge`]: sub-agents isolated in git worktrees, and
//!   their changes compared (pure) before any reaches the parent;
//! - [`launch`], [`drive`]: a new run from a person's choices as plain
//!   data, and a run driven until it stops with the front end showing its
//!   events and asked for decisions;
//! - [`runs`], [`frames`]: runs kept in the store (found, decided,
//!   replayed) and written as frames;
//! - [`served`], [`lease`]: runs started by clients of a server, and which
//!   process may drive them;
//! - [`place`]: the store in force and the project of a folder;
//!   [`doctor`]: the providers checked, as data.
//!
//! Architecture invariant: no printing and no terminal — what a person
//! should hear goes through a `note` callback the front end gives; errors
//! are [`HostError`]s whose messages name what to do.
//!
//! ```
//! use noesis_agent::{AgentRun, RunConfig};
//! let mut run = AgentRun::new("r1", "task", RunConfig::default(), 0);
//! run.host = serde_json::json!({"workspace": "/srv/project", "depth": 1});
//! let recorded = noesis_host::host::Recorded::of(&run).unwrap();
//! assert_eq!((recorded.workspace.to_str(), recorded.depth), (Some("/srv/project"), 1));
//! ```
#![deny(missing_docs)]

pub mod doctor;
pub mod drive;
pub mod frames;
pub mod hold;
pub mod host;
pub mod launch;
pub mod lease;
pub mod local;
pub mod merge;
pub mod place;
pub mod provider;
pub mod questions;
pub mod rewind;
pub mod route;
pub mod rules;
pub mod runs;
pub mod served;
pub mod tools;
pub mod worktree;

pub use host::{Equipped, Host, NewRun, Reach, Recorded};

/// What went wrong setting a run up.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The settings.
    #[error(transparent)]
    Config(#[from] noesis_config::ConfigError),
    /// A provider could not be made.
    #[error(transparent)]
    Provider(#[from] noesis_llm::ProviderError),
    /// The store.
    #[error(transparent)]
    Store(#[from] noesis_store::StoreError),
    /// A permission rule.
    #[error(transparent)]
    Rule(#[from] noesis_agent::RuleError),
    /// A new run names a tool nobody offers.
    #[error("no tool `{name}` (the tools are {})", known.join(", "))]
    UnknownTool {
        /// The name given.
        name: String,
        /// The tools there are.
        known: Vec<String>,
    },
    /// A request named a provider or model the server does not allow.
    #[error("{0}")]
    NotAllowed(String),
    /// This front end cannot provide what the run recorded (its workspace,
    /// an MCP server); the message says where it can go on.
    #[error("{0}")]
    Refused(String),
    /// Anything else, said in full.
    #[error("{0}")]
    Message(String),
}

/// `e` and every error under it, joined by `: ` (as the command line
/// prints an error), for a message that must keep the causes.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// Results of this crate.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::HostError::Message(format!($($t)*))) };
}
pub(crate) use bail;

#[cfg(test)]
mod tests {
    #[test]
    fn a_chain_keeps_every_cause_in_order() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(super::chain(&e), "outer: inner");
        assert_eq!(super::chain(&std::io::Error::other("alone")), "alone");
    }
}
