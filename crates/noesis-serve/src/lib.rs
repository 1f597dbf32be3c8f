//! Serving Cognitive Modules to other programs.
//!
//! [`Service`] is the transport-neutral core: a module search path with a
//! cache of loaded modules (reloaded when a module's files change), a
//! [`ProviderSource`] the embedding binary implements, and runs that always
//! end in a v2.2 envelope — refusals included, each with its E-code.
//! [`http`] puts it on an axum router (`noesis serve`), behind
//! [`access`] (the `Host` allow-list, tokens and sessions) and, with a
//! certificate, [`tls`]; [`agents`] are the routes of the agent layer's
//! run supervisor, within the operator's policy; [`plugins`] runs the frame
//! plugins (docs, review, testgen) and [`episodes`] runs `solve` episodes
//! (noesis-workflow's driver) on the server's project. [`mcp`] is what the
//! MCP server of `noesis mcp` (`noesis_mcp::server`) serves: this `Service`
//! and these agent runs. [`assemble`] puts a whole server together from
//! the front end's decisions (providers, episodes, the token file, the
//! order of start and shutdown).
//!
//! Architecture invariant: no config files read and no printing here; the
//! binary reads the settings, and says what the server tells it
//! ([`assemble::Said`]); providers are chosen by `noesis-host`'s rules. No
//! secret (bearer token, API key) is ever logged or echoed.
//!
//! ```
//! use std::sync::Arc;
//! use noesis_llm::{Provider, TestModel};
//! use noesis_modules::{Module, search::SearchPath};
//! use noesis_serve::{ProviderSource, RunRequest, Service, SourceError};
//!
//! struct Test;
//! impl ProviderSource for Test {
//!     fn provider(&self, _: Option<&str>, _: Option<&str>, _: &Module) -> Result<Arc<dyn Provider>, SourceError> {
//!         Ok(Arc::new(TestModel))
//!     }
//! }
//! let service = Service::new(SearchPath::default(), Arc::new(Test));
//! let request = RunRequest {
//!     module: "code-simplifier".into(),
//!     input: Some(serde_json::json!({"code": "x = 1 + 0"})),
//!     ..RunRequest::default()
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let envelope = rt.block_on(service.run(request, None, None));
//! assert_eq!(envelope["ok"], true);
//! let unknown = rt.block_on(service.run(RunRequest { module: "nope".into(), ..RunRequest::default() }, None, None));
//! assert_eq!(unknown["error"]["code"], "E4006");
//! ```
#![deny(missing_docs)]

pub mod access;
pub mod agents;
pub mod assemble;
pub mod episodes;
pub mod http;
pub mod mcp;
pub mod plugins;
pub mod service;
pub mod tls;

pub use noesis_runtime::{CancellationToken, OnText};
pub use service::{
    ModuleSummary, OnFinished, PreparedRun, ProviderSource, RunRequest, RunSettings, Service, SourceError,
};
