//! strait-wire against a real Kafka broker reached through a proxy that stops reading mid-stream
//! (the testkit's WAN proxy, advertised by the broker, so every connection of the client crosses
//! it): the requests stuck behind it fail within `request.timeout.ms` with
//! [`Error::WriteStalled`], the connection is closed, and once the proxy reads again the client
//! reconnects and produces.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_stalled_broker:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kafka_protocol::messages::MetadataRequest;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::protocol::StrBytes;
use strait_testkit::{AdminOp, Cluster, Link};
use strait_wire::{Error, ProduceBatch, ProduceOptions};
use tokio::task::JoinSet;

const TOPIC: &str = "stalled";

/// A Metadata request of about 1 MiB (topic names as filler; the broker never sees it whole).
fn big_metadata_request() -> MetadataRequest {
    let topic = |i: usize| {
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(format!("{i:0>200}")))))
    };
    MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some((0..4800).map(topic).collect()))
}

async fn produce_one(client: &strait_wire::Client, value: &str) -> strait_wire::Result<i64> {
    let batch = build_batch(&[Rec::value(value)], -1, -1, -1);
    let r = client
        .produce(
            vec![ProduceBatch::new(tp(TOPIC, 0), batch)],
            &ProduceOptions::default(),
        )
        .await?;
    let outcome = r[0].outcome.clone()?;
    Ok(outcome.base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_stops_reading() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-stall")
            .wan(Link::delay(Duration::ZERO))
            .start()
            .unwrap();
        c.admin(&[AdminOp::topic(TOPIC, 1, 1)]).unwrap();
        Arc::new(c)
    })
    .await;
    let mut props = cluster.wan_client_properties(None);
    props.push(("request.timeout.ms".into(), "2000".into()));
    let client = connect(props).await.unwrap();
    let proxy = cluster.wan_proxy(1).unwrap();
    let proxy_addr = proxy.addr().to_string();

    let first = produce_one(&client, "before").await.unwrap();
    let conn = client.broker(1).await.unwrap();
    assert_eq!(
        conn.broker(),
        proxy_addr,
        "the client goes through the proxy"
    );

    proxy.stop_reading(true);
    // Far more than the socket buffers between the client and the proxy hold, each request
    // allowed 10 minutes: only the bound on writes ends them. (60 s bounds the test on a loaded
    // machine; nothing asserts how fast.)
    let req = big_metadata_request();
    let mut calls = JoinSet::new();
    for _ in 0..24 {
        let (conn, req) = (conn.clone(), req.clone());
        calls.spawn(async move {
            conn.send_with_timeout(req, 12, Duration::from_secs(600))
                .await
        });
    }
    let results = tokio::time::timeout(Duration::from_secs(60), calls.join_all())
        .await
        .expect("requests still waiting 60 s after the proxy stopped reading");
    for r in results {
        match r {
            Err(Error::WriteStalled { broker, after }) => {
                assert_eq!(broker, proxy_addr);
                assert_eq!(after, Duration::from_millis(2000));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(conn.is_closed());

    proxy.stop_reading(false);
    // The client reconnects (a new connection through the proxy) and produces again.
    let connections = proxy.stats().connections;
    let second = produce_one(&client, "after").await.unwrap();
    assert!(second > first, "{second} after {first}");
    assert!(proxy.stats().connections > connections, "a new connection");
    let fresh = client.broker(1).await.unwrap();
    assert!(!fresh.is_closed() && !fresh.same_as(&conn));
}
