//! A `solve` episode driven by hand: the episode is a value that says what
//! to do next (run a module, snapshot, run CODER, run the tests, write a
//! version …) and is told what happened. Here every answer is canned, so
//! the whole PLANNER → REASONER → CODER → VERIFIER → CONSOLIDATOR path runs
//! in microseconds with no model, no process and no store; `noesis solve`
//! and `noesis serve --episodes` feed the same machine through
//! `noesis::workflow::Driver`, which does the real work.
//!
//! `cargo run -p noesis --example episode`

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use noesis::workflow::{Changes, CoderReport, Episode, Head, Op, Outcome, Step, TestRun, apply, initial};
use serde_json::json;

fn test(name: &str, passed: bool) -> TestRun {
    TestRun {
        name: name.into(),
        command: "pytest -q".into(),
        status: if passed { "passed" } else { "failed" }.into(),
        exit: Some(i32::from(!passed)),
        message: None,
        tail: String::new(),
        ms: 3,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The first version, as `noesis solve` writes it: the task, the test
    // command, and an empty record of the episode.
    let mut state = initial("example-episode", "project-hash", "2026-11-27T00:00:00Z");
    let mut record = json!({});
    apply(
        &[
            Op::Set { key: "user_query".into(), value: json!("make add() add") },
            Op::NewRecord {
                record: json!({"task": "make add() add", "tests": ["pytest -q"], "workspace": "/project",
                               "attempt": 0, "junit": null, "coder_run": null, "snapshot": null, "baseline": null}),
            },
        ],
        &mut state,
        &mut record,
        "2026-11-27T00:00:01Z",
    )?;
    let mut versions =
        vec![Head { version: 1, episode_id: "example-episode".into(), status: "init".into(), state, episode: record }];
    let mut episode = Episode::at(versions[0].clone());

    // Before anything changes, the baseline: one test passes (an anchor
    // that must keep passing), one fails (the work to do).
    let mut baseline_done = false;
    loop {
        match episode.next()? {
            Step::Note { text } | Step::Warn { text } => println!("{text}"),
            // A version is data: the ops applied to the newest head. Here
            // the "store" is a Vec; in noesis it is the project's state.
            Step::Commit { command, ops } => {
                let last = versions.last().ok_or("no version")?;
                let (mut state, mut record) = (last.state.clone(), last.episode.clone());
                apply(&ops, &mut state, &mut record, "2026-11-27T00:00:02Z")?;
                let head = Head {
                    version: last.version + 1,
                    episode_id: last.episode_id.clone(),
                    status: command,
                    state,
                    episode: record,
                };
                versions.push(head.clone());
                episode.committed(head)?;
            }
            Step::RunTests { .. } if !baseline_done => {
                baseline_done = true;
                episode.tested(vec![vec![test("test_calc::test_sub", true), test("test_calc::test_add", false)]])?;
            }
            Step::RunTests { .. } => {
                episode.tested(vec![vec![test("test_calc::test_sub", true), test("test_calc::test_add", true)]])?
            }
            Step::Recall { .. } => episode.recalled(&[], &[])?,
            Step::RunModule { module, .. } if module == "workflow-planner" => episode.module_done(&json!({
                "problem_reflection": {"goal": "add(a, b) returns a + b"},
                "possible_solutions": ["return a + b"],
                "selected_solution": "return a + b"
            }))?,
            Step::RunModule { .. } => {
                episode.module_done(&json!({"plan": ["edit calc.py"], "thoughts": ["one line"]}))?
            }
            Step::Snapshot { attempt, .. } => episode.snapshotted(&format!("/snapshots/{attempt}.json"), 2)?,
            Step::RunAgent(coder) => {
                println!("    CODER's task: {}", coder.task.lines().next().unwrap_or_default());
                let changes = Changes { modified: vec!["calc.py".into()], ..Changes::default() };
                episode.coder_done(&CoderReport { outcome: "answer".into(), changes, ..CoderReport::default() })?;
            }
            Step::Remember { entries } => episode.remembered(entries.len())?,
            Step::RecordFrames { .. } => episode.frames_recorded(Ok(()))?,
            Step::Diff { .. } | Step::Restore { .. } => return Err("nothing regressed: no restore".into()),
            Step::Done { outcome, head } => {
                assert_eq!(outcome, Outcome::Solved);
                assert_eq!(
                    head.state["test_results"]["anchor_tests"],
                    json!(["test_calc::test_sub", "test_calc::test_add"])
                );
                println!(
                    "{} after {} versions; anchors now {}",
                    outcome.as_str(),
                    versions.len(),
                    head.state["test_results"]["anchor_tests"]
                );
                break;
            }
        }
    }
    // Between any two steps the episode serialises, so another process can
    // continue it.
    let again = Episode::from_json(&episode.to_json())?;
    assert_eq!(again.head(), episode.head());
    Ok(())
}
