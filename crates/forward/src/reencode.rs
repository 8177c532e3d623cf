//! The re-encode path: decode a batch's records and build new, producible v2 batches.
//!
//! Used only when [`needs_reencode`](crate::needs_reencode) says so (or for legacy magic 0/1
//! data). The output batches:
//!
//! * hold the source records with offset `>= from_offset`, in order; keys, values, the record
//!   attributes byte and the encoded headers (order and duplicate keys included) are copied byte
//!   for byte;
//! * number offset deltas 0..n-1 (compaction gaps closed) with lastOffsetDelta = n - 1;
//! * keep every record's timestamp (baseTimestamp = the first record's, deltas recomputed,
//!   maxTimestamp = the largest, as Java's builder does) and are CreateTime; for a LogAppendTime
//!   source the record timestamps are the create times, or the source append time with
//!   [`crate::LogAppendTimePolicy::KeepAppendTime`];
//! * use the source codec unless the policy names another;
//! * are each at most `max_message_bytes` (12-byte log overhead included), splitting as needed;
//! * carry baseOffset 0, partitionLeaderEpoch -1, the given [`ProducerStamp`] (the sequence
//!   advancing by each batch's record count), no delete horizon and no control bit.
//!
//! Each output comes with the source offsets of its records, so the pipeline can map source
//! offsets to target offsets once the ProduceResponse gives the batch's base offset.

use crate::batch::{
    ATTRIBUTES, Attributes, BASE_OFFSET, BASE_SEQUENCE, BASE_TIMESTAMP, BATCH_LENGTH, CRC,
    LAST_OFFSET_DELTA, LOG_OVERHEAD, MAGIC, MAGIC_V2, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH,
    PRODUCER_EPOCH, PRODUCER_ID, RECORD_BATCH_OVERHEAD, RECORDS_COUNT, RecordBatch, TimestampType,
};
use crate::checksum::batch_crc;
use crate::compression::Compression;
use crate::error::{CodecError, Result};
use crate::records::RecordParts;
use crate::rewrite::{LogAppendTimePolicy, ProducerStamp, TargetPolicy};

/// One produced batch and the source offsets of the records it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReencodedBatch {
    batch: RecordBatch,
    source_offsets: Vec<i64>,
}

impl ReencodedBatch {
    /// The batch, ready to produce (already stamped; baseOffset 0).
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The batch, ready to produce.
    pub fn into_batch(self) -> RecordBatch {
        self.batch
    }

    /// Source offset of each record, in record order: record `i` of this batch lands at target
    /// offset `ProduceResponse.BaseOffset + i`.
    pub fn source_offsets(&self) -> &[i64] {
        &self.source_offsets
    }

    /// Source offset of the first record.
    pub fn first_source_offset(&self) -> Option<i64> {
        self.source_offsets.first().copied()
    }

    /// Source offset of the last record.
    pub fn last_source_offset(&self) -> Option<i64> {
        self.source_offsets.last().copied()
    }
}

/// Re-encodes `batch` (see the module docs), keeping only records with offset `>= from_offset`.
///
/// Returns no batches when no record survives; the caller still advances the fetch offset to
/// `batch.next_offset()`. Control batches are refused ([`CodecError::ControlBatch`]).
pub fn reencode(
    batch: &RecordBatch,
    from_offset: i64,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
) -> Result<Vec<ReencodedBatch>> {
    if batch.is_control() {
        return Err(CodecError::ControlBatch {
            base_offset: batch.base_offset(),
        });
    }
    let decoded = batch.decode_records(policy.max_decompressed_bytes)?;
    let keep_append_time = policy.log_append_time == LogAppendTimePolicy::KeepAppendTime
        && batch.attributes().timestamp_type() == TimestampType::LogAppendTime;
    // Validate the whole section first: a batch with a bad record is not forwarded in part. This
    // also proves recordsCount matches the (capped) data before it sizes an allocation.
    decoded.validate()?;
    let mut records = Vec::with_capacity(usize::try_from(batch.record_count()).unwrap_or(0));
    for record in decoded.iter() {
        let record = record.map_err(|e| e.in_batch(batch.base_offset()))?;
        let offset = batch.record_offset(&record);
        if offset < from_offset {
            continue;
        }
        records.push(PendingRecord {
            source_offset: offset,
            timestamp: if keep_append_time {
                batch.max_timestamp()
            } else {
                batch.create_time(&record)
            },
            parts: RecordParts {
                attributes: record.attributes(),
                timestamp_delta: 0,
                offset_delta: 0,
                key: record.key(),
                value: record.value(),
                headers_section: record.headers_section(),
            },
        });
    }
    let codec = policy.compression.unwrap_or(batch.compression());
    build_batches(&records, codec, stamp, policy).map_err(|e| e.in_batch(batch.base_offset()))
}

/// A record waiting to be written into a new batch; deltas are filled in per batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingRecord<'a> {
    pub source_offset: i64,
    pub timestamp: i64,
    pub parts: RecordParts<'a>,
}

/// Builds batches of at most `policy.max_message_bytes` from `records`.
pub(crate) fn build_batches(
    records: &[PendingRecord<'_>],
    codec: Compression,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
) -> Result<Vec<ReencodedBatch>> {
    let mut builder = Builder {
        codec,
        level: policy.compression_level,
        max: policy.max_message_bytes,
        stamp,
        scratch: Vec::new(),
        out: Vec::new(),
    };
    if records.is_empty() {
        return Ok(builder.out);
    }
    let whole = builder.encode(records)?;
    if whole.bytes.len() <= builder.max {
        builder.push(records, whole.bytes)?;
        return Ok(builder.out);
    }
    if records.len() == 1 {
        return Err(builder.too_large(&records[0], whole.bytes.len()));
    }
    // Too large: cut into chunks sized by the compression ratio just observed (with a margin),
    // then halve any chunk that still does not fit.
    let payload_room = builder.max.saturating_sub(RECORD_BATCH_OVERHEAD);
    let budget = if codec == Compression::None {
        payload_room
    } else {
        let compressed = whole
            .bytes
            .len()
            .saturating_sub(RECORD_BATCH_OVERHEAD)
            .max(1);
        let ratio = whole.uncompressed as f64 / compressed as f64;
        (payload_room as f64 * ratio * 0.9) as usize
    };
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut size = 0usize;
        let base_ts = records[start].timestamp;
        while end < records.len() {
            let r = &records[end];
            let parts = RecordParts {
                timestamp_delta: r.timestamp.wrapping_sub(base_ts),
                offset_delta: (end - start) as i32,
                ..r.parts
            };
            let len = parts.encoded_len();
            if end > start && size + len > budget {
                break;
            }
            size += len;
            end += 1;
        }
        builder.split(&records[start..end])?;
        start = end;
    }
    Ok(builder.out)
}

struct Encoded {
    bytes: Vec<u8>,
    uncompressed: usize,
}

struct Builder {
    codec: Compression,
    level: Option<i32>,
    max: usize,
    stamp: ProducerStamp,
    /// Uncompressed records section, reused between batches.
    scratch: Vec<u8>,
    out: Vec<ReencodedBatch>,
}

impl Builder {
    /// Encodes `records` as one batch (header stamped with the current producer stamp).
    fn encode(&mut self, records: &[PendingRecord<'_>]) -> Result<Encoded> {
        let count = i32::try_from(records.len()).map_err(|_| CodecError::MalformedBatch {
            base_offset: records[0].source_offset,
            reason: "more than 2^31 records in one batch",
        })?;
        let base_ts = records[0].timestamp;
        // Java's builder starts maxTimestamp at NO_TIMESTAMP (-1).
        let mut max_ts = -1i64;
        self.scratch.clear();
        for (i, r) in records.iter().enumerate() {
            max_ts = max_ts.max(r.timestamp);
            RecordParts {
                timestamp_delta: r.timestamp.wrapping_sub(base_ts),
                offset_delta: i as i32,
                ..r.parts
            }
            .encode(&mut self.scratch);
        }
        let mut b = Vec::with_capacity(RECORD_BATCH_OVERHEAD + self.scratch.len() / 2 + 64);
        b.resize(RECORD_BATCH_OVERHEAD, 0);
        self.codec.compress(&self.scratch, self.level, &mut b)?;
        let batch_length =
            i32::try_from(b.len() - LOG_OVERHEAD).map_err(|_| CodecError::RecordTooLarge {
                offset: records[0].source_offset,
                size: b.len(),
                limit: self.max,
            })?;
        let attributes = Attributes::new(self.codec)
            .with(Attributes::TRANSACTIONAL, self.stamp.transactional)
            .raw();
        b[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0i64.to_be_bytes());
        b[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
        b[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
            .copy_from_slice(&(-1i32).to_be_bytes());
        b[MAGIC] = MAGIC_V2 as u8;
        b[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(count - 1).to_be_bytes());
        b[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&base_ts.to_be_bytes());
        b[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_be_bytes());
        b[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&self.stamp.producer_id.to_be_bytes());
        b[PRODUCER_EPOCH..PRODUCER_EPOCH + 2]
            .copy_from_slice(&self.stamp.producer_epoch.to_be_bytes());
        b[BASE_SEQUENCE..BASE_SEQUENCE + 4]
            .copy_from_slice(&self.stamp.base_sequence.to_be_bytes());
        b[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&count.to_be_bytes());
        let crc = batch_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(Encoded {
            bytes: b,
            uncompressed: self.scratch.len(),
        })
    }

    /// Encodes `records`, halving until every part fits.
    fn split(&mut self, records: &[PendingRecord<'_>]) -> Result<()> {
        let encoded = self.encode(records)?;
        if encoded.bytes.len() <= self.max {
            return self.push(records, encoded.bytes);
        }
        if records.len() == 1 {
            return Err(self.too_large(&records[0], encoded.bytes.len()));
        }
        let (a, b) = records.split_at(records.len() / 2);
        self.split(a)?;
        self.split(b)
    }

    fn push(&mut self, records: &[PendingRecord<'_>], bytes: Vec<u8>) -> Result<()> {
        // Built by `encode` just above, so the CRC is right by construction; the header checks
        // still run (and cannot fail).
        let batch = RecordBatch::parse_unverified(bytes.into())?;
        self.stamp = self.stamp.advanced(batch.record_count());
        self.out.push(ReencodedBatch {
            batch,
            source_offsets: records.iter().map(|r| r.source_offset).collect(),
        });
        Ok(())
    }

    fn too_large(&self, record: &PendingRecord<'_>, size: usize) -> CodecError {
        CodecError::RecordTooLarge {
            offset: record.source_offset,
            size,
            limit: self.max,
        }
    }
}
