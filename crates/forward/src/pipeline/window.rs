//! The produce window of one target partition, as a deterministic state machine.
//!
//! Events go in ([`push`](Window::push), [`advance`](Window::advance),
//! [`on_result`](Window::on_result), [`on_producer_id`](Window::on_producer_id),
//! [`handle_timeout`](Window::handle_timeout)); what to do comes out
//! ([`poll_transmit`](Window::poll_transmit), [`poll_action`](Window::poll_action),
//! [`poll_done`](Window::poll_done), [`poll_timeout`](Window::poll_timeout)). The window does no
//! I/O and never reads the clock: time is passed in. The async driver in `partition.rs` only
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
use crate::observe::Path;
use crate::reencode::reencode;
use crate::rewrite::{ProducerStamp, TargetPolicy, stamp_in_place};

use super::backoff::Backoff;
use super::io::{ErrorClass, IoError, ProduceAck, ProducerIdentity};
use super::plan::Part;
use super::producer::ProducerSeq;

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
            backoff: Backoff::new(config.retry_backoff.0, config.retry_backoff.1),
            denied_backoff: Backoff::new(config.denied_backoff.0, config.denied_backoff.1),
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
        let index = self
            .slots
            .iter()
            .take(limit)
            .position(|s| matches!(s.state, SlotState::Unsent { .. } | SlotState::Resend))?;
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
                        ErrorClass::Fatal,
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
        let merged = match merge::merge(&batches, self.config.max_decompressed_bytes) {
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
        head.part = Part {
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
            Err(e) if e.class == ErrorClass::Duplicate => SlotState::Acked(-1),
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
        match head_err.class {
            ErrorClass::Retriable => {
                self.recovery = Recovery::ResendAt(now + self.backoff.next_delay());
                self.actions.push_back(Action::Retrying(head_err));
            }
            ErrorClass::Denied => {
                self.denied += 1;
                self.recovery = Recovery::ResendAt(now + self.denied_backoff.next_delay());
                self.actions.push_back(Action::Denied {
                    error: head_err,
                    attempts: self.denied,
                });
            }
            ErrorClass::ProducerState => {
                self.recovery = Recovery::ProducerId;
                self.actions.push_back(Action::NeedProducerId);
            }
            ErrorClass::TooLarge => {
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
                    ErrorClass::Fatal,
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
        // Source offsets relative to the part's first offset (the stamped batch's base offset
        // is 0, so this is exact for a pass-through part and approximate for a re-encoded or
        // merged one).
        let shift = head.part.first_offset - batch.base_offset();
        for (i, piece) in pieces.into_iter().enumerate().rev() {
            let last = i + 1 == count;
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
    let mut buf = batch
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    stamp_in_place(&mut buf, stamp)?;
    Ok(buf.freeze())
}
