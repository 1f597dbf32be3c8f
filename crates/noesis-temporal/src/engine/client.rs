//! The cluster as a front end sees it: submit a stored run, tell its
//! workflow a decision is stored, wait for it to finish, cancel it.

use std::str::FromStr;

use temporalio_client::errors::WorkflowGetResultError;
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, Url, WorkflowCancelOptions, WorkflowGetResultOptions,
    WorkflowIdConflictPolicy, WorkflowIdReusePolicy, WorkflowSignalOptions, WorkflowStartOptions,
};

use super::{AgentWorkflow, BatchWorkflow};
use crate::TemporalError;
use crate::job::{AgentJob, BatchDone, BatchJob, Stretch, agent_workflow_id, batch_workflow_id, endpoint};

/// A connection to a Temporal cluster's namespace.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
}

impl Cluster {
    /// Connects to the frontend at `address` (`HOST:PORT` or a URL).
    pub async fn connect(address: &str, namespace: &str) -> Result<Cluster, TemporalError> {
        let url = endpoint(address).map_err(TemporalError::Address)?;
        let url = Url::from_str(&url).map_err(|e| TemporalError::Address(format!("`{address}`: {e}")))?;
        let options = ConnectionOptions::new(url).identity(crate::identity()).build();
        let connection = Connection::connect(options)
            .await
            .map_err(|e| TemporalError::Connect { address: address.to_owned(), why: e.to_string() })?;
        let client = Client::new(connection, ClientOptions::new(namespace.to_owned()).build())
            .map_err(|e| TemporalError::Connect { address: address.to_owned(), why: e.to_string() })?;
        Ok(Cluster { client })
    }

    /// The SDK's client (a worker polls through it).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts the workflow of stored run `job.run_id` on `task_queue`; a
    /// run whose workflow is running already is refused.
    pub async fn submit_agent(&self, job: &AgentJob, task_queue: &str) -> Result<(), TemporalError> {
        self.client
            .start_workflow(AgentWorkflow::run, job.clone(), start(task_queue, agent_workflow_id(&job.run_id)))
            .await
            .map_err(|e| TemporalError::Submit { what: format!("agent run {}", job.run_id), why: e.to_string() })?;
        Ok(())
    }

    /// Starts the workflow of stored batch `job.batch_id` on `task_queue`.
    pub async fn submit_batch(&self, job: &BatchJob, task_queue: &str) -> Result<(), TemporalError> {
        self.client
            .start_workflow(BatchWorkflow::run, job.clone(), start(task_queue, batch_workflow_id(&job.batch_id)))
            .await
            .map_err(|e| TemporalError::Submit { what: format!("batch {}", job.batch_id), why: e.to_string() })?;
        Ok(())
    }

    /// Waits for batch `batch_id`'s workflow to finish.
    pub async fn wait_batch(&self, batch_id: &str) -> Result<BatchDone, TemporalError> {
        let handle = self.client.get_workflow_handle::<BatchWorkflow>(batch_workflow_id(batch_id));
        handle.get_result(WorkflowGetResultOptions::default()).await.map_err(|e| TemporalError::Finished {
            what: format!("batch {batch_id}"),
            why: format!("its workflow failed: {}", noesis_host::chain(&e)),
        })
    }

    /// Tells run `run_id`'s workflow that the decisions it waits for are
    /// stored.
    pub async fn decided(&self, run_id: &str) -> Result<(), TemporalError> {
        let handle = self.client.get_workflow_handle::<AgentWorkflow>(agent_workflow_id(run_id));
        handle
            .signal(AgentWorkflow::decided, (), WorkflowSignalOptions::default())
            .await
            .map_err(|e| TemporalError::Signal { run_id: run_id.to_owned(), why: e.to_string() })
    }

    /// Waits for run `run_id`'s workflow to finish: where the run ended.
    pub async fn wait(&self, run_id: &str) -> Result<Stretch, TemporalError> {
        let handle = self.client.get_workflow_handle::<AgentWorkflow>(agent_workflow_id(run_id));
        handle.get_result(WorkflowGetResultOptions::default()).await.map_err(|e| {
            let why = match &e {
                WorkflowGetResultError::Cancelled { .. } => "its workflow was cancelled".to_owned(),
                WorkflowGetResultError::Terminated { .. } => "its workflow was terminated".to_owned(),
                WorkflowGetResultError::NotFound(_) => "no workflow for it on this cluster".to_owned(),
                other => format!("its workflow failed: {}", noesis_host::chain(other)),
            };
            TemporalError::Finished { what: format!("agent run {run_id}"), why }
        })
    }

    /// Cancels run `run_id`'s workflow: the run stops after its current
    /// step and is left resumable.
    pub async fn cancel(&self, run_id: &str) -> Result<(), TemporalError> {
        let handle = self.client.get_workflow_handle::<AgentWorkflow>(agent_workflow_id(run_id));
        handle
            .cancel(WorkflowCancelOptions::default())
            .await
            .map_err(|e| TemporalError::Signal { run_id: run_id.to_owned(), why: e.to_string() })
    }
}

/// How every workflow is started: one per id at a time (a running one is
/// refused), and a workflow task left on a dead worker handed on within 3 s.
fn start(task_queue: &str, workflow_id: String) -> WorkflowStartOptions {
    WorkflowStartOptions::new(task_queue.to_owned(), workflow_id)
        .id_reuse_policy(WorkflowIdReusePolicy::AllowDuplicate)
        .id_conflict_policy(WorkflowIdConflictPolicy::Fail)
        .task_timeout(std::time::Duration::from_secs(3))
        .build()
}
