//! The fetch scheduler of one source broker, as a deterministic state machine: events in
//! (a partition asks, a partition gives up, the broker answered, the request failed), actions
//! out (the next request to send, the answers to hand out), time passed in. It performs no I/O
//! and reads no clock; [`super::driver`] runs it.
//!
//! Kafka serves one connection's requests strictly in order, so each broker gets one Fetch in
//! flight carrying every partition that is waiting (a round), like the Java consumer: the broker
//! answers as soon as any of them has data. Rounds of different brokers are independent: an
//! idle broker's long poll, a dead broker or an error never holds up another broker's partitions.
//!
//! A round waits briefly ([`REGATHER`]) for the partitions the previous round answered: they ask
//! again within microseconds, and one that missed the round would wait for the round's whole
//! long poll while data arrives for it.
//!
//! Errors are per partition: a partition's error code goes to that partition only; a failed
//! request (connection lost, timeout, TLS) goes to the partitions of that request only. Nothing
//! is retried here: each partition's own fetch loop backs off and asks again, and is routed
//! again (to a new leader if leadership moved).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use strait_wire::fetch::{SessionFetch, SessionFetchResponse};
use strait_wire::{FetchOptions, FetchPartition, FetchedPartition, Isolation, TopicPartition};
use tokio::time::Instant;

use super::session::{Reply, Session};
use crate::pipeline::io::{FailureAction, IoError};
use crate::pipeline::kafka::classify;

/// How long a round waits for the partitions of the previous round to ask again. They normally
/// do within microseconds (a partition asks for its next offset as soon as it has handed the
/// response's batches to its produce side); one that does not is held up by back-pressure (a
/// full in-flight window or memory budget) and joins a later round.
pub(crate) const REGATHER: Duration = Duration::from_millis(2);

/// The longest a round may long-poll when it leaves without some of the partitions the previous
/// round answered (they did not ask again within [`REGATHER`]). Those partitions had data a
/// moment ago and most likely have more; they can only join the next round, and a long poll
/// (`max_wait`, 100 ms by default) would hold them that long while their data piles up. On a
/// busy machine (CPU contention: the partitions' tasks are not scheduled within 2 ms) this
/// happened to nearly every round, adding up to a long poll per round trip to the mirror's
/// latency. A round that leaves with everyone it expected long-polls as usual, so an idle broker
/// still gets one request per `max_wait`.
pub(crate) const LATE_MAX_WAIT: Duration = Duration::from_millis(5);

/// How long past its long poll a request may go unanswered before the scheduler checks whether
/// its partitions still belong to this broker. A live broker answers a Fetch when its long poll
/// ends; one that does not may be frozen or black-holed, and its partitions may have moved to
/// another leader meanwhile: they should not wait for `request.timeout.ms`.
pub(crate) const OVERDUE_AFTER: Duration = Duration::from_secs(3);

/// Identifies one waiting fetch (the driver keeps the reply channel under it).
pub(crate) type Ticket = u64;

/// One partition's fetch, routed to this broker.
#[derive(Debug, Clone)]
pub(crate) struct Want {
    /// The partition, offset, size, leader epoch and topic id.
    pub(crate) partition: FetchPartition,
    pub(crate) isolation: Isolation,
    /// How long the broker may hold the request for lack of data.
    pub(crate) max_wait: Duration,
}

/// The answer for one ticket.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) ticket: Ticket,
    /// The partition's part of the response (its error code included), or why the request
    /// failed.
    pub(crate) result: Result<FetchedPartition, IoError>,
}

#[derive(Debug)]
struct Waiting {
    ticket: Ticket,
    want: Want,
}

/// The scheduler of one broker.
#[derive(Debug)]
pub(crate) struct Scheduler {
    session: Session,
    /// Asked and not in flight, oldest first (a round takes them in this order; a partition
    /// that asks again goes to the back, so the broker's response size limit rotates).
    waiting: VecDeque<Waiting>,
    /// The round in flight.
    in_flight: Option<Vec<Waiting>>,
    /// When to check next that the partitions of the request in flight did not move to another
    /// leader (the request is overdue).
    check_at: Option<Instant>,
    /// Tickets of the round in flight whose partition gave up (not answered, not kept).
    abandoned: HashSet<Ticket>,
    /// The partitions with an open ticket (waiting, or in flight and not abandoned): a
    /// partition has one fetch at a time.
    busy: HashMap<TopicPartition, Ticket>,
    /// Partitions the last round answered that have not asked again yet.
    expected: HashSet<TopicPartition>,
    /// Until when the next round waits for `expected`.
    regather_until: Option<Instant>,
    /// No request before this instant (the broker asked to be left alone: quota throttling).
    throttled_until: Option<Instant>,
}

impl Scheduler {
    /// A scheduler; `sessions: false` sends sessionless full requests only.
    pub(crate) fn new(sessions: bool) -> Scheduler {
        Scheduler {
            session: Session::new(sessions),
            waiting: VecDeque::new(),
            in_flight: None,
            check_at: None,
            abandoned: HashSet::new(),
            busy: HashMap::new(),
            expected: HashSet::new(),
            regather_until: None,
            throttled_until: None,
        }
    }

    /// A partition asks for data. A second ask for a partition already waiting is answered at
    /// once with a retriable error (a partition has one fetch at a time; this one is a leftover
    /// of a partition that restarted, and asks again after a backoff).
    pub(crate) fn want(&mut self, ticket: Ticket, want: Want) -> Option<Answer> {
        let tp = &want.partition.partition;
        if self.busy.contains_key(tp) {
            return Some(Answer {
                ticket,
                result: Err(IoError::new(
                    FailureAction::Retriable,
                    "duplicate_fetch",
                    format!("{tp} is already being fetched; asking again after a backoff"),
                )),
            });
        }
        self.expected.remove(tp);
        self.busy.insert(tp.clone(), ticket);
        self.waiting.push_back(Waiting { ticket, want });
        None
    }

    /// `w`'s ticket is answered or given up: its partition may ask again.
    fn done(&mut self, w: &Waiting) {
        let tp = &w.want.partition.partition;
        if self.busy.get(tp) == Some(&w.ticket) {
            self.busy.remove(tp);
        }
    }

    /// The partition behind `ticket` no longer waits (its task stopped). It leaves the session
    /// with the next round.
    pub(crate) fn cancel(&mut self, ticket: Ticket) {
        if let Some(i) = self.waiting.iter().position(|w| w.ticket == ticket)
            && let Some(w) = self.waiting.remove(i)
        {
            self.done(&w);
        }
        let in_flight = self
            .in_flight
            .as_ref()
            .and_then(|round| round.iter().find(|w| w.ticket == ticket))
            .map(|w| w.want.partition.partition.clone());
        if let Some(tp) = in_flight {
            self.abandoned.insert(ticket);
            if self.busy.get(&tp) == Some(&ticket) {
                self.busy.remove(&tp);
            }
        }
    }

    /// The next request to send, if one is due at `now`: nothing is in flight, someone waits,
    /// and the partitions just answered have asked again (or [`REGATHER`] passed).
    pub(crate) fn poll_request(&mut self, now: Instant) -> Option<SessionFetch> {
        if self.in_flight.is_some() || self.waiting.is_empty() {
            return None;
        }
        if self.throttled_until.is_some_and(|t| now < t) {
            return None;
        }
        self.throttled_until = None;
        if !self.expected.is_empty() && self.regather_until.is_some_and(|t| now < t) {
            return None;
        }
        // Partitions the last round answered that have not asked again: this round must not hold
        // them back for a whole long poll.
        let late = self.expected.len();
        self.expected.clear();
        self.regather_until = None;
        // One isolation level per request; the rest waits for the next round.
        let isolation = self.waiting[0].want.isolation;
        let (round, rest): (Vec<Waiting>, Vec<Waiting>) = self
            .waiting
            .drain(..)
            .partition(|w| w.want.isolation == isolation);
        self.waiting = rest.into();
        let mut max_wait = round
            .iter()
            .map(|w| w.want.max_wait)
            .min()
            .unwrap_or(Duration::from_millis(100));
        if late > 0 {
            max_wait = max_wait.min(LATE_MAX_WAIT);
        }
        let max_bytes: i64 = round
            .iter()
            .map(|w| i64::from(w.want.partition.max_bytes))
            .sum();
        let options = FetchOptions {
            isolation,
            max_wait,
            max_bytes: i32::try_from(max_bytes).unwrap_or(i32::MAX),
            ..FetchOptions::default()
        };
        let wanted: Vec<FetchPartition> = round.iter().map(|w| w.want.partition.clone()).collect();
        tracing::debug!(
            partitions = wanted.len(),
            late,
            max_wait_ms = max_wait.as_millis() as u64,
            "fetch round"
        );
        let request = self.session.request(&wanted, options);
        self.in_flight = Some(round);
        self.check_at = Some(now + max_wait + OVERDUE_AFTER);
        Some(request)
    }

    /// If the request in flight is overdue at `now`: its partitions and those waiting behind it
    /// (they cannot be sent before it is answered), to be checked against metadata refreshed
    /// from now on (then [`release`](Self::release) those that moved). Asks again every
    /// [`OVERDUE_AFTER`] while the request stays unanswered.
    pub(crate) fn overdue(&mut self, now: Instant) -> Option<Vec<TopicPartition>> {
        let round = self.in_flight.as_ref()?;
        let check_at = self.check_at?;
        if now < check_at {
            return None;
        }
        self.check_at = Some(now + OVERDUE_AFTER);
        let partitions = round
            .iter()
            .filter(|w| !self.abandoned.contains(&w.ticket))
            .chain(&self.waiting)
            .map(|w| w.want.partition.partition.clone())
            .collect();
        Some(partitions)
    }

    /// The partitions `moved` of the overdue request in flight, or waiting behind it, have
    /// another leader now: they are answered at once with a retriable error (and fetched from
    /// their new leader); the request stays in flight for the others, and the others keep
    /// waiting for it.
    pub(crate) fn release(&mut self, moved: &[TopicPartition], node: i32) -> Vec<Answer> {
        let moved: HashSet<&TopicPartition> = moved.iter().collect();
        let mut released = Vec::new();
        if let Some(round) = &self.in_flight {
            for w in round {
                let tp = &w.want.partition.partition;
                if moved.contains(tp) && self.abandoned.insert(w.ticket) {
                    if self.busy.get(tp) == Some(&w.ticket) {
                        self.busy.remove(tp);
                    }
                    released.push((w.ticket, tp.clone()));
                }
            }
        }
        // Waiting behind an unanswered request, they would wait for its timeout, however long
        // ago their leadership moved away.
        let (behind, kept): (Vec<Waiting>, Vec<Waiting>) = self
            .waiting
            .drain(..)
            .partition(|w| moved.contains(&w.want.partition.partition));
        self.waiting = kept.into();
        for w in behind {
            self.done(&w);
            released.push((w.ticket, w.want.partition.partition));
        }
        released
            .into_iter()
            .map(|(ticket, tp)| Answer {
                ticket,
                result: Err(IoError::new(
                    FailureAction::Retriable,
                    "NOT_LEADER_OR_FOLLOWER",
                    format!(
                        "source broker {node} has not answered a Fetch in time and the metadata \
                         names another leader for {tp}; fetching from it"
                    ),
                )),
            })
            .collect()
    }

    /// When [`poll_request`](Self::poll_request) (or, with a request in flight,
    /// [`overdue`](Self::overdue)) should be called again for lack of news.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        if self.in_flight.is_some() {
            return self.check_at;
        }
        if self.waiting.is_empty() {
            return None;
        }
        let regather = (!self.expected.is_empty())
            .then_some(self.regather_until)
            .flatten();
        match (regather, self.throttled_until) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The broker answered the request in flight.
    pub(crate) fn on_response(&mut self, resp: SessionFetchResponse, now: Instant) -> Vec<Answer> {
        let Some(round) = self.in_flight.take() else {
            return Vec::new();
        };
        self.check_at = None;
        let abandoned = std::mem::take(&mut self.abandoned);
        let round: Vec<Waiting> = round
            .into_iter()
            .filter(|w| !abandoned.contains(&w.ticket))
            .collect();
        if !resp.throttle.is_zero() {
            self.throttled_until = Some(now + resp.throttle);
        }
        let reply = self.session.on_response(&resp);
        if reply == Reply::Retry {
            // The session was gone: nothing was fetched. Ask again at once with a full request,
            // these partitions first.
            for w in round.into_iter().rev() {
                self.waiting.push_front(w);
            }
            return Vec::new();
        }
        if let Some(code) = resp.error {
            let err = classify(&strait_wire::Error::Broker {
                code,
                context: "the source broker failed the whole Fetch request".into(),
            });
            return self.fail(round, &err);
        }
        let mut by_partition: HashMap<TopicPartition, FetchedPartition> = resp
            .partitions
            .into_iter()
            .map(|p| (p.partition.clone(), p))
            .collect();
        let mut answers = Vec::with_capacity(round.len());
        let mut kept = Vec::new();
        for w in round {
            let tp = &w.want.partition.partition;
            let answer = by_partition.remove(tp);
            if answer.is_some() || reply != Reply::Incremental {
                self.done(&w);
            }
            let tp = &w.want.partition.partition;
            match answer {
                Some(mut answer) => {
                    // An incremental answer does not repeat the offset; the session's is the
                    // one the broker read from.
                    answer.fetch_offset = w.want.partition.offset;
                    if answer.error.is_none() {
                        self.expected.insert(tp.clone());
                    }
                    answers.push(Answer {
                        ticket: w.ticket,
                        result: Ok(answer),
                    });
                }
                // No news in an incremental session: the partition keeps waiting, in the
                // session, unchanged (so it is not even sent again).
                None if reply == Reply::Incremental => kept.push(w),
                None => answers.push(Answer {
                    ticket: w.ticket,
                    result: Err(IoError::new(
                        FailureAction::Retriable,
                        "bad_response",
                        format!("the fetch response had no answer for {tp}"),
                    )),
                }),
            }
        }
        for w in kept.into_iter().rev() {
            self.waiting.push_front(w);
        }
        if !self.expected.is_empty() {
            self.regather_until = Some(now + REGATHER);
        }
        answers
    }

    /// The request in flight failed as a whole (connection lost or refused, timeout, TLS,
    /// a response too large): every partition of that request, and only those, gets `err`.
    pub(crate) fn on_failure(&mut self, err: IoError) -> Vec<Answer> {
        let Some(round) = self.in_flight.take() else {
            return Vec::new();
        };
        self.check_at = None;
        let abandoned = std::mem::take(&mut self.abandoned);
        self.session.on_failure();
        let round: Vec<Waiting> = round
            .into_iter()
            .filter(|w| !abandoned.contains(&w.ticket))
            .collect();
        self.fail(round, &err)
    }

    /// Answers every partition of `round` with `err`.
    fn fail(&mut self, round: Vec<Waiting>, err: &IoError) -> Vec<Answer> {
        round
            .into_iter()
            .map(|w| {
                self.done(&w);
                Answer {
                    ticket: w.ticket,
                    result: Err(err.clone()),
                }
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::Bytes;
    use strait_wire::ResponseError;

    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p).unwrap()
    }

    fn want(p: i32, offset: i64) -> Want {
        Want {
            partition: FetchPartition::new(tp(p), offset),
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(100),
        }
    }

    fn data(p: i32, error: Option<ResponseError>) -> FetchedPartition {
        FetchedPartition {
            partition: tp(p),
            fetch_offset: -1,
            error,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            aborted_transactions: Vec::new(),
            preferred_read_replica: None,
            current_leader: None,
            records: Bytes::from_static(b"x"),
        }
    }

    fn response(session_id: i32, parts: Vec<FetchedPartition>) -> SessionFetchResponse {
        SessionFetchResponse {
            error: None,
            session_id,
            topic_ids: false,
            throttle: Duration::ZERO,
            partitions: parts,
        }
    }

    /// A partition asks; it must not be refused as already being fetched.
    fn ask(s: &mut Scheduler, ticket: Ticket, w: Want) {
        assert!(s.want(ticket, w).is_none(), "ticket {ticket} refused");
    }

    fn sent(r: &SessionFetch) -> Vec<i32> {
        r.partitions
            .iter()
            .map(|p| p.partition.partition())
            .collect()
    }

    fn tickets(answers: &[Answer]) -> Vec<(Ticket, Option<String>)> {
        answers
            .iter()
            .map(|a| {
                let err = match &a.result {
                    Ok(p) => p.error.map(strait_wire::error::error_name),
                    Err(e) => Some(e.code.clone()),
                };
                (a.ticket, err)
            })
            .collect()
    }

    /// The next round waits for the partitions just answered, at most REGATHER.
    #[test]
    fn regather_waits_for_the_partitions_just_answered() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        let r = s.poll_request(t0).unwrap();
        assert_eq!(sent(&r), [0, 1]);
        assert!(s.poll_request(t0).is_none(), "one request in flight");
        let answers = s.on_response(response(5, vec![data(0, None), data(1, None)]), t0);
        assert_eq!(tickets(&answers), [(1, None), (2, None)]);
        assert_eq!(answers[0].result.as_ref().unwrap().fetch_offset, 0);

        // Partition 0 asks again at once; partition 1 is late.
        ask(&mut s, 3, want(0, 1));
        assert!(s.poll_request(t0).is_none(), "waits for partition 1");
        assert_eq!(s.next_wakeup(), Some(t0 + REGATHER));
        ask(&mut s, 4, want(1, 1));
        let r = s.poll_request(t0).unwrap();
        assert_eq!(sent(&r), [0, 1], "both changed offsets");
        assert_eq!(r.session_epoch, 1);

        // This time partition 1 does not come back: the round leaves after REGATHER without it.
        s.on_response(response(5, vec![data(0, None), data(1, None)]), t0);
        ask(&mut s, 5, want(0, 2));
        assert!(s.poll_request(t0 + REGATHER / 2).is_none());
        let r = s.poll_request(t0 + REGATHER).unwrap();
        assert_eq!(sent(&r), [0]);
        assert_eq!(r.forgotten.len(), 1, "partition 1 leaves the session");
    }

    /// A round that leaves without a partition the previous round answered (it did not ask again
    /// within REGATHER: its task was not scheduled in time on a busy machine) long-polls at most
    /// LATE_MAX_WAIT, so the late partition joins the next round within milliseconds instead of
    /// waiting out a whole long poll; the round after that long-polls as usual again.
    #[test]
    fn a_round_without_late_partitions_does_not_long_poll() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        let r = s.poll_request(t0).unwrap();
        assert_eq!(
            r.options.max_wait,
            Duration::from_millis(100),
            "nobody late"
        );
        s.on_response(response(5, vec![data(0, None), data(1, None)]), t0);

        // Partition 0 asks again at once, partition 1 misses the regather window.
        ask(&mut s, 3, want(0, 1));
        let r = s.poll_request(t0 + REGATHER).unwrap();
        assert_eq!(sent(&r), [0]);
        assert_eq!(r.options.max_wait, LATE_MAX_WAIT, "partition 1 is late");

        // It asks while that round is in flight and goes with the next one.
        ask(&mut s, 4, want(1, 1));
        s.on_response(response(5, vec![]), t0 + REGATHER + LATE_MAX_WAIT);
        let r = s
            .poll_request(t0 + REGATHER + LATE_MAX_WAIT)
            .expect("nobody was answered: no regather wait");
        assert_eq!(sent(&r), [1]);
        assert_eq!(
            r.options.max_wait,
            Duration::from_millis(100),
            "everyone expected is there: a normal long poll"
        );

        // Both answered and both back within REGATHER: a normal long poll.
        let t1 = t0 + Duration::from_secs(1);
        s.on_response(response(5, vec![data(0, None), data(1, None)]), t1);
        ask(&mut s, 5, want(0, 2));
        ask(&mut s, 6, want(1, 2));
        let r = s.poll_request(t1).unwrap();
        assert_eq!(sent(&r), [0, 1]);
        assert_eq!(r.options.max_wait, Duration::from_millis(100));
    }

    /// An incremental answer leaves out partitions without news: they keep waiting (and are not
    /// sent again); a full answer that leaves one out is an error for that partition.
    #[test]
    fn partitions_without_news_keep_waiting() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        s.poll_request(t0).unwrap();
        let answers = s.on_response(response(5, vec![data(1, None)]), t0);
        assert_eq!(
            tickets(&answers),
            [(1, Some("bad_response".into())), (2, None)],
            "a full answer must cover every partition"
        );

        ask(&mut s, 3, want(0, 0));
        ask(&mut s, 4, want(1, 1));
        let r = s.poll_request(t0).unwrap();
        assert_eq!(r.session_epoch, 1);
        assert_eq!(sent(&r), [1], "partition 0 is unchanged");
        let answers = s.on_response(response(5, vec![data(1, None)]), t0);
        assert_eq!(tickets(&answers), [(4, None)]);

        // Partition 0 (ticket 3) still waits: it is in the next round without asking again.
        ask(&mut s, 5, want(1, 2));
        let r = s.poll_request(t0).unwrap();
        assert_eq!(sent(&r), [1]);
        assert!(
            r.forgotten.is_empty(),
            "partition 0 is still in the session"
        );
        let answers = s.on_response(response(5, vec![data(0, None)]), t0);
        assert_eq!(tickets(&answers), [(3, None)]);
        assert_eq!(answers[0].result.as_ref().unwrap().fetch_offset, 0);
    }

    /// A partition's error code goes to that partition only; a failed request goes to the
    /// partitions of that request only.
    #[test]
    fn errors_reach_only_their_partitions() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        s.poll_request(t0).unwrap();
        let answers = s.on_response(
            response(
                5,
                vec![
                    data(0, Some(ResponseError::TopicAuthorizationFailed)),
                    data(1, None),
                ],
            ),
            t0,
        );
        assert_eq!(
            tickets(&answers),
            [(1, Some("TOPIC_AUTHORIZATION_FAILED".into())), (2, None)]
        );

        // Partition 1 asks again and its request fails; partition 2 asked meanwhile.
        ask(&mut s, 3, want(1, 1));
        s.poll_request(t0).unwrap();
        ask(&mut s, 4, want(2, 0));
        let failed = IoError::new(FailureAction::Retriable, "disconnected", "gone");
        let answers = s.on_failure(failed);
        assert_eq!(tickets(&answers), [(3, Some("disconnected".into()))]);
        let r = s.poll_request(t0).unwrap();
        assert_eq!(sent(&r), [2]);
        assert_eq!(r.session_epoch, 0, "a full request after a failure");

        // A request-level error code fails that request's partitions.
        let mut whole = response(0, vec![]);
        whole.error = Some(ResponseError::UnknownServerError);
        let answers = s.on_response(whole, t0);
        assert_eq!(
            tickets(&answers),
            [(4, Some("UNKNOWN_SERVER_ERROR".into()))]
        );
    }

    /// FETCH_SESSION_ID_NOT_FOUND: nothing is answered, the partitions go again at once in a
    /// full request that opens a new session.
    #[test]
    fn an_evicted_session_is_recreated_without_bothering_the_partitions() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        s.poll_request(t0).unwrap();
        s.on_response(response(5, vec![data(0, None)]), t0);
        ask(&mut s, 2, want(0, 1));
        let r = s.poll_request(t0).unwrap();
        assert_eq!((r.session_id, r.session_epoch), (5, 1));
        let mut evicted = response(0, vec![]);
        evicted.error = Some(ResponseError::FetchSessionIdNotFound);
        assert!(s.on_response(evicted, t0).is_empty());
        let r = s.poll_request(t0).unwrap();
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(sent(&r), [0]);
        let answers = s.on_response(response(6, vec![data(0, None)]), t0);
        assert_eq!(tickets(&answers), [(2, None)]);
    }

    /// A partition that stopped waiting is not answered, not kept, and leaves the session.
    #[test]
    fn a_cancelled_partition_leaves_the_session() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        s.poll_request(t0).unwrap();
        s.on_response(response(5, vec![data(0, None), data(1, None)]), t0);
        ask(&mut s, 3, want(0, 1));
        ask(&mut s, 4, want(1, 1));
        s.poll_request(t0).unwrap();
        s.cancel(4);
        let answers = s.on_response(response(5, vec![]), t0);
        assert!(answers.is_empty());
        let r = s.poll_request(t0).unwrap();
        assert!(r.partitions.is_empty());
        assert_eq!(r.forgotten.len(), 1);
        assert_eq!(r.forgotten[0].0, tp(1));
    }

    #[test]
    fn a_second_ask_for_a_waiting_partition_is_refused() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        let refused = s.want(2, want(0, 0)).unwrap();
        assert_eq!(refused.ticket, 2);
        assert_eq!(refused.result.unwrap_err().action, FailureAction::Retriable);
        // In flight: still one at a time; once given up, the partition may ask again.
        s.poll_request(t0).unwrap();
        assert!(s.want(3, want(0, 0)).is_some());
        s.cancel(1);
        ask(&mut s, 4, want(0, 0));
        s.cancel(4);
        ask(&mut s, 5, want(0, 0));
    }

    /// An overdue request is checked every OVERDUE_AFTER; partitions that moved are answered at
    /// once, the others keep waiting, and the late answer no longer reaches the moved ones.
    #[test]
    fn partitions_of_an_overdue_request_can_be_released() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        ask(&mut s, 2, want(1, 0));
        s.poll_request(t0).unwrap();
        let due = t0 + Duration::from_millis(100) + OVERDUE_AFTER;
        assert_eq!(s.next_wakeup(), Some(due));
        assert!(s.overdue(due - Duration::from_millis(1)).is_none());
        assert_eq!(s.overdue(due).unwrap(), vec![tp(0), tp(1)]);
        assert!(s.overdue(due).is_none(), "next check later");
        assert_eq!(s.next_wakeup(), Some(due + OVERDUE_AFTER));
        let answers = s.release(&[tp(1)], 7);
        assert_eq!(
            tickets(&answers),
            [(2, Some("NOT_LEADER_OR_FOLLOWER".into()))]
        );
        assert!(s.release(&[tp(1)], 7).is_empty(), "answered once");
        assert_eq!(s.overdue(due + OVERDUE_AFTER).unwrap(), vec![tp(0)]);
        // The request times out in the end: only the partition still waiting hears of it.
        let answers = s.on_failure(IoError::new(FailureAction::Retriable, "timeout", "late"));
        assert_eq!(tickets(&answers), [(1, Some("timeout".into()))]);
        assert_eq!(s.next_wakeup(), None);
    }

    /// A partition that asked while the request in flight went unanswered waits behind it (one
    /// request per broker at a time): it is checked with the overdue request's partitions, and
    /// released if it moved, instead of waiting for the request's timeout. (A frozen broker
    /// held such a partition for `request.timeout.ms` after its leadership had moved.)
    #[test]
    fn partitions_waiting_behind_an_overdue_request_can_be_released() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        s.poll_request(t0).unwrap();
        // Asked after the request was sent: waits for the next round.
        ask(&mut s, 2, want(1, 0));
        ask(&mut s, 3, want(2, 0));
        let due = t0 + Duration::from_millis(100) + OVERDUE_AFTER;
        assert_eq!(s.overdue(due).unwrap(), vec![tp(0), tp(1), tp(2)]);
        let answers = s.release(&[tp(0), tp(1)], 7);
        assert_eq!(
            tickets(&answers),
            [
                (1, Some("NOT_LEADER_OR_FOLLOWER".into())),
                (2, Some("NOT_LEADER_OR_FOLLOWER".into()))
            ]
        );
        // Released: it may ask again (at its new leader; here the same scheduler).
        ask(&mut s, 4, want(1, 0));
        assert_eq!(
            s.overdue(due + OVERDUE_AFTER).unwrap(),
            vec![tp(2), tp(1)],
            "the rest is still checked"
        );
        // The broker answers in the end: the next round carries those still waiting.
        let answers = s.on_failure(IoError::new(FailureAction::Retriable, "timeout", "late"));
        assert!(answers.is_empty(), "{:?}", tickets(&answers));
        let next = s.poll_request(due + OVERDUE_AFTER).unwrap();
        assert_eq!(sent(&next), vec![2, 1]);
    }

    /// A throttled answer (KIP-219) holds the next request back for the throttle time.
    #[test]
    fn throttling_delays_the_next_request() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(true);
        ask(&mut s, 1, want(0, 0));
        s.poll_request(t0).unwrap();
        let mut throttled = response(5, vec![data(0, None)]);
        throttled.throttle = Duration::from_millis(50);
        s.on_response(throttled, t0);
        ask(&mut s, 2, want(0, 1));
        assert!(s.poll_request(t0 + REGATHER).is_none());
        assert_eq!(s.next_wakeup(), Some(t0 + Duration::from_millis(50)));
        assert!(s.poll_request(t0 + Duration::from_millis(50)).is_some());
    }
}
