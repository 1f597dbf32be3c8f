//! One pass over the lines collects records; a second builds the tree and
//! everything derived from it.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::lines;
use crate::prompt;
use crate::subagent::Sidechain;
use crate::tools::{self, Origin, RESULT_TEXT_LIMIT, Spawned, ToolCall, ToolResult};
use crate::touch;
use crate::transcript::{
    Compaction, Message, MessageKind, Problem, Response, Summary, Transcript, Usage, nearest, timestamp_key,
};

/// Reads a transcript. Never fails: a line that is not a JSON object
/// becomes a [`Problem`] and the rest still count; unknown record types and
/// fields are skipped.
///
/// Lines end at `\n` (a `\r` before it is dropped); a leading UTF-8 BOM,
/// blank lines and a missing final newline are fine. A live session's
/// last line may be cut short: it is reported like any other bad line.
#[must_use]
pub fn parse(bytes: &[u8]) -> Transcript {
    let mut b = Builder::default();
    for (line, raw) in lines::split(bytes) {
        if lines::is_blank(raw) {
            continue;
        }
        match lines::parse(raw) {
            Ok((record, repaired)) => {
                if repaired {
                    b.t.repaired.push(line);
                }
                b.record(line, &record);
            }
            Err(reason) => b.t.problems.push(Problem { line, reason }),
        }
    }
    b.finish()
}

/// Per-line facts the public [`Message`] does not keep.
#[derive(Default)]
struct Extra {
    model: Option<String>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    /// `compactMetadata` of a compact boundary: trigger and token count.
    compact: Option<(Option<String>, Option<u64>)>,
}

struct PendingResult {
    result: ToolResult,
    tool_use_result: Option<Value>,
    trailer_agent_id: Option<String>,
}

#[derive(Default)]
struct Builder {
    t: Transcript,
    extras: Vec<Extra>,
    calls: Vec<ToolCall>,
    call_ids: HashSet<String>,
    results: HashMap<String, PendingResult>,
    /// `parentToolUseID` → `data.agentId` of `agent_progress` lines.
    progress_agents: HashMap<String, String>,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn push_distinct(list: &mut Vec<String>, value: &str) {
    if !list.iter().any(|v| v == value) {
        list.push(value.to_owned());
    }
}

/// The parts of a message `content` (a string or a block array).
#[derive(Default)]
struct Parts<'a> {
    texts: Vec<&'a str>,
    images: usize,
    tool_uses: Vec<&'a Value>,
    tool_results: Vec<&'a Value>,
}

impl<'a> Parts<'a> {
    fn of(content: Option<&'a Value>) -> Self {
        let mut parts = Parts::default();
        match content {
            Some(Value::String(s)) => parts.texts.push(s),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    match str_of(block, "type") {
                        Some("text") => parts.texts.extend(str_of(block, "text")),
                        Some("image") => parts.images += 1,
                        Some("tool_use") => parts.tool_uses.push(block),
                        Some("tool_result") => parts.tool_results.push(block),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        parts
    }
}

impl Builder {
    fn record(&mut self, line: usize, rec: &Value) {
        self.t.records += 1;
        let kind = str_of(rec, "type").unwrap_or("");
        *self.t.record_types.entry(kind.to_owned()).or_default() += 1;
        self.envelope(rec);
        match kind {
            "summary" => {
                if let (Some(text), Some(leaf)) = (str_of(rec, "summary"), str_of(rec, "leafUuid")) {
                    self.t.summaries.push(Summary { text: text.to_owned(), leaf_uuid: leaf.to_owned(), line });
                }
                return;
            }
            "progress" => {
                let data = rec.get("data");
                if data.and_then(|d| str_of(d, "type")) == Some("agent_progress")
                    && let (Some(agent), Some(tool)) =
                        (data.and_then(|d| str_of(d, "agentId")), str_of(rec, "parentToolUseID"))
                {
                    self.progress_agents.entry(tool.to_owned()).or_insert_with(|| agent.to_owned());
                }
            }
            _ => {}
        }
        let message = rec.get("message");
        let parts = Parts::of(message.and_then(|m| m.get("content")));
        if kind == "assistant" || kind == "user" {
            self.tool_events(line, rec, &parts);
        }
        let Some(uuid) = str_of(rec, "uuid") else { return };
        if self.t.index.contains_key(uuid) {
            return;
        }
        let assistant = kind == "assistant";
        let m = Message {
            uuid: uuid.to_owned(),
            parent_uuid: str_of(rec, "parentUuid").map(str::to_owned),
            logical_parent_uuid: str_of(rec, "logicalParentUuid").map(str::to_owned),
            kind: match kind {
                "user" => MessageKind::User,
                "assistant" => MessageKind::Assistant,
                "system" => MessageKind::System(str_of(rec, "subtype").map(str::to_owned)),
                "progress" => MessageKind::Progress(rec.get("data").and_then(|d| str_of(d, "type")).map(str::to_owned)),
                "attachment" => MessageKind::Attachment,
                other => MessageKind::Other(other.to_owned()),
            },
            line,
            timestamp: str_of(rec, "timestamp").map(str::to_owned),
            sidechain: flag(rec, "isSidechain"),
            meta: flag(rec, "isMeta"),
            compact_summary: flag(rec, "isCompactSummary"),
            agent_id: str_of(rec, "agentId").map(str::to_owned),
            message_id: message.filter(|_| assistant).and_then(|m| str_of(m, "id")).map(str::to_owned),
            text: parts.texts.join("\n"),
            images: parts.images,
            tool_use_ids: parts.tool_uses.iter().filter_map(|b| str_of(b, "id")).map(str::to_owned).collect(),
            tool_result_ids: parts
                .tool_results
                .iter()
                .filter_map(|b| str_of(b, "tool_use_id"))
                .map(str::to_owned)
                .collect(),
        };
        let extra = match message {
            Some(msg) if assistant => Extra {
                model: str_of(msg, "model").map(str::to_owned),
                stop_reason: str_of(msg, "stop_reason").map(str::to_owned),
                usage: msg.get("usage").filter(|u| u.is_object()).map(usage),
                compact: None,
            },
            _ => Extra {
                compact: rec
                    .get("compactMetadata")
                    .map(|c| (str_of(c, "trigger").map(str::to_owned), c.get("preTokens").and_then(Value::as_u64))),
                ..Extra::default()
            },
        };
        self.t.index.insert(m.uuid.clone(), self.t.messages.len());
        self.t.messages.push(m);
        self.extras.push(extra);
    }

    fn envelope(&mut self, rec: &Value) {
        let t = &mut self.t;
        if let Some(id) = str_of(rec, "sessionId") {
            push_distinct(&mut t.session_ids, id);
        }
        if let Some(v) = str_of(rec, "version") {
            push_distinct(&mut t.versions, v);
        }
        if t.cwd.is_none() {
            t.cwd = str_of(rec, "cwd").map(str::to_owned);
        }
        if let Some(b) = str_of(rec, "gitBranch").filter(|b| !b.is_empty()) {
            push_distinct(&mut t.git_branches, b);
        }
        if t.agent_id.is_none() {
            t.agent_id = str_of(rec, "agentId").map(str::to_owned);
        }
        if let Some(ts) = str_of(rec, "timestamp")
            && let Some(key) = timestamp_key(ts)
        {
            if t.first_timestamp.as_deref().and_then(timestamp_key).is_none_or(|first| key < first) {
                t.first_timestamp = Some(ts.to_owned());
            }
            if t.last_timestamp.as_deref().and_then(timestamp_key).is_none_or(|last| key > last) {
                t.last_timestamp = Some(ts.to_owned());
            }
        }
    }

    fn tool_events(&mut self, line: usize, rec: &Value, parts: &Parts<'_>) {
        let timestamp = str_of(rec, "timestamp").map(str::to_owned);
        for block in &parts.tool_uses {
            let Some(id) = str_of(block, "id") else { continue };
            // A replayed line repeats its tool_use: the first one stands.
            if !self.call_ids.insert(id.to_owned()) {
                continue;
            }
            self.calls.push(ToolCall {
                id: id.to_owned(),
                name: str_of(block, "name").unwrap_or_default().to_owned(),
                input: block.get("input").cloned().unwrap_or(Value::Null),
                line,
                uuid: str_of(rec, "uuid").map(str::to_owned),
                timestamp: timestamp.clone(),
                origin: Origin::Main,
                prompt: None,
                sidechain: flag(rec, "isSidechain"),
                parent_call: None,
                result: None,
                agent_id: None,
                spawned: None,
            });
        }
        // `toolUseResult` sits beside the blocks, so it belongs to a result
        // only when the line has exactly one.
        let single = parts.tool_results.len() == 1;
        for block in &parts.tool_results {
            let Some(id) = str_of(block, "tool_use_id") else { continue };
            if self.results.contains_key(id) {
                continue;
            }
            let text = tools::result_text(block.get("content"));
            let cut = tools::cut(&text, RESULT_TEXT_LIMIT);
            let result = ToolResult {
                line,
                timestamp: timestamp.clone(),
                is_error: flag(block, "is_error"),
                truncated: cut.len() < text.len(),
                text: cut.to_owned(),
                bytes: text.len(),
            };
            let pending = PendingResult {
                trailer_agent_id: tools::agent_id_trailer(&text),
                result,
                tool_use_result: rec.get("toolUseResult").filter(|_| single).cloned(),
            };
            self.results.insert(id.to_owned(), pending);
        }
    }

    fn finish(mut self) -> Transcript {
        let n = self.t.messages.len();
        let parents: Vec<Option<usize>> = self
            .t
            .messages
            .iter()
            .map(|m| {
                let parent = m.parent_uuid.as_ref().or(m.logical_parent_uuid.as_ref())?;
                self.t.index.get(parent).copied()
            })
            .collect();
        let mut children = vec![Vec::new(); n];
        for (i, p) in parents.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(i);
            }
        }
        self.t.parents = parents;
        self.t.children = children;
        self.t.prompts = prompt::find(&self.t);
        self.t.responses = self.responses();
        self.t.compactions = self.compactions();
        let tool_use_results = self.pair_results();
        self.t.tool_calls = std::mem::take(&mut self.calls);
        self.assign_prompts_and_sidechains();
        self.t.file_touches = touch::touches(&self.t.tool_calls, &tool_use_results);
        self.t
    }

    fn responses(&self) -> Vec<Response> {
        let mut out: Vec<Response> = Vec::new();
        let mut by_id: HashMap<&str, usize> = HashMap::new();
        for (m, extra) in self.t.messages.iter().zip(&self.extras) {
            let Some(id) = m.message_id.as_deref() else { continue };
            let r = *by_id.entry(id).or_insert_with(|| {
                out.push(Response {
                    message_id: id.to_owned(),
                    model: None,
                    lines: Vec::new(),
                    uuids: Vec::new(),
                    text: String::new(),
                    tool_use_ids: Vec::new(),
                    stop_reason: None,
                    usage: None,
                    sidechain: m.sidechain,
                });
                out.len() - 1
            });
            let r = &mut out[r];
            r.lines.push(m.line);
            r.uuids.push(m.uuid.clone());
            if !m.text.is_empty() {
                if !r.text.is_empty() {
                    r.text.push('\n');
                }
                r.text.push_str(&m.text);
            }
            r.tool_use_ids.extend(m.tool_use_ids.iter().cloned());
            if r.model.is_none() {
                r.model.clone_from(&extra.model);
            }
            if extra.stop_reason.is_some() {
                r.stop_reason.clone_from(&extra.stop_reason);
            }
            if let Some(u) = extra.usage
                && r.usage.is_none_or(|best| u.output_tokens > best.output_tokens)
            {
                r.usage = Some(u);
            }
        }
        out
    }

    fn compactions(&self) -> Vec<Compaction> {
        let t = &self.t;
        t.messages
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(&m.kind, MessageKind::System(Some(s)) if s == "compact_boundary"))
            .map(|(i, m)| Compaction {
                uuid: m.uuid.clone(),
                line: m.line,
                logical_parent_uuid: m.logical_parent_uuid.clone(),
                trigger: self.extras[i].compact.as_ref().and_then(|c| c.0.clone()),
                pre_tokens: self.extras[i].compact.as_ref().and_then(|c| c.1),
                summary_uuid: t.children[i]
                    .iter()
                    .map(|&c| &t.messages[c])
                    .find(|c| c.compact_summary)
                    .map(|c| c.uuid.clone()),
                agent_id: None,
            })
            .collect()
    }

    /// Moves each result onto its call and returns the calls' `toolUseResult`s.
    fn pair_results(&mut self) -> HashMap<String, Value> {
        let mut tool_use_results = HashMap::new();
        for call in &mut self.calls {
            let from_progress = self.progress_agents.get(&call.id).cloned();
            let Some(pending) = self.results.remove(&call.id) else {
                // An interrupted spawn has progress lines but no result.
                call.agent_id = from_progress;
                continue;
            };
            let from_result = pending.tool_use_result.as_ref().and_then(|t| str_of(t, "agentId")).map(str::to_owned);
            call.agent_id = from_result.or(from_progress).or(pending.trailer_agent_id);
            call.result = Some(pending.result);
            if let Some(v) = pending.tool_use_result {
                tool_use_results.insert(call.id.clone(), v);
            }
        }
        tool_use_results
    }

    fn assign_prompts_and_sidechains(&mut self) {
        let t = &mut self.t;
        let mut prompt_of = vec![None; t.messages.len()];
        for (p, prompt) in t.prompts.iter().enumerate() {
            if let Some(&i) = t.index.get(&prompt.uuid) {
                prompt_of[i] = Some(p);
            }
        }
        let nearest_prompt = nearest(&t.parents, |i| prompt_of[i].is_some());
        let side_root = nearest(&t.parents, |i| is_side_root(t, i));
        for call in &mut t.tool_calls {
            let by_tree = call
                .uuid
                .as_ref()
                .and_then(|u| t.index.get(u))
                .and_then(|&i| nearest_prompt[i])
                .and_then(|i| prompt_of[i]);
            // A chain cut by a skipped or missing line still belongs to the
            // conversation it sits in: the last prompt before it.
            let by_order = || (!call.sidechain).then(|| t.prompts.iter().rposition(|p| p.line < call.line)).flatten();
            call.prompt = by_tree.or_else(by_order);
        }
        let mut sidechains: Vec<Sidechain> = Vec::new();
        let mut chain_of_root: HashMap<usize, usize> = HashMap::new();
        for (i, m) in t.messages.iter().enumerate() {
            if side_root[i] != Some(i) {
                continue;
            }
            let spawner = t.tool_calls.iter_mut().find(|c| {
                c.spawns_agent()
                    && c.spawned.is_none()
                    && c.result.as_ref().is_none_or(|r| !r.is_error)
                    && c.line < m.line
                    && c.agent_prompt() == Some(m.text.as_str())
            });
            let spawned_by = spawner.map(|c| {
                c.spawned = Some(Spawned::Sidechain { root_uuid: m.uuid.clone(), line: m.line });
                c.id.clone()
            });
            chain_of_root.insert(i, sidechains.len());
            sidechains.push(Sidechain { root_uuid: m.uuid.clone(), line: m.line, text: m.text.clone(), spawned_by });
        }
        // In file order, so a spawner inside a sidechain already has its prompt.
        for c in 0..t.tool_calls.len() {
            let root = t.tool_calls[c].uuid.as_ref().and_then(|u| t.index.get(u)).and_then(|&i| side_root[i]);
            let Some(spawner) =
                root.and_then(|r| chain_of_root.get(&r)).and_then(|&s| sidechains[s].spawned_by.clone())
            else {
                continue;
            };
            let prompt = t.tool_calls.iter().find(|s| s.id == spawner).and_then(|s| s.prompt);
            let call = &mut t.tool_calls[c];
            call.prompt = call.prompt.or(prompt);
            call.parent_call = Some(spawner);
        }
        t.sidechains = sidechains;
    }
}

/// Whether message `i` starts a sidechain: its parent is a main-chain line,
/// or it has none, or (a subagent file's first line points into the main
/// file) its parent is elsewhere and it is a task prompt rather than a
/// tool result cut off by a skipped line.
fn is_side_root(t: &Transcript, i: usize) -> bool {
    let m = &t.messages[i];
    if !m.sidechain {
        return false;
    }
    match (t.parents[i], &m.parent_uuid) {
        (Some(p), _) => !t.messages[p].sidechain,
        (None, None) => true,
        (None, Some(_)) => m.kind == MessageKind::User && m.tool_result_ids.is_empty(),
    }
}

fn usage(u: &Value) -> Usage {
    let n = |k| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_creation_input_tokens: n("cache_creation_input_tokens"),
        cache_read_input_tokens: n("cache_read_input_tokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::jsonl;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_five_megabyte_line_parses() {
        let content = "x".repeat(5 * 1024 * 1024);
        let call = json!({"type":"assistant","uuid":"a","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Write","input":{"file_path":"/big","content":content}}]}});
        let result = json!({"type":"user","uuid":"r","parentUuid":"a","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":content}]}});
        let t = parse(format!("{call}\n{result}\n").as_bytes());
        assert!(t.problems().is_empty());
        let r = t.tool_calls()[0].result.as_ref().unwrap();
        assert_eq!((r.text.len(), r.truncated, r.bytes), (RESULT_TEXT_LIMIT, true, content.len()));
        assert_eq!(t.file_touches()[0].content.as_ref().map(String::len), Some(content.len()));
    }

    #[test]
    fn bom_crlf_and_blank_lines_keep_line_numbers() {
        let input = "\u{feff}{\"type\":\"user\",\"uuid\":\"u\",\"message\":{\"content\":\"hi\"}}\r\n\r\n{oops\r\n{\"type\":\"mystery\",\"x\":1}";
        let t = parse(input.as_bytes());
        assert_eq!(t.records(), 2);
        assert_eq!(t.problems().iter().map(|p| p.line).collect::<Vec<_>>(), vec![3]);
        assert_eq!(t.record_types().get("mystery"), Some(&1));
        assert_eq!(t.prompts()[0].text, "hi");
    }

    #[test]
    fn non_objects_and_untyped_objects() {
        let t = parse(b"[]\n\"s\"\n{}\n{\"type\":7}\n");
        assert_eq!(t.problems().iter().map(|p| p.line).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!((t.records(), t.record_types().get("")), (2, Some(&2)));
    }

    #[test]
    fn a_repeated_uuid_keeps_its_first_line_and_tool_use() {
        let a = json!({"type":"assistant","uuid":"a","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]}});
        let t = parse(format!("{a}\n{a}\n").as_bytes());
        assert_eq!(t.records(), 2);
        assert_eq!(t.messages().len(), 1);
        assert_eq!(t.tool_calls().len(), 1);
        assert_eq!(t.message("a").map(|m| m.line), Some(1));
    }

    #[test]
    fn responses_group_blocks_and_keep_the_largest_usage() {
        let line = |uuid: &str, parent: Option<&str>, block: serde_json::Value, out: u64, stop: Option<&str>| json!({"type":"assistant","uuid":uuid,"parentUuid":parent,"message":{"id":"msg_1","model":"m","content":[block],"stop_reason":stop,"usage":{"input_tokens":3,"output_tokens":out}}});
        let records = [
            line("a", None, json!({"type":"text","text":"hi"}), 2, None),
            line("b", Some("a"), json!({"type":"tool_use","id":"t","name":"Bash","input":{}}), 209, Some("tool_use")),
            line("c", Some("b"), json!({"type":"thinking","thinking":"…"}), 9, None),
        ];
        let t = parse(&jsonl(&records));
        let r = &t.responses()[0];
        assert_eq!(t.responses().len(), 1);
        assert_eq!(
            (r.lines.clone(), r.text.as_str(), r.tool_use_ids.clone()),
            (vec![1, 2, 3], "hi", vec!["t".to_owned()])
        );
        assert_eq!(
            (r.usage.map(|u| u.output_tokens), r.stop_reason.as_deref(), r.model.as_deref()),
            (Some(209), Some("tool_use"), Some("m"))
        );
    }

    #[test]
    fn agent_id_comes_from_progress_when_the_result_lacks_it() {
        let call = json!({"type":"assistant","uuid":"a","parentUuid":null,"message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Agent","input":{"prompt":"p"}}]}});
        let progress = json!({"type":"progress","uuid":"p","parentUuid":"a","data":{"type":"agent_progress","agentId":"abc"},"parentToolUseID":"t","toolUseID":"x"});
        let t = parse(format!("{call}\n{progress}\n").as_bytes());
        assert_eq!(t.tool_calls()[0].agent_id.as_deref(), Some("abc"));
        assert!(t.tool_calls()[0].result.is_none());
    }

    #[test]
    fn timestamps_span_by_time_not_file_order() {
        let u = |uuid: &str, ts: &str| json!({"type":"user","uuid":uuid,"timestamp":ts,"message":{"content":"x"}});
        let records = [
            u("1", "2026-02-12T14:48:36.922Z"),
            u("2", "2026-02-12T14:47:08.766Z"),
            u("3", "garbage"),
            u("4", "2026-02-12T14:49:00Z"),
        ];
        let t = parse(&jsonl(&records));
        assert_eq!(
            (t.first_timestamp(), t.last_timestamp()),
            (Some("2026-02-12T14:47:08.766Z"), Some("2026-02-12T14:49:00Z"))
        );
    }

    proptest! {
        #[test]
        fn prop_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let t = parse(&bytes);
            prop_assert!(t.records() + t.problems().len() <= bytes.len() + 1);
        }

        #[test]
        fn prop_json_like_noise_never_panics(parts in proptest::collection::vec(prop_oneof![
            Just("{\"type\":\"user\",\"uuid\":\"u\",\"parentUuid\":\"u\",\"message\":{\"content\":"),
            Just("{\"type\":\"assistant\",\"uuid\":\"a\",\"parentUuid\":null,\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Edit\",\"input\":{\"file_path\":\"/f\",\"old_string\":\"\"}}]}}"),
            Just("[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"\\uD800\"}]}"),
            Just(",\"toolUseResult\":{\"originalFile\":\"a\",\"structuredPatch\":[{\"oldStart\":0,\"lines\":[\"-\"]}]}}"),
            Just("\"text\"}}"), Just("\n"), Just("\r\n"), Just("}"), Just("\u{feff}"), Just("\\u"),
        ], 0..40)) {
            let _ = parse(parts.concat().as_bytes());
        }
    }
}
