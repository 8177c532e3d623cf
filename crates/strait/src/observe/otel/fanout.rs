//! One [`Observer`] that forwards every event to several (metrics and tracing).

use std::fmt;
use std::sync::Arc;

use strait_forward::observe::{BatchForwarded, LossReason, Observer, SkipReason};
use strait_wire::TopicPartition;

/// Calls each observer in turn, in the order given. Cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use strait::observe::otel::Fanout;
/// use strait_forward::observe::{NoopObserver, Observer};
/// let both: Arc<dyn Observer> = Arc::new(Fanout::new(vec![
///     Arc::new(NoopObserver),
///     Arc::new(NoopObserver),
/// ]));
/// # let _ = both;
/// ```
#[derive(Clone, Default)]
pub struct Fanout {
    observers: Vec<Arc<dyn Observer>>,
}

impl Fanout {
    /// Forwards to `observers`.
    pub fn new(observers: Vec<Arc<dyn Observer>>) -> Fanout {
        Fanout { observers }
    }

    /// Adds one more observer.
    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.observers.push(observer);
    }

    /// How many observers receive the events.
    pub fn len(&self) -> usize {
        self.observers.len()
    }

    /// True when events go nowhere.
    pub fn is_empty(&self) -> bool {
        self.observers.is_empty()
    }
}

impl fmt::Debug for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fanout")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl FromIterator<Arc<dyn Observer>> for Fanout {
    fn from_iter<I: IntoIterator<Item = Arc<dyn Observer>>>(iter: I) -> Self {
        Fanout::new(iter.into_iter().collect())
    }
}

impl Observer for Fanout {
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        for o in &self.observers {
            o.batch_forwarded(ev);
        }
    }

    fn batch_skipped(&self, source: &TopicPartition, reason: SkipReason, records: u32) {
        for o in &self.observers {
            o.batch_skipped(source, reason, records);
        }
    }

    fn fetch_error(&self, source: &TopicPartition, error_code: &str) {
        for o in &self.observers {
            o.fetch_error(source, error_code);
        }
    }

    fn produce_error(&self, target: &TopicPartition, error_code: &str) {
        for o in &self.observers {
            o.produce_error(target, error_code);
        }
    }

    fn produce_request(
        &self,
        node: i32,
        batches: usize,
        elapsed: std::time::Duration,
        queued: std::time::Duration,
    ) {
        for o in &self.observers {
            o.produce_request(node, batches, elapsed, queued);
        }
    }

    fn lag(&self, source: &TopicPartition, high_watermark: i64, next_offset: i64) {
        for o in &self.observers {
            o.lag(source, high_watermark, next_offset);
        }
    }

    fn partition_started(
        &self,
        source: &TopicPartition,
        target: &TopicPartition,
        start_offset: i64,
    ) {
        for o in &self.observers {
            o.partition_started(source, target, start_offset);
        }
    }

    fn partition_stopped(&self, source: &TopicPartition, reason: &strait_forward::Error) {
        for o in &self.observers {
            o.partition_stopped(source, reason);
        }
    }

    fn committed(&self, source: &TopicPartition, offset: i64) {
        for o in &self.observers {
            o.committed(source, offset);
        }
    }

    fn rebalance(&self, assigned: &[TopicPartition]) {
        for o in &self.observers {
            o.rebalance(assigned);
        }
    }

    fn records_lost(&self, source: &TopicPartition, reason: LossReason, records: u64) {
        for o in &self.observers {
            o.records_lost(source, reason, records);
        }
    }

    fn partition_blocked(&self, source: &TopicPartition, error_code: Option<&str>) {
        for o in &self.observers {
            o.partition_blocked(source, error_code);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Observer for Recorder {
        fn lag(&self, source: &TopicPartition, high_watermark: i64, next_offset: i64) {
            self.0
                .lock()
                .unwrap()
                .push(format!("lag {source} {high_watermark} {next_offset}"));
        }
        fn committed(&self, source: &TopicPartition, offset: i64) {
            self.0
                .lock()
                .unwrap()
                .push(format!("committed {source} {offset}"));
        }
        fn rebalance(&self, assigned: &[TopicPartition]) {
            self.0
                .lock()
                .unwrap()
                .push(format!("rebalance {}", assigned.len()));
        }
    }

    #[test]
    fn every_observer_sees_every_event_in_order() {
        let a = Arc::new(Recorder::default());
        let b = Arc::new(Recorder::default());
        let mut fan: Fanout = [a.clone() as Arc<dyn Observer>].into_iter().collect();
        fan.push(b.clone());
        assert_eq!(fan.len(), 2);
        let tp = TopicPartition::new("orders", 1).unwrap();
        let obs: Arc<dyn Observer> = Arc::new(fan);
        obs.lag(&tp, 10, 7);
        obs.committed(&tp, 7);
        obs.rebalance(std::slice::from_ref(&tp));
        obs.fetch_error(&tp, "NOT_LEADER_OR_FOLLOWER");
        for r in [&a, &b] {
            let seen = r.0.lock().unwrap().clone();
            assert_eq!(
                seen,
                [
                    format!("lag {tp} 10 7"),
                    format!("committed {tp} 7"),
                    "rebalance 1".to_string()
                ]
            );
        }
        assert!(Fanout::default().is_empty());
    }
}
