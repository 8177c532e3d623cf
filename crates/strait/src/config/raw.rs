//! The untyped layer every configuration source writes into before validation.
//!
//! The TOML file, the environment, and the MirrorMaker 1/2 translators all fill a [`RawConfig`];
//! `Config::from_raw` then validates it in one place. Each value remembers where it came
//! from so an error can name the key the operator actually wrote (`STRAIT_MIRROR_START`,
//! `mm2.properties key A->B.topics`, ...).

use std::fmt;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The strait.toml file (the key alone says enough).
    File,
    /// An environment variable (its name).
    Env(String),
    /// A MirrorMaker setting: a description such as `mm2.properties key A->B.topics`.
    Compat(String),
}

impl Origin {
    /// Formats `section.key`, adding the origin when it is not the TOML file.
    pub(crate) fn describe(&self, key: &str) -> String {
        match self {
            Origin::File => key.to_string(),
            Origin::Env(var) => format!("{key} (from {var})"),
            Origin::Compat(what) => format!("{key} (from {what})"),
        }
    }
}

/// A value before it is checked against its key's type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawValue {
    /// Typed by the TOML parser.
    Toml(toml::Value),
    /// A string from the environment or a properties file, parsed per key.
    Text(String),
}

impl fmt::Display for RawValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawValue::Toml(toml::Value::String(s)) | RawValue::Text(s) => write!(f, "{s:?}"),
            RawValue::Toml(v) => write!(f, "{v}"),
        }
    }
}

/// One setting with its origin.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) value: RawValue,
    pub(crate) origin: Origin,
}

impl Entry {
    pub(crate) fn text(value: impl Into<String>, origin: Origin) -> Entry {
        Entry {
            value: RawValue::Text(value.into()),
            origin,
        }
    }
}

/// The settings sections with a fixed set of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Section {
    Mirror,
    Metrics,
    Tracing,
    Log,
    Runtime,
}

impl Section {
    pub(crate) const ALL: [Section; 5] = [
        Section::Mirror,
        Section::Metrics,
        Section::Tracing,
        Section::Log,
        Section::Runtime,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Section::Mirror => "mirror",
            Section::Metrics => "metrics",
            Section::Tracing => "tracing",
            Section::Log => "log",
            Section::Runtime => "runtime",
        }
    }

    /// The keys this section accepts.
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            Section::Mirror => &[
                "topics",
                "topics_exclude",
                "rename",
                "separator",
                "replicate_heartbeats",
                "start",
                "group_id",
                "memory_budget",
                "max_decompressed_batch_bytes",
                "refresh_interval",
                "commit_interval",
                "session_timeout",
                "drain_timeout",
                "instance_id",
                "group_protocol",
                "group_remote_assignor",
                "leave_group_on_shutdown",
                "replication_factor",
                "create_topics",
                "sync_topic_configs",
                "sync_topic_configs_interval",
                "topic_configs_exclude",
                "isolation",
                "compression",
                "on_offset_out_of_range",
                "max_in_flight",
                "produce_connections",
                "batch_size",
                "partition_assignment_strategy",
                "groups",
                "groups_exclude",
                "checkpoint_interval",
                "sync_group_offsets",
                "sync_group_offsets_interval",
                "sync_topic_acls",
                "sync_topic_acls_interval",
                "protect_mirrors",
                "target_principal",
                "exactly_once",
                "transaction_interval",
                "transaction_max_bytes",
                "transaction_timeout",
                "position_refresh_interval",
            ],
            Section::Metrics => &["listen", "lag_interval", "stall_timeout", "mm2_compat"],
            Section::Tracing => &[
                "otlp_endpoint",
                "mode",
                "sample_ratio",
                "records_per_second",
                "service_name",
            ],
            Section::Log => &["format", "level"],
            Section::Runtime => &["worker_threads"],
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A cluster section (`[source]` or `[target]`) before validation. `Debug` redacts secrets.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct RawCluster {
    pub(crate) alias: Option<Entry>,
    /// Client properties in first-set order; setting a key again replaces its value in place.
    pub(crate) properties: Vec<(String, String, Origin)>,
    /// The config providers the properties' `${provider:...}` references may use.
    pub(crate) providers: super::providers::Providers,
}

impl fmt::Debug for RawCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let properties = self
            .properties
            .iter()
            .map(|(k, v, _)| (k.as_str(), v.as_str()))
            .collect();
        f.debug_struct("RawCluster")
            .field("alias", &self.alias)
            .field("properties", &super::RedactedProperties(properties))
            .finish()
    }
}

impl RawCluster {
    pub(crate) fn set_property(&mut self, key: &str, value: impl Into<String>, origin: Origin) {
        let value = value.into();
        match self.properties.iter_mut().find(|(k, _, _)| k == key) {
            Some(slot) => {
                slot.1 = value;
                slot.2 = origin;
            }
            None => self.properties.push((key.to_string(), value, origin)),
        }
    }

    pub(crate) fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, _)| v.as_str())
    }
}

/// All settings before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RawConfig {
    pub(crate) source: RawCluster,
    pub(crate) target: RawCluster,
    settings: Vec<(Section, String, Entry)>,
}

impl RawConfig {
    /// Sets `section.key`, replacing an earlier value (later sources override earlier ones).
    pub(crate) fn set(&mut self, section: Section, key: &str, entry: Entry) {
        match self
            .settings
            .iter_mut()
            .find(|(s, k, _)| *s == section && k == key)
        {
            Some(slot) => slot.2 = entry,
            None => self.settings.push((section, key.to_string(), entry)),
        }
    }

    pub(crate) fn get(&self, section: Section, key: &str) -> Option<&Entry> {
        self.settings
            .iter()
            .find(|(s, k, _)| *s == section && k == key)
            .map(|(_, _, e)| e)
    }

    pub(crate) fn contains(&self, section: Section, key: &str) -> bool {
        self.get(section, key).is_some()
    }
}

/// `; did you mean "x"?` when `given` is close to one of `valid`, else the list of valid names.
pub(crate) fn suggestion(given: &str, valid: &[&str]) -> String {
    let best = valid
        .iter()
        .map(|v| (strsim::jaro_winkler(given, v), *v))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((score, name)) if score >= 0.8 => format!("; did you mean \"{name}\"?"),
        _ => format!("; valid keys: {}", valid.join(", ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn later_values_replace_earlier_ones_in_place() {
        let mut raw = RawConfig::default();
        raw.set(
            Section::Mirror,
            "start",
            Entry::text("latest", Origin::File),
        );
        raw.set(
            Section::Mirror,
            "start",
            Entry::text("earliest", Origin::Env("STRAIT_MIRROR_START".into())),
        );
        let e = raw.get(Section::Mirror, "start").unwrap();
        assert_eq!(e.value, RawValue::Text("earliest".into()));
        assert_eq!(
            e.origin.describe("mirror.start"),
            "mirror.start (from STRAIT_MIRROR_START)"
        );

        let mut c = RawCluster::default();
        c.set_property("a", "1", Origin::File);
        c.set_property("b", "2", Origin::File);
        c.set_property("a", "3", Origin::File);
        let keys: Vec<_> = c
            .properties
            .iter()
            .map(|(k, v, _)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(keys, [("a", "3"), ("b", "2")]);
    }

    #[test]
    fn suggestions_pick_close_names_or_list_all() {
        assert_eq!(
            suggestion("grop_id", Section::Mirror.keys()),
            "; did you mean \"group_id\"?"
        );
        assert!(suggestion("zzz", &["listen"]).starts_with("; valid keys: listen"));
    }
}
