//! Topic discovery on the source and topic creation on the target.
//!
//! Every `mirror.refresh_interval` the source's topics are listed and matched against the
//! include/exclude patterns. A matching topic missing on the target is created with the source's
//! partition count and (with `mirror.sync_topic_configs`) the source's topic-level overrides;
//! partitions added on the source are added on the target.

use std::collections::BTreeMap;
use std::time::Duration;

use strait_wire::admin::{Admin, CreateTopicOutcome, NewTopic};
use strait_wire::{Client, Error as WireError};

use crate::config::Config;
use crate::error::{Error, Result};

/// Topic-level configs worth carrying to the target. Broker-specific settings (e.g. placement,
/// throttles, tiered storage) are left out on purpose: they describe the source cluster, not
/// the data.
const COPIED_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
];

/// One source topic selected for mirroring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedTopic {
    /// Name on the source.
    pub source: String,
    /// Name on the target.
    pub target: String,
    /// Partitions on the source.
    pub partitions: i32,
}

/// Finds the topics to mirror and makes sure they exist on the target.
pub struct Topics {
    source: Client,
    source_admin: Admin,
    target: Client,
    target_admin: Admin,
    config: Config,
}

impl Topics {
    /// Discovery over the two clusters.
    pub fn new(source: Client, target: Client, config: Config) -> Self {
        let source_admin = Admin::new(&source);
        let target_admin = Admin::new(&target);
        Topics {
            source,
            source_admin,
            target,
            target_admin,
            config,
        }
    }

    /// The source topics that match, by source name.
    pub async fn discover(&self) -> Result<BTreeMap<String, SelectedTopic>> {
        let md = self.source.metadata(None).await.map_err(Error::Wire)?;
        let mut selected = BTreeMap::new();
        for topic in md.topics.values() {
            if topic.is_internal || topic.error.is_some() || !self.config.selects(&topic.name) {
                continue;
            }
            selected.insert(
                topic.name.to_string(),
                SelectedTopic {
                    source: topic.name.to_string(),
                    target: self.config.target_topic(&topic.name),
                    partitions: i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX),
                },
            );
        }
        Ok(selected)
    }

    /// Discovers, then creates missing target topics and partitions. Returns what is mirrored.
    pub async fn sync(&self) -> Result<BTreeMap<String, SelectedTopic>> {
        let selected = self.discover().await?;
        if selected.is_empty() {
            return Ok(selected);
        }
        let names: Vec<String> = selected.values().map(|t| t.target.clone()).collect();
        let md = self
            .target
            .metadata(Some(&names))
            .await
            .map_err(Error::Wire)?;
        for topic in selected.values() {
            let existing = md
                .topic(&topic.target)
                .filter(|t| t.error.is_none())
                .map(|t| t.partitions.len());
            match existing {
                None if self.config.mirror.create_topics => self.create(topic).await?,
                None => {
                    return Err(Error::Runtime(format!(
                        "target topic {} (for source topic {}) does not exist and mirror.create_topics is false; \
                         create it with {} partitions, or set mirror.create_topics = true",
                        topic.target, topic.source, topic.partitions
                    )));
                }
                Some(n)
                    if (n as i64) < i64::from(topic.partitions)
                        && self.config.mirror.create_topics =>
                {
                    tracing::info!(topic = %topic.target, from = n, to = topic.partitions, "adding partitions on the target");
                    self.target_admin
                        .create_partitions(&topic.target, topic.partitions)
                        .await
                        .map_err(|e| {
                            Error::Runtime(format!(
                                "cannot add partitions to target topic {}: {e}",
                                topic.target
                            ))
                        })?;
                    self.await_leaders(&topic.target, topic.partitions).await;
                }
                Some(n) if (n as i64) < i64::from(topic.partitions) => {
                    return Err(Error::Runtime(format!(
                        "target topic {} has {n} partitions but the source has {}; add partitions on the target \
                         or set mirror.create_topics = true",
                        topic.target, topic.partitions
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(selected)
    }

    /// Gives a new topic (or new partitions) a moment to get leaders, so the first produce does
    /// not meet NOT_LEADER_OR_FOLLOWER and a retry backoff. Not getting there is not an error:
    /// the produce path retries (and says so) anyway.
    async fn await_leaders(&self, topic: &str, partitions: i32) {
        match self
            .target_admin
            .wait_for_leaders(topic, partitions, Duration::from_secs(5))
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(topic, "target topic has no leader for every partition yet")
            }
            Err(e) => {
                tracing::debug!(topic, error = %e, "cannot read the target topic's metadata yet")
            }
        }
    }

    async fn create(&self, topic: &SelectedTopic) -> Result<()> {
        let mut new = NewTopic::new(
            topic.target.clone(),
            topic.partitions,
            self.config.mirror.replication_factor,
        );
        if self.config.mirror.sync_topic_configs {
            match self
                .source_admin
                .describe_topic_configs(&topic.source)
                .await
            {
                Ok(configs) => {
                    for entry in configs.overrides() {
                        if COPIED_CONFIGS.contains(&entry.name.as_str())
                            && let Some(value) = &entry.value
                        {
                            new = new.with_config(entry.name.clone(), value.clone());
                        }
                    }
                }
                Err(e @ WireError::Authorization { .. }) => tracing::warn!(
                    topic = %topic.source, error = %e,
                    "cannot read the source topic's configuration; creating the target topic with broker defaults \
                     (grant DescribeConfigs on the source topic to copy retention, cleanup policy and limits)"
                ),
                Err(e) => return Err(Error::Wire(e)),
            }
        }
        match self.target_admin.create_topic(&new).await {
            Ok(CreateTopicOutcome::Created { .. }) => {
                tracing::info!(topic = %topic.target, partitions = topic.partitions, "created target topic");
                self.await_leaders(&topic.target, topic.partitions).await;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(Error::Runtime(format!(
                "cannot create target topic {} for source topic {}: {e}",
                topic.target, topic.source
            ))),
        }
    }
}
