//! Committed offsets of a consumer group: OffsetCommit and OffsetFetch through the group's
//! coordinator.
//!
//! Commits are made either as a member of a generation (from a
//! [`GroupMember`](crate::group::GroupMember)) or as nobody ([`Generation::simple`]), which the
//! coordinator accepts only while the group has no active members (how MirrorMaker 2 and
//! `assign()`-style consumers commit).

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::{Error, Result, error_name};
use crate::group::Generation;
use crate::group::coordinator::{CoordinatorCache, CoordinatorType, LOOKUP_TIMEOUT};
use crate::{Client, Connection, TopicPartition};

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    /// The partition.
    pub partition: TopicPartition,
    /// The next offset to consume (last processed offset + 1), as Kafka consumers commit it.
    pub offset: i64,
    /// Leader epoch of the last processed record, if known (OffsetCommit v6+).
    pub leader_epoch: Option<i32>,
    /// Free-form metadata stored with the offset.
    pub metadata: Option<String>,
}

impl CommitOffset {
    /// An offset with no leader epoch and no metadata.
    pub fn new(partition: TopicPartition, offset: i64) -> CommitOffset {
        CommitOffset {
            partition,
            offset,
            leader_epoch: None,
            metadata: None,
        }
    }
}

/// An offset as stored by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The committed offset (the next one to consume).
    pub offset: i64,
    /// The leader epoch committed with it, if any.
    pub leader_epoch: Option<i32>,
    /// The metadata committed with it, if any.
    pub metadata: Option<String>,
}

/// Commits and reads the offsets of one consumer group. Cheap to clone; clones share the
/// cached coordinator.
#[derive(Clone)]
pub struct GroupOffsets {
    coordinator: CoordinatorCache,
}

impl GroupOffsets {
    /// Offsets of `group_id` on `client`'s cluster.
    pub fn new(client: &Client, group_id: &str) -> GroupOffsets {
        GroupOffsets {
            coordinator: CoordinatorCache::new(client.clone(), CoordinatorType::Group, group_id),
        }
    }

    pub(crate) fn with_coordinator(coordinator: CoordinatorCache) -> GroupOffsets {
        GroupOffsets { coordinator }
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        self.coordinator.key()
    }

    /// Commits `offsets` as `generation` (a member's, or [`Generation::simple`]).
    ///
    /// All-or-error: if the coordinator rejects any partition the call fails, naming the
    /// partitions. Coordinator moves and loading are retried for up to 60 s.
    /// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS and FENCED_INSTANCE_ID mean
    /// the group moved on without this member: the commit did not happen, and
    /// [`Error::is_stale_membership`] is true.
    pub async fn commit(&self, generation: &Generation, offsets: &[CommitOffset]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        if let Some(bad) = offsets.iter().find(|o| o.offset < 0) {
            return Err(Error::InvalidArgument(format!(
                "cannot commit offset {} for {}: offsets are >= 0",
                bad.offset, bad.partition
            )));
        }
        self.coordinator
            .call("OffsetCommit", LOOKUP_TIMEOUT, |conn| {
                commit_once(conn, self.group_id(), generation, offsets)
            })
            .await
    }

    /// The committed offset of each partition (`None`: nothing committed).
    ///
    /// Asks for stable offsets (OffsetFetch v7+ `require_stable`): while a transactional commit
    /// for a partition is pending the coordinator answers UNSTABLE_OFFSET_COMMIT, which is
    /// retried for up to 60 s.
    pub async fn fetch(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        self.coordinator
            .call("OffsetFetch", LOOKUP_TIMEOUT, |conn| {
                fetch_once(conn, self.group_id(), partitions)
            })
            .await
    }
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_owned()))
}

/// Groups offsets by topic, keeping the caller's order of first appearance.
fn by_topic<T, F: Fn(&T) -> &TopicPartition>(items: &[T], tp: F) -> Vec<(&str, Vec<&T>)> {
    let mut out: Vec<(&str, Vec<&T>)> = Vec::new();
    for item in items {
        let topic = tp(item).topic();
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, v)) => v.push(item),
            None => out.push((topic, vec![item])),
        }
    }
    out
}

async fn commit_once(
    conn: Connection,
    group_id: &str,
    generation: &Generation,
    offsets: &[CommitOffset],
) -> Result<()> {
    // group.instance.id needs v7; without it any version the broker has will do.
    let min = if generation.group_instance_id.is_some() {
        7
    } else {
        2
    };
    let version = conn.pick_version::<OffsetCommitRequest>(min..=9)?;
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
    req.generation_id_or_member_epoch = generation.generation_id;
    req.member_id = StrBytes::from_string(generation.member_id.clone());
    if version >= 7 {
        req.group_instance_id = generation
            .group_instance_id
            .clone()
            .map(StrBytes::from_string);
    }
    if version <= 4 {
        req.retention_time_ms = -1;
    }
    req.topics = by_topic(offsets, |o| &o.partition)
        .into_iter()
        .map(|(topic, parts)| {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = topic_name(topic);
            t.partitions = parts
                .into_iter()
                .map(|o| {
                    let mut p = OffsetCommitRequestPartition::default();
                    p.partition_index = o.partition.partition();
                    p.committed_offset = o.offset;
                    if version >= 6 {
                        p.committed_leader_epoch = o.leader_epoch.unwrap_or(-1);
                    }
                    p.committed_metadata = o.metadata.clone().map(StrBytes::from_string);
                    p
                })
                .collect();
            t
        })
        .collect();
    let resp = conn.send(req, version).await?;
    let mut failed: Vec<(String, ResponseError)> = Vec::new();
    let mut answered = 0usize;
    for t in &resp.topics {
        for p in &t.partitions {
            answered += 1;
            if let Some(code) = ResponseError::try_from_code(p.error_code) {
                failed.push((format!("{}-{}", t.name.as_str(), p.partition_index), code));
            }
        }
    }
    if failed.is_empty() && answered < offsets.len() {
        return Err(Error::Protocol {
            broker: format!("coordinator of group '{group_id}'"),
            message: format!(
                "OffsetCommit answered for {answered} of {} partitions",
                offsets.len()
            ),
        });
    }
    match failed.first() {
        None => Ok(()),
        Some((first, code)) => Err(commit_error(group_id, generation, *code, first, &failed)),
    }
}

fn commit_error(
    group_id: &str,
    generation: &Generation,
    code: ResponseError,
    first: &str,
    failed: &[(String, ResponseError)],
) -> Error {
    let partitions = failed
        .iter()
        .map(|(tp, c)| {
            if *c == code {
                tp.clone()
            } else {
                format!("{tp} ({})", error_name(*c))
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    match code {
        ResponseError::GroupAuthorizationFailed => group_authorization(group_id, "Read"),
        ResponseError::TopicAuthorizationFailed => Error::Authorization {
            code,
            principal: None,
            operation: "Read".to_owned(),
            resource: format!("Topic:{}", first.rsplit_once('-').map_or(first, |(t, _)| t)),
        },
        ResponseError::IllegalGeneration
        | ResponseError::UnknownMemberId
        | ResponseError::RebalanceInProgress
        | ResponseError::FencedInstanceId
        | ResponseError::StaleMemberEpoch
        | ResponseError::FencedMemberEpoch => Error::Broker {
            code,
            context: format!(
                "OffsetCommit for group '{group_id}' as generation {} of member '{}' was rejected for {partitions}: {}",
                generation.generation_id,
                generation.member_id,
                if generation.generation_id < 0 {
                    "the group has active members, so a commit without membership is refused; stop them or use another group.id"
                } else {
                    "the group has rebalanced and the partitions may belong to another member now. Nothing was committed: resume from the last committed offsets after the next assignment"
                }
            ),
        },
        ResponseError::OffsetMetadataTooLarge => Error::Broker {
            code,
            context: format!(
                "OffsetCommit for group '{group_id}': the metadata for {partitions} is larger than the broker's offset.metadata.max.bytes; shorten it"
            ),
        },
        _ => Error::Broker {
            code,
            context: format!("OffsetCommit for group '{group_id}' failed for {partitions}"),
        },
    }
}

pub(crate) fn group_authorization(group_id: &str, operation: &str) -> Error {
    Error::Authorization {
        code: ResponseError::GroupAuthorizationFailed,
        principal: None,
        operation: operation.to_owned(),
        resource: format!("Group:{group_id}"),
    }
}

async fn fetch_once(
    conn: Connection,
    group_id: &str,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
    let version = conn.pick_version::<OffsetFetchRequest>(1..=9)?;
    let grouped = by_topic(partitions, |tp| tp);
    let mut req = OffsetFetchRequest::default();
    if version >= 8 {
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
        g.member_id = None;
        g.member_epoch = -1;
        g.topics = Some(
            grouped
                .iter()
                .map(|(topic, tps)| {
                    let mut t = OffsetFetchRequestTopics::default();
                    t.name = topic_name(topic);
                    t.partition_indexes = tps.iter().map(|tp| tp.partition()).collect();
                    t
                })
                .collect(),
        );
        req.groups = vec![g];
    } else {
        req.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
        req.topics = Some(
            grouped
                .iter()
                .map(|(topic, tps)| {
                    let mut t = OffsetFetchRequestTopic::default();
                    t.name = topic_name(topic);
                    t.partition_indexes = tps.iter().map(|tp| tp.partition()).collect();
                    t
                })
                .collect(),
        );
    }
    if version >= 7 {
        req.require_stable = true;
    }
    let resp = conn.send(req, version).await?;
    let answers = fetch_answers(resp, version, group_id)?;
    let mut out: BTreeMap<TopicPartition, Option<CommittedOffset>> =
        partitions.iter().map(|tp| (tp.clone(), None)).collect();
    for (topic, partition, committed, code) in answers {
        let Some(slot) = out
            .iter_mut()
            .find(|(tp, _)| tp.topic() == topic && tp.partition() == partition)
            .map(|(_, v)| v)
        else {
            continue;
        };
        match code {
            None => *slot = committed,
            // The topic does not exist (any more): nothing is committed for it.
            Some(ResponseError::UnknownTopicOrPartition) => *slot = None,
            Some(ResponseError::TopicAuthorizationFailed) => {
                return Err(Error::Authorization {
                    code: ResponseError::TopicAuthorizationFailed,
                    principal: None,
                    operation: "Describe".to_owned(),
                    resource: format!("Topic:{topic}"),
                });
            }
            Some(ResponseError::UnstableOffsetCommit) => {
                return Err(Error::Broker {
                    code: ResponseError::UnstableOffsetCommit,
                    context: format!(
                        "OffsetFetch for group '{group_id}': a transactional offset commit for {topic}-{partition} is still pending"
                    ),
                });
            }
            Some(code) => {
                return Err(Error::Broker {
                    code,
                    context: format!(
                        "OffsetFetch for group '{group_id}' failed for {topic}-{partition}"
                    ),
                });
            }
        }
    }
    Ok(out)
}

type FetchAnswer = (String, i32, Option<CommittedOffset>, Option<ResponseError>);

/// Flattens both response layouts (v1-7 top level, v8+ per group) and checks the group error.
fn fetch_answers(
    resp: OffsetFetchResponse,
    version: i16,
    group_id: &str,
) -> Result<Vec<FetchAnswer>> {
    let committed = |offset: i64, epoch: i32, metadata: Option<StrBytes>| {
        (offset >= 0).then(|| CommittedOffset {
            offset,
            leader_epoch: (epoch >= 0).then_some(epoch),
            metadata: metadata.map(|m| m.as_str().to_owned()),
        })
    };
    let mut out = Vec::new();
    let group_code = if version >= 8 {
        let Some(g) = resp
            .groups
            .into_iter()
            .find(|g| g.group_id.as_str() == group_id)
        else {
            return Err(Error::Protocol {
                broker: format!("coordinator of group '{group_id}'"),
                message: "OffsetFetch response does not mention the group".to_owned(),
            });
        };
        for t in g.topics {
            for p in t.partitions {
                out.push((
                    t.name.as_str().to_owned(),
                    p.partition_index,
                    committed(p.committed_offset, p.committed_leader_epoch, p.metadata),
                    ResponseError::try_from_code(p.error_code),
                ));
            }
        }
        g.error_code
    } else {
        for t in resp.topics {
            for p in t.partitions {
                out.push((
                    t.name.as_str().to_owned(),
                    p.partition_index,
                    committed(p.committed_offset, p.committed_leader_epoch, p.metadata),
                    ResponseError::try_from_code(p.error_code),
                ));
            }
        }
        resp.error_code
    };
    match ResponseError::try_from_code(group_code) {
        None => Ok(out),
        Some(ResponseError::GroupAuthorizationFailed) => {
            Err(group_authorization(group_id, "Describe"))
        }
        Some(code) => Err(Error::Broker {
            code,
            context: format!("OffsetFetch for group '{group_id}'"),
        }),
    }
}

impl Error {
    /// Whether this error means a group member's generation is no longer current (the group
    /// rebalanced, or the member was removed or fenced): a commit made with it did not happen.
    /// The partitions may belong to another member now; re-read committed offsets after the
    /// next assignment instead of retrying.
    pub fn is_stale_membership(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ResponseError::IllegalGeneration
                    | ResponseError::UnknownMemberId
                    | ResponseError::RebalanceInProgress
                    | ResponseError::FencedInstanceId
                    // The consumer protocol's (KIP-848) member epoch checks.
                    | ResponseError::StaleMemberEpoch
                    | ResponseError::FencedMemberEpoch
            )
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
        OffsetFetchResponseTopic, OffsetFetchResponseTopics,
    };

    #[test]
    fn by_topic_keeps_first_appearance_order() {
        let tps = [
            TopicPartition::new("b", 0).unwrap(),
            TopicPartition::new("a", 1).unwrap(),
            TopicPartition::new("b", 2).unwrap(),
        ];
        let g = by_topic(&tps, |tp| tp);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].0, "b");
        assert_eq!(g[0].1.len(), 2);
        assert_eq!(g[1].0, "a");
    }

    #[test]
    fn fetch_answers_both_layouts() {
        let mut p = OffsetFetchResponsePartition::default();
        p.partition_index = 3;
        p.committed_offset = 42;
        p.committed_leader_epoch = -1;
        let mut none = OffsetFetchResponsePartition::default();
        none.partition_index = 4;
        none.committed_offset = -1;
        let mut t = OffsetFetchResponseTopic::default();
        t.name = topic_name("t");
        t.partitions = vec![p, none];
        let mut old = OffsetFetchResponse::default();
        old.topics = vec![t];
        let a = fetch_answers(old, 7, "g").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].2.as_ref().map(|c| c.offset), Some(42));
        assert_eq!(a[0].2.as_ref().and_then(|c| c.leader_epoch), None);
        assert!(a[1].2.is_none());

        let mut p = OffsetFetchResponsePartitions::default();
        p.partition_index = 0;
        p.committed_offset = 7;
        p.committed_leader_epoch = 5;
        p.metadata = Some(StrBytes::from_static_str("m"));
        let mut t = OffsetFetchResponseTopics::default();
        t.name = topic_name("t");
        t.partitions = vec![p];
        let mut g = OffsetFetchResponseGroup::default();
        g.group_id = GroupId(StrBytes::from_static_str("g"));
        g.topics = vec![t];
        let mut new = OffsetFetchResponse::default();
        new.groups = vec![g.clone()];
        let a = fetch_answers(new, 8, "g").unwrap();
        assert_eq!(
            a[0].2,
            Some(CommittedOffset {
                offset: 7,
                leader_epoch: Some(5),
                metadata: Some("m".into())
            })
        );

        g.error_code = ResponseError::GroupAuthorizationFailed.code();
        let mut denied = OffsetFetchResponse::default();
        denied.groups = vec![g];
        let e = fetch_answers(denied, 9, "g").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("Describe Group:g"), "{msg}");
    }

    #[test]
    fn commit_errors_are_typed_and_explain_themselves() {
        let member = Generation {
            generation_id: 5,
            member_id: "m-1".into(),
            group_instance_id: None,
        };
        let failed = vec![
            ("t-0".to_owned(), ResponseError::IllegalGeneration),
            ("t-1".to_owned(), ResponseError::IllegalGeneration),
        ];
        let e = commit_error(
            "g",
            &member,
            ResponseError::IllegalGeneration,
            "t-0",
            &failed,
        );
        assert!(e.is_stale_membership());
        let msg = e.to_string();
        assert!(
            msg.contains("t-0, t-1") && msg.contains("rebalanced"),
            "{msg}"
        );

        let e = commit_error(
            "g",
            &Generation::simple(),
            ResponseError::UnknownMemberId,
            "t-0",
            &failed[..1],
        );
        assert!(e.to_string().contains("active members"), "{e}");

        let e = commit_error(
            "g",
            &member,
            ResponseError::GroupAuthorizationFailed,
            "t-0",
            &failed[..1],
        );
        assert!(e.to_string().contains("Read Group:g"), "{e}");
        assert!(!e.is_stale_membership());

        let e = commit_error(
            "g",
            &member,
            ResponseError::TopicAuthorizationFailed,
            "my-topic-0",
            &failed[..1],
        );
        assert!(e.to_string().contains("Topic:my-topic"), "{e}");
    }
}
