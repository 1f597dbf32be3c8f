//! `noesis agent` end to end: the binary against the fake OpenAI server on
//! 127.0.0.1, a real workspace and a real SQLite store, one process per
//! step where a person would come back later.

use std::time::Duration;

use noesis_testkit::{FakeServer, Reply, tool_call_completion, tool_loop};
use serde_json::{Value, json};

use crate::support::{Output, Work, output};

fn call(id: &str, tool: &str, args: Value) -> Reply {
    Reply::Status(200, tool_call_completion(id, tool, &args).to_string(), vec![])
}

/// `noesis agent …` talking to `server`, tools confined to `work/ws`.
fn agent(work: &Work, server: &FakeServer) -> assert_cmd::Command {
    let mut c = work.noesis_bare();
    c.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test").arg("agent");
    c
}

fn ws(work: &Work) -> String {
    std::fs::create_dir_all(work.path().join("ws")).unwrap();
    work.path().join("ws").to_string_lossy().into_owned()
}

fn runs(work: &Work) -> Vec<Value> {
    let o = output(work.noesis_bare().args(["agent", "list", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    o.json().as_array().unwrap().clone()
}

fn shown(work: &Work, run: &str) -> Value {
    let o = output(work.noesis_bare().args(["agent", "show", run, "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    o.json()
}

fn tool_messages(server: &FakeServer, request: usize) -> Vec<Value> {
    let body = server.received()[request].json();
    body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect()
}

#[test]
fn reads_edits_runs_the_test_and_answers() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "teh cat\n");
    work.write("ws/check.sh", "grep -q 'the cat' a.txt && echo PASS\n");
    let server = FakeServer::start(vec![
        call("c1", "read_file", json!({"path": "a.txt"})),
        call("c2", "edit_file", json!({"path": "a.txt", "old": "teh", "new": "the"})),
        call("c3", "run_command", json!({"command": "sh check.sh"})),
        Reply::Chat("Fixed; the check passes.".into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).args([
        "Fix the typo in a.txt",
        "--workspace",
        &ws,
        "--approve",
        "auto",
        "--allow-command",
        "sh check.sh",
    ]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Fixed; the check passes.\n"), "{}", o.stderr);
    // Live steps went to stderr.
    assert!(o.stderr.contains("act     edit_file path=a.txt") && o.stderr.contains("think   turn 4"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(work.path().join("ws/a.txt")).unwrap(), "the cat\n");
    let listed = runs(&work);
    assert_eq!((listed.len(), listed[0]["status"].as_str()), (1, Some("done")));
    let run = shown(&work, listed[0]["run_id"].as_str().unwrap());
    let statuses: Vec<&str> = run["calls"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "completed", "completed"]);
    // The read cites the file as it was read; the command its exit code.
    let read = &run["calls"][0]["evidence"][0];
    assert_eq!(read["path"], "a.txt");
    assert_eq!(read["blake3"], noesis_frames::scan::hash_bytes(b"teh cat\n"));
    assert_eq!(run["calls"][2]["evidence"][0]["exit_code"], 0);
    assert!(run["calls"][2]["result"].as_str().unwrap().contains("PASS"));
    // The model saw every result, in call order.
    let ids: Vec<String> =
        tool_messages(&server, 3).iter().map(|m| m["tool_call_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
}

#[test]
fn json_outcome_and_a_stop_by_budget() {
    let work = Work::new();
    let ws = ws(&work);
    for k in 0..5 {
        work.write(&format!("ws/d{k}/f"), "");
    }
    // A different folder each time: no repeat detection, only the turn limit.
    let server =
        FakeServer::start(vec![tool_loop("list_dir", 100, |k| json!({"path": format!("d{k}")}), "never")]).unwrap();
    let o = output(agent(&work, &server).args(["Loop", "--workspace", &ws, "--max-iterations", "3", "--json"]));
    assert_eq!(o.code, 1, "{}", o.stderr);
    let out = o.json();
    assert_eq!(out["status"], "stopped");
    assert_eq!(out["outcome"]["reason"], "max_turns");
    assert_eq!(out["usage"]["turns"], 3);
    assert_eq!(out["answer"], Value::Null);
    assert!(o.stderr.contains("stopped (max_turns)"), "{}", o.stderr);
}

#[test]
fn a_pause_for_approval_survives_a_new_process() {
    let work = Work::new();
    let ws = ws(&work);
    let server = FakeServer::start(vec![
        call("w1", "write_file", json!({"path": "b.txt", "content": "x"})),
        Reply::Chat("Written.".into()),
    ])
    .unwrap();
    // Not a terminal: the run pauses instead of asking.
    let o = output(agent(&work, &server).args(["Write b.txt", "--workspace", &ws, "--run-id", "r-approve"]));
    assert_eq!((o.code, o.stdout.as_str()), (3, ""), "{}", o.stderr);
    assert!(o.stderr.contains("waits for approval") && o.stderr.contains("w1"), "{}", o.stderr);
    assert!(!work.path().join("ws/b.txt").exists(), "nothing is written before approval");
    assert_eq!(runs(&work)[0]["status"], "awaiting_approval");
    // Resuming without a decision pauses again, still with nothing run.
    let o = output(agent(&work, &server).args(["resume", "r-approve"]));
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(server.received().len(), 1, "no second model call while the decision is open");
    // Decided in one process (by a prefix of the id), continued in another.
    let o = output(work.noesis_bare().args(["agent", "approve", "r-appr"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("approved w1 (write_file)"), "{}", o.stderr);
    let o = output(agent(&work, &server).args(["resume", "r-approve"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Written.\n"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(work.path().join("ws/b.txt")).unwrap(), "x");
}

#[test]
fn deny_edit_abort_and_stale_decisions() {
    let work = Work::new();
    let ws = ws(&work);
    // Each run is asked to write first, then answers: the reply follows the
    // conversation, so three runs can share the server.
    let server = FakeServer::start(vec![tool_loop(
        "write_file",
        1,
        |_| json!({"path": "b.txt", "content": "x"}),
        "Understood, not writing.",
    )])
    .unwrap();
    let start = |id: &str| output(agent(&work, &server).args(["Write b.txt", "--workspace", &ws, "--run-id", id]));
    // Deny with a message: the model sees it as the call's result.
    assert_eq!(start("r-deny").code, 3);
    let o = output(work.noesis_bare().args(["agent", "deny", "r-deny", "call_0", "-m", "not today"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = output(agent(&work, &server).args(["resume", "r-deny"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Understood, not writing.\n"), "{}", o.stderr);
    let results = tool_messages(&server, 1);
    assert!(results[0]["content"].as_str().unwrap().contains("denied by the user: not today"), "{results:?}");
    assert!(!work.path().join("ws/b.txt").exists());

    // A decision for other arguments than the call's is refused, nothing changes.
    assert_eq!(start("r-edit").code, 3);
    let o = output(work.noesis_bare().args(["agent", "approve", "r-edit", "call_0", "--hash", "0000"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("arguments that differ"), "{}", o.stderr);
    // Edited arguments must fit the tool's schema.
    let o = output(work.noesis_bare().args(["agent", "approve", "r-edit", "call_0", "--args", r#"{"path": 3}"#]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("invalid"), "{}", o.stderr);
    assert_eq!(runs(&work).iter().find(|r| r["run_id"] == "r-edit").unwrap()["status"], "awaiting_approval");
    let hash = shown(&work, "r-edit")["calls"][0]["arguments_hash"].as_str().unwrap().to_owned();
    let edited = r#"{"path": "c.txt", "content": "edited"}"#;
    let o =
        output(work.noesis_bare().args(["agent", "approve", "r-edit", "call_0", "--args", edited, "--hash", &hash]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = output(agent(&work, &server).args(["resume", "r-edit"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(work.path().join("ws/c.txt")).unwrap(), "edited");
    assert!(!work.path().join("ws/b.txt").exists());

    // Abort ends the run for good.
    assert_eq!(start("r-abort").code, 3);
    let o = output(work.noesis_bare().args(["agent", "deny", "r-abort", "--abort", "-m", "wrong task"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let run = shown(&work, "r-abort");
    assert_eq!(run["outcome"], json!({"outcome": "aborted", "message": "wrong task"}));
    let o = output(agent(&work, &server).args(["resume", "r-abort"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("nothing to resume"), "{}", o.stderr);
    // No decision is open any more.
    let o = output(work.noesis_bare().args(["agent", "approve", "r-abort"]));
    assert_eq!(o.code, 2);
}

fn finished_run(work: &Work, ws: &str) -> String {
    work.write("ws/log.sh", "echo \"$1\" >> log.txt\n");
    let server = FakeServer::start(vec![tool_loop(
        "run_command",
        3,
        |k| json!({"command": format!("sh log.sh {k}")}),
        "logged",
    )])
    .unwrap();
    let o = output(agent(work, &server).args([
        "Log three lines",
        "--workspace",
        ws,
        "--approve",
        "auto",
        "--allow-command",
        "sh log.sh",
        "--run-id",
        "r-rec",
    ]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "logged\n"), "{}", o.stderr);
    "r-rec".into()
}

#[test]
fn replay_needs_no_network_and_runs_nothing() {
    let work = Work::new();
    let ws = ws(&work);
    let run = finished_run(&work, &ws);
    let log = std::fs::read_to_string(work.path().join("ws/log.txt")).unwrap();
    assert_eq!(log, "0\n1\n2\n");
    // The server is gone: any model call would fail.
    let o = output(work.noesis_bare().args(["agent", "replay", &run]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("the replay matches the record"), "{}", o.stderr);
    assert_eq!(o.stdout.matches("tool run_command").count(), 3, "{}", o.stdout);
    assert_eq!(std::fs::read_to_string(work.path().join("ws/log.txt")).unwrap(), log, "replay ran a tool");
    // From a middle step, as JSON.
    let o = output(work.noesis_bare().args(["agent", "replay", &run, "--from", "5", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r = o.json();
    assert_eq!((r["matches"].clone(), r["diverged"].clone()), (json!(true), Value::Null));
    assert_eq!(r["outcome"], json!({"outcome": "answer", "text": "logged"}));
}

#[test]
fn fork_leaves_the_original_byte_identical() {
    let work = Work::new();
    let ws = ws(&work);
    let run = finished_run(&work, &ws);
    let before = output(work.noesis_bare().args(["agent", "show", &run, "--json"])).stdout;
    let o = output(work.noesis_bare().args(["agent", "fork", &run, "--at", "4", "--no-run"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let fork = o.stdout.trim().to_owned();
    assert_ne!(fork, run);
    let after = output(work.noesis_bare().args(["agent", "show", &run, "--json"])).stdout;
    assert_eq!(before, after, "the original changed");
    let forked = shown(&work, &fork);
    assert_eq!(forked["forked_from"][0], run.as_str());
    assert!(forked["forked_from"][1].as_u64().unwrap() <= 4);
    // Driven on, the fork finishes by itself; the original still does not move.
    let server = FakeServer::start(vec![tool_loop(
        "run_command",
        3,
        |k| json!({"command": format!("sh log.sh {k}")}),
        "forked",
    )])
    .unwrap();
    let o = output(agent(&work, &server).args(["resume", &fork]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "forked\n"), "{}", o.stderr);
    assert_eq!(output(work.noesis_bare().args(["agent", "show", &run, "--json"])).stdout, before);
    let listed = runs(&work);
    assert_eq!(listed.len(), 2);
    assert_eq!(listed.iter().find(|r| r["run_id"] == fork.as_str()).unwrap()["forked_from"], run.as_str());
}

#[test]
fn ctrl_c_checkpoints_the_run_as_cancelled_and_resumable() {
    let work = Work::new();
    let ws = ws(&work);
    let slow =
        FakeServer::start(vec![Reply::Delay(Duration::from_secs(20), Box::new(Reply::Chat("late".into())))]).unwrap();
    let child = work
        .noesis_std()
        .env("OPENAI_BASE_URL", slow.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .args(["agent", "Answer", "--workspace", &ws, "--run-id", "r-int"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the request is out, then interrupt.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while slow.received().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the model was never called");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(130), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(shown(&work, "r-int")["outcome"], json!({"outcome": "cancelled"}));
    let fast = FakeServer::start(vec![Reply::Chat("on time".into())]).unwrap();
    let o: Output = output(agent(&work, &fast).args(["resume", "r-int"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "on time\n"), "{}", o.stderr);
}

#[test]
fn a_run_is_a_frame_tree_and_a_changed_file_invalidates_exactly_the_runs_that_read_it() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "alpha\n");
    work.write("ws/b.txt", "beta\n");
    assert_eq!(output(work.noesis_bare().args(["session", "start", "--prompt", "read things"])).code, 0);
    for (file, answer) in [("a.txt", "A says alpha"), ("b.txt", "B says beta")] {
        let server =
            FakeServer::start(vec![call("r1", "read_file", json!({"path": file})), Reply::Chat(answer.into())])
                .unwrap();
        let o = output(agent(&work, &server).args([&format!("What is in {file}?"), "--workspace", &ws]));
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let frames = || {
        let o = output(work.noesis_bare().args(["frames", "list", "--json"]));
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.json().as_array().unwrap().clone()
    };
    let all = frames();
    let by_query = |q: &str| all.iter().find(|f| f["query"] == q).unwrap_or_else(|| panic!("no frame {q}: {all:#?}"));
    let root_a = by_query("What is in a.txt?");
    assert_eq!(root_a["conclusion"], "A says alpha");
    assert_eq!(root_a["depth"], 1, "under the session's root");
    let id = |f: &Value| f["frame_id"].as_str().unwrap().to_owned();
    let children = |parent: &Value| -> Vec<Value> {
        all.iter().filter(|f| f["parent_id"].as_str() == Some(&id(parent))).cloned().collect()
    };
    let kids: Vec<String> = children(root_a).iter().map(|f| f["query"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kids, ["model turn 1", "model turn 2", "answer"]);
    let turn1 = children(root_a).into_iter().find(|f| f["query"] == "model turn 1").unwrap();
    let read = children(&turn1);
    assert_eq!(read.len(), 1);
    assert!(read[0]["query"].as_str().unwrap().starts_with("read_file"), "{}", read[0]);
    let file_ev = read[0]["evidence"].as_array().unwrap().iter().find(|e| e["path"].is_string()).unwrap().clone();
    assert_eq!(file_ev["path"], "ws/a.txt");
    assert_eq!(file_ev["hash"], noesis_frames::scan::hash_bytes(b"alpha\n"));
    // The answer cites the observation it used.
    let answer = children(root_a).into_iter().find(|f| f["query"] == "answer").unwrap();
    assert!(answer["evidence"].as_array().unwrap().iter().any(|e| e["frame_id"] == read[0]["frame_id"]), "{answer}");
    // The run names its root frame.
    let run = runs(&work).into_iter().find(|r| r["task"] == "What is in a.txt?").unwrap();
    assert_eq!(shown(&work, run["run_id"].as_str().unwrap())["host"]["frame_id"], root_a["frame_id"]);

    work.write("ws/a.txt", "changed\n");
    assert_eq!(output(work.noesis_bare().args(["session", "start", "--prompt", "read things"])).code, 0);
    let after = frames();
    let status_of =
        |q: &str| after.iter().find(|f| f["query"] == q).map(|f| f["status"].as_str().unwrap().to_owned()).unwrap();
    assert_eq!(status_of("What is in a.txt?"), "invalidated");
    assert_eq!(status_of("What is in b.txt?"), "completed");
    let b_root = after.iter().find(|f| f["query"] == "What is in b.txt?").unwrap();
    let b_tree: Vec<&Value> =
        after.iter().filter(|f| f["parent_id"] == b_root["frame_id"] || f["frame_id"] == b_root["frame_id"]).collect();
    assert!(b_tree.iter().all(|f| f["status"] == "completed"), "{b_tree:#?}");
}

#[test]
fn run_module_gives_the_envelope_as_the_observation() {
    let work = Work::new();
    let ws = ws(&work);
    let module = crate::support::example_module("code-simplifier");
    let read = |p: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(module.join(p)).unwrap()).unwrap() };
    let input = read("tests/case1.input.json");
    let example = read("tests/case1.expected.json")["$example"].clone();
    let server = FakeServer::start(vec![
        call("m1", "run_module", json!({"module": "code-simplifier", "input": input})),
        // The module's own model call, through the same provider.
        Reply::Chat(example.to_string()),
        Reply::Chat("Simplified.".into()),
    ])
    .unwrap();
    let modules = module.parent().unwrap().to_string_lossy().into_owned();
    let o = output(
        agent(&work, &server)
            .args(["Simplify it", "--workspace", &ws, "--run-id", "r-mod"])
            .args(["--modules", &modules]),
    );
    assert_eq!((o.code, o.stdout.as_str()), (0, "Simplified.\n"), "{}", o.stderr);
    let c = &shown(&work, "r-mod")["calls"][0];
    assert_eq!(c["status"], "completed", "{c}");
    let envelope: Value = serde_json::from_str(c["result"].as_str().unwrap()).unwrap();
    assert_eq!((envelope["ok"].clone(), envelope["data"].clone()), (json!(true), example["data"].clone()));
    assert_eq!(c["evidence"][0]["kind"], "envelope");
    assert_eq!(c["evidence"][0]["module"], "code-simplifier");
    // The module's request carried the module's prompt, not the agent's tools.
    let module_request = server.received()[1].json();
    assert!(module_request.get("tools").is_none(), "{module_request}");
}

#[test]
fn search_frames_and_open_frame_navigate_past_runs() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "alpha\n");
    let first = FakeServer::start(vec![
        call("r1", "read_file", json!({"path": "a.txt"})),
        Reply::Chat("It says alpha.".into()),
    ])
    .unwrap();
    assert_eq!(output(agent(&work, &first).args(["What does a.txt say?", "--workspace", &ws])).code, 0);
    // The second run searches, then opens the first hit by the id it read.
    let server = FakeServer::start(vec![Reply::respond(|request| {
        let results: Vec<String> = request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        let body = match results.len() {
            0 => tool_call_completion("s1", "search_frames", &json!({"text": "says alpha", "status": "completed"})),
            1 => {
                let id = results[0].split(' ').next().unwrap_or_default();
                tool_call_completion("o1", "open_frame", &json!({"frame_id": id}))
            }
            _ => return Reply::Chat("I remember: alpha.".into()),
        };
        Reply::Status(200, body.to_string(), vec![])
    })])
    .unwrap();
    let o = output(agent(&work, &server).args(["What did I learn before?", "--workspace", &ws, "--run-id", "r-mem"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "I remember: alpha.\n"), "{}", o.stderr);
    let run = shown(&work, "r-mem");
    let search = run["calls"][0]["result"].as_str().unwrap();
    assert!(search.contains("completed") && search.contains("It says alpha."), "{search}");
    let opened = run["calls"][1]["result"].as_str().unwrap();
    let opened: Value = serde_json::from_str(opened).unwrap_or_else(|e| panic!("{e}: {opened}\n{search}"));
    assert_eq!(opened["conclusion"], "It says alpha.");
    assert!(opened["evidence"].is_array() && opened["invalidation_condition"].is_object(), "{opened}");
    assert_eq!(run["calls"][1]["evidence"][0]["frame_id"], opened["frame_id"]);
    assert_eq!(run["calls"][1]["status"], "completed");
}

#[test]
fn a_sub_agent_runs_as_its_own_stored_run_and_hangs_under_the_call() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "alpha\n");
    let server = FakeServer::start(vec![
        call("s1", "sub_agent", json!({"task": "Read a.txt and say what it holds."})),
        // The child's turns.
        call("c1", "read_file", json!({"path": "a.txt"})),
        Reply::Chat("a.txt holds alpha".into()),
        // The parent again.
        Reply::Chat("The helper found: alpha.".into()),
    ])
    .unwrap();
    // Under `ask`, handing work to a sub-agent waits for a person.
    let o = output(agent(&work, &server).args(["Delegate", "--workspace", &ws, "--run-id", "r-par"]));
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(output(work.noesis_bare().args(["agent", "approve", "r-par"])).code, 0);
    let o = output(agent(&work, &server).args(["resume", "r-par"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "The helper found: alpha.\n"), "{}", o.stderr);
    let parent = shown(&work, "r-par");
    assert_eq!(parent["calls"][0]["result"], "a.txt holds alpha");
    assert_eq!(parent["calls"][0]["evidence"][0], json!({"kind": "sub_agent", "run_id": "r-par.s1"}));
    let child = shown(&work, "r-par.s1");
    assert_eq!(child["host"]["parent_run"], "r-par");
    assert_eq!(child["host"]["depth"], 1);
    assert_eq!(child["calls"][0]["tool"], "read_file");
    // Frames: the child's run hangs under the parent's sub_agent call.
    let frames = output(work.noesis_bare().args(["frames", "list", "--json"])).json();
    let all = frames.as_array().unwrap();
    let find = |q: &str| all.iter().find(|f| f["query"].as_str().is_some_and(|x| x.starts_with(q))).unwrap().clone();
    let call_frame = find("sub_agent ");
    let child_root = find("Read a.txt and say what it holds.");
    assert_eq!(child_root["parent_id"], call_frame["frame_id"]);
    assert!(all.iter().any(|f| f["query"].as_str().unwrap().starts_with("read_file")
        && f["evidence"].as_array().unwrap().iter().any(|e| e["path"] == "ws/a.txt")));
}

#[test]
fn a_session_remembers_earlier_tasks_and_answers() {
    let work = Work::new();
    let ws = ws(&work);
    let server = FakeServer::start(vec![Reply::Chat("Noted.".into()), Reply::Chat("Ada.".into())]).unwrap();
    let o = output(agent(&work, &server).args(["My name is Ada.", "--workspace", &ws, "--session", "s1"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = output(agent(&work, &server).args(["What is my name?", "--workspace", &ws, "--session", "s1"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Ada.\n"), "{}", o.stderr);
    let o = output(agent(&work, &server).args(["What is my name?", "--workspace", &ws, "--session", "other"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let user_text = |i: usize| -> String {
        let body = server.received()[i].json();
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .collect()
    };
    let second = user_text(1);
    assert!(
        second.contains("What you remember") && second.contains("My name is Ada.") && second.contains("Noted."),
        "{second}"
    );
    assert!(!user_text(2).contains("Ada"), "another session remembers nothing: {}", user_text(2));
    // The listing shows the task as typed, not with the memory.
    assert!(runs(&work).iter().any(|r| r["task"] == "What is my name?"));
}

#[test]
fn agent_settings_come_from_noesis_toml() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/ok.sh", "echo fine\n");
    work.write("noesis.toml", "[agent]\nallow_commands = [\"sh ok.sh\"]\napprove = \"auto\"\nmax_iterations = 5\n");
    let server =
        FakeServer::start(vec![call("c1", "run_command", json!({"command": "sh ok.sh"})), Reply::Chat("ok".into())])
            .unwrap();
    let o = output(agent(&work, &server).args(["Check", "--workspace", &ws, "--run-id", "r-cfg"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "ok\n"), "{}", o.stderr);
    let run = shown(&work, "r-cfg");
    assert_eq!(run["calls"][0]["status"], "completed");
    assert_eq!(run["config"]["limits"]["max_turns"], 5);
    work.write("noesis.toml", "[agent]\napprove = \"sometimes\"\n");
    let o = output(agent(&work, &server).args(["Check", "--workspace", &ws]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("agent.approve") && o.stderr.contains("sometimes"), "{}", o.stderr);
    // Bad flags are usage errors naming what is wrong.
    std::fs::remove_file(work.path().join("noesis.toml")).unwrap();
    let o = output(agent(&work, &server).args(["Check", "--tool", "teleport"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--tool/--no-tool teleport") && o.stderr.contains("read_file"), "{}", o.stderr);
    let o = output(agent(&work, &server).args(["   "]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("the task is empty"), "{}", o.stderr);
    let o = output(agent(&work, &server).args(["Check", "--workspace", "/no/such/dir"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("/no/such/dir"), "{}", o.stderr);
}

/// `noesis agent …` under a pseudo-terminal, talking to `server`.
fn in_terminal(work: &Work, server: &FakeServer, args: &str, answers: &str) -> Output {
    let envs = [("OPENAI_BASE_URL", server.base_url()), ("OPENAI_API_KEY", "sk-test".to_owned())];
    // A terminal streams by default; these scripts answer whole replies.
    crate::support::in_terminal(work, &envs, &format!("agent {args} --no-stream"), answers)
}

#[test]
fn in_a_terminal_the_cli_asks_and_an_edit_or_an_abort_is_honoured() {
    let work = Work::new();
    let ws = ws(&work);
    let server =
        FakeServer::start(vec![tool_loop("write_file", 1, |_| json!({"path": "b.txt", "content": "x"}), "Done.")])
            .unwrap();
    let o = in_terminal(
        &work,
        &server,
        &format!("'Write b.txt' --workspace {ws} --run-id r-tty"),
        "e\n{\"path\": \"c.txt\", \"content\": \"typed\"}\n",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("approve write_file path=b.txt content=x?"), "{}", o.stdout);
    assert!(o.stdout.contains("Done."), "{}", o.stdout);
    assert_eq!(std::fs::read_to_string(work.path().join("ws/c.txt")).unwrap(), "typed");
    assert!(!work.path().join("ws/b.txt").exists());
    let o = in_terminal(&work, &server, &format!("'Write b.txt' --workspace {ws} --run-id r-tty2"), "a\n");
    // A slow model gets a spinner while it thinks.
    let slow =
        FakeServer::start(vec![Reply::Delay(Duration::from_millis(600), Box::new(Reply::Chat("Hi.".into())))]).unwrap();
    let spun = in_terminal(&work, &slow, &format!("'Say hi' --workspace {ws}"), "");
    assert_eq!(spun.code, 0, "{}", spun.stdout);
    assert!(spun.stdout.contains("thinking (turn 1)") && spun.stdout.contains("Hi."), "{}", spun.stdout);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(shown(&work, "r-tty2")["outcome"]["outcome"], "aborted");
    assert!(!work.path().join("ws/b.txt").exists());
}

#[test]
fn an_endpoint_marked_without_tools_gets_the_text_protocol() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "alpha\n");
    work.write("noesis.toml", "[providers.openai]\ntools = false\n");
    let server = FakeServer::start(vec![
        Reply::Chat(r#"{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}"#.into()),
        Reply::Chat(r#"{"response": "alpha"}"#.into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).args(["Read a.txt", "--workspace", &ws, "--run-id", "r-text"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "alpha\n"), "{}", o.stderr);
    assert!(server.received()[0].json().get("tools").is_none());
    assert_eq!(shown(&work, "r-text")["calls"][0]["status"], "completed");
}

/// The installed filesystem MCP server's program, or `None` (skipped
/// loudly) when it is not installed and the opt-out is set.
fn filesystem_server(test: &str) -> Option<String> {
    match std::env::var("NOESIS_MCP_SERVER_FILESYSTEM").ok().filter(|p| std::path::Path::new(p).exists()) {
        Some(p) => Some(p),
        None => {
            noesis_testkit::skip::missing(
                noesis_testkit::skip::Dependency::McpServers,
                test,
                "NOESIS_MCP_SERVER_FILESYSTEM does not name an installed server",
            );
            None
        }
    }
}

#[test]
fn mcp_server_tools_from_the_config_pause_for_approval_and_reconnect_on_resume() {
    let Some(fs) = filesystem_server("mcp_server_tools_from_the_config") else { return };
    let work = Work::new();
    let ws = ws(&work);
    let shared = work.path().join("shared").canonicalize().unwrap_or_else(|_| {
        std::fs::create_dir_all(work.path().join("shared")).unwrap();
        work.path().join("shared").canonicalize().unwrap()
    });
    std::fs::write(shared.join("in.txt"), "7\n").unwrap();
    // Trust is the user's to give (a project's noesis.toml cannot).
    let user = work.write(
        "user.toml",
        &format!("[mcp.servers.files]\ncommand = {fs:?}\nargs = [{:?}]\ntrusted = true\n", shared.to_str().unwrap()),
    );
    let server = FakeServer::start(vec![
        call("m1", "files__read_text_file", json!({"path": shared.join("in.txt")})),
        call("m2", "files__write_file", json!({"path": shared.join("out.txt"), "content": "14"})),
        Reply::Chat("Doubled.".into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).env("NOESIS_CONFIG", &user).args([
        "Double in.txt",
        "--workspace",
        &ws,
        "--run-id",
        "r-mcp",
    ]));
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert!(o.stderr.contains("starting MCP server files"), "{}", o.stderr);
    // The model was offered the server's tools under the server's name.
    let offered: Vec<String> = server.received()[0].json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(offered.contains(&"files__read_text_file".to_owned()), "{offered:?}");
    // The read ran without asking; the write waits.
    let run = shown(&work, "r-mcp");
    assert_eq!(run["calls"][0]["status"], "completed");
    assert_eq!(run["calls"][0]["evidence"][0]["kind"], "mcp");
    assert_eq!(run["calls"][0]["evidence"][0]["outcome"], "ok");
    assert_eq!(run["calls"][1]["status"], "awaiting_approval");
    assert!(!shared.join("out.txt").exists());
    let o = output(work.noesis_bare().args(["agent", "approve", "r-mcp"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Another process: the server is started again from the config.
    let o = output(agent(&work, &server).env("NOESIS_CONFIG", &user).args(["resume", "r-mcp"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Doubled.\n"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(shared.join("out.txt")).unwrap(), "14");
}

/// Issue 25: a server's `readOnlyHint` approves nothing unless the server
/// is configured `trusted = true`.
#[test]
fn an_untrusted_mcp_servers_read_only_tool_waits_for_approval() {
    let Some(fs) = filesystem_server("an_untrusted_mcp_servers_read_only_tool") else { return };
    let work = Work::new();
    let ws = ws(&work);
    std::fs::create_dir_all(work.path().join("shared")).unwrap();
    let shared = work.path().join("shared").canonicalize().unwrap();
    std::fs::write(shared.join("in.txt"), "7\n").unwrap();
    work.write(
        "noesis.toml",
        &format!("[mcp.servers.files]\ncommand = {fs:?}\nargs = [{:?}]\n", shared.to_str().unwrap()),
    );
    let server = FakeServer::start(vec![
        call("m1", "files__read_text_file", json!({"path": shared.join("in.txt")})),
        Reply::Chat("7".into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).args(["Read in.txt", "--workspace", &ws, "--run-id", "r-untrusted"]));
    assert_eq!(o.code, 3, "{}", o.stderr);
    let run = shown(&work, "r-untrusted");
    assert_eq!(run["calls"][0]["status"], "awaiting_approval");
    assert_eq!(run["calls"][0]["evidence"], Value::Null, "nothing was read before the decision");
    let offered = server.received()[0].json()["tools"].to_string();
    assert!(offered.contains("says it is read-only, but the server is not trusted"), "{offered}");
}

#[test]
fn the_agent_drives_noesis_own_mcp_server_through_the_mcp_flag() {
    let work = Work::new();
    let ws = ws(&work);
    let bin = assert_cmd::cargo::cargo_bin("noesis");
    let flag = format!("self={} mcp --provider test", bin.to_string_lossy());
    let server = FakeServer::start(vec![call("s1", "self__list", json!({})), Reply::Chat("Listed.".into())]).unwrap();
    // A server named by a flag is not trusted: a rule lets its tools run.
    let o = output(agent(&work, &server).args([
        "What modules are there?",
        "--workspace",
        &ws,
        "--mcp",
        &flag,
        "--allow-tool",
        "mcp:self__*",
    ]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Listed.\n"), "{}", o.stderr);
    let result = &tool_messages(&server, 1)[0];
    assert!(result["content"].as_str().unwrap().contains("\"valid\""), "{result}");
    // A flag that is not NAME=COMMAND is refused before anything starts.
    let o = output(agent(&work, &server).args(["x", "--workspace", &ws, "--mcp", "no-equals-sign"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--mcp no-equals-sign") && o.stderr.contains("NAME="), "{}", o.stderr);
    // A bad config entry names the file and the field.
    work.write("noesis.toml", "[mcp.servers.x]\nargs = [\"a\"]\n");
    let o = output(agent(&work, &server).args(["x", "--workspace", &ws]));
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("mcp.servers.x") && o.stderr.contains("give `command`"), "{}", o.stderr);
}

/// Two OpenAI-wire endpoints on 127.0.0.1, as `alpha` and `beta`.
fn two_endpoints(work: &Work, alpha: &FakeServer, beta: &FakeServer, roles: &str) {
    work.write(
        "noesis.toml",
        &format!(
            "provider = \"alpha\"\n\n[providers.alpha]\nwire = \"openai\"\nbase_url = \"{}\"\nmodel = \"m-alpha\"\n\n\
             [providers.beta]\nwire = \"openai\"\nbase_url = \"{}\"\nmodel = \"m-beta\"\n\n{roles}",
            alpha.base_url(),
            beta.base_url()
        ),
    );
}

#[test]
fn each_role_goes_where_its_policy_says_and_the_reason_is_kept() {
    let work = Work::new();
    let ws = ws(&work);
    let critique = r#"{"goal_achieved": true, "what_went_wrong": "", "next_step": ""}"#;
    let alpha = FakeServer::start(vec![Reply::Chat("The answer is 4.".into())]).unwrap();
    let beta = FakeServer::start(vec![Reply::Chat(critique.into())]).unwrap();
    two_endpoints(&work, &alpha, &beta, "[agent.roles.reflect]\nprovider = \"beta\"\n");
    let o =
        output(work.noesis_bare().args(["agent", "What is 2+2?", "--workspace", &ws, "--reflect", "--run-id", "r1"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "The answer is 4.\n"), "{}", o.stderr);
    // think went to alpha (no policy: the run's provider), reflect to beta.
    assert_eq!((alpha.received().len(), beta.received().len()), (1, 1));
    assert_eq!(beta.received()[0].json()["model"], "m-beta");
    let run = shown(&work, "r1");
    let routes: Vec<&str> = run["replies"].as_array().unwrap().iter().map(|r| r["route"].as_str().unwrap()).collect();
    assert_eq!(
        routes[0],
        "think: no policy for this role; the run's provider alpha:m-alpha; answered by alpha/fake-model"
    );
    assert_eq!(routes[1], "reflect: policy agent.roles.reflect chose beta; answered by beta/fake-model");
    let o = output(work.noesis_bare().args(["agent", "show", "r1"]));
    assert!(
        o.stdout.contains("routes\n  1. think: no policy") && o.stdout.contains("  2. reflect: policy"),
        "{}",
        o.stdout
    );
}

#[test]
fn local_only_refuses_a_cloud_route_and_a_failing_provider_falls_back() {
    let work = Work::new();
    let ws = ws(&work);
    let alpha = FakeServer::start(vec![Reply::Status(503, "{\"error\": \"down\"}".into(), vec![])]).unwrap();
    let beta = FakeServer::start(vec![Reply::Chat("From beta.".into())]).unwrap();
    // think: alpha first, beta when alpha fails.
    two_endpoints(&work, &alpha, &beta, "[agent.roles.think]\nprovider = \"alpha\"\nfallback = [\"beta\"]\n");
    let o = output(work.noesis_bare().args(["agent", "Hi", "--workspace", &ws, "--run-id", "fb", "--retries", "0"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "From beta.\n"), "{}", o.stderr);
    assert!(!alpha.received().is_empty());
    let run = shown(&work, "fb");
    let route = run["replies"][0]["route"].as_str().unwrap();
    assert_eq!(route, "think: policy agent.roles.think chose alpha, then beta; answered by beta/m-beta");

    // local_only: both are cloud endpoints; nothing is sent anywhere.
    two_endpoints(&work, &alpha, &beta, "[agent.roles.think]\nprovider = \"beta\"\nlocal_only = true\n");
    let before = (alpha.received().len(), beta.received().len());
    let o = output(work.noesis_bare().args(["agent", "Hi", "--workspace", &ws, "--run-id", "lo"]));
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!((alpha.received().len(), beta.received().len()), before, "no request left the machine");
    let run = shown(&work, "lo");
    let detail = run["outcome"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("no provider may answer think")
            && detail.contains("beta (local_only: it is not on this machine)"),
        "{detail}"
    );
    // An endpoint marked local is allowed.
    let o = work.path().join("noesis.toml");
    let text =
        std::fs::read_to_string(&o).unwrap().replace("model = \"m-beta\"\n", "model = \"m-beta\"\nlocal = true\n");
    std::fs::write(&o, text).unwrap();
    let out = output(work.noesis_bare().args(["agent", "Hi", "--workspace", &ws, "--run-id", "lo2"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "From beta.\n"), "{}", out.stderr);
    // A role that is not one is refused, naming the field.
    work.write("noesis.toml", "[agent.roles.thinking]\nprovider = \"x\"\n");
    let o = output(work.noesis_bare().args(["agent", "Hi", "--workspace", &ws]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("agent.roles.thinking"), "{}", o.stderr);
}

/// A scripted model tries the prefix bypass of issue 25 (`cargo test
/// --config …runner=…` under a rule for `cargo test`): refused before
/// anything runs, while a plain `cargo test` runs (a real cargo on a tiny
/// crate); `[permissions]` of noesis.toml and the rule flags decide each
/// call, and an edited approval cannot smuggle in a denied write.
#[test]
fn permission_rules_refuse_the_cargo_config_bypass_and_let_cargo_test_run() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/Cargo.toml", "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n");
    work.write(
        "ws/src/lib.rs",
        "pub fn two() -> u32 {\n    2\n}\n\n#[test]\nfn it_is_two() {\n    assert_eq!(two(), 2);\n}\n",
    );
    work.write(
        "noesis.toml",
        "[permissions]\nallow = [\"run_command(cargo test *)\"]\ndeny = [\"write_file(Cargo.toml)\", \"edit_file(Cargo.toml)\"]\n",
    );
    let runner = "target.x86_64-unknown-linux-gnu.runner='sh -c \"touch pwned\"'";
    let server = FakeServer::start(vec![
        call("c1", "run_command", json!({"command": format!("cargo test --offline --config {runner}")})),
        call("c2", "run_command", json!({"command": "cargo test --offline -q"})),
        call("c3", "write_file", json!({"path": "Cargo.toml", "content": "[package]\n"})),
        call("c4", "edit_file", json!({"path": "src/lib.rs", "old": "2\n}", "new": "1 + 1\n}"})),
        Reply::Chat("Tested.".into()),
    ])
    .unwrap();
    let o = output(
        agent(&work, &server)
            .args(["Test it", "--workspace", &ws, "--run-id", "r-perm", "--ask-tool", "edit_file(src/**)"])
            .env("CARGO_TARGET_DIR", work.path().join("cargo-target")),
    );
    // Under the default `ask` the allowed command ran without asking; the
    // explicit ask waits.
    assert_eq!(o.code, 3, "{}", o.stderr);
    let run = shown(&work, "r-perm");
    let status = |i: usize| run["calls"][i]["status"].as_str().unwrap().to_owned();
    let result = |i: usize| run["calls"][i]["result"].as_str().unwrap_or_default().to_owned();
    assert_eq!([status(0), status(1), status(2), status(3)], ["denied", "completed", "denied", "awaiting_approval"]);
    assert!(result(0).contains("`--config`") && result(0).contains("run_command(cargo test *)"), "{}", result(0));
    assert!(!work.path().join("ws/pwned").exists(), "the runner never ran");
    assert_eq!(run["calls"][1]["evidence"][0]["exit_code"], 0, "{}", result(1));
    assert!(result(1).contains("exit code 0"), "{}", result(1));
    assert!(
        result(2).contains("denied by the rule `write_file(Cargo.toml)`") && result(2).contains("permissions.deny[0]"),
        "{}",
        result(2)
    );
    // The model was told why, in the call's result.
    assert!(tool_messages(&server, 1)[0]["content"].as_str().unwrap().contains("`--config`"));
    // The rules are on record with the run, where each came from.
    let rules = run["config"]["permissions"]["layers"][0]["rules"].to_string();
    assert!(rules.contains("--ask-tool") && rules.contains("permissions.allow[0]"), "{rules}");
    // An edit of the pending call into a denied one is refused; nothing changes.
    let smuggled = r#"{"path": "Cargo.toml", "old": "demo", "new": "evil"}"#;
    let o = output(work.noesis_bare().args(["agent", "approve", "r-perm", "c4", "--args", smuggled]));
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("refused") && o.stderr.contains("edit_file(Cargo.toml)"), "{}", o.stderr);
    assert_eq!(shown(&work, "r-perm")["calls"][3]["status"], "awaiting_approval");
    let o = output(work.noesis_bare().args(["agent", "approve", "r-perm", "c4"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Resumed in another process: the rules come from the run, not the file.
    std::fs::remove_file(work.path().join("noesis.toml")).unwrap();
    let o = output(agent(&work, &server).args(["resume", "r-perm"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Tested.\n"), "{}", o.stderr);
    assert!(std::fs::read_to_string(work.path().join("ws/src/lib.rs")).unwrap().contains("1 + 1"));
    assert!(std::fs::read_to_string(work.path().join("ws/Cargo.toml")).unwrap().contains("demo"));
    // A rule that does not parse names itself and where it came from.
    let o = output(agent(&work, &server).args(["x", "--workspace", &ws, "--deny-tool", "run_command(cargo"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--deny-tool: `run_command(cargo`"), "{}", o.stderr);
    work.write("noesis.toml", "[permissions]\nask = [\"glob(src/**)\"]\n");
    let o = output(agent(&work, &server).args(["x", "--workspace", &ws]));
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("permissions.ask[0]") && o.stderr.contains("takes no pattern"), "{}", o.stderr);
}

/// `--allow-command` is the rule `run_command(CMD *)`: it runs under
/// `--approve auto`, still asks under `ask`, and a dangerous option after
/// its words is refused; a run stored before rules were recorded (only
/// `allow_commands` in its host) resumes with the same rule.
#[test]
fn allow_command_is_sugar_for_a_command_rule_and_old_runs_keep_it() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/ok.sh", "echo fine\n");
    let server = FakeServer::start(vec![
        call("a1", "run_command", json!({"command": "sh ok.sh"})),
        Reply::Chat("ok".into()),
        call("c1", "run_command", json!({"command": "sh ok.sh"})),
        call("c2", "run_command", json!({"command": "sh -c 'touch pwned' ok.sh"})),
        call("c3", "run_command", json!({"command": "sh ok.sh"})),
        Reply::Chat("done".into()),
    ])
    .unwrap();
    let start = |id: &str, approve: &str| {
        output(agent(&work, &server).args([
            "Check",
            "--workspace",
            &ws,
            "--run-id",
            id,
            "--allow-command",
            "sh",
            "--approve",
            approve,
        ]))
    };
    let o = start("r-auto", "auto");
    assert_eq!((o.code, o.stdout.as_str()), (0, "ok\n"), "{}", o.stderr);
    let o = start("r-old", "ask");
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(shown(&work, "r-old")["calls"][0]["status"], "awaiting_approval");
    // The run as an earlier build stored it: no rules in its config.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = noesis_store::open(&work.path().join(".noesis/noesis.db").to_string_lossy()).await.unwrap();
        let mut state = store.agent_state("r-old", None).await.unwrap().unwrap();
        state.state["config"].as_object_mut().unwrap().remove("permissions");
        assert_eq!(state.state["host"]["allow_commands"], json!(["sh"]));
        state.step += 1;
        state.state["step"] = json!(state.step);
        store.save_agent_state(&state).await.unwrap();
    });
    assert_eq!(shown(&work, "r-old")["config"].get("permissions"), None);
    assert_eq!(output(work.noesis_bare().args(["agent", "approve", "r-old"])).code, 0);
    let o = output(agent(&work, &server).args(["resume", "r-old", "--approve", "auto"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "done\n"), "{}", o.stderr);
    let run = shown(&work, "r-old");
    let status: Vec<&str> = run["calls"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["completed", "denied", "completed"]);
    assert!(run["calls"][1]["result"].as_str().unwrap().contains("`-c`"), "{run}");
    assert!(!work.path().join("ws/pwned").exists());
}

#[test]
fn an_output_schema_holds_the_answer_to_it_and_json_carries_the_object() {
    let work = Work::new();
    let ws = ws(&work);
    work.write(
        "person.schema.json",
        r#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"], "additionalProperties": false}"#,
    );
    let schema = work.path().join("person.schema.json").to_string_lossy().into_owned();
    let server = FakeServer::start(vec![
        Reply::Chat("Ada Lovelace, aged 36.".into()),
        Reply::Chat(r#"{"name": "Ada Lovelace", "age": 36}"#.into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).args(["Who?", "--workspace", &ws, "--output-schema", &schema]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36\n}\n");
    let first = server.received()[0].json();
    assert!(first["messages"][0]["content"].as_str().unwrap().contains("\"additionalProperties\":false"));
    let second = server.received()[1].json();
    let told = second["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(told.contains("holds no JSON value"), "{told}");
    let run = runs(&work)[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(shown(&work, &run)["outcome"]["text"], r#"{"name":"Ada Lovelace","age":36}"#, "stored compact");
    let valid = FakeServer::start(vec![Reply::Chat(r#"{"name": "Ada", "age": 36}"#.into())]).unwrap();
    let o = output(agent(&work, &valid).args(["Who?", "--workspace", &ws, "--output-schema", &schema, "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.json()["output"], json!({"name": "Ada", "age": 36}));

    // A schema that is not one is refused before anything runs.
    work.write("bad.schema.json", r#"{"type": "no-such-type"}"#);
    let bad = work.path().join("bad.schema.json").to_string_lossy().into_owned();
    let o = output(agent(&work, &server).args(["Who?", "--workspace", &ws, "--output-schema", &bad]));
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("--output-schema") && o.stderr.contains("bad.schema.json"), "{}", o.stderr);
    work.write("broken.schema.json", "{not json");
    let broken = work.path().join("broken.schema.json").to_string_lossy().into_owned();
    let o = output(agent(&work, &server).args(["Who?", "--workspace", &ws, "--output-schema", &broken]));
    assert!(o.code != 0 && o.stderr.contains("not JSON"), "{}", o.stderr);
    assert_eq!(runs(&work).len(), 2, "no run was stored for a refused schema");
    assert_eq!(server.received().len(), 2);
}

#[test]
fn a_stalled_run_stops_says_so_and_resumes() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "same\n");
    // The last reply repeats: the model keeps reading the same file.
    let server = FakeServer::start(vec![call("c1", "read_file", json!({"path": "a.txt"}))]).unwrap();
    let o = output(agent(&work, &server).args(["Read a.txt", "--workspace", &ws, "--json"]));
    assert_eq!(o.code, 1, "{}", o.stderr);
    let outcome = o.json();
    assert_eq!(outcome["outcome"]["reason"], "stalled", "{outcome}");
    assert_eq!(outcome["calls"].as_array().unwrap().len(), 5);
    assert!(o.stderr.contains("continue it with `noesis agent resume"), "{}", o.stderr);
    let run = outcome["run_id"].as_str().unwrap().to_owned();
    // Resumed by a person, it goes on where it stopped.
    let server = FakeServer::start(vec![Reply::Chat("It says same.".into())]).unwrap();
    let o = output(agent(&work, &server).args(["resume", &run]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "It says same.\n"), "{}", o.stderr);
}

fn streamed(pieces: &[&str]) -> Reply {
    let mut events: Vec<(&str, Value)> = pieces
        .iter()
        .map(|p| ("", json!({"model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": p}}]})))
        .collect();
    events.push(("", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})));
    events.push(("", json!("[DONE]")));
    Reply::Stream(noesis_testkit::sse(&events), Duration::from_millis(10))
}

#[test]
fn stream_shows_the_answer_on_stderr_as_it_is_written() {
    let work = Work::new();
    let ws = ws(&work);
    let server = FakeServer::start(vec![streamed(&["The answer ", "is 42."])]).unwrap();
    let o = output(agent(&work, &server).args(["What is it?", "--workspace", &ws, "--stream"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "The answer is 42.\n"), "{}", o.stderr);
    assert!(o.stderr.contains("The answer is 42.\n  think   turn 1 done"), "{}", o.stderr);
    assert_eq!(server.received()[0].json()["stream"], true);
    // Not asked for, and not a terminal: one whole reply.
    let server = FakeServer::start(vec![Reply::Chat("Whole.".into())]).unwrap();
    let o = output(agent(&work, &server).args(["What is it?", "--workspace", &ws]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(server.received()[0].json().get("stream"), None);
}

#[test]
fn rewind_and_fork_put_the_files_back_as_they_were_at_a_step() {
    let work = Work::new();
    let ws = ws(&work);
    work.write("ws/a.txt", "zero");
    let server = FakeServer::start(vec![
        call("c1", "write_file", json!({"path": "a.txt", "content": "one"})),
        call("c2", "write_file", json!({"path": "a.txt", "content": "two"})),
        Reply::Chat("Done.".into()),
    ])
    .unwrap();
    let o = output(agent(&work, &server).args(["Write", "--workspace", &ws, "--approve", "auto", "--run-id", "r-rw"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let a = || std::fs::read_to_string(work.path().join("ws/a.txt")).unwrap();
    assert_eq!(a(), "two");
    // One snapshot before each write, named by the run's step.
    let dir = work.path().join(".noesis/snapshots/agent/r-rw");
    let mut steps: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".json").parse().unwrap())
        .collect();
    steps.sort_unstable();
    assert_eq!(steps.len(), 2, "{steps:?}");
    let rewind = |at: u64, json: bool| {
        let at = at.to_string();
        let mut args = vec!["agent", "rewind", "r-rw", "--at", &at];
        if json {
            args.push("--json");
        }
        output(work.noesis_bare().args(&args))
    };
    let o = rewind(steps[1], false);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(a(), "one", "as before the second write");
    assert!(o.stderr.contains(&format!("back as at step {}", steps[1])), "{}", o.stderr);
    let o = rewind(0, true);
    assert_eq!(a(), "zero", "as before the run");
    assert_eq!(o.json()["undone"]["modified"], json!(["a.txt"]), "{}", o.stdout);
    // After its last write the run changed nothing: nothing to do.
    std::fs::write(work.path().join("ws/a.txt"), "mine").unwrap();
    let o = rewind(10_000, false);
    assert!(o.stderr.contains("changed none after it"), "{}", o.stderr);
    assert_eq!(a(), "mine");
    // A fork goes back with its files, unless they are kept.
    let at = steps[1].to_string();
    let o = output(work.noesis_bare().args(["agent", "fork", "r-rw", "--at", &at, "--no-run", "--keep-files"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(a(), "mine");
    let o = output(work.noesis_bare().args(["agent", "fork", "r-rw", "--at", &at, "--no-run"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(a(), "one");
    // Nothing of noesis's own was in the snapshots.
    let manifest = std::fs::read_to_string(dir.join(format!("{}.json", steps[0]))).unwrap();
    assert!(!manifest.contains(".noesis"), "{manifest}");
}

#[test]
fn an_mcp_server_that_cannot_start_is_left_out_with_a_warning() {
    let work = Work::new();
    let ws = ws(&work);
    let server = FakeServer::start(vec![Reply::Chat("Fine without it.".into())]).unwrap();
    let o = output(agent(&work, &server).args(["Go", "--workspace", &ws, "--mcp", "broken=/nonexistent/mcp-server"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "Fine without it.\n"), "{}", o.stderr);
    assert!(o.stderr.contains("warning: left out: MCP server `broken` could not be started"), "{}", o.stderr);
    let run = runs(&work)[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(shown(&work, &run)["host"]["mcp_servers"], json!([]), "only the servers that started are recorded");
}

/// A run past `[agent] context_window` is compacted: the model is asked
/// for a summary once, the request after carries it with the facts, and
/// `agent show` says where and what was kept. The fake model reads each
/// file it cannot see yet, by its content or by its fact.
#[test]
fn a_run_past_the_configured_window_is_compacted_and_keeps_its_facts() {
    let work = Work::new();
    let ws = ws(&work);
    for k in 0..6 {
        work.write(
            &format!("ws/f{k}.txt"),
            &format!("CONTENT OF f{k}: port 80{k}0\n{}", "filler words here. ".repeat(120)),
        );
    }
    work.write("noesis.toml", "[agent]\napprove = \"auto\"\ncontext_window = 3000\n");
    let server = FakeServer::start(vec![Reply::respond(|request| {
        let text = noesis_testkit::said(request);
        if text.starts_with("You compact the history") {
            return Reply::Chat("Summary: the first files were read; each names a port.".into());
        }
        match (0..6)
            .find(|k| !text.contains(&format!("CONTENT OF f{k}")) && !text.contains(&format!("read f{k}.txt (blake3 ")))
        {
            Some(k) => Reply::Status(
                200,
                tool_call_completion(&format!("c{k}"), "read_file", &json!({"path": format!("f{k}.txt")})).to_string(),
                vec![],
            ),
            None => Reply::Chat("The ports are 8000 to 8050.".into()),
        }
    })])
    .unwrap();
    let o = output(agent(&work, &server).args(["Which ports?", "--workspace", &ws, "--tool", "read_file", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let run = o.json()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(o.json()["answer"], "The ports are 8000 to 8050.");
    let bodies: Vec<String> = server.received().iter().map(|r| r.body.clone()).collect();
    let summaries = bodies.iter().filter(|b| b.contains("You compact the history")).count();
    assert!(summaries >= 1, "a summary was asked for");
    let last = bodies.last().unwrap();
    assert!(last.contains("Summary: the first files were read") && last.contains("read f0.txt (blake3 "), "{last}");
    assert!(!last.contains("CONTENT OF f0"), "the compacted result is not sent again");
    let shown = output(work.noesis_bare().args(["agent", "show", &run]));
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(shown.stdout.contains("compacted (window): the turns above were summarised"), "{}", shown.stdout);
    assert!(shown.stdout.contains("  fact: read f0.txt (blake3 "), "{}", shown.stdout);
}

/// An MCP server's question mid-call (elicitation) is put to the person at
/// the terminal under `--approve ask`: they choose to answer, then fill in
/// each field its schema asks for, and the server gets the answer.
#[test]
fn an_mcp_servers_question_is_put_to_the_person_at_the_terminal() {
    let Some(python) = crate::mcp::client_python() else { return };
    let work = Work::new();
    let ws = ws(&work);
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../noesis-mcp/tests/servers/full.py");
    let full = full.canonicalize().unwrap();
    let server = FakeServer::start(vec![tool_loop("full__deploy", 1, |_| json!({}), "Deployed.")]).unwrap();
    // The call is approved, then the question answered: yes, the name, confirmed.
    let o = in_terminal(
        &work,
        &server,
        &format!("'Deploy' --workspace {ws} --mcp full='{} {}'", python.display(), full.display()),
        "y\ny\nada\ny\n",
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("the MCP server `full` asks: Deploy to production?"), "{}", o.stdout);
    assert!(o.stdout.contains("Deployed."), "{}", o.stdout);
    let results = tool_messages(&server, 1);
    assert_eq!(results.len(), 1);
    assert!(results[0]["content"].as_str().unwrap().contains("deployed by ada"), "{results:?}\n{}", o.stdout);
}
