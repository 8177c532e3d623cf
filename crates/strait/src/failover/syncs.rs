//! Persisting the offset maps, and committing source positions only after them.
//!
//! A mirror that is killed re-sends, after its restart, everything after its last committed
//! source position. For the restarted instance to translate offsets exactly, the mapping of
//! everything up to that position must already be on the target: otherwise the range between
//! the last persisted sync and the committed position is unknown for good (a consumer group
//! committed there could never be checkpointed). So [`GatedPositions`] writes the offset maps'
//! pending syncs to the offset-syncs topic **before** every commit of source positions, and a
//! commit whose syncs cannot be written fails (and is retried by the forwarder's committer),
//! exactly as if the source had refused it: duplicates after a crash, never an unknown range.
//! With exactly-once, positions are stored by each route's transaction on the target (the
//! source commit is only a copy for monitoring), so the gate holds every transaction's commit
//! instead ([`Positions::before_transaction_commit`]).
//!
//! [`SyncWriter`] is the one writer of the offset-syncs topic, shared by the commit gate and
//! the checkpoint task, so that one partition's syncs are appended in order.
//!
//! Several instances share the partitions of one flow. When a partition moves to this
//! instance, the gate's [`load`](Positions::load) (which the forwarder calls right before it
//! mirrors the partition) first rebuilds the partition's map from the topic, where the previous
//! owner persisted it up to its last commit: the hand-over leaves no unknown range.

use std::sync::Arc;

use strait_forward::pipeline::Positions;
use strait_forward::pipeline::io::{FailureAction, IoError};
use strait_wire::{Client, TopicPartition};

use super::format::OffsetSync;
use super::{OffsetMaps, Sync, topic};
use crate::error::{Error, Result};

/// Every offset sync persisted in `syncs_topic` on `target`, in topic order, as (source
/// partition, sync). Undecodable records are skipped with a warning (another tool may share
/// the topic).
pub async fn read_syncs(target: &Client, syncs_topic: &str) -> Result<Vec<(TopicPartition, Sync)>> {
    let mut out = Vec::new();
    for (key, value) in topic::read_all(target, syncs_topic).await? {
        match OffsetSync::decode(&key, &value) {
            Ok(s) => {
                if let Ok(tp) = TopicPartition::new(&s.topic, s.partition) {
                    out.push((tp, Sync::new(s.upstream_offset, s.offset)));
                }
            }
            Err(e) => tracing::warn!(topic = %syncs_topic, error = %e, "skipping a record"),
        }
    }
    Ok(out)
}

/// Appends the offset maps' pending syncs to `mm2-offset-syncs.<target alias>.internal`.
pub struct SyncWriter {
    maps: Arc<OffsetMaps>,
    target: Client,
    topic: String,
    /// Held from taking the outboxes to the end of the append: two flushes never interleave
    /// one partition's syncs out of order.
    serial: tokio::sync::Mutex<()>,
}

impl SyncWriter {
    /// A writer of `maps`' syncs to `topic` on `target`.
    pub fn new(maps: Arc<OffsetMaps>, target: Client, topic: String) -> SyncWriter {
        SyncWriter {
            maps,
            target,
            topic,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// The maps it persists.
    pub fn maps(&self) -> &Arc<OffsetMaps> {
        &self.maps
    }

    /// Writes every pending sync; returns how many. On failure they stay pending (written by
    /// the next flush, in order).
    pub async fn flush(&self) -> Result<usize> {
        let _serial = self.serial.lock().await;
        let outboxes = self.maps.take_outboxes();
        let records = match encode(&outboxes) {
            Ok(r) => r,
            Err(e) => {
                self.maps.restore_outboxes(outboxes);
                return Err(e);
            }
        };
        if records.is_empty() {
            return Ok(0);
        }
        if let Err(e) = topic::append(&self.target, &self.topic, &records).await {
            self.maps.restore_outboxes(outboxes);
            return Err(e);
        }
        Ok(records.len())
    }

    /// Rebuilds the maps of `partitions` from the offset-syncs topic: a partition this
    /// instance is about to mirror may have been mirrored by another instance (or by this one,
    /// earlier) since this process replayed the topic at its start, and that owner persisted
    /// its mapping up to its last commit. Returns the syncs replayed. Their maps are left
    /// untouched when the topic cannot be read.
    pub async fn reload(&self, partitions: &[TopicPartition]) -> Result<usize> {
        let _serial = self.serial.lock().await;
        let wanted: std::collections::HashSet<&TopicPartition> = partitions.iter().collect();
        let syncs: Vec<(TopicPartition, Sync)> = read_syncs(&self.target, &self.topic)
            .await?
            .into_iter()
            .filter(|(tp, _)| wanted.contains(tp))
            .collect();
        self.maps.reset(partitions);
        for (tp, sync) in &syncs {
            self.maps.replay(tp, *sync);
        }
        Ok(syncs.len())
    }
}

fn encode(outboxes: &[(TopicPartition, Vec<Sync>)]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut records = Vec::new();
    for (tp, syncs) in outboxes {
        for s in syncs {
            let sync = OffsetSync {
                topic: tp.topic().to_string(),
                partition: tp.partition(),
                upstream_offset: s.upstream,
                offset: s.offset,
            };
            let key = sync
                .encode_key()
                .map_err(|e| Error::Runtime(format!("cannot encode an offset sync: {e}")))?;
            records.push((key, sync.encode_value()));
        }
    }
    Ok(records)
}

/// Source positions that are committed only once the offset syncs mapping them are on the
/// target (see the module doc). Without a writer (checkpoints off) it is `inner` unchanged.
#[derive(Clone)]
pub struct GatedPositions<P> {
    inner: P,
    writer: Option<Arc<SyncWriter>>,
}

impl<P> GatedPositions<P> {
    /// `inner`, gated by `writer` when there is one.
    pub fn new(inner: P, writer: Option<Arc<SyncWriter>>) -> GatedPositions<P> {
        GatedPositions { inner, writer }
    }
}

impl<P: Positions> Positions for GatedPositions<P> {
    async fn load(&self, partitions: &[TopicPartition]) -> Result<Vec<Option<i64>>, IoError> {
        // The forwarder loads positions right before it starts mirroring partitions: the
        // moment to take over their mapping from whoever mirrored them last.
        if let Some(writer) = &self.writer {
            match writer.reload(partitions).await {
                Ok(n) => tracing::debug!(
                    partitions = partitions.len(),
                    syncs = n,
                    "offset maps reloaded"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "offset syncs not reloaded for newly assigned partitions; their offsets \
                     mirrored by another instance translate only once groups move past them"
                ),
            }
        }
        self.inner.load(partitions).await
    }

    async fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), IoError> {
        self.persist().await?;
        self.inner.commit(positions).await
    }

    /// Exactly-once positions are stored by the route's transaction on the target, not by
    /// [`commit`](Self::commit) (which then only keeps the source group's copy for monitoring):
    /// the gate must hold the transaction's commit.
    async fn before_transaction_commit(
        &self,
        _source: &TopicPartition,
        _next: i64,
    ) -> Result<(), IoError> {
        self.persist().await
    }
}

impl<P> GatedPositions<P> {
    /// Writes the pending offset syncs, which map everything below the positions about to be
    /// committed: the forwarder's commit hook ([`OffsetMaps`](super::OffsetMaps) as
    /// `CommitHook::committing`) moved the maps there right before this call.
    async fn persist(&self) -> Result<(), IoError> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        writer.flush().await.map(drop).map_err(|e| {
            IoError::new(
                FailureAction::Retriable,
                "offset_syncs",
                format!(
                    "positions not committed: the offset syncs they need could not be written \
                     to the target first ({e}); retried"
                ),
            )
        })
    }
}
