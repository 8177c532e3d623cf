//! Scale-out without stopping the world: one `strait` mirrors a topic alone, a second joins the
//! group, and the first revokes (drains and commits) only the partitions that move to the
//! second, never all of them. Once on the consumer group protocol (KIP-848, Kafka 4) and once on
//! the classic protocol with cooperative-sticky (KIP-429). The target ends complete and in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// Every `partitions=N` the mirror logged when partitions were revoked from it.
fn revoked_counts(log: &Path) -> Vec<usize> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("strait::run::mirror: revoked"))
        .filter_map(|l| {
            l.split("partitions=")
                .nth(1)
                .and_then(|n| n.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

#[test]
fn a_joining_instance_moves_only_its_share() {
    let (source, target) = clusters("incremental");
    for (name, extra) in [
        ("consumer", "group_protocol = \"consumer\""),
        (
            "cooperative",
            "group_protocol = \"classic\"\npartition_assignment_strategy = [\"cooperative-sticky\"]",
        ),
    ] {
        scale_out(&source, &target, name, extra);
    }
}

fn scale_out(
    source: &strait_testkit::Cluster,
    target: &strait_testkit::Cluster,
    name: &str,
    extra: &str,
) {
    let topic = format!("incremental-{name}");
    let partitions = 6;
    source.create_topic(&topic, partitions, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        name,
        source,
        target,
        &topic,
        &format!("incremental-{name}-mirror"),
        extra,
    );
    produce_monotonic(source, &topic, 6_000, -1);
    let (mut first, first_log) = spawn_strait(&config, 0);
    wait_for_log(
        &first_log,
        &format!("strait::run::mirror: assigned partitions={partitions}"),
        Duration::from_secs(90),
    );
    let (mut second, second_log) = spawn_strait(&config, 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (a, b) = (
            assigned_counts(&first_log).last().copied().unwrap_or(0),
            assigned_counts(&second_log).last().copied().unwrap_or(0),
        );
        if a == 3 && b == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no 3/3 split ({a} + {b}); first log:\n{}",
            std::fs::read_to_string(&first_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let revoked = revoked_counts(&first_log);
    eprintln!("{name}: the first instance revoked {revoked:?}");
    assert_eq!(
        revoked.iter().sum::<usize>(),
        3,
        "{name}: the first instance must revoke only the 3 partitions that moved: {revoked:?}"
    );

    produce_monotonic(source, &topic, 3_000, -1);
    let rt = runtime();
    let (src_values, dst_values) = rt.block_on(async {
        let src = client(source).await;
        let dst = client(target).await;
        let expected = end_offsets(&src, &topic, partitions).await;
        wait_until_complete(&dst, &topic, &expected, Duration::from_secs(120)).await;
        (
            read_all(&src, &topic, partitions).await,
            read_all(&dst, &topic, partitions).await,
        )
    });
    for child in [&mut first, &mut second] {
        let status = terminate(child);
        assert!(status.success(), "{name}: strait exited with {status}");
    }
    for p in 0..partitions {
        assert_complete_in_order(
            &src_values[&p],
            &dst_values[&p],
            &format!("{name} partition {p}"),
        );
    }
}
