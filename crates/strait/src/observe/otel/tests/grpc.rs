//! OTLP/gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): the real exporter against a real Jaeger v2's
//! OTLP/gRPC receiver, and against an in-process HTTP/2 server over TLS (ALPN `h2`) that checks
//! the gRPC request, relays the message to the loopback OTLP/HTTP receiver, or refuses it with a
//! gRPC status.

use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use strait_otlp_sink::jaeger::{self, JaegerProcess};

use super::*;

fn grpc_env(extra: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |n: &str| {
        if n == "OTEL_EXPORTER_OTLP_PROTOCOL" {
            return Some("grpc".to_owned());
        }
        extra
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// Jaeger v2 (`scripts/install-jaeger.sh`) on free ports, in the suite's process registry and
/// killed when dropped (also when the test panics).
struct Jaeger(JaegerProcess);

impl Drop for Jaeger {
    fn drop(&mut self) {
        self.0.stop();
        strait_testkit::untrack_process(self.0.pid());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_jaeger_over_otlp_grpc() {
    let binary = tokio::task::spawn_blocking(jaeger::binary)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let j = JaegerProcess::start(&binary, dir.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    strait_testkit::track_process(j.pid());
    let j = Jaeger(j);

    let mut cfg = config(TracingMode::Records, 1.0, 100);
    cfg.otlp_endpoint = Some(format!("http://{}", j.0.otlp_grpc()));
    cfg.service_name = "my-mirror-maker".into();
    let handle = init_with(&cfg, &flow(), grpc_env(&[])).unwrap().unwrap();
    let bytes = batch(&[(Some("Hello world - 1"), &[("traceparent", TP_SAMPLED)])]);
    // Now: Jaeger's trace search looks back a limited time.
    let mut job = job(Some(bytes), 1);
    job.fetched_at = std::time::SystemTime::now();
    job.acked_at = job.fetched_at + Duration::from_millis(7);
    handle.observer.submit(job);
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(
        (stats.spans_exported, stats.spans_export_failed),
        (1, 0),
        "{stats:?}; Jaeger's log: {}",
        j.0.log().display()
    );
    let spans =
        j.0.query()
            .wait_for_traces(
                "my-mirror-maker",
                10,
                |s| !s.is_empty(),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|e| {
                let log = std::fs::read_to_string(j.0.log()).unwrap_or_default();
                panic!("{e}; Jaeger's log:\n{log}")
            });
    assert_eq!(spans.len(), 1, "{spans:?}");
    let s = &spans[0];
    assert_eq!(s.name, "process my-topic");
    assert_eq!(s.kind, strait_otlp_sink::SpanKind::Consumer);
    assert_eq!(s.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        s.parent_span_id.map(|p| p.to_string()).as_deref(),
        Some("00f067aa0ba902b7")
    );
    assert_eq!(s.attr_str("messaging.destination.partition.id"), Some("3"));
}

/// What the in-process gRPC server answers.
#[derive(Clone)]
enum Answer {
    /// Relay the message to this OTLP/HTTP receiver (`http://host:port`) and answer OK.
    Relay(String),
    /// A trailers-only answer with this `grpc-status` and `grpc-message`.
    Refuse(u32, &'static str),
}

/// An HTTP/2 server over TLS (a certificate for localhost by a CA written to `ca_file`,
/// ALPN `h2` only) that records each request's headers and answers as `answer` says.
async fn grpc_server(
    ca_file: &std::path::Path,
    answer: Answer,
) -> (u16, Arc<Mutex<Vec<HeaderMap>>>) {
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
    std::fs::write(ca_file, ca_cert.pem()).unwrap();
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
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
    // What the connection negotiated is recorded (grpc-go refuses TLS without ALPN h2).
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer, seen) = (acceptor.clone(), answer.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let alpn = tls.get_ref().1.alpn_protocol().unwrap_or(b"none").to_vec();
                let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let alpn = hyper::header::HeaderValue::from_bytes(&alpn).unwrap();
                    req.headers_mut().insert("x-test-alpn", alpn);
                    handle(req, answer.clone(), seen.clone())
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, recorded)
}

type GrpcBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

async fn handle(
    req: Request<Incoming>,
    answer: Answer,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
) -> std::result::Result<Response<GrpcBody>, std::convert::Infallible> {
    assert_eq!(
        req.uri().path(),
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    );
    seen.lock().unwrap().push(req.headers().clone());
    let body = req.into_body().collect().await.unwrap().to_bytes();
    match answer {
        Answer::Refuse(code, message) => Ok(Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", code.to_string())
            .header("grpc-message", message)
            .body(Full::new(Bytes::new()).boxed())
            .unwrap()),
        Answer::Relay(sink) => {
            // gRPC's prefix: not compressed, then the length.
            assert_eq!(body[0], 0);
            let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
            assert_eq!(len, body.len() - 5);
            let relayed = strait_wire::http::post(
                &format!("{sink}/v1/traces"),
                &[(
                    "content-type".to_owned(),
                    "application/x-protobuf".to_owned(),
                )],
                body.slice(5..),
                &strait_wire::config::TlsSettings::default(),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
            assert_eq!(relayed.status, 200);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            // An empty ExportTraceServiceResponse, framed.
            let message = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
                .with_trailers(async move { Some(Ok(trailers)) });
            Ok(Response::builder()
                .header("content-type", "application/grpc")
                .body(message.boxed())
                .unwrap())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_sends_grpc_headers_and_counts_a_refusal_as_failed() {
    let sink = strait_otlp_sink::Sink::start("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    let (port, seen) = grpc_server(&ca_file, Answer::Relay(sink.endpoint())).await;
    let ca = ca_file.to_str().unwrap().to_owned();
    // 'static for grpc_env: leaked once per test run.
    let ca: &'static str = Box::leak(ca.into_boxed_str());
    let vars: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "4000"),
    ]));

    let mut cfg = config(TracingMode::Records, 1.0, 100);
    cfg.otlp_endpoint = Some(format!("https://localhost:{port}"));
    cfg.service_name = "my-mirror-maker".into();
    let handle = init_with(&cfg, &flow(), grpc_env(vars)).unwrap().unwrap();
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
    let headers = seen.lock().unwrap()[0].clone();
    assert_eq!(headers["content-type"], "application/grpc");
    assert_eq!(headers["te"], "trailers");
    assert_eq!(headers["grpc-timeout"], "4000m");
    assert_eq!(headers["x-test-alpn"], "h2");

    // INVALID_ARGUMENT: not retried, the spans are counted as lost.
    let (port, seen) = grpc_server(&ca_file, Answer::Refuse(3, "bad%20spans")).await;
    cfg.otlp_endpoint = Some(format!("https://localhost:{port}"));
    cfg.mode = TracingMode::Batch;
    let handle = init_with(&cfg, &flow(), grpc_env(vars)).unwrap().unwrap();
    handle.observer.submit(job(None, 1));
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
    assert_eq!(seen.lock().unwrap().len(), 1, "a refusal is not retried");
    let _ = handle.shutdown().await;
}
