//! Fetch: the raw record bytes the broker sent, never decoded.
//!
//! Each partition's `records` is a zero-copy slice of the response frame. Two ways to fetch:
//!
//! * [`Client::fetch_from`] / [`Connection::fetch_session`]: one request to one broker, exactly
//!   as asked, optionally within an incremental fetch session (KIP-227, [`SessionFetch`]); no
//!   routing, no retries. The caller schedules (strait-forward's per-broker fetch schedulers),
//!   routes with [`Client::partition_leader`] and keeps the session.
//! * [`Client::fetch`]: sessionless (session id 0, epoch -1), routes every partition to its
//!   leader, joins the leaders and retries leadership errors within `request.timeout.ms`. For
//!   simple callers; a slow leader delays the whole call.
//!
//! Topic ids are used from Fetch v13 when every requested topic has one, else v12 with names.
//! `CurrentLeaderEpoch` is sent so a stale leader is fenced (FENCED_LEADER_EPOCH /
//! UNKNOWN_LEADER_EPOCH).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{
    FetchPartition as WireFetchPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::{Client, partition_error};
use crate::conn::Connection;
use crate::error::{Error, ErrorClass, Result};
use crate::metadata::{ClusterMetadata, PartitionLeader};
use crate::route::{PartitionRequest, Verdict, code_error};
use crate::topic::{TopicId, TopicPartition};

/// `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Isolation {
    /// Everything up to the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset; the response lists aborted transactions to skip.
    ReadCommitted,
}

impl Isolation {
    pub(crate) fn code(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    /// The partition.
    pub partition: TopicPartition,
    /// The first offset wanted (the response starts at the batch that contains it).
    pub offset: i64,
    /// At most this many bytes for this partition (the first batch comes whole regardless).
    pub max_bytes: i32,
    /// The leader epoch the caller believes in; `None`: from metadata ([`Client::fetch`]) or
    /// unknown (-1, no fencing, [`Connection::fetch`]).
    pub leader_epoch: Option<i32>,
    /// The topic id, for Fetch v13+ at the connection level ([`Client::fetch`] fills it in).
    pub topic_id: Option<TopicId>,
}

impl FetchPartition {
    /// Fetch `partition` from `offset`, 1 MiB at most (Java's `max.partition.fetch.bytes`).
    pub fn new(partition: TopicPartition, offset: i64) -> FetchPartition {
        FetchPartition {
            partition,
            offset,
            max_bytes: 1024 * 1024,
            leader_epoch: None,
            topic_id: None,
        }
    }

    /// Sets the per-partition byte limit.
    pub fn with_max_bytes(mut self, max_bytes: i32) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

/// Request-wide fetch options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// `isolation.level`.
    pub isolation: Isolation,
    /// `fetch.max.wait.ms`: how long the broker may wait for `min_bytes`.
    pub max_wait: Duration,
    /// `fetch.min.bytes`.
    pub min_bytes: i32,
    /// `fetch.max.bytes`: the whole response (the first batch comes whole regardless).
    pub max_bytes: i32,
    /// `client.rack`, for fetch-from-follower (KIP-392); the answer may then name a preferred
    /// read replica instead of carrying records.
    pub rack_id: Option<String>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            isolation: Isolation::ReadUncommitted,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            rack_id: None,
        }
    }
}

/// An aborted transaction in a read_committed fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer id of the aborted transaction.
    pub producer_id: i64,
    /// Its first offset.
    pub first_offset: i64,
}

/// One partition of a fetch response.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    /// The partition.
    pub partition: TopicPartition,
    /// The offset that was asked for.
    pub fetch_offset: i64,
    /// The partition's error (e.g. OFFSET_OUT_OF_RANGE), if any.
    pub error: Option<ResponseError>,
    /// The high watermark.
    pub high_watermark: i64,
    /// The last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// The log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// Aborted transactions in the returned range (read_committed only).
    pub aborted_transactions: Vec<AbortedTransaction>,
    /// A follower to fetch from instead (KIP-392), if the broker named one.
    pub preferred_read_replica: Option<i32>,
    /// The new leader and its epoch, when the broker says (v12+, NOT_LEADER_OR_FOLLOWER).
    pub current_leader: Option<(i32, i32)>,
    /// The record batches exactly as the broker sent them (the last one may be partial).
    pub records: Bytes,
}

impl FetchedPartition {
    /// `Ok` if the partition has no error, else the error as a crate [`Error`].
    pub fn check(&self, principal: Option<&str>) -> Result<()> {
        match self.error {
            None => Ok(()),
            Some(code) => Err(partition_error(
                code,
                principal,
                "Read",
                &self.partition,
                "Fetch",
                None,
            )),
        }
    }
}

/// One Fetch request of an incremental fetch session (KIP-227), or a sessionless one: what
/// [`Connection::fetch_session`] and [`Client::fetch_from`] send. The caller keeps the session
/// (which partitions the broker holds, at which offsets); this type is one request of it.
///
/// * `session_id` 0, `session_epoch` -1: sessionless, every partition is in `partitions`.
/// * `session_id` 0, `session_epoch` 0: a full request that asks the broker for a new session.
/// * `session_id` N, `session_epoch` 0: closes session N and asks for a new one (full request).
/// * `session_id` N, `session_epoch` k >= 1: incremental; `partitions` holds only the partitions
///   added to the session or whose offset, size or leader epoch changed, `forgotten` those that
///   leave it. The broker fetches every partition of the session and answers only those with
///   news (records, a new high watermark or log start offset, an error).
#[derive(Debug, Clone)]
pub struct SessionFetch {
    /// The session id (0: none yet).
    pub session_id: i32,
    /// The session epoch: -1 sessionless, 0 full (new session), >= 1 incremental.
    pub session_epoch: i32,
    /// Partitions sent in this request (all of them in a full request).
    pub partitions: Vec<FetchPartition>,
    /// Partitions leaving the session (incremental requests only).
    pub forgotten: Vec<(TopicPartition, Option<TopicId>)>,
    /// Every topic in the session, so that answers for partitions not sent in this request
    /// (incremental) can be named. Topics of `partitions` need not be repeated.
    pub session_topics: Vec<(Arc<str>, Option<TopicId>)>,
    /// `None`: topic ids (Fetch v13+) if every partition has one and the broker supports them,
    /// else names (full requests). `Some(x)`: exactly that (an incremental request must use the
    /// mode its session was created with, or the broker answers FETCH_SESSION_TOPIC_ID_ERROR).
    pub topic_ids: Option<bool>,
    /// Request-wide options.
    pub options: FetchOptions,
}

impl SessionFetch {
    /// A sessionless full request of `partitions`.
    pub fn sessionless(partitions: &[FetchPartition], options: &FetchOptions) -> SessionFetch {
        SessionFetch {
            session_id: 0,
            session_epoch: -1,
            partitions: partitions.to_vec(),
            forgotten: Vec::new(),
            session_topics: Vec::new(),
            topic_ids: None,
            options: options.clone(),
        }
    }
}

/// The answer to a [`SessionFetch`].
#[derive(Debug, Clone)]
pub struct SessionFetchResponse {
    /// The request-level error: FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH
    /// (start a new session with a full request), or another code that fails the whole request.
    pub error: Option<ResponseError>,
    /// The session id the broker gave (0: no session, e.g. its session cache is full).
    pub session_id: i32,
    /// Whether the request named topics by id (Fetch v13+); a session keeps this mode.
    pub topic_ids: bool,
    /// How long the broker asks the client to wait before the next request (quotas, KIP-219).
    pub throttle: Duration,
    /// The partitions the broker answered. In an incremental session, only those with news.
    /// `fetch_offset` is -1 for a partition that was not sent in this request.
    pub partitions: Vec<FetchedPartition>,
}

impl Connection {
    /// Sends one sessionless Fetch request and returns every partition's answer, errors
    /// included. No routing, no retries. Waits up to `request.timeout.ms` + `max_wait`.
    pub async fn fetch(
        &self,
        partitions: &[FetchPartition],
        options: &FetchOptions,
    ) -> Result<Vec<FetchedPartition>> {
        let resp = self
            .fetch_session(&SessionFetch::sessionless(partitions, options))
            .await?;
        if let Some(code) = resp.error {
            return Err(Error::broker(
                code,
                format!("Fetch from broker {}", self.broker()),
            ));
        }
        Ok(resp.partitions)
    }

    /// Sends one Fetch request, with or without a fetch session (see [`SessionFetch`]), and
    /// returns the broker's answer as it is: request-level error, session id and the partitions
    /// answered. No routing, no retries. Waits up to `request.timeout.ms` + `max_wait`.
    pub async fn fetch_session(&self, request: &SessionFetch) -> Result<SessionFetchResponse> {
        let all_have_ids = request.partitions.iter().all(|p| p.topic_id.is_some())
            && request.forgotten.iter().all(|(_, id)| id.is_some());
        // Sessions need Fetch v7+; topic ids v13+ (and then for every topic of the request).
        let low = if request.session_epoch == -1 { 4 } else { 7 };
        let range = match request.topic_ids {
            Some(true) => 13..=18,
            Some(false) => low..=12,
            None if all_have_ids && !request.partitions.is_empty() => low..=18,
            None => low..=12,
        };
        let version = self.pick_version::<FetchRequest>(range)?;
        let (req, known) = build_fetch(request, version)?;
        let resp = self
            .send_with_timeout(
                req,
                version,
                self.request_timeout()
                    .saturating_add(request.options.max_wait),
            )
            .await?;
        read_fetch(resp, request, &known, version >= 13)
            .map_err(|message| Error::protocol(self.broker(), message))
    }
}

/// The topics a Fetch response may name, by name and by id.
#[derive(Debug, Default)]
struct KnownTopics {
    by_name: HashMap<Arc<str>, Option<TopicId>>,
    by_id: HashMap<TopicId, Arc<str>>,
}

impl KnownTopics {
    fn add(&mut self, name: &Arc<str>, id: Option<TopicId>) {
        if self.by_name.contains_key(name) {
            return;
        }
        self.by_name.insert(name.clone(), id);
        if let Some(id) = id {
            self.by_id.insert(id, name.clone());
        }
    }

    /// The requested topic a response topic refers to: by id when the request used ids.
    fn find(&self, by_id: bool, id: Option<TopicId>, name: &str) -> Option<Arc<str>> {
        if by_id {
            self.by_id.get(&id?).cloned()
        } else {
            self.by_name.get_key_value(name).map(|(n, _)| n.clone())
        }
    }
}

/// Encodes a [`SessionFetch`] at `version`; also returns the topics its answer may name.
fn build_fetch(request: &SessionFetch, version: i16) -> Result<(FetchRequest, KnownTopics)> {
    let with_ids = version >= 13;
    // Group by topic, keeping request order.
    let mut topics: Vec<(Arc<str>, Option<TopicId>, Vec<WireFetchPartition>)> = Vec::new();
    let mut topic_index: HashMap<Arc<str>, usize> = HashMap::new();
    for p in &request.partitions {
        if with_ids && p.topic_id.is_none() {
            return Err(Error::InvalidArgument(format!(
                "{} has no topic id but the Fetch uses topic ids (v{version}); start a new \
                 session (full request) without topic ids",
                p.partition
            )));
        }
        let name = p.partition.topic_arc();
        let wire = WireFetchPartition::default()
            .with_partition(p.partition.partition())
            .with_fetch_offset(p.offset)
            .with_partition_max_bytes(p.max_bytes)
            .with_current_leader_epoch(p.leader_epoch.unwrap_or(-1));
        match topic_index.get(name) {
            Some(&i) => topics[i].2.push(wire),
            None => {
                topic_index.insert(name.clone(), topics.len());
                topics.push((name.clone(), p.topic_id, vec![wire]));
            }
        }
    }
    // Every topic the answer may name: this request's and the rest of the session's.
    let mut known = KnownTopics::default();
    for (name, id, _) in &topics {
        known.add(name, *id);
    }
    for (name, id) in request
        .session_topics
        .iter()
        .map(|(name, id)| (name, id))
        .chain(
            request
                .forgotten
                .iter()
                .map(|(tp, id)| (tp.topic_arc(), id)),
        )
    {
        known.add(name, *id);
    }
    let topic_name = |name: &str| TopicName(StrBytes::from_string(name.to_owned()));
    let mut forgotten: Vec<ForgottenTopic> = Vec::new();
    let mut forgotten_index: HashMap<&str, usize> = HashMap::new();
    for (tp, id) in &request.forgotten {
        let id = match (with_ids, id) {
            (true, Some(id)) => Some(id.to_uuid()),
            (false, _) => None,
            (true, None) => {
                return Err(Error::InvalidArgument(format!(
                    "{tp} has no topic id but the Fetch uses topic ids (v{version})"
                )));
            }
        };
        // One entry per topic (a topic has one id).
        let i = *forgotten_index.entry(tp.topic()).or_insert_with(|| {
            forgotten.push(match id {
                Some(id) => ForgottenTopic::default().with_topic_id(id),
                None => ForgottenTopic::default().with_topic(topic_name(tp.topic())),
            });
            forgotten.len() - 1
        });
        forgotten[i].partitions.push(tp.partition());
    }
    let options = &request.options;
    let max_wait_ms = i32::try_from(options.max_wait.as_millis()).unwrap_or(i32::MAX);
    let mut req = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(options.min_bytes)
        .with_max_bytes(options.max_bytes)
        .with_isolation_level(options.isolation.code())
        .with_session_id(request.session_id)
        .with_session_epoch(request.session_epoch)
        .with_forgotten_topics_data(forgotten)
        .with_topics(
            topics
                .into_iter()
                .map(|(name, id, parts)| {
                    let t = FetchTopic::default().with_partitions(parts);
                    match (with_ids, id) {
                        (true, Some(id)) => t.with_topic_id(id.to_uuid()),
                        _ => t.with_topic(topic_name(&name)),
                    }
                })
                .collect(),
        );
    if let Some(rack) = &options.rack_id
        && version >= 11
    {
        req = req.with_rack_id(StrBytes::from_string(rack.clone()));
    }
    Ok((req, known))
}

/// The longest a broker's `throttle_time_ms` is honoured. Kafka's quota windows are seconds
/// (`quota.window.size.seconds` = 1, 11 windows), so a real quota never asks for more; a broker
/// asking `i32::MAX` (24 days) would otherwise stall every partition it leads for that long.
pub const MAX_THROTTLE: Duration = Duration::from_secs(30);

/// A response's `throttle_time_ms` as the wait honoured: negative is none, more than
/// [`MAX_THROTTLE`] is [`MAX_THROTTLE`].
pub fn throttle(throttle_time_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(throttle_time_ms).unwrap_or(0)).min(MAX_THROTTLE)
}

/// Reads a Fetch response; `Err` names what is malformed.
fn read_fetch(
    resp: FetchResponse,
    request: &SessionFetch,
    known: &KnownTopics,
    with_ids: bool,
) -> std::result::Result<SessionFetchResponse, String> {
    let throttle = throttle(resp.throttle_time_ms);
    let error = ResponseError::try_from_code(resp.error_code);
    let mut out = Vec::new();
    if error.is_none() {
        out.reserve(request.partitions.len());
        let offsets: HashMap<&TopicPartition, i64> = request
            .partitions
            .iter()
            .map(|r| (&r.partition, r.offset))
            .collect();
        for t in resp.responses {
            let name = known
                .find(with_ids, TopicId::from_uuid(t.topic_id), &t.topic.0)
                .ok_or("Fetch response names a topic that was not requested")?;
            for p in t.partitions {
                let tp = TopicPartition::from_broker(name.clone(), p.partition_index);
                let fetch_offset = offsets.get(&tp).copied().unwrap_or(-1);
                out.push(FetchedPartition {
                    partition: tp,
                    fetch_offset,
                    error: ResponseError::try_from_code(p.error_code),
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    aborted_transactions: p
                        .aborted_transactions
                        .unwrap_or_default()
                        .into_iter()
                        .map(|a| AbortedTransaction {
                            producer_id: a.producer_id.0,
                            first_offset: a.first_offset,
                        })
                        .collect(),
                    preferred_read_replica: (p.preferred_read_replica.0 >= 0)
                        .then_some(p.preferred_read_replica.0),
                    current_leader: (p.current_leader.leader_id.0 >= 0)
                        .then_some((p.current_leader.leader_id.0, p.current_leader.leader_epoch)),
                    records: p.records.unwrap_or_default(),
                });
            }
        }
    }
    Ok(SessionFetchResponse {
        error,
        session_id: resp.session_id,
        topic_ids: with_ids,
        throttle,
        partitions: out,
    })
}

impl Client {
    /// Fetches each partition from its leader (leaders concurrently), with the leader epoch
    /// and topic id from metadata. Leadership and topic-id errors refresh metadata and retry
    /// within `request.timeout.ms`; other partition errors (OFFSET_OUT_OF_RANGE, authorization)
    /// come back in [`FetchedPartition::error`]. Results are in input order. Fails as a whole
    /// only if a leader stayed unreachable for the whole retry budget.
    ///
    /// A preferred read replica (KIP-392) is reported, not followed.
    pub async fn fetch(
        &self,
        partitions: &[FetchPartition],
        options: &FetchOptions,
    ) -> Result<Vec<FetchedPartition>> {
        if let Some((_, dup)) = partitions
            .iter()
            .enumerate()
            .find(|(i, p)| partitions[..*i].iter().any(|o| o.partition == p.partition))
        {
            return Err(Error::InvalidArgument(format!(
                "{} appears twice in one fetch; fetch each partition once",
                dup.partition
            )));
        }
        let request = LeaderFetch {
            options: options.clone(),
        };
        self.route_and_retry(&request, partitions)
            .await?
            .into_iter()
            .collect()
    }
}

/// [`Client::fetch`]: sessionless fetches, each partition from its leader.
#[derive(Clone)]
struct LeaderFetch {
    options: FetchOptions,
}

impl PartitionRequest for LeaderFetch {
    type Item = FetchPartition;
    type Answer = FetchedPartition;
    type Out = FetchedPartition;
    const API: &'static str = "Fetch";
    const OPERATION: &'static str = "Read";
    const FAIL_FAST: bool = true;

    fn partition(item: &FetchPartition) -> &TopicPartition {
        &item.partition
    }

    fn answered(answer: &FetchedPartition) -> &TopicPartition {
        &answer.partition
    }

    fn routed(item: &FetchPartition, route: &PartitionLeader) -> FetchPartition {
        let mut p = item.clone();
        p.leader_epoch = p
            .leader_epoch
            .or((route.leader_epoch >= 0).then_some(route.leader_epoch));
        p.topic_id = p.topic_id.or(route.topic_id);
        p
    }

    async fn send(
        &self,
        conn: &Connection,
        items: &[FetchPartition],
        _metadata: &ClusterMetadata,
    ) -> Result<Vec<FetchedPartition>> {
        conn.fetch(items, &self.options).await
    }

    /// Stale-metadata errors are retried (and reported as the partition's error if time runs
    /// out); other partition errors are the caller's.
    fn judge(&self, item: &FetchPartition, answer: FetchedPartition) -> Verdict<FetchedPartition> {
        match answer.error {
            Some(code) if ErrorClass::of(code) == ErrorClass::Refresh => Verdict::Retry {
                error: code_error::<Self>(None, item, code),
                or: Some(answer),
            },
            _ => Verdict::Done(answer),
        }
    }

    fn unroutable(&self, item: &FetchPartition, error: Error) -> Verdict<FetchedPartition> {
        if !error.is_retriable() {
            return Verdict::Fail(error);
        }
        let or = error.code().map(|code| error_only(item, code));
        Verdict::Retry { error, or }
    }

    fn failed(
        &self,
        _item: &FetchPartition,
        error: &Error,
        _sent: bool,
    ) -> Verdict<FetchedPartition> {
        // A fetch has no side effect: even a garbled answer is worth asking again.
        if error.is_retriable() || matches!(error, Error::Protocol { .. }) {
            Verdict::retry(error.clone())
        } else {
            Verdict::Fail(error.clone())
        }
    }
}

impl Client {
    /// The leader, leader epoch and topic id of `partition` from the cached metadata (refreshed
    /// first if `refresh`, if the topic is missing, or if older than `metadata.max.age.ms`).
    /// Errors explain why there is no route (no leader right now, unknown topic, not authorized
    /// to describe it).
    pub async fn partition_leader(
        &self,
        partition: &TopicPartition,
        refresh: bool,
    ) -> Result<PartitionLeader> {
        let md = self.metadata_for(&[partition.topic()], refresh).await?;
        self.route(&md, partition, "Read")
    }

    /// Sends one Fetch request to node `node` (see [`SessionFetch`]): no routing, no retries, no
    /// metadata refresh. The caller routes (partitions whose leader is elsewhere are answered
    /// NOT_LEADER_OR_FOLLOWER) and decides what to retry.
    pub async fn fetch_from(
        &self,
        node: i32,
        request: &SessionFetch,
    ) -> Result<SessionFetchResponse> {
        self.broker(node).await?.fetch_session(request).await
    }
}

/// A result carrying only an error code (for partitions that never reached a broker).
fn error_only(p: &FetchPartition, code: ResponseError) -> FetchedPartition {
    FetchedPartition {
        partition: p.partition.clone(),
        fetch_offset: p.offset,
        error: Some(code),
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        aborted_transactions: Vec::new(),
        preferred_read_replica: None,
        current_leader: None,
        records: Bytes::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tp(topic: &str, p: i32) -> TopicPartition {
        TopicPartition::new(topic, p).unwrap()
    }

    fn id(n: u8) -> TopicId {
        TopicId::from_bytes([n; 16]).unwrap()
    }

    fn with_id(p: FetchPartition, n: u8) -> FetchPartition {
        FetchPartition {
            topic_id: Some(id(n)),
            ..p
        }
    }

    /// An incremental request carries the session fields, only the partitions given, and the
    /// forgotten partitions grouped by topic (by id from v13, by name before).
    #[test]
    fn incremental_request_fields() {
        let request = SessionFetch {
            session_id: 77,
            session_epoch: 3,
            partitions: vec![with_id(FetchPartition::new(tp("a", 1), 40), 1)],
            forgotten: vec![
                (tp("b", 0), Some(id(2))),
                (tp("a", 2), Some(id(1))),
                (tp("b", 3), Some(id(2))),
            ],
            session_topics: vec![("c".into(), Some(id(3)))],
            topic_ids: Some(true),
            options: FetchOptions::default(),
        };
        let (req, known) = build_fetch(&request, 13).unwrap();
        assert_eq!((req.session_id, req.session_epoch), (77, 3));
        assert_eq!(req.topics.len(), 1);
        assert_eq!(req.topics[0].topic_id, id(1).to_uuid());
        assert_eq!(req.topics[0].partitions[0].fetch_offset, 40);
        let forgotten: Vec<(uuid::Uuid, Vec<i32>)> = req
            .forgotten_topics_data
            .iter()
            .map(|f| (f.topic_id, f.partitions.clone()))
            .collect();
        assert_eq!(
            forgotten,
            vec![(id(2).to_uuid(), vec![0, 3]), (id(1).to_uuid(), vec![2])]
        );
        let mut names: Vec<&str> = known.by_name.keys().map(|n| &**n).collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(known.find(true, Some(id(2)), ""), Some("b".into()));
        assert_eq!(known.find(false, None, "c"), Some("c".into()));
        assert_eq!(known.find(false, None, "z"), None);

        let (req, _) = build_fetch(&request, 12).unwrap();
        let forgotten: Vec<(&str, Vec<i32>)> = req
            .forgotten_topics_data
            .iter()
            .map(|f| (&*f.topic.0, f.partitions.clone()))
            .collect();
        assert_eq!(forgotten, vec![("b", vec![0, 3]), ("a", vec![2])]);
        assert_eq!(&*req.topics[0].topic.0, "a");
    }

    #[test]
    fn topic_ids_need_an_id_for_every_topic() {
        let request = SessionFetch {
            topic_ids: Some(true),
            ..SessionFetch::sessionless(
                &[FetchPartition::new(tp("a", 0), 0)],
                &FetchOptions::default(),
            )
        };
        assert!(matches!(
            build_fetch(&request, 13),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// In an incremental session the broker answers partitions that were not in this request
    /// (they are in the session): they are named through the session's topics, with no
    /// fetch offset of this request.
    #[test]
    fn answers_for_partitions_of_the_session_not_in_the_request() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let request = SessionFetch {
            session_id: 9,
            session_epoch: 2,
            partitions: vec![with_id(FetchPartition::new(tp("a", 0), 10), 1)],
            forgotten: vec![],
            session_topics: vec![("a".into(), Some(id(1))), ("c".into(), Some(id(3)))],
            topic_ids: Some(true),
            options: FetchOptions::default(),
        };
        let (_, known) = build_fetch(&request, 13).unwrap();
        let resp = FetchResponse::default()
            .with_session_id(9)
            .with_throttle_time_ms(5)
            .with_responses(vec![
                FetchableTopicResponse::default()
                    .with_topic_id(id(3).to_uuid())
                    .with_partitions(vec![
                        PartitionData::default()
                            .with_partition_index(4)
                            .with_high_watermark(99),
                    ]),
                FetchableTopicResponse::default()
                    .with_topic_id(id(1).to_uuid())
                    .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
            ]);
        let got = read_fetch(resp, &request, &known, true).unwrap();
        assert_eq!(got.session_id, 9);
        assert_eq!(got.throttle, Duration::from_millis(5));
        assert!(got.topic_ids);
        // Issue 28 item 8: a hostile throttle is capped (i32::MAX ms would be 24 days).
        for (ms, honoured) in [
            (i32::MAX, MAX_THROTTLE),
            (30_001, MAX_THROTTLE),
            (30_000, Duration::from_secs(30)),
            (-1, Duration::ZERO),
            (i32::MIN, Duration::ZERO),
        ] {
            let resp = FetchResponse::default().with_throttle_time_ms(ms);
            let got = read_fetch(resp, &request, &known, true).unwrap();
            assert_eq!(got.throttle, honoured, "{ms}");
        }
        let answered: Vec<(String, i64, i64)> = got
            .partitions
            .iter()
            .map(|p| (p.partition.to_string(), p.fetch_offset, p.high_watermark))
            .collect();
        assert_eq!(
            answered,
            vec![("c-4".into(), -1, 99), ("a-0".into(), 10, 0)]
        );

        let stranger = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_topic_id(id(8).to_uuid()),
        ]);
        assert!(read_fetch(stranger, &request, &known, true).is_err());

        let expired = FetchResponse::default().with_error_code(70);
        let got = read_fetch(expired, &request, &known, true).unwrap();
        assert_eq!(got.error, Some(ResponseError::FetchSessionIdNotFound));
        assert!(got.partitions.is_empty());
    }

    /// Stale-metadata codes are retried, keeping the answer to report if time runs out; the
    /// others (out of range, authorization) are the caller's to handle.
    #[test]
    fn which_fetch_answers_are_retried() {
        let request = LeaderFetch {
            options: FetchOptions::default(),
        };
        let item = FetchPartition::new(tp("t", 0), 5);
        let table = [
            (None, false),
            (Some(ResponseError::NotLeaderOrFollower), true),
            (Some(ResponseError::FencedLeaderEpoch), true),
            (Some(ResponseError::UnknownLeaderEpoch), true),
            (Some(ResponseError::UnknownTopicId), true),
            (Some(ResponseError::OffsetOutOfRange), false),
            (Some(ResponseError::TopicAuthorizationFailed), false),
        ];
        for (code, retried) in table {
            let answer = FetchedPartition {
                error: code,
                ..error_only(&item, ResponseError::UnknownServerError)
            };
            match request.judge(&item, answer) {
                Verdict::Retry { or: Some(p), .. } => assert!(retried && p.error == code),
                Verdict::Done(p) => assert!(!retried && p.error == code),
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn check_names_the_fix() {
        let p = error_only(
            &FetchPartition::new(TopicPartition::new("t", 0).unwrap(), 5),
            ResponseError::OffsetOutOfRange,
        );
        let e = p.check(None).unwrap_err();
        assert!(e.to_string().contains("earliest or latest"), "{e}");
        let p = error_only(
            &FetchPartition::new(TopicPartition::new("t", 0).unwrap(), 5),
            ResponseError::TopicAuthorizationFailed,
        );
        assert!(matches!(
            p.check(Some("User:x")),
            Err(Error::Authorization { .. })
        ));
    }
}
