//! Span shapes with the SDK's in-memory exporter, queue accounting with a stalled exporter, and
//! the real OTLP/HTTP exporter against the loopback receiver; OTLP/gRPC in `grpc`.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use opentelemetry::Value;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use strait_forward::{Compression, ProducerStamp, ReencodeReason, TargetPolicy};
use strait_wire::kafka_protocol::indexmap::IndexMap;
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::kafka_protocol::records::{
    Compression as KpCompression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;

mod grpc;

const TP_SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TP_UNSAMPLED: &str = "00-11112f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-00";
const UBER_SAMPLED: &str = "a3ce929d0e0e4736:f067aa0ba902b7:0:1";
const B3_SAMPLED: &str = "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1";

fn config(mode: TracingMode, sample_ratio: f64, records_per_second: u32) -> TracingConfig {
    TracingConfig {
        otlp_endpoint: Some("http://127.0.0.1:4318".into()),
        mode,
        sample_ratio,
        records_per_second,
        service_name: "strait-test".into(),
    }
}

fn flow() -> Flow {
    Flow {
        source_alias: "europe".into(),
        target_alias: "us".into(),
        group_id: Some("my-group".into()),
    }
}

/// One test record: its value and headers.
type TestRecord<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)]);

/// A v2 batch (base offset 0) with one record per entry.
fn batch(records: &[TestRecord<'_>]) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (value, headers))| {
            let mut h = IndexMap::new();
            for (k, v) in *headers {
                h.insert(
                    StrBytes::from_string(k.to_string()),
                    Some(Bytes::from(v.to_string())),
                );
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // kafka-protocol starts a new batch when offset - sequence changes; the
                // first record's -1 makes the batch's base sequence -1 (no producer id).
                sequence: i as i32 - 1,
                timestamp: 1_700_000_000_000 + i as i64,
                key: None,
                value: value.map(|v| Bytes::from(v.to_string())),
                headers: h,
            }
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: KpCompression::None,
        },
    )
    .unwrap();
    let bytes = buf.freeze();
    // Sanity: the mirror's own parser accepts it.
    RecordBatch::parse(bytes.clone()).unwrap();
    bytes
}

/// The same records gzip-compressed, through the forwarder's re-encode path.
fn gzipped(uncompressed: Bytes) -> Bytes {
    let policy = TargetPolicy {
        compression: Some(Compression::Gzip),
        ..TargetPolicy::default()
    };
    let batch = RecordBatch::parse(uncompressed).unwrap();
    let mut out = strait_forward::reencode(&batch, 0, ProducerStamp::NONE, &policy).unwrap();
    assert_eq!(out.len(), 1);
    let b = out.remove(0).into_batch();
    assert_eq!(b.compression(), Compression::Gzip);
    b.into_bytes()
}

fn job(batch: Option<Bytes>, records: u32) -> Job {
    let fetched_at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    Job {
        source: TopicPartition::new("my-topic", 3).unwrap(),
        target: TopicPartition::new("my-topic", 3).unwrap(),
        source_base_offset: 100,
        source_last_offset: 100 + i64::from(records) - 1,
        records,
        bytes: batch.as_ref().map_or(512, |b| b.len() as u64),
        path: Path::PassThrough,
        compression: "none",
        fetched_at,
        acked_at: fetched_at + Duration::from_millis(7),
        target_base_offset: 40,
        batch,
    }
}

fn memory(cfg: &TracingConfig) -> (OtelHandle, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let handle = start(cfg, &flow(), exporter.clone(), Handle::current());
    (handle, exporter)
}

/// Flushes on a blocking thread (the export runs on the runtime) and returns the spans.
async fn flushed(
    handle: OtelHandle,
    exporter: &InMemorySpanExporter,
) -> (OtelHandle, Vec<SpanData>) {
    let handle = tokio::task::spawn_blocking(move || {
        handle.flush_blocking().unwrap();
        handle
    })
    .await
    .unwrap();
    (handle, exporter.get_finished_spans().unwrap())
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_mode_makes_one_root_consumer_span_with_real_timings() {
    let (handle, exporter) = memory(&config(TracingMode::Batch, 1.0, 100));
    let mut j = job(None, 5);
    j.path = Path::Reencoded(ReencodeReason::OffsetGaps);
    j.compression = "lz4";
    let (fetched_at, acked_at) = (j.fetched_at, j.acked_at);
    handle.observer.submit(j);
    let (handle, spans) = flushed(handle, &exporter).await;
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.name, "process my-topic");
    assert_eq!(s.span_kind, SpanKind::Consumer);
    assert_eq!(s.parent_span_id, SpanId::INVALID, "a root span");
    assert!(s.span_context.is_sampled());
    assert_eq!((s.start_time, s.end_time), (fetched_at, acked_at));
    assert_eq!(s.instrumentation_scope.name(), SCOPE);
    for (k, v) in [
        ("messaging.system", "kafka"),
        ("messaging.operation.name", "process"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "my-topic"),
        ("messaging.destination.partition.id", "3"),
        ("messaging.consumer.group.name", "my-group"),
        ("strait.flow", "europe->us"),
        ("strait.source.cluster", "europe"),
        ("strait.target.cluster", "us"),
        ("strait.target.topic", "my-topic"),
        ("strait.path", "reencoded"),
        ("strait.reencode.reason", "offset_gaps"),
        ("strait.batch.compression", "lz4"),
    ] {
        assert_eq!(attr_str(s, k).as_deref(), Some(v), "{k}");
    }
    // The partition id is a string, per the conventions; counts and offsets are integers.
    assert_eq!(
        attr(s, "messaging.destination.partition.id"),
        Some(&Value::from("3"))
    );
    assert_eq!(
        attr(s, "messaging.batch.message_count"),
        Some(&Value::I64(5))
    );
    assert_eq!(attr(s, "messaging.kafka.offset"), Some(&Value::I64(100)));
    assert_eq!(attr(s, "strait.source.offset.last"), Some(&Value::I64(104)));
    assert_eq!(attr(s, "strait.target.offset.base"), Some(&Value::I64(40)));
    assert_eq!(attr(s, "strait.target.partition"), Some(&Value::I64(3)));
    assert_eq!(handle.stats().batch_spans, 1);
    assert_eq!(handle.stats().spans_exported, 1);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_batches_name_the_merge_kind() {
    let (handle, exporter) = memory(&config(TracingMode::Batch, 1.0, 100));
    let mut j = job(None, 5);
    j.path = Path::Merged(strait_forward::MergeKind::Recompressed);
    handle.observer.submit(j);
    let (handle, spans) = flushed(handle, &exporter).await;
    assert_eq!(
        attr_str(&spans[0], "strait.path").as_deref(),
        Some("merged")
    );
    assert_eq!(
        attr_str(&spans[0], "strait.merge.kind").as_deref(),
        Some("recompressed")
    );
    assert_eq!(attr(&spans[0], "strait.reencode.reason"), None);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_mode_honours_the_sample_ratio_and_duplicates_have_no_target_offset() {
    let (handle, exporter) = memory(&config(TracingMode::Batch, 0.0, 100));
    for _ in 0..20 {
        handle.observer.submit(job(None, 1));
    }
    let (handle, spans) = flushed(handle, &exporter).await;
    assert!(spans.is_empty(), "ratio 0 samples nothing");
    assert_eq!(handle.stats().batch_spans, 20);
    handle.shutdown().await.unwrap();

    let (handle, exporter) = memory(&config(TracingMode::Batch, 1.0, 100));
    let mut j = job(None, 1);
    j.target_base_offset = -1;
    handle.observer.submit(j);
    let (handle, spans) = flushed(handle, &exporter).await;
    assert_eq!(attr(&spans[0], "strait.target.offset.base"), None);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_mode_parents_spans_on_sampled_producer_contexts_only() {
    let (handle, exporter) = memory(&config(TracingMode::Records, 0.0, 1000));
    let bytes = batch(&[
        (
            Some("w3c sampled"),
            &[("traceparent", TP_SAMPLED), ("tracestate", "k=v")],
        ),
        (Some("w3c unsampled"), &[("traceparent", TP_UNSAMPLED)]),
        (Some("no context"), &[("other", "x")]),
        (Some("jaeger"), &[("uber-trace-id", UBER_SAMPLED)]),
        (None, &[("b3", B3_SAMPLED)]),
    ]);
    let original = bytes.clone();
    handle.observer.submit(job(Some(bytes.clone()), 5));
    let (handle, spans) = flushed(handle, &exporter).await;
    // The batch is only read.
    assert_eq!(bytes, original);

    assert_eq!(spans.len(), 3, "{spans:#?}");
    let by_offset = |o: i64| {
        spans
            .iter()
            .find(|s| attr(s, "messaging.kafka.offset") == Some(&Value::I64(o)))
            .unwrap()
    };
    let w3c = by_offset(100);
    assert_eq!(
        w3c.span_context.trace_id(),
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(
        w3c.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert!(w3c.parent_span_is_remote);
    assert_eq!(w3c.span_context.trace_state().get("k"), Some("v"));
    assert_eq!(w3c.name, "process my-topic");
    assert_eq!(w3c.span_kind, SpanKind::Consumer);
    assert_eq!(
        attr_str(w3c, "strait.trace_context.format").as_deref(),
        Some("w3c")
    );
    assert_eq!(attr(w3c, "strait.target.offset"), Some(&Value::I64(40)));
    assert_eq!(
        attr(w3c, "messaging.batch.message_count"),
        None,
        "single-message spans carry no batch count"
    );

    let jaeger = by_offset(103);
    assert_eq!(
        jaeger.span_context.trace_id(),
        TraceId::from_hex("0000000000000000a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(attr(jaeger, "strait.target.offset"), Some(&Value::I64(43)));

    let b3 = by_offset(104);
    assert_eq!(
        b3.parent_span_id,
        SpanId::from_hex("e457b5a2e4d86bd1").unwrap()
    );
    assert_eq!(
        attr(b3, "messaging.kafka.message.tombstone"),
        Some(&Value::Bool(true))
    );
    // Each span is its own; no two records share a span or a trace here.
    let mut ids: Vec<_> = spans.iter().map(|s| s.span_context.span_id()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    let st = handle.stats();
    assert_eq!(st.record_spans, 3);
    assert_eq!(st.contexts_w3c, 2);
    assert_eq!(st.contexts_jaeger, 1);
    assert_eq!(st.contexts_b3, 1);
    assert_eq!(st.records_unsampled, 1);
    assert_eq!(st.records_without_context, 1);
    assert_eq!(st.batch_spans, 0);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_mode_reads_compressed_batches() {
    let (handle, exporter) = memory(&config(TracingMode::Records, 1.0, 1000));
    let bytes = gzipped(batch(&[
        (Some("a"), &[("traceparent", TP_SAMPLED)]),
        (Some("b"), &[]),
    ]));
    let mut j = job(Some(bytes), 2);
    j.compression = "gzip";
    handle.observer.submit(j);
    let (handle, spans) = flushed(handle, &exporter).await;
    assert_eq!(spans.len(), 1);
    assert_eq!(
        attr_str(&spans[0], "strait.batch.compression").as_deref(),
        Some("gzip")
    );
    assert_eq!(handle.stats().records_without_context, 1);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_mode_counts_what_the_rate_cap_suppresses_and_what_cannot_be_scanned() {
    let (handle, exporter) = memory(&config(TracingMode::Records, 1.0, 0));
    let tp: &[(&str, &str)] = &[("traceparent", TP_SAMPLED)];
    handle
        .observer
        .submit(job(Some(batch(&[(Some("a"), tp), (Some("b"), tp)])), 2));
    // Garbage where a batch should be: counted, not fatal.
    handle
        .observer
        .submit(job(Some(Bytes::from_static(b"not a batch")), 1));
    let (handle, spans) = flushed(handle, &exporter).await;
    assert!(spans.is_empty());
    let st = handle.stats();
    assert_eq!(st.records_suppressed, 2);
    assert_eq!(st.batches_scan_failed, 1);
    handle.shutdown().await.unwrap();
}

#[test]
fn the_token_bucket_refills_at_the_configured_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(2, t0);
    assert!(b.take(t0));
    assert!(b.take(t0));
    assert!(!b.take(t0), "the burst is one second's worth");
    assert!(!b.take(t0 + Duration::from_millis(400)));
    assert!(b.take(t0 + Duration::from_millis(600)));
    // Long idle periods do not bank more than one second.
    let later = t0 + Duration::from_secs(60);
    assert!(b.take(later) && b.take(later) && !b.take(later));
    let mut none = TokenBucket::new(0, t0);
    assert!(!none.take(t0 + Duration::from_secs(5)));
    // Byte budgets: a request above the burst needs a full bucket.
    let mut bytes = TokenBucket::new(100, t0);
    assert!(bytes.take_n(60.0, t0));
    assert!(!bytes.take_n(60.0, t0));
    assert!(!bytes.take_n(500.0, t0 + Duration::from_millis(500)));
    assert!(bytes.take_n(500.0, t0 + Duration::from_secs(2)));
}

/// An exporter that holds every export until the gate opens.
#[derive(Debug, Clone)]
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
    seen: Arc<Mutex<usize>>,
}

impl SpanExporter for Gated {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let permit = self.gate.acquire().await;
        drop(permit);
        *self.seen.lock().unwrap() += batch.len();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_export_queue_drops_and_counts_spans_without_blocking_the_observer() {
    let gated = Gated {
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
        seen: Arc::new(Mutex::new(0)),
    };
    let handle = start(
        &config(TracingMode::Batch, 1.0, 100),
        &flow(),
        gated.clone(),
        Handle::current(),
    );
    let total = SPAN_QUEUE + 2 * EXPORT_BATCH + 100;
    for _ in 0..total {
        handle.observer.submit(job(None, 1));
    }
    // Wait (without a wall-clock assertion) until the worker has made every span.
    while handle.stats().batch_spans < total as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stuck = handle.stats();
    assert!(stuck.spans_dropped > 0, "{stuck:?}");
    assert!(stuck.spans_queued <= SPAN_QUEUE as u64, "{stuck:?}");
    gated.gate.add_permits(1_000_000);
    let st = handle.shutdown().await.unwrap();
    // Every span is accounted for: exported or dropped.
    assert_eq!(st.spans_exported + st.spans_dropped, total as u64, "{st:?}");
    assert_eq!(*gated.seen.lock().unwrap() as u64, st.spans_exported);
    assert_eq!(st.spans_queued, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_job_queue_counts_batches_not_traced() {
    let (handle, _exporter) = memory(&config(TracingMode::Records, 1.0, 100));
    // Batches over the byte budget are refused without queueing.
    let big = Bytes::from(vec![0u8; MAX_QUEUED_BYTES + 1]);
    handle.observer.submit(job(Some(big), 1));
    assert_eq!(handle.stats().batches_not_traced, 1);
    assert_eq!(handle.counters.queued_bytes.load(Ordering::Relaxed), 0);
    // After shutdown the worker is gone: events are counted, nothing panics.
    let observer = handle.observer.clone();
    handle.shutdown().await.unwrap();
    observer.submit(job(Some(batch(&[(Some("a"), &[])])), 1));
    assert_eq!(
        observer.counters.batches_not_traced.load(Ordering::Relaxed),
        2
    );
    assert_eq!(observer.counters.queued_bytes.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_is_off_without_an_endpoint_or_with_mode_off() {
    let mut cfg = config(TracingMode::Off, 1.0, 100);
    assert!(init(&cfg, &flow()).unwrap().is_none());
    cfg.mode = TracingMode::Batch;
    cfg.otlp_endpoint = None;
    assert!(init(&cfg, &flow()).unwrap().is_none());
    // A protocol the exporter does not speak is refused by name.
    cfg.otlp_endpoint = Some("https://collector:4318".into());
    let json = |n: &str| (n == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "http/json".to_owned());
    let err = init_with(&cfg, &flow(), json).unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string()
            .contains("OTEL_EXPORTER_OTLP_PROTOCOL=http/json"),
        "{err}"
    );
}

/// An `https://` endpoint whose certificate is signed by the CA of
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`: a TLS front (rustls, a certificate for localhost) relays to
/// the OTLP receiver, and the span arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_https_receiver_trusting_otel_exporter_otlp_certificate() {
    let sink = strait_otlp_sink::Sink::start("127.0.0.1:0").await.unwrap();
    let plain = sink.endpoint().trim_start_matches("http://").to_owned();
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![server.der().clone()],
        rustls_pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = front.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = front.accept().await {
            let (acceptor, plain) = (acceptor.clone(), plain.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut back) = tokio::net::TcpStream::connect(&plain).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
            });
        }
    });

    let mut cfg = config(TracingMode::Records, 1.0, 100);
    cfg.otlp_endpoint = Some(format!("https://localhost:{port}"));
    cfg.service_name = "my-mirror-maker".into();
    let ca_path = ca_file.to_str().unwrap().to_owned();
    let env = move |n: &str| (n == "OTEL_EXPORTER_OTLP_CERTIFICATE").then(|| ca_path.clone());
    let handle = init_with(&cfg, &flow(), env).unwrap().unwrap();
    let bytes = batch(&[(Some("Hello world - 1"), &[("traceparent", TP_SAMPLED)])]);
    handle.observer.submit(job(Some(bytes), 1));
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.spans_exported, 1, "{stats:?}");
    let spans = sink
        .wait_for(|s| !s.is_empty(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(spans[0].service_name, "my-mirror-maker");
    assert_eq!(
        spans[0].trace_id.to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
}

#[test]
fn init_needs_a_runtime() {
    let err = init(&config(TracingMode::Batch, 1.0, 100), &flow()).unwrap_err();
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}

#[test]
fn the_traces_path_is_appended_once() {
    assert_eq!(
        traces_url("http://127.0.0.1:4318"),
        "http://127.0.0.1:4318/v1/traces"
    );
    assert_eq!(
        traces_url("http://127.0.0.1:4318/"),
        "http://127.0.0.1:4318/v1/traces"
    );
    assert_eq!(
        traces_url("http://collector/v1/traces"),
        "http://collector/v1/traces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_http_receiver_with_the_service_name() {
    let sink = strait_otlp_sink::Sink::start("127.0.0.1:0").await.unwrap();
    let mut cfg = config(TracingMode::Records, 1.0, 100);
    cfg.otlp_endpoint = Some(sink.endpoint());
    cfg.service_name = "my-mirror-maker".into();
    let handle = init(&cfg, &flow()).unwrap().unwrap();
    let observer = handle.observer();
    let bytes = batch(&[(Some("Hello world - 1"), &[("traceparent", TP_SAMPLED)])]);
    // Through the public hook's queue, as the forwarder would.
    handle.observer.submit(job(Some(bytes), 1));
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.spans_exported, 1, "{stats:?}");
    drop(observer);

    let spans = sink
        .wait_for(|s| !s.is_empty(), Duration::from_secs(10))
        .await
        .unwrap();
    let s = &spans[0];
    assert_eq!(s.service_name, "my-mirror-maker");
    assert_eq!(s.scope, SCOPE);
    assert_eq!(s.name, "process my-topic");
    assert_eq!(s.kind, strait_otlp_sink::SpanKind::Consumer);
    assert_eq!(s.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        s.parent_span_id.map(|p| p.to_string()).as_deref(),
        Some("00f067aa0ba902b7")
    );
    assert_eq!(s.attr_str("messaging.destination.partition.id"), Some("3"));
    assert_eq!(s.duration(), Duration::from_millis(7));
    assert_eq!(
        s.resource.get("service.version").and_then(|v| v.as_str()),
        Some(env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_counts_failed_exports_and_shutdown_still_returns() {
    // Bind and drop: nothing listens there any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(TracingMode::Batch, 1.0, 100);
    cfg.otlp_endpoint = Some(format!("http://127.0.0.1:{port}"));
    let handle = init(&cfg, &flow()).unwrap().unwrap();
    handle.observer.submit(job(None, 1));
    // The flush reports the failed export; shutdown then has nothing left to send.
    let handle = tokio::task::spawn_blocking(move || {
        assert!(handle.flush_blocking().is_err());
        handle
    })
    .await
    .unwrap();
    let st = handle.stats();
    assert_eq!(
        (st.spans_exported, st.spans_export_failed),
        (0, 1),
        "{st:?}"
    );
    let _ = handle.shutdown().await;
}
