//! The transactional producer's protocol as a deterministic state machine, with no I/O.
//!
//! [`TxnMachine`] decides what to send next ([`TxnMachine::poll`] gives a [`TxnRequest`]) and
//! what an answer means ([`TxnMachine::on_reply`], [`TxnMachine::on_produce_error`]); the time
//! is passed in, so every transition is unit tested in memory. The async driver that sends the
//! requests is [`TransactionalProducer`](crate::TransactionalProducer).
//!
//! ```text
//! Uninitialized --FindCoordinator(key type 1), InitProducerId--> Ready
//! Ready --begin--> InTransaction --AddPartitionsToTxn / AddOffsetsToTxn + TxnOffsetCommit--> InTransaction
//! InTransaction --commit: EndTxn(commit)--> Committing --> Ready
//! InTransaction --abort:  EndTxn(abort)---> Aborting   --> Ready (or Uninitialized: re-init)
//! InTransaction --abortable error / transaction.timeout.ms passed--> AbortRequired --abort--> Aborting
//! any --PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ...--> Fatal
//! ```
//!
//! This is Kafka's first transaction protocol (the one every broker since 0.11 speaks, and
//! Kafka 4's brokers keep for clients that do not use KIP-890's second one): partitions are
//! added explicitly before the first batch is produced to them, the offsets' group with
//! AddOffsetsToTxn before TxnOffsetCommit, and the epoch stays the same from one transaction to
//! the next until a re-initialization bumps it.
//!
//! Errors are classified by [`classify`] (Kafka's semantics):
//! - CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS and other retriable errors: the
//!   request is retried (by the driver's retry helper; if that gives up, the same request is sent
//!   again on the next call), NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE after looking the
//!   coordinator up again.
//! - PRODUCER_FENCED, INVALID_PRODUCER_EPOCH from the coordinator (KIP-588),
//!   TRANSACTIONAL_ID_AUTHORIZATION_FAILED and other unrecoverable errors: [`TxnState::Fatal`].
//! - A failed batch, INVALID_TXN_STATE, TRANSACTION_ABORTABLE, a denied topic or group, a group
//!   generation that moved on (KIP-447), or the transaction running past
//!   `transaction.timeout.ms`: [`TxnState::AbortRequired`]; after the abort the producer re-inits
//!   (InitProducerId, a new epoch, sequences from 0) when the partitions' producer state may be
//!   out of step with the batches sent.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;

use crate::error::{Error, ErrorClass, TxnFailure, error_name};
use crate::group::Generation;
use crate::group::coordinator::is_coordinator_error;
use crate::offset_commit::CommitOffset;
use crate::producer_id::ProducerIdentity;
use crate::topic::TopicPartition;

/// Where a transactional producer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TxnState {
    /// No producer id yet, or a re-initialization (epoch bump) is due: the next step is
    /// FindCoordinator, then InitProducerId.
    Uninitialized,
    /// Initialized, no transaction open: [`begin`](TxnMachine::begin) may start one.
    Ready,
    /// A transaction is open: partitions and offsets may be added, batches produced.
    InTransaction,
    /// EndTxn(commit) sent or to be sent (again, after a retriable failure).
    Committing,
    /// The transaction cannot commit any more; only [`abort`](TxnMachine::abort) is allowed.
    AbortRequired,
    /// EndTxn(abort) sent or to be sent (again).
    Aborting,
    /// Fenced by a newer producer with the same transactional id, denied, or otherwise
    /// unusable: every call fails with the error that caused it.
    Fatal,
}

/// The requests of the transaction protocol, as the machine asks for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRequest {
    /// Look up the transaction coordinator of the transactional id again (FindCoordinator with
    /// key type 1, TRANSACTION).
    FindCoordinator,
    /// InitProducerId for the transactional id: a producer id and a bumped epoch; aborts a
    /// transaction an older producer with the same id left open, and fences that producer.
    InitProducerId {
        /// `transaction.timeout.ms`.
        transaction_timeout_ms: i32,
    },
    /// AddPartitionsToTxn: every partition not yet in the transaction, in one request.
    AddPartitionsToTxn {
        /// The producer id and epoch.
        identity: ProducerIdentity,
        /// The partitions to add.
        partitions: Vec<TopicPartition>,
    },
    /// AddOffsetsToTxn: the consumer group whose offsets the transaction commits.
    AddOffsetsToTxn {
        /// The producer id and epoch.
        identity: ProducerIdentity,
        /// The group id.
        group_id: String,
    },
    /// TxnOffsetCommit to the group's coordinator (not the transaction coordinator).
    TxnOffsetCommit {
        /// The producer id and epoch.
        identity: ProducerIdentity,
        /// The group id.
        group_id: String,
        /// The member and generation the offsets are committed as (KIP-447: the coordinator
        /// refuses a zombie whose generation is over), or [`Generation::simple`].
        generation: Generation,
        /// The offsets (next offset to read per partition).
        offsets: Vec<CommitOffset>,
    },
    /// EndTxn: commit or abort.
    EndTxn {
        /// The producer id and epoch.
        identity: ProducerIdentity,
        /// `true` to commit, `false` to abort.
        commit: bool,
    },
}

impl TxnRequest {
    /// The API, for classification and messages.
    pub fn api(&self) -> TxnApi {
        match self {
            TxnRequest::FindCoordinator => TxnApi::FindCoordinator,
            TxnRequest::InitProducerId { .. } => TxnApi::InitProducerId,
            TxnRequest::AddPartitionsToTxn { .. } => TxnApi::AddPartitionsToTxn,
            TxnRequest::AddOffsetsToTxn { .. } => TxnApi::AddOffsetsToTxn,
            TxnRequest::TxnOffsetCommit { .. } => TxnApi::TxnOffsetCommit,
            TxnRequest::EndTxn { .. } => TxnApi::EndTxn,
        }
    }
}

/// A successful answer to a [`TxnRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnReply {
    /// FindCoordinator found the coordinator.
    CoordinatorFound,
    /// InitProducerId gave this producer id and epoch.
    ProducerId(ProducerIdentity),
    /// AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit or EndTxn succeeded.
    Done,
}

/// The APIs a transactional producer uses (Produce included), for [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnApi {
    /// FindCoordinator (key type TRANSACTION).
    FindCoordinator,
    /// InitProducerId.
    InitProducerId,
    /// AddPartitionsToTxn.
    AddPartitionsToTxn,
    /// AddOffsetsToTxn.
    AddOffsetsToTxn,
    /// TxnOffsetCommit.
    TxnOffsetCommit,
    /// EndTxn.
    EndTxn,
    /// Produce of a transactional batch.
    Produce,
}

impl TxnApi {
    /// Kafka's name of the API.
    pub fn name(self) -> &'static str {
        match self {
            TxnApi::FindCoordinator => "FindCoordinator",
            TxnApi::InitProducerId => "InitProducerId",
            TxnApi::AddPartitionsToTxn => "AddPartitionsToTxn",
            TxnApi::AddOffsetsToTxn => "AddOffsetsToTxn",
            TxnApi::TxnOffsetCommit => "TxnOffsetCommit",
            TxnApi::EndTxn => "EndTxn",
            TxnApi::Produce => "Produce",
        }
    }
}

/// What an error means for a transactional producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnErrorKind {
    /// Send the same request again (after looking the transaction coordinator up again when
    /// `rediscover`).
    Retry {
        /// The coordinator moved or is not available.
        rediscover: bool,
    },
    /// The transaction cannot commit: abort it; then re-initialize (epoch bump) when `reinit`.
    Abortable {
        /// Whether a new epoch is needed after the abort.
        reinit: bool,
    },
    /// A newer producer with the same transactional id took over: stop.
    Fenced,
    /// Nothing this producer can do helps (denied, misconfigured, unsupported).
    Fatal,
}

/// How a transactional producer handles `error` from `api` (Kafka's semantics; see the module
/// documentation).
pub fn classify(api: TxnApi, error: &Error) -> TxnErrorKind {
    use ResponseError as E;
    if let Error::Transaction { failure, .. } = error {
        return match failure {
            TxnFailure::Fenced => TxnErrorKind::Fenced,
            TxnFailure::Abortable => TxnErrorKind::Abortable { reinit: true },
        };
    }
    // The batch is refused or may be half-written: its sequence leaves the partition's producer
    // state uncertain, so the next transaction starts a new epoch (sequences from 0).
    let after_produce = TxnErrorKind::Abortable { reinit: true };
    let Some(code) = error.code() else {
        return if error.is_retriable() {
            match api {
                TxnApi::Produce => after_produce,
                _ => TxnErrorKind::Retry {
                    rediscover: is_coordinator_error(error),
                },
            }
        } else if api == TxnApi::Produce {
            // A batch rejected as a whole (RecordsRejected carries a code; this is e.g. a
            // protocol error): the transaction cannot commit it.
            after_produce
        } else {
            TxnErrorKind::Fatal
        };
    };
    match code {
        E::ProducerFenced => TxnErrorKind::Fenced,
        // From a partition leader it may only mean the coordinator bumped the epoch when it
        // aborted a timed-out transaction: abort (which is fenced if a newer producer exists).
        // From the coordinator it is a fence (KIP-588).
        E::InvalidProducerEpoch if api == TxnApi::Produce => after_produce,
        E::InvalidProducerEpoch => TxnErrorKind::Fenced,
        E::TransactionalIdAuthorizationFailed | E::ClusterAuthorizationFailed => {
            TxnErrorKind::Fatal
        }
        E::InvalidTxnState => TxnErrorKind::Abortable { reinit: true },
        E::TransactionAbortable => TxnErrorKind::Abortable {
            reinit: api == TxnApi::Produce,
        },
        E::ConcurrentTransactions | E::CoordinatorLoadInProgress => {
            TxnErrorKind::Retry { rediscover: false }
        }
        E::NotCoordinator | E::CoordinatorNotAvailable => TxnErrorKind::Retry { rediscover: true },
        E::IllegalGeneration
        | E::UnknownMemberId
        | E::FencedInstanceId
        | E::RebalanceInProgress
            if api == TxnApi::TxnOffsetCommit =>
        {
            TxnErrorKind::Abortable { reinit: false }
        }
        E::TopicAuthorizationFailed | E::GroupAuthorizationFailed => match api {
            TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::TxnOffsetCommit => {
                TxnErrorKind::Abortable { reinit: false }
            }
            TxnApi::Produce => after_produce,
            _ => TxnErrorKind::Fatal,
        },
        E::InvalidTransactionTimeout
        | E::UnsupportedVersion
        | E::UnsupportedForMessageFormat
        | E::InvalidProducerIdMapping
        | E::InvalidRequest => TxnErrorKind::Fatal,
        _ if api == TxnApi::Produce => after_produce,
        _ if ErrorClass::of(code).is_retriable() => TxnErrorKind::Retry {
            rediscover: ErrorClass::of(code) == ErrorClass::Coordinator,
        },
        _ => match api {
            TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::TxnOffsetCommit => {
                TxnErrorKind::Abortable { reinit: false }
            }
            _ => TxnErrorKind::Fatal,
        },
    }
}

/// The wait before a transaction's first AddPartitionsToTxn or AddOffsetsToTxn is sent again
/// after CONCURRENT_TRANSACTIONS, instead of the client's retry backoff (`retry.backoff.ms`, 100
/// ms doubling to 1 s). The coordinator answers so while the previous transaction of the id is
/// still writing its markers, which takes milliseconds; a producer that commits every few
/// hundred ms and opens the next transaction at once meets it after nearly every commit, and the
/// long backoff held each of those transactions (measured: docs/exactly-once.md). Java's producer
/// waits 20 ms there too (KAFKA-5477).
pub const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = Duration::from_millis(20);

/// How many times in a row [`TxnMachine::quick_retry`] asks for the short wait before the
/// client's retry backoff takes over (about 1 s of short waits).
pub const CONCURRENT_TRANSACTIONS_QUICK_RETRIES: u32 = 50;

/// What the machine wants next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnStep {
    /// Send this request and report the outcome with [`TxnMachine::on_reply`].
    Send(TxnRequest),
    /// Nothing to send: what was asked is done.
    Idle,
}

/// The offsets a transaction still has to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingOffsets {
    group_id: String,
    generation: Generation,
    offsets: Vec<CommitOffset>,
}

/// The transaction protocol of one transactional id, without I/O (see the module docs).
#[derive(Debug, Clone)]
pub struct TxnMachine {
    transactional_id: String,
    timeout: Duration,
    state: TxnState,
    identity: Option<ProducerIdentity>,
    coordinator_known: bool,
    in_flight: Option<TxnRequest>,
    /// Partitions in the open transaction.
    partitions: BTreeSet<TopicPartition>,
    /// Partitions asked for and not added yet.
    pending_partitions: BTreeSet<TopicPartition>,
    /// Groups added with AddOffsetsToTxn in the open transaction.
    groups: BTreeSet<String>,
    /// A group asked for with [`add_group`](TxnMachine::add_group), not added yet.
    pending_group: Option<String>,
    pending_offsets: Option<PendingOffsets>,
    /// When the open transaction passes `transaction.timeout.ms`.
    deadline: Option<Instant>,
    /// Re-initialize (new epoch) once the transaction is aborted.
    reinit: bool,
    /// Why the transaction has to be aborted.
    abort_cause: Option<Error>,
    /// Why the producer is unusable.
    fatal: Option<Error>,
}

impl TxnMachine {
    /// A machine for `transactional_id` with `transaction.timeout.ms` = `timeout`.
    pub fn new(transactional_id: &str, timeout: Duration) -> Result<TxnMachine, Error> {
        if transactional_id.is_empty() {
            return Err(Error::InvalidArgument(
                "a transactional id must not be empty".into(),
            ));
        }
        if timeout.is_zero() || timeout.as_millis() > i32::MAX as u128 {
            return Err(Error::InvalidArgument(format!(
                "transaction timeout {timeout:?} is out of range: use 1 ms .. {} ms (and at most \
                 the brokers' transaction.max.timeout.ms, 15 minutes by default)",
                i32::MAX
            )));
        }
        Ok(TxnMachine {
            transactional_id: transactional_id.to_owned(),
            timeout,
            state: TxnState::Uninitialized,
            identity: None,
            coordinator_known: false,
            in_flight: None,
            partitions: BTreeSet::new(),
            pending_partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            pending_group: None,
            pending_offsets: None,
            deadline: None,
            reinit: false,
            abort_cause: None,
            fatal: None,
        })
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// `transaction.timeout.ms`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The current state.
    pub fn state(&self) -> TxnState {
        self.state
    }

    /// The producer id and epoch to stamp on batches (with the transactional attribute bit), once
    /// initialized. It changes after a re-initialization: sequences then restart at 0.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        self.identity
    }

    /// The partitions added to the open transaction.
    pub fn partitions(&self) -> &BTreeSet<TopicPartition> {
        &self.partitions
    }

    /// Whether `tp` is in the open transaction (batches may be produced to it).
    pub fn has_partition(&self, tp: &TopicPartition) -> bool {
        self.partitions.contains(tp)
    }

    /// The error that made the producer unusable, in [`TxnState::Fatal`].
    pub fn fatal_error(&self) -> Option<&Error> {
        self.fatal.as_ref()
    }

    /// Asks for (re-)initialization: InitProducerId bumps the epoch, which aborts whatever an
    /// older producer with the same transactional id left open and fences it. Allowed when no
    /// transaction is open.
    pub fn init(&mut self, now: Instant) -> Result<(), Error> {
        self.check(now)?;
        match self.state {
            TxnState::Uninitialized | TxnState::Ready => {
                self.state = TxnState::Uninitialized;
                Ok(())
            }
            _ => Err(self.misuse("init", "abort or commit the open transaction first")),
        }
    }

    /// Opens a transaction at `now`; it must end within the transaction timeout.
    pub fn begin(&mut self, now: Instant) -> Result<(), Error> {
        self.check(now)?;
        match self.state {
            TxnState::Ready => {
                self.clear_transaction();
                self.state = TxnState::InTransaction;
                self.deadline = Some(now + self.timeout);
                Ok(())
            }
            TxnState::Uninitialized => Err(self.misuse("begin", "initialize first")),
            _ => Err(self.misuse("begin", "end the open transaction first")),
        }
    }

    /// Asks for `partitions` to be added to the open transaction (those already in it are
    /// skipped; the rest go in one AddPartitionsToTxn).
    pub fn add_partitions<'a>(
        &mut self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
        now: Instant,
    ) -> Result<(), Error> {
        self.in_transaction("add partitions", now)?;
        for tp in partitions {
            if !self.partitions.contains(tp) {
                self.pending_partitions.insert(tp.clone());
            }
        }
        Ok(())
    }

    /// Asks for `group_id` to be added to the open transaction now (AddOffsetsToTxn), before
    /// its offsets are known: a producer that commits offsets at the end of every transaction
    /// then sends only TxnOffsetCommit and EndTxn when it commits, one round trip to the
    /// coordinator fewer while its partitions wait. Skipped if the group is in it already.
    pub fn add_group(&mut self, group_id: &str, now: Instant) -> Result<(), Error> {
        self.in_transaction("add a group", now)?;
        if group_id.is_empty() {
            return Err(Error::InvalidArgument(
                "a group id must not be empty".into(),
            ));
        }
        if !self.groups.contains(group_id) {
            self.pending_group = Some(group_id.to_owned());
        }
        Ok(())
    }

    /// Asks for `offsets` of `group_id` to be committed in the open transaction (AddOffsetsToTxn
    /// for the group if it is new to the transaction, then TxnOffsetCommit as `generation`).
    pub fn send_offsets(
        &mut self,
        group_id: &str,
        generation: &Generation,
        offsets: &[CommitOffset],
        now: Instant,
    ) -> Result<(), Error> {
        self.in_transaction("send offsets", now)?;
        if group_id.is_empty() {
            return Err(Error::InvalidArgument(
                "a group id must not be empty".into(),
            ));
        }
        if let Some(bad) = offsets.iter().find(|o| o.offset < 0) {
            return Err(Error::InvalidArgument(format!(
                "cannot commit offset {} for {}: offsets are >= 0",
                bad.offset, bad.partition
            )));
        }
        if let Some(p) = &self.pending_offsets
            && p.group_id != group_id
        {
            return Err(self.misuse(
                "send offsets",
                "the offsets of another group are not committed yet; send them again first",
            ));
        }
        self.pending_offsets = Some(PendingOffsets {
            group_id: group_id.to_owned(),
            generation: generation.clone(),
            offsets: offsets.to_vec(),
        });
        Ok(())
    }

    /// Asks for the open transaction to be committed (EndTxn(commit)). Also the way to retry a
    /// commit whose EndTxn failed with a retriable error.
    pub fn commit(&mut self, now: Instant) -> Result<(), Error> {
        self.check(now)?;
        match self.state {
            TxnState::InTransaction => {
                if self.pending_offsets.is_some() {
                    return Err(self.misuse(
                        "commit",
                        "its offsets are not committed yet: send them again (or abort)",
                    ));
                }
                // Nothing was produced to partitions that never got added (nor committed to
                // a group that never got added).
                self.pending_partitions.clear();
                self.pending_group = None;
                self.state = TxnState::Committing;
                Ok(())
            }
            TxnState::Committing => Ok(()),
            TxnState::AbortRequired => Err(self.abort_required()),
            _ => Err(self.misuse("commit", "begin a transaction first")),
        }
    }

    /// Asks for the open transaction to be aborted (EndTxn(abort)); in [`TxnState::Ready`]
    /// there is nothing to abort.
    pub fn abort(&mut self, now: Instant) -> Result<(), Error> {
        self.check(now)?;
        match self.state {
            TxnState::InTransaction | TxnState::AbortRequired | TxnState::Aborting => {
                self.pending_partitions.clear();
                self.pending_group = None;
                self.pending_offsets = None;
                self.state = TxnState::Aborting;
                Ok(())
            }
            TxnState::Ready => Ok(()),
            TxnState::Committing => Err(self.misuse(
                "abort",
                "its commit may have reached the coordinator; retry the commit",
            )),
            _ => Err(self.misuse("abort", "no transaction is open")),
        }
    }

    /// The next request to send, or [`TxnStep::Idle`] when what was asked is done. Fails in
    /// [`TxnState::Fatal`]. Calling it again before [`on_reply`](Self::on_reply) gives the same
    /// request.
    pub fn poll(&mut self, now: Instant) -> Result<TxnStep, Error> {
        self.check(now)?;
        if let Some(req) = &self.in_flight {
            return Ok(TxnStep::Send(req.clone()));
        }
        let needs_coordinator = !matches!(
            self.state,
            TxnState::Ready | TxnState::AbortRequired | TxnState::InTransaction
        ) || !self.pending_partitions.is_empty()
            || self
                .pending_group
                .as_ref()
                .is_some_and(|g| !self.groups.contains(g))
            || self
                .pending_offsets
                .as_ref()
                .is_some_and(|p| !self.groups.contains(&p.group_id));
        let req = if needs_coordinator && !self.coordinator_known {
            Some(TxnRequest::FindCoordinator)
        } else {
            self.next_request()
        };
        match req {
            Some(req) => {
                self.in_flight = Some(req.clone());
                Ok(TxnStep::Send(req))
            }
            None => Ok(TxnStep::Idle),
        }
    }

    fn next_request(&self) -> Option<TxnRequest> {
        let identity = self.identity;
        match (self.state, identity) {
            (TxnState::Uninitialized, _) => Some(TxnRequest::InitProducerId {
                transaction_timeout_ms: i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX),
            }),
            (TxnState::InTransaction, Some(identity)) => {
                if !self.pending_partitions.is_empty() {
                    Some(TxnRequest::AddPartitionsToTxn {
                        identity,
                        partitions: self.pending_partitions.iter().cloned().collect(),
                    })
                } else if let Some(group_id) = self
                    .pending_group
                    .as_ref()
                    .filter(|g| !self.groups.contains(*g))
                {
                    Some(TxnRequest::AddOffsetsToTxn {
                        identity,
                        group_id: group_id.clone(),
                    })
                } else {
                    self.pending_offsets.as_ref().map(|p| {
                        if self.groups.contains(&p.group_id) {
                            TxnRequest::TxnOffsetCommit {
                                identity,
                                group_id: p.group_id.clone(),
                                generation: p.generation.clone(),
                                offsets: p.offsets.clone(),
                            }
                        } else {
                            TxnRequest::AddOffsetsToTxn {
                                identity,
                                group_id: p.group_id.clone(),
                            }
                        }
                    })
                }
            }
            (TxnState::Committing, Some(identity)) => Some(TxnRequest::EndTxn {
                identity,
                commit: true,
            }),
            (TxnState::Aborting, Some(identity)) => Some(TxnRequest::EndTxn {
                identity,
                commit: false,
            }),
            _ => None,
        }
    }

    /// The short wait before `req` (the request [`poll`](Self::poll) gave) is sent again after
    /// `error`, when the client's retry backoff would be too long: CONCURRENT_TRANSACTIONS to the
    /// first AddPartitionsToTxn or AddOffsetsToTxn of a transaction, which means the previous
    /// transaction's markers are still being written ([`CONCURRENT_TRANSACTIONS_BACKOFF`]).
    /// `None`: retry as any other retriable error (or not at all).
    pub fn quick_retry(&self, req: &TxnRequest, error: &Error) -> Option<Duration> {
        let opening = self.state == TxnState::InTransaction
            && self.partitions.is_empty()
            && self.groups.is_empty();
        let adds = matches!(
            req,
            TxnRequest::AddPartitionsToTxn { .. } | TxnRequest::AddOffsetsToTxn { .. }
        );
        (opening && adds && error.code() == Some(ResponseError::ConcurrentTransactions))
            .then_some(CONCURRENT_TRANSACTIONS_BACKOFF)
    }

    /// Reports the outcome of the request [`poll`](Self::poll) gave. `Ok` if the state moved
    /// on as hoped; otherwise the error to report to the caller, after the state changed as the
    /// error's class says ([`classify`]).
    pub fn on_reply(
        &mut self,
        outcome: Result<TxnReply, Error>,
        now: Instant,
    ) -> Result<(), Error> {
        let Some(req) = self.in_flight.take() else {
            return Err(Error::InvalidArgument(
                "a transaction reply came with no request in flight (a bug in the caller)".into(),
            ));
        };
        let reply = match outcome {
            Ok(reply) => reply,
            Err(e) => return Err(self.on_error(&req, e, now)),
        };
        match (req, reply) {
            (TxnRequest::FindCoordinator, TxnReply::CoordinatorFound) => {
                self.coordinator_known = true;
            }
            (TxnRequest::InitProducerId { .. }, TxnReply::ProducerId(identity)) => {
                self.identity = Some(identity);
                self.clear_transaction();
                self.reinit = false;
                self.abort_cause = None;
                self.state = TxnState::Ready;
            }
            (TxnRequest::AddPartitionsToTxn { partitions, .. }, TxnReply::Done) => {
                for tp in partitions {
                    self.pending_partitions.remove(&tp);
                    self.partitions.insert(tp);
                }
            }
            (TxnRequest::AddOffsetsToTxn { group_id, .. }, TxnReply::Done) => {
                if self.pending_group.as_ref() == Some(&group_id) {
                    self.pending_group = None;
                }
                self.groups.insert(group_id);
            }
            (TxnRequest::TxnOffsetCommit { .. }, TxnReply::Done) => {
                self.pending_offsets = None;
            }
            (TxnRequest::EndTxn { .. }, TxnReply::Done) => self.ended(),
            (req, reply) => {
                return Err(Error::InvalidArgument(format!(
                    "{reply:?} does not answer {} (a bug in the caller)",
                    req.api().name()
                )));
            }
        }
        // A timeout that passed while the request was out.
        self.check(now)
    }

    /// Reports that a batch produced in the open transaction failed (after the produce path's
    /// own retries). Returns the error to report: the transaction must now be aborted, or the
    /// producer was fenced.
    pub fn on_produce_error(&mut self, error: Error, now: Instant) -> Error {
        if let Err(fatal) = self.check(now) {
            return fatal;
        }
        let kind = classify(TxnApi::Produce, &error);
        self.apply(TxnApi::Produce, kind, error, now)
    }

    fn on_error(&mut self, req: &TxnRequest, error: Error, now: Instant) -> Error {
        if let Err(fatal) = self.check(now) {
            return fatal;
        }
        let api = req.api();
        let kind = classify(api, &error);
        if let TxnErrorKind::Retry { rediscover } = kind {
            // The request stays pending: the next poll sends it again.
            if rediscover || api == TxnApi::FindCoordinator {
                self.coordinator_known = false;
            }
            return error;
        }
        // Denied before the producer has an epoch (no transactional-id or cluster ACL yet):
        // nothing is open, so nothing needs protecting. The producer stays uninitialized and
        // the next init asks the broker again, so an operator's grant heals it; Fatal would
        // answer every later init with this error without asking.
        if self.state == TxnState::Uninitialized
            && matches!(api, TxnApi::FindCoordinator | TxnApi::InitProducerId)
            && error.class() == ErrorClass::Denied
        {
            self.coordinator_known = false;
            return error;
        }
        self.apply(api, kind, error, now)
    }

    /// The state change an unretried error causes; returns the error to report.
    fn apply(&mut self, api: TxnApi, kind: TxnErrorKind, error: Error, now: Instant) -> Error {
        let timed_out = self.deadline.is_some_and(|d| now >= d);
        match kind {
            TxnErrorKind::Retry { .. } => error,
            // Past the timeout, the coordinator has aborted the transaction and bumped the
            // epoch itself: that fences this producer's old epoch, and a new one continues.
            TxnErrorKind::Fenced
                if timed_out
                    && matches!(
                        self.state,
                        TxnState::Committing | TxnState::Aborting | TxnState::AbortRequired
                    ) =>
            {
                let e = self.timed_out_error(Some(&error));
                self.clear_transaction();
                self.state = TxnState::Uninitialized;
                e
            }
            TxnErrorKind::Fenced => self.fail(fenced(&self.transactional_id, api, &error)),
            TxnErrorKind::Fatal => self.fail(error),
            TxnErrorKind::Abortable { reinit } => match self.state {
                TxnState::InTransaction | TxnState::AbortRequired | TxnState::Committing => {
                    self.reinit |= reinit;
                    self.state = TxnState::AbortRequired;
                    self.abort_cause.get_or_insert(error.clone());
                    error
                }
                // The abort itself cannot go through (e.g. INVALID_TXN_STATE): a new epoch
                // aborts whatever is open.
                TxnState::Aborting => {
                    self.clear_transaction();
                    self.state = TxnState::Uninitialized;
                    error
                }
                _ => self.fail(error),
            },
        }
    }

    fn ended(&mut self) {
        self.clear_transaction();
        self.abort_cause = None;
        self.state = if std::mem::take(&mut self.reinit) {
            TxnState::Uninitialized
        } else {
            TxnState::Ready
        };
    }

    fn clear_transaction(&mut self) {
        self.partitions.clear();
        self.pending_partitions.clear();
        self.groups.clear();
        self.pending_group = None;
        self.pending_offsets = None;
        self.deadline = None;
    }

    fn fail(&mut self, error: Error) -> Error {
        self.state = TxnState::Fatal;
        self.in_flight = None;
        self.fatal = Some(error.clone());
        error
    }

    /// Fails in Fatal; moves an open transaction past its deadline to AbortRequired.
    fn check(&mut self, now: Instant) -> Result<(), Error> {
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        if self.state == TxnState::InTransaction && self.deadline.is_some_and(|d| now >= d) {
            self.state = TxnState::AbortRequired;
            self.reinit = true;
            self.abort_cause = Some(self.timed_out_error(None));
        }
        Ok(())
    }

    fn in_transaction(&mut self, what: &str, now: Instant) -> Result<(), Error> {
        self.check(now)?;
        match self.state {
            TxnState::InTransaction => Ok(()),
            TxnState::AbortRequired => Err(self.abort_required()),
            _ => Err(self.misuse(what, "begin a transaction first")),
        }
    }

    fn abort_required(&self) -> Error {
        let cause = self
            .abort_cause
            .as_ref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        Error::Transaction {
            transactional_id: self.transactional_id.clone(),
            failure: TxnFailure::Abortable,
            code: self.abort_cause.as_ref().and_then(Error::code),
            message: format!(
                "the transaction can no longer commit{cause}; abort it, then redo its work from \
                 the last committed positions"
            ),
        }
    }

    fn timed_out_error(&self, after: Option<&Error>) -> Error {
        let after = after
            .map(|e| format!(" (the coordinator answered: {e})"))
            .unwrap_or_default();
        Error::Transaction {
            transactional_id: self.transactional_id.clone(),
            failure: TxnFailure::Abortable,
            code: Some(ResponseError::InvalidTxnState),
            message: format!(
                "the transaction was open longer than transaction.timeout.ms ({} ms), so the \
                 coordinator aborts it{after}: none of it becomes visible to read_committed \
                 consumers. The producer re-initializes (new epoch, sequences from 0); redo the \
                 work from the last committed positions, and commit more often or raise the \
                 transaction timeout (at most the brokers' transaction.max.timeout.ms)",
                self.timeout.as_millis()
            ),
        }
    }

    fn misuse(&self, what: &str, fix: &str) -> Error {
        Error::InvalidArgument(format!(
            "transactional producer `{}` cannot {what} in state {:?}: {fix}",
            self.transactional_id, self.state
        ))
    }
}

/// The error of a fenced producer: what happened and what to do.
pub(crate) fn fenced(transactional_id: &str, api: TxnApi, error: &Error) -> Error {
    let code = error.code().unwrap_or(ResponseError::ProducerFenced);
    Error::Transaction {
        transactional_id: transactional_id.to_owned(),
        failure: TxnFailure::Fenced,
        code: Some(code),
        message: format!(
            "{} answered {}: a newer producer with the same transactional id has initialized \
             (another instance, or a restart of this one), so this one is fenced. Stop it and do \
             not retry with it: nothing it wrote in its open transaction becomes visible to \
             read_committed consumers. If only one instance should be running, look for a second \
             process using this transactional id",
            api.name(),
            error_name(code)
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ResponseError as E;

    const TIMEOUT: Duration = Duration::from_secs(60);
    const ID: ProducerIdentity = ProducerIdentity {
        producer_id: 7,
        epoch: 3,
    };

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p).unwrap()
    }

    fn code(c: ResponseError) -> Error {
        Error::broker(c, "test")
    }

    fn step(m: &mut TxnMachine, now: Instant) -> TxnRequest {
        match m.poll(now).unwrap() {
            TxnStep::Send(r) => r,
            TxnStep::Idle => panic!("expected a request in {:?}", m.state()),
        }
    }

    fn idle(m: &mut TxnMachine, now: Instant) {
        assert_eq!(m.poll(now).unwrap(), TxnStep::Idle, "{:?}", m.state());
    }

    /// A machine initialized to `ID` at `t0`.
    fn ready(t0: Instant) -> TxnMachine {
        let mut m = TxnMachine::new("mirror-0", TIMEOUT).unwrap();
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert_eq!(step(&mut m, t0), TxnRequest::FindCoordinator);
        m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::InitProducerId {
                transaction_timeout_ms: 60_000
            }
        );
        m.on_reply(Ok(TxnReply::ProducerId(ID)), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        assert_eq!(m.identity(), Some(ID));
        idle(&mut m, t0);
        m
    }

    /// A machine in a transaction with partition t-0 added.
    fn in_txn(t0: Instant) -> TxnMachine {
        let mut m = ready(t0);
        m.begin(t0).unwrap();
        m.add_partitions(&[tp("t", 0)], t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        m
    }

    #[test]
    fn a_whole_transaction_with_partitions_and_offsets() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        m.begin(t0).unwrap();
        assert_eq!(m.state(), TxnState::InTransaction);
        idle(&mut m, t0);
        // Three partitions, one already requested twice: one request with each once.
        m.add_partitions(&[tp("a", 1), tp("a", 0), tp("b", 0), tp("a", 1)], t0)
            .unwrap();
        let req = step(&mut m, t0);
        assert_eq!(
            req,
            TxnRequest::AddPartitionsToTxn {
                identity: ID,
                partitions: vec![tp("a", 0), tp("a", 1), tp("b", 0)]
            }
        );
        // Polling again before the answer gives the same request.
        assert_eq!(step(&mut m, t0), req);
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert!(m.has_partition(&tp("a", 1)) && m.has_partition(&tp("b", 0)));
        // Partitions already in the transaction are not added again.
        m.add_partitions(&[tp("a", 0)], t0).unwrap();
        idle(&mut m, t0);

        let generation = Generation {
            generation_id: 4,
            member_id: "m-1".into(),
            group_instance_id: None,
        };
        let offsets = vec![CommitOffset::new(tp("src", 0), 42)];
        m.send_offsets("mirror", &generation, &offsets, t0).unwrap();
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::AddOffsetsToTxn {
                identity: ID,
                group_id: "mirror".into()
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::TxnOffsetCommit {
                identity: ID,
                group_id: "mirror".into(),
                generation: generation.clone(),
                offsets: offsets.clone()
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        idle(&mut m, t0);
        // The group is in the transaction now: later offsets go straight to TxnOffsetCommit.
        m.send_offsets("mirror", &generation, &offsets, t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::TxnOffsetCommit { .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();

        m.commit(t0).unwrap();
        assert_eq!(m.state(), TxnState::Committing);
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::EndTxn {
                identity: ID,
                commit: true
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        assert!(m.partitions().is_empty());
        // The same epoch carries on into the next transaction (protocol v1).
        assert_eq!(m.identity(), Some(ID));
        m.begin(t0).unwrap();
        m.add_partitions(&[tp("a", 0)], t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::AddPartitionsToTxn { .. }
        ));
    }

    #[test]
    fn abort_returns_to_ready() {
        let t0 = Instant::now();
        let mut m = in_txn(t0);
        m.abort(t0).unwrap();
        assert_eq!(m.state(), TxnState::Aborting);
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::EndTxn {
                identity: ID,
                commit: false
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        assert_eq!(m.identity(), Some(ID));
        // Aborting with nothing open is a no-op.
        m.abort(t0).unwrap();
        idle(&mut m, t0);
    }

    #[test]
    fn calls_out_of_order_are_refused_without_changing_state() {
        let t0 = Instant::now();
        let mut m = TxnMachine::new("x", TIMEOUT).unwrap();
        for r in [
            m.begin(t0),
            m.commit(t0),
            m.abort(t0),
            m.add_partitions(&[tp("t", 0)], t0),
        ] {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
        assert_eq!(m.state(), TxnState::Uninitialized);
        let mut m = ready(t0);
        m.begin(t0).unwrap();
        let e = m.begin(t0).unwrap_err();
        assert!(
            e.to_string().contains("end the open transaction first"),
            "{e}"
        );
        let e = m.init(t0).unwrap_err();
        assert!(e.to_string().contains("abort or commit"), "{e}");
        // Offsets asked for and not committed: no commit.
        m.send_offsets(
            "g",
            &Generation::simple(),
            &[CommitOffset::new(tp("s", 0), 1)],
            t0,
        )
        .unwrap();
        let e = m.commit(t0).unwrap_err();
        assert!(
            e.to_string().contains("offsets are not committed yet"),
            "{e}"
        );
        assert_eq!(m.state(), TxnState::InTransaction);
        let e = m
            .send_offsets(
                "g",
                &Generation::simple(),
                &[CommitOffset::new(tp("s", 0), -1)],
                t0,
            )
            .unwrap_err();
        assert!(e.to_string().contains(">= 0"), "{e}");
        // A reply with nothing in flight is a caller bug.
        assert!(m.on_reply(Ok(TxnReply::Done), t0).is_err());
        assert!(TxnMachine::new("", TIMEOUT).is_err());
        assert!(TxnMachine::new("x", Duration::ZERO).is_err());
    }

    #[test]
    fn reinit_from_ready_bumps_the_epoch() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        m.init(t0).unwrap();
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::InitProducerId { .. }
        ));
        let bumped = ID.next_epoch().unwrap();
        m.on_reply(Ok(TxnReply::ProducerId(bumped)), t0).unwrap();
        assert_eq!(m.identity(), Some(bumped));
        assert_eq!(m.state(), TxnState::Ready);
    }

    /// Retriable errors leave the state and the pending request as they were; coordinator
    /// errors look the coordinator up first.
    #[test]
    fn retriable_errors_resend_the_request() {
        let t0 = Instant::now();
        let table = [
            (E::ConcurrentTransactions, false),
            (E::CoordinatorLoadInProgress, false),
            (E::NotCoordinator, true),
            (E::CoordinatorNotAvailable, true),
            (E::RequestTimedOut, false),
        ];
        for (c, rediscover) in table {
            let mut m = in_txn(t0);
            m.commit(t0).unwrap();
            let req = step(&mut m, t0);
            let e = m.on_reply(Err(code(c)), t0).unwrap_err();
            assert_eq!(e.code(), Some(c));
            assert_eq!(m.state(), TxnState::Committing, "{c:?}");
            if rediscover {
                assert_eq!(step(&mut m, t0), TxnRequest::FindCoordinator, "{c:?}");
                m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
            }
            assert_eq!(step(&mut m, t0), req, "{c:?}");
            m.on_reply(Ok(TxnReply::Done), t0).unwrap();
            assert_eq!(m.state(), TxnState::Ready);
        }
        // A lookup that failed is tried again.
        let mut m = TxnMachine::new("x", TIMEOUT).unwrap();
        assert_eq!(step(&mut m, t0), TxnRequest::FindCoordinator);
        assert!(
            m.on_reply(Err(code(E::CoordinatorNotAvailable)), t0)
                .is_err()
        );
        assert_eq!(step(&mut m, t0), TxnRequest::FindCoordinator);
        // So is an InitProducerId that found a transaction still being aborted.
        m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::InitProducerId { .. }
        ));
        assert!(
            m.on_reply(Err(code(E::ConcurrentTransactions)), t0)
                .is_err()
        );
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::InitProducerId { .. }
        ));
    }

    /// CONCURRENT_TRANSACTIONS to the first add of a transaction (the previous one is still
    /// writing its markers) is retried after 20 ms, not after the client's 100 ms..1 s backoff;
    /// anything else, and the same code later in the transaction, keeps the client's backoff.
    #[test]
    fn the_first_add_after_a_commit_is_retried_quickly() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        m.begin(t0).unwrap();
        m.add_partitions(&[tp("t", 0)], t0).unwrap();
        let add = step(&mut m, t0);
        let busy = code(E::ConcurrentTransactions);
        assert_eq!(
            m.quick_retry(&add, &busy),
            Some(CONCURRENT_TRANSACTIONS_BACKOFF)
        );
        assert_eq!(
            m.quick_retry(&add, &code(E::CoordinatorLoadInProgress)),
            None
        );
        assert_eq!(m.quick_retry(&add, &code(E::NotCoordinator)), None);
        // The retry is the same request: the machine keeps it pending.
        assert!(m.on_reply(Err(busy.clone()), t0).is_err());
        assert_eq!(step(&mut m, t0), add);
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        // An offsets-only transaction opens with AddOffsetsToTxn: the same.
        let mut o = ready(t0);
        o.begin(t0).unwrap();
        o.send_offsets(
            "g",
            &Generation::simple(),
            &[CommitOffset::new(tp("t", 0), 5)],
            t0,
        )
        .unwrap();
        let add_offsets = step(&mut o, t0);
        assert!(matches!(add_offsets, TxnRequest::AddOffsetsToTxn { .. }));
        assert_eq!(
            o.quick_retry(&add_offsets, &busy),
            Some(CONCURRENT_TRANSACTIONS_BACKOFF)
        );
        // Once the transaction holds a partition, the code means something else is going on.
        m.send_offsets(
            "g",
            &Generation::simple(),
            &[CommitOffset::new(tp("t", 0), 5)],
            t0,
        )
        .unwrap();
        let later = step(&mut m, t0);
        assert_eq!(m.quick_retry(&later, &busy), None);
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::TxnOffsetCommit { .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        m.commit(t0).unwrap();
        let end = step(&mut m, t0);
        assert_eq!(m.quick_retry(&end, &busy), None, "EndTxn keeps the backoff");
    }

    /// A group added up front (with the partitions) makes the commit TxnOffsetCommit + EndTxn:
    /// the AddOffsetsToTxn round trip happens while the transaction is open, not at its end.
    #[test]
    fn a_group_added_up_front_leaves_two_requests_for_the_commit() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        m.begin(t0).unwrap();
        m.add_partitions(&[tp("t", 0)], t0).unwrap();
        m.add_group("g", t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::AddPartitionsToTxn { .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::AddOffsetsToTxn {
                identity: ID,
                group_id: "g".into()
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        idle(&mut m, t0);
        // Again in the same transaction: nothing to send.
        m.add_group("g", t0).unwrap();
        idle(&mut m, t0);
        let offsets = [CommitOffset::new(tp("t", 0), 9)];
        m.send_offsets("g", &Generation::simple(), &offsets, t0)
            .unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::TxnOffsetCommit { .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        m.commit(t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::EndTxn { commit: true, .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        // The next transaction adds the group again.
        m.begin(t0).unwrap();
        m.add_group("g", t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::AddOffsetsToTxn { .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        m.commit(t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::EndTxn { commit: true, .. }
        ));
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        // An abort forgets a group not added yet.
        m.begin(t0).unwrap();
        m.add_group("g", t0).unwrap();
        m.abort(t0).unwrap();
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::EndTxn { commit: false, .. }
        ));
    }

    /// Fenced and denied producers are unusable; every later call fails with the same error.
    #[test]
    fn fencing_and_denial_are_fatal() {
        let t0 = Instant::now();
        for c in [E::ProducerFenced, E::InvalidProducerEpoch] {
            let mut m = in_txn(t0);
            m.commit(t0).unwrap();
            step(&mut m, t0);
            let e = m.on_reply(Err(code(c)), t0).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Fenced, "{c:?}");
            assert_eq!(e.code(), Some(c));
            let msg = e.to_string();
            assert!(
                msg.contains("mirror-0")
                    && msg.contains("newer producer with the same transactional id")
                    && msg.contains("Stop it"),
                "{msg}"
            );
            assert_eq!(m.state(), TxnState::Fatal);
            assert_eq!(m.poll(t0).unwrap_err().to_string(), msg);
            assert_eq!(m.begin(t0).unwrap_err().to_string(), msg);
            assert_eq!(m.abort(t0).unwrap_err().to_string(), msg);
            assert_eq!(m.fatal_error().map(ToString::to_string), Some(msg));
        }
        // Denied at InitProducerId.
        let mut m = TxnMachine::new("mirror-0", TIMEOUT).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
        step(&mut m, t0);
        let denied = Error::Authorization {
            code: E::TransactionalIdAuthorizationFailed,
            principal: Some("User:bob".into()),
            operation: "Write".into(),
            resource: "TransactionalId:mirror-0".into(),
        };
        let e = m.on_reply(Err(denied.clone()), t0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Denied);
        // Not fatal: nothing is open, and the next init asks again (a grant heals it).
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert_eq!(m.fatal_error().map(ToString::to_string), None);
        m.init(t0).unwrap();
        assert_eq!(
            m.poll(t0).unwrap(),
            TxnStep::Send(TxnRequest::FindCoordinator)
        );
        // Denied at FindCoordinator the same way; then granted.
        let e = m.on_reply(Err(denied), t0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Denied);
        assert_eq!(m.state(), TxnState::Uninitialized);
        m.init(t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::ProducerId(ID)), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        // A fence reported by a produce is fatal too.
        let mut m = in_txn(t0);
        let e = m.on_produce_error(code(E::ProducerFenced), t0);
        assert_eq!(e.class(), ErrorClass::Fenced);
        assert_eq!(m.state(), TxnState::Fatal);
        // Misconfiguration at init.
        let mut m = TxnMachine::new("x", TIMEOUT).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::CoordinatorFound), t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Err(code(E::InvalidTransactionTimeout)), t0)
            .unwrap_err();
        assert_eq!(m.state(), TxnState::Fatal);
    }

    /// A failed batch makes the transaction abortable; after the abort a new epoch starts, so
    /// sequences restart at 0 whatever the broker kept of the failed batch.
    #[test]
    fn a_failed_batch_requires_an_abort_and_a_new_epoch() {
        let t0 = Instant::now();
        let mut m = in_txn(t0);
        let rejected = Error::RecordsRejected {
            partition: "t-0".into(),
            code: E::CorruptMessage,
            message: None,
            record_errors: Vec::new(),
        };
        let e = m.on_produce_error(rejected, t0);
        assert!(matches!(e, Error::RecordsRejected { .. }));
        assert_eq!(m.state(), TxnState::AbortRequired);
        idle(&mut m, t0);
        for r in [
            m.commit(t0),
            m.add_partitions(&[tp("t", 1)], t0),
            m.send_offsets("g", &Generation::simple(), &[], t0),
        ] {
            let e = r.unwrap_err();
            assert_eq!(e.class(), ErrorClass::Abortable, "{e}");
            assert!(e.to_string().contains("CORRUPT_MESSAGE"), "{e}");
        }
        m.abort(t0).unwrap();
        assert_eq!(
            step(&mut m, t0),
            TxnRequest::EndTxn {
                identity: ID,
                commit: false
            }
        );
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::InitProducerId { .. }
        ));
        m.on_reply(Ok(TxnReply::ProducerId(ID.next_epoch().unwrap())), t0)
            .unwrap();
        assert_eq!(m.state(), TxnState::Ready);
        assert_eq!(m.identity().unwrap().epoch, ID.epoch + 1);
    }

    /// Errors that doom the transaction but leave the producer's epoch valid: abort, then Ready.
    #[test]
    fn abortable_request_errors() {
        let t0 = Instant::now();
        // AddPartitionsToTxn denied on a topic.
        let mut m = in_txn(t0);
        m.add_partitions(&[tp("secret", 0)], t0).unwrap();
        step(&mut m, t0);
        let denied = Error::Authorization {
            code: E::TopicAuthorizationFailed,
            principal: None,
            operation: "Write".into(),
            resource: "Topic:secret".into(),
        };
        let e = m.on_reply(Err(denied), t0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Denied);
        assert_eq!(m.state(), TxnState::AbortRequired);
        m.abort(t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Ok(TxnReply::Done), t0).unwrap();
        assert_eq!(m.state(), TxnState::Ready);

        // TxnOffsetCommit from a generation that is over (KIP-447): a zombie member.
        for c in [
            E::IllegalGeneration,
            E::UnknownMemberId,
            E::FencedInstanceId,
        ] {
            let mut m = in_txn(t0);
            m.send_offsets(
                "g",
                &Generation::simple(),
                &[CommitOffset::new(tp("s", 0), 5)],
                t0,
            )
            .unwrap();
            step(&mut m, t0);
            m.on_reply(Ok(TxnReply::Done), t0).unwrap();
            assert!(matches!(
                step(&mut m, t0),
                TxnRequest::TxnOffsetCommit { .. }
            ));
            m.on_reply(Err(code(c)), t0).unwrap_err();
            assert_eq!(m.state(), TxnState::AbortRequired, "{c:?}");
            m.abort(t0).unwrap();
            step(&mut m, t0);
            m.on_reply(Ok(TxnReply::Done), t0).unwrap();
            assert_eq!(m.state(), TxnState::Ready, "{c:?}");
        }
    }

    /// INVALID_TXN_STATE: abort and re-initialize; if the abort itself is refused, re-initialize
    /// straight away (a new epoch aborts what is open).
    #[test]
    fn invalid_txn_state_aborts_and_reinitializes() {
        let t0 = Instant::now();
        let mut m = in_txn(t0);
        m.commit(t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Err(code(E::InvalidTxnState)), t0).unwrap_err();
        assert_eq!(m.state(), TxnState::AbortRequired);
        m.abort(t0).unwrap();
        step(&mut m, t0);
        m.on_reply(Err(code(E::InvalidTxnState)), t0).unwrap_err();
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert!(matches!(
            step(&mut m, t0),
            TxnRequest::InitProducerId { .. }
        ));
        m.on_reply(Ok(TxnReply::ProducerId(ID.next_epoch().unwrap())), t0)
            .unwrap();
        assert_eq!(m.state(), TxnState::Ready);
    }

    /// Past transaction.timeout.ms the transaction can only be aborted; a fence answered then
    /// is the coordinator's own timeout abort, after which the producer re-initializes.
    #[test]
    fn a_transaction_past_its_timeout_is_aborted_and_reinitialized() {
        let t0 = Instant::now();
        let late = t0 + TIMEOUT;
        let mut m = in_txn(t0);
        m.add_partitions(&[tp("t", 1)], t0 + TIMEOUT / 2).unwrap();
        assert_eq!(m.state(), TxnState::InTransaction);
        let e = m.add_partitions(&[tp("t", 2)], late).unwrap_err();
        assert_eq!(m.state(), TxnState::AbortRequired);
        assert_eq!(e.class(), ErrorClass::Abortable);
        assert!(
            e.to_string().contains("transaction.timeout.ms (60000 ms)"),
            "{e}"
        );
        // The coordinator got there first: it bumped the epoch, our abort is "fenced".
        m.abort(late).unwrap();
        step(&mut m, late);
        let e = m.on_reply(Err(code(E::ProducerFenced)), late).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Abortable, "{e}");
        assert!(e.to_string().contains("PRODUCER_FENCED"), "{e}");
        assert_eq!(m.state(), TxnState::Uninitialized);
        assert!(matches!(
            step(&mut m, late),
            TxnRequest::InitProducerId { .. }
        ));
        m.on_reply(Ok(TxnReply::ProducerId(ID.next_epoch().unwrap())), late)
            .unwrap();
        assert_eq!(m.state(), TxnState::Ready);

        // Our abort got there first: it succeeds, and the producer still re-initializes.
        let mut m = in_txn(t0);
        assert_eq!(m.poll(late).unwrap(), TxnStep::Idle);
        assert_eq!(m.state(), TxnState::AbortRequired);
        m.abort(late).unwrap();
        step(&mut m, late);
        m.on_reply(Ok(TxnReply::Done), late).unwrap();
        assert_eq!(m.state(), TxnState::Uninitialized);

        // A commit answered "fenced" after the deadline: the coordinator aborted it.
        let mut m = in_txn(t0);
        m.commit(t0).unwrap();
        step(&mut m, t0);
        let e = m
            .on_reply(Err(code(E::InvalidProducerEpoch)), late)
            .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Abortable);
        assert_eq!(m.state(), TxnState::Uninitialized);
        // Before the deadline the same answer is a fence.
        let mut m = in_txn(t0);
        m.commit(t0).unwrap();
        step(&mut m, t0);
        let e = m
            .on_reply(Err(code(E::InvalidProducerEpoch)), t0)
            .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Fenced);
        assert_eq!(m.state(), TxnState::Fatal);
    }

    /// One row per code with a transaction-specific meaning, per API where it differs.
    #[test]
    fn classification_table() {
        use TxnApi as A;
        use TxnErrorKind as K;
        let retry = K::Retry { rediscover: false };
        let rediscover = K::Retry { rediscover: true };
        let table: &[(A, ResponseError, TxnErrorKind)] = &[
            (A::EndTxn, E::ConcurrentTransactions, retry),
            (A::InitProducerId, E::ConcurrentTransactions, retry),
            (A::AddPartitionsToTxn, E::CoordinatorLoadInProgress, retry),
            (A::AddPartitionsToTxn, E::NotCoordinator, rediscover),
            (A::EndTxn, E::CoordinatorNotAvailable, rediscover),
            (A::AddPartitionsToTxn, E::UnknownTopicOrPartition, retry),
            (A::EndTxn, E::ProducerFenced, K::Fenced),
            (A::Produce, E::ProducerFenced, K::Fenced),
            (A::EndTxn, E::InvalidProducerEpoch, K::Fenced),
            (A::AddPartitionsToTxn, E::InvalidProducerEpoch, K::Fenced),
            (
                A::Produce,
                E::InvalidProducerEpoch,
                K::Abortable { reinit: true },
            ),
            (
                A::InitProducerId,
                E::TransactionalIdAuthorizationFailed,
                K::Fatal,
            ),
            (
                A::FindCoordinator,
                E::TransactionalIdAuthorizationFailed,
                K::Fatal,
            ),
            (A::InitProducerId, E::ClusterAuthorizationFailed, K::Fatal),
            (A::InitProducerId, E::InvalidTransactionTimeout, K::Fatal),
            (A::EndTxn, E::InvalidTxnState, K::Abortable { reinit: true }),
            (
                A::Produce,
                E::InvalidTxnState,
                K::Abortable { reinit: true },
            ),
            (
                A::AddPartitionsToTxn,
                E::TransactionAbortable,
                K::Abortable { reinit: false },
            ),
            (
                A::Produce,
                E::TransactionAbortable,
                K::Abortable { reinit: true },
            ),
            (
                A::AddPartitionsToTxn,
                E::TopicAuthorizationFailed,
                K::Abortable { reinit: false },
            ),
            (
                A::TxnOffsetCommit,
                E::GroupAuthorizationFailed,
                K::Abortable { reinit: false },
            ),
            (
                A::AddOffsetsToTxn,
                E::GroupAuthorizationFailed,
                K::Abortable { reinit: false },
            ),
            (
                A::TxnOffsetCommit,
                E::IllegalGeneration,
                K::Abortable { reinit: false },
            ),
            (
                A::TxnOffsetCommit,
                E::UnknownMemberId,
                K::Abortable { reinit: false },
            ),
            (
                A::TxnOffsetCommit,
                E::FencedInstanceId,
                K::Abortable { reinit: false },
            ),
            (
                A::Produce,
                E::OutOfOrderSequenceNumber,
                K::Abortable { reinit: true },
            ),
            (
                A::Produce,
                E::NotLeaderOrFollower,
                K::Abortable { reinit: true },
            ),
            (
                A::Produce,
                E::MessageTooLarge,
                K::Abortable { reinit: true },
            ),
            (A::EndTxn, E::UnknownServerError, K::Fatal),
            (
                A::AddPartitionsToTxn,
                E::UnknownServerError,
                K::Abortable { reinit: false },
            ),
        ];
        for &(api, c, want) in table {
            assert_eq!(classify(api, &code(c)), want, "{api:?} {}", error_name(c));
        }
        // Errors without a code: lost connections are retried (on a coordinator, after looking
        // it up again); on the produce path the retry helper already gave up.
        let lost = Error::Disconnected {
            broker: "b:1".into(),
            reason: "eof".into(),
        };
        assert_eq!(classify(A::EndTxn, &lost), rediscover);
        assert_eq!(classify(A::Produce, &lost), K::Abortable { reinit: true });
        assert_eq!(
            classify(A::EndTxn, &Error::protocol("b:1", "garbage")),
            K::Fatal
        );
    }

    /// On the coordinator APIs the machine retries exactly what the retry helper retries
    /// (`Error::is_retriable`): CONCURRENT_TRANSACTIONS included, which Kafka's exception
    /// hierarchy does not call retriable.
    #[test]
    fn the_machine_and_the_retry_helper_retry_the_same_codes() {
        for n in -1..=200i16 {
            let Some(c) = ResponseError::try_from_code(n) else {
                continue;
            };
            for api in [
                TxnApi::InitProducerId,
                TxnApi::AddPartitionsToTxn,
                TxnApi::AddOffsetsToTxn,
                TxnApi::EndTxn,
            ] {
                assert_eq!(
                    matches!(classify(api, &code(c)), TxnErrorKind::Retry { .. }),
                    code(c).is_retriable(),
                    "{api:?} {}",
                    error_name(c)
                );
            }
        }
        assert!(code(E::ConcurrentTransactions).is_retriable());
    }
}
