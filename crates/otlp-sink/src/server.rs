//! The HTTP side: `POST /v1/traces` (OTLP/HTTP protobuf), `GET /healthz`.
//!
//! Requests are answered as the OTLP/HTTP specification asks: `200` with an
//! `ExportTraceServiceResponse` (empty, or with `partial_success` when spans had invalid ids),
//! `400` for a body that is not an `ExportTraceServiceRequest`, `413` for a body over
//! [`MAX_BODY_BYTES`] (compressed or not), `415` for JSON or an unknown content encoding, `404`
//! and `405` otherwise. Each connection is served by its own task; the server stops when the
//! [`Sink`] is stopped or dropped.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::span::{SpanRecord, flatten};

/// Largest accepted request body, before and after gzip decoding.
pub const MAX_BODY_BYTES: usize = 32 << 20;
const PROTOBUF: &str = "application/x-protobuf";

/// Counters of what the sink received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkStats {
    /// Export requests accepted (`200`).
    pub requests: u64,
    /// Requests refused (`4xx`).
    pub refused_requests: u64,
    /// Spans stored.
    pub spans: u64,
    /// Spans skipped for an invalid (zero or wrongly sized) trace or span id.
    pub invalid_spans: u64,
    /// Oldest spans evicted because the buffer was full (see [`Sink::start_with_capacity`]).
    pub evicted_spans: u64,
}

struct Shared {
    spans: Mutex<VecDeque<SpanRecord>>,
    capacity: usize,
    notify: Notify,
    requests: AtomicU64,
    refused: AtomicU64,
    stored: AtomicU64,
    invalid: AtomicU64,
    evicted: AtomicU64,
}

impl Shared {
    fn spans(&self) -> MutexGuard<'_, VecDeque<SpanRecord>> {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn store(&self, new: Vec<SpanRecord>) {
        let n = new.len() as u64;
        {
            let mut spans = self.spans();
            spans.extend(new);
            let excess = spans.len().saturating_sub(self.capacity);
            if excess > 0 {
                spans.drain(..excess);
                self.evicted.fetch_add(excess as u64, Ordering::Relaxed);
            }
        }
        self.stored.fetch_add(n, Ordering::Relaxed);
        self.notify.notify_waiters();
    }
}

/// A running OTLP/HTTP receiver. Stops when [`Sink::stop`] is called or it is dropped.
pub struct Sink {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("addr", &self.addr)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Sink {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and serves in the background on the current tokio
    /// runtime, keeping every span.
    pub async fn start(addr: &str) -> Result<Sink> {
        Sink::start_with_capacity(addr, usize::MAX).await
    }

    /// Like [`Sink::start`], keeping at most `capacity` spans (the oldest are evicted and
    /// counted in [`SinkStats::evicted_spans`]); for long-running use.
    pub async fn start_with_capacity(addr: &str, capacity: usize) -> Result<Sink> {
        let resolved: SocketAddr = match tokio::net::lookup_host(addr).await {
            Ok(mut it) => it.next(),
            Err(_) => None,
        }
        .ok_or_else(|| Error::Address { addr: addr.into() })?;
        let listener = TcpListener::bind(resolved)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.into(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Bind {
            addr: addr.into(),
            source,
        })?;
        let shared = Arc::new(Shared {
            spans: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            notify: Notify::new(),
            requests: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            stored: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        });
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, shared.clone(), shutdown.clone()));
        Ok(Sink {
            addr: local,
            shared,
            shutdown,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OTLP/HTTP base endpoint, `http://<addr>` (exporters append `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A copy of the spans received so far, in arrival order.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.shared.spans().iter().cloned().collect()
    }

    /// Removes and returns the spans received so far.
    pub fn take_spans(&self) -> Vec<SpanRecord> {
        self.shared.spans().drain(..).collect()
    }

    /// What has been received.
    pub fn stats(&self) -> SinkStats {
        let s = &self.shared;
        SinkStats {
            requests: s.requests.load(Ordering::Relaxed),
            refused_requests: s.refused.load(Ordering::Relaxed),
            spans: s.stored.load(Ordering::Relaxed),
            invalid_spans: s.invalid.load(Ordering::Relaxed),
            evicted_spans: s.evicted.load(Ordering::Relaxed),
        }
    }

    /// Waits until `predicate` holds for the spans received so far, and returns them; fails
    /// with [`Error::Timeout`] after `timeout`.
    pub async fn wait_for<F>(&self, predicate: F, timeout: Duration) -> Result<Vec<SpanRecord>>
    where
        F: Fn(&[SpanRecord]) -> bool,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Register for the wake-up before looking, so a store in between is not missed.
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let spans = self.spans();
            if predicate(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Error::Timeout {
                    waited: timeout,
                    spans: spans.len(),
                    addr: self.addr,
                });
            }
        }
    }

    /// Stops accepting and waits for the accept loop to end.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Usually out of file descriptors: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(req, &shared).await) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                }
            }
        });
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let response = route(req, shared).await;
    if response.status().is_client_error() {
        shared.refused.fetch_add(1, Ordering::Relaxed);
    }
    response
}

async fn route(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/traces") => export(req, shared).await,
        (&Method::GET | &Method::HEAD, "/" | "/healthz") => text(StatusCode::OK, "ok"),
        (_, "/v1/traces") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "use POST with an OTLP ExportTraceServiceRequest",
        ),
        (_, "/v1/metrics" | "/v1/logs") => text(
            StatusCode::NOT_FOUND,
            "this sink only receives traces (/v1/traces)",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found; POST spans to /v1/traces"),
    }
}

async fn export(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let content_type = header(CONTENT_TYPE).unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if media_type != PROTOBUF {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &format!(
                "content type {content_type:?} is not supported; send OTLP/HTTP protobuf \
                 ({PROTOBUF}), e.g. OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            ),
        );
    }
    let gzip = match header(CONTENT_ENCODING).as_deref() {
        None | Some("" | "identity") => false,
        Some("gzip") => true,
        Some(other) => {
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!("content encoding {other:?} is not supported; use gzip or none"),
            );
        }
    };
    let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is over {MAX_BODY_BYTES} bytes or was cut short"),
            );
        }
    };
    let body = if gzip {
        let mut out = Vec::new();
        let read = flate2::read::GzDecoder::new(&body[..])
            .take(MAX_BODY_BYTES as u64 + 1)
            .read_to_end(&mut out);
        match read {
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!("the body is not valid gzip: {e}"),
                );
            }
            Ok(n) if n > MAX_BODY_BYTES => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the decompressed body is over {MAX_BODY_BYTES} bytes"),
                );
            }
            Ok(_) => Bytes::from(out),
        }
    } else {
        body
    };
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("the body is not an ExportTraceServiceRequest: {e}"),
            );
        }
    };
    let (spans, invalid) = flatten(&request);
    shared.requests.fetch_add(1, Ordering::Relaxed);
    shared.invalid.fetch_add(invalid as u64, Ordering::Relaxed);
    shared.store(spans);
    let answer = ExportTraceServiceResponse {
        partial_success: (invalid > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: invalid as i64,
            error_message: "spans with an all-zero or wrongly sized trace or span id".into(),
        }),
    };
    let mut r = Response::new(Full::new(Bytes::from(answer.encode_to_vec())));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROTOBUF));
    r
}
