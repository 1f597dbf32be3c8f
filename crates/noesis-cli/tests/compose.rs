//! `noesis compose` and `@call` through `noesis run`.

use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

use crate::support::{Work, assert_valid_envelope, output, regex_escape};

const SCHEMA: &str = r#"{"input": {"type": "object"}, "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}, "note": {"type": "string"}}}}"#;

fn module(w: &Work, name: &str, yaml: &str, prompt: &str) {
    let dir = format!("cognitive/modules/{name}");
    w.write(
        &format!("{dir}/module.yaml"),
        &format!("name: {name}\nversion: 1.0.0\nresponsibility: fixture {name}\ntier: exploration\n{yaml}\n"),
    );
    w.write(&format!("{dir}/prompt.md"), prompt);
    w.write(&format!("{dir}/schema.json"), SCHEMA);
}

fn review_modules(w: &Work) {
    module(
        w,
        "review",
        "composition:\n  dataflow:\n    - from: input\n      to: lint\n    - from: lint.output\n      to: deep\n      condition: \"$.meta.risk == 'high'\"\n    - from: lint.output\n      to: output",
        "Review.",
    );
    module(w, "lint", "", "Lint, with the house style: @call:style");
    module(w, "style", "", "The house style.");
    module(w, "deep", "", "Look deeper.");
}

#[test]
fn compose_trace_table() {
    let w = Work::new();
    review_modules(&w);
    let o = output(w.noesis().args(["compose", "review", "--provider", "test", "--trace"]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["ok"], true);
    assert!(env["meta"]["explain"].as_str().unwrap().contains("sequential composition of lint"), "{env}");
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&w.path().display().to_string()), "[TMP]");
    settings.add_filter(r"[0-9]+\.[0-9]ms \+[0-9]+\.[0-9]ms *", "[TIME]  ");
    settings.add_filter(r"start \+took *", "start +took  ");
    settings.bind(|| insta::assert_snapshot!("compose_trace_table", o.stderr));
}

#[test]
fn compose_trace_json_lines() {
    let w = Work::new();
    review_modules(&w);
    let o = output(w.noesis().args(["compose", "review", "--provider", "test", "--trace", "json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let steps: Vec<Value> =
        o.stderr.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let brief: Vec<(String, u64, String)> = steps
        .iter()
        .map(|s| {
            (
                s["module"].as_str().unwrap().to_owned(),
                s["depth"].as_u64().unwrap(),
                s["outcome"]["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        brief,
        vec![
            ("review".into(), 0, "ok".into()),
            ("lint".into(), 1, "ok".into()),
            ("style".into(), 2, "ok".into()),
            ("deep".into(), 1, "skipped".into()),
        ]
    );
    assert_eq!(steps[2]["via"], "@call");
    assert_eq!(steps[2]["parent"], 1);
    // stdout is only the envelope.
    assert!(o.json().is_object());
}

#[test]
fn compose_reports_a_cycle_as_an_envelope() {
    let w = Work::new();
    module(&w, "ping", "", "@call:pong");
    module(&w, "pong", "", "@call:ping");
    let o = output(w.noesis().args(["compose", "ping", "--provider", "test"]));
    assert_eq!(o.code, 1, "{}", o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4004");
    assert!(env["error"]["message"].as_str().unwrap().contains("ping → pong → ping"));
}

#[test]
fn run_resolves_a_call_and_injects_the_childs_envelope() {
    let w = Work::new();
    module(&w, "brief", "", "Write a brief. Background: @call:background({\"topic\": \"tides\"}) End.");
    module(&w, "background", "", "Background on ${topic}.");
    let child = json!({"ok": true, "meta": {"confidence": 0.8, "risk": "none", "explain": "bg"}, "data": {"note": "MOON-PULL", "rationale": "physics"}});
    let parent = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "brief"}, "data": {"note": "brief done", "rationale": "used the background"}});
    let server = FakeServer::start(vec![Reply::Chat(child.to_string()), Reply::Chat(parent.to_string())]).unwrap();
    let o = output(
        w.noesis()
            .env("LLM_PROVIDER", "openai")
            .env("OPENAI_BASE_URL", server.base_url())
            .env("OPENAI_API_KEY", "sk-test-key")
            .args(["run", "brief", "--model", "gpt-test"]),
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["data"]["note"], "brief done");
    assert_eq!(env["meta"]["usage"]["calls"], 2, "both runs are counted");
    let received = server.received();
    assert_eq!(received.len(), 2);
    let prompt_of = |i: usize| received[i].json()["messages"][1]["content"].as_str().unwrap_or_default().to_owned();
    assert!(prompt_of(0).contains("Background on tides."), "the child ran first: {}", prompt_of(0));
    let parent_prompt = prompt_of(1);
    assert!(parent_prompt.contains("MOON-PULL") && !parent_prompt.contains("@call:"), "{parent_prompt}");
}

#[test]
fn compose_steps_are_recorded_as_child_frames() {
    let w = Work::new();
    review_modules(&w);
    let home = w.path().join("home");
    let noesis = || {
        let mut c = w.noesis();
        c.env("NOESIS_HOME", &home).env_remove("NOESIS_STORE");
        c
    };
    let o = output(noesis().args(["compose", "review", "--provider", "test"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("not recorded"), "{}", o.stderr);
    let o = output(noesis().args(["frames", "list", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let frames = o.json().as_array().unwrap().clone();
    let find = |prefix: &str| {
        frames
            .iter()
            .find(|f| f["query"].as_str().unwrap_or_default().starts_with(prefix))
            .unwrap_or_else(|| panic!("no frame for {prefix}: {frames:#?}"))
            .clone()
    };
    let root = find("review input:");
    let lint = find("lint via dataflow[0]");
    let style = find("style via @call");
    let deep = find("deep via dataflow[1]");
    assert_eq!(frames.len(), 4, "{frames:#?}");
    assert_eq!(lint["parent_id"], root["frame_id"]);
    assert_eq!(style["parent_id"], lint["frame_id"], "an @call hangs under its caller");
    assert_eq!(deep["parent_id"], root["frame_id"]);
    assert!(deep["conclusion"].as_str().unwrap().starts_with("skipped"), "{deep}");
}

#[test]
fn a_called_module_follows_its_own_route() {
    let w = Work::new();
    module(&w, "brief", "", "Brief, with @call:quick({\"q\": 1}) inside.");
    w.write("cognitive/modules/quick/module.yaml", "name: quick\nversion: 1.0.0\nresponsibility: r\ntier: exec\n");
    w.write("cognitive/modules/quick/prompt.md", "Answer quickly.\n");
    w.write("cognitive/modules/quick/schema.json", SCHEMA);
    w.write("noesis.toml", "provider = \"openai\"\n\n[[routes]]\ntier = \"exec\"\nprovider = \"ollama\"\n");
    let child = json!({"ok": true, "meta": {"confidence": 0.8, "risk": "none", "explain": "quick"}, "data": {"note": "FROM-OLLAMA", "rationale": "r"}});
    let parent = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "brief"}, "data": {"note": "done", "rationale": "r"}});
    let ollama = FakeServer::start(vec![crate::providers::ollama_reply(&child)]).unwrap();
    let openai = FakeServer::start(vec![Reply::Chat(parent.to_string())]).unwrap();
    let noesis = || {
        let mut c = w.noesis_bare();
        c.env("OPENAI_BASE_URL", openai.base_url())
            .env("OPENAI_API_KEY", "sk-e2e")
            .env("OLLAMA_HOST", format!("http://{}", ollama.addr()));
        c
    };
    let o = output(noesis().args(["run", "brief", "--model", "gpt-4o-mini"]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(o.json()["meta"]["model"], "openai/gpt-4o-mini");
    assert_eq!(ollama.received().len(), 1, "the exec child went to its route");
    assert_eq!(openai.received().len(), 1, "the decision parent stayed on openai");
    let parent_prompt = openai.received()[0].json()["messages"].to_string();
    assert!(parent_prompt.contains("FROM-OLLAMA"), "{parent_prompt}");

    // A provider flag beats the route for every module of the run.
    let openai2 = FakeServer::start(vec![Reply::Chat(child.to_string()), Reply::Chat(parent.to_string())]).unwrap();
    let o = output(noesis().env("OPENAI_BASE_URL", openai2.base_url()).args([
        "run",
        "brief",
        "--provider",
        "openai",
        "--model",
        "m",
    ]));
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(openai2.received().len(), 2);
    assert_eq!(ollama.received().len(), 1, "no new call went to ollama");
}

#[test]
fn a_called_module_is_found_beside_its_caller_before_the_search_path() {
    let w = Work::new();
    let pair = |name: &str, prompt: &str| {
        let dir = format!("elsewhere/pair/{name}");
        w.write(
            &format!("{dir}/module.yaml"),
            &format!("name: {name}\nversion: 1.0.0\nresponsibility: r\ntier: exploration\n"),
        );
        w.write(&format!("{dir}/prompt.md"), prompt);
        w.write(&format!("{dir}/schema.json"), SCHEMA);
    };
    pair("analyzer", "Analyse, then: @call:spec");
    pair("spec", "Write the spec.");
    // A broken module of the same name on the search path: had it been
    // used, the call would fail.
    w.write("cognitive/modules/spec/module.yaml", "name: [broken\n");
    let compose =
        || output(w.noesis().args(["compose", "./elsewhere/pair/analyzer", "--provider", "test", "--trace", "json"]));
    let spec_status = |o: &crate::support::Output| {
        let steps: Vec<Value> = o.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        steps.iter().find(|s| s["module"] == "spec").map(|s| s["outcome"]["status"].as_str().unwrap_or("").to_owned())
    };
    let o = compose();
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(spec_status(&o).as_deref(), Some("ok"), "{}", o.stderr);
    // Without the sibling, the search path is consulted (and its broken spec fails the call)...
    std::fs::remove_dir_all(w.path().join("elsewhere/pair/spec")).unwrap();
    let o = compose();
    assert_ne!(spec_status(&o).as_deref(), Some("ok"), "{}", o.stderr);
    // ...and a good one there answers.
    module(&w, "spec", "", "The spec from the search path.");
    let o = compose();
    assert_eq!(spec_status(&o).as_deref(), Some("ok"), "{}", o.stderr);
}
