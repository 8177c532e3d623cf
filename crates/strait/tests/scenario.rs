//! The reference scenario end to end, with single-broker clusters: `europe` -> `us` over mTLS
//! with per-user certificates and the walkthrough's ACLs, `my-topic` with 12 partitions, a
//! traced producer writing "Hello world - N", `strait run` mirroring `.*` with tracing in
//! `records` mode, and a traced consumer in group `my-group` on `us`. Asserts that every record
//! arrives in order per partition and that one trace links producer -> mirror -> consumer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use strait_demo::consume::{self, ConsumeArgs};
use strait_demo::produce::{self, ProduceArgs};
use strait_demo::telemetry::Telemetry;
use strait_otlp_sink::{Sink, SpanKind};
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::{Client, ClientConfig};

const RECORDS: u64 = 36;

fn walkthrough_cluster(name: &str, user: &str) -> Cluster {
    let cluster = Cluster::builder(name)
        .mtls()
        .user(user, "secret")
        .start()
        .unwrap();
    let principal = format!("User:{user}");
    let mut ops = vec![
        AdminOp::allow(
            &principal,
            Resource::Topic("my-topic".into()),
            &["Read", "Describe", "Write", "Create"],
        ),
        AdminOp::allow(&principal, Resource::Group("my-group".into()), &["Read"]),
    ];
    if name.starts_with("europe") {
        ops.insert(0, AdminOp::topic("my-topic", 12, 1));
    }
    cluster.admin(&ops).unwrap();
    cluster
}

fn toml_section(cluster: &Cluster, alias: &str, user: &str) -> String {
    let mut s = format!("alias = \"{alias}\"\n");
    for (k, v) in cluster.client_properties(Listener::Ssl, Some(user)) {
        s.push_str(&format!("\"{k}\" = \"{v}\"\n"));
    }
    s
}

async fn user_client(cluster: &Cluster, user: &str) -> Client {
    let props = cluster.client_properties(Listener::Ssl, Some(user));
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_scenario_mirrors_everything_and_links_the_traces() {
    let (europe, us) = tokio::task::spawn_blocking(|| {
        let e = std::thread::spawn(|| walkthrough_cluster("europe", "my-europe-user"));
        let u = walkthrough_cluster("us", "my-us-user");
        (e.join().unwrap(), u)
    })
    .await
    .unwrap();
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\".*\"]\ngroup_id = \"my-group\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\n\n[metrics]\nlisten = \"\"\n\n[tracing]\notlp_endpoint = \"{}\"\nmode = \"records\"\n\
             records_per_second = 1000\nservice_name = \"my-mirror-maker\"\n",
            toml_section(&europe, "europe", "my-europe-user"),
            toml_section(&us, "us", "my-us-user"),
            sink.endpoint()
        ),
    )
    .unwrap();
    let (mut mirror, log) = spawn_strait(&config, 0);

    let producer_client = user_client(&europe, "my-europe-user").await;
    let producer_tel = Telemetry::init(Some(&sink.endpoint()), "hello-world-producer").unwrap();
    let sent = produce::run(
        &producer_client,
        &producer_tel,
        &ProduceArgs {
            topic: "my-topic".into(),
            rate: 30.0,
            count: RECORDS,
        },
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(sent, RECORDS);

    let consumer_client = user_client(&us, "my-us-user").await;
    let consumer_tel = Telemetry::init(Some(&sink.endpoint()), "hello-world-consumer").unwrap();
    let received = consume::run(
        &consumer_client,
        &consumer_tel,
        &ConsumeArgs {
            topic: "my-topic".into(),
            group: "my-group".into(),
            count: RECORDS,
        },
        tokio::time::sleep(Duration::from_secs(120)),
    )
    .await
    .unwrap();
    assert_eq!(
        received, RECORDS,
        "the consumer on us got {received} of {RECORDS} records"
    );
    producer_tel.shutdown().await;
    consumer_tel.shutdown().await;

    // Every record, in order per partition.
    let src = read_all(&producer_client, "my-topic", 12).await;
    let dst = read_all(&consumer_client, "my-topic", 12).await;
    for p in 0..12 {
        assert_complete_in_order(&src[&p], &dst[&p], &format!("my-topic-{p}"));
    }

    // One trace per record: producer -> mirror (parented on the producer's span) and
    // producer -> consumer (the record's traceparent is forwarded unchanged).
    let spans = sink
        .wait_for(
            |s| {
                s.iter()
                    .filter(|x| x.service_name == "my-mirror-maker")
                    .count() as u64
                    >= RECORDS
            },
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let producers: HashMap<_, _> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Producer)
        .map(|s| (s.span_id, s))
        .collect();
    assert_eq!(producers.len() as u64, RECORDS, "producer spans");
    for service in ["my-mirror-maker", "hello-world-consumer"] {
        let children: Vec<_> = spans.iter().filter(|s| s.service_name == service).collect();
        assert_eq!(children.len() as u64, RECORDS, "{service} spans");
        for c in children {
            assert_eq!(c.kind, SpanKind::Consumer, "{service} span kind");
            let parent = c
                .parent_span_id
                .and_then(|id| producers.get(&id))
                .unwrap_or_else(|| {
                    panic!(
                        "{service} span {} is not parented on a producer span",
                        c.name
                    )
                });
            assert_eq!(
                parent.trace_id, c.trace_id,
                "{service} span in another trace"
            );
            assert!(c.end >= c.start, "{service} span ends before it starts");
        }
    }
    let status = terminate(&mut mirror);
    assert!(
        status.success(),
        "strait exited with {status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
