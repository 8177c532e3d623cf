//! One connection to one broker: TCP (+ TLS) (+ SASL), ApiVersions, then pipelined requests.
//!
//! Setup runs in the caller's task: TCP connect (every resolved address in turn, each with its
//! share of the time left, so an address that drops packets cannot use it all up), the TLS
//! handshake, ApiVersions and SASL, all within `socket.connection.setup.timeout.ms`. Then two
//! tasks own the socket: a writer that drains a queue of encoded frames (writing the frames it
//! finds queued with one vectored write, from the buffers they are in), and a reader that splits
//! response frames (check-then-parse, capped at `receive.message.max.bytes`) and hands each to the
//! waiter registered under its correlation id. Requests are encoded and responses decoded in the
//! caller's task, from the frame's `Bytes`, so fetched records stay zero-copy.
//!
//! A request future can be dropped at any time: a guard removes its waiter, and a late response
//! is discarded. When the socket breaks every waiter gets [`Error::Disconnected`]; a request that
//! times out gets [`Error::Timeout`] and, as the Java client does, closes the connection.
//! Waiting for room in the write queue counts against that timeout. A writer that gets no byte
//! accepted for `request.timeout.ms` (a broker or proxy that stopped reading) closes the
//! connection too, and every waiter gets [`Error::WriteStalled`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ClientConfig, SaslMechanism, SaslSettings};
use crate::error::{Error, Result, error_name};
use crate::frame::{self, FrameError, Gather, OutFrame};
use crate::sasl::{self, ScramClient, ScramHash};
use crate::tls::TlsContext;
use crate::version::{self, ApiVersionTable};
use crate::{aws, oauth};

/// Frames queued for the writer task before `send` waits (backpressure).
const WRITE_QUEUE: usize = 256;

/// At most this many queued frames are written between two flushes.
const COALESCE: usize = 64;

/// The software name and version sent in ApiVersions v3+ (shown in broker metrics).
const SOFTWARE_NAME: &str = "strait-wire";

/// A byte stream: TCP or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}
type BoxStream = Box<dyn Stream>;

/// A connection to one broker. Cheap to clone; all clones share the socket. Many requests can be
/// in flight at once. Dropping the last clone closes the socket.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Shared>,
}

struct Shared {
    broker: String,
    node_id: OnceLock<i32>,
    versions: ApiVersionTable,
    client_id: Option<StrBytes>,
    request_timeout: Duration,
    principal: Option<String>,
    next_correlation: AtomicI32,
    pending: Arc<Pending>,
    queue: mpsc::Sender<OutFrame>,
    cancel: CancellationToken,
    /// The SASL session's lifetime, when the broker limits it (KIP-368).
    session: Option<SaslSession>,
}

/// A SASL session the broker ends at `expires` (`connections.max.reauth.ms`, or the
/// credential's own lifetime). Instead of re-authenticating in place, which would stop every
/// request pipelined on the connection, the [`Client`](crate::Client) opens a fresh, newly
/// authenticated connection from `renew_at` on and lets requests already sent on this one finish.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SaslSession {
    renew_at: Instant,
    expires: Instant,
}

impl SaslSession {
    /// Renewal is due at 85-95 % of the lifetime (as the Java client re-authenticates), jittered
    /// so that the connections of many clients authenticated together do not renew together.
    fn new(authenticated: Instant, lifetime: Duration) -> SaslSession {
        let share = rand::random_range(0.85..0.95);
        SaslSession {
            renew_at: authenticated + lifetime.mul_f64(share),
            expires: authenticated + lifetime,
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Why a connection ended; turned into an [`Error`] for every waiter.
#[derive(Debug, Clone)]
enum CloseReason {
    Disconnected(String),
    /// The writer made no progress for this long (`request.timeout.ms`).
    WriteStalled(Duration),
    TooLarge {
        size: u64,
        max: usize,
    },
    Protocol(String),
}

impl CloseReason {
    fn to_error(&self, broker: &str) -> Error {
        match self {
            CloseReason::Disconnected(reason) => Error::Disconnected {
                broker: broker.to_owned(),
                reason: reason.clone(),
            },
            CloseReason::WriteStalled(after) => Error::WriteStalled {
                broker: broker.to_owned(),
                after: *after,
            },
            CloseReason::TooLarge { size, max } => Error::FrameTooLarge {
                broker: broker.to_owned(),
                size: *size,
                max: *max,
            },
            CloseReason::Protocol(m) => Error::protocol(broker, m.clone()),
        }
    }
}

type Waiter = oneshot::Sender<Result<Bytes>>;

/// Waiters by correlation id, shared by `send` and the reader task.
struct Pending {
    broker: String,
    state: Mutex<PendingState>,
}

#[derive(Default)]
struct PendingState {
    waiters: HashMap<i32, Waiter>,
    closed: Option<CloseReason>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        // A panic while holding this lock leaves the map consistent (plain inserts/removes).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter, unless the connection is already closed.
    fn register(&self, correlation: i32, waiter: Waiter) -> Result<()> {
        let mut st = self.lock();
        if let Some(reason) = &st.closed {
            return Err(reason.to_error(&self.broker));
        }
        st.waiters.insert(correlation, waiter);
        Ok(())
    }

    fn take(&self, correlation: i32) -> Option<Waiter> {
        self.lock().waiters.remove(&correlation)
    }

    /// Marks the connection closed (first reason wins) and fails every waiter.
    fn close(&self, reason: CloseReason) {
        let waiters: Vec<Waiter> = {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.closed = Some(reason);
            }
            st.waiters.drain().map(|(_, w)| w).collect()
        };
        let reason = self.lock().closed.clone();
        if let Some(reason) = reason {
            for w in waiters {
                let _ = w.send(Err(reason.to_error(&self.broker)));
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }
}

/// Removes a waiter when the request future is dropped (cancel safety).
struct WaiterGuard<'a> {
    pending: &'a Pending,
    correlation: i32,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.pending.take(self.correlation);
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("broker", &self.inner.broker)
            .field("node_id", &self.node_id())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Connection {
    /// Opens a connection to `addr` (`host:port`) with the TLS/SASL settings of `cfg`.
    /// (The [`Client`](crate::Client) reuses one TLS context for all its connections; this
    /// standalone entry point reads the PEM files every time.)
    pub async fn connect(addr: &str, cfg: &ClientConfig) -> Result<Connection> {
        let tls = if cfg.security_protocol().uses_tls() {
            Some(TlsContext::new(cfg.tls())?)
        } else {
            None
        };
        Connection::open(addr, None, cfg, tls.as_ref()).await
    }

    /// Connects and runs the setup (TLS, ApiVersions, SASL) under the setup timeout.
    pub(crate) async fn open(
        addr: &str,
        node_id: Option<i32>,
        cfg: &ClientConfig,
        tls: Option<&TlsContext>,
    ) -> Result<Connection> {
        Connection::open_with(addr, None, node_id, cfg, tls).await
    }

    /// [`open`](Self::open), with the addresses of `addr` given instead of resolved (tests).
    async fn open_with(
        addr: &str,
        resolved: Option<&[SocketAddr]>,
        node_id: Option<i32>,
        cfg: &ClientConfig,
        tls: Option<&TlsContext>,
    ) -> Result<Connection> {
        let limit = cfg.connection_setup_timeout();
        let deadline = Instant::now() + limit;
        let setup = async {
            let addrs = match resolved {
                Some(a) => a.to_vec(),
                None => resolve(addr).await?,
            };
            let tcp = tcp_connect(addr, &addrs, deadline, cfg.keepalive()).await?;
            Connection::open_inner(addr, tcp, node_id, cfg, tls).await
        };
        match tokio::time::timeout_at(deadline, setup).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                broker: addr.to_owned(),
                api: "connection setup (TCP, TLS, ApiVersions, SASL)".into(),
                after: limit,
                setting: "socket.connection.setup.timeout.ms",
            }),
        }
    }

    async fn open_inner(
        addr: &str,
        tcp: TcpStream,
        node_id: Option<i32>,
        cfg: &ClientConfig,
        tls: Option<&TlsContext>,
    ) -> Result<Connection> {
        let _ = tcp.set_nodelay(true);
        let stream: BoxStream = match tls {
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                Box::new(tls.connect(host, addr, tcp).await?)
            }
            None => Box::new(tcp),
        };
        let client_id = Some(StrBytes::from_string(cfg.client_id().to_owned()));
        let mut hs = Handshake {
            stream,
            buf: BytesMut::with_capacity(8 * 1024),
            correlation: 0,
            broker: addr,
            max: cfg.max_response_size(),
            client_id: client_id.clone(),
            tls,
        };
        let versions = hs.api_versions().await?;
        let mut session = None;
        if let Some(sasl) = cfg.sasl() {
            let authenticated = Instant::now();
            session = hs
                .authenticate(&versions, sasl)
                .await?
                .map(|lifetime| SaslSession::new(authenticated, lifetime));
        }
        let principal = cfg
            .sasl_principal()
            .or_else(|| tls.and_then(|t| t.principal()));
        let Handshake {
            stream,
            buf,
            correlation,
            ..
        } = hs;

        let (rd, wr) = tokio::io::split(stream);
        let pending = Arc::new(Pending {
            broker: addr.to_owned(),
            state: Mutex::new(PendingState::default()),
        });
        let cancel = CancellationToken::new();
        let (queue, rx) = mpsc::channel(WRITE_QUEUE);
        tokio::spawn(write_loop(
            StallGuard::new(wr, cfg.request_timeout()),
            rx,
            cancel.clone(),
            pending.clone(),
        ));
        tokio::spawn(read_loop(
            rd,
            buf,
            cfg.max_response_size(),
            cancel.clone(),
            pending.clone(),
            tls.cloned(),
        ));
        let node = OnceLock::new();
        if let Some(id) = node_id {
            let _ = node.set(id);
        }
        tracing::debug!(broker = addr, node_id, "connected");
        Ok(Connection {
            inner: Arc::new(Shared {
                broker: addr.to_owned(),
                node_id: node,
                versions,
                client_id,
                request_timeout: cfg.request_timeout(),
                principal,
                next_correlation: AtomicI32::new(correlation),
                pending,
                queue,
                cancel,
                session,
            }),
        })
    }

    /// True when `other` is a clone of this connection (the same socket).
    pub fn same_as(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// True once the broker-limited SASL session should be renewed: new requests belong on a
    /// new connection (see [`SaslSession`]).
    pub(crate) fn renewal_due(&self, now: Instant) -> bool {
        self.inner.session.is_some_and(|s| now >= s.renew_at)
    }

    /// True once the broker-limited SASL session has ended: the broker closes the connection
    /// at its next request.
    pub(crate) fn session_expired(&self, now: Instant) -> bool {
        self.inner.session.is_some_and(|s| now >= s.expires)
    }

    /// The broker's node id, if known (bootstrap connections learn it from metadata).
    pub fn node_id(&self) -> Option<i32> {
        self.inner.node_id.get().copied()
    }

    pub(crate) fn set_node_id(&self, id: i32) {
        let _ = self.inner.node_id.set(id);
    }

    /// `host:port` this connection goes to.
    pub fn broker(&self) -> &str {
        &self.inner.broker
    }

    /// The principal the broker most likely sees (`User:alice` with SASL, `CN=alice` of the
    /// client certificate with mTLS), for error messages.
    pub fn principal(&self) -> Option<&str> {
        self.inner.principal.as_deref()
    }

    /// `request.timeout.ms` of this connection.
    pub fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// Whether the connection is closed (broken, timed out, or closed by [`close`](Self::close)).
    pub fn is_closed(&self) -> bool {
        self.inner.pending.is_closed() || self.inner.cancel.is_cancelled()
    }

    /// Closes the connection; requests in flight fail with [`Error::Disconnected`].
    pub fn close(&self) {
        self.inner
            .pending
            .close(CloseReason::Disconnected("closed by the client".into()));
        self.inner.cancel.cancel();
    }

    /// The broker's advertised range for `api_key` intersected with what kafka-protocol can
    /// encode. `None` if the broker lacks the API or the ranges do not overlap.
    pub fn supported_versions(&self, api_key: ApiKey) -> Option<RangeInclusive<i16>> {
        let broker = self.inner.versions.broker_range(api_key as i16)?;
        version::intersect(&broker, &version::crate_range(api_key.valid_versions()))
    }

    /// The highest version of `R` in (broker ∩ kafka-protocol ∩ `wanted`).
    pub fn pick_version<R: Request>(&self, wanted: RangeInclusive<i16>) -> Result<i16> {
        let broker = self.inner.versions.broker_range(R::KEY);
        version::pick(
            broker.clone(),
            version::crate_range(R::VERSIONS),
            wanted.clone(),
        )
        .ok_or_else(|| Error::UnsupportedVersion {
            broker: self.inner.broker.clone(),
            api: version::api_name(R::KEY),
            broker_versions: version::fmt_range(broker.as_ref()),
            client_versions: version::fmt_range(Some(&version::crate_range(R::VERSIONS))),
            wanted: version::fmt_range(Some(&wanted)),
        })
    }

    /// Sends any kafka-protocol request at `version` and waits for its response, at most
    /// `request.timeout.ms`.
    ///
    /// Not for requests the broker does not answer (Produce with acks=0).
    pub async fn send<R: Request>(&self, req: R, version: i16) -> Result<R::Response> {
        self.send_with_timeout(req, version, self.inner.request_timeout)
            .await
    }

    /// [`send`](Self::send) with an explicit timeout (Fetch adds its max wait to it).
    pub async fn send_with_timeout<R: Request>(
        &self,
        req: R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        let frame = self.send_raw::<R>(&req, version, timeout).await?;
        decode_response::<R>(frame, version).map_err(|m| Error::protocol(&self.inner.broker, m))
    }

    /// Sends and returns the response frame after the length prefix (still holding the header).
    async fn send_raw<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<Bytes> {
        self.send_frame::<R>(version, timeout, |correlation, client_id| {
            encode_request(req, version, correlation, client_id).map(OutFrame::Whole)
        })
        .await
    }

    /// Sends the frame `encode` makes for the request's correlation id and the client id (a
    /// Produce request encoded around its batches), and waits for the response as
    /// [`send_with_timeout`](Self::send_with_timeout) does.
    pub(crate) async fn send_encoded<R: Request>(
        &self,
        version: i16,
        timeout: Duration,
        encode: impl FnOnce(i32, Option<&StrBytes>) -> std::result::Result<OutFrame, String>,
    ) -> Result<R::Response> {
        let frame = self.send_frame::<R>(version, timeout, encode).await?;
        decode_response::<R>(frame, version).map_err(|m| Error::protocol(&self.inner.broker, m))
    }

    /// Checks the version, encodes with `encode`, queues the frame and waits for its response.
    async fn send_frame<R: Request>(
        &self,
        version: i16,
        timeout: Duration,
        encode: impl FnOnce(i32, Option<&StrBytes>) -> std::result::Result<OutFrame, String>,
    ) -> Result<Bytes> {
        let inner = &*self.inner;
        let broker_range = inner.versions.broker_range(R::KEY);
        let crate_range = version::crate_range(R::VERSIONS);
        let broker_ok = broker_range.as_ref().is_some_and(|r| r.contains(&version));
        if !broker_ok || !crate_range.contains(&version) {
            return Err(Error::UnsupportedVersion {
                broker: inner.broker.clone(),
                api: version::api_name(R::KEY),
                broker_versions: version::fmt_range(broker_range.as_ref()),
                client_versions: version::fmt_range(Some(&crate_range)),
                wanted: format!("v{version}"),
            });
        }
        let correlation = inner.next_correlation.fetch_add(1, Ordering::Relaxed);
        let frame = encode(correlation, inner.client_id.as_ref()).map_err(|m| {
            Error::InvalidArgument(format!("cannot encode {}: {m}", version::api_name(R::KEY)))
        })?;

        let (tx, rx) = oneshot::channel();
        inner.pending.register(correlation, tx)?;
        let _guard = WaiterGuard {
            pending: &inner.pending,
            correlation,
        };
        let exchange = async {
            // Waiting for room in the write queue counts against the request's time (a writer
            // blocked by a broker that stopped reading fills the queue), and ends when the
            // connection closes: nobody drains the queue then.
            let queued = tokio::select! {
                sent = inner.queue.send(frame) => sent.is_ok(),
                () = inner.cancel.cancelled() => false,
            };
            if !queued {
                return Err(self.closed_error());
            }
            rx.await.unwrap_or_else(|_| Err(self.closed_error()))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => {
                let api = version::api_name(R::KEY);
                tracing::warn!(broker = %inner.broker, api, ?timeout, "request timed out; closing the connection");
                inner.pending.close(CloseReason::Disconnected(format!(
                    "a {api} request timed out after {timeout:?}, so the connection was closed"
                )));
                inner.cancel.cancel();
                Err(Error::Timeout {
                    broker: inner.broker.clone(),
                    api,
                    after: timeout,
                    setting: "request.timeout.ms",
                })
            }
        }
    }

    fn closed_error(&self) -> Error {
        let reason = self.inner.pending.lock().closed.clone();
        reason
            .unwrap_or_else(|| CloseReason::Disconnected("the connection is closed".into()))
            .to_error(&self.inner.broker)
    }
}

/// Every address `addr` (`host:port`) resolves to, in the resolver's order.
async fn resolve(addr: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|source| Error::connect(addr, source))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::connect(
            addr,
            io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address"),
        ));
    }
    Ok(addrs)
}

/// Opens TCP to the first of `addrs` (the addresses of `broker`) that accepts, trying each in
/// turn (Java's `client.dns.lookup=use_all_dns_ips`).
///
/// An address that silently drops packets neither accepts nor refuses, and the OS would wait
/// minutes for it. So each attempt gets its own timeout: an equal share of the setup time left
/// (until `deadline`) among the addresses not tried yet. A black hole first in the list then
/// leaves time for the addresses after it, and an address that fails fast (refused,
/// unreachable) hands its unused share on to the rest.
///
/// With `keepalive` (`socket.keepalive.enable`, on by default as the Java client always sets
/// it) the OS probes idle connections, so a broker that vanished without a reset is noticed and
/// NAT or firewall state for a quiet connection is kept.
async fn tcp_connect(
    broker: &str,
    addrs: &[SocketAddr],
    deadline: Instant,
    keepalive: bool,
) -> Result<TcpStream> {
    let mut failures: Vec<String> = Vec::new();
    let mut last_kind = io::ErrorKind::NotFound;
    for (i, &a) in addrs.iter().enumerate() {
        let untried = u32::try_from(addrs.len() - i).unwrap_or(u32::MAX);
        let share = deadline.saturating_duration_since(Instant::now()) / untried;
        let err = match tokio::time::timeout(share, connect_socket(a, keepalive)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no answer within {} ms, its share of socket.connection.setup.timeout.ms \
                     (a firewall dropping packets?)",
                    share.as_millis()
                ),
            ),
        };
        tracing::debug!(broker, address = %a, error = %err, "TCP connect failed; trying the next address");
        last_kind = err.kind();
        failures.push(if addrs.len() == 1 {
            err.to_string()
        } else {
            format!("{a}: {err}")
        });
    }
    let detail = match failures.len() {
        0 => "the name resolved to no address".to_owned(),
        1 => failures.remove(0),
        n => format!("all {n} addresses failed ({})", failures.join("; ")),
    };
    Err(Error::connect(broker, io::Error::new(last_kind, detail)))
}

/// One TCP connect to `addr`, with SO_KEEPALIVE set as asked before connecting.
async fn connect_socket(addr: SocketAddr, keepalive: bool) -> io::Result<TcpStream> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_keepalive(keepalive)?;
    socket.connect(addr).await
}

/// The request header of an `R` request.
pub(crate) fn request_header<R: Request>(
    version: i16,
    correlation: i32,
    client_id: Option<&StrBytes>,
) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(client_id.cloned())
}

/// Encodes header + body behind a 4-byte size, in one exactly-sized buffer.
pub(crate) fn encode_request<R: Request>(
    req: &R,
    version: i16,
    correlation: i32,
    client_id: Option<&StrBytes>,
) -> std::result::Result<Bytes, String> {
    let header = request_header::<R>(version, correlation, client_id);
    let hv = R::header_version(version);
    let size = header.compute_size(hv).map_err(|e| e.to_string())?
        + req.compute_size(version).map_err(|e| e.to_string())?;
    let size32 =
        u32::try_from(size).map_err(|_| format!("request of {size} bytes is too large"))?;
    let mut buf = BytesMut::with_capacity(frame::PREFIX + size);
    buf.put_u32(size32);
    header.encode(&mut buf, hv).map_err(|e| e.to_string())?;
    req.encode(&mut buf, version).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

/// Appended to decode errors: what a malformed response means and what to check.
const MALFORMED: &str = " (not a valid Kafka response: check that the address is a Kafka \
                         listener and not another service or a proxy, and the broker's logs)";

/// Decodes a response frame (after the size prefix) for request type `R`.
pub(crate) fn decode_response<R: Request>(
    mut frame: Bytes,
    version: i16,
) -> std::result::Result<R::Response, String> {
    let api = version::api_name(R::KEY);
    ResponseHeader::decode(&mut frame, R::Response::header_version(version)).map_err(|e| {
        format!("cannot decode the {api} v{version} response header: {e}{MALFORMED}")
    })?;
    let resp = R::Response::decode(&mut frame, version)
        .map_err(|e| format!("cannot decode the {api} v{version} response: {e}{MALFORMED}"))?;
    if !frame.is_empty() {
        tracing::debug!(
            api,
            version,
            trailing = frame.len(),
            "response has trailing bytes"
        );
    }
    Ok(resp)
}

/// Decodes the answer to an ApiVersions request sent at `version`. The header is v0 for every
/// version, and a broker that does not know `version` answers UNSUPPORTED_VERSION in the v0
/// body format, so the error code (the body's first field) decides the body version.
pub(crate) fn decode_api_versions(
    mut frame: Bytes,
    version: i16,
) -> std::result::Result<ApiVersionsResponse, String> {
    ResponseHeader::decode(&mut frame, 0)
        .map_err(|e| format!("cannot decode the ApiVersions response header: {e}{MALFORMED}"))?;
    let code = frame
        .get(..2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| format!("the ApiVersions response is empty{MALFORMED}"))?;
    let body_version = if code == ResponseError::UnsupportedVersion.code() {
        0
    } else {
        version
    };
    ApiVersionsResponse::decode(&mut frame, body_version).map_err(|e| {
        format!("cannot decode the ApiVersions v{body_version} response: {e}{MALFORMED}")
    })
}

/// Request/response over the raw stream, before the connection is handed to its tasks.
struct Handshake<'a> {
    stream: BoxStream,
    buf: BytesMut,
    correlation: i32,
    broker: &'a str,
    max: usize,
    client_id: Option<StrBytes>,
    tls: Option<&'a TlsContext>,
}

impl Handshake<'_> {
    fn io_error(&self, e: io::Error, during: &str) -> Error {
        if let Some(tls) = self.tls
            && let Some(err) = tls.classify(self.broker, &e)
        {
            return err;
        }
        // Only here, while connecting, is a mismatched listener a likely cause.
        Error::Disconnected {
            broker: self.broker.to_owned(),
            reason: format!(
                "{during}: {e}; this happened while connecting, so check that security.protocol \
                 matches the broker's listener"
            ),
        }
    }

    /// One round trip; returns the response frame (header included).
    async fn round_trip<R: Request>(&mut self, req: &R, version: i16) -> Result<Bytes> {
        let api = version::api_name(R::KEY);
        self.correlation += 1;
        let frame = encode_request(req, version, self.correlation, self.client_id.as_ref())
            .map_err(|m| Error::InvalidArgument(format!("cannot encode {api}: {m}")))?;
        let during = format!("during {api}");
        if let Err(e) = self.stream.write_all(&frame).await {
            return Err(self.io_error(e, &during));
        }
        if let Err(e) = self.stream.flush().await {
            return Err(self.io_error(e, &during));
        }
        match frame::read_frame(&mut self.stream, &mut self.buf, self.max).await {
            Ok(Some(f)) => Ok(f),
            Ok(None) | Err(FrameError::Truncated { .. }) => Err(Error::Disconnected {
                broker: self.broker.to_owned(),
                reason: format!(
                    "the broker closed the connection {during} (wrong security.protocol for this \
                     listener, or the broker rejected the client)"
                ),
            }),
            Err(FrameError::Io(e)) => Err(self.io_error(e, &during)),
            Err(FrameError::TooLarge { size, max }) => Err(Error::FrameTooLarge {
                broker: self.broker.to_owned(),
                size,
                max,
            }),
            Err(FrameError::Malformed(m)) => {
                Err(Error::protocol(self.broker, format!("{during}: {m}")))
            }
        }
    }

    async fn call<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let frame = self.round_trip(req, version).await?;
        decode_response::<R>(frame, version).map_err(|m| Error::protocol(self.broker, m))
    }

    /// ApiVersions at the highest version we know; on UNSUPPORTED_VERSION the broker answers in
    /// v0 format with its own ApiVersions range, and we retry at the highest common version.
    async fn api_versions(&mut self) -> Result<ApiVersionTable> {
        let ours = version::crate_range(ApiVersionsRequest::VERSIONS);
        let mut v = *ours.end();
        for _attempt in 0..2 {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(SOFTWARE_NAME))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            let frame = self.round_trip(&req, v).await?;
            let resp =
                decode_api_versions(frame, v).map_err(|m| Error::protocol(self.broker, m))?;
            if resp.error_code == 0 {
                return Ok(ApiVersionTable::from_response(&resp));
            }
            if resp.error_code == ResponseError::UnsupportedVersion.code() {
                let table = ApiVersionTable::from_response(&resp);
                let broker = table.broker_range(ApiKey::ApiVersions as i16);
                match version::pick(broker, ours.clone(), 0..=v - 1) {
                    Some(next) => {
                        tracing::debug!(
                            broker = self.broker,
                            from = v,
                            to = next,
                            "ApiVersions fallback"
                        );
                        v = next;
                        continue;
                    }
                    None => break,
                }
            }
            let code =
                ResponseError::try_from_code(resp.error_code).unwrap_or(ResponseError::Unknown(0));
            return Err(Error::broker(
                code,
                format!("ApiVersions v{v} to {}", self.broker),
            ));
        }
        Err(Error::UnsupportedVersion {
            broker: self.broker.to_owned(),
            api: "ApiVersions".into(),
            broker_versions: "unknown".into(),
            client_versions: version::fmt_range(Some(&ours)),
            wanted: "any".into(),
        })
    }

    async fn authenticate(
        &mut self,
        versions: &ApiVersionTable,
        sasl: &SaslSettings,
    ) -> Result<Option<Duration>> {
        let (mechanism, username, password) = (sasl.mechanism, &sasl.username, &sasl.password);
        let mech = mechanism.name();
        let auth_err = |message: String| Error::Authentication {
            broker: self.broker.to_owned(),
            mechanism: mech.to_owned(),
            message,
        };
        let pick = |key: ApiKey, range: RangeInclusive<i16>, crate_r| {
            version::pick(versions.broker_range(key as i16), crate_r, range)
        };
        let Some(hs_version) = pick(
            ApiKey::SaslHandshake,
            1..=1,
            version::crate_range(SaslHandshakeRequest::VERSIONS),
        ) else {
            return Err(auth_err(
                "the broker does not offer SASL on this listener (no SaslHandshake v1); check \
                 security.protocol and the broker port"
                    .into(),
            ));
        };
        let auth_version = pick(
            ApiKey::SaslAuthenticate,
            0..=i16::MAX,
            version::crate_range(SaslAuthenticateRequest::VERSIONS),
        )
        .ok_or_else(|| auth_err("the broker does not support SaslAuthenticate".into()))?;

        let hs = self
            .call(
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mech)),
                hs_version,
            )
            .await?;
        if hs.error_code != 0 {
            let enabled: Vec<&str> = hs.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(auth_err(format!(
                "the broker listener does not enable {mech} ({}); it enables [{}]: set \
                 sasl.mechanism to one of them",
                ResponseError::try_from_code(hs.error_code).map_or_else(String::new, error_name),
                enabled.join(", ")
            )));
        }

        let credentials_hint = |m: Option<StrBytes>| {
            let where_defined = if mechanism == SaslMechanism::Plain {
                "PLAIN users are defined in the broker's JAAS configuration".to_owned()
            } else {
                format!(
                    "SCRAM credentials are set with kafka-configs.sh --alter --add-config \
                     '{mech}=[password=...]' --entity-type users --entity-name {username}"
                )
            };
            format!(
                "{}; check sasl.username and sasl.password, and that the user exists on the \
                 broker for {mech} ({where_defined})",
                m.as_deref()
                    .unwrap_or("the broker rejected the credentials")
            )
        };
        let lifetime_ms = match ScramHash::for_mechanism(mechanism) {
            None if mechanism == SaslMechanism::OAuthBearer => {
                let Some(oauth) = sasl.oauth.as_ref() else {
                    return Err(auth_err("no OAUTHBEARER token source configured".into()));
                };
                let token = oauth.token().await?;
                let resp = self
                    .sasl_round(
                        oauth::initial_response(&token, oauth.extensions()),
                        auth_version,
                    )
                    .await?;
                if resp.error_code != 0 || !resp.auth_bytes.is_empty() {
                    oauth.invalidate().await;
                }
                if resp.error_code == 0 && !resp.auth_bytes.is_empty() {
                    // RFC 7628 3.2.2: the server's error challenge (JSON); the client answers
                    // with a lone %x01 and the server then fails the exchange.
                    let challenge = String::from_utf8_lossy(&resp.auth_bytes).into_owned();
                    let last = self.sasl_round(vec![0x01], auth_version).await?;
                    return Err(auth_err(format!(
                        "the broker rejected the token ({challenge}{}); check that the token's \
                         issuer, audience and scope are what the broker's OAUTHBEARER validator \
                         expects",
                        last.error_message
                            .as_deref()
                            .filter(|m| *m != challenge)
                            .map(|m| format!("; {m}"))
                            .unwrap_or_default()
                    )));
                }
                if resp.error_code != 0 {
                    return Err(auth_err(format!(
                        "{}; check that the token's issuer, audience and scope are what the \
                         broker's OAUTHBEARER validator expects",
                        resp.error_message
                            .as_deref()
                            .unwrap_or("the broker rejected the token")
                    )));
                }
                resp.session_lifetime_ms
            }
            None if mechanism == SaslMechanism::AwsMskIam => {
                let Some(msk) = sasl.msk.as_ref() else {
                    return Err(auth_err("no AWS_MSK_IAM settings".into()));
                };
                let host = self.broker.rsplit_once(':').map_or(self.broker, |(h, _)| h);
                let payload = msk.auth_payload(host).await?;
                let resp = self.sasl_round(payload, auth_version).await?;
                if resp.error_code != 0 {
                    return Err(auth_err(format!(
                        "{}; check the IAM policy of these credentials (kafka-cluster:Connect \
                         on the cluster) and that the client's clock is correct",
                        resp.error_message
                            .as_deref()
                            .unwrap_or("the broker rejected the signed request")
                    )));
                }
                aws::check_response(&resp.auth_bytes).map_err(auth_err)?;
                resp.session_lifetime_ms
            }
            None => {
                let resp = self
                    .sasl_round(sasl::plain_token(username, password), auth_version)
                    .await?;
                if resp.error_code != 0 {
                    return Err(auth_err(credentials_hint(resp.error_message)));
                }
                resp.session_lifetime_ms
            }
            Some(hash) => {
                let scram = ScramClient::new(hash, username, password);
                let first = self.sasl_round(scram.client_first(), auth_version).await?;
                if first.error_code != 0 {
                    return Err(auth_err(credentials_hint(first.error_message)));
                }
                let (client_final, fin) = scram
                    .client_final(&first.auth_bytes)
                    .await
                    .map_err(|m| auth_err(format!("invalid SCRAM server-first message: {m}")))?;
                let last = self.sasl_round(client_final, auth_version).await?;
                if last.error_code != 0 {
                    return Err(auth_err(credentials_hint(last.error_message)));
                }
                fin.verify(&last.auth_bytes).map_err(auth_err)?;
                last.session_lifetime_ms
            }
        };
        tracing::debug!(
            broker = self.broker,
            mechanism = mech,
            session_lifetime_ms = lifetime_ms,
            "SASL authenticated"
        );
        // KIP-368: a broker with connections.max.reauth.ms gives the session a lifetime (0 =
        // none) and closes the connection at the first request after it ends.
        Ok(u64::try_from(lifetime_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis))
    }

    async fn sasl_round(
        &mut self,
        token: Vec<u8>,
        version: i16,
    ) -> Result<SaslAuthenticateResponse> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        self.call(&req, version).await
    }
}

/// A writer that fails once the peer has accepted no byte for `limit`: a broker (or a proxy on
/// the way) that stops reading fills the socket buffers, and without a bound every write, and
/// every request queued behind it, would wait for ever. The clock runs only while a write,
/// flush or shutdown is waiting for the peer, and restarts whenever a byte goes out, so a slow
/// but reading broker is not cut off however large the request.
struct StallGuard<W> {
    inner: W,
    limit: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Whether `timer` runs: the last call returned `Pending`.
    waiting: bool,
    /// Set when `limit` was reached (the writer then closes without a graceful shutdown).
    stalled: bool,
}

impl<W> StallGuard<W> {
    fn new(inner: W, limit: Duration) -> StallGuard<W> {
        StallGuard {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            waiting: false,
            stalled: false,
        }
    }

    /// Passes `poll` (the inner writer's answer) through, failing it once the peer has
    /// accepted nothing for `limit`.
    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.waiting = false;
            return poll;
        }
        if !self.waiting {
            self.waiting = true;
            self.timer.as_mut().reset(Instant::now() + self.limit);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.stalled = true;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the broker accepted no bytes for {} ms (request.timeout.ms)",
                        self.limit.as_millis()
                    ),
                )))
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StallGuard<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.guard(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.guard(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.guard(cx, poll)
    }
}

/// How long a connection closed by the client may take to flush and shut down (the TLS
/// close_notify) before its socket is simply dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Writes every piece of `gather`, up to [`frame::MAX_SLICES`] per vectored write. The pieces
/// are handed to the socket (or TLS) where they are: no copy into a write buffer.
async fn write_gathered<W: AsyncWrite + Unpin>(wr: &mut W, gather: &mut Gather) -> io::Result<()> {
    while !gather.is_empty() {
        let written = {
            let mut slices = [io::IoSlice::new(&[]); frame::MAX_SLICES];
            let n = gather.slices(&mut slices);
            wr.write_vectored(&slices[..n]).await?
        };
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        gather.advance(written);
    }
    Ok(())
}

async fn write_loop<W: AsyncWrite + Unpin>(
    wr: StallGuard<W>,
    mut rx: mpsc::Receiver<OutFrame>,
    cancel: CancellationToken,
    pending: Arc<Pending>,
) {
    let mut wr = wr;
    let mut gather = Gather::default();
    let result: io::Result<()> = async {
        loop {
            let frame = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                f = rx.recv() => f,
            };
            let Some(frame) = frame else { return Ok(()) };
            gather.push(frame);
            // Coalesce what else is queued into one vectored write, but at most COALESCE
            // frames so a steady stream of small requests is not held back.
            for _ in 0..COALESCE {
                let Ok(more) = rx.try_recv() else { break };
                gather.push(more);
            }
            let write = async {
                write_gathered(&mut wr, &mut gather).await?;
                wr.flush().await
            };
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                r = write => r?,
            }
        }
    }
    .await;
    let stalled = wr.stalled;
    if let Err(e) = result {
        let reason = if stalled {
            tracing::warn!(broker = %pending.broker, limit = ?wr.limit, "the broker stopped reading; closing the connection");
            CloseReason::WriteStalled(wr.limit)
        } else {
            CloseReason::Disconnected(format!("write failed: {e}"))
        };
        pending.close(reason);
    }
    cancel.cancel();
    // Fail the requests still queued at once, rather than when they time out.
    rx.close();
    // A graceful shutdown writes too (what is buffered, TLS close_notify): pointless once the
    // broker stopped reading, and bounded otherwise, so that the socket is released.
    if !stalled {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, wr.shutdown()).await;
    }
}

async fn read_loop(
    mut rd: tokio::io::ReadHalf<BoxStream>,
    mut buf: BytesMut,
    max: usize,
    cancel: CancellationToken,
    pending: Arc<Pending>,
    tls: Option<TlsContext>,
) {
    let reason = loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break CloseReason::Disconnected("the connection was closed".into()),
            r = frame::read_frame(&mut rd, &mut buf, max) => r,
        };
        match next {
            Ok(Some(frame)) => {
                // `check` guarantees at least the 4-byte correlation id.
                let correlation = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                match pending.take(correlation) {
                    Some(w) => {
                        let _ = w.send(Ok(frame));
                    }
                    None => tracing::debug!(
                        broker = %pending.broker,
                        correlation,
                        "response for a request that was cancelled or timed out"
                    ),
                }
            }
            Ok(None) => break CloseReason::Disconnected("the broker closed the connection".into()),
            Err(FrameError::Truncated { buffered }) => {
                break CloseReason::Disconnected(format!(
                    "the broker closed the connection in the middle of a response ({buffered} bytes buffered)"
                ));
            }
            Err(FrameError::TooLarge { size, max }) => break CloseReason::TooLarge { size, max },
            Err(FrameError::Malformed(m)) => break CloseReason::Protocol(m),
            Err(FrameError::Io(e)) => {
                let msg = tls
                    .as_ref()
                    .and_then(|t| t.classify(&pending.broker, &e))
                    .map_or_else(
                        || format!("read failed: {e}"),
                        |tls_err| tls_err.to_string(),
                    );
                break CloseReason::Disconnected(msg);
            }
        }
    };
    tracing::debug!(broker = %pending.broker, ?reason, "connection closed");
    pending.close(reason);
    cancel.cancel();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;

    #[test]
    fn request_frames_carry_size_and_correlation() {
        let req = MetadataRequest::default();
        let f = encode_request(&req, 12, 77, Some(&StrBytes::from_static_str("me"))).unwrap();
        let size = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(size, f.len() - 4);
        assert_eq!(i16::from_be_bytes([f[4], f[5]]), 3, "api key Metadata");
        assert_eq!(i16::from_be_bytes([f[6], f[7]]), 12, "version");
        assert_eq!(i32::from_be_bytes([f[8], f[9], f[10], f[11]]), 77);
    }

    /// A socket that records where each byte it accepted came from, taking at most `chunk`
    /// bytes per write (partial writes split pieces at any point).
    struct RecordingSocket {
        chunk: usize,
        written: Vec<u8>,
        /// Address range of every slice handed to a write.
        ranges: Vec<(usize, usize)>,
    }

    impl AsyncWrite for RecordingSocket {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut left = self.chunk;
            for b in bufs {
                let take = b.len().min(left);
                let start = b.as_ptr() as usize;
                self.ranges.push((start, start + b.len()));
                self.written.extend_from_slice(&b[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(self.chunk - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The writer's copy count, pinned: a batch reaches the socket's write call from the buffer
    /// the caller gave (its address range is what the socket is handed), never from a copy in
    /// a write buffer, and frames queued together keep their order across partial writes.
    #[tokio::test]
    async fn the_writer_hands_batches_to_the_socket_from_their_own_buffers() {
        let batch = Bytes::from(vec![5u8; 200_000]);
        let small = Bytes::from_static(b"\0\0\0\x04ping");
        let (start, end) = (
            batch.as_ptr() as usize,
            batch.as_ptr() as usize + batch.len(),
        );
        for chunk in [7, 4096, 1 << 20] {
            let mut gather = Gather::default();
            gather.push(OutFrame::Pieces(vec![
                Bytes::from_static(b"head"),
                batch.clone(),
                Bytes::from_static(b"tail"),
            ]));
            gather.push(OutFrame::Whole(small.clone()));
            let mut sock = RecordingSocket {
                chunk,
                written: Vec::new(),
                ranges: Vec::new(),
            };
            write_gathered(&mut sock, &mut gather).await.unwrap();
            let mut want = b"head".to_vec();
            want.extend_from_slice(&batch);
            want.extend_from_slice(b"tail");
            want.extend_from_slice(&small);
            assert!(sock.written == want, "chunk {chunk}: bytes or order differ");
            // Every slice that carries batch bytes lies inside the batch's own allocation.
            let batch_bytes: usize = sock
                .ranges
                .iter()
                .filter(|(s, e)| *s >= start && *e <= end)
                .count();
            assert!(
                batch_bytes > 0,
                "chunk {chunk}: the batch was never written from its buffer"
            );
            let big_elsewhere = sock
                .ranges
                .iter()
                .any(|(s, e)| e - s >= 1000 && !(*s >= start && *e <= end));
            assert!(
                !big_elsewhere,
                "chunk {chunk}: batch bytes were written from a copy"
            );
        }
    }

    #[test]
    fn fetched_records_are_slices_of_the_response_frame() {
        use kafka_protocol::messages::FetchResponse;
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let records = Bytes::from(vec![7u8; 4096]);
        let resp = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str("t"),
                ))
                .with_partitions(vec![PartitionData::default().with_records(Some(records))]),
        ]);
        let mut frame = BytesMut::new();
        frame.put_i32(9); // correlation id (header v0 at Fetch v11)
        resp.encode(&mut frame, 11).unwrap();
        let frame = frame.freeze();
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        let decoded =
            decode_response::<kafka_protocol::messages::FetchRequest>(frame.clone(), 11).unwrap();
        let got = decoded.responses[0].partitions[0].records.clone().unwrap();
        assert_eq!(got.len(), 4096);
        assert!(
            range.contains(&(got.as_ptr() as usize)),
            "records were copied"
        );
    }

    #[test]
    fn pending_close_fails_all_waiters_and_later_registrations() {
        let p = Pending {
            broker: "b:1".into(),
            state: Mutex::new(PendingState::default()),
        };
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        p.register(1, tx1).unwrap();
        p.register(2, tx2).unwrap();
        p.close(CloseReason::Disconnected("boom".into()));
        assert!(matches!(
            rx1.try_recv(),
            Ok(Err(Error::Disconnected { .. }))
        ));
        assert!(matches!(
            rx2.try_recv(),
            Ok(Err(Error::Disconnected { .. }))
        ));
        let (tx3, _rx3) = oneshot::channel();
        assert!(matches!(
            p.register(3, tx3),
            Err(Error::Disconnected { .. })
        ));
    }

    #[test]
    fn guard_removes_waiter() {
        let p = Pending {
            broker: "b:1".into(),
            state: Mutex::new(PendingState::default()),
        };
        let (tx, _rx) = oneshot::channel();
        p.register(5, tx).unwrap();
        drop(WaiterGuard {
            pending: &p,
            correlation: 5,
        });
        assert!(p.take(5).is_none());
    }

    /// Metadata responses that claim 2^31-1 (classic array) or 2^32-2 (compact array) brokers in
    /// a dozen bytes. kafka-protocol 0.18.0 as published reserves `count * size_of(broker)` bytes
    /// before decoding the first one: ~170 GB, and the failed allocation aborts the process
    /// (this test binary). Bounded by the bytes remaining, it is a decode error.
    #[test]
    fn huge_array_counts_are_decode_errors_not_allocations() {
        let mut v4 = BytesMut::new();
        v4.put_i32(7); // correlation id (response header v0)
        v4.put_i32(0); // throttle_time_ms
        v4.put_i32(i32::MAX); // brokers: Array count
        let e = decode_response::<MetadataRequest>(v4.freeze(), 4).unwrap_err();
        assert!(e.contains("Metadata v4"), "{e}");
        assert!(e.contains("2147483647"), "{e}");

        let mut v12 = BytesMut::new();
        v12.put_i32(7); // correlation id
        v12.put_u8(0); // response header v1: no tagged fields
        v12.put_i32(0); // throttle_time_ms
        v12.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // brokers: CompactArray, varint u32::MAX
        let e = decode_response::<MetadataRequest>(v12.freeze(), 12).unwrap_err();
        assert!(e.contains("Metadata v12"), "{e}");
        assert!(e.contains("4294967294"), "{e}");
    }

    /// The same attack before authentication: the ApiVersions answer of the connection setup
    /// claims 2^32-2 API keys. The setup fails with a protocol error naming the broker.
    #[tokio::test]
    async fn hostile_api_versions_answer_fails_the_setup_without_aborting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let broker = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = BytesMut::new();
            let mut req = frame::read_frame(&mut sock, &mut buf, 1 << 20)
                .await
                .unwrap()
                .unwrap();
            let header =
                kafka_protocol::protocol::decode_request_header_from_buffer(&mut req).unwrap();
            assert_eq!(header.request_api_key, ApiKey::ApiVersions as i16);
            assert!(header.request_api_version >= 3, "compact arrays from v3");
            let mut body = BytesMut::new();
            body.put_i32(header.correlation_id); // ApiVersions answers with header v0
            body.put_i16(0); // error_code: none
            body.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // api_keys: 2^32-2 entries
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&body);
            sock.write_all(&out).await.unwrap();
            // Keep the socket open: the client must fail on the bytes, not on a close.
            let _ = frame::read_frame(&mut sock, &mut buf, 1 << 20).await;
        });
        let cfg = ClientConfig::from_properties([("bootstrap.servers", addr.as_str())]).unwrap();
        let e = Connection::connect(&addr, &cfg).await.unwrap_err();
        match &e {
            Error::Protocol { broker, message } => {
                assert_eq!(broker, &addr);
                assert!(message.contains("ApiVersions"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        broker.abort();
    }

    use crate::fake_broker::{Reply, connect, metadata_body, start};

    #[tokio::test]
    async fn api_versions_falls_back_to_the_brokers_version() {
        let fake = start(|_, _, _| Reply::Frames(vec![metadata_body()])).await;
        let conn = connect(&fake.addr).await;
        assert_eq!(
            *fake.api_versions_seen.lock().unwrap(),
            vec![4, 3],
            "v4 refused, then v3"
        );
        assert_eq!(conn.supported_versions(ApiKey::Metadata), Some(0..=12));
        assert_eq!(conn.supported_versions(ApiKey::Fetch), None);
        assert_eq!(conn.pick_version::<MetadataRequest>(4..=13).unwrap(), 12);
        let e = conn
            .pick_version::<kafka_protocol::messages::FetchRequest>(4..=18)
            .unwrap_err();
        assert!(matches!(e, Error::UnsupportedVersion { .. }), "{e:?}");
        // A request at a version the broker lacks is refused before it is sent.
        let e = conn.send(MetadataRequest::default(), 13).await.unwrap_err();
        assert!(matches!(e, Error::UnsupportedVersion { .. }), "{e:?}");
        let md = conn.send(MetadataRequest::default(), 12).await.unwrap();
        assert!(md.brokers.is_empty());
    }

    /// A local address that silently drops connection attempts, like a host behind a firewall
    /// that drops packets: a listener with backlog 0 whose accept queue is already full (it
    /// never accepts), so Linux drops further SYNs: the connect neither succeeds nor fails.
    /// Keep the returned value alive for as long as the black hole is needed.
    async fn black_hole() -> (tokio::net::TcpListener, Vec<TcpStream>, SocketAddr) {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = sock.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..8 {
            match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
                Ok(Ok(s)) => fillers.push(s),
                Ok(Err(e)) => panic!("connect to the filling listener failed: {e}"),
                // The queue is full: SYNs are dropped from now on.
                Err(_) => return (listener, fillers, addr),
            }
        }
        panic!("the accept queue never filled up; cannot make a black hole on this system");
    }

    /// A port nothing listens on (connections are refused at once).
    async fn refused_port() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    }

    /// A host whose first address drops packets: setup moves on to the next address when the
    /// first one's share of `socket.connection.setup.timeout.ms` (half of 10 s with two
    /// addresses) is spent, and connects. Before, the first connect waited for the OS (minutes)
    /// and the setup failed with a timeout.
    #[tokio::test]
    async fn setup_tries_the_next_address_when_one_drops_packets() {
        let (_hole, _fillers, hole) = black_hole().await;
        let fake = start(|_, _, _| Reply::Frames(vec![metadata_body()])).await;
        let good: SocketAddr = fake.addr.parse().unwrap();
        let cfg =
            ClientConfig::from_properties([("bootstrap.servers", fake.addr.as_str())]).unwrap();
        let conn = Connection::open_with(&fake.addr, Some(&[hole, good]), None, &cfg, None)
            .await
            .unwrap();
        // The connection is to the fake broker: it answers.
        conn.send(MetadataRequest::default(), 12).await.unwrap();
        assert_eq!(*fake.api_versions_seen.lock().unwrap(), vec![4, 3]);
    }

    /// `socket.keepalive.enable` reaches the socket: SO_KEEPALIVE is on by default and off
    /// when turned off.
    #[tokio::test]
    async fn connections_use_tcp_keepalive_as_configured() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        for keepalive in [true, false] {
            let tcp = tcp_connect("broker:9092", &[addr], deadline, keepalive)
                .await
                .unwrap();
            let socket = TcpSocket::from_std_stream(tcp.into_std().unwrap());
            assert_eq!(socket.keepalive().unwrap(), keepalive);
        }
    }

    /// When every address fails, the error names each address and why it failed, within the
    /// setup time (a refused address does not wait for its share).
    #[tokio::test]
    async fn setup_reports_every_failed_address() {
        let (_hole, _fillers, hole) = black_hole().await;
        let refused = refused_port().await;
        let cfg = ClientConfig::from_properties([
            ("bootstrap.servers", "broker:9092"),
            ("socket.connection.setup.timeout.ms", "2000"),
        ])
        .unwrap();
        let e = Connection::open_with("broker:9092", Some(&[hole, refused]), None, &cfg, None)
            .await
            .unwrap_err();
        match &e {
            Error::Connect { broker, source } => {
                assert_eq!(broker, "broker:9092");
                let m = source.to_string();
                assert!(m.contains("all 2 addresses failed"), "{m}");
                assert!(m.contains(&format!("{hole}: no answer within")), "{m}");
                assert!(m.contains(&format!("{refused}: ")), "{m}");
                assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused, "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn oversized_response_fails_with_frame_too_large() {
        let fake = start(|_, corr, _| {
            let mut v = (200u32 << 20).to_be_bytes().to_vec(); // 200 MiB announced
            v.extend_from_slice(&corr.to_be_bytes());
            Reply::RawBytes(v)
        })
        .await;
        let conn = connect(&fake.addr).await;
        let e = conn.send(MetadataRequest::default(), 12).await.unwrap_err();
        match e {
            Error::FrameTooLarge { size, max, .. } => {
                assert_eq!(size, 200 << 20);
                assert_eq!(max, crate::config::DEFAULT_MAX_RESPONSE_SIZE);
            }
            other => panic!("{other:?}"),
        }
        assert!(conn.is_closed());
    }

    #[tokio::test]
    async fn broken_connection_fails_every_waiter() {
        let mut n = 0;
        let fake = start(move |_, _, _| {
            n += 1;
            if n < 3 { Reply::Hold } else { Reply::Close }
        })
        .await;
        let conn = connect(&fake.addr).await;
        let (a, b, c) = tokio::join!(
            conn.send(MetadataRequest::default(), 12),
            conn.send(MetadataRequest::default(), 12),
            conn.send(MetadataRequest::default(), 12),
        );
        for r in [a, b, c] {
            assert!(matches!(r, Err(Error::Disconnected { .. })), "{r:?}");
            // A connection lost mid-stream (a broker crash) is not a listener mismatch.
            let m = r.unwrap_err().to_string();
            assert!(!m.contains("security.protocol"), "{m}");
        }
        assert!(conn.is_closed());
        let later = conn.send(MetadataRequest::default(), 12).await;
        assert!(
            matches!(later, Err(Error::Disconnected { .. })),
            "{later:?}"
        );
    }

    /// A reset while connecting (e.g. a TLS listener answering a plaintext client) does point
    /// at security.protocol.
    #[tokio::test]
    async fn a_reset_during_setup_suggests_checking_security_protocol() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = tokio::io::AsyncReadExt::read(&mut sock, &mut buf).await;
            // Linger 0: close with a reset, as a listener speaking another protocol may.
            let _ = sock.set_zero_linger();
        });
        let cfg = ClientConfig::from_properties([("bootstrap.servers", addr.as_str())]).unwrap();
        let e = Connection::connect(&addr, &cfg).await.unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::Disconnected { .. }), "{e:?}");
        assert!(
            m.contains(
                "while connecting, so check that security.protocol matches the broker's listener"
            ),
            "{m}"
        );
    }

    #[tokio::test]
    async fn garbage_body_is_a_protocol_error_and_the_connection_survives() {
        let mut n = 0;
        let fake = start(move |_, _, _| {
            n += 1;
            if n == 1 {
                Reply::Frames(vec![vec![0, 0xff, 0xff, 0xff]])
            } else {
                Reply::Frames(vec![metadata_body()])
            }
        })
        .await;
        let conn = connect(&fake.addr).await;
        let e = conn.send(MetadataRequest::default(), 12).await.unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e:?}");
        assert!(!conn.is_closed(), "the frame boundary was intact");
        conn.send(MetadataRequest::default(), 12).await.unwrap();
    }

    /// A broker that completes the connection setup (answers ApiVersions) and then stops
    /// reading, keeping its socket open: its receive buffer (kept small) and the client's send
    /// buffer fill, and every write of the client blocks. Sending on `drain` makes it read again
    /// until the client's side ends; `ended` then says how (`Ok(bytes)` on EOF, or the error of
    /// a reset).
    struct SilentBroker {
        addr: String,
        drain: oneshot::Sender<()>,
        ended: oneshot::Receiver<io::Result<u64>>,
    }

    async fn silent_broker() -> SilentBroker {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        // Accepted sockets inherit it: a fixed, small window instead of autotuning to 32 MiB.
        sock.set_recv_buffer_size(16 * 1024).unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = sock.listen(8).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (drain, drain_rx) = oneshot::channel::<()>();
        let (ended_tx, ended) = oneshot::channel();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = BytesMut::new();
            loop {
                let mut req = frame::read_frame(&mut sock, &mut buf, 1 << 20)
                    .await
                    .unwrap()
                    .unwrap();
                let header =
                    kafka_protocol::protocol::decode_request_header_from_buffer(&mut req).unwrap();
                assert_eq!(header.request_api_key, ApiKey::ApiVersions as i16);
                let v = header.request_api_version;
                sock.write_all(&crate::fake_broker::api_versions_answer(
                    header.correlation_id,
                    v,
                ))
                .await
                .unwrap();
                if v <= 3 {
                    break; // accepted: the client's setup is complete
                }
            }
            // Stop reading, socket open, until told to drain.
            let _ = drain_rx.await;
            let mut sink = vec![0u8; 1 << 16];
            let mut read = buf.len() as u64;
            let end = loop {
                match tokio::io::AsyncReadExt::read(&mut sock, &mut sink).await {
                    Ok(0) => break Ok(read),
                    Ok(n) => read += n as u64,
                    Err(e) => break Err(e),
                }
            };
            let _ = ended_tx.send(end);
        });
        SilentBroker { addr, drain, ended }
    }

    /// A Metadata v12 request of about `bytes` bytes (topic names are cheap filler).
    fn metadata_request_of(bytes: usize) -> MetadataRequest {
        let topic = |i: usize| {
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(
                Some(kafka_protocol::messages::TopicName(StrBytes::from_string(
                    format!("{i:0>200}"),
                ))),
            )
        };
        MetadataRequest::default().with_topics(Some((0..bytes / 220).map(topic).collect()))
    }

    /// What must hold once the client gave up on a broker that stopped reading: the connection
    /// is closed, a later request fails at once, its writer and reader tasks are gone, and the
    /// socket is closed (the broker, reading again, sees the end of the stream).
    async fn assert_closed_and_released(conn: &Connection, broker: SilentBroker, tasks: usize) {
        assert!(conn.is_closed());
        let later = tokio::time::timeout(
            Duration::from_secs(10),
            conn.send(MetadataRequest::default(), 12),
        )
        .await
        .expect("a later request blocked on the closed connection");
        assert!(later.is_err(), "{later:?}");
        let metrics = tokio::runtime::Handle::current().metrics();
        tokio::time::timeout(Duration::from_secs(10), async {
            while metrics.num_alive_tasks() > tasks {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the connection's tasks are still alive: {} tasks, {tasks} before connecting",
                metrics.num_alive_tasks()
            )
        });
        broker.drain.send(()).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), broker.ended)
            .await
            .expect("the client's socket is still open 10 s after it gave up")
            .unwrap();
        // EOF, or a reset: either way the client closed its socket.
        if let Err(e) = end {
            assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                ),
                "{e}"
            );
        }
    }

    /// A broker that stops reading after the handshake, with requests far larger than the
    /// socket buffers that may each wait 10 minutes for their answer: only the bound on writes
    /// (request.timeout.ms = 500 ms without progress) can end them, with an error naming the
    /// stall. Before, the writer waited for ever and so did every caller. (10 s bounds the
    /// test on a loaded machine; nothing here asserts how fast it is.)
    #[tokio::test]
    async fn a_broker_that_stops_reading_fails_every_request_within_the_request_timeout() {
        let broker = silent_broker().await;
        let addr = broker.addr.clone();
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        let cfg = ClientConfig::from_properties([
            ("bootstrap.servers", addr.as_str()),
            ("request.timeout.ms", "500"),
        ])
        .unwrap();
        let conn = Connection::connect(&addr, &cfg).await.unwrap();
        let req = metadata_request_of(512 * 1024);
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let (conn, req) = (conn.clone(), req.clone());
            calls.spawn(async move {
                conn.send_with_timeout(req, 12, Duration::from_secs(600))
                    .await
            });
        }
        let results = tokio::time::timeout(Duration::from_secs(10), calls.join_all())
            .await
            .expect("requests still waiting 10 s after the broker stopped reading");
        for r in results {
            match r {
                Err(Error::WriteStalled { broker, after }) => {
                    assert_eq!(broker, addr);
                    assert_eq!(after, Duration::from_millis(500));
                }
                other => panic!("{other:?}"),
            }
        }
        let m = conn.closed_error().to_string();
        assert!(m.contains("stopped reading"), "{m}");
        assert!(m.contains("500 ms"), "{m}");
        assert_closed_and_released(&conn, broker, tasks).await;
    }

    /// The same broker, with many small requests at the default per-request timeout: more
    /// than the write queue holds, so later callers wait for room in it. Every caller gets an
    /// error within a bound, and the connection's tasks and socket are released. Before, the
    /// callers waiting for room waited for ever, and the writer with them (its shutdown tried
    /// to flush into the full socket), holding the socket open.
    #[tokio::test]
    async fn callers_queued_behind_a_broker_that_stops_reading_do_not_wait_for_ever() {
        let broker = silent_broker().await;
        let addr = broker.addr.clone();
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        let cfg = ClientConfig::from_properties([
            ("bootstrap.servers", addr.as_str()),
            ("request.timeout.ms", "500"),
        ])
        .unwrap();
        let conn = Connection::connect(&addr, &cfg).await.unwrap();
        let req = metadata_request_of(8 * 1024);
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..2000 {
            let (conn, req) = (conn.clone(), req.clone());
            calls.spawn(async move { conn.send(req, 12).await });
        }
        let results = tokio::time::timeout(Duration::from_secs(10), calls.join_all())
            .await
            .expect("callers still waiting 10 s after the broker stopped reading");
        for r in results {
            assert!(
                matches!(
                    r,
                    Err(Error::WriteStalled { .. }
                        | Error::Timeout { .. }
                        | Error::Disconnected { .. })
                ),
                "{r:?}"
            );
        }
        assert_closed_and_released(&conn, broker, tasks).await;
    }

    #[tokio::test]
    async fn responses_are_matched_by_correlation_id_not_order() {
        // Hold the first request; answer the second, then both (the first again is ignored).
        let held = Arc::new(Mutex::new(None::<i32>));
        let h = held.clone();
        let fake = start(move |_, corr, _| {
            let mut held = h.lock().unwrap();
            match held.take() {
                None => {
                    *held = Some(corr);
                    Reply::Hold
                }
                Some(first) => {
                    let mut bytes = Vec::new();
                    for c in [corr, first] {
                        let body = metadata_body();
                        bytes.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
                        bytes.extend_from_slice(&c.to_be_bytes());
                        bytes.extend_from_slice(&body);
                    }
                    Reply::RawBytes(bytes)
                }
            }
        })
        .await;
        let conn = connect(&fake.addr).await;
        let first = conn.send(MetadataRequest::default(), 12);
        let second = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            conn.send(MetadataRequest::default(), 12).await
        };
        let (a, b) = tokio::join!(first, second);
        a.unwrap();
        b.unwrap();
    }
}
