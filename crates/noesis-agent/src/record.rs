//! One record per tool call, with a status that only moves forward:
//!
//! ```text
//! proposed ─┬─> awaiting_approval ─┬─> approved ─> running ─┬─> completed
//!           │                      └─> denied              ├─> failed
//!           ├─> approved (no approval needed)              └─> interrupted
//!           └─> failed (unknown tool, invalid arguments)
//! ```
//!
//! A call that is `completed`, `failed`, `denied` or `interrupted` has its
//! result, which is what the model sees and what resume reuses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The model asked for it.
    Proposed,
    /// Waiting for a person's decision.
    AwaitingApproval,
    /// May run.
    Approved,
    /// Refused by a person or the approval policy.
    Denied,
    /// Handed to the driver to execute.
    Running,
    /// It ran and returned a result.
    Completed,
    /// It could not run or it failed (the error is its result).
    Failed,
    /// It was running when the run stopped; it may have run fully, partly
    /// or not at all.
    Interrupted,
}

impl CallStatus {
    /// Whether the call has its final result.
    pub fn is_final(self) -> bool {
        matches!(self, CallStatus::Completed | CallStatus::Failed | CallStatus::Denied | CallStatus::Interrupted)
    }

    /// Whether `self → to` is a step the lifecycle allows.
    pub fn can_become(self, to: CallStatus) -> bool {
        use CallStatus::*;
        matches!(
            (self, to),
            (Proposed, AwaitingApproval | Approved | Failed)
                | (AwaitingApproval, Approved | Denied)
                | (Approved, Running)
                | (Running, Completed | Failed | Interrupted)
        )
    }

    /// The status's name as written in records.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Proposed => "proposed",
            CallStatus::AwaitingApproval => "awaiting_approval",
            CallStatus::Approved => "approved",
            CallStatus::Denied => "denied",
            CallStatus::Running => "running",
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Interrupted => "interrupted",
        }
    }
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call's id (the provider's, or one the run made unique).
    pub id: String,
    /// The model turn (0-based) that asked for it.
    pub turn: u32,
    /// The tool.
    pub tool: String,
    /// The arguments as the model sent them, or as a person edited them.
    pub arguments: Value,
    /// blake3 of the canonical arguments; approvals are bound to it.
    pub arguments_hash: String,
    /// Where it stands.
    pub status: CallStatus,
    /// What the model sees as the call's result, once final.
    pub result: Option<String>,
    /// Whether the result is an error (the tool failed, or was refused).
    #[serde(default)]
    pub is_error: bool,
    /// Times (driver's milliseconds) it started and finished running.
    pub started_ms: Option<u64>,
    /// See `started_ms`.
    pub finished_ms: Option<u64>,
    /// What the result rests on, once it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<crate::run::ToolEvidence>,
    /// The `execute_tool` span it ran in, when traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<noesis_trace::SpanIds>,
    /// What its own model calls spent (a sub-agent, a module run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<crate::run::ToolSpend>,
}

#[cfg(test)]
mod tests {
    use super::CallStatus::*;

    #[test]
    fn the_lifecycle_only_moves_forward() {
        let all = [Proposed, AwaitingApproval, Approved, Denied, Running, Completed, Failed, Interrupted];
        for from in all {
            for to in all {
                if from.is_final() {
                    assert!(!from.can_become(to), "{from:?} is final");
                }
            }
            assert!(!from.can_become(from), "{from:?} → itself");
            assert!(!from.can_become(Proposed));
        }
        assert!(Proposed.can_become(AwaitingApproval) && AwaitingApproval.can_become(Denied));
        assert!(!AwaitingApproval.can_become(Running), "approval comes first");
        assert!(Running.can_become(Interrupted) && !Approved.can_become(Completed));
        let json = serde_json::to_string(&AwaitingApproval).unwrap();
        assert_eq!(json, format!("\"{}\"", AwaitingApproval.as_str()));
    }
}
