//! Google Gemini `generateContent` (`POST {base}/models/{model}:generateContent`),
//! plain and streamed (`:streamGenerateContent?alt=sse`), with native
//! function calling and schema-enforced JSON output.
//!
//! Structured output goes through `responseSchema` (an OpenAPI-3 subset) when
//! [`to_response_schema`] can express the JSON Schema there, and through
//! `responseJsonSchema` (JSON Schema as is) otherwise; the API enforces both.
//! The runtime validates every reply against the original schema afterwards,
//! so the conversion may loosen a schema but never tighten it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use crate::TextSink;
use crate::error::{ErrorKind, ProviderError};
use crate::http::{EndpointConfig, HttpCore, Sink, excerpt};
use crate::types::{
    Capabilities, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role, StructuredMode, ToolCall,
    ToolChoice, Usage,
};

/// Gemini 3 refuses a replayed `functionCall` part without the
/// `thoughtSignature` it came with; this documented placeholder stands in
/// when the signature is unknown (history from another provider, or from
/// before a restart).
const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// Tool calls remembered for signatures and ids; oldest forgotten first.
const MEMORY_CAP: usize = 4096;

/// `$ref`s inlined inside one another, and nesting in general, stop here.
const MAX_DEPTH: usize = 48;

/// A provider for the Gemini API (Google AI Studio keys).
#[derive(Debug)]
pub struct Gemini {
    config: EndpointConfig,
    http: HttpCore,
    /// Numbers the ids made up for calls the API gave none.
    next_call: AtomicU64,
    memory: Mutex<CallMemory>,
}

impl Gemini {
    /// Where the public API lives.
    pub const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com/v1beta";

    /// A provider with its own connection pool and concurrency cap. The key
    /// travels in the `x-goog-api-key` header, never in the URL.
    pub fn new(config: EndpointConfig) -> Result<Gemini, ProviderError> {
        let http = HttpCore::new(&config.name, config.http)?;
        Ok(Gemini { config, http, next_call: AtomicU64::new(0), memory: Mutex::new(CallMemory::default()) })
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.config.api_key {
            Some(key) => vec![("x-goog-api-key", key.clone())],
            None => Vec::new(),
        }
    }

    fn url(&self, stream: bool) -> Result<reqwest::Url, ProviderError> {
        let model = self.config.model.trim_start_matches("models/");
        if stream {
            self.config.url(&format!("models/{model}:streamGenerateContent?alt=sse"))
        } else {
            self.config.url(&format!("models/{model}:generateContent"))
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, CallMemory> {
        // The memory holds no invariant a panicking holder could break.
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let url = self.url(on_text.is_some())?;
        let headers = self.headers();
        let (mut mode, mut output) = plan(&request.response_format);
        // After a fallback the API is no longer given the schema, so the
        // prompt carries it instead.
        let schema_in_prompt = crate::types::with_schema_in_prompt(request);
        loop {
            let sent = match (&schema_in_prompt, &output) {
                (Some(with_schema), Output::JsonMime | Output::Text) => with_schema,
                _ => request,
            };
            let body = body(sent, &output, &self.memory());
            let result = match on_text {
                None => match self.http.post(&url, &headers, &body).await {
                    Ok(text) => self.http.parse_json(&text).and_then(|v| {
                        let mut fold = Fold::new(&self.config.model);
                        fold.chunk(&v, None).map_err(|m| self.http.err(ErrorKind::BadResponse, m))?;
                        Ok(fold)
                    }),
                    Err(e) => Err(e),
                },
                Some(sink) => {
                    let mut fold = Fold::new(&self.config.model);
                    let mut on_event = |ev: &crate::stream::SseEvent| self.event(&mut fold, &ev.data, sink);
                    let streamed = self.http.post_streaming(&url, &headers, &body, Sink::Events(&mut on_event)).await;
                    streamed.and_then(|()| {
                        if fold.finish.is_none() {
                            return Err(self.http.err(
                                ErrorKind::Unavailable,
                                format!(
                                    "the stream ended early after {} chunks, before the reply was finished",
                                    fold.chunks
                                ),
                            ));
                        }
                        Ok(fold)
                    })
                }
            };
            match result {
                Ok(fold) => return Ok(self.finish(fold, mode)),
                Err(e) => match fallback(mode, &e) {
                    // Not a retry of a transient failure, so not counted as one.
                    Some(next) => (mode, output) = next,
                    None => return Err(self.reclassify(e)),
                },
            }
        }
    }

    fn event(&self, fold: &mut Fold, data: &str, sink: TextSink<'_>) -> Result<(), ProviderError> {
        let v = self.http.parse_event(data)?;
        if let Some(err) = v.get("error") {
            return Err(self
                .http
                .err(ErrorKind::Unavailable, format!("error in stream: {}", excerpt(&err.to_string()))));
        }
        fold.chunk(&v, Some(sink)).map_err(|m| self.http.err(ErrorKind::BadResponse, m))
    }

    /// Gives made-up ids to calls without one and remembers every call's
    /// signature for when the conversation comes back.
    fn finish(&self, fold: Fold, mode: StructuredMode) -> ChatResponse {
        let mut memory = self.memory();
        let tool_calls = fold
            .calls
            .into_iter()
            .map(|c| {
                let from_api = c.id.is_some();
                let id = c.id.unwrap_or_else(|| format!("call_{}", self.next_call.fetch_add(1, Ordering::Relaxed)));
                memory.remember(&id, Remembered { from_api, signature: c.signature });
                ToolCall { id, name: c.name, arguments: c.args }
            })
            .collect::<Vec<_>>();
        let finish_reason = fold.finish.as_deref().map(|r| finish_reason(r, !tool_calls.is_empty()));
        ChatResponse {
            text: fold.text,
            model: fold.model,
            usage: fold.usage,
            finish_reason,
            structured: mode,
            tool_calls,
            served_by: None,
        }
    }

    /// Gemini answers some failures with a plain 400 that other APIs give a
    /// status or wording of their own; and its error bodies may quote the
    /// key it was sent.
    fn reclassify(&self, mut e: ProviderError) -> ProviderError {
        if let Some(key) = self.config.api_key.as_deref().filter(|k| !k.is_empty()) {
            e.message = e.message.replace(key, "<redacted>");
        }
        if let ErrorKind::Rejected { status: 400 } = e.kind {
            let m = e.message.to_ascii_lowercase();
            if m.contains("api_key_invalid") || m.contains("api key not valid") || m.contains("api key not found") {
                e.kind = ErrorKind::Unavailable;
                e.message = format!("authentication failed; check the API key variable: {}", e.message);
            } else if m.contains("input token count") && m.contains("exceeds the maximum") {
                e.kind = ErrorKind::ContextOverflow;
                e.message = format!("the prompt is too long for the model: {}", e.message);
            }
        }
        e
    }
}

crate::http::http_provider!(Gemini, |_this| Capabilities {
    json_schema: true,
    json_mode: true,
    tools: true,
    streaming: true
});

// ---------------------------------------------------------------------------
// Tool calls remembered between turns
// ---------------------------------------------------------------------------

/// What the API said about one tool call that [`ToolCall`] has no room for.
#[derive(Debug, Clone, PartialEq, Default)]
struct Remembered {
    /// The id came from the API (and must go back); otherwise it was made up.
    from_api: bool,
    /// The call's `thoughtSignature`.
    signature: Option<String>,
}

#[derive(Debug, Default)]
struct CallMemory {
    by_id: HashMap<String, Remembered>,
    order: VecDeque<String>,
}

impl CallMemory {
    fn remember(&mut self, id: &str, r: Remembered) {
        if self.by_id.insert(id.to_owned(), r).is_none() {
            self.order.push_back(id.to_owned());
        }
        while self.order.len() > MEMORY_CAP {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }

    fn get(&self, id: &str) -> Option<&Remembered> {
        self.by_id.get(id)
    }
}

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

/// How the reply's shape is asked for.
#[derive(Debug, Clone, PartialEq)]
enum Output {
    Text,
    /// `responseMimeType: application/json` only.
    JsonMime,
    /// `responseSchema` in Gemini's OpenAPI subset.
    Schema(Value),
    /// `responseJsonSchema`: the JSON Schema as given.
    JsonSchema(Value),
}

fn plan(format: &ResponseFormat) -> (StructuredMode, Output) {
    match format {
        ResponseFormat::Text => (StructuredMode::Text, Output::Text),
        ResponseFormat::JsonObject => (StructuredMode::JsonObject, Output::JsonMime),
        ResponseFormat::JsonSchema { schema, .. } => match to_response_schema(schema) {
            Ok(s) => (StructuredMode::JsonSchemaStrict, Output::Schema(s)),
            Err(_) => (StructuredMode::JsonSchemaStrict, Output::JsonSchema(schema.clone())),
        },
    }
}

fn body(request: &ChatRequest, output: &Output, memory: &CallMemory) -> Value {
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
fn fallback(mode: StructuredMode, e: &ProviderError) -> Option<(StructuredMode, Output)> {
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

// ---------------------------------------------------------------------------
// Reply
// ---------------------------------------------------------------------------

/// A function call as the API gave it.
#[derive(Debug, Clone, PartialEq)]
struct WireCall {
    id: Option<String>,
    name: String,
    args: Value,
    signature: Option<String>,
}

/// One reply built from `GenerateContentResponse`s: the whole answer, or
/// the chunks of a stream (each a complete response holding the new parts;
/// the last one carries the finish reason and the usage).
#[derive(Debug)]
struct Fold {
    text: String,
    model: String,
    calls: Vec<WireCall>,
    usage: Option<Usage>,
    finish: Option<String>,
    chunks: usize,
}

impl Fold {
    fn new(model: &str) -> Fold {
        Fold { text: String::new(), model: model.to_owned(), calls: Vec::new(), usage: None, finish: None, chunks: 0 }
    }

    fn chunk(&mut self, v: &Value, sink: Option<TextSink<'_>>) -> Result<(), String> {
        self.chunks += 1;
        if let Some(m) = v.get("modelVersion").and_then(Value::as_str) {
            self.model = m.to_owned();
        }
        if let Some(u) = v.get("usageMetadata").and_then(usage) {
            self.usage = Some(u);
        }
        let Some(candidate) = v.pointer("/candidates/0") else {
            if let Some(reason) = v.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
                let detail = v.pointer("/promptFeedback/blockReasonMessage").and_then(Value::as_str).unwrap_or("");
                return Err(format!("the prompt was blocked ({reason}){}", sep(detail)));
            }
            // A stream may send a chunk with usage only.
            if sink.is_some() {
                return Ok(());
            }
            return Err(format!("reply has no candidates: {}", excerpt(&v.to_string())));
        };
        for part in candidate.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.text.push_str(t);
                if let Some(sink) = sink {
                    sink(t);
                }
            }
            if let Some(fc) = part.get("functionCall") {
                self.calls.push(WireCall {
                    id: fc.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned),
                    name: fc.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    args: match fc.get("args") {
                        Some(a) if !a.is_null() => a.clone(),
                        _ => json!({}),
                    },
                    signature: part.get("thoughtSignature").and_then(Value::as_str).map(str::to_owned),
                });
            }
        }
        if let Some(r) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish = Some(r.to_owned());
        }
        Ok(())
    }
}

fn sep(detail: &str) -> String {
    if detail.is_empty() { String::new() } else { format!(": {detail}") }
}

fn usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let count = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    // Thinking tokens are billed as output but counted apart from the
    // candidates.
    Some(Usage {
        input_tokens: count("promptTokenCount"),
        output_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
    })
}

fn finish_reason(r: &str, has_calls: bool) -> FinishReason {
    match r {
        "STOP" if has_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        _ => FinishReason::Other,
    }
}

// ---------------------------------------------------------------------------
// JSON Schema → Gemini `Schema`
// ---------------------------------------------------------------------------

/// `schema` in the OpenAPI-3 subset Gemini's `responseSchema` and function
/// `parameters` take, or where and why it cannot be expressed there.
///
/// Local `$ref`s are inlined (recursion is refused), `oneOf` becomes
/// `anyOf`, `const` a one-value `enum`, `type: [t, "null"]` becomes
/// `nullable`. Keywords the subset lacks (`additionalProperties`,
/// `maxLength`, `pattern`, …) are dropped: that only loosens the schema,
/// and the reply is validated against the original anyway. What would
/// need a keyword the subset lacks to mean anything at all (free-form
/// objects, tuples, untyped values, `allOf`) is refused, so the caller can
/// send the JSON Schema itself instead.
pub(crate) fn to_response_schema(schema: &Value) -> Result<Value, String> {
    Converter { root: schema, refs: Vec::new() }.node(schema, "", 0)
}

struct Converter<'a> {
    root: &'a Value,
    /// `$ref`s being inlined, outermost first.
    refs: Vec<String>,
}

const TYPES: &[&str] = &["string", "number", "integer", "boolean", "object", "array"];

impl Converter<'_> {
    fn node(&mut self, s: &Value, at: &str, depth: usize) -> Result<Value, String> {
        let loc = if at.is_empty() { "/" } else { at };
        if depth > MAX_DEPTH {
            return Err(format!("{loc}: nested more than {MAX_DEPTH} levels deep"));
        }
        let obj = match s {
            Value::Object(o) => o,
            Value::Bool(true) => return Err(format!("{loc}: `true` (any value) cannot be expressed")),
            Value::Bool(false) => return Err(format!("{loc}: `false` (no value) cannot be expressed")),
            _ => return Err(format!("{loc}: a schema must be an object")),
        };
        let description = obj.get("description").and_then(Value::as_str);
        if let Some(r) = obj.get("$ref") {
            let r = r.as_str().ok_or_else(|| format!("{loc}/$ref: not a string"))?;
            let mut out = self.reference(r, loc, depth)?;
            if let (Some(d), Some(o)) = (description, out.as_object_mut()) {
                o.insert("description".into(), json!(d));
            }
            if obj.get("nullable") == Some(&json!(true)) {
                out["nullable"] = json!(true);
            }
            return Ok(out);
        }
        if let Some(all) = obj.get("allOf") {
            return match all.as_array().map(Vec::as_slice) {
                Some([only]) => {
                    let mut out = self.node(only, &format!("{at}/allOf/0"), depth + 1)?;
                    if let (Some(d), Some(o)) = (description, out.as_object_mut()) {
                        o.insert("description".into(), json!(d));
                    }
                    Ok(out)
                }
                _ => Err(format!("{loc}/allOf: allOf cannot be expressed")),
            };
        }
        let alternatives = match (obj.get("anyOf"), obj.get("oneOf")) {
            (Some(_), Some(_)) => return Err(format!("{loc}: anyOf and oneOf together cannot be expressed")),
            (Some(a), None) => Some(("anyOf", a)),
            (None, Some(o)) => Some(("oneOf", o)),
            (None, None) => None,
        };
        if let Some((key, branches)) = alternatives {
            let branches = branches.as_array().ok_or_else(|| format!("{loc}/{key}: not an array"))?;
            let mut nullable = obj.get("nullable") == Some(&json!(true)) || types_of(obj).contains(&"null");
            let mut out = Vec::new();
            for (i, b) in branches.iter().enumerate() {
                if is_null_schema(b) {
                    nullable = true;
                } else {
                    out.push(self.node(b, &format!("{at}/{key}/{i}"), depth + 1)?);
                }
            }
            // Sibling keywords next to the alternatives (often a `type`
            // every branch repeats) are dropped: looser, never stricter.
            let mut node = match out.len() {
                0 => return Err(format!("{loc}/{key}: only `null` is allowed, which cannot be expressed")),
                1 => out.pop().unwrap_or_default(),
                _ => json!({"anyOf": out}),
            };
            if let Some(o) = node.as_object_mut() {
                if let Some(d) = description {
                    o.insert("description".into(), json!(d));
                }
                if nullable {
                    o.insert("nullable".into(), json!(true));
                }
            }
            return Ok(node);
        }
        let types = types_of(obj);
        let mut nullable = types.contains(&"null") || obj.get("nullable") == Some(&json!(true));
        let mut concrete: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
        for t in &concrete {
            if !TYPES.contains(t) {
                return Err(format!("{loc}/type: unknown type `{t}`"));
            }
        }
        let values = enum_values(obj);
        if values.iter().any(Value::is_null) {
            nullable = true;
        }
        if concrete.is_empty() {
            if !types.is_empty() {
                return Err(format!("{loc}: a schema that allows only `null` cannot be expressed"));
            }
            concrete = match infer_type(obj, &values) {
                Some(t) => vec![t],
                None => return Err(format!("{loc}: a schema without a type (any value) cannot be expressed")),
            };
        }
        let mut node = if concrete.len() > 1 {
            let mut branches = Vec::new();
            for t in &concrete {
                let mut one = obj.clone();
                one.insert("type".into(), json!(t));
                one.remove("description");
                one.remove("nullable");
                branches.push(self.typed(&one, t, &values, at, depth)?);
            }
            json!({"anyOf": branches})
        } else {
            self.typed(obj, concrete[0], &values, at, depth)?
        };
        if let Some(o) = node.as_object_mut() {
            if let Some(d) = description {
                o.insert("description".into(), json!(d));
            }
            if nullable {
                o.insert("nullable".into(), json!(true));
            }
        }
        Ok(node)
    }

    /// One node of a single JSON type: only the keywords that type takes.
    fn typed(
        &mut self,
        obj: &Map<String, Value>,
        t: &str,
        values: &[Value],
        at: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let loc = if at.is_empty() { "/" } else { at };
        let mut out = Map::new();
        out.insert("type".into(), json!(t.to_ascii_uppercase()));
        match t {
            "string" => {
                // The enum takes strings only; other values could never
                // match a string anyway.
                let strings: Vec<&Value> = values.iter().filter(|v| v.is_string()).collect();
                if !strings.is_empty() {
                    out.insert("enum".into(), json!(strings));
                }
                // The Gemini API fails on any other format.
                if let Some(f) =
                    obj.get("format").and_then(Value::as_str).filter(|f| matches!(*f, "date-time" | "enum"))
                {
                    out.insert("format".into(), json!(f));
                }
            }
            "number" | "integer" => {
                for k in ["minimum", "maximum"] {
                    if let Some(n) = obj.get(k).filter(|n| n.is_number()) {
                        out.insert(k.into(), n.clone());
                    }
                }
            }
            "object" => {
                let props = obj.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty());
                let Some(props) = props else {
                    return Err(format!(
                        "{loc}: an object without declared properties (free-form) cannot be expressed"
                    ));
                };
                let mut conv = Map::new();
                for (name, sub) in props {
                    conv.insert(name.clone(), self.node(sub, &format!("{at}/properties/{name}"), depth + 1)?);
                }
                let known = |v: &&Value| v.as_str().is_some_and(|n| props.contains_key(n));
                let required: Vec<&Value> =
                    obj.get("required").and_then(Value::as_array).into_iter().flatten().filter(known).collect();
                out.insert("properties".into(), Value::Object(conv));
                if !required.is_empty() {
                    out.insert("required".into(), json!(required));
                }
                let ordering: Vec<&Value> =
                    obj.get("propertyOrdering").and_then(Value::as_array).into_iter().flatten().filter(known).collect();
                if !ordering.is_empty() {
                    out.insert("propertyOrdering".into(), json!(ordering));
                }
            }
            "array" => {
                if obj.contains_key("prefixItems") || obj.get("items").is_some_and(Value::is_array) {
                    return Err(format!("{loc}: tuple arrays (prefixItems) cannot be expressed"));
                }
                let Some(items) = obj.get("items") else {
                    return Err(format!("{loc}: an array without `items` cannot be expressed"));
                };
                out.insert("items".into(), self.node(items, &format!("{at}/items"), depth + 1)?);
                for k in ["minItems", "maxItems"] {
                    if let Some(n) = obj.get(k).filter(|n| n.is_u64()) {
                        out.insert(k.into(), n.clone());
                    }
                }
            }
            _ => {} // boolean
        }
        Ok(Value::Object(out))
    }

    fn reference(&mut self, r: &str, loc: &str, depth: usize) -> Result<Value, String> {
        let Some(pointer) = r.strip_prefix('#') else {
            return Err(format!("{loc}/$ref: `{r}` is not a local reference"));
        };
        if self.refs.iter().any(|seen| seen == r) {
            return Err(format!("{loc}/$ref: `{r}` refers to itself, and recursion cannot be inlined"));
        }
        let target = self.root.pointer(pointer).ok_or_else(|| format!("{loc}/$ref: `{r}` does not resolve"))?;
        self.refs.push(r.to_owned());
        let out = self.node(target, pointer, depth + 1);
        self.refs.pop();
        out
    }
}

fn types_of(obj: &Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn enum_values(obj: &Map<String, Value>) -> Vec<Value> {
    if let Some(c) = obj.get("const") {
        return vec![c.clone()];
    }
    obj.get("enum").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn is_null_schema(s: &Value) -> bool {
    s.get("type") == Some(&json!("null")) || s.get("const") == Some(&Value::Null)
}

/// The type a schema without `type` implies by its other keywords.
fn infer_type(obj: &Map<String, Value>, values: &[Value]) -> Option<&'static str> {
    if obj.contains_key("properties") {
        return Some("object");
    }
    if obj.contains_key("items") || obj.contains_key("prefixItems") {
        return Some("array");
    }
    let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
    if values.is_empty() {
        return None;
    }
    if values.iter().all(|v| v.is_string()) {
        Some("string")
    } else if values.iter().all(|v| v.is_boolean()) {
        Some("boolean")
    } else if values.iter().all(|v| v.is_i64() || v.is_u64()) {
        Some("integer")
    } else if values.iter().all(|v| v.is_number()) {
        Some("number")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    #[track_caller]
    fn converts(input: Value, want: Value) {
        assert_eq!(to_response_schema(&input), Ok(want), "{input}");
    }

    #[track_caller]
    fn refuses(input: Value, reason: &str) {
        match to_response_schema(&input) {
            Ok(v) => panic!("{input} converted to {v}"),
            Err(e) => assert!(e.contains(reason), "{input}: `{e}` does not contain `{reason}`"),
        }
    }

    #[test]
    fn plain_types_take_the_openapi_spelling() {
        converts(json!({"type": "string"}), json!({"type": "STRING"}));
        converts(
            json!({"type": "integer", "minimum": 0, "maximum": 9}),
            json!({"type": "INTEGER", "minimum": 0, "maximum": 9}),
        );
        converts(json!({"type": "boolean", "description": "d"}), json!({"type": "BOOLEAN", "description": "d"}));
        converts(
            json!({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3, "uniqueItems": true}),
            json!({"type": "ARRAY", "items": {"type": "NUMBER"}, "minItems": 1, "maxItems": 3}),
        );
    }

    #[test]
    fn unsupported_keywords_are_dropped() {
        converts(
            json!({"$schema": "x", "$id": "y", "title": "t", "type": "object", "additionalProperties": false,
                   "required": ["a", "ghost"], "properties": {"a": {"type": "string", "maxLength": 3, "pattern": "x+",
                   "format": "email"}, "b": {"type": "string", "format": "date-time"}}}),
            json!({"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "STRING", "format": "date-time"}},
                   "required": ["a"]}),
        );
    }

    #[test]
    fn nullable_types_consts_and_enums() {
        converts(json!({"type": ["string", "null"]}), json!({"type": "STRING", "nullable": true}));
        converts(json!({"const": "x"}), json!({"type": "STRING", "enum": ["x"]}));
        converts(json!({"enum": ["a", "b", null]}), json!({"type": "STRING", "enum": ["a", "b"], "nullable": true}));
        // Gemini enums are strings: other values loosen to their type.
        converts(json!({"const": true}), json!({"type": "BOOLEAN"}));
        converts(json!({"enum": [1, 2]}), json!({"type": "INTEGER"}));
        converts(json!({"type": "number", "enum": [1.5]}), json!({"type": "NUMBER"}));
        converts(
            json!({"type": ["string", "integer"], "description": "d"}),
            json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}], "description": "d"}),
        );
    }

    #[test]
    fn one_of_becomes_any_of_and_null_branches_become_nullable() {
        converts(
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}),
        );
        converts(json!({"anyOf": [{"type": "string"}, {"type": "null"}]}), json!({"type": "STRING", "nullable": true}));
    }

    #[test]
    fn local_refs_are_inlined() {
        let s = json!({"type": "object", "properties": {
            "a": {"$ref": "#/$defs/A", "description": "outer"},
            "b": {"$ref": "#/definitions/B"}
        }, "$defs": {"A": {"type": "string", "description": "inner"}}, "definitions": {"B": {"type": "boolean"}}});
        converts(
            s,
            json!({"type": "OBJECT", "properties": {"a": {"type": "STRING", "description": "outer"}, "b": {"type": "BOOLEAN"}}}),
        );
        // The same definition twice side by side is not recursion.
        converts(
            json!({"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A"}]},
                   "$defs": {"A": {"type": "string"}}}),
            json!({"type": "ARRAY", "items": {"anyOf": [{"type": "STRING"}, {"type": "STRING"}]}}),
        );
    }

    #[test]
    fn the_module_envelope_converts_only_without_free_form_objects() {
        let meta = json!({"type": "object", "required": ["confidence"], "properties": {
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}}});
        let envelope = |failure_extra: Value| {
            let mut failure = json!({"ok": {"const": false}, "meta": meta, "error": {"type": "object",
                "required": ["code"], "properties": {"code": {"type": "string"}}}});
            if let (Some(f), Some(extra)) = (failure.as_object_mut(), failure_extra.as_object()) {
                f.extend(extra.clone());
            }
            json!({"type": "object", "oneOf": [
                {"type": "object", "required": ["ok", "meta"], "additionalProperties": false,
                 "properties": {"ok": {"const": true}, "meta": meta}},
                {"type": "object", "required": ["ok", "meta", "error"], "additionalProperties": false,
                 "properties": failure}
            ]})
        };
        let got = to_response_schema(&envelope(json!({}))).unwrap();
        assert_eq!(got["anyOf"][0]["properties"]["ok"], json!({"type": "BOOLEAN"}));
        assert_eq!(got["anyOf"][1]["required"], json!(["ok", "meta", "error"]));
        assert!(got.get("type").is_none(), "{got}");
        refuses(envelope(json!({"partial_data": {"type": "object"}})), "/oneOf/1/properties/partial_data: an object");
    }

    #[test]
    fn inexpressible_schemas_are_refused_with_their_location() {
        refuses(json!({"type": "object", "properties": {"x": {}}}), "/properties/x: a schema without a type");
        refuses(json!({"type": "object", "properties": {"x": true}}), "/properties/x: `true`");
        refuses(json!({"type": "object"}), "/: an object without declared properties");
        refuses(json!({"type": "array"}), "/: an array without `items`");
        refuses(json!({"type": "array", "prefixItems": [{"type": "string"}]}), "tuple");
        refuses(json!({"type": "null"}), "only `null`");
        refuses(json!({"allOf": [{"type": "string"}, {"minLength": 1}]}), "/allOf");
        refuses(json!({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}), "not a local reference");
        refuses(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}), "does not resolve");
        refuses(json!({"type": "date"}), "unknown type");
    }

    #[test]
    fn recursion_is_refused_not_unrolled_forever() {
        let tree = json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}});
        refuses(tree, "/$defs/Node/properties/children/items/$ref: `#/$defs/Node` refers to itself");
        let mut deep = json!({"type": "string"});
        for _ in 0..100 {
            deep = json!({"type": "array", "items": deep});
        }
        refuses(deep, "levels deep");
    }

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

    fn folded(chunks: &[Value]) -> Result<Fold, String> {
        let mut f = Fold::new("asked-for");
        for c in chunks {
            f.chunk(c, None)?;
        }
        Ok(f)
    }

    #[test]
    fn replies_fold_into_text_calls_usage_and_finish() {
        let f = folded(&[json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "private", "thought": true},
                {"text": "Hello "}, {"text": "world"},
                {"functionCall": {"name": "read", "args": {"path": "a"}}, "thoughtSignature": "S1"},
                {"functionCall": {"id": "fc-9", "name": "list"}}
            ]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 3},
            "modelVersion": "gemini-x-001"
        })])
        .unwrap();
        assert_eq!(f.text, "Hello world");
        assert_eq!(f.model, "gemini-x-001");
        assert_eq!(f.usage, Some(Usage { input_tokens: 10, output_tokens: 7 }));
        assert_eq!(f.finish.as_deref(), Some("STOP"));
        assert_eq!(
            f.calls,
            vec![
                WireCall { id: None, name: "read".into(), args: json!({"path": "a"}), signature: Some("S1".into()) },
                WireCall { id: Some("fc-9".into()), name: "list".into(), args: json!({}), signature: None },
            ]
        );
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(finish_reason("STOP", false), FinishReason::Stop);
        assert_eq!(finish_reason("STOP", true), FinishReason::ToolCalls);
        assert_eq!(finish_reason("MAX_TOKENS", false), FinishReason::Length);
        for r in ["SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL", "OTHER", "whatever"] {
            assert_eq!(finish_reason(r, false), FinishReason::Other, "{r}");
        }
    }

    #[test]
    fn replies_without_candidates_say_why() {
        let e = folded(&[json!({"promptFeedback": {"blockReason": "SAFETY"}})]).unwrap_err();
        assert_eq!(e, "the prompt was blocked (SAFETY)");
        let e = folded(&[json!({"usageMetadata": {}})]).unwrap_err();
        assert!(e.starts_with("reply has no candidates"), "{e}");
        // Odd shapes are not panics.
        for odd in
            [json!(null), json!([1]), json!({"candidates": "x"}), json!({"candidates": [{"content": {"parts": 3}}]})]
        {
            let _ = folded(&[odd]);
        }
    }

    #[test]
    fn stream_chunks_add_up() {
        let seen = std::sync::Mutex::new(Vec::<String>::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_owned());
        let mut f = Fold::new("m");
        let chunks = [
            json!({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}], "usageMetadata": {"promptTokenCount": 5}}),
            json!({"usageMetadata": {"promptTokenCount": 5}}),
            json!({"candidates": [{"content": {"parts": [{"text": "lo"}]}, "finishReason": "MAX_TOKENS"}],
                   "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}}),
        ];
        for c in &chunks {
            f.chunk(c, Some(&sink)).unwrap();
        }
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
        assert_eq!(f.text, "Hello");
        assert_eq!(f.finish.as_deref(), Some("MAX_TOKENS"));
        assert_eq!(f.usage, Some(Usage { input_tokens: 5, output_tokens: 2 }));
        assert_eq!(f.chunks, 3);
    }

    #[test]
    fn tool_results_are_wrapped_in_objects() {
        assert_eq!(tool_response("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(tool_response("[1, 2]"), json!({"output": "[1, 2]"}));
        assert_eq!(tool_response("plain"), json!({"output": "plain"}));
        assert_eq!(call_args(&json!("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(call_args(&Value::Null), json!({}));
    }

    #[test]
    fn memory_forgets_the_oldest_beyond_its_cap() {
        let mut m = CallMemory::default();
        for i in 0..=MEMORY_CAP {
            m.remember(&format!("c{i}"), Remembered::default());
        }
        assert!(m.get("c0").is_none());
        assert!(m.get("c1").is_some());
        assert_eq!(m.by_id.len(), MEMORY_CAP);
    }
}
