//! The plugin boundary of the frame core.
//!
//! The core owns causality: it resolves which files changed and which
//! frames no longer hold, makes the step's frame, hashes its evidence,
//! records it with the model's sub-steps in one transaction and cascades
//! invalidation. A [`Plugin`] owns the I/O of one kind of work in three
//! calls: [`Plugin::transform_input`] (the request and a read-only
//! [`CoreContext`] in, the model's [`ContextSlice`] out),
//! [`Plugin::parse_output`] (the model's reply in, a [`Parsed`] result out)
//! and [`Plugin::store`] (keep the result; a side effect only). Plugins are
//! built in or run as programs speaking JSON lines ([`ExternalPlugin`]).
//!
//! Architecture invariant: no plugin ever holds a store handle or a mutable
//! frame; a plugin's output can add to a frame's invalidation condition but
//! cannot remove from it. A plugin sees only its session's frames, those of
//! sessions linked to it on purpose, and the project's promoted frames.
#![deny(missing_docs)]

mod boundary;
mod core;
pub mod docs;
mod external;
pub mod recall;
pub mod review;
pub mod testgen;

use std::time::Duration;

pub use boundary::{Also, ContextSlice, CoreContext, Parsed, Plugin};
pub use core::{Core, Outcome, PartHasher, Step, Think, Thought};
pub use external::{ExternalPlugin, ExternalSpec, PROTOCOL};

/// The file `rel` names inside `root`, when it is one: a relative path
/// without `..` whose real location (links followed) is under `root`. Paths
/// from diffs, transcripts and models go through this before they are read
/// or written.
///
/// The workspace's confinement ([`noesis_fs::Workspace::confine`]) with two
/// rules more, on purpose: a path from a diff or a transcript is a plain
/// relative name (no absolute path, no `..` even one that stays inside), and
/// it names a file that exists.
#[must_use]
pub fn inside(root: &std::path::Path, rel: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(rel);
    if rel.is_empty()
        || p.components().any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
    {
        return None;
    }
    let real = noesis_fs::Workspace::new(root).ok()?.confine(rel).ok()?;
    real.exists().then_some(real)
}

/// At most the first `n` bytes of `text`, cut at a character boundary.
pub(crate) fn head(text: &str, n: usize) -> &str {
    let mut end = n.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A file's text for a model, at most `budget` bytes, saying how much was
/// left out.
pub(crate) fn clip_file(text: &str, budget: usize) -> String {
    let shown = head(text, budget);
    if shown.len() == text.len() {
        text.to_owned()
    } else {
        format!("{shown}\n… ({} more bytes)", text.len() - shown.len())
    }
}

/// A plugin's failure, named by plugin and call.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin refused the request (its own error reply).
    #[error("plugin {plugin}: {method}: {message}")]
    Failed {
        /// The plugin.
        plugin: String,
        /// The call.
        method: String,
        /// What it said.
        message: String,
    },
    /// The program could not be started.
    #[error("plugin {plugin}: cannot start: {reason}")]
    Spawn {
        /// The plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// The program did not answer in time (it was killed).
    #[error("plugin {plugin}: {method}: no reply within {after:?}; the plugin was stopped")]
    Timeout {
        /// The plugin.
        plugin: String,
        /// The call.
        method: String,
        /// The limit.
        after: Duration,
    },
    /// The program exited or closed its pipes.
    #[error("plugin {plugin}: {method}: the plugin crashed: {detail}")]
    Crashed {
        /// The plugin.
        plugin: String,
        /// The call.
        method: String,
        /// Exit status and the end of its stderr.
        detail: String,
    },
    /// The reply was not what the protocol says (the plugin was stopped).
    #[error("plugin {plugin}: {method}: a reply noesis cannot use: {detail}")]
    Garbage {
        /// The plugin.
        plugin: String,
        /// The call.
        method: String,
        /// What was wrong.
        detail: String,
    },
}

/// A failed step of the core.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The plugin failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The model gave no usable reply.
    #[error("model: {0}")]
    Model(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] noesis_store::StoreError),
    /// A frame could not be made.
    #[error(transparent)]
    Frames(#[from] noesis_frames::FramesError),
    /// Something the core was asked cannot be.
    #[error("{0}")]
    Invalid(String),
}
