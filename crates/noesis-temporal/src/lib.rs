//! Runs across many workers on Temporal, the store staying the source of
//! truth.
//!
//! - [`job`]: what the engine's history carries — a run's id in, where a
//!   stretch ended out, a bare "decided" signal — and the record a
//!   cluster run keeps of where it was submitted;
//! - [`stretch`]: a stored run driven headlessly until it ends, pauses or
//!   is cancelled, under its lease (no Temporal in it);
//! - `engine` (feature `engine`): the workflow, the activity, the worker
//!   and the client.
//!
//! Architecture invariant: the engine's history never holds the
//! conversation — only run ids, stretch outcomes and signals — so no run
//! comes near Temporal's payload or history limits, and the store alone
//! says what a run did.
#![deny(missing_docs)]

pub mod job;
pub mod stretch;

#[cfg(feature = "engine")]
pub mod engine;

/// What went wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum TemporalError {
    /// The address does not say where the frontend is.
    #[error("--temporal/--on: {0}")]
    Address(String),
    /// The frontend did not answer.
    #[error(
        "cannot reach the Temporal frontend at {address}: {why}\nhint: is a Temporal server running there? (`temporal server start-dev` for a local one)"
    )]
    Connect {
        /// Where.
        address: String,
        /// Why.
        why: String,
    },
    /// A run or batch could not be submitted.
    #[error("{what}: the cluster refused it: {why}")]
    Submit {
        /// What (`agent run R`, `batch B`).
        what: String,
        /// Why.
        why: String,
    },
    /// A run's workflow could not be told or cancelled.
    #[error("agent run {run_id}: its workflow did not take the message: {why}")]
    Signal {
        /// The run.
        run_id: String,
        /// Why.
        why: String,
    },
    /// A run's or batch's workflow ended without a result.
    #[error("{what}: {why}")]
    Finished {
        /// What (`agent run R`, `batch B`).
        what: String,
        /// Why.
        why: String,
    },
    /// The worker could not start or stopped with an error.
    #[error("{0}")]
    Worker(String),
}

/// How this process names itself to the cluster: `noesis@HOST:PID`.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("noesis@{host}:{}", std::process::id())
}
