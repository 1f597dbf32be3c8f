//! `noesis serve`: the HTTP API of `noesis-serve`, with providers chosen
//! the way `noesis run` chooses them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_llm::Provider;
use noesis_modules::Module;
use noesis_modules::search::SearchPath;
use noesis_runtime::compose::{ComposeRecord, ProviderFor};
use noesis_serve::http::{AccessLog, ServeConfig, Server};
use noesis_serve::{OnFinished, ProviderSource, RunSettings, Service};

use crate::config::Config;
use crate::out;
use crate::provider::env;
use crate::provider::{ProviderArgs, budget, choose, prices, select};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on. Anything but a loopback address needs --token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port; 0 picks a free one (the address is printed on stderr).
    #[arg(long, value_name = "N", default_value_t = 8787)]
    port: u16,
    /// Bearer token every route but /health requires. Prefer the variable:
    /// a flag is visible to other users in the process list.
    #[arg(long, value_name = "T", env = "NOESIS_SERVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
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
}

impl HostArgs {
    /// The settings every run of the server uses.
    pub(crate) fn settings(&self, config: &Config) -> anyhow::Result<RunSettings> {
        let on_finished = self.frames.then(|| {
            OnFinished(Arc::new(|module: &Module, input: &serde_json::Value, record: &ComposeRecord| {
                let pending = crate::memory::Pending::new(&module.name, input, Vec::new());
                let (envelope, steps) = (record.envelope.clone(), record.steps.clone());
                // Off the request's thread: the store write never delays the answer.
                std::thread::spawn(move || pending.record(&envelope, &steps));
            }))
        });
        Ok(RunSettings {
            allow: crate::config::granted(config, &self.allow)?,
            context: self.keep_context.then(crate::memory::ProjectContext::options),
            on_finished,
            reask: self.reask,
            max_tokens: self.max_tokens,
            budget: budget(&self.provider, config)?.map(|m| m.budget()),
            prices: Some(prices(config)),
        })
    }
}

/// Providers made so far, by (provider, model).
type Made = HashMap<(String, Option<String>), Arc<dyn Provider>>;

/// Providers as `noesis run` picks them, with the request's provider and
/// model layered over the flags. One provider per (provider, model) for the
/// server's life, so runs share its HTTP connections and concurrency cap.
pub(crate) struct Providers {
    flags: ProviderArgs,
    config: Config,
    made: Mutex<Made>,
}

impl Providers {
    pub(crate) fn new(flags: ProviderArgs, config: Config) -> Providers {
        Providers { flags, config, made: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn get(
        &self,
        args: &ProviderArgs,
        module: Option<(&str, Option<&str>)>,
    ) -> anyhow::Result<Arc<dyn Provider>> {
        let (name, model, source) = choose(args, &self.config, module, &env);
        if source == crate::provider::Source::Default && name != "local" && args.replay.is_none() {
            anyhow::bail!("{}", crate::provider::NO_PROVIDER);
        }
        let key = (name.clone(), model.clone());
        // Held while a provider is made: a miss is rare, and two requests
        // must not load the local model twice.
        let mut made = self.made.lock().map_err(|_| anyhow::anyhow!("provider cache poisoned"))?;
        if let Some(p) = made.get(&key) {
            return Ok(Arc::clone(p));
        }
        let pinned = ProviderArgs { provider: Some(name), model, ..args.clone() };
        let provider = select(&pinned, &self.config, None)?;
        made.insert(key, Arc::clone(&provider));
        Ok(provider)
    }
}

impl Providers {
    /// Puts a provider already made for `module` in the cache, so the
    /// modules a run calls share it (one connection pool, one cap) when
    /// their route picks the same provider and model.
    pub(crate) fn seed(&self, args: &ProviderArgs, module: Option<(&str, Option<&str>)>, provider: Arc<dyn Provider>) {
        let (name, model, _) = choose(args, &self.config, module, &env);
        if let Ok(mut made) = self.made.lock() {
            made.entry((name, model)).or_insert(provider);
        }
    }
}

/// The modules a `noesis run` calls get providers as the run's own module
/// does: flags, then the environment, then routes by tier and name.
impl ProviderFor for Providers {
    fn provider_for(&self, module: &Module) -> Result<Option<Arc<dyn Provider>>, String> {
        self.get(&self.flags, Some((&module.name, Some(module.policy.tier.as_str()))))
            .map(Some)
            .map_err(|e| format!("{e:#}"))
    }
}

impl ProviderSource for Providers {
    fn provider(&self, name: Option<&str>, model: Option<&str>, module: &Module) -> Result<Arc<dyn Provider>, String> {
        let mut args = self.flags.clone();
        if let Some(n) = name {
            args.provider = Some(n.to_owned());
        }
        if let Some(m) = model {
            args.model = Some(m.to_owned());
        }
        self.get(&args, Some((&module.name, Some(module.policy.tier.as_str())))).map_err(|e| format!("{e:#}"))
    }
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    let config = crate::config::load(&env, &std::env::current_dir()?)?.config;
    let settings = a.host.settings(&config)?;
    let providers = Providers::new(a.host.provider.clone(), config);
    // A provider that cannot be set up is a configuration error: say so now
    // (exit 2), not on the first request.
    let default = providers.get(&a.host.provider, None)?;
    let service = Arc::new(Service::new(search.clone(), Arc::new(providers)).with_settings(settings));
    let config = ServeConfig {
        addr: SocketAddr::new(a.bind, a.port),
        token: a.token,
        max_body: a.max_body,
        grace: Duration::from_secs(a.grace),
        access_log: a.access_log.then(|| AccessLog(Arc::new(|line: &str| out::note(line)))),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let server = Server::bind(service, config).await?;
        out::note(&format!(
            "noesis serve: listening on http://{} (provider {}/{}; Ctrl-C stops)",
            server.local_addr(),
            default.name(),
            default.model()
        ));
        server.run(shutdown_signal()).await?;
        out::note("noesis serve: stopped");
        anyhow::Ok(ExitCode::SUCCESS)
    })
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
