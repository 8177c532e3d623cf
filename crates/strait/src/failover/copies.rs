//! Where the records `strait failback --stranded copy` appended to the new primary are, so the
//! reverse mirror does not copy them back to the old source (which holds their originals).
//!
//! The copies are produced as batches of their own (never mixed with records of other
//! producers), each record with the [`ORIGIN_HEADER`](super::records::ORIGIN_HEADER). Per
//! partition, the failback command finds those batches on the new primary and commits their
//! offset ranges as the metadata of a group of their own there, [`group`] (the reverse mirror's
//! source): `strait.failback.copies=120-160,170-180` (half-open ranges), committed at the end of
//! the last range. Cluster state rather than a file, so a hand-written reverse configuration
//! works too; a group of its own, because the mirror's commits replace its own group's
//! metadata; and Kafka drops the group's offsets with the topic, so a re-created topic never
//! inherits old ranges.
//!
//! Every `strait run` reads the ranges of the partitions it starts mirroring ([`ExcludeCopies`],
//! right before the forwarder loads their positions) into the forwarder's
//! [`Excluded`](strait_forward::pipeline::Excluded) table: batches inside a range are skipped
//! whole (zero-copy), and the position moves past them as past transaction markers, so commits,
//! offset syncs and checkpoints stay exact across the gap.

use std::ops::Range;

use strait_forward::pipeline::io::{FailureAction, IoError};
use strait_forward::pipeline::{Excluded, Positions};
use strait_wire::offset_commit::GroupOffsets;
use strait_wire::{Client, TopicPartition};

/// The metadata prefix of the ranges.
const PREFIX: &str = "strait.failback.copies=";

/// Kafka's default `offset.metadata.max.bytes` (4096), less room for the prefix.
pub const MAX_METADATA: usize = 4000;

/// The group holding the copies' ranges on the cluster the copies were written to (the reverse
/// mirror's source), for the mirror group `mirror_group`.
pub fn group(mirror_group: &str) -> String {
    format!("{mirror_group}.failback-copies")
}

/// The ranges as commit metadata; `None` when too long for Kafka's default metadata limit.
pub fn encode(ranges: &[Range<i64>]) -> Option<String> {
    let body: Vec<String> = ranges
        .iter()
        .map(|r| format!("{}-{}", r.start, r.end))
        .collect();
    let text = format!("{PREFIX}{}", body.join(","));
    (text.len() <= MAX_METADATA).then_some(text)
}

/// The ranges in commit metadata written by [`encode`]; empty for anything else (another
/// tool's metadata, or malformed: nothing is excluded on a guess).
pub fn decode(metadata: &str) -> Vec<Range<i64>> {
    let Some(body) = metadata.strip_prefix(PREFIX) else {
        return Vec::new();
    };
    let parsed: Option<Vec<Range<i64>>> = body
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|r| {
            let (a, b) = r.split_once('-')?;
            let (a, b) = (a.parse().ok()?, b.parse().ok()?);
            (a < b).then_some(a..b)
        })
        .collect();
    parsed.unwrap_or_default()
}

/// Adjacent or overlapping ranges joined, sorted.
pub fn merge(mut ranges: Vec<Range<i64>>) -> Vec<Range<i64>> {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<i64>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Positions that, before loading, read the failback copies' ranges of the partitions into the
/// forwarder's [`Excluded`] table.
#[derive(Clone)]
pub struct ExcludeCopies<P> {
    inner: P,
    offsets: GroupOffsets,
    excluded: Excluded,
}

impl<P> ExcludeCopies<P> {
    /// `inner`, with the ranges committed in [`group`]`(mirror_group)` on `source` put into
    /// `excluded` (the table in the forwarder's settings).
    pub fn new(inner: P, source: &Client, mirror_group: &str, excluded: Excluded) -> Self {
        ExcludeCopies {
            inner,
            offsets: GroupOffsets::new(source, &group(mirror_group)),
            excluded,
        }
    }
}

impl<P: Positions> Positions for ExcludeCopies<P> {
    async fn load(&self, partitions: &[TopicPartition]) -> Result<Vec<Option<i64>>, IoError> {
        // Both groups' offsets at once: one after the other, a start of 4,000 partitions waited
        // for two OffsetFetch round trips (and the copies group's coordinator lookup) in a row.
        // The positions are only handed out after the ranges are in the table.
        let (copies, positions) =
            tokio::join!(self.offsets.fetch(partitions), self.inner.load(partitions));
        match copies {
            Ok(committed) => {
                for tp in partitions {
                    let ranges = committed
                        .get(tp)
                        .and_then(Option::as_ref)
                        .and_then(|c| c.metadata.as_deref())
                        .map(decode)
                        .unwrap_or_default();
                    if !ranges.is_empty() {
                        tracing::info!(
                            partition = %tp,
                            ranges = ?ranges,
                            "records copied here by strait failback are not mirrored back"
                        );
                    }
                    self.excluded.set(tp, ranges);
                }
            }
            Err(e) => {
                let io = strait_forward::pipeline::kafka::classify(&e);
                // Not allowed to read the group: strait failback (same credentials) could not
                // have written it either.
                if io.action != FailureAction::Denied {
                    return Err(io);
                }
                tracing::debug!(error = %e, "failback copies' group not readable; none excluded");
            }
        }
        positions
    }

    async fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), IoError> {
        self.inner.commit(positions).await
    }

    async fn before_transaction_commit(
        &self,
        source: &TopicPartition,
        next: i64,
    ) -> Result<(), IoError> {
        self.inner.before_transaction_commit(source, next).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_back_and_foreign_metadata_excludes_nothing() {
        let r = merge(vec![170..180, 120..150, 150..160]);
        assert_eq!(r, vec![120..160, 170..180]);
        let m = encode(&r);
        assert_eq!(m.as_deref(), Some("strait.failback.copies=120-160,170-180"));
        assert_eq!(decode(m.as_deref().unwrap_or_default()), r);
        assert!(decode("strait.failback=copy").is_empty());
        assert!(decode("strait.failback.copies=5-x").is_empty());
        assert!(decode("strait.failback.copies=9-3").is_empty());
        let many: Vec<Range<i64>> = (0..1000).map(|i| i * 10..i * 10 + 5).collect();
        assert_eq!(encode(&many), None);
        assert_eq!(group("m"), "m.failback-copies");
    }
}
