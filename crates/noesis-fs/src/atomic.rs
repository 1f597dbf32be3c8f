//! Files written whole: a temporary file in the same folder, flushed to disk,
//! then renamed over the target. A reader (or a second writer) sees the old
//! file or the new one, never half of one, and a crash or an error at any
//! point leaves the old file as it was.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A file that could not be written; the old one, if any, is untouched.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct WriteError {
    /// The file or folder the failing step was about.
    pub path: PathBuf,
    /// What the system said.
    #[source]
    pub source: std::io::Error,
}

/// Writes `bytes` to `path` atomically (see the module's rules), making its
/// folder if needed. An existing file keeps its permissions (an executable
/// script stays executable); a new one gets what any program's new file gets
/// (0666 less the umask), not a temporary file's private 0600.
///
/// # Errors
/// [`WriteError`] naming the folder or the file when a step fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// Like [`write_atomic`], with the content written by `fill` into the
/// temporary file (a copy from another file, a serialiser writing as it
/// goes). Nothing `fill` wrote is visible unless it returns `Ok`.
///
/// # Errors
/// [`WriteError`] naming the folder or the file when a step fails,
/// `fill`'s included.
pub fn write_atomic_with(path: &Path, fill: impl FnOnce(&mut File) -> std::io::Result<()>) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt;
    let at = |p: &Path| {
        let p = p.to_owned();
        move |source| WriteError { path: p, source }
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    std::fs::create_dir_all(dir).map_err(at(dir))?;
    let existing = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| m.permissions());
    // Hidden and ending in `.tmp`, so a reader listing the folder meanwhile
    // (a replayer looking for `*.json`) skips it; unique, so concurrent
    // writers of one file do not clash. Dropped unpersisted, it is removed.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(at(dir))?;
    if let Some(p) = existing {
        tmp.as_file().set_permissions(p).map_err(at(path))?;
    }
    fill(tmp.as_file_mut()).map_err(at(path))?;
    // On disk before the rename: after a crash the name points at the old
    // content or the whole new content, never at an empty file.
    tmp.as_file().sync_all().map_err(at(path))?;
    tmp.persist(path).map_err(|e| WriteError { path: path.to_owned(), source: e.error })?;
    // The rename itself on disk. Best effort: some file systems refuse to
    // sync a folder, and the new content is complete either way.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn writes_new_files_and_replaces_old_ones_leaving_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("deep/er/a.json");
        write_atomic(&p, b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two, longer");
        assert_eq!(names(&d.path().join("deep/er")), ["a.json"]);
    }

    #[test]
    fn a_write_that_fails_midway_leaves_the_old_file_and_no_debris() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        std::fs::write(&p, "old").unwrap();
        // The writer dies after half the content: what a crash does to the
        // temporary file, short of the machine itself stopping.
        let e = write_atomic_with(&p, |f| {
            f.write_all(b"ne")?;
            Err(std::io::Error::other("killed"))
        })
        .unwrap_err();
        assert_eq!(e.path, p);
        assert!(e.to_string().contains("killed"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(names(d.path()), ["state.json"]);
    }

    #[test]
    fn a_temporary_file_left_by_a_crash_is_not_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, "old").unwrap();
        // A process killed between writing and renaming leaves its hidden
        // temporary file behind; the file itself is the old one, and the
        // next write still succeeds.
        std::fs::write(d.path().join(".a.json.XXXXXX.tmp"), "half").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    }

    #[test]
    fn modes_are_kept_and_new_files_are_not_private() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
        write_atomic(&script, b"new").unwrap();
        assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o750);
        let fresh = d.path().join("new.txt");
        write_atomic(&fresh, b"x").unwrap();
        let plain = d.path().join("plain.txt");
        std::fs::write(&plain, "x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // What any program's new file gets (0666 less the umask), not the
        // private 0600 of a temporary file.
        assert_eq!(mode(&fresh), mode(&plain));
    }

    #[test]
    fn a_folder_in_the_way_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("file"), "x").unwrap();
        let e = write_atomic(&d.path().join("file/inner.txt"), b"y").unwrap_err();
        assert_eq!(e.path, d.path().join("file"));
        let e = write_atomic(d.path(), b"y").unwrap_err();
        assert!(e.to_string().starts_with(&d.path().display().to_string()), "{e}");
        assert_eq!(std::fs::read_to_string(d.path().join("file")).unwrap(), "x");
    }
}
