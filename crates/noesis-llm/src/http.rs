//! The HTTP plumbing every wire format shares: one connection pool, the
//! concurrency cap, timeouts, retries with backoff, and turning statuses and
//! transport failures into [`ProviderError`]s.
//!
//! Wire formats (`openai`, `anthropic`, `gemini`, `ollama`) only build bodies
//! and read answers; they never see a socket.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use backon::Retryable as _;
use futures_util::StreamExt as _;
use reqwest::Url;
use serde_json::Value;
use tokio::sync::{Mutex, Semaphore};

use crate::error::{ErrorKind, ProviderError};
use crate::retry::{RetryPolicy, honour_retry_after};
use crate::stream::{LineSplitter, SseError, SseEvent, sse_events};

/// Connection settings shared by every HTTP provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for the whole call: every attempt, the waits between
    /// them and the streamed body. The clock starts when the first request
    /// goes out (queueing for the concurrency cap before it does not count).
    pub timeout: Duration,
    /// Retrying of transient failures (429, 5xx, dropped connections).
    pub retry: RetryPolicy,
    /// Most HTTP requests in flight at once through one provider; 0 means no
    /// limit. Shared by everything holding the same provider.
    pub max_concurrency: usize,
}

impl Default for HttpSettings {
    fn default() -> HttpSettings {
        HttpSettings {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            max_concurrency: 64,
        }
    }
}

/// Where an HTTP provider lives and how to talk to it.
#[derive(Clone)]
pub struct EndpointConfig {
    /// Provider name shown in `meta.model` (`openai`, `anthropic`, …).
    pub name: String,
    /// Base URL (`https://api.openai.com/v1`, `http://127.0.0.1:11434`, …).
    pub base_url: String,
    /// The API key; optional for local servers. Never logged.
    pub api_key: Option<String>,
    /// The model.
    pub model: String,
    /// Timeouts, retries and the concurrency cap.
    pub http: HttpSettings,
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("http", &self.http)
            .finish()
    }
}

impl EndpointConfig {
    /// A configuration with default HTTP settings.
    pub fn new(name: &str, base_url: &str, model: &str) -> EndpointConfig {
        EndpointConfig {
            name: name.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: None,
            model: model.to_owned(),
            http: HttpSettings::default(),
        }
    }

    /// Defaults for api.openai.com with the given model.
    pub fn openai(model: &str) -> EndpointConfig {
        EndpointConfig::new("openai", "https://api.openai.com/v1", model)
    }

    /// `base_url` followed by the segments of `path` (which may end in
    /// `?query`, joined to any query the base URL has). A base URL that is not
    /// an absolute `http(s)` URL is an error naming it, credentials redacted.
    pub(crate) fn url(&self, path: &str) -> Result<Url, ProviderError> {
        join_url(&self.base_url, path).map_err(|why| {
            ProviderError::new(
                &self.name,
                ErrorKind::Unavailable,
                format!("the base URL {} is not usable: {why}", redact_url(&self.base_url)),
            )
        })
    }
}

/// `base` followed by the segments of `path` (`a/b?q=1`).
pub(crate) fn join_url(base: &str, path: &str) -> Result<Url, String> {
    let mut url = Url::parse(base.trim()).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("the scheme must be http or https, not {}", url.scheme()));
    }
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    url.path_segments_mut()
        .map_err(|()| "it cannot take a path".to_owned())?
        .pop_if_empty()
        .extend(path.split('/').filter(|s| !s.is_empty()));
    if let Some(q) = query {
        let joined = match url.query() {
            Some(base_query) if !base_query.is_empty() => format!("{base_query}&{q}"),
            _ => q.to_owned(),
        };
        url.set_query(Some(&joined));
    }
    Ok(url)
}

/// `url` fit to print: any `user:password@` becomes `***@`. Base URLs may
/// carry credentials for a proxy; messages, logs and `doctor` must not.
pub fn redact_url(url: &str) -> String {
    if let Some(mut parsed) = Url::parse(url.trim()).ok().filter(Url::has_host) {
        if parsed.username().is_empty() && parsed.password().is_none() {
            return url.to_owned();
        }
        if parsed.set_username("***").is_ok() && parsed.set_password(None).is_ok() {
            return parsed.to_string();
        }
    }
    // Not a URL with a host to this parser (`host:port` forms read as a
    // scheme and a path): cut anything before an `@` in the authority.
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}***@{}", &url[..start], &url[start + at + 1..]),
        None => url.to_owned(),
    }
}

/// Implements [`crate::Provider`] for an HTTP provider whose struct has a
/// `config: EndpointConfig` and an inherent
/// `async fn call(&self, &ChatRequest, Option<TextSink>)`; `$caps` computes
/// its capabilities from `$this`.
macro_rules! http_provider {
    ($ty:ty, |$this:ident| $caps:expr) => {
        #[async_trait::async_trait]
        impl crate::Provider for $ty {
            fn name(&self) -> &str {
                &self.config.name
            }

            fn model(&self) -> &str {
                &self.config.model
            }

            fn capabilities(&self) -> crate::types::Capabilities {
                let $this = self;
                $caps
            }

            async fn chat(
                &self,
                request: &crate::types::ChatRequest,
            ) -> Result<crate::types::ChatResponse, crate::error::ProviderError> {
                self.call(request, None).await
            }

            async fn chat_stream(
                &self,
                request: &crate::types::ChatRequest,
                on_text: crate::TextSink<'_>,
            ) -> Result<crate::types::ChatResponse, crate::error::ProviderError> {
                self.call(request, Some(on_text)).await
            }
        }
    };
}
pub(crate) use http_provider;

/// Receives a streamed body line by line; an error stops the stream.
pub(crate) type OnLine<'f> = dyn FnMut(&str) -> Result<(), ProviderError> + Send + 'f;

/// Receives a streamed body event by event; an error stops the stream.
pub(crate) type OnEvent<'f> = dyn FnMut(&SseEvent) -> Result<(), ProviderError> + Send + 'f;

/// Where a streamed 2xx body goes.
pub(crate) enum Sink<'s, 'f> {
    /// NDJSON: one line at a time.
    Lines(&'s mut OnLine<'f>),
    /// `text/event-stream`: one event at a time.
    Events(&'s mut OnEvent<'f>),
}

/// One provider's HTTP client.
#[derive(Debug)]
pub(crate) struct HttpCore {
    name: String,
    /// Built on the first request, for that request's scheme: a plain
    /// `http://` endpoint (a local model server, the fake server of the
    /// tests) never loads the system's TLS roots, which costs a read of
    /// every file in `/etc/ssl/certs` per process.
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    settings: HttpSettings,
    /// `None` when unlimited. Runs share one provider through
    /// `Arc<dyn Provider>`, so this one cap covers the whole process.
    permits: Option<Semaphore>,
}

/// One attempt that did not give a usable 2xx answer.
struct Failure {
    error: ProviderError,
    retryable: bool,
    /// The server's `Retry-After`, when it gave one.
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: ProviderError) -> Failure {
        Failure { error, retryable: false, retry_after: None }
    }
}

/// Statuses that say "not now" rather than "not this request": 408, 429 and
/// the 5xx class (Cloudflare's 520–524, Anthropic's 529 "overloaded"), less
/// the few 5xx that describe the request or the server's setup and so fail
/// the same way every time.
fn transient_status(status: u16) -> bool {
    match status {
        408 | 429 => true,
        // Not Implemented, HTTP Version Not Supported, Variant Also
        // Negotiates, Loop Detected, Not Extended, Network Authentication
        // Required, and Cloudflare's SSL handshake / invalid certificate.
        501 | 505 | 506 | 508 | 510 | 511 | 525 | 526 => false,
        500..=599 => true,
        _ => false,
    }
}

impl HttpCore {
    pub(crate) fn new(name: &str, settings: HttpSettings) -> Result<HttpCore, ProviderError> {
        let client = std::sync::OnceLock::new();
        // Anything beyond what a semaphore can count is unlimited in practice.
        let permits = match settings.max_concurrency {
            0 => None,
            n if n > Semaphore::MAX_PERMITS => None,
            n => Some(Semaphore::new(n)),
        };
        Ok(HttpCore { name: name.to_owned(), client, settings, permits })
    }

    pub(crate) fn err(&self, kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(&self.name, kind, message)
    }

    /// POSTs `body` as JSON and returns the 2xx body, retrying transient
    /// failures. Any other status becomes a classified error.
    pub(crate) async fn post(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<String, ProviderError> {
        self.post_inner(url, headers, body, None).await
    }

    /// Like [`HttpCore::post`] but hands the 2xx body to `sink` as it
    /// arrives. Retries happen only before the first byte of a 2xx body:
    /// once text has been shown, sending the request again would show it
    /// twice. A server that ignored the request to stream and answered
    /// with one JSON body gives that body back instead (`Some`).
    pub(crate) async fn post_streaming(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: &Value,
        sink: Sink<'_, '_>,
    ) -> Result<Option<String>, ProviderError> {
        self.post_inner(url, headers, body, Some(sink)).await.map(|whole| (!whole.is_empty()).then_some(whole))
    }

    async fn post_inner(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: &Value,
        sink: Option<Sink<'_, '_>>,
    ) -> Result<String, ProviderError> {
        let attempts = AtomicU32::new(0);
        let deadline = OnceLock::new();
        // Each attempt borrows the sink in turn; the lock is never contended.
        let sink = sink.map(Mutex::new);
        let (attempts_at, deadline_at, sink_at) = (&attempts, &deadline, &sink);
        let attempt = move || async move {
            // Held for one attempt only: a call sleeping in backoff must not
            // keep others from the endpoint.
            let permit = match &self.permits {
                Some(s) => s.acquire().await.ok(),
                None => None,
            };
            let deadline = *deadline_at.get_or_init(|| Instant::now() + self.settings.timeout);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // The wait for a permit used up the time: nothing is sent.
                return Err(Failure::fatal(self.timeout_error(url)));
            }
            attempts_at.fetch_add(1, Ordering::Relaxed);
            let mut sink = match sink_at {
                Some(m) => Some(m.lock().await),
                None => None,
            };
            let sent = self.send(url, headers, body, sink.as_deref_mut(), left).await;
            drop(permit);
            sent
        };
        let result = attempt
            .retry(self.settings.retry.delays())
            .when(|f: &Failure| f.retryable)
            .adjust(|f: &Failure, jitter: Option<Duration>| {
                let wait = honour_retry_after(jitter?, f.retry_after);
                // A wait that would end past the deadline is not taken: the
                // error at hand is a better answer than a timeout later.
                let deadline = deadline_at.get()?;
                (Instant::now() + wait < *deadline).then_some(wait)
            })
            .await;
        result.map_err(|f| f.error.with_attempts(attempts.load(Ordering::Relaxed).max(1)))
    }

    /// One attempt, given `left` until the call's deadline.
    async fn send(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: &Value,
        sink: Option<&mut Sink<'_, '_>>,
        left: Duration,
    ) -> Result<String, Failure> {
        let client = self
            .client
            .get_or_init(|| {
                let builder = reqwest::Client::builder()
                    .connect_timeout(self.settings.connect_timeout.min(self.settings.timeout));
                // No roots at all for plain HTTP: nothing to verify.
                let builder = if url.scheme() == "http" { builder.tls_certs_only(Vec::new()) } else { builder };
                builder.build().map_err(|e| format!("cannot build HTTP client: {e}"))
            })
            .as_ref()
            .map_err(|e| Failure::fatal(self.err(ErrorKind::Unavailable, e.clone())))?;
        let mut req = client.post(url.clone()).json(body).timeout(left);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(&e, url, false))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| parse_retry_after(s, SystemTime::now()));
            let text = resp.text().await.map_err(|e| self.transport_error(&e, url, false))?;
            return Err(Failure {
                error: self.classify(status, retry_after, &text),
                retryable: transient_status(status),
                retry_after,
            });
        }
        let whole = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        let Some(sink) = sink.filter(|_| !whole) else {
            return resp.text().await.map_err(|e| self.transport_error(&e, url, false));
        };
        let started = AtomicBool::new(false);
        let bytes = resp.bytes_stream().inspect(|_| started.store(true, Ordering::Relaxed));
        match sink {
            Sink::Lines(on_line) => {
                let mut bytes = std::pin::pin!(bytes);
                let mut lines = LineSplitter::default();
                while let Some(chunk) = bytes.next().await {
                    let chunk = chunk.map_err(|e| self.transport_error(&e, url, started.load(Ordering::Relaxed)))?;
                    for line in lines.push(&chunk) {
                        on_line(&line).map_err(Failure::fatal)?;
                    }
                }
                if let Some(line) = lines.finish() {
                    on_line(&line).map_err(Failure::fatal)?;
                }
            }
            Sink::Events(on_event) => {
                let mut events = std::pin::pin!(sse_events(bytes));
                while let Some(event) = events.next().await {
                    let event = event.map_err(|e| match e {
                        SseError::Body(body) => match body.downcast::<reqwest::Error>() {
                            Ok(e) => self.transport_error(&e, url, started.load(Ordering::Relaxed)),
                            Err(other) => Failure::fatal(
                                self.err(ErrorKind::Unavailable, format!("the event stream broke off: {other}")),
                            ),
                        },
                        SseError::Utf8Parse(_) => {
                            Failure::fatal(self.err(ErrorKind::BadResponse, "the event stream is not valid UTF-8"))
                        }
                        other => Failure::fatal(
                            self.err(ErrorKind::BadResponse, format!("the event stream cannot be read: {other}")),
                        ),
                    })?;
                    on_event(&event).map_err(Failure::fatal)?;
                }
            }
        }
        Ok(String::new())
    }

    fn timeout_error(&self, url: &Url) -> ProviderError {
        let timeout = self.settings.timeout;
        self.err(
            ErrorKind::Timeout(timeout),
            format!("no complete answer from {} within {timeout:?}", host_of(url.as_str())),
        )
    }

    fn transport_error(&self, e: &reqwest::Error, url: &Url, streamed: bool) -> Failure {
        if e.is_timeout() {
            // The deadline covers the whole call, so there is no time left
            // for another try.
            return Failure::fatal(self.timeout_error(url));
        }
        let host = host_of(url.as_str());
        let mut msg = if e.is_body() || e.is_decode() {
            format!("the answer from {host} was cut off")
        } else {
            format!("cannot reach {host}")
        };
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg = format!("{msg}: {s}");
            src = s.source();
        }
        // A builder error is a bad URL or header: the same request fails the
        // same way. After streamed text, a retry would repeat it.
        Failure {
            error: self.err(ErrorKind::Unavailable, msg),
            retryable: !e.is_builder() && !streamed,
            retry_after: None,
        }
    }

    /// A non-2xx answer as an error.
    pub(crate) fn classify(&self, status: u16, retry_after: Option<Duration>, text: &str) -> ProviderError {
        match status {
            429 => {
                self.err(ErrorKind::RateLimited { retry_after }, format!("rate limited (HTTP 429): {}", excerpt(text)))
            }
            401 | 403 => self.err(
                ErrorKind::Unavailable,
                format!("authentication failed (HTTP {status}); check the API key variable: {}", excerpt(text)),
            ),
            500..=599 | 408 => {
                self.err(ErrorKind::Unavailable, format!("server error (HTTP {status}): {}", excerpt(text)))
            }
            _ if mentions_context(text) => self.err(
                ErrorKind::ContextOverflow,
                format!("the prompt is too long for the model (HTTP {status}): {}", excerpt(text)),
            ),
            _ => {
                self.err(ErrorKind::Rejected { status }, format!("request rejected (HTTP {status}): {}", excerpt(text)))
            }
        }
    }

    /// The body of a 2xx answer as JSON.
    pub(crate) fn parse_json(&self, text: &str) -> Result<Value, ProviderError> {
        serde_json::from_str(text)
            .map_err(|e| self.err(ErrorKind::BadResponse, format!("reply is not JSON ({e}): {}", excerpt(text))))
    }

    /// A streamed line that should be JSON.
    pub(crate) fn parse_event(&self, data: &str) -> Result<Value, ProviderError> {
        serde_json::from_str(data)
            .map_err(|e| self.err(ErrorKind::BadResponse, format!("stream event is not JSON ({e}): {}", excerpt(data))))
    }
}

/// `scheme://host:port` of a URL: errors name the server, never a path,
/// a query string (Gemini can carry the key there) or credentials.
fn host_of(url: &str) -> String {
    match Url::parse(url).ok().as_ref().and_then(|u| Some((u.scheme(), u.host_str()?, u.port()))) {
        Some((scheme, host, Some(port))) => format!("{scheme}://{host}:{port}"),
        Some((scheme, host, None)) => format!("{scheme}://{host}"),
        None => {
            let redacted = redact_url(url);
            let after_scheme = redacted.find("://").map_or(0, |i| i + 3);
            let end = redacted[after_scheme..].find(['/', '?', '#']).map_or(redacted.len(), |i| after_scheme + i);
            redacted[..end].to_owned()
        }
    }
}

fn mentions_context(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("context_length")
        || b.contains("context length")
        || b.contains("maximum context")
        || b.contains("prompt is too long")
        || b.contains("too many tokens")
        || (b.contains("input token count") && b.contains("exceeds the maximum"))
}

/// At most 300 characters of a body, for error messages.
pub(crate) fn excerpt(body: &str) -> String {
    let t = body.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3).
/// A date in the past means "now".
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An HTTP date (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete RFC 850
/// and asctime forms recipients must also accept).
fn parse_http_date(v: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), Some(Duration::from_secs(10)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Tue, 29 Feb 2000 00:00:00 GMT", now).map(|d| d.as_secs() > 0), Some(true));
        for bad in [
            "",
            "soon",
            "-1",
            "Sun 06 Nov 1994 08:49:47 GMT",
            "Sun, 06 Foo 1994 08:49:47 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn host_of_drops_paths_and_queries() {
        assert_eq!(host_of("https://x.example/v1beta/models/m:generateContent?key=SECRET"), "https://x.example");
        assert_eq!(host_of("http://127.0.0.1:9/api/chat"), "http://127.0.0.1:9");
        assert_eq!(host_of("http://h?key=SECRET"), "http://h");
        assert_eq!(host_of("nohost"), "nohost");
    }

    #[test]
    fn host_of_drops_credentials() {
        assert_eq!(host_of("https://user:pw@x.example:8443/v1?key=SECRET"), "https://x.example:8443");
        assert_eq!(host_of("http://[::1]:9/v1"), "http://[::1]:9");
        assert_eq!(host_of("weird://u:pw@h:1/x"), "weird://h:1");
        assert_eq!(host_of("u:pw@nohost/x"), "***@nohost");
    }

    #[test]
    fn redact_url_hides_userinfo_and_leaves_the_rest() {
        for (url, want) in [
            ("https://user:pass@proxy.example/v1", "https://***@proxy.example/v1"),
            ("http://token@127.0.0.1:8080/v1?x=1", "http://***@127.0.0.1:8080/v1?x=1"),
            ("http://:pass@h/", "http://***@h/"),
            ("https://api.openai.com/v1", "https://api.openai.com/v1"),
            ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
            ("http://u:p@[::1", "http://***@[::1"),
            ("u:p@host:1/x", "***@host:1/x"),
            ("no url at all", "no url at all"),
        ] {
            assert_eq!(redact_url(url), want, "{url}");
        }
        let mut cfg = EndpointConfig::new("p", "https://user:s3cret@proxy.example/v1", "m");
        cfg.api_key = Some("sk-secret".into());
        let debug = format!("{cfg:?}");
        assert!(!debug.contains("s3cret") && !debug.contains("sk-secret"), "{debug}");
    }

    #[test]
    fn urls_join_segments_and_queries() {
        let url = |base: &str, path: &str| join_url(base, path).map(String::from);
        assert_eq!(url("https://h/v1", "chat/completions").unwrap(), "https://h/v1/chat/completions");
        assert_eq!(url("https://h/v1/", "/chat/completions").unwrap(), "https://h/v1/chat/completions");
        assert_eq!(url("http://h:1", "api/chat").unwrap(), "http://h:1/api/chat");
        assert_eq!(
            url("https://h/v1beta", "models/m:streamGenerateContent?alt=sse").unwrap(),
            "https://h/v1beta/models/m:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            url("https://h/openai?api-version=1", "chat/completions?x=2").unwrap(),
            "https://h/openai/chat/completions?api-version=1&x=2"
        );
        assert!(url("127.0.0.1:8000/v1", "models").is_err());
        assert!(url("ftp://h/v1", "models").unwrap_err().contains("http or https"));
        assert!(url("", "models").is_err());
    }

    #[test]
    fn context_overflow_is_recognised_across_providers() {
        assert!(mentions_context(r#"{"error":{"code":"context_length_exceeded"}}"#));
        assert!(mentions_context(r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#));
        assert!(mentions_context(
            r#"{"error":{"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}}"#
        ));
        assert!(!mentions_context(r#"{"error":{"message":"bad temperature"}}"#));
    }
}
