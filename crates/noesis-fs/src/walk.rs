//! The one walk of a project tree: what snapshots, the frame scan and the
//! agent's file tools look at.
//!
//! The rules: `.gitignore`, `.ignore` and `.git/info/exclude` are honoured
//! whether or not the tree is a git repository (a fresh project, an
//! unpacked archive); symbolic links are listed, never followed (a link may
//! lead out of the tree, or round in a loop); hidden files are walked (a
//! `.env.example` is part of the project); `.git` itself is not.

use std::path::Path;

use ignore::WalkBuilder;

/// A walk of `root` by the rules above, to run (`build`) or to refine
/// (`add` more roots, `threads`, `build_parallel`). A caller that wants what
/// ripgrep shows a person (hidden files skipped) says `.hidden(true)`.
pub fn walk(root: &Path) -> WalkBuilder {
    walk_skipping(root, |_| false)
}

/// Like [`walk`], also skipping every entry for which `skip` holds (and,
/// for a folder, everything in it).
pub fn walk_skipping(root: &Path, skip: impl Fn(&Path) -> bool + Send + Sync + 'static) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| e.file_name() != ".git" && !skip(e.path()));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in [
            ".gitignore",
            "src/a.rs",
            "target/x.o",
            ".git/config",
            ".env.example",
            "notes/.ignore",
            "notes/b.md",
            "notes/c.log",
            "skip/me.txt",
        ] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "").unwrap();
        }
        std::fs::write(d.path().join(".gitignore"), "target/\n").unwrap();
        std::fs::write(d.path().join("notes/.ignore"), "*.log\n").unwrap();
        d
    }

    fn files(b: &WalkBuilder, root: &Path) -> Vec<String> {
        let mut v: Vec<String> = b
            .build()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file() || t.is_symlink()))
            .map(|e| e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn ignore_files_hold_outside_git_and_hidden_files_are_walked_but_not_dot_git() {
        let d = tree();
        assert_eq!(
            files(&walk(d.path()), d.path()),
            [".env.example", ".gitignore", "notes/.ignore", "notes/b.md", "skip/me.txt", "src/a.rs"]
        );
        let mut person = walk(d.path());
        person.hidden(true);
        assert_eq!(files(&person, d.path()), ["notes/b.md", "skip/me.txt", "src/a.rs"]);
    }

    #[test]
    fn skipped_folders_take_their_contents_along() {
        let d = tree();
        let skip = d.path().join("skip");
        assert_eq!(
            files(&walk_skipping(d.path(), move |p| p == skip), d.path()),
            [".env.example", ".gitignore", "notes/.ignore", "notes/b.md", "src/a.rs"]
        );
    }

    #[test]
    fn links_are_listed_not_followed() {
        let d = tree();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(out.path(), d.path().join("src/out")).unwrap();
        std::os::unix::fs::symlink(d.path().join("src"), d.path().join("src/loop")).unwrap();
        let got = files(&walk(d.path()), d.path());
        assert!(got.contains(&"src/out".to_owned()) && got.contains(&"src/loop".to_owned()), "{got:?}");
        assert!(!got.iter().any(|f| f.contains("secret") || f.starts_with("src/loop/")), "{got:?}");
    }
}
