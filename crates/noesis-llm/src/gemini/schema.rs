//! JSON Schema → Gemini `Schema` (the OpenAPI-3 subset).

use serde_json::{Map, Value, json};

/// `$ref`s inlined inside one another, and nesting in general, stop here.
const MAX_DEPTH: usize = 48;

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
pub(super) fn to_response_schema(schema: &Value) -> Result<Value, String> {
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
}
