//! Where a start-up's time goes: one INFO line when the first and when the last assigned
//! partition reaches each stage (its start position known, its first fetch answered, its first
//! batch acknowledged by the target), with the seconds since the flow started (for a single mirror: since the process started, less
//! the configuration's parsing).
//!
//! The stages follow the forwarder's observer events, so the lines split a slow start into the
//! group's assignment, the position lookups, the source's fetches and the target's produces
//! without a trace backend (issue 33 item 3 measured a 4,000-partition start this way). Pure
//! state ([`Startup`], time passed in) behind a small [`Observer`] that logs.
//!
//! Only the first assignment is followed; the state is freed once every stage is complete or
//! after [`FOLLOW_FOR`], so a mirror whose partitions stay idle carries nothing for good.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use strait_forward::observe::{BatchForwarded, Observer};
use strait_wire::TopicPartition;

/// How long after the first assignment the stages are followed.
pub const FOLLOW_FOR: Duration = Duration::from_secs(300);

/// A stage of a partition's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The start position is known (committed, or looked up with ListOffsets).
    Positioned,
    /// The first fetch for it was answered.
    Fetched,
    /// Its first batch was acknowledged by the target.
    Acknowledged,
}

impl Stage {
    const ALL: [Stage; 3] = [Stage::Positioned, Stage::Fetched, Stage::Acknowledged];

    fn bit(self) -> u8 {
        match self {
            Stage::Positioned => 1,
            Stage::Fetched => 2,
            Stage::Acknowledged => 4,
        }
    }

    fn index(self) -> usize {
        match self {
            Stage::Positioned => 0,
            Stage::Fetched => 1,
            Stage::Acknowledged => 2,
        }
    }

    /// For the log line.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Positioned => "start position known",
            Stage::Fetched => "first fetch answered",
            Stage::Acknowledged => "first batch acknowledged by the target",
        }
    }
}

/// What to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Milestone {
    /// The first assigned partition reached `stage`.
    First(Stage),
    /// Every one of `partitions` assigned partitions reached `stage`.
    All(Stage, usize),
    /// [`FOLLOW_FOR`] ran out: `reached` of `partitions` had reached `stage`.
    GaveUp {
        /// The incomplete stage.
        stage: Stage,
        /// Partitions that reached it.
        reached: usize,
        /// Partitions assigned.
        partitions: usize,
    },
}

/// The stages reached by the partitions of the first assignment.
#[derive(Debug, Default)]
pub struct Startup {
    /// When the first assignment came, and how many partitions it held.
    assigned: Option<(Instant, usize)>,
    /// Stage bits per partition.
    reached: HashMap<TopicPartition, u8>,
    /// Partitions per stage.
    counts: [usize; 3],
    done: bool,
}

impl Startup {
    /// The partitions this instance mirrors changed (only the first non-empty set counts). The
    /// forwarder starts the partitions before the mirror announces them, so some may have
    /// reached a stage already: the stages every one of them reached are returned.
    pub fn assigned(&mut self, partitions: usize, now: Instant) -> Vec<Milestone> {
        let mut out = Vec::new();
        if self.assigned.is_some() || partitions == 0 || self.done {
            return out;
        }
        self.assigned = Some((now, partitions));
        for stage in Stage::ALL {
            if self.counts[stage.index()] >= partitions {
                out.push(Milestone::All(stage, partitions));
                if stage == Stage::Acknowledged {
                    self.finish();
                }
            }
        }
        out
    }

    /// `tp` reached `stage` at `now`: the milestones this completes (none when already known).
    pub fn reached(&mut self, tp: &TopicPartition, stage: Stage, now: Instant) -> Vec<Milestone> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        // Before the assignment is announced: counted, and the total checked once it is.
        let (at, partitions) = self.assigned.unwrap_or((now, usize::MAX));
        if now.saturating_duration_since(at) >= FOLLOW_FOR {
            for stage in Stage::ALL {
                let reached = self.counts[stage.index()];
                if reached < partitions {
                    out.push(Milestone::GaveUp {
                        stage,
                        reached,
                        partitions,
                    });
                }
            }
            self.finish();
            return out;
        }
        let bits = match self.reached.get_mut(tp) {
            Some(bits) => bits,
            None => self.reached.entry(tp.clone()).or_default(),
        };
        if *bits & stage.bit() != 0 {
            return out;
        }
        *bits |= stage.bit();
        let n = &mut self.counts[stage.index()];
        *n += 1;
        if *n == 1 {
            out.push(Milestone::First(stage));
        }
        if *n == partitions {
            out.push(Milestone::All(stage, partitions));
            if stage == Stage::Acknowledged {
                self.finish();
            }
        }
        out
    }

    /// Whether nothing more will be logged.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) {
        self.done = true;
        self.reached = HashMap::new();
    }
}

/// Logs the [`Startup`] milestones with the seconds since `flow_start`.
pub struct StartupLog {
    flow_start: Instant,
    state: Mutex<Startup>,
    /// Set once the state is done: later events skip the lock.
    done: AtomicBool,
}

impl StartupLog {
    /// Seconds in the lines count from `flow_start`.
    pub fn new(flow_start: Instant) -> Self {
        StartupLog {
            flow_start,
            state: Mutex::new(Startup::default()),
            done: AtomicBool::new(false),
        }
    }

    fn reached(&self, tp: &TopicPartition, stage: Stage) {
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let (milestones, done) = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            (s.reached(tp, stage, now), s.is_done())
        };
        let secs = now.saturating_duration_since(self.flow_start).as_secs_f64();
        self.log(tp, secs, milestones);
        if done {
            self.done.store(true, Ordering::Relaxed);
        }
    }

    fn log(&self, tp: &TopicPartition, secs: f64, milestones: Vec<Milestone>) {
        for m in milestones {
            match m {
                Milestone::First(stage) => tracing::info!(
                    after_s = format!("{secs:.3}"),
                    partition = %tp,
                    "start-up: first partition reached stage '{}'",
                    stage.as_str()
                ),
                Milestone::All(stage, n) => tracing::info!(
                    after_s = format!("{secs:.3}"),
                    partitions = n,
                    "start-up: every assigned partition reached stage '{}'",
                    stage.as_str()
                ),
                Milestone::GaveUp {
                    stage,
                    reached,
                    partitions,
                } => tracing::info!(
                    after_s = format!("{secs:.3}"),
                    reached,
                    partitions,
                    "start-up: not every assigned partition reached stage '{}' (idle or retrying ones \
                     do not); no longer followed",
                    stage.as_str()
                ),
            }
        }
    }
}

impl Observer for StartupLog {
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        self.reached(ev.source, Stage::Acknowledged);
    }

    fn lag(&self, source: &TopicPartition, _high_watermark: i64, _next_offset: i64) {
        self.reached(source, Stage::Fetched);
    }

    fn partition_started(&self, source: &TopicPartition, _target: &TopicPartition, _start: i64) {
        self.reached(source, Stage::Positioned);
    }

    fn rebalance(&self, assigned: &[TopicPartition]) {
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let secs = now.saturating_duration_since(self.flow_start).as_secs_f64();
        let (first, milestones, done) = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let first = s.assigned.is_none() && !assigned.is_empty();
            (first, s.assigned(assigned.len(), now), s.is_done())
        };
        if first {
            tracing::info!(
                after_s = format!("{secs:.3}"),
                partitions = assigned.len(),
                "start-up: partitions assigned"
            );
        }
        if let Some(tp) = assigned.first() {
            self.log(tp, secs, milestones);
        }
        if done {
            self.done.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p).unwrap()
    }

    #[test]
    fn first_and_last_partition_of_each_stage_are_reported_once() {
        let t0 = Instant::now();
        let mut s = Startup::default();
        // The forwarder starts partitions before the mirror announces the assignment.
        assert_eq!(
            s.reached(&tp(0), Stage::Positioned, t0),
            vec![Milestone::First(Stage::Positioned)]
        );
        assert!(s.assigned(2, t0).is_empty());
        // Again for the same partition: nothing new.
        assert!(s.reached(&tp(0), Stage::Positioned, t0).is_empty());
        assert_eq!(
            s.reached(&tp(1), Stage::Positioned, t0),
            vec![Milestone::All(Stage::Positioned, 2)]
        );
        assert_eq!(
            s.reached(&tp(1), Stage::Acknowledged, t0),
            vec![Milestone::First(Stage::Acknowledged)]
        );
        // A later assignment does not restart the count.
        assert!(s.assigned(5, t0).is_empty());
        assert!(s.reached(&tp(1), Stage::Acknowledged, t0).is_empty());
        assert_eq!(
            s.reached(&tp(0), Stage::Acknowledged, t0),
            vec![Milestone::All(Stage::Acknowledged, 2)]
        );
        assert!(s.is_done());
        assert!(s.reached(&tp(0), Stage::Fetched, t0).is_empty());
    }

    #[test]
    fn idle_partitions_end_the_follow_after_its_time() {
        let t0 = Instant::now();
        let mut s = Startup::default();
        s.reached(&tp(0), Stage::Positioned, t0);
        // Announced after one partition got its position, before the other.
        s.assigned(2, t0);
        s.reached(&tp(1), Stage::Positioned, t0);
        s.reached(&tp(0), Stage::Acknowledged, t0);
        let late = t0 + FOLLOW_FOR;
        assert_eq!(
            s.reached(&tp(0), Stage::Fetched, late),
            vec![
                Milestone::GaveUp {
                    stage: Stage::Fetched,
                    reached: 0,
                    partitions: 2
                },
                Milestone::GaveUp {
                    stage: Stage::Acknowledged,
                    reached: 1,
                    partitions: 2
                },
            ]
        );
        assert!(s.is_done());
    }

    #[test]
    fn stages_all_partitions_reached_before_the_announcement_are_reported_with_it() {
        let t0 = Instant::now();
        let mut s = Startup::default();
        for p in 0..2 {
            s.reached(&tp(p), Stage::Positioned, t0);
        }
        assert_eq!(
            s.assigned(2, t0),
            vec![Milestone::All(Stage::Positioned, 2)]
        );
    }
}
