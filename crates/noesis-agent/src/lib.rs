//! The agent loop — perceive, think, act, reflect — as a sans-IO state
//! machine.
//!
//! An [`AgentRun`] holds the task, the conversation, one [`CallRecord`] per
//! tool call with its status, what was spent, and where it stands. It does
//! no I/O, reads no clock and makes no ids: a driver (the CLI, the server,
//! a test) asks [`AgentRun::next`] for the next [`Action`] — call the
//! model, execute tools, wait for approval, or done — performs it and
//! reports back. Between any two steps the run serialises to JSON (with a
//! schema version) and can be continued in another process:
//! [`AgentRun::resume`] turns calls that were running into interrupted
//! results instead of running them twice.
//!
//! ```
//! use noesis_agent::{Action, AgentRun, RunConfig, ToolDecl, ToolOutput};
//! use noesis_llm::{ChatResponse, StructuredMode, ToolCall};
//! use serde_json::json;
//!
//! let mut config = RunConfig::default();
//! config.tools.push(ToolDecl::read_only(
//!     "add",
//!     "Adds two numbers.",
//!     json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
//! ));
//! let mut run = AgentRun::new("run-1", "What is 2 + 3?", config, 0);
//!
//! // The driver's loop, with scripted model replies standing in for a provider.
//! let mut replies = vec![
//!     ChatResponse { tool_calls: vec![ToolCall { id: "c1".into(), name: "add".into(), arguments: json!({"a": 2, "b": 3}) }],
//!                    ..ChatResponse::text("", "m", StructuredMode::Text) },
//!     ChatResponse::text("5", "m", StructuredMode::Text),
//! ].into_iter();
//! let answer = loop {
//!     match run.next(0) {
//!         Action::CallModel(_request) => run.on_model_reply(&replies.next().unwrap(), 0.0).unwrap(),
//!         Action::ExecuteTools(calls) => {
//!             for call in calls {
//!                 run.started(&call.call_id, 0).unwrap();
//!                 let sum = call.arguments["a"].as_f64().unwrap() + call.arguments["b"].as_f64().unwrap();
//!                 run.finished(&call.call_id, ToolOutput::ok(sum.to_string()), 0).unwrap();
//!             }
//!         }
//!         Action::Done(outcome) => break outcome,
//!         other => unreachable!("{other:?}"),
//!     }
//! };
//! assert_eq!(answer, noesis_agent::Outcome::Answer { text: "5".into() });
//! assert_eq!(run.calls[0].result.as_deref(), Some("5"));
//! ```
#![deny(missing_docs)]

pub mod builtin;
mod cognitive;
mod config;
mod driver;
pub mod events;
mod memory;
pub mod permission;
mod record;
mod replay;
pub mod retention;
mod run;
pub mod summary;
pub mod supervisor;
mod tool;

pub use cognitive::{
    CognitiveConfig, CognitiveLoop, ExecutionResult, Observation, Perception, Plan, ReactAgent, ThoughtStep,
};
pub use config::{ApprovalPolicy, ContextConfig, Limits, RunConfig, Strategy, ToolFilter};
pub use driver::{
    AsRole, BatchEndFn, BatchEndFuture, CallContext, Checkpoint, DriveError, Driver, ModelRouter, Progress,
    TOOL_TIMEOUT, ToolFn, ToolFuture, ToolSource, Toolbox, TreeBudget, current_call_id, drive, tree_budget,
};

/// The tool registry by the seed's name: see [`Toolbox`].
pub type ToolRegistry = Toolbox;
pub use memory::{MemoryBuffer, MemoryItem, MemoryKind};
pub use noesis_fs::{ConfineError, Workspace};
pub use permission::{Effect, Layer, Permissions, RuleError, Ruling};
pub use record::{CallRecord, CallStatus};
pub use replay::{Replayed, outcome_name, replay};
pub use run::{
    Action, AgentRun, Compaction, Critique, Decision, Entry, Fact, FactKind, INTERRUPTED, Invocation, McpOutcome,
    NO_RESULT, Outcome, Pending, RECALL, RecordedCall, ReplyRecord, RunChange, RunCursor, RunUsage, SCHEMA_VERSION,
    StepError, StopReason, ToolEvidence, ToolOutput, ToolSpend, Verdict, facts_of,
};
pub use tool::{Effects, ToolDecl, output_schema_problem};
