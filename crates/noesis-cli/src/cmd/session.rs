//! `noesis session start|diff`: record what a session sees and what changed
//! since the last one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use noesis_frames::{Timestamp, render};
use noesis_plugins::transcripts;
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
    /// Import a Claude Code transcript (JSONL): kept as it is, by path and
    /// hash; its prompts, branches and tool calls become frames, the files
    /// it read, modified or created the session's files.
    Import(ImportArgs),
    /// Link two sessions so plugins working in one may see the other's
    /// frames (sessions are invisible to each other otherwise).
    Link(LinkArgs),
    /// Remove the link between two sessions.
    Unlink(UnlinkArgs),
    /// The project's session links.
    Links(DiffArgs),
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// The transcript file, or (with --claude-project) a session id; with
    /// --claude-project and nothing else, the newest session there.
    transcript: Option<String>,
    /// Claude Code's folder of the project's sessions
    /// (~/.claude/projects/<name>), or the project folder whose sessions
    /// Claude Code keeps there.
    #[arg(long, value_name = "DIR")]
    claude_project: Option<PathBuf>,
    /// The project the session belongs to (default: the current directory's).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// An agent file of the session (`agent-<id>.jsonl`) to attach besides
    /// those found beside it (repeatable).
    #[arg(long = "agent", value_name = "FILE")]
    agents: Vec<PathBuf>,
    /// Print the session, its files with roles and its frames as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct LinkArgs {
    /// One session (its id or a unique prefix).
    a: String,
    /// The other.
    b: String,
    /// Why they belong together.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
}

#[derive(Debug, clap::Args)]
struct UnlinkArgs {
    /// One session (its id or a unique prefix).
    a: String,
    /// The other.
    b: String,
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
            Sub::Import(i) => import(i).await,
            Sub::Link(l) => link(l).await,
            Sub::Unlink(u) => unlink(u).await,
            Sub::Links(l) => links(l).await,
        }
    })
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
    let mut text = format!("session {}\n", s.session_id);
    text.push_str(&format!("project {}\n", s.project_id));
    text.push_str(&format!("root frame {}\n", s.root_frame_id.as_ref().map_or_else(String::new, ToString::to_string)));
    text.push_str(&format!("files: {} in scope, hashed\n", s.files.len()));
    render::session_diff(&started.diff, &started.invalidated, &started.resumable, &mut text);
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
    render::session_diff(d, &report.invalidated, &report.resumable, &mut text);
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The one session of the project whose id starts with `prefix`.
async fn session_id(store: &dyn noesis_store::Store, project_id: &str, prefix: &str) -> anyhow::Result<String> {
    let all: Vec<String> = store.session_kinds(project_id).await?.into_iter().map(|(id, _)| id).collect();
    let hits: Vec<&String> = all.iter().filter(|s| s.starts_with(prefix)).collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => anyhow::bail!(
            "no session {prefix} in project {project_id}\nhint: `noesis session links` and the dashboard's sessions page list them"
        ),
        many => anyhow::bail!("session prefix {prefix} is ambiguous ({} sessions start with it)", many.len()),
    }
}

async fn link(a: LinkArgs) -> anyhow::Result<ExitCode> {
    let project = memory::project()?;
    let store = memory::open().await?;
    let x = session_id(store.as_ref(), &project.project_id, &a.a).await?;
    let y = session_id(store.as_ref(), &project.project_id, &a.b).await?;
    let Some(l) = noesis_frames::SessionLink::new(&x, &y, a.reason, Timestamp::now()) else {
        anyhow::bail!("a session cannot be linked to itself ({x})");
    };
    let new = store.link_sessions(&l).await?;
    out::data(&format!("{} {} {}\n", if new { "linked" } else { "already linked" }, l.a, l.b))?;
    Ok(ExitCode::SUCCESS)
}

async fn unlink(a: UnlinkArgs) -> anyhow::Result<ExitCode> {
    let project = memory::project()?;
    let store = memory::open().await?;
    let x = session_id(store.as_ref(), &project.project_id, &a.a).await?;
    let y = session_id(store.as_ref(), &project.project_id, &a.b).await?;
    if !store.unlink_sessions(&x, &y).await? {
        anyhow::bail!("sessions {x} and {y} are not linked");
    }
    out::data(&format!("unlinked {x} {y}\n"))?;
    Ok(ExitCode::SUCCESS)
}

async fn links(a: DiffArgs) -> anyhow::Result<ExitCode> {
    let project = memory::project()?;
    let store = memory::open().await?;
    let links = store.session_links(&project.project_id).await?;
    if a.json {
        out::json(&serde_json::to_value(&links)?, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    out::data(&render::links(&links))?;
    Ok(ExitCode::SUCCESS)
}

async fn import(a: ImportArgs) -> anyhow::Result<ExitCode> {
    let config = transcripts::claude_config(&|k| std::env::var(k).ok());
    let path = transcripts::transcript_path(a.claude_project.as_deref(), a.transcript.as_deref(), &config)?;
    let bytes = std::fs::read(&path).with_context(|| format!("{}: cannot read the transcript", path.display()))?;
    let hash = noesis_frames::scan::hash_bytes(&bytes);
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let project = match &a.project {
        Some(dir) => noesis_frames::project::identify(
            &std::fs::canonicalize(dir).with_context(|| format!("--project {}: no such folder", dir.display()))?,
        )?,
        None => memory::project()?,
    };
    let store = memory::open().await?;
    store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await?;
    let t = transcripts::parse(&path, &bytes, &a.agents, &mut |w| out::note(&w))?;
    if let Some(existing) = store.session_by_source(&project.project_id, &hash).await? {
        out::note(&format!("{} was imported already as session {existing}", path.display()));
        return print_session(store.as_ref(), &existing, a.json).await;
    }
    // Secret values the session printed (a key in a command's output) are
    // redacted in the copy and in every frame, as in a run's tool results.
    let cwd = std::env::current_dir()?;
    let redactor = crate::config::load(&crate::provider::env, &cwd)?.config.redactor();
    transcripts::keep(&memory::home()?.join("transcripts"), &hash, &bytes, &redactor)?;
    let session_id =
        transcripts::record(store.as_ref(), &project, &path, &hash, &t, &redactor, Timestamp::now()).await?;
    print_session(store.as_ref(), &session_id, a.json).await
}

async fn print_session(store: &dyn noesis_store::Store, session_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let Some(s) = store.session(session_id).await? else { anyhow::bail!("session {session_id} is gone") };
    let frames = store
        .frames(&noesis_store::FrameFilter {
            session_id: Some(session_id.to_owned()),
            ..noesis_store::FrameFilter::project(&s.project_id)
        })
        .await?;
    if json {
        out::json(&serde_json::json!({"session": s, "frames": frames}), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = render::imported_session(&s, frames.len());
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
