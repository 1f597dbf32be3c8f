//! Bytes to JSON objects, one per line, and the two repairs that let a
//! damaged line still count.

use serde_json::Value;
use serde_json::error::Category;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The lines of `bytes`, numbered from 1, without their `\n` or `\r\n`.
///
/// Only `\n` ends a line: a bare `\r` can sit inside a JSON string's raw
/// bytes only if the writer was broken, and then the line fails on its own.
pub(crate) fn split(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    bytes.split(|&b| b == b'\n').enumerate().map(|(i, line)| (i + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// Whether a line holds nothing but whitespace (skipped, not a problem).
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// One line as a JSON object. `Ok((object, repaired))`, where `repaired`
/// says the line parsed only after invalid UTF-8 or a lone UTF-16 surrogate
/// escape was replaced by U+FFFD; `Err` says why the line was skipped.
pub(crate) fn parse(line: &[u8]) -> Result<(Value, bool), String> {
    let first = match serde_json::from_slice::<Value>(line) {
        Ok(value) => return object(value).map(|v| (v, false)),
        Err(e) => e,
    };
    // Claude Code before 2.1.132 could cut a string between the two halves
    // of a surrogate pair, and serde_json rejects the whole line for it
    // (notes §7.4); an interrupted write can likewise cut a UTF-8 sequence.
    if let Some(fixed) = repair(line)
        && let Ok(value) = serde_json::from_slice::<Value>(&fixed)
    {
        return object(value).map(|v| (v, true));
    }
    Err(describe(&first))
}

fn object(value: Value) -> Result<Value, String> {
    if value.is_object() {
        return Ok(value);
    }
    Err(format!("{}, not a JSON object", noesis_json::type_name(&value)))
}

fn describe(e: &serde_json::Error) -> String {
    match e.classify() {
        Category::Eof => format!("truncated record: {e}"),
        Category::Syntax | Category::Data | Category::Io => format!("not JSON: {e}"),
    }
}

/// The line with invalid UTF-8 and lone surrogate escapes replaced, or
/// `None` when there was nothing to replace (so a retry is pointless).
fn repair(line: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(line);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    match replace_lone_surrogates(text.as_bytes()) {
        Some(fixed) => Some(fixed),
        None if lossy => Some(text.into_owned().into_bytes()),
        None => None,
    }
}

/// `\uD800`–`\uDFFF` escapes that are not a high half followed by a low half
/// become `\uFFFD`. `None` when the input has none.
fn replace_lone_surrogates(b: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            // `\\`, `\"` and the like: skipping both bytes keeps an escaped
            // backslash from being read as the start of `\u`.
            i += 2;
            continue;
        }
        let lone = match hex4(b, i + 2) {
            Some(0xD800..=0xDBFF) => {
                let paired = b.get(i + 6) == Some(&b'\\')
                    && b.get(i + 7) == Some(&b'u')
                    && matches!(hex4(b, i + 8), Some(0xDC00..=0xDFFF));
                if paired {
                    i += 12;
                    continue;
                }
                true
            }
            Some(0xDC00..=0xDFFF) => true,
            Some(_) => false,
            None => {
                i += 2;
                continue;
            }
        };
        if lone {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(b.len()));
            buf.extend_from_slice(&b[copied..i]);
            buf.extend_from_slice(b"\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    let mut buf = out?;
    buf.extend_from_slice(b.get(copied..).unwrap_or_default());
    Some(buf)
}

fn hex4(b: &[u8], at: usize) -> Option<u16> {
    let digits = b.get(at..at + 4)?;
    digits.iter().try_fold(0u16, |acc, &d| Some(acc * 16 + u16::try_from(char::from(d).to_digit(16)?).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<(usize, &[u8])> {
        split(input).filter(|(_, l)| !is_blank(l)).collect()
    }

    #[test]
    fn split_handles_crlf_bom_missing_final_newline_and_blanks() {
        let input = b"\xEF\xBB\xBF{\"a\":1}\r\n\r\n  \n{\"b\":2}";
        assert_eq!(lines(input), vec![(1, &b"{\"a\":1}"[..]), (4, &b"{\"b\":2}"[..])]);
    }

    #[test]
    fn split_of_empty_input_has_no_records() {
        assert!(lines(b"").is_empty());
        assert!(lines(b"\n\n").is_empty());
    }

    #[test]
    fn parse_reports_truncation_and_non_objects() {
        let err = parse(br#"{"type":"user","message":{"con"#).unwrap_err();
        assert!(err.starts_with("truncated record"), "{err}");
        assert!(parse(b"[1,2]").unwrap_err().contains("an array"));
        assert!(parse(b"42").unwrap_err().contains("a number"));
        assert!(parse(b"not json").unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn lone_surrogates_are_replaced_pairs_kept() {
        let (v, repaired) = parse(br#"{"t":"a\uD83Db"}"#).unwrap();
        assert!(repaired);
        assert_eq!(v["t"], "a\u{FFFD}b");
        let (v, repaired) = parse(br#"{"t":"\uD83D\uDE00"}"#).unwrap();
        assert!(!repaired);
        assert_eq!(v["t"], "\u{1F600}");
        // An escaped backslash followed by `uD83D` is plain text, not an escape.
        let (v, repaired) = parse(br#"{"t":"\\uD83D"}"#).unwrap();
        assert!(!repaired);
        assert_eq!(v["t"], "\\uD83D");
        let (v, _) = parse(br#"{"t":"x\uDE00"}"#).unwrap();
        assert_eq!(v["t"], "x\u{FFFD}");
    }

    #[test]
    fn invalid_utf8_inside_a_string_is_replaced() {
        let (v, repaired) = parse(b"{\"t\":\"a\xE2\x82b\"}").unwrap();
        assert!(repaired);
        assert_eq!(v["t"], "a\u{FFFD}b");
    }
}
