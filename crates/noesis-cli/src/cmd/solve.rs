//! `noesis solve "TASK" --test "CMD"…`: the verified coding workflow over
//! the project's CognitiveState. The episode and its driver live in
//! `noesis-workflow`; this page parses the flags, builds the driver from the
//! config and prints how the episode ended.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use noesis_agent::Workspace;
use noesis_modules::search::SearchPath;
use noesis_store::Store;
use noesis_workflow::driver::{self, Begin, Driver, Observer};
use noesis_workflow::episode::{EXIT_ESCALATED, Outcome};
use noesis_workflow::versions::{self, States};
use serde_json::json;

use crate::out;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// What to do, e.g. "make the failing test in tests/test_calc.py pass".
    task: Option<String>,
    /// A test command, run with `sh -c` in the workspace (repeatable); exit 0 passes.
    #[arg(long = "test", value_name = "CMD")]
    tests: Vec<String>,
    /// A JUnit XML report the test commands write (relative to the workspace),
    /// read after each command that updated it, so results are per test case
    /// (pytest is asked for one without it).
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// The folder CODER may change [default: the current one].
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Continue the project's unfinished or escalated episode.
    #[arg(long)]
    resume: bool,
    /// Advice for the next attempt (with --resume after an escalation).
    #[arg(long, value_name = "TEXT", requires = "resume")]
    hint: Option<String>,
    /// Attempts REFLECTOR may route back before the episode escalates [default: 3].
    #[arg(long, value_name = "N")]
    max_retries: Option<u64>,
    /// Seconds one test command may run.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    test_timeout: u64,
    /// Print the final state and outcome as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    sandbox: crate::cmd::sandbox::SandboxArgs,
    #[command(flatten)]
    rules: super::agent::rules::RuleFlags,
    #[command(flatten)]
    provider: crate::provider::ProviderArgs,
}

/// Progress on stderr (unless quiet), CODER's steps indented under it, and
/// the crash tests' stop points.
struct Stderr {
    quiet: bool,
}

impl Observer for Stderr {
    fn note(&self, text: &str) {
        if !self.quiet {
            out::note(text);
        }
    }

    fn warn(&self, text: &str) {
        out::note(text);
    }

    fn agent(&self, run_id: &str, progress: &noesis_agent::Progress) {
        super::agent::progress_notes(self.quiet, run_id, "    ")(progress);
    }

    fn reached(&self, point: &str) {
        crate::stop::point(point);
    }
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let config = crate::config::load(&env, &cwd)?.config;
    let rt = crate::memory::runtime()?;
    rt.block_on(async {
        let (project, store) = crate::memory::context().await?;
        let store: Arc<dyn Store> = Arc::from(store);
        let mirror = super::state::mirror_path(false, &config, &env);
        let states = States { store, project_id: project.project_id.clone(), mirror };
        let head = states.head().await?.map(|v| versions::head_of(&v));
        let sandbox = driver::sandbox_settings(head.as_ref(), a.resume, || a.sandbox.settings(&config))?;
        crate::cmd::sandbox::warn_if_off(&sandbox, a.quiet);
        let observer = Arc::new(Stderr { quiet: a.quiet });
        let begin = if a.resume {
            Begin::Resume { hint: a.hint.clone() }
        } else {
            Begin::New {
                task: a.task.clone().unwrap_or_default(),
                tests: a.tests.clone(),
                junit: a.junit.as_ref().map(|p| p.to_string_lossy().into_owned()),
                workspace: a.workspace.clone().unwrap_or(cwd.clone()),
                max_retries: a.max_retries,
            }
        };
        let workspace = driver::open(&states, &project.root, &begin, &sandbox, observer.as_ref()).await?;
        let commands: Vec<(&str, &str)> =
            config.agent.allow_commands.iter().map(|c| (c.as_str(), "[agent] allow_commands")).collect();
        let ws = Workspace::new(&workspace).with_context(|| format!("the workspace {}", workspace.display()))?;
        let permissions = super::agent::rules::operator(&config, &a.rules, &commands, &ws)?;
        let blobs = crate::memory::home()?.join("snapshots").join(versions::project_hash(&project.root)).join("blobs");
        let provider = super::agent::with_text_tools(crate::provider::select(&a.provider, &config, None)?, &config);
        if let Some(w) = noesis_host::provider::unpriced_warning(&a.provider, &config, provider.as_ref()) {
            crate::out::note(&w);
        }
        let driver = Driver {
            search: search.clone(),
            states,
            project_root: project.root.clone(),
            provider,
            prices: crate::provider::prices(&config),
            budget: crate::provider::budget(&a.provider, &config)?,
            workspace,
            blobs,
            test_timeout: Duration::from_secs(a.test_timeout),
            permissions,
            sandbox,
            redactor: config.redactor(),
            observer,
            approver: Arc::new(driver::NoOne),
        };
        if let Begin::Resume { hint } = &begin {
            driver.resume(hint.as_deref()).await?;
        }
        let (outcome, head) = driver.drive().await?;
        if a.json {
            out::json(
                &json!({"outcome": outcome.as_str(), "episode_id": head.episode_id, "version": head.version,
                        "state": head.state}),
                true,
            )?;
        } else if outcome == Outcome::Escalated {
            out::data(&noesis_workflow::judge::escalation_report(&head.state, &head.episode))?;
        } else {
            out::data(&noesis_workflow::judge::solved_line(&head.state))?;
        }
        Ok(match outcome {
            Outcome::Solved => ExitCode::SUCCESS,
            Outcome::Escalated => ExitCode::from(EXIT_ESCALATED),
        })
    })
}
