//! Exactly-once mirroring (`mirror.exactly_once = true`) across SIGKILLs and rebalances, against
//! real Kafka, refereed by Kafka's own Java console consumer reading `read_committed`.
//!
//! A producer writes numbered records to every partition of the source for the whole test
//! while the mirror is SIGKILLed three times mid-stream (each time restarted at once with the
//! same static member id), a second instance joins the group (a rebalance moves half the
//! partitions to it, whose transactional ids then fence the first instance's producers for
//! them) and is SIGKILLed in turn (its partitions come back after the session timeout).
//! Afterwards:
//! * a `read_committed` Java consumer on the target sees every source record exactly once, in
//!   order per partition: 0 missing, 0 duplicates;
//! * a `read_uncommitted` one sees more records (the kills' open transactions, aborted by the
//!   next owner's initialization): the kills did hit open transactions, so the test is not
//!   passing on an easy schedule;
//! * the positions stored on the target (group `strait-eos`, under the target topic) are the
//!   source's end offsets.
//!
//! A second test pauses an instance (SIGSTOP) past its session timeout while another takes its
//! partitions over (initializing their transactional ids fences it), then resumes it: nothing
//! the zombie sends after the takeover becomes visible (the target still holds every record
//! exactly once), and it gives the partitions up.
//!
//! Run: `cargo test -p strait --test eos_kills -- --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster, ConsumeOptions};
use strait_wire::TopicPartition;
use strait_wire::offset_commit::GroupOffsets;

const TOPIC: &str = "payments";
const PARTITIONS: i32 = 6;
const MIRROR_GROUP: &str = "strait-eos";
/// Records per partition per producer round.
const ROUND: usize = 40;

#[test]
fn sigkills_and_rebalances_leave_every_record_exactly_once() {
    let (source, target) = clusters("eos");
    for c in [&source, &target] {
        c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, instance: &str| {
        write_config(
            dir.path(),
            name,
            &source,
            &target,
            TOPIC,
            MIRROR_GROUP,
            &format!(
                "exactly_once = true\ntransaction_interval = \"200ms\"\ninstance_id = \"{instance}\"\n"
            ),
        )
    };
    let first = config("first", "eos-0");
    let second = config("second", "eos-1");

    // The stream: ROUND records per partition every 100 ms until the schedule is over, on a
    // client and runtime of its own.
    let stop = AtomicBool::new(false);
    let produced = AtomicUsize::new(0);
    let (mut a, log) = std::thread::scope(|scope| {
        let producer = scope.spawn(|| {
            let rt = runtime();
            let c = rt.block_on(client(&source));
            while !stop.load(Ordering::Acquire) {
                let n = produced.load(Ordering::Acquire);
                rt.block_on(produce_numbered(&c, TOPIC, 0..PARTITIONS, n..n + ROUND));
                produced.store(n + ROUND, Ordering::Release);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let schedule = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            kill_and_rebalance(&rt, &dst, &first, &second)
        }));
        stop.store(true, Ordering::Release);
        producer.join().expect("the source producer");
        schedule.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let total = produced.load(Ordering::Acquire);
    let tps = partitions();
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    assert!(
        ends.iter().all(|e| *e == total as i64),
        "{ends:?} != {total}"
    );
    wait_for_positions(&rt, &dst, &tps, &ends, &log);
    assert_eq!(terminate(&mut a).code(), Some(0));
    drop(a);

    let committed = consume(&target, total, "read_committed");
    let mut missing = 0;
    let mut duplicates = 0;
    for p in 0..PARTITIONS {
        let got = committed.get(&p).cloned().unwrap_or_default();
        let want: Vec<usize> = (0..total).collect();
        missing += want.iter().filter(|n| !got.contains(n)).count();
        duplicates += got.len() - got.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert_eq!(
            got, want,
            "partition {p}: the read_committed target must hold every source record once, in order"
        );
    }
    let uncommitted: usize = consume(&target, total * 2, "read_uncommitted")
        .values()
        .map(Vec::len)
        .sum();
    let aborted = uncommitted - total * PARTITIONS as usize;
    println!(
        "{total} records per partition, {PARTITIONS} partitions: {missing} missing, {duplicates} \
         duplicates read_committed; {aborted} records of aborted transactions in the target log"
    );
    assert!(
        aborted > 0,
        "the kills hit no open transaction: the scenario did not happen"
    );
}

#[test]
fn a_paused_instance_resumed_after_a_takeover_commits_nothing() {
    let (source, target) = clusters("zombie");
    for c in [&source, &target] {
        c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, instance: &str| {
        write_config(
            dir.path(),
            name,
            &source,
            &target,
            TOPIC,
            MIRROR_GROUP,
            &format!(
                "exactly_once = true\ntransaction_interval = \"200ms\"\ninstance_id = \"{instance}\"\n"
            ),
        )
    };
    let (zombie_config, heir_config) = (config("zombie", "z-0"), config("heir", "z-1"));
    let stop = AtomicBool::new(false);
    let produced = AtomicUsize::new(0);
    let (mut zombie, zombie_log, mut heir, heir_log) = std::thread::scope(|scope| {
        let producer = scope.spawn(|| {
            let rt = runtime();
            let c = rt.block_on(client(&source));
            while !stop.load(Ordering::Acquire) {
                let n = produced.load(Ordering::Acquire);
                rt.block_on(produce_numbered(&c, TOPIC, 0..PARTITIONS, n..n + ROUND));
                produced.store(n + ROUND, Ordering::Release);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let schedule = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let tps = partitions();
            let (zombie, zombie_log) = spawn_strait(&zombie_config, 0);
            let positions = wait_for_progress(&rt, &dst, &tps, &vec![0; tps.len()], &zombie_log);
            // Paused mid-stream, with transactions open: the group gives every partition to
            // the heir after the session timeout, and its initializations fence the zombie.
            signal(&zombie, "-STOP");
            let (heir, heir_log) = spawn_strait(&heir_config, 1);
            let positions = wait_for_progress(&rt, &dst, &tps, &positions, &heir_log);
            signal(&zombie, "-CONT");
            // The zombie wakes up to a group that moved on; the heir keeps mirroring.
            wait_for_log(&zombie_log, "revoked", Duration::from_secs(60));
            wait_for_progress(&rt, &dst, &tps, &positions, &heir_log);
            (zombie, zombie_log, heir, heir_log)
        }));
        stop.store(true, Ordering::Release);
        producer.join().expect("the source producer");
        schedule.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let total = produced.load(Ordering::Acquire);
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    wait_for_positions(&rt, &dst, &partitions(), &ends, &heir_log);
    assert_eq!(terminate(&mut heir).code(), Some(0));
    assert_eq!(terminate(&mut zombie).code(), Some(0));
    drop((heir, zombie));
    let committed = consume(&target, total, "read_committed");
    for p in 0..PARTITIONS {
        assert_eq!(
            committed.get(&p).cloned().unwrap_or_default(),
            (0..total).collect::<Vec<_>>(),
            "partition {p}: exactly once after the zombie resumed"
        );
    }
    let zombie_text = std::fs::read_to_string(&zombie_log).unwrap();
    println!(
        "{total} records per partition exactly once; the zombie was {}told it was fenced",
        if zombie_text.contains("fenced") {
            ""
        } else {
            "not "
        }
    );
}

fn signal(process: &StraitProcess, which: &str) {
    let status = std::process::Command::new("kill")
        .arg(which)
        .arg(process.id().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill {which}");
}

fn partitions() -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect()
}

/// Three SIGKILLs of the first instance mid-stream, then a second instance joins and is
/// SIGKILLed; returns the first instance, which owns every partition again, and its log.
fn kill_and_rebalance(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    first: &std::path::Path,
    second: &std::path::Path,
) -> (StraitProcess, std::path::PathBuf) {
    let tps = partitions();
    let mut run = 0;
    let (mut a, mut log) = spawn_strait(first, run);
    let mut positions = wait_for_progress(rt, dst, &tps, &vec![0; tps.len()], &log);
    for _ in 0..3 {
        // Mid-stream: transactions are open with batches in them.
        positions = wait_for_progress(rt, dst, &tps, &positions, &log);
        a.kill().unwrap();
        let _ = a.wait();
        run += 1;
        (a, log) = spawn_strait(first, run);
    }
    // A second instance joins: half the partitions move to it.
    let (mut b, b_log) = spawn_strait(second, 100);
    wait_for_log(&b_log, "assigned", Duration::from_secs(60));
    positions = wait_for_progress(rt, dst, &tps, &positions, &b_log);
    positions = wait_for_progress(rt, dst, &tps, &positions, &log);
    b.kill().unwrap();
    let _ = b.wait();
    // Its partitions come back to the first one after the session timeout.
    wait_for_progress(rt, dst, &tps, &positions, &log);
    (a, log)
}

/// The positions the mirror committed on the target, in transactions (0: none).
fn stored_positions(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    tps: &[TopicPartition],
) -> Option<Vec<i64>> {
    rt.block_on(async {
        let c = GroupOffsets::new(dst, MIRROR_GROUP).fetch(tps).await.ok()?;
        Some(
            tps.iter()
                .map(|tp| c.get(tp).and_then(|o| o.as_ref()).map_or(0, |o| o.offset))
                .collect(),
        )
    })
}

/// Waits until the mirror committed past `previous` in every partition; returns the positions.
fn wait_for_progress(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    tps: &[TopicPartition],
    previous: &[i64],
    log: &std::path::Path,
) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(now) = stored_positions(rt, dst, tps)
            && now.iter().zip(previous).all(|(n, p)| n > p)
        {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "no transaction committed in every partition past {previous:?}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the stored positions are `ends`.
fn wait_for_positions(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    tps: &[TopicPartition],
    ends: &[i64],
    log: &std::path::Path,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = stored_positions(rt, dst, tps);
        if now.as_deref() == Some(ends) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stored positions {now:?} never reached {ends:?}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What Kafka's console consumer reads from the target at `isolation`, per partition, as the
/// numbers produce_numbered wrote ("<partition>-<n>").
fn consume(target: &Cluster, max: usize, isolation: &str) -> BTreeMap<i32, Vec<usize>> {
    let mut props = target.client_properties(target.default_listener(), None);
    props.push(("isolation.level".into(), isolation.into()));
    let lines = target
        .console_consume_with(
            TOPIC,
            max * PARTITIONS as usize,
            &props,
            &ConsumeOptions::default().timeout(Duration::from_secs(10)),
        )
        .unwrap();
    let mut out: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for line in lines {
        let (p, n) = line.split_once('-').expect("a numbered record");
        out.entry(p.parse().unwrap())
            .or_default()
            .push(n.parse().unwrap());
    }
    out
}
