//! MirrorMaker 2 dedicated mode (`connect-mirror-maker.sh mm2.properties [--clusters B]`).
//!
//! Strait runs every enabled flow (`A->B.enabled = true`) in one process, as MirrorMaker 2
//! does, or only those whose target `--clusters` names (MM2's meaning of the option: the target
//! clusters this node drives). Each flow has its own consumer group, metrics labels
//! (`source`, `target`) and checkpoints; see [`crate::run::flows`]. Active-active (`A->B` and `B->A`)
//! with the default prefix naming never mirrors a topic back to the cluster it came from
//! (MirrorMaker 2's cycle rule, [`crate::config::Rename::is_cycle`]).
//!
//! | mm2.properties | Strait |
//! |---|---|
//! | `clusters`, `A->B.enabled` | the flow: `source.alias = "A"`, `target.alias = "B"` |
//! | `A.<client prop>`, then `A.admin.*`, then `A.consumer.*` (later wins) | `[source]`; `group.id`, `auto.offset.reset`, `isolation.level` -> `mirror.*` |
//! | `B.<client prop>`, then `B.admin.*`, then `B.producer.*` | `[target]`; `compression.type`, `max.in.flight.requests.per.connection` -> `mirror.*` |
//! | top-level `security.protocol`, `ssl.*`, `sasl.*` | defaults for both clusters (as in MM2) |
//! | `topics`, `topics.exclude` (`topics.blacklist`), also as `A->B.topics...` | `mirror.topics`, `mirror.topics_exclude` |
//! | `replication.policy.class` | `DefaultReplicationPolicy` (default) -> `rename = "prefix"`, `IdentityReplicationPolicy` -> `"identity"`; others: error |
//! | `replication.policy.separator` | `mirror.separator` |
//! | `heartbeats.replication.enabled` (default true) | `mirror.replicate_heartbeats` (true unless set false): heartbeats topics are mirrored even when `topics` does not select them |
//! | `replication.factor` | `mirror.replication_factor` (unset: Strait takes the source topic's factor, capped by the target's broker count; MM2's default is a fixed 2) |
//! | `sync.topic.configs.enabled`, `sync.topic.configs.interval.seconds` | `mirror.sync_topic_configs`, `mirror.sync_topic_configs_interval` |
//! | `config.properties.exclude` (`config.properties.blacklist`) | `mirror.topic_configs_exclude` (unset: MM2's default list without `min.insync.replicas`, which Strait copies, lowered to the target's replication factor when needed) |
//! | `sync.topic.acls.enabled`, `sync.topic.acls.interval.seconds` | `mirror.sync_topic_acls` (unset: off in Strait, on in MM2; see docs/acls.md), `mirror.sync_topic_acls_interval` |
//! | `groups`, `groups.exclude` (`groups.blacklist`) | `mirror.groups`, `mirror.groups_exclude`: checkpoints only when `groups` is set (MM2 defaults to `.*`) |
//! | `emit.checkpoints.interval.seconds` | `mirror.checkpoint_interval` |
//! | `sync.group.offsets.enabled`, `sync.group.offsets.interval.seconds` | `mirror.sync_group_offsets`, `mirror.sync_group_offsets_interval` (for the groups `groups` names) |
//! | `refresh.topics.interval.seconds` | `mirror.refresh_interval` |
//! | `exactly.once.source.support = enabled`, `exactly.once.support = required` | `mirror.exactly_once = true` (see docs/exactly-once.md) |
//! | no consumer `group.id` | `mirror.group_id = "strait-A-B"` (one group per flow) |
//! | other checkpoint/heartbeat/offset-sync settings, `tasks.max`, internal-topic replication factors, Connect worker settings... | listed in one warning |
//! | `config.providers` with Kafka's `FileConfigProvider`, `DirectoryConfigProvider`, `EnvVarConfigProvider` | `${file:/path:key}`, `${directory:/dir:file}`, `${env:VAR}` in client properties are resolved at load and on reload ([`crate::config::providers`]) |
//! | other config provider classes, custom `topic.filter.class` / `replication.policy.class` | error: not supported |
//!
//! Connector-level keys may be given globally or per flow (`A->B.topics`); the flow's value wins,
//! as in MM2. Keys of clusters and flows this process does not run are skipped.

use std::path::PathBuf;

use super::{Report, Role, ignored_warning, is_client_key, map_client_setting};
use crate::config::properties::{Properties, Property};
use crate::config::providers::{Providers, is_declaration_key};
use crate::config::raw::{Entry, Origin, RawConfig, Section};
use crate::config::{Config, Environment, Loaded};
use crate::error::{Error, Result};

/// The MirrorMaker 2 command line.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Mm2Options {
    /// The mm2.properties file.
    #[arg(value_name = "MM2_PROPERTIES")]
    pub file: PathBuf,
    /// Target cluster alias(es) this process drives; picks the flow when several are enabled.
    #[arg(long, value_name = "ALIAS", num_args = 1.., value_delimiter = ',')]
    pub clusters: Vec<String>,
}

/// A setting together with the key as written and where it is.
struct Setting<'a> {
    prop: &'a Property,
}

/// Keys set in order; setting a key again replaces it (higher-precedence layers come later).
#[derive(Default)]
struct Layered<'a> {
    entries: Vec<(String, Setting<'a>)>,
}

impl<'a> Layered<'a> {
    fn set(&mut self, key: &str, prop: &'a Property) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = Setting { prop },
            None => self.entries.push((key.to_string(), Setting { prop })),
        }
    }

    fn get(&self, key: &str) -> Option<&Property> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s.prop)
    }
}

const WHY_IGNORED: &str = "Strait mirrors records and topic configurations, and writes \
    checkpoints, offset syncs and heartbeats (to the target), and syncs group offsets, only for \
    the groups `groups` names, and needs no Kafka Connect worker";

/// Builds the configuration from an mm2.properties file, then applies `env`.
pub fn load(opts: &Mm2Options, env: &Environment) -> Result<Loaded> {
    let props = Properties::load(&opts.file)?;
    from_properties(&props, &opts.clusters, env)
}

pub(crate) fn from_properties(
    props: &Properties,
    drive: &[String],
    env: &Environment,
) -> Result<Loaded> {
    // Kafka's config providers: `${file:...}` references in client properties resolve with
    // the providers the file declares (see crate::config::providers).
    let providers = Providers::declared_in(props).map_err(|source| Error::Providers {
        path: props.path.clone(),
        source,
    })?;
    let aliases = cluster_aliases(props, drive)?;
    let enabled: Vec<(String, String)> = aliases
        .iter()
        .flat_map(|s| aliases.iter().map(move |t| (s.clone(), t.clone())))
        .filter(|(s, t)| s != t)
        .filter(|(s, t)| {
            props
                .get(&format!("{s}->{t}.enabled"))
                .is_some_and(|p| p.value.trim().eq_ignore_ascii_case("true"))
        })
        .collect();
    let candidates = flows_to_run(props, &aliases, &enabled, drive)?;
    let mut warnings = Vec::new();
    for f in &enabled {
        if !candidates.contains(&f) {
            warnings.push(format!(
                "flow {} is enabled in {} but not run by this process (--clusters names other \
                 targets); run another strait for it",
                flow_name(f),
                props.path.display()
            ));
        }
    }
    // Every enabled flow (of the targets --clusters names) runs in this process, as MirrorMaker
    // 2 runs them: each with its own consumer group, metrics labels and checkpoints.
    let mut configs = Vec::new();
    for (source, target) in candidates {
        let (config, flow_warnings) =
            flow_config(props, &aliases, (source, target), &providers, env)?;
        for w in flow_warnings {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        configs.push(config);
    }
    if configs.len() == 1 {
        let config = configs.remove(0);
        return Ok(Loaded::single(config, warnings));
    }
    crate::config::flows::check_flows(&configs, &mut warnings)?;
    Ok(Loaded {
        config: configs[0].clone(),
        warnings,
        flows: configs,
    })
}

fn flow_name((s, t): &(String, String)) -> String {
    format!("{s}->{t}")
}

/// The aliases of `clusters` (at least two), each alias `--clusters` names among them.
fn cluster_aliases(props: &Properties, drive: &[String]) -> Result<Vec<String>> {
    let clusters_prop = props.get("clusters").ok_or_else(|| Error::Missing {
        key: format!("clusters ({})", props.path.display()),
        hint: "list the cluster aliases, e.g. clusters = A, B".into(),
    })?;
    let aliases: Vec<String> = clusters_prop
        .value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if aliases.len() < 2 {
        return Err(Error::Invalid {
            key: props.describe(clusters_prop),
            expected: "at least two cluster aliases, e.g. \"A, B\"".into(),
            got: format!("{:?}", clusters_prop.value),
        });
    }
    for c in drive {
        if !aliases.contains(c) {
            return Err(Error::Invalid {
                key: "--clusters".into(),
                expected: format!("aliases listed in clusters ({})", aliases.join(", ")),
                got: format!("{c:?}"),
            });
        }
    }
    Ok(aliases)
}

/// The enabled flows whose target `--clusters` names (all without it); none is an error.
fn flows_to_run<'a>(
    props: &Properties,
    aliases: &[String],
    enabled: &'a [(String, String)],
    drive: &[String],
) -> Result<Vec<&'a (String, String)>> {
    let candidates: Vec<&(String, String)> = enabled
        .iter()
        .filter(|(_, t)| drive.is_empty() || drive.contains(t))
        .collect();
    if candidates.is_empty() {
        return Err(if enabled.is_empty() {
            Error::Missing {
                key: format!("<source>-><target>.enabled ({})", props.path.display()),
                hint: format!(
                    "enable one replication flow, e.g. {}->{}.enabled = true",
                    aliases[0], aliases[1]
                ),
            }
        } else {
            Error::Invalid {
                key: "--clusters".into(),
                expected: format!(
                    "the target of an enabled flow ({})",
                    enabled.iter().map(flow_name).collect::<Vec<_>>().join(", ")
                ),
                got: format!("{:?}", drive.join(",")),
            }
        });
    }
    Ok(candidates)
}

/// The configuration of the flow `source`->`target` (with its own warnings).
fn flow_config(
    props: &Properties,
    aliases: &[String],
    (source, target): (&str, &str),
    providers: &Providers,
    env: &Environment,
) -> Result<(Config, Vec<String>)> {
    let clusters_prop = props.get("clusters").ok_or_else(|| Error::Missing {
        key: format!("clusters ({})", props.path.display()),
        hint: "list the cluster aliases, e.g. clusters = A, B".into(),
    })?;
    let mut report = Report::default();
    let layers = FlowLayers::sort(props, aliases, (source, target), &mut report);
    let mut raw = flow_defaults(props, clusters_prop, (source, target), providers);
    map_connector(&mut raw, props, &layers.connector, &mut report)?;
    map_clusters(&mut raw, props, &layers, &mut report)?;
    let mut warnings = sync_warning(props, &layers.connector)
        .into_iter()
        .collect::<Vec<_>>();
    warnings.extend(report.notes);
    if let Some(w) = ignored_warning(
        &props.path.display().to_string(),
        &report.ignored,
        WHY_IGNORED,
    ) {
        warnings.push(w);
    }
    Ok((Config::from_raw(raw, env)?, warnings))
}

/// One flow's keys, each in its layer (later settings of a layer override earlier ones).
struct FlowLayers<'a> {
    /// Connector settings: global, then `source->target.` ones.
    connector: Layered<'a>,
    /// The source cluster's settings: base, admin, consumer.
    source: [Layered<'a>; 3],
    /// The target cluster's settings: base, admin, producer.
    target: [Layered<'a>; 3],
}

impl<'a> FlowLayers<'a> {
    /// Sorts every key of `props` into its layer for the flow `source -> target`; keys of other
    /// flows and clusters are left out, the other side's client settings go to `report`.
    fn sort(
        props: &'a Properties,
        aliases: &[String],
        (source, target): (&str, &str),
        report: &mut Report,
    ) -> FlowLayers<'a> {
        let flow_prefix = format!("{source}->{target}.");
        let mut layers = FlowLayers {
            connector: Layered::default(),
            source: Default::default(),
            target: Default::default(),
        };
        let mut flow_specific = Vec::new();
        // Longest alias first, so `eu` does not capture `eu.west.` keys.
        let mut by_len: Vec<&String> = aliases.iter().collect();
        by_len.sort_by_key(|a| std::cmp::Reverse(a.len()));
        for p in &props.entries {
            let key = p.key.as_str();
            if key == "clusters" {
                continue;
            }
            if let Some(rest) = key.strip_prefix(&flow_prefix) {
                if rest != "enabled" {
                    flow_specific.push((rest, p));
                }
                continue;
            }
            if key.contains("->") {
                continue; // another flow
            }
            if let Some((alias, rest)) = by_len.iter().find_map(|a| {
                key.strip_prefix(&format!("{a}."))
                    .map(|rest| (a.as_str(), rest))
            }) {
                let (cluster, own) = if alias == source {
                    (&mut layers.source, "consumer.")
                } else if alias == target {
                    (&mut layers.target, "producer.")
                } else {
                    continue; // a cluster this flow does not touch
                };
                if let Some(k) = rest.strip_prefix(own) {
                    cluster[2].set(k, p);
                } else if let Some(k) = rest.strip_prefix("admin.") {
                    cluster[1].set(k, p);
                } else if rest.starts_with("consumer.") || rest.starts_with("producer.") {
                    report.ignored.push(key.to_string());
                } else {
                    cluster[0].set(rest, p);
                }
                continue;
            }
            layers.connector.set(key, p);
        }
        for (rest, p) in flow_specific {
            layers.connector.set(rest, p);
        }
        layers
    }
}

/// The settings MirrorMaker 2 implies for every flow, before any key is read: the aliases, its
/// default replication policy (prefix), heartbeat replication, and one group per flow.
fn flow_defaults(
    props: &Properties,
    clusters_prop: &Property,
    (source, target): (&str, &str),
    providers: &Providers,
) -> RawConfig {
    let origin = Origin::Compat(props.describe(clusters_prop));
    let mut raw = RawConfig::default();
    raw.source.providers = providers.clone();
    raw.target.providers = providers.clone();
    raw.source.alias = Some(Entry::text(source, origin.clone()));
    raw.target.alias = Some(Entry::text(target, origin));
    raw.set(
        Section::Mirror,
        "rename",
        Entry::text(
            "prefix",
            Origin::Compat("MirrorMaker 2's default DefaultReplicationPolicy".into()),
        ),
    );
    raw.set(
        Section::Mirror,
        "replicate_heartbeats",
        Entry::text(
            "true",
            Origin::Compat("MirrorMaker 2's default heartbeats.replication.enabled = true".into()),
        ),
    );
    raw.set(
        Section::Mirror,
        "group_id",
        Entry::text(
            format!("strait-{source}-{target}"),
            Origin::Compat("one consumer group per MirrorMaker 2 flow".into()),
        ),
    );
    raw
}

/// Maps the connector-level settings to `[mirror]`; unknown ones go to `report`.
fn map_connector(
    raw: &mut RawConfig,
    props: &Properties,
    connector: &Layered<'_>,
    report: &mut Report,
) -> Result<()> {
    let origin = |p: &Property| Origin::Compat(props.describe(p));
    let mirror = |raw: &mut RawConfig, name: &str, p: &Property| {
        raw.set(
            Section::Mirror,
            name,
            Entry::text(p.value.trim(), origin(p)),
        );
    };
    // MM2's `*.seconds` settings become Strait durations (`"60s"`).
    let mirror_seconds = |raw: &mut RawConfig, name: &str, p: &Property| -> Result<()> {
        raw.set(Section::Mirror, name, seconds(props, p)?);
        Ok(())
    };
    for (key, s) in &connector.entries {
        let p = s.prop;
        match key.as_str() {
            k if is_client_key(k) && k != "bootstrap.servers" => {} // cluster defaults
            k if is_declaration_key(k) => {} // read by Providers::declared_in
            "topics" => mirror(raw, "topics", p),
            "topics.exclude" => mirror(raw, "topics_exclude", p),
            "topics.blacklist" if connector.get("topics.exclude").is_none() => {
                mirror(raw, "topics_exclude", p)
            }
            "replication.policy.class" => {
                let rename = rename_for_policy(props, p)?;
                raw.set(Section::Mirror, "rename", Entry::text(rename, origin(p)));
            }
            "replication.policy.separator" => {
                raw.set(
                    Section::Mirror,
                    "separator",
                    // The separator is taken literally: no trimming.
                    Entry::text(p.value.clone(), origin(p)),
                );
            }
            "replication.factor" => mirror(raw, "replication_factor", p),
            "heartbeats.replication.enabled" => mirror(raw, "replicate_heartbeats", p),
            // Connect's exactly-once source support (worker) or a connector requesting it.
            "exactly.once.source.support" | "exactly.once.support" => {
                let on = matches!(
                    p.value.trim().to_ascii_lowercase().as_str(),
                    "enabled" | "required" | "requested"
                );
                raw.set(
                    Section::Mirror,
                    "exactly_once",
                    Entry::text(if on { "true" } else { "false" }, origin(p)),
                );
            }
            // Checkpoints are opt-in in Strait: only an explicit `groups` enables them.
            "groups" => mirror(raw, "groups", p),
            "groups.exclude" => mirror(raw, "groups_exclude", p),
            "groups.blacklist" if connector.get("groups.exclude").is_none() => {
                mirror(raw, "groups_exclude", p)
            }
            "emit.checkpoints.interval.seconds" => mirror_seconds(raw, "checkpoint_interval", p)?,
            "sync.group.offsets.enabled" => mirror(raw, "sync_group_offsets", p),
            "sync.group.offsets.interval.seconds" => {
                mirror_seconds(raw, "sync_group_offsets_interval", p)?
            }
            "sync.topic.configs.enabled" => mirror(raw, "sync_topic_configs", p),
            "sync.topic.acls.enabled" => mirror(raw, "sync_topic_acls", p),
            "sync.topic.acls.interval.seconds" => {
                mirror_seconds(raw, "sync_topic_acls_interval", p)?
            }
            "sync.topic.configs.interval.seconds" => {
                mirror_seconds(raw, "sync_topic_configs_interval", p)?
            }
            "config.properties.exclude" => mirror(raw, "topic_configs_exclude", p),
            "config.properties.blacklist"
                if connector.get("config.properties.exclude").is_none() =>
            {
                mirror(raw, "topic_configs_exclude", p)
            }
            "refresh.topics.interval.seconds" => mirror_seconds(raw, "refresh_interval", p)?,
            "topic.filter.class" => check_topic_filter(props, p)?,
            _ => report.ignored.push(p.key.clone()),
        }
    }
    Ok(())
}

/// A positive `*.seconds` value as a Strait duration (`"60s"`).
fn seconds(props: &Properties, p: &Property) -> Result<Entry> {
    let secs: u64 = p
        .value
        .trim()
        .parse()
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| Error::Invalid {
            key: props.describe(p),
            expected: "a positive number of seconds".into(),
            got: format!("{:?}", p.value),
        })?;
    Ok(Entry::text(
        format!("{secs}s"),
        Origin::Compat(props.describe(p)),
    ))
}

/// `mirror.rename` for a `replication.policy.class`; other policies are refused.
fn rename_for_policy(props: &Properties, p: &Property) -> Result<&'static str> {
    let class = p.value.trim();
    match class.rsplit('.').next().unwrap_or(class) {
        "DefaultReplicationPolicy" => Ok("prefix"),
        "IdentityReplicationPolicy" => Ok("identity"),
        _ => Err(Error::Unsupported {
            what: format!("{} = {class}", props.describe(p)),
            hint: "Strait implements DefaultReplicationPolicy (source alias prefix) \
                   and IdentityReplicationPolicy (same names)"
                .into(),
        }),
    }
}

/// Only the default topic filter (patterns) is supported.
fn check_topic_filter(props: &Properties, p: &Property) -> Result<()> {
    let class = p.value.trim();
    if class.rsplit('.').next() != Some("DefaultTopicFilter") {
        return Err(Error::Unsupported {
            what: format!("{} = {class}", props.describe(p)),
            hint: "use topics / topics.exclude patterns instead of a custom filter class".into(),
        });
    }
    Ok(())
}

/// Maps each cluster's client settings: MM2's top-level security settings are defaults for
/// every cluster, then the cluster's base, admin and consumer/producer layers.
fn map_clusters(
    raw: &mut RawConfig,
    props: &Properties,
    layers: &FlowLayers<'_>,
    report: &mut Report,
) -> Result<()> {
    for (role, cluster) in [
        (Role::Source, &layers.source),
        (Role::Target, &layers.target),
    ] {
        let mut effective = Layered::default();
        for (key, s) in &layers.connector.entries {
            if is_client_key(key) && key != "bootstrap.servers" {
                effective.set(key, s.prop);
            }
        }
        for layer in cluster.iter() {
            for (key, s) in &layer.entries {
                effective.set(key, s.prop);
            }
        }
        for (key, s) in &effective.entries {
            let p = s.prop;
            let origin = Origin::Compat(props.describe(p));
            map_client_setting(raw, role, key, &p.value, &p.key, origin, report)?;
        }
    }
    Ok(())
}

/// MM2 checkpoints and syncs every group by default (`groups = .*`); Strait only the groups
/// `groups` names. Asking for a sync without naming groups would otherwise do nothing, silently.
fn sync_warning(props: &Properties, connector: &Layered<'_>) -> Option<String> {
    let sync_asked = connector
        .get("sync.group.offsets.enabled")
        .is_some_and(|p| p.value.trim().eq_ignore_ascii_case("true"));
    (sync_asked && connector.get("groups").is_none()).then(|| {
        format!(
            "{}: sync.group.offsets.enabled = true syncs nothing without `groups`: MirrorMaker 2 \
             checkpoints every group by default, Strait only the groups `groups` names (it needs \
             Describe on those source groups and Create/Write on three target topics); add \
             `groups = .*` (or a narrower pattern) to sync them",
            props.path.display()
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::{Compression, Isolation, Rename, StartPosition};
    use std::path::Path;
    use std::time::Duration;

    /// kafka-reference/mm2.properties from the project notes, verbatim.
    const REFERENCE: &str = r#"# MM2 dedicated mode: java -cp 'lib/*' org.apache.kafka.connect.mirror.MirrorMaker mm2.properties [--clusters B]
clusters = A, B
A.bootstrap.servers = 127.0.0.1:9092
B.bootstrap.servers = 127.0.0.1:9192
A->B.enabled = true
A->B.topics = perf.*
B->A.enabled = false
# keep names (MM1-like, one-way only: no cycle detection with identity naming)
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = 2
# single-broker clusters: every internal topic RF=1 (defaults are 2 or 3)
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
# test speed: defaults are 600 s (topics/groups) and 60 s (checkpoints/group offsets)
refresh.topics.interval.seconds = 5
refresh.groups.interval.seconds = 5
emit.checkpoints.interval.seconds = 5
sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 5
sync.topic.configs.enabled = true
# needs an authorizer on A and DESCRIBE/ALTER on CLUSTER; off unless you test ACL sync
sync.topic.acls.enabled = false
emit.heartbeats.enabled = true
# mTLS per cluster (uncomment): {alias}.security.protocol etc. apply to that cluster's producer/consumer/admin
#A.security.protocol = SSL
#A.ssl.keystore.type = PEM
#A.ssl.keystore.location = $KT/pki/mm2.keystore.pem
#A.ssl.truststore.type = PEM
#A.ssl.truststore.location = $KT/pki/ca.pem
"#;

    fn load_text(text: &str, drive: &[&str]) -> Result<Loaded> {
        load_env(text, drive, &[])
    }

    fn load_env(text: &str, drive: &[&str], env: &[(&str, &str)]) -> Result<Loaded> {
        let props = Properties::parse(text, Path::new("mm2.properties"))?;
        let drive: Vec<String> = drive.iter().map(|s| s.to_string()).collect();
        from_properties(
            &props,
            &drive,
            &Environment::from_pairs(env.iter().copied()),
        )
    }

    /// Issue 32 item 2: secrets by reference, as MirrorMaker 2 users have them.
    #[test]
    fn config_provider_references_resolve_and_are_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = dir.path().join("b.properties");
        std::fs::write(&secrets, "password = file-secret-1\n").unwrap();
        let text = format!(
            "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\n\
             A->B.enabled = true\n\
             config.providers = file,env\n\
             config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider\n\
             config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n\
             A.security.protocol = SASL_PLAINTEXT\nA.sasl.mechanism = SCRAM-SHA-512\n\
             A.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"a\" password=\"${{env:A_PASSWORD}}\";\n\
             B.security.protocol = SASL_PLAINTEXT\nB.sasl.mechanism = PLAIN\n\
             B.sasl.username = b\nB.sasl.password = ${{file:{}:password}}\n",
            secrets.display()
        );
        let loaded = load_env(&text, &[], &[("A_PASSWORD", "env-secret-2")]).unwrap();
        assert!(
            loaded
                .warnings
                .iter()
                .all(|w| !w.contains("config.providers")),
            "{:?}",
            loaded.warnings
        );
        let c = &loaded.config;
        assert!(
            c.source
                .property("sasl.jaas.config")
                .unwrap()
                .contains("password=\"env-secret-2\"")
        );
        assert_eq!(c.target.property("sasl.password"), Some("file-secret-1"));
        // `strait check` prints the references, not the values.
        let shown = c.to_toml(true);
        assert!(shown.contains("${env:A_PASSWORD}"), "{shown}");
        assert!(shown.contains(":password}"), "{shown}");
        for secret in ["file-secret-1", "env-secret-2"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        // A provider the file does not declare is an error naming the reference.
        let err = load_env(
            &text.replace("config.providers = file,env", "config.providers = file"),
            &[],
            &[("A_PASSWORD", "env-secret-2")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("source.sasl.jaas.config (from mm2.properties:")
                && err.contains("${env:A_PASSWORD}: config provider \"env\" is not declared"),
            "{err}"
        );
        let err = load_text(&text, &[]).unwrap_err().to_string();
        assert!(
            err.contains("environment variable A_PASSWORD is not set"),
            "{err}"
        );
    }

    #[test]
    fn reference_file() {
        let loaded = load_text(REFERENCE, &[]).unwrap();
        let c = &loaded.config;
        assert_eq!(c.source.alias, "A");
        assert_eq!(c.target.alias, "B");
        assert_eq!(
            c.source.properties,
            [(
                "bootstrap.servers".to_string(),
                "127.0.0.1:9092".to_string()
            )]
        );
        assert_eq!(
            c.target.properties,
            [(
                "bootstrap.servers".to_string(),
                "127.0.0.1:9192".to_string()
            )]
        );
        assert_eq!(c.mirror.rename, Rename::Identity);
        assert_eq!(c.mirror.topics.include(), ["perf.*"]);
        assert_eq!(c.mirror.replication_factor, 1);
        assert_eq!(c.mirror.refresh_interval, Duration::from_secs(5));
        assert!(c.mirror.sync_topic_configs);
        assert_eq!(c.mirror.group_id, "strait-A-B");
        assert_eq!(c.mirror.start, StartPosition::Earliest);
        assert_eq!(c.target_topic("perf-1"), "perf-1");

        // The reference file asks for a group sync without naming groups: said first. Then
        // exactly one warning listing every unsupported key.
        assert_eq!(loaded.warnings.len(), 2, "{:#?}", loaded.warnings);
        assert!(
            loaded.warnings[0].contains("syncs nothing without `groups`"),
            "{:#?}",
            loaded.warnings
        );
        let w = &loaded.warnings[1];
        for k in [
            "tasks.max",
            "checkpoints.topic.replication.factor",
            "heartbeats.topic.replication.factor",
            "offset-syncs.topic.replication.factor",
            "offset.storage.replication.factor",
            "status.storage.replication.factor",
            "config.storage.replication.factor",
            "refresh.groups.interval.seconds",
            "emit.heartbeats.enabled",
        ] {
            assert!(w.contains(k), "{k} missing from: {w}");
        }
        assert!(w.starts_with("mm2.properties: ignoring 9 settings"), "{w}");
        assert_eq!(c.mirror.checkpoint_interval, Duration::from_secs(5));
        assert!(c.mirror.sync_group_offsets);
        assert_eq!(c.mirror.sync_group_offsets_interval, Duration::from_secs(5));
        assert!(
            c.mirror.groups.is_none(),
            "checkpoints need an explicit groups"
        );
        for k in [
            "replication.factor,",
            "clusters",
            "A->B",
            "refresh.topics",
            "sync.group.offsets",
        ] {
            assert!(!w.contains(&format!(" {k}")), "{k} wrongly listed: {w}");
        }
    }

    #[test]
    fn default_policy_prefixes_and_detects_cycles() {
        let text = "clusters = europe, us\neurope.bootstrap.servers = e:9092\nus.bootstrap.servers = u:9092\neurope->us.enabled = true\n";
        let c = load_text(text, &[]).unwrap().config;
        assert_eq!(
            c.mirror.rename,
            Rename::Prefix {
                separator: ".".into()
            }
        );
        assert_eq!(c.target_topic("orders"), "europe.orders");
        assert!(!c.selects("us.orders"));
        assert_eq!(c.mirror.topics.include(), [".*"]);

        let c = load_text(&format!("{text}replication.policy.separator = _\n"), &[])
            .unwrap()
            .config;
        assert_eq!(c.target_topic("orders"), "europe_orders");
    }

    #[test]
    fn heartbeats_topics_are_mirrored_whatever_the_filter_as_in_mirror_maker_2() {
        // MirrorSourceConnector.shouldReplicateTopic: (filter || heartbeats) && !internal && !cycle.
        let text = "clusters = a, b\na.bootstrap.servers = a:1\nb.bootstrap.servers = b:1\na->b.enabled = true\na->b.topics = orders\n";
        let c = load_text(text, &[]).unwrap().config;
        assert!(c.mirror.replicate_heartbeats);
        assert!(c.selects("orders"));
        assert!(!c.selects("payments"));
        assert!(c.selects("heartbeats"));
        assert!(
            c.selects("c.heartbeats"),
            "another cluster's heartbeats, hop by hop"
        );
        assert!(
            !c.selects("b.heartbeats"),
            "b's own heartbeats never go back to b"
        );
        assert!(!c.selects("heartbeats.internal"));
        let off = format!("{text}heartbeats.replication.enabled = false\n");
        let c = load_text(&off, &[]).unwrap().config;
        assert!(!c.selects("heartbeats"));
    }

    #[test]
    fn mtls_and_client_overrides() {
        let text = r#"
clusters = A, B
security.protocol = SSL
ssl.truststore.type = PEM
ssl.truststore.location = /pki/ca.pem
A.bootstrap.servers = a:9093
A.ssl.keystore.type = PEM
A.ssl.keystore.location = /pki/a.pem
A.consumer.isolation.level = read_uncommitted
A.consumer.auto.offset.reset = latest
A.consumer.max.poll.records = 100
A.consumer.group.id = mirror
A.admin.request.timeout.ms = 20000
A.consumer.request.timeout.ms = 40000
A.producer.linger.ms = 5
B.bootstrap.servers = b:9093
B.security.protocol = SASL_SSL
B.sasl.mechanism = PLAIN
B.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="mm2" password="pw";
B.producer.compression.type = gzip
B.consumer.fetch.max.bytes = 1
A->B.enabled = true
A->B.topics = orders, payments
topics.exclude = .*-test
A->B.topics.exclude = payments
"#;
        let loaded = load_text(text, &[]).unwrap();
        let c = &loaded.config;
        assert_eq!(c.source.property("security.protocol"), Some("SSL"));
        assert_eq!(
            c.source.property("ssl.truststore.location"),
            Some("/pki/ca.pem")
        );
        assert_eq!(
            c.source.property("ssl.keystore.location"),
            Some("/pki/a.pem")
        );
        assert_eq!(c.source.property("request.timeout.ms"), Some("40000"));
        assert_eq!(c.target.property("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.target.property("ssl.truststore.type"), Some("PEM"));
        assert_eq!(c.target.property("ssl.keystore.location"), None);
        assert_eq!(c.mirror.isolation, Isolation::ReadUncommitted);
        assert_eq!(c.mirror.start, StartPosition::Latest);
        assert_eq!(c.mirror.group_id, "mirror");
        assert_eq!(c.mirror.compression, Compression::Gzip);
        assert_eq!(c.mirror.topics.include(), ["orders", "payments"]);
        assert_eq!(c.mirror.topics.exclude(), ["payments"]);
        let w = loaded.warnings.join("\n");
        assert!(w.contains("A.consumer.max.poll.records"), "{w}");
        assert!(w.contains("A.producer.linger.ms"), "{w}");
        assert!(w.contains("B.consumer.fetch.max.bytes"), "{w}");
        assert_eq!(loaded.warnings.len(), 1, "{w}");
    }

    #[test]
    fn several_flows_run_in_one_process_or_as_clusters_picks() {
        let text = "clusters = A, B, C\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nC.bootstrap.servers = c:1\nA.security.protocol = SSL\nA->B.enabled = true\nB->A.enabled = true\nB->A.topics = x\ntopics = y\n";
        // Every enabled flow, each with its clusters, its own group and its own topics.
        let loaded = load_text(text, &[]).unwrap();
        let flows: Vec<(&str, &str, &str, &[String])> = loaded
            .flows
            .iter()
            .map(|c| {
                (
                    c.source.alias.as_str(),
                    c.target.alias.as_str(),
                    c.mirror.group_id.as_str(),
                    c.mirror.topics.include(),
                )
            })
            .collect();
        let (y, x) = (vec!["y".to_string()], vec!["x".to_string()]);
        assert_eq!(
            flows,
            [
                ("A", "B", "strait-A-B", &y[..]),
                ("B", "A", "strait-B-A", &x[..])
            ]
        );
        assert_eq!(loaded.config.source.alias, "A");
        // Cluster-level settings follow the cluster, whichever side it is on.
        assert_eq!(
            loaded.flows[0].source.property("security.protocol"),
            Some("SSL")
        );
        assert_eq!(
            loaded.flows[1].target.property("security.protocol"),
            Some("SSL")
        );
        assert_eq!(loaded.flows[1].source.property("security.protocol"), None);
        assert_eq!(
            loaded.flows[0].mirror.rename,
            Rename::Prefix {
                separator: ".".into()
            }
        );

        let loaded = load_text(text, &["A"]).unwrap();
        assert!(loaded.flows.is_empty(), "one flow: the single-flow form");
        assert_eq!(loaded.config.source.alias, "B");
        assert_eq!(loaded.config.mirror.topics.include(), ["x"]);
        assert!(
            loaded.warnings[0].starts_with("flow A->B is enabled"),
            "{:?}",
            loaded.warnings
        );

        let err = load_text(text, &["C"]).unwrap_err().to_string();
        assert!(
            err.starts_with("--clusters: expected the target of an enabled flow (A->B, B->A)"),
            "{err}"
        );
        let err = load_text(text, &["D"]).unwrap_err().to_string();
        assert!(
            err.starts_with("--clusters: expected aliases listed in clusters (A, B, C)"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_mm2_key() {
        let base = "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n";
        let err = load_text(base, &[]).unwrap_err().to_string();
        assert!(
            err.contains("enable one replication flow, e.g. A->B.enabled = true"),
            "{err}"
        );

        let err = load_text("A.bootstrap.servers = a:1\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("clusters (mm2.properties): missing"),
            "{err}"
        );

        let flow = format!("{base}A->B.enabled = true\n");
        let err = load_text(&format!("{flow}A->B.topics = (\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "mirror.topics (from mm2.properties:5 A->B.topics): invalid regular expression"
            ),
            "{err}"
        );
        let err = load_text(
            &format!("{flow}replication.policy.class = com.example.Custom\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "not supported: mm2.properties:5 replication.policy.class = com.example.Custom"
            ),
            "{err}"
        );
        let err = load_text(
            &format!("{flow}refresh.topics.interval.seconds = soon\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("mm2.properties:5 refresh.topics.interval.seconds: expected a positive number of seconds"), "{err}");
        let err = load_text(&format!("{flow}replication.factor = 0\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("mirror.replication_factor (from mm2.properties:5 replication.factor)"),
            "{err}"
        );
        let err = load_text(&format!("{flow}config.providers = file\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("mm2.properties: config.providers.file.class: missing"),
            "{err}"
        );
        let err = load_text(
            &format!("{flow}B.producer.compression.type = brotli\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "mirror.compression (from mm2.properties:5 B.producer.compression.type)"
            ),
            "{err}"
        );
    }

    #[test]
    fn acl_sync_settings_are_mapped() {
        let base = "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n";
        // Unset: Strait's default (off, 10 minutes), not MM2's (on).
        let m = load_text(base, &[]).unwrap().config.mirror;
        assert!(!m.sync_topic_acls && !m.protect_mirrors);
        assert_eq!(m.sync_topic_acls_interval, Duration::from_secs(600));
        let loaded = load_text(
            &format!(
                "{base}sync.topic.acls.enabled = true\nsync.topic.acls.interval.seconds = 30\n"
            ),
            &[],
        )
        .unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let m = &loaded.config.mirror;
        assert!(m.sync_topic_acls);
        assert_eq!(m.sync_topic_acls_interval, Duration::from_secs(30));
        // Shown by `strait mm2 --print` style output when enabled.
        assert!(
            loaded
                .config
                .to_toml(true)
                .contains("sync_topic_acls = true")
        );
    }

    #[test]
    fn exactly_once_support_is_mapped() {
        let base = "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n";
        assert!(
            load_text(base, &[])
                .unwrap()
                .config
                .mirror
                .exactly_once
                .is_none()
        );
        for line in [
            "exactly.once.source.support = enabled",
            "A->B.exactly.once.support = required",
        ] {
            let loaded = load_text(&format!("{base}{line}\n"), &[]).unwrap();
            assert!(loaded.warnings.is_empty(), "{line}: {:?}", loaded.warnings);
            let eos = loaded.config.mirror.exactly_once.clone().expect(line);
            assert_eq!(eos.transaction_interval, Duration::from_millis(300));
            assert!(loaded.config.to_toml(true).contains("exactly_once = true"));
        }
        let off = load_text(
            &format!("{base}exactly.once.source.support = disabled\n"),
            &[],
        );
        assert!(off.unwrap().config.mirror.exactly_once.is_none());
    }

    #[test]
    fn topic_config_settings_are_mapped() {
        let base = "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n";
        // Unset: Strait's defaults (the source's replication factor, MM2's exclude list
        // without min.insync.replicas, 10 minutes).
        let c = load_text(base, &[]).unwrap().config;
        assert!(c.mirror.replication_factor_from_source);
        assert!(
            !c.mirror
                .topic_configs_exclude
                .excludes("min.insync.replicas")
        );
        assert!(
            c.mirror
                .topic_configs_exclude
                .excludes("unclean.leader.election.enable")
        );
        assert_eq!(
            c.mirror.sync_topic_configs_interval,
            Duration::from_secs(600)
        );

        let loaded = load_text(
            &format!(
                "{base}sync.topic.configs.interval.seconds = 30\n\
                 config.properties.exclude = min\\.insync\\.replicas, retention\\..*\n"
            ),
            &[],
        )
        .unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let m = &loaded.config.mirror;
        assert_eq!(m.sync_topic_configs_interval, Duration::from_secs(30));
        // Java properties files drop a backslash before `.`, as MM2 reads them.
        assert_eq!(
            m.topic_configs_exclude.patterns(),
            ["min.insync.replicas", "retention..*"]
        );
        assert!(m.topic_configs_exclude.excludes("retention.ms"));
        assert!(!m.topic_configs_exclude.excludes("cleanup.policy"));

        // The old name, when the new one is absent.
        let m = load_text(
            &format!("{base}config.properties.blacklist = segment\\.bytes\n"),
            &[],
        )
        .unwrap()
        .config
        .mirror;
        assert_eq!(m.topic_configs_exclude.patterns(), ["segment.bytes"]);
    }

    #[test]
    fn environment_still_applies() {
        let loaded = load_env(
            REFERENCE,
            &[],
            &[
                ("STRAIT_METRICS_LISTEN", "0.0.0.0:9999"),
                ("STRAIT_MIRROR_GROUP_ID", "g"),
            ],
        )
        .unwrap();
        assert_eq!(
            loaded.config.metrics.listen,
            Some("0.0.0.0:9999".parse().unwrap())
        );
        assert_eq!(loaded.config.mirror.group_id, "g");
    }
}
