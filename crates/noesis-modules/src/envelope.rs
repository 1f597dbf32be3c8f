//! The v2.2 response envelope: validation against the official schema and
//! construction of runtime failure envelopes.

use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::code::{ErrorCode, Recoverable};
use crate::schema::{CompiledSchema, Violation};

/// Maximum length of `meta.explain`, in characters.
pub const EXPLAIN_MAX_CHARS: usize = 280;

fn envelope_schema() -> &'static CompiledSchema {
    static SCHEMA: OnceLock<CompiledSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let doc: Value = serde_json::from_str(include_str!("../spec/response-envelope.schema.json"))
            .expect("embedded envelope schema is JSON");
        CompiledSchema::compile(&doc).expect("embedded envelope schema compiles")
    })
}

/// Validates `envelope` against `response-envelope.schema.json` exactly.
///
/// The schema's `oneOf` reports a single opaque error; the violations returned
/// here come from the branch that `ok` selects, so they point at the real
/// field (`/meta/confidence`, not the root).
pub fn validate_envelope(envelope: &Value) -> Vec<Violation> {
    let schema = envelope_schema();
    if schema.is_valid(envelope) {
        return Vec::new();
    }
    let branch = match envelope.get("ok") {
        Some(Value::Bool(false)) => failure_branch(),
        Some(Value::Bool(true)) => success_branch(),
        _ => {
            return vec![Violation {
                pointer: "/ok".to_owned(),
                keyword: if envelope.get("ok").is_some() { "type" } else { "required" }.to_owned(),
                message: "`ok` must be present and be true or false".to_owned(),
            }];
        }
    };
    let found = branch.violations(envelope);
    if found.is_empty() {
        // Unreachable with the official schema, kept so a rejection is never
        // reported without a reason.
        return schema.violations(envelope);
    }
    found
}

fn branch(name: &str) -> CompiledSchema {
    let doc: Value = serde_json::from_str(include_str!("../spec/response-envelope.schema.json"))
        .expect("embedded envelope schema is JSON");
    CompiledSchema::compile_section(&doc, &format!("/definitions/{name}")).expect("embedded envelope branch compiles")
}

fn success_branch() -> &'static CompiledSchema {
    static S: OnceLock<CompiledSchema> = OnceLock::new();
    S.get_or_init(|| branch("SuccessEnvelope"))
}

fn failure_branch() -> &'static CompiledSchema {
    static S: OnceLock<CompiledSchema> = OnceLock::new();
    S.get_or_init(|| branch("FailureEnvelope"))
}

/// Truncates to at most `max` characters (never splits a character).
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((idx, _)) => s[..idx].to_owned(),
        None => s.to_owned(),
    }
}

/// A failure produced by the runtime itself (not by the model).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The standard code.
    pub code: ErrorCode,
    /// What went wrong, for a human.
    pub message: String,
    /// What the caller can do about it.
    pub suggestion: Option<String>,
    /// Machine-readable detail (`violations`, `pointer`, …).
    pub details: Option<Value>,
    /// Whatever data survived, for `partial_data`.
    pub partial_data: Option<Value>,
}

impl Failure {
    /// A failure with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into(), suggestion: None, details: None, partial_data: None }
    }

    /// Adds a suggestion.
    #[must_use]
    pub fn suggest(mut self, suggestion: impl Into<String>) -> Failure {
        self.suggestion = Some(suggestion.into());
        self
    }

    /// Adds details.
    #[must_use]
    pub fn details(mut self, details: Value) -> Failure {
        self.details = Some(details);
        self
    }

    /// Adds partial data; ignored unless it is an object.
    #[must_use]
    pub fn partial(mut self, data: Option<Value>) -> Failure {
        self.partial_data = data.filter(Value::is_object);
        self
    }

    /// The error envelope: confidence 0, risk high, `recoverable` and a
    /// `suggestion` always present.
    pub fn into_envelope(self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code.as_str()));
        error.insert("message".into(), json!(self.message));
        error.insert("recoverable".into(), json!(self.code.recoverable() != Recoverable::No));
        let suggestion = self.suggestion.unwrap_or_else(|| default_suggestion(self.code).to_owned());
        error.insert("suggestion".into(), json!(suggestion));
        if let Some(details) = self.details {
            error.insert("details".into(), details);
        }
        let mut env = Map::new();
        env.insert("ok".into(), json!(false));
        env.insert(
            "meta".into(),
            json!({
                "confidence": 0.0,
                "risk": "high",
                "explain": truncate_chars(&format!("{}: {}", self.code.as_str(), self.message), EXPLAIN_MAX_CHARS),
            }),
        );
        env.insert("error".into(), Value::Object(error));
        if let Some(p) = self.partial_data {
            env.insert("partial_data".into(), p);
        }
        Value::Object(env)
    }
}

fn default_suggestion(code: ErrorCode) -> &'static str {
    use ErrorCode as E;
    match code {
        E::E1000 => "Retry; if it persists, use a model or provider with JSON or structured output.",
        E::E1001 | E::E1002 | E::E1003 => "Fix the input so that it matches the module's input schema.",
        E::E1004 => "Use a value the module supports.",
        E::E1005 => "Shorten the input or raise runtime_requirements.max_input_tokens.",
        E::E1006 => "Check the reference and try again.",
        E::E2001 => "Provide more context or review the partial result by hand.",
        E::E2002 => "Retry, or raise the timeout.",
        E::E2003 => "Raise the output token limit or ask for less output.",
        E::E2004 | E::E2005 | E::E2006 | E::E2007 => "Review the input and the module's constraints.",
        E::E3001 | E::E3002 | E::E3003 | E::E3004 | E::E3005 | E::E3006 => {
            "Retry, or use a stronger model; the partial data may still be useful."
        }
        E::E4000 => "This is a bug in noesis; please report it with the trace id.",
        E::E4001 => "Check the provider's URL, key and reachability (noesis doctor).",
        E::E4002 => "Wait and retry, or lower the request rate.",
        E::E4003 => "Shorten the input or use a model with a longer context.",
        E::E4004 => "Break the cycle between the modules.",
        E::E4005 => "Reduce the nesting of module calls or raise max_depth.",
        E::E4006 => "Check the module name and the search path (noesis list).",
        E::E4007 => "The module's policies forbid this operation.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_envelopes_validate() {
        for code in ErrorCode::ALL {
            let env = Failure::new(code, "x".repeat(400)).into_envelope();
            assert!(validate_envelope(&env).is_empty(), "{code}: {env}");
            assert_eq!(env["meta"]["confidence"], json!(0.0));
            assert_eq!(env["meta"]["risk"], "high");
            assert!(env["error"]["recoverable"].is_boolean());
            assert!(env["error"]["suggestion"].is_string());
        }
    }

    #[test]
    fn violations_point_into_the_selected_branch() {
        let v = validate_envelope(&json!({
            "ok": true, "meta": {"confidence": 2, "risk": "low", "explain": ""}, "data": {"rationale": "r"}
        }));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].pointer, "/meta/confidence");
        let v = validate_envelope(&json!({"meta": {}}));
        assert_eq!(v[0].pointer, "/ok");
    }

    #[test]
    fn truncation_is_by_characters() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("ab", 5), "ab");
    }
}
