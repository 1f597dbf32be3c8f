//! What the episode asks of its driver ([`Step`]) and what it is fed.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Op;
use crate::snapshot::Changes;

/// One version of the project's state, as the episode sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    /// The version's number.
    pub version: i64,
    /// The episode it belongs to.
    pub episode_id: String,
    /// `active`, `escalated` or `archived`.
    pub status: String,
    /// The CognitiveState.
    pub state: Value,
    /// `solve`'s own record of the episode (tests, workspace, attempt,
    /// snapshot, CODER's run, …).
    pub episode: Value,
}

impl Head {
    /// The node the state is at (`current_node` as stored).
    pub fn node(&self) -> &str {
        self.state["current_node"].as_str().unwrap_or_default()
    }
}

/// Which tests to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestSet {
    /// The `--test` commands before anything changes: what passes is an anchor.
    Baseline,
    /// The `--test` commands after CODER.
    Public,
    /// CODER's own test files, one command each, with the project's pytest.
    Ai,
}

/// One tracked test: a case when the runner reported cases (JUnit XML),
/// else the whole command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRun {
    /// The case's id (`classname::name`), or the command.
    pub name: String,
    /// The command that ran it.
    pub command: String,
    /// `passed`, `failed`, `error` or `skipped`.
    pub status: String,
    /// The command's exit code (none when killed).
    pub exit: Option<i32>,
    /// The case's failure message, redacted.
    pub message: Option<String>,
    /// The end of the command's output, redacted.
    pub tail: String,
    /// How long the command ran.
    pub ms: u64,
}

impl TestRun {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.status == "passed"
    }

    /// Whether it failed (a skip neither passes nor fails).
    pub fn failed(&self) -> bool {
        matches!(self.status.as_str(), "failed" | "error")
    }

    /// The form kept in the state (the output by its hash).
    pub fn json(&self) -> Value {
        json!({"name": self.name, "command": self.command, "status": self.status, "exit_code": self.exit,
               "ms": self.ms, "output_blake3": blake3::hash(self.tail.as_bytes()).to_hex().to_string()})
    }
}

/// CODER's run to perform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderRun {
    /// The agent run's id (continued when it exists).
    pub run_id: String,
    /// What CODER is asked to do.
    pub task: String,
    /// The `--test` commands (CODER may run them).
    pub tests: Vec<String>,
    /// The anchors (their files are protected).
    pub anchors: Vec<String>,
    /// CODER's own earlier test files (not protected).
    pub ai_tests: Vec<String>,
    /// The manifest of the snapshot taken before it.
    pub snapshot: String,
}

/// What CODER's run did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CoderReport {
    /// How the run ended, in a word (`answer`, `stopped: …`, `unfinished`).
    pub outcome: String,
    /// The tree against the snapshot.
    pub changes: Changes,
    /// Paths CODER's calls were refused for as protected.
    pub refused: Vec<String>,
    /// Of [`CoderRun::ai_tests`], the files that still exist.
    pub kept_ai_tests: Vec<String>,
}

/// A memory entry for CONSOLIDATOR to keep (the driver adds the project,
/// the episode and the time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// `episode` or `lesson`.
    pub kind: String,
    /// What recall searches.
    pub text: String,
    /// The record.
    pub record: Value,
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The tests pass and the episode is in memory.
    Solved,
    /// The retry budget is spent: a person decides (`--resume --hint`).
    Escalated,
}

impl Outcome {
    /// `solved` or `escalated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Solved => "solved",
            Outcome::Escalated => "escalated",
        }
    }
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Tell the person watching (progress; nothing to feed back).
    Note {
        /// The line.
        text: String,
    },
    /// Warn (shown even when quiet; nothing to feed back).
    Warn {
        /// The line.
        text: String,
    },
    /// Search the project's memory by `text`: earlier episodes and lessons
    /// ([`Episode::recalled`]).
    Recall {
        /// The task's words.
        text: String,
        /// Most episodes.
        episodes: u32,
        /// Most lessons.
        lessons: u32,
    },
    /// Run a module on an input; its `data` goes to [`Episode::module_done`].
    RunModule {
        /// The module (`workflow-planner`, `workflow-reasoner`, `workflow-reflector`).
        module: String,
        /// Its input.
        input: Value,
    },
    /// Snapshot the workspace (incrementally over `previous`, a manifest
    /// path) and keep the manifest for `attempt` ([`Episode::snapshotted`]).
    Snapshot {
        /// The last manifest, to skip unchanged files.
        previous: Option<String>,
        /// The attempt it is for.
        attempt: u64,
    },
    /// Run CODER ([`Episode::coder_done`]).
    RunAgent(CoderRun),
    /// Run tests, confined, with the judging files read-only; one list of
    /// results per command ([`Episode::tested`]).
    RunTests {
        /// Which.
        set: TestSet,
        /// The commands.
        commands: Vec<String>,
        /// A JUnit report the commands write, relative to the workspace.
        junit: Option<String>,
        /// The `--test` commands (what they name is read-only).
        tests: Vec<String>,
        /// The anchors (their files are read-only).
        anchors: Vec<String>,
    },
    /// Compare the workspace with a snapshot ([`Episode::diffed`]).
    Diff {
        /// The manifest.
        snapshot: String,
    },
    /// Put the workspace back as the snapshot has it ([`Episode::restored`]).
    Restore {
        /// The manifest.
        snapshot: String,
    },
    /// Keep these in the project's memory for this episode, replacing what
    /// it kept before ([`Episode::remembered`]).
    Remember {
        /// The entries.
        entries: Vec<Memory>,
    },
    /// Record the episode as causal frames ([`Episode::frames_recorded`]).
    RecordFrames {
        /// How it ended.
        outcome: Outcome,
    },
    /// Write the next version: `ops` applied to the newest head
    /// ([`Episode::committed`] with the version written).
    Commit {
        /// What made it (`PLANNER`, `VERIFIER (regression)`, …).
        command: String,
        /// The changes.
        ops: Vec<Op>,
    },
    /// The episode ends here.
    Done {
        /// How.
        outcome: Outcome,
        /// The version it is reported from.
        head: Head,
    },
}

/// What VERIFIER found, kept in the episode before a restore so a crash
/// after it cannot lose the regression.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// The `--test` commands' results.
    pub public: Vec<Value>,
    /// The failing tests, with their output's end.
    pub failed: Vec<Value>,
    /// Every passing test's name.
    pub passing: Vec<String>,
    /// Anchors that no longer pass.
    pub broken: Vec<String>,
    /// CODER's own tests.
    pub ai: Vec<Value>,
    /// What the restore undoes (taken before it), when there is one.
    #[serde(default)]
    pub reverting: Value,
}
