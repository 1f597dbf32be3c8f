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
    /// Replaying recordings, and none matches this request.
    NotRecorded,
    /// The call was cancelled before it finished.
    Cancelled,
    /// A token or cost budget would be exceeded.
    Budget,
}

/// A failed provider call. Never contains an API key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{provider}: {message}{}", after_attempts(*attempts))]
pub struct ProviderError {
    /// The provider's name.
    pub provider: String,
    /// The kind of failure.
    pub kind: ErrorKind,
    /// What happened, for a human.
    pub message: String,
    /// Tries made before giving up; 1 means the call was not retried.
    pub attempts: u32,
}

fn after_attempts(attempts: u32) -> String {
    if attempts > 1 { format!(" (after {attempts} attempts)") } else { String::new() }
}

impl ProviderError {
    /// A new error.
    pub fn new(provider: &str, kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError { provider: provider.to_owned(), kind, message: message.into(), attempts: 1 }
    }

    /// The same error, noting how many tries were made.
    #[must_use]
    pub fn with_attempts(mut self, attempts: u32) -> ProviderError {
        self.attempts = attempts;
        self
    }

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout(_) | ErrorKind::Unavailable | ErrorKind::RateLimited { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_mentions_attempts_only_after_a_retry() {
        let e = ProviderError::new("openai", ErrorKind::Unavailable, "server error (HTTP 500): boom");
        assert_eq!(e.attempts, 1);
        assert_eq!(e.to_string(), "openai: server error (HTTP 500): boom");
        let e = e.with_attempts(3);
        assert_eq!(e.to_string(), "openai: server error (HTTP 500): boom (after 3 attempts)");
    }
}
