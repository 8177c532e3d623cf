//! # strait-forward: the zero-copy record-batch forwarder
//!
//! Owns: the RecordBatch v2 view and rewriter (header rewrite plus CRC-32C, no decompression),
//! the re-encode path for the cases the protocol forces, and the fetch -> produce pipeline with
//! bounded memory and at-least-once delivery.
//!
//! Does not own: sockets, TLS or the Kafka APIs themselves (that is `strait-wire`), nor
//! configuration files, topic discovery or metrics exposition (that is the `strait` binary).
//!
//! ## The sans-IO core
//!
//! Everything below works on `bytes::Bytes` and performs no I/O:
//!
//! | Module | What it does |
//! |---|---|
//! | [`batch`] | [`FetchedRecords`] splits a fetch response's `records` into complete entries (Java's `ByteBufferLogInputStream` rules; a truncated tail ends iteration, it is not an error). [`RecordBatch`] is a validated (lengths, magic 2, codec, CRC-32C) zero-copy view of one v2 batch. |
//! | [`txn`] | [`AbortedTransactionFilter`]: read_committed filtering of aborted transactional batches and transaction markers. |
//! | [`rewrite`] | The pass-through path: [`rewrite_for_produce`] (baseOffset 0, leader epoch -1, the mirror's [`ProducerStamp`], attribute bits 3/4/6, new CRC; records copied verbatim), and the decisions [`drop_reason`] and [`needs_reencode`]. |
//! | [`mod@reencode`] | The slow path: decode, drop records below the fetch offset, renumber offsets, fix timestamps, change codec, split to the target's `max.message.bytes`; reports each output batch's source offsets. |
//! | [`legacy`] | Magic 0/1 message sets (including compressed wrappers) converted to v2. |
//! | [`merge`] | Re-batching: consecutive batches of one partition merged into one (uncompressed: record deltas rewritten; compressed: recompressed once with the same codec). |
//! | [`records`] | Zero-allocation walker over an uncompressed records section. |
//! | [`compression`] | gzip, xerial snappy, lz4 frame and zstd, with a hard cap on decompressed size. |
//! | [`log_limit`] | [`log_limit::LogLimiter`]: which occurrences of a repeating error reach the log (the first at once, then one per interval with the count of those held back); time passed in. The pipeline's retry warnings and the binary's refresh and stopped-partition reports use it. |
//!
//! ## Forwarding one fetched partition
//!
//! ```
//! use bytes::Bytes;
//! use strait_forward::{
//!     AbortedTransactionFilter, FetchedBatch, FetchedRecords, ProducerStamp, TargetPolicy,
//!     TxnDecision, drop_reason, needs_reencode, reencode, rewrite_for_produce,
//! };
//!
//! fn forward(
//!     records: Bytes,
//!     fetch_offset: i64,
//!     aborted: Vec<strait_forward::txn::AbortedTransaction>,
//!     mut stamp: ProducerStamp,
//!     policy: &TargetPolicy,
//! ) -> Result<(Vec<Bytes>, i64), strait_forward::CodecError> {
//!     let mut to_produce = Vec::new(); // one Produce request (or request slot) each
//!     let mut next_fetch = fetch_offset;
//!     let mut txn = AbortedTransactionFilter::new(aborted);
//!     let mut walker = FetchedRecords::new(records);
//!     for entry in walker.by_ref() {
//!         let entry = entry?;
//!         let decision = txn.classify_fetched(&entry)?;
//!         next_fetch = entry.next_offset(); // advance even past dropped entries
//!         if decision != TxnDecision::Keep {
//!             continue;
//!         }
//!         let produced = match &entry {
//!             FetchedBatch::V2(batch) => {
//!                 if drop_reason(batch).is_some() {
//!                     continue;
//!                 }
//!                 if needs_reencode(batch, fetch_offset, policy).is_none() {
//!                     let bytes = rewrite_for_produce(batch, stamp);
//!                     stamp = stamp.advanced(batch.record_count());
//!                     to_produce.push(bytes);
//!                     continue;
//!                 }
//!                 reencode(batch, fetch_offset, stamp, policy)?
//!             }
//!             FetchedBatch::Legacy(legacy) => legacy.reencode(fetch_offset, stamp, policy)?,
//!         };
//!         for out in produced {
//!             stamp = stamp.advanced(out.batch().record_count());
//!             to_produce.push(out.into_batch().into_bytes());
//!         }
//!     }
//!     // walker.truncated_tail_bytes() > 0: the broker cut the last batch; refetch from next_fetch.
//!     Ok((to_produce, next_fetch))
//! }
//! # let (out, next) = forward(Bytes::new(), 0, vec![], ProducerStamp::NONE, &TargetPolicy::default()).unwrap();
//! # assert!(out.is_empty() && next == 0);
//! ```
//!
//! ## Embedding the forwarder
//!
//! With the default feature `pipeline`, [`Forwarder`] mirrors partitions between two clusters
//! ([`Forwarder::builder`] over `strait-wire` clients, or [`Forwarder::new`] over your own
//! [`pipeline::Source`], [`pipeline::Target`] and [`pipeline::Positions`]). A `Forwarder` is a
//! cheap `Clone` handle; [`Forwarder::failures`] lists stopped partitions with their typed
//! [`Error`]. Two hooks see what it does: an [`observe::Observer`] for metrics and tracing, and
//! a [`pipeline::CommitHook`] ([`Forwarder::with_commit_hook`]) for state that must stay in step
//! with the committed positions (acknowledged batches with their exact offsets, in commit order). `examples/embed.rs` is a complete program; against a broker:
//!
//! ```text
//! SOURCE=127.0.0.1:9092 TARGET=127.0.0.1:9192 TOPIC=orders PARTITIONS=3 \
//!     cargo run -p strait-forward --example embed
//! ```
//!
//! (the target topic must exist; positions go to the source consumer group `GROUP`, default
//! `strait-embed`). Without default features the crate is the batch codec alone: no tokio, no
//! rustls, no `strait-wire`.
//!
//! ## Not supported
//!
//! * LZ4-compressed **magic 0** wrappers (written by Kafka < 0.10 with a broken LZ4 frame-header
//!   checksum): they fail with a decompression error. Magic 1 LZ4 and every other legacy codec
//!   work.
//! * Produce-side checks that need target topic configuration beyond `max.message.bytes`
//!   (keyless records for compacted targets, the timestamp window) are not made here.

pub mod batch;
mod checksum;
pub mod compression;
pub mod error;
#[cfg(feature = "pipeline")]
mod fetch;
/// Entry points of the fuzz targets (`fuzz/`); also run over their seeds by the unit tests.
#[cfg(any(test, feature = "unstable-fuzzing"))]
pub mod fuzzing;
pub mod legacy;
pub mod log_limit;
pub mod merge;
#[cfg(feature = "pipeline")]
pub mod observe;
#[cfg(feature = "pipeline")]
pub mod pipeline;
pub mod records;
pub mod reencode;
pub mod rewrite;
pub mod txn;

pub use batch::{Attributes, FetchedBatch, FetchedRecords, RecordBatch, TimestampType};
pub use compression::Compression;
#[cfg(feature = "pipeline")]
pub use error::Error;
pub use error::{CodecError, Result};
pub use legacy::LegacyBatch;
pub use merge::MergeKind;
#[cfg(feature = "pipeline")]
pub use pipeline::kafka::{
    ForwarderBuilder, GroupPositions, WireForwarder, WireSource, WireTarget, WireTransactions,
};
#[cfg(feature = "pipeline")]
pub use pipeline::{ExactlyOnce, Failure, Forwarder, OffsetOutOfRange, Route, Settings};
pub use reencode::{ReencodedBatch, reencode};
pub use rewrite::{
    DropReason, LogAppendTimePolicy, ProducerStamp, ReencodeReason, TargetPolicy, drop_reason,
    needs_reencode, rewrite_for_produce, rewrite_for_produce_into,
};
pub use txn::{AbortedTransactionFilter, TxnDecision};
