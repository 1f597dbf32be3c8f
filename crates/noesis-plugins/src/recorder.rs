//! Module runs kept in a process's [`Place`]: a finished run written as
//! frames (one run, or a server's many through one writer thread), and the
//! emitted context runs hand on, in the store in force under the project of
//! the process's folder. Nothing here fails a run: what cannot be written
//! is a warning, said through the front end's `warn`.

use std::sync::{Arc, Mutex, mpsc};

use noesis_frames::project::Project;
use noesis_host::place::Place;
use noesis_runtime::compose::StepTrace;
use noesis_store::Store;
use serde_json::Value;

use crate::runs::{Opener, Pending, StoreContext};

/// Where warnings go: the front end's way of telling a person.
pub type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// Writes a finished run's frames (see [`Pending::write`]) in `place`;
/// file paths are read relative to its folder.
///
/// # Errors
/// Why the frames were not written, in words.
pub async fn record(place: &Place, pending: Pending, envelope: &Value, steps: &[StepTrace]) -> Result<(), String> {
    let (project, store) = place.context().await.map_err(|e| e.to_string())?;
    let cwd = place.cwd.clone().ok_or("no current directory")?;
    pending.write(&project, store.as_ref(), &cwd, envelope, steps).await.map_err(|e| e.to_string())
}

/// One writer of the frames of a server's runs: a thread of its own with
/// one open store and the project identified once, fed through a bounded
/// queue. A full queue makes the finishing run wait (backpressure), never
/// drops a frame; [`FrameWriter::finish`] writes what is queued before the
/// server exits, so no run a client saw finish goes unrecorded.
pub struct FrameWriter {
    queue: Mutex<Option<mpsc::SyncSender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    warn: Warn,
}

type Job = (Pending, Value, Vec<StepTrace>);

/// Runs waiting to be written, at most.
const WRITER_QUEUE: usize = 256;

impl FrameWriter {
    /// Starts the writer over `place` (its folder read once: a frame names
    /// files relative to it).
    #[must_use]
    pub fn start(place: Place, warn: Warn) -> FrameWriter {
        let (queue, jobs) = mpsc::sync_channel::<Job>(WRITER_QUEUE);
        let said = Arc::clone(&warn);
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return said(&format!("warning: served runs are not recorded as frames: {e}")),
            };
            let cwd = place.cwd.clone().unwrap_or_default();
            rt.block_on(async {
                let mut opened: Option<(Project, Box<dyn Store>)> = None;
                for (pending, envelope, steps) in jobs {
                    if opened.is_none() {
                        match place.context().await {
                            Ok(c) => opened = Some(c),
                            Err(e) => {
                                said(&format!("warning: the run was not recorded as a frame: {e}"));
                                continue;
                            }
                        }
                    }
                    if let Some((project, store)) = &opened
                        && let Err(e) = pending.write(project, store.as_ref(), &cwd, &envelope, &steps).await
                    {
                        said(&format!("warning: the run was not recorded as a frame: {e}"));
                    }
                }
            });
        });
        FrameWriter { queue: Mutex::new(Some(queue)), thread: Mutex::new(Some(thread)), warn }
    }

    /// Queues a finished run (waits while the queue is full).
    pub fn record(&self, pending: Pending, envelope: Value, steps: Vec<StepTrace>) {
        // The sender is cloned so a full queue blocks this run only.
        let queue = self.queue.lock().ok().and_then(|q| q.clone());
        if queue.is_none_or(|q| q.send((pending, envelope, steps)).is_err()) {
            (self.warn)("warning: the run was not recorded as a frame: the frame writer stopped");
        }
    }

    /// Writes everything queued, then stops; later runs are not recorded.
    pub fn finish(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// Run options whose emitted context is kept in `place`'s store,
/// namespaced by its project and opened on first use inside the run's own
/// runtime; each warning is said once.
#[must_use]
pub fn project_context(place: Place, warn: Warn) -> noesis_runtime::ContextOptions {
    let said = Mutex::new(std::collections::BTreeSet::new());
    let once = move |w: &str| {
        if said.lock().map(|mut s| s.insert(w.to_owned())).unwrap_or(true) {
            warn(&format!("warning: {w}"));
        }
    };
    let place = Arc::new(place);
    let open: Opener = Box::new(move || {
        let place = Arc::clone(&place);
        Box::pin(async move {
            place.context().await.map(|(p, s)| (p.project_id, s)).map_err(|e| format!("the context store: {e}"))
        })
    });
    noesis_runtime::ContextOptions {
        on_warning: Some(noesis_runtime::OnText(Arc::new(once))),
        ..noesis_runtime::ContextOptions::new(Arc::new(StoreContext::new(open)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_without_a_store_warns_for_each_run_and_never_blocks_the_server() {
        let warned = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&warned);
        // No home and no store given: the place cannot be opened.
        let writer = FrameWriter::start(Place::default(), Arc::new(move |m: &str| sink.lock().unwrap().push(m.into())));
        writer.record(Pending::new("m", &serde_json::json!({}), Vec::new()), serde_json::json!({}), Vec::new());
        writer.finish();
        writer.record(Pending::new("m", &serde_json::json!({}), Vec::new()), serde_json::json!({}), Vec::new());
        let warned = warned.lock().unwrap().clone();
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(warned[0].starts_with("warning: the run was not recorded as a frame: "), "{warned:?}");
        assert_eq!(warned[1], "warning: the run was not recorded as a frame: the frame writer stopped");
    }
}
