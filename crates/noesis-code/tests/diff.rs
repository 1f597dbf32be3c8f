//! Unified diffs: git's headers, plain `diff -u`, line numbers, errors.

use noesis_code::{CodeError, DiffLine, FileDiff, FileStatus, Hunk, LineKind, parse_unified};
use proptest::prelude::*;

fn parse(text: &str) -> Vec<FileDiff> {
    parse_unified(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn one(text: &str) -> FileDiff {
    let mut files = parse(text);
    assert_eq!(files.len(), 1, "{files:#?}");
    files.remove(0)
}

/// `<kind><text> old new` per line, to compare hunks at a glance.
fn lines(hunk: &Hunk) -> Vec<String> {
    hunk.lines
        .iter()
        .map(|l| {
            let mark = match l.kind {
                LineKind::Context => ' ',
                LineKind::Added => '+',
                LineKind::Removed => '-',
            };
            let n = |x: Option<u32>| x.map_or("_".to_owned(), |v| v.to_string());
            let eof = if l.no_newline_at_end { " \\" } else { "" };
            format!("{mark}{} {} {}{eof}", l.text, n(l.old_line), n(l.new_line))
        })
        .collect()
}

fn error_line(text: &str) -> (usize, String) {
    match parse_unified(text) {
        Err(CodeError::Diff { line, reason }) => (line, reason),
        other => panic!("expected a diff error, got {other:?}"),
    }
}

const MODIFIED: &str = "\
diff --git a/src/calc.py b/src/calc.py
index 83db48f..bf269f4 100644
--- a/src/calc.py
+++ b/src/calc.py
@@ -1,4 +1,5 @@ import os
 def add(a, b):
-    return a - b
+    return a + b
+
 
 def mul(a, b):
@@ -10,3 +11,2 @@ def mul(a, b):
 x = 1
-y = 2
 z = 3
";

#[test]
fn git_modification_with_two_hunks() {
    let file = one(MODIFIED);
    assert_eq!(file.old_path.as_deref(), Some("src/calc.py"));
    assert_eq!(file.new_path.as_deref(), Some("src/calc.py"));
    assert_eq!(file.status, FileStatus::Modified);
    assert!(!file.binary);
    assert_eq!(file.hunks.len(), 2);
    let h = &file.hunks[0];
    assert_eq!((h.old_start, h.old_lines, h.new_start, h.new_lines), (1, 4, 1, 5));
    assert_eq!(h.header_context, "import os");
    assert_eq!(
        lines(h),
        [
            " def add(a, b): 1 1",
            "-    return a - b 2 _",
            "+    return a + b _ 2",
            "+ _ 3",
            "  3 4",
            " def mul(a, b): 4 5"
        ]
    );
    assert_eq!(lines(&file.hunks[1]), [" x = 1 10 11", "-y = 2 11 _", " z = 3 12 12"]);
    assert_eq!(file.changed_new_lines(), vec![2..=3]);
}

#[test]
fn git_new_deleted_renamed_copied_mode_and_binary() {
    let text = "\
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+one
+two
diff --git a/old.txt b/old.txt
deleted file mode 100755
index e69de29..0000000
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/a b.txt b/c d.txt
similarity index 90%
rename from a b.txt
rename to c d.txt
index 1111111..2222222 100644
--- a/a b.txt\t
+++ b/c d.txt\t
@@ -1 +1 @@
-x
+y
diff --git a/moved.rs b/place/moved.rs
similarity index 100%
rename from moved.rs
rename to place/moved.rs
diff --git a/src.rs b/copy.rs
similarity index 100%
copy from src.rs
copy to copy.rs
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/logo.png b/logo.png
index 1111111..2222222 100644
Binary files a/logo.png and b/logo.png differ
diff --git a/icon.png b/icon.png
new file mode 100644
index 0000000..3333333
GIT binary patch
literal 5
McmZ?wbhPJS00Ayv2><{9

literal 0
HcmV?d00001

diff --git a/empty b/empty
new file mode 100644
index 0000000..e69de29
";
    let files = parse(text);
    let summary: Vec<String> = files
        .iter()
        .map(|f| {
            format!(
                "{:?} {:?} -> {:?} binary={} modes={:?}/{:?} hunks={}",
                f.status,
                f.old_path,
                f.new_path,
                f.binary,
                f.old_mode,
                f.new_mode,
                f.hunks.len()
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "Added None -> Some(\"new.txt\") binary=false modes=None/Some(\"100644\") hunks=1",
            "Deleted Some(\"old.txt\") -> None binary=false modes=Some(\"100755\")/None hunks=1",
            "Renamed Some(\"a b.txt\") -> Some(\"c d.txt\") binary=false modes=None/None hunks=1",
            "Renamed Some(\"moved.rs\") -> Some(\"place/moved.rs\") binary=false modes=None/None hunks=0",
            "Copied Some(\"src.rs\") -> Some(\"copy.rs\") binary=false modes=None/None hunks=0",
            "Modified Some(\"run.sh\") -> Some(\"run.sh\") binary=false modes=Some(\"100644\")/Some(\"100755\") hunks=0",
            "Modified Some(\"logo.png\") -> Some(\"logo.png\") binary=true modes=None/None hunks=0",
            "Added None -> Some(\"icon.png\") binary=true modes=None/Some(\"100644\") hunks=0",
            "Added None -> Some(\"empty\") binary=false modes=None/Some(\"100644\") hunks=0",
        ]
    );
    assert_eq!(lines(&files[0].hunks[0]), ["+one _ 1", "+two _ 2"]);
    assert_eq!(lines(&files[1].hunks[0]), ["-gone 1 _"]);
    assert_eq!(files[0].changed_new_lines(), vec![1..=2]);
    assert!(files[1].changed_new_lines().is_empty());
    assert_eq!(files[1].path(), Some("old.txt"));
}

#[test]
fn no_newline_at_end_and_omitted_counts() {
    let text = "\
--- a/f
+++ b/f
@@ -1 +1 @@
-old
\\ No newline at end of file
+new
\\ No newline at end of file
";
    let file = one(text);
    let h = &file.hunks[0];
    assert_eq!((h.old_start, h.old_lines, h.new_start, h.new_lines), (1, 1, 1, 1));
    assert_eq!(lines(h), ["-old 1 _ \\", "+new _ 1 \\"]);
}

#[test]
fn crlf_line_ends() {
    let file = one(&MODIFIED.replace('\n', "\r\n"));
    assert_eq!(file.hunks.len(), 2);
    assert_eq!(file.new_path.as_deref(), Some("src/calc.py"));
    assert!(file.hunks.iter().flat_map(|h| &h.lines).all(|l| !l.text.ends_with('\r')));
}

#[test]
fn plain_diff_u_with_timestamps_and_epoch() {
    let text = "\
diff -ruN old/a.txt new/a.txt
--- old/a.txt\t2024-05-01 10:00:00.000000000 +0200
+++ new/a.txt\t2024-05-02 11:00:00.000000000 +0200
@@ -1,2 +1,2 @@
 keep
-before
+after
diff -ruN old/b.txt new/b.txt
--- old/b.txt\t1970-01-01 01:00:00.000000000 +0100
+++ new/b.txt\t2024-05-02 11:00:00.000000000 +0200
@@ -0,0 +1 @@
+fresh
Only in new: c.txt
Binary files old/d.bin and new/d.bin differ
";
    let files = parse(text);
    assert_eq!(files.len(), 3, "{files:#?}");
    assert_eq!(files[0].old_path.as_deref(), Some("old/a.txt"));
    assert_eq!(files[0].new_path.as_deref(), Some("new/a.txt"));
    assert_eq!(files[0].status, FileStatus::Modified);
    assert_eq!(lines(&files[0].hunks[0]), [" keep 1 1", "-before 2 _", "+after _ 2"]);
    // GNU diff -N marks a missing file with the epoch (in local time here).
    let b = &files[1];
    assert_eq!((b.status, b.old_path.as_deref(), b.new_path.as_deref()), (FileStatus::Added, None, Some("new/b.txt")));
    assert!(files[2].binary);
    assert_eq!(files[2].new_path.as_deref(), Some("new/d.bin"));
}

#[test]
fn epoch_in_utc_means_missing_file() {
    let text = "--- a/x\t1970-01-01 00:00:00.000000000 +0000\n+++ b/x\t2024-05-02 11:00:00 +0000\n@@ -0,0 +1 @@\n+x\n";
    let file = one(text);
    assert_eq!((file.status, file.old_path, file.new_path.as_deref()), (FileStatus::Added, None, Some("x")));
}

#[test]
fn quoted_paths() {
    let text = "\
diff --git \"a/tab\\there\" \"b/caf\\303\\251.txt\"
similarity index 100%
rename from \"tab\\there\"
rename to \"caf\\303\\251.txt\"
";
    let file = one(text);
    assert_eq!(file.old_path.as_deref(), Some("tab\there"));
    assert_eq!(file.new_path.as_deref(), Some("café.txt"));
    assert_eq!(file.status, FileStatus::Renamed);
}

#[test]
fn format_patch_with_message_and_signature() {
    let text = "\
From 1234 Mon Sep 17 00:00:00 2001
From: A <a@example.invalid>
Subject: [PATCH] Fix add

---
 calc.py | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
-- 
2.43.0

";
    let file = one(text);
    assert_eq!(file.new_path.as_deref(), Some("calc.py"));
    assert_eq!(file.hunks[0].lines.len(), 3);
}

#[test]
fn empty_context_lines_and_empty_input() {
    assert!(parse("").is_empty());
    assert!(parse("just some text\n").is_empty());
    // An editor stripped the lone space of an empty context line.
    let file = one("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n");
    assert_eq!(lines(&file.hunks[0]), [" a 1 1", "  2 2", "-b 3 _", "+c _ 3"]);
}

#[test]
fn errors_name_the_line() {
    let (line, reason) = error_line("--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n-a\n+b\n+c\n");
    // `+c` (line 6) is one more line than `-1,1 +1,1` allows.
    assert_eq!(line, 6, "{reason}");
    assert!(reason.contains("the hunk at line 3 has more lines than its header (-1,1 +1,1)"), "{reason}");

    let (line, reason) = error_line("--- a/f\n+++ b/f\n@@ -1,2 +1,1 @@\n-a\n-b\n-c\n+x\n");
    assert_eq!(line, 6, "{reason}");
    assert!(reason.contains("more old lines than its header"), "{reason}");

    let (line, reason) = error_line("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n");
    assert_eq!(line, 4, "{reason}");
    assert!(reason.contains("ends inside the hunk at line 3"), "{reason}");

    let (line, reason) = error_line("--- a/f\n+++ b/f\n@@ -x +1 @@\n");
    assert_eq!(line, 3);
    assert!(reason.contains("malformed hunk header"), "{reason}");

    let (line, reason) = error_line("@@ -1 +1 @@\n-a\n+b\n");
    assert_eq!(line, 1);
    assert!(reason.contains("before any file header"), "{reason}");

    let (line, reason) = error_line("--- a/f\n+++ b/f\n@@ -1,4294967295 +1 @@\n");
    assert_eq!(line, 3);
    assert!(reason.contains("past"), "{reason}");

    let (_, reason) = error_line("diff --cc f\n--- a/f\n+++ b/f\n@@@ -1,1 -1,1 +1,1 @@@\n");
    assert!(reason.contains("combined"), "{reason}");
}

#[test]
fn changed_new_lines_merges_runs() {
    let text = "--- a/f\n+++ b/f\n@@ -1,3 +1,7 @@\n+a\n+b\n x\n+c\n y\n+d\n z\n";
    assert_eq!(one(text).changed_new_lines(), vec![1..=2, 4..=4, 6..=6]);
}

/// Hunks as lines of `(kind, text)`: 0 context, 1 added, 2 removed.
type Hunks = Vec<Vec<(u8, String)>>;

/// Files as `git diff` text.
fn render(files: &[(String, Hunks)]) -> String {
    let mut out = String::new();
    for (path, hunks) in files {
        out.push_str(&format!("diff --git a/{path} b/{path}\nindex 1..2 100644\n--- a/{path}\n+++ b/{path}\n"));
        let (mut old_at, mut new_at) = (1u32, 1u32);
        for hunk in hunks {
            let old = u32::try_from(hunk.iter().filter(|(k, _)| *k != 1).count()).unwrap();
            let new = u32::try_from(hunk.iter().filter(|(k, _)| *k != 2).count()).unwrap();
            out.push_str(&format!("@@ -{old_at},{old} +{new_at},{new} @@ ctx\n"));
            for (kind, text) in hunk {
                let mark = [' ', '+', '-'][usize::from(*kind)];
                out.push_str(&format!("{mark}{text}\n"));
            }
            old_at += old + 3;
            new_at += new + 3;
        }
    }
    out
}

proptest! {
    #[test]
    fn prop_parse_never_panics(text in "\\PC{0,300}") {
        let _ = parse_unified(&text);
    }

    #[test]
    fn prop_parse_never_panics_on_diffish_text(
        parts in prop::collection::vec(
            prop_oneof![
                Just("diff --git a/x b/x\n".to_owned()),
                Just("--- a/x\n+++ b/x\n".to_owned()),
                Just("--- \"a/\\3\n+++ \"\n".to_owned()),
                "@@ -[0-9]{1,10}(,[0-9]{1,10})? \\+[0-9]{1,10}(,[0-9]{1,10})? @@[ a-z]{0,4}\n",
                "[ +\\-\\\\][a-z]{0,3}\r?\n",
                Just("\n".to_owned()),
                Just("rename from \"x\nrename to y\n".to_owned()),
                Just("Binary files  and  differ\n".to_owned()),
            ],
            0..20,
        )
    ) {
        let _ = parse_unified(&parts.concat());
    }

    #[test]
    fn prop_rendered_diffs_read_back(
        files in prop::collection::vec(
            (
                "[a-z]{1,8}(/[a-z]{1,8})?\\.(py|rs)",
                prop::collection::vec(
                    prop::collection::vec((0u8..3, "[a-z +\\-@\\\\]{0,10}"), 1..8),
                    1..4,
                ),
            ),
            1..4,
        )
    ) {
        let parsed = parse_unified(&render(&files)).unwrap();
        prop_assert_eq!(parsed.len(), files.len());
        for (file, (path, hunks)) in parsed.iter().zip(&files) {
            prop_assert_eq!(file.new_path.as_deref(), Some(path.as_str()));
            prop_assert_eq!(file.status, FileStatus::Modified);
            prop_assert_eq!(file.hunks.len(), hunks.len());
            for (hunk, lines) in file.hunks.iter().zip(hunks) {
                let got: Vec<(LineKind, &str)> = hunk.lines.iter().map(|l: &DiffLine| (l.kind, l.text.as_str())).collect();
                let want: Vec<(LineKind, &str)> = lines
                    .iter()
                    .map(|(k, t)| ([LineKind::Context, LineKind::Added, LineKind::Removed][usize::from(*k)], t.as_str()))
                    .collect();
                prop_assert_eq!(got, want);
                let mut old = hunk.old_start;
                let mut new = hunk.new_start;
                for l in &hunk.lines {
                    if l.kind != LineKind::Added { prop_assert_eq!(l.old_line, Some(old)); old += 1; }
                    if l.kind != LineKind::Removed { prop_assert_eq!(l.new_line, Some(new)); new += 1; }
                }
            }
        }
    }
}
