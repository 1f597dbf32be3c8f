//! Runs on a Temporal cluster from the command line: a stored run
//! submitted and followed through the store (where its workers keep every
//! step), and the workflow told when a paused run's decisions are stored.
//! Built only with the `temporal` feature; without it a cluster run is
//! refused with how to get one.

use std::process::ExitCode;

use noesis_agent::AgentRun;
use noesis_temporal::job::ClusterRecord;

/// Why a cluster command cannot run in this build.
#[cfg_attr(feature = "temporal", allow(dead_code))]
pub(crate) const NOT_BUILT: &str = "this noesis was built without Temporal support; build it with \
     `cargo install --path crates/noesis-cli --features temporal` (see the README's \"Running on many machines\")";

/// Where a run or a batch goes, as the flags say it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OnArgs {
    /// Run on a Temporal cluster's workers (`noesis worker`) instead of
    /// here: HOST:PORT of its frontend. The run is stored here, so the
    /// workers must use the same store (NOESIS_STORE) and reach the
    /// workspace; followed until it ends (or pauses) unless --detach.
    #[arg(long, value_name = "ADDR")]
    on: Option<String>,
    /// The cluster's namespace (with --on).
    #[arg(long, value_name = "NAME", requires = "on", default_value = noesis_temporal::job::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The task queue its workers take work from (with --on).
    #[arg(long, value_name = "QUEUE", requires = "on", default_value = noesis_temporal::job::DEFAULT_TASK_QUEUE)]
    task_queue: String,
    /// Print the id and return once it is submitted (with --on).
    #[arg(long, requires = "on")]
    detach: bool,
    /// Deny the calls a cluster run waits on when nobody decides within
    /// this many seconds, and go on (with --on; default: wait as long as it
    /// takes).
    #[arg(long, value_name = "SECS", requires = "on")]
    approval_timeout: Option<u64>,
}

impl OnArgs {
    /// Where to submit, when --on is given.
    pub(crate) fn target(&self) -> Option<Target> {
        self.on.as_ref().map(|address| Target {
            address: address.clone(),
            namespace: self.namespace.clone(),
            task_queue: self.task_queue.clone(),
            detach: self.detach,
            approval_timeout: self.approval_timeout.map(std::time::Duration::from_secs),
        })
    }
}

/// Where a run goes: the cluster's address and names.
#[cfg_attr(not(feature = "temporal"), allow(dead_code))]
pub(crate) struct Target {
    pub(crate) address: String,
    pub(crate) namespace: String,
    pub(crate) task_queue: String,
    pub(crate) detach: bool,
    pub(crate) approval_timeout: Option<std::time::Duration>,
}

/// Tells the workflow of cluster run `run` (if it is one) that the
/// decisions it waits for are stored.
pub(crate) fn decided(rt: &tokio::runtime::Runtime, run: &AgentRun) -> anyhow::Result<()> {
    let Some(record) = ClusterRecord::of(&run.host).map_err(anyhow::Error::msg)? else { return Ok(()) };
    signal(rt, run, &record)
}

#[cfg(not(feature = "temporal"))]
fn signal(_rt: &tokio::runtime::Runtime, run: &AgentRun, record: &ClusterRecord) -> anyhow::Result<()> {
    anyhow::bail!(
        "agent run {} runs on the Temporal cluster at {}: the decision is stored, but its workflow was not told; {NOT_BUILT}",
        run.id,
        record.address
    )
}

#[cfg(feature = "temporal")]
fn signal(rt: &tokio::runtime::Runtime, run: &AgentRun, record: &ClusterRecord) -> anyhow::Result<()> {
    rt.block_on(async {
        let cluster = noesis_temporal::engine::Cluster::connect(&record.address, &record.namespace).await?;
        cluster.decided(&run.id).await
    })
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\nthe decision is stored; once the cluster answers, `noesis agent approve {}` again tells it",
            run.id
        )
    })
}

/// Cancels the workflow of cluster run `run`.
#[cfg(not(feature = "temporal"))]
pub(crate) fn cancel(_rt: &tokio::runtime::Runtime, run: &AgentRun, record: &ClusterRecord) -> anyhow::Result<()> {
    anyhow::bail!("agent run {} runs on the Temporal cluster at {}; {NOT_BUILT}", run.id, record.address)
}

/// Cancels the workflow of cluster run `run`.
#[cfg(feature = "temporal")]
pub(crate) fn cancel(rt: &tokio::runtime::Runtime, run: &AgentRun, record: &ClusterRecord) -> anyhow::Result<()> {
    rt.block_on(async {
        let cluster = noesis_temporal::engine::Cluster::connect(&record.address, &record.namespace).await?;
        cluster.cancel(&run.id).await
    })?;
    Ok(())
}

/// Submits stored run `run` (its record already names `target`) and,
/// unless detached, follows it until it ends or pauses.
#[cfg(not(feature = "temporal"))]
pub(crate) fn submit(
    _rt: &tokio::runtime::Runtime,
    _store: &dyn noesis_store::Store,
    _run: &AgentRun,
    _target: &Target,
    _json: bool,
    _quiet: bool,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("--on: {NOT_BUILT}")
}

/// The record a run submitted to `target` keeps.
pub(crate) fn record(run_id: &str, target: &Target) -> ClusterRecord {
    ClusterRecord {
        address: target.address.clone(),
        namespace: target.namespace.clone(),
        task_queue: target.task_queue.clone(),
        workflow_id: noesis_temporal::job::agent_workflow_id(run_id),
    }
}

/// Submits stored run `run` (its record already names `target`) and,
/// unless detached, follows it until it ends or pauses.
#[cfg(feature = "temporal")]
pub(crate) fn submit(
    rt: &tokio::runtime::Runtime,
    store: &dyn noesis_store::Store,
    run: &AgentRun,
    target: &Target,
    json: bool,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    use noesis_temporal::engine::Cluster;
    use noesis_temporal::job::AgentJob;

    use crate::out;

    let cluster = rt.block_on(async {
        let cluster = Cluster::connect(&target.address, &target.namespace).await?;
        let job = AgentJob {
            approval_timeout_ms: target.approval_timeout.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ..AgentJob::new(&run.id)
        };
        cluster.submit_agent(&job, &target.task_queue).await?;
        Ok::<_, noesis_temporal::TemporalError>(cluster)
    })?;
    if !quiet {
        out::note(&format!("run {} submitted to {} (task queue {})", run.id, target.address, target.task_queue));
    }
    if target.detach {
        out::data(&run.id)?;
        return Ok(ExitCode::SUCCESS);
    }
    let followed = rt.block_on(follow(store, &cluster, &run.id, quiet))?;
    crate::cmd::agent::report(&followed, json)?;
    Ok(crate::cmd::agent::exit_code(&followed))
}

/// Reads the run from the store as its workers step it, showing each new
/// call, until it ends or waits for a decision; a workflow that fails
/// (a worker refused the run) ends the wait with its reason.
#[cfg(feature = "temporal")]
async fn follow(
    store: &dyn noesis_store::Store,
    cluster: &noesis_temporal::engine::Cluster,
    run_id: &str,
    quiet: bool,
) -> anyhow::Result<AgentRun> {
    use crate::out;

    let finished = cluster.wait(run_id);
    tokio::pin!(finished);
    let mut shown_calls = 0;
    let mut shown_step = None;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    let mut workflow_done = false;
    loop {
        tokio::select! {
            ended = &mut finished, if !workflow_done => {
                workflow_done = true;
                ended?;
            }
            _ = tick.tick() => {}
        }
        let Some(stored) = store.agent_state(run_id, None).await? else {
            anyhow::bail!("agent run {run_id} is gone from the store");
        };
        if shown_step == Some(stored.step) && !workflow_done {
            continue;
        }
        shown_step = Some(stored.step);
        let run = AgentRun::from_json(&stored.state).map_err(|e| anyhow::anyhow!("agent run {run_id}: {e}"))?;
        if !quiet {
            for c in run.calls.iter().skip(shown_calls) {
                out::note(&format!("  {} {}", c.tool, noesis_agent::summary::short_args(&c.arguments)));
            }
        }
        shown_calls = run.calls.len();
        if run.outcome.is_some() || run.awaiting_approval() || workflow_done {
            return Ok(run);
        }
    }
}

/// Submits stored batch `job` to the cluster and, unless detached, waits
/// for its answers, showing progress; `false` when detached (the batch's
/// id is printed).
#[cfg(not(feature = "temporal"))]
pub(crate) fn run_batch(
    _rt: &tokio::runtime::Runtime,
    _store: &dyn noesis_store::Store,
    _job: &noesis_temporal::job::BatchJob,
    _target: &Target,
) -> anyhow::Result<bool> {
    anyhow::bail!("--on: {NOT_BUILT}")
}

/// Submits stored batch `job` to the cluster and, unless detached, waits
/// for its answers, showing progress; `false` when detached (the batch's
/// id is printed).
#[cfg(feature = "temporal")]
pub(crate) fn run_batch(
    rt: &tokio::runtime::Runtime,
    store: &dyn noesis_store::Store,
    job: &noesis_temporal::job::BatchJob,
    target: &Target,
) -> anyhow::Result<bool> {
    use noesis_temporal::engine::Cluster;

    use crate::out;

    let cluster = rt.block_on(async {
        let cluster = Cluster::connect(&target.address, &target.namespace).await?;
        cluster.submit_batch(job, &target.task_queue).await?;
        Ok::<_, noesis_temporal::TemporalError>(cluster)
    })?;
    out::note(&format!(
        "batch {} ({} inputs) submitted to {} (task queue {})",
        job.batch_id, job.total, target.address, target.task_queue
    ));
    if target.detach {
        out::data(&job.batch_id)?;
        return Ok(false);
    }
    rt.block_on(async {
        let finished = cluster.wait_batch(&job.batch_id);
        tokio::pin!(finished);
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
        let mut shown = -1;
        loop {
            tokio::select! {
                done = &mut finished => {
                    done?;
                    return anyhow::Ok(());
                }
                _ = tick.tick() => {
                    let answered = store.batch_answered(&job.batch_id).await?;
                    if answered != shown && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                        out::note(&format!("  {answered}/{} answered", job.total));
                    }
                    shown = answered;
                }
            }
        }
    })?;
    Ok(true)
}
