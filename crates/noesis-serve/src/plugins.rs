//! The frame plugins over HTTP (opt-in: `noesis serve --plugins`), on the
//! server's project and store, with the same model rules as `/run`.
//!
//! | route | answer |
//! |---|---|
//! | `GET /plugins` | `{"plugins": [{"name", "body"}…]}`: the plugins served and the fields each takes |
//! | `POST /plugins/docs` | `{path?, out?, status?, provider?, model?}` → SSE: `progress` events (`{"plugin", "item"}`), then `report` (what `noesis docs sync --json` prints; with `"status": true`, what `docs status --json` prints, no model) |
//! | `POST /plugins/review` | `{diff? \| git?, provider?, model?}` → SSE: `progress`, then `report` (what `noesis review --format json` prints) |
//! | `POST /plugins/testgen` | `{paths? \| changed?, out?, provider?, model?}` → SSE: `progress`, then `report` (what `noesis testgen --json` prints) |
//! | `POST /plugins/ask` | `{query, files?, max_tool_calls?, provider?, model?}` → SSE: `progress` (the agent's steps), then `report` (what `noesis ask --json` prints); served when the operator gave the server a model for agents ([`PluginRuns::with_ask`]) |
//!
//! A run that fails as a whole ends its stream with one `error` event
//! (`{"error": {"code", "message"}}`); a unit or file that fails is in the
//! report. Before a stream starts, a request is refused like any other (a
//! failure envelope with its status): an unknown plugin `404` (E4006), a
//! bad body `400` (E1001–E1003), a path outside the project `403` (E4007),
//! a plugin run already going `429` (E4002) — plugin runs share the
//! project's session and write into the project, so they go one at a time.
//!
//! Trust: every route here changes something (frames, files), so each needs
//! the server's credential ([`crate::access`]); paths are project-relative
//! and confined to the project (links followed); the model is the module
//! run through the [`Service`], under the operator's provider and model
//! rules, budget and prices; a git range may not look like an option.
//! Dropping the stream (the client went away) drops the run.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use noesis_frames::CausalFrame;
use noesis_frames::project::Project;
use noesis_modules::{ErrorCode, Failure};
use noesis_plugin::{ContextSlice, Think, Thought};
use noesis_plugins::{Setting, docs, review, testgen};
use noesis_runtime::CancellationToken;
use noesis_store::Store;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::http::{json_response, refusal};
use crate::service::{RunRequest, Service};

/// The plugins that can be served, each with the body fields it takes.
const PLUGINS: [(&str, &[&str]); 4] = [
    ("docs", &["path", "out", "status", "provider", "model"]),
    ("review", &["diff", "git", "provider", "model"]),
    ("testgen", &["paths", "changed", "out", "provider", "model"]),
    ("ask", &["query", "files", "max_tool_calls", "provider", "model"]),
];

/// The model of an ask's agent: the provider a request names (`None`: the
/// operator's default), under the operator's rules; the error is for the
/// client and holds no secret. It may block (a local model loads).
pub type AgentModel =
    Arc<dyn Fn(Option<&str>, Option<&str>) -> Result<Arc<dyn noesis_llm::Provider>, String> + Send + Sync>;

/// What `ask` needs beyond the module runs: where `run_module` finds
/// modules, the agent's model, and the confidence that promotes an answer.
struct Ask {
    search: noesis_modules::search::SearchPath,
    model: AgentModel,
    promote_at: f64,
}

/// Plugin runs on one project: its store, the files no scan reads, where
/// docs go by default, and the service whose modules are the models.
pub struct PluginRuns {
    service: Arc<Service>,
    project: Project,
    store: Arc<dyn Store>,
    exclude: Vec<PathBuf>,
    docs_dir: PathBuf,
    /// `ask`, when the operator lent it a model.
    ask: Option<Ask>,
    /// Held by the run in progress.
    one: Arc<tokio::sync::Mutex<()>>,
    /// Cancelled when the server stops.
    stop: CancellationToken,
}

impl std::fmt::Debug for PluginRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuns").field("project", &self.project.root).finish_non_exhaustive()
    }
}

impl PluginRuns {
    /// Plugin runs on `project` (its `store`, the store's own files in
    /// `exclude`), docs in `docs_dir` (project-relative) unless a request
    /// says otherwise, models run through `service`.
    #[must_use]
    pub fn new(
        service: Arc<Service>,
        project: Project,
        store: Arc<dyn Store>,
        exclude: Vec<PathBuf>,
        docs_dir: PathBuf,
    ) -> PluginRuns {
        PluginRuns {
            service,
            project,
            store,
            exclude,
            docs_dir,
            ask: None,
            one: Arc::new(tokio::sync::Mutex::new(())),
            stop: CancellationToken::new(),
        }
    }

    /// Serves `ask` too: its agent's model from `model`, `run_module`
    /// calls finding modules on `search`, answers promoted to memory from
    /// confidence `promote_at`.
    #[must_use]
    pub fn with_ask(
        mut self,
        search: noesis_modules::search::SearchPath,
        model: AgentModel,
        promote_at: f64,
    ) -> PluginRuns {
        self.ask = Some(Ask { search, model, promote_at });
        self
    }

    /// The plugins this server runs, each with its body's fields.
    fn served(&self) -> impl Iterator<Item = &(&'static str, &'static [&'static str])> {
        PLUGINS.iter().filter(|(name, _)| *name != "ask" || self.ask.is_some())
    }

    /// The routes, for [`crate::http::ServeConfig::plugins`].
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new().route("/plugins", get(list)).route("/plugins/{name}", post(start)).with_state(Arc::clone(self))
    }

    /// Stops the model calls of a run in progress.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

type St = State<Arc<PluginRuns>>;

async fn list(State(runs): St) -> Response {
    let plugins: Vec<Value> = runs.served().map(|(name, body)| json!({"name": name, "body": body})).collect();
    json_response(StatusCode::OK, &json!({"plugins": plugins}))
}

/// A module run through the service as the model of a step: the reply a
/// plugin reads is `{"input": …, "output": data}` (as `ModuleThink` gives).
struct ServiceThink {
    service: Arc<Service>,
    module: &'static str,
    provider: Option<String>,
    model: Option<String>,
    cancel: CancellationToken,
    /// The job's one meter: every step's run reserves against it.
    meter: Option<Arc<noesis_llm::BudgetMeter>>,
}

#[async_trait]
impl Think for ServiceThink {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        let request = RunRequest {
            module: self.module.to_owned(),
            input: Some(slice.input.clone()),
            args: None,
            provider: self.provider.clone(),
            model: self.model.clone(),
        };
        let envelope = self.service.run_on(request, self.meter.clone(), Some(self.cancel.child_token())).await;
        if envelope["ok"] != json!(true) {
            return Err(format!(
                "{}: {} {}",
                self.module,
                envelope["error"]["code"].as_str().unwrap_or("E4000"),
                envelope["error"]["message"].as_str().unwrap_or_default()
            ));
        }
        Ok(Thought { raw: json!({"input": slice.input, "output": envelope["data"]}), ..Thought::default() })
    }
}

/// A refusal before the stream starts.
type Refused = Box<Response>;

fn bad(code: ErrorCode, message: String) -> Refused {
    Box::new(refusal(StatusCode::BAD_REQUEST, Failure::new(code, message)))
}

/// The body: a JSON object with only `fields`.
fn body(raw: Result<Bytes, BytesRejection>, fields: &[&str]) -> Result<Map<String, Value>, Refused> {
    let bytes = raw.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Box::new(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                Failure::new(ErrorCode::E1005, "the request body is over the server's limit"),
            ))
        } else {
            bad(ErrorCode::E1001, format!("cannot read the request body: {}", rejection.body_text()))
        }
    })?;
    // No body at all is an empty request.
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let Value::Object(body) = serde_json::from_slice(&bytes)
        .map_err(|e| bad(ErrorCode::E1001, format!("the request body is not JSON: {e}")))?
    else {
        return Err(bad(ErrorCode::E1001, "the request body must be a JSON object".into()));
    };
    if let Some(unknown) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(bad(
            ErrorCode::E1001,
            format!("unknown field `{unknown}` in the request body (fields: {})", fields.join(", ")),
        ));
    }
    Ok(body)
}

fn text(body: &Map<String, Value>, field: &str) -> Result<Option<String>, Refused> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(ErrorCode::E1003, format!("`{field}` must be a string"))),
    }
}

fn flag(body: &Map<String, Value>, field: &str) -> Result<bool, Refused> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(ErrorCode::E1003, format!("`{field}` must be true or false"))),
    }
}

fn outside(field: &str, path: &str) -> Refused {
    Box::new(refusal(
        StatusCode::FORBIDDEN,
        Failure::new(ErrorCode::E4007, format!("`{field}`: `{path}` is not a path inside the project"))
            .suggest("give a path relative to the project's root, without `..`"),
    ))
}

/// Whether `rel` is a plain relative path (no root, no `..`).
fn plain(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && !p.is_absolute() && p.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// An existing file or folder `rel` names in the project, links followed.
fn existing(root: &Path, field: &str, rel: &str) -> Result<PathBuf, Refused> {
    if !plain(rel) {
        return Err(outside(field, rel));
    }
    let Ok(root_real) = root.canonicalize() else { return Err(outside(field, rel)) };
    match root.join(rel).canonicalize() {
        Ok(real) if real.starts_with(&root_real) => Ok(real),
        Ok(_) => Err(outside(field, rel)),
        Err(_) => Err(bad(ErrorCode::E1001, format!("`{field}`: `{rel}` does not exist in the project"))),
    }
}

/// A folder `rel` names in the project, which may not exist yet: its
/// deepest existing ancestor, links followed, must be in the project.
fn folder(root: &Path, field: &str, rel: &str) -> Result<PathBuf, Refused> {
    if !plain(rel) {
        return Err(outside(field, rel));
    }
    let Ok(root_real) = root.canonicalize() else { return Err(outside(field, rel)) };
    let wanted = root.join(rel);
    let mut at = wanted.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            if !real.starts_with(&root_real) {
                return Err(outside(field, rel));
            }
            let rest = wanted.strip_prefix(at).unwrap_or(Path::new(""));
            return Ok(real.join(rest));
        }
        match at.parent() {
            Some(p) => at = p,
            None => return Err(outside(field, rel)),
        }
    }
}

/// What a request asks for, checked.
enum Job {
    DocsSync { scope: Option<PathBuf>, out: PathBuf },
    DocsStatus { scope: Option<PathBuf>, out: PathBuf },
    Review { diff: Option<String>, git: Option<String> },
    Testgen { targets: testgen::Targets, out: PathBuf },
    Ask(noesis_plugins::ask::Question),
}

fn job(runs: &PluginRuns, name: &str, body: &Map<String, Value>) -> Result<Job, Refused> {
    let root = &runs.project.root;
    let out = |default: &Path| -> Result<PathBuf, Refused> {
        match text(body, "out")? {
            Some(o) => folder(root, "out", &o),
            None => Ok(root.join(default)),
        }
    };
    Ok(match name {
        "docs" => {
            let scope = text(body, "path")?.map(|p| existing(root, "path", &p)).transpose()?;
            if let Some(s) = &scope
                && !s.is_dir()
            {
                return Err(bad(
                    ErrorCode::E1001,
                    "`path` must be a folder (docs are kept per folder of source)".into(),
                ));
            }
            let out = out(&runs.docs_dir)?;
            if flag(body, "status")? { Job::DocsStatus { scope, out } } else { Job::DocsSync { scope, out } }
        }
        "review" => {
            let (diff, git) = (text(body, "diff")?, text(body, "git")?);
            if diff.is_some() && git.is_some() {
                return Err(bad(ErrorCode::E1001, "give `diff` or `git`, not both".into()));
            }
            // A range is an argument of git: never an option.
            if let Some(range) = git.as_deref().filter(|r| r.is_empty() || r.starts_with('-')) {
                return Err(bad(ErrorCode::E1001, format!("`git`: `{range}` is not a git range (such as main..HEAD)")));
            }
            Job::Review { diff, git }
        }
        "ask" => {
            let query = text(body, "query")?.unwrap_or_default();
            if query.trim().is_empty() {
                return Err(bad(ErrorCode::E1002, "`query` is empty: ask a question".into()));
            }
            let files: Vec<String> = match body.get("files") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| match v.as_str() {
                        // Read by the agent's `read_file`, which is confined
                        // to the project too; refused here to say so early.
                        Some(p) if plain(p) => Ok(p.to_owned()),
                        Some(p) => Err(outside("files", p)),
                        None => Err(bad(ErrorCode::E1003, "`files` must be a list of strings".into())),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(bad(ErrorCode::E1003, "`files` must be a list of strings".into())),
            };
            let max_tool_calls = match body.get("max_tool_calls") {
                None | Some(Value::Null) => 12,
                Some(v) => {
                    v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| (1..=100).contains(n)).ok_or_else(
                        || bad(ErrorCode::E1003, "`max_tool_calls` must be a whole number from 1 to 100".into()),
                    )?
                }
            };
            let promote_at = runs.ask.as_ref().map_or(0.8, |a| a.promote_at);
            Job::Ask(noesis_plugins::ask::Question { query, files, max_tool_calls, promote_at })
        }
        _ => {
            let changed = flag(body, "changed")?;
            let paths: Vec<PathBuf> = match body.get("paths") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| match v.as_str() {
                        Some(p) => existing(root, "paths", p),
                        None => Err(bad(ErrorCode::E1003, "`paths` must be a list of strings".into())),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(bad(ErrorCode::E1003, "`paths` must be a list of strings".into())),
            };
            let targets = match (changed, paths.is_empty()) {
                (true, true) => testgen::Targets::Changed,
                (false, false) => testgen::Targets::Paths(paths),
                (true, false) => return Err(bad(ErrorCode::E1001, "give `paths` or `changed`, not both".into())),
                (false, true) => {
                    return Err(bad(
                        ErrorCode::E1002,
                        "name the files to write tests for (`paths`), or `changed`".into(),
                    ));
                }
            };
            Job::Testgen { targets, out: out(Path::new("tests/noesis"))? }
        }
    })
}

async fn start(State(runs): St, UrlPath(name): UrlPath<String>, raw: Result<Bytes, BytesRejection>) -> Response {
    let Some((_, fields)) = runs.served().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = runs.served().map(|(n, _)| *n).collect();
        return refusal(
            StatusCode::NOT_FOUND,
            Failure::new(
                ErrorCode::E4006,
                format!("no plugin `{}` on this server", name.chars().take(100).collect::<String>()),
            )
            .suggest(format!("the plugins served: {} (GET /plugins)", known.join(", "))),
        );
    };
    let checked = body(raw, fields).and_then(|b| {
        let job = job(&runs, &name, &b)?;
        Ok((job, text(&b, "provider")?, text(&b, "model")?))
    });
    let (job, provider, model) = match checked {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let Ok(guard) = Arc::clone(&runs.one).try_lock_owned() else {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            Failure::new(ErrorCode::E4002, "a plugin run is going on this project; plugin runs go one at a time")
                .suggest("retry when it has finished"),
        );
    };
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let plugin: &'static str = runs.served().find(|(n, _)| *n == name).map_or("docs", |(n, _)| *n);
    let run: RunFuture = Box::pin(async move {
        let _one = guard;
        // The agent of an ask reports from its own calls, which must own
        // what they send on.
        let ask_tx = tx.clone();
        let ask_progress: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(move |item: &str| {
            let _ = ask_tx.send(item.to_owned());
        });
        let progress = move |item: &str| {
            let _ = tx.send(item.to_owned());
        };
        match perform(&runs, job, provider, model, &progress, ask_progress).await {
            Ok(report) => Event::default().event("report").data(report.to_string()),
            Err(e) => Event::default()
                .event("error")
                .data(json!({"error": {"code": "E4000", "message": e.to_string()}}).to_string()),
        }
    });
    Sse::new(events(plugin, run, rx)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// Runs the job; its report as JSON.
async fn perform(
    runs: &PluginRuns,
    job: Job,
    provider: Option<String>,
    model_name: Option<String>,
    progress: &(dyn Fn(&str) + Sync),
    ask_progress: Arc<dyn Fn(&str) + Send + Sync>,
) -> Result<Value, noesis_plugins::Error> {
    let setting = Setting { project: &runs.project, store: runs.store.as_ref(), exclude: &runs.exclude };
    // One meter for the whole job, as the command line has one per command.
    let meter = runs.service.job_meter();
    let think = |module: &'static str| ServiceThink {
        service: Arc::clone(&runs.service),
        module,
        provider: provider.clone(),
        model: model_name.clone(),
        cancel: runs.stop.child_token(),
        meter: meter.clone(),
    };
    Ok(match job {
        Job::DocsSync { scope, out } => {
            let report = docs::sync_in(&setting, &think("docs-node"), scope.as_deref(), &out, progress).await?;
            let mut v = json!({"out": out});
            if let (Some(o), Value::Object(r)) = (v.as_object_mut(), report.to_json()) {
                o.extend(r);
            }
            v
        }
        Job::DocsStatus { scope, out } => docs::status_in(&setting, scope.as_deref(), &out).await?.to_json(),
        Job::Review { diff, git } => {
            let diff = match diff {
                Some(d) => d,
                None => review::git_diff(&runs.project.root, git.as_deref())?,
            };
            review::review_in(&setting, &think("review-diff"), &diff, progress).await?.to_json()
        }
        Job::Testgen { targets, out } => {
            let report = testgen::generate_in(&setting, &think("testgen-spec"), &targets, &out, progress).await?;
            serde_json::to_value(&report).unwrap_or(Value::Null)
        }
        Job::Ask(question) => {
            let Some(ask) = &runs.ask else { return Err(noesis_plugins::Error::Invalid("ask is not served".into())) };
            let model = Arc::clone(&ask.model);
            let chosen = tokio::task::spawn_blocking(move || model(provider.as_deref(), model_name.as_deref()))
                .await
                .map_err(|e| noesis_plugins::Error::Invalid(format!("the model could not be set up: {e}")))?;
            let provider = chosen.map_err(noesis_plugins::Error::Invalid)?;
            let host = noesis_plugins::ask::StoreHost {
                search: ask.search.clone(),
                provider: Arc::clone(&provider),
                store: Arc::clone(&runs.store),
                project_id: runs.project.project_id.clone(),
                redactor: Arc::new(noesis_sandbox::Redactor::from_env(&[], &[])),
                observe: Some(Box::new(move |run_id: &str, p: &noesis_agent::Progress| {
                    let e = noesis_agent::events::progress_event("plugins.ask", run_id, p);
                    let tool = e.data["tool"].as_str().map(|t| format!(" {t}")).unwrap_or_default();
                    ask_progress(&format!("{}{tool}", e.kind));
                })),
                budget: meter.clone(),
                prices: runs.service.prices(),
            };
            noesis_plugins::ask::ask(&setting, &question, provider, &host).await?.to_json()
        }
    })
}

type RunFuture = Pin<Box<dyn Future<Output = Event> + Send>>;

struct Streaming {
    run: Option<RunFuture>,
    progress: mpsc::UnboundedReceiver<String>,
    last: Option<Event>,
}

/// `progress` events as the plugin goes, then its last event. The run
/// lives inside the stream, so dropping the response drops the run.
fn events(
    plugin: &'static str,
    run: RunFuture,
    progress: mpsc::UnboundedReceiver<String>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let progress_event =
        move |item: &str| Event::default().event("progress").data(json!({"plugin": plugin, "item": item}).to_string());
    let state = Streaming { run: Some(run), progress, last: None };
    futures_util::stream::unfold(state, move |mut st| async move {
        if let Some(run) = st.run.as_mut() {
            tokio::select! {
                biased;
                Some(item) = st.progress.recv() => return Some((Ok(progress_event(&item)), st)),
                last = run => {
                    // The finished run drops its sender: the receiver ends
                    // after the last item.
                    st.run = None;
                    st.last = Some(last);
                }
            }
        }
        if let Some(item) = st.progress.recv().await {
            return Some((Ok(progress_event(&item)), st));
        }
        st.last.take().map(|last| (Ok(last), st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_in_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        assert!(existing(root, "path", "src").is_ok());
        assert!(existing(root, "path", "../etc").is_err());
        assert!(existing(root, "path", "/etc").is_err());
        assert!(existing(root, "path", "").is_err());
        let made = folder(root, "out", "docs/new").unwrap();
        assert!(made.ends_with("docs/new") && made.starts_with(root.canonicalize().unwrap()));
        assert!(folder(root, "out", "docs/../../x").is_err());
        #[cfg(unix)]
        {
            let elsewhere = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink(elsewhere.path(), root.join("link")).unwrap();
            assert!(existing(root, "path", "link").is_err(), "a link out of the project is outside");
            assert!(folder(root, "out", "link/docs").is_err(), "a folder under a link out is outside");
        }
    }
}
