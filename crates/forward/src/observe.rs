//! Hooks through which the pipeline reports what it does, for metrics and tracing.
//!
//! The forwarder never formats metrics or talks to a tracing backend itself: it calls an
//! [`Observer`] that the embedding program provides (the `strait` binary turns these calls into
//! Prometheus metrics and OpenTelemetry spans). Every method has an empty default body.
//!
//! Methods are called on the hot path from tokio tasks: implementations must be cheap
//! (atomic counters, channel sends), never block.
//!
//! Nothing correct may depend on these calls or their timing: state that must stay in step
//! with the committed positions (failover's offset maps) is a
//! [`CommitHook`](crate::pipeline::CommitHook), called on the commit path.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use strait_wire::TopicPartition;

use crate::ReencodeReason;
use crate::merge::MergeKind;

/// How a batch crossed the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Path {
    /// Header rewritten, records copied untouched (no decompression).
    PassThrough,
    /// Decompressed, fixed and recompressed, for the given reason.
    Reencoded(ReencodeReason),
    /// Several consecutive source batches merged into one (re-batching), built as the
    /// [`MergeKind`] says.
    Merged(MergeKind),
}

impl Path {
    /// A stable label for metrics: `pass_through`, `reencoded` or `merged`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Path::PassThrough => "pass_through",
            Path::Reencoded(_) => "reencoded",
            Path::Merged(_) => "merged",
        }
    }

    /// A stable label for metrics: the re-encode reason, the merge kind (`records` or
    /// `recompressed`), or `none` for pass-through.
    pub fn reason(&self) -> &'static str {
        match self {
            Path::PassThrough => "none",
            Path::Reencoded(r) => r.as_str(),
            Path::Merged(k) => k.as_str(),
        }
    }
}

/// Why a source batch was not forwarded. The position still moves past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// A transaction marker (COMMIT or ABORT): clients may not produce them.
    Control,
    /// A batch of a transaction that was aborted on the source (read_committed).
    Aborted,
    /// A batch whose records were all removed by compaction.
    Empty,
    /// A batch inside a range excluded on purpose ([`Settings::excluded`](crate::Settings)):
    /// records copied to the source from the cluster the mirror writes to.
    Excluded,
}

impl SkipReason {
    /// A stable label for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::Control => "control",
            SkipReason::Aborted => "aborted",
            SkipReason::Empty => "empty",
            SkipReason::Excluded => "excluded",
        }
    }
}

/// Why records were given up for good. Each loss is counted, never silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The offset the mirror needed was gone from the source (retention, DeleteRecords) and
    /// the out-of-range policy said to continue elsewhere: the records in between were
    /// never mirrored.
    OffsetOutOfRange,
    /// The target topic was deleted and created again: what had been mirrored into it is gone
    /// from the target.
    TargetTopicRecreated,
}

impl LossReason {
    /// A stable label for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            LossReason::OffsetOutOfRange => "offset_out_of_range",
            LossReason::TargetTopicRecreated => "target_topic_recreated",
        }
    }
}

/// One produced batch acknowledged by the target.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchForwarded<'a> {
    /// Source partition.
    pub source: &'a TopicPartition,
    /// Target partition.
    pub target: &'a TopicPartition,
    /// First source offset held by the produced batch.
    pub source_base_offset: i64,
    /// Last source offset held by the produced batch.
    pub source_last_offset: i64,
    /// Records written to the target.
    pub records: u32,
    /// Bytes written to the target (the produced batch's size).
    pub bytes: u64,
    /// Pass-through, re-encoded or merged, and why or how.
    pub path: Path,
    /// Codec of the batch as produced: `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    pub compression: &'a str,
    /// The batch's max timestamp (ms since the epoch); record age is now minus this.
    pub max_timestamp_ms: i64,
    /// When the fetch response carrying the batch arrived.
    pub fetched_at: SystemTime,
    /// When the target acknowledged the batch.
    pub acked_at: SystemTime,
    /// Offset the target assigned to the batch's first record (-1 if the target reported
    /// the batch as a duplicate of one it already had).
    pub target_base_offset: i64,
    /// The produced batch bytes (header + records), for header scans such as `traceparent`.
    pub batch: &'a Bytes,
    /// Where the batch's records came from, exactly: see [`OffsetPoint`]. Never empty.
    pub offsets: &'a [OffsetPoint],
}

/// One point of a forwarded batch's source -> target offset mapping: from the record at
/// `target_delta` in the target batch on, source offsets count up by one per target record,
/// until the next point. So the record at target offset `target_base_offset + d` came from
/// source offset `p.source_offset + (d - p.target_delta)`, `p` being the last point with
/// `p.target_delta <= d`. A batch passed through has one point; merged batches, batches
/// re-encoded across compaction gaps, and pieces of split batches have one per discontinuity.
/// This is what exact offset translation (checkpoints, failover) is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPoint {
    /// Source offset of the record at `target_delta`.
    pub source_offset: i64,
    /// Position of that record in the target batch (0 for the first).
    pub target_delta: u32,
}

impl OffsetPoint {
    /// The points of records whose source offsets are `offsets`, in target order: one point
    /// per run of consecutive source offsets.
    pub fn from_source_offsets(offsets: impl IntoIterator<Item = i64>) -> Vec<OffsetPoint> {
        let mut points: Vec<OffsetPoint> = Vec::new();
        let mut expected = None;
        for (d, o) in offsets.into_iter().enumerate() {
            if expected != Some(o) {
                points.push(OffsetPoint {
                    source_offset: o,
                    target_delta: u32::try_from(d).unwrap_or(u32::MAX),
                });
            }
            expected = o.checked_add(1);
        }
        points
    }

    /// The source offset of the record at `target_delta` under `points` (None if `points` is
    /// empty or starts after it).
    pub fn source_of(points: &[OffsetPoint], target_delta: u32) -> Option<i64> {
        let p = points
            .iter()
            .rev()
            .find(|p| p.target_delta <= target_delta)?;
        Some(p.source_offset + i64::from(target_delta - p.target_delta))
    }
}

/// Receives the pipeline's events. All methods default to doing nothing.
pub trait Observer: Send + Sync + 'static {
    /// A produced batch was acknowledged by the target.
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        let _ = ev;
    }
    /// A source batch was dropped on purpose (counted, never silent).
    fn batch_skipped(&self, source: &TopicPartition, reason: SkipReason, records: u32) {
        let _ = (source, reason, records);
    }
    /// A fetch failed; `error_code` is the Kafka error name or `disconnected`/`timeout`.
    fn fetch_error(&self, source: &TopicPartition, error_code: &str) {
        let _ = (source, error_code);
    }
    /// A produce failed for one partition.
    fn produce_error(&self, target: &TopicPartition, error_code: &str) {
        let _ = (target, error_code);
    }
    /// A Produce request to target broker `node` got its answer (or failed) `elapsed` after it
    /// was sent. Its batches had waited up to `queued` before that for a free request slot
    /// (`Settings::max_requests_per_broker`). Separates the target's latency from the mirror's.
    fn produce_request(&self, node: i32, batches: usize, elapsed: Duration, queued: Duration) {
        let _ = (node, batches, elapsed, queued);
    }
    /// After every fetch: the source high watermark and the mirror's next offset.
    fn lag(&self, source: &TopicPartition, high_watermark: i64, next_offset: i64) {
        let _ = (source, high_watermark, next_offset);
    }
    /// A partition started mirroring at `start_offset`.
    fn partition_started(
        &self,
        source: &TopicPartition,
        target: &TopicPartition,
        start_offset: i64,
    ) {
        let _ = (source, target, start_offset);
    }
    /// A partition stopped on an error that needs an operator.
    fn partition_stopped(&self, source: &TopicPartition, reason: &crate::Error) {
        let _ = (source, reason);
    }
    /// A source position was committed.
    fn committed(&self, source: &TopicPartition, offset: i64) {
        let _ = (source, offset);
    }
    /// The set of partitions this instance mirrors changed.
    fn rebalance(&self, assigned: &[TopicPartition]) {
        let _ = assigned;
    }
    /// `records` source records of `source` will never reach the target, for `reason` (the
    /// partition continues after them).
    fn records_lost(&self, source: &TopicPartition, reason: LossReason, records: u64) {
        let _ = (source, reason, records);
    }
    /// A partition cannot make progress for a reason the mirror keeps retrying (an ACL denial
    /// on either cluster): `Some(error_code)` when it starts, `None` once it moves again. Unlike
    /// [`partition_stopped`](Self::partition_stopped), it heals by itself once the cause is fixed.
    fn partition_blocked(&self, source: &TopicPartition, error_code: Option<&str>) {
        let _ = (source, error_code);
    }
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl Observer for NoopObserver {}

#[cfg(test)]
mod tests {
    use super::OffsetPoint;

    fn p(source_offset: i64, target_delta: u32) -> OffsetPoint {
        OffsetPoint {
            source_offset,
            target_delta,
        }
    }

    #[test]
    fn points_mark_each_discontinuity_and_map_back() {
        let cases: &[(&[i64], &[OffsetPoint])] = &[
            (&[], &[]),
            (&[7], &[p(7, 0)]),
            (&[7, 8, 9], &[p(7, 0)]),
            // Compaction gaps and a skipped control marker.
            (&[10, 12, 13, 20], &[p(10, 0), p(12, 1), p(20, 3)]),
            // A re-sent range after a restart goes back.
            (&[5, 6, 3, 4], &[p(5, 0), p(3, 2)]),
        ];
        for (offsets, want) in cases {
            let points = OffsetPoint::from_source_offsets(offsets.iter().copied());
            assert_eq!(&points, want, "{offsets:?}");
            let back: Vec<i64> = (0..offsets.len() as u32)
                .map(|d| OffsetPoint::source_of(&points, d).unwrap_or(-1))
                .collect();
            assert_eq!(&back, offsets);
        }
        assert_eq!(OffsetPoint::source_of(&[p(4, 1)], 0), None);
    }
}
