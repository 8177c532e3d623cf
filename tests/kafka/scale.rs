//! Scale-out: three `strait` processes with one group id share the partitions through Kafka's
//! consumer-group protocol; one is killed with SIGKILL mid-stream, the others take over its
//! partitions after the session timeout, and the target ends up complete and in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn three_instances_share_partitions_and_survive_a_sigkill() {
    let (source, target) = clusters("scale");
    let topic = "scale-stream";
    let partitions = 12;
    source.create_topic(topic, partitions, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "scale",
        &source,
        &target,
        topic,
        "scale-mirror",
        "",
    );
    produce_monotonic(&source, topic, 30_000, -1);

    let mut instances: Vec<_> = (0..3).map(|n| spawn_strait(&config, n)).collect();
    // Wait until the group has settled with every instance owning a share.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let last: Vec<usize> = instances
            .iter()
            .map(|(_, log)| assigned_counts(log).last().copied().unwrap_or(0))
            .collect();
        if last.iter().all(|&n| n > 0) && last.iter().sum::<usize>() == partitions as usize {
            eprintln!("partitions per instance: {last:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the three instances never shared the partitions: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Kill one mid-stream while more records arrive.
    let (mut victim, _) = instances.remove(1);
    let src = &source;
    std::thread::scope(|s| {
        let producer = s.spawn(move || produce_monotonic(src, topic, 60_000, 20_000));
        std::thread::sleep(Duration::from_millis(1500));
        victim.kill().unwrap();
        victim.wait().unwrap();
        producer.join().expect("producer");
    });

    let rt = runtime();
    let (src_values, dst_values) = rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        let expected = end_offsets(&src, topic, partitions).await;
        wait_until_complete(&dst, topic, &expected, Duration::from_secs(180)).await;
        (
            read_all(&src, topic, partitions).await,
            read_all(&dst, topic, partitions).await,
        )
    });
    for (child, log) in instances.iter_mut() {
        let status = terminate(child);
        assert!(
            status.success(),
            "instance exited with {status}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    let mut duplicates = 0;
    for p in 0..partitions {
        duplicates +=
            assert_complete_in_order(&src_values[&p], &dst_values[&p], &format!("partition {p}"));
    }
    let survivors: Vec<Vec<usize>> = instances
        .iter()
        .map(|(_, log)| assigned_counts(log))
        .collect();
    eprintln!(
        "90000 records complete and in order, {duplicates} duplicates; assignments over time per survivor: {survivors:?}"
    );
    assert!(
        survivors.iter().any(|a| a.last().copied().unwrap_or(0) > 4),
        "the survivors never took over the killed instance's partitions: {survivors:?}"
    );
}
