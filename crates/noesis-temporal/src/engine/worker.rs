//! A worker: polls one task queue for agent workflows and stretches, at
//! most `concurrency` stretches at once, until it is told to stop (then it
//! finishes what it holds, within a grace period).

use std::sync::Arc;
use std::time::Duration;

use noesis_runtime::CancellationToken;
use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder};
use temporalio_sdk::runtime::{PollerBehavior, RuntimeOptions};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

use super::{AgentActivities, AgentWorkflow, BatchActivities, BatchWorkflow, Cluster};
use crate::TemporalError;
use crate::stretch::Stepper;

/// How a worker joins a cluster.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The Temporal frontend (`HOST:PORT` or a URL).
    pub address: String,
    /// Its namespace.
    pub namespace: String,
    /// The task queue to poll.
    pub task_queue: String,
    /// Most stretches driven at once.
    pub concurrency: usize,
    /// How long a stopping worker lets its stretches finish before they
    /// are cancelled (and left resumable for another worker).
    pub grace: Duration,
}

/// Runs a worker until `stop` is cancelled, then shuts it down. Must be
/// awaited on the thread that runs it (the SDK's workflows are not
/// `Send`): `block_on` it, do not spawn it.
pub async fn run_worker(
    settings: &WorkerSettings,
    stepper: Arc<Stepper>,
    stop: CancellationToken,
) -> Result<(), TemporalError> {
    let runtime = Runtime::from_current_tokio(RuntimeOptions::default())
        .map_err(|e| TemporalError::Worker(format!("the Temporal runtime: {e}")))?;
    let cluster = Cluster::connect(&settings.address, &settings.namespace).await?;
    let concurrency = settings.concurrency.max(1);
    let tuner = TunerHolder::builder()
        .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(concurrency.max(2) * 2))
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(concurrency))
        .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .build();
    let options = WorkerOptions::new(settings.task_queue.clone())
        .tuner(tuner)
        // A workflow task left sticky on a dead worker waits this long
        // before any worker may take it (the SDK's 10 s delayed takeover).
        .sticky_queue_schedule_to_start_timeout(Duration::from_secs(2))
        // Heartbeats carry cancellations to a stretch: sent at least every
        // second (the SDK's default throttle is most of the heartbeat
        // timeout), a cancelled run stops within about a second.
        .max_heartbeat_throttle_interval(Duration::from_secs(1))
        .default_heartbeat_throttle_interval(Duration::from_secs(1))
        .workflow_task_poller_behavior(PollerBehavior::SimpleMaximum(2))
        .activity_task_poller_behavior(PollerBehavior::SimpleMaximum(concurrency.clamp(1, 4)))
        .graceful_shutdown_period(settings.grace)
        .register_workflow::<AgentWorkflow>()
        .map_err(|e| TemporalError::Worker(format!("registering the agent workflow: {e}")))?
        .register_workflow::<BatchWorkflow>()
        .map_err(|e| TemporalError::Worker(format!("registering the batch workflow: {e}")))?
        .register_activities(AgentActivities { stepper: Arc::clone(&stepper) })
        .register_activities(BatchActivities { stepper })
        .build();
    let mut worker = Worker::new(&runtime, cluster.client().clone(), options)
        .map_err(|e| TemporalError::Worker(format!("starting the worker: {e}")))?;
    let shutdown = worker.shutdown_handle();
    let watcher = tokio::spawn(async move {
        stop.cancelled().await;
        shutdown();
    });
    let ran = worker.run().await;
    watcher.abort();
    ran.map_err(|e| TemporalError::Worker(format!("the worker stopped: {e}")))
}
