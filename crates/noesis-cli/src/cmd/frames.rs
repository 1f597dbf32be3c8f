//! `noesis frames list|tree|show|invalidate|verify|resume`: read and act on
//! the current project's frames. `--json` prints the frames with the field
//! names of DESIGN.md.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use noesis_frames::{
    CausalFrame, Cause, Changeset, Evidence, FrameId, FrameTree, Invalidation, Status, Timestamp, transition,
};
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

/// A frame id from what a person typed: first within the project, then in
/// the whole store.
async fn resolve(store: &dyn Store, project_id: &str, typed: &str) -> anyhow::Result<FrameId> {
    match store.resolve(Some(project_id), typed).await {
        Ok(id) => Ok(id),
        Err(first) => store.resolve(None, typed).await.map_err(|_| anyhow::anyhow!("{first}")),
    }
}

async fn load(store: &dyn Store, project_id: &str, typed: &str) -> anyhow::Result<CausalFrame> {
    let id = resolve(store, project_id, typed).await?;
    store.frame(&id).await?.with_context(|| format!("no frame {id}"))
}

fn one_line(text: &str, width: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

fn row(f: &CausalFrame) -> String {
    format!("{}  {:<11}  {:.2}  {:>5}  {}", f.frame_id, f.status, f.confidence, f.depth, one_line(&f.query, 70))
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
    let mut text = format!("{:<36}  {:<11}  {:<4}  {:>5}  QUERY\n", "FRAME", "STATUS", "CONF", "DEPTH");
    for f in &frames {
        text.push_str(&row(f));
        text.push('\n');
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Nested JSON; past `MAX_NEST` levels `children` stays a list of ids, so a
/// very deep chain cannot exhaust the stack.
const MAX_NEST: usize = 256;

fn nested(tree: &FrameTree, f: &CausalFrame, level: usize) -> Value {
    let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
    if level < MAX_NEST {
        let kids: Vec<Value> =
            f.children.iter().filter_map(|c| tree.get(c)).map(|c| nested(tree, c, level + 1)).collect();
        v["children"] = Value::Array(kids);
    }
    v
}

/// Box-drawing lines, iteratively (any depth); indentation stops growing
/// after 64 levels.
fn draw(tree: &FrameTree, root: &CausalFrame, out: &mut String) {
    let mut stack: Vec<(&CausalFrame, String, bool, bool)> = vec![(root, String::new(), true, true)];
    while let Some((f, prefix, last, top)) = stack.pop() {
        let (branch, next) = match (top, last) {
            (true, _) => ("", String::new()),
            (false, true) => ("└── ", format!("{prefix}    ")),
            (false, false) => ("├── ", format!("{prefix}│   ")),
        };
        let next = if next.chars().count() > 4 * 64 { prefix.clone() } else { next };
        let pivot = f.branched_from.as_ref().map(|b| format!("  ⤷ from {b}")).unwrap_or_default();
        out.push_str(&format!(
            "{prefix}{branch}{} {} {:.2} {}{pivot}\n",
            f.frame_id,
            f.status,
            f.confidence,
            one_line(&f.query, 60)
        ));
        let kids: Vec<&CausalFrame> = f.children.iter().filter_map(|c| tree.get(c)).collect();
        for (i, k) in kids.iter().enumerate().rev() {
            stack.push((k, next.clone(), i + 1 == kids.len(), false));
        }
    }
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
        let v: Vec<Value> = roots.iter().map(|r| nested(&tree, r, 0)).collect();
        out::json(&Value::Array(v), true)?;
        return Ok(ExitCode::SUCCESS);
    }
    if roots.is_empty() {
        out::note("no frames");
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for r in roots {
        draw(&tree, r, &mut text);
    }
    out::data(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn describe(f: &CausalFrame) -> String {
    let mut s = format!("frame       {}\n", f.frame_id);
    s += &format!("status      {}\n", f.status);
    s += &format!("query       {}\n", f.query);
    s += &format!("conclusion  {}\n", f.conclusion);
    s += &format!("confidence  {:.2}\n", f.confidence);
    if let Some(model) = serde_json::from_str::<serde_json::Value>(&f.context_slice)
        .ok()
        .and_then(|c| c.get("model").and_then(|m| m.as_str().map(str::to_owned)))
    {
        let made_up = if f.is_fabricated() { " (made up by the test model: never evidence)" } else { "" };
        s += &format!("model       {model}{made_up}\n");
    }
    s += &format!("depth       {}\n", f.depth);
    if let Some(p) = &f.parent_id {
        s += &format!("parent      {p}\n");
    }
    if let Some(b) = &f.branched_from {
        s += &format!("branched    from {b}\n");
    }
    if let Some(sess) = &f.session_id {
        s += &format!("session     {sess}\n");
    }
    s += &format!("project     {}\n", f.project_id);
    s += &format!("created     {}\n", f.timestamps.created_at);
    if !f.children.is_empty() {
        s += &format!("children    {}\n", f.children.iter().map(FrameId::as_str).collect::<Vec<_>>().join(", "));
    }
    if !f.evidence.is_empty() {
        s += "evidence\n";
        for e in &f.evidence {
            s += &match e {
                Evidence::File { path, hash } => {
                    format!("  file        {path}  blake3:{}\n", &hash[..hash.len().min(16)])
                }
                Evidence::Frame { frame_id } => format!("  frame       {frame_id}\n"),
                Evidence::Observation { tool, content } => format!("  observation {tool}: {}\n", one_line(content, 60)),
            };
        }
    }
    let c = &f.invalidation_condition;
    s += "invalid when\n";
    for r in &c.files {
        s += &format!("  file changes   {}\n", r.path);
    }
    for d in &c.frames {
        s += &format!("  frame invalid  {d}\n");
    }
    if let Some(at) = c.expires_at {
        s += &format!("  time passes    {at}\n");
    }
    if let Some(n) = &c.note {
        s += &format!("  note           {n}\n");
    }
    if c.files.is_empty() && c.frames.is_empty() && c.expires_at.is_none() {
        s += "  (nothing checked by machine)\n";
    }
    s += "history\n";
    for h in &f.timestamps.history {
        let why = h.reason.as_deref().map(|r| format!("  {r}")).unwrap_or_default();
        s += &format!("  {}  {}{why}\n", h.at, h.status);
    }
    s
}

async fn show(store: &dyn Store, project: &noesis_frames::project::Project, a: IdArgs) -> anyhow::Result<ExitCode> {
    let f = load(store, &project.project_id, &a.id).await?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        out::data(&describe(&f))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_invalidations(title: &str, hit: &[Invalidation], json: bool, extra: Value) -> anyhow::Result<()> {
    if json {
        let mut v = extra;
        v["invalidated"] = serde_json::to_value(hit)?;
        return Ok(out::json(&v, true)?);
    }
    let mut text = format!("{title}\n");
    for i in hit {
        text.push_str(&format!("  {}  {}\n", i.frame_id, i.reason));
    }
    Ok(out::data(&text)?)
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
    let now = Timestamp::now();
    // The chain from the root down to the frame.
    let mut chain = vec![current.clone()];
    while let Some(parent) = chain.last().and_then(|f| f.parent_id.clone()) {
        let p = store.frame(&parent).await?.with_context(|| format!("frame {parent}, a parent, is missing"))?;
        chain.push(p);
    }
    chain.reverse();
    let change = match how {
        "refine" => noesis_frames::refine(&current, draft, now)?,
        "pivot" => {
            let parent = chain.len().checked_sub(2).map(|i| &chain[i]);
            noesis_frames::pivot(&current, parent, draft, now)?
        }
        _ => {
            let refs: Vec<&CausalFrame> = chain.iter().collect();
            noesis_frames::backtrack(&refs, draft, now)?
        }
    };
    let new_id = change.frames.first().map(|f| f.frame_id.clone()).context("the branch made no frame")?;
    store.apply(&change).await?;
    let f = store.frame(&new_id).await?.with_context(|| format!("frame {new_id} vanished"))?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        let suspended = change.statuses.len();
        let note = if suspended > 0 { format!(" ({suspended} frame(s) suspended)") } else { String::new() };
        out::data(&format!("{how} {}  {}{note}", f.frame_id, one_line(&f.query, 70)))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn resume(store: &dyn Store, project: &noesis_frames::project::Project, a: IdArgs) -> anyhow::Result<ExitCode> {
    let f = load(store, &project.project_id, &a.id).await?;
    if f.status != Status::Suspended {
        anyhow::bail!("frame {} is {}; only a suspended frame can resume", f.frame_id, f.status);
    }
    let change = transition(&f, Status::Active, Some("resumed"), None, Timestamp::now())?;
    store.apply(&Changeset { frames: Vec::new(), statuses: vec![change] }).await?;
    let f = store.frame(&f.frame_id).await?.with_context(|| format!("frame {} vanished", f.frame_id))?;
    if a.json {
        out::json(&serde_json::to_value(&f)?, true)?;
    } else {
        out::data(&format!("resumed {}  {}", f.frame_id, one_line(&f.query, 70)))?;
    }
    Ok(ExitCode::SUCCESS)
}
