//! `noesis`: a cognitive runtime for LLM agents. This binary is thin glue:
//! argument parsing, provider selection, reading files and printing; the
//! work happens in the library crates.

mod cluster;
mod cmd;
mod config;
mod local;
mod memory;
mod out;
mod progress;
mod provider;
mod stop;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// noesis — a cognitive runtime for LLM agents: Cognitive Modules (v2.2) with validated envelopes, an agent loop with tools, and a causal memory of every step.
#[derive(Debug, Parser)]
#[command(name = "noesis", version, long_about = None, propagate_version = true)]
struct Cli {
    /// Extra folder that holds modules, searched first (repeatable).
    #[arg(long = "modules", global = true, value_name = "DIR")]
    modules: Vec<PathBuf>,
    /// Where frames and sessions are kept: a SQLite file (path or sqlite://PATH) or
    /// postgres://USER@HOST/DB. Default: $NOESIS_HOME/noesis.db (NOESIS_HOME: ~/.noesis).
    #[arg(long, global = true, env = "NOESIS_STORE", value_name = "URL")]
    store: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a task with tools (read, edit, search, run commands): live steps on stderr, the answer on stdout;
    /// list, show, resume, replay, fork, approve and deny runs.
    Agent(Box<cmd::agent::Args>),
    /// Run a module and print its envelope (exit 0 ok, 1 failure envelope, 2 usage error).
    Run(cmd::run::Args),
    /// Run a composed module (@call, composition:) and print its envelope; --trace shows every step on stderr.
    Compose(cmd::compose::Args),
    /// Validate a module, or envelope files with --envelope.
    Validate(cmd::validate::Args),
    /// Run conformance test vectors from a folder; ends with "N passed, N failed".
    Conformance(cmd::conformance::Args),
    /// List the modules on the search path.
    List(cmd::list::Args),
    /// Show a module's manifest, rules and schemas.
    Info(cmd::info::Args),
    /// Create a new v2.2 module that validates.
    Init(cmd::init::Args),
    /// Run a module's test cases (or every module's under a folder); ends with "N passed, N failed".
    Test(cmd::test::Args),
    /// Rewrite a v0/v1/v2.0/v2.1 module as v2.2, keeping a backup; --dry-run shows the changes.
    Migrate(cmd::migrate::Args),
    /// Start a session (hash the files in scope, invalidate stale frames) or diff it with the last.
    Session(cmd::session::Args),
    /// List, show, invalidate, verify and resume the project's frames.
    Frames(cmd::frames::Args),
    /// Install a module from git (github:OWNER/REPO[/PATH][@REF|@^RANGE], a git URL with --path) or a folder; with no source, what cognitive.lock lists.
    Install(cmd::install::InstallArgs),
    /// Install modules again from their recorded sources (the newest their range allows; --latest: the newest).
    Update(cmd::install::UpdateArgs),
    /// Remove an installed module and its cognitive.lock entry.
    #[command(alias = "uninstall")]
    Remove(cmd::install::RemoveArgs),
    /// List a git source's versions (its semver tags), newest first.
    Versions(cmd::install::VersionsArgs),
    /// Install a module from GitHub (github:OWNER/REPO[/PATH][@REF]).
    Add(cmd::install::InstallArgs),
    /// Search the registry index by name, description and tags.
    Search(cmd::install::SearchArgs),
    /// The registry index: where it is, how many modules, when it was fetched.
    Registry(cmd::install::RegistryArgs),
    /// Solve a coding task, verified: PLANNER → REASONER → CODER → VERIFIER → CONSOLIDATOR (REFLECTOR on failure), anchors kept green.
    Solve(Box<cmd::solve::Args>),
    /// Ask about past cognition: the model searches and opens earlier frames (visible: this session, linked ones, promoted ones).
    Ask(cmd::ask::Args),
    /// Living docs: a YAML knowledge node per code unit, Markdown rendered from it; sync remakes only stale nodes.
    Docs(cmd::plugins::DocsArgs),
    /// Review a diff (--diff FILE, --git RANGE, default the working tree): findings by file and lines, as text, JSON or SARIF 2.1.0.
    Review(cmd::plugins::ReviewArgs),
    /// Write tests: the model specifies cases per function, the test code is rendered from the specs (pytest, Rust #[test]).
    Testgen(cmd::plugins::TestgenArgs),
    /// Frame plugins: list the built-in ones and those configured as programs ([plugins.NAME]); run one step of one.
    Plugin(cmd::plugins::PluginArgs),
    /// Search what earlier `solve` episodes did and learnt (episodic and procedural memory).
    Memory(cmd::memory::Args),
    /// The project's CognitiveState (imlazy's state manager, with legal transitions, a retry budget and history).
    State(cmd::state::Args),
    /// Serve the modules to MCP clients (editors, agents) over stdio: tools run, list, info; a resource per module.
    Mcp(cmd::mcp::Args),
    /// Show configured providers, which one a run would use and whether each answers (never a key).
    Doctor(cmd::doctor::Args),
    /// Agent Skills (SKILL.md folders) a run here is offered: `list`, `show NAME`.
    Skills(cmd::skills::Args),
    /// The sandbox of the model's commands: `check` shows what this machine supports and what a run may do, and tries it.
    Sandbox(cmd::sandbox::Args),
    /// Serve the modules over HTTP (run, stream, list, info) and the dashboard at /; runs are not recorded as frames.
    Serve(cmd::serve::Args),
    /// Drive the runs submitted to a Temporal cluster (`agent --on ADDR`) from this machine, until Ctrl-C.
    Worker(cmd::worker::Args),
    /// Open the dashboard: sessions, frame trees and evidence in a browser, on a loopback port (URL on stdout).
    Ui(cmd::serve::UiArgs),
    /// Print a shell completion script: bash, zsh, fish, powershell or elvish (e.g. `noesis completions bash > ~/.local/share/bash-completion/completions/noesis`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Install the local model, list models, show the model file a local run uses.
    #[cfg(feature = "local")]
    Model(cmd::model::Args),
}

fn main() -> ExitCode {
    // The version alone needs no command tree: clap would build all of it
    // (every subcommand's arguments) before printing one line.
    let mut args = std::env::args_os();
    if args.len() == 2 && args.nth(1).is_some_and(|a| a == "--version" || a == "-V") {
        let _ = out::data(concat!("noesis ", env!("CARGO_PKG_VERSION")));
        return ExitCode::SUCCESS;
    }
    let parsed =
        grouped(Cli::command()).try_get_matches().and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // Spans go to an OTLP endpoint only when OTEL_EXPORTER_OTLP_ENDPOINT
    // (or the traces one) is set; otherwise nothing is installed.
    let traces = match noesis_trace::Exporter::from_env("noesis") {
        Ok(t) => t,
        Err(e) => {
            out::note(&format!("warning: {e}; no traces are exported"));
            None
        }
    };
    let result = dispatch(cli);
    if let Some(t) = traces {
        t.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(err) => {
            if out::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            out::error(&format!("{err:#}"));
            ExitCode::from(2)
        }
    }
}

/// The commands by what they are for, as `noesis --help` lists them.
const GROUPS: &[(&str, &[&str])] = &[
    ("Modules", &["run", "compose", "validate", "test", "conformance", "list", "info", "init", "migrate"]),
    ("Agents", &["agent", "skills", "sandbox"]),
    ("Workflow", &["solve", "state", "memory"]),
    ("Memory and frames", &["session", "frames", "ask", "docs", "review", "testgen", "plugin"]),
    ("Serving", &["serve", "ui", "mcp", "worker"]),
    ("Distribution", &["install", "update", "remove", "add", "versions", "search", "registry"]),
    ("Setup", &["doctor", "model", "completions"]),
];

/// `cmd` with its subcommands listed in [`GROUPS`] (clap lists them in one
/// flat block); a command missing from the table is listed under "Other".
fn grouped(cmd: clap::Command) -> clap::Command {
    use std::fmt::Write as _;
    let visible: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    let width = visible.iter().map(|c| c.get_name().len()).max().unwrap_or(0);
    let about = |c: &clap::Command| c.get_about().map(ToString::to_string).unwrap_or_default();
    let mut listed: Vec<&str> = Vec::new();
    let mut text = String::new();
    let mut section = |title: &str, names: &mut dyn Iterator<Item = &clap::Command>| {
        let mut lines = String::new();
        for c in names {
            let _ = writeln!(lines, "  {:width$}  {}", c.get_name(), about(c));
        }
        if !lines.is_empty() {
            let _ = write!(text, "{title}:\n{lines}\n");
        }
    };
    for (title, names) in GROUPS {
        let mut these = names.iter().filter_map(|n| visible.iter().find(|c| c.get_name() == *n).copied());
        listed.extend(names.iter().copied());
        section(title, &mut these);
    }
    section("Other", &mut visible.iter().copied().filter(|c| !listed.contains(&c.get_name())));
    let template =
        format!("{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{text}Options:\n{{options}}{{after-help}}");
    cmd.help_template(template)
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let search = noesis_modules::search::SearchPath::from_env(&cli.modules);
    memory::configure(
        cli.store.clone(),
        matches!(cli.command, Command::Serve(_) | Command::Ui(_) | Command::Mcp(_) | Command::Worker(_)),
    );
    match cli.command {
        Command::Agent(a) => cmd::agent::run(&search, *a),
        Command::Worker(a) => cmd::worker::run(&search, a),
        Command::Run(a) => cmd::run::run(&search, a),
        Command::Compose(a) => cmd::compose::run(&search, a),
        Command::Validate(a) => cmd::validate::run(&search, a),
        Command::Conformance(a) => cmd::conformance::run(a),
        Command::List(a) => cmd::list::run(&search, a),
        Command::Info(a) => cmd::info::run(&search, a),
        Command::Init(a) => cmd::init::run(a),
        Command::Test(a) => cmd::test::run(&search, a),
        Command::Migrate(a) => cmd::migrate::run(&search, a),
        Command::Session(a) => cmd::session::run(a),
        Command::Frames(a) => cmd::frames::run(a),
        Command::State(a) => cmd::state::run(a),
        Command::Solve(a) => cmd::solve::run(&search, *a),
        Command::Memory(a) => cmd::memory::run(a),
        Command::Ask(a) => cmd::ask::run(&search, a),
        Command::Docs(a) => cmd::plugins::docs(&search, a),
        Command::Review(a) => cmd::plugins::review(&search, a),
        Command::Testgen(a) => cmd::plugins::testgen(&search, a),
        Command::Plugin(a) => cmd::plugins::plugin(&search, a),
        Command::Install(a) => cmd::install::install(a),
        Command::Update(a) => cmd::install::update(a),
        Command::Remove(a) => cmd::install::remove(a),
        Command::Versions(a) => cmd::install::versions(a),
        Command::Add(a) => cmd::install::add(a),
        Command::Search(a) => cmd::install::search(a),
        Command::Registry(a) => cmd::install::registry_status(a),
        Command::Mcp(a) => cmd::mcp::run(&search, a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Skills(a) => cmd::skills::run(a),
        Command::Sandbox(a) => cmd::sandbox::run(a),
        Command::Serve(a) => cmd::serve::run(&search, a),
        Command::Ui(a) => cmd::serve::ui(&search, a),
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "noesis", &mut buf);
            out::data(&String::from_utf8_lossy(&buf))?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "local")]
        Command::Model(a) => cmd::model::run(a),
    }
}
