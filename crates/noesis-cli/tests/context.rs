//! The context protocol and policy/tool enforcement from the command line:
//! `--allow` and `[policies] allow`, `--tool`, and context emitted by one
//! `noesis run` stored in the project's store and served to the next.

use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

use crate::support::{Work, assert_valid_envelope, output};

/// A module in `dir` of the workspace with the given extra manifest lines.
fn module(w: &Work, dir: &str, extra_yaml: &str) -> String {
    w.write(
        &format!("{dir}/module.yaml"),
        &format!("name: {dir}\nversion: 1.0.0\nresponsibility: answer\ntier: decision\n{extra_yaml}"),
    );
    w.write(&format!("{dir}/prompt.md"), "Answer: ${question}\n");
    let schema = json!({
        "input": {"type": "object", "required": ["question"], "additionalProperties": false,
                  "properties": {"question": {"type": "string"}}},
        "data": {"type": "object", "required": ["rationale", "answer"],
                 "properties": {"rationale": {"type": "string"}, "answer": {"type": "string"}}}
    });
    w.write(&format!("{dir}/schema.json"), &schema.to_string());
    w.path().join(dir).to_string_lossy().into_owned()
}

const Q: &str = r#"{"question": "q"}"#;

fn error_code(env: &Value) -> &str {
    env["error"]["code"].as_str().unwrap_or("(ok)")
}

#[test]
fn context_allow_flag_and_config_grant_policies() {
    let w = Work::new();
    let m = module(&w, "netter", "policies:\n  network: allow\n");
    let o = output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(error_code(&env), "E4007");
    assert!(env["error"]["message"].as_str().unwrap().contains("`network: allow`"), "{env}");
    assert!(env["error"]["suggestion"].as_str().unwrap().contains("--allow network"), "{env}");

    let o = output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q, "--allow", "side_effects,network"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);

    let o = output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q, "--allow", "Net Work"]));
    assert_eq!(o.code, 2, "a malformed grant is a usage error: {}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("--allow Net Work"), "{}", o.stderr);

    w.write("noesis.toml", "[policies]\nallow = [\"network\"]\n");
    let o = output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q]));
    assert_eq!(o.code, 0, "granted in noesis.toml: {}{}", o.stdout, o.stderr);
}

#[test]
fn context_tool_flag_is_checked_against_the_module() {
    let w = Work::new();
    let m = module(&w, "grepper", "tools:\n  policy: deny_by_default\n  allowed: [grep]\n  denied: [shell]\n");
    let o = output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q, "--tool", "grep"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o =
        output(w.noesis().args(["run", &m, "--provider", "test", "--input", Q, "--tool", "grep", "--tool", "shell"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(error_code(&env), "E4007");
    assert!(env["error"]["message"].as_str().unwrap().contains("tool `shell`"), "{env}");
}

#[test]
fn context_emitted_by_one_run_is_served_to_the_next() {
    let w = Work::new();
    let m = module(
        &w,
        "stateful",
        "context:\n  accepts:\n    - type: session_state\n  emits:\n    - type: session_state\n      ttl: 3600\n",
    );
    let first = json!({"ok": true,
        "meta": {"confidence": 0.9, "risk": "low", "explain": "e",
                 "_emitted_context": {"session_state": {"STATE-MARKER": 7, "password": "hunter2"}}},
        "data": {"rationale": "r", "answer": "a"}})
    .to_string();
    let plain = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"},
        "data": {"rationale": "r", "answer": "b"}})
    .to_string();
    let server = FakeServer::start(vec![Reply::Chat(first), Reply::Chat(plain)]).unwrap();
    let run = || {
        let mut c = w.noesis();
        c.env("LLM_PROVIDER", "openai").env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test");
        c.args(["run", &m, "--input", Q]);
        output(&mut c)
    };
    let o = run();
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert!(!o.stdout.contains("_emitted_context") && !o.stdout.contains("STATE-MARKER"), "{}", o.stdout);
    assert!(!o.stderr.contains("warning"), "{}", o.stderr);

    let o = run();
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let received = server.received();
    assert_eq!(received.len(), 2);
    let prompt = received[1].json()["messages"].to_string();
    assert!(prompt.contains("STATE-MARKER"), "the stored context was served: {prompt}");
    assert!(!prompt.contains("hunter2"), "secrets are redacted before they are stored: {prompt}");
    assert!(!received[0].json()["messages"].to_string().contains("STATE-MARKER"));
}

#[test]
fn context_store_failure_only_warns() {
    let w = Work::new();
    let m = module(&w, "stateful", "context:\n  accepts:\n    - type: session_state\n");
    // A store URL that cannot be opened: the run still succeeds.
    let o = output(w.noesis().args(["--store", "ftp://nowhere", "run", &m, "--provider", "test", "--input", Q]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("warning: stored context `session_state` could not be read"), "{}", o.stderr);
}
