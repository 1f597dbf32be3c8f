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
    // Its `tests:` lists three of the five case files. By default each case
    // is answered with its own `$example`, so the expected failure
    // (`ok: false` with PARSE_ERROR) is checked too, and all pass.
    let o = output(w.noesis().arg("test").arg(example_module("code-simplifier")));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("its own `$example` (offline)"), "{}", o.stderr);
    let verdicts: Vec<&str> = o.stdout.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(
        verdicts,
        [
            "PASS code-simplifier case1",
            "PASS code-simplifier case2",
            "PASS code-simplifier case_parse_error",
            "3 passed, 0 failed"
        ],
        "{}",
        o.stdout
    );
    // The test model, when named, answers every case with a success
    // fabricated from the reply schema: the parse-error case fails.
    let o = output(w.noesis().arg("test").arg(example_module("code-simplifier")).args(["--provider", "test"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("FAIL code-simplifier case_parse_error\n  /ok: "), "{}", o.stdout);
    // --examples takes no provider.
    let o = output(w.noesis().arg("test").arg(example_module("code-simplifier")).args([
        "--examples",
        "--provider",
        "test",
    ]));
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[test]
fn a_case_without_an_example_fails_in_examples_mode() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("good.expected.json: no `$example` to answer with"), "{}", o.stdout);
}

#[test]
fn case_files_stay_inside_the_module_folder() {
    let w = Work::new();
    pass_and_fail(&w);
    w.write("secret.input.json", "{}");
    let manifest = |tests: &str| {
        format!("name: echo\nversion: 1.0.0\nresponsibility: Echoes\ntier: exploration\ntests:\n  - {tests}\n")
    };
    let outside = w.path().join("secret.input.json");
    for (entry, why) in [
        ("../../secret.input.json -> tests/good.expected.json".to_owned(), "leaves the module folder"),
        (format!("{} -> tests/good.expected.json", outside.display()), "absolute path"),
    ] {
        w.write("mods/echo/module.yaml", &manifest(&entry));
        let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
        assert_eq!(o.code, 2, "{entry}: {}{}", o.stdout, o.stderr);
        assert!(
            o.stderr.contains("mods/echo/module.yaml: tests: `") && o.stderr.contains(why),
            "{entry}: {}",
            o.stderr
        );
    }
    // A symlink inside the folder that leads out of it.
    std::os::unix::fs::symlink(&outside, w.path().join("mods/echo/tests/leak.input.json")).unwrap();
    w.write("mods/echo/module.yaml", &manifest("tests/leak.input.json -> tests/good.expected.json"));
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("leads out of the module folder"), "{}", o.stderr);
    // The same symlink found in tests/ (no `tests:` list) is refused too.
    w.write("mods/echo/module.yaml", "name: echo\nversion: 1.0.0\nresponsibility: Echoes\ntier: exploration\n");
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("leak.input.json` leads out"), "{}", o.stderr);
    // A symlink loop is an error, not a hang.
    std::fs::remove_file(w.path().join("mods/echo/tests/leak.input.json")).unwrap();
    let a = w.path().join("mods/echo/tests/loop.input.json");
    let b = w.path().join("mods/echo/tests/loop2.input.json");
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("loop.input.json` cannot be resolved"), "{}", o.stderr);
}

#[test]
fn module_test_pass_and_fail() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("1 passed, 1 failed"), "{}", o.stdout);
    assert!(o.stdout.contains("PASS echo good"), "{}", o.stdout);
    assert!(o.stdout.contains("FAIL echo bad"), "{}", o.stdout);
    assert!(o.stdout.contains("  /data/missing_field: "), "{}", o.stdout);
    assert!(o.stdout.contains("  /meta/risk: "), "{}", o.stdout);
    // A folder of modules: every module under it.
    module(&w, "mods/echo2");
    case(&w, "mods/echo2", "only", &json!({}), &json!({"ok": {"const": true}}));
    let o = output(w.noesis().args(["test", "mods", "--provider", "test"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("2 passed, 1 failed"), "{}", o.stdout);
    // All passing: exit 0.
    let o = output(w.noesis().args(["test", "./mods/echo2", "--provider", "test"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
}

#[test]
fn module_test_json_report() {
    let w = Work::new();
    pass_and_fail(&w);
    let o = output(w.noesis().args(["test", "./mods/echo", "--json", "--provider", "test"]));
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
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("mods/echo/tests/x.expected.json: the expected result is not JSON"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "nothing runs before every file is read: {}", o.stdout);
    w.write("mods/echo/tests/x.expected.json", r#"{"$example": {}}"#);
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("x.expected.json: no `$validate` object"), "{}", o.stderr);
    w.write("mods/echo/tests/x.expected.json", r#"{"$validate": {"ok": {"type": 12}}}"#);
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("x.expected.json: `$validate.ok` is not a valid schema"), "{}", o.stderr);
    // A `tests:` entry naming a missing file.
    w.write("mods/echo/module.yaml", "name: echo\nversion: 1.0.0\nresponsibility: Echoes\ntier: exploration\ntests:\n  - tests/gone.input.json -> tests/gone.expected.json\n");
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
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
    let o = output(w.noesis().args(["test", "./mods/echo", "--provider", "test"]));
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&w.path().display().to_string()), "[TMP]");
    settings.bind(|| insta::assert_snapshot!("module_test_report", o.stdout));
}
