//! strait-wire against one real Kafka 4.x broker with mTLS, SASL and ACLs (one cluster for the
//! file; listeners SSL with required client certificates, SASL_PLAINTEXT and SASL_SSL):
//! round trips over mTLS, SCRAM-SHA-512 (plaintext and TLS), SCRAM-SHA-256 and PLAIN, Java-style
//! PEM store properties, and one distinct, fix-naming error each for a wrong CA, an expired client
//! certificate, a missing client certificate, a certificate from a foreign CA, a wrong password,
//! SASL against the mTLS listener and missing ACLs.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_security:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener, Resource, Validity};
use strait_wire::{
    Client, Error, FetchOptions, FetchPartition, ProduceBatch, ProduceOptions, ResponseError,
    TlsFailure,
};

const TOPIC: &str = "secure";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_broker() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-secure")
            .mtls()
            .sasl()
            .user("alice", "alice-secret")
            .user("bob", "bob-secret")
            .user("carol", "carol-secret")
            .start()
            .unwrap();
        c.admin(&[
            AdminOp::topic(TOPIC, 1, 1),
            AdminOp::allow(
                "User:alice",
                Resource::Topic(TOPIC.into()),
                &["Read", "Write", "Describe"],
            ),
            AdminOp::allow("User:bob", Resource::Topic(TOPIC.into()), &["Describe"]),
        ])
        .unwrap();
        Arc::new(c)
    })
    .await;

    round_trips(&cluster).await;
    java_style_properties(&cluster).await;
    wrong_ca(&cluster).await;
    expired_client_certificate(&cluster).await;
    missing_client_certificate(&cluster).await;
    foreign_client_certificate(&cluster).await;
    wrong_password(&cluster).await;
    sasl_against_the_mtls_listener(&cluster).await;
    missing_acls(&cluster).await;
}

fn set(props: &mut Vec<(String, String)>, key: &str, value: &str) {
    props.retain(|(k, _)| k != key);
    props.push((key.into(), value.into()));
}

fn unset(props: &mut Vec<(String, String)>, key: &str) {
    props.retain(|(k, _)| k != key);
}

/// Produces one record as the client's user and reads it back.
async fn produce_and_fetch(client: &Client, value: &str) {
    let r = client
        .produce(
            vec![ProduceBatch::new(
                tp(TOPIC, 0),
                build_batch(&[Rec::value(value)], -1, -1, -1),
            )],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    let base = r[0]
        .outcome
        .as_ref()
        .unwrap_or_else(|e| panic!("{value}: {e}"))
        .base_offset;
    let got = client
        .fetch(
            &[FetchPartition::new(tp(TOPIC, 0), base)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    got[0].check(client.principal()).unwrap();
    let read = read_records(&got[0].records);
    assert_eq!(read[0].value.as_deref(), Some(value.as_bytes()));
}

async fn round_trips(cluster: &Cluster) {
    let mtls = connect(props(cluster, Listener::Ssl, Some("alice")))
        .await
        .unwrap();
    assert_eq!(mtls.principal(), Some("CN=alice"));
    produce_and_fetch(&mtls, "over mTLS").await;

    let scram_plain = connect(props(cluster, Listener::SaslPlaintext, Some("alice")))
        .await
        .unwrap();
    assert_eq!(scram_plain.principal(), Some("User:alice"));
    produce_and_fetch(&scram_plain, "SCRAM-SHA-512 over SASL_PLAINTEXT").await;

    let scram_tls = connect(props(cluster, Listener::SaslSsl, Some("alice")))
        .await
        .unwrap();
    produce_and_fetch(&scram_tls, "SCRAM-SHA-512 over SASL_SSL").await;

    let mut p = props(cluster, Listener::SaslSsl, Some("alice"));
    set(&mut p, "sasl.mechanism", "SCRAM-SHA-256");
    produce_and_fetch(&connect(p).await.unwrap(), "SCRAM-SHA-256 over SASL_SSL").await;

    let mut p = props(cluster, Listener::SaslSsl, Some("alice"));
    unset(&mut p, "sasl.mechanism");
    set(&mut p, "sasl.mechanisms", "PLAIN"); // librdkafka's spelling
    produce_and_fetch(&connect(p).await.unwrap(), "PLAIN over SASL_SSL").await;

    let mut p = props(cluster, Listener::SaslPlaintext, Some("alice"));
    set(&mut p, "sasl.mechanism", "PLAIN");
    produce_and_fetch(&connect(p).await.unwrap(), "PLAIN over SASL_PLAINTEXT").await;

    // Host name verification off (insecure, logged) still verifies the chain and works.
    let mut p = props(cluster, Listener::Ssl, Some("alice"));
    set(&mut p, "ssl.endpoint.identification.algorithm", "");
    produce_and_fetch(
        &connect(p).await.unwrap(),
        "mTLS without host name verification",
    )
    .await;
}

async fn java_style_properties(cluster: &Cluster) {
    let pki = cluster.pki().unwrap();
    let alice = pki.user("alice").unwrap();
    let p = vec![
        (
            "bootstrap.servers".to_string(),
            cluster.listener(Listener::Ssl),
        ),
        ("security.protocol".to_string(), "SSL".to_string()),
        (
            "ssl.truststore.location".to_string(),
            pki.ca_pem().display().to_string(),
        ),
        ("ssl.truststore.type".to_string(), "PEM".to_string()),
        (
            "ssl.keystore.location".to_string(),
            alice.keystore_pem.display().to_string(),
        ),
        ("ssl.keystore.type".to_string(), "PEM".to_string()),
    ];
    produce_and_fetch(&connect(p).await.unwrap(), "Java PEM stores").await;

    let p = vec![
        ("bootstrap.servers".to_string(), cluster.listener(Listener::SaslSsl)),
        ("security.protocol".to_string(), "SASL_SSL".to_string()),
        ("ssl.truststore.location".to_string(), pki.ca_pem().display().to_string()),
        ("ssl.truststore.type".to_string(), "PEM".to_string()),
        ("sasl.mechanism".to_string(), "SCRAM-SHA-512".to_string()),
        (
            "sasl.jaas.config".to_string(),
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"alice-secret\";".to_string(),
        ),
    ];
    produce_and_fetch(&connect(p).await.unwrap(), "sasl.jaas.config").await;
}

fn expect_tls(r: strait_wire::Result<Client>, want: TlsFailure, fix: &str) {
    match r {
        Err(e @ Error::Tls { reason, .. }) if reason == want => {
            let msg = e.to_string();
            assert!(
                msg.contains(fix),
                "the message should name the fix `{fix}`: {msg}"
            );
            eprintln!("as expected: {msg}");
        }
        Err(other) => panic!("expected Error::Tls {{ reason: {want:?} }}, got {other:?}: {other}"),
        Ok(_) => panic!("expected Error::Tls {{ reason: {want:?} }}, but the connection worked"),
    }
}

async fn wrong_ca(cluster: &Cluster) {
    let foreign = cluster.pki().unwrap().foreign_ca();
    let mut p = props(cluster, Listener::Ssl, Some("alice"));
    set(
        &mut p,
        "ssl.ca.location",
        &foreign.ca_pem.display().to_string(),
    );
    expect_tls(
        connect(p).await,
        TlsFailure::UntrustedBrokerCertificate,
        "ssl.ca.location",
    );

    let mut p = props(cluster, Listener::SaslSsl, Some("alice"));
    set(
        &mut p,
        "ssl.ca.location",
        &foreign.ca_pem.display().to_string(),
    );
    expect_tls(
        connect(p).await,
        TlsFailure::UntrustedBrokerCertificate,
        "ssl.ca.location",
    );
}

async fn expired_client_certificate(cluster: &Cluster) {
    let expired = cluster
        .pki()
        .unwrap()
        .issue("alice", Validity::Expired)
        .unwrap();
    let mut p = props(cluster, Listener::Ssl, Some("alice"));
    set(
        &mut p,
        "ssl.certificate.location",
        &expired.cert_pem.display().to_string(),
    );
    set(
        &mut p,
        "ssl.key.location",
        &expired.key_pem.display().to_string(),
    );
    expect_tls(
        connect(p).await,
        TlsFailure::ClientCertificateExpired,
        "renew",
    );
}

async fn missing_client_certificate(cluster: &Cluster) {
    let mut p = props(cluster, Listener::Ssl, Some("alice"));
    unset(&mut p, "ssl.certificate.location");
    unset(&mut p, "ssl.key.location");
    expect_tls(
        connect(p).await,
        TlsFailure::ClientCertificateRequired,
        "ssl.certificate.location",
    );
}

async fn foreign_client_certificate(cluster: &Cluster) {
    let foreign = cluster.pki().unwrap().foreign_ca();
    let mut p = props(cluster, Listener::Ssl, Some("alice"));
    set(
        &mut p,
        "ssl.certificate.location",
        &foreign.user.cert_pem.display().to_string(),
    );
    set(
        &mut p,
        "ssl.key.location",
        &foreign.user.key_pem.display().to_string(),
    );
    expect_tls(
        connect(p).await,
        TlsFailure::ClientCertificateRejected,
        "signed by a CA the broker trusts",
    );
}

async fn wrong_password(cluster: &Cluster) {
    for (listener, mechanism) in [
        (Listener::SaslSsl, "SCRAM-SHA-512"),
        (Listener::SaslPlaintext, "SCRAM-SHA-256"),
        (Listener::SaslPlaintext, "PLAIN"),
    ] {
        let mut p = props(cluster, listener, Some("alice"));
        set(&mut p, "sasl.mechanism", mechanism);
        set(&mut p, "sasl.password", "not-the-password");
        match connect(p).await {
            Err(e @ Error::Authentication { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("sasl.password") && msg.contains(mechanism),
                    "{msg}"
                );
                eprintln!("as expected: {msg}");
            }
            Err(other) => panic!("{mechanism}: expected Error::Authentication, got {other:?}"),
            Ok(_) => panic!("{mechanism}: a wrong password was accepted"),
        }
    }
}

async fn sasl_against_the_mtls_listener(cluster: &Cluster) {
    // SASL on the mTLS listener: the broker does not offer SASL there.
    let mut p = props(cluster, Listener::SaslPlaintext, Some("alice"));
    set(
        &mut p,
        "bootstrap.servers",
        &cluster.listener(Listener::Ssl),
    );
    set(&mut p, "security.protocol", "SASL_SSL");
    set(
        &mut p,
        "ssl.ca.location",
        &cluster.pki().unwrap().ca_pem().display().to_string(),
    );
    let e = connect(p)
        .await
        .expect_err("SASL against an mTLS-only listener must fail");
    eprintln!("SASL_SSL against the SSL listener: {e}");
    assert!(
        matches!(
            e,
            Error::Tls {
                reason: TlsFailure::ClientCertificateRequired,
                ..
            } | Error::Authentication { .. }
        ),
        "{e:?}"
    );
}

async fn missing_acls(cluster: &Cluster) {
    // bob may Describe the topic but not Write or Read it.
    for (listener, principal) in [
        (Listener::SaslPlaintext, "User:bob"),
        (Listener::Ssl, "CN=bob"),
    ] {
        let bob = connect(props(cluster, listener, Some("bob")))
            .await
            .unwrap();
        let r = bob
            .produce(
                vec![ProduceBatch::new(
                    tp(TOPIC, 0),
                    build_batch(&[Rec::value("denied")], -1, -1, -1),
                )],
                &ProduceOptions::default(),
            )
            .await
            .unwrap();
        match r[0].outcome.as_ref().unwrap_err() {
            e @ Error::Authorization {
                code,
                principal: p,
                operation,
                resource,
            } => {
                assert_eq!(*code, ResponseError::TopicAuthorizationFailed);
                assert_eq!(p.as_deref(), Some(principal));
                assert_eq!(operation, "Write");
                assert_eq!(resource, "Topic:secure");
                assert!(e.to_string().contains("kafka-acls.sh"), "{e}");
                eprintln!("as expected: {e}");
            }
            other => panic!("expected Error::Authorization, got {other:?}"),
        }
        let got = bob
            .fetch(
                &[FetchPartition::new(tp(TOPIC, 0), 0)],
                &FetchOptions::default(),
            )
            .await
            .unwrap();
        match got[0].check(bob.principal()) {
            Err(Error::Authorization { operation, .. }) => assert_eq!(operation, "Read"),
            other => panic!("expected Error::Authorization, got {other:?}"),
        }
    }

    // carol has no ACL at all: the topic is invisible in metadata (Describe).
    let carol = connect(props(cluster, Listener::SaslSsl, Some("carol")))
        .await
        .unwrap();
    let e = carol
        .fetch(
            &[FetchPartition::new(tp(TOPIC, 0), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap_err();
    match &e {
        Error::Authorization {
            principal,
            operation,
            resource,
            ..
        } => {
            assert_eq!(principal.as_deref(), Some("User:carol"));
            assert_eq!(operation, "Describe");
            assert_eq!(resource, "Topic:secure");
            eprintln!("as expected: {e}");
        }
        other => panic!("expected Error::Authorization, got {other:?}"),
    }
    // InitProducerId needs IdempotentWrite on the cluster or Write on some topic.
    match carol.init_producer_id().await {
        Err(Error::Authorization {
            operation,
            resource,
            ..
        }) => {
            assert_eq!(operation, "IdempotentWrite");
            assert_eq!(resource, "Cluster:kafka-cluster");
        }
        other => panic!("expected Error::Authorization, got {other:?}"),
    }
}
