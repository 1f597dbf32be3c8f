//! Routing by policy: which provider and model answers a call of a given
//! role (an agent's `think`, `reflect`, `plan`, `sub_agent`), under a
//! latency budget, a cost cap per call, `local_only` and a fallback chain.
//! Pure: the host makes the providers for the candidates that pass.
//!
//! A rule either applies or it does not: each candidate passes or is
//! skipped with the rule that skipped it, and the reason says so.

use std::time::Duration;

use crate::pricing::PriceTable;

/// What a role's calls may use (`[agent.roles.ROLE]`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RolePolicy {
    /// The provider to try first (default: the run's own).
    #[serde(default)]
    pub provider: Option<String>,
    /// Its model.
    #[serde(default)]
    pub model: Option<String>,
    /// Tried in order when the first fails: `provider` or `provider:model`.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// A call that takes longer fails (and the next in the chain is tried).
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
    /// A candidate whose estimated cost for this call is higher is skipped.
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// Only providers that run on this machine.
    #[serde(default)]
    pub local_only: bool,
}

/// One provider and model a call may go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The provider's name.
    pub provider: String,
    /// The model (`None`: the provider's default).
    pub model: Option<String>,
}

impl Candidate {
    /// Parses `provider` or `provider:model`.
    pub fn parse(text: &str) -> Option<Candidate> {
        let (provider, model) = match text.split_once(':') {
            Some((p, m)) => (p, Some(m.to_owned()).filter(|m| !m.is_empty())),
            None => (text, None),
        };
        (!provider.is_empty()).then(|| Candidate { provider: provider.to_owned(), model })
    }

    fn label(&self) -> String {
        match &self.model {
            Some(m) => format!("{}:{m}", self.provider),
            None => self.provider.clone(),
        }
    }
}

/// Where a call goes, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteChoice {
    /// The candidates that passed, in the order to try them.
    pub chain: Vec<Candidate>,
    /// How long each may take.
    pub deadline: Option<Duration>,
    /// Why: the policy applied and every candidate skipped with its rule.
    pub reason: String,
}

/// Facts the policy needs about the machine's providers.
pub trait ProviderFacts {
    /// Whether `provider` runs on this machine (the embedded model, Ollama,
    /// or an endpoint configured as local).
    fn is_local(&self, provider: &str) -> bool;
    /// The model a provider uses when none is named.
    fn default_model(&self, provider: &str) -> Option<String>;
}

/// Chooses the chain for a call of `role`, under `policy` (`None`: no
/// policy for the role) with `run_default` as the run's own provider.
/// `input_chars` and `max_output_tokens` estimate the call's cost
/// (a character is about a quarter of a token).
///
/// # Errors
/// A message when no candidate passes: it names each and the rule that
/// skipped it.
pub fn choose(
    role: &str,
    policy: Option<&RolePolicy>,
    run_default: &Candidate,
    facts: &dyn ProviderFacts,
    prices: &PriceTable,
    input_chars: usize,
    max_output_tokens: u32,
) -> Result<RouteChoice, String> {
    let Some(policy) = policy else {
        return Ok(RouteChoice {
            chain: vec![run_default.clone()],
            deadline: None,
            reason: format!("{role}: no policy for this role; the run's provider {}", run_default.label()),
        });
    };
    let first = match &policy.provider {
        Some(p) => Candidate { provider: p.clone(), model: policy.model.clone() },
        None => Candidate {
            provider: run_default.provider.clone(),
            model: policy.model.clone().or(run_default.model.clone()),
        },
    };
    let mut all = vec![first];
    for f in &policy.fallback {
        // The config check refuses an unparsable entry; skip it here too.
        if let Some(c) = Candidate::parse(f) {
            all.push(c);
        }
    }
    let input_tokens = u64::try_from(input_chars / 4).unwrap_or(u64::MAX);
    let mut chain = Vec::new();
    let mut skipped = Vec::new();
    for c in all {
        if policy.local_only && !facts.is_local(&c.provider) {
            skipped.push(format!("{} (local_only: it is not on this machine)", c.label()));
            continue;
        }
        if let Some(cap) = policy.max_cost_usd {
            let model = c.model.clone().or_else(|| facts.default_model(&c.provider)).unwrap_or_default();
            let usage = crate::Usage { input_tokens, output_tokens: u64::from(max_output_tokens) };
            match prices.cost(&model, usage) {
                Some(cost) if cost > cap => {
                    skipped.push(format!("{} (max_cost_usd {cap}: this call could cost ${cost:.4})", c.label()));
                    continue;
                }
                Some(_) => {}
                None if facts.is_local(&c.provider) => {}
                None => {
                    skipped.push(format!("{} (max_cost_usd {cap}: no price known for `{model}`)", c.label()));
                    continue;
                }
            }
        }
        if !chain.contains(&c) {
            chain.push(c);
        }
    }
    let mut reason = format!("{role}: policy agent.roles.{role}");
    if let Some(first) = chain.first() {
        reason.push_str(&format!(" chose {}", first.label()));
        if chain.len() > 1 {
            let rest: Vec<String> = chain[1..].iter().map(Candidate::label).collect();
            reason.push_str(&format!(", then {}", rest.join(", ")));
        }
    }
    if !skipped.is_empty() {
        reason.push_str(&format!("; skipped {}", skipped.join(", ")));
    }
    if let Some(ms) = policy.max_latency_ms {
        reason.push_str(&format!("; {ms} ms per call"));
    }
    if chain.is_empty() {
        return Err(format!("no provider may answer {role}: {reason}"));
    }
    Ok(RouteChoice { chain, deadline: policy.max_latency_ms.map(Duration::from_millis), reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Facts;
    impl ProviderFacts for Facts {
        fn is_local(&self, p: &str) -> bool {
            p == "local" || p == "ollama"
        }
        fn default_model(&self, p: &str) -> Option<String> {
            (p == "openai").then(|| "gpt-4o".into())
        }
    }

    fn run_default() -> Candidate {
        Candidate { provider: "openai".into(), model: Some("gpt-4o-mini".into()) }
    }

    #[test]
    fn without_a_policy_the_runs_provider_answers() {
        let c = choose("think", None, &run_default(), &Facts, &PriceTable::default(), 100, 100).unwrap();
        assert_eq!(c.chain, [run_default()]);
        assert_eq!(c.reason, "think: no policy for this role; the run's provider openai:gpt-4o-mini");
    }

    #[test]
    fn local_only_skips_cloud_routes_and_says_so() {
        let policy = RolePolicy {
            provider: Some("anthropic".into()),
            fallback: vec!["ollama:llama3".into(), "local".into()],
            local_only: true,
            ..RolePolicy::default()
        };
        let c = choose("reflect", Some(&policy), &run_default(), &Facts, &PriceTable::default(), 0, 0).unwrap();
        assert_eq!(c.chain.iter().map(Candidate::label).collect::<Vec<_>>(), ["ollama:llama3", "local"]);
        assert_eq!(
            c.reason,
            "reflect: policy agent.roles.reflect chose ollama:llama3, then local; skipped anthropic (local_only: it is not on this machine)"
        );
        let only_cloud = RolePolicy { provider: Some("openai".into()), local_only: true, ..RolePolicy::default() };
        let e = choose("think", Some(&only_cloud), &run_default(), &Facts, &PriceTable::default(), 0, 0).unwrap_err();
        assert!(e.starts_with("no provider may answer think") && e.contains("openai (local_only"), "{e}");
    }

    #[test]
    fn the_cost_cap_skips_what_this_call_could_cost_too_much_on() {
        let mut prices = PriceTable::default();
        prices.set("big", crate::Price { input: 100.0, output: 100.0 });
        prices.set("small", crate::Price { input: 0.1, output: 0.1 });
        let policy = RolePolicy {
            provider: Some("openai".into()),
            model: Some("big".into()),
            fallback: vec!["openai:small".into(), "openai:unpriced".into()],
            max_cost_usd: Some(0.01),
            max_latency_ms: Some(1500),
            ..RolePolicy::default()
        };
        // 4000 chars ≈ 1000 input tokens, plus 1000 output: $0.2 on big.
        let c = choose("think", Some(&policy), &run_default(), &Facts, &prices, 4000, 1000).unwrap();
        assert_eq!(c.chain, [Candidate { provider: "openai".into(), model: Some("small".into()) }]);
        assert_eq!(c.deadline, Some(Duration::from_millis(1500)));
        assert!(
            c.reason.contains("skipped openai:big (max_cost_usd 0.01: this call could cost $0.2000)"),
            "{}",
            c.reason
        );
        assert!(
            c.reason.contains("openai:unpriced (max_cost_usd 0.01: no price known for `unpriced`)"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn candidates_parse() {
        assert_eq!(Candidate::parse("a:b"), Some(Candidate { provider: "a".into(), model: Some("b".into()) }));
        assert_eq!(Candidate::parse("a"), Some(Candidate { provider: "a".into(), model: None }));
        assert_eq!(Candidate::parse(":b"), None);
    }
}
