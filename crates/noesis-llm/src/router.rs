//! Choosing a provider per module (routing rules) and trying the next one
//! when a provider fails (a fallback chain).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{ErrorKind, ProviderError};
use crate::types::{Capabilities, ChatRequest, ChatResponse};
use crate::{Provider, TextSink};

/// One routing rule: modules matching `module` (a name with `*` wildcards)
/// and/or of tier `tier` go to `provider` (and `model`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Module tier to match (`exec`, `decision`, `exploration`).
    #[serde(default)]
    pub tier: Option<String>,
    /// Module name pattern to match; `*` matches any run of characters.
    #[serde(default)]
    pub module: Option<String>,
    /// The provider to use.
    pub provider: String,
    /// The model to use; the provider's default when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// `module` compiled on first use, so routing a call compiles nothing.
    #[serde(skip)]
    compiled: Compiled,
}

impl Route {
    /// A rule sending modules that match `module` and/or of `tier` to
    /// `provider` (and `model`).
    pub fn new(tier: Option<String>, module: Option<String>, provider: String, model: Option<String>) -> Route {
        Route { tier, module, provider, model, compiled: Compiled::default() }
    }

    /// The compiled `module` pattern; `None` without one (or when it
    /// cannot compile, which `*`-only patterns always do).
    fn matcher(&self) -> Option<&globset::GlobMatcher> {
        self.compiled.0.get_or_init(|| self.module.as_deref().and_then(compile)).as_ref()
    }
}

/// A route's compiled pattern; not part of what the route is (equality,
/// the config's form).
#[derive(Debug, Clone, Default)]
struct Compiled(std::sync::OnceLock<Option<globset::GlobMatcher>>);

impl PartialEq for Compiled {
    fn eq(&self, _: &Compiled) -> bool {
        true
    }
}

impl Eq for Compiled {}

/// The first rule that matches a module, if any. A rule with neither
/// `tier` nor `module` matches everything.
pub fn route<'a>(routes: &'a [Route], module: &str, tier: Option<&str>) -> Option<&'a Route> {
    routes.iter().find(|r| {
        r.tier.as_deref().is_none_or(|t| Some(t) == tier)
            && (r.module.is_none() || r.matcher().is_some_and(|m| m.is_match(module)))
    })
}

/// A `*`-only glob, anchored at both ends, for `globset`: every other
/// character of the pattern is escaped, so `?`, `[`, `{` and `\` stay
/// literal, and `*` also crosses `/` (module names are not paths).
fn compile(pattern: &str) -> Option<globset::GlobMatcher> {
    let escaped: Vec<String> = pattern.split('*').map(globset::escape).collect();
    globset::GlobBuilder::new(&escaped.join("*"))
        .literal_separator(false)
        .backslash_escape(false)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

/// Providers tried in order: when one fails, the next gets the same request.
///
/// Failures that another provider cannot fix are returned at once: a
/// cancelled call, a spent budget, a missing recording. So is a streamed
/// call that fails after its provider has handed text to the sink: the
/// next provider's reply would run on from the first one's in the same
/// sink, so the chain stops there and the error stands (as a call is never
/// retried after streamed text). The answer names the provider that gave it
/// in [`ChatResponse::served_by`].
pub struct Fallback {
    chain: Vec<Arc<dyn Provider>>,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.chain.iter().map(|p| format!("{}/{}", p.name(), p.model())).collect();
        f.debug_struct("Fallback").field("chain", &names).finish()
    }
}

impl Fallback {
    /// A chain; `None` when it is empty.
    pub fn new(chain: Vec<Arc<dyn Provider>>) -> Option<Fallback> {
        if chain.is_empty() { None } else { Some(Fallback { chain }) }
    }

    fn first(&self) -> &dyn Provider {
        self.chain[0].as_ref()
    }

    /// Tries each member with `call`; `shown` says whether the sink has
    /// received text yet.
    async fn each<'a, F>(
        &'a self,
        call: F,
        shown: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<ChatResponse, ProviderError>
    where
        F: Fn(
            &'a dyn Provider,
        ) -> std::pin::Pin<Box<dyn Future<Output = Result<ChatResponse, ProviderError>> + Send + 'a>>,
    {
        let mut failures = Vec::new();
        let mut attempts = 0;
        let mut last = None;
        for p in &self.chain {
            match call(p.as_ref()).await {
                Ok(mut resp) => {
                    if resp.served_by.is_none() {
                        resp.served_by = Some(format!("{}/{}", p.name(), p.model()));
                    }
                    return Ok(resp);
                }
                Err(e) if matches!(e.kind, ErrorKind::Cancelled | ErrorKind::Budget | ErrorKind::NotRecorded) => {
                    return Err(e);
                }
                Err(mut e) if shown() => {
                    e.message = format!(
                        "{} (after part of the reply was streamed; the rest of the fallback chain was not tried, so two replies are never run together)",
                        e.message
                    );
                    attempts += e.attempts;
                    return Err(e.with_attempts(attempts));
                }
                Err(e) => {
                    attempts += e.attempts;
                    failures.push(e.to_string());
                    last = Some(e);
                }
            }
        }
        let mut e = last.unwrap_or_else(|| ProviderError::new("fallback", ErrorKind::Unavailable, "no providers"));
        if failures.len() > 1 {
            e.message = format!("every provider in the fallback chain failed: {}", failures.join("; "));
        }
        Err(e.with_attempts(attempts))
    }
}

#[async_trait::async_trait]
impl Provider for Fallback {
    fn name(&self) -> &str {
        self.first().name()
    }

    fn model(&self) -> &str {
        self.first().model()
    }

    /// What every member can do, so a request built for the first one is
    /// one the others accept too.
    fn capabilities(&self) -> Capabilities {
        self.chain.iter().map(|p| p.capabilities()).fold(self.first().capabilities(), |a, b| Capabilities {
            json_schema: a.json_schema && b.json_schema,
            json_mode: a.json_mode && b.json_mode,
            tools: a.tools && b.tools,
            streaming: a.streaming && b.streaming,
        })
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.each(|p| Box::pin(p.chat(request)), &|| false).await
    }

    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        let shown = AtomicBool::new(false);
        let sink = |text: &str| {
            if !text.is_empty() {
                shown.store(true, Ordering::SeqCst);
            }
            on_text(text);
        };
        self.each(|p| Box::pin(p.chat_stream(request, &sink)), &|| shown.load(Ordering::SeqCst)).await
    }
}

/// A provider whose calls fail with a timeout after `limit` (a latency
/// budget): in a [`Fallback`] chain the next member then gets the request.
pub struct Deadline {
    inner: Arc<dyn Provider>,
    limit: std::time::Duration,
}

impl Deadline {
    /// `inner`, each call cut off after `limit`.
    pub fn new(inner: Arc<dyn Provider>, limit: std::time::Duration) -> Deadline {
        Deadline { inner, limit }
    }

    fn late(&self) -> ProviderError {
        ProviderError::new(
            self.inner.name(),
            ErrorKind::Timeout(self.limit),
            format!("no reply within the latency budget of {} ms", self.limit.as_millis()),
        )
    }
}

#[async_trait::async_trait]
impl Provider for Deadline {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        tokio::time::timeout(self.limit, self.inner.chat(request)).await.unwrap_or_else(|_| Err(self.late()))
    }

    async fn chat_stream(&self, request: &ChatRequest, on_text: TextSink<'_>) -> Result<ChatResponse, ProviderError> {
        tokio::time::timeout(self.limit, self.inner.chat_stream(request, on_text))
            .await
            .unwrap_or_else(|_| Err(self.late()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(tier: Option<&str>, module: Option<&str>, provider: &str) -> Route {
        Route::new(tier.map(str::to_owned), module.map(str::to_owned), provider.into(), None)
    }

    #[test]
    fn first_matching_rule_wins() {
        let routes = vec![
            r(Some("exec"), Some("code-*"), "cheap"),
            r(Some("exec"), None, "exec"),
            r(None, Some("*review*"), "big"),
            r(None, None, "default"),
        ];
        let pick = |m: &str, t: Option<&str>| route(&routes, m, t).map(|r| r.provider.as_str());
        assert_eq!(pick("code-simplifier", Some("exec")), Some("cheap"));
        assert_eq!(pick("task-prioritizer", Some("exec")), Some("exec"));
        assert_eq!(pick("code-reviewer", Some("decision")), Some("big"));
        assert_eq!(pick("x", None), Some("default"));
        assert_eq!(route(&routes[..1], "x", Some("exec")), None);
    }

    /// Issue 31: a route's pattern was compiled again for every call. It
    /// is compiled on first use and kept with the route (clones share it).
    #[test]
    fn a_routes_pattern_is_compiled_once() {
        let routes = vec![r(None, Some("code-*"), "cheap")];
        let first = routes[0].matcher().unwrap() as *const globset::GlobMatcher;
        assert_eq!(route(&routes, "code-x", None).map(|r| r.provider.as_str()), Some("cheap"));
        assert_eq!(routes[0].matcher().unwrap() as *const globset::GlobMatcher, first);
        // Equality and the config's form do not see the compiled pattern.
        assert_eq!(routes[0], r(None, Some("code-*"), "cheap"));
        assert_eq!(
            serde_json::to_value(&routes[0]).unwrap(),
            serde_json::json!({"tier": null, "module": "code-*", "provider": "cheap", "model": null})
        );
    }

    #[test]
    fn glob_is_anchored() {
        for (p, t, want) in [
            ("code-*", "code-x", true),
            ("code-*", "xcode-x", false),
            ("*-reviewer", "code-reviewer", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("*", "", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            // Only `*` is special.
            ("a?c", "abc", false),
            ("a?c", "a?c", true),
            ("[ab]*", "a-x", false),
            ("[ab]*", "[ab]-x", true),
            ("{a,b}", "a", false),
            ("a\\*", "a\\x", true),
            ("team/*", "team/x/y", true),
            ("a**b", "axyzb", true),
            ("**", "anything", true),
        ] {
            assert_eq!(compile(p).is_some_and(|m| m.is_match(t)), want, "{p} ~ {t}");
        }
    }
}
