//! Client configuration, read from Kafka's own client property names.
//!
//! Both spellings are accepted where Java and librdkafka differ (`sasl.mechanism` /
//! `sasl.mechanisms`, `ssl.ca.location` / `ssl.truststore.location` with type PEM). Unknown keys
//! and settings that contradict each other are errors that name the key and the fix; callers
//! that own extra keys (the Strait binary mapping a MirrorMaker file) use
//! [`ClientConfig::from_properties_lenient`] and get the keys this crate does not know back.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// TCP, no authentication.
    Plaintext,
    /// TLS (server-authenticated; mutual TLS when a client certificate is configured).
    Ssl,
    /// SASL over TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections use TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616). Sends the password; use it over TLS only.
    Plain,
    /// SCRAM-SHA-256 (RFC 5802 / 7677).
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
    /// OAUTHBEARER (RFC 7628): a bearer token from an OAuth token endpoint, Kafka's unsecured
    /// JWS mode, or the AWS MSK IAM signer.
    OAuthBearer,
    /// AWS_MSK_IAM: a SigV4-signed payload (Amazon MSK with IAM access control).
    AwsMskIam,
}

impl SaslMechanism {
    /// The IANA name Kafka uses.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
            SaslMechanism::AwsMskIam => "AWS_MSK_IAM",
        }
    }
}

/// Where a PEM document comes from: a file, or the property value itself.
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file path (`ssl.ca.location`, ...).
    File(PathBuf),
    /// PEM text given inline (`ssl.ca.pem`, `ssl.keystore.key`, ...).
    Inline(String),
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::File(p) => write!(f, "File({})", p.display()),
            PemSource::Inline(_) => f.write_str("Inline(..)"),
        }
    }
}

/// A PEM source together with the property it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemSetting {
    /// Where the PEM text is.
    pub source: PemSource,
    /// The property that set it, e.g. `ssl.ca.location`.
    pub key: &'static str,
}

/// A password from the configuration (`ssl.key.password`, `ssl.keystore.password`, ...).
/// Its `Debug` never shows the value, so settings can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(value: impl Into<String>) -> Password {
        Password(value.into())
    }

    /// The password itself, for the code that decrypts with it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A key or trust store file that is not PEM text: PKCS#12 (read), or JKS (rejected with the
/// `keytool` command that converts it). The format is recognized from the file's contents; a
/// PEM file given this way is read as PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSetting {
    /// The file.
    pub path: PathBuf,
    /// The store password (`ssl.keystore.password` / `ssl.truststore.password`).
    pub password: Option<Password>,
    /// The property that named the file (`ssl.keystore.location` / `ssl.truststore.location`).
    pub key: &'static str,
}

/// The TLS part of the configuration (used when `security.protocol` is SSL or SASL_SSL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// CA bundle to trust (`ssl.ca.location`). `None` = the system bundle (or `truststore`).
    pub ca: Option<PemSetting>,
    /// A PKCS#12 truststore (`ssl.truststore.location` with type PKCS12 or unset), used
    /// instead of `ca`.
    pub truststore: Option<StoreSetting>,
    /// Client certificate chain (`ssl.certificate.location`), for mTLS.
    pub certificate: Option<PemSetting>,
    /// Client private key (`ssl.key.location`), for mTLS.
    pub key: Option<PemSetting>,
    /// A PKCS#12 keystore with the client certificate and key (`ssl.keystore.location` with
    /// type PKCS12 or unset), used instead of `certificate` and `key`.
    pub keystore: Option<StoreSetting>,
    /// `ssl.key.password`: decrypts an encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`).
    pub key_password: Option<Password>,
    /// Verify that the broker certificate names the host (`ssl.endpoint.identification.algorithm=https`,
    /// the default). `false` is insecure.
    pub verify_hostname: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            ca: None,
            truststore: None,
            certificate: None,
            key: None,
            keystore: None,
            key_password: None,
            verify_hostname: true,
        }
    }
}

/// The SASL part of the configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// `sasl.username`.
    pub username: String,
    /// `sasl.password`.
    pub password: String,
    /// OAUTHBEARER: where tokens come from, and the token cache the client's connections share.
    pub(crate) oauth: Option<crate::oauth::OAuthBearer>,
    /// AWS_MSK_IAM: the credential settings.
    pub(crate) msk: Option<crate::aws::MskIam>,
}

impl fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("oauth", &self.oauth)
            .field("msk", &self.msk)
            .finish()
    }
}

/// The error text for a JKS store: Strait reads PKCS#12, and `keytool` converts in one step.
pub(crate) fn jks_hint(location: &str, path: &str) -> String {
    let p12 = path.strip_suffix(".jks").unwrap_or(path);
    format!(
        "JKS stores are not supported (JKS is Java's own format; Java itself has defaulted to \
         PKCS#12 since Java 9); convert it once: `keytool -importkeystore -srcstoretype JKS \
         -srckeystore {path} -deststoretype PKCS12 -destkeystore {p12}.p12` (keytool asks for the \
         passwords), then set {location}={p12}.p12 and its type to PKCS12"
    )
}

/// A validated client configuration. Build it with [`ClientConfig::from_properties`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    bootstrap_servers: Vec<String>,
    security_protocol: SecurityProtocol,
    tls: TlsSettings,
    sasl: Option<SaslSettings>,
    client_id: String,
    request_timeout: Duration,
    connection_setup_timeout: Duration,
    retry_backoff: Duration,
    retry_backoff_max: Duration,
    reconnect_backoff: Duration,
    reconnect_backoff_max: Duration,
    metadata_max_age: Duration,
    max_response_size: usize,
    keepalive: bool,
}

/// Every client property this crate understands (anything else is an "unknown key" error).
pub const KNOWN_KEYS: &[&str] = &[
    "bootstrap.servers",
    "security.protocol",
    "client.id",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "metadata.max.age.ms",
    "receive.message.max.bytes",
    "socket.keepalive.enable",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.header.urlencode",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
];

/// The OAUTHBEARER / AWS_MSK_IAM keys (read by `oauth::sasl_settings`).
const OAUTH_KEYS: &[&str] = &[
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.header.urlencode",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
];

/// Default `receive.message.max.bytes`: 100 MiB.
pub const DEFAULT_MAX_RESPONSE_SIZE: usize = 100 * 1024 * 1024;

impl ClientConfig {
    /// Parses Kafka client properties. Unknown keys and conflicting settings are errors.
    pub fn from_properties<I, K, V>(props: I) -> Result<ClientConfig>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let (cfg, unknown) = Self::from_properties_lenient(props)?;
        if let Some((key, _)) = unknown.into_iter().next() {
            let hint = if key.starts_with("ssl.") || key.starts_with("sasl.") {
                " (it is not supported; see the crate documentation for the supported SSL/SASL keys)"
            } else {
                ""
            };
            return Err(Error::config(
                key,
                format!(
                    "unknown property{hint}; remove it. Known properties: {}",
                    KNOWN_KEYS.join(", ")
                ),
            ));
        }
        Ok(cfg)
    }

    /// Like [`from_properties`](Self::from_properties), but returns the keys this crate does not
    /// know (in input order) instead of failing, so a caller can handle its own keys. Invalid
    /// values and conflicts among known keys are still errors.
    pub fn from_properties_lenient<I, K, V>(
        props: I,
    ) -> Result<(ClientConfig, Vec<(String, String)>)>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut known: BTreeMap<&'static str, String> = BTreeMap::new();
        let mut unknown = Vec::new();
        for (k, v) in props {
            let k = k.as_ref().trim();
            let v = v.as_ref();
            match KNOWN_KEYS.iter().find(|known| **known == k) {
                Some(key) => {
                    if known.insert(key, v.to_owned()).is_some() {
                        return Err(Error::config(
                            *key,
                            "set more than once; keep a single value",
                        ));
                    }
                }
                None => unknown.push((k.to_owned(), v.to_owned())),
            }
        }
        Ok((Props(known).build()?, unknown))
    }

    /// `bootstrap.servers`, as `host:port` strings.
    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }

    /// `client.id`.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// `security.protocol`.
    pub fn security_protocol(&self) -> SecurityProtocol {
        self.security_protocol
    }

    /// TLS settings (meaningful when the protocol uses TLS).
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// SASL settings (present exactly when the protocol uses SASL).
    pub fn sasl(&self) -> Option<&SaslSettings> {
        self.sasl.as_ref()
    }

    /// `request.timeout.ms`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// `socket.connection.setup.timeout.ms`: TCP connect, TLS handshake, ApiVersions and SASL.
    pub fn connection_setup_timeout(&self) -> Duration {
        self.connection_setup_timeout
    }

    /// `retry.backoff.ms`.
    pub fn retry_backoff(&self) -> Duration {
        self.retry_backoff
    }

    /// `retry.backoff.max.ms`.
    pub fn retry_backoff_max(&self) -> Duration {
        self.retry_backoff_max
    }

    /// `reconnect.backoff.ms`.
    pub fn reconnect_backoff(&self) -> Duration {
        self.reconnect_backoff
    }

    /// `reconnect.backoff.max.ms`.
    pub fn reconnect_backoff_max(&self) -> Duration {
        self.reconnect_backoff_max
    }

    /// `metadata.max.age.ms`.
    pub fn metadata_max_age(&self) -> Duration {
        self.metadata_max_age
    }

    /// `receive.message.max.bytes`: the largest response frame accepted.
    pub fn max_response_size(&self) -> usize {
        self.max_response_size
    }

    /// `socket.keepalive.enable`: TCP keepalive on broker connections (default true, as the
    /// Java client always enables it), so that the OS detects a peer that vanished without a
    /// reset, and idle connections are not silently dropped by NAT or firewalls.
    pub fn keepalive(&self) -> bool {
        self.keepalive
    }

    /// Sets `client.id`.
    pub fn with_client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = client_id.into();
        self
    }

    /// Sets `request.timeout.ms`.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets `receive.message.max.bytes`.
    pub fn with_max_response_size(mut self, bytes: usize) -> Self {
        self.max_response_size = bytes;
        self
    }

    /// The principal the broker most likely sees, for error messages: `User:<sasl.username>`
    /// with SASL. (With mTLS the TLS module derives it from the certificate.)
    pub(crate) fn sasl_principal(&self) -> Option<String> {
        self.sasl
            .as_ref()
            .filter(|s| !s.username.is_empty())
            .map(|s| format!("User:{}", s.username))
    }
}

/// The known keys of one configuration, consumed as they are validated.
struct Props(BTreeMap<&'static str, String>);

impl Props {
    fn take(&mut self, key: &'static str) -> Option<String> {
        self.0.remove(key)
    }

    fn take_trimmed(&mut self, key: &'static str) -> Option<String> {
        self.take(key).map(|v| v.trim().to_owned())
    }

    fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    fn millis(&mut self, key: &'static str, default_ms: u64, allow_zero: bool) -> Result<Duration> {
        let Some(v) = self.take_trimmed(key) else {
            return Ok(Duration::from_millis(default_ms));
        };
        let ms: u64 = v.parse().map_err(|_| {
            Error::config(
                key,
                format!(
                    "`{v}` is not a number of milliseconds; use a whole number like {default_ms}"
                ),
            )
        })?;
        if ms == 0 && !allow_zero {
            return Err(Error::config(
                key,
                format!("must be greater than 0 (default {default_ms})"),
            ));
        }
        Ok(Duration::from_millis(ms))
    }

    fn build(mut self) -> Result<ClientConfig> {
        let bootstrap_servers = parse_bootstrap(self.take("bootstrap.servers"))?;

        let security_protocol = match self.take_trimmed("security.protocol") {
            None => SecurityProtocol::Plaintext,
            Some(v) => match v.to_ascii_uppercase().as_str() {
                "PLAINTEXT" => SecurityProtocol::Plaintext,
                "SSL" => SecurityProtocol::Ssl,
                "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
                "SASL_SSL" => SecurityProtocol::SaslSsl,
                _ => {
                    return Err(Error::config(
                        "security.protocol",
                        format!("`{v}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
                    ));
                }
            },
        };

        let tls = self.tls(security_protocol)?;
        let sasl = self.sasl(security_protocol)?;

        let client_id = self
            .take("client.id")
            .unwrap_or_else(|| "strait".to_owned());
        let request_timeout = self.millis("request.timeout.ms", 30_000, false)?;
        let connection_setup_timeout =
            self.millis("socket.connection.setup.timeout.ms", 10_000, false)?;
        let retry_backoff = self.millis("retry.backoff.ms", 100, true)?;
        let retry_backoff_max = self.millis("retry.backoff.max.ms", 1_000, true)?;
        let reconnect_backoff = self.millis("reconnect.backoff.ms", 50, true)?;
        let reconnect_backoff_max = self.millis("reconnect.backoff.max.ms", 1_000, true)?;
        let metadata_max_age = self.millis("metadata.max.age.ms", 300_000, false)?;
        let max_response_size = match self.take_trimmed("receive.message.max.bytes") {
            None => DEFAULT_MAX_RESPONSE_SIZE,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n >= 1024 => n,
                _ => {
                    return Err(Error::config(
                        "receive.message.max.bytes",
                        format!(
                            "`{v}` is not a byte count of at least 1024 (default {DEFAULT_MAX_RESPONSE_SIZE})"
                        ),
                    ));
                }
            },
        };
        let keepalive = match self.take_trimmed("socket.keepalive.enable") {
            None => true,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                return Err(Error::config(
                    "socket.keepalive.enable",
                    format!("`{v}` is not true or false (default true)"),
                ));
            }
        };
        if retry_backoff_max < retry_backoff {
            return Err(Error::config(
                "retry.backoff.max.ms",
                "is smaller than retry.backoff.ms; make it at least as large",
            ));
        }
        if reconnect_backoff_max < reconnect_backoff {
            return Err(Error::config(
                "reconnect.backoff.max.ms",
                "is smaller than reconnect.backoff.ms; make it at least as large",
            ));
        }
        debug_assert!(self.0.is_empty(), "unconsumed keys: {:?}", self.0.keys());

        Ok(ClientConfig {
            bootstrap_servers,
            security_protocol,
            tls,
            sasl,
            client_id,
            request_timeout,
            connection_setup_timeout,
            retry_backoff,
            retry_backoff_max,
            reconnect_backoff,
            reconnect_backoff_max,
            metadata_max_age,
            max_response_size,
            keepalive,
        })
    }

    fn tls(&mut self, protocol: SecurityProtocol) -> Result<TlsSettings> {
        const SSL_KEYS: &[&str] = &[
            "ssl.ca.location",
            "ssl.ca.pem",
            "ssl.certificate.location",
            "ssl.certificate.pem",
            "ssl.key.location",
            "ssl.key.pem",
            "ssl.key.password",
            "ssl.endpoint.identification.algorithm",
            "ssl.truststore.location",
            "ssl.truststore.type",
            "ssl.truststore.certificates",
            "ssl.truststore.password",
            "ssl.keystore.location",
            "ssl.keystore.type",
            "ssl.keystore.certificate.chain",
            "ssl.keystore.key",
            "ssl.keystore.password",
        ];
        if !protocol.uses_tls() {
            if let Some(key) = SSL_KEYS.iter().find(|k| self.has(k)) {
                return Err(Error::config(
                    *key,
                    format!(
                        "is set but security.protocol is {}, which does not use TLS; set \
                         security.protocol=SSL (or SASL_SSL), or remove {key}",
                        protocol.name()
                    ),
                ));
            }
            return Ok(TlsSettings::default());
        }

        let keystore_pem = self.store_type("ssl.keystore.type", "ssl.keystore.location")?;
        let truststore_pem = self.store_type("ssl.truststore.type", "ssl.truststore.location")?;
        let keystore_password = self.take("ssl.keystore.password").map(Password);
        let truststore_password = self.take("ssl.truststore.password").map(Password);

        // A truststore file that is not declared PEM is a store (PKCS#12, or JKS: an error at
        // load time); its contents decide, as a PEM file given this way still works.
        let mut truststore = if truststore_pem {
            None
        } else {
            self.take("ssl.truststore.location")
                .map(|path| self.store(path, "ssl.truststore.location"))
                .transpose()?
        };
        let ca = self.one_pem(&[
            ("ssl.ca.location", true),
            ("ssl.ca.pem", false),
            ("ssl.truststore.location", true),
            ("ssl.truststore.certificates", false),
        ])?;
        if let (Some(store), Some(ca)) = (&truststore, &ca) {
            return Err(Error::config(
                store.key,
                format!(
                    "conflicts with {}; configure the trusted CAs one way only",
                    ca.key
                ),
            ));
        }
        let keystore_location = self.take("ssl.keystore.location");
        let mut certificate = self.one_pem(&[
            ("ssl.certificate.location", true),
            ("ssl.certificate.pem", false),
            ("ssl.keystore.certificate.chain", false),
        ])?;
        let mut key = self.one_pem(&[
            ("ssl.key.location", true),
            ("ssl.key.pem", false),
            ("ssl.keystore.key", false),
        ])?;
        let mut keystore = None;
        if let Some(path) = keystore_location {
            if let Some(other) = certificate.as_ref().or(key.as_ref()) {
                return Err(Error::config(
                    "ssl.keystore.location",
                    format!(
                        "conflicts with {}; configure the client certificate one way only",
                        other.key
                    ),
                ));
            }
            if keystore_pem {
                // A Java PEM keystore file holds the private key and the certificate chain together.
                let source = PemSource::File(PathBuf::from(path.trim()));
                certificate = Some(PemSetting {
                    source: source.clone(),
                    key: "ssl.keystore.location",
                });
                key = Some(PemSetting {
                    source,
                    key: "ssl.keystore.location",
                });
            } else {
                keystore = Some(self.store(path, "ssl.keystore.location")?);
            }
        }
        for (password, store, key, location) in [
            (
                keystore_password,
                keystore.as_mut(),
                "ssl.keystore.password",
                "ssl.keystore.location",
            ),
            (
                truststore_password,
                truststore.as_mut(),
                "ssl.truststore.password",
                "ssl.truststore.location",
            ),
        ] {
            match (password, store) {
                (Some(password), Some(store)) => store.password = Some(password),
                (Some(_), None) => {
                    return Err(Error::config(
                        key,
                        format!(
                            "is set but there is no PKCS#12 store to open with it; set {location} \
                             (a PEM file has no store password: an encrypted PEM key uses \
                             ssl.key.password), or remove {key}"
                        ),
                    ));
                }
                (None, _) => {}
            }
        }
        match (&certificate, &key) {
            (Some(c), None) => {
                return Err(Error::config(
                    c.key,
                    "a client certificate needs its private key too; set ssl.key.location",
                ));
            }
            (None, Some(k)) => {
                return Err(Error::config(
                    k.key,
                    "a private key needs its client certificate too; set ssl.certificate.location",
                ));
            }
            _ => {}
        }
        let key_password = self.take("ssl.key.password").map(Password);
        if key_password.is_some() && key.is_none() && keystore.is_none() {
            return Err(Error::config(
                "ssl.key.password",
                "is set but no private key is configured; set ssl.key.location (or \
                 ssl.keystore.location) or remove ssl.key.password",
            ));
        }
        let verify_hostname = match self.take_trimmed("ssl.endpoint.identification.algorithm") {
            None => true,
            Some(v) if v.eq_ignore_ascii_case("https") => true,
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("none") => false,
            Some(v) => {
                return Err(Error::config(
                    "ssl.endpoint.identification.algorithm",
                    format!(
                        "`{v}` is not supported; use `https` (the default, verifies the broker \
                         host name) or an empty value (insecure: no host name verification)"
                    ),
                ));
            }
        };
        Ok(TlsSettings {
            ca,
            truststore,
            certificate,
            key,
            keystore,
            key_password,
            verify_hostname,
        })
    }

    /// Reads `ssl.keystore.type` / `ssl.truststore.type`: true for PEM, false for PKCS12 or
    /// unset (the file's contents decide). JKS is refused here, with the conversion command.
    fn store_type(&mut self, key: &'static str, location: &'static str) -> Result<bool> {
        match self.take_trimmed(key) {
            None => Ok(false),
            Some(t) if t.eq_ignore_ascii_case("PEM") => Ok(true),
            Some(t) if t.eq_ignore_ascii_case("PKCS12") || t.eq_ignore_ascii_case("P12") => {
                if !self.has(location) {
                    return Err(Error::config(
                        key,
                        format!(
                            "is {t} but {location} is not set; set {location} to the store file"
                        ),
                    ));
                }
                Ok(false)
            }
            Some(t) if t.eq_ignore_ascii_case("JKS") || t.eq_ignore_ascii_case("JCEKS") => {
                let path = self.0.get(location).map_or("store.jks", |p| p.trim());
                Err(Error::config(key, jks_hint(location, path)))
            }
            Some(t) => Err(Error::config(
                key,
                format!("`{t}` is not a supported store type; use PKCS12 or PEM"),
            )),
        }
    }

    fn store(&self, path: String, key: &'static str) -> Result<StoreSetting> {
        let path = path.trim();
        if path.is_empty() {
            return Err(Error::config(key, "is empty; set a file path or remove it"));
        }
        Ok(StoreSetting {
            path: PathBuf::from(path),
            password: None,
            key,
        })
    }

    /// At most one of several alternative keys; `(key, is_path)`.
    fn one_pem(&mut self, keys: &[(&'static str, bool)]) -> Result<Option<PemSetting>> {
        let mut found: Option<PemSetting> = None;
        for &(key, is_path) in keys {
            let Some(v) = self.take(key) else { continue };
            if let Some(prev) = &found {
                return Err(Error::config(
                    key,
                    format!("conflicts with {}; set only one of them", prev.key),
                ));
            }
            let source = if is_path {
                let v = v.trim();
                if v.is_empty() {
                    return Err(Error::config(key, "is empty; set a file path or remove it"));
                }
                PemSource::File(PathBuf::from(v))
            } else {
                if !v.contains("-----BEGIN") {
                    return Err(Error::config(
                        key,
                        "does not contain PEM text (-----BEGIN ...); use the matching .location key for a file path",
                    ));
                }
                PemSource::Inline(v)
            };
            found = Some(PemSetting { source, key });
        }
        Ok(found)
    }

    fn sasl(&mut self, protocol: SecurityProtocol) -> Result<Option<SaslSettings>> {
        let mechanism = match (
            self.take_trimmed("sasl.mechanism"),
            self.take_trimmed("sasl.mechanisms"),
        ) {
            (Some(a), Some(b)) if !a.eq_ignore_ascii_case(&b) => {
                return Err(Error::config(
                    "sasl.mechanisms",
                    format!("`{b}` conflicts with sasl.mechanism=`{a}`; set only one of them"),
                ));
            }
            (Some(a), _) => Some(("sasl.mechanism", a)),
            (None, Some(b)) => Some(("sasl.mechanisms", b)),
            (None, None) => None,
        };
        let jaas = self.take("sasl.jaas.config");
        let mut username = self.take("sasl.username");
        let mut password = self.take("sasl.password");
        let mut token_keys = BTreeMap::new();
        for key in OAUTH_KEYS {
            if let Some(v) = self.take_trimmed(key) {
                token_keys.insert(*key, v);
            }
        }

        if !protocol.uses_sasl() {
            let set = mechanism
                .as_ref()
                .map(|(k, _)| *k)
                .or(jaas.as_ref().map(|_| "sasl.jaas.config"))
                .or(username.as_ref().map(|_| "sasl.username"))
                .or(password.as_ref().map(|_| "sasl.password"))
                .or(token_keys.keys().next().copied());
            if let Some(key) = set {
                return Err(Error::config(
                    key,
                    format!(
                        "is set but security.protocol is {}, which does not use SASL; set \
                         security.protocol=SASL_SSL (or SASL_PLAINTEXT), or remove {key}",
                        protocol.name()
                    ),
                ));
            }
            return Ok(None);
        }

        let Some((mech_key, mech)) = mechanism else {
            return Err(Error::config(
                "sasl.mechanism",
                format!(
                    "security.protocol={} needs a SASL mechanism; set sasl.mechanism to PLAIN, \
                     SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (GSSAPI, Kafka's \
                     default, is not supported)",
                    protocol.name()
                ),
            ));
        };
        let mechanism = match mech.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            "OAUTHBEARER" => SaslMechanism::OAuthBearer,
            "AWS_MSK_IAM" => SaslMechanism::AwsMskIam,
            _ => {
                return Err(Error::config(
                    mech_key,
                    format!(
                        "`{mech}` is not supported; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
                         OAUTHBEARER or AWS_MSK_IAM (GSSAPI is not implemented)"
                    ),
                ));
            }
        };
        if matches!(
            mechanism,
            SaslMechanism::OAuthBearer | SaslMechanism::AwsMskIam
        ) {
            for (key, v) in [("sasl.username", &username), ("sasl.password", &password)] {
                if v.is_some() {
                    return Err(Error::config(
                        key,
                        format!(
                            "is not used with {}; remove it (see sasl.jaas.config and the \
                             sasl.oauthbearer.* settings)",
                            mechanism.name()
                        ),
                    ));
                }
            }
            let parsed = jaas.as_deref().map(parse_jaas).transpose()?;
            return crate::oauth::sasl_settings(mechanism, parsed, token_keys).map(Some);
        }
        if let Some(key) = token_keys.keys().next() {
            return Err(Error::config(
                *key,
                format!(
                    "is an OAUTHBEARER / AWS_MSK_IAM setting but sasl.mechanism={}; remove it",
                    mechanism.name()
                ),
            ));
        }
        if let Some(jaas) = jaas {
            let parsed = parse_jaas(&jaas)?;
            let expected = if mechanism == SaslMechanism::Plain {
                JaasModule::Plain
            } else {
                JaasModule::Scram
            };
            if parsed.kind != expected {
                return Err(Error::config(
                    "sasl.jaas.config",
                    format!(
                        "uses {} but {mech_key}={}; use PlainLoginModule with PLAIN and \
                         ScramLoginModule with SCRAM-SHA-256/512",
                        parsed.module,
                        mechanism.name()
                    ),
                ));
            }
            for (key, value, from_jaas) in [
                ("sasl.username", &mut username, parsed.username),
                ("sasl.password", &mut password, parsed.password),
            ] {
                match (value.as_ref(), from_jaas) {
                    (Some(_), Some(_)) => {
                        return Err(Error::config(
                            key,
                            "conflicts with the value in sasl.jaas.config; set it in one place only",
                        ));
                    }
                    (None, Some(v)) => *value = Some(v),
                    _ => {}
                }
            }
        }
        let Some(username) = username.filter(|u| !u.is_empty()) else {
            return Err(Error::config(
                "sasl.username",
                format!("{} needs a user name; set sasl.username", mechanism.name()),
            ));
        };
        let Some(password) = password else {
            return Err(Error::config(
                "sasl.password",
                format!("{} needs a password; set sasl.password", mechanism.name()),
            ));
        };
        Ok(Some(SaslSettings {
            mechanism,
            username,
            password,
            oauth: None,
            msk: None,
        }))
    }
}

fn parse_bootstrap(value: Option<String>) -> Result<Vec<String>> {
    let Some(value) = value else {
        return Err(Error::config(
            "bootstrap.servers",
            "is required; set it to a comma-separated list of host:port",
        ));
    };
    let mut servers = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // Java tolerates a listener-name prefix nowhere in client configs, so neither do we.
        let (host, port) = entry.rsplit_once(':').ok_or_else(|| {
            Error::config(
                "bootstrap.servers",
                format!("`{entry}` has no port; write it as host:port (e.g. {entry}:9092)"),
            )
        })?;
        let host_ok = !host.is_empty()
            && !host.contains("://")
            && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']')));
        if !host_ok {
            return Err(Error::config(
                "bootstrap.servers",
                format!("`{entry}` is not host:port (IPv6 hosts go in brackets: [::1]:9092)"),
            ));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => {
                return Err(Error::config(
                    "bootstrap.servers",
                    format!("`{entry}` has an invalid port `{port}`"),
                ));
            }
        }
        servers.push(entry.to_owned());
    }
    if servers.is_empty() {
        return Err(Error::config(
            "bootstrap.servers",
            "is empty; set it to a comma-separated list of host:port",
        ));
    }
    Ok(servers)
}

/// The login modules `sasl.jaas.config` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JaasModule {
    Plain,
    Scram,
    OAuthBearer,
    MskIam,
}

pub(crate) struct Jaas {
    pub(crate) module: String,
    pub(crate) kind: JaasModule,
    username: Option<String>,
    password: Option<String>,
    /// Every option, in order (OAUTHBEARER and MSK IAM read theirs from here).
    pub(crate) options: Vec<(String, String)>,
}

/// Parses `<LoginModule class> required username="u" password="p";`.
fn parse_jaas(value: &str) -> Result<Jaas> {
    const KEY: &str = "sasl.jaas.config";
    let bad = |why: &str| {
        Error::config(
            KEY,
            format!(
                "{why}; expected e.g. org.apache.kafka.common.security.scram.ScramLoginModule \
                 required username=\"alice\" password=\"secret\";"
            ),
        )
    };
    let s = value.trim();
    let s = s.strip_suffix(';').unwrap_or(s).trim_end();
    let (module, rest) = s
        .split_once(char::is_whitespace)
        .ok_or_else(|| bad("no login module flag"))?;
    let kind = match module.rsplit('.').next() {
        Some("PlainLoginModule") => JaasModule::Plain,
        Some("ScramLoginModule") => JaasModule::Scram,
        Some("OAuthBearerLoginModule") => JaasModule::OAuthBearer,
        Some("IAMLoginModule") => JaasModule::MskIam,
        _ => {
            return Err(bad(&format!(
                "login module `{module}` is not supported (PlainLoginModule, ScramLoginModule, \
                 OAuthBearerLoginModule and software.amazon.msk.auth.iam.IAMLoginModule are)"
            )));
        }
    };
    let rest = rest.trim_start();
    let (flag, mut rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !flag.eq_ignore_ascii_case("required") {
        return Err(bad(&format!("control flag `{flag}` must be `required`")));
    }
    let mut username = None;
    let mut password = None;
    let mut options = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (name, after) = rest
            .split_once('=')
            .ok_or_else(|| bad("option without `=`"))?;
        let name = name.trim();
        let after = after.trim_start();
        let (val, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => out.push(c),
                }
            }
            let end = end.ok_or_else(|| bad("unterminated quoted value"))?;
            (out, &quoted[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        match name {
            "username" => username = Some(val.clone()),
            "password" => password = Some(val.clone()),
            _ => {}
        }
        options.push((name.to_owned(), val));
        rest = remaining;
    }
    Ok(Jaas {
        module: module.to_owned(),
        kind,
        username,
        password,
        options,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<ClientConfig> {
        ClientConfig::from_properties(pairs.iter().copied())
    }

    fn err_key(pairs: &[(&str, &str)]) -> (String, String) {
        match parse(pairs) {
            Err(Error::Config { key, message }) => (key, message),
            other => panic!("expected a config error for {pairs:?}, got {other:?}"),
        }
    }

    const BS: (&str, &str) = ("bootstrap.servers", "a:9092, b:9093");

    #[test]
    fn defaults() {
        let c = parse(&[BS]).unwrap();
        assert_eq!(c.bootstrap_servers(), ["a:9092", "b:9093"]);
        assert_eq!(c.security_protocol(), SecurityProtocol::Plaintext);
        assert_eq!(c.client_id(), "strait");
        assert_eq!(c.request_timeout(), Duration::from_secs(30));
        assert_eq!(c.connection_setup_timeout(), Duration::from_secs(10));
        assert_eq!(c.retry_backoff(), Duration::from_millis(100));
        assert_eq!(c.reconnect_backoff(), Duration::from_millis(50));
        assert_eq!(c.metadata_max_age(), Duration::from_secs(300));
        assert_eq!(c.max_response_size(), 100 * 1024 * 1024);
        assert!(c.keepalive(), "on by default, as in the Java client");
        assert!(c.sasl().is_none());
        assert!(c.tls().verify_hostname);
    }

    #[test]
    fn keepalive_can_be_turned_off() {
        let c = parse(&[BS, ("socket.keepalive.enable", " FALSE ")]).unwrap();
        assert!(!c.keepalive());
        assert!(
            parse(&[BS, ("socket.keepalive.enable", "true")])
                .unwrap()
                .keepalive()
        );
    }

    #[test]
    fn full_sasl_ssl_config() {
        let c = parse(&[
            BS,
            ("security.protocol", "sasl_ssl"),
            ("ssl.ca.location", "/ca.pem"),
            ("ssl.certificate.location", "/c.pem"),
            ("ssl.key.location", "/k.pem"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", " secret "),
            ("client.id", "me"),
            ("request.timeout.ms", "5000"),
            ("receive.message.max.bytes", "2048"),
        ])
        .unwrap();
        assert_eq!(c.security_protocol(), SecurityProtocol::SaslSsl);
        let s = c.sasl().unwrap();
        assert_eq!(s.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(s.password, " secret ", "passwords are not trimmed");
        assert!(
            !format!("{c:?}").contains("secret"),
            "Debug must redact the password"
        );
        assert_eq!(
            c.tls().ca.as_ref().unwrap().source,
            PemSource::File("/ca.pem".into())
        );
        assert_eq!(c.request_timeout(), Duration::from_secs(5));
        assert_eq!(c.max_response_size(), 2048);
        assert_eq!(c.sasl_principal().as_deref(), Some("User:alice"));
    }

    #[test]
    fn java_pem_stores_and_jaas() {
        let c = parse(&[
            BS,
            ("security.protocol", "SASL_SSL"),
            ("ssl.truststore.location", "/ts.pem"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.keystore.location", "/ks.pem"),
            ("ssl.keystore.type", "pem"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="p\"w d";"#,
            ),
        ])
        .unwrap();
        let t = c.tls();
        assert_eq!(t.ca.as_ref().unwrap().key, "ssl.truststore.location");
        assert_eq!(t.certificate.as_ref().unwrap().key, "ssl.keystore.location");
        assert_eq!(
            t.key.as_ref().unwrap().source,
            PemSource::File("/ks.pem".into())
        );
        let s = c.sasl().unwrap();
        assert_eq!(
            (s.username.as_str(), s.password.as_str()),
            ("bob", "p\"w d")
        );
    }

    #[test]
    fn hostname_verification_opt_out() {
        let c = parse(&[
            BS,
            ("security.protocol", "SSL"),
            ("ssl.endpoint.identification.algorithm", ""),
        ])
        .unwrap();
        assert!(!c.tls().verify_hostname);
    }

    #[test]
    fn lenient_returns_unknown_keys() {
        let (c, unknown) = ClientConfig::from_properties_lenient([
            ("bootstrap.servers", "x:1"),
            ("group.id", "g"),
            ("topics", "a,b"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap_servers(), ["x:1"]);
        assert_eq!(
            unknown,
            vec![
                ("group.id".into(), "g".into()),
                ("topics".into(), "a,b".into())
            ]
        );
    }

    #[test]
    fn every_error_path_names_the_key_and_the_fix() {
        // (properties, the key the error must name, a fragment of the fix it must give)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case] = &[
            (
                &[("bootstrap.servers", "a:1"), ("foo.bar", "1")],
                "foo.bar",
                "remove it",
            ),
            (&[], "bootstrap.servers", "is required"),
            (
                &[("bootstrap.servers", " , ")],
                "bootstrap.servers",
                "is empty",
            ),
            (
                &[("bootstrap.servers", "host")],
                "bootstrap.servers",
                "host:9092",
            ),
            (
                &[("bootstrap.servers", "h:0")],
                "bootstrap.servers",
                "invalid port",
            ),
            (
                &[("bootstrap.servers", "h:x")],
                "bootstrap.servers",
                "invalid port",
            ),
            (
                &[("bootstrap.servers", "::1:9092")],
                "bootstrap.servers",
                "brackets",
            ),
            (
                &[("bootstrap.servers", "PLAINTEXT://h:1")],
                "bootstrap.servers",
                "not host:port",
            ),
            (
                &[BS, ("security.protocol", "TLS")],
                "security.protocol",
                "SASL_SSL",
            ),
            (
                &[BS, ("ssl.ca.location", "/ca")],
                "ssl.ca.location",
                "security.protocol=SSL",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.username", "u"),
                    ("sasl.password", "p"),
                    ("ssl.key.password", "x"),
                ],
                "ssl.key.password",
                "does not use TLS",
            ),
            (
                &[BS, ("sasl.mechanism", "PLAIN")],
                "sasl.mechanism",
                "security.protocol=SASL_SSL",
            ),
            (
                &[BS, ("security.protocol", "SSL"), ("sasl.username", "u")],
                "sasl.username",
                "does not use SASL",
            ),
            (
                &[BS, ("security.protocol", "SASL_SSL")],
                "sasl.mechanism",
                "SCRAM-SHA-512",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "GSSAPI"),
                ],
                "sasl.mechanism",
                "not supported",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.mechanisms", "SCRAM-SHA-256"),
                ],
                "sasl.mechanisms",
                "conflicts",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                ],
                "sasl.username",
                "set sasl.username",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.username", "u"),
                ],
                "sasl.password",
                "set sasl.password",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "SCRAM-SHA-256"),
                    (
                        "sasl.jaas.config",
                        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"p\";",
                    ),
                ],
                "sasl.jaas.config",
                "ScramLoginModule",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.username", "u"),
                    (
                        "sasl.jaas.config",
                        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"p\";",
                    ),
                ],
                "sasl.username",
                "one place",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    (
                        "sasl.jaas.config",
                        "com.sun.security.auth.module.Krb5LoginModule required;",
                    ),
                ],
                "sasl.jaas.config",
                "not supported",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.jaas.config", "x.PlainLoginModule optional;"),
                ],
                "sasl.jaas.config",
                "required",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", "PLAIN"),
                    (
                        "sasl.jaas.config",
                        "x.PlainLoginModule required username=\"u;",
                    ),
                ],
                "sasl.jaas.config",
                "unterminated",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.ca.location", "/a"),
                    ("ssl.truststore.location", "/b"),
                    ("ssl.truststore.type", "PEM"),
                ],
                "ssl.truststore.location",
                "conflicts with ssl.ca.location",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.location", "/b"),
                    ("ssl.ca.location", "/a"),
                ],
                "ssl.truststore.location",
                "conflicts with ssl.ca.location",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.location", "/b"),
                    ("ssl.truststore.type", "JKS"),
                ],
                "ssl.truststore.type",
                "convert",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.keystore.type", "PKCS12"),
                ],
                "ssl.keystore.type",
                "ssl.keystore.location is not set",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.keystore.location", "/b"),
                    ("ssl.keystore.type", "BCFKS"),
                ],
                "ssl.keystore.type",
                "use PKCS12 or PEM",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.password", "x"),
                ],
                "ssl.truststore.password",
                "no PKCS#12 store",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.certificate.location", "/c"),
                ],
                "ssl.certificate.location",
                "ssl.key.location",
            ),
            (
                &[BS, ("security.protocol", "SSL"), ("ssl.key.location", "/k")],
                "ssl.key.location",
                "ssl.certificate.location",
            ),
            (
                &[BS, ("security.protocol", "SSL"), ("ssl.key.password", "pw")],
                "ssl.key.password",
                "no private key",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.keystore.location", "/ks"),
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.key.location", "/k"),
                ],
                "ssl.keystore.location",
                "conflicts with ssl.key.location",
            ),
            (
                &[BS, ("security.protocol", "SSL"), ("ssl.ca.pem", "/path")],
                "ssl.ca.pem",
                "PEM text",
            ),
            (
                &[BS, ("security.protocol", "SSL"), ("ssl.ca.location", " ")],
                "ssl.ca.location",
                "is empty",
            ),
            (
                &[
                    BS,
                    ("security.protocol", "SSL"),
                    ("ssl.endpoint.identification.algorithm", "ldap"),
                ],
                "ssl.endpoint.identification.algorithm",
                "https",
            ),
            (
                &[BS, ("request.timeout.ms", "soon")],
                "request.timeout.ms",
                "whole number",
            ),
            (
                &[BS, ("request.timeout.ms", "0")],
                "request.timeout.ms",
                "greater than 0",
            ),
            (
                &[BS, ("socket.keepalive.enable", "yes")],
                "socket.keepalive.enable",
                "not true or false",
            ),
            (
                &[BS, ("receive.message.max.bytes", "10")],
                "receive.message.max.bytes",
                "at least 1024",
            ),
            (
                &[
                    BS,
                    ("retry.backoff.ms", "500"),
                    ("retry.backoff.max.ms", "100"),
                ],
                "retry.backoff.max.ms",
                "at least as large",
            ),
            (
                &[
                    BS,
                    ("reconnect.backoff.ms", "500"),
                    ("reconnect.backoff.max.ms", "100"),
                ],
                "reconnect.backoff.max.ms",
                "at least as large",
            ),
        ];
        for (pairs, key, fix) in cases {
            let (k, m) = err_key(pairs);
            assert_eq!(&k, key, "wrong key for {pairs:?}: {m}");
            assert!(m.contains(fix), "message for {pairs:?} lacks `{fix}`: {m}");
        }
    }

    #[test]
    fn duplicate_key_is_an_error() {
        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("bootstrap.servers", "b:1"),
        ])
        .unwrap_err();
        assert!(matches!(e, Error::Config { ref key, .. } if key == "bootstrap.servers"));
    }
}
