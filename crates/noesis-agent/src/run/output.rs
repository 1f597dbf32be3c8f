//! Structured answers: with an output schema in the config, the final
//! answer must be a JSON value that validates against it. An answer that
//! does not is sent back with its violations, a bounded number of times;
//! then the run stops, typed. An accepted answer is stored as compact JSON.

use serde_json::Value;

use super::{AgentRun, Entry, Outcome, StopReason};
use crate::tool::{clip, schema_errors};

/// The JSON value an answer carries: the whole text, a fenced block, or
/// the first object or array in it.
pub(super) fn extract(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    if let Some(start) = text.find("```") {
        let body = &text[start + 3..];
        let body = body.strip_prefix("json").unwrap_or(body);
        if let Some(end) = body.find("```")
            && let Ok(v) = serde_json::from_str(body[..end].trim())
        {
            return Some(v);
        }
    }
    let start = text.find(['{', '['])?;
    serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>().next()?.ok()
}

impl AgentRun {
    /// The answer as the output schema accepts it (compact JSON), or `None`
    /// when it was sent back or the run stopped. Without a schema, the
    /// answer as it is.
    pub(super) fn accept_output(&mut self, answer: String) -> Option<String> {
        let Some(schema) = self.config.output_schema.clone() else { return Some(answer) };
        let problems = match extract(&answer) {
            None => vec!["it holds no JSON value".to_owned()],
            Some(value) => match schema_errors(&schema, &value) {
                Ok(errors) if errors.is_empty() => return Some(value.to_string()),
                Ok(errors) => errors,
                // Checked where the run was made; a stored run edited by
                // hand can still get here.
                Err(e) => {
                    self.stop(StopReason::InvalidOutput, format!("the output schema is invalid: {e}"));
                    return None;
                }
            },
        };
        let listed: Vec<String> = problems.iter().take(10).map(|p| clip(p, 300)).collect();
        if self.output_retries >= self.config.limits.max_output_retries {
            self.stop(
                StopReason::InvalidOutput,
                format!(
                    "the answer did not validate against the output schema after {} re-ask(s): {}",
                    self.output_retries,
                    listed.join("; ")
                ),
            );
            return None;
        }
        self.output_retries += 1;
        self.entries.push(Entry::Note {
            content: format!(
                "Your final answer must be a JSON value that validates against the output schema, and it does not:\n- {}\n\
Reply with only the corrected JSON value.",
                listed.join("\n- ")
            ),
        });
        None
    }

    /// The validated answer as JSON, when the run has an output schema and
    /// ended with an answer.
    pub fn output(&self) -> Option<Value> {
        self.config.output_schema.as_ref()?;
        match &self.outcome {
            Some(Outcome::Answer { text }) => serde_json::from_str(text).ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::extract;

    #[test]
    fn json_is_found_whole_fenced_or_in_prose() {
        assert_eq!(extract(" {\"a\": 1} "), Some(json!({"a": 1})));
        assert_eq!(extract("Here:\n```json\n{\"a\": 2}\n```\nDone."), Some(json!({"a": 2})));
        assert_eq!(extract("```\n[1, 2]\n```"), Some(json!([1, 2])));
        assert_eq!(extract("The result is {\"a\": 3} as asked."), Some(json!({"a": 3})));
        assert_eq!(extract("42"), Some(json!(42)));
        assert_eq!(extract("no json here"), None);
        assert_eq!(extract("broken {\"a\": "), None);
    }
}
