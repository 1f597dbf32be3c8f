//! Which process may drive a served agent run. Every `noesis serve` and
//! `noesis mcp` process holds a lease: a file under
//! `$NOESIS_HOME/agent-leases/` locked (`flock`) for as long as the process
//! lives, and every run it starts names that lease. A lease that can be
//! locked belongs to a process that is gone — however it ended, kill -9
//! included, the system released its lock — and whoever locks it takes its
//! unfinished runs over and keeps it for its own lifetime, so two processes
//! never drive one run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

/// This process's lease, and the dead processes' leases it took over.
pub struct Leases {
    dir: PathBuf,
    own: String,
    held: Mutex<BTreeMap<String, std::fs::File>>,
}

fn valid(lease: &str) -> bool {
    !lease.is_empty() && lease.len() <= 64 && lease.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Leases {
    /// A new lease in `dir`, locked for the life of this process.
    pub fn new(dir: PathBuf) -> crate::Result<Leases> {
        let fail = |path: &std::path::Path, what: &str, e: std::io::Error| {
            crate::HostError::Message(format!("{}: cannot {what}: {e}", path.display()))
        };
        std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, "create", e))?;
        let own = uuid::Uuid::now_v7().to_string();
        let path = dir.join(&own);
        let file = std::fs::File::create(&path).map_err(|e| fail(&path, "create", e))?;
        file.lock().map_err(|e| fail(&path, "lock", e))?;
        Ok(Leases { dir, own: own.clone(), held: Mutex::new(BTreeMap::from([(own, file)])) })
    }

    /// This process's lease, for the runs it starts.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// Whether runs under `lease` may be driven here: it is ours, or its
    /// process is gone (then it is ours from now on).
    pub fn take(&self, lease: &str) -> bool {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.contains_key(lease) {
            return true;
        }
        if !valid(lease) {
            return false;
        }
        // A lease file that is gone belonged to a process that is gone too.
        let Ok(file) = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join(lease))
        else {
            return false;
        };
        match file.try_lock() {
            Ok(()) => {
                held.insert(lease.to_owned(), file);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes the lease files of gone processes that no unfinished run
    /// names any more.
    pub fn sweep(&self, named: &BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for e in entries.flatten() {
            let lease = e.file_name().to_string_lossy().into_owned();
            if lease == self.own || named.contains(&lease) || !valid(&lease) {
                continue;
            }
            if self.take(&lease) {
                // Removed while locked: no other process can take it between.
                let _ = std::fs::remove_file(e.path());
                self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&lease);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_lease_is_not_taken_and_a_released_one_is() {
        let d = tempfile::tempdir().unwrap();
        let a = Leases::new(d.path().to_owned()).unwrap();
        let b = Leases::new(d.path().to_owned()).unwrap();
        assert!(a.take(a.own()) && !b.take(a.own()), "a lease held by another holder");
        assert!(!b.take("../escape") && !b.take(""));
        let gone = a.own().to_owned();
        drop(a);
        assert!(b.take(&gone), "a released lease is taken over");
        let c = Leases::new(d.path().to_owned()).unwrap();
        assert!(!c.take(&gone), "and then held");
        drop(b);
        c.sweep(&BTreeSet::new());
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from(c.own())]);
    }
}
