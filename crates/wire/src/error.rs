//! The crate's one error type.
//!
//! Every message says what happened and what to do about it. Broker error codes keep their
//! Kafka names (`NOT_LEADER_OR_FOLLOWER`), which is what operators search for.

use std::fmt;
use std::time::Duration;

use kafka_protocol::ResponseError;

/// A `Result` whose error is the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `strait-wire`.
#[derive(Debug, thiserror::Error)]
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
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
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
        record_errors: Vec<crate::produce::RecordError>,
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
}

impl Error {
    /// Whether retrying the same operation later (after refreshing metadata) can succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Broker { code, .. } => is_retriable_code(*code),
            Error::Connect { .. } | Error::Timeout { .. } | Error::Disconnected { .. } => true,
            _ => false,
        }
    }

    /// The Kafka error code, for errors that came from a broker's response.
    pub fn code(&self) -> Option<ResponseError> {
        match self {
            Error::Broker { code, .. }
            | Error::Authorization { code, .. }
            | Error::RecordsRejected { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// An equivalent error, for reporting one failure against several partitions (`Error` is not
    /// `Clone` because I/O errors are not).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Config { key, message } => Error::config(key.clone(), message.clone()),
            Error::Connect { broker, source } => Error::Connect {
                broker: broker.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Tls {
                broker,
                reason,
                detail,
            } => Error::Tls {
                broker: broker.clone(),
                reason: *reason,
                detail: detail.clone(),
            },
            Error::Authentication {
                broker,
                mechanism,
                message,
            } => Error::Authentication {
                broker: broker.clone(),
                mechanism: mechanism.clone(),
                message: message.clone(),
            },
            Error::Authorization {
                code,
                principal,
                operation,
                resource,
            } => Error::Authorization {
                code: *code,
                principal: principal.clone(),
                operation: operation.clone(),
                resource: resource.clone(),
            },
            Error::Broker { code, context } => Error::broker(*code, context.clone()),
            Error::RecordsRejected {
                partition,
                code,
                message,
                record_errors,
            } => Error::RecordsRejected {
                partition: partition.clone(),
                code: *code,
                message: message.clone(),
                record_errors: record_errors.clone(),
            },
            Error::Timeout {
                broker,
                api,
                after,
                setting,
            } => Error::Timeout {
                broker: broker.clone(),
                api: api.clone(),
                after: *after,
                setting,
            },
            Error::Disconnected { broker, reason } => Error::Disconnected {
                broker: broker.clone(),
                reason: reason.clone(),
            },
            Error::FrameTooLarge { broker, size, max } => Error::FrameTooLarge {
                broker: broker.clone(),
                size: *size,
                max: *max,
            },
            Error::Protocol { broker, message } => Error::protocol(broker, message.clone()),
            Error::UnsupportedVersion {
                broker,
                api,
                broker_versions,
                client_versions,
                wanted,
            } => Error::UnsupportedVersion {
                broker: broker.clone(),
                api: api.clone(),
                broker_versions: broker_versions.clone(),
                client_versions: client_versions.clone(),
                wanted: wanted.clone(),
            },
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
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

/// Kafka's own retriable classification, plus the few codes the protocol marks non-retriable but a
/// client recovers from by refreshing metadata.
pub(crate) fn is_retriable_code(code: ResponseError) -> bool {
    code.is_retriable() || matches!(code, ResponseError::BrokerNotAvailable)
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
    // An idempotent producer id (InitProducerId) is granted by Write on any topic since Kafka
    // 2.8 (KIP-679); IdempotentWrite on the cluster alone would still leave every produce
    // denied, so the useful advice is Write on the topics being written.
    if operation == "IdempotentWrite" && kind == "Cluster" {
        return format!(
            "not authorized ({}): {} may not get an idempotent producer id because it may not \
             Write any topic; grant Write on the topics it produces to (since Kafka 2.8, KIP-679, \
             that is enough: IdempotentWrite on the cluster is not needed), e.g. kafka-acls.sh \
             --bootstrap-server <broker> --add --allow-principal {} --operation Write --topic \
             <topic>{caveat}",
            error_name(code),
            p.name,
            p.shell()
        );
    }
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
         {operation} {flag}{caveat}",
        error_name(code),
        p.name,
        p.shell()
    )
}

fn record_errors_suffix(errors: &[crate::produce::RecordError]) -> String {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

    #[test]
    fn retriable_classification() {
        assert!(Error::broker(ResponseError::NotLeaderOrFollower, "x").is_retriable());
        assert!(!Error::broker(ResponseError::InvalidRecord, "x").is_retriable());
        assert!(
            Error::Disconnected {
                broker: "b:1".into(),
                reason: "eof".into()
            }
            .is_retriable()
        );
        assert!(!Error::config("k", "m").is_retriable());
    }
}
