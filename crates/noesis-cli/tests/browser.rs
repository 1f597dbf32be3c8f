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
    for view in ["sessions", "session", "tree", "frame", "run", "search"] {
        assert!(shots.join(format!("{view}.png")).is_file(), "no screenshot of {view}");
    }
}
