//! How a run is set up: strategy, tools, approval policy and limits.

use serde::{Deserialize, Serialize};

use crate::permission::Permissions;
use crate::tool::ToolDecl;

/// How the model works towards the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// One model call, no tools.
    SingleShot,
    /// Think, call tools, observe, think again, until an answer or a limit.
    #[default]
    React,
    /// A numbered plan first, then each step acted on (with tools), then
    /// the answer.
    ChainOfThought,
}

/// Whether calls of tools that write, run commands or use the network may
/// run without a person's decision. Read-only tools never need one.
/// Permission rules come first (see [`crate::permission`]): an `ask` rule
/// asks under any policy, an `allow` rule runs without asking, and under
/// `Never` nothing that changes the world runs, allow rules or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Each such call waits for a decision.
    #[default]
    Ask,
    /// They run.
    Auto,
    /// They are denied.
    Never,
}

/// When a run stops on its own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Model calls (reflection and planning included).
    pub max_turns: u32,
    /// Tool calls, over the whole run.
    pub max_tool_calls: u32,
    /// Input plus output tokens, as the provider reports them.
    pub max_tokens: Option<u64>,
    /// Money, in US dollars, as the driver prices each reply.
    pub max_cost_usd: Option<f64>,
    /// Wall-clock time since the run started, by the driver's clock.
    pub max_wall_ms: Option<u64>,
    /// Replies in a row that are empty or carry unparsable tool calls.
    pub max_format_errors: u32,
    /// Turns of tool calls in a row that add no new evidence (no file not
    /// read before or changed, no result unlike the earlier ones) before
    /// the model is told what it repeats; one more such turn stops the run
    /// as stalled.
    #[serde(alias = "repeat_limit")]
    pub stall_steps: u32,
    /// Characters of conversation sent to the model; older turns beyond it
    /// are left out (the task is always kept). `None`: everything.
    pub max_context_chars: Option<usize>,
    /// Answers that do not fit the output schema sent back for another
    /// try; the next one stops the run.
    #[serde(default = "default_output_retries")]
    pub max_output_retries: u32,
}

fn default_output_retries() -> u32 {
    2
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_turns: 20,
            max_tool_calls: 50,
            max_tokens: None,
            max_cost_usd: None,
            max_wall_ms: None,
            max_format_errors: 3,
            stall_steps: 3,
            max_context_chars: None,
            max_output_retries: default_output_retries(),
        }
    }
}

/// Everything that shapes a run, fixed when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// How the model works.
    pub strategy: Strategy,
    /// Instructions placed before the task.
    pub system_prompt: Option<String>,
    /// The tools the model may call.
    pub tools: Vec<ToolDecl>,
    /// Who decides on tools that change the world.
    pub approval: ApprovalPolicy,
    /// When the run stops.
    pub limits: Limits,
    /// Critique each answer and try again while the goal is not achieved.
    pub reflect: bool,
    /// Most critiques that may send the run back to work.
    pub max_reflections: u32,
    /// Cap on each reply's output tokens.
    pub max_output_tokens: Option<u32>,
    /// Which tools a source adds while the run goes on are offered.
    #[serde(default, skip_serializing_if = "ToolFilter::is_empty")]
    pub tool_filter: ToolFilter,
    /// The permission rules in force (a run stored before they existed
    /// has none: its host may carry `allow_commands` to restore them).
    #[serde(default, skip_serializing_if = "Permissions::is_empty")]
    pub permissions: Permissions,
    /// The JSON Schema the final answer must validate against; the answer
    /// is then stored as compact JSON (see [`crate::AgentRun::output`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// How the conversation is kept within the model's context.
    #[serde(default, skip_serializing_if = "ContextConfig::is_default")]
    pub context: ContextConfig,
}

/// How the conversation is kept within the model's context window: when a
/// request nears it, the older turns are compacted into a summary plus the
/// facts their calls rest on (see [`crate::Compaction`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextConfig {
    /// The model's context window in tokens; `None`: not known, and the
    /// run compacts only when the provider refuses a request as too long
    /// or is seen to have cut one.
    pub window_tokens: Option<u64>,
    /// Compact when a request's estimated tokens (plus its output cap)
    /// pass this share of the window, in percent.
    pub compact_at_percent: u8,
    /// The latest turns (a reply with its results, or a note) kept as they
    /// are when the ones before them are compacted.
    pub keep_turns: u32,
    /// Carry every fact with evidence (files read and changed with their
    /// hash, commands and test results, decisions, errors) verbatim beside
    /// the summary; `false` keeps the summary alone (the plain compaction
    /// the retention benchmark compares against).
    pub keep_facts: bool,
}

impl Default for ContextConfig {
    fn default() -> ContextConfig {
        ContextConfig { window_tokens: None, compact_at_percent: 80, keep_turns: 2, keep_facts: true }
    }
}

impl ContextConfig {
    fn is_default(&self) -> bool {
        *self == ContextConfig::default()
    }
}

/// The tools a person chose to offer (`--tool`, `--no-tool`): kept with
/// the run so tools an MCP server adds mid-run obey the same choice.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolFilter {
    /// Only these (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    /// Never these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<String>,
}

impl ToolFilter {
    /// Whether `tool` may be offered.
    pub fn offers(&self, tool: &str) -> bool {
        (self.only.is_empty() || self.only.iter().any(|t| t == tool)) && !self.except.iter().any(|t| t == tool)
    }

    fn is_empty(&self) -> bool {
        self.only.is_empty() && self.except.is_empty()
    }
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            strategy: Strategy::React,
            system_prompt: None,
            tools: Vec::new(),
            approval: ApprovalPolicy::Ask,
            limits: Limits::default(),
            reflect: false,
            max_reflections: 2,
            max_output_tokens: None,
            tool_filter: ToolFilter::default(),
            permissions: Permissions::default(),
            output_schema: None,
            context: ContextConfig::default(),
        }
    }
}
