//! Validated, zero-copy views of RecordBatch v2 bytes, and the walker that splits fetched records
//! into batches.
//!
//! v2 batch header (big-endian, 61 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | baseOffset (outside the CRC) |
//! | 8 | 4 | batchLength = total size - 12 (outside the CRC) |
//! | 12 | 4 | partitionLeaderEpoch (outside the CRC) |
//! | 16 | 1 | magic = 2 (outside the CRC) |
//! | 17 | 4 | CRC-32C of bytes 21..end |
//! | 21 | 2 | attributes |
//! | 23 | 4 | lastOffsetDelta |
//! | 27 | 8 | baseTimestamp |
//! | 35 | 8 | maxTimestamp |
//! | 43 | 8 | producerId |
//! | 51 | 2 | producerEpoch |
//! | 53 | 4 | baseSequence |
//! | 57 | 4 | recordsCount |
//! | 61 | … | records (one compressed stream when compressed) |

use bytes::Bytes;

use crate::checksum::batch_crc;
use crate::compression::Compression;
use crate::error::{CodecError, Result};
use crate::legacy::LegacyBatch;
use crate::records::{RecordView, Records};
use crate::txn::ControlRecord;

/// Bytes before the batchLength-counted part of every log entry: baseOffset + batchLength.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed v2 batch header; the records start here.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// The only magic a Produce request accepts.
pub const MAGIC_V2: i8 = 2;

pub(crate) const BASE_OFFSET: usize = 0;
pub(crate) const BATCH_LENGTH: usize = 8;
pub(crate) const PARTITION_LEADER_EPOCH: usize = 12;
pub(crate) const MAGIC: usize = 16;
pub(crate) const CRC: usize = 17;
pub(crate) const ATTRIBUTES: usize = 21;
pub(crate) const LAST_OFFSET_DELTA: usize = 23;
pub(crate) const BASE_TIMESTAMP: usize = 27;
pub(crate) const MAX_TIMESTAMP: usize = 35;
pub(crate) const PRODUCER_ID: usize = 43;
pub(crate) const PRODUCER_EPOCH: usize = 51;
pub(crate) const BASE_SEQUENCE: usize = 53;
pub(crate) const RECORDS_COUNT: usize = 57;

/// Smallest legal entry size after the 12-byte log overhead (a v0 message with no key and value).
const MIN_ENTRY_SIZE: i32 = 14;
/// Bytes up to and including the magic byte.
const HEADER_UP_TO_MAGIC: usize = MAGIC + 1;

/// How record timestamps of a batch are to be read (attribute bit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Each record's timestamp is baseTimestamp + timestampDelta.
    CreateTime,
    /// Every record's timestamp is the batch's maxTimestamp (the source broker's append time).
    LogAppendTime,
}

/// The batch attributes (a 16-bit field of which Kafka uses the low 7 bits), with a known codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    raw: i16,
    compression: Compression,
}

impl Attributes {
    /// Codec bits 0-2.
    pub const COMPRESSION_MASK: i16 = 0x07;
    /// Bit 3: LogAppendTime.
    pub const LOG_APPEND_TIME: i16 = 0x08;
    /// Bit 4: the batch belongs to a transaction.
    pub const TRANSACTIONAL: i16 = 0x10;
    /// Bit 5: the batch holds a control record (transaction marker).
    pub const CONTROL: i16 = 0x20;
    /// Bit 6: baseTimestamp holds the log cleaner's delete horizon (KIP-534).
    pub const DELETE_HORIZON: i16 = 0x40;

    /// Validates raw attribute bits: the codec must be one Kafka knows.
    pub fn from_raw(raw: i16) -> Result<Self> {
        let compression = Compression::from_id((raw & Self::COMPRESSION_MASK) as u8)?;
        Ok(Attributes { raw, compression })
    }

    /// Attributes of a new CreateTime, non-transactional, non-control batch with this codec.
    pub fn new(compression: Compression) -> Self {
        Attributes {
            raw: i16::from(compression.id()),
            compression,
        }
    }

    /// The raw 16-bit field, unused bits included.
    pub fn raw(self) -> i16 {
        self.raw
    }

    /// The codec of the records section.
    pub fn compression(self) -> Compression {
        self.compression
    }

    /// How record timestamps are read.
    pub fn timestamp_type(self) -> TimestampType {
        if self.raw & Self::LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Bit 4.
    pub fn is_transactional(self) -> bool {
        self.raw & Self::TRANSACTIONAL != 0
    }

    /// Bit 5.
    pub fn is_control(self) -> bool {
        self.raw & Self::CONTROL != 0
    }

    /// Bit 6.
    pub fn has_delete_horizon(self) -> bool {
        self.raw & Self::DELETE_HORIZON != 0
    }

    /// These attributes with `bits` set or cleared (the codec bits cannot be changed this way).
    pub fn with(self, bits: i16, set: bool) -> Self {
        let bits = bits & !Self::COMPRESSION_MASK;
        let raw = if set {
            self.raw | bits
        } else {
            self.raw & !bits
        };
        Attributes { raw, ..self }
    }
}

/// A validated, zero-copy view of exactly one RecordBatch v2.
///
/// Construction ([`RecordBatch::parse`]) checks the length fields, magic 2, a known codec,
/// non-negative lastOffsetDelta and recordsCount, and the CRC-32C over bytes 21..end. It does not
/// look inside the records section (see [`RecordBatch::decode_records`]). The stored CRC of a
/// `RecordBatch` is therefore always correct, which lets the rewriter update it instead of
/// recomputing it. Cloning is a reference count increment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
    attributes: Attributes,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl RecordBatch {
    /// Parses and fully validates one v2 batch (the buffer must hold exactly the batch).
    pub fn parse(bytes: Bytes) -> Result<Self> {
        let batch = Self::parse_unverified(bytes)?;
        let stored = batch.crc();
        let computed = batch_crc(&batch.bytes);
        if stored != computed {
            return Err(CodecError::CrcMismatch {
                base_offset: batch.base_offset(),
                stored,
                computed,
            });
        }
        Ok(batch)
    }

    /// All checks of [`parse`](Self::parse) except the CRC. Used for batches this crate has just
    /// built (their CRC is correct by construction).
    pub(crate) fn parse_unverified(bytes: Bytes) -> Result<Self> {
        let b = &bytes[..];
        if b.len() < RECORD_BATCH_OVERHEAD {
            return Err(CodecError::BatchTooShort { len: b.len() });
        }
        let declared = i32_at(b, BATCH_LENGTH);
        let actual = b.len() - LOG_OVERHEAD;
        if usize::try_from(declared).ok() != Some(actual) {
            return Err(CodecError::BatchLengthMismatch { declared, actual });
        }
        let base_offset = i64_at(b, BASE_OFFSET);
        let magic = b[MAGIC] as i8;
        if magic != MAGIC_V2 {
            return Err(CodecError::NotV2 {
                offset: base_offset,
                magic,
            });
        }
        let attributes =
            Attributes::from_raw(i16_at(b, ATTRIBUTES)).map_err(|e| e.in_batch(base_offset))?;
        let malformed = |reason| CodecError::MalformedBatch {
            base_offset,
            reason,
        };
        if i32_at(b, LAST_OFFSET_DELTA) < 0 {
            return Err(malformed("lastOffsetDelta is negative"));
        }
        if i32_at(b, RECORDS_COUNT) < 0 {
            return Err(malformed("recordsCount is negative"));
        }
        if base_offset < 0 {
            return Err(malformed("baseOffset is negative"));
        }
        Ok(RecordBatch { bytes, attributes })
    }

    /// The whole batch, log overhead included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The whole batch, log overhead included.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Total size in bytes, including the 12-byte log overhead. This is the size Kafka compares
    /// with `max.message.bytes`.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Offset of the first record (before compaction).
    pub fn base_offset(&self) -> i64 {
        i64_at(&self.bytes, BASE_OFFSET)
    }

    /// The batchLength field: total size - 12.
    pub fn batch_length(&self) -> i32 {
        i32_at(&self.bytes, BATCH_LENGTH)
    }

    /// The partitionLeaderEpoch field.
    pub fn partition_leader_epoch(&self) -> i32 {
        i32_at(&self.bytes, PARTITION_LEADER_EPOCH)
    }

    /// The magic byte (always 2).
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC] as i8
    }

    /// The stored CRC-32C.
    pub fn crc(&self) -> u32 {
        i32_at(&self.bytes, CRC) as u32
    }

    /// The attributes.
    pub fn attributes(&self) -> Attributes {
        self.attributes
    }

    /// The codec of the records section.
    pub fn compression(&self) -> Compression {
        self.attributes.compression()
    }

    /// Transactional bit.
    pub fn is_transactional(&self) -> bool {
        self.attributes.is_transactional()
    }

    /// Control bit: the batch holds a transaction marker. Never forward these.
    pub fn is_control(&self) -> bool {
        self.attributes.is_control()
    }

    /// lastOffsetDelta (never negative).
    pub fn last_offset_delta(&self) -> i32 {
        i32_at(&self.bytes, LAST_OFFSET_DELTA)
    }

    /// Offset of the last record before compaction: baseOffset + lastOffsetDelta.
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }

    /// The offset to fetch next after this batch: lastOffset + 1. Always advance by this, also
    /// for dropped, empty and compacted batches, or the same batch is fetched forever.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// baseTimestamp (holds the delete horizon when that attribute is set).
    pub fn base_timestamp(&self) -> i64 {
        i64_at(&self.bytes, BASE_TIMESTAMP)
    }

    /// maxTimestamp; for LogAppendTime batches the timestamp of every record.
    pub fn max_timestamp(&self) -> i64 {
        i64_at(&self.bytes, MAX_TIMESTAMP)
    }

    /// The delete horizon, when the log cleaner set one.
    pub fn delete_horizon(&self) -> Option<i64> {
        self.attributes
            .has_delete_horizon()
            .then(|| self.base_timestamp())
    }

    /// producerId (-1 for none).
    pub fn producer_id(&self) -> i64 {
        i64_at(&self.bytes, PRODUCER_ID)
    }

    /// producerEpoch (-1 for none).
    pub fn producer_epoch(&self) -> i16 {
        i16_at(&self.bytes, PRODUCER_EPOCH)
    }

    /// baseSequence (-1 for none).
    pub fn base_sequence(&self) -> i32 {
        i32_at(&self.bytes, BASE_SEQUENCE)
    }

    /// recordsCount (never negative).
    pub fn record_count(&self) -> i32 {
        i32_at(&self.bytes, RECORDS_COUNT)
    }

    /// True for a batch the log cleaner emptied (recordsCount 0). Kafka rejects these on produce:
    /// drop it, but advance the fetch offset to [`next_offset`](Self::next_offset).
    pub fn has_no_records(&self) -> bool {
        self.record_count() == 0
    }

    /// True when the offsets inside have gaps (compaction): lastOffsetDelta + 1 != recordsCount.
    /// Kafka rejects such batches on produce; they must be re-encoded.
    pub fn has_offset_gaps(&self) -> bool {
        i64::from(self.last_offset_delta()) + 1 != i64::from(self.record_count())
    }

    /// The records section as stored (compressed when the batch is compressed).
    pub fn records_payload(&self) -> Bytes {
        self.bytes.slice(RECORD_BATCH_OVERHEAD..)
    }

    /// Decompresses the records section (at most `max_decompressed` bytes) for walking.
    pub fn decode_records(&self, max_decompressed: usize) -> Result<DecodedRecords> {
        let data = self
            .compression()
            .decompress(self.records_payload(), max_decompressed)
            .map_err(|e| e.in_batch(self.base_offset()))?;
        Ok(DecodedRecords {
            data,
            count: self.record_count(),
            base_offset: self.base_offset(),
        })
    }

    /// Absolute offset of a record of this batch.
    pub fn record_offset(&self, record: &RecordView<'_>) -> i64 {
        self.base_offset()
            .wrapping_add(i64::from(record.offset_delta()))
    }

    /// Timestamp of a record of this batch, read as Java's consumer reads it: maxTimestamp for
    /// LogAppendTime batches, else baseTimestamp + timestampDelta.
    pub fn record_timestamp(&self, record: &RecordView<'_>) -> i64 {
        match self.attributes.timestamp_type() {
            TimestampType::LogAppendTime => self.max_timestamp(),
            TimestampType::CreateTime => self.create_time(record),
        }
    }

    /// The create time stored in a record: baseTimestamp + timestampDelta, whatever the
    /// timestamp type. This is what a CreateTime target will show once the LogAppendTime bit is
    /// cleared.
    pub fn create_time(&self, record: &RecordView<'_>) -> i64 {
        self.base_timestamp().wrapping_add(record.timestamp_delta())
    }

    /// The transaction marker of a control batch: `Ok(None)` when this is not a control batch.
    pub fn control_record(&self) -> Result<Option<ControlRecord>> {
        if !self.is_control() {
            return Ok(None);
        }
        // A marker is a few bytes; a small cap keeps a hostile "control batch" harmless.
        const MAX_CONTROL_BATCH: usize = 64 * 1024;
        let decoded = self.decode_records(MAX_CONTROL_BATCH)?;
        let Some(first) = decoded.iter().next() else {
            return Err(CodecError::MalformedControlRecord {
                base_offset: self.base_offset(),
                reason: "the control batch holds no record",
            });
        };
        let first = first.map_err(|e| e.in_batch(self.base_offset()))?;
        ControlRecord::parse(first.key())
            .map(Some)
            .map_err(|reason| CodecError::MalformedControlRecord {
                base_offset: self.base_offset(),
                reason,
            })
    }
}

/// The uncompressed records section of a batch. Walk it with [`DecodedRecords::iter`].
#[derive(Clone, Debug)]
pub struct DecodedRecords {
    data: Bytes,
    count: i32,
    base_offset: i64,
}

impl DecodedRecords {
    /// A walker over the records (validating count, lengths and trailing bytes).
    pub fn iter(&self) -> Records<'_> {
        Records::new(&self.data, self.count)
    }

    /// The uncompressed section.
    pub fn as_bytes(&self) -> &Bytes {
        &self.data
    }

    /// Walks every record, reporting the first problem with the batch's offset attached.
    pub fn validate(&self) -> Result<usize> {
        self.iter()
            .validate()
            .map_err(|e| e.in_batch(self.base_offset))
    }
}

/// One complete entry of fetched records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchedBatch {
    /// A RecordBatch v2 (CRC verified).
    V2(RecordBatch),
    /// A legacy magic 0/1 message (possibly a compressed wrapper; CRC verified). Produce
    /// rejects these: convert them with [`LegacyBatch::reencode`].
    Legacy(LegacyBatch),
}

impl FetchedBatch {
    /// Offset of the last record in the entry.
    pub fn last_offset(&self) -> i64 {
        match self {
            FetchedBatch::V2(b) => b.last_offset(),
            FetchedBatch::Legacy(b) => b.last_offset(),
        }
    }

    /// The offset to fetch next: [`last_offset`](Self::last_offset) + 1.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// Size of the entry, log overhead included.
    pub fn size_in_bytes(&self) -> usize {
        match self {
            FetchedBatch::V2(b) => b.size_in_bytes(),
            FetchedBatch::Legacy(b) => b.size_in_bytes(),
        }
    }
}

/// Splits the `records` bytes of a fetch response partition into complete batches, with the
/// semantics of Java's `ByteBufferLogInputStream`:
///
/// * fewer than 12 bytes left, fewer than 17 bytes left, or fewer than size + 12 bytes left:
///   the rest is a **truncated tail** (the broker cut the last batch at the fetch byte limit).
///   Iteration ends without an error; [`truncated_tail_bytes`](Self::truncated_tail_bytes) tells
///   how many bytes were left over. Refetch from the last complete batch's next offset.
/// * entry size < 14 or magic outside 0..=2: [`CodecError::CorruptFraming`].
/// * magic 2: parsed and CRC-verified into [`FetchedBatch::V2`]; magic 0/1:
///   [`FetchedBatch::Legacy`].
///
/// After an error the walker yields nothing more. It never panics, and it allocates nothing:
/// each batch is a reference-counted slice of the input.
///
/// ```
/// use bytes::Bytes;
/// use strait_forward::{FetchedBatch, FetchedRecords};
/// let mut walker = FetchedRecords::new(Bytes::from_static(&[0; 11]));
/// assert!(walker.next().is_none());
/// assert_eq!(walker.truncated_tail_bytes(), 11);
/// ```
#[derive(Clone, Debug)]
pub struct FetchedRecords {
    buf: Bytes,
    pos: usize,
    finished: bool,
}

impl FetchedRecords {
    /// A walker over a fetch response partition's `records` field.
    pub fn new(records: Bytes) -> Self {
        FetchedRecords {
            buf: records,
            pos: 0,
            finished: false,
        }
    }

    /// Bytes consumed by the complete entries yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes after the last complete entry. Once the iterator has returned `None` this is the
    /// size of the truncated tail (0 when the data ended exactly at an entry boundary).
    pub fn truncated_tail_bytes(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Frames the next entry: `Ok(None)` at the end or at a truncated tail.
    fn next_entry(&mut self) -> Result<Option<FetchedBatch>> {
        let rest = &self.buf[self.pos..];
        if rest.len() < LOG_OVERHEAD {
            return Ok(None);
        }
        let size = i32_at(rest, BATCH_LENGTH);
        if size < MIN_ENTRY_SIZE {
            return Err(CodecError::CorruptFraming {
                position: self.pos,
                reason: format!("entry size {size} is below the minimum of {MIN_ENTRY_SIZE}"),
            });
        }
        if rest.len() < HEADER_UP_TO_MAGIC {
            return Ok(None);
        }
        let magic = rest[MAGIC] as i8;
        if !(0..=2).contains(&magic) {
            return Err(CodecError::CorruptFraming {
                position: self.pos,
                reason: format!("magic {magic} is not 0, 1 or 2"),
            });
        }
        // size is positive, so the sum cannot overflow usize.
        let total = size as usize + LOG_OVERHEAD;
        if rest.len() < total {
            return Ok(None);
        }
        let entry = self.buf.slice(self.pos..self.pos + total);
        let item = if magic == MAGIC_V2 {
            FetchedBatch::V2(RecordBatch::parse(entry)?)
        } else {
            FetchedBatch::Legacy(LegacyBatch::parse(entry)?)
        };
        self.pos += total;
        Ok(Some(item))
    }
}

impl Iterator for FetchedRecords {
    type Item = Result<FetchedBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let item = self.next_entry().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.finished = true;
        }
        item
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::records::{NO_HEADERS, RecordParts};
    use crate::reencode::{PendingRecord, build_batches};
    use crate::rewrite::{ProducerStamp, TargetPolicy};

    /// A valid batch of `n` records at `base_offset`, built by the crate's encoder.
    fn batch(base_offset: i64, n: usize, codec: Compression) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
        let records: Vec<PendingRecord<'_>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| PendingRecord {
                source_offset: i as i64,
                timestamp: 1000 + i as i64,
                parts: RecordParts {
                    attributes: 0,
                    timestamp_delta: 0,
                    offset_delta: 0,
                    key: None,
                    value: Some(v),
                    headers_section: NO_HEADERS,
                },
            })
            .collect();
        let out = build_batches(
            &records,
            codec,
            ProducerStamp::NONE,
            &TargetPolicy::default(),
        )
        .unwrap();
        let mut b = out[0].batch().as_bytes().to_vec();
        b[..8].copy_from_slice(&base_offset.to_be_bytes());
        b
    }

    fn reseal(b: &mut [u8]) {
        let crc = batch_crc(b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }

    fn walk(data: Vec<u8>) -> (Vec<Result<FetchedBatch>>, usize) {
        let mut w = FetchedRecords::new(Bytes::from(data));
        let items: Vec<_> = w.by_ref().collect();
        (items, w.truncated_tail_bytes())
    }

    #[test]
    fn parses_header_fields() {
        let b = RecordBatch::parse(Bytes::from(batch(42, 3, Compression::Gzip))).unwrap();
        assert_eq!(b.base_offset(), 42);
        assert_eq!(b.magic(), 2);
        assert_eq!(b.batch_length() as usize, b.size_in_bytes() - 12);
        assert_eq!(b.partition_leader_epoch(), -1);
        assert_eq!(b.compression(), Compression::Gzip);
        assert_eq!(b.last_offset_delta(), 2);
        assert_eq!((b.last_offset(), b.next_offset()), (44, 45));
        assert_eq!((b.base_timestamp(), b.max_timestamp()), (1000, 1002));
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (-1, -1, -1)
        );
        assert_eq!(b.record_count(), 3);
        assert!(!b.has_offset_gaps() && !b.has_no_records() && !b.is_control());
        let decoded = b.decode_records(1 << 20).unwrap();
        assert_eq!(decoded.validate().unwrap(), 3);
        let r = decoded.iter().nth(2).unwrap().unwrap();
        assert_eq!((b.record_offset(&r), b.record_timestamp(&r)), (44, 1002));
    }

    #[test]
    fn parse_rejects_bad_headers() {
        let good = batch(0, 2, Compression::None);
        assert!(matches!(
            RecordBatch::parse(Bytes::copy_from_slice(&good[..60])),
            Err(CodecError::BatchTooShort { len: 60 })
        ));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            RecordBatch::parse(Bytes::from(long)),
            Err(CodecError::BatchLengthMismatch { .. })
        ));
        let mut magic = good.clone();
        magic[MAGIC] = 1;
        assert!(matches!(
            RecordBatch::parse(Bytes::from(magic)),
            Err(CodecError::NotV2 { magic: 1, .. })
        ));
        let mut codec = good.clone();
        codec[ATTRIBUTES + 1] = 5;
        reseal(&mut codec);
        let err = RecordBatch::parse(Bytes::from(codec)).unwrap_err();
        assert!(
            matches!(&err, CodecError::InBatch { source, .. } if matches!(**source, CodecError::UnknownCompression { id: 5 })),
            "{err}"
        );
        let mut count = good.clone();
        count[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        reseal(&mut count);
        assert!(matches!(
            RecordBatch::parse(Bytes::from(count)),
            Err(CodecError::MalformedBatch { .. })
        ));
        let mut crc = good.clone();
        crc[70] ^= 0x80;
        assert!(matches!(
            RecordBatch::parse(Bytes::from(crc)),
            Err(CodecError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn attributes_bits() {
        let a = Attributes::from_raw(0x7c | 0x0100).unwrap(); // zstd, all flags, an unused bit
        assert_eq!(a.compression(), Compression::Zstd);
        assert_eq!(a.timestamp_type(), TimestampType::LogAppendTime);
        assert!(a.is_transactional() && a.is_control() && a.has_delete_horizon());
        let cleared = a.with(
            Attributes::LOG_APPEND_TIME | Attributes::DELETE_HORIZON | Attributes::COMPRESSION_MASK,
            false,
        );
        assert_eq!(cleared.raw(), 0x0134);
        assert!(Attributes::from_raw(6).is_err());
    }

    #[test]
    fn walker_ends_quietly_at_short_tails() {
        let b = batch(0, 2, Compression::None);
        // (a) fewer than 12 bytes
        assert_eq!(walk(b[..11].to_vec()).1, 11);
        // (b) between 12 and 17 bytes (size field valid)
        for n in 12..17 {
            let (items, tail) = walk(b[..n].to_vec());
            assert!(items.is_empty());
            assert_eq!(tail, n);
        }
        // (c) mid-batch
        let (items, tail) = walk(b[..b.len() - 1].to_vec());
        assert!(items.is_empty());
        assert_eq!(tail, b.len() - 1);
        // Nothing at all.
        assert_eq!(walk(Vec::new()).1, 0);
    }

    #[test]
    fn walker_yields_complete_batches_then_reports_the_tail() {
        let mut data = batch(0, 2, Compression::None);
        data.extend(batch(2, 3, Compression::Lz4));
        let third = batch(5, 1, Compression::None);
        data.extend(&third[..40]);
        let (items, tail) = walk(data);
        let offsets: Vec<i64> = items
            .into_iter()
            .map(|i| i.unwrap().next_offset())
            .collect();
        assert_eq!(offsets, vec![2, 5]);
        assert_eq!(tail, 40);
    }

    #[test]
    fn walker_reports_corrupt_framing_and_stops() {
        // size below 14 is corrupt even when fewer than 17 bytes remain
        let mut small = vec![0u8; 12];
        small[8..12].copy_from_slice(&13i32.to_be_bytes());
        let (items, _) = walk(small);
        assert!(matches!(
            &items[..],
            [Err(CodecError::CorruptFraming { position: 0, .. })]
        ));
        let mut negative = vec![0u8; 12];
        negative[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            &walk(negative).0[..],
            [Err(CodecError::CorruptFraming { .. })]
        ));
        // bad magic after a good batch; nothing is yielded after the error
        let mut data = batch(0, 1, Compression::None);
        let good_len = data.len();
        let mut bad = batch(1, 1, Compression::None);
        bad[MAGIC] = 3;
        data.extend(&bad);
        data.extend(batch(2, 1, Compression::None));
        let (items, tail) = walk(data);
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(
            matches!(&items[1], Err(CodecError::CorruptFraming { position, .. }) if *position == good_len)
        );
        assert!(tail > 0);
        // a CRC failure also stops the walk
        let mut data = batch(0, 1, Compression::None);
        let n = data.len();
        data[n - 1] ^= 1;
        data.extend(batch(1, 1, Compression::None));
        let (items, _) = walk(data);
        assert!(matches!(&items[..], [Err(CodecError::CrcMismatch { .. })]));
    }

    #[test]
    fn control_record_of_a_hand_built_marker() {
        use crate::txn::ControlRecordType;
        // One record with key [0,0,0,1] (COMMIT) and value version 0 + coordinator epoch 3.
        let key = [0u8, 0, 0, 1];
        let value = [0u8, 0, 0, 0, 0, 3];
        let mut section = Vec::new();
        RecordParts {
            attributes: 0,
            timestamp_delta: 0,
            offset_delta: 0,
            key: Some(&key),
            value: Some(&value),
            headers_section: NO_HEADERS,
        }
        .encode(&mut section);
        let mut b = batch(9, 1, Compression::None);
        b.truncate(RECORD_BATCH_OVERHEAD);
        b.extend(&section);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
        b[ATTRIBUTES + 1] = 0x30; // control + transactional
        reseal(&mut b);
        let parsed = RecordBatch::parse(Bytes::from(b)).unwrap();
        assert_eq!(
            parsed.control_record().unwrap().map(|c| c.kind),
            Some(ControlRecordType::Commit)
        );
        let plain = RecordBatch::parse(Bytes::from(batch(0, 1, Compression::None))).unwrap();
        assert_eq!(plain.control_record().unwrap(), None);
    }
}
