//! read_committed filtering: transaction markers and the aborted-transaction state machine.
//!
//! A read_committed fetch still returns the batches of aborted transactions, plus the list
//! `AbortedTransactions [(ProducerId, FirstOffset)]` for the returned range. The consumer-side
//! algorithm (Java's `CompletedFetch`), implemented by [`AbortedTransactionFilter`]:
//!
//! 1. keep the aborted list ordered by first offset;
//! 2. for each batch that has a producer id, move every entry with
//!    `first_offset <= batch.last_offset` into the set of aborted producers;
//! 3. a control batch carrying an ABORT marker removes its producer from that set (the aborted
//!    transaction ends there);
//! 4. otherwise a transactional batch whose producer is in the set is aborted data: drop it;
//! 5. control batches are never forwarded.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use crate::batch::{FetchedBatch, RecordBatch};
use crate::error::Result;

/// The type of a control record (the int16 after the version in its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    /// Type 0: the producer's transaction was aborted.
    Abort,
    /// Type 1: the producer's transaction was committed.
    Commit,
    /// Any other type (KRaft types 2-6 never appear in user topics; unknown future types).
    Other(i16),
}

/// A control record key: `version: int16, type: int16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControlRecord {
    /// Key version (0 today; newer versions are read as version 0, as Java does).
    pub version: i16,
    /// The marker type.
    pub kind: ControlRecordType,
}

impl ControlRecord {
    /// Parses a control record key. The error is a static description of what is wrong.
    pub fn parse(key: Option<&[u8]>) -> std::result::Result<Self, &'static str> {
        let key = key.ok_or("the control record has a null key")?;
        let [v0, v1, t0, t1, ..] = *key else {
            return Err("the control record key is shorter than 4 bytes");
        };
        let version = i16::from_be_bytes([v0, v1]);
        if version < 0 {
            return Err("the control record key version is negative");
        }
        let kind = match i16::from_be_bytes([t0, t1]) {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            other => ControlRecordType::Other(other),
        };
        Ok(ControlRecord { version, kind })
    }
}

/// One entry of a fetch response's AbortedTransactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbortedTransaction {
    /// The producer whose transaction was aborted.
    pub producer_id: i64,
    /// The first offset of the aborted transaction.
    pub first_offset: i64,
}

// The codec builds without the wire client (no tokio, no rustls), so it keeps its own copy of
// this two-field entry; the pipeline converts the wire client's on the way in.
#[cfg(feature = "pipeline")]
impl From<strait_wire::AbortedTransaction> for AbortedTransaction {
    fn from(a: strait_wire::AbortedTransaction) -> Self {
        AbortedTransaction {
            producer_id: a.producer_id,
            first_offset: a.first_offset,
        }
    }
}

/// The transactional facts about one batch that the filter needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TxnBatchInfo {
    /// producerId (-1 for none).
    pub producer_id: i64,
    /// The batch's last offset.
    pub last_offset: i64,
    /// Transactional attribute bit.
    pub transactional: bool,
    /// For a control batch, its marker type (`Some` means the batch is a control batch).
    pub control: Option<ControlRecordType>,
}

/// What to do with a batch under read_committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnDecision {
    /// Forward it.
    Keep,
    /// Data of an aborted transaction: drop it (its offsets are still consumed).
    DropAborted,
    /// A transaction marker: drop it (its offset is still consumed).
    DropControl,
}

impl TxnDecision {
    /// A stable snake_case name for metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            TxnDecision::Keep => "keep",
            TxnDecision::DropAborted => "drop_aborted",
            TxnDecision::DropControl => "drop_control",
        }
    }
}

/// The aborted-transaction filter for one partition's fetch response. Feed it every batch of
/// that response, in order.
///
/// ```
/// use strait_forward::txn::*;
/// let mut f = AbortedTransactionFilter::new([AbortedTransaction { producer_id: 7, first_offset: 10 }]);
/// let data = |pid, last| TxnBatchInfo { producer_id: pid, last_offset: last, transactional: true, control: None };
/// assert_eq!(f.classify(data(7, 5)), TxnDecision::Keep); // before the aborted transaction
/// assert_eq!(f.classify(data(7, 12)), TxnDecision::DropAborted);
/// assert_eq!(f.classify(data(8, 13)), TxnDecision::Keep); // another producer
/// let abort = TxnBatchInfo { control: Some(ControlRecordType::Abort), ..data(7, 14) };
/// assert_eq!(f.classify(abort), TxnDecision::DropControl);
/// assert_eq!(f.classify(data(7, 20)), TxnDecision::Keep); // the next transaction of pid 7
/// ```
#[derive(Clone, Debug, Default)]
pub struct AbortedTransactionFilter {
    /// Not yet reached, ordered by (first_offset, producer_id).
    pending: BinaryHeap<Reverse<(i64, i64)>>,
    /// Producers inside an aborted transaction at the current position.
    aborted: HashSet<i64>,
}

impl AbortedTransactionFilter {
    /// A filter from the response's AbortedTransactions (order does not matter).
    pub fn new(aborted: impl IntoIterator<Item = AbortedTransaction>) -> Self {
        AbortedTransactionFilter {
            pending: aborted
                .into_iter()
                .map(|a| Reverse((a.first_offset, a.producer_id)))
                .collect(),
            aborted: HashSet::new(),
        }
    }

    /// Decides about the next batch and advances the state.
    pub fn classify(&mut self, batch: TxnBatchInfo) -> TxnDecision {
        if batch.producer_id >= 0 {
            while let Some(Reverse((first, pid))) = self.pending.peek().copied() {
                if first > batch.last_offset {
                    break;
                }
                self.pending.pop();
                self.aborted.insert(pid);
            }
            if batch.control == Some(ControlRecordType::Abort) {
                self.aborted.remove(&batch.producer_id);
            } else if batch.transactional && self.aborted.contains(&batch.producer_id) {
                return TxnDecision::DropAborted;
            }
        }
        if batch.control.is_some() {
            TxnDecision::DropControl
        } else {
            TxnDecision::Keep
        }
    }

    /// [`classify`](Self::classify) for a v2 batch; reads the marker of a control batch.
    pub fn classify_batch(&mut self, batch: &RecordBatch) -> Result<TxnDecision> {
        let control = batch.control_record()?.map(|c| c.kind);
        Ok(self.classify(TxnBatchInfo {
            producer_id: batch.producer_id(),
            last_offset: batch.last_offset(),
            transactional: batch.is_transactional(),
            control,
        }))
    }

    /// [`classify_batch`](Self::classify_batch) for any fetched entry; legacy messages predate
    /// transactions and are always kept.
    pub fn classify_fetched(&mut self, batch: &FetchedBatch) -> Result<TxnDecision> {
        match batch {
            FetchedBatch::V2(b) => self.classify_batch(b),
            FetchedBatch::Legacy(_) => Ok(TxnDecision::Keep),
        }
    }

    /// Whether `producer_id` is currently inside an aborted transaction.
    pub fn is_aborted(&self, producer_id: i64) -> bool {
        self.aborted.contains(&producer_id)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn data(pid: i64, last: i64) -> TxnBatchInfo {
        TxnBatchInfo {
            producer_id: pid,
            last_offset: last,
            transactional: true,
            control: None,
        }
    }

    fn marker(pid: i64, offset: i64, kind: ControlRecordType) -> TxnBatchInfo {
        TxnBatchInfo {
            control: Some(kind),
            ..data(pid, offset)
        }
    }

    use ControlRecordType::{Abort, Commit};
    use TxnDecision::{DropAborted, DropControl, Keep};

    #[test]
    fn interleaved_producers_with_abort_and_commit() {
        // pid 1 aborts [0..], pid 2 commits, pid 3 aborts [5..], pid 1 starts a new (committed) txn.
        let mut f = AbortedTransactionFilter::new([
            AbortedTransaction {
                producer_id: 3,
                first_offset: 5,
            },
            AbortedTransaction {
                producer_id: 1,
                first_offset: 0,
            },
        ]);
        let steps = [
            (data(1, 1), DropAborted),
            (data(2, 3), Keep),
            (data(1, 4), DropAborted),
            (data(3, 5), DropAborted),
            (marker(1, 6, Abort), DropControl),
            (data(2, 7), Keep),
            (marker(2, 8, Commit), DropControl),
            (data(1, 9), Keep),
            (data(3, 10), DropAborted),
            (marker(3, 11, Abort), DropControl),
            (data(3, 12), Keep),
            (marker(1, 13, Commit), DropControl),
        ];
        for (i, (batch, want)) in steps.into_iter().enumerate() {
            assert_eq!(f.classify(batch), want, "step {i}: {batch:?}");
        }
        assert!(!f.is_aborted(1) && !f.is_aborted(3));
    }

    #[test]
    fn non_transactional_batches_of_an_aborted_producer_are_kept() {
        let mut f = AbortedTransactionFilter::new([AbortedTransaction {
            producer_id: 4,
            first_offset: 0,
        }]);
        let plain = TxnBatchInfo {
            transactional: false,
            ..data(4, 2)
        };
        assert_eq!(f.classify(plain), Keep);
        assert!(f.is_aborted(4));
        assert_eq!(f.classify(data(4, 3)), DropAborted);
    }

    #[test]
    fn entries_before_the_fetch_offset_apply_to_the_first_batch() {
        // The aborted transaction started before the fetched range (fetch from 100).
        let mut f = AbortedTransactionFilter::new([AbortedTransaction {
            producer_id: 9,
            first_offset: 40,
        }]);
        assert_eq!(f.classify(data(9, 105)), DropAborted);
    }

    #[test]
    fn batches_without_producer_id_do_not_consume_entries() {
        let mut f = AbortedTransactionFilter::new([AbortedTransaction {
            producer_id: 5,
            first_offset: 0,
        }]);
        let no_pid = TxnBatchInfo {
            producer_id: -1,
            last_offset: 3,
            transactional: false,
            control: None,
        };
        assert_eq!(f.classify(no_pid), Keep);
        assert!(!f.is_aborted(5));
        assert_eq!(f.classify(data(5, 4)), DropAborted);
    }

    #[test]
    fn second_aborted_transaction_of_the_same_producer() {
        let mut f = AbortedTransactionFilter::new([
            AbortedTransaction {
                producer_id: 1,
                first_offset: 0,
            },
            AbortedTransaction {
                producer_id: 1,
                first_offset: 10,
            },
        ]);
        assert_eq!(f.classify(data(1, 2)), DropAborted);
        assert_eq!(f.classify(marker(1, 3, Abort)), DropControl);
        assert_eq!(f.classify(data(1, 5)), Keep);
        assert_eq!(f.classify(marker(1, 6, Commit)), DropControl);
        assert_eq!(f.classify(data(1, 11)), DropAborted);
        assert_eq!(f.classify(marker(1, 12, Abort)), DropControl);
    }

    #[test]
    fn control_key_parsing() {
        assert_eq!(
            ControlRecord::parse(Some(&[0, 0, 0, 0])).unwrap(),
            ControlRecord {
                version: 0,
                kind: Abort
            }
        );
        assert_eq!(
            ControlRecord::parse(Some(&[0, 0, 0, 1, 9])).unwrap().kind,
            Commit
        );
        assert_eq!(
            ControlRecord::parse(Some(&[0, 3, 0, 5])).unwrap(),
            ControlRecord {
                version: 3,
                kind: ControlRecordType::Other(5)
            }
        );
        assert!(ControlRecord::parse(None).is_err());
        assert!(ControlRecord::parse(Some(&[0, 0, 0])).is_err());
        assert!(ControlRecord::parse(Some(&[0xff, 0xff, 0, 0])).is_err());
    }
}
