//! ListOffsets: earliest, latest, or by timestamp.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::conn::Connection;
use crate::error::{Error, ErrorClass, Result};
use crate::fetch::Isolation;
use crate::metadata::{ClusterMetadata, PartitionLeader};
use crate::route::{PartitionRequest, Verdict, code_error};
use crate::topic::TopicPartition;

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        isolation: Isolation,
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

/// How many times a lookup is sent.
#[derive(Clone, Copy)]
enum Rounds {
    /// Once: the caller retries.
    One,
    /// Until answered or `request.timeout.ms` is over.
    UntilTimeout,
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
        isolation: Isolation,
    ) -> Result<Vec<ListedOffset>> {
        self.list_offsets_each(partitions, isolation, Rounds::UntilTimeout)
            .await?
            .into_iter()
            .collect()
    }

    /// One partition's offset, like [`Client::list_offsets`]. Concurrent calls share requests
    /// (see `coalesce.rs`): thousands of partitions resolving their start position at once
    /// send a few ListOffsets requests per broker instead of one each. Each call retries its
    /// own partition (a shared request is sent once), so a partition without a leader does not
    /// hold up the others.
    pub async fn list_offset(
        &self,
        partition: &TopicPartition,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<ListedOffset> {
        let key = [(partition.clone(), spec, isolation)];
        let mut first = true;
        self.retrying("ListOffsets", || {
            let again = !std::mem::replace(&mut first, false);
            let key = &key;
            async move {
                if again {
                    // The leader may have moved: route this round with fresh metadata. If the
                    // refresh fails, the round says why.
                    let _ = self.metadata_for(&[partition.topic()], true).await;
                }
                self.list_offset_once(key).await
            }
        })
        .await
    }

    /// One coalesced round of [`Client::list_offset`].
    async fn list_offset_once(
        &self,
        key: &[(TopicPartition, OffsetSpec, Isolation); 1],
    ) -> Result<ListedOffset> {
        let answers = self
            .inner
            .offsets
            .get(key, |keys| async move {
                let mut answered = Vec::with_capacity(keys.len());
                for level in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
                    let asks: Vec<_> = keys
                        .iter()
                        .filter(|k| k.2 == level)
                        .map(|(tp, spec, _)| (tp.clone(), *spec))
                        .collect();
                    if asks.is_empty() {
                        continue;
                    }
                    let each = self.list_offsets_each(&asks, level, Rounds::One).await?;
                    answered.extend(
                        asks.into_iter()
                            .zip(each)
                            .map(|((tp, spec), r)| ((tp, spec, level), r)),
                    );
                }
                Ok::<_, Error>(answered)
            })
            .await?;
        answers.into_iter().next().flatten().unwrap_or_else(|| {
            Err(Error::InvalidArgument(format!(
                "no offset listed for {}",
                key[0].0
            )))
        })
    }

    /// [`Client::list_offsets`] with each partition's own outcome.
    async fn list_offsets_each(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
        isolation: Isolation,
        rounds: Rounds,
    ) -> Result<Vec<Result<ListedOffset>>> {
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
        let request = LeaderListOffsets {
            isolation,
            principal: self.principal().map(Arc::from),
        };
        let mut results: Vec<Option<Result<ListedOffset>>> =
            partitions.iter().map(|_| None).collect();
        for wave in waves {
            // The leader epoch is filled in from metadata when routed.
            let asks: Vec<Ask> = wave
                .iter()
                .map(|&i| (partitions[i].0.clone(), partitions[i].1, -1))
                .collect();
            let answers = match rounds {
                Rounds::One => self.route_once(&request, &asks).await?,
                Rounds::UntilTimeout => self.route_and_retry(&request, &asks).await?,
            };
            for (i, r) in wave.into_iter().zip(answers) {
                results[i] = Some(r);
            }
        }
        Ok(results.into_iter().flatten().collect())
    }
}

/// [`Client::list_offsets`]: each lookup on its partition's leader.
#[derive(Clone)]
struct LeaderListOffsets {
    isolation: Isolation,
    principal: Option<Arc<str>>,
}

impl PartitionRequest for LeaderListOffsets {
    type Item = Ask;
    type Answer = (
        TopicPartition,
        std::result::Result<ListedOffset, ResponseError>,
    );
    type Out = ListedOffset;
    const API: &'static str = "ListOffsets";
    const OPERATION: &'static str = "Describe";
    const FAIL_FAST: bool = true;

    fn partition(item: &Ask) -> &TopicPartition {
        &item.0
    }

    fn answered(answer: &Self::Answer) -> &TopicPartition {
        &answer.0
    }

    fn routed(item: &Ask, route: &PartitionLeader) -> Ask {
        (item.0.clone(), item.1, route.leader_epoch)
    }

    async fn send(
        &self,
        conn: &Connection,
        items: &[Ask],
        _metadata: &ClusterMetadata,
    ) -> Result<Vec<Self::Answer>> {
        conn.list_offsets(items, self.isolation).await
    }

    fn judge(&self, item: &Ask, answer: Self::Answer) -> Verdict<ListedOffset> {
        match answer.1 {
            Ok(o) => Verdict::Done(o),
            Err(code) => {
                let e = code_error::<Self>(self.principal.as_deref(), item, code);
                if ErrorClass::of(code) == ErrorClass::Refresh {
                    Verdict::retry(e)
                } else {
                    Verdict::Fail(e)
                }
            }
        }
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
