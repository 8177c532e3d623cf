//! One source partition mirrored into one target partition: a fetch task feeding a produce task.
//!
//! The fetch task plans each response and hands the parts over a bounded channel (the in-flight
//! window plus the memory budget are the back-pressure). The produce task owns the target
//! partition's producer sequence and its window of unacknowledged batches: it stamps, sends at
//! most `max_in_flight` of them (Kafka's duplicate detection covers only the last five batches),
//! retries identical bytes, renumbers under a fresh producer id when the target's producer state
//! no longer matches, splits a batch the target refuses as too large, and moves the committable
//! position only past acknowledged batches.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use strait_wire::TopicPartition;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::batch::RecordBatch;
use crate::observe::Path;
use crate::observe::{BatchForwarded, Observer};
use crate::reencode::reencode;
use crate::rewrite::{ProducerStamp, TargetPolicy, stamp_in_place};

use super::Settings;
use super::backoff::Backoff;
use super::budget::{Account, Budget, Reservation};
use super::io::{
    ErrorClass, FetchSpec, IoError, Isolation, ProducerIdentity, Source, StartPosition, Target,
};
use super::plan::{self, Part, Rules, Step};
use super::producer::{ProducerSeq, Producers};
use super::sender::{ProduceItem, Senders, SlotResult};

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
}

/// What the fetch task hands the produce task.
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
    let start = match start {
        Some(offset) => offset,
        None => resolve_start(&shared, &route.source, shared.settings.start, &stop).await?,
    };
    position.ackd.store(start, Ordering::Release);
    shared
        .observer
        .partition_started(&route.source, &route.target, start);
    let limits = retry(&shared, &stop, || {
        shared.target.topic_limits(route.target.topic())
    })
    .await?;
    let seq = match shared.producers.claim(&route.target) {
        Some(seq) => seq,
        // Another route writes into the same target partition right now: sharing its producer
        // id would interleave two sequences, so this one gets its own.
        None => {
            ProducerSeq::fresh(retry(&shared, &stop, || shared.target.init_producer_id()).await?)
        }
    };
    let rules = Rules {
        isolation: shared.settings.isolation,
        policy: TargetPolicy {
            max_message_bytes: limits.max_message_bytes,
            compression: shared.settings.compression,
            log_append_time: shared.settings.log_append_time,
            max_decompressed_bytes: shared.settings.max_decompressed_bytes,
            ..TargetPolicy::default()
        },
    };
    // The produce side lowers it when the target refuses a batch as too large.
    let max_message_bytes = AtomicUsize::new(limits.max_message_bytes);
    let (tx, rx) = mpsc::channel(shared.settings.max_in_flight);
    let fetch = fetch_loop(
        &shared,
        &route,
        start,
        rules.clone(),
        &max_message_bytes,
        &account,
        tx,
        &stop,
    );
    let produce = produce_loop(
        &shared,
        &route,
        rx,
        &position,
        seq,
        rules.policy,
        &max_message_bytes,
    );
    // The produce side ends when the fetch side has ended and everything was acknowledged.
    let fetch = async {
        let r = fetch.await;
        tracing::debug!(partition = %route.source, "fetch side ended");
        r
    };
    let produce = async {
        let r = produce.await;
        tracing::debug!(partition = %route.source, "produce side ended");
        r
    };
    let (fetched, (produced, seq)) = tokio::join!(fetch, produce);
    shared.producers.release(&route.target, seq);
    produced.and(fetched)
}

async fn resolve_start<S: Source, T: Target>(
    shared: &Shared<S, T>,
    partition: &TopicPartition,
    start: StartPosition,
    stop: &CancellationToken,
) -> Result<i64, Error> {
    retry(shared, stop, || shared.source.resolve(partition, start)).await
}

/// Calls `f` until it succeeds, a non-retriable error occurs, or `stop` is cancelled.
async fn retry<S, T, R, F, Fut>(
    shared: &Shared<S, T>,
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
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if matches!(e.class, ErrorClass::Retriable | ErrorClass::Denied) => {
                attempts += 1;
                // Visible: this is how an operator learns that, say, the target topic is
                // missing; said again at attempts 1, 2, 4, 8... so a long outage does not
                // flood the log.
                if attempts.is_power_of_two() {
                    tracing::warn!(error = %e, code = %e.code, attempts, "retrying");
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
        let name = partition.map(|(_, p)| p.to_string());
        if self.attempts == 1 {
            if let Some((observer, p)) = partition {
                observer.partition_blocked(p, Some(&e.code));
            }
            tracing::error!(partition = name, error = %e, code = %e.code,
                "access denied; retrying until the grant exists (mirroring resumes by itself)");
        } else if self.attempts.is_power_of_two() {
            tracing::warn!(partition = name, code = %e.code, attempts = self.attempts,
                "still denied; retrying");
        }
        self.backoff.wait(stop).await
    }

    /// The partition made progress: a later denial is a new one.
    pub(crate) fn clear(&mut self, observer: &dyn Observer, partition: &TopicPartition) {
        if self.attempts > 0 {
            tracing::info!(partition = %partition, attempts = self.attempts, "access granted again; resuming");
            observer.partition_blocked(partition, None);
        }
        self.attempts = 0;
        self.backoff.reset();
    }
}

#[allow(clippy::too_many_arguments)]
async fn fetch_loop<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    mut offset: i64,
    mut rules: Rules,
    max_message_bytes: &AtomicUsize,
    account: &Arc<Account>,
    tx: mpsc::Sender<Work>,
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
        let mut reservation = tokio::select! {
            r = shared.budget.reserve(account, max_bytes as usize) => r,
            _ = stop.cancelled() => return Ok(()),
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
                        tracing::warn!(partition = %route.source, error = %e, "fetch failed, retrying");
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
                        offset = out_of_range(shared, route, offset, e, stop).await?;
                        // The records up to the new offset are gone for good: let the committed
                        // position follow, or a restart would meet the same gap again (and,
                        // with `Latest`, skip what arrived meanwhile).
                        if tx.send(Work::Advance { next: offset }).await.is_err() {
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
        let mut planned = plan::plan(&fetched, offset, &rules).map_err(|e| Error::Partition {
            partition: route.source.to_string(),
            source: Box::new(e),
        })?;
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
            if tx.send(work).await.is_err() {
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
        "source offset {offset} is no longer available; continuing at {next} as mirror.on_offset_out_of_range says: \
         {lost} records lost (never mirrored)"
    );
    Ok(next)
}

/// A batch in the produce window.
#[derive(Debug)]
struct Slot {
    id: u64,
    part: Part,
    /// The producer id, epoch and sequence the batch is stamped with (`part.batch` carries it).
    stamp: ProducerStamp,
    /// Position once this slot and all before it are acknowledged (None: a non-final part).
    next: Option<i64>,
    state: SlotState,
    fetched_at: SystemTime,
    reservation: Option<Reservation>,
}

#[derive(Debug)]
enum SlotState {
    /// Stamped, not sent yet (behind a full window, or waiting to be resent).
    Queued,
    InFlight,
    Acked(i64),
    Failed(IoError),
}

struct Window<'a, S, T> {
    shared: &'a Shared<S, T>,
    route: &'a Route,
    position: &'a PositionCell,
    policy: TargetPolicy,
    max_message_bytes: &'a AtomicUsize,
    slots: VecDeque<Slot>,
    seq: ProducerSeq,
    next_id: u64,
    acks_tx: mpsc::UnboundedSender<SlotResult>,
    backoff: Backoff,
    /// A position reached by skipped batches while the window was empty.
    pending_advance: Option<i64>,
    denial: Denial,
}

async fn produce_loop<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    mut rx: mpsc::Receiver<Work>,
    position: &PositionCell,
    seq: ProducerSeq,
    policy: TargetPolicy,
    max_message_bytes: &AtomicUsize,
) -> (Result<(), Error>, ProducerSeq) {
    let (acks_tx, mut acks_rx) = mpsc::unbounded_channel();
    let mut w = Window {
        shared,
        route,
        position,
        policy,
        max_message_bytes,
        slots: VecDeque::new(),
        seq,
        next_id: 0,
        acks_tx,
        backoff: Backoff::new(
            shared.settings.retry_backoff,
            shared.settings.retry_backoff_max,
        ),
        pending_advance: None,
        denial: Denial::new(),
    };
    let result = async {
        let mut input_open = true;
        loop {
            if !input_open && w.slots.is_empty() {
                return Ok(());
            }
            let window_open = w.slots.len() < shared.settings.max_in_flight && !w.has_failed();
            tokio::select! {
                biased;
                Some(ack) = acks_rx.recv() => w.on_result(ack),
                work = rx.recv(), if input_open && window_open => match work {
                    None => input_open = false,
                    Some(Work::Advance { next }) => w.advance(next),
                    Some(Work::Forward { parts, next, fetched_at, reservation }) => {
                        w.push(parts, next, fetched_at, reservation)?;
                    }
                },
            }
            w.pop_acked();
            if w.has_failed() {
                if !w.any_in_flight() {
                    w.recover().await?;
                }
            } else {
                w.send_queued(false).await;
            }
        }
    }
    .await;
    (result, w.seq)
}

impl<S: Source, T: Target> Window<'_, S, T> {
    fn has_failed(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s.state, SlotState::Failed(_)))
    }

    fn any_in_flight(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s.state, SlotState::InFlight))
    }

    fn advance(&mut self, next: i64) {
        match self.slots.back_mut() {
            Some(last) => last.next = Some(last.next.map_or(next, |n| n.max(next))),
            None => {
                self.pending_advance = Some(next);
                self.position.acknowledge(next);
            }
        }
    }

    /// Stamps the parts of one source batch and queues them; [`send_queued`](Self::send_queued)
    /// sends them as the window allows.
    fn push(
        &mut self,
        parts: Vec<Part>,
        next: i64,
        fetched_at: SystemTime,
        reservation: Reservation,
    ) -> Result<(), Error> {
        let count = parts.len();
        let mut reservation = Some(reservation);
        for (i, mut part) in parts.into_iter().enumerate() {
            let last = i + 1 == count;
            let stamp = self.seq.stamp(part.records);
            part.batch = stamp_part(std::mem::take(&mut part.batch), stamp)?;
            self.slots.push_back(Slot {
                id: self.next_id,
                part,
                stamp,
                next: last.then_some(next),
                state: SlotState::Queued,
                fetched_at,
                // The whole reservation rides on the last part: it is released when the
                // source batch is fully acknowledged.
                reservation: if last { reservation.take() } else { None },
            });
            self.next_id += 1;
        }
        Ok(())
    }

    /// Sends the queued slots among the first `max_in_flight` of the window, in order. A batch
    /// further back waits: if it were appended while an earlier one's answer was lost, the
    /// earlier one's resend could fall out of Kafka's five-batch duplicate window and be
    /// appended twice (or refused as out of order). Until the target confirmed the producer id
    /// (see [`ProducerSeq::confirmed`]) the window is one batch.
    async fn send_queued(&mut self, refresh: bool) {
        let mut refresh = refresh;
        let limit = if self.seq.confirmed {
            self.shared.settings.max_in_flight
        } else {
            1
        };
        let window = limit.min(self.slots.len());
        for i in 0..window {
            if matches!(self.slots[i].state, SlotState::Queued) {
                self.slots[i].state = SlotState::InFlight;
                self.send(i, refresh).await;
                refresh = false;
            }
        }
    }

    async fn send(&self, index: usize, refresh: bool) {
        let slot = &self.slots[index];
        let target = &self.route.target;
        let node = match self.shared.target.leader(target, refresh).await {
            Ok(node) => node,
            Err(e) => {
                let _ = self.acks_tx.send(SlotResult {
                    slot: slot.id,
                    result: Err(e),
                });
                return;
            }
        };
        self.shared.senders.submit(
            node,
            ProduceItem {
                partition: target.clone(),
                batch: slot.part.batch.clone(),
                slot: slot.id,
                reply: self.acks_tx.clone(),
                queued_at: std::time::Instant::now(),
            },
        );
    }

    fn on_result(&mut self, result: SlotResult) {
        let Some(slot) = self.slots.iter_mut().find(|s| s.id == result.slot) else {
            return; // a late answer for a slot already settled
        };
        if !matches!(slot.state, SlotState::InFlight) {
            return; // not sent under this id any more
        }
        slot.state = match result.result {
            Ok(ack) => {
                self.backoff.reset();
                self.denial
                    .clear(self.shared.observer.as_ref(), &self.route.source);
                self.seq.confirmed = true;
                SlotState::Acked(ack.base_offset)
            }
            Err(e) if e.class == ErrorClass::Duplicate => {
                self.backoff.reset();
                self.seq.confirmed = true;
                SlotState::Acked(-1)
            }
            Err(e) => {
                self.shared
                    .observer
                    .produce_error(&self.route.target, &e.code);
                SlotState::Failed(e)
            }
        };
    }

    fn pop_acked(&mut self) {
        while let Some(SlotState::Acked(base)) = self.slots.front().map(|s| &s.state) {
            let base = *base;
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            let now = SystemTime::now();
            self.shared.observer.batch_forwarded(&BatchForwarded {
                source: &self.route.source,
                target: &self.route.target,
                source_base_offset: slot.part.first_offset,
                source_last_offset: slot.part.last_offset,
                records: slot.part.records,
                bytes: slot.part.batch.len() as u64,
                path: slot.part.path,
                compression: slot.part.compression.as_str(),
                max_timestamp_ms: slot.part.max_timestamp_ms,
                fetched_at: slot.fetched_at,
                acked_at: now,
                target_base_offset: base,
                batch: &slot.part.batch,
            });
            if let Some(next) = slot.next {
                self.position.acknowledge(next);
            }
        }
        if self.slots.is_empty()
            && let Some(next) = self.pending_advance.take()
        {
            self.position.acknowledge(next);
        }
    }

    /// Every sent slot has settled and at least one failed: decide, then resend all
    /// unacknowledged slots in order (identical bytes, renumbered under a new producer id, or
    /// with the refused batch split).
    async fn recover(&mut self) -> Result<(), Error> {
        // Failures behind an earlier unacknowledged slot are consequences of it (the broker
        // refuses sequence gaps), so the head's error decides.
        let head_err = self.slots.iter().find_map(|s| match &s.state {
            SlotState::Failed(e) => Some(e.clone()),
            _ => None,
        });
        let Some(head_err) = head_err else {
            return Ok(());
        };
        let never = CancellationToken::new();
        match head_err.class {
            ErrorClass::Retriable => {
                tracing::warn!(partition = %self.route.target, error = %head_err, "produce failed, resending");
                self.backoff.wait(&never).await;
                self.requeue();
                self.send_queued(true).await;
                Ok(())
            }
            ErrorClass::Denied => {
                let observer = self.shared.observer.clone();
                self.denial
                    .wait(
                        Some((observer.as_ref(), &self.route.source)),
                        &head_err,
                        &never,
                    )
                    .await;
                self.requeue();
                self.send_queued(true).await;
                Ok(())
            }
            ErrorClass::ProducerState => {
                tracing::warn!(partition = %self.route.target, error = %head_err,
                    "target producer state lost; renumbering under a new producer id");
                let identity = self.new_identity().await?;
                self.seq = ProducerSeq::fresh(identity);
                self.restamp()?;
                self.requeue();
                self.send_queued(false).await;
                Ok(())
            }
            ErrorClass::TooLarge => {
                self.split_head(head_err).await?;
                // The pieces and every unacknowledged batch after them are renumbered under a
                // fresh producer id. Continuing the old sequence from the refused batch could
                // give a later batch the exact sequence range of one the target acknowledged
                // meanwhile (a broker with no state for the producer accepts a gap), and the
                // target would answer it as a duplicate without writing it: silent loss.
                let identity = self.new_identity().await?;
                self.seq = ProducerSeq::fresh(identity);
                self.restamp()?;
                self.requeue();
                self.send_queued(false).await;
                Ok(())
            }
            _ => Err(self.stop(head_err)),
        }
    }

    async fn new_identity(&mut self) -> Result<ProducerIdentity, Error> {
        let never = CancellationToken::new();
        loop {
            match self.shared.target.init_producer_id().await {
                Ok(id) => return Ok(id),
                Err(e) if e.class == ErrorClass::Retriable => {
                    tracing::warn!(partition = %self.route.target, error = %e, "getting a new producer id failed, retrying");
                    self.backoff.wait(&never).await;
                }
                Err(e) if e.class == ErrorClass::Denied => {
                    let observer = self.shared.observer.clone();
                    self.denial
                        .wait(Some((observer.as_ref(), &self.route.source)), &e, &never)
                        .await;
                }
                Err(e) => return Err(self.stop(e)),
            }
        }
    }

    /// Stamps every unacknowledged slot again, in order, from `self.seq`.
    fn restamp(&mut self) -> Result<(), Error> {
        for slot in self.slots.iter_mut() {
            if !matches!(slot.state, SlotState::Acked(_)) {
                slot.stamp = self.seq.stamp(slot.part.records);
                slot.part.batch = stamp_part(std::mem::take(&mut slot.part.batch), slot.stamp)?;
            }
        }
        Ok(())
    }

    /// Every failed slot is sent again (under a new id, so a late answer to the old send is
    /// ignored).
    fn requeue(&mut self) {
        for slot in self.slots.iter_mut() {
            if matches!(slot.state, SlotState::Failed(_)) {
                slot.state = SlotState::Queued;
                slot.id = self.next_id;
                self.next_id += 1;
            }
        }
    }

    /// Replaces the head slot, refused as too large, by a re-encoding in smaller batches.
    async fn split_head(&mut self, err: IoError) -> Result<(), Error> {
        let never = CancellationToken::new();
        let target = self.route.target.clone();
        let limits = retry(self.shared, &never, || {
            self.shared.target.topic_limits(target.topic())
        })
        .await?;
        self.max_message_bytes
            .fetch_min(limits.max_message_bytes, Ordering::AcqRel);
        let Some(head) = self.slots.pop_front() else {
            return Ok(());
        };
        // The configured limit; or, if the batch is within it as far as the mirror can tell (it
        // may not read the configuration, or the broker grew the batch by recompressing it),
        // half the refused size, halving again until the target takes the pieces.
        let refused = head.part.batch.len();
        let max = if limits.max_message_bytes < refused {
            limits.max_message_bytes
        } else {
            refused / 2
        };
        tracing::warn!(partition = %target, error = %err, size = refused, max,
            "the target refused a batch as too large; splitting it");
        let policy = TargetPolicy {
            max_message_bytes: max,
            ..self.policy.clone()
        };
        let pieces = if head.part.records > 1 {
            RecordBatch::parse(head.part.batch.clone()).and_then(|batch| {
                reencode(&batch, batch.base_offset(), ProducerStamp::NONE, &policy)
                    .map(|p| (batch, p))
            })
        } else {
            Err(Error::RecordTooLarge {
                offset: head.part.first_offset,
                size: refused,
                limit: max,
            })
        };
        let (batch, pieces) = match pieces {
            Ok(p) => p,
            Err(e) => {
                let detail = IoError::new(
                    ErrorClass::Fatal,
                    err.code.clone(),
                    format!(
                        "the target refused a {refused}-byte batch ({}: {}) and it cannot be split \
                         further: {e}. Raise max.message.bytes of target topic {} (or the broker's \
                         message.max.bytes) to at least the source's",
                        err.code,
                        err.message,
                        target.topic()
                    ),
                );
                self.slots.push_front(head);
                return Err(self.stop(detail));
            }
        };
        let count = pieces.len();
        let mut reservation = head.reservation;
        for (i, piece) in pieces.into_iter().enumerate().rev() {
            let last = i + 1 == count;
            // Source offsets relative to the part's first offset (the stamped batch's base offset
            // is 0, so this is exact for a pass-through part and approximate for an already
            // re-encoded one).
            let shift = head.part.first_offset - batch.base_offset();
            let first_offset = piece
                .first_source_offset()
                .map_or(head.part.first_offset, |o| o + shift);
            let last_offset = piece
                .last_source_offset()
                .map_or(head.part.last_offset, |o| o + shift);
            let records = u32::try_from(piece.source_offsets().len()).unwrap_or(0);
            let out = piece.into_batch();
            let part = Part {
                first_offset,
                last_offset,
                records,
                path: head.part.path,
                compression: out.compression(),
                max_timestamp_ms: out.max_timestamp(),
                batch: out.into_bytes(),
            };
            self.slots.push_front(Slot {
                id: self.next_id,
                part,
                stamp: head.stamp,
                next: if last { head.next } else { None },
                state: SlotState::Failed(err.clone()),
                fetched_at: head.fetched_at,
                reservation: if last { reservation.take() } else { None },
            });
            self.next_id += 1;
        }
        Ok(())
    }

    fn stop(&self, e: IoError) -> Error {
        Error::Target {
            partition: self.route.target.to_string(),
            detail: e,
        }
    }
}

/// Stamps a part's batch with `stamp`, in place when nothing else holds the buffer (the usual
/// case: [`own`] gave it its own), else on a copy.
fn stamp_part(batch: Bytes, stamp: ProducerStamp) -> Result<Bytes, Error> {
    let mut buf = batch
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    stamp_in_place(&mut buf, stamp)?;
    Ok(buf.freeze())
}

/// Gives a pass-through part a buffer of its own instead of a slice of the fetch response.
/// Re-encoded parts already own theirs.
fn own(part: &mut Part) {
    if matches!(part.path, Path::PassThrough) {
        part.batch = Bytes::from(part.batch.to_vec());
    }
}
