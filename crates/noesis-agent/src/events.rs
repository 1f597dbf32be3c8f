//! The event-driven runtime: an [`EventBus`] of topics with bounded queues,
//! agents that react to events ([`AgentBehavior`]), a loop adapted to one
//! ([`CognitiveAgent`]), and an [`AgentRuntime`] that starts agents on
//! topics and stops them gracefully: events already published are handled,
//! including those agents publish while stopping, before the agents end.
//!
//! ```
//! use noesis_agent::events::{AgentAction, AgentBehavior, AgentRuntime, AgentState, Event, EventBus};
//!
//! struct Doubler;
//! #[async_trait::async_trait]
//! impl AgentBehavior for Doubler {
//!     async fn on_event(&mut self, event: &Event, _state: &mut AgentState) -> Vec<AgentAction> {
//!         let n = event.data.as_i64().unwrap_or(0);
//!         vec![AgentAction::Publish(event.reply("results", "doubled", serde_json::json!(n * 2)))]
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let runtime = AgentRuntime::new(EventBus::new(64));
//! let mut results = runtime.bus().subscribe("results");
//! runtime.create_agent("doubler", Doubler, &["numbers"]).unwrap();
//! runtime.bus().publish(Event::new("numbers", "number", "job-1", serde_json::json!(21))).await.unwrap();
//! let answer = results.recv().await.unwrap();
//! assert_eq!((answer.data.as_i64(), answer.correlation_id.as_str()), (Some(42), "job-1"));
//! runtime.stop().await;
//! # });
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::cognitive::CognitiveLoop;
use crate::driver::Progress;
use crate::run::Outcome;

/// Something that happened, on a topic, tied to the work it belongs to by
/// its correlation id (a run's id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Given by the bus when published: increasing over the bus's life.
    pub id: u64,
    /// Where it is published.
    pub topic: String,
    /// What happened (`model_call`, `tool_call`, `approval_needed`, `done`,
    /// or an application's own kind).
    pub kind: String,
    /// The run or job it belongs to.
    pub correlation_id: String,
    /// The details.
    pub data: Value,
}

impl Event {
    /// An event to publish (the bus sets its id).
    pub fn new(topic: &str, kind: &str, correlation_id: &str, data: Value) -> Event {
        Event { id: 0, topic: topic.into(), kind: kind.into(), correlation_id: correlation_id.into(), data }
    }

    /// An event answering this one: same correlation id.
    pub fn reply(&self, topic: &str, kind: &str, data: Value) -> Event {
        Event::new(topic, kind, &self.correlation_id, data)
    }
}

/// The topic of run `run_id`'s events: `agents.runs.{run_id}` (subscribe
/// to `agents.runs.*` for every run's).
pub fn run_topic(run_id: &str) -> String {
    format!("agents.runs.{run_id}")
}

/// The event of a drive's step, on `topic`, for run `run_id`: what the
/// CLI's live view, the HTTP stream and traces read.
pub fn progress_event(topic: &str, run_id: &str, progress: &Progress) -> Event {
    let (kind, data) = match progress {
        Progress::ModelCall { turn } => ("model_call", json!({"turn": turn})),
        Progress::ModelReply { turn, tool_calls, ms } => {
            ("model_reply", json!({"turn": turn, "tool_calls": tool_calls, "ms": ms}))
        }
        Progress::ToolStart { call_id, tool, arguments } => {
            ("tool_call", json!({"call_id": call_id, "tool": tool, "arguments": arguments}))
        }
        Progress::ToolEnd { call_id, tool, is_error, ms } => {
            ("tool_result", json!({"call_id": call_id, "tool": tool, "is_error": is_error, "ms": ms}))
        }
        Progress::ToolsChanged { tools } => ("tools_changed", json!({"tools": tools})),
        Progress::TextDelta { turn, text } => ("text_delta", json!({"turn": turn, "text": text})),
    };
    Event::new(topic, kind, run_id, data)
}

/// The event of a run's end or pause.
pub fn outcome_event(topic: &str, run_id: &str, outcome: &Outcome) -> Event {
    Event::new(topic, "done", run_id, serde_json::to_value(outcome).unwrap_or(Value::Null))
}

/// The bus is stopping and takes no events from outside its agents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event bus is stopped")]
pub struct Stopped;

/// Counts events delivered to agents and not yet handled, so a stop can
/// wait for them.
#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

impl Pending {
    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

struct Sub {
    pattern: String,
    tx: mpsc::Sender<Event>,
    pending: Option<Arc<Pending>>,
}

fn matches(pattern: &str, topic: &str) -> bool {
    pattern == "*"
        || pattern == topic
        || pattern.strip_suffix(".*").is_some_and(|p| topic.strip_prefix(p).is_some_and(|rest| rest.starts_with('.')))
}

struct Bus {
    subs: Mutex<Vec<Sub>>,
    next_id: AtomicU64,
    capacity: usize,
    closed: AtomicBool,
}

/// Topics with bounded queues. A subscriber's queue holds at most the
/// bus's capacity: [`EventBus::publish`] waits while one is full
/// (backpressure), [`EventBus::try_publish`] reports it. Nothing grows
/// without bound. Topics match exactly, `prefix.*` or `*`.
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<Bus>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus").field("capacity", &self.inner.capacity).finish_non_exhaustive()
    }
}

/// A subscriber's queue.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Event>,
}

impl Subscription {
    /// The next event; `None` once the bus is gone or stopped and the queue
    /// is empty.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }
}

/// A subscriber's queue is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// See [`Stopped`].
    #[error("the event bus is stopped")]
    Stopped,
    /// Some subscriber of the topic has `capacity` events waiting; the
    /// event went to those with room.
    #[error("a subscriber of `{topic}` has a full queue")]
    Full {
        /// The topic.
        topic: String,
    },
}

impl EventBus {
    /// A bus whose subscribers queue at most `capacity` events each.
    pub fn new(capacity: usize) -> EventBus {
        EventBus {
            inner: Arc::new(Bus {
                subs: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
                capacity: capacity.max(1),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// A queue of the events on topics matching `pattern`.
    pub fn subscribe(&self, pattern: &str) -> Subscription {
        let (tx, rx) = mpsc::channel(self.inner.capacity);
        self.lock().push(Sub { pattern: pattern.into(), tx, pending: None });
        Subscription { rx }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sub>> {
        self.inner.subs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stamp(&self, mut event: Event) -> Event {
        event.id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        event
    }

    fn targets(&self, topic: &str) -> Vec<(mpsc::Sender<Event>, Option<Arc<Pending>>)> {
        let mut subs = self.lock();
        subs.retain(|s| !s.tx.is_closed());
        subs.iter().filter(|s| matches(&s.pattern, topic)).map(|s| (s.tx.clone(), s.pending.clone())).collect()
    }

    /// Publishes `event` to every subscriber of its topic, waiting while a
    /// queue is full; returns the event's id.
    pub async fn publish(&self, event: Event) -> Result<u64, Stopped> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Stopped);
        }
        self.deliver(event).await
    }

    async fn deliver(&self, event: Event) -> Result<u64, Stopped> {
        let event = self.stamp(event);
        for (tx, pending) in self.targets(&event.topic) {
            if let Some(p) = &pending {
                p.count.fetch_add(1, Ordering::SeqCst);
            }
            if tx.send(event.clone()).await.is_err()
                && let Some(p) = &pending
            {
                p.done();
            }
        }
        Ok(event.id)
    }

    /// Publishes without waiting: a subscriber whose queue is full misses
    /// it (and the error says so).
    pub fn try_publish(&self, event: Event) -> Result<u64, PublishError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(PublishError::Stopped);
        }
        let event = self.stamp(event);
        let mut full = false;
        for (tx, pending) in self.targets(&event.topic) {
            if let Some(p) = &pending {
                p.count.fetch_add(1, Ordering::SeqCst);
            }
            if let Err(e) = tx.try_send(event.clone()) {
                full |= matches!(e, mpsc::error::TrySendError::Full(_));
                if let Some(p) = &pending {
                    p.done();
                }
            }
        }
        if full { Err(PublishError::Full { topic: event.topic }) } else { Ok(event.id) }
    }
}

/// What an agent knows of itself between events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentState {
    /// Its name.
    pub name: String,
    /// Events it has handled.
    pub handled: u64,
    /// Whatever the behaviour keeps.
    pub memory: Value,
}

/// What an agent does in answer to an event.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentAction {
    /// Publish an event (possibly to another agent's topic).
    Publish(Event),
    /// Stop this agent after this event.
    Stop,
}

/// An agent's reaction to events.
#[async_trait::async_trait]
pub trait AgentBehavior: Send + 'static {
    /// Handles one event; the actions run in order.
    async fn on_event(&mut self, event: &Event, state: &mut AgentState) -> Vec<AgentAction>;
}

/// A [`CognitiveLoop`] as an agent: each event's `data.task` (or
/// `data.text`, another agent's answer, or its data if a string) is a task; the outcome is published on `output` as `answer`
/// (with `text`) or `stopped`, with the event's correlation id.
pub struct CognitiveAgent<L: CognitiveLoop> {
    inner: L,
    output: String,
}

impl<L: CognitiveLoop> CognitiveAgent<L> {
    /// `inner` answering on `output`.
    pub fn new(inner: L, output: &str) -> CognitiveAgent<L> {
        CognitiveAgent { inner, output: output.into() }
    }

    /// The loop.
    pub fn inner(&self) -> &L {
        &self.inner
    }
}

#[async_trait::async_trait]
impl<L: CognitiveLoop + 'static> AgentBehavior for CognitiveAgent<L> {
    async fn on_event(&mut self, event: &Event, _state: &mut AgentState) -> Vec<AgentAction> {
        let task = match &event.data {
            Value::String(s) => s.clone(),
            other => match other.get("task").or_else(|| other.get("text")).and_then(Value::as_str) {
                Some(t) => t.to_owned(),
                None => return Vec::new(),
            },
        };
        let outcome = self.inner.run_cycle(&task).await;
        let reply = match &outcome {
            Outcome::Answer { text } => event.reply(&self.output, "answer", json!({"text": text})),
            other => event.reply(&self.output, "stopped", serde_json::to_value(other).unwrap_or(Value::Null)),
        };
        vec![AgentAction::Publish(reply)]
    }
}

/// An agent could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The name is taken.
    #[error("an agent named `{0}` exists")]
    NameTaken(String),
    /// The runtime is stopping.
    #[error("the runtime is stopping")]
    Stopping,
}

/// Where an agent stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Handling events.
    Running,
    /// Ended (asked to stop, or the runtime stopped).
    Stopped,
}

struct Agent {
    name: String,
    handle: tokio::task::JoinHandle<AgentState>,
    running: Arc<AtomicBool>,
}

/// Agents on a bus: each gets its own bounded queue for the topics it is
/// subscribed to and handles one event at a time.
pub struct AgentRuntime {
    bus: EventBus,
    agents: Mutex<Vec<Agent>>,
    pending: Arc<Pending>,
    stopping: AtomicBool,
}

impl AgentRuntime {
    /// A runtime on `bus`.
    pub fn new(bus: EventBus) -> AgentRuntime {
        AgentRuntime {
            bus,
            agents: Mutex::new(Vec::new()),
            pending: Arc::new(Pending::default()),
            stopping: AtomicBool::new(false),
        }
    }

    /// Its bus.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// Starts agent `name` with `behavior`, handling the events of `topics`.
    pub fn create_agent(
        &self,
        name: &str,
        mut behavior: impl AgentBehavior,
        topics: &[&str],
    ) -> Result<(), RuntimeError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(RuntimeError::Stopping);
        }
        let mut agents = self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A name is free again once its agent has stopped (a run resumed
        // after its first drive ended is the same agent again).
        agents.retain(|a| a.name != name || a.running.load(Ordering::SeqCst));
        if agents.iter().any(|a| a.name == name) {
            return Err(RuntimeError::NameTaken(name.into()));
        }
        let (tx, mut rx) = mpsc::channel(self.bus.inner.capacity);
        {
            let mut subs = self.bus.lock();
            for t in topics {
                subs.push(Sub { pattern: (*t).into(), tx: tx.clone(), pending: Some(Arc::clone(&self.pending)) });
            }
        }
        drop(tx);
        let bus = self.bus.clone();
        let pending = Arc::clone(&self.pending);
        let running = Arc::new(AtomicBool::new(true));
        let alive = Arc::clone(&running);
        let mut state = AgentState { name: name.into(), ..AgentState::default() };
        let handle = tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let actions = behavior.on_event(&event, &mut state).await;
                state.handled += 1;
                let mut stop = false;
                for action in actions {
                    match action {
                        // Agents may publish while the runtime drains.
                        AgentAction::Publish(e) => drop(bus.deliver(e).await),
                        AgentAction::Stop => stop = true,
                    }
                }
                pending.done();
                if stop {
                    break;
                }
            }
            // Events still queued for a stopped agent will not be handled.
            rx.close();
            while rx.try_recv().is_ok() {
                pending.done();
            }
            alive.store(false, Ordering::SeqCst);
            state
        });
        agents.push(Agent { name: name.into(), handle, running });
        Ok(())
    }

    /// Where agent `name` stands (`None`: no such agent).
    pub fn lifecycle(&self, name: &str) -> Option<Lifecycle> {
        let agents = self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let agent = agents.iter().find(|a| a.name == name)?;
        Some(if agent.running.load(Ordering::SeqCst) { Lifecycle::Running } else { Lifecycle::Stopped })
    }

    /// Waits until every event delivered to an agent has been handled
    /// (what agents publish meanwhile too); the bus stays open.
    pub async fn idle(&self) {
        loop {
            let idle = self.pending.idle.notified();
            if self.pending.count.load(Ordering::SeqCst) == 0 {
                break;
            }
            idle.await;
        }
    }

    /// Stops gracefully: the bus refuses events from outside, every event
    /// already delivered to an agent is handled (and what agents publish
    /// meanwhile too), then the agents end. Returns each agent's final
    /// state, in creation order.
    pub async fn stop(&self) -> Vec<AgentState> {
        self.stopping.store(true, Ordering::SeqCst);
        self.bus.inner.closed.store(true, Ordering::SeqCst);
        self.idle().await;
        // Dropping the agents' senders ends their loops.
        self.bus.lock().retain(|s| s.pending.is_none());
        let agents = std::mem::take(&mut *self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let mut states = Vec::new();
        for agent in agents {
            if let Ok(state) = agent.handle.await {
                states.push(state);
            }
        }
        states
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_match_exactly_by_prefix_or_all() {
        assert!(matches("runs", "runs") && matches("*", "anything") && matches("runs.*", "runs.r1"));
        assert!(!matches("runs.*", "runs") && !matches("runs.*", "runsx.r1") && !matches("runs", "runs.r1"));
    }

    #[tokio::test]
    async fn a_full_queue_is_backpressure_not_growth() {
        let bus = EventBus::new(2);
        let mut sub = bus.subscribe("t");
        for i in 0..2 {
            bus.try_publish(Event::new("t", "k", "c", json!(i))).unwrap();
        }
        let e = bus.try_publish(Event::new("t", "k", "c", json!(2))).unwrap_err();
        assert_eq!(e, PublishError::Full { topic: "t".into() });
        // `publish` waits for room instead.
        let waiting = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(Event::new("t", "k", "c", json!(3))).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(sub.recv().await.unwrap().data, json!(0));
        waiting.await.unwrap().unwrap();
        let rest: Vec<Value> = std::iter::from_fn(|| sub.try_recv()).map(|e| e.data).collect();
        assert_eq!(rest, [json!(1), json!(3)]);
    }

    #[tokio::test]
    async fn a_name_is_free_again_once_its_agent_has_stopped() {
        struct StopAtOnce;
        #[async_trait::async_trait]
        impl AgentBehavior for StopAtOnce {
            async fn on_event(&mut self, _e: &Event, _s: &mut AgentState) -> Vec<AgentAction> {
                vec![AgentAction::Stop]
            }
        }
        let rt = AgentRuntime::new(EventBus::new(8));
        rt.create_agent("a", StopAtOnce, &["t"]).unwrap();
        assert_eq!(rt.create_agent("a", StopAtOnce, &["t"]), Err(RuntimeError::NameTaken("a".into())));
        rt.bus().publish(Event::new("t", "k", "c", Value::Null)).await.unwrap();
        rt.idle().await;
        // Its loop has ended once the event is handled; wait for the flag.
        while rt.lifecycle("a") != Some(Lifecycle::Stopped) {
            tokio::task::yield_now().await;
        }
        rt.create_agent("a", StopAtOnce, &["t"]).unwrap();
        assert_eq!(rt.lifecycle("a"), Some(Lifecycle::Running));
        assert_eq!(rt.stop().await.len(), 1, "the stopped one was replaced, not kept");
    }

    #[tokio::test]
    async fn ids_increase_and_other_topics_are_not_seen() {
        let bus = EventBus::new(8);
        let mut a = bus.subscribe("a");
        let id1 = bus.publish(Event::new("b", "k", "c", Value::Null)).await.unwrap();
        let id2 = bus.publish(Event::new("a", "k", "c", Value::Null)).await.unwrap();
        assert!(id2 > id1);
        assert_eq!(a.recv().await.unwrap().id, id2);
        assert!(a.try_recv().is_none());
    }
}

/// A bounded, numbered record of one run's (or episode's) events that
/// readers follow from any point: what a server streams as SSE and a page
/// catches up from. Ids start at 1 and increase; the oldest events are
/// dropped beyond the capacity, and a reader that asks for dropped ones gets
/// one `gap` event (`{"missed_before": FIRST}`) instead of a silent hole.
/// Once closed, followers end after the last event.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<LogInner>,
    changed: Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct LogInner {
    next: u64,
    events: std::collections::VecDeque<Event>,
    done: bool,
}

impl EventLog {
    /// An empty log keeping at most `capacity` events.
    pub fn new(capacity: usize) -> EventLog {
        EventLog { inner: Mutex::new(LogInner::default()), changed: Notify::new(), capacity: capacity.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An empty log whose first event will have id `last + 1`.
    pub fn after(capacity: usize, last: u64) -> EventLog {
        let log = EventLog::new(capacity);
        log.lock().next = last;
        log
    }

    /// The id of the oldest event held (the next id when none is).
    pub fn first_id(&self) -> u64 {
        let log = self.lock();
        log.events.front().map_or(log.next + 1, |e| e.id)
    }

    /// Appends `event` under the id it carries (numbered by the caller,
    /// above every id held; a lower one is given the next id instead).
    pub fn push_numbered(&self, mut event: Event) {
        let mut log = self.lock();
        if event.id <= log.next {
            event.id = log.next + 1;
        }
        log.next = event.id;
        log.events.push_back(event);
        if log.events.len() > self.capacity {
            log.events.pop_front();
        }
        drop(log);
        self.changed.notify_waiters();
    }

    /// Appends `event` under the next id and wakes the followers.
    pub fn push(&self, mut event: Event) {
        event.id = 0;
        self.push_numbered(event);
    }

    /// No more events: followers end after the last one.
    pub fn close(&self) {
        self.lock().done = true;
        self.changed.notify_waiters();
    }

    /// Whether [`EventLog::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().done
    }

    /// The id of the last event (0: none yet).
    pub fn last_id(&self) -> u64 {
        self.lock().next
    }

    /// The events after id `after` (a `gap` first when some were dropped),
    /// then each as it comes, ending when the log is closed.
    pub fn follow(self: Arc<Self>, after: u64) -> impl futures_util::Stream<Item = Event> + Send + 'static {
        use futures_util::StreamExt;
        futures_util::stream::unfold((self, after), |(log, mut after)| async move {
            loop {
                let changed = log.changed.notified();
                let (batch, done) = {
                    let inner = log.lock();
                    let first = inner.events.front().map_or(inner.next + 1, |e| e.id);
                    let mut batch: Vec<Event> = Vec::new();
                    if after + 1 < first && after < inner.next {
                        batch.push(Event {
                            id: first - 1,
                            ..Event::new("", "gap", "", json!({"missed_before": first}))
                        });
                    }
                    batch.extend(inner.events.iter().filter(|e| e.id > after).cloned());
                    (batch, inner.done)
                };
                if let Some(last) = batch.last() {
                    after = last.id;
                    drop(changed);
                    return Some((futures_util::stream::iter(batch), (log, after)));
                }
                if done {
                    return None;
                }
                changed.await;
            }
        })
        .flatten()
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;
    use futures_util::StreamExt;

    fn ev(kind: &str) -> Event {
        Event::new("t", kind, "r", json!({}))
    }

    #[tokio::test]
    async fn followers_get_what_they_missed_then_what_comes_and_end_at_close() {
        let log = Arc::new(EventLog::new(10));
        log.push(ev("a"));
        log.push(ev("b"));
        assert_eq!(log.last_id(), 2);
        let mut from_one = Box::pin(Arc::clone(&log).follow(1));
        assert_eq!(from_one.next().await.map(|e| (e.id, e.kind)), Some((2, "b".to_owned())));
        let pusher = Arc::clone(&log);
        let later = tokio::spawn(async move {
            pusher.push(ev("c"));
            pusher.close();
        });
        assert_eq!(from_one.next().await.map(|e| (e.id, e.kind)), Some((3, "c".to_owned())));
        assert!(from_one.next().await.is_none(), "closed: the stream ends");
        later.await.unwrap();
        assert!(log.is_closed());
        let all: Vec<u64> = Arc::clone(&log).follow(0).map(|e| e.id).collect().await;
        assert_eq!(all, [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_reader_behind_the_capacity_is_told_of_the_gap() {
        let log = Arc::new(EventLog::new(2));
        for k in ["a", "b", "c", "d"] {
            log.push(ev(k));
        }
        log.close();
        let got: Vec<(u64, String)> = Arc::clone(&log).follow(0).map(|e| (e.id, e.kind)).collect().await;
        assert_eq!(got, [(2, "gap".to_owned()), (3, "c".to_owned()), (4, "d".to_owned())]);
        let gap: Vec<Event> = Arc::clone(&log).follow(0).take(1).collect().await;
        assert_eq!(gap[0].data["missed_before"], 3);
        // Up to date with what is kept: no gap.
        let got: Vec<u64> = log.follow(3).map(|e| e.id).collect().await;
        assert_eq!(got, [4]);
    }
}
