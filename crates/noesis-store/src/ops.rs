//! The operations that need both a store and the file system: starting a
//! session (scan, compare, invalidate, record) and verifying frames against
//! the files as they are now. Front ends call these; the rules they apply
//! are `noesis-frames`'.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use noesis_frames::project::{Project, relative_path, resolve};
use noesis_frames::scan::{hash_file, scan_with_progress};
use noesis_frames::session::{SessionDiff, diff, scanned};
use noesis_frames::{
    CausalFrame, Cause, Draft, Finding, FrameId, FrameTree, Invalidation, SessionArtifacts, Status, Timestamp, World,
    stale_by_files,
};
use serde::Serialize;

use crate::{FrameFilter, Store, StoreError};

/// What `start_session` did.
#[derive(Debug, Clone, Serialize)]
pub struct SessionStart {
    /// The session recorded.
    pub session: SessionArtifacts,
    /// Against the project's previous session.
    pub diff: SessionDiff,
    /// Frames invalidated because their files changed or they expired (with
    /// the cascade), seeds first.
    pub invalidated: Vec<Invalidation>,
    /// Suspended frames that still hold and can resume.
    pub resumable: Vec<CausalFrame>,
    /// Files the scan could not read, with the reason.
    pub skipped: Vec<(PathBuf, String)>,
}

/// `session diff`: the latest session against the one before.
#[derive(Debug, Clone, Serialize)]
pub struct SessionReport {
    /// Prompt and files.
    pub diff: SessionDiff,
    /// Frames the latest session's start invalidated.
    pub invalidated: Vec<Invalidation>,
    /// Suspended frames that can resume.
    pub resumable: Vec<CausalFrame>,
}

/// The hash of a stored file name now: from the scan when it was scanned,
/// else read from disk (files outside the scope, or ignored ones).
fn hash_now(root: &Path, scanned: &std::collections::BTreeMap<String, String>, name: &str) -> Option<String> {
    scanned.get(name).cloned().or_else(|| hash_file(&resolve(root, name)).ok())
}

/// Starts a session: hashes the files in `scope` (the whole project when
/// empty) honouring `.gitignore`, gives each a role against the previous
/// session, invalidates every live frame whose file condition no longer
/// holds or whose expiry has passed (cascading to children and citers), and
/// records the session with a root frame — the last two in one transaction.
/// `exclude` leaves files out of the scan (the store's own database, when it
/// sits inside the project).
///
/// # Errors
/// A scope entry that does not exist, or a store error.
pub async fn start_session(
    store: &dyn Store,
    project: &Project,
    scope: &[PathBuf],
    exclude: &[PathBuf],
    prompt: Option<String>,
    conversation_log: Option<String>,
    now: Timestamp,
) -> Result<SessionStart, StoreError> {
    start_session_with_progress(store, project, scope, exclude, prompt, conversation_log, now, &|_| {}).await
}

/// [`start_session`], telling `progress` how many files the scan has hashed
/// so far.
///
/// # Errors
/// A scope entry that does not exist, or a store error.
#[allow(clippy::too_many_arguments)] // start_session's, plus the callback
pub async fn start_session_with_progress(
    store: &dyn Store,
    project: &Project,
    scope: &[PathBuf],
    exclude: &[PathBuf],
    prompt: Option<String>,
    conversation_log: Option<String>,
    now: Timestamp,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SessionStart, StoreError> {
    let root_text = project.root.to_string_lossy().into_owned();
    store.ensure_project(&project.project_id, &root_text).await?;
    let scope: Vec<PathBuf> = if scope.is_empty() { vec![project.root.clone()] } else { scope.to_vec() };
    let scanned_files = scan_with_progress(&project.root, &scope, exclude, progress)?;
    let scope_names: Vec<String> = scope
        .iter()
        .map(|p| {
            let abs = if p.is_absolute() { p.clone() } else { project.root.join(p) };
            relative_path(&project.root, &abs.canonicalize().unwrap_or(abs))
        })
        .collect();
    let previous = store.sessions(&project.project_id, 1).await?.pop();
    let files = scanned(&scanned_files.files);

    // Parts of files (a function's signature) are checked by whoever knows
    // them (noesis-plugin's core), not by a scan.
    let mut conditions = store.file_conditions(&project.project_id).await?;
    conditions.retain(|(_, f)| noesis_frames::split_part(&f.path).1.is_none());
    let mut seeds = stale_by_files(&conditions, |name| hash_now(&project.root, &scanned_files.files, name));
    for (id, at) in store.expired(&project.project_id, now).await? {
        if !seeds.iter().any(|s| s.frame_id == id) {
            seeds.push(Invalidation::new(id, &Cause::Expired(at)));
        }
    }

    let session_id = FrameId::generate().as_str().to_owned();
    let query = prompt.clone().unwrap_or_else(|| format!("session {now}"));
    let draft = Draft {
        context_slice: format!("{} files in scope: {}", files.len(), scope_names.join(", ")),
        confidence: 1.0,
        ..Draft::new(query)
    };
    let root = draft.into_frame(&project.project_id, Some(&session_id), None, now)?;
    let session = SessionArtifacts {
        session_id,
        project_id: project.project_id.clone(),
        initial_prompt: prompt,
        files,
        scope: scope_names,
        root_frame_id: Some(root.frame_id.clone()),
        conversation_log,
        created_at: now,
    };
    let invalidated = store.begin_session(&session, &root, &seeds).await?;
    let resumable = resumable(store, &project.project_id).await?;
    Ok(SessionStart {
        diff: diff(previous.as_ref(), &session),
        session,
        invalidated,
        resumable,
        skipped: scanned_files.skipped,
    })
}

/// Suspended frames of a project (none of them invalidated, by definition).
///
/// # Errors
/// A store error.
pub async fn resumable(store: &dyn Store, project_id: &str) -> Result<Vec<CausalFrame>, StoreError> {
    store.frames(&FrameFilter { status: Some(Status::Suspended), ..FrameFilter::project(project_id) }).await
}

/// The project's latest session against the one before it; `None` when the
/// project has no session.
///
/// # Errors
/// A store error.
pub async fn session_report(store: &dyn Store, project_id: &str) -> Result<Option<SessionReport>, StoreError> {
    let mut last_two = store.sessions(project_id, 2).await?;
    let Some(latest) = (!last_two.is_empty()).then(|| last_two.remove(0)) else { return Ok(None) };
    let previous = last_two.pop();
    Ok(Some(SessionReport {
        diff: diff(previous.as_ref(), &latest),
        invalidated: store.invalidated_in_session(&latest.session_id).await?,
        resumable: resumable(store, project_id).await?,
    }))
}

/// What `verify` found and did.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Live frames checked.
    pub checked: usize,
    /// Frames whose own condition failed, leaves first.
    pub findings: Vec<(FrameId, String)>,
    /// Every frame invalidated as a result (findings and their cascade).
    pub invalidated: Vec<Invalidation>,
}

struct Disk<'a> {
    root: &'a Path,
    cache: RefCell<HashMap<String, Option<String>>>,
    outside: HashMap<FrameId, Status>,
}

impl World for Disk<'_> {
    fn file_hash(&self, path: &str) -> Option<String> {
        self.cache
            .borrow_mut()
            .entry(path.to_owned())
            .or_insert_with(|| hash_file(&resolve(self.root, path)).ok())
            .clone()
    }
    fn status_of(&self, id: &FrameId) -> Option<Status> {
        self.outside.get(id).copied()
    }
}

/// Verifies a project's frames (or the subtree under `under`) post-order
/// against the files on disk and the frames they depend on, then
/// invalidates what failed and its cascade.
///
/// # Errors
/// A store error.
pub async fn verify(
    store: &dyn Store,
    project: &Project,
    under: Option<&FrameId>,
    session_id: Option<&str>,
    now: Timestamp,
) -> Result<VerifyReport, StoreError> {
    let filter = FrameFilter { under: under.cloned(), ..FrameFilter::project(&project.project_id) };
    let tree = FrameTree::from_frames(store.frames(&filter).await?);
    let mut outside = HashMap::new();
    for f in tree.iter() {
        for dep in &f.invalidation_condition.frames {
            if tree.get(dep).is_some() || outside.contains_key(dep) {
                continue;
            }
            if let Some(d) = store.frame(dep).await? {
                outside.insert(dep.clone(), d.status);
            }
        }
    }
    let world = Disk { root: &project.root, cache: RefCell::new(HashMap::new()), outside };
    let root = under.filter(|id| tree.get(id).is_some());
    let v = noesis_frames::verify(&tree, root, &world, now);
    let invalidated =
        if v.findings.is_empty() { Vec::new() } else { store.invalidate(&v.seeds(), session_id, now).await? };
    Ok(VerifyReport {
        checked: v.checked.len(),
        findings: v.findings.into_iter().map(|Finding { frame_id, cause }| (frame_id, cause.to_string())).collect(),
        invalidated,
    })
}

/// A frame id from what a person typed (an id or a unique prefix): first
/// within the project, then in the whole store. The error is the project's.
///
/// # Errors
/// No frame, or more than one, starts with `typed`.
pub async fn resolve_frame(store: &dyn Store, project_id: &str, typed: &str) -> Result<FrameId, StoreError> {
    match store.resolve(Some(project_id), typed).await {
        Ok(id) => Ok(id),
        Err(first) => store.resolve(None, typed).await.map_err(|_| first),
    }
}

/// The frame [`resolve_frame`] finds.
///
/// # Errors
/// As [`resolve_frame`], or the frame is gone.
pub async fn load_frame(store: &dyn Store, project_id: &str, typed: &str) -> Result<CausalFrame, StoreError> {
    let id = resolve_frame(store, project_id, typed).await?;
    store.frame(&id).await?.ok_or_else(|| StoreError::Invalid(format!("no frame {id}")))
}

/// How a new frame branches from another (`noesis_frames::{refine, pivot,
/// backtrack}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// Deeper on the same line: a child.
    Refine,
    /// Another approach: the frame is suspended, a sibling starts.
    Pivot,
    /// Over from the root: the active chain below the root is suspended.
    Backtrack,
}

/// Branches from `current` as `how` says, applied as one change; returns the
/// new frame and how many frames were suspended.
///
/// # Errors
/// A missing parent, a branch the frame rules refuse, or a store error.
pub async fn branch(
    store: &dyn Store,
    current: &CausalFrame,
    how: Branch,
    draft: Draft,
    now: Timestamp,
) -> Result<(CausalFrame, usize), StoreError> {
    // The chain from the root down to the frame.
    let mut chain = vec![current.clone()];
    while let Some(parent) = chain.last().and_then(|f| f.parent_id.clone()) {
        let p = store
            .frame(&parent)
            .await?
            .ok_or_else(|| StoreError::Invalid(format!("frame {parent}, a parent, is missing")))?;
        chain.push(p);
    }
    chain.reverse();
    let change = match how {
        Branch::Refine => noesis_frames::refine(current, draft, now)?,
        Branch::Pivot => {
            let parent = chain.len().checked_sub(2).map(|i| &chain[i]);
            noesis_frames::pivot(current, parent, draft, now)?
        }
        Branch::Backtrack => {
            let refs: Vec<&CausalFrame> = chain.iter().collect();
            noesis_frames::backtrack(&refs, draft, now)?
        }
    };
    let new_id = change
        .frames
        .first()
        .map(|f| f.frame_id.clone())
        .ok_or_else(|| StoreError::Invalid("the branch made no frame".to_owned()))?;
    store.apply(&change).await?;
    let f = store.frame(&new_id).await?.ok_or_else(|| StoreError::Invalid(format!("frame {new_id} vanished")))?;
    Ok((f, change.statuses.len()))
}

/// Makes a suspended frame active again; returns it as stored.
///
/// # Errors
/// The frame is not suspended, or a store error.
pub async fn resume(store: &dyn Store, f: &CausalFrame, now: Timestamp) -> Result<CausalFrame, StoreError> {
    if f.status != Status::Suspended {
        return Err(StoreError::Invalid(format!(
            "frame {} is {}; only a suspended frame can resume",
            f.frame_id, f.status
        )));
    }
    let change = noesis_frames::transition(f, Status::Active, Some("resumed"), None, now)?;
    store.apply(&noesis_frames::Changeset { frames: Vec::new(), statuses: vec![change] }).await?;
    store.frame(&f.frame_id).await?.ok_or_else(|| StoreError::Invalid(format!("frame {} vanished", f.frame_id)))
}
