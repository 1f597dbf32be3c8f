//! Replay: a recorded run driven again from one of its states, with the
//! model's replies and the tools' results served from the record — no
//! network, no side effects. It shows what the run did, step by step, and
//! whether this build of the loop still makes the same run of it.

use serde::Serialize;

use crate::record::CallStatus;
use crate::run::{Action, AgentRun, Decision, Outcome, Verdict};

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replayed {
    /// The run as the replay left it.
    #[serde(skip)]
    pub run: AgentRun,
    /// One line per step, in order.
    pub steps: Vec<String>,
    /// Where the replay could not follow the record (`None`: it followed
    /// it to the end).
    pub diverged: Option<String>,
    /// Whether it ended as the record did (outcome and every call's result).
    pub matches: bool,
}

/// Replays `record` from `from` (an earlier state of the same run, or the
/// run as it began).
pub fn replay(from: AgentRun, record: &AgentRun) -> Replayed {
    let mut run = from;
    run.resume_for_replay();
    let now = run.started_ms;
    let mut steps = Vec::new();
    let mut diverged = None;
    // Every step changes the run; more steps than the record took means a
    // loop the record did not have.
    let most = record.step.saturating_mul(2).saturating_add(16);
    let mut guard = 0u64;
    while diverged.is_none() {
        guard += 1;
        if guard > most {
            diverged = Some(format!("the replay took more than {most} steps"));
            break;
        }
        match run.next(now) {
            Action::CallModel(_) => {
                let turn = run.replies.len();
                let Some(reply) = record.replies.get(turn) else {
                    diverged = Some(format!("the record has no model reply for turn {}", turn + 1));
                    break;
                };
                if reply.role.as_deref() == Some("compact") && run.role() != "compact" {
                    // The record compacted here because the provider refused
                    // the request as too long: a refusal is no reply, so it
                    // is played again.
                    steps.push(format!("model turn {}: refused as too long", turn + 1));
                    if run.on_context_overflow() != Ok(true) {
                        diverged = Some(format!("turn {}: the refusal the record compacted on ends the run", turn + 1));
                    }
                    continue;
                }
                steps.push(format!(
                    "model turn {}: {} call(s){}",
                    turn + 1,
                    reply.tool_calls.len(),
                    if reply.text.is_empty() { String::new() } else { format!(", text {:?}", clip(&reply.text)) }
                ));
                if let Err(e) = run.on_model_reply(&reply.to_response(), reply.cost_usd) {
                    diverged = Some(format!("turn {}: {e}", turn + 1));
                }
            }
            Action::ExecuteTools(batch) => {
                for call in batch {
                    let Some(recorded) = record.call(&call.call_id).filter(|c| c.status.is_final()) else {
                        diverged = Some(format!("the record has no result for call {} ({})", call.call_id, call.tool));
                        break;
                    };
                    if recorded.tool != call.tool || recorded.arguments != call.arguments {
                        diverged = Some(format!("call {} differs from the record", call.call_id));
                        break;
                    }
                    steps.push(format!("tool {} {}: {}", call.tool, call.call_id, recorded.status.as_str()));
                    if let Err(e) =
                        run.started(&call.call_id, now).and_then(|()| run.replay_result(&call.call_id, recorded, now))
                    {
                        diverged = Some(format!("call {}: {e}", call.call_id));
                        break;
                    }
                }
            }
            Action::AwaitApproval(pending) => {
                let mut decisions = Vec::new();
                for p in &pending {
                    let Some(recorded) = record.call(&p.call_id) else {
                        diverged = Some(format!("the record has no call {}", p.call_id));
                        break;
                    };
                    let verdict = match recorded.status {
                        CallStatus::AwaitingApproval => {
                            diverged = Some(format!("the record still waits for a decision on {}", p.call_id));
                            break;
                        }
                        CallStatus::Denied if matches!(record.outcome, Some(Outcome::Aborted { .. })) => {
                            let message = match &record.outcome {
                                Some(Outcome::Aborted { message }) => message.clone(),
                                _ => None,
                            };
                            Verdict::Abort { message }
                        }
                        CallStatus::Denied => Verdict::Deny {
                            message: recorded
                                .result
                                .as_deref()
                                .and_then(|r| r.strip_prefix("denied by the user: "))
                                .map(str::to_owned),
                        },
                        _ if recorded.arguments != p.arguments => {
                            Verdict::ApproveEdited { arguments: recorded.arguments.clone() }
                        }
                        _ => Verdict::Approve,
                    };
                    steps.push(format!("decision on {} ({}): {}", p.call_id, p.tool, verdict_name(&verdict)));
                    decisions.push(Decision {
                        call_id: p.call_id.clone(),
                        tool: p.tool.clone(),
                        arguments_hash: p.arguments_hash.clone(),
                        verdict,
                    });
                }
                if diverged.is_none()
                    && let Err(e) = run.decide(&decisions)
                {
                    diverged = Some(e.to_string());
                }
            }
            Action::Busy(ids) => diverged = Some(format!("calls {} are still running", ids.join(", "))),
            Action::Done(outcome) => {
                steps.push(format!("done: {}", outcome_name(&outcome)));
                break;
            }
        }
    }
    let same_calls = run.calls.len() == record.calls.len()
        && run
            .calls
            .iter()
            .zip(&record.calls)
            .all(|(a, b)| a.id == b.id && a.status == b.status && a.result == b.result);
    let matches = diverged.is_none() && run.outcome == record.outcome && same_calls;
    Replayed { run, steps, diverged, matches }
}

fn clip(text: &str) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= 60 {
        one_line
    } else {
        format!("{}…", one_line.chars().take(60).collect::<String>())
    }
}

fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::Approve => "approve",
        Verdict::ApproveEdited { .. } => "approve with edited arguments",
        Verdict::Deny { .. } => "deny",
        Verdict::Abort { .. } => "abort",
    }
}

/// An outcome in a few words.
pub fn outcome_name(o: &Outcome) -> String {
    match o {
        Outcome::Answer { .. } => "answer".into(),
        Outcome::Stopped { reason, .. } => format!(
            "stopped ({})",
            serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
        ),
        Outcome::Cancelled => "cancelled".into(),
        Outcome::Aborted { .. } => "aborted".into(),
    }
}
