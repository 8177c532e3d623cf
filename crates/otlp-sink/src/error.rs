//! The crate's one error type.

use std::net::SocketAddr;
use std::time::Duration;

/// What can go wrong while running the sink, running or querying Jaeger, or waiting for spans.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}; pick a free port (or 127.0.0.1:0 for any)")]
    Bind {
        /// The address as given.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The listen address does not resolve to a socket address.
    #[error("{addr:?} is not a listen address; use HOST:PORT such as 127.0.0.1:4318")]
    Address {
        /// The address as given.
        addr: String,
    },
    /// `wait_for` gave up.
    #[error(
        "no matching spans after {waited:?} ({spans} span(s) received on {addr}); check that the \
         exporter points at http://{addr} and that spans are sampled and flushed"
    )]
    Timeout {
        /// How long it waited.
        waited: Duration,
        /// How many spans had arrived.
        spans: usize,
        /// The sink's address.
        addr: SocketAddr,
    },
    /// No Jaeger binary could be found or built.
    #[error(
        "no Jaeger binary: {detail}; run scripts/install-jaeger.sh (it builds Jaeger v2 from the \
         Go module proxy; needs Go) or set STRAIT_JAEGER to a Jaeger v2 binary"
    )]
    JaegerBinary {
        /// What failed.
        detail: String,
    },
    /// Jaeger did not come up.
    #[error("Jaeger did not start: {detail}; its log is {log}")]
    JaegerStart {
        /// What failed.
        detail: String,
        /// Jaeger's log file.
        log: std::path::PathBuf,
    },
    /// A query to Jaeger's query API failed.
    #[error(
        "Jaeger query {url} failed: {detail}; check that Jaeger runs and serves its query API \
         (the jaeger_query extension) at that address"
    )]
    Query {
        /// The URL asked.
        url: String,
        /// What failed.
        detail: String,
    },
    /// Jaeger answered, but not with what its query API returns.
    #[error(
        "Jaeger query {url} answered something unexpected: {detail}; is that a Jaeger v2 query \
         API (Jaeger up to v2.20 serves /api/traces)?"
    )]
    QueryAnswer {
        /// The URL asked.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// `wait_for_traces` gave up.
    #[error(
        "Jaeger at {url} has no matching traces of service {service:?} after {waited:?} \
         ({spans} span(s) found); check that the exporters point at Jaeger's OTLP endpoint and \
         that their spans are sampled and flushed"
    )]
    QueryTimeout {
        /// The query API's base URL.
        url: String,
        /// The service asked for.
        service: String,
        /// How long it waited.
        waited: Duration,
        /// How many spans the last answer had.
        spans: usize,
    },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
