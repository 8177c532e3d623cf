//! `strait failback`: after an unplanned failover (`strait failover --apply`, producers and
//! consumers moved to the target), with the old source back.
//!
//! The old source holds records that never reached the target: per partition, everything after
//! the offset map's frontier persisted in the offset syncs on the target (the exact range). The
//! operator decides about them with `--stranded copy|export FILE|drop` (the command refuses to
//! go on without a decision when there are any). Then the original mirror's group on the old
//! source is moved past them (recording the decision in its commit metadata), and the reverse
//! mirror's group on the target starts right after the last mirrored record, so the old source
//! receives everything the target took after the failover. [`plan`] decides from the clusters'
//! state alone; [`run`] reads it and carries the plan out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;
use std::path::PathBuf;

use strait_wire::TopicPartition;
use strait_wire::offset_commit::CommitOffset;

use super::plan::{Action, DriveOptions, Handover, Plan, Side, Step, StepState};
use super::records::{StrandedRecord, copied, export_text, read_range};
use super::state::{Clusters, FlowState, PartitionState, read_flow};
use crate::config::Config;
use crate::error::{Error, Result};

/// The operator's input to `strait failback`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailbackOptions {
    /// What to do with the stranded records (`--stranded`).
    pub choice: Option<Stranded>,
    /// When the failover happened (ms since the epoch, `--failed-over-at`): records of the old
    /// source with a later timestamp are reported as diverged.
    pub failed_over_at: Option<i64>,
}

/// What to do with the stranded records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stranded {
    /// Append them to the target (the new primary), with a header naming their origin.
    Copy,
    /// Write them to a file (JSON lines) for a person to decide.
    Export(PathBuf),
    /// Leave them on the old source only.
    Drop,
}

impl Stranded {
    /// `copy`, `export` or `drop`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stranded::Copy => "copy",
            Stranded::Export(_) => "export",
            Stranded::Drop => "drop",
        }
    }
}

/// The metadata prefix of the original mirror's commits that record the decision.
const DECIDED: &str = "strait.failback=";

/// One partition's stranded range on the old source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrandedPartition {
    /// The partition on the old source.
    pub source: TopicPartition,
    /// The same partition on the target.
    pub target: TopicPartition,
    /// The first offset that did not reach the target.
    pub from: i64,
    /// The old source's end offset at the decision.
    pub to: i64,
    /// False when `from` comes from the mirror's committed position (no offset sync of the
    /// partition on the target): records after it may be on the target already.
    pub exact: bool,
    /// The records in `[from, to)`.
    pub records: Vec<StrandedRecord>,
    /// Offsets of them already copied to the target (found by their origin header).
    pub copied: BTreeSet<i64>,
    /// The target batches made of those copies only, `[base, next)`: the reverse mirror must
    /// not copy them back to the old source, which holds their originals.
    pub copy_batches: Vec<Range<i64>>,
}

/// Everything the plan depends on.
#[derive(Debug, Default)]
pub struct FailbackState {
    /// The flow (source = the old source, target = the new primary).
    pub flow: FlowState,
    /// Every partition with a non-empty stranded range.
    pub stranded: Vec<StrandedPartition>,
    /// The export file's current contents, when exporting and it exists.
    pub export_existing: Option<String>,
    /// `--failed-over-at`: records after it are diverged, not stranded.
    pub failed_over_at: Option<i64>,
    /// The copies' ranges now recorded for the reverse mirror ([`super::copies`]), by target
    /// partition (commit metadata of [`super::copies::group`] on the target).
    pub excluded_now: BTreeMap<TopicPartition, Option<String>>,
}

/// `[from, to)` of `p`'s stranded records and whether `from` is exact: from the offset map's
/// frontier (or the mirror's committed position, or the log start) to the old source's end,
/// or to the position the decision was recorded at by an earlier run (records after it were
/// written there later, by the reverse mirror).
pub fn stranded_range(flow: &FlowState, p: &PartitionState) -> (i64, i64, bool) {
    let commit = flow.mirror_commits.get(&p.source);
    let decided = commit.filter(|c| {
        c.metadata
            .as_deref()
            .is_some_and(|m| m.starts_with(DECIDED))
    });
    let (from, exact) = match (p.mirrored, commit) {
        (Some(s), _) => (s.upstream, true),
        (None, Some(c)) if decided.is_none() => (c.offset, false),
        _ => (p.source_start, true),
    };
    let from = from.max(p.source_start);
    let to = decided.map_or(p.source_end, |c| c.offset.min(p.source_end));
    (from, to.max(from), exact)
}

/// The plan, from the clusters' state and the operator's choice.
pub fn plan(s: &FailbackState, choice: Option<&Stranded>) -> Plan {
    let mut plan = Plan::default();
    plan.push(mirror_stopped(s));
    let total: usize = s.stranded.iter().map(|p| p.records.len()).sum();
    // The old source's end and the original mirror's position: moved while that mirror runs.
    plan.push(stranded(s, choice, total).reading_moving_state());
    plan.push(decision(s, choice, total));
    plan.push(mirror_moved(s, choice).reading_moving_state());
    plan.push(reverse_positions(s));
    plan.push(exclusions(s, choice));
    plan
}

/// The original mirror is stopped (it would copy the stranded records and, later, the
/// reverse mirror's).
fn mirror_stopped(s: &FailbackState) -> Step {
    let flow = &s.flow;
    if flow.mirror_members == 0 {
        Step::new(
            "mirror_stopped",
            StepState::Done,
            format!(
                "the original mirror's group {} has no member on {}",
                flow.mirror_group, flow.source_alias
            ),
        )
    } else {
        Step::new(
            "mirror_stopped",
            StepState::Refused,
            format!(
                "the original mirror (group {}) runs on the old source {} with {} member(s): \
                 stop it first; it would copy the stranded records and later the reverse \
                 mirror's",
                flow.mirror_group, flow.source_alias, flow.mirror_members
            ),
        )
    }
}

/// The stranded records found, reported per partition, and whether the operator decided
/// about them.
fn stranded(s: &FailbackState, choice: Option<&Stranded>, total: usize) -> Step {
    let flow = &s.flow;
    let mut report = String::new();
    let mut diverged_total = 0usize;
    for p in &s.stranded {
        // Written after the failover (producers kept writing to the old source): reported
        // apart, decided about the same way.
        let (diverged, stranded): (Vec<&StrandedRecord>, Vec<&StrandedRecord>) = p
            .records
            .iter()
            .partition(|r| s.failed_over_at.is_some_and(|t| r.timestamp > t));
        diverged_total += diverged.len();
        let _ = write!(
            report,
            "\n    {}: {} record(s) at offsets {}..{}",
            p.source,
            p.records.len(),
            p.from,
            p.to
        );
        for (what, records) in [("stranded", &stranded), ("diverged", &diverged)] {
            if s.failed_over_at.is_none() && what == "diverged" {
                continue;
            }
            let _ = write!(report, "; {what}: {}", records.len());
            let times = records.iter().map(|r| r.timestamp);
            if let (Some(first), Some(last)) = (times.clone().min(), times.max()) {
                let _ = write!(
                    report,
                    " (timestamps {first}..{last} ms, {:.1} s)",
                    (last - first) as f64 / 1000.0
                );
            }
        }
        if !p.exact {
            let _ = write!(
                report,
                " (from the mirror's committed position: no offset sync of this partition on \
                 the target, so some of them may be there already)"
            );
        }
    }

    match (total, choice) {
        (0, _) => Step::new(
            "stranded",
            StepState::Done,
            format!(
                "none: every record of the old source {} reached the target",
                flow.source_alias
            ),
        ),
        (_, None) => Step::new(
            "stranded",
            StepState::Refused,
            format!(
                "{total} record(s) on the old source {} never reached the target ({}):\
                 {report}\n    \
                 choose --stranded copy (append them to the target), --stranded export FILE \
                 (write them to a file) or --stranded drop (leave them on the old source only)",
                flow.source_alias,
                split(total, diverged_total, s.failed_over_at),
            ),
        ),
        (_, Some(c)) => Step::new(
            "stranded",
            StepState::Done,
            format!(
                "{total} record(s) on the old source never reached the target ({}; \
                 decision: {}):{report}",
                split(total, diverged_total, s.failed_over_at),
                c.as_str()
            ),
        ),
    }
}

/// The original mirror's group past the stranded records, with the decision.
fn mirror_moved(s: &FailbackState, choice: Option<&Stranded>) -> Step {
    let flow = &s.flow;
    // The original mirror's group past the stranded records (and the decision recorded with
    // it): restarted, it would copy them again.
    let marker = format!("{DECIDED}{}", choice.map_or("none", Stranded::as_str));
    let moves: Vec<CommitOffset> = flow
        .partitions
        .iter()
        .filter_map(|p| {
            let (_, to, _) = stranded_range(flow, p);
            let now = flow.mirror_commits.get(&p.source).map(|c| c.offset);
            now.is_none_or(|n| n < to).then(|| {
                let mut c = CommitOffset::new(p.source.clone(), to);
                c.metadata = Some(marker.clone());
                c
            })
        })
        .collect();

    if moves.is_empty() {
        Step::new(
            "mirror_moved",
            StepState::Done,
            format!(
                "the original mirror's group {} on {} is past every record there",
                flow.mirror_group, flow.source_alias
            ),
        )
    } else {
        let n = moves.len();
        Step::new(
            "mirror_moved",
            StepState::Todo(vec![Action::Commit {
                side: Side::Source,
                group: flow.mirror_group.clone(),
                offsets: moves,
            }]),
            format!(
                "move the original mirror's group {} on {} past the stranded records ({n} \
                 partition(s))",
                flow.mirror_group, flow.source_alias
            ),
        )
    }
}

/// The reverse mirror's start positions on the target.
fn reverse_positions(s: &FailbackState) -> Step {
    let flow = &s.flow;
    // The reverse mirror starts right after the last record mirrored before the failover: the
    // old source gets everything the target took since.
    let starts: Vec<CommitOffset> = flow
        .partitions
        .iter()
        .filter_map(|p| {
            let want = p.mirrored.map_or(p.target_start, |s| s.offset);
            let now = flow.reverse_commits.get(&p.target).map(|c| c.offset);
            now.is_none_or(|n| n < want)
                .then(|| CommitOffset::new(p.target.clone(), want))
        })
        .collect();
    if starts.is_empty() {
        Step::new(
            "reverse_positions",
            StepState::Done,
            format!(
                "the reverse mirror's group {} on {} starts after the last record mirrored \
                 before the failover",
                flow.mirror_group, flow.target_alias
            ),
        )
    } else if flow.reverse_members > 0 {
        Step::new(
            "reverse_positions",
            StepState::Refused,
            format!(
                "the reverse mirror's group {} already has {} member(s) on {}: stop it; its \
                 start positions are written before it starts",
                flow.mirror_group, flow.reverse_members, flow.target_alias
            ),
        )
    } else {
        let n = starts.len();
        Step::new(
            "reverse_positions",
            StepState::Todo(vec![Action::Commit {
                side: Side::Target,
                group: flow.mirror_group.clone(),
                offsets: starts,
            }]),
            format!(
                "commit the reverse mirror's group {} on {} after the last record mirrored \
                 before the failover ({n} partition(s))",
                flow.mirror_group, flow.target_alias
            ),
        )
    }
}

/// The step recording where the copies are on the target, so the reverse mirror skips them
/// (the old source holds their originals; see [`super::copies`]).
fn exclusions(s: &FailbackState, choice: Option<&Stranded>) -> Step {
    const NAME: &str = "copies_excluded";
    let flow = &s.flow;
    let group = super::copies::group(&flow.mirror_group);
    if choice != Some(&Stranded::Copy) {
        return Step::new(NAME, StepState::Done, "nothing copied to the target");
    }
    let copying = s
        .stranded
        .iter()
        .any(|p| p.records.iter().any(|r| !p.copied.contains(&r.offset)));
    if copying {
        // Their offsets on the target are known once they are there.
        return Step::new(
            NAME,
            StepState::Blocked,
            format!("record the copies' offsets in {group} once they are on the target"),
        );
    }
    let mut commits = Vec::new();
    let mut ranges = 0usize;
    for p in &s.stranded {
        let Some(last) = p.copy_batches.last() else {
            continue;
        };
        ranges += p.copy_batches.len();
        let Some(metadata) = super::copies::encode(&p.copy_batches) else {
            return Step::new(
                NAME,
                StepState::Refused,
                format!(
                    "the copies on {} lie in {} separate ranges, too many to record in a \
                     commit's metadata (offset.metadata.max.bytes): the reverse mirror would \
                     copy them back; append them with a Kafka producer while the target takes \
                     no other writes, or use --stranded export FILE",
                    p.target,
                    p.copy_batches.len()
                ),
            );
        };
        let now = s.excluded_now.get(&p.target).cloned().flatten();
        if now.as_deref() != Some(metadata.as_str()) {
            let mut c = CommitOffset::new(p.target.clone(), last.end);
            c.metadata = Some(metadata);
            commits.push(c);
        }
    }
    if commits.is_empty() {
        Step::new(
            NAME,
            StepState::Done,
            format!(
                "the copies' offsets on {} ({ranges} range(s)) are recorded in {group}: the \
                 reverse mirror does not copy them back",
                flow.target_alias
            ),
        )
    } else if flow.reverse_members > 0 {
        Step::new(
            NAME,
            StepState::Refused,
            format!(
                "the reverse mirror's group {} already has {} member(s) on {}: stop it; it \
                 reads the copies' offsets (in {group}) when it starts a partition, and would \
                 copy them back to the old source",
                flow.mirror_group, flow.reverse_members, flow.target_alias
            ),
        )
    } else {
        let n = commits.len();
        Step::new(
            NAME,
            StepState::Todo(vec![Action::Commit {
                side: Side::Target,
                group: group.clone(),
                offsets: commits,
            }]),
            format!(
                "record the copies' offsets on {} in {group} ({n} partition(s), {ranges} \
                 range(s)): the reverse mirror skips them",
                flow.target_alias
            ),
        )
    }
}

/// How many of `total` are stranded and diverged, in words.
fn split(total: usize, diverged: usize, failed_over_at: Option<i64>) -> String {
    match failed_over_at {
        Some(t) => format!(
            "{} stranded, {diverged} diverged (timestamps after --failed-over-at {t})",
            total - diverged
        ),
        None => "stranded and diverged alike: give --failed-over-at to tell them apart".into(),
    }
}

/// The step carrying out the decision about the stranded records.
fn decision(s: &FailbackState, choice: Option<&Stranded>, total: usize) -> Step {
    const NAME: &str = "stranded_decision";
    match choice {
        _ if total == 0 => Step::new(NAME, StepState::Done, "nothing to decide"),
        None => Step::new(NAME, StepState::Blocked, "waits for --stranded"),
        Some(Stranded::Drop) => Step::new(
            NAME,
            StepState::Done,
            format!("dropped: {total} record(s) stay on the old source only"),
        ),
        Some(Stranded::Copy) => {
            let copies: Vec<Action> = s
                .stranded
                .iter()
                .filter_map(|p| {
                    let records: Vec<StrandedRecord> = p
                        .records
                        .iter()
                        .filter(|r| !p.copied.contains(&r.offset))
                        .cloned()
                        .collect();
                    (!records.is_empty()).then(|| Action::Copy {
                        to: p.target.clone(),
                        records,
                    })
                })
                .collect();
            if copies.is_empty() {
                Step::new(
                    NAME,
                    StepState::Done,
                    format!("copied: {total} record(s) are on the target"),
                )
            } else {
                let n: usize = copies
                    .iter()
                    .map(|a| match a {
                        Action::Copy { records, .. } => records.len(),
                        _ => 0,
                    })
                    .sum();
                Step::new(
                    NAME,
                    StepState::Todo(copies),
                    format!("append {n} record(s) to the target's partitions"),
                )
            }
        }
        Some(Stranded::Export(file)) => {
            let records: Vec<StrandedRecord> = s
                .stranded
                .iter()
                .flat_map(|p| p.records.iter().cloned())
                .collect();
            let text = export_text(&records);
            if s.export_existing.as_deref() == Some(text.as_str()) {
                Step::new(
                    NAME,
                    StepState::Done,
                    format!("exported: {total} record(s) in {}", file.display()),
                )
            } else {
                Step::new(
                    NAME,
                    StepState::Todo(vec![Action::Export {
                        file: file.clone(),
                        records,
                    }]),
                    format!("write {total} record(s) to {}", file.display()),
                )
            }
        }
    }
}

/// The failback of one flow against its clusters.
pub struct Failback<'a> {
    config: &'a Config,
    clusters: Clusters,
    options: FailbackOptions,
}

impl<'a> Failback<'a> {
    /// Connects to both clusters of `config` (rename = "identity" only).
    pub async fn connect(config: &'a Config, options: FailbackOptions) -> Result<Failback<'a>> {
        super::state::require_identity(config, "failback")?;
        Ok(Failback {
            config,
            clusters: Clusters::connect(config).await?,
            options,
        })
    }

    /// Reads the state the plan depends on: the flow, and the stranded records (and, to copy,
    /// which of them are on the target already).
    pub async fn read(&self) -> Result<FailbackState> {
        let flow = read_flow(self.config, &self.clusters).await?;
        let mut stranded = Vec::new();
        for p in &flow.partitions {
            let (from, to, exact) = stranded_range(&flow, p);
            if from >= to {
                continue;
            }
            let records = read_range(&self.clusters.source, &p.source, from, to).await?;
            let copies = match self.options.choice {
                Some(Stranded::Copy) => {
                    // Copies are appended after the records mirrored before the failover.
                    let after = p.mirrored.map_or(p.target_start, |s| s.offset);
                    copied(
                        &self.clusters.target,
                        &p.target,
                        after.max(p.target_start),
                        p.target_end,
                        &self.config.source.alias,
                        &p.source,
                    )
                    .await?
                }
                _ => Default::default(),
            };
            stranded.push(StrandedPartition {
                source: p.source.clone(),
                target: p.target.clone(),
                from,
                to,
                exact,
                records,
                copied: copies.source_offsets,
                copy_batches: copies.batches,
            });
        }
        let excluded_now = match self.options.choice {
            Some(Stranded::Copy) => {
                let targets: Vec<TopicPartition> =
                    stranded.iter().map(|p| p.target.clone()).collect();
                let group = super::copies::group(&flow.mirror_group);
                strait_wire::offset_commit::GroupOffsets::new(&self.clusters.target, &group)
                    .fetch(&targets)
                    .await
                    .map_err(|e| {
                        Error::Runtime(format!(
                            "reading the offsets of {group} on {}: {e}",
                            self.config.target.alias
                        ))
                    })?
                    .into_iter()
                    .map(|(tp, c)| (tp, c.and_then(|c| c.metadata)))
                    .collect()
            }
            _ => BTreeMap::new(),
        };
        let export_existing = match &self.options.choice {
            Some(Stranded::Export(file)) => std::fs::read_to_string(file).ok(),
            _ => None,
        };
        Ok(FailbackState {
            flow,
            stranded,
            export_existing,
            failed_over_at: self.options.failed_over_at,
            excluded_now,
        })
    }
}

impl Handover for Failback<'_> {
    async fn plan(&mut self) -> Result<Plan> {
        Ok(plan(&self.read().await?, self.options.choice.as_ref()))
    }

    async fn execute(&mut self, action: &Action) -> Result<()> {
        super::switchover::execute(self.config, &self.clusters, action).await
    }
}

/// Runs `strait failback` for `config`; `out` receives what is printed.
pub async fn run(
    config: &Config,
    failback: FailbackOptions,
    options: &DriveOptions,
    out: impl FnMut(&str),
) -> Result<Plan> {
    let mut f = Failback::connect(config, failback).await?;
    super::plan::drive(&mut f, options, out).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::failover::Sync;
    use bytes::Bytes;
    use strait_wire::offset_commit::CommittedOffset;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("o", p).unwrap()
    }

    fn record(offset: i64) -> StrandedRecord {
        StrandedRecord {
            partition: tp(0),
            offset,
            timestamp: 1000 + offset,
            key: None,
            value: Some(Bytes::from(format!("0-{offset}"))),
            headers: Vec::new(),
        }
    }

    /// Source 0..100 mirrored to target 0..100, then 30 more on the source (stranded); the
    /// target took 20 records after the failover (end 120).
    fn state() -> FailbackState {
        let mut flow = FlowState {
            source_alias: "eu".into(),
            target_alias: "us".into(),
            mirror_group: "m".into(),
            ..FlowState::default()
        };
        flow.maps.replay(&tp(0), Sync::new(0, 0));
        flow.maps.replay(&tp(0), Sync::new(100, 100));
        flow.partitions = vec![PartitionState {
            source: tp(0),
            target: tp(0),
            source_start: 0,
            source_end: 130,
            target_start: 0,
            target_end: 120,
            mirrored: flow.maps.frontier(&tp(0)),
        }];
        flow.mirror_commits.insert(
            tp(0),
            CommittedOffset {
                offset: 100,
                leader_epoch: None,
                metadata: None,
            },
        );
        let (from, to, exact) = stranded_range(&flow, &flow.partitions[0]);
        assert_eq!((from, to, exact), (100, 130, true));
        FailbackState {
            stranded: vec![StrandedPartition {
                source: tp(0),
                target: tp(0),
                from,
                to,
                exact,
                records: (100..130).map(record).collect(),
                copied: BTreeSet::new(),
                copy_batches: Vec::new(),
            }],
            flow,
            export_existing: None,
            failed_over_at: None,
            excluded_now: BTreeMap::new(),
        }
    }

    #[test]
    fn stranded_records_need_an_explicit_decision() {
        let s = state();
        let p = plan(&s, None);
        let refused = p.refused().unwrap();
        assert_eq!(refused.name, "stranded");
        assert!(
            refused
                .detail
                .contains("o-0: 30 record(s) at offsets 100..130")
                && refused.detail.contains("--stranded copy"),
            "{p}"
        );
        let p = plan(&s, Some(&Stranded::Drop));
        assert!(p.refused().is_none(), "{p}");
        assert_eq!(p.steps[2].state, StepState::Done);
    }

    #[test]
    fn records_after_the_failover_are_reported_as_diverged() {
        let mut s = state();
        // Timestamps are 1000 + offset: offsets 120..130 were written after 1119.
        s.failed_over_at = Some(1119);
        let p = plan(&s, Some(&Stranded::Drop));
        let d = &p.steps[1].detail;
        assert!(d.contains("20 stranded, 10 diverged"), "{p}");
        assert!(
            d.contains("stranded: 20 (timestamps 1100..1119 ms")
                && d.contains("diverged: 10 (timestamps 1120..1129 ms"),
            "{p}"
        );
    }

    #[test]
    fn copy_appends_what_is_not_there_yet_then_moves_both_mirrors() {
        let mut s = state();
        s.stranded[0].copied = (100..110).collect();
        let p = plan(&s, Some(&Stranded::Copy));
        let StepState::Todo(a) = &p.steps[2].state else {
            panic!("{p}")
        };
        let Action::Copy { records, .. } = &a[0] else {
            panic!()
        };
        assert_eq!(
            records.first().map(|r| r.offset),
            Some(110),
            "a re-run skips copies"
        );
        assert_eq!(records.len(), 20);
        let StepState::Todo(a) = &p.steps[3].state else {
            panic!("{p}")
        };
        let Action::Commit { side, offsets, .. } = &a[0] else {
            panic!()
        };
        assert_eq!(*side, Side::Source);
        assert_eq!(offsets[0].offset, 130);
        assert_eq!(offsets[0].metadata.as_deref(), Some("strait.failback=copy"));
        let StepState::Todo(a) = &p.steps[4].state else {
            panic!("{p}")
        };
        let Action::Commit { side, offsets, .. } = &a[0] else {
            panic!()
        };
        assert_eq!(*side, Side::Target);
        assert_eq!(offsets[0].offset, 100, "after the last mirrored record");
    }

    #[test]
    fn the_recorded_decision_bounds_the_range_after_the_reverse_mirror_wrote() {
        let mut s = state();
        s.flow.mirror_commits.insert(
            tp(0),
            CommittedOffset {
                offset: 130,
                leader_epoch: None,
                metadata: Some("strait.failback=copy".into()),
            },
        );
        // The reverse mirror appended 20 records to the old source since.
        s.flow.partitions[0].source_end = 150;
        let (from, to, _) = stranded_range(&s.flow, &s.flow.partitions[0]);
        assert_eq!((from, to), (100, 130));
        s.stranded[0].copied = (100..130).collect();
        s.flow.reverse_commits.insert(
            tp(0),
            CommittedOffset {
                offset: 120,
                leader_epoch: None,
                metadata: None,
            },
        );
        s.flow.reverse_members = 1;
        let p = plan(&s, Some(&Stranded::Copy));
        assert!(p.is_done(), "{p}");
    }

    #[test]
    fn the_copies_offsets_are_recorded_for_the_reverse_mirror_once_they_are_there() {
        let mut s = state();
        let p = plan(&s, Some(&Stranded::Copy));
        let last = p.steps.last().unwrap();
        assert_eq!(
            (last.name, &last.state),
            ("copies_excluded", &StepState::Blocked),
            "{p}"
        );
        // Copied: 30 records in one batch at 120..150 on the target.
        s.stranded[0].copied = (100..130).collect();
        s.stranded[0].copy_batches = std::iter::once(120..150).collect();
        let p = plan(&s, Some(&Stranded::Copy));
        let StepState::Todo(a) = &p.steps.last().unwrap().state else {
            panic!("{p}")
        };
        let Action::Commit {
            side,
            group,
            offsets,
        } = &a[0]
        else {
            panic!()
        };
        assert_eq!((*side, group.as_str()), (Side::Target, "m.failback-copies"));
        assert_eq!(offsets[0].offset, 150);
        assert_eq!(
            offsets[0].metadata.as_deref(),
            Some("strait.failback.copies=120-150")
        );
        s.excluded_now
            .insert(tp(0), Some("strait.failback.copies=120-150".into()));
        assert_eq!(
            plan(&s, Some(&Stranded::Copy)).steps.last().unwrap().state,
            StepState::Done
        );
        // Not with a running reverse mirror: it reads them when it starts a partition.
        s.excluded_now.clear();
        s.flow.reverse_members = 1;
        assert_eq!(
            plan(&s, Some(&Stranded::Copy)).steps.last().unwrap().state,
            StepState::Refused
        );
    }

    #[test]
    fn export_is_done_when_the_file_holds_exactly_the_records() {
        let mut s = state();
        let choice = Stranded::Export(PathBuf::from("x.jsonl"));
        assert!(matches!(
            plan(&s, Some(&choice)).steps[2].state,
            StepState::Todo(_)
        ));
        s.export_existing = Some(export_text(&s.stranded[0].records));
        assert_eq!(plan(&s, Some(&choice)).steps[2].state, StepState::Done);
        assert_eq!(s.export_existing.unwrap().lines().count(), 30);
    }
}
