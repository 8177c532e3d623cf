//! What `strait switchover` and `strait failback` read from the two clusters of a flow: the
//! mirrored partitions' offsets on both sides, the offset map persisted in the offset-syncs
//! topic, and the groups involved. Nothing is kept locally: every run reads it afresh.

use std::collections::{BTreeMap, HashMap};

use strait_wire::offset_commit::{CommittedOffset, GroupOffsets};
use strait_wire::{Client, Isolation, OffsetSpec, TopicPartition};

use super::checkpoint::{offset_syncs_topic, replay};
use super::groups::{GroupKind, active_members, list_groups_with_kinds};
use super::{OffsetMaps, Sync};
use crate::config::{Config, Rename};
use crate::error::{Error, Result};

/// One mirrored partition on both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// The source partition.
    pub source: TopicPartition,
    /// The same partition on the target.
    pub target: TopicPartition,
    /// The source's log start offset.
    pub source_start: i64,
    /// The source's end offset (high watermark, or last stable offset with read_committed).
    pub source_end: i64,
    /// The target's log start offset.
    pub target_start: i64,
    /// The target's end offset (high watermark).
    pub target_end: i64,
    /// The next source offset after everything the target acknowledged, and the target offset
    /// it maps to (the offset map's frontier); `None` when no sync of the partition exists.
    pub mirrored: Option<Sync>,
}

/// The flow's partitions and mirror positions.
#[derive(Debug, Default)]
pub struct FlowState {
    /// The source cluster's alias.
    pub source_alias: String,
    /// The target cluster's alias.
    pub target_alias: String,
    /// The mirror's group (`mirror.group_id`): on the source for this flow, on the target for
    /// the reverse flow.
    pub mirror_group: String,
    /// Every mirrored partition, sorted.
    pub partitions: Vec<PartitionState>,
    /// The offset map replayed from the offset-syncs topic on the target.
    pub maps: OffsetMaps,
    /// Active members of the mirror's group on the source (the mirror runs).
    pub mirror_members: usize,
    /// The mirror group's committed offsets on the source, by source partition.
    pub mirror_commits: BTreeMap<TopicPartition, CommittedOffset>,
    /// Active members of the reverse mirror's group on the target.
    pub reverse_members: usize,
    /// The reverse mirror group's committed offsets on the target, by target partition.
    pub reverse_commits: BTreeMap<TopicPartition, CommittedOffset>,
}

/// A consumer group of the flow (`mirror.groups`) on both sides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupState {
    /// The group id.
    pub name: String,
    /// Active members on the source.
    pub source_members: usize,
    /// Active members on the target.
    pub target_members: usize,
    /// Committed offsets on the source, by source partition.
    pub source_commits: BTreeMap<TopicPartition, CommittedOffset>,
    /// Committed offsets on the target, by target partition.
    pub target_commits: BTreeMap<TopicPartition, i64>,
}

/// Both clusters of a flow.
pub struct Clusters {
    /// The flow's source.
    pub source: Client,
    /// The flow's target.
    pub target: Client,
}

impl Clusters {
    /// Connects to both clusters of `config`.
    pub async fn connect(config: &Config) -> Result<Clusters> {
        let (source, target) = crate::config::connect::connect(config).await?;
        Ok(Clusters { source, target })
    }
}

/// The commands move offsets between topics of the same name; with prefixes the reverse flow
/// would mirror `<alias>.<topic>` into yet another name.
pub fn require_identity(config: &Config, command: &str) -> Result<()> {
    match config.mirror.rename {
        Rename::Identity => Ok(()),
        Rename::Prefix { .. } => Err(Error::Unsupported {
            what: format!("strait {command} with mirror.rename = \"prefix\""),
            hint: "the command needs rename = \"identity\" (the same topic names on both sites); \
                   with prefixes fail over with strait failover and mirror back with a second flow"
                .into(),
        }),
    }
}

/// Reads the flow's partitions, offsets, offset map and mirror groups.
pub async fn read_flow(config: &Config, clusters: &Clusters) -> Result<FlowState> {
    let Clusters { source, target } = clusters;
    let meta = source.metadata(None).await.map_err(Error::Wire)?;
    let mut sources: Vec<TopicPartition> = Vec::new();
    for (name, topic) in &meta.topics {
        if topic.is_internal || topic.error.is_some() || !config.selects(name) {
            continue;
        }
        for p in &topic.partitions {
            sources.push(TopicPartition::new(name.as_ref(), p.partition).map_err(Error::Wire)?);
        }
    }
    sources.sort_by(|a, b| (a.topic(), a.partition()).cmp(&(b.topic(), b.partition())));
    let targets: Vec<TopicPartition> = sources
        .iter()
        .map(|tp| TopicPartition::new(config.target_topic(tp.topic()), tp.partition()))
        .collect::<strait_wire::Result<_>>()
        .map_err(Error::Wire)?;
    let isolation = config.mirror.isolation;
    let source_bounds = bounds(source, &sources, isolation, &config.source.alias).await?;
    let target_bounds = bounds(
        target,
        &targets,
        Isolation::ReadUncommitted,
        &config.target.alias,
    )
    .await?;
    let maps = OffsetMaps::default();
    replay(
        target,
        &offset_syncs_topic(&config.target.alias),
        &maps,
        |t| config.selects(t),
    )
    .await?;
    let partitions = sources
        .iter()
        .zip(&targets)
        .map(|(s, t)| {
            let (source_start, source_end) = source_bounds.get(s).copied().unwrap_or((0, 0));
            let (target_start, target_end) = target_bounds.get(t).copied().unwrap_or((0, 0));
            PartitionState {
                source: s.clone(),
                target: t.clone(),
                source_start,
                source_end,
                target_start,
                target_end,
                mirrored: maps.frontier(s),
            }
        })
        .collect();
    let group = &config.mirror.group_id;
    Ok(FlowState {
        source_alias: config.source.alias.clone(),
        target_alias: config.target.alias.clone(),
        mirror_group: group.clone(),
        partitions,
        maps,
        mirror_members: active_members(source, group, GroupKind::Unknown).await?,
        mirror_commits: commits(source, group, &sources).await?,
        reverse_members: active_members(target, group, GroupKind::Unknown).await?,
        reverse_commits: commits(target, group, &targets).await?,
    })
}

/// The flow's consumer groups (`mirror.groups` on the source, never the mirror's own) on both
/// sides; none without `mirror.groups`.
pub async fn read_groups(
    config: &Config,
    clusters: &Clusters,
    flow: &FlowState,
) -> Result<Vec<GroupState>> {
    let Some(selection) = &config.mirror.groups else {
        return Ok(Vec::new());
    };
    let sources: Vec<TopicPartition> = flow.partitions.iter().map(|p| p.source.clone()).collect();
    let targets: Vec<TopicPartition> = flow.partitions.iter().map(|p| p.target.clone()).collect();
    // With the groups' types (ListGroups v5), each group is described once per cluster.
    let on_target = list_groups_with_kinds(&clusters.target).await?;
    let mut out = Vec::new();
    for (name, kind) in list_groups_with_kinds(&clusters.source).await? {
        if name == config.mirror.group_id || !selection.matches(&name) {
            continue;
        }
        let target_kind = on_target.get(&name).copied().unwrap_or(GroupKind::Unknown);
        out.push(GroupState {
            source_members: active_members(&clusters.source, &name, kind).await?,
            target_members: active_members(&clusters.target, &name, target_kind).await?,
            source_commits: commits(&clusters.source, &name, &sources).await?,
            target_commits: commits(&clusters.target, &name, &targets)
                .await?
                .into_iter()
                .map(|(tp, c)| (tp, c.offset))
                .collect(),
            name,
        });
    }
    Ok(out)
}

/// The committed offsets of `group` for `partitions` (only those with one).
async fn commits(
    client: &Client,
    group: &str,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, CommittedOffset>> {
    let fetched = GroupOffsets::new(client, group)
        .fetch(partitions)
        .await
        .map_err(|e| Error::Runtime(format!("reading the committed offsets of {group}: {e}")))?;
    Ok(fetched
        .into_iter()
        .filter_map(|(tp, c)| Some((tp, c?)))
        .collect())
}

/// (log start, end) of every partition in `partitions`.
async fn bounds(
    client: &Client,
    partitions: &[TopicPartition],
    isolation: Isolation,
    alias: &str,
) -> Result<HashMap<TopicPartition, (i64, i64)>> {
    let mut out = HashMap::new();
    for spec in [OffsetSpec::Earliest, OffsetSpec::Latest] {
        let wanted: Vec<(TopicPartition, OffsetSpec)> =
            partitions.iter().map(|tp| (tp.clone(), spec)).collect();
        let listed = client
            .list_offsets(&wanted, isolation)
            .await
            .map_err(|e| Error::Runtime(format!("listing the offsets on {alias}: {e}")))?;
        for l in listed {
            let o = l.offset.unwrap_or(0);
            let e = out.entry(l.partition).or_insert((0, 0));
            match spec {
                OffsetSpec::Earliest => e.0 = o,
                _ => e.1 = o,
            }
        }
    }
    Ok(out)
}
