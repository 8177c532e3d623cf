//! A TCP proxy that puts a long-distance link between a client and a broker: every chunk read on one side is
//! written to the other side a fixed one-way delay later (optionally after waiting its turn on a link of limited
//! bandwidth), in both directions.
//!
//! It is a pipe with latency, not a stop-and-wait relay: a chunk read at `t` is written at `t + delay` whatever is
//! still in flight before it, so a client that pipelines requests sees one round trip of `2 x delay`, as over a
//! real link, and order is kept per direction. Closing propagates: an end of stream (FIN) travels the same delay
//! after the data before it; an error on either side (reset, refused upstream) closes both sides.
//!
//! Not modelled: the TCP handshake's round trip (the client's connect returns at once; its first bytes wait for
//! the upstream connection), loss, jitter, and reordering.
//!
//! The proxy runs on its own thread with its own Tokio runtime, so the synchronous test kit and async tests use it
//! the same way. [`DelayProxy`] is the guard: dropping it stops the listener and closes every connection.

use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::Error;

/// Bytes read per chunk: large enough that a bulk transfer does not pay one timer per small read.
const CHUNK: usize = 64 * 1024;
/// Bytes one direction of one connection may hold in flight (read, not yet written): bounds memory when the
/// receiving side stops reading. 32 MiB covers 100 ms one-way at 2.5 Gbit/s.
const MAX_IN_FLIGHT: usize = 32 << 20;

/// The link the proxy simulates: one-way delay and, optionally, bandwidth (both per direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Added to every chunk in each direction (a round trip costs twice this).
    pub delay: Duration,
    /// Bytes per second in each direction, shared by all the proxy's connections (`None`: unlimited).
    pub bandwidth: Option<u64>,
}

impl Link {
    /// A link with this one-way delay and no bandwidth limit.
    pub fn delay(delay: Duration) -> Link {
        Link {
            delay,
            bandwidth: None,
        }
    }

    /// A link with a round-trip time of `rtt` (`rtt / 2` each way).
    pub fn rtt(rtt: Duration) -> Link {
        Link::delay(rtt / 2)
    }

    /// The same link limited to `bytes_per_second` in each direction.
    pub fn bandwidth(mut self, bytes_per_second: u64) -> Link {
        self.bandwidth = Some(bytes_per_second);
        self
    }
}

/// What went through a proxy so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Bytes written to the upstream (client -> upstream).
    pub bytes_up: u64,
    /// Bytes written to clients (upstream -> client).
    pub bytes_down: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// One direction of the simulated link, shared by every connection of a proxy: with a bandwidth limit, a chunk
/// starts crossing when the previous one has crossed.
#[derive(Debug)]
struct Lane {
    bytes_per_second: Option<u64>,
    free_at: Mutex<Option<Instant>>,
}

impl Lane {
    fn new(bytes_per_second: Option<u64>) -> Lane {
        Lane {
            bytes_per_second,
            free_at: Mutex::new(None),
        }
    }

    /// When a chunk of `len` bytes read at `now` has finished crossing the link (before the delay).
    fn crossed(&self, now: Instant, len: usize) -> Instant {
        let Some(bps) = self.bytes_per_second.filter(|b| *b > 0) else {
            return now;
        };
        let mut free_at = self
            .free_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let start = free_at.map_or(now, |f| f.max(now));
        let done = start + Duration::from_secs_f64(len as f64 / bps as f64);
        *free_at = Some(done);
        done
    }
}

/// A running delay proxy: `addr()` forwards to the upstream through the simulated [`Link`]. Dropping it stops the
/// proxy and closes every connection through it.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    upstream: String,
    link: Link,
    counters: Arc<Counters>,
    /// `true` while the proxy stops reading from its clients ([`DelayProxy::stop_reading`]).
    paused: watch::Sender<bool>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `upstream` (`host:port`, resolved at every
    /// connection).
    pub fn start(upstream: &str, link: Link) -> Result<DelayProxy, Error> {
        DelayProxy::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream, link)
    }

    /// Starts a proxy listening on `listen` forwarding to `upstream`. The listener is bound before this returns,
    /// so a client may connect at once.
    pub fn start_on(listen: SocketAddr, upstream: &str, link: Link) -> Result<DelayProxy, Error> {
        let listener = StdTcpListener::bind(listen)
            .map_err(|e| Error::io(format!("binding the delay proxy to {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the delay proxy's address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("making the delay proxy's listener non-blocking", e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the delay proxy's runtime", e))?;
        let counters = Arc::new(Counters::default());
        let (stop, stopped) = oneshot::channel();
        let (paused, gate) = watch::channel(false);
        let serve = Serve {
            gate,
            upstream: Arc::from(upstream),
            link,
            up: Arc::new(Lane::new(link.bandwidth)),
            down: Arc::new(Lane::new(link.bandwidth)),
            counters: counters.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("delay-proxy-{}", addr.port()))
            .spawn(move || {
                // Returning drops the runtime, which cancels every connection task and closes its sockets.
                runtime.block_on(serve.run(listener, stopped));
            })
            .map_err(|e| Error::io("starting the delay proxy's thread", e))?;
        Ok(DelayProxy {
            addr,
            upstream: upstream.to_string(),
            link,
            counters,
            paused,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where it forwards to.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The simulated link.
    pub fn link(&self) -> Link {
        self.link
    }

    /// Stops (`true`) or resumes (`false`) reading from clients, on every connection: nothing more
    /// goes upstream, but the connections stay open, as with a broker or middlebox that stopped
    /// reading. A client's writes block once the socket buffers between it and the proxy are full.
    /// (A read already waiting when it stops still forwards the chunk it gets.)
    pub fn stop_reading(&self, stop: bool) {
        self.paused.send_replace(stop);
    }

    /// Connections and bytes so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            connections: self.counters.connections.load(Ordering::Relaxed),
            bytes_up: self.counters.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.counters.bytes_down.load(Ordering::Relaxed),
        }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Serve {
    gate: watch::Receiver<bool>,
    upstream: Arc<str>,
    link: Link,
    up: Arc<Lane>,
    down: Arc<Lane>,
    counters: Arc<Counters>,
}

impl Serve {
    async fn run(self, listener: StdTcpListener, mut stopped: oneshot::Receiver<()>) {
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("strait-testkit: delay proxy: cannot use its listener: {e}");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok((client, _)) => {
                        self.counters.connections.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(connection(
                            client,
                            self.gate.clone(),
                            self.upstream.clone(),
                            self.link.delay,
                            self.up.clone(),
                            self.down.clone(),
                            self.counters.clone(),
                        ));
                    }
                    // Out of file descriptors and the like: wait a little rather than spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
            }
        }
    }
}

async fn connection(
    client: TcpStream,
    gate: watch::Receiver<bool>,
    upstream: Arc<str>,
    delay: Duration,
    up: Arc<Lane>,
    down: Arc<Lane>,
    counters: Arc<Counters>,
) {
    // A refused upstream closes the client's connection: what a client sees when the broker is down.
    let Ok(server) = TcpStream::connect(&*upstream).await else {
        return;
    };
    // Kafka requests are small and latency-bound: never let Nagle hold them on top of the simulated delay.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // The first error in either direction drops both, closing both sockets.
    let _ = tokio::try_join!(
        pipe(
            client_read,
            server_write,
            delay,
            &up,
            &counters.bytes_up,
            Some(gate)
        ),
        pipe(
            server_read,
            client_write,
            delay,
            &down,
            &counters.bytes_down,
            None
        ),
    );
}

/// The next read from `from`, but none while `gate` says the proxy stopped reading (a read waiting
/// when it stops is abandoned; reads are cancel safe). A dropped proxy ends the gating.
async fn gated_read(
    from: &mut OwnedReadHalf,
    buf: &mut [u8],
    gate: &mut Option<watch::Receiver<bool>>,
) -> io::Result<usize> {
    loop {
        let Some(g) = gate.as_mut() else {
            return from.read(buf).await;
        };
        let mut open = g.wait_for(|stopped| !stopped).await.is_ok();
        if open {
            // Biased, the stop first: when the stop and new bytes are both there by the time this
            // task runs (a loaded machine), the stop wins, so no byte sent after it goes through.
            tokio::select! {
                biased;
                stopped = g.wait_for(|stopped| *stopped) => open = stopped.is_ok(),
                r = from.read(buf) => return r,
            }
        }
        if !open {
            *gate = None;
        }
    }
}

/// One direction: a reader that timestamps chunks as they arrive and a writer that writes each one when its time
/// comes. They run concurrently, so later chunks are read (and their delay starts) while earlier ones wait.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
    lane: &Lane,
    written: &AtomicU64,
    mut gate: Option<watch::Receiver<bool>>,
) -> io::Result<()> {
    // `None` is the end of stream, which travels like data.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let window = Semaphore::new(MAX_IN_FLIGHT);
    let reading = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = gated_read(&mut from, &mut buf, &mut gate).await?;
            let now = Instant::now();
            if n == 0 {
                let _ = tx.send((now + delay, None));
                return Ok(());
            }
            // Bounded in flight: wait for the writer when the receiving side does not keep up.
            let Ok(permit) = window.acquire_many(n as u32).await else {
                return Ok(());
            };
            permit.forget();
            let at = lane.crossed(now, n) + delay;
            if tx.send((at, Some(buf[..n].to_vec()))).is_err() {
                // The writer stopped on an error, which try_join reports.
                return Ok(());
            }
        }
    };
    let writing = async {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            match chunk {
                Some(bytes) => {
                    // Counted first, so that whoever has read the bytes also sees them counted.
                    written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    to.write_all(&bytes).await?;
                    window.add_permits(bytes.len());
                }
                None => {
                    to.shutdown().await?;
                    return Ok(());
                }
            }
        }
        Ok(())
    };
    tokio::try_join!(reading, writing).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    /// An upstream that echoes every byte back and closes its side when the client closes its own.
    fn echo_server() -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = s.shutdown(Shutdown::Write);
        });
        (addr, handle)
    }

    fn connect(proxy: &DelayProxy) -> TcpStream {
        let s = TcpStream::connect(proxy.addr()).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).unwrap();
        buf
    }

    #[test]
    fn a_round_trip_costs_twice_the_delay() {
        let (upstream, _echo) = echo_server();
        let delay = Duration::from_millis(60);
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(delay)).unwrap();
        let mut s = connect(&proxy);
        // The first exchange also opens the upstream connection; time the second one.
        s.write_all(b"warm").unwrap();
        assert_eq!(read_exact(&mut s, 4), b"warm");
        let sent = Instant::now();
        s.write_all(b"ping").unwrap();
        assert_eq!(read_exact(&mut s, 4), b"ping");
        let rtt = sent.elapsed();
        // A lower bound only: a loaded machine may add time, never remove it.
        assert!(rtt >= 2 * delay, "round trip {rtt:?} < 2 x {delay:?}");
        let stats = proxy.stats();
        assert_eq!(stats.connections, 1);
        assert_eq!((stats.bytes_up, stats.bytes_down), (8, 8));
    }

    #[test]
    fn chunks_are_pipelined_not_serialized() {
        // Ten writes 20 ms apart through a 400 ms link: relaying one chunk at a time would need at least
        // 10 x 400 ms in each direction; a pipe delivers the last echo about 2 x 400 ms after it was sent.
        let (upstream, _echo) = echo_server();
        let delay = Duration::from_millis(400);
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(delay)).unwrap();
        let mut s = connect(&proxy);
        let mut reader = s.try_clone().unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let got = std::thread::spawn(move || {
            let data = read_exact(&mut reader, 10 * 100);
            done_tx.send(Instant::now()).unwrap();
            data
        });
        let began = Instant::now();
        let mut expected = Vec::new();
        for i in 0..10u8 {
            let chunk = vec![i; 100];
            s.write_all(&chunk).unwrap();
            expected.extend_from_slice(&chunk);
            std::thread::sleep(Duration::from_millis(20));
        }
        let finished = done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(got.join().unwrap(), expected, "order kept");
        let total = finished - began;
        assert!(total >= 2 * delay, "{total:?} is less than one round trip");
        // Generous for a loaded machine (the pipe needs ~1 s), and still below one-at-a-time's 4 s.
        assert!(
            total < Duration::from_millis(3500),
            "{total:?}: chunks waited for each other"
        );
    }

    #[test]
    fn order_is_kept_for_a_large_transfer_in_both_directions() {
        let (upstream, _echo) = echo_server();
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(Duration::from_millis(5)))
            .unwrap();
        let mut s = connect(&proxy);
        let data: Vec<u8> = (0..4_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut reader = s.try_clone().unwrap();
        let n = data.len();
        let echoed = std::thread::spawn(move || read_exact(&mut reader, n));
        s.write_all(&data).unwrap();
        let echoed = echoed.join().unwrap();
        assert!(echoed == data, "the echoed bytes differ from those sent");
        let stats = proxy.stats();
        assert_eq!(stats.bytes_up, data.len() as u64);
        assert_eq!(stats.bytes_down, data.len() as u64);
    }

    #[test]
    fn end_of_stream_travels_both_ways_after_the_data() {
        let (upstream, echo) = echo_server();
        let delay = Duration::from_millis(50);
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(delay)).unwrap();
        let mut s = connect(&proxy);
        let began = Instant::now();
        s.write_all(b"last words").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        // The echo server sees our FIN after the data, answers, and closes its side; we see its FIN after.
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"last words");
        assert!(began.elapsed() >= 2 * delay);
        echo.join().unwrap();
    }

    #[test]
    fn a_proxy_that_stops_reading_forwards_nothing_until_resumed() {
        let (upstream, _echo) = echo_server();
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(Duration::ZERO)).unwrap();
        let mut s = connect(&proxy);
        s.write_all(b"one").unwrap();
        assert_eq!(read_exact(&mut s, 3), b"one");
        proxy.stop_reading(true);
        s.write_all(b"two").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 8];
        let e = s.read(&mut buf).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
        assert_eq!(
            proxy.stats().bytes_up,
            3,
            "nothing went upstream while stopped"
        );
        proxy.stop_reading(false);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(read_exact(&mut s, 3), b"two");
    }

    #[test]
    fn a_refused_upstream_closes_the_client() {
        // A port nobody listens on: bind, note it, release it.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let proxy = DelayProxy::start(
            &format!("127.0.0.1:{port}"),
            Link::delay(Duration::from_millis(1)),
        )
        .unwrap();
        let mut s = connect(&proxy);
        let mut buf = [0u8; 1];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the client's connection was closed");
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections_and_listener() {
        let (upstream, _echo) = echo_server();
        let proxy = DelayProxy::start(&upstream.to_string(), Link::delay(Duration::from_millis(1)))
            .unwrap();
        let addr = proxy.addr();
        let mut s = connect(&proxy);
        s.write_all(b"x").unwrap();
        assert_eq!(read_exact(&mut s, 1), b"x");
        drop(proxy);
        let mut buf = [0u8; 1];
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "connection closed");
        assert!(TcpStream::connect(addr).is_err(), "listener closed");
    }

    #[test]
    fn bandwidth_limits_a_bulk_transfer() {
        let (upstream, _echo) = echo_server();
        // 1 MB/s each way: 300 kB take at least 0.3 s to cross (then as long again to come back, overlapping).
        let proxy = DelayProxy::start(
            &upstream.to_string(),
            Link::delay(Duration::from_millis(1)).bandwidth(1_000_000),
        )
        .unwrap();
        let mut s = connect(&proxy);
        let data = vec![7u8; 300_000];
        let mut reader = s.try_clone().unwrap();
        let echoed = std::thread::spawn(move || read_exact(&mut reader, 300_000));
        let began = Instant::now();
        s.write_all(&data).unwrap();
        assert_eq!(echoed.join().unwrap(), data);
        assert!(began.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn lanes_queue_chunks_behind_each_other() {
        let lane = Lane::new(Some(1000));
        let t = tokio::time::Instant::now();
        assert_eq!(lane.crossed(t, 500), t + Duration::from_millis(500));
        // Read at the same time: it waits for the first one.
        assert_eq!(lane.crossed(t, 500), t + Duration::from_millis(1000));
        // Read after the link went idle: starts at once.
        let later = t + Duration::from_secs(5);
        assert_eq!(lane.crossed(later, 100), later + Duration::from_millis(100));
        let unlimited = Lane::new(None);
        assert_eq!(unlimited.crossed(t, 1 << 30), t);
    }
}
