//! The file tools every agent run can have, confined to its [`Workspace`]:
//! `read_file`, `list_dir`, `write_file`, `edit_file`. Each takes its
//! arguments as JSON (already checked against its schema by the run) and
//! returns what the model sees; a failure is an error result the model can
//! act on, never a panic.

use std::path::Path;

use serde_json::{Value, json};

use crate::run::ToolOutput;
use crate::tool::{Effects, ToolDecl};
use crate::workspace::Workspace;

/// Most bytes `read_file` returns; the rest is cut with a note.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 500;

/// The declarations of the file tools.
pub fn file_tools() -> Vec<ToolDecl> {
    let writes = Effects { writes_files: true, ..Effects::default() };
    vec![
        ToolDecl::read_only(
            "read_file",
            "Reads a text file of the workspace, optionally only lines start_line..=end_line (1-based).",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}
            }, "required": ["path"], "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            "list_dir",
            "Lists a folder of the workspace: one entry per line, folders ending in /.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            "write_file",
            "Writes a whole file of the workspace (creating folders as needed).",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"], "additionalProperties": false}),
        )
        .with_effects(writes),
        ToolDecl::read_only(
            "edit_file",
            "Replaces the text `old`, which must occur exactly once in the file, with `new`.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                   "required": ["path", "old", "new"], "additionalProperties": false}),
        )
        .with_effects(writes),
    ]
}

/// Runs the file tool `name`; `None` when it is not one of them.
pub fn run_file_tool(workspace: &Workspace, name: &str, args: &Value) -> Option<ToolOutput> {
    let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
    let out = match name {
        "read_file" => read_file(
            workspace,
            text("path"),
            args.get("start_line").and_then(Value::as_u64),
            args.get("end_line").and_then(Value::as_u64),
        ),
        "list_dir" => list_dir(workspace, text("path")),
        "write_file" => write_file(workspace, text("path"), text("content")),
        "edit_file" => edit_file(workspace, text("path"), text("old"), text("new")),
        _ => return None,
    };
    Some(out.unwrap_or_else(ToolOutput::error))
}

fn read_file(ws: &Workspace, path: &str, start: Option<u64>, end: Option<u64>) -> Result<ToolOutput, String> {
    let real = ws.confine(path).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(&real).map_err(|e| format!("{path}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{path}: not a UTF-8 text file"))?;
    let text = match (start, end) {
        (None, None) => text,
        (s, e) => {
            let s = usize::try_from(s.unwrap_or(1)).unwrap_or(usize::MAX).max(1);
            let e = e.map_or(usize::MAX, |e| usize::try_from(e).unwrap_or(usize::MAX));
            if e < s {
                return Err(format!("end_line {e} is before start_line {s}"));
            }
            text.lines().skip(s - 1).take(e - s + 1).collect::<Vec<_>>().join("\n")
        }
    };
    Ok(ToolOutput::ok(cut(text, MAX_READ_BYTES)))
}

fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… {} more bytes; read a line range]", &text[..end], text.len() - end)
}

fn list_dir(ws: &Workspace, path: &str) -> Result<ToolOutput, String> {
    let real = ws.confine(if path.is_empty() { "." } else { path }).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = std::fs::read_dir(&real)
        .map_err(|e| format!("{path}: {e}"))?
        .filter_map(Result::ok)
        .map(|e| {
            let dir = e.file_type().is_ok_and(|t| t.is_dir());
            format!("{}{}", e.file_name().to_string_lossy(), if dir { "/" } else { "" })
        })
        .collect();
    names.sort();
    let total = names.len();
    names.truncate(MAX_LIST_ENTRIES);
    let mut out = names.join("\n");
    if total > MAX_LIST_ENTRIES {
        out.push_str(&format!("\n[… {} more entries]", total - MAX_LIST_ENTRIES));
    }
    Ok(ToolOutput::ok(out))
}

/// Writes through a temporary file renamed into place: a reader never sees
/// half a file, and a failure leaves the old one.
fn write_atomically(real: &Path, content: &str) -> Result<(), String> {
    let dir = real.parent().ok_or_else(|| format!("{}: no parent folder", real.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, content.as_bytes()).map_err(|e| format!("{}: {e}", real.display()))?;
    tmp.persist(real).map_err(|e| format!("{}: {}", real.display(), e.error))?;
    Ok(())
}

fn write_file(ws: &Workspace, path: &str, content: &str) -> Result<ToolOutput, String> {
    let real = ws.confine(path).map_err(|e| e.to_string())?;
    write_atomically(&real, content)?;
    Ok(ToolOutput::ok(format!("wrote {} ({} bytes)", ws.shown(&real), content.len())))
}

fn edit_file(ws: &Workspace, path: &str, old: &str, new: &str) -> Result<ToolOutput, String> {
    if old.is_empty() {
        return Err("`old` is empty; give the exact text to replace".into());
    }
    let real = ws.confine(path).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&real).map_err(|e| format!("{path}: {e}"))?;
    match text.matches(old).count() {
        0 => Err(format!("{path}: the text to replace does not occur in the file; read it and copy the text exactly")),
        1 => {
            write_atomically(&real, &text.replacen(old, new, 1))?;
            Ok(ToolOutput::ok(format!("edited {}", ws.shown(&real))))
        }
        n => Err(format!("{path}: the text to replace occurs {n} times; include more context so it occurs once")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let w = Workspace::new(dir.path()).unwrap();
        (dir, w)
    }

    fn run(w: &Workspace, name: &str, args: Value) -> ToolOutput {
        run_file_tool(w, name, &args).unwrap()
    }

    #[test]
    fn read_list_write_and_edit() {
        let (dir, w) = ws();
        assert_eq!(run(&w, "read_file", json!({"path": "a.txt"})), ToolOutput::ok("one\ntwo\nthree\n"));
        assert_eq!(
            run(&w, "read_file", json!({"path": "a.txt", "start_line": 2, "end_line": 3})),
            ToolOutput::ok("two\nthree")
        );
        assert_eq!(run(&w, "list_dir", json!({"path": "."})), ToolOutput::ok("a.txt\nsub/"));
        assert!(!run(&w, "write_file", json!({"path": "sub/new/b.txt", "content": "hi"})).is_error);
        assert_eq!(std::fs::read_to_string(dir.path().join("sub/new/b.txt")).unwrap(), "hi");
        assert!(!run(&w, "edit_file", json!({"path": "a.txt", "old": "two", "new": "2"})).is_error);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "one\n2\nthree\n");
        assert!(run_file_tool(&w, "rm", &json!({})).is_none());
    }

    #[test]
    fn failures_are_results_the_model_can_act_on() {
        let (dir, w) = ws();
        std::fs::write(dir.path().join("twice.txt"), "x x").unwrap();
        for (name, args, says) in [
            ("read_file", json!({"path": "nope.txt"}), "nope.txt"),
            ("read_file", json!({"path": "../etc/passwd"}), "leaves the workspace"),
            ("read_file", json!({"path": "a.txt", "start_line": 3, "end_line": 1}), "before start_line"),
            ("edit_file", json!({"path": "a.txt", "old": "four", "new": "4"}), "does not occur"),
            ("edit_file", json!({"path": "twice.txt", "old": "x", "new": "y"}), "occurs 2 times"),
            ("edit_file", json!({"path": "a.txt", "old": "", "new": "y"}), "`old` is empty"),
            ("write_file", json!({"path": "/tmp/outside.txt", "content": "x"}), "outside the workspace"),
            ("list_dir", json!({"path": "a.txt"}), "a.txt"),
        ] {
            let out = run(&w, name, args);
            assert!(out.is_error && out.content.contains(says), "{name}: {}", out.content);
        }
        // A failed edit leaves the file as it was.
        assert_eq!(std::fs::read_to_string(dir.path().join("twice.txt")).unwrap(), "x x");
    }

    #[test]
    fn big_files_are_cut_on_a_character_boundary() {
        let (dir, w) = ws();
        std::fs::write(dir.path().join("big.txt"), "é".repeat(MAX_READ_BYTES)).unwrap();
        let out = run(&w, "read_file", json!({"path": "big.txt"}));
        assert!(!out.is_error && out.content.contains("more bytes; read a line range"));
        assert!(out.content.len() < MAX_READ_BYTES + 100);
    }
}
