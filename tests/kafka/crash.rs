//! No data loss: the `strait` process is killed with SIGKILL at random moments while a stream
//! is being produced and mirrored, restarted each time, and at the end every source record is
//! on the target, in order per partition. The number of duplicates is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use rand::Rng;

#[test]
fn sigkill_at_random_moments_loses_nothing() {
    let (source, target) = clusters("crash");
    let topic = "crash-stream";
    let partitions = 6;
    source.create_topic(topic, partitions, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "crash",
        &source,
        &target,
        topic,
        "crash-mirror",
        "",
    );

    // A stream: 120k records at 5k/s while the mirror is killed and restarted.
    let total = 120_000u64;
    let producer = {
        let src = &source;
        std::thread::scope(|s| {
            let handle = s.spawn(move || produce_monotonic(src, topic, total, 5_000));
            let mut rng = rand::rng();
            let mut kills = 0;
            let mut n = 0;
            while !handle.is_finished() || kills < 4 {
                let (mut child, log) = spawn_strait(&config, n);
                n += 1;
                // Kill while it really mirrors: after it owns partitions (the previous, killed
                // instance holds them until its session times out), at a random moment.
                wait_for_log(
                    &log,
                    "strait::run::mirror: assigned",
                    Duration::from_secs(60),
                );
                std::thread::sleep(Duration::from_millis(rng.random_range(100..2500)));
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
            }
            handle.join().expect("producer thread");
            kills
        })
    };
    eprintln!("killed strait with SIGKILL {producer} times while producing {total} records");

    // A last run that is allowed to finish.
    let (mut child, log) = spawn_strait(&config, 99);
    let rt = runtime();
    let (src_values, dst_values) = rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        let expected = end_offsets(&src, topic, partitions).await;
        assert_eq!(
            expected.iter().sum::<i64>() as u64,
            total,
            "source holds the whole stream"
        );
        // Duplicates only add records, so completeness is checked below record by record; here
        // wait until the target has at least as many as the source per partition and the
        // mirror has committed everything.
        wait_until_committed(
            &src,
            "crash-mirror",
            topic,
            &expected,
            Duration::from_secs(180),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        (
            read_all(&src, topic, partitions).await,
            read_all(&dst, topic, partitions).await,
        )
    });
    let status = terminate(&mut child);
    assert!(
        status.success(),
        "strait exited with {status}; log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    let mut duplicates = 0;
    for p in 0..partitions {
        duplicates +=
            assert_complete_in_order(&src_values[&p], &dst_values[&p], &format!("partition {p}"));
    }
    eprintln!(
        "all {total} records arrived in order; {duplicates} duplicates ({:.2}%) after {producer} SIGKILLs",
        duplicates as f64 * 100.0 / total as f64
    );
}

/// With `mirror.instance_id` (static membership), an instance restarted after SIGKILL gets its
/// partitions back at once, instead of waiting for the session timeout to expire the dead one.
/// That is the classic protocol's behaviour: on the consumer protocol (KIP-848) the broker
/// refuses the instance id (UNRELEASED_INSTANCE_ID) until the crashed member's session expires,
/// unless it left with epoch -2 on a graceful shutdown.
#[test]
fn static_member_restarted_after_sigkill_resumes_before_session_timeout() {
    let (source, target) = clusters("static");
    let topic = "static-stream";
    source.create_topic(topic, 3, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A session timeout far longer than the wait below: only static membership can explain a
    // reassignment within it.
    let config = write_config(
        dir.path(),
        "static",
        &source,
        &target,
        topic,
        "static-mirror",
        "instance_id = \"mirror-1\"\ngroup_protocol = \"classic\"",
    );
    let config_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("session_timeout = \"6s\"", "session_timeout = \"120s\"");
    std::fs::write(&config, config_text).unwrap();
    produce_monotonic(&source, topic, 3_000, -1);
    let (mut first, log) = spawn_strait(&config, 0);
    wait_for_log(
        &log,
        "strait::run::mirror: assigned",
        Duration::from_secs(60),
    );
    first.kill().unwrap();
    first.wait().unwrap();
    produce_monotonic(&source, topic, 3_000, -1);
    let (mut second, log2) = spawn_strait(&config, 1);
    wait_for_log(
        &log2,
        "strait::run::mirror: assigned partitions=3",
        Duration::from_secs(60),
    );
    let rt = runtime();
    rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        wait_until_complete(
            &dst,
            topic,
            &end_offsets(&src, topic, 3).await,
            Duration::from_secs(60),
        )
        .await;
    });
    let status = terminate(&mut second);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log2).unwrap_or_default()
    );
}
