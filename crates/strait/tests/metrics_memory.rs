//! Heap the binary's metrics hold per idle partition (issue #13: RSS grows < 10 MB per 1,000
//! partitions; `strait-forward`'s `tests/idle_memory.rs` covers the forwarder itself).
//!
//! [`Metrics`] gets, for 100 and then 1,100 partitions, what an idle partition makes the mirror
//! report: the assignment, its start, empty fetches (their high watermark), its first commit and
//! the lag sampler's evaluations. A counting global allocator measures the growth. Deterministic:
//! allocation counts, no clock read for the result. Its own test binary, so no other test
//! allocates meanwhile.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use strait::observe::metrics::Metrics;
use strait_forward::observe::Observer;
use strait_wire::TopicPartition;

#[global_allocator]
static ALLOCATOR: strait_testkit::heap::Counting = strait_testkit::heap::Counting;

fn live() -> isize {
    strait_testkit::heap::live_bytes()
}

/// Source partitions 0..n of topic `src`.
fn partitions(n: i32) -> Vec<TopicPartition> {
    (0..n)
        .map(|p| TopicPartition::new("src", p).unwrap())
        .collect()
}

/// What `n` idle partitions make the mirror report, from the assignment on: each starts at
/// offset 1,000 (its end), fetches come back empty, its start position is committed once, and
/// the lag sampler evaluates them twice.
fn report_idle(m: &Metrics, assigned: &[TopicPartition], t0: Instant) {
    let obs: &dyn Observer = m;
    obs.rebalance(assigned);
    for tp in assigned {
        obs.partition_started(tp, tp, 1_000);
        obs.lag(tp, 1_000, 1_000);
        obs.committed(tp, 1_000);
    }
    for round in 1..=2u64 {
        for tp in assigned {
            obs.lag(tp, 1_000, 1_000);
        }
        let acked: Vec<(TopicPartition, i64)> =
            assigned.iter().map(|tp| (tp.clone(), 1_000)).collect();
        m.update_lag(&acked, t0 + Duration::from_secs(round));
    }
}

/// What the metrics of an idle partition hold stays a small part of the 10 KB per partition of
/// the memory goal (issue #13). Measured: 616 bytes (its lag book entry with one end-offset
/// point, the lag and committed-offset gauges and their label sets, the published-series set);
/// the bound (printed figure with `--nocapture`) has headroom.
#[test]
fn an_idle_partition_costs_the_metrics_little_memory() {
    let t0 = Instant::now();
    let m = Metrics::new();
    let few = partitions(100);
    report_idle(&m, &few, t0);
    drop(few);
    let before = live();
    let many = partitions(1_100);
    report_idle(&m, &many, t0);
    drop(many);
    let per_partition = (live() - before) as f64 / 1_000.0;
    println!("metrics heap per idle partition: {per_partition:.0} bytes");
    assert!(
        per_partition < 1_500.0,
        "the metrics hold {per_partition:.0} bytes per idle partition"
    );
    // Each partition has at least its lag and offset series (about 600 bytes): a count near zero
    // means the counting allocator is not the one in use.
    assert!(
        per_partition > 100.0,
        "only {per_partition:.0} bytes counted per partition"
    );
}
