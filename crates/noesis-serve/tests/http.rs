//! The HTTP API over real sockets both ways: reqwest to the server bound on
//! 127.0.0.1:0, the server's provider talking to a fake LLM server.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use noesis_llm::{EndpointConfig, OpenAiCompatible, Provider, RetryPolicy};
use noesis_modules::Module;
use noesis_modules::search::SearchPath;
use noesis_serve::agents::RunsPolicy;
use noesis_serve::http::{ServeConfig, ServeError, Server};
use noesis_serve::{ProviderSource, Service, SourceError};
use noesis_testkit::{FakeServer, Reply, sse};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// OpenAI-compatible providers at one base URL; `model` picks the model.
struct Fake {
    base_url: String,
}

impl ProviderSource for Fake {
    fn provider(&self, name: Option<&str>, model: Option<&str>, _: &Module) -> Result<Arc<dyn Provider>, SourceError> {
        if let Some(n) = name.filter(|n| *n == "forbidden") {
            return Err(SourceError::NotAllowed(format!("`{n}` is not allowed on this server")));
        }
        if let Some(n) = name.filter(|n| *n != "openai") {
            return Err(format!("unknown provider `{n}`").into());
        }
        let mut cfg = EndpointConfig::openai(model.unwrap_or("gpt-4o-mini"));
        cfg.base_url.clone_from(&self.base_url);
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        // Longer than any test: a call that ends did so because the server
        // dropped or cancelled it, never because the client gave up waiting.
        cfg.http.timeout = Duration::from_secs(3600);
        Ok(Arc::new(OpenAiCompatible::new(cfg).map_err(|e| SourceError::Unavailable(e.to_string()))?))
    }
}

/// Agent runs kept in memory, on the fake's OpenAI wire, with the
/// built-in tools over a temporary folder. Naive on purpose: it takes the
/// request's `approve` and `limits` as they come, so what holds them to
/// the operator's ceiling is the server.
struct Agents {
    base_url: String,
    dir: tempfile::TempDir,
    runs: std::sync::Mutex<std::collections::BTreeMap<String, noesis_agent::AgentRun>>,
}

#[async_trait::async_trait]
impl noesis_serve::agents::AgentHost for Agents {
    fn create(&self, id: &str, request: &noesis_serve::agents::AgentRequest) -> Result<noesis_agent::AgentRun, String> {
        let tools = noesis_agent::Toolbox::new(noesis_agent::Workspace::new(self.dir.path()).unwrap(), vec![]);
        let approval = match request.approve.as_deref() {
            Some("auto") => noesis_agent::ApprovalPolicy::Auto,
            Some("never") => noesis_agent::ApprovalPolicy::Never,
            _ => noesis_agent::ApprovalPolicy::Ask,
        };
        let mut limits = noesis_agent::Limits::default();
        limits.max_turns = request.limits.max_turns.unwrap_or(limits.max_turns);
        limits.max_cost_usd = request.limits.max_cost_usd;
        let config =
            noesis_agent::RunConfig { tools: tools.decls(), approval, limits, ..noesis_agent::RunConfig::default() };
        Ok(noesis_agent::AgentRun::new(id, request.task.clone(), config, 0))
    }
    async fn equip(
        &self,
        _: &noesis_agent::AgentRun,
    ) -> Result<(Arc<dyn Provider>, Arc<noesis_agent::Toolbox>), String> {
        let mut cfg = EndpointConfig::openai("gpt-4o-mini");
        cfg.base_url.clone_from(&self.base_url);
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        let provider: Arc<dyn Provider> = Arc::new(OpenAiCompatible::new(cfg).map_err(|e| e.to_string())?);
        let tools = noesis_agent::Toolbox::new(noesis_agent::Workspace::new(self.dir.path()).unwrap(), vec![]);
        Ok((provider, Arc::new(tools)))
    }
    async fn save(&self, run: &noesis_agent::AgentRun) -> Result<(), String> {
        self.runs.lock().unwrap().insert(run.id.clone(), run.clone());
        Ok(())
    }
    async fn load(&self, id: &str) -> Result<Option<noesis_agent::AgentRun>, String> {
        Ok(self.runs.lock().unwrap().get(id).cloned())
    }
    async fn list(&self, _: u32) -> Result<Vec<Value>, String> {
        Ok(self.runs.lock().unwrap().keys().map(|id| json!({"run_id": id})).collect())
    }
    async fn unfinished(&self) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

fn good_reply() -> String {
    json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
           "data": {"simplified_code": "x = 1", "changes": [{"type": "remove_redundancy", "description": "+ 0", "scope": "local", "risk": "none"}],
                    "behavior_equivalence": true, "summary": "one change", "rationale": "adding zero does nothing"}})
    .to_string()
}

/// The bearer token of the test servers ([`client`] sends it).
const TOKEN: &str = "test-token";

/// A running server; stops (gracefully) when dropped.
struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
    service: Arc<Service>,
    /// The agent host: what runs it holds.
    host: Arc<Agents>,
    /// A one-time sign-in link, made before the server ran.
    link: String,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The agent-run ids the host holds.
    fn runs(&self) -> Vec<String> {
        self.host.runs.lock().unwrap().keys().cloned().collect()
    }

    async fn stop(mut self) -> Result<(), ServeError> {
        let _ = self.stop.take().unwrap().send(());
        self.done.take().unwrap().await.unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// HTTP clients may run agents, within the default ceiling (ask, the
/// default limits).
fn agents_on() -> RunsPolicy {
    RunsPolicy { http: true, ..RunsPolicy::default() }
}

async fn start_with(base_url: &str, search: SearchPath, tweak: impl FnOnce(&mut ServeConfig)) -> Running {
    start_full(base_url, search, agents_on(), tweak).await
}

/// A server on 127.0.0.1:0 with the bearer [`TOKEN`], its agent runs under
/// `policy`, then `tweak`ed.
async fn start_full(
    base_url: &str,
    search: SearchPath,
    policy: RunsPolicy,
    tweak: impl FnOnce(&mut ServeConfig),
) -> Running {
    let service = Arc::new(Service::new(search, Arc::new(Fake { base_url: base_url.to_owned() })));
    let host = Arc::new(Agents {
        base_url: base_url.to_owned(),
        dir: tempfile::tempdir().unwrap(),
        runs: std::sync::Mutex::default(),
    });
    let agents = noesis_serve::agents::AgentRuns::with_policy(
        Arc::clone(&host) as Arc<dyn noesis_serve::agents::AgentHost>,
        noesis_agent::events::EventBus::new(64),
        policy,
    );
    let mut config = ServeConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: Some(TOKEN.into()),
        agents: Some(noesis_serve::agents::router(&agents)),
        ..ServeConfig::default()
    };
    tweak(&mut config);
    let server = Server::bind(Arc::clone(&service), config).await.unwrap();
    let addr = server.local_addr();
    let link = server.login_link().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Running { addr, stop: Some(tx), done: Some(done), service, host, link }
}

async fn start(fake: &FakeServer) -> Running {
    start_with(&fake.base_url(), SearchPath::default(), |_| {}).await
}

/// A client that sends the test servers' token.
fn client() -> reqwest::Client {
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(reqwest::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
    reqwest::Client::builder().default_headers(auth).build().unwrap()
}

/// A client that sends no credential (and follows no redirect).
fn bare() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn body(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
}

/// A v2.2 failure envelope with the runtime's meta and this code.
fn assert_failure(envelope: &Value, code: &str) {
    let v = noesis_modules::validate_envelope(envelope);
    assert!(v.is_empty(), "breaks the v2.2 schema: {v:?}\n{envelope:#}");
    assert_eq!(envelope["ok"], false, "{envelope}");
    assert_eq!(envelope["error"]["code"], code, "{envelope}");
    assert!(envelope["meta"]["trace_id"].is_string(), "{envelope}");
    assert!(envelope["meta"]["model"].as_str().is_some_and(|m| m.contains('/')), "{envelope}");
}

async fn post(url: &str, json: &Value) -> (u16, Value) {
    body(client().post(url).json(json).send().await.unwrap()).await
}

#[tokio::test]
async fn health_modules_and_info() {
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let s = start(&fake).await;
    let (status, health) = body(client().get(s.url("/health")).send().await.unwrap()).await;
    assert_eq!((status, &health["status"], &health["in_flight"]), (200, &json!("ok"), &json!(0)));

    let (status, list) = body(client().get(s.url("/modules")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["modules"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"code-simplifier"), "{list}");
    assert!(list["modules"].as_array().unwrap().iter().all(|m| m["valid"] == true), "{list}");

    let (status, info) = body(client().get(s.url("/modules/code-simplifier")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(info["name"], "code-simplifier");
    assert!(info["tier"].is_string(), "{info}");
    assert!(info["input_schema"]["properties"]["code"].is_object(), "{info}");
    assert!(info["data_schema"]["required"].as_array().unwrap().contains(&json!("rationale")), "{info}");

    let (status, env) = body(client().get(s.url("/modules/nope")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E4006");
    // A path is never resolved, even to a real module folder.
    let (status, env) = body(client().get(s.url("/modules/..%2Fetc")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E4006");
    assert!(env["error"]["message"].as_str().unwrap().contains("never by path"), "{env}");
}

#[tokio::test]
async fn module_listings_never_show_the_servers_paths() {
    let fake = FakeServer::start(vec![]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("greeter");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("module.yaml"),
        "name: greeter\nversion: 1.0.0\nresponsibility: Greets\ntier: exploration\n",
    )
    .unwrap();
    std::fs::write(module.join("prompt.md"), "Greet.").unwrap();
    let search = SearchPath { dirs: vec![dir.path().to_path_buf()] };
    let s = start_with(&fake.base_url(), search, |_| {}).await;
    let secret = dir.path().display().to_string();
    let (status, list) = body(client().get(s.url("/modules")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains(&secret), "{list}");
    let greeter = list["modules"].as_array().unwrap().iter().find(|m| m["name"] == "greeter").unwrap();
    assert_eq!(greeter["location"], "greeter", "{greeter}");
    let (status, info) = body(client().get(s.url("/modules/greeter")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{info}");
    assert!(!info.to_string().contains(&secret), "{info}");
    assert_eq!(info["location"], "greeter");
}

#[tokio::test]
async fn run_answers_with_the_envelope_and_a_status_per_outcome() {
    let fake = FakeServer::start(vec![
        Reply::Chat(good_reply()),
        Reply::Chat("no JSON at all".into()),
        Reply::Chat("still no JSON".into()),
        Reply::Status(503, "{}".into(), vec![]),
    ])
    .unwrap();
    let s = start(&fake).await;
    let url = s.url("/run");
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}})).await;
    assert_eq!(status, 200, "{env}");
    assert_eq!(env["ok"], true, "{env}");
    assert_eq!(env["data"]["simplified_code"], "x = 1");
    assert_eq!(env["meta"]["model"], "openai/gpt-4o-mini");
    let sent = fake.received();
    assert!(sent[0].body.contains("x = 1 + 0"), "the input reaches the prompt");

    // The model's reply failed (after one re-ask): the module's answer, 200.
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "input": {"code": "y"}})).await;
    assert_eq!(status, 200, "{env}");
    assert_failure(&env, "E1000");

    // The provider failed: 502.
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "input": {"code": "y"}, "model": "m2"})).await;
    assert_eq!(status, 502, "{env}");
    assert_failure(&env, "E4001");
    assert_eq!(fake.received().last().unwrap().json()["model"], "m2", "the model asked for is used");

    // Input that breaks the module's schema: 422, no provider call.
    let calls = fake.received().len();
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "input": {"code": 5}})).await;
    assert_eq!(status, 422, "{env}");
    assert!(env["error"]["code"].as_str().unwrap().starts_with("E100"), "{env}");
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "input": [1]})).await;
    assert_eq!(status, 422);
    assert_failure(&env, "E1001");
    // A provider the server does not have: 422 E1004.
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "provider": "nope"})).await;
    assert_eq!(status, 422);
    assert_failure(&env, "E1004");
    // One the operator does not allow: 403 E4007.
    let (status, env) = post(&url, &json!({"module": "code-simplifier", "provider": "forbidden"})).await;
    assert_eq!(status, 403, "{env}");
    assert_failure(&env, "E4007");
    assert!(env["error"]["message"].as_str().unwrap().contains("not allowed"), "{env}");
    let (status, env) = post(&url, &json!({"module": "missing-module"})).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E4006");
    assert_eq!(fake.received().len(), calls);
}

#[tokio::test]
async fn bad_requests_are_failure_envelopes() {
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let s = start_with(&fake.base_url(), SearchPath::default(), |c| c.max_body = 1024).await;
    let url = s.url("/run");
    let raw = |text: &'static str| client().post(&url).header("content-type", "application/json").body(text);
    for (text, code) in [
        ("{not json", "E1001"),
        ("[1, 2]", "E1001"),
        ("{}", "E1002"),
        ("{\"module\": 5}", "E1003"),
        ("{\"module\": \"code-simplifier\", \"inptu\": {}}", "E1001"),
    ] {
        let (status, env) = body(raw(text).send().await.unwrap()).await;
        assert_eq!(status, 400, "{text}: {env}");
        assert_failure(&env, code);
    }
    let big = json!({"module": "code-simplifier", "input": {"code": "x".repeat(4096)}});
    let (status, env) = post(&url, &big).await;
    assert_eq!(status, 413, "{env}");
    assert_failure(&env, "E1005");

    let (status, env) = body(client().get(s.url("/no/such/route")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E1004");
    let (status, env) = body(client().get(s.url("/run")).send().await.unwrap()).await;
    assert_eq!(status, 405);
    assert_failure(&env, "E1004");
    assert!(fake.received().is_empty());
}

/// Reads an SSE body into (event, data) pairs, comments skipped.
fn parse_sse(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut event = String::new();
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event:") {
                    event = e.trim().to_owned();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
                }
            }
            (!event.is_empty() || !data.is_empty()).then(|| (event, data.join("\n")))
        })
        .collect()
}

#[tokio::test]
async fn stream_sends_text_chunks_then_the_envelope() {
    let reply = good_reply();
    let (a, b) = reply.split_at(reply.len() / 2);
    let chunks = sse(&[
        ("", json!({"model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": a}}]})),
        ("", json!({"choices": [{"index": 0, "delta": {"content": b}, "finish_reason": "stop"}]})),
        ("", json!("[DONE]")),
    ]);
    let fake = FakeServer::start(vec![Reply::Stream(chunks, Duration::from_millis(100))]).unwrap();
    let s = start(&fake).await;
    let resp = client()
        .post(s.url("/run/stream"))
        .json(&json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    // Read it as it arrives: the first chunk must come before the run ends.
    let mut resp = resp;
    let mut text = String::new();
    let mut saw_text = false;
    while let Some(bytes) = resp.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&bytes).unwrap());
        if !saw_text && text.contains("event: text") {
            saw_text = true;
            assert!(!text.contains("event: envelope"), "text arrives before the envelope: {text}");
        }
    }
    let events = parse_sse(&text);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["text", "text", "envelope"], "{text}");
    let pieces: Vec<String> = events[..2].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(pieces, [a, b]);
    let envelope: Value = serde_json::from_str(&events[2].1).unwrap();
    assert_eq!(envelope["ok"], true, "{envelope}");

    // Refused before the stream starts: a JSON answer with its status.
    let (status, env) = post(&s.url("/run/stream"), &json!({"module": "nope"})).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E4006");
}

#[tokio::test]
async fn token_is_required_off_loopback_and_checked_when_set() {
    let service =
        Arc::new(Service::new(SearchPath::default(), Arc::new(Fake { base_url: "http://127.0.0.1:9".into() })));
    let open = ServeConfig { addr: "0.0.0.0:0".parse().unwrap(), ..ServeConfig::default() };
    let err = Server::bind(Arc::clone(&service), open).await.unwrap_err();
    assert!(matches!(err, ServeError::TokenRequired { .. }), "{err}");
    assert!(err.to_string().contains("--token"), "{err}");

    let s = start_with("http://127.0.0.1:9", SearchPath::default(), |c| c.token = Some("s3cret-token".into())).await;
    let (status, _) = body(client().get(s.url("/health")).send().await.unwrap()).await;
    assert_eq!(status, 200, "/health needs no token");
    for auth in [None, Some("Bearer wrong"), Some("Bearer s3cret-toke"), Some("Basic s3cret-token")] {
        let mut req = bare().get(s.url("/modules"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let (status, env) = body(resp).await;
        assert_eq!(status, 401, "{auth:?}");
        assert_failure(&env, "E4007");
        assert!(!env.to_string().contains("s3cret"), "the token is never echoed");
    }
    let resp = bare().post(s.url("/run")).json(&json!({"module": "code-simplifier"})).send().await.unwrap();
    let (status, env) = body(resp).await;
    assert_eq!(status, 401);
    assert_failure(&env, "E4007");
    let resp = bare().get(s.url("/modules")).bearer_auth("s3cret-token").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test]
async fn openapi_describes_every_route() {
    // With the plugin routes on (`noesis serve --plugins`), over an empty
    // project.
    let (project, store_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = noesis_store::open(&store_dir.path().join("noesis.db").to_string_lossy()).await.unwrap();
    let plugins = Arc::new(noesis_serve::plugins::PluginRuns::new(
        Arc::new(Service::new(SearchPath::default(), Arc::new(Fake { base_url: "http://127.0.0.1:9".into() }))),
        noesis_frames::project::identify(project.path()).unwrap(),
        Arc::from(store),
        Vec::new(),
        "docs/noesis".into(),
    ));
    let s = start_with("http://127.0.0.1:9", SearchPath::default(), |c| {
        c.plugins = Some(plugins.router());
        c.episodes = Some(noesis_serve::episodes::off());
    })
    .await;
    let (status, doc) = body(client().get(s.url("/openapi.json")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let routes = [
        ("get", "/health"),
        ("get", "/modules"),
        ("get", "/modules/{name}"),
        ("post", "/run"),
        ("post", "/run/stream"),
        ("post", "/compose"),
        ("get", "/openapi.json"),
        ("post", "/agents/runs"),
        ("get", "/agents/runs"),
        ("get", "/agents/runs/{id}"),
        ("get", "/agents/runs/{id}/events"),
        ("post", "/agents/runs/{id}/approvals"),
        ("post", "/agents/runs/{id}/cancel"),
        ("get", "/plugins"),
        ("post", "/plugins/{name}"),
        ("post", "/episodes"),
        ("get", "/episodes/{id}/status"),
        ("get", "/episodes/{id}/events"),
        ("post", "/episodes/{id}/approvals"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in routes {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} missing from the document");
    }
    // …and nothing in the document that the server does not route.
    let mut documented = 0;
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            documented += 1;
            assert!(routes.contains(&(method.as_str(), path.as_str())), "{method} {path} is documented but not listed");
            let url = s.url(&path.replace("{name}", "code-simplifier").replace("{id}", "no-such-run"));
            let req = match method.as_str() {
                "get" => client().get(&url),
                "post" => client().post(&url).body("{}"),
                other => panic!("unexpected method {other}"),
            };
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert!(status != 405 && !text.contains("no route"), "{method} {path} is not routed: {status} {text}");
        }
    }
    assert_eq!(documented, routes.len());
    // Every component reference resolves.
    let text = doc.to_string();
    for r in text.split("\"$ref\":\"#/").skip(1) {
        let pointer = format!("/{}", &r[..r.find('"').unwrap()]);
        assert!(doc.pointer(&pointer).is_some(), "dangling $ref {pointer}");
    }
}

/// An upstream that accepts one request and never answers; reports when
/// the caller closes the connection.
fn silent_upstream() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn);
                let mut line = String::new();
                // Headers, then whatever body; EOF means the caller hung up.
                while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    line.clear();
                }
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest);
                let _ = tx.send(());
            });
        }
    });
    (format!("http://{addr}/v1"), rx)
}

async fn assert_disconnect_cancels(route: &str) {
    let (upstream, closed) = silent_upstream();
    let s = start_with(&upstream, SearchPath::default(), |_| {}).await;
    let resp = client()
        .post(s.url(route))
        .timeout(Duration::from_millis(400))
        .json(&json!({"module": "code-simplifier", "input": {"code": "x"}}))
        .send()
        .await;
    match resp {
        // The stream's headers come first; the body is cut when dropped.
        Ok(r) => {
            assert_eq!(r.status().as_u16(), 200, "{route}");
            assert!(tokio::time::timeout(Duration::from_millis(300), r.bytes()).await.map_or(true, |b| b.is_err()));
        }
        Err(e) => assert!(e.is_timeout(), "{e}"),
    }
    // The upstream never answers and the provider would wait an hour, so
    // only the server dropping the call closes the connection: waiting for
    // that close (and then for the run to be counted out) is the check, with
    // no bound on how long either takes.
    let closed = tokio::task::spawn_blocking(move || closed.recv()).await.unwrap();
    assert!(closed.is_ok(), "{route}: the upstream's listener went away");
    while s.service.in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_the_upstream_call() {
    assert_disconnect_cancels("/run").await;
}

#[tokio::test]
async fn a_stream_client_that_disconnects_cancels_the_upstream_call() {
    assert_disconnect_cancels("/run/stream").await;
}

fn write_module(dir: &Path, version: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("module.yaml"),
        format!("name: echo\nversion: {version}\nresponsibility: Echo the input\ntier: decision\n"),
    )
    .unwrap();
    std::fs::write(dir.join("prompt.md"), "Echo $INPUT").unwrap();
    std::fs::write(
        dir.join("schema.json"),
        json!({"input": {"type": "object"}, "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}}}})
            .to_string(),
    )
    .unwrap();
}

#[tokio::test]
async fn modules_are_cached_and_reloaded_when_their_files_change() {
    let tmp = tempfile::tempdir().unwrap();
    let module_dir = tmp.path().join("echo");
    write_module(&module_dir, "1.0.0");
    let search = SearchPath { dirs: vec![tmp.path().to_path_buf()] };
    let s = start_with("http://127.0.0.1:9", search, |_| {}).await;

    let first = s.service.module("echo").unwrap();
    let again = s.service.module("echo").unwrap();
    assert!(Arc::ptr_eq(&first, &again), "an unchanged module is not loaded again");
    let (_, info) = body(client().get(s.url("/modules/echo")).send().await.unwrap()).await;
    assert_eq!(info["version"], "1.0.0");

    write_module(&module_dir, "1.0.10");
    let (_, info) = body(client().get(s.url("/modules/echo")).send().await.unwrap()).await;
    assert_eq!(info["version"], "1.0.10", "a changed module.yaml is reloaded");
    assert!(!Arc::ptr_eq(&first, &s.service.module("echo").unwrap()));

    // Broken on disk: E4000, a 500; fixed: served again.
    std::fs::write(module_dir.join("module.yaml"), "name: [unclosed\n").unwrap();
    let (status, env) = body(client().get(s.url("/modules/echo")).send().await.unwrap()).await;
    assert_eq!(status, 500, "{env}");
    assert_failure(&env, "E4000");
    write_module(&module_dir, "2.0.0");
    let (status, info) = body(client().get(s.url("/modules/echo")).send().await.unwrap()).await;
    assert_eq!((status, &info["version"]), (200, &json!("2.0.0")));

    std::fs::remove_dir_all(&module_dir).unwrap();
    let (status, env) = body(client().get(s.url("/modules/echo")).send().await.unwrap()).await;
    assert_eq!(status, 404, "{env}");
}

fn write_caller(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("module.yaml"),
        "name: caller\nversion: 1.0.0\nresponsibility: Summarise what echo says\ntier: decision\n",
    )
    .unwrap();
    std::fs::write(dir.join("prompt.md"), "Summarise this: @call:echo").unwrap();
    std::fs::write(
        dir.join("schema.json"),
        json!({"input": {"type": "object"}, "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}}}})
            .to_string(),
    )
    .unwrap();
}

#[tokio::test]
async fn compose_runs_calls_through_the_cache_and_lists_the_steps() {
    let tmp = tempfile::tempdir().unwrap();
    write_module(&tmp.path().join("echo"), "1.0.0");
    write_caller(&tmp.path().join("caller"));
    let reply = |r: &str| {
        json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": r}, "data": {"rationale": r}})
            .to_string()
    };
    let fake = FakeServer::start(vec![
        Reply::Chat(reply("echoed")),
        Reply::Chat(reply("summarised")),
        Reply::Chat(reply("echoed again")),
        Reply::Chat(reply("summarised again")),
    ])
    .unwrap();
    let search = SearchPath { dirs: vec![tmp.path().to_path_buf()] };
    let s = start_with(&fake.base_url(), search, |_| {}).await;

    let (status, env) = post(&s.url("/compose"), &json!({"module": "caller", "input": {}})).await;
    assert_eq!(status, 200, "{env}");
    assert_eq!(env["ok"], true, "{env}");
    assert_eq!(env["data"]["rationale"], "summarised");
    assert!(noesis_modules::validate_envelope(&env).is_empty(), "{env}");
    let steps = env["meta"]["steps"].as_array().unwrap();
    let modules: Vec<&str> = steps.iter().filter_map(|s| s["module"].as_str()).collect();
    assert_eq!(modules, ["caller", "echo"], "{env}");
    assert_eq!(steps[1]["parent"], 0);
    let sent = fake.received();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].body.contains("echoed"), "the child's envelope reaches the caller's prompt");

    // /run runs the @call too (as `noesis run` does), without the steps.
    let (status, env) = post(&s.url("/run"), &json!({"module": "caller"})).await;
    assert_eq!((status, &env["data"]["rationale"]), (200, &json!("summarised again")), "{env}");
    assert!(env["meta"].get("steps").is_none());

    let (status, env) = post(&s.url("/compose"), &json!({"module": "nope"})).await;
    assert_eq!(status, 404);
    assert_failure(&env, "E4006");
}

#[tokio::test]
async fn shutdown_lets_runs_finish_within_the_grace_then_cancels_them() {
    let slow = Reply::Delay(Duration::from_millis(300), Box::new(Reply::Chat(good_reply())));
    // The second run's reply would come after an hour: the stop can only
    // end it by cancelling it, which its envelope says.
    let fake = FakeServer::start(vec![
        slow.clone(),
        Reply::Delay(Duration::from_secs(3600), Box::new(Reply::Chat(good_reply()))),
    ])
    .unwrap();
    let s = start_with(&fake.base_url(), SearchPath::default(), |c| c.grace = Duration::from_millis(800)).await;
    let url = s.url("/run");
    let quick = tokio::spawn({
        let url = url.clone();
        async move { post(&url, &json!({"module": "code-simplifier", "input": {"code": "a"}})).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stuck = tokio::spawn({
        let url = url.clone();
        async move { post(&url, &json!({"module": "code-simplifier", "input": {"code": "b"}})).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = s.addr;
    s.stop().await.unwrap();
    let (status, env) = quick.await.unwrap();
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
    let (status, env) = stuck.await.unwrap();
    assert_eq!(status, 504, "{env}");
    assert_failure(&env, "E2002");
    assert!(env["error"]["message"].as_str().unwrap().contains("cancelled"), "{env}");
    assert!(std::net::TcpStream::connect(addr).is_err(), "no longer accepting");
}

#[tokio::test]
async fn a_request_from_another_site_changes_nothing() {
    let fake = FakeServer::start(vec![]).unwrap();
    let s = start(&fake).await;
    let input = json!({"module": "code-simplifier", "input": {"code": "x = 1"}});
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("origin", "null"),
        ("origin", "http://127.0.0.1:1"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let resp = client().post(s.url("/run")).header(name, value).json(&input).send().await.unwrap();
        let (status, env) = body(resp).await;
        assert_eq!(status, 403, "{name}: {value}");
        assert_failure(&env, "E4007");
        let resp = client().post(s.url("/login")).header(name, value).body("token=x").send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 403, "sign-in from {value}");
    }
    assert!(fake.received().is_empty(), "no model was called");
    // The same site, and programs that send no Origin, go through; reading is never refused.
    let own = format!("http://{}", s.addr);
    let resp = client().post(s.url("/run")).header("origin", &own).json(&input).send().await.unwrap();
    assert_ne!(resp.status().as_u16(), 403);
    let resp = client().get(s.url("/modules")).header("origin", "https://evil.example").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

/// One raw HTTP/1.1 request on its own connection (so the `Host` header
/// can be anything, or missing): (status, headers lower-cased, body).
async fn raw(addr: SocketAddr, request: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    conn.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// `method path` with these extra header lines and a JSON body, closing
/// the connection after.
fn request(method: &str, path: &str, headers: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\n{headers}connection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn write_file_reply(path: &str) -> Reply {
    Reply::Status(
        200,
        noesis_testkit::tool_call_completion("w1", "write_file", &json!({"path": path, "content": "pwned"}))
            .to_string(),
        vec![],
    )
}

/// Waits until the run's stored status is `want` (ordering, not time: the
/// deadline only stops a hung test).
async fn wait_run(s: &Running, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, shown) = body(client().get(s.url(&format!("/agents/runs/{id}"))).send().await.unwrap()).await;
        let waiting = want != "awaiting_approval" || shown["pending"].as_array().is_some_and(|p| !p.is_empty());
        if shown["status"] == want && waiting {
            return shown;
        }
        assert!(Instant::now() < deadline, "run {id} never became {want}: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// DNS rebinding: a page at attacker.example whose name now points at
/// 127.0.0.1 makes the browser send `Host: attacker.example` with its own
/// `Origin`, which pass the cross-site check. Refused on every route before
/// anything runs, even with a valid credential and a ceiling of `auto`.
#[tokio::test]
async fn a_dns_rebound_request_is_refused_on_every_route_and_writes_nothing() {
    let fake = FakeServer::start(vec![write_file_reply("rebound.txt"), Reply::Chat("done".into())]).unwrap();
    let auto = RunsPolicy {
        http: true,
        ceiling: noesis_serve::agents::Ceiling {
            approve: noesis_agent::ApprovalPolicy::Auto,
            ..noesis_serve::agents::Ceiling::default()
        },
        ..RunsPolicy::default()
    };
    let s = start_full(&fake.base_url(), SearchPath::default(), auto, |c| c.open_reads = true).await;
    let run = json!({"task": "write rebound.txt", "approve": "auto"}).to_string();
    let module = json!({"module": "code-simplifier", "input": {"code": "x"}}).to_string();
    let routes = [
        ("GET", "/health", ""),
        ("GET", "/modules", ""),
        ("GET", "/openapi.json", ""),
        ("GET", "/agents/runs", ""),
        ("GET", "/login", ""),
        ("GET", "/", ""),
        ("GET", "/no/such/route", ""),
        ("POST", "/run", module.as_str()),
        ("POST", "/run/stream", module.as_str()),
        ("POST", "/compose", module.as_str()),
        ("POST", "/agents/runs", run.as_str()),
        ("POST", "/login", "token=test-token"),
    ];
    for host in ["attacker.example", "attacker.example:80", &format!("attacker.example:{}", s.addr.port())] {
        for (method, path, body) in routes {
            for auth in ["", "authorization: Bearer test-token\r\n"] {
                let headers = format!("host: {host}\r\norigin: http://{host}\r\n{auth}");
                let (status, head, text) = raw(s.addr, &request(method, path, &headers, body)).await;
                assert_eq!(status, 421, "{method} {path} Host {host}: {text}");
                assert!(head.contains("content-type: application/json"), "{head}");
                let env: Value = serde_json::from_str(&text).unwrap();
                assert_failure(&env, "E4007");
                assert!(env["error"]["message"].as_str().unwrap().contains("host"), "{env}");
            }
        }
    }
    // An absolute URI naming another host is refused as well.
    let headers = format!("host: {}\r\n", s.addr);
    let (status, _, _) = raw(s.addr, &request("POST", "http://attacker.example/agents/runs", &headers, &run)).await;
    assert_eq!(status, 421);
    assert!(fake.received().is_empty(), "no model was called");
    assert!(s.runs().is_empty(), "no run was stored: {:?}", s.runs());
    assert!(!s.host.dir.path().join("rebound.txt").exists(), "nothing was written");

    // The same request naming this server does what it says (so the
    // refusals above are the Host check, not a broken run).
    let resp = client().post(s.url("/agents/runs")).body(run).send().await.unwrap();
    let (status, started) = body(resp).await;
    assert_eq!(status, 201, "{started}");
    wait_run(&s, started["run_id"].as_str().unwrap(), "done").await;
    assert_eq!(std::fs::read_to_string(s.host.dir.path().join("rebound.txt")).unwrap(), "pwned");
}

#[tokio::test]
async fn a_request_without_a_host_is_refused_and_allowed_names_are_admitted() {
    let s = start_with("http://127.0.0.1:9", SearchPath::default(), |c| {
        c.open_reads = true;
        c.allow_hosts = vec!["Noesis.Test".into()];
    })
    .await;
    let (status, _, text) = raw(s.addr, "GET /health HTTP/1.1\r\nconnection: close\r\n\r\n").await;
    assert_eq!(status, 421, "HTTP/1.1 without Host: {text}");
    let (status, _, _) = raw(s.addr, "GET /health HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 421, "HTTP/1.0 without Host");
    let port = s.addr.port();
    for (host, want) in [
        ("noesis.test".to_owned(), 200),
        (format!("noesis.test:{port}"), 200),
        ("NOESIS.TEST.".to_owned(), 200),
        (format!("localhost:{port}"), 200),
        (format!("app.localhost:{port}"), 200),
        (format!("127.0.0.1:{port}"), 200),
        (format!("[::1]:{port}"), 200),
        ("other.test".to_owned(), 421),
        ("noesis.test.other.test".to_owned(), 421),
        ("10.1.2.3".to_owned(), 421),
    ] {
        let (status, _, text) = raw(s.addr, &request("GET", "/modules", &format!("host: {host}\r\n"), "")).await;
        assert_eq!(status, want, "Host {host}: {text}");
    }
    let bad = ServeConfig { allow_hosts: vec!["https://x.example:1/".into()], ..ServeConfig::default() };
    let service = Arc::clone(&s.service);
    let err = Server::bind(service, bad).await.unwrap_err();
    assert!(matches!(err, ServeError::BadHost(_)) && err.to_string().contains("https://x.example:1/"), "{err}");
}

#[tokio::test]
async fn on_loopback_reads_are_open_and_nothing_changes_without_a_credential() {
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let s = start_with(&fake.base_url(), SearchPath::default(), |c| c.open_reads = true).await;
    let resp = bare().get(s.url("/modules")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "reading needs nothing on loopback");
    let module = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}});
    for (path, payload) in [
        ("/run", module.clone()),
        ("/run/stream", module.clone()),
        ("/compose", module.clone()),
        ("/agents/runs", json!({"task": "anything"})),
        ("/agents/runs/x/cancel", json!({})),
        ("/agents/runs/x/approvals", json!({"approve_all": true})),
    ] {
        for auth in [None, Some("Bearer nope"), Some("Bearer")] {
            let mut req = bare().post(s.url(path)).json(&payload);
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.headers()["www-authenticate"], "Bearer", "{path}");
            let (status, env) = body(resp).await;
            assert_eq!(status, 401, "{path} {auth:?}: {env}");
            assert_failure(&env, "E4007");
        }
    }
    // A browser is shown the sign-in page instead.
    let resp = bare().post(s.url("/run")).header("accept", "text/html").json(&module).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert!(resp.text().await.unwrap().contains("name=\"token\""));
    assert!(fake.received().is_empty() && s.runs().is_empty(), "nothing ran");
    let (status, env) = post(&s.url("/run"), &module).await;
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "with the token: {env}");
}

#[tokio::test]
async fn a_one_time_link_signs_in_once_and_the_cookie_is_a_session_not_the_token() {
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let s = start_with(&fake.base_url(), SearchPath::default(), |c| c.open_reads = true).await;
    let secret = s.link.split("once=").nth(1).unwrap().to_owned();
    assert!(s.link.starts_with(&format!("http://{}/login?once=", s.addr)), "{}", s.link);
    assert_eq!(secret.len(), 64, "256 random bits: {secret}");
    let resp = bare().get(&s.link).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    assert_eq!(resp.headers()["location"], "/");
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(part), "{part}: {set}");
    }
    assert!(!set.contains("Secure"), "no Secure over plain HTTP: {set}");
    let session = set.split(';').next().unwrap().strip_prefix("noesis_session=").unwrap().to_owned();
    assert_eq!(session.len(), 64, "{set}");
    assert!(session != secret && session != TOKEN, "the cookie holds a session id, not a secret: {set}");
    // The session does what the token does.
    let module = json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}});
    let resp =
        bare().post(s.url("/run")).header("cookie", format!("noesis_session={session}")).json(&module).send().await;
    let (status, env) = body(resp.unwrap()).await;
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
    // The link works once.
    let again = bare().get(&s.link).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 401);
    assert!(again.headers().get("set-cookie").is_none());
    assert!(again.text().await.unwrap().contains("works once"));
    // Neither the link's secret nor a made-up id is a session.
    for fake_id in [secret.as_str(), TOKEN, "0000"] {
        let resp = bare().post(s.url("/run")).header("cookie", format!("noesis_session={fake_id}")).json(&module);
        assert_eq!(resp.send().await.unwrap().status().as_u16(), 401, "{fake_id}");
    }
    // The token's sign-in form also gives a session id, never the token.
    let resp = bare()
        .post(s.url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("noesis_session=") && !set.contains(TOKEN), "{set}");
    let wrong = bare().post(s.url("/login")).body("token=nope").send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
}

#[tokio::test]
async fn agent_runs_over_http_are_refused_unless_the_operator_allows_them() {
    let fake = FakeServer::start(vec![]).unwrap();
    let s = start_full(&fake.base_url(), SearchPath::default(), RunsPolicy::default(), |_| {}).await;
    for (path, payload) in [
        ("/agents/runs", json!({"task": "write a file", "approve": "auto"})),
        ("/agents/runs/x/approvals", json!({"approve_all": true})),
        ("/agents/runs/x/cancel", json!({})),
    ] {
        let (status, env) = post(&s.url(path), &payload).await;
        assert_eq!(status, 403, "{path}: {env}");
        assert_failure(&env, "E4007");
        assert!(env["error"]["message"].as_str().unwrap().contains("--agents"), "{env}");
    }
    let (status, listed) = body(client().get(s.url("/agents/runs")).send().await.unwrap()).await;
    assert_eq!((status, &listed["runs"]), (200, &json!([])), "reading runs still works");
    assert!(s.runs().is_empty() && fake.received().is_empty());
}

#[tokio::test]
async fn a_request_cannot_raise_the_approval_policy_or_the_limits() {
    let fake = FakeServer::start(vec![write_file_reply("asked.txt")]).unwrap();
    let ceiling = noesis_serve::agents::Ceiling {
        approve: noesis_agent::ApprovalPolicy::Ask,
        limits: noesis_agent::Limits { max_turns: 3, max_cost_usd: Some(0.25), ..noesis_agent::Limits::default() },
    };
    let policy = RunsPolicy { http: true, ceiling, ..RunsPolicy::default() };
    let s = start_full(&fake.base_url(), SearchPath::default(), policy, |_| {}).await;
    let asked = json!({"task": "write asked.txt", "approve": "auto",
                       "limits": {"max_turns": 500, "max_cost_usd": 100.0}});
    let (status, started) = post(&s.url("/agents/runs"), &asked).await;
    assert_eq!(status, 201, "{started}");
    let id = started["run_id"].as_str().unwrap();
    // `auto` under the operator's `ask`: the write waits for a person.
    let shown = wait_run(&s, id, "awaiting_approval").await;
    assert_eq!(shown["pending"][0]["tool"], "write_file", "{shown}");
    assert!(!s.host.dir.path().join("asked.txt").exists(), "nothing written before a decision");
    let config = &shown["run"]["config"];
    assert_eq!(config["approval"], "ask", "{config}");
    assert_eq!(config["limits"]["max_turns"], 3, "{config}");
    assert_eq!(config["limits"]["max_cost_usd"], 0.25, "{config}");
    let stored = s.host.runs.lock().unwrap()[id].config.clone();
    assert_eq!((stored.approval, stored.limits.max_turns), (noesis_agent::ApprovalPolicy::Ask, 3));
}

#[tokio::test]
async fn runs_beyond_the_cap_are_refused_with_retry_after() {
    let fake = FakeServer::start(vec![write_file_reply("one.txt"), Reply::Chat("second".into())]).unwrap();
    let policy = RunsPolicy { http: true, max_runs: 1, ..RunsPolicy::default() };
    let s = start_full(&fake.base_url(), SearchPath::default(), policy, |_| {}).await;
    let (status, first) = post(&s.url("/agents/runs"), &json!({"task": "one"})).await;
    assert_eq!(status, 201, "{first}");
    let first = first["run_id"].as_str().unwrap().to_owned();
    wait_run(&s, &first, "awaiting_approval").await;
    let resp = client().post(s.url("/agents/runs")).json(&json!({"task": "two"})).send().await.unwrap();
    assert_eq!(resp.headers()["retry-after"], "10");
    let (status, env) = body(resp).await;
    assert_eq!(status, 429, "{env}");
    assert_failure(&env, "E4002");
    assert!(env["error"]["message"].as_str().unwrap().contains("--max-runs"), "{env}");
    assert_eq!(s.runs(), std::slice::from_ref(&first), "the refused run was never stored");
    // When the live run ends, its slot is free again.
    let (status, _) = post(&s.url(&format!("/agents/runs/{first}/cancel")), &json!({})).await;
    assert_eq!(status, 202);
    wait_run(&s, &first, "cancelled").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let second = loop {
        let (status, started) = post(&s.url("/agents/runs"), &json!({"task": "two"})).await;
        if status == 201 {
            break started["run_id"].as_str().unwrap().to_owned();
        }
        // The run's task lets go of its slot just after its last event.
        assert_eq!(status, 429, "{started}");
        assert!(Instant::now() < deadline, "the slot never came free");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let done = wait_run(&s, &second, "done").await;
    assert_eq!(done["outcome"]["text"], "second", "{done}");
}

/// A throwaway CA and a certificate for localhost/127.0.0.1 signed by it,
/// made with the openssl CLI: (folder, CA file, cert file, key file).
fn certificates() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("these tests need the openssl CLI (apt-get install openssl): {e}"));
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=noesis test CA"],
        ]
        .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(p("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    openssl(&[
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
    ]);
    let (ca, cert, key) = (p("ca.pem"), p("cert.pem"), p("key.pem"));
    (dir, ca, cert, key)
}

#[tokio::test]
async fn tls_serves_https_with_secure_cookies_and_a_plain_client_gets_nothing() {
    let (_dir, ca, cert, key) = certificates();
    let fake = FakeServer::start(vec![Reply::Chat(good_reply())]).unwrap();
    let files = noesis_serve::tls::TlsFiles { cert: cert.clone(), key: key.clone() };
    let s = start_with(&fake.base_url(), SearchPath::default(), |c| c.tls = Some(files)).await;
    let trusted = reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .tls_certs_only([trusted])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = |path: &str| format!("https://localhost:{}{path}", s.addr.port());
    let resp = https.get(url("/health")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = https
        .post(url("/run"))
        .bearer_auth(TOKEN)
        .json(&json!({"module": "code-simplifier", "input": {"code": "x = 1 + 0"}}))
        .send()
        .await
        .unwrap();
    let (status, env) = body(resp).await;
    assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
    assert!(s.link.starts_with("https://"), "{}", s.link);
    let link = s.link.replace(&format!("https://{}", s.addr), &url(""));
    let resp = https.get(&link).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let set = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(set.contains("; Secure") && set.contains("HttpOnly"), "{set}");
    // Plain HTTP on the TLS port: no answer at all, nothing run.
    let plain = bare()
        .post(s.url("/run"))
        .bearer_auth(TOKEN)
        .json(&json!({"module": "code-simplifier", "input": {"code": "y"}}))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    assert_eq!(fake.received().len(), 1, "only the HTTPS run reached the model");
    // A client that does not trust the certificate is refused by its own TLS.
    assert!(bare().get(url("/health")).send().await.is_err());
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_are_named_and_off_loopback_still_needs_a_token() {
    let (dir, _ca, cert, key) = certificates();
    let service =
        Arc::new(Service::new(SearchPath::default(), Arc::new(Fake { base_url: "http://127.0.0.1:9".into() })));
    let bind = |cert: &Path, key: &Path, addr: &str| {
        let config = ServeConfig {
            addr: addr.parse().unwrap(),
            tls: Some(noesis_serve::tls::TlsFiles { cert: cert.to_path_buf(), key: key.to_path_buf() }),
            ..ServeConfig::default()
        };
        Server::bind(Arc::clone(&service), config)
    };
    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a pem file\n").unwrap();
    let other_key = dir.path().join("ca.key");
    for (c, k, file, words) in [
        (&missing, &key, &missing, "cannot read"),
        (&cert, &missing, &missing, "cannot read"),
        (&garbage, &key, &garbage, "BEGIN CERTIFICATE"),
        (&cert, &garbage, &garbage, "private key"),
        (&cert, &other_key, &other_key, "does not go with"),
    ] {
        let err = bind(c, k, "127.0.0.1:0").await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ServeError::Tls { .. }), "{text}");
        assert!(text.contains(&file.display().to_string()) && text.contains(words), "{text}");
    }
    let err = bind(&cert, &key, "0.0.0.0:0").await.unwrap_err();
    assert!(matches!(err, ServeError::TokenRequired { .. }), "TLS is no credential: {err}");
}
