//! The HTTP plumbing every wire format shares: one connection pool, the
//! concurrency cap, timeouts, retries with backoff, and turning statuses and
//! transport failures into [`ProviderError`]s.
//!
//! Wire formats (`openai`, `anthropic`, `gemini`, `ollama`) only build bodies
//! and read answers; they never see a socket.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::error::{ErrorKind, ProviderError};
use crate::retry::{RetryPolicy, backoff, rand01};
use crate::stream::LineSplitter;

/// Connection settings shared by every HTTP provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for the whole call, streamed body included.
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
            .field("base_url", &self.base_url)
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

    /// `base_url` followed by `path`, with exactly one slash between.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path.trim_start_matches('/'))
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

/// One provider's HTTP client.
#[derive(Debug)]
pub(crate) struct HttpCore {
    name: String,
    client: reqwest::Client,
    settings: HttpSettings,
    /// `None` when unlimited. Runs share one provider through
    /// `Arc<dyn Provider>`, so this one cap covers the whole process.
    permits: Option<Semaphore>,
}

/// A request that got no usable HTTP answer.
struct TransportFailure {
    error: ProviderError,
    retryable: bool,
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
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout.min(settings.timeout))
            .timeout(settings.timeout)
            .build()
            .map_err(|e| ProviderError::new(name, ErrorKind::Unavailable, format!("cannot build HTTP client: {e}")))?;
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
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<String, ProviderError> {
        self.post_inner(url, headers, body, None).await
    }

    /// Like [`HttpCore::post`] but hands the body to `on_line` line by line
    /// as it arrives (SSE and NDJSON are both line-based). Retries happen
    /// only before the first byte of a 2xx body: once text has been shown,
    /// sending the request again would show it twice.
    pub(crate) async fn post_streaming(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        on_line: &mut OnLine<'_>,
    ) -> Result<(), ProviderError> {
        self.post_inner(url, headers, body, Some(on_line)).await.map(drop)
    }

    async fn post_inner(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        mut on_line: Option<&mut OnLine<'_>>,
    ) -> Result<String, ProviderError> {
        let policy = self.settings.retry;
        let mut retries = 0u32;
        loop {
            // Held for one attempt only: a call sleeping in backoff must not
            // keep others from the endpoint. Queueing for a permit does not
            // count against the timeout, which bounds the HTTP call itself.
            let permit = match &self.permits {
                Some(s) => s.acquire().await.ok(),
                None => None,
            };
            let sent = self.send(url, headers, body, on_line.as_deref_mut()).await;
            drop(permit);
            let wait = match sent {
                Err(f) if f.retryable && retries < policy.max_retries => backoff(&policy, retries, None, rand01()),
                Err(f) => return Err(f.error.with_attempts(retries + 1)),
                Ok((status, retry_after, _)) if transient_status(status) && retries < policy.max_retries => {
                    backoff(&policy, retries, retry_after, rand01())
                }
                Ok((status, _, text)) if (200..300).contains(&status) => return Ok(text),
                Ok((status, retry_after, text)) => {
                    return Err(self.classify(status, retry_after, &text).with_attempts(retries + 1));
                }
            };
            tokio::time::sleep(wait).await;
            retries += 1;
        }
    }

    async fn send<'f>(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        on_line: Option<&mut OnLine<'f>>,
    ) -> Result<(u16, Option<Duration>, String), TransportFailure> {
        let mut req = self.client.post(url).json(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let mut resp = req.send().await.map_err(|e| self.transport_error(&e, url, false))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| parse_retry_after(s, SystemTime::now()));
        let Some(on_line) = on_line.filter(|_| (200..300).contains(&status)) else {
            let text = resp.text().await.map_err(|e| self.transport_error(&e, url, false))?;
            return Ok((status, retry_after, text));
        };
        let mut lines = LineSplitter::default();
        let mut started = false;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return Err(self.transport_error(&e, url, started)),
            };
            started = true;
            for line in lines.push(&chunk) {
                on_line(&line).map_err(|error| TransportFailure { error, retryable: false })?;
            }
        }
        if let Some(line) = lines.finish() {
            on_line(&line).map_err(|error| TransportFailure { error, retryable: false })?;
        }
        Ok((status, None, String::new()))
    }

    fn transport_error(&self, e: &reqwest::Error, url: &str, streamed: bool) -> TransportFailure {
        if e.is_timeout() {
            // Not retried: the timeout bounds one call, and retrying would
            // silently multiply it.
            return TransportFailure {
                error: self.err(
                    ErrorKind::Timeout(self.settings.timeout),
                    format!("no complete answer from {} within {:?}", host_of(url), self.settings.timeout),
                ),
                retryable: false,
            };
        }
        let mut msg = if e.is_body() || e.is_decode() {
            format!("the answer from {} was cut off", host_of(url))
        } else {
            format!("cannot reach {}", host_of(url))
        };
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg = format!("{msg}: {s}");
            src = s.source();
        }
        // A builder error is a bad URL or header: the same request fails the
        // same way. After streamed text, a retry would repeat it.
        TransportFailure { error: self.err(ErrorKind::Unavailable, msg), retryable: !e.is_builder() && !streamed }
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

/// `scheme://host:port` of a URL: errors name the server, never a query
/// string (Gemini can carry the key there).
fn host_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find(['/', '?']) {
        Some(i) => &url[..after_scheme + i],
        None => url,
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

/// IMF-fixdate only (`Sun, 06 Nov 1994 08:49:37 GMT`): the one form senders
/// must generate.
fn parse_http_date(v: &str) -> Option<SystemTime> {
    let mut parts = v.split_whitespace();
    let _weekday = parts.next()?.strip_suffix(',')?;
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || year < 1970 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
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
    fn context_overflow_is_recognised_across_providers() {
        assert!(mentions_context(r#"{"error":{"code":"context_length_exceeded"}}"#));
        assert!(mentions_context(r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#));
        assert!(mentions_context(
            r#"{"error":{"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}}"#
        ));
        assert!(!mentions_context(r#"{"error":{"message":"bad temperature"}}"#));
    }
}
