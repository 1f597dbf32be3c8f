//! `noesis state`: the project's CognitiveState, with imlazy's state
//! manager's commands and JSON shapes (`init`, `get`, `set`, `update`,
//! `transition`, `reset`, `dump`), kept per project in the store as
//! numbered versions (`history`, `show --at N`, `checkout N`), with the
//! transition table and the retry budget enforced.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use noesis_frames::Timestamp;
use noesis_store::{Store, StoreError, WorkflowVersion};
use noesis_workflow::{Node, StateError};
use serde_json::{Value, json};

use crate::memory;
use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Sub,
    /// Rewrite imlazy's state file (`~/.imlazy/working/state.json`, or
    /// `[workflow] imlazy_state`) after every change, atomically, so its
    /// hooks read a current state (also `[workflow] mirror_imlazy = true`).
    #[arg(long, global = true)]
    mirror_imlazy: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Start a new episode (the previous versions stay in the history).
    Init {
        /// The project hash to record (default: from the project's root).
        #[arg(long, value_name = "H")]
        project_hash: Option<String>,
    },
    /// Print the state, or `{"key", "value"}` of KEY.PATH.
    Get {
        /// A dotted path, e.g. `problem_reflection.goal`.
        key: Option<String>,
    },
    /// Set KEY.PATH to VALUE (JSON when it starts with `[` or `{`).
    Set {
        /// A dotted path.
        key: String,
        /// The value.
        value: String,
    },
    /// Append VALUE to the list at LIST.PATH.
    Update {
        /// A dotted path to a list.
        key: String,
        /// The value (JSON when it starts with `[` or `{`).
        value: String,
    },
    /// Move to NODE when the transition table allows it (REFLECTOR spends a retry).
    Transition {
        /// PLANNER, REASONER, CODER, VERIFIER, REFLECTOR or CONSOLIDATOR.
        node: String,
    },
    /// A new episode for the same project hash.
    Reset,
    /// Print the whole state.
    Dump,
    /// Every version: number, time, episode, node, status and what made it.
    History {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the state as it was at version N (default: the head).
    Show {
        /// The version.
        #[arg(long, value_name = "N")]
        at: Option<i64>,
    },
    /// Make version N's state the new head (the history is kept).
    Checkout {
        /// The version.
        #[arg(value_name = "N")]
        number: i64,
    },
    /// Bring in a state file written by imlazy (default `~/.imlazy/working/state.json`).
    Import {
        /// The file.
        file: Option<PathBuf>,
    },
}

/// How a command ends: a JSON result on stdout, exit 0, or imlazy's
/// `{"error": …}` on stdout, exit 1.
pub(crate) enum Reply {
    Ok(Value),
    Refused(String),
    /// Printed already (a listing).
    Printed,
}

impl From<StateError> for Reply {
    fn from(e: StateError) -> Reply {
        Reply::Refused(e.to_string())
    }
}

const NO_STATE: &str = "No active state. Run 'init' first.";

pub(crate) fn run(a: Args) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &cwd)?.config;
    let mirror = mirror_path(a.mirror_imlazy, &config, &env);
    let rt = memory::runtime()?;
    let reply = rt.block_on(async {
        let (project, store) = memory::context().await?;
        let states = States { store: store.as_ref(), project_id: &project.project_id, mirror: mirror.as_deref() };
        let hash = || project_hash(&project.root);
        anyhow::Ok(match a.command {
            Sub::Init { project_hash } => states.init(project_hash.unwrap_or_else(hash), "init").await?,
            Sub::Reset => {
                let kept = states.head().await?.and_then(|h| h.state["project_hash"].as_str().map(str::to_owned));
                states.init(kept.unwrap_or_else(hash), "reset").await?
            }
            Sub::Get { key } => states.get(key.as_deref()).await?,
            Sub::Dump => match states.head().await? {
                Some(h) => Reply::Ok(h.state),
                None => Reply::Refused("No active state".into()),
            },
            Sub::Set { key, value } => {
                let value = noesis_workflow::parse_value(&value);
                let shown = value.clone();
                states
                    .mutate(&format!("set {key}"), |s| {
                        noesis_workflow::set(s, &key, value.clone())?;
                        Ok(json!({"success": true, "key": key, "value": shown}))
                    })
                    .await?
            }
            Sub::Update { key, value } => {
                let value = noesis_workflow::parse_value(&value);
                let shown = value.clone();
                states
                    .mutate(&format!("update {key}"), |s| {
                        noesis_workflow::append(s, &key, value.clone())?;
                        Ok(json!({"success": true, "key": key, "appended": shown}))
                    })
                    .await?
            }
            Sub::Transition { node } => states.transition(&node).await?,
            Sub::History { json } => states.history(json).await?,
            Sub::Show { at } => match states.store.workflow_state(states.project_id, at).await? {
                Some(v) => Reply::Ok(v.state),
                None if at.is_some() => Reply::Refused(format!("no version {} of the state", at.unwrap_or_default())),
                None => Reply::Refused(NO_STATE.into()),
            },
            Sub::Checkout { number } => states.checkout(number).await?,
            Sub::Import { file } => {
                let file = match file.or_else(|| imlazy_file(&env)) {
                    Some(f) => f,
                    None => anyhow::bail!("no file given and no home folder to find ~/.imlazy/working/state.json in"),
                };
                states.import(&file).await?
            }
        })
    })?;
    match reply {
        Reply::Ok(v) => {
            out::json(&v, true)?;
            Ok(ExitCode::SUCCESS)
        }
        Reply::Refused(e) => {
            out::json(&json!({"error": e}), true)?;
            Ok(ExitCode::from(1))
        }
        Reply::Printed => Ok(ExitCode::SUCCESS),
    }
}

/// Where to mirror the state for imlazy's hooks, when asked (by the flag or
/// `[workflow] mirror_imlazy`): `[workflow] imlazy_state`, else imlazy's own file.
pub(crate) fn mirror_path(
    flag: bool,
    config: &crate::config::Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    (flag || config.workflow.mirror_imlazy == Some(true))
        .then(|| config.workflow.imlazy_state.clone().or_else(|| imlazy_file(env)))
        .flatten()
}

/// imlazy's state file: `~/.imlazy/working/state.json`.
fn imlazy_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("HOME").map(|h| Path::new(&h).join(".imlazy").join("working").join("state.json"))
}

/// Eight hex digits naming the project, as imlazy's field holds.
pub(crate) fn project_hash(root: &Path) -> String {
    blake3::hash(root.to_string_lossy().as_bytes()).to_hex()[..8].to_owned()
}

/// Eight random hex digits (a v7 UUID's tail: its head is the clock).
fn episode_id() -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    id[id.len() - 8..].to_owned()
}

/// The episode's status after a version: archived once consolidated.
fn status_of(state: &Value, previous: &str) -> String {
    match noesis_workflow::current(state) {
        Ok(Node::Consolidator) => "archived".into(),
        _ if previous == "archived" => "active".into(),
        _ => previous.to_owned(),
    }
}

/// The project's state in the store: versioned writes, retried on the new
/// head when another writer got there first (`noesis solve` uses it too).
pub(crate) struct States<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) project_id: &'a str,
    pub(crate) mirror: Option<&'a Path>,
}

/// How often a writer that lost the race to another reads the new head
/// and tries again before giving up.
const ATTEMPTS: u32 = 200;

impl States<'_> {
    pub(crate) async fn head(&self) -> Result<Option<WorkflowVersion>, StoreError> {
        self.store.workflow_state(self.project_id, None).await
    }

    /// Writes `state` (and `episode`, else the head's) as the version after
    /// `head`; `None` when another writer got there first.
    pub(crate) async fn write(
        &self,
        head: Option<&WorkflowVersion>,
        mut state: Value,
        episode: Option<Value>,
        command: &str,
        status: String,
    ) -> anyhow::Result<Option<WorkflowVersion>> {
        let now = Timestamp::now();
        state["updated_at"] = json!(now.to_string());
        let version = WorkflowVersion {
            project_id: self.project_id.to_owned(),
            version: head.map_or(1, |h| h.version + 1),
            episode_id: state["episode_id"].as_str().unwrap_or_default().to_owned(),
            node: state["current_node"].as_str().unwrap_or_default().to_owned(),
            status,
            command: command.to_owned(),
            state,
            // Kept from the head unless given: `noesis solve`'s own record.
            episode: episode.unwrap_or_else(|| head.map_or_else(|| json!({}), |h| h.episode.clone())),
            at: now.millis(),
        };
        match self.store.append_workflow_state(&version).await {
            Ok(()) => {
                if let Some(path) = self.mirror {
                    mirror(path, &version.state)?;
                }
                Ok(Some(version))
            }
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) if e.is_busy() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies `op` to the head and writes the result, again on the new
    /// head whenever another writer got there first: no update is lost.
    async fn mutate(
        &self,
        command: &str,
        op: impl Fn(&mut Value) -> Result<Value, StateError>,
    ) -> anyhow::Result<Reply> {
        Ok(match self.try_mutate(command, op).await? {
            Ok(v) => Reply::Ok(v),
            Err(Some(e)) => e.into(),
            Err(None) => Reply::Refused(NO_STATE.into()),
        })
    }

    /// [`States::mutate`], with the refusal typed (`None`: no state yet).
    async fn try_mutate(
        &self,
        command: &str,
        op: impl Fn(&mut Value) -> Result<Value, StateError>,
    ) -> anyhow::Result<Result<Value, Option<StateError>>> {
        Ok(self.try_step(command, |s, _| op(s)).await?.map(|(_, v)| v))
    }

    /// Applies `op` to the head's state and episode record and writes both
    /// as one version, again on the new head when another writer got there
    /// first; the version written and `op`'s value, or the refusal (`None`:
    /// no state yet).
    pub(crate) async fn try_step(
        &self,
        command: &str,
        op: impl Fn(&mut Value, &mut Value) -> Result<Value, StateError>,
    ) -> anyhow::Result<Result<(WorkflowVersion, Value), Option<StateError>>> {
        for attempt in 0..ATTEMPTS {
            let Some(head) = self.head().await? else { return Ok(Err(None)) };
            let mut state = head.state.clone();
            let mut episode = head.episode.clone();
            let reply = match op(&mut state, &mut episode) {
                Ok(r) => r,
                Err(e) => return Ok(Err(Some(e))),
            };
            // `noesis solve` marks an escalation in its record.
            let status = if episode.get("escalated") == Some(&json!(true)) {
                "escalated".to_owned()
            } else {
                status_of(&state, &head.status)
            };
            if let Some(v) = self.write(Some(&head), state, Some(episode), command, status).await? {
                return Ok(Ok((v, reply)));
            }
            backoff(attempt).await;
        }
        anyhow::bail!("the state kept changing under {ATTEMPTS} attempts to write `{command}`; try again")
    }

    /// Writes what `make` gives (state, episode record, status) as the
    /// next version whatever the head holds — a new episode, a checkout, an
    /// import — again on the new head when another writer got there first.
    async fn replace(
        &self,
        command: &str,
        make: impl Fn() -> (Value, Value, String),
    ) -> anyhow::Result<WorkflowVersion> {
        for attempt in 0..ATTEMPTS {
            let head = self.head().await?;
            let (state, episode, status) = make();
            if let Some(v) = self.write(head.as_ref(), state, Some(episode), command, status).await? {
                return Ok(v);
            }
            backoff(attempt).await;
        }
        anyhow::bail!("the state kept changing under {ATTEMPTS} attempts to write `{command}`; try again")
    }

    pub(crate) async fn init(&self, project_hash: String, command: &str) -> anyhow::Result<Reply> {
        let v = self
            .replace(command, || {
                let now = Timestamp::now().to_string();
                (noesis_workflow::initial(&episode_id(), &project_hash, &now), json!({}), "active".into())
            })
            .await?;
        Ok(Reply::Ok(v.state))
    }

    async fn get(&self, key: Option<&str>) -> anyhow::Result<Reply> {
        let Some(head) = self.head().await? else { return Ok(Reply::Refused(NO_STATE.into())) };
        Ok(match key {
            None => Reply::Ok(head.state),
            Some(k) => match noesis_workflow::get(&head.state, k) {
                Ok(v) => Reply::Ok(json!({"key": k, "value": v})),
                Err(e) => e.into(),
            },
        })
    }

    async fn transition(&self, node: &str) -> anyhow::Result<Reply> {
        let now = Timestamp::now().to_string();
        let command = format!("transition {}", node.trim().to_uppercase());
        let done = self
            .try_mutate(&command, |s| {
                let t = noesis_workflow::transition(s, node, &now)?;
                Ok(json!({"success": true, "from": t.from.as_str(), "to": t.to.as_str()}))
            })
            .await?;
        Ok(match done {
            Ok(v) => Reply::Ok(v),
            Err(None) => Reply::Refused(NO_STATE.into()),
            Err(Some(e @ StateError::Escalate { .. })) => {
                // The budget is spent: the episode is marked escalated (a
                // version of its own, the state otherwise unchanged).
                if let Some(head) = self.head().await?
                    && head.status != "escalated"
                {
                    let state = head.state.clone();
                    self.write(Some(&head), state, None, &format!("{command} (escalated)"), "escalated".into()).await?;
                }
                e.into()
            }
            Err(Some(e)) => e.into(),
        })
    }

    async fn history(&self, as_json: bool) -> anyhow::Result<Reply> {
        let versions = self.store.workflow_history(self.project_id).await?;
        if as_json {
            let rows: Vec<Value> = versions
                .iter()
                .map(|v| {
                    json!({"version": v.version, "at": Timestamp::from_millis(v.at).to_string(),
                           "episode_id": v.episode_id, "node": v.node, "status": v.status, "command": v.command})
                })
                .collect();
            out::json(&Value::Array(rows), true)?;
            return Ok(Reply::Printed);
        }
        if versions.is_empty() {
            out::note("no state yet: `noesis state init` starts an episode");
            return Ok(Reply::Printed);
        }
        let mut text = String::new();
        for v in &versions {
            text.push_str(&format!(
                "{:>4}  {}  {}  {:<12}  {:<9}  {}\n",
                v.version,
                Timestamp::from_millis(v.at),
                v.episode_id,
                v.node,
                v.status,
                v.command
            ));
        }
        out::data(&text)?;
        Ok(Reply::Printed)
    }

    async fn checkout(&self, version: i64) -> anyhow::Result<Reply> {
        let Some(old) = self.store.workflow_state(self.project_id, Some(version)).await? else {
            return Ok(Reply::Refused(format!("no version {version} of the state")));
        };
        let v = self
            .replace(&format!("checkout {version}"), || (old.state.clone(), old.episode.clone(), old.status.clone()))
            .await?;
        Ok(Reply::Ok(json!({"success": true, "checked_out": version, "version": v.version})))
    }

    async fn import(&self, file: &Path) -> anyhow::Result<Reply> {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => return Ok(Reply::Refused(format!("{}: {e}", file.display()))),
        };
        let state: Value = match serde_json::from_str(&text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return Ok(Reply::Refused(format!("{}: not a JSON object", file.display()))),
            Err(e) => return Ok(Reply::Refused(format!("{}: not JSON: {e}", file.display()))),
        };
        if let Err(e) = noesis_workflow::current(&state) {
            return Ok(Reply::Refused(format!("{}: current_node: {e}", file.display())));
        }
        for field in ["episode_id", "project_hash"] {
            if !state[field].is_string() {
                return Ok(Reply::Refused(format!("{}: {field} is missing or not text", file.display())));
            }
        }
        let status = status_of(&state, "active");
        let v =
            self.replace(&format!("import {}", file.display()), || (state.clone(), json!({}), status.clone())).await?;
        Ok(Reply::Ok(v.state))
    }
}

/// A short, growing, jittered pause, so writers that collided spread out.
async fn backoff(attempt: u32) {
    let jitter = u64::from(uuid::Uuid::now_v7().as_bytes()[15]) % 8;
    let ms = (2u64 << attempt.min(5)) + jitter;
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// Writes `state` to imlazy's file through a temporary file in the same
/// folder and a rename: a reader sees the old state or the new, never half.
fn mirror(path: &Path, state: &Value) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let text = serde_json::to_string_pretty(state)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(())
}
