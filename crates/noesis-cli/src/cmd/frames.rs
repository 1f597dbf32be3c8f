//! `noesis frames list|tree|show|invalidate|verify|resume`: read and act on
//! the current project's frames. `--json` prints the frames with the field
//! names of DESIGN.md.

use std::path::PathBuf;
use std::process::ExitCode;

use noesis_frames::{CausalFrame, Cause, FrameId, FrameTree, Invalidation, Status, Timestamp, render};
use noesis_store::{FrameFilter, Store, ops};
use serde_json::{Value, json};

use crate::memory;
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// List the project's frames, oldest first.
    List(ListArgs),
    /// Show the frames as a call tree (the whole project, or under one frame).
    Tree(TreeArgs),
    /// Show one frame: evidence, condition, status history.
    Show(IdArgs),
    /// Invalidate a frame, its descendants and every frame that cites them.
    Invalidate(InvalidateArgs),
    /// Re-check conditions leaves first against the files now; invalidate what
    /// no longer holds (exit 1 when something did).
    Verify(VerifyArgs),
    /// Make a suspended frame active again.
    Resume(IdArgs),
    /// Go deeper on the same line: a new child of the frame.
    Refine(BranchArgs),
    /// Set the frame aside for another approach: it is suspended and a
    /// sibling that branched from it starts.
    Pivot(BranchArgs),
    /// Start over from the root: the frame's active chain below the root is
    /// suspended and a new child of the root branches from the frame.
    Backtrack(BranchArgs),
}

#[derive(Debug, clap::Args)]
struct BranchArgs {
    /// A frame id or a unique prefix of one.
    id: String,
    /// What the new frame asks.
    #[arg(long, value_name = "TEXT")]
    query: String,
    /// What it concludes, if already known.
    #[arg(long, value_name = "TEXT")]
    conclusion: Option<String>,
    /// Print JSON (the new frame).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only frames with this status (active, suspended, completed, invalidated, promoted).
    #[arg(long, value_name = "STATUS")]
    status: Option<String>,
    /// Only frames that branched from another (pivots, backtracks).
    #[arg(long)]
    pivots: bool,
    /// Only frames whose evidence names this file.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Only frames whose query or conclusion contains this text.
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Only frames of this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// At most this many (the newest).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct TreeArgs {
    /// The frame to start from (an id or a unique prefix); the whole project when absent.
    id: Option<String>,
    /// Print nested JSON (each frame's `children` holds the child frames).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    /// A frame id or a unique prefix of one.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct InvalidateArgs {
    /// A frame id or a unique prefix of one.
    id: String,
    /// Why, in words (kept in the status history).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// Verify only the subtree under this frame.
    id: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let rt = memory::runtime()?;
    rt.block_on(async move {
        let (project, store) = memory::context().await?;
        let store = store.as_ref();
        match a.command {
            Sub::List(l) => list(store, &project, l).await,
            Sub::Tree(t) => tree(store, &project, t).await,
            Sub::Show(s) => show(store, &project, s).await,
            Sub::Invalidate(i) => invalidate(store, &project, i).await,
            Sub::Verify(v) => verify(store, &project, v).await,
            Sub::Resume(r) => resume(store, &project, r).await,
            Sub::Refine(b) => branch(store, &project, b, "refine").await,
            Sub::Pivot(b) => branch(store, &project, b, "pivot").await,
            Sub::Backtrack(b) => branch(store, &project, b, "backtrack").await,
        }
    })
}

async fn resolve(store: &dyn Store, project_id: &str, typed: &str) -> anyhow::Result<FrameId> {
    Ok(ops::resolve_frame(store, project_id, typed).await?)
}

async fn load(store: &dyn Store, project_id: &str, typed: &str) -> anyhow::Result<CausalFrame> {
    Ok(ops::load_frame(store, project_id, typed).await?)
}

async fn list(store: &dyn Store, project: &noesis_frames::project::Project, l: ListArgs) -> anyhow::Result<ExitCode> {
    let status = l.status.as_deref().map(str::parse::<Status>).transpose()?;
    let file = l.file.as_deref().map(|p| memory::stored_name(project, p)).transpose()?;
    let filter = FrameFilter {
        status,
        pivots: l.pivots,
        file,
        text: l.text,
        session_id: l.session,
        limit: l.limit,
        ..FrameFilter::project(&project.project_id)
    };
    let frames = store.frames(&filter).await?;
    if l.json {
        out::json(&serde_json::to_value(&frames)?, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if frames.is_empty() {
        out::note("no frames");
        return Ok(ExitCode::SUCCESS);
    }
    out::data(&render::table(&frames))?;
    Ok(ExitCode::SUCCESS)
}

async fn tree(store: &dyn Store, project: &noesis_frames::project::Project, t: TreeArgs) -> anyhow::Result<ExitCode> {
    let under = match &t.id {
        Some(typed) => Some(resolve(store, &project.project_id, typed).await?),
        None => None,
    };
    let filter = FrameFilter { under: under.clone(), ..FrameFilter::project(&project.project_id) };
    let tree = FrameTree::from_frames(store.frames(&filter).await?);
    let roots: Vec<&CausalFrame> = match &under {
        Some(id) => tree.get(id).into_iter().collect(),
        None => tree.roots(),
    };
    if t.json {
        let v: Vec<Value> = roots.iter().map(|r| render::nested(&tree, r)).collect();
        out::json(&Value::Array(v), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if roots.is_empty() {
        out::note("no frames");
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for r in roots {
        render::draw(&tree, r, &mut text);
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

async fn show(store: &dyn Store, project: &noesis_frames::project::Project, a: IdArgs) -> anyhow::Result<ExitCode> {
    let f = load(store, &project.project_id, &a.id).await?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        out::data(&render::describe(&f))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_invalidations(title: &str, hit: &[Invalidation], json: bool, extra: Value) -> anyhow::Result<()> {
    if json {
        let mut v = extra;
        v["invalidated"] = serde_json::to_value(hit)?;
        return Ok(out::json(&v, true)?);
    }
    Ok(out::data(&render::invalidations(title, hit))?)
}

async fn invalidate(
    store: &dyn Store,
    project: &noesis_frames::project::Project,
    a: InvalidateArgs,
) -> anyhow::Result<ExitCode> {
    let f = load(store, &project.project_id, &a.id).await?;
    if f.status == Status::Invalidated {
        out::note(&format!("frame {} is already invalidated; nothing to do", f.frame_id));
    }
    let cause = Cause::Manual(a.reason.unwrap_or_default());
    let hit = store.invalidate(&[Invalidation::new(f.frame_id.clone(), &cause)], None, Timestamp::now()).await?;
    print_invalidations(&format!("invalidated {} frame(s)", hit.len()), &hit, a.json, json!({}))?;
    Ok(ExitCode::SUCCESS)
}

async fn verify(
    store: &dyn Store,
    project: &noesis_frames::project::Project,
    a: VerifyArgs,
) -> anyhow::Result<ExitCode> {
    let under = match &a.id {
        Some(typed) => Some(resolve(store, &project.project_id, typed).await?),
        None => None,
    };
    let report = ops::verify(store, project, under.as_ref(), None, Timestamp::now()).await?;
    if a.json {
        let findings: Vec<Value> =
            report.findings.iter().map(|(id, why)| json!({"frame_id": id, "reason": why})).collect();
        print_invalidations("", &report.invalidated, true, json!({"checked": report.checked, "findings": findings}))?;
    } else {
        let title = format!(
            "checked {} frame(s), leaves first: {} no longer hold; {} invalidated with the cascade",
            report.checked,
            report.findings.len(),
            report.invalidated.len()
        );
        print_invalidations(&title, &report.invalidated, false, Value::Null)?;
    }
    Ok(if report.invalidated.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// refine, pivot or backtrack from a frame (the library's branch
/// operations, applied as one change).
async fn branch(
    store: &dyn Store,
    project: &noesis_frames::project::Project,
    a: BranchArgs,
    how: &str,
) -> anyhow::Result<ExitCode> {
    if a.query.trim().is_empty() {
        anyhow::bail!("--query is empty: say what the new frame asks");
    }
    let current = load(store, &project.project_id, &a.id).await?;
    let draft = noesis_frames::Draft {
        conclusion: a.conclusion.clone().unwrap_or_default(),
        ..noesis_frames::Draft::new(a.query.clone())
    };
    let kind = match how {
        "refine" => ops::Branch::Refine,
        "pivot" => ops::Branch::Pivot,
        _ => ops::Branch::Backtrack,
    };
    let (f, suspended) = ops::branch(store, &current, kind, draft, Timestamp::now()).await?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        let note = if suspended > 0 { format!(" ({suspended} frame(s) suspended)") } else { String::new() };
        out::data(&format!("{how} {}  {}{note}", f.frame_id, render::one_line(&f.query, 70)))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn resume(store: &dyn Store, project: &noesis_frames::project::Project, a: IdArgs) -> anyhow::Result<ExitCode> {
    let f = load(store, &project.project_id, &a.id).await?;
    let f = ops::resume(store, &f, Timestamp::now()).await?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        out::data(&format!("resumed {}  {}", f.frame_id, render::one_line(&f.query, 70)))?;
    }
    Ok(ExitCode::SUCCESS)
}
