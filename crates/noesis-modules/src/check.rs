//! Checking a run: the input before the call, the reply after it.
//!
//! Pure functions of a [`Module`] and JSON: no I/O, no clock.

use serde_json::{Map, Value, json};

use crate::code::ErrorCode;
use crate::envelope::{EXPLAIN_MAX_CHARS, Failure, truncate_chars, validate_envelope};
use crate::loader::Module;
use crate::manifest::{EnumStrategy, Strictness};
use crate::parse::{Found, extract_json};
use crate::repair::repair;
use crate::risk::aggregate;
use crate::schema::Violation;

/// Validates the input against `#/input`: E1002 when the first problem is a
/// missing field, E1003 when it is a wrong type, E1001 otherwise. The error's
/// `details.pointer` is the JSON pointer of the failing field.
pub fn check_input(module: &Module, input: &Value) -> Result<(), Box<Failure>> {
    let Some(section) = &module.input else {
        return Ok(());
    };
    let violations = section.compiled.violations(input);
    let Some(first) = violations.first() else {
        return Ok(());
    };
    let code = match first.keyword.as_str() {
        "required" => ErrorCode::E1002,
        "type" => ErrorCode::E1003,
        _ => ErrorCode::E1001,
    };
    let field = if first.pointer.is_empty() { "(root)" } else { first.pointer.as_str() };
    Err(Box::new(
        Failure::new(code, format!("input {field}: {}", first.message))
            .details(json!({ "pointer": first.pointer, "violations": violations })),
    ))
}

/// The outcome of checking a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The envelope to return (success or failure), without runtime meta.
    pub envelope: Value,
    /// Where the JSON was found, if it was.
    pub found: Option<Found>,
    /// What the repair pass changed.
    pub repairs: Vec<String>,
    /// The violations that made the reply fail, for a re-ask.
    pub violations: Vec<Violation>,
}

impl Checked {
    fn fail(failure: Failure, found: Option<Found>, repairs: Vec<String>, violations: Vec<Violation>) -> Checked {
        Checked { envelope: failure.into_envelope(), found, repairs, violations }
    }
}

/// Turns a model's reply into the envelope the runtime returns: extract the
/// JSON, normalise (v2.1 auto-wrap), validate the envelope, repair, re-validate,
/// then apply the module's rules (rationale, overflow, enums, data schema,
/// risk, confidence threshold).
pub fn check_reply(module: &Module, reply: &str) -> Checked {
    let Some((mut env, found)) = extract_json(reply) else {
        let excerpt = truncate_chars(reply.trim(), 200);
        return Checked::fail(
            Failure::new(ErrorCode::E1000, "the model's reply contains no JSON object")
                .details(json!({ "reply_excerpt": excerpt })),
            None,
            Vec::new(),
            Vec::new(),
        );
    };
    let found = Some(found);
    normalise(&mut env, module);

    let mut repairs = Vec::new();
    let mut violations = validate_envelope(&env);
    if !violations.is_empty() {
        let risk = default_risk(module, &env);
        repairs = repair(&mut env, risk);
        violations = validate_envelope(&env);
    }
    if !violations.is_empty() {
        let partial = env.get("data").or_else(|| env.get("partial_data")).cloned();
        let failure = if violations.iter().all(|v| v.pointer.starts_with("/data/extensions")) {
            // The official schema's own overflow limits (20 insights, each
            // with a suggested_mapping) are overflow problems, not shape ones.
            Failure::new(
                ErrorCode::E3004,
                format!("overflow insights break the envelope's limits: {}", violations[0].message),
            )
            .details(json!({ "violations": violations }))
            .partial(partial)
        } else {
            schema_failure("the reply is not a valid v2.2 envelope", &violations, partial)
        };
        return finish(module, Checked::fail(failure, found, repairs, violations));
    }
    if let Some(meta) = &module.meta {
        let meta_violations = prefixed(meta.compiled.violations(&env["meta"]), "/meta");
        if !meta_violations.is_empty() {
            let partial = env.get("data").cloned();
            let failure = schema_failure("meta breaks the module's meta schema", &meta_violations, partial);
            return finish(module, Checked::fail(failure, found, repairs, meta_violations));
        }
    }
    let checked = if env["ok"] == json!(true) {
        check_success(module, env, found, repairs)
    } else {
        check_failure(module, env, found, repairs)
    };
    finish(module, checked)
}

/// Applies `failure.partial_allowed: false` to every failure in one place.
fn finish(module: &Module, mut checked: Checked) -> Checked {
    if !module.policy.partial_allowed
        && let Some(obj) = checked.envelope.as_object_mut()
    {
        obj.remove("partial_data");
    }
    checked
}

/// Moves a v2.1 `confidence` into meta; it stays in the data too when the
/// module's data schema declares it (legacy schemas often require it there).
fn take_confidence(data: &mut Map<String, Value>, module: &Module) -> Option<Value> {
    let declared = module.data.as_ref().is_some_and(|d| d.schema.pointer("/properties/confidence").is_some());
    if declared { data.get("confidence").cloned() } else { data.remove("confidence") }
}

fn default_risk(module: &Module, env: &Value) -> &'static str {
    let data = env.get("data").unwrap_or(&Value::Null);
    aggregate(data, module.policy.risk_rule, None)
}

fn schema_failure(what: &str, violations: &[Violation], partial: Option<Value>) -> Failure {
    let first = violations.first().map(|v| {
        let field = if v.pointer.is_empty() { "(root)" } else { v.pointer.as_str() };
        format!("{field}: {}", v.message)
    });
    let message = match first {
        Some(f) if violations.len() > 1 => format!("{what}: {f} (and {} more)", violations.len() - 1),
        Some(f) => format!("{what}: {f}"),
        None => what.to_owned(),
    };
    Failure::new(ErrorCode::E3001, message).details(json!({ "violations": violations })).partial(partial)
}

fn prefixed(mut v: Vec<Violation>, prefix: &str) -> Vec<Violation> {
    for x in &mut v {
        x.pointer.insert_str(0, prefix);
    }
    v
}

/// v2.1 compatibility and harmless normalisation before validation.
fn normalise(env: &mut Value, module: &Module) {
    let Some(obj) = env.as_object_mut() else { return };
    // The spec's own examples write `"partial_data": null`; absent and null
    // mean the same, and the schema only allows an object.
    if obj.get("partial_data").is_some_and(Value::is_null) {
        obj.remove("partial_data");
    }
    if !module.policy.auto_wrap {
        return;
    }
    let has = |k: &str| obj.contains_key(k);
    if !has("ok") && !has("meta") && (has("rationale") || has("confidence")) {
        // Flat v2.1 payload: the data itself, with confidence beside it.
        let mut data = std::mem::take(obj);
        let mut meta = Map::new();
        if let Some(c) = take_confidence(&mut data, module) {
            meta.insert("confidence".into(), c);
        }
        if let Some(Value::String(e)) = data.get("explain").cloned() {
            data.remove("explain");
            meta.insert("explain".into(), json!(e));
        }
        obj.insert("ok".into(), json!(true));
        obj.insert("meta".into(), Value::Object(meta));
        obj.insert("data".into(), Value::Object(data));
    } else if obj.get("ok") == Some(&json!(true)) && !has("meta") {
        // v2.1 envelope: confidence inside data.
        if let Some(Value::Object(data)) = obj.get_mut("data")
            && let Some(c) = take_confidence(data, module)
        {
            obj.insert("meta".into(), json!({ "confidence": c }));
        }
    }
}

fn check_success(module: &Module, mut env: Value, found: Option<Found>, repairs: Vec<String>) -> Checked {
    let policy = &module.policy;
    let data = env["data"].clone();
    let partial = || Some(data.clone());

    if data["rationale"].as_str().is_some_and(|r| r.trim().is_empty()) {
        let v = vec![Violation {
            pointer: "/data/rationale".into(),
            keyword: "minLength".into(),
            message: "rationale is empty".into(),
        }];
        return Checked::fail(
            Failure::new(ErrorCode::E3003, "data.rationale is empty").partial(partial()),
            found,
            repairs,
            v,
        );
    }

    if let Some(insights) = data.get("extensions").and_then(|e| e.get("insights")).and_then(Value::as_array) {
        let mut problem = None;
        if !insights.is_empty() && !policy.overflow_enabled {
            problem = Some(format!("{} overflow insight(s) but overflow is disabled for this module", insights.len()));
        } else if insights.len() > policy.max_items as usize {
            problem = Some(format!(
                "{} overflow insights, more than overflow.max_items = {}",
                insights.len(),
                policy.max_items
            ));
        } else if policy.require_suggested_mapping
            && let Some(i) = insights
                .iter()
                .position(|i| i.get("suggested_mapping").and_then(Value::as_str).is_none_or(|s| s.trim().is_empty()))
        {
            problem = Some(format!("insight {i} has no suggested_mapping"));
        }
        if let Some(message) = problem {
            let v = vec![Violation {
                pointer: "/data/extensions/insights".into(),
                keyword: "overflow".into(),
                message: message.clone(),
            }];
            return Checked::fail(Failure::new(ErrorCode::E3004, message).partial(partial()), found, repairs, v);
        }
    }

    let mut custom = Vec::new();
    find_custom_enums(&data, &policy.unknown_tag, &mut String::from("/data"), &mut custom);
    if policy.enums == EnumStrategy::Strict
        && let Some(pointer) = custom.first()
    {
        let message = format!("{pointer}: custom enum value under the strict enum strategy");
        let v = vec![Violation { pointer: pointer.clone(), keyword: "enum".into(), message: message.clone() }];
        return Checked::fail(
            Failure::new(ErrorCode::E3005, message).partial(partial()).details(json!({ "pointer": pointer })),
            found,
            repairs,
            v,
        );
    }

    if let Some(section) = &module.data {
        let mut violations = prefixed(section.compiled.violations(&data), "/data");
        if policy.enums == EnumStrategy::Extensible {
            // A `{custom, reason}` value is legal under the extensible
            // strategy even where the module's schema only lists strings.
            violations.retain(|v| {
                let at_custom = custom.contains(&v.pointer);
                let enum_rule = matches!(v.keyword.as_str(), "oneOf" | "anyOf" | "enum" | "type" | "const");
                !(at_custom && enum_rule)
            });
        }
        if !violations.is_empty() {
            if policy.strictness == Strictness::Low {
                env["meta"]["validation_warnings"] = json!(violations);
            } else {
                return Checked::fail(
                    schema_failure("data breaks the module's data schema", &violations, partial()),
                    found,
                    repairs,
                    violations,
                );
            }
        }
    }

    // Legacy v2.1 constraint kept by the example modules.
    if let Some(max) =
        module.manifest.constraints.get("behavior_equivalence_false_max_confidence").and_then(Value::as_f64)
        && data.get("behavior_equivalence") == Some(&json!(false))
        && let Some(c) = env["meta"]["confidence"].as_f64()
        && c > max
    {
        env["meta"]["confidence"] = json!(max);
    }

    let risk = aggregate(&data, policy.risk_rule, env["meta"]["risk"].as_str());
    env["meta"]["risk"] = json!(risk);

    let confidence = env["meta"]["confidence"].as_f64().unwrap_or(0.0);
    if confidence < policy.min_confidence {
        let message = format!(
            "confidence {confidence} is below the threshold {} for the {} tier",
            policy.min_confidence,
            policy.tier.as_str()
        );
        let mut failure = Failure::new(ErrorCode::E2001, message)
            .details(json!({ "confidence": confidence, "threshold": policy.min_confidence }));
        if policy.partial_allowed {
            failure = failure.partial(partial());
        }
        let mut envelope = failure.into_envelope();
        // Keep the model's own assessment visible: E2001 is about it.
        envelope["meta"]["confidence"] = json!(confidence);
        envelope["meta"]["explain"] =
            json!(truncate_chars(env["meta"]["explain"].as_str().unwrap_or_default(), EXPLAIN_MAX_CHARS));
        return Checked { envelope, found, repairs, violations: Vec::new() };
    }
    Checked { envelope: env, found, repairs, violations: Vec::new() }
}

fn check_failure(module: &Module, mut env: Value, found: Option<Found>, repairs: Vec<String>) -> Checked {
    let must_match = module.manifest.failure.as_ref().and_then(|f| f.must_return_error_schema).unwrap_or(true);
    if let Some(section) = module.error.as_ref().filter(|_| must_match) {
        let error = &env["error"];
        let mut violations = section.compiled.violations(error);
        if !violations.is_empty() {
            // Codes are accepted in either spelling: a module that lists
            // `PARSE_ERROR` accepts `E1000` and the other way round.
            if let Some(alt) = alternate_code(error, module) {
                let mut e = error.clone();
                e["code"] = json!(alt);
                if section.compiled.is_valid(&e) {
                    violations.clear();
                }
            }
        }
        if !violations.is_empty() {
            let violations = prefixed(violations, "/error");
            let partial = env.get("partial_data").cloned();
            return Checked::fail(
                schema_failure("error breaks the module's error schema", &violations, partial),
                found,
                repairs,
                violations,
            );
        }
    }
    if !module.policy.partial_allowed
        && let Some(obj) = env.as_object_mut()
    {
        obj.remove("partial_data");
    }
    Checked { envelope: env, found, repairs, violations: Vec::new() }
}

fn alternate_code(error: &Value, module: &Module) -> Option<String> {
    let code = error.get("code")?.as_str()?;
    let parsed = ErrorCode::parse(code)?;
    if parsed.as_str() == code {
        // An E-code: find the legacy name the module's schema lists.
        let listed = module.error.as_ref()?.schema.pointer("/properties/code/enum")?.as_array()?;
        listed.iter().filter_map(Value::as_str).find(|l| ErrorCode::parse(l) == Some(parsed)).map(str::to_owned)
    } else {
        Some(parsed.as_str().to_owned())
    }
}

/// Collects the pointers of every `{<tag>: string, reason: string}` object.
fn find_custom_enums(v: &Value, tag: &str, path: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let is_custom = m.len() == 2
                && m.get(tag).and_then(Value::as_str).is_some_and(|c| (1..=32).contains(&c.chars().count()))
                && m.get("reason").is_some_and(Value::is_string);
            if is_custom {
                out.push(path.clone());
                return;
            }
            for (k, child) in m {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                find_custom_enums(child, tag, path, out);
                path.truncate(len);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                find_custom_enums(child, tag, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}
