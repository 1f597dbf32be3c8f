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
//! then does not start. A step the dataflow gives something other than an
//! object is E1001; a composition block that does not parse (only a module
//! built in code can have one: the loader refuses it) is E1004.
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
    /// The ids of its own run's `run_module` span, when traces are exported.
    pub span: Option<noesis_trace::SpanIds>,
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

/// The steps as an aligned table for a person (`noesis compose --trace`):
/// step, parent, module indented by depth, how it came to run, timing,
/// outcome.
pub fn trace_table(steps: &[StepTrace]) -> String {
    let rows: Vec<[String; 6]> = steps
        .iter()
        .map(|s| {
            let round = s.round.map(|r| format!(" #{r}")).unwrap_or_default();
            [
                s.id.to_string(),
                s.parent.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                format!("{}{}", "  ".repeat(s.depth as usize), s.module),
                format!("{}{round}", s.via),
                format!("{:.1}ms +{:.1}ms", s.start_ms, s.elapsed_ms),
                s.outcome.to_string(),
            ]
        })
        .collect();
    let head = ["step", "parent", "module", "via", "start +took", "outcome"];
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  "));
            }
        }
        l
    };
    let mut out = vec![line(&head)];
    for r in &rows {
        out.push(line(&r.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out.join("\n")
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
            span: record.span.clone(),
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
    // One trace for the whole composition: every step's `run_module` span
    // (children run inside this future, never spawned) hangs under it.
    let span = tracing::info_span!(
        "compose",
        otel.name = %format!("compose {}", module.name),
        otel.kind = "internal",
        noesis.module.name = %module.name,
        noesis.module.version = %module.manifest.version,
    );
    let done = tracing::Instrument::instrument(exec.invoke(node), span).await;
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

mod exec;
mod output;
mod resolve;
mod steps;
mod timer;

use output::*;
pub use resolve::{Resolver, SearchResolver};
use timer::Timer;

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
    fn the_trace_table_aligns_its_columns_and_indents_by_depth() {
        let step = |id: usize, parent: Option<usize>, depth: u32, module: &str| StepTrace {
            id,
            module: module.to_owned(),
            depth,
            parent,
            via: if parent.is_some() { Via::Call } else { Via::Root },
            round: None,
            start_ms: 0.0,
            elapsed_ms: 1.25,
            outcome: Outcome::Ok,
            input: Value::Null,
            envelope: Value::Null,
            usage: None,
            calls: 1,
            cost_usd: None,
            span: None,
        };
        let t = trace_table(&[step(0, None, 0, "review"), step(1, Some(0), 1, "lint")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("step  parent  module  via    start +took"), "{t}");
        assert!(lines[2].starts_with("1     0         lint  @call  "), "{t}");
        let outcome_at = lines[0].find("outcome").unwrap();
        assert!(lines.iter().skip(1).all(|l| l.len() > outcome_at), "{t}");
    }

    #[test]
    fn injected_json_has_no_placeholder() {
        let env = json!({"ok": true, "data": {"t": "$INPUT and ${x} and $1"}});
        let text = inject(&env);
        assert!(!text.contains('$'));
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), env);
    }
}
