//! `cognitive.lock`: what is installed, from where, at which commit, with
//! the digest of its files — so an install can be repeated byte for byte.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// One installed module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The source as typed (`github:…@^1`, a URL, a folder).
    pub source: String,
    /// The module's folder inside the source (`""`: its root).
    #[serde(default)]
    pub path: String,
    /// The commit it came from (git), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The tag or version resolved, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// What the source resolved to when it was a registry name (a git
    /// source, a folder or a tarball URL), so the lockfile installs again
    /// without the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// `sha256:` of the module's files (see [`digest`]).
    pub sha256: String,
}

/// The lockfile.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Lockfile {
    /// The format (1).
    pub version: u32,
    /// By module name.
    pub modules: BTreeMap<String, LockEntry>,
}

impl Lockfile {
    /// An empty lockfile.
    pub fn new() -> Lockfile {
        Lockfile { version: 1, modules: BTreeMap::new() }
    }

    /// Reads `text`; a lockfile of another format is refused.
    pub fn parse(text: &str) -> Result<Lockfile, String> {
        let lock: Lockfile = serde_json::from_str(text).map_err(|e| format!("not a cognitive.lock: {e}"))?;
        if lock.version != 1 {
            return Err(format!("cognitive.lock format {} is not known here (1 is)", lock.version));
        }
        Ok(lock)
    }

    /// The text written: stable (sorted, pretty, newline-terminated), so
    /// the file only changes when what it says changes.
    pub fn render(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// `sha256:` over a module folder's files: each relative path (with `/`),
/// a zero byte, its length, its bytes, in path order — the same folder
/// always gives the same digest, and any change to a name or a byte
/// changes it.
pub fn digest(dir: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let rel = e.path().strip_prefix(dir).unwrap_or(&e.path()).to_string_lossy().replace('\\', "/");
                files.push((rel, e.path()));
            }
        }
    }
    files.sort();
    let mut h = sha2::Sha256::new();
    for (rel, path) in files {
        let bytes = std::fs::read(path)?;
        h.update(rel.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(format!("sha256:{:x}", h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lockfile_round_trips_and_refuses_other_formats() {
        let mut l = Lockfile::new();
        l.modules.insert(
            "a".into(),
            LockEntry {
                source: "github:x/y@^1".into(),
                path: "a".into(),
                commit: Some("abc".into()),
                version: Some("v1.1.0".into()),
                resolved: None,
                sha256: "sha256:00".into(),
            },
        );
        assert_eq!(Lockfile::parse(&l.render()).unwrap(), l);
        assert!(Lockfile::parse("{\"version\": 2, \"modules\": {}}").unwrap_err().contains("format 2"));
        assert!(Lockfile::parse("nope").is_err());
    }

    #[test]
    fn the_digest_sees_names_and_bytes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("module.yaml"), "name: a").unwrap();
        std::fs::create_dir(d.path().join("tests")).unwrap();
        std::fs::write(d.path().join("tests/x.json"), "{}").unwrap();
        let a = digest(d.path()).unwrap();
        assert!(a.starts_with("sha256:") && a.len() == 71);
        assert_eq!(digest(d.path()).unwrap(), a);
        std::fs::write(d.path().join("tests/x.json"), "{ }").unwrap();
        let b = digest(d.path()).unwrap();
        assert_ne!(a, b);
        std::fs::rename(d.path().join("tests/x.json"), d.path().join("tests/y.json")).unwrap();
        assert_ne!(digest(d.path()).unwrap(), b);
    }
}
