//! The transactional producer: [`TxnMachine`] driven over the network.
//!
//! Every request goes through the client's one retry helper: coordinator requests through
//! `CoordinatorCache::call` (the transaction coordinator of the transactional id, or the
//! group coordinator for TxnOffsetCommit: looked up again when it moved, retriable errors backed
//! off and retried until the retry budget is spent), batches through [`Client::produce`]
//! (`route_and_retry`). When the helper gives up, the operation fails with the last error and
//! the machine keeps the request pending, so calling the operation again retries it.
//!
//! The batches are the caller's: exactly one v2 record batch per partition, with the
//! transactional attribute bit (0x10) and this producer's id and epoch
//! ([`TransactionalProducer::identity`]) in the header, and the caller's own sequence per
//! partition (0 for the first batch of an epoch, then + record count). `strait-forward`'s
//! `rewrite_for_produce` with `ProducerStamp::transactional` writes exactly that header.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::conn::Connection;
use crate::error::{Error, Result, error_name};
use crate::group::Generation;
use crate::group::coordinator::{CoordinatorCache, CoordinatorType, LOOKUP_TIMEOUT};
use crate::offset_commit::{CommitOffset, group_authorization};
use crate::produce::{ProduceAck, ProduceBatch, ProduceOptions};
use crate::producer_id::ProducerIdentity;
use crate::topic::TopicPartition;
use crate::txn::{
    CONCURRENT_TRANSACTIONS_QUICK_RETRIES, TxnApi, TxnMachine, TxnReply, TxnRequest, TxnState,
    TxnStep,
};

/// Java's default `transaction.timeout.ms`.
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Attribute bit of a transactional batch.
const TRANSACTIONAL_BIT: i16 = 0x10;

/// A transactional producer on one cluster (see the [module docs](self)).
///
/// After an error, [`state`](Self::state) says what to do: the same state as before (a
/// retriable failure the retry budget did not cover: call the operation again),
/// [`TxnState::AbortRequired`] (call [`abort`](Self::abort), then redo the work from the last
/// committed positions), or [`TxnState::Fatal`] (fenced or denied: drop the producer).
pub struct TransactionalProducer {
    client: Client,
    machine: TxnMachine,
    coordinator: CoordinatorCache,
    groups: HashMap<String, CoordinatorCache>,
    budget: Duration,
    options: ProduceOptions,
}

impl std::fmt::Debug for TransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalProducer")
            .field("transactional_id", &self.machine.transactional_id())
            .field("state", &self.machine.state())
            .field("identity", &self.machine.identity())
            .finish()
    }
}

impl Client {
    /// A transactional producer for `transactional_id`, initialized: InitProducerId bumps the
    /// epoch, which aborts whatever an older producer with the same id left open and fences
    /// that producer (its later requests fail with PRODUCER_FENCED).
    pub async fn transactional_producer(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<TransactionalProducer> {
        let mut p = TransactionalProducer::new(self, transactional_id, transaction_timeout)?;
        p.init().await?;
        Ok(p)
    }
}

impl TransactionalProducer {
    /// A producer for `transactional_id` that is not initialized yet ([`init`](Self::init)).
    pub fn new(
        client: &Client,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<TransactionalProducer> {
        let machine = TxnMachine::new(transactional_id, transaction_timeout)?;
        Ok(TransactionalProducer {
            client: client.clone(),
            coordinator: CoordinatorCache::new(
                client.clone(),
                CoordinatorType::Transaction,
                transactional_id,
            ),
            machine,
            groups: HashMap::new(),
            budget: LOOKUP_TIMEOUT,
            options: ProduceOptions {
                transactional_id: Some(transactional_id.to_owned()),
                ..ProduceOptions::default()
            },
        })
    }

    /// How long one request is retried before the operation fails (default 60 s, Java's
    /// `max.block.ms`).
    pub fn with_retry_budget(mut self, budget: Duration) -> TransactionalProducer {
        self.budget = budget;
        self
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        self.machine.transactional_id()
    }

    /// Where the producer is.
    pub fn state(&self) -> TxnState {
        self.machine.state()
    }

    /// The producer id and epoch to stamp on batches. A new epoch (after a re-initialization)
    /// restarts every partition's sequence at 0.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        self.machine.identity()
    }

    /// The partitions added to the open transaction.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.machine.partitions().iter()
    }

    /// (Re-)initializes: FindCoordinator, then InitProducerId with a bumped epoch (fencing
    /// older producers with this transactional id, aborting what they left open).
    pub async fn init(&mut self) -> Result<ProducerIdentity> {
        self.machine.init(Instant::now())?;
        self.drive().await?;
        self.machine.identity().ok_or_else(|| {
            Error::InvalidArgument("InitProducerId gave no identity (a bug in strait-wire)".into())
        })
    }

    /// Opens a transaction; it must end within the transaction timeout.
    pub fn begin(&mut self) -> Result<()> {
        self.machine.begin(Instant::now())
    }

    /// Adds partitions to the open transaction (one AddPartitionsToTxn for those not in it
    /// yet). [`produce`](Self::produce) does this itself.
    pub async fn add_partitions(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.machine.add_partitions(partitions, Instant::now())?;
        self.drive().await
    }

    /// Adds partitions and the group whose offsets the transaction will commit to the open
    /// transaction (AddPartitionsToTxn for the partitions not in it yet, then AddOffsetsToTxn if
    /// the group is not): [`send_offsets`](Self::send_offsets) at the end of the transaction is
    /// then a single TxnOffsetCommit.
    pub async fn add_partitions_and_group(
        &mut self,
        partitions: &[TopicPartition],
        group_id: &str,
    ) -> Result<()> {
        self.machine.add_partitions(partitions, Instant::now())?;
        self.machine.add_group(group_id, Instant::now())?;
        self.drive().await
    }

    /// Produces batches in the open transaction: first adds their partitions that are not in
    /// it yet, then sends the batches (as [`Client::produce`]: one per partition, leaders
    /// concurrently, acks=all). Each batch must carry the transactional bit and this producer's
    /// id and epoch. All or error: any failed batch fails the call and the transaction must be
    /// aborted.
    pub async fn produce(&mut self, batches: Vec<ProduceBatch>) -> Result<Vec<ProduceAck>> {
        let identity = self.identity();
        for b in &batches {
            check_batch(b, identity, self.transactional_id())?;
        }
        let partitions: Vec<TopicPartition> = batches.iter().map(|b| b.partition.clone()).collect();
        self.add_partitions(&partitions).await?;
        let results = self.client.produce(batches, &self.options).await?;
        let mut acks = Vec::with_capacity(results.len());
        for r in results {
            match r.outcome {
                Ok(ack) => acks.push(ack),
                Err(e) => return Err(self.machine.on_produce_error(e, Instant::now())),
            }
        }
        Ok(acks)
    }

    /// Commits `offsets` of `group_id` in the open transaction (AddOffsetsToTxn once per group
    /// and transaction, then TxnOffsetCommit to the group's coordinator). `generation` is the
    /// member's (KIP-447: the coordinator refuses a member whose generation is over, so a zombie
    /// cannot commit), or [`Generation::simple`] for a group without members.
    pub async fn send_offsets(
        &mut self,
        group_id: &str,
        generation: &Generation,
        offsets: &[CommitOffset],
    ) -> Result<()> {
        self.machine
            .send_offsets(group_id, generation, offsets, Instant::now())?;
        self.drive().await
    }

    /// Commits the open transaction (EndTxn(commit)). After a retriable failure, call it again.
    pub async fn commit(&mut self) -> Result<()> {
        self.machine.commit(Instant::now())?;
        self.drive().await
    }

    /// Aborts the open transaction (EndTxn(abort)), then re-initializes if the machine asks
    /// for a new epoch (after a failed batch, INVALID_TXN_STATE or a timeout).
    pub async fn abort(&mut self) -> Result<()> {
        self.machine.abort(Instant::now())?;
        self.drive().await
    }

    /// Sends what the machine asks for until it is idle or an error stops it.
    async fn drive(&mut self) -> Result<()> {
        loop {
            let req = match self.machine.poll(Instant::now())? {
                TxnStep::Idle => return Ok(()),
                TxnStep::Send(req) => req,
            };
            let started = Instant::now();
            let outcome = self.execute(&req).await;
            // Each request's time, retries included: where a transaction's time goes.
            tracing::trace!(
                transactional_id = self.transactional_id(),
                api = req.api().name(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                ok = outcome.is_ok(),
                "transaction request answered"
            );
            if let Err(e) = &outcome {
                tracing::debug!(
                    transactional_id = self.transactional_id(),
                    api = req.api().name(),
                    error = %e,
                    "transaction request failed"
                );
            }
            self.machine.on_reply(outcome, Instant::now())?;
        }
    }

    async fn execute(&mut self, req: &TxnRequest) -> Result<TxnReply> {
        let tid: Arc<str> = Arc::from(self.transactional_id());
        let budget = self.budget;
        let lane = transaction_lane(&tid);
        match req {
            TxnRequest::FindCoordinator => {
                self.coordinator.invalidate();
                self.coordinator.get().await?;
                Ok(TxnReply::CoordinatorFound)
            }
            TxnRequest::InitProducerId {
                transaction_timeout_ms,
            } => on_lane(
                &self.coordinator,
                (&self.client, lane),
                "InitProducerId",
                budget,
                |conn| init_once(conn, tid.clone(), *transaction_timeout_ms),
            )
            .await
            .map(TxnReply::ProducerId),
            TxnRequest::AddPartitionsToTxn {
                identity,
                partitions,
            } => {
                let machine = &self.machine;
                on_lane(
                    &self.coordinator,
                    (&self.client, lane),
                    "AddPartitionsToTxn",
                    budget,
                    |conn| {
                        let tid = tid.clone();
                        quickly_retried(machine, req, move || {
                            add_partitions_once(conn.clone(), tid.clone(), *identity, partitions)
                        })
                    },
                )
                .await
                .map(|()| TxnReply::Done)
            }
            TxnRequest::AddOffsetsToTxn { identity, group_id } => {
                let machine = &self.machine;
                on_lane(
                    &self.coordinator,
                    (&self.client, lane),
                    "AddOffsetsToTxn",
                    budget,
                    |conn| {
                        let tid = tid.clone();
                        quickly_retried(machine, req, move || {
                            add_offsets_once(conn.clone(), tid.clone(), *identity, group_id)
                        })
                    },
                )
                .await
                .map(|()| TxnReply::Done)
            }
            TxnRequest::TxnOffsetCommit {
                identity,
                group_id,
                generation,
                offsets,
            } => {
                let client = self.client.clone();
                let group = self
                    .groups
                    .entry(group_id.clone())
                    .or_insert_with(|| {
                        CoordinatorCache::new(client, CoordinatorType::Group, group_id)
                    })
                    .clone();
                on_lane(
                    &group,
                    (&self.client, lane),
                    "TxnOffsetCommit",
                    budget,
                    |conn| {
                        txn_offset_commit_once(
                            conn,
                            tid.clone(),
                            *identity,
                            group_id,
                            generation,
                            offsets,
                        )
                    },
                )
                .await
                .map(|()| TxnReply::Done)
            }
            TxnRequest::EndTxn { identity, commit } => on_lane(
                &self.coordinator,
                (&self.client, lane),
                "EndTxn",
                budget,
                |conn| end_txn_once(conn, tid.clone(), *identity, *commit),
            )
            .await
            .map(|()| TxnReply::Done),
        }
    }
}

/// Coordinator lanes (connections of their own, per coordinator broker) the transactional
/// producers of one client spread over: a broker serves one connection's requests one at a
/// time, and each transaction call waits for an append to the transaction or offsets log, so
/// the calls of many producers (a mirror runs one per partition) queued behind each other on
/// one connection (see [`Client::transaction_connection`]). Bounded, so thousands of producers
/// still open at most this many connections per broker.
pub const TRANSACTION_LANES: u16 = 4;

/// The lane of a transactional id: 1..=[`TRANSACTION_LANES`], the same on every call (its
/// requests stay in order), never 0 (the client's own coordinator connection, which group
/// membership and offset calls use).
fn transaction_lane(transactional_id: &str) -> u16 {
    // FNV-1a: stable across runs and processes, unlike a seeded hasher.
    let hash = transactional_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    1 + u16::try_from(hash % u64::from(TRANSACTION_LANES)).unwrap_or(0)
}

/// [`CoordinatorCache::call`], with each attempt on `lane` of the coordinator it found (the same
/// broker, a connection of that lane) instead of the shared coordinator connection.
async fn on_lane<T, F, Fut>(
    cache: &CoordinatorCache,
    (client, lane): (&Client, u16),
    api: &str,
    within: Duration,
    attempt: F,
) -> Result<T>
where
    F: Fn(Connection) -> Fut + Clone,
    Fut: std::future::Future<Output = Result<T>>,
{
    cache
        .call(api, within, |conn| {
            let attempt = attempt.clone();
            let client = client.clone();
            async move {
                let conn = match conn.node_id() {
                    Some(node) => client.transaction_connection(node, lane).await?,
                    None => conn,
                };
                attempt(conn).await
            }
        })
        .await
}

/// Sends a request with `once`, and again after the machine's short wait while it asks for one
/// ([`TxnMachine::quick_retry`]: CONCURRENT_TRANSACTIONS right after a commit), at most
/// [`CONCURRENT_TRANSACTIONS_QUICK_RETRIES`] times; any other outcome goes to the caller (the
/// coordinator's retry helper, with the client's backoff).
async fn quickly_retried<T, F, Fut>(
    machine: &TxnMachine,
    req: &TxnRequest,
    mut once: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut quick = 0;
    loop {
        let outcome = once().await;
        let wait = match &outcome {
            Err(e) if quick < CONCURRENT_TRANSACTIONS_QUICK_RETRIES => machine.quick_retry(req, e),
            _ => None,
        };
        let Some(wait) = wait else {
            return outcome;
        };
        quick += 1;
        tracing::trace!(
            transactional_id = machine.transactional_id(),
            api = req.api().name(),
            attempt = quick,
            "the previous transaction is still completing; asking again shortly"
        );
        tokio::time::sleep(wait).await;
    }
}

/// Refuses a batch the broker would take for another producer's, or outside the transaction.
fn check_batch(
    b: &ProduceBatch,
    identity: Option<ProducerIdentity>,
    transactional_id: &str,
) -> Result<()> {
    let r = &b.records;
    let header = (r.len() >= 61 && r[16] == 2).then(|| {
        let attributes = i16::from_be_bytes([r[21], r[22]]);
        let mut pid = [0u8; 8];
        pid.copy_from_slice(&r[43..51]);
        (
            attributes,
            i64::from_be_bytes(pid),
            i16::from_be_bytes([r[51], r[52]]),
        )
    });
    let Some((attributes, producer_id, epoch)) = header else {
        return Err(Error::InvalidArgument(format!(
            "the batch for {} is not a v2 record batch",
            b.partition
        )));
    };
    let ok = attributes & TRANSACTIONAL_BIT != 0
        && identity.is_some_and(|id| id.producer_id == producer_id && id.epoch == epoch);
    if ok {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "the batch for {} has producer id {producer_id}, epoch {epoch} and the transactional bit \
         {}; transactional producer `{transactional_id}` sends only batches stamped with its own \
         identity ({}) and the transactional bit (strait-forward: ProducerStamp::transactional)",
        b.partition,
        if attributes & TRANSACTIONAL_BIT != 0 {
            "set"
        } else {
            "clear"
        },
        identity.map_or_else(
            || "none yet: initialize first".to_owned(),
            |id| format!("id {}, epoch {}", id.producer_id, id.epoch)
        ),
    )))
}

fn txn_id(tid: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(tid.to_owned()))
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_owned()))
}

/// The error for a coordinator's answer `code` to `api`.
fn txn_error(code: ResponseError, tid: &str, api: TxnApi, detail: &str) -> Error {
    match code {
        ResponseError::TransactionalIdAuthorizationFailed => Error::Authorization {
            code,
            principal: None,
            operation: "Write".into(),
            resource: format!("TransactionalId:{tid}"),
        },
        ResponseError::ClusterAuthorizationFailed => Error::Authorization {
            code,
            principal: None,
            operation: "IdempotentWrite".into(),
            resource: "Cluster:kafka-cluster".into(),
        },
        ResponseError::InvalidTransactionTimeout => Error::broker(
            code,
            format!(
                "{} for transactional id `{tid}`: the transaction timeout is larger than the \
                 brokers' transaction.max.timeout.ms (15 minutes by default); lower it or raise \
                 that broker setting",
                api.name()
            ),
        ),
        ResponseError::CoordinatorNotAvailable if api == TxnApi::InitProducerId => Error::broker(
            code,
            format!(
                "{} for transactional id `{tid}`: the transaction coordinator is not available. \
                 If this persists, the brokers may be unable to create or write \
                 __transaction_state: it needs transaction.state.log.replication.factor brokers \
                 and transaction.state.log.min.isr of them in sync",
                api.name()
            ),
        ),
        _ => Error::broker(
            code,
            format!("{} for transactional id `{tid}`{detail}", api.name()),
        ),
    }
}

async fn init_once(
    conn: Connection,
    tid: Arc<str>,
    transaction_timeout_ms: i32,
) -> Result<ProducerIdentity> {
    // v6 adds two-phase commit (KIP-939), which is not used.
    let version = conn.pick_version::<InitProducerIdRequest>(0..=5)?;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(&tid)))
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let resp = conn.send(req, version).await?;
    match ResponseError::try_from_code(resp.error_code) {
        None => Ok(ProducerIdentity {
            producer_id: resp.producer_id.0,
            epoch: resp.producer_epoch,
        }),
        Some(code) => Err(txn_error(code, &tid, TxnApi::InitProducerId, "")),
    }
}

async fn add_partitions_once(
    conn: Connection,
    tid: Arc<str>,
    identity: ProducerIdentity,
    partitions: &[TopicPartition],
) -> Result<()> {
    // v4 and up are the brokers' own batched form; clients send v3 at most.
    let version = conn.pick_version::<AddPartitionsToTxnRequest>(0..=3)?;
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for tp in partitions {
        match topics.iter_mut().find(|t| t.name.as_str() == tp.topic()) {
            Some(t) => t.partitions.push(tp.partition()),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(topic_name(tp.topic()))
                    .with_partitions(vec![tp.partition()]),
            ),
        }
    }
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(&tid))
        .with_v3_and_below_producer_id(ProducerId(identity.producer_id))
        .with_v3_and_below_producer_epoch(identity.epoch)
        .with_v3_and_below_topics(topics);
    let resp = conn.send(req, version).await?;
    let mut failed: Vec<(String, ResponseError)> = Vec::new();
    for t in &resp.results_by_topic_v3_and_below {
        for p in &t.results_by_partition {
            if let Some(code) = ResponseError::try_from_code(p.partition_error_code) {
                failed.push((format!("{}-{}", t.name.as_str(), p.partition_index), code));
            }
        }
    }
    // The partitions that were fine are answered OPERATION_NOT_ATTEMPTED: report the cause.
    let cause = failed
        .iter()
        .find(|(_, c)| *c != ResponseError::OperationNotAttempted)
        .or(failed.first());
    let Some((first, code)) = cause else {
        return Ok(());
    };
    if *code == ResponseError::TopicAuthorizationFailed {
        return Err(Error::Authorization {
            code: *code,
            principal: None,
            operation: "Write".into(),
            resource: format!(
                "Topic:{}",
                first.rsplit_once('-').map_or(first.as_str(), |(t, _)| t)
            ),
        });
    }
    let names: Vec<&str> = failed
        .iter()
        .filter(|(_, c)| c == code)
        .map(|(tp, _)| tp.as_str())
        .collect();
    Err(txn_error(
        *code,
        &tid,
        TxnApi::AddPartitionsToTxn,
        &format!(" for {}", names.join(", ")),
    ))
}

async fn add_offsets_once(
    conn: Connection,
    tid: Arc<str>,
    identity: ProducerIdentity,
    group_id: &str,
) -> Result<()> {
    let version = conn.pick_version::<AddOffsetsToTxnRequest>(0..=4)?;
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id(&tid))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_group_id(GroupId(StrBytes::from_string(group_id.to_owned())));
    let resp = conn.send(req, version).await?;
    match ResponseError::try_from_code(resp.error_code) {
        None => Ok(()),
        Some(ResponseError::GroupAuthorizationFailed) => Err(group_authorization(group_id, "Read")),
        Some(code) => Err(txn_error(
            code,
            &tid,
            TxnApi::AddOffsetsToTxn,
            &format!(" (group '{group_id}')"),
        )),
    }
}

async fn txn_offset_commit_once(
    conn: Connection,
    tid: Arc<str>,
    identity: ProducerIdentity,
    group_id: &str,
    generation: &Generation,
    offsets: &[CommitOffset],
) -> Result<()> {
    // v3 carries the member and generation (KIP-447); v5 belongs to KIP-890's second protocol.
    let member = generation.generation_id >= 0
        || !generation.member_id.is_empty()
        || generation.group_instance_id.is_some();
    let version = conn.pick_version::<TxnOffsetCommitRequest>(if member { 3 } else { 0 }..=4)?;
    let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
    for o in offsets {
        let p = TxnOffsetCommitRequestPartition::default()
            .with_partition_index(o.partition.partition())
            .with_committed_offset(o.offset)
            .with_committed_leader_epoch(if version >= 2 {
                o.leader_epoch.unwrap_or(-1)
            } else {
                -1
            })
            .with_committed_metadata(o.metadata.clone().map(StrBytes::from_string));
        match topics
            .iter_mut()
            .find(|t| t.name.as_str() == o.partition.topic())
        {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                TxnOffsetCommitRequestTopic::default()
                    .with_name(topic_name(o.partition.topic()))
                    .with_partitions(vec![p]),
            ),
        }
    }
    let mut req = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id(&tid))
        .with_group_id(GroupId(StrBytes::from_string(group_id.to_owned())))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_topics(topics);
    if version >= 3 {
        req = req
            .with_generation_id(generation.generation_id)
            .with_member_id(StrBytes::from_string(generation.member_id.clone()))
            .with_group_instance_id(
                generation
                    .group_instance_id
                    .clone()
                    .map(StrBytes::from_string),
            );
    }
    let resp = conn.send(req, version).await?;
    let mut failed: Vec<(String, ResponseError)> = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            if let Some(code) = ResponseError::try_from_code(p.error_code) {
                failed.push((format!("{}-{}", t.name.as_str(), p.partition_index), code));
            }
        }
    }
    let Some((first, code)) = failed.first() else {
        return Ok(());
    };
    let names: Vec<&str> = failed.iter().map(|(tp, _)| tp.as_str()).collect();
    let names = names.join(", ");
    Err(match code {
        ResponseError::GroupAuthorizationFailed => group_authorization(group_id, "Read"),
        ResponseError::TopicAuthorizationFailed => Error::Authorization {
            code: *code,
            principal: None,
            operation: "Read".into(),
            resource: format!(
                "Topic:{}",
                first.rsplit_once('-').map_or(first.as_str(), |(t, _)| t)
            ),
        },
        ResponseError::IllegalGeneration
        | ResponseError::UnknownMemberId
        | ResponseError::FencedInstanceId => Error::broker(
            *code,
            format!(
                "TxnOffsetCommit for group '{group_id}' as generation {} of member '{}' was \
                 refused for {names}: the group has rebalanced and this member's generation is \
                 over (KIP-447), so its transaction must not commit; abort it and resume from the \
                 committed offsets after the next assignment",
                generation.generation_id, generation.member_id
            ),
        ),
        // Measured on Kafka 4.3: offsets of a topic the cluster lacks are refused this way.
        ResponseError::UnknownTopicOrPartition => txn_error(
            *code,
            &tid,
            TxnApi::TxnOffsetCommit,
            &format!(
                " (group '{group_id}'): this cluster has no partition {names}; its group \
                 coordinator takes offsets only of its own topics, so commit positions under \
                 this cluster's topic names (or create the topic)"
            ),
        ),
        _ => txn_error(
            *code,
            &tid,
            TxnApi::TxnOffsetCommit,
            &format!(" (group '{group_id}', {}: {names})", error_name(*code)),
        ),
    })
}

async fn end_txn_once(
    conn: Connection,
    tid: Arc<str>,
    identity: ProducerIdentity,
    commit: bool,
) -> Result<()> {
    // v5 belongs to KIP-890's second protocol (an epoch bump per transaction).
    let version = conn.pick_version::<EndTxnRequest>(0..=4)?;
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(&tid))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_committed(commit);
    let resp = conn.send(req, version).await?;
    match ResponseError::try_from_code(resp.error_code) {
        None => Ok(()),
        Some(code) => Err(txn_error(
            code,
            &tid,
            TxnApi::EndTxn,
            if commit { " (commit)" } else { " (abort)" },
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn batch(attributes: i16, pid: i64, epoch: i16) -> ProduceBatch {
        let mut v = vec![0u8; 70];
        v[16] = 2;
        v[21..23].copy_from_slice(&attributes.to_be_bytes());
        v[43..51].copy_from_slice(&pid.to_be_bytes());
        v[51..53].copy_from_slice(&epoch.to_be_bytes());
        ProduceBatch::new(TopicPartition::new("t", 0).unwrap(), Bytes::from(v))
    }

    /// Only batches stamped with the producer's id, epoch and the transactional bit are sent.
    #[test]
    fn batches_must_carry_the_transactional_identity() {
        let id = Some(ProducerIdentity {
            producer_id: 9,
            epoch: 2,
        });
        check_batch(&batch(0x10, 9, 2), id, "x").unwrap();
        // Codec bits and others do not matter.
        check_batch(&batch(0x10 | 0x04, 9, 2), id, "x").unwrap();
        for (b, who) in [
            (batch(0, 9, 2), "no transactional bit"),
            (batch(0x10, 8, 2), "another producer id"),
            (batch(0x10, 9, 1), "an older epoch"),
        ] {
            let e = check_batch(&b, id, "x").unwrap_err();
            assert!(e.to_string().contains("id 9, epoch 2"), "{who}: {e}");
        }
        let e = check_batch(&batch(0x10, 9, 2), None, "x").unwrap_err();
        assert!(e.to_string().contains("initialize first"), "{e}");
        let short = ProduceBatch::new(
            TopicPartition::new("t", 0).unwrap(),
            Bytes::from_static(b"short"),
        );
        assert!(check_batch(&short, id, "x").is_err());
    }

    /// A denied transactional id names the ACL to add.
    #[test]
    fn a_denied_transactional_id_says_which_acl_to_grant() {
        let e = txn_error(
            ResponseError::TransactionalIdAuthorizationFailed,
            "mirror-0",
            TxnApi::InitProducerId,
            "",
        );
        let e = match e {
            Error::Authorization {
                code,
                operation,
                resource,
                ..
            } => Error::Authorization {
                code,
                principal: Some("User:bob".into()),
                operation,
                resource,
            },
            other => panic!("{other:?}"),
        };
        let m = e.to_string();
        assert!(
            m.contains("User:bob may not Write TransactionalId:mirror-0"),
            "{m}"
        );
        assert!(
            m.contains("--allow-principal User:bob --operation Write --transactional-id mirror-0"),
            "{m}"
        );
        assert!(m.contains("Describe that FindCoordinator needs"), "{m}");
        assert!(
            m.contains("--transactional-id <prefix> --resource-pattern-type prefixed"),
            "{m}"
        );
        let e = txn_error(
            ResponseError::InvalidTransactionTimeout,
            "m",
            TxnApi::InitProducerId,
            "",
        );
        assert!(e.to_string().contains("transaction.max.timeout.ms"), "{e}");
    }
}
