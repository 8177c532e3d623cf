//! Exponential backoff with jitter, so that failing partitions never retry in a tight loop and
//! many partitions hitting the same broker error do not retry in lockstep.
//!
//! The delays come from the wire client's pure [`strait_wire::Backoff`]; this adds the async
//! wait that stops early when the pipeline stops.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Retry delays: `base`, doubling on every failure up to `max`, each scaled by a random factor
/// in [0.5, 1.0].
#[derive(Debug, Clone)]
pub(crate) struct Backoff(strait_wire::Backoff);

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        let base = base.max(Duration::from_millis(1));
        Backoff(strait_wire::Backoff::new(base, max.max(base)).with_jitter(0.5, 1.0))
    }

    /// The next delay, advancing the attempt counter; does not sleep (for callers that keep
    /// their own timers).
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.0.next_delay()
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
        self.0.reset();
    }

    /// Delays handed out since the start or the last reset.
    pub(crate) fn attempts(&self) -> u32 {
        self.0.attempts()
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

    /// A zero base still backs off (1 ms), so a failing partition never spins.
    #[test]
    fn a_zero_base_still_waits() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        let d = b.next_delay();
        assert!(
            d >= Duration::from_micros(500) && d <= Duration::from_millis(1),
            "{d:?}"
        );
    }

    #[tokio::test]
    async fn a_stopped_wait_returns_false() {
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(60));
        let stop = CancellationToken::new();
        stop.cancel();
        assert!(!b.wait(&stop).await);
    }
}
