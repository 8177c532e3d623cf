//! # strait-wire: a pure-Rust Kafka wire client
//!
//! Owns: connections to Kafka brokers (TCP, TLS and mTLS through rustls, SASL PLAIN and SCRAM),
//! request framing and correlation, ApiVersions negotiation, and the client side of the Kafka
//! APIs a mirror needs (metadata, list offsets, fetch, produce, consumer groups, offsets, admin).
//! Message codecs come from the `kafka-protocol` crate.
//!
//! Does not own: the contents of record batches. Fetch returns the raw bytes the broker sent and
//! Produce sends raw bytes the caller built; parsing and rewriting batches is `strait-forward`'s job.
//!
//! ## Layers
//!
//! - [`Connection`]: one broker. [`Connection::send`] sends any kafka-protocol request at a
//!   version chosen with [`Connection::pick_version`]; many requests can be in flight.
//! - [`Client`]: a cluster. Metadata cache, a connection per broker with reconnect backoff,
//!   and typed operations that route partitions to leaders and retry: [`Client::produce`],
//!   [`Client::fetch`], [`Client::list_offsets`], [`Client::init_producer_id`].
//! - [`ClientConfig`]: Kafka's own client property names (`bootstrap.servers`,
//!   `security.protocol`, `ssl.*`, `sasl.*`, ...).

#![forbid(unsafe_code)]

pub mod cluster;
pub mod config;
pub mod conn;
pub mod error;
pub mod fetch;
pub(crate) mod frame;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod producer_id;
pub(crate) mod sasl;
pub(crate) mod tls;
pub mod topic;
pub(crate) mod version;

pub use cluster::Client;
pub use config::{ClientConfig, SaslMechanism, SecurityProtocol};
pub use conn::Connection;
pub use error::{Error, Result, TlsFailure};
pub use fetch::{
    AbortedTransaction, FetchOptions, FetchPartition, FetchedPartition, IsolationLevel,
};
pub use metadata::{BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo};
pub use offsets::{ListedOffset, OffsetSpec};
pub use produce::{
    Acks, PartitionProduceResponse, ProduceAck, ProduceBatch, ProduceOptions, ProduceResult,
    RecordError,
};
pub use producer_id::ProducerIdentity;
pub use topic::{TopicId, TopicPartition};

/// The codec crate this client is built on, re-exported so callers of [`Connection::send`] use
/// the same version.
pub use kafka_protocol;
/// Kafka's error codes.
pub use kafka_protocol::ResponseError;

// Consumer groups, committed offsets and admin operations (groups/admin author).
pub mod admin;
pub mod group;
pub mod offset_commit;
