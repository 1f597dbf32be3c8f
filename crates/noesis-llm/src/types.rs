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
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message { role: Role::System, content: content.into() }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message { role: Role::User, content: content.into() }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message { role: Role::Assistant, content: content.into() }
    }
}

/// What shape the reply must take.
#[derive(Debug, Clone, PartialEq, Default)]
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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// The reply's shape.
    pub response_format: ResponseFormat,
    /// Cap on output tokens.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

impl ChatRequest {
    /// A request with these messages and defaults for the rest.
    pub fn new(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, ..ChatRequest::default() }
    }
}

/// How the structured-output request was honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredMode {
    /// The provider was given the JSON Schema.
    JsonSchema,
    /// The provider was asked for any JSON object.
    JsonObject,
    /// Plain text; the runtime extracts the JSON.
    Text,
    /// Built from the schema without a model (test model).
    Fabricated,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished.
    Stop,
    /// The output token limit was hit.
    Length,
    /// Anything else the provider reported.
    Other,
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
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
}

/// What a provider supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Capabilities {
    /// It accepts a JSON Schema for the reply.
    pub json_schema: bool,
    /// It accepts a request for "any JSON object".
    pub json_mode: bool,
}
