//! The file tools every agent run can have, confined to its [`Workspace`]:
//! `read_file`, `list_dir`, `write_file`, `edit_file`. Each takes its
//! arguments as JSON (already checked against its schema by the run) and
//! returns what the model sees; a failure is an error result the model can
//! act on, never a panic.

use std::path::Path;

use serde_json::{Value, json};

use crate::permission::Permissions;
use crate::run::{ToolEvidence, ToolOutput};
use crate::tool::{Effects, ToolDecl};
use noesis_fs::Workspace;

/// Most bytes `read_file` returns; the rest is cut with a note.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 500;

/// The built-in tools' names: a tool from elsewhere cannot take them.
pub const NAMES: [&str; 7] = ["read_file", "list_dir", "write_file", "edit_file", "glob", "grep", "run_command"];

pub(crate) fn names() -> &'static [&'static str] {
    &NAMES
}

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
    let lines = match (start, end) {
        (None, None) => None,
        (s, e) => {
            let s = s.unwrap_or(1).max(1);
            let e = e.unwrap_or(u64::MAX);
            if e < s {
                return Err(format!("end_line {e} is before start_line {s}"));
            }
            Some((s, e))
        }
    };
    let file = open_regular(&real, path)?;
    let read = read_bounded(file, 64 * 1024, lines, MAX_READ_BYTES).map_err(|e| match e {
        Bounded::Io(e) => format!("{path}: {e}"),
        Bounded::NotUtf8 => format!("{path}: not a UTF-8 text file"),
    })?;
    let mut text = read.shown;
    if read.more > 0 {
        text.push_str(&format!("\n[… {} more bytes; read a line range]", read.more));
    }
    // The whole file's hash, whatever part of it was shown.
    Ok(ToolOutput::ok(text).with_evidence(ToolEvidence::File { path: ws.shown(&real), blake3: read.blake3 }))
}

/// Opens `real` for reading if it is a regular file. Anything else is
/// refused before it is opened: opening a FIFO waits for a writer (for
/// ever, in a run), and a device can be endless.
fn open_regular(real: &Path, path: &str) -> Result<std::fs::File, String> {
    let not_regular = |m: &std::fs::Metadata| {
        if m.is_dir() {
            format!("{path}: a folder, not a file; list it with list_dir")
        } else {
            format!("{path}: not a regular file (a pipe, socket or device); only files are read")
        }
    };
    let meta = std::fs::metadata(real).map_err(|e| format!("{path}: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let file = std::fs::File::open(real).map_err(|e| format!("{path}: {e}"))?;
    // Checked again on what was opened, in case the path changed between.
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(m) => Err(not_regular(&m)),
        Err(e) => Err(format!("{path}: {e}")),
    }
}

/// What [`read_bounded`] read.
struct ReadPart {
    /// At most the limit's bytes of what was asked for, cut on a character
    /// boundary.
    shown: String,
    /// How many bytes of what was asked for are not in `shown`.
    more: u64,
    /// blake3 of the whole file.
    blake3: String,
}

enum Bounded {
    Io(std::io::Error),
    NotUtf8,
}

/// Streams `file` once: every byte is hashed and checked as UTF-8, but
/// only `limit` bytes of the wanted part (the whole file, or lines
/// `first..=last` joined by `\n`, line ends `\n` or `\r\n` left out, as
/// `str::lines` does) are kept, so memory stays bounded whatever the size.
fn read_bounded(
    source: impl std::io::Read,
    chunk: usize,
    lines: Option<(u64, u64)>,
    limit: usize,
) -> Result<ReadPart, Bounded> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(chunk, source);
    let mut hasher = blake3::Hasher::new();
    let mut utf8 = Utf8Check::default();
    let mut kept: Vec<u8> = Vec::new();
    let mut more: u64 = 0;
    let mut keep = |bytes: &[u8], kept: &mut Vec<u8>| {
        let room = limit.saturating_sub(kept.len()).min(bytes.len());
        kept.extend_from_slice(&bytes[..room]);
        more += (bytes.len() - room) as u64;
    };
    // Line mode: the current line's number, whether the next piece starts
    // a line, whether a line was shown yet, and a `\r` held back at a
    // chunk's end until the next byte says whether it ends a line.
    let (mut line, mut at_start, mut shown_any, mut held_cr) = (1u64, true, false, false);
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Bounded::Io(e)),
        };
        hasher.update(chunk);
        if !utf8.feed(chunk) {
            return Err(Bounded::NotUtf8);
        }
        match lines {
            None => keep(chunk, &mut kept),
            // Past the range the rest is only hashed and checked.
            Some((_, last)) if line > last => {}
            Some((first, last)) => {
                for piece in chunk.split_inclusive(|b| *b == b'\n') {
                    let ends = piece.last() == Some(&b'\n');
                    let body = if ends { &piece[..piece.len() - 1] } else { piece };
                    if (first..=last).contains(&line) {
                        if at_start && shown_any {
                            keep(b"\n", &mut kept);
                        }
                        shown_any = true;
                        if std::mem::take(&mut held_cr) && !(body.is_empty() && ends) {
                            keep(b"\r", &mut kept);
                        }
                        match body.split_last() {
                            // `\r\n` ends the line; a `\r` at the chunk's end waits.
                            Some((b'\r', rest)) => {
                                keep(rest, &mut kept);
                                held_cr = !ends;
                            }
                            _ => keep(body, &mut kept),
                        }
                    }
                    at_start = ends;
                    line += u64::from(ends);
                }
            }
        }
        let n = chunk.len();
        reader.consume(n);
    }
    if !utf8.finish() {
        return Err(Bounded::NotUtf8);
    }
    if held_cr {
        keep(b"\r", &mut kept);
    }
    // Cut back to a character boundary; what is cut off counts as more.
    let valid = match std::str::from_utf8(&kept) {
        Ok(_) => kept.len(),
        Err(e) => e.valid_up_to(),
    };
    more += (kept.len() - valid) as u64;
    kept.truncate(valid);
    let shown = String::from_utf8(kept).map_err(|_| Bounded::NotUtf8)?;
    Ok(ReadPart { shown, more, blake3: hasher.finalize().to_hex().to_string() })
}

/// UTF-8 checked chunk by chunk: a character split between two chunks is
/// carried over (at most three bytes).
#[derive(Default)]
struct Utf8Check {
    carry: Vec<u8>,
}

impl Utf8Check {
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while !self.carry.is_empty() {
            let Some((first, rest)) = bytes.split_first() else { return true };
            self.carry.push(*first);
            bytes = rest;
            match std::str::from_utf8(&self.carry) {
                Ok(_) => self.carry.clear(),
                Err(e) if e.error_len().is_none() => {}
                Err(_) => return false,
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                self.carry = bytes[e.valid_up_to()..].to_vec();
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the text ended on a whole character.
    fn finish(&self) -> bool {
        self.carry.is_empty()
    }
}
/// The whole file's hash, whatever part of it was shown: a conclusion drawn
/// from lines 3–5 is stale once the file changes anywhere, by rule.
fn file_evidence(ws: &Workspace, real: &Path, bytes: &[u8]) -> ToolEvidence {
    ToolEvidence::File { path: ws.shown(real), blake3: noesis_frames::scan::hash_bytes(bytes) }
}

fn list_dir(ws: &Workspace, path: &str) -> Result<ToolOutput, String> {
    let real = ws.confine(if path.is_empty() { "." } else { path }).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = std::fs::read_dir(&real)
        .map_err(|e| format!("{path}: {e}"))?
        .filter_map(Result::ok)
        .map(|e| {
            // A link counts as what it leads to (a dangling one as a file);
            // where it leads is checked when the model uses it.
            let dir = e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink() && e.path().is_dir());
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

fn write_file(ws: &Workspace, path: &str, content: &str) -> Result<ToolOutput, String> {
    let real = ws.confine(path).map_err(|e| e.to_string())?;
    // `.`, `""` or `sub/..` resolve to a folder (the root itself): the
    // temporary file would be made in its parent, outside the workspace.
    if real == ws.root() || real.is_dir() || path.ends_with('/') {
        return Err(format!("`{path}` names a folder; give the path of a file"));
    }
    noesis_fs::write_atomic(&real, content.as_bytes()).map_err(|e| e.to_string())?;
    Ok(ToolOutput::ok(format!("wrote {} ({} bytes)", ws.shown(&real), content.len())).with_evidence(file_evidence(
        ws,
        &real,
        content.as_bytes(),
    )))
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
            let edited = text.replacen(old, new, 1);
            noesis_fs::write_atomic(&real, edited.as_bytes()).map_err(|e| e.to_string())?;
            Ok(ToolOutput::ok(format!("edited {}", ws.shown(&real))).with_evidence(file_evidence(
                ws,
                &real,
                edited.as_bytes(),
            )))
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
        let hash = |text: &str| noesis_frames::scan::hash_bytes(text.as_bytes());
        let cited = |path: &str, text: &str| ToolEvidence::File { path: path.into(), blake3: hash(text) };
        let whole = cited("a.txt", "one\ntwo\nthree\n");
        assert_eq!(
            run(&w, "read_file", json!({"path": "a.txt"})),
            ToolOutput::ok("one\ntwo\nthree\n").with_evidence(whole.clone())
        );
        // A line range cites the whole file: it is stale once any of it changes.
        assert_eq!(
            run(&w, "read_file", json!({"path": "a.txt", "start_line": 2, "end_line": 3})),
            ToolOutput::ok("two\nthree").with_evidence(whole)
        );
        assert_eq!(run(&w, "list_dir", json!({"path": "."})), ToolOutput::ok("a.txt\nsub/"));
        let wrote = run(&w, "write_file", json!({"path": "sub/new/b.txt", "content": "hi"}));
        assert!(!wrote.is_error);
        assert_eq!(wrote.evidence, [cited("sub/new/b.txt", "hi")]);
        assert_eq!(std::fs::read_to_string(dir.path().join("sub/new/b.txt")).unwrap(), "hi");
        let edited = run(&w, "edit_file", json!({"path": "a.txt", "old": "two", "new": "2"}));
        assert!(!edited.is_error);
        assert_eq!(edited.evidence, [cited("a.txt", "one\n2\nthree\n")]);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "one\n2\nthree\n");
        assert!(run_file_tool(&w, "rm", &json!({})).is_none());
    }

    #[test]
    fn writing_keeps_a_files_mode_and_gives_a_new_one_the_usual_mode() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, w) = ws();
        let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o777;
        std::fs::write(dir.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.path().join("run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
        assert!(!run(&w, "edit_file", json!({"path": "run.sh", "old": "sh", "new": "bash"})).is_error);
        assert_eq!(mode("run.sh"), 0o751);
        assert!(!run(&w, "write_file", json!({"path": "run.sh", "content": "x"})).is_error);
        assert_eq!(mode("run.sh"), 0o751);
        // A new file: what any program would make here (umask applied),
        // compared with a file made the ordinary way.
        std::fs::write(dir.path().join("plain.txt"), "x").unwrap();
        assert!(!run(&w, "write_file", json!({"path": "new.txt", "content": "x"})).is_error);
        assert_eq!(mode("new.txt"), mode("plain.txt"));
        assert_ne!(mode("new.txt"), 0o600);
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

    /// Issue 31: a FIFO made `read_file` block until something wrote to
    /// it (forever, in a run). Here a writer waits on the other end: if the
    /// tool opened the FIFO it reads "x" and succeeds, which is the bug.
    #[test]
    fn read_file_refuses_what_is_not_a_regular_file_without_opening_it() {
        let (dir, w) = ws();
        let fifo = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let at = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&at).unwrap();
            std::io::Write::write_all(&mut f, b"x").unwrap();
        });
        let out = run(&w, "read_file", json!({"path": "pipe"}));
        assert!(out.is_error && out.content.contains("pipe: not a regular file"), "{}", out.content);
        assert!(out.evidence.is_empty());
        // Let the writer finish (the tool never opened the reading end).
        let mut r = std::fs::File::open(&fifo).unwrap();
        let _ = std::io::Read::read_to_end(&mut r, &mut Vec::new());
        writer.join().unwrap();
        let out = run(&w, "read_file", json!({"path": "sub"}));
        assert!(out.is_error && out.content.contains("sub: a folder"), "{}", out.content);
    }

    /// Issue 31: the whole file was read into memory before it was cut.
    /// What is shown stays bounded whatever the file's size, and the
    /// evidence is still the hash of the whole file.
    #[test]
    fn read_file_reads_a_bounded_part_and_hashes_the_whole_file() {
        let (dir, w) = ws();
        let mut text = String::new();
        for i in 0..40_000 {
            text.push_str(&format!("line {i}\r\n"));
        }
        std::fs::write(dir.path().join("long.txt"), &text).unwrap();
        let whole =
            ToolEvidence::File { path: "long.txt".into(), blake3: noesis_frames::scan::hash_bytes(text.as_bytes()) };
        let out = run(&w, "read_file", json!({"path": "long.txt"}));
        assert_eq!(out.evidence, std::slice::from_ref(&whole));
        let shown = out.content.split("\n[… ").next().unwrap();
        assert_eq!(shown.len(), MAX_READ_BYTES);
        assert!(text.starts_with(shown));
        assert!(out.content.ends_with(&format!("[… {} more bytes; read a line range]", text.len() - MAX_READ_BYTES)));
        // A range far into the file, `\r\n` taken as a line end.
        let out = run(&w, "read_file", json!({"path": "long.txt", "start_line": 39_999, "end_line": 50_000}));
        assert_eq!(out, ToolOutput::ok("line 39998\nline 39999").with_evidence(whole.clone()));
        // One line longer than the limit, with a character across the cut.
        let one = format!("a{}", "é".repeat(MAX_READ_BYTES));
        std::fs::write(dir.path().join("one.txt"), format!("x\n{one}\ny")).unwrap();
        let out = run(&w, "read_file", json!({"path": "one.txt", "start_line": 2, "end_line": 2}));
        let shown = out.content.split("\n[… ").next().unwrap();
        assert!(one.starts_with(shown) && shown.len() == MAX_READ_BYTES - 1, "{}", shown.len());
        assert!(out.content.ends_with(&format!("[… {} more bytes; read a line range]", one.len() - shown.len())));
        // Bytes that are not UTF-8, even past what is shown.
        let mut bad = "ok\n".repeat(30_000).into_bytes();
        bad.push(0xff);
        std::fs::write(dir.path().join("bin.dat"), &bad).unwrap();
        let out = run(&w, "read_file", json!({"path": "bin.dat", "start_line": 1, "end_line": 1}));
        assert!(out.is_error && out.content.contains("bin.dat: not a UTF-8 text file"), "{}", out.content);
    }

    proptest::proptest! {
        /// Streamed in chunks of any size, a line range is what
        /// `str::lines` gives, cut on a character boundary.
        #[test]
        fn prop_a_streamed_read_shows_what_lines_gives(
            text in "[ab\r\né]{0,40}",
            chunk in 1usize..9,
            limit in 0usize..30,
            first in 1u64..6,
            span in 0u64..6,
            whole in proptest::bool::ANY,
        ) {
            let last = first + span;
            let want: String = if whole {
                text.clone()
            } else {
                let from = usize::try_from(first - 1).unwrap();
                let n = usize::try_from(span + 1).unwrap();
                text.lines().skip(from).take(n).collect::<Vec<_>>().join("\n")
            };
            let mut end = limit.min(want.len());
            while !want.is_char_boundary(end) {
                end -= 1;
            }
            let lines = if whole { None } else { Some((first, last)) };
            let Ok(got) = read_bounded(text.as_bytes(), chunk, lines, limit) else { panic!("refused") };
            proptest::prop_assert_eq!(&got.shown, &want[..end]);
            proptest::prop_assert_eq!(got.more, (want.len() - end) as u64);
            proptest::prop_assert_eq!(got.blake3, noesis_frames::scan::hash_bytes(text.as_bytes()));
        }
    }

    /// Issue 31: a link to a folder was listed as a file.
    #[test]
    fn list_dir_shows_links_to_folders_as_folders() {
        let (dir, w) = ws();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("alias")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.txt"), dir.path().join("b.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("dangling")).unwrap();
        assert_eq!(run(&w, "list_dir", json!({"path": ""})), ToolOutput::ok("a.txt\nalias/\nb.txt\ndangling\nsub/"));
    }

    /// Issue 31: `.` or `""` resolved to the workspace root, and the write
    /// made its temporary file in the workspace's parent folder.
    #[test]
    fn write_file_refuses_a_folder_or_the_root() {
        let (dir, w) = ws();
        let parent = dir.path().parent().unwrap().to_owned();
        let before: Vec<_> = std::fs::read_dir(&parent).unwrap().map(|e| e.unwrap().file_name()).collect();
        for path in [".", "", "sub", "sub/", "sub/..", "new/"] {
            let out = run(&w, "write_file", json!({"path": path, "content": "x"}));
            assert!(out.is_error && out.content.contains("names a folder"), "{path:?}: {}", out.content);
        }
        let after: Vec<_> = std::fs::read_dir(&parent).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(after.iter().all(|n| before.contains(n)), "something was written beside the workspace");
        assert!(dir.path().join("sub").is_dir() && !dir.path().join("new").exists());
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

/// Most paths `glob` returns and matches `grep` returns.
pub const MAX_MATCHES: usize = 200;
/// Most bytes of a command's output kept (stdout and stderr each).
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;

/// The declarations of the search tools.
pub fn search_tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::read_only(
            "glob",
            "Lists the workspace files whose path matches a glob such as `src/**/*.rs` (.gitignore honoured).",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"], "additionalProperties": false}),
        ),
        ToolDecl::read_only(
            "grep",
            "Searches the workspace's files for a regular expression; `path` narrows to a file or folder, `glob` to matching paths. Prints path:line: text.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}},
                   "required": ["pattern"], "additionalProperties": false}),
        ),
    ]
}

/// Runs the search tool `name`; `None` when it is not one of them.
pub fn run_search_tool(workspace: &Workspace, name: &str, args: &Value) -> Option<ToolOutput> {
    let text = |k: &str| args.get(k).and_then(Value::as_str);
    let out = match name {
        "glob" => glob(workspace, text("pattern").unwrap_or_default()),
        "grep" => grep(workspace, text("pattern").unwrap_or_default(), text("path"), text("glob")),
        _ => return None,
    };
    Some(out.unwrap_or_else(ToolOutput::error))
}

fn matcher(pattern: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("`{pattern}` is not a glob: {e}"))
}

/// Files under `dir` (inside the workspace) by the project's walk, but with
/// hidden files skipped as ripgrep skips them: `glob` and `grep` show a
/// model what a person searching the tree would see. In path order.
fn files(ws: &Workspace, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = noesis_fs::walk(dir)
        .hidden(true)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
        .filter(|p| p.starts_with(ws.root()))
        .collect();
    out.sort();
    out
}

fn glob(ws: &Workspace, pattern: &str) -> Result<ToolOutput, String> {
    let m = matcher(pattern)?;
    let found: Vec<String> = files(ws, ws.root()).iter().map(|p| ws.shown(p)).filter(|rel| m.is_match(rel)).collect();
    Ok(ToolOutput::ok(capped(found, "paths")))
}

fn capped(mut lines: Vec<String>, what: &str) -> String {
    let total = lines.len();
    if total == 0 {
        return format!("no {what} matched");
    }
    lines.truncate(MAX_MATCHES);
    let mut out = lines.join("\n");
    if total > MAX_MATCHES {
        out.push_str(&format!("\n[… {} more {what}]", total - MAX_MATCHES));
    }
    out
}

fn grep(ws: &Workspace, pattern: &str, path: Option<&str>, glob: Option<&str>) -> Result<ToolOutput, String> {
    use grep_searcher::sinks::UTF8;
    let regex =
        grep_regex::RegexMatcher::new(pattern).map_err(|e| format!("`{pattern}` is not a regular expression: {e}"))?;
    let root = ws.confine(path.unwrap_or(".")).map_err(|e| e.to_string())?;
    let only = glob.map(matcher).transpose()?;
    let mut lines = Vec::new();
    let mut searcher =
        grep_searcher::SearcherBuilder::new().binary_detection(grep_searcher::BinaryDetection::quit(0)).build();
    for file in files(ws, &root) {
        let rel = ws.shown(&file);
        if only.as_ref().is_some_and(|m| !m.is_match(&rel)) {
            continue;
        }
        // A file that cannot be read as text is skipped, as ripgrep does.
        let _ = searcher.search_path(
            &regex,
            &file,
            UTF8(|line, text| {
                lines.push(format!("{rel}:{line}: {}", crate::tool::clip(text.trim_end(), 300)));
                Ok(lines.len() <= MAX_MATCHES)
            }),
        );
        if lines.len() > MAX_MATCHES {
            break;
        }
    }
    Ok(ToolOutput::ok(capped(lines, "matches")))
}

/// The `run_command` tool's declaration.
pub fn command_tool() -> ToolDecl {
    ToolDecl::read_only(
        "run_command",
        "Runs a command in the workspace (no shell: the line is split into words) if the operator allows it; prints the exit code and the output.",
        json!({"type": "object", "properties": {
            "command": {"type": "string"},
            "cwd": {"type": "string"},
            "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600}
        }, "required": ["command"], "additionalProperties": false}),
    )
    .with_effects(Effects { runs_commands: true, ..Effects::default() })
}

/// How a command runs: in the run's sandbox (or why there is none), until
/// cancelled, within the time the driver gives the call.
pub struct CommandRun<'a> {
    /// The run's sandbox, or why commands cannot run here.
    pub sandbox: &'a Result<std::sync::Arc<noesis_sandbox::Sandbox>, noesis_sandbox::SandboxError>,
    /// Cancels the command (its whole tree is killed).
    pub cancel: Option<&'a tokio_util::sync::CancellationToken>,
    /// The most time the call has; the command's own timeout is cut to it.
    pub limit: std::time::Duration,
}

/// Runs a command if the permissions admit it (an operator's rule matches
/// its argv, dangerous options spelled out) and no rule denies it (see
/// [`crate::permission`]), confined by the run's sandbox; what it started
/// is dead when this returns.
pub fn run_command(ws: &Workspace, permissions: &Permissions, args: &Value, how: &CommandRun<'_>) -> ToolOutput {
    let line = args.get("command").and_then(Value::as_str).unwrap_or_default();
    let Some(argv) = shlex::split(line).filter(|a| !a.is_empty()) else {
        return ToolOutput::error(format!("`{line}` is not a command line (unbalanced quotes, or empty)"));
    };
    if let Err(why) = permissions.check_command(&argv) {
        return ToolOutput::error(why);
    }
    let cwd = match ws.confine(args.get("cwd").and_then(Value::as_str).unwrap_or(".")) {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let sandbox = match how.sandbox {
        Ok(s) => s,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let asked = std::time::Duration::from_secs(args.get("timeout_s").and_then(Value::as_u64).unwrap_or(120));
    let timeout = asked.min(how.limit);
    let cancelled = || how.cancel.is_some_and(tokio_util::sync::CancellationToken::is_cancelled);
    let opts = noesis_sandbox::RunOptions { cwd: &cwd, timeout, max_output: MAX_OUTPUT_BYTES, cancelled: &cancelled };
    let done = match sandbox.run(&argv, &opts) {
        Ok(d) => d,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let shown = |text: &str, dropped: u64| {
        if dropped == 0 { text.to_owned() } else { format!("{text}\n[… {dropped} more bytes]") }
    };
    let (stdout, stderr) = (shown(&done.stdout, done.dropped.0), shown(&done.stderr, done.dropped.1));
    let ran = |exit_code: Option<i32>| ToolEvidence::Command {
        command: line.to_owned(),
        exit_code,
        output_blake3: noesis_frames::scan::hash_bytes(format!("{stdout}\0{stderr}").as_bytes()),
    };
    let unconfined = if sandbox.is_confined() { "" } else { "[ran unconfined: the sandbox is off]\n" };
    if done.timed_out || done.cancelled {
        let why = if done.cancelled {
            "was cancelled and killed".to_owned()
        } else if timeout < asked {
            format!("timed out after {} s (the call's time limit) and was killed", timeout.as_secs())
        } else {
            format!("timed out after {} s and was killed", timeout.as_secs())
        };
        return ToolOutput::error(format!("{unconfined}{why}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"))
            .with_evidence(ran(None));
    }
    let code = match (done.code, done.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "unknown".to_owned(),
    };
    let body = format!("{unconfined}exit code {code}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let evidence = ran(done.code);
    if done.success() { ToolOutput::ok(body) } else { ToolOutput::error(body) }.with_evidence(evidence)
}

#[cfg(test)]
mod search_and_command_tests {
    use super::*;

    fn cmd(w: &Workspace, allowed: &Permissions, args: &Value) -> ToolOutput {
        let sandbox =
            noesis_sandbox::Sandbox::new(&noesis_sandbox::Settings::default(), w.root(), &[]).map(std::sync::Arc::new);
        run_command(w, allowed, args, &CommandRun { sandbox: &sandbox, cancel: None, limit: crate::TOOL_TIMEOUT })
    }

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "fn main() {}\n// TODO: more\n").unwrap();
        std::fs::write(dir.path().join("src/deep/x.rs"), "let todo = 1;\n").unwrap();
        std::fs::write(dir.path().join("notes.md"), "TODO: write\n").unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir(dir.path().join("target")).unwrap();
        std::fs::write(dir.path().join("target/gen.rs"), "// TODO: generated\n").unwrap();
        let w = Workspace::new(dir.path()).unwrap();
        (dir, w)
    }

    #[test]
    fn glob_and_grep_honour_gitignore_and_narrowing() {
        let (_d, w) = ws();
        let g = run_search_tool(&w, "glob", &json!({"pattern": "src/**/*.rs"})).unwrap();
        assert_eq!(g.content, "src/deep/x.rs\nsrc/lib.rs");
        let all = run_search_tool(&w, "grep", &json!({"pattern": "TODO"})).unwrap();
        assert_eq!(all.content, "notes.md:1: TODO: write\nsrc/lib.rs:2: // TODO: more", "target/ is ignored");
        let narrowed =
            run_search_tool(&w, "grep", &json!({"pattern": "(?i)todo", "path": "src", "glob": "**/deep/*"})).unwrap();
        assert_eq!(narrowed.content, "src/deep/x.rs:1: let todo = 1;");
        let none = run_search_tool(&w, "grep", &json!({"pattern": "absent"})).unwrap();
        assert_eq!(none.content, "no matches matched");
        let bad = run_search_tool(&w, "grep", &json!({"pattern": "("})).unwrap();
        assert!(bad.is_error && bad.content.contains("not a regular expression"));
        let out = run_search_tool(&w, "grep", &json!({"pattern": "x", "path": "../"})).unwrap();
        assert!(out.is_error && out.content.contains("leaves the workspace"));
    }

    #[test]
    fn commands_run_only_when_allowed_without_a_shell() {
        let (d, w) = ws();
        let allowed = Permissions::from_commands(&["echo".to_owned(), "sh -c".to_owned(), "false".to_owned()]);
        let ok = cmd(&w, &allowed, &json!({"command": "echo 'a b' ; rm -rf x"}));
        assert!(!ok.is_error && ok.content.starts_with("exit code 0\n--- stdout\na b ; rm -rf x"), "{}", ok.content);
        let printed = noesis_frames::scan::hash_bytes("a b ; rm -rf x\n\0".as_bytes());
        assert_eq!(
            ok.evidence,
            [ToolEvidence::Command {
                command: "echo 'a b' ; rm -rf x".into(),
                exit_code: Some(0),
                output_blake3: printed
            }]
        );
        let failed = cmd(&w, &allowed, &json!({"command": "false"}));
        assert!(failed.is_error && failed.content.starts_with("exit code 1"), "{}", failed.content);
        assert!(matches!(failed.evidence[..], [ToolEvidence::Command { exit_code: Some(1), .. }]));
        let refused = cmd(&w, &allowed, &json!({"command": "rm -rf src"}));
        assert!(
            refused.is_error && refused.content.contains("no rule admits") && refused.content.contains("echo"),
            "{}",
            refused.content
        );
        // Options that run other code are refused unless the rule names them.
        let extra = cmd(&w, &allowed, &json!({"command": "false --version"}));
        assert!(extra.content.starts_with("exit code"), "an honest extra argument runs: {}", extra.content);
        let shell = Permissions::from_commands(&["sh".to_owned()]);
        let refused_c = cmd(&w, &shell, &json!({"command": "sh -c 'touch made'"}));
        assert!(refused_c.is_error && refused_c.content.contains("`-c`"), "{}", refused_c.content);
        assert!(!d.path().join("made").exists());
        assert!(d.path().join("src").exists());
        // What the command started goes with it: a grandchild that outlived
        // its shell would leave a mark a second later.
        let slow = cmd(
            &w,
            &allowed,
            &json!({"command": "sh -c '(sleep 2; touch grandchild-lived) & sleep 30'", "timeout_s": 1}),
        );
        std::thread::sleep(std::time::Duration::from_secs(3));
        assert!(!d.path().join("grandchild-lived").exists(), "the grandchild outlived the timeout");
        assert!(slow.is_error && slow.content.starts_with("timed out after 1 s"), "{}", slow.content);
        assert!(matches!(slow.evidence[..], [ToolEvidence::Command { exit_code: None, .. }]));
        assert!(refused.evidence.is_empty(), "nothing ran");
        let outside = cmd(&w, &allowed, &json!({"command": "echo x", "cwd": "/"}));
        assert!(outside.is_error && outside.content.contains("outside the workspace"));
        let quotes = cmd(&w, &allowed, &json!({"command": "echo 'open"}));
        assert!(quotes.is_error && quotes.content.contains("not a command line"));
        let big = cmd(&w, &allowed, &json!({"command": "sh -c 'head -c 100000 /dev/zero | tr \"\\\\0\" x'"}));
        assert!(big.content.contains("more bytes"), "{}", &big.content[..200.min(big.content.len())]);
    }
}
