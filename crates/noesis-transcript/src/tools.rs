//! Tool calls: each `tool_use` block with the `tool_result` that answers it.

use serde_json::Value;

/// How much of a result's text a [`ToolResult`] keeps.
pub const RESULT_TEXT_LIMIT: usize = 2048;

/// Which file a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The transcript's own file.
    Main,
    /// An attached subagent file, by agent id; line numbers are that file's.
    Subagent(String),
}

/// What a `Task`/`Agent` call started, when it could be matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spawned {
    /// An inline sidechain of the same file (1.0.x), by its root.
    Sidechain {
        /// The sidechain's first message.
        root_uuid: String,
        /// Its line.
        line: usize,
    },
    /// An attached subagent file.
    Subagent {
        /// The agent's id.
        agent_id: String,
    },
}

/// The `tool_result` of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// Its line (in the file of the call's [`Origin`]).
    pub line: usize,
    /// Its timestamp, as written.
    pub timestamp: Option<String>,
    /// `is_error: true`: the call did not run or did not apply.
    pub is_error: bool,
    /// The result's text (string content, or its text blocks joined by
    /// `\n`), cut to [`RESULT_TEXT_LIMIT`] bytes at a character boundary.
    pub text: String,
    /// Whether `text` was cut.
    pub truncated: bool,
    /// The length in bytes of the whole text.
    pub bytes: usize,
}

/// A `tool_use` block and its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The `tool_use` id (`toolu_…`).
    pub id: String,
    /// The tool's name, an open set (`Bash`, `Task`, `Agent`, `mcp__…`).
    pub name: String,
    /// The tool's input, as written.
    pub input: Value,
    /// The line of the `tool_use` (in the file of `origin`).
    pub line: usize,
    /// The uuid of the assistant line holding the `tool_use`.
    pub uuid: Option<String>,
    /// The assistant line's timestamp.
    pub timestamp: Option<String>,
    /// Which file it came from.
    pub origin: Origin,
    /// The prompt it serves (index into
    /// [`Transcript::prompts`](crate::Transcript::prompts)): the nearest
    /// prompt among its ancestors; inside a sidechain or an attached
    /// subagent, the prompt of the call that spawned it. `None` when
    /// neither is known.
    pub prompt: Option<usize>,
    /// Whether it ran in a sidechain or a subagent.
    pub sidechain: bool,
    /// The `Task`/`Agent` call it ran under, when that is known.
    pub parent_call: Option<String>,
    /// The result; `None` when the file has none (interrupted or live).
    pub result: Option<ToolResult>,
    /// For a `Task`/`Agent` call, the agent id the transcript names: from
    /// `toolUseResult.agentId`, an `agent_progress` line, or the
    /// `agentId: …` trailer of the result text, in that order.
    pub agent_id: Option<String>,
    /// For a `Task`/`Agent` call, the sidechain or subagent it started.
    pub spawned: Option<Spawned>,
}

impl ToolCall {
    /// Whether the call has a result that is not an error: without a result
    /// nothing says it ran.
    #[must_use]
    pub fn succeeded(&self) -> bool {
        self.result.as_ref().is_some_and(|r| !r.is_error)
    }

    /// Whether the tool starts a subagent (`Task`, renamed `Agent` in 2.1.63).
    #[must_use]
    pub fn spawns_agent(&self) -> bool {
        is_agent_tool(&self.name)
    }

    /// The `prompt` input of a `Task`/`Agent` call.
    #[must_use]
    pub fn agent_prompt(&self) -> Option<&str> {
        self.input.get("prompt").and_then(Value::as_str)
    }
}

pub(crate) fn is_agent_tool(name: &str) -> bool {
    name == "Task" || name == "Agent"
}

/// The whole text of a `tool_result` block's `content`.
pub(crate) fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// `text` cut to at most `limit` bytes at a character boundary.
pub(crate) fn cut(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The id in an `agentId: <id> (…)` trailer line of a Task result.
pub(crate) fn agent_id_trailer(text: &str) -> Option<String> {
    text.lines().rev().find_map(|l| {
        let id = l.trim_start().strip_prefix("agentId:")?.split_whitespace().next()?;
        Some(id.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn result_text_joins_text_blocks_only() {
        assert_eq!(result_text(Some(&json!("plain"))), "plain");
        let blocks = json!([{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]);
        assert_eq!(result_text(Some(&blocks)), "a\nb");
        assert_eq!(result_text(None), "");
        assert_eq!(result_text(Some(&json!(3))), "");
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("ééé", 4), "éé");
    }

    #[test]
    fn trailer_gives_the_agent_id() {
        let t = "report\nagentId: aac57f5 (for resuming to continue this agent's work if needed)\n<usage>x</usage>";
        assert_eq!(agent_id_trailer(t).as_deref(), Some("aac57f5"));
        assert_eq!(agent_id_trailer("no trailer"), None);
    }
}
