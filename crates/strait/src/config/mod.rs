//! The validated configuration of one mirror (one source cluster -> one target cluster).
//!
//! Sources, lowest precedence first: built-in defaults, the strait.toml file (or the
//! MirrorMaker 1/2 files, see `crate::import::mirrormaker`), then the environment ([`mod@env`]).
//! Everything is validated in `Config::from_raw`: a bad value is an error naming the key and
//! the expected form, an unknown key in a non-client section is an error with a suggestion.
//!
//! ```toml
//! `[source]`
//! alias = "europe"
//! "bootstrap.servers" = "europe-kafka:9093"   # any Kafka client property, quoted or dotted
//! security.protocol = "SSL"                    # unquoted dotted keys work too
//!
//! `[target]`
//! alias = "us"
//! "bootstrap.servers" = "us-kafka:9093"
//!
//! `[mirror]`
//! topics = [".*"]
//! group_id = "my-group"
//! ```
//!
//! Client properties are kept as ordered `(key, value)` strings and validated by
//! `strait_wire::ClientConfig::from_properties` when the mirror connects.

pub(crate) mod connect;
pub mod env;
pub mod flows;
pub(crate) mod live;
pub mod properties;
pub mod providers;
pub(crate) mod raw;
pub mod topics;
pub mod value;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub use env::Environment;
use raw::{Entry, Origin, RawCluster, RawConfig, RawValue, Section, suggestion};
pub use topics::{
    ConfigExclude, DEFAULT_CONFIGS_EXCLUDE, DEFAULT_EXCLUDE, DEFAULT_INCLUDE, Rename,
    TopicSelection,
};
use value::Field;
pub use value::{ByteSize, format_duration};

use crate::error::{Error, Result};

// The mirror's settings parse straight into the types of the crates that act on them, so no
// conversion can drop a variant: where new partitions start (`mirror.start`), which source
// records are read (`mirror.isolation`), what happens when the committed position is gone
// (`mirror.on_offset_out_of_range`) and the group's assignors.
pub use strait_forward::{OffsetOutOfRange, pipeline::StartPosition};
pub use strait_wire::Isolation;
pub use strait_wire::group::{Assignor, GroupProtocol};

/// Compression of batches written to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// Keep each source batch's codec (zero-copy pass-through).
    Keep,
    /// Uncompressed (forces re-encoding of compressed batches).
    None,
    /// gzip.
    Gzip,
    /// snappy.
    Snappy,
    /// lz4.
    Lz4,
    /// zstd.
    Zstd,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// How much the mirror traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TracingMode {
    /// One span per forwarded batch.
    Batch,
    /// Per-record spans for sampled records, capped by `records_per_second`.
    Records,
    /// No spans.
    Off,
}

const GROUP_PROTOCOL: &[(&str, GroupProtocol)] = &[
    ("auto", GroupProtocol::Auto),
    ("consumer", GroupProtocol::Consumer),
    ("classic", GroupProtocol::Classic),
];
const START: &[(&str, StartPosition)] = &[
    ("earliest", StartPosition::Earliest),
    ("latest", StartPosition::Latest),
];
const ISOLATION: &[(&str, Isolation)] = &[
    ("read_committed", Isolation::ReadCommitted),
    ("read_uncommitted", Isolation::ReadUncommitted),
];
const COMPRESSION: &[(&str, Compression)] = &[
    ("keep", Compression::Keep),
    ("none", Compression::None),
    ("gzip", Compression::Gzip),
    ("snappy", Compression::Snappy),
    ("lz4", Compression::Lz4),
    ("zstd", Compression::Zstd),
];
const OUT_OF_RANGE: &[(&str, OffsetOutOfRange)] = &[
    ("fail", OffsetOutOfRange::Fail),
    ("earliest", OffsetOutOfRange::Earliest),
    ("latest", OffsetOutOfRange::Latest),
];
const ASSIGNOR: &[(&str, Assignor)] = &[
    ("roundrobin", Assignor::RoundRobin),
    ("range", Assignor::Range),
    ("cooperative-sticky", Assignor::CooperativeSticky),
];
/// The Java client's class names for the same assignors (MirrorMaker consumer configs).
const ASSIGNOR_CLASSES: &[(&str, Assignor)] = &[
    (
        "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        Assignor::RoundRobin,
    ),
    (
        "org.apache.kafka.clients.consumer.RangeAssignor",
        Assignor::Range,
    ),
    (
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        Assignor::CooperativeSticky,
    ),
];
const LOG_FORMAT: &[(&str, LogFormat)] = &[("text", LogFormat::Text), ("json", LogFormat::Json)];
const TRACING_MODE: &[(&str, TracingMode)] = &[
    ("batch", TracingMode::Batch),
    ("records", TracingMode::Records),
    ("off", TracingMode::Off),
];

fn name_of<T: PartialEq + Copy>(table: &[(&'static str, T)], v: T) -> &'static str {
    table
        .iter()
        .find(|(_, x)| *x == v)
        .map(|(n, _)| *n)
        .unwrap_or("?")
}

/// The configuration word of a setting's value (`"read_committed"`, `"earliest"`...).
pub trait ConfigWord: Copy {
    /// The configuration word for this value.
    fn as_str(self) -> &'static str;
}

macro_rules! as_str_impl {
    ($t:ty, $table:ident) => {
        impl ConfigWord for $t {
            fn as_str(self) -> &'static str {
                name_of($table, self)
            }
        }
    };
}
as_str_impl!(StartPosition, START);
as_str_impl!(Isolation, ISOLATION);
as_str_impl!(Compression, COMPRESSION);
as_str_impl!(OffsetOutOfRange, OUT_OF_RANGE);
as_str_impl!(LogFormat, LOG_FORMAT);
as_str_impl!(Assignor, ASSIGNOR);

/// The assignor a `mirror.partition_assignment_strategy` entry names: `roundrobin`, `range`,
/// or the Java class name (case-insensitive).
pub fn assignor_named(name: &str) -> Option<Assignor> {
    let name = name.trim();
    ASSIGNOR
        .iter()
        .chain(ASSIGNOR_CLASSES)
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, a)| *a)
}
as_str_impl!(TracingMode, TRACING_MODE);

/// One cluster: its alias and its Kafka client properties. `Debug` redacts secret property
/// values ([`is_secret_property`]), so logging a `Cluster` or a [`Config`] cannot leak them.
#[derive(Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Short name (`europe`): the topic prefix with `rename = "prefix"`, and a metrics label.
    pub alias: String,
    /// Kafka client properties in file order, for `strait_wire::ClientConfig::from_properties`.
    /// `${provider:...}` references are resolved.
    pub properties: Vec<(String, String)>,
    /// The properties whose values came from config provider references: (key, the value as
    /// written). `strait check` prints these instead of the resolved values.
    pub references: Vec<(String, String)>,
}

impl Cluster {
    /// The `strait-wire` client configuration for this cluster. The properties were validated
    /// with the same call when the configuration was loaded, so this fails only if that check
    /// was bypassed.
    pub fn client_config(&self) -> strait_wire::Result<strait_wire::ClientConfig> {
        strait_wire::ClientConfig::from_properties(
            self.properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }

    /// A property's value.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("alias", &self.alias)
            .field(
                "properties",
                &RedactedProperties(
                    self.properties
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                ),
            )
            .finish()
    }
}

/// Client properties for `Debug`: secret values replaced by [`REDACTED`].
pub(crate) struct RedactedProperties<'a>(pub(crate) Vec<(&'a str, &'a str)>);

impl fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|&(k, v)| {
                let v = if is_secret_property(k) { REDACTED } else { v };
                (k, v)
            }))
            .finish()
    }
}

/// The `[mirror]` section.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Mirror {
    /// Include/exclude patterns.
    pub topics: TopicSelection,
    /// Target topic naming.
    pub rename: Rename,
    /// Mirror heartbeats topics (`heartbeats`, `a.heartbeats`...) even when `topics` does not
    /// select them, as MirrorMaker 2 does (`heartbeats.replication.enabled`, on by default
    /// there; `strait mm2` turns it on). Default false.
    pub replicate_heartbeats: bool,
    /// Start position for partitions without a committed position.
    pub start: StartPosition,
    /// Consumer group (on the source cluster) that holds the mirror's positions.
    pub group_id: String,
    /// Upper bound on fetched-but-not-yet-acknowledged bytes.
    pub memory_budget: ByteSize,
    /// Largest decompressed batch the re-encode path accepts (decompression-bomb guard); a
    /// larger batch stops its partition.
    pub max_decompressed_batch_bytes: ByteSize,
    /// How often topics and partitions are rediscovered.
    pub refresh_interval: Duration,
    /// How often acknowledged source positions are committed (bounds re-sent duplicates after a
    /// crash).
    pub commit_interval: Duration,
    /// Consumer-group session timeout: how long a crashed instance keeps its partitions before
    /// the group hands them to the others.
    pub session_timeout: Duration,
    /// How long a revoke or shutdown waits for in-flight batches to be acknowledged and the
    /// final positions committed; what is not acknowledged by then is re-sent by the next owner.
    pub drain_timeout: Duration,
    /// Static group membership (`group.instance.id`, KIP-345): a restarted instance with the
    /// same id gets its partitions back at once instead of after the session timeout. Unique per
    /// process.
    pub instance_id: Option<String>,
    /// The group protocol (`mirror.group_protocol`, Kafka's `group.protocol`): `consumer`
    /// (KIP-848, incremental: only moved partitions pause), `classic` (eager JoinGroup/SyncGroup)
    /// or `auto` (the default: consumer when the source's group coordinator runs it, Kafka 4.0+).
    pub group_protocol: GroupProtocol,
    /// The consumer protocol's server-side assignor (`mirror.group_remote_assignor`, Kafka's
    /// `group.remote.assignor`: `uniform` or `range`); `None` lets the broker choose.
    pub group_remote_assignor: Option<String>,
    /// A static member (`instance_id`) leaves the group on shutdown so its partitions move at
    /// once (a scale-down); default false: a restart gets them back without a rebalance.
    /// Dynamic members always leave.
    pub leave_group_on_shutdown: bool,
    /// Replication factor for created topics; -1 = the target broker's default. With
    /// `replication_factor_from_source` (`replication_factor = "source"`, the default) created
    /// mirror topics take the source topic's factor instead and this is -1 (Strait's own
    /// checkpoint topics then get the broker's default).
    pub replication_factor: i16,
    /// `replication_factor = "source"` (the default): a created topic gets the source topic's
    /// replication factor, capped by the target's broker count.
    pub replication_factor_from_source: bool,
    /// Create missing target topics (same partition count as the source).
    pub create_topics: bool,
    /// Copy topic configs (retention, cleanup policy...) to the target, at creation and then
    /// every `sync_topic_configs_interval`.
    pub sync_topic_configs: bool,
    /// How often the configs of mirrored topics are compared and changed ones copied again
    /// (MirrorMaker 2's `sync.topic.configs.interval.seconds`).
    pub sync_topic_configs_interval: Duration,
    /// Topic config keys never copied (MirrorMaker 2's `config.properties.exclude`).
    pub topic_configs_exclude: ConfigExclude,
    /// Source isolation level.
    pub isolation: Isolation,
    /// Target compression.
    pub compression: Compression,
    /// Reaction to a committed position that retention removed.
    pub on_offset_out_of_range: OffsetOutOfRange,
    /// Produce requests in flight per target partition (1 to 5, the idempotence window).
    pub max_in_flight: u8,
    /// Connections per target broker that carry Produce requests (1 to 8).
    pub produce_connections: u8,
    /// Largest batch made by merging small source batches that wait for the same target
    /// partition (0: never merge). Large source batches always pass through untouched. With
    /// `compression` set, the size after compression of re-compressed batches.
    pub batch_size: ByteSize,
    /// The partition assignors the group members offer, most preferred first (Kafka's
    /// `partition.assignment.strategy`). Default: roundrobin, then range.
    pub partition_assignment_strategy: Vec<Assignor>,
    /// Source consumer groups whose offsets are translated and written as MirrorMaker 2
    /// checkpoints on the target (`mirror.groups` / `mirror.groups_exclude`); `None` (the
    /// default, no `groups` key) writes no checkpoints.
    pub groups: Option<TopicSelection>,
    /// How often the selected groups' offsets are read, translated and checkpointed.
    pub checkpoint_interval: Duration,
    /// Commit the translated offsets of checkpointed groups to the same groups on the target
    /// while they have no active members there (`mirror.sync_group_offsets`).
    pub sync_group_offsets: bool,
    /// How often group offsets are synced (at the next checkpoint round after it elapsed).
    pub sync_group_offsets_interval: Duration,
    /// Copy the topic ACLs of mirrored topics to the target (`mirror.sync_topic_acls`,
    /// MirrorMaker 2's `sync.topic.acls.enabled`); see docs/acls.md.
    pub sync_topic_acls: bool,
    /// How often ACLs are synced and mirrors protected (`sync.topic.acls.interval.seconds`).
    pub sync_topic_acls_interval: Duration,
    /// DENY WRITE on mirrored target topics for every principal but the mirror's
    /// (`mirror.protect_mirrors`).
    pub protect_mirrors: bool,
    /// The principal the target brokers see for Strait (`mirror.target_principal`); `None`:
    /// derived from the target client settings as `strait check` prints it.
    pub target_principal: Option<String>,
    /// `mirror.exactly_once = true`: transactions on the target, positions stored in them
    /// (see docs/exactly-once.md); `None`: at-least-once (the default).
    pub exactly_once: Option<ExactlyOnce>,
}

/// Exactly-once settings (`mirror.exactly_once = true`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExactlyOnce {
    /// `mirror.transaction_interval`: how long a transaction stays open before it commits.
    pub transaction_interval: Duration,
    /// `mirror.transaction_max_bytes`: a transaction commits once this many bytes of batches
    /// were sent in it, even before `transaction_interval`.
    pub transaction_max_bytes: ByteSize,
    /// `mirror.transaction_timeout`: `transaction.timeout.ms` of the mirror's transactions.
    pub transaction_timeout: Duration,
    /// `mirror.position_refresh_interval`: how often an idle partition stores its position
    /// again, so the target broker's offset retention never drops it.
    pub position_refresh_interval: Duration,
}

/// The `[metrics]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsConfig {
    /// Address of the /metrics, /healthz and /readyz listener; `None` disables it.
    pub listen: Option<SocketAddr>,
    /// How often the end offsets of the assigned partitions are listed on the source for the lag
    /// metrics (they also follow every fetch).
    pub lag_interval: Duration,
    /// How long a partition may be behind without its acknowledged position moving before
    /// `/readyz` reports it (and the mirror) not ready.
    pub stall_timeout: Duration,
    /// Also serve MirrorMaker 2's metric names (as Strimzi's JMX exporter rules name them), for
    /// existing MirrorMaker 2 dashboards and alerts.
    pub mm2_compat: bool,
}

/// The `[tracing]` section.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TracingConfig {
    /// OTLP/HTTP endpoint, e.g. `http://127.0.0.1:4318`; `None` = no export.
    pub otlp_endpoint: Option<String>,
    /// What is traced.
    pub mode: TracingMode,
    /// Fraction of batches (or records) traced when no upstream sampling decision exists, 0 to 1.
    pub sample_ratio: f64,
    /// Cap on per-record spans per second (mode `records`).
    pub records_per_second: u32,
    /// OpenTelemetry `service.name`.
    pub service_name: String,
}

impl TracingConfig {
    /// True when spans are exported.
    pub fn exporting(&self) -> bool {
        self.otlp_endpoint.is_some() && self.mode != TracingMode::Off
    }
}

/// The `[log]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogConfig {
    /// Output format.
    pub format: LogFormat,
    /// `tracing_subscriber::EnvFilter` directives (`info`, `strait=debug,info`); `RUST_LOG` wins.
    pub level: String,
}

/// The `[runtime]` section: the process's async runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Worker threads of the runtime; `None`: one per CPU the process may use (tokio's default,
    /// which follows the cgroup's CPU quota). One worker keeps a partition's fetch, plan and
    /// produce steps on one thread: less CPU per GB where the mirror shares its cores
    /// (benches/README.md, issue 33 item 1).
    pub worker_threads: Option<std::num::NonZeroUsize>,
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Where records are read.
    pub source: Cluster,
    /// Where records are written.
    pub target: Cluster,
    /// What and how to mirror.
    pub mirror: Mirror,
    /// Metrics and health endpoints.
    pub metrics: MetricsConfig,
    /// OpenTelemetry tracing.
    pub tracing: TracingConfig,
    /// Logging.
    pub log: LogConfig,
    /// The async runtime.
    pub runtime: RuntimeConfig,
}

/// A configuration plus the warnings produced while building it (ignored MirrorMaker keys...).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Human-readable warnings, one per line, to log at startup.
    pub warnings: Vec<String>,
    /// Several flows in one process (`[clusters.*]` + `[[flows]]`, or MirrorMaker 2 with
    /// several enabled flows): every flow, `config` being the first. Empty for one flow.
    pub flows: Vec<Config>,
}

impl Loaded {
    /// One flow.
    pub fn single(config: Config, warnings: Vec<String>) -> Loaded {
        Loaded {
            config,
            warnings,
            flows: Vec::new(),
        }
    }

    /// The flows to run: `flows`, or `config` alone.
    pub fn all_flows(&self) -> Vec<&Config> {
        match self.flows.is_empty() {
            true => vec![&self.config],
            false => self.flows.iter().collect(),
        }
    }
}

/// MirrorMaker 2's heartbeats topic (`heartbeats.topic` is not configurable in its properties).
pub const HEARTBEATS_TOPIC: &str = "heartbeats";

/// Defaults.
pub mod defaults {
    use std::time::Duration;

    use super::ByteSize;

    /// `mirror.group_id`.
    pub const GROUP_ID: &str = "strait";
    /// `mirror.memory_budget`: 256 MiB.
    pub const MEMORY_BUDGET: ByteSize = ByteSize(256 << 20);
    /// `mirror.max_decompressed_batch_bytes`: 64 MiB.
    pub const MAX_DECOMPRESSED_BATCH_BYTES: ByteSize = ByteSize(64 << 20);
    /// `mirror.refresh_interval`.
    pub const REFRESH_INTERVAL: Duration = Duration::from_secs(10);
    /// `mirror.commit_interval`.
    pub const COMMIT_INTERVAL: Duration = Duration::from_secs(5);
    /// `mirror.session_timeout`: the Java consumer's default.
    pub const SESSION_TIMEOUT: Duration = Duration::from_secs(45);
    /// `mirror.drain_timeout`: well under the group's rebalance timeout.
    pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
    /// `mirror.transaction_interval`: records become visible to `read_committed` consumers on
    /// the target within about this long, at a few transaction round trips per interval.
    pub const TRANSACTION_INTERVAL: Duration = Duration::from_millis(300);
    /// `mirror.transaction_max_bytes`: rarely reached at the default interval (16 MiB in 300 ms
    /// is 53 MiB/s into one partition); bounds what an abort throws away at higher rates.
    pub const TRANSACTION_MAX_BYTES: ByteSize = ByteSize(16 << 20);
    /// `mirror.transaction_timeout`: the Java producer's `transaction.timeout.ms`.
    pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
    /// `mirror.position_refresh_interval`: far inside Kafka's default
    /// `offsets.retention.minutes` (7 days).
    pub const POSITION_REFRESH_INTERVAL: Duration = Duration::from_secs(3600);
    /// `mirror.max_in_flight`: the idempotent producer's dedup window.
    pub const MAX_IN_FLIGHT: u8 = 5;
    /// `mirror.produce_connections`: one, as a Java producer has.
    pub const PRODUCE_CONNECTIONS: u8 = 1;
    /// `mirror.batch_size`: 256 KiB, sixteen times Kafka's producer default, so that over a
    /// 100 ms link five batches per round trip still carry 12 MB/s per partition.
    pub const BATCH_SIZE: ByteSize = ByteSize(256 << 10);
    /// `mirror.partition_assignment_strategy`: a balanced assignor first; range second, so a
    /// group mixing this version with older Strait processes (range first) still agrees on one.
    pub const PARTITION_ASSIGNMENT_STRATEGY: &[super::Assignor] =
        &[super::Assignor::RoundRobin, super::Assignor::Range];
    /// `mirror.checkpoint_interval` (MirrorMaker 2's `emit.checkpoints.interval.seconds` is 60).
    pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
    /// `mirror.sync_group_offsets_interval` (MirrorMaker 2's
    /// `sync.group.offsets.interval.seconds` is 60).
    pub const SYNC_GROUP_OFFSETS_INTERVAL: Duration = Duration::from_secs(5);
    /// `mirror.sync_topic_acls_interval` (MirrorMaker 2's `sync.topic.acls.interval.seconds`
    /// is 600 too).
    pub const SYNC_TOPIC_ACLS_INTERVAL: Duration = Duration::from_secs(600);
    /// `mirror.sync_topic_configs_interval` (MirrorMaker 2's
    /// `sync.topic.configs.interval.seconds` is 600 too).
    pub const SYNC_TOPIC_CONFIGS_INTERVAL: Duration = Duration::from_secs(600);
    /// `metrics.listen`.
    pub const METRICS_LISTEN: &str = "127.0.0.1:9464";
    /// `metrics.lag_interval`.
    pub const LAG_INTERVAL: Duration = Duration::from_secs(5);
    /// `metrics.stall_timeout`.
    pub const STALL_TIMEOUT: Duration = Duration::from_secs(60);
    /// `tracing.service_name`.
    pub const SERVICE_NAME: &str = "strait";
    /// `tracing.records_per_second`.
    pub const RECORDS_PER_SECOND: u32 = 100;
    /// `source.alias`.
    pub const SOURCE_ALIAS: &str = "source";
    /// `target.alias`.
    pub const TARGET_ALIAS: &str = "target";
}

impl Config {
    /// Reads and validates a strait.toml file, then applies the environment.
    pub fn load(path: &Path, env: &Environment) -> Result<Loaded> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml_str(&text, path, env)
    }

    /// Parses and validates strait.toml text (`path` is only used in messages).
    pub fn from_toml_str(text: &str, path: &Path, env: &Environment) -> Result<Loaded> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| Error::Toml {
            path: path.to_path_buf(),
            message: toml_error_message(text, &e),
        })?;
        if flows::is_flows_form(&table) {
            return flows::from_table(table, path, env);
        }
        let raw = raw_from_toml(table)?;
        Ok(Loaded::single(Config::from_raw(raw, env)?, Vec::new()))
    }

    /// Applies the environment to `raw` and validates everything.
    pub(crate) fn from_raw(mut raw: RawConfig, env: &Environment) -> Result<Config> {
        env::apply(&mut raw, env)?;
        let source = cluster(&raw.source, "source", defaults::SOURCE_ALIAS, env)?;
        let target = cluster(&raw.target, "target", defaults::TARGET_ALIAS, env)?;
        let mirror = mirror(&raw, &source, &target)?;
        let metrics = MetricsConfig {
            listen: match raw.get(Section::Metrics, "listen") {
                None => Some(
                    defaults::METRICS_LISTEN
                        .parse()
                        .map_err(|_| Error::Runtime("bad built-in metrics address".into()))?,
                ),
                Some(e) => {
                    let f = Field::new("metrics", "listen", e);
                    let s = f.string()?;
                    if s.trim().is_empty() {
                        None
                    } else {
                        Some(s.trim().parse().map_err(|_| {
                            f.invalid("an IP address and port such as \"0.0.0.0:9464\", or \"\" to disable")
                        })?)
                    }
                }
            },
            lag_interval: get(&raw, Section::Metrics, "lag_interval", |f| {
                let d = f.duration()?;
                if d < Duration::from_millis(100) || d > Duration::from_secs(600) {
                    return Err(f.invalid("a duration from 100ms to 10m, e.g. \"5s\""));
                }
                Ok(d)
            })?
            .unwrap_or(defaults::LAG_INTERVAL),
            mm2_compat: get(&raw, Section::Metrics, "mm2_compat", |f| f.boolean())?
                .unwrap_or(false),
            stall_timeout: get(&raw, Section::Metrics, "stall_timeout", |f| {
                let d = f.duration()?;
                if d < Duration::from_secs(1) {
                    return Err(f.invalid("a duration of at least 1s, e.g. \"60s\""));
                }
                Ok(d)
            })?
            .unwrap_or(defaults::STALL_TIMEOUT),
        };
        let tracing = tracing_section(&raw)?;
        let log = LogConfig {
            format: get(&raw, Section::Log, "format", |f| f.choice(LOG_FORMAT))?
                .unwrap_or(LogFormat::Text),
            level: match raw.get(Section::Log, "level") {
                None => "info".to_string(),
                Some(e) => {
                    let f = Field::new("log", "level", e);
                    let level = f.non_empty_string()?;
                    tracing_subscriber::EnvFilter::try_new(&level).map_err(|err| {
                        f.invalid(format!(
                            "a log filter such as \"info\" or \"strait=debug,info\" ({err})"
                        ))
                    })?;
                    level
                }
            },
        };
        let runtime = RuntimeConfig {
            worker_threads: get(&raw, Section::Runtime, "worker_threads", |f| {
                let n = f.integer("an integer from 1 to 256")?;
                usize::try_from(n)
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .and_then(std::num::NonZeroUsize::new)
                    .ok_or_else(|| {
                        f.invalid("an integer from 1 to 256 (leave it out for one per CPU)")
                    })
            })?,
        };
        Ok(Config {
            source,
            target,
            mirror,
            metrics,
            tracing,
            log,
            runtime,
        })
    }

    /// True when `topic` on the source is mirrored: it passes the include/exclude patterns (or
    /// is a heartbeats topic with `mirror.replicate_heartbeats`), is not internal, and (with
    /// prefixes) did not originate on the target cluster: MirrorMaker 2's
    /// `MirrorSourceConnector.shouldReplicateTopic`.
    pub fn selects(&self, topic: &str) -> bool {
        let m = &self.mirror;
        let heartbeats = m.replicate_heartbeats
            && !topics::is_internal_topic(topic)
            && m.rename.original_topic(topic) == HEARTBEATS_TOPIC;
        (m.topics.matches(topic) || heartbeats) && !m.rename.is_cycle(topic, &self.target.alias)
    }

    /// The target topic for a source topic.
    pub fn target_topic(&self, source_topic: &str) -> String {
        self.mirror
            .rename
            .target_topic(&self.source.alias, source_topic)
    }

    /// The effective configuration as strait.toml text. With `redact`, secret values
    /// (passwords, inline keys, JAAS configs, tokens) are replaced by `"<redacted>"`.
    pub fn to_toml(&self, redact: bool) -> String {
        let mut doc = toml::Table::new();
        doc.insert("source".into(), cluster_table(&self.source, redact).into());
        doc.insert("target".into(), cluster_table(&self.target, redact).into());
        doc.insert("mirror".into(), mirror_table(&self.mirror).into());
        doc.insert("metrics".into(), metrics_table(&self.metrics).into());
        doc.insert("tracing".into(), tracing_table(&self.tracing).into());
        doc.insert("log".into(), log_table(&self.log).into());
        if let Some(n) = self.runtime.worker_threads {
            let mut runtime = toml::Table::new();
            runtime.insert(
                "worker_threads".into(),
                i64::try_from(n.get()).unwrap_or(i64::MAX).into(),
            );
            doc.insert("runtime".into(), runtime.into());
        }
        let mut out = String::new();
        if self.tracing.otlp_endpoint.is_none() {
            out.push_str("# tracing.otlp_endpoint is not set: no spans are exported\n");
        }
        out.push_str(&toml::to_string(&doc).unwrap_or_else(|e| format!("# cannot render: {e}\n")));
        out
    }
}

// The sections of `Config::to_toml`, each as it is written back.

fn cluster_table(c: &Cluster, redact: bool) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("alias".into(), c.alias.clone().into());
    for (k, v) in &c.properties {
        let reference = c.references.iter().find(|(r, _)| r == k);
        let v = if let (true, Some((_, written))) = (redact, reference) {
            written.clone()
        } else if redact && is_secret_property(k) {
            REDACTED.to_string()
        } else {
            v.clone()
        };
        t.insert(k.clone(), v.into());
    }
    t
}

fn strings(v: &[String]) -> toml::Value {
    toml::Value::Array(v.iter().map(|s| s.clone().into()).collect())
}

/// `[mirror]`: every setting, then the optional features' settings when they are on.
fn mirror_table(m: &Mirror) -> toml::Table {
    let mut mirror = mirror_settings(m);
    mirror_features(m, &mut mirror);
    mirror.insert(
        "partition_assignment_strategy".into(),
        toml::Value::Array(
            m.partition_assignment_strategy
                .iter()
                .map(|a| a.as_str().into())
                .collect(),
        ),
    );
    mirror
}

/// The `[mirror]` settings written whatever is on.
fn mirror_settings(m: &Mirror) -> toml::Table {
    let mut mirror = toml::Table::new();
    mirror.insert("topics".into(), strings(m.topics.include()));
    mirror.insert("topics_exclude".into(), strings(m.topics.exclude()));
    mirror.insert("rename".into(), m.rename.as_str().into());
    if m.replicate_heartbeats {
        mirror.insert("replicate_heartbeats".into(), true.into());
    }
    if let Rename::Prefix { separator } = &m.rename {
        mirror.insert("separator".into(), separator.clone().into());
    }
    mirror.insert("start".into(), m.start.as_str().into());
    mirror.insert("group_id".into(), m.group_id.clone().into());
    if let Some(id) = &m.instance_id {
        mirror.insert("instance_id".into(), id.clone().into());
    }
    mirror.insert("group_protocol".into(), m.group_protocol.name().into());
    if let Some(a) = &m.group_remote_assignor {
        mirror.insert("group_remote_assignor".into(), a.clone().into());
    }
    if m.leave_group_on_shutdown {
        mirror.insert("leave_group_on_shutdown".into(), true.into());
    }
    mirror.insert("memory_budget".into(), m.memory_budget.to_string().into());
    mirror.insert(
        "max_decompressed_batch_bytes".into(),
        m.max_decompressed_batch_bytes.to_string().into(),
    );
    mirror.insert(
        "refresh_interval".into(),
        format_duration(m.refresh_interval).into(),
    );
    mirror.insert(
        "commit_interval".into(),
        format_duration(m.commit_interval).into(),
    );
    mirror.insert(
        "session_timeout".into(),
        format_duration(m.session_timeout).into(),
    );
    mirror.insert(
        "drain_timeout".into(),
        format_duration(m.drain_timeout).into(),
    );
    mirror.insert(
        "replication_factor".into(),
        match m.replication_factor_from_source {
            true => "source".into(),
            false => i64::from(m.replication_factor).into(),
        },
    );
    mirror.insert("create_topics".into(), m.create_topics.into());
    mirror.insert("sync_topic_configs".into(), m.sync_topic_configs.into());
    mirror.insert(
        "sync_topic_configs_interval".into(),
        format_duration(m.sync_topic_configs_interval).into(),
    );
    mirror.insert(
        "topic_configs_exclude".into(),
        strings(m.topic_configs_exclude.patterns()),
    );
    mirror.insert("isolation".into(), m.isolation.as_str().into());
    mirror.insert("compression".into(), m.compression.as_str().into());
    mirror.insert(
        "on_offset_out_of_range".into(),
        m.on_offset_out_of_range.as_str().into(),
    );
    mirror.insert("max_in_flight".into(), i64::from(m.max_in_flight).into());
    mirror.insert(
        "produce_connections".into(),
        i64::from(m.produce_connections).into(),
    );
    mirror.insert("batch_size".into(), m.batch_size.to_string().into());
    mirror
}

/// The settings of ACL sync, exactly-once and checkpoints, when they are on.
fn mirror_features(m: &Mirror, mirror: &mut toml::Table) {
    if m.sync_topic_acls || m.protect_mirrors {
        mirror.insert("sync_topic_acls".into(), m.sync_topic_acls.into());
        mirror.insert(
            "sync_topic_acls_interval".into(),
            format_duration(m.sync_topic_acls_interval).into(),
        );
        mirror.insert("protect_mirrors".into(), m.protect_mirrors.into());
        if let Some(p) = &m.target_principal {
            mirror.insert("target_principal".into(), p.clone().into());
        }
    }
    if let Some(eos) = &m.exactly_once {
        mirror.insert("exactly_once".into(), true.into());
        mirror.insert(
            "transaction_interval".into(),
            format_duration(eos.transaction_interval).into(),
        );
        mirror.insert(
            "transaction_max_bytes".into(),
            eos.transaction_max_bytes.to_string().into(),
        );
        mirror.insert(
            "transaction_timeout".into(),
            format_duration(eos.transaction_timeout).into(),
        );
        mirror.insert(
            "position_refresh_interval".into(),
            format_duration(eos.position_refresh_interval).into(),
        );
    }
    if let Some(groups) = &m.groups {
        mirror.insert("groups".into(), strings(groups.include()));
        mirror.insert("groups_exclude".into(), strings(groups.exclude()));
        mirror.insert(
            "checkpoint_interval".into(),
            format_duration(m.checkpoint_interval).into(),
        );
        mirror.insert("sync_group_offsets".into(), m.sync_group_offsets.into());
        mirror.insert(
            "sync_group_offsets_interval".into(),
            format_duration(m.sync_group_offsets_interval).into(),
        );
    }
}

fn metrics_table(m: &MetricsConfig) -> toml::Table {
    let mut metrics = toml::Table::new();
    metrics.insert(
        "listen".into(),
        m.listen.map(|a| a.to_string()).unwrap_or_default().into(),
    );
    metrics.insert(
        "lag_interval".into(),
        format_duration(m.lag_interval).into(),
    );
    if m.mm2_compat {
        metrics.insert("mm2_compat".into(), true.into());
    }
    metrics.insert(
        "stall_timeout".into(),
        format_duration(m.stall_timeout).into(),
    );
    metrics
}

fn tracing_table(t: &TracingConfig) -> toml::Table {
    let mut tracing = toml::Table::new();
    if let Some(ep) = &t.otlp_endpoint {
        tracing.insert("otlp_endpoint".into(), ep.clone().into());
    }
    tracing.insert("mode".into(), t.mode.as_str().into());
    tracing.insert("sample_ratio".into(), t.sample_ratio.into());
    tracing.insert(
        "records_per_second".into(),
        i64::from(t.records_per_second).into(),
    );
    tracing.insert("service_name".into(), t.service_name.clone().into());
    tracing
}

fn log_table(l: &LogConfig) -> toml::Table {
    let mut log = toml::Table::new();
    log.insert("format".into(), l.format.as_str().into());
    log.insert("level".into(), l.level.clone().into());
    log
}

/// A TOML syntax error as "line L, column C: what". The parser's own Display quotes the
/// offending source line, which can be a password or a key (`"sasl.password" = "...`), so only
/// the position and the parser's message are kept.
fn toml_error_message(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what.to_string(),
    }
}

/// What a redacted value is printed as.
pub const REDACTED: &str = "<redacted>";

/// True for client properties whose values are secrets (passwords, inline private keys, JAAS
/// configs with credentials, tokens).
pub fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", "credential"]
        .iter()
        .any(|w| k.contains(w))
        || k.ends_with(".key")
        || k == "ssl.key.pem"
}

fn get<T>(
    raw: &RawConfig,
    section: Section,
    key: &str,
    read: impl FnOnce(&Field<'_>) -> Result<T>,
) -> Result<Option<T>> {
    raw.get(section, key)
        .map(|e| read(&Field::new(section.name(), key, e)))
        .transpose()
}

fn cluster(
    raw: &RawCluster,
    section: &str,
    default_alias: &str,
    env: &Environment,
) -> Result<Cluster> {
    let (raw, references) = &resolve_references(raw, section, env)?;
    let alias = match &raw.alias {
        None => default_alias.to_string(),
        Some(e) => {
            let f = Field::new(section, "alias", e);
            let alias = f.non_empty_string()?;
            if !alias
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(f.invalid(
                    "a cluster alias made of letters, digits, '.', '_' and '-' (it can prefix topic names)",
                ));
            }
            alias
        }
    };
    let servers = raw.property("bootstrap.servers").unwrap_or("");
    if servers.trim().is_empty() {
        let upper = section.to_ascii_uppercase();
        return Err(Error::Missing {
            key: format!("{section}.bootstrap.servers"),
            hint: format!(
                "set \"bootstrap.servers\" = \"host:port,...\" in [{section}] or STRAIT_{upper}_BOOTSTRAP_SERVERS"
            ),
        });
    }
    validate_client_properties(raw, section)?;
    Ok(Cluster {
        alias,
        properties: raw
            .properties
            .iter()
            .map(|(k, v, _)| (k.clone(), v.clone()))
            .collect(),
        references: references.clone(),
    })
}

/// The cluster with its `${provider:...}` references replaced ([`providers`]), and the keys that
/// had them with their values as written.
fn resolve_references(
    raw: &RawCluster,
    section: &str,
    env: &Environment,
) -> Result<(RawCluster, Vec<(String, String)>)> {
    let mut resolved = raw.clone();
    let mut references = Vec::new();
    for (key, value, origin) in &mut resolved.properties {
        if let Some(v) = raw
            .providers
            .resolve(value, env)
            .map_err(|source| Error::Reference {
                key: origin.describe(&format!("{section}.{key}")),
                source: Box::new(source),
            })?
        {
            references.push((key.clone(), std::mem::replace(value, v)));
        }
    }
    Ok((resolved, references))
}

/// Runs the properties through `strait_wire::ClientConfig` (no I/O: files are read when the
/// mirror connects) so that unknown keys, bad values and conflicts are configuration errors.
fn validate_client_properties(raw: &RawCluster, section: &str) -> Result<()> {
    let props = raw
        .properties
        .iter()
        .map(|(k, v, _)| (k.as_str(), v.as_str()));
    match strait_wire::ClientConfig::from_properties(props) {
        Ok(_) => Ok(()),
        Err(strait_wire::Error::Config { key, message }) => {
            let full = format!("{section}.{key}");
            let key = match raw.properties.iter().find(|(k, _, _)| *k == key) {
                Some((_, _, origin)) => origin.describe(&full),
                None => full,
            };
            Err(Error::ClientProperty { key, message })
        }
        Err(other) => Err(Error::ClientProperty {
            key: format!("[{section}]"),
            message: other.to_string(),
        }),
    }
}

/// `mirror.exactly_once` and its settings; `isolation` is `mirror.isolation` as parsed.
fn exactly_once(
    raw: &RawConfig,
    isolation: Isolation,
    described: &dyn Fn(&str) -> String,
) -> Result<Option<ExactlyOnce>> {
    let s = Section::Mirror;
    if get(raw, s, "exactly_once", |f| f.boolean())? != Some(true) {
        return Ok(None);
    }
    if isolation != Isolation::ReadCommitted {
        return Err(Error::Invalid {
            key: described("isolation"),
            expected: "read_committed with mirror.exactly_once = true (a mirror that copies \
                       aborted source transactions cannot be exactly-once)"
                .into(),
            got: "read_uncommitted".into(),
        });
    }
    let transaction_interval = get(raw, s, "transaction_interval", |f| {
        let d = f.duration()?;
        if d < Duration::from_millis(10) {
            return Err(f.invalid("a duration of at least 10ms, e.g. \"300ms\""));
        }
        Ok(d)
    })?
    .unwrap_or(defaults::TRANSACTION_INTERVAL);
    let transaction_max_bytes = get(raw, s, "transaction_max_bytes", |f| {
        let b = f.byte_size()?;
        if b.0 < (64 << 10) {
            return Err(f.invalid("a size of at least 64KiB, e.g. \"16MiB\""));
        }
        Ok(b)
    })?
    .unwrap_or(defaults::TRANSACTION_MAX_BYTES);
    let transaction_timeout = get(raw, s, "transaction_timeout", |f| {
        let d = f.duration()?;
        if d < Duration::from_secs(1) || d > Duration::from_secs(900) {
            return Err(f.invalid(
                "a duration from 1s to 15m (the broker's transaction.max.timeout.ms), e.g. \"60s\"",
            ));
        }
        Ok(d)
    })?
    .unwrap_or(defaults::TRANSACTION_TIMEOUT);
    let position_refresh_interval = get(raw, s, "position_refresh_interval", |f| {
        let d = f.duration()?;
        if d < Duration::from_secs(1) {
            return Err(f.invalid(
                "a duration of at least 1s, well under the target's offsets.retention.minutes, \
                 e.g. \"1h\"",
            ));
        }
        Ok(d)
    })?
    .unwrap_or(defaults::POSITION_REFRESH_INTERVAL);
    if transaction_interval * 2 > transaction_timeout {
        return Err(Error::Invalid {
            key: described("transaction_interval"),
            expected: "at most half of mirror.transaction_timeout (a transaction must commit \
                       well before the coordinator times it out)"
                .into(),
            got: format!(
                "{} with a timeout of {}",
                format_duration(transaction_interval),
                format_duration(transaction_timeout)
            ),
        });
    }
    Ok(Some(ExactlyOnce {
        transaction_interval,
        transaction_max_bytes,
        transaction_timeout,
        position_refresh_interval,
    }))
}

fn mirror(raw: &RawConfig, source: &Cluster, target: &Cluster) -> Result<Mirror> {
    let s = Section::Mirror;
    let described = |key: &str| {
        raw.get(s, key)
            .map(|e| e.origin.describe(&format!("mirror.{key}")))
            .unwrap_or_else(|| format!("mirror.{key}"))
    };
    let interval = |key: &str, min: Duration, expected: &'static str, default: Duration| {
        at_least(raw, key, min, expected).map(|d| d.unwrap_or(default))
    };
    let flag = |key: &str, default: bool| -> Result<bool> {
        Ok(get(raw, s, key, |f| f.boolean())?.unwrap_or(default))
    };
    let (topics, rename) = topic_naming(raw, source, target, &described)?;
    let Membership {
        group_id,
        instance_id,
        group_protocol,
        group_remote_assignor,
        leave_group_on_shutdown,
        session_timeout,
        partition_assignment_strategy,
    } = membership(raw)?;
    let TopicManagement {
        create_topics,
        replication_factor,
        sync_topic_configs,
        sync_topic_configs_interval,
        topic_configs_exclude,
        sync_topic_acls,
        sync_topic_acls_interval,
        protect_mirrors,
        target_principal,
    } = topic_management(raw, &described)?;
    let Producing {
        max_in_flight,
        produce_connections,
        batch_size,
        compression,
    } = producing(raw)?;
    let isolation =
        get(raw, s, "isolation", |f| f.choice(ISOLATION))?.unwrap_or(Isolation::ReadCommitted);
    Ok(Mirror {
        exactly_once: exactly_once(raw, isolation, &described)?,
        groups: groups(raw, &described)?,
        checkpoint_interval: interval(
            "checkpoint_interval",
            MS_100,
            AT_LEAST_100MS_5S,
            defaults::CHECKPOINT_INTERVAL,
        )?,
        sync_group_offsets: flag("sync_group_offsets", false)?,
        sync_group_offsets_interval: interval(
            "sync_group_offsets_interval",
            MS_100,
            AT_LEAST_100MS_5S,
            defaults::SYNC_GROUP_OFFSETS_INTERVAL,
        )?,
        sync_topic_acls,
        sync_topic_acls_interval,
        protect_mirrors,
        target_principal,
        topics,
        rename,
        start: get(raw, s, "start", |f| f.choice(START))?.unwrap_or(StartPosition::Earliest),
        group_id,
        instance_id,
        group_protocol,
        group_remote_assignor,
        leave_group_on_shutdown,
        memory_budget: at_least_1mib(raw, "memory_budget")?.unwrap_or(defaults::MEMORY_BUDGET),
        max_decompressed_batch_bytes: at_least_1mib(raw, "max_decompressed_batch_bytes")?
            .unwrap_or(defaults::MAX_DECOMPRESSED_BATCH_BYTES),
        refresh_interval: interval(
            "refresh_interval",
            MS_100,
            "a duration of at least 100ms, e.g. \"10s\"",
            defaults::REFRESH_INTERVAL,
        )?,
        commit_interval: interval(
            "commit_interval",
            Duration::from_millis(10),
            "a duration of at least 10ms, e.g. \"5s\"",
            defaults::COMMIT_INTERVAL,
        )?,
        session_timeout,
        drain_timeout: get(raw, s, "drain_timeout", drain_timeout)?
            .unwrap_or(defaults::DRAIN_TIMEOUT),
        replication_factor: replication_factor.unwrap_or(-1),
        replication_factor_from_source: replication_factor.is_none(),
        create_topics,
        sync_topic_configs,
        sync_topic_configs_interval,
        topic_configs_exclude,
        isolation,
        compression,
        on_offset_out_of_range: get(raw, s, "on_offset_out_of_range", |f| f.choice(OUT_OF_RANGE))?
            .unwrap_or(OffsetOutOfRange::Fail),
        max_in_flight,
        produce_connections,
        batch_size,
        partition_assignment_strategy,
        replicate_heartbeats: flag("replicate_heartbeats", false)?,
    })
}

const AT_LEAST_100MS_5S: &str = "a duration of at least 100ms, e.g. \"5s\"";
const AT_LEAST_100MS_10M: &str = "a duration of at least 100ms, e.g. \"10m\"";

/// The `mirror.*` keys of how records are written to the target.
struct Producing {
    max_in_flight: u8,
    produce_connections: u8,
    batch_size: ByteSize,
    compression: Compression,
}

fn producing(raw: &RawConfig) -> Result<Producing> {
    let s = Section::Mirror;
    Ok(Producing {
        max_in_flight: get(raw, s, "max_in_flight", |f| {
            small_count(
                f,
                5,
                "an integer from 1 to 5 (the idempotent producer's limit)",
            )
        })?
        .unwrap_or(defaults::MAX_IN_FLIGHT),
        produce_connections: get(raw, s, "produce_connections", |f| {
            small_count(f, 8, "an integer from 1 to 8")
        })?
        .unwrap_or(defaults::PRODUCE_CONNECTIONS),
        batch_size: get(raw, s, "batch_size", batch_size)?.unwrap_or(defaults::BATCH_SIZE),
        compression: get(raw, s, "compression", |f| f.choice(COMPRESSION))?
            .unwrap_or(Compression::Keep),
    })
}

/// The `mirror.*` keys of the mirror's consumer group membership.
struct Membership {
    group_id: String,
    instance_id: Option<String>,
    group_protocol: GroupProtocol,
    group_remote_assignor: Option<String>,
    leave_group_on_shutdown: bool,
    session_timeout: Duration,
    partition_assignment_strategy: Vec<Assignor>,
}

fn membership(raw: &RawConfig) -> Result<Membership> {
    let s = Section::Mirror;
    Ok(Membership {
        group_id: get(raw, s, "group_id", |f| f.non_empty_string())?
            .unwrap_or_else(|| defaults::GROUP_ID.to_string()),
        instance_id: get(raw, s, "instance_id", |f| f.non_empty_string())?,
        group_protocol: get(raw, s, "group_protocol", |f| f.choice(GROUP_PROTOCOL))?
            .unwrap_or(GroupProtocol::Auto),
        group_remote_assignor: get(raw, s, "group_remote_assignor", |f| f.non_empty_string())?,
        leave_group_on_shutdown: get(raw, s, "leave_group_on_shutdown", |f| f.boolean())?
            .unwrap_or(false),
        session_timeout: at_least(
            raw,
            "session_timeout",
            Duration::from_secs(1),
            "a duration of at least 1s (brokers accept 6s to 30m by default), e.g. \"45s\"",
        )?
        .unwrap_or(defaults::SESSION_TIMEOUT),
        partition_assignment_strategy: match raw.get(s, "partition_assignment_strategy") {
            None => defaults::PARTITION_ASSIGNMENT_STRATEGY.to_vec(),
            Some(e) => assignors(&Field::new("mirror", "partition_assignment_strategy", e))?,
        },
    })
}

/// The `mirror.*` keys of what the mirror creates and keeps in step on the target besides
/// records: topics, their configs, their ACLs.
struct TopicManagement {
    create_topics: bool,
    /// None: "source" (the default), the source topic's factor.
    replication_factor: Option<i16>,
    sync_topic_configs: bool,
    sync_topic_configs_interval: Duration,
    topic_configs_exclude: ConfigExclude,
    sync_topic_acls: bool,
    sync_topic_acls_interval: Duration,
    protect_mirrors: bool,
    target_principal: Option<String>,
}

fn topic_management(
    raw: &RawConfig,
    described: &dyn Fn(&str) -> String,
) -> Result<TopicManagement> {
    let s = Section::Mirror;
    let flag = |key: &str, default: bool| -> Result<bool> {
        Ok(get(raw, s, key, |f| f.boolean())?.unwrap_or(default))
    };
    let at_least_100ms = |key: &str, default: Duration| {
        at_least(raw, key, MS_100, AT_LEAST_100MS_10M).map(|d| d.unwrap_or(default))
    };
    Ok(TopicManagement {
        create_topics: flag("create_topics", true)?,
        replication_factor: get(raw, s, "replication_factor", replication_factor)?.flatten(),
        sync_topic_configs: flag("sync_topic_configs", true)?,
        sync_topic_configs_interval: at_least_100ms(
            "sync_topic_configs_interval",
            defaults::SYNC_TOPIC_CONFIGS_INTERVAL,
        )?,
        topic_configs_exclude: ConfigExclude::new(
            get(raw, s, "topic_configs_exclude", |f| f.list())?.unwrap_or_else(|| {
                DEFAULT_CONFIGS_EXCLUDE
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }),
            &described("topic_configs_exclude"),
        )?,
        sync_topic_acls: flag("sync_topic_acls", false)?,
        sync_topic_acls_interval: at_least_100ms(
            "sync_topic_acls_interval",
            defaults::SYNC_TOPIC_ACLS_INTERVAL,
        )?,
        protect_mirrors: flag("protect_mirrors", false)?,
        target_principal: get(raw, s, "target_principal", |f| f.non_empty_string())?,
    })
}

/// The shortest interval most `mirror.*` durations accept.
const MS_100: Duration = Duration::from_millis(100);

/// `mirror.groups` / `mirror.groups_exclude`. Opt-in: checkpointing reads every matching group's
/// offsets on the source (Describe on the groups) and writes to the target. An empty list is the
/// same as no key.
fn groups(raw: &RawConfig, described: &dyn Fn(&str) -> String) -> Result<Option<TopicSelection>> {
    let s = Section::Mirror;
    Ok(match get(raw, s, "groups", |f| f.list())? {
        Some(include) if !include.is_empty() => Some(TopicSelection::new(
            include,
            &described("groups"),
            get(raw, s, "groups_exclude", |f| f.list())?.unwrap_or_default(),
            &described("groups_exclude"),
        )?),
        _ => None,
    })
}

/// `mirror.drain_timeout`: 100 ms to 10 min.
fn drain_timeout(f: &Field<'_>) -> Result<Duration> {
    let d = f.duration()?;
    if d < MS_100 || d > Duration::from_secs(600) {
        return Err(f.invalid("a duration from 100ms to 10m, e.g. \"10s\""));
    }
    Ok(d)
}

/// `mirror.batch_size`: 0 (never merge) to 64 MiB.
fn batch_size(f: &Field<'_>) -> Result<ByteSize> {
    let b = f.byte_size()?;
    if b.0 > (64 << 20) {
        return Err(f.invalid("a size from 0 (never merge) to 64MiB, e.g. \"256KiB\""));
    }
    Ok(b)
}

/// `mirror.<key>` as a duration of at least `min` (`expected` says so when it is shorter).
fn at_least(
    raw: &RawConfig,
    key: &str,
    min: Duration,
    expected: &'static str,
) -> Result<Option<Duration>> {
    get(raw, Section::Mirror, key, |f| {
        let d = f.duration()?;
        if d < min {
            return Err(f.invalid(expected));
        }
        Ok(d)
    })
}

/// `mirror.<key>` as a size of at least 1 MiB.
fn at_least_1mib(raw: &RawConfig, key: &str) -> Result<Option<ByteSize>> {
    get(raw, Section::Mirror, key, |f| {
        let b = f.byte_size()?;
        if b.0 < (1 << 20) {
            return Err(f.invalid("a size of at least 1MiB"));
        }
        Ok(b)
    })
}

/// An integer from 1 to `max` (`expected` says so otherwise).
fn small_count(f: &Field<'_>, max: u8, expected: &str) -> Result<u8> {
    let n = f.integer(&format!("an integer from 1 to {max}"))?;
    u8::try_from(n)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| f.invalid(expected))
}

/// `mirror.replication_factor`: `None` for "source" (the source topic's factor).
fn replication_factor(f: &Field<'_>) -> Result<Option<i16>> {
    const EXPECTED: &str = "\"source\" (the source topic's factor, capped by the target's \
                            broker count), -1 (the target broker's default) or a positive integer";
    if f.string()
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("source"))
    {
        return Ok(None);
    }
    let n = f.integer(EXPECTED)?;
    i16::try_from(n)
        .ok()
        .filter(|n| *n == -1 || *n > 0)
        .map(Some)
        .ok_or_else(|| f.invalid(EXPECTED))
}

/// Which topics are mirrored (`mirror.topics`, `mirror.topics_exclude`) and how they are named
/// on the target (`mirror.rename`, `mirror.separator`).
fn topic_naming(
    raw: &RawConfig,
    source: &Cluster,
    target: &Cluster,
    described: &dyn Fn(&str) -> String,
) -> Result<(TopicSelection, Rename)> {
    let s = Section::Mirror;
    let include = get(raw, s, "topics", |f| f.list())?
        .unwrap_or_else(|| DEFAULT_INCLUDE.iter().map(|s| s.to_string()).collect());
    let exclude = get(raw, s, "topics_exclude", |f| f.list())?
        .unwrap_or_else(|| DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect());
    let topics = TopicSelection::new(
        include,
        &described("topics"),
        exclude,
        &described("topics_exclude"),
    )?;
    let separator = match raw.get(s, "separator") {
        None => ".".to_string(),
        Some(e) => {
            let f = Field::new("mirror", "separator", e);
            let sep = f.string()?;
            if sep.is_empty()
                || !sep
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(f.invalid(
                    "a non-empty separator of topic-name characters, e.g. \".\" or \"_\"",
                ));
            }
            sep
        }
    };
    let rename = match get(raw, s, "rename", |f| {
        f.choice(&[("identity", false), ("prefix", true)])
    })? {
        Some(true) => Rename::Prefix { separator },
        _ => Rename::Identity,
    };
    if let Rename::Prefix { separator } = &rename {
        for c in [source, target] {
            if c.alias.contains(separator.as_str()) {
                return Err(Error::Invalid {
                    key: described("rename"),
                    expected: format!(
                        "cluster aliases without the separator {separator:?} when renaming with prefixes"
                    ),
                    got: format!("alias \"{}\"", c.alias),
                });
            }
        }
    }
    Ok((topics, rename))
}

/// `["roundrobin", "range"]`, `"roundrobin"` or `"roundrobin,range"` (also Java class names):
/// the assignors to offer, most preferred first, without repeats.
fn assignors(f: &Field<'_>) -> Result<Vec<Assignor>> {
    const EXPECTED: &str = "a list of assignors, most preferred first: \"roundrobin\", \"range\", \
                            \"cooperative-sticky\" (incremental when offered alone; \"sticky\" is not \
                            implemented), e.g. [\"roundrobin\", \"range\"]";
    let names = match f.string() {
        Ok(s) if !s.trim_start().starts_with('[') => {
            s.split(',').map(|n| n.trim().to_string()).collect()
        }
        _ => f.list().map_err(|_| f.invalid(EXPECTED))?,
    };
    let mut out = Vec::new();
    for name in names.iter().filter(|n| !n.trim().is_empty()) {
        let a = assignor_named(name).ok_or_else(|| f.invalid(EXPECTED))?;
        if !out.contains(&a) {
            out.push(a);
        }
    }
    if out.is_empty() {
        return Err(f.invalid(EXPECTED));
    }
    Ok(out)
}

fn tracing_section(raw: &RawConfig) -> Result<TracingConfig> {
    let s = Section::Tracing;
    let otlp_endpoint = match raw.get(s, "otlp_endpoint") {
        None => None,
        Some(e) => {
            let f = Field::new("tracing", "otlp_endpoint", e);
            let url = f.string()?;
            let url = url.trim();
            if url.is_empty() {
                None
            } else if (url.starts_with("http://") || url.starts_with("https://"))
                && url.len() > "https://".len()
            {
                Some(url.to_string())
            } else {
                return Err(f.invalid(
                    "an http:// or https:// URL such as \"http://127.0.0.1:4318\" (OTLP over HTTP)",
                ));
            }
        }
    };
    Ok(TracingConfig {
        otlp_endpoint,
        mode: get(raw, s, "mode", |f| f.choice(TRACING_MODE))?.unwrap_or(TracingMode::Batch),
        sample_ratio: get(raw, s, "sample_ratio", |f| {
            const EXPECTED: &str = "a number from 0 to 1, e.g. 0.1";
            let r = f.float(EXPECTED)?;
            if (0.0..=1.0).contains(&r) {
                Ok(r)
            } else {
                Err(f.invalid(EXPECTED))
            }
        })?
        .unwrap_or(1.0),
        records_per_second: get(raw, s, "records_per_second", |f| {
            const EXPECTED: &str = "a non-negative integer (spans per second)";
            u32::try_from(f.integer(EXPECTED)?).map_err(|_| f.invalid(EXPECTED))
        })?
        .unwrap_or(defaults::RECORDS_PER_SECOND),
        service_name: get(raw, s, "service_name", |f| f.non_empty_string())?
            .unwrap_or_else(|| defaults::SERVICE_NAME.to_string()),
    })
}

const SECTIONS: &[&str] = &[
    "source", "target", "mirror", "metrics", "tracing", "log", "runtime",
];

/// Walks the parsed TOML document into a [`RawConfig`], rejecting unknown sections and keys.
fn raw_from_toml(table: toml::Table) -> Result<RawConfig> {
    let mut raw = RawConfig::default();
    for (name, value) in table {
        let toml::Value::Table(body) = value else {
            return Err(match SECTIONS.contains(&name.as_str()) {
                true => Error::Invalid {
                    key: name.clone(),
                    expected: format!("a table: [{name}]"),
                    got: value.to_string(),
                },
                false => Error::UnknownKey {
                    key: name.clone(),
                    suggestion: format!(
                        "; keys belong in a section{}",
                        suggestion(&name, SECTIONS).replace("; valid keys", ", one of")
                    ),
                },
            });
        };
        match name.as_str() {
            "source" => raw.source = raw_cluster(&name, body)?,
            "target" => raw.target = raw_cluster(&name, body)?,
            other => {
                let Some(section) = Section::from_name(other) else {
                    return Err(Error::UnknownKey {
                        key: format!("[{other}]"),
                        suggestion: suggestion(other, SECTIONS)
                            .replace("valid keys", "valid sections"),
                    });
                };
                for (key, value) in body {
                    if !section.keys().contains(&key.as_str()) {
                        return Err(Error::UnknownKey {
                            key: format!("{other}.{key}"),
                            suggestion: suggestion(&key, section.keys()),
                        });
                    }
                    raw.set(
                        section,
                        &key,
                        Entry {
                            value: RawValue::Toml(value),
                            origin: Origin::File,
                        },
                    );
                }
            }
        }
    }
    Ok(raw)
}

/// `[source]`/`[target]`: `alias` plus client properties; dotted keys written without quotes
/// (`ssl.ca.location = "..."`) arrive as nested tables and are flattened back.
fn raw_cluster(section: &str, body: toml::Table) -> Result<RawCluster> {
    fn flatten(section: &str, prefix: &str, body: toml::Table, out: &mut RawCluster) -> Result<()> {
        for (key, value) in body {
            let full = if prefix.is_empty() {
                key
            } else {
                format!("{prefix}.{key}")
            };
            let text = match value {
                toml::Value::Table(t) => {
                    flatten(section, &full, t, out)?;
                    continue;
                }
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Float(f) => f.to_string(),
                other => {
                    return Err(Error::Invalid {
                        key: format!("{section}.{full}"),
                        expected:
                            "a string (Kafka client properties are strings; join lists with commas)"
                                .into(),
                        got: other.to_string(),
                    });
                }
            };
            if full == "alias" {
                out.alias = Some(Entry::text(text, Origin::File));
            } else {
                out.set_property(&full, text, Origin::File);
            }
        }
        Ok(())
    }
    let mut out = RawCluster::default();
    flatten(section, "", body, &mut out)?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod documented;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
