//! Module runs as causal frames, and the emitted context runs hand on kept
//! in the store: what `noesis run`, `compose` and the server record after a
//! run returns (the runtime itself knows nothing of storage).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use noesis_frames::project::{Project, name_for};
use noesis_frames::scan::{hash_bytes, json_digest};
use noesis_frames::{CausalFrame, Draft, Evidence, Status, Timestamp};
use noesis_runtime::compose::{Outcome, StepTrace};
use noesis_store::Store;
use serde_json::{Value, json};

use crate::Error;

/// A file a run read (from `--file FIELD=PATH`): what it was called and
/// the hash of exactly the bytes that went into the input.
#[derive(Debug, Clone)]
pub struct FileRead {
    field: String,
    path: PathBuf,
    hash: String,
}

impl FileRead {
    /// The file `path` read into `field`, with exactly these bytes.
    #[must_use]
    pub fn new(field: &str, path: &str, text: &str) -> FileRead {
        FileRead { field: field.to_owned(), path: PathBuf::from(path), hash: hash_bytes(text.as_bytes()) }
    }
}

/// What a run will record, captured before the input moves into the run.
pub struct Pending {
    module: String,
    input_digest: String,
    context: Value,
    files: Vec<FileRead>,
}

impl Pending {
    /// What a run of `module` on `input`, having read `files`, will record.
    #[must_use]
    pub fn new(module: &str, input: &Value, files: Vec<FileRead>) -> Pending {
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

    /// Writes the frames of a run into `store`, for `project`: the run as a
    /// frame, and every composition step (`@call`, dataflow, routing,
    /// fallback) as a child frame under the step that invoked it, so the call
    /// tree survives the run. Relative file paths are read from `cwd`.
    ///
    /// # Errors
    /// A frame that cannot be made, or the store.
    pub async fn write(
        self,
        project: &Project,
        store: &dyn Store,
        cwd: &Path,
        envelope: &Value,
        steps: &[StepTrace],
    ) -> Result<(), Error> {
        let evidence: Vec<Evidence> = self
            .files
            .iter()
            .map(|f| Evidence::File { path: name_for(&project.root, cwd, &f.path), hash: f.hash.clone() })
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

/// The store and namespace (the project id) that emitted context goes to,
/// or why they could not be had.
pub type Opened = Result<(String, Box<dyn Store>), String>;

/// Opens the store for [`StoreContext`], on first use.
pub type Opener = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Opened> + Send>> + Send + Sync>;

/// Emitted context kept in a store, namespaced by the project. The store is
/// opened on first use, so a module that neither accepts nor emits context
/// never touches it.
pub struct StoreContext {
    opened: tokio::sync::OnceCell<Opened>,
    open: Opener,
}

impl std::fmt::Debug for StoreContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreContext(..)")
    }
}

impl StoreContext {
    /// Context kept in the store `open` gives.
    #[must_use]
    pub fn new(open: Opener) -> StoreContext {
        StoreContext { opened: tokio::sync::OnceCell::new(), open }
    }

    async fn store(&self) -> Result<&(String, Box<dyn Store>), noesis_runtime::ContextStoreError> {
        let opened = self.opened.get_or_init(|| (self.open)()).await;
        opened.as_ref().map_err(|e| noesis_runtime::ContextStoreError(e.clone()))
    }
}

fn store_failed(e: &noesis_store::StoreError) -> noesis_runtime::ContextStoreError {
    noesis_runtime::ContextStoreError(e.to_string())
}

#[async_trait::async_trait]
impl noesis_runtime::ContextStore for StoreContext {
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
