//! Site failover: exact offset translation, MirrorMaker 2 checkpoints and `strait failover`.
//!
//! * [`format`]: MM2's OffsetSync, Checkpoint and Heartbeat records, byte for byte.
//! * [`map`]: the per-partition source -> target mapping ([`OffsetMap`]), exact, bounded.
//! * [`OffsetMaps`]: every mirrored partition's map, fed by [`OffsetObserver`] (the forwarder's
//!   acknowledgements) and read by the checkpoint task ([`checkpoint`]).
//! * [`syncs`]: the one writer of the offset-syncs topic, and the gate that commits source
//!   positions only after the syncs mapping them are on the target.
//! * [`command`]: `strait failover`, from what is on the target alone.

pub mod checkpoint;
pub mod command;
pub mod format;
pub mod map;
pub mod syncs;
pub(crate) mod topic;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use strait_forward::observe::{BatchForwarded, Observer};
use strait_wire::TopicPartition;

pub use map::{Miss, OffsetMap, Sync};

/// The offset maps of every partition this instance mirrors (or replayed at start), keyed by
/// source partition. Shared by the observer (writes, on the forwarder's tasks: short critical
/// sections only) and the checkpoint task.
#[derive(Debug, Default)]
pub struct OffsetMaps {
    maps: Mutex<HashMap<TopicPartition, OffsetMap>>,
}

impl OffsetMaps {
    fn lock(&self) -> MutexGuard<'_, HashMap<TopicPartition, OffsetMap>> {
        // A panic elsewhere while holding the lock leaves a map that is still consistent
        // (every method finishes its change before returning).
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One acknowledged target batch of `source` (see [`OffsetMap::observe_batch`]).
    pub fn observe(&self, source: &TopicPartition, points: &[Sync], end: Sync) {
        self.lock()
            .entry(source.clone())
            .or_default()
            .observe_batch(points, end);
    }

    /// The mirror committed `next` for `source`.
    pub fn advance(&self, source: &TopicPartition, next: i64) {
        if let Some(m) = self.lock().get_mut(source) {
            m.advance_to(next);
        }
    }

    /// Forgets the maps of `partitions` (before they are replayed afresh).
    pub fn reset(&self, partitions: &[TopicPartition]) {
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

/// Feeds [`OffsetMaps`] from the forwarder's acknowledgements.
#[derive(Debug, Clone)]
pub struct OffsetObserver {
    maps: Arc<OffsetMaps>,
}

impl OffsetObserver {
    /// An observer feeding `maps`.
    pub fn new(maps: Arc<OffsetMaps>) -> OffsetObserver {
        OffsetObserver { maps }
    }
}

/// The (source offset, target offset) points of an acknowledged batch and its end, or `None`
/// when the target did not say where it wrote it (a duplicate of a batch it already had).
pub fn batch_points(ev: &BatchForwarded<'_>) -> Option<(Vec<Sync>, Sync)> {
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

impl Observer for OffsetObserver {
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        if let Some((points, end)) = batch_points(ev) {
            self.maps.observe(ev.source, &points, end);
        }
    }

    fn committed(&self, source: &TopicPartition, offset: i64) {
        self.maps.advance(source, offset);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

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
