//! The model's replies: a plan, a turn that answers or proposes calls (each
//! decided at once when no person needs to), a critique.

use noesis_llm::{ChatResponse, ToolCall};

use super::{AgentRun, Critique, Entry, Outcome, Phase, RecordedCall, ReplyRecord, StepError, StopReason};
use crate::config::Strategy;
use crate::permission::Ruling;
use crate::record::{CallRecord, CallStatus};
use crate::tool::{argument_errors, clip};

impl AgentRun {
    /// The model's reply to the last request. `cost_usd` is the driver's
    /// price for it.
    pub fn on_model_reply(&mut self, reply: &ChatResponse, cost_usd: f64) -> Result<(), StepError> {
        if self.outcome.is_some() {
            return Err(StepError::Finished);
        }
        if !self.awaiting_reply {
            return Err(StepError::UnexpectedReply(self.phase_name()));
        }
        self.awaiting_reply = false;
        self.usage.turns += 1;
        if let Some(u) = reply.usage {
            self.usage.input_tokens += u.input_tokens;
            self.usage.output_tokens += u.output_tokens;
        }
        self.usage.cost_usd += cost_usd;
        self.replies.push(ReplyRecord {
            text: reply.text.clone(),
            model: reply.model.clone(),
            tool_calls: reply
                .tool_calls
                .iter()
                .map(|c| RecordedCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                .collect(),
            usage: reply.usage,
            cost_usd,
            route: None,
            role: Some(self.role().to_owned()),
            span: None,
        });
        self.step += 1;
        let compacting = matches!(self.phase, Phase::Compact { .. });
        if let Some(u) = reply.usage
            && !compacting
            && self.was_cut(u.input_tokens)
        {
            // Whatever the model said, it said without part of the
            // conversation: it is set aside and asked again, compacted.
            self.on_cut(u.input_tokens);
            return Ok(());
        }
        match self.phase.clone() {
            Phase::Compact { .. } => self.finish_compaction(Some(&reply.text)),
            Phase::Plan => {
                self.plan = parse_plan(&reply.text);
                self.entries.push(Entry::Assistant { content: reply.text.clone(), calls: Vec::new() });
                self.plan_step = 0;
                self.enter_plan_step();
            }
            Phase::Think => self.on_think_reply(reply),
            Phase::Reflect { answer } => self.on_critique(&reply.text, answer),
            Phase::Act { .. } | Phase::Done => return Err(StepError::UnexpectedReply(self.phase_name())),
        }
        Ok(())
    }

    pub(super) fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Plan => "planning",
            Phase::Think => "thinking",
            Phase::Act { .. } => "acting",
            Phase::Reflect { .. } => "reflecting",
            Phase::Compact { .. } => "compacting",
            Phase::Done => "done",
        }
    }

    fn enter_plan_step(&mut self) {
        self.phase = Phase::Think;
        if let Some(step) = self.plan.get(self.plan_step) {
            let n = self.plan.len();
            self.entries.push(Entry::Note {
                content: format!(
                    "Step {} of {n}: {step}\nDo this step now (use tools if needed), then reply with its result.",
                    self.plan_step + 1
                ),
            });
        } else {
            self.entries
                .push(Entry::Note { content: "All steps are done. Reply with the final answer to the task.".into() });
        }
    }

    fn on_think_reply(&mut self, reply: &ChatResponse) {
        let tools_allowed = self.config.strategy != Strategy::SingleShot;
        let calls = if tools_allowed { reply.tool_calls.as_slice() } else { &[] };
        let text = reply.text.trim();
        if calls.is_empty() && text.is_empty() {
            self.format_error("Your reply was empty. Call one of the tools, or reply with your final answer.".into());
            return;
        }
        let broken = calls.iter().filter(|c| !c.arguments.is_object()).count();
        if calls.is_empty() {
            self.format_errors = 0;
            self.entries.push(Entry::Assistant { content: reply.text.clone(), calls: Vec::new() });
            self.on_answer(reply.text.clone());
            return;
        }
        let turn = self.usage.turns - 1;
        let mut ids = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let id = if call.id.is_empty() || self.call(&call.id).is_some() || ids.contains(&call.id) {
                format!("call-{turn}-{i}")
            } else {
                call.id.clone()
            };
            ids.push(id.clone());
            let record = self.propose(id, turn, call);
            self.calls.push(record);
        }
        self.entries.push(Entry::Assistant { content: reply.text.clone(), calls: ids });
        self.phase = Phase::Act { turn };
        let max_calls = self.config.limits.max_tool_calls;
        if self.usage.tool_calls > max_calls {
            // The calls within the budget still run; the run stops after them.
            self.budget_stop =
                Some(format!("{} tool calls asked for; the limit is {max_calls}", self.usage.tool_calls));
        }
        if broken > 0 {
            self.format_errors += 1;
            if self.format_errors >= self.config.limits.max_format_errors {
                let n = self.format_errors;
                self.stop(StopReason::FormatErrors, format!("{n} replies in a row were malformed"));
            }
        } else {
            self.format_errors = 0;
        }
    }

    fn format_error(&mut self, correction: String) {
        self.format_errors += 1;
        if self.format_errors >= self.config.limits.max_format_errors {
            let n = self.format_errors;
            self.stop(StopReason::FormatErrors, format!("{n} replies in a row were malformed"));
            return;
        }
        self.entries.push(Entry::Note { content: correction });
    }

    /// A record for a proposed call, already decided when no person needs
    /// to decide: unknown tools and invalid arguments fail, the budget
    /// denies, the permission rules and the policy approve, ask or refuse.
    fn propose(&mut self, id: String, turn: u32, call: &ToolCall) -> CallRecord {
        self.usage.tool_calls += 1;
        let mut record = CallRecord {
            id,
            turn,
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            arguments_hash: noesis_frames::scan::json_digest(&call.arguments),
            status: CallStatus::Proposed,
            result: None,
            is_error: false,
            started_ms: None,
            finished_ms: None,
            evidence: Vec::new(),
            span: None,
            spent: None,
        };
        let refuse = |record: &mut CallRecord, status: CallStatus, text: String| {
            record.status = status;
            record.result = Some(text);
            record.is_error = true;
        };
        let max_calls = self.config.limits.max_tool_calls;
        if self.usage.tool_calls > max_calls {
            refuse(
                &mut record,
                CallStatus::Failed,
                format!("not run: the run's tool-call budget ({max_calls}) is used up"),
            );
            return record;
        }
        if self.is_recall(&call.name) {
            // The run answers `recall` itself, from its own records.
            match self.recall(&call.arguments) {
                Ok(text) => {
                    record.status = CallStatus::Completed;
                    record.result = Some(text);
                }
                Err(text) => refuse(&mut record, CallStatus::Failed, text),
            }
            return record;
        }
        let Some(decl) = self.tool(&call.name).cloned() else {
            let names: Vec<&str> = self.config.tools.iter().map(|t| t.name.as_str()).collect();
            let text = format!(
                "error: there is no tool `{}`; the tools are: {}. Fix the call and try again.",
                clip(&call.name, 64),
                if names.is_empty() { "none".into() } else { names.join(", ") }
            );
            refuse(&mut record, CallStatus::Failed, text);
            return record;
        };
        if self.withdrawn(&decl) {
            let text = format!(
                "error: `{}` failed {} times and is no longer available in this run",
                decl.name, decl.max_failures
            );
            refuse(&mut record, CallStatus::Failed, text);
            return record;
        }
        let errors = argument_errors(&decl, &call.arguments);
        if !errors.is_empty() {
            *self.failures.entry(decl.name.clone()).or_default() += 1;
            let text = format!(
                "error: invalid arguments for `{}`:\n- {}\nFix the errors and try again.",
                decl.name,
                errors.join("\n- ")
            );
            refuse(&mut record, CallStatus::Failed, text);
            return record;
        }
        record.status = match self.config.permissions.decide(&decl, &call.arguments, self.config.approval) {
            Ruling::Run => CallStatus::Approved,
            Ruling::Ask { .. } => CallStatus::AwaitingApproval,
            Ruling::Refuse { reason } => {
                refuse(&mut record, CallStatus::Denied, reason);
                return record;
            }
        };
        record
    }

    fn on_answer(&mut self, answer: String) {
        self.answered();
        if self.config.strategy == Strategy::ChainOfThought && self.plan_step < self.plan.len() {
            self.plan_step += 1;
            self.enter_plan_step();
            return;
        }
        let Some(answer) = self.accept_output(answer) else { return };
        if self.config.reflect && self.reflections < self.config.max_reflections {
            self.phase = Phase::Reflect { answer };
            return;
        }
        self.finish(Outcome::Answer { text: answer });
    }

    fn on_critique(&mut self, text: &str, answer: String) {
        self.reflections += 1;
        let critique = parse_critique(text);
        match critique {
            Some(c) if !c.goal_achieved => {
                self.entries.push(Entry::Note {
                    content: format!(
                        "A critique of your answer: the goal is not achieved.\nWhat went wrong: {}\nNext step: {}\nContinue working on the task.",
                        c.what_went_wrong, c.next_step
                    ),
                });
                self.phase = Phase::Think;
            }
            // Achieved, or a critique that cannot be read: the answer stands.
            _ => self.finish(Outcome::Answer { text: answer }),
        }
    }
}

/// The first JSON object in `text` that reads as a critique.
pub(super) fn parse_critique(text: &str) -> Option<Critique> {
    let start = text.find('{')?;
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Critique>();
    stream.next()?.ok()
}

/// The steps of a numbered (or bulleted) list; one step when there is no
/// list.
fn parse_plan(text: &str) -> Vec<String> {
    let steps: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter_map(|line| {
            let rest = line.trim_start_matches(|c: char| c.is_ascii_digit());
            let numbered = rest.len() < line.len() && (rest.starts_with('.') || rest.starts_with(')'));
            let bulleted = line.starts_with("- ") || line.starts_with("* ");
            if numbered {
                Some(rest[1..].trim().to_owned())
            } else if bulleted {
                Some(line[2..].trim().to_owned())
            } else {
                None
            }
        })
        .filter(|s| !s.is_empty())
        .take(7)
        .collect();
    if steps.is_empty() && !text.trim().is_empty() { vec![clip(text.trim(), 500)] } else { steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_read_from_numbered_or_bulleted_lists() {
        assert_eq!(parse_plan("Plan:\n1. read it\n2) fix it\n\n3. test"), ["read it", "fix it", "test"]);
        assert_eq!(parse_plan("- a\n* b"), ["a", "b"]);
        assert_eq!(parse_plan("just do it"), ["just do it"]);
        assert!(parse_plan("  ").is_empty());
    }

    #[test]
    fn critiques_are_found_in_prose() {
        let c = parse_critique("Sure: {\"goal_achieved\": false, \"what_went_wrong\": \"x\", \"next_step\": \"y\"} ok")
            .unwrap();
        assert!(!c.goal_achieved && c.next_step == "y");
        assert!(parse_critique("no json").is_none());
        assert!(parse_critique("{\"other\": 1}").is_none());
    }
}
