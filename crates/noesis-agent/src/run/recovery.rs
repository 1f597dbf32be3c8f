//! When things go wrong or change under a run: the model fails or its
//! context overflows, the driver stops, tools change, the run is cancelled
//! and resumed.

use noesis_llm::ChatRequest;

use super::{AgentRun, Entry, INTERRUPTED, Outcome, Phase, StepError, StopReason};
use crate::config::Strategy;
use crate::record::CallStatus;
use crate::tool::ToolDecl;

impl AgentRun {
    /// The model request failed for good (the provider has retried what
    /// it retries): the run stops with the reason, resumable by a driver
    /// that asks again.
    pub fn on_model_error(&mut self, message: &str) -> Result<(), StepError> {
        if self.outcome.is_some() {
            return Err(StepError::Finished);
        }
        if !self.awaiting_reply {
            return Err(StepError::UnexpectedReply(self.phase_name()));
        }
        self.stop(StopReason::Provider, message.to_owned());
        Ok(())
    }

    /// The model refused the last request as longer than its context: the
    /// oldest turns are left out by rule (the conversation budget becomes
    /// two thirds of what was sent) and the request may be asked again —
    /// `true`. When nothing more can be left out (the task and the latest
    /// turn alone do not fit) the run stops, typed, and this is `false`.
    pub fn on_context_overflow(&mut self) -> Result<bool, StepError> {
        if self.outcome.is_some() {
            return Err(StepError::Finished);
        }
        if !self.awaiting_reply {
            return Err(StepError::UnexpectedReply(self.phase_name()));
        }
        // Compacted when there is something to compact: nothing is lost.
        if self.compact_for_overflow() {
            self.awaiting_reply = false;
            self.step += 1;
            return Ok(true);
        }
        let chars =
            |r: &ChatRequest| r.messages.iter().map(|m| m.content.len() + m.tool_calls.len() * 64).sum::<usize>();
        let before = self.request();
        let sent = chars(&before);
        let previous = self.config.limits.max_context_chars;
        self.config.limits.max_context_chars = Some(sent * 2 / 3);
        let after = self.request();
        if after.messages.len() >= before.messages.len() && chars(&after) >= sent {
            self.config.limits.max_context_chars = previous;
            self.stop(
                StopReason::Provider,
                format!(
                    "the conversation ({sent} characters) does not fit the model's context even with every earlier turn left out"
                ),
            );
            return Ok(false);
        }
        self.awaiting_reply = false;
        self.step += 1;
        Ok(true)
    }

    /// Stops the run because its driver cannot go on (`detail` says why);
    /// resumable like a provider failure.
    pub fn stop_for_driver(&mut self, detail: String) {
        if self.outcome.is_none() {
            self.stop(StopReason::Provider, detail);
        }
    }

    /// A tool source's tools changed while the run goes on (an MCP server's
    /// list changed, or it stopped): `previous` were its tools, `current`
    /// are. Removed tools are withdrawn, new and changed ones offered as the
    /// run's [`crate::ToolFilter`] allows, and the model is told in a note.
    /// Returns whether anything changed.
    pub fn update_tools(&mut self, previous: &[ToolDecl], current: &[ToolDecl]) -> bool {
        if self.outcome.is_some() || self.config.strategy == crate::Strategy::SingleShot {
            return false;
        }
        let mut removed: Vec<String> = Vec::new();
        for p in previous {
            if !current.iter().any(|c| c.name == p.name) && self.config.tools.iter().any(|t| t.name == p.name) {
                removed.push(p.name.clone());
            }
        }
        self.config.tools.retain(|t| !removed.contains(&t.name));
        let (mut added, mut changed) = (Vec::new(), Vec::new());
        for c in current {
            if !self.config.tool_filter.offers(&c.name) {
                continue;
            }
            match self.config.tools.iter_mut().find(|t| t.name == c.name) {
                Some(t) if t == c => {}
                Some(t) => {
                    *t = c.clone();
                    changed.push(c.name.clone());
                }
                None => {
                    self.config.tools.push(c.clone());
                    added.push(c.name.clone());
                }
            }
        }
        if removed.is_empty() && added.is_empty() && changed.is_empty() {
            return false;
        }
        let mut said = Vec::new();
        for (what, names) in [("now available", &added), ("changed", &changed), ("no longer available", &removed)] {
            if !names.is_empty() {
                said.push(format!("{what}: {}", names.join(", ")));
            }
        }
        self.entries.push(Entry::Note { content: format!("The tools changed ({}).", said.join("; ")) });
        self.step += 1;
        true
    }

    /// Stops the run as cancelled (Ctrl-C); [`AgentRun::resume`] continues it.
    pub fn cancel(&mut self) {
        if self.outcome.is_none() {
            self.finish(Outcome::Cancelled);
        }
    }

    /// Continues a run loaded after a stop, a crash or a kill: a cancelled
    /// run, one the model's failure stopped, or one that stalled is
    /// reopened; calls that were running become interrupted results
    /// (or, for idempotent tools, run again); a model request that was out
    /// is simply asked again. Completed results are kept, never re-run.
    pub fn resume(&mut self) {
        self.reopen(false);
    }

    /// Like [`AgentRun::resume`], but every call that was running is handed
    /// out again: for a replay, where results come from the record and
    /// nothing really runs.
    pub fn resume_for_replay(&mut self) {
        self.reopen(true);
    }

    fn reopen(&mut self, rerun_all: bool) {
        let stalled = matches!(self.outcome, Some(Outcome::Stopped { reason: StopReason::Stalled, .. }));
        let reopen = stalled
            || matches!(self.outcome, Some(Outcome::Cancelled | Outcome::Stopped { reason: StopReason::Provider, .. }));
        if stalled && !rerun_all {
            // A person chose to go on: the model gets a fresh count, and is
            // told why it stopped.
            self.stall = super::progress::Stall::default();
            self.entries.push(Entry::Note {
                content: "The run was stopped because it made no progress, and a person resumed it. Take a different \
approach from the one you repeated."
                    .into(),
            });
        }
        if reopen {
            self.outcome = None;
            self.phase = match self.calls.iter().rev().find(|c| !c.status.is_final()) {
                Some(c) => Phase::Act { turn: c.turn },
                None if self.config.strategy == Strategy::ChainOfThought && self.plan.is_empty() => Phase::Plan,
                None => Phase::Think,
            };
        }
        self.awaiting_reply = false;
        self.dispatched.clear();
        let idempotent: Vec<String> =
            self.config.tools.iter().filter(|t| t.idempotent).map(|t| t.name.clone()).collect();
        for c in self.calls.iter_mut().filter(|c| c.status == CallStatus::Running) {
            if rerun_all || idempotent.contains(&c.tool) {
                c.status = CallStatus::Approved;
                c.started_ms = None;
            } else {
                c.status = CallStatus::Interrupted;
                c.is_error = true;
                c.result = Some(INTERRUPTED.into());
            }
        }
        self.step += 1;
    }
}
