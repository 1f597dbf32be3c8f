//! OpenTelemetry GenAI traces.
//!
//! The crates that do the work open `tracing` spans named and attributed
//! after the GenAI semantic conventions (`invoke_agent {agent}`,
//! `chat {model}`, `execute_tool {tool}`, and `run_module {module}` for a
//! module run); [`attr`] holds the attribute names (the conventions'
//! own constants are marked deprecated upstream, so they are defined here).
//! Prompt and reply texts are never put on a span.
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
        install(&provider)?;
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
/// cost and bury the GenAI tree.
pub fn subscriber(provider: &SdkTracerProvider) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::Layer as _;
    let tracer = provider.tracer("noesis");
    let ours = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::level_filters::LevelFilter::OFF)
        .with_target("noesis_agent", tracing::Level::INFO)
        .with_target("noesis_runtime", tracing::Level::INFO)
        .with_target("noesis_mcp", tracing::Level::INFO)
        .with_target("noesis_serve", tracing::Level::INFO);
    tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer).with_filter(ours))
}

/// Installs [`subscriber`] for the whole process.
pub fn install(provider: &SdkTracerProvider) -> Result<(), TraceError> {
    tracing::subscriber::set_global_default(subscriber(provider)).map_err(|_| TraceError::Installed)
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
        assert_eq!(provider_name("gemini"), "gcp.gemini");
        assert_eq!(provider_name("openai"), "openai");
    }
}
