//! A module's input form, generated from its input schema, and the input
//! read back from what the browser posts. Pure.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::html::esc;

/// How a top-level input field is edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    Integer,
    Boolean,
    Choice,
    /// Objects, arrays and anything else: JSON typed in a text area.
    Json,
}

fn kind(prop: &Value) -> Kind {
    if prop.get("enum").and_then(Value::as_array).is_some_and(|e| e.iter().all(Value::is_string)) {
        return Kind::Choice;
    }
    match prop.get("type").and_then(Value::as_str) {
        Some("string") => Kind::Text,
        Some("number") => Kind::Number,
        Some("integer") => Kind::Integer,
        Some("boolean") => Kind::Boolean,
        _ => Kind::Json,
    }
}

fn properties(schema: &Value) -> Vec<(String, Value, bool)> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone(), required.contains(&k.as_str()))).collect())
        .unwrap_or_default()
}

/// The form's fields for `schema` (an object schema), filled with `values`
/// when the form is shown again after an error.
pub fn fields(schema: &Value, values: &Map<String, Value>) -> String {
    let props = properties(schema);
    if props.is_empty() {
        let current = values.get("_json").and_then(Value::as_str).unwrap_or("{}");
        return format!("<label>Input (JSON)<textarea name=\"_json\" rows=\"8\">{}</textarea></label>", esc(current));
    }
    let mut out = String::new();
    for (name, prop, required) in props {
        let label = format!(
            "{}{}{}",
            esc(&name),
            if required { " <span class=\"muted\">(required)</span>" } else { "" },
            prop.get("description")
                .and_then(Value::as_str)
                .map(|d| format!(" <span class=\"muted\">— {}</span>", esc(d)))
                .unwrap_or_default()
        );
        let current = values.get(&name).and_then(Value::as_str).unwrap_or_default();
        let n = esc(&name);
        let field = match kind(&prop) {
            Kind::Text => format!("<textarea name=\"{n}\" rows=\"4\">{}</textarea>", esc(current)),
            Kind::Number => format!("<input type=\"number\" step=\"any\" name=\"{n}\" value=\"{}\">", esc(current)),
            Kind::Integer => format!("<input type=\"number\" step=\"1\" name=\"{n}\" value=\"{}\">", esc(current)),
            Kind::Boolean => {
                format!("<input type=\"checkbox\" name=\"{n}\"{}>", if current == "on" { " checked" } else { "" })
            }
            Kind::Choice => {
                let mut s = format!("<select name=\"{n}\"><option value=\"\"></option>");
                for option in prop["enum"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    let selected = if option == current { " selected" } else { "" };
                    let _ = write!(s, "<option value=\"{0}\"{selected}>{0}</option>", esc(option));
                }
                s.push_str("</select>");
                s
            }
            Kind::Json => format!("<textarea name=\"{n}\" rows=\"4\" placeholder=\"JSON\">{}</textarea>", esc(current)),
        };
        let _ = write!(out, "<label>{label}{field}</label>");
    }
    out
}

/// The input the posted `pairs` describe, typed by `schema`; an empty field
/// is left out; a value that does not parse is an error naming the field.
pub fn input(schema: &Value, pairs: &[(String, String)]) -> Result<Value, String> {
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let props = properties(schema);
    if props.is_empty() {
        let text = get("_json").unwrap_or("{}");
        let v: Value = serde_json::from_str(text).map_err(|e| format!("the input is not JSON: {e}"))?;
        return if v.is_object() { Ok(v) } else { Err("the input must be a JSON object".into()) };
    }
    let mut out = Map::new();
    for (name, prop, _) in props {
        let k = kind(&prop);
        if k == Kind::Boolean {
            if get(&name).is_some() {
                out.insert(name, Value::Bool(true));
            } else if prop.get("default").is_none() {
                out.insert(name, Value::Bool(false));
            }
            continue;
        }
        let Some(text) = get(&name).filter(|t| !t.trim().is_empty()) else { continue };
        let value = match k {
            Kind::Text | Kind::Choice => Value::String(text.to_owned()),
            Kind::Number => text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| format!("{name}: `{text}` is not a number"))?,
            Kind::Integer => text
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{name}: `{text}` is not a whole number"))?,
            Kind::Json => serde_json::from_str(text).map_err(|e| format!("{name}: not JSON: {e}"))?,
            Kind::Boolean => continue,
        };
        out.insert(name, value);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["code"], "properties": {
            "code": {"type": "string", "description": "the <code>"},
            "language": {"type": "string", "enum": ["python", "rust"]},
            "max": {"type": "integer"},
            "ratio": {"type": "number"},
            "strict": {"type": "boolean"},
            "options": {"type": "object"}
        }})
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn every_kind_of_field_is_offered_and_escaped() {
        let html = fields(&schema(), &Map::new());
        assert!(html.contains("<textarea name=\"code\""));
        assert!(html.contains("(required)") && html.contains("the &lt;code&gt;"));
        assert!(html.contains("<select name=\"language\">") && html.contains(">rust</option>"));
        assert!(
            html.contains("type=\"number\" step=\"1\" name=\"max\"") && html.contains("step=\"any\" name=\"ratio\"")
        );
        assert!(html.contains("type=\"checkbox\" name=\"strict\""));
        assert!(html.contains("<textarea name=\"options\" rows=\"4\" placeholder=\"JSON\">"));
        let again = fields(&schema(), json!({"code": "</textarea><script>x</script>"}).as_object().unwrap());
        assert!(!again.contains("</textarea><script>") && again.contains("&lt;/textarea&gt;&lt;script&gt;"), "{again}");
    }

    #[test]
    fn posted_fields_become_typed_input() {
        let got = input(
            &schema(),
            &pairs(&[
                ("code", "x = 1"),
                ("language", "rust"),
                ("max", "3"),
                ("ratio", "0.5"),
                ("strict", "on"),
                ("options", "{\"a\": 1}"),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"code": "x = 1", "language": "rust", "max": 3, "ratio": 0.5, "strict": true, "options": {"a": 1}})
        );
        assert_eq!(
            input(&schema(), &pairs(&[("code", "y"), ("max", "")])).unwrap(),
            json!({"code": "y", "strict": false})
        );
        assert!(input(&schema(), &pairs(&[("max", "three")])).unwrap_err().starts_with("max:"));
        assert!(input(&schema(), &pairs(&[("options", "{")])).unwrap_err().starts_with("options: not JSON"));
        let free = json!({"type": "object"});
        assert_eq!(input(&free, &pairs(&[("_json", "{\"k\": 1}")])).unwrap(), json!({"k": 1}));
        assert!(input(&free, &pairs(&[("_json", "[1]")])).is_err());
    }
}
