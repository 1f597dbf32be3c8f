//! `noesis ask "QUERY"`: the default (recall) plugin. The model navigates
//! past cognition with `search_frames`, `open_frame` and `read_file` (each
//! call a child frame of the answer), sees only its session's frames, those
//! of linked sessions and promoted ones, and is offered set-aside branches.
//! A confident answer that verification confirms is promoted to memory,
//! which later questions search first.

use std::process::ExitCode;
use std::sync::Arc;

use noesis_modules::search::SearchPath;
use noesis_plugins::ask::{Question, StoreHost};
use noesis_store::Store;

use crate::out;
use crate::provider::ProviderArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The question.
    query: String,
    /// Files the answer should rest on (read and cited).
    files: Vec<String>,
    /// Tool calls the model may make.
    #[arg(long, value_name = "N", default_value_t = 12)]
    max_tool_calls: u32,
    /// Print the answer's frame and its children as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    if a.query.trim().is_empty() {
        anyhow::bail!("the question is empty: noesis ask \"QUERY\"");
    }
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        let s = super::plugins::setup().await?;
        let provider = super::agent::with_text_tools(crate::provider::select(&a.provider, &s.config, None)?, &s.config);
        if let Some(w) = noesis_host::provider::unpriced_warning(&a.provider, &s.config, provider.as_ref()) {
            out::note(&w);
        }
        let exclude = s.exclude;
        let store: Arc<dyn Store> = Arc::from(s.store);
        let setting = noesis_plugins::Setting { project: &s.project, store: store.as_ref(), exclude: &exclude };
        let quiet = a.quiet;
        let host = StoreHost {
            search: search.clone(),
            provider: Arc::clone(&provider),
            store: Arc::clone(&store),
            project_id: s.project.project_id.clone(),
            redactor: Arc::new(noesis_sandbox::Redactor::from_env(&[], &[])),
            observe: Some(Box::new(move |run_id, p| super::agent::progress_notes(quiet, run_id, "  ")(p))),
            budget: crate::provider::budget(&a.provider, &s.config)?,
            prices: Some(crate::provider::prices(&s.config)),
        };
        let question = Question {
            query: a.query.clone(),
            files: a.files.clone(),
            max_tool_calls: a.max_tool_calls,
            promote_at: s.config.frames.promote_at.unwrap_or(0.8),
        };
        let answer = noesis_plugins::ask::ask(&setting, &question, provider, &host).await?;
        if a.json {
            out::json(&answer.to_json(), true)?;
            return Ok(ExitCode::SUCCESS);
        }
        out::data(&answer.to_text())?;
        for note in answer.notes() {
            out::note(&note);
        }
        Ok(ExitCode::SUCCESS)
    })
}
