//! `noesis`: a cognitive runtime for LLM agents. This binary is thin glue:
//! argument parsing, provider selection, reading files and printing; the
//! work happens in the library crates.

mod cmd;
mod out;
mod provider;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// noesis — run Cognitive Modules (v2.2) against any LLM, with validated envelopes.
#[derive(Debug, Parser)]
#[command(name = "noesis", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Extra folder that holds modules, searched first (repeatable).
    #[arg(long = "modules", global = true, value_name = "DIR")]
    modules: Vec<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a module and print its envelope (exit 0 ok, 1 failure envelope, 2 usage error).
    Run(cmd::run::Args),
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
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match dispatch(cli) {
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

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let search = noesis_modules::search::SearchPath::from_env(&cli.modules);
    match cli.command {
        Command::Run(a) => cmd::run::run(&search, a),
        Command::Validate(a) => cmd::validate::run(&search, a),
        Command::Conformance(a) => cmd::conformance::run(a),
        Command::List(a) => cmd::list::run(&search, a),
        Command::Info(a) => cmd::info::run(&search, a),
        Command::Init(a) => cmd::init::run(a),
    }
}
