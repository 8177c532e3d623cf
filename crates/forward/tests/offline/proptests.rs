//! Property tests: re-encoded and rewritten batches are valid and hold exactly the input
//! records; the fetch walker never panics and handles every truncation like Java.

#![allow(clippy::unwrap_used)]

use crate::common;

use bytes::Bytes;
use common::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use strait_forward::{
    Attributes, CodecError, Compression, FetchedBatch, FetchedRecords, LogAppendTimePolicy,
    ProducerStamp, RecordBatch, TargetPolicy, TimestampType, reencode, rewrite_for_produce,
};

fn codec() -> impl Strategy<Value = Compression> {
    prop::sample::select(Compression::ALL.to_vec())
}

/// Values that are sometimes compressible, sometimes not.
fn payload(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => vec(any::<u8>(), 0..max),
        1 => (any::<u8>(), 0..max * 3).prop_map(|(b, n)| vec![b; n]),
        1 => (0..max * 2).prop_map(|n| (0..n).map(|i| b"abcdefgh"[i % 8]).collect()),
    ]
}

fn header() -> impl Strategy<Value = (Vec<u8>, Option<Vec<u8>>)> {
    (
        // Few distinct keys so duplicates are common; some are not UTF-8.
        prop_oneof![
            Just(b"dup".to_vec()),
            Just(vec![0xff, 0xfe]),
            vec(any::<u8>(), 0..6)
        ],
        option::of(vec(any::<u8>(), 0..12)),
    )
}

type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// (offset gap before the record, timestamp offset from the batch base, key, value, headers)
type RecordParts = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>, Headers);

fn record() -> impl Strategy<Value = RecordParts> {
    (
        prop_oneof![4 => Just(1i32), 1 => 2..5i32],
        -5_000i64..5_000,
        option::weighted(0.8, payload(24)),
        option::weighted(0.9, payload(1_500)),
        vec(header(), 0..4),
    )
}

#[derive(Clone, Debug)]
struct Source {
    spec: BatchSpec,
}

fn source() -> impl Strategy<Value = Source> {
    (
        0i64..1_000_000_000_000,
        codec(),
        any::<(bool, bool, bool)>(),
        (any::<i64>(), any::<i16>(), any::<i32>()),
        0i64..2_000_000_000_000,
        vec(record(), 1..40),
        0i32..3,
    )
        .prop_map(
            |(
                base_offset,
                codec,
                (lat, txn, horizon),
                (pid, epoch, seq),
                base_ts,
                recs,
                tail_gap,
            )| {
                let mut delta = -1;
                let records: Vec<SpecRecord> = recs
                    .into_iter()
                    .map(|(gap, ts, key, value, headers)| {
                        delta += gap;
                        SpecRecord {
                            offset_delta: delta,
                            timestamp: base_ts + ts,
                            key,
                            value,
                            headers,
                        }
                    })
                    .collect();
                let mut flags = 0;
                if lat {
                    flags |= Attributes::LOG_APPEND_TIME;
                }
                if txn {
                    flags |= Attributes::TRANSACTIONAL;
                }
                if horizon {
                    flags |= Attributes::DELETE_HORIZON;
                }
                let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(-1) + 77;
                Source {
                    spec: BatchSpec {
                        base_offset,
                        flags,
                        codec,
                        producer_id: pid,
                        producer_epoch: epoch,
                        base_sequence: seq,
                        // With a delete horizon the field holds the horizon and the deltas are relative to it.
                        base_timestamp: if horizon {
                            base_ts + 86_400_000
                        } else {
                            records[0].timestamp
                        },
                        max_timestamp: max_ts,
                        last_offset_delta: Some(delta + tail_gap),
                        records,
                        ..BatchSpec::default()
                    },
                }
            },
        )
}

impl Source {
    fn batch(&self) -> RecordBatch {
        RecordBatch::parse(Bytes::from(encode_batch(&self.spec))).unwrap()
    }

    /// Records a consumer of the re-encoded output must see, with their source offsets.
    fn expected(&self, from: i64, keep_append_time: bool) -> Vec<Rec> {
        let lat = self.spec.flags & Attributes::LOG_APPEND_TIME != 0;
        self.spec
            .records
            .iter()
            .map(|r| Rec {
                offset: self.spec.base_offset + i64::from(r.offset_delta),
                timestamp: if lat && keep_append_time {
                    self.spec.max_timestamp
                } else {
                    r.timestamp
                },
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
            })
            .filter(|r| r.offset >= from)
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// (a) Re-encoding yields valid batches holding exactly the surviving input records.
    #[test]
    fn reencode_output_is_valid_and_complete(
        src in source(),
        from_pick in any::<prop::sample::Index>(),
        from_mode in 0u8..4,
        target in option::of(codec()),
        // A record is at most about 4.7 KB, so every record fits alone.
        max in prop_oneof![3 => 6_000usize..9_000, 1 => 9_000usize..60_000],
        keep_lat in any::<bool>(),
        stamp_kind in 0u8..3,
        seq in 0i32..i32::MAX,
    ) {
        let batch = src.batch();
        let picked = &src.spec.records[from_pick.index(src.spec.records.len())];
        let from = match from_mode {
            0 => 0,
            1 => src.spec.base_offset + i64::from(picked.offset_delta),
            2 => src.spec.base_offset + i64::from(picked.offset_delta) - 1,
            _ => src.spec.base_offset + i64::from(i32::MAX),
        };
        let stamp = match stamp_kind {
            0 => ProducerStamp::NONE,
            1 => ProducerStamp::idempotent(42, 3, seq),
            _ => ProducerStamp::transactional(42, 3, seq),
        };
        let policy = TargetPolicy {
            max_message_bytes: max,
            compression: target,
            log_append_time: if keep_lat { LogAppendTimePolicy::KeepAppendTime } else { LogAppendTimePolicy::UseCreateTime },
            ..TargetPolicy::default()
        };
        let out = reencode(&batch, from, stamp, &policy).unwrap();
        let want = src.expected(from, keep_lat);
        let mut got = Vec::new();
        let mut next_stamp = stamp;
        for o in &out {
            let b = RecordBatch::parse(o.batch().as_bytes().clone()).unwrap();
            prop_assert!(b.size_in_bytes() <= max);
            prop_assert!(b.record_count() > 0);
            prop_assert_eq!(i64::from(b.last_offset_delta()) + 1, i64::from(b.record_count()));
            prop_assert_eq!(b.base_offset(), 0);
            prop_assert_eq!(b.partition_leader_epoch(), -1);
            prop_assert_eq!(b.compression(), target.unwrap_or(src.spec.codec));
            prop_assert_eq!(b.attributes().timestamp_type(), TimestampType::CreateTime);
            prop_assert!(!b.is_control());
            prop_assert_eq!(b.delete_horizon(), None);
            prop_assert_eq!(b.is_transactional(), stamp.transactional);
            prop_assert_eq!((b.producer_id(), b.producer_epoch(), b.base_sequence()),
                (next_stamp.producer_id, next_stamp.producer_epoch, next_stamp.base_sequence));
            next_stamp = next_stamp.advanced(b.record_count());
            let recs = records_of(&b);
            prop_assert_eq!(recs.len(), o.source_offsets().len());
            prop_assert_eq!(b.base_timestamp(), recs[0].timestamp);
            prop_assert_eq!(b.max_timestamp(), recs.iter().map(|r| r.timestamp).max().unwrap().max(-1));
            for (i, (mut r, &src_offset)) in recs.into_iter().zip(o.source_offsets()).enumerate() {
                prop_assert_eq!(r.offset, i as i64);
                r.offset = src_offset;
                got.push(r);
            }
        }
        prop_assert_eq!(got, want);
    }

    /// (a) + (c) The pass-through rewrite keeps bytes 61.. and every record, and parses.
    #[test]
    fn rewrite_keeps_records_byte_for_byte(
        src in source(),
        stamp in (any::<i64>(), any::<i16>(), any::<i32>(), any::<bool>()),
    ) {
        let batch = src.batch();
        let stamp = ProducerStamp {
            producer_id: stamp.0,
            producer_epoch: stamp.1,
            base_sequence: stamp.2,
            transactional: stamp.3,
        };
        let out = rewrite_for_produce(&batch, stamp);
        prop_assert_eq!(&out[61..], &batch.as_bytes()[61..]);
        prop_assert_eq!(&out[8..12], &batch.as_bytes()[8..12]);
        let b = RecordBatch::parse(out).unwrap();
        prop_assert_eq!(b.base_offset(), 0);
        prop_assert_eq!((b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence));
        prop_assert_eq!(b.is_transactional(), stamp.transactional);
        prop_assert_eq!(b.attributes().timestamp_type(), TimestampType::CreateTime);
        prop_assert_eq!(b.delete_horizon(), None);
        prop_assert_eq!(b.compression(), batch.compression());
        // Record timestamps become the stored create times; everything else is identical.
        let got = records_of(&b);
        let want = src.expected(0, false);
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(g.offset + src.spec.base_offset, w.offset);
            prop_assert_eq!((&g.key, &g.value, &g.headers, g.timestamp), (&w.key, &w.value, &w.headers, w.timestamp));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// (b) Every truncation of a valid multi-batch buffer yields exactly the complete prefix
    /// batches, no error, and the right tail size.
    #[test]
    fn walker_truncations_yield_the_complete_prefix(
        sources in vec(source(), 1..5),
        random_cuts in vec(any::<prop::sample::Index>(), 32),
    ) {
        let mut data = Vec::new();
        let mut ends = Vec::new();
        for s in &sources {
            data.extend(encode_batch(&s.spec));
            ends.push(data.len());
        }
        let data = Bytes::from(data);
        let full: Vec<FetchedBatch> = FetchedRecords::new(data.clone()).map(Result::unwrap).collect();
        prop_assert_eq!(full.len(), sources.len());
        // Every cut near a boundary or a header threshold, plus random ones.
        let mut cuts: Vec<usize> = random_cuts.iter().map(|i| i.index(data.len() + 1)).collect();
        let mut starts = vec![0];
        starts.extend(&ends);
        for &s in &starts {
            for d in [0usize, 1, 2, 11, 12, 13, 16, 17, 18, 60, 61, 62] {
                cuts.push(s + d);
            }
            cuts.push(s.saturating_sub(1));
        }
        for cut in cuts.into_iter().filter(|&c| c <= data.len()) {
            let mut walker = FetchedRecords::new(data.slice(..cut));
            let got: Vec<FetchedBatch> = walker.by_ref().map(Result::unwrap).collect();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            prop_assert_eq!(&got[..], &full[..complete], "cut {}", cut);
            let consumed = if complete == 0 { 0 } else { ends[complete - 1] };
            prop_assert_eq!(walker.truncated_tail_bytes(), cut - consumed);
        }
    }
}

/// Walks anything, decoding and re-encoding what parses; must never panic.
fn chew(data: Vec<u8>) {
    let len = data.len();
    let mut walker = FetchedRecords::new(Bytes::from(data));
    for entry in walker.by_ref() {
        let Ok(entry) = entry else { break };
        let policy = TargetPolicy {
            max_decompressed_bytes: 1 << 20,
            ..TargetPolicy::default()
        };
        let out = match &entry {
            FetchedBatch::V2(b) => {
                let _ = b.control_record();
                if let Ok(d) = b.decode_records(1 << 20) {
                    for r in d.iter() {
                        let Ok(r) = r else { break };
                        let _ = r.headers().count();
                    }
                }
                let _ = rewrite_for_produce(b, ProducerStamp::NONE);
                reencode(b, 0, ProducerStamp::NONE, &policy)
            }
            FetchedBatch::Legacy(l) => l.reencode(0, ProducerStamp::NONE, &policy),
        };
        if let Ok(out) = out {
            for o in out {
                RecordBatch::parse(o.batch().as_bytes().clone()).unwrap();
            }
        }
    }
    assert_eq!(walker.position() + walker.truncated_tail_bytes(), len);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// (b) Arbitrary bytes never panic the walker.
    #[test]
    fn walker_never_panics_on_arbitrary_bytes(data in vec(any::<u8>(), 0..300)) {
        chew(data);
    }

    /// Valid buffers with a few bytes changed (and the CRC sometimes repaired, so the corruption
    /// reaches the record decoder) never panic either.
    #[test]
    fn walker_never_panics_on_mutated_batches(
        src in source(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        reseal in any::<bool>(),
    ) {
        let mut data = encode_batch(&src.spec);
        for (at, byte) in flips {
            let i = at.index(data.len());
            data[i] = byte;
        }
        if reseal && data.len() >= 61 {
            let crc = crc32c::crc32c(&data[21..]);
            data[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        chew(data);
    }
}

#[test]
fn reencode_reports_records_that_cannot_fit() {
    let spec = BatchSpec {
        records: vec![SpecRecord {
            offset_delta: 0,
            timestamp: 0,
            key: None,
            value: Some(vec![7; 5_000]),
            headers: vec![],
        }],
        ..BatchSpec::default()
    };
    let batch = RecordBatch::parse(Bytes::from(encode_batch(&spec))).unwrap();
    let policy = TargetPolicy {
        max_message_bytes: 1_000,
        ..TargetPolicy::default()
    };
    let err = reencode(&batch, 0, ProducerStamp::NONE, &policy).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::RecordTooLarge {
                offset: 0,
                limit: 1_000,
                ..
            }
        ),
        "{err}"
    );
    // Compressed, the same record fits.
    let policy = TargetPolicy {
        compression: Some(Compression::Lz4),
        ..policy
    };
    assert_eq!(
        reencode(&batch, 0, ProducerStamp::NONE, &policy)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn reencode_of_fully_filtered_batch_is_empty() {
    let batch = RecordBatch::parse(Bytes::from(simple_batch(10, 3, Compression::Gzip))).unwrap();
    let out = reencode(&batch, 13, ProducerStamp::NONE, &TargetPolicy::default()).unwrap();
    assert!(out.is_empty());
}

#[test]
fn reencode_rejects_corrupt_records_with_the_batch_offset() {
    // recordsCount says 4 but the section holds 3 records.
    let mut b = simple_batch(10, 3, Compression::None);
    b[57..61].copy_from_slice(&4i32.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let batch = RecordBatch::parse(Bytes::from(b)).unwrap();
    let err = reencode(&batch, 0, ProducerStamp::NONE, &TargetPolicy::default()).unwrap_err();
    assert!(
        matches!(&err, CodecError::InBatch { base_offset: 10, source } if matches!(**source, CodecError::RecordCountMismatch { declared: 4, found: 3 })),
        "{err}"
    );
}

#[test]
fn reencode_decompression_is_capped() {
    let spec = BatchSpec {
        codec: Compression::Zstd,
        records: vec![SpecRecord {
            offset_delta: 0,
            timestamp: 0,
            key: None,
            value: Some(vec![0; 4 << 20]),
            headers: vec![],
        }],
        ..BatchSpec::default()
    };
    let batch = RecordBatch::parse(Bytes::from(encode_batch(&spec))).unwrap();
    assert!(batch.size_in_bytes() < 1 << 12);
    let policy = TargetPolicy {
        max_decompressed_bytes: 1 << 20,
        ..TargetPolicy::default()
    };
    let err = reencode(&batch, 0, ProducerStamp::NONE, &policy).unwrap_err();
    assert!(
        matches!(&err, CodecError::InBatch { source, .. } if matches!(**source, CodecError::DecompressedTooLarge { .. })),
        "{err}"
    );
}
