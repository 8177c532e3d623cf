//! The HTTP port's open connections, and which one goes when there are too many: a state
//! machine without I/O, driven with the time passed in (so tests use a virtual clock).
//!
//! A probe must always be answered, even while a neighbour holds many idle connections open
//! (the Helm chart binds `0.0.0.0`, and the kubelet's liveness probe restarts the pod when it
//! gets no answer). So a new connection is never refused: when its peer already holds
//! [`Limits::per_peer`] connections, that peer's own least recently active one is closed; when
//! the port holds [`Limits::total`], the least recently active one of all is closed. A
//! connection that has not completed a request for [`Limits::idle`] (since it opened, or since
//! its last answer) is closed by [`Connections::expired`], so one that sends nothing, or
//! trickles a request byte by byte, does not keep its place.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The table's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (a scrape endpoint and its probes need few).
    pub total: usize,
    /// Connections open at once from one IP address: a neighbour's flood only ever closes its
    /// own connections, never a scraper's on another address.
    pub per_peer: usize,
    /// How long a connection may stay without completing a request.
    pub idle: Duration,
}

/// One open connection.
#[derive(Debug)]
struct Conn<T> {
    peer: IpAddr,
    /// When it opened or last got an answer: the least recent goes first.
    active: Instant,
    /// What closes it (a cancellation token in the server).
    handle: T,
}

/// The open connections, each with a `T` that closes it.
#[derive(Debug)]
pub struct Connections<T> {
    limits: Limits,
    next_id: u64,
    conns: HashMap<u64, Conn<T>>,
}

impl<T> Connections<T> {
    /// An empty table. A limit of 0 is taken as 1: the newest connection is always kept.
    pub fn new(limits: Limits) -> Connections<T> {
        Connections {
            limits: Limits {
                total: limits.total.max(1),
                per_peer: limits.per_peer.max(1),
                idle: limits.idle,
            },
            next_id: 0,
            conns: HashMap::new(),
        }
    }

    /// Number of open connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True when no connection is open.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Takes a new connection from `peer` at `now`: its id, and the handles of the
    /// connections to close to make room (at most one in practice).
    pub fn admit(&mut self, peer: IpAddr, now: Instant, handle: T) -> (u64, Vec<T>) {
        let mut evicted = Vec::new();
        while self.conns.values().filter(|c| c.peer == peer).count() >= self.limits.per_peer {
            match self.least_recent(|c| c.peer == peer) {
                Some(id) => evicted.extend(self.remove(id)),
                None => break,
            }
        }
        while self.conns.len() >= self.limits.total {
            match self.least_recent(|_| true) {
                Some(id) => evicted.extend(self.remove(id)),
                None => break,
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.conns.insert(
            id,
            Conn {
                peer,
                active: now,
                handle,
            },
        );
        (id, evicted)
    }

    /// Connection `id` got an answer at `now`: it is active again.
    pub fn answered(&mut self, id: u64, now: Instant) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.active = now;
        }
    }

    /// Connection `id` ended (or was closed by the table, then this is a no-op).
    pub fn remove(&mut self, id: u64) -> Option<T> {
        self.conns.remove(&id).map(|c| c.handle)
    }

    /// Removes the connections without a completed request for [`Limits::idle`] at `now`, and
    /// returns their handles to close.
    pub fn expired(&mut self, now: Instant) -> Vec<T> {
        let idle = self.limits.idle;
        let mut ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.active) >= idle)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// The least recently active connection among those `which` selects (oldest id on a tie).
    fn least_recent(&self, which: impl Fn(&Conn<T>) -> bool) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| which(c))
            .min_by_key(|(id, c)| (c.active, **id))
            .map(|(id, _)| *id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        total: 4,
        per_peer: 2,
        idle: Duration::from_secs(5),
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Virtual clock: `t(n)` is `n` seconds after a fixed start.
    struct Clock(Instant);
    impl Clock {
        fn t(&self, secs: u64) -> Instant {
            self.0 + Duration::from_secs(secs)
        }
    }

    #[test]
    fn a_peer_at_its_limit_gives_up_its_own_least_recent_connection() {
        let c = Clock(Instant::now());
        let mut t = Connections::new(LIMITS);
        assert_eq!(t.admit(ip(1), c.t(0), "a0").1, Vec::<&str>::new());
        assert_eq!(t.admit(ip(2), c.t(0), "scraper").1, Vec::<&str>::new());
        assert_eq!(t.admit(ip(1), c.t(1), "a1").1, Vec::<&str>::new());
        // The neighbour's third connection closes its first, never the scraper's.
        assert_eq!(t.admit(ip(1), c.t(2), "a2").1, ["a0"]);
        assert_eq!(t.admit(ip(1), c.t(3), "a3").1, ["a1"]);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_full_port_closes_the_least_recently_active_connection() {
        let c = Clock(Instant::now());
        let mut t = Connections::new(LIMITS);
        let (scraper, _) = t.admit(ip(1), c.t(0), "scraper");
        for (i, name) in ["b", "c", "d"].into_iter().enumerate() {
            t.admit(ip(2 + i as u8), c.t(1), name);
        }
        // The scraper opened first but was answered since: "b" (oldest by id on the tie) goes.
        t.answered(scraper, c.t(2));
        assert_eq!(t.admit(ip(9), c.t(3), "probe").1, ["b"]);
        assert_eq!(t.len(), 4);
    }

    /// 80 idle connections from one neighbour, then probes: every probe is admitted, and the
    /// table never holds more than its bounds.
    #[test]
    fn a_flood_never_keeps_a_probe_out() {
        let c = Clock(Instant::now());
        let mut t = Connections::new(Limits {
            total: 64,
            per_peer: 16,
            idle: Duration::from_secs(5),
        });
        let mut open = std::collections::BTreeSet::new();
        for i in 0..80u64 {
            let (id, evicted) = t.admit(ip(66), c.t(0), i);
            open.insert(id);
            for e in evicted {
                assert!(open.remove(&e), "closed twice or never open: {e}");
            }
        }
        assert_eq!(t.len(), 16);
        for probe in 0..5u64 {
            for peer in [ip(66), ip(1)] {
                let (id, _) = t.admit(peer, c.t(1 + probe), 1000 + probe);
                assert!(t.conns.contains_key(&id), "the probe was admitted");
                t.answered(id, c.t(1 + probe));
                assert!(t.remove(id).is_some());
            }
        }
        assert!(t.len() <= 16);
    }

    #[test]
    fn idle_connections_expire_and_answers_keep_them() {
        let c = Clock(Instant::now());
        let mut t = Connections::new(LIMITS);
        let (_silent, _) = t.admit(ip(1), c.t(0), "silent");
        let (busy, _) = t.admit(ip(2), c.t(0), "busy");
        assert!(t.expired(c.t(4)).is_empty());
        t.answered(busy, c.t(4));
        assert_eq!(t.expired(c.t(5)), ["silent"]);
        assert!(t.expired(c.t(8)).is_empty());
        assert_eq!(t.expired(c.t(9)), ["busy"]);
        assert!(t.is_empty());
        // A connection the server already closed: nothing to do.
        assert_eq!(t.remove(busy), None);
        t.answered(busy, c.t(10));
        assert!(t.is_empty());
    }
}
