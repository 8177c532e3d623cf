//! Prometheus metrics, fed by the forwarder's observer hook and served on `/metrics`.
//!
//! Names follow the Prometheus conventions: a `strait_` prefix, base units (`_seconds`), and
//! `_total` on counters (added by the encoder). Label values are topic names, partitions, error
//! names and a few fixed words, so cardinality is bounded by the number of mirrored partitions.
//!
//! | Metric | Type | Labels | Meaning |
//! |---|---|---|---|
//! | `strait_records_total` | counter | source_topic, target_topic, path | records acknowledged by the target |
//! | `strait_bytes_total` | counter | source_topic, target_topic, path | bytes of the produced batches (compressed, as on the wire) |
//! | `strait_batches_total` | counter | source_topic, target_topic, path, reason | produced batches; `path` is `pass_through`, `reencoded` or `merged`, `reason` the re-encode reason, the merge kind (`records`: uncompressed, deltas rewritten; `recompressed`) or `none` |
//! | `strait_batches_skipped_total` | counter | reason | source batches not forwarded on purpose: `control`, `aborted`, `empty`, `excluded` (copies of `strait failback`, see docs/failover.md) |
//! | `strait_records_skipped_total` | counter | reason | records in those batches |
//! | `strait_partition_lag_records` | gauge | topic, partition | source end offset minus the position the target has acknowledged (see below) |
//! | `strait_partition_lag_seconds` | gauge | topic, partition | age of the oldest record the target has not acknowledged (see below) |
//! | `strait_lag_records` | gauge | | sum of `strait_partition_lag_records` over the assigned partitions |
//! | `strait_lag_seconds` | gauge | | largest `strait_partition_lag_seconds` of the assigned partitions |
//! | `strait_records_lost_total` | counter | topic, partition, reason | source records that will never reach the target, counted exactly; `reason` is `offset_out_of_range` (deleted by retention before they were mirrored, skipped as `mirror.on_offset_out_of_range` says) |
//! | `strait_loss_events_total` | counter | topic, reason | loss events: `offset_out_of_range` (one per skip), `target_topic_recreated` (the target topic was deleted and created again: what had been mirrored into it is gone) |
//! | `strait_committed_offset` | gauge | topic, partition | last committed source position |
//! | `strait_replication_latency_seconds` | histogram | | per batch: fetch response received -> target acknowledged (time inside the mirror) |
//! | `strait_record_age_seconds` | histogram | | per batch: target acknowledged minus the batch's newest record timestamp |
//! | `strait_produce_request_seconds` | histogram | | per Produce request: sent -> answered by the target broker (the target's share of the time inside the mirror) |
//! | `strait_produce_queue_seconds` | histogram | | per Produce request: longest wait of its batches for a free request slot (`max_requests_per_broker`) |
//! | `strait_fetch_errors_total` | counter | error | failed fetches by Kafka error name (`NOT_LEADER_OR_FOLLOWER`, `disconnected`...) |
//! | `strait_produce_errors_total` | counter | error | failed produces by Kafka error name |
//! | `strait_partitions_stopped_total` | counter | | partitions stopped on an error that needs an operator |
//! | `strait_partitions_blocked` | gauge | | partitions retrying an authorization failure (they resume by themselves once granted) |
//! | `strait_rebalances_total` | counter | | partition assignment changes |
//! | `strait_partitions_assigned` | gauge | | partitions this instance mirrors |
//! | `strait_partitions_revoked_total` | counter | | partitions this instance gave up in rebalances (consumer protocol and cooperative-sticky: only the ones that moved; eager: all) |
//! | `strait_group_generation` | gauge | | this instance's generation in the mirror's group: the member epoch on the consumer protocol |
//! | `strait_group_rebalances_total` | counter | protocol, cause | group events that changed this instance's partitions; `protocol` is `consumer` or `classic`, `cause` is `joined` (first assignment of a membership), `assigned` (partitions added later), `revoked` (partitions moved away), `lost` (membership lost: session expired or fenced) |
//! | `strait_rebalance_partitions` | histogram | change | partitions per such event: `assigned` (joined, assigned) or `revoked` (revoked, lost) |
//! | `strait_rebalance_pause_seconds` | histogram | phase | per moved partition, this instance's share of its pause: `revoke` (revocation -> drained and committed, on the old owner), `assign` (assignment -> first fetch answered, on the new owner) |
//! | `strait_checkpoint_round_seconds` | histogram | | per checkpoint round (`mirror.groups`): persist offset syncs, heartbeat, read the groups' source offsets, translate, write checkpoints, sync group offsets |
//! | `strait_checkpoint_age_seconds` | gauge | group | seconds since the last round that checkpointed every committed partition of the group (a group with a translation miss ages) |
//! | `strait_groups_synced_total` | counter | | group offset syncs that committed offsets to a group on the target (`mirror.sync_group_offsets`) |
//! | `strait_translation_misses_total` | counter | reason | committed source offsets a round could not translate exactly: `empty`, `below_oldest`, `not_mirrored`, `unknown_range` (see `failover::Miss`) |
//! | `strait_config_reloads_total` | counter | result | configuration reloads (SIGHUP or a changed file, `crate::run::reload`): `applied`, `unchanged` (nothing live changed), `invalid` (refused; the old configuration stays) |
//! | `strait_build_info` | info | version | 1, with the version |
//!
//! **Lag** (`crate::observe::lag`) is the source's end offset (the largest seen: fetches report the high
//! watermark, the listing the high watermark or, with `read_committed`, the last stable offset)
//! minus the next source offset whose predecessors the target has all acknowledged: data fetched
//! but not yet written counts. End offsets come from every fetch and
//! from a listing of all assigned partitions every `metrics.lag_interval`, so the lag keeps
//! growing while the target is down and fetching is held back. The gauges are refreshed every
//! second. **Lag in seconds** is 0 without lag; otherwise `now` minus the time at which the
//! source's end offset was where the acknowledged position is now, interpolated between the
//! end offsets seen (as kafka-lag-exporter does): the age of the oldest record not yet on the
//! target. For data that was already waiting when Strait first looked (a backlog at start) it is
//! a lower bound: the time since Strait first saw it. The series of a partition appear once its
//! start position and an end offset are known and are removed when the partition is assigned
//! elsewhere.
//!
//! **MirrorMaker 2 equivalents** (MM2's `kafka.connect.mirror:type=MirrorSourceConnector` MBeans):
//!
//! | MirrorMaker 2 | Strait | Difference |
//! |---|---|---|
//! | `record-count`, `record-rate` | `strait_records_total` (use `rate()`) | same meaning: counted after the target acknowledges |
//! | `byte-count`, `byte-rate` | `strait_bytes_total` (use `rate()`) | MM2 counts record value bytes only; Strait counts whole batches as written (keys, headers, compression included) |
//! | `replication-latency-ms` (+min/max/avg) | `strait_record_age_seconds` | both are "acknowledged minus record timestamp"; Strait measures per batch with its newest record, as a histogram |
//! | `record-age-ms` (+min/max/avg) | `strait_record_age_seconds` minus `strait_replication_latency_seconds` | MM2 measures at read time; subtract the time spent inside the mirror |
//! | — | `strait_replication_latency_seconds` | time inside the mirror, which MM2 does not expose |
//! | consumer `records-lag` | `strait_partition_lag_records` | |
//! | `MirrorCheckpointConnector` `checkpoint-latency-ms` (+min/max/avg), per group and partition | `strait_checkpoint_round_seconds` | MM2 times each checkpoint; Strait times the round that writes them all |
//! | — | `strait_checkpoint_age_seconds`, `strait_groups_synced_total`, `strait_translation_misses_total` | MM2 has no such metrics |
//!
//! With `metrics.mm2_compat = true` the exposition also carries MirrorMaker 2's own series as
//! Strimzi's JMX exporter rules name them (`kafka_connect_mirror_mirrorsourceconnector_*`,
//! `kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms*`), so existing
//! MirrorMaker 2 dashboards and alerts work unchanged: see [`mm2`].

pub mod mm2;
mod observer;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use strait_wire::TopicPartition;

use crate::observe::lag::{Lag, LagBook};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Histogram buckets for time inside the mirror: 1 ms to 1 min.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Histogram buckets for partitions per rebalance: 1 to 5,000.
const PARTITION_COUNT_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

fn partition_count_histogram() -> Histogram {
    Histogram::new(PARTITION_COUNT_BUCKETS)
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Why this instance's partitions changed (`strait_group_rebalances_total`'s `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceCause {
    /// The first assignment of a group membership (start, or a rejoin).
    Joined,
    /// Partitions added to a running membership (another instance left, partitions added).
    Assigned,
    /// Partitions moved to another instance (released: drained and committed).
    Revoked,
    /// The membership was lost (session expired, fenced): the partitions moved without a
    /// release.
    Lost,
}

impl RebalanceCause {
    fn as_str(self) -> &'static str {
        match self {
            RebalanceCause::Joined => "joined",
            RebalanceCause::Assigned => "assigned",
            RebalanceCause::Revoked => "revoked",
            RebalanceCause::Lost => "lost",
        }
    }

    fn change(self) -> &'static str {
        match self {
            RebalanceCause::Joined | RebalanceCause::Assigned => "assigned",
            RebalanceCause::Revoked | RebalanceCause::Lost => "revoked",
        }
    }
}

/// Histogram buckets for record age: 10 ms to 1 day (catching up on a backlog is slow).
const AGE_BUCKETS: [f64; 16] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0,
    86400.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FlowLabels {
    source_topic: Arc<str>,
    target_topic: Arc<str>,
    path: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BatchLabels {
    source_topic: Arc<str>,
    target_topic: Arc<str>,
    path: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Configuration reloads happen once per process (`crate::run::reload`), whatever flows and metrics
/// it runs: one counter, registered by every [`Metrics`].
fn config_reloads() -> Family<ResultLabels, Counter> {
    static RELOADS: std::sync::OnceLock<Family<ResultLabels, Counter>> = std::sync::OnceLock::new();
    RELOADS.get_or_init(Family::default).clone()
}

/// Counts a configuration reload: `applied`, `unchanged` or `invalid`.
pub fn record_config_reload(result: &'static str) {
    config_reloads()
        .get_or_create(&ResultLabels { result })
        .inc();
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PartitionLabels {
    topic: Arc<str>,
    partition: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LossLabels {
    topic: Arc<str>,
    partition: i32,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LossEventLabels {
    topic: Arc<str>,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RebalanceLabels {
    protocol: &'static str,
    cause: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ChangeLabels {
    change: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GroupLabels {
    group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    error: String,
}

/// One acknowledged batch, in the forwarder-independent form [`Metrics`] records.
#[derive(Debug, Clone)]
pub struct Forwarded<'a> {
    /// Source topic.
    pub source_topic: &'a Arc<str>,
    /// Source partition.
    pub source_partition: i32,
    /// Target topic.
    pub target_topic: &'a Arc<str>,
    /// Records written.
    pub records: u32,
    /// Bytes written.
    pub bytes: u64,
    /// `pass_through`, `reencoded` or `merged`.
    pub path: &'static str,
    /// The re-encode reason, the merge kind, or `none`.
    pub reason: &'static str,
    /// Newest record timestamp of the batch (ms since the epoch).
    pub max_timestamp_ms: i64,
    /// When the fetch response carrying the batch arrived.
    pub fetched_at: SystemTime,
    /// When the target acknowledged it.
    pub acked_at: SystemTime,
}

/// All metrics of one mirror process, and the registry that exposes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    records: Family<FlowLabels, Counter>,
    bytes: Family<FlowLabels, Counter>,
    batches: Family<BatchLabels, Counter>,
    batches_skipped: Family<ReasonLabels, Counter>,
    records_skipped: Family<ReasonLabels, Counter>,
    lag_records: Family<PartitionLabels, Gauge>,
    lag_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    total_lag_records: Gauge,
    max_lag_seconds: Gauge<f64, AtomicU64>,
    records_lost: Family<LossLabels, Counter>,
    loss_events: Family<LossEventLabels, Counter>,
    committed_offset: Family<PartitionLabels, Gauge>,
    replication_latency: Histogram,
    record_age: Histogram,
    produce_request: Histogram,
    produce_queue: Histogram,
    fetch_errors: Family<ErrorLabels, Counter>,
    produce_errors: Family<ErrorLabels, Counter>,
    partitions_stopped: Counter,
    rebalances: Counter,
    partitions_assigned: Gauge,
    partitions_revoked: Counter,
    group_generation: Gauge,
    group_rebalances: Family<RebalanceLabels, Counter>,
    rebalance_partitions: Family<ChangeLabels, Histogram, fn() -> Histogram>,
    rebalance_pause: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    /// Assigned partitions not fetched yet, since when (the `assign` pause); `awaiting_any`
    /// spares the lock on every fetch when there are none.
    awaiting_fetch: Mutex<HashMap<TopicPartition, Instant>>,
    awaiting_any: AtomicBool,
    partitions_blocked: Gauge,
    checkpoint_round: Histogram,
    checkpoint_age: Family<GroupLabels, Gauge<f64, AtomicU64>>,
    groups_synced: Counter,
    translation_misses: Family<ReasonLabels, Counter>,
    config_reloads: Family<ResultLabels, Counter>,
    /// When each group was last checkpointed completely (the age gauges derive from it).
    checkpointed: Mutex<HashMap<String, Instant>>,
    lag: Mutex<LagBook>,
    blocked: Mutex<HashMap<TopicPartition, String>>,
    /// Partitions with series, so that a rebalance can remove those of partitions moved away.
    published: Mutex<HashSet<PartitionLabels>>,
    /// MirrorMaker 2's series (`metrics.mm2_compat`).
    mm2: Option<mm2::Mm2Metrics>,
    /// With several flows: their metrics, which the exposition merges (see [`Metrics::of_flows`]).
    flows: Vec<Arc<Metrics>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Several text expositions as one: a metric family's `# HELP`/`# TYPE`/`# UNIT` lines once
/// (from the first exposition that has it), followed by the samples of every exposition, since
/// both text formats want each family's lines together and only once. `openmetrics`: end with
/// `# EOF`.
fn merge_expositions(parts: &[String], openmetrics: bool) -> String {
    // (family name, metadata lines, sample lines), in first-seen order.
    let mut families: Vec<(String, Vec<&str>, Vec<&str>)> = Vec::new();
    for part in parts {
        // Families this exposition introduced: only those take its metadata lines.
        let mut introduced = HashSet::new();
        let mut current: Option<usize> = None;
        for line in part.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix("# ") {
                let name = meta.split(' ').nth(1).unwrap_or("");
                let i = match families.iter().position(|f| f.0 == name) {
                    Some(i) => i,
                    None => {
                        families.push((name.to_string(), Vec::new(), Vec::new()));
                        introduced.insert(families.len() - 1);
                        families.len() - 1
                    }
                };
                if introduced.contains(&i) {
                    families[i].1.push(line);
                }
                current = Some(i);
            } else if let Some(i) = current {
                families[i].2.push(line);
            }
        }
    }
    let mut out = String::new();
    for (_, meta, samples) in &families {
        for l in meta.iter().chain(samples) {
            out.push_str(l);
            out.push('\n');
        }
    }
    if openmetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Seconds from `earlier` to `later`, 0 if the clock says otherwise (skew between hosts).
fn seconds_between_ms(earlier_ms: i64, later: SystemTime) -> f64 {
    let later_ms = later
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);
    ((later_ms - earlier_ms as f64) / 1000.0).max(0.0)
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        Metrics::with_registry(Registry::with_prefix("strait"))
    }

    /// The metrics of one flow of several in a process: every series carries the labels
    /// `source` and `target` (the flow's cluster aliases). Serve them with [`Metrics::of_flows`].
    pub fn for_flow(source: &str, target: &str) -> Metrics {
        Metrics::with_registry(Registry::with_prefix_and_labels(
            "strait",
            [
                ("source".into(), source.to_string().into()),
                ("target".into(), target.to_string().into()),
            ]
            .into_iter(),
        ))
    }

    /// The exposition of several flows' metrics ([`Metrics::for_flow`]) as one: each metric
    /// family once, with the samples of every flow. Records nothing itself.
    pub fn of_flows(flows: Vec<Arc<Metrics>>) -> Metrics {
        Metrics {
            flows,
            ..Metrics::new()
        }
    }

    fn with_registry(mut registry: Registry) -> Metrics {
        let m = Metrics {
            records: Family::default(),
            bytes: Family::default(),
            batches: Family::default(),
            batches_skipped: Family::default(),
            records_skipped: Family::default(),
            lag_records: Family::default(),
            lag_seconds: Family::default(),
            total_lag_records: Gauge::default(),
            max_lag_seconds: Gauge::default(),
            records_lost: Family::default(),
            loss_events: Family::default(),
            committed_offset: Family::default(),
            replication_latency: Histogram::new(LATENCY_BUCKETS),
            record_age: Histogram::new(AGE_BUCKETS),
            produce_request: Histogram::new(LATENCY_BUCKETS),
            produce_queue: Histogram::new(LATENCY_BUCKETS),
            fetch_errors: Family::default(),
            produce_errors: Family::default(),
            partitions_stopped: Counter::default(),
            rebalances: Counter::default(),
            partitions_assigned: Gauge::default(),
            partitions_revoked: Counter::default(),
            group_generation: Gauge::default(),
            group_rebalances: Family::default(),
            rebalance_partitions: Family::new_with_constructor(partition_count_histogram),
            rebalance_pause: Family::new_with_constructor(latency_histogram),
            awaiting_fetch: Mutex::new(HashMap::new()),
            awaiting_any: AtomicBool::new(false),
            partitions_blocked: Gauge::default(),
            checkpoint_round: Histogram::new(LATENCY_BUCKETS),
            checkpoint_age: Family::default(),
            groups_synced: Counter::default(),
            config_reloads: config_reloads(),
            translation_misses: Family::default(),
            checkpointed: Mutex::new(HashMap::new()),
            lag: Mutex::new(LagBook::default()),
            blocked: Mutex::new(HashMap::new()),
            published: Mutex::new(HashSet::new()),
            mm2: None,
            flows: Vec::new(),
            registry: Registry::default(),
        };
        registry.register(
            "records",
            "Records acknowledged by the target cluster",
            m.records.clone(),
        );
        registry.register(
            "bytes",
            "Bytes of the record batches acknowledged by the target (as written, compressed)",
            m.bytes.clone(),
        );
        registry.register(
            "batches",
            "Record batches acknowledged by the target, by path (pass_through, reencoded or merged) and reason (re-encode reason or merge kind)",
            m.batches.clone(),
        );
        registry.register(
            "batches_skipped",
            "Source batches deliberately not forwarded (control markers, aborted transactions, empty batches)",
            m.batches_skipped.clone(),
        );
        registry.register(
            "records_skipped",
            "Records in source batches deliberately not forwarded",
            m.records_skipped.clone(),
        );
        registry.register(
            "partition_lag_records",
            "Source end offset minus the source position the target has acknowledged",
            m.lag_records.clone(),
        );
        registry.register(
            "partition_lag_seconds",
            "0 without lag; otherwise the age of the oldest record the target has not acknowledged (interpolated)",
            m.lag_seconds.clone(),
        );
        registry.register(
            "lag_records",
            "Sum of the partition lags in records over the assigned partitions",
            m.total_lag_records.clone(),
        );
        registry.register(
            "lag_seconds",
            "Largest partition lag in seconds of the assigned partitions",
            m.max_lag_seconds.clone(),
        );
        registry.register(
            "records_lost",
            "Source records that will never reach the target (skipped after retention deleted them), by reason",
            m.records_lost.clone(),
        );
        registry.register(
            "loss_events",
            "Events that lost data: offset_out_of_range skips, target topics deleted and re-created",
            m.loss_events.clone(),
        );
        registry.register(
            "committed_offset",
            "Last source position committed to the mirror's consumer group",
            m.committed_offset.clone(),
        );
        registry.register(
            "replication_latency_seconds",
            "Per batch: time from the fetch response to the target's acknowledgement",
            m.replication_latency.clone(),
        );
        registry.register(
            "record_age_seconds",
            "Per batch: acknowledgement time minus the batch's newest record timestamp",
            m.record_age.clone(),
        );
        registry.register(
            "produce_request_seconds",
            "Per Produce request: time from sending it to the target broker's answer",
            m.produce_request.clone(),
        );
        registry.register(
            "produce_queue_seconds",
            "Per Produce request: longest wait of its batches for a free request slot",
            m.produce_queue.clone(),
        );
        registry.register(
            "fetch_errors",
            "Failed source fetches by Kafka error name",
            m.fetch_errors.clone(),
        );
        registry.register(
            "produce_errors",
            "Failed target produces by Kafka error name",
            m.produce_errors.clone(),
        );
        registry.register(
            "partitions_stopped",
            "Partitions stopped on an error that needs an operator",
            m.partitions_stopped.clone(),
        );
        registry.register(
            "rebalances",
            "Changes of the set of partitions this instance mirrors",
            m.rebalances.clone(),
        );
        registry.register(
            "partitions_assigned",
            "Partitions this instance mirrors",
            m.partitions_assigned.clone(),
        );
        registry.register(
            "partitions_revoked",
            "Partitions this instance gave up in rebalances (incremental protocols: only the moved ones)",
            m.partitions_revoked.clone(),
        );
        registry.register(
            "group_generation",
            "Generation of this instance in the mirror's group (the member epoch on the consumer protocol)",
            m.group_generation.clone(),
        );
        registry.register(
            "group_rebalances",
            "Group events that changed this instance's partitions, by protocol and cause (joined, assigned, revoked, lost)",
            m.group_rebalances.clone(),
        );
        registry.register(
            "rebalance_partitions",
            "Partitions per group event, by change (assigned, revoked)",
            m.rebalance_partitions.clone(),
        );
        registry.register(
            "rebalance_pause_seconds",
            "Per moved partition, this instance's share of its pause: revoke (revocation to drained and committed), assign (assignment to first fetch answered)",
            m.rebalance_pause.clone(),
        );
        registry.register(
            "partitions_blocked",
            "Partitions retrying an authorization failure (they resume once the grant exists)",
            m.partitions_blocked.clone(),
        );
        registry.register(
            "checkpoint_round_seconds",
            "Per checkpoint round: time to persist offset syncs, read, translate and checkpoint the selected groups, and sync group offsets",
            m.checkpoint_round.clone(),
        );
        registry.register(
            "checkpoint_age_seconds",
            "Seconds since the group's committed offsets were last checkpointed completely",
            m.checkpoint_age.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP or a changed file), by result: applied, unchanged, invalid",
            m.config_reloads.clone(),
        );
        registry.register(
            "groups_synced",
            "Group offset syncs that committed translated offsets to a group on the target",
            m.groups_synced.clone(),
        );
        registry.register(
            "translation_misses",
            "Committed source offsets a checkpoint round could not translate exactly, by reason",
            m.translation_misses.clone(),
        );
        registry.register(
            "build",
            "Build information",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry, ..m }
    }

    /// Also serves MirrorMaker 2's series for the flow `source` -> `target` (aliases).
    pub fn with_mm2_compat(mut self, source: &str, target: &str) -> Metrics {
        self.mm2 = Some(mm2::Mm2Metrics::new(source, target));
        self
    }

    /// The exposition in the OpenMetrics text format (ends with `# EOF`).
    pub fn encode_openmetrics(&self) -> String {
        if !self.flows.is_empty() {
            let parts: Vec<String> = self.flows.iter().map(|f| f.encode_openmetrics()).collect();
            return merge_expositions(&parts, true);
        }
        self.refresh_checkpoint_ages(Instant::now());
        let mut out = String::new();
        // Writing to a String cannot fail; an encoder error would be a bug in a metric type.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        if let Some(mm2) = &self.mm2 {
            let end = out.rfind("# EOF").unwrap_or(out.len());
            out.insert_str(end, &mm2.encode(Instant::now()));
        }
        out
    }

    /// The exposition in the Prometheus text format 0.0.4 (for scrapers that do not ask for
    /// OpenMetrics).
    pub fn encode_prometheus(&self) -> String {
        if !self.flows.is_empty() {
            let parts: Vec<String> = self.flows.iter().map(|f| f.encode_prometheus()).collect();
            return merge_expositions(&parts, false);
        }
        self.refresh_checkpoint_ages(Instant::now());
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        if let Some(mm2) = &self.mm2 {
            out.push_str(&mm2.encode(Instant::now()));
        }
        out
    }

    /// A checkpoint of `group` for `partition` of `target_topic` took `latency` to write
    /// (MirrorMaker 2's checkpoint latency; only with `metrics.mm2_compat`).
    pub fn record_checkpoint_written(
        &self,
        group: &str,
        target_topic: &str,
        partition: i32,
        latency: std::time::Duration,
    ) {
        if let Some(mm2) = &self.mm2 {
            mm2.record_checkpoint(group, target_topic, partition, latency, Instant::now());
        }
    }

    /// One checkpoint round took `seconds`.
    pub fn record_checkpoint_round(&self, seconds: f64) {
        self.checkpoint_round.observe(seconds);
    }

    /// Every committed offset of `group` was checkpointed at `at`.
    pub fn record_group_checkpointed(&self, group: &str, at: Instant) {
        self.checkpointed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(group.to_string(), at);
        self.refresh_checkpoint_ages(at);
    }

    /// Group offset sync committed offsets to `groups` groups on the target.
    pub fn record_groups_synced(&self, groups: u64) {
        self.groups_synced.inc_by(groups);
    }

    /// A committed offset could not be translated (`reason`: `failover::Miss::as_str`).
    pub fn record_translation_miss(&self, reason: &'static str) {
        self.translation_misses
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Sets every group's checkpoint age as of `now` (at scrape time, so it grows between
    /// rounds).
    fn refresh_checkpoint_ages(&self, now: Instant) {
        let checkpointed = self
            .checkpointed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (group, at) in checkpointed.iter() {
            self.checkpoint_age
                .get_or_create(&GroupLabels {
                    group: group.clone(),
                })
                .set(now.saturating_duration_since(*at).as_secs_f64());
        }
    }

    fn lag_book(&self) -> std::sync::MutexGuard<'_, LagBook> {
        // A poisoned lock only means another thread panicked mid-update of plain numbers.
        self.lag
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn blocked(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, String>> {
        self.blocked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish(&self, key: &PartitionLabels) {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !published.contains(key) {
            published.insert(key.clone());
        }
    }

    /// Records an acknowledged batch.
    pub fn record_forwarded(&self, ev: &Forwarded<'_>) {
        let flow = FlowLabels {
            source_topic: ev.source_topic.clone(),
            target_topic: ev.target_topic.clone(),
            path: ev.path,
        };
        self.records
            .get_or_create(&flow)
            .inc_by(u64::from(ev.records));
        self.bytes.get_or_create(&flow).inc_by(ev.bytes);
        self.batches
            .get_or_create(&BatchLabels {
                source_topic: flow.source_topic,
                target_topic: flow.target_topic,
                path: ev.path,
                reason: ev.reason,
            })
            .inc();
        let residence = ev
            .acked_at
            .duration_since(ev.fetched_at)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.replication_latency.observe(residence);
        let age = seconds_between_ms(ev.max_timestamp_ms, ev.acked_at);
        self.record_age.observe(age);
        if let Some(mm2) = &self.mm2 {
            let epoch_ms = |t: SystemTime| {
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            };
            let batch = mm2::AckedBatch {
                records: ev.records,
                bytes: ev.bytes,
                newest_timestamp_ms: ev.max_timestamp_ms,
                fetched_ms: epoch_ms(ev.fetched_at),
                acked_ms: epoch_ms(ev.acked_at),
            };
            mm2.record_batch(ev.target_topic, ev.source_partition, batch, Instant::now());
        }
    }

    /// Records a source batch that was dropped on purpose.
    pub fn record_skipped(&self, reason: &'static str, records: u32) {
        let labels = ReasonLabels { reason };
        self.batches_skipped.get_or_create(&labels).inc();
        self.records_skipped
            .get_or_create(&labels)
            .inc_by(u64::from(records));
    }

    /// Records a failed fetch.
    pub fn record_fetch_error(&self, error: &str) {
        self.fetch_errors
            .get_or_create(&ErrorLabels {
                error: error.to_string(),
            })
            .inc();
    }

    /// Records one Produce request's round trip and the longest queue wait of its batches.
    pub fn record_produce_request(
        &self,
        elapsed: std::time::Duration,
        queued: std::time::Duration,
    ) {
        self.produce_request.observe(elapsed.as_secs_f64());
        self.produce_queue.observe(queued.as_secs_f64());
    }

    /// Counts a failed produce by Kafka error name.
    pub fn record_produce_error(&self, error: &str) {
        self.produce_errors
            .get_or_create(&ErrorLabels {
                error: error.to_string(),
            })
            .inc();
    }

    /// The source reported `end` as the end offset of `tp` at `now` (a fetch's high watermark or
    /// a listed offset).
    pub fn record_end_offset(&self, tp: &TopicPartition, end: i64, now: Instant) {
        self.lag_book().observe_end(tp, end, now);
        if self.awaiting_any.load(Ordering::Relaxed) {
            self.first_fetch(tp, now);
        }
    }

    /// A fetch for `tp` was answered at `now`: if it was assigned and not fetched yet, its
    /// pause on this instance ends.
    fn first_fetch(&self, tp: &TopicPartition, now: Instant) {
        let mut awaiting = self.awaiting();
        if let Some(at) = awaiting.remove(tp) {
            self.rebalance_pause
                .get_or_create(&PhaseLabels { phase: "assign" })
                .observe(now.saturating_duration_since(at).as_secs_f64());
        }
        self.awaiting_any
            .store(!awaiting.is_empty(), Ordering::Relaxed);
    }

    fn awaiting(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, Instant>> {
        self.awaiting_fetch
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A group event changed this instance's partitions: `partitions` of them, on `protocol`
    /// (`consumer` or `classic`). Assigned ones are timed until their first fetch answer.
    pub fn record_group_rebalance(
        &self,
        protocol: &'static str,
        cause: RebalanceCause,
        partitions: &[TopicPartition],
        at: Instant,
    ) {
        self.group_rebalances
            .get_or_create(&RebalanceLabels {
                protocol,
                cause: cause.as_str(),
            })
            .inc();
        self.rebalance_partitions
            .get_or_create(&ChangeLabels {
                change: cause.change(),
            })
            .observe(partitions.len() as f64);
        let mut awaiting = self.awaiting();
        match cause {
            RebalanceCause::Joined | RebalanceCause::Assigned => {
                awaiting.extend(partitions.iter().map(|tp| (tp.clone(), at)));
            }
            RebalanceCause::Revoked | RebalanceCause::Lost => {
                for tp in partitions {
                    awaiting.remove(tp);
                }
            }
        }
        self.awaiting_any
            .store(!awaiting.is_empty(), Ordering::Relaxed);
    }

    /// `partitions` revoked partitions were drained and committed `elapsed` after their
    /// revocation started: each one's pause on this (the old) instance.
    pub fn record_drained(&self, partitions: usize, elapsed: Duration) {
        let h = self
            .rebalance_pause
            .get_or_create(&PhaseLabels { phase: "revoke" });
        for _ in 0..partitions {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// `tp` started mirroring (again) at `now`: its progress clock restarts.
    pub fn record_partition_started(&self, tp: &TopicPartition, now: Instant) {
        self.lag_book().restart(tp, now);
    }

    /// Evaluates the lag of the assigned partitions (source partition, position the target has
    /// acknowledged) at `now`, publishes the lag gauges and returns each partition's lag.
    pub fn update_lag(
        &self,
        acked: &[(TopicPartition, i64)],
        now: Instant,
    ) -> Vec<(TopicPartition, Lag)> {
        let lags = self.lag_book().evaluate(acked, now);
        let (mut total, mut max_seconds) = (0i64, 0f64);
        for (tp, lag) in &lags {
            let key = PartitionLabels {
                topic: tp.topic_arc().clone(),
                partition: tp.partition(),
            };
            if let (Some(records), Some(seconds)) = (lag.records, lag.seconds) {
                self.publish(&key);
                self.lag_records.get_or_create(&key).set(records);
                self.lag_seconds.get_or_create(&key).set(seconds);
                total = total.saturating_add(records);
                max_seconds = max_seconds.max(seconds);
            }
        }
        self.total_lag_records.set(total);
        self.max_lag_seconds.set(max_seconds);
        lags
    }

    /// Counts `records` source records of `topic`/`partition` that will never reach the target,
    /// and the loss event.
    pub fn record_records_lost(
        &self,
        topic: &Arc<str>,
        partition: i32,
        reason: &'static str,
        records: u64,
    ) {
        self.records_lost
            .get_or_create(&LossLabels {
                topic: topic.clone(),
                partition,
                reason,
            })
            .inc_by(records);
        self.record_loss_event(topic, reason);
    }

    /// Counts a loss event of source topic `topic` (e.g. `target_topic_recreated`).
    pub fn record_loss_event(&self, topic: &Arc<str>, reason: &'static str) {
        self.loss_events
            .get_or_create(&LossEventLabels {
                topic: topic.clone(),
                reason,
            })
            .inc();
    }

    /// A partition is blocked on an authorization failure (`Some(code)`), or moves again (`None`).
    pub fn record_partition_blocked(&self, tp: &TopicPartition, error_code: Option<&str>) {
        let mut blocked = self.blocked();
        match error_code {
            Some(code) => {
                blocked.insert(tp.clone(), code.to_string());
            }
            None => {
                blocked.remove(tp);
            }
        }
        self.partitions_blocked
            .set(i64::try_from(blocked.len()).unwrap_or(i64::MAX));
    }

    /// The partitions blocked on an authorization failure, with the error code.
    pub fn blocked_partitions(&self) -> HashMap<TopicPartition, String> {
        self.blocked().clone()
    }

    /// Records a committed source position.
    pub fn record_committed(&self, topic: &Arc<str>, partition: i32, offset: i64) {
        let key = PartitionLabels {
            topic: topic.clone(),
            partition,
        };
        self.publish(&key);
        self.committed_offset.get_or_create(&key).set(offset);
    }

    /// Records a partition stopped on an error.
    pub fn record_partition_stopped(&self) {
        self.partitions_stopped.inc();
    }

    /// `n` partitions were revoked from this instance.
    pub fn record_revoked(&self, n: usize) {
        self.partitions_revoked
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// The group generation (member epoch) this instance commits with now.
    pub fn record_generation(&self, generation: i32) {
        self.group_generation.set(i64::from(generation));
    }

    /// Records a new assignment; series of partitions no longer assigned are removed.
    pub fn record_rebalance<'a>(&self, assigned: impl IntoIterator<Item = (&'a Arc<str>, i32)>) {
        let assigned: HashSet<PartitionLabels> = assigned
            .into_iter()
            .map(|(topic, partition)| PartitionLabels {
                topic: topic.clone(),
                partition,
            })
            .collect();
        self.rebalances.inc();
        self.partitions_assigned
            .set(i64::try_from(assigned.len()).unwrap_or(i64::MAX));
        let kept: HashSet<TopicPartition> = assigned
            .iter()
            .filter_map(|k| TopicPartition::new(&k.topic, k.partition).ok())
            .collect();
        let mut book = self.lag_book();
        book.retain(&kept);
        drop(book);
        let mut awaiting = self.awaiting();
        awaiting.retain(|tp, _| kept.contains(tp));
        self.awaiting_any
            .store(!awaiting.is_empty(), Ordering::Relaxed);
        drop(awaiting);
        let mut blocked = self.blocked();
        blocked.retain(|tp, _| kept.contains(tp));
        self.partitions_blocked
            .set(i64::try_from(blocked.len()).unwrap_or(i64::MAX));
        drop(blocked);
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        published.retain(|key| {
            let keep = assigned.contains(key);
            if !keep {
                self.lag_records.remove(key);
                self.lag_seconds.remove(key);
                self.committed_offset.remove(key);
            }
            keep
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)
    }

    fn line_value(text: &str, prefix: &str) -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn batches_feed_counters_and_histograms() {
        let m = Metrics::new();
        let src: Arc<str> = Arc::from("orders");
        let dst: Arc<str> = Arc::from("europe.orders");
        m.record_forwarded(&Forwarded {
            source_topic: &src,
            source_partition: 0,
            target_topic: &dst,
            records: 10,
            bytes: 1000,
            path: "pass_through",
            reason: "none",
            max_timestamp_ms: 1_000,
            fetched_at: at(1_500),
            acked_at: at(1_520),
        });
        m.record_forwarded(&Forwarded {
            source_topic: &src,
            source_partition: 0,
            target_topic: &dst,
            records: 5,
            bytes: 300,
            path: "reencoded",
            reason: "codec_change",
            max_timestamp_ms: 1_000,
            fetched_at: at(2_000),
            acked_at: at(2_100),
        });
        let text = m.encode_openmetrics();
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(
            line_value(
                &text,
                "strait_records_total{source_topic=\"orders\",target_topic=\"europe.orders\",path=\"pass_through\"}"
            ),
            10.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_bytes_total{source_topic=\"orders\",target_topic=\"europe.orders\",path=\"reencoded\"}"
            ),
            300.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_batches_total{source_topic=\"orders\",target_topic=\"europe.orders\",path=\"reencoded\",reason=\"codec_change\"}"
            ),
            1.0
        );
        assert_eq!(
            line_value(&text, "strait_replication_latency_seconds_count"),
            2.0
        );
        assert!((line_value(&text, "strait_replication_latency_seconds_sum") - 0.12).abs() < 1e-9);
        assert_eq!(
            line_value(
                &text,
                "strait_replication_latency_seconds_bucket{le=\"0.025\"}"
            ),
            1.0
        );
        assert!((line_value(&text, "strait_record_age_seconds_sum") - 1.62).abs() < 1e-9);
        assert!(text.contains("strait_build_info{version=\""));
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition).unwrap()
    }

    #[test]
    fn lag_counts_what_the_target_has_not_acknowledged() {
        let m = Metrics::new();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let (p0, p1) = (tp("t", 0), tp("t", 1));
        let series = |p: i32, what: &str| {
            format!("strait_partition_{what}{{topic=\"t\",partition=\"{p}\"}}")
        };
        // Before anything is known: no series, totals 0.
        m.update_lag(&[(p0.clone(), -1)], at(0));
        let text = m.encode_openmetrics();
        assert!(!text.contains(&series(0, "lag_records")), "{text}");
        // The source end grows 0 -> 1000 over 10 s; everything fetched, nothing acknowledged.
        m.record_end_offset(&p0, 0, at(0));
        m.record_end_offset(&p0, 1000, at(10));
        m.record_end_offset(&p1, 40, at(10));
        let lags = m.update_lag(&[(p0.clone(), 0), (p1.clone(), 40)], at(10));
        assert_eq!(lags[0].1.records, Some(1000));
        let text = m.encode_openmetrics();
        assert_eq!(line_value(&text, &series(0, "lag_records")), 1000.0);
        assert_eq!(line_value(&text, &series(0, "lag_seconds")), 10.0);
        assert_eq!(line_value(&text, &series(1, "lag_records")), 0.0);
        assert_eq!(line_value(&text, &series(1, "lag_seconds")), 0.0);
        assert_eq!(line_value(&text, "strait_lag_records "), 1000.0);
        assert_eq!(line_value(&text, "strait_lag_seconds "), 10.0);
        // The target acknowledges up to 500 (the end at 5 s); evaluated at 12 s: 7 s behind.
        m.update_lag(&[(p0.clone(), 500), (p1.clone(), 40)], at(12));
        let text = m.encode_openmetrics();
        assert_eq!(line_value(&text, &series(0, "lag_records")), 500.0);
        assert_eq!(line_value(&text, &series(0, "lag_seconds")), 7.0);
        // The target stops acknowledging; the source keeps growing (listed, not fetched).
        m.record_end_offset(&p0, 3000, at(30));
        m.update_lag(&[(p0.clone(), 500), (p1.clone(), 40)], at(30));
        let text = m.encode_openmetrics();
        assert_eq!(line_value(&text, &series(0, "lag_records")), 2500.0);
        assert_eq!(line_value(&text, &series(0, "lag_seconds")), 25.0);
        assert_eq!(line_value(&text, "strait_lag_records "), 2500.0);
        // Caught up.
        m.update_lag(&[(p0.clone(), 3000), (p1.clone(), 40)], at(31));
        let text = m.encode_openmetrics();
        assert_eq!(line_value(&text, &series(0, "lag_seconds")), 0.0);
        assert_eq!(line_value(&text, "strait_lag_records "), 0.0);
    }

    #[test]
    fn rebalances_drop_series_of_partitions_moved_away() {
        let m = Metrics::new();
        let t: Arc<str> = Arc::from("t");
        let now = Instant::now();
        m.record_end_offset(&tp("t", 0), 10, now);
        m.record_end_offset(&tp("t", 1), 10, now);
        m.update_lag(&[(tp("t", 0), 5), (tp("t", 1), 5)], now);
        m.record_committed(&t, 1, 5);
        m.record_partition_blocked(&tp("t", 1), Some("TOPIC_AUTHORIZATION_FAILED"));
        m.record_rebalance([(&t, 0)]);
        let text = m.encode_openmetrics();
        assert!(text.contains("strait_partition_lag_records{topic=\"t\",partition=\"0\"} 5"));
        assert!(!text.contains("partition=\"1\""), "{text}");
        assert_eq!(line_value(&text, "strait_partitions_assigned"), 1.0);
        assert_eq!(line_value(&text, "strait_rebalances_total"), 1.0);
        assert_eq!(line_value(&text, "strait_partitions_blocked"), 0.0);
        assert!(m.blocked_partitions().is_empty());
    }

    #[test]
    fn revocations_and_the_group_generation() {
        let m = Metrics::new();
        m.record_generation(7);
        m.record_revoked(3);
        m.record_revoked(2);
        let text = m.encode_openmetrics();
        assert_eq!(line_value(&text, "strait_group_generation"), 7.0);
        assert_eq!(line_value(&text, "strait_partitions_revoked_total"), 5.0);
    }

    #[test]
    fn rebalances_by_protocol_and_cause_and_the_pause_of_moved_partitions() {
        let m = Metrics::new();
        let tp = |p| TopicPartition::new("orders", p).unwrap();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        m.record_group_rebalance("consumer", RebalanceCause::Joined, &[tp(0), tp(1)], at(0));
        m.record_group_rebalance("consumer", RebalanceCause::Revoked, &[tp(1)], at(100));
        m.record_drained(1, Duration::from_millis(40));
        // Partition 0 is fetched 250 ms after its assignment; partition 1 moved away before
        // its first fetch and is not timed; later fetches of 0 are not either.
        m.record_end_offset(&tp(0), 10, at(250));
        m.record_end_offset(&tp(1), 10, at(300));
        m.record_end_offset(&tp(0), 20, at(900));
        let text = m.encode_openmetrics();
        assert_eq!(
            line_value(
                &text,
                "strait_group_rebalances_total{protocol=\"consumer\",cause=\"joined\"}"
            ),
            1.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_group_rebalances_total{protocol=\"consumer\",cause=\"revoked\"}"
            ),
            1.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_rebalance_partitions_sum{change=\"assigned\"}"
            ),
            2.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_rebalance_pause_seconds_count{phase=\"assign\"}"
            ),
            1.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_rebalance_pause_seconds_sum{phase=\"assign\"}"
            ),
            0.25
        );
        assert_eq!(
            line_value(
                &text,
                "strait_rebalance_pause_seconds_sum{phase=\"revoke\"}"
            ),
            0.04
        );
        assert!(!m.awaiting_any.load(Ordering::Relaxed));
    }

    #[test]
    fn losses_are_counted_exactly() {
        let m = Metrics::new();
        let t: Arc<str> = Arc::from("orders");
        m.record_records_lost(&t, 3, "offset_out_of_range", 284_091);
        m.record_records_lost(&t, 3, "offset_out_of_range", 9);
        m.record_loss_event(&t, "target_topic_recreated");
        let text = m.encode_openmetrics();
        assert_eq!(
            line_value(
                &text,
                "strait_records_lost_total{topic=\"orders\",partition=\"3\",reason=\"offset_out_of_range\"}"
            ),
            284_100.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_loss_events_total{topic=\"orders\",reason=\"offset_out_of_range\"}"
            ),
            2.0
        );
        assert_eq!(
            line_value(
                &text,
                "strait_loss_events_total{topic=\"orders\",reason=\"target_topic_recreated\"}"
            ),
            1.0
        );
    }

    #[test]
    fn blocked_partitions_come_and_go() {
        let m = Metrics::new();
        m.record_partition_blocked(&tp("t", 0), Some("TOPIC_AUTHORIZATION_FAILED"));
        m.record_partition_blocked(&tp("t", 1), Some("GROUP_AUTHORIZATION_FAILED"));
        assert_eq!(
            line_value(&m.encode_openmetrics(), "strait_partitions_blocked"),
            2.0
        );
        m.record_partition_blocked(&tp("t", 0), None);
        assert_eq!(
            line_value(&m.encode_openmetrics(), "strait_partitions_blocked"),
            1.0
        );
        assert_eq!(
            m.blocked_partitions().get(&tp("t", 1)).map(String::as_str),
            Some("GROUP_AUTHORIZATION_FAILED")
        );
    }

    #[test]
    fn errors_and_skips() {
        let m = Metrics::new();
        m.record_fetch_error("NOT_LEADER_OR_FOLLOWER");
        m.record_fetch_error("NOT_LEADER_OR_FOLLOWER");
        m.record_produce_error("disconnected");
        m.record_skipped("control", 1);
        m.record_skipped("aborted", 7);
        m.record_partition_stopped();
        let text = m.encode_openmetrics();
        assert_eq!(
            line_value(
                &text,
                "strait_fetch_errors_total{error=\"NOT_LEADER_OR_FOLLOWER\"}"
            ),
            2.0
        );
        assert_eq!(
            line_value(&text, "strait_produce_errors_total{error=\"disconnected\"}"),
            1.0
        );
        assert_eq!(
            line_value(&text, "strait_records_skipped_total{reason=\"aborted\"}"),
            7.0
        );
        assert_eq!(
            line_value(&text, "strait_batches_skipped_total{reason=\"control\"}"),
            1.0
        );
        assert_eq!(line_value(&text, "strait_partitions_stopped_total"), 1.0);
        let prom = m.encode_prometheus();
        assert!(
            prom.contains("# TYPE strait_fetch_errors_total counter"),
            "{prom}"
        );
        assert!(!prom.contains("# EOF"));
    }
}
