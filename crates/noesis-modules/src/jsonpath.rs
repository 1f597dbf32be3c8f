//! The JSONPath subset composition uses: `$`, `$.a.b`, `$.a[0]`,
//! `$.a[*].f`, and `.length` of a list or a string.
//!
//! Keys are `[A-Za-z_][A-Za-z0-9_-]*` (module names such as `quick-check`
//! are keys of the composition's scope) or `["any key"]` in brackets.

use std::fmt;

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// `.key` or `["key"]`.
    Key(String),
    /// `[n]`.
    Index(usize),
    /// `[*]`: every item of a list; the rest of the path applies to each.
    Wildcard,
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    segments: Vec<Segment>,
}

/// A path that does not parse; `position` is a character offset into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {message}")]
pub struct PathError {
    /// Where the problem is (0-based, in characters).
    pub position: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

pub(crate) fn is_key_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

pub(crate) fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl JsonPath {
    /// Parses a whole string as a path.
    pub fn parse(text: &str) -> Result<JsonPath, PathError> {
        let chars: Vec<char> = text.chars().collect();
        let (path, used) = JsonPath::parse_prefix(&chars, 0)?;
        if used != chars.len() {
            return Err(PathError { position: used, message: format!("unexpected `{}` after the path", chars[used]) });
        }
        Ok(path)
    }

    /// Parses the path that starts at `chars[start]` (a `$`) and returns it
    /// with the index just past it, so an expression parser can go on.
    pub(crate) fn parse_prefix(chars: &[char], start: usize) -> Result<(JsonPath, usize), PathError> {
        let err = |position: usize, message: &str| Err(PathError { position, message: message.to_owned() });
        if chars.get(start) != Some(&'$') {
            return err(start, "a path starts with `$`");
        }
        let mut i = start + 1;
        let mut segments = Vec::new();
        loop {
            match chars.get(i) {
                Some('.') => {
                    i += 1;
                    if !chars.get(i).is_some_and(|c| is_key_start(*c)) {
                        return err(i, "expected a key after `.`");
                    }
                    let from = i;
                    while chars.get(i).is_some_and(|c| is_key_char(*c)) {
                        i += 1;
                    }
                    segments.push(Segment::Key(chars[from..i].iter().collect()));
                }
                Some('[') => {
                    i += 1;
                    match chars.get(i) {
                        Some('*') => {
                            i += 1;
                            segments.push(Segment::Wildcard);
                        }
                        Some(q @ ('"' | '\'')) => {
                            let quote = *q;
                            i += 1;
                            let from = i;
                            while chars.get(i).is_some_and(|c| *c != quote) {
                                i += 1;
                            }
                            if i >= chars.len() {
                                return err(from - 1, "unterminated quoted key");
                            }
                            segments.push(Segment::Key(chars[from..i].iter().collect()));
                            i += 1;
                        }
                        Some(c) if c.is_ascii_digit() => {
                            let from = i;
                            while chars.get(i).is_some_and(char::is_ascii_digit) {
                                i += 1;
                            }
                            let digits: String = chars[from..i].iter().collect();
                            let Ok(n) = digits.parse::<usize>() else { return err(from, "index too large") };
                            segments.push(Segment::Index(n));
                        }
                        _ => return err(i, "expected an index, `*` or a quoted key after `[`"),
                    }
                    if chars.get(i) != Some(&']') {
                        return err(i, "expected `]`");
                    }
                    i += 1;
                }
                _ => break,
            }
        }
        Ok((JsonPath { text: chars[start..i].iter().collect(), segments }, i))
    }

    /// The path's segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The value at this path, `None` when it leads nowhere. After a `[*]`
    /// the result is a list of what the rest of the path finds in each item
    /// (items where it finds nothing are left out). A final `length` of a
    /// list or string (that has no such key) is its length.
    pub fn select(&self, root: &Value) -> Option<Value> {
        select(&self.segments, root)
    }
}

fn select(segments: &[Segment], value: &Value) -> Option<Value> {
    let Some((first, rest)) = segments.split_first() else { return Some(value.clone()) };
    match first {
        Segment::Key(k) => match value {
            Value::Object(m) => select(rest, m.get(k)?),
            Value::Array(a) if k == "length" && rest.is_empty() => Some(Value::from(a.len())),
            Value::String(s) if k == "length" && rest.is_empty() => Some(Value::from(s.chars().count())),
            _ => None,
        },
        Segment::Index(n) => select(rest, value.as_array()?.get(*n)?),
        Segment::Wildcard => {
            let items = value.as_array()?;
            Some(Value::Array(items.iter().filter_map(|item| select(rest, item)).collect()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(path: &str, root: &Value) -> Option<Value> {
        JsonPath::parse(path).unwrap_or_else(|e| panic!("{path}: {e}")).select(root)
    }

    #[test]
    fn selects_the_subset() {
        let doc = json!({
            "a": {"b": 1, "c-d": [10, 20]},
            "changes": [{"risk": "low"}, {"risk": "high"}, {"other": 1}],
            "s": "héllo",
            "quick-check": {"meta": {"confidence": 0.9}},
            "odd key": true
        });
        assert_eq!(check("$", &doc), Some(doc.clone()));
        assert_eq!(check("$.a.b", &doc), Some(json!(1)));
        assert_eq!(check("$.a.c-d[1]", &doc), Some(json!(20)));
        assert_eq!(check("$.changes[0].risk", &doc), Some(json!("low")));
        assert_eq!(check("$.changes[*].risk", &doc), Some(json!(["low", "high"])));
        assert_eq!(check("$.changes[*]", &doc), Some(doc["changes"].clone()));
        assert_eq!(check("$.changes.length", &doc), Some(json!(3)));
        assert_eq!(check("$.s.length", &doc), Some(json!(5)));
        assert_eq!(check("$.quick-check.meta.confidence", &doc), Some(json!(0.9)));
        assert_eq!(check("$['odd key']", &doc), Some(json!(true)));
        assert_eq!(check("$[\"a\"].b", &doc), Some(json!(1)));
        assert_eq!(check("$.missing", &doc), None);
        assert_eq!(check("$.a.b.c", &doc), None);
        assert_eq!(check("$.changes[9]", &doc), None);
        assert_eq!(check("$.a[0]", &doc), None);
        assert_eq!(check("$.a.length", &doc), None, "an object has no length unless it has the key");
    }

    #[test]
    fn errors_name_the_position() {
        for (path, at) in
            [("a.b", 0), ("$.", 2), ("$.1a", 2), ("$.a[", 4), ("$.a[x]", 4), ("$.a[1", 5), ("$['a", 2), ("$.a b", 3)]
        {
            let e = JsonPath::parse(path).unwrap_err();
            assert_eq!(e.position, at, "{path}: {e}");
        }
        assert!(JsonPath::parse("$.a[99999999999999999999999]").is_err());
    }
}
