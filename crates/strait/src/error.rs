//! The binary's one error type and its exit codes.

use std::path::PathBuf;

/// Everything that can go wrong in the `strait` binary outside the forwarding engine.
///
/// Configuration problems name the key (`section.key`, plus where the value came from when it was
/// not the TOML file) and the expected form, so the message alone tells the operator what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration file could not be read.
    #[error("cannot read {}: {source}; check the path and its permissions", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML file is not valid TOML.
    #[error("{}: not valid TOML: {message}", path.display())]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A Java .properties file has a syntax error.
    #[error("{}:{line}: {message}", path.display())]
    Properties {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A value has the wrong form.
    #[error("{key}: expected {expected}, got {got}")]
    Invalid {
        /// The key, e.g. `mirror.start` or `mirror.start (from STRAIT_MIRROR_START)`.
        key: String,
        /// The accepted form, e.g. `"earliest" or "latest"`.
        expected: String,
        /// The value that was given, quoted.
        got: String,
    },
    /// A key that this section does not have.
    #[error("{key}: unknown key{suggestion}")]
    UnknownKey {
        /// The key.
        key: String,
        /// `; did you mean "x"?` or a list of the valid keys; starts with `; `.
        suggestion: String,
    },
    /// A Kafka client property was rejected by `strait-wire` (unknown key, bad value, conflict).
    #[error("{key}: {message}")]
    ClientProperty {
        /// `source.<property>` or `target.<property>`, with its origin.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A required key is missing.
    #[error("{key}: missing; {hint}")]
    Missing {
        /// The key.
        key: String,
        /// How to provide it.
        hint: String,
    },
    /// A topic pattern is not a valid regular expression.
    #[error("{key}: invalid regular expression {pattern:?}: {reason}")]
    Regex {
        /// The key.
        key: String,
        /// The pattern as given.
        pattern: String,
        /// The regex crate's explanation.
        reason: String,
    },
    /// A MirrorMaker option or setting that Strait does not implement.
    #[error("not supported: {what}; {hint}")]
    Unsupported {
        /// The option and value.
        what: String,
        /// What to do instead.
        hint: String,
    },
    /// The logging setup was rejected (bad level directive and the like).
    #[error("{key}: {message}")]
    Logging {
        /// `log.level` or `RUST_LOG`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The metrics/health HTTP listener could not be bound.
    #[error(
        "metrics.listen: cannot listen on {addr}: {source}; pick a free port or set metrics.listen = \"\" to disable"
    )]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A runtime failure reported by the mirror.
    #[error("{0}")]
    Runtime(String),
    /// A Kafka client error (connection, authentication, authorization, broker error).
    #[error("{0}")]
    Wire(#[from] strait_wire::Error),
}

impl Error {
    /// The process exit code for this error: 2 for configuration errors, 1 for runtime errors.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Bind { .. } | Error::Runtime(_) | Error::Wire(_) => 1,
            _ => 2,
        }
    }

    /// True for errors caused by configuration (files, environment, command line).
    pub fn is_config(&self) -> bool {
        self.exit_code() == 2
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
