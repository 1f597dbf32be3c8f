//! Ollama's native chat API (`POST {base}/api/chat`), plain and streamed
//! (NDJSON), with native tool calls and schema-constrained output.
//!
//! Ollama turns a JSON Schema given as `format` into a decoding grammar, so
//! the schema is enforced as is: no strict-mode rewrite is needed.

use serde_json::{Map, Value, json};

use crate::TextSink;
use crate::error::{ErrorKind, ProviderError};
use crate::http::{EndpointConfig, HttpCore, Sink, excerpt, redact_url};
use crate::types::{
    Capabilities, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, StructuredMode, ToolCall,
    ToolChoice, Usage,
};

/// Ollama's port when `OLLAMA_HOST` names none.
const DEFAULT_PORT: &str = "11434";

/// A provider for an Ollama server's native API.
#[derive(Debug)]
pub struct Ollama {
    config: EndpointConfig,
    http: HttpCore,
}

impl Ollama {
    /// A provider with its own connection pool and concurrency cap.
    /// `config.base_url` is the server root (default
    /// `http://127.0.0.1:11434`); it goes through [`normalize_host`], so an
    /// `OLLAMA_HOST` value can be passed as it is.
    pub fn new(mut config: EndpointConfig) -> Result<Ollama, ProviderError> {
        config.base_url = normalize_host(&config.base_url);
        let http = HttpCore::new(&config.name, config.http)?;
        Ok(Ollama { config, http })
    }

    /// Local servers take no key; Ollama's hosted API takes a bearer token.
    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.config.api_key {
            Some(key) => vec![("authorization", format!("Bearer {key}"))],
            None => Vec::new(),
        }
    }

    async fn call(&self, request: &ChatRequest, on_text: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
        let url = self.config.url("api/chat")?;
        let headers = self.headers();
        let mode = structured_mode(&request.response_format);
        let body = request_body(&self.config.model, request, on_text.is_some());
        let result = match on_text {
            None => match self.http.post(&url, &headers, &body).await {
                Ok(text) => self
                    .http
                    .parse_json(&text)
                    .and_then(|v| parse_reply(&self.config.name, &self.config.model, &v, mode)),
                Err(e) => Err(e),
            },
            Some(sink) => {
                let mut acc = StreamAccumulator::new(&self.config.name, &self.config.model, mode);
                let mut on_line = |line: &str| {
                    if let Some(piece) = acc.line(line)? {
                        sink(&piece);
                    }
                    Ok(())
                };
                let streamed = self.http.post_streaming(&url, &headers, &body, Sink::Lines(&mut on_line)).await;
                streamed.and_then(|_| acc.finish())
            }
        };
        result.map_err(|e| explain(e, &self.config.model, &redact_url(&self.config.base_url)))
    }
}

/// How `format` honours the requested shape.
fn structured_mode(format: &ResponseFormat) -> StructuredMode {
    match format {
        ResponseFormat::JsonSchema { .. } => StructuredMode::JsonSchemaStrict,
        ResponseFormat::JsonObject => StructuredMode::JsonObject,
        ResponseFormat::Text => StructuredMode::Text,
    }
}

/// The `/api/chat` body for `request`.
fn request_body(model: &str, request: &ChatRequest, stream: bool) -> Value {
    let mut body = json!({
        "model": model,
        "messages": request.messages.iter().map(wire_message).collect::<Vec<_>>(),
        "stream": stream,
    });
    let mut options = Map::new();
    if let Some(t) = request.temperature {
        options.insert("temperature".into(), crate::types::temperature_json(t));
    }
    if let Some(m) = request.max_tokens {
        options.insert("num_predict".into(), json!(m));
    }
    body["options"] = Value::Object(options);
    match &request.response_format {
        ResponseFormat::JsonSchema { schema, .. } => body["format"] = schema.clone(),
        ResponseFormat::JsonObject => body["format"] = json!("json"),
        ResponseFormat::Text => {}
    }
    if let Some(tools) = wire_tools(request) {
        body["tools"] = tools;
    }
    body
}

/// The tools to offer. Ollama has no `tool_choice`: "none" is honoured by
/// offering no tools and a named tool by offering only that one; "required"
/// cannot be enforced and offers them all.
fn wire_tools(request: &ChatRequest) -> Option<Value> {
    let offered: Vec<_> = match &request.tool_choice {
        ToolChoice::None => return None,
        ToolChoice::Tool(name) if request.tools.iter().any(|t| &t.name == name) => {
            request.tools.iter().filter(|t| &t.name == name).collect()
        }
        _ => request.tools.iter().collect(),
    };
    if offered.is_empty() {
        return None;
    }
    Some(
        offered
            .into_iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters
                }})
            })
            .collect(),
    )
}

fn wire_message(m: &Message) -> Value {
    let role = m.role.as_str();
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(m.content));
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments_object()}}))
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    // Ollama matches a tool result to its call by the tool's name.
    if let Some(name) = &m.tool_name {
        out.insert("tool_name".into(), json!(name));
    }
    Value::Object(out)
}

/// Arguments as they arrive: an object normally; a string from servers
/// that mimic OpenAI, kept as text when it is not JSON.
fn arguments(raw: Option<&Value>) -> Value {
    match raw {
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Some(Value::Null) | None => json!({}),
        Some(v) => v.clone(),
    }
}

/// `message.tool_calls`, numbered from `first` when the server gives no ids
/// (versions before tool-call ids never do).
fn tool_calls(raw: Option<&Value>, first: usize) -> Vec<ToolCall> {
    let Some(calls) = raw.and_then(Value::as_array) else { return Vec::new() };
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: c
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| format!("call_{}", first + i), str::to_owned),
            name: c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: arguments(c.pointer("/function/arguments")),
        })
        .collect()
}

/// Ollama reports `done_reason: "stop"` even when it stopped to call tools,
/// so the presence of calls decides; a length cut still wins.
fn finish_reason(done_reason: Option<&str>, has_calls: bool) -> Option<FinishReason> {
    match done_reason {
        Some("length") => Some(FinishReason::Length),
        _ if has_calls => Some(FinishReason::ToolCalls),
        Some("stop") => Some(FinishReason::Stop),
        Some(_) => Some(FinishReason::Other),
        None => None,
    }
}

fn usage(v: &Value) -> Option<Usage> {
    let input = v.get("prompt_eval_count").and_then(Value::as_u64);
    let output = v.get("eval_count").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage { input_tokens: input.unwrap_or(0), output_tokens: output.unwrap_or(0) })
}

/// Reads one complete (non-streamed) `/api/chat` answer.
fn parse_reply(provider: &str, model: &str, v: &Value, mode: StructuredMode) -> Result<ChatResponse, ProviderError> {
    if let Some(err) = v.get("error") {
        return Err(in_band_error(provider, model, err));
    }
    let Some(message) = v.get("message").filter(|m| m.is_object()) else {
        return Err(ProviderError::new(
            provider,
            ErrorKind::BadResponse,
            format!("reply has no message: {}", excerpt(&v.to_string())),
        ));
    };
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let calls = tool_calls(message.get("tool_calls"), 0);
    Ok(ChatResponse {
        text,
        model: v.get("model").and_then(Value::as_str).unwrap_or(model).to_owned(),
        usage: usage(v),
        finish_reason: finish_reason(v.get("done_reason").and_then(Value::as_str), !calls.is_empty()),
        structured: mode,
        tool_calls: calls,
        served_by: None,
    })
}

/// An `{"error": "…"}` object in a 2xx body or in the stream.
fn in_band_error(provider: &str, model: &str, err: &Value) -> ProviderError {
    let msg = err.as_str().map_or_else(|| err.to_string(), str::to_owned);
    let lower = msg.to_ascii_lowercase();
    let (kind, message) = if lower.contains("not found") {
        (ErrorKind::Rejected { status: 404 }, format!("{}; {}", excerpt(&msg), pull_hint(model)))
    } else if lower.contains("context length") || lower.contains("context window") || lower.contains("too long") {
        (ErrorKind::ContextOverflow, format!("the prompt is too long for the model: {}", excerpt(&msg)))
    } else {
        (ErrorKind::Unavailable, format!("error from the server: {}", excerpt(&msg)))
    };
    ProviderError::new(provider, kind, message)
}

fn pull_hint(model: &str) -> String {
    format!("hint: the model may not be installed; run `ollama pull {model}`")
}

/// Adds what to do next to the errors people meet first with Ollama.
fn explain(mut e: ProviderError, model: &str, base_url: &str) -> ProviderError {
    let lower = e.message.to_ascii_lowercase();
    match e.kind {
        ErrorKind::Rejected { status: 404 } if lower.contains("ollama pull") => {}
        ErrorKind::Rejected { status: 404 } if lower.contains("model") && lower.contains("not found") => {
            e.message = format!("{}; {}", e.message, pull_hint(model));
        }
        ErrorKind::Rejected { status: 404 } => {
            e.message = format!(
                "{}; hint: nothing answers /api/chat under {base_url}: OLLAMA_HOST must be the server root, \
                 such as http://127.0.0.1:11434 (not …/v1)",
                e.message
            );
        }
        ErrorKind::Unavailable if e.message.starts_with("cannot reach") => {
            e.message = format!("{}; hint: is `ollama serve` running at {base_url}?", e.message);
        }
        _ => {}
    }
    e
}

/// Builds one reply from NDJSON stream lines.
struct StreamAccumulator {
    provider: String,
    requested_model: String,
    text: String,
    model: String,
    usage: Option<Usage>,
    done_reason: Option<String>,
    calls: Vec<ToolCall>,
    mode: StructuredMode,
    done: bool,
    lines: usize,
}

impl StreamAccumulator {
    fn new(provider: &str, model: &str, mode: StructuredMode) -> StreamAccumulator {
        StreamAccumulator {
            provider: provider.to_owned(),
            requested_model: model.to_owned(),
            text: String::new(),
            model: model.to_owned(),
            usage: None,
            done_reason: None,
            calls: Vec::new(),
            mode,
            done: false,
            lines: 0,
        }
    }

    /// Folds one line in; returns the text piece it carried, if any.
    fn line(&mut self, line: &str) -> Result<Option<String>, ProviderError> {
        if line.trim().is_empty() || self.done {
            return Ok(None);
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            ProviderError::new(
                &self.provider,
                ErrorKind::BadResponse,
                format!("stream line is not JSON ({e}): {}", excerpt(line)),
            )
        })?;
        if let Some(err) = v.get("error") {
            return Err(in_band_error(&self.provider, &self.requested_model, err));
        }
        self.lines += 1;
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            m.clone_into(&mut self.model);
        }
        let message = v.get("message");
        let piece =
            message.and_then(|m| m.get("content")).and_then(Value::as_str).filter(|p| !p.is_empty()).map(str::to_owned);
        if let Some(p) = &piece {
            self.text.push_str(p);
        }
        let calls = tool_calls(message.and_then(|m| m.get("tool_calls")), self.calls.len());
        self.calls.extend(calls);
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            self.done_reason = v.get("done_reason").and_then(Value::as_str).map(str::to_owned);
            self.usage = usage(&v);
        }
        Ok(piece)
    }

    fn finish(self) -> Result<ChatResponse, ProviderError> {
        // Ollama always ends with a `done: true` line; without it the
        // connection closed early and the text is not the whole reply.
        if !self.done {
            return Err(ProviderError::new(
                &self.provider,
                ErrorKind::Unavailable,
                format!("the stream ended after {} lines without its final `done` line", self.lines),
            ));
        }
        Ok(ChatResponse {
            finish_reason: finish_reason(self.done_reason.as_deref(), !self.calls.is_empty()),
            text: self.text,
            model: self.model,
            usage: self.usage,
            structured: self.mode,
            tool_calls: self.calls,
            served_by: None,
        })
    }
}

/// A base URL from an `OLLAMA_HOST` value, read the way the `ollama` CLI
/// reads it, so noesis talks to the server `ollama` itself would: no scheme
/// means `http` on port 11434 (`ollama.com` alone means the hosted API); an
/// explicit scheme keeps its own default port; `0.0.0.0` and `::` (what a
/// server binds to, not an address to call) become loopback; an empty host
/// is `127.0.0.1`; an invalid port falls back to the default; a path is kept
/// without its trailing slash.
pub fn normalize_host(host: &str) -> String {
    let s = host.trim();
    if s.eq_ignore_ascii_case("ollama.com") {
        return "https://ollama.com".to_owned();
    }
    let (scheme, rest, default_port) = match s.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest, None),
        None => ("http".to_owned(), s, Some(DEFAULT_PORT)),
    };
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let (name, port) = split_host_port(hostport);
    let name = match name.trim_start_matches('[').trim_end_matches(']') {
        "" | "0.0.0.0" => "127.0.0.1".to_owned(),
        "::" => "[::1]".to_owned(),
        n if n.contains(':') => format!("[{n}]"),
        n => n.to_owned(),
    };
    let port = port.filter(|p| p.parse::<u16>().is_ok()).or(default_port);
    match port {
        Some(p) => format!("{scheme}://{name}:{p}{path}"),
        None => format!("{scheme}://{name}{path}"),
    }
}

/// `host[:port]`, `[v6][:port]` or a bare IPv6 address.
fn split_host_port(hostport: &str) -> (&str, Option<&str>) {
    if let Some(rest) = hostport.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':')),
            None => (rest, None),
        };
    }
    match hostport.rsplit_once(':') {
        // More than one colon and no brackets: a bare IPv6 address.
        Some((h, _)) if h.contains(':') => (hostport, None),
        Some((h, p)) => (h, Some(p)),
        None => (hostport, None),
    }
}

crate::http::http_provider!(Ollama, |_this| Capabilities {
    json_schema: true,
    json_mode: true,
    tools: true,
    streaming: true
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    fn stream(lines: &[Value]) -> Result<(Vec<String>, ChatResponse), ProviderError> {
        let mut acc = StreamAccumulator::new("ollama", "llama3.2", StructuredMode::Text);
        let mut pieces = Vec::new();
        for l in lines {
            pieces.extend(acc.line(&l.to_string())?);
        }
        Ok((pieces, acc.finish()?))
    }

    #[test]
    fn body_carries_options_and_no_format_for_text() {
        let mut r = ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")]);
        r.temperature = Some(0.5);
        r.max_tokens = Some(64);
        assert_eq!(
            request_body("llama3.2", &r, false),
            json!({
                "model": "llama3.2",
                "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                "stream": false,
                "options": {"temperature": 0.5, "num_predict": 64}
            })
        );
        let plain = request_body("m", &ChatRequest::new(vec![]), true);
        assert_eq!(plain["options"], json!({}));
        assert_eq!(plain["stream"], json!(true));
    }

    #[test]
    fn format_is_the_schema_itself_or_json() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]});
        let mut r = ChatRequest::new(vec![Message::user("x")]);
        r.response_format = ResponseFormat::JsonSchema { name: "thing".into(), schema: schema.clone() };
        assert_eq!(request_body("m", &r, false)["format"], schema);
        assert_eq!(structured_mode(&r.response_format), StructuredMode::JsonSchemaStrict);
        r.response_format = ResponseFormat::JsonObject;
        assert_eq!(request_body("m", &r, false)["format"], json!("json"));
        assert_eq!(structured_mode(&r.response_format), StructuredMode::JsonObject);
        assert_eq!(structured_mode(&ResponseFormat::Text), StructuredMode::Text);
    }

    #[test]
    fn tool_choice_narrows_the_tools_offered() {
        let mut r = ChatRequest::new(vec![Message::user("x")]);
        r.tools = vec![tool("read"), tool("write")];
        let names = |r: &ChatRequest| -> Vec<String> {
            request_body("m", r, false)["tools"]
                .as_array()
                .map(|ts| ts.iter().map(|t| t["function"]["name"].as_str().unwrap_or("?").to_owned()).collect())
                .unwrap_or_default()
        };
        assert_eq!(names(&r), ["read", "write"]);
        assert_eq!(
            request_body("m", &r, false)["tools"][0],
            json!({"type": "function", "function": {
                "name": "read", "description": "read things",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}
            }})
        );
        r.tool_choice = ToolChoice::Required;
        assert_eq!(names(&r), ["read", "write"]);
        r.tool_choice = ToolChoice::Tool("write".into());
        assert_eq!(names(&r), ["write"]);
        r.tool_choice = ToolChoice::Tool("missing".into());
        assert_eq!(names(&r), ["read", "write"]);
        r.tool_choice = ToolChoice::None;
        assert!(request_body("m", &r, false).get("tools").is_none());
        assert!(request_body("m", &ChatRequest::new(vec![]), false).get("tools").is_none());
    }

    #[test]
    fn messages_take_the_wire_shape() {
        let call = ToolCall { id: "call_0".into(), name: "read".into(), arguments: json!({"path": "a"}) };
        let turn = Message { tool_calls: vec![call.clone()], ..Message::assistant("") };
        assert_eq!(
            wire_message(&turn),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "read", "arguments": {"path": "a"}}}
            ]})
        );
        assert_eq!(
            wire_message(&Message::tool_result(&call, "text")),
            json!({"role": "tool", "content": "text", "tool_name": "read"})
        );
        let odd = ToolCall { arguments: json!("{not json"), ..call.clone() };
        let turn = Message { tool_calls: vec![odd], ..Message::assistant("") };
        assert_eq!(wire_message(&turn)["tool_calls"][0]["function"]["arguments"], json!({}));
        let call = |arguments| ToolCall { id: "c".into(), name: "t".into(), arguments };
        assert_eq!(call(json!("{\"a\":1}")).arguments_object(), json!({"a": 1}));
        assert_eq!(call(json!([1])).arguments_object(), json!({}));
    }

    #[test]
    fn reply_gives_text_usage_and_finish_reason() {
        let v = json!({
            "model": "llama3.2", "message": {"role": "assistant", "content": "hello"},
            "done": true, "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 5
        });
        let r = parse_reply("ollama", "m", &v, StructuredMode::Text).unwrap();
        assert_eq!(r.text, "hello");
        assert_eq!(r.model, "llama3.2");
        assert_eq!(r.usage, Some(Usage { input_tokens: 26, output_tokens: 5 }));
        assert_eq!(r.finish_reason, Some(FinishReason::Stop));
        assert!(r.tool_calls.is_empty());

        let cut = json!({"message": {"content": "hel"}, "done": true, "done_reason": "length", "eval_count": 3});
        let r = parse_reply("ollama", "m", &cut, StructuredMode::Text).unwrap();
        assert_eq!((r.finish_reason, r.model.as_str()), (Some(FinishReason::Length), "m"));
        assert_eq!(r.usage, Some(Usage { input_tokens: 0, output_tokens: 3 }));

        let bare = json!({"message": {"content": null}, "done": true});
        let r = parse_reply("ollama", "m", &bare, StructuredMode::Text).unwrap();
        assert_eq!((r.text.as_str(), r.usage, r.finish_reason), ("", None, None));
        assert_eq!(finish_reason(Some("unload"), false), Some(FinishReason::Other));
    }

    #[test]
    fn reply_tool_calls_get_ids_and_the_tool_calls_reason() {
        let v = json!({"message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "read", "arguments": {"path": "a"}}},
            {"id": "srv-1", "function": {"index": 1, "name": "write", "arguments": "{\"b\":2}"}},
            {"function": {"name": "ls"}}
        ]}, "done": true, "done_reason": "stop"});
        let r = parse_reply("ollama", "m", &v, StructuredMode::Text).unwrap();
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall { id: "call_0".into(), name: "read".into(), arguments: json!({"path": "a"}) },
                ToolCall { id: "srv-1".into(), name: "write".into(), arguments: json!({"b": 2}) },
                ToolCall { id: "call_2".into(), name: "ls".into(), arguments: json!({}) },
            ]
        );
    }

    #[test]
    fn reply_errors_are_classified() {
        let e = parse_reply(
            "ollama",
            "llama9",
            &json!({"error": "model \"llama9\" not found, try pulling it first"}),
            StructuredMode::Text,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Rejected { status: 404 });
        assert!(e.message.contains("ollama pull llama9"), "{}", e.message);
        let e = parse_reply("ollama", "m", &json!({"error": "input exceeds the context length"}), StructuredMode::Text)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ContextOverflow);
        let e = parse_reply("ollama", "m", &json!({"error": {"weird": 1}}), StructuredMode::Text).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        let e = parse_reply("ollama", "m", &json!({"done": true}), StructuredMode::Text).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadResponse);
        let e = parse_reply("ollama", "m", &json!([1, 2]), StructuredMode::Text).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadResponse);
    }

    #[test]
    fn explain_adds_hints_once() {
        let e = ProviderError::new(
            "ollama",
            ErrorKind::Rejected { status: 404 },
            "request rejected (HTTP 404): {\"error\":\"model 'qwen' not found\"}",
        );
        let e = explain(e, "qwen", "http://h:1");
        assert!(e.message.ends_with("run `ollama pull qwen`"), "{}", e.message);
        let again = explain(e.clone(), "qwen", "http://h:1");
        assert_eq!(again.message, e.message);
        let e = ProviderError::new(
            "ollama",
            ErrorKind::Rejected { status: 404 },
            "request rejected (HTTP 404): 404 page not found",
        );
        assert!(explain(e, "m", "http://h:1/v1").message.contains("server root"));
        let e = ProviderError::new("ollama", ErrorKind::Unavailable, "cannot reach http://h:1: refused");
        assert!(explain(e, "m", "http://h:1").message.contains("ollama serve"));
        let e = ProviderError::new("ollama", ErrorKind::Rejected { status: 400 }, "bad");
        assert_eq!(explain(e, "m", "http://h:1").message, "bad");
    }

    #[test]
    fn stream_folds_pieces_calls_and_the_final_line() {
        let (pieces, r) = stream(&[
            json!({"model": "llama3.2", "message": {"role": "assistant", "content": "Hel"}, "done": false}),
            json!({"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done": false}),
            json!({"model": "llama3.2", "message": {"role": "assistant", "content": "lo"}, "done": false}),
            json!({"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done": true,
                   "done_reason": "stop", "prompt_eval_count": 9, "eval_count": 2}),
            json!({"message": {"content": "after the end"}}),
        ])
        .unwrap();
        assert_eq!(pieces, ["Hel", "lo"]);
        assert_eq!(r.text, "Hello");
        assert_eq!(r.usage, Some(Usage { input_tokens: 9, output_tokens: 2 }));
        assert_eq!(r.finish_reason, Some(FinishReason::Stop));

        let (pieces, r) = stream(&[
            json!({"message": {"content": "", "tool_calls": [{"function": {"name": "a", "arguments": {}}}]}, "done": false}),
            json!({"message": {"content": "", "tool_calls": [{"function": {"name": "b", "arguments": {"x": 1}}}]}, "done": false}),
            json!({"message": {"content": ""}, "done": true, "done_reason": "stop"}),
        ])
        .unwrap();
        assert!(pieces.is_empty());
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        let ids: Vec<_> = r.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())).collect();
        assert_eq!(ids, [("call_0", "a"), ("call_1", "b")]);
    }

    #[test]
    fn stream_without_done_or_with_an_error_fails() {
        let e = stream(&[json!({"message": {"content": "Hel"}, "done": false})]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.message.contains("after 1 lines"), "{}", e.message);
        let e = stream(&[json!({"message": {"content": "Hel"}}), json!({"error": "runner crashed"})]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.message.contains("runner crashed"));
        let mut acc = StreamAccumulator::new("ollama", "m", StructuredMode::Text);
        assert_eq!(acc.line("").unwrap(), None);
        assert_eq!(acc.line("{oops").unwrap_err().kind, ErrorKind::BadResponse);
    }

    #[test]
    fn normalize_host_is_idempotent() {
        for h in ["", "0.0.0.0", "h", "http://h", "https://h:8443/x/", "::1", "[::]:1", "ollama.com", ":5"] {
            let once = normalize_host(h);
            assert_eq!(normalize_host(&once), once, "{h}");
        }
    }
}
