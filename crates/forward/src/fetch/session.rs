//! One broker's incremental fetch session (KIP-227), as a plain state machine.
//!
//! The broker remembers, per session, which partitions the client fetches and from where. A
//! request then carries only what changed: partitions added or whose offset, size or leader
//! epoch changed, and the partitions that leave (`forgotten`). The broker fetches every
//! partition of the session and answers only those with news. A leader with thousands of mostly
//! idle partitions is therefore not sent (nor answers) the whole list every round.
//!
//! The session holds exactly the partitions of the last round, as the Java consumer does: a
//! partition that is not waiting for an answer (busy handing over data, backing off) leaves the
//! session, because the broker would otherwise read it again from its old offset and send data
//! the partition already has. It comes back as an added partition when it asks again.
//!
//! Session errors (FETCH_SESSION_ID_NOT_FOUND after the broker evicted the session,
//! INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) and broken connections fall back
//! to a full request, which creates a new session.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use strait_wire::TopicPartition;
use strait_wire::fetch::{SessionFetch, SessionFetchResponse};
use strait_wire::{FetchOptions, FetchPartition, Isolation, ResponseError, TopicId};

/// After this many session errors in a row the broker gets sessionless requests (a broker
/// that keeps rejecting sessions must not cost a wasted round each time).
const MAX_SESSION_ERRORS: u32 = 3;

/// What the broker's session holds for one partition: the fields last sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    offset: i64,
    max_bytes: i32,
    leader_epoch: Option<i32>,
    topic_id: Option<TopicId>,
}

impl Sent {
    fn of(p: &FetchPartition) -> Sent {
        Sent {
            offset: p.offset,
            max_bytes: p.max_bytes,
            leader_epoch: p.leader_epoch,
            topic_id: p.topic_id,
        }
    }
}

/// The session with one broker.
#[derive(Debug)]
pub(crate) struct Session {
    /// False: sessionless requests only (epoch -1).
    enabled: bool,
    /// The broker's session id; 0 when there is none.
    id: i32,
    /// The epoch of the next request: 0 full (creates a session), >= 1 incremental.
    epoch: i32,
    /// The isolation level the session's partitions were fetched with.
    isolation: Option<Isolation>,
    /// Whether the session names topics by id (learnt from the full request's answer).
    topic_ids: Option<bool>,
    /// The partitions the broker holds for this session, with the fields last sent.
    partitions: HashMap<TopicPartition, Sent>,
    /// Whether the request in flight is full (the broker then answers every partition).
    in_flight_full: bool,
    /// Session errors in a row.
    errors: u32,
}

/// How the broker answered, for the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The answer covers every partition of the request (a full request): a partition it leaves
    /// out was not answered at all.
    Full,
    /// An incremental answer: a partition it leaves out has no news and stays in the session,
    /// still waiting.
    Incremental,
    /// The session is gone (a session error): nothing was fetched; ask again with a full request.
    Retry,
}

impl Session {
    /// A session with one broker; `enabled: false` sends sessionless requests only.
    pub(crate) fn new(enabled: bool) -> Session {
        Session {
            enabled,
            id: 0,
            epoch: if enabled { 0 } else { -1 },
            isolation: None,
            topic_ids: None,
            partitions: HashMap::new(),
            in_flight_full: true,
            errors: 0,
        }
    }

    /// The request for a round of `wanted` (each partition once): a full request, or an
    /// incremental one with only what changed since the last request.
    pub(crate) fn request(
        &mut self,
        wanted: &[FetchPartition],
        options: FetchOptions,
    ) -> SessionFetch {
        let full = !self.enabled
            || self.epoch <= 0
            || self.isolation != Some(options.isolation)
            || self.topic_ids.is_none()
            // A session that names topics by id cannot take a topic without one.
            || (self.topic_ids == Some(true) && wanted.iter().any(|p| p.topic_id.is_none()))
            // A topic recreated under the same name: the old incarnation must go.
            || wanted.iter().any(|p| {
                self.partitions
                    .get(&p.partition)
                    .is_some_and(|s| s.topic_id != p.topic_id)
            });
        self.isolation = Some(options.isolation);
        self.in_flight_full = full;
        if full {
            self.partitions = wanted
                .iter()
                .map(|p| (p.partition.clone(), Sent::of(p)))
                .collect();
            self.topic_ids = None;
            let epoch = if self.enabled { 0 } else { -1 };
            return SessionFetch {
                // (id, 0) closes the old session on the broker and opens a new one.
                session_id: if self.enabled { self.id } else { 0 },
                session_epoch: epoch,
                partitions: wanted.to_vec(),
                forgotten: Vec::new(),
                session_topics: Vec::new(),
                topic_ids: None,
                options,
            };
        }
        let mut next: HashMap<TopicPartition, Sent> = HashMap::with_capacity(wanted.len());
        let mut changed = Vec::new();
        for p in wanted {
            let sent = Sent::of(p);
            if self.partitions.get(&p.partition) != Some(&sent) {
                changed.push(p.clone());
            }
            next.insert(p.partition.clone(), sent);
        }
        let mut forgotten: Vec<(TopicPartition, Option<TopicId>)> = self
            .partitions
            .iter()
            .filter(|(tp, _)| !next.contains_key(*tp))
            .map(|(tp, s)| (tp.clone(), s.topic_id))
            .collect();
        forgotten.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen: HashSet<&Arc<str>> = HashSet::new();
        let mut session_topics: Vec<(Arc<str>, Option<TopicId>)> = Vec::new();
        for (tp, s) in &next {
            if seen.insert(tp.topic_arc()) {
                session_topics.push((tp.topic_arc().clone(), s.topic_id));
            }
        }
        self.partitions = next;
        SessionFetch {
            session_id: self.id,
            session_epoch: self.epoch,
            partitions: changed,
            forgotten,
            session_topics,
            topic_ids: self.topic_ids,
            options,
        }
    }

    /// The broker answered the request in flight.
    pub(crate) fn on_response(&mut self, resp: &SessionFetchResponse) -> Reply {
        match resp.error {
            Some(
                code @ (ResponseError::FetchSessionIdNotFound
                | ResponseError::InvalidFetchSessionEpoch
                | ResponseError::FetchSessionTopicIdError),
            ) => {
                self.errors += 1;
                if self.errors >= MAX_SESSION_ERRORS && self.enabled {
                    tracing::warn!(
                        error = %strait_wire::error::error_name(code),
                        "the source broker keeps rejecting fetch sessions; fetching without one"
                    );
                    self.enabled = false;
                }
                if code == ResponseError::FetchSessionIdNotFound {
                    // The broker no longer knows the id: start over without it.
                    self.id = 0;
                }
                self.reset();
                return Reply::Retry;
            }
            Some(_) => {
                // The request failed as a whole; the session's state on the broker is unknown.
                self.reset();
                return Reply::Full;
            }
            None => {}
        }
        self.errors = 0;
        let full = self.in_flight_full;
        if !self.enabled {
            return Reply::Full;
        }
        if resp.session_id == 0 {
            // No session (the broker's session cache is full) or the broker closed it. Omitted
            // partitions of an incremental answer still have no news; the next request is full.
            self.id = 0;
            self.reset();
        } else if full {
            self.id = resp.session_id;
            self.epoch = 1;
            self.topic_ids = Some(resp.topic_ids);
        } else {
            // Epochs wrap from i32::MAX to 1 (0 would mean a new session).
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
        }
        if full {
            Reply::Full
        } else {
            Reply::Incremental
        }
    }

    /// The request in flight failed (connection broken, timeout): whether the broker saw it is
    /// unknown, so the next request is full (and closes the old session).
    pub(crate) fn on_failure(&mut self) {
        self.reset();
    }

    fn reset(&mut self) {
        self.epoch = if self.enabled { 0 } else { -1 };
        self.topic_ids = None;
        self.partitions.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn part(p: i32, offset: i64) -> FetchPartition {
        FetchPartition {
            topic_id: TopicId::from_bytes([7; 16]),
            ..FetchPartition::new(TopicPartition::new("t", p).unwrap(), offset)
        }
    }

    fn options() -> FetchOptions {
        FetchOptions {
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(100),
            ..FetchOptions::default()
        }
    }

    fn answered(session_id: i32, topic_ids: bool) -> SessionFetchResponse {
        SessionFetchResponse {
            error: None,
            session_id,
            topic_ids,
            throttle: Duration::ZERO,
            partitions: Vec::new(),
        }
    }

    fn ids(r: &SessionFetch) -> Vec<i32> {
        r.partitions
            .iter()
            .map(|p| p.partition.partition())
            .collect()
    }

    fn forgotten(r: &SessionFetch) -> Vec<i32> {
        r.forgotten.iter().map(|(tp, _)| tp.partition()).collect()
    }

    /// Full request (0, 0) first; then only added or changed partitions, and the ones that left.
    #[test]
    fn incremental_requests_carry_only_changes() {
        let mut s = Session::new(true);
        let r = s.request(&[part(0, 5), part(1, 9), part(2, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(ids(&r), [0, 1, 2]);
        assert_eq!(s.on_response(&answered(42, true)), Reply::Full);

        // Partition 0 moved on, 1 is unchanged, 2 left, 3 is new.
        let r = s.request(&[part(0, 8), part(1, 9), part(3, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (42, 1));
        assert_eq!(ids(&r), [0, 3]);
        assert_eq!(forgotten(&r), [2]);
        assert_eq!(r.topic_ids, Some(true));
        assert_eq!(s.on_response(&answered(42, true)), Reply::Incremental);

        // Nothing changed: an empty incremental request (the broker still long-polls them all).
        let r = s.request(&[part(0, 8), part(1, 9), part(3, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (42, 2));
        assert!(r.partitions.is_empty() && r.forgotten.is_empty());
        let mut topics = r.session_topics.clone();
        topics.dedup();
        assert_eq!(topics.len(), 1);

        // A bigger size or a new leader epoch is a change too.
        assert_eq!(s.on_response(&answered(42, true)), Reply::Incremental);
        let mut bigger = part(1, 9);
        bigger.max_bytes *= 2;
        let mut fenced = part(3, 0);
        fenced.leader_epoch = Some(4);
        let r = s.request(&[part(0, 8), bigger, fenced], options());
        assert_eq!(ids(&r), [1, 3]);
    }

    #[test]
    fn session_errors_fall_back_to_a_full_request() {
        let mut s = Session::new(true);
        s.request(&[part(0, 0)], options());
        s.on_response(&answered(42, true));
        s.request(&[part(0, 1)], options());
        let mut expired = answered(0, true);
        expired.error = Some(ResponseError::FetchSessionIdNotFound);
        assert_eq!(s.on_response(&expired), Reply::Retry);
        let r = s.request(&[part(0, 1), part(1, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (0, 0), "a new session");
        assert_eq!(ids(&r), [0, 1], "a full request");

        s.on_response(&answered(43, true));
        s.request(&[part(0, 1)], options());
        let mut bad_epoch = answered(0, true);
        bad_epoch.error = Some(ResponseError::InvalidFetchSessionEpoch);
        assert_eq!(s.on_response(&bad_epoch), Reply::Retry);
        let r = s.request(&[part(0, 1)], options());
        assert_eq!(
            (r.session_id, r.session_epoch),
            (43, 0),
            "closes session 43 and opens a new one"
        );

        // A broken connection: the next request is full too.
        s.on_response(&answered(44, true));
        s.request(&[part(0, 1)], options());
        s.on_failure();
        let r = s.request(&[part(0, 1)], options());
        assert_eq!((r.session_id, r.session_epoch), (44, 0));
    }

    #[test]
    fn a_broker_that_keeps_rejecting_sessions_gets_sessionless_requests() {
        let mut s = Session::new(true);
        let mut expired = answered(0, true);
        expired.error = Some(ResponseError::FetchSessionIdNotFound);
        for _ in 0..MAX_SESSION_ERRORS {
            s.request(&[part(0, 0)], options());
            assert_eq!(s.on_response(&expired), Reply::Retry);
        }
        let r = s.request(&[part(0, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (0, -1));
        assert_eq!(s.on_response(&answered(0, true)), Reply::Full);
    }

    /// The broker did not create a session (its cache is full): every request stays full.
    #[test]
    fn no_session_from_the_broker_means_full_requests() {
        let mut s = Session::new(true);
        s.request(&[part(0, 0)], options());
        assert_eq!(s.on_response(&answered(0, true)), Reply::Full);
        let r = s.request(&[part(0, 0)], options());
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(ids(&r), [0]);
    }

    /// A session keeps its topic-id mode and isolation level; anything else starts a new one.
    #[test]
    fn mode_changes_start_a_new_session() {
        let mut s = Session::new(true);
        s.request(&[part(0, 0)], options());
        s.on_response(&answered(42, true));
        let nameless = FetchPartition::new(TopicPartition::new("u", 0).unwrap(), 0);
        let r = s.request(&[part(0, 0), nameless], options());
        assert_eq!(r.session_epoch, 0, "a topic without an id in an id session");
        s.on_response(&answered(42, false));
        let r = s.request(&[part(0, 0)], options());
        assert_eq!((r.session_epoch, r.topic_ids), (1, Some(false)));
        s.on_response(&answered(42, false));
        let uncommitted = FetchOptions {
            isolation: Isolation::ReadUncommitted,
            ..options()
        };
        let r = s.request(&[part(0, 0)], uncommitted);
        assert_eq!(r.session_epoch, 0, "another isolation level");
        s.on_response(&answered(42, true));
        let mut recreated = part(0, 0);
        recreated.topic_id = TopicId::from_bytes([8; 16]);
        let r = s.request(
            &[recreated],
            FetchOptions {
                isolation: Isolation::ReadUncommitted,
                ..options()
            },
        );
        assert_eq!(r.session_epoch, 0, "a recreated topic");
    }
}
