//! `noesis sandbox check`: what this machine supports and what a run would
//! be allowed, shown and tried; and the sandbox flags of the commands that
//! run what a model chooses.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use noesis_sandbox::{Mode, RunOptions, Sandbox, Settings};
use serde_json::{Value, json};

use crate::config::Config;
use crate::out;

/// How commands chosen by the model are confined (agent runs, solve).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SandboxArgs {
    /// `off` runs the model's commands unconfined, with your permissions
    /// (loud, and recorded in the run) [default: `[sandbox] mode`, else on].
    #[arg(long = "sandbox", value_name = "on|off", value_parser = parse_mode)]
    pub(crate) mode: Option<Mode>,
    /// Let the model's commands use the network (TCP/UDP anywhere, loopback
    /// included); off by default.
    #[arg(long)]
    pub(crate) allow_network: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "on" => Ok(Mode::On),
        "off" => Ok(Mode::Off),
        _ => Err(format!("`{s}` is not on or off")),
    }
}

impl SandboxArgs {
    /// The settings in force: the flags over `[sandbox]`.
    pub(crate) fn settings(&self, config: &Config) -> Settings {
        config.sandbox_settings(self.mode, self.allow_network, home().as_deref())
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// Says loudly that commands run unconfined (the operator chose it).
pub(crate) fn warn_if_off(settings: &Settings, quiet: bool) {
    if settings.mode == Mode::Off && !quiet {
        out::note(
            "warning: the sandbox is off (--sandbox off): the model's commands run unconfined, with your permissions, files and network",
        );
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Show what this machine supports and what a run would be allowed, and
    /// try it: a write outside the workspace, a secret read and a TCP
    /// connection, each from inside the sandbox.
    Check {
        /// The workspace to show the policy for [default: the current folder].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Run a command as the model's commands run (confined, scrubbed
    /// environment, its own temporary folder), to see what works inside;
    /// exits with its status.
    Run {
        /// The workspace [default: the current folder].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Seconds before the command (and all it started) is killed.
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.command {
        Sub::Check { workspace, json, sandbox } => check(workspace, json, &sandbox),
        Sub::Run { workspace, timeout, sandbox, command } => run_one(workspace, timeout, &sandbox, &command),
    }
}

fn run_one(workspace: Option<PathBuf>, timeout: u64, flags: &SandboxArgs, argv: &[String]) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("no current directory")?;
    let config = crate::config::load(&crate::provider::env, &cwd)?.config;
    let mut settings = flags.settings(&config);
    warn_if_off(&settings, false);
    let ws = workspace.unwrap_or_else(|| cwd.clone());
    // A program named by its full path runs from its installation.
    settings.read_extra.extend(argv.first().and_then(|p| noesis_sandbox::paths::program_root(p)));
    let sandbox = Sandbox::new(&settings, &ws, &[])?;
    let (program, args) = argv.split_first().context("no command given")?;
    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let mut child = sandbox
        .command(program.as_ref(), &args, if cwd.starts_with(&ws) { &cwd } else { &ws })
        .stdin(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("`{program}` could not start"))?;
    let limit = Duration::from_secs(timeout);
    let began = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let code = status.code().unwrap_or(1);
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
        }
        if began.elapsed() >= limit {
            sandbox.kill(&mut child);
            anyhow::bail!("`{program}` timed out after {timeout} s and was killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn check(workspace: Option<PathBuf>, as_json: bool, flags: &SandboxArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("no current directory")?;
    let config = crate::config::load(&crate::provider::env, &cwd)?.config;
    let settings = flags.settings(&config);
    let ws = workspace.unwrap_or(cwd);
    let support = noesis_sandbox::probe();
    let mut report = json!({
        "available": support.is_ok(),
        "mode": settings.mode,
        "settings": settings,
    });
    match &support {
        Ok(s) => {
            report["helper"] = json!(s.helper);
            report["landlock"] = json!(s.landlock);
            report["root"] = json!(s.root);
        }
        Err(e) => report["error"] = json!(e.to_string()),
    }
    let sandbox = Sandbox::new(&settings, &ws, &[]);
    if let Ok(sb) = &sandbox {
        report["confined"] = json!(sb.is_confined());
        if let Some(p) = sb.policy() {
            report["policy"] = serde_json::to_value(p).unwrap_or(Value::Null);
        }
        report["environment"] = json!(sb.env_names());
        report["checks"] = Value::Array(trials(sb, &ws));
    }
    if as_json {
        out::json(&report, true)?;
    } else {
        out::data(&text(&report))?;
    }
    Ok(if support.is_ok() || settings.mode == Mode::Off { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Each attack tried from inside the sandbox, with what happened.
fn trials(sb: &Sandbox, ws: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let run = |script: &str| {
        sb.run(
            &["sh".into(), "-c".into(), script.into()],
            &RunOptions { cwd: ws, timeout: Duration::from_secs(20), max_output: 4096, cancelled: &|| false },
        )
    };
    let mut trial = |what: &str, refused: Option<bool>, detail: String| {
        out.push(json!({"check": what, "refused": refused, "detail": detail}));
    };
    match tempfile::tempdir() {
        Ok(outside) => {
            let target = outside.path().join("escaped");
            let r = run(&format!("echo x > '{}'", target.display()));
            trial("write outside the workspace", Some(!target.exists()), describe(&r));
        }
        Err(e) => trial("write outside the workspace", None, format!("no temporary folder: {e}")),
    }
    let secret = home()
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

fn describe(r: &Result<noesis_sandbox::Finished, noesis_sandbox::SandboxError>) -> String {
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

fn text(r: &Value) -> String {
    let mut s = String::new();
    let list = |v: &Value| -> String {
        let items: Vec<String> =
            v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default();
        if items.is_empty() { "none".into() } else { items.join(", ") }
    };
    if r["available"] == json!(true) {
        s.push_str(&format!(
            "sandbox: available — Landlock {}, new pid and mount namespaces, seccomp\nhelper: {}\n",
            r["landlock"].as_str().unwrap_or("?"),
            r["helper"].as_str().unwrap_or("?")
        ));
        if r["root"] == json!(true) {
            s.push_str("noesis runs as root: confined commands run as root without any capability\n");
        }
    } else {
        s.push_str(&format!("sandbox: NOT available — {}\n", r["error"].as_str().unwrap_or("?")));
    }
    if r["mode"] == json!("off") {
        s.push_str("mode: OFF — the model's commands would run unconfined\n");
    }
    if let Some(p) = r.get("policy") {
        s.push_str("a run here would:\n");
        let read: Vec<&str> =
            p["read"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let etc = read.iter().filter(|r| r.starts_with("/etc/")).count();
        let mut shown: Vec<String> = read.iter().filter(|r| !r.starts_with("/etc/")).map(|r| (*r).to_owned()).collect();
        if etc > 0 {
            let hidden: Vec<&str> =
                noesis_sandbox::paths::ETC_SECRETS.iter().copied().filter(|x| Path::new(x).exists()).collect();
            shown.insert(0, format!("/etc ({etc} entries; left out: {})", hidden.join(", ")));
        }
        s.push_str(&format!("  read and execute: {}\n", shown.join(", ")));
        s.push_str(&format!("  write: {}\n", list(&p["write"])));
        s.push_str(&format!("  read-only inside those: {}\n", list(&p["read_only"])));
        s.push_str(&format!("  hidden: {}\n", list(&p["mask"])));
        s.push_str(&format!("  network: {}\n", if p["network"] == json!(true) { "on" } else { "off" }));
        let l = &p["limits"];
        let mib = |v: &Value| v.as_u64().map_or("none".into(), |b| format!("{} MiB", b >> 20));
        s.push_str(&format!(
            "  limits: memory {}, file size {}, CPU {}\n",
            mib(&l["data_bytes"]),
            mib(&l["file_bytes"]),
            l["cpu_seconds"].as_u64().map_or("none".into(), |c| format!("{c} s"))
        ));
    }
    if let Some(env) = r.get("environment") {
        s.push_str(&format!("  environment: {}\n", list(env)));
    }
    if let Some(checks) = r["checks"].as_array() {
        s.push_str("tried from inside:\n");
        for c in checks {
            let verdict = match c["refused"].as_bool() {
                Some(true) => "refused",
                Some(false) => "ALLOWED",
                None => "not tried",
            };
            s.push_str(&format!(
                "  {}: {verdict} ({})\n",
                c["check"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("")
            ));
        }
    }
    s
}
