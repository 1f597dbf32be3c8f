//! LLM providers behind one trait.
//!
//! [`Provider`] is the only thing the rest of noesis knows about a model:
//! a chat request in, text (and usage) out. Implementations here:
//! [`OpenAiCompatible`] (any chat-completions API over HTTP),
//! [`Scripted`] (answers from a list or a file) and [`TestModel`]
//! (fabricates a schema-valid reply with no model at all).
//!
//! Every model call a caller makes through [`ChatSpan`] is a GenAI
//! `chat {model}` span (names and the opt-in texts from `noesis-trace`,
//! which sits below this crate).
//!
//! Architecture invariant: this crate knows nothing about modules or
//! envelopes; it moves messages and JSON Schemas, never interprets them.
//!
//! ```
//! use noesis_llm::{ChatRequest, Message, Provider, Scripted};
//! let p = Scripted::new(vec!["{\"ok\": true}".to_owned()]);
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let reply = rt.block_on(p.chat(&ChatRequest::new(vec![Message::user("hi")]))).unwrap();
//! assert_eq!(reply.text, "{\"ok\": true}");
//! ```
#![deny(missing_docs)]

mod anthropic;
mod cassette;
mod error;
mod gemini;
mod http;
mod ollama;
mod openai;
pub mod policy;
mod presets;
mod pricing;
mod probe;
mod retry;
mod router;
mod scripted;
pub mod span;
mod stream;
mod strict;
mod test_model;
pub mod text_tools;
mod types;

pub use anthropic::{ANTHROPIC_VERSION, Anthropic};
pub use cassette::{Recorder, Replayer};
pub use error::{ErrorKind, ProviderError};
pub use gemini::Gemini;
pub use http::{EndpointConfig, HttpSettings, redact_url};
pub use ollama::{Ollama, normalize_host};
pub use openai::OpenAiCompatible;
pub use presets::{PRESETS, Preset, Wire, preset, resolve};
pub use pricing::{
    Budget, BudgetMeter, OUTPUT_ALLOWANCE, Price, PriceTable, Refusal, Reservation, Spent, context_window,
    estimate_request_tokens, estimate_tokens,
};
pub use probe::{Probe, probe};
pub use retry::{MAX_RETRY_AFTER, RetryPolicy, backoff};
pub use router::{Deadline, Fallback, Route, route};
pub use scripted::Scripted;
pub use span::ChatSpan;
pub use strict::{Strict, strictify};
pub use test_model::{TestModel, fabricate};
pub use text_tools::TextTools;
pub use types::{
    Capabilities, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, StructuredMode, ToolCall,
    ToolChoice, ToolSpec, Usage,
};

/// Receives text as a streaming provider produces it.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A language model behind some API.
///
/// Object-safe so runs can hold `Arc<dyn Provider>`; later capabilities
/// (tool calls, streaming) arrive as provided methods with defaults, so
/// existing implementations keep compiling.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The provider's short name (`openai`, `test`, …).
    fn name(&self) -> &str;
    /// The model asked for.
    fn model(&self) -> &str;
    /// What this provider can do.
    fn capabilities(&self) -> Capabilities;
    /// One chat completion.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError>;

    /// One chat completion whose text is handed to `on_text` piece by piece
    /// as it arrives; the result is the same complete reply [`Provider::chat`]
    /// gives. Providers that cannot stream hand over the whole text at once.
    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        let response = self.chat(request).await?;
        on_text(&response.text);
        Ok(response)
    }

    /// The model's context window in tokens, when known: by default the
    /// built-in table's entry for [`Provider::model`].
    fn context_window(&self) -> Option<u64> {
        context_window(self.model())
    }
}
