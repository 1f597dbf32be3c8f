//! The CLI's link to causal memory: the process's place
//! (`noesis_host::place`: which store — `--store` / `NOESIS_STORE`, else
//! `$NOESIS_HOME/noesis.db` — and which project, the current directory's),
//! the frame every module run records and the emitted context runs hand on
//! (`noesis_plugins::recorder`), with warnings on stderr.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use noesis_frames::project::{Project, name_for};
use noesis_host::place::Place;
use noesis_runtime::compose::StepTrace;
use noesis_store::Store;
use serde_json::Value;

use crate::out;

static STORE_FLAG: OnceLock<Option<String>> = OnceLock::new();
static SERVES: OnceLock<bool> = OnceLock::new();

/// Remembers `--store` (clap has already folded `NOESIS_STORE` into it)
/// and whether this process serves others (`serve`, `ui`, `mcp`: many
/// requests at once) or runs one command.
pub(crate) fn configure(flag: Option<String>, serves: bool) {
    let _ = STORE_FLAG.set(flag.filter(|s| !s.is_empty()));
    let _ = SERVES.set(serves);
}

/// The place of this process: the store in force, the home, the current
/// directory; one SQLite connection for a command, the store's pool for a
/// server.
pub(crate) fn place() -> Place {
    let serves = SERVES.get().copied().unwrap_or(true);
    Place { connections: (!serves).then_some(1), ..Place::of_process(STORE_FLAG.get().cloned().flatten()) }
}

/// `$NOESIS_HOME` (`noesis_config::home_from` the process environment).
pub(crate) fn home() -> anyhow::Result<PathBuf> {
    Ok(place().home()?.to_path_buf())
}

/// The files of the store in force when it is a SQLite file (the database
/// and its journals), so a session scan leaves them out.
pub(crate) fn store_files() -> Vec<PathBuf> {
    place().store_files()
}

/// A runtime for the store's async calls.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// Opens the store in force.
pub(crate) async fn open() -> anyhow::Result<Box<dyn Store>> {
    Ok(place().open().await?)
}

/// The project of the current directory.
pub(crate) fn project() -> anyhow::Result<Project> {
    Ok(place().project()?)
}

/// The project and the store, with the project registered.
pub(crate) async fn context() -> anyhow::Result<(Project, Box<dyn Store>)> {
    Ok(place().context().await?)
}

pub(crate) use noesis_plugins::runs::{FileRead, Pending};

/// Where the recorder's warnings go: stderr.
fn warn() -> noesis_plugins::recorder::Warn {
    Arc::new(|m: &str| out::note(m))
}

/// Records a finished run as frames (see [`Pending::write`]). Never fails
/// the run: a problem is a warning on stderr.
pub(crate) fn record(pending: Pending, envelope: &Value, steps: &[StepTrace]) {
    let recorded = runtime()
        .map_err(|e| format!("{e:#}"))
        .and_then(|rt| rt.block_on(noesis_plugins::recorder::record(&place(), pending, envelope, steps)));
    if let Err(e) = recorded {
        out::note(&format!("warning: the run was not recorded as a frame: {e}"));
    }
}

pub(crate) use noesis_plugins::recorder::FrameWriter;

/// One writer of the frames of a server's runs, warnings on stderr.
pub(crate) fn frame_writer() -> FrameWriter {
    FrameWriter::start(place(), warn())
}

/// The stored name of a path a person typed, in the current project.
pub(crate) fn stored_name(project: &Project, typed: &Path) -> anyhow::Result<String> {
    Ok(name_for(&project.root, &std::env::current_dir()?, typed))
}

/// Emitted context kept in the store in force, namespaced by the current
/// project, opened on first use inside the run's own runtime.
pub(crate) struct ProjectContext;

impl ProjectContext {
    /// The run options' context: this store, and warnings on stderr (each
    /// said once), like a frame that could not be recorded.
    pub(crate) fn options() -> noesis_runtime::ContextOptions {
        noesis_plugins::recorder::project_context(place(), warn())
    }
}
