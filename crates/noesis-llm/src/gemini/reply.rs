//! A `GenerateContentResponse`, whole or streamed chunk by chunk, folded
//! into text, calls, usage and a finish reason.

use serde_json::{Value, json};

use crate::TextSink;
use crate::http::excerpt;
use crate::types::{FinishReason, Usage};

/// A function call as the API gave it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WireCall {
    pub(super) id: Option<String>,
    pub(super) name: String,
    pub(super) args: Value,
    pub(super) signature: Option<String>,
}

/// One reply built from `GenerateContentResponse`s: the whole answer, or
/// the chunks of a stream (each a complete response holding the new parts;
/// the last one carries the finish reason and the usage).
#[derive(Debug)]
pub(super) struct Fold {
    pub(super) text: String,
    pub(super) model: String,
    pub(super) calls: Vec<WireCall>,
    pub(super) usage: Option<Usage>,
    pub(super) finish: Option<String>,
    pub(super) chunks: usize,
}

impl Fold {
    pub(super) fn new(model: &str) -> Fold {
        Fold { text: String::new(), model: model.to_owned(), calls: Vec::new(), usage: None, finish: None, chunks: 0 }
    }

    pub(super) fn chunk(&mut self, v: &Value, sink: Option<TextSink<'_>>) -> Result<(), String> {
        self.chunks += 1;
        if let Some(m) = v.get("modelVersion").and_then(Value::as_str) {
            self.model = m.to_owned();
        }
        if let Some(u) = v.get("usageMetadata").and_then(usage) {
            self.usage = Some(u);
        }
        let Some(candidate) = v.pointer("/candidates/0") else {
            if let Some(reason) = v.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
                let detail = v.pointer("/promptFeedback/blockReasonMessage").and_then(Value::as_str).unwrap_or("");
                return Err(format!("the prompt was blocked ({reason}){}", sep(detail)));
            }
            // A stream may send a chunk with usage only.
            if sink.is_some() {
                return Ok(());
            }
            return Err(format!("reply has no candidates: {}", excerpt(&v.to_string())));
        };
        for part in candidate.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.text.push_str(t);
                if let Some(sink) = sink {
                    sink(t);
                }
            }
            if let Some(fc) = part.get("functionCall") {
                self.calls.push(WireCall {
                    id: fc.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned),
                    name: fc.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    args: match fc.get("args") {
                        Some(a) if !a.is_null() => a.clone(),
                        _ => json!({}),
                    },
                    signature: part.get("thoughtSignature").and_then(Value::as_str).map(str::to_owned),
                });
            }
        }
        if let Some(r) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish = Some(r.to_owned());
        }
        Ok(())
    }
}

fn sep(detail: &str) -> String {
    if detail.is_empty() { String::new() } else { format!(": {detail}") }
}

fn usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let count = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    // Thinking tokens are billed as output but counted apart from the
    // candidates.
    Some(Usage {
        input_tokens: count("promptTokenCount"),
        output_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
    })
}

pub(super) fn finish_reason(r: &str, has_calls: bool) -> FinishReason {
    match r {
        "STOP" if has_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        _ => FinishReason::Other,
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn folded(chunks: &[Value]) -> Result<Fold, String> {
        let mut f = Fold::new("asked-for");
        for c in chunks {
            f.chunk(c, None)?;
        }
        Ok(f)
    }

    #[test]
    fn replies_fold_into_text_calls_usage_and_finish() {
        let f = folded(&[json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "private", "thought": true},
                {"text": "Hello "}, {"text": "world"},
                {"functionCall": {"name": "read", "args": {"path": "a"}}, "thoughtSignature": "S1"},
                {"functionCall": {"id": "fc-9", "name": "list"}}
            ]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 3},
            "modelVersion": "gemini-x-001"
        })])
        .unwrap();
        assert_eq!(f.text, "Hello world");
        assert_eq!(f.model, "gemini-x-001");
        assert_eq!(f.usage, Some(Usage { input_tokens: 10, output_tokens: 7 }));
        assert_eq!(f.finish.as_deref(), Some("STOP"));
        assert_eq!(
            f.calls,
            vec![
                WireCall { id: None, name: "read".into(), args: json!({"path": "a"}), signature: Some("S1".into()) },
                WireCall { id: Some("fc-9".into()), name: "list".into(), args: json!({}), signature: None },
            ]
        );
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(finish_reason("STOP", false), FinishReason::Stop);
        assert_eq!(finish_reason("STOP", true), FinishReason::ToolCalls);
        assert_eq!(finish_reason("MAX_TOKENS", false), FinishReason::Length);
        for r in ["SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL", "OTHER", "whatever"] {
            assert_eq!(finish_reason(r, false), FinishReason::Other, "{r}");
        }
    }

    #[test]
    fn replies_without_candidates_say_why() {
        let e = folded(&[json!({"promptFeedback": {"blockReason": "SAFETY"}})]).unwrap_err();
        assert_eq!(e, "the prompt was blocked (SAFETY)");
        let e = folded(&[json!({"usageMetadata": {}})]).unwrap_err();
        assert!(e.starts_with("reply has no candidates"), "{e}");
        // Odd shapes are not panics.
        for odd in
            [json!(null), json!([1]), json!({"candidates": "x"}), json!({"candidates": [{"content": {"parts": 3}}]})]
        {
            let _ = folded(&[odd]);
        }
    }

    #[test]
    fn stream_chunks_add_up() {
        let seen = std::sync::Mutex::new(Vec::<String>::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_owned());
        let mut f = Fold::new("m");
        let chunks = [
            json!({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}], "usageMetadata": {"promptTokenCount": 5}}),
            json!({"usageMetadata": {"promptTokenCount": 5}}),
            json!({"candidates": [{"content": {"parts": [{"text": "lo"}]}, "finishReason": "MAX_TOKENS"}],
                   "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}}),
        ];
        for c in &chunks {
            f.chunk(c, Some(&sink)).unwrap();
        }
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
        assert_eq!(f.text, "Hello");
        assert_eq!(f.finish.as_deref(), Some("MAX_TOKENS"));
        assert_eq!(f.usage, Some(Usage { input_tokens: 5, output_tokens: 2 }));
        assert_eq!(f.chunks, 3);
    }
}
