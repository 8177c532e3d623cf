//! The sink over real loopback HTTP/1.1 (hand-written requests, so the test does not depend on
//! the exporter it is meant to check).

#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span};
use prost::Message as _;
use strait_otlp_sink::{AttrValue, Error, Sink, SpanId, SpanKind, TraceId};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn request(trace: [u8; 16], span_id: [u8; 8], parent: [u8; 8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue("hello-world-producer".into()),
                )],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "strait-demo".into(),
                    ..Default::default()
                }),
                spans: vec![Span {
                    trace_id: trace.to_vec(),
                    span_id: span_id.to_vec(),
                    parent_span_id: parent.to_vec(),
                    name: "send my-topic".into(),
                    kind: span::SpanKind::Producer as i32,
                    start_time_unix_nano: 1_700_000_000_000_000_000,
                    end_time_unix_nano: 1_700_000_000_004_000_000,
                    attributes: vec![
                        kv(
                            "messaging.destination.partition.id",
                            any_value::Value::StringValue("3".into()),
                        ),
                        kv("messaging.kafka.offset", any_value::Value::IntValue(17)),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends one HTTP/1.1 request and returns (status, headers, body).
async fn http(
    sink: &Sink,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(sink.addr()).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        sink.addr(),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    (status, head.to_ascii_lowercase(), raw[split + 4..].to_vec())
}

#[tokio::test]
async fn protobuf_spans_are_stored_and_answered_with_an_empty_response() {
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let body = request([7; 16], [1; 8], [2; 8]).encode_to_vec();
    let (status, head, answer) = http(
        &sink,
        "POST",
        "/v1/traces",
        &[("content-type", "application/x-protobuf")],
        &body,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/x-protobuf"),
        "{head}"
    );
    assert_eq!(
        ExportTraceServiceResponse::decode(&answer[..]).unwrap(),
        ExportTraceServiceResponse::default()
    );

    let spans = sink
        .wait_for(|s| !s.is_empty(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.trace_id, TraceId::from_bytes([7; 16]).unwrap());
    assert_eq!(s.span_id, SpanId::from_bytes([1; 8]).unwrap());
    assert_eq!(s.parent_span_id, SpanId::from_bytes([2; 8]));
    assert_eq!(s.name, "send my-topic");
    assert_eq!(s.kind, SpanKind::Producer);
    assert_eq!(s.service_name, "hello-world-producer");
    assert_eq!(s.scope, "strait-demo");
    assert_eq!(
        s.start,
        UNIX_EPOCH + Duration::from_nanos(1_700_000_000_000_000_000)
    );
    assert_eq!(s.duration(), Duration::from_millis(4));
    assert_eq!(s.attr_str("messaging.destination.partition.id"), Some("3"));
    assert_eq!(s.attr("messaging.kafka.offset"), Some(&AttrValue::Int(17)));
    assert_eq!(sink.stats().requests, 1);
    sink.stop().await;
}

#[tokio::test]
async fn gzip_bodies_are_decoded_and_invalid_ids_are_reported_as_partial_success() {
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let mut req = request([9; 16], [3; 8], [0; 8]);
    // A second span with an all-zero trace id must be refused, not stored.
    let mut bad = req.resource_spans[0].scope_spans[0].spans[0].clone();
    bad.trace_id = vec![0; 16];
    req.resource_spans[0].scope_spans[0].spans.push(bad);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&req.encode_to_vec()).unwrap();
    let body = gz.finish().unwrap();
    let (status, _, answer) = http(
        &sink,
        "POST",
        "/v1/traces",
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ],
        &body,
    )
    .await;
    assert_eq!(status, 200);
    let answer = ExportTraceServiceResponse::decode(&answer[..]).unwrap();
    assert_eq!(answer.partial_success.unwrap().rejected_spans, 1);
    let spans = sink.spans();
    assert_eq!(spans.len(), 1);
    // No parent: a root span.
    assert_eq!(spans[0].parent_span_id, None);
    assert_eq!(sink.stats().invalid_spans, 1);
}

#[tokio::test]
async fn other_requests_are_refused_with_the_right_status() {
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let json = http(
        &sink,
        "POST",
        "/v1/traces",
        &[("content-type", "application/json")],
        b"{}",
    )
    .await;
    assert_eq!(json.0, 415);
    assert!(String::from_utf8_lossy(&json.2).contains("http/protobuf"));
    let garbage = http(
        &sink,
        "POST",
        "/v1/traces",
        &[("content-type", "application/x-protobuf")],
        b"\xff\xff\xff",
    )
    .await;
    assert_eq!(garbage.0, 400);
    let brotli = http(
        &sink,
        "POST",
        "/v1/traces",
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "br"),
        ],
        b"",
    )
    .await;
    assert_eq!(brotli.0, 415);
    assert_eq!(http(&sink, "GET", "/v1/traces", &[], b"").await.0, 405);
    assert_eq!(http(&sink, "GET", "/healthz", &[], b"").await.0, 200);
    assert_eq!(http(&sink, "POST", "/v1/metrics", &[], b"").await.0, 404);
    assert_eq!(sink.stats().refused_requests, 5);
    assert!(sink.spans().is_empty());
}

#[tokio::test]
async fn wait_for_times_out_with_a_helpful_error() {
    let sink = Sink::start("127.0.0.1:0").await.unwrap();
    let before = SystemTime::now();
    let err = sink
        .wait_for(|s| !s.is_empty(), Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(SystemTime::now() > before);
    assert!(matches!(err, Error::Timeout { spans: 0, .. }), "{err}");
    assert!(err.to_string().contains(&sink.addr().to_string()));
}

#[tokio::test]
async fn a_busy_port_is_a_bind_error() {
    let first = Sink::start("127.0.0.1:0").await.unwrap();
    let err = Sink::start(&first.addr().to_string()).await.unwrap_err();
    assert!(matches!(err, Error::Bind { .. }), "{err}");
    let err = Sink::start("not an address").await.unwrap_err();
    assert!(matches!(err, Error::Address { .. }), "{err}");
}
