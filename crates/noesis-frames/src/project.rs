//! Which project a directory belongs to, and how file paths are named in
//! it. Uses the `git` command line when it is there.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::FramesError;

/// A project: an id stable across machines and clones, and where it is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// `git:<first commit>` for a git repository with history, else
    /// `path:<canonical root>`.
    pub project_id: String,
    /// The repository's top level (or the directory itself), canonical.
    pub root: PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).stdin(std::process::Stdio::null()).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Identifies the project that holds `dir`: the git top level and its first
/// commit (the smallest hash when a repository has several roots), so two
/// clones of one repository on two machines share an id; otherwise the
/// canonical directory.
///
/// # Errors
/// [`FramesError::Io`] when `dir` does not exist.
pub fn identify(dir: &Path) -> Result<Project, FramesError> {
    let canonical = dir.canonicalize().map_err(|source| FramesError::Io { path: dir.to_owned(), source })?;
    if let Some(top) = git(&canonical, &["rev-parse", "--show-toplevel"]) {
        let root = PathBuf::from(top).canonicalize().unwrap_or_else(|_| canonical.clone());
        let roots = git(&root, &["rev-list", "--max-parents=0", "HEAD"]).unwrap_or_default();
        if let Some(first) = roots.lines().map(str::trim).filter(|l| !l.is_empty()).min() {
            return Ok(Project { project_id: format!("git:{first}"), root });
        }
        return Ok(Project { project_id: format!("path:{}", root.display()), root });
    }
    Ok(Project { project_id: format!("path:{}", canonical.display()), root: canonical })
}

/// The git top level that holds `dir` (canonical), found by looking for
/// `.git` (a folder, or a file naming the git folder: a worktree or a
/// submodule) upwards, without running git; with the identity of that
/// `.git` entry (device and inode), which a fresh clone in the same place
/// does not share.
/// The `.git` entry's identity: device, inode and birth time (nanoseconds;
/// 0 where the file system keeps none). The birth time tells a repository
/// made again in the same place apart even when its `.git` gets the inode
/// the old one had.
type GitIdentity = (u64, u64, u64);

fn git_top(dir: &Path) -> Option<(PathBuf, GitIdentity)> {
    use std::os::unix::fs::MetadataExt;
    dir.ancestors().find_map(|d| {
        let meta = std::fs::metadata(d.join(".git")).ok()?;
        let born = meta
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
        Some((d.to_path_buf(), (meta.dev(), meta.ino(), born)))
    })
}

/// [`identify`], remembering a git repository's id in `cache` (a JSON file
/// of root → id and the `.git` entry's identity), so a command run in a
/// known repository starts no `git` process. Only ids of repositories with
/// history are kept (one without commits gets its id when it has one);
/// a cache that cannot be read or written is only a slower start.
///
/// # Errors
/// [`FramesError::Io`] when `dir` does not exist.
pub fn identify_cached(dir: &Path, cache: &Path) -> Result<Project, FramesError> {
    let canonical = dir.canonicalize().map_err(|source| FramesError::Io { path: dir.to_owned(), source })?;
    let Some((top, identity)) = git_top(&canonical) else {
        return Ok(Project { project_id: format!("path:{}", canonical.display()), root: canonical });
    };
    let key = top.to_string_lossy().into_owned();
    let mut known: serde_json::Map<String, serde_json::Value> =
        std::fs::read(cache).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    if let Some(entry) = known.get(&key)
        && entry["dev"].as_u64() == Some(identity.0)
        && entry["ino"].as_u64() == Some(identity.1)
        && entry["born"].as_u64() == Some(identity.2)
        && let Some(id) = entry["id"].as_str()
    {
        return Ok(Project { project_id: id.to_owned(), root: top });
    }
    let project = identify(&canonical)?;
    if project.project_id.starts_with("git:") && project.root == top {
        known.insert(
            key,
            serde_json::json!({"id": project.project_id, "dev": identity.0, "ino": identity.1, "born": identity.2}),
        );
        // Only a cache: a failure to write it costs the next run a lookup.
        if let Ok(bytes) = serde_json::to_vec(&known) {
            let _ = noesis_fs::write_atomic(cache, &bytes);
        }
    }
    Ok(project)
}

/// Removes `.` and resolves `..` without touching the file system.
#[must_use]
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// How a file is named in frames and sessions: relative to `root` with `/`
/// separators when it lies inside, else its absolute path. `path` should be
/// absolute (and canonical, like `root`, when symbolic links are involved).
#[must_use]
pub fn relative_path(root: &Path, path: &Path) -> String {
    let path = normalise(path);
    match path.strip_prefix(root) {
        Ok(rel) => rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// The file behind a stored name: absolute names as they are, relative ones
/// under `root`.
#[must_use]
pub fn resolve(root: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() { p.to_owned() } else { root.join(p) }
}

/// The stored name for a path a person typed, relative to `cwd`: canonical
/// when the file exists, so symbolic links and `..` do not create a second
/// name for one file.
#[must_use]
pub fn name_for(root: &Path, cwd: &Path, typed: &Path) -> String {
    let abs = if typed.is_absolute() { typed.to_owned() } else { cwd.join(typed) };
    let abs = abs.canonicalize().unwrap_or_else(|_| normalise(&abs));
    relative_path(root, &abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_inside_and_outside_the_root() {
        let root = Path::new("/w/repo");
        assert_eq!(relative_path(root, Path::new("/w/repo/src/./a.rs")), "src/a.rs");
        assert_eq!(relative_path(root, Path::new("/w/repo/src/../b.rs")), "b.rs");
        assert_eq!(relative_path(root, Path::new("/w/other/c.rs")), "/w/other/c.rs");
        assert_eq!(resolve(root, "src/a.rs"), PathBuf::from("/w/repo/src/a.rs"));
        assert_eq!(resolve(root, "/w/other/c.rs"), PathBuf::from("/w/other/c.rs"));
        assert_eq!(name_for(root, Path::new("/w/repo/src"), Path::new("../x/y.rs")), "x/y.rs");
    }

    #[test]
    fn a_plain_folder_is_identified_by_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = identify(dir.path()).unwrap();
        // Inside a temp dir there is no repository (unless TMPDIR sits in one).
        if p.project_id.starts_with("path:") {
            assert_eq!(p.root, dir.path().canonicalize().unwrap());
        }
        assert!(identify(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_repository_is_identified_by_its_first_commit_wherever_it_is_cloned() {
        let dir = tempfile::tempdir().unwrap();
        let run = |cwd: &Path, args: &[&str]| {
            Command::new("git")
                .current_dir(cwd)
                .args(args)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        let a = dir.path().join("a");
        std::fs::create_dir_all(a.join("sub")).unwrap();
        if !run(&a, &["init", "-q"]) {
            return; // no git on this machine: the path fallback is tested above
        }
        // Before the first commit: the path.
        assert!(identify(&a).unwrap().project_id.starts_with("path:"));
        std::fs::write(a.join("f"), "x").unwrap();
        assert!(run(&a, &["add", "f"]) && run(&a, &["commit", "-qm", "one"]));
        std::fs::write(a.join("f"), "y").unwrap();
        assert!(run(&a, &["commit", "-qam", "two"]));
        let id = identify(&a.join("sub")).unwrap();
        assert!(id.project_id.starts_with("git:"), "{id:?}");
        assert_eq!(id.root, a.canonicalize().unwrap());
        assert!(run(dir.path(), &["clone", "-q", "a", "b"]));
        assert_eq!(identify(&dir.path().join("b")).unwrap().project_id, id.project_id);

        // Remembered: the same id from the cache, with no git to ask. A
        // fresh repository in the same place (another .git) is asked again.
        let cache = dir.path().join("cache/projects.json");
        assert_eq!(identify_cached(&a.join("sub"), &cache).unwrap(), id);
        assert!(cache.exists());
        let mut known: serde_json::Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        let key = a.canonicalize().unwrap().to_string_lossy().into_owned();
        known[&key]["id"] = serde_json::json!("git:remembered");
        std::fs::write(&cache, known.to_string()).unwrap();
        assert_eq!(identify_cached(&a, &cache).unwrap().project_id, "git:remembered", "no git was asked");
        std::fs::remove_dir_all(a.join(".git")).unwrap();
        assert!(run(&a, &["init", "-q"]) && run(&a, &["add", "f"]) && run(&a, &["commit", "-qm", "again"]));
        let fresh = identify_cached(&a, &cache).unwrap();
        assert!(fresh.project_id.starts_with("git:") && fresh.project_id != "git:remembered", "{fresh:?}");
        let plain = tempfile::tempdir().unwrap();
        assert!(identify_cached(plain.path(), &cache).unwrap().project_id.starts_with("path:"));
    }
}
