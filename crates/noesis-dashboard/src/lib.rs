//! The dashboard: pages over the frame store, rendered on the server.
//!
//! `/` lists the project's sessions; `/sessions/{id}` shows what a session
//! saw, what changed since the previous one, what it invalidated and its
//! frame tree; `/frames?text=&file=&status=` searches frames; `/frames/{id}`
//! shows one frame in full (evidence with whether each file changed since,
//! its invalidation condition, its history and what hangs below it);
//! `/runs` lists the agent runs and `/runs/{id}` shows one as a timeline
//! (turns, calls with arguments, status, result and time, what waits for a
//! decision and the commands that decide it, usage, the outcome);
//! `/episodes` lists the workflow episodes and `/episodes/{id}` shows one
//! (node timeline, tests per case with the anchors, reverted changes and
//! why, critiques, retries left, escalation).
//!
//! Invariants: every text from the store is escaped ([`html::esc`]); pages
//! carry no inline script or style and every response a
//! Content-Security-Policy that forbids them ([`CSP`]); the assets are our
//! own two files, compiled in — nothing is fetched from elsewhere, and no
//! JavaScript toolchain is involved. Authentication is the embedding
//! server's business (`noesis serve` puts its token check in front).
#![deny(missing_docs)]

pub mod form;
pub mod html;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use noesis_frames::Status;
use noesis_store::{FrameFilter, Store};

/// The policy on every dashboard response: our own script and stylesheet
/// only, no inline code, no framing, forms post only to us.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Most frames a search lists.
pub const SEARCH_LIMIT: u32 = 200;

/// What the pages read: a store and the project shown, and the modules
/// when the server can run them.
pub struct Dashboard {
    /// The frame store.
    pub store: Arc<dyn Store>,
    /// The project whose sessions and frames are shown.
    pub project_id: String,
    /// The modules page and its forms; `None`: no modules page.
    pub modules: Option<Arc<dyn Modules>>,
    /// The server's live agent runs: their pages follow them and decide,
    /// cancel and resume from the page. `None`: runs are shown as stored.
    pub agents: Option<Arc<noesis_agent::supervisor::AgentRuns>>,
    /// The server's live `solve` episodes: their pages follow them and
    /// decide CODER's waiting calls. `None`: episodes are shown as stored.
    pub episodes: Option<Arc<noesis_workflow::served::Episodes>>,
}

/// The modules the embedding server serves, as JSON (the server's own
/// `list`/`info`/`run`, so the pages show what the API shows).
pub trait Modules: Send + Sync {
    /// One row per module (`name`, `version`, `tier`, `responsibility`,
    /// `valid`, `error`).
    fn list(&self) -> Vec<serde_json::Value>;
    /// One module's summary with `input_schema` and `data_schema`, or a
    /// failure envelope.
    fn info(&self, name: &str) -> Result<serde_json::Value, serde_json::Value>;
    /// Runs the module on `input`; the envelope.
    fn run(&self, name: &str, input: serde_json::Value) -> ModuleRun;
}

/// A module run in progress.
pub type ModuleRun = std::pin::Pin<Box<dyn std::future::Future<Output = serde_json::Value> + Send>>;

type St = State<Arc<Dashboard>>;

/// The dashboard's routes, to merge into a server (behind its auth).
pub fn router(dashboard: Dashboard) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/sessions/{id}", get(session))
        .route("/frames", get(search))
        .route("/frames/{id}", get(frame))
        .route("/frames/{id}/resume", axum::routing::post(resume))
        .route("/catalog", get(modules))
        .route("/catalog/{name}", get(module).post(run_module))
        .route("/runs", get(runs))
        .route("/runs/{id}", get(run))
        .route("/runs/{id}/decide", axum::routing::post(decide))
        .route("/runs/{id}/cancel", axum::routing::post(cancel_run))
        .route("/runs/{id}/resume", axum::routing::post(resume_run))
        .route("/episodes", get(episodes))
        .route("/usage", get(usage))
        .route("/episodes/{id}", get(episode))
        .route("/episodes/{id}/decide", axum::routing::post(decide_episode))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        // Browsers ask for it on every page; nothing to show, nothing to log.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .layer(middleware::map_response(secure))
        .with_state(Arc::new(dashboard))
}

async fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it Chromium sends `Origin: null` with the
    // page's own form posts, which the server must refuse as cross-site.
    // `same-origin` still tells other sites nothing.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn html_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"))], body).into_response()
}

fn failed(e: &dyn std::fmt::Display) -> Response {
    html_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        html::page("Error", &format!("<h1>The store could not be read</h1><p>{}</p>", html::esc(&e.to_string()))),
    )
}

async fn index(State(d): St) -> Response {
    let rendered = async {
        let sessions = d.store.sessions(&d.project_id, 200).await?;
        // Imported transcripts and solve episodes: sessions too, listed
        // apart (they are no scan, so no "changed since").
        let mut others = Vec::new();
        for (id, kind) in d.store.session_kinds(&d.project_id).await? {
            if kind == noesis_store::SessionKind::Working || others.len() == 200 {
                continue;
            }
            if let Some(s) = d.store.session(&id).await? {
                others.push((kind.as_str(), s));
            }
        }
        Ok::<_, noesis_store::StoreError>(html::sessions_page(&d.project_id, &sessions, &others))
    };
    match rendered.await {
        Ok(page) => html_response(StatusCode::OK, page),
        Err(e) => failed(&e),
    }
}

async fn session(State(d): St, Path(id): Path<String>) -> Response {
    let rendered = async {
        let Some(session) = d.store.session(&id).await? else { return Ok(None) };
        let all = d.store.sessions(&d.project_id, u32::MAX).await?;
        // Newest first: the previous session is the next older one.
        let previous = all
            .iter()
            .filter(|s| s.session_id != session.session_id && s.created_at <= session.created_at)
            .max_by_key(|s| s.created_at);
        let invalidated = d.store.invalidated_in_session(&id).await?;
        let tree = match &session.root_frame_id {
            Some(root) => d.store.frames(&FrameFilter { under: Some(root.clone()), ..FrameFilter::default() }).await?,
            None => Vec::new(),
        };
        Ok::<_, noesis_store::StoreError>(Some(html::session_page(&session, previous, &invalidated, &tree)))
    };
    match rendered.await {
        Ok(Some(page)) => html_response(StatusCode::OK, page),
        Ok(None) => html_response(StatusCode::NOT_FOUND, html::not_found(&format!("no session {id}"))),
        Err(e) => failed(&e),
    }
}

async fn search(State(d): St, uri: Uri) -> Response {
    let params: BTreeMap<String, String> =
        form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect();
    let get = |k: &str| params.get(k).map(String::as_str).unwrap_or_default().trim().to_owned();
    let (text, file, status) = (get("text"), get("file"), get("status"));
    let parsed = if status.is_empty() { None } else { status.parse::<Status>().ok() };
    if !status.is_empty() && parsed.is_none() {
        return html_response(StatusCode::BAD_REQUEST, html::not_found(&format!("no status `{status}`")));
    }
    let filter = FrameFilter {
        project_id: Some(d.project_id.clone()),
        status: parsed,
        text: (!text.is_empty()).then(|| text.clone()),
        file: (!file.is_empty()).then(|| file.clone()),
        limit: Some(SEARCH_LIMIT),
        ..FrameFilter::default()
    };
    match d.store.frames(&filter).await {
        Ok(frames) => {
            html_response(StatusCode::OK, html::search_page(&text, &file, &status, &frames, SEARCH_LIMIT as usize))
        }
        Err(e) => failed(&e),
    }
}

async fn frame(State(d): St, Path(id): Path<String>) -> Response {
    let rendered = async {
        let Ok(found) = d.store.resolve(Some(&d.project_id), &id).await else { return Ok(None) };
        let Some(frame) = d.store.frame(&found).await? else { return Ok(None) };
        let subtree: Vec<_> = d
            .store
            .frames(&FrameFilter { under: Some(found.clone()), ..FrameFilter::default() })
            .await?
            .into_iter()
            .filter(|f| f.frame_id != found)
            .collect();
        let current: BTreeMap<String, String> = d
            .store
            .sessions(&d.project_id, 1)
            .await?
            .into_iter()
            .next()
            .map(|s| s.files.into_iter().map(|(p, f)| (p, f.hash)).collect())
            .unwrap_or_default();
        Ok::<_, noesis_store::StoreError>(Some(html::frame_page(&frame, &subtree, &current)))
    };
    match rendered.await {
        Ok(Some(page)) => html_response(StatusCode::OK, page),
        Ok(None) => html_response(StatusCode::NOT_FOUND, html::not_found(&format!("no frame {id} in this project"))),
        Err(e) => failed(&e),
    }
}

/// `POST /frames/{id}/resume`: a suspended frame becomes active again
/// (recorded in its history), then back to its page.
async fn resume(State(d): St, Path(id): Path<String>) -> Response {
    let done = async {
        let Ok(found) = d.store.resolve(Some(&d.project_id), &id).await else {
            return Ok(Err("no such frame".to_owned()));
        };
        let Some(frame) = d.store.frame(&found).await? else { return Ok(Err("no such frame".to_owned())) };
        if frame.status != Status::Suspended {
            return Ok(Err(format!("frame {} is {}; only a suspended frame can resume", frame.frame_id, frame.status)));
        }
        let change =
            noesis_frames::transition(&frame, Status::Active, Some("resumed"), None, noesis_frames::Timestamp::now())
                .map_err(|e| noesis_store::StoreError::Corrupt(e.to_string()))?;
        d.store.apply(&noesis_frames::Changeset { frames: Vec::new(), statuses: vec![change] }).await?;
        Ok::<_, noesis_store::StoreError>(Ok(frame.frame_id.to_string()))
    };
    match done.await {
        Ok(Ok(id)) => {
            let mut resp = StatusCode::SEE_OTHER.into_response();
            if let Ok(to) = HeaderValue::from_str(&format!("/frames/{}", html::enc(&id))) {
                resp.headers_mut().insert(header::LOCATION, to);
            }
            resp
        }
        Ok(Err(why)) => html_response(StatusCode::CONFLICT, html::not_found(&why)),
        Err(e) => failed(&e),
    }
}

async fn modules(State(d): St) -> Response {
    match &d.modules {
        Some(m) => html_response(StatusCode::OK, html::modules_page(&m.list())),
        None => html_response(StatusCode::NOT_FOUND, html::not_found("this server shows no modules")),
    }
}

/// The module and its info, or the page that says why not.
fn module_info(d: &Dashboard, name: &str) -> Result<(Arc<dyn Modules>, serde_json::Value), Box<Response>> {
    let Some(m) = &d.modules else {
        return Err(Box::new(html_response(StatusCode::NOT_FOUND, html::not_found("this server shows no modules"))));
    };
    match m.info(name) {
        Ok(info) => Ok((Arc::clone(m), info)),
        Err(env) => Err(Box::new(html_response(
            StatusCode::NOT_FOUND,
            html::not_found(env["error"]["message"].as_str().unwrap_or("no such module")),
        ))),
    }
}

async fn module(State(d): St, Path(name): Path<String>) -> Response {
    match module_info(&d, &name) {
        Ok((_, info)) => html_response(StatusCode::OK, html::module_page(&info, &serde_json::Map::new(), None, None)),
        Err(r) => *r,
    }
}

/// `POST /catalog/{name}`: the form's fields as the module's input, run,
/// the envelope shown above the form (filled as it was sent).
async fn run_module(State(d): St, Path(name): Path<String>, body: axum::body::Bytes) -> Response {
    let (m, info) = match module_info(&d, &name) {
        Ok(found) => found,
        Err(r) => return *r,
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let values: serde_json::Map<String, serde_json::Value> =
        pairs.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    match form::input(&info["input_schema"], &pairs) {
        Ok(input) => {
            let envelope = m.run(&name, input).await;
            html_response(StatusCode::OK, html::module_page(&info, &values, None, Some(&envelope)))
        }
        Err(problem) => {
            html_response(StatusCode::UNPROCESSABLE_ENTITY, html::module_page(&info, &values, Some(&problem), None))
        }
    }
}

async fn episodes(State(d): St) -> Response {
    match d.store.workflow_history(&d.project_id).await {
        Ok(versions) => html_response(StatusCode::OK, html::episodes_page(&versions)),
        Err(e) => failed(&e),
    }
}

async fn episode(State(d): St, Path(id): Path<String>) -> Response {
    match d.store.workflow_history(&d.project_id).await {
        Ok(versions) => {
            let mine: Vec<&noesis_store::WorkflowVersion> = versions.iter().filter(|v| v.episode_id == id).collect();
            if mine.is_empty() {
                return html_response(
                    StatusCode::NOT_FOUND,
                    html::not_found(&format!("no episode {id} in this project")),
                );
            }
            let live = d.episodes.as_ref().and_then(|e| e.live(&id));
            html_response(StatusCode::OK, html::episode_page(&mine, live.as_ref()))
        }
        Err(e) => failed(&e),
    }
}

async fn usage(State(d): St) -> Response {
    let summaries = match d.store.agent_runs(&d.project_id, 10_000).await {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    let mut runs = Vec::with_capacity(summaries.len());
    for s in &summaries {
        match d.store.agent_state(&s.run_id, None).await {
            Ok(Some(state)) => {
                if let Ok(run) = noesis_agent::AgentRun::from_json(&state.state) {
                    runs.push(run);
                }
            }
            Ok(None) => {}
            Err(e) => return failed(&e),
        }
    }
    // Module runs: their frames carry what each run spent.
    let frames = match d.store.frames(&FrameFilter::project(&d.project_id)).await {
        Ok(f) => f,
        Err(e) => return failed(&e),
    };
    let rows = html::merge_usage([html::usage_of(&runs), html::usage_of_frames(&frames)]);
    let (roles, trees) = html::attribution_of(&runs);
    html_response(StatusCode::OK, html::usage_page(&rows, &roles, &trees))
}

async fn runs(State(d): St) -> Response {
    match d.store.agent_runs(&d.project_id, 200).await {
        Ok(runs) => html_response(StatusCode::OK, html::runs_page(&runs)),
        Err(e) => failed(&e),
    }
}

async fn run(State(d): St, Path(id): Path<String>) -> Response {
    match d.store.agent_state(&id, None).await {
        Ok(Some(state)) if state.project_id == d.project_id => match noesis_agent::AgentRun::from_json(&state.state) {
            Ok(run) => {
                let live = d.agents.as_ref().map(|a| (a.is_live(&id), a.pending(&id), a.last_event(&id)));
                html_response(StatusCode::OK, html::run_page(&run, &state.status, live.as_ref()))
            }
            Err(e) => failed(&e),
        },
        Ok(_) => html_response(StatusCode::NOT_FOUND, html::not_found(&format!("no agent run {id} in this project"))),
        Err(e) => failed(&e),
    }
}

/// Back to the run's page after a decision, a cancel or a resume.
fn to_run(id: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(to) = HeaderValue::from_str(&format!("/runs/{}", html::enc(id))) {
        resp.headers_mut().insert(header::LOCATION, to);
    }
    resp
}

fn no_agents() -> Response {
    html_response(StatusCode::NOT_FOUND, html::not_found("this server runs no agents"))
}

/// The server's runs, when its operator lets pages steer them
/// (`--agents`); otherwise the page that says why not.
fn steerable(d: &Dashboard) -> Result<&Arc<noesis_agent::supervisor::AgentRuns>, Box<Response>> {
    match &d.agents {
        None => Err(Box::new(no_agents())),
        Some(a) if !a.serves_http() => {
            Err(Box::new(html_response(StatusCode::FORBIDDEN, html::not_found(noesis_agent::supervisor::AGENTS_OFF))))
        }
        Some(a) => Ok(a),
    }
}

/// The decisions a page's form makes of the calls waiting: `call` (or
/// `all`), `verdict` (`approve`, `deny`, `approve_edited`, `abort`), the
/// `hash` the person saw, a `message` for a denial and `arguments` (JSON)
/// for an edit. A page that says why when the form is wrong.
fn decisions_of(body: &[u8], pending: &[noesis_agent::Pending]) -> Result<Vec<noesis_agent::Decision>, Box<Response>> {
    use noesis_agent::{Decision, Verdict};
    let form: std::collections::HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
    let field = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    let message = Some(field("message").trim().to_owned()).filter(|m| !m.is_empty());
    let refuse = |status: StatusCode, m: &str| Box::new(html_response(status, html::not_found(m)));
    let verdict = match field("verdict") {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny { message },
        "abort" => Verdict::Abort { message },
        "approve_edited" => match serde_json::from_str(field("arguments")) {
            Ok(arguments) => Verdict::ApproveEdited { arguments },
            Err(e) => {
                return Err(refuse(StatusCode::BAD_REQUEST, &format!("the edited arguments are not JSON: {e}")));
            }
        },
        other => return Err(refuse(StatusCode::BAD_REQUEST, &format!("no verdict `{other}`"))),
    };
    let chosen: Vec<_> = pending.iter().filter(|p| field("call") == "all" || p.call_id == field("call")).collect();
    if chosen.is_empty() {
        return Err(refuse(StatusCode::CONFLICT, "no such call waits for a decision"));
    }
    Ok(chosen
        .into_iter()
        .map(|p| Decision {
            call_id: p.call_id.clone(),
            tool: p.tool.clone(),
            // What the person saw; a call whose arguments differ is refused.
            arguments_hash: if field("call") == "all" { p.arguments_hash.clone() } else { field("hash").to_owned() },
            verdict: verdict.clone(),
        })
        .collect())
}

/// A decision from the run's page (see [`decisions_of`]).
async fn decide(State(d): St, Path(id): Path<String>, body: axum::body::Bytes) -> Response {
    let agents = match steerable(&d) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let decisions = match decisions_of(&body, &agents.pending(&id)) {
        Ok(ds) => ds,
        Err(r) => return *r,
    };
    match agents.decide(&id, decisions).await {
        Ok(()) => to_run(&id),
        Err((refusal, m)) => html_response(status_of(refusal), html::not_found(&m)),
    }
}

/// A decision from a live episode's page: CODER's waiting calls.
async fn decide_episode(State(d): St, Path(id): Path<String>, body: axum::body::Bytes) -> Response {
    let Some(episodes) = &d.episodes else {
        return html_response(StatusCode::NOT_FOUND, html::not_found("this server runs no episodes"));
    };
    let mut made = None;
    let decided = episodes
        .decide(&id, |pending| match decisions_of(&body, pending) {
            Ok(ds) => Ok(ds),
            Err(page) => {
                made = Some(page);
                Err(String::new())
            }
        })
        .await;
    match (decided, made) {
        (Ok(()), _) => {
            let mut resp = StatusCode::SEE_OTHER.into_response();
            if let Ok(to) = HeaderValue::from_str(&format!("/episodes/{}", html::enc(&id))) {
                resp.headers_mut().insert(header::LOCATION, to);
            }
            resp
        }
        (Err(_), Some(page)) => *page,
        (Err((refusal, m)), None) => html_response(status_of(refusal), html::not_found(&m)),
    }
}

async fn cancel_run(State(d): St, Path(id): Path<String>) -> Response {
    let agents = match steerable(&d) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    if agents.cancel(&id) {
        to_run(&id)
    } else {
        html_response(StatusCode::CONFLICT, html::not_found(&format!("run {id} is not running on this server")))
    }
}

async fn resume_run(State(d): St, Path(id): Path<String>) -> Response {
    let agents = match steerable(&d) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    match agents.resume(&id).await {
        Ok(()) => to_run(&id),
        Err((refusal, m)) => html_response(status_of(refusal), html::not_found(&m)),
    }
}

/// The status a page answers the supervisor's refusal with.
fn status_of(refusal: noesis_agent::supervisor::Refusal) -> StatusCode {
    use noesis_agent::supervisor::Refusal;
    match refusal {
        Refusal::BadRequest => StatusCode::BAD_REQUEST,
        Refusal::Busy => StatusCode::TOO_MANY_REQUESTS,
        Refusal::Conflict => StatusCode::CONFLICT,
        Refusal::NotFound => StatusCode::NOT_FOUND,
        Refusal::Failed => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn css() -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/css; charset=utf-8"))], include_str!("assets/app.css"))
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"))],
        include_str!("assets/app.js"),
    )
        .into_response()
}
