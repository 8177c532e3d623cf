//! Time spent in each hop of a producer -> mirror -> consumer trace.
//!
//! A trace is *complete* when it holds the three spans of the reference scenario:
//!
//! * **producer**: a `PRODUCER` span (the application's `send <topic>`);
//! * **mirror**: a span from the Strait mirror, recognised by its instrumentation scope
//!   [`MIRROR_SCOPE`] or its `strait.flow` attribute (Strait's per-record `process <topic>`);
//! * **consumer**: a `CONSUMER` span that is not the mirror's (the application's
//!   `process <topic>` on the target cluster); when there are several, the first one that starts
//!   after the mirror span starts.
//!
//! The hops, as in the walkthrough's Jaeger timeline:
//!
//! | Hop | From | To |
//! |---|---|---|
//! | producer send | producer span start | producer span end (broker ack) |
//! | source -> mirror | producer span end | mirror span start (fetch response arrived) |
//! | mirror residence | mirror span start | mirror span end (target ack) |
//! | mirror -> consumer | mirror span end | consumer span start |
//! | end to end | producer span start | consumer span start |
//!
//! Values are kept signed, and small negative values are expected: a span ends when its process
//! has *handled* the acknowledgement, and by then the broker may already have handed the record
//! to the next hop's waiting fetch (the mirror's span can start a few milliseconds before the
//! producer's span ends). Across machines the hops also include clock skew.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use crate::span::{SpanKind, SpanRecord, TraceId};

/// The instrumentation scope name of Strait's spans.
pub const MIRROR_SCOPE: &str = "strait";
/// The attribute every Strait span carries.
pub const MIRROR_ATTRIBUTE: &str = "strait.flow";

/// The part a span plays in a mirrored trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// The application producer's `send`.
    Producer,
    /// The mirror.
    Mirror,
    /// The application consumer's `process`.
    Consumer,
}

/// The role of `span`, if it has one.
pub fn role(span: &SpanRecord) -> Option<Role> {
    if span.scope == MIRROR_SCOPE || span.attributes.contains_key(MIRROR_ATTRIBUTE) {
        return Some(Role::Mirror);
    }
    match span.kind {
        SpanKind::Producer => Some(Role::Producer),
        SpanKind::Consumer => Some(Role::Consumer),
        _ => None,
    }
}

/// One hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hop {
    /// Producer span start to its end.
    ProducerSend,
    /// Producer span end to mirror span start.
    SourceToMirror,
    /// Mirror span start to its end.
    MirrorResidence,
    /// Mirror span end to consumer span start.
    MirrorToConsumer,
    /// Producer span start to consumer span start.
    EndToEnd,
}

impl Hop {
    /// Every hop, in pipeline order.
    pub const ALL: [Hop; 5] = [
        Hop::ProducerSend,
        Hop::SourceToMirror,
        Hop::MirrorResidence,
        Hop::MirrorToConsumer,
        Hop::EndToEnd,
    ];

    /// A short label.
    pub fn label(self) -> &'static str {
        match self {
            Hop::ProducerSend => "producer send",
            Hop::SourceToMirror => "source -> mirror",
            Hop::MirrorResidence => "mirror residence",
            Hop::MirrorToConsumer => "mirror -> consumer",
            Hop::EndToEnd => "end to end",
        }
    }

    fn index(self) -> usize {
        match self {
            Hop::ProducerSend => 0,
            Hop::SourceToMirror => 1,
            Hop::MirrorResidence => 2,
            Hop::MirrorToConsumer => 3,
            Hop::EndToEnd => 4,
        }
    }
}

/// The hops of one complete trace, in milliseconds (signed: see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceHops {
    /// The trace.
    pub trace_id: TraceId,
    /// The producer span's `messaging.destination.name`, if set.
    pub topic: Option<String>,
    /// Milliseconds per hop, indexed like [`Hop::ALL`].
    pub millis: [f64; 5],
}

impl TraceHops {
    /// The milliseconds of `hop`.
    pub fn get(&self, hop: Hop) -> f64 {
        self.millis[hop.index()]
    }

    /// One line: `trace <id> [topic]: producer send 1.2 ms | source -> mirror ...`.
    pub fn line(&self) -> String {
        let mut s = format!("trace {}", self.trace_id);
        if let Some(t) = &self.topic {
            let _ = write!(s, " [{t}]");
        }
        s.push(':');
        for (i, hop) in Hop::ALL.iter().enumerate() {
            let _ = write!(
                s,
                "{}{} {}",
                if i == 0 { " " } else { " | " },
                hop.label(),
                fmt_ms(self.get(*hop))
            );
        }
        s
    }
}

/// Milliseconds from `a` to `b`, negative if `b` is earlier.
fn millis_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

/// `12.3 ms`, `1.50 s`.
pub fn fmt_ms(ms: f64) -> String {
    if ms.abs() >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

/// The hops of the trace made of `spans` (all of one trace), if it is complete.
pub fn trace_hops(spans: &[&SpanRecord]) -> Option<TraceHops> {
    let first = |r: Role| {
        spans
            .iter()
            .filter(|s| role(s) == Some(r))
            .min_by_key(|s| s.start)
            .copied()
    };
    let producer = first(Role::Producer)?;
    let mirror = first(Role::Mirror)?;
    let consumer = spans
        .iter()
        .filter(|s| role(s) == Some(Role::Consumer) && s.start >= mirror.start)
        .min_by_key(|s| s.start)
        .copied()
        .or_else(|| first(Role::Consumer))?;
    let mut millis = [0.0; 5];
    millis[Hop::ProducerSend.index()] = millis_between(producer.start, producer.end);
    millis[Hop::SourceToMirror.index()] = millis_between(producer.end, mirror.start);
    millis[Hop::MirrorResidence.index()] = millis_between(mirror.start, mirror.end);
    millis[Hop::MirrorToConsumer.index()] = millis_between(mirror.end, consumer.start);
    millis[Hop::EndToEnd.index()] = millis_between(producer.start, consumer.start);
    Some(TraceHops {
        trace_id: producer.trace_id,
        topic: producer
            .attr_str("messaging.destination.name")
            .map(str::to_string),
        millis,
    })
}

/// Every complete trace among `spans`, ordered by the producer's start.
pub fn analyse(spans: &[SpanRecord]) -> Vec<TraceHops> {
    let mut by_trace: HashMap<TraceId, Vec<&SpanRecord>> = HashMap::new();
    for s in spans {
        by_trace.entry(s.trace_id).or_default().push(s);
    }
    let mut out: Vec<(SystemTime, TraceHops)> = by_trace
        .values()
        .filter_map(|group| {
            let start = group.iter().map(|s| s.start).min()?;
            Some((start, trace_hops(group)?))
        })
        .collect();
    out.sort_by_key(|(start, _)| *start);
    out.into_iter().map(|(_, h)| h).collect()
}

/// The `q` quantile (0..=1) of sorted `values`, nearest rank; `None` if empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Aggregated hop durations over the most recent traces.
#[derive(Debug, Clone)]
pub struct HopStats {
    samples: [VecDeque<f64>; 5],
    window: usize,
    total: u64,
}

impl HopStats {
    /// Keeps the last `window` traces (at least 1).
    pub fn new(window: usize) -> HopStats {
        HopStats {
            samples: Default::default(),
            window: window.max(1),
            total: 0,
        }
    }

    /// Adds one trace.
    pub fn add(&mut self, hops: &TraceHops) {
        for (samples, v) in self.samples.iter_mut().zip(hops.millis) {
            if samples.len() == self.window {
                samples.pop_front();
            }
            samples.push_back(v);
        }
        self.total += 1;
    }

    /// Traces added since the start (not only those in the window).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// `(p50, p99, samples)` of `hop` in milliseconds, `None` before the first trace.
    pub fn percentiles(&self, hop: Hop) -> Option<(f64, f64, usize)> {
        let mut v: Vec<f64> = self.samples[hop.index()].iter().copied().collect();
        v.sort_by(f64::total_cmp);
        Some((quantile(&v, 0.5)?, quantile(&v, 0.99)?, v.len()))
    }

    /// A small table: one line per hop with p50 and p99.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<20} {:>12} {:>12} {:>8}\n",
            "hop", "p50", "p99", "traces"
        );
        for hop in Hop::ALL {
            match self.percentiles(hop) {
                Some((p50, p99, n)) => {
                    let _ = writeln!(
                        s,
                        "{:<20} {:>12} {:>12} {:>8}",
                        hop.label(),
                        fmt_ms(p50),
                        fmt_ms(p99),
                        n
                    );
                }
                None => {
                    let _ = writeln!(s, "{:<20} {:>12} {:>12} {:>8}", hop.label(), "-", "-", 0);
                }
            }
        }
        s
    }
}

/// Groups spans arriving over time into traces and reports each trace once, when complete.
/// Traces still incomplete after `max_wait` are given up (counted in [`HopTracker::abandoned`]).
#[derive(Debug)]
pub struct HopTracker {
    pending: HashMap<TraceId, (Instant, Vec<SpanRecord>)>,
    max_wait: Duration,
    abandoned: u64,
    /// Aggregates of every completed trace.
    pub stats: HopStats,
}

impl HopTracker {
    /// A tracker that waits up to `max_wait` for a trace's spans and aggregates the last
    /// `window` traces.
    pub fn new(max_wait: Duration, window: usize) -> HopTracker {
        HopTracker {
            pending: HashMap::new(),
            max_wait,
            abandoned: 0,
            stats: HopStats::new(window),
        }
    }

    /// Adds newly received spans (spans with no [`Role`] are ignored).
    pub fn add(&mut self, spans: Vec<SpanRecord>, now: Instant) {
        for s in spans {
            if role(&s).is_none() {
                continue;
            }
            self.pending
                .entry(s.trace_id)
                .or_insert_with(|| (now, Vec::new()))
                .1
                .push(s);
        }
    }

    /// Removes and returns the traces that became complete (ordered by producer start), adds
    /// them to [`HopTracker::stats`], and gives up traces pending for longer than `max_wait`.
    pub fn take_complete(&mut self, now: Instant) -> Vec<TraceHops> {
        let mut done = Vec::new();
        let max_wait = self.max_wait;
        let mut abandoned = 0;
        self.pending.retain(|_, (since, spans)| {
            let refs: Vec<&SpanRecord> = spans.iter().collect();
            if let Some(h) = trace_hops(&refs) {
                let start = spans.iter().map(|s| s.start).min();
                done.push((start, h));
                return false;
            }
            if now.duration_since(*since) > max_wait {
                abandoned += 1;
                return false;
            }
            true
        });
        self.abandoned += abandoned;
        done.sort_by_key(|(start, _)| *start);
        let done: Vec<TraceHops> = done.into_iter().map(|(_, h)| h).collect();
        for h in &done {
            self.stats.add(h);
        }
        done
    }

    /// Traces waiting for more spans.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Traces given up as incomplete.
    pub fn abandoned(&self) -> u64 {
        self.abandoned
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::span::{AttrValue, SpanId};

    fn span(
        trace: u8,
        id: u8,
        kind: SpanKind,
        scope: &str,
        start_ms: u64,
        end_ms: u64,
    ) -> SpanRecord {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "messaging.destination.name".to_string(),
            AttrValue::String("my-topic".into()),
        );
        SpanRecord {
            trace_id: TraceId::from_bytes([trace; 16]).unwrap(),
            span_id: SpanId::from_bytes([id; 8]).unwrap(),
            parent_span_id: None,
            name: "x".into(),
            kind,
            service_name: "svc".into(),
            scope: scope.into(),
            start: UNIX_EPOCH + Duration::from_millis(start_ms),
            end: UNIX_EPOCH + Duration::from_millis(end_ms),
            attributes,
            links: vec![],
            resource: BTreeMap::new(),
        }
    }

    #[test]
    fn a_complete_trace_gives_every_hop() {
        let spans = vec![
            span(1, 1, SpanKind::Producer, "demo", 1000, 1004),
            span(1, 2, SpanKind::Consumer, MIRROR_SCOPE, 1100, 1110),
            span(1, 3, SpanKind::Consumer, "demo", 1300, 1301),
            // An unrelated, incomplete trace.
            span(2, 4, SpanKind::Producer, "demo", 1000, 1001),
        ];
        let hops = analyse(&spans);
        assert_eq!(hops.len(), 1);
        let h = &hops[0];
        assert_eq!(h.topic.as_deref(), Some("my-topic"));
        assert_eq!(h.get(Hop::ProducerSend), 4.0);
        assert_eq!(h.get(Hop::SourceToMirror), 96.0);
        assert_eq!(h.get(Hop::MirrorResidence), 10.0);
        assert_eq!(h.get(Hop::MirrorToConsumer), 190.0);
        assert_eq!(h.get(Hop::EndToEnd), 300.0);
        assert!(
            h.line().contains("mirror residence 10.0 ms"),
            "{}",
            h.line()
        );
    }

    #[test]
    fn clock_skew_gives_negative_hops_not_zero() {
        let spans = vec![
            span(1, 1, SpanKind::Producer, "demo", 1000, 1010),
            span(1, 2, SpanKind::Consumer, MIRROR_SCOPE, 1005, 1020),
            span(1, 3, SpanKind::Consumer, "demo", 1030, 1031),
        ];
        assert_eq!(analyse(&spans)[0].get(Hop::SourceToMirror), -5.0);
    }

    #[test]
    fn the_tracker_reports_a_trace_once_and_gives_up_on_stragglers() {
        let t0 = Instant::now();
        let mut tracker = HopTracker::new(Duration::from_secs(60), 100);
        tracker.add(
            vec![
                span(1, 1, SpanKind::Producer, "demo", 1000, 1004),
                span(1, 2, SpanKind::Consumer, MIRROR_SCOPE, 1100, 1110),
                span(2, 5, SpanKind::Producer, "demo", 2000, 2001),
            ],
            t0,
        );
        assert!(tracker.take_complete(t0).is_empty());
        tracker.add(vec![span(1, 3, SpanKind::Consumer, "demo", 1300, 1301)], t0);
        let done = tracker.take_complete(t0);
        assert_eq!(done.len(), 1);
        assert_eq!(tracker.stats.total(), 1);
        assert!(tracker.take_complete(t0).is_empty());
        assert_eq!(tracker.pending(), 1);
        tracker.take_complete(t0 + Duration::from_secs(61));
        assert_eq!((tracker.pending(), tracker.abandoned()), (0, 1));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        let mut stats = HopStats::new(2);
        for ms in [1.0, 2.0, 3.0] {
            stats.add(&TraceHops {
                trace_id: TraceId::from_bytes([1; 16]).unwrap(),
                topic: None,
                millis: [ms; 5],
            });
        }
        // The window keeps the last two traces only.
        assert_eq!(stats.percentiles(Hop::EndToEnd), Some((2.0, 3.0, 2)));
        assert_eq!(stats.total(), 3);
        assert!(stats.table().contains("mirror residence"));
    }
}
