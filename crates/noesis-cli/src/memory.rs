//! The CLI's link to causal memory: which store (`--store` /
//! `NOESIS_STORE`, else `$NOESIS_HOME/noesis.db` with `NOESIS_HOME`
//! defaulting to `~/.noesis`), which project (the current directory's), the
//! frame every module run records and the emitted context runs hand on
//! (`noesis_plugins::runs`, kept in the same store, per project).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use noesis_frames::project::{Project, identify, identify_cached, name_for};
use noesis_runtime::compose::StepTrace;
use noesis_store::Store;
use serde_json::Value;

use crate::out;

static STORE_FLAG: OnceLock<Option<String>> = OnceLock::new();

/// Remembers `--store` (clap has already folded `NOESIS_STORE` into it).
pub(crate) fn configure(flag: Option<String>) {
    let _ = STORE_FLAG.set(flag.filter(|s| !s.is_empty()));
}

pub(crate) use noesis_config::home_from;

/// [`home_from`] the process environment.
pub(crate) fn home() -> anyhow::Result<PathBuf> {
    home_from(&|k| std::env::var(k).ok()).context("neither NOESIS_HOME nor HOME is set")
}

/// The store URL in force.
pub(crate) fn store_url() -> anyhow::Result<String> {
    if let Some(Some(url)) = STORE_FLAG.get() {
        return Ok(url.clone());
    }
    let home = home()?;
    std::fs::create_dir_all(&home).with_context(|| format!("{}: cannot create NOESIS_HOME", home.display()))?;
    Ok(home.join("noesis.db").to_string_lossy().into_owned())
}

/// The files of the store in force when it is a SQLite file (the database
/// and its journals), so a session scan leaves them out.
pub(crate) fn store_files() -> Vec<PathBuf> {
    let Ok(url) = store_url() else { return Vec::new() };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Vec::new();
    }
    let path = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let path = PathBuf::from(path.split('?').next().unwrap_or_default());
    let path = if path.is_absolute() { path } else { std::env::current_dir().map(|d| d.join(&path)).unwrap_or(path) };
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        })
        .collect()
}

/// A runtime for the store's async calls.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// Opens the store in force.
pub(crate) async fn open() -> anyhow::Result<Box<dyn Store>> {
    let url = store_url()?;
    noesis_store::open(&url)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\nhint: pick another store with --store URL or NOESIS_STORE"))
}

/// The project of the current directory. A git repository's id is kept in
/// `$NOESIS_HOME/cache/projects.json`, so a command in a known repository
/// starts no `git` process (a short command's largest cost otherwise).
pub(crate) fn project() -> anyhow::Result<Project> {
    let cwd = std::env::current_dir().context("no current directory")?;
    Ok(match home() {
        Ok(home) => identify_cached(&cwd, &home.join("cache").join("projects.json"))?,
        Err(_) => identify(&cwd)?,
    })
}

/// The project and the store, with the project registered.
pub(crate) async fn context() -> anyhow::Result<(Project, Box<dyn Store>)> {
    let project = project()?;
    let store = open().await?;
    store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await?;
    Ok((project, store))
}

pub(crate) use noesis_plugins::runs::{FileRead, Pending};

/// Records a finished run as frames (see [`Pending::write`]). Never fails
/// the run: a problem is a warning on stderr.
pub(crate) fn record(pending: Pending, envelope: &Value, steps: &[StepTrace]) {
    let recorded = runtime().and_then(|rt| {
        rt.block_on(async {
            let (project, store) = context().await?;
            let cwd = std::env::current_dir()?;
            pending.write(&project, store.as_ref(), &cwd, envelope, steps).await?;
            anyhow::Ok(())
        })
    });
    if let Err(e) = recorded {
        out::note(&format!("warning: the run was not recorded as a frame: {e:#}"));
    }
}

/// One writer of the frames of a server's runs: a thread of its own with
/// one open store and the project identified once, fed through a bounded
/// queue. A full queue makes the finishing run wait (backpressure), never
/// drops a frame; [`FrameWriter::finish`] writes what is queued before the
/// server exits, so no run a client saw finish goes unrecorded.
pub(crate) struct FrameWriter {
    queue: std::sync::Mutex<Option<std::sync::mpsc::SyncSender<Job>>>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

type Job = (Pending, Value, Vec<StepTrace>);

/// Runs waiting to be written, at most.
const WRITER_QUEUE: usize = 256;

impl FrameWriter {
    pub(crate) fn start() -> FrameWriter {
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Job>(WRITER_QUEUE);
        let thread = std::thread::spawn(move || {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(e) => return out::note(&format!("warning: served runs are not recorded as frames: {e:#}")),
            };
            // The server's folder, read once: a frame names files relative to it.
            let cwd = std::env::current_dir().unwrap_or_default();
            rt.block_on(async {
                let mut opened: Option<(Project, Box<dyn Store>)> = None;
                for (pending, envelope, steps) in jobs {
                    if opened.is_none() {
                        match context().await {
                            Ok(c) => opened = Some(c),
                            Err(e) => {
                                out::note(&format!("warning: the run was not recorded as a frame: {e:#}"));
                                continue;
                            }
                        }
                    }
                    if let Some((project, store)) = &opened
                        && let Err(e) = pending.write(project, store.as_ref(), &cwd, &envelope, &steps).await
                    {
                        out::note(&format!("warning: the run was not recorded as a frame: {e:#}"));
                    }
                }
            });
        });
        FrameWriter { queue: std::sync::Mutex::new(Some(queue)), thread: std::sync::Mutex::new(Some(thread)) }
    }

    /// Queues a finished run (waits while the queue is full).
    pub(crate) fn record(&self, pending: Pending, envelope: Value, steps: Vec<StepTrace>) {
        // The sender is cloned so a full queue blocks this run only.
        let queue = self.queue.lock().ok().and_then(|q| q.clone());
        if queue.is_none_or(|q| q.send((pending, envelope, steps)).is_err()) {
            out::note("warning: the run was not recorded as a frame: the frame writer stopped");
        }
    }

    /// Writes everything queued, then stops; later runs are not recorded.
    pub(crate) fn finish(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
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
        let said = std::sync::Mutex::new(std::collections::BTreeSet::new());
        let warn = move |w: &str| {
            if said.lock().map(|mut s| s.insert(w.to_owned())).unwrap_or(true) {
                out::note(&format!("warning: {w}"));
            }
        };
        let open: noesis_plugins::runs::Opener = Box::new(|| {
            Box::pin(async {
                context().await.map(|(p, s)| (p.project_id, s)).map_err(|e| format!("the context store: {e:#}"))
            })
        });
        noesis_runtime::ContextOptions {
            on_warning: Some(noesis_runtime::OnText(std::sync::Arc::new(warn))),
            ..noesis_runtime::ContextOptions::new(std::sync::Arc::new(noesis_plugins::runs::StoreContext::new(open)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_noesis_home_else_dot_noesis_in_home() {
        let env = |vars: &'static [(&str, &str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(home_from(&env(&[("NOESIS_HOME", "/n"), ("HOME", "/h")])), Some(PathBuf::from("/n")));
        assert_eq!(home_from(&env(&[("NOESIS_HOME", " "), ("HOME", "/h")])), Some(PathBuf::from("/h/.noesis")));
        assert_eq!(home_from(&env(&[("HOME", "")])), None);
    }
}
