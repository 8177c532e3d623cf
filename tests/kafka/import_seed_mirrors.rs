//! The seed walkthrough's `KafkaMirrorMaker` (crates/strait/tests/data/strimzi/seed-kafka-mirror-maker.yaml),
//! converted by the built `strait import strimzi`, mirrors the reference scenario between real
//! brokers: `europe` -> `us`, single-broker clusters with an mTLS listener, per-user client
//! certificates (`my-europe-user`, `my-us-user`) and the walkthrough's ACLs, `my-topic` with 12
//! partitions.
//!
//! Only what cannot be the same outside Kubernetes is rewritten in the generated file, each key
//! after checking it still holds its Kubernetes value (so a change in the import's shape fails
//! here): the bootstrap addresses, the certificate/key/CA paths of the mounted Secrets, the
//! metrics port (a pod has its own network namespace; a shared test machine does not) and the
//! tracing endpoint (an in-process OTLP/HTTP receiver instead of `my-jaeger-collector`; the
//! reference scenario test, scenario.rs, covers Jaeger itself). Everything else (topics, group
//! id, start position, rename policy, TLS settings, client and tracing settings) runs as
//! converted.
//!
//! Asserts that records written to explicit partitions arrive on `us` exactly, in order, per
//! partition, under the name the converted rename policy gives; that the mirror's batch spans
//! reach the tracing endpoint under the converted service name; and that `strait` exits 0 soon
//! after SIGTERM.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- import_seed_mirrors:: --nocapture` (Kafka jars from
//! `scripts/kafka-jars.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use strait::config::{Config, Environment, StartPosition};
use strait_otlp_sink::{Sink, SpanRecord};
use strait_testkit::{Cluster, Listener};
use strait_wire::offset_commit::GroupOffsets;
use strait_wire::{Client, ClientConfig, TopicPartition};

const TOPIC: &str = "my-topic";
const PARTITIONS: i32 = 12;
/// How long each wait on the mirror may take on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

/// Records written to partition `p`: a different count per partition, so that records landing
/// in the wrong partition cannot add up to the right totals.
fn count(p: i32) -> usize {
    20 + 3 * p as usize
}

fn seed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/strait/tests/data/strimzi/seed-kafka-mirror-maker.yaml")
}

/// Runs the built `strait import strimzi` on the seed, as a user would, into `out`.
fn import(out: &Path) {
    let mut cmd = StraitCommand::new(["import", "strimzi"])
        .arg(seed())
        .arg("--output")
        .arg(out);
    // The import must not depend on the developer's STRAIT_* or OTEL_*.
    cmd.command().env_clear();
    let o = cmd.output();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Sets `[section] key` to `value`, after checking that the import wrote `kubernetes` there.
fn rewrite(doc: &mut toml::Table, section: &str, key: &str, kubernetes: &str, value: &str) {
    let table = doc
        .get_mut(section)
        .and_then(toml::Value::as_table_mut)
        .unwrap_or_else(|| panic!("the import wrote no [{section}]"));
    let old = table.get(key).and_then(toml::Value::as_str);
    assert_eq!(old, Some(kubernetes), "[{section}] {key} as imported");
    table.insert(key.into(), toml::Value::String(value.into()));
}

/// Points `[side]` at `cluster`'s mTLS listener with `user`'s certificate: the address and the
/// PEM files are the only client properties that differ from the Secrets mounted in the pod.
fn rewrite_cluster(doc: &mut toml::Table, side: &str, k8s_cluster: &str, cluster: &Cluster) {
    let user = cluster.user_names()[0].to_string();
    let k8s: BTreeMap<&str, String> = [
        (
            "bootstrap.servers",
            format!("{k8s_cluster}-kafka-bootstrap:9093"),
        ),
        (
            "ssl.ca.location",
            format!("/etc/strait/tls/{side}/ca/ca.crt"),
        ),
        (
            "ssl.certificate.location",
            format!("/etc/strait/tls/{side}/user/user.crt"),
        ),
        (
            "ssl.key.location",
            format!("/etc/strait/tls/{side}/user/user.key"),
        ),
    ]
    .into_iter()
    .collect();
    let props = cluster.client_properties(Listener::Ssl, Some(&user));
    for (key, value) in &props {
        match k8s.get(key.as_str()) {
            Some(kubernetes) => rewrite(doc, side, key, kubernetes, value),
            // What the listener needs beyond addresses and files (security.protocol) must be
            // what the import wrote, unchanged.
            None => assert_eq!(
                doc[side].get(key).and_then(toml::Value::as_str),
                Some(value.as_str()),
                "[{side}] {key} as imported"
            ),
        }
    }
    assert_eq!(props.len(), k8s.len() + 1, "{props:?}");
}

async fn user_client(cluster: &Cluster) -> Client {
    let user = cluster.user_names()[0].to_string();
    let props = cluster.client_properties(Listener::Ssl, Some(&user));
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

/// The positions `group` committed for every partition of `topic` (`None`: none yet), or
/// `None` while the fetch fails (the group coordinator may still be loading).
async fn committed(client: &Client, group: &str, topic: &str) -> Option<Vec<Option<i64>>> {
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p).unwrap())
        .collect();
    let c = GroupOffsets::new(client, group).fetch(&tps).await.ok()?;
    Some(
        tps.iter()
            .map(|tp| c.get(tp).and_then(|o| o.as_ref()).map(|o| o.offset))
            .collect(),
    )
}

/// Waits until the committed positions of `group` are `want`; fails with the mirror's log on
/// timeout or if the mirror exits meanwhile.
async fn wait_committed(
    client: &Client,
    group: &str,
    want: &[Option<i64>],
    mirror: &mut StraitProcess,
    log: &Path,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = committed(client, group, TOPIC).await;
        if now.as_deref() == Some(want) {
            return;
        }
        let exited = mirror.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "group {group} committed {now:?}, waiting for {want:?} (strait: {exited:?}); log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Records per source partition in the mirror's batch spans (`messaging.batch.message_count`).
fn traced_records(spans: &[SpanRecord], service: &str) -> BTreeMap<i32, i64> {
    let mut per_partition = BTreeMap::new();
    for s in spans.iter().filter(|s| s.service_name == service) {
        let p = s
            .attr_str("messaging.destination.partition.id")
            .and_then(|p| p.parse().ok());
        let n = s
            .attr("messaging.batch.message_count")
            .and_then(|n| n.as_i64());
        if let (Some(p), Some(n)) = (p, n) {
            *per_partition.entry(p).or_insert(0) += n;
        }
    }
    per_partition
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_kafka_mirror_maker_converted_mirrors_the_reference_scenario() {
    let started = Instant::now();
    let clusters = tokio::task::spawn_blocking(|| {
        let e = std::thread::spawn(|| walkthrough_cluster("europe", "my-europe-user"));
        let u = walkthrough_cluster("us", "my-us-user");
        (e.join().unwrap(), u)
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    import(&config);
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let (europe, us) = clusters.await.unwrap();
    println!("clusters up after {:?}", started.elapsed());

    let mut doc: toml::Table = std::fs::read_to_string(&config).unwrap().parse().unwrap();
    rewrite_cluster(&mut doc, "source", "europe-cluster", &europe);
    rewrite_cluster(&mut doc, "target", "us-cluster", &us);
    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    rewrite(
        &mut doc,
        "metrics",
        "listen",
        "0.0.0.0:9464",
        &metrics.to_string(),
    );
    rewrite(
        &mut doc,
        "tracing",
        "otlp_endpoint",
        "http://my-jaeger-collector:4318",
        &sink.endpoint(),
    );
    let text = toml::to_string(&doc).unwrap();
    std::fs::write(&config, &text).unwrap();
    // The names the mirror uses, as the converted file sets them (loaded with Strait's own
    // loader, so the test follows the conversion instead of repeating it).
    let c = Config::from_toml_str(&text, &config, &Environment::default())
        .unwrap()
        .config;
    let group = c.mirror.group_id.clone();
    let target_topic = c.target_topic(TOPIC);
    // MirrorMaker 1 keeps topic names.
    assert_eq!((group.as_str(), target_topic.as_str()), ("my-group", TOPIC));
    let service = c.tracing.service_name.clone();
    assert_eq!(service, "my-mirror-maker");

    let (mut mirror, log) = spawn_strait(&config, 0);
    let source = user_client(&europe).await;
    // The conversion starts at the end of the log (MirrorMaker 1's default): records written
    // before the mirror has positioned a partition are skipped by design. As in the
    // walkthrough, the producer starts after the mirror: once every partition's start is
    // resolved, the mirror commits it, at 0 on the empty topic.
    assert_eq!(c.mirror.start, StartPosition::Latest);
    wait_committed(
        &source,
        &group,
        &[Some(0); PARTITIONS as usize],
        &mut mirror,
        &log,
    )
    .await;
    println!("mirror positioned after {:?}", started.elapsed());

    // Each partition's batches are addressed to it: no partitioner decides where records go.
    for p in 0..PARTITIONS {
        produce_numbered(&source, TOPIC, p..p + 1, 0..count(p)).await;
    }
    let written = read_all(&source, TOPIC, PARTITIONS).await;
    for p in 0..PARTITIONS {
        let expected: Vec<Vec<u8>> = (0..count(p))
            .map(|i| format!("{p}-{i}").into_bytes())
            .collect();
        assert_eq!(written[&p], expected, "europe {TOPIC}-{p}");
    }
    // The mirror commits only what `us` acknowledged: everything is there then.
    let ends: Vec<Option<i64>> = (0..PARTITIONS).map(|p| Some(count(p) as i64)).collect();
    wait_committed(&source, &group, &ends, &mut mirror, &log).await;
    println!("mirrored after {:?}", started.elapsed());

    let target = user_client(&us).await;
    let mirrored = read_all(&target, &target_topic, PARTITIONS).await;
    for p in 0..PARTITIONS {
        assert_eq!(
            mirrored[&p].len(),
            count(p),
            "us {target_topic}-{p}: record count"
        );
        assert_eq!(mirrored[&p], written[&p], "us {target_topic}-{p}");
    }

    // Bounded: the converted drain_timeout (10 s) plus leaving the group and a last commit.
    let stopping = Instant::now();
    let status = terminate(&mut mirror);
    let took = stopping.elapsed();
    assert!(
        status.success(),
        "strait exited with {status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        took < Duration::from_secs(30),
        "SIGTERM -> exit took {took:?}"
    );

    // The exporter flushes on the way out: with the converted sampler (const 1), every mirrored
    // record is in a batch span of the converted service.
    let want: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, count(p) as i64)).collect();
    let spans = sink
        .wait_for(
            |s| traced_records(s, &service) == want,
            Duration::from_secs(15),
        )
        .await;
    let spans = spans.unwrap_or_else(|e| {
        panic!(
            "{e}: traced records per partition {:?}, want {want:?}",
            traced_records(&sink.spans(), &service)
        )
    });
    assert!(
        spans
            .iter()
            .filter(|s| s.service_name == service)
            .all(|s| s.name == format!("process {TOPIC}")),
        "{spans:#?}"
    );
    println!(
        "SIGTERM -> exit in {took:?}; whole test {:?}",
        started.elapsed()
    );
    sink.stop().await;
}
