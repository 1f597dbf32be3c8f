//! The run supervisor: agent runs that outlive the request that started
//! them, for any front end (the HTTP server, the MCP server, the dashboard).
//!
//! [`AgentRuns`] owns the live runs: each is an agent on the supervisor's
//! [`AgentRuntime`] (named `run:{id}`, on its control topic
//! `agents.control.{id}`) whose one `drive` event drives it (through the
//! [`Driver`]) to its end, checkpointing every change through the [`AgentHost`] a
//! front end provides (provider, tools, store), and publishes each step on
//! the [`EventBus`] (topic `agents.runs.{id}`) and in the run's event log,
//! which late readers follow from any point ([`AgentRuns::events`]). A run
//! waiting for approval waits in its task for a decision or a cancel.
//! [`AgentRuns::resume_unfinished`] continues, when a server starts, every
//! run its last process left running: finished calls are kept, never run
//! twice.
//!
//! The operator's [`RunsPolicy`] bounds all of it: without `http` clients
//! may not start or steer runs ([`AGENTS_OFF`]); at most `max_runs` runs
//! are live (a start beyond is [`Refusal::Busy`]); every run is clamped to
//! the [`Ceiling`] however its host made it, so a request can narrow the
//! approval policy and limits, never widen them.
//!
//! Architecture invariant: no HTTP here — refusals are [`Refusal`]s that
//! each front end maps to its own status codes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use noesis_llm::{ChatResponse, Provider};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::events::{
    AgentAction, AgentBehavior, AgentRuntime, AgentState, Event, EventBus, EventLog, Subscription, outcome_event,
    run_topic,
};
use crate::{Action, AgentRun, Decision, Driver, Pending, Toolbox};

mod admission;

pub use admission::{Ceiling, DEFAULT_MAX_RUNS, RETRY_AFTER_SECS, RunsPolicy, parse_approval, stricter};

/// Why the supervisor refused: each front end says it its own way (an
/// HTTP status, a page, a tool error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request is wrong (400).
    BadRequest,
    /// As many runs are live as the operator allows (429, retry later).
    Busy,
    /// The run is not in a state for this (409): not live, live already,
    /// finished, driven by another process, or not drivable here.
    Conflict,
    /// No such run (404).
    NotFound,
    /// The store failed (500).
    Failed,
}

/// A refusal and the message for the person.
pub type Refused = (Refusal, String);

/// Events a run's log keeps for late readers; older ones are dropped (a
/// reader resuming before them gets a `gap` event).
const EVENT_LOG: usize = 10_000;
/// Finished runs whose event logs are kept (ids are UUIDv7: the map's
/// order is their age).
const KEPT_LOGS: usize = 256;

/// What a client asks for when it starts a run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRequest {
    /// What the agent should do.
    pub task: String,
    /// `react` (default), `single-shot` or `chain-of-thought`.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Offer only these tools (default: all).
    #[serde(default)]
    pub tools: Vec<String>,
    /// `ask` (default: calls that change anything wait for
    /// `POST …/approvals`), `auto` or `never`.
    #[serde(default)]
    pub approve: Option<String>,
    /// Instructions before the task.
    #[serde(default)]
    pub system: Option<String>,
    /// The provider (among those the server allows).
    #[serde(default)]
    pub provider: Option<String>,
    /// The model.
    #[serde(default)]
    pub model: Option<String>,
    /// Limits.
    #[serde(default)]
    pub limits: RequestLimits,
    /// Critique each answer and go on while the goal is not achieved.
    #[serde(default)]
    pub reflect: bool,
    /// Rules of this run's own, on top of the operator's: they can only
    /// narrow (see [`RequestPermissions`]).
    #[serde(default)]
    pub permissions: Option<RequestPermissions>,
    /// A JSON Schema the final answer must validate against; the outcome
    /// then carries the validated object as `output`.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Stream the model's replies: their text comes as `text_delta`
    /// events while it is written.
    #[serde(default)]
    pub stream: bool,
}

/// Permission rules a client adds to its run (`{"allow": [], "ask": [],
/// "deny": []}`, written as in `[permissions]`). They form a narrowing
/// layer: `deny` and `ask` apply, `allow` admits nothing the operator's
/// rules do not.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestPermissions {
    /// Accepted for the same rule files everywhere; widens nothing.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Ask a person first.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Refuse.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl RequestPermissions {
    /// The rules as a narrowing layer; a rule that does not parse is an
    /// error naming its field (`permissions.deny[0]`).
    pub fn layer(&self) -> Result<crate::Layer, crate::RuleError> {
        let mut layer = crate::Layer::narrowing("request");
        for (effect, rules) in
            [(crate::Effect::Allow, &self.allow), (crate::Effect::Ask, &self.ask), (crate::Effect::Deny, &self.deny)]
        {
            for (i, rule) in rules.iter().enumerate() {
                layer.add(effect, rule, &format!("permissions.{}[{i}]", effect.as_str()))?;
            }
        }
        Ok(layer)
    }
}

/// Limits a client may set on its run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLimits {
    /// Model calls.
    pub max_turns: Option<u32>,
    /// Tool calls.
    pub max_tool_calls: Option<u32>,
    /// Seconds since the start.
    pub max_seconds: Option<u64>,
    /// Input plus output tokens.
    pub max_tokens: Option<u64>,
    /// US dollars.
    pub max_cost_usd: Option<f64>,
}

/// What the server needs from its host to run agents. Errors are messages
/// for the client (no secrets in them).
#[async_trait::async_trait]
pub trait AgentHost: Send + Sync + 'static {
    /// A new run `id` for `request`, its config and host data set; an error
    /// is the client's mistake (400).
    fn create(&self, id: &str, request: &AgentRequest) -> Result<AgentRun, String>;
    /// The model and the tools for `run` (new or continued).
    async fn equip(&self, run: &AgentRun) -> Result<(Arc<dyn Provider>, Arc<Toolbox>), String>;
    /// Stores `run` as it is now.
    async fn save(&self, run: &AgentRun) -> Result<(), String>;
    /// A stored run.
    async fn load(&self, id: &str) -> Result<Option<AgentRun>, String>;
    /// The stored runs, most recent first.
    async fn list(&self, limit: u32) -> Result<Vec<Value>, String>;
    /// Runs a previous server left unfinished (running or awaiting
    /// approval) that this one may drive now.
    async fn unfinished(&self) -> Result<Vec<String>, String>;
    /// Whether stored run `id` may be driven here: false while another
    /// process drives it.
    async fn claim(&self, _id: &str) -> Result<bool, String> {
        Ok(true)
    }
    /// Whether this host can provide what stored `run` recorded (its
    /// workspace, its MCP servers); the refusal says where it can go on.
    /// Asked before a stored run is resumed, so a run that cannot go on
    /// here is left as it is.
    fn check(&self, _run: &AgentRun) -> Result<(), String> {
        Ok(())
    }
    /// Chooses each call's provider by its role (`None`: the equipped
    /// provider answers every call).
    fn router(&self, _provider: &Arc<dyn Provider>) -> Option<Arc<dyn crate::ModelRouter>> {
        None
    }
    /// Dollars for a reply.
    fn price(&self, _reply: &ChatResponse) -> f64 {
        0.0
    }
    /// The price table the run's meter estimates calls with (and its
    /// sub-agents and module runs are priced by); the built-in table when
    /// `None`.
    fn prices(&self) -> Option<Arc<noesis_llm::PriceTable>> {
        None
    }
    /// Called once a run is done (to record frames, say).
    async fn finished(&self, _run: &mut AgentRun) {}
    /// Takes run `id` for this server before it is stepped (its lease in
    /// the store); refused with who holds it. The token is cancelled when
    /// another driver takes the run over: the drive stops.
    async fn hold(&self, _id: &str) -> Result<CancellationToken, String> {
        Ok(CancellationToken::new())
    }
    /// Gives run `id` up once its drive ended.
    async fn release(&self, _id: &str) {}
    /// Keeps events of run `id` under the ids they are streamed with, before
    /// any client sees them, so a client that reconnects after a restart
    /// gets exactly what it missed.
    async fn record_events(&self, _id: &str, _events: &[Event]) -> Result<(), String> {
        Ok(())
    }
    /// Run `id`'s kept events after id `after`, at most `limit`.
    async fn recorded_events(&self, _id: &str, _after: u64, _limit: u32) -> Result<Vec<Event>, String> {
        Ok(Vec::new())
    }
    /// The id of run `id`'s last kept event (0: none): its stream goes on
    /// from there.
    async fn last_event(&self, _id: &str) -> Result<u64, String> {
        Ok(0)
    }
}

/// The kind of the event that ends a run's events on the bus (its log
/// closes there; the log does not keep it).
pub const LOG_END: &str = "log_end";

/// Copies run `id`'s events from the bus into its log until its end
/// marker, numbering them after `last` and having the host keep them
/// before they are streamed (a batch of what has come at once per write).
async fn log_events(host: Arc<dyn AgentHost>, mut events: Subscription, live: Arc<Live>, id: String, last: u64) {
    let mut next = last;
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        while let Some(e) = events.try_recv() {
            batch.push(e);
        }
        let end = batch.iter().position(|e| e.kind == LOG_END && e.correlation_id == id);
        batch.truncate(end.unwrap_or(batch.len()));
        for e in &mut batch {
            next += 1;
            e.id = next;
        }
        // A store that fails does not silence the run: its stream goes on,
        // only a reconnect after a restart could miss these.
        let _ = host.record_events(&id, &batch).await;
        for e in batch {
            live.log.push_numbered(e);
        }
        if end.is_some() {
            break;
        }
    }
    live.close();
}

/// A decision request from the client, answered by the run's task.
type Decide = (Vec<Decision>, oneshot::Sender<Result<(), String>>);

struct Live {
    log: Arc<EventLog>,
    cancel: CancellationToken,
    decide: mpsc::Sender<Decide>,
    pending: Mutex<Vec<Pending>>,
}

impl Live {
    fn push(&self, event: Event) {
        self.log.push(event);
    }

    fn close(&self) {
        self.log.close();
    }
}

/// The live agent runs of a server.
pub struct AgentRuns {
    host: Arc<dyn AgentHost>,
    bus: EventBus,
    live: Mutex<BTreeMap<String, Arc<Live>>>,
    /// Cancelled when the server stops: runs stop as cancelled, resumable.
    stop: CancellationToken,
    /// What drives the live runs: one agent per run.
    runtime: AgentRuntime,
    tool_timeout: Duration,
    policy: RunsPolicy,
    /// One permit per live run (`policy.max_runs`).
    slots: Arc<Semaphore>,
}

/// What a client is told when the HTTP routes may not start or steer runs.
pub const AGENTS_OFF: &str =
    "agent runs over HTTP are off on this server: its operator starts it with --agents to allow them";

impl AgentRuns {
    /// Runs through `host`, publishing on `bus`, under the default
    /// [`RunsPolicy`] (HTTP clients may not start runs).
    pub fn new(host: Arc<dyn AgentHost>, bus: EventBus) -> Arc<AgentRuns> {
        AgentRuns::with_policy(host, bus, RunsPolicy::default())
    }

    /// Runs through `host`, publishing on `bus`, under `policy`.
    pub fn with_policy(host: Arc<dyn AgentHost>, bus: EventBus, policy: RunsPolicy) -> Arc<AgentRuns> {
        let slots = Arc::new(Semaphore::new(policy.max_runs.max(1)));
        Arc::new(AgentRuns {
            host,
            runtime: AgentRuntime::new(bus.clone()),
            bus,
            live: Mutex::new(BTreeMap::new()),
            stop: CancellationToken::new(),
            tool_timeout: crate::TOOL_TIMEOUT,
            policy,
            slots,
        })
    }

    /// Whether clients of the HTTP routes and pages may start, decide,
    /// cancel and resume runs (`serve --agents`).
    pub fn serves_http(&self) -> bool {
        self.policy.http
    }

    /// A slot for one more live run, or the refusal (429).
    fn slot(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Arc::clone(&self.slots).try_acquire_owned().map_err(|_| {
            (
                Refusal::Busy,
                format!(
                    "{} agent runs are live on this server, its most (--max-runs); try again when one ends",
                    self.policy.max_runs.max(1)
                ),
            )
        })
    }

    /// The bus runs publish on.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// The run's live state while its task runs (a finished run's log
    /// stays readable through [`AgentRuns::log`]).
    fn live(&self, id: &str) -> Option<Arc<Live>> {
        self.log(id).filter(|l| !l.log.is_closed())
    }

    fn log(&self, id: &str) -> Option<Arc<Live>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }

    /// Starts a new run; its id.
    pub async fn start(self: &Arc<Self>, request: AgentRequest) -> Result<String, Refused> {
        if request.task.trim().is_empty() {
            return Err((Refusal::BadRequest, "`task` is empty: say what the agent should do".into()));
        }
        let slot = self.slot()?;
        let id = uuid::Uuid::now_v7().to_string();
        let mut run = self.host.create(&id, &request).map_err(|e| (Refusal::BadRequest, e))?;
        // The request's own rules narrow the operator's, whatever the host.
        if let Some(p) = &request.permissions {
            run.config.permissions.push(p.layer().map_err(|e| (Refusal::BadRequest, e.to_string()))?);
        }
        // Whatever the host made of the request, never more than the operator allows.
        self.policy.ceiling.clamp(&mut run.config);
        self.host.save(&run).await.map_err(|e| (Refusal::Failed, e))?;
        self.spawn(run, Some(slot)).await?;
        Ok(id)
    }

    /// Continues every run the last server left unfinished; how many.
    pub async fn resume_unfinished(self: &Arc<Self>) -> Result<usize, String> {
        let ids = self.host.unfinished().await?;
        let mut n = 0;
        for id in ids {
            if let Some(mut run) = self.host.load(&id).await? {
                // A run this host cannot provide for stays as it is, for a
                // front end that can.
                if self.host.check(&run).is_err() {
                    continue;
                }
                run.resume();
                if let Some(host) = run.host.as_object_mut() {
                    host.remove("server_stopped");
                }
                self.policy.ceiling.clamp(&mut run.config);
                // Admitted by an earlier server: they take a slot when
                // there is one, and go on beyond the cap when there is not.
                let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
                if self.spawn(run, slot).await.is_ok() {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Makes `run` live: its log, and its agent on the runtime, handed the
    /// `drive` event. Refused (`Conflict`) when its agent is still running
    /// or the runtime is stopping; the run then stays as stored.
    async fn spawn(self: &Arc<Self>, run: AgentRun, slot: Option<OwnedSemaphorePermit>) -> Result<(), Refused> {
        // Its stream goes on from the last event kept of it (a run resumed
        // after a restart keeps its ids).
        let last = self.host.last_event(&run.id).await.unwrap_or(0);
        let (tx, rx) = mpsc::channel(4);
        let live = Arc::new(Live {
            log: Arc::new(EventLog::after(EVENT_LOG, last)),
            cancel: self.stop.child_token(),
            decide: tx,
            pending: Mutex::new(Vec::new()),
        });
        let id = run.id.clone();
        // The run's log is a subscriber of the bus like any other, from
        // before its first event to the end marker after its last.
        let subscription = self.bus.subscribe(&run_topic(&id));
        let forward =
            tokio::spawn(log_events(Arc::clone(&self.host), subscription, Arc::clone(&live), id.clone(), last));
        let forwarding = forward.abort_handle();
        let control = control_topic(&id);
        let agent = RunAgent {
            runs: Arc::clone(self),
            start: Some(Start { run, live: Arc::clone(&live), decisions: rx, forward, slot }),
        };
        let refused = |e: &dyn std::fmt::Display| {
            forwarding.abort();
            live.close();
            (Refusal::Conflict, format!("run `{id}` cannot be driven here now: {e}"))
        };
        self.runtime.create_agent(&agent_name(&id), agent, &[&control]).map_err(|e| refused(&e))?;
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.clone(), Arc::clone(&live));
        self.bus.publish(Event::new(&control, "drive", &id, Value::Null)).await.map_err(|e| refused(&e))?;
        Ok(())
    }

    /// The runtime whose agents drive the live runs (run `id`'s agent is
    /// [`agent_name`]`(id)`).
    pub fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    /// Publishes on the bus, which the run's log and every other subscriber
    /// read; a stopped bus leaves only the log to tell.
    async fn publish(&self, live: &Live, event: Event) {
        if self.bus.publish(event.clone()).await.is_err() {
            live.push(event);
        }
    }

    async fn drive(
        self: Arc<Self>,
        mut run: AgentRun,
        live: Arc<Live>,
        mut decisions: mpsc::Receiver<Decide>,
        forward: tokio::task::JoinHandle<()>,
    ) {
        let topic = run_topic(&run.id);
        let lost = match self.host.hold(&run.id).await {
            Ok(lost) => lost,
            Err(e) => {
                // Another driver steps it: nothing here may write it.
                self.publish(&live, Event::new(&topic, "error", &run.id, json!({"message": e}))).await;
                self.end(&run, &live, &topic, forward).await;
                return;
            }
        };
        let cancel = live.cancel.clone();
        let watch = tokio::spawn(async move {
            lost.cancelled().await;
            cancel.cancel();
        });
        self.drive_held(&mut run, &live, &mut decisions, &topic).await;
        watch.abort();
        self.host.release(&run.id).await;
        self.end(&run, &live, &topic, forward).await;
    }

    async fn drive_held(
        self: &Arc<Self>,
        run: &mut AgentRun,
        live: &Arc<Live>,
        decisions: &mut mpsc::Receiver<Decide>,
        topic: &str,
    ) {
        let equipped = self.host.equip(run).await;
        let (provider, tools) = match equipped {
            Ok(e) => e,
            Err(e) => {
                run.stop_for_driver(format!("the run could not be set up: {e}"));
                let _ = self.host.save(run).await;
                return;
            }
        };
        let now = now_ms;
        let host = Arc::clone(&self.host);
        let price = move |r: &ChatResponse| host.price(r);
        let driver = Driver {
            now: &now,
            price: &price,
            cancel: Some(live.cancel.clone()),
            events: Some(self.bus.clone()),
            tool_timeout: self.tool_timeout,
            router: self.host.router(&provider),
            prices: self.host.prices(),
            // The client's choice, kept with the run so a resumed run
            // streams as it did.
            stream: run.host["stream"].as_bool().unwrap_or(false),
            ..Driver::new(provider.as_ref(), tools)
        };
        let mut keep = Keep(Arc::clone(&self.host));
        self.publish(live, Event::new(topic, "run_started", &run.id, json!({"step": run.step}))).await;
        loop {
            let action = match driver.drive(run, &mut keep).await {
                Ok(a) => a,
                Err(e) => {
                    // Not stored: the run is as last checkpointed; a restart resumes it.
                    self.publish(live, Event::new(topic, "error", &run.id, json!({"message": e.to_string()}))).await;
                    break;
                }
            };
            let Action::AwaitApproval(pending) = action else { break };
            *live.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = pending.clone();
            self.publish(live, Event::new(topic, "approval_needed", &run.id, json!({"pending": pending}))).await;
            let decided = tokio::select! {
                d = decisions.recv() => d,
                () = live.cancel.cancelled() => None,
            };
            match decided {
                Some((ds, answer)) => {
                    let result = run.decide(&ds).map_err(|e| e.to_string());
                    let ok = result.is_ok();
                    let _ = answer.send(result);
                    if ok {
                        live.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
                        self.publish(live, Event::new(topic, "decided", &run.id, json!({"decisions": ds}))).await;
                    }
                }
                None => {
                    run.cancel();
                    let _ = keep.0.save(run).await;
                    break;
                }
            }
        }
        if run.outcome == Some(crate::Outcome::Cancelled) && self.stop.is_cancelled() {
            // Stopped by the server, not the client: the next server
            // resumes it.
            run.host["server_stopped"] = json!(true);
            let _ = self.host.save(run).await;
        } else if run.outcome.is_some() {
            self.host.finished(run).await;
        }
    }

    async fn end(&self, run: &AgentRun, live: &Live, topic: &str, forward: tokio::task::JoinHandle<()>) {
        if let Some(outcome) = &run.outcome {
            self.publish(live, outcome_event(topic, &run.id, outcome)).await;
        }
        // The log closes once it has every event before the marker (or the
        // bus stopped, which ends its subscription too).
        let _ = self.bus.publish(Event::new(topic, LOG_END, &run.id, Value::Null)).await;
        let _ = forward.await;
        live.close();
        // Finished runs' logs stay readable for a while, not forever: the
        // oldest beyond KEPT_LOGS go (their runs stay in the store).
        let mut all = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let done: Vec<String> = all.iter().filter(|(_, l)| l.log.is_closed()).map(|(id, _)| id.clone()).collect();
        for id in done.iter().take(done.len().saturating_sub(KEPT_LOGS)) {
            all.remove(id);
        }
    }

    /// The stored runs, most recent first, as the host lists them.
    pub async fn list(&self, limit: u32) -> Result<Vec<Value>, String> {
        self.host.list(limit).await
    }

    /// Stored run `id`.
    pub async fn load(&self, id: &str) -> Result<Option<AgentRun>, String> {
        self.host.load(id).await
    }

    /// Run `id`'s events after event `after`, then each as it comes, ending
    /// with the run (a `gap` event first when the log no longer holds some
    /// of them); `None` when the run has no log here (it was not driven by
    /// this process, or long ago).
    pub fn events(&self, id: &str, after: u64) -> Option<impl Stream<Item = Event> + Send + use<>> {
        self.log(id).map(|live| Arc::clone(&live.log).follow(after))
    }

    /// Run `id`'s events after id `after`: those kept by the host that this
    /// process's log no longer (or never) held — from before a restart, say
    /// — then the log's, following it while the run is live. `None` when
    /// neither has any.
    pub async fn events_since(&self, id: &str, after: u64) -> Option<impl Stream<Item = Event> + Send + use<>> {
        let log = self.log(id).map(|live| Arc::clone(&live.log));
        let first_live = log.as_ref().map_or(u64::MAX, |l| l.first_id());
        let mut kept = Vec::new();
        let mut from = after;
        while from + 1 < first_live {
            let limit = u32::try_from((first_live - from - 1).min(1000)).unwrap_or(1000);
            let Ok(batch) = self.host.recorded_events(id, from, limit).await else { break };
            let Some(last) = batch.last().map(|e| e.id) else { break };
            from = last;
            kept.extend(batch.into_iter().filter(|e| e.id < first_live));
        }
        if log.is_none() && kept.is_empty() {
            return None;
        }
        let live = log.map(|l| l.follow(from.max(after)));
        Some(futures_util::stream::iter(kept).chain(futures_util::stream::iter(live).flatten()))
    }

    /// Whether clients may start and steer runs (`serve --agents`).
    pub fn policy(&self) -> &RunsPolicy {
        &self.policy
    }

    /// Whether this server is driving run `id` now.
    pub fn is_live(&self, id: &str) -> bool {
        self.live(id).is_some()
    }

    /// The calls run `id` waits on (empty when it waits on none, or is not live).
    pub fn pending(&self, id: &str) -> Vec<Pending> {
        self.live(id).map(|l| l.pending.lock().map(|p| p.clone()).unwrap_or_default()).unwrap_or_default()
    }

    /// The id of the last event in run `id`'s log (0: none): a page that
    /// shows the run as of now follows it from there (`?after=`).
    pub fn last_event(&self, id: &str) -> u64 {
        self.log(id).map_or(0, |l| l.log.last_id())
    }

    /// Cancels live run `id`; false when it is not live here.
    pub fn cancel(&self, id: &str) -> bool {
        self.live(id).map(|l| l.cancel.cancel()).is_some()
    }

    /// Hands run `id` these decisions (each for a pending call); the
    /// error is a status and a message for the person who decided.
    pub async fn decide(&self, id: &str, decisions: Vec<Decision>) -> Result<(), Refused> {
        let conflict = |m: String| (Refusal::Conflict, m);
        let Some(live) = self.live(id) else { return Err(conflict(format!("run `{id}` is not live on this server"))) };
        let (tx, rx) = oneshot::channel();
        if live.decide.send((decisions, tx)).await.is_err() {
            return Err(conflict(format!("run `{id}` is no longer waiting")));
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(conflict(e)),
            Err(_) => Err(conflict(format!("run `{id}` is no longer waiting"))),
        }
    }

    /// Drives a stored run that is not live again (after a stop, a cancel
    /// or a crash): finished calls are kept, a running one is interrupted.
    pub async fn resume(self: &Arc<Self>, id: &str) -> Result<(), Refused> {
        if self.is_live(id) {
            return Err((Refusal::Conflict, format!("run `{id}` is running already")));
        }
        let mut run = match self.host.load(id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Err((Refusal::NotFound, format!("no agent run `{id}`"))),
            Err(e) => return Err((Refusal::Failed, e)),
        };
        if matches!(run.outcome, Some(crate::Outcome::Answer { .. } | crate::Outcome::Aborted { .. })) {
            return Err((Refusal::Conflict, format!("run `{id}` is {}; there is nothing to resume", status(&run))));
        }
        self.host.check(&run).map_err(|e| (Refusal::Conflict, e))?;
        match self.host.claim(id).await {
            Ok(true) => {}
            Ok(false) => {
                return Err((Refusal::Conflict, format!("run `{id}` is being driven by another noesis process")));
            }
            Err(e) => return Err((Refusal::Failed, e)),
        }
        let slot = self.slot()?;
        // Refused here, with who holds it, rather than in the drive.
        self.host.hold(id).await.map_err(|e| (Refusal::Conflict, e))?;
        run.resume();
        self.policy.ceiling.clamp(&mut run.config);
        let spawned = self.spawn(run, Some(slot)).await;
        if spawned.is_err() {
            self.host.release(id).await;
        }
        spawned
    }

    /// Makes run `id` one to follow here: live already, finished, or (left
    /// unfinished by a process that ended) resumed here.
    pub async fn follow(self: &Arc<Self>, id: &str) -> Result<(), Refused> {
        if self.is_live(id) {
            return Ok(());
        }
        let run = match self.host.load(id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Err((Refusal::NotFound, format!("no agent run `{id}`"))),
            Err(e) => return Err((Refusal::Failed, e)),
        };
        let left = match &run.outcome {
            None => true,
            Some(crate::Outcome::Cancelled) => run.host["server_stopped"] == true,
            Some(_) => false,
        };
        if left { self.resume(id).await } else { Ok(()) }
    }

    /// Follows run `id` to its end, handing `each` every event as it comes;
    /// `cancel` cancels the run (it still ends, as cancelled). The run as
    /// stored at the end.
    pub async fn wait(
        &self,
        id: &str,
        mut each: impl FnMut(&Event),
        cancel: &CancellationToken,
    ) -> Result<AgentRun, String> {
        if let Some(live) = self.log(id) {
            let mut events = std::pin::pin!(Arc::clone(&live.log).follow(0));
            loop {
                tokio::select! {
                    e = events.next() => match e {
                        Some(e) => each(&e),
                        None => break,
                    },
                    () = cancel.cancelled(), if !live.cancel.is_cancelled() => live.cancel.cancel(),
                }
            }
        }
        self.host.load(id).await?.ok_or_else(|| format!("no agent run `{id}`"))
    }

    /// Stops every run as cancelled (resumable) and waits until each
    /// run's agent has ended its drive. The bus stays open for the server's
    /// other publishers.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.runtime.idle().await;
    }
}

/// The runtime's name for run `id`'s agent.
pub fn agent_name(id: &str) -> String {
    format!("run:{id}")
}

/// The topic a run's agent takes its orders on.
fn control_topic(id: &str) -> String {
    format!("agents.control.{id}")
}

/// What a run's agent needs for its drive.
struct Start {
    run: AgentRun,
    live: Arc<Live>,
    decisions: mpsc::Receiver<Decide>,
    forward: tokio::task::JoinHandle<()>,
    slot: Option<OwnedSemaphorePermit>,
}

/// A live run as an agent: its `drive` event drives the run to its end
/// (waiting inside for decisions; cancelled by the run's token), and the
/// agent stops with it.
struct RunAgent {
    runs: Arc<AgentRuns>,
    start: Option<Start>,
}

#[async_trait::async_trait]
impl AgentBehavior for RunAgent {
    async fn on_event(&mut self, event: &Event, state: &mut AgentState) -> Vec<AgentAction> {
        if event.kind == "drive"
            && let Some(s) = self.start.take()
        {
            let id = s.run.id.clone();
            Arc::clone(&self.runs).drive(s.run, s.live, s.decisions, s.forward).await;
            drop(s.slot);
            state.memory = json!({"run_id": id});
        }
        vec![AgentAction::Stop]
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

struct Keep(Arc<dyn AgentHost>);

#[async_trait::async_trait]
impl crate::Checkpoint for Keep {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        self.0.save(run).await
    }
}

/// An event of a run's log, as [`AgentRuns::wait`] hands it out.
pub type RunEvent = Event;

/// What a run is doing (see [`AgentRun::status`]).
pub fn status_of(run: &AgentRun) -> &'static str {
    run.status()
}

fn status(run: &AgentRun) -> &'static str {
    run.status()
}
