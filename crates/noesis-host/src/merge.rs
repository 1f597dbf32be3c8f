//! What sub-agents that worked side by side did to the files, compared
//! before anything reaches the parent's workspace. Pure: the changes come
//! in as bytes (what each file held at the base and after each child),
//! the verdict goes out as data; the git plumbing that gathers them and
//! the writes that apply them live in [`crate::worktree`] and the
//! `sub_agent` tool.
//!
//! The rule: a file one child changed is taken as that child left it; a
//! text file several children changed is merged when their hunks (the
//! base's line ranges each replaced) do not overlap, and is a conflict,
//! left as it was, when any two do. A file several children created,
//! deleted or changed as binary is a conflict as a whole. Touching is
//! overlapping for an insertion: two children adding lines at the same
//! place, or one adding where another replaced, cannot be ordered.
//!
//! ```
//! use std::collections::BTreeMap;
//! use noesis_host::merge::{Child, FileEdit, compare};
//!
//! let edit = |after: &str| FileEdit { before: Some(b"a\nb\nc\n".to_vec()), after: Some(after.as_bytes().to_vec()) };
//! let one = Child { name: "one".into(), files: BTreeMap::from([("f.txt".into(), edit("A\nb\nc\n"))]) };
//! let two = Child { name: "two".into(), files: BTreeMap::from([("f.txt".into(), edit("a\nb\nC\n"))]) };
//! let verdict = compare(&[one, two]);
//! assert!(verdict.conflicts.is_empty());
//! assert_eq!(verdict.merged["f.txt"].after.as_deref(), Some(&b"A\nb\nC\n"[..]));
//! ```

use std::collections::BTreeMap;

/// What one child did to one file, against the base: what it held before
/// and after (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEdit {
    /// The base's bytes.
    pub before: Option<Vec<u8>>,
    /// The child's bytes.
    pub after: Option<Vec<u8>>,
}

/// One child's changes, by path relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// How the report names it (its call id).
    pub name: String,
    /// The files it changed.
    pub files: BTreeMap<String, FileEdit>,
}

/// A file to write into the parent's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// What it must hold now for the write to be safe (the base).
    pub before: Option<Vec<u8>>,
    /// What it holds after (`None`: removed).
    pub after: Option<Vec<u8>>,
    /// The children whose changes it carries.
    pub children: Vec<String>,
}

/// Changes of several children that cannot both be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The base's lines the sides replaced, 1-based and inclusive (an
    /// insertion before line `n` is `(n, n - 1)`); `None`: the whole file.
    pub lines: Option<(usize, usize)>,
    /// What the base held there.
    pub base: String,
    /// Each child's version of it, by child name.
    pub sides: Vec<(String, String)>,
}

/// The verdict over all children.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Comparison {
    /// Files to write, by path.
    pub merged: BTreeMap<String, Merged>,
    /// Files left as they were, by path, with what clashed.
    pub conflicts: BTreeMap<String, Vec<Clash>>,
}

impl Comparison {
    /// The children a conflict of `path` involves.
    pub fn conflicting(&self, path: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .conflicts
            .get(path)
            .into_iter()
            .flatten()
            .flat_map(|c| c.sides.iter().map(|(n, _)| n.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// A change of a text file: the base's lines `start..end` (0-based) made
/// `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk {
    start: usize,
    end: usize,
    text: String,
}

/// Whether two hunks cannot both be taken: their ranges share a line, or
/// one is an insertion at or inside the other's range.
fn overlaps(a: &Hunk, b: &Hunk) -> bool {
    if a.start == a.end || b.start == b.end {
        a.start <= b.end && b.start <= a.end
    } else {
        a.start < b.end && b.start < a.end
    }
}

/// Text as this module merges it: UTF-8 without NUL bytes.
fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok().filter(|s| !s.contains('\0'))
}

/// The hunks that make `before` into `after`, each a run of lines that
/// differ (no context lines).
fn hunks(before: &str, after: &str) -> Vec<Hunk> {
    let diff = similar::TextDiff::from_lines(before, after);
    let new_lines = diff.new_slices();
    let mut out: Vec<Hunk> = Vec::new();
    for op in diff.ops() {
        if op.tag() == similar::DiffTag::Equal {
            continue;
        }
        let (old, new) = (op.old_range(), op.new_range());
        let added: String = new_lines[new].concat();
        // A deletion followed by an insertion is one replacement.
        match out.last_mut() {
            Some(last) if last.end == old.start => {
                last.end = old.end;
                last.text.push_str(&added);
            }
            _ => out.push(Hunk { start: old.start, end: old.end, text: added }),
        }
    }
    out
}

/// `before` with `hunks` (sorted, none overlapping) applied.
fn apply(before: &str, hunks: &[&Hunk]) -> String {
    let lines: Vec<&str> = before.split_inclusive('\n').collect();
    let mut out = String::with_capacity(before.len());
    let mut at = 0;
    for h in hunks {
        out.push_str(&lines[at..h.start].concat());
        out.push_str(&h.text);
        at = h.end;
    }
    out.push_str(&lines[at..].concat());
    out
}

/// How a clash shows a side of a whole file.
fn shown(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "(absent)".to_owned(),
        Some(b) => text(b).map_or_else(|| format!("(binary, {} bytes)", b.len()), str::to_owned),
    }
}

/// Compares the children's changes: what can be merged and what clashes.
pub fn compare(children: &[Child]) -> Comparison {
    let mut by_path: BTreeMap<&str, Vec<(&str, &FileEdit)>> = BTreeMap::new();
    for child in children {
        for (path, edit) in &child.files {
            if edit.before != edit.after {
                by_path.entry(path).or_default().push((&child.name, edit));
            }
        }
    }
    let mut verdict = Comparison::default();
    for (path, edits) in by_path {
        let before = edits[0].1.before.clone();
        let names = || edits.iter().map(|(n, _)| (*n).to_owned()).collect::<Vec<_>>();
        if let [(_, only)] = edits.as_slice() {
            verdict.merged.insert(path.to_owned(), Merged { before, after: only.after.clone(), children: names() });
            continue;
        }
        // Children that started from different versions of the file (it
        // changed between their starts) share no base to merge onto.
        let same_base = edits.iter().all(|(_, e)| e.before == before);
        let base = before.as_deref().and_then(text).filter(|_| same_base);
        let afters: Option<Vec<&str>> = edits.iter().map(|(_, e)| e.after.as_deref().and_then(text)).collect();
        let (Some(base), Some(afters)) = (base, afters) else {
            // Created, deleted or binary on some side: only the whole file
            // can be compared, and it differs on every side.
            let sides = edits.iter().map(|(n, e)| ((*n).to_owned(), shown(e.after.as_deref()))).collect();
            verdict
                .conflicts
                .insert(path.to_owned(), vec![Clash { lines: None, base: shown(before.as_deref()), sides }]);
            continue;
        };
        let each: Vec<(&str, Vec<Hunk>)> = edits.iter().zip(&afters).map(|((n, _), a)| (*n, hunks(base, a))).collect();
        let base_lines: Vec<&str> = base.split_inclusive('\n').collect();
        let mut clashes = Vec::new();
        for (i, (a_name, a_hunks)) in each.iter().enumerate() {
            for (b_name, b_hunks) in &each[i + 1..] {
                for a in a_hunks {
                    for b in b_hunks.iter().filter(|b| overlaps(a, b)) {
                        let (start, end) = (a.start.min(b.start), a.end.max(b.end));
                        clashes.push(Clash {
                            lines: Some((start + 1, end)),
                            base: base_lines[start..end].concat(),
                            sides: vec![((*a_name).to_owned(), a.text.clone()), ((*b_name).to_owned(), b.text.clone())],
                        });
                    }
                }
            }
        }
        if !clashes.is_empty() {
            verdict.conflicts.insert(path.to_owned(), clashes);
            continue;
        }
        let mut all: Vec<&Hunk> = each.iter().flat_map(|(_, h)| h).collect();
        all.sort_by_key(|h| (h.start, h.end));
        let after = apply(base, &all).into_bytes();
        verdict.merged.insert(path.to_owned(), Merged { before, after: Some(after), children: names() });
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(name: &str, files: &[(&str, Option<&str>, Option<&str>)]) -> Child {
        let bytes = |s: &Option<&str>| s.map(|s| s.as_bytes().to_vec());
        Child {
            name: name.into(),
            files: files
                .iter()
                .map(|(p, b, a)| ((*p).to_owned(), FileEdit { before: bytes(b), after: bytes(a) }))
                .collect(),
        }
    }

    const BASE: &str = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";

    fn after(verdict: &Comparison, path: &str) -> Option<String> {
        verdict.merged[path].after.as_ref().map(|b| String::from_utf8(b.clone()).unwrap())
    }

    #[test]
    fn different_files_are_each_taken_as_their_child_left_them() {
        let v = compare(&[
            child("a", &[("a.txt", Some("x\n"), Some("y\n"))]),
            child("b", &[("b.txt", None, Some("new\n"))]),
            child("c", &[("c.bin", Some("\0old"), None)]),
        ]);
        assert!(v.conflicts.is_empty(), "{v:?}");
        assert_eq!(after(&v, "a.txt").as_deref(), Some("y\n"));
        assert_eq!(after(&v, "b.txt").as_deref(), Some("new\n"));
        assert_eq!(after(&v, "c.bin"), None);
        assert_eq!(v.merged["c.bin"].before.as_deref(), Some(&b"\0old"[..]));
        assert_eq!(v.merged["b.txt"].children, ["b"]);
    }

    #[test]
    fn hunks_of_one_file_that_do_not_overlap_are_merged() {
        let v = compare(&[
            child("a", &[("f", Some(BASE), Some("one\n2\n3\n4\n5\n6\n7\n8\n9\n"))]),
            child("b", &[("f", Some(BASE), Some("1\n2\n3\n4\n5\n6\n7\n8\nnine\nten\n"))]),
            child("c", &[("f", Some(BASE), Some("1\n2\n3\n4\n5\n6\n7\n9\n"))]),
        ]);
        assert!(v.conflicts.is_empty(), "{v:?}");
        assert_eq!(after(&v, "f").as_deref(), Some("one\n2\n3\n4\n5\n6\n7\nnine\nten\n"));
        assert_eq!(v.merged["f"].children, ["a", "b", "c"]);
    }

    #[test]
    fn overlapping_hunks_are_a_conflict_with_both_sides_and_nothing_of_the_file_is_merged() {
        let v = compare(&[
            child("a", &[("f", Some(BASE), Some("1\nTWO\n3\n4\n5\n6\n7\n8\n9\n"))]),
            child("b", &[("f", Some(BASE), Some("1\n2 and 3\n4\n5\n6\n7\n8\nNINE\n"))]),
        ]);
        assert!(v.merged.is_empty(), "{v:?}");
        let clashes = &v.conflicts["f"];
        assert_eq!(clashes.len(), 1, "the far hunk does not clash: {clashes:?}");
        assert_eq!(clashes[0].lines, Some((2, 3)));
        assert_eq!(clashes[0].base, "2\n3\n");
        assert_eq!(clashes[0].sides, [("a".to_owned(), "TWO\n".to_owned()), ("b".to_owned(), "2 and 3\n".to_owned())]);
        assert_eq!(v.conflicting("f"), ["a", "b"]);
    }

    #[test]
    fn insertions_clash_at_the_same_place_or_at_the_edge_of_a_change_but_not_elsewhere() {
        let insert_at = |k: usize, what: &str| {
            let mut lines: Vec<String> = BASE.lines().map(|l| format!("{l}\n")).collect();
            lines.insert(k, format!("{what}\n"));
            lines.concat()
        };
        let same = compare(&[
            child("a", &[("f", Some(BASE), Some(&insert_at(3, "x")))]),
            child("b", &[("f", Some(BASE), Some(&insert_at(3, "y")))]),
        ]);
        assert_eq!(same.conflicts["f"][0].lines, Some((4, 3)), "an insertion before line 4");
        let edge = compare(&[
            child("a", &[("f", Some(BASE), Some(&insert_at(3, "x")))]),
            child("b", &[("f", Some(BASE), Some("1\n2\n3\nFOUR\n5\n6\n7\n8\n9\n"))]),
        ]);
        assert!(edge.conflicts.contains_key("f"), "{edge:?}");
        let apart = compare(&[
            child("a", &[("f", Some(BASE), Some(&insert_at(1, "x")))]),
            child("b", &[("f", Some(BASE), Some(&insert_at(8, "y")))]),
        ]);
        assert_eq!(after(&apart, "f").as_deref(), Some("1\nx\n2\n3\n4\n5\n6\n7\n8\ny\n9\n"));
    }

    #[test]
    fn a_file_created_deleted_or_binary_on_two_sides_clashes_whole() {
        let v = compare(&[
            child(
                "a",
                &[("new", None, Some("mine\n")), ("gone", Some("x\n"), None), ("bin", Some("\0a"), Some("\0b"))],
            ),
            child(
                "b",
                &[
                    ("new", None, Some("theirs\n")),
                    ("gone", Some("x\n"), Some("y\n")),
                    ("bin", Some("\0a"), Some("\0c")),
                ],
            ),
        ]);
        assert!(v.merged.is_empty(), "{v:?}");
        assert_eq!(
            v.conflicts["new"][0].sides,
            [("a".to_owned(), "mine\n".to_owned()), ("b".to_owned(), "theirs\n".to_owned())]
        );
        assert_eq!(v.conflicts["new"][0].base, "(absent)");
        assert_eq!(v.conflicts["gone"][0].sides[0].1, "(absent)");
        assert_eq!(v.conflicts["bin"][0].sides[1].1, "(binary, 2 bytes)");
        assert!(v.conflicts.values().all(|c| c[0].lines.is_none()));
    }

    #[test]
    fn children_that_saw_different_versions_of_a_file_clash_whole() {
        let v = compare(&[
            child("a", &[("f", Some("a\nb\n"), Some("A\nb\n"))]),
            child("b", &[("f", Some("a\nb\nc\n"), Some("a\nb\nC\n"))]),
        ]);
        assert!(v.merged.is_empty(), "{v:?}");
        assert_eq!(v.conflicts["f"][0].lines, None);
    }

    #[test]
    fn a_file_a_child_left_as_it_was_is_no_change() {
        let v =
            compare(&[child("a", &[("f", Some("x\n"), Some("x\n"))]), child("b", &[("f", Some("x\n"), Some("y\n"))])]);
        assert_eq!(v.merged["f"].children, ["b"]);
    }

    #[test]
    fn a_last_line_without_a_newline_is_kept_as_it_is() {
        let v = compare(&[
            child("a", &[("f", Some("a\nb\nc"), Some("A\nb\nc"))]),
            child("b", &[("f", Some("a\nb\nc"), Some("a\nb\nC"))]),
        ]);
        assert_eq!(after(&v, "f").as_deref(), Some("A\nb\nC"));
    }
}
