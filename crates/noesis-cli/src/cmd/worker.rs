//! `noesis worker`: drives the runs submitted to a Temporal cluster
//! (`noesis agent … --on ADDR`) from the store this process uses, until
//! Ctrl-C or SIGTERM (then it lets what it drives finish, within a grace
//! period; what does not finish is resumed by another worker).

use std::process::ExitCode;

use noesis_modules::search::SearchPath;

use crate::provider::ProviderArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The Temporal frontend: HOST:PORT (or a URL).
    #[arg(long, value_name = "ADDR", env = "NOESIS_TEMPORAL")]
    temporal: String,
    /// The Temporal namespace.
    #[arg(long, value_name = "NAME", default_value = noesis_temporal::job::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The task queue to take runs from.
    #[arg(long, value_name = "QUEUE", default_value = noesis_temporal::job::DEFAULT_TASK_QUEUE)]
    task_queue: String,
    /// Most runs driven at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,
    /// Seconds one tool call may take (see `agent --tool-timeout`).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    tool_timeout: u64,
    /// Seconds a stopping worker lets its runs go on before it leaves them
    /// to another worker.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    grace: u64,
    #[command(flatten)]
    provider: ProviderArgs,
}

#[cfg(not(feature = "temporal"))]
pub(crate) fn run(_search: &SearchPath, _a: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{}", crate::cluster::NOT_BUILT)
}

#[cfg(feature = "temporal")]
pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    use std::sync::Arc;
    use std::time::Duration;

    use noesis_runtime::CancellationToken;
    use noesis_temporal::engine::{WorkerSettings, run_worker};
    use noesis_temporal::stretch::Stepper;

    use crate::out;

    let config = crate::config::load(&crate::provider::env, &std::env::current_dir()?)?.config;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let place = crate::memory::place();
    let store = rt.block_on(place.open())?;
    let stepper = Arc::new(Stepper::new(
        Arc::from(store),
        place,
        search.clone(),
        config,
        a.provider.clone(),
        Duration::from_secs(a.tool_timeout),
    ));
    let settings = WorkerSettings {
        address: a.temporal.clone(),
        namespace: a.namespace.clone(),
        task_queue: a.task_queue.clone(),
        concurrency: a.concurrency,
        grace: Duration::from_secs(a.grace),
    };
    let stop = CancellationToken::new();
    rt.block_on(async {
        let token = stop.clone();
        tokio::spawn(async move {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            out::note("stopping: runs in hand get the grace period, then go to another worker");
            token.cancel();
        });
        out::note(&format!(
            "worker {} on {} (namespace {}, task queue {}, {} at once)",
            noesis_temporal::identity(),
            settings.address,
            settings.namespace,
            settings.task_queue,
            settings.concurrency.max(1)
        ));
        run_worker(&settings, stepper, stop).await
    })?;
    Ok(ExitCode::SUCCESS)
}
