//! The forwarder's observer hook, turned into metric updates.

use std::time::{Duration, Instant};

use strait_forward::observe::{BatchForwarded, LossReason, Observer, SkipReason};
use strait_wire::TopicPartition;

use super::{Forwarded, Metrics};

impl Observer for Metrics {
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        self.record_forwarded(&Forwarded {
            source_topic: ev.source.topic_arc(),
            source_partition: ev.source.partition(),
            target_topic: ev.target.topic_arc(),
            records: ev.records,
            bytes: ev.bytes,
            path: ev.path.as_str(),
            reason: ev.path.reason(),
            max_timestamp_ms: ev.max_timestamp_ms,
            fetched_at: ev.fetched_at,
            acked_at: ev.acked_at,
        });
    }

    fn batch_skipped(&self, _source: &TopicPartition, reason: SkipReason, records: u32) {
        self.record_skipped(reason.as_str(), records);
    }

    fn fetch_error(&self, _source: &TopicPartition, error_code: &str) {
        self.record_fetch_error(error_code);
    }

    fn produce_error(&self, _target: &TopicPartition, error_code: &str) {
        self.record_produce_error(error_code);
    }

    fn produce_request(&self, _node: i32, _batches: usize, elapsed: Duration, queued: Duration) {
        self.record_produce_request(elapsed, queued);
    }

    /// Only the end offset is taken: the lag is measured against what the target acknowledged
    /// (the lag sampler), not against what was fetched.
    fn lag(&self, source: &TopicPartition, high_watermark: i64, _next_offset: i64) {
        self.record_end_offset(source, high_watermark, Instant::now());
    }

    fn partition_started(
        &self,
        source: &TopicPartition,
        _target: &TopicPartition,
        _start_offset: i64,
    ) {
        self.record_partition_started(source, Instant::now());
    }

    fn records_lost(&self, source: &TopicPartition, reason: LossReason, records: u64) {
        self.record_records_lost(
            source.topic_arc(),
            source.partition(),
            reason.as_str(),
            records,
        );
    }

    fn partition_blocked(&self, source: &TopicPartition, error_code: Option<&str>) {
        self.record_partition_blocked(source, error_code);
    }

    fn partition_stopped(&self, _source: &TopicPartition, _reason: &strait_forward::Error) {
        self.record_partition_stopped();
    }

    fn committed(&self, source: &TopicPartition, offset: i64) {
        self.record_committed(source.topic_arc(), source.partition(), offset);
    }

    fn rebalance(&self, assigned: &[TopicPartition]) {
        self.record_rebalance(assigned.iter().map(|tp| (tp.topic_arc(), tp.partition())));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn observer_calls_reach_the_metrics() {
        let m = Arc::new(Metrics::new());
        let obs: Arc<dyn Observer> = m.clone();
        let tp = TopicPartition::new("orders", 2).unwrap();
        obs.partition_started(&tp, &tp, 4);
        obs.lag(&tp, 10, 8);
        m.update_lag(&[(tp.clone(), 4)], Instant::now());
        obs.records_lost(&tp, LossReason::OffsetOutOfRange, 17);
        obs.partition_blocked(&tp, Some("TOPIC_AUTHORIZATION_FAILED"));
        obs.fetch_error(&tp, "NOT_LEADER_OR_FOLLOWER");
        obs.batch_skipped(&tp, SkipReason::Aborted, 3);
        obs.committed(&tp, 4);
        obs.rebalance(std::slice::from_ref(&tp));
        obs.produce_request(1, 3, Duration::from_millis(30), Duration::from_millis(2));
        let text = m.encode_openmetrics();
        // 30 ms falls in the 50 ms bucket, not the 25 ms one; 2 ms waits in the 2.5 ms bucket.
        assert!(
            text.contains("strait_produce_request_seconds_bucket{le=\"0.025\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("strait_produce_request_seconds_bucket{le=\"0.05\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("strait_produce_queue_seconds_bucket{le=\"0.001\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("strait_produce_queue_seconds_bucket{le=\"0.0025\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("strait_partition_lag_records{topic=\"orders\",partition=\"2\"} 6"),
            "{text}"
        );
        assert!(
            text.contains("strait_fetch_errors_total{error=\"NOT_LEADER_OR_FOLLOWER\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("strait_records_skipped_total{reason=\"aborted\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("strait_committed_offset{topic=\"orders\",partition=\"2\"} 4"),
            "{text}"
        );
        assert!(text.contains("strait_partitions_assigned 1"), "{text}");
        assert!(
            text.contains("strait_records_lost_total{topic=\"orders\",partition=\"2\",reason=\"offset_out_of_range\"} 17"),
            "{text}"
        );
        assert!(text.contains("strait_partitions_blocked 1"), "{text}");
    }
}
