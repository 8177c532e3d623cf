//! Follow-up heartbeats: a group member learns what other members did only from the answer to
//! its next heartbeat, and the interval between heartbeats is seconds (3 s classic, 5 s on the
//! consumer protocol by default). After a change of its own membership (a new epoch or
//! assignment, a completed rebalance) a member therefore heartbeats again after 250 ms, 500 ms
//! and then every second, for one interval and a second, before the interval applies again.
//! Every other member learns of the change at its next regular heartbeat, within one interval,
//! so that window covers the releases and the second round (cooperative) the change causes: a
//! moved partition reaches its new owner about a second after its old owner let it go, not up
//! to an interval later. A few extra heartbeats per member and change are the cost.

use std::time::{Duration, Instant};

/// The first waits after a change; then [`PACE`].
const FIRST: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(500)];
/// The wait between follow-ups after [`FIRST`].
const PACE: Duration = Duration::from_secs(1);

/// When a member heartbeats next (see the [module docs](self)). No clock of its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct FollowUps {
    /// When the last change was seen, and how many follow-ups were scheduled since.
    since: Option<(Instant, usize)>,
}

impl FollowUps {
    /// The membership changed at `at`: follow-ups start again.
    pub(crate) fn changed(&mut self, at: Instant) {
        self.since = Some((at, 0));
    }

    /// How long to wait after a heartbeat sent at `sent`, the interval being `interval`.
    pub(crate) fn wait(&mut self, sent: Instant, interval: Duration) -> Duration {
        match &mut self.since {
            Some((since, n)) if sent < *since + interval + PACE => {
                let step = FIRST.get(*n).copied().unwrap_or(PACE);
                *n += 1;
                step.min(interval)
            }
            _ => {
                self.since = None;
                interval
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_for_one_interval_after_a_change_then_the_interval() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(3);
        let mut f = FollowUps::default();
        assert_eq!(f.wait(t0, interval), interval, "nothing changed");
        f.changed(t0);
        let mut at = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            let w = f.wait(at, interval);
            waits.push(w.as_millis());
            at += w;
        }
        assert_eq!(waits, [250, 500, 1000, 1000, 1000, 1000, 3000]);
        // A new change starts them again; never longer than a short interval.
        f.changed(at);
        assert_eq!(f.wait(at, Duration::from_millis(100)).as_millis(), 100);
    }
}
