//! Settings that send a secret over the network unencrypted: SASL PLAIN's password or an
//! OAuth bearer token over `SASL_PLAINTEXT`, and an OAuth client secret to an `http://` token
//! endpoint. They are legal (test setups, a private network), so they are warned about, once
//! per process and setting, when a client is created, never refused.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use crate::config::{ClientConfig, SaslMechanism, SecurityProtocol};
use crate::oauth::TokenSource;

impl ClientConfig {
    /// One message per setting of this configuration that sends a secret unencrypted, naming
    /// the setting and the fix. Empty for a configuration that keeps its secrets encrypted.
    pub fn cleartext_secret_warnings(&self) -> Vec<String> {
        let Some(sasl) = self.sasl() else {
            return Vec::new();
        };
        let servers = self.bootstrap_servers().join(",");
        let plaintext = self.security_protocol() == SecurityProtocol::SaslPlaintext;
        let mut out = Vec::new();
        if plaintext && sasl.mechanism == SaslMechanism::Plain {
            out.push(format!(
                "sasl.mechanism=PLAIN with security.protocol=SASL_PLAINTEXT sends the password of \
                 `{}` unencrypted to {servers}; use security.protocol=SASL_SSL (or SCRAM)",
                sasl.username
            ));
        }
        if let Some(oauth) = &sasl.oauth {
            // Kafka's unsecured JWS tokens are unsigned test tokens, not secrets.
            let real_token = !matches!(oauth.source, TokenSource::Unsecured(_));
            if plaintext && real_token {
                out.push(format!(
                    "sasl.mechanism=OAUTHBEARER with security.protocol=SASL_PLAINTEXT sends the \
                     bearer token unencrypted to {servers} (anyone on the path can reuse it until \
                     it expires); use security.protocol=SASL_SSL"
                ));
            }
            if let TokenSource::ClientCredentials(c) = &oauth.source
                && c.url.starts_with("http://")
            {
                out.push(format!(
                    "sasl.oauthbearer.token.endpoint.url `{}` is plain HTTP: the client secret \
                     of `{}` is sent, and the token received, unencrypted; use the identity \
                     provider's https:// token endpoint",
                    c.url, c.client_id
                ));
            }
        }
        out
    }
}

/// The warnings already logged by this process.
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Logs each of `cfg`'s cleartext warnings that this process has not logged yet; returns how
/// many it logged. Every client of a configuration calls it, so a mirror that builds several
/// clients per cluster says it once.
pub(crate) fn warn_once(cfg: &ClientConfig) -> usize {
    let mut logged = 0;
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    let warned = warned.get_or_insert_with(HashSet::new);
    for w in cfg.cleartext_secret_warnings() {
        if warned.insert(w.clone()) {
            tracing::warn!("{w}");
            logged += 1;
        }
    }
    logged
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> ClientConfig {
        ClientConfig::from_properties(pairs.iter().copied()).unwrap()
    }

    const OAUTH: &str =
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required";

    #[test]
    fn cleartext_secrets_are_named_with_their_fix() {
        let plain = |protocol| {
            cfg(&[
                ("bootstrap.servers", "warn-plain:9092"),
                ("security.protocol", protocol),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "mirror"),
                ("sasl.password", "pw-4711"),
            ])
        };
        let w = plain("SASL_PLAINTEXT").cleartext_secret_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("SASL_PLAINTEXT") && w[0].contains("SASL_SSL"),
            "{w:?}"
        );
        assert!(
            w[0].contains("warn-plain:9092") && !w[0].contains("pw-4711"),
            "{w:?}"
        );
        assert!(plain("SASL_SSL").cleartext_secret_warnings().is_empty());

        let scram = cfg(&[
            ("bootstrap.servers", "b:9092"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "mirror"),
            ("sasl.password", "pw"),
        ]);
        assert!(
            scram.cleartext_secret_warnings().is_empty(),
            "SCRAM sends no password"
        );

        let endpoint = |protocol, url| {
            cfg(&[
                ("bootstrap.servers", "b:9092"),
                ("security.protocol", protocol),
                ("sasl.mechanism", "OAUTHBEARER"),
                ("sasl.oauthbearer.token.endpoint.url", url),
                ("sasl.oauthbearer.client.credentials.client.id", "mirror"),
                (
                    "sasl.oauthbearer.client.credentials.client.secret",
                    "cs-0815",
                ),
            ])
            .cleartext_secret_warnings()
        };
        let w = endpoint("SASL_SSL", "http://idp:8080/token");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("sasl.oauthbearer.token.endpoint.url"),
            "{w:?}"
        );
        assert!(
            w[0].contains("https://") && !w[0].contains("cs-0815"),
            "{w:?}"
        );
        assert!(endpoint("SASL_SSL", "https://idp/token").is_empty());
        let w = endpoint("SASL_PLAINTEXT", "http://idp/token");
        assert_eq!(w.len(), 2, "token and secret in the clear: {w:?}");
        assert_eq!(endpoint("SASL_PLAINTEXT", "https://idp/token").len(), 1);

        // Kafka's unsecured test tokens are not secrets.
        let unsecured = cfg(&[
            ("bootstrap.servers", "b:9092"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            (
                "sasl.jaas.config",
                &format!(r#"{OAUTH} unsecuredLoginStringClaim_sub="alice";"#),
            ),
        ]);
        assert!(unsecured.cleartext_secret_warnings().is_empty());
        assert!(
            cfg(&[("bootstrap.servers", "b:9092")])
                .cleartext_secret_warnings()
                .is_empty()
        );
    }

    #[test]
    fn each_warning_is_logged_once_per_process() {
        let c = cfg(&[
            // A server name no other test uses, so the process-wide set starts without it.
            ("bootstrap.servers", "warn-once-test:9092"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ]);
        assert_eq!(warn_once(&c), 1);
        assert_eq!(warn_once(&c), 0);
        assert_eq!(warn_once(&c.clone()), 0);
    }
}
