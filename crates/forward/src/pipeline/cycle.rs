//! Exactly-once: when a route's transaction opens, stops taking batches and commits.
//!
//! A route's transaction holds its batches and, at the end, the source position after them.
//! [`Cycle`] decides, from events the produce loop feeds it and the time passed in:
//!
//! - the partition must be added to a transaction before its first batch of the transaction is
//!   sent ([`Cycle::before_send`]);
//! - `interval` after the partition joined the transaction (or the position moved without a batch, e.g. past a
//!   source transaction's aborted records), or once `max_bytes` of batches were sent in it, the
//!   window stops taking input ([`Cycle::accepts_input`]) until everything sent is acknowledged,
//!   then the position is committed ([`Cycle::poll`] -> [`CycleAction::Commit`]);
//! - when the input has ended (revoke, shutdown), the open transaction commits at once;
//! - with nothing open, the committed position is stored again every `refresh` (a transaction
//!   with only the offset in it): the target group has no members, so the broker expires a
//!   position `offsets.retention.minutes` after it was last stored (KIP-211), and an idle
//!   partition would otherwise lose it.
//!
//! It holds no I/O and no clock of its own, so the tests below drive it in memory.

use std::time::{Duration, Instant};

/// What the produce loop must do next for the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CycleAction {
    /// Store `position` (the next source offset) in the transaction and commit it.
    Commit { position: i64 },
}

/// One route's transaction cycle (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Cycle {
    interval: Duration,
    /// Bytes of batches after which the open transaction commits even before `interval`: what
    /// an abort throws away and the next owner sends again stays bounded at high rates.
    max_bytes: u64,
    /// Bytes of batches sent in the open transaction (resends included).
    sent_bytes: u64,
    /// When the open transaction started (its first batch, or the first move of the position
    /// with nothing to send); `None`: no transaction open.
    opened: Option<Instant>,
    /// The partition is in the open transaction.
    added: bool,
    /// Waiting for the window to empty before committing.
    draining: bool,
    /// When the open transaction started draining (for the timings of [`phases`](Self::phases)).
    drain_from: Option<Instant>,
    /// The position the last transaction committed (or the start position).
    committed: i64,
    /// How often the committed position is stored again while nothing moves (`None`: never).
    refresh: Option<Duration>,
    /// When the position was last stored (or the cycle started).
    stored_at: Option<Instant>,
    /// The target holds no position for the route yet: store it before any batch, so that a
    /// target partition with data and no position always means a lost position.
    store_first: bool,
}

impl Cycle {
    /// A cycle starting at `committed`, the position the route starts from.
    pub(crate) fn new(interval: Duration, max_bytes: u64, committed: i64) -> Self {
        Cycle {
            interval,
            max_bytes: max_bytes.max(1),
            sent_bytes: 0,
            opened: None,
            added: false,
            draining: false,
            drain_from: None,
            committed,
            refresh: None,
            stored_at: None,
            store_first: false,
        }
    }

    /// The target holds no position for the route: the start position is committed (alone)
    /// before the first batch is sent.
    pub(crate) fn storing_first(mut self) -> Self {
        self.store_first = true;
        self
    }

    /// Whether the start position must be committed before anything else.
    pub(crate) fn must_store_first(&self) -> bool {
        self.store_first
    }

    /// The committed position is stored again `every` so long after `now` (the start) and after
    /// each commit, while nothing else is committed.
    pub(crate) fn refreshing(mut self, every: Duration, now: Instant) -> Self {
        self.refresh = Some(every);
        self.stored_at = Some(now);
        self
    }

    /// When the committed position must be stored again, if it must.
    fn refresh_at(&self) -> Option<Instant> {
        Some(self.stored_at? + self.refresh?)
    }

    /// A batch of `bytes` is about to be sent: true if the partition must be added to the
    /// transaction first (call [`added`](Self::added) once it is).
    pub(crate) fn before_send(&mut self, now: Instant, bytes: usize) -> bool {
        self.opened.get_or_insert(now);
        self.sent_bytes = self
            .sent_bytes
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
        !self.added
    }

    /// The partition is in the open transaction since `now`: the interval counts from here.
    /// Adding it can take longer than the interval on a busy coordinator, and the produce
    /// loop takes no batches meanwhile; counted from the first batch, such a transaction was
    /// due before it sent anything, carried only what had queued up and fell behind the source
    /// (measured: docs/exactly-once.md).
    pub(crate) fn added(&mut self, now: Instant) {
        self.added = true;
        if !self.draining {
            self.opened = Some(now);
        }
    }

    /// Whether the window may take more batches: not while a commit waits for it to empty, so
    /// a steady stream cannot hold a transaction open forever.
    pub(crate) fn accepts_input(&self) -> bool {
        !self.draining
    }

    /// Decides the next step. `acknowledged`: the position after everything the target
    /// acknowledged; `window_empty`: nothing is queued or in flight; `input_ended`: no more
    /// batches will come (the route is stopping).
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        acknowledged: i64,
        window_empty: bool,
        input_ended: bool,
    ) -> Option<CycleAction> {
        if self.opened.is_none() && acknowledged > self.committed {
            // The position moved with nothing sent (skipped source batches): commit it too.
            self.opened = Some(now);
        }
        let Some(opened) = self.opened else {
            // Nothing open: store the committed position again before the broker expires it
            // (an offsets-only transaction, fenced like any other). Not while stopping: the
            // next owner stores it as soon as it starts.
            let due = self.refresh_at().is_some_and(|at| now >= at);
            return (due && window_empty && !input_ended).then_some(CycleAction::Commit {
                position: self.committed,
            });
        };
        if input_ended || now >= opened + self.interval || self.sent_bytes >= self.max_bytes {
            self.draining = true;
            self.drain_from.get_or_insert(now);
        }
        (self.draining && window_empty).then_some(CycleAction::Commit {
            position: acknowledged.max(self.committed),
        })
    }

    /// When [`poll`](Self::poll) must run again even if nothing else happens.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.opened {
            Some(opened) if !self.draining => Some(opened + self.interval),
            Some(_) => None,
            None => self.refresh_at(),
        }
    }

    /// The transaction committed `position` at `now`: the next one starts closed.
    pub(crate) fn committed(&mut self, now: Instant, position: i64) {
        self.committed = position;
        self.store_first = false;
        if self.stored_at.is_some() {
            self.stored_at = Some(now);
        }
        self.opened = None;
        self.sent_bytes = 0;
        self.added = false;
        self.draining = false;
        self.drain_from = None;
    }

    /// Where the open transaction's time went until `now`: (open, taking batches; draining,
    /// waiting for the window to empty). Zero for a phase it has not reached.
    pub(crate) fn phases(&self, now: Instant) -> (Duration, Duration) {
        let Some(opened) = self.opened else {
            return (Duration::ZERO, Duration::ZERO);
        };
        let drain_from = self.drain_from.unwrap_or(now);
        (
            drain_from.saturating_duration_since(opened),
            now.saturating_duration_since(drain_from),
        )
    }

    /// The position the last transaction committed (or the start position).
    pub(crate) fn committed_position(&self) -> i64 {
        self.committed
    }

    /// Nothing is open: the route may end.
    pub(crate) fn is_closed(&self) -> bool {
        self.opened.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_transaction_commits_after_the_interval_once_the_window_is_empty() {
        let t0 = Instant::now();
        let mut c = Cycle::new(SECOND, u64::MAX, 10);
        assert_eq!(c.poll(t0, 10, true, false), None, "nothing to commit");
        assert!(c.before_send(t0, 100), "the first batch adds the partition");
        c.added(t0);
        assert!(
            !c.before_send(t0, 100),
            "later batches of the transaction do not"
        );
        assert_eq!(c.poll_timeout(), Some(t0 + SECOND));
        assert_eq!(c.poll(t0, 15, false, false), None);
        // Due, but a batch is still in flight: stop taking input and wait.
        assert_eq!(c.poll(t0 + SECOND, 15, false, false), None);
        assert!(!c.accepts_input());
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(
            c.poll(t0 + SECOND, 20, true, false),
            Some(CycleAction::Commit { position: 20 })
        );
        c.committed(t0 + SECOND, 20);
        assert!(c.accepts_input() && c.is_closed());
        assert!(
            c.before_send(t0 + 2 * SECOND, 100),
            "a new transaction adds it again"
        );
    }

    /// The timings a commit logs: open from the first batch to the due time, then draining
    /// until the window is empty; none while nothing is open.
    #[test]
    fn the_phases_of_a_transaction_are_timed_on_the_clock_passed_in() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = Cycle::new(ms(300), u64::MAX, 0);
        assert_eq!(c.phases(t0), (Duration::ZERO, Duration::ZERO));
        c.before_send(t0, 10);
        c.added(t0);
        assert_eq!(c.phases(t0 + ms(100)), (ms(100), Duration::ZERO));
        assert_eq!(c.poll(t0 + ms(310), 5, false, false), None, "in flight");
        assert_eq!(c.phases(t0 + ms(350)), (ms(310), ms(40)));
        c.committed(t0 + ms(350), 5);
        assert_eq!(c.phases(t0 + ms(400)), (Duration::ZERO, Duration::ZERO));
    }

    /// A slow AddPartitionsToTxn does not eat the interval: it counts from when the partition
    /// is in the transaction, so the transaction takes batches for a whole interval.
    #[test]
    fn the_interval_counts_from_the_add() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = Cycle::new(ms(300), u64::MAX, 0);
        assert!(c.before_send(t0, 10));
        // The coordinator took 500 ms to add the partition.
        c.added(t0 + ms(500));
        assert_eq!(c.poll(t0 + ms(500), 0, false, false), None);
        assert!(c.accepts_input(), "open for the interval after the add");
        assert_eq!(c.poll_timeout(), Some(t0 + ms(800)));
        assert_eq!(c.poll(t0 + ms(799), 0, false, false), None);
        assert!(c.accepts_input());
        assert_eq!(
            c.poll(t0 + ms(800), 4, true, false),
            Some(CycleAction::Commit { position: 4 })
        );
    }

    #[test]
    fn a_position_moved_without_batches_is_committed_too() {
        let t0 = Instant::now();
        let mut c = Cycle::new(SECOND, u64::MAX, 10);
        assert_eq!(c.poll(t0, 12, true, false), None);
        assert_eq!(
            c.poll(t0 + SECOND, 12, true, false),
            Some(CycleAction::Commit { position: 12 })
        );
    }

    #[test]
    fn the_end_of_input_commits_at_once() {
        let t0 = Instant::now();
        let mut c = Cycle::new(SECOND, u64::MAX, 0);
        c.before_send(t0, 100);
        c.added(t0);
        assert_eq!(c.poll(t0, 3, false, true), None, "still in flight");
        assert_eq!(
            c.poll(t0, 5, true, true),
            Some(CycleAction::Commit { position: 5 })
        );
        c.committed(t0, 5);
        assert_eq!(
            c.poll(t0, 5, true, true),
            None,
            "nothing left: the route may end"
        );
        assert!(c.is_closed());
    }

    #[test]
    fn a_transaction_past_its_size_commits_before_the_interval() {
        let t0 = Instant::now();
        let mut c = Cycle::new(SECOND, 1000, 0);
        assert!(c.before_send(t0, 600));
        c.added(t0);
        assert_eq!(c.poll(t0, 0, false, false), None);
        assert!(c.accepts_input(), "600 of 1000 bytes: still open");
        assert!(!c.before_send(t0, 600));
        assert_eq!(c.poll(t0, 4, false, false), None, "full, still in flight");
        assert!(!c.accepts_input(), "full: no more batches");
        assert_eq!(
            c.poll(t0, 8, true, false),
            Some(CycleAction::Commit { position: 8 }),
            "committed long before the interval"
        );
        c.committed(t0, 8);
        assert!(c.before_send(t0, 600), "a new transaction counts from zero");
        assert_eq!(c.poll(t0, 8, false, false), None);
        assert!(c.accepts_input());
    }

    #[test]
    fn an_idle_position_is_stored_again_every_refresh() {
        let t0 = Instant::now();
        let hour = 3600 * SECOND;
        let mut c = Cycle::new(SECOND, u64::MAX, 7).refreshing(hour, t0);
        assert_eq!(c.poll_timeout(), Some(t0 + hour));
        assert_eq!(c.poll(t0 + hour - SECOND, 7, true, false), None);
        assert_eq!(
            c.poll(t0 + hour, 7, false, false),
            None,
            "not while something waits to be sent"
        );
        assert_eq!(c.poll(t0 + hour, 7, true, true), None, "not while stopping");
        assert_eq!(
            c.poll(t0 + hour, 7, true, false),
            Some(CycleAction::Commit { position: 7 })
        );
        c.committed(t0 + hour, 7);
        assert_eq!(c.poll_timeout(), Some(t0 + 2 * hour));
        // A transaction with data resets the clock as well.
        assert!(c.before_send(t0 + hour + SECOND, 10));
        c.added(t0 + hour + SECOND);
        assert_eq!(c.poll_timeout(), Some(t0 + hour + 2 * SECOND));
        assert_eq!(
            c.poll(t0 + hour + 2 * SECOND, 9, true, false),
            Some(CycleAction::Commit { position: 9 })
        );
        c.committed(t0 + hour + 2 * SECOND, 9);
        assert_eq!(c.poll_timeout(), Some(t0 + 2 * hour + 2 * SECOND));
    }
}
