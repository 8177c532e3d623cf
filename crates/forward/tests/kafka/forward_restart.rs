//! At-least-once across abrupt stops: a `Forwarder` mirrors a stream that is still being written
//! while it is stopped without `shutdown()` several times (the forwarder dropped mid-stream, or
//! its whole tokio runtime torn down with everything in flight) and restarted from the positions
//! it committed. Every source record must end up on the target, in order; duplicates may appear
//! only as re-sent stretches after a restart (at most one per stop), and their number is
//! reported.
//!
//! (Killing the `strait` process with SIGKILL is covered by the binary's own crash test.)
//!
//! Run: `cargo test -p strait-forward --test kafka -- forward_restart:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use broker::*;
use strait_forward::{Compression, Forwarder, Route, Settings, WireForwarder};
use strait_testkit::Cluster;
use strait_wire::admin::NewTopic;
use strait_wire::{ProduceBatch, ProduceOptions};

const TOPIC: &str = "stream";
const PARTITIONS: i32 = 3;
const GROUP: &str = "strait-forward-restart";
const STOPS: usize = 6;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn settings() -> Settings {
    let mut s = Settings::default();
    s.commit_interval = Duration::from_millis(250);
    s.fetch_max_wait = Duration::from_millis(100);
    s.retry_backoff = Duration::from_millis(100);
    s.retry_backoff_max = Duration::from_secs(1);
    s.partition_fetch_bytes = 16 << 10;
    s
}

/// Starts a forwarder on its own runtime, mirroring every partition from its committed position.
fn start(source: &Cluster, target: &Cluster) -> (tokio::runtime::Runtime, Arc<WireForwarder>) {
    let rt = runtime();
    let fwd = rt.block_on(async {
        let fwd = Arc::new(
            Forwarder::builder()
                .source(config(source))
                .target(config(target))
                .group_id(GROUP)
                .settings(settings())
                .build()
                .await
                .unwrap(),
        );
        let routes = (0..PARTITIONS)
            .map(|p| Route {
                source: tp(TOPIC, p),
                target: tp(TOPIC, p),
            })
            .collect();
        fwd.assign(routes).await.unwrap();
        fwd
    });
    (rt, fwd)
}

#[test]
fn abrupt_stops_and_restarts_lose_nothing_and_keep_order() {
    let began = Instant::now();
    let (source, target) = clusters("fwd-restart");
    let driver = runtime();
    let (src, dst) = driver.block_on(async {
        let (src, dst) = (client(&source).await, client(&target).await);
        create_topics(&src, &[NewTopic::new(TOPIC, PARTITIONS, 1)]).await;
        create_topics(&dst, &[NewTopic::new(TOPIC, PARTITIONS, 1)]).await;
        (src, dst)
    });

    // The stream: every 20 ms one batch per partition, codecs rotating, unique values.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (src, producing) = (src.clone(), producing.clone());
        driver.spawn(async move {
            let mut n = 0usize;
            while producing.load(Ordering::Acquire) {
                let batches = (0..PARTITIONS)
                    .map(|p| {
                        let records: Vec<Rec> = (0..1 + n % 9)
                            .map(|i| Rec::value(&format!("p{p}-{n}-{i}"), now_ms()))
                            .collect();
                        ProduceBatch::new(
                            tp(TOPIC, p),
                            build_batch(&records, Compression::ALL[n % 5]),
                        )
                    })
                    .collect();
                for r in src
                    .produce(batches, &ProduceOptions::default())
                    .await
                    .unwrap()
                {
                    r.outcome.unwrap();
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };

    for stop in 0..STOPS {
        let (rt, fwd) = start(&source, &target);
        // Let it mirror for a while (commits every 250 ms), then stop it without shutdown.
        std::thread::sleep(Duration::from_millis(900 + 350 * (stop as u64 % 3)));
        let acked = fwd.acknowledged_positions();
        if stop % 2 == 0 {
            // Dropped: its tasks are aborted, batches in flight abandoned, nothing committed.
            rt.block_on(async move { drop(fwd) });
            std::thread::sleep(Duration::from_millis(300));
            rt.shutdown_background();
        } else {
            // The runtime torn down under a live forwarder (the closest to a crash in-process).
            rt.shutdown_background();
            drop(fwd);
        }
        eprintln!("stop {stop}: positions acknowledged just before: {acked:?}");
    }
    producing.store(false, Ordering::Release);
    let batches = driver.block_on(producer).unwrap();

    // A last incarnation finishes the job and shuts down gracefully.
    let (rt, fwd) = start(&source, &target);
    let ends = driver.block_on(stable_ends(&src, TOPIC, PARTITIONS));
    let deadline = Instant::now() + PATIENCE;
    while !fwd
        .acknowledged_positions()
        .iter()
        .all(|(s, o)| *o == ends[s.partition() as usize])
    {
        assert!(
            Instant::now() < deadline,
            "not caught up: {:?} of {ends:?}",
            fwd.acknowledged_positions()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    rt.block_on(fwd.shutdown()).unwrap();
    assert!(fwd.failures().is_empty(), "{:?}", fwd.failures());
    drop(fwd);
    drop(rt);

    let mut total_duplicates = 0;
    let mut total = 0;
    for p in 0..PARTITIONS {
        let (want, got) = driver.block_on(async {
            (
                records(&src, &tp(TOPIC, p), 0).await,
                records(&dst, &tp(TOPIC, p), 0).await,
            )
        });
        let want: Vec<String> = want.iter().map(Rec::value_str).collect();
        let got: Vec<String> = got.iter().map(Rec::value_str).collect();
        let (duplicates, resends) = check_stretches(&want, &got, &format!("partition {p}"));
        assert!(
            resends <= STOPS,
            "partition {p}: {resends} re-sent stretches for {STOPS} stops"
        );
        eprintln!(
            "partition {p}: {} source records, {} on the target, {duplicates} duplicates in {resends} re-sent stretches",
            want.len(),
            got.len()
        );
        total_duplicates += duplicates;
        total += want.len();
    }
    eprintln!(
        "{batches} rounds, {total} records, {STOPS} abrupt stops: {total_duplicates} duplicates; {:.1} s",
        began.elapsed().as_secs_f64()
    );
}

/// `got` must be `want` with re-sent stretches: each target record is either the next source
/// record of the current stretch, or starts a re-send from an earlier source position (a
/// restart from a committed position); no source record may be skipped. Values are unique.
/// Returns (duplicates, re-sent stretches).
fn check_stretches(want: &[String], got: &[String], what: &str) -> (usize, usize) {
    let index: std::collections::HashMap<&str, usize> = want
        .iter()
        .enumerate()
        .map(|(i, v)| (v.as_str(), i))
        .collect();
    let (mut next, mut high, mut duplicates, mut resends) = (0usize, 0usize, 0usize, 0usize);
    for (i, v) in got.iter().enumerate() {
        let Some(&at) = index.get(v.as_str()) else {
            panic!("{what}: target record {i} ({v}) is not a source record")
        };
        if at != next {
            assert!(
                at < next,
                "{what}: target record {i} ({v}) skips source records {next}..{at}"
            );
            resends += 1;
        }
        if at < high {
            duplicates += 1;
        }
        next = at + 1;
        high = high.max(next);
        assert!(next == high || at < high, "{what}: gap");
    }
    assert_eq!(
        high,
        want.len(),
        "{what}: only {high} of {} source records arrived",
        want.len()
    );
    (duplicates, resends)
}
