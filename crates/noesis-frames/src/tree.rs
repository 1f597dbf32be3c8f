//! The frame-tree algebra: branching (refine, pivot, backtrack), status
//! changes as [`Changeset`]s, the invalidation cascade and the queries, over
//! an in-memory [`FrameTree`]. A store applies the same changesets and must
//! give the same cascade; the tests here are the reference.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

use crate::{CausalFrame, Draft, FrameId, FramesError, Status, StatusChange, Timestamp};

/// Why a frame is invalidated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// A file named by the condition has another hash now, or is gone.
    FileChanged {
        /// The file.
        path: String,
        /// The hash the frame recorded.
        was: String,
        /// The hash now; `None` when the file is gone.
        now: Option<String>,
    },
    /// The condition's expiry time has passed.
    Expired(Timestamp),
    /// A frame named by the condition is invalidated.
    Dependency(FrameId),
    /// Its parent was invalidated (top-down cascade).
    Parent(FrameId),
    /// It cites a frame that was invalidated (cascade through evidence).
    Cites(FrameId),
    /// Someone said so.
    Manual(String),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::FileChanged { path, now: Some(_), .. } => write!(f, "file {path} changed"),
            Cause::FileChanged { path, now: None, .. } => write!(f, "file {path} is gone"),
            Cause::Expired(at) => write!(f, "expired at {at}"),
            Cause::Dependency(id) => write!(f, "depends on invalidated frame {id}"),
            Cause::Parent(id) => write!(f, "parent {id} invalidated"),
            Cause::Cites(id) => write!(f, "cites invalidated frame {id}"),
            Cause::Manual(reason) if reason.is_empty() => f.write_str("invalidated by hand"),
            Cause::Manual(reason) => write!(f, "invalidated by hand: {reason}"),
        }
    }
}

/// One frame to invalidate and why, in words (what the status history keeps).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Invalidation {
    /// The frame.
    pub frame_id: FrameId,
    /// The cause, as text.
    pub reason: String,
}

impl Invalidation {
    /// A frame and its cause.
    #[must_use]
    pub fn new(frame_id: FrameId, cause: &Cause) -> Invalidation {
        Invalidation { frame_id, reason: cause.to_string() }
    }
}

/// Everything one operation changes, applied at once (one transaction in a
/// store): new frames, then status changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changeset {
    /// Frames to add.
    pub frames: Vec<CausalFrame>,
    /// Status changes to existing frames, each with the status the frame must
    /// have now (so a concurrent change is detected, not overwritten).
    pub statuses: Vec<StatusUpdate>,
}

/// A status change to an existing frame.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    /// The frame.
    pub frame_id: FrameId,
    /// The status it must have now.
    pub from: Status,
    /// The change.
    pub change: StatusChange,
}

/// A status change, checked against the lifecycle.
///
/// # Errors
/// [`FramesError::Transition`] when the lifecycle forbids it.
pub fn transition(
    frame: &CausalFrame,
    to: Status,
    reason: Option<&str>,
    session_id: Option<&str>,
    now: Timestamp,
) -> Result<StatusUpdate, FramesError> {
    if !frame.status.can_become(to) {
        return Err(FramesError::Transition { frame_id: frame.frame_id.clone(), from: frame.status, to });
    }
    Ok(StatusUpdate {
        frame_id: frame.frame_id.clone(),
        from: frame.status,
        change: StatusChange {
            status: to,
            at: now,
            reason: reason.map(str::to_owned),
            session_id: session_id.map(str::to_owned),
        },
    })
}

fn must_be_open(frame: &CausalFrame) -> Result<(), FramesError> {
    if frame.status == Status::Invalidated {
        return Err(FramesError::Invalid(format!(
            "frame {} is invalidated; nothing can branch from it",
            frame.frame_id
        )));
    }
    Ok(())
}

/// Refine: go deeper on the same chain — a child of `current`, which stays
/// as it is.
///
/// # Errors
/// When `current` is invalidated or the draft is invalid.
pub fn refine(current: &CausalFrame, draft: Draft, now: Timestamp) -> Result<Changeset, FramesError> {
    must_be_open(current)?;
    let child = draft.into_frame(&current.project_id, None, Some(current), now)?;
    Ok(Changeset { frames: vec![child], statuses: Vec::new() })
}

/// Pivot: suspend `current` and start a sibling (same parent, same depth)
/// with `branched_from = current`.
///
/// # Errors
/// When `current` cannot be suspended or the draft is invalid.
pub fn pivot(
    current: &CausalFrame,
    parent: Option<&CausalFrame>,
    draft: Draft,
    now: Timestamp,
) -> Result<Changeset, FramesError> {
    must_be_open(current)?;
    if current.parent_id.as_ref() != parent.map(|p| &p.frame_id) {
        return Err(FramesError::Invalid(format!("pivot: the parent given is not the parent of {}", current.frame_id)));
    }
    let mut frame = draft.into_frame(&current.project_id, current.session_id.as_deref(), parent, now)?;
    frame.branched_from = Some(current.frame_id.clone());
    let reason = format!("pivot to {}", frame.frame_id);
    let suspend = transition(current, Status::Suspended, Some(&reason), None, now)?;
    Ok(Changeset { frames: vec![frame], statuses: vec![suspend] })
}

/// Backtrack: suspend every active frame from `chain`'s last frame up to,
/// not including, the root, and start a new child of the root with
/// `branched_from` = the last frame. `chain` runs root first, the current
/// frame last (as [`FrameTree::chain`] returns it).
///
/// # Errors
/// When the chain is empty or broken, or the draft is invalid.
pub fn backtrack(chain: &[&CausalFrame], draft: Draft, now: Timestamp) -> Result<Changeset, FramesError> {
    let (Some(root), Some(current)) = (chain.first(), chain.last()) else {
        return Err(FramesError::Invalid("backtrack: empty chain".to_owned()));
    };
    if root.parent_id.is_some() {
        return Err(FramesError::Invalid(format!("backtrack: {} is not a root", root.frame_id)));
    }
    for pair in chain.windows(2) {
        if pair[1].parent_id.as_ref() != Some(&pair[0].frame_id) {
            return Err(FramesError::Invalid(format!(
                "backtrack: {} is not a child of {}",
                pair[1].frame_id, pair[0].frame_id
            )));
        }
    }
    must_be_open(root)?;
    let mut frame = draft.into_frame(&root.project_id, current.session_id.as_deref(), Some(root), now)?;
    frame.branched_from = Some(current.frame_id.clone());
    let reason = format!("backtrack to {}", frame.frame_id);
    let statuses = chain[1..]
        .iter()
        .filter(|f| f.status == Status::Active)
        .map(|f| transition(f, Status::Suspended, Some(&reason), None, now))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Changeset { frames: vec![frame], statuses })
}

/// The edges a cascade follows. A store answers from its tables; the
/// in-memory tree from its maps.
pub trait FrameGraph {
    /// The frame's status, `None` if unknown.
    fn status_of(&self, id: &FrameId) -> Option<Status>;
    /// Children of `id`.
    fn children_of(&self, id: &FrameId) -> Vec<FrameId>;
    /// Frames whose condition names `id` as a dependency.
    fn citers_of(&self, id: &FrameId) -> Vec<FrameId>;
}

/// The invalidation cascade: the seeds, then top-down to every child and
/// sideways to every frame that cites an invalidated frame, transitively.
/// Frames already invalidated are neither repeated nor walked through (their
/// own cascade already happened). Breadth first, so each frame gets the
/// nearest cause; the seeds come first with their own causes.
pub fn cascade(graph: &impl FrameGraph, seeds: &[Invalidation]) -> Vec<Invalidation> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    for s in seeds {
        if graph.status_of(&s.frame_id).is_some_and(Status::is_live) && seen.insert(s.frame_id.clone()) {
            out.push(s.clone());
            queue.push_back(s.frame_id.clone());
        }
    }
    while let Some(id) = queue.pop_front() {
        let next = graph
            .children_of(&id)
            .into_iter()
            .map(|c| (c, Cause::Parent(id.clone())))
            .chain(graph.citers_of(&id).into_iter().map(|c| (c, Cause::Cites(id.clone()))));
        for (f, cause) in next {
            if graph.status_of(&f).is_some_and(Status::is_live) && seen.insert(f.clone()) {
                out.push(Invalidation::new(f.clone(), &cause));
                queue.push_back(f);
            }
        }
    }
    out
}

/// Frames held in memory, with the indexes the algebra needs.
#[derive(Debug, Clone, Default)]
pub struct FrameTree {
    frames: HashMap<FrameId, CausalFrame>,
    citers: HashMap<FrameId, Vec<FrameId>>,
    order: Vec<FrameId>,
}

impl FrameGraph for FrameTree {
    fn status_of(&self, id: &FrameId) -> Option<Status> {
        self.frames.get(id).map(|f| f.status)
    }
    fn children_of(&self, id: &FrameId) -> Vec<FrameId> {
        self.frames.get(id).map(|f| f.children.clone()).unwrap_or_default()
    }
    fn citers_of(&self, id: &FrameId) -> Vec<FrameId> {
        self.citers.get(id).cloned().unwrap_or_default()
    }
}

impl FrameTree {
    /// An empty tree.
    #[must_use]
    pub fn new() -> FrameTree {
        FrameTree::default()
    }

    /// A tree from frames in any order (parents need not come first);
    /// `children` lists are rebuilt from `parent_id`.
    #[must_use]
    pub fn from_frames(frames: impl IntoIterator<Item = CausalFrame>) -> FrameTree {
        let mut tree = FrameTree::new();
        let mut all: Vec<CausalFrame> = frames.into_iter().collect();
        all.sort_by(|a, b| (a.timestamps.created_at, &a.frame_id).cmp(&(b.timestamps.created_at, &b.frame_id)));
        for mut f in all {
            f.children.clear();
            tree.index(f);
        }
        let links: Vec<(FrameId, FrameId)> =
            tree.order.iter().filter_map(|id| Some((tree.frames[id].parent_id.clone()?, id.clone()))).collect();
        for (parent, child) in links {
            if let Some(p) = tree.frames.get_mut(&parent) {
                p.children.push(child);
            }
        }
        tree
    }

    fn index(&mut self, frame: CausalFrame) {
        for dep in &frame.invalidation_condition.frames {
            self.citers.entry(dep.clone()).or_default().push(frame.frame_id.clone());
        }
        self.order.push(frame.frame_id.clone());
        self.frames.insert(frame.frame_id.clone(), frame);
    }

    /// Adds a frame; its parent, if any, must be here and open.
    ///
    /// # Errors
    /// A duplicate id, a missing or invalidated parent, or a wrong depth.
    pub fn insert(&mut self, frame: CausalFrame) -> Result<(), FramesError> {
        if self.frames.contains_key(&frame.frame_id) {
            return Err(FramesError::Invalid(format!("frame {} exists already", frame.frame_id)));
        }
        if let Some(pid) = &frame.parent_id {
            let parent = self.frames.get(pid).ok_or_else(|| FramesError::NotFound(pid.clone()))?;
            must_be_open(parent)?;
            if frame.depth != parent.depth + 1 {
                return Err(FramesError::Invalid(format!(
                    "frame {} has depth {} under a parent of depth {}",
                    frame.frame_id, frame.depth, parent.depth
                )));
            }
        } else if frame.depth != 0 {
            return Err(FramesError::Invalid(format!("root frame {} has depth {}", frame.frame_id, frame.depth)));
        }
        let (id, parent) = (frame.frame_id.clone(), frame.parent_id.clone());
        self.index(frame);
        if let Some(p) = parent.and_then(|pid| self.frames.get_mut(&pid)) {
            p.children.push(id);
        }
        Ok(())
    }

    /// Applies a changeset: all of it, or nothing when any part is refused.
    ///
    /// # Errors
    /// The first refused part; the tree is then unchanged.
    pub fn apply(&mut self, changes: &Changeset) -> Result<(), FramesError> {
        let mut next = self.clone();
        for f in &changes.frames {
            next.insert(f.clone())?;
        }
        for u in &changes.statuses {
            next.set_status(u)?;
        }
        *self = next;
        Ok(())
    }

    fn set_status(&mut self, u: &StatusUpdate) -> Result<(), FramesError> {
        let f = self.frames.get_mut(&u.frame_id).ok_or_else(|| FramesError::NotFound(u.frame_id.clone()))?;
        if f.status != u.from || !f.status.can_become(u.change.status) {
            return Err(FramesError::Transition { frame_id: f.frame_id.clone(), from: f.status, to: u.change.status });
        }
        f.status = u.change.status;
        f.timestamps.updated_at = u.change.at;
        f.timestamps.history.push(u.change.clone());
        Ok(())
    }

    /// Invalidates the seeds and everything the cascade reaches; returns what
    /// changed, seeds first.
    pub fn invalidate(
        &mut self,
        seeds: &[Invalidation],
        session_id: Option<&str>,
        now: Timestamp,
    ) -> Vec<Invalidation> {
        let hit = cascade(self, seeds);
        for inv in &hit {
            if let Some(f) = self.frames.get_mut(&inv.frame_id) {
                f.status = Status::Invalidated;
                f.timestamps.updated_at = now;
                f.timestamps.history.push(StatusChange {
                    status: Status::Invalidated,
                    at: now,
                    reason: Some(inv.reason.clone()),
                    session_id: session_id.map(str::to_owned),
                });
            }
        }
        hit
    }

    /// A frame by id.
    #[must_use]
    pub fn get(&self, id: &FrameId) -> Option<&CausalFrame> {
        self.frames.get(id)
    }

    /// Number of frames.
    #[must_use]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether there are no frames.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Every frame in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &CausalFrame> {
        self.order.iter().filter_map(|id| self.frames.get(id))
    }

    /// Frames without a parent here (roots, or frames whose parent was not
    /// loaded), in insertion order.
    #[must_use]
    pub fn roots(&self) -> Vec<&CausalFrame> {
        self.iter().filter(|f| f.parent_id.as_ref().is_none_or(|p| !self.frames.contains_key(p))).collect()
    }

    /// The path from the root down to `id`, root first.
    #[must_use]
    pub fn chain(&self, id: &FrameId) -> Vec<&CausalFrame> {
        let mut chain = Vec::new();
        let mut cur = self.frames.get(id);
        while let Some(f) = cur {
            chain.push(f);
            cur = f.parent_id.as_ref().and_then(|p| self.frames.get(p));
            if chain.len() > self.frames.len() {
                break;
            }
        }
        chain.reverse();
        chain
    }

    /// Post-order (children before their parent) over the subtree of `root`,
    /// or over the whole forest when `root` is `None`.
    #[must_use]
    pub fn post_order(&self, root: Option<&FrameId>) -> Vec<&CausalFrame> {
        let starts: Vec<&CausalFrame> = match root {
            Some(r) => self.frames.get(r).into_iter().collect(),
            None => self.roots(),
        };
        let mut out = Vec::with_capacity(self.frames.len());
        let mut seen = HashSet::new();
        for start in starts {
            // (frame, children already pushed?)
            let mut stack = vec![(start, false)];
            while let Some((f, expanded)) = stack.pop() {
                if expanded {
                    out.push(f);
                    continue;
                }
                if !seen.insert(&f.frame_id) {
                    continue;
                }
                stack.push((f, true));
                for c in f.children.iter().rev() {
                    if let Some(cf) = self.frames.get(c) {
                        stack.push((cf, false));
                    }
                }
            }
        }
        out
    }

    /// Frames with status `status`.
    pub fn with_status(&self, status: Status) -> impl Iterator<Item = &CausalFrame> {
        self.iter().filter(move |f| f.status == status)
    }

    /// Frames that branched from another (pivots and backtracks).
    pub fn pivots(&self) -> impl Iterator<Item = &CausalFrame> {
        self.iter().filter(|f| f.branched_from.is_some())
    }

    /// Frames whose condition names `path`.
    pub fn by_file<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a CausalFrame> + 'a {
        self.iter().filter(move |f| f.cites_file(path))
    }

    /// Frames whose query or conclusion contains `text`, ignoring case.
    pub fn by_text<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a CausalFrame> + 'a {
        self.iter().filter(move |f| f.mentions(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Evidence, InvalidationCondition};

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn draft(q: &str) -> Draft {
        Draft { confidence: 0.5, ..Draft::new(q) }
    }

    fn root(tree: &mut FrameTree, q: &str) -> FrameId {
        let f = draft(q).into_frame("p", None, None, t(1)).unwrap();
        let id = f.frame_id.clone();
        tree.insert(f).unwrap();
        id
    }

    fn child(tree: &mut FrameTree, parent: &FrameId, d: Draft) -> FrameId {
        let c = refine(tree.get(parent).unwrap(), d, t(2)).unwrap();
        let id = c.frames[0].frame_id.clone();
        tree.apply(&c).unwrap();
        id
    }

    fn ids(v: &[Invalidation]) -> Vec<&FrameId> {
        v.iter().map(|i| &i.frame_id).collect()
    }

    #[test]
    fn refine_makes_a_child_and_leaves_the_parent_alone() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let c = child(&mut tree, &r, draft("c"));
        assert_eq!(tree.get(&r).unwrap().children, vec![c.clone()]);
        assert_eq!(tree.get(&r).unwrap().status, Status::Active);
        assert_eq!(tree.get(&c).unwrap().depth, 1);
    }

    #[test]
    fn pivot_suspends_and_branches_a_sibling() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let c = pivot(tree.get(&a).unwrap(), tree.get(&r), draft("b"), t(3)).unwrap();
        tree.apply(&c).unwrap();
        let b = &c.frames[0];
        let a = tree.get(&a).unwrap();
        assert_eq!(a.status, Status::Suspended);
        assert_eq!(a.timestamps.history.last().unwrap().at, t(3));
        assert!(a.timestamps.history.last().unwrap().reason.as_ref().unwrap().starts_with("pivot to "));
        assert_eq!((b.parent_id.as_ref(), b.depth), (Some(&r), 1));
        assert_eq!(b.branched_from.as_ref(), Some(&a.frame_id));
        assert_eq!(tree.pivots().count(), 1);
        assert_eq!(tree.with_status(Status::Suspended).count(), 1);
        assert_eq!(tree.len(), 3, "nothing is deleted");
    }

    #[test]
    fn pivot_checks_the_parent() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let e = pivot(tree.get(&a).unwrap(), None, draft("b"), t(3)).unwrap_err();
        assert!(e.to_string().contains("not the parent"), "{e}");
    }

    #[test]
    fn backtrack_suspends_the_chain_and_restarts_from_the_root() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let b = child(&mut tree, &a, draft("b"));
        let c = backtrack(&tree.chain(&b), draft("again"), t(9)).unwrap();
        tree.apply(&c).unwrap();
        let new = &c.frames[0];
        assert_eq!(new.parent_id.as_ref(), Some(&r));
        assert_eq!(new.depth, 1);
        assert_eq!(new.branched_from.as_ref(), Some(&b));
        assert_eq!(tree.get(&a).unwrap().status, Status::Suspended);
        assert_eq!(tree.get(&b).unwrap().status, Status::Suspended);
        assert_eq!(tree.get(&r).unwrap().status, Status::Active);
    }

    #[test]
    fn backtrack_rejects_a_broken_chain() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let b = child(&mut tree, &a, draft("b"));
        let chain = vec![tree.get(&r).unwrap(), tree.get(&b).unwrap()];
        assert!(backtrack(&chain, draft("x"), t(1)).unwrap_err().to_string().contains("not a child"));
        assert!(backtrack(&[], draft("x"), t(1)).is_err());
    }

    #[test]
    fn changesets_are_all_or_nothing() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let mut c = pivot(tree.get(&a).unwrap(), tree.get(&r), draft("b"), t(3)).unwrap();
        c.statuses.push(StatusUpdate {
            frame_id: r.clone(),
            from: Status::Completed,
            change: StatusChange { status: Status::Promoted, at: t(3), reason: None, session_id: None },
        });
        assert!(matches!(tree.apply(&c), Err(FramesError::Transition { .. })));
        assert_eq!(tree.len(), 2);
        assert_eq!(tree.get(&a).unwrap().status, Status::Active);
    }

    #[test]
    fn nothing_branches_from_an_invalidated_frame() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        tree.invalidate(&[Invalidation::new(r.clone(), &Cause::Manual(String::new()))], None, t(2));
        let e = refine(tree.get(&r).unwrap(), draft("x"), t(3)).unwrap_err();
        assert!(e.to_string().contains("invalidated"), "{e}");
        let e = transition(tree.get(&r).unwrap(), Status::Active, None, None, t(3)).unwrap_err();
        assert!(e.to_string().contains("is invalidated; it cannot become active"), "{e}");
    }

    #[test]
    fn cascade_goes_down_and_to_citers_but_not_up() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let a1 = child(&mut tree, &a, draft("a1"));
        let b = child(&mut tree, &r, draft("b"));
        let cites_a1 = Draft { evidence: vec![Evidence::Frame { frame_id: a1.clone() }], ..draft("cites a1") };
        let c = child(&mut tree, &b, cites_a1);
        let c1 = child(&mut tree, &c, draft("c1"));
        let other = root(&mut tree, "other");
        let hit = tree.invalidate(&[Invalidation::new(a.clone(), &Cause::Manual("x".into()))], Some("s"), t(5));
        assert_eq!(ids(&hit), vec![&a, &a1, &c, &c1]);
        assert_eq!(hit[1].reason, format!("parent {a} invalidated"));
        assert_eq!(hit[2].reason, format!("cites invalidated frame {a1}"));
        for id in [&r, &b, &other] {
            assert_ne!(tree.get(id).unwrap().status, Status::Invalidated);
        }
        let h = tree.get(&c1).unwrap().timestamps.history.last().unwrap().clone();
        assert_eq!((h.status, h.at, h.session_id.as_deref()), (Status::Invalidated, t(5), Some("s")));
        // A second time changes nothing.
        assert!(tree.invalidate(&[Invalidation::new(a, &Cause::Manual(String::new()))], None, t(6)).is_empty());
    }

    #[test]
    fn cascade_survives_cycles_of_citations() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        // b cites a, a's child cites b: a cycle through evidence.
        let b = child(&mut tree, &r, Draft { evidence: vec![Evidence::Frame { frame_id: a.clone() }], ..draft("b") });
        let a1 = child(&mut tree, &a, Draft { evidence: vec![Evidence::Frame { frame_id: b.clone() }], ..draft("a1") });
        let hit = tree.invalidate(&[Invalidation::new(b.clone(), &Cause::Manual(String::new()))], None, t(3));
        assert_eq!(ids(&hit), vec![&b, &a1]);
        assert_eq!(tree.get(&a).unwrap().status, Status::Active);
    }

    #[test]
    fn queries() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "Root question");
        let d = Draft {
            evidence: vec![Evidence::File { path: "src/a.rs".into(), hash: "h".into() }],
            conclusion: "The Answer".into(),
            ..draft("q")
        };
        let a = child(&mut tree, &r, d);
        assert_eq!(tree.by_file("src/a.rs").map(|f| &f.frame_id).collect::<Vec<_>>(), vec![&a]);
        assert_eq!(tree.by_file("src/b.rs").count(), 0);
        assert_eq!(tree.by_text("answer").map(|f| &f.frame_id).collect::<Vec<_>>(), vec![&a]);
        assert_eq!(tree.by_text("ROOT").map(|f| &f.frame_id).collect::<Vec<_>>(), vec![&r]);
        assert_eq!(tree.with_status(Status::Active).count(), 2);
        assert_eq!(tree.roots().len(), 1);
    }

    #[test]
    fn post_order_puts_leaves_first() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let a1 = child(&mut tree, &a, draft("a1"));
        let b = child(&mut tree, &r, draft("b"));
        let order: Vec<&FrameId> = tree.post_order(None).into_iter().map(|f| &f.frame_id).collect();
        assert_eq!(order, vec![&a1, &a, &b, &r]);
        let sub: Vec<&FrameId> = tree.post_order(Some(&a)).into_iter().map(|f| &f.frame_id).collect();
        assert_eq!(sub, vec![&a1, &a]);
    }

    #[test]
    fn from_frames_rebuilds_children() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let a = child(&mut tree, &r, draft("a"));
        let mut frames: Vec<CausalFrame> = tree.iter().cloned().collect();
        frames.reverse();
        for f in &mut frames {
            f.children.clear();
        }
        let again = FrameTree::from_frames(frames);
        assert_eq!(again.get(&r).unwrap().children, vec![a]);
    }

    #[test]
    fn insert_checks_parent_and_depth() {
        let mut tree = FrameTree::new();
        let r = root(&mut tree, "r");
        let mut orphan = draft("x").into_frame("p", None, tree.get(&r), t(1)).unwrap();
        orphan.parent_id = Some(FrameId::parse("nope").unwrap());
        assert!(matches!(tree.insert(orphan), Err(FramesError::NotFound(_))));
        let mut deep = draft("x").into_frame("p", None, tree.get(&r), t(1)).unwrap();
        deep.depth = 7;
        assert!(tree.insert(deep).unwrap_err().to_string().contains("depth 7"));
        let _ = InvalidationCondition::default();
    }
}
