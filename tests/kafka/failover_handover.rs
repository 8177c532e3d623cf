//! Checkpoints stay exact when partitions move between Strait instances, against real Kafka.
//!
//! Two instances share one flow (same `mirror.group_id`, checkpoints on). The target holds
//! records of its own at the start of every partition, so target offsets differ from source
//! offsets. Both mirror part of the topic; then one is SIGKILLed and the other takes over its
//! partitions. A group's commits lie in ranges the killed instance mirrored: the survivor can
//! translate them only from the mapping the killed instance persisted (before each of its
//! commits) and the survivor reloads when the partitions are assigned to it. Every partition
//! gets its exact checkpoint.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- failover_handover:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use strait_testkit::AdminOp;
use strait_wire::TopicPartition;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;
const FIRST: usize = 100;
const TARGET_HEAD: usize = 7;
const GROUP: &str = "app";
const MIRROR_GROUP: &str = "strait-handover";

#[test]
fn a_partition_taken_over_keeps_exact_checkpoints() {
    let (source, target) = clusters("handover");
    for c in [&source, &target] {
        c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    rt.block_on(produce_to_partitions(
        &dst,
        TOPIC,
        0..PARTITIONS,
        TARGET_HEAD,
    ));
    rt.block_on(produce_to_partitions(&src, TOPIC, 0..PARTITIONS, FIRST));
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str| {
        write_config(
            dir.path(),
            name,
            &source,
            &target,
            TOPIC,
            MIRROR_GROUP,
            &format!(
                "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\ninstance_id = \"{name}\"\n"
            ),
        )
    };
    let (a_config, b_config) = (config("a"), config("b"));
    let (mut a, a_log) = spawn_strait(&a_config, 0);
    let (mut b, b_log) = spawn_strait(&b_config, 0);
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    rt.block_on(wait_until_committed(
        &src,
        MIRROR_GROUP,
        TOPIC,
        &ends,
        Duration::from_secs(120),
    ));
    // Both mirrored part of the topic (the group split the partitions between them).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(assigned_counts(&a_log)
        .last()
        .is_some_and(|n| *n > 0 && *n < 12)
        && assigned_counts(&b_log)
            .last()
            .is_some_and(|n| *n > 0 && *n < 12))
    {
        assert!(
            Instant::now() < deadline,
            "the partitions were not split: a {:?}, b {:?}",
            assigned_counts(&a_log),
            assigned_counts(&b_log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let a_had = assigned_counts(&a_log).last().copied().unwrap();
    a.kill().unwrap(); // SIGKILL
    let _ = a.wait();

    // More records; the survivor takes the killed instance's partitions over.
    rt.block_on(produce_numbered(
        &src,
        TOPIC,
        0..PARTITIONS,
        FIRST..FIRST + 50,
    ));
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    rt.block_on(wait_until_committed(
        &src,
        MIRROR_GROUP,
        TOPIC,
        &ends,
        Duration::from_secs(120),
    ));
    assert_eq!(
        assigned_counts(&b_log).last(),
        Some(&12),
        "b took everything over"
    );

    // The group committed inside what both instances mirrored first.
    let commits: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, 40 + i64::from(p) * 3))
        .collect();
    let offsets: Vec<(TopicPartition, i64)> = commits
        .iter()
        .map(|(p, c)| (TopicPartition::new(TOPIC, *p).unwrap(), *c))
        .collect();
    rt.block_on(commit_group(&src, GROUP, &offsets));
    let wanted: BTreeMap<(String, i32), i64> = commits
        .iter()
        .map(|(p, c)| ((TOPIC.to_string(), *p), *c))
        .collect();
    let checkpoints = wait_for_checkpoints(&rt, &dst, "src", GROUP, &wanted, &b_log);
    // Exact: every record before the commit, after the target's own records.
    for (p, c) in &commits {
        assert_eq!(
            checkpoints[&(TOPIC.to_string(), *p)].1,
            c + TARGET_HEAD as i64,
            "partition {p}"
        );
    }
    println!("the killed instance had {a_had} partitions; all 12 checkpointed exactly");
    assert_eq!(terminate(&mut b).code(), Some(0));
}
