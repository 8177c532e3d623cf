//! AWS MSK IAM authentication: `sasl.mechanism=AWS_MSK_IAM` (the `aws-msk-iam-auth` library's
//! JSON payload) and OAUTHBEARER with the MSK signer (`aws-msk-iam-sasl-signer`'s token).
//!
//! Both are an AWS Signature Version 4 *presigned* `GET https://<host>/?Action=kafka-cluster:Connect`
//! (service `kafka-cluster`, valid 900 s, signed header `host`, payload hash of the empty body):
//!
//! - AWS_MSK_IAM sends its query parameters (lower-cased names) plus `version` (`2020_10_22`),
//!   `host` and `user-agent` as one JSON object, signed for the broker's own host name;
//! - OAUTHBEARER sends the presigned URL for `kafka.<region>.amazonaws.com` with a `User-Agent`
//!   parameter, base64url-encoded without padding, as the bearer token.
//!
//! SigV4 is written here on the `hmac` and `sha2` crates this crate already uses for SCRAM,
//! rather than taking `aws-sigv4` + `aws-credential-types`, which bring the aws-smithy runtime
//! (~30 crates) for four HMACs. It is checked against AWS's published SigV4 test-suite vectors
//! (unit tests below). **It has not been tested against AWS from here** (no AWS account).
//!
//! Credentials, in the order of the AWS default chain: the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), a web identity token
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, exchanged with STS
//! AssumeRoleWithWebIdentity, as on EKS with IRSA), then the shared credentials/config files
//! (`~/.aws/credentials`, `~/.aws/config`; profile `awsProfileName` from `sasl.jaas.config`, else
//! `AWS_PROFILE`, else `default`). Not supported by this built-in chain: EC2/ECS instance
//! metadata, EKS Pod Identity, SSO, `role_arn` profiles and `awsRoleArn` (STS AssumeRole). Built
//! with the cargo feature `aws-sdk`, the AWS SDK's default chain (`aws_sdk.rs`) replaces it and
//! covers those.

// With `aws-sdk` the SDK's chain replaces the built-in one, whose code then goes unused.
#![cfg_attr(feature = "aws-sdk", allow(dead_code))]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::Password;
use crate::error::Result;
use crate::http;
use crate::oauth::credentials_error;

/// The service name MSK signs for.
const SERVICE: &str = "kafka-cluster";
const ACTION: &str = "kafka-cluster:Connect";
/// How long a signature is valid (the AWS libraries use 15 minutes).
const EXPIRES_SECS: u64 = 900;
/// The payload version of `aws-msk-iam-auth`.
const PAYLOAD_VERSION: &str = "2020_10_22";
/// SHA-256 of the empty body.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// AWS credentials. `Debug` is redacted.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: Password,
    pub(crate) session_token: Option<Password>,
}

/// The MSK IAM settings from `sasl.jaas.config` (`IAMLoginModule required awsProfileName=...;`).
#[derive(Clone)]
pub struct MskIam {
    pub(crate) profile: Option<String>,
    /// The environment (the process's own; a map in tests).
    env: Env,
    /// Web identity credentials, cached until shortly before they expire.
    sts_cache: Arc<tokio::sync::Mutex<Option<(Credentials, Instant)>>>,
    /// The AWS SDK's chain (built at first use) and its last credentials, until shortly
    /// before they expire.
    #[cfg(feature = "aws-sdk")]
    sdk: Arc<tokio::sync::Mutex<SdkState>>,
}

#[cfg(feature = "aws-sdk")]
#[derive(Default)]
struct SdkState {
    chain: Option<crate::aws_sdk::SdkChain>,
    cached: Option<(Credentials, Instant)>,
}

impl PartialEq for MskIam {
    fn eq(&self, other: &Self) -> bool {
        self.profile == other.profile
    }
}

impl Eq for MskIam {}

impl std::fmt::Debug for MskIam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskIam")
            .field("profile", &self.profile)
            .finish()
    }
}

/// Where environment variables are read: the process environment, or a fixed map (tests).
#[derive(Clone, Default)]
struct Env(Option<Arc<std::collections::BTreeMap<String, String>>>);

impl Env {
    fn var(&self, key: &str) -> Option<String> {
        match &self.0 {
            None => std::env::var(key).ok(),
            Some(m) => m.get(key).cloned(),
        }
    }
}

impl MskIam {
    pub(crate) fn new(profile: Option<String>) -> MskIam {
        MskIam {
            profile,
            env: Env::default(),
            sts_cache: Arc::new(tokio::sync::Mutex::new(None)),
            #[cfg(feature = "aws-sdk")]
            sdk: Arc::default(),
        }
    }

    /// The AWS_MSK_IAM client message for broker `host`.
    pub(crate) async fn auth_payload(&self, host: &str) -> Result<Vec<u8>> {
        let creds = self.credentials().await?;
        let region = region_of_host(host)
            .or_else(|| region_from_env(&self.env))
            .ok_or_else(|| {
                credentials_error(
                    "AWS region",
                    format!(
                        "the broker host `{host}` does not name an AWS region and neither \
                         AWS_REGION nor AWS_DEFAULT_REGION is set; set AWS_REGION"
                    ),
                    false,
                )
            })?;
        let p = presign(&creds, &region, host, SystemTime::now());
        let mut m = serde_json::Map::new();
        m.insert("version".into(), PAYLOAD_VERSION.into());
        m.insert("host".into(), host.into());
        m.insert("user-agent".into(), user_agent().into());
        for (k, v) in p.params {
            m.insert(k.to_ascii_lowercase(), v.into());
        }
        m.insert("x-amz-signature".into(), p.signature.into());
        Ok(serde_json::Value::Object(m).to_string().into_bytes())
    }

    /// The OAUTHBEARER token of the MSK signer libraries, and its lifetime.
    pub(crate) async fn oauth_token(&self) -> Result<(String, Duration)> {
        let creds = self.credentials().await?;
        let region = region_from_env(&self.env).ok_or_else(|| {
            credentials_error(
                "AWS region",
                "the MSK OAUTHBEARER signer needs the cluster's region; set AWS_REGION".into(),
                false,
            )
        })?;
        let host = format!("kafka.{region}.amazonaws.com");
        let p = presign(&creds, &region, &host, SystemTime::now());
        let mut url = format!("https://{host}/?{}", p.canonical_query);
        url.push_str(&format!("&X-Amz-Signature={}", p.signature));
        url.push_str(&format!("&User-Agent={}", uri_encode(&user_agent())));
        Ok((B64URL.encode(url), Duration::from_secs(EXPIRES_SECS)))
    }

    async fn credentials(&self) -> Result<Credentials> {
        #[cfg(feature = "aws-sdk")]
        return self.sdk_credentials().await;
        #[cfg(not(feature = "aws-sdk"))]
        self.builtin_credentials().await
    }

    /// The AWS SDK's default chain, its credentials cached until 5 minutes before they expire
    /// (long-term keys: 5 minutes, so a rotated key file is read again).
    #[cfg(feature = "aws-sdk")]
    async fn sdk_credentials(&self) -> Result<Credentials> {
        let mut state = self.sdk.lock().await;
        if let Some((c, until)) = &state.cached
            && Instant::now() < *until
        {
            return Ok(c.clone());
        }
        let chain = match &state.chain {
            Some(c) => c.clone(),
            None => {
                // The process environment: the SDK has no way to be given another outside its
                // own tests (this crate's tests run it in a child process).
                let c = crate::aws_sdk::SdkChain::load(self.profile.as_deref()).await?;
                state.chain = Some(c.clone());
                c
            }
        };
        let (creds, left) = chain.credentials().await?;
        let keep = left.map_or(Duration::from_secs(300), |l| {
            l.saturating_sub(Duration::from_secs(300))
        });
        state.cached = Some((creds.clone(), Instant::now() + keep));
        Ok(creds)
    }

    /// The chain written here: environment, web identity, shared files.
    async fn builtin_credentials(&self) -> Result<Credentials> {
        if self.profile.is_none() {
            if let Some(c) = env_credentials(&self.env)? {
                return Ok(c);
            }
            if let Some(c) = self.web_identity().await? {
                return Ok(c);
            }
        }
        let profile = self
            .profile
            .clone()
            .or_else(|| self.env.var("AWS_PROFILE"))
            .unwrap_or_else(|| "default".into());
        profile_credentials(&self.env, &profile)?.ok_or_else(|| {
            credentials_error(
                "AWS credentials",
                format!(
                    "none found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                     AWS_SESSION_TOKEN for temporary credentials), or AWS_WEB_IDENTITY_TOKEN_FILE \
                     and AWS_ROLE_ARN, or put aws_access_key_id/aws_secret_access_key under \
                     [{profile}] in ~/.aws/credentials (awsProfileName in sasl.jaas.config or \
                     AWS_PROFILE pick the profile)"
                ),
                false,
            )
        })
    }

    /// STS AssumeRoleWithWebIdentity (an unsigned call: the web identity token authenticates).
    async fn web_identity(&self) -> Result<Option<Credentials>> {
        let (Some(file), Some(role)) = (
            self.env.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
            self.env.var("AWS_ROLE_ARN"),
        ) else {
            return Ok(None);
        };
        let mut cache = self.sts_cache.lock().await;
        if let Some((c, until)) = cache.as_ref()
            && Instant::now() < *until
        {
            return Ok(Some(c.clone()));
        }
        let what = "STS AssumeRoleWithWebIdentity";
        let token = std::fs::read_to_string(PathBuf::from(&file)).map_err(|e| {
            credentials_error(
                what,
                format!(
                    "cannot read AWS_WEB_IDENTITY_TOKEN_FILE {}: {e}",
                    PathBuf::from(&file).display()
                ),
                true,
            )
        })?;
        let session = self
            .env
            .var("AWS_ROLE_SESSION_NAME")
            .unwrap_or_else(|| format!("strait-{}", std::process::id()));
        // AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL: the SDKs' endpoint overrides (VPC endpoints).
        let url = match (
            self.env
                .var("AWS_ENDPOINT_URL_STS")
                .or_else(|| self.env.var("AWS_ENDPOINT_URL")),
            region_from_env(&self.env),
        ) {
            (Some(u), _) => u,
            (None, Some(r)) => format!("https://sts.{r}.amazonaws.com/"),
            (None, None) => "https://sts.amazonaws.com/".to_owned(),
        };
        let body = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
            http::form_encode(&role),
            http::form_encode(&session),
            http::form_encode(token.trim())
        );
        let resp = http::post_form(&url, &[], body, Duration::from_secs(10))
            .await
            .map_err(|f| credentials_error(what, f.message, true))?;
        let text = String::from_utf8_lossy(&resp.body);
        if resp.status != 200 {
            let code = xml_text(&text, "Code").unwrap_or_default();
            return Err(credentials_error(
                what,
                format!(
                    "STS answered HTTP {} {code}; check AWS_ROLE_ARN ({role}) and that the role \
                     trusts this web identity",
                    resp.status
                ),
                resp.status >= 500,
            ));
        }
        let (Some(id), Some(secret), Some(session_token)) = (
            xml_text(&text, "AccessKeyId"),
            xml_text(&text, "SecretAccessKey"),
            xml_text(&text, "SessionToken"),
        ) else {
            return Err(credentials_error(
                what,
                "the STS response has no credentials".into(),
                false,
            ));
        };
        let creds = Credentials {
            access_key_id: id,
            secret_access_key: Password::new(secret),
            session_token: Some(Password::new(session_token)),
        };
        // STS credentials last an hour by default; renew well before.
        *cache = Some((creds.clone(), Instant::now() + Duration::from_secs(45 * 60)));
        Ok(Some(creds))
    }
}

fn user_agent() -> String {
    format!("strait/{}", env!("CARGO_PKG_VERSION"))
}

fn region_from_env(env: &Env) -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|k| env.var(k).filter(|v| !v.trim().is_empty()))
}

/// `b-1.c.x.c2.kafka.us-east-1.amazonaws.com` -> `us-east-1` (also `kafka-serverless`).
pub(crate) fn region_of_host(host: &str) -> Option<String> {
    let labels: Vec<&str> = host.split('.').collect();
    labels.windows(3).find_map(|w| {
        (matches!(w[0], "kafka" | "kafka-serverless") && w[2] == "amazonaws")
            .then(|| w[1].to_owned())
    })
}

fn env_credentials(env: &Env) -> Result<Option<Credentials>> {
    let id = env.var("AWS_ACCESS_KEY_ID").filter(|s| !s.is_empty());
    let secret = env.var("AWS_SECRET_ACCESS_KEY").filter(|s| !s.is_empty());
    match (id, secret) {
        (Some(id), Some(secret)) => Ok(Some(Credentials {
            access_key_id: id,
            secret_access_key: Password::new(secret),
            session_token: env
                .var("AWS_SESSION_TOKEN")
                .filter(|s| !s.is_empty())
                .map(Password::new),
        })),
        (Some(_), None) => Err(credentials_error(
            "AWS credentials",
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both".into(),
            false,
        )),
        _ => Ok(None),
    }
}

fn profile_credentials(env: &Env, profile: &str) -> Result<Option<Credentials>> {
    let home = env.var("HOME").map(PathBuf::from);
    let file = |var: &str, default: &str| {
        env.var(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    // The credentials file names sections `[name]`; the config file `[profile name]`
    // (`[default]` in both).
    let sources = [
        (
            file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
            profile.to_owned(),
        ),
        (
            file("AWS_CONFIG_FILE", ".aws/config"),
            if profile == "default" {
                "default".to_owned()
            } else {
                format!("profile {profile}")
            },
        ),
    ];
    for (path, section) in sources {
        let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
            continue;
        };
        let values = ini_section(&text, &section);
        let get = |k: &str| {
            values
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        if let (Some(id), Some(secret)) = (get("aws_access_key_id"), get("aws_secret_access_key")) {
            return Ok(Some(Credentials {
                access_key_id: id,
                secret_access_key: Password::new(secret),
                session_token: get("aws_session_token").map(Password::new),
            }));
        }
    }
    Ok(None)
}

/// The `key = value` lines of `[section]` in an AWS INI file.
pub(crate) fn ini_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out
}

/// The text of the first `<tag>...</tag>` (STS responses are small, flat XML).
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].trim().to_owned())
}

/// A presigned request: the signed query parameters (in canonical order), the canonical query
/// string and the signature.
pub(crate) struct Presigned {
    pub(crate) params: Vec<(String, String)>,
    pub(crate) canonical_query: String,
    pub(crate) signature: String,
}

/// Presigns `GET https://host/?Action=kafka-cluster:Connect` for MSK.
fn presign(creds: &Credentials, region: &str, host: &str, now: SystemTime) -> Presigned {
    let (date, datetime) = amz_dates(now);
    let scope = format!("{date}/{region}/{SERVICE}/aws4_request");
    let mut params = vec![
        ("Action".to_owned(), ACTION.to_owned()),
        ("X-Amz-Algorithm".to_owned(), "AWS4-HMAC-SHA256".to_owned()),
        (
            "X-Amz-Credential".to_owned(),
            format!("{}/{scope}", creds.access_key_id),
        ),
        ("X-Amz-Date".to_owned(), datetime.clone()),
        ("X-Amz-Expires".to_owned(), EXPIRES_SECS.to_string()),
        ("X-Amz-SignedHeaders".to_owned(), "host".to_owned()),
    ];
    if let Some(t) = &creds.session_token {
        params.push(("X-Amz-Security-Token".to_owned(), t.expose().to_owned()));
    }
    params.sort();
    let canonical_query = canonical_query(&params);
    let signature = sign(
        creds.secret_access_key.expose(),
        &date,
        &datetime,
        region,
        SERVICE,
        &canonical_request(
            "GET",
            "/",
            &canonical_query,
            &[("host", host)],
            EMPTY_SHA256,
        ),
    );
    Presigned {
        params,
        canonical_query,
        signature,
    }
}

/// RFC 3986 percent-encoding as SigV4 wants it (unreserved characters kept, `/` encoded).
pub(crate) fn uri_encode(s: &str) -> String {
    http::form_encode(s)
}

/// `k=v&...` with keys and values encoded, sorted by key (then value).
pub(crate) fn canonical_query(params: &[(String, String)]) -> String {
    let mut enc: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    enc.sort();
    enc.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The SigV4 canonical request. `headers` are (lower-case name, value), signed in sorted order.
pub(crate) fn canonical_request(
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, &str)],
    payload_sha256: &str,
) -> String {
    let mut h: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    h.sort();
    let canonical_headers: String = h.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
    format!(
        "{method}\n{path}\n{query}\n{canonical_headers}\n{}\n{payload_sha256}",
        signed.join(";")
    )
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The string to sign for `canonical_request`.
pub(crate) fn string_to_sign(
    datetime: &str,
    date: &str,
    region: &str,
    service: &str,
    canonical_request: &str,
) -> String {
    format!(
        "AWS4-HMAC-SHA256\n{datetime}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    )
}

/// The hex signature of `canonical_request`.
pub(crate) fn sign(
    secret: &str,
    date: &str,
    datetime: &str,
    region: &str,
    service: &str,
    canonical_request: &str,
) -> String {
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, service.as_bytes());
    let k_signing = hmac_sha256(&k_service, b"aws4_request");
    let sts = string_to_sign(datetime, date, region, service, canonical_request);
    hex(&hmac_sha256(&k_signing, sts.as_bytes()))
}

/// `("20150830", "20150830T123600Z")` for `now` (UTC).
pub(crate) fn amz_dates(now: SystemTime) -> (String, String) {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let date = format!("{y:04}{m:02}{d:02}");
    let time = format!(
        "{date}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    );
    (date, time)
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Checks the broker's AWS_MSK_IAM answer (JSON with `version` and `request-id`).
pub(crate) fn check_response(bytes: &[u8]) -> std::result::Result<(), String> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) if v.get("version").is_some() => Ok(()),
        _ => Err(format!(
            "unexpected AWS_MSK_IAM server response `{}`",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // AWS SigV4 test suite (aws-sig-v4-test-suite): credentials AKIDEXAMPLE /
    // wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service `service`,
    // 20150830T123600Z, headers Host: example.amazonaws.com and X-Amz-Date.
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const DT: &str = "20150830T123600Z";
    const HEADERS: &[(&str, &str)] = &[("Host", "example.amazonaws.com"), ("X-Amz-Date", DT)];

    fn suite(method: &str, query: &str) -> (String, String) {
        let cr = canonical_request(method, "/", query, HEADERS, EMPTY_SHA256);
        let sts = string_to_sign(DT, "20150830", "us-east-1", "service", &cr);
        (
            sts,
            sign(SECRET, "20150830", DT, "us-east-1", "service", &cr),
        )
    }

    #[test]
    fn get_vanilla() {
        let (sts, sig) = suite("GET", "");
        assert_eq!(
            sts,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n\
             bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
        );
        assert_eq!(
            sig,
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn post_vanilla() {
        let (sts, sig) = suite("POST", "");
        assert!(sts.ends_with("553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87"));
        assert_eq!(
            sig,
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }

    #[test]
    fn get_vanilla_query_order_key_case() {
        let q = canonical_query(&[
            ("Param2".into(), "value2".into()),
            ("Param1".into(), "value1".into()),
        ]);
        assert_eq!(q, "Param1=value1&Param2=value2");
        assert_eq!(
            suite("GET", &q).1,
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        );
    }

    /// AWS's query-string (presigned URL) example: GET examplebucket/test.txt, 86400 s,
    /// UNSIGNED-PAYLOAD (S3 documentation, "Authenticating Requests: Using Query Parameters").
    #[test]
    fn presigned_url_example() {
        let params: Vec<(String, String)> = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
            (
                "X-Amz-Credential",
                "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request",
            ),
            ("X-Amz-Date", "20130524T000000Z"),
            ("X-Amz-Expires", "86400"),
            ("X-Amz-SignedHeaders", "host"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let q = canonical_query(&params);
        assert_eq!(
            q,
            "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        );
        let cr = canonical_request(
            "GET",
            "/test.txt",
            &q,
            &[("host", "examplebucket.s3.amazonaws.com")],
            "UNSIGNED-PAYLOAD",
        );
        assert_eq!(
            sign(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20130524",
                "20130524T000000Z",
                "us-east-1",
                "s3",
                &cr
            ),
            "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        assert_eq!(
            amz_dates(t),
            ("20150830".to_owned(), "20150830T123600Z".to_owned())
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(amz_dates(leap).0, "20000229");
    }

    #[test]
    fn msk_payload_shape() {
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Password::new(SECRET),
            session_token: Some(Password::new("tok/en+=")),
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        let host = "b-1.demo.abc.c2.kafka.us-east-1.amazonaws.com";
        let p = presign(&creds, "us-east-1", host, now);
        let keys: Vec<&str> = p.params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "Action",
                "X-Amz-Algorithm",
                "X-Amz-Credential",
                "X-Amz-Date",
                "X-Amz-Expires",
                "X-Amz-Security-Token",
                "X-Amz-SignedHeaders"
            ]
        );
        assert!(
            p.canonical_query
                .starts_with("Action=kafka-cluster%3AConnect&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2Fus-east-1%2Fkafka-cluster%2Faws4_request&X-Amz-Date=20150830T123600Z&X-Amz-Expires=900&X-Amz-Security-Token=tok%2Fen%2B%3D&X-Amz-SignedHeaders=host"),
            "{}",
            p.canonical_query
        );
        // The signature is the SigV4 of exactly that canonical request.
        let cr = canonical_request(
            "GET",
            "/",
            &p.canonical_query,
            &[("host", host)],
            EMPTY_SHA256,
        );
        assert_eq!(
            p.signature,
            sign(SECRET, "20150830", DT, "us-east-1", SERVICE, &cr)
        );
        assert_eq!(region_of_host(host).as_deref(), Some("us-east-1"));
        assert_eq!(
            region_of_host("boot-x.c1.kafka-serverless.eu-west-1.amazonaws.com").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(region_of_host("localhost"), None);
        assert!(!format!("{creds:?}").contains("EXAMPLEKEY"));
    }

    #[test]
    fn ini_profiles_and_sts_xml() {
        let ini = "[default]\naws_access_key_id = A\n[other]\naws_access_key_id=B\naws_secret_access_key = S\n";
        assert_eq!(
            ini_section(ini, "other"),
            [
                ("aws_access_key_id".to_owned(), "B".to_owned()),
                ("aws_secret_access_key".to_owned(), "S".to_owned())
            ]
        );
        let xml = "<AssumeRoleWithWebIdentityResponse><Credentials><AccessKeyId>ASIA</AccessKeyId>\
                   <SecretAccessKey>sk</SecretAccessKey></Credentials></AssumeRoleWithWebIdentityResponse>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA"));
        assert_eq!(xml_text(xml, "SessionToken"), None);
    }

    fn msk_with_env(profile: Option<&str>, vars: &[(&str, String)]) -> MskIam {
        let mut m = MskIam::new(profile.map(str::to_owned));
        m.env = Env(Some(Arc::new(
            vars.iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )));
        m
    }

    fn payload(bytes: &[u8]) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::from_slice(bytes).unwrap() {
            serde_json::Value::Object(m) => m,
            other => panic!("{other}"),
        }
    }

    /// Credentials from the environment, then a profile file; the payload has the fields of
    /// aws-msk-iam-auth and never the secret key.
    // The built-in chain (with `aws-sdk`, the SDK's chain reads the process environment).
    #[cfg(not(feature = "aws-sdk"))]
    #[tokio::test]
    async fn credential_sources_and_the_msk_payload() {
        let host = "b-1.demo.abc.c2.kafka.eu-west-1.amazonaws.com";
        let env = msk_with_env(
            None,
            &[
                ("AWS_ACCESS_KEY_ID", "AKIDENV".into()),
                ("AWS_SECRET_ACCESS_KEY", "env-secret-key".into()),
                ("AWS_SESSION_TOKEN", "env-session".into()),
            ],
        );
        let bytes = env.auth_payload(host).await.unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(!text.contains("env-secret-key"), "{text}");
        let p = payload(&bytes);
        let mut keys: Vec<&str> = p.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "action",
                "host",
                "user-agent",
                "version",
                "x-amz-algorithm",
                "x-amz-credential",
                "x-amz-date",
                "x-amz-expires",
                "x-amz-security-token",
                "x-amz-signature",
                "x-amz-signedheaders"
            ]
        );
        assert_eq!(p["action"], "kafka-cluster:Connect");
        assert_eq!(p["version"], "2020_10_22");
        assert_eq!(p["host"], host);
        assert_eq!(p["x-amz-security-token"], "env-session");
        let credential = p["x-amz-credential"].as_str().unwrap();
        assert!(
            credential.starts_with("AKIDENV/")
                && credential.ends_with("/eu-west-1/kafka-cluster/aws4_request"),
            "{credential}"
        );

        let dir = std::env::temp_dir().join(format!("strait-aws-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let creds = dir.join("credentials");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\
             [prod]\naws_access_key_id = AKIDPROD\naws_secret_access_key = p\n",
        )
        .unwrap();
        let file = ("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string());
        let none = ("AWS_CONFIG_FILE", dir.join("none").display().to_string());
        let prod = msk_with_env(Some("prod"), &[file.clone(), none.clone()]);
        let p = payload(&prod.auth_payload(host).await.unwrap());
        assert!(
            p["x-amz-credential"]
                .as_str()
                .unwrap()
                .starts_with("AKIDPROD/")
        );
        assert!(!p.contains_key("x-amz-security-token"));
        let default = msk_with_env(None, &[file, none.clone()]);
        let p = payload(&default.auth_payload(host).await.unwrap());
        assert!(
            p["x-amz-credential"]
                .as_str()
                .unwrap()
                .starts_with("AKIDDEFAULT/")
        );

        // Nothing anywhere: the error lists every source.
        let e = msk_with_env(None, &[none])
            .auth_payload(host)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("AWS_ACCESS_KEY_ID") && e.contains("AWS_WEB_IDENTITY_TOKEN_FILE"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Web identity: the token file is exchanged with STS AssumeRoleWithWebIdentity (here a
    /// local endpoint through AWS_ENDPOINT_URL_STS), and the temporary credentials sign.
    // The built-in chain (with `aws-sdk`, the SDK's chain reads the process environment).
    #[cfg(not(feature = "aws-sdk"))]
    #[tokio::test]
    async fn web_identity_through_sts() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&buf).contains("WebIdentityToken=") {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>\
                        <Credentials><AccessKeyId>ASIASTS</AccessKeyId><SecretAccessKey>sts-secret\
                        </SecretAccessKey><SessionToken>sts-session</SessionToken></Credentials>\
                        </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf).into_owned()
        });
        let token = std::env::temp_dir().join(format!("strait-aws-wi-{}", std::process::id()));
        std::fs::write(&token, "eyJ-web-identity-token\n").unwrap();
        let m = msk_with_env(
            None,
            &[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
                (
                    "AWS_ROLE_ARN",
                    "arn:aws:iam::123456789012:role/mirror".into(),
                ),
                ("AWS_ENDPOINT_URL_STS", url),
                ("AWS_REGION", "us-east-2".into()),
            ],
        );
        let (t, lifetime) = m.oauth_token().await.unwrap();
        let request = server.await.unwrap();
        let _ = std::fs::remove_file(&token);
        assert!(
            request.contains("Action=AssumeRoleWithWebIdentity"),
            "{request}"
        );
        assert!(
            request.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fmirror"),
            "{request}"
        );
        assert!(
            request.contains("WebIdentityToken=eyJ-web-identity-token"),
            "{request}"
        );
        assert_eq!(lifetime, Duration::from_secs(900));
        // The MSK signer token: a presigned URL for kafka.<region>.amazonaws.com, base64url.
        let url = String::from_utf8(B64URL.decode(t).unwrap()).unwrap();
        assert!(
            url.starts_with(
                "https://kafka.us-east-2.amazonaws.com/?Action=kafka-cluster%3AConnect&"
            ),
            "{url}"
        );
        assert!(url.contains("X-Amz-Credential=ASIASTS%2F"), "{url}");
        assert!(url.contains("X-Amz-Security-Token=sts-session"), "{url}");
        assert!(
            url.contains("&X-Amz-Signature=") && url.contains("&User-Agent=strait%2F"),
            "{url}"
        );
        assert!(!url.contains("sts-secret"));
    }

    /// The variable that makes [`sdk_chain_child`] run (it is a no-op in a normal test run).
    #[cfg(feature = "aws-sdk")]
    const SDK_CHILD: &str = "STRAIT_TEST_AWS_SDK_CHILD";

    /// Run by [`the_sdk_chain_reads_ecs_container_credentials`] in a child process with the
    /// environment it sets (the SDK reads the process environment): prints the MSK IAM payload.
    #[cfg(feature = "aws-sdk")]
    #[tokio::test]
    async fn sdk_chain_child() {
        if std::env::var_os(SDK_CHILD).is_none() {
            return;
        }
        let m = MskIam::new(None);
        let host = "b-1.demo.abc.c2.kafka.eu-west-1.amazonaws.com";
        match m.auth_payload(host).await {
            Ok(p) => println!("PAYLOAD {}", String::from_utf8(p).unwrap()),
            Err(e) => println!("ERROR {e}"),
        }
    }

    /// ECS / EKS Pod Identity container credentials (`AWS_CONTAINER_CREDENTIALS_FULL_URI` and
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`, served here on loopback) through the AWS SDK's
    /// default chain sign the AWS_MSK_IAM payload; offline, no other credential source set.
    #[cfg(feature = "aws-sdk")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sdk_chain_reads_ecs_container_credentials() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v2/credentials/abc",
            listener.local_addr().unwrap()
        );
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&buf).contains("\r\n\r\n") {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            // An hour from now, RFC 3339.
            let (_, date) = amz_dates(SystemTime::now() + Duration::from_secs(3600));
            let expiration = format!(
                "{}-{}-{}T{}:{}:{}Z",
                &date[0..4],
                &date[4..6],
                &date[6..8],
                &date[9..11],
                &date[11..13],
                &date[13..15]
            );
            let body = format!(
                "{{\"AccessKeyId\":\"ASIAECS\",\"SecretAccessKey\":\"ecs-secret\",\
                 \"Token\":\"ecs-session\",\"Expiration\":\"{expiration}\"}}"
            );
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf).into_owned()
        });
        let home = std::env::temp_dir().join(format!("strait-aws-sdk-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let exe = std::env::current_exe().unwrap();
        let home_str = home.display().to_string();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(exe)
                .args(["--exact", "aws::tests::sdk_chain_child", "--nocapture"])
                .env_clear()
                .env(SDK_CHILD, "1")
                .env("HOME", &home_str)
                .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
                .env("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token")
                .env("AWS_EC2_METADATA_DISABLED", "true")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let _ = std::fs::remove_dir_all(&home);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("PAYLOAD "))
            .unwrap_or_else(|| {
                panic!(
                    "no payload: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let request = server.await.unwrap();
        assert!(request.starts_with("GET /v2/credentials/abc "), "{request}");
        assert!(
            request
                .to_ascii_lowercase()
                .contains("authorization: pod-identity-token"),
            "{request}"
        );
        let p = payload(line.as_bytes());
        assert_eq!(p["action"], "kafka-cluster:Connect");
        assert_eq!(p["host"], "b-1.demo.abc.c2.kafka.eu-west-1.amazonaws.com");
        assert!(
            p["x-amz-credential"]
                .as_str()
                .unwrap()
                .starts_with("ASIAECS/"),
            "{p:?}"
        );
        assert!(
            p["x-amz-credential"]
                .as_str()
                .unwrap()
                .contains("/eu-west-1/kafka-cluster/aws4_request"),
            "{p:?}"
        );
        assert_eq!(p["x-amz-security-token"], "ecs-session");
        assert_eq!(p["x-amz-signature"].as_str().unwrap().len(), 64);
        assert!(!line.contains("ecs-secret"), "{line}");
    }
}
