//! Fetch: the raw record bytes the broker sent, never decoded.
//!
//! Each partition's `records` is a zero-copy slice of the response frame. Fetches are
//! sessionless (session id 0, epoch -1: every request is a full fetch request; incremental fetch
//! sessions, KIP-227, are not used). Topic ids are used from Fetch v13 when every requested topic
//! has one, else v12 with names. `CurrentLeaderEpoch` is sent so a stale leader is fenced
//! (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), which the [`Client`] handles by refreshing
//! metadata.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition as WireFetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use crate::cluster::{Client, UNKNOWN_TOPIC_RETRIES, partition_error};
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::topic::{TopicId, TopicPartition, requested_topic};

/// `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset; the response lists aborted transactions to skip.
    ReadCommitted,
}

impl IsolationLevel {
    pub(crate) fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
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
    pub isolation: IsolationLevel,
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
            isolation: IsolationLevel::ReadUncommitted,
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

impl Connection {
    /// Sends one sessionless Fetch request and returns every partition's answer, errors
    /// included. No routing, no retries. Waits up to `request.timeout.ms` + `max_wait`.
    pub async fn fetch(
        &self,
        partitions: &[FetchPartition],
        options: &FetchOptions,
    ) -> Result<Vec<FetchedPartition>> {
        // Group by topic, keeping request order.
        let mut topics: Vec<(Arc<str>, Option<TopicId>, Vec<WireFetchPartition>)> = Vec::new();
        for p in partitions {
            let name = p.partition.topic_arc();
            let wire = WireFetchPartition::default()
                .with_partition(p.partition.partition())
                .with_fetch_offset(p.offset)
                .with_partition_max_bytes(p.max_bytes)
                .with_current_leader_epoch(p.leader_epoch.unwrap_or(-1));
            match topics.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, _, parts)) => parts.push(wire),
                None => topics.push((name.clone(), p.topic_id, vec![wire])),
            }
        }
        let use_ids = !topics.is_empty() && topics.iter().all(|(_, id, _)| id.is_some());
        let version = self.pick_version::<FetchRequest>(4..=if use_ids { 18 } else { 12 })?;
        let with_ids = version >= 13;
        let max_wait_ms = i32::try_from(options.max_wait.as_millis()).unwrap_or(i32::MAX);
        let mut req = FetchRequest::default()
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(options.min_bytes)
            .with_max_bytes(options.max_bytes)
            .with_isolation_level(options.isolation.code())
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(
                topics
                    .iter()
                    .map(|(name, id, parts)| {
                        let t = FetchTopic::default().with_partitions(parts.clone());
                        match (with_ids, id) {
                            (true, Some(id)) => t.with_topic_id(id.to_uuid()),
                            _ => t.with_topic(TopicName(StrBytes::from_string(name.to_string()))),
                        }
                    })
                    .collect(),
            );
        if let Some(rack) = &options.rack_id
            && version >= 11
        {
            req = req.with_rack_id(StrBytes::from_string(rack.clone()));
        }
        let resp = self
            .send_with_timeout(
                req,
                version,
                self.request_timeout().saturating_add(options.max_wait),
            )
            .await?;
        if let Some(code) = ResponseError::try_from_code(resp.error_code) {
            return Err(Error::broker(
                code,
                format!("Fetch from broker {}", self.broker()),
            ));
        }

        let mut out = Vec::with_capacity(partitions.len());
        for t in resp.responses {
            let name = requested_topic(
                &topics,
                with_ids,
                TopicId::from_uuid(t.topic_id),
                &t.topic.0,
            );
            let Some(name) = name else {
                return Err(Error::protocol(
                    self.broker(),
                    "Fetch response names a topic that was not requested",
                ));
            };
            for p in t.partitions {
                let tp = TopicPartition::from_broker(name.clone(), p.partition_index);
                let fetch_offset = partitions
                    .iter()
                    .find(|r| r.partition == tp)
                    .map_or(-1, |r| r.offset);
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
        Ok(out)
    }
}

/// Fetch errors that a metadata refresh (and a retry) can fix.
fn refresh_and_retry(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::NotLeaderOrFollower
            | ResponseError::LeaderNotAvailable
            | ResponseError::FencedLeaderEpoch
            | ResponseError::UnknownLeaderEpoch
            | ResponseError::UnknownTopicOrPartition
            | ResponseError::UnknownTopicId
            | ResponseError::InconsistentTopicId
            | ResponseError::KafkaStorageError
            | ResponseError::ReplicaNotAvailable
            | ResponseError::OffsetNotAvailable
            | ResponseError::BrokerNotAvailable
    )
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
        let mut results: Vec<Option<FetchedPartition>> = partitions.iter().map(|_| None).collect();
        let mut last_code: HashMap<usize, FetchedPartition> = HashMap::new();
        let mut transport_error: Option<Error> = None;
        let mut pending: Vec<usize> = (0..partitions.len()).collect();
        let mut retry = self.retry();
        let mut force = false;
        let mut unknown_topic_rounds = 0u32;

        while !pending.is_empty() {
            let topics: Vec<&str> = pending
                .iter()
                .map(|&i| partitions[i].partition.topic())
                .collect();
            let mut next = Vec::new();
            let mut saw_unknown_topic = false;
            transport_error = None;
            match self.metadata_for(&topics, force).await {
                Err(e) if e.is_retriable() => {
                    transport_error = Some(e);
                    next = pending.clone();
                }
                Err(e) => return Err(e),
                Ok(md) => {
                    let mut by_leader: HashMap<i32, Vec<(usize, FetchPartition)>> = HashMap::new();
                    for &i in &pending {
                        let p = &partitions[i];
                        match self.route(&md, &p.partition, "Read") {
                            Ok(route) => {
                                let mut p = p.clone();
                                p.leader_epoch = p
                                    .leader_epoch
                                    .or((route.leader_epoch >= 0).then_some(route.leader_epoch));
                                p.topic_id = p.topic_id.or(route.topic_id);
                                by_leader.entry(route.leader).or_default().push((i, p));
                            }
                            Err(e) if e.is_retriable() => {
                                saw_unknown_topic |=
                                    e.code() == Some(ResponseError::UnknownTopicOrPartition);
                                if let Some(code) = e.code() {
                                    last_code.insert(i, error_only(p, code));
                                } else {
                                    transport_error = Some(e);
                                }
                                next.push(i);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    let mut set = JoinSet::new();
                    for (leader, group) in by_leader {
                        let client = self.clone();
                        let options = options.clone();
                        set.spawn(async move {
                            let reqs: Vec<FetchPartition> =
                                group.iter().map(|(_, p)| p.clone()).collect();
                            let r =
                                async { client.broker(leader).await?.fetch(&reqs, &options).await }
                                    .await;
                            (group, r)
                        });
                    }
                    while let Some(joined) = set.join_next().await {
                        let Ok((group, r)) = joined else { continue };
                        match r {
                            Err(e) if e.is_retriable() || matches!(e, Error::Protocol { .. }) => {
                                next.extend(group.iter().map(|(i, _)| *i));
                                transport_error = Some(e);
                            }
                            Err(e) => return Err(e),
                            Ok(parts) => {
                                for (i, req) in group {
                                    let Some(p) =
                                        parts.iter().find(|p| p.partition == req.partition)
                                    else {
                                        next.push(i);
                                        continue;
                                    };
                                    match p.error {
                                        Some(code) if refresh_and_retry(code) => {
                                            saw_unknown_topic |=
                                                code == ResponseError::UnknownTopicOrPartition;
                                            last_code.insert(i, p.clone());
                                            next.push(i);
                                        }
                                        _ => results[i] = Some(p.clone()),
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if saw_unknown_topic {
                unknown_topic_rounds += 1;
            }
            pending = next;
            if pending.is_empty() {
                break;
            }
            force = true;
            let only_unknown_topics = pending.iter().all(|i| {
                last_code
                    .get(i)
                    .is_some_and(|p| p.error == Some(ResponseError::UnknownTopicOrPartition))
            });
            if (unknown_topic_rounds > UNKNOWN_TOPIC_RETRIES && only_unknown_topics)
                || !retry.wait().await
            {
                break;
            }
            tracing::debug!(
                partitions = pending.len(),
                attempt = retry.attempts(),
                "retrying fetch"
            );
        }
        for i in pending {
            match last_code.remove(&i) {
                Some(p) if transport_error.is_none() => results[i] = Some(p),
                _ => {
                    return Err(transport_error.unwrap_or_else(|| {
                        Error::broker(
                            ResponseError::RequestTimedOut,
                            "fetch did not complete within request.timeout.ms",
                        )
                    }));
                }
            }
        }
        Ok(results.into_iter().flatten().collect())
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

    #[test]
    fn retry_classes() {
        assert!(refresh_and_retry(ResponseError::FencedLeaderEpoch));
        assert!(refresh_and_retry(ResponseError::UnknownLeaderEpoch));
        assert!(refresh_and_retry(ResponseError::NotLeaderOrFollower));
        assert!(!refresh_and_retry(ResponseError::OffsetOutOfRange));
        assert!(!refresh_and_retry(ResponseError::TopicAuthorizationFailed));
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
