//! OpenAI-compatible chat completions (`POST {base}/chat/completions`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::Provider;
use crate::error::{ErrorKind, ProviderError};
use crate::retry::{RetryPolicy, backoff, rand01};
use crate::types::{Capabilities, ChatRequest, ChatResponse, FinishReason, ResponseFormat, StructuredMode, Usage};

/// Settings for an OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Provider name shown in `meta.model` (`openai`, `deepseek`, …).
    pub name: String,
    /// Base URL up to and including the version (`https://api.openai.com/v1`).
    pub base_url: String,
    /// Bearer token; optional for local servers.
    pub api_key: Option<String>,
    /// The model.
    pub model: String,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for the whole call.
    pub timeout: Duration,
    /// Retrying of transient failures (429, 5xx, dropped connections).
    pub retry: RetryPolicy,
    /// Most HTTP requests in flight at once through one provider; 0 means no
    /// limit. Shared by everything holding the same provider.
    pub max_concurrency: usize,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("retry", &self.retry)
            .field("max_concurrency", &self.max_concurrency)
            .finish_non_exhaustive()
    }
}

impl OpenAiConfig {
    /// Defaults for api.openai.com with the given model.
    pub fn openai(model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            name: "openai".to_owned(),
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            model: model.into(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            max_concurrency: 64,
        }
    }
}

/// A request that got no HTTP answer.
struct TransportFailure {
    error: ProviderError,
    /// Whether sending the same request again may help.
    retryable: bool,
}

/// Statuses that say "not now" rather than "not this request".
fn transient_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// A provider for any API that speaks OpenAI chat completions.
#[derive(Debug)]
pub struct OpenAiCompatible {
    config: OpenAiConfig,
    client: reqwest::Client,
    /// Cleared after the endpoint rejects `json_schema`; later calls use JSON mode.
    json_schema_ok: AtomicBool,
    /// Caps requests in flight; `None` when unlimited. Runs share one provider
    /// through `Arc<dyn Provider>`, so this one cap covers the whole process.
    permits: Option<Semaphore>,
}

impl OpenAiCompatible {
    /// A provider with its own connection pool.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiCompatible, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.timeout)
            .build()
            .map_err(|e| {
                ProviderError::new(&config.name, ErrorKind::Unavailable, format!("cannot build HTTP client: {e}"))
            })?;
        // Anything beyond what a semaphore can count is unlimited in practice.
        let permits = match config.max_concurrency {
            0 => None,
            n if n > Semaphore::MAX_PERMITS => None,
            n => Some(Semaphore::new(n)),
        };
        Ok(OpenAiCompatible { config, client, json_schema_ok: AtomicBool::new(true), permits })
    }

    fn err(&self, kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(&self.config.name, kind, message)
    }

    fn body(&self, request: &ChatRequest, mode: StructuredMode) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": request.messages,
        });
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = request.max_tokens {
            body["max_tokens"] = json!(m);
        }
        match (&request.response_format, mode) {
            (ResponseFormat::JsonSchema { name, schema }, StructuredMode::JsonSchema) => {
                // Non-strict: OpenAI's strict mode needs every property
                // required and closed objects, which module schemas are not.
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": sanitize_name(name), "schema": schema, "strict": false}
                });
            }
            (ResponseFormat::JsonSchema { .. } | ResponseFormat::JsonObject, _) => {
                body["response_format"] = json!({"type": "json_object"});
            }
            (ResponseFormat::Text, _) => {}
        }
        body
    }

    async fn send(&self, body: &Value) -> Result<(u16, Option<Duration>, String), TransportFailure> {
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let mut req = self.client.post(&url).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(&e))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = resp.text().await.map_err(|e| self.transport_error(&e))?;
        Ok((status, retry_after, text))
    }

    fn transport_error(&self, e: &reqwest::Error) -> TransportFailure {
        if e.is_timeout() {
            // Not retried: the caller's timeout bounds one call, and retrying
            // would silently multiply it.
            return TransportFailure {
                error: self.err(
                    ErrorKind::Timeout(self.config.timeout),
                    format!("no answer from {} in time", self.config.base_url),
                ),
                retryable: false,
            };
        }
        let mut msg = format!("cannot reach {}", self.config.base_url);
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg = format!("{msg}: {s}");
            src = s.source();
        }
        // A builder error is a bad URL or header: the same request fails the same way.
        TransportFailure { error: self.err(ErrorKind::Unavailable, msg), retryable: !e.is_builder() }
    }

    /// Turns one HTTP answer into the call's result.
    fn answer(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        text: &str,
        mode: StructuredMode,
    ) -> Result<ChatResponse, ProviderError> {
        match status {
            200..=299 => {}
            429 => {
                return Err(self.err(
                    ErrorKind::RateLimited { retry_after },
                    format!("rate limited (HTTP 429): {}", excerpt(text)),
                ));
            }
            401 | 403 => {
                return Err(self.err(
                    ErrorKind::Unavailable,
                    format!("authentication failed (HTTP {status}); check the API key variable: {}", excerpt(text)),
                ));
            }
            500..=599 => {
                return Err(
                    self.err(ErrorKind::Unavailable, format!("server error (HTTP {status}): {}", excerpt(text)))
                );
            }
            _ if mentions_context(text) => {
                return Err(self.err(
                    ErrorKind::ContextOverflow,
                    format!("the prompt is too long for the model (HTTP {status}): {}", excerpt(text)),
                ));
            }
            _ => {
                return Err(self.err(
                    ErrorKind::Rejected { status },
                    format!("request rejected (HTTP {status}): {}", excerpt(text)),
                ));
            }
        }
        let v: Value = serde_json::from_str(text)
            .map_err(|e| self.err(ErrorKind::BadResponse, format!("reply is not JSON ({e}): {}", excerpt(text))))?;
        let choice = v
            .pointer("/choices/0")
            .ok_or_else(|| self.err(ErrorKind::BadResponse, format!("reply has no choices: {}", excerpt(text))))?;
        let content = match choice.pointer("/message/content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(|r| match r {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            _ => FinishReason::Other,
        });
        let usage = v.get("usage").map(|u| Usage {
            input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
            output_tokens: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
        });
        let model = v.get("model").and_then(Value::as_str).unwrap_or(&self.config.model).to_owned();
        Ok(ChatResponse { text: content, model, usage, finish_reason, structured: mode })
    }
}

fn sanitize_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if s.is_empty() { "envelope".to_owned() } else { s }
}

fn excerpt(body: &str) -> String {
    let t = body.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiCompatible {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { json_schema: self.json_schema_ok.load(Ordering::Relaxed), json_mode: true }
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut mode = match request.response_format {
            ResponseFormat::JsonSchema { .. } if self.json_schema_ok.load(Ordering::Relaxed) => {
                StructuredMode::JsonSchema
            }
            ResponseFormat::JsonSchema { .. } | ResponseFormat::JsonObject => StructuredMode::JsonObject,
            ResponseFormat::Text => StructuredMode::Text,
        };
        let policy = self.config.retry;
        let mut retries = 0u32;
        loop {
            let body = self.body(request, mode);
            // Held for one attempt only: a call sleeping in backoff must not
            // keep others from the endpoint. Queueing for a permit does not
            // count against the timeout, which bounds the HTTP call itself.
            let permit = match &self.permits {
                Some(s) => s.acquire().await.ok(),
                None => None,
            };
            let sent = self.send(&body).await;
            drop(permit);
            let wait = match sent {
                Err(f) if f.retryable && retries < policy.max_retries => backoff(&policy, retries, None, rand01()),
                Err(f) => return Err(f.error.with_attempts(retries + 1)),
                Ok((status, _, text))
                    if status == 400 && mode == StructuredMode::JsonSchema && mentions_format(&text) =>
                {
                    // The endpoint does not accept JSON Schema output: fall back
                    // to JSON mode, for this call and every later one. Not a
                    // retry of a transient failure, so it does not count as one.
                    self.json_schema_ok.store(false, Ordering::Relaxed);
                    mode = StructuredMode::JsonObject;
                    continue;
                }
                Ok((status, retry_after, _)) if transient_status(status) && retries < policy.max_retries => {
                    backoff(&policy, retries, retry_after, rand01())
                }
                Ok((status, retry_after, text)) => {
                    return self.answer(status, retry_after, &text, mode).map_err(|e| e.with_attempts(retries + 1));
                }
            };
            tokio::time::sleep(wait).await;
            retries += 1;
        }
    }
}

fn mentions_context(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("context_length") || b.contains("context length") || b.contains("maximum context")
}

fn mentions_format(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("response_format") || b.contains("json_schema")
}
