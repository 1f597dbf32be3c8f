//! Episodes over HTTP (`noesis serve --episodes`): `POST /episodes` starts
//! `solve` on the server's project (or resumes its unfinished episode),
//! `GET /episodes/{id}/status` shows it (`/episodes/{id}` is the dashboard's
//! page), `GET /episodes/{id}/events` streams its
//! progress as server-sent events (resumable with `Last-Event-ID`) — the
//! nodes' lines, CODER's steps as agent runs report them, approvals — and
//! `POST /episodes/{id}/approvals` decides the CODER calls a rule asks a
//! person about.
//!
//! The episode is `noesis-workflow`'s: [`EpisodeHost`] (`crate::assemble`'s) makes
//! its [`Driver`] from the operator's config, and this page only runs it in
//! a task, publishes what its [`Observer`] sees on the [`EventBus`] (topic
//! `episodes.{id}`) and in the episode's log, and hands decisions to its
//! [`Approver`]. The project has one state, so one episode runs at a time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{Stream, StreamExt};
use noesis_agent::events::{Event, EventBus, EventLog, progress_event};
use noesis_agent::{Decision, Pending, Progress};

use crate::agents::ApprovalsBody;
use noesis_modules::{ErrorCode, Failure};
use noesis_workflow::driver::{self, Approver, Begin, Driver, Observer};
use noesis_workflow::versions::{self, States};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::http::json_response;

/// Events an episode's log keeps for late readers.
const EVENT_LOG: usize = 10_000;

/// What a client is told when the server does not run episodes for it.
pub const EPISODES_OFF: &str =
    "episodes over HTTP are off on this server: its operator starts it with --episodes to allow them";

/// What a client asks for when it starts (or resumes) an episode.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeRequest {
    /// What to do (a new episode).
    #[serde(default)]
    pub task: String,
    /// The test commands, run with `sh -c` in the project (a new episode).
    #[serde(default)]
    pub tests: Vec<String>,
    /// A JUnit XML report the commands write, relative to the project.
    #[serde(default)]
    pub junit: Option<String>,
    /// Attempts REFLECTOR may route back before the episode escalates.
    #[serde(default)]
    pub max_retries: Option<u64>,
    /// Continue the project's unfinished or escalated episode instead.
    #[serde(default)]
    pub resume: bool,
    /// Advice for the next attempt (with `resume`).
    #[serde(default)]
    pub hint: Option<String>,
}

/// What the server needs from its host to run episodes. Errors are
/// messages for the client (no secrets in them).
pub trait EpisodeHost: Send + Sync + 'static {
    /// The project's versioned state.
    fn states(&self) -> &States;
    /// The project's root: the folder every episode here works in.
    fn project_root(&self) -> &FsPath;
    /// How a new episode's tests and CODER's commands are confined.
    fn sandbox(&self) -> noesis_sandbox::Settings;
    /// The driver of an episode working in `workspace`, confined by
    /// `sandbox`, reporting to `observer` and asking `approver`.
    fn driver(
        &self,
        workspace: PathBuf,
        sandbox: noesis_sandbox::Settings,
        observer: Arc<dyn Observer>,
        approver: Arc<dyn Approver>,
    ) -> Result<Driver, String>;
}

/// Decisions for the waiting calls, and who to tell once they are taken.
type Decide = (Vec<Decision>, oneshot::Sender<()>);

/// One episode's live state: its log and the calls waiting for a person.
struct Live {
    id: String,
    topic: String,
    log: Arc<EventLog>,
    bus: EventBus,
    /// The CODER run and its calls waiting for a decision.
    pending: Mutex<Option<(String, Vec<Pending>)>>,
    decide: Mutex<Option<mpsc::Sender<Decide>>>,
}

impl Live {
    fn publish(&self, kind: &str, data: Value) {
        let event = Event::new(&self.topic, kind, &self.id, data);
        // Other subscribers get it if they have room; the log always does.
        let _ = self.bus.try_publish(event.clone());
        self.log.push(event);
    }

    fn close(&self) {
        self.log.close();
    }

    fn done(&self) -> bool {
        self.log.is_closed()
    }
}

/// The episode's progress as events.
struct Publish(Arc<Live>);

impl Observer for Publish {
    fn note(&self, text: &str) {
        self.0.publish("note", json!({"text": text}));
    }

    fn warn(&self, text: &str) {
        self.0.publish("warning", json!({"text": text}));
    }

    fn agent(&self, run_id: &str, progress: &Progress) {
        let e = progress_event(&self.0.topic, run_id, progress);
        self.0.publish(&e.kind, json!({"run_id": run_id, "data": e.data}));
    }
}

/// CODER's calls a rule asks about wait for `POST /episodes/{id}/approvals`.
struct AskClient(Arc<Live>);

#[async_trait::async_trait]
impl Approver for AskClient {
    async fn decide(&self, run_id: &str, pending: Vec<Pending>) -> Vec<Decision> {
        let (tx, mut rx) = mpsc::channel(1);
        *self.0.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
        *self.0.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((run_id.to_owned(), pending.clone()));
        self.0.publish("approval_needed", json!({"run_id": run_id, "pending": pending}));
        let decided = rx.recv().await;
        *self.0.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        *self.0.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        match decided {
            Some((decisions, answer)) => {
                self.0.publish("decided", json!({"run_id": run_id, "decisions": decisions}));
                let _ = answer.send(());
                decisions
            }
            // The server is going away: nobody decided.
            None => driver::NoOne.decide(run_id, pending).await,
        }
    }
}

/// The episodes of a server's project.
pub struct Episodes {
    host: Arc<dyn EpisodeHost>,
    bus: EventBus,
    logs: Mutex<BTreeMap<String, Arc<Live>>>,
    tasks: tokio::sync::Mutex<tokio::task::JoinSet<()>>,
    /// Held while an episode starts: two requests cannot both pass the
    /// one-episode check.
    starting: tokio::sync::Mutex<()>,
}

type Refusal = (StatusCode, ErrorCode, String);

impl Episodes {
    /// Episodes through `host`, publishing on `bus`.
    pub fn new(host: Arc<dyn EpisodeHost>, bus: EventBus) -> Arc<Episodes> {
        Arc::new(Episodes {
            host,
            bus,
            logs: Mutex::new(BTreeMap::new()),
            tasks: tokio::sync::Mutex::new(tokio::task::JoinSet::new()),
            starting: tokio::sync::Mutex::new(()),
        })
    }

    fn log(&self, id: &str) -> Option<Arc<Live>> {
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }

    fn running(&self) -> Option<String> {
        let logs = self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.values().find(|l| !l.done()).map(|l| l.id.clone())
    }

    /// Starts (or resumes) the project's episode; its id.
    pub async fn start(self: &Arc<Self>, request: EpisodeRequest) -> Result<String, Refusal> {
        let _starting = self.starting.lock().await;
        if let Some(id) = self.running() {
            return Err((
                StatusCode::CONFLICT,
                ErrorCode::E4003,
                format!("episode {id} is running on this server; one episode runs at a time"),
            ));
        }
        let failed = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000, e.to_string());
        let states = self.host.states();
        let head = states.head().await.map_err(|e| failed(&e))?.map(|v| versions::head_of(&v));
        let sandbox =
            driver::sandbox_settings(head.as_ref(), request.resume, || self.host.sandbox()).map_err(|e| failed(&e))?;
        let begin = if request.resume {
            Begin::Resume { hint: request.hint.clone() }
        } else {
            Begin::New {
                task: request.task.clone(),
                tests: request.tests.clone(),
                junit: request.junit.clone(),
                workspace: self.host.project_root().to_path_buf(),
                max_retries: request.max_retries,
            }
        };
        let quiet = driver::Silent;
        let workspace =
            driver::open(states, self.host.project_root(), &begin, &sandbox, &quiet).await.map_err(|e| match e {
                driver::DriveError::Refused(m) => (StatusCode::CONFLICT, ErrorCode::E1001, m),
                other => failed(&other),
            })?;
        let head = states.head().await.map_err(|e| failed(&e))?;
        let id = head.map(|h| h.episode_id).unwrap_or_default();
        let live = Arc::new(Live {
            id: id.clone(),
            topic: format!("episodes.{id}"),
            log: Arc::new(EventLog::new(EVENT_LOG)),
            bus: self.bus.clone(),
            pending: Mutex::new(None),
            decide: Mutex::new(None),
        });
        let driver = self
            .host
            .driver(workspace, sandbox, Arc::new(Publish(Arc::clone(&live))), Arc::new(AskClient(Arc::clone(&live))))
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000, e))?;
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.clone(), Arc::clone(&live));
        let hint = match &begin {
            Begin::Resume { hint } => Some(hint.clone()),
            Begin::New { .. } => None,
        };
        self.tasks.lock().await.spawn(async move {
            live.publish("episode_started", json!({"resumed": hint.is_some()}));
            let resumed = match &hint {
                Some(h) => driver.resume(h.as_deref()).await,
                None => Ok(()),
            };
            match resumed {
                Ok(()) => match driver.drive().await {
                    Ok((outcome, head)) => live.publish(
                        "episode_done",
                        json!({"outcome": outcome.as_str(), "version": head.version, "state": head.state}),
                    ),
                    Err(e) => live.publish("error", json!({"message": e.to_string()})),
                },
                Err(e) => live.publish("error", json!({"message": e.to_string()})),
            }
            live.close();
        });
        Ok(id)
    }

    /// Hands episode `id`'s waiting CODER call(s) these decisions.
    async fn decide(&self, id: &str, body: ApprovalsBody) -> Result<(), Refusal> {
        let conflict = |m: String| (StatusCode::CONFLICT, ErrorCode::E4003, m);
        let Some(live) = self.log(id).filter(|l| !l.done()) else {
            return Err(conflict(format!("episode {id} is not running on this server")));
        };
        let Some((_, pending)) = live.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() else {
            return Err(conflict(format!("episode {id} has no call waiting for a decision")));
        };
        let decisions = body.decisions(&pending).map_err(|m| (StatusCode::BAD_REQUEST, ErrorCode::E1001, m))?;
        let tx = live.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let Some(tx) = tx else { return Err(conflict(format!("episode {id} is no longer waiting"))) };
        let (answer, told) = oneshot::channel();
        if tx.send((decisions, answer)).await.is_err() || told.await.is_err() {
            return Err(conflict(format!("episode {id} is no longer waiting")));
        }
        Ok(())
    }

    /// Waits for every episode's task (they end with their episodes).
    pub async fn shutdown(&self) {
        let mut tasks = self.tasks.lock().await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    /// The routes, to merge into the server's router (its token rules,
    /// body limit and error envelopes apply).
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/episodes", post(start_episode))
            .route("/episodes/{id}/status", get(show_episode))
            .route("/episodes/{id}/events", get(events))
            .route("/episodes/{id}/approvals", post(approvals))
            .with_state(Arc::clone(self))
    }
}

/// The routes of a server that runs no episodes: starting or steering one
/// answers 403 naming `--episodes`.
pub fn off() -> Router {
    async fn refused() -> Response {
        crate::http::refusal(
            StatusCode::FORBIDDEN,
            Failure::new(ErrorCode::E4007, EPISODES_OFF).suggest("run `noesis solve` in the project instead"),
        )
    }
    Router::new().route("/episodes", post(refused)).route("/episodes/{id}/approvals", post(refused))
}

type St = State<Arc<Episodes>>;

fn refusal((status, code, message): Refusal) -> Response {
    crate::http::refusal(status, Failure::new(code, message))
}

async fn start_episode(State(episodes): St, body: Bytes) -> Response {
    let request: EpisodeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return refusal((
                StatusCode::BAD_REQUEST,
                ErrorCode::E1001,
                format!("the request body is not a valid episode request: {e}"),
            ));
        }
    };
    if !request.resume && request.task.trim().is_empty() {
        return refusal((StatusCode::BAD_REQUEST, ErrorCode::E1001, "`task` is empty: say what to do".into()));
    }
    if !request.resume && request.tests.is_empty() {
        return refusal((
            StatusCode::BAD_REQUEST,
            ErrorCode::E1001,
            "`tests` is empty: an episode verifies every change with the project's tests".into(),
        ));
    }
    if request.hint.is_some() && !request.resume {
        return refusal((StatusCode::BAD_REQUEST, ErrorCode::E1001, "`hint` goes with `resume`".into()));
    }
    match episodes.start(request).await {
        Ok(id) => json_response(
            StatusCode::CREATED,
            &json!({"episode_id": id, "status": "running", "events": format!("/episodes/{id}/events")}),
        ),
        Err(r) => refusal(r),
    }
}

async fn show_episode(State(episodes): St, Path(id): Path<String>) -> Response {
    let history = match episodes.host.states().store.workflow_history(&episodes.host.states().project_id).await {
        Ok(h) => h,
        Err(e) => return refusal((StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000, e.to_string())),
    };
    let Some(last) = history.iter().rev().find(|v| v.episode_id == id) else {
        return refusal((StatusCode::NOT_FOUND, ErrorCode::E4006, format!("no episode `{id}`")));
    };
    let live = episodes.log(&id).is_some_and(|l| !l.done());
    let pending = episodes.log(&id).and_then(|l| l.pending.lock().ok().and_then(|p| p.clone()));
    json_response(
        StatusCode::OK,
        &json!({"episode_id": id, "live": live, "version": last.version, "node": last.node,
                "status": last.status, "state": last.state,
                "pending": pending.map(|(run, calls)| json!({"run_id": run, "calls": calls}))}),
    )
}

async fn approvals(State(episodes): St, Path(id): Path<String>, body: Bytes) -> Response {
    let body: ApprovalsBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return refusal((
                StatusCode::BAD_REQUEST,
                ErrorCode::E1001,
                format!("the request body is not a valid decision: {e}"),
            ));
        }
    };
    match episodes.decide(&id, body).await {
        Ok(()) => json_response(StatusCode::OK, &json!({"episode_id": id, "status": "running"})),
        Err(r) => refusal(r),
    }
}

fn sse(event: &Event) -> SseEvent {
    SseEvent::default().id(event.id.to_string()).event(event.kind.clone()).data(
        serde_json::to_string(&json!({"kind": event.kind, "episode_id": event.correlation_id, "data": event.data}))
            .unwrap_or_default(),
    )
}

async fn events(State(episodes): St, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let after: u64 =
        headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let Some(live) = episodes.log(&id) else {
        return refusal((
            StatusCode::NOT_FOUND,
            ErrorCode::E4006,
            format!("episode `{id}` has no events on this server"),
        ));
    };
    Sse::new(follow(live, after)).keep_alive(KeepAlive::default()).into_response()
}

/// The episode's events after `after` (a `gap` first when the log no
/// longer holds some), then each as it comes, ending with it.
fn follow(live: Arc<Live>, after: u64) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    Arc::clone(&live.log).follow(after).map(|e| Ok(sse(&e)))
}
