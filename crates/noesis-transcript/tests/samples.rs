//! The seven real transcripts in `shared/transcripts/` (see its SOURCES.md),
//! with facts checked against the files by hand and by a Python scan.

use std::collections::BTreeMap;
use std::path::PathBuf;

use noesis_transcript::{AgentKind, Link, Origin, PromptKind, Role, Spawned, Transcript, is_compaction_agent, parse};
use proptest::prelude::*;
use serde_json::Value;

/// S1: Claude Code 1.0.108, inline sidechains.
const S1: &str = "claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl";
/// S2: 1.0.17, and a file holding only its summary.
const S2: &str = "sniffly__ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl";
const S2_SUMMARY: &str = "sniffly__ff71dbed-a4f2-4284-a4fc-fe2fb90de929.jsonl";
/// S3: 2.1.39, two excerpts of the main file, a subagent and a compaction agent.
const S3A: &str = "spotter__ae4a77f8-aedd-4bc1-888f-c94edc91af04.head257.jsonl";
const S3B: &str = "spotter__ae4a77f8-aedd-4bc1-888f-c94edc91af04.lines1479-1608.jsonl";
const S3C: &str = "spotter__ae4a77f8-aedd-4bc1-888f-c94edc91af04__subagents__agent-aac57f5.jsonl";
const S3D: &str = "spotter__ae4a77f8-aedd-4bc1-888f-c94edc91af04__subagents__agent-acompact-946d2b.jsonl";

const S3_TASK: &str = "toolu_01Hf8v1Za7y4af8VUwSR4CXU";
const SPOTTER: &str = "/home/USER/projects/spotter-worktrees/spotter-4te/";

fn bytes(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/transcripts").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sample(name: &str) -> Transcript {
    parse(&bytes(name))
}

fn tools(t: &Transcript) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for c in t.tool_calls() {
        *counts.entry(c.name.as_str()).or_default() += 1;
    }
    counts
}

fn types(t: &Transcript) -> Vec<(&str, usize)> {
    t.record_types().iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

fn kinds(t: &Transcript) -> Vec<PromptKind> {
    t.prompts().iter().map(|p| p.kind).collect()
}

/// Roles with `prefix` cut off the paths.
fn roles(t: &Transcript, prefix: &str) -> Vec<(String, Role)> {
    t.roles().into_iter().map(|(p, r)| (p.strip_prefix(prefix).unwrap_or(&p).to_owned(), r)).collect()
}

fn call_at(t: &Transcript, line: usize) -> &noesis_transcript::ToolCall {
    t.tool_calls().iter().find(|c| c.line == line && c.origin == Origin::Main).unwrap()
}

fn touch_at(t: &Transcript, line: usize) -> &noesis_transcript::FileTouch {
    t.file_touches().iter().find(|f| f.line == line && f.origin == Origin::Main).unwrap()
}

fn input_str<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap()
}

fn error_result_lines(t: &Transcript) -> Vec<usize> {
    t.tool_calls().iter().filter_map(|c| c.result.as_ref().filter(|r| r.is_error).map(|r| r.line)).collect()
}

#[test]
fn no_sample_has_problems() {
    for name in [S1, S2, S2_SUMMARY, S3A, S3B, S3C, S3D] {
        let t = sample(name);
        assert!(t.problems().is_empty(), "{name}: {:?}", t.problems());
        assert!(t.repaired_lines().is_empty(), "{name}");
        // Every tool_use in these files has its result.
        assert!(t.tool_calls().iter().all(|c| c.result.is_some()), "{name}");
    }
}

#[test]
fn s1_envelope_tree_and_prompt() {
    let t = sample(S1);
    assert_eq!(t.records(), 53);
    assert_eq!(types(&t), [("assistant", 28), ("user", 25)]);
    assert_eq!(t.session_id(), Some("5c0375b4-57a5-4f26-b12d-d022ee4e51b7"));
    assert_eq!(
        (t.versions(), t.cwd(), t.git_branch()),
        (&["1.0.108".to_owned()][..], Some("/path/to/Demo"), Some("main"))
    );
    assert_eq!(
        (t.first_timestamp(), t.last_timestamp()),
        (Some("2025-09-07T09:52:03.071Z"), Some("2025-09-07T09:54:26.499Z"))
    );
    assert_eq!(t.messages().len(), 53);
    assert_eq!(t.responses().len(), 20);
    assert_eq!(t.roots().iter().map(|m| m.line).collect::<Vec<_>>(), [1, 16, 26]);
    assert_eq!(t.messages().iter().filter(|m| m.sidechain).count(), 22);
    assert_eq!(t.leaf().map(|m| m.line), Some(53));

    // Line 1 is `/orchestrator` with arguments; line 2 its isMeta expansion.
    assert_eq!(kinds(&t), [PromptKind::Root]);
    let p = &t.prompts()[0];
    assert_eq!((p.line, p.command.as_deref()), (1, Some("/orchestrator")));
    assert_eq!(p.text, "/orchestrator @CLAUDE.md を最新の状態にアップデートしてください");
    assert!(t.messages()[1].meta);
}

#[test]
fn s1_tool_calls_and_inline_sidechains() {
    let t = sample(S1);
    assert_eq!(
        tools(&t),
        BTreeMap::from([
            ("Bash", 5),
            ("Edit", 1),
            ("Glob", 3),
            ("MultiEdit", 1),
            ("Read", 3),
            ("Task", 3),
            ("TodoWrite", 5)
        ])
    );
    assert_eq!(error_result_lines(&t), [15, 33, 46]);
    assert!(t.tool_calls().iter().all(|c| c.prompt == Some(0)));

    // The sidechain roots' first user text is the Task input's prompt.
    let roots: Vec<(usize, Option<usize>)> = t
        .sidechains()
        .iter()
        .map(|s| (s.line, s.spawned_by.as_deref().and_then(|id| t.tool_call(id)).map(|c| c.line)))
        .collect();
    assert_eq!(roots, [(16, Some(13)), (26, Some(25))]);
    assert_eq!(
        call_at(&t, 13).spawned,
        Some(Spawned::Sidechain { root_uuid: "6340ddef-f656-4b72-a065-82390f637678".into(), line: 16 })
    );
    // Line 12's Task failed validation (no prompt) and spawned nothing.
    assert_eq!(call_at(&t, 12).spawned, None);
    assert!(call_at(&t, 12).result.as_ref().unwrap().is_error);

    let inside: Vec<(usize, &str)> =
        t.tool_calls().iter().filter(|c| c.sidechain).map(|c| (c.line, c.parent_call.as_deref().unwrap())).collect();
    let first = "toolu_014YF9TXhDRR7BnpasNJ7gjC";
    let second = "toolu_01LKfUwrsnof18CpWZQcJH44";
    assert_eq!(
        inside,
        [(18, first), (20, first), (28, second), (30, second), (32, second), (34, second), (36, second), (38, second)]
    );
    // Task results are block lists; the text is joined and cut.
    let r = call_at(&t, 13).result.as_ref().unwrap();
    assert_eq!(r.line, 23);
    assert!(r.text.starts_with("## Package.json Analysis Summary"));
}

#[test]
fn s1_failed_edit_changes_nothing() {
    let t = sample(S1);
    let failed = touch_at(&t, 45);
    assert_eq!((failed.tool.as_str(), failed.result_line, failed.succeeded), ("Edit", Some(46), false));
    assert_eq!(failed.content, None);
    assert_eq!(
        roles(&t, "/path/to/Demo/"),
        [("CLAUDE.md".to_owned(), Role::Modified), ("todo-app/package.json".to_owned(), Role::Read)]
    );

    // Up to the refused Edit's result, CLAUDE.md was neither read nor changed.
    let all = bytes(S1);
    let end_of_46 = all.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(45).unwrap().0 + 1;
    let head = parse(&all[..end_of_46]);
    assert!(head.problems().is_empty());
    assert_eq!(roles(&head, "/path/to/Demo/"), [("todo-app/package.json".to_owned(), Role::Read)]);
}

#[test]
fn s1_read_and_multiedit_contents_agree() {
    let t = sample(S1);
    let read = touch_at(&t, 47).content.clone().unwrap();
    assert_eq!(read.chars().count(), 3061);
    let multi = touch_at(&t, 49);
    assert_eq!((multi.tool.as_str(), multi.role, multi.succeeded), ("MultiEdit", Role::Modified, true));
    // The full Read is exactly the file the MultiEdit started from.
    let mut expected = read;
    for e in call_at(&t, 49).input["edits"].as_array().unwrap() {
        expected = expected.replacen(input_str(e, "old_string"), input_str(e, "new_string"), 1);
    }
    assert_eq!(multi.content.as_deref(), Some(expected.as_str()));
    // Both sidechain Reads of package.json saw the whole file.
    assert_eq!(touch_at(&t, 20).content, touch_at(&t, 36).content);
    assert_eq!(touch_at(&t, 20).content.as_ref().map(String::len), Some(592));
}

#[test]
fn s2_prompts_refine_one_chain() {
    let t = sample(S2);
    assert_eq!(t.records(), 76);
    assert_eq!(types(&t), [("assistant", 40), ("user", 36)]);
    assert_eq!((t.versions(), t.git_branch()), (&["1.0.17".to_owned()][..], None));
    assert_eq!(t.responses().len(), 24);
    assert_eq!(t.roots().len(), 1);
    let lines: Vec<usize> = t.prompts().iter().map(|p| p.line).collect();
    assert_eq!(lines, [1, 38, 55, 63, 67, 71]);
    assert_eq!(
        kinds(&t),
        [
            PromptKind::Root,
            PromptKind::Refine,
            PromptKind::Refine,
            PromptKind::Refine,
            PromptKind::Refine,
            PromptKind::Refine
        ]
    );
    let follows: Vec<Option<usize>> = t.prompts().iter().map(|p| p.follows).collect();
    assert_eq!(follows, [None, Some(0), Some(1), Some(2), Some(3), Some(4)]);
    assert_eq!((t.prompts()[0].text.as_str(), t.prompts()[3].text.as_str()), ("/init", "conda activate aie311"));

    let mut per_prompt = [0; 6];
    for c in t.tool_calls() {
        per_prompt[c.prompt.unwrap()] += 1;
    }
    assert_eq!(per_prompt, [16, 7, 3, 1, 1, 2]);
}

#[test]
fn s2_tools_roles_and_the_content_chain() {
    let t = sample(S2);
    assert_eq!(
        tools(&t),
        BTreeMap::from([
            ("Bash", 6),
            ("Edit", 2),
            ("Glob", 12),
            ("LS", 1),
            ("Read", 2),
            ("TodoWrite", 4),
            ("Write", 3)
        ])
    );
    assert!(error_result_lines(&t).is_empty());
    assert_eq!(
        roles(&t, "/Users/chip/dev/ai-music/"),
        [
            (".gitignore".to_owned(), Role::Read),
            ("CLAUDE.md".to_owned(), Role::Created),
            ("README.md".to_owned(), Role::Read),
            ("ai_music.py".to_owned(), Role::Created),
            ("requirements.txt".to_owned(), Role::Created),
        ]
    );
    // Write → Edit → Edit on CLAUDE.md: each Edit's originalFile is the
    // previous content, so the contents chain exactly.
    let written = touch_at(&t, 35).content.clone().unwrap();
    assert_eq!(written, input_str(&call_at(&t, 35).input, "content"));
    let mut expected = written;
    for line in [52, 60] {
        let input = &call_at(&t, line).input;
        expected = expected.replacen(input_str(input, "old_string"), input_str(input, "new_string"), 1);
        assert_eq!(touch_at(&t, line).content.as_deref(), Some(expected.as_str()), "line {line}");
    }
}

#[test]
fn s2_summary_lives_in_another_file() {
    let summary_file = sample(S2_SUMMARY);
    assert_eq!((summary_file.records(), summary_file.messages().len(), summary_file.prompts().len()), (1, 0, 0));
    assert!(summary_file.session_ids().is_empty());
    let s = &summary_file.summaries()[0];
    assert_eq!(
        (s.text.as_str(), s.leaf_uuid.as_str()),
        ("AI Music Generation from Word Embeddings", "4c7d4d5a-7dd4-428c-bd81-077617558182")
    );
    assert_eq!(summary_file.find_summary(summary_file.summaries()), None);

    let session = sample(S2);
    assert!(session.summaries().is_empty());
    assert_eq!(session.find_summary(summary_file.summaries()), Some(s));
    // The leaf is line 54, not the session's last line: it went on after.
    assert_eq!(session.message(&s.leaf_uuid).map(|m| m.line), Some(54));
    assert_eq!(session.leaf().map(|m| m.line), Some(76));
}

#[test]
fn s3a_progress_tree_and_tools() {
    let t = sample(S3A);
    assert_eq!(t.records(), 257);
    assert_eq!(types(&t), [("assistant", 54), ("file-history-snapshot", 5), ("progress", 166), ("user", 32)]);
    assert_eq!(t.messages().len(), 252);
    assert_eq!(t.responses().len(), 23);
    assert_eq!(t.roots().iter().map(|m| m.line).collect::<Vec<_>>(), [3]);
    assert_eq!(t.git_branch(), Some("spotter-4te"));
    // The prompt hangs off a SessionStart hook line; line 102 is a skill's isMeta text.
    assert_eq!(kinds(&t), [PromptKind::Root]);
    assert_eq!(t.prompts()[0].line, 7);
    assert!(t.prompts()[0].text.starts_with("Work on bead spotter-4te."));
    assert!(t.messages().iter().any(|m| m.line == 102 && m.meta));
    assert_eq!(
        tools(&t),
        BTreeMap::from([
            ("Bash", 15),
            ("Edit", 2),
            ("Read", 7),
            ("Skill", 1),
            ("Task", 1),
            ("WebFetch", 3),
            ("Write", 1)
        ])
    );
    assert!(error_result_lines(&t).is_empty());
    assert!(t.tool_calls().iter().all(|c| c.prompt == Some(0) && !c.sidechain));
    let task = call_at(&t, 71);
    assert_eq!((task.id.as_str(), task.agent_id.as_deref()), (S3_TASK, Some("aac57f5")));
    assert_eq!(task.result.as_ref().map(|r| r.line), Some(99));
}

#[test]
fn s3a_files() {
    let t = sample(S3A);
    assert_eq!(
        roles(&t, SPOTTER),
        [
            ("config/config.exs".to_owned(), Role::Read),
            ("config/dev.exs".to_owned(), Role::Read),
            ("config/runtime.exs".to_owned(), Role::Read),
            ("config/test.exs".to_owned(), Role::Read),
            ("deps/opentelemetry_bandit/lib/opentelemetry_bandit.ex".to_owned(), Role::Read),
            ("lib/spotter/application.ex".to_owned(), Role::Modified),
            ("lib/spotter/telemetry/otel.ex".to_owned(), Role::Created),
            ("mix.exs".to_owned(), Role::Modified),
        ]
    );
    // A Read with `limit: 100` of a 504-line file is not the file.
    assert_eq!(touch_at(&t, 226).content, None);
    // The full Reads are what the Edits started from.
    for (read, edit) in [(45, 129), (49, 165)] {
        let input = &call_at(&t, edit).input;
        let before = touch_at(&t, read).content.clone().unwrap();
        let after = before.replacen(input_str(input, "old_string"), input_str(input, "new_string"), 1);
        assert_eq!(touch_at(&t, edit).content.as_deref(), Some(after.as_str()), "edit at {edit}");
    }
    let write = touch_at(&t, 152);
    assert_eq!(
        (write.role, write.role_inferred, write.content.as_ref().map(String::len)),
        (Role::Created, false, Some(1762))
    );
}

#[test]
fn s3c_subagent_alone_then_attached_by_agent_id() {
    let sub = sample(S3C);
    assert_eq!(sub.records(), 40);
    assert_eq!(types(&sub), [("assistant", 15), ("progress", 12), ("user", 13)]);
    assert_eq!(sub.agent_id(), Some("aac57f5"));
    assert_eq!(sub.session_id(), Some("ae4a77f8-aedd-4bc1-888f-c94edc91af04"));
    assert!(sub.messages().iter().all(|m| m.sidechain));
    assert!(sub.prompts().is_empty());
    assert_eq!(sub.sidechains().iter().map(|s| s.line).collect::<Vec<_>>(), [1]);
    assert_eq!(tools(&sub), BTreeMap::from([("WebFetch", 6), ("WebSearch", 6)]));
    assert!(sub.tool_calls().iter().all(|c| c.sidechain && c.prompt.is_none()));

    let mut main = sample(S3A);
    let attached = main.attach_subagent("aac57f5", None, sub);
    assert_eq!(
        (attached.kind, &attached.link, attached.spawned_by.as_deref()),
        (AgentKind::Task, &Link::AgentId, Some(S3_TASK))
    );
    assert_eq!(main.tool_calls().len(), 42);
    assert_eq!(main.tool_call(S3_TASK).unwrap().spawned, Some(Spawned::Subagent { agent_id: "aac57f5".into() }));
    let merged: Vec<_> = main.tool_calls().iter().filter(|c| c.origin == Origin::Subagent("aac57f5".into())).collect();
    assert_eq!(merged.len(), 12);
    assert!(merged.iter().all(|c| c.prompt == Some(0) && c.sidechain && c.parent_call.as_deref() == Some(S3_TASK)));
    assert_eq!(main.subagents().len(), 1);
}

#[test]
fn s3c_attaches_by_meta_or_prompt_when_the_id_is_unknown() {
    let mut main = sample(S3A);
    let link = main.attach_subagent("from-meta", Some(S3_TASK), sample(S3C)).link.clone();
    assert_eq!(link, Link::MetaToolUseId);

    let mut main = sample(S3A);
    let attached = main.attach_subagent("renamed", None, sample(S3C));
    assert_eq!((&attached.link, attached.spawned_by.as_deref()), (&Link::Prompt, Some(S3_TASK)));

    // The subagent belongs to another session: nothing matches.
    let mut other = sample(S1);
    let attached = other.attach_subagent("aac57f5", None, sample(S3C));
    assert_eq!((&attached.link, attached.spawned_by.as_deref()), (&Link::Unmatched, None));
    assert_eq!(other.tool_calls().len(), 21);
}

#[test]
fn s3b_compaction_window() {
    let t = sample(S3B);
    assert_eq!(t.records(), 130);
    assert_eq!(
        types(&t),
        [("assistant", 23), ("file-history-snapshot", 3), ("progress", 84), ("system", 1), ("user", 19)]
    );
    assert_eq!(t.messages().len(), 127);
    assert_eq!(t.responses().len(), 12);
    // The /compact echo (lines 5–6) is older than the boundary at line 3.
    assert_eq!(
        (t.first_timestamp(), t.last_timestamp()),
        (Some("2026-02-12T14:47:08.766Z"), Some("2026-02-12T14:52:46.508Z"))
    );
    // The boundary's logical parent is outside the excerpt: it is a root.
    assert_eq!(t.roots().iter().map(|m| m.line).collect::<Vec<_>>(), [3]);
    let c = &t.compactions()[0];
    assert_eq!(t.compactions().len(), 1);
    assert_eq!((c.line, c.trigger.as_deref(), c.pre_tokens), (3, Some("manual"), Some(142_431)));
    assert_eq!(c.logical_parent_uuid.as_deref(), Some("23b73f9a-2123-4b8e-81a2-b98378c7498f"));
    assert_eq!(c.summary_uuid.as_deref(), Some("94000b8f-fa9f-4b7b-8d81-cdc73aa8a085"));
    // Neither the compact summary, the caveat, `/compact` nor its output is a prompt.
    assert_eq!(
        t.prompts().iter().map(|p| (p.line, p.kind, p.text.as_str())).collect::<Vec<_>>(),
        [(13, PromptKind::Root, "continue implementation")]
    );
    assert_eq!(tools(&t), BTreeMap::from([("Bash", 13), ("Read", 1)]));
    assert!(t.tool_calls().iter().all(|c| c.prompt == Some(0)));
    assert_eq!(roles(&t, SPOTTER), [("mix.exs".to_owned(), Role::Read)]);
    assert_eq!(touch_at(&t, 50).content, None, "offset 1, limit 30 of 99 lines");
}

#[test]
fn s3d_compaction_agent_is_recognised() {
    let agent = sample(S3D);
    assert_eq!((agent.records(), agent.messages().len(), agent.prompts().len()), (2, 2, 0));
    assert_eq!(agent.agent_id(), Some("acompact-946d2b"));
    assert!(is_compaction_agent("acompact-946d2b") && !is_compaction_agent("aac57f5"));
    // Its first parent is the boundary's logical parent, in the main file.
    assert_eq!(agent.messages()[0].parent_uuid.as_deref(), Some("23b73f9a-2123-4b8e-81a2-b98378c7498f"));

    let mut main = sample(S3B);
    let attached = main.attach_subagent("acompact-946d2b", None, agent.clone());
    assert_eq!(attached.kind, AgentKind::Compaction);
    assert_eq!(attached.link, Link::CompactBoundary("434dc859-6299-4713-8613-d28662692f06".into()));
    assert_eq!(attached.spawned_by, None);
    assert_eq!(main.compactions()[0].agent_id.as_deref(), Some("acompact-946d2b"));
    assert_eq!(main.tool_calls().len(), 14);

    // In the excerpt without the boundary it is still compaction, unmatched.
    let mut head = sample(S3A);
    let attached = head.attach_subagent("acompact-946d2b", None, agent);
    assert_eq!((attached.kind, &attached.link), (AgentKind::Compaction, &Link::Unmatched));
    assert_eq!(head.tool_calls().len(), 30);
}

#[test]
fn truncated_last_line_is_one_problem() {
    let all = bytes(S1);
    let last_start = all[..all.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let cut = last_start + (all.len() - last_start) / 2;
    let t = parse(&all[..cut]);
    assert_eq!(t.problems().len(), 1);
    assert_eq!(t.problems()[0].line, 53);
    assert!(t.problems()[0].reason.starts_with("truncated record"), "{}", t.problems()[0].reason);
    assert_eq!((t.records(), t.tool_calls().len(), t.prompts().len()), (52, 21, 1));
}

#[test]
fn corrupt_middle_line_is_reported_and_the_rest_parses() {
    let text = String::from_utf8(bytes(S2)).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // Line 30 is the assistant line with the Read of .gitignore.
    assert!(lines[29].contains("\"name\":\"Read\""));
    lines[29] = "{\"type\":\"assistant\",\"uuid\":\"a89e293b-\u{0}garbage";
    let t = parse(lines.join("\n").as_bytes());
    assert_eq!(t.problems().iter().map(|p| p.line).collect::<Vec<_>>(), [30]);
    assert_eq!((t.records(), t.tool_calls().len()), (75, 29));
    assert!(!t.roles().contains_key("/Users/chip/dev/ai-music/.gitignore"));
    assert_eq!(t.roles().get("/Users/chip/dev/ai-music/ai_music.py"), Some(&Role::Created));
    // The chain is cut at line 31, but the prompts after it still refine.
    assert_eq!(t.prompts().len(), 6);
    assert!(kinds(&t)[1..].iter().all(|k| *k == PromptKind::Refine));
    let whole = sample(S2);
    let before: Vec<Option<usize>> = whole.tool_calls().iter().filter(|c| c.line != 30).map(|c| c.prompt).collect();
    let after: Vec<Option<usize>> = t.tool_calls().iter().map(|c| c.prompt).collect();
    assert_eq!(before, after);
}

#[test]
fn crlf_and_bom_change_nothing() {
    let plain = sample(S3A);
    let mut dos = b"\xEF\xBB\xBF".to_vec();
    dos.extend(String::from_utf8(bytes(S3A)).unwrap().replace('\n', "\r\n").into_bytes());
    let t = parse(&dos);
    assert!(t.problems().is_empty());
    assert_eq!((t.records(), t.prompts(), t.tool_calls()), (plain.records(), plain.prompts(), plain.tool_calls()));
    assert_eq!(t.file_touches(), plain.file_touches());
}

proptest! {
    /// Cutting a sample anywhere loses at most the line that was cut.
    #[test]
    fn prop_cut_sample_loses_only_the_cut_line(at in 0usize..125_342) {
        let all = bytes(S1);
        let cut = at.min(all.len());
        let t = parse(&all[..cut]);
        let complete = all[..cut].iter().filter(|&&b| b == b'\n').count();
        let in_line = cut > 0 && all[cut - 1] != b'\n';
        let mid_line = in_line && all.get(cut) != Some(&b'\n');
        let tail_whole = in_line && all.get(cut) == Some(&b'\n');
        prop_assert_eq!(t.records(), complete + usize::from(tail_whole));
        prop_assert_eq!(t.problems().len(), usize::from(mid_line));
        if mid_line {
            prop_assert_eq!(t.problems()[0].line, complete + 1);
        }
    }
}
