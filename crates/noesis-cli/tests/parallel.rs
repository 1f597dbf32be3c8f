//! Issue 29, parallel agents isolated: `sub_agent` calls of one turn run at
//! the same time, each child in its own git worktree of what the parent
//! sees; their changes are compared before any reaches the parent's
//! workspace. A real git repository, real worktrees, the binary against
//! the fake OpenAI server on 127.0.0.1 (each child's replies chosen by its
//! task, since the children ask in whatever order they run).

use std::path::Path;
use std::time::Duration;

use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use serde_json::{Value, json};

use crate::support::{Work, output};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

const SHARED: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";
const NOTES: &str = "first\n2\n3\n4\n5\n6\n7\n8\n9\nlast\n";

/// A repository in `work/ws` with committed files, and, uncommitted, an
/// edit and an untracked file the children must see.
fn repository(work: &Work) -> std::path::PathBuf {
    let ws = work.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "--quiet", "--initial-branch=main"]);
    for (name, text) in [("a.txt", "alpha\n"), ("shared.txt", SHARED), ("notes.txt", "draft\n")] {
        std::fs::write(ws.join(name), text).unwrap();
    }
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "--quiet", "-m", "start"]);
    std::fs::write(ws.join("notes.txt"), NOTES).unwrap();
    std::fs::write(ws.join("b.txt"), "beta, not yet committed\n").unwrap();
    ws
}

fn edit(path: &str, old: &str, new: &str) -> (&'static str, Value) {
    ("edit_file", json!({"path": path, "old": old, "new": new}))
}

/// The model: the parent hands out one sub-agent call per task at once,
/// then answers; each child makes its edits one call per turn, then
/// answers. A child's first reply waits a little, so the children are
/// seen asking at the same time.
fn model(children: Vec<(&'static str, Vec<(&'static str, Value)>)>) -> FakeServer {
    FakeServer::start(vec![Reply::respond(move |request| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let task = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
        let done = messages.iter().filter(|m| m["role"] == "tool").count();
        if let Some((name, edits)) = children.iter().find(|(name, _)| task.starts_with(&format!("task {name}"))) {
            return match edits.get(done) {
                Some((tool, args)) => {
                    let body = tool_call_completion(&format!("{name}-{done}"), tool, args).to_string();
                    let reply = Reply::Status(200, body, vec![]);
                    if done == 0 { Reply::Delay(Duration::from_millis(400), Box::new(reply)) } else { reply }
                }
                None => Reply::Chat(format!("{name} finished")),
            };
        }
        if done > 0 {
            return Reply::Chat("The helpers are done.".into());
        }
        let mut body = tool_call_completion("x", "sub_agent", &json!({}));
        body["choices"][0]["message"]["tool_calls"] = children
            .iter()
            .map(|(name, _)| {
                json!({"id": name, "type": "function", "function": {
                    "name": "sub_agent", "arguments": json!({"task": format!("task {name}")}).to_string()}})
            })
            .collect();
        Reply::Status(200, body.to_string(), vec![])
    })])
    .unwrap()
}

fn agent(work: &Work, server: &FakeServer, ws: &Path, run_id: &str) -> crate::support::Output {
    let mut c = work.noesis_bare();
    c.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test").args([
        "agent",
        "Split the work",
        "--workspace",
        &ws.to_string_lossy(),
        "--approve",
        "auto",
        "--run-id",
        run_id,
    ]);
    output(&mut c)
}

fn results(work: &Work, run_id: &str) -> Vec<(String, String)> {
    let o = output(work.noesis_bare().args(["agent", "show", run_id, "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let run = o.json();
    run["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["result"].as_str().unwrap_or("").to_owned()))
        .collect()
}

fn read(ws: &Path, name: &str) -> String {
    std::fs::read_to_string(ws.join(name)).unwrap()
}

fn worktrees(ws: &Path) -> usize {
    git(ws, &["worktree", "list", "--porcelain"]).lines().filter(|l| l.starts_with("worktree ")).count()
}

#[test]
fn three_children_in_worktrees_two_merged_one_conflict_reported_with_both_sides() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nisolation = \"worktree\"\n");
    let ws = repository(&work);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let server = model(vec![
        ("alpha", vec![edit("a.txt", "alpha", "ALPHA")]),
        // beta edits the untracked file: it sees what the parent sees.
        (
            "beta",
            vec![
                edit("b.txt", "not yet", "now"),
                edit("shared.txt", "two\n", "TWO (beta)\n"),
                edit("notes.txt", "first", "FIRST"),
            ],
        ),
        (
            "gamma",
            vec![
                edit("shared.txt", "two\n", "2 (gamma)\n"),
                edit("shared.txt", "nine", "NINE"),
                edit("notes.txt", "last", "LAST"),
            ],
        ),
    ]);
    let o = agent(&work, &server, &ws, "r-par");
    assert_eq!((o.code, o.stdout.as_str()), (0, "The helpers are done.\n"), "{}", o.stderr);
    assert!(server.max_in_flight() >= 2, "the children asked at the same time: {}", server.max_in_flight());

    // Different files and different hunks of one file: merged.
    assert_eq!(read(&ws, "a.txt"), "ALPHA\n");
    assert_eq!(read(&ws, "b.txt"), "beta, now committed\n");
    assert_eq!(read(&ws, "notes.txt"), NOTES.replace("first", "FIRST").replace("last", "LAST"));
    // The same hunk: nothing of that file merged, not even gamma's other hunk.
    assert_eq!(read(&ws, "shared.txt"), SHARED);

    let results = results(&work, "r-par");
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["alpha", "beta", "gamma"]);
    let (alpha, beta, gamma) = (&results[0].1, &results[1].1, &results[2].1);
    assert!(alpha.starts_with("alpha finished") && alpha.contains("Merged into the workspace: a.txt."), "{alpha}");
    assert!(!alpha.contains("conflict"), "{alpha}");
    assert!(beta.contains("Merged into the workspace: b.txt, notes.txt."), "{beta}");
    for side in [beta, gamma] {
        assert!(side.contains("Not merged, in conflict: shared.txt"), "{side}");
        assert!(side.contains("line 2; it was:\n    two\n"), "{side}");
        assert!(
            side.contains("beta made it:\n    TWO (beta)\n") && side.contains("gamma made it:\n    2 (gamma)\n"),
            "{side}"
        );
    }
    assert!(gamma.contains("Merged into the workspace: notes.txt."), "{gamma}");

    // Each child ran in a worktree, now gone; the person's branch and
    // index are as they were.
    assert_eq!(worktrees(&ws), 1);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&ws, &["branch", "--show-current"]), "main");
    assert_eq!(git(&ws, &["diff", "--cached", "--name-only"]), "");
    let child = output(work.noesis_bare().args(["agent", "show", "r-par.beta", "--json"])).json();
    let child_ws = child["host"]["workspace"].as_str().unwrap();
    assert!(!child_ws.starts_with(&*ws.to_string_lossy()) && !Path::new(child_ws).exists(), "{child_ws}");
}

#[test]
fn a_merge_that_breaks_an_anchor_is_undone_and_said_so() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nisolation = \"worktree\"\nanchors = [\"sh check.sh\"]\n");
    let ws = repository(&work);
    std::fs::write(ws.join("check.sh"), "if grep -q BROKEN a.txt; then echo 'a.txt is broken'; exit 1; fi\n").unwrap();
    let server =
        model(vec![("alpha", vec![edit("a.txt", "alpha", "BROKEN")]), ("beta", vec![edit("b.txt", "not yet", "now")])]);
    let o = agent(&work, &server, &ws, "r-red");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(read(&ws, "a.txt"), "alpha\n");
    assert_eq!(read(&ws, "b.txt"), "beta, not yet committed\n");
    let results = results(&work, "r-red");
    for (_, r) in &results {
        assert!(r.contains("Not merged (the anchors failed after the merge, which was undone)"), "{r}");
        assert!(r.contains("`sh check.sh` exited 1") && r.contains("a.txt is broken"), "{r}");
    }
    assert_eq!(worktrees(&ws), 1);
}

#[test]
fn green_anchors_keep_the_merge() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nisolation = \"worktree\"\nanchors = [\"sh check.sh\"]\n");
    let ws = repository(&work);
    std::fs::write(ws.join("check.sh"), "if grep -q BROKEN a.txt; then exit 1; fi\n").unwrap();
    let server = model(vec![("alpha", vec![edit("a.txt", "alpha", "ALPHA")])]);
    let o = agent(&work, &server, &ws, "r-green");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(read(&ws, "a.txt"), "ALPHA\n");
    let results = results(&work, "r-green");
    assert!(results[0].1.contains("Anchors passed after the merge: `sh check.sh`."), "{}", results[0].1);
}

#[test]
fn isolation_outside_a_git_repository_is_an_error_the_model_sees() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nisolation = \"worktree\"\n");
    let ws = work.path().join("plain");
    std::fs::create_dir_all(&ws).unwrap();
    let server = model(vec![("alpha", vec![edit("a.txt", "alpha", "ALPHA")])]);
    let o = agent(&work, &server, &ws, "r-plain");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let results = results(&work, "r-plain");
    assert!(
        results[0].1.contains("needs the workspace") && results[0].1.contains("git repository"),
        "{}",
        results[0].1
    );
}

#[test]
fn an_unknown_isolation_is_refused_naming_the_field() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nisolation = \"container\"\n");
    let ws = repository(&work);
    let server = model(vec![]);
    let o = agent(&work, &server, &ws, "r-bad");
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("agent.isolation: `container` is not none or worktree"), "{}", o.stderr);
}
