//! `strait switchover`: a planned move of a flow's producers and consumers from the source site
//! to the target site, both up. No record lost, none repeated, every group resuming exactly.
//!
//! The operator stops the producers on the source; the command waits until the flow's consumer
//! groups have stopped on the source, the mirror's lag is 0 and the mirror is stopped, then
//! writes last checkpoints, commits the groups' translated offsets on the target, and commits
//! the reverse flow's start positions (its group on the target at the target's end offsets,
//! so it copies only what is written after the switch). [`plan`] decides from the clusters'
//! state alone; [`run`] reads that state and carries the plan out.

use std::collections::BTreeMap;

use strait_wire::offset_commit::CommitOffset;

use super::checkpoint::checkpoints_topic;
use super::format::now_ms;
use super::format::{Checkpoint, Rpo};
use super::plan::{Action, DriveOptions, Handover, Plan, Side, Step, StepState};
use super::state::{Clusters, FlowState, GroupState, PartitionState, read_flow};
use super::{Miss, command, topic};
use crate::config::Config;
use crate::error::{Error, Result};

/// Everything the plan depends on.
#[derive(Debug, Default)]
pub struct SwitchoverState {
    /// The flow's partitions and mirror groups.
    pub flow: FlowState,
    /// The flow's consumer groups.
    pub groups: Vec<GroupState>,
    /// False when `mirror.groups` is not set (no group is moved).
    pub groups_selected: bool,
    /// The latest checkpoint per (group, target topic, partition) on the target.
    pub checkpoints: BTreeMap<(String, String, i32), Checkpoint>,
    /// Now (ms since the epoch), for the checkpoints' recovery point.
    pub now_ms: i64,
}

/// The metadata of the reverse group's start positions: names the switch by the source's end
/// offsets at that moment, so a re-run of the same switchover recognises its own commit (and
/// keeps it, even when the target has taken writes since), while a later switchover (after
/// more was written to the source) does not.
pub fn marker(flow: &FlowState) -> String {
    let ends: i64 = flow.partitions.iter().map(|p| p.source_end).sum();
    format!(
        "strait.switchover={}->{}@{ends}",
        flow.source_alias, flow.target_alias
    )
}

/// Where the mirror is on `p`: the next source offset after what reached the target.
fn mirrored_to(flow: &FlowState, p: &PartitionState) -> i64 {
    let committed = flow.mirror_commits.get(&p.source).map(|c| c.offset);
    p.mirrored
        .map(|s| s.upstream)
        .into_iter()
        .chain(committed)
        .chain([p.source_start])
        .max()
        .unwrap_or(p.source_start)
}

/// The target offset for a group committed at source offset `c` of `p`, once the lag is 0.
fn translate(flow: &FlowState, p: &PartitionState, c: i64) -> Result<i64, Miss> {
    match flow.maps.translate(&p.source, c) {
        Ok(t) => Ok(t),
        // Nothing of the partition was mirrored and the group has read everything there is:
        // it starts at the target's end.
        Err(Miss::Empty) if c >= p.source_end => Ok(p.target_end),
        Err(m) => Err(m),
    }
}

/// The plan, from the clusters' state.
pub fn plan(s: &SwitchoverState) -> Plan {
    let flow = &s.flow;
    let mut plan = Plan::default();
    // Written last: when it is done, the switchover is complete and the groups' consumers may
    // run on the target.
    let reverse = reverse_positions(flow);
    let complete = reverse.state == StepState::Done;
    plan.push(target_groups_idle(s, complete));
    plan.push(source_groups_stopped(s));
    plan.push(lag_zero(flow));
    plan.push(mirror_stopped(flow));
    // While the mirror still moves, a group's last offsets may not be covered by the offset
    // syncs yet, and the target's end moves: the steps below read that state, so the plan
    // blocks them until nothing waits (Plan::push).
    let (translated, misses) = translations(s);
    plan.push(checkpoints(s, &translated, &misses).reading_moving_state());
    plan.push(groups_applied(&translated).reading_moving_state());
    // Not marked as reading moving state: once done it is final (its marker names the switch),
    // and its actions wait for an earlier waiting step anyway.
    plan.push(reverse);
    plan
}

/// No group of the switchover consumes on the target (or the switchover is complete).
fn target_groups_idle(s: &SwitchoverState, complete: bool) -> Step {
    let flow = &s.flow;
    let active: Vec<String> = s
        .groups
        .iter()
        .filter(|g| g.target_members > 0)
        .map(|g| format!("{} ({} members)", g.name, g.target_members))
        .collect();
    if !active.is_empty() && complete {
        Step::new(
            "target_groups_idle",
            StepState::Done,
            format!(
                "the switchover is complete: {} consume on the target",
                active.join(", ")
            ),
        )
    } else if active.is_empty() {
        Step::new(
            "target_groups_idle",
            StepState::Done,
            if s.groups_selected {
                format!(
                    "{} group(s) of mirror.groups, none active on {}",
                    s.groups.len(),
                    flow.target_alias
                )
            } else {
                "mirror.groups is not set: no consumer group is moved".to_string()
            },
        )
    } else {
        Step::new(
            "target_groups_idle",
            StepState::Refused,
            format!(
                "group(s) {} active on the target {}: a switchover would commit under running \
                 consumers; stop them there first",
                active.join(", "),
                flow.target_alias
            ),
        )
    }
}

/// No group of the switchover consumes on the source any more.
fn source_groups_stopped(s: &SwitchoverState) -> Step {
    let flow = &s.flow;
    let running: Vec<String> = s
        .groups
        .iter()
        .filter(|g| g.source_members > 0)
        .map(|g| format!("{} ({} members)", g.name, g.source_members))
        .collect();
    if running.is_empty() {
        Step::new(
            "source_groups_stopped",
            StepState::Done,
            "no consumer of the groups runs on the source",
        )
    } else {
        Step::new(
            "source_groups_stopped",
            StepState::Waiting,
            format!(
                "group(s) {} still consume on the source {}: stop them once they have read \
                 what they need (they commit their last offsets when they stop)",
                running.join(", "),
                flow.source_alias
            ),
        )
    }
}

/// Every record of the source is on the target.
fn lag_zero(flow: &FlowState) -> Step {
    let lagging: Vec<String> = flow
        .partitions
        .iter()
        .filter_map(|p| {
            let lag = p.source_end - mirrored_to(flow, p);
            (lag > 0).then(|| format!("{} ({lag})", p.source))
        })
        .collect();
    if lagging.is_empty() {
        Step::new(
            "lag_zero",
            StepState::Done,
            format!(
                "every record of {} partition(s) is on the target",
                flow.partitions.len()
            ),
        )
    } else {
        Step::new(
            "lag_zero",
            StepState::Waiting,
            format!(
                "{} partition(s) have records not mirrored yet: {}; stop the producers on the \
                 source and keep the mirror running{}",
                lagging.len(),
                abbreviate(&lagging),
                if flow.reverse_commits.is_empty() {
                    ""
                } else {
                    // After a completed switchover the reverse mirror writes to the source: that
                    // is not lag of this flow.
                    " (if the reverse flow already runs, this switchover is complete)"
                }
            ),
        )
    }
}

/// The mirror has stopped (its lag is 0 by then).
fn mirror_stopped(flow: &FlowState) -> Step {
    if flow.mirror_members == 0 {
        Step::new(
            "mirror_stopped",
            StepState::Done,
            format!("the mirror's group {} has no member", flow.mirror_group),
        )
    } else {
        Step::new(
            "mirror_stopped",
            StepState::Waiting,
            format!(
                "the mirror (group {}) still runs on the source: stop it now (SIGTERM); its lag \
                 is 0",
                flow.mirror_group
            ),
        )
    }
}

/// A group's committed source offset with its exact target offset: (group, partition,
/// source offset, target offset, the group's own commit metadata).
type Translated<'a> = (&'a GroupState, &'a PartitionState, i64, i64, String);

/// The groups' translations: every committed source offset, to the exact target offset; and
/// the offsets that have none, in words.
fn translations(s: &SwitchoverState) -> (Vec<Translated<'_>>, Vec<String>) {
    let flow = &s.flow;
    let mut translated = Vec::new();
    let mut misses = Vec::new();
    for g in &s.groups {
        for p in &flow.partitions {
            let Some(c) = g.source_commits.get(&p.source) else {
                continue;
            };
            match translate(flow, p, c.offset) {
                Ok(t) => {
                    let own = c.metadata.clone().unwrap_or_default();
                    translated.push((g, p, c.offset, t, own));
                }
                Err(m) => misses.push(format!("{} {} at {}: {m}", g.name, p.source, c.offset)),
            }
        }
    }
    (translated, misses)
}

/// The last checkpoints, at the groups' translated offsets (with the RPO of the switch).
fn checkpoints(s: &SwitchoverState, translated: &[Translated<'_>], misses: &[String]) -> Step {
    let flow = &s.flow;
    if !misses.is_empty() {
        return Step::new(
            "checkpoints",
            StepState::Refused,
            format!(
                "committed offsets that cannot be translated exactly: {}; the offset syncs on \
                 the target do not cover them (see docs/failover.md, translation misses)",
                abbreviate(misses)
            ),
        );
    }
    let missing: Vec<Checkpoint> = translated
        .iter()
        .filter(|(g, p, c, t, _)| {
            let key = (
                g.name.clone(),
                p.target.topic().to_string(),
                p.target.partition(),
            );
            s.checkpoints
                .get(&key)
                .is_none_or(|cp| cp.upstream_offset != *c || cp.offset != *t)
        })
        .map(|(g, p, c, t, own)| Checkpoint {
            group: g.name.clone(),
            topic: p.target.topic().to_string(),
            partition: p.target.partition(),
            upstream_offset: *c,
            offset: *t,
            metadata: Rpo {
                source_end: p.source_end,
                mirrored: mirrored_to(flow, p),
                timestamp_ms: s.now_ms,
            }
            .wrap(own),
        })
        .collect();
    if missing.is_empty() {
        return Step::new(
            "checkpoints",
            StepState::Done,
            format!(
                "{} checkpoint(s) at the groups' last offsets",
                translated.len()
            ),
        );
    }
    let n = missing.len();
    Step::new(
        "checkpoints",
        StepState::Todo(vec![Action::WriteCheckpoints(missing)]),
        format!("write {n} last checkpoint(s)"),
    )
}

/// The groups on the target: at their translations, never moved backwards.
fn groups_applied(translated: &[Translated<'_>]) -> Step {
    let mut by_group: BTreeMap<&str, Vec<CommitOffset>> = BTreeMap::new();
    let mut kept = 0usize;
    for (g, p, _, t, own) in translated {
        match g.target_commits.get(&p.target) {
            Some(now) if now >= t => kept += usize::from(now > t),
            _ => {
                let mut commit = CommitOffset::new(p.target.clone(), *t);
                if !own.is_empty() {
                    commit.metadata = Some(own.clone());
                }
                by_group.entry(g.name.as_str()).or_default().push(commit);
            }
        }
    }
    if by_group.is_empty() {
        return Step::new(
            "groups_applied",
            StepState::Done,
            format!(
                "{} group partition(s) at their translated offsets on the target ({kept} kept \
                 ahead)",
                translated.len()
            ),
        );
    }
    let detail = by_group
        .iter()
        .map(|(g, c)| format!("{g}: {} partition(s)", c.len()))
        .collect::<Vec<_>>()
        .join(", ");
    Step::new(
        "groups_applied",
        StepState::Todo(
            by_group
                .into_iter()
                .map(|(group, offsets)| Action::Commit {
                    side: Side::Target,
                    group: group.to_string(),
                    offsets,
                })
                .collect(),
        ),
        format!("commit the translated offsets on the target ({detail})"),
    )
}
/// The reverse mirror's group on the target at the target's end offsets: it copies only
/// what is written after the switch.
fn reverse_positions(flow: &FlowState) -> Step {
    let marker = marker(flow);
    let todo: Vec<CommitOffset> = flow
        .partitions
        .iter()
        .filter(|p| {
            flow.reverse_commits.get(&p.target).is_none_or(|c| {
                c.offset < p.target_end && c.metadata.as_deref() != Some(marker.as_str())
            })
        })
        .map(|p| {
            let mut c = CommitOffset::new(p.target.clone(), p.target_end);
            c.metadata = Some(marker.clone());
            c
        })
        .collect();
    if todo.is_empty() {
        return Step::new(
            "reverse_positions",
            StepState::Done,
            format!(
                "the reverse mirror's group {} on {} starts after the switch in {} partition(s)",
                flow.mirror_group,
                flow.target_alias,
                flow.partitions.len()
            ),
        );
    }
    if flow.reverse_members > 0 {
        return Step::new(
            "reverse_positions",
            StepState::Refused,
            format!(
                "the reverse mirror's group {} already has {} member(s) on {}: stop that mirror; \
                 its start positions are written before it starts",
                flow.mirror_group, flow.reverse_members, flow.target_alias
            ),
        );
    }
    let n = todo.len();
    Step::new(
        "reverse_positions",
        StepState::Todo(vec![Action::Commit {
            side: Side::Target,
            group: flow.mirror_group.clone(),
            offsets: todo,
        }]),
        format!(
            "commit the reverse mirror's group {} on {} at the target's end offsets ({n} \
             partition(s))",
            flow.mirror_group, flow.target_alias
        ),
    )
}

/// At most five items, then how many more.
pub(crate) fn abbreviate(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        s.push_str(&format!(" and {} more", items.len() - 5));
    }
    s
}

/// The switchover of one flow against its clusters.
pub struct Switchover<'a> {
    config: &'a Config,
    clusters: Clusters,
}

impl<'a> Switchover<'a> {
    /// Connects to both clusters of `config` (rename = "identity" only).
    pub async fn connect(config: &'a Config) -> Result<Switchover<'a>> {
        super::state::require_identity(config, "switchover")?;
        Ok(Switchover {
            config,
            clusters: Clusters::connect(config).await?,
        })
    }

    /// Reads the state the plan depends on.
    pub async fn read(&self) -> Result<SwitchoverState> {
        let flow = read_flow(self.config, &self.clusters).await?;
        let groups = super::state::read_groups(self.config, &self.clusters, &flow).await?;
        let checkpoints =
            command::latest_checkpoints(&self.clusters.target, &self.config.source.alias).await?;
        Ok(SwitchoverState {
            flow,
            groups,
            groups_selected: self.config.mirror.groups.is_some(),
            checkpoints,
            now_ms: now_ms(),
        })
    }
}

impl Handover for Switchover<'_> {
    async fn plan(&mut self) -> Result<Plan> {
        Ok(plan(&self.read().await?))
    }

    async fn execute(&mut self, action: &Action) -> Result<()> {
        execute(self.config, &self.clusters, action).await
    }
}

/// Carries out one action against the clusters of `config` (shared with failback).
pub(crate) async fn execute(config: &Config, clusters: &Clusters, action: &Action) -> Result<()> {
    match action {
        Action::WriteCheckpoints(cps) => {
            let records = cps
                .iter()
                .map(|cp| {
                    Ok((
                        cp.encode_key().map_err(fmt)?,
                        cp.encode_value().map_err(fmt)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let name = checkpoints_topic(&config.source.alias);
            topic::ensure_compacted(&clusters.target, &name, config.mirror.replication_factor)
                .await?;
            topic::append(&clusters.target, &name, &records).await
        }
        Action::Commit {
            side,
            group,
            offsets,
        } => {
            let (client, alias) = match side {
                Side::Source => (&clusters.source, &config.source.alias),
                Side::Target => (&clusters.target, &config.target.alias),
            };
            strait_wire::offset_commit::GroupOffsets::new(client, group)
                .commit(&strait_wire::group::Generation::simple(), offsets)
                .await
                .map_err(|e| {
                    Error::Runtime(format!(
                        "committing the offsets of {group} on {alias}: {e}; a group with \
                         members refuses commits from outside: stop its consumers"
                    ))
                })
        }
        Action::Copy { to, records } => {
            super::records::append(&clusters.target, to, records, &config.source.alias).await
        }
        Action::Export { file, records } => super::records::export(file, records),
    }
}

fn fmt(e: impl std::fmt::Display) -> Error {
    Error::Runtime(format!("cannot encode a checkpoint: {e}"))
}

/// Runs `strait switchover` for `config`; `out` receives what is printed.
pub async fn run(config: &Config, options: &DriveOptions, out: impl FnMut(&str)) -> Result<Plan> {
    let mut s = Switchover::connect(config).await?;
    super::plan::drive(&mut s, options, out).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::failover::Sync;
    use strait_wire::TopicPartition;
    use strait_wire::offset_commit::CommittedOffset;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p).unwrap()
    }

    fn committed(offset: i64, metadata: Option<&str>) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: None,
            metadata: metadata.map(str::to_string),
        }
    }

    /// One partition: source 0..100 mirrored to target 7..107 (7 records of the target's own
    /// first), the mirror stopped at 100, group "app" at 40 on the source.
    fn state() -> SwitchoverState {
        let mut flow = FlowState {
            source_alias: "eu".into(),
            target_alias: "us".into(),
            mirror_group: "m".into(),
            ..FlowState::default()
        };
        flow.maps.replay(&tp("o", 0), Sync::new(0, 7));
        flow.maps.replay(&tp("o", 0), Sync::new(100, 107));
        flow.partitions = vec![PartitionState {
            source: tp("o", 0),
            target: tp("o", 0),
            source_start: 0,
            source_end: 100,
            target_start: 0,
            target_end: 107,
            mirrored: flow.maps.frontier(&tp("o", 0)),
        }];
        flow.mirror_commits.insert(tp("o", 0), committed(100, None));
        let mut app = GroupState {
            name: "app".into(),
            ..GroupState::default()
        };
        app.source_commits
            .insert(tp("o", 0), committed(40, Some("x")));
        SwitchoverState {
            flow,
            groups: vec![app],
            groups_selected: true,
            checkpoints: BTreeMap::new(),
            now_ms: 1,
        }
    }

    fn names(plan: &Plan, wanted: fn(&StepState) -> bool) -> Vec<&'static str> {
        plan.steps
            .iter()
            .filter(|s| wanted(&s.state))
            .map(|s| s.name)
            .collect()
    }

    #[test]
    fn a_quiet_flow_is_switched_in_three_writes() {
        let s = state();
        let plan = plan(&s);
        assert_eq!(
            names(&plan, |s| matches!(s, StepState::Todo(_))),
            ["checkpoints", "groups_applied", "reverse_positions"],
            "{plan}"
        );
        let StepState::Todo(a) = &plan.steps[5].state else {
            panic!()
        };
        let Action::Commit {
            side,
            group,
            offsets,
        } = &a[0]
        else {
            panic!()
        };
        assert_eq!((side, group.as_str()), (&Side::Target, "app"));
        assert_eq!(
            (offsets[0].offset, offsets[0].metadata.as_deref()),
            (47, Some("x"))
        );
        let StepState::Todo(a) = &plan.steps[6].state else {
            panic!()
        };
        let Action::Commit { group, offsets, .. } = &a[0] else {
            panic!()
        };
        assert_eq!(group, "m");
        assert_eq!(
            offsets[0].offset, 107,
            "the reverse flow starts at the target's end"
        );
        assert_eq!(
            offsets[0].metadata.as_deref(),
            Some("strait.switchover=eu->us@100")
        );
    }

    #[test]
    fn every_step_done_reads_as_done() {
        let mut s = state();
        let plan1 = plan(&s);
        // What the actions write, as the clusters would show it.
        for step in &plan1.steps {
            let StepState::Todo(actions) = &step.state else {
                continue;
            };
            for a in actions {
                match a {
                    Action::WriteCheckpoints(cps) => {
                        for cp in cps {
                            s.checkpoints.insert(
                                (cp.group.clone(), cp.topic.clone(), cp.partition),
                                cp.clone(),
                            );
                        }
                    }
                    Action::Commit { group, offsets, .. } if group == "app" => {
                        for o in offsets {
                            s.groups[0]
                                .target_commits
                                .insert(o.partition.clone(), o.offset);
                        }
                    }
                    Action::Commit { offsets, .. } => {
                        for o in offsets {
                            s.flow.reverse_commits.insert(
                                o.partition.clone(),
                                committed(o.offset, o.metadata.as_deref()),
                            );
                        }
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        assert!(plan(&s).is_done(), "{}", plan(&s));
        // The consumers run on the target now: a re-run still reads as done.
        s.groups[0].target_members = 1;
        assert!(plan(&s).is_done(), "{}", plan(&s));
        // The target takes writes after the switch: a re-run keeps the reverse positions
        // (recognised by their marker) instead of skipping the new records.
        s.flow.partitions[0].target_end = 150;
        assert!(plan(&s).is_done(), "{}", plan(&s));
        // A later switchover (the source moved on, the consumers stopped) sets them again.
        s.groups[0].target_members = 0;
        s.flow.partitions[0].source_end = 120;
        s.flow.maps.replay(&tp("o", 0), Sync::new(120, 170));
        s.flow.partitions[0].mirrored = s.flow.maps.frontier(&tp("o", 0));
        let again = plan(&s);
        assert!(
            matches!(again.steps[6].state, StepState::Todo(_)),
            "{again}"
        );
    }

    #[test]
    fn waits_for_lag_consumers_and_the_mirror_and_refuses_active_target_groups() {
        let mut s = state();
        s.flow.partitions[0].source_end = 130;
        s.flow.mirror_members = 1;
        s.groups[0].source_members = 2;
        let p = plan(&s);
        assert_eq!(
            names(&p, |s| *s == StepState::Waiting),
            ["source_groups_stopped", "lag_zero", "mirror_stopped"]
        );
        assert!(p.steps[2].detail.contains("o-0 (30)"), "{p}");
        assert_eq!(
            names(&p, |s| *s == StepState::Blocked),
            ["checkpoints", "groups_applied", "reverse_positions"]
        );
        s.groups[0].target_members = 1;
        let p = plan(&s);
        let refused = p.refused().unwrap();
        assert_eq!(refused.name, "target_groups_idle");
        assert!(refused.detail.contains("app (1 members)"), "{p}");
    }

    #[test]
    fn a_group_ahead_of_the_mirror_blocks_the_later_steps_instead_of_passing_them() {
        // The group read past what the mirror has copied (and synced) so far: its offset has
        // no translation yet, which must not read as "nothing to apply".
        let mut s = state();
        s.flow.partitions[0].source_end = 130;
        s.groups[0]
            .source_commits
            .insert(tp("o", 0), committed(125, None));
        let p = plan(&s);
        assert_eq!(names(&p, |s| *s == StepState::Waiting), ["lag_zero"], "{p}");
        assert_eq!(
            names(&p, |s| *s == StepState::Blocked),
            ["checkpoints", "groups_applied", "reverse_positions"],
            "{p}"
        );
        let checkpoints = &p.steps[p.steps.len() - 3];
        assert!(
            checkpoints.detail.starts_with("after lag_zero (so far: "),
            "{p}"
        );
        // Nothing found to do while the mirror moves is no more final than a miss: a group
        // with no commit at all reads as done only once the lag is zero.
        s.groups[0].source_commits.clear();
        let p = plan(&s);
        assert_eq!(
            names(&p, |s| *s == StepState::Blocked),
            ["checkpoints", "groups_applied", "reverse_positions"],
            "{p}"
        );
    }

    #[test]
    fn a_group_ahead_on_the_target_is_kept_and_an_active_reverse_mirror_refused() {
        let mut s = state();
        s.groups[0].target_commits.insert(tp("o", 0), 90);
        s.flow.reverse_members = 1;
        let p = plan(&s);
        assert_eq!(p.steps[5].state, StepState::Done, "{p}");
        assert!(p.steps[5].detail.contains("1 kept ahead"), "{p}");
        assert_eq!(p.refused().map(|s| s.name), Some("reverse_positions"));
    }

    #[test]
    fn an_untranslatable_offset_is_refused_not_guessed() {
        let mut s = state();
        // Unknown range between two persisted runs.
        s.flow.maps.replay(&tp("o", 0), Sync::new(100, -1));
        s.flow.maps.replay(&tp("o", 0), Sync::new(130, 140));
        s.flow.partitions[0].source_end = 130;
        s.flow.partitions[0].mirrored = s.flow.maps.frontier(&tp("o", 0));
        s.groups[0]
            .source_commits
            .insert(tp("o", 0), committed(110, None));
        let p = plan(&s);
        assert_eq!(p.refused().map(|s| s.name), Some("checkpoints"), "{p}");
    }
}
