//! The context a reply emits, and the keys it is stored under.

use serde_json::{Map, Value};

use super::{ContextSpec, EMITTED_KEY, redact};
use crate::parse::{Found, extract_json};

/// Takes `_emitted_context` out of a model's reply (from `meta`, or
/// tolerated at the top level, `meta` winning per type). Returns the reply
/// to check — re-serialised only when something was taken — where the JSON
/// was found in the original, and what was emitted.
pub fn take_emitted(reply: &str) -> (String, Option<Found>, Option<Value>) {
    let Some((mut env, found)) = extract_json(reply) else { return (reply.to_owned(), None, None) };
    let Some(obj) = env.as_object_mut() else { return (reply.to_owned(), None, None) };
    let top = obj.shift_remove(EMITTED_KEY);
    let in_meta = obj.get_mut("meta").and_then(Value::as_object_mut).and_then(|m| m.shift_remove(EMITTED_KEY));
    let emitted = match (top, in_meta) {
        (None, None) => return (reply.to_owned(), None, None),
        (Some(Value::Object(mut t)), Some(Value::Object(m))) => {
            t.extend(m);
            Some(Value::Object(t))
        }
        (_, Some(m)) => Some(m),
        (t, None) => t,
    };
    (env.to_string(), Some(found), emitted)
}

/// Keeps the emitted entries of types the module declares in `emits`
/// (anything else, or an `_emitted_context` that is not an object, is
/// discarded), with secrets redacted.
pub fn keep_emitted(spec: &ContextSpec, emitted: Option<Value>) -> Map<String, Value> {
    let Some(Value::Object(all)) = emitted else { return Map::new() };
    let mut kept: Map<String, Value> =
        all.into_iter().filter(|(k, v)| spec.emit(k).is_some() && !v.is_null()).collect();
    for v in kept.values_mut() {
        redact(v);
    }
    kept
}

/// The variables of a key pattern.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyVars<'a> {
    /// `${module}`.
    pub module: &'a str,
    /// `${input_hash}`.
    pub input_hash: &'a str,
    /// `${user_id}`; `anonymous` when unknown.
    pub user_id: Option<&'a str>,
    /// `${session_id}`; `none` when unknown.
    pub session_id: Option<&'a str>,
    /// `${type}` (a noesis extension: the emitted type).
    pub kind: &'a str,
}

/// Expands `${module}`, `${input_hash}`, `${user_id}`, `${session_id}` and
/// `${type}`; other text, unknown variables included, is kept as written.
pub fn expand_key(pattern: &str, vars: &KeyVars<'_>) -> String {
    pattern
        .replace("${module}", vars.module)
        .replace("${input_hash}", vars.input_hash)
        .replace("${user_id}", vars.user_id.unwrap_or("anonymous"))
        .replace("${session_id}", vars.session_id.unwrap_or("none"))
        .replace("${type}", vars.kind)
}

/// Whether entries stored under this pattern belong to one user / one
/// session (and are served only to it).
pub fn scoped_by(pattern: &str) -> (bool, bool) {
    (pattern.contains("${user_id}"), pattern.contains("${session_id}"))
}

/// The user and session a context names: `user_profile.user_id` (or
/// `.id`) and `session_state.session_id` (or `.id`), when they are strings.
pub fn identity(context: &Map<String, Value>) -> (Option<String>, Option<String>) {
    let pick = |kind: &str, key: &str| {
        let v = context.get(kind)?;
        v.get(key).or_else(|| v.get("id")).and_then(Value::as_str).map(str::to_owned)
    };
    (pick("user_profile", "user_id"), pick("session_state", "session_id"))
}

/// RFC 8785 canonical JSON (`serde_jcs`; object keys sorted at every depth,
/// no whitespace), so equal inputs hash alike. The same text the cassette
/// keys of `noesis-llm` and frame digests of `noesis-frames` are made of.
pub fn canonical_json(value: &Value) -> String {
    // A `Value` always serialises; the fallback only keeps this total.
    serde_jcs::to_string(value).unwrap_or_else(|_| value.to_string())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::REDACTED;
    use crate::context::tests::{ctx, spec};
    use serde_json::json;

    #[test]
    fn emitted_context_is_taken_from_meta_or_top_level() {
        let reply = r#"{"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e", "_emitted_context": {"session_state": {"step": 2}}}, "data": {"rationale": "r"}}"#;
        let (text, found, emitted) = take_emitted(reply);
        assert_eq!(emitted, Some(json!({"session_state": {"step": 2}})));
        assert!(found.is_some());
        let env: Value = serde_json::from_str(&text).unwrap();
        assert!(env["meta"].get(EMITTED_KEY).is_none());
        assert!(crate::validate_envelope(&env).is_empty());

        let top = r#"Here: ```json
{"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"}, "data": {"rationale": "r"}, "_emitted_context": {"a": 1, "b": 2}}
```"#;
        let (text, _, emitted) = take_emitted(top);
        assert_eq!(emitted, Some(json!({"a": 1, "b": 2})));
        assert!(crate::validate_envelope(&serde_json::from_str(&text).unwrap()).is_empty());

        let plain = r#"{"ok": true}"#;
        assert_eq!(take_emitted(plain), (plain.to_owned(), None, None));
        assert_eq!(take_emitted("no json").2, None);
    }

    #[test]
    fn only_declared_emits_are_kept() {
        let s = spec(json!({"emits": [{"type": "session_state"}]}));
        let kept = keep_emitted(
            &s,
            Some(json!({"session_state": {"step": 2, "token": "t0ps3cret"}, "user_profile": {"x": 1}})),
        );
        assert_eq!(Value::Object(kept), json!({"session_state": {"step": 2, "token": REDACTED}}));
        assert!(keep_emitted(&s, Some(json!([1]))).is_empty());
        assert!(keep_emitted(&s, None).is_empty());
    }

    #[test]
    fn key_patterns_expand() {
        let vars =
            KeyVars { module: "m", input_hash: "abc", user_id: Some("u1"), session_id: None, kind: "session_state" };
        assert_eq!(
            expand_key("${module}:${input_hash}:${user_id}:${session_id}:${type}", &vars),
            "m:abc:u1:none:session_state"
        );
        assert_eq!(expand_key("${other}", &vars), "${other}");
        assert_eq!(expand_key("u:${user_id}", &KeyVars::default()), "u:anonymous");
        assert_eq!(scoped_by("x:${user_id}"), (true, false));
        assert_eq!(scoped_by("${session_id}${user_id}"), (true, true));
    }

    #[test]
    fn identity_and_canonical_json() {
        let c = ctx(json!({"user_profile": {"user_id": "u1"}, "session_state": {"id": "s9"}}));
        assert_eq!(identity(&c), (Some("u1".into()), Some("s9".into())));
        assert_eq!(identity(&Map::new()), (None, None));
        assert_eq!(canonical_json(&json!({"b": 1, "a": {"d": 2, "c": [3]}})), r#"{"a":{"c":[3],"d":2},"b":1}"#);
    }
}
