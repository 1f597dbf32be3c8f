//! The schema-driven test model: a valid reply built from the requested JSON
//! Schema, with no language model. Deterministic, instant, offline.

use serde_json::{Map, Value, json};

use crate::Provider;
use crate::error::{ErrorKind, ProviderError};
use crate::types::{Capabilities, ChatRequest, ChatResponse, FinishReason, ResponseFormat, StructuredMode, Usage};

/// Fabricates replies from the request's JSON Schema (`--provider test`).
#[derive(Debug, Default)]
pub struct TestModel;

#[async_trait::async_trait]
impl Provider for TestModel {
    fn name(&self) -> &str {
        "test"
    }

    fn model(&self) -> &str {
        "schema"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { json_schema: true, json_mode: true, ..Capabilities::default() }
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let ResponseFormat::JsonSchema { schema, .. } = &request.response_format else {
            return Err(ProviderError::new(
                "test",
                ErrorKind::Rejected { status: 400 },
                "the test model needs a JSON Schema for the reply",
            ));
        };
        let value = fabricate(schema);
        let text = value.to_string();
        let input_chars: usize = request.messages.iter().map(|m| m.content.chars().count()).sum();
        Ok(ChatResponse {
            model: "schema".to_owned(),
            usage: Some(Usage {
                input_tokens: (input_chars as u64).div_ceil(4),
                output_tokens: (text.len() as u64).div_ceil(4),
            }),
            text,
            finish_reason: Some(FinishReason::Stop),
            structured: StructuredMode::Fabricated,
            tool_calls: Vec::new(),
            served_by: None,
        })
    }
}

/// Builds a value that satisfies `schema` (the usual keywords: `$ref` into
/// the same document, `const`, `enum`, `oneOf`/`anyOf`/`allOf`, `type`,
/// `required`, length and range bounds).
pub fn fabricate(schema: &Value) -> Value {
    Fab { root: schema }.value(schema, "", 0)
}

struct Fab<'a> {
    root: &'a Value,
}

/// Upper bound on fabricated array items and string padding, so a schema
/// asking for a billion items cannot exhaust memory.
const MAX_FABRICATED: u64 = 1000;

const TEXT: &str = "Produced by the noesis test model from the module's schema; no language model was consulted.";

impl Fab<'_> {
    fn value(&self, s: &Value, name: &str, depth: usize) -> Value {
        if depth > 32 {
            return Value::Null;
        }
        let Some(obj) = s.as_object() else { return Value::Null };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str)
            && let Some(target) = r.strip_prefix('#').and_then(|p| self.root.pointer(p))
        {
            return self.value(target, name, depth + 1);
        }
        if let Some(c) = obj.get("const") {
            return c.clone();
        }
        if let Some(first) = obj.get("enum").and_then(Value::as_array).and_then(|a| a.first()) {
            return first.clone();
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(first) = obj.get(key).and_then(Value::as_array).and_then(|a| a.first()) {
                return self.value(first, name, depth + 1);
            }
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            let mut merged = Map::new();
            for part in all {
                if let Value::Object(m) = self.value(part, name, depth + 1) {
                    merged.extend(m);
                }
            }
            return Value::Object(merged);
        }
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
            _ if obj.contains_key("properties") => "object",
            _ if obj.contains_key("items") => "array",
            _ => "string",
        };
        match ty {
            "object" => self.object(obj, depth),
            "array" => {
                let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
                let max = obj.get("maxItems").and_then(Value::as_u64).unwrap_or(u64::MAX);
                let n = min.max(1).min(max).min(MAX_FABRICATED);
                let items = obj.get("items").cloned().unwrap_or(json!({}));
                Value::Array((0..n).map(|_| self.value(&items, name, depth + 1)).collect())
            }
            "string" => Value::String(self.string(obj, name)),
            "integer" => json!(number(obj, name).round() as i64),
            "number" => json!(number(obj, name)),
            "boolean" => json!(true),
            _ => Value::Null,
        }
    }

    fn object(&self, obj: &Map<String, Value>, depth: usize) -> Value {
        let props = obj.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect());
        let mut out = Map::new();
        for key in &required {
            let sub = props.and_then(|p| p.get(*key)).cloned().unwrap_or(json!({}));
            out.insert((*key).to_owned(), self.value(&sub, key, depth + 1));
        }
        if let Some(p) = props.and_then(|p| p.get("rationale")) {
            out.entry("rationale").or_insert_with(|| self.value(p, "rationale", depth + 1));
        }
        Value::Object(out)
    }

    fn string(&self, obj: &Map<String, Value>, name: &str) -> String {
        let base = match name {
            "rationale" | "explain" | "message" | "summary" | "description" => TEXT.to_owned(),
            "" => "example".to_owned(),
            n => format!("example {n}"),
        };
        let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0).min(MAX_FABRICATED) as usize;
        let max = obj.get("maxLength").and_then(Value::as_u64).map_or(usize::MAX, |m| m as usize);
        let mut s: String = base.chars().take(max).collect();
        let len = s.chars().count();
        if len < min {
            s.push_str(&"x".repeat(min - len));
        }
        s
    }
}

fn number(obj: &Map<String, Value>, name: &str) -> f64 {
    let min = obj.get("minimum").and_then(Value::as_f64);
    let max = obj.get("maximum").and_then(Value::as_f64);
    let want = if name == "confidence" { 0.9 } else { min.unwrap_or(0.0).max(0.0) };
    let lo = min.unwrap_or(f64::MIN);
    let hi = max.unwrap_or(f64::MAX);
    // A contradictory schema (minimum > maximum) has no valid value; answer
    // the minimum rather than panic, and let validation report it.
    if lo > hi { lo } else { want.clamp(lo, hi) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_refs_bounds_and_branches() {
        let schema = json!({
            "type": "object",
            "required": ["a", "b", "c", "d"],
            "properties": {
                "a": {"$ref": "#/$defs/lvl"},
                "b": {"type": "string", "minLength": 120, "maxLength": 130},
                "c": {"type": "array", "minItems": 2, "items": {"type": "integer", "minimum": 3}},
                "d": {"oneOf": [{"const": true}, {"type": "string"}]},
                "rationale": {"type": "string"}
            },
            "$defs": {"lvl": {"type": "string", "enum": ["low", "high"]}}
        });
        let v = fabricate(&schema);
        assert_eq!(v["a"], "low");
        let b = v["b"].as_str().unwrap().chars().count();
        assert!((120..=130).contains(&b));
        assert_eq!(v["c"], json!([3, 3]));
        assert_eq!(v["d"], json!(true));
        assert!(v["rationale"].as_str().unwrap().len() > 10);
    }
}
