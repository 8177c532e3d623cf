//! The OTLP exporter's standard variables besides the endpoint (OpenTelemetry's exporter
//! specification), checked at start so that a mistake is an error naming the variable, not spans
//! silently dropped later:
//!
//! * `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `key=value,...` (values URL-encoded) sent with every
//!   export, e.g. a collector's API key. The exporter reads them itself; checked for form here,
//!   never printed (they hold credentials).
//! * `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`: milliseconds per export; otherwise
//!   [`super::EXPORT_TIMEOUT`].
//! * `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`: the PEM file of the CA that signed an `https://`
//!   endpoint's certificate; otherwise `SSL_CERT_FILE`, the system bundle or the built-in roots.
//! * `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `http/protobuf` (the default) or `grpc` (the same
//!   protobuf request as a unary gRPC call, `grpc.rs`); `http/json` is refused with what to do
//!   instead.
//! * `OTEL_RESOURCE_ATTRIBUTES`: `key=value,...` added to the spans' resource (read by the SDK's
//!   resource detector; `tracing.service_name` still names the service).

use std::time::Duration;

use crate::error::{Error, Result};

/// What the variables ask of the exporter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExporterEnv {
    /// OTLP/gRPC instead of OTLP/HTTP.
    pub grpc: bool,
    /// The time one export may take.
    pub timeout: Duration,
    /// The CA file for an `https://` endpoint, and the variable that named it.
    pub ca: Option<(String, std::path::PathBuf)>,
}

/// The traces variable, else the general one: `(name, value)` of the first that is set.
fn first(get: &impl Fn(&str) -> Option<String>, names: [&str; 2]) -> Option<(String, String)> {
    names.into_iter().find_map(|n| {
        get(n)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (n.to_owned(), v))
    })
}

/// Checks the variables `get` returns; `default_timeout` applies when none sets a timeout.
pub(crate) fn check(
    get: impl Fn(&str) -> Option<String>,
    default_timeout: Duration,
) -> Result<ExporterEnv> {
    let grpc = match first(
        &get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ],
    ) {
        None => false,
        Some((_, p)) if p.trim() == "http/protobuf" => false,
        Some((_, p)) if p.trim() == "grpc" => true,
        Some((var, p)) => {
            return Err(Error::Unsupported {
                what: format!("{var}={}", p.trim()),
                hint: "Strait exports OTLP as protobuf: set the variable to http/protobuf (the \
                       receiver's OTLP/HTTP port, 4318 on a Collector or Jaeger) or grpc (its \
                       OTLP/gRPC port, 4317), and point tracing.otlp_endpoint \
                       (OTEL_EXPORTER_OTLP_ENDPOINT) at that port"
                    .into(),
            });
        }
    };
    let timeout = match first(
        &get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ],
    ) {
        None => default_timeout,
        Some((var, ms)) => match ms.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(Error::Invalid {
                    key: var,
                    expected: "a whole number of milliseconds above 0, e.g. 10000".into(),
                    got: format!("{ms:?}"),
                });
            }
        },
    };
    if let Some((var, headers)) = first(
        &get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
    ) {
        for (i, item) in headers.split(',').enumerate() {
            let name = item.split_once('=').map(|(k, _)| k.trim());
            if name.is_none_or(|k| k.is_empty() || !k.bytes().all(is_token)) {
                // The item is not quoted: it may hold a credential.
                return Err(Error::Invalid {
                    key: var,
                    expected: "key1=value1,key2=value2 (header names as HTTP allows them, \
                               values URL-encoded)"
                        .into(),
                    got: format!("item {} is not name=value (value not shown)", i + 1),
                });
            }
        }
    }
    let ca = first(
        &get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ],
    )
    .map(|(var, path)| (var, std::path::PathBuf::from(path.trim())));
    Ok(ExporterEnv { grpc, timeout, ca })
}

/// An HTTP header-name character (RFC 9110 `tchar`).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DEFAULT: Duration = Duration::from_secs(10);

    fn with(vars: &[(&str, &str)]) -> Result<ExporterEnv> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        check(
            move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            DEFAULT,
        )
    }

    #[test]
    fn the_standard_variables_are_honoured_or_refused_by_name() {
        assert_eq!(with(&[]).unwrap().timeout, DEFAULT);
        assert_eq!(
            with(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")])
                .unwrap()
                .timeout,
            Duration::from_millis(2500)
        );
        // The traces variable wins over the general one.
        let e = with(&[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/general.pem"),
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/traces.pem"),
        ])
        .unwrap();
        assert_eq!(
            e.ca,
            Some((
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE".to_owned(),
                "/traces.pem".into()
            ))
        );
        let e = with(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: expected a whole number"),
            "{e}"
        );
        assert!(!with(&[]).unwrap().grpc);
        assert!(
            !with(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])
                .unwrap()
                .grpc
        );
        assert!(
            with(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])
                .unwrap()
                .grpc
        );
        // The traces variable wins over the general one.
        assert!(
            !with(&[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
            ])
            .unwrap()
            .grpc
        );
        let e = with(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")]).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "not supported: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json; Strait exports"
            ),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        assert!(
            with(&[(
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=s3cr%3Dt,x-tenant=blue"
            )])
            .is_ok()
        );
        let e = with(&[("OTEL_EXPORTER_OTLP_HEADERS", "api-key=ok,Bearer s3cret")]).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("item 2 is not name=value"), "{m}");
        assert!(!m.contains("s3cret"), "{m}");
    }
}
