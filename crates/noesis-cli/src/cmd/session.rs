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
    let mut text = format!("session {}\n", s.session_id);
    text.push_str(&format!("project {}\n", s.project_id));
    text.push_str(&format!("root frame {}\n", s.root_frame_id.as_ref().map_or_else(String::new, ToString::to_string)));
    text.push_str(&format!("files: {} in scope, hashed\n", s.files.len()));
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
    let mut text = String::new();
    for l in &links {
        text.push_str(&format!(
            "{} {} {}{}\n",
            l.a,
            l.b,
            l.created_at,
            l.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default()
        ));
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Where Claude Code keeps a project's sessions: the folder itself when it
/// holds transcripts, else `$CLAUDE_CONFIG_DIR/projects/<name>` (or
/// `~/.claude/projects/<name>`) for the project folder `dir`, `<name>` being
/// its path with every character but letters and digits turned into `-`.
fn claude_sessions_dir(dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    let holds_jsonl = |d: &std::path::Path| {
        std::fs::read_dir(d)
            .is_ok_and(|mut e| e.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "jsonl"))))
    };
    if holds_jsonl(dir) {
        return Ok(dir.to_owned());
    }
    let abs =
        std::fs::canonicalize(dir).with_context(|| format!("--claude-project {}: no such folder", dir.display()))?;
    let name: String = abs.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let base = match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".claude"),
    };
    let found = base.join("projects").join(&name);
    if holds_jsonl(&found) {
        Ok(found)
    } else {
        anyhow::bail!("--claude-project {}: no transcripts there nor in {}", dir.display(), found.display())
    }
}

fn transcript_path(a: &ImportArgs) -> anyhow::Result<PathBuf> {
    match (&a.claude_project, &a.transcript) {
        (None, Some(t)) => Ok(PathBuf::from(t)),
        (None, None) => {
            anyhow::bail!("name the transcript: noesis session import FILE.jsonl (or --claude-project DIR)")
        }
        (Some(dir), Some(t)) => {
            let dir = claude_sessions_dir(dir)?;
            let direct = PathBuf::from(t);
            if direct.is_file() {
                return Ok(direct);
            }
            let p = dir.join(format!("{}.jsonl", t.trim_end_matches(".jsonl")));
            if p.is_file() { Ok(p) } else { anyhow::bail!("no session {t} in {}", dir.display()) }
        }
        (Some(dir), None) => {
            let dir = claude_sessions_dir(dir)?;
            let newest = std::fs::read_dir(&dir)?
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .max();
            newest.map(|(_, p)| p).with_context(|| format!("no transcripts in {}", dir.display()))
        }
    }
}

async fn import(a: ImportArgs) -> anyhow::Result<ExitCode> {
    let path = transcript_path(&a)?;
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
    let mut t = noesis_transcript::parse(&bytes);
    for p in t.problems() {
        out::note(&format!("warning: {} line {}: skipped: {}", path.display(), p.line, p.reason));
    }
    let mut agents: Vec<(PathBuf, String, Option<String>)> = noesis_transcript::files::companions(&path)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.path, c.agent_id, c.meta_tool_use_id))
        .collect();
    for f in &a.agents {
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let Some((_, id)) = stem.rsplit_once("agent-") else {
            anyhow::bail!("--agent {}: an agent file is named agent-<id>.jsonl", f.display());
        };
        agents.push((f.clone(), id.to_owned(), None));
    }
    for (file, id, meta) in agents {
        let b = std::fs::read(&file).with_context(|| format!("--agent {}: cannot read it", file.display()))?;
        let agent = noesis_transcript::parse(&b);
        for p in agent.problems() {
            out::note(&format!("warning: {} line {}: skipped: {}", file.display(), p.line, p.reason));
        }
        let s = t.attach_subagent(&id, meta.as_deref(), agent);
        if s.link == noesis_transcript::Link::Unmatched {
            out::note(&format!("warning: {}: no call of the session started agent {id}", file.display()));
        }
    }
    if t.records() == 0 {
        anyhow::bail!("{}: no records a transcript has (not a Claude Code session file?)", path.display());
    }
    if let Some(existing) = store.session_by_source(&project.project_id, &hash).await? {
        out::note(&format!("{} was imported already as session {existing}", path.display()));
        return print_session(store.as_ref(), &existing, a.json).await;
    }
    // The transcript is the source of truth: a copy by hash, so moving or
    // deleting the original loses nothing.
    // Secret values the session printed (a key in a command's output) are
    // redacted in the copy and in every frame, as in a run's tool results.
    let cwd = std::env::current_dir()?;
    let redactor = crate::config::load(&crate::provider::env, &cwd)?.config.redactor();
    let keep = memory::home()?.join("transcripts").join(format!("{hash}.jsonl"));
    if !keep.exists() {
        std::fs::create_dir_all(keep.parent().unwrap_or(std::path::Path::new("."))).ok();
        let tmp = keep.with_extension("jsonl.tmp");
        let kept = match std::str::from_utf8(&bytes) {
            Ok(text) => redactor.redact(text).into_owned().into_bytes(),
            Err(_) => bytes.clone(),
        };
        std::fs::write(&tmp, &kept)
            .and_then(|()| std::fs::rename(&tmp, &keep))
            .with_context(|| format!("keep a copy in {}", keep.display()))?;
    }
    let session_id = noesis_frames::FrameId::generate().to_string();
    let root = project.root.clone();
    let hash_now = |name: &str| noesis_frames::scan::hash_file(&noesis_frames::project::resolve(&root, name)).ok();
    let mut imported =
        noesis_plugins::import::build(&t, &project, &session_id, &path.to_string_lossy(), Timestamp::now(), &hash_now)
            .with_context(|| format!("{}: nothing was imported", path.display()))?;
    noesis_plugins::import::redact(&mut imported, &redactor);
    store
        .record_session(&noesis_store::NewSession {
            kind: noesis_store::SessionKind::Transcript,
            artifacts: &imported.session,
            frames: &imported.frames,
            source_hash: Some(&hash),
        })
        .await
        .with_context(|| format!("{}: nothing was imported", path.display()))?;
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
    let count = |r: FileRole| s.files.values().filter(|e| e.role == r).count();
    let mut text = format!("session {}\n", s.session_id);
    text.push_str(&format!("transcript {}\n", s.conversation_log.as_deref().unwrap_or("?")));
    text.push_str(&format!(
        "files: {} ({} read, {} modified, {} created)\n",
        s.files.len(),
        count(FileRole::Read),
        count(FileRole::Modified),
        count(FileRole::Created)
    ));
    for (p, e) in &s.files {
        text.push_str(&format!("  {:<8} {p}\n", e.role.as_str()));
    }
    text.push_str(&format!("frames: {}\n", frames.len()));
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}
