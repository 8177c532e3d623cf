//! TLS and mutual TLS with rustls (ring provider).
//!
//! PEM inputs: a CA bundle, a client certificate chain and a private key (PKCS#8, RSA PKCS#1 or
//! EC SEC1), read with rustls-pki-types' `PemObject`; an encrypted PKCS#8 key (`ENCRYPTED
//! PRIVATE KEY`) is decrypted with `ssl.key.password` (the `pkcs8` crate). PKCS#12 key and trust
//! stores are read with `p12-keystore`; JKS stores get an error with the `keytool` command that
//! converts them. Host name verification is on by default;
//! `ssl.endpoint.identification.algorithm=` (empty, Kafka's own switch) turns it off, which is
//! insecure and logged as a warning. The certificate chain is still verified in that mode.
//! No password or key material ever goes into an error message or a log line.

use std::io;
use std::sync::{Arc, Mutex};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::{Password, PemSetting, PemSource, StoreSetting, TlsSettings, jks_hint};
use crate::error::{Error, Result, TlsFailure};

/// Well-known system CA bundle locations, used when `ssl.ca.location` is not set.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The TLS client configuration for all connections of a client.
///
/// Certificates rotated on disk (cert-manager, Strimzi's CA renewal) are picked up without a
/// restart: before each new connection the files the settings name are stat'ed, and when one
/// changed (modification time, size or inode) the whole configuration is built again from the
/// files. Connections already open keep their handshake. A rebuild that fails (a rotation caught
/// half-written: the new certificate next to the old key) is logged once and the previous
/// configuration stays in use until the files change again.
#[derive(Clone)]
pub(crate) struct TlsContext {
    settings: Arc<TlsSettings>,
    state: Arc<Mutex<State>>,
}

/// The configuration built from the files as they were at `stamp`.
struct State {
    built: Built,
    stamp: Stamp,
    /// The stamp of files a rebuild failed on, so the failure is logged once per change.
    failed: Option<Stamp>,
}

/// What one build of the files gives.
#[derive(Clone)]
struct Built {
    connector: TlsConnector,
    has_client_cert: bool,
    /// The client certificate's validity (not before, not after), in Unix seconds.
    client_validity: Option<(i64, i64)>,
    /// The client certificate's subject, for authorization error messages.
    principal: Option<String>,
}

/// Modification time, size and inode of each file the settings name (`None`: unreadable).
type Stamp = Vec<Option<(std::time::SystemTime, u64, u64)>>;

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let built = self.current();
        f.debug_struct("TlsContext")
            .field("has_client_cert", &built.has_client_cert)
            .field("principal", &built.principal)
            .finish()
    }
}

impl TlsContext {
    /// Reads the PEM files and builds the rustls configuration. Errors name the property.
    pub(crate) fn new(settings: &TlsSettings) -> Result<TlsContext> {
        // Stamped before reading: a change while reading is seen at the next connection.
        let stamp = stamp(settings);
        let built = build(settings)?;
        Ok(TlsContext {
            settings: Arc::new(settings.clone()),
            state: Arc::new(Mutex::new(State {
                built,
                stamp,
                failed: None,
            })),
        })
    }

    /// The subject (`CN=...`) of the client certificate new connections present.
    pub(crate) fn principal(&self) -> Option<String> {
        self.current().principal
    }

    /// True when connections present a client certificate.
    #[cfg(test)]
    fn has_client_cert(&self) -> bool {
        self.current().has_client_cert
    }

    /// The configuration for a new connection, built again first if a file changed on disk.
    fn current(&self) -> Built {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = stamp(&self.settings);
        if now == state.stamp || state.failed.as_ref() == Some(&now) {
            return state.built.clone();
        }
        match build(&self.settings) {
            Ok(built) => {
                tracing::info!(
                    files = ?files(&self.settings),
                    principal = built.principal.as_deref().unwrap_or("-"),
                    "TLS files changed on disk: new connections use the reloaded certificates \
                     (open connections keep theirs)"
                );
                state.built = built;
                state.stamp = now;
                state.failed = None;
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "TLS files changed on disk but cannot be used (a rotation still being \
                     written?); new connections keep the previous certificates until the files \
                     change again"
                );
                state.failed = Some(now);
            }
        }
        state.built.clone()
    }

    /// Runs the TLS handshake over `tcp`. `host` is the name to verify (and send as SNI).
    pub(crate) async fn connect(
        &self,
        host: &str,
        broker: &str,
        tcp: TcpStream,
    ) -> Result<TlsStream<TcpStream>> {
        self.connect_alpn(host, broker, tcp, &[]).await
    }

    /// [`Self::connect`] offering the ALPN protocols `alpn` (`h2` for gRPC: gRPC servers refuse
    /// a TLS connection that did not negotiate it). Kafka connections offer none.
    pub(crate) async fn connect_alpn(
        &self,
        host: &str,
        broker: &str,
        tcp: TcpStream,
        alpn: &[&[u8]],
    ) -> Result<TlsStream<TcpStream>> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::config(
                "bootstrap.servers",
                format!("`{host}` is not a valid TLS server name: {e}"),
            )
        })?;
        let built = self.current();
        let connector = if alpn.is_empty() {
            built.connector.clone()
        } else {
            let mut config = (**built.connector.config()).clone();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            TlsConnector::from(Arc::new(config))
        };
        connector.connect(name, tcp).await.map_err(|e| {
            self.classify(broker, &e)
                .unwrap_or_else(|| tls_io(broker, e))
        })
    }

    /// Turns an I/O error from a TLS stream into a precise [`Error::Tls`], if it is one.
    pub(crate) fn classify(&self, broker: &str, e: &io::Error) -> Option<Error> {
        let built = self.current();
        let mut err = classify(broker, e, built.has_client_cert)?;
        // Brokers (the JDK) answer an expired client certificate with a generic
        // certificate_unknown alert; our own copy of the certificate says why.
        if let Error::Tls { reason, .. } = &mut err
            && *reason == TlsFailure::ClientCertificateRejected
            && let Some((not_before, not_after)) = built.client_validity
        {
            let now = unix_now();
            if now > not_after || now < not_before {
                *reason = TlsFailure::ClientCertificateExpired;
            }
        }
        Some(err)
    }
}

/// The files the settings name, in a fixed order. Inline PEM cannot change; the system CA
/// bundle is read again only at a restart.
fn files(settings: &TlsSettings) -> Vec<&std::path::Path> {
    fn pem(p: &Option<PemSetting>) -> Option<&std::path::Path> {
        match p {
            Some(PemSetting {
                source: PemSource::File(path),
                ..
            }) => Some(path.as_path()),
            _ => None,
        }
    }
    [
        pem(&settings.ca),
        settings.truststore.as_ref().map(|s| s.path.as_path()),
        pem(&settings.certificate),
        pem(&settings.key),
        settings.keystore.as_ref().map(|s| s.path.as_path()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The files' stamp now. `metadata` follows symbolic links, so a Kubernetes Secret volume
/// (files behind a `..data` link that is swapped atomically) changes the stamp too.
fn stamp(settings: &TlsSettings) -> Stamp {
    files(settings)
        .into_iter()
        .map(|path| {
            let m = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            Some((m.modified().ok()?, m.len(), ino))
        })
        .collect()
}

/// Reads the files and builds the rustls configuration. Errors name the property.
fn build(settings: &TlsSettings) -> Result<Built> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = Arc::new(match &settings.truststore {
        Some(store) => match open_store(store)? {
            Store::Pem(pem) => roots_from_pem(&pem, store.key, &store.path.display().to_string())?,
            Store::Pkcs12(bytes) => pkcs12_roots(store, &bytes)?,
        },
        None => load_roots(settings.ca.as_ref())?,
    });

    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config("security.protocol", format!("TLS setup failed: {e}")))?;
    let builder = if settings.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        tracing::warn!(
            "ssl.endpoint.identification.algorithm is empty: broker host names are NOT verified \
             (insecure; anyone with a certificate from the trusted CA can impersonate a broker)"
        );
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| {
                Error::config(
                    settings
                        .truststore
                        .as_ref()
                        .map(|t| t.key)
                        .or(settings.ca.as_ref().map(|c| c.key))
                        .unwrap_or("ssl.ca.location"),
                    format!("cannot use the CA bundle: {e}"),
                )
            })?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoHostnameVerification { inner }))
    };

    // A keystore file: PKCS#12, or a PEM file holding the chain and the key.
    let keystore = match &settings.keystore {
        Some(store) => Some(match open_store(store)? {
            Store::Pkcs12(bytes) => (pkcs12_identity(store, &bytes)?, store.key),
            Store::Pem(_) => {
                let pem = PemSetting {
                    source: PemSource::File(store.path.clone()),
                    key: store.key,
                };
                let chain = load_chain(&pem)?;
                let key = load_key(&pem, settings.key_password.as_ref())?;
                ((chain, key), store.key)
            }
        }),
        None => None,
    };
    let identity = match (keystore, &settings.certificate, &settings.key) {
        (Some(identity), _, _) => Some(identity),
        (None, Some(cert), Some(key)) => Some((
            (
                load_chain(cert)?,
                load_key(key, settings.key_password.as_ref())?,
            ),
            key.key,
        )),
        _ => None,
    };
    let (config, has_client_cert, principal, client_validity) = match identity {
        Some(((chain, key_der), key_property)) => {
            // The whole subject, as the broker's default principal mapping names it.
            let principal = chain.first().and_then(|c| subject_dn(c));
            let validity = chain.first().and_then(|c| validity(c));
            if let Some((not_before, not_after)) = validity {
                let now = unix_now();
                if now > not_after || now < not_before {
                    tracing::warn!(
                        "the client certificate ({key_property}) is not valid now (expired \
                         or not yet valid); brokers will reject it"
                    );
                }
            }
            let config = builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                Error::config(
                    key_property,
                    format!(
                        "the private key does not fit the client certificate or is unsupported: {e}"
                    ),
                )
            })?;
            (config, true, principal, validity)
        }
        None => (builder.with_no_client_auth(), false, None, None),
    };
    Ok(Built {
        connector: TlsConnector::from(Arc::new(config)),
        has_client_cert,
        client_validity,
        principal,
    })
}

fn tls_io(broker: &str, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return Error::Tls {
            broker: broker.to_owned(),
            reason: TlsFailure::NotTls,
            detail: "the broker closed the connection during the TLS handshake".into(),
        };
    }
    Error::Tls {
        broker: broker.to_owned(),
        reason: TlsFailure::Handshake,
        detail: e.to_string(),
    }
}

/// Maps rustls errors (wrapped in `io::Error` by tokio-rustls) to a [`TlsFailure`].
pub(crate) fn classify(broker: &str, e: &io::Error, has_client_cert: bool) -> Option<Error> {
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let reason = failure_of(inner, has_client_cert);
    Some(Error::Tls {
        broker: broker.to_owned(),
        reason,
        detail: inner.to_string(),
    })
}

fn failure_of(e: &rustls::Error, has_client_cert: bool) -> TlsFailure {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(c) => match c {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsFailure::BrokerHostnameMismatch
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => TlsFailure::BrokerCertificateExpired,
            _ => TlsFailure::UntrustedBrokerCertificate,
        },
        E::AlertReceived(alert) => match alert {
            AlertDescription::CertificateExpired => TlsFailure::ClientCertificateExpired,
            AlertDescription::CertificateRequired => TlsFailure::ClientCertificateRequired,
            AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::HandshakeFailure
            | AlertDescription::AccessDenied => {
                if has_client_cert {
                    TlsFailure::ClientCertificateRejected
                } else {
                    TlsFailure::ClientCertificateRequired
                }
            }
            _ => TlsFailure::Handshake,
        },
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => TlsFailure::NotTls,
        _ => TlsFailure::Handshake,
    }
}

/// Wraps the WebPKI verifier and accepts certificates whose only fault is the host name.
/// Chain, expiry and signatures are still checked (the WebPKI verifier checks the name last).
#[derive(Debug)]
struct NoHostnameVerification {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for NoHostnameVerification {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Reads a PEM source into memory. Errors name the property and the path.
fn read_pem(setting: &PemSetting) -> Result<Vec<u8>> {
    match &setting.source {
        PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        PemSource::File(path) => std::fs::read(path).map_err(|e| {
            Error::config(
                setting.key,
                format!(
                    "cannot read {}: {e}; check the path and its permissions",
                    path.display()
                ),
            )
        }),
    }
}

fn describe(setting: &PemSetting) -> String {
    match &setting.source {
        PemSource::File(p) => p.display().to_string(),
        PemSource::Inline(_) => "the inline PEM".to_owned(),
    }
}

fn load_roots(ca: Option<&PemSetting>) -> Result<RootCertStore> {
    let (pem, key, what) = match ca {
        Some(setting) => (read_pem(setting)?, setting.key, describe(setting)),
        None => {
            let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
            return default_roots(
                from_env
                    .into_iter()
                    .chain(SYSTEM_CA_BUNDLES.iter().map(std::path::PathBuf::from)),
            );
        }
    };
    not_a_store(&pem, key, &what)?;
    roots_from_pem(&pem, key, &what)
}

/// The roots without `ssl.ca.location`: the first readable bundle of `candidates`
/// (`SSL_CERT_FILE`, then the system's), else the Mozilla roots compiled into the binary
/// (webpki-roots). A scratch container image has no system bundle, and public-CA endpoints
/// (MSK, Confluent Cloud, an OAuth token endpoint, AWS STS) must still verify there.
fn default_roots(
    mut candidates: impl Iterator<Item = std::path::PathBuf>,
) -> Result<RootCertStore> {
    match candidates.find_map(|p| std::fs::read(&p).ok().map(|b| (b, p))) {
        Some((pem, path)) => {
            let what = path.display().to_string();
            not_a_store(&pem, "ssl.ca.location", &what)?;
            roots_from_pem(&pem, "ssl.ca.location", &what)
        }
        None => {
            tracing::debug!(
                "no system CA bundle and no SSL_CERT_FILE: trusting the Mozilla roots built in"
            );
            let mut roots = RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Ok(roots)
        }
    }
}

fn roots_from_pem(pem: &[u8], key: &str, what: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let mut rejected = 0usize;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| Error::config(key, format!("{what} is not valid PEM: {e}")))?;
        if roots.add(cert).is_err() {
            rejected += 1;
        }
    }
    if roots.is_empty() {
        return Err(Error::config(
            key,
            format!(
                "{what} contains no usable CERTIFICATE ({rejected} rejected); it must hold the \
                 PEM-encoded CA certificate(s)"
            ),
        ));
    }
    Ok(roots)
}

fn load_chain(setting: &PemSetting) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read_pem(setting)?;
    let what = describe(setting);
    not_a_store(&pem, setting.key, &what)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::config(setting.key, format!("{what} is not valid PEM: {e}")))?;
    if chain.is_empty() {
        return Err(Error::config(
            setting.key,
            format!(
                "{what} contains no CERTIFICATE; it must hold the client certificate (then any intermediates)"
            ),
        ));
    }
    Ok(chain)
}

fn load_key(setting: &PemSetting, password: Option<&Password>) -> Result<PrivateKeyDer<'static>> {
    let pem = read_pem(setting)?;
    let what = describe(setting);
    let text = String::from_utf8_lossy(&pem);
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(Error::config(
            setting.key,
            format!(
                "the private key in {what} is encrypted in OpenSSL's legacy format (Proc-Type: \
                 4,ENCRYPTED), which is not supported; convert it once to an encrypted PKCS#8 key \
                 with `openssl pkcs8 -topk8 -v2 aes-256-cbc -in key.pem -out key-pkcs8.pem` and \
                 point {} at the result (ssl.key.password stays the password you give openssl)",
                setting.key
            ),
        ));
    }
    if let Some(block) = pem_block(&text, "ENCRYPTED PRIVATE KEY") {
        let Some(password) = password else {
            return Err(Error::config(
                setting.key,
                format!(
                    "the private key in {what} is encrypted (ENCRYPTED PRIVATE KEY); set \
                     ssl.key.password to its password"
                ),
            ));
        };
        return decrypt_pkcs8(block, password, setting.key, &what);
    }
    if password.is_some() {
        tracing::warn!(
            "ssl.key.password is set but the key in {what} is not encrypted; the password is ignored"
        );
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        Error::config(
            setting.key,
            format!(
                "{what} holds no usable private key ({e}); expected a PEM \"PRIVATE KEY\" (PKCS#8), \
                 \"RSA PRIVATE KEY\" (PKCS#1) or \"EC PRIVATE KEY\" (SEC1) block"
            ),
        )
    })
}

/// JKS and PKCS#12 files are binary; say so instead of "invalid PEM".
fn not_a_store(bytes: &[u8], key: &str, what: &str) -> Result<()> {
    if !is_pem(bytes) {
        return Err(Error::config(
            key,
            format!(
                "{what} is not a PEM file (no -----BEGIN line); if it is a JKS or PKCS#12 store, \
                 give it as ssl.truststore.location / ssl.keystore.location with type PKCS12 \
                 (a JKS store must be converted to PKCS#12 with `keytool -importkeystore`)"
            ),
        ));
    }
    Ok(())
}

fn is_pem(bytes: &[u8]) -> bool {
    bytes.windows(10).any(|w| w == b"-----BEGIN")
}

/// The text of the first PEM block with this label, BEGIN and END lines included.
fn pem_block<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)?;
    let stop = text[start..].find(&end)? + start + end.len();
    Some(&text[start..stop])
}

/// Decrypts an `ENCRYPTED PRIVATE KEY` PEM block (PKCS#8 with PBES2: PBKDF2 or scrypt, AES or
/// 3DES). The key stays in memory only as rustls' key.
fn decrypt_pkcs8(
    block: &str,
    password: &Password,
    key: &'static str,
    what: &str,
) -> Result<PrivateKeyDer<'static>> {
    use pkcs8::der::Decode;
    let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes()).map_err(|e| {
        Error::config(
            key,
            format!("the encrypted private key in {what} is not valid PEM: {e}"),
        )
    })?;
    let info = pkcs8::EncryptedPrivateKeyInfoRef::from_der(&der).map_err(|e| {
        Error::config(
            key,
            format!(
                "the encrypted private key in {what} is not a PKCS#8 EncryptedPrivateKeyInfo: {e}"
            ),
        )
    })?;
    let plain = info.decrypt(password.expose()).map_err(|e| {
        Error::config(
            key,
            format!(
                "cannot decrypt the private key in {what} ({e}); check ssl.key.password (a wrong \
                 password shows up like this too) and that the key uses PBES2 (`openssl pkcs8 \
                 -topk8 -v2 aes-256-cbc` writes one)"
            ),
        )
    })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// A store file's contents, by what they are.
enum Store {
    Pem(Vec<u8>),
    Pkcs12(Vec<u8>),
}

/// Reads a store file and tells PKCS#12 from PEM; JKS (and JCEKS) is an error that says how to
/// convert it.
fn open_store(store: &StoreSetting) -> Result<Store> {
    let path = store.path.display().to_string();
    let bytes = std::fs::read(&store.path).map_err(|e| {
        Error::config(
            store.key,
            format!("cannot read {path}: {e}; check the path and its permissions"),
        )
    })?;
    // JKS starts with 0xFEEDFEED, JCEKS with 0xCECECECE.
    if bytes.starts_with(&[0xfe, 0xed, 0xfe, 0xed]) || bytes.starts_with(&[0xce, 0xce, 0xce, 0xce])
    {
        return Err(Error::config(
            store.key,
            format!("{path}: {}", jks_hint(store.key, &path)),
        ));
    }
    if is_pem(&bytes) {
        return Ok(Store::Pem(bytes));
    }
    Ok(Store::Pkcs12(bytes))
}

/// Parses a PKCS#12 file; errors name the property and never the password.
fn pkcs12(
    store: &StoreSetting,
    bytes: &[u8],
    policy: p12_keystore::Pkcs12ImportPolicy,
) -> Result<p12_keystore::KeyStore> {
    let password = store.password.as_ref().map_or("", Password::expose);
    let path = store.path.display();
    let password_key = if store.key == "ssl.keystore.location" {
        "ssl.keystore.password"
    } else {
        "ssl.truststore.password"
    };
    p12_keystore::KeyStore::from_pkcs12(bytes, password, policy).map_err(|e| {
        let message = match e {
            p12_keystore::error::Error::MacError(_) => format!(
                "cannot open {path}: the store password is wrong{}; set {password_key}",
                if store.password.is_none() {
                    " (none is set)"
                } else {
                    ""
                }
            ),
            other => format!(
                "cannot read {path} as a PKCS#12 store ({other}); check {password_key} and that \
                 the file is PKCS#12 (`openssl pkcs12 -info -in {path}` shows it)"
            ),
        };
        Error::config(store.key, message)
    })
}

/// The trusted certificates of a PKCS#12 truststore: every certificate in it (Java's
/// `keytool -importcert` entries, or a bundle `openssl pkcs12 -export -nokeys` wrote).
fn pkcs12_roots(store: &StoreSetting, bytes: &[u8]) -> Result<RootCertStore> {
    let ks = pkcs12(store, bytes, p12_keystore::Pkcs12ImportPolicy::Raw)?;
    let mut roots = RootCertStore::empty();
    let mut rejected = 0usize;
    for (_, entry) in ks.entries() {
        let certs: Vec<&[u8]> = match entry {
            p12_keystore::KeyStoreEntry::Certificate(c) => vec![c.as_der()],
            p12_keystore::KeyStoreEntry::PrivateKeyChain(ch) => {
                ch.certs().iter().map(|c| c.as_der()).collect()
            }
            _ => Vec::new(),
        };
        for der in certs {
            if roots.add(CertificateDer::from(der.to_vec())).is_err() {
                rejected += 1;
            }
        }
    }
    if roots.is_empty() {
        return Err(Error::config(
            store.key,
            format!(
                "{} contains no usable certificate ({rejected} rejected); a truststore must hold \
                 the CA certificate(s) that signed the broker certificates",
                store.path.display()
            ),
        ));
    }
    Ok(roots)
}

/// The client certificate chain and private key of a PKCS#12 keystore.
fn pkcs12_identity(
    store: &StoreSetting,
    bytes: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let ks = pkcs12(store, bytes, p12_keystore::Pkcs12ImportPolicy::Strict)?;
    let keys = ks
        .entries()
        .filter(|(_, e)| matches!(e, p12_keystore::KeyStoreEntry::PrivateKeyChain(_)))
        .count();
    let Some((alias, chain)) = ks.private_key_chain() else {
        return Err(Error::config(
            store.key,
            format!(
                "{} holds no private key with its certificate; a keystore must hold the client's \
                 key and certificate (`openssl pkcs12 -export -inkey key.pem -in cert.pem -out \
                 store.p12` makes one)",
                store.path.display()
            ),
        ));
    };
    if keys > 1 {
        tracing::warn!(
            "{} holds {keys} private keys; using the one named `{alias}`",
            store.path.display()
        );
    }
    let certs: Vec<CertificateDer<'static>> = chain
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    if certs.is_empty() {
        return Err(Error::config(
            store.key,
            format!(
                "the key `{alias}` in {} has no certificate",
                store.path.display()
            ),
        ));
    }
    let key = PrivateKeyDer::Pkcs8(chain.key().as_der().to_vec().into());
    Ok((certs, key))
}

/// The subject (a DER SEQUENCE OF RDN, contents only) of a DER certificate. A minimal DER walk:
/// the crate has no X.509 parser dependency and needs only the subject and validity, for error
/// messages.
fn subject(cert: &[u8]) -> Option<&[u8]> {
    let (_, cert_body, _) = der_tlv(cert).filter(|t| t.0 == 0x30)?;
    let (_, tbs, _) = der_tlv(cert_body).filter(|t| t.0 == 0x30)?;
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, after) = der_tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = der_tlv(rest)?.2;
    }
    der_tlv(rest).filter(|t| t.0 == 0x30).map(|t| t.1)
}

/// The subject of a DER certificate as the broker names it: Java's
/// `X500Principal.getName()` (RFC 2253), which is the principal name Kafka's default
/// `ssl.principal.mapping.rules` (`DEFAULT`) keep unchanged. RDNs in reverse order, the RFC 2253
/// keywords (CN, C, L, ST, O, OU, STREET, DC, UID), other attribute types as dotted OIDs with a
/// `#`-hex value, and Java's escaping. `None` for an empty or unparsable subject.
pub(crate) fn subject_dn(cert: &[u8]) -> Option<String> {
    let mut rdns = subject(cert)?;
    let mut out: Vec<String> = Vec::new();
    while !rdns.is_empty() {
        let (_, set, next) = der_tlv(rdns).filter(|t| t.0 == 0x31)?;
        let mut attrs = set;
        let mut avas = Vec::new();
        while !attrs.is_empty() {
            let (_, atv, more) = der_tlv(attrs).filter(|t| t.0 == 0x30)?;
            let (oid_tag, oid, value) = der_tlv(atv)?;
            if oid_tag != 0x06 {
                return None;
            }
            let (tag, content, after) = der_tlv(value)?;
            let whole = &value[..value.len() - after.len()];
            avas.push(rfc2253_ava(oid, tag, content, whole)?);
            attrs = more;
        }
        out.push(avas.join("+"));
        rdns = next;
    }
    out.reverse();
    (!out.is_empty()).then(|| out.join(","))
}

/// One `type=value` of an RFC 2253 name, formatted as Java's `AVA.toRFC2253String`.
fn rfc2253_ava(oid: &[u8], tag: u8, content: &[u8], whole: &[u8]) -> Option<String> {
    const KEYWORDS: &[(&[u8], &str)] = &[
        (&[0x55, 0x04, 0x03], "CN"),
        (&[0x55, 0x04, 0x06], "C"),
        (&[0x55, 0x04, 0x07], "L"),
        (&[0x55, 0x04, 0x08], "ST"),
        (&[0x55, 0x04, 0x09], "STREET"),
        (&[0x55, 0x04, 0x0a], "O"),
        (&[0x55, 0x04, 0x0b], "OU"),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
            "DC",
        ),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
            "UID",
        ),
    ];
    let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
    // The string types Java formats as text, decoded as Java 17 does: the raw bytes as UTF-8
    // (exact for UTF8String, PrintableString and IA5String, the ones certificates use).
    let text = matches!(tag, 0x0c | 0x13 | 0x14 | 0x16 | 0x1b | 0x1e)
        .then(|| String::from_utf8_lossy(content).into_owned());
    let (Some(keyword), Some(text)) = (keyword, text) else {
        // Unknown attribute types and non-string values: dotted OID and the value's DER in hex.
        let hex: String = whole.iter().map(|b| format!("{b:02x}")).collect();
        let name = keyword.map_or_else(|| dotted_oid(oid), |k| Some(k.to_owned()))?;
        return Some(format!("{name}=#{hex}"));
    };
    const ESCAPED: &str = ",=+<>#;\"\\";
    let mut chars: Vec<String> = Vec::new();
    for c in text.chars() {
        if ESCAPED.contains(c) {
            chars.push(format!("\\{c}"));
        } else if c == '\0' {
            chars.push("\\00".into());
        } else {
            chars.push(c.to_string());
        }
    }
    // Leading and trailing spaces (and CRs) are escaped too.
    let blank = |s: &String| s == " " || s == "\r";
    let lead = chars.iter().take_while(|c| blank(c)).count();
    let trail = chars.len() - chars.iter().rev().take_while(|c| blank(c)).count();
    let mut value = String::new();
    for (i, c) in chars.iter().enumerate() {
        if i < lead || i >= trail.max(lead) {
            value.push('\\');
        }
        value.push_str(c);
    }
    Some(format!("{keyword}={value}"))
}

/// `2.5.4.3` from the DER contents of an OBJECT IDENTIFIER.
fn dotted_oid(oid: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    for (i, &b) in oid.iter().enumerate() {
        acc = acc.checked_mul(128)?.checked_add(u64::from(b & 0x7f))?;
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (acc / 40).min(2);
                arcs.push(first);
                arcs.push(acc - first * 40);
            } else {
                arcs.push(acc);
            }
            acc = 0;
        } else if i + 1 == oid.len() {
            return None;
        }
    }
    (!arcs.is_empty()).then(|| {
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".")
    })
}

/// The validity period (not before, not after) of a DER certificate, in Unix seconds.
pub(crate) fn validity(cert: &[u8]) -> Option<(i64, i64)> {
    let (_, cert_body, _) = der_tlv(cert).filter(|t| t.0 == 0x30)?;
    let (_, tbs, _) = der_tlv(cert_body).filter(|t| t.0 == 0x30)?;
    let mut rest = tbs;
    let (tag, _, after) = der_tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    // serial, signature algorithm, issuer, then validity.
    for _ in 0..3 {
        rest = der_tlv(rest)?.2;
    }
    let (_, validity, _) = der_tlv(rest).filter(|t| t.0 == 0x30)?;
    let (t1, nb, after) = der_tlv(validity)?;
    let (t2, na, _) = der_tlv(after)?;
    Some((der_time(t1, nb)?, der_time(t2, na)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) to Unix seconds.
fn der_time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let num = |r: std::ops::Range<usize>| -> Option<i64> { rest.get(r)?.parse().ok() };
    let (month, day, hour, min, sec) =
        (num(0..2)?, num(2..4)?, num(4..6)?, num(6..8)?, num(8..10)?);
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + min * 60 + sec)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// One DER tag-length-value: (tag, content, rest).
fn der_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // A self-signed certificate with subject O=strait, CN=alice (openssl req -x509, P-256).
    const ALICE: &str = "-----BEGIN CERTIFICATE-----
MIIBmjCCAT+gAwIBAgIUOlQAt+JMe3u0TiB429Y4jvWePZUwCgYIKoZIzj0EAwIw
ITEPMA0GA1UECgwGc3RyYWl0MQ4wDAYDVQQDDAVhbGljZTAgFw0yNjEyMDIxNTI0
MDJaGA8yMTI2MTEwODE1MjQwMlowITEPMA0GA1UECgwGc3RyYWl0MQ4wDAYDVQQD
DAVhbGljZTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFYqOeQgsmvPUra1jdYn
YQqc1rsBWkwaV1VUcsFwZHkVOBNcGOYjK66VoVJ9mqFIgl1WiSVAHOkrgzfIWuXX
n0KjUzBRMB0GA1UdDgQWBBS0UB3OTStFwhRLd/pkmo4Rgh2I3TAfBgNVHSMEGDAW
gBS0UB3OTStFwhRLd/pkmo4Rgh2I3TAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49
BAMCA0kAMEYCIQC5bCA1rgbN3ciw2nLYQNtEjNv3tzyCzcpn2srPQnHMYQIhALHA
/BqJBz7PteHNglVh55hi23T3xwhkmOBeq7XCobhn
-----END CERTIFICATE-----
";

    // A test CA and a server certificate it signed for DNS:elsewhere.example only
    // (openssl, P-256, valid until 2126).
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBjDCCATGgAwIBAgIUGzqwbsITb9mOemCmjCo3jZxPNTUwCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdC1jYTAgFw0yNjEyMDIxNTU1MzFaGA8yMTI2MTEwODE1
NTUzMVowEjEQMA4GA1UEAwwHdGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEH
A0IABGOvxaXeovCdbWOLnBFGPyfIYoDznn+ulqZwc/Qo5Ij2Y0BBK8Ar8BhrWcwD
1o2Fv+v8fIz6xX2zLSCGXl/xlpujYzBhMB0GA1UdDgQWBBT19Dl1wMjOPPcwZ9ft
vaGN4LmYiTAfBgNVHSMEGDAWgBT19Dl1wMjOPPcwZ9ftvaGN4LmYiTAPBgNVHRMB
Af8EBTADAQH/MA4GA1UdDwEB/wQEAwICBDAKBggqhkjOPQQDAgNJADBGAiEAmec5
+gRWjAN1XYyKrYewlZtoJV+Fbxb+vkgbQDkEuVoCIQDun/egdiYrzwsvuL0TKUvJ
AQiFEVkENSHidTHON4Q1gw==
-----END CERTIFICATE-----
";
    const ELSEWHERE_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBszCCAVmgAwIBAgIUCubZOONwu2guJg1f24fcQiyXd6UwCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdC1jYTAgFw0yNjEyMDIxNTU1MzJaGA8yMTI2MTEwODE1
NTUzMlowHDEaMBgGA1UEAwwRZWxzZXdoZXJlLmV4YW1wbGUwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAAQvlnZg2bskvjP8W1KehTDbXSCyfOOU5fS4679yXBE4qZe6
QtS/oCEmal4ZVwOABLkPwxHhDxUZkvP52wjAWkoTo4GAMH4wHAYDVR0RBBUwE4IR
ZWxzZXdoZXJlLmV4YW1wbGUwCQYDVR0TBAIwADATBgNVHSUEDDAKBggrBgEFBQcD
ATAdBgNVHQ4EFgQUZxJQVSvCVoRf6NiV8BPQbLzKZNwwHwYDVR0jBBgwFoAU9fQ5
dcDIzjz3MGfX7b2hjeC5mIkwCgYIKoZIzj0EAwIDSAAwRQIgVNi9zOu4i0vpHrLV
aMPkK0pEtag3bUqOXnhwOKuJ1o8CIQCLn4iAEHEDUUZVQK7g+Fswl8/a0QhKSyAs
k58TutQYJQ==
-----END CERTIFICATE-----
";
    const ELSEWHERE_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgIiS8EdovGdwGbmVZ
pDIL2XlLzIkaA/pockYF2odsis6hRANCAAQvlnZg2bskvjP8W1KehTDbXSCyfOOU
5fS4679yXBE4qZe6QtS/oCEmal4ZVwOABLkPwxHhDxUZkvP52wjAWkoT
-----END PRIVATE KEY-----
";

    /// A TLS server on 127.0.0.1 presenting the elsewhere.example certificate.
    async fn tls_server() -> String {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![CertificateDer::from_pem_slice(ELSEWHERE_CERT.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(ELSEWHERE_KEY.as_bytes()).unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut s) = acceptor.accept(tcp).await {
                        use tokio::io::AsyncReadExt;
                        let mut b = [0u8; 1];
                        let _ = s.read(&mut b).await;
                    }
                });
            }
        });
        addr
    }

    fn ca(pem: &str, verify_hostname: bool) -> TlsContext {
        TlsContext::new(&TlsSettings {
            ca: Some(PemSetting {
                source: PemSource::Inline(pem.into()),
                key: "ssl.ca.pem",
            }),
            verify_hostname,
            ..TlsSettings::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn host_names_are_verified_unless_turned_off() {
        let addr = tls_server().await;
        let tcp = || TcpStream::connect(addr.clone());

        // On by default: 127.0.0.1 is not in the certificate.
        let strict = ca(TEST_CA, true);
        match strict
            .connect("127.0.0.1", &addr, tcp().await.unwrap())
            .await
        {
            Err(
                e @ Error::Tls {
                    reason: TlsFailure::BrokerHostnameMismatch,
                    ..
                },
            ) => {
                assert!(
                    e.to_string()
                        .contains("ssl.endpoint.identification.algorithm"),
                    "{e}"
                );
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        // The name in the certificate passes.
        strict
            .connect("elsewhere.example", &addr, tcp().await.unwrap())
            .await
            .unwrap();
        // Turned off: the name is not checked...
        ca(TEST_CA, false)
            .connect("127.0.0.1", &addr, tcp().await.unwrap())
            .await
            .unwrap();
        // ...but the chain still is.
        match ca(ALICE, false)
            .connect("127.0.0.1", &addr, tcp().await.unwrap())
            .await
        {
            Err(Error::Tls {
                reason: TlsFailure::UntrustedBrokerCertificate,
                ..
            }) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn garbage_subjects_are_none_not_a_panic() {
        assert_eq!(subject_dn(&[0x30, 0x05, 1, 2]), None);
        assert_eq!(subject_dn(&[]), None);
        assert_eq!(subject_dn(&fake_cert_with_subject(&[0x30, 0x00])), None);
    }

    /// The smallest DER a subject walk accepts: Certificate { TBS { serial, alg, issuer,
    /// validity, subject } }.
    fn fake_cert_with_subject(subject: &[u8]) -> Vec<u8> {
        let mut tbs = vec![0x02, 0x01, 0x01, 0x30, 0x00, 0x30, 0x00, 0x30, 0x00];
        tbs.extend_from_slice(subject);
        let mut tbs_seq = vec![0x30, tbs.len() as u8];
        tbs_seq.extend_from_slice(&tbs);
        let mut cert = vec![0x30, tbs_seq.len() as u8];
        cert.extend_from_slice(&tbs_seq);
        cert
    }

    #[test]
    fn subject_dn_is_what_java_calls_the_rfc2253_name() {
        let der = CertificateDer::from_pem_slice(ALICE.as_bytes()).unwrap();
        // Encoded O=strait, CN=alice; Java (and so the broker) names it most specific first.
        assert_eq!(subject_dn(&der).as_deref(), Some("CN=alice,O=strait"));
        assert_eq!(subject_dn(&[0x30, 0x05, 1, 2]), None);
        // Escaping, an unknown attribute type (emailAddress), a BMPString and a multi-valued
        // RDN; the expected strings are what `new X500Principal(der).getName()` printed for the
        // same DER on OpenJDK 17.0.15.
        let ava = |oid: &[u8], tag: u8, v: &[u8]| {
            let mut whole = vec![tag, v.len() as u8];
            whole.extend_from_slice(v);
            rfc2253_ava(oid, tag, v, &whole).unwrap()
        };
        assert_eq!(
            ava(&[0x55, 4, 3], 0x0c, br#"a,b=c+d<e>f#g;h"i\j "#),
            r#"CN=a\,b\=c\+d\<e\>f\#g\;h\"i\\j\ "#
        );
        assert_eq!(ava(&[0x55, 4, 0x0b], 0x13, b" x"), r"OU=\ x");
        assert_eq!(
            ava(
                &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
                0x16,
                b"a.b"
            ),
            "1.2.840.113549.1.9.1=#1603612e62"
        );
        assert_eq!(
            ava(&[0x55, 4, 3], 0x1e, &[0, b'z', 0x00, 0xe9]),
            "CN=\\00z\\00\u{fffd}"
        );
        // SEQUENCE { SET { O=strait }, SET { CN=x, OU=y } }
        let multi = [
            0x30, 0x27, 0x31, 0x0f, 0x30, 0x0d, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x06, b's',
            b't', b'r', b'a', b'i', b't', 0x31, 0x14, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03,
            0x0c, 0x01, b'x', 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x0b, 0x0c, 0x01, b'y',
        ];
        let cert = fake_cert_with_subject(&multi);
        assert_eq!(subject_dn(&cert).as_deref(), Some("CN=x+OU=y,O=strait"));
    }

    #[test]
    fn validity_from_der() {
        let der = CertificateDer::from_pem_slice(ALICE.as_bytes()).unwrap();
        // openssl wrote notBefore 2026-12-02T15:24:02Z (UTCTime), notAfter 2126-11-08 (GeneralizedTime).
        let (nb, na) = validity(&der).unwrap();
        assert_eq!(nb, 1_796_225_042);
        assert_eq!(na, 4_949_825_042);
        assert_eq!(der_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(der_time(0x18, b"20000301000000Z"), Some(951_868_800));
        assert_eq!(der_time(0x17, b"garbage"), None);
    }

    /// A CA and a client certificate (CN=keys-user) signed by it, made here with rcgen.
    struct Pki {
        ca_der: Vec<u8>,
        client_der: Vec<u8>,
        /// The client's private key, PKCS#8 DER.
        client_key: Vec<u8>,
    }

    fn pki() -> Pki {
        pki_for("keys-user")
    }

    /// A new CA and a client certificate with CN=`cn` it signed.
    fn pki_for(cn: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "keys-ca");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, cn);
        let leaf = leaf.signed_by(&key, &issuer).unwrap();
        Pki {
            ca_der: ca_cert.der().to_vec(),
            client_der: leaf.der().to_vec(),
            client_key: key.serialize_der(),
        }
    }

    /// `key` (PKCS#8 DER) encrypted with `password` as `openssl pkcs8 -topk8 -v2 aes-256-cbc`
    /// writes it (PBES2, PBKDF2-HMAC-SHA256, AES-256-CBC), as PEM.
    fn encrypted_pem(key: &[u8], password: &str) -> String {
        use pkcs8::der::pem::LineEnding;
        let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            2048,
            b"0123456789abcdef",
            [7; 16],
        )
        .unwrap();
        let info = pkcs8::PrivateKeyInfoRef::try_from(key).unwrap();
        let doc = info.encrypt_with_params(params, password).unwrap();
        doc.to_pem("ENCRYPTED PRIVATE KEY", LineEnding::LF)
            .unwrap()
            .to_string()
    }

    fn inline(key: &'static str, pem: String) -> PemSetting {
        PemSetting {
            source: PemSource::Inline(pem),
            key,
        }
    }

    fn config_error<T: std::fmt::Debug>(r: Result<T>) -> (String, String) {
        match r {
            Err(Error::Config { key, message }) => (key, message),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn encrypted_pkcs8_keys_are_decrypted_with_ssl_key_password() {
        let pki = pki();
        let secret = "Key-Pa55-do-not-print";
        let pem = encrypted_pem(&pki.client_key, secret);
        assert!(pem.contains("ENCRYPTED PRIVATE KEY"), "{pem}");
        let setting = inline("ssl.key.pem", pem);

        let key = load_key(&setting, Some(&Password::new(secret))).unwrap();
        assert_eq!(key.secret_der(), &pki.client_key[..]);

        // Wrong password: a configuration error naming the key, never the password.
        let (key, message) = config_error(load_key(&setting, Some(&Password::new("nope-nope"))));
        assert_eq!(key, "ssl.key.pem");
        assert!(message.contains("ssl.key.password"), "{message}");
        assert!(!message.contains("nope-nope"), "{message}");
        // No password at all: say which property to set.
        let (_, message) = config_error(load_key(&setting, None));
        assert!(message.contains("set ssl.key.password"), "{message}");

        // OpenSSL's legacy encrypted PEM gets the conversion command.
        let legacy = inline(
            "ssl.key.pem",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n".into(),
        );
        let (_, message) = config_error(load_key(&legacy, Some(&Password::new(secret))));
        assert!(message.contains("openssl pkcs8 -topk8"), "{message}");

        // The whole client: the decrypted key must fit the certificate for rustls to accept it.
        let ctx = TlsContext::new(&TlsSettings {
            ca: Some(inline("ssl.ca.pem", pem_cert(&pki.ca_der))),
            certificate: Some(inline("ssl.certificate.pem", pem_cert(&pki.client_der))),
            key: Some(setting),
            key_password: Some(Password::new(secret)),
            ..TlsSettings::default()
        })
        .unwrap();
        assert!(ctx.has_client_cert());
        assert_eq!(ctx.principal().as_deref(), Some("CN=keys-user"));
    }

    fn pem_cert(der: &[u8]) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        )
    }

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "strait-wire-keys-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn pkcs12_keystores_and_truststores_are_read() {
        use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKey, PrivateKeyChain};
        let pki = pki();
        let dir = temp_dir("p12");
        let store_password = "Store-Pa55-do-not-print";

        let mut keystore = KeyStore::new();
        keystore.add_entry(
            "client",
            KeyStoreEntry::PrivateKeyChain(PrivateKeyChain::new(
                b"client".as_slice(),
                PrivateKey::from_der(&pki.client_key).unwrap(),
                [
                    Certificate::from_der(&pki.client_der).unwrap(),
                    Certificate::from_der(&pki.ca_der).unwrap(),
                ],
            )),
        );
        let keystore_path = dir.join("client.p12");
        std::fs::write(
            &keystore_path,
            keystore.writer(store_password).write().unwrap(),
        )
        .unwrap();
        let mut truststore = KeyStore::new();
        truststore.add_entry(
            "ca",
            KeyStoreEntry::Certificate(Certificate::from_der(&pki.ca_der).unwrap()),
        );
        let truststore_path = dir.join("trust.p12");
        std::fs::write(
            &truststore_path,
            truststore.writer(store_password).write().unwrap(),
        )
        .unwrap();

        // Through the property parser, as a user writes it.
        let props = |keystore_password: &str| {
            crate::ClientConfig::from_properties([
                ("bootstrap.servers", "localhost:9093"),
                ("security.protocol", "SSL"),
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", keystore_path.to_str().unwrap()),
                ("ssl.keystore.password", keystore_password),
                ("ssl.truststore.type", "PKCS12"),
                ("ssl.truststore.location", truststore_path.to_str().unwrap()),
                ("ssl.truststore.password", store_password),
            ])
            .unwrap()
        };
        let config = props(store_password);
        assert!(
            !format!("{config:?}").contains(store_password),
            "Debug of the client configuration shows the password: {config:?}"
        );
        let ctx = TlsContext::new(config.tls()).unwrap();
        assert!(ctx.has_client_cert());
        assert_eq!(ctx.principal().as_deref(), Some("CN=keys-user"));

        // Wrong store password: the error names the property and not the password.
        let (key, message) = config_error(TlsContext::new(props("wrong-one-xyz").tls()));
        assert_eq!(key, "ssl.keystore.location");
        assert!(message.contains("ssl.keystore.password"), "{message}");
        assert!(!message.contains("wrong-one-xyz"), "{message}");

        // A keystore without a key is not a keystore.
        let (_, message) = config_error(pkcs12_identity(
            &StoreSetting {
                path: truststore_path.clone(),
                password: Some(Password::new(store_password)),
                key: "ssl.keystore.location",
            },
            &std::fs::read(&truststore_path).unwrap(),
        ));
        assert!(message.contains("no private key"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writes `bytes` to `path` the way cert-manager and the kubelet do: a new file renamed
    /// over the old one (a new inode, never a half-written file at `path`).
    fn replace_file(path: &std::path::Path, bytes: &[u8]) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    fn pem_key(der: &[u8]) -> String {
        pem_cert(der)
            .replace("BEGIN CERTIFICATE", "BEGIN PRIVATE KEY")
            .replace("END CERTIFICATE", "END PRIVATE KEY")
    }

    #[test]
    fn rotated_pem_files_are_used_for_new_connections() {
        let dir = temp_dir("rotate-pem");
        let (ca, cert, key) = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
        let write = |pki: &Pki| {
            replace_file(&ca, pem_cert(&pki.ca_der).as_bytes());
            replace_file(&cert, pem_cert(&pki.client_der).as_bytes());
            replace_file(&key, pem_key(&pki.client_key).as_bytes());
        };
        write(&pki_for("before"));
        let file = |path: &std::path::Path, key| PemSetting {
            source: PemSource::File(path.to_path_buf()),
            key,
        };
        let ctx = TlsContext::new(&TlsSettings {
            ca: Some(file(&ca, "ssl.ca.location")),
            certificate: Some(file(&cert, "ssl.certificate.location")),
            key: Some(file(&key, "ssl.key.location")),
            ..TlsSettings::default()
        })
        .unwrap();
        assert_eq!(ctx.principal().as_deref(), Some("CN=before"));
        assert_eq!(
            ctx.principal().as_deref(),
            Some("CN=before"),
            "no change, no rebuild"
        );

        // A new CA, key and certificate (Strimzi's CA renewal replaces all three).
        write(&pki_for("after"));
        assert_eq!(ctx.principal().as_deref(), Some("CN=after"));

        // Half-way through the next rotation the certificate no longer fits the key: the
        // previous configuration stays in use...
        let next = pki_for("next");
        replace_file(&cert, pem_cert(&next.client_der).as_bytes());
        assert_eq!(ctx.principal().as_deref(), Some("CN=after"));
        assert_eq!(ctx.principal().as_deref(), Some("CN=after"));
        // ...until the key arrives too.
        replace_file(&key, pem_key(&next.client_key).as_bytes());
        assert_eq!(ctx.principal().as_deref(), Some("CN=next"));
        // A clone (each connection slot holds one) sees the same state.
        assert_eq!(ctx.clone().principal().as_deref(), Some("CN=next"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotated_pkcs12_keystores_are_used_for_new_connections() {
        use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKey, PrivateKeyChain};
        let dir = temp_dir("rotate-p12");
        let (keystore, truststore) = (dir.join("user.p12"), dir.join("ca.p12"));
        let password = "rotate-pass";
        let write = |pki: &Pki| {
            let mut ks = KeyStore::new();
            ks.add_entry(
                "client",
                KeyStoreEntry::PrivateKeyChain(PrivateKeyChain::new(
                    b"client".as_slice(),
                    PrivateKey::from_der(&pki.client_key).unwrap(),
                    [Certificate::from_der(&pki.client_der).unwrap()],
                )),
            );
            replace_file(&keystore, &ks.writer(password).write().unwrap());
            let mut ts = KeyStore::new();
            ts.add_entry(
                "ca",
                KeyStoreEntry::Certificate(Certificate::from_der(&pki.ca_der).unwrap()),
            );
            replace_file(&truststore, &ts.writer(password).write().unwrap());
        };
        write(&pki_for("p12-before"));
        let config = crate::ClientConfig::from_properties([
            ("bootstrap.servers", "localhost:9093"),
            ("security.protocol", "SSL"),
            ("ssl.keystore.location", keystore.to_str().unwrap()),
            ("ssl.keystore.password", password),
            ("ssl.truststore.location", truststore.to_str().unwrap()),
            ("ssl.truststore.password", password),
        ])
        .unwrap();
        let ctx = TlsContext::new(config.tls()).unwrap();
        assert_eq!(ctx.principal().as_deref(), Some("CN=p12-before"));
        write(&pki_for("p12-after"));
        assert_eq!(ctx.principal().as_deref(), Some("CN=p12-after"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn jks_stores_get_the_keytool_command() {
        let dir = temp_dir("jks");
        let path = dir.join("client.jks");
        std::fs::write(&path, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
        let store = StoreSetting {
            path: path.clone(),
            password: Some(Password::new("changeit")),
            key: "ssl.keystore.location",
        };
        let (key, message) = config_error(open_store(&store).map(|_| ()));
        assert_eq!(key, "ssl.keystore.location");
        assert!(
            message.contains("keytool -importkeystore -srcstoretype JKS")
                && message.contains("-deststoretype PKCS12"),
            "{message}"
        );
        assert!(
            message.contains(&format!("{}.p12", dir.join("client").display())),
            "{message}"
        );
        // Declared JKS fails before any file is read.
        let err = crate::ClientConfig::from_properties([
            ("bootstrap.servers", "localhost:9093"),
            ("security.protocol", "SSL"),
            ("ssl.truststore.type", "JKS"),
            ("ssl.truststore.location", "/etc/kafka/truststore.jks"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("keytool -importkeystore"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn binary_store_is_named() {
        let dir = std::env::temp_dir().join(format!("strait-wire-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("store.jks");
        std::fs::write(&p, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
        let setting = PemSetting {
            source: PemSource::File(p),
            key: "ssl.ca.location",
        };
        match load_roots(Some(&setting)) {
            Err(Error::Config { key, message }) => {
                assert_eq!(key, "ssl.ca.location");
                assert!(message.contains("JKS or PKCS#12"), "{message}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        let missing = PemSetting {
            source: PemSource::File(dir.join("nope.pem")),
            key: "ssl.ca.location",
        };
        assert!(matches!(
            load_roots(Some(&missing)),
            Err(Error::Config { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alert_mapping() {
        let alert = |a| rustls::Error::AlertReceived(a);
        assert_eq!(
            failure_of(&alert(AlertDescription::CertificateExpired), true),
            TlsFailure::ClientCertificateExpired
        );
        assert_eq!(
            failure_of(&alert(AlertDescription::CertificateRequired), false),
            TlsFailure::ClientCertificateRequired
        );
        assert_eq!(
            failure_of(&alert(AlertDescription::BadCertificate), false),
            TlsFailure::ClientCertificateRequired
        );
        assert_eq!(
            failure_of(&alert(AlertDescription::CertificateUnknown), true),
            TlsFailure::ClientCertificateRejected
        );
        assert_eq!(
            failure_of(
                &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                true
            ),
            TlsFailure::UntrustedBrokerCertificate
        );
        assert_eq!(
            failure_of(
                &rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                true
            ),
            TlsFailure::BrokerHostnameMismatch
        );
    }

    /// A scratch image has no CA bundle: without ssl.ca.location the built-in roots are trusted,
    /// so public-CA endpoints verify; a bundle that exists still wins.
    #[test]
    fn without_a_ca_file_or_system_bundle_the_built_in_roots_are_trusted() {
        let nowhere = std::path::PathBuf::from("/nonexistent/strait/ca-bundle.crt");
        let roots = default_roots(std::iter::once(nowhere.clone())).unwrap();
        assert_eq!(roots.len(), webpki_roots::TLS_SERVER_ROOTS.len());
        assert!(roots.len() > 100, "{}", roots.len());
        let dir = temp_dir("bundle");
        let bundle = dir.join("one.pem");
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        std::fs::write(&bundle, ca.cert.pem()).unwrap();
        let roots = default_roots([nowhere, bundle].into_iter()).unwrap();
        assert_eq!(roots.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
