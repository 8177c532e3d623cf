//! The produce window of one target partition, as a deterministic state machine.
//!
//! Events go in ([`push`](Window::push), [`advance`](Window::advance),
//! [`on_result`](Window::on_result), [`on_producer_id`](Window::on_producer_id),
//! [`handle_timeout`](Window::handle_timeout)); what to do comes out
//! ([`poll_transmit`](Window::poll_transmit), [`poll_action`](Window::poll_action),
//! [`poll_done`](Window::poll_done), [`poll_timeout`](Window::poll_timeout)). The window does no
//! I/O and never reads the clock: time is passed in. The async driver in `partition/` only
//! carries batches to the target, answers to the window and actions to the cluster.
//!
//! Rules it keeps:
//! - **At most `max_in_flight` batches in flight, all among the first `max_in_flight` slots.**
//!   Kafka detects duplicates only among the last five batches of a producer: a batch further
//!   back, appended while an earlier one's answer was lost, could push the earlier one's resend
//!   out of that window. Until the target confirmed the producer id the window is one batch.
//! - **Stamped when first sent, in log order.** A slot gets its producer sequence when it is
//!   sent for the first time, so slots that waited can first be merged; a resend carries
//!   identical bytes (that is what lets the target recognise a duplicate).
//! - **Small batches waiting together are merged** into one target batch (see
//!   [`MergePolicy`]): over a long link the five-batch window, not the bandwidth, bounds a
//!   partition's rate, so a batch must carry more than one small source batch.
//! - **Failures are decided by the head**: once nothing is in flight, the first failed slot's
//!   error chooses between resending (after a backoff), renumbering under a new producer id,
//!   splitting a batch the target refused as too large, or failing the partition.
//! - **A position moves only past acknowledged batches**, in order.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};

use crate::batch::RecordBatch;
use crate::compression::Compression;
use crate::merge;
use crate::observe::{OffsetPoint, Path};
use crate::reencode::reencode;
use crate::rewrite::{ProducerStamp, TargetPolicy, stamp_in_place};

use super::io::{FailureAction, IoError, ProduceAck, ProducerIdentity};
use super::plan::Part;
use super::producer::ProducerSeq;
use super::retry::backoff;
use strait_wire::Backoff;

/// Merged batches decompress to at most this many times the merge size (`batch_size`).
const MERGE_DECOMPRESS_FACTOR: usize = 16;

/// When waiting batches are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergePolicy {
    /// Largest merged batch (bytes). 0 disables merging.
    pub(crate) batch_size: usize,
}

impl MergePolicy {
    /// Whether a batch this size, with this codec, is small enough to merge. Uncompressed
    /// batches merge without codec work, so anything under a sixteenth of the merge size does;
    /// compressed ones cost a decompression and a recompression, which pays only for batches of
    /// a few records (a producer with `linger.ms=0`), so the bar is four times lower. Batches
    /// from a producer that batches well (the usual 16-64 KiB) pass through untouched.
    fn small(&self, bytes: usize, compression: Compression) -> bool {
        let bar = match compression {
            Compression::None => self.batch_size / 16,
            _ => self.batch_size / 64,
        };
        bytes < bar
    }
}

/// Settings of one window.
#[derive(Debug, Clone)]
pub(crate) struct WindowConfig {
    pub(crate) max_in_flight: usize,
    pub(crate) merge: MergePolicy,
    /// Largest batch the target takes (its `max.message.bytes`); merges stay under it.
    pub(crate) max_message_bytes: usize,
    /// Resend backoff after a retriable failure.
    pub(crate) retry_backoff: (Duration, Duration),
    /// Resend backoff while the target denies the mirror (an operator's grant may take
    /// minutes).
    pub(crate) denied_backoff: (Duration, Duration),
    /// Largest decompressed batch a merge or split may produce (zip-bomb guard).
    pub(crate) max_decompressed_bytes: usize,
}

/// One batch to send.
#[derive(Debug, Clone)]
pub(crate) struct Transmit {
    /// The slot's id, to be echoed in [`Window::on_result`].
    pub(crate) slot: u64,
    pub(crate) batch: Bytes,
    /// Look the leader up again first (the last send failed in a way a leader move explains).
    pub(crate) refresh: bool,
}

/// Something the driver must do for the window.
#[derive(Debug)]
pub(crate) enum Action {
    /// Get a new producer id and hand it to [`Window::on_producer_id`]: the target lost the
    /// producer's state, or a split needs a fresh sequence.
    NeedProducerId,
    /// The head batch was refused as too large: read the target topic's limit and call
    /// [`Window::split_head`].
    Split(IoError),
    /// The target denies the mirror; the window resends after a slow backoff. `attempts`
    /// counts the denials in a row (1 for a new one).
    Denied { error: IoError, attempts: u32 },
    /// The denial is over (it lasted `attempts` attempts).
    Granted { attempts: u32 },
    /// A retriable failure; resent after a backoff.
    Retrying(IoError),
    /// The partition cannot go on: an operator must fix the cause.
    Fail(IoError),
}

/// A batch the target acknowledged, in order.
#[derive(Debug)]
pub(crate) struct Done<H> {
    pub(crate) part: Part,
    /// Target offset of its first record (-1: acknowledged as a duplicate of an earlier send).
    pub(crate) target_base_offset: i64,
    pub(crate) fetched_at: SystemTime,
    /// The position to commit once this is acknowledged, if it completes a source batch.
    pub(crate) next: Option<i64>,
    /// What the batch held (a memory reservation), released by dropping it.
    pub(crate) holds: Vec<H>,
}

#[derive(Debug)]
enum SlotState {
    /// Not stamped yet; may still be merged with the slots after it.
    Unsent {
        mergeable: bool,
    },
    /// Stamped and waiting to be sent again.
    Resend,
    InFlight,
    Acked(i64),
    Failed(IoError),
}

#[derive(Debug)]
struct Slot<H> {
    id: u64,
    part: Part,
    state: SlotState,
    next: Option<i64>,
    fetched_at: SystemTime,
    holds: Vec<H>,
}

/// What the window waits for before it sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    /// Nothing: sending as the window allows.
    None,
    /// A slot failed: nothing more is sent until every sent slot has settled and the head's
    /// error decided (a later batch sent meanwhile could be appended ahead of the failed one).
    Settling,
    /// Resend failed slots at this time.
    ResendAt(Instant),
    /// A producer id was asked for.
    ProducerId,
    /// A split was asked for; a producer id follows.
    Split,
    /// Failed for good.
    Failed,
}

/// The produce window of one target partition.
#[derive(Debug)]
pub(crate) struct Window<H> {
    config: WindowConfig,
    slots: VecDeque<Slot<H>>,
    seq: ProducerSeq,
    next_id: u64,
    recovery: Recovery,
    refresh: bool,
    backoff: Backoff,
    denied_backoff: Backoff,
    denied: u32,
    actions: VecDeque<Action>,
    /// Bytes and slots not sent yet.
    unsent_bytes: usize,
    unsent_count: usize,
    /// A position reached by skipped batches while the window was empty.
    pending_advance: Option<i64>,
}

impl<H> Window<H> {
    pub(crate) fn new(config: WindowConfig, seq: ProducerSeq) -> Self {
        Window {
            backoff: backoff(config.retry_backoff),
            denied_backoff: backoff(config.denied_backoff),
            config,
            slots: VecDeque::new(),
            seq,
            next_id: 0,
            recovery: Recovery::None,
            refresh: false,
            denied: 0,
            actions: VecDeque::new(),
            unsent_bytes: 0,
            unsent_count: 0,
            pending_advance: None,
        }
    }

    /// The producer sequence, to hand back when the partition stops.
    pub(crate) fn seq(&self) -> ProducerSeq {
        self.seq
    }

    /// Nothing waits for an answer or to be sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Holds nothing but its producer sequence: empty, nothing pending, no failure remembered
    /// (the backoffs are at their start). A new window over [`seq`](Self::seq), configured as
    /// this one, acts the same, so the driver may drop this one while the partition is idle.
    pub(crate) fn at_rest(&self) -> bool {
        self.slots.is_empty()
            && self.actions.is_empty()
            && self.pending_advance.is_none()
            && self.recovery == Recovery::None
            && !self.refresh
            && self.denied == 0
            && self.backoff.attempts() == 0
            && self.denied_backoff.attempts() == 0
    }

    /// Whether the window takes more input now. It stops while recovering (a renumbering must
    /// see every slot). Otherwise it keeps a window's worth of batches ready, and beyond that
    /// takes small batches while they keep merging, up to one merged batch: what waits is then
    /// at most a few sends, so a drain (revoke, shutdown) stays short even over a long link.
    pub(crate) fn accepts_input(&self) -> bool {
        if !matches!(self.recovery, Recovery::None) {
            return false;
        }
        if self.unsent_count < self.config.max_in_flight {
            return true;
        }
        let mut tail = self.slots.iter().rev();
        match (tail.next(), tail.next()) {
            (Some(last), Some(before)) => {
                self.unsent_bytes < self.config.merge.batch_size
                    && self.mergeable(before)
                    && self.mergeable(last)
                    && merge::compatible(&before.part.batch, &last.part.batch)
            }
            _ => false,
        }
    }

    fn mergeable(&self, slot: &Slot<H>) -> bool {
        matches!(slot.state, SlotState::Unsent { mergeable: true })
            && self
                .config
                .merge
                .small(slot.part.batch.len(), slot.part.compression)
    }

    /// Queues the parts of one source batch (in order); `next` is the position once all are
    /// acknowledged, and `hold` is released then.
    pub(crate) fn push(&mut self, parts: Vec<Part>, next: i64, fetched_at: SystemTime, hold: H) {
        let count = parts.len();
        let mut hold = Some(hold);
        for (i, part) in parts.into_iter().enumerate() {
            let last = i + 1 == count;
            self.unsent_bytes += part.batch.len();
            self.unsent_count += 1;
            let id = self.take_id();
            self.slots.push_back(Slot {
                id,
                part,
                state: SlotState::Unsent { mergeable: true },
                next: last.then_some(next),
                fetched_at,
                // The whole hold rides on the last part: it is released when the source batch
                // is fully acknowledged.
                holds: if last {
                    hold.take().into_iter().collect()
                } else {
                    Vec::new()
                },
            });
        }
        if let Some(hold) = hold {
            // No parts: nothing to wait for.
            drop(hold);
            self.advance(next);
        }
    }

    /// Skipped source batches moved the position to `next`: it is committable once everything
    /// queued before is acknowledged.
    pub(crate) fn advance(&mut self, next: i64) {
        match self.slots.back_mut() {
            Some(last) => last.next = Some(last.next.map_or(next, |n| n.max(next))),
            None => self.pending_advance = Some(self.pending_advance.map_or(next, |n| n.max(next))),
        }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The next batch to send, if the window allows one.
    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        if !matches!(self.recovery, Recovery::None) {
            return None;
        }
        let limit = if self.seq.confirmed {
            self.config.max_in_flight
        } else {
            1
        };
        // Acknowledged slots at the head are history (waiting for poll_done), not window.
        let start = self
            .slots
            .iter()
            .position(|s| !matches!(s.state, SlotState::Acked(_)))?;
        let index =
            start
                + self.slots.iter().skip(start).take(limit).position(|s| {
                    matches!(s.state, SlotState::Unsent { .. } | SlotState::Resend)
                })?;
        if matches!(self.slots[index].state, SlotState::Unsent { .. }) {
            self.merge_at(index);
            let slot = &mut self.slots[index];
            self.unsent_bytes = self.unsent_bytes.saturating_sub(slot.part.batch.len());
            self.unsent_count = self.unsent_count.saturating_sub(1);
            let stamp = self.seq.stamp(slot.part.records);
            match stamp_part(std::mem::take(&mut slot.part.batch), stamp) {
                Ok(stamped) => slot.part.batch = stamped,
                Err(e) => {
                    // The planner validated the batch, so this is a bug, not a peer's doing.
                    self.fail(IoError::new(
                        FailureAction::Fatal,
                        "INVALID_BATCH".to_string(),
                        format!("a validated batch could not be stamped: {e}"),
                    ));
                    return None;
                }
            }
        }
        let refresh = std::mem::take(&mut self.refresh);
        let slot = &mut self.slots[index];
        slot.state = SlotState::InFlight;
        Some(Transmit {
            slot: slot.id,
            batch: slot.part.batch.clone(),
            refresh,
        })
    }

    /// Merges the unsent, small, compatible slots right after `index` into it, up to the merge
    /// size and the target's limit.
    fn merge_at(&mut self, index: usize) {
        let cap = self
            .config
            .merge
            .batch_size
            .min(self.config.max_message_bytes);
        let head = &self.slots[index];
        if !self.mergeable(head) {
            return;
        }
        let mut total = head.part.batch.len();
        let mut end = index + 1;
        while let Some(slot) = self.slots.get(end) {
            let prev = &self.slots[end - 1];
            let fits = total + slot.part.batch.len() <= cap;
            if !self.mergeable(slot)
                || !fits
                || !merge::compatible(&prev.part.batch, &slot.part.batch)
            {
                break;
            }
            total += slot.part.batch.len();
            end += 1;
        }
        if end - index < 2 {
            return;
        }
        let batches: Vec<Bytes> = self
            .slots
            .range(index..end)
            .map(|s| s.part.batch.clone())
            .collect();
        // Merging runs on the runtime's worker: its decompression is capped near the merge
        // size (batches that decompress to more are sent one by one), so a merge stays short
        // whatever the source's compression ratio.
        let merge_cap = self.config.max_decompressed_bytes.min(
            self.config
                .merge
                .batch_size
                .saturating_mul(MERGE_DECOMPRESS_FACTOR),
        );
        let merged = match merge::merge(&batches, merge_cap) {
            Ok(m) => m,
            Err(e) => {
                // Each batch is still valid on its own: send them one by one.
                tracing::warn!(error = %e, batches = batches.len(), "could not merge batches; sending them one by one");
                return;
            }
        };
        drop(batches);
        let mut absorbed: Vec<Slot<H>> = self.slots.drain(index + 1..end).collect();
        let head = &mut self.slots[index];
        let last_offset = absorbed
            .last()
            .map_or(head.part.last_offset, |s| s.part.last_offset);
        for slot in absorbed.iter_mut() {
            if let Some(n) = slot.next {
                head.next = Some(head.next.map_or(n, |h| h.max(n)));
            }
            head.holds.append(&mut slot.holds);
        }
        let before: usize =
            head.part.batch.len() + absorbed.iter().map(|s| s.part.batch.len()).sum::<usize>();
        // The merged batch's records are the parts' records in order, densely numbered.
        let mut offsets = std::mem::take(&mut head.part.offsets);
        let mut shift = head.part.records;
        for slot in &absorbed {
            offsets.extend(slot.part.offsets.iter().map(|p| OffsetPoint {
                source_offset: p.source_offset,
                target_delta: p.target_delta + shift,
            }));
            shift += slot.part.records;
        }
        let offsets = OffsetPoint::from_source_offsets(
            (0..shift).filter_map(|d| OffsetPoint::source_of(&offsets, d)),
        );
        head.part = Part {
            offsets,
            first_offset: head.part.first_offset,
            last_offset,
            records: merged.records,
            path: Path::Merged(merged.kind),
            compression: merged.compression,
            max_timestamp_ms: merged.max_timestamp_ms,
            batch: merged.batch,
        };
        self.unsent_bytes = self.unsent_bytes.saturating_sub(before) + head.part.batch.len();
        self.unsent_count = self.unsent_count.saturating_sub(absorbed.len());
    }

    /// The target's answer for slot `slot`.
    pub(crate) fn on_result(
        &mut self,
        slot: u64,
        result: Result<ProduceAck, IoError>,
        now: Instant,
    ) {
        let Some(s) = self.slots.iter_mut().find(|s| s.id == slot) else {
            return; // a late answer for a slot already settled
        };
        if !matches!(s.state, SlotState::InFlight) {
            return; // not sent under this id any more
        }
        s.state = match result {
            Ok(ack) => SlotState::Acked(ack.base_offset),
            // Appended by an earlier send whose answer was lost.
            Err(e) if e.action == FailureAction::Duplicate => SlotState::Acked(-1),
            Err(e) => SlotState::Failed(e),
        };
        if matches!(s.state, SlotState::Failed(_)) && self.recovery == Recovery::None {
            self.recovery = Recovery::Settling;
        }
        if matches!(s.state, SlotState::Acked(_)) {
            self.seq.confirmed = true;
            self.backoff.reset();
            if self.denied > 0 {
                self.actions.push_back(Action::Granted {
                    attempts: self.denied,
                });
                self.denied = 0;
                self.denied_backoff.reset();
            }
        }
        self.decide(now);
    }

    /// Once every sent slot has settled and one failed, the head's error decides (failures
    /// behind an earlier unacknowledged slot are its consequences: the target refuses sequence
    /// gaps).
    fn decide(&mut self, now: Instant) {
        if self.recovery != Recovery::Settling
            || self
                .slots
                .iter()
                .any(|s| matches!(s.state, SlotState::InFlight))
        {
            return;
        }
        let Some(head_err) = self.slots.iter().find_map(|s| match &s.state {
            SlotState::Failed(e) => Some(e.clone()),
            _ => None,
        }) else {
            self.recovery = Recovery::None;
            return;
        };
        match head_err.action {
            FailureAction::Retriable => {
                self.recovery = Recovery::ResendAt(now + self.backoff.next_delay());
                self.actions.push_back(Action::Retrying(head_err));
            }
            FailureAction::Denied => {
                self.denied += 1;
                self.recovery = Recovery::ResendAt(now + self.denied_backoff.next_delay());
                self.actions.push_back(Action::Denied {
                    error: head_err,
                    attempts: self.denied,
                });
            }
            FailureAction::ProducerState => {
                self.recovery = Recovery::ProducerId;
                self.actions.push_back(Action::NeedProducerId);
            }
            FailureAction::TooLarge => {
                self.recovery = Recovery::Split;
                self.actions.push_back(Action::Split(head_err));
            }
            _ => self.fail(head_err),
        }
    }

    fn fail(&mut self, e: IoError) {
        self.recovery = Recovery::Failed;
        self.actions.push_back(Action::Fail(e));
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.recovery {
            Recovery::ResendAt(at) => Some(at),
            _ => None,
        }
    }

    /// Time passed: a backoff may be over.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if let Recovery::ResendAt(at) = self.recovery
            && now >= at
        {
            self.recovery = Recovery::None;
            self.refresh = true;
            for slot in self.slots.iter_mut() {
                if matches!(slot.state, SlotState::Failed(_)) {
                    slot.state = SlotState::Resend;
                    // A new id, so a late answer to the old send is ignored.
                    slot.id = self.next_id;
                    self.next_id += 1;
                }
            }
        }
    }

    /// The next action for the driver.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next batch acknowledged in order (its position is then committable).
    pub(crate) fn poll_done(&mut self) -> Option<Done<H>> {
        if let Some(SlotState::Acked(base)) = self.slots.front().map(|s| &s.state) {
            let base = *base;
            let slot = self.slots.pop_front()?;
            return Some(Done {
                part: slot.part,
                target_base_offset: base,
                fetched_at: slot.fetched_at,
                next: slot.next,
                holds: slot.holds,
            });
        }
        None
    }

    /// A position reached while the window was empty (skipped batches), once it is.
    pub(crate) fn take_pending_advance(&mut self) -> Option<i64> {
        if self.slots.is_empty() {
            self.pending_advance.take()
        } else {
            None
        }
    }

    /// The producer id asked for by [`Action::NeedProducerId`]: every unacknowledged slot is
    /// renumbered under it, in order, and sent again.
    pub(crate) fn on_producer_id(&mut self, identity: ProducerIdentity) {
        self.seq = ProducerSeq::fresh(identity);
        self.recovery = Recovery::None;
        self.refresh = false;
        for slot in self.slots.iter_mut() {
            if !matches!(slot.state, SlotState::Acked(_) | SlotState::Unsent { .. }) {
                // Stamped again when sent; its bytes (a merge, a split piece) stay as they are.
                self.unsent_bytes += slot.part.batch.len();
                self.unsent_count += 1;
                slot.state = SlotState::Unsent { mergeable: false };
                slot.id = self.next_id;
                self.next_id += 1;
            }
        }
    }

    /// The target's limit read after [`Action::Split`]: lowers the window's limit and replaces
    /// the refused head by a re-encoding in smaller batches. Then a new producer id is needed:
    /// continuing the old sequence from the refused batch could give a later batch the exact
    /// sequence range of one the target acknowledged meanwhile (a broker with no state for the
    /// producer accepts a gap), and the target would answer it as a duplicate without writing
    /// it: silent loss.
    ///
    /// Err: the batch cannot be split further (the partition fails with this error).
    pub(crate) fn split_head(
        &mut self,
        target_limit: usize,
        policy: &TargetPolicy,
    ) -> Result<(), IoError> {
        self.config.max_message_bytes = self.config.max_message_bytes.min(target_limit);
        let Some(index) = self
            .slots
            .iter()
            .position(|s| matches!(s.state, SlotState::Failed(_)))
        else {
            self.request_producer_id();
            return Ok(());
        };
        let SlotState::Failed(err) = &self.slots[index].state else {
            return Ok(());
        };
        let err = err.clone();
        let head = &self.slots[index];
        // The configured limit; or, if the batch is within it as far as the mirror can tell (it
        // may not read the configuration, or the broker grew the batch by recompressing it),
        // half the refused size, halving again until the target takes the pieces.
        let refused = head.part.batch.len();
        let max = if target_limit < refused {
            target_limit
        } else {
            refused / 2
        };
        tracing::warn!(error = %err, size = refused, max,
            "the target refused a batch as too large; splitting it");
        let policy = TargetPolicy {
            max_message_bytes: max,
            max_decompressed_bytes: self.config.max_decompressed_bytes,
            ..policy.clone()
        };
        let pieces = if head.part.records > 1 {
            RecordBatch::parse(head.part.batch.clone())
                .and_then(|batch| {
                    reencode(&batch, batch.base_offset(), ProducerStamp::NONE, &policy)
                        .map(|p| (batch, p))
                })
                .map_err(|e| e.to_string())
        } else {
            Err(format!(
                "its one record (source offset {}) is larger than {max} bytes",
                head.part.first_offset
            ))
        };
        let (batch, pieces) = match pieces {
            Ok(p) => p,
            Err(e) => {
                let detail = IoError::new(
                    FailureAction::Fatal,
                    err.code.clone(),
                    format!(
                        "the target refused a {refused}-byte batch ({}: {}) and it cannot be split \
                         further: {e}. Raise max.message.bytes of the target topic (or the broker's \
                         message.max.bytes) to at least the source's",
                        err.code, err.message,
                    ),
                );
                self.recovery = Recovery::Failed;
                return Err(detail);
            }
        };
        let Some(head) = self.slots.remove(index) else {
            return Ok(());
        };
        let count = pieces.len();
        let mut holds = Some(head.holds);
        for (i, piece) in pieces.into_iter().enumerate().rev() {
            let last = i + 1 == count;
            // The refused batch was stamped with base offset 0, so a piece's "source offsets"
            // are positions in it, which the head's offset points map to source offsets.
            let sources: Vec<i64> = piece
                .source_offsets()
                .iter()
                .filter_map(|&o| {
                    let d = u32::try_from(o - batch.base_offset()).ok()?;
                    OffsetPoint::source_of(&head.part.offsets, d)
                })
                .collect();
            let first_offset = sources.first().copied().unwrap_or(head.part.first_offset);
            let last_offset = sources.last().copied().unwrap_or(head.part.last_offset);
            let records = u32::try_from(piece.source_offsets().len()).unwrap_or(0);
            let out = piece.into_batch();
            let part = Part {
                offsets: OffsetPoint::from_source_offsets(sources),
                first_offset,
                last_offset,
                records,
                path: head.part.path,
                compression: out.compression(),
                max_timestamp_ms: out.max_timestamp(),
                batch: out.into_bytes(),
            };
            let id = self.take_id();
            self.slots.insert(
                index,
                Slot {
                    id,
                    part,
                    state: SlotState::Failed(err.clone()),
                    next: if last { head.next } else { None },
                    fetched_at: head.fetched_at,
                    holds: if last {
                        holds.take().unwrap_or_default()
                    } else {
                        Vec::new()
                    },
                },
            );
        }
        self.request_producer_id();
        Ok(())
    }

    fn request_producer_id(&mut self) {
        self.recovery = Recovery::ProducerId;
        self.actions.push_back(Action::NeedProducerId);
    }
}

/// Stamps a batch with `stamp`, in place when nothing else holds the buffer (the usual case:
/// the fetch side gave each part its own), else on a copy.
pub(crate) fn stamp_part(batch: Bytes, stamp: ProducerStamp) -> Result<Bytes, crate::Error> {
    let mut buf = batch.try_into_mut().unwrap_or_else(|shared| {
        let copy = BytesMut::from(&shared[..]);
        super::copies::record(&shared, &copy);
        copy
    });
    stamp_in_place(&mut buf, stamp)?;
    Ok(buf.freeze())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::records::RecordParts;
    use crate::reencode::{PendingRecord, build_batches};

    const NO_HEADERS: &[u8] = &[0];

    /// A batch of `n` records from source offset `first`, as the planner hands it over.
    fn part(first: i64, n: usize, value_len: usize, codec: Compression) -> Part {
        let value = vec![b'v'; value_len];
        let recs: Vec<PendingRecord<'_>> = (0..n)
            .map(|i| PendingRecord {
                source_offset: first + i as i64,
                timestamp: 1_700_000_000_000 + first + i as i64,
                parts: RecordParts {
                    attributes: 0,
                    timestamp_delta: 0,
                    offset_delta: 0,
                    key: None,
                    value: Some(&value),
                    headers_section: NO_HEADERS,
                },
            })
            .collect();
        let policy = TargetPolicy {
            max_message_bytes: 64 << 20,
            ..TargetPolicy::default()
        };
        let mut out = build_batches(&recs, codec, ProducerStamp::NONE, &policy).unwrap();
        assert_eq!(out.len(), 1);
        let batch = out.remove(0).into_batch();
        Part {
            first_offset: first,
            last_offset: first + n as i64 - 1,
            records: n as u32,
            path: Path::PassThrough,
            compression: codec,
            max_timestamp_ms: batch.max_timestamp(),
            batch: batch.into_bytes(),
            offsets: vec![OffsetPoint {
                source_offset: first,
                target_delta: 0,
            }],
        }
    }

    fn config(batch_size: usize) -> WindowConfig {
        WindowConfig {
            max_in_flight: 5,
            merge: MergePolicy { batch_size },
            max_message_bytes: 1 << 20,
            retry_backoff: (Duration::from_millis(100), Duration::from_secs(1)),
            denied_backoff: (Duration::from_secs(1), Duration::from_secs(30)),
            max_decompressed_bytes: 64 << 20,
        }
    }

    fn window(batch_size: usize) -> Window<u32> {
        let id = ProducerIdentity {
            producer_id: 7,
            epoch: 0,
        };
        Window::new(config(batch_size), ProducerSeq::fresh(id))
    }

    fn ok(base: i64) -> Result<ProduceAck, IoError> {
        Ok(ProduceAck {
            base_offset: base,
            log_append_time_ms: None,
            log_start_offset: None,
        })
    }

    fn failed(action: FailureAction) -> Result<ProduceAck, IoError> {
        Err(IoError::new(action, "CODE", "injected"))
    }

    fn sent(w: &mut Window<u32>) -> Vec<Transmit> {
        std::iter::from_fn(|| w.poll_transmit()).collect()
    }

    /// (producer id, base sequence, records) of a sent batch.
    fn stamp_of(t: &Transmit) -> (i64, i32, i32) {
        let b = RecordBatch::parse(t.batch.clone()).unwrap();
        (b.producer_id(), b.base_sequence(), b.record_count())
    }

    /// Pushes `count` one-part source batches of `n` records each, 10 offsets apart.
    fn push_parts(w: &mut Window<u32>, from: i64, count: i64, n: usize, len: usize) {
        for i in 0..count {
            let first = from + i * 10;
            let p = part(first, n, len, Compression::None);
            w.push(vec![p], first + 10, SystemTime::UNIX_EPOCH, first as u32);
        }
    }

    fn positions(w: &mut Window<u32>) -> Vec<Option<i64>> {
        std::iter::from_fn(|| w.poll_done())
            .map(|d| d.next)
            .collect()
    }

    #[test]
    fn one_batch_until_the_producer_id_is_confirmed_then_five() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 8, 2, 2000);
        let first = sent(&mut w);
        assert_eq!(first.len(), 1, "an unconfirmed producer id sends one batch");
        w.on_result(first[0].slot, ok(0), t0);
        let more = sent(&mut w);
        assert_eq!(more.len(), 5, "five in flight once confirmed");
        assert_eq!(positions(&mut w), vec![Some(10)]);
        // Sequences follow the log order.
        let seqs: Vec<i32> = more.iter().map(|t| stamp_of(t).1).collect();
        assert_eq!(seqs, vec![2, 4, 6, 8, 10]);
        // An answer out of order releases nothing until the earlier one is acknowledged.
        w.on_result(more[1].slot, ok(4), t0);
        assert!(w.poll_done().is_none());
        assert!(sent(&mut w).is_empty(), "slot 6 is beyond the first five");
        w.on_result(more[0].slot, ok(2), t0);
        assert_eq!(positions(&mut w), vec![Some(20), Some(30)]);
        assert_eq!(sent(&mut w).len(), 2);
    }

    #[test]
    fn small_batches_waiting_behind_the_window_are_merged() {
        let t0 = Instant::now();
        let mut w = window(256 << 10);
        push_parts(&mut w, 0, 1, 1, 100);
        let first = sent(&mut w);
        assert_eq!(first.len(), 1);
        push_parts(&mut w, 10, 9, 1, 100);
        assert!(sent(&mut w).is_empty(), "unconfirmed: one in flight");
        w.on_result(first[0].slot, ok(0), t0);
        let merged = sent(&mut w);
        assert_eq!(merged.len(), 1, "nine waiting small batches go as one");
        assert_eq!(stamp_of(&merged[0]), (7, 1, 9));
        w.on_result(merged[0].slot, ok(1), t0);
        let done: Vec<Done<u32>> = std::iter::from_fn(|| w.poll_done()).collect();
        assert_eq!(done.len(), 2);
        let m = &done[1];
        assert_eq!(m.part.path, Path::Merged(merge::MergeKind::Records));
        assert_eq!((m.part.first_offset, m.part.last_offset), (10, 90));
        assert_eq!(
            m.next,
            Some(100),
            "the position after the last merged batch"
        );
        assert_eq!(m.holds, (1..10).map(|i| i * 10).collect::<Vec<u32>>());
    }

    #[test]
    fn large_or_mixed_batches_pass_through_unmerged() {
        let t0 = Instant::now();
        let mut w = window(256 << 10);
        // 20 KiB uncompressed batches are not small (a sixteenth of 256 KiB is 16 KiB).
        push_parts(&mut w, 0, 1, 1, 100);
        let first = sent(&mut w);
        push_parts(&mut w, 10, 3, 2, 10_000);
        // Small, but a different codec from its neighbours: not merged with them.
        w.push(
            vec![part(40, 1, 100, Compression::Lz4)],
            50,
            SystemTime::UNIX_EPOCH,
            0,
        );
        w.on_result(first[0].slot, ok(0), t0);
        let out = sent(&mut w);
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(|t| stamp_of(t).2 <= 2));
    }

    #[test]
    fn unmergeable_backlog_is_bounded_and_mergeable_backlog_up_to_one_batch() {
        let mut w = window(64 << 10);
        push_parts(&mut w, 0, 5, 1, 20_000);
        assert!(!w.accepts_input(), "five large unsent batches are enough");
        let mut w = window(64 << 10);
        push_parts(&mut w, 0, 5, 1, 100);
        assert!(w.accepts_input(), "small mergeable batches keep coming");
        push_parts(&mut w, 50, 700, 1, 100);
        assert!(!w.accepts_input(), "until one merged batch's worth waits");
    }

    #[test]
    fn a_retriable_failure_resends_identical_bytes_after_the_backoff() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 1, 1, 100);
        let a = sent(&mut w);
        w.on_result(a[0].slot, ok(0), t0);
        assert_eq!(positions(&mut w), vec![Some(10)]);
        push_parts(&mut w, 10, 3, 1, 20_000);
        let out = sent(&mut w);
        assert_eq!(out.len(), 3);
        w.on_result(out[0].slot, failed(FailureAction::Retriable), t0);
        // Nothing more goes out while answers are pending.
        push_parts(&mut w, 40, 1, 1, 20_000);
        assert!(sent(&mut w).is_empty());
        w.on_result(out[1].slot, ok(2), t0);
        w.on_result(out[2].slot, failed(FailureAction::Retriable), t0);
        assert!(matches!(w.poll_action(), Some(Action::Retrying(_))));
        assert!(sent(&mut w).is_empty(), "waits for the backoff");
        let at = w.poll_timeout().unwrap();
        assert!(at > t0 && at <= t0 + Duration::from_millis(100));
        w.handle_timeout(at);
        let again = sent(&mut w);
        assert_eq!(again.len(), 3, "the two failed ones, then the next");
        assert!(again[0].refresh, "the leader is looked up again");
        assert_eq!(again[0].batch, out[0].batch, "identical bytes");
        assert_eq!(again[1].batch, out[2].batch);
        // A late answer to the first send is ignored.
        w.on_result(out[0].slot, ok(99), t0);
        assert_eq!(positions(&mut w), Vec::<Option<i64>>::new());
        for t in &again {
            w.on_result(t.slot, ok(5), t0);
        }
        assert_eq!(positions(&mut w).len(), 4);
        assert!(w.is_empty());
        assert!(w.poll_action().is_none());
    }

    #[test]
    fn lost_producer_state_renumbers_every_unacknowledged_batch() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 1, 3, 100);
        let a = sent(&mut w);
        w.on_result(a[0].slot, ok(0), t0);
        push_parts(&mut w, 10, 3, 2, 20_000);
        let out = sent(&mut w);
        w.on_result(out[1].slot, ok(5), t0);
        w.on_result(out[0].slot, failed(FailureAction::ProducerState), t0);
        w.on_result(out[2].slot, failed(FailureAction::ProducerState), t0);
        assert!(matches!(w.poll_action(), Some(Action::NeedProducerId)));
        assert!(sent(&mut w).is_empty());
        w.on_producer_id(ProducerIdentity {
            producer_id: 8,
            epoch: 0,
        });
        // From sequence 0, one at a time until confirmed.
        let r1 = sent(&mut w);
        assert_eq!(r1.len(), 1);
        assert_eq!(stamp_of(&r1[0]), (8, 0, 2));
        w.on_result(r1[0].slot, ok(3), t0);
        let r2 = sent(&mut w);
        assert_eq!(r2.len(), 1, "the acknowledged middle batch is not resent");
        assert_eq!(stamp_of(&r2[0]), (8, 2, 2));
        w.on_result(r2[0].slot, ok(7), t0);
        assert_eq!(
            positions(&mut w),
            vec![Some(10), Some(20), Some(30), Some(40)]
        );
    }

    #[test]
    fn a_refused_large_batch_is_split_and_renumbered() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 1, 10, 1000);
        let a = sent(&mut w);
        w.on_result(a[0].slot, failed(FailureAction::TooLarge), t0);
        let Some(Action::Split(_)) = w.poll_action() else {
            panic!("expected a split")
        };
        w.split_head(3000, &TargetPolicy::default()).unwrap();
        assert!(matches!(w.poll_action(), Some(Action::NeedProducerId)));
        w.on_producer_id(ProducerIdentity {
            producer_id: 9,
            epoch: 0,
        });
        let mut records = 0;
        let mut nexts = Vec::new();
        while let Some(t) = w.poll_transmit() {
            assert!(t.batch.len() <= 3000);
            let (pid, seq, n) = stamp_of(&t);
            assert_eq!((pid, seq), (9, records));
            records += n;
            w.on_result(t.slot, ok(i64::from(seq)), t0);
            nexts.extend(positions(&mut w));
        }
        assert_eq!(records, 10);
        assert!(nexts.len() > 1);
        assert_eq!(nexts.last(), Some(&Some(10)));
        assert!(nexts[..nexts.len() - 1].iter().all(Option::is_none));
    }

    #[test]
    fn a_single_record_too_large_fails_the_partition() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 1, 1, 5000);
        let a = sent(&mut w);
        w.on_result(a[0].slot, failed(FailureAction::TooLarge), t0);
        assert!(matches!(w.poll_action(), Some(Action::Split(_))));
        let e = w.split_head(1000, &TargetPolicy::default()).unwrap_err();
        assert!(e.message.contains("max.message.bytes"), "{e}");
        assert!(sent(&mut w).is_empty());
    }

    #[test]
    fn denials_back_off_slowly_and_report_the_grant() {
        let t0 = Instant::now();
        let mut w = window(0);
        push_parts(&mut w, 0, 1, 1, 100);
        let mut now = t0;
        for attempt in 1..=3 {
            let t = sent(&mut w);
            w.on_result(t[0].slot, failed(FailureAction::Denied), now);
            let Some(Action::Denied { attempts, .. }) = w.poll_action() else {
                panic!("expected a denial")
            };
            assert_eq!(attempts, attempt);
            let at = w.poll_timeout().unwrap();
            assert!(at - now >= Duration::from_millis(500));
            now = at;
            w.handle_timeout(now);
        }
        let t = sent(&mut w);
        w.on_result(t[0].slot, ok(0), now);
        assert!(matches!(
            w.poll_action(),
            Some(Action::Granted { attempts: 3 })
        ));
    }

    /// At rest only when a new window over its sequence would act the same: nothing queued, in
    /// flight, acknowledged but not handed out, or pending, and no failure remembered.
    #[test]
    fn at_rest_once_everything_is_handed_out_and_no_failure_is_remembered() {
        let t0 = Instant::now();
        let mut w = window(0);
        assert!(w.at_rest());
        push_parts(&mut w, 0, 1, 1, 100);
        assert!(!w.at_rest(), "queued");
        let t = sent(&mut w);
        assert!(!w.at_rest(), "in flight");
        w.on_result(t[0].slot, failed(FailureAction::Denied), t0);
        assert!(matches!(w.poll_action(), Some(Action::Denied { .. })));
        let at = w.poll_timeout().unwrap();
        w.handle_timeout(at);
        let t = sent(&mut w);
        w.on_result(t[0].slot, ok(0), at);
        assert!(!w.at_rest(), "acknowledged, not handed out");
        assert_eq!(positions(&mut w), vec![Some(10)]);
        assert!(!w.at_rest(), "the grant is not reported yet");
        assert!(matches!(w.poll_action(), Some(Action::Granted { .. })));
        assert!(w.at_rest());
        w.advance(20);
        assert!(!w.at_rest(), "a skipped range waits to be handed out");
        assert_eq!(w.take_pending_advance(), Some(20));
        assert!(w.at_rest());
        assert!(w.seq().confirmed, "what a new window starts from");
    }

    #[test]
    fn a_fatal_error_fails_and_skipped_batches_move_the_position() {
        let t0 = Instant::now();
        let mut w = window(0);
        w.advance(5);
        assert_eq!(w.take_pending_advance(), Some(5));
        push_parts(&mut w, 5, 1, 1, 100);
        w.advance(30);
        let t = sent(&mut w);
        w.on_result(t[0].slot, ok(0), t0);
        assert_eq!(positions(&mut w), vec![Some(30)]);
        push_parts(&mut w, 30, 1, 1, 100);
        let t = sent(&mut w);
        w.on_result(t[0].slot, failed(FailureAction::Fatal), t0);
        assert!(matches!(w.poll_action(), Some(Action::Fail(_))));
        assert!(sent(&mut w).is_empty());
        assert!(!w.accepts_input());
    }
}
