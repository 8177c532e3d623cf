//! The fetch -> produce pipeline.
//!
//! A [`Forwarder`] mirrors a set of source partitions ([`Route`]s) into target partitions. Each
//! partition runs a fetch task and a produce task ([`partition`]); produce requests are packed
//! per target broker ([`sender`]); positions are committed after the target acknowledged
//! everything before them, every `commit_interval` and on revoke/shutdown.
//!
//! The pipeline only sees the clusters through the [`io`] traits; [`kafka`] provides
//! them over `strait-wire`, and tests drive them in memory.

mod budget;
mod codec;
pub mod commit_hook;
pub mod copies;
mod cycle;
pub mod exclude;
pub mod io;
pub mod kafka;
mod partition;
pub(crate) mod plan;
mod producer;
mod retry;
mod retry_log;
mod sender;
mod window;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strait_wire::TopicPartition;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::compression::Compression;
use crate::observe::Observer;
use crate::rewrite::LogAppendTimePolicy;
use retry_log::{RETRY_WARN_EVERY, RetryLog};

pub use commit_hook::{AckedBatch, CommitHook, NoCommitHook};
pub use io::{Isolation, NoTransactions, Positions, Source, StartPosition, Target, Transactions};

pub use exclude::Excluded;
use io::{FailureAction, IoError};
pub use partition::Route;

use budget::Budget;
use partition::{PositionCell, Shared};
use producer::Producers;
use sender::Senders;

/// What to do when the source no longer has the offset the mirror needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetOutOfRange {
    /// Stop the partition with an error (the default: never skip data silently).
    #[default]
    Fail,
    /// Continue from the oldest offset still available, accepting the gap.
    Earliest,
    /// Continue from the end of the log, accepting the gap.
    Latest,
}

/// Tuning of the pipeline. `Settings::default()` is what the `strait` binary uses.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Batches in flight per target partition (1..=5; Kafka's idempotence window is 5).
    pub max_in_flight: usize,
    /// Fetch size per partition. Small enough to keep memory low (every fetched byte stays in
    /// memory until the target acknowledges it); a partition whose batches are larger fetches
    /// as much as its largest batch needs, up to `max_fetch_bytes`.
    pub partition_fetch_bytes: i32,
    /// Upper bound when a single batch is larger than `partition_fetch_bytes`.
    pub max_fetch_bytes: i32,
    /// How long the source broker may hold a fetch waiting for data.
    pub fetch_max_wait: Duration,
    /// Bytes fetched but not yet acknowledged by the target, across all partitions.
    pub memory_budget: usize,
    /// How often acknowledged positions are committed.
    pub commit_interval: Duration,
    /// Fetch isolation (read_committed by default).
    pub isolation: Isolation,
    /// `None` keeps each batch's codec (pass-through); `Some(c)` re-encodes every batch to `c`.
    pub compression: Option<Compression>,
    /// What to do with source batches stamped with LogAppendTime.
    pub log_append_time: LogAppendTimePolicy,
    /// Largest decompressed batch the re-encode path accepts (zip-bomb guard).
    pub max_decompressed_bytes: usize,
    /// Where partitions without a committed position start.
    pub start: StartPosition,
    /// What to do when the needed source offset is gone.
    pub on_offset_out_of_range: OffsetOutOfRange,
    /// First retry delay.
    pub retry_backoff: Duration,
    /// Largest retry delay (the Java clients' `retry.backoff.max.ms`, 1 s). A partition that
    /// waits for a new target topic to settle retries at this pace; a longer cap (10 s before)
    /// left partitions idle for seconds after the broker could take them: at 4,000 new
    /// partitions the last ones started up to a whole backoff after their leader appeared.
    pub retry_backoff_max: Duration,
    /// Largest Produce request (sum of its batches).
    pub max_request_bytes: usize,
    /// Produce requests in flight per connection to a target broker.
    pub max_requests_per_broker: usize,
    /// Connections per target broker that carry Produce requests (1 to 8). A broker serves one
    /// connection's requests one at a time, and an acks=all request holds its connection until
    /// the followers have the data; with several connections that wait overlaps. Each partition
    /// keeps to one connection, so its batches stay in order.
    pub produce_connections: usize,
    /// Largest batch made by merging small source batches that wait together for the same
    /// target partition (0: never merge). Over a long link a partition's rate is bounded by
    /// `max_in_flight` batches per round trip, so a batch must carry more than one small source
    /// batch; batches that are already large pass through untouched. With `compression` set,
    /// also the size after compression of the batches a run of re-compressed source batches is
    /// cut into (0: re-compressed batch by batch).
    pub batch_size: usize,
    /// How long a revoke or shutdown waits for in-flight batches to be acknowledged (and the
    /// final positions committed). What is not acknowledged by then is not committed: the next
    /// owner fetches it again (at-least-once holds). Keep it well under the group's rebalance
    /// timeout, or a partition whose target keeps failing holds up the whole rebalance.
    pub drain_timeout: Duration,
    /// `Some`: exactly-once mode (see [`ExactlyOnce`]); `None`: at-least-once.
    pub exactly_once: Option<ExactlyOnce>,
    /// Source offset ranges whose whole batches are skipped (see [`Excluded`]).
    pub excluded: Excluded,
}

/// Exactly-once mirroring: each route writes to the target in transactions of its own, and
/// each transaction also stores the route's source position as the target partition's offset
/// in the consumer group `group_id` on the target. After any crash the target holds every
/// source record up to the last committed transaction exactly once, and nothing after it is
/// visible to `read_committed` consumers.
///
/// The transactional id of a route is `{transactional_id_prefix}-{source topic}-{partition}`:
/// the same for every instance and across restarts, so a new owner of a partition fences the
/// old one (a zombie's transaction aborts and it cannot commit any more).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExactlyOnce {
    /// The consumer group on the target that stores the positions, keyed by target partition.
    pub group_id: String,
    /// Prefix of every route's transactional id.
    pub transactional_id_prefix: String,
    /// How long a transaction stays open before it commits. Longer: fewer transaction
    /// round trips; shorter: records become visible to `read_committed` consumers sooner.
    pub transaction_interval: Duration,
    /// Bytes of batches after which a route's transaction commits without waiting for
    /// `transaction_interval`: bounds what an abort throws away and is sent again.
    pub transaction_max_bytes: u64,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction open longer than this.
    pub transaction_timeout: Duration,
    /// How long a fenced route waits before it takes its transactional id back. Another
    /// instance that owns the partition now gets it revoked here well within this time; the
    /// wait only runs out when nobody else took over (the coordinator timed our transaction
    /// out during a long outage).
    pub fenced_backoff: Duration,
    /// How often an idle route stores its position again (an offsets-only transaction). The
    /// positions group on the target has no members, so the broker drops a position
    /// `offsets.retention.minutes` (7 days by default) after it was last stored (KIP-211), and
    /// a route stores it only when it moves: keep this well under that retention.
    pub position_refresh_interval: Duration,
}

impl ExactlyOnce {
    /// Exactly-once with positions in `group_id` on the target, transactional ids prefixed
    /// with it, 300 ms transactions of at most 16 MiB, Java's 60 s transaction timeout, a 30 s
    /// fenced backoff and idle positions stored again every hour.
    pub fn new(group_id: impl Into<String>) -> Self {
        let group_id = group_id.into();
        ExactlyOnce {
            transactional_id_prefix: group_id.clone(),
            group_id,
            transaction_interval: Duration::from_millis(300),
            transaction_max_bytes: 16 << 20,
            transaction_timeout: Duration::from_secs(60),
            fenced_backoff: Duration::from_secs(30),
            position_refresh_interval: Duration::from_secs(3600),
        }
    }

    /// The transactional id of the route from `source`.
    pub fn transactional_id(&self, source: &TopicPartition) -> String {
        format!(
            "{}-{}-{}",
            self.transactional_id_prefix,
            source.topic(),
            source.partition()
        )
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_in_flight: 5,
            partition_fetch_bytes: 256 << 10,
            max_fetch_bytes: 64 << 20,
            fetch_max_wait: Duration::from_millis(100),
            memory_budget: 256 << 20,
            commit_interval: Duration::from_secs(5),
            isolation: Isolation::ReadCommitted,
            compression: None,
            log_append_time: LogAppendTimePolicy::UseCreateTime,
            max_decompressed_bytes: 64 << 20,
            start: StartPosition::Earliest,
            on_offset_out_of_range: OffsetOutOfRange::Fail,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_request_bytes: 16 << 20,
            max_requests_per_broker: 5,
            produce_connections: 1,
            batch_size: 256 << 10,
            drain_timeout: Duration::from_secs(10),
            exactly_once: None,
            excluded: Excluded::new(),
        }
    }
}

impl Settings {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &'static str, why: &str| {
            Err(Error::Settings {
                field,
                detail: why.to_string(),
            })
        };
        if !(1..=5).contains(&self.max_in_flight) {
            return bad(
                "max_in_flight",
                "must be 1 to 5 (Kafka detects duplicates only among the last 5 batches)",
            );
        }
        if !(1..=8).contains(&self.produce_connections) {
            return bad("produce_connections", "must be 1 to 8");
        }
        if self.partition_fetch_bytes < 1024 || self.max_fetch_bytes < self.partition_fetch_bytes {
            return bad(
                "partition_fetch_bytes",
                "must be at least 1024 and at most max_fetch_bytes",
            );
        }
        if self.memory_budget < (1 << 20) {
            return bad("memory_budget", "must be at least 1 MiB");
        }
        if self.commit_interval.is_zero() {
            return bad("commit_interval", "must be positive");
        }
        if self.drain_timeout.is_zero() {
            return bad("drain_timeout", "must be positive");
        }
        if let Some(eos) = &self.exactly_once {
            if eos.group_id.is_empty() || eos.transactional_id_prefix.is_empty() {
                return bad(
                    "exactly_once",
                    "the positions group and the transactional id prefix must not be empty",
                );
            }
            if eos.transaction_interval.is_zero()
                || eos.transaction_interval >= eos.transaction_timeout
            {
                return bad(
                    "transaction_interval",
                    "must be positive and shorter than the transaction timeout",
                );
            }
            if eos.position_refresh_interval.is_zero() {
                return bad(
                    "position_refresh_interval",
                    "must be positive (and well under the target's offsets.retention.minutes)",
                );
            }
        }
        Ok(())
    }
}

struct Running {
    route: Route,
    cell: Arc<PositionCell>,
    stop: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

/// A partition that stopped on an error (see [`Forwarder::failures`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Failure {
    /// The source partition.
    pub partition: TopicPartition,
    /// Why it stopped; the message says what to change.
    pub error: Arc<Error>,
}

/// Mirrors assigned source partitions into target partitions.
///
/// Build one over `strait-wire` clients with [`crate::Forwarder::builder`], or over any
/// [`Source`]/[`Target`]/[`Positions`] implementation with [`Forwarder::new`].
///
/// A `Forwarder` is a cheap handle: clone it to share it between tasks (no `Arc` needed). When
/// the last handle is dropped without [`shutdown`](Self::shutdown), the forwarder stops
/// abruptly: its partition tasks are aborted, batches in flight are abandoned and nothing more
/// is committed, so a restart resumes from the last committed positions (duplicating at most
/// what was forwarded since).
pub struct Forwarder<S: Source, T: Target, P: Positions> {
    inner: Arc<Inner<S, T, P>>,
}

impl<S: Source, T: Target, P: Positions> Clone for Forwarder<S, T, P> {
    fn clone(&self) -> Self {
        Forwarder {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Source, T: Target, P: Positions> Forwarder<S, T, P> {
    /// A forwarder with no partitions yet. Gets the target producer id first, so a target that
    /// is down or refuses the mirror's principal fails here, not later.
    pub async fn new(
        source: S,
        target: T,
        positions: P,
        settings: Settings,
        observer: Arc<dyn Observer>,
    ) -> Result<Self, Error> {
        Self::with_commit_hook(
            source,
            target,
            positions,
            settings,
            observer,
            Arc::new(NoCommitHook),
        )
        .await
    }

    /// [`new`](Self::new), with a [`CommitHook`] that hears of every acknowledged batch and
    /// every position about to be committed, in step with the commits (failover's offset maps).
    pub async fn with_commit_hook(
        source: S,
        target: T,
        positions: P,
        settings: Settings,
        observer: Arc<dyn Observer>,
        commit_hook: Arc<dyn CommitHook>,
    ) -> Result<Self, Error> {
        settings.validate()?;
        let target = Arc::new(target);
        let identity = init_producer_id(target.as_ref()).await?;
        let cancel = CancellationToken::new();
        let senders = Arc::new(Senders::new(
            target.clone(),
            settings.max_request_bytes,
            settings.max_requests_per_broker,
            produce_lanes(&settings),
            observer.clone(),
        ));
        let positions = Arc::new(positions);
        let store = positions.clone();
        let before_transaction_commit: partition::BeforeTransactionCommit =
            Arc::new(move |source, next| {
                let store = store.clone();
                Box::pin(async move { store.before_transaction_commit(&source, next).await })
            });
        let shared = Arc::new(Shared {
            source: Arc::new(source),
            target,
            senders,
            // Every partition may always hold two fetches of the usual size.
            budget: Budget::new(
                settings.memory_budget,
                usize::try_from(settings.partition_fetch_bytes).unwrap_or(1 << 20) * 2,
            ),
            settings: Arc::new(settings),
            observer,
            commit_hook,
            producers: Producers::new(identity),
            before_transaction_commit,
            produce_retries: RetryLog::new(RETRY_WARN_EVERY),
            fetch_retries: RetryLog::new(RETRY_WARN_EVERY),
            call_retries: RetryLog::new(RETRY_WARN_EVERY),
        });
        let inner = Inner {
            shared,
            positions,
            running: Mutex::new(HashMap::new()),
            failures: Arc::new(Mutex::new(Vec::new())),
            cancel,
            committer: Mutex::new(None),
            commit_lock: tokio::sync::Mutex::new(()),
            progress: Arc::new(Notify::new()),
        };
        Ok(Forwarder {
            inner: Arc::new(inner),
        })
    }

    /// Starts mirroring `routes` (already running ones are left alone), each from its committed
    /// position, or from `Settings::start` if it has none.
    pub async fn assign(&self, routes: Vec<Route>) -> Result<(), Error> {
        self.inner.assign(routes).await
    }

    /// Commits every position that moved since the last commit.
    pub async fn commit(&self) -> Result<(), Error> {
        self.inner.commit().await
    }

    /// Stops mirroring `sources`: fetching stops, in-flight batches are acknowledged, and the
    /// final positions are committed before this returns.
    /// A partition that had stopped on an error leaves [`failures`](Self::failures): it is no
    /// longer this forwarder's (or starts afresh when assigned again).
    pub async fn revoke(&self, sources: &[TopicPartition]) -> Result<(), Error> {
        self.inner.revoke(sources).await
    }

    /// Revokes everything and stops the background tasks (graceful shutdown).
    /// [`failures`](Self::failures) still lists the partitions that had stopped on an error.
    /// Bounded by `Settings::drain_timeout` (plus a short grace for the final commit).
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.inner.shutdown().await
    }

    /// The routes being mirrored now (including stopped-on-error ones until revoked).
    pub fn assigned(&self) -> Vec<Route> {
        self.inner.assigned()
    }

    /// Partitions that stopped on an error, with the error.
    pub fn failures(&self) -> Vec<Failure> {
        self.inner.failures()
    }

    /// The next source offset for each partition that the target has fully acknowledged.
    pub fn acknowledged_positions(&self) -> Vec<(TopicPartition, i64)> {
        self.inner.acknowledged_positions()
    }
}

/// The forwarder's state, shared by its handles; the committer task holds it weakly.
struct Inner<S: Source, T: Target, P: Positions> {
    shared: Arc<Shared<S, T>>,
    positions: Arc<P>,
    running: Mutex<HashMap<TopicPartition, Running>>,
    failures: Arc<Mutex<Vec<Failure>>>,
    cancel: CancellationToken,
    committer: Mutex<Option<JoinHandle<()>>>,
    /// Serializes commits, so a slow periodic commit cannot land after (and undo) the final
    /// commit of a revoke.
    commit_lock: tokio::sync::Mutex<()>,
    /// A partition's first acknowledgement after it started (see [`PositionCell::acknowledge`]).
    progress: Arc<Notify>,
}

/// How long the committer waits after a partition's first acknowledgement, so the partitions
/// that start together share one commit.
const FIRST_COMMIT_DELAY: Duration = Duration::from_millis(200);

/// The final commit gets at least this long, even when the drain used up its deadline.
const FINAL_COMMIT_MIN: Duration = Duration::from_secs(2);

impl<S: Source, T: Target, P: Positions> Inner<S, T, P> {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn assign(self: &Arc<Self>, routes: Vec<Route>) -> Result<(), Error> {
        let routes: Vec<Route> = {
            let running = self.running();
            routes
                .into_iter()
                .filter(|r| !running.contains_key(&r.source))
                .collect()
        };
        if routes.is_empty() {
            return Ok(());
        }
        let sources: Vec<TopicPartition> = routes.iter().map(|r| r.source.clone()).collect();
        let loading = std::time::Instant::now();
        let committed = self.positions.load(&sources).await.map_err(Error::Io)?;
        tracing::debug!(
            partitions = sources.len(),
            elapsed_ms = loading.elapsed().as_millis(),
            "read the committed positions"
        );
        if committed.len() != routes.len() {
            // Zipping would silently leave partitions unassigned.
            return Err(Error::Io(IoError::new(
                FailureAction::Retriable,
                "bad_response",
                format!(
                    "the position store answered {} positions for {} partitions; assign again",
                    committed.len(),
                    routes.len()
                ),
            )));
        }
        let mut running = self.running();
        // Every account is open before any task starts, so the first task cannot take the
        // whole budget as its "fair share" before the others are counted.
        let accounts: Vec<_> = (0..routes.len())
            .map(|_| self.shared.budget.open_account())
            .collect();
        // Exactly-once routes read their start from the target themselves, once they have
        // fenced the previous owner; the position store's copy is for monitoring only.
        let transactional = self.shared.settings.exactly_once.is_some();
        for ((route, start), account) in routes.into_iter().zip(committed).zip(accounts) {
            let start = if transactional { None } else { start };
            let cell = Arc::new(PositionCell::new(self.progress.clone()));
            if let Some(offset) = start {
                cell.committed.store(offset, Ordering::Release);
            }
            let stop = self.cancel.child_token();
            // The task holds what it needs, not the forwarder: a task holding the forwarder
            // would keep it (and itself) alive after its owner dropped it.
            let handle = tokio::spawn(partition_task(
                self.shared.clone(),
                self.failures.clone(),
                route.clone(),
                start,
                cell.clone(),
                account,
                stop.clone(),
            ));
            running.insert(
                route.source.clone(),
                Running {
                    route,
                    cell,
                    stop,
                    handle: Some(handle),
                },
            );
        }
        drop(running);
        self.ensure_committer();
        Ok(())
    }

    fn ensure_committer(self: &Arc<Self>) {
        let mut committer = self.committer.lock().unwrap_or_else(|p| p.into_inner());
        if committer.is_some() {
            return;
        }
        let me = Arc::downgrade(self);
        let interval = self.shared.settings.commit_interval;
        let cancel = self.cancel.clone();
        let progress = self.progress.clone();
        *committer = Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = progress.notified() => {
                        tokio::select! {
                            () = tokio::time::sleep(FIRST_COMMIT_DELAY.min(interval)) => {}
                            _ = cancel.cancelled() => return,
                        }
                    }
                    _ = cancel.cancelled() => return,
                }
                let Some(me) = me.upgrade() else { return };
                if let Err(e) = me.commit().await {
                    tracing::warn!(error = %e, "committing source positions failed; will retry");
                }
            }
        }));
    }

    async fn commit(&self) -> Result<(), Error> {
        // Held from the snapshot to the end of the commit: see `commit_lock`.
        let _serial = self.commit_lock.lock().await;
        let changed: Vec<(TopicPartition, i64, Arc<PositionCell>)> = self
            .running()
            .values()
            .filter_map(|r| {
                let ackd = r.cell.ackd.load(Ordering::Acquire);
                (ackd >= 0 && ackd != r.cell.committed.load(Ordering::Acquire))
                    .then(|| (r.route.source.clone(), ackd, r.cell.clone()))
            })
            .collect();
        self.commit_cells(changed).await
    }

    async fn commit_cells(
        &self,
        changed: Vec<(TopicPartition, i64, Arc<PositionCell>)>,
    ) -> Result<(), Error> {
        if changed.is_empty() {
            return Ok(());
        }
        let positions: Vec<(TopicPartition, i64)> =
            changed.iter().map(|(tp, o, _)| (tp.clone(), *o)).collect();
        // Exactly-once positions reached the hook at their transaction's commit; this is only
        // the source group's monitoring copy.
        if self.shared.settings.exactly_once.is_none() {
            for (tp, next) in &positions {
                self.shared.commit_hook.committing(tp, *next);
            }
        }
        self.positions.commit(&positions).await.map_err(Error::Io)?;
        for (tp, offset, cell) in changed {
            cell.committed.fetch_max(offset, Ordering::AcqRel);
            self.shared.observer.committed(&tp, offset);
        }
        Ok(())
    }

    async fn revoke(&self, sources: &[TopicPartition]) -> Result<(), Error> {
        let result = self.stop_partitions(sources).await;
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|f| !sources.contains(&f.partition));
        result
    }

    /// Stops `sources`, waits (at most `drain_timeout`) for their in-flight batches and commits
    /// their final positions. A partition still undrained at the deadline is aborted: what it
    /// had not got acknowledged is not committed, and the next owner fetches it again.
    async fn stop_partitions(&self, sources: &[TopicPartition]) -> Result<(), Error> {
        let mut stopping = Vec::new();
        {
            let mut running = self.running();
            for tp in sources {
                if let Some(r) = running.remove(tp) {
                    r.stop.cancel();
                    stopping.push(r);
                }
            }
        }
        let drain_timeout = self.shared.settings.drain_timeout;
        let deadline = tokio::time::Instant::now() + drain_timeout;
        let mut finals = Vec::new();
        let mut abandoned = Vec::new();
        for mut r in stopping {
            if let Some(mut handle) = r.handle.take() {
                tracing::debug!(partition = %r.route.source, "waiting for the partition to drain");
                if tokio::time::timeout_at(deadline, &mut handle)
                    .await
                    .is_err()
                {
                    handle.abort();
                    // Wait for the abort, so nothing of the task outlives the revoke.
                    let _ = handle.await;
                    abandoned.push(r.route.source.clone());
                } else {
                    tracing::debug!(partition = %r.route.source, "partition drained");
                }
            }
            let ackd = r.cell.ackd.load(Ordering::Acquire);
            if ackd >= 0 && ackd != r.cell.committed.load(Ordering::Acquire) {
                finals.push((r.route.source.clone(), ackd, r.cell.clone()));
            }
        }
        if !abandoned.is_empty() {
            tracing::warn!(
                partitions = ?abandoned,
                "{} partition(s) did not drain within the drain timeout ({drain_timeout:?}); their \
                 unacknowledged batches are not committed and will be fetched again by the next \
                 owner (duplicates on the target, no loss)",
                abandoned.len()
            );
        }
        let commit_deadline = deadline.max(tokio::time::Instant::now() + FINAL_COMMIT_MIN);
        let committed = tokio::time::timeout_at(commit_deadline, async {
            let _serial = self.commit_lock.lock().await;
            self.commit_cells(finals).await
        })
        .await;
        committed.unwrap_or_else(|_| {
            Err(Error::Io(IoError::new(
                FailureAction::Retriable,
                "timeout",
                format!(
                    "the final commit of the source positions did not finish within the drain \
                     timeout ({drain_timeout:?}); the next owner re-sends what was mirrored since \
                     the last commit (duplicates, no loss)"
                ),
            )))
        })
    }

    async fn shutdown(&self) -> Result<(), Error> {
        // The periodic committer goes first: a commit of it hanging on an unreachable source
        // would hold the commit lock past the drain deadline. Its positions are older than the
        // final ones, so abandoning it loses nothing.
        self.cancel.cancel();
        let committer = self
            .committer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(c) = committer {
            c.abort();
            let _ = c.await;
        }
        let all: Vec<TopicPartition> = self.running().keys().cloned().collect();
        self.stop_partitions(&all).await
    }

    fn assigned(&self) -> Vec<Route> {
        self.running().values().map(|r| r.route.clone()).collect()
    }

    fn failures(&self) -> Vec<Failure> {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn acknowledged_positions(&self) -> Vec<(TopicPartition, i64)> {
        self.running()
            .values()
            .map(|r| (r.route.source.clone(), r.cell.ackd.load(Ordering::Acquire)))
            .collect()
    }
}

impl<S: Source, T: Target, P: Positions> Drop for Inner<S, T, P> {
    fn drop(&mut self) {
        self.cancel.cancel();
        let running = self.running.get_mut().unwrap_or_else(|p| p.into_inner());
        for r in running.values() {
            if let Some(handle) = &r.handle {
                handle.abort();
            }
        }
        if let Some(committer) = self
            .committer
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            committer.abort();
        }
    }
}

/// The forwarder's producer id. An ACL denial (no `Write` on any topic, no `IdempotentWrite`)
/// is waited out like any other denial: the mirror starts by itself once the grant exists. The
/// caller cancels by dropping the future (the binary does on SIGTERM).
async fn init_producer_id<T: Target>(target: &T) -> Result<io::ProducerIdentity, Error> {
    let mut denial = retry::Retry::denials();
    let never = CancellationToken::new();
    loop {
        match target.init_producer_id().await {
            Ok(identity) => return Ok(identity),
            Err(e) if e.action == FailureAction::Denied => {
                // Never cancelled, and a denial is always waited: nothing to handle.
                let _ = denial.wait(e, None, |_, _| {}, &never).await;
            }
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

async fn partition_task<S: Source, T: Target>(
    shared: Arc<Shared<S, T>>,
    failures: Arc<Mutex<Vec<Failure>>>,
    route: Route,
    start: Option<i64>,
    cell: Arc<PositionCell>,
    account: Arc<budget::Account>,
    stop: CancellationToken,
) {
    match partition::run(shared.clone(), route.clone(), start, cell, account, stop).await {
        Ok(()) | Err(Error::Stopped) => {}
        Err(e) => {
            tracing::error!(partition = %route.source, error = %e, "partition stopped");
            shared.observer.partition_stopped(&route.source, &e);
            failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Failure {
                    partition: route.source,
                    error: Arc::new(e),
                });
        }
    }
}

/// Exactly-once: at least this many produce connections per target broker. A Produce request
/// carries one transactional id, so each carries one route's batch and nothing is lost by
/// spreading routes over connections; on one connection the broker serves them one after the
/// other, and a route's commit waits for all of them (measured: docs/exactly-once.md).
const EXACTLY_ONCE_PRODUCE_LANES: usize = 4;

/// The produce connections per target broker: `produce_connections`, at least
/// [`EXACTLY_ONCE_PRODUCE_LANES`] exactly-once.
fn produce_lanes(settings: &Settings) -> usize {
    if settings.exactly_once.is_some() {
        settings.produce_connections.max(EXACTLY_ONCE_PRODUCE_LANES)
    } else {
        settings.produce_connections
    }
}
