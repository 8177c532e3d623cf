//! The binary's one error type and its exit codes.

use std::path::PathBuf;
use std::time::Duration;

use crate::exit;

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
    /// A `${provider:...}` reference in a client property cannot be resolved.
    #[error("{key}: {source}")]
    Reference {
        /// `source.<property>` or `target.<property>`, with its origin.
        key: String,
        /// What is wrong with the reference (never its value).
        #[source]
        source: Box<ReferenceError>,
    },
    /// A MirrorMaker file declares config providers Strait cannot use.
    #[error("{}: {source}", path.display())]
    Providers {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: DeclarationError,
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
    /// A runtime failure reported by the mirror (no underlying error to carry).
    #[error("{0}")]
    Runtime(String),
    /// A cluster could not be reached or refused the mirror at start.
    #[error("{side} cluster {alias}: {source}")]
    Connect {
        /// `source` or `target`.
        side: &'static str,
        /// The cluster's alias.
        alias: String,
        /// The client's error (what failed and what to do).
        #[source]
        source: Box<strait_wire::Error>,
    },
    /// An admin operation on a cluster failed (creating a topic, adding partitions...).
    #[error("{action}: {source}")]
    Admin {
        /// What the mirror tried, naming the topic.
        action: String,
        /// The client's error.
        #[source]
        source: Box<strait_wire::Error>,
    },
    /// The forwarder could not start on the target cluster.
    #[error("target cluster {alias}: {}", forward_message(source))]
    Start {
        /// The target cluster's alias.
        alias: String,
        /// The forwarder's error.
        #[source]
        source: Box<strait_forward::Error>,
    },
    /// The forwarder failed (assigning partitions).
    #[error("{}", forward_message(.0))]
    Forward(#[source] Box<strait_forward::Error>),
    /// The final commit of the source positions failed at shutdown.
    #[error("final commit failed: {}", forward_message(.0))]
    FinalCommit(#[source] Box<strait_forward::Error>),
    /// A Kafka client error (connection, authentication, authorization, broker error).
    #[error("{0}")]
    Wire(#[from] strait_wire::Error),
    /// `strait check` found rights the mirror needs missing (the report printed the grants).
    #[error(
        "{missing} right{s} the mirror needs {are} missing; grant {them} with the kafka-acls.sh \
         command{s} above, then run strait check again",
        s = if *.missing == 1 { "" } else { "s" },
        are = if *.missing == 1 { "is" } else { "are" },
        them = if *.missing == 1 { "it" } else { "them" },
    )]
    RightsMissing {
        /// How many.
        missing: usize,
    },
    /// `strait status` could not read the instance.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// `strait switchover` / `strait failback` refused a step or waited too long.
    #[error("{0}")]
    Handover(#[from] HandoverError),
}

impl From<strait_forward::Error> for Error {
    fn from(e: strait_forward::Error) -> Self {
        Error::Forward(Box::new(e))
    }
}

impl Error {
    /// The process exit code for this error ([`crate::exit`]): configuration errors, a cluster
    /// that cannot be reached, missing rights and other runtime errors each have their own.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Connect { .. } => exit::UNREACHABLE,
            Error::RightsMissing { .. } => exit::RIGHTS_MISSING,
            Error::Status(crate::status::StatusError::Unreachable { .. }) => exit::UNREACHABLE,
            Error::Status(crate::status::StatusError::Url { .. }) => exit::CONFIG,
            Error::Status(_) => exit::RUNTIME,
            Error::Bind { .. }
            | Error::Runtime(_)
            | Error::Admin { .. }
            | Error::Start { .. }
            | Error::Forward(_)
            | Error::FinalCommit(_)
            | Error::Wire(_)
            | Error::Handover(_) => exit::RUNTIME,
            _ => exit::CONFIG,
        }
    }

    /// True for errors caused by configuration (files, environment, command line).
    pub fn is_config(&self) -> bool {
        self.exit_code() == exit::CONFIG
    }
}

/// A forwarder error as the operator of the `strait` binary reads it: the forwarder's message
/// (which names the concept), followed by the configuration key that changes it.
pub fn forward_message(e: &strait_forward::Error) -> String {
    match config_advice(e) {
        Some(advice) => format!("{e}; {advice}"),
        None => e.to_string(),
    }
}

/// The forwarder's stopped partitions, each with its message as the operator reads it.
pub fn failure_messages(
    failures: &[strait_forward::Failure],
) -> Vec<(strait_wire::TopicPartition, String)> {
    failures
        .iter()
        .map(|f| (f.partition.clone(), forward_message(&f.error)))
        .collect()
}

/// The configuration key of the binary that answers a forwarder error, if one does.
fn config_advice(e: &strait_forward::Error) -> Option<&'static str> {
    use strait_forward::Error as F;
    match e {
        F::OffsetOutOfRange { .. } => Some(
            "in strait's configuration that is mirror.on_offset_out_of_range = \"earliest\" \
             (or \"latest\")",
        ),
        F::Io(io) | F::Target { detail: io, .. } if io.code == UNKNOWN_TOPIC => {
            Some("strait creates missing target topics with mirror.create_topics = true")
        }
        F::Partition { source, .. } => config_advice(source),
        _ => None,
    }
}

/// The Kafka error name of a missing topic, as the forwarder reports it.
const UNKNOWN_TOPIC: &str = "UNKNOWN_TOPIC_OR_PARTITION";

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// Config provider errors (crate::config::providers): defined here, below the
// configuration, because `Error` wraps them while the providers return `Error`.

/// The classes of Kafka's built-in config providers, as the errors name them (kept equal to the
/// providers' table by a test in [`crate::config::providers`]).
pub(crate) const BUILT_IN_CLASSES: &str = "org.apache.kafka.common.config.provider.FileConfigProvider, \
     org.apache.kafka.common.config.provider.DirectoryConfigProvider, \
     org.apache.kafka.common.config.provider.EnvVarConfigProvider";

/// A provider declaration that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeclarationError {
    /// `config.providers` names a provider without a class.
    #[error(
        "config.providers.{name}.class: missing; set it to one of Kafka's built-in providers: {}",
        BUILT_IN_CLASSES
    )]
    MissingClass {
        /// The provider's name.
        name: String,
    },
    /// A class Strait does not implement (a custom or vendor provider).
    #[error(
        "config.providers.{name}.class = {class}: not supported; Strait implements {}",
        BUILT_IN_CLASSES
    )]
    UnknownClass {
        /// The provider's name.
        name: String,
        /// The class.
        class: String,
    },
    /// A `param.*` the provider does not have.
    #[error(
        "config.providers.{name}.param.{param}: not a parameter of this provider (file and \
         directory have allowed.paths, env has allowlist.pattern); remove it"
    )]
    UnknownParam {
        /// The provider's name.
        name: String,
        /// The parameter.
        param: String,
    },
    /// `allowlist.pattern` is not a regular expression.
    #[error(
        "config.providers.{name}.param.allowlist.pattern: not a valid regular expression: {why}"
    )]
    BadPattern {
        /// The provider's name.
        name: String,
        /// The regex crate's explanation.
        why: String,
    },
}

/// A reference that cannot be resolved. Names the reference, never a value.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The provider is not declared.
    #[error("{reference}: config provider \"{provider}\" is not declared; {how}")]
    Undeclared {
        /// The reference as written.
        reference: String,
        /// The provider's name.
        provider: String,
        /// How to declare it.
        how: &'static str,
    },
    /// The reference lacks a part its provider needs, or has one it does not take.
    #[error("{reference}: {why}")]
    Malformed {
        /// The reference as written.
        reference: String,
        /// What is wrong and the expected form.
        why: String,
    },
    /// A file could not be read.
    #[error(
        "{reference}: provider \"{provider}\" cannot read {}: {source}; check the path and its \
         permissions",
        path.display()
    )]
    Read {
        /// The reference as written.
        reference: String,
        /// The provider's name.
        provider: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The properties file has no such key (or is not a properties file).
    #[error("{reference}: provider \"{provider}\": {} {what}", path.display())]
    NotFound {
        /// The reference as written.
        reference: String,
        /// The provider's name.
        provider: String,
        /// The file.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
    /// The environment variable is not set (or not allowed).
    #[error("{reference}: provider \"{provider}\": {why}")]
    Env {
        /// The reference as written.
        reference: String,
        /// The provider's name.
        provider: String,
        /// What is wrong.
        why: String,
    },
    /// The path is outside the provider's `allowed.paths`.
    #[error(
        "{reference}: provider \"{provider}\": {} is not under config.providers.{provider}.param.allowed.paths",
        path.display()
    )]
    NotAllowed {
        /// The reference as written.
        reference: String,
        /// The provider's name.
        provider: String,
        /// The path asked for.
        path: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use strait_forward::Error as F;
    use strait_forward::pipeline::io::{FailureAction, IoError};

    use super::*;

    fn out_of_range() -> F {
        F::OffsetOutOfRange {
            partition: "orders-3".into(),
            offset: 42,
            detail: "OFFSET_OUT_OF_RANGE".into(),
        }
    }

    #[test]
    fn forwarder_errors_gain_the_binary_config_key_that_changes_them() {
        let m = forward_message(&out_of_range());
        // The forwarder names the concept; the binary adds its own key.
        assert!(m.contains("out-of-range policy"), "{m}");
        assert!(
            m.ends_with("mirror.on_offset_out_of_range = \"earliest\" (or \"latest\")"),
            "{m}"
        );
        let nested = F::Partition {
            partition: "orders-3".into(),
            source: Box::new(out_of_range()),
        };
        assert!(forward_message(&nested).contains("mirror.on_offset_out_of_range"));

        let missing = F::Target {
            partition: "orders-0".into(),
            detail: IoError::new(
                FailureAction::Fatal,
                "UNKNOWN_TOPIC_OR_PARTITION",
                "target topic orders does not exist; create it on the target cluster",
            ),
        };
        assert!(forward_message(&missing).ends_with("mirror.create_topics = true"));

        // Errors without a config key are passed through unchanged.
        let settings = F::Settings {
            field: "max_in_flight",
            detail: "must be 1 to 5".into(),
        };
        assert_eq!(forward_message(&settings), settings.to_string());
    }

    #[test]
    fn forwarder_errors_are_wrapped_not_flattened() {
        let e = Error::from(out_of_range());
        assert_eq!(e.exit_code(), 1);
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source, Some(out_of_range().to_string()));
        let stop = Error::FinalCommit(Box::new(out_of_range()));
        assert!(
            stop.to_string()
                .starts_with("final commit failed: source offset 42")
        );
    }
}

// `strait switchover` / `strait failback` (crate::failover::plan): defined here, below the
// failover module, so that this enum can carry it without an import loop.
/// Errors of the switchover and failback commands.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// A step cannot be done in the clusters' current state.
    #[error("{step}: {reason}")]
    Refused {
        /// The step's name.
        step: &'static str,
        /// Why, and what to do.
        reason: String,
    },
    /// A step kept waiting for the operator beyond `--timeout`.
    #[error(
        "{step}: still waiting after {waited:?}: {reason}; run the command again to continue \
         (or give a longer --timeout)"
    )]
    Timeout {
        /// The step's name.
        step: &'static str,
        /// How long the command waited.
        waited: Duration,
        /// What it waits for.
        reason: String,
    },
    /// The actions ran but the clusters do not show the step done (another process changed
    /// them meanwhile).
    #[error("{step}: not done after its actions ran: {reason}; run the command again")]
    NotSettled {
        /// The step's name.
        step: &'static str,
        /// The step's state as read back.
        reason: String,
    },
}
