//! Exactly-once mirroring (`mirror.exactly_once = true`) through a target broker failover and
//! through a consumer-group failover, against real Kafka, refereed by Kafka's own Java console
//! consumer reading `read_committed`. Both tests share one pair of clusters (a 1-node source, a
//! 3-node target: replication 3, `min.insync.replicas` 2, transaction state log replication 3
//! and min ISR 2) and run one after the other.
//!
//! 1. **Target broker failover.** A producer writes numbered records to explicit partitions of
//!    the source while the mirror runs. Mid-stream the target broker that coordinates the most
//!    of the mirror's transactional ids (found with FindCoordinator; it also leads mirrored
//!    partitions) is SIGKILLed, the producer keeps writing, and the broker is restarted only
//!    once the positions the mirror stored on the target have passed records produced *after*
//!    the kill: the mirror made progress in every partition while the broker was down (its
//!    transactions moved to the new coordinators and its batches to the new leaders). Then the
//!    target holds every source record exactly once, in order: 0 missing, 0 duplicates.
//! 2. **Failover checkpoints.** The mirror (checkpoints on) is SIGKILLed mid-stream three times,
//!    which leaves aborted transactions on the target (a `read_uncommitted` read sees more
//!    records than a `read_committed` one). The killed instances persist offset syncs only
//!    through their transactions' commits (their source commits and checkpoint rounds are
//!    rare). Then an instance with 10 s transactions and 200 ms checkpoint rounds is SIGKILLed
//!    while the group has committed inside records it holds in an open transaction; the next
//!    instance aborts that transaction and re-sends them. Then:
//!    * the checkpoints the instance killed with an open transaction left translate exactly
//!      (a checkpoint into the open transaction would send the group back to the re-sent
//!      records before its offset);
//!    * every source offset of every partition, translated with the offset syncs persisted on
//!      the target alone, points at the target offset from which a `read_committed` reader gets
//!      exactly the source records from that offset on;
//!    * a group committed on the source inside ranges that were aborted and re-sent fails over
//!      with `strait failover --apply`, and the same group read on the target by Kafka's Java
//!      console consumer (`read_committed`) gets exactly the remainder.
//! 3. **Transaction size.** With `transaction_interval = "5m"` and `transaction_max_bytes =
//!    "64KiB"`, a backlog of ~2 MB in one partition is mirrored in many transactions, each
//!    committed because of its size (the interval never runs out in the test; without the
//!    size limit the backlog would be one transaction, committed at the shutdown), and the
//!    target still holds every record exactly once.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- eos_failover:: --nocapture` (prints the figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use strait::failover::OffsetMaps;
use strait::failover::checkpoint::{offset_syncs_topic, replay};
use strait_forward::txn::ControlRecordType;
use strait_forward::{FetchedBatch, FetchedRecords};
use strait_testkit::{AdminOp, Cluster, ConsumeOptions};
use strait_wire::group::CoordinatorType;
use strait_wire::{FetchOptions, FetchPartition, TopicPartition};

const PARTITIONS: i32 = 6;
/// Records per partition per producer round (a round every 100 ms).
const ROUND: usize = 20;

/// The clusters both tests use. Held (locked) by one test at a time: the broker failover must
/// not hit the other test's mirror. Never dropped: the test kit's watchdog stops the brokers
/// when the test process exits, however it exits.
struct Fixture {
    source: Cluster,
    target: Cluster,
}

static FIXTURE: Mutex<Option<Fixture>> = Mutex::new(None);

/// The shared clusters, started by the first test that asks, with every target node running
/// (a test that failed mid-outage may have left one down).
fn fixture() -> MutexGuard<'static, Option<Fixture>> {
    let mut guard = FIXTURE.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        // Mirrors are SIGKILLed here: their static members must expire as fast as with the
        // classic protocol (see `consumer_sessions_of_6s`).
        let source = std::thread::spawn(|| {
            consumer_sessions_of_6s(Cluster::builder("eosfo-src"))
                .start()
                .unwrap()
        });
        let target = Cluster::builder("eosfo-dst").nodes(3).start().unwrap();
        *guard = Some(Fixture {
            source: source.join().unwrap(),
            target,
        });
    }
    let f = guard.as_mut().unwrap();
    for node in f.target.node_ids() {
        if !f.target.is_running(node).unwrap() {
            f.target.start_node(node).unwrap();
        }
    }
    guard
}

/// A topic with PARTITIONS partitions on both clusters: replication 3 with min ISR 2 on the
/// target (all replicas in sync before the test starts).
fn create_topic(f: &Fixture, topic: &str) {
    f.source
        .admin(&[AdminOp::topic(topic, PARTITIONS, 1)])
        .unwrap();
    f.target
        .admin(&[
            AdminOp::CreateTopic {
                name: topic.into(),
                partitions: PARTITIONS,
                replication: 3,
                configs: vec![("min.insync.replicas".into(), "2".into())],
            },
            AdminOp::wait_isr(topic, 3),
        ])
        .unwrap();
}

fn partitions(topic: &str) -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p).unwrap())
        .collect()
}

/// Runs `schedule` while a producer writes ROUND records to every partition of `topic` every
/// 100 ms (on a client and runtime of its own); returns its result and the records per
/// partition produced.
fn while_streaming<R>(source: &Cluster, topic: &str, schedule: impl FnOnce() -> R) -> (R, usize) {
    let stop = AtomicBool::new(false);
    let produced = AtomicUsize::new(0);
    let result = std::thread::scope(|scope| {
        let producer = scope.spawn(|| {
            let rt = runtime();
            let c = rt.block_on(client(source));
            while !stop.load(Ordering::Acquire) {
                let n = produced.load(Ordering::Acquire);
                rt.block_on(produce_numbered(&c, topic, 0..PARTITIONS, n..n + ROUND));
                produced.store(n + ROUND, Ordering::Release);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(schedule));
        stop.store(true, Ordering::Release);
        producer.join().expect("the source producer");
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    (result, produced.load(Ordering::Acquire))
}

/// An exactly-once mirror config for `topic` with mirror group `group` and `extra` keys.
fn eos_config(
    f: &Fixture,
    dir: &std::path::Path,
    topic: &str,
    group: &str,
    extra: &str,
) -> std::path::PathBuf {
    write_config(
        dir,
        group,
        &f.source,
        &f.target,
        topic,
        group,
        &format!(
            "exactly_once = true\ntransaction_interval = \"200ms\"\n\
             instance_id = \"{group}-0\"\n{extra}"
        ),
    )
}

/// What Kafka's console consumer reads from `topic` on the target at `isolation`
/// (`read_committed` or `read_uncommitted`), optionally as `group`, per partition, as the
/// numbers produce_numbered wrote ("<partition>-<n>").
fn java_consume(
    target: &Cluster,
    topic: &str,
    max: usize,
    isolation: &str,
    group: Option<&str>,
) -> BTreeMap<i32, Vec<usize>> {
    let mut props = target.client_properties(target.default_listener(), None);
    props.push(("isolation.level".into(), isolation.into()));
    let mut opts = ConsumeOptions::default().timeout(Duration::from_secs(10));
    if let Some(g) = group {
        opts = opts.group(g);
    }
    let lines = target
        .console_consume_with(topic, max, &props, &opts)
        .unwrap();
    common::numbers_by_partition(lines)
}

/// Asserts that `got` holds, for every partition, exactly `from[p]..total` in order.
fn assert_exactly(got: &BTreeMap<i32, Vec<usize>>, from: &[usize], total: usize, what: &str) {
    for p in 0..PARTITIONS {
        let got = got.get(&p).cloned().unwrap_or_default();
        let want: Vec<usize> = (from[p as usize]..total).collect();
        let missing = want.iter().filter(|n| !got.contains(n)).count();
        let duplicates = (got.len() + missing).saturating_sub(want.len());
        assert_eq!(
            got, want,
            "{what}, partition {p}: {missing} missing, {duplicates} duplicates"
        );
    }
}

/// Waits until the positions the mirror stored on the target (group `group`, keyed by the
/// target topic) are at least `ends`; returns them.
fn wait_for_positions(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    group: &str,
    tps: &[TopicPartition],
    ends: &[i64],
    log: &std::path::Path,
) -> Vec<i64> {
    let what = format!("the stored positions reaching {ends:?}");
    wait_for_group_offsets(rt, dst, group, tps, &what, log, |now| {
        now.iter().zip(ends).all(|(n, e)| n >= e)
    })
}

#[test]
fn target_broker_failover_mid_stream_keeps_exactly_once() {
    const TOPIC: &str = "ledger";
    const GROUP: &str = "strait-eos-fo";
    let mut guard = fixture();
    let f = guard.as_mut().unwrap();
    create_topic(f, TOPIC);
    let rt = runtime();
    let src = rt.block_on(client(&f.source));
    let dst = rt.block_on(client(&f.target));
    let dir = tempfile::tempdir().unwrap();
    let config = eos_config(f, dir.path(), TOPIC, GROUP, "");
    let tps = partitions(TOPIC);

    let source = &f.source;
    let target = &mut f.target;
    let ((mut strait, log, report), total) = while_streaming(source, TOPIC, || {
        let (strait, log) = spawn_strait(&config, 0);
        wait_for_group_progress(&rt, &dst, GROUP, &tps, &[0; PARTITIONS as usize], &log);
        // The node to kill, by what the cluster says: the coordinator of the most of the
        // mirror's transactional ids, then the leader of the most partitions, then the lowest id.
        let coordinators: Vec<i32> = (0..PARTITIONS)
            .map(|p| {
                let id = format!("{GROUP}-{TOPIC}-{p}");
                let conn = rt
                    .block_on(dst.coordinator(CoordinatorType::Transaction, &id))
                    .unwrap();
                conn.node_id().expect("a broker connection")
            })
            .collect();
        let md = rt
            .block_on(dst.metadata(Some(&[TOPIC.to_string()])))
            .unwrap();
        let leaders: Vec<i32> = tps
            .iter()
            .map(|tp| md.partition(tp).and_then(|pi| pi.leader).expect("a leader"))
            .collect();
        let group_coordinator = rt
            .block_on(dst.coordinator(CoordinatorType::Group, GROUP))
            .unwrap()
            .node_id()
            .unwrap();
        let count = |v: &[i32], n: i32| v.iter().filter(|x| **x == n).count();
        let node = target
            .node_ids()
            .into_iter()
            .max_by_key(|n| (count(&coordinators, *n), count(&leaders, *n), -n))
            .unwrap();
        let (coordinated, led) = (count(&coordinators, node), count(&leaders, node));
        // Six ids over three nodes: one coordinates at least two. Kafka spreads the leaders
        // of six partitions evenly over three brokers, so the node also leads two of them.
        assert!(coordinated >= 2 && led >= 1, "{coordinators:?} {leaders:?}");

        let what = "the stored positions";
        let at_kill = wait_for_group_offsets(&rt, &dst, GROUP, &tps, what, &log, |_| true);
        target.kill_node(node).unwrap();
        let killed = Instant::now();
        // Records produced after the kill: the mirror must store positions past them on the
        // target while the node is still down.
        std::thread::sleep(Duration::from_secs(1));
        let after_kill = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
        let during = wait_for_positions(&rt, &dst, GROUP, &tps, &after_kill, &log);
        let progressed_after = killed.elapsed();
        assert!(!target.is_running(node).unwrap());
        target.start_node(node).unwrap();
        let down_for = killed.elapsed();
        // And on with the node back.
        wait_for_group_progress(&rt, &dst, GROUP, &tps, &during, &log);
        let moved: Vec<i64> = during.iter().zip(&at_kill).map(|(d, k)| d - k).collect();
        let report = format!(
            "killed node {node} (transaction coordinator of {coordinated} of {PARTITIONS} \
             transactional ids {coordinators:?}, leader of {led} partitions {leaders:?}, \
             coordinator of the mirror's group: node {group_coordinator}); every partition's \
             stored position passed the records produced 1 s after the kill {:.1} s after it \
             (positions moved by {moved:?} while it was down); node down {:.1} s",
            progressed_after.as_secs_f64(),
            down_for.as_secs_f64()
        );
        (strait, log, report)
    });

    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    assert!(
        ends.iter().all(|e| *e == total as i64),
        "{ends:?} != {total}"
    );
    wait_for_positions(&rt, &dst, GROUP, &tps, &ends, &log);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);
    let max = total * PARTITIONS as usize;
    let committed = java_consume(&f.target, TOPIC, max, "read_committed", None);
    assert_exactly(
        &committed,
        &[0; PARTITIONS as usize],
        total,
        "read_committed",
    );
    let uncommitted: usize = java_consume(&f.target, TOPIC, 2 * max, "read_uncommitted", None)
        .values()
        .map(Vec::len)
        .sum();
    println!(
        "{report}; {total} records per partition, {PARTITIONS} partitions: 0 missing, 0 \
         duplicates read_committed; {} records of aborted transactions in the target log",
        uncommitted - max
    );
}

/// One record of a target partition's log, as a `read_uncommitted` reader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visible {
    /// Committed (or not transactional): a `read_committed` reader sees it.
    Yes,
    /// In a transaction that was aborted.
    Aborted,
}

/// A target partition's data records (not markers) in log order: (offset, number, visibility).
type TargetLog = Vec<(i64, usize, Visible)>;

/// The (offset, number) of the records a `read_committed` reader sees, in order.
fn visible_records(log: &TargetLog) -> Vec<(i64, usize)> {
    log.iter()
        .filter(|r| r.2 == Visible::Yes)
        .map(|r| (r.0, r.1))
        .collect()
}

/// Reads every target partition of `topic` to its end and sorts its records into committed
/// and aborted ones by the transaction markers that follow them.
async fn read_target(dst: &strait_wire::Client, topic: &str) -> BTreeMap<i32, TargetLog> {
    let ends = end_offsets(dst, topic, PARTITIONS).await;
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(topic, p).unwrap();
        let mut log: TargetLog = Vec::new();
        // Data records of each producer id waiting for their transaction's marker (indexes
        // into `log`).
        let mut open: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let mut offset = 0i64;
        while offset < ends[p as usize] {
            let fetched = dst
                .fetch(
                    &[FetchPartition::new(tp.clone(), offset).with_max_bytes(4 << 20)],
                    &FetchOptions::default(),
                )
                .await
                .unwrap()
                .pop()
                .unwrap();
            fetched.check(None).unwrap();
            for item in FetchedRecords::new(fetched.records) {
                let FetchedBatch::V2(batch) = item.unwrap() else {
                    panic!("legacy batch on a 4.x broker")
                };
                if let Some(marker) = batch.control_record().unwrap() {
                    let verdict = match marker.kind {
                        ControlRecordType::Abort => Visible::Aborted,
                        _ => Visible::Yes,
                    };
                    for i in open.remove(&batch.producer_id()).unwrap_or_default() {
                        log[i].2 = verdict;
                    }
                } else {
                    let decoded = batch.decode_records(64 << 20).unwrap();
                    for record in decoded.iter() {
                        let record = record.unwrap();
                        let at = batch.record_offset(&record);
                        if at < offset {
                            continue;
                        }
                        let value = String::from_utf8(record.value().unwrap().to_vec()).unwrap();
                        let (_, n) = value.split_once('-').expect("a numbered record");
                        if batch.is_transactional() {
                            open.entry(batch.producer_id()).or_default().push(log.len());
                        }
                        log.push((at, n.parse().unwrap(), Visible::Yes));
                    }
                }
                offset = batch.next_offset();
            }
        }
        assert!(
            open.is_empty(),
            "partition {p}: a transaction is still open: {open:?}"
        );
        out.insert(p, log);
    }
    out
}

#[test]
fn checkpoints_translate_exactly_across_aborted_transactions() {
    const TOPIC: &str = "orders";
    const GROUP: &str = "strait-eos-cp";
    const APP: &str = "app";
    const KILLS: usize = 3;
    let mut guard = fixture();
    let f = guard.as_mut().unwrap();
    create_topic(f, TOPIC);
    let rt = runtime();
    let src = rt.block_on(client(&f.source));
    let dst = rt.block_on(client(&f.target));
    let dir = tempfile::tempdir().unwrap();
    let config = eos_config(
        f,
        dir.path(),
        TOPIC,
        GROUP,
        "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\n",
    );
    // The instances that are killed commit source positions (for monitoring) and run
    // checkpoint rounds, which also persist offset syncs, only once after they start: what
    // maps their transactions onto the target must be persisted by the transactions' own
    // commits, or the ranges they committed are unknown to the next instance.
    let killed = dir.path().join("killed.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("commit_interval = \"200ms\"", "commit_interval = \"60s\"")
        .replace(
            "checkpoint_interval = \"500ms\"",
            "checkpoint_interval = \"10m\"",
        );
    std::fs::write(&killed, text).unwrap();
    let tps = partitions(TOPIC);

    // SIGKILLs mid-stream, each restarted at once: each leaves open transactions behind, which
    // the next instance's initialization aborts before it re-sends their records.
    let ((mut strait, _), mut total) = while_streaming(&f.source, TOPIC, || {
        let (mut strait, mut log) = spawn_strait(&killed, 0);
        let mut positions =
            wait_for_group_progress(&rt, &dst, GROUP, &tps, &[0; PARTITIONS as usize], &log);
        for run in 1..=KILLS {
            positions = wait_for_group_progress(&rt, &dst, GROUP, &tps, &positions, &log);
            strait.kill().unwrap();
            let _ = strait.wait();
            (strait, log) = spawn_strait(&killed, run);
        }
        wait_for_group_progress(&rt, &dst, GROUP, &tps, &positions, &log);
        (strait, log)
    });
    strait.kill().unwrap();
    let _ = strait.wait();

    // A checkpoint round while a transaction is open: an instance whose transactions stay open
    // for 10 s, with checkpoints every 200 ms, mirrors what is left, and the group commits
    // where it is (checkpointed), then inside records that the instance has sent in a
    // transaction that is still open when the instance is SIGKILLed (and then aborted by the
    // next one, which re-sends them). Whatever checkpoint the killed instance left must
    // still translate exactly: a checkpoint into the open transaction would send the group
    // back to the re-sent records before its offset.
    let open = dir.path().join("open.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            "transaction_interval = \"200ms\"",
            "transaction_interval = \"10s\"",
        )
        .replace(
            "checkpoint_interval = \"500ms\"",
            "checkpoint_interval = \"200ms\"",
        );
    std::fs::write(&open, text).unwrap();
    let (mut strait, log) = spawn_strait(&open, KILLS + 1);
    let before = vec![total as i64; PARTITIONS as usize];
    wait_for_positions(&rt, &dst, GROUP, &tps, &before, &log);
    let at = |offsets: &[i64]| -> Vec<(TopicPartition, i64)> {
        tps.iter().cloned().zip(offsets.iter().copied()).collect()
    };
    rt.block_on(commit_group(&src, APP, &at(&before)));
    let wanted: BTreeMap<(String, i32), i64> = (0..PARTITIONS)
        .map(|p| ((TOPIC.to_string(), p), total as i64))
        .collect();
    wait_for_checkpoints(&rt, &dst, "src", APP, &wanted, &log);
    let ahead: Vec<i64> = (0..PARTITIONS)
        .map(|p| (total + 5) as i64 + i64::from(p))
        .collect();
    rt.block_on(commit_group(&src, APP, &at(&ahead)));
    let target_before = rt.block_on(end_offsets(&dst, TOPIC, PARTITIONS));
    rt.block_on(produce_numbered(
        &src,
        TOPIC,
        0..PARTITIONS,
        total..total + 2 * ROUND,
    ));
    total += 2 * ROUND;
    // Acknowledged by the target, then a few checkpoint rounds.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rt
        .block_on(end_offsets(&dst, TOPIC, PARTITIONS))
        .iter()
        .zip(&target_before)
        .any(|(now, b)| *now < b + 2 * ROUND as i64)
    {
        assert!(
            Instant::now() < deadline,
            "the records did not reach the target"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let left: BTreeMap<i32, (i64, i64)> = rt
        .block_on(strait::failover::command::latest_checkpoints(&dst, "src"))
        .unwrap()
        .into_iter()
        .filter(|((g, t, _), _)| g == APP && t == TOPIC)
        .map(|((_, _, p), c)| (p, (c.upstream_offset, c.offset)))
        .collect();
    let what = "the stored positions";
    let stored = wait_for_group_offsets(&rt, &dst, GROUP, &tps, what, &log, |_| true);
    assert_eq!(
        stored, before,
        "the transaction holding the new records committed before the kill (a 10 s \
         transaction interval was too short on this machine): the scenario did not happen"
    );
    strait.kill().unwrap();
    let _ = strait.wait();

    // An instance like the first ones, with checkpoints every 500 ms, to the end.
    let (mut strait, log) = spawn_strait(&config, KILLS + 2);
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    assert!(
        ends.iter().all(|e| *e == total as i64),
        "{ends:?} != {total}"
    );
    wait_for_positions(&rt, &dst, GROUP, &tps, &ends, &log);

    // The kills left aborted transactions: Kafka's consumer sees more records uncommitted.
    let max = total * PARTITIONS as usize;
    let committed = java_consume(&f.target, TOPIC, max, "read_committed", None);
    assert_exactly(
        &committed,
        &[0; PARTITIONS as usize],
        total,
        "read_committed",
    );
    let uncommitted: usize = java_consume(&f.target, TOPIC, 2 * max, "read_uncommitted", None)
        .values()
        .map(Vec::len)
        .sum();
    assert!(
        uncommitted > max,
        "the kills hit no open transaction: the scenario did not happen"
    );
    let logs = rt.block_on(read_target(&dst, TOPIC));
    let aborted: usize = logs
        .values()
        .map(|l| l.iter().filter(|r| r.2 == Visible::Aborted).count())
        .sum();
    assert_eq!(aborted, uncommitted - max, "aborted records by the markers");

    // Every source offset translates, with the syncs persisted on the target alone, to the
    // target offset from which a read_committed reader gets exactly the records from it on.
    let maps = OffsetMaps::default();
    rt.block_on(replay(&dst, &offset_syncs_topic("dst"), &maps, |_| true))
        .unwrap();
    let mut inexact = Vec::new();
    for tp in &tps {
        let visible = visible_records(&logs[&tp.partition()]);
        assert_eq!(
            visible.iter().map(|v| v.1).collect::<Vec<_>>(),
            (0..total).collect::<Vec<_>>()
        );
        for c in 0..=total {
            match maps.translate(tp, c as i64) {
                Ok(t) => {
                    // The first visible record at or after t must be c's.
                    let first = visible.partition_point(|v| v.0 < t);
                    if first != c {
                        inexact.push(format!("{tp} {c} -> {t} (reads from {first})"));
                    }
                }
                Err(miss) => inexact.push(format!("{tp} {c}: {miss}")),
            }
        }
    }
    // The checkpoints the instance killed with an open transaction left behind.
    for (p, (c, t)) in &left {
        let visible = visible_records(&logs[p]);
        let first = visible.partition_point(|v| v.0 < *t);
        assert_eq!(
            first, *c as usize,
            "partition {p}: the checkpoint {c} -> {t} left by the instance killed with an open \
             transaction reads on from source offset {first}"
        );
    }
    assert!(
        inexact.is_empty(),
        "{} of {} source offsets do not translate exactly: {:?}",
        inexact.len(),
        (total + 1) * PARTITIONS as usize,
        &inexact[..inexact.len().min(20)]
    );

    // The group's commits: inside an aborted (and re-sent) range where the partition has one,
    // elsewhere at a different point in every partition.
    let mut inside = 0;
    let commits: Vec<usize> = (0..PARTITIONS)
        .map(|p| {
            let log = &logs[&p];
            let first_aborted = log.iter().position(|r| r.2 == Visible::Aborted);
            match first_aborted {
                Some(i) => {
                    let len = log[i..]
                        .iter()
                        .take_while(|r| r.2 == Visible::Aborted)
                        .count();
                    inside += 1;
                    log[i + len / 2].1
                }
                None => total / 2 + p as usize,
            }
        })
        .collect();
    let offsets: Vec<(TopicPartition, i64)> = tps
        .iter()
        .zip(&commits)
        .map(|(tp, c)| (tp.clone(), *c as i64))
        .collect();
    rt.block_on(commit_group(&src, APP, &offsets));
    let wanted: BTreeMap<(String, i32), i64> = offsets
        .iter()
        .map(|(tp, c)| ((TOPIC.to_string(), tp.partition()), *c))
        .collect();
    wait_for_checkpoints(&rt, &dst, "src", APP, &wanted, &log);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);

    let out = StraitCommand::new(["failover", "--config"])
        .arg(&config)
        .arg("--apply")
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let remainder: usize = commits.iter().map(|c| total - c).sum();
    let got = java_consume(&f.target, TOPIC, remainder + 1, "read_committed", Some(APP));
    assert_exactly(&got, &commits, total, "the failed-over group");
    println!(
        "{total} records per partition, {PARTITIONS} partitions, {KILLS} SIGKILLs: {aborted} \
         records of aborted transactions on the target; every source offset translates exactly; \
         group {APP} committed at {commits:?} ({inside} inside aborted ranges) read exactly \
         the {remainder} remaining records after failover; the instance killed with a \
         transaction open left checkpoints {left:?} (group at {before:?} then {ahead:?})"
    );
}

#[test]
fn transactions_commit_by_size_before_the_interval() {
    const TOPIC: &str = "bulk";
    const GROUP: &str = "strait-eos-size";
    const RECORDS: usize = 120_000;
    const MAX_BYTES: i64 = 64 << 10;
    let mut guard = fixture();
    let f = guard.as_mut().unwrap();
    create_topic(f, TOPIC);
    let rt = runtime();
    let src = rt.block_on(client(&f.source));
    let dst = rt.block_on(client(&f.target));
    // A backlog in partition 0 only: about 2 MB of small records in batches of 500.
    rt.block_on(produce_numbered(&src, TOPIC, 0..1, 0..RECORDS));
    let dir = tempfile::tempdir().unwrap();
    // The interval cannot run out within the test, and 16 KiB batches keep a transaction
    // near the size limit: at most 5 in flight and 5 queued when it is reached.
    let config = eos_config(
        f,
        dir.path(),
        TOPIC,
        GROUP,
        "transaction_max_bytes = \"64KiB\"\nbatch_size = \"16KiB\"\n",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "transaction_interval = \"200ms\"",
        "transaction_interval = \"5m\"\ntransaction_timeout = \"15m\"",
    );
    std::fs::write(&config, text).unwrap();
    let tps = partitions(TOPIC);
    let (mut strait, log) = spawn_strait(&config, 0);
    // Well into the backlog by size-committed transactions alone; the shutdown commits the rest.
    let mut want = vec![0i64; PARTITIONS as usize];
    want[0] = (RECORDS * 3 / 4) as i64;
    wait_for_positions(&rt, &dst, GROUP, &tps, &want, &log);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);
    // The shutdown commits what was sent, not the whole backlog: the target holds exactly the
    // records before the stored position.
    let stored =
        wait_for_group_offsets(&rt, &dst, GROUP, &tps, "the final positions", &log, |_| {
            true
        })[0];
    let stored = usize::try_from(stored).unwrap();
    assert!(stored >= RECORDS * 3 / 4, "{stored}");

    let logs = rt.block_on(read_target(&dst, TOPIC));
    let p0 = &logs[&0];
    let numbers: Vec<usize> = visible_records(p0).into_iter().map(|(_, n)| n).collect();
    let first_wrong = numbers.iter().enumerate().find(|(i, n)| *i != **n);
    assert!(
        numbers.len() == stored && first_wrong.is_none(),
        "partition 0 must hold 0..{stored} once, in order: {} records, first out of place \
         (index, number): {first_wrong:?}",
        numbers.len()
    );
    assert!(p0.iter().all(|r| r.2 == Visible::Yes), "nothing aborted");
    let end = rt.block_on(end_offsets(&dst, TOPIC, PARTITIONS))[0];
    // Every transaction ends with one commit marker, which takes an offset of its own.
    let transactions = end - stored as i64;
    let bytes = rt.block_on(async {
        let tp = TopicPartition::new(TOPIC, 0).unwrap();
        let mut total = 0i64;
        let mut offset = 0i64;
        while offset < end {
            let fetched = dst
                .fetch(
                    &[FetchPartition::new(tp.clone(), offset).with_max_bytes(4 << 20)],
                    &FetchOptions::default(),
                )
                .await
                .unwrap()
                .pop()
                .unwrap();
            for item in FetchedRecords::new(fetched.records) {
                let FetchedBatch::V2(batch) = item.unwrap() else {
                    panic!("legacy batch on a 4.x broker")
                };
                if batch.control_record().unwrap().is_none() {
                    total += batch.size_in_bytes() as i64;
                }
                offset = batch.next_offset();
            }
        }
        total
    });
    println!(
        "{stored} records ({bytes} bytes of batches) mirrored in {transactions} transactions \
         of at most {MAX_BYTES} bytes each (plus what was in flight)"
    );
    // Each transaction but the last holds at least MAX_BYTES of batches sent; at most 10
    // batches of 16 KiB more.
    assert!(
        transactions >= bytes / (MAX_BYTES + 10 * (16 << 10)),
        "{transactions} transactions for {bytes} bytes"
    );
    assert!(
        transactions >= 4,
        "{transactions} transactions: the size limit did not commit them"
    );
}
