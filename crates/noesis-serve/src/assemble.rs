//! A whole server put together from what its front end decided (`noesis
//! serve`, `noesis ui`, `noesis mcp`): the providers as a
//! [`ProviderSource`], `solve` episodes on the server's project, the
//! token made for a loopback server written where only its owner can read
//! it, the agent runs a previous server left unfinished resumed, and every
//! part stopped in order when the server stops. The front end maps its
//! flags to these values and says what the server tells it ([`Said`]).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use noesis_agent::supervisor::AgentRuns;
use noesis_config::{Config, ProviderArgs};
use noesis_host::host::Note;
use noesis_host::provider::Providers;
use noesis_llm::Provider;
use noesis_modules::Module;
use noesis_modules::search::SearchPath;
use noesis_workflow::driver::{Approver, Driver, Observer};
use noesis_workflow::versions::{self, States};

use crate::episodes::{EpisodeHost, Episodes};
use crate::http::{ServeConfig, ServeError, Server};
use crate::plugins::PluginRuns;
use crate::{OnFinished, ProviderSource, RunSettings, Service, SourceError};
use noesis_runtime::compose::ComposeRecord;

/// Why an assembled server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The server itself.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The token file.
    #[error("{0}")]
    Token(String),
    /// The operator's settings (a policy that is no policy, a budget).
    #[error(transparent)]
    Host(#[from] noesis_host::HostError),
    /// The front end could not say what the server told it (stdout
    /// closed, say).
    #[error(transparent)]
    Said(std::io::Error),
}

/// A server's providers as [`Service`] takes them: a request's choice
/// outside the allow-list is refused, any other failure is the provider's.
pub struct Served(pub Arc<Providers>);

impl ProviderSource for Served {
    fn provider(
        &self,
        name: Option<&str>,
        model: Option<&str>,
        module: &Module,
    ) -> Result<Arc<dyn Provider>, SourceError> {
        self.0.for_module(name, model, module).map_err(|e| match e {
            noesis_host::HostError::NotAllowed(m) => SourceError::NotAllowed(m),
            other => SourceError::Unavailable(other.to_string()),
        })
    }
}

/// What every run of a server gets from its operator.
pub struct Operator<'a> {
    /// The operator's settings.
    pub config: &'a Config,
    /// The operator's provider flags (their budget is every run's).
    pub flags: &'a ProviderArgs,
    /// Policies granted every module besides `[policies] allow`.
    pub allow: &'a [String],
    /// Where emitted context is kept (none: not kept).
    pub context: Option<noesis_runtime::ContextOptions>,
    /// Where finished runs are recorded as frames (none: not recorded).
    pub writer: Option<Arc<noesis_plugins::recorder::FrameWriter>>,
    /// Times an invalid reply is sent back for another try.
    pub reask: u32,
    /// Cap on output tokens.
    pub max_tokens: Option<u32>,
}

/// The settings every run of the server uses; with a writer, each
/// finished run is queued to it (the answer never waits for the store).
///
/// # Errors
/// A granted policy that is no policy name, or a budget that is no budget.
pub fn settings(o: Operator<'_>) -> Result<RunSettings, AssembleError> {
    let on_finished = o.writer.map(|writer| {
        OnFinished(Arc::new(move |module: &Module, input: &serde_json::Value, record: &ComposeRecord| {
            let pending = noesis_plugins::runs::Pending::new(&module.name, input, Vec::new());
            writer.record(pending, record.envelope.clone(), record.steps.clone());
        }))
    });
    Ok(RunSettings {
        allow: noesis_config::granted(o.config, o.allow).map_err(noesis_host::HostError::from)?,
        context: o.context,
        on_finished,
        reask: o.reask,
        max_tokens: o.max_tokens,
        budget: noesis_host::provider::budget(o.flags, o.config)?.map(|m| m.budget()),
        prices: Some(noesis_host::provider::prices(o.config)),
    })
}

/// Checks `[serve] allow_hosts` as the server will, naming the file that
/// gave the list (a closer file's list replaces the others').
pub fn check_allow_hosts(loaded: &noesis_config::Loaded) -> Result<(), String> {
    let from = loaded.files.iter().rev().find(|f| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|text| noesis_config::parse(f, &text).ok())
            .is_some_and(|c| !c.serve.allow_hosts.is_empty())
    });
    for (i, h) in loaded.config.serve.allow_hosts.iter().enumerate() {
        if let Err(e) = crate::access::host_name(h) {
            let file = from.map(|f| format!("{}: ", f.display())).unwrap_or_default();
            return Err(format!("{file}serve.allow_hosts[{i}]: {e}"));
        }
    }
    Ok(())
}

/// Where a server without a given token keeps the token it made:
/// `HOME/serve/ADDR-PORT.token` (`HOME`: `$NOESIS_HOME`), named after the
/// port so two servers never share one.
pub fn token_file(home: &Path, addr: SocketAddr) -> PathBuf {
    let name = format!("{}-{}.token", addr.ip().to_string().replace(':', "_"), addr.port());
    home.join("serve").join(name)
}

/// Writes `token` to `path`, created fresh with mode 0600 in a folder only
/// its owner can enter.
pub fn write_token(path: &Path, token: &str) -> Result<(), String> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(path);
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| format!("{}: cannot create the folder: {e}", dir.display()))?;
    // A stale file (a server killed earlier) may have other permissions:
    // start from nothing rather than inherit them.
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| format!("{}: cannot write the token: {e}", path.display()))?;
    file.write_all(token.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .map_err(|e| format!("{}: cannot write the token: {e}", path.display()))
}

/// The opt-in parts of a server, each `None` when off (or when the store
/// could not be opened).
#[derive(Default)]
pub struct Parts {
    /// Agent runs (`--agents`, and read-only otherwise).
    pub agents: Option<Arc<AgentRuns>>,
    /// The frame plugins (`--plugins`).
    pub plugins: Option<Arc<PluginRuns>>,
    /// `solve` episodes (`--episodes`); off: `POST /episodes` answers 403.
    pub episodes: Option<Arc<Episodes>>,
}

impl Parts {
    /// `config` with the parts' routes.
    pub fn routes(&self, config: ServeConfig) -> ServeConfig {
        ServeConfig {
            agents: self.agents.as_ref().map(crate::agents::router),
            plugins: self.plugins.as_ref().map(PluginRuns::router),
            episodes: Some(self.episodes.as_ref().map_or_else(crate::episodes::off, crate::episodes::router)),
            ..config
        }
    }

    /// Stops every part: plugin runs, agent runs (stopped as cancelled and
    /// marked, so the next server resumes them) and episodes (resumable
    /// from their last version).
    pub async fn shutdown(&self) {
        if let Some(plugins) = &self.plugins {
            plugins.shutdown();
        }
        if let Some(agents) = &self.agents {
            agents.shutdown().await;
        }
        if let Some(episodes) = &self.episodes {
            episodes.shutdown().await;
        }
    }
}

/// What a starting server tells its front end, in this order.
pub enum Said<'a> {
    /// This many agent runs the last server left unfinished are resumed.
    Resuming(usize),
    /// They could not be resumed: why.
    NotResumed(String),
    /// The token made for this server is in this file.
    TokenAt(&'a Path),
    /// Listening: requests are served from now on.
    Listening(&'a Server),
}

/// The token of a server: given, or made here for a loopback server and
/// written under `home` once the port is known.
pub enum Token {
    /// Given by the operator (or none: the server refuses what needs one).
    Given(Option<String>),
    /// Made for this server, to be written under this home.
    Made {
        /// The token.
        token: String,
        /// `$NOESIS_HOME`, where it is written (none: refused).
        home: Option<PathBuf>,
    },
}

/// Serves `service` with `config` (its routes, the parts' routes and the
/// token already set) and `parts` until `shutdown`; then stops the parts
/// and removes the token file it wrote.
pub async fn serve(
    service: Arc<Service>,
    config: ServeConfig,
    parts: &Parts,
    token: &Token,
    say: &(dyn Fn(Said<'_>) -> std::io::Result<()> + Sync),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AssembleError> {
    let server = Server::bind(service, config).await?;
    // Named after the port, so it is written once the port is known.
    let token_at = match token {
        Token::Made { token, home } => {
            let Some(home) = home else {
                return Err(AssembleError::Token(
                    "no place for the server's token (set NOESIS_HOME or HOME), or pass --token".into(),
                ));
            };
            let path = token_file(home, server.local_addr());
            write_token(&path, token).map_err(AssembleError::Token)?;
            Some(path)
        }
        Token::Given(_) => None,
    };
    if let Some(agents) = parts.agents.as_ref().filter(|a| a.serves_http()) {
        match agents.resume_unfinished().await {
            Ok(0) => {}
            Ok(n) => say(Said::Resuming(n)).map_err(AssembleError::Said)?,
            Err(e) => say(Said::NotResumed(e.to_string())).map_err(AssembleError::Said)?,
        }
    }
    if let Some(path) = &token_at {
        // Said before "listening", so whoever waits for that line has it.
        say(Said::TokenAt(path)).map_err(AssembleError::Said)?;
    }
    say(Said::Listening(&server)).map_err(AssembleError::Said)?;
    server.run(shutdown).await?;
    if let Some(path) = &token_at {
        let _ = std::fs::remove_file(path);
    }
    parts.shutdown().await;
    Ok(())
}

/// What `solve` episodes of a server are made from.
pub struct EpisodeSetup {
    /// Where modules are found.
    pub search: SearchPath,
    /// The store in force.
    pub store: Arc<dyn noesis_store::Store>,
    /// The server's project.
    pub project: noesis_frames::project::Project,
    /// The operator's settings.
    pub config: Config,
    /// The operator's provider flags.
    pub provider: ProviderArgs,
    /// `$NOESIS_HOME`: the snapshots go under it.
    pub home: PathBuf,
    /// imlazy's state file to mirror the state to, if asked.
    pub mirror: Option<PathBuf>,
    /// How the episodes' commands are confined.
    pub sandbox: noesis_sandbox::Settings,
    /// Where remarks go (the local model used for want of another).
    pub note: Note,
}

/// Episodes on the server's project, each driven the way `noesis solve`
/// drives one (provider, `[permissions]` and `[agent] allow_commands`,
/// `[sandbox]`, redaction, snapshots under `$NOESIS_HOME`).
pub fn episodes(setup: EpisodeSetup) -> Arc<Episodes> {
    let blobs = snapshots(&setup.home, &setup.project.root);
    let host = ServedEpisodes {
        states: States { store: setup.store, project_id: setup.project.project_id.clone(), mirror: setup.mirror },
        root: setup.project.root.clone(),
        search: setup.search,
        config: setup.config,
        provider: setup.provider,
        blobs,
        sandbox: setup.sandbox,
        note: setup.note,
    };
    Episodes::new(Arc::new(host), noesis_agent::events::EventBus::new(1024))
}

/// Where the snapshots of the project at `root` are kept.
fn snapshots(home: &Path, root: &Path) -> PathBuf {
    home.join("snapshots").join(versions::project_hash(root)).join("blobs")
}

struct ServedEpisodes {
    states: States,
    root: PathBuf,
    search: SearchPath,
    config: Config,
    provider: ProviderArgs,
    blobs: PathBuf,
    sandbox: noesis_sandbox::Settings,
    note: Note,
}

impl EpisodeHost for ServedEpisodes {
    fn states(&self) -> &States {
        &self.states
    }

    fn project_root(&self) -> &Path {
        &self.root
    }

    fn sandbox(&self) -> noesis_sandbox::Settings {
        self.sandbox.clone()
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
        let rules = noesis_host::rules::RuleFlags::default();
        let permissions =
            noesis_host::rules::operator(&self.config, &rules, &commands, &ws).map_err(|e| noesis_host::chain(&e))?;
        let provider = noesis_host::provider::select(&self.provider, &self.config, None, &|m| (self.note)(m))
            .map_err(|e| noesis_host::chain(&e))?;
        Ok(Driver {
            search: self.search.clone(),
            states: self.states.clone(),
            project_root: self.root.clone(),
            provider: noesis_host::provider::with_text_tools(provider, &self.config),
            prices: noesis_host::provider::prices(&self.config),
            // A meter per episode driven.
            budget: noesis_host::provider::budget(&self.provider, &self.config).map_err(|e| noesis_host::chain(&e))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_is_named_after_the_address_and_port() {
        let home = Path::new("/h");
        assert_eq!(token_file(home, "127.0.0.1:8787".parse().unwrap()), Path::new("/h/serve/127.0.0.1-8787.token"));
        assert_eq!(token_file(home, "[::1]:9".parse().unwrap()), Path::new("/h/serve/__1-9.token"));
    }

    #[test]
    fn the_token_is_written_fresh_and_readable_by_its_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve").join("t.token");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "stale").unwrap();
        write_token(&path, "secret").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let e = write_token(&blocked.join("t.token"), "x").unwrap_err();
        assert!(e.contains("cannot create the folder"), "{e}");
    }

    #[test]
    fn a_bad_allowed_host_is_named_with_its_index() {
        let mut loaded = noesis_config::Loaded::default();
        loaded.config.serve.allow_hosts = vec!["ok.example".into(), "not a host".into()];
        let e = check_allow_hosts(&loaded).unwrap_err();
        assert!(e.starts_with("serve.allow_hosts[1]: "), "{e}");
        loaded.config.serve.allow_hosts.pop();
        assert_eq!(check_allow_hosts(&loaded), Ok(()));
    }

    #[test]
    fn the_operators_settings_grant_policies_and_a_budget() {
        let mut config = Config::default();
        config.policies.allow = vec!["network".into()];
        let flags = ProviderArgs { max_cost: Some(2.0), ..ProviderArgs::default() };
        let allow = ["side_effects".to_owned()];
        let granted = Operator {
            config: &config,
            flags: &flags,
            allow: &allow,
            context: None,
            writer: None,
            reask: 2,
            max_tokens: Some(9),
        };
        let s = settings(granted).unwrap();
        assert_eq!(s.allow, ["network", "side_effects"]);
        assert_eq!((s.reask, s.max_tokens, s.on_finished.is_none()), (2, Some(9), true));
        assert!(s.budget.is_some());
        let bad = ProviderArgs { max_cost: Some(-1.0), ..ProviderArgs::default() };
        let refused = Operator {
            config: &config,
            flags: &bad,
            allow: &[],
            context: None,
            writer: None,
            reask: 0,
            max_tokens: None,
        };
        assert!(settings(refused).is_err());
    }

    #[test]
    fn snapshots_are_kept_per_project_under_home() {
        let s = snapshots(Path::new("/h"), Path::new("/p"));
        assert_eq!(s, Path::new("/h/snapshots").join(versions::project_hash(Path::new("/p"))).join("blobs"));
    }
}
