//! The `generateContent` request: the conversation as `contents`, the
//! generation config, the tools, and the weaker shapes to fall back to.

use serde_json::{Map, Value, json};

use super::CallMemory;
use super::schema::to_response_schema;
use crate::error::{ErrorKind, ProviderError};
use crate::types::{ChatRequest, Message, ResponseFormat, Role, StructuredMode, ToolChoice};

/// Gemini 3 refuses a replayed `functionCall` part without the
/// `thoughtSignature` it came with; this documented placeholder stands in
/// when the signature is unknown (history from another provider, or from
/// before a restart).
const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// How the reply's shape is asked for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Output {
    Text,
    /// `responseMimeType: application/json` only.
    JsonMime,
    /// `responseSchema` in Gemini's OpenAPI subset.
    Schema(Value),
    /// `responseJsonSchema`: the JSON Schema as given.
    JsonSchema(Value),
}

pub(super) fn plan(format: &ResponseFormat) -> (StructuredMode, Output) {
    match format {
        ResponseFormat::Text => (StructuredMode::Text, Output::Text),
        ResponseFormat::JsonObject => (StructuredMode::JsonObject, Output::JsonMime),
        ResponseFormat::JsonSchema { schema, .. } => match to_response_schema(schema) {
            Ok(s) => (StructuredMode::JsonSchemaStrict, Output::Schema(s)),
            Err(_) => (StructuredMode::JsonSchemaStrict, Output::JsonSchema(schema.clone())),
        },
    }
}

pub(super) fn body(request: &ChatRequest, output: &Output, memory: &CallMemory) -> Value {
    let mut body = json!({"contents": contents(&request.messages, memory)});
    let system: Vec<Value> =
        request.messages.iter().filter(|m| m.role == Role::System).map(|m| json!({"text": m.content})).collect();
    if !system.is_empty() {
        body["systemInstruction"] = json!({"parts": system});
    }
    let mut config = Map::new();
    if let Some(t) = request.temperature {
        config.insert("temperature".into(), crate::types::temperature_json(t));
    }
    if let Some(m) = request.max_tokens {
        config.insert("maxOutputTokens".into(), json!(m));
    }
    match output {
        Output::Text => {}
        Output::JsonMime => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Output::Schema(s) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseSchema".into(), s.clone());
        }
        Output::JsonSchema(s) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), s.clone());
        }
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let mut d = json!({"name": t.name, "description": t.description});
                if let Some((key, params)) = parameters(&t.parameters) {
                    d[key] = params;
                }
                d
            })
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
        body["toolConfig"] = json!({"functionCallingConfig": match &request.tool_choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        }});
    }
    body
}

/// A weaker way to ask for the reply's shape when the API refused this one;
/// the runtime checks the reply against the schema either way. Each step
/// weakens the request, so a call falls back at most twice.
pub(super) fn fallback(mode: StructuredMode, e: &ProviderError) -> Option<(StructuredMode, Output)> {
    if e.kind != (ErrorKind::Rejected { status: 400 }) {
        return None;
    }
    let m = e.message.to_ascii_lowercase().replace('_', "");
    if mode != StructuredMode::Text && m.contains("response mime type") {
        // Older models take either tools or a JSON reply, not both.
        return Some((StructuredMode::Text, Output::Text));
    }
    if mode == StructuredMode::JsonSchemaStrict && (m.contains("responseschema") || m.contains("responsejsonschema")) {
        // The schema itself was refused (a keyword this model lacks).
        return Some((StructuredMode::JsonObject, Output::JsonMime));
    }
    None
}

/// A tool's parameters under the key that takes them: `parameters` in the
/// OpenAPI subset when they convert, `parametersJsonSchema` otherwise. None
/// for a tool without arguments, which Gemini wants left unset.
fn parameters(schema: &Value) -> Option<(&'static str, Value)> {
    let no_properties = schema.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty);
    let closed = schema.get("additionalProperties").is_none_or(|a| a == &json!(false));
    let plain = ["anyOf", "oneOf", "allOf", "$ref", "patternProperties"].iter().all(|k| schema.get(k).is_none());
    if no_properties && closed && plain {
        return None;
    }
    match to_response_schema(schema) {
        Ok(s) => Some(("parameters", s)),
        Err(_) => Some(("parametersJsonSchema", schema.clone())),
    }
}

fn contents(messages: &[Message], memory: &CallMemory) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Every result for one turn's calls goes in one content: Gemini counts
    // them against that turn's calls.
    let mut results: Vec<Value> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role != Role::Tool && !results.is_empty() {
            out.push(json!({"role": "user", "parts": std::mem::take(&mut results)}));
        }
        match m.role {
            Role::System => {}
            Role::User => out.push(json!({"role": "user", "parts": [{"text": m.content}]})),
            Role::Assistant => out.push(json!({"role": "model", "parts": model_parts(m, memory)})),
            Role::Tool => {
                let name = m.tool_name.clone().or_else(|| name_of_call(&messages[..i], m.tool_call_id.as_deref()));
                let mut fr = json!({"name": name.unwrap_or_default(), "response": tool_response(&m.content)});
                if let Some(id) = m.tool_call_id.as_deref().filter(|id| memory.get(id).is_some_and(|r| r.from_api)) {
                    fr["id"] = json!(id);
                }
                results.push(json!({"functionResponse": fr}));
            }
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "parts": results}));
    }
    out
}

fn model_parts(m: &Message, memory: &CallMemory) -> Vec<Value> {
    let mut parts = Vec::new();
    if !m.content.is_empty() || m.tool_calls.is_empty() {
        parts.push(json!({"text": m.content}));
    }
    // Calls none of which this provider remembers came from elsewhere: the
    // placeholder signature lets Gemini 3 accept them.
    let foreign = m.tool_calls.iter().all(|c| memory.get(&c.id).is_none());
    for (i, c) in m.tool_calls.iter().enumerate() {
        let known = memory.get(&c.id);
        let mut call = json!({"name": c.name, "args": call_args(&c.arguments)});
        if known.is_some_and(|r| r.from_api) {
            call["id"] = json!(c.id);
        }
        let mut part = json!({"functionCall": call});
        match known.and_then(|r| r.signature.as_deref()) {
            Some(sig) => part["thoughtSignature"] = json!(sig),
            None if foreign && i == 0 => part["thoughtSignature"] = json!(SKIP_SIGNATURE),
            None => {}
        }
        parts.push(part);
    }
    parts
}

/// `args` must be an object; text that was not JSON is passed on as such.
fn call_args(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::Null => json!({}),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({"input": s}),
        },
        other => json!({"input": other}),
    }
}

/// `functionResponse.response` must be an object: a tool's JSON object goes
/// as is, anything else under `output`, the key the API reads as the
/// function's output.
fn tool_response(content: &str) -> Value {
    match serde_json::from_str::<Value>(content) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"output": content}),
    }
}

/// The tool's name from the assistant turn that made the call (Gemini
/// matches results by name).
fn name_of_call(before: &[Message], id: Option<&str>) -> Option<String> {
    let id = id?;
    before.iter().rev().flat_map(|m| &m.tool_calls).find(|c| c.id == id).map(|c| c.name.clone())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemini::Remembered;
    use crate::types::{ToolCall, ToolSpec};

    fn memory_with(entries: &[(&str, bool, Option<&str>)]) -> CallMemory {
        let mut m = CallMemory::default();
        for (id, from_api, sig) in entries {
            m.remember(id, Remembered { from_api: *from_api, signature: sig.map(str::to_owned) });
        }
        m
    }

    #[test]
    fn conversation_takes_the_contents_shape() {
        let a = ToolCall { id: "fc-1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
        let b = ToolCall { id: "call_7".into(), name: "list".into(), arguments: json!("not json") };
        let turn = Message { tool_calls: vec![a.clone(), b.clone()], ..Message::assistant("") };
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            turn,
            Message::tool_result(&a, "{\"text\": \"A\"}"),
            Message { tool_name: None, ..Message::tool_result(&b, "x, y") },
            Message::user("thanks"),
        ];
        let memory = memory_with(&[("fc-1", true, Some("SIG")), ("call_7", false, None)]);
        let req = ChatRequest::new(messages);
        let got = body(&req, &Output::Text, &memory);
        assert_eq!(got["systemInstruction"], json!({"parts": [{"text": "be brief"}]}));
        assert_eq!(
            got["contents"],
            json!([
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "read", "args": {"path": "a"}, "id": "fc-1"}, "thoughtSignature": "SIG"},
                    {"functionCall": {"name": "list", "args": {"input": "not json"}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "read", "response": {"text": "A"}, "id": "fc-1"}},
                    {"functionResponse": {"name": "list", "response": {"output": "x, y"}}}
                ]},
                {"role": "user", "parts": [{"text": "thanks"}]}
            ])
        );
        assert!(got.get("generationConfig").is_none());
        assert!(got.get("tools").is_none());
    }

    #[test]
    fn calls_from_elsewhere_get_the_placeholder_signature_once() {
        let calls = vec![
            ToolCall { id: "x1".into(), name: "a".into(), arguments: json!({}) },
            ToolCall { id: "x2".into(), name: "b".into(), arguments: json!({}) },
        ];
        let turn = Message { tool_calls: calls, ..Message::assistant("thinking aloud") };
        let parts = model_parts(&turn, &CallMemory::default());
        assert_eq!(
            Value::Array(parts),
            json!([
                {"text": "thinking aloud"},
                {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": SKIP_SIGNATURE},
                {"functionCall": {"name": "b", "args": {}}}
            ])
        );
        // Known calls without a signature (older models) get none.
        let turn = Message {
            tool_calls: vec![ToolCall { id: "call_0".into(), name: "a".into(), arguments: json!({}) }],
            ..Message::assistant("")
        };
        let parts = model_parts(&turn, &memory_with(&[("call_0", false, None)]));
        assert_eq!(Value::Array(parts), json!([{"functionCall": {"name": "a", "args": {}}}]));
    }

    #[test]
    fn generation_config_and_tools() {
        let mut req = ChatRequest::new(vec![Message::user("hi")]);
        req.temperature = Some(0.5);
        req.max_tokens = Some(64);
        req.tools = vec![
            ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                                   "additionalProperties": false}),
            },
            ToolSpec {
                name: "now".into(),
                description: "time".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
            ToolSpec {
                name: "put".into(),
                description: "stores".into(),
                parameters: json!({"type": "object", "additionalProperties": {"type": "string"}}),
            },
        ];
        req.tool_choice = ToolChoice::Tool("read".into());
        let got = body(&req, &Output::Schema(json!({"type": "STRING"})), &CallMemory::default());
        assert_eq!(
            got["generationConfig"],
            json!({"temperature": 0.5, "maxOutputTokens": 64, "responseMimeType": "application/json",
                   "responseSchema": {"type": "STRING"}})
        );
        assert_eq!(
            got["tools"],
            json!([{"functionDeclarations": [
                {"name": "read", "description": "reads", "parameters": {"type": "OBJECT",
                    "properties": {"path": {"type": "STRING"}}, "required": ["path"]}},
                {"name": "now", "description": "time"},
                {"name": "put", "description": "stores", "parametersJsonSchema":
                    {"type": "object", "additionalProperties": {"type": "string"}}}
            ]}])
        );
        assert_eq!(
            got["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read"]}})
        );
        for (choice, mode) in [(ToolChoice::Auto, "AUTO"), (ToolChoice::None, "NONE"), (ToolChoice::Required, "ANY")] {
            req.tool_choice = choice;
            let got = body(&req, &Output::Text, &CallMemory::default());
            assert_eq!(got["toolConfig"], json!({"functionCallingConfig": {"mode": mode}}));
        }
    }

    #[test]
    fn structured_output_plan() {
        assert_eq!(plan(&ResponseFormat::Text), (StructuredMode::Text, Output::Text));
        assert_eq!(plan(&ResponseFormat::JsonObject), (StructuredMode::JsonObject, Output::JsonMime));
        let ok = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            plan(&ResponseFormat::JsonSchema { name: "n".into(), schema: ok }),
            (
                StructuredMode::JsonSchemaStrict,
                Output::Schema(json!({"type": "OBJECT", "properties": {"a": {"type": "STRING"}}}))
            )
        );
        let free = json!({"type": "object"});
        assert_eq!(
            plan(&ResponseFormat::JsonSchema { name: "n".into(), schema: free.clone() }),
            (StructuredMode::JsonSchemaStrict, Output::JsonSchema(free))
        );
    }

    #[test]
    fn refusals_of_the_shape_fall_back_step_by_step() {
        let rejected = |m: &str| ProviderError::new("gemini", ErrorKind::Rejected { status: 400 }, m);
        let schema = rejected("Unknown name \"minimum\" at 'generation_config.response_schema.properties[0]'");
        assert_eq!(
            fallback(StructuredMode::JsonSchemaStrict, &schema),
            Some((StructuredMode::JsonObject, Output::JsonMime))
        );
        assert_eq!(fallback(StructuredMode::JsonObject, &schema), None);
        let mime = rejected("Function calling with a response mime type: 'application/json' is unsupported");
        for mode in [StructuredMode::JsonSchemaStrict, StructuredMode::JsonObject] {
            assert_eq!(fallback(mode, &mime), Some((StructuredMode::Text, Output::Text)));
        }
        assert_eq!(fallback(StructuredMode::Text, &mime), None);
        // A refused tool schema is not the reply's shape.
        let tool = rejected("function_declarations[0].parameters_json_schema: invalid");
        assert_eq!(fallback(StructuredMode::JsonSchemaStrict, &tool), None);
        let server = ProviderError::new("gemini", ErrorKind::Unavailable, "response_schema");
        assert_eq!(fallback(StructuredMode::JsonSchemaStrict, &server), None);
    }

    #[test]
    fn tool_results_are_wrapped_in_objects() {
        assert_eq!(tool_response("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(tool_response("[1, 2]"), json!({"output": "[1, 2]"}));
        assert_eq!(tool_response("plain"), json!({"output": "plain"}));
        assert_eq!(call_args(&json!("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(call_args(&Value::Null), json!({}));
    }
}
