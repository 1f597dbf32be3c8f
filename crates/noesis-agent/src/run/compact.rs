//! Keeping the conversation within the model's context, without losing
//! what the run knows. When a request nears the window (or the provider
//! refuses one as too long, or is seen to have cut one), the older turns
//! are compacted: the model writes a summary of them, and every fact their
//! calls rest on — a file read or changed with its hash, a command with its
//! exit code and outcome, a decision, an error — is carried beside it
//! verbatim, as a list the summary cannot drop. Nothing is deleted: the
//! turns stay in the run, the model sees a [`Compaction`] in their place,
//! and `recall` shows any earlier call's full result.
//!
//! Facts are found from the call records by rule, never by the model, so
//! a fact survives any number of compactions: each one carries the facts
//! of the one before.

use std::collections::HashSet;

use noesis_llm::{ChatRequest, Message, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{AgentRun, Entry, Phase, StopReason, ToolEvidence};
use crate::record::{CallRecord, CallStatus};
use crate::tool::clip;

/// The name of the tool a compacted run offers to show an earlier call's
/// full result; the run answers it itself.
pub const RECALL: &str = "recall";

/// Facts carried at most; beyond, the oldest file reads go first (they can
/// be read again), then the oldest of the rest.
const MAX_FACTS: usize = 300;

/// Characters of history one compaction request shows the model at most.
const MAX_TRANSCRIPT_CHARS: usize = 48_000;

/// Characters of a summary kept (a model that runs on is cut).
const MAX_SUMMARY_CHARS: usize = 6_000;

/// Reported prompt tokens below which no report is read as a cut: no real
/// window is that small, and test servers report a fixed handful.
const MIN_WINDOW_SEEN: u64 = 512;

const COMPACT_PROMPT: &str = "You compact the history of an agent's work so it can go on in a smaller context. \
Summarise the history below: what the task needs, what was tried and found, what was decided, what is done and \
what remains. Keep file names, paths, numbers, names and error messages exact. Plain text, at most 300 words.";

/// What kind of fact a [`Fact`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactKind {
    /// A file read, with its hash.
    Read,
    /// A file changed (written by a tool that changes the world), with
    /// the hash of what was written.
    Changed,
    /// A command that ran: its exit code and what its output concluded
    /// (a test summary, an error line).
    Command,
    /// A module run's envelope.
    Module,
    /// A child run and its answer.
    SubAgent,
    /// An MCP server's tool and how the call ended.
    Mcp,
    /// A call refused by a person or a rule, with why.
    Decision,
    /// A call that failed or was interrupted, with the error.
    Error,
}

/// One fact with evidence, in one line, and the call it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    /// What kind.
    pub kind: FactKind,
    /// The fact in words, with its evidence (hashes, exit codes).
    pub text: String,
    /// The call it was found in (`recall` shows it whole).
    pub call_id: String,
}

/// Older turns replaced, for the model, by a summary and the facts they
/// rest on. The turns themselves stay in the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The first entry still sent as it is: entries before it are
    /// compacted.
    pub upto: usize,
    /// The model's summary of everything before `upto` (the earlier
    /// compaction's summary included).
    pub summary: String,
    /// Every fact with evidence found before `upto`, the earlier
    /// compactions' included.
    pub facts: Vec<Fact>,
    /// Facts left out beyond [`MAX_FACTS`] so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub facts_dropped: usize,
    /// Why it was made: `window`, `overflow` or `truncated`.
    pub reason: String,
    /// Whether the summary was written by rule because the model could not
    /// write one (its request overflowed too, or its reply was empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_rule: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What the run learned of the context: not configuration, but what the
/// provider showed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ContextSeen {
    /// A window smaller than the configured one, learned from a refusal or
    /// a cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) window: Option<u64>,
    /// Estimated tokens of the last request sent.
    #[serde(default)]
    pub(super) sent_tokens: u64,
    /// Requests the provider was seen to cut.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub(super) cuts: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl AgentRun {
    /// The latest compaction and where it sits among the entries.
    pub fn compaction(&self) -> Option<(usize, &Compaction)> {
        self.entries.iter().enumerate().rev().find_map(|(i, e)| match e {
            Entry::Compaction(c) => Some((i, c)),
            _ => None,
        })
    }

    /// How many times the run was compacted.
    pub fn compactions(&self) -> usize {
        self.entries.iter().filter(|e| matches!(e, Entry::Compaction(_))).count()
    }

    /// The window the run keeps within: the smaller of the configured one
    /// and one the provider showed.
    fn window(&self) -> Option<u64> {
        match (self.config.context.window_tokens, self.seen_context.window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where a compaction due now would end (its `upto`), with why; `None`
    /// when the next request fits or nothing more can be compacted.
    pub(super) fn compaction_due(&self, request: &ChatRequest) -> Option<usize> {
        let window = self.window()?;
        let reserve = u64::from(self.config.max_output_tokens.unwrap_or(1024));
        let estimate = noesis_llm::estimate_request_tokens(request) + reserve;
        let at = window.saturating_mul(u64::from(self.config.context.compact_at_percent.clamp(10, 100))) / 100;
        if estimate <= at {
            return None;
        }
        self.compaction_point()
    }

    /// The start of the latest `keep_turns` turns, when there is something
    /// before it not compacted yet.
    pub(super) fn compaction_point(&self) -> Option<usize> {
        let from = self.compaction().map_or(0, |(_, c)| c.upto);
        let starts: Vec<usize> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Entry::Assistant { .. } | Entry::Note { .. }))
            .map(|(i, _)| i)
            .collect();
        let keep = usize::try_from(self.config.context.keep_turns.max(1)).unwrap_or(1);
        let point = *starts.get(starts.len().checked_sub(keep)?)?;
        // Something to compact: a turn between the last compaction and here.
        starts.iter().any(|s| (from..point).contains(s)).then_some(point)
    }

    /// The request that asks the model to summarise the entries before
    /// `upto` (after the earlier summary).
    pub(super) fn compaction_request(&self, upto: usize) -> ChatRequest {
        let (from, earlier) = match self.compaction() {
            Some((_, c)) => (c.upto, Some(c.summary.as_str())),
            None => (0, None),
        };
        let mut history = self.transcript(from, upto);
        // The most recent history matters most: a long one loses its middle.
        let budget = self.window().map_or(MAX_TRANSCRIPT_CHARS, |w| {
            usize::try_from(w.saturating_mul(3) / 2).unwrap_or(MAX_TRANSCRIPT_CHARS).min(MAX_TRANSCRIPT_CHARS)
        });
        if history.chars().count() > budget {
            let total = history.chars().count();
            let head: String = history.chars().take(budget / 3).collect();
            let tail: String = history.chars().skip(total - budget * 2 / 3).collect();
            history = format!("{head}\n[… {} characters of history left out here …]\n{tail}", total - budget);
        }
        let mut text = format!("The task:\n{}\n\n", clip(&self.task, 2000));
        if let Some(s) = earlier {
            text.push_str(&format!("The summary of the history before this part:\n{s}\n\n"));
        }
        text.push_str(&format!("The history to summarise:\n{history}"));
        let mut request = ChatRequest::new(vec![Message::system(COMPACT_PROMPT), Message::user(text)]);
        request.max_tokens = Some(self.config.max_output_tokens.unwrap_or(1024).min(1024));
        request
    }

    /// Entries `from..upto` as text: replies, their calls and results
    /// (clipped), notes.
    fn transcript(&self, from: usize, upto: usize) -> String {
        let mut t = String::new();
        for e in self.entries.get(from..upto).unwrap_or_default() {
            match e {
                Entry::Assistant { content, calls } => {
                    if !content.trim().is_empty() {
                        t.push_str(&format!("assistant: {}\n", clip(content.trim(), 1500)));
                    }
                    for c in calls.iter().filter_map(|id| self.call(id)) {
                        t.push_str(&format!(
                            "call {} {} {} → {}: {}\n",
                            c.id,
                            c.tool,
                            clip(&c.arguments.to_string(), 300),
                            c.status.as_str(),
                            clip(c.result.as_deref().unwrap_or_default(), 1200)
                        ));
                    }
                }
                Entry::Note { content } => t.push_str(&format!("note: {}\n", clip(content.trim(), 800))),
                Entry::ToolResult { .. } | Entry::Compaction(_) => {}
            }
        }
        t
    }

    /// Starts a compaction up to `upto` for `reason`: the model is asked
    /// for the summary next, then the run goes on where it was.
    pub(super) fn begin_compaction(&mut self, upto: usize, reason: &str) {
        let then = std::mem::replace(&mut self.phase, Phase::Done);
        self.phase = Phase::Compact { upto, reason: reason.to_owned(), then: Box::new(then) };
        self.step += 1;
    }

    /// The model's summary came (or could not be had: `None`): the
    /// compaction is made and the run goes back to what it was doing.
    pub(super) fn finish_compaction(&mut self, summary: Option<&str>) {
        let Phase::Compact { upto, reason, then } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        let (summary, by_rule) = match summary.map(str::trim).filter(|s| !s.is_empty()) {
            Some(s) => (clip(s, MAX_SUMMARY_CHARS), false),
            None => (self.summary_by_rule(upto), true),
        };
        let (mut facts, mut dropped) = match self.compaction() {
            Some((_, c)) => (c.facts.clone(), c.facts_dropped),
            None => (Vec::new(), 0),
        };
        if self.config.context.keep_facts {
            let from = self.compaction().map_or(0, |(_, c)| c.upto);
            let mut known: HashSet<(FactKind, String)> = facts.iter().map(|f| (f.kind, f.text.clone())).collect();
            for call in self.calls_of(from, upto) {
                for fact in facts_of(call, self.read_only(&call.tool)) {
                    if known.insert((fact.kind, fact.text.clone())) {
                        facts.push(fact);
                    }
                }
            }
            while facts.len() > MAX_FACTS {
                let i = facts.iter().position(|f| f.kind == FactKind::Read).unwrap_or(0);
                facts.remove(i);
                dropped += 1;
            }
        }
        self.entries.push(Entry::Compaction(Compaction {
            upto,
            summary,
            facts,
            facts_dropped: dropped,
            reason,
            by_rule,
        }));
        self.phase = *then;
        self.awaiting_reply = false;
        self.step += 1;
    }

    /// The calls asked for by replies among entries `from..upto`, in order.
    fn calls_of(&self, from: usize, upto: usize) -> Vec<&CallRecord> {
        self.entries
            .get(from..upto)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| match e {
                Entry::Assistant { calls, .. } => Some(calls),
                _ => None,
            })
            .flatten()
            .filter_map(|id| self.call(id))
            .collect()
    }

    fn read_only(&self, tool: &str) -> bool {
        self.config.tools.iter().find(|t| t.name == tool).is_none_or(|t| t.effects.read_only())
    }

    /// A summary written without the model: each turn's text and calls in a
    /// line.
    fn summary_by_rule(&self, upto: usize) -> String {
        let from = self.compaction().map_or(0, |(_, c)| c.upto);
        let mut lines: Vec<String> = self.compaction().map(|(_, c)| c.summary.clone()).into_iter().collect();
        for e in self.entries.get(from..upto).unwrap_or_default() {
            if let Entry::Assistant { content, calls } = e {
                let called: Vec<String> = calls
                    .iter()
                    .filter_map(|id| self.call(id))
                    .map(|c| format!("{} {} ({})", c.tool, clip(&c.arguments.to_string(), 80), c.status.as_str()))
                    .collect();
                let said = clip(content.lines().next().unwrap_or_default().trim(), 160);
                lines.push(match (said.is_empty(), called.is_empty()) {
                    (_, true) => format!("- said: {said}"),
                    (true, false) => format!("- called {}", called.join("; ")),
                    (false, false) => format!("- said: {said}; called {}", called.join("; ")),
                });
            }
        }
        clip(&lines.join("\n"), MAX_SUMMARY_CHARS)
    }

    /// The message the model sees in place of the compacted turns.
    pub(super) fn compaction_message(&self, c: &Compaction) -> Message {
        let n = self.compactions();
        let mut text = format!(
            "[The earlier part of this run was compacted to fit the model's context ({n} time(s) so far). Nothing \
was deleted: `{RECALL}` with a call's id shows that call's full result.]\n\nSummary of the work so far:\n{}\n",
            c.summary
        );
        if !c.facts.is_empty() {
            text.push_str(
                "\nFacts with evidence, carried over verbatim from the compacted turns (they hold unless a later \
turn changed them):\n",
            );
            for f in &c.facts {
                text.push_str(&format!("- {} [call {}]\n", f.text, f.call_id));
            }
        }
        if c.facts_dropped > 0 {
            text.push_str(&format!(
                "({} older facts left out; `{RECALL}` still shows their calls.)\n",
                c.facts_dropped
            ));
        }
        Message::user(text)
    }

    /// The `recall` tool as offered once the run was compacted.
    pub(super) fn recall_spec() -> ToolSpec {
        ToolSpec {
            name: RECALL.into(),
            description: "Shows the full result of an earlier call of this run, by its call id (the compacted \
turns' facts name their calls)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"call_id": {"type": "string", "description": "The call's id."}},
                "required": ["call_id"],
                "additionalProperties": false
            }),
        }
    }

    /// Whether a call of `tool` is the run's own `recall` (offered once
    /// compacted, unless a tool of that name was configured).
    pub(super) fn is_recall(&self, tool: &str) -> bool {
        tool == RECALL && self.compaction().is_some() && !self.config.tools.iter().any(|t| t.name == RECALL)
    }

    /// What `recall` answers for `arguments`: the call, its status,
    /// evidence and full result — or an error naming the calls there are.
    pub(super) fn recall(&self, arguments: &Value) -> Result<String, String> {
        let Some(id) = arguments.get("call_id").and_then(Value::as_str) else {
            return Err("error: `recall` needs `call_id`, the id of an earlier call".into());
        };
        let Some(c) = self.call(id).filter(|c| c.status.is_final() && c.tool != RECALL) else {
            return Err(format!("error: no finished call `{}` in this run", clip(id, 64)));
        };
        let mut text = format!("call {} {} {}\nstatus: {}\n", c.id, c.tool, c.arguments, c.status.as_str());
        for e in &c.evidence {
            text.push_str(&format!("evidence: {}\n", serde_json::to_string(e).unwrap_or_default()));
        }
        text.push_str(&format!("result:\n{}", c.result.as_deref().unwrap_or_default()));
        Ok(text)
    }

    /// The provider refused the request as too long: the run learns a
    /// window below what was sent and compacts (`true`: ask again); when
    /// nothing can be compacted, `false`.
    pub(super) fn compact_for_overflow(&mut self) -> bool {
        if let Phase::Compact { .. } = self.phase {
            // The summary request itself is too long: the summary is
            // written by rule, the facts are kept, and the run goes on.
            self.finish_compaction(None);
            return true;
        }
        let sent = self.seen_context.sent_tokens;
        if sent > 0 {
            let learned = sent * 2 / 3;
            self.seen_context.window = Some(self.seen_context.window.map_or(learned, |w| w.min(learned)));
        }
        match self.compaction_point() {
            Some(upto) => {
                self.begin_compaction(upto, "overflow");
                true
            }
            None => false,
        }
    }

    /// Whether `reported` prompt tokens for a request estimated at the
    /// last one sent show the provider cut it (as Ollama does beyond its
    /// `num_ctx`, silently): far fewer tokens counted than were sent.
    pub(super) fn was_cut(&self, reported: u64) -> bool {
        let sent = self.seen_context.sent_tokens;
        reported >= MIN_WINDOW_SEEN && reported.saturating_mul(2) < sent
    }

    /// The provider cut the last request to `reported` tokens: that is its
    /// window. Compacts when it can (`true`: the reply is set aside and the
    /// request asked again, shorter); else the run stops, saying so —
    /// never a silent truncation.
    pub(super) fn on_cut(&mut self, reported: u64) -> bool {
        self.seen_context.cuts += 1;
        self.seen_context.window = Some(self.seen_context.window.map_or(reported, |w| w.min(reported)));
        if let Some(upto) = self.compaction_point() {
            self.begin_compaction(upto, "truncated");
            return true;
        }
        self.stop(
            StopReason::Provider,
            format!(
                "the provider read only {reported} of about {} prompt tokens (it cuts requests to its context \
window) and there is nothing left to compact; raise the model's context (Ollama: num_ctx) or shorten the task",
                self.seen_context.sent_tokens
            ),
        );
        false
    }
}

/// The facts a finished call rests on. `read_only`: its tool changes
/// nothing (so a file it names was read, not written).
pub fn facts_of(call: &CallRecord, read_only: bool) -> Vec<Fact> {
    let fact = |kind, text: String| Fact { kind, text, call_id: call.id.clone() };
    let result = call.result.as_deref().unwrap_or_default();
    let mut facts = Vec::new();
    match call.status {
        CallStatus::Denied => {
            facts.push(fact(
                FactKind::Decision,
                format!("`{}` {} was refused: {}", call.tool, short(&call.arguments), first_line(result, 240)),
            ));
            return facts;
        }
        CallStatus::Failed | CallStatus::Interrupted if call.evidence.is_empty() => {
            let error = result.strip_prefix("error: ").unwrap_or(result);
            facts.push(fact(
                FactKind::Error,
                format!("`{}` {} failed: {}", call.tool, short(&call.arguments), first_line(error, 240)),
            ));
            return facts;
        }
        s if !s.is_final() => return facts,
        _ => {}
    }
    for e in &call.evidence {
        match e {
            ToolEvidence::File { path, blake3 } => facts.push(if read_only {
                fact(FactKind::Read, format!("read {path} (blake3 {})", &blake3[..blake3.len().min(16)]))
            } else {
                fact(FactKind::Changed, format!("changed {path} (now blake3 {})", &blake3[..blake3.len().min(16)]))
            }),
            ToolEvidence::Command { command, exit_code, .. } => facts.push(fact(
                FactKind::Command,
                format!(
                    "`{}` {}: {}",
                    clip(command, 160),
                    exit_code.map_or_else(|| "was killed".to_owned(), |c| format!("exited {c}")),
                    gist(result)
                ),
            )),
            ToolEvidence::Envelope { module, ok, .. } => facts.push(fact(
                FactKind::Module,
                format!("module {module} {}: {}", if *ok { "succeeded" } else { "failed" }, first_line(result, 200)),
            )),
            ToolEvidence::SubAgent { run_id } => facts.push(fact(
                FactKind::SubAgent,
                format!("sub-agent run {run_id} answered: {}", first_line(result, 240)),
            )),
            ToolEvidence::Mcp { server, tool, outcome, .. } => facts.push(fact(
                FactKind::Mcp,
                format!("{server}/{tool} ended {}: {}", outcome.as_str(), first_line(result, 200)),
            )),
            ToolEvidence::Frame { .. } => {}
        }
    }
    if call.is_error && !facts.iter().any(|f| f.kind == FactKind::Command) {
        let error = result.strip_prefix("error: ").unwrap_or(result);
        facts.push(fact(
            FactKind::Error,
            format!("`{}` {} failed: {}", call.tool, short(&call.arguments), first_line(error, 240)),
        ));
    }
    facts
}

fn short(arguments: &Value) -> String {
    clip(&arguments.to_string(), 120)
}

fn first_line(text: &str, n: usize) -> String {
    clip(text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default(), n)
}

/// What a command's output concluded, in a line or two: the lines that
/// report tests or errors, else its last line.
fn gist(output: &str) -> String {
    const SIGNS: [&str; 8] = ["test result", "passed", "failed", "error", "panicked", "FAILED", "Error", "assert"];
    let lines: Vec<&str> = output.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let telling: Vec<&str> = lines.iter().copied().filter(|l| SIGNS.iter().any(|s| l.contains(s))).collect();
    let chosen: Vec<&str> = if telling.is_empty() {
        lines.last().copied().into_iter().collect()
    } else {
        // The last ones: a summary line comes at the end.
        telling[telling.len().saturating_sub(2)..].to_vec()
    };
    clip(&chosen.join(" | "), 240)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(status: CallStatus, result: &str, evidence: Vec<ToolEvidence>) -> CallRecord {
        CallRecord {
            id: "c1".into(),
            turn: 0,
            tool: "run_command".into(),
            arguments: json!({"command": "cargo test"}),
            arguments_hash: String::new(),
            status,
            result: Some(result.into()),
            is_error: matches!(status, CallStatus::Failed | CallStatus::Denied),
            started_ms: None,
            finished_ms: None,
            evidence,
            span: None,
            spent: None,
        }
    }

    #[test]
    fn a_test_run_is_kept_with_its_exit_code_and_summary_line() {
        let out = "running 3 tests\ntest a ... ok\ntest b ... FAILED\n\ntest result: FAILED. 2 passed; 1 failed";
        let ev =
            ToolEvidence::Command { command: "cargo test".into(), exit_code: Some(101), output_blake3: "x".into() };
        let facts = facts_of(&call(CallStatus::Completed, out, vec![ev]), false);
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].kind, FactKind::Command);
        assert!(facts[0].text.contains("exited 101"), "{}", facts[0].text);
        assert!(facts[0].text.contains("test result: FAILED. 2 passed; 1 failed"), "{}", facts[0].text);
    }

    #[test]
    fn reads_and_changes_are_told_apart_by_the_tool_and_keep_their_hash() {
        let ev = ToolEvidence::File { path: "src/a.rs".into(), blake3: "0123456789abcdef0123".into() };
        let read = facts_of(&call(CallStatus::Completed, "fn a() {}", vec![ev.clone()]), true);
        assert_eq!(read[0].text, "read src/a.rs (blake3 0123456789abcdef)");
        let wrote = facts_of(&call(CallStatus::Completed, "wrote 10 bytes", vec![ev]), false);
        assert_eq!(
            (wrote[0].kind, wrote[0].text.as_str()),
            (FactKind::Changed, "changed src/a.rs (now blake3 0123456789abcdef)")
        );
    }

    #[test]
    fn refusals_and_errors_are_facts_and_unfinished_calls_are_not() {
        let denied = facts_of(&call(CallStatus::Denied, "denied by a person: keep the logs", vec![]), false);
        assert_eq!(denied[0].kind, FactKind::Decision);
        assert!(denied[0].text.ends_with("was refused: denied by a person: keep the logs"), "{}", denied[0].text);
        let failed = facts_of(&call(CallStatus::Failed, "error: no such file: x.rs\nFix it", vec![]), false);
        assert_eq!(failed[0].kind, FactKind::Error);
        assert!(failed[0].text.ends_with("failed: no such file: x.rs"), "{}", failed[0].text);
        assert!(facts_of(&call(CallStatus::Running, "", vec![]), false).is_empty());
    }

    #[test]
    fn the_gist_of_output_is_its_telling_lines_or_its_last() {
        assert_eq!(gist("a\nb\nlast"), "last");
        assert_eq!(gist("error[E0308]: mismatched types\n  --> src/x.rs:3:5\nmore"), "error[E0308]: mismatched types");
        assert_eq!(gist(""), "");
    }
}
