use std::time::Duration;

use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

use crate::support::{Work, assert_valid_envelope, conformance, example_module, output};

fn read(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn openai(w: &Work, server: &FakeServer) -> assert_cmd::Command {
    let mut c = w.noesis();
    c.env("LLM_PROVIDER", "openai").env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test-key");
    c
}

fn code_input() -> &'static str {
    r#"{"code": "def f(x):\n    if x:\n        return 1\n    return 0", "language": "python"}"#
}

#[test]
fn test_model_runs_every_example_module() {
    let w = Work::new();
    for (m, input) in [
        ("code-simplifier", code_input().to_owned()),
        (
            "code-reviewer",
            std::fs::read_to_string(example_module("code-reviewer").join("examples/input.json")).unwrap(),
        ),
        (
            "task-prioritizer",
            std::fs::read_to_string(example_module("task-prioritizer").join("examples/input.json")).unwrap(),
        ),
    ] {
        let o = output(w.noesis().arg("run").arg(example_module(m)).args(["--provider", "test", "--input", &input]));
        assert_eq!(o.code, 0, "{m}: {}{}", o.stdout, o.stderr);
        let env = o.json();
        assert_eq!(env["ok"], true);
        assert_eq!(env["meta"]["model"], "test/schema");
        assert_valid_envelope(&env);
    }
}

#[test]
fn with_no_provider_nothing_runs_and_the_error_says_how_to_configure_one() {
    let w = Work::new();
    let module = example_module("code-simplifier");
    for args in [
        vec!["run".as_ref(), module.as_os_str(), "--input".as_ref(), code_input().as_ref()],
        vec!["serve".as_ref(), "--port".as_ref(), "0".as_ref()],
        vec!["mcp".as_ref()],
    ] {
        // A server that starts anyway would never end: the timeout fails it.
        let o = output(w.noesis_bare().args(&args).timeout(std::time::Duration::from_secs(60)));
        assert_eq!(o.code, 2, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
        for how in ["no provider configured", "OPENAI_API_KEY", "noesis model install", "--provider test"] {
            assert!(o.stderr.contains(how), "{args:?} does not say {how}: {}", o.stderr);
        }
    }
    // Nothing was recorded.
    let o = output(w.noesis_bare().args(["frames", "list", "--json"]));
    assert_eq!(o.json().as_array().map(Vec::len), Some(0), "{}", o.stdout);
}

#[test]
fn the_test_model_runs_when_named_and_its_frames_say_it_made_the_answer_up() {
    let w = Work::new();
    let o = output(w.noesis_bare().args(["run", "code-simplifier", "--provider", "test", "--input", code_input()]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.json()["meta"]["model"], "test/schema");
    let o = output(w.noesis_bare().args(["frames", "list", "--json"]));
    let frames = o.json();
    let frame = &frames[0];
    let context: Value = serde_json::from_str(frame["context_slice"].as_str().unwrap()).unwrap();
    assert_eq!((&context["model"], &context["fabricated"]), (&json!("test/schema"), &json!(true)), "{context}");
    assert_eq!(frame["confidence"], json!(0.0), "a made-up answer claims no confidence");
}

fn success(data: Value, risk: &str) -> String {
    json!({"ok": true, "meta": {"confidence": 0.9, "risk": risk, "explain": "done"}, "data": data}).to_string()
}

#[test]
fn openai_provider_runs_every_example_module_over_http() {
    let w = Work::new();
    let reviewer = success(
        json!({"issues": [{"severity": "critical", "category": "security", "description": "SQL injection", "suggestion": "use parameters", "risk": "high"}],
               "summary": "one issue", "rationale": "f-string SQL"}),
        "low",
    );
    let prioritizer = success(
        json!({"prioritized_tasks": [{"rank": 1, "task_id": "t1", "priority_score": 95, "quadrant": "urgent-important", "risk": "low"}],
               "rationale": "crash first"}),
        "low",
    );
    let case1: Value = read(&example_module("code-simplifier").join("tests/case1.expected.json"));
    for (m, reply, input_file, want_risk) in [
        ("code-simplifier", case1["$example"].to_string(), "tests/case1.input.json", "none"),
        ("code-reviewer", reviewer, "examples/input.json", "high"),
        ("task-prioritizer", prioritizer, "examples/input.json", "low"),
    ] {
        let server = FakeServer::start(vec![Reply::Chat(reply)]).unwrap();
        let input = example_module(m).join(input_file);
        let o = output(openai(&w, &server).args(["run", m, "--model", "gpt-test", "--input"]).arg(&input));
        assert_eq!(o.code, 0, "{m}: {}{}", o.stdout, o.stderr);
        let env = o.json();
        assert_valid_envelope(&env);
        assert_eq!(env["meta"]["model"], "openai/gpt-test");
        assert_eq!(env["meta"]["risk"], want_risk, "{m}: risk is aggregated from the data");
        let reqs = server.received();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
        assert_eq!(r.header("authorization"), Some("Bearer sk-test-key"));
        let body = r.json();
        assert_eq!(body["model"], "gpt-test");
        assert_eq!(body["response_format"]["type"], "json_schema");
        // Every example module can be put in OpenAI's strict form.
        let js = &body["response_format"]["json_schema"];
        assert_eq!(js["strict"], true, "{m}");
        assert_eq!(js["schema"]["additionalProperties"], false, "{m}");
        assert_eq!(js["schema"]["properties"]["ok"], json!({"type": "boolean"}), "{m}");
        // the input always reaches the model
        let input: Value = read(&input);
        let user = body["messages"][1]["content"].as_str().unwrap();
        let code_or_title = input.get("code").or_else(|| input.pointer("/tasks/0/title")).unwrap().as_str().unwrap();
        let encoded = serde_json::to_string(code_or_title).unwrap();
        assert!(user.contains(encoded.trim_matches('"')), "{m}: prompt lacks the input");
        assert!(user.trim_end().ends_with('}'), "the envelope instruction closes the prompt");
        assert!(!o.stderr.contains("sk-test-key"), "the key never reaches logs");
    }
}

/// Each `tests/` case of code-simplifier: the fake server answers with the
/// case's `$example`, and the envelope must satisfy its `$validate` fragments.
#[test]
fn code_simplifier_cases_satisfy_their_validate_fragments() {
    let w = Work::new();
    let dir = example_module("code-simplifier").join("tests");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".expected.json").map(str::to_owned))
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 5, "{cases:?}");
    for case in cases {
        let expected = read(&dir.join(format!("{case}.expected.json")));
        let server = FakeServer::start(vec![Reply::Chat(expected["$example"].to_string())]).unwrap();
        let o = output(
            openai(&w, &server).args(["run", "code-simplifier", "--input"]).arg(dir.join(format!("{case}.input.json"))),
        );
        let env = o.json();
        assert_valid_envelope(&env);
        for (key, fragment) in expected["$validate"].as_object().unwrap() {
            let schema = noesis_modules::CompiledSchema::compile(fragment).unwrap();
            let violations = schema.violations(&env[key]);
            assert!(violations.is_empty(), "{case}: {key} fails $validate: {violations:?}\n{env:#}");
        }
        let want = if expected["$validate"]["ok"]["const"] == true { 0 } else { 1 };
        assert_eq!(o.code, want, "{case}: exit code");
    }
}

#[test]
fn json_schema_rejected_falls_back_to_json_mode() {
    let w = Work::new();
    let case1 = read(&example_module("code-simplifier").join("tests/case1.expected.json"));
    let server = FakeServer::start(vec![
        Reply::Status(400, r#"{"error": {"message": "response_format json_schema is not supported"}}"#.into(), vec![]),
        Reply::Chat(case1["$example"].to_string()),
    ])
    .unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "-v", "--input", code_input()]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let reqs = server.received();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].json()["response_format"]["type"], "json_schema");
    assert_eq!(reqs[1].json()["response_format"]["type"], "json_object");
    assert!(o.stderr.contains("structured output: \"json_object\""), "{}", o.stderr);
}

#[test]
fn replies_in_prose_or_fences_are_extracted() {
    let w = Work::new();
    let env = success(
        json!({"simplified_code": "x", "changes": [], "behavior_equivalence": true, "summary": "s", "rationale": "r"}),
        "low",
    );
    for reply in [
        format!("Sure, here it is:\n```json\n{env}\n```\nAnything else?"),
        format!("The answer is {env} as requested."),
    ] {
        let server = FakeServer::start(vec![Reply::Chat(reply)]).unwrap();
        let o = output(openai(&w, &server).args(["run", "code-simplifier", "--input", code_input()]));
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        // no changes → medium (the spec's "no items" rule)
        assert_eq!(o.json()["meta"]["risk"], "medium");
    }
}

fn run_with_reply(reply: &str, module: &str, input: &str) -> (i32, Value) {
    let w = Work::new();
    let server = FakeServer::start(vec![Reply::Chat(reply.to_owned())]).unwrap();
    let o = output(openai(&w, &server).args(["run", module, "--input", input]));
    let env = o.json();
    assert_valid_envelope(&env);
    (o.code, env)
}

#[test]
fn repair_fills_meta_but_never_business_data() {
    let reply = json!({"ok": true, "data": {"simplified_code": "x", "changes": [{"type": "other", "description": "d", "scope": "local", "risk": "low"}],
                                            "behavior_equivalence": true, "summary": "s", "rationale": "  A long explanation.  "}});
    let (code, env) = run_with_reply(&reply.to_string(), "code-simplifier", code_input());
    assert_eq!(code, 0, "{env}");
    assert_eq!(env["meta"]["confidence"], 0.5);
    assert_eq!(env["meta"]["risk"], "low");
    assert_eq!(env["meta"]["explain"], "A long explanation.");
    assert_eq!(env["data"]["rationale"], "  A long explanation.  ", "data is untouched");
}

#[test]
fn level2_rules_give_their_codes() {
    let base = json!({"simplified_code": "x", "changes": [{"type": "other", "description": "d", "scope": "local", "risk": "low"}],
                      "behavior_equivalence": true, "summary": "s", "rationale": "because"});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut e =
            json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"}, "data": base.clone()});
        f(&mut e);
        e.to_string()
    };
    let insight = json!({"text": "t", "suggested_mapping": "m"});
    let cases: Vec<(&str, String)> = vec![
        ("E3003", with(&|e| e["data"]["rationale"] = json!("   "))),
        ("E3004", with(&|e| e["data"]["extensions"] = json!({"insights": vec![insight.clone(); 6]}))),
        ("E3004", with(&|e| e["data"]["extensions"] = json!({"insights": [{"text": "t", "suggested_mapping": ""}]}))),
        ("E3004", with(&|e| e["data"]["extensions"] = json!({"insights": vec![insight.clone(); 21]}))),
        ("E3004", with(&|e| e["data"]["extensions"] = json!({"insights": [{"text": "no mapping at all"}]}))),
        ("E3001", with(&|e| e["data"]["changes"][0]["type"] = json!({"custom": "", "reason": "empty custom"}))),
        ("E2001", with(&|e| e["meta"]["confidence"] = json!(0.2))),
        ("E3001", with(&|e| e["data"]["behavior_equivalence"] = json!("yes"))),
        ("E3001", with(&|e| e["data"]["changes"][0]["scope"] = json!("galaxy"))),
        ("E3001", with(&|e| e["meta"]["risk"] = json!("catastrophic"))),
    ];
    for (want, reply) in cases {
        let (code, env) = run_with_reply(&reply, "code-simplifier", code_input());
        assert_eq!(code, 1, "{want}: {env}");
        assert_eq!(env["error"]["code"], want, "{env:#}");
        assert_eq!(env["meta"]["risk"], "high");
        if want != "E2001" {
            assert_eq!(env["meta"]["confidence"], 0.0);
        }
        assert!(env["partial_data"].is_object(), "{want}: the data survives as partial_data");
    }
    // extensible enums accept {custom, reason}; within max_items insights are fine
    let ok = with(&|e| {
        e["data"]["changes"][0]["type"] = json!({"custom": "inline", "reason": "why"});
        e["data"]["extensions"] = json!({"insights": [insight.clone()]});
    });
    let (code, env) = run_with_reply(&ok, "code-simplifier", code_input());
    assert_eq!(code, 0, "{env:#}");
}

#[test]
fn strict_enums_and_exec_threshold() {
    let w = Work::new();
    w.write("m/module.yaml", "name: m\nversion: 1.0.0\nresponsibility: r\ntier: exec\n");
    w.write("m/prompt.md", "Do $ARGUMENTS");
    w.write(
        "m/schema.json",
        r#"{"data": {"type": "object", "required": ["kind", "rationale"], "properties": {"kind": {"oneOf": [{"enum": ["a", "b"]}, {"type": "object"}]}, "rationale": {"type": "string"}}}}"#,
    );
    let reply = |kind: Value, conf: f64| {
        json!({"ok": true, "meta": {"confidence": conf, "risk": "low", "explain": "e"}, "data": {"kind": kind, "rationale": "r"}}).to_string()
    };
    for (r, want) in [
        (reply(json!({"custom": "c", "reason": "r"}), 0.9), Some("E3005")),
        (reply(json!("a"), 0.6), Some("E2001")),
        (reply(json!("a"), 0.7), None),
    ] {
        let server = FakeServer::start(vec![Reply::Chat(r)]).unwrap();
        let o = output(openai(&w, &server).args(["run", "./m", "--args", "go"]));
        let env = o.json();
        assert_valid_envelope(&env);
        match want {
            Some(code) => assert_eq!(env["error"]["code"], code, "{env:#}"),
            None => assert_eq!(env["ok"], true, "{env:#}"),
        }
    }
}

#[test]
fn token_limit_is_e2003() {
    let w = Work::new();
    let server =
        FakeServer::start(vec![Reply::ChatFinish("{\"ok\": true, \"meta\": {\"confi".into(), "length".into())])
            .unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--input", code_input()]));
    assert_eq!(o.code, 1);
    assert_eq!(o.json()["error"]["code"], "E2003");
}

#[test]
fn provider_failures_map_to_codes() {
    let w = Work::new();
    let cases = [
        (Reply::Status(429, "{}".into(), vec![("retry-after".into(), "7".into())]), "E4002"),
        (Reply::Status(500, "boom".into(), vec![]), "E4001"),
        (Reply::Status(401, "bad key".into(), vec![]), "E4001"),
        (Reply::Status(400, r#"{"error": {"code": "context_length_exceeded"}}"#.into(), vec![]), "E4003"),
        (Reply::Status(200, "not json at all".into(), vec![]), "E4001"),
        (Reply::Close, "E4001"),
        (Reply::Delay(Duration::from_secs(3), Box::new(Reply::Chat("{}".into()))), "E2002"),
    ];
    for (reply, want) in cases {
        let server = FakeServer::start(vec![reply]).unwrap();
        let o = output(openai(&w, &server).args([
            "run",
            "code-simplifier",
            "--timeout",
            "1",
            "--retries",
            "0",
            "--input",
            code_input(),
        ]));
        assert_eq!(o.code, 1, "{want}: {}", o.stdout);
        let env = o.json();
        assert_valid_envelope(&env);
        assert_eq!(env["error"]["code"], want, "{env:#}");
        assert_eq!(env["error"]["recoverable"], true, "all of these are transient or caller-fixable");
        assert!(!o.stdout.contains("sk-test-key") && !o.stderr.contains("sk-test-key"));
    }
    // nothing listening at all
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let o = output(w.noesis().env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")).args([
        "run",
        "code-simplifier",
        "--provider",
        "openai",
        "--input",
        code_input(),
    ]));
    assert_eq!(o.json()["error"]["code"], "E4001");
}

#[test]
fn file_flag_and_stdin_input() {
    let w = Work::new();
    let src = w.write("src/lib.py", "def f():\n    return 1\n");
    let o = output(
        w.noesis()
            .args(["run", "code-simplifier", "--provider", "test", "--pretty", "--file"])
            .arg(format!("code={}", src.display())),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("\n  \"ok\": true"), "pretty output");
    let o = output(
        w.noesis().args(["run", "code-simplifier", "--provider", "test", "--input", "-"]).write_stdin(code_input()),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
}

#[test]
fn conformance_examples_input_files_exist() {
    // guards the fixtures the tests above rely on
    assert!(conformance().join("modules/code-reviewer/examples/input.json").is_file());
}

#[test]
fn args_fill_only_declared_fields_and_partial_data_obeys_the_manifest() {
    let w = Work::new();
    w.write(
        "m/module.yaml",
        "name: m\nversion: 1.0.0\nresponsibility: r\ntier: decision\nfailure:\n  partial_allowed: false\n",
    );
    w.write("m/prompt.md", "Task: $ARGUMENTS");
    w.write(
        "m/schema.json",
        r#"{"input": {"type": "object", "additionalProperties": false, "properties": {"topic": {"type": "string"}}},
            "data": {"type": "object", "required": ["n", "rationale"], "properties": {"n": {"type": "integer"}, "rationale": {"type": "string"}}}}"#,
    );
    let bad = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"}, "data": {"n": "NaN", "rationale": "r"}});
    let server = FakeServer::start(vec![Reply::Chat(bad.to_string())]).unwrap();
    let o =
        output(openai(&w, &server).args(["run", "./m", "--args", "write a poem", "--input", r#"{"topic": "sea"}"#]));
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E3001", "the closed input schema accepted the run: {env:#}");
    assert!(env.get("partial_data").is_none(), "partial_allowed: false");
    let prompt = server.received()[0].json()["messages"][1]["content"].as_str().unwrap().to_owned();
    assert!(prompt.starts_with("Task: write a poem"), "{prompt}");
    assert!(!prompt.contains("\"query\""), "undeclared fields are not added to the input");
}

#[test]
fn scripted_provider_sees_the_data_schema_in_the_prompt() {
    let w = Work::new();
    let case1 = read(&example_module("code-simplifier").join("tests/case1.expected.json"));
    let script = w.write("s.json", &json!([case1["$example"]]).to_string());
    let o = output(
        w.noesis()
            .args(["run", "code-simplifier", "-v", "--provider", "scripted", "--input", code_input(), "--script"])
            .arg(&script),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("must satisfy this JSON Schema"), "no schema in a text-mode prompt");
    assert_valid_envelope(&o.json());
}

#[test]
fn transient_http_failures_are_retried_by_default() {
    let w = Work::new();
    let case1 = read(&example_module("code-simplifier").join("tests/case1.expected.json"));
    let server = FakeServer::start(vec![
        Reply::Status(503, "busy".into(), vec![]),
        Reply::Close,
        Reply::Chat(case1["$example"].to_string()),
    ])
    .unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--input", code_input()]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_valid_envelope(&o.json());
    assert_eq!(server.received().len(), 3);
}

#[test]
fn retries_flag_bounds_the_attempts_and_the_error_says_so() {
    let w = Work::new();
    let server = FakeServer::start(vec![Reply::Status(500, "boom".into(), vec![])]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--retries", "1", "--input", code_input()]));
    assert_eq!(o.code, 1, "{}", o.stdout);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4001");
    assert!(env["error"]["message"].as_str().unwrap().contains("after 2 attempts"), "{env:#}");
    assert_eq!(server.received().len(), 2);

    let server = FakeServer::start(vec![Reply::Status(503, "busy".into(), vec![]), Reply::Chat("{}".into())]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--retries", "0", "--input", code_input()]));
    assert_eq!(o.json()["error"]["code"], "E4001");
    assert_eq!(server.received().len(), 1, "--retries 0 still retried");
}

#[test]
fn client_errors_are_not_retried_by_the_cli() {
    let w = Work::new();
    let server =
        FakeServer::start(vec![Reply::Status(400, r#"{"error": {"message": "bad"}}"#.into(), vec![])]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--input", code_input()]));
    assert_eq!(o.json()["error"]["code"], "E4001");
    assert_eq!(server.received().len(), 1);
}

#[test]
fn invalid_reply_is_reasked_with_its_violations() {
    let w = Work::new();
    let bad = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"},
                     "data": {"simplified_code": "x", "changes": [], "behavior_equivalence": "yes", "summary": "s", "rationale": "r"}});
    let good = read(&example_module("code-simplifier").join("tests/case1.expected.json"))["$example"].to_string();
    let server = FakeServer::start(vec![Reply::Chat(bad.to_string()), Reply::Chat(good)]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--input", code_input()]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let reqs = server.received();
    assert_eq!(reqs.len(), 2, "one re-ask");
    let messages = reqs[1].json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 4, "system, prompt, the rejected reply, the feedback");
    assert_eq!(messages[2]["role"], "assistant");
    let feedback = messages[3]["content"].as_str().unwrap();
    assert!(feedback.contains("/data/behavior_equivalence"), "{feedback}");

    // --reask 0 gives up at once; a low-confidence answer is never re-asked
    let server = FakeServer::start(vec![Reply::Chat(bad.to_string())]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--reask", "0", "--input", code_input()]));
    assert_eq!(o.json()["error"]["code"], "E3001");
    assert_eq!(server.received().len(), 1);
    let low = json!({"ok": true, "meta": {"confidence": 0.1, "risk": "low", "explain": "e"},
                     "data": {"simplified_code": "x", "changes": [], "behavior_equivalence": true, "summary": "s", "rationale": "r"}});
    let server = FakeServer::start(vec![Reply::Chat(low.to_string())]).unwrap();
    let o = output(openai(&w, &server).args(["run", "code-simplifier", "--reask", "3", "--input", code_input()]));
    assert_eq!(o.json()["error"]["code"], "E2001");
    assert_eq!(server.received().len(), 1);
}
