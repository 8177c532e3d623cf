//! Java `.properties` files, and translation of librdkafka-style client properties (what Strait users write) into
//! the Java client's names (what the Kafka tools read).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::error::Error;

/// Writes `entries` as a Java properties file (ISO-8859-1 with `\uXXXX` escapes, as `Properties.load` expects).
pub(crate) fn write_properties(path: &Path, entries: &[(String, String)]) -> Result<(), Error> {
    let mut text = String::from("# written by strait-testkit\n");
    for (k, v) in entries {
        text.push_str(&escape(k, true));
        text.push('=');
        text.push_str(&escape(v, false));
        text.push('\n');
    }
    fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn escape(s: &str, key: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' ' if key || i == 0 => out.push_str("\\ "),
            '=' | ':' | '#' | '!' if key => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Quotes `s` for a JAAS option value (`key="value"`).
fn jaas_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The login module a Java client needs for a SASL mechanism.
fn login_module(mechanism: &str) -> Result<&'static str, Error> {
    match mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => Ok("org.apache.kafka.common.security.plain.PlainLoginModule"),
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
            Ok("org.apache.kafka.common.security.scram.ScramLoginModule")
        }
        other => Err(Error::Invalid(format!(
            "SASL mechanism {other} is not supported by the testkit (use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
        ))),
    }
}

/// Translates librdkafka-style client properties into Java client properties.
///
/// * `ssl.ca.location` becomes a PEM trust store;
/// * `ssl.certificate.location` + `ssl.key.location` become a PEM key store, written as one file (key then
///   certificate) by `keystore_for`;
/// * `sasl.username` + `sasl.password` become `sasl.jaas.config` for the login module of `sasl.mechanism`;
/// * everything else (bootstrap.servers, security.protocol, sasl.mechanism, acks, ...) passes through unchanged.
pub(crate) fn java_client_properties(
    props: &[(String, String)],
    keystore_for: &dyn Fn(&Path, &Path) -> Result<std::path::PathBuf, Error>,
) -> Result<Vec<(String, String)>, Error> {
    let get = |key: &str| {
        props
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in props {
        match k.as_str() {
            "ssl.ca.location" => {
                out.push(("ssl.truststore.type".into(), "PEM".into()));
                out.push(("ssl.truststore.location".into(), v.clone()));
            }
            "ssl.certificate.location" | "ssl.key.location" | "sasl.username" | "sasl.password" => {
            }
            _ => out.push((k.clone(), v.clone())),
        }
    }
    match (get("ssl.certificate.location"), get("ssl.key.location")) {
        (Some(cert), Some(key)) => {
            let store = keystore_for(Path::new(cert), Path::new(key))?;
            out.push(("ssl.keystore.type".into(), "PEM".into()));
            out.push((
                "ssl.keystore.location".into(),
                store.to_string_lossy().into_owned(),
            ));
        }
        (None, None) => {}
        _ => {
            return Err(Error::Invalid(
                "ssl.certificate.location and ssl.key.location must be given together".into(),
            ));
        }
    }
    if let Some(user) = get("sasl.username") {
        let mechanism = get("sasl.mechanism").unwrap_or("PLAIN");
        let password = get("sasl.password").unwrap_or("");
        out.push((
            "sasl.jaas.config".into(),
            format!(
                "{} required username={} password={};",
                login_module(mechanism)?,
                jaas_quote(user),
                jaas_quote(password)
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_properties_load_would_misread() {
        assert_eq!(escape("a b=c", true), "a\\ b\\=c");
        assert_eq!(escape(" x=y\\z", false), "\\ x=y\\\\z");
        assert_eq!(escape("é", false), "\\u00e9");
        assert_eq!(escape("line\nnext", false), "line\\nnext");
    }

    #[test]
    fn translates_sasl_and_ssl() {
        let props = vec![
            ("bootstrap.servers".to_string(), "127.0.0.1:1".to_string()),
            ("security.protocol".to_string(), "SASL_SSL".to_string()),
            ("ssl.ca.location".to_string(), "/p/ca.pem".to_string()),
            ("sasl.mechanism".to_string(), "SCRAM-SHA-512".to_string()),
            ("sasl.username".to_string(), "alice".to_string()),
            ("sasl.password".to_string(), "pa\"ss".to_string()),
        ];
        let java = java_client_properties(&props, &|_, _| unreachable!()).unwrap();
        assert!(java.contains(&("ssl.truststore.location".into(), "/p/ca.pem".into())));
        assert!(java.contains(&(
            "sasl.jaas.config".into(),
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"pa\\\"ss\";"
                .into()
        )));
        assert!(!java.iter().any(|(k, _)| k == "sasl.password"));
    }
}
