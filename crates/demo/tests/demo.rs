//! The demo clients against a real mTLS Kafka cluster (strait-testkit), with their spans sent to
//! the loopback OTLP receiver: the consumer's span of each record must be a child of the
//! producer's span of the same record, in the same trace.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use strait_otlp_sink::{Sink, SpanKind};
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::offset_commit::GroupOffsets;
use strait_wire::{Client, ClientConfig, TopicPartition};

const RECORDS: u64 = 6;

async fn demo(args: &[&str]) -> (String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_strait-demo"))
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .expect("strait-demo did not finish within 180 s")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "strait-demo {args:?} failed: {stderr}\n{stdout}"
    );
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_over_mtls_with_one_trace_per_record() {
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = Cluster::builder("demo-test")
            .mtls()
            .user("alice", "alice-secret")
            .start()
            .unwrap();
        cluster
            .admin(&[
                AdminOp::topic("my-topic", 3, 1),
                AdminOp::allow(
                    "User:alice",
                    Resource::Topic("my-topic".into()),
                    &["Read", "Write", "Describe"],
                ),
                AdminOp::allow("User:alice", Resource::Group("my-group".into()), &["Read"]),
            ])
            .unwrap();
        cluster
    })
    .await
    .unwrap();
    let props = cluster.client_properties(Listener::Ssl, Some("alice"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alice.properties");
    let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let endpoint = sink.endpoint();
    let count = RECORDS.to_string();

    let (out, err) = demo(&[
        "produce",
        "--props",
        file,
        "--topic",
        "my-topic",
        "--rate",
        "20",
        "--count",
        &count,
        "--otlp-endpoint",
        &endpoint,
    ])
    .await;
    let sent: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Sending messages"))
        .collect();
    assert_eq!(sent.len() as u64, RECORDS, "{out}\n{err}");
    assert!(sent[0].starts_with("Sending messages \"Hello world - 1\" -> partition 0 offset 0"));

    let (out, err) = demo(&[
        "consume",
        "--props",
        file,
        "--topic",
        "my-topic",
        "--group",
        "my-group",
        "--count",
        &count,
        "--otlp-endpoint",
        &endpoint,
    ])
    .await;
    let values: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.split_once(" value: ").map(|(_, v)| v.to_string()))
        .collect();
    let expected: BTreeSet<String> = (1..=RECORDS)
        .map(|n| format!("Hello world - {n}"))
        .collect();
    assert_eq!(values, expected, "{out}\n{err}");
    assert!(
        out.lines()
            .any(|l| l == "partition: 0 offset: 0 value: Hello world - 1"),
        "{out}"
    );

    // The consumer committed where it stopped: two records per partition.
    let mut cfg =
        ClientConfig::from_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
    cfg = cfg.with_client_id("demo-test");
    let client = Client::connect(cfg).await.unwrap();
    let partitions: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new("my-topic", p).unwrap())
        .collect();
    let committed = GroupOffsets::new(&client, "my-group")
        .fetch(&partitions)
        .await
        .unwrap();
    for tp in &partitions {
        assert_eq!(committed[tp].as_ref().map(|c| c.offset), Some(2), "{tp}");
    }

    let spans = sink
        .wait_for(|s| s.len() as u64 >= 2 * RECORDS, Duration::from_secs(30))
        .await
        .unwrap();
    let producers: HashMap<_, _> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Producer)
        .map(|s| (s.span_id, s))
        .collect();
    assert_eq!(producers.len() as u64, RECORDS);
    let consumers: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Consumer)
        .collect();
    assert_eq!(consumers.len() as u64, RECORDS);
    for c in consumers {
        assert_eq!(c.name, "process my-topic");
        assert_eq!(c.service_name, "hello-world-consumer");
        let p = producers[&c.parent_span_id.unwrap()];
        assert_eq!(p.trace_id, c.trace_id);
        assert_eq!(p.name, "send my-topic");
        assert_eq!(p.service_name, "hello-world-producer");
        assert_eq!(
            p.attr("messaging.kafka.offset"),
            c.attr("messaging.kafka.offset")
        );
        assert_eq!(
            p.attr_str("messaging.destination.partition.id"),
            c.attr_str("messaging.destination.partition.id")
        );
    }
}
