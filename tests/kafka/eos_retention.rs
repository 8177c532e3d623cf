//! Exactly-once positions outlive the target's offset retention (issue 28 item 2), against real
//! Kafka.
//!
//! The exactly-once positions live in a group on the target that has no members, so the broker
//! drops a partition's position `offsets.retention.minutes` after it was last stored (KIP-211),
//! and a route stores it only when it moves. Here the target runs with the smallest retention
//! (1 minute, checked every second) and the mirror refreshes idle positions every 5 s
//! (`mirror.position_refresh_interval`). Records are mirrored, then every partition stays idle
//! past the retention: until a control group's offsets, committed on the target after the mirror
//! last stored a position and never refreshed, have expired (the broker's retention demonstrably
//! ran; this was a fixed 75 s); the positions must still be there, and after a restart of the
//! mirror and more records a `read_committed` Java consumer reads every record exactly once.
//! Before the refresh existed the positions were gone after the idle time, and the restart
//! re-mirrored everything from `start = "earliest"`.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- eos_retention:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use strait_testkit::{AdminOp, Cluster};
use strait_wire::TopicPartition;

const TOPIC: &str = "ledger";
const PARTITIONS: i32 = 2;
const MIRROR_GROUP: &str = "strait-eos-retention";
/// Records per partition before the idle time, and after the restart.
const FIRST: usize = 200;
const SECOND: usize = 100;
/// Bound on the wait for the control group's expiry (1-minute retention, checked every second).
const IDLE_BOUND: Duration = Duration::from_secs(180);
/// A group whose offsets nobody refreshes: its expiry shows the retention has passed.
const CONTROL_GROUP: &str = "strait-eos-retention-control";

fn partitions() -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect()
}

/// The positions `group` holds on the target (`None`: none stored, or expired).
fn stored_positions(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    group: &str,
) -> Vec<Option<i64>> {
    use strait_wire::offset_commit::GroupOffsets;
    let tps = partitions();
    let committed = rt
        .block_on(GroupOffsets::new(dst, group).fetch(&tps))
        .unwrap();
    tps.iter()
        .map(|tp| committed.get(tp).and_then(|o| o.as_ref()).map(|o| o.offset))
        .collect()
}

fn consume(target: &Cluster, max: usize) -> BTreeMap<i32, Vec<usize>> {
    common::consume_numbered(target, TOPIC, max * PARTITIONS as usize, "read_committed")
}

#[test]
fn idle_positions_outlive_the_targets_offset_retention() {
    let source = std::thread::spawn(|| {
        Cluster::builder("eosret-src")
            .start()
            .expect("source cluster")
    });
    let target = Cluster::builder("eosret-dst")
        .broker_config("offsets.retention.minutes", "1")
        .broker_config("offsets.retention.check.interval.ms", "1000")
        .start()
        .expect("target cluster");
    let source = source.join().expect("source thread");
    for c in [&source, &target] {
        c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "eos",
        &source,
        &target,
        TOPIC,
        MIRROR_GROUP,
        "exactly_once = true\ntransaction_interval = \"200ms\"\nposition_refresh_interval = \"5s\"\n",
    );
    let tps = partitions();

    rt.block_on(produce_numbered(&src, TOPIC, 0..PARTITIONS, 0..FIRST));
    let (mut first, log) = spawn_strait(&config, 0);
    let ends = vec![FIRST as i64; PARTITIONS as usize];
    wait_for_group_offsets(
        &rt,
        &dst,
        MIRROR_GROUP,
        &tps,
        "the first records' positions",
        &log,
        |now| now == ends,
    );
    // Every partition idle past the retention: only the refresh stores the positions. The
    // control group is committed after the mirror last stored a position because it moved, so
    // once the broker has expired the control's offsets, unrefreshed positions would be gone too.
    let control: Vec<(TopicPartition, i64)> = tps.iter().map(|tp| (tp.clone(), 1)).collect();
    rt.block_on(commit_group(&dst, CONTROL_GROUP, &control));
    let idle_from = std::time::Instant::now();
    while stored_positions(&rt, &dst, CONTROL_GROUP)
        .iter()
        .any(Option::is_some)
    {
        assert!(
            idle_from.elapsed() < IDLE_BOUND,
            "the control group's offsets did not expire within {IDLE_BOUND:?} on a target with \
             a 1-minute offset retention"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let idle = idle_from.elapsed();
    let stored = stored_positions(&rt, &dst, MIRROR_GROUP);
    assert_eq!(
        stored,
        vec![Some(FIRST as i64); PARTITIONS as usize],
        "the positions of idle partitions expired on the target; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(terminate(&mut first).code(), Some(0));
    drop(first);

    // A restart resumes at the stored positions.
    let (mut second, log) = spawn_strait(&config, 1);
    rt.block_on(produce_numbered(
        &src,
        TOPIC,
        0..PARTITIONS,
        FIRST..FIRST + SECOND,
    ));
    let total = FIRST + SECOND;
    let ends = vec![total as i64; PARTITIONS as usize];
    wait_for_group_offsets(
        &rt,
        &dst,
        MIRROR_GROUP,
        &tps,
        "the positions after the restart",
        &log,
        |now| now == ends,
    );
    let committed = consume(&target, total);
    assert_eq!(terminate(&mut second).code(), Some(0));
    for p in 0..PARTITIONS {
        let got = committed.get(&p).cloned().unwrap_or_default();
        let missing = (0..total).filter(|n| !got.contains(n)).count();
        let duplicates = got.len() + missing - total;
        assert_eq!(
            got,
            (0..total).collect::<Vec<_>>(),
            "partition {p}: the read_committed target must hold every source record once, in \
             order ({missing} missing, {duplicates} duplicates)"
        );
    }
    println!(
        "{total} records per partition, idle {idle:?} past a 1-minute offset retention and a \
         restart: 0 missing, 0 duplicates read_committed"
    );
}
