//! Causal memory from the command line: runs record frames, sessions find
//! what changed and invalidate exactly what depended on it, and the
//! `frames` commands read and act on the tree. Each test has its own
//! NOESIS_HOME (a SQLite store) inside its temp workspace.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Output, Work, output, regex_escape};

fn noesis(w: &Work) -> assert_cmd::Command {
    let mut c = w.noesis();
    c.env("NOESIS_HOME", w.path().join("home")).env_remove("NOESIS_STORE");
    c
}

fn run_json(w: &Work, args: &[&str]) -> Value {
    let o = output(noesis(w).args(args));
    assert_eq!(o.code, 0, "{args:?}\n{}\n{}", o.stdout, o.stderr);
    o.json()
}

fn frames(w: &Work) -> Vec<Value> {
    run_json(w, &["frames", "list", "--json"]).as_array().unwrap().clone()
}

fn blake3_hex(bytes: &[u8]) -> String {
    noesis_frames::scan::hash_bytes(bytes)
}

macro_rules! snap {
    ($w:expr, $name:literal, $value:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.add_filter(&regex_escape(&$w.path().display().to_string()), "[TMP]");
        settings.add_filter(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", "[ID]");
        settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "[TIME]");
        settings.add_filter(r"(input:|blake3:)[0-9a-f]{16}", "$1[HASH]");
        settings.add_filter(r"path:/\S+", "path:[TMP]");
        settings.bind(|| insta::assert_snapshot!($name, $value));
    }};
}

fn simplify(w: &Work, file: &str) -> Output {
    output(noesis(w).args(["run", "code-simplifier", "--provider", "test", "--file", &format!("code={file}")]))
}

fn git_repo(w: &Work) {
    for args in [&["init", "-q"][..], &["add", "."], &["commit", "-qm", "first"]] {
        let ok = std::process::Command::new("git")
            .current_dir(w.path())
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
}

#[test]
fn a_run_records_a_frame_with_its_file_as_evidence() {
    let w = Work::new();
    w.write("src/app.py", "x = 1\nif x == 1: print(x)\n");
    let o = simplify(&w, "src/app.py");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let env = o.json();
    let all = frames(&w);
    assert_eq!(all.len(), 1);
    let f = &all[0];
    assert_eq!(f["status"], "completed");
    assert_eq!(f["depth"], 0);
    // The test model made this answer up: the frame says so and claims no confidence.
    assert_eq!(env["meta"]["model"], "test/schema");
    assert_eq!(f["confidence"], serde_json::json!(0.0));
    let query = f["query"].as_str().unwrap();
    assert!(query.starts_with("code-simplifier input:"), "{query}");
    let explain = env["meta"]["explain"].as_str().unwrap();
    assert!(f["conclusion"].as_str().unwrap().starts_with(explain), "{f}");
    let hash = blake3_hex(b"x = 1\nif x == 1: print(x)\n");
    assert_eq!(f["evidence"], serde_json::json!([{"kind": "file", "path": "src/app.py", "hash": hash}]));
    assert_eq!(f["invalidation_condition"]["files"], serde_json::json!([{"path": "src/app.py", "hash": hash}]));
    let context: Value = serde_json::from_str(f["context_slice"].as_str().unwrap()).unwrap();
    assert_eq!(context["module"], "code-simplifier");
    assert_eq!(
        (&context["model"], &context["fabricated"]),
        (&serde_json::json!("test/schema"), &serde_json::json!(true))
    );
    assert_eq!(context["trace_id"], env["meta"]["trace_id"]);
    assert_eq!(context["input"]["code"]["file"], "src/app.py", "the file's text is named, not copied");
    // In a git repository, the same file from a sub-folder gets the same
    // project-relative name (without git, each folder is its own project).
    git_repo(&w);
    let o = output(noesis(&w).current_dir(w.path().join("src")).args([
        "run",
        "code-simplifier",
        "--provider",
        "test",
        "--file",
        "code=app.py",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let all = frames(&w);
    assert!(all[0]["project_id"].as_str().unwrap().starts_with("git:"), "{}", all[0]);
    assert_eq!(all[0]["evidence"][0]["path"], "src/app.py");
    // The default store lives in NOESIS_HOME.
    assert!(w.path().join("home/noesis.db").is_file());
}

#[test]
fn failure_envelopes_are_recorded_too() {
    let w = Work::new();
    let o = output(noesis(&w).args(["run", "code-simplifier", "--provider", "test", "--input", r#"{"code": 5}"#]));
    assert_eq!(o.code, 1);
    let f = &frames(&w)[0];
    assert!(f["conclusion"].as_str().unwrap().starts_with("E1003"), "{f}");
    assert_eq!(f["confidence"], 0.0);
}

#[test]
fn an_unusable_store_never_fails_the_run() {
    let w = Work::new();
    w.write("a.py", "x = 1\n");
    let o = output(noesis(&w).args(["--store", "/proc/noesis/cannot.db"]).args([
        "run",
        "code-simplifier",
        "--provider",
        "test",
        "--file",
        "code=a.py",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.json()["ok"], true);
    assert!(o.stderr.contains("warning: the run was not recorded as a frame"), "{}", o.stderr);
    assert!(o.stderr.contains("/proc/noesis/cannot.db"), "{}", o.stderr);
    // And a store that cannot be reached, through the environment.
    let o = output(noesis(&w).env("NOESIS_STORE", "postgres://nobody@127.0.0.1:1/none").args([
        "run",
        "code-simplifier",
        "--provider",
        "test",
        "--input",
        r#"{"code": "x"}"#,
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("Connection refused") || o.stderr.contains("connect"), "{}", o.stderr);
}

#[test]
fn next_session_invalidates_exactly_what_depended_on_changed_files() {
    let w = Work::new();
    w.write(".gitignore", "build/\n");
    w.write("src/a.py", "a = 1\n");
    w.write("src/b.py", "b = 1\n");
    w.write("build/out.txt", "ignored\n");
    let o = output(noesis(&w).args(["session", "start", "--prompt", "tidy the code"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap!(&w, "session_start_first", o.stdout);
    assert_eq!(simplify(&w, "src/a.py").code, 0);
    assert_eq!(simplify(&w, "src/b.py").code, 0);
    let before = frames(&w);
    assert_eq!(before.len(), 3);
    let root = &before[0];
    assert_eq!(before[1]["parent_id"], root["frame_id"], "runs hang under the session's root frame");
    assert_eq!(before[1]["depth"], 1);

    w.write("src/a.py", "a = 2\n");
    w.write("build/out.txt", "changed but ignored\n");
    w.write("src/c.py", "c = 1\n");
    let o = output(noesis(&w).args(["session", "start", "--prompt", "tidy the code"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap!(&w, "session_start_second", o.stdout);
    let after = frames(&w);
    let status = |i: usize| after[i]["status"].as_str().unwrap().to_owned();
    assert_eq!((status(0), status(1), status(2)), ("active".into(), "invalidated".into(), "completed".into()));
    let history = after[1]["timestamps"]["history"].as_array().unwrap();
    assert_eq!(history.last().unwrap()["reason"], "file src/a.py changed");

    let o = output(noesis(&w).args(["session", "diff"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap!(&w, "session_diff", o.stdout);
    let d = run_json(&w, &["session", "diff", "--json"]);
    assert_eq!(d["diff"]["files"]["changed"], serde_json::json!(["src/a.py"]));
    assert_eq!(d["diff"]["files"]["added"], serde_json::json!(["src/c.py"]));
    assert_eq!(d["diff"]["prompt"], "same");
    assert_eq!(d["invalidated"][0]["frame_id"], after[1]["frame_id"]);
}

#[test]
fn session_scope_and_transcript() {
    let w = Work::new();
    w.write("src/a.py", "a\n");
    w.write("docs/x.md", "x\n");
    w.write("chat.jsonl", "{}\n");
    let s = run_json(&w, &["session", "start", "src", "--transcript", "chat.jsonl", "--json"]);
    let files: Vec<&String> = s["session"]["files"].as_object().unwrap().keys().collect();
    assert_eq!(files, vec!["src/a.py"]);
    assert_eq!(s["session"]["files"]["src/a.py"]["role"], "read", "a scan reads what it hashes");
    assert_eq!(s["session"]["files"]["src/a.py"]["hash"], blake3_hex(b"a\n"));
    assert_eq!(s["session"]["scope"], serde_json::json!(["src"]));
    assert!(s["session"]["conversation_log"].as_str().unwrap().ends_with("chat.jsonl"));
    assert!(s["session"]["root_frame_id"].is_string());
    assert!(s["session"]["initial_prompt"].is_null());
}

#[test]
fn frames_list_tree_show_snapshots() {
    let w = Work::new();
    w.write("src/a.py", "a = 1\n");
    assert_eq!(output(noesis(&w).args(["session", "start", "--prompt", "look around"])).code, 0);
    assert_eq!(simplify(&w, "src/a.py").code, 0);
    let o = output(noesis(&w).args(["frames", "list"]));
    snap!(&w, "frames_list", o.stdout);
    let o = output(noesis(&w).args(["frames", "tree"]));
    snap!(&w, "frames_tree", o.stdout);
    let id = frames(&w)[1]["frame_id"].as_str().unwrap().to_owned();
    let o = output(noesis(&w).args(["frames", "show", &id[..30]]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    snap!(&w, "frames_show", o.stdout);
    let tree = run_json(&w, &["frames", "tree", "--json"]);
    assert_eq!(tree[0]["children"][0]["frame_id"], id.as_str(), "nested children");
    let by_file = run_json(&w, &["frames", "list", "--file", "src/a.py", "--json"]);
    assert_eq!(by_file.as_array().unwrap().len(), 1);
    let by_text = run_json(&w, &["frames", "list", "--text", "LOOK", "--json"]);
    assert_eq!(by_text.as_array().unwrap().len(), 1);
}

#[test]
fn invalidate_cascades_and_verify_walks_leaves_first() {
    let w = Work::new();
    w.write("a.py", "a = 1\n");
    w.write("b.py", "b = 1\n");
    assert_eq!(output(noesis(&w).args(["session", "start"])).code, 0);
    assert_eq!(simplify(&w, "a.py").code, 0);
    assert_eq!(simplify(&w, "b.py").code, 0);
    let o = output(noesis(&w).args(["frames", "verify"]));
    assert_eq!(o.code, 0, "all hold: {}{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("checked 3 frame(s), leaves first: 0 no longer hold"), "{}", o.stdout);

    w.write("b.py", "b = 2\n");
    let v = output(noesis(&w).args(["frames", "verify", "--json"]));
    assert_eq!(v.code, 1, "something was invalidated: {}", v.stdout);
    let v = v.json();
    assert_eq!(v["checked"], 3);
    assert_eq!(v["findings"][0]["reason"], "file b.py changed");
    assert_eq!(v["invalidated"].as_array().unwrap().len(), 1);

    // By hand: the session root, and with it every run under it.
    let root = frames(&w)[0]["frame_id"].as_str().unwrap().to_owned();
    let o = run_json(&w, &["frames", "invalidate", &root, "--reason", "wrong premise", "--json"]);
    let hit = o["invalidated"].as_array().unwrap();
    assert_eq!(hit.len(), 2, "the root and the one run still live: {o}");
    assert_eq!(hit[0]["reason"], "invalidated by hand: wrong premise");
    assert_eq!(hit[1]["reason"], format!("parent {root} invalidated"));
    assert!(frames(&w).iter().all(|f| f["status"] == "invalidated"));
    // Nothing is deleted.
    assert_eq!(frames(&w).len(), 3);
}

#[test]
fn resume_brings_back_a_suspended_frame() {
    let w = Work::new();
    let home = w.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let project = noesis_frames::project::identify(w.path()).unwrap();
    // A pivot made by a library user: the CLI only resumes.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (old, new) = rt.block_on(async {
        let store = noesis_store::open(home.join("noesis.db").to_str().unwrap()).await.unwrap();
        store.ensure_project(&project.project_id, "/x").await.unwrap();
        let now = noesis_frames::Timestamp::now();
        let root = noesis_frames::Draft::new("plan A").into_frame(&project.project_id, None, None, now).unwrap();
        store.insert_frames(std::slice::from_ref(&root)).await.unwrap();
        let change = noesis_frames::pivot(&root, None, noesis_frames::Draft::new("plan B"), now).unwrap();
        store.apply(&change).await.unwrap();
        (root.frame_id.to_string(), change.frames[0].frame_id.to_string())
    });
    let pivots = run_json(&w, &["frames", "list", "--pivots", "--json"]);
    assert_eq!(pivots[0]["frame_id"], new.as_str());
    assert_eq!(pivots[0]["branched_from"], old.as_str());
    let o = run_json(&w, &["frames", "resume", &old, "--json"]);
    assert_eq!(o["status"], "active");
    let statuses: Vec<&str> =
        o["timestamps"]["history"].as_array().unwrap().iter().map(|h| h["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, vec!["active", "suspended", "active"]);
    let again = output(noesis(&w).args(["frames", "resume", &old]));
    assert_eq!(again.code, 2);
    assert!(again.stderr.contains("is active; only a suspended frame can resume"), "{}", again.stderr);
}

#[test]
fn bad_input_is_named() {
    let w = Work::new();
    let cases: [(&[&str], &str); 5] = [
        (&["frames", "list", "--status", "done"], "`done` is not a status"),
        (&["frames", "show", "0000"], "no frame 0000"),
        (&["frames", "show", "x%y"], "`x%y` is not a frame id"),
        (&["session", "diff"], "has no session yet"),
        (&["session", "start", "missing/dir"], "missing/dir: no such file or folder"),
    ];
    for (args, want) in cases {
        let o = output(noesis(&w).args(args));
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = output(noesis(&w).args(["--store", "mysql://x/y", "frames", "list"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("mysql://x/y") && o.stderr.contains("expected sqlite://PATH"), "{}", o.stderr);
}

#[test]
fn noesis_home_defaults_to_dot_noesis_in_home() {
    let w = Work::new();
    let mut c = w.noesis();
    c.env_remove("NOESIS_HOME").env_remove("NOESIS_STORE").args(["frames", "list"]);
    let o = output(&mut c);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(Path::new(&w.path().join(".noesis/noesis.db")).is_file());
}

/// refine, pivot and backtrack from the CLI: the tree they make and the
/// statuses they change.
#[test]
fn refine_pivot_and_backtrack_branch_the_tree() {
    let w = Work::new();
    w.write("a.py", "x = 1\n");
    let o = output(w.noesis().args(["session", "start", "--prompt", "tidy", "--json", "--quiet"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let root = o.json()["session"]["root_frame_id"].as_str().unwrap().to_owned();
    let branch = |how: &str, id: &str, query: &str| -> serde_json::Value {
        let o = output(w.noesis().args(["frames", how, id, "--query", query, "--json"]));
        assert_eq!(o.code, 0, "{how}: {}", o.stderr);
        o.json()
    };
    let deeper = branch("refine", &root, "look at the parser");
    assert_eq!(deeper["parent_id"], root.as_str());
    let other = branch("pivot", deeper["frame_id"].as_str().unwrap(), "look at the lexer instead");
    assert_eq!((&other["parent_id"], &other["branched_from"]), (&json!(root), &deeper["frame_id"]));
    let shown = |id: &str| output(w.noesis().args(["frames", "show", id, "--json"])).json();
    assert_eq!(shown(deeper["frame_id"].as_str().unwrap())["status"], "suspended");
    let again = branch("backtrack", other["frame_id"].as_str().unwrap(), "start from the tests");
    assert_eq!((&again["parent_id"], &again["branched_from"]), (&json!(root), &other["frame_id"]));
    assert_eq!(shown(other["frame_id"].as_str().unwrap())["status"], "suspended");
    let pivots = output(w.noesis().args(["frames", "list", "--pivots", "--json"])).json();
    assert_eq!(pivots.as_array().unwrap().len(), 2);
    // An invalidated frame cannot be branched from; an empty query is refused.
    let gone = again["frame_id"].as_str().unwrap();
    assert_eq!(output(w.noesis().args(["frames", "invalidate", gone, "--reason", "wrong premise"])).code, 0);
    let o = output(w.noesis().args(["frames", "refine", gone, "--query", "more"]));
    assert_eq!(o.code, 2, "{}", o.stdout);
    let o = output(w.noesis().args(["frames", "refine", &root, "--query", " "]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--query is empty"), "{}", o.stderr);
}

/// A command in a git repository it has seen finds the project without
/// running `git`: the id is kept in `$NOESIS_HOME/cache/projects.json`.
/// Shown with a PATH that has no git at all — the run's frame still carries
/// the repository's id, and a sub-folder still names files from the top.
#[test]
fn a_known_repository_is_found_without_git() {
    let w = Work::new();
    w.write("src/app.py", "x = 1\n");
    git_repo(&w);
    let o = simplify(&w, "src/app.py");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let id = frames(&w)[0]["project_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("git:"), "{id}");
    let cache: Value =
        serde_json::from_slice(&std::fs::read(w.path().join("home/cache/projects.json")).unwrap()).unwrap();
    let top = w.path().canonicalize().unwrap();
    assert_eq!(cache[top.to_str().unwrap()]["id"], id.as_str(), "{cache}");

    // No git on the PATH: only the cache can give the id now.
    let no_git = tempfile::tempdir().unwrap();
    let o = output(noesis(&w).current_dir(w.path().join("src")).env("PATH", no_git.path()).args([
        "run",
        "code-simplifier",
        "--provider",
        "test",
        "--file",
        "code=app.py",
    ]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let all = frames(&w);
    assert!(all.iter().all(|f| f["project_id"] == id.as_str()), "{all:?}");
    assert!(all.iter().all(|f| f["evidence"][0]["path"] == "src/app.py"), "{all:?}");
}
