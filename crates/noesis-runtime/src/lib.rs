//! One module run, end to end.
//!
//! `run` glues the pure module rules (`noesis-modules`) to a provider
//! (`noesis-llm`): validate the input, build the prompt, call the model, check
//! and repair the reply, and stamp the runtime's meta (`trace_id`, `model`,
//! `latency_ms`). Every path returns an envelope that validates against the
//! official v2.2 schema; nothing panics on user input.
//!
//! Architecture invariant: no CLI, HTTP-server or storage concerns here; a
//! run is a function of a module, a provider and an input.
//!
//! ```
//! use noesis_llm::TestModel;
//! use noesis_modules::search::Found;
//! use noesis_runtime::{run, RunOptions};
//! let module = Found::Builtin("code-simplifier").load().unwrap();
//! let input = serde_json::json!({"code": "x = 1"});
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let record = rt.block_on(run(&module, &TestModel, input, &RunOptions::default()));
//! assert_eq!(record.envelope["ok"], true);
//! ```
#![deny(missing_docs)]

pub mod cases;
pub mod compose;
mod context;

pub use context::{
    Clock, ContextEntry, ContextLookup, ContextOptions, ContextStore, ContextStoreError, ManualClock,
    MemoryContextStore, SystemClock,
};
pub use std::time::Instant;
pub use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use noesis_llm::{
    BudgetMeter, ChatRequest, ChatResponse, ErrorKind, FinishReason, Message, Price, PriceTable, Provider,
    ProviderError, Reservation, ResponseFormat, StructuredMode, Usage, estimate_tokens,
};
use noesis_modules::context::{self as ctx, ContextSpec, KeyVars};
use noesis_modules::enforce;
use noesis_modules::{
    ErrorCode, Failure, Found, Module, PromptParts, Violation, build_prompt, check_input, check_reply,
    validate_envelope,
};
use serde_json::{Map, Value, json};

/// Receives the reply's text as it streams in.
#[derive(Clone)]
pub struct OnText(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for OnText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnText(..)")
    }
}

/// Per-run settings.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The argument text (`$ARGUMENTS`).
    pub arguments: Option<String>,
    /// Cap on output tokens.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// A trace id to use instead of a fresh one.
    pub trace_id: Option<String>,
    /// How many times a reply that is still invalid after repair is sent
    /// back with its violations for another try (default 1).
    pub reask: u32,
    /// Stream the reply: text goes here as it arrives.
    pub on_text: Option<OnText>,
    /// Stops the run (and its in-flight provider call) when cancelled: E2002.
    pub cancel: Option<CancellationToken>,
    /// Limits on tokens and cost; share one meter to give runs one budget.
    pub budget: Option<Arc<BudgetMeter>>,
    /// Prices for `meta.usage.cost_usd`; the built-in table when `None`.
    pub prices: Option<Arc<PriceTable>>,
    /// Where emitted context is stored and served from; without it a run
    /// sees only the `_context` its input carries.
    pub context: Option<ContextOptions>,
    /// Capabilities the host grants (`network`, `filesystem_write`,
    /// `side_effects`, `code_execution`, or a module's own policy name). A
    /// module whose `policies` allow something not granted is refused
    /// (E4007). Empty by default: safe unless told otherwise.
    pub allow: Vec<String>,
    /// Tools the caller offers the module, by name. Each must be one the
    /// module's `tools` permits (E4007 otherwise), and a reply may call only
    /// these.
    pub tools: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            arguments: None,
            max_tokens: None,
            temperature: None,
            trace_id: None,
            reask: 1,
            on_text: None,
            cancel: None,
            budget: None,
            prices: None,
            context: None,
            allow: Vec::new(),
            tools: Vec::new(),
        }
    }
}

/// One provider call, streamed when asked, abandoned when cancelled. With a
/// budget, the most the call may cost (its estimated prompt and its output
/// cap, at `price`) is reserved first, atomically with the check, so runs
/// sharing the meter cannot overspend it together; the caller settles the
/// reservation with the real usage, and a failed call releases it.
async fn call<'o>(
    provider: &dyn Provider,
    request: &ChatRequest,
    options: &'o RunOptions,
    price: Option<Price>,
) -> Result<(ChatResponse, Option<Reservation<'o>>), ProviderError> {
    let mut capped;
    let (request, reservation) = match &options.budget {
        Some(meter) => {
            capped = request.clone();
            let held = meter
                .reserve_request_waiting(&mut capped, price)
                .await
                .map_err(|r| ProviderError::new(provider.name(), ErrorKind::Budget, r.message))?;
            (&capped, Some(held))
        }
        None => (request, None),
    };
    let chat = noesis_llm::ChatSpan::start(provider, request, None);
    let fut = chat.call(async {
        match &options.on_text {
            Some(OnText(f)) => provider.chat_stream(request, &**f).await,
            None => provider.chat(request).await,
        }
    });
    let response = match &options.cancel {
        None => fut.await,
        // Dropping the provider's future closes its connection.
        Some(token) => tokio::select! {
            r = fut => r,
            () = token.cancelled() => Err(ProviderError::new(provider.name(), ErrorKind::Cancelled, "the run was cancelled")),
        },
    };
    response.map(|r| (r, reservation))
}

/// Codes that mean "the reply had the wrong shape" — worth one more try with
/// the violations spelled out. Low confidence (E2001) is the model's honest
/// answer and a model-declared failure is a real answer: neither is re-asked.
fn worth_reasking(code: Option<&str>) -> bool {
    matches!(code, Some("E1000" | "E3001" | "E3003" | "E3004" | "E3005"))
}

fn reask_message(violations: &[Violation], code: &str) -> String {
    let mut msg = format!(
        "Your reply was rejected ({code}). Fix these problems and reply again with only the corrected JSON envelope:\n"
    );
    if violations.is_empty() {
        msg.push_str("- the reply must be exactly one JSON object: the v2.2 envelope\n");
    }
    for v in violations.iter().take(20) {
        let at = if v.pointer.is_empty() { "(root)" } else { v.pointer.as_str() };
        msg.push_str(&format!("- {at}: {}\n", v.message));
    }
    msg
}

/// What happened in one run: the envelope and how it came about.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRecord {
    /// The envelope returned to the caller.
    pub envelope: Value,
    /// The prompt sent (absent when the input was refused).
    pub prompt: Option<String>,
    /// The model's raw reply.
    pub reply: Option<String>,
    /// How structured output was requested.
    pub structured: Option<StructuredMode>,
    /// Where the JSON was found in the reply.
    pub found: Option<Found>,
    /// What the repair pass changed.
    pub repairs: Vec<String>,
    /// The violations behind a failed check.
    pub violations: Vec<Violation>,
    /// Token usage reported by the provider, summed over every call.
    pub usage: Option<Usage>,
    /// Provider calls made (more than 1 after a re-ask).
    pub calls: u32,
    /// What the calls cost in US dollars, when every model's price is known.
    pub cost_usd: Option<f64>,
    /// Context the module emitted (`_emitted_context`), for its caller to
    /// propagate (`context: main`) or keep to the child (`fork`).
    pub emitted_context: Option<Value>,
    /// The `run_module` span's ids, when traces are exported.
    pub span: Option<noesis_trace::SpanIds>,
}

const SYSTEM: &str = "You are a Cognitive Module. Follow the instructions and answer with exactly one JSON object: the v2.2 response envelope.";

/// Runs `module` on `input` with `provider` (a `run_module {name}` span,
/// its model calls `chat {model}` spans under it).
pub async fn run(module: &Module, provider: &dyn Provider, input: Value, options: &RunOptions) -> RunRecord {
    let span = tracing::info_span!(
        "run_module",
        otel.name = %format!("run_module {}", module.name),
        otel.kind = "internal",
        noesis.module.name = %module.name,
        noesis.module.version = %module.manifest.version,
    );
    let ids = noesis_trace::ids(&span);
    let mut record = tracing::Instrument::instrument(run_traced(module, provider, input, options), span).await;
    record.span = ids;
    record
}

async fn run_traced(module: &Module, provider: &dyn Provider, input: Value, options: &RunOptions) -> RunRecord {
    let started = Instant::now();
    let trace_id = options.trace_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let model_id = format!("{}/{}", provider.name(), provider.model());
    let mut record = RunRecord {
        envelope: Value::Null,
        prompt: None,
        reply: None,
        structured: None,
        found: None,
        repairs: Vec::new(),
        violations: Vec::new(),
        usage: None,
        calls: 0,
        cost_usd: Some(0.0),
        emitted_context: None,
        span: None,
    };
    let mut model_id = model_id;
    let prices = options.prices.clone().unwrap_or_else(|| Arc::new(PriceTable::builtin()));

    let mut input = input;
    if let (Some(args), Some(obj)) = (&options.arguments, input.as_object_mut()) {
        // The argument text fills the input fields a module declares for it
        // (`$ARGUMENTS`, `query`); undeclared fields are never added, so a
        // closed input schema still validates.
        let declared = |k: &str| {
            module
                .input
                .as_ref()
                .and_then(|s| s.schema.pointer(&format!("/properties/{}", k.replace('~', "~0").replace('/', "~1"))))
                .is_some()
        };
        for key in ["$ARGUMENTS", "query"] {
            if declared(key) && !obj.contains_key(key) {
                obj.insert(key.to_owned(), json!(args));
            }
        }
    }

    // `_context` leaves the input before anything else sees it: the input
    // schema never meets it and no placeholder can reach it.
    let caller_context = ctx::take_context(&mut input);
    let identity = Identity::of(options, caller_context.as_ref().ok());
    let spec = ContextSpec::of(&module.manifest);
    let mut emitted = None;

    let envelope = match admit(module, provider, &spec, &input, caller_context, options, &identity).await {
        Err(failure) => (*failure).into_envelope(),
        Ok(context) => {
            let caps = provider.capabilities();
            let prompt = build_prompt(PromptParts {
                template: &module.prompt,
                input: &input,
                arguments: options.arguments.as_deref(),
                data_schema: module.data.as_ref().map(|s| &s.schema),
                include_schema: !caps.json_schema,
            });
            let prompt = ctx::insert_section(&prompt, &ctx::context_section(&context, &spec));
            let response_format = if caps.json_schema {
                ResponseFormat::JsonSchema {
                    name: module.name.clone(),
                    schema: with_emitted(module.reply_schema(), &spec),
                }
            } else if caps.json_mode {
                ResponseFormat::JsonObject
            } else {
                ResponseFormat::Text
            };
            let request = ChatRequest {
                messages: vec![Message::system(SYSTEM), Message::user(prompt.clone())],
                response_format,
                max_tokens: options.max_tokens,
                temperature: options.temperature,
                ..ChatRequest::default()
            };
            record.prompt = Some(prompt);
            let mut request = request;
            loop {
                record.calls += 1;
                let price = prices.price(model_id.split_once('/').map_or(model_id.as_str(), |(_, m)| m));
                let (resp, reservation) = match call(provider, &request, options, price).await {
                    Err(e) => break provider_failure(&e).into_envelope(),
                    Ok(answered) => answered,
                };
                record.structured = Some(resp.structured);
                if let Some(by) = &resp.served_by {
                    model_id.clone_from(by);
                }
                let usage = resp.usage.unwrap_or_default();
                if resp.usage.is_some() {
                    *record.usage.get_or_insert_with(Usage::default) += usage;
                }
                // Priced by the model asked for (`gpt-4o-mini`), which the
                // table knows, rather than the dated name servers answer with.
                let priced_model = model_id.split_once('/').map_or(model_id.as_str(), |(_, m)| m);
                let cost = prices.cost(priced_model, usage).or_else(|| prices.cost(&resp.model, usage));
                record.cost_usd = record.cost_usd.zip(cost).map(|(a, b)| a + b);
                if let Some(reservation) = reservation {
                    if resp.usage.is_some() {
                        reservation.settle(usage, cost);
                    } else {
                        reservation.settle_at_estimate();
                    }
                }
                let called: Vec<&str> = resp.tool_calls.iter().map(|c| c.name.as_str()).collect();
                if let Err(failure) = enforce::check_tool_calls(&module.manifest, &options.tools, &called) {
                    record.reply = Some(resp.text);
                    break failure.into_envelope();
                }
                let (text, found, taken) = ctx::take_emitted(&resp.text);
                emitted = taken;
                let checked = check_reply(module, &text);
                record.found = found.or(checked.found);
                record.repairs = checked.repairs;
                record.violations = checked.violations;
                let code = checked.envelope.pointer("/error/code").and_then(Value::as_str).map(str::to_owned);
                if resp.finish_reason == Some(FinishReason::Length)
                    && matches!(code.as_deref(), Some("E1000" | "E3001"))
                {
                    record.reply = Some(resp.text);
                    let partial =
                        checked.envelope.get("partial_data").cloned().filter(|_| module.policy.partial_allowed);
                    break Failure::new(ErrorCode::E2003, "the reply was cut off by the output token limit")
                        .partial(partial)
                        .into_envelope();
                }
                if record.calls > options.reask || !worth_reasking(code.as_deref()) {
                    record.reply = Some(resp.text);
                    break checked.envelope;
                }
                let feedback = reask_message(&record.violations, code.as_deref().unwrap_or("E3001"));
                request.messages.push(Message::assistant(resp.text));
                request.messages.push(Message::user(feedback));
            }
        }
    };
    // Only a successful run hands context on: a failed one's is not trusted.
    if envelope["ok"] == json!(true) {
        let kept = ctx::keep_emitted(&spec, emitted);
        if !kept.is_empty() {
            if let Some(c) = &options.context {
                store_emitted(module, &spec, &kept, &input, c, &identity).await;
            }
            record.emitted_context = Some(Value::Object(kept));
        }
    }
    let mut envelope = envelope;
    if let (Some(u), Some(meta)) = (record.usage, envelope.get_mut("meta").and_then(Value::as_object_mut)) {
        // `meta` allows extra keys; the totals cover every call of the run.
        let mut usage =
            json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "calls": record.calls});
        if let Some(c) = record.cost_usd {
            usage["cost_usd"] = json!((c * 1e8).round() / 1e8);
        }
        meta.insert("usage".into(), usage);
    }
    record.envelope = stamp(envelope, &trace_id, &model_id, started);
    record
}

/// The user and session a run belongs to, for key patterns and for which
/// stored context it may be served: the options' own, else what its
/// `_context` names, else `anonymous` / `none`.
struct Identity {
    user: String,
    session: String,
}

impl Identity {
    fn of(options: &RunOptions, context: Option<&Map<String, Value>>) -> Identity {
        let (user, session) = context.map(ctx::identity).unwrap_or_default();
        let set = options.context.as_ref();
        Identity {
            user: set.and_then(|c| c.user_id.clone()).or(user).unwrap_or_else(|| "anonymous".to_owned()),
            session: set.and_then(|c| c.session_id.clone()).or(session).unwrap_or_else(|| "none".to_owned()),
        }
    }
}

/// Everything decided before the provider is called: permissions (E4007),
/// the context (stored entries served, checked, filtered, redacted), the
/// input (E1001–E1003) and runtime requirements. Returns the context that
/// reaches the prompt.
async fn admit(
    module: &Module,
    provider: &dyn Provider,
    spec: &ContextSpec,
    input: &Value,
    caller_context: Result<Map<String, Value>, Box<Failure>>,
    options: &RunOptions,
    identity: &Identity,
) -> Result<Map<String, Value>, Box<Failure>> {
    enforce::check_policies(&module.manifest, &options.allow)?;
    enforce::check_offered_tools(&module.manifest, &options.tools)?;
    let mut context = caller_context?;
    if let Some(c) = &options.context {
        serve_stored(spec, &mut context, c, identity).await;
    }
    let prepared = ctx::prepare(spec, context)?;
    check_input(module, input)?;
    // The context reaches the prompt too, so it counts toward
    // `max_input_tokens`.
    let mut sized = input.clone();
    if let Some(obj) = sized.as_object_mut().filter(|_| !prepared.context.is_empty()) {
        obj.insert(ctx::CONTEXT_KEY.to_owned(), Value::Object(prepared.context.clone()));
    }
    check_requirements(module, provider, &sized)?;
    Ok(prepared.context)
}

/// Fills each accepted type the caller did not send with the newest live
/// stored entry of it. A store that fails is a warning, never a failed run.
async fn serve_stored(spec: &ContextSpec, context: &mut Map<String, Value>, c: &ContextOptions, id: &Identity) {
    let now = c.clock.now_ms();
    let wanted: Vec<ctx::Accept> = ctx::missing(spec, context).into_iter().cloned().collect();
    for accept in wanted {
        let not_before = accept.ttl.filter(|t| *t >= 0).map(|t| now.saturating_sub(t.saturating_mul(1000)));
        let lookup = ContextLookup {
            kind: &accept.kind,
            user_id: &id.user,
            session_id: &id.session,
            now_ms: now,
            not_before_ms: not_before,
        };
        match c.store.latest(&lookup).await {
            Ok(Some(entry)) if ctx::check_type(&accept.kind, &entry.value).is_ok() => {
                context.insert(accept.kind, entry.value);
            }
            Ok(Some(entry)) => {
                c.warn(&format!("stored context `{}` under `{}` is malformed; not served", accept.kind, entry.key));
            }
            Ok(None) => {}
            Err(e) => c.warn(&format!("stored context `{}` could not be read: {e}", accept.kind)),
        }
    }
}

/// Stores each kept entry under its expanded key pattern with its TTL.
async fn store_emitted(
    module: &Module,
    spec: &ContextSpec,
    kept: &Map<String, Value>,
    input: &Value,
    c: &ContextOptions,
    id: &Identity,
) {
    let now = c.clock.now_ms();
    let digest = blake3::hash(ctx::canonical_json(input).as_bytes()).to_hex();
    let input_hash = &digest.as_str()[..16];
    for (kind, value) in kept {
        let Some(emit) = spec.emit(kind) else { continue };
        let ttl = emit.ttl_secs();
        if ttl == 0 {
            // Expired the moment it is stored: nothing to keep.
            continue;
        }
        let pattern = emit.pattern();
        let vars =
            KeyVars { module: &module.name, input_hash, user_id: Some(&id.user), session_id: Some(&id.session), kind };
        let (by_user, by_session) = ctx::scoped_by(pattern);
        let entry = ContextEntry {
            key: ctx::expand_key(pattern, &vars),
            kind: kind.clone(),
            value: value.clone(),
            module: module.name.clone(),
            user_id: by_user.then(|| id.user.clone()),
            session_id: by_session.then(|| id.session.clone()),
            created_at_ms: now,
            // The schema's minimum is -1; anything negative is persistent.
            expires_at_ms: (ttl > 0).then(|| now.saturating_add(ttl.saturating_mul(1000))),
        };
        if let Err(e) = c.store.put(&entry).await {
            c.warn(&format!("emitted context `{kind}` was not stored: {e}"));
        }
    }
}

/// For a module that emits context, the reply schema's success `meta` names
/// `_emitted_context` and the declared types, so a model held to the schema
/// can still emit.
fn with_emitted(mut schema: Value, spec: &ContextSpec) -> Value {
    if spec.emits.is_empty() {
        return schema;
    }
    let kinds: Map<String, Value> = spec.emits.iter().map(|e| (e.kind.clone(), json!({}))).collect();
    for branch in schema.get_mut("oneOf").and_then(Value::as_array_mut).into_iter().flatten() {
        if branch.pointer("/properties/ok/const") != Some(&json!(true)) {
            continue;
        }
        if let Some(meta) = branch.pointer_mut("/properties/meta/properties").and_then(Value::as_object_mut) {
            meta.insert(ctx::EMITTED_KEY.to_owned(), json!({"type": "object", "properties": kinds.clone()}));
        }
    }
    schema
}

/// `runtime_requirements`: an input over `max_input_tokens` is E1005 (by
/// the same estimate budgets use); a module that requires structured output
/// is refused by a provider that can give neither a JSON Schema nor JSON
/// mode (E4001 — this provider cannot serve this module; another can).
fn check_requirements(module: &Module, provider: &dyn Provider, input: &Value) -> Result<(), Box<Failure>> {
    let Some(req) = &module.manifest.runtime_requirements else { return Ok(()) };
    if let Some(max) = req.max_input_tokens {
        let text = serde_json::to_string(input).unwrap_or_default();
        let estimated = estimate_tokens(&text);
        if estimated > max {
            return Err(Box::new(
                Failure::new(
                    ErrorCode::E1005,
                    format!("the input is about {estimated} tokens, over the module's max_input_tokens of {max}"),
                )
                .details(json!({"estimated_tokens": estimated, "max_input_tokens": max})),
            ));
        }
    }
    let caps = provider.capabilities();
    if req.structured_output == Some(true) && !caps.json_schema && !caps.json_mode {
        return Err(Box::new(
            Failure::new(
                ErrorCode::E4001,
                format!(
                    "{} requires structured output, which provider {}/{} cannot give (no JSON Schema or JSON mode); choose a provider that has it",
                    module.name,
                    provider.name(),
                    provider.model()
                ),
            )
            .details(json!({"requirement": "structured_output", "provider": provider.name()})),
        ));
    }
    Ok(())
}

/// Fills the runtime's meta (`trace_id`, `model` as `provider/model`,
/// `latency_ms` since `started`) and guarantees the result validates against
/// the official schema (E4000 otherwise). Front ends use it for envelopes
/// they make themselves (module not found, unreadable input).
pub fn stamp(mut envelope: Value, trace_id: &str, model_id: &str, started: Instant) -> Value {
    if let Some(meta) = envelope.get_mut("meta").and_then(Value::as_object_mut) {
        meta.insert("trace_id".into(), json!(trace_id));
        meta.insert("model".into(), json!(model_id));
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        meta.insert("latency_ms".into(), json!((ms * 1000.0).round() / 1000.0));
    }
    let violations = validate_envelope(&envelope);
    if violations.is_empty() {
        return envelope;
    }
    // Our own output must always validate; if it does not, say so plainly
    // rather than hand the caller a malformed envelope.
    let internal = Failure::new(ErrorCode::E4000, "noesis produced an envelope that breaks the v2.2 schema")
        .details(json!({ "violations": violations }))
        .into_envelope();
    stamp(internal, trace_id, model_id, started)
}

/// Maps a provider failure to its E-code.
pub fn provider_failure(e: &ProviderError) -> Failure {
    let code = match e.kind {
        ErrorKind::Timeout(_) => ErrorCode::E2002,
        ErrorKind::RateLimited { .. } => ErrorCode::E4002,
        ErrorKind::ContextOverflow => ErrorCode::E4003,
        ErrorKind::Unavailable
        | ErrorKind::Rejected { .. }
        | ErrorKind::BadResponse
        | ErrorKind::Script
        | ErrorKind::NotRecorded => ErrorCode::E4001,
        // The caller stopped waiting: the same outcome as running out of time.
        ErrorKind::Cancelled => ErrorCode::E2002,
        // A budget is a policy the caller set.
        ErrorKind::Budget => ErrorCode::E4007,
    };
    Failure::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use noesis_llm::{Scripted, TestModel};
    use noesis_modules::search::Found as Where;

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn test_model_succeeds_on_every_builtin() {
        for name in ["code-simplifier", "code-reviewer", "task-prioritizer"] {
            let m = Where::Builtin(name).load().unwrap();
            let input = if name == "code-simplifier" { json!({"code": "x=1"}) } else { json!({}) };
            let r = block(run(&m, &TestModel, input, &RunOptions::default()));
            assert_eq!(r.envelope["ok"], true, "{name}: {}", r.envelope);
            assert_eq!(r.envelope["meta"]["model"], "test/schema");
            assert!(r.envelope["meta"]["latency_ms"].as_f64().unwrap() >= 0.0);
            assert!(r.prompt.unwrap().contains("Response format"));
        }
    }

    /// A provider that can give neither a schema nor JSON mode.
    struct PlainText;

    #[async_trait::async_trait]
    impl Provider for PlainText {
        fn name(&self) -> &str {
            "plain"
        }
        fn model(&self) -> &str {
            "text"
        }
        fn capabilities(&self) -> noesis_llm::Capabilities {
            noesis_llm::Capabilities::default()
        }
        async fn chat(&self, _: &ChatRequest) -> Result<noesis_llm::ChatResponse, ProviderError> {
            Err(ProviderError::new("plain", ErrorKind::Script, "must not be called"))
        }
    }

    fn with_requirements(yaml: &str) -> Module {
        let mut m = Where::Builtin("code-simplifier").load().unwrap();
        m.manifest.runtime_requirements = Some(serde_saphyr::from_str(yaml).unwrap());
        m
    }

    #[test]
    fn input_over_max_input_tokens_is_e1005_before_any_call() {
        let m = with_requirements("max_input_tokens: 50");
        let big = json!({"code": "value = compute(alpha, beta) + 1;\n".repeat(20)});
        let r = block(run(&m, &PlainText, big, &RunOptions::default()));
        assert_eq!(r.envelope["error"]["code"], "E1005", "{}", r.envelope);
        assert_eq!(r.envelope["error"]["details"]["max_input_tokens"], 50);
        assert!(r.envelope["error"]["details"]["estimated_tokens"].as_u64().unwrap() > 50);
        assert_eq!(r.calls, 0);
        // Under the limit the run goes ahead.
        let r = block(run(&m, &TestModel, json!({"code": "x = 1"}), &RunOptions::default()));
        assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
    }

    #[test]
    fn structured_output_requirement_refuses_a_plain_text_provider() {
        let m = with_requirements("structured_output: true");
        let r = block(run(&m, &PlainText, json!({"code": "x = 1"}), &RunOptions::default()));
        assert_eq!(r.envelope["error"]["code"], "E4001", "{}", r.envelope);
        assert!(r.envelope["error"]["message"].as_str().unwrap().contains("requires structured output"));
        assert_eq!(r.calls, 0);
        // JSON mode is enough.
        let r = block(run(&m, &Scripted::new(vec!["x".into()]), json!({"code": "x = 1"}), &RunOptions::default()));
        assert_ne!(r.envelope["error"]["code"], "E4001", "{}", r.envelope);
    }

    /// The codes the runtime never raises itself (E1006, E2005, E2006,
    /// E3002, E3006) are the model's to report: a reply carrying one comes
    /// back as that failure, valid, with its code kept.
    #[test]
    fn model_reported_codes_pass_through_as_valid_failures() {
        // A module that leaves its error codes open (no error schema).
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("module.yaml"),
            "name: open\nversion: 1.0.0\nresponsibility: r\ntier: decision\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("prompt.md"), "Answer.").unwrap();
        let m = noesis_modules::load_dir(dir.path()).unwrap();
        for code in ["E1006", "E2005", "E2006", "E3002", "E3006"] {
            let reply = json!({"ok": false, "meta": {"confidence": 0.4, "risk": "medium", "explain": "the model says so"},
                               "error": {"code": code, "message": "reported by the model"}});
            let r = block(run(
                &m,
                &Scripted::new(vec![reply.to_string()]),
                json!({"code": "x = 1"}),
                &RunOptions::default(),
            ));
            assert_eq!(r.envelope["ok"], false, "{code}: {}", r.envelope);
            assert_eq!(r.envelope["error"]["code"], code, "{}", r.envelope);
            assert!(validate_envelope(&r.envelope).is_empty(), "{code}: {}", r.envelope);
        }
    }

    #[test]
    fn length_cut_is_e2003_and_input_failure_is_e1002() {
        let m = Where::Builtin("code-simplifier").load().unwrap();
        let r = block(run(&m, &TestModel, json!({}), &RunOptions::default()));
        assert_eq!(r.envelope["error"]["code"], "E1002");
        assert_eq!(r.envelope["error"]["details"]["pointer"], "/code");
        assert!(r.prompt.is_none());
        let s = Scripted::new(vec!["not json".into()]);
        let r = block(run(&m, &s, json!({"code": "x"}), &RunOptions::default()));
        assert_eq!(r.envelope["error"]["code"], "E1000");
        assert!(validate_envelope(&r.envelope).is_empty());
    }
}
