//! Finding a session's agent files on disk: the only module that does I/O.
//!
//! Claude Code has kept subagent transcripts in three places (notes §1):
//! inline in the session file (≤ 1.0.x, nothing to find), beside it as
//! `agent-<id>.jsonl` carrying the session's id (2.0.x – 2.1.1), and under
//! `<sessionId>/subagents/` (2.1.2+, with workflow agents in subfolders and
//! an optional `agent-<id>.meta.json` naming the spawning call).

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::subagent::{AgentKind, is_compaction_agent};

/// An agent file that belongs to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    /// The file.
    pub path: PathBuf,
    /// The agent id, from the name `agent-<id>.jsonl`.
    pub agent_id: String,
    /// Subagent or compaction agent.
    pub kind: AgentKind,
    /// `toolUseId` from `agent-<id>.meta.json` beside it, if there is one.
    pub meta_tool_use_id: Option<String>,
}

/// How deep under `subagents/` to look (`workflows/<runId>/` is two levels).
const MAX_DEPTH: usize = 3;

/// How many lines of a legacy `agent-*.jsonl` to read looking for its `sessionId`.
const SESSION_ID_LINES: usize = 8;

/// The agent files of the session stored at `session_file`
/// (`<dir>/<sessionId>.jsonl`): `<dir>/<sessionId>/subagents/**/agent-*.jsonl`
/// and every `<dir>/agent-*.jsonl` whose first records carry that
/// `sessionId`. Sorted by path. Missing folders are not an error.
///
/// # Errors
/// When a folder that exists cannot be listed, or a legacy agent file
/// cannot be read.
pub fn companions(session_file: &Path) -> io::Result<Vec<Companion>> {
    let (Some(dir), Some(session_id)) = (session_file.parent(), session_file.file_stem().and_then(|s| s.to_str()))
    else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    collect_nested(&dir.join(session_id).join("subagents"), 0, &mut found)?;
    for path in list(dir)? {
        if agent_id(&path).is_some() && first_session_id(&path)?.as_deref() == Some(session_id) {
            found.push(companion(path));
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn collect_nested(dir: &Path, depth: usize, found: &mut Vec<Companion>) -> io::Result<()> {
    for path in list(dir)? {
        if path.is_dir() {
            if depth < MAX_DEPTH {
                collect_nested(&path, depth + 1, found)?;
            }
        } else if agent_id(&path).is_some() {
            found.push(companion(path));
        }
    }
    Ok(())
}

/// The entries of `dir`; none when it does not exist.
fn list(dir: &Path) -> io::Result<Vec<PathBuf>> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.map(|e| e.path())).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn companion(path: PathBuf) -> Companion {
    let agent_id = agent_id(&path).unwrap_or_default();
    let meta = path.with_file_name(format!("agent-{agent_id}.meta.json"));
    let meta_tool_use_id = fs::read(&meta)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|v| v.get("toolUseId").and_then(Value::as_str).map(str::to_owned));
    let kind = if is_compaction_agent(&agent_id) { AgentKind::Compaction } else { AgentKind::Task };
    Companion { path, agent_id, kind, meta_tool_use_id }
}

/// `<id>` of a file named `agent-<id>.jsonl`.
fn agent_id(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let id = name.strip_prefix("agent-")?.strip_suffix(".jsonl")?;
    (!id.is_empty()).then(|| id.to_owned())
}

fn first_session_id(path: &Path) -> io::Result<Option<String>> {
    let mut reader = BufReader::new(fs::File::open(path)?);
    let mut line = Vec::new();
    for _ in 0..SESSION_ID_LINES {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&line)
            && let Some(id) = v.get("sessionId").and_then(Value::as_str)
        {
            return Ok(Some(id.to_owned()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_and_legacy_agents_with_meta() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let session = dir.join("s1.jsonl");
        fs::write(&session, "{}\n").unwrap();
        let sub = dir.join("s1/subagents");
        fs::create_dir_all(sub.join("workflows/run1")).unwrap();
        fs::write(sub.join("agent-a1.jsonl"), "").unwrap();
        fs::write(sub.join("agent-a1.meta.json"), r#"{"toolUseId":"toolu_1","parentAgentId":null}"#).unwrap();
        fs::write(sub.join("agent-acompact-9f.jsonl"), "").unwrap();
        fs::write(sub.join("workflows/run1/agent-w1.jsonl"), "").unwrap();
        fs::write(sub.join("notes.txt"), "").unwrap();
        fs::write(dir.join("agent-old.jsonl"), "\n{\"sessionId\":\"s1\",\"agentId\":\"old\"}\n").unwrap();
        fs::write(dir.join("agent-other.jsonl"), "{\"sessionId\":\"s2\"}\n").unwrap();

        let got = companions(&session).unwrap();
        let ids: Vec<(&str, AgentKind, Option<&str>)> =
            got.iter().map(|c| (c.agent_id.as_str(), c.kind, c.meta_tool_use_id.as_deref())).collect();
        assert_eq!(
            ids,
            vec![
                ("old", AgentKind::Task, None),
                ("a1", AgentKind::Task, Some("toolu_1")),
                ("acompact-9f", AgentKind::Compaction, None),
                ("w1", AgentKind::Task, None),
            ]
        );
    }

    #[test]
    fn no_companions_is_fine() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(companions(&tmp.path().join("nothing.jsonl")).unwrap().is_empty());
    }
}
