//! What this machine supports and what a run would be allowed, shown and
//! tried: a write outside the workspace, a secret read and a TCP connection,
//! each from inside the sandbox. The report is data (its JSON is what
//! `noesis sandbox check --json` prints) with a text rendering beside it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::{Finished, Mode, Policy, RunOptions, Sandbox, SandboxError, Settings, probe};

/// One attack tried from inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trial {
    /// What was tried.
    pub check: String,
    /// Whether it was refused; `None` when it could not be tried.
    pub refused: Option<bool>,
    /// What happened (the exit and the last line it printed), or why not tried.
    pub detail: String,
}

/// What `check` found. Absent fields are left out of the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether the sandbox works on this machine.
    pub available: bool,
    /// The mode in force.
    pub mode: Mode,
    /// The settings in force.
    pub settings: Settings,
    /// The helper used, when available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper: Option<PathBuf>,
    /// How Landlock is enforced, when available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock: Option<String>,
    /// Whether noesis runs as root, when available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<bool>,
    /// Why the sandbox is not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether a run would be confined (absent when no sandbox could be built).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confined: Option<bool>,
    /// The policy a run would get, when confined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The names of the variables a run would see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Vec<String>>,
    /// The attacks tried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<Trial>>,
}

/// Probes the machine, builds the sandbox `settings` give for `workspace`
/// and tries the attacks from inside it; `home` is where `~/.ssh` is looked
/// for.
pub fn check(settings: &Settings, workspace: &Path, home: Option<&Path>) -> Report {
    let support = probe();
    let mut report = Report {
        available: support.is_ok(),
        mode: settings.mode,
        settings: settings.clone(),
        helper: None,
        landlock: None,
        root: None,
        error: None,
        confined: None,
        policy: None,
        environment: None,
        checks: None,
    };
    match support {
        Ok(s) => {
            report.helper = Some(s.helper);
            report.landlock = Some(s.landlock);
            report.root = Some(s.root);
        }
        Err(e) => report.error = Some(e.to_string()),
    }
    if let Ok(sb) = Sandbox::new(settings, workspace, &[]) {
        report.confined = Some(sb.is_confined());
        report.policy = sb.policy().cloned();
        report.environment = Some(sb.env_names().into_iter().map(str::to_owned).collect());
        report.checks = Some(trials(&sb, workspace, home));
    }
    report
}

impl Report {
    /// Whether the check passed: the sandbox works, or it is off by choice.
    pub fn passed(&self) -> bool {
        self.available || self.mode == Mode::Off
    }

    /// The report for a person to read.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let list = |items: &[String]| -> String { if items.is_empty() { "none".into() } else { items.join(", ") } };
        let paths = |v: &[PathBuf]| -> Vec<String> { v.iter().map(|p| p.to_string_lossy().into_owned()).collect() };
        if self.available {
            s.push_str(&format!(
                "sandbox: available — Landlock {}, new pid and mount namespaces, seccomp\nhelper: {}\n",
                self.landlock.as_deref().unwrap_or("?"),
                self.helper.as_ref().map_or("?".into(), |h| h.to_string_lossy())
            ));
            if self.root == Some(true) {
                s.push_str("noesis runs as root: confined commands run as root without any capability\n");
            }
        } else {
            s.push_str(&format!("sandbox: NOT available — {}\n", self.error.as_deref().unwrap_or("?")));
        }
        if self.mode == Mode::Off {
            s.push_str("mode: OFF — the model's commands would run unconfined\n");
        }
        if let Some(p) = &self.policy {
            s.push_str("a run here would:\n");
            let read = paths(&p.read);
            let etc = read.iter().filter(|r| r.starts_with("/etc/")).count();
            let mut shown: Vec<String> = read.iter().filter(|r| !r.starts_with("/etc/")).cloned().collect();
            if etc > 0 {
                let hidden: Vec<&str> =
                    crate::paths::ETC_SECRETS.iter().copied().filter(|x| Path::new(x).exists()).collect();
                shown.insert(0, format!("/etc ({etc} entries; left out: {})", hidden.join(", ")));
            }
            s.push_str(&format!("  read and execute: {}\n", shown.join(", ")));
            s.push_str(&format!("  write: {}\n", list(&paths(&p.write))));
            s.push_str(&format!("  read-only inside those: {}\n", list(&paths(&p.read_only))));
            s.push_str(&format!("  hidden: {}\n", list(&paths(&p.mask))));
            s.push_str(&format!("  network: {}\n", if p.network { "on" } else { "off" }));
            let l = &p.limits;
            let mib = |v: Option<u64>| v.map_or("none".into(), |b| format!("{} MiB", b >> 20));
            s.push_str(&format!(
                "  limits: memory {}, file size {}, CPU {}\n",
                mib(l.data_bytes),
                mib(l.file_bytes),
                l.cpu_seconds.map_or("none".into(), |c| format!("{c} s"))
            ));
        }
        if let Some(env) = &self.environment {
            s.push_str(&format!("  environment: {}\n", list(env)));
        }
        if let Some(checks) = &self.checks {
            s.push_str("tried from inside:\n");
            for c in checks {
                let verdict = match c.refused {
                    Some(true) => "refused",
                    Some(false) => "ALLOWED",
                    None => "not tried",
                };
                s.push_str(&format!("  {}: {verdict} ({})\n", c.check, c.detail));
            }
        }
        s
    }
}

/// Why [`run_attached`] could not run the command to its end.
#[derive(Debug, thiserror::Error)]
pub enum AttachedError {
    /// The sandbox could not be built, or the program could not start.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// An empty command.
    #[error("no command given")]
    NoCommand,
    /// Waiting for it failed.
    #[error(transparent)]
    Wait(std::io::Error),
    /// It ran past the timeout and was killed with all it started.
    #[error("`{program}` timed out after {} s and was killed", .timeout.as_secs())]
    TimedOut {
        /// The program.
        program: String,
        /// The time it had.
        timeout: Duration,
    },
}

/// Runs `argv` as the model's commands run (confined by `settings`,
/// scrubbed environment, its own temporary folder), with this process's
/// stdin, stdout and stderr, from `cwd` when it is inside `workspace` (else
/// from `workspace`); returns its exit code, 1 when a signal ended it. A
/// program named by its full path may read its own installation.
///
/// # Errors
/// The sandbox cannot be built, the program cannot start, or it timed out.
pub fn run_attached(
    settings: &Settings,
    workspace: &Path,
    cwd: &Path,
    argv: &[String],
    timeout: Duration,
) -> Result<i32, AttachedError> {
    let mut settings = settings.clone();
    settings.read_extra.extend(argv.first().and_then(|p| crate::paths::program_root(p)));
    let sandbox = Sandbox::new(&settings, workspace, &[])?;
    let (program, args) = argv.split_first().ok_or(AttachedError::NoCommand)?;
    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let mut child = sandbox
        .command(program.as_ref(), &args, if cwd.starts_with(workspace) { cwd } else { workspace })
        .stdin(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| SandboxError::Start { program: program.clone(), message: e.to_string() })?;
    let began = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(AttachedError::Wait)? {
            return Ok(status.code().unwrap_or(1));
        }
        if began.elapsed() >= timeout {
            sandbox.kill(&mut child);
            return Err(AttachedError::TimedOut { program: program.clone(), timeout });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each attack tried from inside the sandbox, with what happened.
fn trials(sb: &Sandbox, ws: &Path, home: Option<&Path>) -> Vec<Trial> {
    let mut out = Vec::new();
    let run = |script: &str| {
        sb.run(
            &["sh".into(), "-c".into(), script.into()],
            &RunOptions { cwd: ws, timeout: Duration::from_secs(20), max_output: 4096, cancelled: &|| false },
        )
    };
    let mut trial = |what: &str, refused: Option<bool>, detail: String| {
        out.push(Trial { check: what.to_owned(), refused, detail });
    };
    match tempfile::tempdir() {
        Ok(outside) => {
            let target = outside.path().join("escaped");
            let r = run(&format!("echo x > '{}'", target.display()));
            trial("write outside the workspace", Some(!target.exists()), describe(&r));
        }
        Err(e) => trial("write outside the workspace", None, format!("no temporary folder: {e}")),
    }
    let secret = home
        .map(|h| h.join(".ssh"))
        .filter(|p| p.is_dir())
        .or_else(|| Some(PathBuf::from("/etc/shadow")).filter(|p| p.exists()));
    match secret {
        Some(p) => {
            let r = if p.is_dir() {
                run(&format!("ls -A '{}' > /dev/null", p.display()))
            } else {
                run(&format!("cat '{}' > /dev/null", p.display()))
            };
            let refused = r.as_ref().map(|f| f.code != Some(0)).ok();
            trial(&format!("read {}", p.display()), refused, describe(&r));
        }
        None => trial("read a secret", None, "no ~/.ssh nor /etc/shadow here to try".into()),
    }
    match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => {
            let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            let script = format!(
                "if command -v python3 >/dev/null; then python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\"; \
                 elif command -v bash >/dev/null; then bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'; else exit 99; fi"
            );
            let r = run(&script);
            let refused = match &r {
                Ok(f) if f.code == Some(99) => None,
                Ok(f) => Some(f.code != Some(0)),
                Err(_) => None,
            };
            trial("connect to 127.0.0.1 over TCP", refused, describe(&r));
        }
        Err(e) => trial("connect to 127.0.0.1 over TCP", None, format!("no listener: {e}")),
    }
    out
}

/// The exit and the last line printed on stderr, or the error.
fn describe(r: &Result<Finished, SandboxError>) -> String {
    match r {
        Ok(f) => {
            let said = f.stderr.lines().last().unwrap_or_default();
            format!(
                "exit {}{}",
                f.code.map_or("-".into(), |c| c.to_string()),
                if said.is_empty() { String::new() } else { format!(": {said}") }
            )
        }
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    fn report() -> Report {
        Report {
            available: false,
            mode: Mode::On,
            settings: Settings::default(),
            helper: None,
            landlock: None,
            root: None,
            error: Some("no helper".into()),
            confined: None,
            policy: None,
            environment: None,
            checks: None,
        }
    }

    #[test]
    fn an_unavailable_sandbox_says_why_and_fails_unless_off() {
        let r = report();
        assert_eq!(r.text(), "sandbox: NOT available — no helper\n");
        assert!(!r.passed());
        let off = Report { mode: Mode::Off, ..report() };
        assert!(off.passed());
        assert!(off.text().contains("mode: OFF"));
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["available", "mode", "settings", "error"]);
    }

    #[test]
    fn the_policy_and_trials_read_as_lines() {
        let policy = Policy {
            version: crate::POLICY_VERSION,
            read: vec!["/usr".into(), "/etc/hosts".into(), "/etc/passwd".into()],
            write: vec!["/w".into()],
            read_only: Vec::new(),
            mask: vec!["/w/.env".into()],
            write_files: Vec::new(),
            mask_file: None,
            network: false,
            limits: Limits { cpu_seconds: Some(60), data_bytes: Some(2 << 20), file_bytes: None },
        };
        let r = Report {
            available: true,
            helper: Some("/bin/h".into()),
            landlock: Some("fully".into()),
            root: Some(false),
            error: None,
            policy: Some(policy),
            environment: Some(vec!["PATH".into(), "HOME".into()]),
            checks: Some(vec![
                Trial { check: "a".into(), refused: Some(true), detail: "exit 1".into() },
                Trial { check: "b".into(), refused: Some(false), detail: "exit 0".into() },
                Trial { check: "c".into(), refused: None, detail: "no".into() },
            ]),
            ..report()
        };
        let t = r.text();
        assert!(t.starts_with(
            "sandbox: available — Landlock fully, new pid and mount namespaces, seccomp\nhelper: /bin/h\n"
        ));
        assert!(t.contains("  read and execute: /etc (2 entries; left out: "), "{t}");
        assert!(t.contains(", /usr\n"), "{t}");
        assert!(t.contains("  write: /w\n  read-only inside those: none\n  hidden: /w/.env\n  network: off\n"), "{t}");
        assert!(t.contains("  limits: memory 2 MiB, file size none, CPU 60 s\n  environment: PATH, HOME\n"), "{t}");
        assert!(t.ends_with("tried from inside:\n  a: refused (exit 1)\n  b: ALLOWED (exit 0)\n  c: not tried (no)\n"));
    }

    #[test]
    fn an_empty_command_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let off = Settings { mode: Mode::Off, ..Settings::default() };
        let e = run_attached(&off, t.path(), t.path(), &[], Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, AttachedError::NoCommand), "{e}");
    }

    #[test]
    fn describe_keeps_the_last_line_said() {
        let f = Finished {
            code: Some(2),
            signal: None,
            stdout: String::new(),
            stderr: "one\ntwo\n".into(),
            dropped: (0, 0),
            timed_out: false,
            cancelled: false,
        };
        assert_eq!(describe(&Ok(f)), "exit 2: two");
    }
}
