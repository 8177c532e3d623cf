//! MirrorMaker 2's metric names (`metrics.mm2_compat = true`), so that dashboards and alerts
//! written for MirrorMaker 2 under Strimzi keep working.
//!
//! MirrorMaker 2 reports JMX metrics per target topic partition (`MirrorSourceConnector`) and
//! per group and partition (`MirrorCheckpointConnector`); Strimzi's Prometheus JMX exporter
//! rules turn them into gauges named `kafka_connect_mirror_<connector>_<metric>` with `source`,
//! `target`, `topic` (the **target** topic) and `partition` labels (and `group`). This module
//! serves the same series from the mirror's own observations:
//!
//! | series | Strait's source |
//! |---|---|
//! | `..._mirrorsourceconnector_record_count`, `_byte_count` | records and bytes acknowledged by the target (cumulative) |
//! | `..._record_rate`, `_byte_rate` | the same per second over the sample window |
//! | `..._record_age_ms`, `_min`, `_max`, `_avg` | fetch time minus the newest record timestamp of each batch (last, and over the window) |
//! | `..._replication_latency_ms`, `_min`, `_max`, `_avg` | acknowledgement time minus the newest record timestamp of each batch |
//! | `..._mirrorcheckpointconnector_checkpoint_latency_ms`, `_min`, `_max`, `_avg` | time to write a checkpoint to the target |
//!
//! MirrorMaker 2 measures ages per record; Strait per batch, from its newest record (the
//! oldest record of a batch is at most the batch's linger older). The window is Kafka's default
//! metrics window: two samples of 30 s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One sample's length (Kafka's `metrics.sample.window.ms`).
const SAMPLE: Duration = Duration::from_secs(30);

/// A value's statistics over the last two samples (Kafka's `SampledStat` with two samples).
#[derive(Debug, Clone, Default)]
struct Sampled {
    /// (sample start, count, sum, min, max), oldest first; at most two.
    samples: Vec<(Instant, u64, f64, f64, f64)>,
    last: Option<f64>,
}

impl Sampled {
    fn record(&mut self, value: f64, now: Instant) {
        self.last = Some(value);
        self.expire(now);
        match self.samples.last_mut() {
            Some(s) if now.duration_since(s.0) < SAMPLE => {
                s.1 += 1;
                s.2 += value;
                s.3 = s.3.min(value);
                s.4 = s.4.max(value);
            }
            _ => {
                self.samples.push((now, 1, value, value, value));
                if self.samples.len() > 2 {
                    self.samples.remove(0);
                }
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        self.samples
            .retain(|s| now.saturating_duration_since(s.0) < 2 * SAMPLE);
    }

    /// (count, sum, min, max) over the window.
    fn window(&self, now: Instant) -> Option<(u64, f64, f64, f64)> {
        let live: Vec<_> = self
            .samples
            .iter()
            .filter(|s| now.saturating_duration_since(s.0) < 2 * SAMPLE)
            .collect();
        if live.is_empty() {
            return None;
        }
        Some(live.iter().fold((0, 0.0, f64::MAX, f64::MIN), |a, s| {
            (a.0 + s.1, a.1 + s.2, a.2.min(s.3), a.3.max(s.4))
        }))
    }

    /// Sum over the window per second of the window's elapsed length (Kafka's `Rate`).
    fn rate(&self, now: Instant) -> f64 {
        let Some(first) = self
            .samples
            .iter()
            .find(|s| now.saturating_duration_since(s.0) < 2 * SAMPLE)
        else {
            return 0.0;
        };
        let (_, sum, _, _) = self.window(now).unwrap_or_default();
        // Like Kafka, at least one full sample's length, so a young window does not spike.
        let elapsed = now.saturating_duration_since(first.0).max(SAMPLE);
        sum / elapsed.as_secs_f64()
    }
}

#[derive(Debug, Clone, Default)]
struct PartitionStats {
    record_count: u64,
    byte_count: u64,
    records: Sampled,
    bytes: Sampled,
    age_ms: Sampled,
    latency_ms: Sampled,
}

/// MirrorMaker 2's series for one flow (`source` -> `target` aliases).
#[derive(Debug)]
pub struct Mm2Metrics {
    source: String,
    target: String,
    /// By (target topic, partition).
    partitions: Mutex<BTreeMap<(Arc<str>, i32), PartitionStats>>,
    /// By (group, target topic, partition).
    checkpoints: Mutex<BTreeMap<(String, String, i32), Sampled>>,
}

/// Milliseconds between two clock readings given as ms since the epoch, 0 when negative.
fn ms(later_ms: f64, earlier_ms: i64) -> f64 {
    (later_ms - earlier_ms as f64).max(0.0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps of numbers: consistent even if a panic interrupted an update.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One acknowledged batch, as the MirrorMaker 2 series count it.
#[derive(Debug, Clone, Copy)]
pub struct AckedBatch {
    /// Records in the batch.
    pub records: u32,
    /// Bytes of the batch.
    pub bytes: u64,
    /// The newest record's timestamp, ms since the epoch.
    pub newest_timestamp_ms: i64,
    /// When it was fetched, wall-clock ms since the epoch.
    pub fetched_ms: f64,
    /// When the target acknowledged it, wall-clock ms since the epoch.
    pub acked_ms: f64,
}

impl Mm2Metrics {
    /// Series labelled with the flow's cluster aliases.
    pub fn new(source: &str, target: &str) -> Mm2Metrics {
        Mm2Metrics {
            source: source.to_owned(),
            target: target.to_owned(),
            partitions: Mutex::new(BTreeMap::new()),
            checkpoints: Mutex::new(BTreeMap::new()),
        }
    }

    /// `batch` acknowledged for `partition` of `target_topic`.
    pub fn record_batch(
        &self,
        target_topic: &Arc<str>,
        partition: i32,
        batch: AckedBatch,
        now: Instant,
    ) {
        let mut parts = lock(&self.partitions);
        let s = parts.entry((target_topic.clone(), partition)).or_default();
        s.record_count += u64::from(batch.records);
        s.byte_count += batch.bytes;
        s.records.record(f64::from(batch.records), now);
        s.bytes.record(batch.bytes as f64, now);
        s.age_ms
            .record(ms(batch.fetched_ms, batch.newest_timestamp_ms), now);
        s.latency_ms
            .record(ms(batch.acked_ms, batch.newest_timestamp_ms), now);
    }

    /// A checkpoint of `group` for `partition` of `target_topic` took `latency` to write.
    pub fn record_checkpoint(
        &self,
        group: &str,
        target_topic: &str,
        partition: i32,
        latency: Duration,
        now: Instant,
    ) {
        lock(&self.checkpoints)
            .entry((group.to_owned(), target_topic.to_owned(), partition))
            .or_default()
            .record(latency.as_secs_f64() * 1000.0, now);
    }

    /// The series in the Prometheus text format (gauges), for appending to the exposition.
    pub fn encode(&self, now: Instant) -> String {
        let mut out = String::new();
        let source = escape(&self.source);
        let target = escape(&self.target);
        let parts = lock(&self.partitions);
        let prefix = "kafka_connect_mirror_mirrorsourceconnector";
        let mut families: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for ((topic, partition), s) in parts.iter() {
            let labels = format!(
                "partition=\"{partition}\",source=\"{source}\",target=\"{target}\",topic=\"{}\"",
                escape(topic)
            );
            let mut put = |name: &str, v: f64| {
                families
                    .entry(format!("{prefix}_{name}"))
                    .or_default()
                    .push(format!("{{{labels}}} {}", fmt_value(v)));
            };
            put("record_count", s.record_count as f64);
            put("byte_count", s.byte_count as f64);
            put("record_rate", s.records.rate(now));
            put("byte_rate", s.bytes.rate(now));
            for (name, stat) in [
                ("record_age_ms", &s.age_ms),
                ("replication_latency_ms", &s.latency_ms),
            ] {
                put(name, stat.last.unwrap_or(0.0));
                let (n, sum, min, max) = stat.window(now).unwrap_or((0, 0.0, 0.0, 0.0));
                put(&format!("{name}_min"), if n > 0 { min } else { 0.0 });
                put(&format!("{name}_max"), if n > 0 { max } else { 0.0 });
                put(
                    &format!("{name}_avg"),
                    if n > 0 { sum / n as f64 } else { 0.0 },
                );
            }
        }
        drop(parts);
        let prefix = "kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms";
        for ((group, topic, partition), stat) in lock(&self.checkpoints).iter() {
            let labels = format!(
                "group=\"{}\",partition=\"{partition}\",source=\"{source}\",target=\"{target}\",topic=\"{}\"",
                escape(group),
                escape(topic)
            );
            let (n, sum, min, max) = stat.window(now).unwrap_or((0, 0.0, 0.0, 0.0));
            let avg = if n > 0 { sum / n as f64 } else { 0.0 };
            for (suffix, v) in [
                ("", stat.last.unwrap_or(0.0)),
                ("_min", if n > 0 { min } else { 0.0 }),
                ("_max", if n > 0 { max } else { 0.0 }),
                ("_avg", avg),
            ] {
                families
                    .entry(format!("{prefix}{suffix}"))
                    .or_default()
                    .push(format!("{{{labels}}} {}", fmt_value(v)));
            }
        }
        for (name, lines) in families {
            let _ = writeln!(
                out,
                "# HELP {name} MirrorMaker 2 compatible series (Strait)."
            );
            let _ = writeln!(out, "# TYPE {name} gauge");
            for l in lines {
                let _ = writeln!(out, "{name}{l}");
            }
        }
        out
    }
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// Label values escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    #[test]
    fn batches_become_mirror_maker_2_series() {
        let m = Mm2Metrics::new("europe", "us");
        let t0 = Instant::now();
        let topic: Arc<str> = Arc::from("europe.orders");
        // Newest record written at 1000 ms, fetched at 1100, acknowledged at 1150.
        let batch = |records, bytes, newest_timestamp_ms, fetched_ms, acked_ms| AckedBatch {
            records,
            bytes,
            newest_timestamp_ms,
            fetched_ms,
            acked_ms,
        };
        m.record_batch(&topic, 3, batch(10, 1000, 1000, 1100.0, 1150.0), t0);
        m.record_batch(
            &topic,
            3,
            batch(30, 3000, 2000, 2300.0, 2400.0),
            t0 + Duration::from_secs(10),
        );
        let text = m.encode(t0 + Duration::from_secs(20));
        let l = "{partition=\"3\",source=\"europe\",target=\"us\",topic=\"europe.orders\"}";
        let p = "kafka_connect_mirror_mirrorsourceconnector_";
        assert_eq!(value(&text, &format!("{p}record_count{l}")), 40.0);
        assert_eq!(value(&text, &format!("{p}byte_count{l}")), 4000.0);
        // 40 records in a window counted as at least one 30 s sample.
        assert!((value(&text, &format!("{p}record_rate{l}")) - 40.0 / 30.0).abs() < 1e-9);
        assert_eq!(value(&text, &format!("{p}record_age_ms{l}")), 300.0);
        assert_eq!(value(&text, &format!("{p}record_age_ms_min{l}")), 100.0);
        assert_eq!(value(&text, &format!("{p}record_age_ms_max{l}")), 300.0);
        assert_eq!(value(&text, &format!("{p}record_age_ms_avg{l}")), 200.0);
        assert_eq!(
            value(&text, &format!("{p}replication_latency_ms{l}")),
            400.0
        );
        assert_eq!(
            value(&text, &format!("{p}replication_latency_ms_min{l}")),
            150.0
        );
        assert!(text.contains(&format!("# TYPE {p}record_count gauge")));

        // Two samples later the window is empty: rates and window stats fall to 0, counts stay.
        let later = m.encode(t0 + Duration::from_secs(100));
        assert_eq!(value(&later, &format!("{p}record_count{l}")), 40.0);
        assert_eq!(value(&later, &format!("{p}record_rate{l}")), 0.0);
        assert_eq!(value(&later, &format!("{p}record_age_ms_max{l}")), 0.0);

        m.record_checkpoint("app", "europe.orders", 3, Duration::from_millis(12), t0);
        let text = m.encode(t0);
        assert_eq!(
            value(
                &text,
                "kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms_max{group=\"app\",partition=\"3\",source=\"europe\",target=\"us\",topic=\"europe.orders\"}"
            ),
            12.0
        );
    }
}
