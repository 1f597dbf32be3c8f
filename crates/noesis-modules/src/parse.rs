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
/// that opens with one, or the first top-level object embedded in prose.
///
/// Only top-level candidates count: when an object is malformed or cut off,
/// the objects nested inside it are never taken for the answer.
pub fn extract_json(reply: &str) -> Option<(Value, Found)> {
    let text = reply.trim_start_matches('\u{feff}').trim();
    if text.starts_with('{')
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text)
    {
        return Some((v, Found::Bare));
    }
    for body in fenced_bodies(text) {
        let body = body.trim_start();
        if body.starts_with('{')
            && let Some(v) = parse_prefix(body)
        {
            return Some((v, Found::Fenced));
        }
    }
    first_object(text).map(|v| (v, Found::Embedded))
}

/// Parses the JSON value at the start of `text`, ignoring what follows it.
fn parse_prefix(text: &str) -> Option<Value> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v @ Value::Object(_))) => Some(v),
        _ => None,
    }
}

fn first_object(text: &str) -> Option<Value> {
    let mut from = 0;
    let mut attempts = 0;
    while let Some(off) = text[from..].find('{') {
        attempts += 1;
        if attempts > MAX_EMBEDDED_ATTEMPTS {
            return None;
        }
        let start = from + off;
        if let Some(v) = parse_prefix(&text[start..]) {
            return Some(v);
        }
        // Skip the whole malformed candidate so its inner objects are not
        // mistaken for the answer; an unclosed one runs to the end.
        from = start + object_span(&text[start..])?;
    }
    None
}

/// Length of the brace-balanced span starting at `{`, honouring JSON
/// strings; `None` when it never closes.
fn object_span(text: &str) -> Option<usize> {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, b) in text.bytes().enumerate() {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The text after each ``` fence line (the info string, e.g. `json`, is
/// skipped). The body is parsed as a JSON prefix, so a fence sequence inside a
/// JSON string does not cut the object.
fn fenced_bodies(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("```").map(move |(i, _)| {
        let after = &text[i + 3..];
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        &after[body_start..]
    })
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
    fn inner_objects_of_a_broken_answer_are_not_the_answer() {
        // trailing comma makes the outer object invalid; `data` alone must not win
        check("{\"data\": {\"rationale\": \"r\"}, \"meta\": {\"confidence\": 0.2},}", None);
        check("Here: {\"ok\": true, \"data\": {\"rationale\": \"r\"", None);
        check("{broken} then {\"a\": 1}", Some((json!({"a": 1}), Found::Embedded)));
        let fenced_code = "```json\n{\"code\": \"```py\\nx\\n```\"}\n```";
        check(fenced_code, Some((json!({"code": "```py\nx\n```"}), Found::Fenced)));
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
