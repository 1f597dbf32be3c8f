//! The parsed session: its envelope facts, the message tree and what was
//! extracted from it.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::prompt::Prompt;
use crate::subagent::{Sidechain, Subagent};
use crate::tools::ToolCall;
use crate::touch::{FileTouch, Role};

/// A line that was skipped because it did not hold a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line's number, from 1, counting blank lines too.
    pub line: usize,
    /// Why it was skipped (a truncated record, not JSON, not an object).
    pub reason: String,
}

/// What a record with a `uuid` is, from its `type` (and `subtype`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageKind {
    /// `type: user`: a prompt, tool results, or injected text.
    User,
    /// `type: assistant`: one content block of a model response.
    Assistant,
    /// `type: system`, with its `subtype` (`compact_boundary`, `turn_duration`, …).
    System(Option<String>),
    /// `type: progress`, with its `data.type` (`hook_progress`, `agent_progress`, …).
    Progress(Option<String>),
    /// `type: attachment`.
    Attachment,
    /// Any other type that carries a `uuid`: kept so the tree stays connected.
    Other(String),
}

/// One node of the conversation tree: a record that has a `uuid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The record's `uuid`.
    pub uuid: String,
    /// `parentUuid`; `None` on roots.
    pub parent_uuid: Option<String>,
    /// `logicalParentUuid`: on a `compact_boundary`, the last line before the
    /// compaction, which the tree follows when `parent_uuid` is `None`.
    pub logical_parent_uuid: Option<String>,
    /// What the record is.
    pub kind: MessageKind,
    /// The line's number in its file, from 1.
    pub line: usize,
    /// `timestamp`, as written.
    pub timestamp: Option<String>,
    /// `isSidechain`: a subagent's or side question's line.
    pub sidechain: bool,
    /// `isMeta`: injected text (slash-command expansions, system reminders).
    pub meta: bool,
    /// `isCompactSummary`: the user line that carries a compaction summary.
    pub compact_summary: bool,
    /// `agentId`, set on every line of a subagent file.
    pub agent_id: Option<String>,
    /// `message.id` of an assistant line; the lines of one response share it.
    pub message_id: Option<String>,
    /// The text: a string content, or the `text` blocks joined by `\n`.
    pub text: String,
    /// How many `image` blocks the content has.
    pub images: usize,
    /// The ids of the `tool_use` blocks on this line.
    pub tool_use_ids: Vec<String>,
    /// The `tool_use_id`s of the `tool_result` blocks on this line.
    pub tool_result_ids: Vec<String>,
}

/// A `type: summary` record: a title for the conversation that ends at
/// `leaf_uuid`, which may be in another file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The summary text.
    pub text: String,
    /// The message it summarises.
    pub leaf_uuid: String,
    /// The line's number in its file.
    pub line: usize,
}

/// Token counts of one response (see [`Response::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens`.
    pub input_tokens: u64,
    /// `output_tokens`.
    pub output_tokens: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation_input_tokens: u64,
    /// `cache_read_input_tokens`.
    pub cache_read_input_tokens: u64,
}

/// One model response: the assistant lines that share a `message.id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// `message.id`.
    pub message_id: String,
    /// `message.model` of the first line that names one.
    pub model: Option<String>,
    /// The lines, in file order.
    pub lines: Vec<usize>,
    /// The lines' uuids, in file order.
    pub uuids: Vec<String>,
    /// The text blocks, joined by `\n`.
    pub text: String,
    /// The `tool_use` ids, in order.
    pub tool_use_ids: Vec<String>,
    /// The last non-null `stop_reason`; 2.1.x writes null on every line.
    pub stop_reason: Option<String>,
    /// The usage of the line with the most output tokens: the per-block lines
    /// repeat a streaming placeholder, so no single line is the total.
    pub usage: Option<Usage>,
    /// Whether the lines are a sidechain's.
    pub sidechain: bool,
}

/// A `system/compact_boundary` record: the conversation was compacted here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// The boundary's uuid (a root of the tree).
    pub uuid: String,
    /// Its line.
    pub line: usize,
    /// The last line before the compaction (`logicalParentUuid`).
    pub logical_parent_uuid: Option<String>,
    /// `compactMetadata.trigger`: `manual` or `auto`.
    pub trigger: Option<String>,
    /// `compactMetadata.preTokens`.
    pub pre_tokens: Option<u64>,
    /// The `isCompactSummary` user line under the boundary.
    pub summary_uuid: Option<String>,
    /// The compaction agent's id, once its file is attached.
    pub agent_id: Option<String>,
}

/// A parsed transcript file. Built by [`parse`](crate::parse); subagent
/// files join it through [`Transcript::attach_subagent`].
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub(crate) session_ids: Vec<String>,
    pub(crate) versions: Vec<String>,
    pub(crate) cwd: Option<String>,
    pub(crate) git_branches: Vec<String>,
    pub(crate) agent_id: Option<String>,
    pub(crate) first_timestamp: Option<String>,
    pub(crate) last_timestamp: Option<String>,
    pub(crate) records: usize,
    pub(crate) record_types: BTreeMap<String, usize>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) repaired: Vec<usize>,
    pub(crate) messages: Vec<Message>,
    pub(crate) index: HashMap<String, usize>,
    /// Each message's parent index: `parentUuid`, or `logicalParentUuid`
    /// when that is null; `None` for roots and dangling parents.
    pub(crate) parents: Vec<Option<usize>>,
    pub(crate) children: Vec<Vec<usize>>,
    pub(crate) responses: Vec<Response>,
    pub(crate) summaries: Vec<Summary>,
    pub(crate) compactions: Vec<Compaction>,
    pub(crate) prompts: Vec<Prompt>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) file_touches: Vec<FileTouch>,
    pub(crate) sidechains: Vec<Sidechain>,
    pub(crate) subagents: Vec<Subagent>,
}

impl Transcript {
    /// The first `sessionId` seen (subagent files carry their parent's).
    #[must_use]
    pub fn session_id(&self) -> Option<&str> {
        self.session_ids.first().map(String::as_str)
    }

    /// Every distinct `sessionId`, in the order first seen.
    #[must_use]
    pub fn session_ids(&self) -> &[String] {
        &self.session_ids
    }

    /// Every distinct Claude Code `version`, in the order first seen.
    #[must_use]
    pub fn versions(&self) -> &[String] {
        &self.versions
    }

    /// The first `cwd` seen.
    #[must_use]
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The first non-empty `gitBranch` (1.0.17 writes none, and `""` means
    /// outside a repository).
    #[must_use]
    pub fn git_branch(&self) -> Option<&str> {
        self.git_branches.first().map(String::as_str)
    }

    /// Every distinct non-empty `gitBranch`, in the order first seen.
    #[must_use]
    pub fn git_branches(&self) -> &[String] {
        &self.git_branches
    }

    /// The first `agentId`: set when this is a subagent's file.
    #[must_use]
    pub fn agent_id(&self) -> Option<&str> {
        self.agent_id.as_deref()
    }

    /// The earliest well-formed timestamp (file order is not time order).
    #[must_use]
    pub fn first_timestamp(&self) -> Option<&str> {
        self.first_timestamp.as_deref()
    }

    /// The latest well-formed timestamp.
    #[must_use]
    pub fn last_timestamp(&self) -> Option<&str> {
        self.last_timestamp.as_deref()
    }

    /// How many lines held a JSON object (of any type, known or not).
    #[must_use]
    pub fn records(&self) -> usize {
        self.records
    }

    /// Records per `type`; a record without a string `type` counts under `""`.
    #[must_use]
    pub fn record_types(&self) -> &BTreeMap<String, usize> {
        &self.record_types
    }

    /// The lines that were skipped, in order.
    #[must_use]
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Lines that parsed only after a lone surrogate escape or invalid UTF-8
    /// was replaced by U+FFFD (they count as records).
    #[must_use]
    pub fn repaired_lines(&self) -> &[usize] {
        &self.repaired
    }

    /// Every record with a `uuid`, in file order; a repeated uuid keeps its
    /// first line only (resumed sessions replay lines).
    #[must_use]
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The message with this uuid.
    #[must_use]
    pub fn message(&self, uuid: &str) -> Option<&Message> {
        self.index.get(uuid).map(|&i| &self.messages[i])
    }

    /// Whether a message with this uuid is in the file.
    #[must_use]
    pub fn contains(&self, uuid: &str) -> bool {
        self.index.contains_key(uuid)
    }

    /// The message's parent in this file: by `parentUuid`, or by
    /// `logicalParentUuid` across a compaction boundary.
    #[must_use]
    pub fn parent(&self, uuid: &str) -> Option<&Message> {
        let i = *self.index.get(uuid)?;
        self.parents[i].map(|p| &self.messages[p])
    }

    /// The message's children, in file order.
    #[must_use]
    pub fn children(&self, uuid: &str) -> Vec<&Message> {
        self.index.get(uuid).map(|&i| self.children[i].iter().map(|&c| &self.messages[c]).collect()).unwrap_or_default()
    }

    /// The message's ancestors, nearest first, crossing compaction
    /// boundaries. Stops at a root, a parent not in the file, or a cycle.
    #[must_use]
    pub fn ancestors(&self, uuid: &str) -> Vec<&Message> {
        let Some(&start) = self.index.get(uuid) else { return Vec::new() };
        self.ancestor_indices(start).into_iter().map(|i| &self.messages[i]).collect()
    }

    /// Messages with no parent in the file: the first line of each chain,
    /// sidechain roots, compaction boundaries whose pre-compaction line is
    /// missing, and lines whose parent is in another file.
    #[must_use]
    pub fn roots(&self) -> Vec<&Message> {
        self.parents.iter().zip(&self.messages).filter(|(p, _)| p.is_none()).map(|(_, m)| m).collect()
    }

    /// The newest leaf of the main conversation: the last user or assistant
    /// line that is not a sidechain, not meta and has no children. This is
    /// the leaf Anthropic's own reader resumes from.
    #[must_use]
    pub fn leaf(&self) -> Option<&Message> {
        self.messages.iter().enumerate().rev().find_map(|(i, m)| {
            let conversational = matches!(m.kind, MessageKind::User | MessageKind::Assistant);
            (conversational && !m.sidechain && !m.meta && self.children[i].is_empty()).then_some(m)
        })
    }

    /// Assistant responses, grouped by `message.id`, in order of first line.
    #[must_use]
    pub fn responses(&self) -> &[Response] {
        &self.responses
    }

    /// The `type: summary` records of this file. Their leaves may be in
    /// another file: see [`Transcript::find_summary`].
    #[must_use]
    pub fn summaries(&self) -> &[Summary] {
        &self.summaries
    }

    /// Of `summaries` (from this file or any other), the one whose leaf is
    /// the latest message of this transcript; on a tie, the last given.
    pub fn find_summary<'a>(&self, summaries: impl IntoIterator<Item = &'a Summary>) -> Option<&'a Summary> {
        summaries
            .into_iter()
            .filter_map(|s| self.index.get(&s.leaf_uuid).map(|&i| (self.messages[i].line, s)))
            .max_by_key(|(line, _)| *line)
            .map(|(_, s)| s)
    }

    /// The compaction boundaries, in file order.
    #[must_use]
    pub fn compactions(&self) -> &[Compaction] {
        &self.compactions
    }

    /// The human prompts, in file order (see [`Prompt`] for what counts and
    /// [`PromptKind`](crate::PromptKind) for how each one branches).
    #[must_use]
    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    /// Every `tool_use`, paired with its result, in file order; the calls of
    /// attached subagents follow, in the order they were attached.
    #[must_use]
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// The tool call with this `tool_use` id.
    #[must_use]
    pub fn tool_call(&self, id: &str) -> Option<&ToolCall> {
        self.tool_calls.iter().find(|c| c.id == id)
    }

    /// What file tools did, in the order of [`Transcript::tool_calls`].
    #[must_use]
    pub fn file_touches(&self) -> &[FileTouch] {
        &self.file_touches
    }

    /// What the session did to each file, attached subagents included:
    /// [`Role::Created`] if a successful call created it (even if it was
    /// modified later), else [`Role::Modified`] if a successful call changed
    /// it, else [`Role::Read`] if a successful call read it. Failed calls
    /// and calls without a result count for nothing.
    #[must_use]
    pub fn roles(&self) -> BTreeMap<String, Role> {
        let mut roles = BTreeMap::new();
        for t in self.file_touches.iter().filter(|t| t.succeeded) {
            roles.entry(t.path.clone()).and_modify(|r: &mut Role| *r = (*r).max(t.role)).or_insert(t.role);
        }
        roles
    }

    /// Sidechains written inline in this file (1.0.x subagents), in order.
    #[must_use]
    pub fn sidechains(&self) -> &[Sidechain] {
        &self.sidechains
    }

    /// The subagent and compaction-agent files attached so far.
    #[must_use]
    pub fn subagents(&self) -> &[Subagent] {
        &self.subagents
    }

    pub(crate) fn ancestor_indices(&self, start: usize) -> Vec<usize> {
        let mut seen = HashSet::from([start]);
        let mut out = Vec::new();
        let mut cur = self.parents[start];
        while let Some(i) = cur {
            if !seen.insert(i) {
                break;
            }
            out.push(i);
            cur = self.parents[i];
        }
        out
    }
}

/// For each node, the nearest of itself and its ancestors for which `hit`
/// holds. Linear in the number of nodes; a cycle ends the walk like a root.
pub(crate) fn nearest(parents: &[Option<usize>], hit: impl Fn(usize) -> bool) -> Vec<Option<usize>> {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let mut out = vec![None; parents.len()];
    let mut state = vec![NEW; parents.len()];
    let mut path = Vec::new();
    for start in 0..parents.len() {
        if state[start] == DONE {
            continue;
        }
        path.clear();
        let mut above = None;
        let mut cur = Some(start);
        while let Some(c) = cur {
            match state[c] {
                DONE => {
                    above = out[c];
                    break;
                }
                ON_PATH => break,
                _ => {}
            }
            state[c] = ON_PATH;
            path.push(c);
            cur = parents[c];
        }
        for &c in path.iter().rev() {
            if hit(c) {
                above = Some(c);
            }
            out[c] = above;
            state[c] = DONE;
        }
    }
    out
}

/// A sortable key for an RFC 3339 UTC timestamp (`…T…Z`, any number of
/// fraction digits), so `…:57Z` sorts before `…:57.5Z`; `None` for other shapes.
pub(crate) fn timestamp_key(ts: &str) -> Option<(&str, u64)> {
    let b = ts.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    if b.len() < shape.len() + 1 || b.last() != Some(&b'Z') {
        return None;
    }
    let fixed_ok = shape.iter().zip(b).all(|(&s, &c)| if s == b'd' { c.is_ascii_digit() } else { s == c });
    if !fixed_ok {
        return None;
    }
    let rest = &ts[shape.len()..ts.len() - 1];
    let nanos = match rest.strip_prefix('.') {
        None if rest.is_empty() => 0,
        Some(frac) if !frac.is_empty() && frac.len() <= 9 && frac.bytes().all(|c| c.is_ascii_digit()) => {
            format!("{frac:0<9}").parse().ok()?
        }
        _ => return None,
    };
    Some((&ts[..shape.len()], nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_self_or_ancestor_and_survives_cycles() {
        // 0 <- 1 <- 2, 3 <- 4 <- 3 (a cycle), 5 alone.
        let parents = [None, Some(0), Some(1), Some(4), Some(3), None];
        let got = nearest(&parents, |i| i == 1 || i == 4);
        assert_eq!(got, vec![None, Some(1), Some(1), Some(4), Some(4), None]);
        let roots = nearest(&parents, |i| parents[i].is_none());
        assert_eq!(roots, vec![Some(0), Some(0), Some(0), None, None, Some(5)]);
    }

    #[test]
    fn timestamp_keys_order_fractions_and_refuse_other_shapes() {
        let a = timestamp_key("2026-02-12T14:11:57Z").unwrap();
        let b = timestamp_key("2026-02-12T14:11:57.5Z").unwrap();
        let c = timestamp_key("2026-02-12T14:11:57.667Z").unwrap();
        assert!(a < b && b < c);
        assert_eq!(timestamp_key("2026-02-12 14:11:57Z"), None);
        assert_eq!(timestamp_key("2026-02-12T14:11:57+01:00"), None);
        assert_eq!(timestamp_key("2026-02-12T14:11:57.Z"), None);
        assert_eq!(timestamp_key(""), None);
    }
}
