//! The default plugin (recall): a question about past cognition. The slice
//! lists what the model may navigate (the visible frames' prompts, set-aside
//! branches, principles); the model opens frames through its tools rather
//! than having old conclusions pasted in. Its reply is `{"answer", "confidence",
//! "cites"}` (or plain text).

use std::collections::BTreeSet;

use noesis_frames::{CausalFrame, FrameId, Status};
use serde_json::{Value, json};

use noesis_plugin::PluginError;
use noesis_plugin::{ContextSlice, CoreContext, Parsed, Plugin};

/// The built-in default plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recall;

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() > 2).map(str::to_lowercase).collect()
}

/// How much two prompts share: the Jaccard index of their words longer than
/// two letters.
#[must_use]
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)] // word counts
    let share = a.intersection(&b).count() as f64 / union as f64;
    share
}

fn one_line(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 120 { format!("{}…", s.chars().take(120).collect::<String>()) } else { s }
}

/// The request: `{"query": "...", "files": ["path", ...]}`.
fn request(raw: &Value) -> Result<(String, Vec<String>), String> {
    let query = raw.get("query").and_then(Value::as_str).filter(|q| !q.trim().is_empty());
    let query = query.ok_or("`query` must be a non-empty string")?.to_owned();
    let files = match raw.get("files") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|f| f.as_str().map(str::to_owned).ok_or("`files` must hold strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`files` must be an array of strings".into()),
    };
    Ok((query, files))
}

impl Plugin for Recall {
    fn name(&self) -> &str {
        "recall"
    }

    fn transform_input(&self, raw: &Value, ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let (query, files) = request(raw).map_err(|message| PluginError::Failed {
            plugin: "recall".into(),
            method: "transform_input".into(),
            message,
        })?;
        let current = &ctx.current_frame().frame_id;
        let visible: Vec<&CausalFrame> =
            ctx.frames().iter().filter(|f| &f.frame_id != current && f.status.is_live()).collect();
        // Past prompts (roots and their first children: what people asked),
        // most similar first; only those that share something.
        let mut related: Vec<(f64, &CausalFrame)> = visible
            .iter()
            .filter(|f| f.depth <= 1)
            .map(|f| (similarity(&query, &f.query), *f))
            .filter(|(s, _)| *s > 0.0)
            .collect();
        related.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.frame_id.cmp(&b.1.frame_id)));
        related.truncate(10);
        let suspended = ctx.suspended_frames();
        let memory: Vec<Value> = raw.get("memory").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut text = format!("question: {query}\n");
        if !memory.is_empty() {
            // Promoted answers come first: they were checked when promoted.
            text.push_str("remembered (promoted answers; open the frame if it matters):\n");
            for m in &memory {
                text.push_str(&format!(
                    "  {} {}\n",
                    m["frame_id"].as_str().unwrap_or_default(),
                    one_line(m["text"].as_str().unwrap_or_default())
                ));
            }
        }
        if !related.is_empty() {
            text.push_str("related past prompts (open a frame to read its conclusion):\n");
            for (s, f) in &related {
                text.push_str(&format!("  {} ({:.2}) {}\n", f.frame_id, s, one_line(&f.query)));
            }
        }
        if !suspended.is_empty() {
            text.push_str("set aside earlier (can resume):\n");
            for f in &suspended {
                text.push_str(&format!("  {} {}\n", f.frame_id, one_line(&f.query)));
            }
        }
        if !ctx.principles().is_empty() {
            text.push_str("principles:\n");
            for f in ctx.principles() {
                text.push_str(&format!("  {} {}\n", f.frame_id, one_line(&f.conclusion)));
            }
        }
        if !ctx.changed_files().is_empty() {
            text.push_str(&format!("changed since the session started: {}\n", ctx.changed_files().join(", ")));
        }
        let input = json!({
            "query": query,
            "memory": memory,
            "related": related.iter().map(|(s, f)| json!({"frame_id": f.frame_id, "query": f.query, "similarity": s})).collect::<Vec<_>>(),
            "suspended": suspended.iter().map(|f| json!({"frame_id": f.frame_id, "query": f.query})).collect::<Vec<_>>(),
            "principles": ctx.principles().iter().map(|f| json!({"frame_id": f.frame_id, "conclusion": f.conclusion})).collect::<Vec<_>>(),
            "visible_frames": visible.iter().map(|f| &f.frame_id).collect::<Vec<_>>(),
            "files": files,
        });
        Ok(ContextSlice { text, input, files })
    }

    fn parse_output(&self, raw: &Value, frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let bad =
            |message: String| PluginError::Failed { plugin: "recall".into(), method: "parse_output".into(), message };
        if let Some(text) = raw.as_str() {
            return Ok(Parsed::new(text, 0.5, json!({"answer": text})));
        }
        let answer =
            raw.get("answer").and_then(Value::as_str).ok_or_else(|| bad("the reply has no `answer`".into()))?;
        let confidence = raw.get("confidence").and_then(Value::as_f64).unwrap_or(0.5);
        let mut parsed = Parsed::new(answer, confidence, raw.clone());
        for c in raw.get("cites").and_then(Value::as_array).into_iter().flatten() {
            let id = c.as_str().ok_or_else(|| bad("`cites` must hold frame ids".into()))?;
            let id = FrameId::parse(id).map_err(|e| bad(e.to_string()))?;
            if id != frame.frame_id {
                parsed = parsed.also_frame(id);
            }
        }
        Ok(parsed)
    }

    fn store(&self, _parsed: &Parsed, _frame: &CausalFrame) -> Result<(), PluginError> {
        Ok(())
    }
}

/// Whether a frame's conclusion may be promoted to memory: completed, at
/// or above `threshold`, and (the caller checks) still verified.
#[must_use]
pub fn promotable(frame: &CausalFrame, threshold: f64) -> bool {
    frame.status == Status::Completed && frame.confidence >= threshold && !frame.conclusion.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_prompts() {
        assert!(similarity("analyse the auth module", "auth module analysis") > 0.3);
        assert_eq!(similarity("fix the parser", "bake a cake"), 0.0);
        assert_eq!(similarity("", ""), 0.0);
    }

    #[test]
    fn requests_are_checked() {
        assert!(request(&json!({"query": "  "})).is_err());
        assert!(request(&json!({"query": "q", "files": "a"})).is_err());
        assert_eq!(request(&json!({"query": "q", "files": ["a"]})).unwrap(), ("q".into(), vec!["a".into()]));
    }
}
