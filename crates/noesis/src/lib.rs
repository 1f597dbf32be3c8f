//! noesis as a library: the curated API a Rust program embeds.
//!
//! Every front end of noesis — the `noesis` binary, `noesis serve`, the
//! dashboard — drives the same calls this crate re-exports. The layers below
//! (`noesis-modules`, `noesis-agent`, …) stay usable on their own; this crate
//! picks the parts a program needs and names them by task:
//!
//! - [`module`]: load, run and compose Cognitive Modules (v2.2, levels 1–3);
//! - [`llm`]: providers (OpenAI-compatible, Anthropic, Gemini, Ollama, a
//!   scripted one, the schema-driven test model) and their request types;
//! - [`agent`]: an agent run as a value, driven with tools and approvals;
//! - [`store`]: the SQLite (or PostgreSQL) store of runs, frames and sessions;
//! - [`frames`]: causal frames, projects and sessions;
//! - [`plugin`]: the frame core's plugin boundary, and the built-in plugins
//!   (`docs`, `review`, `testgen`, `ask`) as library calls;
//! - [`sandbox`]: how a process a model chose runs confined;
//! - [`workflow`]: the `solve` episode as a state machine, its driver and
//!   the versioned CognitiveState;
//! - [`prelude`]: the names most programs want.
//!
//! Run a built-in module with the test model (no network, no key):
//!
//! ```
//! use noesis::prelude::*;
//!
//! let module = SearchPath::from_env(&[]).resolve("code-simplifier").unwrap().load().unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let record = rt.block_on(run_module(&module, &TestModel, serde_json::json!({"code": "x = 1"}), &RunOptions::default()));
//! assert_eq!(record.envelope["ok"], true);
//! assert!(record.envelope["meta"]["confidence"].is_number());
//! ```
//!
//! Architecture invariant: this crate holds no logic of its own — only
//! `pub use`. Adding a name here is an API change.
#![deny(missing_docs)]

/// Cognitive Modules: find, load, validate, run and compose.
///
/// A run always ends in an envelope that validates against the v2.2 schema;
/// failures are E-coded envelopes, never panics.
pub mod module {
    pub use noesis_modules::search::{Found, Listed, NotFound, SearchPath};
    pub use noesis_modules::{ErrorCode, Failure, LoadError, Manifest, Module, load_dir, validate_envelope};
    pub use noesis_runtime::compose::{
        ComposeOptions, ComposeRecord, Resolver, SearchResolver, StepTrace, execute as compose,
    };
    pub use noesis_runtime::{CancellationToken, RunOptions, RunRecord, run};
}

/// Language models: the [`llm::Provider`] trait, the providers noesis
/// ships and what goes to and comes back from them.
pub mod llm {
    pub use noesis_llm::{
        Anthropic, Budget, Capabilities, ChatRequest, ChatResponse, EndpointConfig, ErrorKind, FinishReason, Gemini,
        HttpSettings, Message, Ollama, OpenAiCompatible, Price, PriceTable, Provider, ProviderError, ResponseFormat,
        Role, Scripted, StructuredMode, TestModel, ToolCall, ToolSpec, Usage,
    };
}

/// Agents: a run is a serialisable value ([`agent::AgentRun`]) that says
/// what to do next; a [`agent::Driver`] performs it with a provider and a
/// [`agent::Toolbox`], stopping when a person must approve a call.
pub mod agent {
    pub use noesis_agent::events::{Event, EventBus, Subscription};
    pub use noesis_agent::{
        Action, AgentRun, ApprovalPolicy, CallRecord, CallStatus, Checkpoint, Decision, DriveError, Driver, Effects,
        Invocation, Limits, Outcome, Pending, Permissions, Progress, RunConfig, StopReason, ToolDecl, ToolFn,
        ToolFuture, ToolOutput, ToolSource, Toolbox, Verdict, Workspace, drive,
    };
}

/// The store: runs, frames, sessions and memory in SQLite (the default, a
/// file) or PostgreSQL, behind one trait.
pub mod store {
    pub use noesis_store::{FrameFilter, NewSession, SessionKind, SqlStore, Store, StoreError, open};
}

/// Causal memory: frames (a step with its evidence, confidence and the
/// condition that would invalidate it), the tree they form, projects and
/// sessions.
pub mod frames {
    pub use noesis_frames::project::{Project, identify};
    pub use noesis_frames::{
        CausalFrame, Draft, Evidence, FrameId, FrameTree, Invalidation, SessionArtifacts, Status, Timestamp,
    };
}

/// The frame core's plugin boundary: a [`plugin::Plugin`] shapes what the
/// model sees and reads what it says; the [`plugin::Core`] records the
/// frame, its evidence and its invalidation.
pub mod plugin {
    pub use noesis_plugin::{
        ContextSlice, Core, CoreContext, CoreError, ExternalPlugin, ExternalSpec, Outcome, Parsed, Plugin, PluginError,
        Step, Think, Thought,
    };
    pub use noesis_plugins::{
        Error as PluginRunError, ModuleThink, Setting, ask, docs, inside, recall, review, testgen,
    };
}

/// The trust boundary: processes a model chose run confined (files,
/// network, environment, process tree), and secret values are redacted
/// from what they print.
pub mod sandbox {
    pub use noesis_sandbox::{Finished, Mode, Redactor, RunOptions, Sandbox, SandboxError, Settings, Support, probe};
}

/// The verified workflow: the `solve` episode (PLANNER → REASONER → CODER →
/// VERIFIER → CONSOLIDATOR, REFLECTOR on failure) as a state machine without
/// I/O ([`workflow::Episode`]: `next()` says what to do, the caller feeds
/// the result back), its [`workflow::Driver`] over the engine, and the
/// versioned CognitiveState it keeps.
pub mod workflow {
    pub use noesis_workflow::driver::{Approver, DriveError as EpisodeDriveError, Driver, Observer};
    pub use noesis_workflow::episode::{
        CoderReport, CoderRun, Episode, EpisodeError, Head, Memory, Op, Outcome, Step, TestRun, TestSet, apply,
    };
    pub use noesis_workflow::snapshot::Changes;
    pub use noesis_workflow::versions::States;
    pub use noesis_workflow::{NODES, Node, StateError, Transitioned, initial, transition};
}

/// The names most programs want, for `use noesis::prelude::*`.
pub mod prelude {
    pub use crate::agent::{
        Action, AgentRun, ApprovalPolicy, Decision, Driver, Effects, Outcome, RunConfig, ToolDecl, ToolOutput, Toolbox,
        Verdict, Workspace,
    };
    pub use crate::llm::{ChatRequest, ChatResponse, Provider, Scripted, TestModel};
    pub use crate::module::{Module, RunOptions, RunRecord, SearchPath, run as run_module};
    pub use crate::plugin::{Core, Plugin};
    pub use crate::store::{SqlStore, Store};
}
