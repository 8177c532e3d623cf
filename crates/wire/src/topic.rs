//! Topic names, topic ids and topic-partitions.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;

use crate::error::{Error, Result};

/// Kafka's limit on topic name length.
const MAX_TOPIC_NAME_LEN: usize = 249;

/// A topic-partition: a valid Kafka topic name (1-249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`)
/// and a partition index >= 0. Cheap to clone (the name is shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    topic: Arc<str>,
    partition: i32,
}

impl TopicPartition {
    /// Validates the topic name and partition.
    pub fn new(topic: impl AsRef<str>, partition: i32) -> Result<TopicPartition> {
        let topic = topic.as_ref();
        validate_topic_name(topic)?;
        if partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "partition {partition} of topic `{topic}` is negative; partitions start at 0"
            )));
        }
        Ok(TopicPartition {
            topic: Arc::from(topic),
            partition,
        })
    }

    /// For names that came from a broker (already valid as far as Kafka is concerned).
    pub(crate) fn from_broker(topic: Arc<str>, partition: i32) -> TopicPartition {
        TopicPartition { topic, partition }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The shared topic name.
    pub fn topic_arc(&self) -> &Arc<str> {
        &self.topic
    }

    /// The partition index.
    pub fn partition(&self) -> i32 {
        self.partition
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Checks Kafka's topic naming rules (`org.apache.kafka.common.internals.Topic.validate`).
pub fn validate_topic_name(topic: &str) -> Result<()> {
    if topic.is_empty() {
        return Err(Error::InvalidArgument(
            "topic name is empty; Kafka topic names have 1 to 249 characters".into(),
        ));
    }
    if topic == "." || topic == ".." {
        return Err(Error::InvalidArgument(format!(
            "topic name `{topic}` is not allowed by Kafka"
        )));
    }
    if topic.len() > MAX_TOPIC_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "topic name `{topic}` is {} characters long; Kafka allows at most {MAX_TOPIC_NAME_LEN}",
            topic.len()
        )));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(Error::InvalidArgument(format!(
            "topic name `{topic}` contains `{bad}`; Kafka allows only ASCII letters, digits, `.`, `_` and `-`"
        )));
    }
    Ok(())
}

/// A topic id (KIP-516): 16 bytes, shown the way Kafka shows it (URL-safe base64, no padding).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId([u8; 16]);

impl TopicId {
    /// From the raw 16 bytes. The all-zero id means "no id" in Kafka, so it gives `None`.
    pub fn from_bytes(bytes: [u8; 16]) -> Option<TopicId> {
        (bytes != [0; 16]).then_some(TopicId(bytes))
    }

    /// The raw 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub(crate) fn from_uuid(u: uuid::Uuid) -> Option<TopicId> {
        TopicId::from_bytes(*u.as_bytes())
    }

    pub(crate) fn to_uuid(self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0))
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// Finds which requested topic a response topic refers to: by topic id when the request used
/// ids (Fetch v13+, Produce v13+), else by name. `None` if the broker named a topic that was not
/// requested.
pub(crate) fn requested_topic<T>(
    requested: &[(Arc<str>, Option<TopicId>, T)],
    by_id: bool,
    id: Option<TopicId>,
    name: &str,
) -> Option<Arc<str>> {
    requested
        .iter()
        .find(|(n, tid, _)| {
            if by_id {
                tid.is_some() && *tid == id
            } else {
                **n == *name
            }
        })
        .map(|(n, _, _)| n.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn topic_partition_validation() {
        assert!(TopicPartition::new("orders.eu_1-x", 0).is_ok());
        assert!(TopicPartition::new("", 0).is_err());
        assert!(TopicPartition::new("..", 0).is_err());
        assert!(TopicPartition::new("a b", 0).is_err());
        assert!(TopicPartition::new("a".repeat(250), 0).is_err());
        assert!(TopicPartition::new("a".repeat(249), 0).is_ok());
        let e = TopicPartition::new("t", -1).unwrap_err();
        assert!(e.to_string().contains("negative"));
        assert_eq!(TopicPartition::new("t", 3).unwrap().to_string(), "t-3");
    }

    #[test]
    fn topic_id_display_matches_kafka() {
        assert!(TopicId::from_bytes([0; 16]).is_none());
        let id = TopicId::from_bytes([0xff; 16]).unwrap();
        assert_eq!(id.to_string(), "_____________________w");
    }
}
