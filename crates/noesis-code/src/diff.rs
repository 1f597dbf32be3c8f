//! Unified diffs, as `git diff` (and `git show`, `git format-patch`) and
//! `diff -u`/`diff -ruN` print them.
//!
//! [`parse_unified`] reads the text into files, hunks and lines with both
//! line numbers. It understands git's extended headers (renames, copies,
//! mode changes, new and deleted files, binary files), paths quoted the way
//! git quotes them, `a/`/`b/` prefixes (stripped), timestamps after a tab
//! (dropped), `/dev/null` and GNU diff's 1970 timestamp for a missing file,
//! hunk headers whose counts are omitted (`@@ -1 +1 @@`), `\ No newline at
//! end of file`, CRLF line ends (a line's text never ends in `\r`), and
//! context lines whose leading space was stripped by an editor (an empty
//! line inside a hunk is an empty context line). Lines outside files and
//! hunks (a commit message, a diffstat, `index …`, `Only in …`) are skipped.
//!
//! Hunks are read by their header's counts, so a hunk that has more lines
//! than its header says, or fewer before the text ends, is an error naming
//! the line. No input makes it panic.

use std::ops::RangeInclusive;

use crate::CodeError;

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileStatus {
    /// Created (old side `/dev/null` or git's `new file mode`).
    Added,
    /// Removed (new side `/dev/null` or git's `deleted file mode`).
    Deleted,
    /// Changed in place (content, mode, or both).
    Modified,
    /// Moved (git's `rename from`/`rename to`), possibly also changed.
    Renamed,
    /// Copied (git's `copy from`/`copy to`), possibly also changed.
    Copied,
}

/// The kind of a line in a hunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineKind {
    /// On both sides (` `).
    Context,
    /// Only on the new side (`+`).
    Added,
    /// Only on the old side (`-`).
    Removed,
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DiffLine {
    /// Context, added or removed.
    pub kind: LineKind,
    /// The line without its ` `/`+`/`-` marker and line end.
    pub text: String,
    /// Its 1-based line in the old file (context and removed lines).
    pub old_line: Option<u32>,
    /// Its 1-based line in the new file (context and added lines).
    pub new_line: Option<u32>,
    /// Followed by `\ No newline at end of file`: the last line of its
    /// side, with no line end.
    pub no_newline_at_end: bool,
}

/// One `@@ -old_start,old_lines +new_start,new_lines @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hunk {
    /// First old line (0 when the hunk has no old lines in an empty file).
    pub old_start: u32,
    /// Number of old lines (context and removed).
    pub old_lines: u32,
    /// First new line (0 when the hunk has no new lines in an empty file).
    pub new_start: u32,
    /// Number of new lines (context and added).
    pub new_lines: u32,
    /// What follows the second `@@` (git's function context), without the
    /// separating space; often empty.
    pub header_context: String,
    /// The lines in order.
    pub lines: Vec<DiffLine>,
}

/// The changes to one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileDiff {
    /// The old path without `a/`; `None` for an added file.
    pub old_path: Option<String>,
    /// The new path without `b/`; `None` for a deleted file.
    pub new_path: Option<String>,
    /// What happened to the file.
    pub status: FileStatus,
    /// Binary content: no hunks, only that it differs.
    pub binary: bool,
    /// The old mode when git reports one (`old mode`, `deleted file mode`).
    pub old_mode: Option<String>,
    /// The new mode when git reports one (`new mode`, `new file mode`).
    pub new_mode: Option<String>,
    /// The hunks in order.
    pub hunks: Vec<Hunk>,
}

impl FileDiff {
    /// The path the file has now, or had if it was deleted.
    #[must_use]
    pub fn path(&self) -> Option<&str> {
        self.new_path.as_deref().or(self.old_path.as_deref())
    }

    /// The new-side line numbers of added lines, as maximal runs of
    /// consecutive lines in order (what a review comments on).
    #[must_use]
    pub fn changed_new_lines(&self) -> Vec<RangeInclusive<u32>> {
        let mut out: Vec<RangeInclusive<u32>> = Vec::new();
        let added = self.hunks.iter().flat_map(|h| &h.lines).filter(|l| l.kind == LineKind::Added);
        for line in added.filter_map(|l| l.new_line) {
            match out.last_mut() {
                Some(last) if last.end().checked_add(1) == Some(line) => *last = *last.start()..=line,
                _ => out.push(line..=line),
            }
        }
        out
    }
}

fn error(line: usize, reason: impl Into<String>) -> CodeError {
    CodeError::Diff { line, reason: reason.into() }
}

/// A file being read.
struct Builder {
    diff: FileDiff,
    /// Started by `diff --git` and still in its extended header.
    git_header: bool,
    renamed: bool,
    copied: bool,
    added: bool,
    deleted: bool,
}

impl Builder {
    fn new(old_path: Option<String>, new_path: Option<String>, git: bool) -> Self {
        Builder {
            diff: FileDiff {
                old_path,
                new_path,
                status: FileStatus::Modified,
                binary: false,
                old_mode: None,
                new_mode: None,
                hunks: Vec::new(),
            },
            git_header: git,
            renamed: false,
            copied: false,
            added: false,
            deleted: false,
        }
    }

    fn finish(mut self) -> FileDiff {
        let d = &mut self.diff;
        d.status = if self.renamed {
            FileStatus::Renamed
        } else if self.copied {
            FileStatus::Copied
        } else if self.added || (d.old_path.is_none() && d.new_path.is_some()) {
            FileStatus::Added
        } else if self.deleted || (d.new_path.is_none() && d.old_path.is_some()) {
            FileStatus::Deleted
        } else {
            FileStatus::Modified
        };
        match d.status {
            FileStatus::Added => d.old_path = None,
            FileStatus::Deleted => d.new_path = None,
            _ => {}
        }
        self.diff
    }

    /// Reads one line of git's extended header; false if it is not one.
    fn git_line(&mut self, line: &str) -> bool {
        let d = &mut self.diff;
        if let Some(mode) = line.strip_prefix("old mode ") {
            d.old_mode = Some(mode.trim().to_owned());
        } else if let Some(mode) = line.strip_prefix("new mode ") {
            d.new_mode = Some(mode.trim().to_owned());
        } else if let Some(mode) = line.strip_prefix("deleted file mode ") {
            d.old_mode = Some(mode.trim().to_owned());
            self.deleted = true;
        } else if let Some(mode) = line.strip_prefix("new file mode ") {
            d.new_mode = Some(mode.trim().to_owned());
            self.added = true;
        } else if let Some(path) = line.strip_prefix("rename from ") {
            d.old_path = Some(unquote(path));
            self.renamed = true;
        } else if let Some(path) = line.strip_prefix("rename to ") {
            d.new_path = Some(unquote(path));
            self.renamed = true;
        } else if let Some(path) = line.strip_prefix("copy from ") {
            d.old_path = Some(unquote(path));
            self.copied = true;
        } else if let Some(path) = line.strip_prefix("copy to ") {
            d.new_path = Some(unquote(path));
            self.copied = true;
        } else if line == "GIT binary patch" {
            d.binary = true;
        } else if let Some((old, new)) = binary_files(line) {
            d.binary = true;
            self.added |= old.is_none();
            self.deleted |= new.is_none();
        } else {
            // `index …`, `similarity index …` and the like carry nothing
            // kept here.
            return line.starts_with("index ")
                || line.starts_with("similarity index ")
                || line.starts_with("dissimilarity index ");
        }
        true
    }
}

/// `Binary files OLD and NEW differ`: the two paths (`None` for
/// `/dev/null`). Paths containing ` and ` split at the first one.
fn binary_files(line: &str) -> Option<(Option<String>, Option<String>)> {
    let rest = line.strip_prefix("Binary files ")?.strip_suffix(" differ")?;
    let (old, new) = rest.split_once(" and ")?;
    Some((side_path(old, "a/"), side_path(new, "b/")))
}

/// A path as git quotes it (`"a/tab\there"`), or as is when unquoted.
fn unquote(raw: &str) -> String {
    match quoted(raw) {
        Some((path, _)) => path,
        None => raw.to_owned(),
    }
}

/// Reads a C-style quoted string at the start of `raw`; returns it and the
/// rest after the closing quote.
fn quoted(raw: &str) -> Option<(String, &str)> {
    let inner = raw.strip_prefix('"')?;
    let mut bytes = Vec::new();
    let mut chars = inner.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let rest = inner.get(i + 1..).unwrap_or("");
                return Some((String::from_utf8_lossy(&bytes).into_owned(), rest));
            }
            '\\' => {
                let (_, e) = chars.next()?;
                let byte = match e {
                    'a' => 7,
                    'b' => 8,
                    'f' => 12,
                    'n' => b'\n',
                    'r' => b'\r',
                    't' => b'\t',
                    'v' => 11,
                    '0'..='7' => {
                        let mut value = u32::from(e) - u32::from('0');
                        for _ in 0..2 {
                            let next = chars.clone().next();
                            match next {
                                Some((_, d @ '0'..='7')) => {
                                    value = value * 8 + (u32::from(d) - u32::from('0'));
                                    chars.next();
                                }
                                _ => break,
                            }
                        }
                        u8::try_from(value).unwrap_or(b'?')
                    }
                    other => {
                        let mut buf = [0; 4];
                        bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                        continue;
                    }
                };
                bytes.push(byte);
            }
            other => {
                let mut buf = [0; 4];
                bytes.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    None
}

/// A path from a `---`/`+++` line or a `Binary files` line: unquoted, up
/// to a tab (after which `diff -u` puts a timestamp), `prefix` stripped,
/// `None` for `/dev/null` or GNU diff's epoch timestamp of a missing file.
fn side_path(raw: &str, prefix: &str) -> Option<String> {
    let (path, stamp) = match quoted(raw) {
        Some((path, rest)) => (path, rest.trim_start_matches('\t')),
        None => {
            let (path, stamp) = raw.split_once('\t').unwrap_or((raw, ""));
            (path.to_owned(), stamp)
        }
    };
    if path == "/dev/null" || is_epoch(stamp) {
        return None;
    }
    Some(path.strip_prefix(prefix).map_or(path.clone(), str::to_owned))
}

/// Whether a `diff -u` timestamp (`1970-01-01 01:00:00.000000000 +0100`)
/// is the Unix epoch, which `diff -N` gives a file that does not exist.
fn is_epoch(stamp: &str) -> bool {
    let mut parts = stamp.split_whitespace();
    let (Some(date), Some(time), Some(zone)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let day: i64 = match date {
        "1970-01-01" => 0,
        "1969-12-31" => -86_400,
        _ => return false,
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    if !fraction.bytes().all(|b| b == b'0') {
        return false;
    }
    let number = |s: Option<&str>| s.filter(|s| s.len() == 2).and_then(|s| s.parse::<i64>().ok());
    let mut hms = clock.split(':');
    let (Some(h), Some(m), Some(sec)) = (number(hms.next()), number(hms.next()), number(hms.next())) else {
        return false;
    };
    let (sign, offset) = match zone.split_at_checked(1) {
        Some(("+", o)) => (1, o),
        Some(("-", o)) => (-1, o),
        _ => return false,
    };
    let (Some(oh), Some(om)) = (number(offset.get(..2)), number(offset.get(2..))) else {
        return false;
    };
    day + h * 3600 + m * 60 + sec - sign * (oh * 3600 + om * 60) == 0
}

/// The two paths of `diff --git a/OLD b/NEW`. Unquoted paths with spaces
/// are split where both halves name the same file, else before ` b/`.
fn git_paths(rest: &str) -> (Option<String>, Option<String>) {
    let strip = |p: &str, prefix: &str| p.strip_prefix(prefix).unwrap_or(p).to_owned();
    if let Some((old, after)) = quoted(rest) {
        let after = after.trim_start();
        let new = quoted(after).map_or_else(|| after.to_owned(), |(p, _)| p);
        return (Some(strip(&old, "a/")), Some(strip(&new, "b/")));
    }
    if let Some(at) = rest.find(" \"") {
        let old = rest.get(..at).unwrap_or("");
        let new = rest.get(at + 1..).map(unquote).unwrap_or_default();
        return (Some(strip(old, "a/")), Some(strip(&new, "b/")));
    }
    let len = rest.len();
    if len % 2 == 1 {
        let mid = len / 2;
        if let (Some(old), Some(" "), Some(new)) = (rest.get(..mid), rest.get(mid..=mid), rest.get(mid + 1..)) {
            let (old, new) = (strip(old, "a/"), strip(new, "b/"));
            if old == new {
                return (Some(old), Some(new));
            }
        }
    }
    let (old, new) = rest
        .find(" b/")
        .or_else(|| rest.find(' '))
        .and_then(|at| Some((rest.get(..at)?, rest.get(at + 1..)?)))
        .unwrap_or((rest, rest));
    (Some(strip(old, "a/")), Some(strip(new, "b/")))
}

/// `-12,3` / `+12` (count 1 when omitted).
fn range(part: &str, sign: char) -> Option<(u32, u32)> {
    let part = part.strip_prefix(sign)?;
    let (start, count) = part.split_once(',').unwrap_or((part, "1"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(start) || !digits(count) {
        return None;
    }
    Some((start.parse().ok()?, count.parse().ok()?))
}

/// `@@ -a,b +c,d @@ context`.
fn hunk_header(line: &str, at: usize) -> Result<Hunk, CodeError> {
    if line.starts_with("@@@") {
        return Err(error(at, "combined diffs (`@@@`, of merges) are not supported"));
    }
    let bad = || error(at, format!("malformed hunk header {line:?} (expected `@@ -a,b +c,d @@`)"));
    let rest = line.strip_prefix("@@ ").ok_or_else(bad)?;
    let (old, rest) = rest.split_once(' ').ok_or_else(bad)?;
    let (new, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let context = rest.strip_prefix("@@").ok_or_else(bad)?;
    let (old_start, old_lines) = range(old, '-').ok_or_else(bad)?;
    let (new_start, new_lines) = range(new, '+').ok_or_else(bad)?;
    if old_start.checked_add(old_lines).is_none() || new_start.checked_add(new_lines).is_none() {
        return Err(error(at, format!("hunk header {line:?} has line numbers past {}", u32::MAX)));
    }
    Ok(Hunk {
        old_start,
        old_lines,
        new_start,
        new_lines,
        header_context: context.strip_prefix(' ').unwrap_or(context).to_owned(),
        lines: Vec::new(),
    })
}

/// Reads the hunk whose header is `lines[at]`; returns it and the index
/// of the first line after it.
fn hunk(lines: &[&str], at: usize) -> Result<(Hunk, usize), CodeError> {
    let mut hunk = hunk_header(lines.get(at).copied().unwrap_or(""), at + 1)?;
    let (mut old_left, mut new_left) = (hunk.old_lines, hunk.new_lines);
    let (mut old_no, mut new_no) = (hunk.old_start, hunk.new_start);
    let header = format!("-{},{} +{},{}", hunk.old_start, hunk.old_lines, hunk.new_start, hunk.new_lines);
    let mut i = at + 1;
    loop {
        // A `\` line after the last counted line still belongs to the hunk.
        let Some(&line) = lines.get(i) else {
            if old_left == 0 && new_left == 0 {
                return Ok((hunk, i));
            }
            return Err(error(
                i,
                format!(
                    "the diff ends inside the hunk at line {} ({header}): {old_left} old and {new_left} new lines missing",
                    at + 1
                ),
            ));
        };
        if line.starts_with('\\') {
            if let Some(last) = hunk.lines.last_mut() {
                last.no_newline_at_end = true;
            }
            i += 1;
            continue;
        }
        if old_left == 0 && new_left == 0 {
            if is_stray_hunk_line(lines, i) {
                return Err(error(
                    i + 1,
                    format!("the hunk at line {} has more lines than its header ({header}) says", at + 1),
                ));
            }
            return Ok((hunk, i));
        }
        let (kind, text) = match line.as_bytes().first() {
            None => (LineKind::Context, ""),
            Some(b' ') => (LineKind::Context, line.get(1..).unwrap_or("")),
            Some(b'-') => (LineKind::Removed, line.get(1..).unwrap_or("")),
            Some(b'+') => (LineKind::Added, line.get(1..).unwrap_or("")),
            Some(_) => {
                return Err(error(
                    i + 1,
                    format!(
                        "expected a hunk line (` `, `+`, `-`) but found {line:?}: the hunk at line {} ({header}) has {old_left} old and {new_left} new lines still to come",
                        at + 1
                    ),
                ));
            }
        };
        let (uses_old, uses_new) = match kind {
            LineKind::Context => (true, true),
            LineKind::Removed => (true, false),
            LineKind::Added => (false, true),
        };
        if (uses_old && old_left == 0) || (uses_new && new_left == 0) {
            let side = if uses_old && old_left == 0 { "old" } else { "new" };
            return Err(error(
                i + 1,
                format!("the hunk at line {} has more {side} lines than its header ({header}) says", at + 1),
            ));
        }
        let mut diff_line =
            DiffLine { kind, text: text.to_owned(), old_line: None, new_line: None, no_newline_at_end: false };
        if uses_old {
            diff_line.old_line = Some(old_no);
            old_no = old_no.saturating_add(1);
            old_left -= 1;
        }
        if uses_new {
            diff_line.new_line = Some(new_no);
            new_no = new_no.saturating_add(1);
            new_left -= 1;
        }
        hunk.lines.push(diff_line);
        i += 1;
    }
}

/// Whether `lines[i]`, right after a complete hunk, looks like one more
/// line of it. Not the next file's `---`/`+++` header, and not the `-- `
/// that starts the signature `git format-patch` puts after the last hunk.
fn is_stray_hunk_line(lines: &[&str], i: usize) -> bool {
    let Some(&line) = lines.get(i) else {
        return false;
    };
    let header = line.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "));
    line.starts_with(['+', '-', ' ']) && line != "-- " && !header
}

/// Parses `git diff` or `diff -u` output into one [`FileDiff`] per file,
/// in order (see the module doc for what is understood).
///
/// # Errors
/// [`CodeError::Diff`] with the 1-based line: a malformed hunk header, a
/// hunk header before any file header, or a hunk whose lines do not match
/// its header's counts.
pub fn parse_unified(text: &str) -> Result<Vec<FileDiff>, CodeError> {
    let mut lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    let mut files = Vec::new();
    let mut current: Option<Builder> = None;
    let mut i = 0;
    while let Some(&line) = lines.get(i) {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            files.extend(current.take().map(Builder::finish));
            let (old, new) = git_paths(rest);
            current = Some(Builder::new(old, new, true));
            i += 1;
            continue;
        }
        if let (Some(old), Some(new)) =
            (line.strip_prefix("--- "), lines.get(i + 1).and_then(|next| next.strip_prefix("+++ ")))
        {
            let (old, new) = (side_path(old, "a/"), side_path(new, "b/"));
            match current.as_mut() {
                // The `---`/`+++` of a `diff --git` file.
                Some(b) if b.git_header => {
                    b.git_header = false;
                    if !b.renamed && !b.copied {
                        b.diff.old_path = old;
                        b.diff.new_path = new;
                    }
                }
                _ => {
                    files.extend(current.take().map(Builder::finish));
                    current = Some(Builder::new(old, new, false));
                }
            }
            i += 2;
            continue;
        }
        if line.starts_with("@@") {
            let Some(b) = current.as_mut() else {
                return Err(error(i + 1, "a hunk header before any file header (`diff --git` or `---`/`+++`)"));
            };
            b.git_header = false;
            let (hunk, next) = hunk(&lines, i)?;
            b.diff.hunks.push(hunk);
            i = next;
            continue;
        }
        match current.as_mut() {
            Some(b) if b.git_header => {
                if !b.git_line(line) {
                    // Anything else ends git's header (a commit message
                    // line of the next patch, say).
                    b.git_header = false;
                }
            }
            _ => {
                // Plain `diff` says only this for binary files.
                if let Some((old, new)) = binary_files(line) {
                    files.extend(current.take().map(Builder::finish));
                    let mut b = Builder::new(old, new, false);
                    b.diff.binary = true;
                    current = Some(b);
                }
            }
        }
        i += 1;
    }
    files.extend(current.map(Builder::finish));
    Ok(files)
}
