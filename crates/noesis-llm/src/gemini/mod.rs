//! Google Gemini `generateContent` (`POST {base}/models/{model}:generateContent`),
//! plain and streamed (`:streamGenerateContent?alt=sse`), with native
//! function calling and schema-enforced JSON output.
//!
//! Structured output goes through `responseSchema` (an OpenAPI-3 subset) when
//! [`schema::to_response_schema`] can express the JSON Schema there, and through
//! `responseJsonSchema` (JSON Schema as is) otherwise; the API enforces both.
//! The runtime validates every reply against the original schema afterwards,
//! so the conversion may loosen a schema but never tighten it.
//!
//! This file holds the provider and the calls it remembers between turns;
//! `request` builds the body, `reply` folds answers and stream chunks, and
//! `schema` converts JSON Schema to Gemini's subset.

mod reply;
mod request;
mod schema;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::TextSink;
use crate::error::{ErrorKind, ProviderError};
use crate::http::{EndpointConfig, HttpCore, Sink, excerpt};
use crate::types::{Capabilities, ChatRequest, ChatResponse, StructuredMode, ToolCall};

use reply::{Fold, finish_reason};
use request::{Output, body, fallback, plan};

/// Tool calls remembered for signatures and ids; oldest forgotten first.
const MEMORY_CAP: usize = 4096;

/// A provider for the Gemini API (Google AI Studio keys).
#[derive(Debug)]
pub struct Gemini {
    config: EndpointConfig,
    http: HttpCore,
    /// Numbers the ids made up for calls the API gave none.
    next_call: AtomicU64,
    memory: Mutex<CallMemory>,
}

impl Gemini {
    /// Where the public API lives.
    pub const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com/v1beta";

    /// A provider with its own connection pool and concurrency cap. The key
    /// travels in the `x-goog-api-key` header, never in the URL.
    pub fn new(config: EndpointConfig) -> Result<Gemini, ProviderError> {
        let http = HttpCore::new(&config.name, config.http)?;
        Ok(Gemini { config, http, next_call: AtomicU64::new(0), memory: Mutex::new(CallMemory::default()) })
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.config.api_key {
            Some(key) => vec![("x-goog-api-key", key.clone())],
            None => Vec::new(),
        }
    }

    fn url(&self, stream: bool) -> Result<reqwest::Url, ProviderError> {
        let model = self.config.model.trim_start_matches("models/");
        if stream {
            self.config.url(&format!("models/{model}:streamGenerateContent?alt=sse"))
        } else {
            self.config.url(&format!("models/{model}:generateContent"))
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, CallMemory> {
        // The memory holds no invariant a panicking holder could break.
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let url = self.url(on_text.is_some())?;
        let headers = self.headers();
        let (mut mode, mut output) = plan(&request.response_format);
        // After a fallback the API is no longer given the schema, so the
        // prompt carries it instead.
        let schema_in_prompt = crate::types::with_schema_in_prompt(request);
        loop {
            let sent = match (&schema_in_prompt, &output) {
                (Some(with_schema), Output::JsonMime | Output::Text) => with_schema,
                _ => request,
            };
            let body = body(sent, &output, &self.memory());
            let result = match on_text {
                None => match self.http.post(&url, &headers, &body).await {
                    Ok(text) => self.http.parse_json(&text).and_then(|v| {
                        let mut fold = Fold::new(&self.config.model);
                        fold.chunk(&v, None).map_err(|m| self.http.err(ErrorKind::BadResponse, m))?;
                        Ok(fold)
                    }),
                    Err(e) => Err(e),
                },
                Some(sink) => {
                    let mut fold = Fold::new(&self.config.model);
                    let mut on_event = |ev: &crate::stream::SseEvent| self.event(&mut fold, &ev.data, sink);
                    let streamed = self.http.post_streaming(&url, &headers, &body, Sink::Events(&mut on_event)).await;
                    streamed.and_then(|_| {
                        if fold.finish.is_none() {
                            return Err(self.http.err(
                                ErrorKind::Unavailable,
                                format!(
                                    "the stream ended early after {} chunks, before the reply was finished",
                                    fold.chunks
                                ),
                            ));
                        }
                        Ok(fold)
                    })
                }
            };
            match result {
                Ok(fold) => return Ok(self.finish(fold, mode)),
                Err(e) => match fallback(mode, &e) {
                    // Not a retry of a transient failure, so not counted as one.
                    Some(next) => (mode, output) = next,
                    None => return Err(self.reclassify(e)),
                },
            }
        }
    }

    fn event(&self, fold: &mut Fold, data: &str, sink: TextSink<'_>) -> Result<(), ProviderError> {
        let v = self.http.parse_event(data)?;
        if let Some(err) = v.get("error") {
            return Err(self
                .http
                .err(ErrorKind::Unavailable, format!("error in stream: {}", excerpt(&err.to_string()))));
        }
        fold.chunk(&v, Some(sink)).map_err(|m| self.http.err(ErrorKind::BadResponse, m))
    }

    /// Gives made-up ids to calls without one and remembers every call's
    /// signature for when the conversation comes back.
    fn finish(&self, fold: Fold, mode: StructuredMode) -> ChatResponse {
        let mut memory = self.memory();
        let tool_calls = fold
            .calls
            .into_iter()
            .map(|c| {
                let from_api = c.id.is_some();
                let id = c.id.unwrap_or_else(|| format!("call_{}", self.next_call.fetch_add(1, Ordering::Relaxed)));
                memory.remember(&id, Remembered { from_api, signature: c.signature });
                ToolCall { id, name: c.name, arguments: c.args }
            })
            .collect::<Vec<_>>();
        let finish_reason = fold.finish.as_deref().map(|r| finish_reason(r, !tool_calls.is_empty()));
        ChatResponse {
            text: fold.text,
            model: fold.model,
            usage: fold.usage,
            finish_reason,
            structured: mode,
            tool_calls,
            served_by: None,
        }
    }

    /// Gemini answers some failures with a plain 400 that other APIs give a
    /// status or wording of their own; and its error bodies may quote the
    /// key it was sent.
    fn reclassify(&self, mut e: ProviderError) -> ProviderError {
        if let Some(key) = self.config.api_key.as_deref().filter(|k| !k.is_empty()) {
            e.message = e.message.replace(key, "<redacted>");
        }
        if let ErrorKind::Rejected { status: 400 } = e.kind {
            let m = e.message.to_ascii_lowercase();
            if m.contains("api_key_invalid") || m.contains("api key not valid") || m.contains("api key not found") {
                e.kind = ErrorKind::Unavailable;
                e.message = format!("authentication failed; check the API key variable: {}", e.message);
            } else if m.contains("input token count") && m.contains("exceeds the maximum") {
                e.kind = ErrorKind::ContextOverflow;
                e.message = format!("the prompt is too long for the model: {}", e.message);
            }
        }
        e
    }
}

crate::http::http_provider!(Gemini, |_this| Capabilities {
    json_schema: true,
    json_mode: true,
    tools: true,
    streaming: true
});

// ---------------------------------------------------------------------------
// Tool calls remembered between turns
// ---------------------------------------------------------------------------

/// What the API said about one tool call that [`ToolCall`] has no room for.
#[derive(Debug, Clone, PartialEq, Default)]
struct Remembered {
    /// The id came from the API (and must go back); otherwise it was made up.
    from_api: bool,
    /// The call's `thoughtSignature`.
    signature: Option<String>,
}

#[derive(Debug, Default)]
struct CallMemory {
    by_id: HashMap<String, Remembered>,
    order: VecDeque<String>,
}

impl CallMemory {
    fn remember(&mut self, id: &str, r: Remembered) {
        if self.by_id.insert(id.to_owned(), r).is_none() {
            self.order.push_back(id.to_owned());
        }
        while self.order.len() > MEMORY_CAP {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }

    fn get(&self, id: &str) -> Option<&Remembered> {
        self.by_id.get(id)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_forgets_the_oldest_beyond_its_cap() {
        let mut m = CallMemory::default();
        for i in 0..=MEMORY_CAP {
            m.remember(&format!("c{i}"), Remembered::default());
        }
        assert!(m.get("c0").is_none());
        assert!(m.get("c1").is_some());
        assert_eq!(m.by_id.len(), MEMORY_CAP);
    }
}
