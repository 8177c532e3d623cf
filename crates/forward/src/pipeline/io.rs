//! The pipeline's view of the two clusters.
//!
//! The pipeline talks to Kafka only through these three traits, so its ordering, retry and
//! commit logic is deterministic and can be driven in memory by tests. [`super::kafka`]
//! implements them over `strait-wire`'s cluster clients.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use strait_wire::TopicPartition;

/// Which records a fetch may return: the wire client's `isolation.level`, under the name the
/// pipeline has always used. The pipeline's default is `ReadCommitted` (see
/// [`Settings`](super::Settings)): a mirror must never copy an aborted transaction.
pub use strait_wire::Isolation;
/// The target's answer for one partition of a Produce request, and the mirror's idempotent
/// producer identity on the target (`InitProducerId`): the wire client's types.
pub use strait_wire::{ProduceAck, ProducerIdentity};

use crate::txn::AbortedTransaction;

/// One fetch of one source partition.
#[derive(Debug, Clone)]
pub struct FetchSpec {
    /// The partition.
    pub partition: TopicPartition,
    /// First offset wanted.
    pub offset: i64,
    /// Byte limit for the partition (the broker still returns one whole first batch if larger).
    pub max_bytes: i32,
    /// How long the broker may wait for data.
    pub max_wait: Duration,
    /// Isolation level.
    pub isolation: Isolation,
}

/// What a fetch returned for the partition.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// The raw record batches, as the broker sent them (the last one may be truncated).
    pub records: Bytes,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// The last stable offset (read_committed), or -1 if unknown.
    pub last_stable_offset: i64,
    /// The log start offset, or -1 if unknown.
    pub log_start_offset: i64,
    /// Aborted transactions in the returned range.
    pub aborted: Vec<AbortedTransaction>,
}

/// Where to start a partition that has no committed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The oldest offset still in the log.
    #[default]
    Earliest,
    /// The end of the log: only records produced from now on.
    Latest,
    /// An explicit offset.
    Offset(i64),
}

/// Limits of a target topic that decide whether a batch can pass through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicLimits {
    /// `max.message.bytes`: the largest batch (including its 12-byte log overhead).
    pub max_message_bytes: usize,
    /// `cleanup.policy` contains `compact`: every record needs a key.
    pub compacted: bool,
}

impl Default for TopicLimits {
    fn default() -> Self {
        // Kafka's default max.message.bytes (1 MiB + 12).
        TopicLimits {
            max_message_bytes: 1_048_588,
            compacted: false,
        }
    }
}

/// What the pipeline does about a failed call: the decision taken from a cluster error (the
/// wire client's `ErrorClass` says what the error is; this says what to do about it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureAction {
    /// Try again after a backoff (leader moved, broker down, timeout, not enough replicas).
    Retriable,
    /// The fetch offset is outside the source log (retention deleted it, or truncation).
    OffsetOutOfRange,
    /// The target already has this batch (idempotent duplicate): count it as acknowledged.
    Duplicate,
    /// The target's producer state does not match our sequence: renumber under a new producer id.
    ProducerState,
    /// The batch is larger than the target accepts.
    TooLarge,
    /// An ACL denies the mirror (topic, cluster or group authorization): retried slowly until
    /// an operator grants the right, then the partition resumes by itself.
    Denied,
    /// Needs an operator (missing topic, invalid record, bad configuration...).
    Fatal,
    /// Exactly-once: a newer producer with the partition's transactional id took over (another
    /// instance owns the partition now, or the coordinator timed the transaction out). Nothing
    /// of the open transaction becomes visible.
    Fenced,
    /// Exactly-once: the open transaction can no longer commit; abort it and redo its work
    /// from the last committed position.
    Abortable,
}

/// A failed call, classified for the pipeline, with the broker's own error name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    /// What the pipeline should do.
    pub action: FailureAction,
    /// Kafka error name (`NOT_LEADER_OR_FOLLOWER`) or `disconnected`, `timeout`.
    pub code: String,
    /// Full message, including what to do about it.
    pub message: String,
}

impl IoError {
    /// A new error.
    pub fn new(action: FailureAction, code: impl Into<String>, message: impl Into<String>) -> Self {
        IoError {
            action,
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for IoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The source cluster, as the pipeline needs it.
pub trait Source: Send + Sync + 'static {
    /// Fetches one partition from its leader.
    fn fetch(&self, spec: &FetchSpec) -> impl Future<Output = Result<Fetched, IoError>> + Send;
    /// Resolves `Earliest`/`Latest` to an offset.
    fn resolve(
        &self,
        partition: &TopicPartition,
        start: StartPosition,
    ) -> impl Future<Output = Result<i64, IoError>> + Send;
}

/// The target cluster, as the pipeline needs it.
pub trait Target: Send + Sync + 'static {
    /// A fresh idempotent producer id and epoch.
    fn init_producer_id(&self) -> impl Future<Output = Result<ProducerIdentity, IoError>> + Send;
    /// The node leading `partition`; `refresh` forces a metadata refresh first.
    fn leader(
        &self,
        partition: &TopicPartition,
        refresh: bool,
    ) -> impl Future<Output = Result<i32, IoError>> + Send;
    /// One Produce request (acks=all) to `node` over its connection `lane` (0 to
    /// `Settings::produce_connections` - 1; a partition always uses the same one), at most one
    /// batch per partition. The answers are in the order of `batches` (whatever order the
    /// broker answered in). The outer error fails every partition of the request (disconnect,
    /// timeout). `transactional_id`: the request belongs to that producer's open transaction
    /// (every batch carries its id and epoch and the transactional bit).
    fn produce(
        &self,
        node: i32,
        lane: u16,
        batches: Vec<(TopicPartition, Bytes)>,
        transactional_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<Result<ProduceAck, IoError>>, IoError>> + Send;
    /// Limits of a target topic.
    fn topic_limits(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<TopicLimits, IoError>> + Send;

    /// The end of a target partition's log (its high watermark, read_uncommitted: aborted
    /// records and markers count). Exactly-once: above 0 with no stored position, the partition
    /// was written before and its position is gone.
    fn end_offset(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<i64, IoError>> + Send;

    /// Exactly-once: the transactional producer of one route.
    type Transactions: Transactions;

    /// Exactly-once: a transactional producer for `transactional_id`, not initialized yet.
    fn transactions(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<Self::Transactions, IoError>;

    /// Exactly-once: the positions committed in transactions to `group_id` on the target,
    /// keyed by target partition (`None`: nothing committed). Waits out transactions still
    /// completing (OffsetFetch `require_stable`).
    fn stable_positions(
        &self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = Result<Vec<Option<i64>>, IoError>> + Send;
}

/// Exactly-once: one route's transactional producer on the target.
///
/// A transaction holds the route's batches and the source position after them, stored as the
/// target partition's offset in a consumer group on the target: both become visible to
/// `read_committed` consumers together, or neither does.
pub trait Transactions: Send + 'static {
    /// (Re-)initializes: bumps the epoch of the transactional id, which aborts whatever an
    /// older producer with the id left open and fences it. Batches are stamped with the
    /// returned identity, sequences from 0.
    fn init(&mut self) -> impl Future<Output = Result<ProducerIdentity, IoError>> + Send;
    /// Opens a transaction if none is open and adds `partition` to it, and `group_id`, the
    /// group [`commit`](Self::commit) will store the position in (AddOffsetsToTxn now, while
    /// the transaction is open, so that the commit itself is TxnOffsetCommit + EndTxn). Must
    /// complete before a batch for the partition is produced.
    fn add_partition(
        &mut self,
        partition: &TopicPartition,
        group_id: &str,
    ) -> impl Future<Output = Result<(), IoError>> + Send;
    /// Stores `positions` (target partition, next source offset) in `group_id` inside the open
    /// transaction (opening one if needed) and commits it.
    fn commit(
        &mut self,
        group_id: &str,
        positions: &[(TopicPartition, i64)],
    ) -> impl Future<Output = Result<(), IoError>> + Send;
    /// Aborts the open transaction, if any.
    fn abort(&mut self) -> impl Future<Output = Result<(), IoError>> + Send;
}

/// For targets that cannot run transactions (every call fails as fatal).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTransactions;

fn no_transactions() -> IoError {
    IoError::new(
        FailureAction::Fatal,
        "unsupported",
        "this target does not support transactions; turn exactly-once off",
    )
}

impl Transactions for NoTransactions {
    async fn init(&mut self) -> Result<ProducerIdentity, IoError> {
        Err(no_transactions())
    }
    async fn add_partition(&mut self, _: &TopicPartition, _: &str) -> Result<(), IoError> {
        Err(no_transactions())
    }
    async fn commit(&mut self, _: &str, _: &[(TopicPartition, i64)]) -> Result<(), IoError> {
        Err(no_transactions())
    }
    async fn abort(&mut self) -> Result<(), IoError> {
        Err(no_transactions())
    }
}

/// Where source positions are stored (normally the source cluster's consumer group).
pub trait Positions: Send + Sync + 'static {
    /// The committed position of each partition, `None` if it has none.
    fn load(
        &self,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = Result<Vec<Option<i64>>, IoError>> + Send;
    /// Commits positions (the next offset to mirror, as Kafka consumers commit).
    fn commit(
        &self,
        positions: &[(TopicPartition, i64)],
    ) -> impl Future<Output = Result<(), IoError>> + Send;
    /// Exactly-once: runs before a route's transaction stores `next` as the position of
    /// `source` on the target and commits. The transaction commit is where exactly-once
    /// positions become durable, so whatever must be durable before them (the offset syncs
    /// mapping the records up to `next`) is written here. An error keeps the transaction open
    /// and the call is retried like the commit itself. Does nothing by default.
    fn before_transaction_commit(
        &self,
        source: &TopicPartition,
        next: i64,
    ) -> impl Future<Output = Result<(), IoError>> + Send {
        let _ = (source, next);
        std::future::ready(Ok(()))
    }
}
