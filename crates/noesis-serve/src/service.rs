//! The transport-neutral service: modules from a search path kept loaded in a
//! cache, providers from a [`ProviderSource`], and runs that always end in a
//! v2.2 envelope. The HTTP server ([`crate::http`]) and any other front end
//! (an MCP server, say) are thin layers over this.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use noesis_llm::{Budget, BudgetMeter, PriceTable, Provider};
use noesis_modules::search::{Found, SearchPath};
use noesis_modules::{ErrorCode, Failure, Module};
use noesis_runtime::compose::{
    ChildProviders, ComposeOptions, ComposeRecord, ProviderFor, Resolver, StepTrace, execute,
};
use noesis_runtime::{CancellationToken, ContextOptions, Instant, OnText, RunOptions, stamp};
use serde::Serialize;
use serde_json::{Value, json};

/// `meta.model` of envelopes the service makes before any model is chosen
/// (unknown module, bad request): the schema wants `provider/model`, and
/// naming a model that was never called would mislead.
pub const NO_MODEL: &str = "noesis/none";

/// Where the service gets a provider for a run. The binary implements it
/// (flags, config, environment); tests implement it with a fake server.
pub trait ProviderSource: Send + Sync {
    /// The provider for a run of `module`. `name` and `model` are what the
    /// request asked for (`None`: the source's default). The error's message
    /// is for the caller, and must not hold a secret. It may block (a local
    /// model loads from disk): the service calls it off the async workers.
    fn provider(
        &self,
        name: Option<&str>,
        model: Option<&str>,
        module: &Module,
    ) -> Result<Arc<dyn Provider>, SourceError>;
}

/// Why a [`ProviderSource`] gave no provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The request named a provider or model the operator does not allow
    /// (E4007, HTTP 403).
    #[error("{0}")]
    NotAllowed(String),
    /// The provider could not be set up.
    #[error("{0}")]
    Unavailable(String),
}

impl From<String> for SourceError {
    fn from(message: String) -> SourceError {
        SourceError::Unavailable(message)
    }
}

/// One run asked for: the module, its input and argument text, and
/// optionally which provider and model to use.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// A module name on the search path (never a path: see [`Service::module`]).
    pub module: String,
    /// The module input, a JSON object; `None` is `{}`.
    pub input: Option<Value>,
    /// The argument text (`$ARGUMENTS`).
    pub args: Option<String>,
    /// A provider name, overriding the source's default.
    pub provider: Option<String>,
    /// A model name, overriding the provider's default.
    pub model: Option<String>,
}

/// Settings every run of a service shares.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Re-asks after an invalid reply (see [`RunOptions::reask`]).
    pub reask: u32,
    /// Cap on output tokens.
    pub max_tokens: Option<u32>,
    /// Limits for each run; every run gets its own meter, so one client
    /// cannot spend another's budget.
    pub budget: Option<Budget>,
    /// Prices for `meta.usage.cost_usd`; the built-in table when `None`.
    pub prices: Option<Arc<PriceTable>>,
    /// Capabilities granted to every module (see [`RunOptions::allow`]).
    /// Only the operator grants them: a request cannot.
    pub allow: Vec<String>,
    /// Where emitted context is kept and served from (see
    /// [`RunOptions::context`]); `None` keeps none. One store serves every
    /// client: entries are per user or session only when a module's
    /// `key_pattern` says so.
    pub context: Option<ContextOptions>,
    /// Told of every run that finishes (not of one whose client went away).
    pub on_finished: Option<OnFinished>,
}

/// Told of a finished run: its module, its input and what happened (the
/// binary records frames with it).
#[derive(Clone)]
pub struct OnFinished(pub Arc<FinishedFn>);

/// What [`OnFinished`] calls.
pub type FinishedFn = dyn Fn(&Module, &Value, &ComposeRecord) + Send + Sync;

impl std::fmt::Debug for OnFinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnFinished(..)")
    }
}

impl Default for RunSettings {
    fn default() -> RunSettings {
        RunSettings {
            reask: RunOptions::default().reask,
            max_tokens: None,
            budget: None,
            prices: None,
            allow: Vec::new(),
            context: None,
            on_finished: None,
        }
    }
}

/// One row of [`Service::list`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModuleSummary {
    /// The module's name.
    pub name: String,
    /// Its version (absent when it cannot be loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its layout (`v2.2`, `v1`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Its tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responsibility: Option<String>,
    /// A folder, or `builtin:NAME`.
    pub location: String,
    /// Whether it loads.
    pub valid: bool,
    /// Why it does not load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Serves modules: resolve, load (cached), run.
///
/// `Send + Sync`: share one `Arc<Service>` between every connection.
pub struct Service {
    search: SearchPath,
    cache: ModuleCache,
    providers: Arc<dyn ProviderSource>,
    settings: RunSettings,
    in_flight: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("search", &self.search)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service over `search` with providers from `providers`.
    pub fn new(search: SearchPath, providers: Arc<dyn ProviderSource>) -> Service {
        Service {
            search,
            cache: ModuleCache::default(),
            providers,
            settings: RunSettings::default(),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Replaces the settings every run uses.
    #[must_use]
    pub fn with_settings(mut self, settings: RunSettings) -> Service {
        self.settings = settings;
        self
    }

    /// Runs started and not yet finished (or dropped).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The loaded module `name`, from the cache unless its files changed.
    ///
    /// Only plain names are served: a path would let a client read any
    /// folder on the server. The refusal is a stamped failure envelope:
    /// E4006 for an unknown name, E4000 for a module on the path that does
    /// not load (the server's problem, not the caller's).
    pub fn module(&self, name: &str) -> Result<Arc<Module>, Value> {
        let started = Instant::now();
        self.load(name).map_err(|f| refuse(*f, started))
    }

    fn load(&self, name: &str) -> Result<Arc<Module>, Box<Failure>> {
        if !is_plain_name(name) {
            return Err(Box::new(Failure::new(
                ErrorCode::E4006,
                format!("`{}` is not a module name; modules are served by name, never by path", clip(name)),
            )));
        }
        let found = match self.search.resolve(name) {
            Ok(f) => f,
            // The folders searched are the server's business, not the caller's.
            Err(_) => {
                return Err(Box::new(
                    Failure::new(ErrorCode::E4006, format!("module `{name}` not found"))
                        .suggest("list the modules this server has (GET /modules)"),
                ));
            }
        };
        self.cache.get(name, &found).map_err(|message| {
            Box::new(
                Failure::new(ErrorCode::E4000, format!("module `{name}` cannot be loaded: {message}"))
                    .suggest("the server's module files need fixing; `noesis validate` names the problem"),
            )
        })
    }

    /// Every module on the search path, in search order.
    pub fn list(&self) -> Vec<ModuleSummary> {
        self.search
            .list()
            .into_iter()
            .map(|l| {
                let location = location(&self.search, &l.found);
                match self.cache.get(&l.name, &l.found) {
                    Ok(m) => ModuleSummary {
                        name: m.name.clone(),
                        version: Some(m.manifest.version.clone()),
                        format: Some(m.format.to_string()),
                        tier: Some(m.policy.tier.as_str().to_owned()),
                        responsibility: Some(m.manifest.responsibility.clone()),
                        location,
                        valid: true,
                        error: None,
                    },
                    Err(error) => ModuleSummary {
                        name: l.name,
                        version: None,
                        format: None,
                        tier: None,
                        responsibility: None,
                        location,
                        valid: false,
                        error: Some(error),
                    },
                }
            })
            .collect()
    }

    /// A module's manifest, rules and schemas (the shape of `noesis info
    /// --json`, plus `input_schema` and `data_schema` with the document's
    /// `$defs` carried along so their `$ref`s resolve on their own).
    pub fn info(&self, name: &str) -> Result<Value, Value> {
        let m = self.module(name)?;
        let mut info = m.summary();
        if !m.location.to_string_lossy().starts_with("builtin:") {
            info["location"] = json!(shown(&self.search, &m.location));
        }
        info["input_schema"] = json!(m.input.as_ref().map(|s| standalone(&s.schema, &m.schema)));
        info["data_schema"] = json!(m.data.as_ref().map(|s| standalone(&s.schema, &m.schema)));
        Ok(info)
    }

    /// Checks a request and picks its module and provider, without calling
    /// the model. A front end that must answer differently before a run
    /// starts (an HTTP status, a stream that has not begun) uses this; the
    /// refusal is a stamped failure envelope.
    pub async fn prepare(&self, request: RunRequest) -> Result<PreparedRun, Value> {
        let started = Instant::now();
        let module = self.module(&request.module)?;
        let input = match request.input {
            None => json!({}),
            Some(v @ Value::Object(_)) => v,
            Some(other) => {
                let f = Failure::new(
                    ErrorCode::E1001,
                    format!("the input must be a JSON object, not {}", noesis_json::type_name(&other)),
                );
                return Err(refuse(f, started));
            }
        };
        let asked = request.provider.is_some() || request.model.is_some();
        // Setting a provider up may block (a local model loads from disk).
        let (source, chosen) = (Arc::clone(&self.providers), Arc::clone(&module));
        let (name, model) = (request.provider.clone(), request.model.clone());
        let found = tokio::task::spawn_blocking(move || source.provider(name.as_deref(), model.as_deref(), &chosen))
            .await
            .unwrap_or_else(|e| Err(SourceError::Unavailable(format!("setting the provider up failed: {e}"))));
        let provider = found.map_err(|e| {
            // A provider the request named is the caller's to change; the
            // server's own default failing is the server's.
            let code = match e {
                SourceError::NotAllowed(_) => ErrorCode::E4007,
                SourceError::Unavailable(_) if asked => ErrorCode::E1004,
                SourceError::Unavailable(_) => ErrorCode::E4001,
            };
            refuse(Failure::new(code, format!("no provider for this run: {e}")), started)
        })?;
        let options = RunOptions {
            arguments: request.args,
            max_tokens: self.settings.max_tokens,
            reask: self.settings.reask,
            budget: self.settings.budget.map(|b| Arc::new(BudgetMeter::new(b))),
            prices: self.settings.prices.clone(),
            allow: self.settings.allow.clone(),
            context: self.settings.context.clone(),
            ..RunOptions::default()
        };
        // The modules it calls get their providers the same way: the
        // request's provider and model first, else each one's route.
        let children = ChildProviders(Arc::new(RequestProviders {
            source: Arc::clone(&self.providers),
            name: request.provider.clone(),
            model: request.model.clone(),
        }));
        Ok(PreparedRun {
            module,
            provider,
            input,
            options,
            children,
            on_finished: self.settings.on_finished.clone(),
            in_flight: Arc::clone(&self.in_flight),
        })
    }

    /// Runs a module: [`Service::prepare`], then [`PreparedRun::run`]. Text
    /// goes to `on_text` as it streams in; `cancel` stops the run with an
    /// E2002 envelope. Dropping the future drops the provider call too.
    /// `@call`s and `composition:` run as `noesis run` runs them.
    pub async fn run(&self, request: RunRequest, on_text: Option<OnText>, cancel: Option<CancellationToken>) -> Value {
        match self.prepare(request).await {
            Ok(prepared) => prepared.run(self, on_text, cancel).await.envelope,
            Err(refusal) => refusal,
        }
    }

    /// A meter of the operator's limits for a job of several runs (a
    /// plugin run over HTTP): its runs share it instead of each getting
    /// the whole budget. `None` when the operator set no limits.
    pub fn job_meter(&self) -> Option<Arc<BudgetMeter>> {
        self.settings.budget.map(|b| Arc::new(BudgetMeter::new(b)))
    }

    /// The operator's prices, for a job that prices its own calls.
    pub fn prices(&self) -> Option<Arc<PriceTable>> {
        self.settings.prices.clone()
    }

    /// [`Service::run`] on `meter` (see [`Service::job_meter`]) instead of
    /// a meter of its own.
    pub async fn run_on(
        &self,
        request: RunRequest,
        meter: Option<Arc<BudgetMeter>>,
        cancel: Option<CancellationToken>,
    ) -> Value {
        match self.prepare(request).await {
            Ok(mut prepared) => {
                if meter.is_some() {
                    prepared.options.budget = meter;
                }
                prepared.run(self, None, cancel).await.envelope
            }
            Err(refusal) => refusal,
        }
    }

    /// Like [`Service::run`], with every step of the composition in
    /// `meta.steps` (as `noesis compose --trace json` prints them: no step
    /// inputs or envelopes).
    pub async fn compose(
        &self,
        request: RunRequest,
        on_text: Option<OnText>,
        cancel: Option<CancellationToken>,
    ) -> Value {
        let record = match self.prepare(request).await {
            Ok(prepared) => prepared.run(self, on_text, cancel).await,
            Err(refusal) => return refusal,
        };
        let mut envelope = record.envelope;
        let steps: Vec<Value> = record.steps.iter().map(StepTrace::summary).collect();
        // `meta` allows keys of its own; the envelope still validates.
        if let Some(meta) = envelope.get_mut("meta").and_then(Value::as_object_mut) {
            meta.insert("steps".into(), Value::Array(steps));
        }
        envelope
    }
}

/// The service resolves the modules a composition calls through its cache,
/// under the same rules as requests (plain names only).
impl Resolver for Service {
    fn resolve(&self, name: &str) -> Result<Arc<Module>, Failure> {
        self.load(name).map_err(|f| *f)
    }
}

/// A checked request, ready to call the model.
pub struct PreparedRun {
    module: Arc<Module>,
    provider: Arc<dyn Provider>,
    input: Value,
    options: RunOptions,
    children: ChildProviders,
    on_finished: Option<OnFinished>,
    in_flight: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PreparedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRun")
            .field("module", &self.module.name)
            .field("provider", &format_args!("{}/{}", self.provider.name(), self.provider.model()))
            .finish_non_exhaustive()
    }
}

/// Counts a run as in flight until it ends or its future is dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PreparedRun {
    /// The module this run will use.
    pub fn module(&self) -> &Arc<Module> {
        &self.module
    }

    /// The provider this run will call.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Runs it with its `@call`s and `composition:`, the modules they name
    /// resolved by `resolver` (the [`Service`]); the record's envelope
    /// always validates against v2.2. `on_text` streams the root module's
    /// text; `cancel` stops every step (E2002).
    pub async fn run(
        mut self,
        resolver: &dyn Resolver,
        on_text: Option<OnText>,
        cancel: Option<CancellationToken>,
    ) -> ComposeRecord {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let _guard = InFlight(Arc::clone(&self.in_flight));
        self.options.on_text = on_text;
        self.options.cancel = cancel;
        let options = ComposeOptions { run: self.options, timeout: None, providers: Some(self.children) };
        let Some(OnFinished(told)) = self.on_finished else {
            return execute(self.module, resolver, self.provider.as_ref(), self.input, &options).await;
        };
        let (module, input) = (Arc::clone(&self.module), self.input.clone());
        let record = execute(self.module, resolver, self.provider.as_ref(), self.input, &options).await;
        told(&module, &input, &record);
        record
    }
}

/// The providers of the modules a request's module calls: chosen like its
/// own, with the request's provider and model over the server's flags.
struct RequestProviders {
    source: Arc<dyn ProviderSource>,
    name: Option<String>,
    model: Option<String>,
}

impl ProviderFor for RequestProviders {
    fn provider_for(&self, module: &Module) -> Result<Option<Arc<dyn Provider>>, String> {
        self.source.provider(self.name.as_deref(), self.model.as_deref(), module).map(Some).map_err(|e| e.to_string())
    }
}

/// A failure envelope for a request refused before any model was chosen.
pub fn refuse(failure: Failure, started: Instant) -> Value {
    stamp(failure.into_envelope(), &uuid::Uuid::now_v7().to_string(), NO_MODEL, started)
}

/// The error code of an envelope (`None` for a success).
pub fn error_code(envelope: &Value) -> Option<&str> {
    envelope.pointer("/error/code").and_then(Value::as_str)
}

fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn clip(s: &str) -> String {
    noesis_modules::truncate_chars(s, 80)
}

/// Where a module was found, as a client may see it: its folder relative
/// to the search-path entry that holds it, never the server's absolute path.
fn location(search: &SearchPath, found: &Found) -> String {
    match found {
        Found::Dir(p) => shown(search, p),
        Found::Builtin(n) => format!("builtin:{n}"),
    }
}

fn shown(search: &SearchPath, dir: &Path) -> String {
    search
        .dirs
        .iter()
        .find_map(|d| dir.strip_prefix(d).ok())
        .map(|rel| rel.display().to_string())
        .filter(|rel| !rel.is_empty())
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// A schema section that stands on its own: `#/$defs/…` references point at
/// the document root, so the document's `$defs` come along.
fn standalone(section: &Value, document: &Value) -> Value {
    let mut out = section.clone();
    if let (Some(defs), Some(obj)) = (document.get("$defs"), out.as_object_mut())
        && !obj.contains_key("$defs")
    {
        obj.insert("$defs".into(), defs.clone());
    }
    out
}

/// What a module folder looked like when it was loaded: every file's name,
/// size and modification time. Any edit, addition or removal changes it.
type Fingerprint = Vec<(std::ffi::OsString, u64, Option<SystemTime>)>;

fn fingerprint(dir: &Path) -> Option<Fingerprint> {
    let mut files: Fingerprint = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            // Follows links, as loading does.
            let md = std::fs::metadata(e.path()).ok()?;
            md.is_file().then(|| (e.file_name(), md.len(), md.modified().ok()))
        })
        .collect();
    files.sort();
    Some(files)
}

struct Entry {
    found: Found,
    print: Option<Fingerprint>,
    // A module that does not load is cached too, so a broken file is not
    // parsed again on every request.
    loaded: Result<Arc<Module>, String>,
}

/// Loaded modules by name. Loading parses YAML and compiles schemas, far
/// too slow to do per request; checking a folder's fingerprint is a
/// directory read.
#[derive(Default)]
struct ModuleCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl ModuleCache {
    fn get(&self, name: &str, found: &Found) -> Result<Arc<Module>, String> {
        let print = match found {
            Found::Dir(d) => fingerprint(d),
            Found::Builtin(_) => None,
        };
        if let Ok(entries) = self.entries.lock()
            && let Some(e) = entries.get(name)
            && e.found == *found
            && e.print == print
        {
            return e.loaded.clone();
        }
        // Loaded outside the lock: other modules stay servable meanwhile.
        // Two requests racing on a change may both load; the last one stays.
        let loaded = found.load().map(Arc::new).map_err(|e| e.to_string());
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(name.to_owned(), Entry { found: found.clone(), print, loaded: loaded.clone() });
        }
        loaded
    }
}

// Every connection shares one service and runs move between threads.
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Service>();
    is::<PreparedRun>();
};
