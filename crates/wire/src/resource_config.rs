//! Resource configurations as DescribeConfigs returns them ([`Configs`]): a leaf module, so the
//! client's configuration cache and [`admin`](crate::admin) share the type without importing
//! each other.

/// Where a configuration value comes from (DescribeConfigs `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigSource {
    /// Set on the topic itself.
    Topic,
    /// Set dynamically for this broker.
    DynamicBroker,
    /// Set dynamically as the cluster-wide broker default.
    DynamicDefaultBroker,
    /// From the broker's `server.properties`.
    StaticBroker,
    /// Kafka's built-in default.
    Default,
    /// A dynamic broker logger level.
    DynamicBrokerLogger,
    /// A client-metrics subscription.
    ClientMetrics,
    /// Set on a group.
    Group,
    /// A source this client does not know (the raw code).
    Unknown(i8),
}

impl ConfigSource {
    pub(crate) fn from_code(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::Topic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            7 => ConfigSource::ClientMetrics,
            8 => ConfigSource::Group,
            other => ConfigSource::Unknown(other),
        }
    }
}

/// One configuration entry of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The key, e.g. `retention.ms`.
    pub name: String,
    /// The value; `None` for sensitive values (and unset ones).
    pub value: Option<String>,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// Whether it can be changed.
    pub read_only: bool,
    /// Whether the value is a secret (then `value` is `None`).
    pub sensitive: bool,
}

impl ConfigEntry {
    /// For topic configurations: true unless the value was set on the topic itself (it comes
    /// from the broker's or Kafka's defaults). A mirror copies the non-default ones.
    pub fn is_default(&self) -> bool {
        self.source != ConfigSource::Topic
    }
}

/// The configuration of one resource, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Configs {
    pub(crate) entries: Vec<ConfigEntry>,
}

impl Configs {
    /// The entry for `name`.
    pub fn get(&self, name: &str) -> Option<&ConfigEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The value of `name`, if set and not sensitive.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|e| e.value.as_deref())
    }

    /// Every entry.
    pub fn entries(&self) -> &[ConfigEntry] {
        &self.entries
    }

    /// Entries set on the resource itself (not defaults).
    pub fn overrides(&self) -> impl Iterator<Item = &ConfigEntry> + '_ {
        self.entries.iter().filter(|e| !e.is_default())
    }
}
