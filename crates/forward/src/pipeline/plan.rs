//! Turns one fetch response into forwarding steps: the deterministic heart of the pipeline.
//!
//! Given the records a fetch returned, the partition's position and the target's limits, the
//! planner decides for every batch whether it is skipped (and why), passed through untouched, or
//! re-encoded (and why), and where the position moves. It does no I/O, so every rule of
//! `forwarding.md` §8 is unit-tested here without a broker.
//!
//! **Re-compression runs.** When the only reason to re-encode a batch is the codec
//! (`mirror.compression`), consecutive such batches of the response are re-encoded together, cut
//! into batches of about `batch_size` bytes *after* compression, as Kafka's producer fills
//! `batch.size` (see [`reencode_run_within`]). Re-compressing them one by one gave each codec
//! frame a source batch's worth of window, and wrote up to 5 % more than MirrorMaker 2 with the
//! same codec (benches/README.md, issue 33 item 4). The run is one step: the position moves
//! past it once all its batches are acknowledged.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::Error;
use crate::batch::{FetchedBatch, FetchedRecords, RecordBatch};
use crate::compression::Compression;
use crate::observe::{OffsetPoint, Path, SkipReason};
use crate::reencode::{Allowance, ReencodedBatch, reencode_run_within, reencode_within};
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
    /// Compression ratio the last re-compression run observed (for [`Rules::run_ratio`]).
    pub(crate) run_ratio: Option<f64>,
    /// Source bytes re-compressed in runs, and the bytes of the batches made of them.
    pub(crate) run_bytes: (usize, usize),
}

/// Inputs that stay the same for a partition.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) isolation: Isolation,
    pub(crate) policy: TargetPolicy,
    /// Source ranges whose whole batches are skipped (see `exclude.rs`).
    pub(crate) excluded: Arc<[Range<i64>]>,
    /// Target size of a batch re-compressed from a run, after compression (`batch_size`; 0
    /// re-compresses batch by batch).
    pub(crate) batch_size: usize,
    /// Estimated compression ratio of the next run's first chunk: what the partition's last
    /// run observed (1.0 before any, as Kafka's producer starts).
    pub(crate) run_ratio: f64,
}

/// Batches whose only reason to re-encode is the codec, waiting to be re-encoded together.
#[derive(Default)]
struct PendingRun {
    batches: Vec<RecordBatch>,
    /// The position before the run's first batch.
    from: i64,
    /// The position after its last batch.
    next: i64,
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
    let mut run = PendingRun::default();
    let mut ratio = rules.run_ratio;
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
        if let FetchedBatch::V2(b) = &item
            && decision == TxnDecision::Keep
            && joins_run(b, out.next, rules)
        {
            if run
                .batches
                .first()
                .is_some_and(|first| first.compression() != b.compression())
            {
                flush_run(&mut run, &mut out, rules, &mut ratio, allowance)?;
            }
            if run.batches.is_empty() {
                run.from = out.next;
            }
            run.batches.push(b.clone());
            run.next = next;
            out.next = next;
            continue;
        }
        flush_run(&mut run, &mut out, rules, &mut ratio, allowance)?;
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
    flush_run(&mut run, &mut out, rules, &mut ratio, allowance)?;
    out.truncated_bytes = walker.truncated_tail_bytes();
    Ok(out)
}

/// Whether `batch` (kept by the transaction filter) goes into a re-compression run: merging is
/// on, and the codec is the only reason to re-encode it.
fn joins_run(batch: &RecordBatch, position: i64, rules: &Rules) -> bool {
    rules.batch_size > 0
        && !batch.is_control()
        && !batch.has_no_records()
        && !covers(&rules.excluded, batch.base_offset(), batch.next_offset())
        && needs_reencode(batch, position, &rules.policy) == Some(ReencodeReason::CodecChange)
}

/// Re-encodes the waiting run (if any) into one step.
fn flush_run(
    run: &mut PendingRun,
    out: &mut Plan,
    rules: &Rules,
    ratio: &mut f64,
    allowance: &mut Allowance,
) -> Result<(), Error> {
    if run.batches.is_empty() {
        return Ok(());
    }
    let batches = std::mem::take(&mut run.batches);
    let made = reencode_run_within(
        &batches,
        run.from,
        ProducerStamp::NONE,
        &rules.policy,
        rules.batch_size,
        *ratio,
        allowance,
    )?;
    *ratio = made.ratio;
    out.run_ratio = Some(made.ratio);
    let source: usize = batches.iter().map(RecordBatch::size_in_bytes).sum();
    let output: usize = made.batches.iter().map(|b| b.batch().size_in_bytes()).sum();
    out.run_bytes = (out.run_bytes.0 + source, out.run_bytes.1 + output);
    out.steps.push(with_parts(
        parts_from(made.batches, Path::Reencoded(ReencodeReason::CodecChange)),
        run.next,
    ));
    Ok(())
}

/// The smallest fetch size for a partition whose last fetch (`fetched` bytes, asked with
/// `max_bytes`) re-compressed `run_bytes` (source, output) in runs: large enough for a run to
/// fill one `batch_size` batch after compression, when the fetch came back at least half full
/// (a backlog: a partition that keeps up fetches what arrives and needs no more), and at most
/// sixteen batches' worth of source bytes. 0 when no larger fetch is called for.
pub(crate) fn run_fetch_bytes(
    batch_size: usize,
    run_bytes: (usize, usize),
    fetched: usize,
    max_bytes: usize,
) -> usize {
    let (source, output) = run_bytes;
    if batch_size == 0 || output == 0 || fetched < max_bytes / 2 {
        return 0;
    }
    let want = (batch_size as f64 * source as f64 / output as f64) as usize;
    want.min(batch_size.saturating_mul(16))
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
    use crate::error::CodecError;
    use bytes::BytesMut;
    use strait_wire::kafka_protocol::records::{
        Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One uncompressed v2 batch of `n` records at offsets `base..base + n`.
    fn batch(buf: &mut BytesMut, base: i64, n: i64) {
        let values = (base..base + n)
            .map(|o| Bytes::from(o.to_string()))
            .collect();
        batch_of(buf, base, values, Codec::None);
    }

    /// One v2 batch holding `values` at offsets from `base`, compressed with `codec`.
    fn batch_of(buf: &mut BytesMut, base: i64, values: Vec<Bytes>, codec: Codec) {
        let n = values.len() as i64;
        let mut values = values.into_iter();
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
                value: values.next(),
                headers: Default::default(),
            })
            .collect();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Codec::None,
        };
        let mut plain = BytesMut::new();
        RecordBatchEncoder::encode(&mut plain, &records, &options).unwrap();
        match codec {
            Codec::None => buf.extend_from_slice(&plain),
            Codec::Lz4 => buf.extend_from_slice(&compressed(&plain, Compression::Lz4)),
            other => panic!("no test codec {other:?}"),
        }
    }

    /// `plain` (one uncompressed batch) with its records section compressed with `codec`.
    fn compressed(plain: &[u8], codec: Compression) -> Vec<u8> {
        use crate::batch::{
            ATTRIBUTES, Attributes, BATCH_LENGTH, CRC, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD,
        };
        let mut out = plain[..RECORD_BATCH_OVERHEAD].to_vec();
        codec
            .compress(&plain[RECORD_BATCH_OVERHEAD..], None, &mut out)
            .unwrap();
        let length = (out.len() - LOG_OVERHEAD) as i32;
        out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
        out[ATTRIBUTES..ATTRIBUTES + 2]
            .copy_from_slice(&Attributes::new(codec).raw().to_be_bytes());
        let crc = crate::checksum::batch_crc(&out);
        out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        out
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
            batch_size: 0,
            run_ratio: 1.0,
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

    /// Log-like JSON values of about 100 bytes (as the bench's 100-none dataset), varying
    /// deterministically from record to record.
    fn log_line(o: i64) -> Bytes {
        let x = (o as u64)
            .wrapping_mul(6_364_136_223_846_793_005)
            .rotate_left(17);
        Bytes::from(format!(
            r#"{{"ts":{},"level":"{}","user":{},"path":"/api/v1/items/{}","ms":{}}}"#,
            1_700_000_000_000 + o,
            ["INFO", "WARN", "DEBUG"][(x % 3) as usize],
            x % 10_000,
            (x >> 20) % 100_000,
            (x >> 40) % 900
        ))
    }

    /// `batches` source batches of `per` log lines each, from offset `base`.
    fn small_batches(base: i64, batches: i64, per: i64, codec: Codec) -> Bytes {
        let mut buf = BytesMut::new();
        for b in 0..batches {
            let first = base + b * per;
            let values = (first..first + per).map(log_line).collect();
            batch_of(&mut buf, first, values, codec);
        }
        buf.freeze()
    }

    fn fetched(records: Bytes) -> Fetched {
        Fetched {
            records,
            high_watermark: i64::MAX,
            last_stable_offset: i64::MAX,
            log_start_offset: 0,
            aborted: Vec::new(),
        }
    }

    fn zstd_rules(batch_size: usize, excluded: Arc<[Range<i64>]>) -> Rules {
        zstd_rules_with(batch_size, excluded, 1.0)
    }

    fn zstd_rules_with(batch_size: usize, excluded: Arc<[Range<i64>]>, run_ratio: f64) -> Rules {
        Rules {
            isolation: Isolation::ReadUncommitted,
            policy: TargetPolicy {
                compression: Some(Compression::Zstd),
                ..TargetPolicy::default()
            },
            excluded,
            batch_size,
            run_ratio,
        }
    }

    fn no_exclusions() -> Arc<[Range<i64>]> {
        Arc::from(Vec::new())
    }

    fn parts(plan: &Plan) -> Vec<&Part> {
        plan.steps
            .iter()
            .flat_map(|s| match s {
                Step::Forward { parts, .. } => parts.iter().collect(),
                Step::Skip { .. } => Vec::new(),
            })
            .collect()
    }

    /// The values of every record the parts hold, in order, with the source offset each maps to.
    fn records_of(parts: &[&Part]) -> Vec<(i64, Bytes)> {
        let mut out = Vec::new();
        for p in parts {
            let batch = RecordBatch::parse(p.batch.clone()).unwrap();
            assert_eq!(batch.compression(), Compression::Zstd);
            let decoded = batch.decode_records(1 << 26).unwrap();
            for (d, r) in decoded.iter().enumerate() {
                let r = r.unwrap();
                let source = OffsetPoint::source_of(&p.offsets, d as u32).unwrap();
                out.push((source, Bytes::copy_from_slice(r.value().unwrap())));
            }
        }
        out
    }

    fn bytes_of(parts: &[&Part]) -> usize {
        parts.iter().map(|p| p.batch.len()).sum()
    }

    /// 200 source batches of 18 records of ~100 B (a producer with `linger.ms=0`), uncompressed
    /// or lz4, re-compressed to zstd: merged into one run, they become batches of about
    /// `batch_size` after compression and take fewer bytes than re-compressing each batch alone,
    /// with every record in order at the right source offset.
    #[test]
    fn codec_change_runs_are_recompressed_together_by_compressed_size() {
        for codec in [Codec::None, Codec::Lz4] {
            let records = small_batches(1_000, 200, 18, codec);
            let want: Vec<(i64, Bytes)> =
                (1_000..1_000 + 3_600).map(|o| (o, log_line(o))).collect();

            let one_by_one = plan(
                &fetched(records.clone()),
                1_000,
                &zstd_rules(0, no_exclusions()),
                &mut Allowance::unlimited(),
            )
            .unwrap();
            assert_eq!(one_by_one.steps.len(), 200, "{codec:?}");
            assert_eq!(records_of(&parts(&one_by_one)), want);

            // The first run of a partition is cut with the estimate 1.0 (Kafka's producer starts
            // there too): its first batch holds batch_size of uncompressed records.
            let first = plan(
                &fetched(records.clone()),
                1_000,
                &zstd_rules(256 << 10, no_exclusions()),
                &mut Allowance::unlimited(),
            )
            .unwrap();
            let first_parts = parts(&first);
            assert_eq!((first.steps.len(), first_parts.len()), (1, 2), "{codec:?}");
            assert_eq!(records_of(&first_parts), want);
            let ratio = first.run_ratio.unwrap();
            assert!(
                ratio > 0.0 && ratio < 0.5,
                "{codec:?}: observed ratio {ratio}"
            );

            // With the ratio it observed, the whole run fits one batch of batch_size.
            let merged = plan(
                &fetched(records.clone()),
                1_000,
                &zstd_rules_with(256 << 10, no_exclusions(), ratio),
                &mut Allowance::unlimited(),
            )
            .unwrap();
            assert_eq!((merged.next, one_by_one.next), (4_600, 4_600));
            assert_eq!(merged.steps.len(), 1, "{codec:?}: the run is one step");
            let Step::Forward { parts: p, next } = &merged.steps[0] else {
                panic!("{codec:?}: a forward step")
            };
            assert_eq!((p.len(), *next), (1, 4_600), "{codec:?}");
            assert_eq!(
                p[0].offsets,
                vec![OffsetPoint {
                    source_offset: 1_000,
                    target_delta: 0
                }]
            );
            assert_eq!(
                (p[0].first_offset, p[0].last_offset, p[0].records),
                (1_000, 4_599, 3_600)
            );
            assert_eq!(p[0].path, Path::Reencoded(ReencodeReason::CodecChange));
            assert_eq!(records_of(&parts(&merged)), want);
            let (merged_bytes, single_bytes) =
                (bytes_of(&parts(&merged)), bytes_of(&parts(&one_by_one)));
            assert!(
                merged_bytes * 10 < single_bytes * 7,
                "{codec:?}: one run {merged_bytes} B, one by one {single_bytes} B"
            );
            assert_eq!(merged.run_bytes, (records.len(), merged_bytes));

            // A smaller batch_size cuts the run by compressed size: from the second batch on
            // (the first is sized with the estimate 1.0, as Kafka's producer starts), each
            // compresses to about batch_size, never far beyond it.
            let target = 8 << 10;
            let cut = plan(
                &fetched(records.clone()),
                1_000,
                &zstd_rules(target, no_exclusions()),
                &mut Allowance::unlimited(),
            )
            .unwrap();
            let cut_parts = parts(&cut);
            assert_eq!(cut.steps.len(), 1);
            assert!(
                cut_parts.len() >= 3,
                "{codec:?}: {} batches",
                cut_parts.len()
            );
            assert!(cut_parts[0].batch.len() <= target, "{codec:?}");
            for p in &cut_parts[1..cut_parts.len() - 1] {
                let len = p.batch.len();
                assert!(
                    len > target * 3 / 4 && len <= target * 5 / 4,
                    "{codec:?}: a {len} B batch for a {target} B target"
                );
            }
            assert_eq!(records_of(&cut_parts), want);
            assert!(bytes_of(&cut_parts) < single_bytes, "{codec:?}");
        }
    }

    /// A run stops at anything that is not a codec-only re-encode: a skipped batch, a batch the
    /// fetch offset falls inside, a change of source codec. Order and positions hold.
    #[test]
    fn runs_end_where_the_plan_needs_another_step() {
        let mut buf = BytesMut::new();
        let mut offset = 100;
        // 100..190: run; 190..200: excluded; 200..290: run; 290..300 lz4: a run of its own.
        for (n, codec) in [
            (90, Codec::None),
            (10, Codec::None),
            (90, Codec::None),
            (10, Codec::Lz4),
        ] {
            for b in 0..n / 10 {
                let first = offset + b * 10;
                batch_of(
                    &mut buf,
                    first,
                    (first..first + 10).map(log_line).collect(),
                    codec,
                );
            }
            offset += n;
        }
        let rules = zstd_rules(256 << 10, std::iter::once(190..200).collect());
        // The fetch offset is inside the first batch: that batch is re-encoded on its own.
        let plan = plan(
            &fetched(buf.freeze()),
            104,
            &rules,
            &mut Allowance::unlimited(),
        )
        .unwrap();
        let steps: Vec<(&str, i64, usize)> = plan
            .steps
            .iter()
            .map(|s| match s {
                Step::Forward { parts, next } => ("forward", *next, parts.len()),
                Step::Skip { next, .. } => ("skip", *next, 0),
            })
            .collect();
        assert_eq!(
            steps,
            vec![
                ("forward", 110, 1),
                ("forward", 190, 1),
                ("skip", 200, 0),
                ("forward", 290, 1),
                ("forward", 300, 1),
            ]
        );
        let all = parts(&plan);
        let want: Vec<(i64, Bytes)> = (104..190)
            .chain(200..300)
            .map(|o| (o, log_line(o)))
            .collect();
        assert_eq!(records_of(&all), want);
        assert_eq!(
            all[0].path,
            Path::Reencoded(ReencodeReason::FetchOffsetInsideBatch)
        );
        assert_eq!(all[1].path, Path::Reencoded(ReencodeReason::CodecChange));
    }

    /// A run asks the memory budget for its working memory up front, as a single re-encode
    /// does: the first plan (no allowance) fails saying how much it needs, and a plan within
    /// that succeeds (what `codec.rs` does).
    #[test]
    fn a_run_needs_an_allowance() {
        fn needed(e: &CodecError) -> Option<usize> {
            match e {
                CodecError::OverAllowance { needed, .. } => Some(*needed),
                CodecError::InBatch { source, .. } => needed(source),
                _ => None,
            }
        }
        for codec in [Codec::None, Codec::Lz4] {
            let records = small_batches(0, 50, 18, codec);
            let rules = zstd_rules(256 << 10, no_exclusions());
            let mut allowed = 0;
            let made = loop {
                match plan(
                    &fetched(records.clone()),
                    0,
                    &rules,
                    &mut Allowance::new(allowed),
                ) {
                    Ok(plan) => break plan,
                    Err(Error::Codec(e)) if allowed < 1 << 26 => {
                        let more = needed(&e).unwrap_or_else(|| panic!("{codec:?}: {e}"));
                        allowed = more.max(allowed * 2);
                    }
                    Err(e) => panic!("{codec:?}: {e}"),
                }
            };
            assert!(allowed > 0, "{codec:?}: no allowance was asked for");
            assert_eq!(made.next, 900);
            assert_eq!(parts(&made).len(), 1, "{codec:?}");
        }
    }

    #[test]
    fn a_backlog_fetches_enough_for_one_compressed_batch() {
        // 256 KiB of source compressed to 64 KiB: a run of 1 MiB fills a 256 KiB batch.
        assert_eq!(
            run_fetch_bytes(256 << 10, (256 << 10, 64 << 10), 256 << 10, 256 << 10),
            1 << 20
        );
        // At most sixteen batches' worth, whatever the ratio.
        assert_eq!(
            run_fetch_bytes(256 << 10, (1 << 20, 1), 256 << 10, 256 << 10),
            4 << 20
        );
        // Not re-compressing, merging off, or a partition that keeps up: no larger fetch.
        assert_eq!(run_fetch_bytes(256 << 10, (0, 0), 256 << 10, 256 << 10), 0);
        assert_eq!(
            run_fetch_bytes(0, (256 << 10, 64 << 10), 256 << 10, 256 << 10),
            0
        );
        assert_eq!(
            run_fetch_bytes(256 << 10, (10 << 10, 2 << 10), 10 << 10, 256 << 10),
            0
        );
    }
}
