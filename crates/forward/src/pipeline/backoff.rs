//! Exponential backoff with jitter, so that failing partitions never retry in a tight loop and
//! many partitions hitting the same broker error do not retry in lockstep.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Retry delays: `base`, doubling on every failure up to `max`, each scaled by a random factor
/// in [0.5, 1.0].
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base: base.max(Duration::from_millis(1)),
            max: max.max(base),
            attempt: 0,
        }
    }

    /// The next delay, advancing the attempt counter.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        exp.mul_f64(0.5 + rand::random::<f64>() * 0.5)
    }

    /// Sleeps for the next delay. Returns false if `stop` was cancelled first.
    pub(crate) async fn wait(&mut self, stop: &CancellationToken) -> bool {
        let delay = self.next_delay();
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = stop.cancelled() => false,
        }
    }

    /// Back to the base delay after a success.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[3] >= Duration::from_millis(400) && d[3] <= Duration::from_millis(800));
        assert!(d.iter().all(|x| *x <= Duration::from_secs(1)));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
