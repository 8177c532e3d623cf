//! Target topics whose partitions wait for this run's first config sync (pure state).
//!
//! The first topic-config sync of a run (two DescribeConfigs per topic, 32 topics at a time:
//! 1.5 s for 500 topics in a release build) ran before the group join, so it stood between a
//! large mirror and its first record. Now the mirror joins at once and the sync runs beside it
//! (`Topics::settle`): a target topic is *held* until its own sync ended, and the mirror starts
//! each assigned partition as soon as its target topic is no longer held. What the sync
//! guarantees is kept: no partition writes into a target topic before this run's sync of that
//! topic finished (or failed, which is logged and never stops the mirror, as before).

use std::collections::BTreeSet;

use strait_forward::Route;

/// The held target topics.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holds {
    topics: BTreeSet<String>,
}

impl Holds {
    /// Holds `topic` until its first config sync is done. False if it was held already.
    pub(crate) fn hold(&mut self, topic: &str) -> bool {
        self.topics.insert(topic.to_string())
    }

    /// `topic`'s first config sync is done: its partitions may start. False when it was not
    /// held.
    pub(crate) fn release(&mut self, topic: &str) -> bool {
        self.topics.remove(topic)
    }

    /// The topics waiting for their first config sync.
    pub(crate) fn configs_due(&self) -> Vec<String> {
        self.topics.iter().cloned().collect()
    }

    /// Splits `routes` into those that may start now and those whose target topic is held.
    pub(crate) fn split(&self, routes: Vec<Route>) -> (Vec<Route>, Vec<Route>) {
        routes
            .into_iter()
            .partition(|r| !self.topics.contains(r.target.topic()))
    }
}

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
        let mut h = Holds::default();
        assert!(h.hold("a"));
        assert!(!h.hold("a"), "held once");
        assert!(h.hold("b"));
        let (ready, held) = h.split(vec![route("a", 0), route("b", 1), route("c", 2)]);
        assert_eq!(ready, [route("c", 2)]);
        assert_eq!(held, [route("a", 0), route("b", 1)]);
        assert_eq!(h.configs_due(), ["a", "b"]);
        assert!(h.release("a"));
        assert!(!h.release("a"), "released once");
        let (ready, held) = h.split(held);
        assert_eq!((ready, held), (vec![route("a", 0)], vec![route("b", 1)]));
        assert!(h.release("b"));
        assert!(h.configs_due().is_empty());
    }
}
