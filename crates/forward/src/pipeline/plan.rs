//! Turns one fetch response into forwarding steps: the deterministic heart of the pipeline.
//!
//! Given the records a fetch returned, the partition's position and the target's limits, the
//! planner decides for every batch whether it is skipped (and why), passed through untouched, or
//! re-encoded (and why), and where the position moves. It does no I/O, so every rule of
//! `forwarding.md` §8 is unit-tested here without a broker.

use bytes::Bytes;

use crate::batch::{FetchedItem, FetchedRecords, RecordBatch};
use crate::observe::{Path, SkipReason};
use crate::reencode::{self, ReencodeOptions};
use crate::txn::{AbortedFilter, Verdict};
use crate::{Compression, Error, ReencodeReason};

use super::io::{Fetched, Isolation, TopicLimits};

/// What to do with the codec of forwarded batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodecChoice {
    /// Keep each batch's own codec (pass-through).
    #[default]
    Keep,
    /// Re-encode every batch with this codec.
    Force(Compression),
}

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
}

/// One decision of the planner, in log order.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Nothing to produce; the position moves to `next`.
    Skip { reason: SkipReason, records: u32, next: i64 },
    /// Produce these parts in order; once all are acknowledged the position is `next`.
    Forward { parts: Vec<Part>, next: i64 },
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
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) isolation: Isolation,
    pub(crate) limits: TopicLimits,
    pub(crate) codec: CodecChoice,
}

/// Plans the forwarding of `fetched`, for a partition whose next wanted offset is `position`.
pub(crate) fn plan(fetched: &Fetched, position: i64, rules: &Rules) -> Result<Plan, Error> {
    let mut out = Plan { next: position, ..Plan::default() };
    let mut aborted = match rules.isolation {
        Isolation::ReadCommitted => Some(AbortedFilter::new(fetched.aborted.iter().copied())),
        Isolation::ReadUncommitted => None,
    };
    let mut walker = FetchedRecords::new(fetched.records.clone());
    for item in walker.by_ref() {
        match item? {
            FetchedItem::Batch(batch) => {
                let next = batch.last_offset() + 1;
                if next <= out.next {
                    // The broker returned a batch we already forwarded (it starts the segment
                    // read); nothing of it is wanted.
                    continue;
                }
                let verdict = aborted.as_mut().map_or(Verdict::Keep, |f| f.classify(&batch));
                let step = match verdict {
                    Verdict::DropControl => Step::Skip { reason: SkipReason::Control, records: batch.record_count(), next },
                    Verdict::DropAborted => Step::Skip { reason: SkipReason::Aborted, records: batch.record_count(), next },
                    Verdict::Keep if batch.is_control() => {
                        Step::Skip { reason: SkipReason::Control, records: batch.record_count(), next }
                    }
                    Verdict::Keep if batch.record_count() == 0 => Step::Skip { reason: SkipReason::Empty, records: 0, next },
                    Verdict::Keep => forward(&batch, out.next, rules)?,
                };
                out.next = next;
                out.steps.push(step);
            }
            FetchedItem::Legacy(legacy) => {
                let next = legacy.last_offset() + 1;
                if next <= out.next {
                    continue;
                }
                let target = target_codec(legacy.compression(), rules);
                let batches = legacy.to_v2(out.next, target, rules.limits.max_message_bytes)?;
                let parts = parts_from(batches, Path::Reencoded(ReencodeReason::LegacyMagic));
                out.next = next;
                out.steps.push(if parts.is_empty() {
                    Step::Skip { reason: SkipReason::Empty, records: 0, next }
                } else {
                    Step::Forward { parts, next }
                });
            }
        }
    }
    out.truncated_bytes = walker.truncated_bytes();
    Ok(out)
}

fn target_codec(own: Compression, rules: &Rules) -> Compression {
    match rules.codec {
        CodecChoice::Keep => own,
        CodecChoice::Force(c) => c,
    }
}

/// Why `batch` cannot pass through untouched, if it cannot.
pub(crate) fn reencode_reason(batch: &RecordBatch, position: i64, rules: &Rules) -> Option<ReencodeReason> {
    if batch.base_offset() < position {
        Some(ReencodeReason::FetchOffsetInsideBatch)
    } else if i64::from(batch.last_offset_delta()) + 1 != i64::from(batch.record_count()) {
        Some(ReencodeReason::OffsetGaps)
    } else if batch.len() > rules.limits.max_message_bytes {
        Some(ReencodeReason::TooLarge)
    } else if target_codec(batch.compression(), rules) != batch.compression() {
        Some(ReencodeReason::CodecChange)
    } else {
        None
    }
}

fn forward(batch: &RecordBatch, position: i64, rules: &Rules) -> Result<Step, Error> {
    let next = batch.last_offset() + 1;
    let Some(reason) = reencode_reason(batch, position, rules) else {
        let part = Part {
            batch: batch.bytes().clone(),
            first_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            records: batch.record_count(),
            path: Path::PassThrough,
            compression: batch.compression(),
            max_timestamp_ms: batch.max_timestamp(),
        };
        return Ok(Step::Forward { parts: vec![part], next });
    };
    let options = ReencodeOptions {
        min_offset: position,
        compression: target_codec(batch.compression(), rules),
        max_batch_bytes: rules.limits.max_message_bytes,
    };
    let batches = reencode::reencode(batch, &options)?;
    let parts = parts_from(batches, Path::Reencoded(reason));
    if parts.is_empty() {
        // Every record was before the position: the batch only moves the position.
        return Ok(Step::Skip { reason: SkipReason::Empty, records: 0, next });
    }
    Ok(Step::Forward { parts, next })
}

fn parts_from(batches: Vec<reencode::Reencoded>, path: Path) -> Vec<Part> {
    batches
        .into_iter()
        .map(|b| Part {
            first_offset: b.first_offset,
            last_offset: b.last_offset,
            records: b.records,
            compression: b.compression,
            max_timestamp_ms: b.max_timestamp,
            batch: b.batch,
            path,
        })
        .collect()
}
