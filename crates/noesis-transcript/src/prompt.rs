//! Which user lines are human prompts, and how each prompt relates to the
//! one before it.

use std::collections::HashSet;

use crate::transcript::{Message, MessageKind, Transcript, nearest};

/// How a prompt continues the conversation, judged against the prompt
/// written just before it in the file (the latest one at the time).
///
/// The tree used is `parentUuid`, or `logicalParentUuid` where a compaction
/// boundary has no parent, so the conversation continues across `/compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptKind {
    /// The first prompt of the file.
    Root,
    /// The previous prompt is among its ancestors: a follow-up on the
    /// current branch. Also a prompt whose chain was cut (see `Pivot`).
    Refine,
    /// It shares ancestors with the previous prompt but does not descend
    /// from it: the user rewound (or edited an earlier prompt) and resent,
    /// and the tree forks at the nearest common ancestor.
    Backtrack,
    /// It shares no ancestor with the previous prompt and its chain starts
    /// at a true root (`parentUuid: null`): a new conversation in the same
    /// file (for example after `/clear`, or an edited first prompt in
    /// versions where the first prompt is a root).
    ///
    /// A chain that instead ends at a parent missing from the file (a line
    /// skipped as a [`Problem`](crate::Problem), an excerpt, a parent in
    /// another file) or in a cycle says nothing about a new start: such a
    /// prompt is taken as a `Refine` of the previous prompt.
    Pivot,
}

/// A human prompt.
///
/// A user line counts when it is not a sidechain, not `isMeta`, not
/// `isCompactSummary`, holds no `tool_result`, has text or an image, and its
/// text does not start with `<local-command-stdout>`,
/// `<local-command-caveat>`, `<task-notification>`, `<system-reminder>` or
/// `[Request interrupted by user` (Anthropic's own filter, notes §4.1).
///
/// A slash-command echo (text starting with `<command-name>` or
/// `<command-message>`) counts only when the model answers it: some
/// assistant line is reached from it through progress, attachment, system
/// and `isMeta` lines only. `/orchestrator …` followed by its expansion and
/// a response counts; `/compact` followed by `<local-command-stdout>` does
/// not. Its text is then `/name args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The user line's uuid.
    pub uuid: String,
    /// Its line in the file.
    pub line: usize,
    /// What the user wrote (for a slash command, `/name args`).
    pub text: String,
    /// The slash command's name with its `/`, when the prompt is one.
    pub command: Option<String>,
    /// How many images came with it.
    pub images: usize,
    /// Its timestamp, as written.
    pub timestamp: Option<String>,
    /// How it continues the conversation.
    pub kind: PromptKind,
    /// The prompt it continues (index into [`Transcript::prompts`]): the
    /// previous prompt for a refine, the nearest prompt among its ancestors
    /// for a backtrack (the turn the user rewound into; `None` when the fork
    /// is above every prompt); `None` for a root or a pivot.
    pub follows: Option<usize>,
    /// For a backtrack, the prompt it replaces: the first prompt of the
    /// abandoned branch below the fork.
    pub replaces: Option<usize>,
}

const NOT_PROMPTS: [&str; 5] = [
    "<local-command-stdout>",
    "<local-command-caveat>",
    "<task-notification>",
    "<system-reminder>",
    "[Request interrupted by user",
];

/// The prompts of a transcript whose tree (`messages`, `parents`,
/// `children`) is built, kinds included.
pub(crate) fn find(t: &Transcript) -> Vec<Prompt> {
    let mut prompts: Vec<(usize, Prompt)> = Vec::new();
    for (i, m) in t.messages.iter().enumerate() {
        if let Some((text, command)) = prompt_text(t, i, m) {
            prompts.push((
                i,
                Prompt {
                    uuid: m.uuid.clone(),
                    line: m.line,
                    text,
                    command,
                    images: m.images,
                    timestamp: m.timestamp.clone(),
                    kind: PromptKind::Root,
                    follows: None,
                    replaces: None,
                },
            ));
        }
    }
    let mut prompt_of = vec![None; t.messages.len()];
    for (p, (m, _)) in prompts.iter().enumerate() {
        prompt_of[*m] = Some(p);
    }
    let nearest_prompt = nearest(&t.parents, |i| prompt_of[i].is_some());
    let tops = nearest(&t.parents, |i| t.parents[i].is_none());
    let follows: Vec<Option<usize>> =
        prompts.iter().map(|(m, _)| t.parents[*m].and_then(|p| nearest_prompt[p]).and_then(|q| prompt_of[q])).collect();
    for p in 0..prompts.len() {
        let (kind, replaces) = match p.checked_sub(1) {
            None => (PromptKind::Root, None),
            Some(prev) if descends(&follows, p, prev) => (PromptKind::Refine, None),
            Some(prev) => {
                let (m, pm) = (prompts[p].0, prompts[prev].0);
                if tops[m].is_some() && tops[m] == tops[pm] {
                    (PromptKind::Backtrack, replaced(t, m, pm, &prompt_of))
                } else if broken(t, tops[m]) {
                    (PromptKind::Refine, None)
                } else {
                    (PromptKind::Pivot, None)
                }
            }
        };
        let prompt = &mut prompts[p].1;
        prompt.kind = kind;
        prompt.replaces = replaces;
        prompt.follows = match kind {
            PromptKind::Root | PromptKind::Pivot => None,
            PromptKind::Refine => follows[p].or(p.checked_sub(1)),
            PromptKind::Backtrack => follows[p],
        };
    }
    prompts.into_iter().map(|(_, p)| p).collect()
}

/// Whether a chain whose topmost message is `top` was cut: the top names a
/// parent that is not in the file (a skipped line, an excerpt, another
/// file), or the chain loops.
fn broken(t: &Transcript, top: Option<usize>) -> bool {
    top.is_none_or(|i| t.messages[i].parent_uuid.is_some() || t.messages[i].logical_parent_uuid.is_some())
}

/// Whether prompt `ancestor` is on `p`'s chain of nearest prompt ancestors.
fn descends(follows: &[Option<usize>], p: usize, ancestor: usize) -> bool {
    let mut cur = follows[p];
    // Bounded: a damaged file's parent cycle must not loop forever.
    for _ in 0..follows.len() {
        match cur {
            Some(q) if q == ancestor => return true,
            Some(q) => cur = follows[q],
            None => return false,
        }
    }
    false
}

/// The prompt on `prev`'s branch closest below the fork with `new`'s branch.
fn replaced(t: &Transcript, new: usize, prev: usize, prompt_of: &[Option<usize>]) -> Option<usize> {
    let above_new: HashSet<usize> = t.ancestor_indices(new).into_iter().collect();
    let mut last = prompt_of[prev];
    for i in t.ancestor_indices(prev) {
        if above_new.contains(&i) {
            break;
        }
        if let Some(p) = prompt_of[i] {
            last = Some(p);
        }
    }
    last
}

/// The prompt's text and slash command, or `None` when message `i` is not
/// a human prompt.
fn prompt_text(t: &Transcript, i: usize, m: &Message) -> Option<(String, Option<String>)> {
    let candidate = m.kind == MessageKind::User
        && !m.sidechain
        && !m.meta
        && !m.compact_summary
        && m.tool_result_ids.is_empty()
        && (!m.text.trim().is_empty() || m.images > 0);
    if !candidate {
        return None;
    }
    let start = m.text.trim_start();
    if NOT_PROMPTS.iter().any(|p| start.starts_with(p)) {
        return None;
    }
    if start.starts_with("<command-name>") || start.starts_with("<command-message>") {
        if !answered(t, i) {
            return None;
        }
        let name = tag(start, "command-name").unwrap_or_default().trim();
        let name = if name.starts_with('/') { name.to_owned() } else { format!("/{name}") };
        let args = tag(start, "command-args").unwrap_or_default().trim();
        let text = if args.is_empty() { name.clone() } else { format!("{name} {args}") };
        return Some((text, Some(name)));
    }
    Some((m.text.clone(), None))
}

/// Whether an assistant line is reachable from message `i` through lines
/// that only carry the command along (progress, attachments, system lines,
/// `isMeta` expansions).
fn answered(t: &Transcript, i: usize) -> bool {
    let mut seen = HashSet::from([i]);
    let mut todo = vec![i];
    while let Some(n) = todo.pop() {
        for &c in &t.children[n] {
            let m = &t.messages[c];
            let passes = match m.kind {
                MessageKind::Assistant => return true,
                MessageKind::User => m.meta,
                MessageKind::Progress(_) | MessageKind::Attachment | MessageKind::System(_) => true,
                MessageKind::Other(_) => false,
            };
            if passes && seen.insert(c) {
                todo.push(c);
            }
        }
    }
    false
}

/// The text between `<name>` and `</name>`.
fn tag<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let from = text.find(&open)? + open.len();
    let len = text[from..].find(&close)?;
    Some(&text[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use crate::test_support::jsonl;
    use serde_json::{Value, json};

    fn user(uuid: &str, parent: Option<&str>, content: Value) -> Value {
        json!({"type":"user","uuid":uuid,"parentUuid":parent,"message":{"role":"user","content":content}})
    }

    fn answer(uuid: &str, parent: &str) -> Value {
        json!({"type":"assistant","uuid":uuid,"parentUuid":parent,"message":{"id":format!("m{uuid}"),"content":[{"type":"text","text":"ok"}]}})
    }

    /// (kind, follows, replaces) of each prompt.
    fn kinds(records: &[Value]) -> Vec<(PromptKind, Option<usize>, Option<usize>)> {
        parse(&jsonl(records)).prompts().iter().map(|p| (p.kind, p.follows, p.replaces)).collect()
    }

    use PromptKind::{Backtrack, Pivot, Refine, Root};

    #[test]
    fn follow_ups_refine_the_previous_prompt() {
        let got = kinds(&[
            user("u1", None, json!("one")),
            answer("a1", "u1"),
            user("u2", Some("a1"), json!([{"type":"text","text":"two"}])),
            answer("a2", "u2"),
            user("u3", Some("a2"), json!("three")),
        ]);
        assert_eq!(got, vec![(Root, None, None), (Refine, Some(0), None), (Refine, Some(1), None)]);
    }

    #[test]
    fn rewinding_to_an_earlier_turn_is_a_backtrack() {
        let got = kinds(&[
            user("u1", None, json!("one")),
            answer("a1", "u1"),
            user("u2", Some("a1"), json!("two")),
            answer("a2", "u2"),
            user("u3", Some("a2"), json!("three")),
            answer("a3", "u3"),
            // Edited "two" and resent: forks under a1.
            user("u2b", Some("a1"), json!("two, differently")),
            answer("a2b", "u2b"),
            user("u4", Some("a2b"), json!("four")),
        ]);
        assert_eq!(
            got,
            vec![
                (Root, None, None),
                (Refine, Some(0), None),
                (Refine, Some(1), None),
                (Backtrack, Some(0), Some(1)),
                (Refine, Some(3), None),
            ]
        );
    }

    #[test]
    fn editing_the_first_prompt_under_a_hook_line_is_a_backtrack_without_follows() {
        let hook = json!({"type":"progress","uuid":"h","parentUuid":null,"data":{"type":"hook_progress"}});
        let got = kinds(&[
            hook,
            user("u1", Some("h"), json!("one")),
            answer("a1", "u1"),
            user("u1b", Some("h"), json!("one again")),
        ]);
        assert_eq!(got, vec![(Root, None, None), (Backtrack, None, Some(0))]);
    }

    #[test]
    fn a_new_root_chain_is_a_pivot() {
        let got = kinds(&[
            user("u1", None, json!("one")),
            answer("a1", "u1"),
            user("v1", None, json!("something else")),
            answer("b1", "v1"),
            user("v2", Some("b1"), json!("more")),
        ]);
        assert_eq!(got, vec![(Root, None, None), (Pivot, None, None), (Refine, Some(1), None)]);
    }

    #[test]
    fn a_chain_cut_by_a_missing_line_refines_rather_than_pivots() {
        let got = kinds(&[
            user("u1", None, json!("one")),
            answer("a1", "u1"),
            // Its parent "gone" was a skipped line.
            user("u2", Some("gone"), json!("two")),
        ]);
        assert_eq!(got, vec![(Root, None, None), (Refine, Some(0), None)]);
    }

    #[test]
    fn compaction_continues_through_the_logical_parent() {
        let boundary = json!({"type":"system","subtype":"compact_boundary","uuid":"cb","parentUuid":null,"logicalParentUuid":"a1","compactMetadata":{"trigger":"auto","preTokens":5}});
        let summary = json!({"type":"user","uuid":"cs","parentUuid":"cb","isCompactSummary":true,"message":{"content":"This session is being continued…"}});
        let records = [
            user("u1", None, json!("one")),
            answer("a1", "u1"),
            boundary,
            summary,
            user("u2", Some("cs"), json!("go on")),
        ];
        assert_eq!(kinds(&records), vec![(Root, None, None), (Refine, Some(0), None)]);
        let t = parse(&jsonl(&records));
        let c = &t.compactions()[0];
        assert_eq!(
            (c.trigger.as_deref(), c.pre_tokens, c.summary_uuid.as_deref()),
            (Some("auto"), Some(5), Some("cs"))
        );
        assert_eq!(t.parent("cb").map(|m| m.uuid.as_str()), Some("a1"));
    }

    #[test]
    fn injected_and_marker_lines_are_not_prompts() {
        let mut meta = user("m", Some("u1"), json!("expanded command"));
        meta["isMeta"] = json!(true);
        let mut side = user("s", None, json!("task prompt"));
        side["isSidechain"] = json!(true);
        let records = [
            user("u1", None, json!("real")),
            meta,
            side,
            user("r", Some("u1"), json!([{"type":"tool_result","tool_use_id":"t","content":"x"}])),
            user("i", Some("u1"), json!("[Request interrupted by user for tool use]")),
            user("n", Some("u1"), json!("<task-notification>\n<task-id>b7</task-id>")),
            user("sr", Some("u1"), json!("  <system-reminder>hi</system-reminder>")),
            user("o", Some("u1"), json!("<local-command-stdout>done</local-command-stdout>")),
            user("c", Some("u1"), json!("<local-command-caveat>Caveat</local-command-caveat>")),
            user("e", Some("u1"), json!([])),
            user("img", Some("u1"), json!([{"type":"image","source":{}}])),
        ];
        let t = parse(&jsonl(&records));
        let got: Vec<(&str, usize)> = t.prompts().iter().map(|p| (p.uuid.as_str(), p.images)).collect();
        assert_eq!(got, vec![("u1", 0), ("img", 1)]);
    }

    #[test]
    fn slash_commands_count_only_when_the_model_answers() {
        let mut expansion = user("x", Some("c1"), json!("Do the thing"));
        expansion["isMeta"] = json!(true);
        let records = [
            user(
                "c1",
                None,
                json!(
                    "<command-message>review is running…</command-message>\n<command-name>/review</command-name>\n<command-args>src/</command-args>"
                ),
            ),
            expansion,
            answer("a1", "x"),
            user(
                "c2",
                Some("a1"),
                json!(
                    "<command-name>/compact</command-name>\n<command-message>compact</command-message>\n<command-args></command-args>"
                ),
            ),
            user("o2", Some("c2"), json!("<local-command-stdout>Compacted</local-command-stdout>")),
            user(
                "c3",
                Some("o2"),
                json!("<command-message>init is analyzing…</command-message><command-name>init</command-name>"),
            ),
            answer("a3", "c3"),
        ];
        let t = parse(&jsonl(&records));
        let got: Vec<(&str, &str, Option<&str>)> =
            t.prompts().iter().map(|p| (p.uuid.as_str(), p.text.as_str(), p.command.as_deref())).collect();
        assert_eq!(got, vec![("c1", "/review src/", Some("/review")), ("c3", "/init", Some("/init"))]);
    }

    #[test]
    fn a_parent_cycle_ends_the_walk() {
        let records = [
            user("u1", Some("u2"), json!("one")),
            user("u2", Some("u1"), json!("two")),
            user("u3", Some("u3"), json!("three")),
        ];
        let t = parse(&jsonl(&records));
        assert_eq!(t.prompts().len(), 3);
        assert_eq!(t.ancestors("u2").len(), 1);
        assert!(t.ancestors("u3").is_empty());
    }

    #[test]
    fn tag_extracts_between_markers() {
        let t = "<command-message>x</command-message>\n<command-name>/init</command-name><command-args> a b </command-args>";
        assert_eq!(tag(t, "command-name"), Some("/init"));
        assert_eq!(tag(t, "command-args"), Some(" a b "));
        assert_eq!(tag(t, "command-contents"), None);
        assert_eq!(tag("<command-name>/x", "command-name"), None);
    }
}
