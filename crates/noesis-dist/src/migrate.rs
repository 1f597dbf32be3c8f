//! The file system side of `noesis_modules::migrate`: a module folder
//! migrated to v2.2 in place, with a backup of the original.
//!
//! Nothing the user has is touched until the new module exists in full and
//! has loaded as v2.2 with the same prompt and rules. The order is:
//! 1. with the module's folder locked against other processes, stage the new
//!    module in its work area ([`crate::swap`]: `<search dir>/.noesis-swap/`,
//!    the same file system as the module);
//! 2. load it and compare it with the original;
//! 3. copy the original to `<backups>/<name>-<stamp>/` (outside every search
//!    path, so the backup is never picked up as a module), under a temporary
//!    name renamed into place when complete;
//! 4. commit and swap: the staged folder and the original are exchanged in
//!    one rename, and the original goes with the work area.
//!
//! The module folder is therefore always either the complete original or the
//! complete new module, and a run cut short is finished (committed) or
//! dropped (not yet) by the next migration or install in that folder.

use std::path::{Path, PathBuf};

use noesis_modules::migrate::{MIGRATION_INPUTS, Migration, ModuleFiles};
use noesis_modules::search::is_module_dir;
use noesis_modules::{Format, LoadError, Module, load_dir};

use crate::swap::{Area, Observer, SwapError};

/// Why a module could not be migrated. Each variant reads as the step that
/// failed; the cause, when there is one, is its source.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The original does not load.
    #[error("cannot migrate {}: it does not load", dir.display())]
    DoesNotLoad {
        /// The module folder.
        dir: PathBuf,
        /// The loader's error.
        #[source]
        source: LoadError,
    },
    /// The module's files cannot be migrated.
    #[error("cannot migrate {}", dir.display())]
    Plan {
        /// The module folder.
        dir: PathBuf,
        /// Why not.
        #[source]
        source: noesis_modules::migrate::MigrateError,
    },
    /// A file of the original cannot be read.
    #[error("{}: cannot read: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        err: std::io::Error,
    },
    /// A file operation failed (`what`: "cannot create", "cannot copy", …).
    #[error("{}: {what}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What could not be done.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The module folder has no parent folder or name.
    #[error("{}: not a module folder", .0.display())]
    NotAFolder(PathBuf),
    /// The module folder's work area cannot be locked.
    #[error("{}: cannot lock", dir.display())]
    Lock {
        /// The folder of modules.
        dir: PathBuf,
        /// Why.
        #[source]
        source: SwapError,
    },
    /// Staging or recovering failed.
    #[error(transparent)]
    Swap(#[from] SwapError),
    /// The staged module does not load.
    #[error("the migrated module does not load")]
    StagedDoesNotLoad(#[source] LoadError),
    /// The staged module is not what the original was (a migration bug).
    #[error("{0}")]
    Differs(String),
    /// No folder for backups.
    #[error("cannot place the backup: set NOESIS_HOME or HOME")]
    NoBackupFolder,
    /// The backup folder would be found as a module.
    #[error(
        "the backup folder {} is inside the module search path ({}); set NOESIS_HOME to a folder outside it",
        backups.display(),
        search_dir.display()
    )]
    BackupInSearchPath {
        /// The backup folder.
        backups: PathBuf,
        /// The search folder it is inside.
        search_dir: PathBuf,
    },
    /// Copying the original failed.
    #[error("cannot back up the original")]
    BackUp(#[source] Box<MigrateError>),
    /// A step before the swap failed; the original is as it was.
    #[error("cannot migrate {}; nothing was changed", dir.display())]
    NothingChanged {
        /// The module folder.
        dir: PathBuf,
        /// The step that failed.
        #[source]
        source: Box<MigrateError>,
    },
    /// The swap failed after the backup was made.
    #[error(
        "{}: cannot move the migrated module into place; the next `noesis migrate` finishes it, and {} holds the original",
        dir.display(),
        backup.display()
    )]
    Replace {
        /// The module folder.
        dir: PathBuf,
        /// The backup of the original.
        backup: PathBuf,
        /// Why.
        #[source]
        source: SwapError,
    },
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> MigrateError + 'a {
    move |source| MigrateError::Io { path: path.to_owned(), what, source }
}

/// A module that loads and the migration its files call for.
#[derive(Debug)]
pub struct Planned {
    /// The module as it loads today.
    pub module: Module,
    /// What would change; `None` when it is v2.2 already.
    pub migration: Option<Migration>,
}

/// Where a migration puts its backup and which folders it must stay out of.
#[derive(Debug, Clone)]
pub struct Migrator {
    /// The module search path: the backup folder may not be inside it.
    pub search_dirs: Vec<PathBuf>,
    /// Where backups go (`$NOESIS_HOME/backups`); `None` when there is no
    /// home to place them in, an error only once a backup is needed.
    pub backups: Option<PathBuf>,
    /// Told when another process holds the folder, and at the stop points.
    pub observe: Option<Observer>,
}

/// Every module folder in `dirs`, shadowed ones included (each is a module
/// someone may load with a path), hidden folders skipped, in name order
/// within each folder and each real folder once.
pub fn every_module(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(d) else { continue };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) && is_module_dir(p))
            .collect();
        dirs.sort();
        for p in dirs {
            let canon = p.canonicalize().unwrap_or_else(|_| p.clone());
            if !found.iter().any(|f: &PathBuf| f.canonicalize().is_ok_and(|c| c == canon)) {
                found.push(p);
            }
        }
    }
    found
}

/// The files a migration reads, those that exist.
///
/// # Errors
/// A file that exists but cannot be read.
pub fn read_files(dir: &Path) -> Result<ModuleFiles, MigrateError> {
    let mut files = ModuleFiles::new();
    for name in MIGRATION_INPUTS {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                files.insert((*name).to_owned(), text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(MigrateError::Read { path, err }),
        }
    }
    Ok(files)
}

/// Loads the module in `dir` and works out its migration; writes nothing.
///
/// # Errors
/// The module does not load, a file cannot be read, or the files cannot be
/// migrated.
pub fn plan(dir: &Path) -> Result<Planned, MigrateError> {
    let module = load_dir(dir).map_err(|source| MigrateError::DoesNotLoad { dir: dir.to_owned(), source })?;
    let files = read_files(dir)?;
    let migration = noesis_modules::migrate::migrate(&module, &files)
        .map_err(|source| MigrateError::Plan { dir: dir.to_owned(), source })?;
    Ok(Planned { module, migration })
}

impl Migrator {
    /// Migrates the module in `dir` as `migration` says (see the module
    /// docs for the order); `note` hears what recovering the folder's work
    /// area finished. Returns the backup of the original.
    ///
    /// # Errors
    /// Any step that fails; before the swap the original is untouched.
    pub fn apply(
        &self,
        dir: &Path,
        original: &Module,
        migration: &Migration,
        stamp: &str,
        note: &mut dyn FnMut(String),
    ) -> Result<PathBuf, MigrateError> {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let folder = dir.file_name().ok_or_else(|| MigrateError::NotAFolder(dir.to_owned()))?;
        let area = Area::new(parent).observed(self.observe);
        let held = area.lock().map_err(|source| MigrateError::Lock { dir: parent.to_owned(), source })?;
        for done in held.recover()? {
            note(done);
        }
        let staged = held.stage(&folder.to_string_lossy())?;
        let result = stage(dir, staged.path(), migration)
            .and_then(|()| check(original, staged.path()))
            .and_then(|()| self.back_up(dir, &migration.name, stamp));
        let backup = match result {
            Ok(b) => b,
            Err(e) => {
                held.discard(staged);
                return Err(MigrateError::NothingChanged { dir: dir.to_owned(), source: Box::new(e) });
            }
        };
        held.replace(staged, Vec::new()).map_err(|source| MigrateError::Replace {
            dir: dir.to_owned(),
            backup: backup.clone(),
            source,
        })?;
        Ok(backup)
    }

    /// Copies the original to `<backups>/<name>-<stamp>/`, refusing a place
    /// inside the search path.
    fn back_up(&self, dir: &Path, name: &str, stamp: &str) -> Result<PathBuf, MigrateError> {
        let backups = self.backups.as_deref().ok_or(MigrateError::NoBackupFolder)?;
        std::fs::create_dir_all(backups).map_err(io(backups, "cannot create the backup folder"))?;
        let canon = backups.canonicalize().map_err(io(backups, "cannot resolve"))?;
        for d in self.search_dirs.iter().chain(std::iter::once(&dir.to_path_buf())) {
            if let Ok(sd) = d.canonicalize()
                && canon.starts_with(&sd)
            {
                return Err(MigrateError::BackupInSearchPath { backups: backups.to_owned(), search_dir: d.clone() });
            }
        }
        let target = unique(&canon.join(format!("{name}-{stamp}")));
        // Complete or clearly partial: copied under a temporary name, renamed when done.
        let partial = PathBuf::from(format!("{}.partial", target.display()));
        if let Err(e) = copy_tree(dir, &partial, &|_| false) {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(MigrateError::BackUp(Box::new(e)));
        }
        std::fs::rename(&partial, &target).map_err(io(&target, "cannot create the backup"))?;
        Ok(target)
    }
}

/// `path`, or `path-2`, `path-3`, … when it exists (two runs in one second).
fn unique(path: &Path) -> PathBuf {
    let mut candidate = path.to_path_buf();
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", path.display()));
        n += 1;
    }
    candidate
}

/// A copy of the module with the legacy files left out and the new files
/// written over it.
fn stage(dir: &Path, staged: &Path, plan: &Migration) -> Result<(), MigrateError> {
    copy_tree(dir, staged, &|rel| plan.remove.iter().any(|r| Path::new(r) == rel))?;
    for (rel, text) in &plan.write {
        let path = staged.join(rel);
        write_synced(&path, text).map_err(io(&path, "cannot write"))?;
    }
    Ok(())
}

fn write_synced(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// Copies `from` to `to` (which must not exist), skipping paths relative to
/// `from` that `skip` names. Links are copied as links.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<(), MigrateError> {
    fn walk(root: &Path, from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<(), MigrateError> {
        std::fs::create_dir_all(to).map_err(io(to, "cannot create"))?;
        for entry in std::fs::read_dir(from).map_err(io(from, "cannot read"))? {
            let entry = entry.map_err(io(from, "cannot read"))?;
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if skip(rel) {
                continue;
            }
            let target = to.join(entry.file_name());
            let kind = entry.file_type().map_err(io(&path, "cannot read"))?;
            if kind.is_dir() {
                walk(root, &path, &target, skip)?;
            } else if kind.is_symlink() {
                let link = std::fs::read_link(&path).map_err(io(&path, "cannot read"))?;
                symlink(&link, &target).map_err(io(&target, "cannot create"))?;
            } else {
                std::fs::copy(&path, &target).map_err(io(&path, "cannot copy"))?;
            }
        }
        Ok(())
    }
    walk(from, from, to, skip)
}

#[cfg(unix)]
fn symlink(link: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(link, at)
}

#[cfg(not(unix))]
fn symlink(link: &Path, at: &Path) -> std::io::Result<()> {
    std::fs::copy(link, at).map(|_| ())
}

/// The staged module must load as v2.2 and run with the original's prompt
/// and rules; anything else is a bug in the migration, caught before the
/// original is touched.
fn check(original: &Module, staged: &Path) -> Result<(), MigrateError> {
    let m = load_dir(staged).map_err(MigrateError::StagedDoesNotLoad)?;
    if m.format != Format::V22 {
        return Err(MigrateError::Differs(format!("the migrated module loads as {}, not v2.2", m.format)));
    }
    if m.prompt != original.prompt {
        return Err(MigrateError::Differs("the migrated module's prompt differs from the original's".to_owned()));
    }
    if m.policy != original.policy {
        return Err(MigrateError::Differs(format!(
            "the migrated module's rules differ: {:?} became {:?}",
            original.policy, m.policy
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p.clone());
                }
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
        out.sort();
        out
    }

    #[test]
    fn copy_tree_skips_what_it_is_told_and_keeps_links() {
        let t = tempfile::tempdir().unwrap();
        let from = t.path().join("from");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("a.txt"), "a").unwrap();
        std::fs::write(from.join("sub/b.txt"), "b").unwrap();
        std::fs::write(from.join("MODULE.md"), "old").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("a.txt", from.join("link")).unwrap();
        let to = t.path().join("to");
        copy_tree(&from, &to, &|rel| rel == Path::new("MODULE.md")).unwrap();
        let mut want = vec!["a.txt", "sub", "sub/b.txt"];
        if cfg!(unix) {
            want.insert(1, "link");
        }
        assert_eq!(tree(&to), want);
        #[cfg(unix)]
        assert_eq!(std::fs::read_link(to.join("link")).unwrap(), Path::new("a.txt"));
    }

    #[test]
    fn unique_counts_past_what_exists() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("m-1");
        assert_eq!(unique(&p), p);
        std::fs::create_dir(&p).unwrap();
        std::fs::create_dir(t.path().join("m-1-2")).unwrap();
        assert_eq!(unique(&p), t.path().join("m-1-3"));
    }

    #[test]
    fn every_module_lists_each_real_folder_once_and_skips_hidden_ones() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        for m in ["a/x", "a/.hidden", "a/y", "a/not-a-module"] {
            std::fs::create_dir_all(t.path().join(m)).unwrap();
        }
        for m in ["a/x/module.yaml", "a/.hidden/module.yaml", "a/y/MODULE.md"] {
            std::fs::write(t.path().join(m), "").unwrap();
        }
        let found = every_module(&[a.clone(), a.clone(), t.path().join("missing")]);
        assert_eq!(found, [a.join("x"), a.join("y")]);
    }

    #[test]
    fn a_backup_inside_the_search_path_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("modules/m");
        std::fs::create_dir_all(&dir).unwrap();
        let m = Migrator {
            search_dirs: vec![t.path().join("modules")],
            backups: Some(t.path().join("modules/.backups")),
            observe: None,
        };
        let e = m.back_up(&dir, "m", "s").unwrap_err();
        assert!(matches!(e, MigrateError::BackupInSearchPath { .. }), "{e}");
        let none = Migrator { backups: None, ..m };
        assert!(matches!(none.back_up(&dir, "m", "s"), Err(MigrateError::NoBackupFolder)));
    }

    #[test]
    fn a_backup_is_a_complete_copy_under_a_fresh_name() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("modules/m");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prompt.md"), "p").unwrap();
        let m = Migrator {
            search_dirs: vec![t.path().join("modules")],
            backups: Some(t.path().join("home/backups")),
            observe: None,
        };
        let first = m.back_up(&dir, "m", "s").unwrap();
        let second = m.back_up(&dir, "m", "s").unwrap();
        assert!(first.ends_with("m-s") && second.ends_with("m-s-2"), "{} {}", first.display(), second.display());
        assert_eq!(tree(&second), ["prompt.md"]);
        assert_eq!(tree(&t.path().join("home/backups")).len(), 4, "no .partial left behind");
    }
}
