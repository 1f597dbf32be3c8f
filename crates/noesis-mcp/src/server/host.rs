//! What the server serves, as traits the embedding program implements: the
//! modules ([`Modules`]) and, when the `agent` tool is offered, agent runs
//! ([`Agents`]).
//!
//! `noesis-serve` implements them over its `Service` and `AgentRuns`. The
//! traits keep this crate from depending on the HTTP server, so the agent
//! host that equips runs with this crate's client can sit below it.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use noesis_agent::AgentRun;
use noesis_agent::events::Event;
use noesis_modules::{Failure, Module};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A module run asked for by the `run` or `compose` tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModuleCall {
    /// The module's name (never a path).
    pub module: String,
    /// Its input, a JSON object.
    pub input: Option<Value>,
    /// Argument text for `$ARGUMENTS`.
    pub args: Option<String>,
    /// A provider instead of the server's default.
    pub provider: Option<String>,
    /// A model instead of the provider's default.
    pub model: Option<String>,
}

/// One module on the server's search path.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Whether it loads.
    pub valid: bool,
    /// What it is for.
    pub responsibility: Option<String>,
    /// What the `list` tool shows of it.
    pub summary: Value,
}

/// The modules an MCP server serves.
///
/// `list`, `info` and `module` may block (they read and compile module
/// files); the server calls them off its async workers.
pub trait Modules: Send + Sync + 'static {
    /// Runs a module to its v2.2 envelope (a failure envelope when it is
    /// refused); `cancel` ends it with E2002.
    fn run(&self, call: ModuleCall, cancel: CancellationToken) -> BoxFuture<'_, Value>;
    /// As [`Modules::run`], with every step of the module's composition in
    /// `meta.steps`.
    fn compose(&self, call: ModuleCall, cancel: CancellationToken) -> BoxFuture<'_, Value>;
    /// Every module on the search path, in search order.
    fn list(&self) -> Vec<Listed>;
    /// A module's manifest, rules and schemas, or a failure envelope (E4006
    /// for a name it does not know).
    fn info(&self, name: &str) -> Result<Value, Value>;
    /// A loaded module, or a failure envelope (E4006 for a name it does not
    /// know, E4000 for one that does not load).
    fn module(&self, name: &str) -> Result<Arc<Module>, Value>;
    /// The stamped failure envelope of a request refused before any model
    /// was chosen.
    fn refuse(&self, failure: Failure, started: Instant) -> Value;
}

/// A task for the `agent` tool.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTask {
    /// What the agent should do.
    pub task: String,
    /// `auto` or `never`: over MCP no person can be asked.
    pub approve: String,
    /// Offer only these tools (empty: all).
    pub tools: Vec<String>,
    /// Most model calls.
    pub max_turns: Option<u32>,
}

/// The agent runs behind the `agent` tool.
pub trait Agents: Send + Sync + 'static {
    /// Starts a run: its id, or why it was refused.
    fn start(&self, task: AgentTask) -> BoxFuture<'_, Result<String, String>>;
    /// Makes an earlier run go on (resumed here when no live process drives
    /// it), or says why it cannot.
    fn follow<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// Waits for the run's end, calling `each` for every event on the way;
    /// `cancel` stops the waiting.
    fn wait<'a>(
        &'a self,
        id: &'a str,
        each: &'a mut (dyn FnMut(&Event) + Send),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AgentRun, String>>;
    /// Stops every run as the server's doing, so the next session resumes
    /// them.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}
