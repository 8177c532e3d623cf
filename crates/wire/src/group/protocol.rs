//! The "consumer" embedded protocol: the bytes a classic-group member puts in JoinGroup
//! metadata (its subscription) and the bytes the leader puts in SyncGroup (each assignment).
//!
//! Both are `kafka-protocol` messages (`ConsumerProtocolSubscription` /
//! `ConsumerProtocolAssignment`) preceded by a big-endian i16 schema version. A reader that sees
//! a newer version than it knows decodes it as its newest one: the schemas only ever append
//! fields, so the prefix still parses (this is how every Kafka client reads them).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as OwnedTopic,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};

use super::assignor::PartitionSet;
use super::group_protocol_error;
use crate::error::Result;

/// The protocol type every Kafka consumer uses in JoinGroup.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Subscription schema version written (the newest kafka-protocol knows: adds rack id).
const SUBSCRIPTION_VERSION: i16 = 3;
/// Assignment schema version written. v1+ only differ by what the reader may do with them.
const ASSIGNMENT_VERSION: i16 = 3;

/// A member's subscription, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Subscription {
    pub topics: Vec<String>,
    pub owned: PartitionSet,
    pub generation_id: i32,
    pub rack_id: Option<String>,
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

pub(crate) fn encode_subscription(sub: &Subscription) -> Result<Bytes> {
    let owned = sub
        .owned
        .topics()
        .map(|(t, ps)| {
            OwnedTopic::default()
                .with_topic(topic_name(t))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect();
    let msg = ConsumerProtocolSubscription::default()
        .with_topics(
            sub.topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(owned)
        .with_generation_id(sub.generation_id)
        .with_rack_id(sub.rack_id.clone().map(StrBytes::from_string));
    encode_versioned(&msg, SUBSCRIPTION_VERSION, "subscription")
}

pub(crate) fn decode_subscription(bytes: &Bytes) -> Result<Subscription> {
    let (version, mut body) = split_version::<ConsumerProtocolSubscription>(bytes, "subscription")?;
    if Shape::new(&body).subscription(version).is_none() {
        return Err(group_protocol_error(format!(
            "a member's subscription (consumer protocol v{version}) is truncated or has impossible lengths"
        )));
    }
    let msg = ConsumerProtocolSubscription::decode(&mut body, version).map_err(|e| {
        group_protocol_error(format!(
            "a member's subscription (consumer protocol v{version}) does not decode: {e}"
        ))
    })?;
    let mut owned = PartitionSet::new();
    for t in &msg.owned_partitions {
        for p in &t.partitions {
            owned.insert(t.topic.as_str(), *p);
        }
    }
    Ok(Subscription {
        topics: msg.topics.iter().map(|t| t.as_str().to_owned()).collect(),
        owned,
        generation_id: msg.generation_id,
        rack_id: msg.rack_id.map(|r| r.as_str().to_owned()),
    })
}

pub(crate) fn encode_assignment(parts: &PartitionSet) -> Result<Bytes> {
    let assigned = parts
        .topics()
        .map(|(t, ps)| {
            AssignedTopic::default()
                .with_topic(topic_name(t))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect();
    let msg = ConsumerProtocolAssignment::default().with_assigned_partitions(assigned);
    encode_versioned(&msg, ASSIGNMENT_VERSION, "assignment")
}

/// Decodes an assignment; empty bytes (what the coordinator sends a member the leader gave
/// nothing) mean an empty assignment.
pub(crate) fn decode_assignment(bytes: &Bytes) -> Result<PartitionSet> {
    if bytes.is_empty() {
        return Ok(PartitionSet::new());
    }
    let (version, mut body) = split_version::<ConsumerProtocolAssignment>(bytes, "assignment")?;
    if Shape::new(&body).assignment().is_none() {
        return Err(group_protocol_error(format!(
            "the assignment from the group leader (consumer protocol v{version}) is truncated or has impossible lengths"
        )));
    }
    let msg = ConsumerProtocolAssignment::decode(&mut body, version).map_err(|e| {
        group_protocol_error(format!(
            "the assignment from the group leader (consumer protocol v{version}) does not decode: {e}"
        ))
    })?;
    let mut parts = PartitionSet::new();
    for t in &msg.assigned_partitions {
        for p in &t.partitions {
            if *p < 0 || t.topic.is_empty() {
                return Err(group_protocol_error(format!(
                    "the group leader assigned an invalid partition '{}'-{p}",
                    t.topic.as_str()
                )));
            }
            parts.insert(t.topic.as_str(), *p);
        }
    }
    Ok(parts)
}

fn encode_versioned<M: Encodable>(msg: &M, version: i16, what: &str) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version).map_err(|e| {
        group_protocol_error(format!("cannot encode the consumer-protocol {what}: {e}"))
    })?;
    Ok(buf.freeze())
}

/// Reads the version prefix; newer-than-known versions are read as the newest known one.
fn split_version<M: Message>(bytes: &Bytes, what: &str) -> Result<(i16, Bytes)> {
    let mut body = bytes.clone();
    if body.remaining() < 2 {
        return Err(group_protocol_error(format!(
            "a consumer-protocol {what} of {} bytes is too short for its version header",
            bytes.len()
        )));
    }
    let version = body.get_i16();
    if version < M::VERSIONS.min {
        return Err(group_protocol_error(format!(
            "a consumer-protocol {what} has unsupported version {version}"
        )));
    }
    Ok((version.min(M::VERSIONS.max), body))
}

/// Walks the schema checking every length against the bytes left, before kafka-protocol
/// decodes it: its decoder pre-allocates arrays by their declared count, so a peer's
/// `0x7fffffff` would otherwise make this process allocate gigabytes.
struct Shape<'a> {
    rest: &'a [u8],
}

impl<'a> Shape<'a> {
    fn new(bytes: &'a [u8]) -> Shape<'a> {
        Shape { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        let b = self.take(2)?;
        Some(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        let b = self.take(4)?;
        Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A (nullable) STRING: i16 length, -1 = null.
    fn string(&mut self) -> Option<()> {
        match self.i16()? {
            -1 => Some(()),
            n => self.take(usize::try_from(n).ok()?).map(drop),
        }
    }

    /// A (nullable) BYTES: i32 length, -1 = null.
    fn bytes(&mut self) -> Option<()> {
        match self.i32()? {
            -1 => Some(()),
            n => self.take(usize::try_from(n).ok()?).map(drop),
        }
    }

    /// An ARRAY whose elements take at least `min_size` bytes each.
    fn array(
        &mut self,
        min_size: usize,
        mut element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        let n = self.i32()?;
        if n == -1 {
            return Some(());
        }
        let n = usize::try_from(n).ok()?;
        if n.checked_mul(min_size)? > self.rest.len() {
            return None;
        }
        (0..n).try_for_each(|_| element(self))
    }

    /// [topic STRING, partitions ARRAY(INT32)]
    fn topic_partitions(&mut self) -> Option<()> {
        self.array(6, |s| {
            s.string()?;
            s.array(4, |s| s.i32().map(drop))
        })
    }

    fn subscription(mut self, version: i16) -> Option<()> {
        self.array(2, Shape::string)?;
        self.bytes()?;
        if version >= 1 {
            self.topic_partitions()?;
        }
        if version >= 2 {
            self.i32()?;
        }
        if version >= 3 {
            self.string()?;
        }
        Some(())
    }

    fn assignment(mut self) -> Option<()> {
        self.topic_partitions()?;
        self.bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn subscription_round_trip() {
        let sub = Subscription {
            topics: vec!["a".into(), "b".into()],
            owned: [("a", 1), ("a", 0)].into_iter().collect(),
            generation_id: 7,
            rack_id: Some("rack-1".into()),
        };
        let bytes = encode_subscription(&sub).unwrap();
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(decode_subscription(&bytes).unwrap(), sub);
    }

    #[test]
    fn subscription_v0_as_written_by_old_clients() {
        // version 0, topics ["t"], user_data null
        let bytes = Bytes::from_static(&[0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff]);
        let sub = decode_subscription(&bytes).unwrap();
        assert_eq!(sub.topics, vec!["t".to_owned()]);
        assert!(sub.owned.is_empty());
        assert_eq!(sub.generation_id, -1);
    }

    #[test]
    fn newer_versions_decode_as_the_newest_known() {
        let sub = Subscription {
            topics: vec!["t".into()],
            ..Subscription::default()
        };
        let bytes = encode_subscription(&sub).unwrap();
        let mut newer = BytesMut::from(&bytes[..]);
        newer[1] = 9; // version 9 with an unknown trailing field
        newer.put_i32(1234);
        assert_eq!(
            decode_subscription(&newer.freeze()).unwrap().topics,
            sub.topics
        );
    }

    #[test]
    fn assignment_round_trip_and_empty() {
        let parts: PartitionSet = [("t", 2), ("t", 0), ("u", 5)].into_iter().collect();
        let bytes = encode_assignment(&parts).unwrap();
        assert_eq!(decode_assignment(&bytes).unwrap(), parts);
        assert!(decode_assignment(&Bytes::new()).unwrap().is_empty());
        assert!(
            decode_assignment(&encode_assignment(&PartitionSet::new()).unwrap())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn huge_declared_counts_are_refused_before_allocating() {
        // v3, topics array of i32::MAX elements, nothing behind it.
        let sub = Bytes::from_static(&[0, 3, 0x7f, 0xff, 0xff, 0xff]);
        assert!(decode_subscription(&sub).is_err());
        // v1 assignment: one topic "t" with i32::MAX partitions.
        let asg = Bytes::from_static(&[0, 1, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff]);
        assert!(decode_assignment(&asg).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &[0u8][..],
            &[0, 0, 0, 0, 0, 5],
            &[0xff, 0xff, 0, 0],
            &[0, 1, 0xff, 0xff, 0xff],
        ] {
            let b = Bytes::copy_from_slice(bad);
            assert!(decode_subscription(&b).is_err(), "{bad:?}");
            assert!(decode_assignment(&b).is_err(), "{bad:?}");
        }
    }
}
