//! `noesis session start|diff`: record what a session sees and what changed
//! since the last one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use noesis_frames::session::{PromptChange, SessionDiff};
use noesis_frames::{CausalFrame, FileRole, Invalidation, Timestamp};
use noesis_store::ops;

use crate::memory;
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Start a session: hash the files in scope (honouring .gitignore),
    /// invalidate the frames whose files changed, record a root frame.
    Start(StartArgs),
    /// The latest session against the one before: prompt, files, frames
    /// invalidated, suspended frames that can resume.
    Diff(DiffArgs),
}

#[derive(Debug, clap::Args)]
struct StartArgs {
    /// The prompt the session starts with.
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,
    /// Path of the raw transcript of the conversation, kept with the session.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// Print JSON (the session's artifacts with every file).
    #[arg(long)]
    json: bool,
    /// No progress while the files are hashed.
    #[arg(long, short)]
    quiet: bool,
    /// Files and folders in scope (default: the whole project).
    paths: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct DiffArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let rt = memory::runtime()?;
    rt.block_on(async move {
        match a.command {
            Sub::Start(s) => start(s).await,
            Sub::Diff(d) => diff(d).await,
        }
    })
}

fn list_paths(title: &str, paths: &[String], text: &mut String) {
    text.push_str(&format!("{title} ({})\n", paths.len()));
    for p in paths {
        text.push_str(&format!("  {p}\n"));
    }
}

fn describe(diff: &SessionDiff, invalidated: &[Invalidation], resumable: &[CausalFrame], text: &mut String) {
    text.push_str(&match &diff.prompt {
        PromptChange::First => "prompt: first session of this project\n".to_owned(),
        PromptChange::Same => "prompt: same as the previous session\n".to_owned(),
        PromptChange::New { previous, .. } => {
            format!("prompt: new (was {})\n", previous.as_deref().map_or("none".to_owned(), |p| format!("{p:?}")))
        }
    });
    list_paths("changed", &diff.files.changed, text);
    list_paths("added", &diff.files.added, text);
    list_paths("removed", &diff.files.removed, text);
    text.push_str(&format!("unchanged: {}\n", diff.files.unchanged));
    text.push_str(&format!("invalidated ({})\n", invalidated.len()));
    for i in invalidated {
        text.push_str(&format!("  {}  {}\n", i.frame_id, i.reason));
    }
    text.push_str(&format!("resumable ({})\n", resumable.len()));
    for f in resumable {
        text.push_str(&format!("  {}  {}\n", f.frame_id, f.query.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
}

async fn start(a: StartArgs) -> anyhow::Result<ExitCode> {
    let project = memory::project()?;
    let store = memory::open().await?;
    let cwd = std::env::current_dir()?;
    let scope: Vec<PathBuf> = a.paths.iter().map(|p| if p.is_absolute() { p.clone() } else { cwd.join(p) }).collect();
    for p in &scope {
        if !p.exists() {
            anyhow::bail!("{}: no such file or folder to put in the session's scope", p.display());
        }
    }
    let transcript = match &a.transcript {
        Some(t) => Some(
            std::fs::canonicalize(t)
                .with_context(|| format!("{}: the transcript must exist", t.display()))?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let exclude = memory::store_files();
    let progress = crate::progress::Progress::counter(a.quiet, "hashing files");
    let started = ops::start_session_with_progress(
        store.as_ref(),
        &project,
        &scope,
        &exclude,
        a.prompt,
        transcript,
        Timestamp::now(),
        &|n| progress.set(n as u64),
    )
    .await?;
    progress.finish();
    for (path, why) in &started.skipped {
        out::note(&format!("warning: {}: not hashed: {why}", path.display()));
    }
    if a.json {
        out::json(&serde_json::to_value(&started)?, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = &started.session;
    let count = |r: FileRole| s.files.values().filter(|e| e.role == r).count();
    let mut text = format!("session {}\n", s.session_id);
    text.push_str(&format!("project {}\n", s.project_id));
    text.push_str(&format!("root frame {}\n", s.root_frame_id.as_ref().map_or_else(String::new, ToString::to_string)));
    text.push_str(&format!(
        "files: {} in scope ({} read, {} modified, {} created)\n",
        s.files.len(),
        count(FileRole::Read),
        count(FileRole::Modified),
        count(FileRole::Created)
    ));
    describe(&started.diff, &started.invalidated, &started.resumable, &mut text);
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

async fn diff(a: DiffArgs) -> anyhow::Result<ExitCode> {
    let project = memory::project()?;
    let store = memory::open().await?;
    let Some(report) = ops::session_report(store.as_ref(), &project.project_id).await? else {
        anyhow::bail!("project {} has no session yet\nhint: start one with `noesis session start`", project.project_id);
    };
    if a.json {
        out::json(&serde_json::to_value(&report)?, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let d = &report.diff;
    let mut text = match &d.previous_session_id {
        Some(prev) => format!("session {} against {prev}\n", d.session_id),
        None => format!("session {} (the first)\n", d.session_id),
    };
    describe(d, &report.invalidated, &report.resumable, &mut text);
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
