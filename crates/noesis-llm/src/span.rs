//! The GenAI `chat {model}` span of one model call, defined once for every
//! caller (an agent's turn, a module run, a plugin's model): its name and
//! attributes follow the OpenTelemetry GenAI conventions, usage and the
//! answering model are recorded when the reply comes, and the prompt and
//! reply texts only when the user opted in (`noesis_trace::capturing`).

use std::future::Future;

use noesis_trace::attr;
use serde_json::{Value, json};

use crate::{ChatRequest, ChatResponse, FinishReason, Message, Provider, ProviderError, Role};

/// A `chat {model}` span, open from [`ChatSpan::start`] until the call's
/// result is recorded; dropped without one (the caller gave up on the call),
/// it records `error.type = cancelled`.
#[derive(Debug)]
pub struct ChatSpan {
    span: tracing::Span,
    capture: bool,
    finished: bool,
}

impl ChatSpan {
    /// Opens the span of `provider` answering `request`, under the current
    /// span; `role` is the agent's role for this turn (`gen_ai.agent.role`)
    /// when an agent asks.
    #[must_use]
    pub fn start(provider: &dyn Provider, request: &ChatRequest, role: Option<&str>) -> ChatSpan {
        let span = tracing::info_span!(
            "chat",
            otel.name = %format!("chat {}", provider.model()),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider.name(),
            gen_ai.request.model = provider.model(),
            gen_ai.agent.role = role,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.system_instructions = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        // Texts only when the user opted in.
        let capture = noesis_trace::capturing_on(&span);
        if capture {
            let (system, messages) = input(request);
            span.record(attr::SYSTEM_INSTRUCTIONS, system.as_str());
            span.record(attr::INPUT_MESSAGES, messages.as_str());
        }
        ChatSpan { span, capture, finished: false }
    }

    /// The span's trace and span ids, when it is exported.
    #[must_use]
    pub fn ids(&self) -> Option<noesis_trace::SpanIds> {
        noesis_trace::ids(&self.span)
    }

    /// The span itself (to enter it, or to instrument a future of one's own).
    #[must_use]
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Records how the call ended: the answering model and usage, the reply
    /// text when captured, or the error's kind.
    pub fn finish(mut self, result: &Result<ChatResponse, ProviderError>) {
        self.finished = true;
        match result {
            Ok(r) => {
                self.span.record(attr::RESPONSE_MODEL, r.model.as_str());
                if let Some(u) = r.usage {
                    self.span.record(attr::USAGE_INPUT_TOKENS, u.input_tokens);
                    self.span.record(attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
                }
                if self.capture {
                    self.span.record(attr::OUTPUT_MESSAGES, output(r).as_str());
                }
            }
            Err(e) => {
                self.span.record("error.type", format!("{:?}", e.kind).as_str());
            }
        }
    }

    /// Runs `call` (the provider's chat, streamed or not) inside the span and
    /// records its result. Dropping the returned future before it finishes
    /// records the call as cancelled.
    pub async fn call<F>(self, call: F) -> Result<ChatResponse, ProviderError>
    where
        F: Future<Output = Result<ChatResponse, ProviderError>>,
    {
        let result = tracing::Instrument::instrument(call, self.span.clone()).await;
        self.finish(&result);
        result
    }
}

impl Drop for ChatSpan {
    fn drop(&mut self) {
        if !self.finished {
            self.span.record("error.type", "cancelled");
        }
    }
}

/// A message's parts in the conventions' JSON shape.
fn parts(m: &Message) -> Vec<Value> {
    let mut parts = Vec::new();
    match m.role {
        Role::Tool => parts.push(json!({"type": "tool_call_response",
            "id": m.tool_call_id.as_deref().unwrap_or_default(), "response": m.content})),
        _ if !m.content.is_empty() => parts.push(json!({"type": "text", "content": m.content})),
        _ => {}
    }
    for c in &m.tool_calls {
        parts.push(json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}));
    }
    parts
}

/// `gen_ai.system_instructions` and `gen_ai.input.messages` of `request`.
#[must_use]
pub fn input(request: &ChatRequest) -> (String, String) {
    let system: Vec<Value> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| json!({"type": "text", "content": m.content}))
        .collect();
    let messages: Vec<Value> = request
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| json!({"role": m.role.as_str(), "parts": parts(m)}))
        .collect();
    (Value::Array(system).to_string(), Value::Array(messages).to_string())
}

/// `gen_ai.output.messages` of `response`.
#[must_use]
pub fn output(response: &ChatResponse) -> String {
    let finish = match response.finish_reason {
        Some(FinishReason::Stop) | None => "stop",
        Some(FinishReason::Length) => "length",
        Some(FinishReason::ToolCalls) => "tool_call",
        Some(FinishReason::Other) => "other",
    };
    let message = Message::assistant_turn(response);
    json!([{"role": "assistant", "parts": parts(&message), "finish_reason": finish}]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_take_the_conventions_shape() {
        let request = ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")]);
        let (system, messages) = input(&request);
        assert_eq!(system, r#"[{"type":"text","content":"be brief"}]"#);
        assert_eq!(messages, r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#);
    }
}
