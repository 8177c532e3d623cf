//! # strait-forward: the zero-copy record-batch forwarder
//!
//! Owns: the RecordBatch v2 view and rewriter (header rewrite plus CRC-32C, no decompression),
//! the re-encode path for the cases the protocol forces, and the fetch -> produce pipeline with
//! bounded memory and at-least-once delivery.
//!
//! Does not own: sockets, TLS or the Kafka APIs themselves (that is `strait-wire`), nor
//! configuration files, topic discovery or metrics exposition (that is the `strait` binary).
