//! The dashboard in a real browser: Debian's Chromium, headless, driven by
//! playwright-core (both installed by scripts/browser.sh, sourced by
//! scripts/test.sh) through `tests/browser/dashboard.cjs`. Screenshots of
//! each view go to `$CARGO_TARGET_TMPDIR/screenshots` (CI artifacts, never
//! committed). Fails when the browser is missing unless NOESIS_SKIP_BROWSER
//! is set.

use std::path::{Path, PathBuf};

use noesis_testkit::skip::Dependency;

use crate::dashboard::{prepare, ui};
use crate::support::Work;

fn playwright() -> Option<(PathBuf, PathBuf)> {
    let dir = PathBuf::from(std::env::var_os("NOESIS_PLAYWRIGHT")?);
    let chromium =
        std::env::var_os("NOESIS_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    (dir.join("node_modules/playwright-core").is_dir() && chromium.is_file()).then_some((dir, chromium))
}

#[test]
fn in_chromium_a_session_tree_shows_why_a_frame_was_invalidated_and_hostile_text_runs_nothing() {
    let Some((playwright, chromium)) = playwright() else {
        noesis_testkit::skip::missing(
            Dependency::Browser,
            "in_chromium_a_session_tree_shows_why_a_frame_was_invalidated_and_hostile_text_runs_nothing",
            "NOESIS_PLAYWRIGHT/NOESIS_CHROMIUM do not name an installed playwright-core and Chromium (scripts/browser.sh installs them)",
        );
        return;
    };
    let work = Work::new();
    prepare(&work);
    let (_ui, base) = ui(&work);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.cjs");
    let out = std::process::Command::new("node")
        .arg(&script)
        .arg(&base)
        .arg(&shots)
        .env("NOESIS_PLAYWRIGHT", &playwright)
        .env("NOESIS_CHROMIUM", &chromium)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser script failed: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = &report["checks"];
    assert_eq!(report["dialogs"], serde_json::json!([]), "something ran: {report}");
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "console or page errors (a CSP violation shows here): {report}"
    );
    assert_eq!(checks["title"], "Sessions · noesis");
    assert_eq!(checks["changed"], 1, "{report}");
    assert!(
        checks["invalidated_listed"].as_u64().unwrap() >= 1,
        "the newest session lists what it invalidated: {report}"
    );
    assert_eq!(checks["closed_after_collapse"], 0, "our script collapsed the tree: {report}");
    assert_eq!(checks["open_after_expand"], checks["details"], "and expanded it: {report}");
    assert!(checks["details"].as_u64().unwrap() >= 2, "{report}");
    assert_eq!(checks["reason_visible"], true, "{report}");
    assert!(checks["reason"].as_str().unwrap().contains("file a.py changed"), "{report}");
    assert!(
        checks["frame_heading"].as_str().unwrap().contains("<img src=x onerror=alert(1)>"),
        "shown as text: {report}"
    );
    assert_eq!(
        (checks["images"].clone(), checks["javascript_links"].clone()),
        (serde_json::json!(0), serde_json::json!(0))
    );
    assert!(checks["search_results"].as_u64().unwrap() >= 2, "{report}");
    assert_eq!(checks["run_calls"], 1, "the run's timeline: {report}");
    assert!(checks["usage_bars"].as_u64().unwrap() >= 2, "a stacked bar per day: {report}");
    for view in ["sessions", "session", "tree", "frame", "run", "search", "usage"] {
        assert!(shots.join(format!("{view}.png")).is_file(), "no screenshot of {view}");
    }
}

#[test]
fn in_chromium_a_live_runs_page_takes_the_approval_and_follows_the_run_to_its_answer() {
    let Some((playwright, chromium)) = playwright() else {
        noesis_testkit::skip::missing(
            Dependency::Browser,
            "in_chromium_a_live_runs_page_takes_the_approval",
            "NOESIS_PLAYWRIGHT/NOESIS_CHROMIUM do not name an installed playwright-core and Chromium (scripts/browser.sh installs them)",
        );
        return;
    };
    use crate::serve::{agent_serve, http, wait_status};
    let work = Work::new();
    // The run streams: the call comes as one event stream, the answer as
    // another, slowly enough for the live view to show it growing.
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        (
            "",
            serde_json::json!({"model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let call = noesis_testkit::sse(&[
        chunk(
            serde_json::json!({"tool_calls": [{"index": 0, "id": "b1", "type": "function", "function": {
                "name": "write_file", "arguments": "{\"path\": \"from-browser.txt\", \"content\": \"ok\"}"}}]}),
            Some("tool_calls"),
        ),
        ("", serde_json::json!("[DONE]")),
    ]);
    let answer = noesis_testkit::sse(&[
        chunk(serde_json::json!({"content": "Answer from "}), None),
        chunk(serde_json::json!({"content": "the browser "}), None),
        chunk(serde_json::json!({"content": "run."}), Some("stop")),
        ("", serde_json::json!("[DONE]")),
    ]);
    let fake = noesis_testkit::FakeServer::start(vec![
        noesis_testkit::Reply::Stream(call, std::time::Duration::from_millis(10)),
        noesis_testkit::Reply::Stream(answer, std::time::Duration::from_millis(700)),
    ])
    .unwrap();
    let s = agent_serve(&work, &fake);
    let (_, started) = http(
        &s.addr,
        "POST",
        "/agents/runs",
        Some(&serde_json::json!({"task": "Write from-browser.txt", "stream": true})),
        Some(&s.token),
    );
    let id = started["run_id"].as_str().unwrap().to_owned();
    wait_status(&s.addr, &id, "awaiting_approval");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/live_run.cjs");
    let out = std::process::Command::new("node")
        .arg(&script)
        .arg(format!("http://{}", s.addr))
        .arg(&id)
        .arg(&shots)
        .env("NOESIS_PLAYWRIGHT", &playwright)
        .env("NOESIS_CHROMIUM", &chromium)
        // The page signs in with it through the /login form (an env
        // variable: argv is visible to other users).
        .env("NOESIS_TOKEN", &s.token)
        .output()
        .unwrap();
    assert!(out.status.success(), "the browser script failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "console or page errors (a CSP violation shows here): {report}"
    );
    assert_eq!(report["dialogs"], serde_json::json!([]), "{report}");
    assert_eq!(report["checks"]["approve_buttons"], 1, "{report}");
    assert_eq!(report["checks"]["session_cookie"], true, "signed in with a session id, not the token: {report}");
    assert_eq!(report["checks"]["live_after"], 0, "the finished run's page has no live view: {report}");
    let line = report["checks"]["streamed_line"].as_str().unwrap_or_default();
    assert!(line.starts_with("Answer from"), "the answer grew in one line of the live view: {report}");
    assert_eq!(std::fs::read_to_string(work.path().join("from-browser.txt")).unwrap(), "ok");
    let done = wait_status(&s.addr, &id, "done");
    assert_eq!(done["outcome"]["text"], "Answer from the browser run.");
}
