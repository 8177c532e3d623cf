//! The mirror's idempotent producer state per target partition.
//!
//! Kafka deduplicates a batch whose (producer id, epoch, first and last sequence) equals one of
//! the last five it appended for the partition, and answers with the original offsets. A task
//! that restarted a target partition's sequence at 0 under a producer id that already wrote there
//! would therefore have its first batches silently dropped as "duplicates" (or refused as out of
//! order). So the sequence of a target partition outlives the task that writes it: a partition
//! revoked and assigned again continues where it stopped, and a second route writing into the
//! same target partition at the same time gets a producer id of its own.

use std::collections::HashMap;
use std::sync::Mutex;

use strait_wire::TopicPartition;

use crate::rewrite::ProducerStamp;

use super::io::ProducerIdentity;

/// A producer id and epoch and the next sequence of one target partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerSeq {
    pub(crate) identity: ProducerIdentity,
    pub(crate) next_sequence: i32,
    /// The target acknowledged a batch of this identity, so it holds producer state for it and
    /// refuses sequence gaps. Until then the target takes *any* sequence as the first, so a
    /// later batch would be appended ahead of an earlier one the target refused: only one batch
    /// may be in flight.
    pub(crate) confirmed: bool,
    /// Exactly-once: the batches belong to the identity's transactions (transactional bit set).
    pub(crate) transactional: bool,
}

impl ProducerSeq {
    /// A producer id that never wrote to the partition: its sequence starts at 0.
    pub(crate) fn fresh(identity: ProducerIdentity) -> Self {
        ProducerSeq {
            identity,
            next_sequence: 0,
            confirmed: false,
            transactional: false,
        }
    }

    /// A transactional producer's freshly initialized epoch: sequences start at 0.
    pub(crate) fn fresh_transactional(identity: ProducerIdentity) -> Self {
        ProducerSeq {
            transactional: true,
            ..Self::fresh(identity)
        }
    }

    /// The stamp for a batch of `records` records; the sequence advances past it (wrapping at
    /// `i32::MAX` as Kafka's does).
    pub(crate) fn stamp(&mut self, records: u32) -> ProducerStamp {
        let make = if self.transactional {
            ProducerStamp::transactional
        } else {
            ProducerStamp::idempotent
        };
        let stamp = make(
            self.identity.producer_id,
            self.identity.epoch,
            self.next_sequence,
        );
        self.next_sequence = stamp
            .advanced(i32::try_from(records).unwrap_or(i32::MAX))
            .base_sequence;
        stamp
    }
}

#[derive(Debug, Default)]
struct Entry {
    /// Sequences left by tasks that ended, ready to be continued.
    idle: Vec<ProducerSeq>,
    /// Whether the forwarder's own identity has been handed out for this partition.
    used: bool,
}

/// Producer sequences per target partition, shared by every task of a forwarder.
#[derive(Debug)]
pub(crate) struct Producers {
    identity: ProducerIdentity,
    partitions: Mutex<HashMap<TopicPartition, Entry>>,
}

impl Producers {
    pub(crate) fn new(identity: ProducerIdentity) -> Self {
        Producers {
            identity,
            partitions: Mutex::new(HashMap::new()),
        }
    }

    /// The sequence to continue for `target`, or `None` when another task is writing to it with
    /// every known producer id right now (the caller must get a producer id of its own).
    pub(crate) fn claim(&self, target: &TopicPartition) -> Option<ProducerSeq> {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let entry = partitions.entry(target.clone()).or_default();
        if let Some(seq) = entry.idle.pop() {
            return Some(seq);
        }
        if entry.used {
            return None;
        }
        entry.used = true;
        Some(ProducerSeq::fresh(self.identity))
    }

    /// Hands a task's sequence back when the task ends. Its next sequence is at or past every
    /// sequence the task sent, so continuing it can only leave a gap (refused, then renumbered
    /// under a new producer id), never repeat a sequence the broker would take for a duplicate.
    pub(crate) fn release(&self, target: &TopicPartition, seq: ProducerSeq) {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        partitions.entry(target.clone()).or_default().idle.push(seq);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(pid: i64) -> ProducerIdentity {
        ProducerIdentity {
            producer_id: pid,
            epoch: 0,
        }
    }

    #[test]
    fn a_reclaimed_partition_continues_its_sequence() {
        let producers = Producers::new(id(7));
        let tp = TopicPartition::new("t", 0).unwrap();
        let mut seq = producers.claim(&tp).unwrap();
        assert_eq!((seq.identity, seq.next_sequence), (id(7), 0));
        seq.stamp(10);
        // A second writer while the first one runs needs its own producer id.
        assert!(producers.claim(&tp).is_none());
        producers.release(&tp, seq);
        let again = producers.claim(&tp).unwrap();
        assert_eq!((again.identity, again.next_sequence), (id(7), 10));
        // Another partition starts at 0 with the shared identity.
        let other = producers
            .claim(&TopicPartition::new("t", 1).unwrap())
            .unwrap();
        assert_eq!(other.next_sequence, 0);
    }

    #[test]
    fn stamps_wrap_like_kafka() {
        let mut seq = ProducerSeq {
            identity: id(1),
            next_sequence: i32::MAX - 1,
            confirmed: true,
            transactional: false,
        };
        assert_eq!(seq.stamp(3).base_sequence, i32::MAX - 1);
        assert_eq!(seq.next_sequence, 1);
    }
}
