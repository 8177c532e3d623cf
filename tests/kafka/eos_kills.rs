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
//! Run: `cargo test -p strait-e2e --test kafka -- eos_kills:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use strait_testkit::{AdminOp, Cluster};
use strait_wire::TopicPartition;

const TOPIC: &str = "payments";
const PARTITIONS: i32 = 6;
const MIRROR_GROUP: &str = "strait-eos";
/// Records per partition per producer round.
const ROUND: usize = 40;

/// Two clusters with the topic, clients on both, and mirror configs in a temporary directory.
struct Setup {
    source: Cluster,
    target: Cluster,
    rt: tokio::runtime::Runtime,
    src: strait_wire::Client,
    dst: strait_wire::Client,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(prefix: &str) -> Setup {
        let (source, target) = clusters(prefix);
        for c in [&source, &target] {
            c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
        }
        let rt = runtime();
        let src = rt.block_on(client(&source));
        let dst = rt.block_on(client(&target));
        let dir = tempfile::tempdir().unwrap();
        Setup {
            source,
            target,
            rt,
            src,
            dst,
            dir,
        }
    }

    /// An exactly-once mirror config with static member id `instance`.
    fn config(&self, name: &str, instance: &str) -> std::path::PathBuf {
        write_config(
            self.dir.path(),
            name,
            &self.source,
            &self.target,
            TOPIC,
            MIRROR_GROUP,
            &format!(
                "exactly_once = true\ntransaction_interval = \"200ms\"\ninstance_id = \"{instance}\"\n"
            ),
        )
    }

    /// Runs `schedule` while a producer writes ROUND records per partition every 100 ms (on a
    /// client and runtime of its own); returns its result and the records per partition
    /// produced.
    fn while_streaming<R>(&self, schedule: impl FnOnce() -> R) -> (R, usize) {
        let stop = AtomicBool::new(false);
        let produced = AtomicUsize::new(0);
        let result = std::thread::scope(|scope| {
            let producer = scope.spawn(|| {
                let rt = runtime();
                let c = rt.block_on(client(&self.source));
                while !stop.load(Ordering::Acquire) {
                    let n = produced.load(Ordering::Acquire);
                    rt.block_on(produce_numbered(&c, TOPIC, 0..PARTITIONS, n..n + ROUND));
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

    /// Waits until the mirror stored the source's end offsets (`total` per partition) on the
    /// target, then asserts that a read_committed consumer reads every record once, in order.
    fn assert_exactly_once(&self, total: usize, log: &std::path::Path) {
        let ends = self.rt.block_on(end_offsets(&self.src, TOPIC, PARTITIONS));
        assert!(
            ends.iter().all(|e| *e == total as i64),
            "{ends:?} != {total}"
        );
        wait_for_positions(&self.rt, &self.dst, &partitions(), &ends, log);
        let committed = consume(&self.target, total, "read_committed");
        for p in 0..PARTITIONS {
            let got = committed.get(&p).cloned().unwrap_or_default();
            let missing = (0..total).filter(|n| !got.contains(n)).count();
            let duplicates = got.len() + missing - total;
            assert_eq!(
                got,
                (0..total).collect::<Vec<_>>(),
                "partition {p}: the read_committed target must hold every source record once, \
                 in order ({missing} missing, {duplicates} duplicates)"
            );
        }
    }
}

#[test]
fn sigkills_and_rebalances_leave_every_record_exactly_once() {
    let s = Setup::new("eos");
    let (first, second) = (s.config("first", "eos-0"), s.config("second", "eos-1"));
    let ((mut a, log), total) =
        s.while_streaming(|| kill_and_rebalance(&s.rt, &s.dst, &first, &second));
    s.assert_exactly_once(total, &log);
    assert_eq!(terminate(&mut a).code(), Some(0));
    drop(a);
    let uncommitted: usize = consume(&s.target, total * 2, "read_uncommitted")
        .values()
        .map(Vec::len)
        .sum();
    let aborted = uncommitted - total * PARTITIONS as usize;
    println!(
        "{total} records per partition, {PARTITIONS} partitions: 0 missing, 0 duplicates \
         read_committed; {aborted} records of aborted transactions in the target log"
    );
    assert!(
        aborted > 0,
        "the kills hit no open transaction: the scenario did not happen"
    );
}

#[test]
fn a_paused_instance_resumed_after_a_takeover_commits_nothing() {
    let s = Setup::new("zombie");
    let (zombie_config, heir_config) = (s.config("zombie", "z-0"), s.config("heir", "z-1"));
    let ((mut zombie, zombie_log, mut heir, heir_log), total) = s.while_streaming(|| {
        let tps = partitions();
        let (zombie, zombie_log) = spawn_strait(&zombie_config, 0);
        let positions = wait_for_group_progress(
            &s.rt,
            &s.dst,
            MIRROR_GROUP,
            &tps,
            &vec![0; tps.len()],
            &zombie_log,
        );
        // Paused mid-stream, with transactions open: the group gives every partition to the
        // heir after the session timeout, and its initializations fence the zombie.
        signal(&zombie, "-STOP");
        let (heir, heir_log) = spawn_strait(&heir_config, 1);
        let positions =
            wait_for_group_progress(&s.rt, &s.dst, MIRROR_GROUP, &tps, &positions, &heir_log);
        signal(&zombie, "-CONT");
        // The zombie wakes up to a group that moved on; the heir keeps mirroring.
        wait_for_log(&zombie_log, "revoked", Duration::from_secs(60));
        wait_for_group_progress(&s.rt, &s.dst, MIRROR_GROUP, &tps, &positions, &heir_log);
        (zombie, zombie_log, heir, heir_log)
    });
    s.assert_exactly_once(total, &heir_log);
    assert_eq!(terminate(&mut heir).code(), Some(0));
    assert_eq!(terminate(&mut zombie).code(), Some(0));
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
    let mut positions =
        wait_for_group_progress(rt, dst, MIRROR_GROUP, &tps, &vec![0; tps.len()], &log);
    for _ in 0..3 {
        // Mid-stream: transactions are open with batches in them.
        positions = wait_for_group_progress(rt, dst, MIRROR_GROUP, &tps, &positions, &log);
        a.kill().unwrap();
        let _ = a.wait();
        run += 1;
        (a, log) = spawn_strait(first, run);
    }
    // A second instance joins: half the partitions move to it.
    let (mut b, b_log) = spawn_strait(second, 100);
    wait_for_log(&b_log, "assigned", Duration::from_secs(60));
    positions = wait_for_group_progress(rt, dst, MIRROR_GROUP, &tps, &positions, &b_log);
    positions = wait_for_group_progress(rt, dst, MIRROR_GROUP, &tps, &positions, &log);
    b.kill().unwrap();
    let _ = b.wait();
    // Its partitions come back to the first one after the session timeout.
    wait_for_group_progress(rt, dst, MIRROR_GROUP, &tps, &positions, &log);
    (a, log)
}

/// Waits until the stored positions are `ends`.
fn wait_for_positions(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    tps: &[TopicPartition],
    ends: &[i64],
    log: &std::path::Path,
) {
    let what = format!("the stored positions reaching {ends:?}");
    wait_for_group_offsets(rt, dst, MIRROR_GROUP, tps, &what, log, |now| now == ends);
}

/// What Kafka's console consumer reads from the target at `isolation`, per partition, as the
/// numbers produce_numbered wrote ("<partition>-<n>").
fn consume(target: &Cluster, max: usize, isolation: &str) -> BTreeMap<i32, Vec<usize>> {
    common::consume_numbered(target, TOPIC, max * PARTITIONS as usize, isolation)
}
