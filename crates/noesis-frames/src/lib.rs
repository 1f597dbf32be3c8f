//! Causal frames: what each step of reasoning concluded, on what evidence,
//! and when that stops holding.
//!
//! A [`CausalFrame`] is one node of a call tree (query, evidence,
//! conclusion, confidence, structured [`InvalidationCondition`], status with
//! timestamps, `branched_from`). The algebra here — branching ([`refine`],
//! [`pivot`], [`backtrack`]), the invalidation [`cascade`], post-order
//! [`verify`] and [`session::diff`] — is pure: it takes the time and the
//! world as arguments and returns data ([`Changeset`]s, [`Invalidation`]s)
//! that a store applies atomically. Only [`scan`] (blake3 hashing that
//! honours `.gitignore`) and [`project`] (identity from the first git
//! commit) touch the file system.
//!
//! ```
//! use noesis_frames::{Cause, Draft, Evidence, FrameTree, Invalidation, Status, Timestamp, refine};
//!
//! let now = Timestamp::from_millis(1_700_000_000_000);
//! let mut tree = FrameTree::new();
//! let root = Draft::new("why does the build fail?").into_frame("git:abc", None, None, now)?;
//! let root_id = root.frame_id.clone();
//! tree.insert(root)?;
//! let read = Draft {
//!     evidence: vec![Evidence::File { path: "build.rs".into(), hash: "00ff".into() }],
//!     conclusion: "build.rs needs protoc".into(),
//!     confidence: 0.8,
//!     ..Draft::new("read build.rs")
//! };
//! let step = refine(tree.get(&root_id).unwrap(), read, now)?;
//! let child = step.frames[0].frame_id.clone();
//! tree.apply(&step)?;
//!
//! // build.rs changed: the frame that read it goes, its parent stays.
//! let cause = Cause::FileChanged { path: "build.rs".into(), was: "00ff".into(), now: Some("1234".into()) };
//! let hit = tree.invalidate(&[Invalidation::new(child.clone(), &cause)], None, now);
//! assert_eq!(hit.len(), 1);
//! assert_eq!(tree.get(&child).unwrap().status, Status::Invalidated);
//! assert_eq!(tree.get(&root_id).unwrap().status, Status::Active);
//! # Ok::<(), noesis_frames::FramesError>(())
//! ```
//!
//! Architecture invariant: no SQL, no network, no clock or randomness in the
//! algebra (`frame`, `tree`, `verify`, `session`) apart from
//! [`FrameId::generate`] and [`Timestamp::now`], which callers use at the
//! edge.
#![deny(missing_docs)]

mod error;
mod frame;
pub mod project;
pub mod render;
pub mod scan;
pub mod session;
mod time;
mod tree;
mod verify;

pub use error::FramesError;
pub use frame::{
    CausalFrame, Draft, Evidence, FileRef, FrameId, InvalidationCondition, PART_KINDS, Status, StatusChange,
    Timestamps, is_fabricated, split_part,
};
pub use session::{FileEntry, FileRole, SessionArtifacts, SessionDiff, SessionLink};
pub use time::Timestamp;
pub use tree::{
    Cause, Changeset, FrameGraph, FrameTree, Invalidation, StatusUpdate, backtrack, cascade, pivot, refine, transition,
};
pub use verify::{Finding, Verification, World, check_frame, stale_by_files, verify};
