//! [`AgentRun`]: the loop as a state machine. It does no I/O and reads no
//! clock: the driver asks [`AgentRun::next`] what to do, does it, and
//! reports back (`on_model_reply`, `started`/`finished`, `decide`), passing
//! the time in milliseconds. Between any two calls the run can be
//! serialised, stored, and continued in another process.
//!
//! This file holds the run's vocabulary and its core (what to do next, the
//! request and the conversation); `reply` takes in the model's replies and
//! the calls they propose, `calls` the driver's reports on calls and the
//! decisions on them, `recovery` failures, context overflow, changing
//! tools, cancelling and resuming.

mod calls;
mod compact;
mod log;
mod output;
mod progress;
mod recovery;
mod reply;

use std::collections::BTreeMap;

use noesis_llm::{ChatRequest, ChatResponse, Message, ResponseFormat, ToolCall, ToolChoice};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::{RunConfig, Strategy};
use crate::record::{CallRecord, CallStatus};
use crate::tool::ToolDecl;

use reply::parse_critique;

pub use compact::{Compaction, Fact, FactKind, RECALL, facts_of};
pub use log::{RunChange, RunCursor};

/// Calls changed after they were final (their span noted), by index, for
/// [`AgentRun::change_since`]; not stored, and no part of a run's equality.
#[derive(Debug, Clone, Default)]
struct LateMarks(Vec<usize>);

impl PartialEq for LateMarks {
    fn eq(&self, _: &LateMarks) -> bool {
        true
    }
}

/// The version of the serialised form this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Shown in place of a result for a call that has none when the model is
/// asked again, so no provider ever sees a dangling call.
pub const NO_RESULT: &str = "no result: this call was not executed";

/// Shown for a call that was running when the run stopped.
pub const INTERRUPTED: &str =
    "interrupted: the run stopped while this call was running; it may have run fully, partly or not at all";

/// One entry of the conversation after the task. Calls and their results
/// live in the call records; entries refer to them by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A reply of the model: its text and the calls it asked for.
    Assistant {
        /// The text.
        content: String,
        /// Ids of the calls, in order.
        calls: Vec<String>,
    },
    /// The result of a call, sent back to the model.
    ToolResult {
        /// The call's id.
        call_id: String,
    },
    /// A message from the run itself (a correction, a critique, a plan
    /// step), sent as a user message.
    Note {
        /// The text.
        content: String,
    },
    /// The turns before `upto` compacted: the model sees this in their
    /// place (see [`Compaction`]).
    Compaction(Compaction),
}

/// A critique of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Critique {
    /// Whether the answer achieves the task.
    pub goal_achieved: bool,
    /// What is wrong or missing.
    #[serde(default)]
    pub what_went_wrong: String,
    /// What to do next.
    #[serde(default)]
    pub next_step: String,
}

/// Why a run stopped before an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_turns` model calls were made.
    MaxTurns,
    /// `max_tool_calls` tool calls were made.
    MaxToolCalls,
    /// The token budget is used up.
    TokenBudget,
    /// The cost budget is used up.
    CostBudget,
    /// The wall-clock limit passed.
    WallClock,
    /// Too many malformed replies in a row.
    FormatErrors,
    /// The same call kept giving the same result after a correction (runs
    /// stored before stall detection; see `Stalled`).
    Repeated,
    /// The model could not be reached (after the provider's own retries).
    Provider,
    /// A call needs a person's approval and the driver cannot ask one.
    NeedsApproval,
    /// Turns in a row added no new evidence, and one more after the model
    /// was told; resumable.
    Stalled,
    /// The answer did not validate against the output schema, after the
    /// re-asks the limits allow.
    InvalidOutput,
}

/// How a run ended. The transcript and usage stay in the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The model's final answer.
    Answer {
        /// Its text.
        text: String,
    },
    /// A limit stopped it.
    Stopped {
        /// Which.
        reason: StopReason,
        /// In words, with the figures.
        detail: String,
    },
    /// Cancelled by the user (Ctrl-C); resumable.
    Cancelled,
    /// Aborted at an approval; not resumable.
    Aborted {
        /// What the user said, if anything.
        message: Option<String>,
    },
}

/// What was spent.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RunUsage {
    /// Model calls.
    pub turns: u32,
    /// Tool calls proposed by the model.
    pub tool_calls: u32,
    /// Input tokens reported, the run's own calls and its tools' (see
    /// [`ToolSpend`]).
    pub input_tokens: u64,
    /// Output tokens reported, likewise.
    pub output_tokens: u64,
    /// Money, as the driver priced the replies, and the tools' spend.
    pub cost_usd: f64,
}

/// What the run is doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// Chain of thought: ask for the plan.
    Plan,
    /// Ask the model what to do (or, in a plan, to do step `step`).
    Think,
    /// The calls of turn `turn` are being approved and executed.
    Act { turn: u32 },
    /// Ask the model to critique `answer`.
    Reflect { answer: String },
    /// Ask the model to summarise the entries before `upto`, then go on
    /// with `then`.
    Compact { upto: usize, reason: String, then: Box<Phase> },
    /// Finished; see the outcome.
    Done,
}

/// A call the driver should execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The call's id (pass it to `started`/`finished`).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its validated arguments.
    pub arguments: Value,
}

/// A call waiting for a decision, with what the decision must be bound to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pending {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// blake3 of the canonical arguments.
    pub arguments_hash: String,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send this request to the model, then call [`AgentRun::on_model_reply`].
    CallModel(ChatRequest),
    /// Execute these calls: mark each `started` (and store the run) before
    /// running it, then report it `finished`. Several calls are all
    /// read-only and may run concurrently.
    ExecuteTools(Vec<Invocation>),
    /// Calls already handed out are still running.
    Busy(Vec<String>),
    /// Ask a person about these calls, then call [`AgentRun::decide`].
    AwaitApproval(Vec<Pending>),
    /// The run is over.
    Done(Outcome),
}

/// A person's decision on one pending call, bound to what they saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The call's id.
    pub call_id: String,
    /// The tool they saw.
    pub tool: String,
    /// The hash of the arguments they saw.
    pub arguments_hash: String,
    /// What they decided.
    pub verdict: Verdict,
}

/// Approve, approve changed arguments, deny, or abort the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Run it as proposed.
    Approve,
    /// Run it with these arguments instead.
    ApproveEdited {
        /// The new arguments (checked against the tool's schema).
        arguments: Value,
    },
    /// Do not run it; the model sees the message.
    Deny {
        /// Why, for the model.
        message: Option<String>,
    },
    /// Stop the whole run.
    Abort {
        /// Why.
        message: Option<String>,
    },
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
    /// What the result rests on (files read with their hash, a command's
    /// exit code, a module's envelope), for the call's frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<ToolEvidence>,
    /// What the tool's own model calls spent (a sub-agent, a module run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<ToolSpend>,
}

impl ToolOutput {
    /// A result.
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: false, evidence: Vec::new(), spent: None }
    }
    /// A failure.
    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: true, evidence: Vec::new(), spent: None }
    }
    /// The same output resting on `evidence` too.
    pub fn with_evidence(mut self, evidence: ToolEvidence) -> ToolOutput {
        self.evidence.push(evidence);
        self
    }
    /// The same output, having spent `spent` on model calls.
    pub fn with_spent(mut self, spent: ToolSpend) -> ToolOutput {
        self.spent = Some(spent);
        self
    }
}

/// What a tool's own model calls spent — a sub-agent's whole run, a module
/// run's calls. It is the calling run's spend: [`AgentRun::finished`] adds
/// it to [`RunUsage`], so the run's limits (and a resumed run's meter)
/// count everything spent on its behalf.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolSpend {
    /// Model calls made.
    pub calls: u32,
    /// Input tokens reported.
    pub input_tokens: u64,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// Money, as priced where the calls were made.
    pub cost_usd: f64,
    /// The model that answered (`provider/model`), when one did and the
    /// tool knows (a module run's envelope says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Something a tool's result rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolEvidence {
    /// A file read or written, by its workspace-relative path, with the
    /// blake3 of its bytes at that moment.
    File {
        /// Relative to the workspace.
        path: String,
        /// blake3 hex digest.
        blake3: String,
    },
    /// A command that ran.
    Command {
        /// The command line.
        command: String,
        /// Its exit code (none when killed).
        exit_code: Option<i32>,
        /// blake3 of what it printed (stdout, then stderr).
        output_blake3: String,
    },
    /// A module run's envelope.
    Envelope {
        /// The module.
        module: String,
        /// Whether the envelope was `ok`.
        ok: bool,
        /// blake3 of the canonical envelope.
        blake3: String,
    },
    /// A past frame the tool showed.
    Frame {
        /// The frame.
        frame_id: String,
    },
    /// A child run.
    SubAgent {
        /// The child run's id.
        run_id: String,
    },
    /// A call of an MCP server's tool.
    Mcp {
        /// The server, as configured.
        server: String,
        /// The tool, by the server's name for it.
        tool: String,
        /// How the call ended.
        outcome: McpOutcome,
        /// blake3 of the text the model saw.
        result_blake3: String,
    },
}

/// How a call of an MCP server's tool ended: the kind of a tool error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpOutcome {
    /// A result.
    Ok,
    /// The tool ran and reported failure (`isError`).
    ToolError,
    /// The server refused the call or answered outside the protocol.
    ProtocolError,
    /// No answer within the call's timeout.
    Timeout,
    /// The server is gone (stopped, not restartable).
    Unavailable,
}

impl McpOutcome {
    /// The name as stored (`tool_error`, `timeout`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            McpOutcome::Ok => "ok",
            McpOutcome::ToolError => "tool_error",
            McpOutcome::ProtocolError => "protocol_error",
            McpOutcome::Timeout => "timeout",
            McpOutcome::Unavailable => "unavailable",
        }
    }
}

/// A report the run cannot accept in its present state; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// The stored run was written by another version of this format.
    #[error("the run was stored with schema version {found}; this build reads version {SCHEMA_VERSION}")]
    SchemaVersion {
        /// The version found.
        found: u64,
    },
    /// The stored run is not valid JSON of a run.
    #[error("the stored run cannot be read: {0}")]
    Corrupt(String),
    /// A model reply came when none was asked for.
    #[error("no model reply was expected now (the run is {0})")]
    UnexpectedReply(&'static str),
    /// No call with this id.
    #[error("no call `{0}` in this run")]
    UnknownCall(String),
    /// The call cannot move to that status.
    #[error("call `{id}` is {from} and cannot become {to}")]
    Transition {
        /// The call.
        id: String,
        /// Its status.
        from: &'static str,
        /// The status asked for.
        to: &'static str,
    },
    /// A decision does not match the call as it stands.
    #[error("the decision on call `{call_id}` was made for {what} that differ from the pending call")]
    StaleDecision {
        /// The call.
        call_id: String,
        /// "a tool" or "arguments".
        what: &'static str,
    },
    /// Edited arguments do not fit the tool's schema.
    #[error("the edited arguments of call `{call_id}` are invalid: {errors}")]
    InvalidEdit {
        /// The call.
        call_id: String,
        /// The problems.
        errors: String,
    },
    /// Edited arguments are refused by the run's permission rules.
    #[error("the edited arguments of call `{call_id}` are refused: {reason}")]
    RefusedEdit {
        /// The call.
        call_id: String,
        /// The rule's refusal.
        reason: String,
    },
    /// The call was not handed out to execute now.
    #[error("call `{0}` was not handed out to execute now (ask `next` first)")]
    NotDispatched(String),
    /// The run is over and cannot take this report.
    #[error("the run is finished")]
    Finished,
}

/// One agent run: the task, the conversation, every call with its status,
/// what was spent, and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRun {
    /// See [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The run's id (chosen by the driver).
    pub id: String,
    /// The run this was forked from, and the step.
    pub forked_from: Option<(String, u64)>,
    /// The task.
    pub task: String,
    /// How it runs.
    pub config: RunConfig,
    /// The conversation after the task.
    pub entries: Vec<Entry>,
    /// Every tool call, in the order proposed.
    pub calls: Vec<CallRecord>,
    /// What was spent.
    pub usage: RunUsage,
    /// How it ended, once it has.
    pub outcome: Option<Outcome>,
    /// Changes so far; each report that changes the run adds one.
    pub step: u64,
    /// Driver's clock at the start, in milliseconds.
    pub started_ms: u64,
    phase: Phase,
    /// A model request is out and its reply is awaited.
    awaiting_reply: bool,
    plan: Vec<String>,
    plan_step: usize,
    reflections: u32,
    format_errors: u32,
    failures: BTreeMap<String, u32>,
    #[serde(default)]
    stall: progress::Stall,
    /// Answers sent back for not fitting the output schema.
    #[serde(default)]
    output_retries: u32,
    /// What the provider showed of its context window.
    #[serde(default)]
    seen_context: compact::ContextSeen,
    /// Set when the tool-call budget ran out: the run stops once the turn's
    /// calls within it are done.
    budget_stop: Option<String>,
    /// Calls handed out by the last `ExecuteTools`; only these may start.
    dispatched: Vec<String>,
    /// Every model reply as it came, so a replay can serve them again.
    #[serde(default)]
    pub replies: Vec<ReplyRecord>,
    /// What the driver keeps with the run (its workspace, provider, session);
    /// the run never reads it.
    #[serde(default)]
    pub host: Value,
    /// The `invoke_agent` span of each drive (a resumed run has one per
    /// drive), when traces are exported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<noesis_trace::SpanIds>,
    #[serde(skip)]
    late_marks: LateMarks,
    #[serde(skip)]
    seen: progress::Seen,
}

/// A model reply as received: enough to serve it again in a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyRecord {
    /// The text.
    pub text: String,
    /// The model that answered.
    pub model: String,
    /// The calls, with the provider's ids.
    pub tool_calls: Vec<RecordedCall>,
    /// Tokens in and out, when reported.
    pub usage: Option<noesis_llm::Usage>,
    /// What the driver priced it at.
    pub cost_usd: f64,
    /// Which provider the router chose for it, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// What the call was for: `plan`, `think` or `reflect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The `chat` span of the call, when traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<noesis_trace::SpanIds>,
}

/// A tool call as the model sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The provider's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
}

impl ReplyRecord {
    /// The model that answered, as `provider/model`: the one the router
    /// named when it chose (`… answered by P/M`), else `provider` (the
    /// run's) with the reply's model, else the reply's model alone.
    pub fn answered_by(&self, provider: Option<&str>) -> String {
        self.route
            .as_deref()
            .and_then(|route| route.rsplit_once("answered by ").map(|(_, m)| m.to_owned()))
            .unwrap_or_else(|| provider.map_or_else(|| self.model.clone(), |p| format!("{p}/{}", self.model)))
    }

    /// The reply as a provider would return it.
    pub fn to_response(&self) -> ChatResponse {
        ChatResponse {
            usage: self.usage,
            tool_calls: self
                .tool_calls
                .iter()
                .map(|c| ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                .collect(),
            ..ChatResponse::text(self.text.clone(), self.model.clone(), noesis_llm::StructuredMode::Text)
        }
    }
}

const PLAN_PROMPT: &str = "First make a plan: reply with a numbered list of at most 7 short steps that accomplish \
the task, one step per line, and nothing else.";

const REFLECT_PROMPT: &str = "Critique the answer above against the task. Reply with a JSON object: \
{\"goal_achieved\": true|false, \"what_went_wrong\": \"...\", \"next_step\": \"...\"}.";

impl AgentRun {
    /// A new run of `task`, started at `now_ms` by the driver's clock.
    pub fn new(id: impl Into<String>, task: impl Into<String>, config: RunConfig, now_ms: u64) -> AgentRun {
        let phase = if config.strategy == Strategy::ChainOfThought { Phase::Plan } else { Phase::Think };
        AgentRun {
            schema_version: SCHEMA_VERSION,
            id: id.into(),
            forked_from: None,
            task: task.into(),
            config,
            entries: Vec::new(),
            calls: Vec::new(),
            usage: RunUsage::default(),
            outcome: None,
            step: 0,
            started_ms: now_ms,
            phase,
            awaiting_reply: false,
            plan: Vec::new(),
            plan_step: 0,
            reflections: 0,
            format_errors: 0,
            failures: BTreeMap::new(),
            stall: progress::Stall::default(),
            output_retries: 0,
            seen_context: compact::ContextSeen::default(),
            budget_stop: None,
            dispatched: Vec::new(),
            replies: Vec::new(),
            host: Value::Null,
            traces: Vec::new(),
            late_marks: LateMarks::default(),
            seen: progress::Seen::default(),
        }
    }

    /// The run as JSON, to store.
    pub fn to_json(&self) -> Value {
        // A run holds only strings, numbers and JSON values: it always
        // serialises.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A stored run; another schema version is refused.
    pub fn from_json(value: &Value) -> Result<AgentRun, StepError> {
        match value.get("schema_version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(found) => return Err(StepError::SchemaVersion { found }),
            None => return Err(StepError::Corrupt("no schema_version".into())),
        }
        serde_json::from_value(value.clone()).map_err(|e| StepError::Corrupt(e.to_string()))
    }

    /// The record of call `id`.
    pub fn call(&self, id: &str) -> Option<&CallRecord> {
        self.calls.iter().find(|c| c.id == id)
    }

    /// Whether the answer was accepted by a critique that found the goal
    /// achieved (not merely because the critique could not be read).
    pub fn goal_confirmed(&self) -> bool {
        matches!(self.outcome, Some(Outcome::Answer { .. }))
            && self.config.reflect
            && self.replies.last().and_then(|r| parse_critique(&r.text)).is_some_and(|c| c.goal_achieved)
    }

    /// The role of the model call the run asks for now: `plan`, `think` or
    /// `reflect` (a router chooses the provider by it).
    pub fn role(&self) -> &'static str {
        match self.phase {
            Phase::Plan => "plan",
            Phase::Reflect { .. } => "reflect",
            Phase::Compact { .. } => "compact",
            _ => "think",
        }
    }

    /// Notes on the last reply which provider the router chose and why.
    pub fn note_route(&mut self, reason: String) {
        if let Some(last) = self.replies.last_mut() {
            last.route = Some(reason);
        }
    }

    /// Keeps the ids of a drive's `invoke_agent` span.
    pub fn note_trace(&mut self, ids: noesis_trace::SpanIds) {
        if !self.traces.contains(&ids) {
            self.traces.push(ids);
        }
    }

    /// Notes on the last reply the `chat` span it came in.
    pub fn note_reply_span(&mut self, ids: noesis_trace::SpanIds) {
        if let Some(last) = self.replies.last_mut() {
            last.span = Some(ids);
        }
    }

    /// Notes on call `id` the `execute_tool` span it ran in.
    pub fn note_call_span(&mut self, id: &str, ids: noesis_trace::SpanIds) {
        if let Some(i) = self.calls.iter().position(|c| c.id == id) {
            if self.calls[i].status.is_final() {
                self.late_marks.0.push(i);
            }
            self.calls[i].span = Some(ids);
        }
    }

    /// What the run is doing, as stored, listed and served: `running`,
    /// `awaiting_approval`, `done`, `stopped`, `cancelled` or `aborted`.
    pub fn status(&self) -> &'static str {
        match &self.outcome {
            None if self.awaiting_approval() => "awaiting_approval",
            None => "running",
            Some(Outcome::Answer { .. }) => "done",
            Some(Outcome::Stopped { .. }) => "stopped",
            Some(Outcome::Cancelled) => "cancelled",
            Some(Outcome::Aborted { .. }) => "aborted",
        }
    }

    /// Whether the run waits for a person.
    pub fn awaiting_approval(&self) -> bool {
        self.outcome.is_none() && self.calls.iter().any(|c| c.status == CallStatus::AwaitingApproval)
    }

    /// What the driver must do now. Checks the wall clock and the budgets,
    /// so it may end the run.
    pub fn next(&mut self, now_ms: u64) -> Action {
        loop {
            if let Some(outcome) = &self.outcome {
                return Action::Done(outcome.clone());
            }
            if let Some(max) = self.config.limits.max_wall_ms {
                let spent = now_ms.saturating_sub(self.started_ms);
                if spent >= max {
                    self.stop(StopReason::WallClock, format!("{spent} ms passed; the limit is {max} ms"));
                    continue;
                }
            }
            match self.phase.clone() {
                Phase::Done => {
                    // Done without an outcome cannot be stored by this
                    // code; a hand-edited run gets one.
                    self.stop(StopReason::MaxTurns, "the run was marked done without an outcome".into());
                }
                Phase::Plan | Phase::Think | Phase::Reflect { .. } => {
                    if let Some((reason, detail)) = self.budget_exceeded() {
                        self.stop(reason, detail);
                        continue;
                    }
                    let request = self.request();
                    if let Some(upto) = self.compaction_due(&request) {
                        self.begin_compaction(upto, "window");
                        continue;
                    }
                    return Action::CallModel(self.send(request));
                }
                Phase::Compact { upto, .. } => {
                    if let Some((reason, detail)) = self.budget_exceeded() {
                        self.stop(reason, detail);
                        continue;
                    }
                    let request = self.compaction_request(upto);
                    return Action::CallModel(self.send(request));
                }
                Phase::Act { turn } => {
                    if let Some(action) = self.act(turn) {
                        return action;
                    }
                    self.close_turn(turn);
                }
            }
        }
    }

    /// `request` goes out: a reply is awaited, and its size is kept to
    /// compare with what the provider reports it read.
    fn send(&mut self, request: ChatRequest) -> ChatRequest {
        self.awaiting_reply = true;
        self.seen_context.sent_tokens = noesis_llm::estimate_request_tokens(&request);
        request
    }

    fn budget_exceeded(&self) -> Option<(StopReason, String)> {
        let l = &self.config.limits;
        let u = &self.usage;
        if u.turns >= l.max_turns {
            return Some((StopReason::MaxTurns, format!("{} model calls; the limit is {}", u.turns, l.max_turns)));
        }
        if let Some(max) = l.max_tokens {
            let used = u.input_tokens + u.output_tokens;
            if used >= max {
                return Some((StopReason::TokenBudget, format!("{used} tokens used; the budget is {max}")));
            }
        }
        if let Some(max) = l.max_cost_usd
            && u.cost_usd >= max
        {
            return Some((StopReason::CostBudget, format!("${:.4} spent; the budget is ${max:.4}", u.cost_usd)));
        }
        None
    }

    /// The driver's meter refused the next model call: it would cross the
    /// token (`TokenBudget`) or cost (`CostBudget`) limit of the run or of
    /// the run tree it belongs to. `detail` names the limit and the figures.
    pub fn stop_over_budget(&mut self, cost: bool, detail: String) {
        if self.outcome.is_none() {
            let reason = if cost { StopReason::CostBudget } else { StopReason::TokenBudget };
            self.stop(reason, detail);
        }
    }

    fn stop(&mut self, reason: StopReason, detail: String) {
        self.finish(Outcome::Stopped { reason, detail });
    }

    fn finish(&mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
        self.phase = Phase::Done;
        self.awaiting_reply = false;
        self.step += 1;
    }

    fn act(&mut self, turn: u32) -> Option<Action> {
        let of_turn: Vec<&CallRecord> = self.calls.iter().filter(|c| c.turn == turn).collect();
        let pending: Vec<Pending> = of_turn
            .iter()
            .filter(|c| c.status == CallStatus::AwaitingApproval)
            .map(|c| Pending {
                call_id: c.id.clone(),
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
                arguments_hash: c.arguments_hash.clone(),
            })
            .collect();
        if !pending.is_empty() {
            return Some(Action::AwaitApproval(pending));
        }
        let running: Vec<String> =
            of_turn.iter().filter(|c| c.status == CallStatus::Running).map(|c| c.id.clone()).collect();
        if !running.is_empty() {
            return Some(Action::Busy(running));
        }
        // In call order: a run of read-only calls together, or a run of
        // calls of tools that declare they may run beside each other (never
        // mixed: a sub-agent that writes must not race a read), else one.
        let approved: Vec<&CallRecord> = of_turn.into_iter().filter(|c| c.status == CallStatus::Approved).collect();
        let first = approved.first()?;
        let read_only = |c: &CallRecord| self.tool(&c.tool).is_some_and(|t| t.effects.read_only());
        let concurrent = |c: &CallRecord| self.tool(&c.tool).is_some_and(|t| t.concurrent && !t.effects.read_only());
        let batch: Vec<Invocation> = if read_only(first) {
            approved.iter().take_while(|c| read_only(c)).map(|c| invocation(c)).collect()
        } else if concurrent(first) {
            approved.iter().take_while(|c| concurrent(c)).map(|c| invocation(c)).collect()
        } else {
            vec![invocation(first)]
        };
        self.dispatched = batch.iter().map(|i| i.call_id.clone()).collect();
        Some(Action::ExecuteTools(batch))
    }

    fn tool(&self, name: &str) -> Option<&ToolDecl> {
        self.config.tools.iter().find(|t| t.name == name)
    }

    /// Every call of the turn has its result: send them back, watch for
    /// progress, and go on thinking.
    fn close_turn(&mut self, turn: u32) {
        let ids: Vec<String> = self.calls.iter().filter(|c| c.turn == turn).map(|c| c.id.clone()).collect();
        for id in &ids {
            self.entries.push(Entry::ToolResult { call_id: id.clone() });
        }
        self.phase = Phase::Think;
        self.step += 1;
        if let Some(detail) = self.budget_stop.take() {
            self.stop(StopReason::MaxToolCalls, detail);
            return;
        }
        self.watch_progress(turn);
    }

    /// The request for the present phase.
    fn request(&self) -> ChatRequest {
        let mut messages = vec![];
        let mut system = self.config.system_prompt.clone().unwrap_or_default();
        if self.config.strategy == Strategy::React && !self.config.tools.is_empty() {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(
                "Use the tools when they help; call several at once when they do not depend on each other. \
When you have the answer, reply with it as plain text and call no tool.",
            );
        }
        if let Some(schema) = &self.config.output_schema {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&format!(
                "When you give your final answer, reply with only a JSON value (no prose around it) that validates \
against this JSON Schema:\n{schema}"
            ));
        }
        if !system.is_empty() {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(self.task.clone()));
        messages.extend(self.conversation());
        let mut request = ChatRequest::new(messages);
        request.max_tokens = self.config.max_output_tokens;
        match &self.phase {
            Phase::Plan => request.messages.push(Message::user(PLAN_PROMPT)),
            Phase::Reflect { .. } => {
                request.messages.push(Message::user(REFLECT_PROMPT));
                request.response_format =
                    ResponseFormat::JsonSchema { name: "critique".into(), schema: critique_schema() };
            }
            _ => {
                if self.config.strategy != Strategy::SingleShot {
                    request.tools =
                        self.config.tools.iter().filter(|t| !self.withdrawn(t)).map(ToolDecl::spec).collect();
                    if !request.tools.is_empty() && self.is_recall(compact::RECALL) {
                        request.tools.push(AgentRun::recall_spec());
                    }
                    if !request.tools.is_empty() {
                        request.tool_choice = ToolChoice::Auto;
                    }
                }
                // Where no tool can be called the reply is the answer: a
                // provider that can hold it to the schema is asked to (some
                // force a tool for that, which tools offered would defeat).
                if let (true, Some(schema)) = (request.tools.is_empty(), &self.config.output_schema) {
                    request.response_format =
                        ResponseFormat::JsonSchema { name: "output".into(), schema: schema.clone() };
                }
            }
        }
        request
    }

    fn withdrawn(&self, tool: &ToolDecl) -> bool {
        self.failures.get(&tool.name).is_some_and(|n| *n >= tool.max_failures)
    }

    /// The conversation as messages, every call answered, the oldest turns
    /// left out when it outgrows the context budget.
    fn conversation(&self) -> Vec<Message> {
        // Group into units that must stay together: an assistant turn with
        // its results; a note alone.
        let mut units: Vec<Vec<Message>> = Vec::new();
        // Looked up once per request, not once per call: a long run asks
        // with every call it made.
        let by_id: std::collections::HashMap<&str, &CallRecord> =
            self.calls.iter().rev().map(|c| (c.id.as_str(), c)).collect();
        let entered: std::collections::HashSet<&str> = self
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::ToolResult { call_id } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        // The latest compaction stands for the entries before its `upto`.
        let compaction = self.compaction();
        let from = compaction.map_or(0, |(_, c)| c.upto);
        if let Some((_, c)) = compaction {
            units.push(vec![self.compaction_message(c)]);
        }
        for entry in &self.entries[from.min(self.entries.len())..] {
            match entry {
                Entry::Assistant { content, calls } => {
                    let tool_calls: Vec<ToolCall> = calls
                        .iter()
                        .filter_map(|id| by_id.get(id.as_str()))
                        .map(|c| ToolCall { id: c.id.clone(), name: c.tool.clone(), arguments: c.arguments.clone() })
                        .collect();
                    let mut unit =
                        vec![Message { tool_calls: tool_calls.clone(), ..Message::assistant(content.clone()) }];
                    // Results are added here, in call order, whatever order
                    // their entries have; a call without one gets NO_RESULT.
                    for call in &tool_calls {
                        let text = by_id
                            .get(call.id.as_str())
                            .filter(|c| c.status.is_final() && entered.contains(c.id.as_str()))
                            .and_then(|c| c.result.clone())
                            .unwrap_or_else(|| NO_RESULT.to_owned());
                        unit.push(Message::tool_result(call, text));
                    }
                    units.push(unit);
                }
                Entry::ToolResult { .. } | Entry::Compaction(_) => {}
                Entry::Note { content } => units.push(vec![Message::user(content.clone())]),
            }
        }
        if let Some(budget) = self.config.limits.max_context_chars {
            let size = |u: &Vec<Message>| u.iter().map(|m| m.content.len() + m.tool_calls.len() * 64).sum::<usize>();
            let mut total: usize = units.iter().map(size).sum::<usize>() + self.task.len();
            let mut dropped = 0;
            // A compaction's summary and facts are never left out.
            let first = usize::from(compaction.is_some());
            while total > budget && units.len() > first + 1 {
                total -= size(&units[first]);
                units.remove(first);
                dropped += 1;
            }
            if dropped > 0 {
                units.insert(
                    first,
                    vec![Message::user(format!(
                        "[{dropped} earlier part(s) of this conversation were left out to fit the context]"
                    ))],
                );
            }
        }
        units.into_iter().flatten().collect()
    }
}

fn invocation(c: &CallRecord) -> Invocation {
    Invocation { call_id: c.id.clone(), tool: c.tool.clone(), arguments: c.arguments.clone() }
}

fn critique_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "goal_achieved": {"type": "boolean"},
            "what_went_wrong": {"type": "string"},
            "next_step": {"type": "string"}
        },
        "required": ["goal_achieved", "what_went_wrong", "next_step"],
        "additionalProperties": false
    })
}
