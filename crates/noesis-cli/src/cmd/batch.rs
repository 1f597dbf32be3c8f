//! `noesis run MODULE --batch FILE.jsonl`: one module over every input of a
//! JSONL file. The batch and its inputs are stored first (all or nothing),
//! then answered in slices — here, a few at once, or by a Temporal
//! cluster's workers with `--on` — each answer stored once; the envelopes
//! come out as JSONL in the input file's order.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use noesis_modules::search::SearchPath;
use noesis_runtime::CancellationToken;
use noesis_store::{Batch, Store};
use noesis_temporal::job::BatchJob;
use noesis_temporal::stretch::Stepper;
use serde_json::{Value, json};

use crate::out;
use crate::provider::{ProviderArgs, select};

/// How a batch is run besides the module and the provider.
pub(crate) struct Batching {
    pub(crate) file: PathBuf,
    pub(crate) slice: i64,
    pub(crate) parallel: usize,
    pub(crate) on: Option<crate::cluster::Target>,
    pub(crate) pretty: bool,
}

/// The inputs of `file`: one JSON object per non-empty line; anything else
/// is an error naming the line, and nothing is stored.
pub(crate) fn read_inputs(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("--batch {}: cannot read", file.display()))?;
    let mut inputs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a JSON object on one line", file.display(), n + 1))?;
        if !value.is_object() {
            anyhow::bail!("{}:{}: each line must be a JSON object (the module's input)", file.display(), n + 1);
        }
        inputs.push(value);
    }
    if inputs.is_empty() {
        anyhow::bail!("--batch {}: no inputs (one JSON object per line)", file.display());
    }
    Ok(inputs)
}

/// The module as every worker can find it: a folder by its absolute path,
/// else the name (a built-in, or on the workers' search path).
fn module_ref(module: &str) -> String {
    let path = Path::new(module);
    if path.is_dir() {
        return std::fs::canonicalize(path).map_or_else(|_| module.to_owned(), |p| p.to_string_lossy().into_owned());
    }
    module.to_owned()
}

pub(crate) fn run(search: &SearchPath, module: &str, provider: &ProviderArgs, b: Batching) -> anyhow::Result<ExitCode> {
    let inputs = read_inputs(&b.file)?;
    let config = crate::config::load(&crate::provider::env, &std::env::current_dir()?)?.config;
    let loaded = match super::load(search, module)? {
        super::Loaded::Module(m) => m,
        super::Loaded::NotFound(env) => {
            anyhow::bail!("{}", env["error"]["message"].as_str().unwrap_or("the module was not found"))
        }
    };
    let chosen = select(provider, &config, Some((&loaded.name, Some(loaded.policy.tier.as_str()))))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let place = crate::memory::place();
    let (project, store) = rt.block_on(place.context())?;
    let store: Arc<dyn Store> = Arc::from(store);
    let batch = Batch {
        batch_id: uuid::Uuid::now_v7().to_string(),
        project_id: project.project_id.clone(),
        module: module_ref(module),
        spec: json!({"provider": chosen.name(), "model": chosen.model()}),
        total: i64::try_from(inputs.len())?,
        created_at: i64::try_from(noesis_host::runs::now_ms())?,
    };
    rt.block_on(store.create_batch(&batch, &inputs))?;
    let job = BatchJob::new(&batch.batch_id, batch.total, b.slice.max(1));
    match &b.on {
        Some(target) => {
            if !crate::cluster::run_batch(&rt, store.as_ref(), &job, target)? {
                return Ok(ExitCode::SUCCESS); // detached: the id is printed
            }
        }
        None => {
            let stepper = Arc::new(Stepper::new(
                Arc::clone(&store),
                place,
                search.clone(),
                config,
                provider.clone(),
                Duration::from_secs(600),
            ));
            rt.block_on(here(stepper, &job, b.parallel))?;
        }
    }
    let items = rt.block_on(store.batch_items(&batch.batch_id, 0, batch.total))?;
    let mut all_ok = true;
    for item in &items {
        let output = item.output.clone().unwrap_or_else(|| json!(null));
        all_ok &= output["ok"] == json!(true);
        out::json(&output, b.pretty)?;
    }
    out::note(&format!("batch {}: {} inputs answered", batch.batch_id, items.len()));
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Answers every slice in this process, `parallel` at once.
async fn here(stepper: Arc<Stepper>, job: &BatchJob, parallel: usize) -> anyhow::Result<()> {
    let slices = job.slices();
    let cancel = CancellationToken::new();
    let mut running = tokio::task::JoinSet::new();
    let mut next = slices.into_iter();
    let by = format!("local:{}", std::process::id());
    loop {
        while running.len() < parallel.max(1) {
            let Some(slice) = next.next() else { break };
            let (stepper, cancel, by) = (Arc::clone(&stepper), cancel.clone(), by.clone());
            running.spawn(async move { stepper.slice(&slice, &by, cancel, false, &|_| {}).await });
        }
        let Some(done) = running.join_next().await else { return Ok(()) };
        if let Err(e) = done? {
            cancel.cancel();
            return Err(anyhow::anyhow!("{e}"));
        }
    }
}
