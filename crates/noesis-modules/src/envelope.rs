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

/// What is wrong with the text of an envelope file (a test vector, one
/// with `$test`, is judged by its `envelope`): one line a problem, "not
/// JSON" or each violation as `pointer: message (rule: keyword)`; none when
/// it is valid.
pub fn envelope_file_problems(text: &str) -> Vec<String> {
    let v = match serde_json::from_str::<Value>(text) {
        Ok(v) => v,
        Err(e) => return vec![format!("not JSON: {e}")],
    };
    let env = if v.get("$test").is_some() { v.get("envelope").cloned().unwrap_or(Value::Null) } else { v };
    validate_envelope(&env)
        .iter()
        .map(|v| {
            format!("{}: {} (rule: {})", if v.pointer.is_empty() { "(root)" } else { &v.pointer }, v.message, v.keyword)
        })
        .collect()
}

/// The verdict for one conformance test vector (a file with a `$test`
/// header saying whether its `envelope` is to be accepted or rejected):
/// `Ok(detail)` when the envelope validator behaved as expected, else why
/// not.
///
/// # Errors
/// The vector's expectation was not met, or is unknown.
pub fn judge_vector(v: &Value) -> Result<String, String> {
    let test = &v["$test"];
    let expects = test["expects"].as_str().unwrap_or("");
    let envelope = v.get("envelope").cloned().unwrap_or(Value::Null);
    let violations = validate_envelope(&envelope);
    match expects {
        "accept" if violations.is_empty() => Ok("accepted".to_owned()),
        "accept" => Err(format!(
            "expected accept, rejected: {}",
            violations.iter().map(|v| format!("{} {}", v.pointer, v.message)).collect::<Vec<_>>().join("; ")
        )),
        "reject" if violations.is_empty() => Err("expected reject, accepted".to_owned()),
        "reject" => {
            // Every envelope-schema violation is E3001 (OUTPUT_SCHEMA_VIOLATION).
            let code = "E3001";
            let listed: Vec<&str> =
                test["error_codes"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect());
            if listed.is_empty() || listed.contains(&code) {
                Ok(format!(
                    "rejected with {code} at {}",
                    if violations[0].pointer.is_empty() { "(root)" } else { &violations[0].pointer }
                ))
            } else {
                Err(format!("rejected with {code}, expected one of {listed:?}"))
            }
        }
        other => Err(format!("unknown expectation `{other}`")),
    }
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
    fn vectors_pass_when_the_validator_agrees_with_them() {
        let ok = Failure::new(ErrorCode::E1001, "x").into_envelope();
        let vector = |expects: &str, envelope: &Value| json!({"$test": {"expects": expects}, "envelope": envelope});
        assert_eq!(judge_vector(&vector("accept", &ok)), Ok("accepted".to_owned()));
        assert_eq!(judge_vector(&vector("reject", &ok)), Err("expected reject, accepted".to_owned()));
        let bad = json!({"ok": true});
        assert!(judge_vector(&vector("reject", &bad)).is_ok_and(|d| d.starts_with("rejected with E3001 at ")));
        assert!(judge_vector(&vector("accept", &bad)).is_err_and(|d| d.starts_with("expected accept, rejected: ")));
        let listed = json!({"$test": {"expects": "reject", "error_codes": ["E1001"]}, "envelope": bad});
        assert_eq!(judge_vector(&listed), Err("rejected with E3001, expected one of [\"E1001\"]".to_owned()));
        assert_eq!(judge_vector(&vector("maybe", &ok)), Err("unknown expectation `maybe`".to_owned()));
    }

    #[test]
    fn an_envelope_file_is_judged_whole_or_by_its_test_vector() {
        assert!(envelope_file_problems("{").first().is_some_and(|p| p.starts_with("not JSON: ")));
        let ok = Failure::new(ErrorCode::E1001, "x").into_envelope();
        assert!(envelope_file_problems(&ok.to_string()).is_empty());
        assert!(envelope_file_problems(&json!({"$test": "t", "envelope": ok}).to_string()).is_empty());
        assert_eq!(
            envelope_file_problems(&json!({"$test": "t"}).to_string()),
            ["/ok: `ok` must be present and be true or false (rule: required)"]
        );
    }

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
