//! `noesis solve` on a small Python package tested by pytest, with a
//! scripted model over the OpenAI wire (the fake server on 127.0.0.1):
//! a fix, an anchor regression restored byte for byte, an escalation and
//! its resumption, and kill -9 in the middle.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use noesis_testkit::skip::{Dependency, missing};
use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use serde_json::{Value, json};

use crate::support::{Output, Work, output};

/// The pytest program scripts/python-deps.sh installed.
fn pytest(test: &str) -> Option<String> {
    match std::env::var("NOESIS_PYTEST").ok().filter(|p| Path::new(p).exists()) {
        Some(p) => Some(p),
        None => {
            missing(Dependency::Pytest, test, "NOESIS_PYTEST does not name an installed pytest");
            None
        }
    }
}

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";

/// A package with a bug in `add` (its test fails) and a working `mul` (its
/// test passes: an anchor).
fn project(work: &Work) -> std::path::PathBuf {
    work.write("proj/calc.py", CALC);
    work.write("proj/test_add.py", "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n");
    work.write("proj/test_mul.py", "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n");
    work.write("proj/.gitignore", "__pycache__/\n.pytest_cache/\n");
    let notes = work.write("proj/notes.txt", "keep me\n");
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o640)).unwrap();
    work.path().join("proj")
}

/// Every file of the project but pytest's caches: contents and modes.
fn scan(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "__pycache__" || name == ".pytest_cache" {
                continue;
            }
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
                files.insert(rel, (std::fs::read(e.path()).unwrap(), meta.permissions().mode() & 0o777));
            }
        }
    }
    files
}

fn envelope(data: Value) -> Reply {
    Reply::Chat(
        json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"}, "data": data})
            .to_string(),
    )
}

fn planner() -> Reply {
    envelope(json!({
        "problem_reflection": {"goal": "add(a, b) returns the sum", "inputs": ["a", "b"], "outputs": ["a + b"],
                               "constraints": ["keep mul working"], "edge_cases": []},
        "possible_solutions": ["fix the operator in add", "rewrite calc.py"],
        "selected_solution": "fix the operator in add",
        "rationale": "test_add expects 2 + 3 == 5"
    }))
}

fn reasoner() -> Reply {
    envelope(json!({"plan": ["in calc.py, change `a - b` to `a + b` in add"],
                    "thoughts": ["only add is wrong"], "rationale": "one change"}))
}

fn reflector(critique: &str) -> Reply {
    envelope(json!({"critique": critique, "route": "CODER", "lesson": "run every test before finishing",
                    "rationale": "the plan was right"}))
}

fn call(id: &str, tool: &str, args: Value) -> Reply {
    Reply::Status(200, tool_call_completion(id, tool, &args).to_string(), vec![])
}

fn fix() -> Reply {
    call("fix", "edit_file", json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}))
}

fn solve(work: &Work, llm: &FakeServer, args: &[&str]) -> Output {
    output(
        work.noesis_bare()
            .arg("solve")
            .args(args)
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test"),
    )
}

fn dump(work: &Work) -> Value {
    output(work.noesis_bare().args(["state", "dump"])).json()
}

struct Tests {
    add: String,
    mul: String,
}

fn tests(pytest: &str) -> Tests {
    Tests { add: format!("{pytest} -q test_add.py"), mul: format!("{pytest} -q test_mul.py") }
}

#[test]
fn a_failing_test_is_fixed_and_what_passes_becomes_an_anchor() {
    let Some(pytest) = pytest("a_failing_test_is_fixed") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    project(&work);
    let more = "from calc import add\n\n\ndef test_add_one():\n    assert add(1, 1) == 2\n";
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("look", "read_file", json!({"path": "test_add.py"})),
        fix(),
        call("more", "write_file", json!({"path": "test_add_more.py", "content": more})),
        Reply::Chat("Fixed add, with a test of my own.".into()),
    ])
    .unwrap();
    let o = solve(&work, &llm, &["Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &t.mul]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("solved: Make test_add pass (2 test(s) pass; anchors: "), "{}", o.stdout);
    // Each node's heading once, when it runs (issue 31: CONSOLIDATOR's was
    // printed again at the end, PLANNER's before the baseline too).
    let headings: Vec<&str> = o.stderr.lines().filter(|l| l.starts_with("==> ")).collect();
    assert_eq!(
        headings,
        [
            "==> VERIFIER (baseline, before any change)",
            "==> PLANNER (retry 0 of 3)",
            "==> REASONER (retry 0 of 3)",
            "==> CODER (retry 0 of 3)",
            "==> VERIFIER (retry 0 of 3)",
            "==> CONSOLIDATOR (retry 0 of 3)",
            "==> CONSOLIDATOR: episode and 0 lesson(s) kept",
        ],
        "{}",
        o.stderr
    );
    assert_eq!(llm.received().len(), 6);
    let calc = std::fs::read_to_string(work.path().join("proj/calc.py")).unwrap();
    assert!(calc.contains("return a + b") && calc.contains("return a * b"), "{calc}");
    let s = dump(&work);
    assert_eq!(s["current_node"], "CONSOLIDATOR");
    assert_eq!(s["user_query"], "Make test_add pass");
    assert_eq!(s["selected_solution"], "fix the operator in add");
    assert_eq!(s["current_plan"], json!(["in calc.py, change `a - b` to `a + b` in add"]));
    // pytest is asked for a JUnit report: the anchors are test cases. mul
    // passed before any change: the first anchor; add joined once it passed.
    assert_eq!(
        s["test_results"]["anchor_tests"],
        json!(["test_mul::test_mul", "test_add::test_add", "test_add_more::test_add_one"])
    );
    // CODER's own test ran with the project's pytest and is an anchor now.
    let ai = &s["test_results"]["ai_tests"][0];
    assert_eq!(
        (&ai["file"], &ai["name"], &ai["status"]),
        (&json!("test_add_more.py"), &json!("test_add_more::test_add_one"), &json!("passed"))
    );
    let statuses: Vec<&str> =
        s["test_results"]["public_tests"].as_array().unwrap().iter().map(|t| t["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["passed", "passed"]);
    assert_eq!(s["file_context"], json!({"calc.py": "modified", "test_add_more.py": "created"}));
    assert_eq!(s["retry_count"], 0);
    let nodes: Vec<&str> = s["thought_trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "transition")
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["REASONER", "CODER", "VERIFIER", "CONSOLIDATOR"]);
    let history = output(work.noesis_bare().args(["state", "history", "--json"])).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["status"], "archived");
    // The archived episode is found by the words of a question.
    let found = output(work.noesis_bare().args(["memory", "search", "which test did add fail", "--json"])).json();
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["kind"], "episode");
    assert_eq!(found[0]["episode_id"], s["episode_id"]);
    assert_eq!(found[0]["record"]["outcome"], "solved");
    assert_eq!(found[0]["record"]["files"], json!({"calc.py": "modified", "test_add_more.py": "created"}));
    // The episode's files, with their roles, as a session of its own that
    // never becomes the project's previous working session.
    let frames = output(work.noesis_bare().args(["frames", "list", "--json"])).json();
    let root = frames.as_array().unwrap().iter().find(|f| f["query"] == "solve: Make test_add pass").unwrap().clone();
    let session = root["session_id"].as_str().unwrap().to_owned();
    assert!(session.starts_with("solve-"), "{session}");
    let (_ui, base) = crate::dashboard::ui(&work);
    let page = crate::dashboard::get(&base, &format!("/sessions/{session}"));
    assert_eq!(page.status, 200);
    // Three files: test_add.py read, calc.py changed, test_add_more.py added.
    assert!(page.body.contains("<dt>Files in scope</dt><dd>3</dd>"), "{}", page.body);
    let changed = page.body.split("<h3>Changed (1)</h3>").nth(1).unwrap_or_default();
    assert!(changed.split("</ul>").next().unwrap().contains("proj/calc.py"), "{}", page.body);
    let added = page.body.split("<h3>Added (1)</h3>").nth(1).unwrap_or_default();
    assert!(added.split("</ul>").next().unwrap().contains("proj/test_add_more.py"), "{}", page.body);
    let diff = output(work.noesis_bare().args(["session", "diff"]));
    assert!(!diff.stdout.contains("solve-"), "an episode is no working session: {}", diff.stdout);
    // The episode's page in the dashboard.
    let page = crate::dashboard::get(&base, &format!("/episodes/{}", s["episode_id"].as_str().unwrap()));
    assert_eq!(page.status, 200);
    for part in ["CONSOLIDATOR", "test_add_more::test_add_one", "retries used 0 of 3, 3 left", "/runs/"] {
        assert!(page.body.contains(part), "{part} missing from the episode page");
    }
    let text = output(work.noesis_bare().args(["memory", "search", "operator"]));
    assert!(text.stdout.starts_with("episode  ") && text.stdout.contains("(solved)"), "{}", text.stdout);
    // The model saw the plan and the tests in CODER's task.
    let coder = llm.received()[2].json();
    let task =
        coder["messages"].as_array().unwrap().iter().find(|m| m["role"] == "user").unwrap()["content"].to_string();
    assert!(task.contains("change `a - b` to `a + b`") && task.contains("test_add.py"), "{task}");
    // A second solve while nothing is unfinished starts a new episode; an
    // unfinished one must be resumed or reset first.
    let o = solve(&work, &llm, &["again"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no --test given"), "{}", o.stderr);
}

/// CODER's first change fixes add but breaks mul (an anchor), creates a
/// file and deletes one behind the tools' back: the tree is restored byte
/// for byte, REFLECTOR runs, and the second attempt — which can only apply
/// to the restored file — succeeds.
#[test]
fn a_change_that_breaks_an_anchor_is_restored_exactly() {
    let Some(pytest) = pytest("a_change_that_breaks_an_anchor") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    let root = project(&work);
    work.write("noesis.toml", "[agent]\nallow_commands = [\"rm\"]\n");
    let before = scan(&root);
    let broken = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("w1", "write_file", json!({"path": "calc.py", "content": broken})),
        call("w2", "write_file", json!({"path": "extra/helper.py", "content": "x = 1\n"})),
        call("w3", "run_command", json!({"command": "rm notes.txt"})),
        Reply::Chat("Rewrote calc.py.".into()),
        reflector("the rewrite turned mul into a sum"),
        fix(),
        Reply::Chat("Fixed only add.".into()),
    ])
    .unwrap();
    let o = solve(&work, &llm, &["Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &t.mul]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("anchor regression: "), "{}", o.stderr);
    assert_eq!(llm.received().len(), 9);
    // Everything but the one intended change is as it was, modes included.
    let mut expected = before.clone();
    expected.get_mut("calc.py").unwrap().0 = CALC.replace("return a - b", "return a + b").into_bytes();
    assert_eq!(scan(&root), expected);
    let s = dump(&work);
    assert_eq!(s["retry_count"], 1);
    let regression = &s["error_log"][0];
    assert_eq!(regression["type"], "anchor_regression");
    assert_eq!(regression["reason"], "anchor regression");
    assert_eq!(regression["anchors"], json!(["test_mul::test_mul"]));
    assert_eq!(regression["reverted"]["modified"], json!(["calc.py"]));
    assert_eq!(regression["reverted"]["created"], json!(["extra/helper.py"]));
    assert_eq!(regression["reverted"]["created_dirs"], json!(["extra"]));
    assert_eq!(regression["reverted"]["deleted"], json!(["notes.txt"]));
    assert_eq!(s["critiques"][0]["critique"], "the rewrite turned mul into a sum");
    assert_eq!(s["critiques"][0]["route"], "CODER");
    // The episode's frames: a root, a child per node run, the tests as
    // evidence, and the reverted CODER run invalidated for its reason.
    let frames = output(work.noesis_bare().args(["frames", "list", "--json"])).json();
    let frames = frames.as_array().unwrap();
    let root = frames.iter().find(|f| f["query"] == "solve: Make test_add pass").unwrap();
    let children: Vec<&Value> = frames.iter().filter(|f| f["parent_id"] == root["frame_id"]).collect();
    let nodes: Vec<&str> = children.iter().map(|f| f["query"].as_str().unwrap()).collect();
    assert_eq!(
        nodes,
        ["VERIFIER (baseline)", "PLANNER", "REASONER", "CODER", "VERIFIER", "REFLECTOR", "CODER", "VERIFIER"]
    );
    let coders: Vec<&&Value> = children.iter().filter(|f| f["query"] == "CODER").collect();
    assert_eq!(coders[0]["status"], "invalidated");
    assert_eq!(coders[1]["status"], "completed");
    let shown = output(work.noesis_bare().args(["frames", "show", coders[0]["frame_id"].as_str().unwrap()]));
    assert!(shown.stdout.contains("anchor regression"), "{}", shown.stdout);
    let verifier = children.iter().rfind(|f| f["query"] == "VERIFIER").unwrap();
    let observed: Vec<&str> =
        verifier["evidence"].as_array().unwrap().iter().map(|e| e["content"].as_str().unwrap_or_default()).collect();
    let mul = format!("test_mul::test_mul: passed (`{}` exit 0", t.mul);
    assert!(observed.iter().any(|c| c.starts_with(&mul)), "{observed:?}");
    // REFLECTOR was told the change was reverted.
    let asked = llm.received()[6].json().to_string();
    assert!(asked.contains("reverted") && asked.contains("test_mul.py"), "{asked}");
    // The critique's lesson is procedural memory now ...
    let lessons = output(work.noesis_bare().args(["memory", "search", "tests", "--kind", "lesson", "--json"])).json();
    assert_eq!(lessons[0]["text"], "run every test before finishing");
    // ... and the next episode's PLANNER is shown it and the episode.
    let llm = FakeServer::start(vec![planner(), reasoner(), Reply::Chat("Nothing to change.".into())]).unwrap();
    let o =
        solve(&work, &llm, &["Keep the add tests passing", "--workspace", "proj", "--test", &t.add, "--test", &t.mul]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("recalled 1 episode(s), 1 lesson(s)"), "{}", o.stderr);
    let planned = llm.received()[0].json().to_string();
    assert!(planned.contains("run every test before finishing") && planned.contains("Make test_add pass"), "{planned}");
}

/// Issue 31: CODER's writes into git-ignored paths (a virtualenv's
/// site-packages, build output) were outside the snapshot, so a change
/// there that broke an anchor was never restored. solve refuses them: the
/// model is told why, nothing is written there, and its change to a
/// tracked file goes through.
#[test]
fn coder_may_not_write_where_the_snapshot_cannot_restore() {
    let Some(pytest) = pytest("coder_may_not_write_where_the_snapshot_cannot_restore") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    let root = project(&work);
    work.write("proj/.gitignore", "__pycache__/\n.pytest_cache/\n.venv/\n*.log\n");
    work.write("proj/.venv/lib/site-packages/calc.py", "def add(a, b):\n    return 5\n");
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("shadow", "write_file", json!({"path": ".venv/lib/site-packages/calc.py", "content": "broken"})),
        call("log", "edit_file", json!({"path": "run.log", "old": "a", "new": "b"})),
        fix(),
        Reply::Chat("Fixed add in calc.py.".into()),
    ])
    .unwrap();
    work.write("proj/run.log", "a\n");
    let o = solve(&work, &llm, &["Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &t.mul]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(
        std::fs::read_to_string(root.join(".venv/lib/site-packages/calc.py")).unwrap(),
        "def add(a, b):\n    return 5\n"
    );
    assert_eq!(std::fs::read_to_string(root.join("run.log")).unwrap(), "a\n");
    for (i, path) in [(3, ".venv/lib/site-packages/calc.py"), (4, "run.log")] {
        let seen = llm.received()[i].json().to_string();
        assert!(seen.contains(&format!("`{path}` is git-ignored")), "{seen}");
    }
    assert!(std::fs::read_to_string(root.join("calc.py")).unwrap().contains("return a + b"));
}

/// Issue 31: killed after VERIFIER restored the tree but before it wrote
/// the state, the resumed episode ran the tests again on the restored tree
/// and recorded "tests failed" instead of the regression. The verdict is on
/// record before the restore, so the resumed VERIFIER finishes it.
#[test]
fn a_crash_between_the_restore_and_the_state_write_keeps_the_regression() {
    let Some(pytest) = pytest("a_crash_between_the_restore_and_the_state_write") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    let root = project(&work);
    let before = scan(&root);
    let broken = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("w1", "write_file", json!({"path": "calc.py", "content": broken})),
        Reply::Chat("Rewrote calc.py.".into()),
    ])
    .unwrap();
    let mut c = work.noesis_std();
    c.args(["solve", "Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &t.mul])
        .env("OPENAI_BASE_URL", llm.base_url())
        .env("OPENAI_API_KEY", "sk-test");
    crate::support::kill_at(c, "verifier-restored");
    assert_eq!(scan(&root), before, "restored before the kill");
    assert_eq!(dump(&work)["current_node"], "VERIFIER");
    let llm =
        FakeServer::start(vec![reflector("the rewrite turned mul into a sum"), fix(), Reply::Chat("Done.".into())])
            .unwrap();
    let o = solve(&work, &llm, &["--resume"]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let s = dump(&work);
    let logged: Vec<&str> = s["error_log"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(logged, ["anchor_regression"]);
    assert_eq!(s["error_log"][0]["anchors"], json!(["test_mul::test_mul"]));
    assert_eq!(s["error_log"][0]["reverted"]["modified"], json!(["calc.py"]));
    let asked = llm.received()[0].json().to_string();
    assert!(asked.contains("reverted") && asked.contains("test_mul"), "{asked}");
}

/// A model that never fixes it: three REFLECTOR visits, then the episode
/// escalates with a report and its own exit code; `--resume --hint` gives
/// it one more attempt, which succeeds.
#[test]
fn a_model_that_never_fixes_it_escalates_and_a_hint_resumes_it() {
    let Some(pytest) = pytest("a_model_that_never_fixes_it") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    project(&work);
    let nothing = || Reply::Chat("I could not find the bug.".into());
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        nothing(),
        reflector("nothing was changed (1)"),
        nothing(),
        reflector("nothing was changed (2)"),
        nothing(),
        reflector("nothing was changed (3)"),
        nothing(),
    ])
    .unwrap();
    let o = solve(&work, &llm, &["Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &t.mul]);
    assert_eq!(o.code, 4, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(llm.received().len(), 9);
    for line in [
        "escalated: Make test_add pass",
        "goal: add(a, b) returns the sum",
        "tried: fix the operator in add",
        "critique (attempt 1): nothing was changed (1)",
        "critique (attempt 3): nothing was changed (3)",
        &format!("failing: test_add::test_add (`{}` exit 1)", t.add),
        "continue with: noesis solve --resume",
    ] {
        assert!(o.stdout.contains(line), "missing {line:?} in\n{}", o.stdout);
    }
    let s = dump(&work);
    assert_eq!((s["retry_count"].clone(), s["current_node"].clone()), (json!(3), json!("VERIFIER")));
    let history = output(work.noesis_bare().args(["state", "history", "--json"])).json();
    assert_eq!(history.as_array().unwrap().last().unwrap()["status"], "escalated");
    // A new task is refused while this one waits.
    let o = solve(&work, &llm, &["Something else", "--workspace", "proj", "--test", "true"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--resume"), "{}", o.stderr);

    let llm = FakeServer::start(vec![reflector("follow the hint"), fix(), Reply::Chat("Done.".into())]).unwrap();
    let o = solve(&work, &llm, &["--resume", "--hint", "the operator in add is wrong"]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(llm.received().len(), 3);
    assert!(llm.received()[0].json().to_string().contains("the operator in add is wrong"));
    let s = dump(&work);
    assert_eq!((s["retry_count"].clone(), s["max_retries"].clone()), (json!(4), json!(4)));
    assert!(s["thought_trace"].as_array().unwrap().iter().any(|e| e["type"] == "hint"));
}

/// Killed during CODER (a tool call running) and during VERIFIER (a test
/// running): `--resume` finishes the episode; no tool call runs twice.
#[test]
fn kill_9_during_coder_and_verifier_then_resume_finishes() {
    let Some(pytest) = pytest("kill_9_during_coder_and_verifier") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    project(&work);
    work.write("noesis.toml", "[agent]\nallow_commands = [\"sleep\"]\n");
    // The test sleeps on its second run only (the first is the baseline).
    let slow = format!("if [ -f ran ]; then sleep 60; fi; touch ran; {}", t.mul);
    work.write("proj/.gitignore", "__pycache__/\n.pytest_cache/\nran\n");
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        fix(),
        call("nap", "run_command", json!({"command": "sleep 60"})),
    ])
    .unwrap();
    let mut child = work
        .noesis_std()
        .args(["solve", "Make test_add pass", "--workspace", "proj", "--test", &t.add, "--test", &slow])
        .env("OPENAI_BASE_URL", llm.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once CODER's second call is on record as running.
    let running = |work: &Work| -> bool {
        let o = output(work.noesis_bare().args(["agent", "list", "--json"]));
        let Some(id) = o.stdout.contains("coder").then(|| {
            let v: Value = serde_json::from_str(&o.stdout).unwrap_or(Value::Null);
            v.as_array().and_then(|a| a.first()).and_then(|r| r["run_id"].as_str()).map(str::to_owned)
        }) else {
            return false;
        };
        let Some(id) = id else { return false };
        let shown = output(work.noesis_bare().args(["agent", "show", &id, "--json"]));
        shown.stdout.contains("\"running\"") && shown.stdout.contains("\"nap\"")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !running(&work) {
        assert!(std::time::Instant::now() < deadline, "CODER's call never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(llm.received().len(), 4);

    // Resumed: the interrupted call is reported, not run again; the model
    // finishes; VERIFIER's test sleeps and is killed in turn.
    let llm = FakeServer::start(vec![Reply::Chat("Fixed add.".into())]).unwrap();
    let mut child = work
        .noesis_std()
        .args(["solve", "--resume"])
        .env("OPENAI_BASE_URL", llm.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while dump(&work)["current_node"] != "VERIFIER" {
        assert!(std::time::Instant::now() < deadline, "never reached VERIFIER");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(llm.received().len(), 1);
    let sent = llm.received()[0].json().to_string();
    assert!(sent.contains("nap"), "the model hears what became of the interrupted call: {sent}");

    std::fs::remove_file(work.path().join("proj/ran")).ok();
    let llm = FakeServer::start(vec![]).unwrap();
    let o = solve(&work, &llm, &["--resume"]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(llm.received().len(), 0, "nothing left to ask the model");
    let calc = std::fs::read_to_string(work.path().join("proj/calc.py")).unwrap();
    assert_eq!(calc.matches("a + b").count(), 1, "{calc}");
    let s = dump(&work);
    assert_eq!(s["current_node"], "CONSOLIDATOR");
    let run = s["thought_trace"].as_array().unwrap().iter().find(|e| e["type"] == "coder").unwrap()["run"].clone();
    let shown = output(work.noesis_bare().args(["agent", "show", run.as_str().unwrap(), "--json"])).json();
    let calls: Vec<(String, String)> = shown["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(calls, [("fix".to_owned(), "completed".to_owned()), ("nap".to_owned(), "interrupted".to_owned())]);
}

/// A runner that writes its own JUnit report (`--junit`): one command runs
/// both files, and each case is tracked and anchored on its own.
#[test]
fn cases_come_from_the_junit_report_a_command_writes() {
    let Some(pytest) = pytest("cases_come_from_the_junit_report") else { return };
    let work = Work::new();
    project(&work);
    work.write("proj/.gitignore", "__pycache__/\n.pytest_cache/\nreport.xml\n");
    let all = format!("{pytest} -q --junitxml=report.xml test_add.py test_mul.py");
    let llm = FakeServer::start(vec![planner(), reasoner(), fix(), Reply::Chat("Fixed.".into())]).unwrap();
    let o = solve(&work, &llm, &["Make test_add pass", "--workspace", "proj", "--test", &all, "--junit", "report.xml"]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("1 of 2 test(s) pass; they are the anchors"), "{}", o.stderr);
    let s = dump(&work);
    assert_eq!(s["test_results"]["anchor_tests"], json!(["test_mul::test_mul", "test_add::test_add"]));
    let names: Vec<&str> =
        s["test_results"]["public_tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["test_add::test_add", "test_mul::test_mul"]);
}

/// A Rust crate tested by `cargo test` (per command: one filter each).
#[test]
fn a_rust_crate_is_fixed_through_cargo_test() {
    let work = Work::new();
    work.write(
        "crate/Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    work.write("crate/.gitignore", "target/\n");
    work.write(
        "crate/src/lib.rs",
        "pub fn add(a: i64, b: i64) -> i64 {\n    a - b\n}\n\npub fn mul(a: i64, b: i64) -> i64 {\n    a * b\n}\n\n\
         #[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 3), 5);\n    }\n\n\
             #[test]\n    fn muls() {\n        assert_eq!(super::mul(2, 3), 6);\n    }\n}\n",
    );
    let adds = "cargo test --offline -q adds";
    let muls = "cargo test --offline -q muls";
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("fix", "edit_file", json!({"path": "src/lib.rs", "old": "    a - b", "new": "    a + b"})),
        Reply::Chat("Fixed add.".into()),
    ])
    .unwrap();
    let target = work.path().join("crate/target");
    let o = output(
        work.noesis_bare()
            .args(["solve", "Make adds pass", "--workspace", "crate", "--test", adds, "--test", muls])
            .env("OPENAI_BASE_URL", llm.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .env("CARGO_TARGET_DIR", &target),
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let s = dump(&work);
    assert_eq!(s["test_results"]["anchor_tests"], json!([muls, adds]));
    assert_eq!(s["file_context"], json!({"src/lib.rs": "modified"}));
}

/// Issue 25: CODER may not change what judges it. An edit of the test file
/// a `--test` command names, and a write of an existing conftest.py, are
/// refused (the model is told), said on stderr and kept in the state's
/// error_log; VERIFIER judges with the tests as they were; a new test file
/// of CODER's own is still welcome.
#[test]
fn coder_cannot_change_the_tests_that_judge_it() {
    let Some(pytest) = pytest("coder_cannot_change_the_tests") else { return };
    let t = tests(&pytest);
    let work = Work::new();
    project(&work);
    work.write("proj/conftest.py", "# the project's fixtures\n");
    let llm = FakeServer::start(vec![
        planner(),
        reasoner(),
        call("cheat", "edit_file", json!({"path": "test_add.py", "old": "== 5", "new": "== -1"})),
        call("plug", "write_file", json!({"path": "conftest.py", "content": "import os\n"})),
        call("asks", "write_file", json!({"path": "notes.txt", "content": "gone\n"})),
        fix(),
        call("own", "write_file", json!({"path": "test_more.py", "content": "def test_one():\n    assert 1\n"})),
        Reply::Chat("Fixed add.".into()),
    ])
    .unwrap();
    // An `ask` rule in solve, where no person is asked: the call is denied
    // and the model told; the episode goes on.
    let o = solve(
        &work,
        &llm,
        &[
            "Make test_add pass",
            "--workspace",
            "proj",
            "--test",
            &t.add,
            "--test",
            &t.mul,
            "--ask-tool",
            "write_file(notes.txt)",
        ],
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("refused: CODER may not change test_add.py, conftest.py (they judge it)"),
        "{}",
        o.stderr
    );
    assert_eq!(std::fs::read_to_string(work.path().join("proj/notes.txt")).unwrap(), "keep me\n");
    let denied = llm.received()[5].json().to_string();
    assert!(denied.contains("solve asks no one"), "{denied}");
    let test_add = std::fs::read_to_string(work.path().join("proj/test_add.py")).unwrap();
    assert!(test_add.contains("== 5"), "{test_add}");
    assert_eq!(std::fs::read_to_string(work.path().join("proj/conftest.py")).unwrap(), "# the project's fixtures\n");
    assert!(work.path().join("proj/test_more.py").exists());
    let told = llm.received()[3].json().to_string();
    assert!(told.contains("`test_add.py` is a protected path"), "{told}");
    let s = dump(&work);
    let refused = &s["error_log"][0];
    assert_eq!(
        (&refused["type"], &refused["paths"]),
        (&json!("protected_write"), &json!(["test_add.py", "conftest.py"]))
    );
    assert!(refused["run"].as_str().unwrap().contains("-coder-0"), "{refused}");
    // The rules CODER ran under are on record with its run.
    let run = output(work.noesis_bare().args(["agent", "show", refused["run"].as_str().unwrap(), "--json"])).json();
    let protected = run["config"]["permissions"]["protected"].to_string();
    assert!(
        protected.contains("test_add.py") && protected.contains("test_mul.py") && protected.contains("conftest.py"),
        "{protected}"
    );
}

/// Issue 31: VERIFIER's timeout killed only `sh`, and the test runner it
/// started went on. A test command whose runner leaves a grandchild that
/// would write a file seconds later is killed whole at the test timeout.
#[test]
fn verifiers_timeout_kills_the_whole_test_run() {
    let work = Work::new();
    let root = project(&work);
    let slow = "sh -c '(sleep 2; echo late > late.txt) & sleep 60'";
    let llm = FakeServer::start(vec![planner(), reasoner(), Reply::Chat("No change needed.".into())]).unwrap();
    let o = solve(
        &work,
        &llm,
        &["Make it pass", "--workspace", "proj", "--test", slow, "--test-timeout", "1", "--max-retries", "0"],
    );
    assert_ne!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    std::thread::sleep(std::time::Duration::from_millis(3000));
    assert!(!root.join("late.txt").exists(), "a process of the test run outlived VERIFIER's timeout");
    let s = dump(&work);
    let public = s["test_results"]["public_tests"].to_string();
    assert!(public.contains("failed"), "{public}");
}
