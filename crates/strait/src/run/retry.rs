//! Retry pacing for the binary's own periodic work (topic refresh): exponential backoff with
//! jitter up to a cap, and rate-limited reporting of the failures.
//!
//! With a cluster gone, a fixed retry interval both hammers the cluster's addresses and floods
//! the log (about 1,200 `topic refresh failed` lines in 35 minutes at a 1 s interval). Here the
//! delay doubles per consecutive failure up to a cap, is randomised so that several mirrors do
//! not retry in lockstep, and returns to the normal cadence after one success; identical errors
//! are logged once and then every [`log_limit::DEFAULT_EVERY`] with the number of repeats.

use std::time::{Duration, Instant};

use crate::observe::log_limit::{self, LogLimiter, Verdict};

/// Retry delays: `base` doubling on every consecutive failure up to `max`, each scaled by a
/// random factor in [0.5, 1.0] ("equal jitter": never less than half the nominal delay).
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// Delays from `base` (at least 1 ms) up to `max` (at least `base`).
    pub fn new(base: Duration, max: Duration) -> Self {
        let base = base.max(Duration::from_millis(1));
        Backoff {
            base,
            max: max.max(base),
            failures: 0,
        }
    }

    /// The delay after `failures` consecutive failures (1 = the first), for a jitter draw in
    /// [0, 1]: `min(base * 2^(failures-1), max) * (0.5 + jitter / 2)`.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        let nominal = self.base.saturating_mul(1u32 << doublings).min(self.max);
        nominal.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    }

    /// Counts one more failure and returns how long to wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.delay(self.failures, rand::random::<f64>())
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// After a success: the next failure starts from `base` again. Returns the failures there
    /// were.
    pub fn reset(&mut self) -> u32 {
        std::mem::take(&mut self.failures)
    }
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
            backoff: Backoff::new(base, max),
            log: LogLimiter::new(log_every),
        }
    }

    /// The longest delay between attempts.
    pub fn max_delay(&self) -> Duration {
        self.backoff.max
    }

    /// One more failed refresh with error text `error` at `now`.
    pub fn failed(&mut self, error: &str, now: Instant) -> RetryPlan {
        let delay = self.backoff.next_delay();
        RetryPlan {
            delay,
            log: self.log.check(&error.to_owned(), now),
            failures: self.backoff.failures(),
        }
    }

    /// A refresh succeeded: back to the normal interval. Returns how many consecutive failures
    /// preceded it (0 if none), so that the recovery can be logged once.
    pub fn succeeded(&mut self) -> u32 {
        self.log.clear();
        self.backoff.reset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn delays_double_up_to_the_cap_with_jitter_between_half_and_full() {
        let b = Backoff::new(S, 60 * S);
        let nominal: Vec<Duration> = (1..=9).map(|n| b.delay(n, 1.0)).collect();
        assert_eq!(
            nominal,
            [1, 2, 4, 8, 16, 32, 60, 60, 60].map(|s| s * S).to_vec()
        );
        assert_eq!(b.delay(3, 0.0), 2 * S);
        assert_eq!(b.delay(3, 0.5), Duration::from_millis(3000));
        // Out-of-range draws and huge failure counts stay within [max/2, max].
        assert_eq!(b.delay(u32::MAX, 7.0), 60 * S);
        assert_eq!(b.delay(u32::MAX, -1.0), 30 * S);
    }

    #[test]
    fn next_delay_grows_and_reset_starts_over() {
        let mut b = Backoff::new(S, 60 * S);
        let delays: Vec<Duration> = (0..10).map(|_| b.next_delay()).collect();
        for (i, d) in delays.iter().enumerate() {
            let nominal = (S * (1u32 << i.min(30))).min(60 * S);
            assert!(*d >= nominal / 2 && *d <= nominal, "attempt {i}: {d:?}");
        }
        assert_eq!(b.failures(), 10);
        assert_eq!(b.reset(), 10);
        assert!(b.next_delay() <= S);
    }

    #[test]
    fn a_35_minute_outage_at_a_1s_refresh_retries_rarely_and_logs_a_handful_of_lines() {
        let t0 = Instant::now();
        let mut r = RefreshRetry::new(S);
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
        assert_eq!(r.backoff.delay(1, 1.0), S);
        assert_eq!(r.backoff.delay(30, 1.0), 10 * 60 * S);
    }
}
