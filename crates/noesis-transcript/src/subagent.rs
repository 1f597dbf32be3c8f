//! Subagents: inline sidechains (1.0.x) and separate agent files (2.x),
//! each tied to the `Task`/`Agent` call that started it.

use crate::tools::{Origin, Spawned};
use crate::touch::Role;
use crate::transcript::{MessageKind, Transcript};

/// An inline sidechain: a chain of `isSidechain` lines in the session file
/// that starts at a root (1.0.x wrote subagents this way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidechain {
    /// Its first message.
    pub root_uuid: String,
    /// That message's line.
    pub line: usize,
    /// That message's text: the task prompt.
    pub text: String,
    /// The `Task`/`Agent` call whose `input.prompt` equals `text`: the
    /// earliest such call before the root that did not fail and is not
    /// matched to another sidechain.
    pub spawned_by: Option<String>,
}

/// What an agent file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentKind {
    /// A subagent started by a `Task`/`Agent` call.
    Task,
    /// The summariser run by `/compact` or auto-compaction
    /// (`agent-acompact-*.jsonl`): not a user-visible subagent.
    Compaction,
}

/// How an attached agent file was tied to the main transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// A call whose result or progress names the agent id.
    AgentId,
    /// The `toolUseId` of the agent's `.meta.json`.
    MetaToolUseId,
    /// The agent's first message equals a `Task`/`Agent` call's `input.prompt`.
    Prompt,
    /// A compaction agent whose first message's parent is this boundary's
    /// `logicalParentUuid` (the boundary's uuid).
    CompactBoundary(String),
    /// Nothing matched.
    Unmatched,
}

/// An agent file attached to a transcript.
#[derive(Debug, Clone)]
pub struct Subagent {
    /// The agent id (from the file name `agent-<id>.jsonl`).
    pub agent_id: String,
    /// Subagent or compaction.
    pub kind: AgentKind,
    /// How it was matched.
    pub link: Link,
    /// The call that started it, for a matched subagent.
    pub spawned_by: Option<String>,
    /// The agent file itself, as parsed.
    pub transcript: Transcript,
}

/// Whether an agent id names a compaction agent (`agent-acompact-<hex>`).
#[must_use]
pub fn is_compaction_agent(agent_id: &str) -> bool {
    agent_id.starts_with("acompact")
}

impl Transcript {
    /// Attaches the parsed file of agent `agent_id`.
    ///
    /// A compaction agent (by [`is_compaction_agent`] on either id) is
    /// matched to the compaction whose `logicalParentUuid` is the parent of
    /// the agent's first message, and contributes no calls.
    ///
    /// A subagent is matched to its spawning call by, in order: a call
    /// whose [`agent_id`](crate::ToolCall::agent_id) is `agent_id`; the call
    /// `meta_tool_use_id` names (the `toolUseId` of `agent-<id>.meta.json`,
    /// see [`files`](crate::files)); an unmatched, successful `Task`/`Agent`
    /// call whose `input.prompt` is the agent's first user text. Its tool
    /// calls and file touches are then appended here with
    /// [`Origin::Subagent`], marked as sidechain, under the spawning call and
    /// its prompt. A `Write` whose role was inferred (subagent files carry no
    /// `toolUseResult`) becomes [`Role::Modified`] when the main file, or an
    /// agent spawned earlier, touched the path before the spawning call.
    pub fn attach_subagent(&mut self, agent_id: &str, meta_tool_use_id: Option<&str>, agent: Transcript) -> &Subagent {
        let compaction = is_compaction_agent(agent_id) || agent.agent_id().is_some_and(is_compaction_agent);
        let subagent = if compaction {
            self.attach_compaction(agent_id, agent)
        } else {
            self.attach_task(agent_id, meta_tool_use_id, agent)
        };
        self.subagents.push(subagent);
        &self.subagents[self.subagents.len() - 1]
    }

    fn attach_compaction(&mut self, agent_id: &str, agent: Transcript) -> Subagent {
        let first_parent = agent.messages.iter().find_map(|m| m.parent_uuid.clone());
        let boundary = first_parent
            .and_then(|p| self.compactions.iter_mut().find(|c| c.logical_parent_uuid.as_deref() == Some(p.as_str())));
        let link = match boundary {
            Some(c) => {
                c.agent_id = Some(agent_id.to_owned());
                Link::CompactBoundary(c.uuid.clone())
            }
            None => Link::Unmatched,
        };
        Subagent {
            agent_id: agent_id.to_owned(),
            kind: AgentKind::Compaction,
            link,
            spawned_by: None,
            transcript: agent,
        }
    }

    fn attach_task(&mut self, agent_id: &str, meta_tool_use_id: Option<&str>, agent: Transcript) -> Subagent {
        let attached: Vec<&str> = self.subagents.iter().filter_map(|s| s.spawned_by.as_deref()).collect();
        let free = |c: &&crate::ToolCall| !attached.contains(&c.id.as_str());
        let first_text = agent.messages.iter().find(|m| m.kind == MessageKind::User).map(|m| m.text.as_str());
        let by_id = self
            .tool_calls
            .iter()
            .filter(free)
            .find(|c| c.agent_id.as_deref() == Some(agent_id))
            .map(|c| (c.id.clone(), Link::AgentId));
        let by_meta = || {
            let id = meta_tool_use_id?;
            self.tool_calls.iter().filter(free).find(|c| c.id == id).map(|c| (c.id.clone(), Link::MetaToolUseId))
        };
        let by_prompt = || {
            let text = first_text?;
            self.tool_calls
                .iter()
                .filter(free)
                .find(|c| c.spawns_agent() && c.spawned.is_none() && c.succeeded() && c.agent_prompt() == Some(text))
                .map(|c| (c.id.clone(), Link::Prompt))
        };
        let Some((spawner, link)) = by_id.or_else(by_meta).or_else(by_prompt) else {
            return Subagent {
                agent_id: agent_id.to_owned(),
                kind: AgentKind::Task,
                link: Link::Unmatched,
                spawned_by: None,
                transcript: agent,
            };
        };
        let (spawn_line, prompt) = match self.tool_calls.iter_mut().find(|c| c.id == spawner) {
            Some(call) => {
                call.spawned = Some(Spawned::Subagent { agent_id: agent_id.to_owned() });
                call.agent_id.get_or_insert_with(|| agent_id.to_owned());
                (Some(call.line), call.prompt)
            }
            None => (None, None),
        };
        self.merge(agent_id, &spawner, spawn_line, prompt, &agent);
        Subagent {
            agent_id: agent_id.to_owned(),
            kind: AgentKind::Task,
            link,
            spawned_by: Some(spawner),
            transcript: agent,
        }
    }

    fn merge(
        &mut self,
        agent_id: &str,
        spawner: &str,
        spawn_line: Option<usize>,
        prompt: Option<usize>,
        agent: &Transcript,
    ) {
        let origin = Origin::Subagent(agent_id.to_owned());
        for call in &agent.tool_calls {
            let mut call = call.clone();
            if call.origin == Origin::Main {
                call.origin = origin.clone();
                call.parent_call.get_or_insert_with(|| spawner.to_owned());
            }
            call.prompt = prompt;
            call.sidechain = true;
            self.tool_calls.push(call);
        }
        let spawn_lines: Vec<(String, usize)> = self
            .subagents
            .iter()
            .filter_map(|s| {
                let line = self.tool_calls.iter().find(|c| Some(&c.id) == s.spawned_by.as_ref())?.line;
                Some((s.agent_id.clone(), line))
            })
            .collect();
        let touched_before = |path: &str, touches: &[crate::FileTouch]| {
            let Some(limit) = spawn_line else { return touches.iter().any(|t| t.succeeded && t.path == path) };
            touches.iter().filter(|t| t.succeeded && t.path == path).any(|t| match &t.origin {
                Origin::Main => t.line < limit,
                Origin::Subagent(id) => spawn_lines.iter().any(|(a, l)| a == id && *l < limit),
            })
        };
        let mut merged = Vec::new();
        for touch in &agent.file_touches {
            let mut touch = touch.clone();
            if touch.origin == Origin::Main {
                touch.origin = origin.clone();
            }
            if touch.role_inferred && touch.role == Role::Created && touched_before(&touch.path, &self.file_touches) {
                touch.role = Role::Modified;
            }
            merged.push(touch);
        }
        self.file_touches.extend(merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use crate::test_support::jsonl;
    use serde_json::{Value, json};

    fn call(uuid: &str, parent: Option<&str>, id: &str, name: &str, input: Value) -> Value {
        json!({"type":"assistant","uuid":uuid,"parentUuid":parent,"message":{"id":format!("m{uuid}"),"content":[{"type":"tool_use","id":id,"name":name,"input":input}]}})
    }

    fn result(uuid: &str, parent: &str, id: &str, extra: Value) -> Value {
        json!({"type":"user","uuid":uuid,"parentUuid":parent,"message":{"content":[{"type":"tool_result","tool_use_id":id,"content":"ok"}]},"toolUseResult":extra})
    }

    #[test]
    fn subagent_writes_become_modifications_of_files_the_main_file_touched_first() {
        let main = [
            json!({"type":"user","uuid":"u","parentUuid":null,"message":{"content":"go"}}),
            call("a1", Some("u"), "t_read", "Read", json!({"file_path":"/f"})),
            result(
                "r1",
                "a1",
                "t_read",
                json!({"type":"text","file":{"content":"x","startLine":1,"numLines":1,"totalLines":1}}),
            ),
            call("a2", Some("r1"), "t_task", "Task", json!({"prompt":"write things"})),
            result("r2", "a2", "t_task", json!({"agentId":"s1"})),
            call("a3", Some("r2"), "t_late", "Read", json!({"file_path":"/late"})),
            result("r3", "a3", "t_late", json!({})),
        ];
        let sub = [
            json!({"type":"user","uuid":"s0","parentUuid":null,"isSidechain":true,"agentId":"s1","message":{"content":"write things"}}),
            call("s1", Some("s0"), "t_w1", "Write", json!({"file_path":"/f","content":"y"})),
            json!({"type":"user","uuid":"s2","parentUuid":"s1","isSidechain":true,"message":{"content":[{"type":"tool_result","tool_use_id":"t_w1","content":"ok"}]}}),
            call("s3", Some("s2"), "t_w2", "Write", json!({"file_path":"/g","content":"z"})),
            json!({"type":"user","uuid":"s4","parentUuid":"s3","isSidechain":true,"message":{"content":[{"type":"tool_result","tool_use_id":"t_w2","content":"ok"}]}}),
            call("s5", Some("s4"), "t_w3", "Write", json!({"file_path":"/late","content":"w"})),
            json!({"type":"user","uuid":"s6","parentUuid":"s5","isSidechain":true,"message":{"content":[{"type":"tool_result","tool_use_id":"t_w3","content":"ok"}]}}),
        ];
        let sub = parse(&jsonl(&sub));
        assert!(sub.file_touches().iter().all(|t| t.role == Role::Created && t.role_inferred));
        let mut t = parse(&jsonl(&main));
        let link = t.attach_subagent("s1", None, sub).link.clone();
        assert_eq!(link, Link::AgentId);
        let roles: Vec<(String, Role)> = t.roles().into_iter().collect();
        assert_eq!(
            roles,
            vec![
                ("/f".to_owned(), Role::Modified),
                ("/g".to_owned(), Role::Created),
                ("/late".to_owned(), Role::Created)
            ]
        );
        let origins: Vec<&Origin> = t.file_touches().iter().map(|f| &f.origin).collect();
        assert_eq!(origins.iter().filter(|o| ***o == Origin::Subagent("s1".into())).count(), 3);
    }

    #[test]
    fn a_spawning_call_is_used_once() {
        let main = [
            call("a", None, "t", "Agent", json!({"prompt":"same"})),
            result("r", "a", "t", json!({"status":"completed"})),
        ];
        let sub = || {
            parse(&jsonl(&[
                json!({"type":"user","uuid":"s","parentUuid":null,"isSidechain":true,"message":{"content":"same"}}),
            ]))
        };
        let mut t = parse(&jsonl(&main));
        assert_eq!(t.attach_subagent("one", None, sub()).link, Link::Prompt);
        assert_eq!(t.attach_subagent("two", None, sub()).link, Link::Unmatched);
    }
}
