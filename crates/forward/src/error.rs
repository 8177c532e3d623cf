//! The crate's errors, one enum per layer.
//!
//! [`CodecError`]: the batch codec (framing, CRCs, records, compression, rewrite, re-encode,
//! merge). It says what is wrong with which bytes; it knows nothing about clusters.
//!
//! [`Error`] (feature `pipeline`): the fetch -> produce pipeline. It wraps a codec error with the
//! partition it happened in, and adds what the clusters answered and why a partition stopped.
//! It names the concept to change (an [`OffsetOutOfRange`](crate::OffsetOutOfRange), a topic to
//! create), never a configuration key of a program embedding the forwarder.

use crate::compression::Compression;

/// Everything that can go wrong while reading, rewriting, re-encoding or merging record batches.
///
/// Every message says what was found and what to do about it. Corruption errors mean the bytes
/// must not be forwarded; the usual remedy is to refetch from the batch's offset and, if the error
/// repeats, to stop mirroring that partition and investigate the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A buffer handed to [`RecordBatch::parse`](crate::RecordBatch::parse) is shorter than the
    /// fixed 61-byte v2 header.
    #[error(
        "record batch is {len} bytes, shorter than the 61-byte v2 header; the data is cut or \
         corrupt: refetch from the batch's offset (use FetchedRecords to split fetch data)"
    )]
    BatchTooShort {
        /// Bytes available.
        len: usize,
    },

    /// The batchLength field does not match the number of bytes handed over.
    #[error(
        "record batch declares batchLength {declared} but {actual} bytes follow the 12-byte log \
         overhead; pass exactly one complete batch (use FetchedRecords to split fetch data)"
    )]
    BatchLengthMismatch {
        /// The batchLength field.
        declared: i32,
        /// Bytes actually present after the 12-byte log overhead.
        actual: usize,
    },

    /// The magic byte is not 2. Magic 0/1 entries are legacy message sets, see [`crate::legacy`].
    #[error(
        "entry at offset {offset} has magic {magic}, not a RecordBatch v2; legacy magic 0/1 \
         entries must be converted with the legacy module before forwarding"
    )]
    NotV2 {
        /// The entry's offset field.
        offset: i64,
        /// The magic byte found.
        magic: i8,
    },

    /// Framing of a fetch response's records is broken (Java's `CorruptRecordException`).
    #[error(
        "fetch data is corrupt at byte {position}: {reason}; refetch the partition from the last \
         complete batch's next offset, and stop mirroring it if the error repeats"
    )]
    CorruptFraming {
        /// Byte position of the bad entry in the fetched records.
        position: usize,
        /// What is wrong.
        reason: String,
    },

    /// The stored CRC-32C of a v2 batch does not match its bytes.
    #[error(
        "CRC-32C mismatch in the record batch at offset {base_offset} (stored {stored:#010x}, \
         computed {computed:#010x}): the bytes were corrupted on the source or in transit; do not \
         forward them, refetch from offset {base_offset}"
    )]
    CrcMismatch {
        /// The batch's baseOffset.
        base_offset: i64,
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over bytes 21..end.
        computed: u32,
    },

    /// The stored CRC-32 of a legacy (magic 0/1) message does not match its bytes.
    #[error(
        "CRC-32 mismatch in the legacy message at offset {offset} (stored {stored:#010x}, \
         computed {computed:#010x}): the message is corrupt; do not forward it, refetch from offset {offset}"
    )]
    LegacyCrcMismatch {
        /// The message's offset field.
        offset: i64,
        /// CRC stored in the message.
        stored: u32,
        /// CRC computed over the magic byte to the end.
        computed: u32,
    },

    /// A v2 batch header holds values no valid batch can have.
    #[error(
        "record batch at offset {base_offset} is malformed: {reason}; do not forward it, refetch \
         from offset {base_offset} and stop mirroring the partition if it repeats"
    )]
    MalformedBatch {
        /// The batch's baseOffset.
        base_offset: i64,
        /// What is wrong.
        reason: &'static str,
    },

    /// The codec bits name a codec that does not exist (5, 6 or 7), or zstd in a legacy message.
    #[error(
        "compression codec id {id} is not a Kafka codec this forwarder knows (0 none, 1 gzip, \
         2 snappy, 3 lz4, 4 zstd; zstd only in magic 2); the data is corrupt or from a newer Kafka"
    )]
    UnknownCompression {
        /// The codec id found in the attributes.
        id: u8,
    },

    /// One record inside a records section is malformed.
    #[error(
        "record #{index} of the batch is malformed: {reason}; the batch is corrupt and must not be \
         forwarded"
    )]
    MalformedRecord {
        /// Zero-based position of the record in the batch.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },

    /// The records section ended before the declared number of records.
    #[error(
        "the records section holds {found} records but the batch header declares {declared}; \
         the batch is corrupt and must not be forwarded"
    )]
    RecordCountMismatch {
        /// recordsCount from the header.
        declared: i32,
        /// Records actually decoded.
        found: usize,
    },

    /// Bytes remain after the declared number of records.
    #[error(
        "{extra} bytes remain after the {count} declared records; the batch is corrupt (Kafka \
         rejects it as an incorrect declared batch size) and must not be forwarded"
    )]
    TrailingRecordBytes {
        /// Records decoded.
        count: usize,
        /// Unconsumed bytes.
        extra: usize,
    },

    /// Decompression would exceed the caller's output cap.
    #[error(
        "{codec} data decompresses to more than {limit} bytes; if the batch is legitimate raise \
         the decompression limit (TargetPolicy::max_decompressed_bytes), otherwise it is a \
         decompression bomb and must be dropped"
    )]
    DecompressedTooLarge {
        /// Codec of the data.
        codec: Compression,
        /// The cap that was hit.
        limit: usize,
    },

    /// Re-encoding a batch needs more working memory than the caller allowed. The pipeline
    /// reserves `needed` bytes of its memory budget and tries again, or stops the partition with
    /// [`Error::CodecMemory`] when even the whole budget is too small.
    #[error(
        "re-encoding the batch needs at least {needed} bytes of working memory (decompressed \
         records, per-record bookkeeping and the new batches) but only {allowance} were allowed; \
         allow more, or forward the batch unchanged"
    )]
    OverAllowance {
        /// Bytes that would let the work go on (a lower bound when the decompressed size is
        /// not known yet).
        needed: usize,
        /// Bytes that were allowed.
        allowance: usize,
    },

    /// The compressed payload could not be decompressed.
    #[error("{codec} decompression failed ({source}); the batch payload is corrupt, refetch it")]
    Decompress {
        /// Codec of the data.
        codec: Compression,
        /// The codec library's error.
        #[source]
        source: std::io::Error,
    },

    /// Compressing a re-encoded batch failed.
    #[error(
        "{codec} compression failed ({source}); try another codec or compression level for the target"
    )]
    Compress {
        /// Codec requested.
        codec: Compression,
        /// The codec library's error.
        #[source]
        source: std::io::Error,
    },

    /// A single record does not fit into a batch within the target's size limit.
    #[error(
        "the record at source offset {offset} needs a {size}-byte batch, more than the target \
         limit of {limit} bytes; raise max.message.bytes on the target topic"
    )]
    RecordTooLarge {
        /// Source offset of the record.
        offset: i64,
        /// Size of the smallest batch that holds it (including the 12-byte log overhead).
        size: usize,
        /// The target limit.
        limit: usize,
    },

    /// A control batch (transaction marker) was handed to a path that produces it.
    #[error(
        "control batch at offset {base_offset} cannot be produced: only transaction coordinators \
         write markers and the target rejects it with INVALID_RECORD; drop control batches \
         (see AbortedTransactionFilter) and advance past them"
    )]
    ControlBatch {
        /// The batch's baseOffset.
        base_offset: i64,
    },

    /// Batches handed to [`merge`](crate::merge::merge) cannot be merged (a caller bug: check
    /// [`compatible`](crate::merge::compatible) first).
    #[error(
        "record batch at offset {base_offset} cannot be merged: {reason}; check \
         merge::compatible before merging and produce such batches one by one"
    )]
    NotMergeable {
        /// The offending batch's baseOffset (-1 when no batch was given).
        base_offset: i64,
        /// Why it cannot be merged.
        reason: &'static str,
    },

    /// A control batch does not hold a well-formed control record.
    #[error(
        "control batch at offset {base_offset} is malformed: {reason}; the source log is corrupt, \
         stop mirroring the partition and investigate"
    )]
    MalformedControlRecord {
        /// The batch's baseOffset.
        base_offset: i64,
        /// What is wrong.
        reason: &'static str,
    },

    /// A legacy (magic 0/1) message is malformed.
    #[error(
        "legacy message at offset {offset} is malformed: {reason}; do not forward it, refetch from \
         offset {offset} and stop mirroring the partition if it repeats"
    )]
    MalformedLegacy {
        /// The message's offset field.
        offset: i64,
        /// What is wrong.
        reason: &'static str,
    },

    /// A lower-level error while processing the batch at `base_offset`.
    #[error("record batch at offset {base_offset}: {source}")]
    InBatch {
        /// The batch's baseOffset (or a legacy entry's offset).
        base_offset: i64,
        /// The underlying error.
        #[source]
        source: Box<CodecError>,
    },
}

impl CodecError {
    /// Attaches the offset of the batch being processed, unless the error already names it.
    pub(crate) fn in_batch(self, base_offset: i64) -> CodecError {
        match self {
            e @ (CodecError::MalformedRecord { .. }
            | CodecError::RecordCountMismatch { .. }
            | CodecError::TrailingRecordBytes { .. }
            | CodecError::DecompressedTooLarge { .. }
            | CodecError::Decompress { .. }
            | CodecError::Compress { .. }
            | CodecError::UnknownCompression { .. }) => CodecError::InBatch {
                base_offset,
                source: Box::new(e),
            },
            e => e,
        }
    }
}

/// Shorthand for results of the batch codec.
pub type Result<T, E = CodecError> = std::result::Result<T, E>;

/// Why the pipeline failed a call or stopped a partition.
///
/// A partition that stops on one of these stays stopped (listed by
/// [`Forwarder::failures`](crate::Forwarder::failures)) until it is revoked or assigned again;
/// every message says what the operator has to change.
#[cfg(feature = "pipeline")]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A source batch could not be read, rewritten or re-encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),

    /// A call to the source or target cluster failed in a way retrying cannot fix.
    #[error("{0}")]
    Io(crate::pipeline::io::IoError),

    /// The target refused a batch of a partition; the partition stopped after committing what
    /// the target had acknowledged.
    #[error("mirroring into {partition} stopped: {detail}")]
    Target {
        /// The target `topic-partition`.
        partition: String,
        /// The target's answer, with what to do.
        detail: crate::pipeline::io::IoError,
    },

    /// The source no longer has the offset the mirror needs next.
    #[error(
        "source offset {offset} of {partition} is no longer available ({detail}); the records \
         from there to the log start were deleted before they were mirrored. To continue and accept \
         the gap, restart with the out-of-range policy Earliest (or Latest)"
    )]
    OffsetOutOfRange {
        /// The source `topic-partition`.
        partition: String,
        /// The offset the mirror needed.
        offset: i64,
        /// What the broker said.
        detail: String,
    },

    /// A source batch of a partition could not be processed.
    #[error("source partition {partition}: {source}")]
    Partition {
        /// The source `topic-partition`.
        partition: String,
        /// The underlying error.
        #[source]
        source: Box<Error>,
    },

    /// Re-encoding a source batch needs more memory than the whole memory budget.
    #[error(
        "re-encoding the batch at or after offset {offset} needs {needed} \
         bytes of working memory, more than the whole memory budget of {budget} bytes (a batch \
         holding very many small records, or decompressing to much more than it weighs). Raise \
         the memory budget (Settings::memory_budget) above {needed} bytes, or lower the \
         decompression limit (Settings::max_decompressed_bytes) to refuse such batches sooner"
    )]
    CodecMemory {
        /// The position the partition was fetching from.
        offset: i64,
        /// Working memory the batch needs (a lower bound).
        needed: usize,
        /// The whole memory budget.
        budget: usize,
    },

    /// A pipeline setting is out of range.
    #[error("invalid forwarder setting {field}: {detail}")]
    Settings {
        /// The setting's name.
        field: &'static str,
        /// The accepted range.
        detail: String,
    },

    /// The partition was stopped (revoked or shut down) before it could start.
    #[error("stopped before the partition started")]
    Stopped,
}
