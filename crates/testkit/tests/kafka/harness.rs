//! Smoke tests of strait-testkit against real Apache Kafka: each test starts one cluster and checks that it
//! behaves as the testkit promises (listeners, mTLS, ACLs, SASL, failover, the 3.9 line).
//!
//! Run: `cargo test -p strait-testkit --test kafka -- harness:: --nocapture` (prints start-up times).
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use strait_testkit::{
    AdminOp, Cluster, ConsumeOptions, KafkaVersion, Listener, Resource, Validity,
};

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn timed_start(what: &str, builder: strait_testkit::ClusterBuilder) -> Cluster {
    let began = Instant::now();
    let cluster = builder.start().unwrap();
    eprintln!(
        "TIMING {what}: started in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    cluster
}

/// A rustls client config trusting `ca`, presenting `client` (cert, key) if given.
fn tls_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Sends ApiVersions v3 over TLS to `addr` and returns the decoded response, or the I/O / TLS error (as text)
/// that ended the exchange.
fn api_versions_over_tls(
    addr: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<ApiVersionsResponse, String> {
    let mut tcp = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let server = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(config, server).map_err(|e| e.to_string())?;
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);

    let version = 3;
    let header = RequestHeader::default()
        .with_request_api_key(18)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("strait-harness")));
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("strait-harness"))
        .with_client_software_version(StrBytes::from_static_str("0.1.0"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiVersionsRequest::header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    tls.write_all(&frame).map_err(|e| format!("write: {e}"))?;
    tls.flush().map_err(|e| format!("flush: {e}"))?;

    let mut len = [0u8; 4];
    tls.read_exact(&mut len).map_err(|e| format!("read: {e}"))?;
    let len = i32::from_be_bytes(len);
    assert!(
        (0..1 << 20).contains(&len),
        "implausible frame length {len}"
    );
    let mut payload = vec![0u8; len as usize];
    tls.read_exact(&mut payload)
        .map_err(|e| format!("read: {e}"))?;
    let mut buf = Bytes::from(payload);
    // ApiVersions responses always use response header v0: just the correlation id.
    assert_eq!(buf.get_i32(), 7, "correlation id");
    ApiVersionsResponse::decode(&mut buf, version).map_err(|e| format!("decode: {e}"))
}

#[test]
fn single_node_plaintext_round_trip() {
    let cluster = timed_start("single node, 4.x, plaintext", Cluster::builder("plain"));
    assert_eq!(cluster.node_ids(), vec![1]);
    assert_eq!(cluster.default_listener(), Listener::Plaintext);
    let sent = lines("plain", 20);

    // A background consumer (spawn_java, as MirrorMaker runs) waiting before anything is produced.
    let bootstrap = cluster.bootstrap();
    let max = sent.len().to_string();
    let mut background = cluster
        .spawn_java(
            cluster.version().console_consumer_class(),
            &[
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                "roundtrip",
                "--from-beginning",
                "--max-messages",
                &max,
                "--timeout-ms",
                "120000",
            ],
            &[],
        )
        .unwrap();

    // The topic is auto-created (one partition), so the order is kept.
    cluster.console_produce("roundtrip", &sent, None).unwrap();
    let got = cluster
        .console_consume("roundtrip", sent.len(), None)
        .unwrap();
    assert_eq!(got, sent);

    let deadline = Instant::now() + Duration::from_secs(120);
    while background.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = background.exit_status();
    let output = background.output();
    assert!(
        status.is_some_and(|s| s.success()),
        "background consumer: {status:?}\n{output}"
    );
    let printed: Vec<&str> = output.lines().filter(|l| l.starts_with("plain-")).collect();
    assert_eq!(printed, sent.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn mtls_cluster_enforces_certificates_and_acls() {
    let cluster = timed_start(
        "single node, 4.x, mTLS",
        Cluster::builder("europe")
            .mtls()
            .user("my-europe-user", "europe-secret")
            .user("no-acl-user", "nobody-secret"),
    );
    assert_eq!(cluster.default_listener(), Listener::Ssl);
    assert!(cluster.try_listener(Listener::Plaintext).is_none());
    let pki = cluster.pki().unwrap();
    let user = pki.user("my-europe-user").unwrap();
    let addr = cluster.bootstrap();

    // A client certificate from the cluster CA: handshake and a real Kafka response.
    let ok = api_versions_over_tls(
        &addr,
        tls_config(pki.ca_pem(), Some((&user.cert_pem, &user.key_pem))),
    )
    .unwrap();
    assert_eq!(ok.error_code, 0);
    assert!(
        ok.api_keys.iter().any(|k| k.api_key == 0),
        "Produce is among the advertised APIs"
    );

    // No client certificate: the broker refuses (TLS 1.3 reports it on the first read, after the handshake).
    let refused = api_versions_over_tls(&addr, tls_config(pki.ca_pem(), None));
    assert!(
        refused.is_err(),
        "a client without certificate got a response: {refused:?}"
    );
    eprintln!("without a client certificate: {}", refused.unwrap_err());

    // An expired certificate from the right CA is refused.
    let expired = pki.issue("my-europe-user", Validity::Expired).unwrap();
    let refused = api_versions_over_tls(
        &addr,
        tls_config(pki.ca_pem(), Some((&expired.cert_pem, &expired.key_pem))),
    );
    assert!(
        refused.is_err(),
        "an expired certificate got a response: {refused:?}"
    );

    // A certificate from an untrusted CA (CN=admin, the super user's name) is refused too.
    let foreign = &pki.foreign_ca().user;
    let refused = api_versions_over_tls(
        &addr,
        tls_config(pki.ca_pem(), Some((&foreign.cert_pem, &foreign.key_pem))),
    );
    assert!(
        refused.is_err(),
        "a foreign-CA certificate got a response: {refused:?}"
    );

    cluster
        .admin(&[
            AdminOp::topic("my-topic", 1, 1),
            AdminOp::allow(
                "User:my-europe-user",
                Resource::Topic("my-topic".into()),
                &["Read", "Write", "Create", "Describe"],
            ),
            AdminOp::allow(
                "User:my-europe-user",
                Resource::Group("my-group".into()),
                &["Read"],
            ),
        ])
        .unwrap();

    let sent = lines("europe", 10);
    cluster
        .console_produce("my-topic", &sent, Some("my-europe-user"))
        .unwrap();
    let props = cluster.client_properties(Listener::Ssl, Some("my-europe-user"));
    let got = cluster
        .console_consume_with(
            "my-topic",
            sent.len(),
            &props,
            &ConsumeOptions::default().group("my-group"),
        )
        .unwrap();
    assert_eq!(got, sent);

    let denied = cluster
        .console_produce("my-topic", &lines("intruder", 1), Some("no-acl-user"))
        .unwrap_err()
        .to_string();
    eprintln!("no-acl-user's producer: {denied}");
    assert!(
        denied.contains("TopicAuthorizationException")
            || denied.contains("TOPIC_AUTHORIZATION_FAILED"),
        "expected an authorization error, got: {denied}"
    );
}

#[test]
fn three_nodes_survive_one_stopped_node() {
    let mut cluster = timed_start("3 nodes, 4.x, plaintext", Cluster::builder("trio").nodes(3));
    assert_eq!(cluster.node_ids(), vec![1, 2, 3]);
    assert_eq!(cluster.bootstrap().split(',').count(), 3);
    cluster.create_topic("replicated", 1, 3, &[]).unwrap();

    let before = lines("before", 10);
    cluster
        .console_produce("replicated", &before, None)
        .unwrap();

    let began = Instant::now();
    cluster.stop_node(2).unwrap();
    eprintln!(
        "TIMING stop_node(2): {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(!cluster.is_running(2).unwrap());
    // acks=all with min.insync.replicas=2: two live replicas are enough.
    let during = lines("during", 10);
    cluster
        .console_produce("replicated", &during, None)
        .unwrap();

    let began = Instant::now();
    cluster.start_node(2).unwrap();
    eprintln!(
        "TIMING start_node(2): ready in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    // Rejoined: the restarted replica caught up and is back in the ISR.
    cluster
        .admin(&[AdminOp::wait_isr("replicated", 3)])
        .unwrap();

    let all: Vec<String> = before.iter().chain(&during).cloned().collect();
    let got = cluster
        .console_consume("replicated", all.len(), None)
        .unwrap();
    assert_eq!(got, all);
}

#[test]
fn kafka_3_9_round_trip() {
    // mTLS + SASL on 3.9 too: MirrorMaker 1 comparisons run against 3.9 clusters with the same security setup.
    let cluster = timed_start(
        "single node, 3.9, mTLS + SASL",
        Cluster::builder("legacy")
            .version(KafkaVersion::V3_9)
            .mtls()
            .sasl()
            .user("legacy-user", "legacy-secret"),
    );
    assert_eq!(cluster.version(), KafkaVersion::V3_9);
    cluster
        .admin(&[
            AdminOp::topic("legacy", 1, 1),
            AdminOp::allow(
                "User:legacy-user",
                Resource::Topic("legacy".into()),
                &["Write", "Describe"],
            ),
        ])
        .unwrap();
    let mut props = cluster.client_properties(Listener::SaslSsl, Some("legacy-user"));
    for (k, v) in &mut props {
        if k == "sasl.mechanism" {
            *v = "SCRAM-SHA-256".to_string();
        }
    }
    let sent = vec!["from 3.9".to_string()];
    cluster
        .console_produce_with("legacy", &sent, &props)
        .unwrap();
    // Read back as admin over mTLS.
    assert_eq!(cluster.console_consume("legacy", 1, None).unwrap(), sent);
}

#[test]
fn sasl_scram_authenticates() {
    let cluster = timed_start(
        "single node, 4.x, mTLS + SASL",
        Cluster::builder("sasl")
            .mtls()
            .sasl()
            .user("alice", "alice-secret"),
    );
    assert_eq!(
        cluster.listeners(),
        &[Listener::Ssl, Listener::SaslPlaintext, Listener::SaslSsl]
    );
    cluster
        .admin(&[
            AdminOp::topic("sasl-topic", 1, 1),
            AdminOp::allow(
                "User:alice",
                Resource::Topic("sasl-topic".into()),
                &["Write", "Describe"],
            ),
        ])
        .unwrap();

    let props = cluster.client_properties(Listener::SaslPlaintext, Some("alice"));
    assert!(props.contains(&("sasl.mechanism".into(), "SCRAM-SHA-512".into())));
    cluster
        .console_produce_with("sasl-topic", &lines("plain", 1), &props)
        .unwrap();
    let tls_props = cluster.client_properties(Listener::SaslSsl, Some("alice"));
    cluster
        .console_produce_with("sasl-topic", &lines("tls", 1), &tls_props)
        .unwrap();

    let wrong: Vec<(String, String)> = props
        .iter()
        .map(|(k, v)| match k.as_str() {
            "sasl.password" => (k.clone(), "not-the-password".to_string()),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let failed = cluster
        .console_produce_with("sasl-topic", &lines("wrong", 1), &wrong)
        .unwrap_err()
        .to_string();
    eprintln!("wrong password: {failed}");
    assert!(
        failed.contains("SaslAuthenticationException") || failed.contains("Authentication failed"),
        "expected an authentication error, got: {failed}"
    );

    // Both good writes landed (read back as admin over mTLS).
    let got = cluster.console_consume("sasl-topic", 2, None).unwrap();
    assert_eq!(got, vec!["plain-0".to_string(), "tls-0".to_string()]);
}
