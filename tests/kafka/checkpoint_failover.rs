//! Site failover of a consumer group with exact translated offsets, against real Kafka.
//!
//! A Java consumer group (Kafka's console consumer) reads part of a 12-partition topic on the
//! source and commits. The target topic already holds other records at the start of every
//! partition, so target offsets differ from source offsets. `strait run` mirrors with
//! `mirror.groups = ["app"]` and writes MirrorMaker 2 checkpoints to the target; the source
//! cluster is then stopped, `strait failover --apply` commits the translated offsets to the
//! same group on the target, and the same group id on the target (Java console consumer again)
//! reads exactly the remainder of each partition: nothing lost, nothing twice.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- checkpoint_failover:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use strait::failover::format::Rpo;
use strait_testkit::{AdminOp, Cluster, ConsumeOptions};
use strait_wire::TopicPartition;
use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;
const PER_PARTITION: usize = 100;
/// Records already on the target at the start of every partition (shifts target offsets).
const TARGET_HEAD: usize = 7;
const GROUP: &str = "app";
/// A source group already further on the target in half of the partitions.
const AHEAD: &str = "app-ahead";
/// A source group with a member on the target.
const LIVE: &str = "app-live";

#[test]
fn a_group_fails_over_to_exactly_the_remainder() {
    let started = Instant::now();
    let (source, target) = clusters("ckpt");
    let mut source = Some(source);
    let src = source.as_ref().unwrap();
    src.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    target
        .admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)])
        .unwrap();
    let rt = runtime();
    let (src_client, dst_client) = rt.block_on(async {
        let s = client(src).await;
        let d = client(&target).await;
        produce_to_partitions(&s, TOPIC, 0..PARTITIONS, PER_PARTITION).await;
        // Records of its own first on the target ("<p>-0".."<p>-6", at target offsets 0..6).
        produce_to_partitions(&d, TOPIC, 0..PARTITIONS, TARGET_HEAD).await;
        (s, d)
    });
    let head_ends = rt.block_on(end_offsets(&dst_client, TOPIC, PARTITIONS));
    assert!(head_ends.iter().all(|e| *e == TARGET_HEAD as i64));

    // A Java consumer group reads part of the topic on the source, 7 records per poll, and
    // commits what it consumed when it stops.
    let mut props = src.client_properties(src.default_listener(), None);
    props.push(("max.poll.records".into(), "7".into()));
    let first = src
        .console_consume_with(
            TOPIC,
            530,
            &props,
            &ConsumeOptions::default()
                .group(GROUP)
                .timeout(Duration::from_secs(20)),
        )
        .unwrap();
    assert_eq!(first.len(), 530);
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect();
    let committed: BTreeMap<i32, Option<i64>> = rt.block_on(async {
        let c = GroupOffsets::new(&src_client, GROUP)
            .fetch(&tps)
            .await
            .unwrap();
        tps.iter()
            .map(|tp| (tp.partition(), c[tp].as_ref().map(|o| o.offset)))
            .collect()
    });
    let remainder: usize = committed
        .values()
        .map(|c| PER_PARTITION - c.unwrap_or(0) as usize)
        .sum();
    println!("source commits of {GROUP}: {committed:?}; remainder {remainder}");
    assert!(remainder > 0 && remainder < PARTITIONS as usize * PER_PARTITION);

    // Two more source groups for group offset sync, committed directly (no consumer needed):
    // "app-ahead" is already further on the target in partitions 0..5 (it must stay there);
    // "app-live" has a member on the target (it must not be touched).
    let tp_of = |p: i32| TopicPartition::new(TOPIC, p).unwrap();
    let end = (TARGET_HEAD + PER_PARTITION) as i64;
    rt.block_on(async {
        let at = |o: i64| {
            (0..PARTITIONS)
                .map(|p| CommitOffset::new(tp_of(p), o))
                .collect::<Vec<_>>()
        };
        for (group, offset) in [(AHEAD, 60), (LIVE, 40)] {
            GroupOffsets::new(&src_client, group)
                .commit(&Generation::simple(), &at(offset))
                .await
                .unwrap();
        }
        let ahead: Vec<CommitOffset> = (0..PARTITIONS / 2)
            .map(|p| CommitOffset::new(tp_of(p), end))
            .collect();
        GroupOffsets::new(&dst_client, AHEAD)
            .commit(&Generation::simple(), &ahead)
            .await
            .unwrap();
    });
    let java = java();
    // A member that never commits, so any committed offset of "app-live" would be Strait's.
    let live_member = Proc::new(
        Command::new(&java)
            .arg("-cp")
            .arg(format!("{}/*", target.lib_dir().display()))
            .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
            .args(["--bootstrap-server", target.bootstrap().as_str()])
            .args(["--topic", TOPIC, "--group", LIVE, "--timeout-ms", "300000"])
            .args(["--consumer-property", "enable.auto.commit=false"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a console consumer"),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while rt.block_on(members(&dst_client, LIVE)) == 0 {
        assert!(Instant::now() < deadline, "the {LIVE} member never joined");
        std::thread::sleep(Duration::from_millis(250));
    }

    // Mirror with checkpoints and group offset sync.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "ckpt",
        src,
        &target,
        TOPIC,
        "strait-ckpt",
        "groups = [\"app.*\"]\ncheckpoint_interval = \"500ms\"\n\
         sync_group_offsets = true\nsync_group_offsets_interval = \"500ms\"\n",
    );
    let (mut strait, log) = spawn_strait(&config, 0);
    rt.block_on(wait_until_committed(
        &src_client,
        "strait-ckpt",
        TOPIC,
        &[PER_PARTITION as i64; PARTITIONS as usize],
        Duration::from_secs(120),
    ));
    // Every committed partition has its checkpoint on the target, shifted by the head.
    let deadline = Instant::now() + Duration::from_secs(60);
    let checkpoints = loop {
        let latest = rt.block_on(strait::failover::command::latest_checkpoints(
            &dst_client,
            "src",
        ));
        if let Ok(latest) = latest {
            // Complete, and written after everything was mirrored: the RPO they carry is 0.
            let complete = committed.iter().all(|(p, c)| match c {
                None => true,
                Some(c) => latest
                    .get(&(GROUP.to_string(), TOPIC.to_string(), *p))
                    .is_some_and(|cp| {
                        cp.upstream_offset == *c
                            && Rpo::split(&cp.metadata)
                                .0
                                .map(|r| (r.source_end, r.behind()))
                                == Some((PER_PARTITION as i64, 0))
                    }),
            });
            if complete {
                break latest
                    .into_iter()
                    .filter(|((g, _, _), _)| g == GROUP)
                    .collect::<BTreeMap<_, _>>();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no complete checkpoints after 60 s; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    for ((group, topic, p), cp) in &checkpoints {
        assert_eq!((group.as_str(), topic.as_str()), (GROUP, TOPIC));
        assert_eq!(
            cp.offset,
            cp.upstream_offset + TARGET_HEAD as i64,
            "partition {p}: exact translation past the target's own head"
        );
    }
    // Group offset sync, without `strait failover`: the target group's committed offsets are
    // the checkpoints; "app-ahead" is synced where it was behind and kept where it was ahead;
    // "app-live" (a member on the target) is never touched.
    let ours: BTreeMap<TopicPartition, i64> = checkpoints
        .iter()
        .map(|((_, t, p), cp)| (TopicPartition::new(t, *p).unwrap(), cp.offset))
        .collect();
    let all: Vec<TopicPartition> = (0..PARTITIONS).map(tp_of).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (app, ahead) = rt.block_on(async {
            (
                target_commits(&dst_client, GROUP, &all).await,
                target_commits(&dst_client, AHEAD, &all).await,
            )
        });
        let app: BTreeMap<TopicPartition, i64> = app.into_iter().collect();
        let ahead_want: BTreeMap<TopicPartition, i64> = (0..PARTITIONS)
            .map(|p| {
                (
                    tp_of(p),
                    if p < PARTITIONS / 2 {
                        end
                    } else {
                        60 + TARGET_HEAD as i64
                    },
                )
            })
            .collect();
        let ahead: BTreeMap<TopicPartition, i64> = ahead.into_iter().collect();
        // The ahead partitions never change, not even transiently.
        for p in 0..PARTITIONS / 2 {
            assert_eq!(
                ahead.get(&tp_of(p)),
                Some(&end),
                "{AHEAD} moved back: {ahead:?}"
            );
        }
        if app == ours && ahead == ahead_want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "group offsets not synced after 60 s: {GROUP} {app:?} (want {ours:?}), {AHEAD} \
             {ahead:?}; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // By now a sync round has seen "app-live" too (every round syncs every checkpointed group).
    assert!(
        rt.block_on(target_commits(&dst_client, LIVE, &all))
            .is_empty(),
        "{LIVE} has a member on the target and must not be touched"
    );
    assert!(
        rt.block_on(members(&dst_client, LIVE)) > 0,
        "the {LIVE} member left early"
    );
    drop(live_member);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);

    // The source site fails.
    drop(source.take());
    drop(src_client);

    let out = StraitCommand::new(["failover", "--config"])
        .arg(&config)
        .arg("--group")
        .arg(GROUP)
        .arg("--apply")
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("strait failover:\n{stdout}");
    assert!(
        out.status.success(),
        "strait failover failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The recovery point, from the target alone: nothing was missing at the last checkpoint.
    for l in stdout.lines().skip(1) {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 8, "{l}");
        assert_eq!(f[5], "0", "records behind at the last checkpoint: {l}");
        assert!(
            f[6].parse::<f64>().is_ok_and(|s| s >= 0.0),
            "checkpoint age: {l}"
        );
    }
    // Group offset sync has already committed exactly these offsets.
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.ends_with("\tkept: target ahead"))
            .count(),
        checkpoints.len(),
        "{stdout}"
    );

    // `strait offsets translate` prints the same offsets and commits nothing.
    let out = StraitCommand::new(["offsets", "translate", "--config"])
        .arg(&config)
        .arg("--group")
        .arg(GROUP)
        .output();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let translated: BTreeMap<(String, i32), i64> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f[7], "-", "translate never commits: {l}");
            (
                (f[1].to_string(), f[2].parse().unwrap()),
                f[4].parse().unwrap(),
            )
        })
        .collect();
    let expected: BTreeMap<(String, i32), i64> = checkpoints
        .iter()
        .map(|((_, t, p), cp)| ((t.clone(), *p), cp.offset))
        .collect();
    assert_eq!(translated, expected, "{text}");
    // The same table as JSON, for scripts.
    let out = StraitCommand::new(["offsets", "translate", "--output", "json", "--config"])
        .arg(&config)
        .arg("--group")
        .arg(GROUP)
        .output();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["applied"], false);
    let from_json: BTreeMap<(String, i32), i64> = doc["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["group"], GROUP);
            assert_eq!(r["action"], "-", "translate never commits: {r}");
            (
                (
                    r["topic"].as_str().unwrap().to_string(),
                    r["partition"].as_i64().unwrap() as i32,
                ),
                r["target_offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(from_json, expected, "{doc}");

    // Kafka's own MirrorMaker 2 client reads the same offsets from the checkpoints.
    let referee = java_translate_offsets(&target, "src", GROUP);
    let ours: BTreeMap<(String, i32), i64> = checkpoints
        .iter()
        .map(|((_, t, p), cp)| ((t.clone(), *p), cp.offset))
        .collect();
    assert_eq!(
        referee, ours,
        "RemoteClusterUtils.translateOffsets disagrees"
    );

    // The same group on the target reads exactly the remainder (a partition the group never
    // committed on the source starts at the target's beginning, head first).
    let uncommitted = committed.values().filter(|c| c.is_none()).count();
    let expected = remainder + uncommitted * TARGET_HEAD;
    let props = target.client_properties(target.default_listener(), None);
    let second = target
        .console_consume_with(
            TOPIC,
            // One more than expected: a duplicate would be read; the idle timeout ends it.
            expected + 1,
            &props,
            &ConsumeOptions::default()
                .group(GROUP)
                .timeout(Duration::from_secs(10)),
        )
        .unwrap();
    let mut got: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for v in &second {
        let (p, i) = v.split_once('-').expect("value <p>-<i>");
        got.entry(p.parse().unwrap())
            .or_default()
            .push(i.parse().unwrap());
    }
    for p in 0..PARTITIONS {
        let from = committed[&p].unwrap_or(0) as usize;
        let mut want: Vec<usize> = (from..PER_PARTITION).collect();
        if committed[&p].is_none() {
            // No commit on the source: the group starts at the target's beginning, head first.
            want = (0..TARGET_HEAD).chain(want).collect();
        }
        assert_eq!(
            got.get(&p).cloned().unwrap_or_default(),
            want,
            "partition {p}: the failed-over group must read exactly the remainder"
        );
    }

    // Again: the group is at the end on the target now, ahead of the checkpoints; nothing moves
    // back.
    let again = StraitCommand::new(["failover", "--config"])
        .arg(&config)
        .arg("--group")
        .arg(GROUP)
        .arg("--apply")
        .output();
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("app\t") && l.ends_with("\tkept: target ahead"))
            .count(),
        checkpoints.len(),
        "{text}"
    );

    // A group with an active member on the target is never touched.
    let _member = Proc::new(
        Command::new(java)
            .arg("-cp")
            .arg(format!("{}/*", target.lib_dir().display()))
            .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
            .args(["--bootstrap-server", target.bootstrap().as_str()])
            .args(["--topic", TOPIC, "--group", GROUP, "--timeout-ms", "120000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a console consumer"),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = StraitCommand::new(["failover", "--config"])
            .arg(&config)
            .arg("--group")
            .arg(GROUP)
            .arg("--apply")
            .output();
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            assert!(err.contains("active members on the target"), "{err}");
            assert!(!String::from_utf8_lossy(&out.stdout).contains("\tcommitted"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member never showed up: {err}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    println!(
        "failed over {remainder} records exactly ({} read) in {:.0?}",
        second.len(),
        started.elapsed()
    );
}

/// A transactional source: every transaction's commit marker takes a source offset that has
/// no record on the target, so target offsets fall behind source offsets by one per
/// transaction. The failed-over group still reads exactly the remainder, and Kafka's
/// `RemoteClusterUtils` reads the same translated offsets.
#[test]
fn transaction_markers_are_translated_exactly() {
    let (source, target) = clusters("ckpt-txn");
    let mut source = Some(source);
    let src = source.as_ref().unwrap();
    src.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    // ~20 transactions of ~150 records each (values "1".."3000", unique).
    let out = src
        .java_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            &[
                "--topic",
                TOPIC,
                "--num-records",
                "3000",
                "--payload-monotonic",
                "--throughput",
                "3000",
                "--transaction-duration-ms",
                "50",
                "--producer-props",
                &format!("bootstrap.servers={}", src.bootstrap()),
                "linger.ms=5",
            ],
        )
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rt = runtime();
    let src_client = rt.block_on(client(src));
    let dst_client = rt.block_on(client(&target));
    let mut props = src.client_properties(src.default_listener(), None);
    props.push(("max.poll.records".into(), "7".into()));
    props.push(("isolation.level".into(), "read_committed".into()));
    let first = src
        .console_consume_with(
            TOPIC,
            1500,
            &props,
            &ConsumeOptions::default()
                .group(GROUP)
                .timeout(Duration::from_secs(20)),
        )
        .unwrap();
    assert_eq!(first.len(), 1500);
    // The source's records with their offsets, and the group's commits.
    let records = rt.block_on(records_with_offsets(&src_client, TOPIC, PARTITIONS));
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect();
    // Partitions the producer left empty have nothing to translate (no checkpoint: a miss,
    // "nothing mirrored"), so only partitions with records and a commit are expected.
    let committed: BTreeMap<i32, i64> = rt.block_on(async {
        let c = GroupOffsets::new(&src_client, GROUP)
            .fetch(&tps)
            .await
            .unwrap();
        tps.iter()
            .filter_map(|tp| Some((tp.partition(), c[tp].as_ref()?.offset)))
            .filter(|(p, _)| !records[p].is_empty())
            .collect()
    });
    let ends = rt.block_on(end_offsets(&src_client, TOPIC, PARTITIONS));

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "ckpt-txn",
        src,
        &target,
        TOPIC,
        "strait-ckpt",
        "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\n",
    );
    let (mut strait, log) = spawn_strait(&config, 0);
    rt.block_on(wait_until_committed(
        &src_client,
        "strait-ckpt",
        TOPIC,
        &ends,
        Duration::from_secs(120),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = BTreeMap::new();
    let checkpoints = loop {
        if let Ok(latest) = rt.block_on(strait::failover::command::latest_checkpoints(
            &dst_client,
            "src",
        )) && {
            seen = latest.clone();
            true
        } && committed.iter().all(|(p, c)| {
            latest
                .get(&(GROUP.to_string(), TOPIC.to_string(), *p))
                .is_some_and(|cp| cp.upstream_offset == *c)
        }) {
            break latest;
        }
        assert!(
            Instant::now() < deadline,
            "no complete checkpoints after 60 s (commits {committed:?}, checkpoints {seen:?}); \
             log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    // Exact: the target offset is the number of source records before the commit.
    let mut shifted = 0;
    for ((_, _, p), cp) in &checkpoints {
        let before = records[p]
            .iter()
            .filter(|(o, _)| *o < cp.upstream_offset)
            .count();
        assert_eq!(cp.offset, before as i64, "partition {p}");
        shifted += usize::from(cp.offset != cp.upstream_offset);
    }
    println!("commits {committed:?}; {shifted} partitions translated across markers");
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);
    drop(source.take());
    drop(src_client);

    let out = StraitCommand::new(["failover", "--config"])
        .arg(&config)
        .arg("--apply")
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let referee = java_translate_offsets(&target, "src", GROUP);
    let ours: BTreeMap<(String, i32), i64> = checkpoints
        .iter()
        .map(|((_, t, p), cp)| ((t.clone(), *p), cp.offset))
        .collect();
    assert_eq!(
        referee, ours,
        "RemoteClusterUtils.translateOffsets disagrees"
    );

    let expected: BTreeMap<i32, Vec<String>> = records
        .iter()
        .map(|(p, recs)| {
            let from = committed.get(p).copied().unwrap_or(0);
            let rest = recs
                .iter()
                .filter(|(o, _)| *o >= from)
                .map(|(_, v)| v.clone())
                .collect();
            (*p, rest)
        })
        .collect();
    let total: usize = expected.values().map(Vec::len).sum();
    let second = target
        .console_consume_with(
            TOPIC,
            total + 1,
            &target.client_properties(target.default_listener(), None),
            &ConsumeOptions::default()
                .group(GROUP)
                .timeout(Duration::from_secs(10)),
        )
        .unwrap();
    // Values are unique: each must be one of the remainder, and all of it, once.
    let mut got: Vec<String> = second.clone();
    got.sort();
    let mut want: Vec<String> = expected.values().flatten().cloned().collect();
    want.sort();
    assert_eq!(got.len(), want.len(), "records read after failover");
    assert_eq!(
        got, want,
        "the failed-over group reads exactly the remainder"
    );
}

/// Every record (offset, value) of each partition, read_committed.
async fn records_with_offsets(
    client: &strait_wire::Client,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    use strait_forward::{FetchedBatch, FetchedRecords};
    use strait_wire::{FetchOptions, FetchPartition, Isolation};
    let ends = end_offsets(client, topic, partitions).await;
    let options = FetchOptions {
        isolation: Isolation::ReadCommitted,
        ..FetchOptions::default()
    };
    let mut out = BTreeMap::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p).unwrap();
        let mut recs = Vec::new();
        let mut offset = 0i64;
        while offset < ends[p as usize] {
            let fetched = client
                .fetch(&[FetchPartition::new(tp.clone(), offset)], &options)
                .await
                .unwrap()
                .pop()
                .unwrap();
            fetched.check(None).unwrap();
            assert!(fetched.aborted_transactions.is_empty(), "no aborts here");
            for item in FetchedRecords::new(fetched.records) {
                let FetchedBatch::V2(batch) = item.unwrap() else {
                    panic!("legacy batch")
                };
                if !batch.is_control() {
                    for r in batch.decode_records(64 << 20).unwrap().iter() {
                        let r = r.unwrap();
                        let o = batch.record_offset(&r);
                        if o >= offset {
                            let v = String::from_utf8_lossy(r.value().unwrap_or_default());
                            recs.push((o, v.into_owned()));
                        }
                    }
                }
                offset = batch.next_offset();
            }
        }
        out.insert(p, recs);
    }
    out
}

/// The committed offsets of `group` on `client`'s cluster (partitions without one left out).
async fn target_commits(
    client: &strait_wire::Client,
    group: &str,
    tps: &[TopicPartition],
) -> Vec<(TopicPartition, i64)> {
    let got = GroupOffsets::new(client, group).fetch(tps).await.unwrap();
    tps.iter()
        .filter_map(|tp| Some((tp.clone(), got.get(tp)?.as_ref()?.offset)))
        .collect()
}

/// The members of `group` (DescribeGroups on its coordinator; 0 while it cannot say).
async fn members(client: &strait_wire::Client, group: &str) -> usize {
    use strait_wire::group::CoordinatorType;
    use strait_wire::kafka_protocol::messages::{DescribeGroupsRequest, GroupId};
    use strait_wire::kafka_protocol::protocol::StrBytes;
    let Ok(conn) = client.coordinator(CoordinatorType::Group, group).await else {
        client.forget_coordinator(CoordinatorType::Group, group);
        return 0;
    };
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    match conn.send(req, 5).await {
        Ok(resp) => resp
            .groups
            .first()
            .filter(|g| g.error_code == 0)
            .map_or(0, |g| g.members.len()),
        Err(_) => {
            client.forget_coordinator(CoordinatorType::Group, group);
            0
        }
    }
}

/// `RemoteClusterUtils.translateOffsets` on `cluster` (tests/java/TranslateOffsets.java):
/// (topic, partition) -> offset.
fn java_translate_offsets(
    cluster: &Cluster,
    alias: &str,
    group: &str,
) -> BTreeMap<(String, i32), i64> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/TranslateOffsets.java");
    let java = java();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Proc::new(
        Command::new(java)
            .arg("-cp")
            .arg(format!("{}/*", cluster.lib_dir().display()))
            .arg(source)
            .args([cluster.bootstrap().as_str(), alias, group])
            .stdin(Stdio::null())
            .stdout(out.reopen().unwrap())
            .stderr(err.reopen().unwrap())
            .spawn()
            .expect("start the Java referee"),
    );
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the Java referee hung");
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(out.path()).unwrap();
    assert!(
        status.success(),
        "TranslateOffsets failed: {}",
        std::fs::read_to_string(err.path()).unwrap_or_default()
    );
    stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                (f[0].to_string(), f[1].parse().unwrap()),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}
