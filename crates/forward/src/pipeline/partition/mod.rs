//! One source partition mirrored into one target partition: a fetch task feeding a produce task.
//!
//! The fetch task plans each response and hands the parts over a bounded channel (the window's
//! appetite plus the memory budget are the back-pressure). The produce task drives the target
//! partition's [`Window`] (`window.rs`): the state machine that stamps, merges, sends at most
//! `max_in_flight` batches, resends, renumbers, splits and moves the committable position only
//! past acknowledged batches. This module holds the async parts: the fetch side ([`fetch`]), the
//! exactly-once transactional driver ([`transactional`]), and here the run of both sides and
//! the produce side, carrying the window's batches and actions to the target. Waits after
//! failed calls go through the pipeline's one retry driver ([`retry`](super::retry)).
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

use super::budget::{Account, Budget, Reservation};
use super::codec;
use super::commit_hook::{AckedBatch, CommitHook};
use super::cycle::{Cycle, CycleAction};
use super::io::{
    FailureAction, FetchSpec, IoError, Isolation, ProducerIdentity, Source, StartPosition, Target,
    TopicLimits, Transactions,
};
use super::plan::{Part, Rules, Step};
use super::producer::{ProducerSeq, Producers};
use super::retry::{
    self, Blocked, DENIED_BACKOFF, OnDenied, Retry, Stop, report_denied, report_granted,
};
use super::retry_log::RetryLog;
use super::sender::{ProduceItem, Senders, SlotResult};
use super::window::{Action, Done, MergePolicy, Transmit, Window, WindowConfig};
use super::{ExactlyOnce, Settings};

mod fetch;
mod transactional;

use fetch::fetch_loop;
use transactional::{RouteTxn, commit_transaction, join_transaction, run_transactional};

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
    /// Acknowledged batches and positions about to be committed, in step with the commits.
    pub(crate) commit_hook: Arc<dyn CommitHook>,
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
    let limits = async {
        retry(&shared, &route.target, &stop, || {
            shared.target.topic_limits(route.target.topic())
        })
        .await
    };
    let transactional = shared.settings.exactly_once.is_some();
    // The target topic's limits and the start position at once: two lookups in a row per
    // partition were two rounds of coalesced requests before a 4,000-partition start could
    // fetch. Exactly-once routes read their start later (below), so they wait for nothing here.
    // The first error ends both.
    let (limits, start) = tokio::try_join!(limits, async {
        match start {
            Some(offset) => Ok(Some(offset)),
            None if transactional => Ok(None),
            None => resolve_start(&shared, &route.source, shared.settings.start, &stop)
                .await
                .map(Some),
        }
    })?;
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
    let Some(start) = start else {
        // Not reached: only exactly-once routes (returned above) leave it unresolved.
        return Err(Error::Stopped);
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
            excluded: shared.settings.excluded.get(&route.source),
            batch_size: shared.settings.batch_size,
            run_ratio: 1.0,
        };
        // The produce side lowers it when the target refuses a batch as too large.
        let max_message_bytes = AtomicUsize::new(self.limits.max_message_bytes);
        let (tx, mut rx) = mpsc::channel(shared.settings.max_in_flight);
        let max_message_bytes = &max_message_bytes;
        // Each side is called inside its async block, not moved into it: a future moved into
        // an async block is stored twice (captured, then awaited), and this task's future is
        // allocated for every partition.
        let fetch = async {
            let r = fetch_loop(self, start, rules.clone(), max_message_bytes, tx).await;
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
                    self,
                    &mut rx,
                    first,
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
/// is cancelled: [`retry::call`] with the forwarder's backoff and call log.
async fn retry<S, T, R, F, Fut>(
    shared: &Shared<S, T>,
    partition: &TopicPartition,
    stop: &CancellationToken,
    f: F,
) -> Result<R, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<R, IoError>>,
{
    let range = (
        shared.settings.retry_backoff,
        shared.settings.retry_backoff_max,
    );
    retry::call(range, &shared.call_retries, partition, stop, f).await
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
async fn produce_loop<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    rx: &mut mpsc::Receiver<WorkBox>,
    first: Wake,
    seq: ProducerSeq,
    policy: TargetPolicy,
    max_message_bytes: &AtomicUsize,
    mut txn: Option<&mut RouteTxn<T::Transactions>>,
) -> (Phase, ProducerSeq) {
    let (shared, route, position) = (leg.shared.as_ref(), leg.route, leg.position);
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
                            FailureAction::Abortable,
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
                let started = now();
                let (open, drain) = txn.cycle.phases(started);
                Box::pin(commit_transaction(shared, route, txn, next)).await?;
                txn.denial
                    .succeeded(Some((shared.observer.as_ref(), &route.source)));
                let done = now();
                // Where a transaction's time goes (docs/exactly-once.md, "Where the time goes"):
                // taking batches, waiting for their acknowledgements, the commit's calls.
                tracing::debug!(partition = %route.source, position = next,
                    add_ms = ms(txn.added_in), open_ms = ms(open), drain_ms = ms(drain),
                    commit_ms = ms(done.saturating_duration_since(started)),
                    "transaction committed");
                txn.added_in = std::time::Duration::ZERO;
                txn.cycle.committed(done, next);
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

/// The retry policy of the target-side calls a route makes outside the produce window
/// (producer ids, transactions): after a backoff while they fail retriably, after the slow
/// denial backoff (reported) while an ACL denies them.
fn target_retry<S: Source, T: Target>(shared: &Shared<S, T>) -> Retry {
    let range = (
        shared.settings.retry_backoff,
        shared.settings.retry_backoff_max,
    );
    Retry::new(range, OnDenied::WaitSlowly)
}

/// A target-side call (`what`) of `route` failed with `e`: waits before the next attempt
/// (retriable failures warned of at attempts 1, 2, 4...), or says why there is none: any error
/// but a retriable one or a denial ends the route as the target partition's, and
/// [`Error::Stopped`] when `stop` was cancelled meanwhile.
async fn target_wait<S: Source, T: Target>(
    retry: &mut Retry,
    shared: &Shared<S, T>,
    route: &Route,
    what: &str,
    e: IoError,
    stop: &CancellationToken,
) -> Result<(), Error> {
    let log = |e: &IoError, attempts: u32| {
        if attempts.is_power_of_two() {
            tracing::warn!(partition = %route.target, error = %e, attempts,
                "{what} failed; retrying");
        }
    };
    let blocked: Blocked<'_> = Some((shared.observer.as_ref(), &route.source));
    match retry.wait(e, blocked, log, stop).await {
        Ok(()) => Ok(()),
        Err(Stop::Cancelled) => Err(Error::Stopped),
        Err(Stop::Failed(detail)) => Err(Error::Target {
            partition: route.target.to_string(),
            detail,
        }),
    }
}

/// A duration in milliseconds, for the timing logs.
fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
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
        && e.action != FailureAction::Duplicate
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

/// Reports an acknowledged batch; returns the position it completes, if any. The commit hook
/// hears of the batch here, before the caller counts the position as acknowledged (and so
/// before any commit of it): the order [`CommitHook`] promises.
fn forwarded<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    done: Done<Reservation>,
) -> Option<i64> {
    shared.commit_hook.acknowledged(&AckedBatch {
        source: &route.source,
        target: &route.target,
        source_base_offset: done.part.first_offset,
        source_last_offset: done.part.last_offset,
        records: done.part.records,
        target_base_offset: done.target_base_offset,
        offsets: &done.part.offsets,
    });
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
    let mut retry = target_retry(shared);
    loop {
        match shared.target.init_producer_id().await {
            Ok(id) => {
                retry.succeeded(Some((shared.observer.as_ref(), &route.source)));
                return Ok(id);
            }
            Err(e) => {
                let what = "getting a new producer id";
                target_wait(&mut retry, shared, route, what, e, &never).await?;
            }
        }
    }
}
