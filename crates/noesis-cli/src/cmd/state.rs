//! `noesis state`: the project's CognitiveState, with imlazy's state
//! manager's commands and JSON shapes (`init`, `get`, `set`, `update`,
//! `transition`, `reset`, `dump`), kept per project in the store as
//! numbered versions (`history`, `show --at N`, `checkout N`), with the
//! transition table and the retry budget enforced. The versions and their
//! writes are `noesis-workflow`'s ([`States`]); this page answers.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::sync::Arc;

use noesis_frames::Timestamp;
use noesis_store::WorkflowVersion;
use noesis_workflow::StateError;
use noesis_workflow::versions::{self, States, project_hash};
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
        let states = States { store: Arc::from(store), project_id: project.project_id.clone(), mirror };
        let states = Commands { states: &states };
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
            Sub::Show { at } => match states.states.store.workflow_state(&states.states.project_id, at).await? {
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

/// The commands over the project's versioned state (`noesis-workflow`'s
/// [`States`]), answering as imlazy's state manager does.
struct Commands<'a> {
    states: &'a States,
}

impl Commands<'_> {
    async fn head(&self) -> anyhow::Result<Option<WorkflowVersion>> {
        Ok(self.states.head().await?)
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

    /// [`Commands::mutate`], with the refusal typed (`None`: no state yet).
    async fn try_mutate(
        &self,
        command: &str,
        op: impl Fn(&mut Value) -> Result<Value, StateError>,
    ) -> anyhow::Result<Result<Value, Option<StateError>>> {
        Ok(self.states.try_step(command, |s, _| op(s)).await?.map(|(_, v)| v))
    }

    async fn init(&self, project_hash: String, command: &str) -> anyhow::Result<Reply> {
        Ok(Reply::Ok(self.states.init(&project_hash, command).await?.state))
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
                    let command = format!("{command} (escalated)");
                    self.states.write(Some(&head), state, None, &command, "escalated".into()).await?;
                }
                e.into()
            }
            Err(Some(e)) => e.into(),
        })
    }

    async fn history(&self, as_json: bool) -> anyhow::Result<Reply> {
        let versions = self.states.store.workflow_history(&self.states.project_id).await?;
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
        let Some(old) = self.states.store.workflow_state(&self.states.project_id, Some(version)).await? else {
            return Ok(Reply::Refused(format!("no version {version} of the state")));
        };
        let v = self
            .states
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
        let status = versions::status_of(&state, "active");
        let command = format!("import {}", file.display());
        let v = self.states.replace(&command, || (state.clone(), json!({}), status.clone())).await?;
        Ok(Reply::Ok(v.state))
    }
}
