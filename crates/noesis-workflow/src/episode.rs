//! [`Episode`]: one `solve` episode as a state machine without I/O.
//!
//! The episode lives in the project's state as numbered versions (the
//! CognitiveState and the episode's own record, written together at each
//! node boundary). An [`Episode`] is built from the latest version
//! ([`Episode::at`]); [`Episode::next`] says what to do — run a module, run
//! CODER's agent run, run tests, take or restore a snapshot, write a version
//! ([`Step::Commit`]), end ([`Step::Done`]) — and the driver performs it and
//! feeds the result back ([`Episode::committed`], [`Episode::tested`], …).
//! It reads no clock and makes no ids: the transition times come in with the
//! commit ([`apply`]), the episode's id with its first version. Between any
//! two calls it can be serialised; a version of the state is enough to
//! continue (that is what `--resume` does), so a crash loses at most the
//! step that was running.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::judge::{self, strings};
use crate::snapshot::Changes;
use crate::state::{self, Node, StateError};

mod ops;
mod step;
#[cfg(test)]
mod tests;

pub use ops::{Op, apply};
pub use step::{CoderReport, CoderRun, Head, Memory, Outcome, Step, TestRun, TestSet, Verdict};

/// The version of the serialised form this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// The process exit code of an escalated episode (the retry budget spent).
pub const EXIT_ESCALATED: u8 = 4;

/// Where the episode is between two node boundaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// At a node boundary: the head decides.
    Boundary,
    /// Waiting for the baseline's results.
    Baseline,
    /// Waiting for PLANNER's recall.
    Recall,
    /// Waiting for a module's data.
    Module { node: String },
    /// Waiting for CODER's snapshot.
    Snapshot { run_id: String },
    /// Ready to start (or continue) CODER's run.
    Coder,
    /// Waiting for CODER's report.
    CoderRunning,
    /// Waiting for the public tests.
    Public,
    /// Waiting for CODER's own tests.
    Ai { public: Vec<Vec<TestRun>>, files: Vec<String> },
    /// Judging a verdict (a restore may come first).
    Judge { verdict: Verdict },
    /// Waiting for the diff a regression record keeps.
    Diff { verdict: Verdict, snapshot: String },
    /// Ready to restore.
    Restore { verdict: Verdict, snapshot: String },
    /// Waiting for the restore.
    Restoring { verdict: Verdict },
    /// Waiting for CONSOLIDATOR's memory.
    Remember,
    /// Ready to record frames.
    Frames { outcome: Outcome },
    /// Waiting for the frames.
    Recording { outcome: Outcome },
    /// Waiting for a version to be written; then `then`.
    Writing { then: Box<Phase> },
    /// Ended.
    Done { outcome: Outcome, head: Head },
}

/// Something fed to the episode that it did not ask for, or a head it
/// cannot go on from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EpisodeError {
    /// A result for a step that was not asked for.
    #[error("the episode was given {given} while {waiting}")]
    Unexpected {
        /// What was given.
        given: &'static str,
        /// What it waits for.
        waiting: String,
    },
    /// The stored episode was written by another version of this format.
    #[error("the episode was stored with schema version {found}; this build reads version {SCHEMA_VERSION}")]
    Version {
        /// The version found.
        found: u64,
    },
    /// The stored episode is not one.
    #[error("the stored episode is damaged: {0}")]
    Corrupt(String),
    /// The state says something the workflow cannot go on from.
    #[error(transparent)]
    State(#[from] StateError),
}

/// One episode between two node boundaries. See the module's docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// See [`SCHEMA_VERSION`].
    pub schema_version: u32,
    head: Head,
    phase: Phase,
    /// Steps decided already, told by the next calls of [`Episode::next`].
    queue: Vec<Step>,
}

fn unexpected(given: &'static str, phase: &Phase) -> EpisodeError {
    let waiting = match phase {
        Phase::Writing { .. } => "a version is being written".to_owned(),
        Phase::Done { .. } => "the episode has ended".to_owned(),
        other => format!("at {}", serde_json::to_value(other).map_or_else(|_| "?".into(), |v| v["phase"].to_string())),
    };
    EpisodeError::Unexpected { given, waiting }
}

impl Episode {
    /// The episode as the version `head` left it: at a node boundary.
    pub fn at(head: Head) -> Episode {
        Episode { schema_version: SCHEMA_VERSION, head, phase: Phase::Boundary, queue: Vec::new() }
    }

    /// The serialised form.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A stored episode; another schema version is refused.
    pub fn from_json(value: &Value) -> Result<Episode, EpisodeError> {
        match value.get("schema_version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(found) => return Err(EpisodeError::Version { found }),
            None => return Err(EpisodeError::Corrupt("no schema_version".into())),
        }
        serde_json::from_value(value.clone()).map_err(|e| EpisodeError::Corrupt(e.to_string()))
    }

    /// The version the episode stands on.
    pub fn head(&self) -> &Head {
        &self.head
    }

    fn note(&mut self, text: String) {
        self.queue.push(Step::Note { text });
    }

    fn commit(&mut self, command: &str, ops: Vec<Op>, then: Phase) -> Step {
        self.phase = Phase::Writing { then: Box::new(then) };
        Step::Commit { command: command.to_owned(), ops }
    }

    /// What to do now. A [`Step::Note`] or [`Step::Warn`] needs no answer;
    /// every other step waits for its result before the next call.
    // Not an iterator: every step but a note waits for its result first.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Step, EpisodeError> {
        if !self.queue.is_empty() {
            return Ok(self.queue.remove(0));
        }
        let step = match std::mem::replace(&mut self.phase, Phase::Boundary) {
            Phase::Boundary => match self.boundary() {
                Ok(step) => step,
                Err(e) => {
                    // The heading of a node that cannot run is not told.
                    self.queue.clear();
                    return Err(e);
                }
            },
            Phase::Coder => self.coder_run(),
            Phase::Judge { verdict } => self.judge(verdict),
            Phase::Restore { verdict, snapshot } => {
                self.phase = Phase::Restoring { verdict };
                Step::Restore { snapshot }
            }
            Phase::Frames { outcome } => {
                self.phase = Phase::Recording { outcome };
                Step::RecordFrames { outcome }
            }
            Phase::Done { outcome, head } => {
                self.phase = Phase::Done { outcome, head: head.clone() };
                Step::Done { outcome, head }
            }
            waiting => {
                let e = unexpected("a call to next()", &waiting);
                self.phase = waiting;
                return Err(e);
            }
        };
        if !self.queue.is_empty() {
            // Notes made on the way are told before the step.
            self.queue.push(step);
            return Ok(self.queue.remove(0));
        }
        Ok(step)
    }

    /// At a node boundary: the head's node decides.
    fn boundary(&mut self) -> Result<Step, EpisodeError> {
        let node = state::current(&self.head.state)?;
        let (s, e) = (&self.head.state, &self.head.episode);
        // The heading only where the node has work to do: not before the
        // baseline (it has its own), nor for an episode that only ends.
        let ends = match node {
            Node::Planner => e["baseline"].is_null(),
            Node::Verifier => e["escalated"] == json!(true),
            Node::Consolidator => e["archived"] == json!(true),
            _ => false,
        };
        if !ends {
            let text = format!("==> {node} (retry {} of {})", s["retry_count"], s["max_retries"]);
            self.note(text);
        }
        let (s, e) = (&self.head.state, &self.head.episode);
        Ok(match node {
            Node::Planner if e["baseline"].is_null() => {
                self.note("==> VERIFIER (baseline, before any change)".into());
                self.phase = Phase::Baseline;
                self.run_tests(TestSet::Baseline, strings(&self.head.episode["tests"]))
            }
            Node::Planner => {
                self.phase = Phase::Recall;
                Step::Recall { text: s["user_query"].as_str().unwrap_or_default().to_owned(), episodes: 3, lessons: 5 }
            }
            Node::Reasoner => {
                let input = json!({
                    "task": s["user_query"],
                    "problem_reflection": s["problem_reflection"],
                    "selected_solution": s["selected_solution"],
                    "tests": s["test_results"]["public_tests"],
                    "critiques": s["critiques"],
                });
                self.module(Node::Reasoner, input)
            }
            Node::Coder if e["coder_run"].is_null() => {
                // The snapshot and the run's id are on record before
                // anything changes: a crash from here on resumes the same
                // run against the same snapshot.
                let attempt = e["attempt"].as_u64().unwrap_or(0);
                let run_id = format!("{}-coder-{attempt}", s["episode_id"].as_str().unwrap_or("episode"));
                let previous = e["last_manifest"].as_str().map(str::to_owned);
                self.phase = Phase::Snapshot { run_id };
                Step::Snapshot { previous, attempt }
            }
            Node::Coder => self.coder_run(),
            Node::Verifier if e["escalated"] == json!(true) => {
                self.phase = Phase::Done { outcome: Outcome::Escalated, head: self.head.clone() };
                Step::Done { outcome: Outcome::Escalated, head: self.head.clone() }
            }
            Node::Verifier => match e.get("regression").filter(|r| !r.is_null()) {
                // A regression found before a crash is on record: the tree
                // may be restored already, so the tests would no longer show it.
                Some(recorded) => {
                    let verdict: Verdict = serde_json::from_value(recorded.clone())
                        .map_err(|err| EpisodeError::Corrupt(format!("the recorded regression: {err}")))?;
                    self.judge(verdict)
                }
                None => {
                    self.phase = Phase::Public;
                    self.run_tests(TestSet::Public, strings(&self.head.episode["tests"]))
                }
            },
            Node::Reflector => {
                let mut input = json!({
                    "task": s["user_query"],
                    "plan": s["current_plan"],
                    "changes": s["file_context"],
                    "reverted": e["reverted"].as_bool().unwrap_or(false),
                    "failing": e["failing"],
                    "critiques": s["critiques"],
                });
                if let Some(h) = e["hint"].as_str() {
                    input["hint"] = json!(h);
                }
                self.module(Node::Reflector, input)
            }
            Node::Consolidator if e["archived"] == json!(true) => {
                self.phase = Phase::Done { outcome: Outcome::Solved, head: self.head.clone() };
                Step::Done { outcome: Outcome::Solved, head: self.head.clone() }
            }
            Node::Consolidator => {
                self.phase = Phase::Remember;
                Step::Remember { entries: memories(&self.head.state) }
            }
        })
    }

    fn module(&mut self, node: Node, input: Value) -> Step {
        let module = format!("workflow-{}", node.as_str().to_lowercase());
        self.phase = Phase::Module { node: node.as_str().to_owned() };
        Step::RunModule { module, input }
    }

    fn run_tests(&self, set: TestSet, commands: Vec<String>) -> Step {
        let junit = match set {
            TestSet::Ai => None,
            _ => self.head.episode["junit"].as_str().map(str::to_owned),
        };
        Step::RunTests {
            set,
            commands,
            junit,
            tests: strings(&self.head.episode["tests"]),
            anchors: strings(&self.head.state["test_results"]["anchor_tests"]),
        }
    }

    fn coder_run(&mut self) -> Step {
        let (s, e) = (&self.head.state, &self.head.episode);
        let tests = strings(&e["tests"]);
        let run = CoderRun {
            run_id: e["coder_run"].as_str().unwrap_or_default().to_owned(),
            task: judge::coder_task(s, &tests),
            anchors: strings(&s["test_results"]["anchor_tests"]),
            ai_tests: ai_files(s),
            snapshot: e["snapshot"].as_str().unwrap_or_default().to_owned(),
            tests,
        };
        self.phase = Phase::CoderRunning;
        Step::RunAgent(run)
    }

    /// The version the last [`Step::Commit`] wrote.
    pub fn committed(&mut self, head: Head) -> Result<(), EpisodeError> {
        let Phase::Writing { then } = std::mem::replace(&mut self.phase, Phase::Boundary) else {
            return self.refuse("a written version");
        };
        self.head = head;
        self.phase = match *then {
            // Escalated at VERIFIER: the episode stops for a person once its
            // frames are recorded, reported from this version.
            Phase::Boundary
                if self.head.episode["escalated"] == json!(true) && self.head.node() == Node::Verifier.as_str() =>
            {
                Phase::Frames { outcome: Outcome::Escalated }
            }
            // A report keeps the version it was decided at.
            other => other,
        };
        Ok(())
    }

    fn refuse(&mut self, given: &'static str) -> Result<(), EpisodeError> {
        Err(unexpected(given, &self.phase))
    }

    /// PLANNER's recall: earlier episodes' records and lessons' texts.
    pub fn recalled(&mut self, episodes: &[Value], lessons: &[String]) -> Result<(), EpisodeError> {
        if self.phase != Phase::Recall {
            return self.refuse("recalled memory");
        }
        let (s, e) = (&self.head.state, &self.head.episode);
        let mut input = json!({
            "task": s["user_query"],
            "tests": s["test_results"]["public_tests"],
            "anchors": s["test_results"]["anchor_tests"],
        });
        if let Some(h) = e["hint"].as_str() {
            input["hint"] = json!(h);
        }
        // What earlier episodes of this project did and learnt, by the
        // words of this task.
        input["episodes"] = json!(
            episodes
                .iter()
                .map(|r| json!({"task": r["task"], "solution": r["selected_solution"], "outcome": r["outcome"]}))
                .collect::<Vec<_>>()
        );
        input["lessons"] = json!(lessons);
        if !episodes.is_empty() || !lessons.is_empty() {
            self.note(format!("    recalled {} episode(s), {} lesson(s)", episodes.len(), lessons.len()));
        }
        // The Recall step was taken: the module follows at once.
        let step = self.module(Node::Planner, input);
        self.queue.push(step);
        self.phase = Phase::Module { node: Node::Planner.as_str().to_owned() };
        Ok(())
    }

    /// A node module's `data` (a module that failed ends the drive: the
    /// driver reports it and the episode resumes from the last version).
    pub fn module_done(&mut self, data: &Value) -> Result<(), EpisodeError> {
        let Phase::Module { node } = &self.phase else { return self.refuse("a module's data") };
        let step = match Node::parse(node) {
            Some(Node::Planner) => {
                self.note(format!("    selected: {}", data["selected_solution"].as_str().unwrap_or_default()));
                let set = |key: &str| Op::Set { key: key.into(), value: data[key].clone() };
                let ops = vec![
                    set("problem_reflection"),
                    set("possible_solutions"),
                    set("selected_solution"),
                    Op::Transition { to: "REASONER".into() },
                ];
                self.commit("PLANNER", ops, Phase::Boundary)
            }
            Some(Node::Reasoner) => {
                self.note(format!("    plan: {} step(s)", data["plan"].as_array().map_or(0, Vec::len)));
                let mut ops = vec![Op::Set { key: "current_plan".into(), value: data["plan"].clone() }];
                for t in strings(&data["thoughts"]) {
                    ops.push(Op::Append {
                        key: "thought_trace".into(),
                        value: json!({"type": "thought", "node": "REASONER", "content": t}),
                    });
                }
                ops.push(Op::Transition { to: "CODER".into() });
                self.commit("REASONER", ops, Phase::Boundary)
            }
            _ => {
                let route = data["route"].as_str().unwrap_or("CODER").to_owned();
                self.note(format!("    {} → {route}", data["critique"].as_str().unwrap_or_default()));
                let attempt = self.head.episode["attempt"].as_u64().unwrap_or(0);
                let ops = vec![
                    Op::Append {
                        key: "critiques".into(),
                        value: json!({"attempt": attempt, "critique": data["critique"], "lesson": data["lesson"],
                                      "route": route}),
                    },
                    Op::Transition { to: route },
                ];
                self.commit("REFLECTOR", ops, Phase::Boundary)
            }
        };
        self.queue.push(step);
        Ok(())
    }

    /// The snapshot before CODER: its manifest's path and how many files.
    pub fn snapshotted(&mut self, manifest: &str, files: usize) -> Result<(), EpisodeError> {
        let Phase::Snapshot { run_id } = &self.phase else { return self.refuse("a snapshot") };
        let run_id = run_id.clone();
        self.note(format!("    snapshot: {files} files"));
        let record = |key: &str, value: Value| Op::Record { key: key.into(), value };
        let ops = vec![
            record("snapshot", json!(manifest)),
            record("last_manifest", json!(manifest)),
            record("coder_run", json!(run_id)),
        ];
        let step = self.commit("CODER (snapshot)", ops, Phase::Coder);
        self.queue.push(step);
        Ok(())
    }

    /// What CODER's run did.
    pub fn coder_done(&mut self, report: &CoderReport) -> Result<(), EpisodeError> {
        if self.phase != Phase::CoderRunning {
            return self.refuse("CODER's report");
        }
        let changes = &report.changes;
        self.note(format!("    {}; {} path(s) changed", report.outcome, changes.count()));
        if !report.refused.is_empty() {
            self.note(format!("    refused: CODER may not change {} (they judge it)", report.refused.join(", ")));
        }
        let mut files = Map::new();
        for (paths, role) in
            [(&changes.modified, "modified"), (&changes.created, "created"), (&changes.deleted, "deleted")]
        {
            for p in paths {
                files.insert(p.clone(), json!(role));
            }
        }
        // AI tests: test files CODER wrote, this attempt or an earlier one
        // whose change was kept.
        let mut ai_tests = report.kept_ai_tests.clone();
        for f in changes.created.iter().filter(|p| judge::is_test_file(p)) {
            if !ai_tests.contains(f) {
                ai_tests.push(f.clone());
            }
        }
        let ai_tests: Vec<Value> = ai_tests.iter().map(|f| json!({"file": f, "status": "not run"})).collect();
        let run_id = self.head.episode["coder_run"].as_str().unwrap_or_default().to_owned();
        let mut ops = vec![
            Op::Set { key: "file_context".into(), value: Value::Object(files) },
            Op::Set { key: "test_results.ai_tests".into(), value: json!(ai_tests) },
            Op::Append {
                key: "thought_trace".into(),
                value: json!({"type": "coder", "run": run_id, "outcome": report.outcome, "changed": changes.count()}),
            },
        ];
        if !report.refused.is_empty() {
            ops.push(Op::Append {
                key: "error_log".into(),
                value: json!({"type": "protected_write", "run": run_id, "paths": report.refused}),
            });
        }
        ops.push(Op::Transition { to: "VERIFIER".into() });
        let step = self.commit("CODER", ops, Phase::Boundary);
        self.queue.push(step);
        Ok(())
    }

    /// The results of a [`Step::RunTests`], one list per command.
    pub fn tested(&mut self, results: Vec<Vec<TestRun>>) -> Result<(), EpisodeError> {
        match std::mem::replace(&mut self.phase, Phase::Boundary) {
            Phase::Baseline => {
                let results: Vec<TestRun> = results.into_iter().flatten().collect();
                let passing: Vec<String> = results.iter().filter(|r| r.passed()).map(|r| r.name.clone()).collect();
                self.note(format!("    {} of {} test(s) pass; they are the anchors", passing.len(), results.len()));
                let public: Vec<Value> = results.iter().map(TestRun::json).collect();
                let baseline: Map<String, Value> =
                    results.iter().map(|r| (r.command.clone(), json!(r.passed()))).collect();
                let ops = vec![
                    Op::Set { key: "test_results.public_tests".into(), value: json!(public) },
                    Op::Set { key: "test_results.anchor_tests".into(), value: json!(passing) },
                    Op::Record { key: "baseline".into(), value: Value::Object(baseline) },
                ];
                let step = self.commit("VERIFIER (baseline)", ops, Phase::Boundary);
                self.queue.push(step);
            }
            Phase::Public => {
                // CODER's own tests run with the project's pytest, when it has one.
                let tests = strings(&self.head.episode["tests"]);
                let files = ai_files(&self.head.state);
                match tests.iter().find(|t| judge::is_plain_pytest(t)).map(|t| judge::pytest_program(t)) {
                    Some(runner) if !files.is_empty() => {
                        let commands = files.iter().map(|f| format!("{runner} -q '{}'", f.replace('\'', ""))).collect();
                        let step = self.run_tests(TestSet::Ai, commands);
                        self.phase = Phase::Ai { public: results, files };
                        self.queue.push(step);
                    }
                    Some(_) => self.verdict(results, Vec::new(), Vec::new()),
                    None => {
                        let ai = files
                            .iter()
                            .map(|f| json!({"file": f, "status": "not run", "why": "no pytest among the --test commands"}))
                            .collect();
                        self.verdict(results, Vec::new(), ai);
                    }
                }
            }
            Phase::Ai { public, files } => {
                let ai: Vec<(String, TestRun)> = files
                    .into_iter()
                    .zip(results)
                    .flat_map(|(f, runs)| runs.into_iter().map(move |r| (f.clone(), r)))
                    .collect();
                let ai_json = ai
                    .iter()
                    .map(|(f, r)| {
                        let mut v = r.json();
                        v["file"] = json!(f);
                        v
                    })
                    .collect();
                self.verdict(public, ai.into_iter().map(|(_, r)| r).collect(), ai_json);
            }
            other => {
                self.phase = other;
                return self.refuse("test results");
            }
        }
        Ok(())
    }

    /// Judges the results against the anchors; the phase is [`Phase::Judge`].
    fn verdict(&mut self, public: Vec<Vec<TestRun>>, ai: Vec<TestRun>, ai_json: Vec<Value>) {
        let tests = strings(&self.head.episode["tests"]);
        let mut results: Vec<TestRun> = public.into_iter().flatten().collect();
        results.extend(ai);
        let anchors = strings(&self.head.state["test_results"]["anchor_tests"]);
        let failing: Vec<&TestRun> = results.iter().filter(|r| r.failed()).collect();
        let passing: Vec<String> = results.iter().filter(|r| r.passed()).map(|r| r.name.clone()).collect();
        // Anchors are immutable: one that fails, is skipped or is gone (a
        // deleted test) is broken.
        let broken: Vec<String> = anchors.iter().filter(|a| !passing.contains(a)).cloned().collect();
        self.note(format!(
            "    {} of {} test(s) pass; {} anchor(s){}",
            results.len() - failing.len(),
            results.len(),
            anchors.len(),
            if broken.is_empty() { String::new() } else { format!(", {} broken", broken.len()) }
        ));
        let verdict = Verdict {
            public: results.iter().filter(|r| tests.contains(&r.command)).map(TestRun::json).collect(),
            failed: failing
                .iter()
                .map(|r| json!({"test": r.name, "command": r.command, "exit_code": r.exit, "message": r.message, "tail": r.tail}))
                .collect(),
            passing,
            broken,
            ai: ai_json,
            reverting: Value::Null,
        };
        self.phase = Phase::Judge { verdict };
    }

    /// A verdict: restore first when an anchor broke, then the version.
    fn judge(&mut self, verdict: Verdict) -> Step {
        let e = &self.head.episode;
        match e["snapshot"].as_str().filter(|_| !verdict.broken.is_empty()) {
            Some(snapshot) if e["regression"].is_null() => {
                // The verdict and what the restore will undo, before it does.
                let snapshot = snapshot.to_owned();
                self.phase = Phase::Diff { verdict, snapshot: snapshot.clone() };
                Step::Diff { snapshot }
            }
            Some(snapshot) => {
                let snapshot = snapshot.to_owned();
                self.phase = Phase::Restoring { verdict };
                Step::Restore { snapshot }
            }
            None => self.verifier_commit(verdict, Value::Null),
        }
    }

    /// What the restore will undo (the tree against the snapshot).
    pub fn diffed(&mut self, reverting: &Changes) -> Result<(), EpisodeError> {
        let Phase::Diff { verdict, snapshot } = std::mem::replace(&mut self.phase, Phase::Boundary) else {
            return self.refuse("a diff");
        };
        let record = Verdict { reverting: serde_json::to_value(reverting).unwrap_or(Value::Null), ..verdict.clone() };
        let ops =
            vec![Op::Record { key: "regression".into(), value: serde_json::to_value(&record).unwrap_or(Value::Null) }];
        let step = self.commit("VERIFIER (regression)", ops, Phase::Restore { verdict, snapshot });
        self.queue.push(step);
        Ok(())
    }

    /// What the restore undid (empty when a restore before a crash did it).
    pub fn restored(&mut self, undone: &Changes) -> Result<(), EpisodeError> {
        let Phase::Restoring { verdict } = std::mem::replace(&mut self.phase, Phase::Boundary) else {
            return self.refuse("a restore");
        };
        self.note(format!("    anchor regression: {} path(s) restored", undone.count()));
        // Restored already before a crash: what was undone is on record.
        let reverted = if undone.is_empty() {
            verdict.reverting.clone()
        } else {
            serde_json::to_value(undone).unwrap_or(Value::Null)
        };
        let step = self.verifier_commit(verdict, reverted);
        self.queue.push(step);
        Ok(())
    }

    /// VERIFIER's version: the results, the anchors grown, and on to
    /// CONSOLIDATOR, or REFLECTOR (or escalation) with what failed.
    fn verifier_commit(&mut self, verdict: Verdict, reverted: Value) -> Step {
        let Verdict { public, failed, passing, broken, ai, .. } = verdict;
        let solved = failed.is_empty() && broken.is_empty();
        let set = |key: &str, value: Value| Op::Set { key: key.into(), value };
        let record = |key: &str, value: Value| Op::Record { key: key.into(), value };
        let mut ops = vec![
            set("test_results.public_tests", json!(public)),
            // A reverted change took its test files with it.
            set("test_results.ai_tests", if broken.is_empty() { json!(ai) } else { json!([]) }),
        ];
        if broken.is_empty() {
            // A test that passes after a change is an anchor from now on.
            ops.push(Op::AddAnchors { passing });
        }
        if solved {
            ops.push(Op::Transition { to: "CONSOLIDATOR".into() });
        } else {
            let entry = if broken.is_empty() {
                json!({"type": "tests_failed", "tests": failed})
            } else {
                json!({"type": "anchor_regression", "reason": "anchor regression", "anchors": broken,
                       "reverted": reverted, "tests": failed})
            };
            ops.extend([
                Op::Append { key: "error_log".into(), value: entry },
                record("failing", json!(failed)),
                record("reverted", json!(!broken.is_empty())),
                record("regression", Value::Null),
                Op::NextAttempt,
                record("coder_run", Value::Null),
                record("snapshot", Value::Null),
                Op::ReflectOrEscalate,
            ]);
        }
        self.commit("VERIFIER", ops, Phase::Boundary)
    }

    /// CONSOLIDATOR's memory is kept (`entries` of them).
    pub fn remembered(&mut self, entries: usize) -> Result<(), EpisodeError> {
        if self.phase != Phase::Remember {
            return self.refuse("kept memory");
        }
        self.note(format!("==> CONSOLIDATOR: episode and {} lesson(s) kept", entries.saturating_sub(1)));
        let ops = vec![Op::Record { key: "archived".into(), value: json!(true) }];
        let step = self.commit("CONSOLIDATOR (archived)", ops, Phase::Frames { outcome: Outcome::Solved });
        self.queue.push(step);
        Ok(())
    }

    /// The frames were recorded, or why not (a warning: frames explain the
    /// episode, they are not its result).
    pub fn frames_recorded(&mut self, result: Result<(), String>) -> Result<(), EpisodeError> {
        let Phase::Recording { outcome } = self.phase.clone() else { return self.refuse("recorded frames") };
        let then = match outcome {
            Outcome::Solved => Phase::Boundary,
            // Reported from the version before the frames' own.
            Outcome::Escalated => Phase::Done { outcome, head: self.head.clone() },
        };
        match result {
            Ok(()) => {
                let ops = vec![Op::Record { key: "frames_upto".into(), value: json!(self.head.version) }];
                let step = self.commit("frames", ops, then);
                self.queue.push(step);
            }
            Err(e) => {
                self.queue.push(Step::Warn { text: format!("warning: the episode was not recorded as frames: {e}") });
                self.phase = then;
            }
        }
        Ok(())
    }
}

/// CODER's own test files on record.
fn ai_files(state: &Value) -> Vec<String> {
    state["test_results"]["ai_tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["file"].as_str().map(str::to_owned))
        .collect()
}

/// CONSOLIDATOR's memory: the episode, and the lessons of the critiques
/// that led to this success.
pub fn memories(s: &Value) -> Vec<Memory> {
    let task = s["user_query"].as_str().unwrap_or_default();
    let critiques: Vec<&Value> = s["critiques"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let files: Vec<String> = s["file_context"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    let mut text = format!(
        "{task}\n{}\n{}\n",
        s["problem_reflection"]["goal"].as_str().unwrap_or_default(),
        s["selected_solution"].as_str().unwrap_or_default()
    );
    for c in &critiques {
        text.push_str(&format!("{}\n", c["critique"].as_str().unwrap_or_default()));
    }
    text.push_str(&files.join(" "));
    let record = json!({
        "task": task, "outcome": "solved", "problem_reflection": s["problem_reflection"],
        "selected_solution": s["selected_solution"], "plan": s["current_plan"], "critiques": s["critiques"],
        "tests": s["test_results"], "files": s["file_context"], "retries": s["retry_count"],
    });
    let mut entries = vec![Memory { kind: "episode".into(), text, record }];
    for c in &critiques {
        if let Some(lesson) = c["lesson"].as_str().filter(|l| !l.trim().is_empty()) {
            entries.push(Memory {
                kind: "lesson".into(),
                text: lesson.to_owned(),
                record: json!({"lesson": lesson, "critique": c["critique"], "task": task}),
            });
        }
    }
    entries
}
