//! The HTTP API over a [`Service`] (axum, HTTP/1.1).
//!
//! | route | answer |
//! |---|---|
//! | `GET /health` | `{"status": "ok", "version", "in_flight"}`; never needs the token |
//! | `GET /modules` | `{"modules": [ModuleSummary…]}` |
//! | `GET /modules/{name}` | the module's manifest, rules and schemas ([`Service::info`]) |
//! | `POST /run` | `{module, input?, args?, provider?, model?}` → the envelope |
//! | `POST /run/stream` | the same body → `text/event-stream`: `text` events (a JSON string each) as the model writes, then one `envelope` event |
//! | `POST /compose` | the same body → the envelope, with every step of the composition in `meta.steps` |
//! | `GET /openapi.json` | the OpenAPI 3.1 description of these routes |
//! | `GET /plugins`, `POST /plugins/{name}` | with [`ServeConfig::plugins`]: the frame plugins ([`crate::plugins`]) |
//!
//! Every error body is a v2.2 failure envelope. The HTTP status says whether
//! the server could do what was asked; `ok` says whether the module
//! succeeded. So a run whose *model* failed (E1000, E2001, E2003–E2007,
//! E3xxx, E4004, E4005, module codes E5xxx+) is `200` with `ok: false`: the
//! envelope is the module's answer. The other codes map to a status
//! ([`status_of`]): E1001–E1006 and E4003 `422`, E4006 `404`, E4007 `403`,
//! E4002 `429`, E2002 `504`, E4001 `502`, E4000 `500`. Before a run: a body
//! that is not JSON, or a request field (`module`, `args`, `provider`,
//! `model`) missing or of the wrong type, is `400` (E1001, E1002, E1003);
//! an `input` that is not an object is the module's input failing, `422`
//! (E1001); a body over the limit `413` (E1005); a missing or
//! wrong bearer token `401` (E4007); an unknown route `404` and a wrong
//! method `405` (E1004).
//!
//! Who may ask, checked in front of every route (the pages and `/health`
//! included), in this order: the `Host` must name this server
//! ([`crate::access`]: the loopback names, the bound address and
//! [`ServeConfig::allow_hosts`]), else `421` (E4007) — a page that points a
//! name of its own at 127.0.0.1 (DNS rebinding) reaches no route; a request
//! that would change something from another site (`Origin` not the `Host`,
//! or `Sec-Fetch-Site: cross-site`) is `403` (E4007); then a credential —
//! the bearer token, or the session cookie `/login` hands out — is needed
//! by every request that changes anything (any method but GET, HEAD and
//! OPTIONS), on every server, and by reads too unless
//! [`ServeConfig::open_reads`] (honoured on loopback only).
//!
//! A client that disconnects drops its request, and with it the run and
//! the in-flight provider call. On shutdown the server stops accepting,
//! lets runs finish for [`ServeConfig::grace`], then cancels the rest
//! (their clients get E2002 envelopes).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use noesis_modules::{ErrorCode, Failure};
use noesis_runtime::{CancellationToken, Instant, OnText};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::access::{HostRule, Sessions};
use crate::service::{RunRequest, Service, error_code, refuse};

/// The OpenAPI 3.1 document served at `GET /openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Default request body limit: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// Receives one access-log line per request (method, path, status,
/// milliseconds; never headers, bodies or query strings).
#[derive(Clone)]
pub struct AccessLog(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessLog(..)")
    }
}

/// How the server listens.
#[derive(Clone)]
pub struct ServeConfig {
    /// Address to bind; port 0 picks a free one ([`Server::local_addr`]).
    pub addr: SocketAddr,
    /// The bearer token (also what `POST /login` takes for a session).
    /// Required when `addr` is not a loopback address. Without one, only a
    /// one-time link ([`Server::login_link`]) gives a credential.
    pub token: Option<String>,
    /// GET and HEAD need no credential (on a loopback address only; off
    /// loopback every route but `/health` needs one). Requests that change
    /// anything always need one.
    pub open_reads: bool,
    /// Host names a request may give besides the loopback names and the
    /// bound address (checked by [`ServeConfig::check`]: a name, no scheme
    /// or port).
    pub allow_hosts: Vec<String>,
    /// Serve HTTPS with this certificate and key; session cookies are then
    /// `Secure`.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Largest request body accepted, in bytes.
    pub max_body: usize,
    /// How long runs may go on after a shutdown signal before they are
    /// cancelled.
    pub grace: Duration,
    /// Where access-log lines go; none when `None`.
    pub access_log: Option<AccessLog>,
    /// Pages served beside the API (the dashboard), behind the same token
    /// rules: a browser signs in once at `/login` and gets a cookie.
    pub pages: Option<Router>,
    /// The agent-run routes ([`crate::agents::router`]), behind
    /// the same token rules, body limit and error envelopes.
    pub agents: Option<Router>,
    /// The plugin routes ([`crate::plugins::PluginRuns::router`]), likewise.
    pub plugins: Option<Router>,
    /// The episode routes ([`crate::episodes::router`]), behind
    /// the same token rules, body limit and error envelopes.
    pub episodes: Option<Router>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("open_reads", &self.open_reads)
            .field("allow_hosts", &self.allow_hosts)
            .field("tls", &self.tls)
            .field("max_body", &self.max_body)
            .field("grace", &self.grace)
            .field("access_log", &self.access_log.is_some())
            .field("pages", &self.pages.is_some())
            .field("agents", &self.agents.is_some())
            .field("plugins", &self.plugins.is_some())
            .field("episodes", &self.episodes.is_some())
            .finish()
    }
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8787)),
            token: None,
            open_reads: false,
            allow_hosts: Vec::new(),
            tls: None,
            max_body: DEFAULT_MAX_BODY,
            grace: Duration::from_secs(10),
            access_log: None,
            pages: None,
            agents: None,
            plugins: None,
            episodes: None,
        }
    }
}

/// Why the server cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without a token would expose every module
    /// and the provider's API key to the network.
    #[error(
        "refusing to listen on {addr} without a token: it is not a loopback address, so anyone who can reach it could run modules on your provider account; pass --token (or set NOESIS_SERVE_TOKEN), or bind 127.0.0.1"
    )]
    TokenRequired {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// An empty or blank token would let anyone in.
    #[error("the bearer token is empty")]
    EmptyToken,
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Accepting connections failed.
    #[error("the server stopped: {0}")]
    Serve(#[source] std::io::Error),
    /// A name given as an allowed host is not a host name.
    #[error("allowed hosts: {0}")]
    BadHost(String),
    /// A TLS certificate or key file cannot be used.
    #[error("{}: {reason}", path.display())]
    Tls {
        /// The file at fault.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The OS gave no random bytes for a secret.
    #[error("cannot make a secret: {0}")]
    Random(#[source] std::io::Error),
}

impl ServeConfig {
    /// Checks the rules that do not need a socket: a token off loopback,
    /// no empty token, allowed hosts that are host names.
    pub fn check(&self) -> Result<(), ServeError> {
        for name in &self.allow_hosts {
            crate::access::host_name(name).map_err(ServeError::BadHost)?;
        }
        match &self.token {
            Some(t) if t.trim().is_empty() => Err(ServeError::EmptyToken),
            None if !self.addr.ip().is_loopback() => Err(ServeError::TokenRequired { addr: self.addr }),
            _ => Ok(()),
        }
    }
}

struct AppState {
    service: Arc<Service>,
    token: Option<String>,
    /// Reads need no credential (loopback only).
    open_reads: bool,
    hosts: HostRule,
    sessions: Sessions,
    /// Served over TLS: cookies are `Secure`.
    tls: bool,
    /// Cancelled after the shutdown grace period; every run holds a child.
    stop_runs: CancellationToken,
    log: Option<AccessLog>,
}

enum Listening {
    Plain(tokio::net::TcpListener),
    Tls(crate::tls::TlsListener),
}

/// A bound server, not yet accepting.
pub struct Server {
    listener: Listening,
    app: Router,
    state: Arc<AppState>,
    grace: Duration,
    stop_runs: CancellationToken,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.local_addr()).finish_non_exhaustive()
    }
}

impl Server {
    /// Checks `config`, reads its TLS files and binds its address.
    pub async fn bind(service: Arc<Service>, config: ServeConfig) -> Result<Server, ServeError> {
        config.check()?;
        let tls = config.tls.as_ref().map(crate::tls::server_config).transpose()?;
        let tcp = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| ServeError::Bind { addr: config.addr, source })?;
        let listener = match tls {
            Some(tls) => Listening::Tls(crate::tls::TlsListener { tcp, acceptor: tls.into() }),
            None => Listening::Plain(tcp),
        };
        let stop_runs = CancellationToken::new();
        let mut names = Vec::new();
        for name in &config.allow_hosts {
            names.push(crate::access::host_name(name).map_err(ServeError::BadHost)?);
        }
        let state = Arc::new(AppState {
            service,
            token: config.token.clone(),
            open_reads: config.open_reads && config.addr.ip().is_loopback(),
            hosts: HostRule::new(config.addr.ip(), &names),
            sessions: Sessions::default(),
            tls: config.tls.is_some(),
            stop_runs: stop_runs.clone(),
            log: config.access_log.clone(),
        });
        let app = router(&state, &config);
        Ok(Server { listener, app, state, grace: config.grace, stop_runs })
    }

    /// The address actually bound (the port chosen for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        let addr = match &self.listener {
            Listening::Plain(l) => l.local_addr(),
            Listening::Tls(l) => l.tcp.local_addr(),
        };
        // A bound listener always has an address; the fallback is unreachable.
        addr.unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// A sign-in link that works once: opening it gives the browser a
    /// session cookie (`/login?once=…`, on this server's address).
    pub fn login_link(&self) -> Result<String, ServeError> {
        let secret = self.state.sessions.link().map_err(ServeError::Random)?;
        let scheme = if self.state.tls { "https" } else { "http" };
        Ok(format!("{scheme}://{}/login?once={secret}", self.local_addr()))
    }

    /// Serves until `shutdown` completes, then drains: no new connections,
    /// runs get the grace period, then are cancelled.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
        let (grace, stop_runs) = (self.grace, self.stop_runs);
        let signal = async move {
            shutdown.await;
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                stop_runs.cancel();
            });
        };
        match self.listener {
            Listening::Plain(l) => axum::serve(l, self.app).with_graceful_shutdown(signal).await,
            Listening::Tls(l) => axum::serve(l, self.app).with_graceful_shutdown(signal).await,
        }
        .map_err(ServeError::Serve)
    }
}

fn router(state: &Arc<AppState>, config: &ServeConfig) -> Router {
    let mut app = Router::new()
        .route("/health", get(health))
        .route("/modules", get(modules))
        .route("/modules/{name}", get(module_info))
        .route("/run", post(run))
        .route("/run/stream", post(run_stream))
        .route("/compose", post(compose))
        .route("/openapi.json", get(openapi))
        .route("/login", get(login_page).post(login))
        .with_state(Arc::clone(state));
    if let Some(pages) = &config.pages {
        app = app.merge(pages.clone());
    }
    if let Some(agents) = &config.agents {
        app = app.merge(agents.clone());
    }
    if let Some(plugins) = &config.plugins {
        app = app.merge(plugins.clone());
    }
    if let Some(episodes) = &config.episodes {
        app = app.merge(episodes.clone());
    }
    app.fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(config.max_body))
        .layer(middleware::from_fn_with_state(Arc::clone(state), auth))
        .layer(middleware::from_fn_with_state(Arc::clone(state), host_guard))
        .layer(middleware::from_fn_with_state(Arc::clone(state), access_log))
}

type St = State<Arc<AppState>>;

/// A JSON response.
/// Where a client's event stream starts: after its `Last-Event-ID` (a
/// reconnect), else after `?after=N` (a page that showed the events up to
/// N; a browser's first `EventSource` request cannot set the header), else
/// at the first.
pub(crate) fn stream_after(headers: &axum::http::HeaderMap, uri: &axum::http::Uri) -> u64 {
    let query_after = form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "after")
        .and_then(|(_, v)| v.parse().ok());
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(query_after)
        .unwrap_or(0)
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], bytes).into_response()
}

/// A failure envelope made by the server itself, with its status.
pub(crate) fn refusal(status: StatusCode, failure: Failure) -> Response {
    json_response(status, &refuse(failure, Instant::now()))
}

/// The HTTP status for an envelope from the service (see the module docs).
pub fn status_of(envelope: &Value) -> StatusCode {
    let Some(code) = error_code(envelope) else { return StatusCode::OK };
    match ErrorCode::parse(code) {
        Some(
            ErrorCode::E1001
            | ErrorCode::E1002
            | ErrorCode::E1003
            | ErrorCode::E1004
            | ErrorCode::E1005
            | ErrorCode::E1006
            | ErrorCode::E4003,
        ) => StatusCode::UNPROCESSABLE_ENTITY,
        Some(ErrorCode::E4006) => StatusCode::NOT_FOUND,
        Some(ErrorCode::E4007) => StatusCode::FORBIDDEN,
        Some(ErrorCode::E4002) => StatusCode::TOO_MANY_REQUESTS,
        Some(ErrorCode::E2002) => StatusCode::GATEWAY_TIMEOUT,
        Some(ErrorCode::E4001) => StatusCode::BAD_GATEWAY,
        Some(ErrorCode::E4000) => StatusCode::INTERNAL_SERVER_ERROR,
        // The module ran and this is its answer.
        _ => StatusCode::OK,
    }
}

fn envelope_response(envelope: &Value) -> Response {
    json_response(status_of(envelope), envelope)
}

/// The cookie a browser holds after signing in: a session id (random, kept
/// by the server), never the token itself.
const COOKIE: &str = "noesis_session";

/// Whether a browser sent this request from another site: an `Origin`
/// whose host is not the `Host` asked for, or `Sec-Fetch-Site: cross-site`.
/// Such a request may not change anything (run a module, sign in): a page
/// elsewhere must not spend the operator's provider account through this
/// server, even with the operator's own session cookie.
fn cross_site(req: &Request) -> bool {
    let h = req.headers();
    if h.get("sec-fetch-site").and_then(|v| v.to_str().ok()).is_some_and(|v| v == "cross-site") {
        return true;
    }
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest).trim_end_matches('/');
    origin == "null" || !origin_host.eq_ignore_ascii_case(host)
}

/// Refuses, before any route runs, a request whose `Host` (and absolute
/// URI, when it has one) does not name this server: a DNS-rebound page
/// reaches nothing. 421 Misdirected Request says just that — this server
/// does not answer for that name — and a browser shows the page nothing.
async fn host_guard(State(st): St, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok());
    let authority = req.uri().authority().map(axum::http::uri::Authority::as_str);
    let admitted = match (host, authority) {
        (Some(h), Some(a)) => st.hosts.admits(h) && st.hosts.admits(a),
        (Some(h), None) => st.hosts.admits(h),
        // HTTP/1.1 requires Host; a request without one names nothing.
        (None, _) => false,
    };
    if admitted {
        return next.run(req).await;
    }
    refusal(
        StatusCode::MISDIRECTED_REQUEST,
        Failure::new(ErrorCode::E4007, "this server does not answer for the host this request names")
            .details(json!({"host": host.map(|h| h.chars().take(200).collect::<String>())}))
            .suggest("use the address the server listens on, or start it with --allow-host NAME"),
    )
}

/// Whether the request carries a credential: the bearer token, or a
/// session cookie this server handed out.
fn signed_in(st: &AppState, req: &Request) -> bool {
    let bearer = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer);
    if let (Some(given), Some(token)) = (bearer, &st.token)
        && constant_time_eq(given.as_bytes(), token.as_bytes())
    {
        return true;
    }
    cookie(req.headers(), COOKIE).is_some_and(|id| st.sessions.holds(id))
}

async fn auth(State(st): St, req: Request, next: Next) -> Response {
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes && cross_site(&req) {
        return refusal(
            StatusCode::FORBIDDEN,
            Failure::new(ErrorCode::E4007, "a request from another site may not change anything here")
                .suggest("call the API from a program, or use the pages this server serves"),
        );
    }
    let path = req.uri().path();
    // `/login` checks what it is given itself.
    if path == "/health" || path == "/login" || (!changes && st.open_reads) || signed_in(&st, &req) {
        return next.run(req).await;
    }
    let wants_page =
        req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    if wants_page {
        return login_response(StatusCode::UNAUTHORIZED, None);
    }
    let message = if changes {
        "a request that changes anything needs `Authorization: Bearer <token>`"
    } else {
        "this server needs `Authorization: Bearer <token>`"
    };
    let mut resp = refusal(
        StatusCode::UNAUTHORIZED,
        Failure::new(ErrorCode::E4007, message).suggest(
            "send the token the server was started with (--token or NOESIS_SERVE_TOKEN, or the one in the token file `noesis serve` names on stderr)",
        ),
    );
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The sign-in page (no user text on it, no inline script or style), with
/// `problem` said above the form.
fn login_response(status: StatusCode, problem: Option<&str>) -> Response {
    let note = problem.map(|p| format!("<p>{p}</p>")).unwrap_or_default();
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · noesis</title></head><body>\
         <main><h1>noesis</h1><p>Sign in with the token this server was started with (<code>--token</code> or \
         <code>NOESIS_SERVE_TOKEN</code>, or the token file <code>noesis serve</code> names), or open the \
         one-time link <code>noesis ui</code> prints.</p>{note}<form method=\"post\" action=\"/login\">\
         <label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required></label> \
         <button>Sign in</button></form></main></body></html>\n"
    );
    let mut resp =
        (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"))], body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    );
    // A one-time link may be in this page's URL: never pass it to another
    // site. Not `no-referrer`: under it Chromium sends `Origin: null` with
    // the form's own post, which is refused as cross-site.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `GET /login`: the form; with `?once=SECRET` (a link from
/// [`Server::login_link`]) the secret is used up and the browser gets a
/// session.
async fn login_page(State(st): St, uri: axum::http::Uri) -> Response {
    let once = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "once")
        .map(|(_, v)| v.into_owned());
    match once {
        Some(secret) if st.sessions.redeem(&secret) => session_response(&st),
        Some(_) => login_response(
            StatusCode::UNAUTHORIZED,
            Some("That sign-in link has been used already or is not this server's: each link works once."),
        ),
        None => login_response(StatusCode::OK, None),
    }
}

/// `POST /login` with `token=…`: the right token gets a session.
async fn login(State(st): St, body: Bytes) -> Response {
    let given = form_urlencoded::parse(&body).find(|(k, _)| k == "token").map(|(_, v)| v.into_owned());
    let right = match (&given, &st.token) {
        (Some(g), Some(t)) => constant_time_eq(g.as_bytes(), t.as_bytes()),
        _ => false,
    };
    if !right {
        return login_response(StatusCode::UNAUTHORIZED, Some("That is not the token this server was started with."));
    }
    session_response(&st)
}

/// A new session in a cookie no script can read (HttpOnly) and no other
/// site can make the browser send (SameSite=Strict), `Secure` over TLS;
/// then back to `/`.
fn session_response(st: &AppState) -> Response {
    let id = match st.sessions.open() {
        Ok(id) => id,
        Err(e) => {
            return refusal(StatusCode::INTERNAL_SERVER_ERROR, Failure::new(ErrorCode::E4000, e.to_string()));
        }
    };
    let secure = if st.tls { "; Secure" } else { "" };
    redirect("/", Some(format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/{secure}")))
}

fn redirect(to: &'static str, cookie: Option<String>) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    resp.headers_mut().insert(header::LOCATION, HeaderValue::from_static(to));
    if let Some(c) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// The credentials of an `Authorization: Bearer …` header (the scheme is
/// case-insensitive, RFC 9110).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// Compares in constant time (for equal lengths; the length is not a
/// secret worth hiding), so the time taken does not tell how much of a
/// guess was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

async fn access_log(State(st): St, req: Request, next: Next) -> Response {
    let Some(log) = st.log.clone() else { return next.run(req).await };
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let started = Instant::now();
    let resp = next.run(req).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    (log.0)(&format!("{method} {path} {} {ms:.1}ms", resp.status().as_u16()));
    resp
}

async fn health(State(st): St) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "in_flight": st.service.in_flight()}),
    )
}

async fn modules(State(st): St) -> Response {
    let service = Arc::clone(&st.service);
    // Loading a changed module reads files and compiles schemas.
    match tokio::task::spawn_blocking(move || service.list()).await {
        Ok(list) => json_response(StatusCode::OK, &json!({ "modules": list })),
        Err(e) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            Failure::new(ErrorCode::E4000, format!("listing modules failed: {e}")),
        ),
    }
}

async fn module_info(State(st): St, Path(name): Path<String>) -> Response {
    match st.service.info(&name) {
        Ok(info) => json_response(StatusCode::OK, &info),
        Err(envelope) => envelope_response(&envelope),
    }
}

async fn openapi() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], OPENAPI).into_response()
}

async fn no_route(method: Method, uri: axum::http::Uri) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        Failure::new(ErrorCode::E1004, format!("no route {method} {}", uri.path()))
            .details(json!({"route": uri.path()}))
            .suggest("GET /openapi.json describes the routes"),
    )
}

async fn wrong_method(method: Method, uri: axum::http::Uri) -> Response {
    refusal(
        StatusCode::METHOD_NOT_ALLOWED,
        Failure::new(ErrorCode::E1004, format!("{} does not take {method}", uri.path()))
            .details(json!({"route": uri.path(), "method": method.as_str()}))
            .suggest("GET /openapi.json describes the routes"),
    )
}

const FIELDS: [&str; 5] = ["module", "input", "args", "provider", "model"];

/// The request body of `/run`, `/run/stream` and `/compose`.
fn run_request(body: Result<Bytes, BytesRejection>) -> Result<RunRequest, Box<Response>> {
    let bad =
        |code: ErrorCode, message: String| Box::new(refusal(StatusCode::BAD_REQUEST, Failure::new(code, message)));
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Box::new(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                Failure::new(ErrorCode::E1005, "the request body is over the server's limit")
                    .suggest("send a smaller input, or start the server with a larger --max-body"),
            ))
        } else {
            bad(ErrorCode::E1001, format!("cannot read the request body: {}", rejection.body_text()))
        }
    })?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| bad(ErrorCode::E1001, format!("the request body is not JSON: {e}")))?;
    let Value::Object(mut body) = value else {
        return Err(bad(ErrorCode::E1001, "the request body must be a JSON object".into()));
    };
    if let Some(unknown) = body.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(bad(
            ErrorCode::E1001,
            format!("unknown field `{unknown}` in the request body (fields: {})", FIELDS.join(", ")),
        ));
    }
    let mut text = |field: &str| -> Result<Option<String>, Box<Response>> {
        match body.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(bad(ErrorCode::E1003, format!("`{field}` must be a string"))),
        }
    };
    let Some(module) = text("module")? else {
        return Err(bad(ErrorCode::E1002, "the request body needs `module`, a module name".into()));
    };
    let (args, provider, model) = (text("args")?, text("provider")?, text("model")?);
    let input = body.remove("input").filter(|v| !v.is_null());
    Ok(RunRequest { module, input, args, provider, model })
}

async fn run(State(st): St, body: Result<Bytes, BytesRejection>) -> Response {
    let request = match run_request(body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    // Dropped with the request when the client goes away, provider call included.
    let envelope = st.service.run(request, None, Some(st.stop_runs.child_token())).await;
    envelope_response(&envelope)
}

async fn compose(State(st): St, body: Result<Bytes, BytesRejection>) -> Response {
    let request = match run_request(body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let envelope = st.service.compose(request, None, Some(st.stop_runs.child_token())).await;
    envelope_response(&envelope)
}

async fn run_stream(State(st): St, body: Result<Bytes, BytesRejection>) -> Response {
    let request = match run_request(body) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    // Refusals before the run keep their status; once the stream starts,
    // the outcome is in the envelope event.
    let prepared = match st.service.prepare(request).await {
        Ok(p) => p,
        Err(envelope) => return envelope_response(&envelope),
    };
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let on_text = OnText(Arc::new(move |t: &str| {
        let _ = tx.send(t.to_owned());
    }));
    let cancel = st.stop_runs.child_token();
    let service = Arc::clone(&st.service);
    let run: RunFuture = Box::pin(async move { prepared.run(&*service, Some(on_text), Some(cancel)).await.envelope });
    // Pings make a vanished client show up as a failed write, which drops
    // the stream and the run with it.
    Sse::new(events(run, rx)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

type RunFuture = Pin<Box<dyn Future<Output = Value> + Send>>;

struct Streaming {
    run: Option<RunFuture>,
    text: mpsc::UnboundedReceiver<String>,
    envelope: Option<Value>,
}

/// `text` events as the model writes, then the `envelope` event. The run
/// lives inside the stream (not a spawned task), so dropping the response
/// drops the run.
fn events(run: RunFuture, text: mpsc::UnboundedReceiver<String>) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = Streaming { run: Some(run), text, envelope: None };
    futures_util::stream::unfold(state, |mut st| async move {
        if let Some(run) = st.run.as_mut() {
            tokio::select! {
                biased;
                Some(t) = st.text.recv() => return Some((Ok(text_event(&t)), st)),
                envelope = run => {
                    // Dropping the finished run drops the sender, so the
                    // receiver below ends after the last chunk.
                    st.run = None;
                    st.envelope = Some(envelope);
                }
            }
        }
        if let Some(t) = st.text.recv().await {
            return Some((Ok(text_event(&t)), st));
        }
        let envelope = st.envelope.take()?;
        Some((Ok(Event::default().event("envelope").data(envelope.to_string())), st))
    })
}

fn text_event(text: &str) -> Event {
    // JSON-encoded so newlines in the text cannot end the event early.
    Event::default().event("text").data(Value::String(text.to_owned()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_starts_after_the_last_event_id_else_after_the_query() {
        use axum::http::{HeaderMap, HeaderValue, Uri};
        let uri: Uri = "/episodes/e1/events?x=1&after=7".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(stream_after(&headers, &uri), 7);
        headers.insert("last-event-id", HeaderValue::from_static(" 12 "));
        assert_eq!(stream_after(&headers, &uri), 12, "a reconnect's header wins");
        assert_eq!(stream_after(&HeaderMap::new(), &"/e?after=x".parse().unwrap()), 0, "not a number: from the start");
        assert_eq!(stream_after(&HeaderMap::new(), &"/e".parse().unwrap()), 0);
    }

    #[test]
    fn bearer_and_compare() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn statuses() {
        let failure = |code| Failure::new(code, "x").into_envelope();
        assert_eq!(status_of(&json!({"ok": true})), StatusCode::OK);
        for (code, status) in [
            (ErrorCode::E1001, 422),
            (ErrorCode::E4006, 404),
            (ErrorCode::E4007, 403),
            (ErrorCode::E4002, 429),
            (ErrorCode::E2002, 504),
            (ErrorCode::E4001, 502),
            (ErrorCode::E4000, 500),
            (ErrorCode::E3001, 200),
            (ErrorCode::E2001, 200),
            (ErrorCode::E1000, 200),
        ] {
            assert_eq!(status_of(&failure(code)).as_u16(), status, "{code:?}");
        }
        let module_code = json!({"ok": false, "error": {"code": "E5001", "message": "x"}});
        assert_eq!(status_of(&module_code), StatusCode::OK);
    }

    #[test]
    fn token_rules() {
        let mut c = ServeConfig::default();
        assert!(c.check().is_ok());
        c.addr = "0.0.0.0:0".parse().unwrap();
        assert!(matches!(c.check(), Err(ServeError::TokenRequired { .. })));
        c.token = Some("  ".into());
        assert!(matches!(c.check(), Err(ServeError::EmptyToken)));
        c.token = Some("t".into());
        assert!(c.check().is_ok());
        c.addr = "[::1]:0".parse().unwrap();
        c.token = None;
        assert!(c.check().is_ok());
        assert!(!format!("{c:?}").contains("\"t\""));
    }
}
