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

/// A fresh temporary workspace: HOME and the current directory point into
/// it, and no provider variables leak in from the caller's environment.
pub(crate) struct Work {
    pub dir: tempfile::TempDir,
}

impl Work {
    pub(crate) fn new() -> Work {
        Work { dir: tempfile::tempdir().unwrap() }
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

    pub(crate) fn noesis(&self) -> Command {
        let mut c = Command::cargo_bin("noesis").unwrap();
        c.current_dir(self.dir.path()).env("HOME", self.dir.path()).env("NO_COLOR", "1");
        for v in ["LLM_PROVIDER", "LLM_MODEL", "COGNITIVE_MODULES_PATH"] {
            c.env_remove(v);
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
