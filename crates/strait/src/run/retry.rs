//! Retry pacing for the binary's own periodic work (topic refresh): exponential backoff with
//! jitter up to a cap, and rate-limited reporting of the failures.
//!
//! With a cluster gone, a fixed retry interval both hammers the cluster's addresses and floods
//! the log (about 1,200 `topic refresh failed` lines in 35 minutes at a 1 s interval). Here the
//! delay doubles per consecutive failure up to a cap, is randomised so that several mirrors do
//! not retry in lockstep, and returns to the normal cadence after one success; identical errors
//! are logged once and then every [`log_limit::DEFAULT_EVERY`] with the number of repeats.

use std::time::{Duration, Instant};

use strait_wire::Backoff;

use strait_forward::log_limit::{self, LogLimiter, Verdict};

/// The refresh's backoff (wire's, the one backoff of the workspace): `base` (at least 1 ms)
/// doubling per consecutive failure up to `max` (at least `base`), each delay scaled by a
/// random factor in [0.5, 1.0) ("equal jitter": never less than half the nominal delay).
fn backoff(base: Duration, max: Duration) -> Backoff {
    let base = base.max(Duration::from_millis(1));
    Backoff::new(base, max.max(base)).with_jitter(0.5, 1.0)
}

/// What the caller of [`RefreshRetry::failed`] should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPlan {
    /// Wait this long before the next attempt.
    pub delay: Duration,
    /// Whether (and how) to log this failure.
    pub log: Verdict,
    /// Consecutive failures, this one included.
    pub failures: u32,
}

/// Backoff and log limiting for the periodic topic refresh. Kept across group rejoins so that
/// a rejoin does not restart the backoff or repeat a line the operator has already seen.
#[derive(Debug, Clone)]
pub struct RefreshRetry {
    backoff: Backoff,
    max: Duration,
    log: LogLimiter<String>,
}

impl RefreshRetry {
    /// For a refresh every `interval`: the first retry comes after at most
    /// `min(interval, 1 s)`, the delay grows up to `max(interval, 60 s)`.
    pub fn new(interval: Duration) -> Self {
        RefreshRetry::with_limits(
            interval.min(Duration::from_secs(1)),
            interval.max(Duration::from_secs(60)),
            log_limit::DEFAULT_EVERY,
        )
    }

    /// Explicit limits (tests).
    pub fn with_limits(base: Duration, max: Duration, log_every: Duration) -> Self {
        RefreshRetry {
            backoff: backoff(base, max),
            max: max.max(base.max(Duration::from_millis(1))),
            log: LogLimiter::new(log_every),
        }
    }

    /// The same, with the jitter drawn from a generator seeded with `seed` (tests pin the
    /// delays instead of asserting ranges).
    #[cfg(test)]
    fn seeded(mut self, seed: u64) -> Self {
        self.backoff = self.backoff.with_seed(seed);
        self
    }

    /// The longest delay between attempts.
    pub fn max_delay(&self) -> Duration {
        self.max
    }

    /// One more failed refresh with error text `error` at `now`.
    pub fn failed(&mut self, error: &str, now: Instant) -> RetryPlan {
        let delay = self.backoff.next_delay();
        RetryPlan {
            delay,
            log: self.log.check(&error.to_owned(), now),
            failures: self.backoff.attempts(),
        }
    }

    /// A refresh succeeded: back to the normal interval. Returns how many consecutive failures
    /// preceded it (0 if none), so that the recovery can be logged once.
    pub fn succeeded(&mut self) -> u32 {
        self.log.clear();
        let failures = self.backoff.attempts();
        self.backoff.reset();
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// The delays of a seeded refresh retry are exactly those of wire's backoff with the same
    /// seed, limits and jitter: nominal `base * 2^n` up to the cap, scaled into [0.5, 1.0).
    #[test]
    fn delays_are_wires_backoff_doubling_to_the_cap_with_equal_jitter() {
        let mut r = RefreshRetry::with_limits(S, 60 * S, S).seeded(11);
        let mut pinned = Backoff::new(S, 60 * S).with_jitter(0.5, 1.0).with_seed(11);
        for n in 0..12u32 {
            let want = pinned.next_delay();
            assert_eq!(r.failed("e", Instant::now()).delay, want, "failure {n}");
            let nominal = (S * (1 << n.min(30))).min(60 * S);
            assert!(want >= nominal / 2 && want < nominal, "{n}: {want:?}");
        }
        assert_eq!(r.succeeded(), 12);
        assert_eq!(r.succeeded(), 0);
        // Without jitter the nominal delays show: doubling, capped.
        let mut nominal = backoff(S, 60 * S).with_jitter(1.0, 1.0);
        let got: Vec<Duration> = (0..9).map(|_| nominal.next_delay()).collect();
        assert_eq!(
            got,
            [1, 2, 4, 8, 16, 32, 60, 60, 60].map(|s| s * S).to_vec()
        );
    }

    #[test]
    fn a_zero_base_still_waits_a_millisecond() {
        let mut b = backoff(Duration::ZERO, Duration::ZERO).with_jitter(1.0, 1.0);
        assert_eq!(b.next_delay(), Duration::from_millis(1));
    }

    #[test]
    fn a_35_minute_outage_at_a_1s_refresh_retries_rarely_and_logs_a_handful_of_lines() {
        let t0 = Instant::now();
        // Seeded: the same delays on every run.
        let mut r = RefreshRetry::new(S).seeded(35);
        let (mut now, mut attempts, mut lines, mut reported) = (t0, 0u32, 0u32, 0u64);
        while now < t0 + 35 * 60 * S {
            let plan = r.failed("cannot connect to broker europe:9093", now);
            attempts += 1;
            if plan.log.should_log() {
                lines += 1;
                reported += 1 + plan.log.suppressed();
            }
            assert!(plan.delay <= 60 * S, "{:?}", plan.delay);
            now += plan.delay;
        }
        // At a fixed 1 s: 2,100 attempts and as many lines. Backoff: ~8 s to reach the cap,
        // then 30-60 s per attempt, so at most ~70 attempts; lines: one, then one per 5 min.
        assert!((35..=80).contains(&attempts), "{attempts} attempts");
        assert!((6..=8).contains(&lines), "{lines} lines");
        assert!(reported <= u64::from(attempts));
        assert_eq!(r.succeeded(), attempts);
        // After the recovery, the cadence and the log start over.
        let plan = r.failed("cannot connect to broker europe:9093", now);
        assert!(plan.delay <= S);
        assert_eq!(plan.log, Verdict::First);
        assert_eq!(plan.failures, 1);
    }

    #[test]
    fn a_different_error_is_logged_at_once() {
        let t0 = Instant::now();
        let mut r = RefreshRetry::new(S);
        assert_eq!(r.failed("a", t0).log, Verdict::First);
        assert_eq!(r.failed("a", t0 + S).log, Verdict::Quiet);
        assert_eq!(r.failed("b", t0 + 2 * S).log, Verdict::First);
        let plan = r.failed("a", t0 + 400 * S);
        assert_eq!(plan.log, Verdict::Again { suppressed: 1 });
        assert_eq!(plan.failures, 4);
    }

    #[test]
    fn long_refresh_intervals_are_not_shortened_past_their_own_cadence() {
        let r = RefreshRetry::new(10 * 60 * S);
        assert_eq!(r.max_delay(), 10 * 60 * S);
        let mut nominal = r.backoff.clone().with_jitter(1.0, 1.0);
        assert_eq!(nominal.next_delay(), S);
        let last = (0..30).map(|_| nominal.next_delay()).last();
        assert_eq!(last, Some(10 * 60 * S));
    }
}
