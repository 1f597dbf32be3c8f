//! The module search path.
//!
//! Order: `--modules DIR` (repeatable), `$COGNITIVE_MODULES_PATH` (a colon
//! list), `./cognitive/modules`, `./.cognitive/modules`,
//! `~/.cognitive/modules`, then the modules built into the binary. A path to
//! a module folder is used as it is.

use std::path::{Path, PathBuf};

use crate::builtin::BUILTIN;
use crate::loader::{LoadError, Module, Source, load_remembering};

/// An ordered list of folders that hold module folders.
#[derive(Debug, Clone, Default)]
pub struct SearchPath {
    /// The folders, first match wins.
    pub dirs: Vec<PathBuf>,
}

/// Where a module name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A folder on disk.
    Dir(PathBuf),
    /// A built-in module.
    Builtin(&'static str),
}

/// One entry of `noesis list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The folder name (the module's name by convention).
    pub name: String,
    /// Where it was found.
    pub found: Found,
}

/// A module name matched nothing on the search path.
#[derive(Debug, Clone, thiserror::Error)]
#[error("module `{name}` not found (searched: {})", searched.iter().map(|p| p.display().to_string()).chain(std::iter::once("built-in modules".to_owned())).collect::<Vec<_>>().join(", "))]
pub struct NotFound {
    /// The name asked for.
    pub name: String,
    /// The folders searched, in order.
    pub searched: Vec<PathBuf>,
}

/// The files that make a folder a module: any one of them.
pub const MARKERS: [&str; 3] = ["module.yaml", "MODULE.md", "module.md"];

/// Whether `p` is a module folder (holds one of [`MARKERS`]).
pub fn is_module_dir(p: &Path) -> bool {
    MARKERS.iter().any(|m| p.join(m).is_file())
}

impl SearchPath {
    /// Builds the search path from its parts (pure: no environment reads).
    pub fn new(explicit: &[PathBuf], env_path: Option<&str>, cwd: &Path, home: Option<&Path>) -> SearchPath {
        let mut dirs: Vec<PathBuf> = explicit.to_vec();
        if let Some(list) = env_path {
            dirs.extend(list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
        }
        dirs.push(cwd.join("cognitive/modules"));
        dirs.push(cwd.join(".cognitive/modules"));
        if let Some(h) = home {
            dirs.push(h.join(".cognitive/modules"));
        }
        SearchPath { dirs }
    }

    /// The search path for this process: `explicit` folders, then the
    /// environment, the current folder and the home folder.
    pub fn from_env(explicit: &[PathBuf]) -> SearchPath {
        let env_path = std::env::var("COGNITIVE_MODULES_PATH").ok();
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        SearchPath::new(explicit, env_path.as_deref(), &cwd, home.as_deref())
    }

    /// Resolves a module name, or a path to a module folder.
    pub fn resolve(&self, name: &str) -> Result<Found, NotFound> {
        let as_path = Path::new(name);
        if (name.contains(std::path::MAIN_SEPARATOR) || name.starts_with('.') || name.starts_with('~'))
            && as_path.is_dir()
        {
            return Ok(Found::Dir(as_path.to_path_buf()));
        }
        for d in &self.dirs {
            let candidate = d.join(name);
            if is_module_dir(&candidate) {
                return Ok(Found::Dir(candidate));
            }
        }
        if let Some((n, _)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return Ok(Found::Builtin(n));
        }
        Err(NotFound { name: name.to_owned(), searched: self.dirs.clone() })
    }

    /// Every module on the path; a name found twice is listed once, where
    /// it resolves.
    pub fn list(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        for d in &self.dirs {
            let Ok(entries) = std::fs::read_dir(d) else { continue };
            let mut names: Vec<(String, PathBuf)> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| is_module_dir(p))
                .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), p)))
                .collect();
            names.sort();
            for (name, path) in names {
                if !out.iter().any(|l| l.name == name) {
                    out.push(Listed { name, found: Found::Dir(path) });
                }
            }
        }
        for (name, _) in BUILTIN {
            if !out.iter().any(|l| l.name == *name) {
                out.push(Listed { name: (*name).to_owned(), found: Found::Builtin(name) });
            }
        }
        out
    }
}

impl Found {
    /// Loads the module found.
    pub fn load(&self) -> Result<Module, LoadError> {
        self.load_remembering(None)
    }

    /// Loads the module found, the manifest schema's verdicts remembered in
    /// the folder `memo` (a command that loads the same module again and
    /// again skips compiling that schema; the verdict is the same).
    pub fn load_remembering(&self, memo: Option<&Path>) -> Result<Module, LoadError> {
        match self {
            Found::Dir(d) => load_remembering(Source::Dir(d), memo),
            Found::Builtin(name) => {
                let files = BUILTIN.iter().find(|(n, _)| n == name).map_or(&[][..], |(_, f)| *f);
                load_remembering(Source::Embedded { name, files }, memo)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_builtins() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        for d in [&a, &b] {
            std::fs::create_dir_all(d.join("m")).unwrap();
            std::fs::write(d.join("m/module.yaml"), "name: m").unwrap();
        }
        let env = format!("{}:", b.display());
        let sp = SearchPath::new(std::slice::from_ref(&a), Some(&env), tmp.path(), None);
        assert_eq!(sp.resolve("m").unwrap(), Found::Dir(a.join("m")));
        assert_eq!(sp.resolve("code-simplifier").unwrap(), Found::Builtin("code-simplifier"));
        let err = sp.resolve("nope").unwrap_err();
        assert!(err.to_string().contains("nope"));
        assert_eq!(err.searched[0], a);
        let listed = sp.list();
        assert_eq!(listed.iter().filter(|l| l.name == "m").count(), 1);
        assert_eq!(listed.len(), 1 + BUILTIN.len());
        // A module on the path replaces a built-in of the same name (how a
        // project overrides one of `noesis solve`'s nodes).
        std::fs::create_dir_all(a.join("workflow-planner")).unwrap();
        std::fs::write(a.join("workflow-planner/module.yaml"), "name: workflow-planner").unwrap();
        assert_eq!(sp.resolve("workflow-planner").unwrap(), Found::Dir(a.join("workflow-planner")));
        assert_eq!(sp.list().iter().filter(|l| l.name == "workflow-planner").count(), 1);
        // a path to a module folder works as is
        let p = b.join("m");
        assert_eq!(sp.resolve(p.to_str().unwrap()).unwrap(), Found::Dir(p));
    }

    #[test]
    fn builtins_load() {
        for (name, _) in BUILTIN {
            let m = Found::Builtin(name).load().unwrap();
            assert_eq!(m.name, *name);
            assert!(m.data.is_some() && m.input.is_some());
        }
    }
}
