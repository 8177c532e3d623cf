//! A small HTTP/1.1 server (hyper) for `/metrics`, `/healthz` and `/readyz`.
//!
//! * `GET /metrics`: the [`Metrics`] exposition, OpenMetrics text by default; Prometheus text
//!   0.0.4 when the `Accept` header asks for `text/plain` and not for OpenMetrics.
//! * `GET /healthz` (liveness): `200` while the mirror's runtime runs its heartbeat, `503` once
//!   it has not for [`crate::observe::health::LIVENESS_TIMEOUT`] (wedged), with a JSON body.
//! * `GET /readyz` (readiness): `200` while the mirror runs and every assigned partition makes
//!   progress, `503` otherwise, with a JSON body naming each partition that is not ready and why
//!   (see [`crate::observe::health`]).
//!
//! `HEAD` is accepted wherever `GET` is. Other methods get `405`, other paths `404`. The server
//! stops accepting when its [`CancellationToken`] is cancelled and lets requests in progress
//! finish (bounded by [`DRAIN_TIMEOUT`]).
//!
//! [`spawn`] runs the server on a thread of its own with its own small runtime: a probe must get
//! an answer (a failing one) when the mirror's runtime is wedged, which a server on that runtime
//! could not give.

pub mod connections;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

use self::connections::{Connections, Limits};
use crate::error::{Error, Result};
pub use crate::observe::health::{Liveness, Readiness};
use crate::observe::metrics::Metrics;

/// How long shutdown waits for requests in progress.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds of the port's connections: a new connection is always taken, closing the least
/// recently active one of its peer or of the port when full (see [`connections`]). A connection
/// must complete a request within `idle` of opening or of its last answer (slow-client and
/// idle-connection protection: a scrape or a probe sends its request at once).
pub const LIMITS: Limits = Limits {
    total: 64,
    per_peer: 16,
    idle: Duration::from_secs(5),
};
/// How often connections past [`LIMITS`]`.idle` are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

struct State {
    metrics: Arc<Metrics>,
    readiness: Readiness,
    liveness: Liveness,
}

/// Binds the listener (a separate step so that a busy port is a startup error, exit code 1).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// The server thread started by [`spawn`].
#[derive(Debug)]
pub struct Server {
    done: tokio::sync::oneshot::Receiver<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Server {
    /// Waits until the server has stopped (after its shutdown token was cancelled).
    pub async fn stopped(self) {
        let _ = self.done.await;
        // The thread has nothing left to do once it signalled; joining cannot block long.
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Serves on a dedicated thread with its own runtime until `shutdown` is cancelled, and starts
/// the liveness heartbeat on the calling (the mirror's) runtime.
pub fn spawn(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    liveness: Liveness,
    shutdown: CancellationToken,
) -> Result<Server> {
    liveness.spawn_heartbeat(shutdown.clone());
    // A tokio listener belongs to the runtime that created it: hand the socket over.
    let listener = listener
        .into_std()
        .map_err(|e| Error::Runtime(format!("metrics listener: {e}")))?;
    let (tx, done) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("strait-http".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "metrics listener: cannot start its runtime; /metrics, /healthz and /readyz are not served");
                    let _ = tx.send(());
                    return;
                }
            };
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, metrics, readiness, liveness, shutdown).await,
                    Err(e) => tracing::error!(error = %e, "metrics listener: cannot register the socket; /metrics, /healthz and /readyz are not served"),
                }
            });
            let _ = tx.send(());
        })
        .map_err(|e| Error::Runtime(format!("cannot start the metrics listener thread: {e}")))?;
    Ok(Server { done, thread })
}

/// Serves until `shutdown` is cancelled, then drains requests in progress.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    liveness: Liveness,
    shutdown: CancellationToken,
) {
    let state = Arc::new(State {
        metrics,
        readiness,
        liveness,
    });
    let tracker = TaskTracker::new();
    let table: Arc<Mutex<Connections<CancellationToken>>> =
        Arc::new(Mutex::new(Connections::new(LIMITS)));
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = sweep.tick() => {
                for close in lock(&table).expired(Instant::now()) {
                    close.cancel();
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Never refuse: make room by closing the least recently active connection instead, so
        // that idle connections held by a neighbour cannot keep a probe out.
        let close = CancellationToken::new();
        let (id, evicted) = lock(&table).admit(peer.ip(), Instant::now(), close.clone());
        if !evicted.is_empty() {
            tracing::debug!(%peer, closed = evicted.len(), "metrics listener: at its connection limit, closed the least recently active");
        }
        for old in evicted {
            old.cancel();
        }
        let state = state.clone();
        let shutdown = shutdown.clone();
        let table = table.clone();
        tracker.spawn(async move {
            let answered = table.clone();
            let service = service_fn(move |req| {
                let state = state.clone();
                let answered = answered.clone();
                async move {
                    let resp = respond(&req, &state);
                    lock(&answered).answered(id, Instant::now());
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(LIMITS.idle)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                // Idle, or evicted for a newer connection: nothing is in progress, drop it.
                _ = close.cancelled() => Ok(()),
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            lock(&table).remove(id);
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

/// The table's lock. Nothing panics while holding it; if something did, the table is still
/// consistent (every method leaves it so), so a poisoned lock is used as is.
fn lock<T>(table: &Mutex<T>) -> MutexGuard<'_, T> {
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        "/healthz" => {
            let now = Instant::now();
            let status = if state.liveness.is_alive(now) {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, JSON, state.liveness.to_json(now))
        }
        "/readyz" => {
            let (ready, body) = state.readiness.report();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, JSON, body)
        }
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
