//! Every transition and failure path of the episode, driven by hand: the
//! "store" is a list of heads and a commit is [`apply`] on the last one.

use super::*;
use crate::snapshot::Changes;

/// A fresh episode as `noesis solve` starts it.
fn start(tests: &[&str]) -> Head {
    let mut state = state::initial("ep1", "abcd1234", "T0");
    let mut episode = json!({});
    let ops = vec![
        Op::Set { key: "user_query".into(), value: json!("fix add") },
        Op::NewRecord {
            record: json!({"task": "fix add", "tests": tests, "workspace": "/w", "attempt": 0, "junit": null,
                           "coder_run": null, "snapshot": null, "baseline": null}),
        },
    ];
    apply(&ops, &mut state, &mut episode, "T1").unwrap();
    Head { version: 2, episode_id: "ep1".into(), status: "active".into(), state, episode }
}

/// A driver of the episode with no I/O: commits are applied to the head.
struct Sim {
    ep: Episode,
    heads: Vec<Head>,
    notes: Vec<String>,
    warnings: Vec<String>,
}

impl Sim {
    fn new(head: Head) -> Sim {
        Sim { ep: Episode::at(head.clone()), heads: vec![head], notes: Vec::new(), warnings: Vec::new() }
    }

    /// The next step that is not a note or a commit (those are done here).
    fn step(&mut self) -> Step {
        loop {
            match self.ep.next().unwrap() {
                Step::Note { text } => self.notes.push(text),
                Step::Warn { text } => self.warnings.push(text),
                Step::Commit { command, ops } => {
                    let last = self.heads.last().unwrap();
                    let (mut state, mut episode) = (last.state.clone(), last.episode.clone());
                    apply(&ops, &mut state, &mut episode, "T").unwrap();
                    let head = Head {
                        version: last.version + 1,
                        episode_id: last.episode_id.clone(),
                        status: command,
                        state,
                        episode,
                    };
                    self.heads.push(head.clone());
                    self.ep.committed(head).unwrap();
                }
                other => return other,
            }
        }
    }

    fn commands(&self) -> Vec<&str> {
        self.heads.iter().skip(1).map(|h| h.status.as_str()).collect()
    }

    fn last(&self) -> &Head {
        self.heads.last().unwrap()
    }
}

fn run(name: &str, status: &str) -> TestRun {
    TestRun {
        name: name.into(),
        command: "pytest -q".into(),
        status: status.into(),
        exit: Some(i32::from(status != "passed")),
        message: None,
        tail: String::new(),
        ms: 1,
    }
}

fn changes(modified: &[&str], created: &[&str]) -> Changes {
    Changes {
        modified: modified.iter().map(|s| (*s).to_owned()).collect(),
        created: created.iter().map(|s| (*s).to_owned()).collect(),
        ..Changes::default()
    }
}

/// Takes the episode from a fresh start to CODER's run.
fn to_coder(sim: &mut Sim, baseline: Vec<TestRun>) -> CoderRun {
    assert!(matches!(sim.step(), Step::RunTests { set: TestSet::Baseline, .. }));
    sim.ep.tested(vec![baseline]).unwrap();
    assert!(matches!(sim.step(), Step::Recall { .. }));
    sim.ep.recalled(&[], &[]).unwrap();
    let Step::RunModule { module, .. } = sim.step() else { panic!("PLANNER's module") };
    assert_eq!(module, "workflow-planner");
    sim.ep
        .module_done(&json!({"problem_reflection": {"goal": "add adds"}, "possible_solutions": ["+"],
                             "selected_solution": "use +"}))
        .unwrap();
    let Step::RunModule { module, input } = sim.step() else { panic!("REASONER's module") };
    assert_eq!(module, "workflow-reasoner");
    assert_eq!(input["selected_solution"], "use +");
    sim.ep.module_done(&json!({"plan": ["edit calc.py"], "thoughts": ["simple"]})).unwrap();
    let Step::Snapshot { previous, attempt } = sim.step() else { panic!("a snapshot") };
    let manifest = format!("/s/ep1-{attempt}.json");
    assert_eq!(previous, sim.last().episode["last_manifest"].as_str().map(str::to_owned));
    sim.ep.snapshotted(&manifest, 3).unwrap();
    let Step::RunAgent(run) = sim.step() else { panic!("CODER's run") };
    run
}

#[test]
fn a_failing_test_is_fixed_and_the_episode_is_consolidated() {
    let mut sim = Sim::new(start(&["pytest -q"]));
    let coder = to_coder(&mut sim, vec![run("t::a", "passed"), run("t::b", "failed")]);
    assert_eq!(coder.run_id, "ep1-coder-0");
    assert_eq!(coder.snapshot, "/s/ep1-0.json");
    assert_eq!(coder.anchors, ["t::a"]);
    assert!(coder.task.contains("Approach: use +") && coder.task.contains("1. edit calc.py"));
    sim.ep
        .coder_done(&CoderReport {
            outcome: "answer".into(),
            changes: changes(&["calc.py"], &["tests/test_new.py"]),
            ..CoderReport::default()
        })
        .unwrap();
    let Step::RunTests { set: TestSet::Public, commands, anchors, .. } = sim.step() else { panic!("VERIFIER") };
    assert_eq!((commands, anchors), (vec!["pytest -q".to_owned()], vec!["t::a".to_owned()]));
    sim.ep.tested(vec![vec![run("t::a", "passed"), run("t::b", "passed")]]).unwrap();
    let Step::RunTests { set: TestSet::Ai, commands, junit, .. } = sim.step() else { panic!("CODER's own tests") };
    assert_eq!(commands, ["pytest -q 'tests/test_new.py'"]);
    assert_eq!(junit, None);
    sim.ep.tested(vec![vec![run("new::c", "passed")]]).unwrap();
    let Step::Remember { entries } = sim.step() else { panic!("CONSOLIDATOR") };
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].kind, "episode");
    sim.ep.remembered(entries.len()).unwrap();
    assert_eq!(sim.step(), Step::RecordFrames { outcome: Outcome::Solved });
    sim.ep.frames_recorded(Ok(())).unwrap();
    let Step::Done { outcome, head } = sim.step() else { panic!("the end") };
    assert_eq!(outcome, Outcome::Solved);
    assert_eq!(head, *sim.last());
    assert_eq!(
        sim.commands(),
        [
            "VERIFIER (baseline)",
            "PLANNER",
            "REASONER",
            "CODER (snapshot)",
            "CODER",
            "VERIFIER",
            "CONSOLIDATOR (archived)",
            "frames"
        ]
    );
    let s = &head.state;
    assert_eq!(s["current_node"], "CONSOLIDATOR");
    assert_eq!(s["test_results"]["anchor_tests"], json!(["t::a", "t::b", "new::c"]));
    assert_eq!(s["test_results"]["ai_tests"][0]["file"], "tests/test_new.py");
    assert_eq!(s["file_context"], json!({"calc.py": "modified", "tests/test_new.py": "created"}));
    assert_eq!(head.episode["frames_upto"], head.version - 1, "the frames record the version before their own");
    assert_eq!(head.episode["archived"], true);
    assert!(sim.notes.contains(&"    1 of 2 test(s) pass; they are the anchors".to_owned()));
    assert!(sim.notes.contains(&"    3 of 3 test(s) pass; 1 anchor(s)".to_owned()));
    assert_eq!(sim.notes[0], "==> VERIFIER (baseline, before any change)", "no PLANNER heading before the baseline");
    // Done stays done.
    assert!(matches!(sim.ep.next().unwrap(), Step::Done { .. }));
}

#[test]
fn a_broken_anchor_is_recorded_then_restored_then_reflected_on() {
    let mut sim = Sim::new(start(&["pytest -q"]));
    to_coder(&mut sim, vec![run("t::a", "passed"), run("t::b", "failed")]);
    sim.ep.coder_done(&CoderReport { outcome: "answer".into(), ..CoderReport::default() }).unwrap();
    sim.step();
    sim.ep.tested(vec![vec![run("t::a", "failed"), run("t::b", "passed")]]).unwrap();
    assert_eq!(sim.step(), Step::Diff { snapshot: "/s/ep1-0.json".into() });
    sim.ep.diffed(&changes(&["calc.py"], &[])).unwrap();
    // The regression is on record before the restore.
    assert_eq!(sim.step(), Step::Restore { snapshot: "/s/ep1-0.json".into() });
    let recorded = &sim.last().episode["regression"];
    assert_eq!(recorded["broken"], json!(["t::a"]));
    assert_eq!(recorded["reverting"]["modified"], json!(["calc.py"]));
    sim.ep.restored(&changes(&["calc.py"], &[])).unwrap();
    let Step::RunModule { module, input } = sim.step() else { panic!("REFLECTOR") };
    assert_eq!(module, "workflow-reflector");
    assert_eq!(input["reverted"], true);
    let h = sim.last();
    assert_eq!(h.state["retry_count"], 1);
    assert_eq!(h.state["test_results"]["anchor_tests"], json!(["t::a"]), "no anchors from a reverted change");
    assert_eq!(h.state["test_results"]["ai_tests"], json!([]));
    let log = &h.state["error_log"][0];
    assert_eq!(log["type"], "anchor_regression");
    assert_eq!(log["reverted"]["modified"], json!(["calc.py"]));
    assert_eq!(h.episode["attempt"], 1);
    assert!(h.episode["regression"].is_null() && h.episode["coder_run"].is_null() && h.episode["snapshot"].is_null());
    sim.ep.module_done(&json!({"critique": "broke a", "lesson": "keep a", "route": "CODER"})).unwrap();
    let Step::Snapshot { previous, attempt } = sim.step() else { panic!("a new snapshot") };
    assert_eq!((previous.as_deref(), attempt), (Some("/s/ep1-0.json"), 1));
    assert!(sim.notes.contains(&"    broke a → CODER".to_owned()));
    assert!(sim.notes.contains(&"    anchor regression: 1 path(s) restored".to_owned()));
}

#[test]
fn a_crash_after_the_restore_resumes_from_the_recorded_regression() {
    let mut sim = Sim::new(start(&["pytest -q"]));
    to_coder(&mut sim, vec![run("t::a", "passed")]);
    sim.ep.coder_done(&CoderReport::default()).unwrap();
    sim.step();
    sim.ep.tested(vec![vec![run("t::a", "failed")]]).unwrap();
    sim.step();
    sim.ep.diffed(&changes(&["calc.py"], &[])).unwrap();
    assert!(matches!(sim.step(), Step::Restore { .. }));
    // Crash here: a new process starts from the last version. The tests
    // are not run again; the restore finds nothing left to undo.
    let mut again = Sim::new(sim.last().clone());
    assert!(matches!(again.step(), Step::Restore { .. }));
    again.ep.restored(&Changes::default()).unwrap();
    again.step();
    let log = &again.last().state["error_log"][0];
    assert_eq!(log["reverted"]["modified"], json!(["calc.py"]), "what was undone comes from the record");
}

#[test]
fn failing_tests_without_a_regression_go_to_reflector_and_escalate_when_the_budget_is_spent() {
    let mut head = start(&["pytest -q"]);
    head.state["max_retries"] = json!(1);
    let mut sim = Sim::new(head);
    to_coder(&mut sim, vec![run("t::b", "failed")]);
    sim.ep.coder_done(&CoderReport::default()).unwrap();
    sim.step();
    sim.ep.tested(vec![vec![run("t::b", "failed")]]).unwrap();
    let Step::RunModule { module, .. } = sim.step() else { panic!("REFLECTOR") };
    assert_eq!(module, "workflow-reflector");
    assert_eq!(sim.last().state["error_log"][0]["type"], "tests_failed");
    sim.ep.module_done(&json!({"critique": "try again", "route": "CODER"})).unwrap();
    assert!(matches!(sim.step(), Step::Snapshot { .. }));
    sim.ep.snapshotted("/s/ep1-1.json", 3).unwrap();
    assert!(matches!(sim.step(), Step::RunAgent(_)));
    sim.ep.coder_done(&CoderReport::default()).unwrap();
    sim.step();
    sim.ep.tested(vec![vec![run("t::b", "failed")]]).unwrap();
    // No retry left: escalated, frames recorded, reported from VERIFIER's version.
    assert_eq!(sim.step(), Step::RecordFrames { outcome: Outcome::Escalated });
    let verifier = sim.last().clone();
    assert_eq!(verifier.episode["escalated"], true);
    assert_eq!(verifier.state["current_node"], "VERIFIER");
    sim.ep.frames_recorded(Ok(())).unwrap();
    let Step::Done { outcome, head } = sim.step() else { panic!("the end") };
    assert_eq!((outcome, head), (Outcome::Escalated, verifier));
    assert_eq!(sim.last().episode["frames_upto"], sim.last().version - 1);
    let report = judge::escalation_report(&sim.last().state, &sim.last().episode);
    assert!(report.contains("critique (attempt 1): try again") && report.contains("failing: t::b"), "{report}");
}

#[test]
fn a_resumed_escalation_gets_one_more_attempt_and_the_hint() {
    let mut head = start(&["pytest -q"]);
    head.state["current_node"] = json!("VERIFIER");
    head.state["retry_count"] = json!(3);
    head.episode["escalated"] = json!(true);
    head.episode["baseline"] = json!({});
    // Not resumed: an escalated episode only ends, with no heading.
    let mut sim = Sim::new(head.clone());
    assert!(matches!(sim.step(), Step::Done { outcome: Outcome::Escalated, .. }));
    assert!(sim.notes.is_empty());
    let ops = vec![
        Op::Reopen,
        Op::Record { key: "hint".into(), value: json!("look at the sign") },
        Op::Append { key: "thought_trace".into(), value: json!({"type": "hint", "content": "look at the sign"}) },
    ];
    let (mut s, mut e) = (head.state.clone(), head.episode.clone());
    apply(&ops, &mut s, &mut e, "T").unwrap();
    assert_eq!((s["max_retries"].clone(), e["escalated"].clone()), (json!(4), json!(false)));
    let mut sim = Sim::new(Head { state: s, episode: e, ..head });
    let Step::RunTests { set: TestSet::Public, .. } = sim.step() else { panic!("VERIFIER again") };
    sim.ep.tested(vec![vec![run("t::b", "failed")]]).unwrap();
    sim.step();
    sim.ep.module_done(&json!({"critique": "c", "route": "PLANNER"})).unwrap();
    let Step::Recall { .. } = sim.step() else { panic!("PLANNER") };
    sim.ep.recalled(&[json!({"task": "old", "selected_solution": "s", "outcome": "solved"})], &["l".into()]).unwrap();
    let Step::RunModule { input, .. } = sim.step() else { panic!("PLANNER's module") };
    assert_eq!(input["hint"], "look at the sign");
    assert_eq!(input["episodes"], json!([{"task": "old", "solution": "s", "outcome": "solved"}]));
    assert_eq!(input["lessons"], json!(["l"]));
    assert!(sim.notes.contains(&"    recalled 1 episode(s), 1 lesson(s)".to_owned()));
}

#[test]
fn reopen_leaves_an_episode_that_did_not_escalate_alone() {
    let head = start(&["pytest"]);
    let (mut s, mut e) = (head.state.clone(), head.episode.clone());
    apply(&[Op::Reopen], &mut s, &mut e, "T").unwrap();
    assert_eq!((s, e), (head.state, head.episode));
}

#[test]
fn coder_resumes_its_recorded_run_without_a_new_snapshot() {
    let mut head = start(&["pytest -q"]);
    head.state["current_node"] = json!("CODER");
    head.episode["baseline"] = json!({});
    head.episode["coder_run"] = json!("ep1-coder-0");
    head.episode["snapshot"] = json!("/s/ep1-0.json");
    head.state["test_results"]["ai_tests"] = json!([{"file": "tests/test_mine.py"}]);
    let mut sim = Sim::new(head);
    let Step::RunAgent(run) = sim.step() else { panic!("CODER's run") };
    assert_eq!((run.run_id.as_str(), run.snapshot.as_str()), ("ep1-coder-0", "/s/ep1-0.json"));
    assert_eq!(run.ai_tests, ["tests/test_mine.py"]);
    sim.ep
        .coder_done(&CoderReport {
            outcome: "stopped: max_turns".into(),
            refused: vec!["tests/test_calc.py".into()],
            kept_ai_tests: vec![],
            ..CoderReport::default()
        })
        .unwrap();
    sim.step();
    let h = sim.last();
    assert_eq!(
        h.state["error_log"][0],
        json!({"type": "protected_write", "run": "ep1-coder-0", "paths": ["tests/test_calc.py"]})
    );
    assert_eq!(h.state["test_results"]["ai_tests"], json!([]), "a test file that is gone is no longer CODER's test");
    assert!(sim.notes.contains(&"    refused: CODER may not change tests/test_calc.py (they judge it)".to_owned()));
}

#[test]
fn without_pytest_coders_tests_are_not_run_and_say_why() {
    let mut head = start(&["cargo test"]);
    head.state["current_node"] = json!("VERIFIER");
    head.episode["baseline"] = json!({});
    head.state["test_results"]["ai_tests"] = json!([{"file": "tests/new.rs"}]);
    let mut sim = Sim::new(head);
    sim.step();
    sim.ep.tested(vec![vec![run("cargo test", "passed")]]).unwrap();
    assert!(matches!(sim.step(), Step::Remember { .. }));
    let ai = &sim.last().state["test_results"]["ai_tests"][0];
    assert_eq!(ai["why"], "no pytest among the --test commands");
}

#[test]
fn a_frames_failure_is_a_warning_and_the_episode_still_ends() {
    let mut head = start(&["pytest"]);
    head.state["current_node"] = json!("CONSOLIDATOR");
    head.episode["baseline"] = json!({});
    let mut sim = Sim::new(head);
    let Step::Remember { entries } = sim.step() else { panic!() };
    sim.ep.remembered(entries.len()).unwrap();
    sim.step();
    sim.ep.frames_recorded(Err("disk full".into())).unwrap();
    assert!(matches!(sim.step(), Step::Done { outcome: Outcome::Solved, .. }));
    assert_eq!(sim.warnings, ["warning: the episode was not recorded as frames: disk full"]);
    assert!(sim.last().episode.get("frames_upto").is_none());
}

#[test]
fn results_out_of_turn_are_refused_and_change_nothing() {
    let mut ep = Episode::at(start(&["pytest"]));
    let before = ep.clone();
    assert!(matches!(ep.module_done(&json!({})), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.committed(start(&["x"])), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.restored(&Changes::default()), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.frames_recorded(Ok(())), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.coder_done(&CoderReport::default()), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.remembered(1), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.snapshotted("x", 1), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.diffed(&Changes::default()), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.recalled(&[], &[]), Err(EpisodeError::Unexpected { .. })));
    assert_eq!(ep, before);
    // Asking again while a step is out is refused too.
    ep.next().unwrap();
    let Step::RunTests { .. } = ep.next().unwrap() else { panic!() };
    assert!(matches!(ep.next(), Err(EpisodeError::Unexpected { .. })));
    assert!(matches!(ep.tested(vec![]), Ok(())));
}

#[test]
fn a_damaged_state_or_record_is_an_error_not_a_guess() {
    let mut head = start(&["pytest"]);
    head.state["current_node"] = json!("NOWHERE");
    assert!(matches!(Episode::at(head).next(), Err(EpisodeError::State(StateError::Damaged(_)))));
    let mut head = start(&["pytest"]);
    head.state["current_node"] = json!("VERIFIER");
    head.episode["baseline"] = json!({});
    head.episode["regression"] = json!("not a verdict");
    let mut ep = Episode::at(head);
    assert!(matches!(ep.next(), Err(EpisodeError::Corrupt(_))));
    assert!(matches!(ep.next(), Err(EpisodeError::Corrupt(_))), "and again, with no stale heading before it");
    // A route REFLECTOR may not take is refused when written.
    let mut s = state::initial("e", "h", "T");
    s["current_node"] = json!("REFLECTOR");
    let mut e = json!({});
    let r = apply(&[Op::Transition { to: "VERIFIER".into() }], &mut s, &mut e, "T");
    assert!(matches!(r, Err(StateError::Illegal { .. })));
    let r = apply(&[Op::Record { key: "a".into(), value: json!(1) }], &mut s, &mut json!([1]), "T");
    assert!(matches!(r, Err(StateError::Damaged(_))));
}

#[test]
fn the_episode_round_trips_and_other_versions_are_refused() {
    let mut sim = Sim::new(start(&["pytest"]));
    sim.step();
    let stored = sim.ep.to_json();
    let back = Episode::from_json(&stored).unwrap();
    assert_eq!(back, sim.ep);
    let mut newer = stored.clone();
    newer["schema_version"] = json!(2);
    assert_eq!(Episode::from_json(&newer), Err(EpisodeError::Version { found: 2 }));
    assert!(matches!(Episode::from_json(&json!({})), Err(EpisodeError::Corrupt(_))));
    // The restored episode goes on where it was: it waits for the baseline.
    let mut back = back;
    back.tested(vec![vec![run("t::a", "passed")]]).unwrap();
    assert!(matches!(back.next().unwrap(), Step::Note { .. }));
}
