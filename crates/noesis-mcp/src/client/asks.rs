//! What a server asks of the client: `roots/list` (the workspace),
//! `sampling/createMessage` (a model call) and `elicitation/create` (a
//! question for a person).
//!
//! A connection is shared by every run a server serves, but a model call
//! must be answered by one run's model and paid from that run's budget, and
//! a question goes to that run's person. The protocol does not say which of
//! the client's requests a server's request belongs to, so it is tied to
//! the tool call in flight: each call registers the run's [`Answers`] for
//! its length, and a request that arrives while calls of exactly one run
//! are in flight is that run's. None in flight, or calls of several runs:
//! the model call is refused and the question declined, rather than charged
//! or shown to a run that did not cause it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use noesis_agent::{ModelRouter, ToolSpend};
use noesis_llm::{ChatRequest, ChatResponse, Message, PriceTable, Role};
use serde_json::{Map, Value, json};

/// The role a server's model call is routed as (`[agent.roles.mcp_sampling]`
/// can give it its own provider, model or cost cap).
pub const SAMPLING_ROLE: &str = "mcp_sampling";

/// Answers a server's model calls (`sampling/createMessage`).
pub trait Sampler: Send + Sync {
    /// The reply to `request` from the server `server`, and what it cost;
    /// an error is sent to the server as the request's error.
    fn sample<'a>(&'a self, server: &'a str, request: ChatRequest) -> BoxFuture<'a, Result<Sampled, String>>;
}

/// A model call made for a server.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// The reply.
    pub response: ChatResponse,
    /// What it spent, metered to the run whose call it served.
    pub spent: ToolSpend,
}

/// A server's question for a person (`elicitation/create`, form mode).
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    /// What the server asks.
    pub message: String,
    /// The JSON Schema of the answer (an object of primitive fields).
    pub schema: Value,
}

/// A person's answer to an [`Elicitation`].
#[derive(Debug, Clone, PartialEq)]
pub enum Elicited {
    /// The answer, an object the schema describes.
    Accept(Map<String, Value>),
    /// The person said no.
    Decline,
    /// The question was dismissed without an answer.
    Cancel,
}

/// Puts a server's questions to a person.
pub trait Elicitor: Send + Sync {
    /// The answer to `request` of the server `server`.
    fn elicit<'a>(&'a self, server: &'a str, request: Elicitation) -> BoxFuture<'a, Elicited>;
}

/// What answers a server's requests made during one run's calls. Nothing
/// set: model calls are refused and questions declined.
#[derive(Clone, Default)]
pub struct Answers {
    /// Answers model calls (the run's router).
    pub sampler: Option<Arc<dyn Sampler>>,
    /// Puts questions to the run's person.
    pub elicitor: Option<Arc<dyn Elicitor>>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers")
            .field("sampler", &self.sampler.is_some())
            .field("elicitor", &self.elicitor.is_some())
            .finish()
    }
}

/// A sampler that sends a server's model call through a run's router (as
/// [`SAMPLING_ROLE`]) and prices the reply with the run's prices.
pub struct RouterSampler {
    /// The run's router.
    pub router: Arc<dyn ModelRouter>,
    /// The run's prices (a reply without a price costs nothing).
    pub prices: Arc<PriceTable>,
}

impl Sampler for RouterSampler {
    fn sample<'a>(&'a self, _server: &'a str, request: ChatRequest) -> BoxFuture<'a, Result<Sampled, String>> {
        Box::pin(async move {
            let (provider, _why) = self.router.route(SAMPLING_ROLE, &request)?;
            let response = provider.chat(&request).await.map_err(|e| format!("the model call failed: {e}"))?;
            let usage = response.usage.unwrap_or_default();
            let spent = ToolSpend {
                calls: 1,
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                cost_usd: response.usage.and_then(|u| self.prices.cost(&response.model, u)).unwrap_or(0.0),
                model: Some(
                    response.served_by.clone().unwrap_or_else(|| format!("{}/{}", provider.name(), response.model)),
                ),
            };
            Ok(Sampled { response, spent })
        })
    }
}

/// One tool call in flight: whose run it is, and what it answers with.
struct Call {
    id: u64,
    run: u64,
    answers: Answers,
    spent: Option<ToolSpend>,
}

/// The calls in flight on one server.
#[derive(Default)]
pub(crate) struct InFlight {
    calls: Mutex<Vec<Call>>,
    next: AtomicU64,
}

/// Why a request cannot be tied to one run.
enum Whose {
    Nobody,
    Several,
}

impl InFlight {
    /// Registers a call of `run`; [`InFlight::end`] with the id it returns.
    pub(crate) fn begin(&self, run: u64, answers: Answers) -> u64 {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        self.lock().push(Call { id, run, answers, spent: None });
        id
    }

    /// Ends call `id`: what its server's model calls spent.
    pub(crate) fn end(&self, id: u64) -> Option<ToolSpend> {
        let mut calls = self.lock();
        let i = calls.iter().position(|c| c.id == id)?;
        calls.remove(i).spent
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Call>> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The call a server's request belongs to: the first in flight, when
    /// every call in flight is of one run.
    fn whose(&self) -> Result<(u64, Answers), Whose> {
        let calls = self.lock();
        let first = calls.first().ok_or(Whose::Nobody)?;
        if calls.iter().any(|c| c.run != first.run) {
            return Err(Whose::Several);
        }
        Ok((first.id, first.answers.clone()))
    }

    fn charge(&self, id: u64, spent: &ToolSpend) {
        let mut calls = self.lock();
        if let Some(call) = calls.iter_mut().find(|c| c.id == id) {
            let total = call.spent.get_or_insert_with(ToolSpend::default);
            total.calls += spent.calls;
            total.input_tokens += spent.input_tokens;
            total.output_tokens += spent.output_tokens;
            total.cost_usd += spent.cost_usd;
            if spent.model.is_some() {
                total.model.clone_from(&spent.model);
            }
        }
    }

    /// Answers a server's `sampling/createMessage` (its params as JSON):
    /// the result as JSON, or why not.
    pub(crate) async fn sample(&self, server: &str, params: Value) -> Result<Value, String> {
        let (id, answers) = self.whose().map_err(|w| match w {
            Whose::Nobody => "a model call is answered only during one of this client's tool calls".to_owned(),
            Whose::Several => {
                "calls of several runs are in flight on this server: the model call cannot be charged to one".to_owned()
            }
        })?;
        let sampler = answers.sampler.ok_or("this client answers no model calls for this run")?;
        let request = chat_request(&params)?;
        let Sampled { response, spent } = sampler.sample(server, request).await?;
        self.charge(id, &spent);
        let stop = match response.finish_reason {
            Some(noesis_llm::FinishReason::Length) => "maxTokens",
            _ => "endTurn",
        };
        // The server hears the model's own name; the run's record keeps
        // which provider served it.
        let model = response.model;
        Ok(json!({
            "role": "assistant",
            "content": {"type": "text", "text": response.text},
            "model": model,
            "stopReason": stop,
        }))
    }

    /// Answers a server's `elicitation/create` (its params as JSON).
    pub(crate) async fn elicit(&self, server: &str, params: &Value) -> Elicited {
        // Only form mode is declared; a URL to open is declined.
        if params.get("mode").and_then(Value::as_str).is_some_and(|m| m != "form") {
            return Elicited::Decline;
        }
        let Ok((_, answers)) = self.whose() else { return Elicited::Decline };
        let Some(elicitor) = answers.elicitor else { return Elicited::Decline };
        let request = Elicitation {
            message: params["message"].as_str().unwrap_or_default().to_owned(),
            schema: params.get("requestedSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
        };
        elicitor.elicit(server, request).await
    }
}

/// The run-side request for a server's `sampling/createMessage`: its
/// system prompt and messages (text; other content named in brackets),
/// token cap and temperature.
fn chat_request(params: &Value) -> Result<ChatRequest, String> {
    let mut messages = Vec::new();
    if let Some(system) = params["systemPrompt"].as_str().filter(|s| !s.trim().is_empty()) {
        messages.push(Message::system(system));
    }
    let listed = params["messages"].as_array().ok_or("the request has no messages")?;
    for m in listed {
        let blocks: Vec<&Value> = match &m["content"] {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        let text: Vec<String> = blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                Some(kind) => format!("[{kind} {}]", b["mimeType"].as_str().unwrap_or_default()).replace(" ]", "]"),
                None => String::new(),
            })
            .collect();
        let text = text.join("\n");
        messages.push(match m["role"].as_str() {
            Some("assistant") => Message::assistant(text),
            Some("user") => Message::user(text),
            other => return Err(format!("a message's role must be user or assistant, not {other:?}")),
        });
    }
    if !messages.iter().any(|m| m.role == Role::User) {
        return Err("the request has no user message".into());
    }
    let mut request = ChatRequest::new(messages);
    request.max_tokens = params["maxTokens"].as_u64().map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    #[allow(clippy::cast_possible_truncation)]
    {
        request.temperature = params["temperature"].as_f64().map(|t| t as f32);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampling_request_becomes_a_chat_request() {
        let r = chat_request(&json!({
            "systemPrompt": "Be brief.",
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "hi"}},
                {"role": "assistant", "content": [{"type": "text", "text": "yes"}, {"type": "image", "mimeType": "image/png", "data": ""}]},
            ],
            "maxTokens": 50,
            "temperature": 0.5,
        }))
        .unwrap();
        assert_eq!(r.messages.len(), 3);
        assert_eq!((r.messages[0].role, r.messages[0].content.as_str()), (Role::System, "Be brief."));
        assert_eq!(r.messages[2].content, "yes\n[image image/png]");
        assert_eq!((r.max_tokens, r.temperature), (Some(50), Some(0.5)));
        assert!(chat_request(&json!({"messages": []})).is_err());
        assert!(
            chat_request(&json!({"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}]})).is_err()
        );
        assert!(chat_request(&json!({})).is_err());
    }

    #[test]
    fn a_request_belongs_to_the_one_run_in_flight() {
        let f = InFlight::default();
        assert!(matches!(f.whose(), Err(Whose::Nobody)));
        let a = f.begin(1, Answers::default());
        let b = f.begin(1, Answers::default());
        assert_eq!(f.whose().ok().map(|w| w.0), Some(a));
        let c = f.begin(2, Answers::default());
        assert!(matches!(f.whose(), Err(Whose::Several)));
        f.charge(a, &ToolSpend { calls: 1, input_tokens: 3, output_tokens: 4, cost_usd: 0.5, model: None });
        assert_eq!(f.end(c), None);
        assert_eq!(f.end(a).map(|s| (s.calls, s.input_tokens, s.output_tokens)), Some((1, 3, 4)));
        assert_eq!(f.whose().ok().map(|w| w.0), Some(b));
        assert_eq!(f.end(a), None, "ended once");
    }
}
