//! Rewriting a JSON Schema into the form strict structured-output modes
//! accept (OpenAI `strict: true`), and undoing the rewrite on the reply.
//!
//! Strict mode wants a root object, every property listed in `required` and
//! `additionalProperties: false` everywhere. Module schemas rarely look like
//! that, so: a root `oneOf` of object branches (the v2.2 envelope) merges into
//! one object, optional properties become required-but-nullable, nested
//! `oneOf` becomes `anyOf`. [`Strict::relax`] then drops the `null`s the
//! rewrite introduced, and the runtime validates the result against the
//! original schema as always — strictness narrows what the model can say,
//! it never replaces the check. Schemas that cannot be expressed (free-form
//! objects, `patternProperties`, conditionals, …) are refused with the
//! reason, and the caller falls back to non-strict JSON Schema.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A schema in strict form and what it takes to undo the rewrite.
#[derive(Debug, Clone, PartialEq)]
pub struct Strict {
    /// The strict schema to send.
    pub schema: Value,
    /// Property names that were optional somewhere: a `null` under one of
    /// these names means "absent".
    optional: BTreeSet<String>,
    /// Property names whose original schema accepts `null` somewhere; their
    /// `null`s are kept because they may be real.
    nullable: BTreeSet<String>,
}

const UNSUPPORTED: &[&str] = &[
    "patternProperties",
    "if",
    "then",
    "else",
    "not",
    "allOf",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "dependencies",
];

/// The strict form of `schema`, or why there is none (with the location).
pub fn strictify(schema: &Value) -> Result<Strict, String> {
    let mut st = Strict { schema: Value::Null, optional: BTreeSet::new(), nullable: BTreeSet::new() };
    let root = merge_root(schema)?;
    let mut out = st.node(&root, "")?;
    if let (Some(defs), Some(obj)) = (schema.get("$defs").and_then(Value::as_object), out.as_object_mut()) {
        let mut converted = Map::new();
        for (k, v) in defs {
            converted.insert(k.clone(), st.node(v, &format!("/$defs/{k}"))?);
        }
        obj.insert("$defs".into(), Value::Object(converted));
    }
    if schema.get("definitions").is_some() {
        return Err("`definitions` is not supported in strict mode (use `$defs`)".into());
    }
    st.schema = out;
    Ok(st)
}

/// A root `oneOf`/`anyOf` of object branches becomes one object whose
/// properties are the union; those not in every branch become optional.
fn merge_root(schema: &Value) -> Result<Value, String> {
    let branches = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array);
    let Some(branches) = branches else { return Ok(schema.clone()) };
    let mut props = Map::new();
    let mut required: Option<BTreeSet<String>> = None;
    for (i, b) in branches.iter().enumerate() {
        let Some(p) = b.get("properties").and_then(Value::as_object) else {
            return Err(format!("/oneOf/{i}: a root alternative must be an object with properties"));
        };
        for (k, v) in p {
            match props.get(k) {
                None => {
                    props.insert(k.clone(), v.clone());
                }
                Some(existing) if existing == v => {}
                Some(existing) => {
                    // Differing definitions of one key (`ok: const true` vs
                    // `const false`) widen to what both allow.
                    let merged = match (existing.get("const"), v.get("const")) {
                        (Some(a), Some(b)) if a.is_boolean() && b.is_boolean() => json!({"type": "boolean"}),
                        _ => json!({"anyOf": [existing, v]}),
                    };
                    props.insert(k.clone(), merged);
                }
            }
        }
        let req: BTreeSet<String> = b
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        required = Some(match required {
            None => req,
            Some(r) => r.intersection(&req).cloned().collect(),
        });
    }
    Ok(json!({
        "type": "object",
        "properties": props,
        "required": required.unwrap_or_default().into_iter().collect::<Vec<_>>(),
        "additionalProperties": false,
    }))
}

impl Strict {
    fn node(&mut self, s: &Value, at: &str) -> Result<Value, String> {
        let Some(obj) = s.as_object() else {
            return match s {
                Value::Bool(true) => Err(format!("{at}: an unconstrained value is not allowed in strict mode")),
                other => Ok(other.clone()),
            };
        };
        if let Some(k) = UNSUPPORTED.iter().find(|k| obj.contains_key(**k)) {
            return Err(format!("{at}: `{k}` is not supported in strict mode"));
        }
        let mut out = Map::new();
        for (k, v) in obj {
            match k.as_str() {
                "$schema" | "$id" | "$defs" | "definitions" | "$comment" => {}
                // Not accepted by strict mode but checked afterwards anyway.
                "minLength" | "maxLength" | "uniqueItems" | "minProperties" | "maxProperties" | "default"
                | "examples" => {}
                "properties" | "required" | "additionalProperties" => {}
                "oneOf" | "anyOf" => {
                    let alts = v.as_array().ok_or_else(|| format!("{at}/{k}: must be an array"))?;
                    let mut conv = Vec::new();
                    for (i, a) in alts.iter().enumerate() {
                        conv.push(self.node(a, &format!("{at}/{k}/{i}"))?);
                    }
                    out.insert("anyOf".into(), Value::Array(conv));
                }
                "items" => {
                    out.insert(k.clone(), self.node(v, &format!("{at}/items"))?);
                }
                "prefixItems" => return Err(format!("{at}: `prefixItems` is not supported in strict mode")),
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        let is_object = obj
            .get("type")
            .is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&json!("object"))))
            || obj.contains_key("properties");
        if is_object {
            let Some(props) = obj.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty()) else {
                if obj.contains_key("anyOf") || obj.contains_key("oneOf") {
                    return Ok(Value::Object(out));
                }
                return Err(format!("{at}: an object without declared properties cannot be strict"));
            };
            let required: BTreeSet<&str> =
                obj.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            let mut conv = Map::new();
            for (name, sub) in props {
                let sub_at = format!("{at}/properties/{name}");
                let optional = !required.contains(name.as_str());
                let mut c = match self.node(sub, &sub_at) {
                    Ok(c) => c,
                    // An optional property strict mode cannot express is left
                    // out: the model simply cannot send it.
                    Err(_) if optional => continue,
                    Err(e) => return Err(e),
                };
                if accepts_null(sub) {
                    self.nullable.insert(name.clone());
                }
                if optional {
                    self.optional.insert(name.clone());
                    c = json!({"anyOf": [c, {"type": "null"}]});
                }
                conv.insert(name.clone(), c);
            }
            let names: Vec<Value> = conv.keys().map(|k| json!(k)).collect();
            out.insert("properties".into(), Value::Object(conv));
            out.insert("required".into(), Value::Array(names));
            out.insert("additionalProperties".into(), json!(false));
        }
        Ok(Value::Object(out))
    }

    /// Drops the `null`s that stand for absent optional properties.
    pub fn relax(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|k, v| !(v.is_null() && self.optional.contains(k) && !self.nullable.contains(k)));
                for v in map.values_mut() {
                    self.relax(v);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.relax(v)),
            _ => {}
        }
    }

    /// [`Strict::relax`] on reply text; text that is not JSON is returned
    /// unchanged for the runtime to report.
    pub fn relax_text(&self, text: &str) -> String {
        match serde_json::from_str::<Value>(text) {
            Ok(mut v) => {
                self.relax(&mut v);
                v.to_string()
            }
            Err(_) => text.to_owned(),
        }
    }
}

fn accepts_null(s: &Value) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => ["anyOf", "oneOf"]
            .iter()
            .any(|k| s.get(*k).and_then(Value::as_array).is_some_and(|alts| alts.iter().any(accepts_null))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope_schema() -> Value {
        json!({"type": "object", "oneOf": [
            {"type": "object", "required": ["ok", "meta", "data"], "additionalProperties": false,
             "properties": {"ok": {"const": true}, "meta": {"type": "object", "required": ["confidence"], "properties": {"confidence": {"type": "number"}}},
                            "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}, "note": {"type": "string"}}}}},
            {"type": "object", "required": ["ok", "meta", "error"], "additionalProperties": false,
             "properties": {"ok": {"const": false}, "meta": {"type": "object", "required": ["confidence"], "properties": {"confidence": {"type": "number"}}},
                            "error": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}},
                            "partial_data": {"type": "object", "properties": {"x": {"type": ["string", "null"]}}}}}
        ]})
    }

    #[test]
    fn envelope_becomes_one_closed_object_with_everything_required() {
        let st = strictify(&envelope_schema()).unwrap();
        let s = &st.schema;
        assert_eq!(s["type"], "object");
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"], json!(["ok", "meta", "data", "error", "partial_data"]));
        assert_eq!(s["properties"]["meta"]["properties"]["confidence"], json!({"type": "number"}));
        assert_eq!(s["properties"]["ok"], json!({"type": "boolean"}));
        assert_eq!(s["properties"]["data"]["anyOf"][1], json!({"type": "null"}));
        assert_eq!(s["properties"]["meta"]["required"], json!(["confidence"]));
        let data = &s["properties"]["data"]["anyOf"][0];
        assert_eq!(data["required"], json!(["rationale", "note"]));
        assert_eq!(data["properties"]["note"]["anyOf"][1], json!({"type": "null"}));
    }

    #[test]
    fn relax_drops_only_stand_in_nulls() {
        let st = strictify(&envelope_schema()).unwrap();
        let mut v = json!({"ok": true, "meta": {"confidence": 0.9}, "data": {"rationale": "r", "note": null},
                           "error": null, "partial_data": {"x": null}});
        st.relax(&mut v);
        // `x` accepts null in the original schema, so its null is kept.
        assert_eq!(
            v,
            json!({"ok": true, "meta": {"confidence": 0.9}, "data": {"rationale": "r"}, "partial_data": {"x": null}})
        );
        assert_eq!(st.relax_text("not json"), "not json");
    }

    #[test]
    fn inexpressible_schemas_are_refused_with_their_location() {
        let free = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "object"}}});
        // Optional and inexpressible: left out rather than refused.
        let optional = json!({"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": "string"}}});
        assert_eq!(strictify(&optional).unwrap().schema["required"], json!(["b"]));
        assert_eq!(
            strictify(&free).unwrap_err(),
            "/properties/a: an object without declared properties cannot be strict"
        );
        let pat = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "object", "patternProperties": {"x": {}}}}});
        assert!(strictify(&pat).unwrap_err().contains("patternProperties"));
        let bad_root = json!({"oneOf": [{"type": "string"}]});
        assert!(strictify(&bad_root).unwrap_err().starts_with("/oneOf/0"));
    }

    #[test]
    fn defs_and_nested_one_of_are_converted() {
        let s = json!({"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#/$defs/A"}},
                       "$defs": {"A": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}});
        let st = strictify(&s).unwrap();
        assert_eq!(st.schema["$defs"]["A"], json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}));
        assert_eq!(st.schema["properties"]["a"], json!({"$ref": "#/$defs/A"}));
    }
}
