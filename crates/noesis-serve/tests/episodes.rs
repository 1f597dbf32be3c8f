//! Episodes over real HTTP on 127.0.0.1: `POST /episodes` runs `solve` on
//! the server's project with a scripted model (the fake OpenAI server),
//! its progress streamed as server-sent events, and CODER's call that a
//! rule asks about waiting for `POST /episodes/{id}/approvals`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use noesis_llm::{EndpointConfig, OpenAiCompatible, RetryPolicy};
use noesis_modules::search::SearchPath;
use noesis_serve::episodes::{EpisodeHost, Episodes};
use noesis_serve::http::{ServeConfig, Server};
use noesis_serve::{ProviderSource, Service, SourceError};
use noesis_testkit::{FakeServer, Reply, tool_call_completion};
use noesis_workflow::driver::{Approver, Driver, Observer};
use noesis_workflow::versions::States;
use serde_json::{Value, json};

const TOKEN: &str = "episode-token";

/// The project's state in a SQLite store, the model the fake server, the
/// sandbox off (the helper is not needed to test the HTTP front end), and
/// `ask` for CODER's `edit_file` when `ask` is set.
struct Host {
    states: States,
    root: PathBuf,
    blobs: PathBuf,
    base_url: String,
    ask: bool,
}

impl EpisodeHost for Host {
    fn states(&self) -> &States {
        &self.states
    }

    fn project_root(&self) -> &Path {
        &self.root
    }

    fn sandbox(&self) -> noesis_sandbox::Settings {
        noesis_sandbox::Settings { mode: noesis_sandbox::Mode::Off, ..noesis_sandbox::Settings::default() }
    }

    fn driver(
        &self,
        workspace: PathBuf,
        sandbox: noesis_sandbox::Settings,
        observer: Arc<dyn Observer>,
        approver: Arc<dyn Approver>,
    ) -> Result<Driver, String> {
        let mut cfg = EndpointConfig::openai("gpt-4o-mini");
        cfg.base_url.clone_from(&self.base_url);
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        let provider = Arc::new(OpenAiCompatible::new(cfg).map_err(|e| e.to_string())?);
        let mut permissions = noesis_agent::Permissions::default();
        if self.ask {
            let mut layer = noesis_agent::Layer::narrowing("test");
            layer.add(noesis_agent::Effect::Ask, "edit_file", "test").map_err(|e| e.to_string())?;
            permissions.push(layer);
        }
        Ok(Driver {
            search: SearchPath::default(),
            states: self.states.clone(),
            project_root: self.root.clone(),
            provider,
            prices: Arc::new(noesis_llm::PriceTable::default()),
            budget: None,
            workspace,
            blobs: self.blobs.clone(),
            test_timeout: Duration::from_secs(60),
            permissions,
            sandbox,
            redactor: Arc::new(noesis_sandbox::Redactor::default()),
            observer,
            approver,
        })
    }
}

struct NoModels;

impl ProviderSource for NoModels {
    fn provider(
        &self,
        _: Option<&str>,
        _: Option<&str>,
        _: &noesis_modules::Module,
    ) -> Result<Arc<dyn noesis_llm::Provider>, SourceError> {
        Err(SourceError::NotAllowed("no modules here".into()))
    }
}

fn envelope(data: Value) -> Reply {
    Reply::Chat(
        json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"}, "data": data})
            .to_string(),
    )
}

/// PLANNER, REASONER, CODER's fix and its answer.
fn script() -> Vec<Reply> {
    vec![
        envelope(json!({
            "problem_reflection": {"goal": "add adds", "inputs": [], "outputs": [], "constraints": [], "edge_cases": []},
            "possible_solutions": ["fix the operator"], "selected_solution": "fix the operator", "rationale": "r"
        })),
        envelope(json!({"plan": ["change a - b to a + b"], "thoughts": ["one change"], "rationale": "r"})),
        Reply::Status(
            200,
            tool_call_completion(
                "fix",
                "edit_file",
                &json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}),
            )
            .to_string(),
            vec![],
        ),
        Reply::Chat("Fixed add.".into()),
    ]
}

struct Running {
    base: String,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    client: reqwest::Client,
}

impl Running {
    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.base)).bearer_auth(TOKEN).json(body)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.base)).bearer_auth(TOKEN)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn serve(llm: &FakeServer, ask: bool) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(root.join("check.sh"), "grep -q 'return a + b' calc.py\n").unwrap();
    let root = root.canonicalize().unwrap();
    let store = noesis_store::open(&dir.path().join("noesis.db").to_string_lossy()).await.unwrap();
    store.ensure_project("p1", &root.to_string_lossy()).await.unwrap();
    let blobs = dir.path().join("snapshots").join("blobs");
    let host = Host {
        states: States { store: Arc::from(store), project_id: "p1".into(), mirror: None },
        root,
        blobs,
        base_url: llm.base_url(),
        ask,
    };
    let episodes = Episodes::new(Arc::new(host), noesis_agent::events::EventBus::new(64));
    let config = ServeConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: Some(TOKEN.into()),
        episodes: Some(noesis_serve::episodes::router(&episodes)),
        ..ServeConfig::default()
    };
    let service = Arc::new(Service::new(SearchPath::default(), Arc::new(NoModels)));
    let server = Server::bind(service, config).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Running { base, dir, stop: Some(tx), client: reqwest::Client::new() }
}

/// The episode's events to its end: (kind, data) each.
async fn events(r: &Running, id: &str, mut each: impl FnMut(&str, &Value)) -> Vec<(String, Value)> {
    let mut resp = r.get(&format!("/episodes/{id}/events")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut seen = Vec::new();
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await.expect("the episode ends in time").unwrap();
        let Some(chunk) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            let v: Value = serde_json::from_str(data).unwrap();
            let kind = v["kind"].as_str().unwrap_or_default().to_owned();
            each(&kind, &v["data"]);
            seen.push((kind, v["data"].clone()));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_episode_over_http_fixes_the_code_and_streams_its_nodes() {
    let llm = FakeServer::start(script()).unwrap();
    let r = serve(&llm, false).await;
    let resp = r.post("/episodes", &json!({"task": "make add add", "tests": ["sh check.sh"]})).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    let id = body["episode_id"].as_str().unwrap().to_owned();
    assert_eq!(body["events"], format!("/episodes/{id}/events"));
    // One episode per project at a time.
    let again = r.post("/episodes", &json!({"task": "another", "tests": ["true"]})).send().await.unwrap();
    assert_eq!(again.status(), 409);
    let seen = events(&r, &id, |_, _| {}).await;
    let notes: Vec<&str> = seen.iter().filter(|(k, _)| k == "note").filter_map(|(_, d)| d["text"].as_str()).collect();
    assert!(notes.contains(&"==> VERIFIER (baseline, before any change)"), "{notes:?}");
    assert!(notes.contains(&"==> CODER (retry 0 of 3)"), "{notes:?}");
    assert!(
        seen.iter().any(|(k, d)| k == "tool_result" || d["run_id"].as_str().is_some_and(|r| r.contains("-coder-0")))
    );
    let (kind, done) = seen.last().unwrap();
    assert_eq!(kind, "episode_done", "{seen:?}");
    assert_eq!(done["outcome"], "solved");
    let calc = std::fs::read_to_string(r.dir.path().join("proj/calc.py")).unwrap();
    assert!(calc.contains("return a + b"), "{calc}");
    let shown: Value = r.get(&format!("/episodes/{id}/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["status"], "archived");
    assert_eq!(shown["live"], false);
    // A late reader gets the whole log again, from the first event.
    let replay = events(&r, &id, |_, _| {}).await;
    assert_eq!(replay.len(), seen.len());
    assert_eq!(r.get("/episodes/nope/status").send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coders_call_waits_for_an_approval_over_http() {
    let llm = FakeServer::start(script()).unwrap();
    let r = serve(&llm, true).await;
    let resp = r.post("/episodes", &json!({"task": "make add add", "tests": ["sh check.sh"]})).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["episode_id"].as_str().unwrap().to_owned();
    // Nothing waits yet, or a decision for no call: refused.
    let early =
        r.post(&format!("/episodes/{id}/approvals"), &json!({"decisions": [{"call_id": "x", "verdict": "approve"}]}));
    assert!(matches!(early.send().await.unwrap().status().as_u16(), 400 | 409));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let follower = {
        let base = r.base.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let r2 = Running { base, dir: tempfile::tempdir().unwrap(), stop: None, client: reqwest::Client::new() };
            events(&r2, &id, |kind, data| {
                if kind == "approval_needed" {
                    let _ = tx.send(data.clone());
                }
            })
            .await
        })
    };
    let asked = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.unwrap().unwrap();
    assert_eq!(asked["pending"][0]["tool"], "edit_file", "{asked}");
    let shown: Value = r.get(&format!("/episodes/{id}/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["pending"]["calls"][0]["call_id"], "fix", "{shown}");
    let ok = r.post(&format!("/episodes/{id}/approvals"), &json!({"approve_all": true})).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let seen = follower.await.unwrap();
    assert!(seen.iter().any(|(k, _)| k == "decided"), "{seen:?}");
    let (kind, done) = seen.last().unwrap();
    assert_eq!((kind.as_str(), &done["outcome"]), ("episode_done", &json!("solved")), "{seen:?}");
    let calc = std::fs::read_to_string(r.dir.path().join("proj/calc.py")).unwrap();
    assert!(calc.contains("return a + b"), "the approved edit ran: {calc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_task_or_tests_is_refused() {
    let llm = FakeServer::start(vec![]).unwrap();
    let r = serve(&llm, false).await;
    for body in [json!({"tests": ["true"]}), json!({"task": "x"}), json!({"task": "x", "tests": ["t"], "what": 1})] {
        let resp = r.post("/episodes", &body).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "E1001", "{v}");
    }
    // Nothing to resume in a fresh project.
    let resp = r.post("/episodes", &json!({"resume": true})).send().await.unwrap();
    assert_eq!(resp.status(), 409);
    // Without a token: refused by the server's rules like every route.
    let anon = reqwest::Client::new().post(format!("{}/episodes", r.base)).json(&json!({})).send().await.unwrap();
    assert_eq!(anon.status(), 401);
    assert!(llm.received().is_empty());
}
