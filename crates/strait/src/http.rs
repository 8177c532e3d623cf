//! A small HTTP/1.1 server (hyper) for `/metrics`, `/healthz` and `/readyz`.
//!
//! * `GET /metrics`: the [`Metrics`] exposition, OpenMetrics text by default; Prometheus text
//!   0.0.4 when the `Accept` header asks for `text/plain` and not for OpenMetrics.
//! * `GET /healthz`: `200 ok` while the process runs (liveness).
//! * `GET /readyz`: `200 ready` once the mirror has called [`Readiness::set_ready`], `503` with a
//!   one-line reason before that or after [`Readiness::set_not_ready`] (readiness).
//!
//! `HEAD` is accepted wherever `GET` is. Other methods get `405`, other paths `404`. The server
//! stops accepting when its [`CancellationToken`] is cancelled and lets requests in progress
//! finish (bounded by [`DRAIN_TIMEOUT`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// How long shutdown waits for requests in progress.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// A client must send its request headers within this time (slow-client protection).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed right away (a scrape endpoint needs few).
const MAX_CONNECTIONS: usize = 64;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// Whether the mirror is ready to be counted as serving, shared between the mirror and
/// `/readyz`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

#[derive(Debug)]
struct ReadinessInner {
    ready: AtomicBool,
    reason: Mutex<String>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new("starting: connecting to the source and target clusters")
    }
}

impl Readiness {
    /// Not ready, for `reason`.
    pub fn new(reason: impl Into<String>) -> Readiness {
        Readiness {
            inner: Arc::new(ReadinessInner {
                ready: AtomicBool::new(false),
                reason: Mutex::new(reason.into()),
            }),
        }
    }

    /// Marks the mirror ready.
    pub fn set_ready(&self) {
        self.inner.ready.store(true, Ordering::Release);
    }

    /// Marks the mirror not ready, with a one-line reason shown by `/readyz`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        let reason: String = reason.into();
        // Keep the response one line.
        let reason = reason.lines().next().unwrap_or("").to_string();
        *self
            .inner
            .reason
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = reason;
        self.inner.ready.store(false, Ordering::Release);
    }

    /// True once ready.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire)
    }

    /// Why it is not ready (meaningless when ready).
    pub fn reason(&self) -> String {
        self.inner
            .reason
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

struct State {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// Binds the listener (a separate step so that a busy port is a startup error, exit code 1).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Serves until `shutdown` is cancelled, then drains requests in progress.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    let state = Arc::new(State { metrics, readiness });
    let tracker = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if tracker.len() >= MAX_CONNECTIONS {
            drop(stream);
            continue;
        }
        let state = state.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "metrics listener: connection ended with an error");
            }
        });
    }
    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        tracing::debug!("metrics listener: gave up waiting for open connections");
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// True when the client accepts Prometheus text but did not ask for OpenMetrics.
fn wants_prometheus_text(req: &Request<Incoming>) -> bool {
    let accept = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    !accept.contains("application/openmetrics-text") && accept.contains("text/plain")
}

fn respond(req: &Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    if known && !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed: use GET\n",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    match path {
        "/metrics" if wants_prometheus_text(req) => text(
            StatusCode::OK,
            PROMETHEUS_TEXT,
            state.metrics.encode_prometheus(),
        ),
        "/metrics" => text(
            StatusCode::OK,
            OPENMETRICS,
            state.metrics.encode_openmetrics(),
        ),
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n"),
        "/readyz" if state.readiness.is_ready() => text(StatusCode::OK, PLAIN, "ready\n"),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            PLAIN,
            format!("not ready: {}\n", state.readiness.reason()),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: the endpoints are /metrics, /healthz and /readyz\n",
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn readiness_keeps_one_line_reasons() {
        let r = Readiness::default();
        assert!(!r.is_ready());
        assert!(r.reason().starts_with("starting"));
        r.set_ready();
        assert!(r.is_ready());
        r.set_not_ready("lost the target cluster\nstack trace...");
        assert!(!r.is_ready());
        assert_eq!(r.reason(), "lost the target cluster");
    }

    #[tokio::test]
    async fn bind_errors_are_runtime_errors_naming_metrics_listen() {
        let first = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = first.local_addr().unwrap();
        let err = bind(addr).await.unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.to_string()
                .starts_with("metrics.listen: cannot listen on"),
            "{err}"
        );
    }
}
