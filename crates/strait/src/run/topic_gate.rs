//! Target topics the partitions mirrored into them wait for (sans-IO: time is passed in).
//!
//! Two kinds of work used to stand between a large mirror and its first record, for every
//! partition alike:
//! * the first topic-config sync (two DescribeConfigs per topic, 1.5 s for 500 topics in a
//!   release build) ran before the group join;
//! * a target topic Strait had just created took a loaded broker up to 180 s to publish, and
//!   meanwhile each of its partitions retried its own DescribeConfigs and Produce (91k and 86k
//!   error answers at 4,000 partitions on one node).
//!
//! Now the mirror joins at once and starts each partition as soon as its own target topic is
//! ready; a topic is *held* while its first config sync has not reached it, or while it is
//! created and not yet published with a leader for every partition. One watcher asks the
//! target for all the held topics at once (`Topics::settle`), instead of each partition asking
//! on its own. What the config sync guarantees is kept: a partition never writes into a target
//! topic before this run's first sync of that topic's configs finished (or failed, which is
//! logged and never stops the mirror, as before).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use strait_forward::Route;

use crate::run::topic_creation::SETTLE_TIMEOUT;

/// Why a target topic is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hold {
    /// This run's first config sync has not reached the topic yet.
    Configs,
    /// Created (or answered TOPIC_ALREADY_EXISTS) at `since` with `partitions`, not yet
    /// served (a leader answering for it) on every partition; the `served` ones may start.
    /// `then_sync`: no partition starts before its configs are synced, once every partition is
    /// served (a created topic without a `min.insync.replicas` of its own may be below the
    /// target's default).
    Publishing {
        since: Instant,
        partitions: i32,
        then_sync: bool,
        served: BTreeSet<i32>,
    },
}

/// The held target topics, by name.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holds {
    topics: BTreeMap<String, Hold>,
}

impl Holds {
    /// Holds `topic` until its first config sync is done (a topic already held for its
    /// publication stays held for that).
    pub(crate) fn hold_configs(&mut self, topic: &str) -> bool {
        if self.topics.contains_key(topic) {
            return false;
        }
        self.topics.insert(topic.to_string(), Hold::Configs);
        true
    }

    /// Holds `topic`, created at `now`, until the target publishes it with leaders.
    pub(crate) fn hold_publishing(
        &mut self,
        topic: &str,
        partitions: i32,
        then_sync: bool,
        now: Instant,
    ) {
        self.topics.insert(
            topic.to_string(),
            Hold::Publishing {
                since: now,
                partitions,
                then_sync,
                served: BTreeSet::new(),
            },
        );
    }

    /// `topic` is ready: its partitions may start. False when it was not held.
    pub(crate) fn release(&mut self, topic: &str) -> bool {
        self.topics.remove(topic).is_some()
    }

    /// `topic`'s first config sync is done: released if that is what held it (a topic held for
    /// its publication stays held). False when nothing changed.
    pub(crate) fn release_configs(&mut self, topic: &str) -> bool {
        if self.topics.get(topic) != Some(&Hold::Configs) {
            return false;
        }
        self.topics.remove(topic);
        true
    }

    /// The target serves `partitions` of `topic` (held for its publication): they may start,
    /// unless its configs are to be synced first. Once every partition is served, a topic
    /// without a config sync to wait for is released. True if anything changed.
    pub(crate) fn served(&mut self, topic: &str, partitions: &BTreeSet<i32>) -> bool {
        let Some(Hold::Publishing {
            partitions: all,
            then_sync,
            served,
            ..
        }) = self.topics.get_mut(topic)
        else {
            return false;
        };
        let before = served.len();
        served.extend(partitions.iter().copied());
        let complete = served.len() >= usize::try_from(*all).unwrap_or(0);
        if complete && !*then_sync {
            self.topics.remove(topic);
            return true;
        }
        served.len() != before
    }

    /// Whether every partition of `topic` (held for its publication) is served.
    pub(crate) fn fully_served(&self, topic: &str) -> bool {
        matches!(self.topics.get(topic), Some(Hold::Publishing { partitions, served, .. })
            if served.len() >= usize::try_from(*partitions).unwrap_or(0))
    }

    #[cfg(test)]
    pub(crate) fn is_held(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Whether the partitions of `route` must wait.
    fn holds_route(&self, route: &Route) -> bool {
        match self.topics.get(route.target.topic()) {
            None => false,
            Some(Hold::Configs) => true,
            Some(Hold::Publishing {
                then_sync, served, ..
            }) => *then_sync || !served.contains(&route.target.partition()),
        }
    }

    /// The topics waiting for their first config sync.
    pub(crate) fn configs_due(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter(|(_, h)| **h == Hold::Configs)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// The topics waiting for their publication.
    pub(crate) fn publishing(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter_map(|(t, h)| match h {
                Hold::Publishing { .. } => Some(t.clone()),
                Hold::Configs => None,
            })
            .collect()
    }

    /// Releases the topics held for their publication since [`SETTLE_TIMEOUT`] or longer and
    /// returns them: their partitions start and retry on their own (the topic refresh asks for
    /// a topic that is still missing again), rather than waiting without a word.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .topics
            .iter()
            .filter(|(_, h)| {
                matches!(h, Hold::Publishing { since, .. }
                    if now.saturating_duration_since(*since) >= SETTLE_TIMEOUT)
            })
            .map(|(t, _)| t.clone())
            .collect();
        for t in &expired {
            self.topics.remove(t);
        }
        expired
    }

    /// Splits `routes` into those that may start now and those whose target topic is held.
    pub(crate) fn split(&self, routes: Vec<Route>) -> (Vec<Route>, Vec<Route>) {
        routes.into_iter().partition(|r| !self.holds_route(r))
    }
}

/// How often the watcher asks the target about topics held for their publication: the Java
/// producer's `retry.backoff.ms` order, one Metadata request for all of them.
pub(crate) const PUBLISH_POLL: Duration = Duration::from_millis(250);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use strait_wire::TopicPartition;

    fn route(topic: &str, p: i32) -> Route {
        let tp = TopicPartition::new(topic, p).unwrap();
        Route {
            source: tp.clone(),
            target: tp,
        }
    }

    #[test]
    fn partitions_of_held_topics_wait_and_the_others_start() {
        let t0 = Instant::now();
        let mut h = Holds::default();
        assert!(h.hold_configs("a"));
        h.hold_publishing("b", 8, true, t0);
        let (ready, held) = h.split(vec![route("a", 0), route("b", 1), route("c", 2)]);
        assert_eq!(ready, [route("c", 2)]);
        assert_eq!(held, [route("a", 0), route("b", 1)]);
        assert_eq!(h.configs_due(), ["a"]);
        assert_eq!(h.publishing(), ["b"]);
        assert!(h.release("a"));
        assert!(!h.release("a"), "released once");
        let (ready, held) = h.split(held);
        assert_eq!((ready, held), (vec![route("a", 0)], vec![route("b", 1)]));
    }

    #[test]
    fn a_topic_being_published_is_not_turned_into_a_config_hold() {
        let t0 = Instant::now();
        let mut h = Holds::default();
        h.hold_publishing("b", 8, false, t0);
        assert!(!h.hold_configs("b"));
        assert!(h.configs_due().is_empty());
        // A config sync of it (the periodic one) does not end the wait for its publication.
        assert!(!h.release_configs("b"));
        assert!(h.is_held("b"));
        assert_eq!(h.publishing(), ["b"]);
    }

    #[test]
    fn served_partitions_start_one_by_one_and_the_topic_is_released_with_the_last() {
        let t0 = Instant::now();
        let mut h = Holds::default();
        h.hold_publishing("b", 3, false, t0);
        let all = || vec![route("b", 0), route("b", 1), route("b", 2)];
        assert!(h.served("b", &BTreeSet::from([1])));
        assert!(!h.served("b", &BTreeSet::from([1])), "nothing new");
        let (ready, held) = h.split(all());
        assert_eq!((ready, held.len()), (vec![route("b", 1)], 2));
        assert!(h.served("b", &BTreeSet::from([0, 2])));
        assert!(!h.is_held("b"));
    }

    #[test]
    fn a_topic_whose_configs_follow_waits_for_them_after_every_partition_is_served() {
        let t0 = Instant::now();
        let mut h = Holds::default();
        h.hold_publishing("b", 2, true, t0);
        assert!(h.served("b", &BTreeSet::from([0])));
        assert!(!h.fully_served("b"));
        assert!(h.served("b", &BTreeSet::from([1])));
        assert!(h.fully_served("b"));
        // Served, but no partition starts before the configs are synced.
        let (ready, held) = h.split(vec![route("b", 0), route("b", 1)]);
        assert_eq!((ready.len(), held.len()), (0, 2));
        assert!(h.release("b"));
        assert_eq!(h.split(held).0.len(), 2);
    }

    #[test]
    fn a_publication_hold_ends_after_the_settle_timeout() {
        let t0 = Instant::now();
        let mut h = Holds::default();
        h.hold_publishing("b", 8, false, t0);
        h.hold_configs("a");
        assert!(
            h.expire(t0 + SETTLE_TIMEOUT - Duration::from_secs(1))
                .is_empty()
        );
        assert_eq!(h.expire(t0 + SETTLE_TIMEOUT), ["b"]);
        assert!(!h.is_held("b"));
        // A config hold ends with its sync, never by time.
        assert!(h.is_held("a"));
    }
}
