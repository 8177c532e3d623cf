//! Rate limits for log lines that would otherwise repeat for as long as a fault lasts.
//!
//! A cluster that is gone, or a partition that stays stopped, produces the same error on every
//! retry or refresh. Logging each one buries everything else (a 35-minute source outage once
//! wrote about 1,200 identical lines), yet an operator must still see that the fault persists.
//! [`LogLimiter`] therefore lets the first occurrence of an event through at once, suppresses
//! repeats, and lets one through again every `every`, carrying how many were suppressed in
//! between. Time is passed in, so the policy is tested without sleeping.
//!
//! The one limiter of the workspace: the forwarder's retry warnings across partitions use it
//! with a single key (`()`), the binary's refresh failures and stopped partitions with a key
//! per error.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How often a repeating error is logged again after its first line, by default.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(300);

/// Above this many remembered events, events not seen for `every` are forgotten (a forgotten
/// event logs at once when it comes back, as it would have anyway).
const PRUNE_ABOVE: usize = 256;

/// Whether to log an occurrence, and what to say about the ones that were not logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first occurrence (or the first after [`LogLimiter::forget`]): log it.
    First,
    /// A repeat that is due: log it, saying that `suppressed` repeats were not logged since the
    /// previous line.
    Again {
        /// Occurrences since the previous line that were not logged.
        suppressed: u64,
    },
    /// A repeat within `every` of the previous line: do not log it.
    Quiet,
}

impl Verdict {
    /// True when the occurrence should be logged.
    pub fn should_log(self) -> bool {
        !matches!(self, Verdict::Quiet)
    }

    /// Occurrences not logged since the previous line (0 for [`Verdict::First`]).
    pub fn suppressed(self) -> u64 {
        match self {
            Verdict::Again { suppressed } => suppressed,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    logged_at: Instant,
    last_seen: Instant,
    suppressed: u64,
}

/// Decides which occurrences of repeating events are logged. Events are told apart by a key
/// chosen by the caller, typically the place plus the error text (`(partition, message)`), so
/// that a different error is logged at once instead of being hidden behind an old one.
#[derive(Debug, Clone)]
pub struct LogLimiter<K> {
    every: Duration,
    seen: HashMap<K, Seen>,
}

impl<K: Hash + Eq + Clone> LogLimiter<K> {
    /// A limiter that logs each event once, then at most once per `every`.
    pub fn new(every: Duration) -> Self {
        LogLimiter {
            every,
            seen: HashMap::new(),
        }
    }

    /// Records one occurrence of `key` at `now` and says whether to log it.
    pub fn check(&mut self, key: &K, now: Instant) -> Verdict {
        if self.seen.len() > PRUNE_ABOVE {
            let every = self.every;
            self.seen
                .retain(|_, s| now.saturating_duration_since(s.last_seen) < every);
        }
        match self.seen.get_mut(key) {
            None => {
                self.seen.insert(
                    key.clone(),
                    Seen {
                        logged_at: now,
                        last_seen: now,
                        suppressed: 0,
                    },
                );
                Verdict::First
            }
            Some(s) => {
                s.last_seen = now;
                if now.saturating_duration_since(s.logged_at) >= self.every {
                    let suppressed = s.suppressed;
                    s.logged_at = now;
                    s.suppressed = 0;
                    Verdict::Again { suppressed }
                } else {
                    s.suppressed += 1;
                    Verdict::Quiet
                }
            }
        }
    }

    /// Counts one occurrence of `key` that the caller logs quietly on its own account (its own
    /// cadence keeps it from the log): the next line of `key` counts it among those it stands
    /// for. An event not seen yet is not started by this.
    pub fn hold(&mut self, key: &K) {
        if let Some(s) = self.seen.get_mut(key) {
            s.suppressed += 1;
        }
    }

    /// Forgets `key` (the fault is over): its next occurrence is logged at once. Returns the
    /// occurrences that were suppressed since its last line.
    pub fn forget(&mut self, key: &K) -> u64 {
        self.seen.remove(key).map_or(0, |s| s.suppressed)
    }

    /// Forgets every event for which `keep` is false.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.seen.retain(|k, _| keep(k));
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.seen.clear();
    }

    /// How many events are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no event is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(300);

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn first_occurrence_logs_then_repeats_are_counted_until_the_interval_passes() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(EVERY);
        let key = "refresh: connection refused".to_string();
        assert_eq!(l.check(&key, t0), Verdict::First);
        // One occurrence per second for just under the interval: all quiet.
        for s in 1..300 {
            assert_eq!(l.check(&key, at(t0, s)), Verdict::Quiet, "at {s} s");
        }
        assert_eq!(
            l.check(&key, at(t0, 300)),
            Verdict::Again { suppressed: 299 }
        );
        assert_eq!(l.check(&key, at(t0, 301)), Verdict::Quiet);
        assert_eq!(l.check(&key, at(t0, 600)), Verdict::Again { suppressed: 1 });
    }

    #[test]
    fn a_35_minute_outage_retried_every_second_logs_8_lines_not_2100() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(EVERY);
        let key = "source gone";
        let mut lines = 0;
        let mut counted = 0;
        for s in 0..35 * 60 {
            let v = l.check(&key, at(t0, s));
            if v.should_log() {
                lines += 1;
                counted += 1 + v.suppressed();
            }
        }
        // At 0 s, then at 5, 10, ... 30 minutes.
        assert_eq!(lines, 7, "one at once, then one per 5 minutes");
        // The lines account for every occurrence up to the last one (30 min = 1800 s); the
        // repeats after it are still pending.
        assert_eq!(counted, 1801);
    }

    #[test]
    fn different_keys_are_limited_separately() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(EVERY);
        let a = ("orders-0", "TOPIC_AUTHORIZATION_FAILED");
        let b = ("orders-1", "TOPIC_AUTHORIZATION_FAILED");
        let a2 = ("orders-0", "MESSAGE_TOO_LARGE");
        assert_eq!(l.check(&a, t0), Verdict::First);
        assert_eq!(l.check(&b, t0), Verdict::First);
        assert_eq!(l.check(&a, at(t0, 10)), Verdict::Quiet);
        // A new error on the same partition is news: logged at once.
        assert_eq!(l.check(&a2, at(t0, 10)), Verdict::First);
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn forgetting_a_key_logs_its_next_occurrence_at_once() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(EVERY);
        assert_eq!(l.check(&1, t0), Verdict::First);
        assert_eq!(l.check(&1, at(t0, 1)), Verdict::Quiet);
        assert_eq!(l.check(&1, at(t0, 2)), Verdict::Quiet);
        assert_eq!(l.forget(&1), 2);
        assert_eq!(l.check(&1, at(t0, 3)), Verdict::First);
        l.retain(|k| *k != 1);
        assert!(l.is_empty());
        assert_eq!(l.check(&1, at(t0, 4)), Verdict::First);
        l.clear();
        assert_eq!(l.forget(&1), 0);
    }

    #[test]
    fn occurrences_held_by_the_caller_are_counted_by_the_next_line() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(1));
        // Not seen yet: holding it starts nothing, its first occurrence still logs at once.
        l.hold(&());
        assert_eq!(l.check(&(), t0), Verdict::First);
        l.hold(&());
        l.hold(&());
        assert_eq!(l.check(&(), at(t0, 1)), Verdict::Again { suppressed: 2 });
    }

    #[test]
    fn many_distinct_events_do_not_grow_without_bound() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(1));
        for i in 0..10_000u64 {
            // Each event is seen once, 10 ms apart: old ones expire and are pruned.
            l.check(&i, t0 + Duration::from_millis(10 * i));
        }
        assert!(l.len() <= PRUNE_ABOVE + 1, "{}", l.len());
    }

    #[test]
    fn a_clock_that_does_not_advance_never_repeats_a_line() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(EVERY);
        assert!(l.check(&"x", t0).should_log());
        assert_eq!(l.check(&"x", t0), Verdict::Quiet);
        // An earlier instant (callers may pass a slightly older "now") does not panic.
        if let Some(earlier) = t0.checked_sub(Duration::from_secs(1)) {
            assert_eq!(l.check(&"x", earlier), Verdict::Quiet);
        }
    }
}
