//! Tarballs (`.tar.gz`): fetched over HTTP or read from disk, checked
//! against their checksum before anything is unpacked, and unpacked safely
//! — no absolute paths, no `..`, no links, no devices, within size limits.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use sha2::Digest as _;

/// Most bytes a tarball may have, compressed.
pub const MAX_DOWNLOAD: u64 = 50 * 1024 * 1024;
/// Most bytes its files may have, unpacked.
pub const MAX_UNPACKED: u64 = 200 * 1024 * 1024;
/// Most entries it may have.
pub const MAX_ENTRIES: usize = 10_000;

/// A tarball refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarballError {
    /// It could not be fetched.
    #[error("{url}: {why}")]
    Fetch {
        /// Where from.
        url: String,
        /// Why.
        why: String,
    },
    /// Its checksum is not the one expected.
    #[error("{url}: checksum mismatch (expected {expected}, got {got}); nothing was unpacked")]
    Checksum {
        /// Where from.
        url: String,
        /// What the index or lockfile said.
        expected: String,
        /// What the bytes give.
        got: String,
    },
    /// An entry it may not have.
    #[error("{url}: entry `{entry}` refused: {why}")]
    Entry {
        /// Where from.
        url: String,
        /// The entry's path.
        entry: String,
        /// Why.
        why: String,
    },
    /// It is not a gzip'd tar, or too large.
    #[error("{url}: {why}")]
    Bad {
        /// Where from.
        url: String,
        /// Why.
        why: String,
    },
}

/// `sha256:` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// The tarball's bytes: an `http(s)://` URL (at most [`MAX_DOWNLOAD`]) or a
/// path.
pub fn fetch(url: &str) -> Result<Vec<u8>, TarballError> {
    let fail = |why: String| TarballError::Fetch { url: url.to_owned(), why };
    if url.starts_with("http://") || url.starts_with("https://") {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(120))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let resp = client.get(url).send().map_err(|e| fail(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(fail(format!("HTTP {}", resp.status())));
        }
        let mut bytes = Vec::new();
        resp.take(MAX_DOWNLOAD + 1).read_to_end(&mut bytes).map_err(|e| fail(e.to_string()))?;
        if bytes.len() as u64 > MAX_DOWNLOAD {
            return Err(fail(format!("larger than {MAX_DOWNLOAD} bytes")));
        }
        return Ok(bytes);
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if meta.len() > MAX_DOWNLOAD {
        return Err(fail(format!("larger than {MAX_DOWNLOAD} bytes")));
    }
    std::fs::read(path).map_err(|e| fail(e.to_string()))
}

/// A relative path with only normal parts, or why not.
fn safe(path: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("it climbs out with `..`".into()),
            Component::RootDir | Component::Prefix(_) => return Err("it is an absolute path".into()),
        }
    }
    Ok(out)
}

/// Checks `bytes` against `checksum` (when given) and unpacks them into
/// `into`; refuses — before writing anything — a tarball with an absolute
/// path, a `..`, a link, a device, too many entries or too many bytes.
pub fn unpack(url: &str, bytes: &[u8], checksum: Option<&str>, into: &Path) -> Result<(), TarballError> {
    if let Some(expected) = checksum {
        let got = sha256(bytes);
        if !got.eq_ignore_ascii_case(expected) {
            return Err(TarballError::Checksum { url: url.to_owned(), expected: expected.to_owned(), got });
        }
    }
    let bad = |why: String| TarballError::Bad { url: url.to_owned(), why };
    // First pass: every entry checked before any is written.
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut plan = Vec::new();
    let mut total = 0u64;
    for entry in archive.entries().map_err(|e| bad(format!("not a .tar.gz: {e}")))? {
        let entry = entry.map_err(|e| bad(format!("not a .tar.gz: {e}")))?;
        let raw = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let shown = raw.to_string_lossy().into_owned();
        let refuse = |why: String| TarballError::Entry { url: url.to_owned(), entry: shown.clone(), why };
        let rel = safe(&raw).map_err(refuse)?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir() || kind.is_pax_global_extensions() || kind.is_pax_local_extensions()) {
            return Err(refuse("only files and folders may be in a module tarball (no links or devices)".into()));
        }
        if rel.as_os_str().is_empty() && !kind.is_dir() && kind.is_file() {
            return Err(refuse("it names the folder itself but is not a folder".into()));
        }
        total += entry.size();
        if total > MAX_UNPACKED {
            return Err(bad(format!("more than {MAX_UNPACKED} bytes unpacked")));
        }
        plan.push(rel);
        if plan.len() > MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
    }
    // Second pass: written. A failure here (a file where a folder is, a full
    // disk) takes back what this call wrote, so a refused tarball leaves no
    // half module behind.
    let existed = into.exists();
    let written = write_entries(bytes, into, &bad);
    if written.is_err() && !existed {
        let _ = std::fs::remove_dir_all(into);
    }
    written
}

fn write_entries(bytes: &[u8], into: &Path, bad: &dyn Fn(String) -> TarballError) -> Result<(), TarballError> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    for entry in archive.entries().map_err(|e| bad(e.to_string()))? {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        let rel = safe(&entry.path().map_err(|e| bad(e.to_string()))?).map_err(bad)?;
        let dest = into.join(&rel);
        if kind.is_dir() {
            std::fs::create_dir_all(&dest).map_err(|e| bad(format!("{}: {e}", dest.display())))?;
            continue;
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| bad(format!("{}: {e}", parent.display())))?;
        }
        let mut file = std::fs::File::create(&dest).map_err(|e| bad(format!("{}: {e}", dest.display())))?;
        std::io::copy(&mut (&mut entry).take(MAX_UNPACKED), &mut file)
            .map_err(|e| bad(format!("{}: {e}", dest.display())))?;
    }
    Ok(())
}

/// The module folder in an unpacked tarball: the root when it holds
/// `module.yaml`, else its one folder (the protocol's `NAME/module.yaml`).
pub fn module_root(unpacked: &Path) -> Option<PathBuf> {
    if unpacked.join("module.yaml").is_file() || unpacked.join("MODULE.md").is_file() {
        return Some(unpacked.to_owned());
    }
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(unpacked).ok()?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    match dirs.as_slice() {
        [one] if one.join("module.yaml").is_file() || one.join("MODULE.md").is_file() => Some(one.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tarball(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // Written raw: the builder itself refuses `..`.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn a_good_tarball_unpacks_and_its_checksum_is_checked_first() {
        let bytes = tarball(&[("greeter/module.yaml", b"name: greeter"), ("greeter/prompt.md", b"hi")]);
        let d = tempfile::tempdir().unwrap();
        let sum = sha256(&bytes);
        unpack("t", &bytes, Some(&sum), d.path()).unwrap();
        assert_eq!(module_root(d.path()), Some(d.path().join("greeter")));
        let e = tempfile::tempdir().unwrap();
        let err = unpack("t", &bytes, Some("sha256:00"), e.path()).unwrap_err();
        assert!(matches!(err, TarballError::Checksum { .. }), "{err}");
        assert_eq!(std::fs::read_dir(e.path()).unwrap().count(), 0, "nothing unpacked");
    }

    #[test]
    fn a_file_named_like_the_folder_itself_is_refused_and_a_failed_write_leaves_nothing() {
        // Found by the property test: `a` written, then `.` (a file) failed
        // to be created over the folder, and `a` stayed behind.
        let d = tempfile::tempdir().unwrap();
        let into = d.path().join("in");
        let err = unpack("t", &tarball(&[("a", b"x"), (".", b"")]), None, &into).unwrap_err();
        assert!(err.to_string().contains("names the folder itself"), "{err}");
        assert!(!into.exists());
        // A file where a later entry needs a folder fails while writing:
        // what was written is taken back.
        let err = unpack("t", &tarball(&[("a", b"x"), ("a/b", b"y")]), None, &into).unwrap_err();
        assert!(matches!(err, TarballError::Bad { .. }), "{err}");
        assert!(!into.exists(), "the half-written folder is gone");
    }

    #[test]
    fn climbing_absolute_and_linked_entries_are_refused_before_anything_is_written() {
        for evil in ["../escape.txt", "greeter/../../escape.txt", "/etc/escape"] {
            let bytes = tarball(&[("greeter/module.yaml", b"name: g"), (evil, b"x")]);
            let d = tempfile::tempdir().unwrap();
            let err = unpack("t", &bytes, None, &d.path().join("in")).unwrap_err();
            assert!(matches!(err, TarballError::Entry { .. }), "{evil}: {err}");
            assert!(!d.path().join("in").exists(), "{evil}: nothing written");
        }
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "greeter/link", "/etc/passwd").unwrap();
        let bytes = b.into_inner().unwrap().finish().unwrap();
        let d = tempfile::tempdir().unwrap();
        assert!(unpack("t", &bytes, None, d.path()).unwrap_err().to_string().contains("no links"));
        assert!(unpack("t", b"not gzip", None, d.path()).unwrap_err().to_string().contains("not a .tar.gz"));
    }
}
