//! Paths confined to a workspace: every path a model, a diff or a
//! transcript names is resolved inside the root, or refused. `..` that climbs
//! out, an absolute path elsewhere, and a symlink (anywhere along the path)
//! that leads out are each refused with the path named; a path that does not
//! exist yet (a file to write) is checked through its nearest existing
//! ancestor.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The workspace itself cannot be resolved.
    #[error("the workspace {0} cannot be resolved: {1}")]
    Workspace(PathBuf, String),
    /// The path climbs out with `..`.
    #[error("`{0}` leaves the workspace (`..`)")]
    ParentEscape(String),
    /// An absolute path outside the workspace.
    #[error("`{0}` is outside the workspace")]
    Outside(String),
    /// A symlink along the path leads out of the workspace.
    #[error("`{path}` leads out of the workspace through a symlink (to {target})")]
    Symlink {
        /// The path given.
        path: String,
        /// Where it really leads.
        target: PathBuf,
    },
    /// The path cannot be resolved (a symlink loop, a permission problem).
    #[error("`{0}` cannot be resolved: {1}")]
    Unresolvable(String, String),
}

/// A workspace root, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace at `root` (which must exist).
    pub fn new(root: &Path) -> Result<Workspace, ConfineError> {
        let root = root.canonicalize().map_err(|e| ConfineError::Workspace(root.to_owned(), e.to_string()))?;
        Ok(Workspace { root })
    }

    /// Its resolved root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` (relative to the root, or absolute inside it) resolved inside
    /// the workspace. The result is the real path, symlinks followed.
    pub fn confine(&self, path: &str) -> Result<PathBuf, ConfineError> {
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            if !lexically_inside(&self.root, given) {
                return Err(ConfineError::Outside(path.to_owned()));
            }
            given.to_path_buf()
        } else {
            // Lexically first: `a/../../x` is refused even where `a` is a
            // symlink that would make it land inside.
            let mut depth = 0i32;
            for c in given.components() {
                match c {
                    Component::ParentDir => depth -= 1,
                    Component::Normal(_) => depth += 1,
                    _ => {}
                }
                if depth < 0 {
                    return Err(ConfineError::ParentEscape(path.to_owned()));
                }
            }
            self.root.join(given)
        };
        // The nearest ancestor that exists, resolved; the rest appended.
        let mut existing = joined.as_path();
        let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
        let real = loop {
            match existing.canonicalize() {
                Ok(real) => break real,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // A dangling symlink is not "missing": it points somewhere.
                    if std::fs::symlink_metadata(existing).is_ok() {
                        let target = std::fs::read_link(existing).unwrap_or_default();
                        return Err(ConfineError::Symlink { path: path.to_owned(), target });
                    }
                    match (existing.parent(), existing.file_name()) {
                        (Some(parent), Some(name)) => {
                            rest.push(name);
                            existing = parent;
                        }
                        _ => return Err(ConfineError::Unresolvable(path.to_owned(), e.to_string())),
                    }
                }
                Err(e) => return Err(ConfineError::Unresolvable(path.to_owned(), e.to_string())),
            }
        };
        if !real.starts_with(&self.root) {
            return Err(ConfineError::Symlink { path: path.to_owned(), target: real });
        }
        let mut out = real;
        for name in rest.into_iter().rev() {
            if name == ".." {
                return Err(ConfineError::ParentEscape(path.to_owned()));
            }
            out.push(name);
        }
        Ok(out)
    }

    /// `path` as the model should see it: relative to the root.
    pub fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }
}

/// Whether `path` is under `root` by its components alone (no `..` after
/// the root).
fn lexically_inside(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else { return false };
    !rest.components().any(|c| matches!(c, Component::ParentDir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("src")).unwrap();
        std::fs::write(ws.path().join("src/lib.rs"), "x").unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let w = Workspace::new(ws.path()).unwrap();
        (ws, outside, w)
    }

    #[test]
    fn paths_inside_resolve_new_files_included() {
        let (_ws, _o, w) = setup();
        assert_eq!(w.confine("src/lib.rs").unwrap(), w.root().join("src/lib.rs"));
        assert_eq!(w.confine("src/../src/lib.rs").unwrap(), w.root().join("src/lib.rs"));
        assert_eq!(w.confine("new/dir/file.txt").unwrap(), w.root().join("new/dir/file.txt"));
        let abs = w.root().join("src/lib.rs");
        assert_eq!(w.confine(abs.to_str().unwrap()).unwrap(), abs);
        assert_eq!(w.shown(&abs), "src/lib.rs");
    }

    #[test]
    fn parent_escapes_are_refused() {
        let (_ws, _o, w) = setup();
        for p in ["../x", "src/../../x", "a/b/../../../x", "new/../../x"] {
            assert!(matches!(w.confine(p), Err(ConfineError::ParentEscape(_))), "{p}");
        }
    }

    #[test]
    fn absolute_paths_elsewhere_are_refused() {
        let (_ws, o, w) = setup();
        let secret = o.path().join("secret");
        assert!(matches!(w.confine(secret.to_str().unwrap()), Err(ConfineError::Outside(_))));
        assert!(matches!(w.confine("/etc/passwd"), Err(ConfineError::Outside(_))));
        let sneaky = format!("{}/../{}", w.root().display(), "x");
        assert!(matches!(w.confine(&sneaky), Err(ConfineError::Outside(_))));
    }

    #[test]
    fn symlinks_that_leave_are_refused() {
        let (ws, o, w) = setup();
        std::os::unix::fs::symlink(o.path(), ws.path().join("out")).unwrap();
        std::os::unix::fs::symlink(o.path().join("secret"), ws.path().join("leak")).unwrap();
        std::os::unix::fs::symlink(o.path().join("missing"), ws.path().join("dangling")).unwrap();
        for p in ["out/secret", "leak", "out/new-file", "dangling"] {
            let e = w.confine(p).unwrap_err();
            assert!(matches!(e, ConfineError::Symlink { .. }), "{p}: {e}");
            assert!(e.to_string().contains(&format!("`{p}`")), "{e}");
        }
        // A symlink that stays inside is fine.
        std::os::unix::fs::symlink(ws.path().join("src"), ws.path().join("alias")).unwrap();
        assert_eq!(w.confine("alias/lib.rs").unwrap(), w.root().join("src/lib.rs"));
        // A loop is an error, not a hang.
        std::os::unix::fs::symlink(ws.path().join("l2"), ws.path().join("l1")).unwrap();
        std::os::unix::fs::symlink(ws.path().join("l1"), ws.path().join("l2")).unwrap();
        assert!(w.confine("l1/x").is_err());
    }
}
