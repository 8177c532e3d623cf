//! Topic discovery on the source and topic creation on the target.
//!
//! Every `mirror.refresh_interval` the source's topics are listed and matched against the
//! include/exclude patterns. A matching topic missing on the target is created with the source's
//! partition count and (with `mirror.sync_topic_configs`) the source's topic-level overrides;
//! partitions added on the source are added on the target.
//!
//! **Replication factor.** By default (`mirror.replication_factor = "source"`) a created topic
//! gets the source topic's replication factor, capped by the target's broker count (with a
//! warning naming the setting); an explicit number, or -1 for the target broker's default, wins.
//! The broker default is a trap: a target with `default.replication.factor=1` and
//! `min.insync.replicas=2` creates topics that refuse every `acks=all` write.
//!
//! **Configs.** Every topic-level override of the source topic is copied except the keys
//! `mirror.topic_configs_exclude` matches (MirrorMaker 2's `config.properties.exclude` defaults,
//! without `min.insync.replicas`). `min.insync.replicas` never exceeds the target topic's
//! replication factor: a copied value above it is lowered, and a created topic whose factor is
//! below the target cluster's default `min.insync.replicas` gets its own value, each with a
//! warning saying why. Every `mirror.sync_topic_configs_interval` the overrides of every
//! mirrored topic are compared again and the changed ones set on the target with
//! IncrementalAlterConfigs (only those keys; excluded keys and keys the source does not set are
//! never touched). A failure (missing DescribeConfigs on the source or AlterConfigs on the
//! target) is logged once with its fix and retried at the next interval, never stopping the
//! mirror; the recovery is logged too.
//!
//! A target topic deleted and created again (by Strait at the next refresh, or by someone else:
//! its topic id changes) has lost everything mirrored into it before: that is reported as a loss
//! event (ERROR log, `strait_loss_events_total{reason="target_topic_recreated"}`), not only as
//! "created target topic". Deletions while Strait was not running cannot be seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use strait_wire::admin::{
    Admin, AlterConfigOp, ConfigEntry, ConfigSource, CreateTopicOutcome, NewTopic,
};
use strait_wire::{Client, ClusterMetadata, Error as WireError, ResponseError, TopicId};

use crate::config::{Config, ConfigExclude, format_duration};
use crate::error::{Error, Result};
use crate::observe::metrics::Metrics;
use crate::run::topic_creation::{Absent, Creations};
use crate::run::topic_gate::Holds;

/// Source topic configs read at the same time before creating target topics (pipelined on the
/// source connection).
const CONFIG_READS: usize = 32;

/// Target topics per CreateTopics request: the controller writes them as one batch.
const CREATE_BATCH: usize = 100;

/// Loss-event label of a deleted and re-created target topic.
const RECREATED: &str = "target_topic_recreated";

/// The config key that must never exceed the replication factor.
const MIN_ISR: &str = "min.insync.replicas";

/// The replication factor for a topic Strait creates, and a warning when the source's factor
/// had to be capped. `explicit` is `mirror.replication_factor` when set to a number (-1 = the
/// target broker's default): it wins, as written. Otherwise the source topic's factor, at most
/// the target's broker count (`target_brokers`, 0 = unknown).
pub(crate) fn choose_replication_factor(
    explicit: Option<i16>,
    source_rf: Option<i16>,
    target_brokers: usize,
    target_topic: &str,
) -> (i16, Option<String>) {
    if let Some(n) = explicit {
        return (n, None);
    }
    let Some(rf) = source_rf.filter(|rf| *rf > 0) else {
        // The source's metadata named no replicas: let the target decide.
        return (-1, None);
    };
    let brokers = i16::try_from(target_brokers).unwrap_or(i16::MAX);
    if brokers > 0 && rf > brokers {
        return (
            brokers,
            Some(format!(
                "the source topic has replication factor {rf} but the target cluster has {brokers} broker(s): creating {target_topic} with replication factor {brokers}, so the mirror is less durable than the source; add target brokers, or set mirror.replication_factor to choose the factor yourself"
            )),
        );
    }
    (rf, None)
}

/// The source topic's configs to copy: its own overrides (not defaults, not read-only, not
/// secret), minus the excluded keys.
pub(crate) fn copied_configs<'a>(
    source: impl IntoIterator<Item = &'a ConfigEntry>,
    exclude: &ConfigExclude,
) -> BTreeMap<String, String> {
    source
        .into_iter()
        .filter(|e| e.source == ConfigSource::Topic && !e.read_only && !e.sensitive)
        .filter(|e| !exclude.excludes(&e.name))
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect()
}

/// Lowers a copied `min.insync.replicas` above the target topic's replication factor `rf`
/// (unknown when not positive) to `rf`, and says why: above it, every `acks=all` write would be
/// refused with NOT_ENOUGH_REPLICAS.
pub(crate) fn fit_min_isr(
    configs: &mut BTreeMap<String, String>,
    rf: i16,
    target_topic: &str,
) -> Option<String> {
    let value = configs.get(MIN_ISR)?;
    let min_isr: i64 = value.trim().parse().ok()?;
    if rf <= 0 || min_isr <= i64::from(rf) {
        return None;
    }
    configs.insert(MIN_ISR.to_string(), rf.to_string());
    Some(min_isr_lowered(
        target_topic,
        min_isr,
        rf,
        "the source topic's",
    ))
}

fn min_isr_lowered(target_topic: &str, min_isr: i64, rf: i16, whose: &str) -> String {
    format!(
        "{MIN_ISR} of {target_topic} lowered from {whose} {min_isr} to {rf}: it may not \
         exceed the topic's replication factor ({rf}), or the topic refuses every acks=all \
         write (NOT_ENOUGH_REPLICAS); add \"min\\\\.insync\\\\.replicas\" to \
         mirror.topic_configs_exclude to leave it alone"
    )
}

/// The changes that give the target topic the copied source configs: a SET for each key whose
/// target value differs. Nothing is ever deleted: a key the source no longer overrides keeps
/// its value on the target.
pub(crate) fn config_changes<'a>(
    wanted: &BTreeMap<String, String>,
    target_value: impl Fn(&str) -> Option<&'a str>,
) -> Vec<AlterConfigOp> {
    wanted
        .iter()
        .filter(|(k, v)| target_value(k) != Some(v.as_str()))
        .map(|(k, v)| AlterConfigOp::Set {
            name: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// The smallest replica count over the topic's partitions in `md` (0 when unknown).
fn replica_count(md: &ClusterMetadata, topic: &str) -> i16 {
    md.topic(topic)
        .and_then(|t| t.partitions.iter().map(|p| p.replicas.len()).min())
        .and_then(|n| i16::try_from(n).ok())
        .unwrap_or(0)
}

/// What failed in one topic's config sync, with the fix.
fn config_sync_failure(what: &str, cluster: &str, e: &WireError, interval: Duration) -> String {
    let fix = match e {
        WireError::Authorization {
            operation,
            resource,
            ..
        } => format!(
            "grant {operation} on {resource} on the {cluster} cluster to the mirror's principal"
        ),
        _ if e.code() == Some(strait_wire::ResponseError::InvalidConfig) => {
            "if a copied value is the cause, exclude its key with mirror.topic_configs_exclude"
                .to_string()
        }
        _ => "check the cluster".to_string(),
    };
    format!(
        "{what}: {e}; {fix}. Strait tries again every {} (mirror.sync_topic_configs_interval)",
        format_duration(interval)
    )
}

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
    /// The live configuration (`crate::run::reload`): its topic filters replace those of `config`.
    live: Option<Mutex<crate::config::live::Live>>,
    metrics: Option<Arc<Metrics>>,
    history: Mutex<TargetHistory>,
    /// Replication factor of each selected source topic, from the last discovery.
    source_rf: Mutex<HashMap<String, i16>>,
    config_sync: Mutex<ConfigSyncState>,
    /// Target topics asked for and not yet in the target's metadata.
    creations: Mutex<Creations>,
    /// Target topics whose partitions wait (`crate::run::topic_gate`); only with
    /// [`Topics::with_gate`], whose caller runs [`Topics::settle`].
    gate: Option<tokio::sync::watch::Sender<Holds>>,
    /// Held target topics whose configs the settler syncs, with their replication factor.
    pending_sync: Mutex<HashMap<String, (SelectedTopic, i16)>>,
}

/// When configs were last synced, and which target topics' syncs are failing (and how).
#[derive(Debug, Default)]
struct ConfigSyncState {
    last: Option<Instant>,
    failing: HashMap<String, String>,
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
            live: None,
            metrics: None,
            history: Mutex::new(TargetHistory::default()),
            source_rf: Mutex::new(HashMap::new()),
            config_sync: Mutex::new(ConfigSyncState::default()),
            creations: Mutex::new(Creations::default()),
            gate: None,
            pending_sync: Mutex::new(HashMap::new()),
        }
    }

    /// Holds target topics instead of syncing their configs in the first [`Topics::sync`]:
    /// that sync is left to [`Topics::settle`], which the caller runs beside the group join,
    /// and the caller starts a partition once [`Topics::holds`] no longer holds its target
    /// topic.
    pub fn with_gate(mut self) -> Self {
        self.gate = Some(tokio::sync::watch::Sender::new(Holds::default()));
        self
    }

    /// The held target topics, following every change (none without [`Topics::with_gate`]).
    pub(crate) fn holds(&self) -> tokio::sync::watch::Receiver<Holds> {
        match &self.gate {
            Some(gate) => gate.subscribe(),
            None => tokio::sync::watch::Sender::new(Holds::default()).subscribe(),
        }
    }

    /// Changes the holds; receivers are woken only when `f` says it changed something.
    fn update_holds(&self, f: impl FnOnce(&mut Holds) -> bool) {
        if let Some(gate) = &self.gate {
            gate.send_if_modified(f);
        }
    }

    fn pending_sync(&self) -> std::sync::MutexGuard<'_, HashMap<String, (SelectedTopic, i16)>> {
        self.pending_sync.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reports losses (a re-created target topic) to `metrics` as well as to the log.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Takes the topic filters from `live` (hot reload) instead of the start configuration.
    pub fn with_live(mut self, live: Option<crate::config::live::Live>) -> Self {
        self.live = live.map(Mutex::new);
        self
    }

    /// The live configuration, marked as seen (see [`Topics::filters_changed`]).
    fn live_config(&self) -> Option<Arc<Config>> {
        let live = self.live.as_ref()?;
        let mut rx = live.lock().unwrap_or_else(|p| p.into_inner());
        Some(rx.borrow_and_update().clone())
    }

    /// Resolves when the live configuration changed since the last discovery (never without
    /// one), so that the mirror rediscovers at once instead of at the next refresh.
    pub async fn filters_changed(&self) {
        let rx = self
            .live
            .as_ref()
            .map(|live| live.lock().unwrap_or_else(|p| p.into_inner()).clone());
        if let Some(mut rx) = rx
            && rx.changed().await.is_ok()
        {
            return;
        }
        std::future::pending().await
    }

    fn history(&self) -> std::sync::MutexGuard<'_, TargetHistory> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything mirrored into `topic.target` before its deletion is gone from the target.
    fn report_recreated(&self, topic: &SelectedTopic, how: &str) {
        tracing::error!(
            topic = %topic.target, source_topic = %topic.source,
            "target topic {} {how}: every record mirrored into it before the deletion is gone from the target (data loss on the target). The mirror continues from its committed source positions; to copy the source topic again, stop strait and reset the group's positions (kafka-consumer-groups.sh --group {} --topic {} --reset-offsets --to-earliest --execute on the source cluster)",
            topic.target, self.config.mirror.group_id, topic.source
        );
        if let Some(m) = &self.metrics {
            m.record_loss_event(&Arc::from(topic.source.as_str()), RECREATED);
        }
    }

    fn creations(&self) -> std::sync::MutexGuard<'_, Creations> {
        self.creations.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn config_sync_state(&self) -> std::sync::MutexGuard<'_, ConfigSyncState> {
        self.config_sync.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The source topic's replication factor seen at the last discovery.
    fn source_replication_factor(&self, topic: &str) -> Option<i16> {
        self.source_rf
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .copied()
    }

    /// The source topics that match, by source name.
    pub async fn discover(&self) -> Result<BTreeMap<String, SelectedTopic>> {
        let live = self.live_config();
        let config = live.as_deref().unwrap_or(&self.config);
        let md = self.source.metadata(None).await.map_err(Error::Wire)?;
        let mut selected = BTreeMap::new();
        let mut rfs = HashMap::new();
        for topic in md.topics.values() {
            if topic.is_internal || topic.error.is_some() || !config.selects(&topic.name) {
                continue;
            }
            rfs.insert(topic.name.to_string(), replica_count(&md, &topic.name));
            selected.insert(
                topic.name.to_string(),
                SelectedTopic {
                    source: topic.name.to_string(),
                    target: config.target_topic(&topic.name),
                    partitions: i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX),
                },
            );
        }
        *self.source_rf.lock().unwrap_or_else(|p| p.into_inner()) = rfs;
        Ok(selected)
    }

    /// Discovers, then creates missing target topics and partitions. Returns what is mirrored.
    pub async fn sync(&self) -> Result<BTreeMap<String, SelectedTopic>> {
        let began = Instant::now();
        let selected = self.discover().await?;
        if selected.is_empty() {
            return Ok(selected);
        }
        let discovered = Instant::now();
        let names: Vec<String> = selected.values().map(|t| t.target.clone()).collect();
        let md = self
            .target
            .metadata(Some(&names))
            .await
            .map_err(Error::Wire)?;
        let described = Instant::now();
        let mut missing = Vec::new();
        let mut settling = 0usize;
        let now = Instant::now();
        for topic in selected.values() {
            let entry = md.topic(&topic.target);
            if entry.is_some_and(|t| t.error == Some(ResponseError::LeaderNotAvailable)) {
                // Created moments ago and not served yet (a loaded target takes seconds for
                // hundreds of new topics): neither missing nor short of partitions.
                self.creations().seen(&topic.target);
                continue;
            }
            let found = entry.filter(|t| t.error.is_none());
            if found.is_none()
                && self.config.mirror.create_topics
                && self.creations().absent(&topic.target, now) == Absent::Settling
            {
                // Asked for moments ago; the broker has not published it yet.
                settling += 1;
                continue;
            }
            if let Some(t) = found {
                self.creations().seen(&topic.target);
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
                None if self.config.mirror.create_topics => missing.push(topic),
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
                    self.await_all_leaders(&[(topic.target.clone(), topic.partitions)])
                        .await;
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
        if settling > 0 {
            tracing::debug!(
                topics = settling,
                "target topics created and not yet in the target's metadata; not asking again"
            );
        }
        let created = self.create_all(&missing, md.brokers.len()).await?;
        let creating_done = Instant::now();
        let m = &self.config.mirror;
        if m.sync_topic_configs {
            let (due, first) = {
                let mut state = self.config_sync_state();
                let first = state.last.is_none();
                let due = state
                    .last
                    .is_none_or(|t| t.elapsed() >= m.sync_topic_configs_interval);
                if due {
                    state.last = Some(Instant::now());
                }
                (due, first)
            };
            if due {
                // A topic created in this round already has the source's configs, and one
                // still settling has no configs to read on the target yet.
                let existing: Vec<(&SelectedTopic, i16)> = {
                    let creations = self.creations();
                    selected
                        .values()
                        .filter(|t| {
                            !created.contains(&t.target) && !creations.is_settling(&t.target)
                        })
                        .map(|t| (t, replica_count(&md, &t.target)))
                        .collect()
                };
                if first && self.gate.is_some() {
                    // The first sync runs beside the group join (`Topics::settle`): each topic's
                    // partitions wait for its own sync, not for all 500 (1.5 s before).
                    let mut pending = self.pending_sync();
                    for (t, rf) in &existing {
                        pending.insert(t.target.clone(), ((*t).clone(), *rf));
                    }
                    drop(pending);
                    self.update_holds(|h| {
                        existing
                            .iter()
                            .fold(false, |changed, (t, _)| h.hold(&t.target) | changed)
                    });
                } else {
                    self.sync_configs_all(&existing).await;
                }
            }
        }
        // Where a refresh's time goes (the first one runs before the group join).
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_millis();
        tracing::debug!(
            topics = selected.len(),
            created = created.len(),
            discover_ms = ms(began, discovered),
            target_metadata_ms = ms(discovered, described),
            create_ms = ms(described, creating_done),
            config_sync_ms = ms(creating_done, Instant::now()),
            "topic refresh done"
        );
        Ok(selected)
    }

    /// [`sync_configs`](Self::sync_configs) for each topic, [`CONFIG_READS`] at a time: the
    /// first refresh runs before the mirror joins its group, and one topic after the other (two
    /// DescribeConfigs each) held the first record of a 500-topic mirror back by seconds; run
    /// together, the wire client's coalescing asks for many topics per request.
    async fn sync_configs_all(&self, topics: &[(&SelectedTopic, i16)]) {
        // Fed by hand, as in `create_all` (a stream adapter's closure breaks `Send`).
        let mut queue = topics.iter();
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < CONFIG_READS
                && let Some((topic, rf)) = queue.next()
            {
                running.push(self.sync_configs(topic, *rf));
            }
            if running.next().await.is_none() {
                break;
            }
        }
    }

    /// Copies the changed configs of one mirrored topic. Never fails the mirror: a failure is
    /// logged (once, with its fix) and retried at the next interval.
    async fn sync_configs(&self, topic: &SelectedTopic, target_rf: i16) {
        let result = self.sync_configs_once(topic, target_rf).await;
        // Synced or not (a failure is logged and retried at the next interval, as it always
        // was), the topic's partitions may start now.
        self.pending_sync().remove(&topic.target);
        self.update_holds(|h| h.release(&topic.target));
        let mut state = self.config_sync_state();
        match result {
            Ok(changed) => {
                if state.failing.remove(&topic.target).is_some() {
                    tracing::info!(topic = %topic.target, "topic config sync works again");
                }
                if !changed.is_empty() {
                    tracing::info!(
                        topic = %topic.target, source_topic = %topic.source, keys = ?changed,
                        "copied changed topic configs to the target topic"
                    );
                }
            }
            Err(message) => {
                let again = state.failing.get(&topic.target) == Some(&message);
                if again {
                    tracing::debug!(topic = %topic.target, "{message}");
                } else {
                    tracing::warn!(topic = %topic.target, "{message}");
                    state.failing.insert(topic.target.clone(), message);
                }
            }
        }
    }

    async fn sync_configs_once(
        &self,
        topic: &SelectedTopic,
        target_rf: i16,
    ) -> std::result::Result<Vec<String>, String> {
        let m = &self.config.mirror;
        let interval = m.sync_topic_configs_interval;
        let source = self
            .source_admin
            .describe_topic_configs(&topic.source)
            .await
            .map_err(|e| {
                config_sync_failure(
                    &format!("cannot read the configs of source topic {}", topic.source),
                    "source",
                    &e,
                    interval,
                )
            })?;
        let mut wanted = copied_configs(source.entries(), &m.topic_configs_exclude);
        let target = self
            .target_admin
            .describe_topic_configs(&topic.target)
            .await
            .map_err(|e| {
                config_sync_failure(
                    &format!("cannot read the configs of target topic {}", topic.target),
                    "target",
                    &e,
                    interval,
                )
            })?;
        let lowered = fit_min_isr(&mut wanted, target_rf, &topic.target).or_else(|| {
            // Not copied: the target cluster's default may still exceed the factor.
            if m.topic_configs_exclude.excludes(MIN_ISR) {
                return None;
            }
            let mut own: BTreeMap<String, String> = target
                .value(MIN_ISR)
                .map(|v| (MIN_ISR.to_string(), v.to_string()))
                .into_iter()
                .collect();
            let w = fit_min_isr(&mut own, target_rf, &topic.target)?;
            wanted.extend(own);
            Some(w.replace("the source topic's", "the target cluster's default"))
        });
        if let Some(w) = lowered
            && target.value(MIN_ISR) != wanted.get(MIN_ISR).map(String::as_str)
        {
            tracing::warn!(topic = %topic.target, "{w}");
        }
        let changes = config_changes(&wanted, |k| target.value(k));
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        self.target_admin
            .incremental_alter_topic_configs(&topic.target, &changes)
            .await
            .map_err(|e| {
                config_sync_failure(
                    &format!(
                        "cannot copy configs to target topic {} (IncrementalAlterConfigs)",
                        topic.target
                    ),
                    "target",
                    &e,
                    interval,
                )
            })?;
        Ok(changes.iter().map(|c| c.name().to_string()).collect())
    }

    /// Creates the missing target topics: their source configs read concurrently, then one
    /// CreateTopics request per [`CREATE_BATCH`] topics, then one wait for all their leaders.
    /// A broker handles one request of a connection at a time and holds CreateTopics until the
    /// topic is in its metadata, so one request per topic cost ~150 ms each on a loaded box: a
    /// fresh target with 500 topics waited over 50 s for its first record. Returns the names
    /// created; the first failure fails the round (the others are still created, and the next
    /// round finds them).
    async fn create_all(
        &self,
        missing: &[&SelectedTopic],
        target_brokers: usize,
    ) -> Result<BTreeSet<String>> {
        let mut created = BTreeSet::new();
        if missing.is_empty() {
            return Ok(created);
        }
        if missing.len() > 1 {
            tracing::info!(topics = missing.len(), "creating missing target topics");
        }
        // A FuturesUnordered fed by hand rather than a stream adapter over a closure: the
        // closure's borrow of `self` makes the mirror's future fail `Send` (rust#102211).
        let mut queue = missing.iter();
        let mut running = FuturesUnordered::new();
        let mut plans = Vec::with_capacity(missing.len());
        loop {
            while running.len() < CONFIG_READS
                && let Some(topic) = queue.next()
            {
                running.push(self.plan(topic, target_brokers));
            }
            match running.next().await {
                Some(plan) => plans.push(plan?),
                None => break,
            }
        }
        let mut first_error = None;
        let mut waits = Vec::new();
        for chunk in plans.chunks(CREATE_BATCH) {
            let new: Vec<NewTopic> = chunk.iter().map(|p| p.new.clone()).collect();
            let mut results = match self.target_admin.create_topics(&new, false).await {
                Ok(r) => r,
                Err(source) => {
                    return Err(Error::Admin {
                        action: format!(
                            "cannot create {} target topics ({} to {})",
                            chunk.len(),
                            chunk[0].topic.target,
                            chunk[chunk.len() - 1].topic.target
                        ),
                        source: Box::new(source),
                    });
                }
            };
            let answered = Instant::now();
            for plan in chunk {
                let result = results.remove(&plan.topic.target).unwrap_or_else(|| {
                    Err(WireError::InvalidArgument(format!(
                        "CreateTopics gave no result for '{}'",
                        plan.topic.target
                    )))
                });
                match result {
                    Ok(CreateTopicOutcome::Created {
                        topic_id,
                        replication_factor,
                        ..
                    }) => {
                        if self.history().created(&plan.topic.target, topic_id) {
                            self.report_recreated(
                                plan.topic,
                                "was deleted; strait created it again",
                            );
                        }
                        let rf = replication_factor.unwrap_or(plan.rf);
                        tracing::info!(
                            topic = %plan.topic.target, partitions = plan.topic.partitions, replication_factor = rf,
                            configs = ?plan.configs.keys().collect::<Vec<_>>(), "created target topic"
                        );
                        waits.push((plan.topic.target.clone(), plan.topic.partitions));
                        created.insert(plan.topic.target.clone());
                        self.creations().requested(&plan.topic.target, answered);
                    }
                    Ok(CreateTopicOutcome::AlreadyExists { .. }) => {
                        // Created by a request whose answer was lost, or by someone else: the
                        // controller has it, only the metadata lags.
                        self.creations().requested(&plan.topic.target, answered);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let e = plan.failure(e);
                        if first_error.is_some() {
                            tracing::warn!(topic = %plan.topic.target, error = %e, "cannot create target topic");
                        } else {
                            first_error = Some(e);
                        }
                    }
                }
            }
        }
        self.await_all_leaders(&waits).await;
        if self.config.mirror.sync_topic_configs {
            // A topic that got no min.insync.replicas of its own may be below the target
            // cluster's default: the config sync gives it its own value at once.
            let unset: Vec<(&SelectedTopic, i16)> = plans
                .iter()
                .filter(|p| created.contains(&p.topic.target) && !p.configs.contains_key(MIN_ISR))
                .map(|p| (p.topic, p.rf))
                .collect();
            self.sync_configs_all(&unset).await;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(created),
        }
    }

    /// What to create for `topic`: the replication factor and the source configs to copy.
    async fn plan<'t>(
        &self,
        topic: &'t SelectedTopic,
        target_brokers: usize,
    ) -> Result<CreatePlan<'t>> {
        let m = &self.config.mirror;
        let explicit = (!m.replication_factor_from_source).then_some(m.replication_factor);
        let (rf, capped) = choose_replication_factor(
            explicit,
            self.source_replication_factor(&topic.source),
            target_brokers,
            &topic.target,
        );
        if let Some(w) = capped {
            tracing::warn!(topic = %topic.target, source_topic = %topic.source, "{w}");
        }
        let mut configs = BTreeMap::new();
        if m.sync_topic_configs {
            match self
                .source_admin
                .describe_topic_configs(&topic.source)
                .await
            {
                Ok(source) => configs = copied_configs(source.entries(), &m.topic_configs_exclude),
                Err(e @ WireError::Authorization { .. }) => tracing::warn!(
                    topic = %topic.source, error = %e,
                    "cannot read the source topic's configuration; creating the target topic with broker defaults \
                     (grant DescribeConfigs on the source topic to copy retention, cleanup policy and limits; \
                     the periodic config sync copies them once it is granted)"
                ),
                Err(e) => return Err(Error::Wire(e)),
            }
            if let Some(w) = fit_min_isr(&mut configs, rf, &topic.target) {
                tracing::warn!(topic = %topic.target, "{w}");
            }
        }
        let mut new = NewTopic::new(topic.target.clone(), topic.partitions, rf);
        for (k, v) in &configs {
            new = new.with_config(k.clone(), v.clone());
        }
        Ok(CreatePlan {
            topic,
            rf,
            configs,
            new,
        })
    }

    /// Runs this run's first config sync, deferred by [`Topics::sync`], beside the group join:
    /// each topic is released (its partitions may start) as its own sync ends. Without
    /// [`Topics::with_gate`] there is nothing to do. Runs until aborted (the mirror holds its
    /// handle and aborts it when it ends).
    pub async fn settle(self: Arc<Self>) {
        let Some(gate) = &self.gate else { return };
        let mut holds = gate.subscribe();
        loop {
            let due_topics = holds.borrow_and_update().configs_due();
            if due_topics.is_empty() {
                if holds.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let began = Instant::now();
            let due: Vec<(SelectedTopic, i16)> = {
                let pending = self.pending_sync();
                due_topics
                    .iter()
                    .filter_map(|t| pending.get(t).cloned())
                    .collect()
            };
            let refs: Vec<(&SelectedTopic, i16)> = due.iter().map(|(t, rf)| (t, *rf)).collect();
            self.sync_configs_all(&refs).await;
            // A hold with nothing to sync (never expected) must not hold for good.
            self.update_holds(|h| {
                due_topics
                    .iter()
                    .fold(false, |changed, t| h.release(t) | changed)
            });
            tracing::info!(
                topics = due.len(),
                config_sync_ms = began.elapsed().as_millis(),
                "first topic-config sync done"
            );
        }
    }

    /// Gives new topics (or new partitions) a moment to get leaders, so the first produce does
    /// not meet NOT_LEADER_OR_FOLLOWER and a retry backoff. Not getting there is not an error:
    /// the produce path retries (and says so) anyway.
    async fn await_all_leaders(&self, topics: &[(String, i32)]) {
        if topics.is_empty() {
            return;
        }
        match self
            .target_admin
            .wait_for_all_leaders(topics, NEW_TOPIC_LEADER_WAIT)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(
                    topics = topics.len(),
                    "new target topics have no leader for every partition yet"
                )
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the new target topics' metadata yet")
            }
        }
    }
}

/// How long mirroring waits for new target topics to have a leader for every partition. A
/// healthy cluster gets there within a second; a broker creating thousands of logs takes
/// 30-50 s (measured at 4,000 partitions on one node), and waiting longer would hold back every
/// partition whose topic is ready, where a partition that is not only retries its first produce.
const NEW_TOPIC_LEADER_WAIT: Duration = Duration::from_secs(1);

/// A target topic about to be created.
struct CreatePlan<'t> {
    topic: &'t SelectedTopic,
    rf: i16,
    /// Copied from the source topic.
    configs: BTreeMap<String, String>,
    new: NewTopic,
}

impl CreatePlan<'_> {
    /// The error of a refused creation, with what was asked for.
    fn failure(&self, source: WireError) -> Error {
        Error::Admin {
            action: format!(
                "cannot create target topic {} for source topic {} (replication factor {}{})",
                self.topic.target,
                self.topic.source,
                self.rf,
                match self.configs.is_empty() {
                    true => String::new(),
                    false => format!(
                        ", configs copied from the source: {}; exclude a key the target \
                         refuses with mirror.topic_configs_exclude",
                        self.configs
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            ),
            source: Box::new(source),
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

    fn exclude(patterns: &[&str]) -> ConfigExclude {
        ConfigExclude::new(
            patterns.iter().map(|s| s.to_string()).collect(),
            "mirror.topic_configs_exclude",
        )
        .unwrap()
    }

    fn entry(name: &str, value: &str, source: ConfigSource) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: Some(value.into()),
            source,
            read_only: false,
            sensitive: false,
        }
    }

    #[test]
    fn replication_factor_follows_the_source_capped_by_the_target() {
        // (name, explicit setting, source rf, target brokers) -> (factor, warned)
        type Case = (&'static str, Option<i16>, Option<i16>, usize, i16, bool);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("source's factor", None, Some(3), 3, 3, false),
            ("source's factor on a bigger target", None, Some(2), 5, 2, false),
            ("capped by a 1-broker target", None, Some(3), 1, 1, true),
            ("capped by a 2-broker target", None, Some(3), 2, 2, true),
            ("broker count unknown", None, Some(3), 0, 3, false),
            ("source names no replicas", None, Some(0), 3, -1, false),
            ("explicit wins over the source", Some(2), Some(3), 3, 2, false),
            ("explicit wins even above the broker count", Some(3), Some(1), 1, 3, false),
            ("explicit broker default", Some(-1), Some(3), 3, -1, false),
        ];
        for (name, explicit, source, brokers, want, warned) in cases {
            let (rf, warning) = choose_replication_factor(*explicit, *source, *brokers, "t");
            assert_eq!((rf, warning.is_some()), (*want, *warned), "{name}");
            if let Some(w) = warning {
                assert!(w.contains("mirror.replication_factor"), "{name}: {w}");
                assert!(w.contains("replication factor 3"), "{name}: {w}");
            }
        }
    }

    #[test]
    fn min_insync_replicas_never_exceeds_the_factor() {
        let with = |v: &str| BTreeMap::from([(MIN_ISR.to_string(), v.to_string())]);
        // Lowered to a smaller factor, with the reason.
        let mut c = with("2");
        let w = fit_min_isr(&mut c, 1, "dst.orders").unwrap();
        assert_eq!(c[MIN_ISR], "1");
        assert!(w.contains("lowered from the source topic's 2 to 1"), "{w}");
        assert!(w.contains("NOT_ENOUGH_REPLICAS"), "{w}");
        // Kept when it fits, when the factor is unknown (-1), or when it is absent.
        for (value, rf) in [("2", 3), ("3", 3), ("2", -1)] {
            let mut c = with(value);
            assert!(fit_min_isr(&mut c, rf, "t").is_none());
            assert_eq!(c[MIN_ISR], value);
        }
        let mut c = BTreeMap::from([("retention.ms".to_string(), "1".to_string())]);
        assert!(fit_min_isr(&mut c, 1, "t").is_none());
        assert!(!c.contains_key(MIN_ISR));
    }

    #[test]
    fn copies_overrides_except_excluded_defaults_and_secrets() {
        let default_exclude: Vec<&str> = crate::config::DEFAULT_CONFIGS_EXCLUDE.to_vec();
        let mut secret = entry("sasl.secret", "x", ConfigSource::Topic);
        secret.sensitive = true;
        secret.value = None;
        let mut read_only = entry("some.read.only", "x", ConfigSource::Topic);
        read_only.read_only = true;
        let source = [
            entry("retention.ms", "7200000", ConfigSource::Topic),
            entry(MIN_ISR, "2", ConfigSource::Topic),
            entry("segment.bytes", "1048576", ConfigSource::Topic),
            entry(
                "message.timestamp.type",
                "LogAppendTime",
                ConfigSource::Topic,
            ),
            entry(
                "unclean.leader.election.enable",
                "true",
                ConfigSource::Topic,
            ),
            entry(
                "leader.replication.throttled.replicas",
                "0:1",
                ConfigSource::Topic,
            ),
            entry("cleanup.policy", "delete", ConfigSource::Default),
            entry("max.message.bytes", "2000000", ConfigSource::StaticBroker),
            secret,
            read_only,
        ];
        let copied = copied_configs(&source, &exclude(&default_exclude));
        assert_eq!(
            copied.keys().map(String::as_str).collect::<Vec<_>>(),
            ["min.insync.replicas", "retention.ms", "segment.bytes"]
        );
        // MirrorMaker 2's own default list (with min.insync.replicas) and a regex.
        let mut mm2 = default_exclude.clone();
        mm2.push(r"min\.insync\.replicas");
        mm2.push(r"segment\..*");
        let copied = copied_configs(&source, &exclude(&mm2));
        assert_eq!(copied.keys().collect::<Vec<_>>(), ["retention.ms"]);
        // Patterns match whole keys.
        let copied = copied_configs(&source, &exclude(&["retention"]));
        assert!(copied.contains_key("retention.ms"));
    }

    #[test]
    fn changes_set_only_what_differs_and_never_delete() {
        let wanted = BTreeMap::from([
            ("retention.ms".to_string(), "1000".to_string()),
            ("cleanup.policy".to_string(), "compact".to_string()),
            (MIN_ISR.to_string(), "1".to_string()),
        ]);
        let target = BTreeMap::from([
            ("retention.ms", "604800000"),
            ("cleanup.policy", "compact"),
            ("segment.bytes", "1"),
        ]);
        let changes = config_changes(&wanted, |k| target.get(k).copied());
        assert_eq!(
            changes,
            [
                AlterConfigOp::Set {
                    name: MIN_ISR.into(),
                    value: "1".into()
                },
                AlterConfigOp::Set {
                    name: "retention.ms".into(),
                    value: "1000".into()
                },
            ]
        );
        assert!(config_changes(&BTreeMap::new(), |k| target.get(k).copied()).is_empty());
    }

    #[test]
    fn sync_failures_say_what_to_grant_and_that_it_retries() {
        let denied = WireError::Authorization {
            code: strait_wire::ResponseError::TopicAuthorizationFailed,
            principal: Some("User:mirror".into()),
            operation: "AlterConfigs".into(),
            resource: "Topic:dst.orders".into(),
        };
        let m = config_sync_failure(
            "cannot copy configs to target topic dst.orders",
            "target",
            &denied,
            Duration::from_secs(600),
        );
        assert!(
            m.contains("grant AlterConfigs on Topic:dst.orders on the target cluster"),
            "{m}"
        );
        assert!(m.contains("tries again every 10m"), "{m}");
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
