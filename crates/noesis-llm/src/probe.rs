//! Is an endpoint there, and does it take our key? One cheap `GET` per
//! dialect (a model listing), for `noesis doctor`.

use std::time::{Duration, Instant};

use crate::http::{EndpointConfig, redact_url};
use crate::presets::Wire;

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Probe {
    /// The URL asked (never with a key or a base URL's `user:password@` in it).
    pub url: String,
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// Milliseconds until the answer or the failure.
    pub latency_ms: u64,
    /// What went wrong, for a human; `None` when the endpoint answered 2xx.
    pub problem: Option<String>,
}

impl Probe {
    /// The endpoint answered and accepted the key.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Probes `config` as `wire`, giving up after `timeout`.
pub async fn probe(wire: Wire, config: &EndpointConfig, timeout: Duration) -> Probe {
    let (url, headers) = match wire {
        Wire::OpenAi => (config.url("models"), bearer(config)),
        Wire::Anthropic => {
            let mut h = vec![("anthropic-version", crate::ANTHROPIC_VERSION.to_owned())];
            h.extend(config.api_key.clone().map(|k| ("x-api-key", k)));
            // Base URLs are accepted with or without the version segment.
            let path = if config.base_url.trim_end_matches('/').ends_with("/v1") { "models" } else { "v1/models" };
            (config.url(path), h)
        }
        Wire::Gemini => {
            (config.url("models"), config.api_key.clone().map(|k| ("x-goog-api-key", k)).into_iter().collect())
        }
        Wire::Ollama => (config.url("api/tags"), Vec::new()),
    };
    let target = match url {
        Ok(u) => u,
        Err(e) => {
            return Probe { url: redact_url(&config.base_url), status: None, latency_ms: 0, problem: Some(e.message) };
        }
    };
    // What is shown never carries the credentials a base URL may hold.
    let url = redact_url(target.as_str());
    let started = Instant::now();
    let client = match reqwest::Client::builder().timeout(timeout).connect_timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => {
            return Probe { url, status: None, latency_ms: 0, problem: Some(format!("cannot build a client: {e}")) };
        }
    };
    let mut req = client.get(target);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let result = req.send().await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let problem = match status {
                200..=299 => None,
                401 | 403 => Some(format!("the key was refused (HTTP {status})")),
                404 => Some("answered, but has no model listing here (HTTP 404): check the base URL".to_owned()),
                s => Some(format!("answered HTTP {s}")),
            };
            Probe { url, status: Some(status), latency_ms, problem }
        }
        Err(e) => {
            let problem = if e.is_timeout() {
                format!("no answer within {timeout:?}")
            } else {
                let mut msg = "unreachable".to_owned();
                let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg = format!("{msg}: {s}");
                    src = s.source();
                }
                msg
            };
            Probe { url, status: None, latency_ms, problem: Some(problem) }
        }
    }
}

fn bearer(config: &EndpointConfig) -> Vec<(&'static str, String)> {
    config.api_key.as_ref().map(|k| ("authorization", format!("Bearer {k}"))).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn an_unreachable_endpoint_is_a_problem_not_a_panic() {
        let cfg = EndpointConfig::new("openai", "http://127.0.0.1:1/v1", "m");
        let p = block(probe(Wire::OpenAi, &cfg, Duration::from_secs(2)));
        assert_eq!(p.url, "http://127.0.0.1:1/v1/models");
        assert_eq!(p.status, None);
        assert!(p.problem.as_deref().unwrap().starts_with("unreachable"), "{p:?}");
        assert!(!p.ok());
    }

    #[test]
    fn credentials_in_the_base_url_are_never_shown() {
        let cfg = EndpointConfig::new("openai", "http://proxy-user:s3cret@127.0.0.1:1/v1", "m");
        let p = block(probe(Wire::OpenAi, &cfg, Duration::from_secs(2)));
        assert_eq!(p.url, "http://***@127.0.0.1:1/v1/models");
        let shown = serde_json::to_string(&p).unwrap();
        assert!(!shown.contains("s3cret") && !shown.contains("proxy-user"), "{shown}");
        let bad = EndpointConfig::new("openai", "http://u:s3cret@[::1", "m");
        let p = block(probe(Wire::OpenAi, &bad, Duration::from_secs(2)));
        assert_eq!(p.url, "http://***@[::1");
        assert!(p.problem.as_deref().unwrap().contains("not usable"), "{p:?}");
        assert!(!serde_json::to_string(&p).unwrap().contains("s3cret"));
    }

    #[test]
    fn each_dialect_asks_its_own_listing() {
        // Unreachable on purpose: only the URL asked is checked here.
        let url =
            |wire, base: &str| block(probe(wire, &EndpointConfig::new("x", base, "m"), Duration::from_secs(1))).url;
        assert_eq!(url(Wire::Anthropic, "http://127.0.0.1:1"), "http://127.0.0.1:1/v1/models");
        assert_eq!(url(Wire::Anthropic, "http://127.0.0.1:1/v1"), "http://127.0.0.1:1/v1/models");
        assert_eq!(url(Wire::Gemini, "http://127.0.0.1:1/v1beta"), "http://127.0.0.1:1/v1beta/models");
        assert_eq!(url(Wire::Ollama, "http://127.0.0.1:1"), "http://127.0.0.1:1/api/tags");
    }
}
