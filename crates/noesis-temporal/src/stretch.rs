//! One stretch of a stored run, driven headlessly: read from the store,
//! made drivable from its own record (workspace, rules, sandbox, MCP
//! servers, provider), stepped under its lease until it ends, pauses for
//! a decision or is cancelled. Nothing here knows Temporal: a worker's
//! activity is this plus heartbeats. A call that was running when an
//! earlier driver died comes back `interrupted` (the run's own resume),
//! never run again.

use std::sync::Arc;
use std::time::Duration;

use noesis_agent::events::Event;
use noesis_agent::{AgentRun, Decision, Outcome, Pending};
use noesis_config::{Config, ProviderArgs};
use noesis_host::drive::{Drive, Front};
use noesis_host::host::Recorded;
use noesis_host::launch::continued_flags;
use noesis_host::place::Place;
use noesis_host::provider::{Providers, with_text_tools};
use noesis_host::{Host, HostError, Reach};
use noesis_modules::search::SearchPath;
use noesis_runtime::CancellationToken;
use noesis_store::Store;

use noesis_runtime::RunOptions;
use noesis_runtime::compose::{ComposeOptions, SearchResolver, execute};

use crate::job::{Expiry, Slice, SliceDone, Stretch, provider_failed};

/// How long a worker's lease on a run holds without a heartbeat (renewed
/// every third of it): a worker on another machine that dies keeps its
/// runs from the others this long at most (one on this machine that is
/// gone is taken over at once).
pub const WORKER_LEASE_TTL: Duration = Duration::from_secs(10);

/// Why a stretch did not run to a pause or an end.
#[derive(Debug, thiserror::Error)]
pub enum StretchError {
    /// Worth trying again (another driver holds the run for now, a
    /// provider or the store failed on the way).
    #[error("{0}")]
    Retry(String),
    /// Never going to work here (no such run, a record this worker cannot
    /// provide): the run's workflow fails with this.
    #[error("{0}")]
    Refused(String),
}

impl StretchError {
    fn of(e: HostError) -> StretchError {
        match e {
            HostError::Refused(_) | HostError::UnknownTool { .. } | HostError::NotAllowed(_) | HostError::Config(_) => {
                StretchError::Refused(e.to_string())
            }
            other => StretchError::Retry(noesis_host::chain(&other)),
        }
    }
}

/// What every stretch on this worker shares: the store, the settings the
/// worker was started with, where modules are found.
pub struct Stepper {
    store: Arc<dyn Store>,
    place: Place,
    search: SearchPath,
    providers: Arc<Providers>,
    config: Config,
    tool_timeout: Duration,
}

impl Stepper {
    /// A stepper over `store` (the one `place` names), with the worker's
    /// `config` and provider `flags`.
    pub fn new(
        store: Arc<dyn Store>,
        place: Place,
        search: SearchPath,
        config: Config,
        flags: ProviderArgs,
        tool_timeout: Duration,
    ) -> Stepper {
        let providers = Arc::new(Providers::new(flags, config.clone()));
        Stepper { store, place, search, providers, config, tool_timeout }
    }

    /// The store runs are read from and kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Drives run `run_id` until it ends, pauses for a decision, or
    /// `cancel` stops it after the current step.
    pub async fn stretch(&self, run_id: &str, cancel: CancellationToken) -> Result<Stretch, StretchError> {
        let retry = |e: noesis_store::StoreError| StretchError::Retry(noesis_host::chain(&e));
        let stored = self
            .store
            .agent_state(run_id, None)
            .await
            .map_err(retry)?
            .ok_or_else(|| StretchError::Refused(format!("agent run {run_id} is not in this worker's store")))?;
        let mut run = AgentRun::from_json(&stored.state)
            .map_err(|e| StretchError::Refused(format!("agent run {run_id}: {e}")))?;
        noesis_host::rules::restore(&mut run);
        if let Some(done) = ended(&run) {
            return Ok(done);
        }
        if run.awaiting_approval() {
            // Still waiting: a decision signalled for another pause, or
            // this stretch re-dispatched after the run paused.
            return Ok(paused(&run));
        }
        run.resume();
        let flags = continued_flags(&run, self.providers.flags(), &noesis_config::env);
        let provider = self.providers.get(&flags, None).map_err(StretchError::of)?;
        let provider = with_text_tools(provider, &self.config);
        let recorded = Recorded::of(&run).map_err(StretchError::of)?;
        let project = Place { cwd: Some(recorded.workspace.clone()), ..self.place.clone() }
            .project()
            .map_err(StretchError::of)?;
        // The finished run is written as frames of its project.
        self.store.ensure_project(&project.project_id, &project.root.to_string_lossy()).await.map_err(retry)?;
        let project_id = recorded.project_id.clone().unwrap_or_else(|| project.project_id.clone());
        let host = Host {
            search: self.search.clone(),
            store: Arc::clone(&self.store),
            project,
            providers: Arc::clone(&self.providers),
            reach: Reach::Anywhere,
            note: None,
            home: self.place.home.clone(),
        };
        let equipped = host.equip(&run, provider).await.map_err(StretchError::of)?;
        let drive = Drive {
            host: &host,
            equipped: &equipped,
            project_id,
            tool_timeout: self.tool_timeout,
            cancel,
            from_step: Some(stored.step),
            holder: "worker",
            stream: false,
            lease_ttl: WORKER_LEASE_TTL,
        };
        let driven = noesis_host::drive::to_end(drive, &mut run, &Headless).await;
        if driven.is_err()
            && let Some(mcp) = &equipped.started
        {
            // to_end stops them when the drive went well.
            mcp.shutdown().await;
        }
        driven.map_err(StretchError::of)?;
        Ok(ended(&run).unwrap_or_else(|| paused(&run)))
    }
}

impl Stepper {
    /// Denies the calls run `e.run_id` waits on, with `e.message` for the
    /// model, if it still pauses at step `e.step` (a decision that came
    /// meanwhile wins): whether it denied them.
    pub async fn expire(&self, e: &Expiry) -> Result<bool, StretchError> {
        let retry = |e: noesis_store::StoreError| StretchError::Retry(noesis_host::chain(&e));
        let Some(stored) = self.store.agent_state(&e.run_id, None).await.map_err(retry)? else {
            return Err(StretchError::Refused(format!("agent run {} is not in this worker's store", e.run_id)));
        };
        let mut run = AgentRun::from_json(&stored.state)
            .map_err(|err| StretchError::Refused(format!("agent run {}: {err}", e.run_id)))?;
        if run.step != e.step || !run.awaiting_approval() {
            return Ok(false);
        }
        let message = e.message.clone();
        let deny = move |_: &noesis_agent::CallRecord| noesis_agent::Verdict::Deny { message: Some(message.clone()) };
        let decisions = noesis_host::runs::decisions(&run, None, None, &deny).map_err(StretchError::of)?;
        noesis_host::runs::decide(self.store.as_ref(), &stored.project_id, &mut run, &decisions)
            .await
            .map_err(StretchError::of)?;
        Ok(true)
    }

    /// Answers the inputs of `slice` that have no answer yet, one after
    /// another, each answer stored as it comes (kept only if the item
    /// still had none); `answered` hears each item's index. `by` names
    /// this worker in the store. Cancelled: stops before the next input,
    /// an input cut short left unanswered. With `retry_unavailable` an
    /// input the provider could not take ([`provider_failed`]) is left
    /// unanswered and the slice fails, to be tried again; without it that
    /// envelope is the answer (as `noesis run` would print it).
    pub async fn slice(
        &self,
        slice: &Slice,
        by: &str,
        cancel: CancellationToken,
        retry_unavailable: bool,
        answered: &(dyn Fn(i64) + Send + Sync),
    ) -> Result<SliceDone, StretchError> {
        let retry = |e: noesis_store::StoreError| StretchError::Retry(noesis_host::chain(&e));
        let id = &slice.batch_id;
        let batch = self
            .store
            .batch(id)
            .await
            .map_err(retry)?
            .ok_or_else(|| StretchError::Refused(format!("batch {id} is not in this worker's store")))?;
        let found = self
            .search
            .resolve(&batch.module)
            .map_err(|e| StretchError::Refused(format!("batch {id}: module `{}`: {e}", batch.module)))?;
        let module = Arc::new(
            found.load().map_err(|e| StretchError::Refused(format!("batch {id}: module `{}`: {e}", batch.module)))?,
        );
        let spec = |k: &str| batch.spec[k].as_str().map(str::to_owned);
        let flags = ProviderArgs { provider: spec("provider"), model: spec("model"), ..self.providers.flags().clone() };
        let tier = module.policy.tier.as_str();
        let provider = self.providers.get(&flags, Some((&module.name, Some(tier)))).map_err(StretchError::of)?;
        let resolver = SearchResolver::new(self.search.clone());
        let options = ComposeOptions {
            run: RunOptions {
                cancel: Some(cancel.clone()),
                prices: Some(noesis_host::provider::prices(&self.config)),
                ..RunOptions::default()
            },
            timeout: None,
            providers: None,
        };
        let items = self.store.batch_items(id, slice.from, slice.to).await.map_err(retry)?;
        let mut done = SliceDone::default();
        for item in items {
            if item.output.is_some() {
                done.already += 1;
                continue;
            }
            if cancel.is_cancelled() {
                return Err(StretchError::Retry(format!("batch {id}: stopped at input {}", item.idx)));
            }
            let record = execute(Arc::clone(&module), &resolver, provider.as_ref(), item.input, &options).await;
            if cancel.is_cancelled() {
                return Err(StretchError::Retry(format!("batch {id}: stopped at input {}", item.idx)));
            }
            if retry_unavailable && provider_failed(&record.envelope) {
                let why = record.envelope["error"]["message"].as_str().unwrap_or_default();
                return Err(StretchError::Retry(format!(
                    "batch {id}: input {}: the provider could not answer ({why}); the slice is tried again",
                    item.idx
                )));
            }
            let at = i64::try_from(noesis_host::runs::now_ms()).unwrap_or(i64::MAX);
            if self.store.answer_batch_item(id, item.idx, &record.envelope, by, at).await.map_err(retry)? {
                done.answered += 1;
            } else {
                done.already += 1;
            }
            answered(item.idx);
        }
        Ok(done)
    }
}

fn ended(run: &AgentRun) -> Option<Stretch> {
    match &run.outcome {
        None => None,
        Some(Outcome::Cancelled) => Some(Stretch::Cancelled { step: run.step }),
        Some(_) => Some(Stretch::Ended { status: run.status().to_owned(), step: run.step }),
    }
}

fn paused(run: &AgentRun) -> Stretch {
    let pending = run
        .calls
        .iter()
        .filter(|c| c.status == noesis_agent::CallStatus::AwaitingApproval)
        .map(|c| c.id.clone())
        .collect();
    Stretch::Paused { step: run.step, pending }
}

/// Nobody watches a worker's run: decisions are left to a person (the run
/// pauses), steps are in the store, warnings go to the worker's log.
struct Headless;

impl Front for Headless {
    fn event(&self, _event: &Event) {}

    fn decide(&self, _pending: &[Pending]) -> Result<Option<Vec<Decision>>, String> {
        Ok(None)
    }

    #[allow(clippy::print_stderr)] // the worker's log is its stderr
    fn warn(&self, message: &str) {
        eprintln!("{message}");
    }
}
