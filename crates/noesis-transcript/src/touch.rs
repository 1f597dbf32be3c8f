//! What file tools did to files, and the file's whole content afterwards
//! when the transcript shows it exactly.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::tools::{Origin, ToolCall};

/// What a call did to a file. Ordered: a later role outranks an earlier one
/// in [`Transcript::roles`](crate::Transcript::roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read it.
    Read,
    /// Changed an existing file.
    Modified,
    /// Created it.
    Created,
}

/// One file tool call (`Read`, `Write`, `Edit`, `MultiEdit`, `NotebookEdit`).
///
/// `Write` is [`Role::Created`] or [`Role::Modified`] as its
/// `toolUseResult.type` says (`create`/`update`); without one (subagent
/// files carry no `toolUseResult`) it is `Created` unless an earlier
/// successful call touched the path, and `role_inferred` is set. `Edit` and
/// `MultiEdit` are `Modified`, except an edit with an empty `old_string` on
/// a file with no original content and no earlier touch, which is how
/// Claude Code creates a file by edit (`Created`, inferred).
/// `NotebookEdit` is `Modified`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTouch {
    /// The path as the tool input wrote it (absolute in every sample).
    pub path: String,
    /// What the call did, had it succeeded.
    pub role: Role,
    /// Whether `role` was inferred from earlier calls rather than stated.
    pub role_inferred: bool,
    /// The tool's name.
    pub tool: String,
    /// The call's `tool_use` id.
    pub tool_use_id: String,
    /// The line of the `tool_use` (in the file of `origin`).
    pub line: usize,
    /// The line of its result.
    pub result_line: Option<usize>,
    /// Whether the call has a result that is not an error. A failed call
    /// changed nothing.
    pub succeeded: bool,
    /// The whole file after the call, when the transcript shows it exactly:
    /// a `Write`'s content; a `Read` of every line (none cut at 2000
    /// characters); an `Edit`/`MultiEdit` applied to the original content in
    /// `toolUseResult`, each `old_string` found once (or `replace_all`), the
    /// result agreeing with `structuredPatch`. `None` otherwise, and always
    /// for a failed call.
    pub content: Option<String>,
    /// Which file the call came from.
    pub origin: Origin,
}

/// Claude Code's Read cuts lines longer than this many characters, so a read
/// with such a line may not be the file.
const READ_LINE_LIMIT: usize = 2000;

struct Edit<'a> {
    old: &'a str,
    new: &'a str,
    all: bool,
}

/// The touches of `calls`, given each call's `toolUseResult` by id.
pub(crate) fn touches(calls: &[ToolCall], results: &HashMap<String, Value>) -> Vec<FileTouch> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for call in calls {
        if let Some(t) = touch(call, results.get(&call.id), &seen) {
            if t.succeeded {
                seen.insert(t.path.clone());
            }
            out.push(t);
        }
    }
    out
}

fn touch(call: &ToolCall, tur: Option<&Value>, seen: &HashSet<String>) -> Option<FileTouch> {
    let input = &call.input;
    let key = if call.name == "NotebookEdit" { "notebook_path" } else { "file_path" };
    let path = str_of(input, key)?;
    let ok = call.succeeded();
    let (role, role_inferred, content) = match call.name.as_str() {
        "Read" => (Role::Read, false, full_read(tur)),
        "Write" => {
            let (role, inferred) = match tur.and_then(|t| str_of(t, "type")) {
                Some("create") => (Role::Created, false),
                Some("update") => (Role::Modified, false),
                _ if seen.contains(path) => (Role::Modified, true),
                _ => (Role::Created, true),
            };
            let written = str_of(input, "content");
            let reported = tur.and_then(|t| str_of(t, "content"));
            let content = written.filter(|w| reported.is_none_or(|r| r == *w)).map(str::to_owned);
            (role, inferred, content)
        }
        "Edit" | "MultiEdit" => {
            let (original_key, edits) = if call.name == "Edit" {
                ("originalFile", single_edit(input, tur))
            } else {
                ("originalFileContents", multi_edit(input, tur))
            };
            let original = tur.and_then(|t| t.get(original_key)).and_then(Value::as_str);
            let creates = edits.first().is_some_and(|e| e.old.is_empty())
                && original.is_none_or(str::is_empty)
                && !seen.contains(path);
            let role = if creates { Role::Created } else { Role::Modified };
            let content = tur.and_then(|t| edited(t, original, &edits, creates));
            (role, creates, content)
        }
        "NotebookEdit" => (Role::Modified, false, None),
        _ => return None,
    };
    Some(FileTouch {
        path: path.to_owned(),
        role,
        role_inferred,
        tool: call.name.clone(),
        tool_use_id: call.id.clone(),
        line: call.line,
        result_line: call.result.as_ref().map(|r| r.line),
        succeeded: ok,
        content: content.filter(|_| ok),
        origin: call.origin.clone(),
    })
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A Read's `toolUseResult.file.content` when it starts at line 1 and has
/// every line.
fn full_read(tur: Option<&Value>) -> Option<String> {
    let tur = tur?;
    if str_of(tur, "type").is_some_and(|t| t != "text") {
        return None;
    }
    let file = tur.get("file")?;
    let content = str_of(file, "content")?;
    let number = |k| file.get(k).and_then(Value::as_u64);
    let whole =
        number("startLine") == Some(1) && number("numLines").is_some() && number("numLines") == number("totalLines");
    let uncut = content.lines().all(|l| l.len() < READ_LINE_LIMIT || l.chars().count() < READ_LINE_LIMIT);
    (whole && uncut).then(|| content.to_owned())
}

fn single_edit<'a>(input: &'a Value, tur: Option<&'a Value>) -> Vec<Edit<'a>> {
    // The result's strings are what was applied; the input is what was asked.
    let pick = |result_key, input_key| tur.and_then(|t| str_of(t, result_key)).or_else(|| str_of(input, input_key));
    let (Some(old), Some(new)) = (pick("oldString", "old_string"), pick("newString", "new_string")) else {
        return Vec::new();
    };
    let all = tur
        .and_then(|t| t.get("replaceAll"))
        .or_else(|| input.get("replace_all"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![Edit { old, new, all }]
}

fn multi_edit<'a>(input: &'a Value, tur: Option<&'a Value>) -> Vec<Edit<'a>> {
    let list = tur.and_then(|t| t.get("edits")).or_else(|| input.get("edits")).and_then(Value::as_array);
    let mut edits = Vec::new();
    for e in list.into_iter().flatten() {
        let (Some(old), Some(new)) = (str_of(e, "old_string"), str_of(e, "new_string")) else {
            // One unreadable edit makes the whole result unknowable.
            return Vec::new();
        };
        let all = e.get("replace_all").and_then(Value::as_bool).unwrap_or(false);
        edits.push(Edit { old, new, all });
    }
    edits
}

/// The file after `edits`, when it is certain.
fn edited(tur: &Value, original: Option<&str>, edits: &[Edit<'_>], creates: bool) -> Option<String> {
    if edits.is_empty() {
        return None;
    }
    let original = match original {
        Some(o) => o,
        None if creates => "",
        None => return None,
    };
    let mut text = original.to_owned();
    for e in edits {
        text = apply(&text, e)?;
    }
    match tur.get("structuredPatch") {
        Some(Value::Array(hunks)) => patch_agrees(original, &text, hunks).then_some(text),
        // A user who changed the proposed edit leaves only the patch as proof.
        None if tur.get("userModified").and_then(Value::as_bool) != Some(true) => Some(text),
        _ => None,
    }
}

/// One edit as the Edit tool applies it: the old string must occur exactly
/// once unless every occurrence is replaced; an empty old string only fills
/// an empty file.
fn apply(text: &str, e: &Edit<'_>) -> Option<String> {
    if e.old.is_empty() {
        return text.is_empty().then(|| e.new.to_owned());
    }
    match text.matches(e.old).count() {
        0 => None,
        _ if e.all => Some(text.replace(e.old, e.new)),
        1 => Some(text.replacen(e.old, e.new, 1)),
        _ => None,
    }
}

/// Whether every hunk's old side is in `old` and its new side in `new` at
/// the lines it names.
fn patch_agrees(old: &str, new: &str, hunks: &[Value]) -> bool {
    let (old_lines, new_lines) = (split_lines(old), split_lines(new));
    hunks.iter().all(|h| hunk_agrees(h, &old_lines, &new_lines).unwrap_or(false))
}

fn hunk_agrees(hunk: &Value, old_lines: &[&str], new_lines: &[&str]) -> Option<bool> {
    let (mut minus, mut plus) = (Vec::new(), Vec::new());
    for line in hunk.get("lines")?.as_array()? {
        let line = line.as_str()?;
        let body = line.get(1..)?;
        match line.as_bytes().first()? {
            b' ' => {
                minus.push(body);
                plus.push(body);
            }
            b'-' => minus.push(body),
            b'+' => plus.push(body),
            // "\ No newline at end of file"
            b'\\' => {}
            _ => return None,
        }
    }
    let start = |k| hunk.get(k).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    Some(window(old_lines, start("oldStart")?, &minus) && window(new_lines, start("newStart")?, &plus))
}

fn window(lines: &[&str], start: usize, want: &[&str]) -> bool {
    if want.is_empty() {
        return true;
    }
    start.checked_sub(1).and_then(|from| lines.get(from..from + want.len())) == Some(want)
}

fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolResult;
    use serde_json::json;

    fn call(name: &str, input: Value, is_error: Option<bool>) -> ToolCall {
        ToolCall {
            id: format!("toolu_{name}"),
            name: name.to_owned(),
            input,
            line: 1,
            uuid: None,
            timestamp: None,
            origin: Origin::Main,
            prompt: None,
            sidechain: false,
            parent_call: None,
            result: is_error.map(|is_error| ToolResult {
                line: 2,
                timestamp: None,
                is_error,
                text: String::new(),
                truncated: false,
                bytes: 0,
            }),
            agent_id: None,
            spawned: None,
        }
    }

    fn one(c: &ToolCall, tur: Value) -> FileTouch {
        let results = HashMap::from([(c.id.clone(), tur)]);
        touches(std::slice::from_ref(c), &results).remove(0)
    }

    #[test]
    fn edit_applies_to_original_and_checks_the_patch() {
        let c = call("Edit", json!({"file_path":"/a","old_string":"b","new_string":"B"}), Some(false));
        let patch = json!([{"oldStart":2,"oldLines":1,"newStart":2,"newLines":1,"lines":["-b","+B"]}]);
        let t = one(&c, json!({"originalFile":"a\nb\nc\n","structuredPatch":patch}));
        assert_eq!((t.role, t.content.as_deref()), (Role::Modified, Some("a\nB\nc\n")));
        let wrong = json!([{"oldStart":1,"oldLines":1,"newStart":1,"newLines":1,"lines":["-b","+B"]}]);
        let t = one(&c, json!({"originalFile":"a\nb\nc\n","structuredPatch":wrong}));
        assert_eq!(t.content, None);
    }

    #[test]
    fn ambiguous_or_missing_old_string_gives_no_content() {
        let c = call("Edit", json!({"file_path":"/a","old_string":"x","new_string":"y"}), Some(false));
        assert_eq!(one(&c, json!({"originalFile":"x x"})).content, None);
        assert_eq!(one(&c, json!({"originalFile":"abc"})).content, None);
        let all =
            call("Edit", json!({"file_path":"/a","old_string":"x","new_string":"y","replace_all":true}), Some(false));
        assert_eq!(one(&all, json!({"originalFile":"x x"})).content.as_deref(), Some("y y"));
        // No original content: unknowable.
        assert_eq!(one(&c, json!({})).content, None);
    }

    #[test]
    fn user_modified_edit_without_patch_is_not_exact() {
        let c = call("Edit", json!({"file_path":"/a","old_string":"x","new_string":"y"}), Some(false));
        assert_eq!(one(&c, json!({"originalFile":"x","userModified":true})).content, None);
        assert_eq!(one(&c, json!({"originalFile":"x","userModified":false})).content.as_deref(), Some("y"));
    }

    #[test]
    fn multiedit_applies_in_order() {
        let edits = json!([{"old_string":"a","new_string":"b"},{"old_string":"b","new_string":"c"}]);
        let c = call("MultiEdit", json!({"file_path":"/m","edits":edits}), Some(false));
        assert_eq!(one(&c, json!({"originalFileContents":"a"})).content.as_deref(), Some("c"));
    }

    #[test]
    fn edit_with_empty_old_string_on_new_file_creates_it() {
        let c = call("Edit", json!({"file_path":"/n","old_string":"","new_string":"hi\n"}), Some(false));
        let t = one(&c, json!({"originalFile":null}));
        assert_eq!((t.role, t.role_inferred, t.content.as_deref()), (Role::Created, true, Some("hi\n")));
    }

    #[test]
    fn failed_or_unanswered_calls_did_nothing() {
        let c = call("Write", json!({"file_path":"/w","content":"x"}), Some(true));
        let t = one(&c, json!("Error: nope"));
        assert!(!t.succeeded);
        assert_eq!(t.content, None);
        let c = call("Write", json!({"file_path":"/w","content":"x"}), None);
        assert!(!one(&c, Value::Null).succeeded);
    }

    #[test]
    fn write_role_from_result_type_else_from_history() {
        let w = call("Write", json!({"file_path":"/w","content":"x"}), Some(false));
        assert_eq!(one(&w, json!({"type":"update","content":"x"})).role, Role::Modified);
        let t = one(&w, json!({"type":"create","content":"x"}));
        assert_eq!((t.role, t.role_inferred, t.content.as_deref()), (Role::Created, false, Some("x")));
        // Content that disagrees with what the result says was written is not exact.
        assert_eq!(one(&w, json!({"type":"create","content":"y"})).content, None);

        let read = call("Read", json!({"file_path":"/w"}), Some(false));
        let mut w2 = w.clone();
        w2.id = "toolu_w2".to_owned();
        let got = touches(&[read, w2], &HashMap::new());
        assert_eq!((got[1].role, got[1].role_inferred), (Role::Modified, true));
        assert_eq!(touches(std::slice::from_ref(&w), &HashMap::new())[0].role, Role::Created);
    }

    #[test]
    fn read_content_only_when_whole_and_uncut() {
        let r = call("Read", json!({"file_path":"/r"}), Some(false));
        let file = |start, num, total, content: &str| json!({"type":"text","file":{"content":content,"startLine":start,"numLines":num,"totalLines":total}});
        assert_eq!(one(&r, file(1, 2, 2, "a\nb")).content.as_deref(), Some("a\nb"));
        assert_eq!(one(&r, file(1, 1, 2, "a")).content, None);
        assert_eq!(one(&r, file(2, 1, 2, "b")).content, None);
        let long = "x".repeat(READ_LINE_LIMIT);
        assert_eq!(one(&r, file(1, 1, 1, &long)).content, None);
        assert_eq!(one(&r, json!({"type":"image","file":{}})).content, None);
    }

    #[test]
    fn notebook_edit_uses_notebook_path() {
        let n = call("NotebookEdit", json!({"notebook_path":"/n.ipynb","new_source":"x"}), Some(false));
        let t = one(&n, Value::Null);
        assert_eq!((t.path.as_str(), t.role, t.content), ("/n.ipynb", Role::Modified, None));
    }

    #[test]
    fn patch_check_ignores_no_newline_marker() {
        let hunks = [
            json!({"oldStart":1,"oldLines":1,"newStart":1,"newLines":1,"lines":["-a","\\ No newline at end of file","+b","\\ No newline at end of file"]}),
        ];
        assert!(patch_agrees("a", "b", &hunks));
        assert!(!patch_agrees("a", "c", &hunks));
    }
}
