//! The context protocol, the pure part: what a module declares under
//! `context`, what of the input's `_context` may reach its prompt, secret
//! redaction, the emitted context a reply carries, and key patterns.
//!
//! There is no implicit context: only the types a module lists in
//! `context.accepts` reach its prompt, each checked and filtered (`max_turns`,
//! `fields`, `from_module`) and with secrets redacted, in a section of its
//! own. `_context` never reaches the input-schema check, so closed input
//! schemas still validate.
//!
//! Codes: a malformed standard type is an input error with the JSON pointer
//! of the fault, by the same rule as [`check_input`](crate::check_input)
//! (a missing part E1002, a wrong type E1003, anything else E1001). A type
//! the module requires that is absent (after filtering) is E2007
//! INSUFFICIENT_CONTEXT rather than E1002: it names the remedy (supply more
//! context), the code the spec keeps for exactly this, so a caller or a
//! composition can tell "feed me context" from "your input is malformed".
//!
//! Emitted context is read from the reply's `meta._emitted_context` (meta is
//! the one part of the official envelope open to extra keys; `data` may be
//! closed by the module's schema) or, tolerated, from the reply's top level.
//! It is taken out before the envelope is checked, so the envelope returned
//! never carries it and always validates against the official schema.
//!
//! This file holds the declarations and the checks of what comes in;
//! `secrets` redacts, `emitted` handles what a reply hands on and the keys
//! it is stored under.

mod emitted;
mod secrets;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::code::ErrorCode;
use crate::envelope::Failure;
use crate::manifest::{ContextMode, Manifest};
use crate::prompt::ENVELOPE_INSTRUCTION;

pub use emitted::{KeyVars, canonical_json, expand_key, identity, keep_emitted, scoped_by, take_emitted};
pub use secrets::{is_secret_key, redact, redact_text};

/// The key of the caller's context in a module's input.
pub const CONTEXT_KEY: &str = "_context";

/// The key of the context a reply emits.
pub const EMITTED_KEY: &str = "_emitted_context";

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// How long an emitted entry lives when the module gives no `ttl`: an hour,
/// so nothing is kept forever unless the module asks for it with `-1`.
pub const DEFAULT_EMIT_TTL_SECS: i64 = 3600;

/// The key pattern of an emitted entry that names none.
pub const DEFAULT_KEY_PATTERN: &str = "${module}:${type}";

/// `context.accepts[]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Accept {
    /// The context type (`conversation_history`, `user_profile`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The run is refused (E2007) without it.
    #[serde(default)]
    pub required: bool,
    /// For `conversation_history`: keep the last N turns.
    #[serde(default)]
    pub max_turns: Option<usize>,
    /// For object types (`user_profile`, …): keep only these fields.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// For `previous_result`: only results of this module.
    #[serde(default)]
    pub from_module: Option<String>,
    /// The oldest stored entry (seconds) this module may be served; `-1` or
    /// absent: any unexpired one.
    #[serde(default)]
    pub ttl: Option<i64>,
}

/// `context.emits[]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Emit {
    /// The context type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds the entry lives; `-1` persistent; [`DEFAULT_EMIT_TTL_SECS`]
    /// when absent.
    #[serde(default)]
    pub ttl: Option<i64>,
    /// Where it is stored ([`expand_key`]); [`DEFAULT_KEY_PATTERN`] when
    /// absent.
    #[serde(default)]
    pub key_pattern: Option<String>,
}

impl Emit {
    /// The TTL in force, in seconds (`-1` = persistent).
    pub fn ttl_secs(&self) -> i64 {
        self.ttl.unwrap_or(DEFAULT_EMIT_TTL_SECS)
    }

    /// The key pattern in force.
    pub fn pattern(&self) -> &str {
        self.key_pattern.as_deref().unwrap_or(DEFAULT_KEY_PATTERN)
    }
}

/// A module's `context` declaration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContextSpec {
    /// `fork` or `main`.
    pub mode: ContextMode,
    /// The types the module accepts.
    pub accepts: Vec<Accept>,
    /// The types the module emits.
    pub emits: Vec<Emit>,
}

impl ContextSpec {
    /// Reads `manifest.context` (`fork|main` or `{mode, accepts, emits}`).
    /// Loading has already validated the manifest against the official
    /// schema; an entry that still does not read is skipped rather than
    /// failing a run.
    pub fn of(manifest: &Manifest) -> ContextSpec {
        let mut spec = ContextSpec { mode: manifest.context_mode(), ..ContextSpec::default() };
        let Some(Value::Object(ctx)) = &manifest.context else { return spec };
        let items = |k: &str| ctx.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
        spec.accepts = items("accepts").into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect();
        spec.emits = items("emits").into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect();
        spec
    }

    /// The declaration for an accepted type.
    pub fn accept(&self, kind: &str) -> Option<&Accept> {
        self.accepts.iter().find(|a| a.kind == kind)
    }

    /// The declaration for an emitted type.
    pub fn emit(&self, kind: &str) -> Option<&Emit> {
        self.emits.iter().find(|e| e.kind == kind)
    }
}

fn pointer_of(parts: &[&str]) -> String {
    parts.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect()
}

fn input_error(code: ErrorCode, parts: &[&str], message: &str) -> Box<Failure> {
    let pointer = pointer_of(parts);
    Box::new(
        Failure::new(code, format!("input {pointer}: {message}"))
            .details(json!({ "pointer": pointer }))
            .suggest("fix the context the caller sends under `_context`"),
    )
}

/// Takes `_context` out of the input: the caller's context, by type. An
/// absent `_context` is an empty one; anything but an object is E1003.
///
/// # Errors
/// E1003 (pointer `/_context`) when `_context` is not an object.
pub fn take_context(input: &mut Value) -> Result<Map<String, Value>, Box<Failure>> {
    let Some(obj) = input.as_object_mut() else { return Ok(Map::new()) };
    match obj.shift_remove(CONTEXT_KEY) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(input_error(
            ErrorCode::E1003,
            &[CONTEXT_KEY],
            "must be an object keyed by context type (conversation_history, user_profile, …)",
        )),
    }
}

/// The accepted types the caller did not send: what a context store may
/// serve.
pub fn missing<'a>(spec: &'a ContextSpec, context: &Map<String, Value>) -> Vec<&'a Accept> {
    spec.accepts.iter().filter(|a| !context.contains_key(&a.kind)).collect()
}

/// What of the caller's context reaches the prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prepared {
    /// The accepted types, filtered and redacted, in the caller's order.
    pub context: Map<String, Value>,
    /// Types the caller sent that the module does not accept (dropped).
    pub dropped: Vec<String>,
    /// How many secrets were redacted.
    pub redacted: usize,
}

/// Checks the accepted types, applies `required`, `max_turns`, `fields` and
/// `from_module`, drops every type the module does not accept, and redacts
/// secrets.
///
/// # Errors
/// E1001/E1002/E1003 with the pointer of a malformed standard type; E2007
/// naming a required type that is absent.
pub fn prepare(spec: &ContextSpec, context: Map<String, Value>) -> Result<Prepared, Box<Failure>> {
    let mut out = Prepared::default();
    for (kind, mut value) in context {
        let Some(accept) = spec.accept(&kind) else {
            out.dropped.push(kind);
            continue;
        };
        check_type(&kind, &value)?;
        if !filter(accept, &mut value) {
            continue;
        }
        out.redacted += redact(&mut value);
        out.context.insert(kind, value);
    }
    if let Some(a) = spec.accepts.iter().find(|a| a.required && !out.context.contains_key(&a.kind)) {
        let pointer = pointer_of(&[CONTEXT_KEY, &a.kind]);
        let from = a.from_module.as_ref().map(|m| format!(" from module {m}")).unwrap_or_default();
        return Err(Box::new(
            Failure::new(
                ErrorCode::E2007,
                format!("input {pointer}: this module requires context `{}`{from}, and none was given", a.kind),
            )
            .details(json!({ "pointer": pointer, "context_type": a.kind }))
            .suggest(format!("send `{}` under `_context` in the input", a.kind)),
        ));
    }
    Ok(out)
}

/// Checks a value of a standard type against its shape (other types are
/// free-form).
///
/// # Errors
/// E1002/E1003 with the pointer under `/_context/<type>`.
pub fn check_type(kind: &str, value: &Value) -> Result<(), Box<Failure>> {
    let object = |v: &Value, at: &[&str]| -> Result<(), Box<Failure>> {
        if v.is_object() { Ok(()) } else { Err(input_error(ErrorCode::E1003, at, "must be an object")) }
    };
    match kind {
        "conversation_history" => {
            let Some(turns) = value.as_array() else {
                return Err(input_error(
                    ErrorCode::E1003,
                    &[CONTEXT_KEY, kind],
                    "must be an array of turns {role, content, timestamp}",
                ));
            };
            for (i, turn) in turns.iter().enumerate() {
                let idx = i.to_string();
                let at = [CONTEXT_KEY, kind, idx.as_str()];
                object(turn, &at)?;
                for field in ["role", "content"] {
                    match turn.get(field) {
                        None => {
                            return Err(input_error(
                                ErrorCode::E1002,
                                &[CONTEXT_KEY, kind, &idx, field],
                                "is required in a turn",
                            ));
                        }
                        Some(Value::String(_)) => {}
                        Some(_) => {
                            return Err(input_error(
                                ErrorCode::E1003,
                                &[CONTEXT_KEY, kind, &idx, field],
                                "must be a string",
                            ));
                        }
                    }
                }
                if let Some(t) = turn.get("timestamp")
                    && !(t.is_string() || t.is_number() || t.is_null())
                {
                    return Err(input_error(
                        ErrorCode::E1003,
                        &[CONTEXT_KEY, kind, &idx, "timestamp"],
                        "must be a string or a number",
                    ));
                }
            }
            Ok(())
        }
        "user_profile" | "session_state" | "analysis_cache" | "environment" => object(value, &[CONTEXT_KEY, kind]),
        "previous_result" => match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    previous_result(item, &[CONTEXT_KEY, kind, &i.to_string()])?;
                }
                Ok(())
            }
            one => previous_result(one, &[CONTEXT_KEY, kind]),
        },
        _ => Ok(()),
    }
}

fn previous_result(v: &Value, at: &[&str]) -> Result<(), Box<Failure>> {
    let Some(obj) = v.as_object() else {
        return Err(input_error(ErrorCode::E1003, at, "must be an object {module, meta, data}"));
    };
    let sub = |k: &'static str| -> Vec<&str> { at.iter().copied().chain([k]).collect() };
    match obj.get("module") {
        None => return Err(input_error(ErrorCode::E1002, &sub("module"), "is required in a previous result")),
        Some(Value::String(_)) => {}
        Some(_) => return Err(input_error(ErrorCode::E1003, &sub("module"), "must be a string")),
    }
    for k in ["meta", "data"] {
        if let Some(x) = obj.get(k)
            && !x.is_object()
        {
            return Err(input_error(ErrorCode::E1003, &sub(k), "must be an object"));
        }
    }
    Ok(())
}

/// Applies the accept's filters; `false` when nothing is left.
fn filter(accept: &Accept, value: &mut Value) -> bool {
    if let (Some(n), Value::Array(turns)) = (accept.max_turns, &mut *value)
        && accept.kind == "conversation_history"
        && turns.len() > n
    {
        turns.drain(..turns.len() - n);
    }
    if let (Some(fields), Value::Object(obj)) = (&accept.fields, &mut *value) {
        obj.retain(|k, _| fields.iter().any(|f| f == k));
    }
    if let Some(from) = &accept.from_module
        && accept.kind == "previous_result"
    {
        let of = |v: &Value| v.get("module").and_then(Value::as_str) == Some(from.as_str());
        match value {
            Value::Array(items) => {
                items.retain(of);
                return !items.is_empty();
            }
            one => return of(one),
        }
    }
    true
}

/// The prompt section for the accepted context (empty when there is none)
/// and, for a module that emits context, how to emit it.
pub fn context_section(context: &Map<String, Value>, spec: &ContextSpec) -> String {
    let mut out = String::new();
    if !context.is_empty() {
        out.push_str("\n\n## Context\n\nContext the caller supplied (secrets redacted):\n\n```json\n");
        out.push_str(&serde_json::to_string_pretty(context).unwrap_or_default());
        out.push_str("\n```\n");
    }
    if !spec.emits.is_empty() {
        let kinds: Vec<String> = spec.emits.iter().map(|e| format!("\"{}\"", e.kind)).collect();
        out.push_str("\n\n## Emitting context\n\nTo hand context to later runs, add to `meta` a key \"");
        out.push_str(EMITTED_KEY);
        out.push_str("\": an object keyed by context type, with any of: ");
        out.push_str(&kinds.join(", "));
        out.push_str(". Other types are discarded. Never put secrets in it.\n");
    }
    out
}

/// Places a section before the prompt's closing envelope instruction (or at
/// the end when the prompt has none).
pub fn insert_section(prompt: &str, section: &str) -> String {
    if section.is_empty() {
        return prompt.to_owned();
    }
    match prompt.rfind(ENVELOPE_INSTRUCTION) {
        Some(at) => format!("{}{section}{}", &prompt[..at], &prompt[at..]),
        None => format!("{prompt}{section}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn spec(v: Value) -> ContextSpec {
        let m: Manifest = serde_json::from_value(json!({"name": "m", "context": v})).unwrap();
        ContextSpec::of(&m)
    }

    pub(super) fn ctx(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn code_and_pointer(e: &Failure) -> (&'static str, String) {
        (e.code.as_str(), e.details.as_ref().unwrap()["pointer"].as_str().unwrap().to_owned())
    }

    #[test]
    fn spec_reads_both_spellings() {
        assert_eq!(spec(json!("fork")).mode, ContextMode::Fork);
        let s = spec(
            json!({"mode": "fork", "accepts": [{"type": "user_profile", "required": true, "fields": ["name"]}, {"bad": 1}],
            "emits": [{"type": "session_state", "ttl": -1, "key_pattern": "s:${session_id}"}]}),
        );
        assert_eq!(s.mode, ContextMode::Fork);
        assert_eq!(s.accepts.len(), 1, "the unreadable entry is skipped");
        assert!(s.accept("user_profile").unwrap().required);
        assert_eq!(s.emit("session_state").unwrap().ttl_secs(), -1);
        assert_eq!(spec(json!({"emits": [{"type": "x"}]})).emits[0].ttl_secs(), DEFAULT_EMIT_TTL_SECS);
        assert_eq!(spec(json!({"emits": [{"type": "x"}]})).emits[0].pattern(), DEFAULT_KEY_PATTERN);
    }

    #[test]
    fn take_context_removes_it_from_the_input() {
        let mut input = json!({"code": "x", "_context": {"user_profile": {"name": "a"}}});
        let c = take_context(&mut input).unwrap();
        assert_eq!(input, json!({"code": "x"}));
        assert_eq!(c["user_profile"]["name"], "a");
        let mut none = json!({"code": "x"});
        assert!(take_context(&mut none).unwrap().is_empty());
        let e = take_context(&mut json!({"_context": [1]})).unwrap_err();
        assert_eq!(code_and_pointer(&e), ("E1003", "/_context".into()));
    }

    #[test]
    fn only_accepted_types_reach_the_prompt() {
        let s = spec(json!({"accepts": [{"type": "user_profile"}]}));
        let p =
            prepare(&s, ctx(json!({"user_profile": {"name": "a"}, "session_state": {"x": 1}, "custom": 3}))).unwrap();
        assert_eq!(p.context.keys().collect::<Vec<_>>(), ["user_profile"]);
        assert_eq!(p.dropped, ["session_state", "custom"]);
        // No declaration at all: nothing gets through.
        let p = prepare(&ContextSpec::default(), ctx(json!({"user_profile": {"name": "a"}}))).unwrap();
        assert!(p.context.is_empty());
    }

    #[test]
    fn required_missing_is_e2007_with_the_pointer() {
        let s = spec(json!({"accepts": [{"type": "conversation_history", "required": true}]}));
        let e = prepare(&s, Map::new()).unwrap_err();
        assert_eq!(code_and_pointer(&e), ("E2007", "/_context/conversation_history".into()));
        assert!(e.message.contains("requires context `conversation_history`"), "{}", e.message);
        // A previous result from another module does not count.
        let s = spec(json!({"accepts": [{"type": "previous_result", "required": true, "from_module": "a"}]}));
        let e = prepare(&s, ctx(json!({"previous_result": {"module": "b", "data": {}}}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::E2007);
        assert!(e.message.contains("from module a"));
    }

    #[test]
    fn malformed_standard_types_name_the_pointer() {
        let s = spec(
            json!({"accepts": [{"type": "conversation_history"}, {"type": "user_profile"}, {"type": "previous_result"}, {"type": "free"}]}),
        );
        let cases = [
            (json!({"conversation_history": "hi"}), ("E1003", "/_context/conversation_history")),
            (
                json!({"conversation_history": [{"role": "user"}]}),
                ("E1002", "/_context/conversation_history/0/content"),
            ),
            (
                json!({"conversation_history": [{"role": "user", "content": "a"}, {"role": 1, "content": "b"}]}),
                ("E1003", "/_context/conversation_history/1/role"),
            ),
            (
                json!({"conversation_history": [{"role": "user", "content": "a", "timestamp": []}]}),
                ("E1003", "/_context/conversation_history/0/timestamp"),
            ),
            (json!({"user_profile": "ann"}), ("E1003", "/_context/user_profile")),
            (json!({"previous_result": {"data": {}}}), ("E1002", "/_context/previous_result/module")),
            (json!({"previous_result": {"module": "m", "data": 3}}), ("E1003", "/_context/previous_result/data")),
            (json!({"previous_result": [{"module": "m"}, 2]}), ("E1003", "/_context/previous_result/1")),
        ];
        for (c, (code, pointer)) in cases {
            let e = prepare(&s, ctx(c.clone())).unwrap_err();
            assert_eq!(code_and_pointer(&e), (code, pointer.to_owned()), "{c}");
        }
        assert!(prepare(&s, ctx(json!({"free": 3, "conversation_history": []}))).is_ok());
        // A malformed type the module does not accept is dropped, not judged.
        assert!(prepare(&ContextSpec::default(), ctx(json!({"user_profile": 3}))).is_ok());
    }

    #[test]
    fn filters_apply() {
        let s = spec(json!({"accepts": [
            {"type": "conversation_history", "max_turns": 2},
            {"type": "user_profile", "fields": ["name", "lang"]},
            {"type": "previous_result", "from_module": "a"}
        ]}));
        let turns: Vec<Value> = (0..5).map(|i| json!({"role": "user", "content": format!("t{i}")})).collect();
        let p = prepare(
            &s,
            ctx(json!({
                "conversation_history": turns,
                "user_profile": {"name": "ann", "lang": "en", "email": "a@x"},
                "previous_result": [{"module": "a", "data": {"v": 1}}, {"module": "b", "data": {"v": 2}}]
            })),
        )
        .unwrap();
        let contents: Vec<&str> = p.context["conversation_history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["t3", "t4"]);
        assert_eq!(p.context["user_profile"], json!({"name": "ann", "lang": "en"}));
        assert_eq!(p.context["previous_result"], json!([{"module": "a", "data": {"v": 1}}]));
        let p = prepare(&s, ctx(json!({"previous_result": {"module": "b", "data": {}}}))).unwrap();
        assert!(!p.context.contains_key("previous_result"));
    }

    #[test]
    fn section_sits_before_the_envelope_instruction() {
        let s = spec(json!({"emits": [{"type": "session_state"}]}));
        let section = context_section(&ctx(json!({"user_profile": {"name": "ann"}})), &s);
        assert!(section.contains("## Context") && section.contains("\"name\": \"ann\""));
        assert!(section.contains("_emitted_context") && section.contains("\"session_state\""));
        let prompt = format!("Do it.{ENVELOPE_INSTRUCTION}");
        let out = insert_section(&prompt, &section);
        assert!(out.starts_with("Do it.\n\n## Context"));
        assert!(out.ends_with(ENVELOPE_INSTRUCTION));
        assert_eq!(insert_section(&prompt, ""), prompt);
        assert!(context_section(&Map::new(), &ContextSpec::default()).is_empty());
    }
}
