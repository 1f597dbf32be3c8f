//! The CLI's link to causal memory: which store (`--store` /
//! `NOESIS_STORE`, else `$NOESIS_HOME/noesis.db` with `NOESIS_HOME`
//! defaulting to `~/.noesis`), which project (the current directory's), the
//! frame every module run records, and the emitted context runs hand on
//! (kept in the same store, per project).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use noesis_frames::project::{Project, identify, name_for};
use noesis_frames::scan::{hash_bytes, json_digest};
use noesis_frames::{CausalFrame, Draft, Evidence, Status, Timestamp};
use noesis_runtime::compose::{Outcome, StepTrace};
use noesis_store::Store;
use serde_json::{Value, json};

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

/// The project of the current directory.
pub(crate) fn project() -> anyhow::Result<Project> {
    let cwd = std::env::current_dir().context("no current directory")?;
    Ok(identify(&cwd)?)
}

/// The project and the store, with the project registered.
pub(crate) async fn context() -> anyhow::Result<(Project, Box<dyn Store>)> {
    let project = project()?;
    let store = open().await?;
    store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await?;
    Ok((project, store))
}

/// A file a run read (from `--file FIELD=PATH`): what it was called and
/// the hash of exactly the bytes that went into the input.
#[derive(Debug, Clone)]
pub(crate) struct FileRead {
    field: String,
    path: PathBuf,
    hash: String,
}

impl FileRead {
    pub(crate) fn new(field: &str, path: &str, text: &str) -> FileRead {
        FileRead { field: field.to_owned(), path: PathBuf::from(path), hash: hash_bytes(text.as_bytes()) }
    }
}

/// What a run will record, captured before the input moves into the run.
pub(crate) struct Pending {
    module: String,
    input_digest: String,
    context: Value,
    files: Vec<FileRead>,
}

impl Pending {
    pub(crate) fn new(module: &str, input: &Value, files: Vec<FileRead>) -> Pending {
        let mut shown = input.clone();
        // The frame keeps the input; the caller's context keeps no secrets.
        if let Some(context) = shown.get_mut(noesis_modules::context::CONTEXT_KEY) {
            noesis_modules::context::redact(context);
        }
        // A file's text is evidence, not context: name it instead.
        if let Some(fields) = shown.as_object_mut() {
            for f in &files {
                fields.insert(f.field.clone(), json!({"file": f.path.to_string_lossy(), "blake3": f.hash}));
            }
        }
        let shown_text = shown.to_string();
        let context = if shown_text.len() <= 4096 { shown } else { json!({"omitted_chars": shown_text.len()}) };
        Pending { module: module.to_owned(), input_digest: json_digest(input), context, files }
    }

    /// Records the run as a frame, and every composition step (`@call`,
    /// dataflow, routing, fallback) as a child frame under the step that
    /// invoked it, so the call tree survives the run. Never fails the run: a
    /// problem is a warning on stderr.
    pub(crate) fn record(self, envelope: &Value, steps: &[StepTrace]) {
        let recorded = runtime().and_then(|rt| rt.block_on(self.try_record(envelope, steps)));
        if let Err(e) = recorded {
            out::note(&format!("warning: the run was not recorded as a frame: {e:#}"));
        }
    }

    async fn try_record(self, envelope: &Value, steps: &[StepTrace]) -> anyhow::Result<()> {
        let (project, store) = context().await?;
        self.write(&project, store.as_ref(), envelope, steps).await
    }

    /// Writes the frames of a run into `store`, for `project`.
    async fn write(
        self,
        project: &Project,
        store: &dyn Store,
        envelope: &Value,
        steps: &[StepTrace],
    ) -> anyhow::Result<()> {
        let cwd = std::env::current_dir()?;
        let evidence: Vec<Evidence> = self
            .files
            .iter()
            .map(|f| Evidence::File { path: name_for(&project.root, &cwd, &f.path), hash: f.hash.clone() })
            .collect();
        let meta = &envelope["meta"];
        let explain = meta["explain"].as_str().unwrap_or_default();
        let payload = if envelope["ok"] == json!(true) { &envelope["data"] } else { &envelope["error"] };
        let data_digest = json_digest(payload);
        let conclusion = match envelope["error"]["code"].as_str() {
            Some(code) => format!("{code}: {explain} (error blake3:{})", &data_digest[..16]),
            None => format!("{explain} (data blake3:{})", &data_digest[..16]),
        };
        let (fabricated, confidence) = provenance(meta);
        let mut context_slice = json!({
            "module": self.module,
            "model": meta["model"],
            "input_digest": self.input_digest,
            "trace_id": meta["trace_id"],
            "input": self.context,
        });
        if fabricated {
            context_slice["fabricated"] = json!(true);
        }
        // The exported span's ids (`trace_id` above is the envelope's).
        if let Some(ids) = steps.first().and_then(|s| s.span.as_ref()) {
            context_slice["otel"] = json!(ids);
        }
        // What the whole run spent (every step's own calls), on the run's
        // frame only, so adding up frames counts each call once.
        let calls: u32 = steps.iter().map(|s| s.calls).sum();
        if calls > 0 {
            let (input, output) = steps
                .iter()
                .filter_map(|s| s.usage)
                .fold((0u64, 0u64), |(i, o), u| (i + u.input_tokens, o + u.output_tokens));
            let cost: Option<f64> = steps.iter().filter(|s| s.calls > 0).map(|s| s.cost_usd).sum();
            context_slice["usage_total"] =
                json!({"calls": calls, "input_tokens": input, "output_tokens": output, "cost_usd": cost});
        }
        // A run made during a session hangs under the session's root frame.
        let parent = match store.latest_session_root(&project.project_id).await? {
            Some(id) => store.frame(&id).await?.filter(|f| f.status != Status::Invalidated),
            None => None,
        };
        let draft = Draft {
            context_slice: context_slice.to_string(),
            evidence,
            conclusion,
            confidence,
            status: Some(Status::Completed),
            ..Draft::new(format!("{} input:{}", self.module, &self.input_digest[..16]))
        };
        let now = Timestamp::now();
        let frame = draft.into_frame(&project.project_id, None, parent.as_ref(), now)?;
        // Step 0 is the root module: the run's own frame. Steps start after
        // their parents, so each parent's frame exists before its children.
        let mut frames: Vec<Option<CausalFrame>> = vec![None; steps.len()];
        for step in steps.iter().filter(|s| s.id != 0) {
            let parent = match step.parent {
                Some(0) | None => &frame,
                Some(p) => match frames.get(p).and_then(Option::as_ref) {
                    Some(f) => f,
                    None => &frame,
                },
            };
            let child = step_draft(step).into_frame(&project.project_id, None, Some(parent), now)?;
            if let Some(slot) = frames.get_mut(step.id) {
                *slot = Some(child);
            }
        }
        let mut all = vec![frame];
        all.extend(frames.into_iter().flatten());
        store.insert_frames(&all).await?;
        Ok(())
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
                        && let Err(e) = pending.write(project, store.as_ref(), &envelope, &steps).await
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

/// A composition step as a frame: what ran, how it came to run, and what
/// it concluded (a skipped step concludes why it did not run).
fn step_draft(step: &StepTrace) -> Draft {
    let envelope = &step.envelope;
    let explain = envelope["meta"]["explain"].as_str().unwrap_or_default();
    let conclusion = match &step.outcome {
        Outcome::Ok => format!("{explain} (data blake3:{})", &json_digest(&envelope["data"])[..16]),
        other => {
            let code = envelope["error"]["code"].as_str().map(|c| format!(" {c}")).unwrap_or_default();
            format!("{other}{code}: {explain}").trim_end_matches(": ").to_owned()
        }
    };
    let input_digest = json_digest(&step.input);
    let (fabricated, confidence) = provenance(&envelope["meta"]);
    let mut context_slice = json!({
        "module": step.module,
        "model": envelope["meta"]["model"],
        "via": step.via.to_string(),
        "round": step.round,
        "depth": step.depth,
        "input_digest": input_digest,
        "trace_id": envelope["meta"]["trace_id"],
        "elapsed_ms": step.elapsed_ms,
    });
    if fabricated {
        context_slice["fabricated"] = json!(true);
    }
    if let Some(ids) = &step.span {
        context_slice["otel"] = json!(ids);
    }
    Draft {
        context_slice: context_slice.to_string(),
        conclusion,
        confidence,
        status: Some(Status::Completed),
        ..Draft::new(format!("{} via {} input:{}", step.module, step.via, &input_digest[..16]))
    }
}

/// Whether the test model made the envelope up (`test/…`), and the
/// confidence to record: none for a fabricated answer, whatever it claims.
fn provenance(meta: &Value) -> (bool, f64) {
    let fabricated = meta["model"].as_str().is_some_and(|m| m.starts_with("test/"));
    let confidence = if fabricated { 0.0 } else { meta["confidence"].as_f64().unwrap_or(0.0).clamp(0.0, 1.0) };
    (fabricated, confidence)
}

/// The stored name of a path a person typed, in the current project.
pub(crate) fn stored_name(project: &Project, typed: &Path) -> anyhow::Result<String> {
    Ok(name_for(&project.root, &std::env::current_dir()?, typed))
}

/// Emitted context kept in the store in force, namespaced by the current
/// project. The store is opened on first use, inside the run's own runtime,
/// so a module that neither accepts nor emits context never touches it.
pub(crate) struct ProjectContext {
    opened: tokio::sync::OnceCell<Opened>,
}

/// The project id (the namespace) and its store, or why it could not open.
type Opened = Result<(String, Box<dyn Store>), String>;

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
        noesis_runtime::ContextOptions {
            on_warning: Some(noesis_runtime::OnText(std::sync::Arc::new(warn))),
            ..noesis_runtime::ContextOptions::new(std::sync::Arc::new(ProjectContext {
                opened: tokio::sync::OnceCell::new(),
            }))
        }
    }

    async fn store(&self) -> Result<&(String, Box<dyn Store>), noesis_runtime::ContextStoreError> {
        let opened = self
            .opened
            .get_or_init(|| async {
                context().await.map(|(p, s)| (p.project_id, s)).map_err(|e| format!("the context store: {e:#}"))
            })
            .await;
        opened.as_ref().map_err(|e| noesis_runtime::ContextStoreError(e.clone()))
    }
}

fn store_failed(e: &noesis_store::StoreError) -> noesis_runtime::ContextStoreError {
    noesis_runtime::ContextStoreError(e.to_string())
}

#[async_trait::async_trait]
impl noesis_runtime::ContextStore for ProjectContext {
    async fn put(&self, e: &noesis_runtime::ContextEntry) -> Result<(), noesis_runtime::ContextStoreError> {
        let (namespace, store) = self.store().await?;
        let row = noesis_store::ContextRow {
            namespace: namespace.clone(),
            key: e.key.clone(),
            kind: e.kind.clone(),
            value: e.value.clone(),
            module: e.module.clone(),
            user_id: e.user_id.clone(),
            session_id: e.session_id.clone(),
            created_at: Timestamp::from_millis(e.created_at_ms),
            expires_at: e.expires_at_ms.map(Timestamp::from_millis),
        };
        store.put_context(&row).await.map_err(|e| store_failed(&e))
    }

    async fn latest(
        &self,
        q: &noesis_runtime::ContextLookup<'_>,
    ) -> Result<Option<noesis_runtime::ContextEntry>, noesis_runtime::ContextStoreError> {
        let (namespace, store) = self.store().await?;
        let query = noesis_store::ContextQuery {
            namespace,
            kind: q.kind,
            user_id: q.user_id,
            session_id: q.session_id,
            now: Timestamp::from_millis(q.now_ms),
            not_before: q.not_before_ms.map(Timestamp::from_millis),
        };
        let row = store.latest_context(&query).await.map_err(|e| store_failed(&e))?;
        Ok(row.map(|r| noesis_runtime::ContextEntry {
            key: r.key,
            kind: r.kind,
            value: r.value,
            module: r.module,
            user_id: r.user_id,
            session_id: r.session_id,
            created_at_ms: r.created_at.millis(),
            expires_at_ms: r.expires_at.map(Timestamp::millis),
        }))
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
