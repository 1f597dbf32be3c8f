//! The driver of an [`Episode`]: performs each step with the engine —
//! modules through `noesis-runtime`, CODER as an `noesis-agent` run over
//! the workspace, tests confined by `noesis-sandbox` with the files that
//! judge CODER read-only, snapshots, memory and frames in the store — and
//! writes every node boundary as a version of the project's state
//! ([`States`]), so any front end (the CLI, the server) runs the same
//! episode and a crash continues from the last version.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use noesis_agent::{Decision, Pending, Permissions, Progress};
use noesis_llm::{PriceTable, Provider};
use noesis_modules::search::SearchPath;
use noesis_store::{Store, StoreError};
use serde_json::{Value, json};

use crate::episode::{self, Episode, EpisodeError, Head, Op, Outcome, Step};
use crate::snapshot::{self, Snapshot, SnapshotError};
use crate::state::StateError;
use crate::versions::{self, States, VersionsError};

mod coder;
mod frames;
mod testrun;

pub use testrun::run_tests;

/// Sees what an episode does as it goes.
pub trait Observer: Send + Sync {
    /// A progress line (`==> CODER (retry 0 of 3)`, `    snapshot: 4 files`).
    fn note(&self, _text: &str) {}
    /// A warning, shown even to a quiet front end.
    fn warn(&self, _text: &str) {}
    /// A step of CODER's agent run.
    fn agent(&self, _run_id: &str, _progress: &Progress) {}
    /// A named point was passed (`verifier-restored`), for crash tests.
    fn reached(&self, _point: &str) {}
}

/// An observer that sees nothing.
pub struct Silent;

impl Observer for Silent {}

/// Decides CODER's calls that a rule says to ask a person about.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// A decision for each pending call of run `run_id`.
    async fn decide(&self, run_id: &str, pending: Vec<Pending>) -> Vec<Decision>;
}

/// No person is there (the CLI's `solve`): every such call is denied and
/// the model told, and the run goes on.
pub struct NoOne;

/// What the model is told when [`NoOne`] denies a call.
pub const NO_ONE: &str = "solve asks no one: a rule asks a person about this call, so it does not run";

#[async_trait::async_trait]
impl Approver for NoOne {
    async fn decide(&self, _run_id: &str, pending: Vec<Pending>) -> Vec<Decision> {
        pending
            .into_iter()
            .map(|p| Decision {
                call_id: p.call_id,
                tool: p.tool,
                arguments_hash: p.arguments_hash,
                verdict: noesis_agent::Verdict::Deny { message: Some(NO_ONE.into()) },
            })
            .collect()
    }
}

/// Why an episode could not go on. The state keeps the last node boundary
/// written, so `--resume` continues from it.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The request cannot start or resume an episode (in words for a person).
    #[error("{0}")]
    Refused(String),
    /// Reading or writing a version.
    #[error(transparent)]
    Versions(#[from] VersionsError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The episode refused what it was fed, or its record is damaged.
    #[error(transparent)]
    Episode(#[from] EpisodeError),
    /// The state refused a change.
    #[error(transparent)]
    State(#[from] StateError),
    /// A snapshot, diff or restore.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A step failed; `what` says which and on what.
    #[error("{what}: {message}")]
    Failed {
        /// What was being done.
        what: String,
        /// Why it failed.
        message: String,
    },
}

impl DriveError {
    fn failed(what: impl Into<String>, message: impl std::fmt::Display) -> DriveError {
        DriveError::Failed { what: what.into(), message: message.to_string() }
    }
}

/// How an episode starts.
#[derive(Debug, Clone)]
pub enum Begin {
    /// A new episode.
    New {
        /// What to do.
        task: String,
        /// The test commands (`sh -c`, exit 0 passes).
        tests: Vec<String>,
        /// A JUnit XML report the commands write, relative to the workspace.
        junit: Option<String>,
        /// The folder CODER may change.
        workspace: PathBuf,
        /// Attempts REFLECTOR may route back before the episode escalates.
        max_retries: Option<u64>,
    },
    /// The project's unfinished or escalated episode, with advice for the
    /// next attempt.
    Resume {
        /// The advice.
        hint: Option<String>,
    },
}

/// An episode of `solve`'s that is not archived yet (one stopped at
/// CONSOLIDATOR before its memory was written still needs that).
pub fn unfinished(head: Option<&Head>) -> Option<&Head> {
    head.filter(|h| h.episode.get("tests").is_some() && h.episode["archived"] != json!(true))
}

/// How the episode's tests and CODER's commands are confined: a resumed
/// episode keeps the settings it was started with, a new one takes
/// `given`. Test runs write no bytecode: a restored file keeps its size and
/// mtime, so bytecode cached from the version that was reverted would look
/// current.
pub fn sandbox_settings(
    head: Option<&Head>,
    resume: bool,
    given: impl FnOnce() -> noesis_sandbox::Settings,
) -> Result<noesis_sandbox::Settings, DriveError> {
    let mut settings = match unfinished(head).filter(|_| resume).and_then(|h| h.episode.get("sandbox").cloned()) {
        Some(v) => {
            serde_json::from_value(v).map_err(|e| DriveError::failed("the episode's recorded sandbox settings", e))?
        }
        None => given(),
    };
    settings.set_env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
    Ok(settings)
}

/// Starts a new episode (its first versions written) or finds the one to
/// resume; the workspace it works in.
pub async fn open(
    states: &States,
    project_root: &Path,
    begin: &Begin,
    sandbox: &noesis_sandbox::Settings,
    observer: &dyn Observer,
) -> Result<PathBuf, DriveError> {
    let head = states.head().await?.map(|v| versions::head_of(&v));
    let in_progress = unfinished(head.as_ref());
    let Begin::New { task, tests, junit, workspace, max_retries } = begin else {
        let Some(h) = in_progress else {
            return Err(DriveError::Refused("no unfinished episode to resume in this project".into()));
        };
        return Ok(PathBuf::from(h.episode["workspace"].as_str().unwrap_or_default()));
    };
    if let Some(h) = in_progress {
        return Err(DriveError::Refused(format!(
            "episode {} is unfinished (at {}, {}); continue it with `noesis solve --resume` or start over with `noesis state reset`",
            h.episode_id,
            h.node(),
            h.status
        )));
    }
    if task.trim().is_empty() {
        return Err(DriveError::Refused(
            "the task is empty; say what to do: noesis solve \"TASK\" --test \"CMD\"".into(),
        ));
    }
    if tests.is_empty() {
        return Err(DriveError::Refused(
            "no --test given: solve verifies every change with the project's tests (--test \"CMD\", repeatable)".into(),
        ));
    }
    let root = workspace
        .canonicalize()
        .map_err(|e| DriveError::failed(format!("--workspace {}: not a folder", workspace.display()), e))?;
    states.init(&versions::project_hash(project_root), "solve").await?;
    let record = json!({"task": task, "tests": tests, "workspace": root.to_string_lossy(), "attempt": 0,
                        "junit": junit, "coder_run": null, "snapshot": null, "baseline": null,
                        "sandbox": serde_json::to_value(sandbox).unwrap_or(Value::Null)});
    let mut ops = vec![Op::Set { key: "user_query".into(), value: json!(task) }];
    if let Some(m) = max_retries {
        ops.push(Op::Set { key: "max_retries".into(), value: json!(m) });
    }
    ops.push(Op::NewRecord { record });
    let (v, ()) = states
        .try_step("solve", |s, e| episode::apply(&ops, s, e, &now()))
        .await?
        .map_err(|e| DriveError::Refused(e.map_or_else(|| "no state".to_owned(), |e| e.to_string())))?;
    observer.note(&format!("episode {} in {}", v.episode_id, root.display()));
    Ok(root)
}

/// Everything a drive needs besides the episode.
pub struct Driver {
    /// Where the workflow's modules are found.
    pub search: SearchPath,
    /// The project's versioned state.
    pub states: States,
    /// The project's root (frames name files from it).
    pub project_root: PathBuf,
    /// The model, for the modules and CODER.
    pub provider: Arc<dyn Provider>,
    /// What replies cost.
    pub prices: Arc<PriceTable>,
    /// The episode's budget (`--max-cost`, `--max-total-tokens`): every
    /// model call — each module's, each of CODER's turns, its sub-agents'
    /// and `run_module`'s — reserves against this one meter before it goes
    /// out. `None`: no limit besides CODER's own.
    pub budget: Option<Arc<noesis_llm::BudgetMeter>>,
    /// The folder CODER may change.
    pub workspace: PathBuf,
    /// The snapshots' blob folder (manifests are kept beside it).
    pub blobs: PathBuf,
    /// How long one test command may run.
    pub test_timeout: Duration,
    /// The operator's rules for CODER; each run adds the tests as commands
    /// and protects the files that judge it.
    pub permissions: Permissions,
    /// How the tests and CODER's commands are confined.
    pub sandbox: noesis_sandbox::Settings,
    /// What redacts what they print.
    pub redactor: Arc<noesis_sandbox::Redactor>,
    /// Who watches.
    pub observer: Arc<dyn Observer>,
    /// Who decides CODER's calls a rule asks about ([`NoOne`] in the CLI).
    pub approver: Arc<dyn Approver>,
}

fn now() -> String {
    noesis_frames::Timestamp::now().to_string()
}

/// Milliseconds since the Unix epoch (runs are continued by other
/// processes, so their clock is the machine's).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

impl Driver {
    fn store(&self) -> &dyn Store {
        self.states.store.as_ref()
    }

    /// Writes `ops` as the next version.
    async fn commit(&self, command: &str, ops: &[Op]) -> Result<Head, DriveError> {
        match self.states.try_step(command, |s, e| episode::apply(ops, s, e, &now())).await? {
            Ok((v, ())) => Ok(versions::head_of(&v)),
            Err(Some(e)) => Err(e.into()),
            Err(None) => Err(DriveError::Refused("the workflow state is gone (was it reset?)".into())),
        }
    }

    /// A resumed episode: one more attempt after an escalation, the hint on
    /// record.
    pub async fn resume(&self, hint: Option<&str>) -> Result<(), DriveError> {
        let mut ops = vec![Op::Reopen];
        if let Some(h) = hint {
            ops.push(Op::Record { key: "hint".into(), value: json!(h) });
            ops.push(Op::Append { key: "thought_trace".into(), value: json!({"type": "hint", "content": h}) });
        }
        self.commit("solve --resume", &ops).await.map(drop)
    }

    /// Drives the project's episode from its newest version to its end.
    pub async fn drive(&self) -> Result<(Outcome, Head), DriveError> {
        let head = self.states.head().await?.ok_or_else(|| DriveError::Refused("the workflow state is gone".into()))?;
        let mut ep = Episode::at(versions::head_of(&head));
        loop {
            match ep.next()? {
                Step::Note { text } => self.observer.note(&text),
                Step::Warn { text } => self.observer.warn(&text),
                Step::Done { outcome, head } => return Ok((outcome, head)),
                Step::Commit { command, ops } => {
                    let head = self.commit(&command, &ops).await?;
                    ep.committed(head)?;
                }
                Step::Recall { text, episodes, lessons } => {
                    let (found, learnt) = self.recall(&text, episodes, lessons).await?;
                    ep.recalled(&found, &learnt)?;
                }
                Step::RunModule { module, input } => ep.module_done(&self.module(&module, input).await?)?,
                Step::Snapshot { previous, attempt } => {
                    let (path, files) = self.snapshot(previous.as_deref(), attempt, ep.head())?;
                    ep.snapshotted(&path, files)?;
                }
                Step::RunAgent(run) => {
                    let report = self.coder(&run).await?;
                    ep.coder_done(&report)?;
                }
                Step::RunTests { set: _, commands, junit, tests, anchors } => {
                    let sandbox = self.test_sandbox(&tests, &anchors)?;
                    let junit = junit.map(PathBuf::from);
                    let mut results = Vec::new();
                    for command in &commands {
                        let runs = run_tests(
                            &sandbox,
                            &self.redactor,
                            &self.workspace,
                            std::slice::from_ref(command),
                            self.test_timeout,
                            junit.as_deref(),
                        )
                        .await?;
                        results.push(runs);
                    }
                    ep.tested(results)?;
                }
                Step::Diff { snapshot } => {
                    let snap = load_manifest(&snapshot)?;
                    ep.diffed(&snapshot::diff(&self.workspace, &snap)?)?;
                }
                Step::Restore { snapshot } => {
                    let snap = load_manifest(&snapshot)?;
                    let undone = snapshot::restore(&self.workspace, &self.blobs, &snap)?;
                    self.observer.reached("verifier-restored");
                    ep.restored(&undone)?;
                }
                Step::Remember { entries } => {
                    let count = entries.len();
                    self.remember(ep.head(), entries).await?;
                    ep.remembered(count)?;
                }
                Step::RecordFrames { outcome } => {
                    let done = self.record_frames(ep.head(), outcome).await.map_err(|e| e.to_string());
                    ep.frames_recorded(done)?;
                }
            }
        }
    }

    /// Runs a node's module on `input`; its `data`, or why not.
    async fn module(&self, name: &str, input: Value) -> Result<Value, DriveError> {
        let module = self
            .search
            .resolve(name)
            .map_err(|e| DriveError::Refused(e.to_string()))?
            .load()
            .map_err(|e| DriveError::failed(format!("module {name}"), e))?;
        let options = noesis_runtime::RunOptions {
            prices: Some(Arc::clone(&self.prices)),
            budget: self.budget.clone(),
            ..Default::default()
        };
        let record = noesis_runtime::run(&module, self.provider.as_ref(), input, &options).await;
        let envelope = record.envelope;
        if envelope["ok"] != json!(true) {
            return Err(DriveError::failed(
                format!("{name} failed"),
                format!(
                    "{} {}",
                    envelope["error"]["code"].as_str().unwrap_or("E4000"),
                    envelope["error"]["message"].as_str().unwrap_or_default()
                ),
            ));
        }
        Ok(envelope["data"].clone())
    }

    /// What earlier episodes of this project did and learnt, by `text`.
    async fn recall(&self, text: &str, episodes: u32, lessons: u32) -> Result<(Vec<Value>, Vec<String>), DriveError> {
        let query = |kind: &'static str, limit: u32| noesis_store::MemoryQuery {
            text,
            project_id: Some(&self.states.project_id),
            kind: Some(kind),
            limit,
        };
        let found = self.store().search_memory(&query("episode", episodes)).await?;
        let learnt = self.store().search_memory(&query("lesson", lessons)).await?;
        Ok((found.into_iter().map(|m| m.entry.record).collect(), learnt.into_iter().map(|m| m.entry.text).collect()))
    }

    /// CONSOLIDATOR's memory, replacing what this episode kept before.
    async fn remember(&self, head: &Head, entries: Vec<episode::Memory>) -> Result<(), DriveError> {
        let at = noesis_frames::Timestamp::now().millis();
        let entries: Vec<noesis_store::NewMemory> = entries
            .into_iter()
            .map(|m| noesis_store::NewMemory {
                project_id: self.states.project_id.clone(),
                episode_id: head.episode_id.clone(),
                kind: m.kind,
                text: m.text,
                record: m.record,
                at,
            })
            .collect();
        self.store().replace_memory(&head.episode_id, &entries).await?;
        Ok(())
    }

    /// Snapshots the workspace for `attempt`; the manifest's path and how
    /// many files it holds.
    fn snapshot(&self, previous: Option<&str>, attempt: u64, head: &Head) -> Result<(String, usize), DriveError> {
        let previous =
            previous.and_then(|p| std::fs::read(p).ok()).and_then(|b| serde_json::from_slice::<Snapshot>(&b).ok());
        let snap = snapshot::take(&self.workspace, &self.blobs, previous.as_ref())?;
        let id = head.state["episode_id"].as_str().unwrap_or("episode");
        let path = self.blobs.with_file_name(format!("{id}-{attempt}.json"));
        let bytes = serde_json::to_vec(&snap).map_err(|e| DriveError::failed(path.display().to_string(), e))?;
        std::fs::write(&path, bytes).map_err(|e| DriveError::failed(path.display().to_string(), e))?;
        Ok((path.to_string_lossy().into_owned(), snap.entries.len()))
    }

    /// The sandbox tests run in: the episode's settings, the installations
    /// of test programs named by full path readable, the judging files
    /// read-only.
    fn test_sandbox(&self, tests: &[String], anchors: &[String]) -> Result<Arc<noesis_sandbox::Sandbox>, DriveError> {
        let mut settings = self.sandbox.clone();
        let named = tests.iter().filter_map(|t| shlex::split(t).and_then(|w| w.into_iter().next()));
        for program in named.chain(self.permissions.command_programs()) {
            settings.read_extra.extend(noesis_sandbox::paths::program_root(&program));
        }
        let protected = judging_files(&self.workspace, tests, anchors);
        let sandbox = noesis_sandbox::Sandbox::new(&settings, &self.workspace, &protected)
            .map_err(|e| DriveError::failed("the test sandbox", e))?;
        Ok(Arc::new(sandbox))
    }
}

/// The files that judge CODER's work that exist in the workspace: no
/// command CODER runs may change them (read-only in its sandbox), and
/// VERIFIER runs them as they were.
fn judging_files(workspace: &Path, tests: &[String], anchors: &[String]) -> Vec<PathBuf> {
    crate::judge::judging_candidates(tests, anchors)
        .into_iter()
        .map(PathBuf::from)
        .filter(|rel| workspace.join(rel).is_file())
        .collect()
}

fn load_manifest(path: &str) -> Result<Snapshot, DriveError> {
    if path.is_empty() {
        return Err(DriveError::Refused("the episode has no snapshot on record".into()));
    }
    let what = || format!("the snapshot manifest {path}");
    let bytes = std::fs::read(path).map_err(|e| DriveError::failed(what(), e))?;
    serde_json::from_slice(&bytes).map_err(|e| DriveError::failed(what(), e))
}
