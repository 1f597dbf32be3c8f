//! Tool calls for a model or endpoint that has no tool calling of its own
//! (SmolLM2's plain ChatML template, an OpenAI-compatible server without
//! `tools`): one JSON protocol in text. The reply must be exactly one call
//! of a registered tool with arguments valid for that tool's schema, or a
//! final answer —
//!
//! ```text
//! {"tool_calls": [{"name": "<one of the tools>", "arguments": {…that tool's schema…}}]}
//! {"response": "…"}
//! ```
//!
//! — which the local model enforces with a grammar (so even the smallest
//! model never emits a broken call) and [`TextTools`] asks for with a JSON
//! Schema response format where the endpoint has one. The conversation goes
//! as plain chat turns: the model's own calls as that JSON, each tool result
//! as a user turn naming the call.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{
    Capabilities, ChatRequest, ChatResponse, Message, Provider, ProviderError, ResponseFormat, Role, TextSink,
    ToolCall, ToolChoice, ToolSpec,
};

/// A provider without tool calling, given tools through the text protocol;
/// requests without tools pass through unchanged.
pub struct TextTools {
    inner: std::sync::Arc<dyn Provider>,
}

impl TextTools {
    /// Wraps `inner`.
    pub fn new(inner: std::sync::Arc<dyn Provider>) -> TextTools {
        TextTools { inner }
    }

    fn rewrite(&self, request: &ChatRequest) -> ChatRequest {
        let caps = self.inner.capabilities();
        let schema = reply_schema(&request.tools, &request.tool_choice);
        ChatRequest {
            messages: as_chat(&request.messages, &request.tools),
            response_format: if caps.json_schema {
                ResponseFormat::JsonSchema { name: "tool_protocol".into(), schema }
            } else if caps.json_mode {
                ResponseFormat::JsonObject
            } else {
                ResponseFormat::Text
            },
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            ..request.clone()
        }
    }

    fn read(request: &ChatRequest, mut reply: ChatResponse) -> ChatResponse {
        let (text, calls) = read_reply(&reply.text, request.messages.len());
        reply.text = text;
        reply.tool_calls = calls;
        reply
    }
}

#[async_trait]
impl Provider for TextTools {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { tools: true, ..self.inner.capabilities() }
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        if request.tools.is_empty() {
            return self.inner.chat(request).await;
        }
        let reply = self.inner.chat(&self.rewrite(request)).await?;
        Ok(Self::read(request, reply))
    }

    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        if request.tools.is_empty() {
            return self.inner.chat_stream(request, on_text).await;
        }
        let reply = self.inner.chat_stream(&self.rewrite(request), on_text).await?;
        Ok(Self::read(request, reply))
    }
}

/// Longest final answer, in characters.
pub const MAX_RESPONSE: u64 = 2000;

/// The schema a reply must satisfy: one call of one of `tools`, or (unless
/// `choice` requires a call) an answer. Strings and lists the tools leave
/// open are left for the caller to bound (the local model's grammar fitter
/// does).
pub fn reply_schema(tools: &[ToolSpec], choice: &ToolChoice) -> Value {
    let allowed: Vec<&ToolSpec> = match choice {
        ToolChoice::Tool(name) => tools.iter().filter(|t| &t.name == name).collect(),
        _ => tools.iter().collect(),
    };
    let calls: Vec<Value> = allowed
        .iter()
        .map(|t| {
            // A schema that names no properties would let the model write
            // anything, without bound: such a tool is called with `{}`.
            let mut arguments = t.parameters.clone();
            if arguments.get("properties").is_none_or(|p| !p.is_object()) {
                arguments = json!({"type": "object", "properties": {}, "additionalProperties": false});
            }
            json!({
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": false
            })
        })
        .collect();
    let call = json!({
        "type": "object",
        "properties": {"tool_calls": {"type": "array", "items": {"anyOf": calls}, "minItems": 1, "maxItems": 1}},
        "required": ["tool_calls"],
        "additionalProperties": false
    });
    let answer = json!({
        "type": "object",
        "properties": {"response": {"type": "string", "minLength": 1, "maxLength": MAX_RESPONSE}},
        "required": ["response"],
        "additionalProperties": false
    });
    match choice {
        ToolChoice::Required | ToolChoice::Tool(_) if !calls.is_empty() => call,
        ToolChoice::None => answer,
        _ if calls.is_empty() => answer,
        _ => json!({"anyOf": [call, answer]}),
    }
}

/// The conversation in plain chat turns: the tools described in the system
/// turn, the model's calls written as the JSON it produced, and each result
/// as a user turn.
pub fn as_chat(messages: &[Message], tools: &[ToolSpec]) -> Vec<Message> {
    let mut listing = String::from(
        "You can call tools. Reply with one JSON object: {\"tool_calls\": [{\"name\": TOOL, \"arguments\": {...}}]} \
         to call a tool, or {\"response\": TEXT} with your final answer. Tools:",
    );
    for t in tools {
        listing.push_str(&format!("\n- {}: {} Arguments: {}", t.name, t.description, t.parameters));
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    if !messages.iter().any(|m| m.role == Role::System) {
        out.push(Message::system(listing.clone()));
    }
    for m in messages {
        match m.role {
            Role::System => out.push(Message::system(format!("{}\n\n{listing}", m.content))),
            Role::Assistant if !m.tool_calls.is_empty() => {
                // In the order and layout the grammar makes the model write.
                let calls: Vec<String> = m
                    .tool_calls
                    .iter()
                    .map(|c| format!("{{\"name\": {}, \"arguments\": {}}}", json!(c.name), c.arguments_object()))
                    .collect();
                out.push(Message::assistant(format!("{{\"tool_calls\": [{}]}}", calls.join(", "))));
            }
            Role::Assistant => out.push(Message::assistant(format!("{{\"response\": {}}}", json!(m.content)))),
            Role::Tool => out.push(Message::user(format!(
                "Result of {} (call {}):\n{}",
                m.tool_name.as_deref().unwrap_or("the tool"),
                m.tool_call_id.as_deref().unwrap_or("?"),
                m.content
            ))),
            Role::User => out.push(m.clone()),
        }
    }
    out
}

/// The reply read back: its text and calls. `turn` makes call ids distinct
/// across a conversation. A reply that is not the grammar's JSON (cut off
/// by the token limit) comes back as text, for the caller to count as a
/// malformed reply.
pub fn read_reply(text: &str, turn: usize) -> (String, Vec<ToolCall>) {
    let Ok(value) = serde_json::from_str::<Value>(text.trim()) else { return (text.to_owned(), Vec::new()) };
    if let Some(response) = value.get("response").and_then(Value::as_str) {
        return (response.to_owned(), Vec::new());
    }
    let calls: Vec<ToolCall> = value
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    Some(ToolCall {
                        id: format!("local_{turn}_{i}"),
                        name: c.get("name")?.as_str()?.to_owned(),
                        arguments: c.get("arguments").cloned().unwrap_or_else(|| json!({})),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if calls.is_empty() { (text.to_owned(), Vec::new()) } else { (String::new(), calls) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "read_file".into(),
                description: "Reads a file.".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            },
            ToolSpec { name: "list_dir".into(), description: "Lists a folder.".into(), parameters: json!({}) },
        ]
    }

    fn valid(schema: &Value, v: &Value) -> bool {
        jsonschema::validator_for(schema).unwrap().is_valid(v)
    }

    #[test]
    fn the_schema_admits_exactly_a_registered_call_or_an_answer() {
        let s = reply_schema(&tools(), &ToolChoice::Auto);
        assert!(valid(&s, &json!({"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]})));
        assert!(valid(&s, &json!({"tool_calls": [{"name": "list_dir", "arguments": {}}]})));
        assert!(valid(&s, &json!({"response": "done"})));
        for bad in [
            json!({"tool_calls": [{"name": "rm", "arguments": {}}]}),
            json!({"tool_calls": [{"name": "read_file", "arguments": {}}]}),
            json!({"tool_calls": [{"name": "read_file", "arguments": {"path": 3}}]}),
            json!({"tool_calls": []}),
            json!({"tool_calls": [{"name": "list_dir", "arguments": {}}, {"name": "list_dir", "arguments": {}}]}),
            json!({"response": ""}),
            json!({"response": "x", "extra": 1}),
        ] {
            assert!(!valid(&s, &bad), "{bad}");
        }
        let required = reply_schema(&tools(), &ToolChoice::Required);
        assert!(!valid(&required, &json!({"response": "done"})));
        let one = reply_schema(&tools(), &ToolChoice::Tool("list_dir".into()));
        assert!(!valid(&one, &json!({"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]})));
        let none = reply_schema(&tools(), &ToolChoice::None);
        assert!(!valid(&none, &json!({"tool_calls": [{"name": "list_dir", "arguments": {}}]})));
    }

    #[test]
    fn calls_and_results_become_plain_turns() {
        let mut asked = Message::assistant("");
        asked.tool_calls =
            vec![ToolCall { id: "c1".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) }];
        let mut result = Message::user("alpha");
        result.role = Role::Tool;
        result.tool_call_id = Some("c1".into());
        result.tool_name = Some("read_file".into());
        let chat =
            as_chat(&[Message::user("Read a.txt"), asked, result, Message::assistant("It says alpha.")], &tools());
        let roles: Vec<Role> = chat.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User, Role::Assistant]);
        assert!(chat[0].content.contains("- read_file: Reads a file."));
        assert_eq!(chat[2].content, r#"{"tool_calls": [{"name": "read_file", "arguments": {"path":"a.txt"}}]}"#);
        assert_eq!(chat[3].content, "Result of read_file (call c1):\nalpha");
        assert_eq!(chat[4].content, r#"{"response": "It says alpha."}"#);
        assert!(chat.iter().all(|m| m.tool_calls.is_empty() && m.tool_call_id.is_none()));
    }

    #[test]
    fn replies_are_read_back_as_calls_or_text() {
        let (text, calls) = read_reply(r#"{"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}"#, 3);
        assert_eq!((text.as_str(), calls.len()), ("", 1));
        assert_eq!((calls[0].id.as_str(), calls[0].arguments.clone()), ("local_3_0", json!({"path": "."})));
        assert_eq!(read_reply(r#"{"response": "done"}"#, 0), ("done".into(), vec![]));
        // Cut off by the token limit: text, for the caller to count.
        assert_eq!(read_reply(r#"{"tool_calls": [{"na"#, 0).0, r#"{"tool_calls": [{"na"#);
    }
}
