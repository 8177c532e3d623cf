//! The real Jaeger v2 all-in-one (built by scripts/install-jaeger.sh, or $STRAIT_JAEGER), no
//! broker: a producer -> mirror -> consumer trace posted as OTLP/HTTP protobuf (hand-written
//! requests, so the test does not depend on an exporter) comes back from the query API
//! (`/api/traces`) as the same spans (ids, parents, links, kinds, services, scopes, attributes,
//! times at Jaeger's microsecond precision), the hop analysis reads it, and dropping the
//! process handle kills Jaeger.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span};
use prost::Message as _;
use strait_otlp_sink::hops::{self, Hop};
use strait_otlp_sink::jaeger::{self, JaegerProcess};
use strait_otlp_sink::{AttrValue, SpanId, SpanKind, TraceId};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

/// One service's one span.
fn resource_spans(service: &str, scope: &str, span: Span) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", s(service))],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: scope.into(),
                ..Default::default()
            }),
            spans: vec![span],
            ..Default::default()
        }],
        ..Default::default()
    }
}

const TRACE: [u8; 16] = [
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 1, 2, 3, 4, 5, 6, 7, 8,
];
const PRODUCER: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
const MIRROR: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
const CONSUMER: [u8; 8] = [0x53, 0x99, 0x5c, 0x3f, 0x42, 0xcd, 0x8a, 0xd8];

/// A reference-scenario trace starting at `t0` (ns since the epoch, a whole microsecond):
/// producer 0..3 ms, mirror 5..15 ms, consumer 20..20.5 ms.
fn trace(t0: u64) -> ExportTraceServiceRequest {
    let ms = 1_000_000;
    let span = |id: [u8; 8], parent: Option<[u8; 8]>, name: &str, kind, from, to| Span {
        trace_id: TRACE.to_vec(),
        span_id: id.to_vec(),
        parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: name.into(),
        kind: kind as i32,
        start_time_unix_nano: t0 + from,
        end_time_unix_nano: t0 + to,
        ..Default::default()
    };
    let mut producer = span(
        PRODUCER,
        None,
        "send my-topic",
        span::SpanKind::Producer,
        0,
        3 * ms,
    );
    producer.attributes = vec![
        kv("messaging.destination.name", s("my-topic")),
        kv("messaging.destination.partition.id", s("3")),
        kv("messaging.kafka.offset", any_value::Value::IntValue(17)),
    ];
    let mut mirror = span(
        MIRROR,
        Some(PRODUCER),
        "process my-topic",
        span::SpanKind::Consumer,
        5 * ms,
        15 * ms,
    );
    mirror.attributes = vec![kv("strait.flow", s("europe->us"))];
    let mut consumer = span(
        CONSUMER,
        Some(PRODUCER),
        "process my-topic",
        span::SpanKind::Consumer,
        20 * ms,
        20 * ms + ms / 2,
    );
    consumer.links = vec![span::Link {
        trace_id: TRACE.to_vec(),
        span_id: MIRROR.to_vec(),
        ..Default::default()
    }];
    ExportTraceServiceRequest {
        resource_spans: vec![
            resource_spans("hello-world-producer", "strait-demo", producer),
            resource_spans("my-mirror-maker", "strait", mirror),
            resource_spans("hello-world-consumer", "strait-demo", consumer),
        ],
    }
}

/// POSTs an OTLP/HTTP protobuf request; returns the status.
async fn post(endpoint: &str, body: &[u8]) -> u16 {
    let authority = endpoint.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(authority).await.unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\
         content-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    String::from_utf8_lossy(&raw[9..12]).parse().unwrap()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_posted_over_otlp_comes_back_from_the_query_api() {
    let binary = tokio::task::spawn_blocking(jaeger::binary)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let j = JaegerProcess::start(&binary, dir.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    strait_testkit::track_process(j.pid());
    let pid = j.pid();
    assert!(alive(pid));

    // Now, to the microsecond (Jaeger's resolution), so the default search window holds it.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let t0 = now.as_micros() as u64 * 1000;
    assert_eq!(
        post(&j.otlp_endpoint(), &trace(t0).encode_to_vec()).await,
        200
    );

    let query = j.query();
    let spans = query
        .wait_for_traces(
            "hello-world-producer",
            10,
            |s| s.len() == 3,
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; Jaeger's log: {}", j.log().display()));
    let by_id = |id: [u8; 8]| {
        let id = SpanId::from_bytes(id).unwrap();
        spans.iter().find(|s| s.span_id == id).unwrap()
    };
    let (producer, mirror, consumer) = (by_id(PRODUCER), by_id(MIRROR), by_id(CONSUMER));
    let at = |ns: u64| UNIX_EPOCH + Duration::from_nanos(t0 + ns);
    for s in [producer, mirror, consumer] {
        assert_eq!(s.trace_id, TraceId::from_bytes(TRACE).unwrap());
    }
    assert_eq!(producer.parent_span_id, None);
    assert_eq!(producer.kind, SpanKind::Producer);
    assert_eq!(producer.service_name, "hello-world-producer");
    assert_eq!(producer.scope, "strait-demo");
    assert_eq!(producer.name, "send my-topic");
    assert_eq!(
        producer.attr_str("messaging.destination.partition.id"),
        Some("3")
    );
    assert_eq!(
        producer.attr("messaging.kafka.offset"),
        Some(&AttrValue::Int(17))
    );
    assert_eq!((producer.start, producer.end), (at(0), at(3_000_000)));
    assert_eq!(mirror.parent_span_id, Some(producer.span_id));
    assert_eq!(mirror.service_name, "my-mirror-maker");
    assert_eq!(mirror.scope, "strait");
    assert_eq!(mirror.kind, SpanKind::Consumer);
    assert_eq!(mirror.attr_str("strait.flow"), Some("europe->us"));
    assert_eq!(consumer.parent_span_id, Some(producer.span_id));
    assert_eq!(consumer.service_name, "hello-world-consumer");
    assert_eq!(consumer.links.len(), 1, "{consumer:#?}");
    assert_eq!(consumer.links[0].span_id, mirror.span_id);
    assert_eq!(consumer.end, at(20_500_000));

    let hops = hops::analyse(&spans);
    assert_eq!(hops.len(), 1);
    assert_eq!(hops[0].get(Hop::ProducerSend), 3.0);
    assert_eq!(hops[0].get(Hop::SourceToMirror), 2.0);
    assert_eq!(hops[0].get(Hop::MirrorResidence), 10.0);
    assert_eq!(hops[0].get(Hop::MirrorToConsumer), 5.0);
    assert_eq!(hops[0].get(Hop::EndToEnd), 20.0);

    // The same trace under the mirror's service; all three services are known.
    let mirrored = query.traces("my-mirror-maker", 10).await.unwrap();
    assert_eq!(mirrored.len(), 3);
    let mut services = query.services().await.unwrap();
    services.sort();
    assert_eq!(
        services,
        [
            "hello-world-consumer",
            "hello-world-producer",
            "my-mirror-maker"
        ]
    );
    assert!(query.traces("nobody", 10).await.unwrap().is_empty());

    drop(j);
    strait_testkit::untrack_process(pid);
    assert!(
        !alive(pid),
        "jaeger {pid} still runs after its handle was dropped"
    );
}

#[tokio::test]
async fn a_missing_binary_and_a_dead_query_api_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let err = JaegerProcess::start(&dir.path().join("no-jaeger"), dir.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Jaeger did not start"), "{err}");
    assert!(err.contains("no-jaeger"), "{err}");
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let q = jaeger::Query::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let err = q.traces("x", 1).await.unwrap_err().to_string();
    assert!(err.contains("Jaeger query"), "{err}");
    assert!(err.contains("/api/traces?service=x&limit=1"), "{err}");
}
