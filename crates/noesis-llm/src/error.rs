use std::time::Duration;

/// What kind of failure a provider call had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The call did not finish in time.
    Timeout(Duration),
    /// The provider could not be reached or refused the call (5xx,
    /// connection refused, authentication).
    Unavailable,
    /// The provider asked us to slow down (429).
    RateLimited {
        /// `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// The request was rejected as invalid (4xx other than 429).
    Rejected {
        /// The HTTP status.
        status: u16,
    },
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// The provider answered something that is not a chat reply.
    BadResponse,
    /// A scripted provider has nothing (left) to say, or its script is bad.
    Script,
}

/// A failed provider call. Never contains an API key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct ProviderError {
    /// The provider's name.
    pub provider: String,
    /// The kind of failure.
    pub kind: ErrorKind,
    /// What happened, for a human.
    pub message: String,
}

impl ProviderError {
    /// A new error.
    pub fn new(provider: &str, kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError { provider: provider.to_owned(), kind, message: message.into() }
    }

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout(_) | ErrorKind::Unavailable | ErrorKind::RateLimited { .. })
    }
}
