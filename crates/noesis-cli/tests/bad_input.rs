//! Bad input: a clear error naming the file and field, never a panic.

use noesis_testkit::{FakeServer, Reply};
use serde_json::json;

use crate::support::{Output, Work, assert_valid_envelope, output};

fn no_panic(o: &Output) {
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert_ne!(o.code, 101, "panic exit code");
}

fn module(w: &Work, yaml: Option<&str>, prompt: Option<&str>, schema: Option<&str>) {
    if let Some(y) = yaml {
        w.write("m/module.yaml", y);
    }
    if let Some(p) = prompt {
        w.write("m/prompt.md", p);
    }
    if let Some(s) = schema {
        w.write("m/schema.json", s);
    }
    std::fs::create_dir_all(w.path().join("m")).unwrap();
}

const GOOD_YAML: &str = "name: m\nversion: 1.0.0\nresponsibility: r\ntier: decision\n";

#[test]
fn broken_modules_name_file_field_and_rule() {
    type Case<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (Some(""), Some("p"), None, vec!["module.yaml", "invalid manifest", "(root)"]),
        (Some("name: [unclosed\n  - x: {"), Some("p"), None, vec!["module.yaml", "invalid YAML"]),
        (Some(":::\n\t- garbage"), Some("p"), None, vec!["module.yaml"]),
        (
            Some("name: m\nversion: 1\nresponsibility: r\ntier: boss\n"),
            Some("p"),
            None,
            vec!["module.yaml", "field /version", "rule: type", "field /tier", "rule: enum"],
        ),
        // Without `tier`, `overflow` or `enums` a manifest is v2.0/v2.1, which
        // loads (with the decision tier); `overflow` makes it v2.2, which needs one.
        (
            Some("name: m\nversion: 1.0.0\nresponsibility: r\noverflow:\n  enabled: true\n"),
            Some("p"),
            None,
            vec!["field /tier", "rule: required"],
        ),
        (
            Some("name: Bad_Name\nversion: \"1.0\"\nresponsibility: r\ntier: exec\n"),
            Some("p"),
            None,
            vec!["field /name", "field /version", "rule: pattern"],
        ),
        (Some(GOOD_YAML), None, None, vec!["prompt.md", "missing prompt"]),
        (Some(GOOD_YAML), Some("p"), Some("{not json"), vec!["schema.json", "invalid JSON", "line 1"]),
        (
            Some(GOOD_YAML),
            Some("p"),
            Some(r##"{"data": {"type": "object", "properties": {"x": {"$ref": "#/$defs/nowhere"}}}}"##),
            vec!["schema.json", "#/data", "nowhere"],
        ),
        (Some(GOOD_YAML), Some("p"), Some(r#"{"input": {"type": "frobnicate"}}"#), vec!["schema.json", "#/input"]),
        (Some(GOOD_YAML), Some("p"), Some("[1, 2]"), vec!["schema.json", "not an object"]),
        (
            Some("name: m\nversion: 1.0.0\nresponsibility: r\ntier: exec\nio:\n  data: ./schema.json\n"),
            Some("p"),
            Some("{}"),
            vec!["field /io/data", "needs a fragment"],
        ),
        (
            Some("name: m\nversion: 1.0.0\nresponsibility: r\ntier: exec\nio:\n  data: ../x.json#/data\n"),
            Some("p"),
            Some("{}"),
            vec!["field /io/data", "inside the module folder"],
        ),
        (
            Some("name: m\nversion: 1.0.0\nresponsibility: r\ntier: exec\nmin_confidence: high\n"),
            Some("p"),
            None,
            vec!["field /min_confidence", "rule: range"],
        ),
    ];
    for (yaml, prompt, schema, want) in cases {
        let w = Work::new();
        module(&w, yaml, prompt, schema);
        for cmd in [vec!["validate", "./m"], vec!["run", "./m", "--provider", "test"]] {
            let o = output(w.noesis().args(&cmd));
            no_panic(&o);
            assert_eq!(o.code, 2, "{cmd:?} {yaml:?}: {}", o.stderr);
            assert!(o.stdout.is_empty(), "nothing on stdout: {}", o.stdout);
            for needle in &want {
                assert!(o.stderr.contains(needle), "{cmd:?}: stderr lacks {needle:?}:\n{}", o.stderr);
            }
        }
    }
}

#[test]
fn unknown_module_is_e4006() {
    let w = Work::new();
    let o = output(w.noesis().args(["run", "no-such-module", "--provider", "test"]));
    assert_eq!(o.code, 1);
    let env = o.json();
    assert_eq!(env["error"]["code"], "E4006");
    assert_valid_envelope(&env);
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "test", "--file", "code=nope.py"]));
    assert_eq!(o.code, 1);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E1001");
    assert!(env["error"]["message"].as_str().unwrap().contains("nope.py"));
}

#[test]
fn bad_input_json_is_e1001_naming_the_file() {
    let w = Work::new();
    let f = w.write("in.json", "{\"code\": ");
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "test", "--input"]).arg(&f));
    no_panic(&o);
    assert_eq!(o.code, 1);
    let env = o.json();
    assert_eq!(env["error"]["code"], "E1001");
    assert!(env["error"]["message"].as_str().unwrap().contains("in.json"), "{env}");
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "test", "--input", "[1,2]"]));
    assert_eq!(o.json()["error"]["code"], "E1001");
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "test", "--input", "missing.json"]));
    assert_eq!(o.json()["error"]["code"], "E1001");
    assert!(o.json()["error"]["message"].as_str().unwrap().contains("missing.json"));
}

#[test]
fn input_failing_its_schema_names_the_pointer() {
    let w = Work::new();
    let cases = [
        (json!({"language": "py"}), "E1002", "/code"),
        (json!({"code": 42}), "E1003", "/code"),
        (json!({"code": "x", "options": {"max_line_length": "long"}}), "E1003", "/options/max_line_length"),
    ];
    for (input, code, pointer) in cases {
        let o =
            output(w.noesis().args(["run", "code-simplifier", "--provider", "test", "--input", &input.to_string()]));
        no_panic(&o);
        assert_eq!(o.code, 1);
        let env = o.json();
        assert_valid_envelope(&env);
        assert_eq!(env["error"]["code"], code, "{env:#}");
        assert_eq!(env["error"]["details"]["pointer"], pointer);
        assert_eq!(env["error"]["recoverable"], true);
        assert!(env["error"]["suggestion"].is_string());
    }
    let w2 = Work::new();
    module(
        &w2,
        Some(GOOD_YAML),
        Some("p"),
        Some(r#"{"input": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}}"#),
    );
    let o = output(w2.noesis().args(["run", "./m", "--provider", "test", "--input", "{\"n\": 9}"]));
    assert_eq!(o.json()["error"]["code"], "E1001");
    assert_eq!(o.json()["error"]["details"]["pointer"], "/n");
}

#[test]
fn model_reply_not_json_or_wrong_shape() {
    let w = Work::new();
    let input = r#"{"code": "x = 1"}"#;
    let cases = [
        ("I'm sorry, I can't do that.", "E1000"),
        ("", "E1000"),
        ("[1, 2, 3]", "E1000"),
        (r#"{"answer": 42}"#, "E3001"),
        (
            r#"{"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "x"}, "data": {"rationale": "r"}}"#,
            "E3001",
        ),
        (r#"{"ok": "yes", "data": {}}"#, "E3001"),
    ];
    for (reply, want) in cases {
        let server = FakeServer::start(vec![Reply::Chat(reply.to_owned())]).unwrap();
        let o = output(w.noesis().env("OPENAI_BASE_URL", server.base_url()).args([
            "run",
            "code-simplifier",
            "--provider",
            "openai",
            "--input",
            input,
        ]));
        no_panic(&o);
        assert_eq!(o.code, 1, "{reply}");
        let env = o.json();
        assert_valid_envelope(&env);
        assert_eq!(env["error"]["code"], want, "{reply}: {env:#}");
    }
}

#[test]
fn contradictory_schema_does_not_crash_the_test_model() {
    let w = Work::new();
    module(
        &w,
        Some(GOOD_YAML),
        Some("p"),
        Some(
            r#"{"data": {"type": "object", "required": ["n", "xs", "rationale"], "properties": {"n": {"type": "number", "minimum": 5, "maximum": 1}, "xs": {"type": "array", "minItems": 1000000000}, "rationale": {"type": "string", "minLength": 999999999}}}}"#,
        ),
    );
    let o = output(w.noesis().args(["run", "./m", "--provider", "test"]));
    no_panic(&o);
    assert_eq!(o.code, 1);
    assert_eq!(o.json()["error"]["code"], "E3001");
}

#[test]
fn scripted_provider_without_script_is_a_usage_error() {
    let w = Work::new();
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "scripted"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--script"));
    let o = output(w.noesis().args(["run", "code-simplifier", "--provider", "nonsense"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("unknown provider"));
}
