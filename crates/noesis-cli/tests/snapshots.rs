//! Snapshot tests of what a person sees. Temp paths, ids and timings are
//! filtered so the snapshots are stable.

use crate::support::{Work, conformance, output, regex_escape};

fn filters(w: &Work) -> Vec<(String, &'static str)> {
    vec![
        (regex_escape(&w.path().display().to_string()), "[TMP]"),
        (regex_escape(&conformance().display().to_string()), "[CONFORMANCE]"),
        (r#""trace_id": "[0-9a-f-]{36}""#.to_owned(), r#""trace_id": "[TRACE]""#),
        (r#""latency_ms": [0-9.]+"#.to_owned(), r#""latency_ms": "[MS]""#),
    ]
}

macro_rules! snap {
    ($w:expr, $name:literal, $value:expr) => {{
        let mut settings = insta::Settings::clone_current();
        for (re, rep) in filters($w) {
            settings.add_filter(&re, rep);
        }
        settings.bind(|| insta::assert_snapshot!($name, $value));
    }};
}

#[test]
fn list_table() {
    let w = Work::new();
    w.write("cognitive/modules/mine/module.yaml", "name: mine\nversion: 0.3.0\nresponsibility: r\ntier: exploration\n");
    w.write("cognitive/modules/mine/prompt.md", "p");
    let o = output(w.noesis().arg("list"));
    snap!(&w, "list_table", o.stdout);
}

#[test]
fn info_text() {
    let w = Work::new();
    let o = output(w.noesis().args(["info", "code-simplifier"]));
    snap!(&w, "info_text", o.stdout);
}

#[test]
fn conformance_report() {
    let w = Work::new();
    let o = output(w.noesis().arg("conformance").arg(conformance().join("test-vectors")));
    snap!(&w, "conformance_report", o.stdout);
}

#[test]
fn run_with_test_model() {
    let w = Work::new();
    let o = output(w.noesis().args(["run", "task-prioritizer", "--provider", "test", "--pretty"]));
    snap!(&w, "run_with_test_model", o.stdout);
}

#[test]
fn invalid_manifest_message() {
    let w = Work::new();
    w.write("m/module.yaml", "name: Bad\nversion: one\nresponsibility: r\ntier: boss\n");
    w.write("m/prompt.md", "p");
    let o = output(w.noesis().args(["validate", "./m"]));
    snap!(&w, "invalid_manifest_message", o.stderr);
}
