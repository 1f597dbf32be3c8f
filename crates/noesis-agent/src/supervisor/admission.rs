//! What the operator lets clients do with agent runs: whether clients of
//! the HTTP server may start and steer them at all (`serve --agents`), how
//! many may be live at once, and the most a run may get — its approval
//! policy and limits. A request only narrows: its `approve` counts only
//! when it is as strict or stricter (never > ask > auto), each limit is the
//! smaller of the request's and the operator's.

use crate::{ApprovalPolicy, Limits, RunConfig};

use super::RequestLimits;

/// Live runs a server drives at once by default.
pub const DEFAULT_MAX_RUNS: usize = 8;

/// Seconds a client over the cap is told to wait (`Retry-After`): a slot
/// frees when some run ends, which the server cannot foresee.
pub const RETRY_AFTER_SECS: u64 = 10;

/// The operator's settings for the agent runs of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct RunsPolicy {
    /// Clients of the HTTP routes (and the pages) may start, decide,
    /// cancel and resume runs. Off, those routes answer 403 naming
    /// `--agents`; reading runs stays possible.
    pub http: bool,
    /// Most runs live at once (at least 1); a start over it is refused
    /// with 429 and `Retry-After`.
    pub max_runs: usize,
    /// The most any run gets.
    pub ceiling: Ceiling,
}

impl Default for RunsPolicy {
    fn default() -> RunsPolicy {
        RunsPolicy { http: false, max_runs: DEFAULT_MAX_RUNS, ceiling: Ceiling::default() }
    }
}

/// The most a run may get: a request narrows it, never widens it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Ceiling {
    /// The loosest approval policy a run may have.
    pub approve: ApprovalPolicy,
    /// The largest limits a run may have (`None`: no cap from the operator).
    pub limits: Limits,
}

/// How strict a policy is: never > ask > auto.
fn strictness(p: ApprovalPolicy) -> u8 {
    match p {
        ApprovalPolicy::Auto => 0,
        ApprovalPolicy::Ask => 1,
        ApprovalPolicy::Never => 2,
    }
}

/// The stricter of two approval policies.
pub fn stricter(a: ApprovalPolicy, b: ApprovalPolicy) -> ApprovalPolicy {
    if strictness(a) >= strictness(b) { a } else { b }
}

/// Parses `ask`, `auto` or `never`.
pub fn parse_approval(text: &str) -> Result<ApprovalPolicy, String> {
    match text {
        "ask" => Ok(ApprovalPolicy::Ask),
        "auto" => Ok(ApprovalPolicy::Auto),
        "never" => Ok(ApprovalPolicy::Never),
        other => Err(format!("`approve`: `{other}` is not ask, auto or never")),
    }
}

fn min_opt<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y < x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

impl Ceiling {
    /// The policy for a request asking for `asked` (none: the operator's).
    pub fn approval(&self, asked: Option<&str>) -> Result<ApprovalPolicy, String> {
        Ok(match asked {
            Some(text) => stricter(parse_approval(text)?, self.approve),
            None => self.approve,
        })
    }

    /// The limits for a request asking for `asked`: each the smaller of
    /// the two.
    pub fn limits(&self, asked: &RequestLimits) -> Result<Limits, String> {
        if let Some(c) = asked.max_cost_usd
            && !(c.is_finite() && c >= 0.0)
        {
            return Err("`limits.max_cost_usd` must be a non-negative number".into());
        }
        let mine = &self.limits;
        Ok(Limits {
            max_turns: asked.max_turns.map_or(mine.max_turns, |t| t.min(mine.max_turns)),
            max_tool_calls: asked.max_tool_calls.map_or(mine.max_tool_calls, |t| t.min(mine.max_tool_calls)),
            max_tokens: min_opt(asked.max_tokens, mine.max_tokens),
            max_cost_usd: min_opt(asked.max_cost_usd, mine.max_cost_usd),
            max_wall_ms: min_opt(asked.max_seconds.map(|s| s.saturating_mul(1000)), mine.max_wall_ms),
            ..*mine
        })
    }

    /// Brings a run's settings, however made, within the ceiling.
    pub fn clamp(&self, config: &mut RunConfig) {
        config.approval = stricter(config.approval, self.approve);
        let (l, mine) = (&mut config.limits, &self.limits);
        l.max_turns = l.max_turns.min(mine.max_turns);
        l.max_tool_calls = l.max_tool_calls.min(mine.max_tool_calls);
        l.max_tokens = min_opt(l.max_tokens, mine.max_tokens);
        l.max_cost_usd = min_opt(l.max_cost_usd, mine.max_cost_usd);
        l.max_wall_ms = min_opt(l.max_wall_ms, mine.max_wall_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalPolicy::{Ask, Auto, Never};

    #[test]
    fn a_request_narrows_the_approval_policy_and_never_widens_it() {
        for (operator, asked, got) in [
            (Ask, Some("auto"), Ask),
            (Ask, Some("never"), Never),
            (Ask, Some("ask"), Ask),
            (Ask, None, Ask),
            (Never, Some("auto"), Never),
            (Never, Some("ask"), Never),
            (Auto, Some("auto"), Auto),
            (Auto, Some("ask"), Ask),
            (Auto, None, Auto),
        ] {
            let c = Ceiling { approve: operator, ..Ceiling::default() };
            assert_eq!(c.approval(asked).unwrap(), got, "{operator:?} {asked:?}");
        }
        assert!(Ceiling::default().approval(Some("yolo")).unwrap_err().contains("`approve`"));
    }

    #[test]
    fn request_limits_are_cut_to_the_operators() {
        let c = Ceiling {
            approve: Ask,
            limits: Limits { max_turns: 5, max_tokens: Some(1000), max_cost_usd: Some(0.5), ..Limits::default() },
        };
        let asked = RequestLimits {
            max_turns: Some(50),
            max_tool_calls: Some(1000),
            max_seconds: Some(60),
            max_tokens: Some(10_000),
            max_cost_usd: Some(2.0),
        };
        let l = c.limits(&asked).unwrap();
        assert_eq!((l.max_turns, l.max_tool_calls), (5, Limits::default().max_tool_calls));
        assert_eq!((l.max_tokens, l.max_cost_usd, l.max_wall_ms), (Some(1000), Some(0.5), Some(60_000)));
        let smaller = RequestLimits { max_turns: Some(2), max_cost_usd: Some(0.1), ..RequestLimits::default() };
        let l = c.limits(&smaller).unwrap();
        assert_eq!((l.max_turns, l.max_cost_usd, l.max_tokens), (2, Some(0.1), Some(1000)));
        let bad = RequestLimits { max_cost_usd: Some(-1.0), ..RequestLimits::default() };
        assert!(c.limits(&bad).is_err());

        let mut config = RunConfig { approval: Auto, ..RunConfig::default() };
        config.limits.max_turns = 99;
        config.limits.max_cost_usd = None;
        c.clamp(&mut config);
        assert_eq!((config.approval, config.limits.max_turns, config.limits.max_cost_usd), (Ask, 5, Some(0.5)));
    }
}
