//! SASL/OAUTHBEARER against one real Kafka 4.x broker (mTLS cluster, authorizer on) with two
//! OAUTHBEARER listeners: SASL_PLAINTEXT with Kafka's unsecured validator (it accepts
//! `alg: none` tokens and checks their `exp`, `iat` and `sub`), and SASL_SSL with Kafka's
//! `OAuthBearerValidatorCallbackHandler`, which verifies ES256-signed JWTs against a JWKS file
//! holding a P-256 key the test generates, and checks audience and issuer.
//! `connections.max.reauth.ms` is set, so every session ends when its token expires (KIP-368:
//! the session lifetime is the token's remaining lifetime).
//!
//! 1. Unsecured JWS mode (`unsecuredLoginStringClaim_sub`, `unsecuredLoginLifetimeSeconds=12`):
//!    the client produces and fetches every 100 ms with no failed request until it has used a
//!    third connection, within three token lifetimes: each session is renewed on a new
//!    connection with a fresh token before the broker ends it (a stale token would be refused,
//!    an unrenewed session closed).
//! 2. Client credentials against a token endpoint this test serves (HTTP, Basic client
//!    authentication, signed tokens living 12 s) over SASL_SSL to the JWKS-validating listener:
//!    the same until the endpoint has issued a third token, within two token lifetimes and a
//!    bit: it is asked for new tokens before the old ones expire.
//! 3. The token endpoint refuses a wrong client secret: connecting fails with an error that
//!    names the setting to fix and does not contain the secret.
//! 4. A validly signed token for another audience: the broker refuses it, and the error says so
//!    (RFC 7628 error challenge) and what to check.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_oauth:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use common::*;
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, SigningKey as _};
use strait_testkit::{AdminOp, Cluster, Listener};
use strait_wire::{Client, FetchOptions, FetchPartition, ProduceBatch, ProduceOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "oauth";
/// Token lifetime: long enough for a connection setup on a loaded machine, short enough for
/// several renewals within the test.
const TOKEN_SECS: u64 = 12;
const OAUTH_MODULE: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
const CLIENT_ID: &str = "mirror-client";
const CLIENT_SECRET: &str = "right-secret-4711";
const WRONG_SECRET: &str = "wrong-secret-0815";
/// A client the endpoint issues tokens for another audience.
const OTHER_AUDIENCE_CLIENT: &str = "elsewhere-client";
const AUDIENCE: &str = "kafka";
const ISSUER: &str = "https://issuer.strait.test";
const KID: &str = "strait-test-key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_tokens_are_refreshed_and_sessions_renewed() {
    let key = Arc::new(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap());
    let jwks = JwksFile::write(&key);
    let endpoint = TokenEndpoint::start(key.clone()).await;
    let jwks_url = format!("file://{}", jwks.0.display());
    let allowed = format!(
        "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url},{}",
        endpoint.url
    );
    let cluster = blocking(move || {
        let validator =
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";
        let c = Cluster::builder("wire-oauth")
            .mtls()
            .sasl()
            .broker_config(
                "sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            )
            .broker_config(
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
                &format!("{OAUTH_MODULE} required unsecuredLoginStringClaim_sub=\"admin\";"),
            )
            .broker_config(
                "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
                &format!("{OAUTH_MODULE} required;"),
            )
            .broker_config(
                "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class",
                validator,
            )
            .broker_config("sasl.oauthbearer.jwks.endpoint.url", &jwks_url)
            .broker_config("sasl.oauthbearer.expected.audience", AUDIENCE)
            .broker_config("sasl.oauthbearer.expected.issuer", ISSUER)
            .jvm_opt(&allowed)
            // The authorizer is on (mTLS cluster): the OAuth principals are super users here.
            .broker_config(
                "super.users",
                &format!("User:broker;User:admin;User:alice;User:{CLIENT_ID}"),
            )
            // Much longer than a token: the token's expiry is what ends each session.
            .broker_config("connections.max.reauth.ms", "3600000")
            .start()
            .unwrap();
        c.admin(&[AdminOp::topic(TOPIC, 1, 1)]).unwrap();
        Arc::new(c)
    })
    .await;
    let ca = cluster.pki().unwrap().ca_pem().display().to_string();
    let base = |l: Listener, extra: &[(&str, String)]| {
        let mut p = vec![
            ("bootstrap.servers".to_owned(), cluster.listener(l)),
            (
                "security.protocol".to_owned(),
                l.security_protocol().to_owned(),
            ),
            ("sasl.mechanism".to_owned(), "OAUTHBEARER".to_owned()),
            ("client.id".to_owned(), "strait-wire-test".to_owned()),
        ];
        if l.is_tls() {
            p.push(("ssl.ca.location".to_owned(), ca.clone()));
        }
        p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        p
    };

    // 1. Unsecured JWS.
    let unsecured = connect(base(
        Listener::SaslPlaintext,
        &[(
            "sasl.jaas.config",
            format!(
                "{OAUTH_MODULE} required unsecuredLoginStringClaim_sub=\"alice\" \
                 unsecuredLoginLifetimeSeconds=\"{TOKEN_SECS}\";"
            ),
        )],
    ))
    .await
    .unwrap();
    // Until the third connection (two renewals) rather than for a fixed three lifetimes.
    let connections = keep_working(&unsecured, "unsecured", 3 * TOKEN_SECS, |connections| {
        connections >= 3
    })
    .await;
    assert!(
        connections >= 3,
        "{connections} connections in three token lifetimes"
    );

    // 2. Client credentials from a token endpoint; signed tokens checked against the JWKS.
    let cc = |id: &str, secret: &str| {
        base(
            Listener::SaslSsl,
            &[
                (
                    "sasl.login.callback.handler.class",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
                        .to_owned(),
                ),
                ("sasl.oauthbearer.token.endpoint.url", endpoint.url.clone()),
                (
                    "sasl.jaas.config",
                    format!(
                        "{OAUTH_MODULE} required clientId=\"{id}\" clientSecret=\"{secret}\" \
                         scope=\"kafka\";"
                    ),
                ),
            ],
        )
    };
    let client = connect(cc(CLIENT_ID, CLIENT_SECRET)).await.unwrap();
    // Until the third token, and a session renewed on a new connection, rather than for a
    // fixed two lifetimes and a bit.
    keep_working(
        &client,
        "client credentials",
        2 * TOKEN_SECS + 2,
        |connections| connections >= 2 && endpoint.issued.load(Ordering::SeqCst) >= 3,
    )
    .await;
    let issued = endpoint.issued.load(Ordering::SeqCst);
    println!("token endpoint issued {issued} tokens");
    assert!(issued >= 3, "{issued} tokens in two lifetimes and a bit");

    // 3. A wrong secret: a clear, secret-free error naming the fix.
    let e = match connect(cc(CLIENT_ID, WRONG_SECRET)).await {
        Ok(_) => panic!("connected with a wrong client secret"),
        Err(e) => e.to_string(),
    };
    println!("wrong secret: {e}");
    assert!(e.contains("refused the client (HTTP 401"), "{e}");
    assert!(e.contains("invalid_client"), "{e}");
    assert!(e.contains("clientSecret"), "{e}");
    assert!(!e.contains(WRONG_SECRET), "{e}");
    assert!(endpoint.refused.load(Ordering::SeqCst) >= 1);

    // 4. A validly signed token for another audience: the broker's validator refuses it.
    let e = match connect(cc(OTHER_AUDIENCE_CLIENT, CLIENT_SECRET)).await {
        Ok(_) => panic!("connected with a token for another audience"),
        Err(e) => e.to_string(),
    };
    println!("other audience: {e}");
    assert!(e.contains("SASL OAUTHBEARER authentication"), "{e}");
    assert!(e.contains("rejected the token"), "{e}");
    assert!(e.contains("audience"), "{e}");
}

/// Produces one record and fetches it back every 100 ms until `done(connections used)` holds,
/// for `secs` at most; every request must succeed. Returns how many connections to the broker
/// were used.
async fn keep_working(
    client: &Client,
    what: &str,
    secs: u64,
    done: impl Fn(usize) -> bool,
) -> usize {
    let node = *client
        .metadata(None)
        .await
        .unwrap()
        .brokers
        .keys()
        .next()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let (mut rounds, mut connections) = (0, 0);
    let mut last: Option<strait_wire::Connection> = None;
    while Instant::now() < until {
        let value = format!("{what} {rounds}");
        let r = client
            .produce(
                vec![ProduceBatch::new(
                    tp(TOPIC, 0),
                    build_batch(&[Rec::value(&value)], -1, -1, -1),
                )],
                &ProduceOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: produce {rounds}: {e}"));
        let offset = r[0]
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{what}: produce {rounds}: {e}"))
            .base_offset;
        let got = client
            .fetch(
                &[FetchPartition::new(tp(TOPIC, 0), offset)],
                &FetchOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: fetch {rounds}: {e}"));
        got[0].check(client.principal()).unwrap();
        let read = read_records(&got[0].records);
        assert_eq!(read[0].value.as_deref(), Some(value.as_bytes()));
        rounds += 1;
        let conn = client.broker(node).await.unwrap();
        if !last.as_ref().is_some_and(|l| l.same_as(&conn)) {
            connections += 1;
            last = Some(conn);
        }
        if done(connections) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = Duration::from_secs(secs) - until.saturating_duration_since(Instant::now());
    println!("{what}: {rounds} produce+fetch rounds over {took:?} on {connections} connections");
    connections
}

/// An OAuth 2 token endpoint for the client credentials grant: HTTP Basic client
/// authentication, tokens Kafka's unsecured validator accepts.
struct TokenEndpoint {
    url: String,
    issued: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenEndpoint {
    async fn start(key: Arc<KeyPair>) -> TokenEndpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
        let issued = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (i, r) = (issued.clone(), refused.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let (i, r, key) = (i.clone(), r.clone(), key.clone());
                tokio::spawn(async move {
                    let request = read_request(&mut s).await;
                    let basic =
                        |id: &str| format!("Basic {}", B64.encode(format!("{id}:{CLIENT_SECRET}")));
                    let client = [CLIENT_ID, OTHER_AUDIENCE_CLIENT].into_iter().find(|id| {
                        request.lines().any(|l| {
                            l.split_once(':').is_some_and(|(k, v)| {
                                k.eq_ignore_ascii_case("authorization") && v.trim() == basic(id)
                            })
                        })
                    });
                    let authorized = client.is_some();
                    let form_ok = request.ends_with("grant_type=client_credentials&scope=kafka");
                    let (status, body) = if authorized && form_ok {
                        i.fetch_add(1, Ordering::SeqCst);
                        let audience = if client == Some(CLIENT_ID) {
                            AUDIENCE
                        } else {
                            "not-kafka"
                        };
                        let token =
                            signed_jwt(&key, client.unwrap_or_default(), audience, TOKEN_SECS);
                        (
                            "200 OK",
                            format!(
                                r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":{TOKEN_SECS}}}"#
                            ),
                        )
                    } else {
                        r.fetch_add(1, Ordering::SeqCst);
                        (
                            "401 Unauthorized",
                            r#"{"error":"invalid_client","error_description":"client authentication failed"}"#
                                .to_owned(),
                        )
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        TokenEndpoint {
            url,
            issued,
            refused,
            task,
        }
    }
}

/// Reads one HTTP request (head and a `content-length` body) as text.
async fn read_request(s: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The JWKS file the broker reads at start-up (removed on drop).
struct JwksFile(std::path::PathBuf);

impl JwksFile {
    fn write(key: &KeyPair) -> JwksFile {
        // rcgen's raw P-256 public key is the uncompressed point 0x04 || x || y.
        let point = key.public_key_raw();
        assert_eq!(point.len(), 65, "unexpected public key encoding");
        let (x, y) = point[1..].split_at(32);
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","use":"sig","alg":"ES256","kid":"{KID}","x":"{}","y":"{}"}}]}}"#,
            B64URL.encode(x),
            B64URL.encode(y)
        );
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "strait-wire-oauth-jwks-{}-{nanos}.json",
            std::process::id()
        ));
        std::fs::write(&path, jwks).unwrap();
        JwksFile(path)
    }
}

impl Drop for JwksFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An ES256 JWT for `sub` and `audience`, signed with `key`, valid for `secs`.
fn signed_jwt(key: &KeyPair, sub: &str, audience: &str, secs: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = B64URL.encode(format!(r#"{{"alg":"ES256","typ":"JWT","kid":"{KID}"}}"#));
    let claims = B64URL.encode(format!(
        r#"{{"sub":"{sub}","iss":"{ISSUER}","aud":"{audience}","scope":"kafka","iat":{now},"exp":{}}}"#,
        now + secs
    ));
    let input = format!("{header}.{claims}");
    let der = key.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", B64URL.encode(der_to_jws(&der)))
}

/// An ASN.1 `ECDSA-Sig-Value` (SEQUENCE of two INTEGERs) as JWS's fixed 64-byte `r || s`.
fn der_to_jws(der: &[u8]) -> Vec<u8> {
    assert_eq!(der[0], 0x30);
    let mut i = if der[1] & 0x80 != 0 { 3 } else { 2 };
    let mut out = Vec::with_capacity(64);
    for _ in 0..2 {
        assert_eq!(der[i], 0x02);
        let len = der[i + 1] as usize;
        let int = &der[i + 2..i + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0u8, 32 - int.len()));
        out.extend_from_slice(int);
        i += 2 + len;
    }
    out
}
