//! `noesis serve --episodes`: the server's project as `noesis-serve`'s
//! [`EpisodeHost`]: the episode's driver made from the operator's config
//! the way `noesis solve` makes it (provider, `[permissions]` and `[agent]
//! allow_commands`, `[sandbox]`, redaction, snapshots under NOESIS_HOME).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use noesis_modules::search::SearchPath;
use noesis_serve::episodes::{EpisodeHost, Episodes};
use noesis_workflow::driver::{Approver, Driver, Observer};
use noesis_workflow::versions::{self, States};

use crate::config::Config;
use crate::out;
use crate::provider::ProviderArgs;

struct ServedEpisodes {
    states: States,
    root: PathBuf,
    search: SearchPath,
    config: Config,
    provider: ProviderArgs,
    blobs: PathBuf,
}

impl EpisodeHost for ServedEpisodes {
    fn states(&self) -> &States {
        &self.states
    }

    fn project_root(&self) -> &Path {
        &self.root
    }

    fn sandbox(&self) -> noesis_sandbox::Settings {
        crate::cmd::sandbox::SandboxArgs::default().settings(&self.config)
    }

    fn driver(
        &self,
        workspace: PathBuf,
        sandbox: noesis_sandbox::Settings,
        observer: Arc<dyn Observer>,
        approver: Arc<dyn Approver>,
    ) -> Result<Driver, String> {
        let commands: Vec<(&str, &str)> =
            self.config.agent.allow_commands.iter().map(|c| (c.as_str(), "[agent] allow_commands")).collect();
        let ws = noesis_agent::Workspace::new(&workspace).map_err(|e| format!("the workspace: {e}"))?;
        let rules = super::agent::rules::RuleFlags::default();
        let permissions =
            super::agent::rules::operator(&self.config, &rules, &commands, &ws).map_err(|e| format!("{e:#}"))?;
        let provider = crate::provider::select(&self.provider, &self.config, None).map_err(|e| format!("{e:#}"))?;
        Ok(Driver {
            search: self.search.clone(),
            states: self.states.clone(),
            project_root: self.root.clone(),
            provider: super::agent::with_text_tools(provider, &self.config),
            prices: crate::provider::prices(&self.config),
            workspace,
            blobs: self.blobs.clone(),
            test_timeout: Duration::from_secs(600),
            permissions,
            sandbox,
            redactor: self.config.redactor(),
            observer,
            approver,
        })
    }
}

/// Episodes on the current folder's project, in the store in force; `None`
/// (with a warning) when the store cannot be opened.
pub(crate) fn episodes(
    rt: &tokio::runtime::Runtime,
    search: &SearchPath,
    config: Config,
    provider: ProviderArgs,
) -> anyhow::Result<Option<Arc<Episodes>>> {
    let (project, store) = match rt.block_on(crate::memory::context()) {
        Ok(c) => c,
        Err(e) => {
            out::note(&format!("warning: no episodes over HTTP (the store cannot be opened): {e:#}"));
            return Ok(None);
        }
    };
    let blobs = crate::memory::home()?.join("snapshots").join(versions::project_hash(&project.root)).join("blobs");
    let mirror = super::state::mirror_path(false, &config, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    let host = ServedEpisodes {
        states: States { store: Arc::from(store), project_id: project.project_id.clone(), mirror },
        root: project.root.clone(),
        search: search.clone(),
        config,
        provider,
        blobs,
    };
    Ok(Some(Episodes::new(Arc::new(host), noesis_agent::events::EventBus::new(1024))))
}
