//! The Temporal side: the workflow of an agent run, the activity that
//! drives one stretch of it, a worker that polls for both, and the client
//! that submits runs, signals decisions, follows and cancels them.
//!
//! The mapping is coarse on purpose. One workflow per run; each stretch
//! between pauses is one activity that heartbeats while
//! [`crate::stretch::Stepper`] drives the unchanged loop with its store
//! checkpoints, model and tool calls inside it. When a worker dies the
//! engine times the activity out (no heartbeat) and hands it to another
//! worker, which resumes the run from its last checkpoint: finished calls
//! are reused, a call that was running comes back interrupted — none runs
//! twice. The run's lease fences the store, so a worker that was only
//! slow cannot write over the one that took over.
#![allow(unreachable_pub, missing_docs)] // the SDK's macros make public items of their own, undocumented

mod client;
mod worker;

pub use client::Cluster;
pub use worker::{WorkerSettings, run_worker};

use std::sync::Arc;
use std::time::Duration;

use noesis_runtime::CancellationToken;
use temporalio_common::RetryPolicy;
use temporalio_macros::{activities, workflow, workflow_methods};
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::{
    ActivityCancellationType, ActivityExecutionError, ActivityOptions, ApplicationFailure, SyncWorkflowContext,
    TimerResult, WorkflowContext, WorkflowContextView, WorkflowResult, WorkflowTermination,
};

use crate::job::{
    AgentJob, BatchDone, BatchJob, Expiry, Next, REFUSED, Slice, SliceDone, Stretch, expired_message, next,
};
use crate::stretch::{Stepper, StretchError};

/// The activities a worker offers, over its [`Stepper`].
pub struct AgentActivities {
    stepper: Arc<Stepper>,
}

/// How often a running stretch tells the engine it is alive.
fn beat_every(heartbeat_timeout: Option<Duration>) -> Duration {
    heartbeat_timeout.map_or(Duration::from_secs(1), |t| (t / 4).max(Duration::from_millis(100)))
}

#[activities]
impl AgentActivities {
    /// Drives the run until it ends, pauses or is cancelled, heartbeating
    /// meanwhile; a cancellation from the engine stops it after the
    /// current step (the run is left resumable, its state stored).
    #[activity(name = "noesis.agent.stretch")]
    pub async fn stretch(self: Arc<Self>, ctx: ActivityContext, run_id: String) -> Result<Stretch, ActivityError> {
        let cancel = CancellationToken::new();
        let driving = {
            let stepper = Arc::clone(&self.stepper);
            let (run_id, cancel) = (run_id.clone(), cancel.clone());
            tokio::spawn(async move { stepper.stretch(&run_id, cancel).await })
        };
        let (done, cancelled) = heartbeating(&ctx, &cancel, driving).await;
        let stretch = match done {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(failure(e)),
            Err(joined) => return Err(ApplicationFailure::new(format!("the stretch failed: {joined}")).into()),
        };
        if cancelled {
            return Err(ActivityError::cancelled());
        }
        Ok(stretch)
    }

    /// Denies the calls a paused run waited on too long.
    #[activity(name = "noesis.agent.expire")]
    pub async fn expire(self: Arc<Self>, _ctx: ActivityContext, expiry: Expiry) -> Result<bool, ActivityError> {
        self.stepper.expire(&expiry).await.map_err(failure)
    }
}

/// Keeps `work` running while heartbeating; a cancellation from the engine
/// cancels `cancel` and waits for `work` to stop. Whether it was cancelled.
async fn heartbeating<T>(
    ctx: &ActivityContext,
    cancel: &CancellationToken,
    work: tokio::task::JoinHandle<T>,
) -> (Result<T, tokio::task::JoinError>, bool) {
    tokio::pin!(work);
    let mut beat = tokio::time::interval(beat_every(ctx.info().heartbeat_timeout));
    let mut cancelled = false;
    let done = loop {
        tokio::select! {
            done = &mut work => break done,
            _ = beat.tick() => { let _ = ctx.record_heartbeat(()).await; }
            _ = ctx.cancelled(), if !cancelled => {
                cancelled = true;
                cancel.cancel();
            }
        }
    };
    (done, cancelled)
}

fn failure(e: StretchError) -> ActivityError {
    match e {
        StretchError::Refused(why) => ActivityError::application(
            ApplicationFailure::builder(why).type_name(REFUSED.to_owned()).non_retryable(true).build(),
        ),
        StretchError::Retry(why) => ApplicationFailure::new(why).into(),
    }
}

/// The activities of module batches, over the worker's [`Stepper`].
pub struct BatchActivities {
    stepper: Arc<Stepper>,
}

#[activities]
impl BatchActivities {
    /// Answers the inputs of one slice that have no answer yet.
    #[activity(name = "noesis.batch.slice")]
    pub async fn slice(self: Arc<Self>, ctx: ActivityContext, slice: Slice) -> Result<SliceDone, ActivityError> {
        let cancel = CancellationToken::new();
        let work = {
            let stepper = Arc::clone(&self.stepper);
            let cancel = cancel.clone();
            tokio::spawn(async move { stepper.slice(&slice, &crate::identity(), cancel, true, &|_| {}).await })
        };
        let (done, cancelled) = heartbeating(&ctx, &cancel, work).await;
        if cancelled {
            return Err(ActivityError::cancelled());
        }
        match done {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(failure(e)),
            Err(joined) => Err(ApplicationFailure::new(format!("the slice failed: {joined}")).into()),
        }
    }
}

/// The workflow of a module batch: every slice scheduled at once, the
/// workers' free slots deciding how many run together.
#[workflow]
#[derive(Default)]
pub struct BatchWorkflow;

#[workflow_methods]
impl BatchWorkflow {
    /// Answers every input of the job.
    #[run(name = "noesis.batch")]
    pub async fn run(ctx: &mut WorkflowContext<Self>, job: BatchJob) -> WorkflowResult<BatchDone> {
        let options = retried(job.heartbeat_timeout_ms, Duration::from_secs(24 * 3600));
        let slices: Vec<_> = job
            .slices()
            .into_iter()
            .map(|s| ctx.execute_activity(BatchActivities::slice, s, options.clone()))
            .collect();
        let mut done = BatchDone { total: job.total, ..BatchDone::default() };
        for r in temporalio_sdk::workflows::join_all(slices).await {
            match r {
                Ok(d) => {
                    done.answered += d.answered;
                    done.already += d.already;
                }
                Err(ActivityExecutionError::Cancelled(_)) => return Err(WorkflowTermination::cancelled()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }
}

/// The workflow of one agent run: stretches until the run ends, waiting
/// (holding no worker) for a decision whenever it pauses.
#[workflow]
#[derive(Default)]
pub struct AgentWorkflow {
    decided: u64,
}

fn stretch_options(job: &AgentJob) -> ActivityOptions {
    retried(job.heartbeat_timeout_ms, Duration::from_secs(7 * 24 * 3600))
}

/// An activity heard from every `heartbeat_ms`, retried without end (but a
/// refusal), waited for when cancelled.
fn retried(heartbeat_ms: u64, longest: Duration) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(longest)
        .heartbeat_timeout(Duration::from_millis(heartbeat_ms.max(500)))
        .cancellation_type(ActivityCancellationType::WaitCancellationCompleted)
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_millis(500))
                .backoff_coefficient(2.0)
                .maximum_interval(Duration::from_secs(5))
                .maximum_attempts(0)
                .non_retryable_error_types([REFUSED])
                .build(),
        )
        .build()
}

#[workflow_methods]
impl AgentWorkflow {
    /// Runs the job to its end.
    #[run(name = "noesis.agent")]
    pub async fn run(ctx: &mut WorkflowContext<Self>, job: AgentJob) -> WorkflowResult<Stretch> {
        loop {
            // A decision signalled while the stretch ran is for the pause it
            // ends in (a person can only decide on a stored pause, and the
            // stretch stores it before it returns): counted from here, it
            // is not waited for again.
            let before = ctx.state(|s| s.decided);
            let stretch =
                match ctx.execute_activity(AgentActivities::stretch, job.run_id.clone(), stretch_options(&job)).await {
                    Ok(s) => s,
                    Err(ActivityExecutionError::Cancelled(_)) => return Err(WorkflowTermination::cancelled()),
                    Err(e) => return Err(e.into()),
                };
            let step = match &stretch {
                Stretch::Paused { step, .. } => *step,
                _ => 0,
            };
            match next(stretch, before) {
                Next::Finish(s) => return Ok(s),
                Next::WaitForDecision { seen } => {
                    let Some(limit) = job.approval_timeout_ms else {
                        ctx.wait_condition(move |s: &Self| s.decided > seen).await?;
                        continue;
                    };
                    // A durable timer: nobody decided in time, the calls
                    // are denied and the run goes on.
                    let expired = temporalio_sdk::workflows::select! {
                        decided = ctx.wait_condition(move |s: &Self| s.decided > seen) => { decided?; false }
                        fired = ctx.timer(Duration::from_millis(limit)) => {
                            if fired == TimerResult::Cancelled {
                                return Err(WorkflowTermination::cancelled());
                            }
                            true
                        }
                    };
                    if expired {
                        let expiry = Expiry { run_id: job.run_id.clone(), step, message: expired_message(limit) };
                        let options = retried(job.heartbeat_timeout_ms, Duration::from_secs(300));
                        match ctx.execute_activity(AgentActivities::expire, expiry, options).await {
                            Ok(_) => {}
                            Err(ActivityExecutionError::Cancelled(_)) => return Err(WorkflowTermination::cancelled()),
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        }
    }

    /// The decisions a paused run waited for are in the store.
    #[signal(name = "decided")]
    pub fn decided(&mut self, _ctx: &mut SyncWorkflowContext<Self>, _nothing: ()) {
        self.decided += 1;
    }

    /// How many decisions were signalled.
    #[query(name = "decisions")]
    pub fn decisions(&self, _ctx: &WorkflowContextView) -> u64 {
        self.decided
    }
}
