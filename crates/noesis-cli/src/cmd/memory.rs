//! `noesis memory search "…"`: what earlier `noesis solve` episodes did and
//! learnt, by the words of a question.

use std::process::ExitCode;

use noesis_store::MemoryQuery;
use serde_json::{Value, json};

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Episodes and lessons sharing words with QUERY, most relevant first.
    Search {
        /// The words to look for.
        query: String,
        /// Only `episode` or only `lesson` entries.
        #[arg(long, value_parser = ["episode", "lesson"])]
        kind: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 10)]
        limit: u32,
        /// Every project's, not only this one's.
        #[arg(long)]
        all_projects: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let Sub::Search { query, kind, limit, all_projects, json: as_json } = a.command;
    let rt = crate::memory::runtime()?;
    let found = rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        let q = MemoryQuery {
            text: &query,
            project_id: (!all_projects).then_some(project.project_id.as_str()),
            kind: kind.as_deref(),
            limit,
        };
        anyhow::Ok(store.search_memory(&q).await?)
    })?;
    if as_json {
        let rows: Vec<Value> = found
            .iter()
            .map(|m| {
                json!({"kind": m.entry.kind, "episode_id": m.entry.episode_id, "project_id": m.entry.project_id,
                       "at": noesis_frames::Timestamp::from_millis(m.entry.at).to_string(),
                       "text": m.entry.text, "record": m.entry.record})
            })
            .collect();
        out::json(&Value::Array(rows), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        out::note("nothing found");
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for m in &found {
        let first = m.entry.text.lines().next().unwrap_or_default();
        let outcome = m.entry.record["outcome"].as_str().map(|o| format!(" ({o})")).unwrap_or_default();
        text.push_str(&format!("{:<7}  {}  {first}{outcome}\n", m.entry.kind, m.entry.episode_id));
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
