//! The pipeline's [`Source`], [`Target`] and [`Positions`] over `strait-wire` cluster clients,
//! and the [`ForwarderBuilder`] that embedding programs use.
//!
//! This is where Kafka error codes become pipeline decisions ([`FailureAction`]): which errors are
//! retried, which mean the target lost our producer state, and which need an operator.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strait_wire::admin::Admin;
use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{
    Client, ClientConfig, Error as WireError, Isolation, OffsetSpec, ProduceBatch, ProduceOptions,
    ResponseError, TopicPartition, TransactionalProducer, TxnState,
};

use strait_wire::ErrorClass;

use crate::Error;
use crate::observe::{NoopObserver, Observer};
use crate::pipeline::commit_hook::{CommitHook, NoCommitHook};
use crate::pipeline::io::{
    FailureAction, FetchSpec, Fetched, IoError, Positions, ProduceAck, ProducerIdentity, Source,
    StartPosition, Target, TopicLimits, Transactions,
};
use crate::pipeline::{Forwarder, Settings};

/// Classifies a `strait-wire` error for the pipeline. The table is the wire client's
/// ([`WireError::class`]); the pipeline only folds its retriable subclasses (refresh metadata,
/// find the coordinator, ambiguous send), which its own retry loops handle alike.
pub fn classify(e: &WireError) -> IoError {
    let name = e.code().map_or_else(
        || wire_error_kind(e).to_string(),
        strait_wire::error::error_name,
    );
    IoError::new(pipeline_action(e.class()), name, e.to_string())
}

fn pipeline_action(class: ErrorClass) -> FailureAction {
    match class {
        ErrorClass::OffsetOutOfRange => FailureAction::OffsetOutOfRange,
        ErrorClass::Duplicate => FailureAction::Duplicate,
        ErrorClass::ProducerState => FailureAction::ProducerState,
        ErrorClass::TooLarge => FailureAction::TooLarge,
        ErrorClass::Denied => FailureAction::Denied,
        ErrorClass::Fenced => FailureAction::Fenced,
        ErrorClass::Abortable => FailureAction::Abortable,
        c if c.is_retriable() => FailureAction::Retriable,
        // Fatal, and any class a newer wire client adds: an operator looks before data moves.
        _ => FailureAction::Fatal,
    }
}

fn wire_error_kind(e: &WireError) -> &'static str {
    match e {
        WireError::Timeout { .. } => "timeout",
        WireError::WriteStalled { .. } => "write_stalled",
        WireError::Disconnected { .. } => "disconnected",
        WireError::Connect { .. } => "connect",
        WireError::Tls { .. } => "tls",
        WireError::Authentication { .. } => "authentication",
        WireError::Config { .. } => "config",
        _ => "client",
    }
}

/// The source cluster over a `strait-wire` [`Client`].
#[derive(Clone)]
pub struct WireSource {
    client: Client,
    fetches: Arc<crate::fetch::Fetcher<crate::fetch::WireCluster>>,
}

impl WireSource {
    /// Wraps a connected client. Each partition's fetch goes to its leader's fetch scheduler
    /// (one per source broker, with an incremental fetch session; see `crate::fetch`), which
    /// sends the waiting partitions together. Fetching must happen inside a tokio runtime.
    pub fn new(client: Client) -> Self {
        let fetches =
            crate::fetch::Fetcher::new(crate::fetch::WireCluster::new(client.clone()), true);
        WireSource {
            client,
            fetches: Arc::new(fetches),
        }
    }
}

impl Source for WireSource {
    async fn fetch(&self, spec: &FetchSpec) -> Result<Fetched, IoError> {
        let answer = self.fetches.fetch(spec).await?;
        // A scheduler hands out answers by partition; check anyway, so that no mismatch
        // can ever mirror one partition's records into another's target.
        if answer.partition != spec.partition || answer.fetch_offset != spec.offset {
            return Err(IoError::new(
                FailureAction::Retriable,
                "bad_response",
                format!(
                    "asked for {} at offset {}, got the answer for {} at offset {}; fetching again",
                    spec.partition, spec.offset, answer.partition, answer.fetch_offset
                ),
            ));
        }
        answer
            .check(self.client.principal())
            .map_err(|e| classify(&e))?;
        Ok(Fetched {
            records: answer.records,
            high_watermark: answer.high_watermark,
            last_stable_offset: answer.last_stable_offset,
            log_start_offset: answer.log_start_offset,
            aborted: answer
                .aborted_transactions
                .iter()
                .map(|&a| a.into())
                .collect(),
        })
    }

    async fn resolve(
        &self,
        partition: &TopicPartition,
        start: StartPosition,
    ) -> Result<i64, IoError> {
        let spec = match start {
            StartPosition::Offset(o) => return Ok(o),
            StartPosition::Earliest => OffsetSpec::Earliest,
            StartPosition::Latest => OffsetSpec::Latest,
        };
        let listed = self
            .client
            .list_offset(partition, spec, Isolation::ReadCommitted)
            .await
            .map_err(|e| classify(&e))?;
        listed.offset.ok_or_else(|| {
            IoError::new(
                FailureAction::Retriable,
                "bad_response",
                format!("no offset listed for {partition}"),
            )
        })
    }
}

/// The target cluster over a `strait-wire` [`Client`].
#[derive(Clone)]
pub struct WireTarget {
    client: Client,
    admin: Admin,
    /// Topics whose configuration we were not allowed to read (warned about once each).
    unreadable: Arc<Mutex<std::collections::HashSet<String>>>,
    /// The topics the embedding program expects to write, named in the advice when the
    /// producer id is denied (before any partition runs, the pipeline knows none).
    written: Arc<[String]>,
}

impl WireTarget {
    /// Wraps a connected client.
    pub fn new(client: Client) -> Self {
        let admin = Admin::new(&client);
        WireTarget {
            client,
            admin,
            unreadable: Arc::default(),
            written: Arc::from([]),
        }
    }

    /// The topics this target will be written, for the grants a denied producer id advises.
    pub fn with_written_topics(mut self, topics: Vec<String>) -> Self {
        self.written = topics.into();
        self
    }
}

impl Target for WireTarget {
    async fn init_producer_id(&self) -> Result<ProducerIdentity, IoError> {
        self.client.init_producer_id().await.map_err(|e| {
            let mut io = classify(&e);
            // The wire client's advice has a `<topic>` placeholder; name the real ones.
            if let WireError::Authorization {
                code,
                principal,
                operation,
                ..
            } = &e
                && operation == "IdempotentWrite"
                && !self.written.is_empty()
            {
                io.message = strait_wire::error::producer_id_denied(
                    *code,
                    principal.as_deref(),
                    &self.written,
                );
            }
            io
        })
    }

    async fn leader(&self, partition: &TopicPartition, refresh: bool) -> Result<i32, IoError> {
        let cached = self.client.cached_metadata();
        if !refresh && let Some(node) = cached.leader(partition) {
            return Ok(node);
        }
        let topics = [partition.topic().to_string()];
        let md = self
            .client
            .metadata(Some(&topics))
            .await
            .map_err(|e| classify(&e))?;
        if let Some(code) = md.topic(partition.topic()).and_then(|t| t.error) {
            let name = strait_wire::error::error_name(code);
            return Err(match code {
                ResponseError::UnknownTopicOrPartition => IoError::new(
                    FailureAction::Retriable,
                    name,
                    format!(
                        "target topic {} does not exist; create it on the target cluster",
                        partition.topic()
                    ),
                ),
                // Retried slowly: the partition resumes once the grant exists.
                ResponseError::TopicAuthorizationFailed => {
                    let principal = self
                        .client
                        .principal()
                        .unwrap_or("<the mirror's principal>");
                    IoError::new(
                        FailureAction::Denied,
                        name,
                        format!(
                            "the mirror's principal {principal} may not describe target topic {t}; \
                             grant Describe and Write on it: kafka-acls.sh --add \
                             --allow-principal {principal} --operation Describe --operation Write \
                             --topic {t}",
                            t = partition.topic()
                        ),
                    )
                }
                _ => IoError::new(
                    FailureAction::Retriable,
                    name.clone(),
                    format!(
                        "metadata for target topic {} failed with {name}",
                        partition.topic()
                    ),
                ),
            });
        }
        md.leader(partition).ok_or_else(|| {
            IoError::new(
                FailureAction::Retriable,
                "LEADER_NOT_AVAILABLE",
                format!("target partition {partition} has no leader right now"),
            )
        })
    }

    async fn produce(
        &self,
        node: i32,
        lane: u16,
        batches: Vec<(TopicPartition, Bytes)>,
        transactional_id: Option<&str>,
    ) -> Result<Vec<Result<ProduceAck, IoError>>, IoError> {
        let conn = self
            .client
            .produce_connection(node, lane)
            .await
            .map_err(|e| classify(&e))?;
        let batches: Vec<ProduceBatch> = batches
            .into_iter()
            .map(|(tp, b)| ProduceBatch::new(tp, b))
            .collect();
        let md = self.client.cached_metadata();
        let options = ProduceOptions {
            transactional_id: transactional_id.map(str::to_owned),
            ..ProduceOptions::default()
        };
        let answers = conn
            .produce(&batches, &options, |topic| {
                md.topic(topic).and_then(|t| t.id)
            })
            .await
            .map_err(|e| classify(&e))?;
        // The broker answers in its own order: match each batch to its partition's answer.
        // Trusting positions would hand one partition's acknowledgement to another.
        let principal = self.client.principal();
        let mut by_partition: std::collections::HashMap<&TopicPartition, _> =
            answers.iter().map(|a| (&a.partition, a)).collect();
        Ok(batches
            .iter()
            .map(|b| match by_partition.remove(&b.partition) {
                Some(a) => a.result(principal).map_err(|e| classify(&e)),
                None => Err(IoError::new(
                    FailureAction::Retriable,
                    "bad_response",
                    format!(
                        "the produce response had no answer for {}; resending",
                        b.partition
                    ),
                )),
            })
            .collect())
    }

    async fn topic_limits(&self, topic: &str) -> Result<TopicLimits, IoError> {
        let mut limits = TopicLimits::default();
        match self.admin.describe_topic_configs(topic).await {
            Ok(configs) => {
                if let Some(v) = configs
                    .value("max.message.bytes")
                    .and_then(|v| v.parse().ok())
                {
                    limits.max_message_bytes = v;
                }
                limits.compacted = configs
                    .value("cleanup.policy")
                    .is_some_and(|p| p.contains("compact"));
                Ok(limits)
            }
            Err(e) if matches!(e, WireError::Authorization { .. }) => {
                // Mirroring needs only Write; reading configs needs DescribeConfigs. Without it,
                // assume Kafka's defaults and let the broker's answer correct us. Every partition
                // asks, so say it once per topic.
                let first = self
                    .unreadable
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(topic.to_string());
                if first {
                    tracing::warn!(
                    topic, error = %e,
                    "cannot read the target topic's configuration; assuming max.message.bytes = {} \
                     (grant DescribeConfigs on the topic to the mirror's principal to remove this warning)",
                    limits.max_message_bytes
                    );
                }
                Ok(limits)
            }
            Err(e) if e.code() == Some(ResponseError::UnknownTopicOrPartition) => {
                Err(IoError::new(
                    FailureAction::Retriable,
                    strait_wire::error::error_name(ResponseError::UnknownTopicOrPartition),
                    format!(
                        "target topic {topic} does not exist; create it on the target cluster; \
                         retrying"
                    ),
                ))
            }
            Err(e) => Err(classify(&e)),
        }
    }

    async fn end_offset(&self, partition: &TopicPartition) -> Result<i64, IoError> {
        let listed = self
            .client
            .list_offset(partition, OffsetSpec::Latest, Isolation::ReadUncommitted)
            .await
            .map_err(|e| classify(&e))?;
        listed.offset.ok_or_else(|| {
            IoError::new(
                FailureAction::Retriable,
                "bad_response",
                format!("no end offset listed for {partition}"),
            )
        })
    }

    type Transactions = WireTransactions;

    fn transactions(
        &self,
        transactional_id: &str,
        transaction_timeout: std::time::Duration,
    ) -> Result<WireTransactions, IoError> {
        TransactionalProducer::new(&self.client, transactional_id, transaction_timeout)
            .map(|producer| WireTransactions { producer })
            .map_err(|e| classify(&e))
    }

    async fn stable_positions(
        &self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Option<i64>>, IoError> {
        // The same read as the source positions' (OffsetFetch with require_stable), on the
        // target's group.
        GroupPositions::new(&self.client, group_id)
            .load(partitions)
            .await
    }
}

/// One route's transactions over a `strait-wire` [`TransactionalProducer`].
pub struct WireTransactions {
    producer: TransactionalProducer,
}

impl WireTransactions {
    /// The error, classified by what the producer can still do: an abortable transaction and a
    /// fenced producer are told apart by the producer's state, whatever the broker's code was.
    fn failed(&self, e: &WireError) -> IoError {
        let mut io = classify(e);
        match self.producer.state() {
            // A refusal for lack of an ACL stays one: the route aborts, waits for the grant
            // (reported) and redoes the work, instead of redoing it at once, again and again.
            TxnState::AbortRequired if io.action != FailureAction::Denied => {
                io.action = FailureAction::Abortable
            }
            TxnState::Fatal if io.action != FailureAction::Denied => {
                io.action = FailureAction::Fenced
            }
            _ => {}
        }
        io
    }
}

impl Transactions for WireTransactions {
    async fn init(&mut self) -> Result<ProducerIdentity, IoError> {
        self.producer.init().await.map_err(|e| self.failed(&e))
    }

    async fn add_partition(
        &mut self,
        partition: &TopicPartition,
        group_id: &str,
    ) -> Result<(), IoError> {
        if self.producer.state() == TxnState::Ready {
            self.producer.begin().map_err(|e| self.failed(&e))?;
        }
        self.producer
            .add_partitions_and_group(std::slice::from_ref(partition), group_id)
            .await
            .map_err(|e| self.failed(&e))
    }

    async fn commit(
        &mut self,
        group_id: &str,
        positions: &[(TopicPartition, i64)],
    ) -> Result<(), IoError> {
        if self.producer.state() == TxnState::Ready {
            self.producer.begin().map_err(|e| self.failed(&e))?;
        }
        // A retry after a failed EndTxn must not add the offsets again.
        if self.producer.state() == TxnState::InTransaction {
            let offsets: Vec<CommitOffset> = positions
                .iter()
                .map(|(tp, o)| CommitOffset::new(tp.clone(), *o))
                .collect();
            // No members on the target group: positions are fenced by the transactional id
            // (a zombie's producer epoch is stale), not by a group generation.
            self.producer
                .send_offsets(group_id, &Generation::simple(), &offsets)
                .await
                .map_err(|e| self.failed(&e))?;
        }
        self.producer.commit().await.map_err(|e| self.failed(&e))
    }

    async fn abort(&mut self) -> Result<(), IoError> {
        match self.producer.state() {
            TxnState::Ready | TxnState::Uninitialized => Ok(()),
            _ => self.producer.abort().await.map_err(|e| self.failed(&e)),
        }
    }
}

/// Source positions stored as a consumer group's committed offsets on the source cluster, as
/// MirrorMaker does (so `kafka-consumer-groups --describe` shows the mirror's lag).
#[derive(Clone)]
pub struct GroupPositions {
    offsets: GroupOffsets,
    generation: Arc<Mutex<Generation>>,
}

impl GroupPositions {
    /// Positions of `group_id` on the source cluster, committed without group membership
    /// (a "simple" group) until [`set_generation`](Self::set_generation) is called.
    pub fn new(source: &Client, group_id: &str) -> Self {
        GroupPositions {
            offsets: GroupOffsets::new(source, group_id),
            generation: Arc::new(Mutex::new(Generation::simple())),
        }
    }

    /// Commits from now on carry this group membership (after each rebalance).
    pub fn set_generation(&self, generation: Generation) {
        *self.generation.lock().unwrap_or_else(|p| p.into_inner()) = generation;
    }
}

impl Positions for GroupPositions {
    async fn load(&self, partitions: &[TopicPartition]) -> Result<Vec<Option<i64>>, IoError> {
        let committed = self
            .offsets
            .fetch(partitions)
            .await
            .map_err(|e| classify(&e))?;
        Ok(partitions
            .iter()
            .map(|tp| committed.get(tp).and_then(|c| c.as_ref()).map(|c| c.offset))
            .collect())
    }

    async fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), IoError> {
        let generation = self
            .generation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let offsets: Vec<CommitOffset> = positions
            .iter()
            .map(|(tp, o)| CommitOffset::new(tp.clone(), *o))
            .collect();
        self.offsets
            .commit(&generation, &offsets)
            .await
            .map_err(|e| classify(&e))
    }
}

/// The forwarder over `strait-wire` clients.
pub type WireForwarder = Forwarder<WireSource, WireTarget, GroupPositions>;

/// Builds a [`WireForwarder`] from Kafka client configurations.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use strait_forward::{Forwarder, Route};
/// use strait_wire::{ClientConfig, TopicPartition};
///
/// let source = ClientConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?;
/// let target = ClientConfig::from_properties([("bootstrap.servers", "127.0.0.1:9192")])?;
/// // A cheap handle: clone it to share it between tasks.
/// let forwarder = Forwarder::builder().source(source).target(target).group_id("mirror").build().await?;
/// let tp = TopicPartition::new("orders", 0)?;
/// forwarder.assign(vec![Route { source: tp.clone(), target: tp }]).await?;
/// // ... later, a graceful stop: in-flight batches acknowledged, positions committed.
/// forwarder.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct ForwarderBuilder {
    source: Option<ClientConfig>,
    target: Option<ClientConfig>,
    group_id: String,
    settings: Settings,
    observer: Arc<dyn Observer>,
    commit_hook: Arc<dyn CommitHook>,
}

impl Default for ForwarderBuilder {
    fn default() -> Self {
        ForwarderBuilder {
            source: None,
            target: None,
            group_id: "strait".to_string(),
            settings: Settings::default(),
            observer: Arc::new(NoopObserver),
            commit_hook: Arc::new(NoCommitHook),
        }
    }
}

impl ForwarderBuilder {
    /// The source cluster's client configuration.
    pub fn source(mut self, config: ClientConfig) -> Self {
        self.source = Some(config);
        self
    }
    /// The target cluster's client configuration.
    pub fn target(mut self, config: ClientConfig) -> Self {
        self.target = Some(config);
        self
    }
    /// The consumer group on the source cluster holding the mirror's positions.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = group_id.into();
        self
    }
    /// Pipeline tuning.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }
    /// Metrics and tracing hooks.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }
    /// The commit path's hook (offset maps kept in step with the commits).
    pub fn commit_hook(mut self, hook: Arc<dyn CommitHook>) -> Self {
        self.commit_hook = hook;
        self
    }
    /// Connects to both clusters and gets the target producer id.
    pub async fn build(self) -> Result<WireForwarder, Error> {
        let (Some(source), Some(target)) = (self.source, self.target) else {
            return Err(Error::Settings {
                field: "source/target",
                detail: "both cluster configurations are required".into(),
            });
        };
        let source = Client::connect(source)
            .await
            .map_err(|e| Error::Io(classify(&e)))?;
        let target = Client::connect(target)
            .await
            .map_err(|e| Error::Io(classify(&e)))?;
        let positions = GroupPositions::new(&source, &self.group_id);
        Forwarder::with_commit_hook(
            WireSource::new(source),
            WireTarget::new(target),
            positions,
            self.settings,
            self.observer,
            self.commit_hook,
        )
        .await
    }
}

impl Forwarder<WireSource, WireTarget, GroupPositions> {
    /// A builder over `strait-wire` clients.
    pub fn builder() -> ForwarderBuilder {
        ForwarderBuilder::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn broker(code: ResponseError) -> WireError {
        WireError::Broker {
            code,
            context: "test".into(),
        }
    }

    #[test]
    fn wire_errors_map_to_the_pipeline_decisions() {
        let cases = [
            (
                broker(ResponseError::OffsetOutOfRange),
                FailureAction::OffsetOutOfRange,
            ),
            (
                broker(ResponseError::DuplicateSequenceNumber),
                FailureAction::Duplicate,
            ),
            (
                broker(ResponseError::OutOfOrderSequenceNumber),
                FailureAction::ProducerState,
            ),
            (
                broker(ResponseError::ProducerFenced),
                FailureAction::ProducerState,
            ),
            (
                broker(ResponseError::MessageTooLarge),
                FailureAction::TooLarge,
            ),
            (
                broker(ResponseError::TopicAuthorizationFailed),
                FailureAction::Denied,
            ),
            (
                broker(ResponseError::NotLeaderOrFollower),
                FailureAction::Retriable,
            ),
            (
                broker(ResponseError::NotCoordinator),
                FailureAction::Retriable,
            ),
            (
                broker(ResponseError::NotEnoughReplicasAfterAppend),
                FailureAction::Retriable,
            ),
            (broker(ResponseError::InvalidRecord), FailureAction::Fatal),
            (
                WireError::Timeout {
                    broker: "b:1".into(),
                    api: "Produce".into(),
                    after: Duration::from_secs(1),
                    setting: "request.timeout.ms",
                },
                FailureAction::Retriable,
            ),
        ];
        for (e, want) in cases {
            let got = classify(&e);
            assert_eq!(got.action, want, "{e}");
        }
        assert_eq!(
            classify(&broker(ResponseError::NotLeaderOrFollower)).code,
            "NOT_LEADER_OR_FOLLOWER"
        );
    }
}
