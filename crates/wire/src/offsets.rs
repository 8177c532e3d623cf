//! ListOffsets: earliest, latest, or by timestamp.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use crate::client::{Client, UNKNOWN_TOPIC_RETRIES, partition_error};
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::fetch::IsolationLevel;
use crate::topic::TopicPartition;

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (the high watermark; the LSO with read_committed).
    Latest,
    /// The first offset whose timestamp is >= this (milliseconds since the epoch).
    Timestamp(i64),
    /// The offset of the record with the largest timestamp (ListOffsets v7+).
    MaxTimestamp,
}

impl OffsetSpec {
    fn wire(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// A looked-up offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedOffset {
    /// The partition.
    pub partition: TopicPartition,
    /// The offset; `None` when no record matches a timestamp lookup.
    pub offset: Option<i64>,
    /// The timestamp of that record (timestamp lookups), if any.
    pub timestamp: Option<i64>,
    /// The leader epoch of that offset (v4+), if known.
    pub leader_epoch: Option<i32>,
}

impl Connection {
    /// Sends one ListOffsets request. Each partition gets its offset or its error code. No
    /// routing, no retries. `leader_epoch` per partition is sent as CurrentLeaderEpoch (-1: none).
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartition, OffsetSpec, i32)],
        isolation: IsolationLevel,
    ) -> Result<
        Vec<(
            TopicPartition,
            std::result::Result<ListedOffset, ResponseError>,
        )>,
    > {
        let mut topics: Vec<(Arc<str>, Vec<ListOffsetsPartition>)> = Vec::new();
        for (tp, spec, epoch) in partitions {
            let p = ListOffsetsPartition::default()
                .with_partition_index(tp.partition())
                .with_timestamp(spec.wire())
                .with_current_leader_epoch(*epoch);
            match topics.iter_mut().find(|(n, _)| n == tp.topic_arc()) {
                Some((_, ps)) => ps.push(p),
                None => topics.push((tp.topic_arc().clone(), vec![p])),
            }
        }
        let min = if partitions
            .iter()
            .any(|(_, s, _)| *s == OffsetSpec::MaxTimestamp)
        {
            7
        } else {
            1
        };
        let version = self.pick_version::<ListOffsetsRequest>(min..=10)?;
        let timeout_ms = i32::try_from(self.request_timeout().as_millis()).unwrap_or(i32::MAX);
        let mut req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(if version >= 2 { isolation.code() } else { 0 })
            .with_topics(
                topics
                    .iter()
                    .map(|(n, ps)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(n.to_string())))
                            .with_partitions(ps.clone())
                    })
                    .collect(),
            );
        if version >= 10 {
            req = req.with_timeout_ms(timeout_ms);
        }
        let resp = self.send(req, version).await?;
        let mut out = Vec::with_capacity(partitions.len());
        for t in resp.topics {
            let Some((name, _)) = topics.iter().find(|(n, _)| **n == *t.name.0) else {
                return Err(Error::protocol(
                    self.broker(),
                    "ListOffsets response names a topic that was not requested",
                ));
            };
            for p in t.partitions {
                let tp = TopicPartition::from_broker(name.clone(), p.partition_index);
                let r = match ResponseError::try_from_code(p.error_code) {
                    Some(code) => Err(code),
                    None => Ok(ListedOffset {
                        partition: tp.clone(),
                        offset: (p.offset >= 0).then_some(p.offset),
                        timestamp: (p.timestamp >= 0).then_some(p.timestamp),
                        leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
                    }),
                };
                out.push((tp, r));
            }
        }
        Ok(out)
    }
}

/// One lookup: partition, what to look up, current leader epoch.
type Ask = (TopicPartition, OffsetSpec, i32);

fn refresh_and_retry(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::NotLeaderOrFollower
            | ResponseError::LeaderNotAvailable
            | ResponseError::FencedLeaderEpoch
            | ResponseError::UnknownLeaderEpoch
            | ResponseError::UnknownTopicOrPartition
            | ResponseError::OffsetNotAvailable
            | ResponseError::KafkaStorageError
            | ResponseError::BrokerNotAvailable
    )
}

impl Client {
    /// Looks up offsets on each partition's leader, retrying leadership errors within
    /// `request.timeout.ms`. Results are in input order; any partition that still fails makes
    /// the whole call fail with that partition's error. A partition may appear several times
    /// (e.g. earliest and latest); Kafka refuses duplicates in one request, so those go in
    /// successive requests.
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
        isolation: IsolationLevel,
    ) -> Result<Vec<ListedOffset>> {
        // Waves in which every partition appears at most once.
        let mut waves: Vec<Vec<usize>> = Vec::new();
        for (i, (tp, _)) in partitions.iter().enumerate() {
            match waves
                .iter_mut()
                .find(|w| !w.iter().any(|&j| partitions[j].0 == *tp))
            {
                Some(w) => w.push(i),
                None => waves.push(vec![i]),
            }
        }
        let mut results: Vec<Option<ListedOffset>> = partitions.iter().map(|_| None).collect();
        for wave in waves {
            let asks: Vec<(TopicPartition, OffsetSpec)> =
                wave.iter().map(|&i| partitions[i].clone()).collect();
            for (i, r) in wave
                .into_iter()
                .zip(self.list_offsets_unique(&asks, isolation).await?)
            {
                results[i] = Some(r);
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    async fn list_offsets_unique(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
        isolation: IsolationLevel,
    ) -> Result<Vec<ListedOffset>> {
        let mut results: Vec<Option<ListedOffset>> = partitions.iter().map(|_| None).collect();
        let mut last_error: Option<Error> = None;
        let mut pending: Vec<usize> = (0..partitions.len()).collect();
        let mut retry = self.retry();
        let mut force = false;
        let mut unknown_topic_rounds = 0u32;
        while !pending.is_empty() {
            let topics: Vec<&str> = pending.iter().map(|&i| partitions[i].0.topic()).collect();
            let mut next = Vec::new();
            let mut only_unknown_topic = true;
            match self.metadata_for(&topics, force).await {
                Err(e) if e.is_retriable() => {
                    only_unknown_topic = false;
                    last_error = Some(e);
                    next = pending.clone();
                }
                Err(e) => return Err(e),
                Ok(md) => {
                    let mut by_leader: HashMap<i32, Vec<(usize, Ask)>> = HashMap::new();
                    for &i in &pending {
                        let (tp, spec) = &partitions[i];
                        match self.route(&md, tp, "Describe") {
                            Ok(r) => by_leader
                                .entry(r.leader)
                                .or_default()
                                .push((i, (tp.clone(), *spec, r.leader_epoch))),
                            Err(e) if e.is_retriable() => {
                                only_unknown_topic &=
                                    e.code() == Some(ResponseError::UnknownTopicOrPartition);
                                last_error = Some(e);
                                next.push(i);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    let mut set = JoinSet::new();
                    for (leader, group) in by_leader {
                        let client = self.clone();
                        set.spawn(async move {
                            let reqs: Vec<_> = group.iter().map(|(_, r)| r.clone()).collect();
                            let r = async {
                                client
                                    .broker(leader)
                                    .await?
                                    .list_offsets(&reqs, isolation)
                                    .await
                            }
                            .await;
                            (group, r)
                        });
                    }
                    while let Some(joined) = set.join_next().await {
                        let Ok((group, r)) = joined else { continue };
                        match r {
                            Err(e) if e.is_retriable() => {
                                only_unknown_topic = false;
                                next.extend(group.iter().map(|(i, _)| *i));
                                last_error = Some(e);
                            }
                            Err(e) => return Err(e),
                            Ok(answers) => {
                                for (i, (tp, _, _)) in group {
                                    match answers.iter().find(|(t, _)| *t == tp).map(|(_, r)| r) {
                                        Some(Ok(o)) => results[i] = Some(o.clone()),
                                        Some(Err(code)) if refresh_and_retry(*code) => {
                                            only_unknown_topic &=
                                                *code == ResponseError::UnknownTopicOrPartition;
                                            last_error = Some(partition_error(
                                                *code,
                                                self.principal(),
                                                "Describe",
                                                &tp,
                                                "ListOffsets",
                                                None,
                                            ));
                                            next.push(i);
                                        }
                                        Some(Err(code)) => {
                                            return Err(partition_error(
                                                *code,
                                                self.principal(),
                                                "Describe",
                                                &tp,
                                                "ListOffsets",
                                                None,
                                            ));
                                        }
                                        None => {
                                            only_unknown_topic = false;
                                            next.push(i);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            pending = next;
            if pending.is_empty() {
                break;
            }
            if only_unknown_topic {
                unknown_topic_rounds += 1;
            }
            force = true;
            if unknown_topic_rounds > UNKNOWN_TOPIC_RETRIES || !retry.wait().await {
                return Err(last_error.unwrap_or_else(|| {
                    Error::broker(
                        ResponseError::RequestTimedOut,
                        "ListOffsets did not complete within request.timeout.ms",
                    )
                }));
            }
        }
        Ok(results.into_iter().flatten().collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_timestamps() {
        assert_eq!(OffsetSpec::Earliest.wire(), -2);
        assert_eq!(OffsetSpec::Latest.wire(), -1);
        assert_eq!(OffsetSpec::MaxTimestamp.wire(), -3);
        assert_eq!(OffsetSpec::Timestamp(1234).wire(), 1234);
    }
}
