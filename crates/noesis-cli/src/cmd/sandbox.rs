//! `noesis sandbox check`: what this machine supports and what a run would
//! be allowed, shown and tried; and the sandbox flags of the commands that
//! run what a model chooses.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use noesis_sandbox::{Mode, Settings};

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
    let settings = flags.settings(&config);
    warn_if_off(&settings, false);
    let ws = workspace.unwrap_or_else(|| cwd.clone());
    let code = noesis_sandbox::check::run_attached(&settings, &ws, &cwd, argv, Duration::from_secs(timeout))?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

fn check(workspace: Option<PathBuf>, as_json: bool, flags: &SandboxArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("no current directory")?;
    let config = crate::config::load(&crate::provider::env, &cwd)?.config;
    let settings = flags.settings(&config);
    let ws = workspace.unwrap_or(cwd);
    let report = noesis_sandbox::check::check(&settings, &ws, home().as_deref());
    if as_json {
        out::json(&serde_json::to_value(&report)?, true)?;
    } else {
        out::data(&report.text())?;
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
