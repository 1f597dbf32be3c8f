//! Choosing a provider: `noesis_host::provider` with the binary's notes on
//! stderr, and the server's providers as the serve crate asks for them.

use std::sync::Arc;

use noesis_llm::Provider;
use noesis_modules::Module;
use noesis_serve::{ProviderSource, SourceError};

pub(crate) use noesis_config::{ProviderArgs, env};
pub(crate) use noesis_host::provider::{
    Allowed, NO_PROVIDER, Providers, Source, budget, choose, endpoint, prices, with_text_tools,
};

use crate::config::Config;

/// The provider for a run of `module` (name, tier); a note on stderr when
/// the local model is used for want of any other.
pub(crate) fn select(
    args: &ProviderArgs,
    config: &Config,
    module: Option<(&str, Option<&str>)>,
) -> anyhow::Result<Arc<dyn Provider>> {
    Ok(noesis_host::provider::select(args, config, module, &|m| crate::out::note(m))?)
}

/// A server's providers as `noesis-serve` takes them: a request's choice
/// outside the allow-list is refused, any other failure is the provider's.
pub(crate) struct Served(pub(crate) Arc<Providers>);

impl ProviderSource for Served {
    fn provider(
        &self,
        name: Option<&str>,
        model: Option<&str>,
        module: &Module,
    ) -> Result<Arc<dyn Provider>, SourceError> {
        self.0.for_module(name, model, module).map_err(|e| match e {
            noesis_host::HostError::NotAllowed(m) => SourceError::NotAllowed(m),
            other => SourceError::Unavailable(other.to_string()),
        })
    }
}
