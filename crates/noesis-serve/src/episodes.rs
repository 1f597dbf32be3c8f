//! Episodes over HTTP (`noesis serve --episodes`): `POST /episodes` starts
//! `solve` on the server's project (or resumes its unfinished episode),
//! `GET /episodes/{id}/status` shows it (`/episodes/{id}` is the dashboard's
//! page), `GET /episodes/{id}/events` streams its
//! progress as server-sent events (resumable with `Last-Event-ID`) — the
//! nodes' lines, CODER's steps as agent runs report them, approvals — and
//! `POST /episodes/{id}/approvals` decides the CODER calls a rule asks a
//! person about.
//!
//! The episodes are `noesis-workflow`'s ([`Episodes`]: their tasks, event
//! logs, approvals and the one-episode rule; [`EpisodeHost`], `crate::assemble`'s,
//! makes each driver from the operator's config); this page only says them
//! in HTTP. `GET /episodes/{id}/events?after=N` is the same as
//! `Last-Event-ID: N` (a browser's first `EventSource` request cannot set
//! the header).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use noesis_agent::events::Event;
use noesis_agent::supervisor::{Refusal, Refused};
use noesis_modules::{ErrorCode, Failure};
pub use noesis_workflow::served::{EpisodeHost, EpisodeRequest, Episodes, LiveEpisode};
use serde_json::json;

use crate::agents::ApprovalsBody;
use crate::http::json_response;

/// What a client is told when the server does not run episodes for it.
pub const EPISODES_OFF: &str =
    "episodes over HTTP are off on this server: its operator starts it with --episodes to allow them";

/// The routes, to merge into the server's router (its token rules, body
/// limit and error envelopes apply).
pub fn router(episodes: &Arc<Episodes>) -> Router {
    Router::new()
        .route("/episodes", post(start_episode))
        .route("/episodes/{id}/status", get(show_episode))
        .route("/episodes/{id}/events", get(events))
        .route("/episodes/{id}/approvals", post(approvals))
        .with_state(Arc::clone(episodes))
}

/// The routes of a server that runs no episodes: each answers 403 naming
/// `--episodes`.
pub fn off() -> Router {
    async fn refused() -> Response {
        crate::http::refusal(
            StatusCode::FORBIDDEN,
            Failure::new(ErrorCode::E4007, EPISODES_OFF).suggest("run `noesis solve` in the project instead"),
        )
    }
    Router::new()
        .route("/episodes", post(refused))
        .route("/episodes/{id}/status", get(refused))
        .route("/episodes/{id}/events", get(refused))
        .route("/episodes/{id}/approvals", post(refused))
}

type St = State<Arc<Episodes>>;

fn refusal((status, code, message): (StatusCode, ErrorCode, String)) -> Response {
    crate::http::refusal(status, Failure::new(code, message))
}

/// The supervisor's refusal in HTTP.
fn refused((why, message): Refused) -> Response {
    let (status, code) = match why {
        Refusal::BadRequest => (StatusCode::BAD_REQUEST, ErrorCode::E1001),
        Refusal::Busy => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::E4002),
        Refusal::Conflict => (StatusCode::CONFLICT, ErrorCode::E4003),
        Refusal::NotFound => (StatusCode::NOT_FOUND, ErrorCode::E4006),
        Refusal::Failed => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000),
    };
    refusal((status, code, message))
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
    match episodes.start(request).await {
        Ok(id) => json_response(
            StatusCode::CREATED,
            &json!({"episode_id": id, "status": "running", "events": format!("/episodes/{id}/events")}),
        ),
        Err(r) => refused(r),
    }
}

async fn show_episode(State(episodes): St, Path(id): Path<String>) -> Response {
    let states = episodes.states();
    let history = match states.store.workflow_history(&states.project_id).await {
        Ok(h) => h,
        Err(e) => return refusal((StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000, e.to_string())),
    };
    let Some(last) = history.iter().rev().find(|v| v.episode_id == id) else {
        return refusal((StatusCode::NOT_FOUND, ErrorCode::E4006, format!("no episode `{id}`")));
    };
    let live = episodes.live(&id);
    let pending = live.as_ref().and_then(|l| l.pending.clone());
    json_response(
        StatusCode::OK,
        &json!({"episode_id": id, "live": live.is_some_and(|l| l.running), "version": last.version,
                "node": last.node, "status": last.status, "state": last.state,
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
    match episodes.decide(&id, |pending| body.decisions(pending)).await {
        Ok(()) => json_response(StatusCode::OK, &json!({"episode_id": id, "status": "running"})),
        Err(r) => refused(r),
    }
}

fn sse(event: &Event) -> SseEvent {
    SseEvent::default().id(event.id.to_string()).event(event.kind.clone()).data(
        serde_json::to_string(&json!({"kind": event.kind, "episode_id": event.correlation_id, "data": event.data}))
            .unwrap_or_default(),
    )
}

async fn events(State(episodes): St, Path(id): Path<String>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let after = crate::http::stream_after(&headers, &uri);
    let Some(events) = episodes.events(&id, after) else {
        return refusal((
            StatusCode::NOT_FOUND,
            ErrorCode::E4006,
            format!("episode `{id}` has no events on this server"),
        ));
    };
    let events = events.map(|e| Ok::<_, Infallible>(sse(&e)));
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}
