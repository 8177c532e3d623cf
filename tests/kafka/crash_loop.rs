//! A crash loop: `strait run` is SIGKILLed again and again, often before one commit interval
//! has passed, while a stream is produced. Each restart re-sends what its predecessor had
//! delivered since its last commit. The stated bound (docs/design.md, "Duplicates"): per
//! restart, at most what the target acknowledged in the last `commit_interval` before the crash
//! plus the batches in flight. Before a partition's first progress was committed at once, a
//! process living shorter than the interval never moved its position and every restart
//! re-sent everything again (duplicates grew without bound).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const PARTITIONS: i32 = 6;
const COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// How long before its kill an instance must have had records acknowledged to be expected to
/// have committed them (its first progress is committed at once, not after `COMMIT_INTERVAL`).
const COMMIT_MARGIN: Duration = Duration::from_millis(1_500);
/// Kafka's idempotence window: batches in flight per partition.
const MAX_IN_FLIGHT: i64 = 5;
/// More records than any batch of the producer below holds (2,000 records/s over 6 partitions,
/// linger.ms=5: about 10).
const RECORDS_PER_BATCH_BOUND: i64 = 25;

#[test]
fn restarts_faster_than_the_commit_interval_keep_duplicates_bounded() {
    let (source, target) = clusters("loop");
    let topic = "loop-stream";
    source.create_topic(topic, PARTITIONS, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "loop",
        &source,
        &target,
        topic,
        "loop-mirror",
        // Static membership: a restarted instance gets its partitions back at once, so the
        // loop is as fast as the process starts.
        "instance_id = \"loop-1\"",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "commit_interval = \"200ms\"",
        &format!("commit_interval = \"{}s\"", COMMIT_INTERVAL.as_secs()),
    );
    std::fs::write(&config, text).unwrap();

    let rt = runtime();
    let dst = rt.block_on(client(&target));
    // What the target holds over time (duplicates included), to state the bound per crash.
    let arrivals: Arc<Mutex<Vec<(Instant, i64)>>> = Arc::default();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (arrivals, sampling, dst) = (arrivals.clone(), sampling.clone(), dst.clone());
        rt.spawn(async move {
            while sampling.load(Ordering::Acquire) {
                let tps: Vec<_> = (0..PARTITIONS)
                    .map(|p| {
                        (
                            strait_wire::TopicPartition::new(topic, p).unwrap(),
                            strait_wire::OffsetSpec::Latest,
                        )
                    })
                    .collect();
                if let Ok(ends) = dst
                    .list_offsets(&tps, strait_wire::Isolation::ReadUncommitted)
                    .await
                {
                    let total = ends.iter().map(|l| l.offset.unwrap_or(0)).sum();
                    arrivals.lock().unwrap().push((Instant::now(), total));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Lifetimes after the first delivery, all shorter than the commit interval.
    let lifetimes_ms = [1_700u64, 2_000, 3_000, 1_800, 2_300, 3_800, 1_600];
    // 60 s of stream at 2,000 records/s: every instance finds records to deliver, even when a
    // loaded machine makes the restarts slow.
    let total = 120_000u64;
    let offsets =
        strait_wire::offset_commit::GroupOffsets::new(&rt.block_on(client(&source)), "loop-mirror");
    let all: Vec<strait_wire::TopicPartition> = (0..PARTITIONS)
        .map(|p| strait_wire::TopicPartition::new(topic, p).unwrap())
        .collect();
    let committed = || -> i64 {
        rt.block_on(offsets.fetch(&all))
            .unwrap()
            .values()
            .map(|c| c.as_ref().map_or(0, |c| c.offset))
            .sum()
    };
    let latest = |arrivals: &Mutex<Vec<(Instant, i64)>>| {
        arrivals.lock().unwrap().last().map_or(0, |(_, n)| *n)
    };
    let (lives, commits): (Vec<(Instant, Instant)>, Vec<i64>) = std::thread::scope(|s| {
        let src = &source;
        let producer = s.spawn(move || produce_monotonic(src, topic, total, 2_000));
        let mut kills = Vec::new();
        let mut commits = vec![committed()];
        for (n, life) in lifetimes_ms.iter().enumerate() {
            let (mut strait, log) = spawn_strait(&config, n);
            wait_for_log(
                &log,
                "strait::run::mirror: assigned",
                Duration::from_secs(60),
            );
            // Its life counts from its first record on the target, not from the assignment:
            // on a loaded machine the way from the assignment to the first acknowledgement
            // took longer than some lifetimes, and an instance that never delivered says
            // nothing about the commit policy.
            let assigned = Instant::now();
            let before = latest(&arrivals);
            let deadline = assigned + Duration::from_secs(60);
            while latest(&arrivals) <= before {
                assert!(
                    Instant::now() < deadline,
                    "instance {n} delivered nothing within 60 s of its assignment"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(*life));
            strait.kill().unwrap(); // SIGKILL
            strait.wait().unwrap();
            kills.push((assigned, Instant::now()));
            commits.push(committed());
        }
        producer.join().expect("producer thread");
        (kills, commits)
    });

    let (mut last, log) = spawn_strait(&config, 99);
    let (src_values, dst_values) = rt.block_on(async {
        let src = client(&source).await;
        let expected = end_offsets(&src, topic, PARTITIONS).await;
        wait_until_committed(
            &src,
            "loop-mirror",
            topic,
            &expected,
            Duration::from_secs(180),
        )
        .await;
        (
            read_all(&src, topic, PARTITIONS).await,
            read_all(&dst, topic, PARTITIONS).await,
        )
    });
    sampling.store(false, Ordering::Release);
    rt.block_on(sampler).unwrap();
    let status = terminate(&mut last);
    assert!(
        status.success(),
        "strait exited with {status}; log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let mut duplicates = 0i64;
    for p in 0..PARTITIONS {
        duplicates +=
            assert_complete_in_order(&src_values[&p], &dst_values[&p], &format!("partition {p}"))
                as i64;
    }

    // The bound, crash by crash: what reached the target in the commit interval before the
    // crash (plus a second for the commit's own round trip and the sampling period), and the
    // batches in flight.
    let arrivals = arrivals.lock().unwrap().clone();
    let at = |t: Instant| {
        arrivals
            .iter()
            .take_while(|(when, _)| *when <= t)
            .last()
            .map_or(0, |(_, n)| *n)
    };
    // Every instance that got records acknowledged in time to commit them (at least 1.5 s
    // before the kill: the committer waits 200 ms, then the commit's round trip, which took
    // more than the 400 ms once allowed here on a loaded machine) moved the committed position,
    // although each lived shorter than one commit interval: its first progress was committed
    // at once. The interval (5 s) is far from that 1.5 s, so a commit that waited for it
    // cannot pass for one made at once.
    for (n, (assigned, killed)) in lives.iter().enumerate() {
        let delivered_early = at(*killed - COMMIT_MARGIN) > at(*assigned);
        eprintln!(
            "instance {n}: lived {} ms, delivered before its last 1.5 s: {delivered_early}, \
             committed {} -> {}",
            lifetimes_ms[n],
            commits[n],
            commits[n + 1]
        );
        if delivered_early {
            assert!(
                commits[n + 1] > commits[n],
                "instance {n} (lived {} ms after its first delivery) committed nothing: {commits:?}",
                lifetimes_ms[n]
            );
        }
    }
    assert!(
        lives
            .iter()
            .filter(|(a, k)| at(*k - COMMIT_MARGIN) > at(*a))
            .count()
            >= 4,
        "too few instances delivered anything to judge the commit policy"
    );
    let kills: Vec<Instant> = lives.iter().map(|(_, k)| *k).collect();
    let in_flight = i64::from(PARTITIONS) * MAX_IN_FLIGHT * RECORDS_PER_BATCH_BOUND;
    let per_crash: Vec<i64> = kills
        .iter()
        .map(|&k| {
            let window_start = k
                .checked_sub(COMMIT_INTERVAL + Duration::from_secs(1))
                .unwrap_or(k);
            at(k + Duration::from_millis(200)) - at(window_start) + in_flight
        })
        .collect();
    let bound: i64 = per_crash.iter().sum();
    eprintln!(
        "{total} records, {} SIGKILLs: {duplicates} duplicates ({:.1} per restart); bound {bound} \
         (per crash: {per_crash:?})",
        kills.len(),
        duplicates as f64 / kills.len() as f64
    );
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates exceed the stated bound {bound}"
    );
}
