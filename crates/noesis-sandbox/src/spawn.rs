//! The noesis side: a [`Sandbox`] per run — its own folder, the policy,
//! the scrubbed environment — that builds confined commands and runs them
//! to their end under one timeout.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::helper::{ERROR_PREFIX, SETUP_FAILED};
use crate::policy::{Facts, Mode, Places, Policy, Settings};

/// Why a command could not be run confined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// This machine cannot confine processes (the helper is missing, or
    /// the kernel lacks what it needs).
    #[error(
        "commands are not run: the sandbox is not available here ({0}); `noesis sandbox check` tells more, and `--sandbox off` runs commands unconfined"
    )]
    Unavailable(String),
    /// The run's folder could not be made.
    #[error("the sandbox's folder for this run: {0}")]
    Folder(String),
    /// The helper could not set the confinement up; nothing ran.
    #[error("the sandbox could not be set up: {0}")]
    Setup(String),
    /// The program could not be started.
    #[error("`{program}` could not start: {message}")]
    Start {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
}

/// What [`locate_helper`] looks for.
pub const HELPER: &str = "noesis-sandbox";

/// The helper program: `$NOESIS_SANDBOX_HELPER`, else `noesis-sandbox`
/// beside the running executable (or one folder up, where test binaries
/// of a cargo build sit), else on `PATH`.
pub fn locate_helper() -> Result<PathBuf, SandboxError> {
    if let Some(p) = std::env::var_os("NOESIS_SANDBOX_HELPER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(SandboxError::Unavailable(format!("NOESIS_SANDBOX_HELPER={} is not a file", p.display())))
        };
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let p = dir.join(HELPER);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path).filter(|d| d.is_absolute()) {
            let p = dir.join(HELPER);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(SandboxError::Unavailable(format!(
        "the helper program `{HELPER}` was not found beside noesis nor on PATH (build it: cargo build -p noesis-sandbox)"
    )))
}

/// What the machine supports, as the helper found it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Support {
    /// The helper used.
    pub helper: PathBuf,
    /// How Landlock is enforced (fully, partially, and the kernel's ABI).
    pub landlock: String,
    /// Whether noesis runs as root (then the confined process runs as
    /// root without any capability) or in a user namespace.
    pub root: bool,
}

/// Runs the helper once with a trivial policy and reports what holds; the
/// answer is kept for the life of the process.
pub fn probe() -> Result<Support, SandboxError> {
    static PROBED: OnceLock<Result<Support, SandboxError>> = OnceLock::new();
    PROBED.get_or_init(probe_now).clone()
}

fn probe_now() -> Result<Support, SandboxError> {
    let helper = locate_helper()?;
    let policy = Policy {
        version: crate::policy::POLICY_VERSION,
        read: vec![PathBuf::from("/usr")],
        write: Vec::new(),
        read_only: Vec::new(),
        mask: Vec::new(),
        write_files: Vec::new(),
        network: false,
        limits: crate::policy::Limits::default(),
        mask_file: None,
    };
    let json = serde_json::to_string(&policy).map_err(|e| SandboxError::Unavailable(e.to_string()))?;
    let out = Command::new(&helper)
        .arg("probe")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--policy")
        .arg(json)
        .arg("--")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SandboxError::Unavailable(format!("{} could not start: {e}", helper.display())))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.trim().strip_prefix(ERROR_PREFIX).unwrap_or(why.trim()).to_owned();
        return Err(SandboxError::Unavailable(if why.is_empty() {
            format!("the helper exited {}", out.status)
        } else {
            why
        }));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| SandboxError::Unavailable(format!("the helper's probe answered no JSON: {e}")))?;
    Ok(Support {
        helper,
        landlock: v["landlock"].as_str().unwrap_or("unknown").to_owned(),
        root: rustix::process::geteuid().is_root(),
    })
}

/// How a command run through [`Sandbox::run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Its exit code; `None` when it was killed (timeout, cancel) or died
    /// of a signal (`signal` says which).
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// What it printed, cut at the output limit.
    pub stdout: String,
    /// What it printed on stderr, cut at the output limit.
    pub stderr: String,
    /// Bytes left out beyond the limit (stdout, stderr).
    pub dropped: (u64, u64),
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Killed because the run was cancelled.
    pub cancelled: bool,
}

impl Finished {
    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// How [`Sandbox::run`] runs one command.
pub struct RunOptions<'a> {
    /// The working folder (inside the workspace).
    pub cwd: &'a Path,
    /// When it is killed, whole tree and all.
    pub timeout: Duration,
    /// Bytes kept of each of stdout and stderr (the rest is read and
    /// counted, so the command never blocks on a full pipe).
    pub max_output: usize,
    /// Polled while it runs: true kills it.
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
}

enum Confinement {
    Confined { helper: PathBuf, policy_json: String },
    Off,
}

/// The confinement of one run: its own folder (home and temporary files
/// of its processes, removed when the sandbox is dropped), the policy and
/// the environment. Every process a model chooses is started through it.
pub struct Sandbox {
    confinement: Confinement,
    policy: Option<Policy>,
    env: Vec<(String, String)>,
    settings: Settings,
    _dir: tempfile::TempDir,
    workspace: PathBuf,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("confined", &self.is_confined())
            .field("workspace", &self.workspace)
            .field("network", &self.settings.network)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// The sandbox of a run over `workspace` with these settings;
    /// `protected` are workspace paths no command may change (solve's test
    /// files). With the mode on and the machine unable to confine, an
    /// error: nothing runs unconfined unless the operator said so.
    pub fn new(settings: &Settings, workspace: &Path, protected: &[PathBuf]) -> Result<Sandbox, SandboxError> {
        Sandbox::with_facts(settings, workspace, protected, Facts::from_env())
    }

    /// [`Sandbox::new`] with the facts given (a home folder of a test's).
    pub fn with_facts(
        settings: &Settings,
        workspace: &Path,
        protected: &[PathBuf],
        facts: Facts,
    ) -> Result<Sandbox, SandboxError> {
        let workspace =
            workspace.canonicalize().map_err(|e| SandboxError::Folder(format!("{}: {e}", workspace.display())))?;
        let dir = tempfile::Builder::new()
            .prefix("noesis-run-")
            .tempdir()
            .map_err(|e| SandboxError::Folder(e.to_string()))?;
        let run_dir = dir.path().canonicalize().map_err(|e| SandboxError::Folder(e.to_string()))?;
        for sub in ["home", "tmp"] {
            std::fs::create_dir(run_dir.join(sub)).map_err(|e| SandboxError::Folder(e.to_string()))?;
        }
        let host: Vec<(String, String)> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
        let mut env = crate::secrets::child_env(
            &host,
            &settings.env,
            &run_dir.join("home"),
            &run_dir.join("tmp"),
            &facts.toolchains,
        );
        for (k, v) in &settings.set_env {
            env.retain(|(n, _)| n != k);
            env.push((k.clone(), v.clone()));
        }
        let (confinement, policy) = match settings.mode {
            Mode::Off => (Confinement::Off, None),
            Mode::On => {
                let support = probe()?;
                let places = Places { workspace: &workspace, run_dir: &run_dir, protected };
                let mut policy = Policy::build(settings, &canonical_facts(facts), &places, &list_dir, &|p| p.exists());
                let masked = run_dir.join("masked");
                std::fs::write(&masked, b"")
                    .and_then(|()| {
                        std::fs::set_permissions(&masked, std::os::unix::fs::PermissionsExt::from_mode(0o000))
                    })
                    .map_err(|e| SandboxError::Folder(e.to_string()))?;
                policy.mask_file = Some(masked);
                let policy_json = serde_json::to_string(&policy).map_err(|e| SandboxError::Setup(e.to_string()))?;
                (Confinement::Confined { helper: support.helper, policy_json }, Some(policy))
            }
        };
        Ok(Sandbox { confinement, policy, env, settings: settings.clone(), _dir: dir, workspace })
    }

    /// Whether commands are confined (the mode is on).
    pub fn is_confined(&self) -> bool {
        matches!(self.confinement, Confinement::Confined { .. })
    }

    /// The policy in force (`None` when off).
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    /// A folder of the run's own that confined processes may write and
    /// noesis may read (reports a command is asked to write).
    pub fn scratch(&self) -> PathBuf {
        self._dir.path().join("tmp")
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The names of the variables a confined process gets.
    pub fn env_names(&self) -> Vec<&str> {
        self.env.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// A command that runs `program args…` confined, in `cwd`, with the
    /// scrubbed environment and stdin closed (the caller may set stdio and
    /// add variables it trusts). Killing the returned child kills the
    /// whole tree; when noesis dies, so does the tree.
    pub fn command(&self, program: &OsStr, args: &[OsString], cwd: &Path) -> Command {
        let mut cmd = match &self.confinement {
            Confinement::Confined { helper, policy_json } => {
                let mut c = Command::new(helper);
                c.arg("exec")
                    .arg("--parent")
                    .arg(std::process::id().to_string())
                    .arg("--policy")
                    .arg(policy_json)
                    .arg("--")
                    .arg(program)
                    .args(args);
                c
            }
            Confinement::Off => {
                let mut c = Command::new(program);
                c.args(args);
                // Its own process group, so a kill reaches what it started
                // (the best an unconfined command gets).
                std::os::unix::process::CommandExt::process_group(&mut c, 0);
                c
            }
        };
        cmd.env_clear().envs(self.env.iter().map(|(k, v)| (k, v))).current_dir(cwd).stdin(Stdio::null());
        cmd
    }

    /// Runs `argv` to its end: killed (with everything it started) at the
    /// timeout or when `cancelled` says so, and this returns only once
    /// nothing of it is left running.
    pub fn run(&self, argv: &[String], opts: &RunOptions<'_>) -> Result<Finished, SandboxError> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| SandboxError::Start { program: String::new(), message: "an empty command".into() })?;
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let mut child = self
            .command(OsStr::new(program), &args, opts.cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Start { program: program.clone(), message: e.to_string() })?;
        let out = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>), opts.max_output);
        let err = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>), opts.max_output);
        let started = Instant::now();
        // Woken the moment the child exits (its pidfd turns readable), and
        // at least every 20 ms to look at the clock and the cancel flag.
        let exited =
            rustix::process::pidfd_open(rustix::process::Pid::from_child(&child), rustix::process::PidfdFlags::empty())
                .ok();
        let (status, timed_out, cancelled) = loop {
            match child.try_wait() {
                Ok(Some(s)) => break (Some(s), false, false),
                Ok(None) => {
                    let spent = started.elapsed();
                    let timed_out = spent >= opts.timeout;
                    let cancelled = !timed_out && (opts.cancelled)();
                    if timed_out || cancelled {
                        self.kill(&mut child);
                        break (None, timed_out, cancelled);
                    }
                    let wait = (opts.timeout - spent).min(Duration::from_millis(20));
                    match &exited {
                        Some(fd) => {
                            let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                            let t = rustix::event::Timespec { tv_sec: 0, tv_nsec: i64::from(wait.subsec_nanos()) };
                            let _ = rustix::event::poll(&mut fds, Some(&t));
                        }
                        None => std::thread::sleep(wait.min(Duration::from_millis(2))),
                    }
                }
                Err(e) => {
                    self.kill(&mut child);
                    return Err(SandboxError::Start { program: program.clone(), message: format!("waiting: {e}") });
                }
            }
        };
        // Confined, the pipes close when the namespace is gone, so this
        // waits for the last process of the tree. Unconfined, a process
        // that left the group may hold them: it is not waited for.
        let (stdout, stdout_dropped) = join(out, self.is_confined());
        let (stderr, stderr_dropped) = join(err, self.is_confined());
        let (code, signal) = match status {
            None => (None, Some(9)),
            Some(s) => {
                use std::os::unix::process::ExitStatusExt;
                (s.code(), s.signal())
            }
        };
        if self.is_confined()
            && code == Some(SETUP_FAILED)
            && let Some(message) = stderr.lines().find_map(|l| l.strip_prefix(ERROR_PREFIX))
        {
            return Err(SandboxError::Setup(message.to_owned()));
        }
        Ok(Finished { code, signal, stdout, stderr, dropped: (stdout_dropped, stderr_dropped), timed_out, cancelled })
    }

    /// Kills `child` and everything it started, and reaps it.
    pub fn kill(&self, child: &mut Child) {
        if !self.is_confined()
            && let Some(pid) = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

type Reader = std::sync::mpsc::Receiver<(Vec<u8>, u64)>;

fn reader(pipe: Option<Box<dyn Read + Send>>, max: usize) -> Option<Reader> {
    let mut pipe = pipe?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut dropped = 0u64;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = max.saturating_sub(kept.len()).min(n);
                    kept.extend_from_slice(&buf[..room]);
                    dropped += (n - room) as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send((kept, dropped));
    });
    Some(rx)
}

fn join(reader: Option<Reader>, wait: bool) -> (String, u64) {
    let Some(rx) = reader else { return (String::new(), 0) };
    let got = if wait {
        rx.recv().ok()
    } else {
        // An unconfined process that left the group may hold the pipe
        // open: it gets a moment, then its reader is left behind.
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(v) => Some(v),
            Err(_) => {
                return (String::from("[output still held open by a process that left the command's group]"), 0);
            }
        }
    };
    let (bytes, dropped) = got.unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), dropped)
}

fn list_dir(p: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(p).map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default()
}

/// Facts with canonical paths, as Landlock sees them.
fn canonical_facts(mut f: Facts) -> Facts {
    let canon = |p: PathBuf| p.canonicalize().unwrap_or(p);
    f.home = f.home.map(canon);
    f.noesis_home = f.noesis_home.map(canon);
    f.secret_files = f.secret_files.into_iter().map(canon).collect();
    f.toolchains = f.toolchains.into_iter().map(|(n, p)| (n, canon(p))).collect();
    f
}
