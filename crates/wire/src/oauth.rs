//! SASL/OAUTHBEARER (RFC 7628, KIP-255/KIP-768): where the bearer token comes from, when it is
//! refreshed, and the client's initial response.
//!
//! Token sources, chosen like Kafka's Java client chooses its login callback handler:
//!
//! - **Unsecured JWS** (Java's default handler, for tests and development): an unsigned JWT built
//!   from the `unsecuredLogin*` options of `sasl.jaas.config`.
//! - **Client credentials** (`OAuthBearerLoginCallbackHandler`): a token from an OAuth 2 token
//!   endpoint (`sasl.oauthbearer.token.endpoint.url`) for a client id and secret, optionally with
//!   a scope. A `file:` URL reads the token from a file instead (as Java does).
//! - **AWS MSK IAM** (`IAMOAuthBearerLoginCallbackHandler`): a SigV4-presigned URL (module `aws`).
//!
//! Tokens are cached per configuration (every connection of a client shares them) and replaced
//! at `sasl.login.refresh.window.factor` (0.8) plus up to `sasl.login.refresh.window.jitter`
//! (0.05) of their lifetime, as Java's refreshing login does; a token handed to a new connection
//! therefore always has at least ~15 % of its lifetime left. If a refresh fails while the cached
//! token is still valid, the cached one is used and the failure logged (without the secret).
//! A broker with `connections.max.reauth.ms` ends each session when its token expires; the
//! client then renews the session on a new connection with a fresh token (see `conn.rs`).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use serde_json::{Map, Value};

use std::collections::BTreeMap;

use crate::aws::MskIam;
use crate::config::{Jaas, JaasModule, Password, SaslMechanism, SaslSettings};
use crate::error::{Error, Result};
use crate::http;

/// Where tokens come from.
#[derive(Clone, PartialEq)]
pub(crate) enum TokenSource {
    /// An unsigned JWT made here (Kafka's unsecured mode: tests and development only).
    Unsecured(Unsecured),
    /// The OAuth 2 client credentials grant against a token endpoint.
    ClientCredentials(ClientCredentials),
    /// A token read from a file at every refresh (`sasl.oauthbearer.token.endpoint.url=file:...`).
    File(PathBuf),
    /// AWS MSK IAM: a presigned `kafka-cluster:Connect` URL.
    Msk(crate::aws::MskIam),
}

/// The `unsecuredLogin*` options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unsecured {
    /// Claims in JWT order: the principal claim first, then the configured ones.
    pub(crate) claims: Vec<(String, Value)>,
    /// `unsecuredLoginLifetimeSeconds` (default 3600).
    pub(crate) lifetime: Duration,
    /// `unsecuredLoginExtension_<name>` SASL extensions.
    pub(crate) extensions: Vec<(String, String)>,
}

/// The client credentials grant.
#[derive(Clone, PartialEq)]
pub(crate) struct ClientCredentials {
    pub(crate) url: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: Password,
    pub(crate) scope: Option<String>,
    /// `sasl.oauthbearer.header.urlencode`: URL-encode id and secret in the Basic header.
    pub(crate) urlencode: bool,
    /// `sasl.login.connect.timeout.ms` + `sasl.login.read.timeout.ms` (10 s when unset).
    pub(crate) timeout: Duration,
}

/// When cached tokens are replaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refresh {
    /// `sasl.login.refresh.window.factor` (0.5..=1.0, default 0.8).
    pub(crate) factor: f64,
    /// `sasl.login.refresh.window.jitter` (0..=0.25, default 0.05).
    pub(crate) jitter: f64,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            factor: 0.8,
            jitter: 0.05,
        }
    }
}

/// A token and when to replace it.
struct Cached {
    token: String,
    refresh_at: Instant,
    expires: Instant,
}

/// The OAUTHBEARER settings of a client, with the token cache its connections share.
#[derive(Clone)]
pub struct OAuthBearer {
    pub(crate) source: TokenSource,
    pub(crate) refresh: Refresh,
    cache: Arc<tokio::sync::Mutex<Option<Cached>>>,
}

impl PartialEq for OAuthBearer {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.refresh == other.refresh
    }
}

impl Eq for OAuthBearer {}

impl fmt::Debug for OAuthBearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret, never a token.
        let source = match &self.source {
            TokenSource::Unsecured(_) => "unsecured JWS".to_owned(),
            TokenSource::ClientCredentials(c) => {
                format!("token endpoint {} (client id {})", c.url, c.client_id)
            }
            TokenSource::File(p) => format!("token file {}", p.display()),
            TokenSource::Msk(_) => "AWS MSK IAM signer".to_owned(),
        };
        f.debug_struct("OAuthBearer")
            .field("source", &source)
            .field("refresh", &self.refresh)
            .finish()
    }
}

impl OAuthBearer {
    pub(crate) fn new(source: TokenSource, refresh: Refresh) -> OAuthBearer {
        OAuthBearer {
            source,
            refresh,
            cache: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// The principal name for messages (`sub` of an unsecured token, or the client id).
    pub(crate) fn principal_hint(&self) -> Option<String> {
        match &self.source {
            TokenSource::Unsecured(u) => u
                .claims
                .first()
                .and_then(|(_, v)| v.as_str().map(str::to_owned)),
            TokenSource::ClientCredentials(c) => Some(c.client_id.clone()),
            TokenSource::File(_) | TokenSource::Msk(_) => None,
        }
    }

    /// SASL extensions sent with the token.
    pub(crate) fn extensions(&self) -> &[(String, String)] {
        match &self.source {
            TokenSource::Unsecured(u) => &u.extensions,
            _ => &[],
        }
    }

    /// A token with enough lifetime left: the cached one until its refresh time, else a new one.
    pub(crate) async fn token(&self) -> Result<String> {
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(c.token.clone());
        }
        match self.fetch().await {
            Ok((token, lifetime)) => {
                let share = self.refresh.factor + rand::random_range(0.0..=self.refresh.jitter);
                let now = Instant::now();
                // Every source is already within the range; this keeps `Instant` arithmetic
                // safe whatever a future source returns.
                let lifetime = lifetime.min(MAX_TOKEN_LIFETIME);
                tracing::debug!(
                    source = ?self.source_name(),
                    lifetime_ms = lifetime.as_millis() as u64,
                    "OAUTHBEARER token obtained"
                );
                let at = |d: Duration| now.checked_add(d).unwrap_or(now);
                *cache = Some(Cached {
                    token: token.clone(),
                    refresh_at: at(lifetime.mul_f64(share.clamp(0.0, 1.0))),
                    expires: at(lifetime),
                });
                Ok(token)
            }
            Err(e) => match cache.as_ref() {
                // Keep working on the old token while it lasts; the next connection retries.
                Some(c) if now + Duration::from_secs(1) < c.expires => {
                    tracing::warn!(
                        error = %e,
                        expires_in_ms = (c.expires - now).as_millis() as u64,
                        "refreshing the OAUTHBEARER token failed; using the current token until it expires"
                    );
                    Ok(c.token.clone())
                }
                _ => Err(e),
            },
        }
    }

    /// Forgets the cached token (the broker refused it: expired in transit, revoked, or
    /// issued for something else), so the next connection gets a new one.
    pub(crate) async fn invalidate(&self) {
        *self.cache.lock().await = None;
    }

    fn source_name(&self) -> &'static str {
        match self.source {
            TokenSource::Unsecured(_) => "unsecured",
            TokenSource::ClientCredentials(_) => "client_credentials",
            TokenSource::File(_) => "file",
            TokenSource::Msk(_) => "aws_msk_iam",
        }
    }

    /// A new token and its lifetime.
    async fn fetch(&self) -> Result<(String, Duration)> {
        match &self.source {
            TokenSource::Unsecured(u) => Ok((unsecured_token(u, SystemTime::now()), u.lifetime)),
            TokenSource::ClientCredentials(c) => client_credentials(c).await,
            TokenSource::File(path) => {
                let what = format!("token file {}", path.display());
                let text = std::fs::read_to_string(path)
                    .map_err(|e| credentials_error(&what, format!("cannot read it: {e}"), true))?;
                let token = text.trim().to_owned();
                match jwt_lifetime(&token, SystemTime::now()) {
                    Ok(Some(lifetime)) => Ok((token, lifetime)),
                    Ok(None) => Err(credentials_error(
                        &what,
                        "the file does not hold a JWT with a numeric `exp` claim; write the \
                         access token (a JWT) to it"
                            .into(),
                        false,
                    )),
                    // Retriable: whoever writes the file may replace the token in time.
                    Err(e) => Err(credentials_error(&what, e, true)),
                }
            }
            TokenSource::Msk(m) => m.oauth_token().await,
        }
    }
}

pub(crate) fn credentials_error(origin: &str, message: String, retriable: bool) -> Error {
    Error::Credentials {
        origin: origin.to_owned(),
        message,
        retriable,
    }
}

/// The RFC 7628 client initial response: `n,,\x01auth=Bearer <token>\x01[key=value\x01]*\x01`.
pub(crate) fn initial_response(token: &str, extensions: &[(String, String)]) -> Vec<u8> {
    let mut s = format!("n,,\x01auth=Bearer {token}\x01");
    for (k, v) in extensions {
        s.push_str(&format!("{k}={v}\x01"));
    }
    s.push('\x01');
    s.into_bytes()
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_millis() as f64 / 1000.0)
}

/// An unsigned JWS (`{"alg":"none"}`) as Kafka's `OAuthBearerUnsecuredLoginCallbackHandler`
/// makes it: `iat` and `exp` in (fractional) seconds, the principal claim, the other claims.
pub(crate) fn unsecured_token(u: &Unsecured, now: SystemTime) -> String {
    let iat = unix_seconds(now);
    let mut claims = Map::new();
    claims.insert("iat".into(), Value::from(iat));
    claims.insert(
        "exp".into(),
        Value::from(iat + u.lifetime.as_millis() as f64 / 1000.0),
    );
    for (k, v) in &u.claims {
        claims.insert(k.clone(), v.clone());
    }
    let header = B64URL.encode(br#"{"alg":"none"}"#);
    let payload = B64URL.encode(Value::Object(claims).to_string());
    format!("{header}.{payload}.")
}

/// The shortest token lifetime accepted: a token living less cannot be used for a connection
/// (it would expire during the handshake), so a source answering less is reported as broken.
pub const MIN_TOKEN_LIFETIME: Duration = Duration::from_secs(1);

/// The longest token lifetime believed: a token (or endpoint) claiming more is refreshed as if
/// it lived 24 hours. This bounds the cache's clock arithmetic (`exp` = 1e300 must not
/// overflow an `Instant`) and costs at most one extra token request a day.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A lifetime in seconds as a token source states it, checked: not a number, infinite, or less
/// than [`MIN_TOKEN_LIFETIME`] is an error (the message says which); more than
/// [`MAX_TOKEN_LIFETIME`] is clamped to it.
pub(crate) fn token_lifetime(secs: f64) -> std::result::Result<Duration, String> {
    if !secs.is_finite() {
        return Err(format!(
            "a lifetime of {secs} seconds is not a finite number"
        ));
    }
    if secs < MIN_TOKEN_LIFETIME.as_secs_f64() {
        return Err(format!(
            "a lifetime of {secs} seconds is less than the {} s a token needs to be used \
             (expired, or the client's clock is wrong)",
            MIN_TOKEN_LIFETIME.as_secs()
        ));
    }
    // Finite and within 1..=MAX here, so the conversion cannot fail.
    Ok(
        Duration::try_from_secs_f64(secs.min(MAX_TOKEN_LIFETIME.as_secs_f64()))
            .unwrap_or(MAX_TOKEN_LIFETIME),
    )
}

/// The time a JWT has left (`exp` minus now), checked by [`token_lifetime`]: `Ok(None)` if the
/// token is not a JWT with a numeric `exp` claim (an opaque token), `Err` if `exp` is in the
/// past, too close, or not a finite number.
pub(crate) fn jwt_lifetime(
    token: &str,
    now: SystemTime,
) -> std::result::Result<Option<Duration>, String> {
    let Some(exp) = jwt_exp(token) else {
        return Ok(None);
    };
    token_lifetime(exp - unix_seconds(now))
        .map(Some)
        .map_err(|e| format!("the token's `exp` claim ({exp}) gives {e}"))
}

/// The `exp` claim of a JWT, if `token` is one and has a numeric `exp`.
fn jwt_exp(token: &str) -> Option<f64> {
    let payload = token.split('.').nth(1)?;
    let bytes = B64URL.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_f64()
}

/// RFC 6749 section 4.4: POST `grant_type=client_credentials[&scope=...]` with HTTP Basic
/// authentication of the client.
async fn client_credentials(c: &ClientCredentials) -> Result<(String, Duration)> {
    let what = format!("OAuth token endpoint {}", c.url);
    let (id, secret) = if c.urlencode {
        (
            http::form_encode(&c.client_id),
            http::form_encode(c.client_secret.expose()),
        )
    } else {
        (c.client_id.clone(), c.client_secret.expose().to_owned())
    };
    let basic = B64.encode(format!("{id}:{secret}"));
    let mut body = "grant_type=client_credentials".to_owned();
    if let Some(scope) = c.scope.as_deref().filter(|s| !s.is_empty()) {
        body.push_str("&scope=");
        body.push_str(&http::form_encode(scope));
    }
    let resp = http::post_form(
        &c.url,
        &[("authorization", format!("Basic {basic}"))],
        body,
        c.timeout,
    )
    .await
    .map_err(|f| credentials_error(&what, f.message, true))?;
    token_response(&what, resp.status, &resp.body, SystemTime::now())
}

/// Reads a token endpoint's answer (RFC 6749 sections 5.1 and 5.2): the access token and its
/// lifetime (the JWT's `exp`, else `expires_in`, checked by [`token_lifetime`]), or an error
/// naming what is wrong and what to fix. Pure (no I/O), so whatever an endpoint sends can be
/// tested and fuzzed; `what` names the endpoint in errors.
pub(crate) fn token_response(
    what: &str,
    status: u16,
    body: &[u8],
    now: SystemTime,
) -> Result<(String, Duration)> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        json.as_ref()
            .and_then(|j| j.get(name))
            .and_then(Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    if status != 200 {
        let detail = match (field("error"), field("error_description")) {
            (Some(e), Some(d)) => format!(", error `{e}`: {d}"),
            (Some(e), None) => format!(", error `{e}`"),
            _ => String::new(),
        };
        let (message, retriable) = match status {
            400 | 401 | 403 => (
                format!(
                    "the token endpoint refused the client (HTTP {status}{detail}); check the \
                     client id and secret (sasl.oauthbearer.client.credentials.client.id / \
                     sasl.oauthbearer.client.credentials.client.secret, or clientId / clientSecret \
                     in sasl.jaas.config), the scope (sasl.oauthbearer.scope), and that the \
                     identity provider allows this client the client_credentials grant"
                ),
                false,
            ),
            s => (
                format!("the token endpoint answered HTTP {s}{detail}; it is retried"),
                s >= 500 || s == 429,
            ),
        };
        return Err(credentials_error(what, message, retriable));
    }
    let token = json
        .as_ref()
        .and_then(|j| j.get("access_token"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let Some(token) = token else {
        return Err(credentials_error(
            what,
            "the response has no `access_token`; check that sasl.oauthbearer.token.endpoint.url \
             is the token endpoint (not the issuer or JWKS URL)"
                .into(),
            false,
        ));
    };
    // A nonsensical lifetime is the identity provider's fault, not the client's: retriable, so
    // a cached token keeps working meanwhile, and the message says what the endpoint sent.
    let broken = |e: String| {
        credentials_error(
            what,
            format!("{e}; check the identity provider's token lifetime settings"),
            true,
        )
    };
    if let Some(lifetime) = jwt_lifetime(&token, now).map_err(&broken)? {
        return Ok((token, lifetime));
    }
    let expires_in = json.as_ref().and_then(|j| j.get("expires_in"));
    let Some(expires_in) = expires_in else {
        return Err(credentials_error(
            what,
            "the access token has no `exp` claim and the response no `expires_in`, so it cannot \
             be refreshed in time; configure the identity provider to issue JWT access tokens"
                .into(),
            false,
        ));
    };
    // A number, or a string holding one (some providers quote it).
    let secs = expires_in
        .as_f64()
        .or_else(|| expires_in.as_str()?.trim().parse().ok())
        .ok_or_else(|| {
            let shown: String = expires_in.to_string().chars().take(40).collect();
            broken(format!("`expires_in` ({shown}) is not a number of seconds"))
        })?;
    let lifetime =
        token_lifetime(secs).map_err(|e| broken(format!("`expires_in` ({secs}) gives {e}")))?;
    Ok((token, lifetime))
}

/// The handler classes Kafka's Java client and the AWS library name.
const UNSECURED_HANDLER: &str = "OAuthBearerUnsecuredLoginCallbackHandler";
const TOKEN_ENDPOINT_HANDLER: &str = "OAuthBearerLoginCallbackHandler";
const MSK_OAUTH_HANDLER: &str = "IAMOAuthBearerLoginCallbackHandler";
const MSK_CLIENT_HANDLER: &str = "IAMClientCallbackHandler";
const KAFKA_CLIENT_HANDLER: &str = "OAuthBearerSaslClientCallbackHandler";

/// Builds the SASL settings of OAUTHBEARER and AWS_MSK_IAM from `sasl.jaas.config` and the
/// `sasl.oauthbearer.*` / `sasl.login.*` keys, as Kafka's Java client reads them.
pub(crate) fn sasl_settings(
    mechanism: SaslMechanism,
    jaas: Option<Jaas>,
    mut keys: BTreeMap<&'static str, String>,
) -> Result<SaslSettings> {
    let class = |v: &str| v.rsplit('.').next().unwrap_or(v).to_owned();
    let login_handler = keys
        .remove("sasl.login.callback.handler.class")
        .map(|v| class(&v));
    let client_handler = keys
        .remove("sasl.client.callback.handler.class")
        .map(|v| class(&v));
    let jaas_key = "sasl.jaas.config";
    let (module, options) = match jaas {
        Some(j) => (Some(j.kind), j.options),
        None => (None, Vec::new()),
    };
    let opt = |name: &str| {
        options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };

    if mechanism == SaslMechanism::AwsMskIam {
        if !matches!(module, None | Some(JaasModule::MskIam)) {
            return Err(Error::config(
                jaas_key,
                "AWS_MSK_IAM uses software.amazon.msk.auth.iam.IAMLoginModule required;",
            ));
        }
        if let Some(h) = client_handler.filter(|h| h != MSK_CLIENT_HANDLER) {
            return Err(Error::config(
                "sasl.client.callback.handler.class",
                format!(
                    "`{h}` is not supported with AWS_MSK_IAM; use \
                     software.amazon.msk.auth.iam.IAMClientCallbackHandler or leave it unset"
                ),
            ));
        }
        reject_role_arn(&options)?;
        if let Some(key) = keys.keys().next() {
            return Err(Error::config(
                *key,
                "is an OAUTHBEARER setting; remove it (sasl.mechanism is AWS_MSK_IAM)",
            ));
        }
        return Ok(SaslSettings {
            mechanism,
            username: String::new(),
            password: String::new(),
            oauth: None,
            msk: Some(MskIam::new(opt("awsProfileName"))),
        });
    }

    if !matches!(module, None | Some(JaasModule::OAuthBearer)) {
        return Err(Error::config(
            jaas_key,
            "OAUTHBEARER uses org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
             required [options];",
        ));
    }
    if let Some(h) = client_handler.filter(|h| h != MSK_OAUTH_HANDLER && h != KAFKA_CLIENT_HANDLER)
    {
        return Err(Error::config(
            "sasl.client.callback.handler.class",
            format!("`{h}` is not supported; leave it unset"),
        ));
    }
    let number = |key: &'static str, default: f64, range: std::ops::RangeInclusive<f64>| match keys
        .get(key)
    {
        None => Ok(default),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                Error::config(
                    key,
                    format!(
                        "`{v}` must be a number in {}..={} (default {default})",
                        range.start(),
                        range.end()
                    ),
                )
            }),
    };
    let refresh = Refresh {
        factor: number("sasl.login.refresh.window.factor", 0.8, 0.5..=1.0)?,
        jitter: number("sasl.login.refresh.window.jitter", 0.05, 0.0..=0.25)?,
    };
    let millis = |key: &'static str| -> Result<Option<Duration>> {
        keys.get(key)
            .map(|v| {
                v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
                    Error::config(key, format!("`{v}` is not a number of milliseconds"))
                })
            })
            .transpose()
    };
    let timeout = match (
        millis("sasl.login.connect.timeout.ms")?,
        millis("sasl.login.read.timeout.ms")?,
    ) {
        (None, None) => Duration::from_secs(10),
        (c, r) => c.unwrap_or(Duration::from_secs(10)) + r.unwrap_or(Duration::ZERO),
    };
    let url = keys.get("sasl.oauthbearer.token.endpoint.url").cloned();
    let handler = login_handler.as_deref();
    let source = match handler {
        Some(MSK_OAUTH_HANDLER) => {
            reject_role_arn(&options)?;
            TokenSource::Msk(MskIam::new(opt("awsProfileName")))
        }
        Some(TOKEN_ENDPOINT_HANDLER) => token_endpoint(url, &keys, &opt, timeout)?,
        None if url.is_some() => token_endpoint(url, &keys, &opt, timeout)?,
        None | Some(UNSECURED_HANDLER) => unsecured(&options)?,
        Some(other) => {
            return Err(Error::config(
                "sasl.login.callback.handler.class",
                format!(
                    "`{other}` is not supported; use \
                     org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler \
                     (token endpoint), software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler \
                     (MSK IAM), or leave it unset for Kafka's unsecured JWS mode"
                ),
            ));
        }
    };
    let oauth = OAuthBearer::new(source, refresh);
    Ok(SaslSettings {
        mechanism,
        username: oauth.principal_hint().unwrap_or_default(),
        password: String::new(),
        oauth: Some(oauth),
        msk: None,
    })
}

fn reject_role_arn(options: &[(String, String)]) -> Result<()> {
    if options.iter().any(|(k, _)| k == "awsRoleArn") {
        return Err(Error::config(
            "sasl.jaas.config",
            "awsRoleArn (STS AssumeRole) is not supported; give Strait the role's credentials \
             through AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, a profile \
             (awsProfileName), or a web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN)",
        ));
    }
    Ok(())
}

fn token_endpoint(
    url: Option<String>,
    keys: &BTreeMap<&'static str, String>,
    opt: &dyn Fn(&str) -> Option<String>,
    timeout: Duration,
) -> Result<TokenSource> {
    const URL_KEY: &str = "sasl.oauthbearer.token.endpoint.url";
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Err(Error::config(
            URL_KEY,
            "is required with OAuthBearerLoginCallbackHandler; set it to the identity \
             provider's token endpoint (https://.../token)",
        ));
    };
    if let Some(path) = url.strip_prefix("file:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        return Ok(TokenSource::File(PathBuf::from(path)));
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(Error::config(
            URL_KEY,
            format!("`{url}` is not an https://, http:// or file: URL"),
        ));
    }
    // Kafka 4.1 keys first, then the JAAS options older clients use.
    let pick = |key: &'static str, jaas: &str| keys.get(key).cloned().or_else(|| opt(jaas));
    let Some(client_id) = pick("sasl.oauthbearer.client.credentials.client.id", "clientId") else {
        return Err(Error::config(
            "sasl.oauthbearer.client.credentials.client.id",
            "is required for the token endpoint; set it (or clientId in sasl.jaas.config)",
        ));
    };
    let Some(secret) = pick(
        "sasl.oauthbearer.client.credentials.client.secret",
        "clientSecret",
    ) else {
        return Err(Error::config(
            "sasl.oauthbearer.client.credentials.client.secret",
            "is required for the token endpoint; set it (or clientSecret in sasl.jaas.config), \
             preferably from the environment (STRAIT_SOURCE_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_SECRET)",
        ));
    };
    let urlencode = match keys.get("sasl.oauthbearer.header.urlencode") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(Error::config(
                "sasl.oauthbearer.header.urlencode",
                format!("`{v}` is not true or false"),
            ));
        }
    };
    Ok(TokenSource::ClientCredentials(ClientCredentials {
        url,
        client_id,
        client_secret: Password::new(secret),
        scope: pick("sasl.oauthbearer.scope", "scope"),
        urlencode,
        timeout,
    }))
}

/// Kafka's `unsecuredLogin*` options (OAuthBearerUnsecuredLoginCallbackHandler).
fn unsecured(options: &[(String, String)]) -> Result<TokenSource> {
    let key = "sasl.jaas.config";
    let get = |n: &str| options.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let principal_claim = get("unsecuredLoginPrincipalClaimName").unwrap_or_else(|| "sub".into());
    let lifetime = match get("unsecuredLoginLifetimeSeconds") {
        None => Duration::from_secs(3600),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| {
                Error::config(
                    key,
                    format!("unsecuredLoginLifetimeSeconds=`{v}` is not a positive whole number"),
                )
            })?,
    };
    let mut claims: Vec<(String, Value)> = Vec::new();
    let mut extensions = Vec::new();
    for (k, v) in options {
        if let Some(name) = k.strip_prefix("unsecuredLoginStringClaim_") {
            claims.push((name.to_owned(), Value::from(v.as_str())));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginNumberClaim_") {
            let n: f64 = v
                .parse()
                .map_err(|_| Error::config(key, format!("{k}=`{v}` is not a number")))?;
            claims.push((name.to_owned(), Value::from(n)));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginListClaim_") {
            // The first character is the delimiter (Kafka's convention).
            let mut chars = v.chars();
            let list: Vec<Value> = match chars.next() {
                Some(d) => chars
                    .as_str()
                    .split(d)
                    .filter(|s| !s.is_empty())
                    .map(Value::from)
                    .collect(),
                None => Vec::new(),
            };
            claims.push((name.to_owned(), Value::Array(list)));
        } else if let Some(name) = k.strip_prefix("unsecuredLoginExtension_") {
            extensions.push((name.to_owned(), v.clone()));
        }
    }
    let Some(i) = claims
        .iter()
        .position(|(k, v)| *k == principal_claim && v.is_string())
    else {
        return Err(Error::config(
            key,
            format!(
                "OAUTHBEARER without a token endpoint uses Kafka's unsecured JWS mode (tests and \
                 development only), which needs unsecuredLoginStringClaim_{principal_claim}=\"<principal>\" \
                 in OAuthBearerLoginModule's options; for a real identity provider set \
                 sasl.oauthbearer.token.endpoint.url and the client id and secret"
            ),
        ));
    };
    let principal = claims.remove(i);
    claims.insert(0, principal);
    Ok(TokenSource::Unsecured(Unsecured {
        claims,
        lifetime,
        extensions,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn initial_response_matches_rfc7628() {
        assert_eq!(
            initial_response("abc.def.", &[]),
            b"n,,\x01auth=Bearer abc.def.\x01\x01"
        );
        assert_eq!(
            initial_response("t", &[("traceId".into(), "123".into())]),
            b"n,,\x01auth=Bearer t\x01traceId=123\x01\x01"
        );
    }

    #[test]
    fn unsecured_token_round_trips_its_lifetime() {
        let u = Unsecured {
            claims: vec![("sub".into(), Value::from("alice"))],
            lifetime: Duration::from_secs(30),
            extensions: vec![],
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t = unsecured_token(&u, now);
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(B64URL.decode(parts[0]).unwrap(), br#"{"alg":"none"}"#);
        assert_eq!(parts[2], "");
        let claims: Value = serde_json::from_slice(&B64URL.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["iat"].as_f64().unwrap(), 1_700_000_000.0);
        assert_eq!(claims["exp"].as_f64().unwrap(), 1_700_000_030.0);
        let left = jwt_lifetime(&t, now + Duration::from_secs(10)).unwrap();
        assert_eq!(left, Some(Duration::from_secs(20)));
        let e = jwt_lifetime(&t, now + Duration::from_secs(31)).unwrap_err();
        assert!(e.contains("less than the 1 s"), "{e}");
        assert_eq!(jwt_lifetime("opaque-token", now), Ok(None));
    }

    #[test]
    fn lifetimes_are_checked_and_clamped() {
        assert_eq!(token_lifetime(60.0), Ok(Duration::from_secs(60)));
        assert_eq!(token_lifetime(1e19), Ok(MAX_TOKEN_LIFETIME));
        assert_eq!(token_lifetime(1e300), Ok(MAX_TOKEN_LIFETIME));
        assert_eq!(token_lifetime(f64::MAX), Ok(MAX_TOKEN_LIFETIME));
        for bad in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -1.0,
            0.0,
            0.5,
            -1e300,
        ] {
            let e = token_lifetime(bad).unwrap_err();
            assert!(e.contains("lifetime of"), "{bad}: {e}");
        }
    }

    /// An unsigned JWT whose `exp` claim is the JSON text `exp`.
    fn jwt_with_exp(exp: &str) -> String {
        let payload = B64URL.encode(format!(r#"{{"sub":"mirror","exp":{exp}}}"#));
        format!("{}.{payload}.", B64URL.encode(br#"{"alg":"none"}"#))
    }

    /// A token endpoint answering every request with HTTP 200 and `body`; aborted on drop.
    struct Endpoint {
        url: String,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Endpoint {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Endpoint {
        async fn serving(body: String) -> Endpoint {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/token", listener.local_addr().unwrap());
            let task = tokio::spawn(async move {
                while let Ok((mut s, _)) = listener.accept().await {
                    let body = body.clone();
                    tokio::spawn(async move {
                        // Read the request head and its form body.
                        let mut req = Vec::new();
                        let mut chunk = [0u8; 4096];
                        loop {
                            let n = s.read(&mut chunk).await.unwrap_or(0);
                            if n == 0 {
                                break;
                            }
                            req.extend_from_slice(&chunk[..n]);
                            let text = String::from_utf8_lossy(&req);
                            if text.contains("\r\n\r\n") && text.ends_with("client_credentials") {
                                break;
                            }
                        }
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = s.write_all(resp.as_bytes()).await;
                        let _ = s.shutdown().await;
                    });
                }
            });
            Endpoint { url, task }
        }

        fn oauth(&self) -> OAuthBearer {
            OAuthBearer::new(
                TokenSource::ClientCredentials(ClientCredentials {
                    url: self.url.clone(),
                    client_id: "mirror".into(),
                    client_secret: Password::new("s3cr3t"),
                    scope: None,
                    urlencode: false,
                    timeout: Duration::from_secs(30),
                }),
                Refresh::default(),
            )
        }
    }

    /// How long the cached token is believed to live.
    async fn cached_lifetime(o: &OAuthBearer) -> Duration {
        let c = o.cache.lock().await;
        c.as_ref().unwrap().expires.duration_since(Instant::now())
    }

    /// Issue 28 item 3: whatever lifetime an endpoint states (`expires_in`, or the JWT's
    /// `exp`), the process does not panic: huge values are clamped to a day, nonsense is an
    /// error naming the endpoint and the value.
    #[tokio::test]
    async fn hostile_token_endpoint_lifetimes_do_not_crash() {
        let opaque = |expires_in: &str| {
            format!(
                r#"{{"access_token":"opaque","token_type":"Bearer","expires_in":{expires_in}}}"#
            )
        };
        let jwt = |exp: &str| {
            format!(
                r#"{{"access_token":"{}","token_type":"Bearer"}}"#,
                jwt_with_exp(exp)
            )
        };
        // Clamped to MAX_TOKEN_LIFETIME.
        for body in [
            opaque("1e300"),
            opaque("1e19"),
            opaque(r#""1e19""#),
            opaque("1.7976931348623157e308"),
            jwt("1e300"),
            jwt("1e19"),
            jwt("18446744073709551615"),
        ] {
            let endpoint = Endpoint::serving(body.clone()).await;
            let o = endpoint.oauth();
            o.token().await.unwrap_or_else(|e| panic!("{body}: {e}"));
            let left = cached_lifetime(&o).await;
            assert!(
                left <= MAX_TOKEN_LIFETIME && left > MAX_TOKEN_LIFETIME - Duration::from_secs(60),
                "{body}: {left:?}"
            );
        }
        // Errors that say what the endpoint sent.
        for (body, says) in [
            (opaque(r#""inf""#), "not a finite number"),
            (opaque(r#""-inf""#), "not a finite number"),
            (opaque(r#""NaN""#), "not a finite number"),
            (opaque("-5"), "less than the 1 s"),
            (opaque("0"), "less than the 1 s"),
            (opaque("-1e300"), "less than the 1 s"),
            (opaque(r#""soon""#), "is not a number of seconds"),
            (opaque("null"), "is not a number of seconds"),
            (opaque("[1]"), "is not a number of seconds"),
            (jwt("-1e300"), "`exp` claim"),
            (jwt("1"), "`exp` claim"),
        ] {
            let endpoint = Endpoint::serving(body.clone()).await;
            let e = match endpoint.oauth().token().await {
                Ok(t) => panic!("{body}: accepted token {t}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(says), "{body}: {e}");
            assert!(e.contains(&endpoint.url), "names the endpoint: {e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
    }

    /// The same lifetimes from a `file:` token.
    #[tokio::test]
    async fn hostile_file_token_lifetimes_do_not_crash() {
        let dir = std::env::temp_dir().join(format!(
            "strait-oauth-file-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _guard = Remove(dir.clone());
        let source = |exp: &str| {
            let path = dir.join("token");
            std::fs::write(&path, jwt_with_exp(exp)).unwrap();
            OAuthBearer::new(TokenSource::File(path), Refresh::default())
        };
        for exp in ["1e300", "1e19", "1.7976931348623157e308"] {
            let o = source(exp);
            o.token().await.unwrap_or_else(|e| panic!("{exp}: {e}"));
            let left = cached_lifetime(&o).await;
            assert!(left <= MAX_TOKEN_LIFETIME, "{exp}: {left:?}");
        }
        for (exp, says) in [
            ("-1e300", "less than the 1 s"),
            ("0", "less than the 1 s"),
            (r#""inf""#, "numeric `exp` claim"),
            (r#""NaN""#, "numeric `exp` claim"),
            ("null", "numeric `exp` claim"),
        ] {
            let e = match source(exp).token().await {
                Ok(t) => panic!("{exp}: accepted token {t}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(says), "{exp}: {e}");
            assert!(e.contains("token file"), "{exp}: {e}");
        }
    }

    #[tokio::test]
    async fn tokens_are_cached_until_the_refresh_time() {
        let o = OAuthBearer::new(
            TokenSource::Unsecured(Unsecured {
                claims: vec![("sub".into(), Value::from("alice"))],
                lifetime: Duration::from_secs(3600),
                extensions: vec![],
            }),
            Refresh::default(),
        );
        let a = o.token().await.unwrap();
        let b = o.clone().token().await.unwrap();
        assert_eq!(a, b, "clones share the cache");
        // Past the refresh time, a new token is made.
        o.cache.lock().await.as_mut().unwrap().refresh_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let c = o.token().await.unwrap();
        assert_ne!(a, c);
        assert!(!format!("{o:?}").contains(&c));
        // A token the broker refused is not handed out again.
        o.invalidate().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_ne!(o.token().await.unwrap(), c);
    }

    fn cfg(extra: &[(&str, &str)]) -> Result<crate::ClientConfig> {
        let mut p = vec![
            ("bootstrap.servers", "b:9092"),
            ("security.protocol", "SASL_SSL"),
        ];
        p.extend_from_slice(extra);
        crate::ClientConfig::from_properties(p)
    }

    const OAUTH_JAAS: &str =
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required";

    #[test]
    fn java_client_credentials_properties() {
        let jaas =
            format!(r#"{OAUTH_JAAS} clientId="mirror" clientSecret="s3cr3t-value" scope="kafka";"#);
        let c = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.jaas.config", &jaas),
            (
                "sasl.login.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            ),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "https://idp.example/token",
            ),
            ("sasl.login.refresh.window.factor", "0.9"),
        ])
        .unwrap();
        let s = c.sasl().unwrap();
        assert_eq!(s.mechanism, crate::SaslMechanism::OAuthBearer);
        let o = s.oauth.as_ref().unwrap();
        assert_eq!(o.refresh.factor, 0.9);
        let TokenSource::ClientCredentials(cc) = &o.source else {
            panic!("{o:?}")
        };
        assert_eq!(cc.client_id, "mirror");
        assert_eq!(cc.client_secret.expose(), "s3cr3t-value");
        assert_eq!(cc.scope.as_deref(), Some("kafka"));
        assert_eq!(c.sasl_principal().as_deref(), Some("User:mirror"));
        assert!(!format!("{c:?}").contains("s3cr3t-value"), "{c:?}");

        // Kafka 4.1 keys, no handler class (the URL implies it), no JAAS at all.
        let c = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "http://127.0.0.1:1/token",
            ),
            ("sasl.oauthbearer.client.credentials.client.id", "m"),
            ("sasl.oauthbearer.client.credentials.client.secret", "x"),
        ])
        .unwrap();
        assert!(matches!(
            c.sasl().unwrap().oauth.as_ref().unwrap().source,
            TokenSource::ClientCredentials(_)
        ));
    }

    #[test]
    fn unsecured_and_msk_properties() {
        let jaas = format!(
            r#"{OAUTH_JAAS} unsecuredLoginStringClaim_sub="alice" unsecuredLoginLifetimeSeconds="5" unsecuredLoginListClaim_scope=",a,b";"#
        );
        let c = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.jaas.config", &jaas),
        ])
        .unwrap();
        let TokenSource::Unsecured(u) = &c.sasl().unwrap().oauth.as_ref().unwrap().source else {
            panic!()
        };
        assert_eq!(u.lifetime, Duration::from_secs(5));
        assert_eq!(u.claims[0], ("sub".to_owned(), Value::from("alice")));
        assert_eq!(u.claims[1].1, serde_json::json!(["a", "b"]));

        // No sub claim and no endpoint: the error says both ways out.
        let e = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.jaas.config", &format!("{OAUTH_JAAS};")),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unsecuredLoginStringClaim_sub") && e.contains("token.endpoint.url"),
            "{e}"
        );

        let c = cfg(&[
            ("sasl.mechanism", "AWS_MSK_IAM"),
            (
                "sasl.jaas.config",
                r#"software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName="prod";"#,
            ),
            (
                "sasl.client.callback.handler.class",
                "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
            ),
        ])
        .unwrap();
        let s = c.sasl().unwrap();
        assert_eq!(s.msk.as_ref().unwrap().profile.as_deref(), Some("prod"));
        assert_eq!(c.sasl_principal(), None);

        // MSK's OAUTHBEARER signer.
        let c = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.jaas.config", &format!("{OAUTH_JAAS};")),
            (
                "sasl.login.callback.handler.class",
                "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
            ),
            (
                "sasl.client.callback.handler.class",
                "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
            ),
        ])
        .unwrap();
        assert!(matches!(
            c.sasl().unwrap().oauth.as_ref().unwrap().source,
            TokenSource::Msk(_)
        ));

        // Token keys with another mechanism, or without SASL, are errors naming the key.
        let e = cfg(&[
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
            ("sasl.oauthbearer.scope", "x"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("sasl.oauthbearer.scope"), "{e}");
        let e = cfg(&[
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
            ("sasl.oauthbearer.client.credentials.client.id", "m"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("client.secret"), "{e}");
    }
}
