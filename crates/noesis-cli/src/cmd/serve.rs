//! `noesis serve` and `noesis ui`: flags mapped to `noesis-serve`'s
//! assembled server (`noesis_serve::assemble`), with providers chosen the
//! way `noesis run` chooses them, and what the server says printed.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use noesis_modules::search::SearchPath;
use noesis_serve::assemble::{self, Parts, Said, Token};
use noesis_serve::http::{AccessLog, ServeConfig};
use noesis_serve::{RunSettings, Service};

use crate::config::Config;
use crate::out;
use crate::provider::env;
use crate::provider::{ProviderArgs, Providers};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on. Anything but a loopback address needs --token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port; 0 picks a free one (the address is printed on stderr).
    #[arg(long, value_name = "N", default_value_t = 8787)]
    port: u16,
    /// Bearer token every route but /health then requires. Prefer the
    /// variable: a flag is visible to other users in the process list.
    /// Without it (loopback only) reads need nothing and a token for
    /// requests that change anything is made and written to a file only
    /// you can read (named on stderr).
    #[arg(long, value_name = "T", env = "NOESIS_SERVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A host name requests may give besides the loopback names and the
    /// bound address (repeatable; `[serve] allow_hosts` in noesis.toml too).
    /// Any other `Host` is refused (421) before a route runs: no web page
    /// can reach the server by pointing its own name at it.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
    /// Let clients start, decide, cancel and resume agent runs over HTTP
    /// (`/agents/runs`, the dashboard's run pages). Off: those answer 403.
    #[arg(long)]
    agents: bool,
    /// Let clients run the frame plugins (docs, review, testgen) on the
    /// current project over HTTP (`/plugins/{name}`, progress as SSE).
    #[arg(long)]
    plugins: bool,
    /// Let clients start and steer `solve` episodes on this project over
    /// HTTP (`POST /episodes`). Off: that answers 403.
    #[arg(long)]
    episodes: bool,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Largest request body accepted, in bytes (a larger one is 413).
    #[arg(long, value_name = "BYTES", default_value_t = noesis_serve::http::DEFAULT_MAX_BODY)]
    max_body: usize,
    /// Seconds runs may go on after Ctrl-C/SIGTERM before they are cancelled.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    grace: u64,
    /// Log each request (method, path, status, time) on stderr.
    #[arg(long)]
    access_log: bool,
    #[command(flatten)]
    host: HostArgs,
}

/// What every run of a server (`serve`, `mcp`) gets from its operator: the
/// default provider, limits and grants; a client cannot ask for more.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HostArgs {
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    /// Cap on output tokens for every run.
    #[arg(long, value_name = "N")]
    pub(crate) max_tokens: Option<u32>,
    /// Times an invalid reply is sent back with its violations for another try.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) reask: u32,
    /// Grant every module a server runs these policies (network, filesystem_write,
    /// side_effects, code_execution, or a module's own; added to `[policies]
    /// allow` in noesis.toml). A request cannot grant any.
    #[arg(long = "allow", value_name = "POLICY[,POLICY…]", value_delimiter = ',')]
    pub(crate) allow: Vec<String>,
    /// Keep the context modules emit (`context.emits`) in the store and
    /// serve it to later runs, as `noesis run` does. Off by default: one
    /// store serves every client, and an entry is per user or session only
    /// when the module's `key_pattern` names `${user_id}` or `${session_id}`.
    #[arg(long)]
    pub(crate) keep_context: bool,
    /// Record every finished run as a frame, its composition steps as child
    /// frames, in the store in force (as `noesis run` does). Off by default:
    /// a store write per request costs throughput.
    #[arg(long)]
    pub(crate) frames: bool,
    /// A provider (and model) requests may choose besides the default:
    /// `openai:gpt-4o`, `anthropic:*` (any model), repeatable. Without any,
    /// requests may only use the default provider and model; the rest is
    /// refused with 403 (E4007), since runs are billed to the operator's keys.
    #[arg(long = "allow-model", value_name = "PROVIDER[:MODEL]")]
    pub(crate) allow_model: Vec<String>,
    /// The loosest approval policy an agent run may have: `ask` (default:
    /// calls that change anything wait for a decision), `auto` or `never`
    /// [default: `[agent] approve`, else ask]. A request may ask for a
    /// stricter one, never a looser one.
    #[arg(long, value_name = "POLICY", value_parser = ["ask", "auto", "never"])]
    pub(crate) approve: Option<String>,
    /// Most agent runs live at once; a start beyond is refused (429).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) max_runs: u16,
}

impl HostArgs {
    /// What agent runs get at most, and how many may be live: the
    /// operator's `--approve` (else `[agent] approve`, else ask), `[agent]
    /// max_iterations` and `[budget]`.
    pub(crate) fn runs_policy(&self, config: &Config, http: bool) -> anyhow::Result<noesis_serve::agents::RunsPolicy> {
        Ok(noesis_host::served::runs_policy(self.approve.as_deref(), config, http, usize::from(self.max_runs))?)
    }

    /// The frame writer `--frames` asks for: one thread, one store.
    pub(crate) fn frame_writer(&self) -> Option<Arc<crate::memory::FrameWriter>> {
        self.frames.then(|| Arc::new(crate::memory::frame_writer()))
    }

    /// The server's providers: requests choose only among the operator's
    /// default and what `--allow-model` / `[serve] allow_models` allow.
    pub(crate) fn providers(&self, config: Config) -> anyhow::Result<Providers> {
        Ok(Providers::for_operator(self.provider.clone(), config, &self.allow_model)?)
    }

    /// The settings every run of the server uses; with `--frames`, finished
    /// runs go to `writer` (see [`HostArgs::frame_writer`]).
    pub(crate) fn settings(
        &self,
        config: &Config,
        writer: Option<Arc<crate::memory::FrameWriter>>,
    ) -> anyhow::Result<RunSettings> {
        Ok(assemble::settings(assemble::Operator {
            config,
            flags: &self.provider,
            allow: &self.allow,
            context: self.keep_context.then(crate::memory::ProjectContext::options),
            writer,
            reask: self.reask,
            max_tokens: self.max_tokens,
        })?)
    }
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    serve(search, a, false)
}

/// `noesis ui`: the dashboard (and the API) on a loopback port, its URL on
/// stdout; no provider is needed to look at frames.
#[derive(Debug, clap::Args)]
pub(crate) struct UiArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, value_name = "N", default_value_t = 8788)]
    port: u16,
    /// A host name requests may give besides the loopback names (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
    /// Let the run pages decide, cancel and resume agent runs.
    #[arg(long)]
    agents: bool,
    #[command(flatten)]
    host: HostArgs,
}

pub(crate) fn ui(search: &SearchPath, a: UiArgs) -> anyhow::Result<ExitCode> {
    let args = Args {
        bind: IpAddr::from([127, 0, 0, 1]),
        port: a.port,
        token: None,
        allow_host: a.allow_host,
        agents: a.agents,
        plugins: false,
        episodes: false,
        tls_cert: None,
        tls_key: None,
        max_body: noesis_serve::http::DEFAULT_MAX_BODY,
        grace: 2,
        access_log: false,
        host: a.host,
    };
    serve(search, args, true)
}

/// The served modules as the dashboard shows them: the service's own
/// list, info and run.
struct ServedModules(Arc<Service>);

impl noesis_dashboard::Modules for ServedModules {
    fn list(&self) -> Vec<serde_json::Value> {
        self.0.list().into_iter().filter_map(|m| serde_json::to_value(m).ok()).collect()
    }

    fn info(&self, name: &str) -> Result<serde_json::Value, serde_json::Value> {
        self.0.info(name)
    }

    fn run(&self, name: &str, input: serde_json::Value) -> noesis_dashboard::ModuleRun {
        let service = Arc::clone(&self.0);
        let request = noesis_serve::RunRequest { module: name.to_owned(), input: Some(input), ..Default::default() };
        Box::pin(async move { service.run(request, None, None).await })
    }
}

/// The dashboard over the store in force and the current project; `None`
/// (with a warning) when the store cannot be opened.
fn dashboard(
    rt: &tokio::runtime::Runtime,
    service: &Arc<Service>,
    agents: Option<&Arc<noesis_serve::agents::AgentRuns>>,
    episodes: Option<&Arc<noesis_serve::episodes::Episodes>>,
) -> Option<axum::Router> {
    match rt.block_on(crate::memory::context()) {
        Ok((project, store)) => Some(noesis_dashboard::router(noesis_dashboard::Dashboard {
            store: Arc::from(store),
            project_id: project.project_id,
            modules: Some(Arc::new(ServedModules(Arc::clone(service)))),
            agents: agents.cloned(),
            episodes: episodes.cloned(),
        })),
        Err(e) => {
            out::note(&format!("warning: no dashboard at / (the frame store cannot be opened): {e:#}"));
            None
        }
    }
}

fn serve(search: &SearchPath, a: Args, ui: bool) -> anyhow::Result<ExitCode> {
    let loaded = crate::config::load(&env, &std::env::current_dir()?)?;
    assemble::check_allow_hosts(&loaded).map_err(anyhow::Error::msg)?;
    let config = loaded.config;
    let writer = a.host.frame_writer();
    let settings = a.host.settings(&config, writer.clone())?;
    let policy = a.host.runs_policy(&config, a.agents)?;
    let mut allow_hosts = config.serve.allow_hosts.clone();
    allow_hosts.extend(a.allow_host.iter().cloned());
    let docs_dir = std::path::PathBuf::from(config.frames.docs_dir.as_deref().unwrap_or("docs/noesis"));
    let episode_config = config.clone();
    let providers = Arc::new(a.host.providers(config)?);
    // A provider that cannot be set up is a configuration error: say so now
    // (exit 2), not on the first request. Looking at frames needs none.
    let default = match providers.get(&a.host.provider, None) {
        Ok(p) => Some(p),
        Err(e) if ui => {
            out::note(&format!("note: modules cannot run from this dashboard: {e:#}"));
            None
        }
        Err(e) => return Err(e.into()),
    };
    let service = Arc::new(
        Service::new(search.clone(), Arc::new(assemble::Served(Arc::clone(&providers)))).with_settings(settings),
    );
    // Every server needs a credential for what changes anything: without
    // --token on loopback one is made here and reads stay open; off
    // loopback the server refuses to start without --token.
    let generated = a.token.is_none() && a.bind.is_loopback();
    let token = match a.token {
        None if generated => {
            Token::Made { token: noesis_serve::access::random_token()?, home: crate::memory::home().ok() }
        }
        given => Token::Given(given),
    };
    let tls = match (a.tls_cert, a.tls_key) {
        (Some(cert), Some(key)) => Some(noesis_serve::tls::TlsFiles { cert, key }),
        _ => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let agents = agent_runs(&rt, search, &providers, "http", policy)?;
    let plugins = if a.plugins { plugin_runs(&rt, search, &service, &providers, docs_dir)? } else { None };
    let episodes = match a.episodes {
        true => episodes(&rt, search, episode_config, a.host.provider.clone())?,
        false => None,
    };
    let parts = Parts { agents, plugins, episodes };
    let config = parts.routes(ServeConfig {
        addr: SocketAddr::new(a.bind, a.port),
        token: match &token {
            Token::Given(t) => t.clone(),
            Token::Made { token, .. } => Some(token.clone()),
        },
        open_reads: generated,
        allow_hosts,
        tls,
        max_body: a.max_body,
        grace: Duration::from_secs(a.grace),
        access_log: a.access_log.then(|| AccessLog(Arc::new(|line: &str| out::note(line)))),
        pages: dashboard(&rt, &service, parts.agents.as_ref(), parts.episodes.as_ref()),
        agents: None,
        plugins: None,
        episodes: None,
    });
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let model = default.map(|d| format!("{}/{}", d.name(), d.model())).unwrap_or_else(|| "none".into());
    let say = |said: Said<'_>| -> std::io::Result<()> {
        match said {
            Said::Resuming(n) => out::note(&format!("resuming {n} agent run(s) the last server left unfinished")),
            Said::NotResumed(e) => out::note(&format!("warning: unfinished agent runs were not resumed: {e}")),
            Said::TokenAt(path) => out::note(&format!(
                "requests that change anything need `Authorization: Bearer TOKEN` (or sign in at /login); the token is in {}",
                path.display()
            )),
            Said::Listening(server) => {
                out::note(&format!(
                    "noesis {}: listening on {scheme}://{} (provider {model}; Ctrl-C stops)",
                    if ui { "ui" } else { "serve" },
                    server.local_addr(),
                ));
                if ui {
                    // One use: it trades itself for a session cookie.
                    out::data(&server.login_link().map_err(std::io::Error::other)?)?;
                }
            }
        }
        Ok(())
    };
    rt.block_on(async {
        assemble::serve(service, config, &parts, &token, &say, shutdown_signal()).await.map_err(|e| match e {
            // A closed stdout stays an I/O error: `noesis ui | head` is no failure.
            assemble::AssembleError::Said(io) => anyhow::Error::from(io),
            other => other.into(),
        })?;
        if let Some(w) = writer {
            // Every run is over: what they queued is written before exit.
            tokio::task::spawn_blocking(move || w.finish()).await?;
        }
        out::note("noesis serve: stopped");
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// Agent runs for a server's clients, in the store in force, on the current
/// folder as workspace, with `[mcp.servers]` started once; `None` (with a
/// warning) when the store cannot be opened.
pub(crate) fn agent_runs(
    rt: &tokio::runtime::Runtime,
    search: &SearchPath,
    providers: &Arc<Providers>,
    origin: &'static str,
    policy: noesis_serve::agents::RunsPolicy,
) -> anyhow::Result<Option<Arc<noesis_serve::agents::AgentRuns>>> {
    let (project, store) = match rt.block_on(crate::memory::context()) {
        Ok(c) => c,
        Err(e) => {
            out::note(&format!("warning: no agent runs over HTTP (the store cannot be opened): {e:#}"));
            return Ok(None);
        }
    };
    let sandbox = crate::cmd::sandbox::SandboxArgs::default().settings(providers.config());
    crate::cmd::sandbox::warn_if_off(&sandbox, false);
    let served = rt.block_on(noesis_host::served::bind(noesis_host::served::Binding {
        search: search.clone(),
        store: Arc::from(store),
        project,
        providers: Arc::clone(providers),
        folder: std::env::current_dir()?,
        home: crate::memory::home().ok(),
        sandbox,
        origin,
        leases: crate::memory::home()?.join("agent-leases"),
        ceiling: policy.ceiling,
        note: Arc::new(|m: &str| out::note(m)),
    }))?;
    Ok(Some(noesis_serve::agents::AgentRuns::with_policy(
        Arc::new(served),
        noesis_agent::events::EventBus::new(1024),
        policy,
    )))
}

/// Episodes on the current folder's project, in the store in force; `None`
/// (with a warning) when the store cannot be opened.
fn episodes(
    rt: &tokio::runtime::Runtime,
    search: &SearchPath,
    config: Config,
    provider: ProviderArgs,
) -> anyhow::Result<Option<Arc<noesis_serve::episodes::Episodes>>> {
    let (project, store) = match rt.block_on(crate::memory::context()) {
        Ok(c) => c,
        Err(e) => {
            out::note(&format!("warning: no episodes over HTTP (the store cannot be opened): {e:#}"));
            return Ok(None);
        }
    };
    let mirror = super::state::mirror_path(false, &config, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    Ok(Some(assemble::episodes(assemble::EpisodeSetup {
        search: search.clone(),
        store: Arc::from(store),
        project,
        sandbox: crate::cmd::sandbox::SandboxArgs::default().settings(&config),
        config,
        provider,
        home: crate::memory::home()?,
        mirror,
        note: Arc::new(|m: &str| out::note(m)),
    })))
}

/// The frame plugins over HTTP on the current project, in the store in
/// force, models run through `service`.
/// The plugin runs on the server's project; `ask`'s agent gets its model
/// as a served agent run does (the request's choice within the allow-list).
fn plugin_runs(
    rt: &tokio::runtime::Runtime,
    search: &SearchPath,
    service: &Arc<Service>,
    providers: &Arc<crate::provider::Providers>,
    docs_dir: std::path::PathBuf,
) -> anyhow::Result<Option<Arc<noesis_serve::plugins::PluginRuns>>> {
    let (project, store) = rt.block_on(crate::memory::context())?;
    let promote_at = providers.config().frames.promote_at.unwrap_or(0.8);
    let chooser = Arc::clone(providers);
    let model: noesis_serve::plugins::AgentModel = Arc::new(move |name, model| {
        let p = chooser.for_agent(name, model)?;
        Ok(crate::provider::with_text_tools(p, chooser.config()))
    });
    let runs = noesis_serve::plugins::PluginRuns::new(
        Arc::clone(service),
        project,
        Arc::from(store),
        crate::memory::store_files(),
        docs_dir,
    )
    .with_ask(search.clone(), model, promote_at);
    Ok(Some(Arc::new(runs)))
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    out::note("noesis serve: shutting down (finishing runs in flight)");
}
