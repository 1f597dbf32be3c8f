//! What judges CODER and how its work is told and reported: the files it
//! may not change, which test commands are pytest runs noesis may ask for a
//! JUnit report, CODER's task, and the report a person reads after an
//! escalation. Pure: the callers read the disk.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::snapshot::Snapshot;

/// The strings of a JSON list (anything else: none).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default()
}

/// The end of `text`, at most `n` characters.
pub fn tail(text: &str, n: usize) -> String {
    let count = text.chars().count();
    if count <= n { text.to_owned() } else { format!("…{}", text.chars().skip(count - n).collect::<String>()) }
}

/// Whether `command` is a plain pytest run noesis may ask for a JUnit
/// report (`--junitxml`): pytest or `python -m pytest`, with nothing the
/// shell would treat specially after it.
pub fn is_plain_pytest(command: &str) -> bool {
    let first = command.split_whitespace().next().unwrap_or_default();
    let pytest = first.rsplit('/').next() == Some("pytest") || command.contains(" -m pytest");
    pytest && !command.contains([';', '&', '|', '>', '<', '`', '$', '\n'])
}

/// The program part of a plain pytest command (`pytest`, a path to it, or
/// `python -m pytest`), to run another file with.
pub fn pytest_program(command: &str) -> String {
    match command.find(" -m pytest") {
        Some(i) => command[..i + " -m pytest".len()].to_owned(),
        None => command.split_whitespace().next().unwrap_or("pytest").to_owned(),
    }
}

/// Whether `path` is a test file by its name.
pub fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("test_") || name.contains("_test.") || name.contains(".test.") || path.starts_with("tests/")
}

/// The words of the test commands and the files of anchor cases
/// (`file::case`) that could name a file of the workspace: relative, not
/// options, not climbing out. The caller keeps those that exist; they are
/// read-only wherever a test or CODER's command runs.
pub fn judging_candidates(tests: &[String], anchors: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let words = tests.iter().flat_map(|t| shlex::split(t).unwrap_or_default());
    let cases = anchors.iter().filter_map(|a| a.split_once("::").map(|(f, _)| f.to_owned()));
    for w in words.chain(cases) {
        // Options, and the reports they name, judge nothing.
        if w.starts_with('-') {
            continue;
        }
        let rel = std::path::Path::new(&w);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            continue;
        }
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// What judges CODER, which it may not change: the files and folders the
/// test commands name, the anchors' files, and the tree's test files by
/// name (`tests/`, `test_*`, `*_test.*`, `*.test.*`, `*.spec.*`,
/// `conftest.py`) — not CODER's own earlier tests unless they became
/// anchors. Only what exists: CODER may add tests of its own.
pub fn judged_files(snap: &Snapshot, tests: &[String], anchors: &[String], own: &[String]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for word in tests.iter().flat_map(|t| t.split_whitespace()) {
        let word = word.trim_matches(['\'', '"', ';']);
        // A report the command writes judges nothing; it must stay writable.
        if word.starts_with("--junitxml") || word.starts_with("--junit-xml") {
            continue;
        }
        let word = word.rsplit_once('=').map_or(word, |(_, v)| v);
        let path = word.split("::").next().unwrap_or(word).trim_start_matches("./").trim_end_matches('/');
        let exists = snap.entries.contains_key(path) || snap.dirs.contains(path);
        if exists && !path.is_empty() && path != "." && !path.starts_with('-') {
            out.insert(path.to_owned());
        }
    }
    for anchor in anchors {
        // `tests/test_x.py::name`, or JUnit's dotted `tests.test_x.Case::name`.
        let Some((module, _)) = anchor.split_once("::") else { continue };
        if snap.entries.contains_key(module) {
            out.insert(module.to_owned());
            continue;
        }
        let mut parts: Vec<&str> = module.split('.').collect();
        while !parts.is_empty() {
            let file = format!("{}.py", parts.join("/"));
            if snap.entries.contains_key(&file) {
                out.insert(file);
                break;
            }
            parts.pop();
        }
    }
    for path in snap.entries.keys() {
        let name = path.rsplit('/').next().unwrap_or(path);
        let by_name =
            is_test_file(path) || name == "conftest.py" || name.contains(".spec.") || path.contains("/tests/");
        if by_name && !own.contains(path) {
            out.insert(path.clone());
        }
    }
    out.into_iter().collect()
}

/// The paths a run's calls were refused for as protected (at proposal, or
/// by the toolbox through a symlink), from the calls' error texts.
pub fn protected_refusals<'a>(errors: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for text in errors {
        let Some(start) = text.find("refused: `").map(|i| i + "refused: `".len()) else { continue };
        let Some(len) = text[start..].find("` is a protected path") else { continue };
        let path = text[start..start + len].to_owned();
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// CODER's task: the goal, the plan, what fails, what was said before.
pub fn coder_task(state: &Value, tests: &[String]) -> String {
    let mut t = format!("{}\n\n", state["user_query"].as_str().unwrap_or_default());
    if let Some(sol) = state["selected_solution"].as_str().filter(|s| !s.is_empty()) {
        t.push_str(&format!("Approach: {sol}\n\n"));
    }
    let plan = strings(&state["current_plan"]);
    if !plan.is_empty() {
        t.push_str("Plan:\n");
        for (i, p) in plan.iter().enumerate() {
            t.push_str(&format!("{}. {p}\n", i + 1));
        }
        t.push('\n');
    }
    for c in state["critiques"].as_array().into_iter().flatten() {
        t.push_str(&format!("An earlier attempt failed: {}\n", c["critique"].as_str().unwrap_or_default()));
    }
    t.push_str(&format!(
        "\nChange the files in the workspace so that these commands pass: {}. Tests that pass now must keep passing.",
        tests.join("; ")
    ));
    t
}

/// What a person needs after an escalation: the goal, what was tried, each
/// critique, the failing tests.
pub fn escalation_report(state: &Value, episode: &Value) -> String {
    let mut r = format!("escalated: {}\n", state["user_query"].as_str().unwrap_or_default());
    r.push_str(&format!("goal: {}\n", state["problem_reflection"]["goal"].as_str().unwrap_or_default()));
    r.push_str(&format!("tried: {}\n", state["selected_solution"].as_str().unwrap_or_default()));
    for c in state["critiques"].as_array().into_iter().flatten() {
        r.push_str(&format!("critique (attempt {}): {}\n", c["attempt"], c["critique"].as_str().unwrap_or_default()));
    }
    for f in episode["failing"].as_array().into_iter().flatten() {
        r.push_str(&format!(
            "failing: {} (`{}` exit {})\n",
            f["test"].as_str().unwrap_or_default(),
            f["command"].as_str().unwrap_or_default(),
            f["exit_code"]
        ));
    }
    r.push_str("continue with: noesis solve --resume [--hint \"…\"]\n");
    r
}

/// The line a solved episode ends with.
pub fn solved_line(state: &Value) -> String {
    let anchors = strings(&state["test_results"]["anchor_tests"]);
    format!(
        "solved: {} ({} test(s) pass; anchors: {}; {} retr{})",
        state["user_query"].as_str().unwrap_or_default(),
        state["test_results"]["public_tests"].as_array().map_or(0, Vec::len),
        anchors.join(", "),
        state["retry_count"],
        if state["retry_count"] == serde_json::json!(1) { "y" } else { "ies" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pytest_commands_are_recognised_only_when_plain() {
        assert!(is_plain_pytest("pytest -q tests"));
        assert!(is_plain_pytest("/venv/bin/pytest tests/test_a.py"));
        assert!(is_plain_pytest("python3 -m pytest -x"));
        assert!(!is_plain_pytest("pytest tests; rm -rf x"));
        assert!(!is_plain_pytest("cargo test"));
        assert_eq!(pytest_program("python3 -m pytest -x tests"), "python3 -m pytest");
        assert_eq!(pytest_program("/venv/bin/pytest -q"), "/venv/bin/pytest");
    }

    #[test]
    fn judged_files_name_tests_anchors_and_test_files_but_not_codes_own() {
        let mut snap = Snapshot::default();
        for p in ["calc.py", "tests/test_calc.py", "pkg/test_mine.py", "conftest.py", "web/a.spec.js", "suite/x.py"] {
            snap.entries.insert(p.into(), crate::snapshot::Entry::Symlink { target: std::path::PathBuf::from("x") });
        }
        snap.dirs.insert("suite".into());
        let tests = vec!["pytest -q 'suite' --junitxml=report.xml".to_owned()];
        let anchors = vec!["calc::case".to_owned()];
        let got = judged_files(&snap, &tests, &anchors, &["pkg/test_mine.py".to_owned()]);
        assert_eq!(got, ["calc.py", "conftest.py", "suite", "tests/test_calc.py", "web/a.spec.js"]);
    }

    #[test]
    fn candidates_skip_options_absolute_paths_and_climbs() {
        let tests = vec!["pytest -q tests/test_a.py /etc/passwd ../x".to_owned()];
        let anchors = vec!["tests/test_b.py::case".to_owned(), "plain".to_owned()];
        assert_eq!(judging_candidates(&tests, &anchors), ["pytest", "tests/test_a.py", "tests/test_b.py"]);
    }

    #[test]
    fn refusals_are_read_from_the_error_texts_once_each() {
        let errors =
            ["refused: `tests/t.py` is a protected path", "other", "refused: `tests/t.py` is a protected path"];
        assert_eq!(protected_refusals(errors), ["tests/t.py"]);
    }

    #[test]
    fn coders_task_and_the_escalation_report_say_what_happened() {
        let state = json!({"user_query": "fix add", "selected_solution": "use +", "current_plan": ["edit"],
                           "critiques": [{"attempt": 0, "critique": "wrong sign"}],
                           "problem_reflection": {"goal": "add adds"}});
        let task = coder_task(&state, &["pytest -q".into()]);
        assert!(
            task.starts_with("fix add\n\nApproach: use +\n\nPlan:\n1. edit\n\nAn earlier attempt failed: wrong sign\n")
        );
        assert!(task.ends_with("these commands pass: pytest -q. Tests that pass now must keep passing."));
        let episode = json!({"failing": [{"test": "t::a", "command": "pytest", "exit_code": 1}]});
        assert_eq!(
            escalation_report(&state, &episode),
            "escalated: fix add\ngoal: add adds\ntried: use +\ncritique (attempt 0): wrong sign\n\
             failing: t::a (`pytest` exit 1)\ncontinue with: noesis solve --resume [--hint \"…\"]\n"
        );
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(tail("abc", 3), "abc");
    }
}
