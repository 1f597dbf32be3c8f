//! The git plumbing of isolated sub-agents (`[agent] isolation =
//! "worktree"`): the parent's workspace as it is now, written as a commit
//! that no branch points at; a `git worktree` of that commit for each
//! child; what the child changed, read back as bytes for
//! [`crate::merge::compare`].
//!
//! The person's branch, index and stash are never touched: the snapshot is
//! built in an index file of its own (`GIT_INDEX_FILE`) and written with
//! `commit-tree`, and the worktree's HEAD is detached. A [`Worktree`] is
//! removed when it is dropped, whatever happened to the child. Blocking:
//! call it on the blocking pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::merge::FileEdit;

/// A git command that failed, or a workspace git cannot work with.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The workspace is not inside a git repository.
    #[error(
        "isolation = \"worktree\" needs the workspace {0} to be inside a git repository (git init, or set [agent] isolation = \"none\")"
    )]
    NotARepository(PathBuf),
    /// `git` could not be started.
    #[error("git could not be started: {0}")]
    Start(#[source] std::io::Error),
    /// A git command failed.
    #[error("`git {args}` failed: {stderr}")]
    Git {
        /// Its arguments.
        args: String,
        /// What it said.
        stderr: String,
    },
    /// A file or folder of the plumbing.
    #[error("{path}: {err}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        #[source]
        err: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, WorktreeError>;

/// The author and committer of the snapshot commits (they are never on a
/// branch; git only needs a name), so a machine without `user.name` works.
const IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "noesis"),
    ("GIT_AUTHOR_EMAIL", "noesis@localhost"),
    ("GIT_COMMITTER_NAME", "noesis"),
    ("GIT_COMMITTER_EMAIL", "noesis@localhost"),
];

fn git(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<Vec<u8>> {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).args(args).envs(IDENTITY);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // What the person's environment points git at must not redirect the
    // plumbing to another repository or index.
    for v in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"] {
        if !env.iter().any(|(k, _)| *k == v) {
            cmd.env_remove(v);
        }
    }
    let out = cmd.output().map_err(WorktreeError::Start)?;
    if !out.status.success() {
        return Err(WorktreeError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out.stdout)
}

fn line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

/// The parent's workspace written as a commit.
#[derive(Debug, Clone)]
pub struct Base {
    /// The top of the repository.
    pub top: PathBuf,
    /// The workspace's path inside it (`""` or ending in `/`).
    pub prefix: String,
    /// The commit holding the workspace as it is (tracked and untracked
    /// files; ignored ones left out, as git leaves them).
    pub commit: String,
}

/// The tree of the working folder `dir` (a repository's or a worktree's),
/// every file that is not ignored, over `parent`'s tree; written through an
/// index of its own so no index in use changes.
fn tree_of(dir: &Path, parent: Option<&str>) -> Result<String> {
    let scratch = tempfile::tempdir().map_err(|err| WorktreeError::Io { path: std::env::temp_dir(), err })?;
    let index = scratch.path().join("index");
    let env = [("GIT_INDEX_FILE", index.as_path())];
    match parent {
        Some(p) => git(dir, &["read-tree", p], &env)?,
        None => git(dir, &["read-tree", "--empty"], &env)?,
    };
    // noesis's own folder (a project store, its records) is no part of
    // what a child works on, however large it is.
    git(dir, &["add", "-A", "--", ".", ":(exclude,glob)**/.noesis/**"], &env)?;
    Ok(line(&git(dir, &["write-tree"], &env)?))
}

/// Writes the workspace at `workspace` as it is now as a commit on top of
/// HEAD (no branch moves; the index is not touched).
pub fn base(workspace: &Path) -> Result<Base> {
    let top = match git(workspace, &["rev-parse", "--show-toplevel"], &[]) {
        Ok(out) => PathBuf::from(line(&out)),
        Err(WorktreeError::Git { .. }) => return Err(WorktreeError::NotARepository(workspace.to_path_buf())),
        Err(e) => return Err(e),
    };
    let prefix = line(&git(workspace, &["rev-parse", "--show-prefix"], &[])?);
    let head = git(&top, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], &[]).ok().map(|h| line(&h));
    let tree = tree_of(&top, head.as_deref())?;
    let mut args = vec!["commit-tree", tree.as_str(), "-m", "noesis: the workspace a sub-agent starts from"];
    if let Some(h) = &head {
        args.extend(["-p", h.as_str()]);
    }
    let commit = line(&git(&top, &args, &[])?);
    Ok(Base { top, prefix, commit })
}

/// A child's own checkout of a [`Base`], removed (worktree and folder)
/// when dropped.
#[derive(Debug)]
pub struct Worktree {
    top: PathBuf,
    root: PathBuf,
    workspace: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Worktree {
    /// A new worktree of `base` in a fresh temporary folder, its HEAD
    /// detached at the base commit.
    pub fn add(base: &Base) -> Result<Worktree> {
        let dir = tempfile::Builder::new()
            .prefix("noesis-worktree-")
            .tempdir()
            .map_err(|err| WorktreeError::Io { path: std::env::temp_dir(), err })?;
        // Named after its unique folder: git names the worktree after the
        // folder, and siblings are added at the same time.
        let root = dir.path().join(dir.path().file_name().unwrap_or_else(|| std::ffi::OsStr::new("checkout")));
        let shown = root.to_string_lossy().into_owned();
        git(&base.top, &["worktree", "add", "--detach", "--quiet", &shown, &base.commit], &[])?;
        let workspace = root.join(base.prefix.trim_end_matches('/'));
        Ok(Worktree { top: base.top.clone(), root, workspace, dir: Some(dir) })
    }

    /// Where the child works: the workspace's folder in the checkout.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// What the child changed in its workspace against `base`, by path
    /// relative to the workspace (ignored files left out).
    pub fn changes(&self, base: &Base) -> Result<BTreeMap<String, FileEdit>> {
        let tree = tree_of(&self.root, Some(&base.commit))?;
        let mut args = vec!["diff-tree", "-r", "-z", "--no-renames", "--name-only", base.commit.as_str(), &tree];
        let scope = base.prefix.trim_end_matches('/').to_owned();
        if !scope.is_empty() {
            args.extend(["--", scope.as_str()]);
        }
        let listed = git(&self.root, &args, &[])?;
        let mut files = BTreeMap::new();
        for path in listed.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            let path = String::from_utf8_lossy(path).into_owned();
            let blob = |rev: &str| git(&self.root, &["cat-file", "blob", &format!("{rev}:{path}")], &[]).ok();
            let edit = FileEdit { before: blob(&base.commit), after: blob(&tree) };
            let relative = path.strip_prefix(&base.prefix).unwrap_or(&path).to_owned();
            files.insert(relative, edit);
        }
        Ok(files)
    }

    /// Removes the worktree and its folder now, saying why it could not.
    pub fn remove(mut self) -> Result<()> {
        self.remove_now()
    }

    fn remove_now(&mut self) -> Result<()> {
        let Some(dir) = self.dir.take() else { return Ok(()) };
        let shown = self.root.to_string_lossy().into_owned();
        let removed = git(&self.top, &["worktree", "remove", "--force", &shown], &[]);
        // The folder goes whatever git said; a registration left behind
        // by a failed remove is pruned, as its folder is gone.
        let path = dir.path().to_path_buf();
        dir.close().map_err(|err| WorktreeError::Io { path, err })?;
        if removed.is_err() {
            git(&self.top, &["worktree", "prune"], &[])?;
        }
        Ok(())
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        // A child that failed, timed out or was cancelled leaves nothing.
        let _ = self.remove_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) -> String {
        line(&git(dir, args, &[]).unwrap())
    }

    #[test]
    fn a_child_starts_from_what_the_parent_sees_and_the_branch_and_index_stay_as_they_were() {
        let repo = tempfile::tempdir().unwrap();
        let top = repo.path();
        run(top, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::create_dir_all(top.join("ws")).unwrap();
        std::fs::write(top.join("ws/kept.txt"), "committed\n").unwrap();
        std::fs::write(top.join(".gitignore"), "*.log\n").unwrap();
        run(top, &["add", "-A"]);
        run(top, &["commit", "--quiet", "-m", "first"]);
        let head = run(top, &["rev-parse", "HEAD"]);
        // Uncommitted, untracked and ignored files in the parent.
        std::fs::write(top.join("ws/kept.txt"), "edited\n").unwrap();
        std::fs::write(top.join("ws/new.txt"), "untracked\n").unwrap();
        std::fs::write(top.join("ws/noise.log"), "ignored\n").unwrap();
        std::fs::create_dir_all(top.join("ws/.noesis")).unwrap();
        std::fs::write(top.join("ws/.noesis/noesis.db"), "the store\n").unwrap();
        let status = run(top, &["status", "--porcelain"]);

        let base = base(&top.join("ws")).unwrap();
        assert_eq!(base.prefix, "ws/");
        let wt = Worktree::add(&base).unwrap();
        let ws = wt.workspace().to_path_buf();
        assert_eq!(std::fs::read_to_string(ws.join("kept.txt")).unwrap(), "edited\n");
        assert_eq!(std::fs::read_to_string(ws.join("new.txt")).unwrap(), "untracked\n");
        assert!(!ws.join("noise.log").exists(), "ignored files stay out");
        assert!(!ws.join(".noesis").exists(), "noesis's own folder stays out");

        std::fs::write(ws.join("kept.txt"), "child\n").unwrap();
        std::fs::remove_file(ws.join("new.txt")).unwrap();
        std::fs::write(ws.join("made.txt"), "made\n").unwrap();
        let changes = wt.changes(&base).unwrap();
        let text = |b: &Option<Vec<u8>>| b.as_deref().map(|b| String::from_utf8_lossy(b).into_owned());
        let got: Vec<(String, Option<String>, Option<String>)> =
            changes.iter().map(|(p, e)| (p.clone(), text(&e.before), text(&e.after))).collect();
        assert_eq!(
            got,
            [
                ("kept.txt".to_owned(), Some("edited\n".to_owned()), Some("child\n".to_owned())),
                ("made.txt".to_owned(), None, Some("made\n".to_owned())),
                ("new.txt".to_owned(), Some("untracked\n".to_owned()), None),
            ]
        );
        drop(wt);
        assert!(!ws.exists());
        assert_eq!(run(top, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
        // The person's branch, index and working tree are as they were.
        assert_eq!(run(top, &["rev-parse", "HEAD"]), head);
        assert_eq!(run(top, &["status", "--porcelain"]), status);
        assert_eq!(run(top, &["branch", "--list"]), "* main");
    }

    #[test]
    fn a_workspace_outside_git_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = base(dir.path()).unwrap_err().to_string();
        assert!(e.contains("needs the workspace") && e.contains(&dir.path().display().to_string()), "{e}");
    }

    #[test]
    fn a_repository_without_commits_works_too() {
        let repo = tempfile::tempdir().unwrap();
        run(repo.path(), &["init", "--quiet"]);
        std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
        let base = base(repo.path()).unwrap();
        let wt = Worktree::add(&base).unwrap();
        assert_eq!(std::fs::read_to_string(wt.workspace().join("a.txt")).unwrap(), "a\n");
        wt.remove().unwrap();
    }
}
