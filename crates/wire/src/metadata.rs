//! Cluster metadata: brokers, topics (with topic ids), partition leaders and leader epochs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::conn::Connection;
use crate::error::{Error, Result, error_name};
use crate::topic::{TopicId, TopicPartition};

/// Where a partition's requests go, from metadata: its leader, the leader epoch (sent so a stale
/// leader is fenced) and the topic id (Fetch v13+). See [`Client::partition_leader`](crate::Client::partition_leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    /// The leader's node id.
    pub leader: i32,
    /// The leader epoch (-1 if the broker did not say).
    pub leader_epoch: i32,
    /// The topic id, if metadata has one.
    pub topic_id: Option<TopicId>,
}

/// One broker as the cluster advertises it (on the listener the client connected through).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// The node id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port` (IPv6 hosts in brackets).
    pub fn address(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// The leader's node id; `None` while there is no leader.
    pub leader: Option<i32>,
    /// The leader epoch (KIP-320); -1 if the broker did not say.
    pub leader_epoch: i32,
    /// All replicas.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Offline replicas.
    pub offline_replicas: Vec<i32>,
    /// The partition's error (e.g. LEADER_NOT_AVAILABLE), if any.
    pub error: Option<ResponseError>,
}

/// One topic's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// The topic name.
    pub name: Arc<str>,
    /// The topic id (Metadata v10+), if the broker sent one.
    pub id: Option<TopicId>,
    /// Whether Kafka marks it internal (`__consumer_offsets`).
    pub is_internal: bool,
    /// The topic-level error (UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED), if any.
    pub error: Option<ResponseError>,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    /// The partition with index `p`.
    pub fn partition(&self, p: i32) -> Option<&PartitionInfo> {
        // Sorted and usually dense, so try the direct index first.
        match self.partitions.get(p as usize) {
            Some(info) if info.partition == p => Some(info),
            _ => self.partitions.iter().find(|i| i.partition == p),
        }
    }
}

/// A snapshot of cluster metadata.
#[derive(Debug, Clone)]
pub struct ClusterMetadata {
    /// The cluster id.
    pub cluster_id: Option<String>,
    /// The active controller's node id (brokers report a random broker in KRaft mode), if any.
    pub controller_id: Option<i32>,
    /// Brokers by node id.
    pub brokers: HashMap<i32, BrokerInfo>,
    /// Topics by name. Shared between snapshots: a refresh of a few topics copies pointers to
    /// the others, not their partition lists (at thousands of partitions the deep copy per
    /// refresh was most of a mirror's start-up allocations).
    pub topics: HashMap<Arc<str>, Arc<TopicInfo>>,
    /// When this snapshot was fetched.
    pub fetched_at: Instant,
}

impl Default for ClusterMetadata {
    fn default() -> Self {
        ClusterMetadata {
            cluster_id: None,
            controller_id: None,
            brokers: HashMap::new(),
            topics: HashMap::new(),
            fetched_at: Instant::now(),
        }
    }
}

impl ClusterMetadata {
    /// A topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name).map(Arc::as_ref)
    }

    /// A partition's metadata.
    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionInfo> {
        self.topic(tp.topic())?.partition(tp.partition())
    }

    /// The node id leading `tp`, if known.
    pub fn leader(&self, tp: &TopicPartition) -> Option<i32> {
        self.partition(tp)?.leader
    }

    /// All topic-partitions of a topic, if the topic is known.
    pub fn partitions_of(&self, topic: &str) -> Option<Vec<TopicPartition>> {
        let t = self.topic(topic)?;
        Some(
            t.partitions
                .iter()
                .map(|p| TopicPartition::from_broker(t.name.clone(), p.partition))
                .collect(),
        )
    }

    /// A topic name by topic id.
    pub fn topic_name(&self, id: TopicId) -> Option<&Arc<str>> {
        self.topics
            .values()
            .find(|t| t.id == Some(id))
            .map(|t| &t.name)
    }

    /// Merges a newer snapshot: brokers and cluster facts are replaced; topics in `newer`
    /// replace their old entries; others are kept unless `newer` lists all topics.
    pub(crate) fn merge(&self, newer: ClusterMetadata, all_topics: bool) -> ClusterMetadata {
        let mut topics = if all_topics {
            HashMap::new()
        } else {
            self.topics.clone()
        };
        topics.extend(newer.topics);
        ClusterMetadata {
            cluster_id: newer.cluster_id,
            controller_id: newer.controller_id,
            brokers: newer.brokers,
            topics,
            fetched_at: newer.fetched_at,
        }
    }
}

/// Fetches metadata over `conn`. `topics: None` = every topic; `Some(&[])` = brokers only.
pub async fn fetch_metadata(
    conn: &Connection,
    topics: Option<&[String]>,
) -> Result<ClusterMetadata> {
    let version = conn.pick_version::<MetadataRequest>(4..=13)?;
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|n| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                })
                .collect()
        }));
    let resp = conn.send(req, version).await?;
    parse(conn, resp)
}

fn parse(conn: &Connection, resp: MetadataResponse) -> Result<ClusterMetadata> {
    if let Some(code) = ResponseError::try_from_code(resp.error_code) {
        return Err(Error::broker(
            code,
            format!(
                "Metadata from broker {}: the cluster asked the client to re-bootstrap",
                conn.broker()
            ),
        ));
    }
    let mut brokers = HashMap::with_capacity(resp.brokers.len());
    for b in resp.brokers {
        let port = u16::try_from(b.port).map_err(|_| {
            Error::protocol(
                conn.broker(),
                format!("broker {} advertises port {}", b.node_id.0, b.port),
            )
        })?;
        brokers.insert(
            b.node_id.0,
            BrokerInfo {
                node_id: b.node_id.0,
                host: b.host.to_string(),
                port,
                rack: b.rack.map(|r| r.to_string()),
            },
        );
    }
    let mut topics = HashMap::with_capacity(resp.topics.len());
    for t in resp.topics {
        let Some(name) = t.name else { continue };
        let name: Arc<str> = Arc::from(name.0.as_str());
        let mut partitions: Vec<PartitionInfo> = t
            .partitions
            .into_iter()
            .map(|p| PartitionInfo {
                partition: p.partition_index,
                leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                leader_epoch: p.leader_epoch,
                replicas: p.replica_nodes.into_iter().map(|n| n.0).collect(),
                isr: p.isr_nodes.into_iter().map(|n| n.0).collect(),
                offline_replicas: p.offline_replicas.into_iter().map(|n| n.0).collect(),
                error: ResponseError::try_from_code(p.error_code),
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        topics.insert(
            name.clone(),
            Arc::new(TopicInfo {
                name,
                id: TopicId::from_uuid(t.topic_id),
                is_internal: t.is_internal,
                error: ResponseError::try_from_code(t.error_code),
                partitions,
            }),
        );
    }
    if let Some(id) = conn.node_id().or_else(|| {
        // A bootstrap connection learns its node id from the broker list.
        brokers
            .values()
            .find(|b| b.address() == conn.broker())
            .map(|b| b.node_id)
    }) {
        conn.set_node_id(id);
    }
    Ok(ClusterMetadata {
        cluster_id: resp.cluster_id.map(|c| c.to_string()),
        controller_id: (resp.controller_id.0 >= 0).then_some(resp.controller_id.0),
        brokers,
        topics,
        fetched_at: Instant::now(),
    })
}

/// A readable description of a topic-level metadata error.
pub(crate) fn describe_topic_error(topic: &str, code: ResponseError) -> String {
    match code {
        ResponseError::UnknownTopicOrPartition => format!(
            "topic `{topic}` does not exist (or the client may not Describe it); create it or fix the name"
        ),
        ResponseError::InvalidTopicException => format!("`{topic}` is not a valid topic name"),
        other => format!(
            "metadata for topic `{topic}` has error {}",
            error_name(other)
        ),
    }
}
