//! `strait failover`: for the runbook of a site failure. Reads the checkpoints on the target
//! alone (the source may be gone), prints each group's translated offsets, and with `--apply`
//! commits them to the same groups on the target: never to a group with active members there,
//! never moving a committed offset backwards.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Client, TopicPartition};

use super::checkpoint::checkpoints_topic;
use super::format::{Checkpoint, Rpo, now_ms};
use super::groups::{GroupKind, active_members};
use super::topic;
use crate::config::Config;
use crate::error::{Error, Result};

/// What `strait failover` found and did.
#[derive(Debug, Default)]
pub struct Report {
    /// The table printed to stdout.
    pub text: String,
    /// Groups that were not applied, with why.
    pub refused: Vec<(String, String)>,
    /// The table's rows, for `--output json`.
    pub rows: Vec<Row>,
}

/// One row of the table: a checkpointed partition of a group.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The consumer group.
    pub group: String,
    /// The target topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset on the source.
    pub source_offset: i64,
    /// The translated offset on the target.
    pub target_offset: i64,
    /// Records the mirror was behind when the checkpoint was written (none without an RPO).
    pub behind_records: Option<i64>,
    /// Age of the checkpoint in seconds (none without an RPO).
    pub checkpoint_age_seconds: Option<f64>,
    /// `-` (printed only), `committed`, `kept: target ahead` or `refused: active`.
    pub action: String,
}

/// The latest checkpoint per (group, target topic, partition) on the target.
pub async fn latest_checkpoints(
    target: &Client,
    source_alias: &str,
) -> Result<BTreeMap<(String, String, i32), Checkpoint>> {
    let name = checkpoints_topic(source_alias);
    let mut latest = BTreeMap::new();
    for (key, value) in topic::read_all(target, &name).await? {
        match Checkpoint::decode(&key, &value) {
            Ok(c) => {
                latest.insert((c.group.clone(), c.topic.clone(), c.partition), c);
            }
            Err(e) => tracing::warn!(topic = %name, error = %e, "skipping a record"),
        }
    }
    Ok(latest)
}

/// Runs `strait failover` against the target cluster of `config`.
pub async fn failover(config: &Config, groups: &[String], apply: bool) -> Result<Report> {
    let target = Client::connect(config.target.client_config().map_err(Error::Wire)?)
        .await
        .map_err(|e| Error::Connect {
            side: "target",
            alias: config.target.alias.clone(),
            source: Box::new(e),
        })?;
    let latest = latest_checkpoints(&target, &config.source.alias).await?;
    let mut by_group: BTreeMap<String, Vec<Checkpoint>> = BTreeMap::new();
    for ((group, _, _), c) in latest {
        if groups.is_empty() || groups.contains(&group) {
            by_group.entry(group).or_default().push(c);
        }
    }
    let mut report = Report::default();
    for g in groups {
        if !by_group.contains_key(g) {
            report.refused.push((
                g.clone(),
                format!(
                    "no checkpoint for group {g} in {} on the target; is it selected by \
                     mirror.groups?",
                    checkpoints_topic(&config.source.alias)
                ),
            ));
        }
    }
    let _ = writeln!(
        report.text,
        "group\ttopic\tpartition\tsource_offset\ttarget_offset\tbehind_records\tcheckpoint_age_s\taction"
    );
    let now = now_ms();
    for (group, cps) in &by_group {
        let actions = if apply {
            apply_group(&target, group, cps, &mut report).await?
        } else {
            vec!["-"; cps.len()]
        };
        for (c, action) in cps.iter().zip(actions) {
            report.row(c, action, now);
        }
    }
    Ok(report)
}

/// Commits `group`'s checkpointed offsets on the target (never moving it backwards), unless it
/// has active members there (then refused in `report`). The action taken per checkpoint.
async fn apply_group(
    target: &Client,
    group: &str,
    cps: &[Checkpoint],
    report: &mut Report,
) -> Result<Vec<&'static str>> {
    let members = active_members(target, group, GroupKind::Unknown).await?;
    if members > 0 {
        report.refused.push((
            group.to_string(),
            format!(
                "group {group} has {members} active members on the target; stop its consumers \
                 there, then run strait failover --apply again"
            ),
        ));
        return Ok(vec!["refused: active"; cps.len()]);
    }
    let tps: Vec<TopicPartition> = cps
        .iter()
        .map(|c| TopicPartition::new(&c.topic, c.partition).map_err(Error::Wire))
        .collect::<Result<_>>()?;
    let current = GroupOffsets::new(target, group)
        .fetch(&tps)
        .await
        .map_err(Error::Wire)?;
    let mut actions = Vec::with_capacity(cps.len());
    let mut commits = Vec::new();
    for (c, tp) in cps.iter().zip(&tps) {
        let now = current.get(tp).cloned().flatten().map(|o| o.offset);
        if now.is_some_and(|n| n >= c.offset) {
            actions.push("kept: target ahead");
            continue;
        }
        actions.push("committed");
        let mut commit = CommitOffset::new(tp.clone(), c.offset);
        // The group's own metadata, without Strait's RPO prefix.
        let (_, own) = Rpo::split(&c.metadata);
        if !own.is_empty() {
            commit.metadata = Some(own.to_string());
        }
        commits.push(commit);
    }
    GroupOffsets::new(target, group)
        .commit(&Generation::simple(), &commits)
        .await
        .map_err(|e| Error::Runtime(format!("committing the offsets of {group}: {e}")))?;
    Ok(actions)
}

impl Report {
    /// Adds checkpoint `c` and the `action` taken for it, as a line of the table and a row.
    fn row(&mut self, c: &Checkpoint, action: &str, now_ms: i64) {
        // "-" when the checkpoint carries no RPO (written by MirrorMaker 2, or the source's
        // end offsets could not be listed then).
        let rpo = Rpo::split(&c.metadata).0;
        let behind = rpo.map(|r| r.behind());
        let age = rpo.map(|r| ((now_ms - r.timestamp_ms).max(0) as f64 / 100.0).round() / 10.0);
        let _ = writeln!(
            self.text,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            c.group,
            c.topic,
            c.partition,
            c.upstream_offset,
            c.offset,
            behind.map_or_else(|| "-".to_string(), |b| b.to_string()),
            age.map_or_else(|| "-".to_string(), |a| format!("{a:.1}")),
            action
        );
        self.rows.push(Row {
            group: c.group.clone(),
            topic: c.topic.clone(),
            partition: c.partition,
            source_offset: c.upstream_offset,
            target_offset: c.offset,
            behind_records: behind,
            checkpoint_age_seconds: age,
            action: action.to_string(),
        });
    }
}
