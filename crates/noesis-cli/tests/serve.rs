//! `noesis serve` as a real process: found through the address it prints,
//! spoken to over HTTP, its provider a fake server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

use crate::support::{Work, assert_valid_envelope, output};

/// A running `noesis serve --port 0`; killed when dropped.
pub(crate) struct Serving {
    child: Child,
    pub(crate) addr: String,
    /// The bearer token: the one it was given, or the one it made and
    /// wrote to the file it named.
    pub(crate) token: String,
    /// That file, when it made one.
    token_file: Option<std::path::PathBuf>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(work: &Work, args: &[&str], envs: &[(&str, &str)]) -> Serving {
    // The workspace's hygiene (HOME, no leaked provider variables), as a
    // std command so it can run in the background.
    let base = work.noesis();
    let mut cmd = Command::new(base.get_program());
    cmd.args(base.get_args());
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.current_dir(base.get_current_dir().unwrap());
    cmd.args(["serve", "--port", "0"]).args(args).envs(envs.iter().copied());
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut token_file = None;
    let addr = loop {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap() == 0 {
            panic!("noesis serve ended before listening: {seen}");
        }
        seen.push_str(&line);
        if let Some(path) = line.split("the token is in ").nth(1) {
            token_file = Some(std::path::PathBuf::from(path.trim()));
        }
        if let Some(rest) = line.split("listening on http").nth(1) {
            break rest.trim_start_matches('s').trim_start_matches("://").split_whitespace().next().unwrap().to_owned();
        }
    };
    let given = args.iter().position(|a| *a == "--token").map(|i| args[i + 1].to_owned());
    let from_env = envs.iter().find(|(k, _)| *k == "NOESIS_SERVE_TOKEN").map(|(_, v)| (*v).to_owned());
    let token = match &token_file {
        Some(path) => std::fs::read_to_string(path).unwrap().trim().to_owned(),
        None => given.or(from_env).expect("a server with neither --token nor a token file"),
    };
    let stderr = Arc::new(Mutex::new(seen));
    let sink = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in lines.lines() {
            let Ok(line) = line else { break };
            let mut all = sink.lock().unwrap();
            all.push_str(&line);
            all.push('\n');
        }
    });
    Serving { child, addr, token, token_file, stderr }
}

/// One HTTP/1.1 request on its own connection: (status, body as JSON).
pub(crate) fn http(addr: &str, method: &str, path: &str, body: Option<&Value>, token: Option<&str>) -> (u16, Value) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{auth}\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let text = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {raw}")))
}

fn good_reply() -> String {
    json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
           "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                    "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string()
}

#[test]
fn serve_runs_a_module_over_http_and_stops_on_sigterm() {
    let work = Work::new();
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let base_url = fake.base_url();
    let mut s = serve(
        &work,
        &["--provider", "openai", "--model", "gpt-4o-mini", "--access-log"],
        &[("OPENAI_BASE_URL", &base_url), ("OPENAI_API_KEY", "sk-secret-key")],
    );
    let (status, health) = http(&s.addr, "GET", "/health", None, None);
    assert_eq!((status, &health["status"]), (200, &json!("ok")));

    let run = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}});
    let (status, env) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
    assert_eq!(status, 200, "{env}");
    assert_valid_envelope(&env);
    assert_eq!(env["ok"], true, "{env}");
    assert_eq!(env["meta"]["model"], "openai/gpt-4o-mini");
    assert_eq!(fake.received()[0].header("authorization"), Some("Bearer sk-secret-key"));

    let (status, env) = http(&s.addr, "POST", "/run", Some(&json!({"module": "nope"})), Some(&s.token));
    assert_eq!(status, 404);
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4006");

    let (status, list) = http(&s.addr, "GET", "/modules", None, None);
    assert_eq!(status, 200);
    assert!(list["modules"].as_array().unwrap().iter().any(|m| m["name"] == "code-simplifier"));

    let killed = Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st.code();
        }
        assert!(Instant::now() < deadline, "noesis serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
    std::thread::sleep(Duration::from_millis(100));
    let stderr = s.stderr.lock().unwrap().clone();
    assert!(stderr.contains("POST /run 200"), "access log: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert!(!stderr.contains("sk-secret-key"), "no secrets in logs: {stderr}");
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let work = Work::new();
    let o = output(work.noesis().args(["serve", "--bind", "0.0.0.0", "--port", "0"]));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("without a token") && o.stderr.contains("--token"), "{}", o.stderr);
    assert!(o.stdout.is_empty());
}

#[test]
fn serve_checks_the_token_from_the_environment() {
    let work = Work::new();
    let s = serve(&work, &["--provider", "test"], &[("NOESIS_SERVE_TOKEN", "tok-123")]);
    let (status, env) = http(&s.addr, "GET", "/modules", None, None);
    assert_eq!(status, 401);
    assert_valid_envelope(&env);
    assert_eq!(env["error"]["code"], "E4007");
    let (status, _) = http(&s.addr, "GET", "/modules", None, Some("tok-123"));
    assert_eq!(status, 200);
    let (status, env) = http(
        &s.addr,
        "POST",
        "/run",
        Some(&json!({"module": "code-simplifier", "input": {"code": "x"}})),
        Some("tok-123"),
    );
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
    assert_eq!(env["meta"]["model"], "test/schema");
    assert!(!s.stderr.lock().unwrap().contains("tok-123"));
}

#[test]
fn serve_keeps_emitted_context_only_when_asked() {
    let work = Work::new();
    work.write(
        "cognitive/modules/stateful/module.yaml",
        "name: stateful\nversion: 1.0.0\nresponsibility: answer\ntier: decision\ncontext:\n  accepts:\n    - type: session_state\n  emits:\n    - type: session_state\n      ttl: 3600\n",
    );
    work.write("cognitive/modules/stateful/prompt.md", "Answer: ${question}\n");
    work.write(
        "cognitive/modules/stateful/schema.json",
        &json!({"input": {"type": "object", "properties": {"question": {"type": "string"}}},
                "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}}}})
        .to_string(),
    );
    let emitting = json!({"ok": true,
        "meta": {"confidence": 0.9, "risk": "low", "explain": "e",
                 "_emitted_context": {"session_state": {"STATE-MARKER": 7}}},
        "data": {"rationale": "r"}})
    .to_string();
    let plain =
        json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"}, "data": {"rationale": "r"}})
            .to_string();
    let fake =
        FakeServer::start(vec![Reply::Chat(emitting.clone()), Reply::Chat(plain.clone()), Reply::Chat(plain.clone())])
            .unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let run = json!({"module": "stateful", "input": {"question": "q"}});
    {
        let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--keep-context"], &envs);
        for _ in 0..2 {
            let (status, env) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
            assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
            assert!(!env.to_string().contains("STATE-MARKER"), "emitted context never reaches the caller: {env}");
        }
    }
    let prompt = |i: usize| fake.received()[i].json()["messages"].to_string();
    assert!(!prompt(0).contains("STATE-MARKER"));
    assert!(prompt(1).contains("STATE-MARKER"), "the second run was served the first's context: {}", prompt(1));
    // Without --keep-context the same store is neither read nor written.
    let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini"], &envs);
    let (status, _) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
    assert_eq!(status, 200);
    assert!(!prompt(2).contains("STATE-MARKER"), "{}", prompt(2));
}

#[test]
fn serve_records_frames_only_when_asked() {
    let work = Work::new();
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let run = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}});
    let frames = || {
        let o = output(work.noesis().args(["frames", "list", "--json"]));
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.json().as_array().unwrap().clone()
    };
    {
        let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini"], &envs);
        let (status, _) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
        assert_eq!(status, 200);
    }
    assert!(frames().is_empty(), "no frames without --frames");
    let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--frames"], &envs);
    let (status, env) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
    assert_eq!(status, 200, "{env}");
    // The frame is written off the request's thread: wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let recorded = loop {
        let f = frames();
        if !f.is_empty() || Instant::now() > deadline {
            break f;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert!(recorded[0]["query"].as_str().unwrap().starts_with("code-simplifier input:"), "{recorded:#?}");
    let slice: Value = serde_json::from_str(recorded[0]["context_slice"].as_str().unwrap()).unwrap();
    assert_eq!(slice["trace_id"], env["meta"]["trace_id"], "{recorded:#?}");
}

#[test]
fn requests_choose_only_among_the_models_the_operator_allows() {
    let work = Work::new();
    let reply = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"},
                       "data": {"simplified_code": "x", "changes": [], "behavior_equivalence": true,
                                "summary": "s", "rationale": "r"}})
    .to_string();
    let fake = FakeServer::start_with(vec![Reply::Chat(reply)], 0, Duration::ZERO).unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--allow-model", "openai:gpt-4o"], &envs);
    let run = |extra: Value| {
        let mut body = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        http(&s.addr, "POST", "/run", Some(&body), Some(&s.token))
    };
    let model_of = |i: usize| fake.received()[i].json()["model"].as_str().unwrap().to_owned();
    assert_eq!(run(json!({})).0, 200);
    assert_eq!(model_of(0), "gpt-4o-mini");
    assert_eq!(run(json!({"model": "gpt-4o"})).0, 200);
    assert_eq!(model_of(1), "gpt-4o");
    for refused in
        [json!({"model": "gpt-5"}), json!({"provider": "anthropic"}), json!({"provider": "openai", "model": "o3"})]
    {
        let (status, env) = run(refused.clone());
        assert_eq!(status, 403, "{refused}: {env}");
        assert_eq!(env["error"]["code"], "E4007", "{env}");
        let message = env["error"]["message"].as_str().unwrap();
        assert!(message.contains("not allowed") && message.contains("openai:gpt-4o"), "{message}");
    }
    assert_eq!(fake.received().len(), 2, "a refused request reaches no provider");
}

#[test]
fn every_run_a_client_saw_finish_is_recorded_before_the_server_exits() {
    let work = Work::new();
    let fake = FakeServer::start_with(vec![Reply::Chat(good_reply())], 0, Duration::ZERO).unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let mut s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--frames"], &envs);
    let runs = 12;
    let addr = s.addr.clone();
    let clients: Vec<_> = (0..runs)
        .map(|i| {
            let (addr, token) = (addr.clone(), s.token.clone());
            std::thread::spawn(move || {
                let run = json!({"module": "code-simplifier", "input": {"code": format!("x = {i} + 0")}});
                http(&addr, "POST", "/run", Some(&run), Some(&token)).0
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
    // A graceful stop right after the answers: the queued frames are written first.
    let pid = s.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", s.stderr.lock().unwrap());
    let o = output(work.noesis().args(["frames", "list", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let frames = o.json();
    assert_eq!(frames.as_array().unwrap().len(), runs, "{}", s.stderr.lock().unwrap());
    assert!(!s.stderr.lock().unwrap().contains("not recorded"), "{}", s.stderr.lock().unwrap());
}

/// Reads a run's server-sent events from `GET /agents/runs/{id}/events`
/// (after `last_id` when given) until one of kind `until` arrives: every
/// event up to it as (id, kind, data).
fn follow_events(addr: &str, run: &str, last_id: Option<u64>, until: &str) -> Vec<(u64, String, Value)> {
    follow_stream(addr, &format!("/agents/runs/{run}/events"), last_id, until)
}

/// The server-sent events at `path` until one of kind `until`.
fn follow_stream(addr: &str, path: &str, last_id: Option<u64>, until: &str) -> Vec<(u64, String, Value)> {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let resume = last_id.map(|i| format!("last-event-id: {i}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n{resume}\r\n");
    conn.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(conn);
    let (mut events, mut id, mut kind) = (Vec::new(), 0u64, String::new());
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before `{until}`: {events:?}");
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.parse().unwrap();
        } else if let Some(v) = line.strip_prefix("event: ") {
            kind = v.to_owned();
        } else if let Some(v) = line.strip_prefix("data: ") {
            let data: Value = serde_json::from_str(v).unwrap();
            let done = kind == until;
            events.push((id, kind.clone(), data["data"].clone()));
            if done {
                return events;
            }
        }
    }
}

/// `noesis serve --agents` on the fake's OpenAI wire.
pub(crate) fn agent_serve(work: &Work, fake: &FakeServer) -> Serving {
    agent_serve_with(work, fake, &[])
}

/// [`agent_serve`] with more arguments.
pub(crate) fn agent_serve_with(work: &Work, fake: &FakeServer, args: &[&str]) -> Serving {
    let base_url = fake.base_url();
    let mut all = vec!["--agents"];
    all.extend_from_slice(args);
    serve(
        work,
        &all,
        &[
            ("LLM_PROVIDER", "openai"),
            ("LLM_MODEL", "gpt-test"),
            ("OPENAI_BASE_URL", &base_url),
            ("OPENAI_API_KEY", "sk-test"),
        ],
    )
}

pub(crate) fn tool_reply(id: &str, tool: &str, args: &Value) -> Reply {
    Reply::Status(200, noesis_testkit::tool_call_completion(id, tool, args).to_string(), vec![])
}

#[test]
fn an_agent_run_started_over_http_streams_its_steps_waits_for_approval_and_finishes() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("c1", "write_file", &json!({"path": "out.txt", "content": "from http"})),
        Reply::Chat("Wrote out.txt.".into()),
    ])
    .unwrap();
    let s = agent_serve(&work, &fake);
    // Bad requests are refused with an envelope naming the field.
    let (status, env) =
        http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "x", "strategy": "magic"})), Some(&s.token));
    assert_eq!(status, 400, "{env}");
    assert!(env["error"]["message"].as_str().unwrap().contains("`strategy`"), "{env}");
    let (status, env) = http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "x", "bogus": 1})), Some(&s.token));
    assert_eq!(status, 400, "{env}");

    let (status, started) =
        http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Write out.txt"})), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let events = follow_events(&s.addr, &id, None, "approval_needed");
    let kinds: Vec<&str> = events.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run_started", "model_call", "model_reply", "approval_needed"], "{events:?}");
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "ids increase: {events:?}");
    let pending = &events[3].2["pending"][0];
    assert_eq!((pending["call_id"].as_str(), pending["tool"].as_str()), (Some("c1"), Some("write_file")));
    assert!(!work.path().join("out.txt").exists(), "nothing written before the decision");
    let (_, shown) = http(&s.addr, "GET", &format!("/agents/runs/{id}"), None, None);
    assert_eq!(shown["status"], "awaiting_approval", "{shown}");
    // The server holds the run: the command line neither decides nor
    // steps it, and says who holds it.
    for args in [vec!["agent", "approve", id.as_str()], vec!["agent", "resume", id.as_str(), "--approve", "auto"]] {
        let o = output(work.noesis_bare().env("OPENAI_BASE_URL", fake.base_url()).args(&args));
        assert_ne!(o.code, 0, "{args:?}: {}", o.stdout);
        assert!(o.stderr.contains(&format!("agent run {id} is held by serve:")), "{args:?}: {}", o.stderr);
    }
    assert!(!work.path().join("out.txt").exists(), "nothing written by the refused commands");

    // A wrong call id is refused; the batch decision goes through.
    let wrong = json!({"decisions": [{"call_id": "nope", "verdict": "approve"}]});
    let (status, _) = http(&s.addr, "POST", &format!("/agents/runs/{id}/approvals"), Some(&wrong), Some(&s.token));
    assert_eq!(status, 400);
    let (status, body) = http(
        &s.addr,
        "POST",
        &format!("/agents/runs/{id}/approvals"),
        Some(&json!({"approve_all": true})),
        Some(&s.token),
    );
    assert_eq!(status, 200, "{body}");
    // Resumed after the last event seen: only what came since.
    let last = events.last().unwrap().0;
    let rest = follow_events(&s.addr, &id, Some(last), "done");
    assert!(rest.iter().all(|(i, _, _)| *i > last), "{rest:?}");
    let kinds: Vec<&str> = rest.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["decided", "tool_call", "tool_result", "model_call", "model_reply", "done"], "{rest:?}");
    assert_eq!(rest.last().unwrap().2["text"], "Wrote out.txt.");
    assert_eq!(std::fs::read_to_string(work.path().join("out.txt")).unwrap(), "from http");

    let (_, shown) = http(&s.addr, "GET", &format!("/agents/runs/{id}"), None, None);
    assert_eq!((shown["status"].as_str(), shown["live"].as_bool()), (Some("done"), Some(false)), "{shown}");
    assert_eq!(shown["usage"]["turns"], 2);
    let (_, listed) = http(&s.addr, "GET", "/agents/runs", None, None);
    assert_eq!(listed["runs"][0]["run_id"], id.as_str());
    // The same run, seen by `noesis agent show` in another process.
    let o = output(work.noesis_bare().args(["agent", "show", &id, "--json"]));
    assert_eq!(o.json()["calls"][0]["status"], "completed", "{}", o.stderr);
    let (status, _) = http(&s.addr, "POST", &format!("/agents/runs/{id}/cancel"), None, Some(&s.token));
    assert_eq!(status, 409, "a finished run cannot be cancelled");
    let (status, _) = http(&s.addr, "GET", "/agents/runs/does-not-exist", None, None);
    assert_eq!(status, 404);
}

/// A request's `permissions` only narrow the operator's: its `allow` of
/// what noesis.toml asks about or denies still asks or denies, its `deny`
/// refuses, and a rule that does not parse is a 400 naming the field.
#[test]
fn a_requests_permissions_narrow_the_operators_and_never_widen_them() {
    let work = Work::new();
    work.write(
        "noesis.toml",
        "[agent]\napprove = \"auto\"\n\n[permissions]\nask = [\"write_file(ask.txt)\"]\ndeny = [\"write_file(secret.txt)\"]\n",
    );
    let fake = FakeServer::start(vec![
        tool_reply("c1", "write_file", &json!({"path": "secret.txt", "content": "x"})),
        tool_reply("c2", "write_file", &json!({"path": "other.txt", "content": "x"})),
        tool_reply("c3", "write_file", &json!({"path": "free.txt", "content": "x"})),
        tool_reply("c4", "write_file", &json!({"path": "ask.txt", "content": "x"})),
    ])
    .unwrap();
    let s = agent_serve(&work, &fake);
    let bad = json!({"task": "x", "permissions": {"deny": ["run_command("]}});
    let (status, env) = http(&s.addr, "POST", "/agents/runs", Some(&bad), Some(&s.token));
    assert_eq!(status, 400, "{env}");
    assert!(env["error"]["message"].as_str().unwrap().contains("permissions.deny[0]"), "{env}");
    let request = json!({"task": "Write files", "permissions": {
        "allow": ["write_file(secret.txt)", "write_file(ask.txt)", "run_command"],
        "deny": ["write_file(other.txt)"],
    }});
    let (status, started) = http(&s.addr, "POST", "/agents/runs", Some(&request), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let shown = wait_status(&s.addr, &id, "awaiting_approval");
    let calls = shown["run"]["calls"].as_array().unwrap();
    let status = |i: usize| calls[i]["status"].as_str().unwrap();
    assert_eq!([status(0), status(1), status(2), status(3)], ["denied", "denied", "completed", "awaiting_approval"]);
    assert!(calls[0]["result"].as_str().unwrap().contains("write_file(secret.txt)"), "{shown}");
    assert!(calls[1]["result"].as_str().unwrap().contains("(deny, permissions.deny[0])"), "{shown}");
    assert!(!work.path().join("secret.txt").exists() && !work.path().join("other.txt").exists());
    assert!(work.path().join("free.txt").exists());
}

#[test]
fn a_killed_server_resumes_its_run_without_running_a_completed_tool_again() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nallow_commands = [\"sh count.sh\"]\n");
    work.write("count.sh", "echo ran >> count.txt\n");
    let fake = FakeServer::start(vec![
        tool_reply("c1", "run_command", &json!({"command": "sh count.sh"})),
        // The first server is killed while it waits for this.
        Reply::Delay(Duration::from_secs(30), Box::new(Reply::Chat("too late".into()))),
        Reply::Chat("Counted once.".into()),
    ])
    .unwrap();
    // The operator allows `auto`; the request asks for it.
    let mut s = agent_serve_with(&work, &fake, &["--approve", "auto"]);
    let (status, started) =
        http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Count", "approve": "auto"})), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let seen = follow_events(&s.addr, &id, None, "tool_result");
    assert_eq!(seen.last().unwrap().2["is_error"], false, "{seen:?}");
    // Wait until the second model request is out, then kill -9.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.received().len() < 2 {
        assert!(Instant::now() < deadline, "the second model call never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill").args(["-KILL", &s.child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let _ = s.child.wait();
    let o = output(work.noesis_bare().args(["agent", "show", &id, "--json"]));
    assert_eq!(o.json()["outcome"], Value::Null, "left unfinished: {}", o.stdout);

    let s2 = agent_serve_with(&work, &fake, &["--approve", "auto"]);
    let events = follow_events(&s2.addr, &id, None, "done");
    assert_eq!(events.last().unwrap().2["text"], "Counted once.", "{events:?}");
    assert!(s2.stderr.lock().unwrap().contains("resuming 1 agent run"), "{}", s2.stderr.lock().unwrap());
    // The stream holds the first server's events too (kept in the store):
    // the one call is there once, and did not run again.
    assert_eq!(events.iter().filter(|(_, k, _)| k == "tool_call").count(), 1, "no tool ran again: {events:?}");
    assert!(events.windows(2).all(|w| w[0].0 + 1 == w[1].0), "ids go on across the restart: {events:?}");
    assert_eq!(std::fs::read_to_string(work.path().join("count.txt")).unwrap(), "ran\n");
    assert_eq!(fake.received().len(), 3);
}

/// A client following a run reconnects to the next server with the id of
/// the last event it saw: it gets exactly what it missed — events from
/// before the restart, from the store — then the resumed run's, each once,
/// the ids going on where they stopped.
#[test]
fn an_event_stream_resumed_across_a_server_restart_misses_nothing_and_repeats_nothing() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("c1", "write_file", &json!({"path": "out.txt", "content": "once"})),
        Reply::Chat("Wrote it.".into()),
    ])
    .unwrap();
    let mut s = agent_serve(&work, &fake);
    let (status, started) = http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Write"})), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let before = follow_events(&s.addr, &id, None, "approval_needed");
    let kinds: Vec<&str> = before.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run_started", "model_call", "model_reply", "approval_needed"], "{before:?}");
    // The client saw only the first two before the server went away.
    let seen = before[1].0;
    assert!(Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().unwrap().success());
    assert!(s.child.wait().unwrap().success(), "{}", s.stderr.lock().unwrap());

    let s2 = agent_serve(&work, &fake);
    let waiting = wait_status(&s2.addr, &id, "awaiting_approval");
    assert_eq!(waiting["pending"][0]["call_id"], "c1", "{waiting}");
    let follower = {
        let addr = s2.addr.clone();
        let id = id.clone();
        std::thread::spawn(move || {
            let mut events = follow_events(&addr, &id, Some(seen), "tool_result");
            let last = events.last().unwrap().0;
            events.extend(follow_events(&addr, &id, Some(last), "done"));
            events
        })
    };
    // Decided once the follower is in: what comes after is live.
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = http(
        &s2.addr,
        "POST",
        &format!("/agents/runs/{id}/approvals"),
        Some(&json!({"approve_all": true})),
        Some(&s2.token),
    );
    assert_eq!(status, 200, "{body}");
    let after = follower.join().unwrap();
    let ids: Vec<u64> = after.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(
        ids,
        ((seen + 1)..=(seen + ids.len() as u64)).collect::<Vec<_>>(),
        "every id once, none skipped: {after:?}"
    );
    let kinds: Vec<&str> = after.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(&kinds[..3], ["model_reply", "approval_needed", "done"], "missed before the restart: {after:?}");
    assert_eq!(after[2].2["outcome"], "cancelled", "the first server stopped it: {after:?}");
    assert!(!kinds.contains(&"gap"), "{after:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "approval_needed").count(),
        2,
        "asked again after the restart: {after:?}"
    );
    assert_eq!((kinds.last(), &after.last().unwrap().2["outcome"]), (Some(&"done"), &json!("answer")));
    assert_eq!(std::fs::read_to_string(work.path().join("out.txt")).unwrap(), "once");
}

/// One raw request with a form body and the browser's session cookie
/// (`cookie`: `name=value`); (status, headers and body as text).
fn form(addr: &str, cookie: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\naccept: text/html\r\ncookie: {cookie}\r\n\
         content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    (raw.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), raw)
}

/// Signs in at `/login` with the server's token, as a browser would: the
/// session cookie (`noesis_session=ID`), checked not to be the token.
pub(crate) fn sign_in(s: &Serving) -> String {
    let (status, raw) = form(&s.addr, "", "POST", "/login", &format!("token={}", s.token));
    assert_eq!(status, 303, "{raw}");
    let line = raw.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).unwrap();
    let cookie = line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("noesis_session=") && !cookie.contains(&s.token), "{line}");
    cookie
}

pub(crate) fn wait_status(addr: &str, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, shown) = http(addr, "GET", &format!("/agents/runs/{id}"), None, None);
        // Awaiting approval: once the live run lists what it waits on.
        let waiting = want == "awaiting_approval" && shown["pending"].as_array().is_some_and(|p| !p.is_empty());
        if shown["status"] == want && (shown["live"] == false || waiting) {
            return shown;
        }
        assert!(Instant::now() < deadline, "run {id} never became {want}: {shown}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_dashboard_follows_a_live_run_and_decides_cancels_and_resumes_it() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("w1", "write_file", &json!({"path": "page.txt", "content": "approved in the page"})),
        Reply::Chat("Written.".into()),
        // The second run: slow, cancelled from the page, resumed there.
        Reply::Delay(Duration::from_secs(30), Box::new(Reply::Chat("too late".into()))),
        Reply::Chat("Resumed and done.".into()),
    ])
    .unwrap();
    let s = agent_serve(&work, &fake);
    let (_, started) = http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Write page.txt"})), Some(&s.token));
    let id = started["run_id"].as_str().unwrap().to_owned();
    let shown = wait_status(&s.addr, &id, "awaiting_approval");
    let hash = shown["pending"][0]["arguments_hash"].as_str().unwrap().to_owned();
    let cookie = sign_in(&s);
    // The page: live steps from the event stream, a form per pending call.
    let (status, page) = form(&s.addr, &cookie, "GET", &format!("/runs/{id}"), "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("data-events=\"/agents/runs/{id}/events?after=")), "{page}");
    assert!(page.contains(&format!("action=\"/runs/{id}/decide\"")) && page.contains(&hash), "{page}");
    // A decision on arguments the person did not see is refused.
    let (status, _) =
        form(&s.addr, &cookie, "POST", &format!("/runs/{id}/decide"), "call=w1&hash=0000&verdict=approve");
    assert_eq!(status, 409);
    assert!(!work.path().join("page.txt").exists());
    let (status, raw) =
        form(&s.addr, &cookie, "POST", &format!("/runs/{id}/decide"), &format!("call=w1&hash={hash}&verdict=approve"));
    assert_eq!(status, 303, "{raw}");
    assert!(raw.to_lowercase().contains(&format!("location: /runs/{id}")), "{raw}");
    wait_status(&s.addr, &id, "done");
    assert_eq!(std::fs::read_to_string(work.path().join("page.txt")).unwrap(), "approved in the page");
    let (_, page) = form(&s.addr, &cookie, "GET", &format!("/runs/{id}"), "");
    assert!(!page.contains("id=\"live\"") && !page.contains("/decide"), "a finished run has no live view: {page}");

    let (_, started) = http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Slow"})), Some(&s.token));
    let slow = started["run_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.received().len() < 3 {
        assert!(Instant::now() < deadline, "the slow model call never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _) = form(&s.addr, &cookie, "POST", &format!("/runs/{slow}/cancel"), "");
    assert_eq!(status, 303);
    wait_status(&s.addr, &slow, "cancelled");
    let (_, page) = form(&s.addr, &cookie, "GET", &format!("/runs/{slow}"), "");
    assert!(page.contains(&format!("action=\"/runs/{slow}/resume\"")), "{page}");
    // A cross-site form cannot resume it.
    let mut conn = TcpStream::connect(&s.addr).unwrap();
    let req = format!(
        "POST /runs/{slow}/resume HTTP/1.1\r\nhost: {}\r\norigin: http://evil.example\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        s.addr
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 403"), "{raw}");
    let (status, _) = form(&s.addr, &cookie, "POST", &format!("/runs/{slow}/resume"), "");
    assert_eq!(status, 303);
    let done = wait_status(&s.addr, &slow, "done");
    assert_eq!(done["outcome"]["text"], "Resumed and done.");
}

/// A raw request with a `Host` of our choosing (and any other header
/// lines); (status, whole answer).
fn raw(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{headers}connection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    (answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), answer)
}

#[test]
fn serve_without_a_token_makes_one_only_its_owner_can_read_and_nothing_changes_without_it() {
    use std::os::unix::fs::PermissionsExt;
    let work = Work::new();
    let mut s = serve(&work, &["--provider", "test"], &[]);
    let file = s.token_file.clone().expect("the server names its token file");
    let port = s.addr.rsplit(':').next().unwrap().to_owned();
    assert_eq!(file, work.path().join(format!(".noesis/serve/127.0.0.1-{port}.token")));
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(s.token.len(), 64, "256 random bits");
    assert!(!s.stderr.lock().unwrap().contains(&s.token), "the token is never printed");
    // Reading needs nothing on loopback; running a module does.
    let (status, _) = http(&s.addr, "GET", "/modules", None, None);
    assert_eq!(status, 200);
    let run = json!({"module": "code-simplifier", "input": {"code": "x"}});
    for token in [None, Some("wrong")] {
        let (status, env) = http(&s.addr, "POST", "/run", Some(&run), token);
        assert_eq!(status, 401, "{env}");
        assert_valid_envelope(&env);
        assert_eq!(env["error"]["code"], "E4007");
    }
    let (status, env) = http(&s.addr, "POST", "/run", Some(&run), Some(&s.token));
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
    // Each server makes its own.
    let other = serve(&work, &["--provider", "test"], &[]);
    assert_ne!(other.token, s.token);
    let (status, _) = http(&other.addr, "POST", "/run", Some(&run), Some(&s.token));
    assert_eq!(status, 401);
    assert!(Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().unwrap().success());
    assert!(s.child.wait().unwrap().success());
    assert!(!file.exists(), "a stopped server takes its token file away");
}

/// DNS rebinding through the binary: a page whose name now points at
/// 127.0.0.1 sends `Host` and `Origin` of its own name. The server would
/// write the file for a request that names it (the operator allows
/// `auto`): this one is refused, nothing is written, no run is stored.
#[test]
fn a_dns_rebound_page_cannot_start_an_agent_run() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("w1", "write_file", &json!({"path": "rebound.txt", "content": "pwned"})),
        Reply::Chat("Written.".into()),
    ])
    .unwrap();
    let s = agent_serve_with(&work, &fake, &["--approve", "auto"]);
    let task = json!({"task": "Write rebound.txt", "approve": "auto"}).to_string();
    let port = s.addr.rsplit(':').next().unwrap();
    for host in ["attacker.example".to_owned(), format!("attacker.example:{port}")] {
        for path in ["/agents/runs", "/run", "/login"] {
            let headers = format!("host: {host}\r\norigin: http://{host}\r\n");
            let (status, answer) = raw(&s.addr, "POST", path, &headers, &task);
            assert_eq!(status, 421, "{path} {host}: {answer}");
            let env: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
            assert_valid_envelope(&env);
            assert_eq!(env["error"]["code"], "E4007");
        }
        let (status, _) = raw(&s.addr, "GET", "/agents/runs", &format!("host: {host}\r\n"), "");
        assert_eq!(status, 421, "reads too");
    }
    assert!(fake.received().is_empty(), "no model was called");
    assert!(!work.path().join("rebound.txt").exists());
    let o = output(work.noesis_bare().args(["agent", "list", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.json(), json!([]), "the store holds no run");
    // Named as itself (with the credential), the same request runs.
    let (status, started) =
        http(&s.addr, "POST", "/agents/runs", Some(&serde_json::from_str(&task).unwrap()), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    wait_status(&s.addr, started["run_id"].as_str().unwrap(), "done");
    assert_eq!(std::fs::read_to_string(work.path().join("rebound.txt")).unwrap(), "pwned");
}

#[test]
fn a_request_only_narrows_the_operators_approval_policy_and_limits() {
    let work = Work::new();
    work.write("noesis.toml", "[agent]\nmax_iterations = 3\n\n[budget]\nmax_cost_usd = 0.5\n");
    let fake = FakeServer::start(vec![
        tool_reply("w1", "write_file", &json!({"path": "asked.txt", "content": "x"})),
        Reply::Chat("Done.".into()),
    ])
    .unwrap();
    // The operator's policy is `ask` (the default).
    let s = agent_serve(&work, &fake);
    let asked = json!({"task": "Write asked.txt", "approve": "auto",
                       "limits": {"max_turns": 500, "max_tool_calls": 10000, "max_cost_usd": 100}});
    let (status, started) = http(&s.addr, "POST", "/agents/runs", Some(&asked), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let shown = wait_status(&s.addr, &id, "awaiting_approval");
    assert!(!work.path().join("asked.txt").exists(), "`auto` under `ask` still waits for a person");
    let config = &shown["run"]["config"];
    assert_eq!(config["approval"], "ask", "{config}");
    assert_eq!(config["limits"]["max_turns"], 3, "{config}");
    assert_eq!(config["limits"]["max_tool_calls"], 50, "{config}");
    assert_eq!(config["limits"]["max_cost_usd"], 0.5, "{config}");
    // Asking for less is kept.
    let less = json!({"task": "x", "approve": "never", "limits": {"max_turns": 2, "max_cost_usd": 0.1}});
    let (_, started) = http(&s.addr, "POST", "/agents/runs", Some(&less), Some(&s.token));
    let (_, shown) = http(&s.addr, "GET", &format!("/agents/runs/{}", started["run_id"].as_str().unwrap()), None, None);
    let config = &shown["run"]["config"];
    assert_eq!((config["approval"].as_str(), config["limits"]["max_turns"].as_u64()), (Some("never"), Some(2)));
    assert_eq!(config["limits"]["max_cost_usd"], 0.1);
    // A tool the operator does not offer cannot be asked for.
    let (status, env) =
        http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "x", "tools": ["shell"]})), Some(&s.token));
    assert_eq!(status, 400, "{env}");
    assert!(env["error"]["message"].as_str().unwrap().contains("no tool `shell`"), "{env}");
}

#[test]
fn without_agents_no_client_starts_or_steers_a_run() {
    let work = Work::new();
    let fake = FakeServer::start(vec![]).unwrap();
    let base_url = fake.base_url();
    let s =
        serve(&work, &[], &[("LLM_PROVIDER", "openai"), ("OPENAI_BASE_URL", &base_url), ("OPENAI_API_KEY", "sk-test")]);
    let (status, env) = http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "x"})), Some(&s.token));
    assert_eq!(status, 403, "{env}");
    assert_valid_envelope(&env);
    assert!(env["error"]["message"].as_str().unwrap().contains("--agents"), "{env}");
    let (status, listed) = http(&s.addr, "GET", "/agents/runs", None, None);
    assert_eq!((status, &listed["runs"]), (200, &json!([])), "reading still works");
    // The pages cannot steer a run either.
    let cookie = sign_in(&s);
    let (status, page) = form(&s.addr, &cookie, "POST", "/runs/some-run/resume", "");
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("--agents"), "{page}");
    assert!(fake.received().is_empty());
}

/// A `solve` episode's model on the fake server: PLANNER's and REASONER's
/// envelopes, then CODER's edit of calc.py and its answer.
fn episode_script() -> Vec<Reply> {
    let envelope = |data: Value| {
        Reply::Chat(
            json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "s"}, "data": data}).to_string(),
        )
    };
    vec![
        envelope(json!({"problem_reflection": {"goal": "add adds", "inputs": [], "outputs": [], "constraints": [],
                                               "edge_cases": []},
                        "possible_solutions": ["fix it"], "selected_solution": "fix it", "rationale": "r"})),
        envelope(json!({"plan": ["change - to +"], "thoughts": [], "rationale": "r"})),
        tool_reply("fix", "edit_file", &json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"})),
        Reply::Chat("Fixed.".into()),
    ]
}

/// `noesis serve --episodes` runs `solve` on its project for a client:
/// progress as events, the code fixed, the episode in the project's state;
/// without the flag, `POST /episodes` is refused naming it.
#[test]
fn serve_runs_an_episode_for_a_client_only_with_episodes() {
    let work = Work::new();
    work.write("calc.py", "def add(a, b):\n    return a - b\n");
    work.write("check.sh", "grep -q 'return a + b' calc.py\n");
    let fake = FakeServer::start(episode_script()).unwrap();
    let base_url = fake.base_url();
    let envs = [("LLM_PROVIDER", "openai"), ("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let task = json!({"task": "make add add", "tests": ["sh check.sh"]});
    {
        let s = serve(&work, &[], &envs);
        let (status, env) = http(&s.addr, "POST", "/episodes", Some(&task), Some(&s.token));
        assert_eq!(status, 403, "{env}");
        assert!(env["error"]["message"].as_str().unwrap().contains("--episodes"), "{env}");
    }
    let s = serve(&work, &["--episodes"], &envs);
    let (status, started) = http(&s.addr, "POST", "/episodes", Some(&task), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["episode_id"].as_str().unwrap();
    let events = follow_stream(&s.addr, &format!("/episodes/{id}/events"), None, "episode_done");
    let (_, _, done) = events.last().unwrap();
    assert_eq!(done["outcome"], "solved", "{events:?}");
    assert!(events.iter().any(|(_, k, d)| k == "note" && d["text"] == "==> CODER (retry 0 of 3)"), "{events:?}");
    assert!(std::fs::read_to_string(work.path().join("calc.py")).unwrap().contains("return a + b"));
    let state = output(work.noesis_bare().args(["state", "dump"])).json();
    assert_eq!((state["episode_id"].as_str(), &state["current_node"]), (Some(id), &json!("CONSOLIDATOR")));
}

/// A live episode's dashboard page follows its events and decides the
/// CODER call a rule asks a person about; once it is done the page shows it
/// as stored.
#[test]
fn the_dashboard_follows_a_live_episode_and_decides_coders_call() {
    let work = Work::new();
    work.write("calc.py", "def add(a, b):\n    return a - b\n");
    work.write("check.sh", "grep -q 'return a + b' calc.py\n");
    work.write("noesis.toml", "[permissions]\nask = [\"edit_file\"]\n");
    let fake = FakeServer::start(episode_script()).unwrap();
    let base_url = fake.base_url();
    let envs = [("LLM_PROVIDER", "openai"), ("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let s = serve(&work, &["--episodes"], &envs);
    let task = json!({"task": "make add add", "tests": ["sh check.sh"]});
    let (status, started) = http(&s.addr, "POST", "/episodes", Some(&task), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["episode_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let shown = loop {
        let (_, shown) = http(&s.addr, "GET", &format!("/episodes/{id}/status"), None, None);
        if shown["pending"]["calls"].as_array().is_some_and(|c| !c.is_empty()) {
            break shown;
        }
        assert!(Instant::now() < deadline, "CODER's call never waited: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let hash = shown["pending"]["calls"][0]["arguments_hash"].as_str().unwrap().to_owned();
    let cookie = sign_in(&s);
    let (status, page) = form(&s.addr, &cookie, "GET", &format!("/episodes/{id}"), "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("id=\"live\" data-events=\"/episodes/{id}/events?after=")), "{page}");
    assert!(page.contains(&format!("action=\"/episodes/{id}/decide\"")) && page.contains(&hash), "{page}");
    assert!(
        work.path().join("calc.py").exists()
            && !std::fs::read_to_string(work.path().join("calc.py")).unwrap().contains("a + b")
    );
    // The stream the page reads answers `?after=` as it answers Last-Event-ID.
    let after: u64 = page.split("events?after=").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
    assert!(after > 0, "{page}");
    let (status, raw) = form(
        &s.addr,
        &cookie,
        "POST",
        &format!("/episodes/{id}/decide"),
        &format!("call=fix&hash={hash}&verdict=approve"),
    );
    assert_eq!(status, 303, "{raw}");
    assert!(raw.to_lowercase().contains(&format!("location: /episodes/{id}")), "{raw}");
    let events = follow_stream(&s.addr, &format!("/episodes/{id}/events?after={after}"), None, "episode_done");
    assert!(events.iter().all(|(n, _, _)| *n > after), "only what came after the page: {events:?}");
    assert!(events.iter().any(|(_, k, _)| k == "decided"), "{events:?}");
    let (_, _, done) = events.last().unwrap();
    assert_eq!(done["outcome"], "solved", "{events:?}");
    assert!(std::fs::read_to_string(work.path().join("calc.py")).unwrap().contains("return a + b"));
    let (_, page) = form(&s.addr, &cookie, "GET", &format!("/episodes/{id}"), "");
    assert!(!page.contains("id=\"live\"") && !page.contains("/decide"), "a finished episode has no live view: {page}");
    // Nothing waits any more: a late decision is refused.
    let (status, _) = form(&s.addr, &cookie, "POST", &format!("/episodes/{id}/decide"), "call=all&verdict=approve");
    assert_eq!(status, 409);
}

#[test]
fn allow_host_admits_a_name_and_anything_else_is_refused() {
    let work = Work::new();
    work.write("noesis.toml", "[serve]\nallow_hosts = [\"from-config.test\"]\n");
    let s = serve(&work, &["--provider", "test", "--allow-host", "noesis.test"], &[]);
    let port = s.addr.rsplit(':').next().unwrap();
    for (host, want) in [
        (format!("noesis.test:{port}"), 200),
        ("from-config.test".to_owned(), 200),
        (format!("localhost:{port}"), 200),
        ("attacker.example".to_owned(), 421),
    ] {
        let (status, answer) = raw(&s.addr, "GET", "/modules", &format!("host: {host}\r\n"), "");
        assert_eq!(status, want, "{host}: {answer}");
    }
    let (status, answer) = raw(&s.addr, "GET", "/health", "", "");
    assert_eq!(status, 421, "no Host at all: {answer}");
    // A server that starts anyway would never end: the timeout fails it.
    let o = output(
        work.noesis().args(["serve", "--port", "0", "--allow-host", "http://x.test/"]).timeout(Duration::from_secs(60)),
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("http://x.test/"), "{}", o.stderr);
    work.write("noesis.toml", "[serve]\nallow_hosts = [\"a b\"]\n");
    let o = output(work.noesis().args(["serve", "--port", "0"]).timeout(Duration::from_secs(60)));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("serve.allow_hosts[0]"), "{}", o.stderr);
}

#[test]
fn serve_over_tls_with_the_files_given_and_names_a_file_it_cannot_use() {
    let work = Work::new();
    let dir = work.path();
    let openssl = |args: &[&str], input: Option<&str>| {
        let mut child = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("this test needs the openssl CLI (apt-get install openssl): {e}"));
        child.stdin.take().unwrap().write_all(input.unwrap_or("").as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for args in [
        [&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA"]]
            .concat(),
        [&["req"][..], &ec, &["-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=localhost"]].concat(),
    ] {
        let o = openssl(&args, None);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    work.write("ext.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n");
    let o = openssl(
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = serve(&work, &["--provider", "test", "--tls-cert", "cert.pem", "--tls-key", "key.pem"], &[]);
    assert!(s.stderr.lock().unwrap().contains("listening on https://"), "{}", s.stderr.lock().unwrap());
    let request = "GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let o = openssl(
        &[
            "s_client",
            "-quiet",
            "-connect",
            &s.addr,
            "-servername",
            "localhost",
            "-CAfile",
            "ca.pem",
            "-verify_return_error",
            "-verify_hostname",
            "localhost",
        ],
        Some(request),
    );
    let answer = String::from_utf8_lossy(&o.stdout);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}\n{}", String::from_utf8_lossy(&o.stderr));
    // Plain HTTP on that port gets no answer.
    let mut conn = TcpStream::connect(&s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    conn.write_all(format!("GET /health HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n", s.addr).as_bytes())
        .unwrap();
    let mut plain = Vec::new();
    let _ = conn.read_to_end(&mut plain);
    assert!(!String::from_utf8_lossy(&plain).contains("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&plain));

    let o = output(
        work.noesis()
            .args(["serve", "--port", "0", "--tls-cert", "missing.pem", "--tls-key", "key.pem"])
            .timeout(Duration::from_secs(60)),
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("missing.pem") && o.stderr.contains("cannot read"), "{}", o.stderr);
    let o = output(
        work.noesis()
            .args(["serve", "--port", "0", "--tls-cert", "cert.pem", "--tls-key", "ca.key"])
            .timeout(Duration::from_secs(60)),
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("ca.key") && o.stderr.contains("does not go with"), "{}", o.stderr);
    let o =
        output(work.noesis().args(["serve", "--port", "0", "--tls-cert", "cert.pem"]).timeout(Duration::from_secs(60)));
    assert_eq!(o.code, 2, "--tls-cert needs --tls-key: {}", o.stderr);
    let o = output(
        work.noesis()
            .args(["serve", "--bind", "0.0.0.0", "--port", "0", "--tls-cert", "cert.pem", "--tls-key", "key.pem"])
            .timeout(Duration::from_secs(60)),
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("without a token"), "TLS is no credential: {}", o.stderr);
}

/// `POST path` with `body` and the token; the raw response (an SSE stream
/// is not JSON).
fn http_raw(addr: &str, path: &str, body: &Value, token: &str) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\nauthorization: Bearer {token}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    raw
}

#[test]
fn plugins_are_served_only_with_the_flag_and_stream_their_report() {
    let work = Work::new();
    work.write("calc/add.py", "def add(a, b):\n    return a + b\n");
    let fake = FakeServer::start(vec![]).unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let status = json!({"status": true});
    {
        let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini"], &envs);
        let (code, env) = http(&s.addr, "POST", "/plugins/docs", Some(&status), Some(&s.token));
        assert_eq!(code, 404, "no plugin routes without --plugins: {env}");
    }
    let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--plugins"], &envs);
    let raw = http_raw(&s.addr, "/plugins/docs", &status, &s.token);
    assert!(raw.starts_with("HTTP/1.1 200") && raw.contains("text/event-stream"), "{raw}");
    let report = raw.split("event: report\ndata: ").nth(1).and_then(|r| r.lines().next()).expect(&raw);
    let report: Value = serde_json::from_str(report).unwrap();
    // The project is the server's folder: one unit, with no node yet.
    assert_eq!(report["units"], 1, "{report}");
    assert_eq!(report["stale"][0]["unit"], "calc", "{report}");
    assert!(fake.received().is_empty(), "status asks no model");
}

/// `ask` over HTTP: the agent searches the project's frames with its tools,
/// its steps stream as `progress`, the answer is the `report` (what `noesis
/// ask --json` prints) and a frame in the project; a bad body is refused
/// before any model call.
#[test]
fn ask_is_served_with_the_plugins_and_streams_the_agents_steps() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("s1", "search_frames", &json!({"text": "parser"})),
        Reply::Chat("{\"answer\": \"nothing about the parser yet\", \"confidence\": 0.4, \"cites\": []}".into()),
    ])
    .unwrap();
    let base_url = fake.base_url();
    let envs = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-test")];
    let s = serve(&work, &["--provider", "openai", "--model", "gpt-4o-mini", "--plugins"], &envs);
    let (_, listed) = http(&s.addr, "GET", "/plugins", None, None);
    let ask = listed["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "ask").cloned();
    assert_eq!(ask.map(|a| a["body"].clone()), Some(json!(["query", "files", "max_tool_calls", "provider", "model"])));
    for (body, want) in [
        (json!({"query": "  "}), 400),
        (json!({"query": "q", "files": ["../secret"]}), 403),
        (json!({"query": "q", "max_tool_calls": 0}), 400),
        (json!({"query": "q", "nope": 1}), 400),
    ] {
        let (code, env) = http(&s.addr, "POST", "/plugins/ask", Some(&body), Some(&s.token));
        assert_eq!(code, want, "{body}: {env}");
        assert_valid_envelope(&env);
    }
    assert!(fake.received().is_empty(), "refused before any model call");
    let raw = http_raw(&s.addr, "/plugins/ask", &json!({"query": "what do we know about the parser"}), &s.token);
    assert!(raw.starts_with("HTTP/1.1 200") && raw.contains("text/event-stream"), "{raw}");
    let items: Vec<Value> = raw
        .split("event: progress\ndata: ")
        .skip(1)
        .filter_map(|r| r.lines().next())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(items.iter().all(|i| i["plugin"] == "ask"), "{items:?}");
    assert!(items.iter().any(|i| i["item"] == "tool_call search_frames"), "{items:?}");
    let report = raw.split("event: report\ndata: ").nth(1).and_then(|r| r.lines().next()).expect(&raw);
    let report: Value = serde_json::from_str(report).unwrap();
    assert_eq!(report["frame"]["conclusion"], "nothing about the parser yet", "{report}");
    assert_eq!(report["children"].as_array().map(Vec::len), Some(1), "the search is a child frame: {report}");
    assert_eq!(report["promoted"], false);
    assert_eq!(fake.received().len(), 2);
    // The answer is a frame of the server's project, as a CLI ask's is.
    let frames = output(work.noesis_bare().args(["frames", "list", "--json"])).json();
    let id = report["frame"]["frame_id"].as_str().unwrap();
    assert!(frames.as_array().unwrap().iter().any(|f| f["frame_id"] == id), "{frames}");
}

#[test]
fn an_agent_run_over_http_can_be_held_to_an_output_schema() {
    let work = Work::new();
    let fake = FakeServer::start(vec![Reply::Chat("thirty-six".into()), Reply::Chat(r#"{"age": 36}"#.into())]).unwrap();
    let s = agent_serve(&work, &fake);
    let schema = json!({"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]});
    let bad = json!({"task": "How old?", "output_schema": {"type": 7}});
    let (status, env) = http(&s.addr, "POST", "/agents/runs", Some(&bad), Some(&s.token));
    assert_eq!(status, 400, "{env}");
    assert!(env["error"]["message"].as_str().unwrap().contains("`output_schema`"), "{env}");
    let start = json!({"task": "How old?", "output_schema": schema});
    let (status, started) = http(&s.addr, "POST", "/agents/runs", Some(&start), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let events = follow_events(&s.addr, &id, None, "done");
    assert_eq!(events.last().unwrap().2["text"], r#"{"age":36}"#);
    let (_, shown) = http(&s.addr, "GET", &format!("/agents/runs/{id}"), None, None);
    assert_eq!(shown["output"], json!({"age": 36}), "{shown}");
    assert_eq!(fake.received().len(), 2, "the prose answer was sent back once");
}

#[test]
fn an_agent_run_over_http_can_stream_its_text() {
    let work = Work::new();
    let mut events: Vec<(&str, Value)> = ["Forty", "-two."]
        .iter()
        .map(|p| ("", json!({"model": "gpt-test", "choices": [{"index": 0, "delta": {"content": p}}]})))
        .collect();
    events.push(("", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})));
    events.push(("", json!("[DONE]")));
    let fake =
        FakeServer::start(vec![Reply::Stream(noesis_testkit::sse(&events), std::time::Duration::from_millis(10))])
            .unwrap();
    let s = agent_serve(&work, &fake);
    let start = json!({"task": "How much?", "stream": true});
    let (status, started) = http(&s.addr, "POST", "/agents/runs", Some(&start), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let seen = follow_events(&s.addr, &id, None, "done");
    let kinds: Vec<&str> = seen.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run_started", "model_call", "text_delta", "text_delta", "model_reply", "done"], "{seen:?}");
    let text: String =
        seen.iter().filter(|(_, k, _)| k == "text_delta").map(|(_, _, d)| d["text"].as_str().unwrap()).collect();
    assert_eq!(text, "Forty-two.");
    assert_eq!(seen.last().unwrap().2["text"], "Forty-two.");
}

#[test]
fn a_run_the_server_drove_can_be_rewound_with_its_files() {
    let work = Work::new();
    let fake = FakeServer::start(vec![
        tool_reply("w1", "write_file", &json!({"path": "made.txt", "content": "by the server"})),
        Reply::Chat("Made it.".into()),
    ])
    .unwrap();
    let s = agent_serve(&work, &fake);
    let (status, started) =
        http(&s.addr, "POST", "/agents/runs", Some(&json!({"task": "Make made.txt"})), Some(&s.token));
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    follow_events(&s.addr, &id, None, "approval_needed");
    let approve = json!({"approve_all": true});
    let (status, _) = http(&s.addr, "POST", &format!("/agents/runs/{id}/approvals"), Some(&approve), Some(&s.token));
    assert_eq!(status, 200);
    follow_events(&s.addr, &id, None, "done");
    assert_eq!(std::fs::read_to_string(work.path().join("made.txt")).unwrap(), "by the server");
    let o = output(work.noesis_bare().args(["agent", "rewind", &id, "--at", "0"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!work.path().join("made.txt").exists(), "{}", o.stderr);
    assert!(work.path().join(".noesis/noesis.db").exists(), "the store inside the workspace was left alone");
}
