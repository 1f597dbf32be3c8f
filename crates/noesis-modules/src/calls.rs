//! `@call:name` and `@call:name(args)` directives in a prompt.
//!
//! A directive starts at `@call:` that does not follow a letter, digit or
//! `_` (so `me@call:x` in an address is text), and takes a module name
//! (`[a-z][a-z0-9-]*`, without a trailing `-`). Arguments are everything up
//! to the matching `)`, with parentheses inside double-quoted strings
//! ignored: a JSON object is the child's input, anything else is its
//! `$ARGUMENTS` text. A `(` that is never closed is not an argument list:
//! the directive is the name alone and the rest stays text.

use std::ops::Range;

use serde_json::Value;

const MARK: &str = "@call:";

/// What a directive passes to the module it calls.
#[derive(Debug, Clone, PartialEq)]
pub enum CallArgs {
    /// `@call:name` or `@call:name()`.
    None,
    /// `@call:name({"code": "x"})`: the child's input.
    Input(Value),
    /// `@call:name(some words)`: the child's `$ARGUMENTS`.
    Text(String),
}

/// One directive found in a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The module called.
    pub name: String,
    /// Its arguments.
    pub args: CallArgs,
    /// Byte range of the whole directive in the prompt.
    pub span: Range<usize>,
}

/// Every directive in `prompt`, in order.
pub fn find_calls(prompt: &str) -> Vec<Call> {
    let bytes = prompt.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(off) = prompt[from..].find(MARK) {
        let start = from + off;
        from = start + MARK.len();
        let glued = start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let name_len = name_len(&prompt[from..]);
        if glued || name_len == 0 {
            continue;
        }
        let name = prompt[from..from + name_len].to_owned();
        let mut end = from + name_len;
        let mut args = CallArgs::None;
        if bytes.get(end) == Some(&b'(')
            && let Some(close) = matching_paren(prompt, end)
        {
            args = classify(prompt[end + 1..close].trim());
            end = close + 1;
        }
        out.push(Call { name, args, span: start..end });
        from = end;
    }
    out
}

fn name_len(s: &str) -> usize {
    let b = s.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_lowercase) {
        return 0;
    }
    let mut n = b.iter().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || **c == b'-').count();
    while n > 0 && b[n - 1] == b'-' {
        n -= 1;
    }
    n
}

/// The index of the `)` that closes the `(` at `open`.
fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s[open..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn classify(inner: &str) -> CallArgs {
    if inner.is_empty() {
        return CallArgs::None;
    }
    if inner.starts_with('{')
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(inner)
    {
        return CallArgs::Input(v);
    }
    CallArgs::Text(inner.to_owned())
}

/// `prompt` with each directive replaced by the text given for it
/// (`replacements[i]` for `calls[i]`, which come from [`find_calls`] on the
/// same prompt). A call whose span does not fit the prompt (out of range,
/// out of order, or splitting a character) is left as written rather than
/// panicking, as is a call without a replacement.
pub fn replace_calls(prompt: &str, calls: &[Call], replacements: &[String]) -> String {
    let mut out = String::with_capacity(prompt.len());
    let mut at = 0;
    for (call, text) in calls.iter().zip(replacements) {
        let fits = call.span.start >= at && prompt.get(call.span.clone()).is_some();
        if !fits {
            continue;
        }
        out.push_str(&prompt[at..call.span.start]);
        out.push_str(text);
        at = call.span.end;
    }
    out.push_str(&prompt[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(p: &str) -> Vec<(String, CallArgs, &str)> {
        find_calls(p).into_iter().map(|c| (c.name, c.args, &p[c.span])).collect()
    }

    #[test]
    fn finds_directives() {
        let p = "First @call:analyzer, then @call:scanner({\"code\": \"f(x)\", \"n\": [1]}) and \
                 @call:summarizer(three short words) and @call:empty() end.";
        let got = calls(p);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], ("analyzer".into(), CallArgs::None, "@call:analyzer"));
        assert_eq!(got[1].1, CallArgs::Input(json!({"code": "f(x)", "n": [1]})));
        assert_eq!(got[1].2, "@call:scanner({\"code\": \"f(x)\", \"n\": [1]})");
        assert_eq!(got[2].1, CallArgs::Text("three short words".into()));
        assert_eq!(got[3].1, CallArgs::None);
    }

    #[test]
    fn edge_cases() {
        assert!(calls("mail me@call:x or @call: or @call:Upper").is_empty());
        // An unclosed list leaves the name alone as the directive.
        assert_eq!(calls("@call:a-b-(oops"), vec![("a-b".into(), CallArgs::None, "@call:a-b")]);
        // Nested parentheses and a `)` inside a string.
        assert_eq!(calls("@call:m(f(g(x)) \")\")")[0].1, CallArgs::Text("f(g(x)) \")\"".into()));
        // A `{` that is not a JSON object is text.
        assert_eq!(calls("@call:m({not json})")[0].1, CallArgs::Text("{not json}".into()));
        assert_eq!(calls("(@call:m)")[0].2, "@call:m");
        assert_eq!(calls("é@call:m(ü)")[0].1, CallArgs::Text("ü".into()));
    }

    #[test]
    fn calls_of_another_prompt_are_left_alone() {
        // Found by prop_replace_calls_never_panics_on_calls_of_another_prompt:
        // slicing with a foreign span panicked.
        let foreign = find_calls("@call:a");
        assert_eq!(replace_calls("", &foreign, &["x".into()]), "");
        let inside_a_char = Call { name: "m".into(), args: CallArgs::None, span: 1..2 };
        assert_eq!(replace_calls("é!", &[inside_a_char], &["x".into()]), "é!");
        let backwards = [
            Call { name: "m".into(), args: CallArgs::None, span: 2..3 },
            Call { name: "m".into(), args: CallArgs::None, span: 0..1 },
        ];
        assert_eq!(replace_calls("abc", &backwards, &["X".into(), "Y".into()]), "abX");
        #[allow(clippy::reversed_empty_ranges)]
        let inverted = Call { name: "m".into(), args: CallArgs::None, span: 2..1 };
        assert_eq!(replace_calls("abc", &[inverted], &["X".into()]), "abc");
    }

    #[test]
    fn replaces_in_place() {
        let p = "A @call:x(1) B @call:y C";
        let found = find_calls(p);
        assert_eq!(replace_calls(p, &found, &["[x]".into(), "[y]".into()]), "A [x] B [y] C");
    }
}
