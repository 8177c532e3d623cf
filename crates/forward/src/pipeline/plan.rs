//! Turns one fetch response into forwarding steps: the deterministic heart of the pipeline.
//!
//! Given the records a fetch returned, the partition's position and the target's limits, the
//! planner decides for every batch whether it is skipped (and why), passed through untouched, or
//! re-encoded (and why), and where the position moves. It does no I/O, so every rule of
//! `forwarding.md` §8 is unit-tested here without a broker.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::Error;
use crate::batch::{FetchedBatch, FetchedRecords, RecordBatch};
use crate::compression::Compression;
use crate::observe::{OffsetPoint, Path, SkipReason};
use crate::reencode::{Allowance, ReencodedBatch, reencode_within};
use crate::rewrite::{ProducerStamp, ReencodeReason, TargetPolicy, needs_reencode};
use crate::txn::{AbortedTransactionFilter, TxnDecision};

use super::exclude::covers;
use super::io::{Fetched, Isolation};

/// One batch ready to produce (not yet stamped with the producer id and sequence).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) batch: Bytes,
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) records: u32,
    pub(crate) path: Path,
    pub(crate) compression: Compression,
    pub(crate) max_timestamp_ms: i64,
    /// Where its records came from (see [`OffsetPoint`]).
    pub(crate) offsets: Vec<OffsetPoint>,
}

/// One decision of the planner, in log order.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Nothing to produce; the position moves to `next`.
    Skip {
        reason: SkipReason,
        records: u32,
        next: i64,
    },
    /// Produce these parts in order; once all are acknowledged the position is `next`.
    Forward { parts: Vec<Part>, next: i64 },
}

impl Step {
    /// Bytes this step hands to the target (0 for a skip).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Step::Forward { parts, .. } => parts.iter().map(|p| p.batch.len()).sum(),
            Step::Skip { .. } => 0,
        }
    }
}

/// The plan for one fetch response.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    /// The position after the last complete batch (unchanged if there was none).
    pub(crate) next: i64,
    /// Bytes at the end of the response that did not form a complete batch.
    pub(crate) truncated_bytes: usize,
}

/// Inputs that stay the same for a partition.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) isolation: Isolation,
    pub(crate) policy: TargetPolicy,
    /// Source ranges whose whole batches are skipped (see `exclude.rs`).
    pub(crate) excluded: Arc<[Range<i64>]>,
}

/// Plans the forwarding of `fetched`, for a partition whose next wanted offset is `position`.
///
/// Re-encoding works within `allowance` (the batches it made stay accounted in it): with
/// `Allowance::new(0)` any batch that needs codec work fails the plan with
/// `CodecError::OverAllowance`, so a plan of pass-through batches and skips alone succeeds
/// without touching a codec (see `codec.rs`).
pub(crate) fn plan(
    fetched: &Fetched,
    position: i64,
    rules: &Rules,
    allowance: &mut Allowance,
) -> Result<Plan, Error> {
    let mut out = Plan {
        next: position,
        ..Plan::default()
    };
    let mut aborted = match rules.isolation {
        Isolation::ReadCommitted => Some(AbortedTransactionFilter::new(
            fetched.aborted.iter().copied(),
        )),
        Isolation::ReadUncommitted => None,
    };
    let mut walker = FetchedRecords::new(fetched.records.clone());
    for item in walker.by_ref() {
        let item = item?;
        let next = item.next_offset();
        // Every batch goes through the filter, also one skipped below: an ABORT marker ends
        // its producer's aborted transaction for the batches after it.
        let decision = match aborted.as_mut() {
            Some(filter) => filter.classify_fetched(&item)?,
            None => TxnDecision::Keep,
        };
        if next <= out.next {
            // The broker returned a batch we already forwarded (reads start at the batch
            // holding the fetch offset); nothing of it is wanted.
            continue;
        }
        let step = match (decision, item) {
            (TxnDecision::DropAborted, FetchedBatch::V2(b)) => skip(SkipReason::Aborted, &b, next),
            (TxnDecision::DropControl, FetchedBatch::V2(b)) => skip(SkipReason::Control, &b, next),
            (_, FetchedBatch::V2(b)) if b.is_control() => skip(SkipReason::Control, &b, next),
            (_, FetchedBatch::V2(b)) if b.has_no_records() => skip(SkipReason::Empty, &b, next),
            (_, FetchedBatch::V2(b)) if covers(&rules.excluded, b.base_offset(), next) => {
                skip(SkipReason::Excluded, &b, next)
            }
            (_, FetchedBatch::V2(b)) => forward(&b, out.next, &rules.policy, allowance)?,
            (_, FetchedBatch::Legacy(legacy)) => {
                let batches = legacy.reencode_within(
                    out.next,
                    ProducerStamp::NONE,
                    &rules.policy,
                    allowance,
                )?;
                with_parts(
                    parts_from(batches, Path::Reencoded(ReencodeReason::LegacyMagic)),
                    next,
                )
            }
        };
        out.next = next;
        out.steps.push(step);
    }
    out.truncated_bytes = walker.truncated_tail_bytes();
    Ok(out)
}

fn skip(reason: SkipReason, batch: &RecordBatch, next: i64) -> Step {
    Step::Skip {
        reason,
        records: u32::try_from(batch.record_count()).unwrap_or(0),
        next,
    }
}

fn with_parts(parts: Vec<Part>, next: i64) -> Step {
    if parts.is_empty() {
        // Every record was before the position: the batch only moves the position.
        Step::Skip {
            reason: SkipReason::Empty,
            records: 0,
            next,
        }
    } else {
        Step::Forward { parts, next }
    }
}

fn forward(
    batch: &RecordBatch,
    position: i64,
    policy: &TargetPolicy,
    allowance: &mut Allowance,
) -> Result<Step, Error> {
    let next = batch.next_offset();
    match needs_reencode(batch, position, policy) {
        None => {
            let part = Part {
                batch: batch.as_bytes().clone(),
                first_offset: batch.base_offset(),
                last_offset: batch.last_offset(),
                records: u32::try_from(batch.record_count()).unwrap_or(0),
                path: Path::PassThrough,
                compression: batch.compression(),
                max_timestamp_ms: batch.max_timestamp(),
                // Passed through only without offset gaps (a gap forces a re-encode), so the
                // target's offsets follow the source's one for one.
                offsets: vec![OffsetPoint {
                    source_offset: batch.base_offset(),
                    target_delta: 0,
                }],
            };
            Ok(Step::Forward {
                parts: vec![part],
                next,
            })
        }
        Some(reason) => {
            let batches = reencode_within(batch, position, ProducerStamp::NONE, policy, allowance)?;
            Ok(with_parts(
                parts_from(batches, Path::Reencoded(reason)),
                next,
            ))
        }
    }
}

fn parts_from(batches: Vec<ReencodedBatch>, path: Path) -> Vec<Part> {
    batches
        .into_iter()
        .filter_map(|b| {
            let first_offset = b.first_source_offset()?;
            let last_offset = b.last_source_offset()?;
            let records = u32::try_from(b.source_offsets().len()).unwrap_or(0);
            let offsets = OffsetPoint::from_source_offsets(b.source_offsets().iter().copied());
            let batch = b.into_batch();
            Some(Part {
                offsets,
                first_offset,
                last_offset,
                records,
                compression: batch.compression(),
                max_timestamp_ms: batch.max_timestamp(),
                batch: batch.into_bytes(),
                path,
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use strait_wire::kafka_protocol::records::{
        Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One uncompressed v2 batch of `n` records at offsets `base..base + n`.
    fn batch(buf: &mut BytesMut, base: i64, n: i64) {
        let records: Vec<Record> = (base..base + n)
            .map(|o| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: o,
                // kafka-protocol starts a new batch when offset - sequence changes.
                sequence: i32::try_from(o - base).unwrap(),
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(Bytes::from(o.to_string())),
                headers: Default::default(),
            })
            .collect();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Codec::None,
        };
        RecordBatchEncoder::encode(buf, &records, &options).unwrap();
    }

    #[test]
    fn batches_inside_an_excluded_range_are_skipped_whole() {
        let mut buf = BytesMut::new();
        batch(&mut buf, 10, 5); // 10..15: forwarded
        batch(&mut buf, 15, 5); // 15..20: excluded
        batch(&mut buf, 20, 2); // 20..22: reaches past the range, forwarded whole
        let fetched = Fetched {
            records: buf.freeze(),
            high_watermark: 22,
            last_stable_offset: 22,
            log_start_offset: 0,
            aborted: Vec::new(),
        };
        let rules = Rules {
            isolation: Isolation::ReadUncommitted,
            policy: TargetPolicy {
                max_message_bytes: 1 << 20,
                ..TargetPolicy::default()
            },
            excluded: std::iter::once(15..21).collect(),
        };
        let plan = plan(&fetched, 10, &rules, &mut Allowance::new(0)).unwrap();
        assert_eq!(plan.next, 22);
        let kinds: Vec<(bool, i64)> = plan
            .steps
            .iter()
            .map(|s| match s {
                Step::Forward { next, .. } => (true, *next),
                Step::Skip { reason, next, .. } => {
                    assert_eq!(*reason, SkipReason::Excluded);
                    (false, *next)
                }
            })
            .collect();
        assert_eq!(kinds, vec![(true, 15), (false, 20), (true, 22)]);
    }
}
