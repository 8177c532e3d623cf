//! Exact source -> target offset translation for one mirrored partition.
//!
//! The mirror knows, for every batch the target acknowledged, which source offset each target
//! record came from. [`OffsetMap`] keeps that knowledge compactly: an entry at every
//! discontinuity (the first record mirrored, a gap from compaction, skipped transaction markers
//! or aborted records, a range re-sent after a restart) and the **frontier**, the next source
//! offset and target offset after everything acknowledged. Between two entries the records are
//! one linear run that may end in a gap, so a committed source offset `c` translates exactly to
//! "the target offset of the first record at or after `c`":
//!
//! `min(e.offset + (c - e.upstream), next.offset)` where `e` is the last entry at or before
//! `c` and `next` the entry (or frontier) after it.
//!
//! What the map does not know it says, with a reason ([`Miss`]): an offset below the oldest
//! entry kept (the map is bounded; the oldest entries are evicted), an offset beyond the
//! frontier (not mirrored yet), or one inside a range whose mapping was never seen (a restart
//! resumed after records acknowledged by a process whose last entries were not persisted).
//!
//! Persistence: every entry is also queued as an [`OffsetSync`](super::format::OffsetSync)
//! pair for the target's offset-syncs topic ([`OffsetMap::take_outbox`]); a new instance
//! replays them with [`OffsetMap::replay`]. An unknown range is persisted as a sync whose
//! target offset is [`UNKNOWN`] (-1), Strait's one extension of MirrorMaker 2's format.

use std::collections::VecDeque;

/// Target offset of a persisted sync that marks "the mapping after the previous sync is
/// unknown until the next one".
pub const UNKNOWN: i64 = -1;

/// Entries kept per partition by default. Each is 24 bytes; an entry is made per
/// discontinuity, not per batch.
pub const DEFAULT_CAPACITY: usize = 4096;

/// A (source offset, target offset) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sync {
    /// Source offset.
    pub upstream: i64,
    /// Target offset.
    pub offset: i64,
}

impl Sync {
    /// A pair.
    pub const fn new(upstream: i64, offset: i64) -> Sync {
        Sync { upstream, offset }
    }
}

/// Why an offset could not be translated. Never a guess instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Miss {
    /// Nothing of this partition was mirrored (or replayed) yet.
    #[error("nothing of this partition has been mirrored by this instance yet")]
    Empty,
    /// Below the oldest entry kept.
    #[error(
        "offset {offset} is older than the oldest mapping kept ({oldest}); the group is far behind the mirror"
    )]
    BelowOldest {
        /// The offset asked.
        offset: i64,
        /// The oldest source offset the map can translate.
        oldest: i64,
    },
    /// Beyond what the target acknowledged.
    #[error("offset {offset} is not mirrored yet (the target has the partition up to {mirrored})")]
    NotMirrored {
        /// The offset asked.
        offset: i64,
        /// The frontier: the next source offset the target has not acknowledged.
        mirrored: i64,
    },
    /// Inside a range whose mapping this instance never saw.
    #[error(
        "offset {offset} is inside {from}..{to}, mirrored by an earlier process whose mapping was not persisted"
    )]
    Unknown {
        /// The offset asked.
        offset: i64,
        /// The range's first source offset (exclusive: `from` itself translates).
        from: i64,
        /// The next known source offset.
        to: i64,
    },
}

impl Miss {
    /// A stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Miss::Empty => "empty",
            Miss::BelowOldest { .. } => "below_oldest",
            Miss::NotMirrored { .. } => "not_mirrored",
            Miss::Unknown { .. } => "unknown_range",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    at: Sync,
    /// The records from here to the next entry are one known run (false: only `at` itself is
    /// known; what follows was mirrored by a process whose mapping is lost).
    linear: bool,
}

/// The bounded source -> target mapping of one partition. Pure: no I/O, no clock.
#[derive(Debug, Clone)]
pub struct OffsetMap {
    /// Sorted by `at.upstream`, unique.
    entries: VecDeque<Entry>,
    frontier: Option<Sync>,
    capacity: usize,
    /// Syncs not yet persisted, in order.
    outbox: Vec<Sync>,
    /// The last frontier persisted.
    persisted_frontier: Option<Sync>,
}

impl Default for OffsetMap {
    fn default() -> Self {
        OffsetMap::with_capacity(DEFAULT_CAPACITY)
    }
}

impl OffsetMap {
    /// An empty map keeping at most `capacity` (at least 2) entries.
    pub fn with_capacity(capacity: usize) -> OffsetMap {
        OffsetMap {
            entries: VecDeque::new(),
            frontier: None,
            capacity: capacity.max(2),
            outbox: Vec::new(),
            persisted_frontier: None,
        }
    }

    /// The next source offset (and its target offset) after everything acknowledged.
    pub fn frontier(&self) -> Option<Sync> {
        self.frontier
    }

    /// Number of entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.frontier.is_none()
    }

    /// One target batch acknowledged: `points` are (source offset, target offset) of the first
    /// record of each run of consecutive source offsets in the batch, in target order (at least
    /// one); `end` is (source offset after the batch's last, target offset after its last record).
    pub fn observe_batch(&mut self, points: &[Sync], end: Sync) {
        let Some((first, rest)) = points.split_first() else {
            return;
        };
        match self.frontier {
            None => self.push(*first, true),
            Some(f) if first.upstream > f.upstream && first.offset > f.offset => {
                // Records reached the target between the frontier and this batch that this
                // instance never saw (an earlier process acknowledged them): unknown range.
                self.mark_unknown_after(f);
                self.push(*first, true);
            }
            Some(f) if first.upstream >= f.upstream && first.offset < f.offset => {
                // The target partition went backwards (deleted and re-created): start over.
                self.entries.clear();
                self.outbox.push(Sync::new(f.upstream, UNKNOWN));
                self.push(*first, true);
            }
            Some(_) => self.push_if_off_line(*first),
        }
        for p in rest {
            self.push_if_off_line(*p);
        }
        self.frontier = Some(end);
    }

    /// Every source offset below `source_next` is on the target or was skipped on purpose
    /// (the mirror committed `source_next`): moves the frontier past skipped markers.
    pub fn advance_to(&mut self, source_next: i64) {
        if let Some(f) = &mut self.frontier
            && source_next > f.upstream
        {
            f.upstream = source_next;
        }
    }

    /// Replays one persisted sync (in topic order) into an instance starting up.
    pub fn replay(&mut self, s: Sync) {
        if s.offset == UNKNOWN {
            if let Some(f) = self.frontier {
                self.mark_unknown_after(f);
            }
            return;
        }
        match self.frontier {
            None => self.push(s, true),
            Some(f) if s.upstream >= f.upstream && s.offset < f.offset => {
                self.entries.clear();
                self.push(s, true);
            }
            Some(_) => match self.entries.back() {
                // After an unknown range, a new run starts.
                Some(last) if !last.linear && last.at.upstream < s.upstream => self.push(s, true),
                _ => self.push_if_off_line(s),
            },
        }
        self.frontier = Some(s);
        // Replayed syncs are already persisted.
        self.outbox.clear();
        self.persisted_frontier = self.frontier;
    }

    /// Translates a committed source offset to the target offset of the first record at or
    /// after it.
    pub fn translate(&self, c: i64) -> Result<i64, Miss> {
        let f = self.frontier.ok_or(Miss::Empty)?;
        if c > f.upstream {
            return Err(Miss::NotMirrored {
                offset: c,
                mirrored: f.upstream,
            });
        }
        let i = self.entries.partition_point(|e| e.at.upstream <= c);
        let Some(e) = i.checked_sub(1).and_then(|j| self.entries.get(j)) else {
            return Err(match self.entries.front() {
                Some(first) => Miss::BelowOldest {
                    offset: c,
                    oldest: first.at.upstream,
                },
                None => Miss::Empty,
            });
        };
        let next = self.entries.get(i).map_or(f, |n| n.at);
        if c == e.at.upstream {
            return Ok(e.at.offset);
        }
        if !e.linear {
            return Err(Miss::Unknown {
                offset: c,
                from: e.at.upstream,
                to: next.upstream,
            });
        }
        Ok((e.at.offset + (c - e.at.upstream)).min(next.offset))
    }

    /// The syncs to persist since the last call (entries in order, unknown-range markers, and
    /// the frontier if it moved), to be written to the offset-syncs topic in this order.
    pub fn take_outbox(&mut self) -> Vec<Sync> {
        let mut out = std::mem::take(&mut self.outbox);
        if let Some(f) = self.frontier
            && self.persisted_frontier != Some(f)
        {
            out.push(f);
            self.persisted_frontier = Some(f);
        }
        out
    }

    /// Puts syncs that could not be written back at the front of the outbox (in order), to be
    /// written at the next attempt.
    pub fn restore_outbox(&mut self, mut unsent: Vec<Sync>) {
        if unsent.is_empty() {
            return;
        }
        // The frontier it carried is written again with the next batch of syncs.
        self.persisted_frontier = None;
        unsent.append(&mut self.outbox);
        self.outbox = unsent;
        self.bound_outbox();
    }

    /// Adds `s` as an entry; entries at or after its source offset are superseded (a range
    /// re-sent after a restart: the later copy is where a resuming consumer must go, since
    /// everything after it on the target follows it).
    fn push(&mut self, s: Sync, linear: bool) {
        let keep = self.entries.partition_point(|e| e.at.upstream < s.upstream);
        self.entries.truncate(keep);
        self.entries.push_back(Entry { at: s, linear });
        self.outbox.push(s);
        if !linear {
            self.outbox.push(Sync::new(s.upstream, UNKNOWN));
        }
        while self.entries.len() > self.capacity {
            self.entries.pop_front();
        }
        self.bound_outbox();
    }

    fn push_if_off_line(&mut self, s: Sync) {
        let on_line = self.entries.back().is_some_and(|last| {
            last.linear
                && s.upstream >= last.at.upstream
                && last.at.offset + (s.upstream - last.at.upstream) == s.offset
                && self.frontier.is_none_or(|f| s.upstream >= f.upstream)
        });
        if !on_line {
            self.push(s, true);
        }
    }

    /// Records that the mapping after `f` (the frontier) is unknown until the next entry.
    fn mark_unknown_after(&mut self, f: Sync) {
        match self.entries.back_mut() {
            Some(last) if last.at == f => {
                if last.linear {
                    last.linear = false;
                    self.outbox.push(Sync::new(f.upstream, UNKNOWN));
                }
            }
            _ => self.push(f, false),
        }
    }

    /// A target that refuses writes for long must not grow memory: past twice the capacity,
    /// the outbox is replaced by an unknown-range marker and the entries kept (a replay then
    /// supersedes what it had from there on).
    fn bound_outbox(&mut self) {
        if self.outbox.len() <= 2 * self.capacity {
            return;
        }
        self.outbox.clear();
        if let Some(first) = self.entries.front() {
            self.outbox.push(Sync::new(first.at.upstream, UNKNOWN));
        }
        for e in &self.entries {
            self.outbox.push(e.at);
            if !e.linear {
                self.outbox.push(Sync::new(e.at.upstream, UNKNOWN));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A batch whose records came from `sources` (in target order), written at `target_base`.
    fn batch(m: &mut OffsetMap, sources: &[i64], target_base: i64) {
        let mut points = Vec::new();
        for (d, s) in sources.iter().enumerate() {
            let d = i64::try_from(d).unwrap();
            let continues = d > 0 && sources[usize::try_from(d - 1).unwrap()] + 1 == *s;
            if !continues {
                points.push(Sync::new(*s, target_base + d));
            }
        }
        let n = i64::try_from(sources.len()).unwrap();
        m.observe_batch(
            &points,
            Sync::new(sources[sources.len() - 1] + 1, target_base + n),
        );
    }

    /// The truth: target offset of the first record at or after `c`, from the list of
    /// (source, target) pairs of every record the target holds for the latest run.
    fn truth(records: &[(i64, i64)], c: i64) -> Option<i64> {
        records
            .iter()
            .filter(|(s, _)| *s >= c)
            .map(|(_, t)| *t)
            .min()
    }

    #[test]
    fn dense_partition_translates_one_to_one_up_to_the_frontier() {
        let mut m = OffsetMap::default();
        batch(&mut m, &(0..10).collect::<Vec<_>>(), 0);
        batch(&mut m, &(10..25).collect::<Vec<_>>(), 10);
        assert_eq!(m.len(), 1, "no discontinuity, one entry");
        for c in 0..=25 {
            assert_eq!(m.translate(c), Ok(c));
        }
        assert_eq!(
            m.translate(26),
            Err(Miss::NotMirrored {
                offset: 26,
                mirrored: 25
            })
        );
    }

    #[test]
    fn gaps_translate_to_the_first_record_at_or_after() {
        // Source log: 0..4 records, 5 a commit marker, 6..8 aborted, 9 abort marker, 10..14
        // records, 15..19 compacted away, then a re-encoded compacted batch with 20, 22, 23.
        let cases: &[(&str, &[&[i64]])] = &[
            (
                "markers and aborted",
                &[&[0, 1, 2, 3, 4], &[10, 11, 12, 13, 14]],
            ),
            ("compaction gap inside a batch", &[&[20, 22, 23], &[24, 25]]),
            (
                "all at once",
                &[
                    &[0, 1, 2, 3, 4],
                    &[10, 11, 12, 13, 14],
                    &[20, 22, 23],
                    &[30],
                ],
            ),
            ("offset zero missing", &[&[3, 4, 7], &[8]]),
        ];
        for (name, batches) in cases {
            let mut m = OffsetMap::default();
            let mut records = Vec::new();
            let mut t = 100;
            for b in *batches {
                batch(&mut m, b, t);
                for s in *b {
                    records.push((*s, t));
                    t += 1;
                }
            }
            let first = batches[0][0];
            let end = m.frontier().unwrap();
            for c in first..end.upstream {
                assert_eq!(m.translate(c).ok(), truth(&records, c), "{name}: c = {c}");
            }
            assert_eq!(m.translate(end.upstream), Ok(t), "{name}: at the frontier");
            if first > 0 {
                assert_eq!(
                    m.translate(first - 1),
                    Err(Miss::BelowOldest {
                        offset: first - 1,
                        oldest: first
                    }),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn skipped_markers_after_the_last_batch_move_the_frontier_on_commit() {
        let mut m = OffsetMap::default();
        batch(&mut m, &[0, 1, 2], 0);
        // Offset 3 is a commit marker; the mirror committed 4.
        assert!(matches!(m.translate(4), Err(Miss::NotMirrored { .. })));
        m.advance_to(4);
        assert_eq!(m.translate(3), Ok(3));
        assert_eq!(m.translate(4), Ok(3));
        // The next batch starts after the marker, where the target left off.
        batch(&mut m, &[4, 5], 3);
        assert_eq!(m.translate(4), Ok(3));
        assert_eq!(m.translate(5), Ok(4));
        assert_eq!(m.translate(6), Ok(5));
        // A commit below the frontier changes nothing.
        m.advance_to(2);
        assert_eq!(m.frontier(), Some(Sync::new(6, 5)));
    }

    #[test]
    fn a_re_sent_range_supersedes_the_first_copy() {
        let mut m = OffsetMap::default();
        batch(&mut m, &(0..10).collect::<Vec<_>>(), 0);
        // Restart: the mirror had committed 6, so 6..9 are written again at 10..13, then more.
        batch(&mut m, &(6..14).collect::<Vec<_>>(), 10);
        // Before the re-sent range: the first copy (only copy of 0..5).
        for c in 0..6 {
            assert_eq!(m.translate(c), Ok(c));
        }
        // From it on: the second copy, after which everything follows (no duplicates).
        for c in 6..=14 {
            assert_eq!(m.translate(c), Ok(c + 4), "c = {c}");
        }
        // The same upstream offset seen again later wins again.
        batch(&mut m, &(6..8).collect::<Vec<_>>(), 18);
        assert_eq!(m.translate(6), Ok(18));
        assert_eq!(m.translate(8), Ok(20));
        assert!(m.translate(9).is_err(), "9 is beyond the new frontier");
    }

    #[test]
    fn records_acknowledged_by_an_unknown_process_are_a_miss_not_a_guess() {
        let mut m = OffsetMap::default();
        batch(&mut m, &(0..10).collect::<Vec<_>>(), 0);
        // Another process mirrored 10..19 (with a gap we cannot know) to 10..17, then we resume.
        batch(&mut m, &(20..25).collect::<Vec<_>>(), 18);
        assert_eq!(m.translate(10), Ok(10), "the old frontier itself is known");
        assert_eq!(
            m.translate(15),
            Err(Miss::Unknown {
                offset: 15,
                from: 10,
                to: 20
            })
        );
        assert_eq!(m.translate(20), Ok(18));
        assert_eq!(m.translate(23), Ok(21));
    }

    #[test]
    fn the_map_is_bounded_and_the_evicted_past_is_a_miss() {
        let mut m = OffsetMap::with_capacity(3);
        // Every batch after a one-offset gap: one entry per batch.
        for i in 0..10 {
            batch(&mut m, &[i * 3, i * 3 + 1], i * 2);
        }
        assert_eq!(m.len(), 3);
        assert_eq!(
            m.translate(0),
            Err(Miss::BelowOldest {
                offset: 0,
                oldest: 21
            })
        );
        assert_eq!(m.translate(21), Ok(14));
        assert_eq!(m.translate(23), Ok(16), "23 is a gap: the next record");
        assert_eq!(m.translate(29), Ok(20), "the frontier");
    }

    #[test]
    fn a_re_created_target_topic_starts_over() {
        let mut m = OffsetMap::default();
        batch(&mut m, &(0..10).collect::<Vec<_>>(), 0);
        batch(&mut m, &(10..12).collect::<Vec<_>>(), 0);
        assert!(matches!(m.translate(5), Err(Miss::BelowOldest { .. })));
        assert_eq!(m.translate(11), Ok(1));
    }

    /// Persisting every outbox and replaying it into a new map gives the same translations.
    #[test]
    fn a_replayed_outbox_translates_like_the_live_map() {
        type Step = (&'static [i64], i64);
        let histories: &[(&str, &[Step])] = &[
            ("dense", &[(&[0, 1, 2], 0), (&[3, 4], 3)]),
            ("gaps", &[(&[0, 1], 0), (&[5, 6, 9], 2), (&[10], 5)]),
            ("re-sent", &[(&[0, 1, 2, 3], 0), (&[2, 3, 4], 4), (&[5], 7)]),
            ("unknown range", &[(&[0, 1], 0), (&[7, 8], 5), (&[9], 7)]),
        ];
        for (name, steps) in histories {
            let mut live = OffsetMap::default();
            let mut topic = Vec::new();
            for (i, (sources, t)) in steps.iter().enumerate() {
                batch(&mut live, sources, *t);
                // Flush after every other batch, as a checkpoint interval would.
                if i % 2 == 1 || i + 1 == steps.len() {
                    topic.extend(live.take_outbox());
                }
            }
            let mut replayed = OffsetMap::default();
            for s in &topic {
                replayed.replay(*s);
            }
            let end = live.frontier().unwrap().upstream;
            for c in 0..=end + 1 {
                assert_eq!(replayed.translate(c), live.translate(c), "{name}: c = {c}");
            }
            assert!(
                replayed.take_outbox().is_empty(),
                "{name}: nothing to rewrite"
            );
        }
    }

    #[test]
    fn an_unwritten_outbox_is_kept_in_order() {
        let mut m = OffsetMap::default();
        batch(&mut m, &[0, 1], 0);
        let first = m.take_outbox();
        assert_eq!(first, [Sync::new(0, 0), Sync::new(2, 2)]);
        batch(&mut m, &[5], 2);
        m.restore_outbox(first.clone());
        let again = m.take_outbox();
        assert_eq!(
            again,
            [
                Sync::new(0, 0),
                Sync::new(2, 2),
                Sync::new(5, 2),
                Sync::new(6, 3)
            ]
        );
        assert!(m.take_outbox().is_empty());
    }
}
