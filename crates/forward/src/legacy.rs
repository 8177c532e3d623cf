//! Legacy message sets (magic 0 and 1, Kafka < 0.11) and their conversion to RecordBatch v2.
//!
//! A fetch can still return them from old segments. Produce accepts only magic 2, so they are
//! always re-encoded ([`ReencodeReason::LegacyMagic`](crate::ReencodeReason::LegacyMagic)).
//!
//! Message layout after the 12-byte log overhead (offset int64, size int32): crc uint32
//! (CRC-32/IEEE of magic..end), magic int8, attributes int8 (codec bits 0-2, LogAppendTime bit 3
//! in v1), timestamp int64 (v1 only), key (int32 length, -1 = null), value (int32 length,
//! -1 = null). A compressed message is a *wrapper*: its value is a compressed message set of
//! inner messages. In a v1 wrapper the inner offsets are relative and the wrapper's offset is
//! the absolute offset of the last inner message; in v0 the inner offsets are absolute.
//!
//! Not supported: LZ4 inside magic 0 wrappers. Kafka before 0.10 wrote those with a broken LZ4
//! frame-header checksum that `lz4_flex` rightly rejects; such entries fail with a decompression
//! error.

use std::ops::Range;

use bytes::Bytes;

use crate::batch::{LOG_OVERHEAD, TimestampType};
use crate::compression::{self, Compression};
use crate::error::{CodecError, Result};
use crate::records::{NO_HEADERS, RecordParts};
use crate::reencode::{Allowance, PendingRecord, ReencodedBatch, build_batches_within};
use crate::rewrite::{LogAppendTimePolicy, ProducerStamp, TargetPolicy};

/// Legacy codec bits (zstd, id 4, never existed before magic 2).
const CODEC_MASK: i8 = 0x07;
const LOG_APPEND_TIME: i8 = 0x08;

/// A validated magic 0/1 message (one entry of a legacy message set; possibly a compressed
/// wrapper around many inner messages). Cloning is a reference count increment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyBatch {
    bytes: Bytes,
    magic: i8,
    attributes: i8,
    compression: Compression,
    timestamp: Option<i64>,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
}

/// A message parsed from the bytes after its offset and size fields.
struct Message<'a> {
    magic: i8,
    attributes: i8,
    timestamp: Option<i64>,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
    body: &'a [u8],
}

impl Message<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.key.clone().map(|r| &self.body[r])
    }

    fn value(&self) -> Option<&[u8]> {
        self.value.clone().map(|r| &self.body[r])
    }
}

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses one message (crc onwards) occupying all of `body`; checks the CRC-32.
fn parse_message(body: &[u8], offset: i64) -> Result<Message<'_>> {
    let malformed = |reason| CodecError::MalformedLegacy { offset, reason };
    let stored = be_i32(body, 0).ok_or(malformed("the message is shorter than its header"))? as u32;
    let magic = *body
        .get(4)
        .ok_or(malformed("the message is shorter than its header"))? as i8;
    let attributes = *body
        .get(5)
        .ok_or(malformed("the message is shorter than its header"))? as i8;
    let mut pos = 6;
    let timestamp = match magic {
        0 => None,
        1 => {
            let ts =
                be_i64(body, pos).ok_or(malformed("the message is shorter than its header"))?;
            pos += 8;
            Some(ts)
        }
        _ => return Err(malformed("magic is not 0 or 1")),
    };
    let mut field = |what| -> Result<Option<Range<usize>>> {
        let len = be_i32(body, pos).ok_or(malformed(what))?;
        pos += 4;
        if len < 0 {
            return Ok(None);
        }
        let end = pos
            .checked_add(len as usize)
            .filter(|&e| e <= body.len())
            .ok_or(malformed(what))?;
        let range = pos..end;
        pos = end;
        Ok(Some(range))
    };
    let key = field("the key runs past the end of the message")?;
    let value = field("the value runs past the end of the message")?;
    if pos != body.len() {
        return Err(malformed(
            "the message size does not match its key and value",
        ));
    }
    let computed = crc32_ieee(&body[4..]);
    if computed != stored {
        return Err(CodecError::LegacyCrcMismatch {
            offset,
            stored,
            computed,
        });
    }
    Ok(Message {
        magic,
        attributes,
        timestamp,
        key,
        value,
        body,
    })
}

fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    crc.sum()
}

fn legacy_codec(attributes: i8) -> Result<Compression> {
    match (attributes & CODEC_MASK) as u8 {
        id @ 0..=3 => Compression::from_id(id),
        id => Err(CodecError::UnknownCompression { id }),
    }
}

impl LegacyBatch {
    /// Validates one complete legacy entry (log overhead included): sizes, magic 0/1, codec, CRC.
    pub(crate) fn parse(bytes: Bytes) -> Result<Self> {
        let offset = be_i64(&bytes, 0).unwrap_or(-1);
        let size = be_i32(&bytes, 8).ok_or(CodecError::MalformedLegacy {
            offset,
            reason: "the entry is shorter than its 12-byte log overhead",
        })?;
        if usize::try_from(size).ok() != Some(bytes.len() - LOG_OVERHEAD) {
            return Err(CodecError::MalformedLegacy {
                offset,
                reason: "the size field does not match the entry",
            });
        }
        let m = parse_message(&bytes[LOG_OVERHEAD..], offset)?;
        let compression = legacy_codec(m.attributes)?;
        let shift =
            |r: Option<Range<usize>>| r.map(|r| r.start + LOG_OVERHEAD..r.end + LOG_OVERHEAD);
        Ok(LegacyBatch {
            magic: m.magic,
            attributes: m.attributes,
            compression,
            timestamp: m.timestamp,
            key: shift(m.key),
            value: shift(m.value),
            bytes,
        })
    }

    /// The whole entry, log overhead included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Size of the entry, log overhead included.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// 0 or 1.
    pub fn magic(&self) -> i8 {
        self.magic
    }

    /// The offset field: for a wrapper, the offset of its last inner message.
    pub fn last_offset(&self) -> i64 {
        be_i64(&self.bytes, 0).unwrap_or(-1)
    }

    /// The codec of a wrapper, or [`Compression::None`] for a plain message.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The timestamp type (magic 1 only; magic 0 messages have no timestamps).
    pub fn timestamp_type(&self) -> Option<TimestampType> {
        self.timestamp.map(|_| {
            if self.attributes & LOG_APPEND_TIME != 0 {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            }
        })
    }

    /// The message timestamp (magic 1 only).
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The key of a plain message.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.clone().map(|r| &self.bytes[r])
    }

    /// The value of a plain message, or the compressed inner message set of a wrapper.
    pub fn value(&self) -> Option<&[u8]> {
        self.value.clone().map(|r| &self.bytes[r])
    }

    /// Converts the entry's messages with offset `>= from_offset` to v2 batches. Same output
    /// contract as [`reencode`](crate::reencode::reencode): records keep their keys, values and
    /// timestamps (magic 0 has none: -1), get no headers, and the source offsets are reported per
    /// batch. The codec is the wrapper's unless the policy names one.
    pub fn reencode(
        &self,
        from_offset: i64,
        stamp: ProducerStamp,
        policy: &TargetPolicy,
    ) -> Result<Vec<ReencodedBatch>> {
        self.reencode_within(from_offset, stamp, policy, &mut Allowance::unlimited())
    }

    /// [`reencode`](Self::reencode) within `allowance`, as
    /// [`reencode_within`](crate::reencode::reencode_within) does for v2 batches: the
    /// decompressed wrapper, one entry per inner message (at most one per 26 bytes of it) and
    /// the outputs are accounted before they are allocated.
    pub fn reencode_within(
        &self,
        from_offset: i64,
        stamp: ProducerStamp,
        policy: &TargetPolicy,
        allowance: &mut Allowance,
    ) -> Result<Vec<ReencodedBatch>> {
        let codec = policy.compression.unwrap_or(self.compression);
        let offset = self.last_offset();
        if self.compression == Compression::None {
            // A plain message: its timestamp field is its only timestamp, whatever its type.
            let records = [PendingRecord {
                source_offset: offset,
                timestamp: self.timestamp.unwrap_or(-1),
                parts: parts(self.key(), self.value()),
            }];
            let keep = if offset >= from_offset {
                &records[..]
            } else {
                &[]
            };
            return build_batches_within(keep, codec, stamp, policy, allowance)
                .map_err(|e| e.in_batch(offset));
        }

        let payload = self
            .value
            .clone()
            .map(|r| self.bytes.slice(r))
            .unwrap_or_default();
        let payload_len = payload.len();
        let cap = policy
            .max_decompressed_bytes
            .min(compression::decompress_room(allowance.room()));
        let inner_set = match self.compression.decompress(payload, cap) {
            Err(CodecError::DecompressedTooLarge { .. }) if cap < policy.max_decompressed_bytes => {
                let guess = cap
                    .saturating_mul(2)
                    .max(payload_len.saturating_mul(4))
                    .min(policy.max_decompressed_bytes);
                return Err(CodecError::OverAllowance {
                    needed: allowance
                        .used()
                        .saturating_add(compression::decompress_peak(guess))
                        .saturating_add(guess.saturating_mul(6)),
                    allowance: allowance.limit(),
                });
            }
            r => r.map_err(|e| e.in_batch(offset))?,
        };
        let held = compression::decompress_held(inner_set.len());
        allowance.take(held, 0)?;
        let result = self.reencode_inner(&inner_set, from_offset, stamp, policy, allowance);
        allowance.give(held);
        result
    }

    fn reencode_inner(
        &self,
        inner_set: &[u8],
        from_offset: i64,
        stamp: ProducerStamp,
        policy: &TargetPolicy,
        allowance: &mut Allowance,
    ) -> Result<Vec<ReencodedBatch>> {
        let keep_append_time = policy.log_append_time == LogAppendTimePolicy::KeepAppendTime;
        let wrapper_lat = self.timestamp_type() == Some(TimestampType::LogAppendTime);
        let codec = policy.compression.unwrap_or(self.compression);
        let offset = self.last_offset();
        // An inner message takes at least 26 bytes (12 of log overhead, 14 of a v0 message).
        let most = inner_set.len() / 26;
        let entries = most.saturating_mul(
            std::mem::size_of::<(i64, Message<'_>)>() + std::mem::size_of::<PendingRecord<'_>>(),
        );
        allowance.take(entries, 0)?;
        let built = self.reencode_messages(
            inner_set,
            most,
            from_offset,
            stamp,
            policy,
            allowance,
            (keep_append_time, wrapper_lat, codec, offset),
        );
        allowance.give(entries);
        built
    }

    #[allow(clippy::too_many_arguments)]
    fn reencode_messages(
        &self,
        inner_set: &[u8],
        most: usize,
        from_offset: i64,
        stamp: ProducerStamp,
        policy: &TargetPolicy,
        allowance: &mut Allowance,
        (keep_append_time, wrapper_lat, codec, offset): (bool, bool, Compression, i64),
    ) -> Result<Vec<ReencodedBatch>> {
        let mut inner = Vec::with_capacity(most);
        let mut rest = inner_set;
        while !rest.is_empty() {
            let malformed = |reason| CodecError::MalformedLegacy { offset, reason };
            let inner_offset =
                be_i64(rest, 0).ok_or(malformed("an inner message header is cut short"))?;
            let size = be_i32(rest, 8).ok_or(malformed("an inner message header is cut short"))?;
            let end = usize::try_from(size)
                .ok()
                .and_then(|s| s.checked_add(LOG_OVERHEAD))
                .filter(|&e| e <= rest.len())
                .ok_or(malformed(
                    "an inner message runs past the end of the wrapper",
                ))?;
            let m = parse_message(&rest[LOG_OVERHEAD..end], inner_offset)?;
            if m.magic != self.magic {
                return Err(malformed(
                    "an inner message's magic differs from its wrapper's",
                ));
            }
            if m.attributes & CODEC_MASK != 0 {
                return Err(malformed(
                    "an inner message is itself compressed (nested compression)",
                ));
            }
            inner.push((inner_offset, m));
            rest = &rest[end..];
        }
        // v1: inner offsets are relative, the wrapper holds the last one's absolute offset
        // (Java's AbstractLegacyRecordBatch.DeepRecordsIterator does the same arithmetic).
        let absolute_base = match (self.magic, inner.last()) {
            (1, Some((last, _))) => Some(offset.wrapping_sub(*last)).filter(|b| *b >= 0),
            _ => None,
        };
        let mut records: Vec<PendingRecord<'_>> = Vec::with_capacity(inner.len());
        records.extend(
            inner
                .iter()
                .map(|(inner_offset, m)| PendingRecord {
                    source_offset: absolute_base
                        .map_or(*inner_offset, |b| b.wrapping_add(*inner_offset)),
                    timestamp: match (wrapper_lat, keep_append_time) {
                        (true, true) => self.timestamp.unwrap_or(-1),
                        _ => m.timestamp.unwrap_or(-1),
                    },
                    parts: parts(m.key(), m.value()),
                })
                .filter(|r| r.source_offset >= from_offset),
        );
        build_batches_within(&records, codec, stamp, policy, allowance)
            .map_err(|e| e.in_batch(offset))
    }
}

fn parts<'a>(key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> RecordParts<'a> {
    RecordParts {
        attributes: 0,
        timestamp_delta: 0,
        offset_delta: 0,
        key,
        value,
        headers_section: NO_HEADERS,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::{FetchedBatch, FetchedRecords, RecordBatch};

    /// One legacy entry (log overhead included).
    fn message(
        offset: i64,
        magic: i8,
        attributes: i8,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut body = vec![magic as u8, attributes as u8];
        if magic == 1 {
            body.extend(timestamp.to_be_bytes());
        }
        for field in [key, value] {
            match field {
                None => body.extend((-1i32).to_be_bytes()),
                Some(b) => {
                    body.extend((b.len() as i32).to_be_bytes());
                    body.extend(b);
                }
            }
        }
        let mut out = offset.to_be_bytes().to_vec();
        out.extend(((body.len() + 4) as i32).to_be_bytes());
        out.extend(crc32_ieee(&body).to_be_bytes());
        out.extend(body);
        out
    }

    fn wrapper(offset: i64, magic: i8, attributes: i8, ts: i64, inner: &[Vec<u8>]) -> Vec<u8> {
        let set: Vec<u8> = inner.concat();
        let codec = legacy_codec(attributes).unwrap();
        let mut compressed = Vec::new();
        codec.compress(&set, None, &mut compressed).unwrap();
        message(offset, magic, attributes, ts, None, Some(&compressed))
    }

    fn only_legacy(data: Vec<u8>) -> LegacyBatch {
        match FetchedRecords::new(Bytes::from(data))
            .next()
            .unwrap()
            .unwrap()
        {
            FetchedBatch::Legacy(l) => l,
            FetchedBatch::V2(_) => panic!("expected legacy"),
        }
    }

    fn timestamps(out: &[ReencodedBatch]) -> Vec<i64> {
        out.iter()
            .flat_map(|o| {
                let b = RecordBatch::parse(o.batch().as_bytes().clone()).unwrap();
                let d = b.decode_records(1 << 20).unwrap();
                d.iter()
                    .map(|r| b.record_timestamp(&r.unwrap()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn v1_wrapper_with_relative_offsets_and_append_time_only_on_the_wrapper() {
        // As an old broker stored it: LogAppendTime set on the wrapper only; the inner messages
        // keep their producer timestamps and relative offsets 0..3.
        let inner: Vec<Vec<u8>> = (0..4)
            .map(|i| {
                message(
                    i,
                    1,
                    0,
                    100 + i,
                    Some(b"k"),
                    Some(format!("v{i}").as_bytes()),
                )
            })
            .collect();
        let l = only_legacy(wrapper(109, 1, 0x08 | 1, 5_000, &inner));
        assert_eq!(l.last_offset(), 109);
        assert_eq!(l.timestamp_type(), Some(TimestampType::LogAppendTime));
        let create = l
            .reencode(0, ProducerStamp::NONE, &TargetPolicy::default())
            .unwrap();
        assert_eq!(create[0].source_offsets(), &[106, 107, 108, 109]);
        assert_eq!(timestamps(&create), vec![100, 101, 102, 103]);
        let keep = TargetPolicy {
            log_append_time: LogAppendTimePolicy::KeepAppendTime,
            ..TargetPolicy::default()
        };
        assert_eq!(
            timestamps(&l.reencode(0, ProducerStamp::NONE, &keep).unwrap()),
            vec![5_000; 4]
        );
        // From an offset inside the wrapper.
        let tail = l
            .reencode(108, ProducerStamp::NONE, &TargetPolicy::default())
            .unwrap();
        assert_eq!(tail[0].source_offsets(), &[108, 109]);
    }

    #[test]
    fn v0_wrapper_keeps_absolute_offsets_and_has_no_timestamps() {
        let inner: Vec<Vec<u8>> = (0..3)
            .map(|i| message(50 + i, 0, 0, 0, None, Some(b"x")))
            .collect();
        let l = only_legacy(wrapper(52, 0, 2, 0, &inner)); // snappy
        assert_eq!(l.timestamp_type(), None);
        let out = l
            .reencode(0, ProducerStamp::NONE, &TargetPolicy::default())
            .unwrap();
        assert_eq!(out[0].source_offsets(), &[50, 51, 52]);
        assert_eq!(out[0].batch().compression(), Compression::Snappy);
        assert_eq!(timestamps(&out), vec![-1, -1, -1]);
    }

    #[test]
    fn malformed_legacy_entries_are_errors() {
        // Nested compression.
        let nested = wrapper(
            0,
            1,
            1,
            0,
            &[wrapper(0, 1, 1, 0, &[message(0, 1, 0, 0, None, None)])],
        );
        let err = only_legacy(nested)
            .reencode(0, ProducerStamp::NONE, &TargetPolicy::default())
            .unwrap_err();
        assert!(
            matches!(err, CodecError::MalformedLegacy { reason, .. } if reason.contains("nested")),
            "{err}"
        );
        // Inner magic differs from the wrapper's.
        let mixed = wrapper(0, 1, 1, 0, &[message(0, 0, 0, 0, None, None)]);
        assert!(
            only_legacy(mixed)
                .reencode(0, ProducerStamp::NONE, &TargetPolicy::default())
                .is_err()
        );
        // Bad CRC.
        let mut bad = message(3, 1, 0, 0, Some(b"k"), Some(b"v"));
        let n = bad.len();
        bad[n - 1] ^= 1;
        let err = FetchedRecords::new(Bytes::from(bad))
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, CodecError::LegacyCrcMismatch { offset: 3, .. }),
            "{err}"
        );
        // Key length past the end.
        let mut long_key = message(4, 0, 0, 0, Some(b"k"), None);
        long_key[18..22].copy_from_slice(&100i32.to_be_bytes());
        let crc = crc32_ieee(&long_key[16..]);
        long_key[12..16].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            FetchedRecords::new(Bytes::from(long_key)).next().unwrap(),
            Err(CodecError::MalformedLegacy { offset: 4, .. })
        ));
        // zstd did not exist before magic 2.
        let zstd = message(5, 1, 4, 0, None, Some(b"x"));
        assert!(matches!(
            FetchedRecords::new(Bytes::from(zstd)).next().unwrap(),
            Err(CodecError::UnknownCompression { id: 4 })
        ));
    }

    #[test]
    fn plain_v1_message_converts_and_respects_the_fetch_offset() {
        let l = only_legacy(message(7, 1, 0, 1234, Some(b"key"), None));
        let out = l
            .reencode(
                0,
                ProducerStamp::idempotent(1, 2, 3),
                &TargetPolicy::default(),
            )
            .unwrap();
        assert_eq!(out[0].source_offsets(), &[7]);
        let b = out[0].batch();
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (1, 2, 3)
        );
        assert_eq!(timestamps(&out), vec![1234]);
        assert!(
            l.reencode(8, ProducerStamp::NONE, &TargetPolicy::default())
                .unwrap()
                .is_empty()
        );
    }
}
