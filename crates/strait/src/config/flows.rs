//! Several flows in one process: the `[clusters.<alias>]` + `[[flows]]` form of strait.toml.
//!
//! ```toml
//! [clusters.a]
//! "bootstrap.servers" = "a-kafka:9092"
//! [clusters.b]
//! "bootstrap.servers" = "b-kafka:9092"
//!
//! [mirror]              # defaults for every flow (optional)
//! rename = "prefix"
//!
//! [[flows]]
//! source = "a"
//! target = "b"
//! topics = ["orders.*"] # any [mirror] key, for this flow only
//!
//! [[flows]]
//! source = "b"
//! target = "a"
//! ```
//!
//! Each flow becomes one complete [`Config`] (its source and target cluster, the shared
//! `[mirror]` keys overridden by the flow's own), validated like a single-flow file. Rules that
//! keep flows apart:
//!
//! * `mirror.group_id` defaults to `strait-<source>-<target>` (MirrorMaker 2's one group per
//!   flow); two flows that read the same source cluster may not share a group (refused).
//! * `[metrics]`, `[tracing]`, `[log]` and `[runtime]` are the process's: one listener, one
//!   exporter, one runtime.
//! * `STRAIT_SOURCE_*` / `STRAIT_TARGET_*` are refused: they would apply to every flow's source
//!   (or target), which is a different cluster per flow. Put cluster settings in
//!   `[clusters.<alias>]`. `STRAIT_MIRROR_*` applies to every flow.

use std::path::Path;

use super::raw::{Entry, Origin, RawCluster, RawConfig, RawValue, Section, suggestion};
use super::{Config, Environment, Loaded, Rename};
use crate::error::{Error, Result};

/// Keys of a `[[flows]]` table besides the `[mirror]` keys.
pub(super) const FLOW_KEYS: &[&str] = &["source", "target"];

/// True when the parsed file uses the flows form (`[clusters.*]` or `[[flows]]`).
pub(crate) fn is_flows_form(table: &toml::Table) -> bool {
    table.contains_key("clusters") || table.contains_key("flows")
}

/// Builds one [`Config`] per `[[flows]]` entry; `Loaded::config` is the first flow.
pub(crate) fn from_table(mut table: toml::Table, path: &Path, env: &Environment) -> Result<Loaded> {
    refuse_single_flow_settings(&table, path, env)?;
    let (clusters, flows) = clusters_and_flows(&mut table)?;
    let raw_clusters = raw_clusters(clusters)?;
    // The shared sections, validated as a single-flow file would validate them.
    let shared = super::raw_from_toml(table)?;
    let mut configs: Vec<Config> = Vec::new();
    let mut warnings = Vec::new();
    for (i, flow) in flows.into_iter().enumerate() {
        let raw = flow_raw(i, flow, &shared, &raw_clusters, &configs)?;
        configs.push(Config::from_raw(raw, env)?);
    }
    check_flows(&configs, &mut warnings)?;
    Ok(Loaded {
        config: configs[0].clone(),
        warnings,
        flows: configs,
    })
}

/// `[source]`/`[target]` and `STRAIT_SOURCE_`/`STRAIT_TARGET_` belong to the one-flow form.
fn refuse_single_flow_settings(table: &toml::Table, path: &Path, env: &Environment) -> Result<()> {
    for side in ["source", "target"] {
        if table.contains_key(side) {
            return Err(Error::Invalid {
                key: format!("[{side}]"),
                expected: "either [source]/[target] (one flow) or [clusters.<alias>] with \
                           [[flows]] (several flows), not both"
                    .into(),
                got: format!(
                    "[{side}] next to [clusters]/[[flows]] in {}",
                    path.display()
                ),
            });
        }
    }
    if let Some(var) = ["STRAIT_SOURCE_", "STRAIT_TARGET_"]
        .iter()
        .find_map(|p| env.vars_with_prefix(p).next().map(str::to_string))
    {
        return Err(Error::Unsupported {
            what: format!("{var} with [clusters.<alias>] and [[flows]]"),
            hint: "each flow has its own source and target cluster, so a STRAIT_SOURCE_/ \
                   STRAIT_TARGET_ variable would not say which one; put the setting in \
                   [clusters.<alias>] (secrets can be files: ssl.keystore.location, \
                   sasl.jaas.config with a file-based login module)"
                .into(),
        });
    }
    Ok(())
}

/// The `[clusters]` table and the `[[flows]]` array, both required and non-empty.
fn clusters_and_flows(table: &mut toml::Table) -> Result<(toml::Table, Vec<toml::Value>)> {
    let clusters = match table.remove("clusters") {
        Some(toml::Value::Table(t)) if !t.is_empty() => t,
        Some(other) if !other.is_table() => {
            return Err(Error::Invalid {
                key: "clusters".into(),
                expected: "tables [clusters.<alias>] with each cluster's client properties".into(),
                got: other.to_string(),
            });
        }
        _ => {
            return Err(Error::Missing {
                key: "[clusters.<alias>]".into(),
                hint: "[[flows]] name their clusters by alias; add e.g. [clusters.a] with \
                       \"bootstrap.servers\" = \"host:9092\""
                    .into(),
            });
        }
    };
    let flows = match table.remove("flows") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a,
        Some(other) if !other.is_array() => {
            return Err(Error::Invalid {
                key: "flows".into(),
                expected: "an array of tables: [[flows]] with source = \"<alias>\" and target = \
                           \"<alias>\""
                    .into(),
                got: other.to_string(),
            });
        }
        _ => {
            return Err(Error::Missing {
                key: "[[flows]]".into(),
                hint:
                    "add one [[flows]] table per direction, e.g. source = \"a\" and target = \"b\""
                        .into(),
            });
        }
    };
    Ok((clusters, flows))
}

/// Each `[clusters.<alias>]` as a raw cluster named by its alias.
fn raw_clusters(clusters: toml::Table) -> Result<Vec<(String, RawCluster)>> {
    let mut raw_clusters: Vec<(String, RawCluster)> = Vec::new();
    for (alias, body) in clusters {
        let toml::Value::Table(body) = body else {
            return Err(Error::Invalid {
                key: format!("clusters.{alias}"),
                expected: format!("a table [clusters.{alias}] of client properties"),
                got: body.to_string(),
            });
        };
        let section = format!("clusters.{alias}");
        let mut c = super::raw_cluster(&section, body)?;
        if c.alias.is_some() {
            return Err(Error::UnknownKey {
                key: format!("{section}.alias"),
                suggestion: "; the alias is the table's name ([clusters.<alias>])".into(),
            });
        }
        c.alias = Some(Entry::text(alias.clone(), Origin::File));
        raw_clusters.push((alias, c));
    }
    Ok(raw_clusters)
}

/// The raw configuration of the `i`-th `[[flows]]` table: the shared sections, its clusters,
/// its default group, and its own `[mirror]` keys; `configs` are the flows before it.
fn flow_raw(
    i: usize,
    flow: toml::Value,
    shared: &RawConfig,
    raw_clusters: &[(String, RawCluster)],
    configs: &[Config],
) -> Result<RawConfig> {
    let aliases: Vec<&str> = raw_clusters.iter().map(|(a, _)| a.as_str()).collect();
    let key = format!("flows[{i}]");
    let toml::Value::Table(flow) = flow else {
        return Err(Error::Invalid {
            key,
            expected: "a [[flows]] table".into(),
            got: flow.to_string(),
        });
    };
    let alias_of = |side: &str| -> Result<String> {
        match flow.get(side) {
            Some(toml::Value::String(s)) if aliases.contains(&s.as_str()) => Ok(s.clone()),
            Some(v) => Err(Error::Invalid {
                key: format!("{key}.{side}"),
                expected: format!("one of the [clusters.*] aliases ({})", aliases.join(", ")),
                got: v.to_string(),
            }),
            None => Err(Error::Missing {
                key: format!("{key}.{side}"),
                hint: format!("name the {side} cluster, e.g. {side} = \"{}\"", aliases[0]),
            }),
        }
    };
    let (source, target) = (alias_of("source")?, alias_of("target")?);
    let name = format!("{source}->{target}");
    if source == target {
        return Err(Error::Invalid {
            key: format!("{key}.target"),
            expected: "a cluster other than the flow's source".into(),
            got: format!("{target:?}"),
        });
    }
    if configs
        .iter()
        .any(|c| c.source.alias == source && c.target.alias == target)
    {
        return Err(Error::Invalid {
            key: key.clone(),
            expected: "each source -> target pair once".into(),
            got: format!("a second flow {name}"),
        });
    }
    let mut raw: RawConfig = shared.clone();
    raw.source = cluster_named(raw_clusters, &source);
    raw.target = cluster_named(raw_clusters, &target);
    if !raw.contains(Section::Mirror, "group_id") {
        raw.set(
            Section::Mirror,
            "group_id",
            Entry::text(
                format!("strait-{source}-{target}"),
                Origin::Compat(format!("the default group of flow {name}")),
            ),
        );
    }
    for (k, v) in flow {
        if FLOW_KEYS.contains(&k.as_str()) {
            continue;
        }
        if !Section::Mirror.keys().contains(&k.as_str()) {
            let mut valid: Vec<&str> = FLOW_KEYS.to_vec();
            valid.extend_from_slice(Section::Mirror.keys());
            return Err(Error::UnknownKey {
                key: format!("{key}.{k} (flow {name})"),
                suggestion: suggestion(&k, &valid),
            });
        }
        raw.set(
            Section::Mirror,
            &k,
            Entry {
                value: RawValue::Toml(v),
                origin: Origin::Compat(format!("flow {name}")),
            },
        );
    }
    Ok(raw)
}

fn cluster_named(clusters: &[(String, RawCluster)], alias: &str) -> RawCluster {
    clusters
        .iter()
        .find(|(a, _)| a == alias)
        .map(|(_, c)| c.clone())
        .unwrap_or_default()
}

/// Rules across flows, for every source of flows (TOML and MirrorMaker 2): no two flows from one
/// source cluster share a consumer group; identity naming in both directions is flagged.
pub(crate) fn check_flows(flows: &[Config], warnings: &mut Vec<String>) -> Result<()> {
    for (i, a) in flows.iter().enumerate() {
        for b in &flows[i + 1..] {
            if a.source.alias == b.source.alias && a.mirror.group_id == b.mirror.group_id {
                return Err(Error::Invalid {
                    key: "mirror.group_id".into(),
                    expected: format!(
                        "a consumer group per flow: flows {} and {} both read cluster {} with \
                         group {:?}, so they would take each other's partitions; set group_id \
                         in each [[flows]] table (or leave it unset: strait-<source>-<target>)",
                        flow_name(a),
                        flow_name(b),
                        a.source.alias,
                        a.mirror.group_id
                    ),
                    got: format!("{:?}", a.mirror.group_id),
                });
            }
            let opposite = a.source.alias == b.target.alias && a.target.alias == b.source.alias;
            if opposite
                && (a.mirror.rename == Rename::Identity || b.mirror.rename == Rename::Identity)
            {
                warnings.push(format!(
                    "flows {} and {} run in both directions with rename = \"identity\": a topic \
                     both select would be copied back and forth forever (identity names cannot \
                     tell a mirrored topic from a local one). Use rename = \"prefix\" (MirrorMaker \
                     2's DefaultReplicationPolicy), or keep the two topic selections disjoint",
                    flow_name(a),
                    flow_name(b)
                ));
            }
        }
    }
    Ok(())
}

/// Several flows as one strait.toml in the `[clusters.<alias>]` + `[[flows]]` form: each cluster
/// once, each flow with all its `[mirror]` settings, `[metrics]`, `[tracing]` and `[log]` of the
/// first flow (they are the process's). `redact` as in [`Config::to_toml`].
pub fn to_toml(flows: &[Config], redact: bool) -> String {
    let mut clusters = toml::Table::new();
    let mut tables = Vec::new();
    let mut doc = toml::Table::new();
    for c in flows {
        let mut t: toml::Table = c.to_toml(redact).parse().unwrap_or_default();
        for side in ["source", "target"] {
            if let Some(toml::Value::Table(mut cluster)) = t.remove(side) {
                let alias = match cluster.remove("alias") {
                    Some(toml::Value::String(a)) => a,
                    _ => continue,
                };
                clusters.entry(alias).or_insert(toml::Value::Table(cluster));
            }
        }
        let mut flow = toml::Table::new();
        flow.insert("source".into(), c.source.alias.clone().into());
        flow.insert("target".into(), c.target.alias.clone().into());
        if let Some(toml::Value::Table(mirror)) = t.remove("mirror") {
            flow.extend(mirror);
        }
        tables.push(toml::Value::Table(flow));
        for (section, body) in t {
            doc.entry(section).or_insert(body);
        }
    }
    let mut out = toml::Table::new();
    out.insert("clusters".into(), toml::Value::Table(clusters));
    out.extend(doc);
    out.insert("flows".into(), toml::Value::Array(tables));
    toml::to_string(&out).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

/// `source->target`.
pub fn flow_name(c: &Config) -> String {
    format!("{}->{}", c.source.alias, c.target.alias)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TWO: &str = r#"
[clusters.a]
"bootstrap.servers" = "a:9092"
security.protocol = "SSL"
[clusters.b]
"bootstrap.servers" = "b:9092"

[mirror]
rename = "prefix"
topics = ["orders.*"]
commit_interval = "1s"

[[flows]]
source = "a"
target = "b"

[[flows]]
source = "b"
target = "a"
topics = ["payments"]
group_id = "back"
"#;

    fn load(text: &str) -> Result<Loaded> {
        load_env(text, &[])
    }

    fn load_env(text: &str, env: &[(&str, &str)]) -> Result<Loaded> {
        Config::from_toml_str(
            text,
            Path::new("strait.toml"),
            &Environment::from_pairs(env.iter().copied()),
        )
    }

    #[test]
    fn each_flow_is_a_whole_config_with_its_own_group() {
        let loaded = load(TWO).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let [ab, ba] = &loaded.flows[..] else {
            panic!("two flows: {:?}", loaded.flows.len())
        };
        assert_eq!(flow_name(ab), "a->b");
        assert_eq!(flow_name(ba), "b->a");
        assert_eq!(loaded.config.source.alias, "a");
        assert_eq!(ab.mirror.group_id, "strait-a-b");
        assert_eq!(ba.mirror.group_id, "back");
        assert_eq!(ab.mirror.topics.include(), ["orders.*"]);
        assert_eq!(ba.mirror.topics.include(), ["payments"]);
        // Shared [mirror] keys apply to every flow; clusters follow their alias.
        assert_eq!(ba.mirror.commit_interval, std::time::Duration::from_secs(1));
        assert_eq!(ab.source.property("security.protocol"), Some("SSL"));
        assert_eq!(ba.target.property("security.protocol"), Some("SSL"));
        assert_eq!(ba.source.property("security.protocol"), None);
        assert_eq!(ab.target_topic("orders"), "a.orders");
        assert_eq!(ba.target_topic("payments"), "b.payments");
        // Mirrors of the other side are never selected: no loop.
        assert!(!ab.selects("b.orders.x"));
        // Heartbeats follow `topics` unless replicate_heartbeats (MirrorMaker 2's default).
        assert!(!ab.mirror.replicate_heartbeats);
        assert!(!ab.selects("heartbeats"));
        assert!(!ba.selects("a.payments"));
        assert_eq!(loaded.all_flows().len(), 2);
    }

    #[test]
    fn flows_render_as_a_file_that_loads_the_same_flows() {
        let loaded = load(TWO).unwrap();
        let text = to_toml(&loaded.flows, false);
        let again = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again.flows.len(), 2);
        for (a, b) in loaded.flows.iter().zip(&again.flows) {
            assert_eq!(a.to_toml(false), b.to_toml(false));
        }
    }

    #[test]
    fn the_single_flow_form_is_unchanged() {
        let loaded = load(
            "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \"b:1\"\n",
        )
        .unwrap();
        assert!(loaded.flows.is_empty());
        assert_eq!(loaded.all_flows().len(), 1);
        assert_eq!(loaded.config.mirror.group_id, "strait");
    }

    #[test]
    fn mistakes_are_named() {
        let err = |text: &str| load(text).unwrap_err().to_string();
        let e = err(&format!(
            "{TWO}\n[source]\n\"bootstrap.servers\" = \"a:1\"\n"
        ));
        assert!(
            e.starts_with("[source]: expected either [source]/[target]"),
            "{e}"
        );
        let e = err(&TWO.replace("target = \"b\"", "target = \"c\""));
        assert!(
            e.starts_with("flows[0].target: expected one of the [clusters.*] aliases (a, b)"),
            "{e}"
        );
        let e = err(&TWO.replace("group_id = \"back\"", "grop_id = \"back\""));
        assert!(
            e.starts_with("flows[1].grop_id (flow b->a): unknown key; did you mean \"group_id\"?"),
            "{e}"
        );
        let e = err(&TWO.replace("target = \"a\"", "target = \"b\""));
        assert!(e.contains("a cluster other than the flow's source"), "{e}");
        let e = err("[clusters.a]\n\"bootstrap.servers\" = \"a:1\"\n");
        assert!(e.starts_with("[[flows]]: missing"), "{e}");
        let e = err(&TWO.replace("topics = [\"payments\"]", "topics = [\"(\"]"));
        assert!(e.contains("(from flow b->a)"), "{e}");
        // The environment cannot say which flow's source it means.
        let e = load_env(TWO, &[("STRAIT_SOURCE_SASL_PASSWORD", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("STRAIT_SOURCE_SASL_PASSWORD"), "{e}");
        // STRAIT_MIRROR_* applies to every flow.
        let loaded = load_env(TWO, &[("STRAIT_MIRROR_START", "latest")]).unwrap();
        assert!(
            loaded
                .flows
                .iter()
                .all(|c| c.mirror.start == super::super::StartPosition::Latest)
        );
    }

    #[test]
    fn two_flows_from_one_source_need_two_groups() {
        let three = format!(
            "{TWO}\n[clusters.c]\n\"bootstrap.servers\" = \"c:1\"\n\n[[flows]]\nsource = \"b\"\ntarget = \"c\"\ngroup_id = \"back\"\n"
        );
        let e = load(&three).unwrap_err().to_string();
        assert!(
            e.contains("flows b->a and b->c both read cluster b with group \"back\""),
            "{e}"
        );
        // Left to the defaults they differ.
        assert!(load(&three.replace("group_id = \"back\"", "")).is_ok());
    }

    #[test]
    fn identity_names_both_ways_are_flagged() {
        let loaded = load(&TWO.replace("rename = \"prefix\"", "rename = \"identity\"")).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].contains("copied back and forth forever"));
    }
}
