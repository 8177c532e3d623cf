//! `strait switchover` against real Kafka: a planned move of producers and a consumer group
//! from the source site to the target site and back the other way through the reverse flow.
//!
//! A Java consumer group reads part of a 3-partition topic on the source while `strait run`
//! mirrors it (checkpoints on) and more records are produced; the producer and the consumer
//! stop. While a consumer of the group runs on the target the switchover is refused, naming the
//! group. `strait switchover` is then started while the mirror still runs (it waits until the
//! mirror is stopped) with the test hook that exits after the groups are applied (a crash
//! half-way), then run again: it continues and writes the reverse flow's configuration. Records are produced at the target; the same group
//! (Java consumer) on the target reads exactly what it had not read on the source plus the new
//! records, per partition; and the reverse mirror copies to the old source exactly the records
//! written after the switch. The target topic starts with records of its own, so target offsets
//! differ from source offsets.
//!
//! Run: `cargo test -p strait --test kafka -- switchover:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use common::*;
use strait_testkit::{AdminOp, Cluster, ConsumeOptions};
use strait_wire::TopicPartition;
use strait_wire::offset_commit::GroupOffsets;

const TOPIC: &str = "sw";
const PARTITIONS: i32 = 3;
const GROUP: &str = "app";
const MIRROR: &str = "strait-sw";
/// Records of the target's own at the start of every partition (numbered 900..).
const HEAD: usize = 5;
/// Produced on the source before and while the mirror runs, then on the target after the switch.
const BEFORE: usize = 100;
const WHILE: usize = 200;
const AFTER: usize = 250;

/// The Java console consumer of `GROUP`: reads at most `max` records, one per poll, so the
/// offsets it commits when it stops are exactly after what it printed.
fn consume(cluster: &Cluster, max: usize, idle: Duration) -> Vec<String> {
    let mut props = cluster.client_properties(cluster.default_listener(), None);
    props.push(("max.poll.records".into(), "1".into()));
    cluster
        .console_consume_with(
            TOPIC,
            max,
            &props,
            &ConsumeOptions::default().group(GROUP).timeout(idle),
        )
        .unwrap()
}

fn switchover(config: &std::path::Path, extra: &[&str]) -> Output {
    handover("switchover", config, extra, None)
}

#[test]
fn a_planned_switchover_loses_and_repeats_nothing() {
    let (src, dst) = clusters("sw");
    src.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    dst.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    let rt = runtime();
    let (s, d) = rt.block_on(async { (client(&src).await, client(&dst).await) });
    rt.block_on(async {
        produce_numbered(&s, TOPIC, 0..PARTITIONS, 0..BEFORE).await;
        produce_numbered(&d, TOPIC, 0..PARTITIONS, 900..900 + HEAD).await;
    });
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "sw",
        &src,
        &dst,
        TOPIC,
        MIRROR,
        "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\n",
    );
    let (mut mirror, log) = spawn_strait(&config, 0);
    // The group reads on the source while the producer goes on.
    let on_source = consume(&src, 120, Duration::from_secs(20));
    assert_eq!(on_source.len(), 120);
    rt.block_on(produce_numbered(&s, TOPIC, 0..PARTITIONS, BEFORE..WHILE));

    // A dry run while the mirror still runs: prints the plan, waits for nothing, changes
    // nothing.
    let dry = switchover(&config, &["--dry-run"]);
    assert!(dry.status.success());
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.contains("[blocked] groups_applied"), "{text}");
    assert!(
        text.contains("[wait] mirror_stopped") || text.contains("[wait] lag_zero"),
        "{text}"
    );
    let target_commits = |group: &str| {
        rt.block_on(async {
            GroupOffsets::new(&d, group)
                .fetch(&tps)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|(tp, c)| Some((tp.partition(), c?.offset)))
                .collect::<BTreeMap<i32, i64>>()
        })
    };
    assert!(
        target_commits(GROUP).is_empty(),
        "a dry run commits nothing"
    );

    // A consumer of the group already runs on the target: refused, naming the group.
    let dry_run = || {
        let out = switchover(&config, &["--dry-run"]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let member = Proc::new(
        std::process::Command::new(java())
            .arg("-cp")
            .arg(format!("{}/*", dst.lib_dir().display()))
            .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
            .args(["--bootstrap-server", dst.bootstrap().as_str()])
            .args(["--topic", TOPIC, "--group", GROUP, "--timeout-ms", "300000"])
            .args(["--consumer-property", "enable.auto.commit=false"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start a console consumer"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !dry_run().contains("[refused] target_groups_idle") {
        assert!(
            std::time::Instant::now() < deadline,
            "the member on the target never joined"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let refused = switchover(&config, &[]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("target_groups_idle") && err.contains("app (1 members)"),
        "{err}"
    );
    assert!(
        target_commits(GROUP).is_empty(),
        "refused: nothing committed"
    );
    // Stopped (SIGTERM: the console consumer leaves the group).
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(member.0.id().to_string())
        .status();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !dry_run().contains("[done] target_groups_idle") {
        assert!(
            std::time::Instant::now() < deadline,
            "the member on the target never left"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(member);

    // The switchover, interrupted right after the groups were applied (the test hook exits
    // there). Started while the mirror still runs: it waits until the mirror is stopped.
    let reverse = dir.path().join("reverse.toml");
    let reverse_arg = reverse.to_str().unwrap();
    let waiting_out = dir.path().join("switchover-1.out");
    let mut waiting = StraitCommand::new(["switchover", "--config"])
        .arg(&config)
        .arg("--timeout")
        .arg("120s")
        .arg("--write-reverse-config")
        .arg(reverse_arg);
    waiting
        .command()
        .env(strait::failover::plan::TEST_EXIT_AFTER, "groups_applied")
        .stdout(std::fs::File::create(&waiting_out).unwrap())
        .stderr(std::process::Stdio::inherit());
    let mut waiting = waiting.spawn();
    wait_for_log(
        &waiting_out,
        "[wait] mirror_stopped",
        Duration::from_secs(60),
    );
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "it waits for the mirror"
    );
    // The operator stopped producers and consumers; the mirror catches up and is stopped.
    rt.block_on(wait_until_committed(
        &s,
        MIRROR,
        TOPIC,
        &[WHILE as i64; PARTITIONS as usize],
        Duration::from_secs(120),
    ));
    terminate_cleanly(&mut mirror, &log);
    drop(mirror);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = waiting.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "strait switchover did not go on after the mirror stopped:\n{}",
            std::fs::read_to_string(&waiting_out).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&waiting_out).unwrap();
    println!("strait switchover (waiting, exit after groups_applied): {status}\n{text}");
    assert_eq!(
        status.code(),
        Some(strait::failover::plan::TEST_EXIT_CODE),
        "{text}"
    );
    assert!(text.contains("[done] groups_applied"), "{text}");
    assert!(!reverse.exists());
    let source_commits: BTreeMap<i32, i64> = rt.block_on(async {
        GroupOffsets::new(&s, GROUP)
            .fetch(&tps)
            .await
            .unwrap()
            .into_iter()
            .map(|(tp, c)| (tp.partition(), c.map_or(0, |c| c.offset)))
            .collect()
    });
    let want: BTreeMap<i32, i64> = source_commits
        .iter()
        .map(|(p, c)| (*p, c + HEAD as i64))
        .collect();
    assert_eq!(
        target_commits(GROUP),
        want,
        "translated past the target's head"
    );
    assert!(
        target_commits(MIRROR).is_empty(),
        "the reverse positions come after"
    );

    // Run again: continues, and reaches the end state.
    let out = switchover(&config, &["--write-reverse-config", reverse_arg]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[done] reverse_positions"), "{text}");
    assert!(
        !text.contains("[todo] groups_applied"),
        "already applied: {text}"
    );
    assert_eq!(target_commits(GROUP), want);
    let ends = rt.block_on(end_offsets(&d, TOPIC, PARTITIONS));
    assert_eq!(
        target_commits(MIRROR),
        (0..PARTITIONS)
            .map(|p| (p, ends[p as usize]))
            .collect::<BTreeMap<_, _>>(),
        "the reverse flow starts at the target's end"
    );
    // And once more: every step reads as done, nothing changes.
    let again = switchover(&config, &[]);
    assert!(again.status.success());
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("nothing to do"), "{text}");

    // Producers and the consumer at the target site now.
    rt.block_on(produce_numbered(&d, TOPIC, 0..PARTITIONS, WHILE..AFTER));
    let total = PARTITIONS as usize * AFTER;
    // One more than expected: a duplicate would be read; 20 s without a record ends it.
    let on_target = consume(&dst, total - on_source.len() + 1, Duration::from_secs(20));
    let mut seen = numbers_by_partition(on_source);
    for (p, n) in numbers_by_partition(on_target) {
        seen.entry(p).or_default().extend(n);
    }
    for p in 0..PARTITIONS {
        assert_eq!(
            seen.get(&p).cloned().unwrap_or_default(),
            (0..AFTER).collect::<Vec<_>>(),
            "partition {p}: the group reads every record exactly once across the switch"
        );
    }

    // The reverse mirror copies to the old source exactly what was written after the switch.
    mirror_until_caught_up(&rt, &reverse, 1, &d, MIRROR, TOPIC, PARTITIONS);
    let on_old_source = rt.block_on(read_all(&s, TOPIC, PARTITIONS));
    for p in 0..PARTITIONS {
        assert_eq!(
            numbers(&on_old_source[&p]),
            (0..AFTER).collect::<Vec<_>>(),
            "partition {p} of the old source: its history, then exactly the records written \
             after the switch"
        );
    }
}
