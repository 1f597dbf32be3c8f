//! Every model call of an agent run goes through this router: the role's
//! policy (`[agent.roles.ROLE]`: provider, model, fallback, latency budget,
//! cost cap, local_only) chooses the chain, the reason is kept with the
//! reply (`noesis agent show`, the turn's frame). No policy for a role:
//! the run's own provider answers, and the reason says so.

use std::sync::Arc;

use noesis_agent::ModelRouter;
use noesis_llm::policy::{Candidate, ProviderFacts, choose};
use noesis_llm::{ChatRequest, Deadline, Fallback, PriceTable, Provider};

use noesis_config::Config;

use crate::provider::Providers;

/// A run's router (see the module).
pub struct Router {
    /// The run's own provider (what answers a role without a policy).
    pub default: Arc<dyn Provider>,
    /// Where other providers come from.
    pub providers: Arc<Providers>,
    /// Whose `[agent.roles]` decide.
    pub config: Config,
    /// Prices for cost caps.
    pub prices: Arc<PriceTable>,
}

struct Facts<'a>(&'a Config);

impl ProviderFacts for Facts<'_> {
    fn is_local(&self, provider: &str) -> bool {
        matches!(provider, "local" | "ollama") || self.0.providers.get(provider).and_then(|p| p.local) == Some(true)
    }

    fn default_model(&self, provider: &str) -> Option<String> {
        self.0
            .providers
            .get(provider)
            .and_then(|p| p.model.clone())
            .or_else(|| noesis_llm::preset(provider).map(|p| p.default_model.to_owned()))
    }
}

impl ModelRouter for Router {
    fn route(&self, role: &str, request: &ChatRequest) -> Result<(Arc<dyn Provider>, String), String> {
        let policy = self.config.agent.roles.get(role);
        let own = Candidate { provider: self.default.name().to_owned(), model: Some(self.default.model().to_owned()) };
        let chars: usize = request.messages.iter().map(|m| m.content.len()).sum();
        let out = request.max_tokens.unwrap_or(1024);
        let choice = choose(role, policy, &own, &Facts(&self.config), &self.prices, chars, out)?;
        if policy.is_none() {
            return Ok((Arc::clone(&self.default), choice.reason));
        }
        let mut chain: Vec<Arc<dyn Provider>> = Vec::new();
        for c in &choice.chain {
            let made = if c == &own {
                Arc::clone(&self.default)
            } else {
                crate::provider::with_text_tools(self.providers.pinned(&c.provider, c.model.as_deref())?, &self.config)
            };
            chain.push(match choice.deadline {
                Some(limit) => Arc::new(Deadline::new(made, limit)),
                None => made,
            });
        }
        let provider: Arc<dyn Provider> =
            if chain.len() == 1 { chain.remove(0) } else { Arc::new(Fallback::new(chain).ok_or("an empty chain")?) };
        Ok((provider, choice.reason))
    }
}
