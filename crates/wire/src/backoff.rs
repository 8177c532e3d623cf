//! Exponential backoff with jitter, as a plain value: it says how long to wait, the caller
//! waits (or schedules a timer). No clock reads and no sleeping here, so the delays are unit
//! tested, and a seeded backoff gives the same delays on every run.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::ClientConfig;

/// Retry delays: `initial`, doubling after every [`next_delay`](Backoff::next_delay) up to
/// `max`, each scaled by a random factor so that many clients (or partitions) failing together
/// do not retry in lockstep. The default factor is in [0.8, 1.2), as Kafka's clients; the
/// result never exceeds `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
    jitter_low: f64,
    jitter_high: f64,
    rng: SmallRng,
}

impl Backoff {
    /// Delays from `initial` up to `max` (raised to `initial` if lower), jitter ±20%, from a
    /// randomly seeded generator.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
            jitter_low: 0.8,
            jitter_high: 1.2,
            rng: SmallRng::from_rng(&mut rand::rng()),
        }
    }

    /// `retry.backoff.ms` .. `retry.backoff.max.ms` of a client configuration.
    pub(crate) fn for_retries(config: &ClientConfig) -> Backoff {
        Backoff::new(config.retry_backoff(), config.retry_backoff_max())
    }

    /// The same backoff with its jitter drawn from a generator seeded with `seed`: the same
    /// delays on every run (for tests and simulations).
    pub fn with_seed(mut self, seed: u64) -> Backoff {
        self.rng = SmallRng::seed_from_u64(seed);
        self
    }

    /// The same backoff with each delay scaled by a factor in [`low`, `high`) instead of
    /// [0.8, 1.2); `low == high` scales by exactly that (1.0: no jitter). Negative factors
    /// count as 0.
    pub fn with_jitter(mut self, low: f64, high: f64) -> Backoff {
        let low = if low.is_finite() { low.max(0.0) } else { 1.0 };
        let high = if high.is_finite() { high.max(low) } else { low };
        self.jitter_low = low;
        self.jitter_high = high;
        self
    }

    /// The delay to wait now; the next one is about twice as long, up to the maximum.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << self.attempt.min(31))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        if exp.is_zero() {
            return exp;
        }
        let factor = if self.jitter_high > self.jitter_low {
            self.rng.random_range(self.jitter_low..self.jitter_high)
        } else if self.jitter_low == 1.0 {
            return exp;
        } else {
            self.jitter_low
        };
        // `mul_f64` panics on overflow; configured backoffs can be huge.
        Duration::try_from_secs_f64(exp.as_secs_f64() * factor)
            .unwrap_or(exp)
            .min(self.max)
    }

    /// Back to the initial delay (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// How many delays were handed out since the start or the last [`reset`](Backoff::reset).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Without jitter the delays are exactly initial * 2^n, capped.
    #[test]
    fn delays_double_up_to_the_maximum() {
        let table: &[(u64, u64, &[u64])] = &[
            (100, 1000, &[100, 200, 400, 800, 1000, 1000]),
            (50, 50, &[50, 50, 50]),
            (0, 0, &[0, 0]),
            (0, 1000, &[0, 0]),
            // max below initial is raised to initial.
            (300, 100, &[300, 300]),
        ];
        for &(initial, max, want) in table {
            let mut b = Backoff::new(ms(initial), ms(max)).with_jitter(1.0, 1.0);
            let got: Vec<u64> = want
                .iter()
                .map(|_| b.next_delay().as_millis() as u64)
                .collect();
            assert_eq!(got, want, "initial {initial} max {max}");
        }
    }

    /// Jittered delays stay in [low, high) of the exponential value and never exceed max.
    #[test]
    fn jitter_stays_in_its_range_and_under_the_maximum() {
        let table: &[(f64, f64)] = &[(0.8, 1.2), (0.5, 1.0), (1.0, 1.0), (0.0, 2.0)];
        for &(low, high) in table {
            let mut b = Backoff::new(ms(100), ms(1000))
                .with_jitter(low, high)
                .with_seed(7);
            for attempt in 0..40u32 {
                let exp = ms(100).saturating_mul(1 << attempt.min(31)).min(ms(1000));
                let d = b.next_delay();
                assert!(d <= ms(1000), "{low}..{high} attempt {attempt}: {d:?}");
                assert!(
                    d >= exp.mul_f64(low).min(ms(1000)),
                    "{low}..{high} attempt {attempt}: {d:?}"
                );
                if high > low {
                    assert!(d <= exp.mul_f64(high), "{low}..{high} {attempt}: {d:?}");
                }
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let run = |seed| {
            let mut b = Backoff::new(ms(100), ms(10_000)).with_seed(seed);
            (0..10).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(ms(100), ms(1000)).with_jitter(1.0, 1.0);
        for _ in 0..5 {
            b.next_delay();
        }
        assert_eq!(b.attempts(), 5);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.next_delay(), ms(100));
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let huge = Duration::from_millis(u64::MAX);
        let mut b = Backoff::new(huge, huge).with_seed(3);
        for _ in 0..40 {
            assert!(b.next_delay() <= huge);
        }
        // The exponent stops growing at 2^31.
        let mut b = Backoff::new(ms(1), Duration::MAX).with_jitter(1.0, 1.0);
        for _ in 0..40 {
            b.next_delay();
        }
        assert_eq!(b.next_delay(), ms(1 << 31));
    }
}
