//! The crate's one error type.

use std::net::SocketAddr;
use std::time::Duration;

/// What can go wrong while running the sink or waiting for spans.
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
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
