//! Record and replay of provider calls ("cassettes").
//!
//! [`Recorder`] wraps a provider and writes every successful exchange to
//! `DIR/KEY.json`; [`Replayer`] answers from those files and fails closed
//! ([`ErrorKind::NotRecorded`]) on a request it has no recording for, naming
//! the nearest recording and how it differs. Tests and examples then run with
//! no network and no key.
//!
//! The key is the first 32 hex digits of the blake3 hash of the canonical
//! JSON (object keys sorted at every level, no whitespace) of the normalised
//! request: the provider's name, the model and the whole [`ChatRequest`]
//! (messages, response format, tools, tool choice, max tokens, temperature).
//! The request is serialised whole rather than field by field so that a
//! field added to `ChatRequest` later changes the key instead of being
//! silently ignored by replay. `ChatRequest` holds no credentials, so
//! neither does a cassette: keep it that way.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::error::{ErrorKind, ProviderError};
use crate::types::{Capabilities, ChatRequest, ChatResponse, FinishReason, StructuredMode, ToolCall, Usage};
use crate::{Provider, TextSink};

/// The cassette format this code writes and reads.
const VERSION: u64 = 1;
/// Differences listed in a miss message.
const MAX_SHOWN: usize = 5;
/// Characters shown either side of the first difference in a long string.
const CONTEXT: usize = 40;
/// Strings up to this many characters are shown whole in a difference.
const SHORT: usize = 80;

/// Records every successful call of the provider it wraps as a cassette.
///
/// A failed call is returned unchanged and not recorded. When the model
/// answered but the cassette cannot be written, the call fails with an error
/// naming the file: whoever asked for `--record` wants the recording, and a
/// run that succeeds without it would only show up later as a replay miss.
/// A later recording of the same request replaces the earlier one.
pub struct Recorder {
    inner: Arc<dyn Provider>,
    dir: PathBuf,
}

impl Recorder {
    /// Records the calls of `inner` into `dir`, creating it if needed.
    pub fn new(inner: Arc<dyn Provider>, dir: impl Into<PathBuf>) -> Result<Recorder, ProviderError> {
        let dir = dir.into();
        if let Err(e) = fs::create_dir_all(&dir) {
            return Err(ProviderError::new(
                inner.name(),
                ErrorKind::Script,
                format!("cannot create the recordings directory {}: {e}", dir.display()),
            ));
        }
        Ok(Recorder { inner, dir })
    }

    fn err(&self, message: String) -> ProviderError {
        ProviderError::new(self.inner.name(), ErrorKind::Script, message)
    }

    /// The normalised request and its key, worked out before the call so a
    /// request that cannot be recorded costs no tokens.
    fn key(&self, request: &ChatRequest) -> Result<(Value, String), ProviderError> {
        let normalised = normalise(self.inner.name(), self.inner.model(), request)
            .map_err(|e| self.err(format!("cannot serialise the request for recording: {e}")))?;
        let key = key_of(&normalised);
        Ok((normalised, key))
    }

    fn save(
        &self,
        key: String,
        request: Value,
        capabilities: Capabilities,
        response: &ChatResponse,
    ) -> Result<(), ProviderError> {
        let name = format!("{key}.json");
        let file = CassetteFile {
            version: VERSION,
            key,
            provider: self.inner.name().to_owned(),
            model: self.inner.model().to_owned(),
            capabilities: CapabilitiesFile::from(capabilities),
            request,
            response: ResponseFile::from(response),
        };
        let written = serde_json::to_string_pretty(&file).map_err(std::io::Error::other).and_then(|text| {
            // A folder removed under a recording stays removed: the recording
            // fails, naming the file, rather than making the folder again
            // where nobody looks for it.
            if !self.dir.is_dir() {
                return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "its folder no longer exists"));
            }
            // Atomic: a replayer reading the folder meanwhile sees the old
            // recording or the new one, and skips the hidden temporary file.
            noesis_fs::write_atomic(&self.dir.join(&name), (text + "\n").as_bytes()).map_err(|e| e.source)
        });
        written.map_err(|e| {
            self.err(format!(
                "the model answered but its recording {} could not be written: {e}",
                self.dir.join(&name).display()
            ))
        })
    }
}

#[async_trait::async_trait]
impl Provider for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let (normalised, key) = self.key(request)?;
        // Asked before the call, as the runtime did when it built the request.
        let capabilities = self.inner.capabilities();
        let response = self.inner.chat(request).await?;
        self.save(key, normalised, capabilities, &response)?;
        Ok(response)
    }

    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        let (normalised, key) = self.key(request)?;
        let capabilities = self.inner.capabilities();
        let response = self.inner.chat_stream(request, on_text).await?;
        self.save(key, normalised, capabilities, &response)?;
        Ok(response)
    }
}

/// Answers from the cassettes in a directory, with no model and no network.
///
/// A request without a recording fails with [`ErrorKind::NotRecorded`]; the
/// message names the recording whose request differs least from it and the
/// first differences as JSON pointers.
pub struct Replayer {
    dir: PathBuf,
    provider: String,
    model: String,
    capabilities: Capabilities,
    cassettes: Vec<Cassette>,
    by_key: HashMap<String, usize>,
}

struct Cassette {
    path: PathBuf,
    key: String,
    request: Value,
    response: ChatResponse,
}

impl Replayer {
    /// Reads every `*.json` cassette in `dir` once, to answer as `provider`
    /// with `model` (both part of the key, so they must be the ones used when
    /// recording). An unreadable directory or a corrupt cassette is an error
    /// naming the file; an empty directory is not (every call then misses).
    pub fn open(
        dir: impl Into<PathBuf>,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Result<Replayer, ProviderError> {
        let (dir, provider, model) = (dir.into(), provider.into(), model.into());
        let fail = |message: String| ProviderError::new(&provider, ErrorKind::Script, message);
        let entries =
            fs::read_dir(&dir).map_err(|e| fail(format!("cannot read the recordings in {}: {e}", dir.display())))?;
        let mut paths = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| fail(format!("cannot read the recordings in {}: {e}", dir.display())))?.path();
            if path.extension().is_some_and(|x| x == "json") && path.is_file() {
                paths.push(path);
            }
        }
        paths.sort();

        let mut cassettes = Vec::with_capacity(paths.len());
        let mut recorded_caps = Vec::with_capacity(paths.len());
        for path in paths {
            let text = fs::read_to_string(&path)
                .map_err(|e| fail(format!("cannot read the recording {}: {e}", path.display())))?;
            let file = parse_cassette(&text).map_err(|e| fail(format!("{}: {e}", path.display())))?;
            recorded_caps.push((file.provider == provider && file.model == model, file.capabilities.into()));
            cassettes.push(Cassette {
                path,
                key: file.key,
                request: file.request,
                response: file.response.into_response(),
            });
        }
        let by_key = cassettes.iter().enumerate().map(|(i, c)| (c.key.clone(), i)).collect();
        Ok(Replayer { capabilities: replayed_capabilities(&recorded_caps), dir, provider, model, cassettes, by_key })
    }

    fn lookup(&self, request: &ChatRequest) -> Result<&Cassette, ProviderError> {
        let now = normalise(&self.provider, &self.model, request).map_err(|e| {
            ProviderError::new(&self.provider, ErrorKind::NotRecorded, format!("cannot serialise the request: {e}"))
        })?;
        let key = key_of(&now);
        match self.by_key.get(&key).and_then(|&i| self.cassettes.get(i)) {
            Some(cassette) => Ok(cassette),
            None => Err(ProviderError::new(&self.provider, ErrorKind::NotRecorded, self.miss(&key, &now))),
        }
    }

    fn miss(&self, key: &str, now: &Value) -> String {
        let dir = self.dir.display();
        let nearest = self.cassettes.iter().map(|c| (c, diff(&c.request, now))).min_by_key(|(_, d)| d.len());
        let Some((cassette, differences)) = nearest else {
            return format!("no recordings in {dir} (request key {key})");
        };
        let path = cassette.path.display();
        if differences.is_empty() {
            return format!(
                "no recording for this request in {dir} (key {key}); {path} records the same request under key {}: \
                 was it edited by hand? Record it again",
                cassette.key
            );
        }
        let n = differences.len();
        let mut message = format!(
            "no recording for this request in {dir} (key {key}); the nearest is {path}, which differs in {n} place{}:",
            if n == 1 { "" } else { "s" }
        );
        for d in differences.iter().take(MAX_SHOWN) {
            message.push_str("\n  ");
            message.push_str(&d.describe());
        }
        if n > MAX_SHOWN {
            message.push_str(&format!("\n  … and {} more", n - MAX_SHOWN));
        }
        message
    }
}

/// What the replayer reports as its capabilities.
///
/// The runtime shapes its request from `capabilities()` (a JSON Schema in
/// `response_format` only when `json_schema` is true), so replay must report
/// what the recorded provider reported or no request would ever hit. Each
/// cassette stores those capabilities; the ones recorded for this provider
/// and model count (all of them when none match). When they disagree (an
/// endpoint that stopped accepting `json_schema` part-way through a recording
/// session) a capability is reported if any recording had it: the requests
/// recorded after the change then miss, and the miss names
/// `/response_format`, which says to record again.
fn replayed_capabilities(recorded: &[(bool, Capabilities)]) -> Capabilities {
    let matching = recorded.iter().any(|(same, _)| *same);
    recorded.iter().filter(|(same, _)| *same || !matching).fold(Capabilities::default(), |acc, (_, c)| Capabilities {
        json_schema: acc.json_schema || c.json_schema,
        json_mode: acc.json_mode || c.json_mode,
        tools: acc.tools || c.tools,
        streaming: acc.streaming || c.streaming,
    })
}

#[async_trait::async_trait]
impl Provider for Replayer {
    fn name(&self) -> &str {
        &self.provider
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.lookup(request).map(|c| c.response.clone())
    }

    /// Hands the recorded text over line by line, so a streaming caller sees
    /// pieces arrive as it would from a model.
    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        let response = self.lookup(request)?.response.clone();
        for piece in response.text.split_inclusive('\n') {
            on_text(piece);
        }
        Ok(response)
    }
}

// ---- the file format, converted by hand so it changes only on purpose ----

#[derive(Debug, Serialize, Deserialize)]
struct CassetteFile {
    version: u64,
    key: String,
    provider: String,
    model: String,
    /// What the provider reported before the call (see [`replayed_capabilities`]).
    capabilities: CapabilitiesFile,
    /// The normalised request, as hashed for the key.
    request: Value,
    response: ResponseFile,
}

#[derive(Debug, Serialize, Deserialize)]
struct CapabilitiesFile {
    json_schema: bool,
    json_mode: bool,
    tools: bool,
    streaming: bool,
}

impl From<Capabilities> for CapabilitiesFile {
    fn from(c: Capabilities) -> CapabilitiesFile {
        CapabilitiesFile { json_schema: c.json_schema, json_mode: c.json_mode, tools: c.tools, streaming: c.streaming }
    }
}

impl From<CapabilitiesFile> for Capabilities {
    fn from(c: CapabilitiesFile) -> Capabilities {
        Capabilities { json_schema: c.json_schema, json_mode: c.json_mode, tools: c.tools, streaming: c.streaming }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ResponseFile {
    text: String,
    model: String,
    usage: Option<Usage>,
    finish_reason: Option<FinishReason>,
    /// Kept so a replayed run records the structured-output path truthfully.
    structured: StructuredMode,
    tool_calls: Vec<ToolCallFile>,
    /// Who answered in a fallback chain, so a replay names the same model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    served_by: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ToolCallFile {
    id: String,
    name: String,
    arguments: Value,
}

impl From<&ChatResponse> for ResponseFile {
    fn from(r: &ChatResponse) -> ResponseFile {
        ResponseFile {
            text: r.text.clone(),
            model: r.model.clone(),
            usage: r.usage,
            finish_reason: r.finish_reason,
            structured: r.structured,
            tool_calls: r
                .tool_calls
                .iter()
                .map(|c| ToolCallFile { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                .collect(),
            served_by: r.served_by.clone(),
        }
    }
}

impl ResponseFile {
    fn into_response(self) -> ChatResponse {
        let mut response = ChatResponse::text(self.text, self.model, self.structured);
        response.usage = self.usage;
        response.finish_reason = self.finish_reason;
        response.tool_calls =
            self.tool_calls.into_iter().map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments }).collect();
        response.served_by = self.served_by;
        response
    }
}

/// Reads one cassette; the error says what is wrong with it (the caller adds
/// the file name).
fn parse_cassette(text: &str) -> Result<CassetteFile, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    match value.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(v) => return Err(format!("cassette version {v} is not supported (this noesis reads version {VERSION})")),
        None => return Err("not a cassette: no \"version\" number".to_owned()),
    }
    serde_json::from_value(value).map_err(|e| format!("not a valid cassette: {e}"))
}

// ---- keys and differences (pure) ----

/// The request as hashed and stored: provider and model first, then the
/// request's own fields.
fn normalise(provider: &str, model: &str, request: &ChatRequest) -> Result<Value, serde_json::Error> {
    let mut out = Map::new();
    out.insert("provider".to_owned(), Value::from(provider));
    out.insert("model".to_owned(), Value::from(model));
    match serde_json::to_value(request)? {
        Value::Object(fields) => out.extend(fields),
        other => {
            out.insert("request".to_owned(), other);
        }
    }
    if let Some(t) = request.temperature {
        // An f32 widened to f64 prints as 0.20000000298023224; its shortest
        // form reads better in a cassette and in a diff.
        let shortest = t.to_string().parse::<f64>().ok().and_then(Number::from_f64);
        out.insert("temperature".to_owned(), shortest.map_or(Value::Null, Value::Number));
    }
    Ok(Value::Object(out))
}

/// The first 32 hex digits of the blake3 hash of the canonical JSON.
fn key_of(normalised: &Value) -> String {
    blake3::hash(canonical(normalised).as_bytes()).to_hex().chars().take(32).collect()
}

/// RFC 8785 canonical JSON (`serde_jcs`): compact, object keys sorted, so
/// equal values have equal text whatever order their keys were built in.
/// For what requests hold it is the text keys were always made of; it
/// differs only on numbers JSON Schema and chat requests do not use in
/// practice (a float with no fraction such as `1.0` is written `1`,
/// integers past 2^53 are rounded to the nearest double) and on object keys
/// with characters beyond U+FFFF (sorted by UTF-16 code units).
fn canonical(value: &Value) -> String {
    // A `Value` always serialises (its numbers are finite, its keys
    // strings); the fallback only keeps this total.
    serde_jcs::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// One place where two JSON values differ; `None` where one has nothing.
#[derive(Debug, PartialEq)]
struct Difference<'a> {
    pointer: String,
    recorded: Option<&'a Value>,
    now: Option<&'a Value>,
}

/// Where `now` differs from `recorded`, as JSON pointers to the deepest
/// differing values (a value present on one side only counts once, however
/// big), in the order of `now`'s keys, then keys only `recorded` has.
fn diff<'a>(recorded: &'a Value, now: &'a Value) -> Vec<Difference<'a>> {
    let mut out = Vec::new();
    walk(String::new(), recorded, now, &mut out);
    out
}

fn walk<'a>(pointer: String, recorded: &'a Value, now: &'a Value, out: &mut Vec<Difference<'a>>) {
    match (recorded, now) {
        (Value::Object(r), Value::Object(n)) => {
            let keys = n.keys().chain(r.keys().filter(|k| !n.contains_key(*k)));
            for k in keys {
                let child = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (r.get(k), n.get(k)) {
                    (Some(a), Some(b)) => walk(child, a, b, out),
                    (a, b) => out.push(Difference { pointer: child, recorded: a, now: b }),
                }
            }
        }
        (Value::Array(r), Value::Array(n)) => {
            for i in 0..r.len().max(n.len()) {
                let child = format!("{pointer}/{i}");
                match (r.get(i), n.get(i)) {
                    (Some(a), Some(b)) => walk(child, a, b, out),
                    (a, b) => out.push(Difference { pointer: child, recorded: a, now: b }),
                }
            }
        }
        (a, b) if a != b => out.push(Difference { pointer, recorded: Some(a), now: Some(b) }),
        _ => {}
    }
}

impl Difference<'_> {
    /// `/pointer: recorded <excerpt> vs now <excerpt>`; long strings are cut
    /// around their first difference.
    fn describe(&self) -> String {
        let pointer = if self.pointer.is_empty() { "/" } else { &self.pointer };
        if let (Some(Value::String(a)), Some(Value::String(b))) = (self.recorded, self.now)
            && (a.chars().count() > SHORT || b.chars().count() > SHORT)
        {
            let at = a
                .chars()
                .zip(b.chars())
                .position(|(x, y)| x != y)
                .unwrap_or_else(|| a.chars().count().min(b.chars().count()));
            return format!(
                "{pointer}: recorded {} vs now {} (first difference at character {at})",
                window(a, at),
                window(b, at)
            );
        }
        format!("{pointer}: recorded {} vs now {}", excerpt(self.recorded), excerpt(self.now))
    }
}

/// `s` around character `at`, quoted, with `…` where it was cut.
fn window(s: &str, at: usize) -> String {
    let len = s.chars().count();
    let start = at.saturating_sub(CONTEXT);
    let end = (at + CONTEXT).min(len);
    let piece: String = s.chars().skip(start).take(end.saturating_sub(start)).collect();
    format!("{}{}{}", if start > 0 { "…" } else { "" }, Value::String(piece), if end < len { "…" } else { "" })
}

fn excerpt(value: Option<&Value>) -> String {
    let Some(value) = value else { return "(absent)".to_owned() };
    let text = value.to_string();
    if text.chars().count() <= SHORT {
        text
    } else {
        let mut cut: String = text.chars().take(SHORT).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::{Message, ResponseFormat, ToolChoice, ToolSpec};

    fn canon(v: &Value) -> String {
        canonical(v)
    }

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![Message::system("be brief"), Message::user("hello")],
            response_format: ResponseFormat::JsonSchema { name: "m".into(), schema: json!({"type": "object"}) },
            max_tokens: Some(100),
            temperature: Some(0.2),
            ..ChatRequest::default()
        }
    }

    fn key(provider: &str, model: &str, r: &ChatRequest) -> String {
        key_of(&normalise(provider, model, r).unwrap())
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level_without_whitespace() {
        let v = json!({"b": 1, "a": {"d": [1, {"z": null, "y": "x\n\"q\""}], "c": true}, "é": 1.5});
        assert_eq!(canon(&v), r#"{"a":{"c":true,"d":[1,{"y":"x\n\"q\"","z":null}]},"b":1,"é":1.5}"#);
        let reordered = json!({"é": 1.5, "a": {"c": true, "d": [1, {"y": "x\n\"q\"", "z": null}]}, "b": 1});
        assert_eq!(key_of(&v), key_of(&reordered));
    }

    /// Keys are how recordings are found: these are the keys this code gave
    /// before canonical JSON moved to RFC 8785 (`serde_jcs`), so recordings
    /// made then still replay.
    #[test]
    fn keys_of_existing_recordings_do_not_change() {
        assert_eq!(key("openai", "gpt-4o-mini", &request()), "467450b7a24703e94f4f9e901d83901f");
        let call = ToolCall { id: "c1".into(), name: "read".into(), arguments: json!({"path": "a/é.txt", "n": -3}) };
        let rich = ChatRequest {
            messages: vec![
                Message::system("Réponds en JSON 📦"),
                Message::user("tabs\tand \"quotes\" and \u{1}"),
                Message { tool_calls: vec![call.clone()], ..Message::assistant("") },
                Message::tool_result(&call, "text"),
            ],
            response_format: ResponseFormat::JsonSchema {
                name: "envelope".into(),
                schema: json!({"type": "object", "properties": {"confidence": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.01},
                               "zeta": {"enum": ["b", "a", 12, 2.5, -7, true, null]}, "Alpha": {"const": "x"}}}),
            },
            max_tokens: Some(2048),
            temperature: Some(0.7),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Auto,
        };
        assert_eq!(key("anthropic", "claude-sonnet-4-5", &rich), "bcd0768f0469b7c813c8010f9fa71ae7");
    }

    #[test]
    fn canonical_json_is_rfc_8785_and_differs_from_plain_json_only_on_exotic_numbers() {
        assert_eq!(
            canon(&json!({"n": 1.0, "z": -0.0, "big": 1e21, "small": 1e-7, "i": 9_007_199_254_740_993u64})),
            r#"{"big":1e+21,"i":9007199254740992,"n":1,"small":1e-7,"z":0}"#
        );
        // Sorted by UTF-16 code units: U+1F600 (a surrogate pair) before U+FF5E.
        assert_eq!(canon(&json!({"\u{ff5e}": 1, "\u{1f600}": 2})), "{\"\u{1f600}\":2,\"\u{ff5e}\":1}");
    }

    #[test]
    fn normalised_request_has_a_fixed_shape() {
        let call = ToolCall { id: "c1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
        let r = ChatRequest {
            messages: vec![
                Message::user("hi"),
                Message { tool_calls: vec![call.clone()], ..Message::assistant("") },
                Message::tool_result(&call, "text"),
            ],
            tools: vec![ToolSpec { name: "read".into(), description: "d".into(), parameters: json!({}) }],
            tool_choice: ToolChoice::Required,
            temperature: Some(0.2),
            ..ChatRequest::default()
        };
        assert_eq!(
            normalise("openai", "gpt", &r).unwrap(),
            json!({
                "provider": "openai",
                "model": "gpt",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read", "arguments": {"path": "a"}}]},
                    {"role": "tool", "content": "text", "tool_call_id": "c1", "tool_name": "read"}
                ],
                "response_format": {"type": "text"},
                "max_tokens": null,
                "temperature": 0.2,
                "tools": [{"name": "read", "description": "d", "parameters": {}}],
                "tool_choice": "required"
            })
        );
    }

    #[test]
    fn key_is_32_hex_digits_and_changes_with_anything_that_can_change_the_answer() {
        let base = key("openai", "gpt", &request());
        assert_eq!(base.len(), 32);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(base, key("openai", "gpt", &request()));
        let mut variants = vec![key("anthropic", "gpt", &request()), key("openai", "gpt-2", &request())];
        let changes: Vec<fn(&mut ChatRequest)> = vec![
            |r| r.messages[1].content.push('!'),
            |r| r.messages.push(Message::assistant("x")),
            |r| r.response_format = ResponseFormat::JsonObject,
            |r| r.max_tokens = Some(101),
            |r| r.temperature = None,
            |r| r.temperature = Some(0.3),
            |r| r.tools.push(ToolSpec { name: "t".into(), description: String::new(), parameters: json!({}) }),
            |r| r.tool_choice = ToolChoice::None,
        ];
        for change in changes {
            let mut r = request();
            change(&mut r);
            variants.push(key("openai", "gpt", &r));
        }
        for (i, k) in variants.iter().enumerate() {
            assert_ne!(*k, base, "variant {i} has the base key");
        }
    }

    #[test]
    fn diff_names_the_deepest_differing_paths() {
        let recorded = json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 5, "a/b~": 1, "gone": 1});
        let now =
            json!({"messages": [{"role": "user", "content": "b"}, {"role": "user"}], "max_tokens": "5", "a/b~": 2});
        let pointers: Vec<String> = diff(&recorded, &now).into_iter().map(|d| d.pointer).collect();
        assert_eq!(pointers, ["/messages/0/content", "/messages/1", "/max_tokens", "/a~1b~0", "/gone"]);
        assert!(diff(&recorded, &recorded.clone()).is_empty());
        assert_eq!(
            diff(&json!(1), &json!([1])),
            [Difference { pointer: String::new(), recorded: Some(&json!(1)), now: Some(&json!([1])) }]
        );
    }

    #[test]
    fn differences_read_as_pointer_recorded_vs_now() {
        let describe = |a: Value, b: Value| diff(&a, &b).iter().map(Difference::describe).collect::<Vec<_>>();
        assert_eq!(describe(json!({"x": "abc"}), json!({"x": "abd"})), [r#"/x: recorded "abc" vs now "abd""#]);
        assert_eq!(describe(json!({"x": 1}), json!({})), ["/x: recorded 1 vs now (absent)"]);
        assert_eq!(describe(json!([]), json!([{"k": true}])), [r#"/0: recorded (absent) vs now {"k":true}"#]);
        let long = json!({"big": (0..50).collect::<Vec<_>>()});
        let shown = describe(json!({"v": long}), json!({"v": 1})).remove(0);
        assert!(shown.starts_with(r#"/v: recorded {"big":[0,1,2,"#) && shown.ends_with("… vs now 1"), "{shown}");
        assert_eq!(describe(json!(1), json!(2)), ["/: recorded 1 vs now 2"]);
    }

    #[test]
    fn long_strings_show_the_first_difference_with_context() {
        let a = format!("{}ORIGINAL{}", "x".repeat(100), "y".repeat(100));
        let b = format!("{}CHANGED{}", "x".repeat(100), "y".repeat(100));
        let shown = Difference { pointer: "/p".into(), recorded: Some(&json!(a)), now: Some(&json!(b)) }.describe();
        let before = "x".repeat(40);
        assert_eq!(
            shown,
            format!(
                "/p: recorded …\"{before}ORIGINAL{}\"… vs now …\"{before}CHANGED{}\"… (first difference at character 100)",
                "y".repeat(32),
                "y".repeat(33)
            )
        );
        // When one string is a prefix of the other, they differ where the
        // shorter ends.
        let a = "é".repeat(90);
        let b = format!("{a}!");
        let shown = Difference { pointer: "/p".into(), recorded: Some(&json!(a)), now: Some(&json!(b)) }.describe();
        assert!(
            shown.ends_with(&format!("vs now …\"{}!\" (first difference at character 90)", "é".repeat(40))),
            "{shown}"
        );
    }

    #[test]
    fn a_cassette_reads_back_as_written() {
        let mut response = ChatResponse::text("{\"ok\":true}", "m-1", StructuredMode::JsonSchemaStrict);
        response.usage = Some(Usage { input_tokens: 3, output_tokens: 4 });
        response.finish_reason = Some(FinishReason::ToolCalls);
        response.tool_calls = vec![ToolCall { id: "c".into(), name: "t".into(), arguments: json!({"a": 1}) }];
        let caps = Capabilities { json_schema: true, json_mode: true, tools: false, streaming: true };
        let file = CassetteFile {
            version: VERSION,
            key: "k".into(),
            provider: "p".into(),
            model: "m".into(),
            capabilities: caps.into(),
            request: json!({"x": 1}),
            response: ResponseFile::from(&response),
        };
        let text = serde_json::to_string_pretty(&file).unwrap();
        let back = parse_cassette(&text).unwrap();
        assert_eq!(back.response.into_response(), response);
        assert_eq!(Capabilities::from(back.capabilities), caps);
        assert!(parse_cassette("{").unwrap_err().starts_with("not valid JSON: "));
        assert!(parse_cassette(r#"{"version": 2}"#).unwrap_err().contains("version 2 is not supported"));
        assert!(parse_cassette(r#"{"version": 1}"#).unwrap_err().contains("missing field `key`"));
        assert!(parse_cassette("[]").unwrap_err().contains("no \"version\""));
    }

    #[test]
    fn replayed_capabilities_follow_the_recordings_of_this_provider() {
        let caps = |json_schema| Capabilities { json_schema, json_mode: true, tools: true, streaming: true };
        assert_eq!(replayed_capabilities(&[(true, caps(false)), (false, caps(true))]), caps(false));
        assert_eq!(replayed_capabilities(&[(true, caps(false)), (true, caps(true))]), caps(true));
        assert_eq!(replayed_capabilities(&[(false, caps(true))]), caps(true));
        assert_eq!(replayed_capabilities(&[]), Capabilities::default());
    }
}
