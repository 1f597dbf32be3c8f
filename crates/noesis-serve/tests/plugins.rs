//! The frame plugins over real HTTP: reqwest to a server on 127.0.0.1:0
//! with `/plugins` on, its modules answered by a fake LLM server; the
//! project a temporary folder, the store a SQLite file beside it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use noesis_llm::{EndpointConfig, OpenAiCompatible, Provider, RetryPolicy};
use noesis_modules::Module;
use noesis_modules::search::SearchPath;
use noesis_serve::http::{ServeConfig, Server};
use noesis_serve::plugins::PluginRuns;
use noesis_serve::{ProviderSource, Service, SourceError};
use noesis_testkit::{FakeServer, Reply, said};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const TOKEN: &str = "plugin-test-token";

/// OpenAI-compatible providers at the fake's URL.
struct Fake {
    base_url: String,
}

impl ProviderSource for Fake {
    fn provider(&self, name: Option<&str>, model: Option<&str>, _: &Module) -> Result<Arc<dyn Provider>, SourceError> {
        if let Some(n) = name.filter(|n| *n != "openai") {
            return Err(SourceError::NotAllowed(format!("`{n}` is not allowed on this server")));
        }
        let mut cfg = EndpointConfig::openai(model.unwrap_or("gpt-4o-mini"));
        cfg.base_url.clone_from(&self.base_url);
        cfg.api_key = Some("sk-test".into());
        cfg.http.retry = RetryPolicy::none();
        cfg.http.timeout = Duration::from_secs(3600);
        Ok(Arc::new(OpenAiCompatible::new(cfg).map_err(|e| SourceError::Unavailable(e.to_string()))?))
    }
}

struct Running {
    url: String,
    project: tempfile::TempDir,
    _store: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A server with `/plugins` on over a project of three units of source.
async fn start(llm: &FakeServer) -> Running {
    start_with(llm, None).await
}

/// [`start`] with the operator's run settings.
async fn start_with(llm: &FakeServer, settings: Option<noesis_serve::service::RunSettings>) -> Running {
    let project = tempfile::tempdir().unwrap();
    let root = project.path();
    write(root, ".git/HEAD", "ref: refs/heads/main\n");
    write(root, "calc/add.py", "def add(a: int, b: int) -> int:\n    return a + b\n");
    write(root, "calc/mul.py", "import math\n\ndef mul(a, b):\n    return a * b\n");
    write(root, "text/fmt.py", "def shout(s: str) -> str:\n    return s.upper()\n");
    write(root, "lib/src/lib.rs", "pub fn half(x: u32) -> u32 {\n    x / 2\n}\n");
    let store_dir = tempfile::tempdir().unwrap();
    let db = store_dir.path().join("noesis.db");
    let store = noesis_store::open(&db.to_string_lossy()).await.unwrap();
    let found = noesis_frames::project::identify(root).unwrap();
    store.ensure_project(&found.project_id, &found.root.to_string_lossy()).await.unwrap();
    let mut service = Service::new(SearchPath::default(), Arc::new(Fake { base_url: llm.base_url() }));
    if let Some(s) = settings {
        service = service.with_settings(s);
    }
    let service = Arc::new(service);
    let runs = Arc::new(PluginRuns::new(Arc::clone(&service), found, Arc::from(store), vec![db], "docs/noesis".into()));
    let config = ServeConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: Some(TOKEN.into()),
        plugins: Some(runs.router()),
        ..ServeConfig::default()
    };
    let server = Server::bind(service, config).await.unwrap();
    let url = format!("http://{}", server.local_addr());
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Running { url, project, _store: store_dir, stop: Some(tx) }
}

fn client() -> reqwest::Client {
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(reqwest::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
    reqwest::Client::builder().default_headers(auth).build().unwrap()
}

/// The first JSON string value after `"key": ` in `text`.
fn field(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))?;
    let rest = &text[at + key.len() + 2..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

/// The fake model's answer for a docs node: a v2.2 envelope naming the unit.
fn docs_llm(latency: Duration) -> FakeServer {
    let reply = Reply::respond(|req| {
        let unit = field(&said(req), "unit").unwrap_or_default();
        Reply::Chat(
            json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"},
                   "data": {"purpose": format!("The {unit} unit."), "api_notes": [], "rationale": "scripted"}})
            .to_string(),
        )
    });
    FakeServer::start_with(vec![reply], 0, latency).unwrap()
}

/// The events of an SSE body: (event, data as JSON).
async fn events(resp: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            }
        }
        if let Some(e) = event {
            out.push((e, serde_json::from_str(&data).unwrap_or_else(|err| panic!("{err}: {data}"))));
        }
    }
    out
}

async fn refused(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["ok"], false, "{body}");
    (status, body["error"]["code"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn docs_sync_streams_progress_then_its_report_and_remakes_nothing_twice() {
    let llm = docs_llm(Duration::ZERO);
    let s = start(&llm).await;
    let got = events(client().post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap()).await;
    let (last, report) = got.last().unwrap();
    assert_eq!(last, "report", "{got:?}");
    let progress: Vec<&Value> = got.iter().filter(|(e, _)| e == "progress").map(|(_, d)| &d["item"]).collect();
    assert_eq!(progress, [&json!("calc"), &json!("lib/src"), &json!("text")], "{got:?}");
    assert!(got.iter().all(|(e, d)| e != "progress" || d["plugin"] == "docs"), "{got:?}");
    assert_eq!(report["regenerated"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(report["failed"], json!([]), "{report}");
    assert_eq!(llm.received().len(), 3, "one model call per unit");
    let calc = std::fs::read_to_string(s.project.path().join("docs/noesis/calc.yaml")).unwrap();
    assert!(calc.contains("purpose: \"The calc unit.\""), "{calc}");

    // Nothing changed: no model call; status (no model) agrees.
    let again = events(client().post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap()).await;
    assert_eq!(again.len(), 1, "no progress when nothing is remade: {again:?}");
    assert_eq!(again[0].1["kept"].as_array().unwrap().len(), 3, "{again:?}");
    assert_eq!(llm.received().len(), 3);
    std::fs::write(s.project.path().join("calc/mul.py"), "def mul(a, b):\n    return b * a\n").unwrap();
    let status =
        events(client().post(s.url("/plugins/docs")).json(&json!({"status": true})).send().await.unwrap()).await;
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0].0, "report");
    assert_eq!(status[0].1["units"], 3);
    assert_eq!(status[0].1["stale"][0]["unit"], "calc", "{status:?}");
    assert_eq!(llm.received().len(), 3, "status asks no model");

    // Scoped to one folder, into another docs folder inside the project.
    let scoped = events(
        client().post(s.url("/plugins/docs")).json(&json!({"path": "text", "out": "site/docs"})).send().await.unwrap(),
    )
    .await;
    assert_eq!(scoped.last().unwrap().1["regenerated"][0]["unit"], "text", "{scoped:?}");
    assert!(s.project.path().join("site/docs/text.yaml").is_file());
}

#[tokio::test]
async fn plugin_runs_need_a_credential_and_paths_inside_the_project() {
    let llm = docs_llm(Duration::ZERO);
    let s = start(&llm).await;
    let bare = reqwest::Client::new();
    // Every plugin run changes something: no credential, no run.
    let (status, code) = refused(bare.post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "E4007"));
    let list: Value = client().get(s.url("/plugins")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = list["plugins"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["docs", "review", "testgen"]);
    for (route, body, want) in [
        ("/plugins/docs", json!({"path": "../"}), (403, "E4007")),
        ("/plugins/docs", json!({"out": "/tmp/elsewhere"}), (403, "E4007")),
        ("/plugins/docs", json!({"out": "docs/../../x"}), (403, "E4007")),
        ("/plugins/testgen", json!({"paths": ["/etc/passwd"]}), (403, "E4007")),
        ("/plugins/docs", json!({"path": "nope"}), (400, "E1001")),
        ("/plugins/docs", json!({"path": "calc/add.py"}), (400, "E1001")),
        ("/plugins/docs", json!({"where": "x"}), (400, "E1001")),
        ("/plugins/docs", json!({"status": "yes"}), (400, "E1003")),
        ("/plugins/review", json!({"git": "--output=/tmp/x"}), (400, "E1001")),
        ("/plugins/review", json!({"git": "HEAD", "diff": ""}), (400, "E1001")),
        ("/plugins/testgen", json!({}), (400, "E1002")),
        ("/plugins/testgen", json!({"paths": ["calc"], "changed": true}), (400, "E1001")),
        ("/plugins/ask", json!({}), (404, "E4006")),
    ] {
        let (status, code) = refused(client().post(s.url(route)).json(&body).send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), want, "{route} {body}");
    }
    #[cfg(unix)]
    {
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), s.project.path().join("out-link")).unwrap();
        let (status, code) =
            refused(client().post(s.url("/plugins/docs")).json(&json!({"out": "out-link/docs"})).send().await.unwrap())
                .await;
        assert_eq!((status, code.as_str()), (403, "E4007"), "a link out of the project is outside");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
    assert_eq!(llm.received().len(), 0, "no refused request reached the model");
}

#[tokio::test]
async fn a_second_plugin_run_is_refused_while_one_goes() {
    // Slow answers keep the first run going while the second asks.
    let llm = docs_llm(Duration::from_millis(500));
    let s = start(&llm).await;
    let first = client().post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let (status, code) = refused(client().post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (429, "E4002"));
    let got = events(first).await;
    assert_eq!(got.last().unwrap().0, "report", "{got:?}");
    // Once it has finished, the next one runs.
    let next = events(client().post(s.url("/plugins/docs")).json(&json!({"status": true})).send().await.unwrap()).await;
    assert_eq!(next.last().unwrap().0, "report", "{next:?}");
}

#[tokio::test]
async fn a_review_that_fails_as_a_whole_ends_in_an_error_event() {
    let llm = docs_llm(Duration::ZERO);
    let s = start(&llm).await;
    // Not a unified diff: the run starts, and says why it failed.
    let got =
        events(client().post(s.url("/plugins/review")).json(&json!({"diff": "@@ nonsense"})).send().await.unwrap())
            .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "error");
    assert!(got[0].1["error"]["message"].as_str().unwrap().contains("diff"), "{got:?}");
}

#[tokio::test]
async fn a_plugin_job_shares_one_meter_of_the_operators_limits() {
    // Each reply reports 3,000 tokens; the operator allows 3,050 per job:
    // the first unit's call fits, the other two are refused before they go.
    let reply = Reply::respond(|_| {
        let text = json!({"ok": true, "meta": {"confidence": 0.8, "risk": "low", "explain": "scripted"},
                          "data": {"purpose": "A unit.", "api_notes": [], "rationale": "scripted"}});
        let mut body = noesis_testkit::chat_completion(&text.to_string(), "stop");
        body["usage"] = json!({"prompt_tokens": 3000, "completion_tokens": 0, "total_tokens": 3000});
        Reply::Status(200, body.to_string(), vec![])
    });
    let llm = FakeServer::start(vec![reply]).unwrap();
    let settings = noesis_serve::service::RunSettings {
        budget: Some(noesis_llm::Budget { max_tokens: Some(3050), max_cost_usd: None }),
        ..noesis_serve::service::RunSettings::default()
    };
    let s = start_with(&llm, Some(settings)).await;
    let got = events(client().post(s.url("/plugins/docs")).json(&json!({})).send().await.unwrap()).await;
    let (last, report) = got.last().unwrap();
    assert_eq!(last, "report", "{got:?}");
    assert_eq!(llm.received().len(), 1, "{report}");
    let failed = report["failed"].as_array().unwrap();
    assert_eq!((report["regenerated"].as_array().unwrap().len(), failed.len()), (1, 2), "{report}");
    assert!(failed.iter().all(|f| f.to_string().contains("token budget exceeded")), "{report}");
}
