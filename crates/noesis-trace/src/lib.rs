//! OpenTelemetry GenAI traces.
//!
//! The crates that do the work open `tracing` spans named and attributed
//! after the GenAI semantic conventions (`invoke_agent {agent}`,
//! `chat {model}` — opened by `noesis-llm`'s `ChatSpan` for every caller —,
//! `execute_tool {tool}`, and `run_module {module}` for a module run);
//! [`attr`] holds the attribute names (the conventions' own constants are
//! marked deprecated upstream, so they are defined here).
//!
//! Architecture invariant: this crate sits below every other noesis crate
//! (the LLM client included) and knows none of their types; it names
//! spans, decides whether texts are captured and exports.
//! Prompt and reply texts are put on a span only when the user opts in
//! (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, see
//! [`capturing`]); [`ids`] gives a span's trace and span ids, which frames
//! keep so a conclusion can be found in the tracing backend.
//!
//! [`Exporter::from_env`] turns those spans into OpenTelemetry spans and
//! exports them over OTLP (http/protobuf) when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, honouring the standard
//! `OTEL_*` variables (headers, timeout, service name). When neither is set
//! nothing is installed: spans go nowhere and cost a disabled callsite check.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;

/// GenAI attribute names.
pub mod attr {
    /// `chat`, `invoke_agent`, `execute_tool`.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The provider (`openai`, `anthropic`, `gcp.gemini`, … or our own name).
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The model that answered.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Prompt tokens.
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Completion tokens.
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// The agent.
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// The run (a conversation).
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// The tool.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// The tool call's id.
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// Opt-in: the messages sent, as the conventions' JSON parts.
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    /// Opt-in: the system instructions sent.
    pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
    /// Opt-in: the reply, as the conventions' JSON parts.
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    /// Opt-in: a tool call's arguments.
    pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    /// Opt-in: a tool call's result.
    pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
    /// `tools/call` on an MCP tool's `execute_tool` span.
    pub const MCP_METHOD_NAME: &str = "mcp.method.name";
    /// The protocol version the MCP server agreed to.
    pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
    /// `pipe` for a child process's stdio, `tcp` for streamable HTTP.
    pub const NETWORK_TRANSPORT: &str = "network.transport";
}

/// The variable that opts in to prompt, reply and tool texts on spans (the
/// name the GenAI instrumentations of other languages read).
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// The trace and span a step ran in, as lowercase hex (W3C trace-context
/// spelling), kept with the step's record and frame.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpanIds {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
}

/// The ids `span` is exported under; `None` when nothing exports it (no
/// subscriber, or one that is not ours).
pub fn ids(span: &tracing::Span) -> Option<SpanIds> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| SpanIds { trace_id: sc.trace_id().to_string(), span_id: sc.span_id().to_string() })
}

/// Marks a subscriber that records texts; found by downcasting the current
/// dispatcher, so the choice travels with the subscriber (a test's, or the
/// process's) instead of a global.
struct Capture;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {}

/// Whether the current subscriber records prompt, reply and tool texts.
pub fn capturing() -> bool {
    tracing::dispatcher::get_default(|d| d.downcast_ref::<Capture>().is_some())
}

/// Whether texts go on `span`: it is exported and the subscriber records
/// texts (the dispatcher is asked only for a live span, so a run with no
/// exporter pays a flag check).
pub fn capturing_on(span: &tracing::Span) -> bool {
    !span.is_disabled() && capturing()
}

/// Whether `value` (of [`CAPTURE_CONTENT_VAR`]) opts in.
pub fn opts_in(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))
}

/// The provider name the conventions know for one of ours.
pub fn provider_name(ours: &str) -> &str {
    match ours {
        "gemini" => "gcp.gemini",
        other => other,
    }
}

/// The tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The exporter could not be built from the `OTEL_*` variables.
    #[error("OpenTelemetry: the OTLP exporter could not be set up: {0}")]
    Exporter(String),
    /// Another subscriber is installed already.
    #[error("OpenTelemetry: a tracing subscriber is installed already")]
    Installed,
}

/// Spans exported over OTLP while it lives; [`Exporter::shutdown`] flushes
/// what is queued.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter(..)")
    }
}

/// Whether `get` (an environment) names an OTLP traces endpoint.
pub fn endpoint_configured(get: &dyn Fn(&str) -> Option<String>) -> bool {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|k| get(k).is_some_and(|v| !v.trim().is_empty()))
        && get("OTEL_SDK_DISABLED").is_none_or(|v| !v.eq_ignore_ascii_case("true"))
}

impl Exporter {
    /// Installs the OTLP exporter as the process's tracing subscriber when
    /// the environment names an endpoint; `None` (nothing installed) when it
    /// does not.
    pub fn from_env(service: &str) -> Result<Option<Exporter>, TraceError> {
        if !endpoint_configured(&|k| std::env::var(k).ok()) {
            return Ok(None);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        // OTEL_SERVICE_NAME (read by the builder) wins over our default.
        let mut resource = opentelemetry_sdk::Resource::builder();
        if !std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty()) {
            resource = resource.with_service_name(service.to_owned());
        }
        let resource = resource.build();
        // The batch processor exports on its own thread with the blocking
        // client: an async client there drops every span.
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        install(&provider, opts_in(std::env::var(CAPTURE_CONTENT_VAR).ok().as_deref()))?;
        Ok(Some(Exporter { provider }))
    }

    /// Exports what is queued and stops.
    pub fn shutdown(self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

/// A subscriber that turns noesis's `tracing` spans into `provider`'s
/// spans. Only noesis's own crates are seen: the HTTP, TLS and SQL crates
/// underneath have spans and events of their own, which would multiply the
/// cost and bury the GenAI tree. Texts are recorded when `capture` is set.
pub fn subscriber(provider: &SdkTracerProvider, capture: bool) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::Layer as _;
    let tracer = provider.tracer("noesis");
    let ours = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::level_filters::LevelFilter::OFF)
        .with_target("noesis_llm", tracing::Level::INFO)
        .with_target("noesis_agent", tracing::Level::INFO)
        .with_target("noesis_runtime", tracing::Level::INFO)
        .with_target("noesis_mcp", tracing::Level::INFO)
        .with_target("noesis_serve", tracing::Level::INFO);
    // Left out, for what they cost per span and per poll of an instrumented
    // future: source locations, thread and target attributes (no GenAI
    // backend reads them), busy/idle timing (an Instant::now per poll), and
    // activating an OpenTelemetry context on every entry (nothing of ours
    // reads it; parents come from the tracing tree).
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_filter(ours);
    tracing_subscriber::registry().with(layer).with(capture.then_some(Capture))
}

/// Installs [`subscriber`] for the whole process.
pub fn install(provider: &SdkTracerProvider, capture: bool) -> Result<(), TraceError> {
    tracing::subscriber::set_global_default(subscriber(provider, capture)).map_err(|_| TraceError::Installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_turns_export_on_and_sdk_disabled_turns_it_off() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        assert!(!endpoint_configured(&env(&[])));
        assert!(endpoint_configured(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])));
        assert!(endpoint_configured(&env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x/v1/traces")])));
        assert!(!endpoint_configured(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!endpoint_configured(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true")
        ])));
        assert!(opts_in(Some("true")) && opts_in(Some(" TRUE ")) && opts_in(Some("1")));
        assert!(!opts_in(None) && !opts_in(Some("false")) && !opts_in(Some("")));
        assert_eq!(provider_name("gemini"), "gcp.gemini");
        assert_eq!(provider_name("openai"), "openai");
    }
}
