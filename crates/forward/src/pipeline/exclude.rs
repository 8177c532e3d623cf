//! Source offset ranges the forwarder must not copy, per source partition.
//!
//! `strait failback --stranded copy` appends the old source's stranded records to the new
//! primary as batches of their own; the reverse mirror (new primary -> old source) must not copy
//! them back, since the old source holds their originals. The planner skips every source batch
//! that lies wholly inside an excluded range (a batch is never split: it passes through whole
//! or is skipped whole), and the position moves past it like past a transaction marker, so
//! commits and offset maps stay correct across the gap.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, RwLock};

use strait_wire::TopicPartition;

/// One partition's ranges, sorted by start.
type Ranges = Arc<[Range<i64>]>;

/// A shared table of excluded source offset ranges, filled by whoever knows them (before a
/// partition starts: the forwarder reads a partition's ranges when it starts mirroring it).
/// Cheap to clone; clones share the table.
#[derive(Debug, Clone, Default)]
pub struct Excluded {
    ranges: Arc<RwLock<HashMap<TopicPartition, Ranges>>>,
}

impl Excluded {
    /// An empty table (nothing excluded).
    pub fn new() -> Excluded {
        Excluded::default()
    }

    /// Sets the half-open ranges of `tp` (replacing earlier ones; empty removes them).
    pub fn set(&self, tp: &TopicPartition, mut ranges: Vec<Range<i64>>) {
        ranges.retain(|r| r.start < r.end);
        ranges.sort_by_key(|r| r.start);
        let mut table = self.ranges.write().unwrap_or_else(|p| p.into_inner());
        if ranges.is_empty() {
            table.remove(tp);
        } else {
            table.insert(tp.clone(), ranges.into());
        }
    }

    /// The ranges of `tp`, sorted by start (empty when none).
    pub fn get(&self, tp: &TopicPartition) -> Arc<[Range<i64>]> {
        self.ranges
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()))
    }
}

/// Whether the batch `[base, next)` lies wholly inside one of `ranges`.
pub(crate) fn covers(ranges: &[Range<i64>], base: i64, next: i64) -> bool {
    ranges.iter().any(|r| r.start <= base && next <= r.end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_batches_inside_a_range_are_excluded() {
        let x = Excluded::new();
        let tp = TopicPartition::new("t", 0).unwrap();
        x.set(&tp, vec![20..30, 5..10, 7..7]);
        let r = x.get(&tp);
        assert_eq!(&*r, &[5..10, 20..30]);
        assert!(covers(&r, 20, 30));
        assert!(covers(&r, 5, 6));
        assert!(
            !covers(&r, 9, 11),
            "a batch reaching past the range is kept whole"
        );
        assert!(!covers(&r, 0, 5));
        assert!(x.get(&TopicPartition::new("t", 1).unwrap()).is_empty());
        x.set(&tp, vec![]);
        assert!(x.get(&tp).is_empty());
    }
}
