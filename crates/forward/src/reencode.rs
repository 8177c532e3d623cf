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
//!
//! ## Working memory
//!
//! Re-encoding is the one place where a small fetched batch turns into much more heap: a 100 KB
//! zstd batch can hold 9.5 million empty records (66 MB decompressed, and a bookkeeping entry
//! per record). [`reencode_within`] takes an [`Allowance`] and accounts, before allocating, the
//! decompressed section (capped by the allowance as well as by
//! `TargetPolicy::max_decompressed_bytes`), the per-record entries (their number proven by
//! walking the section, never taken from the header), the uncompressed scratch section and every
//! output batch. When the next allocation would not fit it fails with
//! [`CodecError::OverAllowance`], saying how much would; nothing large was allocated by then.

use crate::batch::{
    ATTRIBUTES, Attributes, BASE_OFFSET, BASE_SEQUENCE, BASE_TIMESTAMP, BATCH_LENGTH, CRC,
    LAST_OFFSET_DELTA, LOG_OVERHEAD, MAGIC, MAGIC_V2, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH,
    PRODUCER_EPOCH, PRODUCER_ID, RECORD_BATCH_OVERHEAD, RECORDS_COUNT, RecordBatch, TimestampType,
};
use crate::checksum::batch_crc;
use crate::compression::{self, Compression};
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

/// The smallest encoded v2 record: length, attributes, timestampDelta, offsetDelta, key length,
/// value length and header count, one byte each. A section of `n` bytes holds at most `n / 7`
/// records, whatever its header claims.
pub const MIN_RECORD_BYTES: usize = 7;

/// How many bytes longer a re-encoded record can be than its source: a new timestampDelta (up to
/// 10 bytes, at least 1 before), offsetDelta (5, at least 1) and length prefix (5, at least 1).
const MAX_RECORD_GROWTH: usize = 17;

/// Heap held per output batch besides its bytes: its source offsets are counted apart, this is
/// the batch and vector headers.
const PER_OUTPUT: usize = 128;

/// Working memory a re-encode may use, and what it accounts as used now.
///
/// The codec takes from it before each allocation that grows with the batch and gives back
/// what it frees; the output batches stay taken. [`Allowance::peak`] is the most it ever held.
#[derive(Debug, Clone)]
pub struct Allowance {
    limit: usize,
    used: usize,
    peak: usize,
}

impl Allowance {
    /// An allowance of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Allowance {
            limit,
            used: 0,
            peak: 0,
        }
    }

    /// No limit (what [`reencode`] uses).
    pub fn unlimited() -> Self {
        Allowance::new(usize::MAX)
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes accounted as used now (the output batches after a successful re-encode).
    pub fn used(&self) -> usize {
        self.used
    }

    /// The most bytes ever accounted at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Bytes still free.
    pub fn room(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// Accounts `bytes` more, or fails saying that `used + bytes + then` would let the work go
    /// on (`then`: what the caller knows it will need next).
    pub(crate) fn take(&mut self, bytes: usize, then: usize) -> Result<()> {
        let want = self.used.saturating_add(bytes);
        if want > self.limit {
            return Err(CodecError::OverAllowance {
                needed: want.saturating_add(then),
                allowance: self.limit,
            });
        }
        self.used = want;
        self.peak = self.peak.max(want);
        Ok(())
    }

    /// Returns `bytes` (freed).
    pub(crate) fn give(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
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
    reencode_within(
        batch,
        from_offset,
        stamp,
        policy,
        &mut Allowance::unlimited(),
    )
}

/// [`reencode`] within `allowance` (see "Working memory" in the module docs). On success the
/// output batches stay accounted in it; on [`CodecError::OverAllowance`] nothing the batch
/// needed was allocated beyond the allowance, and `needed` says how much to allow next time.
pub fn reencode_within(
    batch: &RecordBatch,
    from_offset: i64,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    allowance: &mut Allowance,
) -> Result<Vec<ReencodedBatch>> {
    if batch.is_control() {
        return Err(CodecError::ControlBatch {
            base_offset: batch.base_offset(),
        });
    }
    let (decoded, held) = decode_within(batch, policy, allowance)?;
    let result = reencode_decoded(batch, &decoded, from_offset, stamp, policy, allowance);
    allowance.give(held);
    result
}

/// Decodes `batch`'s records within `allowance`; returns them and the bytes accounted for them
/// (0 for an uncompressed batch: its section is a slice of the fetched bytes), which the caller
/// gives back once done with them.
fn decode_within(
    batch: &RecordBatch,
    policy: &TargetPolicy,
    allowance: &mut Allowance,
) -> Result<(crate::batch::DecodedRecords, usize)> {
    if batch.compression() == Compression::None {
        // The section is a slice of the fetched batch: nothing is allocated.
        return Ok((batch.decode_records(policy.max_decompressed_bytes)?, 0));
    }
    let payload = batch.as_bytes().len().saturating_sub(RECORD_BATCH_OVERHEAD);
    // Cap the output by what the allowance can hold at the decompressor's peak, too.
    let room = compression::decompress_room(allowance.room());
    let cap = policy.max_decompressed_bytes.min(room);
    let decoded = match batch.decode_records(cap) {
        Err(e) if cap < policy.max_decompressed_bytes && is_too_large(&e) => {
            // Larger than we may hold, but maybe within the configured cap: ask for room for
            // twice as much (at least 4x the payload) and the work after it.
            let guess = cap
                .saturating_mul(2)
                .max(payload.saturating_mul(4))
                .min(policy.max_decompressed_bytes);
            return Err(CodecError::OverAllowance {
                needed: allowance
                    .used()
                    .saturating_add(compression::decompress_peak(guess))
                    .saturating_add(work_after_decompression(
                        guess,
                        batch.record_count(),
                        policy,
                    )),
                allowance: allowance.limit(),
            });
        }
        r => r?,
    };
    let held = compression::decompress_held(decoded.as_bytes().len());
    allowance.take(held, 0)?;
    Ok((decoded, held))
}

/// Smallest compression ratio (compressed / uncompressed) a run's estimate assumes: a chunk of a
/// run never holds more than this many times its target in uncompressed records, whatever the
/// data, so one compression call stays bounded.
const MIN_RUN_RATIO: f64 = 1.0 / 16.0;

/// Kafka's producer closes a batch when its estimated compressed size times this margin
/// reaches `batch.size` (`CompressionRatioEstimator`, `COMPRESSION_RATE_ESTIMATION_FACTOR`).
const RUN_ESTIMATE_MARGIN: f64 = 1.05;

/// What [`reencode_run_within`] made.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Run {
    /// The output batches, in order (already stamped; baseOffset 0).
    pub batches: Vec<ReencodedBatch>,
    /// The compression ratio observed last (records section after / before compression), to
    /// size the chunks of the next run; the estimate passed in when nothing was compressed.
    pub ratio: f64,
}

/// Re-encodes a run of consecutive batches of one partition into batches of the policy's codec
/// holding all their records in order, as [`reencode_within`] does for one batch, but cutting
/// the records into batches of about `target` bytes **after compression**, as Kafka's producer
/// fills `batch.size`: each chunk takes records while their uncompressed size times the ratio
/// estimate (the one passed in for the first chunk, the one just observed for the next) times
/// 1.05 stays under `target`. A chunk that still compresses to more than `max_message_bytes` is
/// split as [`reencode_within`] splits. Compressing many small batches as one gives the codec a
/// longer window: with zstd a run writes fewer bytes than re-encoding its batches one by one.
///
/// The batches must be in log order, none a control batch, and share one codec; records below
/// `from_offset` are dropped. All their decoded sections are held at once (accounted in
/// `allowance` as [`reencode_within`] accounts one).
pub fn reencode_run_within(
    batches: &[RecordBatch],
    from_offset: i64,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    target: usize,
    ratio: f64,
    allowance: &mut Allowance,
) -> Result<Run> {
    let mut decoded = Vec::with_capacity(batches.len());
    let mut held = 0usize;
    let mut failed = None;
    for batch in batches {
        if batch.is_control() {
            failed = Some(CodecError::ControlBatch {
                base_offset: batch.base_offset(),
            });
            break;
        }
        match decode_within(batch, policy, allowance) {
            Ok((d, h)) => {
                held = held.saturating_add(h);
                decoded.push(d);
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let result = match failed {
        Some(e) => Err(e),
        None => build_run(
            batches,
            &decoded,
            from_offset,
            stamp,
            policy,
            target,
            ratio,
            allowance,
        ),
    };
    allowance.give(held);
    result
}

#[allow(clippy::too_many_arguments)]
fn build_run(
    batches: &[RecordBatch],
    decoded: &[crate::batch::DecodedRecords],
    from_offset: i64,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    target: usize,
    ratio: f64,
    allowance: &mut Allowance,
) -> Result<Run> {
    let Some(first) = batches.first() else {
        return Ok(Run {
            batches: Vec::new(),
            ratio,
        });
    };
    let codec = policy.compression.unwrap_or(first.compression());
    // Validate every section first (a run with a bad record is not forwarded in part) and count
    // the records by walking them, never by the headers.
    let mut count = 0usize;
    let mut section = 0usize;
    for (batch, d) in batches.iter().zip(decoded) {
        if batch.compression() != first.compression() {
            return Err(CodecError::NotMergeable {
                base_offset: batch.base_offset(),
                reason: "its codec differs from the first batch's",
            });
        }
        count = count.saturating_add(d.validate()?.min(d.as_bytes().len() / MIN_RECORD_BYTES));
        section = section.saturating_add(d.as_bytes().len());
    }
    let entries = count.saturating_mul(std::mem::size_of::<PendingRecord<'_>>());
    let scratch = section.saturating_add(count.saturating_mul(MAX_RECORD_GROWTH));
    allowance.take(
        entries,
        scratch.saturating_add(2 * (RECORD_BATCH_OVERHEAD + codec.compress_bound(scratch))),
    )?;
    let built = collect_and_build(
        batches,
        decoded,
        from_offset,
        count,
        codec,
        stamp,
        policy,
        target,
        ratio,
        allowance,
    );
    allowance.give(entries);
    built
}

#[allow(clippy::too_many_arguments)]
fn collect_and_build(
    batches: &[RecordBatch],
    decoded: &[crate::batch::DecodedRecords],
    from_offset: i64,
    count: usize,
    codec: Compression,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    target: usize,
    ratio: f64,
    allowance: &mut Allowance,
) -> Result<Run> {
    let mut records = Vec::with_capacity(count);
    for (batch, d) in batches.iter().zip(decoded) {
        // Runs are made of CreateTime batches only (see `merge::compatible`).
        push_pending(&mut records, batch, d, from_offset, false)?;
    }
    let mut builder = Builder {
        codec,
        level: policy.compression_level,
        max: policy.max_message_bytes,
        stamp,
        scratch: Vec::new(),
        out: Vec::new(),
        allowance,
    };
    let mut ratio = if ratio.is_finite() {
        ratio.clamp(MIN_RUN_RATIO, 1.0)
    } else {
        1.0
    };
    let room = target.saturating_sub(RECORD_BATCH_OVERHEAD).max(1) as f64;
    let mut start = 0;
    let mut built = Ok(());
    while start < records.len() {
        let base_ts = records[start].timestamp;
        let mut end = start;
        let mut size = 0usize;
        while end < records.len() {
            let r = &records[end];
            let len = RecordParts {
                timestamp_delta: r.timestamp.wrapping_sub(base_ts),
                offset_delta: (end - start) as i32,
                ..r.parts
            }
            .encoded_len();
            if end > start && (size + len) as f64 * ratio * RUN_ESTIMATE_MARGIN > room {
                break;
            }
            size += len;
            end += 1;
        }
        let made = builder.out.len();
        built = builder.build(&records[start..end]);
        if built.is_err() {
            break;
        }
        let compressed: usize = builder.out[made..]
            .iter()
            .map(|b| b.batch().as_bytes().len() - RECORD_BATCH_OVERHEAD)
            .sum();
        if size > 0 {
            ratio = (compressed as f64 / size as f64).clamp(MIN_RUN_RATIO, 1.0);
        }
        start = end;
    }
    // The scratch section is freed with the builder.
    let scratch = builder.scratch.capacity();
    let out = std::mem::take(&mut builder.out);
    builder.allowance.give(scratch);
    built.map(|()| Run {
        batches: out,
        ratio,
    })
}

/// What re-encoding a section of `section` bytes and `declared` records needs after the
/// decompression: the record entries, the scratch section and the output batches.
fn work_after_decompression(section: usize, declared: i32, policy: &TargetPolicy) -> usize {
    let records = usize::try_from(declared)
        .unwrap_or(0)
        .min(section / MIN_RECORD_BYTES);
    let scratch = section.saturating_add(records.saturating_mul(MAX_RECORD_GROWTH));
    let codec = policy.compression.unwrap_or(Compression::Zstd);
    records
        .saturating_mul(std::mem::size_of::<PendingRecord<'_>>() + 8)
        .saturating_add(scratch)
        .saturating_add(2 * (RECORD_BATCH_OVERHEAD + codec.compress_bound(scratch)))
}

fn is_too_large(e: &CodecError) -> bool {
    match e {
        CodecError::DecompressedTooLarge { .. } => true,
        CodecError::InBatch { source, .. } => is_too_large(source),
        _ => false,
    }
}

fn reencode_decoded(
    batch: &RecordBatch,
    decoded: &crate::batch::DecodedRecords,
    from_offset: i64,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    allowance: &mut Allowance,
) -> Result<Vec<ReencodedBatch>> {
    let keep_append_time = policy.log_append_time == LogAppendTimePolicy::KeepAppendTime
        && batch.attributes().timestamp_type() == TimestampType::LogAppendTime;
    // Validate the whole section first: a batch with a bad record is not forwarded in part. The
    // walk also counts the records, so the header's recordsCount (which a hostile broker sets at
    // will) never sizes an allocation; a section holds at most len / 7 of them anyway.
    let count = decoded
        .validate()?
        .min(decoded.as_bytes().len() / MIN_RECORD_BYTES);
    let entries = count.saturating_mul(std::mem::size_of::<PendingRecord<'_>>());
    let codec = policy.compression.unwrap_or(batch.compression());
    let section = decoded.as_bytes().len();
    let scratch = section.saturating_add(count.saturating_mul(MAX_RECORD_GROWTH));
    allowance.take(
        entries,
        scratch.saturating_add(2 * (RECORD_BATCH_OVERHEAD + codec.compress_bound(scratch))),
    )?;
    let mut records = Vec::with_capacity(count);
    push_pending(&mut records, batch, decoded, from_offset, keep_append_time)?;
    let built = build_batches_within(&records, codec, stamp, policy, allowance)
        .map_err(|e| e.in_batch(batch.base_offset()));
    allowance.give(entries);
    built
}

/// Appends `batch`'s records from `from_offset` on to `records`, with their source offsets and
/// timestamps (the batch's LogAppendTime when it is kept, else each record's CreateTime).
fn push_pending<'a>(
    records: &mut Vec<PendingRecord<'a>>,
    batch: &RecordBatch,
    decoded: &'a crate::batch::DecodedRecords,
    from_offset: i64,
    keep_append_time: bool,
) -> Result<()> {
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
    Ok(())
}

/// A record waiting to be written into a new batch; deltas are filled in per batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingRecord<'a> {
    pub source_offset: i64,
    pub timestamp: i64,
    pub parts: RecordParts<'a>,
}

/// Builds batches of at most `policy.max_message_bytes` from `records`.
#[cfg(test)]
pub(crate) fn build_batches(
    records: &[PendingRecord<'_>],
    codec: Compression,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
) -> Result<Vec<ReencodedBatch>> {
    build_batches_within(records, codec, stamp, policy, &mut Allowance::unlimited())
}

/// [`build_batches`] accounting the scratch section and the outputs in `allowance` (the outputs
/// stay accounted).
pub(crate) fn build_batches_within(
    records: &[PendingRecord<'_>],
    codec: Compression,
    stamp: ProducerStamp,
    policy: &TargetPolicy,
    allowance: &mut Allowance,
) -> Result<Vec<ReencodedBatch>> {
    let mut builder = Builder {
        codec,
        level: policy.compression_level,
        max: policy.max_message_bytes,
        stamp,
        scratch: Vec::new(),
        out: Vec::new(),
        allowance,
    };
    if records.is_empty() {
        return Ok(builder.out);
    }
    let built = builder.build(records);
    // The scratch section is freed with the builder.
    let scratch = builder.scratch.capacity();
    let out = std::mem::take(&mut builder.out);
    builder.allowance.give(scratch);
    built.map(|()| out)
}

impl Builder<'_> {
    fn build(&mut self, records: &[PendingRecord<'_>]) -> Result<()> {
        let codec = self.codec;
        let whole = self.encode(records)?;
        if whole.bytes.len() <= self.max {
            return self.push(records, whole.bytes);
        }
        if records.len() == 1 {
            return Err(self.too_large(&records[0], whole.bytes.len()));
        }
        let whole_len = whole.bytes.len();
        let whole_uncompressed = whole.uncompressed;
        // Freed before the pieces are built: only its size is needed.
        self.allowance.give(whole.bytes.capacity());
        drop(whole);
        self.split_all(records, codec, whole_len, whole_uncompressed)
    }

    fn split_all(
        &mut self,
        records: &[PendingRecord<'_>],
        codec: Compression,
        whole_len: usize,
        whole_uncompressed: usize,
    ) -> Result<()> {
        // Too large: cut into chunks sized by the compression ratio just observed (with a
        // margin), then halve any chunk that still does not fit.
        let payload_room = self.max.saturating_sub(RECORD_BATCH_OVERHEAD);
        let budget = if codec == Compression::None {
            payload_room
        } else {
            let compressed = whole_len.saturating_sub(RECORD_BATCH_OVERHEAD).max(1);
            let ratio = whole_uncompressed as f64 / compressed as f64;
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
            self.split(&records[start..end])?;
            start = end;
        }
        Ok(())
    }
}

struct Encoded {
    bytes: Vec<u8>,
    uncompressed: usize,
}

struct Builder<'a> {
    codec: Compression,
    level: Option<i32>,
    max: usize,
    stamp: ProducerStamp,
    /// Uncompressed records section, reused between batches.
    scratch: Vec<u8>,
    out: Vec<ReencodedBatch>,
    /// Accounts the scratch section and every output before it is allocated.
    allowance: &'a mut Allowance,
}

impl Builder<'_> {
    /// Encodes `records` as one batch (header stamped with the current producer stamp).
    fn encode(&mut self, records: &[PendingRecord<'_>]) -> Result<Encoded> {
        let count = i32::try_from(records.len()).map_err(|_| CodecError::MalformedBatch {
            base_offset: records[0].source_offset,
            reason: "more than 2^31 records in one batch",
        })?;
        let base_ts = records[0].timestamp;
        fn parts<'r>(base_ts: i64, i: usize, r: &PendingRecord<'r>) -> RecordParts<'r> {
            RecordParts {
                timestamp_delta: r.timestamp.wrapping_sub(base_ts),
                offset_delta: i as i32,
                ..r.parts
            }
        }
        // Sized exactly before it is filled (no doubling); later, smaller pieces reuse it.
        let section: usize = records
            .iter()
            .enumerate()
            .map(|(i, r)| parts(base_ts, i, r).encoded_len())
            .sum();
        // The output's worst case, taken before it is allocated; what compression saved is given
        // back once the buffer is trimmed.
        let out_bound = RECORD_BATCH_OVERHEAD + self.codec.compress_bound(section);
        if section > self.scratch.capacity() {
            let old = self.scratch.capacity();
            self.scratch = Vec::new();
            self.allowance.give(old);
            self.allowance.take(section, out_bound)?;
            self.scratch.reserve_exact(section);
        }
        self.allowance.take(out_bound, 0)?;
        // Java's builder starts maxTimestamp at NO_TIMESTAMP (-1).
        let mut max_ts = -1i64;
        self.scratch.clear();
        for (i, r) in records.iter().enumerate() {
            max_ts = max_ts.max(r.timestamp);
            parts(base_ts, i, r).encode(&mut self.scratch);
        }
        let mut b = Vec::with_capacity(out_bound);
        b.resize(RECORD_BATCH_OVERHEAD, 0);
        self.codec.compress(&self.scratch, self.level, &mut b)?;
        if b.capacity() > b.len() + b.len() / 8 + 4096 {
            b.shrink_to_fit();
        }
        self.allowance.give(out_bound.saturating_sub(b.capacity()));
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
        self.allowance.give(encoded.bytes.capacity());
        drop(encoded);
        let (a, b) = records.split_at(records.len() / 2);
        self.split(a)?;
        self.split(b)
    }

    fn push(&mut self, records: &[PendingRecord<'_>], bytes: Vec<u8>) -> Result<()> {
        // Built by `encode` just above, so the CRC is right by construction; the header checks
        // still run (and cannot fail).
        // The batch's bytes are accounted already (by `encode`); its source offsets are not.
        self.allowance.take(
            records
                .len()
                .saturating_mul(std::mem::size_of::<i64>())
                .saturating_add(PER_OUTPUT),
            0,
        )?;
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
