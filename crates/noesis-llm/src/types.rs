use serde_json::Value;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The caller.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call the model asked for.
    Tool,
}

impl Role {
    /// The role's name in the chat APIs that use these four words.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said (for [`Role::Tool`], the tool's result).
    pub content: String,
    /// Tools the assistant asked to call in this turn.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For [`Role::Tool`]: the id of the call this answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For [`Role::Tool`]: the name of the tool that answered (Gemini and
    /// Ollama match results by name, not id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
}

impl Message {
    fn plain(role: Role, content: String) -> Message {
        Message { role, content, tool_calls: Vec::new(), tool_call_id: None, tool_name: None }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::plain(Role::System, content.into())
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::plain(Role::User, content.into())
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::plain(Role::Assistant, content.into())
    }
    /// The assistant's turn as the provider gave it: text and tool calls.
    pub fn assistant_turn(response: &ChatResponse) -> Message {
        Message { tool_calls: response.tool_calls.clone(), ..Message::assistant(response.text.clone()) }
    }
    /// The result of `call`, to send back to the model.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call.id.clone()),
            tool_name: Some(call.name.clone()),
            ..Message::plain(Role::Tool, content.into())
        }
    }
}

/// A tool the model may call, described the same way for every provider.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    /// The tool's name (`[a-zA-Z0-9_-]`, at most 64 characters for most APIs).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// A JSON Schema for its arguments (an object schema).
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Tool(String),
}

impl ToolCall {
    /// The arguments as a JSON object, as APIs that take them structured
    /// require: text another provider kept unparsed is parsed when it is an
    /// object, and anything else becomes `{}` (the tool's result is where
    /// the caller reports bad arguments).
    pub fn arguments_object(&self) -> Value {
        match &self.arguments {
            Value::Object(_) => self.arguments.clone(),
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => serde_json::json!({}),
            },
            _ => serde_json::json!({}),
        }
    }
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolCall {
    /// The provider's id for the call (made up when the API has none).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments as JSON (an object; a string when the model sent text
    /// that is not JSON, so the caller can report it).
    pub arguments: Value,
}

/// What shape the reply must take.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text.
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// A JSON object that satisfies `schema`.
    JsonSchema {
        /// A short name for the schema (`[a-zA-Z0-9_-]`).
        name: String,
        /// The schema.
        schema: Value,
    },
}

/// One chat request.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// The reply's shape.
    pub response_format: ResponseFormat,
    /// Cap on output tokens.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Tools the model may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether it must call one.
    pub tool_choice: ToolChoice,
}

impl ChatRequest {
    /// A request with these messages and defaults for the rest.
    pub fn new(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, ..ChatRequest::default() }
    }
}

/// How the structured-output request was honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredMode {
    /// The provider enforced the JSON Schema strictly (OpenAI `strict: true`,
    /// Gemini `responseSchema`, Ollama `format` with a schema).
    JsonSchemaStrict,
    /// The provider was given the JSON Schema as guidance, not enforced.
    JsonSchema,
    /// The schema was the input schema of a tool the model was forced to
    /// call (Anthropic); the reply is that call's arguments.
    ForcedTool,
    /// The provider was asked for any JSON object.
    JsonObject,
    /// Plain text; the runtime extracts the JSON.
    Text,
    /// Built from the schema without a model (test model).
    Fabricated,
    /// Decoded under a grammar compiled from the schema (local model).
    Grammar,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished.
    Stop,
    /// The output token limit was hit.
    Length,
    /// The model stopped to call tools.
    ToolCalls,
    /// Anything else the provider reported.
    Other,
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// One chat reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The text of the reply.
    pub text: String,
    /// The model that answered, as the provider names it.
    pub model: String,
    /// Token usage, when reported.
    pub usage: Option<Usage>,
    /// Why generation stopped, when reported.
    pub finish_reason: Option<FinishReason>,
    /// How structured output was requested.
    pub structured: StructuredMode,
    /// Tools the model asked to call.
    pub tool_calls: Vec<ToolCall>,
    /// `provider/model` that gave this answer when it was not the provider
    /// asked (a fallback chain); `None` otherwise.
    pub served_by: Option<String>,
}

impl ChatResponse {
    /// A reply with this text and nothing else known.
    pub fn text(text: impl Into<String>, model: impl Into<String>, structured: StructuredMode) -> ChatResponse {
        ChatResponse {
            text: text.into(),
            model: model.into(),
            usage: None,
            finish_reason: None,
            structured,
            tool_calls: Vec::new(),
            served_by: None,
        }
    }
}

/// What a provider supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Capabilities {
    /// It accepts a JSON Schema for the reply.
    pub json_schema: bool,
    /// It accepts a request for "any JSON object".
    pub json_mode: bool,
    /// It can call tools natively.
    pub tools: bool,
    /// It streams text as it is generated.
    pub streaming: bool,
}

/// Usage added up over several calls.
impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// A temperature as JSON, in its shortest decimal form: `0.2`, not the
/// `0.20000000298023224` an `f32` widens to (which some APIs log and
/// recordings would carry).
pub(crate) fn temperature_json(t: f32) -> serde_json::Value {
    format!("{t}").parse::<f64>().map_or_else(|_| serde_json::json!(t), |t| serde_json::json!(t))
}

/// A schema or tool name as the APIs accept it (`[a-zA-Z0-9_-]{1,64}`):
/// other characters become `_`, long names are cut, an empty one becomes
/// `envelope`.
pub(crate) fn schema_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if s.is_empty() { "envelope".to_owned() } else { s }
}

/// `request` with its JSON Schema spelled out in the system message, for a
/// call whose API is no longer given the schema (after an endpoint refused
/// it and the call fell back to JSON mode or plain text): without it the
/// model would see no schema at all. `None` when the request has no schema.
pub(crate) fn with_schema_in_prompt(request: &ChatRequest) -> Option<ChatRequest> {
    let ResponseFormat::JsonSchema { schema, .. } = &request.response_format else { return None };
    let text = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
    let instruction =
        format!("The reply must be one JSON object that satisfies this JSON Schema:\n```json\n{text}\n```");
    let mut out = request.clone();
    match out.messages.iter_mut().find(|m| m.role == Role::System) {
        Some(system) => {
            system.content = format!("{}\n\n{instruction}", system.content);
        }
        None => out.messages.insert(0, Message::system(instruction)),
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_schema_joins_the_system_message_or_becomes_one() {
        let schema = json!({"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}}});
        let format = ResponseFormat::JsonSchema { name: "s".into(), schema };
        let with_system = ChatRequest {
            response_format: format.clone(),
            ..ChatRequest::new(vec![Message::system("Be brief."), Message::user("hi")])
        };
        let out = with_schema_in_prompt(&with_system).unwrap();
        assert_eq!(out.messages.len(), 2);
        assert!(out.messages[0].content.starts_with("Be brief.\n\nThe reply must be one JSON object"));
        assert!(out.messages[0].content.contains("\"verdict\""), "{}", out.messages[0].content);
        assert_eq!(out.messages[1], Message::user("hi"));
        let bare = ChatRequest { response_format: format, ..ChatRequest::new(vec![Message::user("hi")]) };
        let out = with_schema_in_prompt(&bare).unwrap();
        assert_eq!(out.messages[0].role, Role::System);
        assert!(out.messages[0].content.contains("\"enum\""));
        assert_eq!(with_schema_in_prompt(&ChatRequest::new(vec![Message::user("hi")])), None);
    }
}
