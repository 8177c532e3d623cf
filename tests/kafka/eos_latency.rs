//! Exactly-once latency against at-least-once, in the same run (issue #33 item 2).
//!
//! Two mirrors of one source topic run side by side on the same clusters and the same machine:
//! one at least once (into `clicks`), one exactly once (into `src.clicks`, `rename = "prefix"`),
//! while a producer writes `ROUND` records to every partition every `TICK`, each round stamped
//! with the producer's wall clock. A reader per target topic fetches without a break (the
//! exactly-once one `read_committed`: a record counts once its transaction commits) and takes
//! each record's latency: when it was read minus its timestamp (the mirror keeps timestamps).
//! Records of the first `WARMUP` (topic creation, the transactional ids' initialization, the
//! first start positions) do not count.
//!
//! Asserts the exactly-once p50 stays within a generous bound of the at-least-once one measured
//! in the same run: `p50(eos) <= 3 x p50(alo) + transaction_interval`. A ratio, not an absolute
//! time: a loaded machine slows both mirrors alike. Before the fix of issue #33 item 2 (a
//! route's AddPartitionsToTxn waited out CONCURRENT_TRANSACTIONS with the 100 ms..1 s backoff
//! after each commit, its AddOffsetsToTxn sat in the commit), the exactly-once p50 was several
//! times that bound. Every record must also arrive, exactly once on the exactly-once side.
//!
//! Run: `cargo build -p strait && cargo test -p strait-e2e --test kafka -- eos_latency:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use strait_forward::{FetchedBatch, FetchedRecords};
use strait_testkit::AdminOp;
use strait_wire::{FetchOptions, FetchPartition, Isolation, TopicPartition};

const TOPIC: &str = "clicks";
const PARTITIONS: i32 = 6;
/// Records per partition per round, and a round every `TICK`: 1,200 records/s in all.
const ROUND: usize = 10;
const TICK: Duration = Duration::from_millis(50);
/// Not measured: the mirrors' start.
const WARMUP: Duration = Duration::from_secs(10);
/// Measured after the warm-up.
const MEASURED: Duration = Duration::from_secs(20);
/// The exactly-once mirror's `transaction_interval` (the default).
const INTERVAL: Duration = Duration::from_millis(300);

#[test]
fn exactly_once_latency_stays_within_a_bound_of_at_least_once() {
    let (source, target) = clusters("eos-latency");
    source
        .admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let alo = write_config(
        dir.path(),
        "alo",
        &source,
        &target,
        TOPIC,
        "latency-alo",
        "",
    );
    let eos = write_config(
        dir.path(),
        "eos",
        &source,
        &target,
        TOPIC,
        "latency-eos",
        &format!(
            "exactly_once = true\ntransaction_interval = \"{}ms\"\nrename = \"prefix\"\n",
            INTERVAL.as_millis()
        ),
    );
    let (_alo, alo_log) = spawn_timed(&alo);
    let (_eos, eos_log) = spawn_timed(&eos);

    let stop = AtomicBool::new(false);
    let rounds = AtomicUsize::new(0);
    let started = now_ms();
    let measure_from = started + WARMUP.as_millis() as i64;
    let (alo_latencies, eos_latencies) = std::thread::scope(|scope| {
        let read = |topic: &'static str, isolation: Isolation| {
            let (stop, rounds, target) = (&stop, &rounds, &target);
            scope.spawn(move || read_latencies(target, topic, isolation, measure_from, stop, rounds))
        };
        let alo_reader = read(TOPIC, Isolation::ReadUncommitted);
        let eos_reader = read("src.clicks", Isolation::ReadCommitted);
        let producer = scope.spawn(|| {
            let rt = runtime();
            let c = rt.block_on(client(&source));
            let end = Instant::now() + WARMUP + MEASURED;
            let mut next = Instant::now();
            while Instant::now() < end {
                let n = rounds.load(Ordering::Acquire);
                rt.block_on(produce_numbered(
                    &c,
                    TOPIC,
                    0..PARTITIONS,
                    n * ROUND..(n + 1) * ROUND,
                ));
                rounds.store(n + 1, Ordering::Release);
                next += TICK;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        producer.join().expect("the source producer");
        stop.store(true, Ordering::Release);
        (
            alo_reader.join().expect("the at-least-once reader"),
            eos_reader.join().expect("the exactly-once reader"),
        )
    });
    let total = rounds.load(Ordering::Acquire) * ROUND * PARTITIONS as usize;
    let (alo_p50, eos_p50) = (p50(&alo_latencies.0), p50(&eos_latencies.0));
    eprintln!(
        "latency p50: at-least-once {alo_p50} ms ({} records measured, p99 {} ms), exactly-once \
         {eos_p50} ms ({} records measured, p99 {} ms); {total} records produced",
        alo_latencies.0.len(),
        p99(&alo_latencies.0),
        eos_latencies.0.len(),
        p99(&eos_latencies.0),
    );
    eprintln!("exactly-once transactions: {}", timings(&eos_log));
    assert_eq!(
        alo_latencies.1, total,
        "the at-least-once target must hold every record (log: {})",
        alo_log.display()
    );
    assert_eq!(
        eos_latencies.1,
        total,
        "the exactly-once target must hold every record once (log: {})",
        eos_log.display()
    );
    assert!(
        !alo_latencies.0.is_empty() && !eos_latencies.0.is_empty(),
        "records produced after the warm-up must be measured"
    );
    let bound = 3 * alo_p50 + INTERVAL.as_millis() as i64;
    assert!(
        eos_p50 <= bound,
        "exactly-once p50 {eos_p50} ms exceeds 3 x at-least-once p50 ({alo_p50} ms) + \
         transaction_interval ({} ms) = {bound} ms (log: {})",
        INTERVAL.as_millis(),
        eos_log.display()
    );
}

/// `strait run --config <config>`, logging each transaction's timings (`transaction committed`:
/// add, open, drain and commit in ms) to `<config>.log`: where the time went when it fails.
fn spawn_timed(config: &std::path::Path) -> (StraitProcess, std::path::PathBuf) {
    let log = config.with_extension("log");
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(config);
    cmd.command()
        .env("RUST_LOG", "info,strait_forward::pipeline::partition=debug,strait_wire::txn_producer=trace,strait_wire::group::coordinator=debug")
        .stdout(std::process::Stdio::null())
        .stderr(file);
    (cmd.spawn(), log)
}

/// The median of each timing the `transaction committed` lines of `log` carry, and how many
/// transactions there were.
fn timings(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("transaction committed"))
        .collect();
    let median = |key: &str| {
        let mut v: Vec<f64> = lines
            .iter()
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.parse::<f64>().ok())
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    // Each transaction request's time (retries included) and the coordinator's retried errors.
    let mut apis: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut retried: std::collections::BTreeMap<String, usize> = Default::default();
    for l in text.lines() {
        let field = |key: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .map(|v| v.trim_matches('"').to_owned())
        };
        if l.contains("transaction request answered")
            && let (Some(api), Some(ms)) = (field("api="), field("ms="))
        {
            apis.entry(api)
                .or_default()
                .push(ms.parse().unwrap_or(f64::NAN));
        } else if l.contains("retrying on the coordinator")
            && let Some(api) = field("api=")
        {
            let code = l
                .split_whitespace()
                .find(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_') && w.len() > 8)
                .unwrap_or("?");
            *retried.entry(format!("{api} {code}")).or_default() += 1;
        }
    }
    let per_api: Vec<String> = apis
        .iter_mut()
        .map(|(api, v)| {
            v.sort_by(f64::total_cmp);
            format!("{api} x{} median {:.1} ms", v.len(), v[v.len() / 2])
        })
        .collect();
    format!(
        "{} committed; median add {:.1} ms, open {:.1} ms, drain {:.1} ms, commit {:.1} ms; \
         requests: {}; retried on the coordinator: {retried:?}",
        lines.len(),
        median("add_ms="),
        median("open_ms="),
        median("drain_ms="),
        median("commit_ms="),
        per_api.join(", "),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Reads `topic` on `target` from the beginning until `stop` is set and every record of the
/// `rounds` produced arrived (or two minutes after `stop`). Returns the latency in ms of each
/// distinct record produced at `measure_from` or later, and how many distinct records arrived.
fn read_latencies(
    target: &strait_testkit::Cluster,
    topic: &str,
    isolation: Isolation,
    measure_from: i64,
    stop: &AtomicBool,
    rounds: &AtomicUsize,
) -> (Vec<i64>, usize) {
    let rt = runtime();
    let c = rt.block_on(client(target));
    let options = FetchOptions {
        isolation,
        max_wait: Duration::from_millis(20),
        ..FetchOptions::default()
    };
    let mut offsets = vec![0i64; PARTITIONS as usize];
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut latencies = Vec::new();
    let mut deadline: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Acquire) {
            let expected = rounds.load(Ordering::Acquire) * ROUND * PARTITIONS as usize;
            if seen.len() >= expected {
                break;
            }
            let at = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(120));
            if Instant::now() > at {
                break;
            }
        }
        let asked: Vec<FetchPartition> = (0..PARTITIONS)
            .map(|p| {
                FetchPartition::new(TopicPartition::new(topic, p).unwrap(), offsets[p as usize])
                    .with_max_bytes(1 << 20)
            })
            .collect();
        // The mirror creates the topic: until then (and on any hiccup) ask again.
        let Ok(answers) = rt.block_on(c.fetch(&asked, &options)) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let read_at = now_ms();
        for (p, answer) in answers.into_iter().enumerate() {
            if answer.check(None).is_err() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            for item in FetchedRecords::new(answer.records) {
                // A partial batch at the end of the answer comes whole next time.
                let Ok(FetchedBatch::V2(batch)) = item else {
                    break;
                };
                if batch.next_offset() <= offsets[p] {
                    continue;
                }
                if !batch.is_control() {
                    let decoded = batch.decode_records(64 << 20).unwrap();
                    for record in decoded.iter() {
                        let record = record.unwrap();
                        if batch.record_offset(&record) < offsets[p] {
                            continue;
                        }
                        let value = String::from_utf8_lossy(record.value().unwrap_or_default())
                            .into_owned();
                        let timestamp = batch.record_timestamp(&record);
                        if seen.insert(value) && timestamp >= measure_from {
                            latencies.push(read_at - timestamp);
                        }
                    }
                }
                offsets[p] = batch.next_offset();
            }
        }
    }
    (latencies, seen.len())
}

fn percentile(latencies: &[i64], q: f64) -> i64 {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    sorted
        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(i64::MAX)
}

fn p50(latencies: &[i64]) -> i64 {
    percentile(latencies, 0.5)
}

fn p99(latencies: &[i64]) -> i64 {
    percentile(latencies, 0.99)
}
