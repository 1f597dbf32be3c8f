//! Anthropic Messages (`POST {base}/v1/messages`), plain and streamed (SSE),
//! with native tool calls and structured output through a forced tool.
//!
//! The Messages API has no JSON mode and no response schema: a JSON Schema
//! becomes the `input_schema` of a tool the model must call, and that call's
//! input is the reply.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::TextSink;
use crate::error::{ErrorKind, ProviderError};
use crate::http::{EndpointConfig, HttpCore, Sink, excerpt};
use crate::types::{
    Capabilities, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, StructuredMode, ToolCall,
    ToolChoice, ToolSpec, Usage,
};

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by the API; this is used when the request has none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider for the Anthropic Messages API.
#[derive(Debug)]
pub struct Anthropic {
    config: EndpointConfig,
    http: HttpCore,
}

impl Anthropic {
    /// The public API's base URL; `EndpointConfig::base_url` overrides it
    /// (`ANTHROPIC_BASE_URL`).
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";

    /// A provider with its own connection pool and concurrency cap.
    pub fn new(config: EndpointConfig) -> Result<Anthropic, ProviderError> {
        let http = HttpCore::new(&config.name, config.http)?;
        Ok(Anthropic { config, http })
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
        if let Some(key) = &self.config.api_key {
            h.push(("x-api-key", key.clone()));
        }
        h
    }

    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let plan = Plan::new(request);
        let body = body(&self.config.model, request, &plan, on_text.is_some());
        let url = self.config.url(messages_path(&self.config.base_url))?;
        let headers = self.headers();
        let name = &self.config.name;
        let Some(sink) = on_text else {
            let text = self.http.post(&url, &headers, &body).await?;
            let v = self.http.parse_json(&text)?;
            return parse_reply(name, &v, &self.config.model, &plan);
        };
        let mut acc = Accumulator::new(name, &self.config.model, &plan);
        let http = &self.http;
        let mut on_event = |ev: &crate::stream::SseEvent| acc.event(&http.parse_event(&ev.data)?, sink);
        let streamed = self.http.post_streaming(&url, &headers, &body, Sink::Events(&mut on_event)).await;
        streamed.and_then(|_| acc.finish())
    }
}

crate::http::http_provider!(Anthropic, |_this| Capabilities {
    json_schema: true,
    json_mode: false,
    tools: true,
    streaming: true
});

/// The path to `/v1/messages` from `base`, which may already end in `/v1`.
pub(crate) fn messages_path(base: &str) -> &'static str {
    if base.trim_end_matches('/').ends_with("/v1") { "messages" } else { "v1/messages" }
}

/// The tool whose input is the structured reply.
#[derive(Debug, Clone, PartialEq)]
struct Forced {
    name: String,
    input_schema: Value,
    /// The schema was not an object schema, so it sits under `value` in an
    /// object wrapper; the reply is unwrapped again.
    wrapped: bool,
}

/// How one request is sent and its reply read.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    mode: StructuredMode,
    forced: Option<Forced>,
}

impl Plan {
    fn new(request: &ChatRequest) -> Plan {
        match &request.response_format {
            ResponseFormat::JsonSchema { name, schema } => {
                let mut tool = crate::types::schema_name(name);
                // Tool names must be unique; the caller's tools keep theirs.
                if request.tools.iter().any(|t| t.name == tool) {
                    tool = crate::types::schema_name(&format!("reply_{tool}"));
                }
                let (input_schema, wrapped) = object_schema(schema);
                Plan { mode: StructuredMode::ForcedTool, forced: Some(Forced { name: tool, input_schema, wrapped }) }
            }
            // No JSON mode exists: the runtime extracts JSON from the text.
            ResponseFormat::JsonObject | ResponseFormat::Text => Plan { mode: StructuredMode::Text, forced: None },
        }
    }
}

/// The API requires `input_schema.type == "object"`; any other schema is
/// wrapped as the `value` property of one.
fn object_schema(schema: &Value) -> (Value, bool) {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        return (schema.clone(), false);
    }
    let mut inner = schema.clone();
    let mut outer = Map::new();
    outer.insert("type".into(), json!("object"));
    if let Value::Object(m) = &mut inner {
        // Root-relative `$ref`s (`#/$defs/…`) must still resolve after wrapping.
        for key in ["$schema", "$defs", "definitions"] {
            if let Some(v) = m.remove(key) {
                outer.insert(key.into(), v);
            }
        }
    }
    outer.insert("properties".into(), json!({ "value": inner }));
    outer.insert("required".into(), json!(["value"]));
    (Value::Object(outer), true)
}

/// The request body.
fn body(model: &str, request: &ChatRequest, plan: &Plan, stream: bool) -> Value {
    let (system, messages) = wire_messages(&request.messages);
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    if let Some(system) = system {
        body["system"] = json!(system);
    }
    if let Some(t) = request.temperature {
        // Through the shortest decimal form, so 0.2f32 goes out as 0.2.
        body["temperature"] = crate::types::temperature_json(t);
    }
    let mut tools: Vec<Value> = request.tools.iter().map(wire_tool).collect();
    let choice = match &plan.forced {
        Some(forced) => {
            tools.push(json!({
                "name": forced.name,
                "description": "Give your final answer by calling this tool; its input is the answer.",
                "input_schema": forced.input_schema,
            }));
            let force = json!({"type": "tool", "name": forced.name});
            match &request.tool_choice {
                _ if request.tools.is_empty() => force,
                // The model must call a tool, and the answer tool is one of
                // them: either it calls the caller's tools or it answers.
                ToolChoice::Auto | ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
                ToolChoice::None => force,
            }
        }
        None => wire_tool_choice(&request.tool_choice),
    };
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = choice;
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

fn wire_tool(t: &ToolSpec) -> Value {
    // The API rejects a tool whose input schema is not an object schema.
    let input_schema = match &t.parameters {
        Value::Object(m) if m.contains_key("type") => t.parameters.clone(),
        Value::Object(m) => {
            let mut m = m.clone();
            m.insert("type".into(), json!("object"));
            Value::Object(m)
        }
        _ => json!({"type": "object", "properties": {}}),
    };
    json!({"name": t.name, "description": t.description, "input_schema": input_schema})
}

fn wire_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
    }
}

/// The joined system prompt and the conversation as API messages.
///
/// Consecutive messages of one role are merged into one (the API wants
/// user and assistant to alternate, and all results of one assistant turn's
/// tool calls in the single user message that follows it). Empty text is
/// left out: the API rejects empty text blocks.
fn wire_messages(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let system: Vec<&str> = messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
    let system = if system.is_empty() { None } else { Some(system.join("\n\n")) };
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) =
            match m.role {
                Role::System => continue,
                Role::User => ("user", text_block(&m.content).into_iter().collect()),
                Role::Assistant => {
                    let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                    blocks.extend(m.tool_calls.iter().map(
                        |c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments_object()}),
                    ));
                    ("assistant", blocks)
                }
                Role::Tool => (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
                        "content": m.content,
                    })],
                ),
            };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let wire = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            let lone_text = blocks.len() == 1 && blocks.first().and_then(|b| b.get("type")) == Some(&json!("text"));
            let content = match blocks.pop() {
                Some(Value::Object(mut b)) if lone_text => b.remove("text").unwrap_or_default(),
                Some(b) => {
                    blocks.push(b);
                    Value::Array(blocks)
                }
                None => Value::Array(Vec::new()),
            };
            json!({"role": role, "content": content})
        })
        .collect();
    (system, wire)
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// One finished content block of a reply.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        input: Value,
        /// The input as streamed, when it was.
        raw: Option<String>,
    },
}

/// Reads one complete Messages reply.
fn parse_reply(provider: &str, v: &Value, model: &str, plan: &Plan) -> Result<ChatResponse, ProviderError> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(api_error(provider, v.get("error").unwrap_or(&Value::Null), "error"));
    }
    let Some(content) = v.get("content").and_then(Value::as_array) else {
        return Err(ProviderError::new(
            provider,
            ErrorKind::BadResponse,
            format!("reply has no content: {}", excerpt(&v.to_string())),
        ));
    };
    let blocks = content
        .iter()
        .enumerate()
        .filter_map(|(i, b)| match b.get("type").and_then(Value::as_str) {
            Some("text") => Some(Block::Text(b.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())),
            Some("tool_use") => Some(Block::Tool {
                id: b.get("id").and_then(Value::as_str).map_or_else(|| format!("toolu_{i}"), str::to_owned),
                name: b.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                input: b.get("input").cloned().unwrap_or_else(|| json!({})),
                raw: None,
            }),
            // Thinking and server-tool blocks are not part of the answer.
            _ => None,
        })
        .collect();
    Ok(assemble(
        blocks,
        v.get("stop_reason").and_then(Value::as_str),
        v.get("usage").and_then(|u| usage(u, None)),
        v.get("model").and_then(Value::as_str).unwrap_or(model),
        plan,
    ))
}

/// Builds the provider-neutral reply from the content blocks.
fn assemble(blocks: Vec<Block>, stop: Option<&str>, usage: Option<Usage>, model: &str, plan: &Plan) -> ChatResponse {
    let forced = plan.forced.as_ref();
    let mut text = String::new();
    let mut answer: Option<String> = None;
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block {
            Block::Text(t) => text.push_str(&t),
            Block::Tool { name, input, raw, .. } if answer.is_none() && forced.is_some_and(|f| f.name == name) => {
                answer = Some(answer_text(&input, raw, forced.is_some_and(|f| f.wrapped)));
            }
            Block::Tool { id, name, input, .. } => tool_calls.push(ToolCall { id, name, arguments: input }),
        }
    }
    let mut finish_reason = stop.map(stop_reason);
    // The forced call is the answer, not a request to run a tool.
    if answer.is_some() && tool_calls.is_empty() && finish_reason == Some(FinishReason::ToolCalls) {
        finish_reason = Some(FinishReason::Stop);
    }
    ChatResponse {
        text: answer.unwrap_or(text),
        model: model.to_owned(),
        usage,
        finish_reason,
        structured: plan.mode,
        tool_calls,
        served_by: None,
    }
}

/// The forced call's input as the reply text: as streamed when possible
/// (so it equals what `on_text` showed), unwrapped when the schema was.
fn answer_text(input: &Value, raw: Option<String>, wrapped: bool) -> String {
    if wrapped && let Some(inner) = input.get("value") {
        return inner.to_string();
    }
    match raw {
        Some(raw) if !wrapped && !raw.trim().is_empty() => raw,
        _ => input.to_string(),
    }
}

fn stop_reason(r: &str) -> FinishReason {
    match r {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        // `pause_turn`, `refusal`, and whatever comes later.
        _ => FinishReason::Other,
    }
}

/// Input tokens include cached ones: the API counts cache reads and writes
/// apart from `input_tokens`, but they are all part of the prompt.
fn usage(u: &Value, previous: Option<Usage>) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let count = |k: &str| u.get(k).and_then(Value::as_u64);
    let inputs = [count("input_tokens"), count("cache_creation_input_tokens"), count("cache_read_input_tokens")];
    let previous = previous.unwrap_or_default();
    Some(Usage {
        input_tokens: if inputs.iter().any(Option::is_some) {
            inputs.iter().flatten().sum()
        } else {
            previous.input_tokens
        },
        output_tokens: count("output_tokens").unwrap_or(previous.output_tokens),
    })
}

/// An API error object (`{"type": "overloaded_error", "message": …}`) as a
/// provider error.
fn api_error(provider: &str, e: &Value, context: &str) -> ProviderError {
    let kind_name = e.get("type").and_then(Value::as_str).unwrap_or("unknown_error");
    let message = e.get("message").and_then(Value::as_str).unwrap_or_default();
    let lower = message.to_ascii_lowercase();
    let kind = match kind_name {
        "overloaded_error" | "api_error" => ErrorKind::Unavailable,
        "rate_limit_error" => ErrorKind::RateLimited { retry_after: None },
        _ if lower.contains("prompt is too long") || lower.contains("context window") => ErrorKind::ContextOverflow,
        _ => ErrorKind::BadResponse,
    };
    ProviderError::new(provider, kind, format!("{context}: {kind_name}: {}", excerpt(message)))
}

/// A block being streamed.
#[derive(Debug)]
enum Open {
    Text(String),
    Tool { id: String, name: String, start: Value, json: String },
}

/// Builds one reply from Messages stream events.
struct Accumulator<'p> {
    provider: String,
    model: String,
    plan: &'p Plan,
    /// By the event's `index`; blocks may interleave.
    blocks: BTreeMap<u64, Open>,
    usage: Option<Usage>,
    stop: Option<String>,
    stopped: bool,
    events: usize,
}

impl<'p> Accumulator<'p> {
    fn new(provider: &str, model: &str, plan: &'p Plan) -> Accumulator<'p> {
        Accumulator {
            provider: provider.to_owned(),
            model: model.to_owned(),
            plan,
            blocks: BTreeMap::new(),
            usage: None,
            stop: None,
            stopped: false,
            events: 0,
        }
    }

    fn bad(&self, message: String) -> ProviderError {
        ProviderError::new(&self.provider, ErrorKind::BadResponse, message)
    }

    /// Folds one event's data; text goes to `sink` as it arrives.
    fn event(&mut self, v: &Value, sink: TextSink<'_>) -> Result<(), ProviderError> {
        if self.stopped {
            return Ok(());
        }
        self.events += 1;
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                if let Some(model) = m.get("model").and_then(Value::as_str) {
                    model.clone_into(&mut self.model);
                }
                if let Some(u) = m.get("usage").and_then(|u| usage(u, self.usage)) {
                    self.usage = Some(u);
                }
            }
            "content_block_start" => {
                let b = v.get("content_block").unwrap_or(&Value::Null);
                let open = match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = b.get("text").and_then(Value::as_str).unwrap_or_default();
                        if !text.is_empty() {
                            sink(text);
                        }
                        Open::Text(text.to_owned())
                    }
                    Some("tool_use") => Open::Tool {
                        id: b.get("id").and_then(Value::as_str).map_or_else(|| format!("toolu_{index}"), str::to_owned),
                        name: b.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        start: b.get("input").cloned().unwrap_or_else(|| json!({})),
                        json: String::new(),
                    },
                    _ => return Ok(()),
                };
                self.blocks.insert(index, open);
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                let forced = self.plan.forced.as_ref().map(|f| f.name.as_str());
                match (d.get("type").and_then(Value::as_str), self.blocks.get_mut(&index)) {
                    (Some("text_delta"), Some(Open::Text(text))) => {
                        let piece = d.get("text").and_then(Value::as_str).unwrap_or_default();
                        if !piece.is_empty() {
                            text.push_str(piece);
                            sink(piece);
                        }
                    }
                    (Some("input_json_delta"), Some(Open::Tool { name, json, .. })) => {
                        let piece = d.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                        json.push_str(piece);
                        // The structured answer is shown as it is written.
                        if forced == Some(name.as_str()) && !piece.is_empty() {
                            sink(piece);
                        }
                    }
                    (Some("text_delta" | "input_json_delta"), _) => {
                        return Err(
                            self.bad(format!("stream has a delta for block {index} of another kind or not started"))
                        );
                    }
                    // Thinking, signatures, citations: not part of the answer.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(r.to_owned());
                }
                if let Some(u) = v.get("usage").and_then(|u| usage(u, self.usage)) {
                    self.usage = Some(u);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                return Err(api_error(&self.provider, v.get("error").unwrap_or(&Value::Null), "error in stream"));
            }
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        if !self.stopped {
            return Err(ProviderError::new(
                &self.provider,
                ErrorKind::Unavailable,
                format!("the stream ended early after {} events, before message_stop", self.events),
            ));
        }
        let blocks = self
            .blocks
            .into_values()
            .map(|b| match b {
                Open::Text(t) => Block::Text(t),
                Open::Tool { id, name, start, json } => {
                    let input = if json.trim().is_empty() {
                        start
                    } else {
                        // Kept as text when it is not JSON, so the caller can report it.
                        serde_json::from_str(&json).unwrap_or_else(|_| Value::String(json.clone()))
                    };
                    Block::Tool { id, name, input, raw: Some(json) }
                }
            })
            .collect();
        Ok(assemble(blocks, self.stop.as_deref(), self.usage, &self.model, self.plan))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn envelope_schema() -> Value {
        json!({"type": "object", "oneOf": [
            {"properties": {"ok": {"const": true}}, "required": ["ok"]},
            {"properties": {"ok": {"const": false}}, "required": ["ok"]}
        ]})
    }

    fn schema_request() -> ChatRequest {
        ChatRequest {
            response_format: ResponseFormat::JsonSchema {
                name: "cognitive envelope".into(),
                schema: envelope_schema(),
            },
            ..ChatRequest::new(vec![Message::system("be brief"), Message::system("be right"), Message::user("hi")])
        }
    }

    #[test]
    fn plain_body_has_system_max_tokens_and_no_tools() {
        let mut r = ChatRequest::new(vec![Message::system("a"), Message::user("hi"), Message::system("b")]);
        r.temperature = Some(0.2);
        let b = body("claude-x", &r, &Plan::new(&r), false);
        assert_eq!(
            b,
            json!({"model": "claude-x", "max_tokens": 4096, "system": "a\n\nb", "temperature": 0.2,
                   "messages": [{"role": "user", "content": "hi"}]})
        );
        r.max_tokens = Some(7);
        assert_eq!(body("m", &r, &Plan::new(&r), true)["max_tokens"], json!(7));
        assert_eq!(body("m", &r, &Plan::new(&r), true)["stream"], json!(true));
    }

    #[test]
    fn json_object_is_sent_as_text() {
        let r =
            ChatRequest { response_format: ResponseFormat::JsonObject, ..ChatRequest::new(vec![Message::user("x")]) };
        let plan = Plan::new(&r);
        assert_eq!(plan, Plan { mode: StructuredMode::Text, forced: None });
        let b = body("m", &r, &plan, false);
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none(), "{b}");
    }

    #[test]
    fn json_schema_becomes_a_forced_tool() {
        let r = schema_request();
        let plan = Plan::new(&r);
        assert_eq!(plan.mode, StructuredMode::ForcedTool);
        let b = body("m", &r, &plan, false);
        assert_eq!(b["tools"][0]["name"], json!("cognitive_envelope"));
        assert_eq!(b["tools"][0]["input_schema"], envelope_schema());
        assert_eq!(b["tool_choice"], json!({"type": "tool", "name": "cognitive_envelope"}));
        assert_eq!(b["system"], json!("be brief\n\nbe right"));
    }

    #[test]
    fn forced_tool_sits_beside_the_callers_tools() {
        let mut r = schema_request();
        r.tools = vec![
            ToolSpec { name: "read".into(), description: "reads".into(), parameters: json!({"properties": {}}) },
            ToolSpec { name: "cognitive_envelope".into(), description: "same name".into(), parameters: json!(null) },
        ];
        let plan = Plan::new(&r);
        let b = body("m", &r, &plan, false);
        let names: Vec<&Value> = b["tools"].as_array().unwrap().iter().map(|t| &t["name"]).collect();
        assert_eq!(names, [&json!("read"), &json!("cognitive_envelope"), &json!("reply_cognitive_envelope")]);
        assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object", "properties": {}}));
        assert_eq!(b["tools"][1]["input_schema"], json!({"type": "object", "properties": {}}));
        assert_eq!(b["tool_choice"], json!({"type": "any"}));
        r.tool_choice = ToolChoice::None;
        assert_eq!(
            body("m", &r, &plan, false)["tool_choice"],
            json!({"type": "tool", "name": "reply_cognitive_envelope"})
        );
        r.tool_choice = ToolChoice::Tool("read".into());
        assert_eq!(body("m", &r, &plan, false)["tool_choice"], json!({"type": "tool", "name": "read"}));
    }

    #[test]
    fn tool_names_are_sanitised() {
        assert_eq!(crate::types::schema_name("a.b c"), "a_b_c");
        assert_eq!(crate::types::schema_name(""), "envelope");
        assert_eq!(crate::types::schema_name(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn non_object_schemas_are_wrapped_and_unwrapped() {
        let schema = json!({"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}});
        let (wrapped, was) = object_schema(&schema);
        assert!(was);
        assert_eq!(
            wrapped,
            json!({"type": "object", "$defs": {"n": {"type": "integer"}}, "required": ["value"],
                   "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/n"}}}})
        );
        assert_eq!(object_schema(&envelope_schema()), (envelope_schema(), false));
        assert_eq!(answer_text(&json!({"value": [1, 2]}), Some("{\"value\": [1, 2]}".into()), true), "[1,2]");
        assert_eq!(answer_text(&json!({"ok": true}), Some("{\"ok\": true}".into()), false), "{\"ok\": true}");
        assert_eq!(answer_text(&json!({"ok": true}), None, false), "{\"ok\":true}");
    }

    #[test]
    fn tool_turns_take_the_wire_shape_and_results_merge() {
        let a = ToolCall { id: "t1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
        let b = ToolCall { id: "t2".into(), name: "list".into(), arguments: json!("not json") };
        let turn = Message { tool_calls: vec![a.clone(), b.clone()], ..Message::assistant("Let me look.") };
        let silent = Message { tool_calls: vec![a.clone()], ..Message::assistant("") };
        let (system, wire) = wire_messages(&[
            Message::user("go"),
            turn,
            Message::tool_result(&a, "A"),
            Message::tool_result(&b, "B"),
            Message::user("and then?"),
            silent,
            Message::tool_result(&a, ""),
        ]);
        assert_eq!(system, None);
        assert_eq!(
            Value::Array(wire),
            json!([
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "list", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
                    {"type": "text", "text": "and then?"}
                ]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ""}]}
            ])
        );
    }

    #[test]
    fn tool_choice_maps_to_the_api_names() {
        assert_eq!(wire_tool_choice(&ToolChoice::Auto), json!({"type": "auto"}));
        assert_eq!(wire_tool_choice(&ToolChoice::None), json!({"type": "none"}));
        assert_eq!(wire_tool_choice(&ToolChoice::Required), json!({"type": "any"}));
        assert_eq!(wire_tool_choice(&ToolChoice::Tool("x".into())), json!({"type": "tool", "name": "x"}));
    }

    #[test]
    fn stop_reasons_map() {
        for (r, f) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("tool_use", FinishReason::ToolCalls),
            ("refusal", FinishReason::Other),
            ("pause_turn", FinishReason::Other),
        ] {
            assert_eq!(stop_reason(r), f, "{r}");
        }
    }

    #[test]
    fn replies_parse_text_tools_usage_and_model() {
        let plan = Plan { mode: StructuredMode::Text, forced: None };
        let v = json!({"type": "message", "model": "claude-y", "stop_reason": "tool_use",
            "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3}});
        let r = parse_reply("anthropic", &v, "m", &plan).unwrap();
        assert_eq!(r.text, "Reading.");
        assert_eq!(r.model, "claude-y");
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(r.usage, Some(Usage { input_tokens: 15, output_tokens: 3 }));
        assert_eq!(
            r.tool_calls,
            vec![ToolCall { id: "toolu_1".into(), name: "read".into(), arguments: json!({"path": "a"}) }]
        );
    }

    #[test]
    fn forced_tool_reply_becomes_the_text() {
        let plan = Plan::new(&schema_request());
        let v = json!({"content": [{"type": "tool_use", "id": "t", "name": "cognitive_envelope", "input": {"ok": true}}],
                       "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}});
        let r = parse_reply("anthropic", &v, "m", &plan).unwrap();
        assert_eq!(r.text, "{\"ok\":true}");
        assert_eq!(r.structured, StructuredMode::ForcedTool);
        assert_eq!(r.finish_reason, Some(FinishReason::Stop));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.model, "m");
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        let plan = Plan { mode: StructuredMode::Text, forced: None };
        for v in [json!(null), json!([1]), json!({"content": "x"}), json!({"type": "error"})] {
            assert!(parse_reply("anthropic", &v, "m", &plan).is_err(), "{v}");
        }
        let v = json!({"content": [{"type": "tool_use"}, {"type": "text"}, 7]});
        let r = parse_reply("anthropic", &v, "m", &plan).unwrap();
        assert_eq!(r.tool_calls[0].id, "toolu_0");
        assert_eq!(r.usage, None);
        assert_eq!(r.finish_reason, None);
    }

    fn fold(plan: &Plan, events: &[Value]) -> (Result<ChatResponse, ProviderError>, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let sink = |s: &str| seen.lock().unwrap().push(s.to_owned());
        let mut acc = Accumulator::new("anthropic", "m", plan);
        let mut result = Ok(());
        for e in events {
            result = result.and_then(|()| acc.event(e, &sink));
        }
        let out = result.and_then(|()| acc.finish());
        (out, seen.into_inner().unwrap())
    }

    fn start(input_tokens: u64) -> Value {
        json!({"type": "message_start", "message": {"model": "claude-s", "content": [],
               "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})
    }

    #[test]
    fn stream_folds_text_and_tool_calls() {
        let plan = Plan { mode: StructuredMode::Text, forced: None };
        let (r, seen) = fold(
            &plan,
            &[
                start(9),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "ping"}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1,
                       "content_block": {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {}}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "th\": \"a\"}"}}),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
                json!({"type": "message_stop"}),
            ],
        );
        let r = r.unwrap();
        assert_eq!(seen, ["Hel", "lo"]);
        assert_eq!(r.text, "Hello");
        assert_eq!(r.model, "claude-s");
        assert_eq!(r.usage, Some(Usage { input_tokens: 9, output_tokens: 12 }));
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            r.tool_calls,
            vec![ToolCall { id: "toolu_9".into(), name: "read".into(), arguments: json!({"path": "a"}) }]
        );
    }

    #[test]
    fn stream_shows_the_forced_answer_as_it_is_written() {
        let plan = Plan::new(&schema_request());
        let (r, seen) = fold(
            &plan,
            &[
                start(3),
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "tool_use", "id": "t", "name": "cognitive_envelope", "input": {}}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"ok\": "}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "true}"}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}}),
                json!({"type": "message_stop"}),
            ],
        );
        let r = r.unwrap();
        assert_eq!(seen, ["{\"ok\": ", "true}"]);
        assert_eq!(r.text, seen.concat());
        assert_eq!(r.structured, StructuredMode::ForcedTool);
        assert_eq!(r.finish_reason, Some(FinishReason::Stop));
        assert!(r.tool_calls.is_empty());
    }

    #[test]
    fn stream_errors_and_early_ends() {
        let plan = Plan { mode: StructuredMode::Text, forced: None };
        let (r, _) = fold(&plan, &[start(1)]);
        assert_eq!(r.unwrap_err().kind, ErrorKind::Unavailable);
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let (r, _) = fold(&plan, &[start(1), overloaded]);
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.message.contains("Overloaded"), "{e}");
        let too_long =
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}});
        assert_eq!(fold(&plan, &[too_long]).0.unwrap_err().kind, ErrorKind::ContextOverflow);
        let orphan = json!({"type": "content_block_delta", "index": 4, "delta": {"type": "text_delta", "text": "x"}});
        assert_eq!(fold(&plan, &[start(1), orphan]).0.unwrap_err().kind, ErrorKind::BadResponse);
        // Junk of the right event types must not panic.
        let junk = [
            json!({"type": "message_start"}),
            json!({"type": "content_block_start", "index": -1}),
            json!({"type": "message_delta", "usage": 3}),
            json!({"type": "message_stop"}),
        ];
        let r = fold(&plan, &junk).0.unwrap();
        assert_eq!(r.text, "");
    }

    #[test]
    fn urls_take_one_v1() {
        let messages_url = |base: &str| crate::http::join_url(base, messages_path(base)).unwrap().to_string();
        assert_eq!(messages_url("https://api.anthropic.com"), "https://api.anthropic.com/v1/messages");
        assert_eq!(messages_url("https://api.anthropic.com/"), "https://api.anthropic.com/v1/messages");
        assert_eq!(messages_url("http://h:1/v1/"), "http://h:1/v1/messages");
        assert_eq!(messages_url("http://h:1/proxy"), "http://h:1/proxy/v1/messages");
    }
}
