//! # strait-wire: a pure-Rust Kafka wire client
//!
//! Owns: connections to Kafka brokers (TCP, TLS and mTLS through rustls, SASL PLAIN and SCRAM),
//! request framing and correlation, ApiVersions negotiation, and the client side of the Kafka
//! APIs a mirror needs (metadata, list offsets, fetch, produce, consumer groups, offsets, admin).
//! Message codecs come from the `kafka-protocol` crate.
//!
//! Does not own: the contents of record batches. Fetch returns the raw bytes the broker sent and
//! Produce sends raw bytes the caller built; parsing and rewriting batches is `strait-forward`'s job.
