//! Where frames and sessions live: the [`Store`] trait and [`SqlStore`], its
//! implementation for a SQLite file (the default) and for PostgreSQL (when
//! several workers share one memory), with versioned migrations.
//!
//! Every write is one transaction: a frame is stored with its status
//! history, file conditions and edges, or not at all. SQLite runs in WAL mode
//! with a busy timeout and takes the write lock up front, so several
//! processes can append at once without losing a frame. The invalidation
//! cascade runs in the database (a recursive query over the frame edges) and
//! gives the same result as `noesis_frames::cascade`.
//!
//! ```
//! use noesis_frames::{Draft, Timestamp};
//! use noesis_store::{FrameFilter, SqlStore, Store};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqlStore::open(dir.path().join("noesis.db").to_str().unwrap()).await?;
//! store.ensure_project("path:/tmp/demo", "/tmp/demo").await?;
//! let frame = Draft::new("what does main do?").into_frame("path:/tmp/demo", None, None, Timestamp::now())?;
//! store.insert_frames(std::slice::from_ref(&frame)).await?;
//! let back = store.frames(&FrameFilter::project("path:/tmp/demo")).await?;
//! assert_eq!(back, vec![frame]);
//! # Ok::<(), noesis_store::StoreError>(())
//! # }).unwrap();
//! ```
//!
//! Architecture invariant: the only crate that knows SQL. It stores and
//! returns `noesis-frames` types; it decides nothing about what is stale
//! (the algebra does) beyond running the cascade it is asked to.
#![deny(missing_docs)]

mod agent;
mod batch;
mod context;
mod error;
mod filter;
mod links;
mod memory;
mod migrate;
pub mod ops;
mod sql;
mod workflow;

use async_trait::async_trait;
use noesis_frames::{CausalFrame, Changeset, FileRef, FrameId, Invalidation, SessionArtifacts, SessionLink, Timestamp};

pub use agent::{AgentState, AgentSummary, Lease, LeaseGrant, LeaseHolder, MIN_SNAPSHOT_GAP, RunEvent};
pub use batch::{Batch, BatchItem};
pub use context::{ContextQuery, ContextRow};
pub use error::StoreError;
pub use filter::FrameFilter;
pub use links::{NewSession, SessionKind};
pub use memory::{Memory, MemoryQuery, NewMemory};
pub use sql::{SQLITE_CONNECTIONS, SqlStore};
pub use workflow::WorkflowVersion;

/// Which database a store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// The latest schema version this build writes.
pub const SCHEMA_VERSION: i64 = migrate::LATEST;

/// Frames, sessions and emitted context, stored. Object-safe, so front ends
/// hold a `Box<dyn Store>`.
#[async_trait]
pub trait Store: Send + Sync {
    /// The database kind.
    fn backend(&self) -> Backend;

    /// The store's URL without password, for messages.
    fn describe(&self) -> &str;

    /// Registers a project (or updates where it lives on this machine).
    async fn ensure_project(&self, project_id: &str, root: &str) -> Result<(), StoreError>;

    /// Adds frames in one transaction. Parents may come earlier in the same
    /// slice. Refuses a missing or invalidated parent, a parent in another
    /// project, a wrong depth, an unknown dependency, a duplicate id.
    async fn insert_frames(&self, frames: &[CausalFrame]) -> Result<(), StoreError>;

    /// Applies a changeset (new frames, then status changes) in one
    /// transaction; a status change whose frame no longer has the expected
    /// status fails the whole changeset.
    async fn apply(&self, changes: &Changeset) -> Result<(), StoreError>;

    /// One frame with its children, condition and history.
    async fn frame(&self, id: &FrameId) -> Result<Option<CausalFrame>, StoreError>;

    /// The one frame whose id starts with `prefix` (optionally in one
    /// project).
    async fn resolve(&self, project_id: Option<&str>, prefix: &str) -> Result<FrameId, StoreError>;

    /// Frames matching a filter, oldest first.
    async fn frames(&self, filter: &FrameFilter) -> Result<Vec<CausalFrame>, StoreError>;

    /// How many frames match a filter.
    async fn count(&self, filter: &FrameFilter) -> Result<u64, StoreError>;

    /// Invalidates the seeds and cascades (children, then frames citing an
    /// invalidated frame, transitively, through live frames only), in one
    /// transaction. Returns every frame invalidated: seeds first, then by
    /// depth. Seeds already invalidated are skipped.
    async fn invalidate(
        &self,
        seeds: &[Invalidation],
        session_id: Option<&str>,
        at: Timestamp,
    ) -> Result<Vec<Invalidation>, StoreError>;

    /// The file conditions of a project's live frames, by frame then path.
    async fn file_conditions(&self, project_id: &str) -> Result<Vec<(FrameId, FileRef)>, StoreError>;

    /// A project's live frames whose expiry is at or before `now`.
    async fn expired(&self, project_id: &str, now: Timestamp) -> Result<Vec<(FrameId, Timestamp)>, StoreError>;

    /// Records a session, its files and its root frame, and runs the
    /// invalidation its start found, all in one transaction.
    async fn begin_session(
        &self,
        session: &SessionArtifacts,
        root: &CausalFrame,
        seeds: &[Invalidation],
    ) -> Result<Vec<Invalidation>, StoreError>;

    /// Records a session that is not a scan (a `noesis solve` episode, an
    /// imported transcript) with its files, its root frame and the rest of
    /// its frames, in one transaction: readable by id ([`Store::session`])
    /// but never a project's previous session ([`Store::sessions`]) nor the
    /// parent of later runs ([`Store::latest_session_root`]).
    async fn record_session(&self, new: &NewSession<'_>) -> Result<(), StoreError>;

    /// The first session of a project recorded from a source with this hash
    /// (see [`NewSession::source_hash`]).
    async fn session_by_source(&self, project_id: &str, hash: &str) -> Result<Option<String>, StoreError>;

    /// Links two sessions (both must exist); `false` when they already
    /// were (the reason is replaced).
    async fn link_sessions(&self, link: &SessionLink) -> Result<bool, StoreError>;

    /// Removes the link between two sessions; `false` when there was none.
    async fn unlink_sessions(&self, a: &str, b: &str) -> Result<bool, StoreError>;

    /// Every session of a project with its kind, newest first.
    async fn session_kinds(&self, project_id: &str) -> Result<Vec<(String, SessionKind)>, StoreError>;

    /// The links that touch a project's sessions, oldest first.
    async fn session_links(&self, project_id: &str) -> Result<Vec<SessionLink>, StoreError>;

    /// One session.
    async fn session(&self, session_id: &str) -> Result<Option<SessionArtifacts>, StoreError>;

    /// The root frame of a project's latest session, without its files.
    async fn latest_session_root(&self, project_id: &str) -> Result<Option<FrameId>, StoreError>;

    /// A project's sessions, newest first.
    async fn sessions(&self, project_id: &str, limit: u32) -> Result<Vec<SessionArtifacts>, StoreError>;

    /// The frames invalidated during a session, in order.
    async fn invalidated_in_session(&self, session_id: &str) -> Result<Vec<Invalidation>, StoreError>;

    /// Consistency problems (empty when consistent): frames without history,
    /// statuses that disagree with it, missing condition rows or edges,
    /// wrong depths, live frames under invalidated parents, and on SQLite the
    /// integrity and foreign-key checks.
    async fn check(&self) -> Result<Vec<String>, StoreError>;

    /// Stores emitted context, replacing the row with the same namespace,
    /// key and type; the namespace's expired rows go in the same
    /// transaction.
    async fn put_context(&self, row: &ContextRow) -> Result<(), StoreError>;

    /// The newest row of the type that is unexpired at `now`, stored at or
    /// after `not_before`, and whose user and session (when set) are the
    /// query's.
    async fn latest_context(&self, query: &ContextQuery<'_>) -> Result<Option<ContextRow>, StoreError>;

    /// Stores one state of an agent run and moves its summary to it, in one
    /// transaction. Refused ([`StoreError::Fenced`]) when another holder's
    /// lease on the run is live; see [`Store::save_agent_state_held`].
    async fn save_agent_state(&self, state: &AgentState) -> Result<(), StoreError> {
        self.save_agent_state_held(state, None).await
    }

    /// [`Store::save_agent_state`] by the holder of `lease`: refused
    /// ([`StoreError::Fenced`]) once another holder has taken the run over;
    /// the write renews the lease. Refused ([`StoreError::Conflict`]) when
    /// the store already holds a later step of the run.
    async fn save_agent_state_held(&self, state: &AgentState, lease: Option<&Lease>) -> Result<(), StoreError>;

    /// Stores the change `delta` (`noesis_json::delta`) from the run's state
    /// at step `base` to its state at `state.step`, as the run's writer made
    /// it (`state.state` is not read; the other fields are the summary's).
    /// Refused ([`StoreError::Conflict`]) unless the store holds the run at
    /// step `base` — then store the state whole — and as
    /// [`Store::save_agent_state_held`] under a lease.
    async fn save_agent_delta(
        &self,
        state: &AgentState,
        base: i64,
        delta: &serde_json::Value,
        lease: Option<&Lease>,
    ) -> Result<(), StoreError>;

    /// Appends events to run `run_id`'s stream, in one transaction; an id
    /// stored already is refused ([`StoreError::Conflict`]).
    async fn append_run_events(&self, run_id: &str, events: &[RunEvent]) -> Result<(), StoreError>;

    /// Run `run_id`'s stored events after id `after` (at most `limit`), in
    /// order.
    async fn run_events(&self, run_id: &str, after: i64, limit: u32) -> Result<Vec<RunEvent>, StoreError>;

    /// The id of run `run_id`'s last stored event (0: none).
    async fn last_run_event(&self, run_id: &str) -> Result<i64, StoreError>;

    /// Stores a module batch and its inputs, all or nothing; a batch with
    /// this id already is a [`StoreError::Conflict`].
    async fn create_batch(&self, batch: &Batch, inputs: &[serde_json::Value]) -> Result<(), StoreError>;

    /// Batch `batch_id`, if stored.
    async fn batch(&self, batch_id: &str) -> Result<Option<Batch>, StoreError>;

    /// The items of a batch with `from <= idx < to`, in order.
    async fn batch_items(&self, batch_id: &str, from: i64, to: i64) -> Result<Vec<BatchItem>, StoreError>;

    /// Answers item `idx` with `output` unless it has an answer: whether
    /// this answer was the one kept.
    async fn answer_batch_item(
        &self,
        batch_id: &str,
        idx: i64,
        output: &serde_json::Value,
        by: &str,
        at_ms: i64,
    ) -> Result<bool, StoreError>;

    /// How many items of a batch have an answer.
    async fn batch_answered(&self, batch_id: &str) -> Result<i64, StoreError>;

    /// Takes the lease of `run_id` for `holder` for `ttl_ms` from `now_ms`,
    /// unless another holder's lease is live; taking it raises its epoch,
    /// which fences every earlier holder's writes off.
    async fn acquire_run_lease(
        &self,
        run_id: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<LeaseGrant, StoreError>;

    /// Extends `lease` to `now_ms + ttl_ms`; [`StoreError::Fenced`] when it
    /// was taken over.
    async fn renew_run_lease(&self, lease: &Lease, ttl_ms: i64, now_ms: i64) -> Result<Lease, StoreError>;

    /// Gives `lease` up; nothing happens when it was taken over meanwhile.
    async fn release_run_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Who holds `run_id`'s lease (live or lapsed), if anyone took it.
    async fn run_lease(&self, run_id: &str) -> Result<Option<LeaseHolder>, StoreError>;

    /// An agent run's latest state, or its state at `step` (the last one
    /// stored at or before it).
    async fn agent_state(&self, run_id: &str, step: Option<i64>) -> Result<Option<AgentState>, StoreError>;

    /// A project's agent runs, most recently changed first.
    async fn agent_runs(&self, project_id: &str, limit: u32) -> Result<Vec<AgentSummary>, StoreError>;

    /// Writes the next version of a project's workflow state: `version.version`
    /// must be the head's + 1, else [`StoreError::Conflict`] (read the head
    /// again and redo the change).
    async fn append_workflow_state(&self, version: &WorkflowVersion) -> Result<(), StoreError>;

    /// Version `version` of the project's workflow state, or its head.
    async fn workflow_state(
        &self,
        project_id: &str,
        version: Option<i64>,
    ) -> Result<Option<WorkflowVersion>, StoreError>;

    /// Every version of the project's workflow state, oldest first.
    async fn workflow_history(&self, project_id: &str) -> Result<Vec<WorkflowVersion>, StoreError>;

    /// Replaces what memory keeps of `episode_id` with `entries`, in one
    /// transaction.
    async fn replace_memory(&self, episode_id: &str, entries: &[NewMemory]) -> Result<(), StoreError>;

    /// Memory entries matching any of the query's words, most relevant first.
    async fn search_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<Memory>, StoreError>;
}

/// Opens a store from a URL or path (see [`SqlStore::open`]).
///
/// # Errors
/// As [`SqlStore::open`].
pub async fn open(url: &str) -> Result<Box<dyn Store>, StoreError> {
    Ok(Box::new(SqlStore::open(url).await?))
}

/// Opens a store with at most `connections` SQLite connections (see
/// [`SqlStore::open_with`]).
///
/// # Errors
/// As [`SqlStore::open`].
pub async fn open_with(url: &str, connections: u32) -> Result<Box<dyn Store>, StoreError> {
    Ok(Box::new(SqlStore::open_with(url, connections).await?))
}
