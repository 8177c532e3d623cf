//! Site failover: exact offset translation, MirrorMaker 2 checkpoints and `strait failover`.
//!
//! * [`format`]: MM2's OffsetSync, Checkpoint and Heartbeat records, byte for byte.
//! * [`map`]: the per-partition source -> target mapping ([`OffsetMap`]), exact, bounded.
//! * [`OffsetMaps`]: every mirrored partition's map, fed by the forwarder's commit path (it is
//!   the forwarder's [`CommitHook`]) and read by the checkpoint task ([`checkpoint`]).
//! * [`syncs`]: the one writer of the offset-syncs topic, and the gate that commits source
//!   positions only after the syncs mapping them are on the target.
//! * [`command`]: `strait failover`, from what is on the target alone.
//! * `groups`: the clusters' consumer groups and their members (ListGroups with the group
//!   type, then the one describe call of that type).
//! * [`switchover`] and [`failback`]: `strait switchover` / `strait failback`, planned from
//!   [`state`] (both clusters, read afresh every run) into the steps of [`plan`]; [`records`]
//!   reads, copies and exports stranded records; [`copies`] keeps the reverse mirror from
//!   copying the copies back; [`reverse`] writes the reverse flow's configuration; `file`
//!   writes both files atomically and durably.

pub mod checkpoint;
pub mod command;
pub mod copies;
pub mod failback;
pub(crate) mod file;
pub mod format;
pub(crate) mod groups;
pub mod map;
pub mod plan;
pub mod records;
pub mod reverse;
pub mod state;
pub mod switchover;
pub mod syncs;
pub(crate) mod topic;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use strait_forward::pipeline::{AckedBatch, CommitHook};
use strait_wire::TopicPartition;

pub use map::{Miss, OffsetMap, Sync};

/// The offset maps of every partition this instance mirrors (or replayed at start), keyed by
/// source partition. Shared by the commit hook (writes, on the forwarder's tasks: short critical
/// sections only) and the checkpoint task.
#[derive(Debug, Default)]
pub struct OffsetMaps {
    maps: Mutex<HashMap<TopicPartition, OffsetMap>>,
    /// Exactly-once: the acknowledged batches (points, end) of each partition's open
    /// transaction, kept out of the maps until it commits; `None`: at-least-once.
    staged: Option<Mutex<HashMap<TopicPartition, Vec<Staged>>>>,
}

/// An acknowledged batch waiting for its transaction: its points and end (see
/// [`OffsetMap::observe_batch`]).
type Staged = (Vec<Sync>, Sync);

impl OffsetMaps {
    /// The maps of an exactly-once mirror. A batch is acknowledged inside its route's open
    /// transaction, which may still abort (a crash, a fence) and be re-sent after the abort
    /// marker; a checkpoint translated into it would send a failed-over group back to the
    /// re-sent records before its offset. So acknowledged batches are staged and enter the
    /// maps (which the checkpoints translate through, and which are persisted) only with
    /// [`commit_staged`](Self::commit_staged), right before their transaction commits.
    pub fn transactional() -> OffsetMaps {
        OffsetMaps {
            staged: Some(Mutex::default()),
            ..OffsetMaps::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TopicPartition, OffsetMap>> {
        // A panic elsewhere while holding the lock leaves a map that is still consistent
        // (every method finishes its change before returning).
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One acknowledged target batch of `source` (see [`OffsetMap::observe_batch`]); staged
    /// until its transaction commits when the mirror is exactly-once.
    pub fn observe(&self, source: &TopicPartition, points: &[Sync], end: Sync) {
        if let Some(staged) = &self.staged {
            staged
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(source.clone())
                .or_default()
                .push((points.to_vec(), end));
            return;
        }
        self.lock()
            .entry(source.clone())
            .or_default()
            .observe_batch(points, end);
    }

    /// Exactly-once: `source`'s transaction is about to commit: its staged batches enter the
    /// map. Batches of an aborted transaction still staged (acknowledged before the abort)
    /// enter it too, before their re-sent copies, which supersede them.
    pub fn commit_staged(&self, source: &TopicPartition) {
        let Some(staged) = &self.staged else { return };
        let batches = staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(source)
            .unwrap_or_default();
        if batches.is_empty() {
            return;
        }
        let mut maps = self.lock();
        let map = maps.entry(source.clone()).or_default();
        for (points, end) in batches {
            map.observe_batch(&points, end);
        }
    }

    /// The mirror committed `next` for `source`.
    pub fn advance(&self, source: &TopicPartition, next: i64) {
        if let Some(m) = self.lock().get_mut(source) {
            m.advance_to(next);
        }
    }

    /// Forgets the maps of `partitions` (before they are replayed afresh), and what was
    /// staged for them (transactions left open when they were last revoked: never committed).
    pub fn reset(&self, partitions: &[TopicPartition]) {
        if let Some(staged) = &self.staged {
            let mut staged = staged.lock().unwrap_or_else(|p| p.into_inner());
            for tp in partitions {
                staged.remove(tp);
            }
        }
        let mut maps = self.lock();
        for tp in partitions {
            maps.remove(tp);
        }
    }

    /// Replays a persisted sync.
    pub fn replay(&self, source: &TopicPartition, sync: Sync) {
        self.lock().entry(source.clone()).or_default().replay(sync);
    }

    /// Translates `source`'s committed offset `c`.
    pub fn translate(&self, source: &TopicPartition, c: i64) -> Result<i64, Miss> {
        self.lock().get(source).ok_or(Miss::Empty)?.translate(c)
    }

    /// The next source offset after everything the target acknowledged for `source`.
    pub fn mirrored(&self, source: &TopicPartition) -> Option<i64> {
        self.lock().get(source)?.frontier().map(|f| f.upstream)
    }

    /// The frontier of `source`'s map: the next source offset after everything acknowledged
    /// and the target offset it maps to.
    pub fn frontier(&self, source: &TopicPartition) -> Option<Sync> {
        self.lock().get(source)?.frontier()
    }

    /// The source partitions with a map, sorted.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut out: Vec<TopicPartition> = self.lock().keys().cloned().collect();
        out.sort_by(|a, b| (a.topic(), a.partition()).cmp(&(b.topic(), b.partition())));
        out
    }

    /// The syncs every partition has to persist, in order per partition.
    pub fn take_outboxes(&self) -> Vec<(TopicPartition, Vec<Sync>)> {
        let mut out: Vec<(TopicPartition, Vec<Sync>)> = self
            .lock()
            .iter_mut()
            .map(|(tp, m)| (tp.clone(), m.take_outbox()))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        out.sort_by(|a, b| (a.0.topic(), a.0.partition()).cmp(&(b.0.topic(), b.0.partition())));
        out
    }

    /// Gives back syncs that could not be written.
    pub fn restore_outboxes(&self, unsent: Vec<(TopicPartition, Vec<Sync>)>) {
        let mut maps = self.lock();
        for (tp, syncs) in unsent {
            maps.entry(tp).or_default().restore_outbox(syncs);
        }
    }
}

/// The (source offset, target offset) points of an acknowledged batch and its end, or `None`
/// when the target did not say where it wrote it (a duplicate of a batch it already had).
pub fn batch_points(ev: &AckedBatch<'_>) -> Option<(Vec<Sync>, Sync)> {
    if ev.target_base_offset < 0 || ev.records == 0 {
        return None;
    }
    // Where each run of the batch's records came from (one point for a batch passed
    // through; merged, re-encoded and split batches have one per discontinuity).
    let mut points: Vec<Sync> = ev
        .offsets
        .iter()
        .map(|p| {
            Sync::new(
                p.source_offset,
                ev.target_base_offset + i64::from(p.target_delta),
            )
        })
        .collect();
    if points.is_empty() {
        points.push(Sync::new(ev.source_base_offset, ev.target_base_offset));
    }
    let end = Sync::new(
        ev.source_last_offset + 1,
        ev.target_base_offset + i64::from(ev.records),
    );
    Some((points, end))
}

/// The forwarder's commit path feeds the maps: acknowledged batches enter them (staged until
/// their transaction commits when exactly-once), and the frontier moves to a position only as
/// it is about to be committed. The one place the maps advance.
impl CommitHook for OffsetMaps {
    fn acknowledged(&self, batch: &AckedBatch<'_>) {
        if let Some((points, end)) = batch_points(batch) {
            self.observe(batch.source, &points, end);
        }
    }

    fn committing(&self, source: &TopicPartition, next: i64) {
        // Exactly-once, this is the route's transaction commit: only now do its batches count
        // as mirrored (see `transactional`). A no-op at-least-once.
        self.commit_staged(source);
        // Everything below `next` was acknowledged (and passed to `acknowledged`) or skipped
        // on purpose (markers, aborted records): the frontier may move there. The offset syncs
        // this queues are written by `GatedPositions` before the commit itself.
        self.advance(source, next);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::{Miss, OffsetMaps, Sync};
    use strait_wire::TopicPartition;

    /// Exactly-once: only batches of committing transactions are translated, and a re-send
    /// after an abort supersedes the aborted copy.
    #[test]
    fn transactional_maps_translate_only_committed_transactions() {
        let tp = TopicPartition::new("t", 0).unwrap();
        let maps = OffsetMaps::transactional();
        // Source 0..10 at target 0..10, in an open transaction: not translatable yet.
        maps.observe(&tp, &[Sync::new(0, 0)], Sync::new(10, 10));
        assert_eq!(maps.translate(&tp, 5), Err(Miss::Empty));
        assert!(maps.take_outboxes().is_empty(), "nothing to persist yet");
        maps.commit_staged(&tp);
        maps.advance(&tp, 10);
        assert_eq!(maps.translate(&tp, 5), Ok(5));
        assert_eq!(maps.translate(&tp, 10), Ok(10));
        // Commit marker at 10. Source 10..20 at 11..21, acknowledged in a transaction that is
        // aborted (marker at 21): offsets in it stay beyond what the target has.
        maps.observe(&tp, &[Sync::new(10, 11)], Sync::new(20, 21));
        assert_eq!(
            maps.translate(&tp, 15),
            Err(Miss::NotMirrored {
                offset: 15,
                mirrored: 10
            })
        );
        // Re-sent from 10 at 22..32 and committed: the re-sent copy is where 15 is read from.
        maps.observe(&tp, &[Sync::new(10, 22)], Sync::new(20, 32));
        maps.commit_staged(&tp);
        maps.advance(&tp, 20);
        assert_eq!(maps.translate(&tp, 10), Ok(22));
        assert_eq!(maps.translate(&tp, 15), Ok(27));
        assert_eq!(maps.translate(&tp, 20), Ok(32));
        assert_eq!(maps.translate(&tp, 5), Ok(5));
        // A transaction left open when the partition was revoked is forgotten with its map.
        maps.observe(&tp, &[Sync::new(20, 33)], Sync::new(30, 43));
        maps.reset(std::slice::from_ref(&tp));
        maps.commit_staged(&tp);
        assert_eq!(maps.translate(&tp, 25), Err(Miss::Empty));
    }

    use crate::config::{Config, Environment};

    const CLUSTERS: &str =
        "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \"b:1\"\n";

    fn parse(mirror: &str) -> crate::Result<Config> {
        Config::from_toml_str(
            &format!("{CLUSTERS}[mirror]\n{mirror}"),
            Path::new("t.toml"),
            &Environment::default(),
        )
        .map(|l| l.config)
    }

    #[test]
    fn checkpoints_are_opt_in_and_select_groups_by_regex() {
        let c = parse("").unwrap();
        assert!(c.mirror.groups.is_none());
        assert_eq!(c.mirror.checkpoint_interval, Duration::from_secs(5));
        assert!(!c.to_toml(false).contains("groups"));
        assert!(parse("groups = []").unwrap().mirror.groups.is_none());

        let c = parse(
            "groups = [\"app-.*\", \"billing\"]\ngroups_exclude = [\"app-test.*\"]\ncheckpoint_interval = \"250ms\"",
        )
        .unwrap();
        let g = c.mirror.groups.as_ref().unwrap();
        assert!(g.matches("app-orders") && g.matches("billing"));
        assert!(!g.matches("app-test-1") && !g.matches("billing-2"));
        assert_eq!(c.mirror.checkpoint_interval, Duration::from_millis(250));
        assert!(!c.mirror.sync_group_offsets, "group offset sync is opt-in");
        assert_eq!(c.mirror.sync_group_offsets_interval, Duration::from_secs(5));
        let synced = parse(
            "groups = [\"a\"]\nsync_group_offsets = true\nsync_group_offsets_interval = \"1s\"",
        )
        .unwrap();
        assert!(synced.mirror.sync_group_offsets);
        assert_eq!(
            synced.mirror.sync_group_offsets_interval,
            Duration::from_secs(1)
        );
        assert!(synced.to_toml(false).contains("sync_group_offsets = true"));
        // The printed configuration reads back the same.
        let again = Config::from_toml_str(
            &c.to_toml(false),
            Path::new("t.toml"),
            &Environment::default(),
        )
        .unwrap()
        .config;
        assert_eq!(again.to_toml(false), c.to_toml(false));

        let err = parse("groups = [\"(\"]").unwrap_err().to_string();
        assert!(err.contains("mirror.groups"), "{err}");
        let err = parse("checkpoint_interval = \"1ms\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("mirror.checkpoint_interval"), "{err}");
    }
}
