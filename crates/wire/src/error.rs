//! The crate's one error type.
//!
//! Every message says what happened and what to do about it. Broker error codes keep their
//! Kafka names (`NOT_LEADER_OR_FOLLOWER`), which is what operators search for.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;

/// A `Result` whose error is the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `strait-wire`.
///
/// `Clone`, so that one failure can be reported against every partition it hit.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The client configuration is invalid: an unknown key, a bad value, or settings that conflict.
    #[error("invalid client configuration `{key}`: {message}")]
    Config {
        /// The property at fault (Kafka's own name, e.g. `ssl.ca.location`).
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A TCP connection to a broker could not be opened.
    #[error(
        "cannot connect to broker {broker}: {source}; check that the address in bootstrap.servers \
         (or the broker's advertised listener) is reachable from here"
    )]
    Connect {
        /// `host:port` of the broker.
        broker: String,
        /// The underlying I/O error (shared, so that the error can be cloned).
        #[source]
        source: Arc<std::io::Error>,
    },

    /// The TLS handshake with a broker failed, or the broker rejected the client certificate.
    #[error("TLS with broker {broker} failed: {reason} ({detail})")]
    Tls {
        /// `host:port` of the broker.
        broker: String,
        /// What went wrong, with the fix.
        reason: TlsFailure,
        /// The TLS library's own description.
        detail: String,
    },

    /// SASL authentication failed (wrong user name or password, or a mechanism the broker does
    /// not enable).
    #[error("SASL {mechanism} authentication with broker {broker} failed: {message}")]
    Authentication {
        /// `host:port` of the broker.
        broker: String,
        /// The SASL mechanism, e.g. `SCRAM-SHA-512`.
        mechanism: String,
        /// What the broker said, and what to check.
        message: String,
    },

    /// SASL credentials could not be obtained: an OAuth token endpoint refused the client or
    /// was unreachable, a token file is unreadable, AWS credentials are missing.
    #[error("cannot obtain SASL credentials from {origin}: {message}")]
    Credentials {
        /// Where they come from (e.g. `OAuth token endpoint https://...`); never a secret.
        origin: String,
        /// What went wrong, and what to change.
        message: String,
        /// Whether trying again later can help (the endpoint was down, not refusing).
        retriable: bool,
    },

    /// The broker refused an operation because of missing ACLs.
    #[error("{}", authorization_message(*.code, .principal.as_deref(), .operation, .resource))]
    Authorization {
        /// `TOPIC_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`, ...
        code: ResponseError,
        /// The principal the broker most likely saw (`User:alice`), when the client knows it.
        principal: Option<String>,
        /// The ACL operation that was needed (`Write`, `Read`, `Describe`, `IdempotentWrite`).
        operation: String,
        /// The resource, e.g. `Topic:orders` or `Cluster:kafka-cluster`.
        resource: String,
    },

    /// A broker answered with an error code.
    #[error("broker error {} ({}): {context}", error_name(*.code), .code.code())]
    Broker {
        /// The Kafka error code.
        code: ResponseError,
        /// Where it happened (API, topic-partition, broker) and what to do.
        context: String,
    },

    /// The broker rejected a produced record batch (INVALID_RECORD, INVALID_TIMESTAMP, ...).
    #[error(
        "broker rejected the batch for {partition}: {} ({}){}{}",
        error_name(*.code),
        .code.code(),
        .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default(),
        record_errors_suffix(.record_errors)
    )]
    RecordsRejected {
        /// `topic-partition`.
        partition: String,
        /// The Kafka error code.
        code: ResponseError,
        /// The broker's error message, if it sent one (Produce v8+).
        message: Option<String>,
        /// Per-record errors (Produce v8+).
        record_errors: Vec<RecordError>,
    },

    /// A request did not get its response within `request.timeout.ms`, or the connection setup
    /// took longer than `socket.connection.setup.timeout.ms`.
    #[error(
        "{api} to broker {broker} timed out after {after:?}; the connection was closed. \
         If the broker is healthy, raise {setting}"
    )]
    Timeout {
        /// `host:port` of the broker.
        broker: String,
        /// The API (`Fetch`, `Produce`) or `connection setup`.
        api: String,
        /// How long the client waited.
        after: Duration,
        /// The configuration property that sets the limit.
        setting: &'static str,
    },

    /// The broker (or a proxy or firewall on the way) stopped reading: no byte of the queued
    /// requests could be written for `request.timeout.ms`, so the connection was closed and
    /// every request in flight or queued on it fails with this error. The
    /// [`Client`](crate::Client) reconnects on the next use.
    #[error(
        "broker {broker} stopped reading: no request byte could be written to it for {} ms \
         (request.timeout.ms), so the connection was closed; the client reconnects on the next \
         request (if this keeps happening, the broker is overloaded or hung, or a proxy or \
         firewall between here and the broker stopped forwarding)",
        .after.as_millis()
    )]
    WriteStalled {
        /// `host:port` of the broker.
        broker: String,
        /// How long writing made no progress before the connection was closed.
        after: Duration,
    },

    /// The connection to a broker broke; every request in flight on it fails with this error.
    /// The [`Client`](crate::Client) reconnects on the next use.
    // A mismatched security.protocol is only a likely cause while connecting; the handshake
    // puts that hint into `reason` itself.
    #[error(
        "connection to broker {broker} was lost: {reason}; the client reconnects on the next \
         request (if this keeps happening, check that the broker is up and reachable)"
    )]
    Disconnected {
        /// `host:port` of the broker.
        broker: String,
        /// Why the connection ended.
        reason: String,
    },

    /// A response frame was larger than the configured cap; the connection was closed.
    #[error(
        "broker {broker} sent a {size}-byte response, more than receive.message.max.bytes = {max}; \
         raise receive.message.max.bytes or request less data (fetch max bytes)"
    )]
    FrameTooLarge {
        /// `host:port` of the broker.
        broker: String,
        /// The size the frame announced.
        size: u64,
        /// The configured cap.
        max: usize,
    },

    /// The broker sent bytes that do not form a valid Kafka response.
    #[error("protocol error with broker {broker}: {message}")]
    Protocol {
        /// `host:port` of the broker.
        broker: String,
        /// What could not be parsed.
        message: String,
    },

    /// No API version is supported by both the broker, this crate and the caller.
    #[error(
        "broker {broker} and strait-wire share no version of {api} (broker: {broker_versions}, \
         strait-wire: {client_versions}, wanted: {wanted}); Kafka 3.0 or newer is required"
    )]
    UnsupportedVersion {
        /// `host:port` of the broker.
        broker: String,
        /// The API name, e.g. `Fetch`.
        api: String,
        /// What the broker advertised in ApiVersions (`none` if absent).
        broker_versions: String,
        /// What this crate can encode.
        client_versions: String,
        /// What the caller asked for.
        wanted: String,
    },

    /// A caller passed an invalid argument (e.g. a negative partition).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A transactional producer was fenced, or its transaction can no longer commit.
    #[error("transactional producer `{transactional_id}`: {message}")]
    Transaction {
        /// The transactional id.
        transactional_id: String,
        /// Fenced (stop) or abortable (abort, then redo from the last committed positions).
        failure: TxnFailure,
        /// The broker's error code behind it, if any.
        code: Option<ResponseError>,
        /// What happened and what to do.
        message: String,
    },
}

impl Error {
    /// What a caller should do about this error: one table for the whole crate (and for
    /// `strait-forward`'s pipeline), see [`ErrorClass`].
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Broker { code, .. } => ErrorClass::of(*code),
            // The code is always one of the *_AUTHORIZATION_FAILED codes.
            Error::Authorization { .. } => ErrorClass::Denied,
            // The broker looked at the batch and refused it: resending the same bytes cannot
            // help, whatever the code's own retriability.
            Error::RecordsRejected { code, .. } => match ErrorClass::of(*code) {
                c if c.is_retriable() => ErrorClass::Fatal,
                c => c,
            },
            // Nothing was sent.
            Error::Connect { .. } => ErrorClass::Retriable,
            // The request may have reached the broker.
            Error::Timeout { .. } | Error::WriteStalled { .. } | Error::Disconnected { .. } => {
                ErrorClass::Ambiguous
            }
            Error::Transaction { failure, .. } => match failure {
                TxnFailure::Fenced => ErrorClass::Fenced,
                TxnFailure::Abortable => ErrorClass::Abortable,
            },
            Error::Credentials { retriable, .. } => {
                if *retriable {
                    ErrorClass::Retriable
                } else {
                    ErrorClass::Fatal
                }
            }
            Error::Config { .. }
            | Error::Tls { .. }
            | Error::Authentication { .. }
            | Error::FrameTooLarge { .. }
            | Error::Protocol { .. }
            | Error::UnsupportedVersion { .. }
            | Error::InvalidArgument(_) => ErrorClass::Fatal,
        }
    }

    /// Whether retrying the same operation later (after refreshing metadata) can succeed.
    pub fn is_retriable(&self) -> bool {
        self.class().is_retriable()
    }

    /// The Kafka error code, for errors that came from a broker's response.
    pub fn code(&self) -> Option<ResponseError> {
        match self {
            Error::Broker { code, .. }
            | Error::Authorization { code, .. }
            | Error::RecordsRejected { code, .. } => Some(*code),
            Error::Transaction { code, .. } => *code,
            _ => None,
        }
    }

    pub(crate) fn connect(broker: impl Into<String>, source: std::io::Error) -> Error {
        Error::Connect {
            broker: broker.into(),
            source: Arc::new(source),
        }
    }

    pub(crate) fn config(key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn protocol(broker: &str, message: impl Into<String>) -> Error {
        Error::Protocol {
            broker: broker.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn broker(code: ResponseError, context: impl Into<String>) -> Error {
        Error::Broker {
            code,
            context: context.into(),
        }
    }
}

/// What to do about a failed request: the crate's one error classification.
///
/// Kafka's own retriable flag ([`ResponseError::is_retriable`]) says whether to try again; the
/// retriable classes here also say what to do first (refresh metadata, look the coordinator up
/// again, resend a write only if it is idempotent). The other classes name the failures a
/// caller handles in its own way (a mirror restarts from the log start on
/// [`OffsetOutOfRange`](ErrorClass::OffsetOutOfRange), renumbers under a new producer id on
/// [`ProducerState`](ErrorClass::ProducerState), ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The client's metadata is stale (leader moved, topic still settling, broker gone):
    /// refresh metadata, then retry.
    Refresh,
    /// The group or transaction coordinator moved or is not available: look it up again, then
    /// retry.
    Coordinator,
    /// The request may or may not have taken effect (timed out, connection lost after sending,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND): retry reads, and writes only if they are idempotent.
    Ambiguous,
    /// Transient: retry after a backoff (connection refused, not enough replicas, coordinator
    /// loading, throttled, ...).
    Retriable,
    /// The fetch offset is outside the partition's log (retention deleted it, or truncation).
    OffsetOutOfRange,
    /// The broker already has this idempotent batch (DUPLICATE_SEQUENCE_NUMBER): it counts as
    /// written.
    Duplicate,
    /// The broker's producer state does not match the batch's producer id, epoch or sequence:
    /// get a new producer id and renumber.
    ProducerState,
    /// The batch is larger than the topic or broker accepts.
    TooLarge,
    /// An ACL denies the operation (topic, cluster, group or transactional id authorization).
    Denied,
    /// Retrying cannot help: needs a fix by an operator or the caller (invalid record, bad
    /// configuration, unsupported version, ...).
    Fatal,
    /// A transactional producer was fenced: a newer producer with the same transactional id
    /// took over. Stop this one (a zombie); nothing of its open transaction becomes visible.
    Fenced,
    /// A transaction can no longer commit: abort it (the transactional producer stays usable),
    /// then redo its work from the last committed positions.
    Abortable,
}

impl ErrorClass {
    /// The class of a broker error code.
    pub fn of(code: ResponseError) -> ErrorClass {
        use ResponseError as E;
        match code {
            E::OffsetOutOfRange => ErrorClass::OffsetOutOfRange,
            E::DuplicateSequenceNumber => ErrorClass::Duplicate,
            E::OutOfOrderSequenceNumber
            | E::InvalidProducerEpoch
            | E::UnknownProducerId
            | E::InvalidProducerIdMapping
            | E::ProducerFenced => ErrorClass::ProducerState,
            E::MessageTooLarge | E::RecordListTooLarge => ErrorClass::TooLarge,
            E::TopicAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::GroupAuthorizationFailed
            | E::TransactionalIdAuthorizationFailed => ErrorClass::Denied,
            // The one list of "metadata is stale" codes. BROKER_NOT_AVAILABLE is not retriable
            // in the protocol, but a refreshed broker list recovers from it.
            E::NotLeaderOrFollower
            | E::LeaderNotAvailable
            | E::FencedLeaderEpoch
            | E::UnknownLeaderEpoch
            | E::UnknownTopicOrPartition
            | E::UnknownTopicId
            | E::InconsistentTopicId
            | E::KafkaStorageError
            | E::ReplicaNotAvailable
            | E::OffsetNotAvailable
            | E::BrokerNotAvailable => ErrorClass::Refresh,
            E::NotCoordinator | E::CoordinatorNotAvailable => ErrorClass::Coordinator,
            E::RequestTimedOut | E::NetworkException | E::NotEnoughReplicasAfterAppend => {
                ErrorClass::Ambiguous
            }
            // Not retriable in Kafka's exception hierarchy, yet every client retries it: the
            // transaction coordinator is still finishing the previous transaction (or aborting
            // the one a fenced producer left open) and asks to come back.
            E::ConcurrentTransactions => ErrorClass::Retriable,
            c if c.is_retriable() => ErrorClass::Retriable,
            _ => ErrorClass::Fatal,
        }
    }

    /// Whether trying again (after what the class says to do first) can succeed.
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorClass::Refresh
                | ErrorClass::Coordinator
                | ErrorClass::Ambiguous
                | ErrorClass::Retriable
        )
    }
}

/// What failed in a TLS handshake, phrased so the fix is obvious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The broker's certificate is not signed by a CA in the trust store.
    UntrustedBrokerCertificate,
    /// The broker's certificate does not name the host the client connected to.
    BrokerHostnameMismatch,
    /// The broker's certificate has expired or is not valid yet.
    BrokerCertificateExpired,
    /// The broker requires a client certificate and none is configured.
    ClientCertificateRequired,
    /// The broker rejected the client certificate because it has expired.
    ClientCertificateExpired,
    /// The broker rejected the client certificate (unknown CA, bad certificate).
    ClientCertificateRejected,
    /// The peer does not speak TLS (probably a PLAINTEXT or SASL_PLAINTEXT listener).
    NotTls,
    /// Any other handshake failure.
    Handshake,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFailure::UntrustedBrokerCertificate => {
                "the broker's certificate is not signed by a trusted CA; set ssl.ca.location to the \
                 CA bundle that signed the broker certificates"
            }
            TlsFailure::BrokerHostnameMismatch => {
                "the broker's certificate does not name the host the client connected to; fix the \
                 certificate's subjectAltName or the broker's advertised.listeners (setting \
                 ssl.endpoint.identification.algorithm= empty disables this check and is insecure)"
            }
            TlsFailure::BrokerCertificateExpired => {
                "the broker's certificate has expired or is not valid yet; renew it on the broker \
                 (or check this machine's clock)"
            }
            TlsFailure::ClientCertificateRequired => {
                "the broker requires a client certificate (mTLS); set ssl.certificate.location and \
                 ssl.key.location"
            }
            TlsFailure::ClientCertificateExpired => {
                "the broker rejected the client certificate because it has expired; renew the \
                 certificate in ssl.certificate.location"
            }
            TlsFailure::ClientCertificateRejected => {
                "the broker rejected the client certificate; check that ssl.certificate.location \
                 holds a certificate signed by a CA the broker trusts (ssl.truststore on the broker)"
            }
            TlsFailure::NotTls => {
                "the broker did not answer with TLS; the listener is probably PLAINTEXT or \
                 SASL_PLAINTEXT, so set security.protocol accordingly or use the broker's TLS port"
            }
            TlsFailure::Handshake => "the TLS handshake failed",
        })
    }
}

/// `TopicAuthorizationFailed` -> `TOPIC_AUTHORIZATION_FAILED` (Kafka's own spelling).
pub fn error_name(code: ResponseError) -> String {
    if let ResponseError::Unknown(n) = code {
        return format!("UNKNOWN_ERROR_CODE_{n}");
    }
    let camel = format!("{code:?}");
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// The principal to name in an ACL for this client, as far as the client can know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclPrincipal {
    /// `User:alice` (SASL), `User:CN=alice,O=example` (a client certificate, with the broker's
    /// default mapping) or `User:ANONYMOUS` (neither).
    pub name: String,
    /// Why the name may not be what the broker sees, when the client cannot be sure.
    pub caveat: Option<&'static str>,
}

impl AclPrincipal {
    /// `name`, quoted for a shell if it needs it (a certificate subject may hold spaces).
    pub fn shell(&self) -> String {
        let plain = self
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:=,@/+-".contains(c));
        if plain {
            self.name.clone()
        } else {
            format!("'{}'", self.name.replace('\'', "'\\''"))
        }
    }
}

/// What the broker most likely calls a client with [`Client::principal`](crate::Client::principal)
/// `principal`: SASL users are `User:<name>`; a certificate subject becomes `User:<subject DN>`
/// under the default `ssl.principal.mapping.rules` (brokers with other rules map it to another
/// name, which the client cannot see); without either, brokers say `User:ANONYMOUS`.
pub fn acl_principal(principal: Option<&str>) -> AclPrincipal {
    match principal {
        Some(p) if p.starts_with("User:") => AclPrincipal {
            name: p.to_owned(),
            caveat: None,
        },
        Some(dn) => AclPrincipal {
            name: format!("User:{dn}"),
            caveat: Some(
                "the principal brokers give this client certificate under the default \
                 ssl.principal.mapping.rules; if the brokers set other rules, use the name they \
                 map the certificate subject to",
            ),
        },
        None => AclPrincipal {
            name: "User:ANONYMOUS".to_owned(),
            caveat: Some(
                "what brokers call a client without SASL credentials or a client certificate",
            ),
        },
    }
}

/// The advice for a denied idempotent producer id (InitProducerId), naming the grants for
/// `topics`, the topics the client writes (a `<topic>` placeholder when it does not know them).
///
/// An idempotent producer id is granted by Write on any topic since Kafka 2.8 (KIP-679);
/// IdempotentWrite on the cluster alone would still leave every produce denied, so the useful
/// advice is Write on the topics being written.
pub fn producer_id_denied(
    code: ResponseError,
    principal: Option<&str>,
    topics: &[String],
) -> String {
    /// More commands than this are summarised: the advice is one log line.
    const SHOWN: usize = 5;
    let p = acl_principal(principal);
    let caveat = p
        .caveat
        .map(|c| format!(" ({} is {c})", p.name))
        .unwrap_or_default();
    let grant = |topic: &str| {
        format!(
            "kafka-acls.sh --bootstrap-server <broker> --add --allow-principal {} --operation \
             Write --topic {topic}",
            p.shell()
        )
    };
    let fixes = match topics {
        [] => format!("e.g. {}", grant("<topic>")),
        _ => {
            let mut fixes: Vec<String> = topics.iter().take(SHOWN).map(|t| grant(t)).collect();
            if topics.len() > SHOWN {
                fixes.push(format!("and {} more topics", topics.len() - SHOWN));
            }
            format!(
                "it writes {}: {}",
                topics
                    .iter()
                    .take(SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                fixes.join("; ")
            )
        }
    };
    format!(
        "not authorized ({}): {} may not get an idempotent producer id because it may not \
         Write any topic; grant Write on the topics it produces to (since Kafka 2.8, KIP-679, \
         that is enough: IdempotentWrite on the cluster is not needed), {fixes}{caveat}",
        error_name(code),
        p.name,
    )
}

fn authorization_message(
    code: ResponseError,
    principal: Option<&str>,
    operation: &str,
    resource: &str,
) -> String {
    let p = acl_principal(principal);
    let caveat = p
        .caveat
        .map(|c| format!(" ({} is {c})", p.name))
        .unwrap_or_default();
    let (kind, name) = resource.split_once(':').unwrap_or(("", resource));
    if operation == "IdempotentWrite" && kind == "Cluster" {
        return producer_id_denied(code, principal, &[]);
    }
    // Every transactional request checks Write on the id (FindCoordinator Describe, which
    // Write implies); the produce and offset requests check the topics and the group.
    // A client with one id per partition (Strait's exactly-once mirror) is granted them all,
    // present and future, by one ACL on their common prefix.
    let also = if kind == "TransactionalId" {
        " (one ACL grants a family of ids, present and future: --transactional-id <prefix> \
         --resource-pattern-type prefixed; a Strait exactly-once mirror's ids are \
         <mirror.group_id>-<topic>-<partition>, so its prefix is <mirror.group_id> and a dash. \
         Write on the transactional id implies the Describe that FindCoordinator needs; a \
         transactional producer also needs Write on the topics it writes and Read on the group \
         it commits offsets to, and no IdempotentWrite on the cluster)"
    } else {
        ""
    };
    let flag = match kind {
        "Topic" => format!("--topic {name}"),
        "Group" => format!("--group {name}"),
        "TransactionalId" => format!("--transactional-id {name}"),
        "Cluster" => "--cluster".to_owned(),
        _ => resource.to_owned(),
    };
    format!(
        "not authorized ({}): {} may not {operation} {resource}; grant it, e.g. \
         kafka-acls.sh --bootstrap-server <broker> --add --allow-principal {} --operation \
         {operation} {flag}{also}{caveat}",
        error_name(code),
        p.name,
        p.shell()
    )
}

fn record_errors_suffix(errors: &[RecordError]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = errors
        .iter()
        .take(5)
        .map(|e| match &e.message {
            Some(m) => format!("record {}: {m}", e.batch_index),
            None => format!("record {}", e.batch_index),
        })
        .collect();
    let more = if errors.len() > 5 {
        format!(" and {} more", errors.len() - 5)
    } else {
        String::new()
    };
    format!(" [{}{more}]", shown.join("; "))
}

/// A per-record error from a Produce response (v8+). Defined here, not in `produce`, so that
/// this module imports no higher module (see `error_is_a_leaf` below).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Index of the record inside the batch.
    pub batch_index: i32,
    /// The broker's message for it.
    pub message: Option<String>,
}

/// What [`Error::Transaction`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TxnFailure {
    /// A newer producer with the same transactional id took over: this one must stop.
    Fenced,
    /// The transaction cannot commit (or was aborted by the coordinator): abort it and redo the
    /// work from the last committed positions.
    Abortable,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Modules of this crate that `error.rs` may use: leaves that import nothing of the crate
    /// back. Empty today; add a module here only if it does not import `crate::error`.
    const LEAVES: &[&str] = &[];

    /// The crate modules a source file names in code (`crate::x`), comments left out.
    fn crate_modules(source: &str) -> Vec<String> {
        let mut found = Vec::new();
        for line in source.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let name: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.push(name);
            }
        }
        found
    }

    /// wire's error type sits at the bottom of the crate: every other module imports it, so it
    /// imports none of them (types it reports, like [`RecordError`] and [`TxnFailure`], live
    /// here). A `crate::produce` or `crate::txn` import here would close a loop again.
    #[test]
    fn error_is_a_leaf() {
        let source = include_str!("error.rs");
        let tests_start = source.find("#[cfg(test)]").unwrap_or(source.len());
        for module in crate_modules(&source[..tests_start]) {
            assert!(
                LEAVES.contains(&module.as_str()),
                "error.rs uses crate::{module}, which imports error.rs back: move the shared \
                 type into error.rs or into a leaf module listed in LEAVES"
            );
        }
    }

    #[test]
    fn crate_modules_reads_code_not_comments() {
        let src = "use crate::produce::X;\n/// [`C`](crate::Client)\nlet a = crate::txn::Y; // crate::z\n";
        assert_eq!(crate_modules(src), ["produce", "txn"]);
    }

    #[test]
    fn error_names_use_kafka_spelling() {
        assert_eq!(
            error_name(ResponseError::TopicAuthorizationFailed),
            "TOPIC_AUTHORIZATION_FAILED"
        );
        assert_eq!(
            error_name(ResponseError::NotLeaderOrFollower),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(
            error_name(ResponseError::Unknown(999)),
            "UNKNOWN_ERROR_CODE_999"
        );
    }

    #[test]
    fn authorization_message_names_principal_operation_resource_and_fix() {
        let e = Error::Authorization {
            code: ResponseError::TopicAuthorizationFailed,
            principal: Some("User:alice".into()),
            operation: "Write".into(),
            resource: "Topic:orders".into(),
        };
        let m = e.to_string();
        assert!(m.contains("User:alice may not Write Topic:orders"), "{m}");
        assert!(m.contains("--operation Write --topic orders"), "{m}");
        assert!(m.contains("TOPIC_AUTHORIZATION_FAILED"), "{m}");
    }

    #[test]
    fn a_certificate_principal_is_named_as_the_default_mapping_names_it() {
        let e = Error::Authorization {
            code: ResponseError::TopicAuthorizationFailed,
            principal: Some("CN=my-us-user".into()),
            operation: "Write".into(),
            resource: "Topic:my-topic".into(),
        };
        let m = e.to_string();
        assert!(!m.contains("<principal of"), "{m}");
        assert!(
            m.contains(
                "User:CN=my-us-user may not Write Topic:my-topic; grant it, e.g. kafka-acls.sh \
                 --bootstrap-server <broker> --add --allow-principal User:CN=my-us-user \
                 --operation Write --topic my-topic (User:CN=my-us-user is the principal brokers \
                 give this client certificate under the default ssl.principal.mapping.rules; if \
                 the brokers set other rules, use the name they map the certificate subject to)"
            ),
            "{m}"
        );
        // A subject with a space is quoted for the shell.
        let p = acl_principal(Some("CN=my user,O=example"));
        assert_eq!(p.shell(), "'User:CN=my user,O=example'");
        assert_eq!(acl_principal(None).name, "User:ANONYMOUS");
        assert_eq!(acl_principal(Some("User:alice")).caveat, None);
    }

    #[test]
    fn a_denied_producer_id_advises_write_on_the_topic_not_idempotent_write() {
        let e = Error::Authorization {
            code: ResponseError::ClusterAuthorizationFailed,
            principal: Some("User:mirror".into()),
            operation: "IdempotentWrite".into(),
            resource: "Cluster:kafka-cluster".into(),
        };
        let m = e.to_string();
        assert!(
            m.contains("--allow-principal User:mirror --operation Write --topic <topic>"),
            "{m}"
        );
        assert!(
            m.contains("IdempotentWrite on the cluster is not needed"),
            "{m}"
        );
        assert!(!m.contains("--operation IdempotentWrite"), "{m}");
        // A client that knows the topics it writes names them.
        let topics: Vec<String> = (0..7).map(|i| format!("orders-{i}")).collect();
        let m = producer_id_denied(
            ResponseError::ClusterAuthorizationFailed,
            Some("User:mirror"),
            &topics,
        );
        assert!(!m.contains("<topic>"), "{m}");
        assert!(m.contains("it writes orders-0, orders-1, orders-2, orders-3, orders-4: "));
        assert!(m.contains(
            "kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:mirror \
             --operation Write --topic orders-0; kafka-acls.sh"
        ));
        assert!(m.contains("--topic orders-4; and 2 more topics"), "{m}");
    }

    #[test]
    fn a_connection_lost_mid_stream_does_not_blame_security_protocol() {
        let m = Error::Disconnected {
            broker: "b:9092".into(),
            reason: "connection reset by peer".into(),
        }
        .to_string();
        assert_eq!(
            m,
            "connection to broker b:9092 was lost: connection reset by peer; the client \
             reconnects on the next request (if this keeps happening, check that the broker is up \
             and reachable)"
        );
    }

    /// One row per code the crate treats specially, plus samples of the generic cases.
    #[test]
    fn classes_of_broker_codes() {
        use ResponseError as E;
        let table: &[(ResponseError, ErrorClass)] = &[
            (E::OffsetOutOfRange, ErrorClass::OffsetOutOfRange),
            (E::DuplicateSequenceNumber, ErrorClass::Duplicate),
            (E::OutOfOrderSequenceNumber, ErrorClass::ProducerState),
            (E::InvalidProducerEpoch, ErrorClass::ProducerState),
            (E::UnknownProducerId, ErrorClass::ProducerState),
            (E::InvalidProducerIdMapping, ErrorClass::ProducerState),
            (E::ProducerFenced, ErrorClass::ProducerState),
            (E::MessageTooLarge, ErrorClass::TooLarge),
            (E::RecordListTooLarge, ErrorClass::TooLarge),
            (E::TopicAuthorizationFailed, ErrorClass::Denied),
            (E::ClusterAuthorizationFailed, ErrorClass::Denied),
            (E::GroupAuthorizationFailed, ErrorClass::Denied),
            (E::TransactionalIdAuthorizationFailed, ErrorClass::Denied),
            (E::NotLeaderOrFollower, ErrorClass::Refresh),
            (E::LeaderNotAvailable, ErrorClass::Refresh),
            (E::FencedLeaderEpoch, ErrorClass::Refresh),
            (E::UnknownLeaderEpoch, ErrorClass::Refresh),
            (E::UnknownTopicOrPartition, ErrorClass::Refresh),
            (E::UnknownTopicId, ErrorClass::Refresh),
            (E::InconsistentTopicId, ErrorClass::Refresh),
            (E::KafkaStorageError, ErrorClass::Refresh),
            (E::ReplicaNotAvailable, ErrorClass::Refresh),
            (E::OffsetNotAvailable, ErrorClass::Refresh),
            (E::BrokerNotAvailable, ErrorClass::Refresh),
            (E::NotCoordinator, ErrorClass::Coordinator),
            (E::CoordinatorNotAvailable, ErrorClass::Coordinator),
            (E::RequestTimedOut, ErrorClass::Ambiguous),
            (E::NetworkException, ErrorClass::Ambiguous),
            (E::NotEnoughReplicasAfterAppend, ErrorClass::Ambiguous),
            (E::NotEnoughReplicas, ErrorClass::Retriable),
            (E::CoordinatorLoadInProgress, ErrorClass::Retriable),
            (E::ConcurrentTransactions, ErrorClass::Retriable),
            (E::ThrottlingQuotaExceeded, ErrorClass::Retriable),
            (E::CorruptMessage, ErrorClass::Retriable),
            (E::InvalidRecord, ErrorClass::Fatal),
            (E::InvalidTimestamp, ErrorClass::Fatal),
            (E::UnknownServerError, ErrorClass::Fatal),
            (E::Unknown(9999), ErrorClass::Fatal),
        ];
        for &(code, class) in table {
            assert_eq!(ErrorClass::of(code), class, "{}", error_name(code));
            assert_eq!(
                Error::broker(code, "x").class(),
                class,
                "{}",
                error_name(code)
            );
        }
    }

    /// Retriable classes are exactly Kafka's retriable codes plus BROKER_NOT_AVAILABLE (what
    /// the client has always retried) and CONCURRENT_TRANSACTIONS (what every transactional
    /// producer retries), for every code the protocol defines.
    #[test]
    fn retriable_classes_match_kafka_plus_broker_not_available() {
        for n in -1..=200i16 {
            let Some(code) = ResponseError::try_from_code(n) else {
                continue;
            };
            let expected = code.is_retriable()
                || code == ResponseError::BrokerNotAvailable
                || code == ResponseError::ConcurrentTransactions;
            assert_eq!(
                ErrorClass::of(code).is_retriable(),
                expected,
                "{}",
                error_name(code)
            );
            assert_eq!(Error::broker(code, "x").is_retriable(), expected);
        }
    }

    /// Errors that did not come with a code are classified by what happened.
    #[test]
    fn classes_of_client_side_errors() {
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let table: Vec<(Error, ErrorClass)> = vec![
            (Error::connect("b:1", io()), ErrorClass::Retriable),
            (
                Error::Timeout {
                    broker: "b:1".into(),
                    api: "Fetch".into(),
                    after: Duration::from_secs(30),
                    setting: "request.timeout.ms",
                },
                ErrorClass::Ambiguous,
            ),
            (
                Error::Disconnected {
                    broker: "b:1".into(),
                    reason: "eof".into(),
                },
                ErrorClass::Ambiguous,
            ),
            (
                Error::WriteStalled {
                    broker: "b:1".into(),
                    after: Duration::from_secs(30),
                },
                ErrorClass::Ambiguous,
            ),
            (
                Error::Authorization {
                    code: ResponseError::TopicAuthorizationFailed,
                    principal: None,
                    operation: "Write".into(),
                    resource: "Topic:t".into(),
                },
                ErrorClass::Denied,
            ),
            (
                Error::RecordsRejected {
                    partition: "t-0".into(),
                    code: ResponseError::CorruptMessage,
                    message: None,
                    record_errors: Vec::new(),
                },
                ErrorClass::Fatal,
            ),
            (
                Error::RecordsRejected {
                    partition: "t-0".into(),
                    code: ResponseError::MessageTooLarge,
                    message: None,
                    record_errors: Vec::new(),
                },
                ErrorClass::TooLarge,
            ),
            (Error::config("k", "m"), ErrorClass::Fatal),
            (Error::protocol("b:1", "garbage"), ErrorClass::Fatal),
            (Error::InvalidArgument("x".into()), ErrorClass::Fatal),
            (
                Error::Authentication {
                    broker: "b:1".into(),
                    mechanism: "PLAIN".into(),
                    message: "no".into(),
                },
                ErrorClass::Fatal,
            ),
        ];
        for (e, class) in table {
            assert_eq!(e.class(), class, "{e}");
            assert_eq!(e.is_retriable(), class.is_retriable(), "{e}");
        }
    }

    #[test]
    fn errors_clone_with_their_source() {
        let e = Error::connect(
            "b:1",
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"),
        );
        let c = e.clone();
        assert_eq!(c.to_string(), e.to_string());
        let source = std::error::Error::source(&c).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("refused"));
    }
}
