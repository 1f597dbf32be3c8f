//! `noesis test`: a module's own cases run through the runtime and checked
//! against their `$validate` fragments.

use serde_json::{Value, json};

use crate::support::{Work, example_module, output, regex_escape};

/// A module whose test model reply is fully predictable: a decision module
/// whose data is one string plus the rationale.
fn module(w: &Work, dir: &str) {
    w.write(&format!("{dir}/module.yaml"), "name: echo\nversion: 1.0.0\nresponsibility: Echoes\ntier: exploration\n");
    w.write(&format!("{dir}/prompt.md"), "Echo $ARGUMENTS\n");
    w.write(
        &format!("{dir}/schema.json"),
        r#"{"input": {"type": "object"}, "data": {"type": "object", "required": ["echo", "rationale"], "properties": {"echo": {"type": "string"}, "rationale": {"type": "string"}}}}"#,
    );
}

fn case(w: &Work, dir: &str, name: &str, input: &Value, validate: &Value) {
    w.write(&format!("{dir}/tests/{name}.input.json"), &input.to_string());
    w.write(&format!("{dir}/tests/{name}.expected.json"), &json!({ "$validate": validate }).to_string());
}

fn pass_and_fail(w: &Work) {
    module(w, "mods/echo");
    case(
        w,
        "mods/echo",
        "good",
        &json!({"query": "hi"}),
        &json!({"ok": {"const": true}, "data": {"required": ["echo"]}}),
    );
    case(
        w,
        "mods/echo",
        "bad",
        &json!({"query": "hi"}),
        &json!({"ok": {"const": true}, "data": {"required": ["missing_field"]}, "meta": {"properties": {"risk": {"const": "high"}}}}),
    );
}

#[test]
fn module_test_conformance_code_simplifier() {
    let w = Work::new();
    let o = output(w.noesis().arg("test").arg(example_module("code-simplifier")));
    // Its `tests:` lists three of the five case files. The test model
    // answers every case with a success envelope fabricated from the reply
    // schema, so the two success cases pass and the parse-error case, which
    // expects `ok: false` with PARSE_ERROR, fails.
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("schema-driven test model (offline, deterministic)"), "{}", o.stderr);
    let verdicts: Vec<&str> = o.stdout.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(
        verdicts,
        [
            "PASS code-simplifier case1",
            "PASS code-simplifier case2",
            "FAIL code-simplifier case_parse_error",
            "2 passed, 1 failed"
        ],
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("  /ok: "), "{}", o.stdout);
}

#[test]
fn module_test_pass_and_fail() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("1 passed, 1 failed"), "{}", o.stdout);
    assert!(o.stdout.contains("PASS echo good"), "{}", o.stdout);
    assert!(o.stdout.contains("FAIL echo bad"), "{}", o.stdout);
    assert!(o.stdout.contains("  /data/missing_field: "), "{}", o.stdout);
    assert!(o.stdout.contains("  /meta/risk: "), "{}", o.stdout);
    // A folder of modules: every module under it.
    module(&w, "mods/echo2");
    case(&w, "mods/echo2", "only", &json!({}), &json!({"ok": {"const": true}}));
    let o = output(w.noesis().args(["test", "mods"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("2 passed, 1 failed"), "{}", o.stdout);
    // All passing: exit 0.
    let o = output(w.noesis().args(["test", "./mods/echo2"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
}

#[test]
fn module_test_json_report() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo", "--json"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let report = o.json();
    assert_eq!((report["passed"].as_u64(), report["failed"].as_u64()), (Some(1), Some(1)));
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.iter().map(|c| c["case"].as_str().unwrap()).collect::<Vec<_>>(), ["bad", "good"]);
    let bad = &cases[0];
    assert_eq!(bad["passed"], false);
    let pointers: Vec<&str> =
        bad["violations"].as_array().unwrap().iter().map(|v| v["pointer"].as_str().unwrap()).collect();
    assert!(pointers.contains(&"/data/missing_field"), "{pointers:?}");
    assert_eq!(bad["envelope"]["ok"], true);
    assert!(o.stderr.contains("1 passed, 1 failed"), "{}", o.stderr);
}

#[test]
fn module_test_replays_a_recording() {
    let w = Work::new();
    module(&w, "mods/echo");
    case(
        &w,
        "mods/echo",
        "a",
        &json!({"query": "recorded"}),
        &json!({"ok": {"const": true}, "data": {"required": ["echo"]}}),
    );
    let rec = w.path().join("rec");
    let o = output(
        w.noesis()
            .args(["run", "./mods/echo", "--provider", "test", "--record"])
            .arg(&rec)
            .args(["--input", "mods/echo/tests/a.input.json"]),
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o = output(w.noesis().args(["test", "./mods/echo", "--replay"]).arg(&rec));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("1 passed, 0 failed"), "{}", o.stdout);
    assert!(!o.stderr.contains("test model"), "a replay is not announced as the test model: {}", o.stderr);
    // A case with no recording fails closed: the replay, not the test model, answered.
    case(&w, "mods/echo", "b", &json!({"query": "never recorded"}), &json!({"ok": {"const": true}}));
    let o = output(w.noesis().args(["test", "./mods/echo", "--replay"]).arg(&rec));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("1 passed, 1 failed"), "{}", o.stdout);
    assert!(o.stdout.contains("the run returned E4001"), "{}", o.stdout);
}

#[test]
fn module_test_bad_files_are_usage_errors() {
    let w = Work::new();
    module(&w, "mods/echo");
    w.write("mods/echo/tests/x.input.json", "{}");
    w.write("mods/echo/tests/x.expected.json", "{ not json");
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("mods/echo/tests/x.expected.json: the expected result is not JSON"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "nothing runs before every file is read: {}", o.stdout);
    w.write("mods/echo/tests/x.expected.json", r#"{"$example": {}}"#);
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("x.expected.json: no `$validate` object"), "{}", o.stderr);
    w.write("mods/echo/tests/x.expected.json", r#"{"$validate": {"ok": {"type": 12}}}"#);
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("x.expected.json: `$validate.ok` is not a valid schema"), "{}", o.stderr);
    // A `tests:` entry naming a missing file.
    w.write("mods/echo/module.yaml", "name: echo\nversion: 1.0.0\nresponsibility: Echoes\ntier: exploration\ntests:\n  - tests/gone.input.json -> tests/gone.expected.json\n");
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("tests/gone.input.json: cannot read the test input"), "{}", o.stderr);
    // No cases, and no module.
    let o = output(w.noesis().args(["test", "code-simplifier"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("built-in module"), "{}", o.stderr);
    assert_eq!(output(w.noesis().args(["test", "nowhere"])).code, 2);
}

#[test]
fn module_test_report() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&w.path().display().to_string()), "[TMP]");
    settings.bind(|| insta::assert_snapshot!("module_test_report", o.stdout));
}
