//! The built-in plugins of the frame core and the runs behind `noesis docs`,
//! `review`, `testgen` and `ask`, callable from any front end.
//!
//! Each plugin implements `noesis-plugin`'s boundary: [`recall`] (the
//! default: a question about past cognition), [`docs`] (a YAML knowledge
//! node per code unit), [`review`] (findings per changed file of a diff) and
//! [`testgen`] (test specs per function, rendered into test files). Beside
//! each plugin sits its run over a project ([`docs::sync_in`],
//! [`docs::status_in`], [`review::review_in`], [`testgen::generate_in`],
//! [`ask::ask`]): a [`Setting`] (the project, its store, the files no scan
//! reads), paths already resolved by the caller, a model ([`Think`]) and a
//! progress callback in; a report as plain data out, for the caller to
//! print, serialise or stream. [`ModuleThink`] makes a Cognitive Module the
//! model of a step; [`import`] turns a Claude Code transcript into a
//! session's frames; [`runs`] records module runs as frames and keeps the
//! context they emit in the store, and [`recorder`] does both in a
//! process's place (`noesis_host::place`), a server's runs through one
//! writer thread.
//!
//! Architecture invariant: nothing here reads the process's environment,
//! current directory or configuration, and nothing prints; a front end
//! decides those and passes them in.
//!
//! ```no_run
//! # async fn demo(store: &dyn noesis_store::Store, project: &noesis_frames::project::Project,
//! #               think: &dyn noesis_plugin::Think) -> Result<(), noesis_plugins::Error> {
//! use noesis_plugins::{Setting, docs};
//! let setting = Setting { project, store, exclude: &[] };
//! let out = project.root.join("docs/noesis");
//! let report = docs::sync_in(&setting, think, None, &out, &|unit| eprintln!("writing {unit}")).await?;
//! println!("{} regenerated", report.regenerated.len());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod ask;
pub mod docs;
pub mod import;
pub mod programs;
pub mod recall;
pub mod recorder;
pub mod review;
pub mod runs;
pub mod testgen;
mod think;
pub mod transcripts;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use noesis_frames::Timestamp;
use noesis_frames::project::Project;
use noesis_plugin::{Core, CoreError, PartHasher};
use noesis_store::Store;

pub use noesis_plugin::Think;
pub use think::{Echo, ModuleThink};

/// Where a plugin runs: the project, its store, and the files a scan of the
/// project leaves out (the store's own database files, when it is inside).
#[derive(Clone, Copy)]
pub struct Setting<'a> {
    /// The project.
    pub project: &'a Project,
    /// Its store.
    pub store: &'a dyn Store,
    /// Files no scan reads.
    pub exclude: &'a [PathBuf],
}

impl std::fmt::Debug for Setting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setting").field("project", &self.project).field("exclude", &self.exclude).finish()
    }
}

impl<'a> Setting<'a> {
    /// Opens the frame core on the project's working session (which checks
    /// what changed since), with `parts` hashing parts of files when given.
    ///
    /// # Errors
    /// A store error.
    pub async fn core(&self, parts: Option<Arc<dyn PartHasher>>) -> Result<Core<'a>, CoreError> {
        Core::open(self.store, self.project, parts, self.exclude, Timestamp::now()).await
    }

    /// The project's files under `scope` (absolute folders or files; the
    /// whole project when empty), leaving out the excluded files and
    /// `also`: project-relative names, sorted.
    fn files(&self, scope: &[PathBuf], also: &[PathBuf]) -> Result<Vec<String>, Error> {
        let scope = if scope.is_empty() { vec![self.project.root.clone()] } else { scope.to_vec() };
        let mut exclude = self.exclude.to_vec();
        exclude.extend(also.iter().cloned());
        let scan = noesis_frames::scan::scan_excluding(&self.project.root, &scope, &exclude)?;
        Ok(scan.files.into_keys().collect())
    }
}

/// A plugin run that failed as a whole (a unit or file that fails is in its
/// report instead, and the others go on).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The core (the plugin, the model, the store) failed.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] noesis_store::StoreError),
    /// The files could not be scanned, or a frame could not be made.
    #[error(transparent)]
    Frames(#[from] noesis_frames::FramesError),
    /// What was asked cannot be done (the message says why).
    #[error("{0}")]
    Invalid(String),
}

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
pub fn inside(root: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    if rel.is_empty()
        || p.components().any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
    {
        return None;
    }
    let real = noesis_fs::Workspace::new(root).ok()?.confine(rel).ok()?;
    real.exists().then_some(real)
}

/// At most the first `n` bytes of `text`, cut at a character boundary.
fn head(text: &str, n: usize) -> &str {
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
