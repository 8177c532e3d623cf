//! Target topics asked for and not yet in the target's metadata (sans-IO: time is passed in).
//!
//! A broker answers CreateTopics once the controller has the topic, but a loaded broker then
//! takes tens of seconds to publish hundreds of new topics in its metadata, and meanwhile
//! answers UNKNOWN_TOPIC_OR_PARTITION for them. Taking that for "missing" re-sent CreateTopics
//! for the same topics at every refresh (400, 300, 200, 100 topics at 4,000 partitions on one
//! node, each answered TOPIC_ALREADY_EXISTS) and warned about topics being created. Here a
//! topic asked for (created, or answered TOPIC_ALREADY_EXISTS) is *settling*: not asked for
//! again until [`SETTLE_TIMEOUT`] has passed without the metadata showing it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a created topic may stay out of the target's metadata before Strait asks for it
/// again. Measured: a single loaded node creating 4,000 partitions published the last of 500
/// topics ~180 s after the CreateTopics answers (with 120 s here, 200 were asked for once
/// more); a topic deleted right after its creation is still created again, only later.
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What to do about a target topic the metadata does not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absent {
    /// Not asked for recently: create it.
    Create,
    /// Asked for less than [`SETTLE_TIMEOUT`] ago: wait for the metadata.
    Settling,
}

/// The target topics asked for and not yet seen, with when they were asked for.
#[derive(Debug, Default)]
pub(crate) struct Creations {
    requested: HashMap<String, Instant>,
}

impl Creations {
    /// CreateTopics for `topic` was answered at `now` with "created" or TOPIC_ALREADY_EXISTS:
    /// both mean the controller has it, and only the metadata lags.
    pub(crate) fn requested(&mut self, topic: &str, now: Instant) {
        self.requested.insert(topic.to_string(), now);
    }

    /// The target's metadata shows `topic` (with or without leaders yet): it settled.
    pub(crate) fn seen(&mut self, topic: &str) {
        self.requested.remove(topic);
    }

    /// `topic` is not in the target's metadata at `now`.
    pub(crate) fn absent(&mut self, topic: &str, now: Instant) -> Absent {
        match self.requested.get(topic) {
            Some(at) if now.saturating_duration_since(*at) < SETTLE_TIMEOUT => Absent::Settling,
            Some(_) => {
                // Still not there after the timeout: deleted meanwhile, or the request was lost
                // with a controller change; ask again (and time that request anew).
                self.requested.remove(topic);
                Absent::Create
            }
            None => Absent::Create,
        }
    }

    /// Whether `topic` was asked for and has not settled: its configs cannot be read yet.
    pub(crate) fn is_settling(&self, topic: &str) -> bool {
        self.requested.contains_key(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_topic_is_not_asked_for_again_until_the_timeout() {
        let t0 = Instant::now();
        let mut c = Creations::default();
        assert_eq!(c.absent("a", t0), Absent::Create);
        c.requested("a", t0);
        // The refreshes while the broker publishes it (every ~13 s in the 4,000-partition run).
        for s in [0, 13, 26, 52, 119, 299] {
            assert_eq!(
                c.absent("a", t0 + Duration::from_secs(s)),
                Absent::Settling,
                "at +{s} s"
            );
        }
        assert!(c.is_settling("a"));
        // Another topic is not held back by it.
        assert_eq!(c.absent("b", t0), Absent::Create);
        // Past the timeout: asked for again, and the new request timed anew.
        let late = t0 + SETTLE_TIMEOUT;
        assert_eq!(c.absent("a", late), Absent::Create);
        assert!(!c.is_settling("a"));
        c.requested("a", late);
        assert_eq!(
            c.absent("a", late + Duration::from_secs(1)),
            Absent::Settling
        );
    }

    #[test]
    fn a_topic_seen_in_the_metadata_settles_and_is_created_again_if_it_goes() {
        let t0 = Instant::now();
        let mut c = Creations::default();
        c.requested("a", t0);
        c.seen("a");
        assert!(!c.is_settling("a"));
        // Deleted after it settled: the next refresh creates it again at once.
        assert_eq!(c.absent("a", t0 + Duration::from_secs(1)), Absent::Create);
    }

    #[test]
    fn a_clock_that_goes_backwards_keeps_the_topic_settling() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut c = Creations::default();
        c.requested("a", t0);
        assert_eq!(c.absent("a", t0 - Duration::from_secs(5)), Absent::Settling);
    }
}
