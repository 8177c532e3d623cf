//! The reference scenario end to end, with single-broker clusters: `europe` -> `us` over mTLS
//! with per-user certificates and the walkthrough's ACLs, `my-topic` with 12 partitions, a
//! traced producer writing "Hello world - N", `strait run` mirroring `.*` with tracing in
//! `records` mode, and a traced consumer in group `my-group` on `us`, all three exporting their
//! spans to a real Jaeger v2 all-in-one (in-memory storage; `scripts/install-jaeger.sh` builds it
//! once). Asserts that every record arrives in order per partition and, through Jaeger's query
//! API (`/api/traces`), that each record is one trace linking producer -> mirror -> consumer with
//! the per-hop durations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::*;
use strait_demo::consume::{self, ConsumeArgs};
use strait_demo::produce::{self, ProduceArgs};
use strait_demo::telemetry::Telemetry;
use strait_otlp_sink::hops::{self, Hop, HopStats, Role};
use strait_otlp_sink::jaeger::{self, JaegerProcess};
use strait_otlp_sink::{SpanKind, SpanRecord, TraceId};
use strait_testkit::{Cluster, Listener};
use strait_wire::{Client, ClientConfig};

const RECORDS: u64 = 36;

fn toml_section(cluster: &Cluster, alias: &str, user: &str) -> String {
    let mut s = format!("alias = \"{alias}\"\n");
    for (k, v) in cluster.client_properties(Listener::Ssl, Some(user)) {
        s.push_str(&format!("\"{k}\" = \"{v}\"\n"));
    }
    s
}

/// Jaeger, in the suite's process registry, killed when dropped (also when the test panics).
struct Jaeger(JaegerProcess);

impl Jaeger {
    async fn start(dir: &std::path::Path) -> Jaeger {
        let binary = tokio::task::spawn_blocking(jaeger::binary)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        let j = JaegerProcess::start(&binary, dir)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        strait_testkit::track_process(j.pid());
        Jaeger(j)
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let pid = self.0.pid();
        self.0.stop();
        strait_testkit::untrack_process(pid);
    }
}

/// The services of the scenario, as each exporter names itself.
const PRODUCER: &str = "hello-world-producer";
const MIRROR: &str = "my-mirror-maker";
const CONSUMER: &str = "hello-world-consumer";

/// Checks one trace as Jaeger returns it: exactly one span of each service, the producer's
/// `send` the root, the mirror's and the consumer's spans its children (the record's
/// `traceparent` travels unchanged, so both hops are parented on the producer's span), each on
/// the record's partition, in causal order (the mirror fetched the record after the producer
/// started sending it, the consumer after the mirror started forwarding it: one clock, so no
/// skew).
fn check_trace(id: &TraceId, spans: &[&SpanRecord]) {
    let one = |service: &str| {
        let of: Vec<_> = spans.iter().filter(|s| s.service_name == service).collect();
        assert_eq!(of.len(), 1, "trace {id}: {service} spans: {of:#?}");
        *of[0]
    };
    let (producer, mirror, consumer) = (one(PRODUCER), one(MIRROR), one(CONSUMER));
    assert_eq!(spans.len(), 3, "trace {id}: {spans:#?}");
    assert_eq!(
        producer.kind,
        SpanKind::Producer,
        "trace {id}: producer kind"
    );
    assert!(
        producer.attr("messaging.kafka.offset").is_some(),
        "trace {id}: the send was not acknowledged"
    );
    assert_eq!(
        producer.parent_span_id, None,
        "trace {id}: producer is the root"
    );
    assert_eq!(hops::role(producer), Some(Role::Producer));
    assert_eq!(
        hops::role(mirror),
        Some(Role::Mirror),
        "trace {id}: {mirror:#?}"
    );
    assert_eq!(hops::role(consumer), Some(Role::Consumer));
    for (what, span) in [("mirror", mirror), ("consumer", consumer)] {
        assert_eq!(span.kind, SpanKind::Consumer, "trace {id}: {what} kind");
        assert_eq!(
            span.parent_span_id,
            Some(producer.span_id),
            "trace {id}: the {what} span is not a child of the producer's send"
        );
        assert_eq!(
            span.attr_str("messaging.destination.partition.id"),
            producer.attr_str("messaging.destination.partition.id"),
            "trace {id}: {what} partition"
        );
    }
    assert_eq!(
        mirror.attr_str("strait.flow").map(|f| !f.is_empty()),
        Some(true)
    );
    assert!(
        producer.start < mirror.start && mirror.start < consumer.start,
        "trace {id}: spans out of causal order: producer {:?}, mirror {:?}, consumer {:?}",
        producer.start,
        mirror.start,
        consumer.start
    );
    // The mirror's span covers fetch -> target ack, a produce round trip: never zero.
    assert!(
        mirror.end > mirror.start,
        "trace {id}: the mirror span has no duration"
    );
}

async fn user_client(cluster: &Cluster, user: &str) -> Client {
    let props = cluster.client_properties(Listener::Ssl, Some(user));
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_scenario_mirrors_everything_and_links_the_traces() {
    let clusters = tokio::task::spawn_blocking(|| {
        let e = std::thread::spawn(|| walkthrough_cluster("europe", "my-europe-user"));
        let u = walkthrough_cluster("us", "my-us-user");
        (e.join().unwrap(), u)
    });
    let dir = tempfile::tempdir().unwrap();
    // Jaeger starts while the brokers do.
    let jaeger = Jaeger::start(dir.path()).await;
    let (europe, us) = clusters.await.unwrap();
    let otlp = jaeger.0.otlp_endpoint();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\".*\"]\ngroup_id = \"my-group\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\n\n[metrics]\nlisten = \"\"\n\n[tracing]\notlp_endpoint = \"{}\"\nmode = \"records\"\n\
             records_per_second = 1000\nservice_name = \"{MIRROR}\"\n",
            toml_section(&europe, "europe", "my-europe-user"),
            toml_section(&us, "us", "my-us-user"),
            otlp
        ),
    )
    .unwrap();
    let (mut mirror, log) = spawn_strait(&config, 0);

    let producer_client = user_client(&europe, "my-europe-user").await;
    let producer_tel = Telemetry::init(Some(&otlp), PRODUCER).unwrap();
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
    let consumer_tel = Telemetry::init(Some(&otlp), CONSUMER).unwrap();
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

    // Stop the mirror first: its exporter flushes the last spans on the way out.
    let status = terminate(&mut mirror);
    assert!(
        status.success(),
        "strait exited with {status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // Through Jaeger's query API: one trace per record, producer -> mirror -> consumer.
    let query = jaeger.0.query();
    let complete = |spans: &[SpanRecord]| hops::analyse(spans).len() as u64 >= RECORDS;
    let spans = query
        .wait_for_traces(PRODUCER, 1000, complete, Duration::from_secs(90))
        .await
        .unwrap_or_else(|e| panic!("{e}; Jaeger's log: {}", jaeger.0.log().display()));
    let mut traces: HashMap<TraceId, Vec<&SpanRecord>> = HashMap::new();
    for s in &spans {
        traces.entry(s.trace_id).or_default().push(s);
    }
    assert_eq!(traces.len() as u64, RECORDS, "traces of {PRODUCER}");
    for (id, spans) in &traces {
        check_trace(id, spans);
    }
    // The mirror's spans are found under its own service too: the same traces.
    let mirrored = query.traces(MIRROR, 1000).await.unwrap();
    let mirrored: BTreeSet<_> = mirrored.iter().map(|s| s.trace_id).collect();
    let produced: BTreeSet<_> = traces.keys().copied().collect();
    assert_eq!(mirrored, produced, "traces found by service {MIRROR}");
    let services: BTreeSet<_> = query.services().await.unwrap().into_iter().collect();
    for service in [PRODUCER, MIRROR, CONSUMER] {
        assert!(services.contains(service), "{service} not in {services:?}");
    }

    // The per-hop durations, as the demo prints them.
    let per_trace = hops::analyse(&spans);
    assert_eq!(per_trace.len() as u64, RECORDS);
    let mut stats = HopStats::new(per_trace.len());
    for h in &per_trace {
        assert!(h.get(Hop::MirrorResidence) > 0.0, "{}", h.line());
        assert!(h.get(Hop::EndToEnd) > 0.0, "{}", h.line());
        assert!(h.get(Hop::ProducerSend) >= 0.0, "{}", h.line());
        stats.add(h);
    }
    println!(
        "per-hop durations from Jaeger ({} traces):\n{}",
        per_trace.len(),
        stats.table()
    );
}
