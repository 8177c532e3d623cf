//! SASL sessions that the broker limits (KIP-368, `connections.max.reauth.ms`), against a real
//! Kafka 4.x broker: the broker closes a connection at the first request after its session
//! ended, so the client must renew the session before that. strait-wire renews it on a new,
//! freshly authenticated connection (requests already sent finish on the old one).
//!
//! For several session lifetimes, every request on the client's connection to the broker
//! succeeds; none meets a closed connection.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_reauth:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{Cluster, Listener};
use strait_wire::kafka_protocol::messages::MetadataRequest;

/// The broker's session lifetime for SASL connections.
const REAUTH_MS: u64 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_sessions_are_renewed_before_the_broker_ends_them() {
    let cluster = blocking(|| {
        Cluster::builder("wire-reauth")
            .sasl()
            .user("alice", "alice-secret")
            .broker_config("connections.max.reauth.ms", &REAUTH_MS.to_string())
            .start()
            .unwrap()
    })
    .await;
    let client = connect(props(&cluster, Listener::SaslPlaintext, Some("alice")))
        .await
        .unwrap();
    let node = *client
        .metadata(None)
        .await
        .unwrap()
        .brokers
        .keys()
        .next()
        .unwrap();
    let until = Instant::now() + Duration::from_millis(4 * REAUTH_MS);
    let mut requests = 0;
    let mut connections = 0;
    let mut last: Option<strait_wire::Connection> = None;
    while Instant::now() < until {
        let conn = client.broker(node).await.unwrap();
        let version = conn.pick_version::<MetadataRequest>(1..=12).unwrap();
        conn.send(MetadataRequest::default(), version)
            .await
            .unwrap_or_else(|e| panic!("request {requests} on connection {connections}: {e}"));
        requests += 1;
        if !last.as_ref().is_some_and(|l| l.same_as(&conn)) {
            connections += 1;
            last = Some(conn);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{requests} requests over {} ms on {connections} connections",
        4 * REAUTH_MS
    );
    // Renewed at 85-95 % of each lifetime: at least three new connections in four lifetimes.
    assert!(connections >= 4, "{connections} connections");
}
