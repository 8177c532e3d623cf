//! The pass-through path: turn a fetched batch into a producible one by rewriting header fields
//! and recomputing the CRC, without touching (or decompressing) the records.
//!
//! [`rewrite_for_produce`] sets:
//!
//! * baseOffset = 0 (the broker rejects anything else from a client) and partitionLeaderEpoch = -1
//!   (ignored by the broker; what the Java producer sends). Both lie outside the CRC.
//! * producerId / producerEpoch / baseSequence from a [`ProducerStamp`]: the mirror's own
//!   producer identity, or -1/-1/-1. Forwarding the source's identity collides with the
//!   target's own producers and breaks on any gap, so it is never kept.
//! * attributes: transactional (bit 4) set only for [`ProducerStamp::transactional`], delete
//!   horizon (bit 6) and LogAppendTime (bit 3) cleared; codec and the other bits kept.
//! * the CRC-32C over bytes 21..end.
//!
//! Bytes 61.. (the records section) are copied verbatim with one `memcpy`; the CRC is updated
//! arithmetically for the 40 changed header bytes, so the records are not read a second time.
//!
//! **LogAppendTime.** Clearing bit 3 makes the target read every record's timestamp as its
//! stored create time (baseTimestamp + timestampDelta) instead of the source broker's append time
//! (maxTimestamp). Kafka leaves the bit set only at the cost of an `INVALID_TIMESTAMP` rejection on
//! LogAppendTime targets and inconsistent timestamps on CreateTime targets, so it is always cleared
//! here. To keep the source append time instead, re-encode with
//! [`LogAppendTimePolicy::KeepAppendTime`]: [`needs_reencode`] then answers
//! [`ReencodeReason::TimestampFix`] and [`crate::reencode()`] writes maxTimestamp into every record.
//!
//! **Delete horizon.** Clearing bit 6 leaves every record's timestamp unchanged: the log cleaner
//! rebuilt the deltas relative to the horizon it stored in baseTimestamp.
//!
//! maxTimestamp is left as it is; a CreateTime target recomputes it from the records anyway.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{
    ATTRIBUTES, Attributes, BASE_OFFSET, BASE_SEQUENCE, CRC, PARTITION_LEADER_EPOCH,
    PRODUCER_EPOCH, PRODUCER_ID, RECORD_BATCH_OVERHEAD, RecordBatch, TimestampType,
};
use crate::checksum::updated_crc;
use crate::compression::Compression;

/// The producer identity stamped on every batch sent to the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerStamp {
    /// The target producer id, or -1.
    pub producer_id: i64,
    /// The target producer epoch, or -1.
    pub producer_epoch: i16,
    /// The sequence of the batch's first record, or -1. Must be >= 0 when `producer_id` >= 0.
    pub base_sequence: i32,
    /// Whether the batch is produced inside the mirror's own transaction (sets attribute bit 4).
    pub transactional: bool,
}

impl ProducerStamp {
    /// No producer identity (-1/-1/-1): a plain, non-idempotent produce.
    pub const NONE: ProducerStamp = ProducerStamp {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        transactional: false,
    };

    /// An idempotent producer's identity (from InitProducerId) and the next sequence of the
    /// target partition.
    pub fn idempotent(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
            transactional: false,
        }
    }

    /// Like [`idempotent`](Self::idempotent), for a batch inside the mirror's own transaction.
    pub fn transactional(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        ProducerStamp {
            transactional: true,
            ..Self::idempotent(producer_id, producer_epoch, base_sequence)
        }
    }

    /// The stamp for the batch that follows one of `record_count` records: the sequence advances
    /// by the record count and wraps from `i32::MAX` to 0, as Kafka's does. A sequence of -1
    /// stays -1.
    pub fn advanced(self, record_count: i32) -> Self {
        if self.base_sequence < 0 {
            return self;
        }
        let next = (i64::from(self.base_sequence) + i64::from(record_count.max(0)))
            % (i64::from(i32::MAX) + 1);
        ProducerStamp {
            base_sequence: next as i32,
            ..self
        }
    }

    fn attributes(self, source: Attributes) -> i16 {
        source
            .with(Attributes::TRANSACTIONAL, self.transactional)
            .with(Attributes::DELETE_HORIZON, false)
            .with(Attributes::LOG_APPEND_TIME, false)
            .raw()
    }
}

/// Rewrites `batch` for a Produce request (see the module docs); the records bytes are copied
/// untouched and nothing is decompressed.
///
/// The caller must already have dropped control batches, batches with no records and batches
/// that [`needs_reencode`]: the target rejects those however their header looks.
pub fn rewrite_for_produce(batch: &RecordBatch, stamp: ProducerStamp) -> Bytes {
    let mut out = BytesMut::with_capacity(batch.size_in_bytes());
    rewrite_for_produce_into(batch, stamp, &mut out);
    out.freeze()
}

/// [`rewrite_for_produce`] appending to a caller-provided buffer (reuse it to avoid allocating
/// per batch).
pub fn rewrite_for_produce_into(batch: &RecordBatch, stamp: ProducerStamp, out: &mut BytesMut) {
    let src = batch.as_bytes();
    let mut old = [0u8; RECORD_BATCH_OVERHEAD];
    old.copy_from_slice(&src[..RECORD_BATCH_OVERHEAD]);
    let records = &src[RECORD_BATCH_OVERHEAD..];
    let header = stamped_header(&old, batch.attributes(), batch.crc(), stamp, records.len());
    out.reserve(src.len());
    out.put_slice(&header);
    out.put_slice(records);
}

/// Stamps, in place, a batch that this crate validated or built itself: the same header changes
/// as [`rewrite_for_produce`], without copying or re-reading the records. The stored CRC is
/// trusted (it was verified when the batch was parsed, and every stamp since updated it), so a
/// re-stamp costs the 61 header bytes, not a pass over the batch.
// Only the pipeline (and tests) re-stamp batches.
#[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
pub(crate) fn stamp_in_place(buf: &mut [u8], stamp: ProducerStamp) -> crate::Result<()> {
    if buf.len() < RECORD_BATCH_OVERHEAD {
        return Err(crate::CodecError::BatchTooShort { len: buf.len() });
    }
    let mut old = [0u8; RECORD_BATCH_OVERHEAD];
    old.copy_from_slice(&buf[..RECORD_BATCH_OVERHEAD]);
    let attributes =
        Attributes::from_raw(i16::from_be_bytes([old[ATTRIBUTES], old[ATTRIBUTES + 1]]))?;
    let crc = u32::from_be_bytes([old[CRC], old[CRC + 1], old[CRC + 2], old[CRC + 3]]);
    let header = stamped_header(
        &old,
        attributes,
        crc,
        stamp,
        buf.len() - RECORD_BATCH_OVERHEAD,
    );
    buf[..RECORD_BATCH_OVERHEAD].copy_from_slice(&header);
    Ok(())
}

/// The rewritten header of a batch whose header is `old` and whose records are `records_len`
/// bytes long.
fn stamped_header(
    old: &[u8; RECORD_BATCH_OVERHEAD],
    attributes: Attributes,
    old_crc: u32,
    stamp: ProducerStamp,
    records_len: usize,
) -> [u8; RECORD_BATCH_OVERHEAD] {
    let mut header = *old;
    header[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0i64.to_be_bytes());
    header[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&(-1i32).to_be_bytes());
    header[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&stamp.attributes(attributes).to_be_bytes());
    header[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&stamp.producer_id.to_be_bytes());
    header[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&stamp.producer_epoch.to_be_bytes());
    header[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&stamp.base_sequence.to_be_bytes());
    // The old CRC is known to be right, so it is updated for the header change instead of being
    // recomputed over the records.
    let crc = updated_crc(
        old_crc,
        &old[ATTRIBUTES..RECORD_BATCH_OVERHEAD],
        &header[ATTRIBUTES..],
        records_len,
    );
    header[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    header
}

/// What to do with LogAppendTime source batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LogAppendTimePolicy {
    /// Clear the LogAppendTime bit on the pass-through path: the target shows each record's
    /// original create time. No re-encoding.
    #[default]
    UseCreateTime,
    /// Re-encode LogAppendTime batches so every record carries the source append time
    /// (maxTimestamp) as its create time.
    KeepAppendTime,
}

/// The target-side settings that decide between pass-through and re-encoding, and how to
/// re-encode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPolicy {
    /// The target topic's `max.message.bytes`; a batch (including its 12-byte log overhead) must
    /// not be larger. Kafka's default is 1048588.
    pub max_message_bytes: usize,
    /// Codec to produce with; `None` keeps each batch's source codec (the cheap choice: a
    /// `compression.type=producer` target stores the bytes as they are).
    pub compression: Option<Compression>,
    /// Compression level for re-encoded gzip/zstd batches; `None` uses Java's defaults.
    pub compression_level: Option<i32>,
    /// What to do with LogAppendTime batches.
    pub log_append_time: LogAppendTimePolicy,
    /// Cap on a batch's decompressed records section when re-encoding (zip-bomb guard).
    pub max_decompressed_bytes: usize,
}

impl TargetPolicy {
    /// Kafka's default `max.message.bytes` (1 MiB + 12).
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;
    /// Default decompression cap: 64 MiB.
    pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;
}

impl Default for TargetPolicy {
    fn default() -> Self {
        TargetPolicy {
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            compression: None,
            compression_level: None,
            log_append_time: LogAppendTimePolicy::default(),
            max_decompressed_bytes: Self::DEFAULT_MAX_DECOMPRESSED_BYTES,
        }
    }
}

/// Why a batch cannot take the pass-through path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReencodeReason {
    /// The batch starts before the fetch offset; re-encoding drops the records below it
    /// instead of duplicating them on the target.
    FetchOffsetInsideBatch,
    /// Compaction left offset gaps (lastOffsetDelta + 1 != recordsCount); the target rejects the
    /// batch until its offset deltas are renumbered.
    OffsetGaps,
    /// A magic 0/1 message set; Produce only accepts magic 2.
    LegacyMagic,
    /// The batch is larger than the target's `max.message.bytes`; it must be split.
    TooLarge,
    /// A LogAppendTime batch whose append time must be kept per record
    /// ([`LogAppendTimePolicy::KeepAppendTime`]).
    TimestampFix,
    /// The policy asks for a different codec than the batch has.
    CodecChange,
}

impl ReencodeReason {
    /// A stable snake_case name for metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ReencodeReason::FetchOffsetInsideBatch => "fetch_offset_inside_batch",
            ReencodeReason::OffsetGaps => "offset_gaps",
            ReencodeReason::LegacyMagic => "legacy_magic",
            ReencodeReason::TooLarge => "too_large",
            ReencodeReason::TimestampFix => "timestamp_fix",
            ReencodeReason::CodecChange => "codec_change",
        }
    }
}

/// Decides whether `batch`, fetched at `fetch_offset`, can be forwarded with
/// [`rewrite_for_produce`] (`None`) or must be re-encoded (the first applicable reason).
///
/// Re-encoding fixes every listed problem at once, so one reason is enough. Control batches and
/// batches with no records are not considered here: drop them first
/// ([`drop_reason`]).
pub fn needs_reencode(
    batch: &RecordBatch,
    fetch_offset: i64,
    policy: &TargetPolicy,
) -> Option<ReencodeReason> {
    if batch.base_offset() < fetch_offset {
        Some(ReencodeReason::FetchOffsetInsideBatch)
    } else if batch.has_offset_gaps() {
        Some(ReencodeReason::OffsetGaps)
    } else if policy.log_append_time == LogAppendTimePolicy::KeepAppendTime
        && batch.attributes().timestamp_type() == TimestampType::LogAppendTime
    {
        Some(ReencodeReason::TimestampFix)
    } else if policy.compression.is_some_and(|c| c != batch.compression()) {
        Some(ReencodeReason::CodecChange)
    } else if batch.size_in_bytes() > policy.max_message_bytes {
        Some(ReencodeReason::TooLarge)
    } else {
        None
    }
}

/// Why a fetched batch is not forwarded at all (its offsets are still consumed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// A transaction marker; clients may not produce these.
    Control,
    /// The log cleaner removed every record (recordsCount 0); kept on the source only for
    /// producer state.
    NoRecords,
}

impl DropReason {
    /// A stable snake_case name for metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Control => "control",
            DropReason::NoRecords => "no_records",
        }
    }
}

/// Whether `batch` must be dropped regardless of policy (aborted transactions are decided by
/// [`crate::txn::AbortedTransactionFilter`]).
pub fn drop_reason(batch: &RecordBatch) -> Option<DropReason> {
    if batch.is_control() {
        Some(DropReason::Control)
    } else if batch.has_no_records() {
        Some(DropReason::NoRecords)
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::{LOG_OVERHEAD, MAGIC};
    use crate::checksum::batch_crc;

    /// A header-valid batch with an opaque 100-byte "records" payload (rewrite never reads it).
    fn raw_batch(attributes: i16, pid: i64, epoch: i16, seq: i32) -> RecordBatch {
        let mut b = vec![0u8; RECORD_BATCH_OVERHEAD];
        b.extend((0..100u8).map(|i| i.wrapping_mul(37)));
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[..8].copy_from_slice(&1234i64.to_be_bytes());
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[12..16].copy_from_slice(&17i32.to_be_bytes());
        b[MAGIC] = 2;
        b[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        b[23..27].copy_from_slice(&4i32.to_be_bytes());
        b[27..35].copy_from_slice(&500i64.to_be_bytes());
        b[35..43].copy_from_slice(&900i64.to_be_bytes());
        b[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&pid.to_be_bytes());
        b[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&epoch.to_be_bytes());
        b[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&seq.to_be_bytes());
        b[57..61].copy_from_slice(&5i32.to_be_bytes());
        let crc = batch_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        RecordBatch::parse(Bytes::from(b)).unwrap()
    }

    #[test]
    fn stamping_in_place_equals_rewriting() {
        for attrs in [0i16, 0x58 | 1, 0x0100 | 0x10 | 4] {
            let src = raw_batch(attrs, 99, 7, 1000);
            for stamp in [
                ProducerStamp::idempotent(5, 1, 0),
                ProducerStamp::transactional(6, 2, 77),
                ProducerStamp::NONE,
            ] {
                let want = rewrite_for_produce(&src, stamp);
                let mut buf = src.as_bytes().to_vec();
                stamp_in_place(&mut buf, stamp).unwrap();
                assert_eq!(buf, want.to_vec());
                // And a second stamp over the first keeps the CRC right.
                stamp_in_place(&mut buf, ProducerStamp::idempotent(8, 0, 12)).unwrap();
                RecordBatch::parse(Bytes::from(buf)).unwrap();
            }
        }
        assert!(stamp_in_place(&mut [0u8; 10], ProducerStamp::NONE).is_err());
    }

    #[test]
    fn rewrite_sets_exactly_the_documented_fields() {
        // gzip + LogAppendTime + transactional + delete horizon + an unused high bit
        let src = raw_batch(0x0100 | 0x58 | 1, 99, 7, 1000);
        let out = RecordBatch::parse(rewrite_for_produce(
            &src,
            ProducerStamp::idempotent(5, 2, 42),
        ))
        .unwrap();
        assert_eq!(out.base_offset(), 0);
        assert_eq!(out.partition_leader_epoch(), -1);
        assert_eq!(
            (out.producer_id(), out.producer_epoch(), out.base_sequence()),
            (5, 2, 42)
        );
        assert_eq!(out.attributes().raw(), 0x0100 | 1);
        assert_eq!(out.compression(), Compression::Gzip);
        // Untouched header fields.
        assert_eq!(out.last_offset_delta(), 4);
        assert_eq!((out.base_timestamp(), out.max_timestamp()), (500, 900));
        assert_eq!(out.record_count(), 5);
        assert_eq!(out.batch_length(), src.batch_length());
        assert_eq!(&out.as_bytes()[61..], &src.as_bytes()[61..]);
    }

    #[test]
    fn transactional_stamp_sets_bit_4() {
        let src = raw_batch(0, -1, -1, -1);
        let out = RecordBatch::parse(rewrite_for_produce(
            &src,
            ProducerStamp::transactional(8, 0, 0),
        ))
        .unwrap();
        assert!(out.is_transactional());
        assert_eq!(out.producer_id(), 8);
    }

    #[test]
    fn offset_and_leader_epoch_alone_do_not_change_the_crc() {
        let src = raw_batch(3, -1, -1, -1);
        let out = rewrite_for_produce(&src, ProducerStamp::NONE);
        assert_ne!(&out[..8], &src.as_bytes()[..8]);
        assert_eq!(
            &out[8..],
            &{
                let mut b = src.as_bytes()[8..].to_vec();
                b[4..8].copy_from_slice(&(-1i32).to_be_bytes());
                b
            }[..]
        );
        assert_eq!(RecordBatch::parse(out).unwrap().crc(), src.crc());
    }

    #[test]
    fn rewrite_into_appends() {
        let src = raw_batch(0, -1, -1, -1);
        let mut buf = BytesMut::from(&b"prefix"[..]);
        rewrite_for_produce_into(&src, ProducerStamp::NONE, &mut buf);
        assert_eq!(&buf[..6], b"prefix");
        assert!(RecordBatch::parse(buf.freeze().slice(6..)).is_ok());
    }

    #[test]
    fn sequence_advances_and_wraps_like_kafka() {
        let s = ProducerStamp::idempotent(1, 0, i32::MAX - 1);
        assert_eq!(s.advanced(1).base_sequence, i32::MAX);
        assert_eq!(s.advanced(2).base_sequence, 0);
        assert_eq!(s.advanced(5).base_sequence, 3);
        assert_eq!(
            ProducerStamp::idempotent(1, 0, 10)
                .advanced(7)
                .base_sequence,
            17
        );
        assert_eq!(ProducerStamp::NONE.advanced(7), ProducerStamp::NONE);
    }

    #[test]
    fn needs_reencode_reasons() {
        let p = TargetPolicy::default();
        let plain = raw_batch(0, -1, -1, -1); // base 1234, lastOffsetDelta 4, 5 records
        assert_eq!(needs_reencode(&plain, 1234, &p), None);
        assert_eq!(
            needs_reencode(&plain, 1235, &p),
            Some(ReencodeReason::FetchOffsetInsideBatch)
        );
        let lat = raw_batch(0x08, -1, -1, -1);
        assert_eq!(needs_reencode(&lat, 0, &p), None);
        let keep = TargetPolicy {
            log_append_time: LogAppendTimePolicy::KeepAppendTime,
            ..p.clone()
        };
        assert_eq!(
            needs_reencode(&lat, 0, &keep),
            Some(ReencodeReason::TimestampFix)
        );
        assert_eq!(needs_reencode(&plain, 0, &keep), None);
        let zstd = TargetPolicy {
            compression: Some(Compression::Zstd),
            ..p.clone()
        };
        assert_eq!(
            needs_reencode(&plain, 0, &zstd),
            Some(ReencodeReason::CodecChange)
        );
        let none = TargetPolicy {
            compression: Some(Compression::None),
            ..p.clone()
        };
        assert_eq!(needs_reencode(&plain, 0, &none), None);
        // Exactly at the limit passes; one byte over does not.
        let at = TargetPolicy {
            max_message_bytes: plain.size_in_bytes(),
            ..p.clone()
        };
        assert_eq!(needs_reencode(&plain, 0, &at), None);
        let over = TargetPolicy {
            max_message_bytes: plain.size_in_bytes() - 1,
            ..p
        };
        assert_eq!(
            needs_reencode(&plain, 0, &over),
            Some(ReencodeReason::TooLarge)
        );
    }

    #[test]
    fn labels_are_stable() {
        let all = [
            (
                ReencodeReason::FetchOffsetInsideBatch,
                "fetch_offset_inside_batch",
            ),
            (ReencodeReason::OffsetGaps, "offset_gaps"),
            (ReencodeReason::LegacyMagic, "legacy_magic"),
            (ReencodeReason::TooLarge, "too_large"),
            (ReencodeReason::TimestampFix, "timestamp_fix"),
            (ReencodeReason::CodecChange, "codec_change"),
        ];
        for (r, s) in all {
            assert_eq!(r.as_str(), s);
        }
        assert_eq!(DropReason::Control.as_str(), "control");
        assert_eq!(DropReason::NoRecords.as_str(), "no_records");
    }

    #[test]
    fn drop_reasons() {
        assert_eq!(
            drop_reason(&raw_batch(0x20, 1, 0, -1)),
            Some(DropReason::Control)
        );
        assert_eq!(drop_reason(&raw_batch(0, -1, -1, -1)), None);
    }
}
