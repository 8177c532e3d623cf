//! Exactly-once latency against at-least-once, in the same run (issue #33 item 2).
//!
//! Two mirrors of one source topic run side by side on the same clusters and the same machine:
//! one at least once (into `clicks`), one exactly once (into `src.clicks`, `rename = "prefix"`),
//! while a producer writes `ROUND` records to every partition every `TICK`, each round stamped
//! with the producer's wall clock. A reader per target topic fetches without a break (the
//! exactly-once one `read_committed`: a record counts once its transaction commits) and takes
//! each record's latency: when it was read minus its timestamp (the mirror keeps timestamps).
//! Measuring starts `SETTLE` after both mirrors delivered a record of every partition: their
//! start (on a fresh target, creating `__transaction_state` and `__consumer_offsets`, one
//! InitProducerId per partition) is not what is measured. Every record counts for completeness.
//!
//! Asserts the exactly-once p50 stays within a generous bound of the at-least-once one measured
//! in the same run: `p50(eos) <= 3 x p50(alo) + 2 x transaction_interval` (a record waits up to
//! an interval for its transaction to be due, then for the commit's round trips, which a loaded
//! broker slows as it slows the at-least-once path). A ratio, not an absolute time. Before the
//! fixes of issue #33 item 2 the exactly-once p50 was 11-15x the at-least-once one on a loaded
//! 2-core machine (4.4-11.2 s against 0.4-0.8 s) and failed this bound, after them 4.3x
//! (744 vs 174 ms) and passed; on a quiet machine both pass (+170-180 ms, the interval;
//! docs/exactly-once.md, "Where the time goes"). Every record must also arrive, exactly once on the exactly-once side. The
//! output has each transaction's timings (add, open, drain, commit) and each request's.
//!
//! Run: `cargo build -p strait && cargo test -p strait-e2e --test kafka -- eos_latency:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
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
/// Between both mirrors delivering on every partition and the first measured record.
const SETTLE: Duration = Duration::from_secs(3);
/// The longest the mirrors may take to start.
const START_LIMIT: Duration = Duration::from_secs(120);
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
    // 0 until both mirrors deliver on every partition; then when measuring starts.
    let measure_from = AtomicI64::new(0);
    // Readers delivering on every partition.
    let delivering = AtomicUsize::new(0);
    let (alo_latencies, eos_latencies) = std::thread::scope(|scope| {
        let read = |topic: &'static str, isolation: Isolation| {
            let (stop, rounds, target) = (&stop, &rounds, &target);
            let (measure_from, delivering) = (&measure_from, &delivering);
            scope.spawn(move || {
                let reader = Reader {
                    measure_from,
                    delivering,
                    stop,
                    rounds,
                };
                read_latencies(target, topic, isolation, &reader)
            })
        };
        let alo_reader = read(TOPIC, Isolation::ReadUncommitted);
        let eos_reader = read("src.clicks", Isolation::ReadCommitted);
        let producer = scope.spawn(|| {
            let rt = runtime();
            let c = rt.block_on(client(&source));
            let start_limit = Instant::now() + START_LIMIT;
            let mut end: Option<Instant> = None;
            let mut next = Instant::now();
            while end.is_none_or(|end| Instant::now() < end) {
                if end.is_none() && delivering.load(Ordering::Acquire) == 2 {
                    measure_from.store(now_ms() + SETTLE.as_millis() as i64, Ordering::Release);
                    end = Some(Instant::now() + SETTLE + MEASURED);
                }
                if end.is_none() && Instant::now() > start_limit {
                    break;
                }
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
        alo_latencies.1,
        total,
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
        "both mirrors must deliver on every partition within {START_LIMIT:?} (logs: {}, {})",
        alo_log.display(),
        eos_log.display()
    );
    let bound = 3 * alo_p50 + 2 * INTERVAL.as_millis() as i64;
    assert!(
        eos_p50 <= bound,
        "exactly-once p50 {eos_p50} ms exceeds 3 x at-least-once p50 ({alo_p50} ms) + 2 x \
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

/// What a reader shares with the producer.
struct Reader<'a> {
    /// When measuring starts (ms since the epoch; 0: not yet).
    measure_from: &'a AtomicI64,
    /// Counts the readers that got a record of every partition.
    delivering: &'a AtomicUsize,
    /// The producer is done.
    stop: &'a AtomicBool,
    /// Rounds produced.
    rounds: &'a AtomicUsize,
}

/// Reads `topic` on `target` from the beginning until the producer stopped and every record of
/// the rounds produced arrived (or two minutes after it stopped). Returns the latency in ms of
/// each distinct record produced once measuring started, and how many distinct records arrived.
fn read_latencies(
    target: &strait_testkit::Cluster,
    topic: &str,
    isolation: Isolation,
    shared: &Reader<'_>,
) -> (Vec<i64>, usize) {
    let Reader {
        measure_from,
        delivering,
        stop,
        rounds,
    } = *shared;
    let mut delivered = vec![false; PARTITIONS as usize];
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
                        let from = measure_from.load(Ordering::Acquire);
                        if seen.insert(value) && from > 0 && timestamp >= from {
                            latencies.push(read_at - timestamp);
                        }
                        if !delivered[p] {
                            delivered[p] = true;
                            if delivered.iter().all(|d| *d) {
                                delivering.fetch_add(1, Ordering::AcqRel);
                            }
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
