//! What the driver reports about calls (started, finished, replayed) and
//! the decisions people make on calls that wait for them.

use super::{AgentRun, Decision, Outcome, StepError, ToolOutput, Verdict};
use crate::permission::Ruling;
use crate::record::{CallRecord, CallStatus};
use crate::tool::argument_errors;

impl AgentRun {
    /// Records that the driver starts executing call `id` (store the run
    /// before executing it).
    pub fn started(&mut self, id: &str, now_ms: u64) -> Result<(), StepError> {
        if self.outcome.is_none() && self.call(id).is_some() && !self.dispatched.iter().any(|d| d == id) {
            return Err(StepError::NotDispatched(id.into()));
        }
        self.transition(id, CallStatus::Running)?;
        if let Some(c) = self.calls.iter_mut().find(|c| c.id == id) {
            c.started_ms = Some(now_ms);
        }
        Ok(())
    }

    /// Records what call `id` returned.
    pub fn finished(&mut self, id: &str, output: ToolOutput, now_ms: u64) -> Result<(), StepError> {
        let to = if output.is_error { CallStatus::Failed } else { CallStatus::Completed };
        self.transition(id, to)?;
        let mut failed_tool = None;
        if let Some(c) = self.calls.iter_mut().find(|c| c.id == id) {
            c.finished_ms = Some(now_ms);
            c.is_error = output.is_error;
            c.evidence = output.evidence;
            c.spent.clone_from(&output.spent);
            c.result = Some(if output.is_error {
                failed_tool = Some(c.tool.clone());
                format!("error: {}\nFix the problem and try again, or take another approach.", output.content)
            } else {
                output.content
            });
        }
        if let Some(tool) = failed_tool {
            *self.failures.entry(tool).or_default() += 1;
        }
        self.add_spend(output.spent.as_ref());
        Ok(())
    }

    fn add_spend(&mut self, spent: Option<&super::ToolSpend>) {
        if let Some(s) = spent {
            self.usage.input_tokens += s.input_tokens;
            self.usage.output_tokens += s.output_tokens;
            self.usage.cost_usd += s.cost_usd;
        }
    }

    /// Reports call `id` finished exactly as `recorded` finished (status,
    /// result text, evidence): a replay serving results from a record.
    pub fn replay_result(&mut self, id: &str, recorded: &CallRecord, now_ms: u64) -> Result<(), StepError> {
        if !matches!(recorded.status, CallStatus::Completed | CallStatus::Failed | CallStatus::Interrupted) {
            return Err(StepError::Transition { id: id.into(), from: "running", to: recorded.status.as_str() });
        }
        self.transition(id, recorded.status)?;
        let failed = recorded.is_error && recorded.status == CallStatus::Failed;
        if let Some(c) = self.calls.iter_mut().find(|c| c.id == id) {
            c.finished_ms = Some(now_ms);
            c.is_error = recorded.is_error;
            c.result.clone_from(&recorded.result);
            c.evidence.clone_from(&recorded.evidence);
            c.spent.clone_from(&recorded.spent);
        }
        if failed {
            *self.failures.entry(recorded.tool.clone()).or_default() += 1;
        }
        self.add_spend(recorded.spent.as_ref());
        Ok(())
    }

    fn transition(&mut self, id: &str, to: CallStatus) -> Result<(), StepError> {
        if self.outcome.is_some() {
            return Err(StepError::Finished);
        }
        let c = self.calls.iter_mut().find(|c| c.id == id).ok_or_else(|| StepError::UnknownCall(id.into()))?;
        if !c.status.can_become(to) {
            return Err(StepError::Transition { id: id.into(), from: c.status.as_str(), to: to.as_str() });
        }
        c.status = to;
        self.step += 1;
        Ok(())
    }

    /// Applies decisions on pending calls. All are checked first — each
    /// must name a pending call with the tool and argument hash the person
    /// saw, and edited arguments must fit the tool's schema — and applied
    /// only if every one is valid. An abort ends the run.
    pub fn decide(&mut self, decisions: &[Decision]) -> Result<(), StepError> {
        if self.outcome.is_some() {
            return Err(StepError::Finished);
        }
        for d in decisions {
            let c = self.call(&d.call_id).ok_or_else(|| StepError::UnknownCall(d.call_id.clone()))?;
            if c.status != CallStatus::AwaitingApproval {
                return Err(StepError::Transition {
                    id: c.id.clone(),
                    from: c.status.as_str(),
                    to: CallStatus::Approved.as_str(),
                });
            }
            if c.tool != d.tool {
                return Err(StepError::StaleDecision { call_id: c.id.clone(), what: "a tool" });
            }
            if c.arguments_hash != d.arguments_hash {
                return Err(StepError::StaleDecision { call_id: c.id.clone(), what: "arguments" });
            }
            if let Verdict::ApproveEdited { arguments } = &d.verdict
                && let Some(decl) = self.tool(&c.tool)
            {
                let errors = argument_errors(decl, arguments);
                if !errors.is_empty() {
                    return Err(StepError::InvalidEdit { call_id: c.id.clone(), errors: errors.join("; ") });
                }
                // An edit is a new call: the rules decide on it again, so
                // no edit can smuggle in what they refuse.
                if let Ruling::Refuse { reason } = self.config.permissions.decide(decl, arguments, self.config.approval)
                {
                    return Err(StepError::RefusedEdit { call_id: c.id.clone(), reason });
                }
            }
        }
        if let Some(message) = decisions.iter().find_map(|d| match &d.verdict {
            Verdict::Abort { message } => Some(message.clone()),
            _ => None,
        }) {
            for c in self.calls.iter_mut().filter(|c| c.status == CallStatus::AwaitingApproval) {
                c.status = CallStatus::Denied;
                c.is_error = true;
                c.result = Some("denied: the run was aborted".into());
            }
            self.finish(Outcome::Aborted { message });
            return Ok(());
        }
        for d in decisions {
            let Some(c) = self.calls.iter_mut().find(|c| c.id == d.call_id) else { continue };
            match &d.verdict {
                Verdict::Approve => c.status = CallStatus::Approved,
                Verdict::ApproveEdited { arguments } => {
                    c.arguments = arguments.clone();
                    c.arguments_hash = noesis_frames::scan::json_digest(arguments);
                    c.status = CallStatus::Approved;
                }
                Verdict::Deny { message } => {
                    c.status = CallStatus::Denied;
                    c.is_error = true;
                    c.result = Some(match message {
                        Some(m) => format!("denied by the user: {m}"),
                        None => "denied by the user".into(),
                    });
                }
                Verdict::Abort { .. } => {}
            }
            self.step += 1;
        }
        Ok(())
    }
}
