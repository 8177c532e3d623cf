//! Topic discovery on the source and topic creation on the target.
//!
//! Every `mirror.refresh_interval` the source's topics are listed and matched against the
//! include/exclude patterns. A matching topic missing on the target is created with the source's
//! partition count and (with `mirror.sync_topic_configs`) the source's topic-level overrides;
//! partitions added on the source are added on the target.
//!
//! A target topic deleted and created again (by Strait at the next refresh, or by someone else:
//! its topic id changes) has lost everything mirrored into it before: that is reported as a loss
//! event (ERROR log, `strait_loss_events_total{reason="target_topic_recreated"}`), not only as
//! "created target topic". Deletions while Strait was not running cannot be seen.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strait_wire::admin::{Admin, CreateTopicOutcome, NewTopic};
use strait_wire::{Client, Error as WireError, TopicId};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Loss-event label of a deleted and re-created target topic.
const RECREATED: &str = "target_topic_recreated";

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

/// The target topics seen so far and their ids, to tell a re-created topic from a new one.
#[derive(Debug, Default)]
struct TargetHistory {
    seen: HashMap<String, Option<TopicId>>,
}

impl TargetHistory {
    /// `topic` exists on the target with `id`. Returns the id it had before if it changed
    /// (deleted and created again since the last refresh).
    fn exists(&mut self, topic: &str, id: Option<TopicId>) -> Option<TopicId> {
        match self.seen.insert(topic.to_string(), id) {
            Some(Some(before)) if id.is_some_and(|now| now != before) => Some(before),
            _ => None,
        }
    }

    /// Strait created `topic` with `id`. True if the topic had existed before (it was deleted).
    fn created(&mut self, topic: &str, id: Option<TopicId>) -> bool {
        self.seen.insert(topic.to_string(), id).is_some()
    }
}

/// Finds the topics to mirror and makes sure they exist on the target.
pub struct Topics {
    source: Client,
    source_admin: Admin,
    target: Client,
    target_admin: Admin,
    config: Config,
    metrics: Option<Arc<Metrics>>,
    history: Mutex<TargetHistory>,
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
            metrics: None,
            history: Mutex::new(TargetHistory::default()),
        }
    }

    /// Reports losses (a re-created target topic) to `metrics` as well as to the log.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn history(&self) -> std::sync::MutexGuard<'_, TargetHistory> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything mirrored into `topic.target` before its deletion is gone from the target.
    fn report_recreated(&self, topic: &SelectedTopic, how: &str) {
        tracing::error!(
            topic = %topic.target, source_topic = %topic.source,
            "target topic {} {how}: every record mirrored into it before the deletion is gone from              the target (data loss on the target). The mirror continues from its committed source              positions; to copy the source topic again, stop strait and reset the group's positions              (kafka-consumer-groups.sh --group {} --topic {} --reset-offsets --to-earliest --execute              on the source cluster)",
            topic.target, self.config.mirror.group_id, topic.source
        );
        if let Some(m) = &self.metrics {
            m.record_loss_event(&Arc::from(topic.source.as_str()), RECREATED);
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
            let found = md.topic(&topic.target).filter(|t| t.error.is_none());
            if let Some(t) = found {
                let before = self.history().exists(&topic.target, t.id);
                if let (Some(before), Some(now)) = (before, t.id) {
                    self.report_recreated(
                        topic,
                        &format!(
                            "was deleted and created again (its topic id changed from {before} to {now})"
                        ),
                    );
                }
            }
            let existing = found.map(|t| t.partitions.len());
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
                        .map_err(|source| Error::Admin {
                            action: format!(
                                "cannot add partitions to target topic {}",
                                topic.target
                            ),
                            source: Box::new(source),
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
            Ok(CreateTopicOutcome::Created { topic_id, .. }) => {
                if self.history().created(&topic.target, topic_id) {
                    self.report_recreated(topic, "was deleted; strait created it again");
                }
                tracing::info!(topic = %topic.target, partitions = topic.partitions, "created target topic");
                self.await_leaders(&topic.target, topic.partitions).await;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(source) => Err(Error::Admin {
                action: format!(
                    "cannot create target topic {} for source topic {}",
                    topic.target, topic.source
                ),
                source: Box::new(source),
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(n: u8) -> Option<TopicId> {
        TopicId::from_bytes([n; 16])
    }

    #[test]
    fn target_history_tells_recreated_topics_from_new_ones() {
        // (step, topic id, expected: re-created?)
        enum Step {
            Exists(Option<TopicId>),
            Created(Option<TopicId>),
        }
        use Step::*;
        #[rustfmt::skip]
        let cases: &[(&str, &[Step], bool)] = &[
            ("first sight", &[Exists(id(1))], false),
            ("same id", &[Exists(id(1)), Exists(id(1))], false),
            ("id changed between refreshes", &[Exists(id(1)), Exists(id(2))], true),
            ("created on a fresh target", &[Created(id(1))], false),
            ("deleted, then created by strait", &[Exists(id(1)), Created(id(2))], true),
            ("no topic ids (old broker), deleted and created by strait", &[Exists(None), Created(None)], true),
            ("no topic ids, seen twice", &[Exists(None), Exists(None)], false),
            ("id appears where there was none", &[Exists(None), Exists(id(3))], false),
            // Reported once, at the creation: the next refresh sees the id strait recorded.
            ("created by strait, then seen", &[Exists(id(1)), Created(id(2)), Exists(id(2))], true),
        ];
        for (name, steps, want) in cases {
            let mut h = TargetHistory::default();
            let reports = steps
                .iter()
                .filter(|step| match step {
                    Exists(i) => h.exists("t", *i).is_some(),
                    Created(i) => h.created("t", *i),
                })
                .count();
            assert_eq!(reports, usize::from(*want), "{name}");
        }
    }
}
