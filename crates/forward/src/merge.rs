//! Re-batching: merge consecutive record batches of one partition into one target batch.
//!
//! Kafka takes one batch per partition per Produce request and an idempotent producer keeps at
//! most 5 requests in flight per partition, so over a long link the rate of a partition is
//! bounded by `5 / RTT x records per batch`. Merging the small batches a partition has waiting
//! lifts that bound. This module is the pure codec; the produce window decides when to merge.
//!
//! [`compatible`] says whether a batch may follow another in a merge; [`merge`] builds the merged
//! batch:
//!
//! * the records of every input, in order, with keys, values, the record attributes byte, the
//!   encoded headers (order and duplicate keys included) and each record's absolute timestamp
//!   kept byte for byte;
//! * offset deltas 0..n-1 (the target assigns dense offsets anyway, so source compaction gaps
//!   close here as they do in [`crate::reencode()`]); record `i` of the merged batch is the `i`-th
//!   record of the inputs taken in order, which is how the caller maps target offsets back to
//!   source offsets;
//! * baseTimestamp = the first record's timestamp, maxTimestamp = the largest record timestamp
//!   (starting from -1, as Java's `MemoryRecordsBuilder` does);
//! * baseOffset 0, partitionLeaderEpoch -1, producer id/epoch/sequence -1 and attributes holding
//!   only the codec (CreateTime, not transactional, no delete horizon): stamp it with the mirror's
//!   [`ProducerStamp`](crate::ProducerStamp) before producing, as any other batch;
//! * a CRC-32C computed over the new bytes.
//!
//! **Uncompressed inputs** are merged without codec work: each record is re-framed with its new
//! deltas, and a record whose deltas do not change (typically every record of the first input)
//! is copied as it is. **Compressed inputs** are decompressed (bounded by a byte budget, like the
//! re-encoder) and the merged records are compressed once with the same codec.
//!
//! Inputs are the batches as the pipeline holds them: pass-through source batches (with their
//! source baseOffset and producer fields, CRC already verified when fetched) or re-encoded batches
//! (baseOffset 0). Their CRC is not verified again; every record is parsed and checked.

use bytes::Bytes;

use crate::batch::{
    ATTRIBUTES, Attributes, BASE_OFFSET, BASE_SEQUENCE, BASE_TIMESTAMP, BATCH_LENGTH, CRC,
    LAST_OFFSET_DELTA, LOG_OVERHEAD, MAGIC, MAGIC_V2, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH,
    PRODUCER_EPOCH, PRODUCER_ID, RECORD_BATCH_OVERHEAD, RECORDS_COUNT, RecordBatch, TimestampType,
};
use crate::checksum::batch_crc;
use crate::compression::Compression;
use crate::error::{CodecError, Result};
use crate::records::RecordParts;

/// How a merged batch was built (a metrics label, see [`crate::observe::Path::Merged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MergeKind {
    /// Uncompressed inputs: the record deltas were rewritten, no codec work.
    Records,
    /// Compressed inputs: decompressed and recompressed once with the same codec.
    Recompressed,
}

impl MergeKind {
    /// A stable label for metrics: `records` or `recompressed`.
    pub fn as_str(self) -> &'static str {
        match self {
            MergeKind::Records => "records",
            MergeKind::Recompressed => "recompressed",
        }
    }
}

/// One merged batch, ready to be stamped and produced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Merged {
    /// One valid v2 batch: baseOffset 0, partitionLeaderEpoch -1, producer id, epoch and
    /// sequence -1, attributes holding only the codec, CRC valid.
    pub batch: Bytes,
    /// Records in the batch: the sum of the inputs' record counts.
    pub records: u32,
    /// The batch's maxTimestamp (ms since the epoch).
    pub max_timestamp_ms: i64,
    /// The codec of the batch (that of every input).
    pub compression: Compression,
    /// How the batch was built.
    pub kind: MergeKind,
}

/// The codec of `batch` if it may take part in a merge at all: a complete v2 batch (length field
/// consistent, magic 2, known codec) with at least one record, not a control batch, CreateTime.
///
/// Transactional and delete-horizon bits are accepted: the merged batch is restamped by the
/// mirror, and a record's create time (baseTimestamp + timestampDelta) is right in both cases.
fn mergeable_codec(batch: &[u8]) -> Option<Compression> {
    if batch.len() < RECORD_BATCH_OVERHEAD || batch[MAGIC] as i8 != MAGIC_V2 {
        return None;
    }
    let i32_at = |at: usize| {
        let mut a = [0; 4];
        a.copy_from_slice(&batch[at..at + 4]);
        i32::from_be_bytes(a)
    };
    if usize::try_from(i32_at(BATCH_LENGTH)).ok() != Some(batch.len() - LOG_OVERHEAD)
        || i32_at(RECORDS_COUNT) <= 0
        || i32_at(LAST_OFFSET_DELTA) < 0
    {
        return None;
    }
    let attributes = Attributes::from_raw(i16::from_be_bytes([
        batch[ATTRIBUTES],
        batch[ATTRIBUTES + 1],
    ]))
    .ok()?;
    if attributes.is_control() || attributes.timestamp_type() != TimestampType::CreateTime {
        return None;
    }
    Some(attributes.compression())
}

/// Whether batch `b` may be merged after batch `a`.
///
/// Both must be complete v2 batches with at least one record, neither a control batch, both
/// CreateTime (LogAppendTime batches never merge: their records' timestamps depend on a policy
/// the merge does not know), and with the same codec. Never panics, whatever the bytes.
/// Size limits are the caller's business.
pub fn compatible(a: &[u8], b: &[u8]) -> bool {
    match (mergeable_codec(a), mergeable_codec(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Merges `batches` (pairwise [`compatible`], in log order) into one batch, see the module docs.
///
/// `max_decompressed_bytes` caps the decompressed records of all compressed inputs together
/// (`DecompressedTooLarge` beyond it); uncompressed inputs are not decompressed and do not count.
/// Fails with `NotMergeable` when the inputs are empty or not compatible, and with the usual batch
/// and record errors when an input is malformed. A single batch is accepted and re-framed like a
/// merge of one. On any error, forward the inputs one by one instead.
pub fn merge(batches: &[Bytes], max_decompressed_bytes: usize) -> Result<Merged, CodecError> {
    merge_with_level(batches, max_decompressed_bytes, None)
}

/// [`merge`] with a compression level for gzip (0-9) and zstd (1-22); `None` uses Java's
/// defaults, as [`crate::TargetPolicy::compression_level`] does.
pub fn merge_with_level(
    batches: &[Bytes],
    max_decompressed_bytes: usize,
    level: Option<i32>,
) -> Result<Merged, CodecError> {
    let Some(first) = batches.first() else {
        return Err(CodecError::NotMergeable {
            base_offset: -1,
            reason: "no batch was given",
        });
    };
    let codec = mergeable_codec(first);
    let mut parsed = Vec::with_capacity(batches.len());
    let mut total: i32 = 0;
    for bytes in batches {
        let batch = RecordBatch::parse_unverified(bytes.clone())?;
        let reason = match mergeable_codec(bytes) {
            _ if batch.is_control() => Some("it is a control batch"),
            None if batch.attributes().timestamp_type() == TimestampType::LogAppendTime => {
                Some("it is a LogAppendTime batch")
            }
            None => Some("it holds no records"),
            Some(c) if Some(c) != codec => Some("its codec differs from the first batch's"),
            Some(_) => None,
        };
        if let Some(reason) = reason {
            return Err(CodecError::NotMergeable {
                base_offset: batch.base_offset(),
                reason,
            });
        }
        total = total
            .checked_add(batch.record_count())
            .ok_or(CodecError::NotMergeable {
                base_offset: batch.base_offset(),
                reason: "the merged batch would hold more than 2^31 records",
            })?;
        parsed.push(batch);
    }
    let codec = parsed[0].compression();

    let mut out =
        Vec::with_capacity(RECORD_BATCH_OVERHEAD + batches.iter().map(Bytes::len).sum::<usize>());
    out.resize(RECORD_BATCH_OVERHEAD, 0);
    // Uncompressed: the records go straight after the header. Compressed: into a scratch
    // section that is compressed once at the end.
    let mut scratch = Vec::new();
    let section = if codec == Compression::None {
        &mut out
    } else {
        &mut scratch
    };
    let mut budget = max_decompressed_bytes;
    let mut base_ts = None;
    let mut max_ts = -1i64;
    let mut delta = 0i32;
    for batch in &parsed {
        let cap = if codec == Compression::None {
            usize::MAX
        } else {
            budget
        };
        let decoded = batch
            .decode_records(cap)
            .map_err(|e| whole_cap(e, max_decompressed_bytes))?;
        if codec != Compression::None {
            budget -= decoded.as_bytes().len();
        }
        for record in decoded.iter() {
            let record = record.map_err(|e| e.in_batch(batch.base_offset()))?;
            let ts = batch.create_time(&record);
            let base = *base_ts.get_or_insert(ts);
            max_ts = max_ts.max(ts);
            let ts_delta = ts.wrapping_sub(base);
            if ts_delta == record.timestamp_delta() && delta == record.offset_delta() {
                section.extend_from_slice(record.encoded());
            } else {
                RecordParts {
                    attributes: record.attributes(),
                    timestamp_delta: ts_delta,
                    offset_delta: delta,
                    key: record.key(),
                    value: record.value(),
                    headers_section: record.headers_section(),
                }
                .encode(section);
            }
            // Cannot overflow: the total record count fits in an i32 (checked above) and the
            // walker yields exactly the declared count.
            delta += 1;
        }
    }
    if codec != Compression::None {
        codec.compress(&scratch, level, &mut out)?;
    }
    let base_offset = parsed[0].base_offset();
    let batch_length =
        i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| CodecError::NotMergeable {
            base_offset,
            reason: "the merged batch would be larger than 2 GiB",
        })?;
    let base_ts = base_ts.unwrap_or(-1);
    let attributes = Attributes::new(codec).raw();
    let h = &mut out[..RECORD_BATCH_OVERHEAD];
    h[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0i64.to_be_bytes());
    h[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    h[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4].copy_from_slice(&(-1i32).to_be_bytes());
    h[MAGIC] = MAGIC_V2 as u8;
    h[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    h[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(total - 1).to_be_bytes());
    h[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&base_ts.to_be_bytes());
    h[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_be_bytes());
    h[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&(-1i64).to_be_bytes());
    h[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&(-1i16).to_be_bytes());
    h[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(-1i32).to_be_bytes());
    h[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&total.to_be_bytes());
    let crc = batch_crc(&out);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Merged {
        batch: Bytes::from(out),
        records: total as u32,
        max_timestamp_ms: max_ts,
        compression: codec,
        kind: if codec == Compression::None {
            MergeKind::Records
        } else {
            MergeKind::Recompressed
        },
    })
}

/// Reports a decompression cap error with the whole cap, not the budget left for the batch that
/// crossed it: the cap is the setting an operator can raise.
fn whole_cap(e: CodecError, limit: usize) -> CodecError {
    match e {
        CodecError::InBatch {
            base_offset,
            source,
        } => {
            let source = match *source {
                CodecError::DecompressedTooLarge { codec, .. } => {
                    CodecError::DecompressedTooLarge { codec, limit }
                }
                other => other,
            };
            CodecError::InBatch {
                base_offset,
                source: Box::new(source),
            }
        }
        e => e,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::observe::Path;
    use crate::records::put_varint;
    use crate::rewrite::{ProducerStamp, rewrite_for_produce, stamp_in_place};

    type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    /// A source record: offset delta in its batch, absolute timestamp, key, value, headers.
    #[derive(Clone, Debug)]
    struct R {
        delta: i32,
        ts: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Headers,
    }

    fn r(delta: i32, ts: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> R {
        R {
            delta,
            ts,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: Vec::new(),
        }
    }

    /// A source batch as the pipeline may hold it.
    #[derive(Clone, Debug)]
    struct B {
        base_offset: i64,
        flags: i16,
        /// `None`: the first record's timestamp. Set for a delete horizon.
        base_ts: Option<i64>,
        producer: (i64, i16, i32),
        /// lastOffsetDelta beyond the last record's delta (compaction removed the tail).
        tail_gap: i32,
        recs: Vec<R>,
    }

    fn b(base_offset: i64, recs: Vec<R>) -> B {
        B {
            base_offset,
            flags: 0,
            base_ts: None,
            producer: (-1, -1, -1),
            tail_gap: 0,
            recs,
        }
    }

    /// Dense offset deltas, consecutive timestamps from `ts`, distinct values.
    fn dense(base_offset: i64, n: i32, ts: i64) -> B {
        b(
            base_offset,
            (0..n)
                .map(|i| {
                    let v = format!("value {base_offset}+{i}");
                    r(i, ts + i64::from(i), Some(b"k"), Some(v.as_bytes()))
                })
                .collect(),
        )
    }

    fn headers_section(headers: &Headers) -> Vec<u8> {
        let mut v = Vec::new();
        put_varint(&mut v, headers.len() as i32);
        for (k, val) in headers {
            put_varint(&mut v, k.len() as i32);
            v.extend_from_slice(k);
            match val {
                None => put_varint(&mut v, -1),
                Some(val) => {
                    put_varint(&mut v, val.len() as i32);
                    v.extend_from_slice(val);
                }
            }
        }
        v
    }

    fn build(spec: &B, codec: Compression) -> Bytes {
        let base_ts = spec.base_ts.unwrap_or(spec.recs[0].ts);
        let mut section = Vec::new();
        for rec in &spec.recs {
            let hs = headers_section(&rec.headers);
            RecordParts {
                attributes: 0,
                timestamp_delta: rec.ts - base_ts,
                offset_delta: rec.delta,
                key: rec.key.as_deref(),
                value: rec.value.as_deref(),
                headers_section: &hs,
            }
            .encode(&mut section);
        }
        let mut out = vec![0u8; RECORD_BATCH_OVERHEAD];
        codec.compress(&section, None, &mut out).unwrap();
        let len = (out.len() - LOG_OVERHEAD) as i32;
        let lod = spec.recs.last().unwrap().delta + spec.tail_gap;
        let max_ts = spec.recs.iter().map(|r| r.ts).max().unwrap() + 5;
        out[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&spec.base_offset.to_be_bytes());
        out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
        out[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
            .copy_from_slice(&7i32.to_be_bytes());
        out[MAGIC] = 2;
        let attrs = spec.flags | i16::from(codec.id());
        out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
        out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&lod.to_be_bytes());
        out[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&base_ts.to_be_bytes());
        out[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_be_bytes());
        out[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&spec.producer.0.to_be_bytes());
        out[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&spec.producer.1.to_be_bytes());
        out[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&spec.producer.2.to_be_bytes());
        out[RECORDS_COUNT..RECORDS_COUNT + 4]
            .copy_from_slice(&(spec.recs.len() as i32).to_be_bytes());
        reseal(&mut out);
        // The builder itself must produce what the fetch path accepts.
        RecordBatch::parse(Bytes::from(out)).unwrap().into_bytes()
    }

    fn reseal(b: &mut [u8]) {
        let crc = batch_crc(b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }

    /// (offset delta, timestamp, key, value, headers) as a consumer of `batch` reads them.
    type Seen = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Headers);

    fn seen(batch: &RecordBatch) -> Vec<Seen> {
        let decoded = batch.decode_records(1 << 24).unwrap();
        decoded
            .iter()
            .map(|rec| {
                let rec = rec.unwrap();
                (
                    rec.offset_delta(),
                    batch.record_timestamp(&rec),
                    rec.key().map(<[u8]>::to_vec),
                    rec.value().map(<[u8]>::to_vec),
                    rec.headers()
                        .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                        .collect(),
                )
            })
            .collect()
    }

    fn cases() -> Vec<(&'static str, Vec<B>)> {
        let mut with_headers = b(
            500,
            vec![
                r(0, 10_000, None, Some(b"null key")),
                r(1, 10_001, Some(b"tombstone"), None),
                r(2, 10_002, Some(b""), Some(b"")),
                r(3, 10_003, None, None),
            ],
        );
        with_headers.recs[0].headers = vec![
            (b"dup".to_vec(), Some(b"1".to_vec())),
            (vec![0xff, 0xfe], None),
            (b"dup".to_vec(), Some(b"2".to_vec())),
        ];
        with_headers.recs[3].headers = vec![(b"".to_vec(), Some(Vec::new()))];
        let mut second = dense(504, 2, 10_004);
        second.recs[1].headers = vec![(b"traceparent".to_vec(), Some(b"00-ab-cd-01".to_vec()))];

        // Source producer fields, a transaction and a delete horizon: none survive the merge,
        // and the horizon batch's deltas are relative to the horizon.
        let mut txn = dense(20, 3, 50_000);
        txn.flags = Attributes::TRANSACTIONAL;
        txn.producer = (4242, 3, 17);
        let mut horizon = dense(23, 2, 40_000);
        horizon.flags = Attributes::DELETE_HORIZON;
        horizon.base_ts = Some(90_000_000);
        horizon.producer = (77, 0, 5);

        let mut gaps = b(
            100,
            vec![
                r(0, 1_000, Some(b"a"), Some(b"1")),
                r(3, 1_001, Some(b"b"), Some(b"2")),
                r(9, 1_002, Some(b"c"), Some(b"3")),
            ],
        );
        gaps.tail_gap = 3; // lastOffsetDelta 12: the cleaner removed the tail too
        let gaps2 = b(
            113,
            vec![
                r(2, 1_003, Some(b"d"), Some(b"4")),
                r(4, 1_004, Some(b"e"), Some(b"5")),
            ],
        );

        vec![
            (
                "plain",
                vec![dense(0, 3, 1_000), dense(3, 2, 1_003), dense(5, 4, 1_005)],
            ),
            ("headers_and_nulls", vec![with_headers, second]),
            (
                // Timestamps go back within and across batches: the merged deltas are negative.
                "negative_timestamp_deltas",
                vec![
                    b(
                        7,
                        vec![r(0, 5_000, None, Some(b"x")), r(1, 4_000, None, Some(b"y"))],
                    ),
                    b(
                        9,
                        vec![r(0, 1_000, None, Some(b"z")), r(1, 6_000, None, Some(b"w"))],
                    ),
                    b(11, vec![r(0, -3, None, Some(b"pre-epoch"))]),
                ],
            ),
            ("compaction_gaps", vec![gaps, gaps2, dense(119, 1, 1_005)]),
            (
                "single_record_batches",
                vec![
                    dense(0, 1, 9),
                    dense(1, 1, 9),
                    dense(2, 1, 8),
                    dense(3, 1, 10),
                ],
            ),
            (
                "source_producer_txn_horizon",
                vec![txn, horizon, dense(25, 1, 60_000)],
            ),
            (
                // Re-encoded batches (baseOffset 0) mixed with a pass-through source batch.
                "reencoded_and_source",
                vec![
                    dense(0, 2, 3_000),
                    dense(0, 3, 3_002),
                    dense(1_000_000_000_000, 2, 3_005),
                ],
            ),
        ]
    }

    #[test]
    fn merged_batches_hold_exactly_the_input_records() {
        for (name, specs) in cases() {
            for codec in Compression::ALL {
                let ctx = format!("{name}/{codec}");
                let inputs: Vec<Bytes> = specs.iter().map(|s| build(s, codec)).collect();
                for pair in inputs.windows(2) {
                    assert!(compatible(&pair[0], &pair[1]), "{ctx}");
                }
                let m = merge(&inputs, 1 << 20).unwrap();
                let out = RecordBatch::parse(m.batch.clone()).unwrap();

                let want: Vec<&R> = specs.iter().flat_map(|s| &s.recs).collect();
                let n = want.len();
                let got = seen(&out);
                assert_eq!(got.len(), n, "{ctx}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.0, i as i32, "{ctx}: offset delta of record {i}");
                    assert_eq!(
                        (&g.1, &g.2, &g.3, &g.4),
                        (&w.ts, &w.key, &w.value, &w.headers),
                        "{ctx}: record {i}"
                    );
                }
                let max = want.iter().map(|r| r.ts).max().unwrap().max(-1);
                assert_eq!(out.base_offset(), 0, "{ctx}");
                assert_eq!(out.partition_leader_epoch(), -1, "{ctx}");
                assert_eq!(
                    (out.producer_id(), out.producer_epoch(), out.base_sequence()),
                    (-1, -1, -1),
                    "{ctx}"
                );
                assert_eq!(out.attributes().raw(), i16::from(codec.id()), "{ctx}");
                assert_eq!(out.record_count() as usize, n, "{ctx}");
                assert_eq!(out.last_offset_delta() as usize, n - 1, "{ctx}");
                assert!(!out.has_offset_gaps());
                assert_eq!(out.base_timestamp(), want[0].ts, "{ctx}");
                assert_eq!(out.max_timestamp(), max, "{ctx}");
                assert_eq!(
                    (m.records as usize, m.max_timestamp_ms, m.compression),
                    (n, max, codec),
                    "{ctx}"
                );
                let kind = if codec == Compression::None {
                    MergeKind::Records
                } else {
                    MergeKind::Recompressed
                };
                assert_eq!(m.kind, kind, "{ctx}");
            }
        }
    }

    #[test]
    fn uncompressed_records_with_unchanged_deltas_are_copied_verbatim() {
        let first = build(&dense(40, 3, 1_000), Compression::None);
        let second = build(&dense(43, 2, 1_003), Compression::None);
        let m = merge(&[first.clone(), second], usize::MAX).unwrap();
        let records = &first[RECORD_BATCH_OVERHEAD..];
        assert_eq!(
            &m.batch[RECORD_BATCH_OVERHEAD..RECORD_BATCH_OVERHEAD + records.len()],
            records
        );
    }

    #[test]
    fn stamping_a_merged_batch_keeps_it_valid() {
        for codec in Compression::ALL {
            let inputs = [
                build(&dense(0, 3, 1_000), codec),
                build(&dense(3, 2, 900), codec),
            ];
            let m = merge(&inputs, 1 << 20).unwrap();
            let parsed = RecordBatch::parse(m.batch.clone()).unwrap();
            for stamp in [
                ProducerStamp::idempotent(9, 2, 1_000),
                ProducerStamp::transactional(9, 2, i32::MAX),
                ProducerStamp::NONE,
            ] {
                let mut buf = m.batch.to_vec();
                stamp_in_place(&mut buf, stamp).unwrap();
                assert_eq!(buf, rewrite_for_produce(&parsed, stamp).to_vec(), "{codec}");
                let stamped = RecordBatch::parse(Bytes::from(buf)).unwrap();
                assert_eq!(
                    (
                        stamped.producer_id(),
                        stamped.producer_epoch(),
                        stamped.base_sequence(),
                        stamped.is_transactional()
                    ),
                    (
                        stamp.producer_id,
                        stamp.producer_epoch,
                        stamp.base_sequence,
                        stamp.transactional
                    )
                );
                assert_eq!(seen(&stamped), seen(&parsed), "{codec}");
            }
        }
    }

    #[test]
    fn incompatible_batches_are_refused() {
        let plain = build(&dense(0, 2, 1_000), Compression::None);
        let next = build(&dense(2, 2, 1_002), Compression::None);
        let with_flags = |flags: i16| {
            let mut s = dense(2, 2, 1_002);
            s.flags = flags;
            build(&s, Compression::None)
        };
        let control = with_flags(Attributes::CONTROL | Attributes::TRANSACTIONAL);
        let log_append = with_flags(Attributes::LOG_APPEND_TIME);
        let gzip = build(&dense(2, 2, 1_002), Compression::Gzip);
        let mut empty = next[..RECORD_BATCH_OVERHEAD].to_vec();
        empty[BATCH_LENGTH..BATCH_LENGTH + 4]
            .copy_from_slice(&((RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32).to_be_bytes());
        empty[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&0i32.to_be_bytes());
        reseal(&mut empty);
        let empty = Bytes::from(empty);
        let mut magic1 = next.to_vec();
        magic1[MAGIC] = 1;
        let mut codec5 = next.to_vec();
        codec5[ATTRIBUTES + 1] = 5;
        reseal(&mut codec5);
        let short = next.slice(..RECORD_BATCH_OVERHEAD - 1);
        let extra = Bytes::from([&next[..], &[0u8][..]].concat());

        // Transactional and delete-horizon batches do merge.
        assert!(compatible(&plain, &with_flags(Attributes::TRANSACTIONAL)));
        assert!(compatible(&plain, &with_flags(Attributes::DELETE_HORIZON)));
        assert!(compatible(&plain, &next));

        let refused: [(&str, &[u8]); 8] = [
            ("control", &control),
            ("log_append_time", &log_append),
            ("codec", &gzip),
            ("empty", &empty),
            ("magic 1", &magic1),
            ("codec 5", &codec5),
            ("short", &short),
            ("length mismatch", &extra),
        ];
        for (name, bad) in refused {
            assert!(!compatible(&plain, bad), "{name}");
            assert!(!compatible(bad, &plain), "{name}");
            if name != "codec" {
                assert!(!compatible(bad, bad), "{name}");
            }
        }
        for (bad, want) in [
            (&control, "control"),
            (&log_append, "LogAppendTime"),
            (&gzip, "codec"),
            (&empty, "no records"),
        ] {
            let err = merge(&[plain.clone(), bad.clone()], 1 << 20).unwrap_err();
            assert!(
                matches!(&err, CodecError::NotMergeable { base_offset: 2, reason }
                    if reason.contains(want)),
                "{want}: {err}"
            );
        }
        for bad in [Bytes::from(magic1), Bytes::from(codec5), short, extra] {
            assert!(merge(&[plain.clone(), bad], 1 << 20).is_err());
        }
        assert!(matches!(
            merge(&[], 1 << 20),
            Err(CodecError::NotMergeable {
                base_offset: -1,
                ..
            })
        ));
    }

    #[test]
    fn one_batch_is_reframed() {
        let mut spec = dense(77, 3, 5);
        spec.producer = (1, 2, 3);
        let m = merge(&[build(&spec, Compression::Lz4)], 1 << 20).unwrap();
        let out = RecordBatch::parse(m.batch).unwrap();
        assert_eq!(
            (out.base_offset(), out.producer_id(), out.record_count()),
            (0, -1, 3)
        );
    }

    #[test]
    fn decompression_is_capped_over_all_inputs() {
        let big = |base: i64| b(base, vec![r(0, 1, None, Some(&[b'x'; 1_000]))]);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let inputs = [build(&big(0), codec), build(&big(1), codec)];
            // Each input decompresses to about 1 KB: one fits the cap, both do not.
            assert!(merge(&inputs[..1], 1_500).is_ok(), "{codec}");
            let err = merge(&inputs, 1_500).unwrap_err();
            assert!(
                matches!(&err, CodecError::InBatch { base_offset: 1, source }
                    if matches!(**source, CodecError::DecompressedTooLarge { limit: 1_500, .. })),
                "{codec}: {err}"
            );
        }
        // Uncompressed inputs are not decompressed: the cap does not apply.
        let inputs = [
            build(&big(0), Compression::None),
            build(&big(1), Compression::None),
        ];
        assert_eq!(merge(&inputs, 0).unwrap().records, 2);
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let good = build(&dense(0, 2, 1_000), Compression::None);
        let next = build(&dense(2, 2, 1_002), Compression::None);
        // The first record's length varint claims one byte less than it has.
        let mut bad = next.to_vec();
        bad[RECORD_BATCH_OVERHEAD] -= 2;
        reseal(&mut bad);
        let err = merge(&[good.clone(), Bytes::from(bad)], 1 << 20).unwrap_err();
        assert!(
            matches!(&err, CodecError::InBatch { base_offset: 2, .. }),
            "{err}"
        );
        // The header declares one more record than the section holds.
        let mut short = next.to_vec();
        short[RECORDS_COUNT + 3] += 1;
        short[LAST_OFFSET_DELTA + 3] += 1;
        reseal(&mut short);
        assert!(merge(&[good.clone(), Bytes::from(short)], 1 << 20).is_err());
        // Garbage in a compressed section.
        let mut gz = build(&dense(2, 2, 1_002), Compression::Gzip).to_vec();
        let n = gz.len();
        gz[n - 8..].fill(0xaa);
        reseal(&mut gz);
        let first = build(&dense(0, 2, 1_000), Compression::Gzip);
        assert!(merge(&[first, Bytes::from(gz)], 1 << 20).is_err());
    }

    #[test]
    fn labels_are_stable() {
        assert_eq!(MergeKind::Records.as_str(), "records");
        assert_eq!(MergeKind::Recompressed.as_str(), "recompressed");
        let p = Path::Merged(MergeKind::Recompressed);
        assert_eq!((p.as_str(), p.reason()), ("merged", "recompressed"));
        let p = Path::Merged(MergeKind::Records);
        assert_eq!((p.as_str(), p.reason()), ("merged", "records"));
    }
}
