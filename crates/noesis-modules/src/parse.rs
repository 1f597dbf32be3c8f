//! Extracting the JSON object from a model's reply.

use serde_json::Value;

/// Where the JSON object was found in the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Found {
    /// The whole reply is one JSON object.
    Bare,
    /// Inside a fenced code block.
    Fenced,
    /// An object embedded in surrounding prose.
    Embedded,
}

/// How many `{` positions are tried before giving up on embedded objects;
/// bounds the work on pathological replies.
const MAX_EMBEDDED_ATTEMPTS: usize = 256;

/// Finds the JSON object in a reply: a bare object, the first fenced block
/// that holds one, or the first object embedded in prose.
pub fn extract_json(reply: &str) -> Option<(Value, Found)> {
    let text = reply.trim_start_matches('\u{feff}').trim();
    if text.starts_with('{')
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text)
    {
        return Some((v, Found::Bare));
    }
    for block in fenced_blocks(text) {
        if let Some(v) = first_object(block) {
            return Some((v, Found::Fenced));
        }
    }
    first_object(text).map(|v| (v, Found::Embedded))
}

fn first_object(text: &str) -> Option<Value> {
    let mut attempts = 0;
    for (idx, _) in text.match_indices('{') {
        attempts += 1;
        if attempts > MAX_EMBEDDED_ATTEMPTS {
            break;
        }
        let mut stream = serde_json::Deserializer::from_str(&text[idx..]).into_iter::<Value>();
        if let Some(Ok(v @ Value::Object(_))) = stream.next() {
            return Some(v);
        }
    }
    None
}

/// The bodies of ``` fenced blocks, in order (an unclosed last fence runs to
/// the end of the text, as happens when output is cut).
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (`json`, `JSON`, …) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(end) => {
                blocks.push(&body[..end]);
                rest = &body[end + 3..];
            }
            None => {
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(reply: &str, expect: Option<(Value, Found)>) {
        assert_eq!(extract_json(reply), expect, "reply: {reply:?}");
    }

    #[test]
    fn shapes() {
        check(r#"{"a":1}"#, Some((json!({"a":1}), Found::Bare)));
        check("  \n{\"a\":1}\n", Some((json!({"a":1}), Found::Bare)));
        check("Here:\n```json\n{\"a\":2}\n```\nthanks", Some((json!({"a":2}), Found::Fenced)));
        check("```\n{\"a\":3}\n```", Some((json!({"a":3}), Found::Fenced)));
        check("```python\nprint(1)\n```\nand\n```json\n{\"a\":4}\n```", Some((json!({"a":4}), Found::Fenced)));
        check("Sure! {\"a\": {\"b\": [1,2]}} Hope it helps.", Some((json!({"a":{"b":[1,2]}}), Found::Embedded)));
        check("set {x} then {\"a\":5}", Some((json!({"a":5}), Found::Embedded)));
        check("```json\n{\"a\":6}", Some((json!({"a":6}), Found::Fenced)));
    }

    #[test]
    fn no_object() {
        check("", None);
        check("I cannot help with that.", None);
        check("[1, 2, 3]", None);
        check("{\"a\": ", None);
        check(&"{".repeat(10_000), None);
    }
}
