//! `noesis compose`: a run with its composition made visible — every step
//! (depth, module, how it came to run, timing, outcome) on stderr.

use std::process::ExitCode;
use std::time::Duration;

use noesis::module::{SearchPath, StepTrace};

use super::run::{Composing, execute_module};
use crate::out;

/// How `--trace` prints the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TraceFormat {
    /// A table.
    Table,
    /// One JSON object per step, per line.
    Json,
}

#[derive(Debug, clap::Args)]
// The flattened run arguments already form a group called `Args`.
#[group(id = "compose-args")]
pub(crate) struct Args {
    #[command(flatten)]
    run: super::run::Args,
    /// Print every step on stderr: a table, or JSON lines with `--trace json`.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "table")]
    trace: Option<TraceFormat>,
    /// Total time allowed for every step together, in milliseconds (default:
    /// the module's composition.timeout_ms, else 60000).
    #[arg(long, value_name = "MS")]
    total_timeout: Option<u64>,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let composing = Composing { trace: a.trace, timeout: a.total_timeout.map(Duration::from_millis) };
    if a.run.is_batch() {
        anyhow::bail!(
            "--batch runs one module over many inputs: use `noesis run MODULE --batch FILE` (a composed module runs its children as usual)"
        );
    }
    execute_module(search, a.run, &composing)
}

/// The steps on stderr (stdout carries only the envelope).
pub(crate) fn print_trace(steps: &[StepTrace], format: TraceFormat) {
    match format {
        TraceFormat::Json => {
            for s in steps {
                out::note(&s.summary().to_string());
            }
        }
        TraceFormat::Table => out::note(&noesis_runtime::compose::trace_table(steps)),
    }
}
