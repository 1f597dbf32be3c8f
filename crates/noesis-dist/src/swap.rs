//! The one way a module folder is put in place or taken away: staged,
//! committed by a journal, swapped, recovered. Installs and removals use it
//! with the lockfile as a file that changes together with the folder, and
//! `noesis migrate` with none.
//!
//! Everything happens in `DIR/.noesis-swap/` (on the modules' own file
//! system, so every move is a rename):
//!
//! * `lock` — locked (`flock`) by the one process working in `DIR`; the
//!   others wait for it, so no process recovers another's live work and
//!   read-modify-write of the lockfile is never interleaved;
//! * `TXN/new/NAME` — the folder being staged;
//! * `TXN/journal.json` — written atomically once the staged folder is
//!   complete and checked: the commit point. It names the folder, the
//!   staged folder's inode and the files to write with the swap.
//!
//! Before the journal exists nothing outside `TXN` has changed, and
//! [`Locked::recover`] drops such a `TXN`. Once it exists, recovery
//! finishes it: the swap (known done when `DIR/NAME` has the staged inode),
//! then the files (each written whole, by rename), then `TXN` goes. So after
//! any crash the folder and its files are both old or both new.
//!
//! A reader never finds `DIR/NAME` missing during a replacement: the old and
//! new folders are exchanged in one `renameat2(RENAME_EXCHANGE)` on Linux.
//! Where the system or file system cannot exchange, the old folder is moved
//! to `TXN/old/NAME` and the new one into place (two renames, with a moment
//! between them in which the folder is absent).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The work area's name inside the modules folder (hidden, no module marker).
pub const WORK: &str = ".noesis-swap";

/// Where an operation is: `waiting` (another process holds the lock),
/// `staged`, `committed`, `swapped`, `written` (the files), for progress
/// notes and for tests that stop a process at a named point.
pub type Observer = fn(&str);

/// A swap that could not be done or finished.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A journal that cannot be read or finished; left for a person.
    #[error("{journal}: {why} (the interrupted change cannot be finished; move that folder away to drop it)")]
    Journal {
        /// The journal.
        journal: PathBuf,
        /// Why.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SwapError + '_ {
    move |source| SwapError::Io { path: path.to_owned(), source }
}

/// A file written together with the swap (the lockfile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideFile {
    /// Where it goes.
    pub path: PathBuf,
    /// Its whole text.
    pub text: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Replace,
    Remove,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    version: u32,
    op: Op,
    name: String,
    /// The staged folder's inode: `DIR/NAME` with it means the swap is done.
    staged_ino: Option<u64>,
    files: Vec<SideFile>,
}

/// A modules folder and its work area.
#[derive(Debug, Clone)]
pub struct Area {
    dir: PathBuf,
    observe: Option<Observer>,
}

/// The area, locked by this process until dropped.
#[derive(Debug)]
pub struct Locked<'a> {
    area: &'a Area,
    _lock: std::fs::File,
}

/// A folder being staged: fill [`Staged::path`], then
/// [`Locked::replace`] or [`Locked::discard`].
#[derive(Debug)]
pub struct Staged {
    txn: PathBuf,
    name: String,
    path: PathBuf,
}

impl Staged {
    /// The folder to fill (its parent exists; it does not).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn inode(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

fn sync_dir(dir: &Path) {
    // Durability across a power cut only; a failure here changes nothing a
    // process crash could see.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes `text` to `path` whole (noesis-fs's atomic writer: the file
/// keeps its mode, a new one gets what any program's new file gets).
fn write_file(path: &Path, text: &str) -> Result<(), SwapError> {
    noesis_fs::write_atomic(path, text.as_bytes()).map_err(|e| SwapError::Io { path: e.path, source: e.source })
}

/// Exchanges two existing paths in one step, or says it cannot.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn exchange(a: &Path, b: &Path) -> std::io::Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(true),
        // The kernel or the file system cannot exchange.
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<bool> {
    Ok(false)
}

impl Area {
    /// The area of modules folder `dir`.
    pub fn new(dir: &Path) -> Area {
        Area { dir: dir.to_owned(), observe: None }
    }

    /// The same area, telling `observe` where each operation is.
    #[must_use]
    pub fn observed(mut self, observe: Option<Observer>) -> Area {
        self.observe = observe;
        self
    }

    fn point(&self, name: &str) {
        if let Some(f) = self.observe {
            f(name);
        }
    }

    fn work(&self) -> PathBuf {
        self.dir.join(WORK)
    }

    /// Whether a crash left anything to finish or drop here.
    fn pending(&self) -> bool {
        let txns = std::fs::read_dir(self.work()).into_iter().flatten().flatten().any(|e| e.path().is_dir());
        let legacy = std::fs::read_dir(&self.dir).into_iter().flatten().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(".old-") || name.starts_with(".staging-") || name == ".noesis-migrate"
        });
        txns || legacy
    }

    /// [`Locked::recover`] when a crash left something here; otherwise
    /// nothing, not even the work area, is made.
    pub fn recover(&self) -> Result<Vec<String>, SwapError> {
        if !self.pending() {
            return Ok(Vec::new());
        }
        self.lock()?.recover()
    }

    /// Locks the area for this process, waiting while another holds it.
    pub fn lock(&self) -> Result<Locked<'_>, SwapError> {
        let work = self.work();
        std::fs::create_dir_all(&work).map_err(io(&work))?;
        let path = work.join("lock");
        let file =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                self.point("waiting");
                file.lock().map_err(io(&path))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        Ok(Locked { area: self, _lock: file })
    }
}

impl Locked<'_> {
    fn dir(&self) -> &Path {
        &self.area.dir
    }

    /// Finishes every committed change an earlier process left, drops every
    /// uncommitted one (and what older versions of noesis left: `.old-NAME`,
    /// `.staging-NAME`, `.noesis-migrate`). Says what it did.
    pub fn recover(&self) -> Result<Vec<String>, SwapError> {
        let mut done = Vec::new();
        let work = self.area.work();
        let mut txns: Vec<PathBuf> = std::fs::read_dir(&work)
            .map_err(io(&work))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        txns.sort();
        for txn in txns {
            let journal = txn.join("journal.json");
            match std::fs::read(&journal) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::remove_dir_all(&txn).map_err(io(&txn))?;
                    done.push(format!("dropped {}, an interrupted change that had not started", txn.display()));
                }
                Err(e) => return Err(io(&journal)(e)),
                Ok(bytes) => {
                    let j: Journal = serde_json::from_slice(&bytes)
                        .map_err(|e| SwapError::Journal { journal: journal.clone(), why: e.to_string() })?;
                    if j.version != 1 {
                        return Err(SwapError::Journal { journal, why: format!("version {} is unknown", j.version) });
                    }
                    self.apply(&txn, &j)?;
                    done.push(match j.op {
                        Op::Replace => format!("finished putting `{}` in place (an interrupted change)", j.name),
                        Op::Remove => format!("finished removing `{}` (an interrupted change)", j.name),
                    });
                }
            }
        }
        self.legacy(&mut done)?;
        Ok(done)
    }

    /// What the two-rename schemes of earlier versions left.
    fn legacy(&self, done: &mut Vec<String>) -> Result<(), SwapError> {
        let Ok(entries) = std::fs::read_dir(self.dir()) else { return Ok(()) };
        for e in entries.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            if let Some(name) = file.strip_prefix(".old-") {
                let target = self.dir().join(name);
                if target.exists() {
                    std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
                } else {
                    std::fs::rename(e.path(), &target).map_err(io(&target))?;
                    done.push(format!(
                        "put `{name}` back: an install was interrupted before the new copy was in place"
                    ));
                }
            } else if file.starts_with(".staging-") {
                std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
            } else if file == ".noesis-migrate" {
                for old in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                    for m in std::fs::read_dir(old.path().join("old")).into_iter().flatten().flatten() {
                        let home = self.dir().join(m.file_name());
                        if !home.exists() {
                            std::fs::rename(m.path(), &home).map_err(io(&home))?;
                            done.push(format!("{} was restored from an interrupted migration", home.display()));
                        }
                    }
                }
                std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
            }
        }
        Ok(())
    }

    /// A new transaction for folder `name`.
    pub fn stage(&self, name: &str) -> Result<Staged, SwapError> {
        let work = self.area.work();
        let txn = tempfile::Builder::new().prefix("txn-").tempdir_in(&work).map_err(io(&work))?.keep();
        let new = txn.join("new");
        std::fs::create_dir_all(&new).map_err(io(&new))?;
        Ok(Staged { path: new.join(name), txn, name: name.to_owned() })
    }

    /// Drops a staged folder that will not be used.
    pub fn discard(&self, staged: Staged) {
        let _ = std::fs::remove_dir_all(&staged.txn);
    }

    fn commit(&self, txn: &Path, journal: &Journal) -> Result<(), SwapError> {
        let path = txn.join("journal.json");
        let text = serde_json::to_string(journal)
            .map_err(|e| SwapError::Journal { journal: path.clone(), why: e.to_string() })?;
        write_file(&path, &text)?;
        self.area.point("committed");
        Ok(())
    }

    /// Puts the staged folder in place of `DIR/NAME` (if any) and writes
    /// `files`, as one change. Whether a folder was replaced.
    pub fn replace(&self, staged: Staged, files: Vec<SideFile>) -> Result<bool, SwapError> {
        self.area.point("staged");
        let Some(ino) = inode(&staged.path) else {
            let e = std::io::Error::new(std::io::ErrorKind::NotFound, "the staged folder is missing");
            return Err(io(&staged.path)(e));
        };
        let replaced = std::fs::symlink_metadata(self.dir().join(&staged.name)).is_ok();
        let journal = Journal { version: 1, op: Op::Replace, name: staged.name.clone(), staged_ino: Some(ino), files };
        self.commit(&staged.txn, &journal)?;
        self.apply(&staged.txn, &journal)?;
        Ok(replaced)
    }

    /// Takes `DIR/NAME` away (if it is there) and writes `files`, as one
    /// change. Whether a folder was there.
    pub fn remove(&self, name: &str, files: Vec<SideFile>) -> Result<bool, SwapError> {
        let staged = self.stage(name)?;
        self.area.point("staged");
        let was = std::fs::symlink_metadata(self.dir().join(name)).is_ok();
        let journal = Journal { version: 1, op: Op::Remove, name: name.to_owned(), staged_ino: None, files };
        self.commit(&staged.txn, &journal)?;
        self.apply(&staged.txn, &journal)?;
        Ok(was)
    }

    /// Carries a committed change through; safe to repeat after a crash at
    /// any point of it.
    fn apply(&self, txn: &Path, j: &Journal) -> Result<(), SwapError> {
        let target = self.dir().join(&j.name);
        let staged = txn.join("new").join(&j.name);
        let old = txn.join("old").join(&j.name);
        let moved = |from: &Path, to: &Path| -> Result<(), SwapError> {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::rename(from, to).map_err(io(to))
        };
        match j.op {
            Op::Replace if j.staged_ino.is_some() && inode(&target) == j.staged_ino => {}
            Op::Replace => {
                if inode(&staged) != j.staged_ino {
                    return Err(SwapError::Journal {
                        journal: txn.join("journal.json"),
                        why: format!("neither {} nor {} is the staged folder", target.display(), staged.display()),
                    });
                }
                let there = std::fs::symlink_metadata(&target).is_ok();
                if !there {
                    moved(&staged, &target)?;
                } else if !exchange(&staged, &target).map_err(io(&target))? {
                    moved(&target, &old)?;
                    self.area.point("moved-aside");
                    moved(&staged, &target)?;
                }
            }
            Op::Remove => {
                if std::fs::symlink_metadata(&target).is_ok() {
                    moved(&target, &old)?;
                }
            }
        }
        sync_dir(self.dir());
        self.area.point("swapped");
        for f in &j.files {
            write_file(&f.path, &f.text)?;
        }
        self.area.point("written");
        std::fs::remove_dir_all(txn).map_err(io(txn))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(dir: &Path, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("module.yaml"), text).unwrap();
    }

    fn read(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join("module.yaml")).ok()
    }

    fn work_left(dir: &Path) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(dir.join(WORK))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        left
    }

    #[test]
    fn a_replacement_and_a_removal_carry_their_files_and_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let area = Area::new(d.path());
        module(&d.path().join("m"), "old");
        let lock = d.path().join("side.lock");
        let locked = area.lock().unwrap();
        let staged = locked.stage("m").unwrap();
        module(staged.path(), "new");
        let ino = inode(staged.path());
        let side = vec![SideFile { path: lock.clone(), text: "one".into() }];
        assert!(locked.replace(staged, side).unwrap());
        assert_eq!((read(&d.path().join("m")).as_deref(), inode(&d.path().join("m"))), (Some("new"), ino));
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "one");
        assert!(locked.remove("m", vec![SideFile { path: lock.clone(), text: "two".into() }]).unwrap());
        assert!(!d.path().join("m").exists());
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "two");
        assert_eq!(work_left(d.path()), ["lock"]);
    }

    /// A journal is the commit point: without it the change is dropped;
    /// with it, whatever part was done, recovery finishes it.
    #[test]
    fn recovery_drops_what_was_not_committed_and_finishes_what_was() {
        let d = tempfile::tempdir().unwrap();
        let area = Area::new(d.path());
        let side = d.path().join("side.lock");
        module(&d.path().join("m"), "old");
        std::fs::write(&side, "old").unwrap();
        let locked = area.lock().unwrap();
        // Staged, never committed.
        let staged = locked.stage("m").unwrap();
        module(staged.path(), "half");
        // Committed, nothing applied: written by hand as a crash leaves it.
        let committed = locked.stage("m").unwrap();
        module(committed.path(), "new");
        let j = Journal {
            version: 1,
            op: Op::Replace,
            name: "m".into(),
            staged_ino: inode(committed.path()),
            files: vec![SideFile { path: side.clone(), text: "new".into() }],
        };
        locked.commit(&committed.txn, &j).unwrap();
        let done = locked.recover().unwrap();
        assert_eq!(done.len(), 2, "{done:?}");
        assert_eq!(read(&d.path().join("m")).as_deref(), Some("new"));
        assert_eq!(std::fs::read_to_string(&side).unwrap(), "new");
        assert_eq!(work_left(d.path()), ["lock"]);
        // Committed and swapped, files not yet written: finished again.
        let again = locked.stage("m").unwrap();
        module(again.path(), "newer");
        let j = Journal {
            version: 1,
            op: Op::Replace,
            name: "m".into(),
            staged_ino: inode(again.path()),
            files: vec![SideFile { path: side.clone(), text: "newer".into() }],
        };
        locked.commit(&again.txn, &j).unwrap();
        std::fs::rename(d.path().join("m"), again.txn.join("old-copy")).unwrap();
        std::fs::rename(again.path(), d.path().join("m")).unwrap();
        locked.recover().unwrap();
        assert_eq!(read(&d.path().join("m")).as_deref(), Some("newer"));
        assert_eq!(std::fs::read_to_string(&side).unwrap(), "newer");
        assert_eq!(work_left(d.path()), ["lock"]);
    }

    /// Issue 31: between moving the old folder aside and the new one in,
    /// a reader found no module and fell back to a built-in of the same
    /// name. Here the two are exchanged in one step: the point between two
    /// renames is never reached.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_replacement_is_one_exchange_with_no_moment_without_the_folder() {
        static ASIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        fn watch(point: &str) {
            if point == "moved-aside" {
                ASIDE.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let d = tempfile::tempdir().unwrap();
        module(&d.path().join("m"), "old");
        let area = Area::new(d.path()).observed(Some(watch));
        let locked = area.lock().unwrap();
        let staged = locked.stage("m").unwrap();
        module(staged.path(), "new");
        locked.replace(staged, Vec::new()).unwrap();
        assert_eq!(read(&d.path().join("m")).as_deref(), Some("new"));
        assert!(!ASIDE.load(std::sync::atomic::Ordering::SeqCst), "replaced by two renames");
    }

    #[test]
    fn the_lock_is_held_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let area = Area::new(d.path());
        let held = area.lock().unwrap();
        let other = std::fs::OpenOptions::new().write(true).open(d.path().join(WORK).join("lock")).unwrap();
        assert!(matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        drop(held);
        assert!(other.try_lock().is_ok());
    }

    #[test]
    fn a_new_side_file_gets_the_mode_of_any_new_file() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        std::fs::write(d.path().join("plain"), "x").unwrap();
        write_file(&d.path().join("written"), "x").unwrap();
        assert_eq!(mode(&d.path().join("written")), mode(&d.path().join("plain")));
        std::fs::set_permissions(d.path().join("written"), std::fs::Permissions::from_mode(0o640)).unwrap();
        write_file(&d.path().join("written"), "y").unwrap();
        assert_eq!(mode(&d.path().join("written")), 0o640);
    }
}
