//! A provider that answers from a script: a product for demos, tests and
//! offline replays, not a test hack.

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use crate::Provider;
use crate::error::{ErrorKind, ProviderError};
use crate::types::{Capabilities, ChatRequest, ChatResponse, FinishReason, StructuredMode};

/// Answers with its replies in order; the last one repeats.
#[derive(Debug)]
pub struct Scripted {
    replies: Vec<String>,
    next: Mutex<usize>,
}

impl Scripted {
    /// A script of literal replies.
    pub fn new(replies: Vec<String>) -> Scripted {
        Scripted { replies, next: Mutex::new(0) }
    }

    /// Reads a script file: a JSON array (strings are replies as they are,
    /// other values are replied as JSON text), or any other text as one reply.
    pub fn from_file(path: &Path) -> Result<Scripted, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::new("scripted", ErrorKind::Script, format!("{}: cannot read script: {e}", path.display()))
        })?;
        Ok(Scripted::new(Self::parse(&text)))
    }

    fn parse(text: &str) -> Vec<String> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect(),
            _ => vec![text.to_owned()],
        }
    }
}

#[async_trait::async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "script"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { json_schema: false, json_mode: true, ..Capabilities::default() }
    }

    async fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut next = self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(text) = self.replies.get(*next).or_else(|| self.replies.last()) else {
            return Err(ProviderError::new("scripted", ErrorKind::Script, "the script has no replies"));
        };
        *next += 1;
        Ok(ChatResponse {
            text: text.clone(),
            model: "script".to_owned(),
            usage: None,
            finish_reason: Some(FinishReason::Stop),
            structured: StructuredMode::Text,
            tool_calls: Vec::new(),
            served_by: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_shapes() {
        assert_eq!(Scripted::parse(r#"["a", {"ok": true}]"#), vec!["a".to_owned(), r#"{"ok":true}"#.to_owned()]);
        assert_eq!(Scripted::parse("plain reply"), vec!["plain reply".to_owned()]);
        assert_eq!(Scripted::parse(r#"{"ok": true}"#), vec![r#"{"ok": true}"#.to_owned()]);
    }
}
