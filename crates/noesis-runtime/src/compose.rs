//! Composition: `@call` directives and `composition:` patterns (Level 3).
//!
//! [`execute`] is the one entry point for every front end. A module with
//! neither `@call` nor `composition:` is handed to [`run`] unchanged, so
//! callers can always go through here.
//!
//! # What runs
//! - **`@call:name(args)`**: before a module's own prompt runs, each
//!   directive's module runs (in prompt order) and its envelope replaces the
//!   directive in the prompt, as JSON. Arguments that are a JSON object are
//!   the child's input; other text is its `$ARGUMENTS` (`$INPUT` alone
//!   passes the caller's input, `$ARGUMENTS` alone the caller's argument
//!   text); no arguments pass the caller's input.
//! - **`composition:` with `dataflow` or `routing`**: the steps run instead
//!   of the module's own prompt, by `pattern` — `sequential` (in the order
//!   written), `parallel` (each step as soon as the modules it reads from
//!   are settled; the modules of one wave run concurrently),
//!   `conditional` (the steps, except those feeding a routing target, then
//!   the first `routing` rule that holds picks `next`; `null` keeps the
//!   last result; conditions see `$.input` and `$.<module>` envelopes).
//!   A `conditional` block with no other step runs the module's own prompt
//!   first as the thing routed on.
//! - **`iterative`**: the steps (or, with none, the module's own prompt)
//!   repeat up to `iteration.max_iterations` (10): round n+1 gets the
//!   original input with `_context.previous_result` = `{module, meta, data}`
//!   of round n; `stop_condition` (holds → stop) and `continue_condition`
//!   (fails → stop) see the round's envelope plus `iteration` (rounds done);
//!   with neither condition there is one round. The result carries
//!   `meta.iterations`.
//! - **`composition:` with neither**: it only configures the module's
//!   `@call`s (versions, optional, fallbacks, timeouts, depth).
//!
//! # The result of a composition
//! When a `to: output` step ran, its value (several such steps deep-merge,
//! later wins) becomes `data`: an envelope's `data`, a list as
//! `{"results": [...]}`, a scalar as `{"result": v}`; `data.rationale` is
//! filled from the contributing envelopes when the value has none. Its meta:
//! `confidence` = the minimum and `risk` = the maximum over the envelopes
//! that fed the output (over every successful step when only the input
//! did; 1.0/none when no model ran), `explain` names the modules. Without a
//! `to: output` step the result is the envelope of the last module that ran
//! (the routed one, the last round's). If no step ran at all (every
//! condition false) the result is E2004. A successful result is held to the
//! root module's data schema unless its strictness is `low` (E3001).
//! `meta.trace_id`, `model` and `latency_ms` are the whole composition's,
//! and `meta.usage` adds up every call made.
//!
//! # Failures
//! A required step that fails (or whose module is missing, E4006, or
//! outside the `requires[].version` range) tries its `fallback`, then
//! aborts the composition with its failure envelope (plus the data of the
//! steps that succeeded as `partial_data`, when the failure has none); an
//! optional one yields `null` (a `@call` is replaced by `null`). A module
//! in its own ancestor chain, by `@call`, composition or both, is E4004
//! naming the chain (`a → b → a`); nesting deeper than the root's
//! `composition.max_depth` (5) is E4005; a child whose `policies` allow what
//! its caller's do not (explicitly or by the default `deny`), or that
//! permits a tool its caller does not, is E4007 (`enforce::child_within`). A
//! step past its `requires[].timeout_ms`, or any step still running when
//! the root's `composition.timeout_ms` (60 s) is up, is cancelled in flight
//! (the provider call is dropped) and is E2002; a step not yet started by
//! then does not start.
//!
//! # Context
//! A child sees a copy of its caller's `_context`. What a child emits
//! (`RunRecord::emitted_context`, entries keyed by type) stays with it when
//! its manifest says `context: fork`; with `main` it is merged into the
//! caller's `_context` for the caller's own run and every later step, and
//! passed on upwards with the caller's.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use noesis_llm::{Provider, Usage};
use noesis_modules::calls::{CallArgs, find_calls, replace_calls};
use noesis_modules::composition::{self, Composition, Flow, Pattern, Source, Target, deep_merge, payload};
use noesis_modules::search::SearchPath;
use noesis_modules::{ContextMode, ErrorCode, Failure, Module, Strictness, truncate_chars};
use serde_json::{Map, Value, json};

use crate::{CancellationToken, Instant, RunOptions, RunRecord, run, stamp};

/// Finds modules by name for `@call` and composition steps.
pub trait Resolver: Send + Sync {
    /// The module called `name`; a missing one is an E4006 failure.
    // A failure is rare and becomes an envelope at once: kept unboxed so
    // implementations stay one line.
    #[allow(clippy::result_large_err)]
    fn resolve(&self, name: &str) -> Result<Arc<Module>, Failure>;

    /// The module called `name` as `caller` names it. By default the same
    /// as [`Resolver::resolve`]; a resolver over folders looks beside the
    /// caller's own folder first.
    #[allow(clippy::result_large_err)]
    fn resolve_from(&self, name: &str, caller: &Module) -> Result<Arc<Module>, Failure> {
        let _ = caller;
        self.resolve(name)
    }
}

/// A [`Resolver`] over a search path that loads each module once.
#[derive(Debug)]
pub struct SearchResolver {
    search: SearchPath,
    cache: Mutex<HashMap<String, Arc<Module>>>,
}

impl SearchResolver {
    /// A resolver over `search`.
    pub fn new(search: SearchPath) -> SearchResolver {
        SearchResolver { search, cache: Mutex::new(HashMap::new()) }
    }
}

impl Resolver for SearchResolver {
    #[allow(clippy::result_large_err)]
    fn resolve(&self, name: &str) -> Result<Arc<Module>, Failure> {
        if let Some(m) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Ok(Arc::clone(m));
        }
        let found = self.search.resolve(name).map_err(|e| Failure::new(ErrorCode::E4006, e.to_string()))?;
        let module = found.load().map_err(|e| {
            Failure::new(ErrorCode::E4006, format!("module `{name}` was found but cannot be loaded: {e}"))
                .suggest("Fix the module (noesis validate) or remove it from the search path.")
        })?;
        let module = Arc::new(module);
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_owned(), Arc::clone(&module));
        Ok(module)
    }

    /// A module next to the caller's own folder wins over the search path,
    /// so `noesis run path/to/product-analyzer` finds its sibling
    /// `ui-spec-generator` wherever the pair lives.
    fn resolve_from(&self, name: &str, caller: &Module) -> Result<Arc<Module>, Failure> {
        let plain = !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..";
        let sibling = caller
            .location
            .parent()
            .filter(|_| plain && !caller.location.to_string_lossy().starts_with("builtin:"))
            .map(|parent| parent.join(name))
            .filter(|dir| ["module.yaml", "MODULE.md", "module.md"].iter().any(|m| dir.join(m).is_file()));
        let Some(dir) = sibling else { return self.resolve(name) };
        let key = dir.to_string_lossy().into_owned();
        if let Some(m) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(Arc::clone(m));
        }
        let module = noesis_modules::load_dir(&dir).map_err(|e| {
            Failure::new(ErrorCode::E4006, format!("module `{name}` beside its caller cannot be loaded: {e}"))
                .suggest("Fix the module (noesis validate).")
        })?;
        let module = Arc::new(module);
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(key, Arc::clone(&module));
        Ok(module)
    }
}

/// Settings for [`execute`].
#[derive(Debug, Clone, Default)]
pub struct ComposeOptions {
    /// Applied to every run. `arguments`, `trace_id` and `on_text` go to the
    /// root module only; `cancel` stops the whole composition.
    pub run: RunOptions,
    /// Total time allowed, instead of the root's `composition.timeout_ms`.
    pub timeout: Option<Duration>,
    /// Picks the provider of each module below the root (routing rules by
    /// tier or module name); `None`: every module uses the root's.
    pub providers: Option<ChildProviders>,
}

/// Chooses a provider for a module of a composition.
pub trait ProviderFor: Send + Sync {
    /// The provider for `module`; `Ok(None)` keeps the root's provider, an
    /// error fails that step (E4001) with the reason.
    fn provider_for(&self, module: &Module) -> Result<Option<Arc<dyn Provider>>, String>;
}

/// A shared [`ProviderFor`].
#[derive(Clone)]
pub struct ChildProviders(pub Arc<dyn ProviderFor>);

impl std::fmt::Debug for ChildProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildProviders(..)")
    }
}

/// How a step came to run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Via {
    /// The module [`execute`] was given.
    Root,
    /// An `@call` directive in the parent's prompt.
    Call,
    /// `composition.dataflow[index]` of the parent.
    Dataflow {
        /// The step's index in `dataflow`.
        index: usize,
    },
    /// A `routing` rule of the parent.
    Route {
        /// The rule's index in `routing`.
        index: usize,
    },
    /// The module's own prompt run as a step of its composition: a round of
    /// an iterative module, or what a conditional one routes on.
    Prompt,
    /// Instead of a module that was unavailable or failed.
    Fallback {
        /// The module it stands in for.
        of: String,
    },
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Via::Root => f.write_str("root"),
            Via::Call => f.write_str("@call"),
            Via::Dataflow { index } => write!(f, "dataflow[{index}]"),
            Via::Route { index } => write!(f, "routing[{index}]"),
            Via::Prompt => f.write_str("own prompt"),
            Via::Fallback { of } => write!(f, "fallback for {of}"),
        }
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Still in flight (never in a finished record).
    Running,
    /// A success envelope.
    Ok,
    /// A failure envelope with this code.
    Failed {
        /// The E-code.
        code: String,
    },
    /// Not run.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Cancelled by its own or the total timeout (E2002).
    TimedOut,
    /// Unavailable or failed; the fallback module ran instead.
    FellBack {
        /// Why this one did not do (its E-code).
        code: String,
        /// The fallback module.
        to: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Running => f.write_str("running"),
            Outcome::Ok => f.write_str("ok"),
            Outcome::Failed { code } => write!(f, "failed {code}"),
            Outcome::Skipped { reason } => write!(f, "skipped: {reason}"),
            Outcome::TimedOut => f.write_str("timed out (E2002)"),
            Outcome::FellBack { code, to } => write!(f, "{code}, fell back to {to}"),
        }
    }
}

/// One module invocation (or one that was considered and not run).
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepTrace {
    /// Position in [`ComposeRecord::steps`] (steps are listed as they start).
    pub id: usize,
    /// The module.
    pub module: String,
    /// 0 for the root, its parent's + 1 below.
    pub depth: u32,
    /// The step that invoked this one.
    pub parent: Option<usize>,
    /// How it came to run.
    pub via: Via,
    /// The round of an iterative parent (from 0).
    pub round: Option<u32>,
    /// When it started, in ms since the composition started.
    pub start_ms: f64,
    /// How long it took, in ms.
    pub elapsed_ms: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// The input it was given (`null` when it never ran).
    pub input: Value,
    /// The envelope it gave (`null` when it never ran).
    pub envelope: Value,
    /// Tokens of this module's own model calls (not its children's).
    pub usage: Option<Usage>,
    /// This module's own model calls.
    pub calls: u32,
    /// Their cost, when known.
    pub cost_usd: Option<f64>,
}

impl StepTrace {
    /// The step without its input and envelope: what a trace shows
    /// (`noesis compose --trace json`, `meta.steps` of `POST /compose`).
    pub fn summary(&self) -> Value {
        json!({
            "step": self.id, "parent": self.parent, "depth": self.depth, "module": self.module,
            "via": self.via.to_string(), "round": self.round, "start_ms": self.start_ms,
            "elapsed_ms": self.elapsed_ms, "outcome": self.outcome, "calls": self.calls,
        })
    }
}

/// What [`execute`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ComposeRecord {
    /// The envelope for the caller; it validates against the v2.2 schema.
    pub envelope: Value,
    /// Every step, the root first.
    pub steps: Vec<StepTrace>,
    /// The root module's own run, when its prompt ran (the last round's
    /// for an iterative one).
    pub root: Option<RunRecord>,
    /// What the root passes on to its caller's context: its own emissions
    /// and those of its `main` children.
    pub emitted_context: Option<Value>,
}

/// Runs `module` with its `@call`s and `composition:`; see the module docs.
pub async fn execute(
    module: Arc<Module>,
    resolver: &dyn Resolver,
    provider: &dyn Provider,
    input: Value,
    options: &ComposeOptions,
) -> ComposeRecord {
    let started = Instant::now();
    let composition = Composition::of(&module.manifest);
    if matches!(composition, Ok(None)) && find_calls(&module.prompt).is_empty() {
        let record = run(&module, provider, input.clone(), &options.run).await;
        let step = StepTrace {
            id: 0,
            module: module.name.clone(),
            depth: 0,
            parent: None,
            via: Via::Root,
            round: None,
            start_ms: 0.0,
            elapsed_ms: ms(started.elapsed()),
            outcome: outcome_of(&record.envelope),
            input,
            envelope: record.envelope.clone(),
            usage: record.usage,
            calls: record.calls,
            cost_usd: record.cost_usd,
        };
        return ComposeRecord {
            envelope: record.envelope.clone(),
            emitted_context: record.emitted_context.clone(),
            steps: vec![step],
            root: Some(record),
        };
    }
    let trace_id = options.run.trace_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let model_id = format!("{}/{}", provider.name(), provider.model());
    let config = composition.as_ref().ok().and_then(Option::as_ref);
    let total_ms = options.timeout.map_or_else(
        || config.map_or(composition::DEFAULT_TIMEOUT_MS, |c| c.timeout_ms),
        |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
    );
    let root_token = options.run.cancel.as_ref().map_or_else(CancellationToken::new, CancellationToken::child_token);
    let exec = Exec {
        resolver,
        provider,
        options,
        started,
        max_depth: config.map_or(composition::DEFAULT_MAX_DEPTH, |c| c.max_depth),
        total_ms,
        total_fired: Arc::new(AtomicBool::new(false)),
        steps: Mutex::new(Vec::new()),
        root_record: Mutex::new(None),
    };
    let timer = Timer::start(Duration::from_millis(total_ms), root_token.clone(), Arc::clone(&exec.total_fired));
    let node = Node {
        module: Arc::clone(&module),
        input,
        arguments: options.run.arguments.clone(),
        chain: Vec::new(),
        parent: None,
        via: Via::Root,
        round: None,
        cancel: root_token,
    };
    let done = exec.invoke(node).await;
    drop(timer);
    let mut envelope = done.envelope;
    let mut steps = exec.steps.into_inner().unwrap_or_else(PoisonError::into_inner);
    add_usage(&mut envelope, &steps);
    let envelope = stamp(envelope, &trace_id, &model_id, started);
    if let Some(root) = steps.first_mut() {
        // The root's trace shows exactly what the caller got.
        root.envelope = envelope.clone();
        if root.outcome != Outcome::TimedOut {
            root.outcome = outcome_of(&envelope);
        }
    }
    ComposeRecord {
        envelope,
        steps,
        root: exec.root_record.into_inner().unwrap_or_else(PoisonError::into_inner),
        emitted_context: (!done.emitted.is_empty()).then(|| Value::Object(done.emitted)),
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn outcome_of(envelope: &Value) -> Outcome {
    if envelope["ok"] == json!(true) {
        Outcome::Ok
    } else {
        Outcome::Failed { code: envelope.pointer("/error/code").and_then(Value::as_str).unwrap_or("E4000").to_owned() }
    }
}

fn is_ok(envelope: &Value) -> bool {
    envelope["ok"] == json!(true)
}

/// `meta.usage` over every call of the composition.
fn add_usage(envelope: &mut Value, steps: &[StepTrace]) {
    let calls: u32 = steps.iter().map(|s| s.calls).sum();
    let mut usage: Option<Usage> = None;
    for u in steps.iter().filter_map(|s| s.usage) {
        *usage.get_or_insert_with(Usage::default) += u;
    }
    let (Some(u), Some(meta)) = (usage, envelope.get_mut("meta").and_then(Value::as_object_mut)) else { return };
    let mut out = json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "calls": calls});
    let costs: Option<f64> = steps.iter().filter(|s| s.calls > 0).map(|s| s.cost_usd).sum();
    if let Some(c) = costs {
        out["cost_usd"] = json!((c * 1e8).round() / 1e8);
    }
    meta.insert("usage".into(), out);
}

/// Cancels a token when a duration passes, unless dropped first: a task on
/// the async runtime's timer (a composition runs on a runtime with time
/// enabled, as every noesis front end builds it), aborted on drop.
struct Timer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Timer {
    fn start(after: Duration, token: CancellationToken, fired: Arc<AtomicBool>) -> Option<Timer> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = runtime.spawn(async move {
            tokio::time::sleep(after).await;
            fired.store(true, Ordering::SeqCst);
            token.cancel();
        });
        Some(Timer { task })
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

struct Exec<'a> {
    resolver: &'a dyn Resolver,
    provider: &'a dyn Provider,
    options: &'a ComposeOptions,
    started: Instant,
    max_depth: u32,
    total_ms: u64,
    total_fired: Arc<AtomicBool>,
    steps: Mutex<Vec<StepTrace>>,
    root_record: Mutex<Option<RunRecord>>,
}

/// One module to invoke.
struct Node {
    module: Arc<Module>,
    input: Value,
    arguments: Option<String>,
    /// The names of its ancestors, root first.
    chain: Vec<String>,
    parent: Option<usize>,
    via: Via,
    round: Option<u32>,
    cancel: CancellationToken,
}

/// What an invocation produced.
struct Done {
    envelope: Value,
    /// What it passes on to a `main` caller.
    emitted: Map<String, Value>,
    step: usize,
}

/// One try of one module as a child.
struct Attempt {
    envelope: Value,
    emitted: Map<String, Value>,
    /// The module's name (the fallback's, when it stood in).
    module: String,
    mode: ContextMode,
    step: usize,
}

/// What a call of a child gave its caller.
enum Child {
    /// An envelope (a success, or a failure of an optional step) and what
    /// the child passes on to its caller's context.
    Value { envelope: Value, emitted: Map<String, Value>, module: String, mode: ContextMode },
    /// An optional step that yields `null`.
    Null,
    /// A required step failed: the composition stops with this envelope.
    Abort(Value),
}

/// The state of one module's invocation that its steps share.
struct Frame<'n> {
    node: &'n Node,
    step: usize,
    config: Option<&'n Composition>,
    /// The module's `_context`, with what `main` children emitted.
    context: Map<String, Value>,
    /// What it passes on to its caller.
    emitted: Map<String, Value>,
    round: Option<u32>,
}

impl Frame<'_> {
    fn chain(&self) -> Vec<String> {
        let mut c = self.node.chain.clone();
        c.push(self.node.module.name.clone());
        c
    }

    /// Merges what a child passes on, when it shares its caller's context.
    fn absorb(&mut self, emitted: &Map<String, Value>, mode: ContextMode) {
        if mode == ContextMode::Main {
            for (k, v) in emitted {
                self.context.insert(k.clone(), v.clone());
                self.emitted.insert(k.clone(), v.clone());
            }
        }
    }

    /// `input` with the frame's context (when there is any) as `_context`.
    fn with_context(&self, mut input: Value, extra: Option<(&str, Value)>) -> Value {
        let mut context = self.context.clone();
        if let Some((k, v)) = extra {
            context.insert(k.to_owned(), v);
        }
        if let Some(obj) = input.as_object_mut()
            && !context.is_empty()
        {
            obj.insert("_context".to_owned(), Value::Object(context));
        }
        input
    }
}

/// `{module, meta, data}` of an envelope, as the context protocol's
/// `previous_result`.
fn previous_result(module: &str, envelope: &Value) -> Value {
    json!({"module": module, "meta": envelope["meta"], "data": envelope.get("data").cloned().unwrap_or(Value::Null)})
}

/// An envelope's JSON for a prompt. `$` is written `\u0024` (the same JSON
/// value) so the prompt builder never reads a child's text as a placeholder.
fn inject(envelope: &Value) -> String {
    envelope.to_string().replace('$', "\\u0024")
}

/// The result of one pass over a module's steps or prompt.
type Pass = Result<Value, Value>;

impl Exec<'_> {
    fn elapsed(&self) -> f64 {
        ms(self.started.elapsed())
    }

    fn begin(
        &self,
        module: &str,
        depth: u32,
        parent: Option<usize>,
        via: Via,
        round: Option<u32>,
        input: Value,
    ) -> usize {
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        let id = steps.len();
        steps.push(StepTrace {
            id,
            module: module.to_owned(),
            depth,
            parent,
            via,
            round,
            start_ms: self.elapsed(),
            elapsed_ms: 0.0,
            outcome: Outcome::Running,
            input,
            envelope: Value::Null,
            usage: None,
            calls: 0,
            cost_usd: None,
        });
        id
    }

    fn update(&self, id: usize, f: impl FnOnce(&mut StepTrace)) {
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = steps.get_mut(id) {
            f(s);
        }
    }

    fn finish(&self, id: usize, envelope: &Value, outcome: Outcome) {
        let now = self.elapsed();
        self.update(id, |s| {
            s.elapsed_ms = ((now - s.start_ms) * 1e3).round() / 1e3;
            s.envelope = envelope.clone();
            s.outcome = outcome;
        });
    }

    fn envelopes_ok(&self) -> Vec<(String, Value)> {
        let steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        steps
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && s.depth > 0)
            .map(|s| (s.module.clone(), s.envelope.clone()))
            .collect()
    }

    /// The E2002 envelope for a cancelled run, saying which timeout it was.
    fn timeout_envelope(&self, own: Option<(u64, &AtomicBool)>, module: &str) -> Option<Value> {
        if let Some((limit, fired)) = own
            && fired.load(Ordering::SeqCst)
        {
            return Some(
                Failure::new(
                    ErrorCode::E2002,
                    format!("`{module}` did not finish within its timeout_ms of {limit} ms"),
                )
                .details(json!({"module": module, "timeout_ms": limit}))
                .into_envelope(),
            );
        }
        self.total_fired.load(Ordering::SeqCst).then(|| {
            Failure::new(
                ErrorCode::E2002,
                format!("the composition's timeout_ms of {} ms was up while `{module}` ran", self.total_ms),
            )
            .details(json!({"module": module, "timeout_ms": self.total_ms, "scope": "composition"}))
            .into_envelope()
        })
    }

    /// Runs a module: its steps, or its own prompt with its `@call`s.
    fn invoke<'s>(&'s self, node: Node) -> BoxFuture<'s, Done> {
        Box::pin(async move {
            let depth = u32::try_from(node.chain.len()).unwrap_or(u32::MAX);
            let step =
                self.begin(&node.module.name, depth, node.parent, node.via.clone(), node.round, node.input.clone());
            if node.cancel.is_cancelled() {
                let envelope = self.timeout_envelope(None, &node.module.name).unwrap_or_else(|| {
                    Failure::new(
                        ErrorCode::E2002,
                        format!("`{}` was not started: the run was cancelled", node.module.name),
                    )
                    .into_envelope()
                });
                self.finish(step, &envelope, Outcome::TimedOut);
                return Done { envelope, emitted: Map::new(), step };
            }
            let config = match Composition::of(&node.module.manifest) {
                Ok(c) => c,
                Err(errors) => {
                    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    let envelope = Failure::new(
                        ErrorCode::E1004,
                        format!("`{}` has an invalid composition block: {}", node.module.name, list.join("; ")),
                    )
                    .details(json!({"fields": errors.iter().map(|e| e.pointer()).collect::<Vec<_>>()}))
                    .suggest("Fix the module's composition block (noesis validate names each field).")
                    .into_envelope();
                    self.finish(step, &envelope, outcome_of(&envelope));
                    return Done { envelope, emitted: Map::new(), step };
                }
            };
            let context = match node.input.get("_context") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            let mut frame =
                Frame { node: &node, step, config: config.as_ref(), context, emitted: Map::new(), round: None };
            let result = match frame.config {
                Some(c) if c.pattern == Pattern::Iterative => self.iterate(&mut frame, c).await,
                _ => self.pass(&mut frame, node.input.clone(), false).await,
            };
            let envelope = match result {
                Ok(e) | Err(e) => e,
            };
            let envelope = self.hold_to_schema(&node.module, envelope);
            let outcome = if envelope.pointer("/error/code") == Some(&json!("E2002")) && node.cancel.is_cancelled() {
                Outcome::TimedOut
            } else {
                outcome_of(&envelope)
            };
            self.finish(step, &envelope, outcome);
            Done { envelope, emitted: frame.emitted, step }
        })
    }

    /// A composed success must still fit the module's own data schema.
    fn hold_to_schema(&self, module: &Module, envelope: Value) -> Value {
        let composed = Composition::of(&module.manifest).ok().flatten().is_some_and(|c| c.has_steps());
        if !composed || !is_ok(&envelope) || module.policy.strictness == Strictness::Low {
            return envelope;
        }
        let Some(schema) = &module.data else { return envelope };
        let violations = schema.compiled.violations(&envelope["data"]);
        if violations.is_empty() {
            return envelope;
        }
        Failure::new(
            ErrorCode::E3001,
            format!("the composed result does not fit `{}`'s data schema: {}", module.name, violations[0].message),
        )
        .details(json!({"violations": violations}))
        .partial(envelope.get("data").cloned())
        .into_envelope()
    }

    /// One pass: the steps when the module has some, else its own prompt
    /// (`traced`: as a step of its own under the module's).
    async fn pass(&self, frame: &mut Frame<'_>, input: Value, traced: bool) -> Pass {
        match frame.config {
            Some(c) if c.has_steps() => self.steps(frame, c, input).await,
            _ => self.own_run(frame, input, traced).await,
        }
    }

    async fn iterate(&self, frame: &mut Frame<'_>, c: &Composition) -> Pass {
        let original = frame.node.input.clone();
        let mut input = original.clone();
        let mut rounds = 0u32;
        let mut last = Value::Null;
        while rounds < c.iteration.max_iterations {
            frame.round = Some(rounds);
            // Without steps each round is a run of the module's own prompt,
            // traced as a step of its own under the module.
            let envelope = self.pass(frame, input.clone(), true).await?;
            rounds += 1;
            if !is_ok(&envelope) {
                return Err(envelope);
            }
            let mut probe = envelope.clone();
            probe["iteration"] = json!(rounds);
            let stop = c.iteration.stop_condition.as_ref().is_some_and(|s| s.eval(&probe));
            let go_on = c.iteration.continue_condition.as_ref().map(|s| s.eval(&probe));
            last = envelope;
            if stop || go_on == Some(false) || (go_on.is_none() && c.iteration.stop_condition.is_none()) {
                break;
            }
            if frame.node.cancel.is_cancelled() {
                break;
            }
            let module = frame.node.module.name.clone();
            let mut next = original.clone();
            if let Some(obj) = next.as_object_mut() {
                let mut ctx = match obj.get("_context") {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                ctx.insert("previous_result".into(), previous_result(&module, &last));
                obj.insert("_context".into(), Value::Object(ctx));
            }
            input = next;
        }
        frame.round = None;
        if let Some(meta) = last.get_mut("meta").and_then(Value::as_object_mut) {
            meta.insert("iterations".into(), json!(rounds));
        }
        Ok(last)
    }

    /// The module's own prompt, after its `@call`s.
    async fn own_run(&self, frame: &mut Frame<'_>, input: Value, traced: bool) -> Pass {
        let node = frame.node;
        let step = if traced {
            let depth = u32::try_from(node.chain.len()).unwrap_or(u32::MAX);
            self.begin(&node.module.name, depth, Some(frame.step), Via::Prompt, frame.round, input.clone())
        } else {
            frame.step
        };
        let calls = find_calls(&node.module.prompt);
        let mut replacements = Vec::with_capacity(calls.len());
        for call in &calls {
            let (child_input, child_args) = match &call.args {
                CallArgs::None => (input.clone(), None),
                CallArgs::Text(t) if t == "$INPUT" => (input.clone(), None),
                CallArgs::Text(t) if t == "$ARGUMENTS" => (json!({}), node.arguments.clone()),
                CallArgs::Text(t) => (json!({}), Some(t.clone())),
                CallArgs::Input(v) => (v.clone(), None),
            };
            let child_input = frame.with_context(child_input, None);
            match self.child(frame, &call.name, child_input, child_args, step, Via::Call).await {
                Child::Value { envelope, emitted, mode, .. } => {
                    frame.absorb(&emitted, mode);
                    replacements.push(inject(&envelope));
                }
                Child::Null => replacements.push("null".to_owned()),
                Child::Abort(envelope) => {
                    if traced {
                        self.finish(step, &envelope, outcome_of(&envelope));
                    }
                    return Err(envelope);
                }
            }
        }
        let module: Arc<Module> = if calls.is_empty() {
            Arc::clone(&node.module)
        } else {
            let mut m = (*node.module).clone();
            m.prompt = replace_calls(&node.module.prompt, &calls, &replacements);
            Arc::new(m)
        };
        let is_root = node.via == Via::Root;
        let options = RunOptions {
            arguments: node.arguments.clone(),
            trace_id: if is_root { self.options.run.trace_id.clone() } else { None },
            on_text: if is_root { self.options.run.on_text.clone() } else { None },
            cancel: Some(node.cancel.clone()),
            ..self.options.run.clone()
        };
        let input = frame.with_context(input, None);
        if node.cancel.is_cancelled() {
            let envelope = self
                .timeout_envelope(None, &module.name)
                .unwrap_or_else(|| Failure::new(ErrorCode::E2002, "the run was cancelled").into_envelope());
            if traced {
                self.finish(step, &envelope, Outcome::TimedOut);
            }
            return Err(envelope);
        }
        let routed = match (&self.options.providers, is_root) {
            (Some(ChildProviders(p)), false) => match p.provider_for(&module) {
                Ok(routed) => routed,
                Err(reason) => {
                    let envelope =
                        Failure::new(ErrorCode::E4001, format!("no provider for `{}`: {reason}", module.name))
                            .into_envelope();
                    if traced {
                        self.finish(step, &envelope, outcome_of(&envelope));
                    }
                    return Err(envelope);
                }
            },
            _ => None,
        };
        let provider: &dyn Provider = routed.as_deref().unwrap_or(self.provider);
        let record = run(&module, provider, input, &options).await;
        if let Some(Value::Object(emitted)) = &record.emitted_context {
            for (k, v) in emitted {
                frame.emitted.insert(k.clone(), v.clone());
            }
        }
        let mut envelope = record.envelope.clone();
        if !is_ok(&envelope)
            && node.cancel.is_cancelled()
            && let Some(e) = self.timeout_envelope(None, &module.name)
        {
            envelope = e;
        }
        self.update(step, |s| {
            s.usage = record.usage;
            s.calls = record.calls;
            s.cost_usd = record.cost_usd;
        });
        if traced {
            let outcome =
                if node.cancel.is_cancelled() && !is_ok(&envelope) { Outcome::TimedOut } else { outcome_of(&envelope) };
            self.finish(step, &envelope, outcome);
        }
        if is_root {
            *self.root_record.lock().unwrap_or_else(PoisonError::into_inner) = Some(record);
        }
        if is_ok(&envelope) { Ok(envelope) } else { Err(envelope) }
    }

    /// Resolves a child, checks it may run here, runs it (with its timeout
    /// and fallback) and says what its caller gets.
    async fn child(
        &self,
        frame: &Frame<'_>,
        name: &str,
        input: Value,
        arguments: Option<String>,
        parent: usize,
        via: Via,
    ) -> Child {
        let req = frame.config.and_then(|c| c.requirement(name));
        let optional = req.is_some_and(|r| r.optional);
        let mut attempt = self.attempt(frame, name, &input, arguments.clone(), parent, via).await;
        if !is_ok(&attempt.envelope)
            && let Some(fallback) = req.and_then(|r| r.fallback.as_deref())
        {
            let code = attempt.envelope.pointer("/error/code").and_then(Value::as_str).unwrap_or("E4000").to_owned();
            self.update(attempt.step, |s| s.outcome = Outcome::FellBack { code, to: fallback.to_owned() });
            attempt =
                self.attempt(frame, fallback, &input, arguments, parent, Via::Fallback { of: name.to_owned() }).await;
        }
        let Attempt { envelope, emitted, module, mode, .. } = attempt;
        if is_ok(&envelope) {
            return Child::Value { envelope, emitted, module, mode };
        }
        if optional {
            return Child::Null;
        }
        Child::Abort(envelope)
    }

    /// One try of one module as a child: resolution, version, cycle, depth,
    /// policies, then the run under its own timeout. Returns the envelope,
    /// what it emitted, the module's name and context mode, and its step.
    async fn attempt(
        &self,
        frame: &Frame<'_>,
        name: &str,
        input: &Value,
        arguments: Option<String>,
        parent: usize,
        via: Via,
    ) -> Attempt {
        let chain = frame.chain();
        let depth = u32::try_from(chain.len()).unwrap_or(u32::MAX);
        let req = frame.config.and_then(|c| c.requirement(name));
        let refuse = |failure: Failure, skipped: bool| {
            let envelope = failure.into_envelope();
            let step = self.begin(name, depth, Some(parent), via.clone(), frame.round, input.clone());
            let outcome = if skipped && req.is_some_and(|r| r.optional) {
                Outcome::Skipped { reason: envelope["error"]["message"].as_str().unwrap_or_default().to_owned() }
            } else {
                outcome_of(&envelope)
            };
            self.finish(step, &envelope, outcome);
            Attempt { envelope, emitted: Map::new(), module: name.to_owned(), mode: ContextMode::Fork, step }
        };
        let module = match self.resolver.resolve_from(name, &frame.node.module) {
            Ok(m) => m,
            Err(f) => return refuse(f, true),
        };
        if let Some(range) = req.and_then(|r| r.version.as_ref()) {
            let fits =
                noesis_modules::version::Version::parse(&module.manifest.version).is_ok_and(|v| range.matches(&v));
            if !fits {
                let f = Failure::new(
                    ErrorCode::E4006,
                    format!(
                        "module `{name}` is version {}, which is outside the required range `{range}`",
                        if module.manifest.version.is_empty() { "(none)" } else { &module.manifest.version }
                    ),
                )
                .details(json!({"module": name, "version": module.manifest.version, "required": range.to_string()}))
                .suggest("Install a version in the range, or widen composition.requires[].version.");
                return refuse(f, true);
            }
        }
        if chain.contains(&module.name) {
            let from = chain.iter().position(|m| *m == module.name).unwrap_or(0);
            let cycle: Vec<&str> = chain[from..].iter().map(String::as_str).chain([module.name.as_str()]).collect();
            let f = Failure::new(ErrorCode::E4004, format!("circular dependency: {}", cycle.join(" → ")))
                .details(json!({"chain": cycle}));
            return refuse(f, false);
        }
        if depth > self.max_depth {
            let path: Vec<&str> = chain.iter().map(String::as_str).chain([module.name.as_str()]).collect();
            let f = Failure::new(
                ErrorCode::E4005,
                format!("maximum composition depth ({}) exceeded: {}", self.max_depth, path.join(" → ")),
            )
            .details(json!({"max_depth": self.max_depth, "chain": path}));
            return refuse(f, false);
        }
        // A child may not be allowed what its caller is denied (policies, tools).
        if let Err(f) = noesis_modules::enforce::child_within(&frame.node.module.manifest, &module.manifest) {
            return refuse(f, false);
        }
        let cancel = frame.node.cancel.child_token();
        let limit = req.and_then(|r| r.timeout_ms);
        let fired = Arc::new(AtomicBool::new(false));
        let timer = limit.and_then(|l| Timer::start(Duration::from_millis(l), cancel.clone(), Arc::clone(&fired)));
        let mode = module.manifest.context_mode();
        let node = Node {
            module: Arc::clone(&module),
            input: input.clone(),
            arguments,
            chain,
            parent: Some(parent),
            via,
            round: frame.round,
            cancel: cancel.clone(),
        };
        let done = self.invoke(node).await;
        drop(timer);
        let mut envelope = done.envelope;
        if !is_ok(&envelope)
            && cancel.is_cancelled()
            && let Some(e) = self.timeout_envelope(limit.map(|l| (l, fired.as_ref())), &module.name)
        {
            envelope = e;
            self.update(done.step, |s| {
                s.envelope = envelope.clone();
                s.outcome = Outcome::TimedOut;
            });
        }
        Attempt { envelope, emitted: done.emitted, module: module.name.clone(), mode, step: done.step }
    }

    /// The steps of a composition, by its pattern.
    async fn steps(&self, frame: &mut Frame<'_>, c: &Composition, input: Value) -> Pass {
        let mut state = State { scope: Map::new(), output: None, contributors: Vec::new(), last: None, abort: None };
        state.scope.insert("input".into(), input.clone());
        let routed: Vec<&str> = c.routing.iter().filter_map(|r| r.next.as_deref()).collect();
        let deferred = |f: &Flow| {
            c.pattern == Pattern::Conditional
                && (f.to.iter().all(|t| match t {
                    Target::Module(m) => routed.contains(&m.as_str()),
                    Target::Output => true,
                }))
        };
        match c.pattern {
            Pattern::Parallel => self.waves(frame, c, &mut state).await?,
            _ => {
                for (index, flow) in c.dataflow.iter().enumerate() {
                    if deferred(flow) {
                        continue;
                    }
                    let runs = self.prepare(frame, &mut state, flow, index);
                    if let Some(envelope) = state.abort.take() {
                        return Err(with_partial(envelope, &state.scope));
                    }
                    for (target, child_input) in runs {
                        let result =
                            self.child(frame, &target, child_input, None, frame.step, Via::Dataflow { index }).await;
                        self.settle(frame, &mut state, &target, result)?;
                    }
                }
            }
        }
        if c.pattern == Pattern::Conditional {
            if state.last.is_none() {
                // Routing with no step before it routes on the module's own answer.
                let own = self.own_run(frame, input.clone(), true).await?;
                state.scope.insert(frame.node.module.name.clone(), own.clone());
                state.last = Some((frame.node.module.name.clone(), own));
            }
            let scope = Value::Object(state.scope.clone());
            if let Some((index, rule)) = c.routing.iter().enumerate().find(|(_, r)| r.condition.eval(&scope))
                && let Some(next) = &rule.next
            {
                let feed = c.dataflow.iter().enumerate().find(|(_, f)| f.targets(next));
                let child_input = match feed {
                    Some((_, flow)) => {
                        let value = flow.value(|s| lookup(&state.scope, s));
                        module_input(&flow.map(&value))
                    }
                    None => {
                        let prev = state.last.as_ref().map(|(m, e)| previous_result(m, e));
                        Ok(frame.with_context(input.clone(), prev.map(|p| ("previous_result", p))))
                    }
                };
                let result = match child_input {
                    Ok(v) => {
                        let v = frame.with_context(v, None);
                        self.child(frame, next, v, None, frame.step, Via::Route { index }).await
                    }
                    Err(f) => self.refused_step(frame, next, *f, Via::Route { index }),
                };
                self.settle(frame, &mut state, next, result)?;
            }
            for (index, flow) in c.dataflow.iter().enumerate() {
                if deferred(flow) && flow.to_output() {
                    let _ = self.prepare(frame, &mut state, flow, index);
                }
            }
        }
        self.result(frame, c, state)
    }

    /// Evaluates a step's value, condition and mapping; records `to: output`
    /// and skipped targets; returns the modules to run with their inputs.
    fn prepare(&self, frame: &Frame<'_>, state: &mut State, flow: &Flow, index: usize) -> Vec<(String, Value)> {
        let value = flow.value(|s| lookup(&state.scope, s));
        if let Some(cond) = &flow.condition
            && !cond.eval(&value)
        {
            let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
            for t in &flow.to {
                if let Target::Module(m) = t {
                    let s = self.begin(m, depth, Some(frame.step), Via::Dataflow { index }, frame.round, Value::Null);
                    let reason = format!("condition `{}` is false", cond.as_str());
                    self.finish(s, &Value::Null, Outcome::Skipped { reason });
                }
            }
            return Vec::new();
        }
        let mapped = flow.map(&value);
        let mut runs = Vec::new();
        for t in &flow.to {
            match t {
                Target::Output => {
                    state.output = Some(match state.output.take() {
                        Some(old) => deep_merge(old, mapped.clone()),
                        None => mapped.clone(),
                    });
                    for s in &flow.from {
                        if let Source::Output(m) = s
                            && let Some(env) = state.scope.get(m).filter(|e| !e.is_null())
                        {
                            state.contributors.push((m.clone(), env.clone()));
                        }
                    }
                }
                Target::Module(m) => match module_input(&mapped) {
                    Ok(v) => runs.push((m.clone(), frame.with_context(v, None))),
                    Err(f) => {
                        let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
                        let s = self.begin(
                            m,
                            depth,
                            Some(frame.step),
                            Via::Dataflow { index },
                            frame.round,
                            mapped.clone(),
                        );
                        let envelope = (*f).into_envelope();
                        self.finish(s, &envelope, outcome_of(&envelope));
                        let optional = frame.config.and_then(|c| c.requirement(m)).is_some_and(|r| r.optional);
                        state.scope.insert(m.clone(), Value::Null);
                        if !optional {
                            state.abort.get_or_insert(envelope);
                        }
                    }
                },
            }
        }
        runs
    }

    fn refused_step(&self, frame: &Frame<'_>, name: &str, f: Failure, via: Via) -> Child {
        let depth = u32::try_from(frame.node.chain.len() + 1).unwrap_or(u32::MAX);
        let s = self.begin(name, depth, Some(frame.step), via, frame.round, Value::Null);
        let envelope = f.into_envelope();
        self.finish(s, &envelope, outcome_of(&envelope));
        if frame.config.and_then(|c| c.requirement(name)).is_some_and(|r| r.optional) {
            Child::Null
        } else {
            Child::Abort(envelope)
        }
    }

    /// Records a child's result in the scope; a required failure stops the
    /// composition, with what succeeded so far as `partial_data`.
    fn settle(&self, frame: &mut Frame<'_>, state: &mut State, target: &str, result: Child) -> Result<(), Value> {
        match result {
            Child::Value { envelope, emitted, module, mode } => {
                frame.absorb(&emitted, mode);
                state.scope.insert(target.to_owned(), envelope.clone());
                if module != target {
                    state.scope.insert(module.clone(), envelope.clone());
                }
                state.last = Some((target.to_owned(), envelope));
                Ok(())
            }
            Child::Null => {
                state.scope.insert(target.to_owned(), Value::Null);
                Ok(())
            }
            Child::Abort(envelope) => Err(with_partial(envelope, &state.scope)),
        }
    }

    /// `parallel`: each wave runs every step whose sources are settled, its
    /// modules concurrently.
    async fn waves(&self, frame: &mut Frame<'_>, c: &Composition, state: &mut State) -> Result<(), Value> {
        let mut pending: Vec<usize> = (0..c.dataflow.len()).collect();
        while !pending.is_empty() {
            let targeted_by_pending = |m: &str, pending: &[usize]| pending.iter().any(|&i| c.dataflow[i].targets(m));
            let (ready, waiting): (Vec<usize>, Vec<usize>) = pending.iter().partition(|&&i| {
                c.dataflow[i].from.iter().all(|s| match s {
                    Source::Input => true,
                    Source::Output(m) => state.scope.contains_key(m) || !targeted_by_pending(m, &pending),
                })
            });
            if ready.is_empty() {
                return Err(dataflow_cycle(c, &waiting, &state.scope));
            }
            let mut runs = Vec::new();
            for &index in &ready {
                for (target, input) in self.prepare(frame, state, &c.dataflow[index], index) {
                    runs.push((index, target, input));
                }
            }
            if let Some(envelope) = state.abort.take() {
                return Err(with_partial(envelope, &state.scope));
            }
            // The wave's steps share a token below the module's: when a
            // required step fails, the composition is over, so its siblings'
            // calls are dropped rather than paid for and thrown away.
            let wave = frame.node.cancel.child_token();
            let wave_node = Node {
                module: Arc::clone(&frame.node.module),
                input: frame.node.input.clone(),
                arguments: frame.node.arguments.clone(),
                chain: frame.node.chain.clone(),
                parent: frame.node.parent,
                via: frame.node.via.clone(),
                round: frame.node.round,
                cancel: wave.clone(),
            };
            let wave_frame = Frame {
                node: &wave_node,
                step: frame.step,
                config: frame.config,
                context: frame.context.clone(),
                emitted: Map::new(),
                round: frame.round,
            };
            let first_abort: Mutex<Option<usize>> = Mutex::new(None);
            let results = futures_util::future::join_all(runs.iter().enumerate().map(|(k, (index, target, input))| {
                let (wave, wave_frame, first_abort) = (&wave, &wave_frame, &first_abort);
                async move {
                    let step = wave_frame.step;
                    let result = self
                        .child(wave_frame, target, input.clone(), None, step, Via::Dataflow { index: *index })
                        .await;
                    if matches!(result, Child::Abort(_)) && !wave.is_cancelled() {
                        if let Ok(mut first) = first_abort.lock() {
                            first.get_or_insert(k);
                        }
                        wave.cancel();
                    }
                    result
                }
            }))
            .await;
            let first_abort = first_abort.into_inner().ok().flatten();
            let mut abort = None;
            for (k, ((_, target, _), result)) in runs.iter().zip(results).enumerate() {
                match (&result, first_abort) {
                    // A sibling cancelled because of the first failure: that
                    // failure, not the cancellation, is the composition's answer.
                    (Child::Abort(_), Some(first)) => {
                        if k == first {
                            abort = Some((target, result));
                        }
                    }
                    _ => self.settle(frame, state, target, result)?,
                }
            }
            if let Some((target, result)) = abort {
                self.settle(frame, state, target, result)?;
            }
            // A step whose targets never ran still counts its targets as settled.
            for &index in &ready {
                for t in &c.dataflow[index].to {
                    if let Target::Module(m) = t {
                        state.scope.entry(m.clone()).or_insert(Value::Null);
                    }
                }
            }
            pending = waiting;
        }
        Ok(())
    }

    /// The envelope a composition's steps produce.
    fn result(&self, frame: &Frame<'_>, c: &Composition, state: State) -> Pass {
        let root = &frame.node.module.name;
        if let Some(value) = state.output {
            let mut contributors = state.contributors;
            if contributors.is_empty() {
                contributors = self.envelopes_ok();
            }
            return Ok(output_envelope(root, c.pattern, &value, &contributors));
        }
        if let Some((_, envelope)) = state.last {
            return Ok(envelope);
        }
        Err(Failure::new(ErrorCode::E2004, format!("no step of `{root}` ran: every condition was false"))
            .details(json!({"module": root}))
            .into_envelope())
    }
}

/// What a composition's steps have done so far.
struct State {
    /// `input`, and each module's envelope (`null` when it yields nothing).
    scope: Map<String, Value>,
    /// The value sent `to: output` so far.
    output: Option<Value>,
    /// The envelopes that fed the output.
    contributors: Vec<(String, Value)>,
    /// The last module that ran, and its envelope.
    last: Option<(String, Value)>,
    /// A required step that could not even start.
    abort: Option<Value>,
}

fn lookup(scope: &Map<String, Value>, source: &Source) -> Value {
    match source {
        Source::Input => scope.get("input").cloned().unwrap_or(Value::Null),
        Source::Output(m) => scope.get(m).cloned().unwrap_or(Value::Null),
    }
}

/// The input a dataflow value gives a module: its payload, which must be an
/// object.
fn module_input(value: &Value) -> Result<Value, Box<Failure>> {
    match payload(value) {
        v @ Value::Object(_) => Ok(v),
        other => Err(Box::new(Failure::new(
            ErrorCode::E1001,
            format!(
                "the dataflow gives this module {} as its input; a module's input is a JSON object",
                noesis_modules::composition::describe(&other)
            ),
        ))),
    }
}

fn with_partial(mut envelope: Value, scope: &Map<String, Value>) -> Value {
    if envelope.get("partial_data").is_some() {
        return envelope;
    }
    let done: Map<String, Value> = scope
        .iter()
        .filter(|(k, v)| *k != "input" && is_ok(v))
        .map(|(k, v)| (k.clone(), v.get("data").cloned().unwrap_or(Value::Null)))
        .collect();
    if !done.is_empty()
        && let Some(obj) = envelope.as_object_mut()
    {
        obj.insert("partial_data".into(), Value::Object(done));
    }
    envelope
}

fn dataflow_cycle(c: &Composition, waiting: &[usize], scope: &Map<String, Value>) -> Value {
    // Follow "waits for" edges from the first waiting step until a module repeats.
    let unsettled = |i: usize| -> Option<String> {
        c.dataflow[i].from.iter().find_map(|s| match s {
            Source::Output(m) if !scope.contains_key(m) => Some(m.clone()),
            _ => None,
        })
    };
    let mut chain: Vec<String> = Vec::new();
    let mut current = waiting.first().and_then(|&i| {
        c.dataflow[i].to.iter().find_map(|t| match t {
            Target::Module(m) => Some(m.clone()),
            Target::Output => None,
        })
    });
    while let Some(m) = current {
        if chain.contains(&m) {
            chain.push(m);
            break;
        }
        chain.push(m.clone());
        current = waiting.iter().find(|&&i| c.dataflow[i].targets(&m)).and_then(|&i| unsettled(i));
    }
    Failure::new(ErrorCode::E4004, format!("circular dataflow: {} (each waits for the next)", chain.join(" → ")))
        .details(json!({"chain": chain}))
        .into_envelope()
}

const RISKS: [&str; 4] = ["none", "low", "medium", "high"];

/// The envelope made from a `to: output` value.
fn output_envelope(root: &str, pattern: Pattern, value: &Value, contributors: &[(String, Value)]) -> Value {
    let mut data = match payload(value) {
        Value::Object(m) => m,
        Value::Array(items) => {
            let mut m = Map::new();
            m.insert("results".into(), Value::Array(items));
            m
        }
        Value::Null => Map::new(),
        other => {
            let mut m = Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    let names: Vec<&str> = contributors.iter().map(|(m, _)| m.as_str()).collect();
    if data.get("rationale").and_then(Value::as_str).is_none_or(|r| r.trim().is_empty()) {
        let parts: Vec<String> = contributors
            .iter()
            .filter_map(|(m, e)| e.pointer("/data/rationale").and_then(Value::as_str).map(|r| format!("{m}: {r}")))
            .collect();
        let rationale = if parts.is_empty() {
            format!("Composed by {root} ({}) without a model's reasoning.", pattern.as_str())
        } else {
            parts.join("\n")
        };
        data.insert("rationale".into(), json!(rationale));
    }
    let confidence = contributors
        .iter()
        .filter_map(|(_, e)| e.pointer("/meta/confidence").and_then(Value::as_f64))
        .fold(None, |acc: Option<f64>, c| Some(acc.map_or(c, |a| a.min(c))))
        .unwrap_or(1.0);
    let risk = contributors
        .iter()
        .filter_map(|(_, e)| e.pointer("/meta/risk").and_then(Value::as_str))
        .filter_map(|r| RISKS.iter().position(|k| *k == r))
        .max()
        .map_or("none", |i| RISKS[i]);
    let explain = if names.is_empty() {
        format!("{root}: {} composition", pattern.as_str())
    } else {
        format!("{root}: {} composition of {}", pattern.as_str(), names.join(", "))
    };
    json!({
        "ok": true,
        "meta": {"confidence": confidence, "risk": risk, "explain": truncate_chars(&explain, noesis_modules::EXPLAIN_MAX_CHARS)},
        "data": Value::Object(data),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_envelope_takes_min_confidence_and_max_risk() {
        let a = json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "a"}, "data": {"x": 1, "rationale": "ra"}});
        let b = json!({"ok": true, "meta": {"confidence": 0.6, "risk": "medium", "explain": "b"}, "data": {"y": 2, "rationale": "rb"}});
        let contributors = vec![("a".to_owned(), a.clone()), ("b".to_owned(), b.clone())];
        let merged = deep_merge(a.clone(), b.clone());
        let env = output_envelope("root", Pattern::Parallel, &merged, &contributors);
        assert_eq!(env["meta"]["confidence"], 0.6);
        assert_eq!(env["meta"]["risk"], "medium");
        assert_eq!(env["data"]["x"], 1);
        assert_eq!(env["data"]["rationale"], "rb");
        assert!(noesis_modules::validate_envelope(&env).is_empty(), "{env}");
        let list = output_envelope("root", Pattern::Parallel, &json!([a, b]), &contributors);
        assert_eq!(list["data"]["results"][1]["y"], 2);
        assert_eq!(list["data"]["rationale"], "a: ra\nb: rb");
        let plain = output_envelope("root", Pattern::Sequential, &json!("text"), &[]);
        assert_eq!(plain["data"]["result"], "text");
        assert_eq!(plain["meta"]["confidence"], 1.0);
        assert!(noesis_modules::validate_envelope(&plain).is_empty(), "{plain}");
    }

    #[test]
    fn injected_json_has_no_placeholder() {
        let env = json!({"ok": true, "data": {"t": "$INPUT and ${x} and $1"}});
        let text = inject(&env);
        assert!(!text.contains('$'));
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), env);
    }
}
