//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong while fetching jars, generating certificates, starting brokers or running tools.
///
/// Messages say what happened and what to do; the ones about brokers and tools carry the tail of the output so a
/// failing test shows the cause without digging through temp dirs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `scripts/kafka-jars.sh` failed or printed no lib dir.
    #[error(
        "fetching the Kafka {line} jars failed: {detail}. Run `scripts/kafka-jars.sh {line}` by hand to see why \
         (it needs mvn and access to Maven Central; STRAIT_CACHE moves the cache)"
    )]
    Jars {
        /// The Kafka line asked for ("4" or "3.9").
        line: &'static str,
        /// What the script reported.
        detail: String,
    },
    /// A file system or process-spawn operation failed.
    #[error(
        "{action} failed: {source}. Check permissions and free space in the temp dir (and that `java` is on PATH)"
    )]
    Io {
        /// What the testkit was doing, e.g. "writing /tmp/.../server.properties".
        action: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// rcgen could not generate a key or certificate.
    #[error("generating the certificate for {name} failed: {source}")]
    Pki {
        /// The certificate's subject (CN).
        name: String,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// The builder or an API call was given something the testkit cannot use.
    #[error("invalid testkit request: {0}")]
    Invalid(String),
    /// `kafka.tools.StorageTool format` failed for a node.
    #[error("formatting the storage of node {node} failed ({status}); output:\n{output}")]
    Format {
        /// The node id.
        node: i32,
        /// The exit status.
        status: String,
        /// The tool's stdout and stderr.
        output: String,
    },
    /// A broker JVM exited or did not become ready in time.
    #[error(
        "node {node} of cluster {cluster} did not become ready: {reason}. Files: {dir} (removed on drop unless \
         STRAIT_KEEP_CLUSTERS=1). Last lines of its output (stdout+stderr, which also carry the broker log):\n{log_tail}"
    )]
    NotReady {
        /// The cluster name.
        cluster: String,
        /// The node id.
        node: i32,
        /// Why: exit status, timeout, "Address already in use", ...
        reason: String,
        /// The node's directory (kept only with STRAIT_KEEP_CLUSTERS=1).
        dir: PathBuf,
        /// The last ~40 lines the JVM wrote.
        log_tail: String,
    },
    /// A Java tool (console producer/consumer, StraitAdmin, ...) failed or reported an error.
    #[error(
        "{tool} failed ({status}). stderr (tail):\n{stderr_tail}\nstdout (tail):\n{stdout_tail}"
    )]
    Tool {
        /// The main class and what it was asked to do.
        tool: String,
        /// Exit status, or "timed out after ...", or "reported errors".
        status: String,
        /// The last lines of stderr (where the tools log).
        stderr_tail: String,
        /// The last lines of stdout.
        stdout_tail: String,
    },
    /// A node id that is not part of the cluster.
    #[error("node {0} is not part of this cluster; use Cluster::node_ids() to list the valid ids")]
    UnknownNode(i32),
}

impl Error {
    pub(crate) fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            action: action.into(),
            source,
        }
    }
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}
