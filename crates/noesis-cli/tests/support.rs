use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// `../shared/conformance`, beside the checkout.
pub(crate) fn conformance() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance");
    assert!(p.is_dir(), "the shared conformance material is expected at {}", p.display());
    p.canonicalize().unwrap()
}

pub(crate) fn example_module(name: &str) -> PathBuf {
    conformance().join("modules").join(name)
}

/// Variable prefixes of the caller's environment that never reach the binary.
const LEAKY_PREFIXES: &[&str] = &["LLM_", "NOESIS_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "OLLAMA_"];

/// A fresh temporary workspace: HOME and the current directory point into
/// it, and no provider variables leak in from the caller's environment.
pub(crate) struct Work {
    pub dir: tempfile::TempDir,
}

impl Work {
    pub(crate) fn new() -> Work {
        let dir = tempfile::tempdir().unwrap();
        // noesis reads the nearest noesis.toml from its working directory
        // upwards; one above the temp dir would configure every test.
        let stray = dir.path().ancestors().skip(1).map(|d| d.join("noesis.toml")).find(|p| p.exists());
        assert!(stray.is_none(), "{} would configure every test run; move it away", stray.unwrap().display());
        Work { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `noesis` in this folder, on the test model (`LLM_PROVIDER=test`: it
    /// runs only when named).
    pub(crate) fn noesis(&self) -> Command {
        let mut c = self.noesis_bare();
        c.env("LLM_PROVIDER", "test");
        c
    }

    /// `noesis` in this folder with no provider configured at all.
    pub(crate) fn noesis_bare(&self) -> Command {
        Command::from_std(self.noesis_std())
    }

    /// [`Work::noesis_bare`] as a plain `std` command, for tests that
    /// spawn the process and signal it.
    pub(crate) fn noesis_std(&self) -> std::process::Command {
        self.command(assert_cmd::cargo::cargo_bin("noesis"))
    }

    /// `program` in this folder with the same clean environment as
    /// [`Work::noesis_bare`] (to wrap noesis in another program).
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut c = std::process::Command::new(program);
        c.current_dir(self.dir.path()).env("HOME", self.dir.path()).env("NO_COLOR", "1");
        for v in ["LLM_PROVIDER", "LLM_MODEL", "COGNITIVE_MODULES_PATH", "NOESIS_CONFIG", "XDG_CONFIG_HOME"] {
            c.env_remove(v);
        }
        // Whatever the caller exports for a provider or for noesis itself
        // (OLLAMA_MODEL, NOESIS_HOME, NOESIS_STORE, …) stays out.
        for (k, _) in std::env::vars_os() {
            let name = k.to_string_lossy();
            if LEAKY_PREFIXES.iter().any(|p| name.starts_with(p)) {
                c.env_remove(&k);
            }
        }
        // A key for any preset would switch auto-detection to that provider.
        for p in noesis_llm::PRESETS {
            c.env_remove(p.base_url_var);
            if let Some(k) = p.key_var {
                c.env_remove(k);
            }
        }
        c
    }
}

pub(crate) struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

/// `noesis ARGS` (a shell command line) under a pseudo-terminal
/// (util-linux `script`) in `work`, with `envs` set and `input` typed at it.
/// What the terminal showed, stdout and stderr together, is `stdout`.
pub(crate) fn in_terminal(work: &Work, envs: &[(&str, String)], args: &str, input: &str) -> Output {
    use std::io::Write as _;
    let bin = assert_cmd::cargo::cargo_bin("noesis");
    let mut cmd = work.command("script");
    cmd.args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut running = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    running.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = running.wait_with_output().unwrap();
    Output {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

pub(crate) fn output(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap();
    Output {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Every envelope noesis prints must validate against the official schema.
pub(crate) fn assert_valid_envelope(env: &Value) {
    let v = noesis_modules::validate_envelope(env);
    assert!(v.is_empty(), "envelope breaks the v2.2 schema: {v:?}\n{env:#}");
    let meta = &env["meta"];
    assert!(meta["trace_id"].is_string(), "no trace_id: {env}");
    assert!(meta["model"].as_str().is_some_and(|m| m.contains('/')), "model is not provider/model: {env}");
    assert!(meta["latency_ms"].as_f64().is_some_and(|l| l >= 0.0), "no latency: {env}");
}

/// `s` as a regex matching itself, for snapshot filters of temp paths and
/// addresses.
pub(crate) fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_alphanumeric() || c == '/' || c == '_' { c.to_string() } else { format!("\\{c}") })
        .collect()
}

/// Runs `command` until it says `stopped at POINT` (`NOESIS_TEST_STOP_AT`
/// makes it wait there), then kills it with SIGKILL: a crash exactly at a
/// named point, every time. Panics with what it printed if it ends first.
pub(crate) fn kill_at(mut command: std::process::Command, point: &str) {
    use std::io::BufRead;
    let mut child = command
        .env("NOESIS_TEST_STOP_AT", point)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut said = String::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        if line == format!("stopped at {point}") {
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        said.push_str(&line);
        said.push('\n');
    }
    let status = child.wait().unwrap();
    panic!("never stopped at {point} ({status}):\n{said}");
}
