//! OpenAI-compatible chat completions (`POST {base}/chat/completions`),
//! plain and streamed (SSE), with native tool calls.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use crate::TextSink;
use crate::error::{ErrorKind, ProviderError};
use crate::http::{EndpointConfig, HttpCore, Sink, excerpt};
use crate::strict::Strict;
use crate::types::{
    Capabilities, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, StructuredMode, ToolCall,
    ToolChoice, Usage,
};

/// A provider for any API that speaks OpenAI chat completions.
#[derive(Debug)]
pub struct OpenAiCompatible {
    config: EndpointConfig,
    http: HttpCore,
    /// Cleared after the endpoint rejects `json_schema`; later calls use JSON mode.
    json_schema_ok: AtomicBool,
}

impl OpenAiCompatible {
    /// A provider with its own connection pool and concurrency cap.
    pub fn new(config: EndpointConfig) -> Result<OpenAiCompatible, ProviderError> {
        let http = HttpCore::new(&config.name, config.http)?;
        Ok(OpenAiCompatible { config, http, json_schema_ok: AtomicBool::new(true) })
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.config.api_key {
            Some(key) => vec![("authorization", format!("Bearer {key}"))],
            None => Vec::new(),
        }
    }

    fn mode_for(&self, request: &ChatRequest) -> (StructuredMode, Option<Strict>) {
        match &request.response_format {
            ResponseFormat::JsonSchema { schema, .. } if self.json_schema_ok.load(Ordering::Relaxed) => {
                match crate::strict::strictify(schema) {
                    Ok(strict) => (StructuredMode::JsonSchemaStrict, Some(strict)),
                    Err(_) => (StructuredMode::JsonSchema, None),
                }
            }
            ResponseFormat::JsonSchema { .. } | ResponseFormat::JsonObject => (StructuredMode::JsonObject, None),
            ResponseFormat::Text => (StructuredMode::Text, None),
        }
    }

    fn body(&self, request: &ChatRequest, mode: StructuredMode, strict: Option<&Strict>, stream: bool) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": request.messages.iter().map(wire_message).collect::<Vec<_>>(),
        });
        let reasoning = reasoning_model(&self.config.model);
        // Reasoning models refuse any temperature but their default.
        if let Some(t) = request.temperature.filter(|_| !reasoning) {
            body["temperature"] = crate::types::temperature_json(t);
        }
        if let Some(m) = request.max_tokens {
            // They also refuse `max_tokens`: their limit covers hidden
            // reasoning tokens too, under a name of its own.
            let key = if reasoning { "max_completion_tokens" } else { "max_tokens" };
            body[key] = json!(m);
        }
        match (&request.response_format, mode) {
            (ResponseFormat::JsonSchema { name, .. }, StructuredMode::JsonSchemaStrict) => {
                let schema = strict.map(|s| s.schema.clone()).unwrap_or(Value::Null);
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": crate::types::schema_name(name), "schema": schema, "strict": true}
                });
            }
            (ResponseFormat::JsonSchema { name, schema }, StructuredMode::JsonSchema) => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": crate::types::schema_name(name), "schema": schema, "strict": false}
                });
            }
            (ResponseFormat::JsonSchema { .. } | ResponseFormat::JsonObject, _) => {
                body["response_format"] = json!({"type": "json_object"});
            }
            (ResponseFormat::Text, _) => {}
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters
                    }})
                })
                .collect();
            body["tool_choice"] = match &request.tool_choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// Runs the call, falling back from `json_schema` to JSON mode once when
    /// the endpoint rejects it (for this call and every later one).
    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let url = self.config.url("chat/completions")?;
        let headers = self.headers();
        let (mut mode, mut strict) = self.mode_for(request);
        // JSON mode for a request that has a schema: the schema goes in the
        // prompt instead, or the model never sees it.
        let schema_in_prompt = crate::types::with_schema_in_prompt(request);
        loop {
            let sent = match (&schema_in_prompt, mode) {
                (Some(with_schema), StructuredMode::JsonObject) => with_schema,
                _ => request,
            };
            let body = self.body(sent, mode, strict.as_ref(), on_text.is_some());
            let result = match on_text {
                None => match self.http.post(&url, &headers, &body).await {
                    Ok(text) => self.answer(&text, mode),
                    Err(e) => Err(e),
                },
                Some(sink) => {
                    let mut acc = StreamAccumulator::new(&self.config.model, mode);
                    let mut on_event = |ev: &crate::stream::SseEvent| acc.event(&self.http, &ev.data, sink);
                    let streamed = self.http.post_streaming(&url, &headers, &body, Sink::Events(&mut on_event)).await;
                    streamed.and_then(|whole| match whole {
                        // The server answered whole: the text is shown at once.
                        Some(text) => self.answer(&text, mode).inspect(|r| sink(&r.text)),
                        None => acc.finish(&self.http),
                    })
                }
            };
            match result {
                Err(e)
                    if matches!(e.kind, ErrorKind::Rejected { status: 400 })
                        && matches!(mode, StructuredMode::JsonSchema | StructuredMode::JsonSchemaStrict)
                        && mentions_format(&e.message) =>
                {
                    // Not a retry of a transient failure, so it does not count as one.
                    self.json_schema_ok.store(false, Ordering::Relaxed);
                    (mode, strict) = (StructuredMode::JsonObject, None);
                }
                Ok(mut resp) => {
                    if let Some(strict) = &strict {
                        resp.text = strict.relax_text(&resp.text);
                    }
                    return Ok(resp);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one complete chat-completion body.
    fn answer(&self, text: &str, mode: StructuredMode) -> Result<ChatResponse, ProviderError> {
        let v = self.http.parse_json(text)?;
        let choice = v
            .pointer("/choices/0")
            .ok_or_else(|| self.http.err(ErrorKind::BadResponse, format!("reply has no choices: {}", excerpt(text))))?;
        let content = match choice.pointer("/message/content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let tool_calls = choice
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| ToolCall {
                        id: c.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_owned),
                        name: c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        arguments: arguments(c.pointer("/function/arguments")),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ChatResponse {
            text: content,
            model: v.get("model").and_then(Value::as_str).unwrap_or(&self.config.model).to_owned(),
            usage: v.get("usage").and_then(usage),
            finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(finish_reason),
            structured: mode,
            tool_calls,
            served_by: None,
        })
    }
}

/// Tool-call arguments arrive as a JSON string; keep them as text when the
/// model wrote something that is not JSON, so the caller can report it.
fn arguments(raw: Option<&Value>) -> Value {
    match raw {
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Some(v) => v.clone(),
        None => json!({}),
    }
}

fn usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    Some(Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
    })
}

fn finish_reason(r: &str) -> FinishReason {
    match r {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        _ => FinishReason::Other,
    }
}

fn wire_message(m: &Message) -> Value {
    let role = m.role.as_str();
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    if m.role == Role::Assistant && !m.tool_calls.is_empty() && m.content.is_empty() {
        out.insert("content".into(), Value::Null);
    } else {
        out.insert("content".into(), json!(m.content));
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let args = match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(out)
}

/// Builds one reply from `chat.completion.chunk` events.
struct StreamAccumulator {
    text: String,
    model: String,
    usage: Option<Usage>,
    finish_reason: Option<FinishReason>,
    mode: StructuredMode,
    /// Tool calls by their `index`: id, name, argument text so far.
    calls: Vec<(String, String, String)>,
    done: bool,
    events: usize,
}

impl StreamAccumulator {
    fn new(model: &str, mode: StructuredMode) -> StreamAccumulator {
        StreamAccumulator {
            text: String::new(),
            model: model.to_owned(),
            usage: None,
            finish_reason: None,
            mode,
            calls: Vec::new(),
            done: false,
            events: 0,
        }
    }

    fn event(&mut self, http: &HttpCore, data: &str, sink: TextSink<'_>) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v = http.parse_event(data)?;
        if let Some(err) = v.get("error") {
            return Err(http.err(ErrorKind::Unavailable, format!("error in stream: {}", excerpt(&err.to_string()))));
        }
        self.events += 1;
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            self.model = m.to_owned();
        }
        if let Some(u) = v.get("usage").and_then(usage) {
            self.usage = Some(u);
        }
        let Some(choice) = v.pointer("/choices/0") else { return Ok(()) };
        if let Some(piece) = choice.pointer("/delta/content").and_then(Value::as_str).filter(|p| !p.is_empty()) {
            self.text.push_str(piece);
            sink(piece);
        }
        if let Some(calls) = choice.pointer("/delta/tool_calls").and_then(Value::as_array) {
            for c in calls {
                let i = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if i > 1024 {
                    return Err(http.err(ErrorKind::BadResponse, "stream names a tool call index over 1024"));
                }
                while self.calls.len() <= i {
                    self.calls.push(Default::default());
                }
                let slot = &mut self.calls[i];
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    slot.0 = id.to_owned();
                }
                if let Some(name) = c.pointer("/function/name").and_then(Value::as_str) {
                    slot.1.push_str(name);
                }
                if let Some(args) = c.pointer("/function/arguments").and_then(Value::as_str) {
                    slot.2.push_str(args);
                }
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(finish_reason(r));
        }
        Ok(())
    }

    fn finish(self, http: &HttpCore) -> Result<ChatResponse, ProviderError> {
        // A stream that ends before `[DONE]` and without a finish reason was
        // cut: what arrived is not the whole answer.
        if !self.done && self.finish_reason.is_none() {
            return Err(http.err(
                ErrorKind::Unavailable,
                format!("the stream ended early after {} events, before the reply was finished", self.events),
            ));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, (id, name, args))| ToolCall {
                id: if id.is_empty() { format!("call_{i}") } else { id },
                name,
                arguments: arguments(Some(&Value::String(args))),
            })
            .collect();
        Ok(ChatResponse {
            text: self.text,
            model: self.model,
            usage: self.usage,
            finish_reason: self.finish_reason,
            structured: self.mode,
            tool_calls,
            served_by: None,
        })
    }
}

/// OpenAI's reasoning models — the o-series (`o1`, `o3-mini`, `o4-mini`, …)
/// and the gpt-5 family — known by name, also behind a vendor prefix
/// (`openai/o3-mini` on OpenRouter).
fn reasoning_model(model: &str) -> bool {
    let bare = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let o_series = bare.strip_prefix('o').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    o_series || bare.starts_with("gpt-5")
}

fn mentions_format(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("response_format") || b.contains("json_schema")
}

crate::http::http_provider!(OpenAiCompatible, |this| Capabilities {
    json_schema: this.json_schema_ok.load(Ordering::Relaxed),
    json_mode: true,
    tools: true,
    streaming: true,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_take_the_wire_shape() {
        let call = ToolCall { id: "c1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
        let turn = Message { tool_calls: vec![call.clone()], ..Message::assistant("") };
        assert_eq!(
            wire_message(&turn),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
            ]})
        );
        assert_eq!(
            wire_message(&Message::tool_result(&call, "text")),
            json!({"role": "tool", "content": "text", "tool_call_id": "c1"})
        );
        assert_eq!(wire_message(&Message::user("hi")), json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn reasoning_models_are_known_by_name() {
        for m in [
            "o1",
            "o1-preview",
            "o3-mini",
            "o3",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5-mini",
            "openai/o3-mini",
            "GPT-5-nano",
        ] {
            assert!(reasoning_model(m), "{m}");
        }
        for m in ["gpt-4o-mini", "gpt-4.1", "omni", "llama3", "deepseek-chat", "o", "openai/gpt-4o"] {
            assert!(!reasoning_model(m), "{m}");
        }
    }

    #[test]
    fn arguments_keep_text_that_is_not_json() {
        assert_eq!(arguments(Some(&json!("{\"a\":1}"))), json!({"a": 1}));
        assert_eq!(arguments(Some(&json!(""))), json!({}));
        assert_eq!(arguments(Some(&json!("{oops"))), json!("{oops"));
        assert_eq!(arguments(None), json!({}));
    }
}
