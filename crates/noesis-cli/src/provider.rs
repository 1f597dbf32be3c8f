//! Choosing a provider: `noesis_host::provider` with the binary's notes on
//! stderr, and the server's providers as the serve crate asks for them.

use std::sync::Arc;

use noesis_llm::Provider;

pub(crate) use noesis_config::{ProviderArgs, env};
pub(crate) use noesis_host::provider::{Providers, budget, prices, with_text_tools};

pub(crate) use noesis_serve::assemble::Served;

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
