//! Consumer groups: coordinator lookup and membership, on either group protocol
//! ([`GroupProtocol`]):
//!
//! * classic: JoinGroup, SyncGroup, Heartbeat, LeaveGroup with a client-side assignor
//!   ("range", "roundrobin"); rebalancing is eager: a member gives up everything before it
//!   rejoins, so no partition is ever owned by two members of the same generation.
//! * consumer (KIP-848, Kafka 4.0+): ConsumerGroupHeartbeat with a server-side assignor
//!   (`group.remote.assignor`: "uniform", "range"); incremental: only the partitions that move
//!   are revoked, the others keep being owned through the rebalance. The member epoch is the
//!   generation of commits.
//!
//! [`GroupMember`] joins a group and runs a background task that heartbeats and follows
//! rebalances. The application learns what it owns from [`GroupEvent`]s, the same on both
//! protocols:
//!
//! * [`GroupEvent::Assigned`]: this member now also owns `partitions` (possibly none), and
//!   commits carry `generation` from now on ([`GroupMember::commit`]). On the classic eager
//!   protocol the member owned nothing before, so this is its whole assignment. On the consumer
//!   protocol and cooperative classic it is only what was added; an `Assigned` without
//!   partitions announces a new member epoch or generation (cooperative: just before the
//!   `Revoked` whose partitions are committed in it).
//! * [`GroupEvent::Revoked`]: give the partitions up (classic: everything; consumer: only what
//!   moves). When `lost` is false commits with the current generation still work: commit, then
//!   drop (or call [`Revocation::done`] on) the `done` handle so the member rejoins (classic)
//!   or acknowledges (consumer). When `lost` is true the coordinator already removed this
//!   member; commits for those partitions will fail.
//! * [`GroupEvent::Failed`]: the membership ended with a fatal error (e.g. FENCED_INSTANCE_ID,
//!   missing ACLs).
//!
//! Defaults are the Java consumer's: `group.protocol` classic, `session.timeout.ms` 45000,
//! `heartbeat.interval.ms` 3000 and a rebalance timeout of 300000 (Java's
//! `max.poll.interval.ms`, which the Java client sends as the rebalance timeout). On the
//! consumer protocol the broker sets the session timeout and heartbeat interval
//! (`group.consumer.session.timeout.ms`, `group.consumer.heartbeat.interval.ms`), unless the
//! group has its own ([`set_consumer_group_timeouts`]); the member uses its own session
//! timeout only to give its partitions up when it has not reached the coordinator for that long.

pub mod assignor;
mod consumer_member;
pub(crate) mod coordinator;
mod driver;
mod follow_up;
pub(crate) mod heartbeat;
pub(crate) mod membership;
pub(crate) mod protocol;
mod sticky;
mod timeouts;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use driver::Events;

pub use assignor::{Assignor, MemberSubscription, PartitionSet};
pub use coordinator::CoordinatorType;
pub use timeouts::set_consumer_group_timeouts;

use self::consumer_member::{ConsumerDriver, new_member_id, supports_consumer_protocol};
use self::coordinator::{CoordinatorCache, is_coordinator_error};
use self::heartbeat::ConsumerMembership;
use self::membership::{
    HeartbeatStep, JoinPlan, JoinReply, JoinStep, Membership, SyncReply, SyncStep,
};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::offset_commit::{CommitOffset, CommittedOffset, GroupOffsets};
use crate::topic::validate_topic_name;
use crate::{Client, Connection, TopicPartition};

/// Java's default `session.timeout.ms`.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);
/// Java's default `heartbeat.interval.ms`.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);
/// Java's default `max.poll.interval.ms`, which Java sends as the rebalance timeout.
pub const DEFAULT_REBALANCE_TIMEOUT: Duration = Duration::from_secs(300);

/// Who a commit is made as: a member of one generation of a group, or nobody (a "simple" group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The generation id; -1 for a simple (memberless) commit.
    pub generation_id: i32,
    /// The member id the coordinator assigned; empty for a simple commit.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
}

impl Generation {
    /// No membership: commits are accepted only while the group has no active members.
    pub fn simple() -> Generation {
        Generation {
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Settings of one group member.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    group_id: String,
    topics: Vec<String>,
    group_instance_id: Option<String>,
    session_timeout: Duration,
    heartbeat_interval: Duration,
    rebalance_timeout: Duration,
    assignors: Vec<Assignor>,
    metadata_check_interval: Option<Duration>,
    protocol: GroupProtocol,
    remote_assignor: Option<String>,
    leave_on_close: Option<bool>,
}

/// Which group protocol a member speaks (Kafka's `group.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat with a client-side assignor (every Kafka version).
    #[default]
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat with a server-side assignor (Kafka 4.0+).
    Consumer,
    /// `Consumer` when the group coordinator supports ConsumerGroupHeartbeat, else `Classic`.
    Auto,
}

impl GroupProtocol {
    /// From Kafka's `group.protocol` values (`classic`, `consumer`) or `auto`.
    pub fn from_name(name: &str) -> Option<GroupProtocol> {
        match name.trim().to_ascii_lowercase().as_str() {
            "classic" => Some(GroupProtocol::Classic),
            "consumer" => Some(GroupProtocol::Consumer),
            "auto" => Some(GroupProtocol::Auto),
            _ => None,
        }
    }

    /// The name in Kafka's `group.protocol`.
    pub fn name(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
            GroupProtocol::Auto => "auto",
        }
    }
}

/// The group properties [`GroupConfig::from_properties`] understands.
pub const GROUP_KEYS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "group.protocol",
    "group.remote.assignor",
];

impl GroupConfig {
    /// A member of `group_id` subscribed to `topics`, with the Java defaults
    /// (assignors: range, then roundrobin).
    pub fn new<I, S>(group_id: impl Into<String>, topics: I) -> Result<GroupConfig>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let cfg = GroupConfig {
            group_id: group_id.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            group_instance_id: None,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            rebalance_timeout: DEFAULT_REBALANCE_TIMEOUT,
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            metadata_check_interval: None,
            protocol: GroupProtocol::Classic,
            remote_assignor: None,
            leave_on_close: None,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// From Kafka consumer property names ([`GROUP_KEYS`]; `max.poll.interval.ms` is the
    /// rebalance timeout, as in Java). `group.id` is required; other keys are errors (pass the
    /// leftovers of [`ClientConfig::from_properties_lenient`](crate::ClientConfig::from_properties_lenient)).
    pub fn from_properties<I, K, V, T, S>(topics: T, props: I) -> Result<GroupConfig>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
        T: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut map: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in props {
            let k = k.as_ref().trim();
            if !GROUP_KEYS.contains(&k) {
                return Err(Error::config(
                    k,
                    format!(
                        "unknown consumer-group property; remove it. Known: {}",
                        GROUP_KEYS.join(", ")
                    ),
                ));
            }
            if map
                .insert(k.to_owned(), v.as_ref().trim().to_owned())
                .is_some()
            {
                return Err(Error::config(k, "set more than once; keep a single value"));
            }
        }
        let Some(group_id) = map.remove("group.id") else {
            return Err(Error::config(
                "group.id",
                "is required for a consumer group; set it",
            ));
        };
        let mut cfg = GroupConfig::new(group_id, topics)?;
        let millis = |key: &str, v: &str| -> Result<Duration> {
            v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
                Error::config(key, format!("`{v}` is not a whole number of milliseconds"))
            })
        };
        if let Some(v) = map.remove("group.instance.id") {
            cfg.group_instance_id = (!v.is_empty()).then_some(v);
        }
        if let Some(v) = map.remove("session.timeout.ms") {
            cfg.session_timeout = millis("session.timeout.ms", &v)?;
        }
        if let Some(v) = map.remove("heartbeat.interval.ms") {
            cfg.heartbeat_interval = millis("heartbeat.interval.ms", &v)?;
        }
        if let Some(v) = map.remove("max.poll.interval.ms") {
            cfg.rebalance_timeout = millis("max.poll.interval.ms", &v)?;
        }
        if let Some(v) = map.remove("partition.assignment.strategy") {
            let mut assignors = Vec::new();
            for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let short = match name {
                    "org.apache.kafka.clients.consumer.RangeAssignor" => "range",
                    "org.apache.kafka.clients.consumer.RoundRobinAssignor" => "roundrobin",
                    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor" => {
                        "cooperative-sticky"
                    }
                    other => other,
                };
                let Some(a) = Assignor::from_name(short) else {
                    return Err(Error::config(
                        "partition.assignment.strategy",
                        format!(
                            "`{name}` is not supported; use range, roundrobin or cooperative-sticky"
                        ),
                    ));
                };
                if !assignors.contains(&a) {
                    assignors.push(a);
                }
            }
            cfg.assignors = assignors;
        }
        if let Some(v) = map.remove("group.protocol") {
            cfg.protocol = GroupProtocol::from_name(&v).ok_or_else(|| {
                Error::config(
                    "group.protocol",
                    format!("`{v}` is not classic, consumer or auto"),
                )
            })?;
        }
        if let Some(v) = map.remove("group.remote.assignor") {
            cfg.remote_assignor = (!v.is_empty()).then_some(v);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets `session.timeout.ms`: the coordinator removes a member it has not heard from for
    /// this long. The broker accepts 6 s to 30 min by default.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.session_timeout = timeout;
        self.validate().map(|()| self)
    }

    /// Sets `heartbeat.interval.ms` (must be below the session timeout; a third is usual).
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Result<Self> {
        self.heartbeat_interval = interval;
        self.validate().map(|()| self)
    }

    /// Sets the rebalance timeout: how long the coordinator waits for members to rejoin, and
    /// how long this member waits for the application to finish a revocation.
    pub fn with_rebalance_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.rebalance_timeout = timeout;
        self.validate().map(|()| self)
    }

    /// Makes the member static (KIP-345) with this `group.instance.id`.
    pub fn with_group_instance_id(mut self, id: impl Into<String>) -> Result<Self> {
        self.group_instance_id = Some(id.into());
        self.validate().map(|()| self)
    }

    /// The assignors to offer, most preferred first.
    pub fn with_assignors(mut self, assignors: &[Assignor]) -> Result<Self> {
        self.assignors = assignors.to_vec();
        self.validate().map(|()| self)
    }

    /// How often the member checks the partition counts of its topics and rejoins when they
    /// changed. Default: the client's `metadata.max.age.ms`.
    pub fn with_metadata_check_interval(mut self, interval: Duration) -> Self {
        self.metadata_check_interval = Some(interval);
        self
    }

    /// The group protocol (default: classic, as Java's `group.protocol`).
    pub fn with_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The server-side assignor the consumer protocol asks for (`group.remote.assignor`,
    /// e.g. `uniform` or `range`); `None` leaves the choice to the broker. The classic
    /// protocol ignores it.
    pub fn with_remote_assignor(mut self, assignor: Option<String>) -> Result<Self> {
        self.remote_assignor = assignor;
        self.validate().map(|()| self)
    }

    /// Whether [`GroupMember::close`] leaves the group so the partitions move at once.
    /// Default: dynamic members leave, static members do not (a restart with the same
    /// `group.instance.id` gets the same partitions back without a rebalance). `true` for a
    /// static member that is removed for good (a scale-down).
    pub fn with_leave_on_close(mut self, leave: bool) -> Self {
        self.leave_on_close = Some(leave);
        self
    }

    /// The configured group protocol.
    pub fn protocol(&self) -> GroupProtocol {
        self.protocol
    }

    /// Whether closing leaves the group (see [`with_leave_on_close`](Self::with_leave_on_close)).
    pub fn leaves_on_close(&self) -> bool {
        self.leave_on_close
            .unwrap_or(self.group_instance_id.is_none())
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// The subscribed topics.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    fn validate(&self) -> Result<()> {
        if self.group_id.is_empty() {
            return Err(Error::config("group.id", "is empty; set a group id"));
        }
        if self.topics.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "consumer group '{}' has no topics to subscribe to; pass at least one",
                self.group_id
            )));
        }
        for t in &self.topics {
            validate_topic_name(t)?;
        }
        if self.group_instance_id.as_deref() == Some("") {
            return Err(Error::config(
                "group.instance.id",
                "is empty; unset it or give it a value",
            ));
        }
        if self.remote_assignor.as_deref() == Some("") {
            return Err(Error::config(
                "group.remote.assignor",
                "is empty; unset it or name a broker assignor (uniform, range)",
            ));
        }
        if self.assignors.is_empty() {
            return Err(Error::config(
                "partition.assignment.strategy",
                "is empty; offer at least one assignor (range, roundrobin, cooperative-sticky)",
            ));
        }
        let max = Duration::from_millis(i32::MAX as u64);
        for (key, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("heartbeat.interval.ms", self.heartbeat_interval),
            ("max.poll.interval.ms", self.rebalance_timeout),
        ] {
            if d.is_zero() || d > max {
                return Err(Error::config(
                    key,
                    format!("{d:?} is out of range (1 ms to {max:?})"),
                ));
            }
        }
        if self.heartbeat_interval >= self.session_timeout {
            return Err(Error::config(
                "heartbeat.interval.ms",
                format!(
                    "{:?} is not below session.timeout.ms ({:?}); use about a third of it",
                    self.heartbeat_interval, self.session_timeout
                ),
            ));
        }
        Ok(())
    }
}

fn millis_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// What happened to this member's partitions.
#[derive(Debug)]
#[non_exhaustive]
pub enum GroupEvent {
    /// This member owns `partitions` in `generation` (possibly none).
    Assigned {
        /// Commit with this.
        generation: Generation,
        /// Sorted by topic, then partition.
        partitions: Vec<TopicPartition>,
    },
    /// This member must stop working on `partitions`.
    Revoked {
        /// What it owned.
        partitions: Vec<TopicPartition>,
        /// True if the membership was already gone: commits for these partitions will fail.
        /// False for a normal rebalance: commit what was processed, then release `done`.
        lost: bool,
        /// Drop it (or call [`Revocation::done`]) once the partitions are released; the member
        /// rejoins then (or shortly before the rebalance timeout at the latest). Nothing waits
        /// for it when `lost` is true.
        done: Revocation,
    },
    /// The membership ended with a fatal error; no more events follow.
    Failed(Error),
}

/// Held by the application while it releases revoked partitions.
#[derive(Debug)]
pub struct Revocation {
    _release: oneshot::Sender<()>,
}

impl Revocation {
    /// The partitions are released; the member may rejoin.
    pub fn done(self) {
        drop(self);
    }
}

/// A member of a classic consumer group. See the [module docs](self).
///
/// [`close`](GroupMember::close) leaves the group (LeaveGroup) so the others rebalance at once.
/// Dropping the member without closing stops heartbeats silently: the coordinator removes it
/// after the session timeout, like a crashed process.
pub struct GroupMember {
    shared: Arc<Shared>,
    events: mpsc::UnboundedReceiver<GroupEvent>,
    close: Option<oneshot::Sender<oneshot::Sender<Result<()>>>>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    client: Client,
    config: GroupConfig,
    membership: Mutex<Membership>,
    /// Set when the member speaks the consumer protocol (KIP-848); `membership` is unused then.
    consumer: Option<Arc<Mutex<ConsumerMembership>>>,
    coordinator: CoordinatorCache,
    offsets: GroupOffsets,
}

impl Shared {
    fn membership(&self) -> MutexGuard<'_, Membership> {
        self.membership
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn consumer(&self) -> Option<MutexGuard<'_, ConsumerMembership>> {
        self.consumer
            .as_ref()
            .map(|c| c.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The protocol to use: `Auto` asks the coordinator whether it runs the consumer protocol.
async fn resolve_protocol(
    coordinator: &CoordinatorCache,
    wanted: GroupProtocol,
) -> Result<GroupProtocol> {
    if wanted != GroupProtocol::Auto {
        return Ok(wanted);
    }
    let conn = coordinator.get().await?;
    Ok(if supports_consumer_protocol(&conn) {
        GroupProtocol::Consumer
    } else {
        GroupProtocol::Classic
    })
}

impl GroupMember {
    /// Starts joining the group in the background; the first event is normally
    /// [`GroupEvent::Assigned`].
    pub async fn join(client: &Client, config: GroupConfig) -> Result<GroupMember> {
        config.validate()?;
        let coordinator =
            CoordinatorCache::new(client.clone(), CoordinatorType::Group, &config.group_id);
        let protocol = resolve_protocol(&coordinator, config.protocol).await?;
        tracing::debug!(group = %config.group_id, protocol = protocol.name(), "joining consumer group");
        let consumer = (protocol == GroupProtocol::Consumer).then(|| {
            Arc::new(Mutex::new(ConsumerMembership::new(
                config.group_id.clone(),
                config.group_instance_id.clone(),
                config.topics.clone(),
                config.remote_assignor.clone(),
                config.rebalance_timeout,
                new_member_id(),
                config.heartbeat_interval,
                Instant::now(),
            )))
        });
        let shared = Arc::new(Shared {
            client: client.clone(),
            membership: Mutex::new(Membership::new(
                config.group_id.clone(),
                config.group_instance_id.clone(),
                config.topics.clone(),
                config.assignors.clone(),
            )),
            consumer: consumer.clone(),
            offsets: GroupOffsets::with_coordinator(coordinator.clone()),
            coordinator,
            config,
        });
        let (events_tx, events) = mpsc::unbounded_channel();
        let (close_tx, close_rx) = oneshot::channel();
        let events_tx = Events::new(events_tx);
        let task = match consumer {
            Some(membership) => tokio::spawn(driver::run(
                ConsumerDriver {
                    shared: shared.clone(),
                    membership,
                    events: events_tx,
                },
                close_rx,
            )),
            None => tokio::spawn(driver::run(
                Driver {
                    shared: shared.clone(),
                    events: events_tx,
                },
                close_rx,
            )),
        };
        Ok(GroupMember {
            shared,
            events,
            close: Some(close_tx),
            task: Some(task),
        })
    }

    /// The next event; `None` once the member has closed or failed (after the `Failed` event).
    pub async fn next_event(&mut self) -> Option<GroupEvent> {
        self.events.recv().await
    }

    /// The generation this member currently owns partitions in.
    pub fn generation(&self) -> Option<Generation> {
        match self.shared.consumer() {
            Some(c) => c.generation(),
            None => self.shared.membership().generation(),
        }
    }

    /// The group protocol this member speaks (`Auto` resolved).
    pub fn protocol(&self) -> GroupProtocol {
        if self.shared.consumer.is_some() {
            GroupProtocol::Consumer
        } else {
            GroupProtocol::Classic
        }
    }

    /// The partitions owned right now: still listed while a revocation is in progress, empty
    /// from its release until the next assignment.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        let owned = match self.shared.consumer() {
            Some(c) => c.owned(),
            None => self.shared.membership().owned().clone(),
        };
        to_topic_partitions(&owned).unwrap_or_default()
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    /// Commits offsets as `generation` (from [`GroupEvent::Assigned`]).
    ///
    /// Fails without contacting the broker if this member already knows the generation is
    /// over (it has revoked or lost its partitions, or joined a newer generation); the broker
    /// rejects it too if the group has moved on meanwhile. In both cases
    /// [`Error::is_stale_membership`] is true and nothing was committed.
    pub async fn commit(&self, generation: &Generation, offsets: &[CommitOffset]) -> Result<()> {
        let consumer = self.shared.consumer().map(|c| c.check_commit(generation));
        match consumer {
            // The member epoch moves on with every reconciliation: send the current one.
            Some(current) => self.shared.offsets.commit(&current?, offsets).await,
            None => {
                self.shared.membership().check_commit(generation)?;
                self.shared.offsets.commit(generation, offsets).await
            }
        }
    }

    /// The committed offsets of `partitions` in this group.
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        self.shared.offsets.fetch(partitions).await
    }

    /// Leaves the group and stops: LeaveGroup (classic) or a heartbeat with member epoch -1
    /// (consumer protocol) when [`GroupConfig::leaves_on_close`], so the partitions move at
    /// once; otherwise a static member keeps its assignment until the session timeout (epoch -2
    /// on the consumer protocol; nothing on classic, like Java). Commit before closing.
    pub async fn close(mut self) -> Result<()> {
        let (reply_tx, reply_rx) = oneshot::channel();
        let sent = self.close.take().is_some_and(|c| c.send(reply_tx).is_ok());
        let result = if sent {
            reply_rx.await.unwrap_or(Ok(()))
        } else {
            Ok(())
        };
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        result
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = self.shared.consumer() {
            return f
                .debug_struct("GroupMember")
                .field("group_id", &c.group_id())
                .field("member_id", &c.member_id())
                .field("epoch", &c.epoch())
                .field("state", &c.state())
                .finish();
        }
        let m = self.shared.membership();
        f.debug_struct("GroupMember")
            .field("group_id", &m.group_id())
            .field("member_id", &m.member_id())
            .field("phase", &m.phase())
            .finish()
    }
}

fn to_topic_partitions(set: &PartitionSet) -> Result<Vec<TopicPartition>> {
    set.iter().map(|(t, p)| TopicPartition::new(t, p)).collect()
}

/// What a SyncGroup changed for this member.
struct Synced {
    added: PartitionSet,
    /// Cooperative only: owned before, not in the new assignment.
    revoked: PartitionSet,
}

/// How a stable period ended.
enum Change {
    Rebalance,
    Lost(PartitionSet),
}

struct Driver {
    shared: Arc<Shared>,
    events: Events,
}

impl driver::Membership for Driver {
    fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    fn events(&self) -> &Events {
        &self.events
    }

    async fn membership_loop(&self) -> Result<std::convert::Infallible> {
        Driver::membership_loop(self).await
    }

    async fn leave(&self) -> Result<()> {
        Driver::leave(self).await
    }

    fn fail_now(&self) -> PartitionSet {
        self.shared.membership().fail_now()
    }
}

impl Driver {
    fn emit(&self, event: GroupEvent) {
        self.events.emit(event);
    }

    fn emit_revoked(&self, partitions: &PartitionSet, lost: bool) -> oneshot::Receiver<()> {
        self.events.revoked(partitions, lost)
    }

    fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    /// Join, own, heartbeat, revoke, rejoin... until a fatal error.
    async fn membership_loop(&self) -> Result<std::convert::Infallible> {
        loop {
            let (generation, sync, leader_counts) = self.join_and_sync().await?;
            tracing::info!(
                group = self.group_id(),
                generation = generation.generation_id,
                member = %generation.member_id,
                added = sync.added.len(),
                revoked = sync.revoked.len(),
                "joined consumer group"
            );
            // Cooperative (KIP-429): give up only what the new assignment lacks, then rejoin
            // once more so the group hands it to its new owner.
            if !sync.revoked.is_empty() {
                // The generation that revokes is the one to commit the revoked partitions in
                // (as Kafka's consumer does): announce it first, or the application commits
                // with the previous one and the broker refuses (ILLEGAL_GENERATION), so the
                // next owner re-mirrors from the last periodic commit.
                self.emit(GroupEvent::Assigned {
                    generation: generation.clone(),
                    partitions: Vec::new(),
                });
                let done = self.emit_revoked(&sync.revoked, false);
                if let Some(lost) = self.wait_for_release(done).await? {
                    // What the application had (not the revoked, not the unannounced added).
                    let had = lost.difference(&sync.revoked).difference(&sync.added);
                    tracing::warn!(
                        group = self.group_id(),
                        "consumer group membership lost; rejoining"
                    );
                    if !had.is_empty() {
                        self.emit_revoked(&had, true);
                    }
                    continue;
                }
                self.shared
                    .membership()
                    .finish_cooperative_revoke(&sync.revoked);
            }
            self.emit(GroupEvent::Assigned {
                generation,
                partitions: to_topic_partitions(&sync.added)?,
            });
            if !sync.revoked.is_empty() {
                continue;
            }
            let baseline = match leader_counts {
                Some(c) => Some(c),
                None => self.partition_counts().await.ok(),
            };
            let cooperative = self.shared.membership().is_cooperative();
            match self.stable(baseline).await? {
                // Cooperative members rejoin keeping their partitions.
                Change::Rebalance if cooperative => {}
                Change::Rebalance => self.revoke().await?,
                Change::Lost(partitions) => {
                    tracing::warn!(
                        group = self.group_id(),
                        "consumer group membership lost; rejoining"
                    );
                    self.emit_revoked(&partitions, true);
                }
            }
        }
    }

    /// Partition counts of the subscribed topics that exist.
    async fn partition_counts(&self) -> Result<BTreeMap<String, i32>> {
        let topics: BTreeSet<String> = self.shared.config.topics.iter().cloned().collect();
        partition_counts(&self.shared.client, &topics).await
    }

    async fn join_and_sync(&self) -> Result<(Generation, Synced, Option<BTreeMap<String, i32>>)> {
        let config = self.shared.client.config().clone();
        let mut backoff = Backoff::for_retries(&config);
        loop {
            let plan = self.shared.membership().join_request()?;
            let conn = match self.shared.coordinator.get().await {
                Ok(c) => c,
                Err(e) => {
                    self.transport_error(e, &mut backoff).await?;
                    continue;
                }
            };
            let reply =
                match send_join(&conn, &self.shared.config, config.request_timeout(), plan).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.transport_error(e, &mut backoff).await?;
                        continue;
                    }
                };
            let step = self.shared.membership().on_join_response(reply);
            let (assignments, counts) = match step {
                JoinStep::Rejoin => continue,
                JoinStep::Backoff => {
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                JoinStep::FindCoordinator => {
                    self.shared.coordinator.invalidate();
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
                JoinStep::Fatal(e) => return Err(with_principal(e, &conn)),
                JoinStep::Follow => (Vec::new(), None),
                JoinStep::Lead { protocol, members } => {
                    let topics: BTreeSet<String> = members
                        .iter()
                        .flat_map(|m| m.topics.iter().cloned())
                        .collect();
                    let counts = match partition_counts(&self.shared.client, &topics).await {
                        Ok(c) => c,
                        Err(e) => {
                            self.transport_error(e, &mut backoff).await?;
                            continue;
                        }
                    };
                    let assignments = self
                        .shared
                        .membership()
                        .leader_assignments(protocol, &members, &counts)?;
                    tracing::debug!(
                        group = self.group_id(),
                        members = members.len(),
                        assignor = protocol.name(),
                        "computed the group assignment as leader"
                    );
                    (assignments, Some(counts))
                }
            };
            let identity = self.shared.membership().identity();
            let protocol = self.shared.membership().protocol();
            let reply =
                match send_sync(&conn, self.group_id(), &identity, protocol, assignments).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.transport_error(e, &mut backoff).await?;
                        continue;
                    }
                };
            let step = self.shared.membership().on_sync_response(reply);
            match step {
                SyncStep::Assigned {
                    generation,
                    added,
                    revoked,
                } => return Ok((generation, Synced { added, revoked }, counts)),
                SyncStep::Rejoin => continue,
                SyncStep::Backoff => tokio::time::sleep(backoff.next_delay()).await,
                SyncStep::FindCoordinator => {
                    self.shared.coordinator.invalidate();
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                SyncStep::Fatal(e) => return Err(with_principal(e, &conn)),
            }
        }
    }

    /// A request failed without a group answer: retriable errors wait and retry (the
    /// coordinator is looked up again), others end the membership.
    async fn transport_error(&self, e: Error, backoff: &mut Backoff) -> Result<()> {
        self.shared.membership().abort_round();
        if !e.is_retriable() {
            return Err(e);
        }
        if is_coordinator_error(&e) {
            self.shared.coordinator.invalidate();
        }
        tracing::debug!(group = self.group_id(), error = %e, "group request failed; retrying");
        tokio::time::sleep(backoff.next_delay()).await;
        Ok(())
    }

    /// Heartbeats until a rebalance starts or the membership is lost.
    async fn stable(&self, mut baseline: Option<BTreeMap<String, i32>>) -> Result<Change> {
        let cfg = &self.shared.config;
        let check_every = cfg
            .metadata_check_interval
            .unwrap_or_else(|| self.shared.client.config().metadata_max_age());
        let mut next_check = Instant::now() + check_every;
        let mut last_ok = Instant::now();
        // A cooperative rebalance may need a second round (the revoking members rejoin at
        // once); the others hear of it only from a heartbeat, so they ask soon for a while.
        let mut follow_up = follow_up::FollowUps::default();
        if self.shared.membership().is_cooperative() {
            follow_up.changed(last_ok);
        }
        let mut sent = last_ok;
        loop {
            let wait = follow_up.wait(sent, cfg.heartbeat_interval);
            tokio::time::sleep_until(tokio::time::Instant::from_std(sent + wait)).await;
            sent = Instant::now();
            if let Some(change) = self.heartbeat(&mut last_ok).await? {
                return Ok(change);
            }
            if Instant::now() >= next_check {
                next_check = Instant::now() + check_every;
                match self.partition_counts().await {
                    Ok(counts) => match &baseline {
                        Some(b) if *b != counts => {
                            tracing::info!(
                                group = self.group_id(),
                                "partition counts of the subscribed topics changed; rejoining"
                            );
                            if self.shared.membership().request_rebalance() {
                                return Ok(Change::Rebalance);
                            }
                        }
                        Some(_) => {}
                        None => baseline = Some(counts),
                    },
                    Err(e) => {
                        tracing::debug!(group = self.group_id(), error = %e, "metadata check failed")
                    }
                }
            }
        }
    }

    /// One heartbeat. `last_ok` is when the last heartbeat the coordinator accepted was sent.
    async fn heartbeat(&self, last_ok: &mut Instant) -> Result<Option<Change>> {
        if last_ok.elapsed() > self.shared.config.session_timeout {
            // The coordinator has certainly expired this member by now.
            let lost = self.shared.membership().lose_all(false);
            return Ok(Some(Change::Lost(lost)));
        }
        let identity = self.shared.membership().identity();
        let conn = match self.shared.coordinator.get().await {
            Ok(c) => c,
            Err(e) if e.is_retriable() => return Ok(None),
            Err(e) => return Err(e),
        };
        let sent = Instant::now();
        let error = match send_heartbeat(&conn, self.group_id(), &identity).await {
            Ok(code) => code,
            Err(e) if e.is_retriable() => {
                tracing::debug!(group = self.group_id(), error = %e, "heartbeat failed");
                self.shared.coordinator.invalidate();
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if matches!(error, None | Some(ResponseError::RebalanceInProgress)) {
            *last_ok = sent;
        }
        let step = self.shared.membership().on_heartbeat(error);
        match step {
            HeartbeatStep::Continue => Ok(None),
            HeartbeatStep::Rebalance => Ok(Some(Change::Rebalance)),
            HeartbeatStep::Lost { partitions } => Ok(Some(Change::Lost(partitions))),
            HeartbeatStep::FindCoordinator => {
                self.shared.coordinator.invalidate();
                Ok(None)
            }
            HeartbeatStep::Fatal { partitions, error } => {
                if !partitions.is_empty() {
                    self.emit_revoked(&partitions, true);
                }
                Err(with_principal(error, &conn))
            }
        }
    }

    /// A rebalance started: hand the partitions back, keep heartbeating while the
    /// application commits, then get ready to rejoin.
    async fn revoke(&self) -> Result<()> {
        let owned = self.shared.membership().owned().clone();
        if owned.is_empty() {
            self.shared.membership().finish_revoke();
            return Ok(());
        }
        let mut done = self.emit_revoked(&owned, false);
        // The coordinator's rebalance timer started before this member noticed (up to a
        // heartbeat earlier): rejoin with a margin even if the application is late.
        let cfg = &self.shared.config;
        let wait = cfg
            .rebalance_timeout
            .checked_sub(cfg.heartbeat_interval * 2)
            .filter(|d| !d.is_zero())
            .unwrap_or(cfg.rebalance_timeout);
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        let mut last_ok = Instant::now();
        loop {
            tokio::select! {
                // Released or dropped: either way the application is done.
                _ = &mut done => break,
                () = &mut deadline => {
                    tracing::warn!(
                        group = self.group_id(),
                        "the application did not release revoked partitions within the rebalance timeout; rejoining anyway"
                    );
                    break;
                }
                () = tokio::time::sleep(self.shared.config.heartbeat_interval) => {
                    if let Some(Change::Lost(_)) = self.heartbeat(&mut last_ok).await? {
                        // Already announced as revoked; commits will now fail.
                        break;
                    }
                }
            }
        }
        self.shared.membership().finish_revoke();
        Ok(())
    }

    /// Heartbeats while the application releases a cooperative revocation, up to the
    /// rebalance timeout. Returns what was lost if the membership ended meanwhile; a new
    /// rebalance does not end the wait (the partitions must be released before rejoining).
    async fn wait_for_release(
        &self,
        mut done: oneshot::Receiver<()>,
    ) -> Result<Option<PartitionSet>> {
        let cfg = &self.shared.config;
        let deadline = tokio::time::sleep(cfg.rebalance_timeout);
        tokio::pin!(deadline);
        let mut last_ok = Instant::now();
        loop {
            tokio::select! {
                _ = &mut done => return Ok(None),
                () = &mut deadline => {
                    tracing::warn!(
                        group = self.group_id(),
                        "the application did not release revoked partitions within the rebalance timeout; rejoining anyway"
                    );
                    return Ok(None);
                }
                () = tokio::time::sleep(cfg.heartbeat_interval) => {
                    if let Some(Change::Lost(lost)) = self.heartbeat(&mut last_ok).await? {
                        return Ok(Some(lost));
                    }
                }
            }
        }
    }

    /// LeaveGroup for the current member, if [`GroupConfig::leaves_on_close`]: dynamic members
    /// by default; a static member only when told to (with its instance id, LeaveGroup v3+).
    async fn leave(&self) -> Result<()> {
        let (member_id, instance_id) = {
            let mut m = self.shared.membership();
            let instance_id = m.identity().group_instance_id;
            (m.leave(), instance_id)
        };
        let Some(member_id) = member_id else {
            return Ok(());
        };
        if !self.shared.config.leaves_on_close() {
            return Ok(());
        }
        let (group_id, member, instance) =
            (self.group_id(), member_id.as_str(), instance_id.as_deref());
        self.shared
            .coordinator
            .call(
                "LeaveGroup",
                self.shared.client.config().request_timeout(),
                |conn| async move { send_leave(&conn, group_id, member, instance).await },
            )
            .await?;
        tracing::info!(group = group_id, member = %member_id, "left consumer group");
        Ok(())
    }
}

/// Partition counts of the given topics that exist (others are left out).
async fn partition_counts(
    client: &Client,
    topics: &BTreeSet<String>,
) -> Result<BTreeMap<String, i32>> {
    let list: Vec<String> = topics.iter().cloned().collect();
    let metadata = client.metadata(Some(&list)).await?;
    Ok(topics
        .iter()
        .filter_map(|t| metadata_partition_count(&metadata, t).map(|n| (t.clone(), n)))
        .collect())
}

fn metadata_partition_count(metadata: &crate::ClusterMetadata, topic: &str) -> Option<i32> {
    let t = metadata.topics.get(topic)?;
    if t.error.is_some() || t.partitions.is_empty() {
        return None;
    }
    i32::try_from(t.partitions.len()).ok()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn group_id_field(group_id: &str) -> GroupId {
    GroupId(str_bytes(group_id))
}

async fn send_join(
    conn: &Connection,
    config: &GroupConfig,
    conn_request_timeout: Duration,
    plan: JoinPlan,
) -> Result<JoinReply> {
    // group.instance.id needs v5.
    let min = if plan.group_instance_id.is_some() {
        5
    } else {
        0
    };
    let version = conn.pick_version::<JoinGroupRequest>(min..=9)?;
    let mut req = JoinGroupRequest::default();
    req.group_id = group_id_field(&config.group_id);
    req.session_timeout_ms = millis_i32(config.session_timeout);
    if version >= 1 {
        req.rebalance_timeout_ms = millis_i32(config.rebalance_timeout);
    }
    req.member_id = str_bytes(&plan.member_id);
    if version >= 5 {
        req.group_instance_id = plan.group_instance_id.as_deref().map(str_bytes);
    }
    req.protocol_type = StrBytes::from_static_str(protocol::CONSUMER_PROTOCOL_TYPE);
    req.protocols = plan
        .protocols
        .into_iter()
        .map(|(name, metadata)| {
            let mut p = JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str(name);
            p.metadata = metadata;
            p
        })
        .collect();
    // The coordinator answers once every member has rejoined, up to the rebalance timeout
    // (Java waits the same: rebalance timeout + 5 s, at least request.timeout.ms).
    let wait = (config.rebalance_timeout + Duration::from_secs(5)).max(conn_request_timeout);
    let resp = conn.send_with_timeout(req, version, wait).await?;
    Ok(JoinReply {
        error: ResponseError::try_from_code(resp.error_code),
        generation_id: resp.generation_id,
        protocol_type: resp.protocol_type.map(|s| s.as_str().to_owned()),
        protocol_name: resp.protocol_name.map(|s| s.as_str().to_owned()),
        leader: resp.leader.as_str().to_owned(),
        skip_assignment: resp.skip_assignment,
        member_id: resp.member_id.as_str().to_owned(),
        members: resp
            .members
            .into_iter()
            .map(|m| {
                (
                    m.member_id.as_str().to_owned(),
                    m.group_instance_id.map(|s| s.as_str().to_owned()),
                    m.metadata,
                )
            })
            .collect(),
    })
}

async fn send_sync(
    conn: &Connection,
    group_id: &str,
    identity: &Generation,
    protocol: Option<Assignor>,
    assignments: Vec<(String, bytes::Bytes)>,
) -> Result<SyncReply> {
    let min = if identity.group_instance_id.is_some() {
        3
    } else {
        0
    };
    let version = conn.pick_version::<SyncGroupRequest>(min..=5)?;
    let mut req = SyncGroupRequest::default();
    req.group_id = group_id_field(group_id);
    req.generation_id = identity.generation_id;
    req.member_id = str_bytes(&identity.member_id);
    if version >= 3 {
        req.group_instance_id = identity.group_instance_id.as_deref().map(str_bytes);
    }
    if version >= 5 {
        req.protocol_type = Some(StrBytes::from_static_str(protocol::CONSUMER_PROTOCOL_TYPE));
        req.protocol_name = protocol.map(|p| StrBytes::from_static_str(p.name()));
    }
    req.assignments = assignments
        .into_iter()
        .map(|(member, assignment)| {
            let mut a = SyncGroupRequestAssignment::default();
            a.member_id = StrBytes::from_string(member);
            a.assignment = assignment;
            a
        })
        .collect();
    let resp = conn.send(req, version).await?;
    Ok(SyncReply {
        error: ResponseError::try_from_code(resp.error_code),
        protocol_name: resp.protocol_name.map(|s| s.as_str().to_owned()),
        assignment: resp.assignment,
    })
}

async fn send_heartbeat(
    conn: &Connection,
    group_id: &str,
    identity: &Generation,
) -> Result<Option<ResponseError>> {
    let min = if identity.group_instance_id.is_some() {
        3
    } else {
        0
    };
    let version = conn.pick_version::<HeartbeatRequest>(min..=4)?;
    let mut req = HeartbeatRequest::default();
    req.group_id = group_id_field(group_id);
    req.generation_id = identity.generation_id;
    req.member_id = str_bytes(&identity.member_id);
    if version >= 3 {
        req.group_instance_id = identity.group_instance_id.as_deref().map(str_bytes);
    }
    let resp = conn.send(req, version).await?;
    Ok(ResponseError::try_from_code(resp.error_code))
}

async fn send_leave(
    conn: &Connection,
    group_id: &str,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<()> {
    // A static member leaves by its instance id, which needs the batch form (v3).
    let min = if instance_id.is_some() { 3 } else { 0 };
    let version = conn.pick_version::<LeaveGroupRequest>(min..=5)?;
    let mut req = LeaveGroupRequest::default();
    req.group_id = group_id_field(group_id);
    if version >= 3 {
        let mut m = MemberIdentity::default();
        m.member_id = str_bytes(member_id);
        m.group_instance_id = instance_id.map(str_bytes);
        if version >= 5 {
            m.reason = Some(StrBytes::from_static_str("the member is closing"));
        }
        req.members = vec![m];
    } else {
        req.member_id = str_bytes(member_id);
    }
    let resp = conn.send(req, version).await?;
    let code = ResponseError::try_from_code(resp.error_code).or_else(|| {
        resp.members
            .iter()
            .find_map(|m| ResponseError::try_from_code(m.error_code))
    });
    match code {
        // Already gone (e.g. expired): nothing to leave.
        None | Some(ResponseError::UnknownMemberId) => Ok(()),
        Some(ResponseError::GroupAuthorizationFailed) => {
            Err(crate::offset_commit::group_authorization(group_id, "Read"))
        }
        Some(code) => Err(Error::Broker {
            code,
            context: format!("LeaveGroup for group '{group_id}' (member '{member_id}')"),
        }),
    }
}

/// Fills in the principal the broker saw, when an authorization error does not name one.
pub(crate) fn with_principal(e: Error, conn: &Connection) -> Error {
    match e {
        Error::Authorization {
            code,
            principal: None,
            operation,
            resource,
        } => Error::Authorization {
            code,
            principal: conn.principal().map(str::to_owned),
            operation,
            resource,
        },
        other => other,
    }
}

pub(crate) fn group_protocol_error(message: String) -> Error {
    Error::Protocol {
        broker: "group coordinator".to_owned(),
        message,
    }
}

pub(crate) fn group_broker_error(code: ResponseError, context: String) -> Error {
    Error::Broker { code, context }
}

pub(crate) fn group_authorization_error(group: &str) -> Error {
    crate::offset_commit::group_authorization(group, "Read")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_are_javas() {
        let c = GroupConfig::new("g", ["t"]).unwrap();
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.rebalance_timeout, Duration::from_secs(300));
        assert_eq!(c.assignors, vec![Assignor::Range, Assignor::RoundRobin]);
    }

    #[test]
    fn config_from_properties() {
        let c = GroupConfig::from_properties(
            ["a", "b"],
            [
                ("group.id", "mirror"),
                ("session.timeout.ms", "6000"),
                ("heartbeat.interval.ms", "1000"),
                ("max.poll.interval.ms", "20000"),
                (
                    "partition.assignment.strategy",
                    "roundrobin, org.apache.kafka.clients.consumer.RangeAssignor",
                ),
                ("group.instance.id", "i-1"),
            ],
        )
        .unwrap();
        assert_eq!(c.group_id(), "mirror");
        assert_eq!(c.session_timeout, Duration::from_secs(6));
        assert_eq!(c.rebalance_timeout, Duration::from_secs(20));
        assert_eq!(c.assignors, vec![Assignor::RoundRobin, Assignor::Range]);
        assert_eq!(c.group_instance_id.as_deref(), Some("i-1"));
    }

    #[test]
    fn config_errors_name_the_key() {
        let e = GroupConfig::from_properties(["t"], [("group.id", "g"), ("fetch.min.bytes", "1")])
            .unwrap_err();
        assert!(e.to_string().contains("fetch.min.bytes"), "{e}");
        let e = GroupConfig::from_properties(["t"], [("session.timeout.ms", "1")]).unwrap_err();
        assert!(e.to_string().contains("group.id"), "{e}");
        let e = GroupConfig::from_properties(
            ["t"],
            [("group.id", "g"), ("heartbeat.interval.ms", "50000")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("heartbeat.interval.ms"), "{e}");
        let e = GroupConfig::from_properties(
            ["t"],
            [
                ("group.id", "g"),
                ("partition.assignment.strategy", "sticky"),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().contains("sticky"), "{e}");
        assert!(GroupConfig::new("g", Vec::<String>::new()).is_err());
        assert!(GroupConfig::new("g", ["bad topic"]).is_err());
        assert!(GroupConfig::new("", ["t"]).is_err());
    }
}
