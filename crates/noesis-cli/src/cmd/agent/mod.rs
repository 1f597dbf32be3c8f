//! `noesis agent`: runs a task with tools, and manages the runs kept in the
//! store (list, show, resume, replay, fork, approve, deny). The loop itself
//! is `noesis_agent`'s; this is a driver: provider, tools, store, terminal.

mod drive;
mod manage;

pub(crate) use drive::progress_notes;
#[cfg(feature = "temporal")]
pub(crate) use drive::report;
// The host's pieces by the paths `solve` and `ask` use.
pub(crate) use noesis_host::provider::with_text_tools;

/// The permission rules of a run (see `noesis_host::rules`).
pub(crate) mod rules {
    pub(crate) use noesis_host::rules::{RuleFlags, operator};
}

use std::process::ExitCode;

use noesis_agent::AgentRun;
use noesis_modules::search::SearchPath;

use crate::provider::ProviderArgs;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    start: StartArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// The project's runs, most recently changed first.
    List {
        /// Most runs to list.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A run: task, status, every turn and call, usage.
    Show {
        /// The run's id (a unique prefix will do).
        run: String,
        /// The run as it stood at this step.
        #[arg(long, value_name = "STEP")]
        at: Option<i64>,
        /// The stored run as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue a run after a stop, Ctrl-C, a crash or kill -9: finished calls
    /// are reused, a call that was running becomes an interrupted result.
    Resume {
        /// The run's id (a unique prefix will do).
        run: String,
        #[command(flatten)]
        drive: DriveArgs,
    },
    /// Drive a recorded run again from a step with the model's replies and
    /// the tools' results served from the record: no network, no side effects.
    Replay {
        /// The run's id (a unique prefix will do).
        run: String,
        /// Start from the run as it stood at this step (default: its start).
        #[arg(long, value_name = "STEP", default_value_t = 0)]
        from: i64,
        /// The replay as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A new run from a run's state at a step (the original is untouched),
    /// driven on from there.
    Fork {
        /// The run's id (a unique prefix will do).
        run: String,
        /// The step to fork at.
        #[arg(long, value_name = "STEP")]
        at: i64,
        /// Only create the fork; do not drive it.
        #[arg(long)]
        no_run: bool,
        /// Leave the workspace's files as they are (by default they are put
        /// back as they were at STEP).
        #[arg(long)]
        keep_files: bool,
        #[command(flatten)]
        drive: DriveArgs,
    },
    /// Put a run's workspace files back as they were at a step (the run
    /// itself is left as it is; `fork --at` goes on from there).
    Rewind {
        /// The run's id (a unique prefix will do).
        run: String,
        /// The step whose files to restore.
        #[arg(long, value_name = "STEP")]
        at: i64,
        /// What was undone, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a paused run's pending calls (all, or CALL), then `resume` it.
    Approve {
        /// The run's id (a unique prefix will do).
        run: String,
        /// One pending call; default: every pending call.
        call: Option<String>,
        /// Run the call with these arguments instead (JSON; needs CALL).
        #[arg(long, value_name = "JSON", requires = "call")]
        args: Option<String>,
        /// The argument hash the decision is for, as `show` printed it: a
        /// call whose arguments differ is refused.
        #[arg(long, value_name = "HASH", requires = "call")]
        hash: Option<String>,
        /// The result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run on a Temporal cluster (`agent --on`): it stops after its
    /// current step, resumable; a local run stops with Ctrl-C where it runs.
    Cancel {
        /// The run's id (a unique prefix will do).
        run: String,
    },
    /// Deny a paused run's pending calls (all, or CALL); the model sees the message.
    Deny {
        /// The run's id (a unique prefix will do).
        run: String,
        /// One pending call; default: every pending call.
        call: Option<String>,
        /// Why, for the model.
        #[arg(long, short)]
        message: Option<String>,
        /// Abort the whole run instead.
        #[arg(long)]
        abort: bool,
        /// The argument hash the decision is for (see `approve --hash`).
        #[arg(long, value_name = "HASH", requires = "call")]
        hash: Option<String>,
        /// The result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// How a run is driven (a new run, `resume` and `fork`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DriveArgs {
    /// Tools that write files or run commands: ask (in a terminal; otherwise
    /// the run pauses, exit 3), auto (run them), never (deny them)
    /// [default: `[agent] approve`, else ask].
    #[arg(long, value_name = "POLICY", value_parser = ["ask", "auto", "never"])]
    approve: Option<String>,
    /// The whole outcome as JSON on stdout (instead of the answer's text).
    #[arg(long)]
    json: bool,
    /// No live steps on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Show the model's text on stderr as it is written [default: when
    /// stderr is a terminal].
    #[arg(long, overrides_with = "no_stream")]
    stream: bool,
    /// Show each reply only when it is complete.
    #[arg(long, overrides_with = "stream")]
    no_stream: bool,
    /// Seconds one tool call may take; then its result is a timeout error
    /// the model sees (run_command's own `timeout_s` kills the command).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    tool_timeout: u64,
    #[command(flatten)]
    provider: ProviderArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StartArgs {
    /// What the agent should do.
    #[arg(required = true)]
    task: Option<String>,
    /// react (tools, as many rounds as needed), single-shot (one call, no
    /// tools) or chain-of-thought (a numbered plan, then each step).
    #[arg(long, default_value = "react", value_parser = ["react", "single-shot", "chain-of-thought"])]
    strategy: String,
    /// Most model turns [default: `[agent] max_iterations`, else 20].
    #[arg(long, value_name = "N")]
    max_iterations: Option<u32>,
    /// Most tool calls over the run.
    #[arg(long, value_name = "N", default_value_t = 50)]
    max_tool_calls: u32,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    max_seconds: Option<u64>,
    /// Critique each answer and go on while the goal is not achieved.
    #[arg(long)]
    reflect: bool,
    /// Offer only these tools (repeatable; default: all).
    #[arg(long = "tool", value_name = "NAME")]
    tools: Vec<String>,
    /// Do not offer this tool (repeatable).
    #[arg(long = "no-tool", value_name = "NAME")]
    no_tools: Vec<String>,
    /// Let run_command run commands starting with these words (repeatable;
    /// added to `[agent] allow_commands`): the rule `run_command(CMD *)`,
    /// CMD's words literal; it still asks under --approve ask.
    #[arg(long = "allow-command", value_name = "CMD")]
    allow_commands: Vec<String>,
    #[command(flatten)]
    rules: noesis_host::rules::RuleFlags,
    /// The folder the tools may touch [default: the current directory].
    #[arg(long, value_name = "DIR")]
    workspace: Option<std::path::PathBuf>,
    /// Continue an agent session: earlier runs' tasks and answers are
    /// remembered.
    #[arg(long, value_name = "NAME")]
    session: Option<String>,
    /// Instructions placed before the task.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// A JSON Schema file the final answer must validate against: an answer
    /// that does not is sent back with its violations (twice at most);
    /// `--json` then carries the validated object as `output`.
    #[arg(long, value_name = "FILE")]
    output_schema: Option<std::path::PathBuf>,
    /// An MCP server whose tools the agent may call, as NAME='COMMAND ARGS'
    /// or NAME=URL (repeatable; added to `[mcp.servers]`). Its tools are
    /// offered as NAME__TOOL; each asks for approval (a server is trusted
    /// to mark tools read-only only with `trusted = true` in its config).
    #[arg(long = "mcp", value_name = "NAME=CMD")]
    mcp: Vec<String>,
    /// The run's id [default: a new UUIDv7].
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    #[command(flatten)]
    sandbox: crate::cmd::sandbox::SandboxArgs,
    #[command(flatten)]
    cluster: crate::cluster::OnArgs,
    #[command(flatten)]
    drive: DriveArgs,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    match a.command {
        None => drive::start(search, a.start),
        Some(Sub::List { limit, json }) => manage::list(limit, json),
        Some(Sub::Show { run, at, json }) => manage::show(&run, at, json),
        Some(Sub::Resume { run, drive }) => drive::resume(search, &run, drive),
        Some(Sub::Replay { run, from, json }) => manage::replay(&run, from, json),
        Some(Sub::Fork { run, at, no_run, keep_files, drive }) => {
            drive::fork(search, &run, at, no_run, keep_files, drive)
        }
        Some(Sub::Rewind { run, at, json }) => manage::rewind(&run, at, json),
        Some(Sub::Cancel { run }) => manage::cancel(&run),
        Some(Sub::Approve { run, call, args, hash, json }) => manage::approve(&run, call, args, hash, json),
        Some(Sub::Deny { run, call, message, abort, hash, json }) => {
            manage::deny(&run, call, message, abort, hash, json)
        }
    }
}

/// What a run is doing, as stored and listed.
pub(crate) fn status(run: &AgentRun) -> &'static str {
    run.status()
}

/// The exit code for where a run stands (see
/// [`noesis_agent::summary::exit_status`]).
pub(crate) fn exit_code(run: &AgentRun) -> ExitCode {
    ExitCode::from(noesis_agent::summary::exit_status(run))
}
