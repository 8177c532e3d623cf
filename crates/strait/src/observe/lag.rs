//! True replication lag: the source's end offset minus the position the target has
//! acknowledged, in records and in seconds, per partition.
//!
//! Two inputs feed it:
//! * **End offsets.** Every fetch reports the source high watermark (cheap and fresh), and the
//!   `observe::sampler::Sampler` lists the end offsets of every assigned
//!   partition every `metrics.lag_interval` (ListOffsets latest, the last stable offset with
//!   `read_committed`), one request per source leader. The listing keeps the figures true while fetching is held back: when the target is
//!   down, the memory budget fills and the partitions stop fetching, so fetch answers alone would
//!   freeze the end offset (and the lag) at the moment the target went away. The larger value
//!   wins (an end offset only grows while a partition is assigned).
//! * **Acknowledged positions** ([`strait_forward::Forwarder::acknowledged_positions`]): the next
//!   source offset whose predecessors the target has all acknowledged. Data fetched but not yet
//!   acknowledged counts as lag.
//!
//! **Lag in seconds** is interpolated the way kafka-lag-exporter does it: each partition keeps a
//! small bounded table of (end offset, time first seen) points; the lag is `now` minus the time
//! at which the end offset was equal to the acknowledged position (linear between the two points
//! around it), 0 when caught up. When the position is older than the oldest point (a backlog
//! that existed before Strait first looked, e.g. at start), the time of the oldest point is used:
//! the figure is then a lower bound, the time since Strait first saw that data waiting.
//!
//! [`LagBook`] is the pure, time-passed-in part (tested table-driven below);
//! `observe::sampler::Sampler` is the thin async driver that lists end
//! offsets, evaluates the book every second, publishes the gauges and decides readiness
//! ([`crate::observe::health`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use strait_wire::TopicPartition;

/// Points kept per partition for the lag-in-seconds interpolation.
pub const DEFAULT_POINTS: usize = 64;
/// Points closer in time than this are merged (the newest replaces the last one), so frequent
/// fetch reports do not wash older history out of the bounded table.
const MIN_SPACING: Duration = Duration::from_secs(1);

/// The source end offset was `offset` when first seen at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    offset: i64,
    at: Instant,
}

#[derive(Debug, Clone)]
struct PartitionLag {
    /// Strictly increasing offsets; the last one is the largest end offset seen.
    points: VecDeque<Point>,
    /// When an end offset was last reported (equal or not), or when tracking began.
    end_seen_at: Instant,
    /// The acknowledged position at the last evaluation (-1: not known yet).
    acked: i64,
    /// The last time the partition was known to be fine: its acknowledged position moved, it was
    /// caught up, or it (re)started.
    progress_at: Instant,
}

impl PartitionLag {
    fn new(now: Instant) -> Self {
        PartitionLag {
            points: VecDeque::new(),
            end_seen_at: now,
            acked: -1,
            progress_at: now,
        }
    }

    fn end(&self) -> Option<i64> {
        self.points.back().map(|p| p.offset)
    }

    fn observe_end(&mut self, end: i64, now: Instant, capacity: usize) {
        self.end_seen_at = self.end_seen_at.max(now);
        let point = Point {
            offset: end,
            at: now,
        };
        let Some(last) = self.points.back().copied() else {
            self.points.push_back(point);
            return;
        };
        if end <= last.offset {
            return;
        }
        let len = self.points.len();
        if len >= 2 && now.saturating_duration_since(self.points[len - 2].at) < MIN_SPACING {
            // The last point was only the freshest sample: let the newer one take its place.
            self.points[len - 1] = point;
        } else {
            self.points.push_back(point);
        }
        self.prune(capacity);
    }

    /// Keeps the table within `capacity`: points below the acknowledged position are no longer
    /// needed (but the last of them is, as the interpolation's lower end), then the interior point
    /// whose neighbours are closest in time goes (the table thins out evenly, its span stays).
    fn prune(&mut self, capacity: usize) {
        while self.points.len() > 2 && self.acked >= 0 && self.points[1].offset <= self.acked {
            self.points.pop_front();
        }
        while self.points.len() > capacity.max(2) {
            let victim = (1..self.points.len() - 1)
                .min_by_key(|&i| {
                    self.points[i + 1]
                        .at
                        .saturating_duration_since(self.points[i - 1].at)
                })
                .unwrap_or(1);
            self.points.remove(victim);
        }
    }

    /// When the end offset was (by interpolation) equal to `position`; `None` when `position` is
    /// at or past the end (caught up).
    fn time_of(&self, position: i64) -> Option<Instant> {
        let after = self.points.iter().position(|p| p.offset > position)?;
        let b = self.points[after];
        if after == 0 {
            // Older than anything seen: a lower bound (see the module docs).
            return Some(b.at);
        }
        let a = self.points[after - 1];
        let span = (b.offset - a.offset) as f64;
        let frac = ((position - a.offset) as f64 / span).clamp(0.0, 1.0);
        Some(a.at + b.at.saturating_duration_since(a.at).mul_f64(frac))
    }

    fn evaluate(&mut self, acked: i64, now: Instant, capacity: usize) -> Lag {
        if acked != self.acked {
            self.acked = acked;
            self.progress_at = now;
            self.prune(capacity);
        }
        let end_age = now.saturating_duration_since(self.end_seen_at);
        let (records, seconds) = match (acked, self.end()) {
            (a, Some(end)) if a >= 0 => {
                let records = end.saturating_sub(a).max(0);
                let seconds = match self.time_of(a) {
                    Some(t) if records > 0 => now.saturating_duration_since(t).as_secs_f64(),
                    _ => 0.0,
                };
                (Some(records), Some(seconds))
            }
            _ => (None, None),
        };
        if records == Some(0) {
            self.progress_at = now;
        }
        Lag {
            acked,
            records,
            seconds,
            since_progress: now.saturating_duration_since(self.progress_at),
            end_age,
        }
    }
}

/// One partition's lag at an evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lag {
    /// The acknowledged position (-1: the partition has not resolved its start yet).
    pub acked: i64,
    /// End offset minus the acknowledged position; `None` while either is unknown.
    pub records: Option<i64>,
    /// Age of the oldest record not yet acknowledged (see the module docs); `None` while unknown.
    pub seconds: Option<f64>,
    /// Time since the acknowledged position last moved or the partition was last caught up.
    pub since_progress: Duration,
    /// Time since the source last reported an end offset for the partition.
    pub end_age: Duration,
}

/// Per-partition lag state. Pure: every method takes the current time.
#[derive(Debug, Clone)]
pub struct LagBook {
    partitions: HashMap<TopicPartition, PartitionLag>,
    capacity: usize,
}

impl Default for LagBook {
    fn default() -> Self {
        LagBook::new(DEFAULT_POINTS)
    }
}

impl LagBook {
    /// A book keeping at most `capacity` (at least 2) interpolation points per partition.
    pub fn new(capacity: usize) -> LagBook {
        LagBook {
            partitions: HashMap::new(),
            capacity: capacity.max(2),
        }
    }

    /// The source reported `end` as the end offset of `tp` (a fetch's high watermark or a
    /// listed offset). Negative values (unknown) are ignored.
    pub fn observe_end(&mut self, tp: &TopicPartition, end: i64, now: Instant) {
        if end < 0 {
            return;
        }
        let capacity = self.capacity;
        self.partitions
            .entry(tp.clone())
            .or_insert_with(|| PartitionLag::new(now))
            .observe_end(end, now, capacity);
    }

    /// `tp` (re)started mirroring: its progress clock starts again.
    pub fn restart(&mut self, tp: &TopicPartition, now: Instant) {
        let p = self
            .partitions
            .entry(tp.clone())
            .or_insert_with(|| PartitionLag::new(now));
        p.progress_at = now;
        p.acked = -1;
    }

    /// Forgets partitions not in `assigned`.
    pub fn retain(&mut self, assigned: &HashSet<TopicPartition>) {
        self.partitions.retain(|tp, _| assigned.contains(tp));
    }

    /// The lag of each partition in `acked` (source partition, acknowledged position), which is
    /// taken as the whole assignment: other partitions are forgotten.
    pub fn evaluate(
        &mut self,
        acked: &[(TopicPartition, i64)],
        now: Instant,
    ) -> Vec<(TopicPartition, Lag)> {
        let assigned: HashSet<TopicPartition> = acked.iter().map(|(tp, _)| tp.clone()).collect();
        self.retain(&assigned);
        let capacity = self.capacity;
        acked
            .iter()
            .map(|(tp, position)| {
                let lag = self
                    .partitions
                    .entry(tp.clone())
                    .or_insert_with(|| PartitionLag::new(now))
                    .evaluate(*position, now, capacity);
                (tp.clone(), lag)
            })
            .collect()
    }

    /// Interpolation points held for `tp` (for tests of the bound).
    pub fn points(&self, tp: &TopicPartition) -> usize {
        self.partitions.get(tp).map_or(0, |p| p.points.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p).unwrap()
    }

    /// Feeds (seconds, end offset) reports, then evaluates at `at` with position `acked`.
    fn lag_after(ends: &[(u64, i64)], at: u64, acked: i64) -> Lag {
        let t0 = Instant::now();
        let mut book = LagBook::default();
        for &(s, end) in ends {
            book.observe_end(&tp(0), end, t0 + Duration::from_secs(s));
        }
        let lags = book.evaluate(&[(tp(0), acked)], t0 + Duration::from_secs(at));
        lags[0].1
    }

    #[test]
    fn lag_in_records_and_seconds_table() {
        // (end offset reports, evaluation time, acknowledged position) -> (records, seconds)
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: &[(&str, &[(u64, i64)], u64, i64, Option<i64>, Option<f64>)] = &[
            ("caught up", &[(0, 100)], 10, 100, Some(0), Some(0.0)),
            ("ahead of a stale end", &[(0, 100)], 10, 120, Some(0), Some(0.0)),
            ("position unknown", &[(0, 100)], 10, -1, None, None),
            ("end unknown", &[], 10, 5, None, None),
            // End 0 at 0 s, 1000 at 10 s: offset 500 was the end at 5 s; evaluated at 20 s.
            ("interpolated", &[(0, 0), (10, 1000)], 20, 500, Some(500), Some(15.0)),
            ("exactly on a point", &[(0, 0), (10, 1000), (20, 2000)], 30, 1000, Some(1000), Some(20.0)),
            // The target fell behind at 10 s (position 1000) and nothing moved since: the lag in
            // seconds keeps growing with the clock, the records with the source.
            ("stuck position ages", &[(0, 0), (10, 1000), (20, 2000), (30, 3000)], 60, 1000, Some(2000), Some(50.0)),
            // Older than the oldest point: the time since that point (a lower bound).
            ("backlog before the first point", &[(5, 10_000)], 65, 0, Some(10_000), Some(60.0)),
            // An end offset reported lower later (a listing answered after a fetch) is ignored.
            ("end never goes back", &[(0, 0), (10, 1000), (11, 900)], 20, 500, Some(500), Some(15.0)),
        ];
        for (name, ends, at, acked, records, seconds) in cases {
            let lag = lag_after(ends, *at, *acked);
            assert_eq!(lag.records, *records, "{name}: records");
            match (lag.seconds, seconds) {
                (Some(got), Some(want)) => {
                    assert!((got - want).abs() < 1e-6, "{name}: seconds {got} != {want}")
                }
                (got, want) => assert_eq!(got, *want, "{name}: seconds"),
            }
        }
    }

    #[test]
    fn frequent_reports_merge_into_one_point_per_second() {
        let t0 = Instant::now();
        let mut book = LagBook::default();
        // A fetch every 100 ms for 10 s, 10 records each: 100 reports.
        for i in 0..100u64 {
            book.observe_end(
                &tp(0),
                (i as i64 + 1) * 10,
                t0 + Duration::from_millis(100 * i),
            );
        }
        assert!(book.points(&tp(0)) <= 12, "{}", book.points(&tp(0)));
        // Still interpolates to within the spacing: offset 500 was reached at ~4.9 s.
        let lag = book.evaluate(&[(tp(0), 500)], t0 + Duration::from_secs(20));
        let s = lag[0].1.seconds.unwrap();
        assert!((14.0..=16.0).contains(&s), "{s}");
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_its_oldest_unacknowledged_point() {
        let t0 = Instant::now();
        let mut book = LagBook::new(8);
        // Stuck at position 0 while the end grows by 100 every 2 s for 10 minutes.
        for i in 0..300u64 {
            book.observe_end(
                &tp(0),
                100 + 100 * i as i64,
                t0 + Duration::from_secs(2 * i),
            );
            if i % 10 == 0 {
                book.evaluate(&[(tp(0), 0)], t0 + Duration::from_secs(2 * i));
            }
        }
        assert!(book.points(&tp(0)) <= 8);
        let lag = book.evaluate(&[(tp(0), 0)], t0 + Duration::from_secs(600));
        // The oldest point (end 100 at 0 s) survives the thinning: 600 s behind.
        assert_eq!(lag[0].1.seconds, Some(600.0));
        assert_eq!(lag[0].1.records, Some(30_000));
        // Points below the acknowledged position are dropped once it moves past them.
        book.evaluate(&[(tp(0), 29_000)], t0 + Duration::from_secs(601));
        assert!(book.points(&tp(0)) <= 8);
        let lag = book.evaluate(&[(tp(0), 29_000)], t0 + Duration::from_secs(602));
        let s = lag[0].1.seconds.unwrap();
        // Offset 29,000 became the end at ~578 s; the table is coarse there after thinning.
        assert!((0.0..=60.0).contains(&s), "{s}");
    }

    #[test]
    fn progress_clock() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut book = LagBook::default();
        book.restart(&tp(0), at(0));
        book.observe_end(&tp(0), 100, at(0));
        // Behind and not moving: the clock runs from the start.
        let l = book.evaluate(&[(tp(0), 10)], at(5))[0].1;
        assert_eq!(
            l.since_progress,
            Duration::ZERO,
            "a new position is progress"
        );
        let l = book.evaluate(&[(tp(0), 10)], at(50))[0].1;
        assert_eq!(l.since_progress, Duration::from_secs(45));
        // Moving resets it.
        let l = book.evaluate(&[(tp(0), 20)], at(60))[0].1;
        assert_eq!(l.since_progress, Duration::ZERO);
        // Caught up and idle is progress too.
        book.evaluate(&[(tp(0), 100)], at(61));
        let l = book.evaluate(&[(tp(0), 100)], at(500))[0].1;
        assert_eq!(l.since_progress, Duration::ZERO);
        assert_eq!(l.end_age, Duration::from_secs(500));
        // A restart (re-assignment) starts the clock again.
        book.observe_end(&tp(0), 200, at(500));
        book.restart(&tp(0), at(600));
        let l = book.evaluate(&[(tp(0), 100)], at(610))[0].1;
        assert_eq!(l.since_progress, Duration::ZERO, "position newly known");
        let l = book.evaluate(&[(tp(0), 100)], at(640))[0].1;
        assert_eq!(l.since_progress, Duration::from_secs(30));
    }

    #[test]
    fn partitions_not_assigned_are_forgotten() {
        let t0 = Instant::now();
        let mut book = LagBook::default();
        book.observe_end(&tp(0), 10, t0);
        book.observe_end(&tp(1), 10, t0);
        let lags = book.evaluate(&[(tp(1), 5)], t0);
        assert_eq!(lags.len(), 1);
        assert_eq!(book.points(&tp(0)), 0);
        assert_eq!(book.points(&tp(1)), 1);
    }
}
