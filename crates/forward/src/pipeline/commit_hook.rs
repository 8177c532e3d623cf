//! The commit path's hook: every acknowledged batch with its exact source -> target offsets,
//! in step with the commits of the positions they complete.
//!
//! [`Observer`](crate::observe::Observer) is for metrics and tracing; nothing may depend on when
//! it is called. State that must agree with the committed positions (failover's offset
//! translation: a committed position is only as good as the mapping that covers it) implements
//! [`CommitHook`] instead, whose calls are ordered with the commits as each method states.

use strait_wire::TopicPartition;

use crate::observe::OffsetPoint;

/// One batch the target acknowledged, with where its records came from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AckedBatch<'a> {
    /// Source partition.
    pub source: &'a TopicPartition,
    /// Target partition.
    pub target: &'a TopicPartition,
    /// First source offset held by the batch.
    pub source_base_offset: i64,
    /// Last source offset held by the batch.
    pub source_last_offset: i64,
    /// Records written to the target.
    pub records: u32,
    /// Offset the target assigned to the batch's first record; -1 when the target reported
    /// the batch as a duplicate of one it already had (it did not say where that one is).
    pub target_base_offset: i64,
    /// Where the batch's records came from, exactly (see [`OffsetPoint`]). Never empty.
    pub offsets: &'a [OffsetPoint],
}

impl AckedBatch<'_> {
    /// The source offset of the record at `target_delta` in the batch (0 for the first).
    pub fn source_offset_of(&self, target_delta: u32) -> Option<i64> {
        if target_delta >= self.records {
            return None;
        }
        OffsetPoint::source_of(self.offsets, target_delta)
    }
}

/// Receives acknowledged batches and the positions about to be committed, on the commit path.
///
/// Ordering guarantee, per source partition:
/// 1. [`acknowledged`](Self::acknowledged) is called for a batch after the target acknowledged
///    it and before its offsets count towards the partition's acknowledged position, so before
///    any commit of a position past them. Never for a batch the target did not acknowledge.
/// 2. [`committing`](Self::committing)`(source, next)` is called before the position store
///    (or, exactly-once, the route's transaction) commits `next`, once every batch below
///    `next` was passed to `acknowledged` (records below it that were not forwarded were
///    skipped on purpose: transaction markers, aborted or compacted-away records).
///
/// Both run on the forwarder's tasks: keep them short (a lock, no I/O), never block.
pub trait CommitHook: Send + Sync + 'static {
    /// The target acknowledged `batch` (see the ordering above).
    fn acknowledged(&self, batch: &AckedBatch<'_>) {
        let _ = batch;
    }

    /// `next` (the next source offset) is about to be committed for `source`. At-least-once:
    /// right before [`Positions::commit`](super::Positions::commit) stores it. Exactly-once:
    /// right before the route's transaction commits it (before
    /// [`Positions::before_transaction_commit`](super::Positions::before_transaction_commit)),
    /// where its batches become visible; the source group's monitoring copy committed later
    /// is not reported again. May repeat for the same `next` when a commit is retried.
    fn committing(&self, source: &TopicPartition, next: i64) {
        let _ = (source, next);
    }
}

/// A [`CommitHook`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCommitHook;

impl CommitHook for NoCommitHook {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_offsets_follow_the_points_and_stop_at_the_batch_end() {
        let tp = TopicPartition::new("t", 0).unwrap_or_else(|e| panic!("{e}"));
        // Source 10, 12, 13 (a compaction gap after 10) at target deltas 0..3.
        let offsets = OffsetPoint::from_source_offsets([10, 12, 13]);
        let batch = AckedBatch {
            source: &tp,
            target: &tp,
            source_base_offset: 10,
            source_last_offset: 13,
            records: 3,
            target_base_offset: 100,
            offsets: &offsets,
        };
        let got: Vec<Option<i64>> = (0..4).map(|d| batch.source_offset_of(d)).collect();
        assert_eq!(got, [Some(10), Some(12), Some(13), None]);
    }
}
