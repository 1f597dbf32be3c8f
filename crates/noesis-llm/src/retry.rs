//! Retrying transient provider failures: the policy and the delay between tries.

use std::time::Duration;

/// The longest `Retry-After` we honour, so a server cannot stall a run forever.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how patiently to retry a transient failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first try (0 disables retrying).
    pub max_retries: u32,
    /// The delay bound before the first retry; it doubles for each later one.
    pub base_delay: Duration,
    /// The largest delay bound the doubling may reach.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(250), max_delay: Duration::from_secs(8) }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }
}

/// The wait before retry number `attempt` (0 for the first retry).
///
/// Full jitter (`rand01 * min(max_delay, base_delay * 2^attempt)`) so many
/// clients failing together do not retry in lockstep. A server's
/// `Retry-After` wins when given, capped at [`MAX_RETRY_AFTER`], but never
/// shortens the jittered wait. `rand01` is clamped into `[0, 1]`.
pub fn backoff(policy: &RetryPolicy, attempt: u32, retry_after: Option<Duration>, rand01: f64) -> Duration {
    let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
    let bound = policy.base_delay.saturating_mul(factor).min(policy.max_delay);
    // NaN would make `mul_f64` panic; treat it like the worst case instead.
    let r = if rand01.is_nan() { 1.0 } else { rand01.clamp(0.0, 1.0) };
    honour_retry_after(bound.mul_f64(r), retry_after)
}

/// The jittered wait, lengthened to what the server asked for (capped).
pub(crate) fn honour_retry_after(jitter: Duration, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(ra) => ra.min(MAX_RETRY_AFTER).max(jitter),
        None => jitter,
    }
}

/// The jittered waits of `policy`, one per retry it allows, for `backon`'s
/// retry loop (which applies `Retry-After` and the deadline on top).
#[derive(Debug)]
pub(crate) struct Delays {
    policy: RetryPolicy,
    next: u32,
}

impl RetryPolicy {
    pub(crate) fn delays(self) -> Delays {
        Delays { policy: self, next: 0 }
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.next >= self.policy.max_retries {
            return None;
        }
        let wait = backoff(&self.policy, self.next, None, rand01());
        self.next += 1;
        Some(wait)
    }
}

/// A number in `[0, 1)` to spread retries; not for anything secret.
pub(crate) fn rand01() -> f64 {
    fastrand::f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy { max_retries: 5, base_delay: ms(100), max_delay: ms(1000) }
    }

    #[test]
    fn defaults_match_the_documented_policy() {
        let p = RetryPolicy::default();
        assert_eq!((p.max_retries, p.base_delay, p.max_delay), (2, ms(250), Duration::from_secs(8)));
        assert_eq!(RetryPolicy::none().max_retries, 0);
    }

    #[test]
    fn bound_doubles_per_attempt_until_max_delay() {
        let p = policy();
        let got: Vec<_> = (0..6).map(|a| backoff(&p, a, None, 1.0)).collect();
        assert_eq!(got, [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
    }

    #[test]
    fn jitter_scales_the_bound() {
        let p = policy();
        assert_eq!(backoff(&p, 0, None, 0.0), Duration::ZERO);
        assert_eq!(backoff(&p, 1, None, 0.5), ms(100));
        assert_eq!(backoff(&p, 3, None, 0.25), ms(200));
    }

    #[test]
    fn out_of_range_randomness_is_clamped() {
        let p = policy();
        assert_eq!(backoff(&p, 0, None, -3.0), Duration::ZERO);
        assert_eq!(backoff(&p, 0, None, 7.0), ms(100));
        assert_eq!(backoff(&p, 0, None, f64::NAN), ms(100));
        assert_eq!(backoff(&p, 0, None, f64::INFINITY), ms(100));
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let p = RetryPolicy { max_retries: u32::MAX, base_delay: Duration::MAX, max_delay: Duration::from_secs(8) };
        assert_eq!(backoff(&p, u32::MAX, None, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(&policy(), 40, None, 1.0), ms(1000));
    }

    #[test]
    fn retry_after_wins_over_jitter() {
        let p = policy();
        assert_eq!(backoff(&p, 0, Some(Duration::from_secs(3)), 1.0), Duration::from_secs(3));
        // max_delay bounds our own backoff, not the server's request
        assert_eq!(backoff(&p, 5, Some(Duration::from_secs(5)), 0.0), Duration::from_secs(5));
    }

    #[test]
    fn retry_after_is_capped_at_a_minute() {
        assert_eq!(backoff(&policy(), 0, Some(Duration::from_secs(3600)), 0.5), MAX_RETRY_AFTER);
    }

    #[test]
    fn retry_after_never_shortens_the_jittered_wait() {
        let p = policy();
        assert_eq!(backoff(&p, 3, Some(Duration::ZERO), 1.0), ms(800));
        assert_eq!(backoff(&p, 2, Some(ms(50)), 0.5), ms(200));
    }

    #[test]
    fn delays_give_one_jittered_wait_per_retry() {
        let p = RetryPolicy { max_retries: 3, ..policy() };
        let waits: Vec<Duration> = p.delays().collect();
        assert_eq!(waits.len(), 3);
        for (i, w) in waits.iter().enumerate() {
            assert!(*w <= backoff(&p, i as u32, None, 1.0), "{i}: {w:?}");
        }
        assert_eq!(RetryPolicy::none().delays().count(), 0);
    }

    #[test]
    fn rand01_stays_in_range_and_varies() {
        let xs: Vec<f64> = (0..1000).map(|_| rand01()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mut distinct = xs.clone();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        assert!(distinct.len() > 990, "only {} distinct values", distinct.len());
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((0.4..0.6).contains(&mean), "mean {mean}");
    }
}
