//! Property tests for re-batching: merging consecutive batches of a partition gives one valid
//! batch holding exactly the concatenation of their records, whatever the split, codec,
//! timestamps, compaction gaps and source header fields; stamping it keeps it valid; and bad
//! input is refused without panicking.
//!
//! Input batches come from the independent encoder in `common` (not the crate's own), so the
//! merge is not checked against itself.

#![allow(clippy::unwrap_used)]

use crate::common;

use bytes::Bytes;
use common::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use strait_forward::merge::{MergeKind, compatible, merge};
use strait_forward::{Attributes, Compression, ProducerStamp, RecordBatch, rewrite_for_produce};

fn codec() -> impl Strategy<Value = Compression> {
    prop::sample::select(Compression::ALL.to_vec())
}

/// Values that are sometimes compressible, sometimes not.
fn payload(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => vec(any::<u8>(), 0..max),
        1 => (any::<u8>(), 0..max * 3).prop_map(|(b, n)| vec![b; n]),
    ]
}

type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn headers() -> impl Strategy<Value = Headers> {
    vec(
        (
            // Few distinct keys so duplicates are common; some are not UTF-8.
            prop_oneof![
                Just(b"dup".to_vec()),
                Just(vec![0xff, 0xfe]),
                vec(any::<u8>(), 0..6)
            ],
            option::of(vec(any::<u8>(), 0..12)),
        ),
        0..3,
    )
}

/// One record: offset gap before it (compaction), timestamp relative to the run's base (so
/// timestamps go back and forth), key, value, headers.
type Rec = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Headers);

fn record() -> impl Strategy<Value = Rec> {
    (
        prop_oneof![4 => Just(1i32), 1 => 2..5i32],
        -5_000i64..5_000,
        option::weighted(0.8, payload(16)),
        option::weighted(0.9, payload(300)),
        headers(),
    )
}

/// How one input batch looks apart from its records: (re-encoded with baseOffset 0, or a
/// pass-through source batch), transactional, delete horizon, source producer fields, and the
/// offsets compaction removed after its last record.
type Shape = (bool, bool, bool, (i64, i16, i32), i32);

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
        (any::<i64>(), any::<i16>(), any::<i32>()),
        prop_oneof![3 => Just(0i32), 1 => 1..4i32],
    )
}

/// A run of records of one partition, cut into batches.
#[derive(Clone, Debug)]
struct Run {
    codec: Compression,
    batches: Vec<BatchSpec>,
}

impl Run {
    fn bytes(&self) -> Vec<Bytes> {
        self.batches
            .iter()
            .map(|s| Bytes::from(encode_batch(s)))
            .collect()
    }

    /// What a consumer must read from the merged batch: every record in order, at dense
    /// offsets from 0, with its absolute timestamp.
    fn expected(&self) -> Vec<common::Rec> {
        self.batches
            .iter()
            .flat_map(|s| &s.records)
            .enumerate()
            .map(|(i, r)| common::Rec {
                offset: i as i64,
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
            })
            .collect()
    }
}

fn run() -> impl Strategy<Value = Run> {
    (
        codec(),
        0i64..2_000_000_000_000,
        0i64..1_000_000_000_000,
        vec((vec(record(), 1..12), shape()), 2..7),
    )
        .prop_map(|(codec, base_ts, start_offset, cut)| {
            let mut next_offset = start_offset;
            let batches = cut
                .into_iter()
                .map(
                    |(recs, (reencoded, txn, horizon, (pid, epoch, seq), tail_gap))| {
                        let mut delta = -1;
                        let records: Vec<SpecRecord> = recs
                            .into_iter()
                            .map(|(gap, ts, key, value, headers)| {
                                // A re-encoded batch has dense deltas.
                                delta += if reencoded { 1 } else { gap };
                                SpecRecord {
                                    offset_delta: delta,
                                    timestamp: base_ts + ts,
                                    key,
                                    value,
                                    headers,
                                }
                            })
                            .collect();
                        let tail_gap = if reencoded { 0 } else { tail_gap };
                        let base_offset = if reencoded { 0 } else { next_offset };
                        next_offset += i64::from(delta + tail_gap) + 1;
                        let mut flags = 0;
                        if txn {
                            flags |= Attributes::TRANSACTIONAL;
                        }
                        if horizon {
                            flags |= Attributes::DELETE_HORIZON;
                        }
                        BatchSpec {
                            base_offset,
                            flags,
                            codec,
                            producer_id: pid,
                            producer_epoch: epoch,
                            base_sequence: seq,
                            // With a delete horizon the field holds the horizon and the deltas are
                            // relative to it.
                            base_timestamp: if horizon {
                                base_ts + 86_400_000
                            } else {
                                records[0].timestamp
                            },
                            max_timestamp: records.iter().map(|r| r.timestamp).max().unwrap() + 11,
                            last_offset_delta: Some(delta + tail_gap),
                            records,
                            ..BatchSpec::default()
                        }
                    },
                )
                .collect();
            Run { codec, batches }
        })
}

/// Everything the target checks on a produced batch, plus the merge contract.
fn check_merged(batch: &RecordBatch, want: &[common::Rec], codec: Compression) {
    let n = want.len();
    assert_eq!(batch.base_offset(), 0);
    assert_eq!(batch.partition_leader_epoch(), -1);
    assert_eq!(batch.compression(), codec);
    assert_eq!(batch.record_count() as usize, n);
    assert_eq!(batch.last_offset_delta() as usize, n - 1);
    assert!(!batch.has_offset_gaps() && !batch.is_control());
    assert_eq!(
        batch.attributes().timestamp_type(),
        strait_forward::TimestampType::CreateTime
    );
    assert_eq!(batch.base_timestamp(), want[0].timestamp);
    let max = want.iter().map(|r| r.timestamp).max().unwrap().max(-1);
    assert_eq!(batch.max_timestamp(), max);
    assert_eq!(records_of(batch), want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Merging == concatenation: the merged batch is valid (CRC included) and a consumer reads
    /// exactly the input records, in order, at dense offsets, with their timestamps.
    #[test]
    fn merge_is_the_concatenation(run in run()) {
        let inputs = run.bytes();
        for pair in inputs.windows(2) {
            prop_assert!(compatible(&pair[0], &pair[1]));
        }
        let m = merge(&inputs, 64 << 20).unwrap();
        let batch = RecordBatch::parse(m.batch.clone()).unwrap();
        prop_assert_eq!(
            (batch.producer_id(), batch.producer_epoch(), batch.base_sequence()),
            (-1, -1, -1)
        );
        prop_assert!(!batch.is_transactional());
        prop_assert_eq!(batch.attributes().raw(), i16::from(run.codec.id()));
        let want = run.expected();
        check_merged(&batch, &want, run.codec);
        if run.codec == Compression::None {
            // The documented size bound the produce window can rely on before merging.
            let sections: usize = inputs.iter().map(|b| b.len() - 61).sum();
            prop_assert!(m.batch.len() <= 61 + sections + 14 * want.len());
        }
        prop_assert_eq!(m.records as usize, want.len());
        prop_assert_eq!(m.max_timestamp_ms, batch.max_timestamp());
        prop_assert_eq!(m.compression, run.codec);
        let kind = if run.codec == Compression::None {
            MergeKind::Records
        } else {
            MergeKind::Recompressed
        };
        prop_assert_eq!(m.kind, kind);
    }

    /// A merged batch is itself mergeable: merging in two steps gives the same records as
    /// merging at once (the window may merge what it merged before).
    #[test]
    fn merging_is_associative(run in run(), cut in any::<prop::sample::Index>()) {
        let inputs = run.bytes();
        let at = 1 + cut.index(inputs.len() - 1);
        let head = merge(&inputs[..at], 64 << 20).unwrap().batch;
        let mut rest = vec![head];
        rest.extend_from_slice(&inputs[at..]);
        prop_assert!(compatible(&rest[0], &rest[1]));
        let twice = RecordBatch::parse(merge(&rest, 64 << 20).unwrap().batch).unwrap();
        let once = RecordBatch::parse(merge(&inputs, 64 << 20).unwrap().batch).unwrap();
        prop_assert_eq!(records_of(&twice), records_of(&once));
        check_merged(&twice, &run.expected(), run.codec);
    }

    /// Stamping the merged batch with the mirror's producer identity (the header rewrite the
    /// pipeline applies to every produced batch) keeps it valid and its records unchanged.
    #[test]
    fn stamped_merged_batch_stays_valid(
        run in run(),
        stamp_kind in 0u8..3,
        pid in 0i64..i64::MAX,
        epoch in 0i16..i16::MAX,
        seq in 0i32..i32::MAX,
    ) {
        let stamp = match stamp_kind {
            0 => ProducerStamp::NONE,
            1 => ProducerStamp::idempotent(pid, epoch, seq),
            _ => ProducerStamp::transactional(pid, epoch, seq),
        };
        let merged = RecordBatch::parse(merge(&run.bytes(), 64 << 20).unwrap().batch).unwrap();
        let stamped = RecordBatch::parse(rewrite_for_produce(&merged, stamp)).unwrap();
        prop_assert_eq!(
            (stamped.producer_id(), stamped.producer_epoch(), stamped.base_sequence()),
            (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence)
        );
        prop_assert_eq!(stamped.is_transactional(), stamp.transactional);
        check_merged(&stamped, &run.expected(), run.codec);
        // A second stamp (a retry after an epoch bump) over the first.
        let again = rewrite_for_produce(&stamped, stamp.advanced(stamped.record_count()));
        RecordBatch::parse(again).unwrap();
    }

    /// Mixed codecs are refused by `compatible` and by `merge`.
    #[test]
    fn mixed_codecs_are_refused(
        run in run(),
        other in codec(),
        which in any::<prop::sample::Index>(),
    ) {
        prop_assume!(other != run.codec);
        let mut run = run;
        let i = which.index(run.batches.len());
        run.batches[i].codec = other;
        let inputs = run.bytes();
        let ok = inputs.windows(2).all(|p| compatible(&p[0], &p[1]));
        prop_assert!(!ok);
        prop_assert!(merge(&inputs, 64 << 20).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Corrupted input (any byte changed, CRC resealed or not, or the batch cut) never panics:
    /// `merge` either refuses it or returns a batch that parses with a valid CRC.
    #[test]
    fn corrupted_input_never_panics(
        run in run(),
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        reseal in any::<bool>(),
        cut in any::<bool>(),
    ) {
        let mut inputs = run.bytes();
        let i = which.index(inputs.len());
        let mut b = inputs[i].to_vec();
        let pos = at.index(b.len());
        if cut {
            b.truncate(pos);
        } else {
            b[pos] = byte;
            if reseal && b.len() > 21 {
                let crc = crc32c::crc32c(&b[21..]);
                b[17..21].copy_from_slice(&crc.to_be_bytes());
            }
        }
        inputs[i] = Bytes::from(b);
        for p in inputs.windows(2) {
            let _ = compatible(&p[0], &p[1]);
            let _ = compatible(&p[1], &p[0]);
        }
        if let Ok(m) = merge(&inputs, 1 << 20) {
            RecordBatch::parse(m.batch).unwrap();
        }
    }
}
