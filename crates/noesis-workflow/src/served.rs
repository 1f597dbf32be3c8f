//! Episodes that outlive a request: the server's `solve` runs, as the
//! agent layer's supervisor keeps agent runs. An [`Episodes`] starts (or
//! resumes) the project's episode in a task, publishes what its
//! [`Observer`] sees on the [`EventBus`] (topic `episodes.{id}`) and in the
//! episode's own [`EventLog`], and hands decisions to its [`Approver`].
//! Front ends — the HTTP routes, the dashboard's live view — read the log
//! and decide through it; how each says a refusal is its own business.
//!
//! Invariant: the project has one state, so at most one episode runs at a
//! time; the start check and the start itself happen under one lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::Stream;
use noesis_agent::events::{Event, EventBus, EventLog, progress_event};
use noesis_agent::supervisor::{Refusal, Refused};
use noesis_agent::{Decision, Pending, Progress};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::driver::{self, Approver, Begin, Driver, Observer};
use crate::versions::{self, States};

/// Events an episode's log keeps for late readers.
const EVENT_LOG: usize = 10_000;

/// What a client asks for when it starts (or resumes) an episode.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeRequest {
    /// What to do (a new episode).
    #[serde(default)]
    pub task: String,
    /// The test commands, run with `sh -c` in the project (a new episode).
    #[serde(default)]
    pub tests: Vec<String>,
    /// A JUnit XML report the commands write, relative to the project.
    #[serde(default)]
    pub junit: Option<String>,
    /// Attempts REFLECTOR may route back before the episode escalates.
    #[serde(default)]
    pub max_retries: Option<u64>,
    /// Continue the project's unfinished or escalated episode instead.
    #[serde(default)]
    pub resume: bool,
    /// Advice for the next attempt (with `resume`).
    #[serde(default)]
    pub hint: Option<String>,
}

impl EpisodeRequest {
    /// What is wrong with the request on its face, before anything runs.
    ///
    /// # Errors
    /// A message naming the field.
    pub fn check(&self) -> Result<(), String> {
        if !self.resume && self.task.trim().is_empty() {
            return Err("`task` is empty: say what to do".into());
        }
        if !self.resume && self.tests.is_empty() {
            return Err("`tests` is empty: an episode verifies every change with the project's tests".into());
        }
        if self.hint.is_some() && !self.resume {
            return Err("`hint` goes with `resume`".into());
        }
        Ok(())
    }
}

/// What a front end needs from its host to run episodes. Errors are
/// messages for the client (no secrets in them).
pub trait EpisodeHost: Send + Sync + 'static {
    /// The project's versioned state.
    fn states(&self) -> &States;
    /// The project's root: the folder every episode here works in.
    fn project_root(&self) -> &Path;
    /// How a new episode's tests and CODER's commands are confined.
    fn sandbox(&self) -> noesis_sandbox::Settings;
    /// The driver of an episode working in `workspace`, confined by
    /// `sandbox`, reporting to `observer` and asking `approver`.
    ///
    /// # Errors
    /// Why no driver could be made, for the client.
    fn driver(
        &self,
        workspace: PathBuf,
        sandbox: noesis_sandbox::Settings,
        observer: Arc<dyn Observer>,
        approver: Arc<dyn Approver>,
    ) -> Result<Driver, String>;
}

/// Decisions for the waiting calls, and who to tell once they are taken.
type Decide = (Vec<Decision>, oneshot::Sender<()>);

/// One episode's live state: its log and the calls waiting for a person.
struct Live {
    id: String,
    topic: String,
    log: Arc<EventLog>,
    bus: EventBus,
    /// The CODER run and its calls waiting for a decision.
    pending: Mutex<Option<(String, Vec<Pending>)>>,
    decide: Mutex<Option<mpsc::Sender<Decide>>>,
}

impl Live {
    fn publish(&self, kind: &str, data: Value) {
        let event = Event::new(&self.topic, kind, &self.id, data);
        // Other subscribers get it if they have room; the log always does.
        let _ = self.bus.try_publish(event.clone());
        self.log.push(event);
    }

    fn done(&self) -> bool {
        self.log.is_closed()
    }

    fn pending(&self) -> Option<(String, Vec<Pending>)> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// The episode's progress as events.
struct Publish(Arc<Live>);

impl Observer for Publish {
    fn note(&self, text: &str) {
        self.0.publish("note", json!({"text": text}));
    }

    fn warn(&self, text: &str) {
        self.0.publish("warning", json!({"text": text}));
    }

    fn agent(&self, run_id: &str, progress: &Progress) {
        let e = progress_event(&self.0.topic, run_id, progress);
        self.0.publish(&e.kind, json!({"run_id": run_id, "data": e.data}));
    }
}

/// CODER's calls a rule asks about wait for [`Episodes::decide`].
struct AskClient(Arc<Live>);

#[async_trait::async_trait]
impl Approver for AskClient {
    async fn decide(&self, run_id: &str, pending: Vec<Pending>) -> Vec<Decision> {
        let (tx, mut rx) = mpsc::channel(1);
        *self.0.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
        *self.0.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((run_id.to_owned(), pending.clone()));
        self.0.publish("approval_needed", json!({"run_id": run_id, "pending": pending}));
        let decided = rx.recv().await;
        *self.0.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        *self.0.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        match decided {
            Some((decisions, answer)) => {
                self.0.publish("decided", json!({"run_id": run_id, "decisions": decisions}));
                let _ = answer.send(());
                decisions
            }
            // The front end is going away: nobody decided.
            None => driver::NoOne.decide(run_id, pending).await,
        }
    }
}

/// Where a live episode stands, for a page or a status answer.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveEpisode {
    /// Still running (its log is open).
    pub running: bool,
    /// The number of its last event (a reader after it sees only new ones).
    pub last_event: u64,
    /// CODER's run and its calls waiting for a decision.
    pub pending: Option<(String, Vec<Pending>)>,
}

/// The episodes of one project.
pub struct Episodes {
    host: Arc<dyn EpisodeHost>,
    bus: EventBus,
    logs: Mutex<BTreeMap<String, Arc<Live>>>,
    tasks: tokio::sync::Mutex<tokio::task::JoinSet<()>>,
    /// Held while an episode starts: two requests cannot both pass the
    /// one-episode check.
    starting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Episodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Episodes").field("root", &self.host.project_root()).finish_non_exhaustive()
    }
}

impl Episodes {
    /// Episodes through `host`, publishing on `bus`.
    pub fn new(host: Arc<dyn EpisodeHost>, bus: EventBus) -> Arc<Episodes> {
        Arc::new(Episodes {
            host,
            bus,
            logs: Mutex::new(BTreeMap::new()),
            tasks: tokio::sync::Mutex::new(tokio::task::JoinSet::new()),
            starting: tokio::sync::Mutex::new(()),
        })
    }

    /// The project's versioned state.
    pub fn states(&self) -> &States {
        self.host.states()
    }

    fn log(&self, id: &str) -> Option<Arc<Live>> {
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }

    fn running(&self) -> Option<String> {
        let logs = self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.values().find(|l| !l.done()).map(|l| l.id.clone())
    }

    /// Episode `id` as this process knows it (`None`: it has not run here).
    pub fn live(&self, id: &str) -> Option<LiveEpisode> {
        self.log(id).map(|l| LiveEpisode { running: !l.done(), last_event: l.log.last_id(), pending: l.pending() })
    }

    /// Episode `id`'s events after `after` (a `gap` first when the log no
    /// longer holds some), then each as it comes, ending with the episode.
    pub fn events(&self, id: &str, after: u64) -> Option<impl Stream<Item = Event> + Send + use<>> {
        self.log(id).map(|l| Arc::clone(&l.log).follow(after))
    }

    /// Starts (or resumes) the project's episode; its id.
    ///
    /// # Errors
    /// `BadRequest` for a request that is wrong on its face, `Conflict`
    /// while another episode runs or when the state allows no such start,
    /// `Failed` when the store or the host fails.
    pub async fn start(self: &Arc<Self>, request: EpisodeRequest) -> Result<String, Refused> {
        request.check().map_err(|m| (Refusal::BadRequest, m))?;
        let _starting = self.starting.lock().await;
        if let Some(id) = self.running() {
            return Err((
                Refusal::Conflict,
                format!("episode {id} is running on this server; one episode runs at a time"),
            ));
        }
        let failed = |e: &dyn std::fmt::Display| (Refusal::Failed, e.to_string());
        let states = self.host.states();
        let head = states.head().await.map_err(|e| failed(&e))?.map(|v| versions::head_of(&v));
        let sandbox =
            driver::sandbox_settings(head.as_ref(), request.resume, || self.host.sandbox()).map_err(|e| failed(&e))?;
        let begin = if request.resume {
            Begin::Resume { hint: request.hint.clone() }
        } else {
            Begin::New {
                task: request.task.clone(),
                tests: request.tests.clone(),
                junit: request.junit.clone(),
                workspace: self.host.project_root().to_path_buf(),
                max_retries: request.max_retries,
            }
        };
        let workspace = driver::open(states, self.host.project_root(), &begin, &sandbox, &driver::Silent)
            .await
            .map_err(|e| match e {
                driver::DriveError::Refused(m) => (Refusal::Conflict, m),
                other => failed(&other),
            })?;
        let head = states.head().await.map_err(|e| failed(&e))?;
        let id = head.map(|h| h.episode_id).unwrap_or_default();
        let live = Arc::new(Live {
            id: id.clone(),
            topic: format!("episodes.{id}"),
            log: Arc::new(EventLog::new(EVENT_LOG)),
            bus: self.bus.clone(),
            pending: Mutex::new(None),
            decide: Mutex::new(None),
        });
        let driver = self
            .host
            .driver(workspace, sandbox, Arc::new(Publish(Arc::clone(&live))), Arc::new(AskClient(Arc::clone(&live))))
            .map_err(|e| (Refusal::Failed, e))?;
        self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.clone(), Arc::clone(&live));
        let hint = match &begin {
            Begin::Resume { hint } => Some(hint.clone()),
            Begin::New { .. } => None,
        };
        self.tasks.lock().await.spawn(async move {
            live.publish("episode_started", json!({"resumed": hint.is_some()}));
            let resumed = match &hint {
                Some(h) => driver.resume(h.as_deref()).await,
                None => Ok(()),
            };
            match resumed {
                Ok(()) => match driver.drive().await {
                    Ok((outcome, head)) => live.publish(
                        "episode_done",
                        json!({"outcome": outcome.as_str(), "version": head.version, "state": head.state}),
                    ),
                    Err(e) => live.publish("error", json!({"message": e.to_string()})),
                },
                Err(e) => live.publish("error", json!({"message": e.to_string()})),
            }
            live.log.close();
        });
        Ok(id)
    }

    /// Hands episode `id`'s waiting CODER call(s) the decisions `decide`
    /// makes of them; returns once the episode has taken them.
    ///
    /// # Errors
    /// `Conflict` when the episode is not running here or nothing waits,
    /// `BadRequest` with `decide`'s message.
    pub async fn decide(
        &self,
        id: &str,
        decide: impl FnOnce(&[Pending]) -> Result<Vec<Decision>, String>,
    ) -> Result<(), Refused> {
        let conflict = |m: String| (Refusal::Conflict, m);
        let Some(live) = self.log(id).filter(|l| !l.done()) else {
            return Err(conflict(format!("episode {id} is not running on this server")));
        };
        let Some((_, pending)) = live.pending() else {
            return Err(conflict(format!("episode {id} has no call waiting for a decision")));
        };
        let decisions = decide(&pending).map_err(|m| (Refusal::BadRequest, m))?;
        let tx = live.decide.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let Some(tx) = tx else { return Err(conflict(format!("episode {id} is no longer waiting"))) };
        let (answer, told) = oneshot::channel();
        if tx.send((decisions, answer)).await.is_err() || told.await.is_err() {
            return Err(conflict(format!("episode {id} is no longer waiting")));
        }
        Ok(())
    }

    /// Stops every episode's task (an episode stopped mid-node resumes
    /// from its last version).
    pub async fn shutdown(&self) {
        let mut tasks = self.tasks.lock().await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_checked_on_its_face() {
        let ok = EpisodeRequest { task: "fix it".into(), tests: vec!["true".into()], ..EpisodeRequest::default() };
        assert_eq!(ok.check(), Ok(()));
        let no_task = EpisodeRequest { task: "  ".into(), ..ok.clone() };
        assert!(no_task.check().unwrap_err().contains("`task`"));
        let no_tests = EpisodeRequest { tests: Vec::new(), ..ok.clone() };
        assert!(no_tests.check().unwrap_err().contains("`tests`"));
        let hint_alone = EpisodeRequest { hint: Some("x".into()), ..ok.clone() };
        assert!(hint_alone.check().unwrap_err().contains("`hint`"));
        // A resume needs neither task nor tests: they are the episode's own.
        let resume = EpisodeRequest { resume: true, hint: Some("try B".into()), ..EpisodeRequest::default() };
        assert_eq!(resume.check(), Ok(()));
    }
}
