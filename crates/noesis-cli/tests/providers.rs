//! The provider layer through the `noesis` binary: every wire format, the
//! config files and their precedence, routes, fallback, record/replay,
//! streaming, budgets and `doctor`, over real HTTP against the fake server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::{Value, json};

use crate::support::{Output, Work, assert_valid_envelope, example_module, output, regex_escape};

/// An address where nothing listens: connections are refused at once.
const REFUSED: &str = "http://127.0.0.1:1/v1";

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn case1_input() -> PathBuf {
    example_module("code-simplifier").join("tests/case1.input.json")
}

/// code-simplifier's `case1` envelope: what a good model answers.
fn case1() -> Value {
    read_json(&example_module("code-simplifier").join("tests/case1.expected.json"))["$example"].clone()
}

fn ok_body(body: &Value) -> Reply {
    Reply::Status(200, body.to_string(), vec![])
}

/// `noesis run code-simplifier --input case1 ARGS…`.
fn run_case1(cmd: &mut Command, args: &[&str]) -> Output {
    output(cmd.args(["run", "code-simplifier", "--input"]).arg(case1_input()).args(args))
}

/// The run succeeded with case1's data, and the envelope is valid.
fn assert_case1_ok(o: &Output) -> Value {
    assert_eq!(o.code, 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["ok"], true, "{env:#}");
    assert_eq!(env["data"], case1()["data"], "the model's data comes through unchanged");
    env
}

fn assert_secret_absent(secret: &str, o: &Output) {
    assert!(!o.stdout.contains(secret), "the key is on stdout: {}", o.stdout);
    assert!(!o.stderr.contains(secret), "the key is on stderr: {}", o.stderr);
}

// ---------------------------------------------------------------- wire formats

#[test]
fn anthropic_through_the_cli() {
    const KEY: &str = "sk-ant-e2e-9f3c1a";
    let reply = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "code-simplifier", "input": case1()}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 321, "output_tokens": 54}
    });
    let server = FakeServer::start(vec![ok_body(&reply)]).unwrap();
    let w = Work::new();
    let o = run_case1(
        w.noesis_bare().env("ANTHROPIC_BASE_URL", format!("http://{}", server.addr())).env("ANTHROPIC_API_KEY", KEY),
        &["--provider", "anthropic"],
    );
    let env = assert_case1_ok(&o);
    assert_eq!(env["meta"]["model"], "anthropic/claude-sonnet-4-5");
    // claude-sonnet-4 prices: $3 in, $15 out per million tokens.
    assert_eq!(
        env["meta"]["usage"],
        json!({"input_tokens": 321, "output_tokens": 54, "calls": 1, "cost_usd": 0.001773})
    );
    let got = server.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("authorization"), None);
    assert!(!r.path.contains(KEY));
    let body = r.json();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    // Structured output is a forced tool named after the module.
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "code-simplifier"}));
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_secret_absent(KEY, &o);
}

#[test]
fn gemini_through_the_cli() {
    const KEY: &str = "AIza-e2e-4b7d02";
    let reply = json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": case1().to_string()}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 123, "candidatesTokenCount": 45, "totalTokenCount": 168},
        "modelVersion": "gemini-2.5-flash-001"
    });
    let server = FakeServer::start(vec![ok_body(&reply)]).unwrap();
    let w = Work::new();
    let o = run_case1(
        w.noesis_bare().env("GEMINI_BASE_URL", format!("http://{}/v1beta", server.addr())).env("GEMINI_API_KEY", KEY),
        &["--provider", "gemini"],
    );
    let env = assert_case1_ok(&o);
    assert_eq!(env["meta"]["model"], "gemini/gemini-2.5-flash");
    // gemini-2.5-flash prices: $0.30 in, $2.50 out per million tokens.
    assert_eq!(
        env["meta"]["usage"],
        json!({"input_tokens": 123, "output_tokens": 45, "calls": 1, "cost_usd": 0.0001494})
    );
    let got = server.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1beta/models/gemini-2.5-flash:generateContent"));
    assert_eq!(r.header("x-goog-api-key"), Some(KEY));
    assert!(!r.path.contains(KEY) && !r.path.contains("key="), "{}", r.path);
    assert_eq!(r.json()["generationConfig"]["responseMimeType"], "application/json");
    assert_secret_absent(KEY, &o);
}

#[test]
fn ollama_through_the_cli() {
    let reply = json!({
        "model": "llama3.2", "created_at": "2025-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": case1().to_string()},
        "done": true, "done_reason": "stop", "prompt_eval_count": 34, "eval_count": 12
    });
    let server = FakeServer::start(vec![ok_body(&reply)]).unwrap();
    let w = Work::new();
    // OLLAMA_HOST in Ollama's own `host:port` form.
    let o = run_case1(w.noesis_bare().env("OLLAMA_HOST", server.addr().to_string()), &["--provider", "ollama"]);
    let env = assert_case1_ok(&o);
    assert_eq!(env["meta"]["model"], "ollama/llama3.2");
    // A local model has no price: tokens only.
    assert_eq!(env["meta"]["usage"], json!({"input_tokens": 34, "output_tokens": 12, "calls": 1}));
    let got = server.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/chat"));
    assert_eq!(r.header("authorization"), None, "Ollama needs no key");
    let body = r.json();
    assert_eq!((&body["model"], &body["stream"]), (&json!("llama3.2"), &json!(false)));
    assert_eq!(body["format"]["type"], "object", "the reply schema goes as `format`");
}

// ---------------------------------------------------------------- config files

fn anthropic_reply(model: &str) -> Reply {
    ok_body(&json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "code-simplifier", "input": case1()}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}
    }))
}

fn corp_toml(server: &FakeServer, model: &str) -> String {
    format!(
        "provider = \"corp\"\n\n[providers.corp]\nwire = \"anthropic\"\nbase_url = \"http://{}\"\nmodel = \"{model}\"\napi_key_env = \"CORP_KEY\"\n",
        server.addr()
    )
}

#[test]
fn project_file_defines_and_selects_a_custom_endpoint() {
    let corp = FakeServer::start(vec![anthropic_reply("claude-x")]).unwrap();
    let w = Work::new();
    w.write("noesis.toml", &corp_toml(&corp, "claude-x"));
    let o = run_case1(w.noesis_bare().env("CORP_KEY", "corp-key-1"), &[]);
    let env = assert_case1_ok(&o);
    assert_eq!(env["meta"]["model"], "corp/claude-x");
    let got = corp.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/v1/messages");
    assert_eq!(got[0].json()["model"], "claude-x");
    assert_eq!(got[0].header("x-api-key"), Some("corp-key-1"), "the key comes from `api_key_env`");
    assert!(!o.stderr.contains("test model"), "{}", o.stderr);
}

#[test]
fn llm_provider_beats_the_project_file() {
    let corp = FakeServer::start(vec![anthropic_reply("claude-x")]).unwrap();
    let openai = FakeServer::start(vec![Reply::Chat(case1().to_string())]).unwrap();
    let w = Work::new();
    w.write("noesis.toml", &corp_toml(&corp, "claude-x"));
    let o = run_case1(
        w.noesis_bare()
            .env("CORP_KEY", "corp-key-1")
            .env("LLM_PROVIDER", "openai")
            .env("OPENAI_BASE_URL", openai.base_url())
            .env("OPENAI_API_KEY", "sk-e2e"),
        &[],
    );
    let env = assert_case1_ok(&o);
    assert_eq!(env["meta"]["model"], "openai/gpt-4o-mini");
    assert_eq!(openai.received().len(), 1);
    assert_eq!(openai.received()[0].path, "/v1/chat/completions");
    assert!(corp.received().is_empty(), "the file's provider was not asked");
}

#[test]
fn project_file_overrides_the_user_config_key_by_key() {
    let corp = FakeServer::start(vec![anthropic_reply("claude-project")]).unwrap();
    let w = Work::new();
    // The user config says where and how; the project only changes the model.
    let user = corp_toml(&corp, "claude-user");
    w.write("project/noesis.toml", "[providers.corp]\nmodel = \"claude-project\"\n");
    let project = w.path().join("project");
    for (var, file) in [("NOESIS_CONFIG", "elsewhere/user.toml"), ("XDG_CONFIG_HOME", "xdg/noesis/config.toml")] {
        let user_file = w.write(file, &user);
        let value = if var == "NOESIS_CONFIG" { user_file } else { w.path().join("xdg") };
        let before = corp.received().len();
        let mut cmd = w.noesis_bare();
        cmd.current_dir(&project).env(var, &value).env("CORP_KEY", "corp-key-2");
        let o = run_case1(&mut cmd, &[]);
        let env = assert_case1_ok(&o);
        assert_eq!(env["meta"]["model"], "corp/claude-project", "{var}");
        let got = corp.received();
        assert_eq!(got.len(), before + 1, "{var}: the user's base_url and provider are kept");
        assert_eq!(got[before].json()["model"], "claude-project", "{var}");
        assert_eq!(got[before].header("x-api-key"), Some("corp-key-2"), "{var}: the user's api_key_env is kept");
        std::fs::remove_file(w.path().join(file)).unwrap();
    }
    // The user config alone gives its own model.
    let mut cmd = w.noesis_bare();
    cmd.env("NOESIS_CONFIG", w.write("elsewhere/user.toml", &user)).env("CORP_KEY", "k");
    assert_eq!(assert_case1_ok(&run_case1(&mut cmd, &[]))["meta"]["model"], "corp/claude-user");
}

#[test]
fn config_mistakes_exit_2_naming_the_file_and_the_key() {
    let w = Work::new();
    let root = w.path().canonicalize().unwrap();
    w.write("noesis.toml", "provder = \"openai\"\n");
    let o = run_case1(&mut w.noesis_bare(), &[]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout, "", "no envelope for a usage error");
    let file = root.join("noesis.toml").display().to_string();
    assert!(o.stderr.contains(&format!("{file}:")), "{}", o.stderr);
    assert!(o.stderr.contains("provder"), "{}", o.stderr);

    // A nested key, in the user config.
    std::fs::remove_file(w.path().join("noesis.toml")).unwrap();
    let user = w.write("user.toml", "[providers.corp]\nwire = \"openai\"\nbase_uri = \"http://x\"\n");
    let o = run_case1(w.noesis_bare().env("NOESIS_CONFIG", &user), &[]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains(&format!("{}:", user.display())), "{}", o.stderr);
    assert!(o.stderr.contains("base_uri"), "{}", o.stderr);

    // doctor reads the same files and fails the same way.
    let o = output(w.noesis_bare().env("NOESIS_CONFIG", &user).args(["doctor", "--no-probe"]));
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("base_uri"), "{}", o.stderr);
}

// ---------------------------------------------------------------- routes, fallback

pub(crate) fn ollama_reply(envelope: &Value) -> Reply {
    ok_body(&json!({
        "model": "llama3.2", "message": {"role": "assistant", "content": envelope.to_string()},
        "done": true, "done_reason": "stop", "prompt_eval_count": 20, "eval_count": 10
    }))
}

#[test]
fn routes_send_exec_modules_to_ollama_and_the_rest_to_the_default() {
    let w = Work::new();
    w.write("cognitive/modules/quick/module.yaml", "name: quick\nversion: 0.1.0\nresponsibility: r\ntier: exec\n");
    w.write("cognitive/modules/quick/prompt.md", "Answer: $ARGUMENTS\n");
    // The built-in modules are all `decision`; the local one is `exec`.
    let list = output(w.noesis_bare().args(["list", "--json"]));
    let tiers: Vec<(String, String)> = serde_json::from_str::<Value>(&list.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_owned(), m["tier"].as_str().unwrap().to_owned()))
        .collect();
    assert!(tiers.contains(&("code-simplifier".into(), "decision".into())), "{tiers:?}");
    assert!(tiers.contains(&("quick".into(), "exec".into())), "{tiers:?}");

    let quick = json!({"ok": true, "meta": {"confidence": 0.8, "risk": "none", "explain": "quick answer"},
                       "data": {"rationale": "it is quick"}});
    let ollama = FakeServer::start(vec![ollama_reply(&quick)]).unwrap();
    let openai = FakeServer::start(vec![Reply::Chat(case1().to_string()), Reply::Chat(quick.to_string())]).unwrap();
    w.write("noesis.toml", "provider = \"openai\"\n\n[[routes]]\ntier = \"exec\"\nprovider = \"ollama\"\n");
    let noesis = || {
        let mut c = w.noesis_bare();
        c.env("OPENAI_BASE_URL", openai.base_url())
            .env("OPENAI_API_KEY", "sk-e2e")
            .env("OLLAMA_HOST", format!("http://{}", ollama.addr()));
        c
    };

    let o = output(noesis().args(["run", "quick", "--args", "hi"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_eq!(env["meta"]["model"], "ollama/llama3.2");
    assert_eq!(env["data"], quick["data"]);
    assert_eq!(ollama.received().len(), 1);
    assert_eq!(ollama.received()[0].path, "/api/chat");
    assert!(openai.received().is_empty());

    let env = assert_case1_ok(&run_case1(&mut noesis(), &[]));
    assert_eq!(env["meta"]["model"], "openai/gpt-4o-mini");
    assert_eq!(openai.received().len(), 1);
    assert_eq!(ollama.received().len(), 1, "the decision module did not go to ollama");

    // A flag still beats the route.
    let o = output(noesis().args(["run", "quick", "--args", "hi", "--provider", "openai"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.json()["meta"]["model"], "openai/gpt-4o-mini");
    assert_eq!((openai.received().len(), ollama.received().len()), (2, 1));
}

#[test]
fn fallback_takes_over_when_the_primary_is_unreachable() {
    let ollama = FakeServer::start(vec![ollama_reply(&case1())]).unwrap();
    let w = Work::new();
    let noesis = || {
        let mut c = w.noesis_bare();
        c.env("OPENAI_BASE_URL", REFUSED).env("OPENAI_API_KEY", "sk-e2e").env("OLLAMA_HOST", ollama.addr().to_string());
        c
    };
    // From the flag…
    let env =
        assert_case1_ok(&run_case1(&mut noesis(), &["--provider", "openai", "--fallback", "ollama", "--retries", "0"]));
    assert_eq!(env["meta"]["model"], "ollama/llama3.2");
    assert_eq!(ollama.received().len(), 1);
    // …and from the config.
    w.write("noesis.toml", "provider = \"openai\"\nretries = 0\nfallback = [\"ollama\"]\n");
    let env = assert_case1_ok(&run_case1(&mut noesis(), &[]));
    assert_eq!(env["meta"]["model"], "ollama/llama3.2");
    assert_eq!(ollama.received().len(), 2);
    // Without one, the refused connection is the run's failure.
    w.write("noesis.toml", "provider = \"openai\"\nretries = 0\n");
    let o = run_case1(&mut noesis(), &[]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.json()["error"]["code"], "E4001");
    assert_eq!(ollama.received().len(), 2);
}

// ---------------------------------------------------------------- record / replay

#[test]
fn record_then_replay_without_the_server() {
    const KEY: &str = "sk-record-e2e-77aa";
    let w = Work::new();
    let rec = w.path().join("rec");
    let rec_arg = rec.to_str().unwrap();
    let server = FakeServer::start(vec![Reply::Chat(case1().to_string())]).unwrap();
    let recorded = assert_case1_ok(&run_case1(
        w.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", KEY),
        &["--provider", "openai", "--record", rec_arg],
    ));
    assert_eq!(server.received().len(), 1);
    drop(server);
    let files: Vec<PathBuf> = std::fs::read_dir(&rec).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one request, one recording: {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains(KEY), "{} holds the API key", f.display());
    }

    // No server and no key: the recording answers. A refused base URL makes
    // sure nothing goes out.
    let replay = || {
        let mut c = w.noesis_bare();
        c.env("OPENAI_BASE_URL", REFUSED);
        c
    };
    let o = run_case1(&mut replay(), &["--provider", "openai", "--replay", rec_arg]);
    let replayed = assert_case1_ok(&o);
    assert_eq!(replayed["data"], recorded["data"]);
    assert_eq!(replayed["meta"]["model"], recorded["meta"]["model"]);

    // A changed input is a miss that names the nearest recording and where
    // the request differs.
    let changed =
        w.write("changed.json", &json!({"code": "def calc(x):\n    return x", "language": "python"}).to_string());
    let o = output(
        replay().args(["run", "code-simplifier", "--provider", "openai", "--replay", rec_arg, "--input"]).arg(&changed),
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4001", "{env:#}");
    let message = env["error"]["message"].as_str().unwrap();
    let nearest = files[0].file_name().unwrap().to_str().unwrap();
    assert!(message.contains(nearest), "{message}");
    assert!(message.contains("/messages/1/content"), "{message}");
}

// ---------------------------------------------------------------- streaming

#[test]
fn stream_shows_text_on_stderr_and_the_envelope_on_stdout() {
    let text = case1().to_string();
    let (a, rest) = text.split_at(text.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    let chunks = sse(&[
        ("", json!({"model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": a}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": b}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": "stop"}]})),
        ("", json!({"choices": [], "usage": {"prompt_tokens": 400, "completion_tokens": 90}})),
        ("", json!("[DONE]")),
    ]);
    let server = FakeServer::start(vec![Reply::Stream(chunks, Duration::from_millis(20))]).unwrap();
    let w = Work::new();
    let o = run_case1(
        w.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-e2e"),
        &["--provider", "openai", "--stream"],
    );
    let env = assert_case1_ok(&o);
    // The pieces, in order, and nothing of them on stdout.
    let at: Vec<usize> =
        [a, b, c].iter().map(|p| o.stderr.find(p).unwrap_or_else(|| panic!("{p} missing: {}", o.stderr))).collect();
    assert!(at[0] < at[1] && at[1] < at[2], "{at:?}");
    assert!(o.stderr.contains(&text), "the pieces arrive whole and adjacent: {}", o.stderr);
    assert_eq!(o.stdout.lines().count(), 1, "stdout is one envelope: {}", o.stdout);
    assert_eq!(env["meta"]["usage"]["input_tokens"], 400);
    assert_eq!(env["meta"]["usage"]["output_tokens"], 90);
    assert_eq!(server.received()[0].json()["stream"], true);
}

// ---------------------------------------------------------------- budgets

#[test]
fn token_budget_stops_the_run_before_any_request() {
    let server = FakeServer::start(vec![Reply::Chat(case1().to_string())]).unwrap();
    let w = Work::new();
    let o = run_case1(
        w.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-e2e"),
        &["--provider", "openai", "--max-total-tokens", "10"],
    );
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let env = o.json();
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4007", "{env:#}");
    assert!(server.received().is_empty(), "the budget is checked before the call");
}

#[test]
fn a_negative_cost_budget_is_a_usage_error() {
    let server = FakeServer::start(vec![Reply::Chat(case1().to_string())]).unwrap();
    let w = Work::new();
    for flag in [["--max-cost", "-1"], ["--max-cost", "inf"]] {
        let o = run_case1(
            w.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-e2e"),
            &["--provider", "openai", flag[0], flag[1]],
        );
        assert_eq!(o.code, 2, "{flag:?}: {}{}", o.stdout, o.stderr);
        assert_eq!(o.stdout, "");
        assert!(o.stderr.contains("--max-cost must be a non-negative number of US dollars"), "{flag:?}: {}", o.stderr);
    }
    assert!(server.received().is_empty());
}

// ---------------------------------------------------------------- doctor

const SECRET: &str = "sk-doctor-SECRET-5e1f";

fn doctor(w: &Work, base_url: &str, args: &[&str]) -> Output {
    output(w.noesis_bare().env("OPENAI_BASE_URL", base_url).env("OPENAI_API_KEY", SECRET).arg("doctor").args(args))
}

fn row<'a>(report: &'a Value, provider: &str) -> &'a Value {
    report["providers"].as_array().unwrap().iter().find(|r| r["provider"] == provider).unwrap()
}

#[test]
fn doctor_probes_the_selected_provider_and_never_shows_the_key() {
    let server = FakeServer::start(vec![]).unwrap();
    let w = Work::new();
    let o = doctor(&w, &server.base_url(), &["--json"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_secret_absent(SECRET, &o);
    let report = o.json();
    assert_eq!(report["selected"], json!({"provider": "openai", "because": "detected from the environment"}));
    let openai = row(&report, "openai");
    assert_eq!(openai["key_variable"], "OPENAI_API_KEY");
    assert_eq!(openai["key_set"], true);
    assert_eq!(openai["selected"], true);
    assert_eq!(openai["base_url"], server.base_url());
    assert_eq!(openai["probe"]["status"], 200);
    assert_eq!(openai["probe"]["problem"], Value::Null);
    // Only what is configured is probed.
    assert_eq!(row(&report, "anthropic")["configured"], false);
    assert_eq!(row(&report, "anthropic").get("probe"), None);
    let got = server.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("GET", "/v1/models"));

    let o = doctor(&w, &server.base_url(), &[]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_secret_absent(SECRET, &o);
    assert!(o.stdout.contains("OPENAI_API_KEY set"), "{}", o.stdout);
}

#[test]
fn doctor_fails_when_the_selected_provider_is_unreachable() {
    let w = Work::new();
    let o = doctor(&w, REFUSED, &["--json"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert_secret_absent(SECRET, &o);
    let report = o.json();
    let probe = &row(&report, "openai")["probe"];
    assert_eq!(probe["status"], Value::Null);
    assert!(probe["problem"].as_str().is_some_and(|p| p.starts_with("unreachable")), "{probe}");

    let o = doctor(&w, REFUSED, &[]);
    assert_eq!(o.code, 1);
    assert_secret_absent(SECRET, &o);
    let line = o.stdout.lines().find(|l| l.starts_with("* openai")).unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(line.contains("unreachable") && line.contains(REFUSED), "{line}");
}

#[test]
fn doctor_never_shows_credentials_in_a_base_url() {
    let server = FakeServer::start(vec![]).unwrap();
    let w = Work::new();
    let with_login = format!("http://proxy-user:proxy-s3cret@{}/v1", server.addr());
    for args in [&["--json"][..], &[]] {
        let o = doctor(&w, &with_login, args);
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        assert_secret_absent("proxy-s3cret", &o);
        assert_secret_absent("proxy-user", &o);
        assert!(o.stdout.contains(&format!("http://***@{}/v1", server.addr())), "{}", o.stdout);
    }
}

#[test]
fn doctor_no_probe_makes_no_request() {
    let server = FakeServer::start(vec![]).unwrap();
    let w = Work::new();
    let o = doctor(&w, &server.base_url(), &["--json", "--no-probe"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let report = o.json();
    assert!(report["providers"].as_array().unwrap().iter().all(|r| r.get("probe").is_none()), "{report:#}");
    assert!(server.received().is_empty());
}

/// Regression: providers named only by `fallback` or `routes` were shown
/// as "not configured" and never probed, though runs use them.
#[test]
fn doctor_probes_fallback_and_routed_providers() {
    let server = FakeServer::start(vec![]).unwrap();
    let w = Work::new();
    w.write("noesis.toml", "fallback = [\"deepseek\"]\n\n[[routes]]\ntier = \"exec\"\nprovider = \"gemini\"\n");
    let o = output(
        w.noesis_bare()
            .env("OPENAI_BASE_URL", server.base_url())
            .env("OPENAI_API_KEY", SECRET)
            .env("DEEPSEEK_BASE_URL", server.base_url())
            .env("GEMINI_BASE_URL", format!("http://{}/v1beta", server.addr()))
            .args(["doctor", "--json"]),
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let report = o.json();
    assert_eq!(report["routes"], 1);
    for name in ["deepseek", "gemini"] {
        let r = row(&report, name);
        assert_eq!((&r["configured"], &r["key_set"]), (&json!(true), &json!(false)), "{name}: {r}");
        assert_eq!(r["probe"]["status"], 200, "{name}: {r}");
    }
    let mut paths: Vec<String> = server.received().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, ["/v1/models", "/v1/models", "/v1beta/models"]);
}

#[test]
fn doctor_table_snapshot() {
    let server = FakeServer::start(vec![]).unwrap();
    let w = Work::new();
    w.write(
        "noesis.toml",
        &format!(
            "fallback = [\"corp\"]\n\n[providers.corp]\nwire = \"anthropic\"\nbase_url = \"http://{}\"\nmodel = \"claude-x\"\n",
            server.addr()
        ),
    );
    let o = doctor(&w, &server.base_url(), &[]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let root = w.path().canonicalize().unwrap().display().to_string();
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&root), "[TMP]");
    settings.add_filter(&regex_escape(&server.addr().to_string()), "[ADDR]");
    settings.add_filter(r"HTTP 200, \d+ ms", "HTTP 200, [MS] ms");
    settings.bind(|| insta::assert_snapshot!("doctor_table", o.stdout));
}

#[test]
fn doctor_with_nothing_configured_says_so_and_fails() {
    let w = Work::new();
    let o = output(w.noesis_bare().args(["doctor", "--json", "--no-probe"]));
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let report = o.json();
    assert_eq!(report["selected"]["provider"], Value::Null, "{report:#}");
    assert!(report["selected"]["because"].as_str().unwrap().contains("no provider configured"), "{report:#}");
    let o = output(w.noesis_bare().args(["doctor", "--json", "--no-probe", "--provider", "test"]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.json()["selected"]["provider"], "test");
}
