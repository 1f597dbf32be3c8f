//! Frames and sessions as text for a person (the CLI's output) and frame
//! trees as nested JSON: pure functions of the values, no I/O.

use serde_json::Value;

use crate::session::{PromptChange, SessionDiff};
use crate::{CausalFrame, Evidence, FileRole, FrameId, FrameTree, Invalidation, SessionArtifacts, SessionLink};

/// `text` on one line (runs of white space become one space), cut to
/// `width` characters with `…` when longer.
pub fn one_line(text: &str, width: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// The header of [`table`]'s columns.
fn header() -> String {
    format!("{:<36}  {:<11}  {:<4}  {:>5}  QUERY\n", "FRAME", "STATUS", "CONF", "DEPTH")
}

/// One frame as a table row: id, status, confidence, depth, query.
pub fn row(f: &CausalFrame) -> String {
    format!("{}  {:<11}  {:.2}  {:>5}  {}", f.frame_id, f.status, f.confidence, f.depth, one_line(&f.query, 70))
}

/// Frames as a table with a header, one row each.
pub fn table(frames: &[CausalFrame]) -> String {
    let mut text = header();
    for f in frames {
        text.push_str(&row(f));
        text.push('\n');
    }
    text
}

/// Nested JSON; past `MAX_NEST` levels `children` stays a list of ids, so a
/// very deep chain cannot exhaust the stack.
const MAX_NEST: usize = 256;

/// `f` as JSON whose `children` holds the child frames, nested.
pub fn nested(tree: &FrameTree, f: &CausalFrame) -> Value {
    nested_at(tree, f, 0)
}

fn nested_at(tree: &FrameTree, f: &CausalFrame, level: usize) -> Value {
    let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
    if level < MAX_NEST {
        let kids: Vec<Value> =
            f.children.iter().filter_map(|c| tree.get(c)).map(|c| nested_at(tree, c, level + 1)).collect();
        v["children"] = Value::Array(kids);
    }
    v
}

/// The frames under `root` as box-drawing lines, appended to `out`,
/// iteratively (any depth); indentation stops growing after 64 levels.
pub fn draw(tree: &FrameTree, root: &CausalFrame, out: &mut String) {
    let mut stack: Vec<(&CausalFrame, String, bool, bool)> = vec![(root, String::new(), true, true)];
    while let Some((f, prefix, last, top)) = stack.pop() {
        let (branch, next) = match (top, last) {
            (true, _) => ("", String::new()),
            (false, true) => ("└── ", format!("{prefix}    ")),
            (false, false) => ("├── ", format!("{prefix}│   ")),
        };
        let next = if next.chars().count() > 4 * 64 { prefix.clone() } else { next };
        let pivot = f.branched_from.as_ref().map(|b| format!("  ⤷ from {b}")).unwrap_or_default();
        out.push_str(&format!(
            "{prefix}{branch}{} {} {:.2} {}{pivot}\n",
            f.frame_id,
            f.status,
            f.confidence,
            one_line(&f.query, 60)
        ));
        let kids: Vec<&CausalFrame> = f.children.iter().filter_map(|c| tree.get(c)).collect();
        for (i, k) in kids.iter().enumerate().rev() {
            stack.push((k, next.clone(), i + 1 == kids.len(), false));
        }
    }
}

/// One frame in full: evidence, condition, status history.
pub fn describe(f: &CausalFrame) -> String {
    let mut s = format!("frame       {}\n", f.frame_id);
    s += &format!("status      {}\n", f.status);
    s += &format!("query       {}\n", f.query);
    s += &format!("conclusion  {}\n", f.conclusion);
    s += &format!("confidence  {:.2}\n", f.confidence);
    if let Some(model) = serde_json::from_str::<Value>(&f.context_slice)
        .ok()
        .and_then(|c| c.get("model").and_then(|m| m.as_str().map(str::to_owned)))
    {
        let made_up = if f.is_fabricated() { " (made up by the test model: never evidence)" } else { "" };
        s += &format!("model       {model}{made_up}\n");
    }
    s += &format!("depth       {}\n", f.depth);
    if let Some(p) = &f.parent_id {
        s += &format!("parent      {p}\n");
    }
    if let Some(b) = &f.branched_from {
        s += &format!("branched    from {b}\n");
    }
    if let Some(sess) = &f.session_id {
        s += &format!("session     {sess}\n");
    }
    s += &format!("project     {}\n", f.project_id);
    s += &format!("created     {}\n", f.timestamps.created_at);
    if !f.children.is_empty() {
        s += &format!("children    {}\n", f.children.iter().map(FrameId::as_str).collect::<Vec<_>>().join(", "));
    }
    if !f.evidence.is_empty() {
        s += "evidence\n";
        for e in &f.evidence {
            s += &match e {
                Evidence::File { path, hash } => {
                    format!("  file        {path}  blake3:{}\n", &hash[..hash.len().min(16)])
                }
                Evidence::Frame { frame_id } => format!("  frame       {frame_id}\n"),
                Evidence::Observation { tool, content } => format!("  observation {tool}: {}\n", one_line(content, 60)),
            };
        }
    }
    let c = &f.invalidation_condition;
    s += "invalid when\n";
    for r in &c.files {
        s += &format!("  file changes   {}\n", r.path);
    }
    for d in &c.frames {
        s += &format!("  frame invalid  {d}\n");
    }
    if let Some(at) = c.expires_at {
        s += &format!("  time passes    {at}\n");
    }
    if let Some(n) = &c.note {
        s += &format!("  note           {n}\n");
    }
    if c.files.is_empty() && c.frames.is_empty() && c.expires_at.is_none() {
        s += "  (nothing checked by machine)\n";
    }
    s += "history\n";
    for h in &f.timestamps.history {
        let why = h.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default();
        s += &format!("  {}  {}{why}\n", h.at, h.status);
    }
    s
}

/// A title line, then one indented line per frame invalidated and why.
pub fn invalidations(title: &str, hit: &[Invalidation]) -> String {
    let mut text = format!("{title}\n");
    for i in hit {
        text.push_str(&format!("  {}  {}\n", i.frame_id, i.reason));
    }
    text
}

fn list_paths(title: &str, paths: &[String], text: &mut String) {
    text.push_str(&format!("{title} ({})\n", paths.len()));
    for p in paths {
        text.push_str(&format!("  {p}\n"));
    }
}

/// What changed since the previous session: prompt, files, the frames
/// invalidated and the suspended frames that can resume, appended to `text`.
pub fn session_diff(diff: &SessionDiff, invalidated: &[Invalidation], resumable: &[CausalFrame], text: &mut String) {
    text.push_str(&match &diff.prompt {
        PromptChange::First => "prompt: first session of this project\n".to_owned(),
        PromptChange::Same => "prompt: same as the previous session\n".to_owned(),
        PromptChange::New { previous, .. } => {
            format!("prompt: new (was {})\n", previous.as_deref().map_or("none".to_owned(), |p| format!("{p:?}")))
        }
    });
    list_paths("changed", &diff.files.changed, text);
    list_paths("added", &diff.files.added, text);
    list_paths("removed", &diff.files.removed, text);
    text.push_str(&format!("unchanged: {}\n", diff.files.unchanged));
    text.push_str(&format!("invalidated ({})\n", invalidated.len()));
    for i in invalidated {
        text.push_str(&format!("  {}  {}\n", i.frame_id, i.reason));
    }
    text.push_str(&format!("resumable ({})\n", resumable.len()));
    for f in resumable {
        text.push_str(&format!("  {}  {}\n", f.frame_id, f.query.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
}

/// An imported session: its transcript, its files by role and how many
/// frames it has.
pub fn imported_session(s: &SessionArtifacts, frames: usize) -> String {
    let count = |r: FileRole| s.files.values().filter(|e| e.role == r).count();
    let mut text = format!("session {}\n", s.session_id);
    text.push_str(&format!("transcript {}\n", s.conversation_log.as_deref().unwrap_or("?")));
    text.push_str(&format!(
        "files: {} ({} read, {} modified, {} created)\n",
        s.files.len(),
        count(FileRole::Read),
        count(FileRole::Modified),
        count(FileRole::Created)
    ));
    for (p, e) in &s.files {
        text.push_str(&format!("  {:<8} {p}\n", e.role.as_str()));
    }
    text.push_str(&format!("frames: {frames}\n"));
    text
}

/// Session links, one a line: the two sessions, when, and why.
pub fn links(links: &[SessionLink]) -> String {
    let mut text = String::new();
    for l in links {
        text.push_str(&format!(
            "{} {} {}{}\n",
            l.a,
            l.b,
            l.created_at,
            l.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Draft, Timestamp, refine};

    #[test]
    fn one_line_flattens_and_cuts_by_characters() {
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(one_line("ééééé", 5), "ééééé");
        assert_eq!(one_line("ééééé", 4), "ééé…");
        assert_eq!(one_line("abc", 0), "…");
    }

    /// A root and one child, in a tree.
    fn frames() -> (FrameTree, FrameId, FrameId) {
        let now = Timestamp::from_millis(0);
        let mut tree = FrameTree::new();
        let top = Draft::new("why\nis it slow?").into_frame("p", None, None, now).unwrap();
        let top_id = top.frame_id.clone();
        tree.insert(top).unwrap();
        let change = refine(tree.get(&top_id).unwrap(), Draft::new("the cache"), now).unwrap();
        let kid = change.frames[0].frame_id.clone();
        tree.apply(&change).unwrap();
        (tree, top_id, kid)
    }

    #[test]
    fn a_tree_draws_children_under_their_parent() {
        let (tree, top, kid) = frames();
        let mut out = String::new();
        draw(&tree, tree.get(&top).unwrap(), &mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].starts_with(&format!("{top} ")) && lines[0].ends_with("why is it slow?"));
        assert!(lines[1].starts_with(&format!("└── {kid} ")), "{out}");
        let v = nested(&tree, tree.get(&top).unwrap());
        assert_eq!(v["children"][0]["frame_id"], kid.as_str());
        assert_eq!(v["children"][0]["children"], Value::Array(Vec::new()));
    }

    #[test]
    fn a_table_has_a_header_and_a_row_a_frame() {
        let (tree, top, kid) = frames();
        let t = table(&[tree.get(&top).unwrap().clone(), tree.get(&kid).unwrap().clone()]);
        assert!(t.starts_with("FRAME "), "{t}");
        assert_eq!(t.lines().count(), 3);
    }

    #[test]
    fn describe_says_when_nothing_is_checked_by_machine() {
        let (tree, top, _) = frames();
        let d = describe(tree.get(&top).unwrap());
        assert!(d.starts_with(&format!("frame       {top}\n")), "{d}");
        assert!(d.contains("query       why\nis it slow?\n"), "{d}");
        assert!(d.contains("invalid when\n  (nothing checked by machine)\nhistory\n"), "{d}");
    }

    #[test]
    fn invalidations_list_under_their_title() {
        assert_eq!(invalidations("none", &[]), "none\n");
    }
}
