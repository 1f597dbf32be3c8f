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
        TraceFormat::Table => out::note(&table(steps)),
    }
}

fn table(steps: &[StepTrace]) -> String {
    let rows: Vec<[String; 6]> = steps
        .iter()
        .map(|s| {
            let round = s.round.map(|r| format!(" #{r}")).unwrap_or_default();
            [
                s.id.to_string(),
                s.parent.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                format!("{}{}", "  ".repeat(s.depth as usize), s.module),
                format!("{}{round}", s.via),
                format!("{:.1}ms +{:.1}ms", s.start_ms, s.elapsed_ms),
                s.outcome.to_string(),
            ]
        })
        .collect();
    let head = ["step", "parent", "module", "via", "start +took", "outcome"];
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  "));
            }
        }
        l
    };
    let mut out = vec![line(&head)];
    for r in &rows {
        out.push(line(&r.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out.join("\n")
}
