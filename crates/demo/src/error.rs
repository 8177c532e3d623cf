//! The demo's one error type.

use std::path::PathBuf;

/// What can stop the demo producer or consumer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A properties file could not be read.
    #[error("cannot read {}: {source}; check the --props path", path.display())]
    ReadProps {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A command-line value is malformed.
    #[error("{0}")]
    Usage(String),
    /// The Kafka client failed (connection, TLS, ACLs, broker errors).
    #[error("{0}")]
    Kafka(#[from] strait_wire::Error),
    /// A fetched batch could not be read.
    #[error("reading fetched records: {0}")]
    Records(#[from] strait_forward::CodecError),
    /// The topic does not exist (or is not visible to this principal).
    #[error(
        "topic {topic} is not available after {waited_secs} s ({reason}); create it or grant Describe on it"
    )]
    TopicUnavailable {
        /// The topic.
        topic: String,
        /// How long the demo waited.
        waited_secs: u64,
        /// The last metadata answer.
        reason: String,
    },
    /// The OpenTelemetry exporter could not be set up.
    #[error("--otlp-endpoint: {0}")]
    Tracing(String),
    /// The consumer group membership ended.
    #[error("consumer group: {0}")]
    Group(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
