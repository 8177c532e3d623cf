//! The checkpoint task: every `mirror.checkpoint_interval`, persist the offset maps' new syncs,
//! read the committed offsets of the selected source groups, translate them exactly and write
//! MirrorMaker 2 v0 checkpoints to `<source alias>.checkpoints.internal` on the target.
//!
//! Everything it writes goes to the target, so `strait failover` and Kafka's
//! `RemoteClusterUtils.translateOffsets` work with the source gone. A new instance replays
//! `mm2-offset-syncs.<target alias>.internal` before mirroring ([`Checkpointer::start`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Client, OffsetSpec, TopicPartition};
use tokio_util::sync::CancellationToken;

use super::format::{Checkpoint, Heartbeat, Rpo, now_ms};
use super::groups::{GroupKind, Groups, active_members, list_groups, list_groups_with_kinds};
use super::syncs::{SyncWriter, read_syncs};
use super::{OffsetMaps, topic};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::observe::metrics::Metrics;

/// MirrorMaker 2's checkpoints topic for checkpoints of groups of `source_alias`.
pub fn checkpoints_topic(source_alias: &str) -> String {
    format!("{source_alias}.checkpoints.internal")
}

/// MirrorMaker 2's offset-syncs topic of the flow to `target_alias`.
pub fn offset_syncs_topic(target_alias: &str) -> String {
    format!("mm2-offset-syncs.{target_alias}.internal")
}

/// Replays the offset syncs persisted in `syncs_topic` on `target` into `maps`, for the
/// source topics `selects` accepts; returns how many.
pub async fn replay(
    target: &Client,
    syncs_topic: &str,
    maps: &OffsetMaps,
    selects: impl Fn(&str) -> bool,
) -> Result<usize> {
    let mut replayed = 0usize;
    for (tp, sync) in read_syncs(target, syncs_topic).await? {
        if selects(tp.topic()) {
            maps.replay(&tp, sync);
            replayed += 1;
        }
    }
    Ok(replayed)
}

/// MirrorMaker 2's heartbeats topic.
pub const HEARTBEATS_TOPIC: &str = "heartbeats";

/// Writes checkpoints, offset syncs and heartbeats for one mirror.
pub struct Checkpointer {
    config: Config,
    maps: Arc<OffsetMaps>,
    /// Shared with the mirror's commit gate ([`GatedPositions`](super::syncs::GatedPositions)).
    writer: Arc<SyncWriter>,
    source: Client,
    target: Client,
    /// The last checkpoint written per (group, source partition): (upstream, offset) and the
    /// (source end, mirrored) of its RPO.
    written: HashMap<(String, TopicPartition), Written>,
    /// When group offsets were last synced to the target.
    last_sync: Option<Instant>,
    metrics: Option<Arc<Metrics>>,
}

/// (upstream, offset, (source end, mirrored)) of a checkpoint written.
type Written = (i64, i64, Option<(i64, i64)>);

/// What a round's checkpoints carry of the moment they are read: the source's end offsets
/// (empty when the listing failed: no RPO) and the time.
struct Now {
    ends: HashMap<TopicPartition, i64>,
    stamp: i64,
}

/// The checkpoints of one round, before they are written.
#[derive(Default)]
struct Batch {
    /// Encoded (key, value) records.
    records: Vec<(Vec<u8>, Vec<u8>)>,
    /// What each one is, to remember once written.
    pending: Vec<((String, TopicPartition), Written)>,
    /// Groups whose every committed offset translated (their checkpoint age restarts).
    complete: Vec<String>,
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Offset syncs persisted.
    pub syncs: usize,
    /// Groups whose offsets were read.
    pub groups: usize,
    /// Checkpoints written (changed ones only).
    pub checkpoints: usize,
    /// Committed offsets that could not be translated exactly (kept at their last checkpoint).
    pub misses: usize,
    /// The first of them, with the reason, for the log.
    pub first_miss: Option<String>,
    /// Groups whose translated offsets were committed on the target (group offset sync).
    pub synced: usize,
    /// Groups left alone because they have active members on the target.
    pub active: usize,
}

impl Checkpointer {
    /// Connects, creates the internal topics on the target if needed, and replays the persisted
    /// offset syncs into `maps`. Call before the mirror starts, so that replayed history never
    /// lands after live acknowledgements.
    pub async fn start(config: Config, maps: Arc<OffsetMaps>) -> Result<Checkpointer> {
        let (source, target) = crate::config::connect::connect(&config).await?;
        let rf = config.mirror.replication_factor;
        let syncs_topic = offset_syncs_topic(&config.target.alias);
        for name in [
            checkpoints_topic(&config.source.alias),
            syncs_topic.clone(),
            HEARTBEATS_TOPIC.to_string(),
        ] {
            topic::ensure_compacted(&target, &name, rf).await?;
        }
        let replayed = replay(&target, &syncs_topic, &maps, |t| config.selects(t)).await?;
        tracing::info!(replayed, topic = %syncs_topic, "offset syncs replayed");
        let writer = Arc::new(SyncWriter::new(maps.clone(), target.clone(), syncs_topic));
        Ok(Checkpointer {
            config,
            maps,
            writer,
            source,
            target,
            written: HashMap::new(),
            last_sync: None,
            metrics: None,
        })
    }

    /// The writer of the offset syncs, for the mirror's commit gate.
    pub fn sync_writer(&self) -> Arc<SyncWriter> {
        self.writer.clone()
    }

    /// Records round latency, checkpoint ages, syncs and misses in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Checkpointer {
        self.metrics = Some(metrics);
        self
    }

    /// Runs a round every `mirror.checkpoint_interval` until `shutdown`, then one last round
    /// (bounded), so that what the mirror acknowledged last is persisted.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let interval = self.config.mirror.checkpoint_interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.cancelled() => break,
            }
            self.logged_round().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.logged_round()).await;
    }

    async fn logged_round(&mut self) {
        let started = Instant::now();
        let result = self.round().await;
        if let Some(m) = &self.metrics {
            m.record_checkpoint_round(started.elapsed().as_secs_f64());
        }
        match result {
            Ok(r) if r.misses > 0 => tracing::info!(
                misses = r.misses,
                first = r.first_miss.as_deref().unwrap_or(""),
                checkpoints = r.checkpoints,
                "committed offsets not translatable exactly yet (their last checkpoint stays)"
            ),
            Ok(r) => tracing::debug!(?r, "checkpoint round"),
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint round failed; retrying at the next interval")
            }
        }
    }

    /// One round: persist syncs, heartbeat, read groups, translate, write checkpoints.
    pub async fn round(&mut self) -> Result<Round> {
        let mut round = Round {
            syncs: self.writer.flush().await?,
            ..Round::default()
        };
        self.heartbeat().await?;
        let Some(groups) = self.selected_groups().await? else {
            return Ok(round);
        };
        let partitions = self.maps.partitions();
        // For the RPO carried in each checkpoint: the source's end offsets and the mirror's
        // acknowledged positions, now. Without the ends (a listing failed) checkpoints are still
        // written, without an RPO.
        let now = Now {
            ends: self.source_ends(&partitions).await,
            stamp: now_ms(),
        };
        let mut batch = Batch::default();
        for group in &groups {
            round.groups += 1;
            let misses_before = round.misses;
            self.translate_group(group, &partitions, &now, &mut round, &mut batch)
                .await?;
            if round.misses == misses_before {
                batch.complete.push(group.clone());
            }
        }
        self.write(batch, &mut round).await?;
        let m = &self.config.mirror;
        if m.sync_group_offsets
            && self
                .last_sync
                .is_none_or(|t| t.elapsed() >= m.sync_group_offsets_interval)
        {
            self.last_sync = Some(Instant::now());
            self.sync_groups(&mut round).await;
            if let Some(m) = &self.metrics {
                m.record_groups_synced(round.synced as u64);
            }
        }
        Ok(round)
    }

    /// Appends a heartbeat to the target (MM2's liveness record of the flow).
    async fn heartbeat(&self) -> Result<()> {
        let beat = Heartbeat {
            source_alias: self.config.source.alias.clone(),
            target_alias: self.config.target.alias.clone(),
            timestamp: now_ms(),
        };
        topic::append(
            &self.target,
            HEARTBEATS_TOPIC,
            &[(beat.encode_key().map_err(fmt)?, beat.encode_value())],
        )
        .await
    }

    /// The source groups `mirror.groups` selects now (never the mirror's own); None without
    /// `mirror.groups`.
    async fn selected_groups(&self) -> Result<Option<Vec<String>>> {
        // Hot reload (crate::run::reload): the group filters follow the live configuration.
        let live = crate::config::live::live_for(&self.config).map(|rx| rx.borrow().clone());
        let config = live.as_deref().unwrap_or(&self.config);
        let Some(selection) = &config.mirror.groups else {
            return Ok(None);
        };
        Ok(Some(
            list_groups(&self.source)
                .await?
                .into_iter()
                .filter(|g| *g != self.config.mirror.group_id && selection.matches(g))
                .collect(),
        ))
    }

    /// Reads `group`'s committed offsets on the source and adds a checkpoint to `batch` for
    /// each that translates exactly and changed since it was last written; counts the misses.
    async fn translate_group(
        &self,
        group: &str,
        partitions: &[TopicPartition],
        now: &Now,
        round: &mut Round,
        batch: &mut Batch,
    ) -> Result<()> {
        let committed = GroupOffsets::new(&self.source, group)
            .fetch(partitions)
            .await
            .map_err(|e| Error::Runtime(format!("reading the offsets of group {group}: {e}")))?;
        for (tp, c) in committed {
            let Some(c) = c else { continue };
            let offset = match self.maps.translate(&tp, c.offset) {
                Ok(t) => t,
                Err(miss) => {
                    round.misses += 1;
                    if let Some(m) = &self.metrics {
                        m.record_translation_miss(miss.as_str());
                    }
                    if round.first_miss.is_none() {
                        round.first_miss = Some(format!("{group} {tp} at {}: {miss}", c.offset));
                    }
                    tracing::debug!(group, partition = %tp, committed = c.offset,
                        reason = miss.as_str(), "not checkpointed: {miss}");
                    continue;
                }
            };
            let rpo = now
                .ends
                .get(&tp)
                .zip(self.maps.mirrored(&tp))
                .map(|(end, mirrored)| Rpo {
                    source_end: *end,
                    mirrored,
                    timestamp_ms: now.stamp,
                });
            let key = (group.to_string(), tp.clone());
            let entry = (c.offset, offset, rpo.map(|r| (r.source_end, r.mirrored)));
            // Rewritten when the RPO changed too, so that the last checkpoint says how much was
            // missing when it was written.
            if self.written.get(&key) == Some(&entry) {
                continue;
            }
            let own = c.metadata.clone().unwrap_or_default();
            let cp = Checkpoint {
                group: group.to_string(),
                topic: self.config.target_topic(tp.topic()),
                partition: tp.partition(),
                upstream_offset: c.offset,
                offset,
                metadata: rpo.map_or_else(|| own.clone(), |r| r.wrap(&own)),
            };
            batch.records.push((
                cp.encode_key().map_err(fmt)?,
                cp.encode_value().map_err(fmt)?,
            ));
            batch.pending.push((key, entry));
        }
        Ok(())
    }

    /// Appends `batch`'s checkpoints to the checkpoints topic, then remembers them and records
    /// them (and the groups it completes) in the metrics.
    async fn write(&mut self, batch: Batch, round: &mut Round) -> Result<()> {
        let writing = Instant::now();
        topic::append(
            &self.target,
            &checkpoints_topic(&self.config.source.alias),
            &batch.records,
        )
        .await?;
        let latency = writing.elapsed();
        round.checkpoints = batch.pending.len();
        if let Some(m) = &self.metrics {
            for ((group, tp), _) in &batch.pending {
                let topic = self.config.target_topic(tp.topic());
                m.record_checkpoint_written(group, &topic, tp.partition(), latency);
            }
            let now = Instant::now();
            for group in &batch.complete {
                m.record_group_checkpointed(group, now);
            }
        }
        self.written.extend(batch.pending);
        Ok(())
    }

    /// The source end offsets of `partitions` (high watermark, or the last stable offset when
    /// mirroring `read_committed`); empty when the listing fails.
    async fn source_ends(&self, partitions: &[TopicPartition]) -> HashMap<TopicPartition, i64> {
        // The config's isolation is the wire client's own type now (one name).
        let isolation = self.config.mirror.isolation;
        let wanted: Vec<(TopicPartition, OffsetSpec)> = partitions
            .iter()
            .map(|tp| (tp.clone(), OffsetSpec::Latest))
            .collect();
        match self.source.list_offsets(&wanted, isolation).await {
            Ok(listed) => listed
                .into_iter()
                .filter_map(|l| Some((l.partition, l.offset?)))
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "source end offsets not listed; checkpoints without RPO");
                HashMap::new()
            }
        }
    }

    /// Group offset sync: commits the latest checkpointed offsets to the same groups on the
    /// target, only for groups without active members there, and only where the target's
    /// committed offset is missing or behind. A failure for one group is logged and the group
    /// is tried again at the next sync.
    ///
    /// The check for members and the commit are two requests; a consumer joining in between
    /// is still safe: the broker accepts a commit without a generation only while the group
    /// is empty (otherwise it answers UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION).
    async fn sync_groups(&self, round: &mut Round) {
        let mut by_group: BTreeMap<&str, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        for ((group, tp), (_, offset, _)) in &self.written {
            match TopicPartition::new(self.config.target_topic(tp.topic()), tp.partition()) {
                Ok(t) => by_group.entry(group).or_default().push((t, *offset)),
                Err(e) => tracing::warn!(partition = %tp, error = %e, "not synced"),
            }
        }
        // The groups' types on the target, so that each is described with the right call once
        // (an idle group of the consumer protocol took two calls without); without them every
        // group is asked both ways.
        let kinds = match list_groups_with_kinds(&self.target).await {
            Ok(kinds) => kinds,
            Err(e) => {
                tracing::debug!(error = %e, "group types on the target not listed");
                Groups::new()
            }
        };
        for (group, translated) in by_group {
            let kind = kinds.get(group).copied().unwrap_or(GroupKind::Unknown);
            match self.sync_group(group, kind, &translated).await {
                Ok(SyncOutcome::Committed(n)) => {
                    round.synced += 1;
                    tracing::debug!(group, partitions = n, "group offsets synced to the target");
                }
                Ok(SyncOutcome::Unchanged) => {}
                Ok(SyncOutcome::Active(members)) => {
                    round.active += 1;
                    tracing::debug!(group, members, "not synced: active on the target");
                }
                Err(e) => tracing::warn!(group, error = %e,
                    "group offsets not synced to the target; retrying at the next sync"),
            }
        }
    }

    async fn sync_group(
        &self,
        group: &str,
        kind: GroupKind,
        translated: &[(TopicPartition, i64)],
    ) -> Result<SyncOutcome> {
        let members = active_members(&self.target, group, kind).await?;
        if members > 0 {
            return Ok(SyncOutcome::Active(members));
        }
        let tps: Vec<TopicPartition> = translated.iter().map(|(tp, _)| tp.clone()).collect();
        let offsets = GroupOffsets::new(&self.target, group);
        let current = offsets.fetch(&tps).await.map_err(Error::Wire)?;
        // Never backwards: a group that consumed on the target is ahead of its translation.
        let commits: Vec<CommitOffset> = translated
            .iter()
            .filter(|(tp, offset)| {
                current
                    .get(tp)
                    .cloned()
                    .flatten()
                    .is_none_or(|c| c.offset < *offset)
            })
            .map(|(tp, offset)| CommitOffset::new(tp.clone(), *offset))
            .collect();
        if commits.is_empty() {
            return Ok(SyncOutcome::Unchanged);
        }
        offsets
            .commit(&Generation::simple(), &commits)
            .await
            .map_err(|e| {
                Error::Runtime(format!(
                    "committing the offsets of {group} on the target: {e}"
                ))
            })?;
        Ok(SyncOutcome::Committed(commits.len()))
    }
}

/// What a group offset sync did for one group.
enum SyncOutcome {
    /// This many partitions were committed.
    Committed(usize),
    /// Nothing to do: the target is at or ahead of every translation.
    Unchanged,
    /// The group has this many active members on the target.
    Active(usize),
}

fn fmt(e: super::format::FormatError) -> Error {
    Error::Runtime(e.to_string())
}
