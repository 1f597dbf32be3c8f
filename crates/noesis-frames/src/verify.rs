//! Re-checking structured conditions: post-order verification of a tree and
//! the file check a new session runs. The world (file hashes, frames outside
//! the tree) comes in through [`World`], so this stays free of I/O.

use std::collections::{HashMap, HashSet};

use crate::tree::{Cause, FrameTree, Invalidation};
use crate::{CausalFrame, FileRef, FrameId, Status, Timestamp};

/// What verification asks of the world.
pub trait World {
    /// The file's blake3 hex digest now; `None` when it is gone or unreadable.
    fn file_hash(&self, path: &str) -> Option<String>;
    /// Whether this world can tell the hash of `path` at all. A part of a
    /// file (see [`crate::split_part`]) is hashed only by whoever knows that
    /// kind of part; other worlds leave such conditions alone rather than
    /// calling them gone.
    fn knows(&self, path: &str) -> bool {
        crate::split_part(path).1.is_none()
    }
    /// The status of a frame that is not in the tree being verified.
    fn status_of(&self, id: &FrameId) -> Option<Status>;
}

/// A frame whose own condition failed, and the first reason found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The frame.
    pub frame_id: FrameId,
    /// Why it no longer holds.
    pub cause: Cause,
}

/// What a verification walk saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// Live frames checked, in the order checked (post-order).
    pub checked: Vec<FrameId>,
    /// Frames whose own condition failed, in post-order. Feed them to the
    /// cascade as seeds.
    pub findings: Vec<Finding>,
}

impl Verification {
    /// The findings as cascade seeds.
    #[must_use]
    pub fn seeds(&self) -> Vec<Invalidation> {
        self.findings.iter().map(|f| Invalidation::new(f.frame_id.clone(), &f.cause)).collect()
    }
}

/// Checks one frame's structured condition: each file's hash, each
/// dependency's status (`failed` holds frames found stale earlier in the same
/// walk), and the expiry. Returns the first failing part.
pub fn check_frame(
    frame: &CausalFrame,
    world: &impl World,
    status_here: impl Fn(&FrameId) -> Option<Status>,
    failed: &HashSet<FrameId>,
    now: Timestamp,
) -> Option<Cause> {
    let cond = &frame.invalidation_condition;
    for FileRef { path, hash } in cond.files.iter().filter(|f| world.knows(&f.path)) {
        let current = world.file_hash(path);
        if current.as_deref() != Some(hash.as_str()) {
            return Some(Cause::FileChanged { path: path.clone(), was: hash.clone(), now: current });
        }
    }
    for dep in &cond.frames {
        let status = if failed.contains(dep) {
            Some(Status::Invalidated)
        } else {
            status_here(dep).or_else(|| world.status_of(dep))
        };
        if status == Some(Status::Invalidated) {
            return Some(Cause::Dependency(dep.clone()));
        }
    }
    match cond.expires_at {
        Some(at) if at <= now => Some(Cause::Expired(at)),
        _ => None,
    }
}

/// Walks the subtree of `root` (or the whole forest) post-order — leaves
/// first — and re-checks every live frame's condition against the world as
/// it is now and against the children already checked. A parent that cites a
/// child found stale is itself stale. Invalidated frames are skipped.
pub fn verify(tree: &FrameTree, root: Option<&FrameId>, world: &impl World, now: Timestamp) -> Verification {
    let mut v = Verification::default();
    let mut failed = HashSet::new();
    let status_here = |id: &FrameId| tree.get(id).map(|f| f.status);
    for frame in tree.post_order(root) {
        if !frame.status.is_live() {
            continue;
        }
        v.checked.push(frame.frame_id.clone());
        if let Some(cause) = check_frame(frame, world, status_here, &failed, now) {
            failed.insert(frame.frame_id.clone());
            v.findings.push(Finding { frame_id: frame.frame_id.clone(), cause });
        }
    }
    v
}

/// The check a new session runs over every live frame's file conditions:
/// the frames whose recorded hash differs from the hash now (or whose file is
/// gone), one [`Invalidation`] per frame (the first file in path order).
/// `conditions` are `(frame, file)` pairs as the store lists them; `current`
/// gives the hash now.
pub fn stale_by_files(
    conditions: &[(FrameId, FileRef)],
    current: impl Fn(&str) -> Option<String>,
) -> Vec<Invalidation> {
    let mut now_by_path: HashMap<&str, Option<String>> = HashMap::new();
    let mut first: HashMap<&FrameId, (&str, Cause)> = HashMap::new();
    let mut order = Vec::new();
    for (frame, FileRef { path, hash }) in conditions {
        let now = now_by_path.entry(path.as_str()).or_insert_with(|| current(path));
        if now.as_deref() == Some(hash.as_str()) {
            continue;
        }
        let cause = Cause::FileChanged { path: path.clone(), was: hash.clone(), now: now.clone() };
        match first.get_mut(frame) {
            Some(slot) if path.as_str() < slot.0 => *slot = (path.as_str(), cause),
            Some(_) => {}
            None => {
                order.push(frame);
                first.insert(frame, (path.as_str(), cause));
            }
        }
    }
    order.into_iter().map(|f| Invalidation::new(f.clone(), &first[f].1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::refine;
    use crate::{Draft, Evidence, InvalidationCondition};

    struct Files(HashMap<String, String>, HashMap<FrameId, Status>);
    impl World for Files {
        fn file_hash(&self, path: &str) -> Option<String> {
            self.0.get(path).cloned()
        }
        fn status_of(&self, id: &FrameId) -> Option<Status> {
            self.1.get(id).copied()
        }
    }

    fn file(p: &str, h: &str) -> Evidence {
        Evidence::File { path: p.into(), hash: h.into() }
    }

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn add(tree: &mut FrameTree, parent: Option<&FrameId>, d: Draft) -> FrameId {
        let d = Draft { confidence: 0.9, ..d };
        let f = match parent {
            Some(p) => refine(tree.get(p).unwrap(), d, t(1)).unwrap().frames.remove(0),
            None => d.into_frame("p", None, None, t(1)).unwrap(),
        };
        let id = f.frame_id.clone();
        tree.insert(f).unwrap();
        id
    }

    #[test]
    fn post_order_catches_a_stale_child_before_its_citing_parent() {
        let mut tree = FrameTree::new();
        let root = add(&mut tree, None, Draft::new("root"));
        let leaf = add(&mut tree, Some(&root), Draft { evidence: vec![file("a.rs", "1")], ..Draft::new("leaf") });
        let ok = add(&mut tree, Some(&root), Draft { evidence: vec![file("b.rs", "2")], ..Draft::new("ok") });
        // The parent's evidence is its children's conclusions.
        let mid = add(&mut tree, Some(&root), Draft::new("mid"));
        let mid_leaf = add(&mut tree, Some(&mid), Draft { evidence: vec![file("a.rs", "1")], ..Draft::new("ml") });
        let mut citing = tree.get(&mid).unwrap().clone();
        citing.invalidation_condition.frames.push(mid_leaf.clone());
        let mut tree =
            FrameTree::from_frames(tree.iter().cloned().map(|f| if f.frame_id == mid { citing.clone() } else { f }));
        let world = Files([("a.rs".into(), "CHANGED".into()), ("b.rs".into(), "2".into())].into(), HashMap::new());
        let v = verify(&tree, None, &world, t(10));
        assert_eq!(v.checked.len(), 5);
        assert_eq!(v.checked.last(), Some(&root));
        let stale: Vec<&FrameId> = v.findings.iter().map(|f| &f.frame_id).collect();
        assert_eq!(stale, vec![&leaf, &mid_leaf, &mid]);
        assert_eq!(v.findings[2].cause, Cause::Dependency(mid_leaf.clone()));
        assert!(
            matches!(&v.findings[0].cause, Cause::FileChanged { path, now: Some(n), .. } if path == "a.rs" && n == "CHANGED")
        );
        let hit = tree.invalidate(&v.seeds(), None, t(11));
        assert_eq!(hit.len(), 3);
        assert_eq!(tree.get(&ok).unwrap().status, Status::Active);
        assert_eq!(tree.get(&root).unwrap().status, Status::Active);
    }

    #[test]
    fn gone_files_expiry_and_outside_dependencies() {
        let mut tree = FrameTree::new();
        let outside = FrameId::parse("outside").unwrap();
        let gone = add(&mut tree, None, Draft { evidence: vec![file("x", "1")], ..Draft::new("g") });
        let exp = add(
            &mut tree,
            None,
            Draft {
                condition: InvalidationCondition { expires_at: Some(t(5)), ..Default::default() },
                ..Draft::new("e")
            },
        );
        let dep = add(
            &mut tree,
            None,
            Draft { evidence: vec![Evidence::Frame { frame_id: outside.clone() }], ..Draft::new("d") },
        );
        let world = Files(HashMap::new(), [(outside.clone(), Status::Invalidated)].into());
        let v = verify(&tree, None, &world, t(5));
        let causes: HashMap<&FrameId, &Cause> = v.findings.iter().map(|f| (&f.frame_id, &f.cause)).collect();
        assert!(matches!(causes[&gone], Cause::FileChanged { now: None, .. }));
        assert_eq!(causes[&exp], &Cause::Expired(t(5)));
        assert_eq!(causes[&dep], &Cause::Dependency(outside));
        assert_eq!(causes[&gone].to_string(), "file x is gone");
        // Before the expiry, with the file back: only the dependency fails.
        let world = Files([("x".into(), "1".into())].into(), world.1);
        assert_eq!(verify(&tree, None, &world, t(4)).findings.len(), 1);
    }

    #[test]
    fn invalidated_frames_are_not_rechecked() {
        let mut tree = FrameTree::new();
        let a = add(&mut tree, None, Draft { evidence: vec![file("x", "1")], ..Draft::new("a") });
        tree.invalidate(&[Invalidation { frame_id: a, reason: "r".into() }], None, t(2));
        let v = verify(&tree, None, &Files(HashMap::new(), HashMap::new()), t(3));
        assert!(v.checked.is_empty() && v.findings.is_empty());
    }

    #[test]
    fn stale_by_files_picks_changed_and_gone_files_once_per_frame() {
        let f = |s: &str| FrameId::parse(s).unwrap();
        let r = |p: &str, h: &str| FileRef { path: p.into(), hash: h.into() };
        let conds = vec![
            (f("1"), r("b", "B")),
            (f("1"), r("a", "OLD")),
            (f("2"), r("b", "B")),
            (f("3"), r("gone", "G")),
            (f("4"), r("c", "OLD")),
            (f("4"), r("a", "OLD")),
        ];
        let now = |p: &str| match p {
            "a" => Some("NEW".to_owned()),
            "b" => Some("B".to_owned()),
            "c" => Some("NEW".to_owned()),
            _ => None,
        };
        let stale = stale_by_files(&conds, now);
        let got: Vec<(&str, &str)> = stale.iter().map(|i| (i.frame_id.as_str(), i.reason.as_str())).collect();
        assert_eq!(got, vec![("1", "file a changed"), ("3", "file gone is gone"), ("4", "file a changed")]);
    }
}
