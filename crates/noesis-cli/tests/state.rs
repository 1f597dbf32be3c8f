//! `noesis state`: imlazy's state-manager commands and JSON shapes, the
//! transition table, the retry budget, versions, and concurrent writers.

use serde_json::{Value, json};

use crate::support::{Output, Work, output};

fn state(work: &Work, args: &[&str]) -> Output {
    output(work.noesis_bare().arg("state").args(args))
}

/// stdout with the values that change from run to run masked: times,
/// the episode id and the project hash.
fn masked(o: &Output) -> String {
    let mut v: Value = o.json();
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if matches!(k.as_str(), "created_at" | "updated_at" | "timestamp" | "episode_id" | "project_hash")
                        && x.is_string()
                    {
                        *x = json!(format!("<{k}>"));
                    } else {
                        walk(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

/// The shapes imlazy's `state-manager.py` prints (`json.dumps(result,
/// indent=2, ensure_ascii=False)`), command by command, with the fields of
/// its DEFAULT_STATE in its order.
#[test]
fn the_state_commands_print_imlazys_shapes() {
    let work = Work::new();
    let o = state(&work, &["init", "--project-hash", "cafe0123"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let fresh = r#"{
  "user_query": "",
  "problem_reflection": {
    "goal": "",
    "inputs": [],
    "outputs": [],
    "constraints": [],
    "edge_cases": []
  },
  "current_plan": [],
  "thought_trace": [],
  "critiques": [],
  "possible_solutions": [],
  "selected_solution": "",
  "file_context": {},
  "test_results": {
    "public_tests": [],
    "ai_tests": [],
    "anchor_tests": []
  },
  "error_log": [],
  "current_node": "PLANNER",
  "retry_count": 0,
  "max_retries": 3,
  "episode_id": "<episode_id>",
  "project_hash": "<project_hash>",
  "created_at": "<created_at>",
  "updated_at": "<updated_at>"
}
"#;
    assert_eq!(masked(&o), fresh);
    let v = o.json();
    assert_eq!(v["project_hash"], "cafe0123");
    assert_eq!(v["episode_id"].as_str().unwrap().len(), 8);

    let o = state(&work, &["set", "problem_reflection.goal", "Fix the parser — ünïcode kept"]);
    assert_eq!(
        o.stdout,
        "{\n  \"success\": true,\n  \"key\": \"problem_reflection.goal\",\n  \"value\": \"Fix the parser — ünïcode kept\"\n}\n"
    );
    let o = state(&work, &["set", "current_plan", r#"["read", "fix"]"#]);
    assert_eq!(
        o.stdout,
        "{\n  \"success\": true,\n  \"key\": \"current_plan\",\n  \"value\": [\n    \"read\",\n    \"fix\"\n  ]\n}\n"
    );
    let o = state(&work, &["update", "critiques", r#"{"issue": "off by one"}"#]);
    assert_eq!(
        o.stdout,
        "{\n  \"success\": true,\n  \"key\": \"critiques\",\n  \"appended\": {\n    \"issue\": \"off by one\"\n  }\n}\n"
    );
    let o = state(&work, &["update", "error_log", "[not json"]);
    assert_eq!(o.json(), json!({"success": true, "key": "error_log", "appended": "[not json"}));
    let o = state(&work, &["get", "problem_reflection.goal"]);
    assert_eq!(
        o.stdout,
        "{\n  \"key\": \"problem_reflection.goal\",\n  \"value\": \"Fix the parser — ünïcode kept\"\n}\n"
    );
    let o = state(&work, &["transition", "reasoner"]);
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, "{\n  \"success\": true,\n  \"from\": \"PLANNER\",\n  \"to\": \"REASONER\"\n}\n")
    );
    // Errors: imlazy's `{"error": …}` on stdout, exit 1.
    let o = state(&work, &["get", "nope.deeper"]);
    assert_eq!((o.code, o.stdout.as_str()), (1, "{\n  \"error\": \"Key not found: nope.deeper\"\n}\n"));
    let o = state(&work, &["update", "selected_solution", "x"]);
    assert_eq!((o.code, o.json()), (1, json!({"error": "Key selected_solution is not a list"})));

    let o = state(&work, &["dump"]);
    let dumped = o.json();
    assert_eq!(dumped["current_node"], "REASONER");
    assert_eq!(dumped["current_plan"], json!(["read", "fix"]));
    assert_eq!(dumped["error_log"], json!(["[not json"]));
    let trace = &dumped["thought_trace"];
    assert_eq!(trace.as_array().unwrap().len(), 1);
    assert_eq!(
        (&trace[0]["type"], &trace[0]["from"], &trace[0]["to"]),
        (&json!("transition"), &json!("PLANNER"), &json!("REASONER"))
    );
    assert!(trace[0]["timestamp"].is_string());
    assert_eq!(state(&work, &["get"]).json(), dumped, "get without a key is the whole state");

    // reset: a new episode for the same project hash.
    let o = state(&work, &["reset"]);
    assert_eq!(masked(&o), fresh);
    assert_eq!(o.json()["project_hash"], "cafe0123");
    assert_ne!(o.json()["episode_id"], dumped["episode_id"]);
}

#[test]
fn without_a_state_every_command_says_to_init_first() {
    let work = Work::new();
    for args in [&["get"][..], &["set", "a", "b"], &["update", "a", "b"], &["transition", "REASONER"]] {
        let o = state(&work, args);
        assert_eq!((o.code, o.json()), (1, json!({"error": "No active state. Run 'init' first."})), "{args:?}");
    }
    let o = state(&work, &["dump"]);
    assert_eq!((o.code, o.json()), (1, json!({"error": "No active state"})));
}

#[test]
fn an_illegal_transition_is_refused_and_changes_nothing() {
    let work = Work::new();
    assert_eq!(state(&work, &["init"]).code, 0);
    let before = state(&work, &["dump"]).json();
    let o = state(&work, &["transition", "CODER"]);
    assert_eq!(
        (o.code, o.json()),
        (1, json!({"error": "illegal transition PLANNER → CODER: after PLANNER comes REASONER"}))
    );
    let o = state(&work, &["transition", "TESTER"]);
    assert_eq!(o.code, 1);
    assert!(o.json()["error"].as_str().unwrap().starts_with("Invalid node: TESTER. Valid: ['PLANNER'"), "{}", o.stdout);
    // Only transitions move the node or spend the budget.
    let o = state(&work, &["set", "current_node", "CONSOLIDATOR"]);
    assert_eq!(o.code, 1);
    assert!(o.stdout.contains("changes only through `transition`"), "{}", o.stdout);
    assert_eq!(state(&work, &["dump"]).json(), before);
    assert_eq!(state(&work, &["history", "--json"]).json().as_array().unwrap().len(), 1, "nothing was written");
}

#[test]
fn the_fourth_reflection_escalates_instead() {
    let work = Work::new();
    assert_eq!(state(&work, &["init"]).code, 0);
    for node in ["REASONER", "CODER", "VERIFIER"] {
        assert_eq!(state(&work, &["transition", node]).code, 0);
    }
    for spent in 1..=3 {
        let o = state(&work, &["transition", "REFLECTOR"]);
        assert_eq!(o.code, 0, "{}", o.stdout);
        assert_eq!(state(&work, &["get", "retry_count"]).json()["value"], spent);
        assert_eq!(state(&work, &["transition", "CODER"]).code, 0);
        assert_eq!(state(&work, &["transition", "VERIFIER"]).code, 0);
    }
    let o = state(&work, &["transition", "REFLECTOR"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.json()["error"],
        "the retry budget is spent (3 of 3): the episode escalates instead of entering REFLECTOR"
    );
    let history = state(&work, &["history", "--json"]).json();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!((&last["status"], &last["node"]), (&json!("escalated"), &json!("VERIFIER")));
    assert_eq!(last["command"], "transition REFLECTOR (escalated)");
    // Consolidating is still allowed, and archives the episode.
    assert_eq!(state(&work, &["transition", "CONSOLIDATOR"]).code, 0);
    let history = state(&work, &["history", "--json"]).json();
    assert_eq!(history.as_array().unwrap().last().unwrap()["status"], "archived");
}

/// Every change is a numbered version; `show --at` reads one and
/// `checkout` makes it the head again without losing the ones after.
#[test]
fn versions_are_kept_shown_and_checked_out() {
    let work = Work::new();
    assert_eq!(state(&work, &["init"]).code, 0);
    assert_eq!(state(&work, &["set", "user_query", "first"]).code, 0);
    assert_eq!(state(&work, &["set", "user_query", "second"]).code, 0);
    let history = state(&work, &["history", "--json"]).json();
    let commands: Vec<&str> = history.as_array().unwrap().iter().map(|h| h["command"].as_str().unwrap()).collect();
    assert_eq!(commands, ["init", "set user_query", "set user_query"]);
    assert_eq!(state(&work, &["show", "--at", "2"]).json()["user_query"], "first");
    let o = state(&work, &["checkout", "2"]);
    assert_eq!((o.code, o.json()), (0, json!({"success": true, "checked_out": 2, "version": 4})));
    assert_eq!(state(&work, &["get", "user_query"]).json()["value"], "first");
    assert_eq!(state(&work, &["show", "--at", "3"]).json()["user_query"], "second", "history kept");
    let o = state(&work, &["show", "--at", "9"]);
    assert_eq!((o.code, o.json()), (1, json!({"error": "no version 9 of the state"})));
    let text = state(&work, &["history"]);
    assert_eq!(text.stdout.lines().count(), 4);
    assert!(text.stdout.lines().last().unwrap().trim_end().ends_with("checkout 2"), "{}", text.stdout);
}

/// 16 processes appending at once: every value is there exactly once.
#[test]
fn sixteen_concurrent_updates_lose_nothing() {
    let work = Work::new();
    assert_eq!(state(&work, &["init"]).code, 0);
    let children: Vec<_> = (0..16)
        .map(|i| {
            work.noesis_std()
                .args(["state", "update", "error_log", &format!("e{i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    let log = state(&work, &["get", "error_log"]).json()["value"].clone();
    let mut got: Vec<String> = log.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    got.sort();
    let mut want: Vec<String> = (0..16).map(|i| format!("e{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(state(&work, &["history", "--json"]).json().as_array().unwrap().len(), 17);
}

/// imlazy's own file: imported, and kept current with --mirror-imlazy.
#[test]
fn imlazys_state_file_is_imported_and_mirrored() {
    let work = Work::new();
    let file = work.path().join(".imlazy/working/state.json");
    let mut theirs = json!({"user_query": "theirs", "current_node": "CODER", "retry_count": 1, "max_retries": 3,
        "thought_trace": [], "episode_id": "abcd0001", "project_hash": "12345678", "a_hook_field": {"kept": true}});
    work.write(".imlazy/working/state.json", &theirs.to_string());
    let o = state(&work, &["import"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let head = state(&work, &["dump"]).json();
    assert_eq!(head["a_hook_field"], json!({"kept": true}), "fields of theirs survive");
    assert_eq!(head["current_node"], "CODER");
    // From CODER the table allows VERIFIER; the mirror gets every change.
    let o = state(&work, &["transition", "VERIFIER", "--mirror-imlazy"]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    let mirrored: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(mirrored, state(&work, &["dump"]).json());
    assert_eq!(mirrored["current_node"], "VERIFIER");
    // A config key does the same.
    work.write("noesis.toml", "[workflow]\nmirror_imlazy = true\n");
    assert_eq!(state(&work, &["set", "user_query", "via config"]).code, 0);
    let mirrored: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(mirrored["user_query"], "via config");
    // A file that is not a state is refused by name, and nothing is written.
    let versions = state(&work, &["history", "--json"]).json().as_array().unwrap().len();
    theirs["current_node"] = json!("SOMEWHERE");
    let bad = work.write("bad.json", &theirs.to_string());
    let o = state(&work, &["import", bad.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    let e = o.json()["error"].as_str().unwrap().to_owned();
    assert!(e.contains("bad.json") && e.contains("current_node"), "{e}");
    let o = state(&work, &["import", "missing.json"]);
    assert_eq!(o.code, 1);
    assert!(o.json()["error"].as_str().unwrap().contains("missing.json"), "{}", o.stdout);
    assert_eq!(state(&work, &["history", "--json"]).json().as_array().unwrap().len(), versions);
}
