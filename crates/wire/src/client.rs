//! The cluster client: bootstrap, metadata cache, connections per broker, routing and retries.
//!
//! [`Client`] is cheap to clone. It keeps a metadata snapshot (refreshed on demand, when older
//! than `metadata.max.age.ms`, and after leadership errors), and a connection slot per node that
//! reconnects with exponential backoff (`reconnect.backoff.ms` .. `reconnect.backoff.max.ms`)
//! when the connection broke. A group coordinator gets a second slot of its own
//! (`ConnectionKind`): a broker serves one connection's requests in order,
//! and the coordinator holds a JoinGroup for up to the rebalance timeout, which would stall
//! every fetch and produce queued behind it on a shared connection. Typed operations (produce,
//! fetch, list offsets) route each partition to its leader and retry retriable errors with
//! backoff (`retry.backoff.ms` .. `retry.backoff.max.ms`) within `request.timeout.ms`, all
//! through one loop (`route.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use rand::seq::SliceRandom;

use crate::backoff::Backoff;
use crate::coalesce::Coalesced;
use crate::config::ClientConfig;
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::metadata::{self, ClusterMetadata, PartitionLeader, describe_topic_error};
use crate::resource_config::Configs;
use crate::route::UNKNOWN_TOPIC_RETRIES;
use crate::tls::TlsContext;
use crate::topic::TopicPartition;

/// A client for one Kafka cluster.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) config: ClientConfig,
    tls: Option<TlsContext>,
    principal: Option<String>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    refresh: tokio::sync::Mutex<()>,
    /// Refreshes of named topics, coalesced (see [`Client::metadata`]).
    topic_refresh: Coalesced<String, ()>,
    /// Topic configuration lookups, coalesced (see [`crate::admin::Admin::describe_topic_configs`]).
    pub(crate) topic_configs: Coalesced<String, Result<Configs>>,
    /// Single-partition offset lookups, coalesced (see [`Client::list_offset`]).
    pub(crate) offsets: Coalesced<
        (
            TopicPartition,
            crate::offsets::OffsetSpec,
            crate::fetch::Isolation,
        ),
        Result<crate::offsets::ListedOffset>,
    >,
    nodes: Mutex<HashMap<i32, Arc<NodeSlot>>>,
    /// Connections to group coordinators, apart from `nodes` (see [`ConnectionKind`]).
    coordinator_nodes: Mutex<HashMap<i32, Arc<NodeSlot>>>,
    /// Extra produce connections by (node, lane) (see [`Client::produce_connection`]).
    produce_lanes: Mutex<HashMap<(i32, u16), Arc<NodeSlot>>>,
    /// Coordinator connections of transactional producers, lanes 1.. (lane 0 is the
    /// coordinator connection).
    transaction_lanes: Mutex<HashMap<(i32, u16), Arc<NodeSlot>>>,
    /// Group/transaction coordinators by (key type, key), filled by the group module.
    pub(crate) coordinators: Mutex<HashMap<(i8, String), i32>>,
    /// Nodes seen not answering (see [`Client::unresponsive`]), and since when.
    unresponsive: Mutex<HashMap<i32, Instant>>,
    /// A request to a partition leader failed in transport (timeout, disconnect): the next
    /// lookup refreshes the metadata, as Kafka's client does after a disconnect. Without it a
    /// caller that does not retry (a non-idempotent produce fails on a timeout) keeps routing
    /// to a frozen leader until `metadata.max.age.ms`, long after leadership moved.
    refresh_due: std::sync::atomic::AtomicBool,
}

/// How long a node reported unresponsive is asked for metadata only after every other broker.
const UNRESPONSIVE_FOR: Duration = Duration::from_secs(60);

/// How long a metadata refresh waits for one broker (connection and answer) before it asks the
/// next, when there is a next (the last candidate gets all of `request.timeout.ms`). A frozen or
/// black-holed broker keeps its connections open and answers nothing; refreshes run one at a
/// time, so waiting `request.timeout.ms` for it would hold up every refresh behind it, and with
/// them the partitions whose leadership moved away from that broker. Metadata answers take
/// milliseconds; this leaves a loaded machine's slow answers room.
const METADATA_ANSWER_WITHIN: Duration = Duration::from_secs(5);

#[derive(Default)]
struct NodeSlot {
    state: tokio::sync::Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    conn: Option<Connection>,
    addr: String,
    /// `reconnect.backoff.ms` .. `reconnect.backoff.max.ms`, from the first failure on.
    backoff: Option<Backoff>,
    /// When the last attempt failed, and how long to wait after it.
    last_failure: Option<(Instant, Duration)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap", &self.inner.config.bootstrap_servers())
            .finish()
    }
}

impl Client {
    /// Reads the TLS files, connects to a bootstrap server and fetches the broker list.
    ///
    /// Bootstrap servers are tried in order; if none works the most telling error is returned
    /// (a TLS, SASL or configuration error rather than "connection refused").
    pub async fn connect(cfg: ClientConfig) -> Result<Client> {
        crate::cleartext::warn_once(&cfg);
        let tls = if cfg.security_protocol().uses_tls() {
            Some(TlsContext::new(cfg.tls())?)
        } else {
            None
        };
        let principal = cfg
            .sasl_principal()
            .or_else(|| tls.as_ref().and_then(|t| t.principal()));
        let client = Client {
            inner: Arc::new(ClientInner {
                config: cfg,
                tls,
                principal,
                metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
                refresh: tokio::sync::Mutex::new(()),
                topic_refresh: Coalesced::default(),
                topic_configs: Coalesced::default(),
                offsets: Coalesced::default(),
                nodes: Mutex::new(HashMap::new()),
                coordinator_nodes: Mutex::new(HashMap::new()),
                produce_lanes: Mutex::new(HashMap::new()),
                transaction_lanes: Mutex::new(HashMap::new()),
                coordinators: Mutex::new(HashMap::new()),
                unresponsive: Mutex::new(HashMap::new()),
                refresh_due: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        client.metadata(Some(&[])).await?;
        Ok(client)
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The principal the brokers most likely see (`User:alice` with SASL, `CN=alice` of the
    /// client certificate with mTLS), used in authorization errors.
    pub fn principal(&self) -> Option<&str> {
        self.inner.principal.as_deref()
    }

    /// The current metadata snapshot, without a network round trip.
    pub fn cached_metadata(&self) -> Arc<ClusterMetadata> {
        self.inner
            .metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn store_metadata(&self, md: ClusterMetadata) -> Arc<ClusterMetadata> {
        let md = Arc::new(md);
        *self
            .inner
            .metadata
            .write()
            .unwrap_or_else(|p| p.into_inner()) = md.clone();
        md
    }

    /// Fetches metadata and merges it into the cache; returns the merged snapshot.
    /// `None` fetches every topic (and drops topics that no longer exist from the cache);
    /// `Some(&[])` fetches only the broker list.
    ///
    /// Concurrent calls for named topics are coalesced: one request asks for the topics of every
    /// caller waiting at that moment, and a caller whose topics it covered returns its answer.
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<Arc<ClusterMetadata>> {
        let Some(names) = topics.filter(|t| !t.is_empty()) else {
            return self.refresh_metadata(topics).await;
        };
        self.inner
            .topic_refresh
            .get(names, |ask| async move {
                self.refresh_metadata(Some(&ask)).await?;
                Ok::<_, Error>(ask.into_iter().map(|t| (t, ())).collect())
            })
            .await?;
        Ok(self.cached_metadata())
    }

    /// One Metadata request, merged into the cache.
    async fn refresh_metadata(&self, topics: Option<&[String]>) -> Result<Arc<ClusterMetadata>> {
        let _one_at_a_time = self.inner.refresh.lock().await;
        let mut last_err = None;
        let candidates = self.metadata_candidates();
        let count = candidates.len();
        for (i, target) in candidates.into_iter().enumerate() {
            let node = match &target {
                Target::Node(id) => Some(*id),
                Target::Bootstrap(_) => None,
            };
            // Err: no connection; Ok: the connection and its answer.
            let attempt = async {
                let conn = match target {
                    Target::Node(id) => self.broker_known(id).await,
                    Target::Bootstrap(addr) => {
                        Connection::open(&addr, None, &self.inner.config, self.inner.tls.as_ref())
                            .await
                    }
                }?;
                let answer = metadata::fetch_metadata(&conn, topics).await;
                Ok::<_, Error>((conn, answer))
            };
            let within = if i + 1 < count {
                METADATA_ANSWER_WITHIN.min(self.inner.config.request_timeout())
            } else {
                self.inner.config.request_timeout()
            };
            // Dropping an unanswered attempt keeps its connection (a late answer is discarded),
            // so the broker's other requests in flight are not failed for it.
            let Ok(attempted) = tokio::time::timeout(within, attempt).await else {
                tracing::warn!(
                    node,
                    ?within,
                    "metadata: the broker did not answer in time; asking the next one"
                );
                if let Some(id) = node {
                    self.unresponsive(id);
                }
                continue;
            };
            let (conn, answer) = match attempted {
                Ok(attempted) => attempted,
                Err(e) => {
                    tracing::debug!(error = %e, "metadata: broker unavailable, trying the next");
                    last_err = Some(pick_telling(last_err, e));
                    continue;
                }
            };
            match answer {
                Ok(fresh) => {
                    if let Some(id) = conn.node_id() {
                        self.adopt(id, &conn, &fresh).await;
                    }
                    let merged = self.cached_metadata().merge(fresh, topics.is_none());
                    return Ok(self.store_metadata(merged));
                }
                Err(e) if e.is_retriable() || matches!(e, Error::Protocol { .. }) => {
                    conn.close();
                    last_err = Some(pick_telling(last_err, e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            Error::config(
                "bootstrap.servers",
                "no broker to ask for metadata; set bootstrap.servers",
            )
        }))
    }

    /// Reports that `node` has not answered a request for longer than it should (a frozen or
    /// black-holed broker keeps its connections open): for a while, metadata is asked of every
    /// other broker first, so that a refresh does not wait for `request.timeout.ms` on it.
    pub fn unresponsive(&self, node: i32) {
        self.inner
            .unresponsive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node, Instant::now());
    }

    /// Live connections first, then every known broker (random order), then brokers reported
    /// unresponsive, then bootstrap servers.
    fn metadata_candidates(&self) -> Vec<Target> {
        let md = self.cached_metadata();
        let nodes = self.inner.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let mut live = Vec::new();
        for (id, slot) in nodes.iter() {
            if let Ok(st) = slot.state.try_lock()
                && st.conn.as_ref().is_some_and(|c| !c.is_closed())
            {
                live.push(*id);
            }
        }
        drop(nodes);
        let mut others: Vec<i32> = md
            .brokers
            .keys()
            .copied()
            .filter(|id| !live.contains(id))
            .collect();
        let mut rng = rand::rng();
        live.shuffle(&mut rng);
        others.shuffle(&mut rng);
        let mut suspects: Vec<i32> = {
            let mut unresponsive = self
                .inner
                .unresponsive
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            unresponsive.retain(|_, at| at.elapsed() < UNRESPONSIVE_FOR);
            unresponsive.keys().copied().collect()
        };
        suspects.sort_unstable();
        live.retain(|id| !suspects.contains(id));
        others.retain(|id| !suspects.contains(id));
        suspects.retain(|id| md.brokers.contains_key(id));
        live.into_iter()
            .chain(others)
            .chain(suspects)
            .map(Target::Node)
            .chain(
                self.inner
                    .config
                    .bootstrap_servers()
                    .iter()
                    .cloned()
                    .map(Target::Bootstrap),
            )
            .collect()
    }

    /// Keeps a bootstrap connection as the connection of the node it turned out to be.
    async fn adopt(&self, id: i32, conn: &Connection, md: &ClusterMetadata) {
        let Some(info) = md.brokers.get(&id) else {
            return;
        };
        let slot = self.slot(ConnectionKind::Data, id);
        let mut st = slot.state.lock().await;
        if st.conn.as_ref().is_none_or(|c| c.is_closed()) && info.address() == conn.broker() {
            st.conn = Some(conn.clone());
            st.addr = conn.broker().to_owned();
        }
    }

    fn slot(&self, kind: ConnectionKind, node_id: i32) -> Arc<NodeSlot> {
        let slots = match kind {
            ConnectionKind::Data | ConnectionKind::Produce(0) => &self.inner.nodes,
            ConnectionKind::Coordinator | ConnectionKind::Transactions(0) => {
                &self.inner.coordinator_nodes
            }
            ConnectionKind::Transactions(lane) => {
                return self
                    .inner
                    .transaction_lanes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry((node_id, lane))
                    .or_default()
                    .clone();
            }
            ConnectionKind::Produce(lane) => {
                return self
                    .inner
                    .produce_lanes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry((node_id, lane))
                    .or_default()
                    .clone();
            }
        };
        slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(node_id)
            .or_default()
            .clone()
    }

    /// The data connection to node `node_id` (fetch, produce, metadata, admin requests): the
    /// cached one, or a new one (after the reconnect backoff if the last attempt failed).
    /// Refreshes the broker list if the node is unknown.
    pub async fn broker(&self, node_id: i32) -> Result<Connection> {
        self.connection(ConnectionKind::Data, node_id).await
    }

    /// A connection to node `node_id` for Produce requests: lane 0 is the data connection
    /// ([`broker`](Self::broker)), every other lane a connection of its own. A broker serves one
    /// connection's requests one at a time, and an acks=all Produce holds its connection until
    /// the followers have the data: requests on separate lanes wait for replication together
    /// instead of one after the other. Keep each partition on one lane, or its batches may
    /// arrive out of order.
    pub async fn produce_connection(&self, node_id: i32, lane: u16) -> Result<Connection> {
        self.connection(ConnectionKind::Produce(lane), node_id)
            .await
    }

    /// A connection to node `node_id` for a transactional producer's coordinator requests:
    /// lane 0 is the coordinator connection, every other lane a connection of its own. A
    /// broker serves one connection's requests one at a time, and each transaction call waits
    /// for its append to the transaction or offsets log: producers on separate lanes are served
    /// side by side instead of queueing behind each other's calls (measured: a mirror's routes,
    /// one transactional id each, waited 130-215 ms per call on one connection; see
    /// docs/exactly-once.md).
    pub async fn transaction_connection(&self, node_id: i32, lane: u16) -> Result<Connection> {
        self.connection(ConnectionKind::Transactions(lane), node_id)
            .await
    }

    /// Like [`broker`](Self::broker), but the connection of `kind` to the node.
    pub(crate) async fn connection(
        &self,
        kind: ConnectionKind,
        node_id: i32,
    ) -> Result<Connection> {
        if !self.cached_metadata().brokers.contains_key(&node_id) {
            self.metadata(Some(&[])).await?;
        }
        self.connect_known(kind, node_id).await
    }

    /// The data connection to a node, without refreshing (used while refreshing).
    async fn broker_known(&self, node_id: i32) -> Result<Connection> {
        self.connect_known(ConnectionKind::Data, node_id).await
    }

    async fn connect_known(&self, kind: ConnectionKind, node_id: i32) -> Result<Connection> {
        let Some(addr) = self
            .cached_metadata()
            .brokers
            .get(&node_id)
            .map(|b| b.address())
        else {
            return Err(Error::broker(
                ResponseError::BrokerNotAvailable,
                format!(
                    "node {node_id} is not in the cluster metadata (it may have left the cluster)"
                ),
            ));
        };
        let slot = self.slot(kind, node_id);
        let mut st = slot.state.lock().await;
        let now = tokio::time::Instant::now();
        // A connection whose SASL session is due for renewal stays usable until it expires, in
        // case its replacement cannot be opened yet.
        let mut renewing = None;
        if let Some(c) = &st.conn
            && !c.is_closed()
            && st.addr == addr
        {
            if !c.renewal_due(now) {
                return Ok(c.clone());
            }
            if !c.session_expired(now) {
                renewing = Some(c.clone());
            }
            tracing::debug!(
                broker = %addr,
                "the SASL session is ending (connections.max.reauth.ms): re-authenticating on a \
                 new connection; requests in flight finish on the old one"
            );
        }
        if let Some(old) = &renewing
            && st
                .last_failure
                .is_some_and(|(at, wait)| at.elapsed() < wait)
        {
            return Ok(old.clone());
        }
        st.conn = None;
        if let Some((at, wait)) = st.last_failure
            && let Some(left) = wait.checked_sub(at.elapsed())
        {
            tokio::time::sleep(left).await;
        }
        match Connection::open(
            &addr,
            Some(node_id),
            &self.inner.config,
            self.inner.tls.as_ref(),
        )
        .await
        {
            Ok(c) => {
                st.conn = Some(c.clone());
                st.addr = addr;
                if let Some(b) = &mut st.backoff {
                    b.reset();
                }
                st.last_failure = None;
                Ok(c)
            }
            Err(e) => {
                let config = &self.inner.config;
                let wait = st
                    .backoff
                    .get_or_insert_with(|| {
                        Backoff::new(config.reconnect_backoff(), config.reconnect_backoff_max())
                    })
                    .next_delay();
                st.last_failure = Some((Instant::now(), wait));
                match renewing {
                    Some(old) => {
                        tracing::debug!(broker = %addr, error = %e,
                            "re-authenticating on a new connection failed; the old one serves \
                             until its session ends");
                        st.conn = Some(old.clone());
                        Ok(old)
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// Any usable broker connection: a live one if there is one, else a new connection to a
    /// known broker, else to a bootstrap server.
    pub async fn any_broker(&self) -> Result<Connection> {
        let mut last_err = None;
        for target in self.metadata_candidates() {
            let r = match target {
                Target::Node(id) => self.broker_known(id).await,
                Target::Bootstrap(addr) => {
                    Connection::open(&addr, None, &self.inner.config, self.inner.tls.as_ref()).await
                }
            };
            match r {
                Ok(c) => return Ok(c),
                Err(e) if e.is_retriable() => last_err = Some(pick_telling(last_err, e)),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            Error::config(
                "bootstrap.servers",
                "no broker is known; set bootstrap.servers",
            )
        }))
    }

    /// Metadata that covers `topics` and is younger than `metadata.max.age.ms`; refreshes
    /// those topics if needed (or if `force`).
    pub(crate) async fn metadata_for(
        &self,
        topics: &[&str],
        force: bool,
    ) -> Result<Arc<ClusterMetadata>> {
        let md = self.cached_metadata();
        let stale = md.fetched_at.elapsed() > self.inner.config.metadata_max_age()
            || self
                .inner
                .refresh_due
                .swap(false, std::sync::atomic::Ordering::AcqRel);
        let missing = topics
            .iter()
            .any(|t| md.topic(t).is_none_or(|info| info.error.is_some()));
        if !(force || stale || missing) {
            return Ok(md);
        }
        let mut names: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
        names.sort();
        names.dedup();
        self.metadata(Some(&names)).await
    }

    /// A request to a leader failed in transport: the next [`metadata_for`](Self::metadata_for)
    /// refreshes (see `refresh_due`).
    pub(crate) fn leader_request_failed(&self) {
        self.inner
            .refresh_due
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The route of one partition in a snapshot, or the error that explains why there is none.
    pub(crate) fn route(
        &self,
        md: &ClusterMetadata,
        tp: &TopicPartition,
        operation: &str,
    ) -> Result<PartitionLeader> {
        let Some(topic) = md.topic(tp.topic()) else {
            return Err(Error::broker(
                ResponseError::UnknownTopicOrPartition,
                describe_topic_error(tp.topic(), ResponseError::UnknownTopicOrPartition),
            ));
        };
        if let Some(code) = topic.error {
            return Err(self.code_error(code, operation, tp, "Metadata"));
        }
        let Some(p) = topic.partition(tp.partition()) else {
            return Err(Error::broker(
                ResponseError::UnknownTopicOrPartition,
                format!(
                    "topic `{}` has {} partitions, so partition {} does not exist",
                    tp.topic(),
                    topic.partitions.len(),
                    tp.partition()
                ),
            ));
        };
        match p.leader {
            Some(leader) => Ok(PartitionLeader {
                leader,
                leader_epoch: p.leader_epoch,
                topic_id: topic.id,
            }),
            None => Err(Error::broker(
                p.error.unwrap_or(ResponseError::LeaderNotAvailable),
                format!("{tp} has no leader right now"),
            )),
        }
    }

    /// Turns a partition-level error code into the crate error, naming the principal for ACL
    /// errors.
    pub(crate) fn code_error(
        &self,
        code: ResponseError,
        operation: &str,
        tp: &TopicPartition,
        api: &str,
    ) -> Error {
        partition_error(code, self.principal(), operation, tp, api, None)
    }

    /// Retries connection errors within `request.timeout.ms`, and UNKNOWN_TOPIC_OR_PARTITION
    /// a few times only (a new topic reaches every broker within moments; a missing one
    /// should not cost the whole timeout).
    pub(crate) async fn retrying<T, F, Fut>(&self, api: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut unknown_topic = 0u32;
        let retriable = |err: &Error| {
            if err.code() == Some(ResponseError::UnknownTopicOrPartition) {
                unknown_topic += 1;
                if unknown_topic > UNKNOWN_TOPIC_RETRIES {
                    return false;
                }
            }
            err.is_retriable()
        };
        self.retry_while(api, retriable, attempt).await
    }

    /// The client's one retry loop for whole operations (partition-routed requests have
    /// `route_and_retry`): runs `attempt` until it succeeds, `retriable` refuses its error, or
    /// the next wait would end past `request.timeout.ms`. Sleeps the client's backoff between.
    pub(crate) async fn retry_while<T, F, Fut>(
        &self,
        api: &str,
        mut retriable: impl FnMut(&Error) -> bool,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut retry = self.retry();
        loop {
            let err = match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let Some(wait) = retry.next_wait().filter(|_| retriable(&err)) else {
                return Err(err);
            };
            tracing::debug!(api, error = %err, "retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// A retry budget for one operation.
    pub(crate) fn retry(&self) -> Retry {
        Retry::within(self.inner.config.request_timeout(), &self.inner.config)
    }
}

enum Target {
    Node(i32),
    Bootstrap(String),
}

/// Which of a node's connections a request uses.
///
/// Kafka serves one connection's requests strictly in order, and a group coordinator holds a
/// JoinGroup until every member has rejoined, up to the rebalance timeout (minutes). Group
/// requests therefore get a connection of their own to the coordinator, apart from the data
/// connection that carries fetches and produces to the same broker, as the Java consumer's
/// coordinator connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionKind {
    /// Fetch, Produce, Metadata, ListOffsets, admin requests.
    Data,
    /// Group coordinator requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
    /// OffsetFetch.
    Coordinator,
    /// Produce requests of one lane ([`Client::produce_connection`]); lane 0 is `Data`.
    Produce(u16),
    /// A transactional producer's coordinator requests, on one lane
    /// ([`Client::transaction_connection`]); lane 0 is `Coordinator`.
    Transactions(u16),
}

/// Keeps the error that best explains a failure: anything beats "cannot connect".
fn pick_telling(prev: Option<Error>, new: Error) -> Error {
    match prev {
        Some(p)
            if !matches!(
                p,
                Error::Connect { .. }
                    | Error::Timeout { .. }
                    | Error::WriteStalled { .. }
                    | Error::Disconnected { .. }
            ) && matches!(
                new,
                Error::Connect { .. }
                    | Error::Timeout { .. }
                    | Error::WriteStalled { .. }
                    | Error::Disconnected { .. }
            ) =>
        {
            p
        }
        _ => new,
    }
}

/// Retry bookkeeping for one operation: exponential backoff within a time budget.
pub(crate) struct Retry {
    start: Instant,
    budget: Duration,
    backoff: Backoff,
}

impl Retry {
    /// A budget of `budget` from now, with `retry.backoff.ms` .. `retry.backoff.max.ms`.
    pub(crate) fn within(budget: Duration, config: &ClientConfig) -> Retry {
        Retry {
            start: Instant::now(),
            budget,
            backoff: Backoff::for_retries(config),
        }
    }

    /// The wait before the next attempt, if that wait ends within the budget (for loops that
    /// must not overrun it); the caller sleeps.
    pub(crate) fn next_wait(&mut self) -> Option<Duration> {
        let wait = self.backoff.next_delay();
        (self.start.elapsed() + wait <= self.budget).then_some(wait)
    }

    /// Waits before the next attempt; `false` if the budget is spent.
    pub(crate) async fn wait(&mut self) -> bool {
        if self.start.elapsed() >= self.budget {
            return false;
        }
        tokio::time::sleep(self.backoff.next_delay()).await;
        true
    }

    /// How many retries have happened.
    pub(crate) fn attempts(&self) -> u32 {
        self.backoff.attempts()
    }
}

/// Maps a partition-level error code to the crate error with context and a fix.
pub(crate) fn partition_error(
    code: ResponseError,
    principal: Option<&str>,
    operation: &str,
    tp: &TopicPartition,
    api: &str,
    broker_message: Option<&str>,
) -> Error {
    let msg = broker_message
        .map(|m| format!(" (broker says: {m})"))
        .unwrap_or_default();
    let authz = |operation: &str, resource: String| Error::Authorization {
        code,
        principal: principal.map(str::to_owned),
        operation: operation.to_owned(),
        resource,
    };
    match code {
        ResponseError::TopicAuthorizationFailed => {
            // Metadata answers this when Describe is missing.
            let op = if api == "Metadata" {
                "Describe"
            } else {
                operation
            };
            authz(op, format!("Topic:{}", tp.topic()))
        }
        ResponseError::ClusterAuthorizationFailed => {
            authz(operation, "Cluster:kafka-cluster".into())
        }
        ResponseError::UnknownTopicOrPartition => Error::broker(
            code,
            format!(
                "{api} {tp}: {}{msg}",
                describe_topic_error(tp.topic(), code)
            ),
        ),
        ResponseError::OffsetOutOfRange => Error::broker(
            code,
            format!(
                "{api} {tp}: the offset is outside the partition's log (deleted by retention, or beyond its end); list offsets and restart from the earliest or latest{msg}"
            ),
        ),
        ResponseError::MessageTooLarge | ResponseError::RecordListTooLarge => Error::broker(
            code,
            format!(
                "{api} {tp}: the batch is larger than the topic's max.message.bytes; raise max.message.bytes on the topic (or message.max.bytes on the brokers), or send smaller batches{msg}"
            ),
        ),
        ResponseError::NotEnoughReplicas | ResponseError::NotEnoughReplicasAfterAppend => {
            Error::broker(
                code,
                format!(
                    "{api} {tp}: fewer in-sync replicas than min.insync.replicas; bring the stopped brokers back{msg}"
                ),
            )
        }
        ResponseError::NotLeaderOrFollower
        | ResponseError::LeaderNotAvailable
        | ResponseError::FencedLeaderEpoch
        | ResponseError::UnknownLeaderEpoch => Error::broker(
            code,
            format!(
                "{api} {tp}: this broker is not (or not yet) the partition's leader: leadership is moving, or a new topic is still settling; retried with fresh metadata, and if it persists check that the partition has a live leader{msg}"
            ),
        ),
        _ => Error::broker(code, format!("{api} {tp}{msg}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A wait that would end after the budget is not offered; one that fits is.
    #[test]
    fn a_retry_budget_offers_only_waits_that_fit() {
        let config = ClientConfig::from_properties([
            ("bootstrap.servers", "b:9092"),
            ("retry.backoff.ms", "100"),
            ("retry.backoff.max.ms", "1000"),
        ])
        .unwrap();
        let mut spent = Retry::within(Duration::ZERO, &config);
        assert_eq!(spent.next_wait(), None);
        let mut roomy = Retry::within(Duration::from_secs(3600), &config);
        for _ in 0..10 {
            let wait = roomy.next_wait().unwrap();
            assert!(wait <= Duration::from_millis(1000), "{wait:?}");
        }
        assert_eq!(roomy.attempts(), 10);
    }

    #[test]
    fn telling_errors_win_over_connect_errors() {
        let tls = Error::Tls {
            broker: "b:1".into(),
            reason: crate::error::TlsFailure::UntrustedBrokerCertificate,
            detail: "x".into(),
        };
        let conn = Error::connect(
            "b:2",
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        );
        assert!(matches!(pick_telling(Some(tls), conn), Error::Tls { .. }));
    }

    #[test]
    fn authorization_errors_name_principal_operation_and_resource() {
        let tp = TopicPartition::new("orders", 0).unwrap();
        let e = partition_error(
            ResponseError::TopicAuthorizationFailed,
            Some("User:bob"),
            "Write",
            &tp,
            "Produce",
            None,
        );
        match &e {
            Error::Authorization {
                principal,
                operation,
                resource,
                ..
            } => {
                assert_eq!(principal.as_deref(), Some("User:bob"));
                assert_eq!(operation, "Write");
                assert_eq!(resource, "Topic:orders");
            }
            other => panic!("{other:?}"),
        }
        let e = partition_error(
            ResponseError::TopicAuthorizationFailed,
            None,
            "Write",
            &tp,
            "Metadata",
            None,
        );
        assert!(
            e.to_string().contains("may not Describe Topic:orders"),
            "{e}"
        );
    }

    /// Fifty partitions of fifty topics asking for their topic's metadata at once (a mirror
    /// starting, or retrying topics the target has not created yet) share at most two Metadata
    /// requests, not fifty; each gets a snapshot that has its topic.
    #[tokio::test]
    async fn concurrent_topic_refreshes_share_requests() {
        use crate::fake_broker::{Reply, metadata_body_of, start};
        use kafka_protocol::messages::metadata_response::{
            MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
        };
        use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
        use kafka_protocol::protocol::{Decodable, StrBytes};
        use std::sync::atomic::{AtomicUsize, Ordering};

        let addr = Arc::new(Mutex::new(String::new()));
        let named_requests = Arc::new(AtomicUsize::new(0));
        let (addr2, named2) = (addr.clone(), named_requests.clone());
        let fake = start(move |key, _, mut body| {
            assert_eq!(key, 3, "only Metadata is asked");
            let req = MetadataRequest::decode(&mut body, 12).unwrap();
            let names: Vec<_> = req.topics.unwrap_or_default();
            if !names.is_empty() {
                named2.fetch_add(1, Ordering::SeqCst);
            }
            let (host, port) = {
                let a = addr2.lock().unwrap();
                let (h, p) = a.rsplit_once(':').unwrap();
                (h.to_owned(), p.parse::<i32>().unwrap())
            };
            let resp = MetadataResponse::default()
                .with_brokers(vec![
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_string(host))
                        .with_port(port),
                ])
                .with_topics(
                    names
                        .into_iter()
                        .map(|t| {
                            MetadataResponseTopic::default()
                                .with_name(t.name)
                                .with_partitions(vec![
                                    MetadataResponsePartition::default()
                                        .with_partition_index(0)
                                        .with_leader_id(BrokerId(1)),
                                ])
                        })
                        .collect(),
                );
            Reply::Frames(vec![metadata_body_of(&resp)])
        })
        .await;
        *addr.lock().unwrap() = fake.addr.clone();
        let cfg =
            ClientConfig::from_properties([("bootstrap.servers", fake.addr.as_str())]).unwrap();
        let client = Client::connect(cfg).await.unwrap();

        let mut callers = tokio::task::JoinSet::new();
        for i in 0..50 {
            let client = client.clone();
            callers.spawn(async move {
                let topic = format!("topic-{i}");
                let md = client
                    .metadata(Some(std::slice::from_ref(&topic)))
                    .await
                    .unwrap();
                assert!(
                    md.topic(&topic).is_some(),
                    "{topic} missing from its answer"
                );
            });
        }
        while let Some(done) = callers.join_next().await {
            done.unwrap();
        }
        let sent = named_requests.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&sent),
            "{sent} Metadata requests for 50 callers"
        );
        // Every topic stays in the cache, each once.
        assert_eq!(client.cached_metadata().topics.len(), 50);
        // A later call is not answered from the earlier refresh: it asks again.
        client
            .metadata(Some(&["topic-0".to_owned()]))
            .await
            .unwrap();
        assert_eq!(named_requests.load(Ordering::SeqCst), sent + 1);
    }

    /// A broker that stops answering while its connection stays open (SIGSTOP, a black hole)
    /// must not hold up metadata refreshes for `request.timeout.ms` (5 minutes here) while
    /// another broker can answer: refreshes run one at a time, and the partitions whose
    /// leadership moved away from the frozen broker wait for one. The frozen broker is the only
    /// live connection, so it is asked first.
    #[tokio::test]
    async fn a_frozen_broker_does_not_hold_up_metadata_refreshes() {
        use crate::fake_broker::{Reply, metadata_body_of, start};
        use kafka_protocol::messages::metadata_response::{
            MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
        };
        use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
        use kafka_protocol::protocol::{Decodable, StrBytes};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        // Both brokers answer with the same cluster: nodes 1 and 2, topic `t` led by node 1.
        let addrs: Arc<Mutex<Vec<String>>> = Arc::default();
        let answer = |addrs: &Arc<Mutex<Vec<String>>>, body: &mut bytes::Bytes| {
            let req = MetadataRequest::decode(body, 12).unwrap();
            let brokers = addrs
                .lock()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let (h, p) = a.rsplit_once(':').unwrap();
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(i as i32 + 1))
                        .with_host(StrBytes::from_string(h.to_owned()))
                        .with_port(p.parse().unwrap())
                })
                .collect();
            let topics = req
                .topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    MetadataResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(vec![
                            MetadataResponsePartition::default()
                                .with_partition_index(0)
                                .with_leader_id(BrokerId(1)),
                        ])
                })
                .collect();
            let resp = MetadataResponse::default()
                .with_brokers(brokers)
                .with_topics(topics);
            Reply::Frames(vec![metadata_body_of(&resp)])
        };
        let a_addrs = addrs.clone();
        let healthy = start(move |key, _, mut body| {
            assert_eq!(key, 3, "only Metadata is asked");
            answer(&a_addrs, &mut body)
        })
        .await;
        let frozen = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicUsize::new(0));
        let (b_addrs, b_frozen, b_held) = (addrs.clone(), frozen.clone(), held.clone());
        let freezing = start(move |key, _, mut body| {
            assert_eq!(key, 3, "only Metadata is asked");
            if b_frozen.load(Ordering::SeqCst) {
                b_held.fetch_add(1, Ordering::SeqCst);
                return Reply::Hold;
            }
            answer(&b_addrs, &mut body)
        })
        .await;
        *addrs.lock().unwrap() = vec![healthy.addr.clone(), freezing.addr.clone()];

        let cfg = ClientConfig::from_properties([
            ("bootstrap.servers", freezing.addr.as_str()),
            ("request.timeout.ms", "300000"),
        ])
        .unwrap();
        let client = Client::connect(cfg).await.unwrap();
        // The connection to node 2 is the only live one: a refresh asks it first.
        client.broker(2).await.unwrap();
        frozen.store(true, Ordering::SeqCst);

        // Generous bounds (a loaded machine), far below the 5-minute request timeout.
        let bound = Duration::from_secs(60);
        let topic = ["t".to_owned()];
        let md = tokio::time::timeout(bound, client.metadata(Some(&topic)))
            .await
            .expect("a refresh waited for the frozen broker")
            .unwrap();
        assert_eq!(md.leader(&TopicPartition::new("t", 0).unwrap()), Some(1));
        assert_eq!(
            held.load(Ordering::SeqCst),
            1,
            "the frozen broker was asked once"
        );
        // Later refreshes ask the other broker first.
        tokio::time::timeout(bound, client.metadata(Some(&topic)))
            .await
            .expect("the second refresh waited for the frozen broker")
            .unwrap();
        assert_eq!(
            held.load(Ordering::SeqCst),
            1,
            "the frozen broker was asked again"
        );
    }
}
