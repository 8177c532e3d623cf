//! Scale-out with many small topics: three `strait` processes in one group share 30
//! one-partition topics 10/10/10. The group offers round-robin first by default; with Range
//! (Kafka's per-topic default) the first member would get partition 0 of every topic (30/0/0).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::AdminOp;

const TOPICS: usize = 30;

fn assigned(log: &std::path::Path) -> Option<usize> {
    assigned_counts(log).last().copied()
}

#[test]
fn many_one_partition_topics_are_spread_evenly() {
    let (source, target) = clusters("smalltopics");
    let names: Vec<String> = (0..TOPICS).map(|i| format!("small-{i:02}")).collect();
    let ops: Vec<AdminOp> = names.iter().map(|n| AdminOp::topic(n, 1, 1)).collect();
    source.admin(&ops).unwrap();
    let rt = runtime();
    rt.block_on(async {
        let src = client(&source).await;
        for n in &names {
            produce_to_partitions(&src, n, 0..1, 10).await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "small",
        &source,
        &target,
        "small-.*",
        "small-mirror",
        "",
    );
    let mut instances: Vec<_> = (0..3).map(|n| spawn_strait(&config, n)).collect();
    // Each instance logs what it owns after each change; an instance giving partitions up to a
    // newcomer logs its smaller share only at its next assignment, so a moment where the
    // shares add up to 30 may still show an old share ([15, 5, 10]): wait for the spread.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen: Vec<Vec<usize>> = Vec::new();
    loop {
        let last: Vec<usize> = instances
            .iter()
            .map(|(_, log)| assigned(log).unwrap_or(0))
            .collect();
        if seen.last() != Some(&last) {
            seen.push(last.clone());
        }
        if last == [10, 10, 10] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the three instances never got 10 of the {TOPICS} topics each; their shares over time: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("partitions per instance over time: {seen:?}");
    // Everything arrives, whoever mirrors it.
    rt.block_on(async {
        let dst = client(&target).await;
        for n in &names {
            wait_until_complete(&dst, n, &[10], Duration::from_secs(90)).await;
        }
    });
    for (child, log) in instances.iter_mut() {
        let status = terminate(child);
        assert!(
            status.success(),
            "instance exited with {status}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}
