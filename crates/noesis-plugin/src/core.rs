//! The core's step: resolve what changed, let the plugin shape the input,
//! run the model, let the plugin read the reply, record the frame (and the
//! model's sub-steps as its children) in one transaction, let the plugin
//! keep its result, then check and cascade. Plugins never hold the store.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use noesis_frames::project::{Project, resolve};
use noesis_frames::scan::hash_file;
use noesis_frames::{
    CausalFrame, Cause, Draft, Evidence, FrameId, FrameTree, Invalidation, SessionArtifacts, Status, Timestamp,
    split_part, stale_by_files,
};
use noesis_store::{FrameFilter, Store, ops};
use serde_json::Value;

use crate::CoreError;
use crate::boundary::{ContextSlice, CoreContext, Parsed, Plugin};

/// Hashes parts of files (`path#kind:name`), for the kinds a caller knows
/// (noesis-code's function signatures, say). A world without one leaves
/// parts alone.
pub trait PartHasher: Send + Sync {
    /// The part's hash in `source` (the file's text), `None` when the part
    /// is gone. `kind` is one this hasher reported in [`PartHasher::kinds`].
    fn hash_part(&self, file: &str, source: &str, kind: &str, name: &str) -> Option<String>;
    /// The kinds of part it hashes.
    fn kinds(&self) -> &[&str];
}

/// What the model did for one step.
#[derive(Debug, Clone, Default)]
pub struct Thought {
    /// The reply `parse_output` reads.
    pub raw: Value,
    /// What the model's work rests on beyond the slice (files it read, tool
    /// observations).
    pub evidence: Vec<Evidence>,
    /// Sub-steps (tool calls, sub-queries), recorded as completed children
    /// of the step's frame.
    pub children: Vec<Draft>,
}

/// The model, as the core sees it: a module run or an agent run.
#[async_trait]
pub trait Think: Send + Sync {
    /// Runs the model on the slice for `frame` (active, not stored yet).
    ///
    /// # Errors
    /// Why the model gave no usable reply, in words.
    async fn think(&self, slice: &ContextSlice, frame: &CausalFrame) -> Result<Thought, String>;
}

/// One step to take.
#[derive(Debug, Clone)]
pub struct Step<'a> {
    /// What is asked (the frame's query).
    pub query: String,
    /// The raw request the plugin transforms.
    pub raw: &'a Value,
    /// The parent frame; the session's root when `None`.
    pub parent: Option<FrameId>,
}

/// What a step did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The step's frame, as stored.
    pub frame: CausalFrame,
    /// Its children (the model's sub-steps), as stored.
    pub children: Vec<CausalFrame>,
    /// What the plugin made of the reply.
    pub parsed: Parsed,
    /// Frames invalidated by the check after the step (files the step
    /// changed), with the cascade.
    pub invalidated: Vec<Invalidation>,
}

/// The frame core for one session of one project.
pub struct Core<'s> {
    store: &'s dyn Store,
    project: Project,
    session: SessionArtifacts,
    root: CausalFrame,
    frames: FrameTree,
    principles: Vec<CausalFrame>,
    changed: Vec<String>,
    invalidated: Vec<Invalidation>,
    parts: Option<Arc<dyn PartHasher>>,
    exclude: Vec<std::path::PathBuf>,
}

impl<'s> Core<'s> {
    /// Opens the core on the project's latest working session (starting one
    /// when there is none), checks every live frame's condition against the
    /// files now (parts through `parts`) and invalidates what no longer
    /// holds, with the cascade, recorded in the session. `exclude` keeps
    /// files out of a session's scan (the store's own database).
    ///
    /// # Errors
    /// A store error.
    pub async fn open(
        store: &'s dyn Store,
        project: &Project,
        parts: Option<Arc<dyn PartHasher>>,
        exclude: &[std::path::PathBuf],
        now: Timestamp,
    ) -> Result<Core<'s>, CoreError> {
        let session = match store.sessions(&project.project_id, 1).await?.pop() {
            Some(s) => s,
            None => ops::start_session(store, project, &[], exclude, None, None, now).await?.session,
        };
        let root_id = session
            .root_frame_id
            .clone()
            .ok_or_else(|| CoreError::Invalid(format!("session {} has no root frame", session.session_id)))?;
        let root = store.frame(&root_id).await?.ok_or_else(|| {
            CoreError::Invalid(format!("session {}: root frame {root_id} is missing", session.session_id))
        })?;
        let mut core = Core {
            store,
            project: project.clone(),
            session,
            root,
            frames: FrameTree::new(),
            principles: Vec::new(),
            changed: Vec::new(),
            invalidated: Vec::new(),
            parts,
            exclude: exclude.to_vec(),
        };
        core.check(now).await?;
        core.reload().await?;
        Ok(core)
    }

    /// The session the core works in.
    #[must_use]
    pub fn session(&self) -> &SessionArtifacts {
        &self.session
    }

    /// Frames invalidated since the core opened, seeds first.
    #[must_use]
    pub fn invalidated(&self) -> &[Invalidation] {
        &self.invalidated
    }

    /// Files changed against the session's record or a frame's condition.
    #[must_use]
    pub fn changed_files(&self) -> &[String] {
        &self.changed
    }

    /// The frames a plugin may see (the session's and linked sessions').
    #[must_use]
    pub fn frames(&self) -> &FrameTree {
        &self.frames
    }

    /// A frame as stored now (any session; the core is not a plugin).
    ///
    /// # Errors
    /// A store error.
    pub async fn frame(&self, id: &FrameId) -> Result<Option<CausalFrame>, CoreError> {
        Ok(self.store.frame(id).await?)
    }

    /// The store the core writes to; for the front end's own reads and
    /// branch operations, never handed to a plugin.
    #[must_use]
    pub fn store(&self) -> &'s dyn Store {
        self.store
    }

    /// The project.
    #[must_use]
    pub fn project(&self) -> &Project {
        &self.project
    }

    /// The hash of a file or part now, as the core computes it.
    #[must_use]
    pub fn hash_now(&self, name: &str) -> Option<String> {
        hash_now(&self.project.root, self.parts.as_deref(), name).flatten()
    }

    async fn reload(&mut self) -> Result<(), CoreError> {
        let mut sessions = vec![self.session.session_id.clone()];
        for l in self.store.session_links(&self.project.project_id).await? {
            if let Some(other) = l.other(&self.session.session_id) {
                sessions.push(other.to_owned());
            }
        }
        let mut all = Vec::new();
        for s in &sessions {
            let filter = FrameFilter { session_id: Some(s.clone()), ..FrameFilter::project(&self.project.project_id) };
            all.extend(self.store.frames(&filter).await?);
        }
        self.frames = FrameTree::from_frames(all);
        self.principles = self
            .store
            .frames(&FrameFilter { status: Some(Status::Promoted), ..FrameFilter::project(&self.project.project_id) })
            .await?;
        Ok(())
    }

    /// Checks the live frames' file conditions (and expiry) now; invalidates
    /// and cascades what no longer holds. Returns what it invalidated.
    async fn check(&mut self, now: Timestamp) -> Result<Vec<Invalidation>, CoreError> {
        let mut conditions = self.store.file_conditions(&self.project.project_id).await?;
        let parts = self.parts.clone();
        let knows = |path: &str| match split_part(path).1 {
            None => true,
            Some((kind, _)) => parts.as_deref().is_some_and(|p| p.kinds().contains(&kind)),
        };
        conditions.retain(|(_, f)| knows(&f.path));
        let mut cache: HashMap<String, Option<String>> = HashMap::new();
        let mut current = |name: &str| -> Option<String> {
            cache
                .entry(name.to_owned())
                .or_insert_with(|| hash_now(&self.project.root, parts.as_deref(), name).flatten())
                .clone()
        };
        let mut changed = BTreeSet::new();
        for (path, entry) in &self.session.files {
            if current(path).as_deref() != Some(entry.hash.as_str()) {
                changed.insert(path.clone());
            }
        }
        let now_of: HashMap<String, Option<String>> =
            conditions.iter().map(|(_, f)| (f.path.clone(), current(&f.path))).collect();
        for (_, f) in &conditions {
            if now_of.get(&f.path).and_then(Option::as_deref) != Some(f.hash.as_str()) {
                changed.insert(split_part(&f.path).0.to_owned());
            }
        }
        self.changed = changed.into_iter().collect();
        let mut seeds = stale_by_files(&conditions, |name| now_of.get(name).cloned().flatten());
        for (id, at) in self.store.expired(&self.project.project_id, now).await? {
            if !seeds.iter().any(|s| s.frame_id == id) {
                seeds.push(Invalidation::new(id, &Cause::Expired(at)));
            }
        }
        if seeds.is_empty() {
            return Ok(Vec::new());
        }
        let hit = self.store.invalidate(&seeds, Some(&self.session.session_id), now).await?;
        self.invalidated.extend(hit.iter().cloned());
        Ok(hit)
    }

    /// Evidence for a list of files (or parts), hashed now; a file that
    /// cannot be read is an error naming it.
    fn evidence(&self, names: &[String]) -> Result<Vec<Evidence>, CoreError> {
        names
            .iter()
            .map(|name| match hash_now(&self.project.root, self.parts.as_deref(), name) {
                Some(Some(hash)) => Ok(Evidence::File { path: name.clone(), hash }),
                Some(None) => Err(CoreError::Invalid(format!("{name}: cannot be read to be cited as evidence"))),
                None => Err(CoreError::Invalid(format!("{name}: no hasher for this part of a file"))),
            })
            .collect()
    }

    /// Takes one step with `plugin`, the model being `think`. Nothing is
    /// stored unless the plugin's input and output calls and the model
    /// succeed; a failing `store` invalidates the stored frame (its side
    /// effect is missing) and reports the error.
    ///
    /// # Errors
    /// The plugin's or the model's failure, or a store error.
    pub async fn step(
        &mut self,
        plugin: &dyn Plugin,
        step: Step<'_>,
        think: &dyn Think,
        now: Timestamp,
    ) -> Result<Outcome, CoreError> {
        // The parent must be a live frame the session sees: checked before
        // the model runs, so nothing is spent on a step that cannot be kept.
        let parent = match &step.parent {
            None => self.root.clone(),
            Some(id) => match self.frames.get(id) {
                Some(f) if f.status.is_live() => f.clone(),
                Some(f) => {
                    return Err(CoreError::Invalid(format!(
                        "frame {id} is {}; nothing can be added under it",
                        f.status
                    )));
                }
                None => return Err(CoreError::Invalid(format!("no frame {id} in this session or a linked one"))),
            },
        };
        let mut frame = Draft::new(step.query.clone()).into_frame(
            &self.project.project_id,
            Some(&self.session.session_id),
            Some(&parent),
            now,
        )?;
        // Invalidations of frames the plugin cannot see stay unseen.
        let invalidated: Vec<Invalidation> =
            self.invalidated.iter().filter(|i| self.frames.get(&i.frame_id).is_some()).cloned().collect();
        let ctx = CoreContext {
            current_frame: &frame,
            frames: &self.frames,
            artifacts: &self.session,
            changed_files: &self.changed,
            invalidated_frames: &invalidated,
            principles: &self.principles,
        };
        let slice = plugin.transform_input(step.raw, &ctx)?;
        let mut evidence = self.evidence(&slice.files)?;
        let thought = think.think(&slice, &frame).await.map_err(CoreError::Model)?;
        evidence.extend(thought.evidence.into_iter().map(|e| self.checked(e)));
        frame.context_slice = slice.text.clone();
        frame.invalidation_condition = first_hash_wins(&evidence, &[]);
        frame.evidence = evidence;
        let parsed = plugin.parse_output(&thought.raw, &frame)?;
        let also = parsed.also();
        let more = self.evidence(also.files())?;
        let mut condition = first_hash_wins(&frame.evidence, &more);
        for id in also.frames() {
            match self.cite(id) {
                Ok(()) => condition.frames.push(id.clone()),
                Err(why) => frame.evidence.push(Evidence::Observation { tool: "core".into(), content: why }),
            }
        }
        condition.expires_at = match (condition.expires_at, also.expires_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        condition.frames.sort();
        condition.frames.dedup();
        // Drafts make frames whose condition is implied by the evidence;
        // a draft's own condition is then merged in, so build it that way.
        let draft = Draft {
            query: frame.query.clone(),
            context_slice: frame.context_slice.clone(),
            evidence: frame.evidence.clone(),
            conclusion: parsed.conclusion().to_owned(),
            confidence: parsed.confidence(),
            condition,
            status: Some(Status::Completed),
        };
        let condition = draft.condition.clone();
        let done = draft.into_frame(&self.project.project_id, Some(&self.session.session_id), Some(&parent), now)?;
        // A path keeps the first hash it was seen with: a file that changed
        // while the model worked leaves the frame stale, not re-dated.
        let frame = CausalFrame { frame_id: frame.frame_id, invalidation_condition: condition, ..done };
        let mut children = Vec::with_capacity(thought.children.len());
        for d in thought.children {
            let evidence: Vec<Evidence> = d.evidence.into_iter().map(|e| self.checked(e)).collect();
            let d = Draft { status: Some(d.status.unwrap_or(Status::Completed)), evidence, ..d };
            children.push(d.into_frame(&self.project.project_id, Some(&self.session.session_id), Some(&frame), now)?);
        }
        let mut frame = frame;
        frame.children = children.iter().map(|c| c.frame_id.clone()).collect();
        let mut batch = Vec::with_capacity(children.len() + 1);
        batch.push(frame.clone());
        batch.extend(children.iter().cloned());
        self.store.insert_frames(&batch).await?;
        // The tree links children as they are inserted.
        let mut bare = frame.clone();
        bare.children.clear();
        self.frames.insert(bare)?;
        for c in children.iter().cloned() {
            self.frames.insert(c)?;
        }
        if let Err(e) = plugin.store(&parsed, &frame) {
            let why = format!("plugin {} could not keep its result: {e}", plugin.name());
            self.store
                .invalidate(
                    &[Invalidation::new(frame.frame_id.clone(), &Cause::Manual(why))],
                    Some(&self.session.session_id),
                    now,
                )
                .await?;
            self.reload().await?;
            return Err(e.into());
        }
        let invalidated = self.check(now).await?;
        if !invalidated.is_empty() {
            self.reload().await?;
        }
        Ok(Outcome { frame, children, parsed, invalidated })
    }

    /// Whether a frame may be cited: seen by this session (or a principle)
    /// and live.
    fn cite(&self, id: &FrameId) -> Result<(), String> {
        let found = self.frames.get(id).or_else(|| self.principles.iter().find(|p| &p.frame_id == id));
        match found {
            Some(f) if f.status.is_live() => Ok(()),
            Some(f) => Err(format!("cited frame {id} is {}; not a dependency", f.status)),
            None => Err(format!("cited frame {id} is not in this session or a linked one; not a dependency")),
        }
    }

    /// Evidence from the model as the core accepts it: a cited frame that
    /// is invisible or invalidated becomes an observation saying so.
    fn checked(&self, e: Evidence) -> Evidence {
        match e {
            Evidence::Frame { frame_id } => match self.cite(&frame_id) {
                Ok(()) => Evidence::Frame { frame_id },
                Err(why) => Evidence::Observation { tool: "core".into(), content: why },
            },
            other => other,
        }
    }

    /// Files the session's scan leaves out (the store's own files).
    #[must_use]
    pub fn excluded(&self) -> &[std::path::PathBuf] {
        &self.exclude
    }
}

/// The condition implied by `evidence` and then `more` (files only), each
/// path with the first hash it was seen with, sorted; frames as cited.
fn first_hash_wins(evidence: &[Evidence], more: &[Evidence]) -> noesis_frames::InvalidationCondition {
    let mut files: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    let mut frames = Vec::new();
    for e in evidence.iter().chain(more) {
        match e {
            Evidence::File { path, hash } => {
                files.entry(path.clone()).or_insert_with(|| hash.clone());
            }
            Evidence::Frame { frame_id } => frames.push(frame_id.clone()),
            Evidence::Observation { .. } => {}
        }
    }
    frames.sort();
    frames.dedup();
    noesis_frames::InvalidationCondition {
        files: files.into_iter().map(|(path, hash)| noesis_frames::FileRef { path, hash }).collect(),
        frames,
        ..Default::default()
    }
}

/// A file's or part's hash now: `Some(None)` when it is gone or unreadable,
/// `None` when no hasher knows the part.
fn hash_now(root: &Path, parts: Option<&dyn PartHasher>, name: &str) -> Option<Option<String>> {
    match split_part(name) {
        (file, None) => Some(hash_file(&resolve(root, file)).ok()),
        (file, Some((kind, part))) => {
            let hasher = parts.filter(|p| p.kinds().contains(&kind))?;
            let Ok(source) = std::fs::read_to_string(resolve(root, file)) else { return Some(None) };
            Some(hasher.hash_part(file, &source, kind, part))
        }
    }
}
