//! `noesis state`: the project's CognitiveState, with imlazy's state
//! manager's commands and JSON shapes (`init`, `get`, `set`, `update`,
//! `transition`, `reset`, `dump`), kept per project in the store as
//! numbered versions (`history`, `show --at N`, `checkout N`), with the
//! transition table and the retry budget enforced. The versions, their
//! writes and the commands are `noesis-workflow`'s; this page prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use noesis_frames::Timestamp;
use noesis_store::WorkflowVersion;
use noesis_workflow::commands::{self, Commands, Reply, imlazy_file};
use noesis_workflow::versions::{States, project_hash};

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
        anyhow::Ok(Some(match a.command {
            Sub::Init { project_hash } => states.init(&project_hash.unwrap_or_else(hash), "init").await?,
            Sub::Reset => states.reset(hash).await?,
            Sub::Get { key } => states.get(key.as_deref()).await?,
            Sub::Dump => states.dump().await?,
            Sub::Set { key, value } => states.set(&key, &value).await?,
            Sub::Update { key, value } => states.update(&key, &value).await?,
            Sub::Transition { node } => states.transition(&node).await?,
            Sub::History { json } => {
                history(&states.history().await?, json)?;
                return Ok(None);
            }
            Sub::Show { at } => states.show(at).await?,
            Sub::Checkout { number } => states.checkout(number).await?,
            Sub::Import { file } => {
                let file = match file.or_else(|| imlazy_file(&env)) {
                    Some(f) => f,
                    None => anyhow::bail!("no file given and no home folder to find ~/.imlazy/working/state.json in"),
                };
                states.import(&file).await?
            }
        }))
    })?;
    let Some(reply) = reply else { return Ok(ExitCode::SUCCESS) };
    out::json(&reply.to_json(), true)?;
    Ok(match reply {
        Reply::Ok(_) => ExitCode::SUCCESS,
        Reply::Refused(_) => ExitCode::from(1),
    })
}

/// Where to mirror the state for imlazy's hooks (see
/// [`noesis_workflow::commands::mirror_path`]), from the flag and the config.
pub(crate) fn mirror_path(
    flag: bool,
    config: &crate::config::Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    commands::mirror_path(flag, config.workflow.mirror_imlazy, config.workflow.imlazy_state.clone(), env)
}

/// Every version: number, time, episode, node, status and what made it.
fn history(versions: &[WorkflowVersion], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        out::json(&commands::history_json(versions), true)?;
        return Ok(());
    }
    if versions.is_empty() {
        out::note("no state yet: `noesis state init` starts an episode");
        return Ok(());
    }
    let mut text = String::new();
    for v in versions {
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
    Ok(())
}
