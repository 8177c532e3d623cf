//! In-memory tests of fetch scheduling: a [`Fetcher`] over a fake source cluster whose brokers
//! keep real KIP-227 sessions, long-poll when there is no data, and can be made to black-hole
//! requests, fail them, or answer one partition with an error. Partition tasks fetch in a loop
//! as the pipeline's fetch loops do. Time is tokio's paused clock: nothing depends on the wall
//! clock.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strait_wire::PartitionLeader;
use strait_wire::fetch::{SessionFetch, SessionFetchResponse};
use strait_wire::{FetchedPartition, ResponseError, TopicPartition};
use tokio::time::Instant;

use super::{Fetcher, SourceCluster};
use crate::pipeline::io::{FailureAction, FetchSpec, IoError, Isolation};

const MAX_WAIT: Duration = Duration::from_millis(100);
const LATENCY: Duration = Duration::from_millis(1);
/// The request timeout of a black-holed broker (request.timeout.ms).
const BLACK_HOLE: Duration = Duration::from_secs(30);

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p).unwrap()
}

#[derive(Clone)]
enum Mode {
    /// Answers after LATENCY when there is data, after the long poll (MAX_WAIT) otherwise.
    Normal,
    /// Never answers in time: the request times out after BLACK_HOLE.
    BlackHole,
    /// Every request fails at once with this error (a TLS failure, a refused connection).
    Fail(IoError),
}

#[derive(Default)]
struct BrokerSession {
    id: i32,
    next_epoch: i32,
    /// Partition -> (fetch offset, high watermark last sent; -1 after an error).
    parts: HashMap<TopicPartition, (i64, i64)>,
}

#[derive(Default)]
struct State {
    /// Partition -> (leader, leader epoch): the truth, as the brokers know it.
    leaders: HashMap<TopicPartition, (i32, i32)>,
    /// What the client's metadata says; updated by a refresh (a stale route) or a hint.
    routes: HashMap<TopicPartition, (i32, i32)>,
    /// Log end offsets; a busy partition always has one more record than asked for.
    logs: HashMap<TopicPartition, i64>,
    busy: HashSet<TopicPartition>,
    modes: HashMap<i32, Mode>,
    /// Topics the fetch answers with TOPIC_AUTHORIZATION_FAILED (Read revoked).
    denied: HashSet<String>,
    /// Topics whose metadata says TOPIC_AUTHORIZATION_FAILED (Describe revoked).
    hidden: HashSet<String>,
    /// Whether NOT_LEADER_OR_FOLLOWER answers name the new leader (KIP-951).
    hint_leaders: bool,
    sessions: HashMap<i32, BrokerSession>,
    next_session: i32,
    /// Brokers that forget their session before the next request.
    evict: HashSet<i32>,
    /// Every request: (node, request).
    requests: Vec<(i32, SessionFetch)>,
    /// Routes looked up with a refresh (stale), per partition.
    refreshes: Vec<TopicPartition>,
    /// When each topic's metadata was last refreshed (a stale route older than that is served
    /// from the cache, as the wire adapter does).
    refreshed: HashMap<String, Instant>,
    hints: Vec<(TopicPartition, i32)>,
    /// Brokers reported unresponsive.
    unresponsive: Vec<i32>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

impl Fake {
    fn with(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.0.lock().unwrap());
    }

    /// `node` leads `tp`, and the client's metadata knows it.
    fn lead(&self, tp: &TopicPartition, node: i32) {
        self.move_leader(tp, node);
        self.with(|s| {
            let truth = s.leaders[tp];
            s.routes.insert(tp.clone(), truth);
        });
    }

    /// Leadership moves to `node`; the client's metadata does not know yet.
    fn move_leader(&self, tp: &TopicPartition, node: i32) {
        self.with(|s| {
            let epoch = s.leaders.get(tp).map_or(0, |(_, e)| e + 1);
            s.leaders.insert(tp.clone(), (node, epoch));
        });
    }

    fn requests_to(&self, node: i32) -> Vec<SessionFetch> {
        let s = self.0.lock().unwrap();
        s.requests
            .iter()
            .filter(|(n, _)| *n == node)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// What broker `node` answers now for the partitions of a request (`None`: no news).
    fn answer(
        s: &mut State,
        node: i32,
        parts: &mut HashMap<TopicPartition, (i64, i64)>,
        full: bool,
    ) -> Vec<FetchedPartition> {
        let mut out = Vec::new();
        for (tp, (offset, last_hw)) in parts.iter_mut() {
            let (leader, epoch) = s.leaders[tp];
            let mut error = None;
            let mut current_leader = None;
            if s.denied.contains(tp.topic()) {
                error = Some(ResponseError::TopicAuthorizationFailed);
            } else if leader != node {
                error = Some(ResponseError::NotLeaderOrFollower);
                current_leader = s.hint_leaders.then_some((leader, epoch));
            }
            let end = if s.busy.contains(tp) {
                *offset + 1
            } else {
                s.logs.get(tp).copied().unwrap_or(0)
            };
            let records = if error.is_none() && end > *offset {
                Bytes::from(vec![0u8; (end - *offset) as usize])
            } else {
                Bytes::new()
            };
            let news = full || error.is_some() || !records.is_empty() || end != *last_hw;
            if !news {
                continue;
            }
            *last_hw = if error.is_some() { -1 } else { end };
            out.push(FetchedPartition {
                partition: tp.clone(),
                fetch_offset: -1,
                error,
                high_watermark: end,
                last_stable_offset: end,
                log_start_offset: 0,
                aborted_transactions: Vec::new(),
                preferred_read_replica: None,
                current_leader,
                records,
            });
        }
        out.sort_by(|a, b| a.partition.cmp(&b.partition));
        out
    }

    fn has_data(s: &State, parts: &HashMap<TopicPartition, (i64, i64)>, node: i32) -> bool {
        parts.iter().any(|(tp, (offset, _))| {
            s.busy.contains(tp)
                || s.logs.get(tp).copied().unwrap_or(0) > *offset
                || s.denied.contains(tp.topic())
                || s.leaders[tp].0 != node
        })
    }

    /// One broker's handling of a Fetch (sessions as in Kafka's FetchSession.scala).
    fn serve(
        &self,
        node: i32,
        req: &SessionFetch,
        after_wait: bool,
    ) -> Option<SessionFetchResponse> {
        let mut s = self.0.lock().unwrap();
        let respond = |session_id, partitions| SessionFetchResponse {
            error: None,
            session_id,
            topic_ids: false,
            throttle: Duration::ZERO,
            partitions,
        };
        let session_error = |code| SessionFetchResponse {
            error: Some(code),
            session_id: 0,
            topic_ids: false,
            throttle: Duration::ZERO,
            partitions: Vec::new(),
        };
        let fresh = |req: &SessionFetch| -> HashMap<TopicPartition, (i64, i64)> {
            req.partitions
                .iter()
                .map(|p| (p.partition.clone(), (p.offset, -1)))
                .collect()
        };
        if req.session_epoch == -1 {
            let mut parts = fresh(req);
            if !after_wait && !Self::has_data(&s, &parts, node) {
                return None;
            }
            let out = Self::answer(&mut s, node, &mut parts, true);
            return Some(respond(0, out));
        }
        if req.session_epoch == 0 {
            let mut parts = fresh(req);
            if !after_wait && !Self::has_data(&s, &parts, node) {
                return None;
            }
            s.next_session += 1;
            let id = s.next_session;
            let out = Self::answer(&mut s, node, &mut parts, true);
            s.sessions.insert(
                node,
                BrokerSession {
                    id,
                    next_epoch: 1,
                    parts,
                },
            );
            return Some(respond(id, out));
        }
        if s.evict.remove(&node) {
            s.sessions.remove(&node);
        }
        let Some(mut session) = s.sessions.remove(&node) else {
            return Some(session_error(ResponseError::FetchSessionIdNotFound));
        };
        if session.id != req.session_id {
            s.sessions.insert(node, session);
            return Some(session_error(ResponseError::FetchSessionIdNotFound));
        }
        if session.next_epoch != req.session_epoch {
            s.sessions.insert(node, session);
            return Some(session_error(ResponseError::InvalidFetchSessionEpoch));
        }
        let mut parts = session.parts.clone();
        for (tp, _) in &req.forgotten {
            parts.remove(tp);
        }
        for p in &req.partitions {
            let last_hw = parts.get(&p.partition).map_or(-1, |(_, hw)| *hw);
            parts.insert(p.partition.clone(), (p.offset, last_hw));
        }
        if !after_wait && !Self::has_data(&s, &parts, node) {
            // Long poll: the request is not applied yet (it is served again after the wait).
            s.sessions.insert(node, session);
            return None;
        }
        let out = Self::answer(&mut s, node, &mut parts, false);
        session.parts = parts;
        session.next_epoch += 1;
        let id = session.id;
        s.sessions.insert(node, session);
        Some(respond(id, out))
    }
}

impl SourceCluster for Fake {
    async fn route(
        &self,
        partition: &TopicPartition,
        stale_since: Option<Instant>,
    ) -> Result<PartitionLeader, IoError> {
        let mut s = self.0.lock().unwrap();
        if let Some(since) = stale_since
            && s.refreshed
                .get(partition.topic())
                .is_none_or(|at| *at <= since)
        {
            s.refreshes.push(partition.clone());
            s.refreshed
                .insert(partition.topic().to_owned(), Instant::now());
            for (tp, truth) in s.leaders.clone() {
                if tp.topic() == partition.topic() {
                    s.routes.insert(tp, truth);
                }
            }
        }
        if s.hidden.contains(partition.topic()) {
            return Err(IoError::new(
                FailureAction::Denied,
                "TOPIC_AUTHORIZATION_FAILED",
                "may not Describe",
            ));
        }
        let (leader, leader_epoch) = s.routes[partition];
        Ok(PartitionLeader {
            leader,
            leader_epoch,
            topic_id: None,
        })
    }

    fn leader_hint(&self, partition: &TopicPartition, leader: i32, epoch: i32) -> bool {
        let mut s = self.0.lock().unwrap();
        s.hints.push((partition.clone(), leader));
        s.routes.insert(partition.clone(), (leader, epoch));
        true
    }

    fn unresponsive(&self, node: i32) {
        self.0.lock().unwrap().unresponsive.push(node);
    }

    async fn fetch(
        &self,
        node: i32,
        request: SessionFetch,
    ) -> Result<SessionFetchResponse, IoError> {
        let mode = {
            let mut s = self.0.lock().unwrap();
            s.requests.push((node, request.clone()));
            s.modes.get(&node).cloned().unwrap_or(Mode::Normal)
        };
        match mode {
            Mode::BlackHole => {
                tokio::time::sleep(BLACK_HOLE).await;
                Err(IoError::new(
                    FailureAction::Retriable,
                    "timeout",
                    "Fetch timed out",
                ))
            }
            Mode::Fail(e) => {
                tokio::time::sleep(LATENCY).await;
                Err(e)
            }
            Mode::Normal => {
                tokio::time::sleep(LATENCY).await;
                if let Some(r) = self.serve(node, &request, false) {
                    return Ok(r);
                }
                tokio::time::sleep(request.options.max_wait).await;
                Ok(self
                    .serve(node, &request, true)
                    .unwrap_or_else(|| unreachable!("served after the wait")))
            }
        }
    }
}

/// What one partition task saw.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Answers with records.
    data: usize,
    /// Empty answers without error.
    empty: usize,
    /// Errors by code (partition codes and request failures alike).
    errors: Vec<String>,
    /// Brokers whose answers carried records.
    from: HashSet<i32>,
}

type Stats = Arc<Mutex<HashMap<TopicPartition, Seen>>>;

/// A partition's fetch loop, as the pipeline runs it: fetch, take the records, ask again; back
/// off 100 ms after an error; stop on a fatal one.
fn run_partition(fetcher: &Arc<Fetcher<Fake>>, fake: &Fake, tp: TopicPartition, stats: &Stats) {
    let (fetcher, fake, stats) = (fetcher.clone(), fake.clone(), stats.clone());
    tokio::spawn(async move {
        let mut offset = 0;
        loop {
            let spec = FetchSpec {
                partition: tp.clone(),
                offset,
                max_bytes: 1024,
                max_wait: MAX_WAIT,
                isolation: Isolation::ReadCommitted,
            };
            let result = fetcher.fetch(&spec).await;
            let error = {
                let mut stats = stats.lock().unwrap();
                let seen = stats.entry(tp.clone()).or_default();
                match &result {
                    Ok(a) if a.error.is_none() => {
                        assert_eq!(a.partition, tp, "every partition gets its own answer");
                        assert_eq!(a.fetch_offset, offset);
                        if a.records.is_empty() {
                            seen.empty += 1;
                        } else {
                            seen.data += 1;
                            offset += a.records.len() as i64;
                            let leader = fake.0.lock().unwrap().leaders[&tp].0;
                            seen.from.insert(leader);
                        }
                        None
                    }
                    Ok(a) => {
                        let code = strait_wire::error::error_name(
                            a.error.unwrap_or(ResponseError::UnknownServerError),
                        );
                        seen.errors.push(code);
                        Some(FailureAction::Retriable)
                    }
                    Err(e) => {
                        seen.errors.push(e.code.clone());
                        Some(e.action)
                    }
                }
            };
            match error {
                None => {}
                Some(FailureAction::Retriable) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Some(_) => return,
            }
        }
    });
}

fn start(fake: &Fake, partitions: &[TopicPartition]) -> Stats {
    let fetcher = Arc::new(Fetcher::new(fake.clone(), true));
    let stats = Stats::default();
    for tp in partitions {
        run_partition(&fetcher, fake, tp.clone(), &stats);
    }
    stats
}

fn seen(stats: &Stats, tp: &TopicPartition) -> Seen {
    stats.lock().unwrap().get(tp).cloned().unwrap_or_default()
}

/// An idle leader's long poll does not slow a busy leader's partition: before, one round for
/// all leaders capped it at one answer per long poll (9 in this second, see the report).
#[tokio::test(start_paused = true)]
async fn an_idle_leader_does_not_slow_a_busy_one() {
    let fake = Fake::default();
    let (busy, idle) = (tp("t", 0), tp("t", 1));
    fake.lead(&busy, 1);
    fake.lead(&idle, 2);
    fake.with(|s| {
        s.busy.insert(busy.clone());
    });
    let stats = start(&fake, &[busy.clone(), idle.clone()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (b, i) = (seen(&stats, &busy), seen(&stats, &idle));
    // One request costs LATENCY (1 ms) plus a little regather: hundreds per second.
    assert!(b.data >= 200, "busy partition: {b:?}");
    assert!(b.errors.is_empty() && i.errors.is_empty(), "{b:?} {i:?}");
    assert!(i.empty >= 1 && i.data == 0, "{i:?}");
    // The idle partition's broker long-polls: about one request per MAX_WAIT.
    let idle_requests = fake.requests_to(2).len();
    assert!((5..=12).contains(&idle_requests), "{idle_requests}");
}

/// A black-holed broker (requests are never answered) neither delays nor fails the partitions
/// of other brokers.
#[tokio::test(start_paused = true)]
async fn a_black_holed_broker_does_not_delay_other_brokers() {
    let fake = Fake::default();
    let (healthy, stuck) = (tp("t", 0), tp("t", 1));
    fake.lead(&healthy, 1);
    fake.lead(&stuck, 2);
    fake.with(|s| {
        s.busy.insert(healthy.clone());
        s.busy.insert(stuck.clone());
        s.modes.insert(2, Mode::BlackHole);
    });
    let stats = start(&fake, &[healthy.clone(), stuck.clone()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (h, s) = (seen(&stats, &healthy), seen(&stats, &stuck));
    assert!(h.data >= 200 && h.errors.is_empty(), "{h:?}");
    assert!(s.data == 0 && s.errors.is_empty(), "still waiting: {s:?}");
}

/// The partitions of a broker that stopped answering move to their new leader once the
/// metadata names it, without waiting for the request to time out (request.timeout.ms); a
/// partition whose leader did not change keeps waiting.
#[tokio::test(start_paused = true)]
async fn a_black_holed_leaders_partitions_move_before_the_timeout() {
    let fake = Fake::default();
    let (moving, staying) = (tp("t", 0), tp("t", 1));
    fake.lead(&moving, 2);
    fake.lead(&staying, 2);
    fake.with(|s| {
        s.busy.insert(moving.clone());
        s.modes.insert(2, Mode::BlackHole);
    });
    let stats = start(&fake, &[moving.clone(), staying.clone()]);
    // The controller moves the leadership away after the first check of the overdue request
    // (the client's metadata does not know yet): a later check must look again.
    tokio::time::sleep(super::scheduler::OVERDUE_AFTER + Duration::from_secs(1)).await;
    assert!(seen(&stats, &moving).errors.is_empty());
    fake.move_leader(&moving, 1);
    tokio::time::sleep(Duration::from_secs(9)).await;
    let (m, s) = (seen(&stats, &moving), seen(&stats, &staying));
    assert_eq!(m.errors, ["NOT_LEADER_OR_FOLLOWER"], "{m:?}");
    assert!(m.data > 100 && m.from == HashSet::from([1]), "{m:?}");
    assert!(s.data == 0 && s.errors.is_empty(), "{s:?}");
    let state = fake.0.lock().unwrap();
    assert!(state.unresponsive.contains(&2));
    assert!(BLACK_HOLE > Duration::from_secs(10));
}

/// A broker whose requests fail for good (a TLS failure) stops only its own partitions.
#[tokio::test(start_paused = true)]
async fn a_failing_broker_fails_only_its_partitions() {
    let fake = Fake::default();
    let (healthy, broken) = (tp("t", 0), tp("t", 1));
    fake.lead(&healthy, 1);
    fake.lead(&broken, 2);
    fake.with(|s| {
        s.busy.insert(healthy.clone());
        s.busy.insert(broken.clone());
        s.modes.insert(
            2,
            Mode::Fail(IoError::new(
                FailureAction::Fatal,
                "tls",
                "TLS with broker 2 failed",
            )),
        );
    });
    let stats = start(&fake, &[healthy.clone(), broken.clone()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (h, b) = (seen(&stats, &healthy), seen(&stats, &broken));
    assert!(h.data >= 200 && h.errors.is_empty(), "{h:?}");
    assert_eq!(b.errors, ["tls"], "{b:?}");
}

/// A partition's own error (TOPIC_AUTHORIZATION_FAILED on fetch, or in the metadata) reaches
/// that partition only, also when it shares the broker and the request with healthy ones.
#[tokio::test(start_paused = true)]
async fn an_authorization_error_reaches_only_its_partition() {
    let fake = Fake::default();
    let (ok, denied, hidden) = (tp("ok", 0), tp("denied", 0), tp("hidden", 0));
    for p in [&ok, &denied, &hidden] {
        fake.lead(p, 1);
    }
    fake.with(|s| {
        s.busy.insert(ok.clone());
        s.denied.insert("denied".into());
        s.hidden.insert("hidden".into());
    });
    let stats = start(&fake, &[ok.clone(), denied.clone(), hidden.clone()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (o, d, h) = (
        seen(&stats, &ok),
        seen(&stats, &denied),
        seen(&stats, &hidden),
    );
    assert!(o.data >= 200 && o.errors.is_empty(), "{o:?}");
    assert!(
        !d.errors.is_empty() && d.errors.iter().all(|e| e == "TOPIC_AUTHORIZATION_FAILED"),
        "{d:?}"
    );
    assert_eq!(d.data, 0);
    assert_eq!(h.errors, ["TOPIC_AUTHORIZATION_FAILED"], "{h:?}");
}

/// With a session, the second and later requests carry only the partitions whose offset
/// changed; idle partitions stay in the session and are not sent again.
#[tokio::test(start_paused = true)]
async fn session_rounds_send_only_changed_partitions() {
    let fake = Fake::default();
    let parts: Vec<TopicPartition> = (0..5).map(|p| tp("t", p)).collect();
    for p in &parts {
        fake.lead(p, 1);
    }
    fake.with(|s| {
        s.busy.insert(parts[0].clone());
    });
    let stats = start(&fake, &parts);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = fake.requests_to(1);
    let sizes: Vec<(i32, usize)> = requests
        .iter()
        .map(|r| (r.session_epoch, r.partitions.len()))
        .collect();
    assert_eq!(
        sizes[0],
        (0, 5),
        "a full request creates the session: {sizes:?}"
    );
    assert!(sizes.len() > 50, "{sizes:?}");
    assert!(
        sizes[1..].iter().all(|&(epoch, n)| epoch >= 1 && n == 1),
        "then only the busy partition: {sizes:?}"
    );
    assert!(
        requests[1..]
            .iter()
            .all(|r| r.partitions[0].partition == parts[0] && r.forgotten.is_empty())
    );
    // Data arriving for an idle partition reaches it through the session, unasked.
    let before = seen(&stats, &parts[3]);
    fake.with(|s| {
        s.logs.insert(parts[3].clone(), 7);
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let after = seen(&stats, &parts[3]);
    assert_eq!((before.data, after.data), (0, 1), "{after:?}");
    for p in &parts {
        assert!(
            seen(&stats, p).errors.is_empty(),
            "{p}: {:?}",
            seen(&stats, p)
        );
    }
}

/// FETCH_SESSION_ID_NOT_FOUND (the broker evicted the session): the next request is a full
/// one that opens a new session, and no partition sees an error.
#[tokio::test(start_paused = true)]
async fn an_evicted_session_is_recreated() {
    let fake = Fake::default();
    let parts: Vec<TopicPartition> = (0..3).map(|p| tp("t", p)).collect();
    for p in &parts {
        fake.lead(p, 1);
    }
    fake.with(|s| {
        s.busy.insert(parts[0].clone());
    });
    let stats = start(&fake, &parts);
    tokio::time::sleep(Duration::from_millis(50)).await;
    fake.with(|s| {
        s.evict.insert(1);
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let requests: Vec<(i32, i32, usize)> = fake
        .requests_to(1)
        .iter()
        .map(|r| (r.session_id, r.session_epoch, r.partitions.len()))
        .collect();
    // The request served after the eviction is refused; the next one is full and opens
    // session 2, which the following requests use.
    let full: Vec<usize> = (1..requests.len())
        .filter(|&i| requests[i].1 == 0)
        .collect();
    assert_eq!(full.len(), 1, "{requests:?}");
    let k = full[0];
    assert!(
        requests[k - 1].0 == 1 && requests[k - 1].1 >= 1,
        "{requests:?}"
    );
    assert_eq!(requests[k], (0, 0, 3), "{requests:?}");
    assert_eq!(
        (requests[k + 1].0, requests[k + 1].1),
        (2, 1),
        "{requests:?}"
    );
    for p in &parts {
        assert!(
            seen(&stats, p).errors.is_empty(),
            "{p}: {:?}",
            seen(&stats, p)
        );
    }
    assert!(seen(&stats, &parts[0]).data > 50);
}

/// NOT_LEADER_OR_FOLLOWER moves the partition to its new leader: at once with the leader the
/// broker named (KIP-951), else after a metadata refresh.
#[tokio::test(start_paused = true)]
async fn a_moved_leader_is_followed() {
    for hint in [true, false] {
        let fake = Fake::default();
        let (moving, staying) = (tp("t", 0), tp("t", 1));
        fake.lead(&moving, 1);
        fake.lead(&staying, 1);
        fake.with(|s| {
            s.busy.insert(moving.clone());
            s.busy.insert(staying.clone());
            s.hint_leaders = hint;
        });
        let stats = start(&fake, &[moving.clone(), staying.clone()]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Leadership moves to broker 2; the client's metadata still names broker 1.
        fake.move_leader(&moving, 2);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let m = seen(&stats, &moving);
        assert_eq!(m.errors, ["NOT_LEADER_OR_FOLLOWER"], "hint {hint}: {m:?}");
        assert!(m.from.contains(&2), "hint {hint}: {m:?}");
        assert!(seen(&stats, &staying).errors.is_empty());
        let s = fake.0.lock().unwrap();
        if hint {
            assert_eq!(s.hints, [(moving.clone(), 2)]);
            assert!(s.refreshes.is_empty());
        } else {
            assert!(s.hints.is_empty());
            assert_eq!(s.refreshes, std::slice::from_ref(&moving));
        }
        let to_new_leader = s.requests.iter().filter(|(n, _)| *n == 2).count();
        assert!(
            to_new_leader > 100,
            "hint {hint}: {to_new_leader} requests to broker 2"
        );
    }
}

/// Kept for the report: the regather behaviour per broker (as the old single-round tests).
#[tokio::test(start_paused = true)]
async fn a_partition_that_stays_away_costs_one_short_wait() {
    let fake = Fake::default();
    let parts: Vec<TopicPartition> = (0..2).map(|p| tp("t", p)).collect();
    for p in &parts {
        fake.lead(p, 1);
        fake.with(|s| {
            s.busy.insert(p.clone());
        });
    }
    let fetcher = Arc::new(Fetcher::new(fake.clone(), true));
    let spec = |p: &TopicPartition, offset| FetchSpec {
        partition: p.clone(),
        offset,
        max_bytes: 1024,
        max_wait: MAX_WAIT,
        isolation: Isolation::ReadCommitted,
    };
    let (first, second) = (spec(&parts[0], 0), spec(&parts[1], 0));
    let (a, b) = tokio::join!(fetcher.fetch(&first), fetcher.fetch(&second));
    assert!(a.is_ok() && b.is_ok());
    let start = Instant::now();
    fetcher.fetch(&spec(&parts[0], 1)).await.unwrap();
    let took = start.elapsed();
    assert!(
        took >= super::scheduler::REGATHER
            && took < super::scheduler::REGATHER + Duration::from_millis(5),
        "second round took {took:?}"
    );
    let rounds: Vec<usize> = fake
        .requests_to(1)
        .iter()
        .map(|r| r.partitions.len())
        .collect();
    assert_eq!(rounds, [2, 1], "{rounds:?}");
}
