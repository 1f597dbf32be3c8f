//! Agent runs over HTTP: `POST /agents/runs` starts a run that outlives the
//! request, `GET /agents/runs[/{id}]` shows runs, `GET
//! /agents/runs/{id}/events` streams a run's steps as server-sent events
//! (resumable with `Last-Event-ID`), `POST /agents/runs/{id}/approvals`
//! decides its pending calls, `POST /agents/runs/{id}/cancel` stops it.
//!
//! The runs themselves are the agent layer's supervisor
//! ([`noesis_agent::supervisor::AgentRuns`]); these are its routes, each
//! refusal mapped to a status code and an error envelope.

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
use noesis_agent::events::{Event, outcome_event};
use noesis_agent::supervisor::{RETRY_AFTER_SECS, Refusal};
use noesis_agent::{AgentRun, Decision, Pending, Verdict};
use noesis_modules::{ErrorCode, Failure};
use serde::Deserialize;
use serde_json::json;

// The supervisor's types by the paths the server's clients (the MCP
// server, tests, the binary) have used.
pub use noesis_agent::supervisor::{
    AGENTS_OFF, AgentHost, AgentRequest, AgentRuns, Ceiling, RequestLimits, RequestPermissions, RunEvent, RunsPolicy,
    status_of,
};

/// The routes of `runs`, to merge into the server's router (its token
/// rules, body limit and error envelopes apply).
pub fn router(runs: &Arc<AgentRuns>) -> Router {
    Router::new()
        .route("/agents/runs", post(start_run).get(list_runs))
        .route("/agents/runs/{id}", get(show_run))
        .route("/agents/runs/{id}/events", get(events))
        .route("/agents/runs/{id}/approvals", post(approvals))
        .route("/agents/runs/{id}/cancel", post(cancel))
        .with_state(Arc::clone(runs))
}

type St = State<Arc<AgentRuns>>;

use crate::http::json_response;

fn refusal(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Response {
    crate::http::refusal(status, Failure::new(code, message))
}

fn bad_request(message: impl Into<String>) -> Response {
    refusal(StatusCode::BAD_REQUEST, ErrorCode::E1001, message)
}

fn not_found(id: &str) -> Response {
    refusal(StatusCode::NOT_FOUND, ErrorCode::E4006, format!("no agent run `{id}`"))
}

fn store_failed(e: &str) -> Response {
    refusal(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::E4000, format!("the run store failed: {e}"))
}

fn status(run: &AgentRun) -> &'static str {
    run.status()
}

/// 403 naming `--agents` when the operator did not allow HTTP clients to
/// start or steer runs.
fn agents_off(runs: &AgentRuns) -> Option<Response> {
    (!runs.serves_http()).then(|| {
        crate::http::refusal(
            StatusCode::FORBIDDEN,
            Failure::new(ErrorCode::E4007, AGENTS_OFF).suggest("read runs with GET /agents/runs; start them elsewhere"),
        )
    })
}

async fn start_run(State(runs): St, body: Bytes) -> Response {
    if let Some(refused) = agents_off(&runs) {
        return refused;
    }
    let request: AgentRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("the request body is not a valid agent request: {e}")),
    };
    match runs.start(request).await {
        Ok(id) => json_response(
            StatusCode::CREATED,
            &json!({"run_id": id, "status": "running", "events": format!("/agents/runs/{id}/events")}),
        ),
        Err((Refusal::BadRequest, m)) => bad_request(m),
        Err((Refusal::Busy, m)) => {
            let mut resp = refusal(StatusCode::TOO_MANY_REQUESTS, ErrorCode::E4002, m);
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            resp
        }
        Err((_, m)) => store_failed(&m),
    }
}

async fn list_runs(State(runs): St, uri: axum::http::Uri) -> Response {
    let limit = form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "limit")
        .map(|(_, v)| v.parse::<u32>());
    let limit = match limit {
        None => 50,
        Some(Ok(n)) => n.clamp(1, 1000),
        Some(Err(_)) => return bad_request("`limit` must be a whole number"),
    };
    match runs.list(limit).await {
        Ok(list) => json_response(StatusCode::OK, &json!({"runs": list})),
        Err(e) => store_failed(&e),
    }
}

async fn show_run(State(runs): St, Path(id): Path<String>) -> Response {
    match runs.load(&id).await {
        Ok(Some(run)) => {
            let live = runs.is_live(&id);
            let mut body = json!({
                "run_id": run.id,
                "status": status(&run),
                "live": live,
                "step": run.step,
                "usage": run.usage,
                "outcome": run.outcome,
                "output": run.output(),
                "pending": live.then(|| runs.pending(&id)),
            });
            body["run"] = run.to_json();
            json_response(StatusCode::OK, &body)
        }
        Ok(None) => not_found(&id),
        Err(e) => store_failed(&e),
    }
}

/// `{"decisions": [{"call_id", "verdict": "approve" | "deny" | "approve_edited" | "abort",
/// "arguments"?, "message"?, "arguments_hash"?}]}` or `{"approve_all": true}` /
/// `{"deny_all": "why"}`: one decision for the whole pending batch.
/// Episodes take the same body (`crate::episodes`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsBody {
    #[serde(default)]
    decisions: Vec<ClientDecision>,
    #[serde(default)]
    approve_all: bool,
    #[serde(default)]
    deny_all: Option<String>,
}

// No deny_unknown_fields: serde cannot have it beside `flatten`.
#[derive(Deserialize)]
struct ClientDecision {
    call_id: String,
    #[serde(flatten)]
    verdict: Verdict,
    #[serde(default)]
    arguments_hash: Option<String>,
}

impl ApprovalsBody {
    /// The decisions on `pending` this body makes: one for every call with
    /// `approve_all`/`deny_all`, else those named (a call that is not
    /// waiting is refused, naming it); a hash left out is the one shown.
    pub(crate) fn decisions(self, pending: &[Pending]) -> Result<Vec<Decision>, String> {
        if self.approve_all || self.deny_all.is_some() {
            return Ok(pending
                .iter()
                .map(|p| Decision {
                    call_id: p.call_id.clone(),
                    tool: p.tool.clone(),
                    arguments_hash: p.arguments_hash.clone(),
                    verdict: match &self.deny_all {
                        Some(message) => Verdict::Deny { message: Some(message.clone()) },
                        None => Verdict::Approve,
                    },
                })
                .collect());
        }
        self.decisions
            .into_iter()
            .map(|d| {
                let p = pending
                    .iter()
                    .find(|p| p.call_id == d.call_id)
                    .ok_or_else(|| format!("call `{}` is not waiting for a decision", d.call_id))?;
                Ok(Decision {
                    call_id: d.call_id,
                    tool: p.tool.clone(),
                    arguments_hash: d.arguments_hash.unwrap_or_else(|| p.arguments_hash.clone()),
                    verdict: d.verdict,
                })
            })
            .collect()
    }
}

async fn approvals(State(runs): St, Path(id): Path<String>, body: Bytes) -> Response {
    if let Some(refused) = agents_off(&runs) {
        return refused;
    }
    let body: ApprovalsBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return bad_request(format!("the request body is not a valid decision: {e}")),
    };
    if !runs.is_live(&id) {
        return match runs.load(&id).await {
            Ok(Some(run)) => refusal(
                StatusCode::CONFLICT,
                ErrorCode::E4003,
                format!("run `{id}` is {} and not live on this server; nothing waits for a decision", status(&run)),
            ),
            Ok(None) => not_found(&id),
            Err(e) => store_failed(&e),
        };
    }
    let pending = runs.pending(&id);
    if pending.is_empty() {
        return refusal(
            StatusCode::CONFLICT,
            ErrorCode::E4003,
            format!("run `{id}` has no call waiting for a decision"),
        );
    }
    let decisions = match body.decisions(&pending) {
        Ok(d) => d,
        Err(m) => return bad_request(m),
    };
    match runs.decide(&id, decisions).await {
        Ok(()) => json_response(StatusCode::OK, &json!({"run_id": id, "status": "running"})),
        Err((_, m)) => refusal(StatusCode::CONFLICT, ErrorCode::E4003, m),
    }
}

async fn cancel(State(runs): St, Path(id): Path<String>) -> Response {
    if let Some(refused) = agents_off(&runs) {
        return refused;
    }
    if runs.cancel(&id) {
        json_response(StatusCode::ACCEPTED, &json!({"run_id": id, "status": "cancelling"}))
    } else {
        match runs.load(&id).await {
            Ok(Some(run)) => refusal(
                StatusCode::CONFLICT,
                ErrorCode::E4003,
                format!("run `{id}` is {} and not live on this server", status(&run)),
            ),
            Ok(None) => not_found(&id),
            Err(e) => store_failed(&e),
        }
    }
}

fn sse(event: &Event) -> SseEvent {
    SseEvent::default().id(event.id.to_string()).event(event.kind.clone()).data(
        serde_json::to_string(&json!({"kind": event.kind, "run_id": event.correlation_id, "data": event.data}))
            .unwrap_or_default(),
    )
}

async fn events(State(runs): St, Path(id): Path<String>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let after = crate::http::stream_after(&headers, &uri);
    let Some(events) = runs.events_since(&id, after).await else {
        // Not run by this server: what the store knows, as one event.
        return match runs.load(&id).await {
            Ok(Some(run)) => {
                let event = match &run.outcome {
                    Some(o) => outcome_event("", &run.id, o),
                    None => Event::new("", "not_live", &run.id, json!({"status": status(&run)})),
                };
                let once = futures_util::stream::iter([Ok::<_, Infallible>(sse(&Event { id: 1, ..event }))]);
                Sse::new(once).into_response()
            }
            Ok(None) => not_found(&id),
            Err(e) => store_failed(&e),
        };
    };
    let stream = events.map(|e| Ok::<_, Infallible>(sse(&e)));
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}
