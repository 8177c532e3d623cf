//! One source partition mirrored into one target partition: a fetch task feeding a produce task.
//!
//! The fetch task plans each response and hands the parts over a bounded channel (the window's
//! appetite plus the memory budget are the back-pressure). The produce task drives the target
//! partition's [`Window`] (`window.rs`): the state machine that stamps, merges, sends at most
//! `max_in_flight` batches, resends, renumbers, splits and moves the committable position only
//! past acknowledged batches. This file holds the async parts: fetching, and carrying the
//! window's batches and actions to the target.
//!
//! Memory: a mirror may hold thousands of mostly idle partitions, each one task. An idle
//! partition's task waits in its long poll and for work, and holds no window: the produce side
//! (window, acks channel, calls to the target) lives on the heap from the first work until the
//! window is at rest again. Cluster calls whose futures are large are boxed where they are made,
//! so they take memory only while they run (`tests/idle_memory.rs` bounds the heap per idle
//! partition).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use strait_wire::TopicPartition;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::observe::Path;
use crate::observe::{BatchForwarded, Observer};
use crate::rewrite::TargetPolicy;

use super::backoff::Backoff;
use super::budget::{Account, Budget, Reservation};
use super::codec;
use super::cycle::{Cycle, CycleAction};
use super::io::{
    ErrorClass, FetchSpec, IoError, Isolation, ProducerIdentity, Source, StartPosition, Target,
    TopicLimits, Transactions,
};
use super::plan::{Part, Rules, Step};
use super::producer::{ProducerSeq, Producers};
use super::retry_log::RetryLog;
use super::sender::{ProduceItem, Senders, SlotResult};
use super::window::{Action, Done, MergePolicy, Transmit, Window, WindowConfig};
use super::{ExactlyOnce, Settings};

/// A source partition and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The source partition.
    pub source: TopicPartition,
    /// The target partition.
    pub target: TopicPartition,
}

/// Positions shared between a partition's tasks and the committer.
#[derive(Debug)]
pub(crate) struct PositionCell {
    /// Next source offset whose predecessors are all acknowledged by the target (-1: none yet).
    pub(crate) ackd: AtomicI64,
    /// Last position committed to the position store (-1: none).
    pub(crate) committed: AtomicI64,
    /// Whether the acknowledged position has moved since the partition started.
    moved: AtomicBool,
    /// Wakes the committer.
    progress: Arc<Notify>,
}

impl PositionCell {
    pub(crate) fn new(progress: Arc<Notify>) -> Self {
        PositionCell {
            ackd: AtomicI64::new(-1),
            committed: AtomicI64::new(-1),
            moved: AtomicBool::new(false),
            progress,
        }
    }

    /// Moves the acknowledged position forward. The first move after the partition started
    /// wakes the committer at once: a process that lives shorter than the commit interval (a
    /// crash loop) would otherwise never commit, and re-send everything at every restart.
    pub(crate) fn acknowledge(&self, next: i64) {
        let before = self.ackd.fetch_max(next, Ordering::AcqRel);
        if next > before && before >= 0 && !self.moved.swap(true, Ordering::AcqRel) {
            self.progress.notify_one();
        }
    }
}

/// Everything a partition's tasks share.
pub(crate) struct Shared<S, T> {
    pub(crate) source: Arc<S>,
    pub(crate) target: Arc<T>,
    pub(crate) senders: Arc<Senders<T>>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) budget: Budget,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) producers: Producers,
    /// [`Positions::before_transaction_commit`](super::Positions::before_transaction_commit)
    /// of the forwarder's position store.
    pub(crate) before_transaction_commit: BeforeTransactionCommit,
    /// Limits "produce failed, resending" warnings across partitions.
    pub(crate) produce_retries: RetryLog,
    /// Limits "fetch failed, retrying" warnings across partitions.
    pub(crate) fetch_retries: RetryLog,
    /// Limits the warnings of retried calls before and around mirroring (topic limits,
    /// producer ids, start positions) across partitions.
    pub(crate) call_retries: RetryLog,
}

/// The position store's hook before a transaction commit, as the partition tasks (which do not
/// know the store's type) call it: (source partition, next source offset).
pub(crate) type BeforeTransactionCommit =
    Arc<dyn Fn(TopicPartition, i64) -> IoFuture + Send + Sync>;

/// A boxed call to a cluster that yields nothing.
pub(crate) type IoFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), IoError>> + Send>>;

/// What the fetch task hands the produce task, boxed ([`WorkBox`]).
#[derive(Debug)]
enum Work {
    Forward {
        parts: Vec<Part>,
        next: i64,
        fetched_at: SystemTime,
        reservation: Reservation,
    },
    Advance {
        next: i64,
    },
}

/// Work as the channel between the two sides carries it: a pointer, since tokio allocates a
/// channel's first block of 32 slots up front, for every partition, idle or not.
type WorkBox = Box<Work>;

/// Mirrors one partition until `stop` is cancelled (graceful: in-flight batches are acknowledged
/// first) or an error needs an operator.
pub(crate) async fn run<S: Source, T: Target>(
    shared: Arc<Shared<S, T>>,
    route: Route,
    start: Option<i64>,
    position: Arc<PositionCell>,
    account: Arc<Account>,
    stop: CancellationToken,
) -> Result<(), Error> {
    let limits = retry(&shared, &route.target, &stop, || {
        shared.target.topic_limits(route.target.topic())
    })
    .await?;
    let leg = Leg {
        shared: &shared,
        route: &route,
        position: &position,
        account: &account,
        stop: &stop,
        limits,
    };
    if let Some(eos) = &shared.settings.exactly_once {
        // The start position is read after the transactional id is initialized (below).
        // Boxed: its transactional state is on the heap of exactly-once routes only.
        return Box::pin(run_transactional(&leg, eos)).await;
    }
    let start = match start {
        Some(offset) => offset,
        None => resolve_start(&shared, &route.source, shared.settings.start, &stop).await?,
    };
    leg.started(start);
    let seq = match shared.producers.claim(&route.target) {
        Some(seq) => seq,
        // Another route writes into the same target partition right now: sharing its producer
        // id would interleave two sequences, so this one gets its own.
        None => ProducerSeq::fresh(
            retry(&shared, &route.target, &stop, || {
                shared.target.init_producer_id()
            })
            .await?,
        ),
    };
    let (result, seq) = leg.run(start, seq, None).await;
    shared.producers.release(&route.target, seq);
    result
}

/// What one run of a partition's fetch and produce sides needs.
struct Leg<'a, S, T> {
    shared: &'a Arc<Shared<S, T>>,
    route: &'a Route,
    position: &'a PositionCell,
    account: &'a Arc<Account>,
    stop: &'a CancellationToken,
    limits: TopicLimits,
}

impl<S: Source, T: Target> Leg<'_, S, T> {
    /// The route starts mirroring at `start`.
    fn started(&self, start: i64) {
        self.position.ackd.store(start, Ordering::Release);
        self.shared
            .observer
            .partition_started(&self.route.source, &self.route.target, start);
    }

    /// Fetches from `start` and produces under `seq` until the fetch side ends (stop) and
    /// everything is acknowledged (and, exactly-once, committed), or an error stops it.
    async fn run(
        &self,
        start: i64,
        seq: ProducerSeq,
        txn: Option<&mut RouteTxn<T::Transactions>>,
    ) -> (Result<(), Error>, ProducerSeq) {
        let (shared, route) = (self.shared, self.route);
        let rules = Rules {
            isolation: shared.settings.isolation,
            policy: TargetPolicy {
                max_message_bytes: self.limits.max_message_bytes,
                compression: shared.settings.compression,
                log_append_time: shared.settings.log_append_time,
                max_decompressed_bytes: shared.settings.max_decompressed_bytes,
                ..TargetPolicy::default()
            },
        };
        // The produce side lowers it when the target refuses a batch as too large.
        let max_message_bytes = AtomicUsize::new(self.limits.max_message_bytes);
        let (tx, mut rx) = mpsc::channel(shared.settings.max_in_flight);
        let (position, max_message_bytes) = (self.position, &max_message_bytes);
        // Each side is called inside its async block, not moved into it: a future moved into
        // an async block is stored twice (captured, then awaited), and this task's future is
        // allocated for every partition.
        let fetch = async {
            let r = fetch_loop(
                shared,
                route,
                start,
                rules.clone(),
                max_message_bytes,
                self.account,
                tx,
                self.stop,
            )
            .await;
            tracing::debug!(partition = %route.source, "fetch side ended");
            r
        };
        // The produce side (the window, the acks channel, the calls to the target) takes memory
        // only while the partition has something to produce: most partitions of a large mirror
        // are idle most of the time. It ends when the fetch side has ended and everything was
        // acknowledged.
        let produce = async {
            let (mut seq, mut txn) = (seq, txn);
            let result = loop {
                // Exactly-once, idle: the cycle may have to store the position again.
                let first = match txn.as_ref().and_then(|t| t.cycle.poll_timeout()) {
                    Some(at) => {
                        // Boxed: idle partitions of at-least-once mirrors carry no timer.
                        let timer = Box::pin(tokio::time::sleep_until(at.into()));
                        tokio::select! {
                            work = rx.recv() => Wake::from(work),
                            () = timer => Wake::Due,
                        }
                    }
                    None => Wake::from(rx.recv().await),
                };
                let (phase, next) = Box::pin(produce_loop(
                    shared,
                    route,
                    &mut rx,
                    first,
                    position,
                    seq,
                    rules.policy.clone(),
                    max_message_bytes,
                    txn.as_deref_mut(),
                ))
                .await;
                seq = next;
                match phase {
                    Phase::Ended(result) => break result,
                    Phase::Rested => {}
                }
            };
            // Closed now, so a fetch side still waiting ends too.
            drop(rx);
            tracing::debug!(partition = %route.source, "produce side ended");
            (result, seq)
        };
        let (fetched, (produced, seq)) = tokio::join!(fetch, produce);
        (produced.and(fetched), seq)
    }
}

/// Exactly-once: a route's transactional producer and its commit cycle.
pub(crate) struct RouteTxn<X> {
    /// The route's transactional id, carried by each of its Produce requests.
    id: Arc<str>,
    txn: X,
    cycle: Cycle,
    group_id: String,
    /// A transaction call the target refuses for lack of an ACL (TxnOffsetCommit without Read
    /// on the target topic or group): reported, waited out and cleared at the next commit.
    denial: Denial,
}

/// Exactly-once: runs the route in transactions. A transaction that cannot commit is aborted
/// and its work redone from the last committed position under a new epoch; a fenced route
/// waits (another instance owns the partition now, and the group revokes it here), then takes
/// its transactional id back.
async fn run_transactional<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    eos: &ExactlyOnce,
) -> Result<(), Error> {
    let (shared, route, stop) = (leg.shared, leg.route, leg.stop);
    let id: Arc<str> = Arc::from(eos.transactional_id(&route.source));
    let producer = shared
        .target
        .transactions(&id, eos.transaction_timeout)
        .map_err(Error::Io)?;
    let mut txn = RouteTxn {
        id: id.clone(),
        txn: producer,
        cycle: Cycle::new(eos.transaction_interval, eos.transaction_max_bytes, -1),
        group_id: eos.group_id.clone(),
        denial: Denial::new(),
    };
    // Known after the first initialization: the position this route's last transaction
    // committed (or where it started).
    let mut known: Option<i64> = None;
    loop {
        let identity = match init_transactions(leg, &mut txn.txn).await {
            Ok(identity) => identity,
            Err(Error::Stopped) => return Ok(()),
            Err(e) => return Err(e),
        };
        // Read only now: the initialization aborted what a previous owner left open, whose
        // pending offsets would otherwise hold the read (UNSTABLE_OFFSET_COMMIT) until the
        // coordinator times that transaction out. Read again after every re-initialization,
        // never taken from `known`: while this route was fenced another owner may have
        // committed further (it cannot see the source group's revoke when that coordinator is
        // unreachable), and resuming from our own older position would commit its range twice.
        let (start, stored) = match transactional_start(leg, eos, known).await {
            Ok(start) => start,
            Err(Error::Stopped) => return Ok(()),
            Err(e) => return Err(e),
        };
        if known.is_none() {
            leg.started(start);
        } else {
            leg.position.ackd.store(start, Ordering::Release);
        }
        tracing::debug!(partition = %route.source, transactional_id = %id,
            producer_id = identity.producer_id, epoch = identity.epoch, start, "transactions initialized");
        let cycle = Cycle::new(eos.transaction_interval, eos.transaction_max_bytes, start)
            .refreshing(eos.position_refresh_interval, now());
        txn.cycle = if stored { cycle } else { cycle.storing_first() };
        let (result, _) = leg
            .run(
                start,
                ProducerSeq::fresh_transactional(identity),
                Some(&mut txn),
            )
            .await;
        let Err(e) = result else { return Ok(()) };
        // Nothing of the open transaction may become visible: abort it (a fenced producer's
        // is aborted by whoever fenced it).
        let aborted = Box::pin(txn.txn.abort()).await;
        let committed = txn.cycle.committed_position();
        known = Some(committed);
        leg.position.ackd.store(committed, Ordering::Release);
        let class = error_class(&e);
        let fenced = class == Some(ErrorClass::Fenced)
            || matches!(&aborted, Err(a) if a.class == ErrorClass::Fenced);
        if stop.is_cancelled() {
            return Ok(());
        }
        if fenced {
            tracing::warn!(partition = %route.source, transactional_id = %id, error = %e,
                "fenced: another producer with this transactional id took over (another instance \
                 owns the partition now, or the transaction outlived the transaction timeout); \
                 nothing of the open transaction becomes visible; taking the id back in {:?} \
                 unless the partition is revoked before", eos.fenced_backoff);
            tokio::select! {
                () = tokio::time::sleep(eos.fenced_backoff) => {}
                _ = stop.cancelled() => return Ok(()),
            }
        } else if matches!(class, Some(ErrorClass::Abortable)) {
            tracing::warn!(partition = %route.source, transactional_id = %id, error = %e,
                restart = committed, "transaction aborted; redoing it from the last committed position");
        } else if let Some(io) = io_error(&e).filter(|io| io.class == ErrorClass::Denied) {
            // The open transaction is aborted; once the grant exists the work is redone from
            // the last committed position, as after an abortable error.
            if !txn
                .denial
                .wait(Some((shared.observer.as_ref(), &route.source)), io, stop)
                .await
            {
                return Ok(());
            }
        } else {
            return Err(e);
        }
    }
}

/// Exactly-once: where the route starts: the position the transactions of whoever owned the
/// partition last stored on the target; when there is none, `known` (this route's own last
/// committed position, if it ran before), else the start policy's. And whether the target
/// holds it (if not, the route stores it before its first batch).
async fn transactional_start<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    eos: &ExactlyOnce,
    known: Option<i64>,
) -> Result<(i64, bool), Error> {
    let (shared, route) = (leg.shared, leg.route);
    let targets = std::slice::from_ref(&route.target);
    let stored = retry(shared, &route.target, leg.stop, || {
        shared.target.stable_positions(&eos.group_id, targets)
    })
    .await?;
    match (stored.first().copied().flatten(), known) {
        (Some(position), _) => return Ok((position, true)),
        (None, Some(position)) => return Ok((position, false)),
        (None, None) => {}
    }
    // No position: `start` is right only for a partition nobody mirrored into yet. A route
    // stores its start position before its first batch, so a target partition that holds
    // anything lost its position (expired while the mirror was stopped longer than the
    // target's offsets.retention.minutes, or deleted): starting over from `start` would mirror
    // records twice (earliest) or skip some (latest).
    let end = retry(shared, &route.target, leg.stop, || {
        shared.target.end_offset(&route.target)
    })
    .await?;
    if end > 0 {
        return Err(Error::Target {
            partition: route.target.to_string(),
            detail: position_missing(eos, route, end),
        });
    }
    let start = resolve_start(shared, &route.source, shared.settings.start, leg.stop).await?;
    Ok((start, false))
}

/// Exactly-once: the target partition holds `end` offsets but its position in the target group
/// is gone. What happened and how to set the position by hand.
fn position_missing(eos: &ExactlyOnce, route: &Route, end: i64) -> IoError {
    let (group, target) = (&eos.group_id, &route.target);
    IoError::new(
        ErrorClass::Fatal,
        "position_missing",
        format!(
            "exactly-once: the target group '{group}' holds no position for {target}, but the \
             target partition already holds {end} offsets (mirrored before: the position expired \
             after offsets.retention.minutes on the target while the mirror was stopped, or it was \
             deleted); starting from mirror.start would mirror records twice or skip some, so \
             partition {source} stops. Store the next source offset to mirror on the target, then \
             restart: kafka-consumer-groups.sh --bootstrap-server <target> --group {group} \
             --topic {topic}:{partition} --reset-offsets --to-offset <next source offset> \
             --execute (the mirror's group on the source cluster shows a recent, never too high, \
             offset for {source}; `strait failover` translation and the offset-syncs topic know \
             the last mirrored one)",
            source = route.source,
            topic = target.topic(),
            partition = target.partition(),
        ),
    )
}

/// The pipeline class behind a partition's error, if it came from a cluster.
fn error_class(e: &Error) -> Option<ErrorClass> {
    io_error(e).map(|io| io.class)
}

/// The cluster's error inside `e`, if it is one.
fn io_error(e: &Error) -> Option<&IoError> {
    match e {
        Error::Io(io) | Error::Target { detail: io, .. } => Some(io),
        _ => None,
    }
}

/// Initializes the route's transactional id: retried while retriable, waited out while denied.
async fn init_transactions<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    txn: &mut T::Transactions,
) -> Result<ProducerIdentity, Error> {
    let mut retry = TargetRetry::new(leg.shared);
    loop {
        match Box::pin(txn.init()).await {
            Ok(identity) => {
                retry.succeeded(leg.shared, leg.route);
                return Ok(identity);
            }
            Err(e) => {
                let what = "initializing the transactional producer";
                retry.wait(leg.shared, leg.route, what, e, leg.stop).await?;
            }
        }
    }
}

async fn resolve_start<S: Source, T: Target>(
    shared: &Shared<S, T>,
    partition: &TopicPartition,
    start: StartPosition,
    stop: &CancellationToken,
) -> Result<i64, Error> {
    retry(shared, partition, stop, || {
        shared.source.resolve(partition, start)
    })
    .await
}

/// Calls `f` (a call for `partition`) until it succeeds, a non-retriable error occurs, or `stop`
/// is cancelled.
async fn retry<S, T, R, F, Fut>(
    shared: &Shared<S, T>,
    partition: &TopicPartition,
    stop: &CancellationToken,
    mut f: F,
) -> Result<R, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<R, IoError>>,
{
    let mut backoff = Backoff::new(
        shared.settings.retry_backoff,
        shared.settings.retry_backoff_max,
    );
    let mut attempts = 0u32;
    loop {
        // Boxed: a cluster call's future can be several KiB, and held inline it would make
        // every partition's task that much larger for its whole life (see `Leg::run`).
        match Box::pin(f()).await {
            Ok(v) => return Ok(v),
            Err(e) if matches!(e.class, ErrorClass::Retriable | ErrorClass::Denied) => {
                attempts += 1;
                // Visible: this is how an operator learns that, say, the target topic is
                // missing; said again at attempts 1, 2, 4, 8... so a long outage does not
                // flood the log, and across partitions at most once a second: thousands of
                // partitions of topics a fresh target has not published yet all retry at once.
                let error = format!("{e} ({}, attempt {attempts})", e.code);
                if attempts.is_power_of_two() {
                    shared.call_retries.log(partition, &error, "retrying");
                } else {
                    shared.call_retries.log_debug(partition, &error, "retrying");
                }
                if !backoff.wait(stop).await {
                    return Err(Error::Stopped);
                }
            }
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

/// A partition blocked by an ACL denial: retried with a slow backoff (the fix is an operator's
/// grant, which may take minutes), reported once to the log and the observer when it starts,
/// then at attempts 2, 4, 8..., and cleared at the first success.
pub(crate) struct Denial {
    backoff: Backoff,
    attempts: u32,
}

/// First and largest wait between attempts while an ACL denies the mirror.
const DENIED_BACKOFF: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(30),
);

impl Denial {
    pub(crate) fn new() -> Self {
        Denial {
            backoff: Backoff::new(DENIED_BACKOFF.0, DENIED_BACKOFF.1),
            attempts: 0,
        }
    }

    /// Reports one more denial and waits before the next attempt. False if `stop` was
    /// cancelled meanwhile. `partition`: the partition it blocks (and who to tell), or `None`
    /// for the forwarder's producer id, which blocks them all.
    pub(crate) async fn wait(
        &mut self,
        partition: Option<(&dyn Observer, &TopicPartition)>,
        e: &IoError,
        stop: &CancellationToken,
    ) -> bool {
        self.attempts += 1;
        report_denied(partition, e, self.attempts);
        self.backoff.wait(stop).await
    }

    /// The partition made progress: a later denial is a new one.
    pub(crate) fn clear(&mut self, observer: &dyn Observer, partition: &TopicPartition) {
        if self.attempts > 0 {
            report_granted(observer, partition, self.attempts);
        }
        self.attempts = 0;
        self.backoff.reset();
    }
}

/// Says that an ACL denies the mirror: to the observer and the log when it starts (`attempts`
/// 1), then in the log at attempts 2, 4, 8... `partition`: the partition it blocks (and who to
/// tell), or `None` for the forwarder's producer id, which blocks them all.
fn report_denied(partition: Option<(&dyn Observer, &TopicPartition)>, e: &IoError, attempts: u32) {
    let name = partition.map(|(_, p)| p.to_string());
    if attempts == 1 {
        if let Some((observer, p)) = partition {
            observer.partition_blocked(p, Some(&e.code));
        }
        tracing::error!(partition = name, error = %e, code = %e.code,
            "access denied; retrying until the grant exists (mirroring resumes by itself)");
    } else if attempts.is_power_of_two() {
        tracing::warn!(partition = name, code = %e.code, attempts, "still denied; retrying");
    }
}

/// Says that a denial of `attempts` attempts is over.
fn report_granted(observer: &dyn Observer, partition: &TopicPartition, attempts: u32) {
    tracing::info!(partition = %partition, attempts, "access granted again; resuming");
    observer.partition_blocked(partition, None);
}

#[allow(clippy::too_many_arguments)]
async fn fetch_loop<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    mut offset: i64,
    mut rules: Rules,
    max_message_bytes: &AtomicUsize,
    account: &Arc<Account>,
    tx: mpsc::Sender<WorkBox>,
    stop: &CancellationToken,
) -> Result<(), Error> {
    let settings = &shared.settings;
    let mut max_bytes = settings.partition_fetch_bytes;
    let mut backoff = Backoff::new(settings.retry_backoff, settings.retry_backoff_max);
    let mut denial = Denial::new();
    loop {
        if tx.is_closed() {
            // The produce side stopped on an error; it reports it.
            return Ok(());
        }
        // Waiting on the budget or the source must end when the produce side has stopped on
        // an error: it reports the error only once both sides ended, and a partition whose
        // source is quiet would otherwise never get back to the check above.
        let mut reservation = tokio::select! {
            r = shared.budget.reserve(account, max_bytes as usize) => r,
            _ = stop.cancelled() => return Ok(()),
            () = tx.closed() => return Ok(()),
        };
        let spec = FetchSpec {
            partition: route.source.clone(),
            offset,
            max_bytes,
            max_wait: settings.fetch_max_wait,
            isolation: settings.isolation,
        };
        let fetched = tokio::select! {
            r = shared.source.fetch(&spec) => r,
            _ = stop.cancelled() => return Ok(()),
            () = tx.closed() => return Ok(()),
        };
        let fetched = match fetched {
            Ok(f) => {
                backoff.reset();
                denial.clear(shared.observer.as_ref(), &route.source);
                f
            }
            Err(e) => {
                shared.observer.fetch_error(&route.source, &e.code);
                drop(reservation);
                match e.class {
                    ErrorClass::Retriable => {
                        shared
                            .fetch_retries
                            .log(&route.source, &e, "fetch failed, retrying");
                        if !backoff.wait(stop).await {
                            return Ok(());
                        }
                        continue;
                    }
                    ErrorClass::Denied => {
                        if !denial
                            .wait(Some((shared.observer.as_ref(), &route.source)), &e, stop)
                            .await
                        {
                            return Ok(());
                        }
                        continue;
                    }
                    ErrorClass::OffsetOutOfRange => {
                        offset = Box::pin(out_of_range(shared, route, offset, e, stop)).await?;
                        // The records up to the new offset are gone for good: let the committed
                        // position follow, or a restart would meet the same gap again (and,
                        // with `Latest`, skip what arrived meanwhile).
                        let advance = Box::new(Work::Advance { next: offset });
                        if tx.send(advance).await.is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    _ => return Err(Error::Io(e)),
                }
            }
        };
        let fetched_at = SystemTime::now();
        rules.policy.max_message_bytes = max_message_bytes.load(Ordering::Acquire);
        let planned = codec::plan_within_budget(
            &shared.budget,
            account,
            &fetched,
            offset,
            &rules,
            &mut reservation,
            stop,
        )
        .await
        .map_err(|e| Error::Partition {
            partition: route.source.to_string(),
            source: Box::new(e),
        })?;
        let Some(mut planned) = planned else {
            return Ok(());
        };
        shared
            .observer
            .lag(&route.source, fetched.high_watermark, planned.next);
        let visible_end = match settings.isolation {
            Isolation::ReadCommitted if fetched.last_stable_offset >= 0 => {
                fetched.last_stable_offset
            }
            _ => fetched.high_watermark,
        };
        if planned.steps.is_empty()
            && planned.next == offset
            && (planned.truncated_bytes > 0 || visible_end > offset)
        {
            // No complete batch although there is data: the next batch is larger than our
            // limit. A lone partition gets a whole first batch (or a cut one), but in a fetch
            // of several partitions Kafka answers a later partition whose batch does not fit
            // with nothing at all. Ask for more, up to max_fetch_bytes.
            drop(reservation);
            if max_bytes >= settings.max_fetch_bytes && !backoff.wait(stop).await {
                return Ok(());
            }
            max_bytes = max_bytes.saturating_mul(2).min(settings.max_fetch_bytes);
            continue;
        }
        // Back to the usual fetch size, but never below the largest batch just seen: a source
        // written in batches larger than partition_fetch_bytes would otherwise cost an empty
        // answer and a retry for every batch.
        let largest = planned.steps.iter().map(Step::bytes).max().unwrap_or(0);
        max_bytes = i32::try_from(largest)
            .unwrap_or(i32::MAX)
            .clamp(settings.partition_fetch_bytes, settings.max_fetch_bytes);
        // Pass-through parts are slices of the whole fetch response, which carries other
        // partitions' data too: held while this partition waits for its target, they would pin
        // memory its reservation does not count. Each part gets its own buffer now (the copy
        // that stamping would make anyway: the produce side stamps it in place).
        for step in &mut planned.steps {
            if let Step::Forward { parts, .. } = step {
                for part in parts.iter_mut() {
                    own(part);
                }
            }
        }
        drop(fetched);
        for step in planned.steps {
            let bytes = step.bytes();
            let work = match step {
                Step::Skip {
                    reason,
                    records,
                    next,
                } => {
                    shared
                        .observer
                        .batch_skipped(&route.source, reason, records);
                    Work::Advance { next }
                }
                Step::Forward { parts, next } => {
                    let mut share = reservation.split(bytes);
                    if share.bytes() < bytes {
                        // The response (a whole first batch beyond the limit) or its re-encoding
                        // is larger than what the fetch reserved. Wait for the full amount holding
                        // nothing: waiting while holding part of the budget deadlocks as soon as
                        // two partitions do it at once, or one batch is larger than the budget.
                        drop(share);
                        share = tokio::select! {
                            r = shared.budget.reserve(account, bytes) => r,
                            _ = stop.cancelled() => return Ok(()),
                        };
                    }
                    Work::Forward {
                        parts,
                        next,
                        fetched_at,
                        reservation: share,
                    }
                }
            };
            if tx.send(Box::new(work)).await.is_err() {
                // The produce side stopped on an error; it reports it.
                return Ok(());
            }
        }
        offset = planned.next;
        drop(reservation);
        if stop.is_cancelled() {
            return Ok(());
        }
    }
}

async fn out_of_range<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    offset: i64,
    e: IoError,
    stop: &CancellationToken,
) -> Result<i64, Error> {
    use super::OutOfRangePolicy::*;
    let start = match shared.settings.on_offset_out_of_range {
        Fail => {
            return Err(Error::OffsetOutOfRange {
                partition: route.source.to_string(),
                offset,
                detail: e.message,
            });
        }
        Earliest => StartPosition::Earliest,
        Latest => StartPosition::Latest,
    };
    let next = resolve_start(shared, &route.source, start, stop).await?;
    // Offsets are dense on the source: the gap is exactly the records skipped (none when the
    // position was past the end, e.g. after an unclean leader election: those are re-sent).
    let lost = u64::try_from(next.saturating_sub(offset)).unwrap_or(0);
    shared.observer.records_lost(
        &route.source,
        crate::observe::LossReason::OffsetOutOfRange,
        lost,
    );
    tracing::warn!(
        partition = %route.source, from = offset, to = next, lost,
        "source offset {offset} is no longer available; continuing at {next} as the out-of-range policy says: \
         {lost} records lost (never mirrored)"
    );
    Ok(next)
}

/// What starts a produce phase.
enum Wake {
    /// Work from the fetch side.
    Work(WorkBox),
    /// The fetch side ended.
    Closed,
    /// Exactly-once: the transaction cycle is due (the idle position's refresh).
    Due,
}

impl From<Option<WorkBox>> for Wake {
    fn from(work: Option<WorkBox>) -> Self {
        work.map_or(Wake::Closed, Wake::Work)
    }
}

/// How a produce phase ended.
enum Phase {
    /// The produce side is over: the fetch side ended and everything was acknowledged (and,
    /// exactly-once, committed), or an error stopped it.
    Ended(Result<(), Error>),
    /// The partition is idle: its window holds nothing but the producer sequence, and no
    /// transaction is open. The next work starts a new phase.
    Rested,
}

/// One phase of the partition's produce side, from the first work `rx` gave (`first`; `None`:
/// it closed) until the window is at rest again or the side ends: drives a [`Window`], carries
/// its batches to the target, the target's answers back, and does the I/O its actions ask for
/// (producer ids, topic limits). The window decides everything else. Exactly-once (`txn`): the
/// [`Cycle`] decides when the partition joins a transaction and when it commits; the
/// acknowledged position moves only with commits.
#[allow(clippy::too_many_arguments)]
async fn produce_loop<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    rx: &mut mpsc::Receiver<WorkBox>,
    first: Wake,
    position: &PositionCell,
    seq: ProducerSeq,
    policy: TargetPolicy,
    max_message_bytes: &AtomicUsize,
    mut txn: Option<&mut RouteTxn<T::Transactions>>,
) -> (Phase, ProducerSeq) {
    let settings = &shared.settings;
    let (acks_tx, mut acks_rx) = mpsc::unbounded_channel::<SlotResult>();
    let mut w: Window<Reservation> = Window::new(
        WindowConfig {
            max_in_flight: settings.max_in_flight,
            merge: MergePolicy {
                batch_size: settings.batch_size,
            },
            max_message_bytes: max_message_bytes.load(Ordering::Acquire),
            retry_backoff: (settings.retry_backoff, settings.retry_backoff_max),
            denied_backoff: DENIED_BACKOFF,
            max_decompressed_bytes: settings.max_decompressed_bytes,
        },
        seq,
    );
    let transactional_id = txn.as_ref().map(|t| t.id.clone());
    // Exactly-once: the position after everything acknowledged, not yet committed.
    let mut acked = position.ackd.load(Ordering::Acquire);
    let result = async {
        let mut input_open = true;
        match first {
            Wake::Work(work) => take_all(&mut w, *work, rx, &mut input_open),
            Wake::Closed => input_open = false,
            Wake::Due => {}
        }
        loop {
            while let Some(done) = w.poll_done() {
                if let Some(next) = forwarded(shared, route, done) {
                    acknowledge(position, txn.is_some(), &mut acked, next);
                }
            }
            if let Some(next) = w.take_pending_advance() {
                acknowledge(position, txn.is_some(), &mut acked, next);
            }
            if let Some(txn) = txn.as_deref_mut()
                && txn.cycle.must_store_first()
                && txn.cycle.is_closed()
            {
                // The target holds no position yet: store the start position before any batch
                // (see `transactional_start`).
                let start = txn.cycle.committed_position();
                Box::pin(commit_transaction(shared, route, txn, start)).await?;
                txn.cycle.committed(now(), start);
                continue;
            }
            while let Some(t) = w.poll_transmit() {
                if let Some(txn) = txn.as_deref_mut()
                    && txn.cycle.before_send(now(), t.batch.len())
                {
                    Box::pin(join_transaction(shared, route, txn)).await?;
                }
                transmit(shared, route, t, &acks_tx, transactional_id.clone()).await;
            }
            if let Some(action) = w.poll_action() {
                if txn.is_some() && matches!(action, Action::NeedProducerId) {
                    // A transaction cannot renumber its batches under a new producer id: abort
                    // it and redo it under a new epoch.
                    return Err(Error::Target {
                        partition: route.target.to_string(),
                        detail: IoError::new(
                            ErrorClass::Abortable,
                            "producer_state",
                            "the target refused the transaction's producer state",
                        ),
                    });
                }
                Box::pin(handle_action(
                    shared,
                    route,
                    &mut w,
                    action,
                    &policy,
                    max_message_bytes,
                ))
                .await?;
                // It may have unblocked the window: look again before waiting.
                continue;
            }
            if let Some(txn) = txn.as_deref_mut()
                && let Some(CycleAction::Commit { position: next }) =
                    txn.cycle.poll(now(), acked, w.is_empty(), !input_open)
            {
                Box::pin(commit_transaction(shared, route, txn, next)).await?;
                txn.denial.clear(shared.observer.as_ref(), &route.source);
                txn.cycle.committed(now(), next);
                position.acknowledge(next);
                shared.observer.committed(&route.source, next);
                continue;
            }
            let closed = txn.as_ref().is_none_or(|t| t.cycle.is_closed());
            if !input_open && w.is_empty() && closed {
                return Ok(Phase::Ended(Ok(())));
            }
            if input_open && w.at_rest() && closed {
                // Idle: the window and the acks channel need not wait with it (nothing is in
                // flight, so no answer can come).
                return Ok(Phase::Rested);
            }
            let cycle_open = txn.as_ref().is_none_or(|t| t.cycle.accepts_input());
            let timeout = match (
                w.poll_timeout(),
                txn.as_ref().and_then(|t| t.cycle.poll_timeout()),
            ) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                biased;
                Some(ack) = acks_rx.recv() => on_answer(shared, route, &mut w, ack),
                work = rx.recv(), if input_open && cycle_open && w.accepts_input() => match work {
                    None => input_open = false,
                    Some(work) => take_all(&mut w, *work, rx, &mut input_open),
                },
                () = sleep_until(timeout), if timeout.is_some() => {
                    w.handle_timeout(now());
                }
            }
        }
    }
    .await;
    (result.unwrap_or_else(|e| Phase::Ended(Err(e))), w.seq())
}

/// A batch (or a skipped range) is acknowledged up to `next`: at-least-once, the committable
/// position moves at once; exactly-once, only the transaction's pending position does.
fn acknowledge(position: &PositionCell, transactional: bool, acked: &mut i64, next: i64) {
    if transactional {
        *acked = (*acked).max(next);
    } else {
        position.acknowledge(next);
    }
}

/// Adds the route's target partition to its open transaction (opening one), retried while
/// retriable and waited out while denied.
async fn join_transaction<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut RouteTxn<T::Transactions>,
) -> Result<(), Error> {
    transaction_call(shared, route, &mut txn.txn, TxnOp::Add).await?;
    txn.cycle.added();
    Ok(())
}

/// Stores `next` in the transaction and commits it.
async fn commit_transaction<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut RouteTxn<T::Transactions>,
    next: i64,
) -> Result<(), Error> {
    let group = &txn.group_id;
    transaction_call(shared, route, &mut txn.txn, TxnOp::Commit { group, next }).await
}

/// A transaction operation of a route.
#[derive(Clone, Copy)]
enum TxnOp<'a> {
    /// Add the route's target partition (opening a transaction).
    Add,
    /// Store `next` (the next source offset) as the target partition's position in `group`
    /// and commit.
    Commit { group: &'a str, next: i64 },
}

/// One transaction operation, retried (the producer keeps the request pending) while
/// retriable; denied, abortable and fenced errors end the run (a refused AddPartitionsToTxn or
/// TxnOffsetCommit leaves the transaction to abort: [`run_transactional`] aborts it, waits a
/// denial out and redoes the work).
async fn transaction_call<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut T::Transactions,
    op: TxnOp<'_>,
) -> Result<(), Error> {
    let what = match op {
        TxnOp::Add => "adding the partition to the transaction",
        TxnOp::Commit { .. } => "committing the transaction",
    };
    // Not cancellable by `stop`: a stopping route still commits what it has (the drain
    // deadline bounds it; an abandoned transaction is aborted by the next owner's init).
    let never = CancellationToken::new();
    let mut retry = TargetRetry::new(shared);
    loop {
        let outcome = match op {
            TxnOp::Add => txn.add_partition(&route.target).await,
            TxnOp::Commit { group, next } => {
                // What the position store needs durable first (the offset syncs mapping the
                // transaction's records): a transaction committed without it would leave its
                // range unmapped for the next owner after a crash.
                match (shared.before_transaction_commit)(route.source.clone(), next).await {
                    Ok(()) => txn.commit(group, &[(route.target.clone(), next)]).await,
                    Err(e) => Err(e),
                }
            }
        };
        match outcome {
            Ok(()) => {
                retry.succeeded(shared, route);
                return Ok(());
            }
            Err(e) if e.class == ErrorClass::Denied => {
                return Err(Error::Target {
                    partition: route.target.to_string(),
                    detail: e,
                });
            }
            Err(e) => retry.wait(shared, route, what, e, &never).await?,
        }
    }
}

/// The retry policy of the target-side calls a route makes outside the produce window
/// (producer ids, transactions): after a backoff while they fail retriably, after the slow
/// denial backoff (reported) while an ACL denies them; any other error ends the route as the
/// target partition's.
struct TargetRetry {
    backoff: Backoff,
    denial: Denial,
    attempts: u32,
}

impl TargetRetry {
    fn new<S: Source, T: Target>(shared: &Shared<S, T>) -> Self {
        TargetRetry {
            backoff: Backoff::new(
                shared.settings.retry_backoff,
                shared.settings.retry_backoff_max,
            ),
            denial: Denial::new(),
            attempts: 0,
        }
    }

    /// The call succeeded: a denial it waited out is over.
    fn succeeded<S: Source, T: Target>(&mut self, shared: &Shared<S, T>, route: &Route) {
        self.denial.clear(shared.observer.as_ref(), &route.source);
    }

    /// The call failed with `e`: waits before the next attempt, or says why there is none
    /// ([`Error::Stopped`] when `stop` was cancelled meanwhile).
    async fn wait<S: Source, T: Target>(
        &mut self,
        shared: &Shared<S, T>,
        route: &Route,
        what: &str,
        e: IoError,
        stop: &CancellationToken,
    ) -> Result<(), Error> {
        let waited = match e.class {
            ErrorClass::Retriable => {
                self.attempts += 1;
                if self.attempts.is_power_of_two() {
                    tracing::warn!(partition = %route.target, error = %e,
                        attempts = self.attempts, "{what} failed; retrying");
                }
                self.backoff.wait(stop).await
            }
            ErrorClass::Denied => {
                self.denial
                    .wait(Some((shared.observer.as_ref(), &route.source)), &e, stop)
                    .await
            }
            _ => {
                return Err(Error::Target {
                    partition: route.target.to_string(),
                    detail: e,
                });
            }
        };
        if waited { Ok(()) } else { Err(Error::Stopped) }
    }
}

/// The window's clock: tokio's, so paused-time tests drive it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// `work` joins the window, and everything already waiting behind it, so small batches queued
/// behind a full window can be merged.
fn take_all(
    w: &mut Window<Reservation>,
    work: Work,
    rx: &mut mpsc::Receiver<WorkBox>,
    input_open: &mut bool,
) {
    take(w, work);
    while w.accepts_input() {
        match rx.try_recv() {
            Ok(work) => take(w, *work),
            Err(mpsc::error::TryRecvError::Empty) => break,
            Err(mpsc::error::TryRecvError::Disconnected) => {
                *input_open = false;
                break;
            }
        }
    }
}

fn take(w: &mut Window<Reservation>, work: Work) {
    match work {
        Work::Advance { next } => w.advance(next),
        Work::Forward {
            parts,
            next,
            fetched_at,
            reservation,
        } => w.push(parts, next, fetched_at, reservation),
    }
}

fn on_answer<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    w: &mut Window<Reservation>,
    answer: SlotResult,
) {
    if let Err(e) = &answer.result
        && e.class != ErrorClass::Duplicate
    {
        shared.observer.produce_error(&route.target, &e.code);
    }
    w.on_result(answer.slot, answer.result, now());
}

async fn transmit<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    t: Transmit,
    acks_tx: &mpsc::UnboundedSender<SlotResult>,
    transactional_id: Option<Arc<str>>,
) {
    let target = &route.target;
    // Boxed (one allocation per batch sent): the lookup's future can be several KiB, and the
    // produce side of a partition that had data once stays allocated.
    let node = match Box::pin(shared.target.leader(target, t.refresh)).await {
        Ok(node) => node,
        Err(e) => {
            let _ = acks_tx.send(SlotResult {
                slot: t.slot,
                result: Err(e),
            });
            return;
        }
    };
    shared.senders.submit(
        node,
        ProduceItem {
            partition: target.clone(),
            batch: t.batch,
            slot: t.slot,
            reply: acks_tx.clone(),
            queued_at: std::time::Instant::now(),
            transactional_id,
        },
    );
}

/// Reports an acknowledged batch; returns the position it completes, if any.
fn forwarded<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    done: Done<Reservation>,
) -> Option<i64> {
    shared.observer.batch_forwarded(&BatchForwarded {
        source: &route.source,
        target: &route.target,
        source_base_offset: done.part.first_offset,
        source_last_offset: done.part.last_offset,
        records: done.part.records,
        bytes: done.part.batch.len() as u64,
        path: done.part.path,
        compression: done.part.compression.as_str(),
        max_timestamp_ms: done.part.max_timestamp_ms,
        fetched_at: done.fetched_at,
        acked_at: SystemTime::now(),
        target_base_offset: done.target_base_offset,
        batch: &done.part.batch,
        offsets: &done.part.offsets,
    });
    // The memory the batch held is free once the target has it.
    drop(done.holds);
    done.next
}

async fn handle_action<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    w: &mut Window<Reservation>,
    action: Action,
    policy: &TargetPolicy,
    max_message_bytes: &AtomicUsize,
) -> Result<(), Error> {
    let fail = |e: IoError| Error::Target {
        partition: route.target.to_string(),
        detail: e,
    };
    match action {
        Action::Retrying(e) => {
            shared
                .produce_retries
                .log(&route.target, &e, "produce failed, resending");
        }
        Action::Denied { error, attempts } => {
            report_denied(
                Some((shared.observer.as_ref(), &route.source)),
                &error,
                attempts,
            );
        }
        Action::Granted { attempts } => {
            report_granted(shared.observer.as_ref(), &route.source, attempts);
        }
        Action::NeedProducerId => {
            tracing::warn!(partition = %route.target,
                "renumbering unacknowledged batches under a new producer id");
            let identity = new_identity(shared, route).await?;
            w.on_producer_id(identity);
        }
        Action::Split(refused) => {
            tracing::debug!(partition = %route.target, error = %refused, "reading the target topic's limit to split a refused batch");
            let never = CancellationToken::new();
            let limits = retry(shared, &route.target, &never, || {
                shared.target.topic_limits(route.target.topic())
            })
            .await?;
            // The fetch side re-encodes later batches under the lower limit too.
            max_message_bytes.fetch_min(limits.max_message_bytes, Ordering::AcqRel);
            w.split_head(limits.max_message_bytes, policy)
                .map_err(fail)?;
        }
        Action::Fail(e) => return Err(fail(e)),
    }
    Ok(())
}

/// A new producer id for the partition, retried until the target gives one (denials wait
/// longer) or fails for good.
async fn new_identity<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
) -> Result<ProducerIdentity, Error> {
    let never = CancellationToken::new();
    let mut retry = TargetRetry::new(shared);
    loop {
        match shared.target.init_producer_id().await {
            Ok(id) => {
                retry.succeeded(shared, route);
                return Ok(id);
            }
            Err(e) => {
                let what = "getting a new producer id";
                retry.wait(shared, route, what, e, &never).await?;
            }
        }
    }
}

/// Gives a pass-through part a buffer of its own instead of a slice of the fetch response.
/// Re-encoded parts already own theirs.
fn own(part: &mut Part) {
    if matches!(part.path, Path::PassThrough) {
        let owned = Bytes::from(part.batch.to_vec());
        super::copies::record(&part.batch, &owned);
        part.batch = owned;
    }
}
