//! # strait-wire: a pure-Rust Kafka wire client
//!
//! Owns: connections to Kafka brokers (TCP, TLS and mTLS through rustls, SASL PLAIN, SCRAM,
//! OAUTHBEARER and AWS_MSK_IAM; see `docs/security.md` for the OAUTHBEARER token sources),
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
//! - [`TransactionalProducer`] ([`Client::transactional_producer`]): Kafka transactions over
//!   caller-built batches: init (fencing older producers with the same transactional id),
//!   begin, produce (partitions added to the transaction first), offsets committed inside the
//!   transaction (AddOffsetsToTxn + TxnOffsetCommit, KIP-447 generation), commit or abort. The
//!   protocol itself is [`TxnMachine`], a state machine without I/O (module [`txn`]).
//! - [`Error`]: one error type; [`Error::class`] ([`ErrorClass`]) says what to do about a failure
//!   (refresh metadata, find the coordinator again, resend only if idempotent, give up), and
//!   [`Backoff`] computes retry delays (pure: the caller sleeps).
//! - [`ClientConfig`]: Kafka's own client property names (`bootstrap.servers`,
//!   `security.protocol`, `ssl.*`, `sasl.*`, ...).
//!
//! ```no_run
//! # async fn demo() -> strait_wire::Result<()> {
//! use strait_wire::{Client, ClientConfig, FetchOptions, FetchPartition, TopicPartition};
//! let cfg = ClientConfig::from_properties([
//!     ("bootstrap.servers", "broker-1:9093"),
//!     ("security.protocol", "SASL_SSL"),
//!     ("ssl.ca.location", "/etc/kafka/ca.pem"),
//!     ("sasl.mechanism", "SCRAM-SHA-512"),
//!     ("sasl.username", "mirror"),
//!     ("sasl.password", "secret"),
//! ])?;
//! let client = Client::connect(cfg).await?;
//! let tp = TopicPartition::new("orders", 0)?;
//! let got = client.fetch(&[FetchPartition::new(tp, 0)], &FetchOptions::default()).await?;
//! got[0].check(client.principal())?;
//! let raw_batches: &bytes::Bytes = &got[0].records; // exactly what the broker sent
//! # let _ = raw_batches; Ok(()) }
//! ```
//!
//! ## Behaviour worth knowing
//!
//! - [`Client::fetch`] is sessionless (every Fetch a full request); [`Client::fetch_from`] sends
//!   one request to one node, optionally in an incremental fetch session (KIP-227) that the
//!   caller keeps ([`fetch::SessionFetch`]). Fetch uses topic ids (v13+) when metadata has them,
//!   names (v12) otherwise; it sends the leader epoch from metadata so stale leaders are fenced.
//! - Produce sends one raw batch per partition (acks=all by default; acks=0 is not offered).
//!   After an ambiguous failure (disconnect, timeout) only idempotent batches (producer id >= 0
//!   in the batch header) are resent; the broker deduplicates them.
//! - `ssl.endpoint.identification.algorithm=` (empty) turns off broker host name verification.
//!   That is insecure and logged as a warning; the certificate chain is still verified.
//! - Keys and stores: PEM files or inline PEM; encrypted PKCS#8 keys (`ENCRYPTED PRIVATE KEY`,
//!   decrypted with `ssl.key.password`); PKCS#12 keystores and truststores
//!   (`ssl.keystore.type=PKCS12`, `ssl.keystore.location`, `ssl.keystore.password`, and the
//!   `ssl.truststore.*` equivalents; with no type the file's contents decide). JKS stores are
//!   refused with the `keytool -importkeystore` command that converts them to PKCS#12.
//!   Passwords are [`config::Password`]s, whose `Debug` is `<redacted>`.
//! - Response frames are capped at `receive.message.max.bytes` (100 MiB) before decoding.

#![forbid(unsafe_code)]

pub(crate) mod aws;
#[cfg(feature = "aws-sdk")]
mod aws_sdk;
pub mod backoff;
pub(crate) mod cleartext;
pub mod client;
mod coalesce;
pub mod config;
pub mod conn;
pub mod error;
#[cfg(test)]
mod fake_broker;
pub mod fetch;
pub(crate) mod frame;
// Also built for the unit tests: they run the entry points over the fuzz seeds on stable.
#[cfg(any(test, feature = "unstable-fuzzing"))]
pub mod fuzzing;
pub mod grpc;
pub mod http;
pub mod metadata;
pub(crate) mod oauth;
pub mod offsets;
pub mod produce;
pub mod producer_id;
pub(crate) mod proxy;
pub(crate) mod resource_config;
pub(crate) mod route;
pub(crate) mod sasl;
pub(crate) mod tls;
pub mod topic;
pub mod txn;
pub mod txn_producer;
pub(crate) mod version;

pub use backoff::Backoff;
pub use client::Client;
pub use config::{ClientConfig, SaslMechanism, SecurityProtocol};
pub use conn::Connection;
pub use error::{Error, ErrorClass, RecordError, Result, TlsFailure, TxnFailure};
pub use fetch::{AbortedTransaction, FetchOptions, FetchPartition, FetchedPartition, Isolation};
pub use metadata::{BrokerInfo, ClusterMetadata, PartitionInfo, PartitionLeader, TopicInfo};
pub use offsets::{ListedOffset, OffsetSpec};
pub use produce::{
    Acks, PartitionProduceResponse, ProduceAck, ProduceBatch, ProduceOptions, ProduceResult,
};
pub use producer_id::ProducerIdentity;
pub use topic::{TopicId, TopicPartition};
pub use txn::{TxnMachine, TxnState};
pub use txn_producer::TransactionalProducer;

/// The codec crate this client is built on, re-exported so callers of [`Connection::send`] use
/// the same version.
pub use kafka_protocol;
/// Kafka's error codes.
pub use kafka_protocol::ResponseError;

// Consumer groups, committed offsets and admin operations (groups/admin author).
pub mod admin;
pub mod group;
pub mod offset_commit;
