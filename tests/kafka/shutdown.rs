//! SIGTERM always ends `strait run` in bounded time: with batches in flight to a target that
//! has gone away (and a source that has gone too), the drain gives up after
//! `mirror.drain_timeout`, commits what it can, and the process exits; a second signal exits at
//! once with 128 + the signal's number. The first case runs on a one-worker runtime
//! (`[runtime] worker_threads = 1`): one thread still drains, gives up and exits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::Cluster;

fn signal(child: &std::process::Child, sig: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the process to exit; the exit status and how long it took.
fn wait_exit(
    child: &mut std::process::Child,
    limit: Duration,
) -> (std::process::ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "strait still running {limit:?} after the signal"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Mirrors a steady stream until the target is gone and batches are stuck in flight, then
/// hands the running process to `then`.
fn with_stuck_mirror(
    name: &str,
    drain: &str,
    workers: Option<usize>,
    then: impl FnOnce(&mut StraitProcess, &mut Cluster, &std::path::Path),
) {
    let (source, mut target) = clusters(name);
    let topic = format!("{name}-stream");
    source.create_topic(&topic, 3, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        name,
        &source,
        &target,
        &topic,
        &format!("{name}-mirror"),
        &match workers {
            Some(n) => format!("drain_timeout = \"{drain}\"\n[runtime]\nworker_threads = {n}"),
            None => format!("drain_timeout = \"{drain}\""),
        },
    );
    let (mut strait, log) = spawn_strait(&config, 0);
    wait_for_log(
        &log,
        "strait::run::mirror: assigned",
        Duration::from_secs(90),
    );
    if let Some(n) = workers {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            said.contains(&format!("runtime started worker_threads={n}")),
            "the runtime has the configured {n} worker(s); log:\n{said}"
        );
    }
    let mut source = source;
    std::thread::scope(|s| {
        // Records keep coming while the target goes away, so every partition has batches in
        // flight that nobody will acknowledge.
        let src = &source;
        let t = topic.clone();
        let producer = s.spawn(move || produce_monotonic(src, &t, 20_000, 2_000));
        std::thread::sleep(Duration::from_secs(3));
        for node in target.node_ids() {
            target.kill_node(node).unwrap();
        }
        producer.join().unwrap();
    });
    // Let the mirror fill its windows with batches it retries.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        strait.try_wait().unwrap().is_none(),
        "strait exited on its own: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    then(&mut strait, &mut source, &log);
}

#[test]
fn sigterm_with_both_clusters_gone_exits_within_the_drain_timeout() {
    with_stuck_mirror("term", "3s", Some(1), |strait, source, log| {
        for node in source.node_ids() {
            source.kill_node(node).unwrap();
        }
        signal(strait, "TERM");
        // drain_timeout (3 s) + the binary's grace for commit, leave and traces (10 s) + slack
        // for a loaded machine.
        let (status, took) = wait_exit(strait, Duration::from_secs(40));
        let said = std::fs::read_to_string(log).unwrap_or_default();
        eprintln!("exited with {status} {took:?} after SIGTERM");
        assert!(
            status.code() == Some(0) || status.code() == Some(3),
            "exit status {status} (0: drained, 3: shutdown deadline); log:\n{said}"
        );
        assert!(
            said.contains("did not drain within the drain timeout"),
            "the abandoned drain is reported; log:\n{said}"
        );
    });
}

#[test]
fn a_second_sigterm_exits_at_once() {
    with_stuck_mirror("term2", "120s", None, |strait, _source, log| {
        signal(strait, "TERM");
        // The first signal started a drain that could take two minutes; the second ends it.
        wait_for_log(log, "shutting down", Duration::from_secs(10));
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            strait.try_wait().unwrap().is_none(),
            "still draining after the first signal"
        );
        signal(strait, "TERM");
        let (status, took) = wait_exit(strait, Duration::from_secs(20));
        eprintln!("exited with {status} {took:?} after the second SIGTERM");
        assert_eq!(status.code(), Some(128 + 15), "128 + SIGTERM");
    });
}
