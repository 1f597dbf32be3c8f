//! Hashing: files (blake3), whole trees (honouring `.gitignore`, in
//! parallel) and JSON values (canonical form). This module and `project`
//! are the only ones here that touch the file system.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::FramesError;
use crate::project::relative_path;

/// blake3 of bytes, 64 lowercase hex digits.
#[must_use]
pub fn hash_bytes(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// blake3 of a file's bytes.
///
/// # Errors
/// [`FramesError::Io`] naming the file.
pub fn hash_file(path: &Path) -> Result<String, FramesError> {
    hash_file_with(path, &mut vec![0; 64 * 1024])
}

/// [`hash_file`] with a caller's buffer, reused across files: no stat and
/// no allocation per file, which is most of the cost for small files.
fn hash_file_with(path: &Path, buf: &mut [u8]) -> Result<String, FramesError> {
    let io = |source| FramesError::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = blake3::Hasher::new();
    loop {
        match file.read(buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// blake3 of a JSON value in canonical form (object keys sorted, no
/// whitespace), so the same input gives the same digest whatever its key
/// order.
#[must_use]
pub fn json_digest(value: &serde_json::Value) -> String {
    hash_bytes(canonical(value).as_bytes())
}

/// RFC 8785 canonical JSON (`serde_jcs`), the form cassette keys and
/// context digests use too.
fn canonical(v: &serde_json::Value) -> String {
    // A `Value` always serialises; the fallback only keeps this total.
    serde_jcs::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// The files of a scan: project-relative path → blake3 hex, plus what could
/// not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Path (relative to the project root, `/`-separated) → hash.
    pub files: BTreeMap<String, String>,
    /// Entries skipped, each with the reason (unreadable, not UTF-8, …).
    pub skipped: Vec<(PathBuf, String)>,
}

/// Hashes every regular file under `scope` (files or folders; absolute, or
/// relative to `root`), honouring `.gitignore`, `.ignore` and
/// `.git/info/exclude` even outside a git checkout, skipping `.git` and not
/// following symbolic links. A file named directly is hashed even when
/// ignored. Folders are walked by several threads.
///
/// # Errors
/// [`FramesError::Io`] when a scope entry does not exist.
pub fn scan(root: &Path, scope: &[PathBuf]) -> Result<Scan, FramesError> {
    scan_excluding(root, scope, &[])
}

/// [`scan`], leaving out `exclude` (absolute paths of files or folders, such
/// as the store's own database inside the project).
///
/// # Errors
/// [`FramesError::Io`] when a scope entry does not exist.
pub fn scan_excluding(root: &Path, scope: &[PathBuf], exclude: &[PathBuf]) -> Result<Scan, FramesError> {
    scan_with_progress(root, scope, exclude, &|_| {})
}

/// [`scan_excluding`], telling `progress` how many files are done so far
/// (called on the calling thread, once per file).
///
/// # Errors
/// [`FramesError::Io`] when a scope entry does not exist.
pub fn scan_with_progress(
    root: &Path,
    scope: &[PathBuf],
    exclude: &[PathBuf],
    progress: &dyn Fn(usize),
) -> Result<Scan, FramesError> {
    let exclude: Vec<PathBuf> = exclude
        .iter()
        .map(|p| match (p.parent().and_then(|d| d.canonicalize().ok()), p.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => p.clone(),
        })
        .collect();
    let excluded = move |p: &Path| exclude.iter().any(|x| p.starts_with(x));
    let mut out = Scan::default();
    let mut dirs = Vec::new();
    for entry in scope {
        let path = if entry.is_absolute() { entry.clone() } else { root.join(entry) };
        let meta = std::fs::metadata(&path).map_err(|source| FramesError::Io { path: path.clone(), source })?;
        if excluded(&path) {
            continue;
        }
        if meta.is_dir() {
            dirs.push(path);
        } else {
            match hash_file(&path) {
                Ok(h) => {
                    out.files.insert(relative_path(root, &path), h);
                }
                Err(e) => out.skipped.push((path, e.to_string())),
            }
        }
    }
    let Some((first, rest)) = dirs.split_first() else { return Ok(out) };
    let mut builder = noesis_fs::walk_skipping(first, excluded);
    for d in rest {
        builder.add(d);
    }
    builder.threads(std::thread::available_parallelism().map_or(2, std::num::NonZero::get).min(8));
    let (tx, rx) = std::sync::mpsc::channel::<Result<(String, String), (PathBuf, String)>>();
    builder.build_parallel().run(|| {
        let tx = tx.clone();
        let mut buf = vec![0u8; 64 * 1024];
        Box::new(move |res| {
            let item = match res {
                Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => {
                    let path = e.path();
                    match (path.to_str(), path.strip_prefix(root).ok().and_then(Path::to_str)) {
                        (None, _) => Err((path.to_owned(), "the path is not UTF-8".to_owned())),
                        (Some(_), name) => {
                            // Walked paths are clean; only a scope outside the
                            // root needs the general naming.
                            let name = name.map_or_else(|| relative_path(root, path), str::to_owned);
                            hash_file_with(path, &mut buf)
                                .map(|h| (name, h))
                                .map_err(|e| (path.to_owned(), e.to_string()))
                        }
                    }
                }
                Ok(_) => return ignore::WalkState::Continue,
                Err(e) => Err((PathBuf::new(), e.to_string())),
            };
            let _ = tx.send(item);
            ignore::WalkState::Continue
        })
    });
    drop(tx);
    for item in rx {
        match item {
            Ok((p, h)) => {
                out.files.insert(p, h);
            }
            Err(skip) => out.skipped.push(skip),
        }
        progress(out.files.len() + out.skipped.len());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_hash_is_blake3_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(hash_file(&p).unwrap(), "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85");
        assert_eq!(hash_bytes(b"abc"), hash_file(&p).unwrap());
        let big = dir.path().join("big");
        let bytes = vec![7u8; (1 << 20) + 5];
        std::fs::write(&big, &bytes).unwrap();
        assert_eq!(hash_file(&big).unwrap(), hash_bytes(&bytes));
        let e = hash_file(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn json_digest_ignores_key_order() {
        let a = serde_json::json!({"b": 1, "a": {"y": [1, "x"], "x": null}});
        let b = serde_json::json!({"a": {"x": null, "y": [1, "x"]}, "b": 1});
        assert_eq!(json_digest(&a), json_digest(&b));
        assert_ne!(json_digest(&a), json_digest(&serde_json::json!({"b": 2})));
        // The text hashed is what it was before RFC 8785 took over, so the
        // digests stored frames carry still match: sorted, compact, escapes
        // as serde_json writes them.
        let v = serde_json::json!({"é": "tab\t\"q\" \u{1} 📦", "a": [0.5, -3, 2048, true, null], "B": {}});
        assert_eq!(canonical(&v), "{\"B\":{},\"a\":[0.5,-3,2048,true,null],\"é\":\"tab\\t\\\"q\\\" \\u0001 📦\"}");
    }

    #[test]
    fn scan_honours_gitignore_and_names_files_relative_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(".gitignore", "target/\n*.log\n");
        w("src/a.rs", "a");
        w("src/deep/b.rs", "b");
        w("target/out.bin", "x");
        w("run.log", "x");
        w(".git/HEAD", "x");
        w(".env.example", "x");
        let s = scan(&root, std::slice::from_ref(&root)).unwrap();
        let names: Vec<&str> = s.files.keys().map(String::as_str).collect();
        assert_eq!(names, vec![".env.example", ".gitignore", "src/a.rs", "src/deep/b.rs"]);
        assert_eq!(s.files["src/a.rs"], hash_bytes(b"a"));
        // A sub-folder, and an ignored file named on purpose.
        let s = scan(&root, &[PathBuf::from("src"), PathBuf::from("run.log")]).unwrap();
        let names: Vec<&str> = s.files.keys().map(String::as_str).collect();
        assert_eq!(names, vec!["run.log", "src/a.rs", "src/deep/b.rs"]);
        let s = scan_excluding(&root, std::slice::from_ref(&root), &[root.join("src/deep"), root.join(".gitignore")])
            .unwrap();
        let names: Vec<&str> = s.files.keys().map(String::as_str).collect();
        assert_eq!(names, vec![".env.example", "src/a.rs"]);
        let e = scan(&root, &[PathBuf::from("missing")]).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
