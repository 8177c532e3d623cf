//! The `WAN` listener of [`ClusterBuilder::wan`](strait_testkit::ClusterBuilder::wan) against real Kafka: a client
//! bootstrapped through the delay proxies is told the proxies' addresses in Metadata, so its traffic to every
//! broker crosses the simulated link, while replication and the Java tools keep the direct listeners.
//!
//! Run: `cargo test -p strait-testkit --test kafka -- wan_listener:: --nocapture`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use strait_testkit::{AdminOp, Cluster, ConsumeOptions, Link};

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Produces through the WAN bootstrap (round-robin over the partitions, so every leader gets records), reads
/// back over the direct listener, and returns what each node's proxy carried.
fn produce_through_the_proxies(cluster: &Cluster, topic: &str, n: usize) -> Vec<(i32, u64, u64)> {
    let mut props = cluster.wan_client_properties(None);
    props.push((
        "partitioner.class".into(),
        "org.apache.kafka.clients.producer.RoundRobinPartitioner".into(),
    ));
    props.push(("linger.ms".into(), "0".into()));
    let sent = lines(topic, n);
    cluster.console_produce_with(topic, &sent, &props).unwrap();
    let direct = cluster.client_properties(cluster.default_listener(), None);
    let mut got = cluster
        .console_consume_with(
            topic,
            n,
            &direct,
            &ConsumeOptions::default().timeout(Duration::from_secs(30)),
        )
        .unwrap();
    got.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(
        got, want,
        "every record written through the proxies reads back directly"
    );
    cluster
        .node_ids()
        .into_iter()
        .map(|id| {
            let s = cluster.wan_proxy(id).expect("a proxy per node").stats();
            (id, s.connections, s.bytes_up)
        })
        .collect()
}

#[test]
fn three_nodes_advertise_one_proxy_each() {
    let cluster = Cluster::builder("wan3")
        .nodes(3)
        .wan(Link::delay(Duration::from_millis(5)))
        .start()
        .unwrap();
    let wan = cluster.wan_bootstrap().expect("a WAN bootstrap");
    assert_eq!(wan.split(',').count(), 3);
    assert!(
        cluster
            .bootstrap()
            .split(',')
            .all(|direct| !wan.contains(direct)),
        "the WAN bootstrap ({wan}) is not the direct one ({})",
        cluster.bootstrap()
    );
    // Replication factor 3 works: the nodes replicate over the direct listener.
    cluster
        .admin(&[AdminOp::topic("w", 3, 3), AdminOp::wait_isr("w", 3)])
        .unwrap();
    let traffic = produce_through_the_proxies(&cluster, "w", 60);
    eprintln!("per node (id, connections, bytes up): {traffic:?}");
    // KRaft's replica placer gives the 3 partitions 3 distinct leaders on 3 nodes: the producer reached every
    // one of them through that node's proxy, never directly.
    assert!(
        traffic.iter().all(|(_, c, b)| *c > 0 && *b > 0),
        "every node's proxy carried produce traffic: {traffic:?}"
    );
}

#[test]
fn mtls_is_spoken_through_the_proxy() {
    let cluster = Cluster::builder("wantls")
        .mtls()
        .wan(Link::delay(Duration::from_millis(5)))
        .start()
        .unwrap();
    cluster.create_topic("t", 2, 1, &[]).unwrap();
    let traffic = produce_through_the_proxies(&cluster, "t", 20);
    assert!(
        traffic[0].1 > 0 && traffic[0].2 > 0,
        "the proxy carried the TLS connection: {traffic:?}"
    );
}
