//! Building the prompt sent to the model.

use serde_json::Value;

/// What the prompt builder needs to know about one run.
#[derive(Debug, Clone, Copy)]
pub struct PromptParts<'a> {
    /// The module's `prompt.md` (or legacy equivalent).
    pub template: &'a str,
    /// The validated input.
    pub input: &'a Value,
    /// The whole argument text (`$ARGUMENTS`), if any.
    pub arguments: Option<&'a str>,
    /// The module's data schema (`$SCHEMA`).
    pub data_schema: Option<&'a Value>,
    /// Append the data schema to the instruction when the template does not
    /// place it: for providers that are not given the schema directly.
    pub include_schema: bool,
}

/// Substitutes the placeholders and appends the input (when the template did
/// not place it) and the envelope instruction.
///
/// Placeholders: `$ARGUMENTS`, `$ARGUMENTS[N]` and `$N` (the N-th
/// whitespace-separated word, from 0), `$INPUT`, `$SCHEMA`, `${field}` (a
/// dotted path into the input). Indices are read as whole numbers, so `$10`
/// is never mistaken for `$1` followed by `0`, and an index past the last
/// word is left as written (prompts may contain `$1` in shell examples).
/// Keywords match whole words only (`$INPUTS` is left alone).
pub fn build_prompt(parts: PromptParts<'_>) -> String {
    let args = parts.arguments.map(str::to_owned).or_else(|| arguments_from_input(parts.input)).unwrap_or_default();
    let words: Vec<&str> = args.split_whitespace().collect();
    let input_json = serde_json::to_string_pretty(parts.input).unwrap_or_default();
    let schema_json = parts
        .data_schema
        .map(|s| serde_json::to_string_pretty(s).unwrap_or_default())
        .unwrap_or_else(|| "{}".to_owned());

    let mut out = String::with_capacity(parts.template.len() + input_json.len() + 1024);
    let mut placed_input = false;
    let mut placed_schema = false;
    let t = parts.template;
    let mut i = 0;
    while let Some(off) = t[i..].find('$') {
        let at = i + off;
        out.push_str(&t[i..at]);
        let rest = &t[at + 1..];
        let (replacement, used) = if let Some(r) = rest.strip_prefix("ARGUMENTS[") {
            match digits(r) {
                Some((n, len)) if r[len..].starts_with(']') => {
                    (words.get(n).copied().unwrap_or("").to_owned(), "ARGUMENTS[".len() + len + 1)
                }
                _ => (args.clone(), "ARGUMENTS".len()),
            }
        } else if keyword(rest, "ARGUMENTS") {
            (args.clone(), "ARGUMENTS".len())
        } else if keyword(rest, "INPUT") {
            placed_input = true;
            (input_json.clone(), "INPUT".len())
        } else if keyword(rest, "SCHEMA") {
            placed_schema = true;
            (schema_json.clone(), "SCHEMA".len())
        } else if let Some(r) = rest.strip_prefix('{') {
            match r.find('}') {
                Some(end) if is_field_path(&r[..end]) => (field(parts.input, &r[..end]), end + 2),
                _ => ("$".to_owned(), 0),
            }
        } else if let Some((n, len)) = digits(rest).filter(|(n, _)| *n < words.len()) {
            (words[n].to_owned(), len)
        } else {
            ("$".to_owned(), 0)
        };
        if used == 0 {
            out.push('$');
        } else {
            out.push_str(&replacement);
        }
        i = at + 1 + used;
    }
    out.push_str(&t[i..]);

    if !placed_input {
        out.push_str("\n\n## Input\n\n```json\n");
        out.push_str(&input_json);
        out.push_str("\n```\n");
    }
    out.push_str(ENVELOPE_INSTRUCTION);
    if parts.include_schema && !placed_schema && parts.data_schema.is_some() {
        out.push_str("\n`data` must satisfy this JSON Schema:\n\n```json\n");
        out.push_str(&schema_json);
        out.push_str("\n```\n");
    }
    out
}

fn keyword(rest: &str, word: &str) -> bool {
    rest.starts_with(word) && !rest[word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The instruction appended to every prompt.
pub const ENVELOPE_INSTRUCTION: &str = r#"

## Response format

Reply with exactly one JSON object and nothing else: the v2.2 envelope.
On success: {"ok": true, "meta": {"confidence": <0..1>, "risk": "none|low|medium|high", "explain": "<at most 280 characters>"}, "data": {<the module's data, including a non-empty "rationale">}}
On failure: {"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "<at most 280 characters>"}, "error": {"code": "<code>", "message": "<what went wrong>"}}
"#;

fn arguments_from_input(input: &Value) -> Option<String> {
    ["$ARGUMENTS", "query"].iter().find_map(|k| input.get(*k).and_then(Value::as_str).map(str::to_owned))
}

fn digits(s: &str) -> Option<(usize, usize)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    if len == 0 || len > 6 {
        return None;
    }
    s[..len].parse().ok().map(|n| (n, len))
}

fn is_field_path(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '$'))
}

fn field(input: &Value, path: &str) -> String {
    let mut cur = input;
    for part in path.split('.') {
        cur = match cur {
            Value::Object(m) => match m.get(part) {
                Some(v) => v,
                None => return String::new(),
            },
            Value::Array(a) => match part.parse::<usize>().ok().and_then(|i| a.get(i)) {
                Some(v) => v,
                None => return String::new(),
            },
            _ => return String::new(),
        };
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(template: &str, input: Value, args: Option<&str>) -> String {
        let schema = json!({"type": "object"});
        let parts =
            PromptParts { template, input: &input, arguments: args, data_schema: Some(&schema), include_schema: false };
        let p = build_prompt(parts);
        p.split("\n\n## Response format").next().unwrap().to_owned()
    }

    #[test]
    fn placeholders() {
        let i = json!({"code": "x = 1", "opts": {"lang": "py"}, "n": 3});
        assert_eq!(
            body("$ARGUMENTS|$ARGUMENTS[1]|$0|$2", json!({}), Some("a b c")).lines().next().unwrap(),
            "a b c|b|a|c"
        );
        assert!(
            body("Code: ${code} in ${opts.lang} ${n} [${missing}]", i.clone(), None)
                .starts_with("Code: x = 1 in py 3 []")
        );
        let ten = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10";
        assert!(body("$10/$1", json!({}), Some(ten)).starts_with("w10/w1"));
        assert!(body("cost $ 5 and $x", json!({}), None).starts_with("cost $ 5 and $x"));
        assert!(body("echo $1 and $INPUTS", json!({}), Some("only")).starts_with("echo $1 and $INPUTS"));
        assert!(body("[$ARGUMENTS[4]]", json!({}), Some("a b")).starts_with("[]"));
        assert!(body("args from query: $ARGUMENTS", json!({"query": "q1"}), None).starts_with("args from query: q1"));
        assert!(body("$SCHEMA", json!({}), None).starts_with("{\n  \"type\": \"object\"\n}"));
    }

    #[test]
    fn input_always_reaches_the_model() {
        let p = body("Simplify ${language} code.", json!({"code": "print(1)", "language": "py"}), None);
        assert!(p.contains("\"code\": \"print(1)\""), "{p}");
        let p = body("All: $INPUT", json!({"code": "c"}), None);
        assert_eq!(p.matches("\"code\": \"c\"").count(), 1, "{p}");
    }

    #[test]
    fn envelope_instruction_is_last() {
        let schema = json!({});
        let parts = PromptParts {
            template: "t",
            input: &json!({}),
            arguments: None,
            data_schema: Some(&schema),
            include_schema: false,
        };
        assert!(build_prompt(parts).ends_with(ENVELOPE_INSTRUCTION));
        let with_schema = build_prompt(PromptParts { include_schema: true, ..parts });
        assert!(with_schema.contains("must satisfy this JSON Schema"));
        let placed = build_prompt(PromptParts { template: "$SCHEMA", include_schema: true, ..parts });
        assert!(!placed.contains("must satisfy this JSON Schema"), "already in the template");
    }
}
