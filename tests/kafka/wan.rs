//! `strait run` across a long link (issue 17): the mirror reaches the target cluster only through
//! the test kit's delay proxy (25 ms each way, 50 ms round trip; the target broker advertises the
//! proxy on its `WAN` listener), while a Java producer writes small batches (`linger.ms=0`) to
//! the source at 3,000 records/s, round-robin over 12 explicit partitions, for 45 s.
//!
//! Proves: every record arrives, in order per partition (source and target read back in full),
//! the mirror's traffic really crossed the proxy, and the mirror kept up. **Lag at the end of the
//! producing window** is defined as the records the source holds and the target does not at the
//! moment the producer has finished (every record acknowledged by the source, end offsets of
//! both clusters listed right then over their direct listeners), expressed in seconds of
//! production (records / 3,000 records/s); it must stay under [`MAX_LAG`].
//!
//! It prints the figures the closing note quotes: records per target batch and target
//! batches per Produce request (from `/metrics`: `strait_records_total`, `strait_batches_total`,
//! `strait_produce_request_seconds_count`), the forwarding rate, and the lag every 5 s.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- wan:: --nocapture`. `STRAIT_WAN_BIN=<path>` runs another
//! `strait` binary in the same setup (e.g. a build from before a change, for before/after figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{Cluster, Link};

const TOPIC: &str = "wan";
const PARTITIONS: i32 = 12;
/// Records per second of the source producer (spread evenly over the partitions).
const RATE: u64 = 3_000;
/// How long the producer writes.
const PRODUCE_SECONDS: u64 = 45;
/// One-way delay of the link between the mirror and the target.
const ONE_WAY: Duration = Duration::from_millis(25);
/// The most the target may be behind when the producer stops, in seconds of production.
const MAX_LAG: f64 = 5.0;

/// Kafka's own producer (`tests/java/PartitionProbe.java`): explicit partitions in turn, paced
/// at `RATE`, `linger.ms=0` so batches are as small as a latency-minded producer makes them.
fn producer(cluster: &Cluster, out: &Path) -> Proc {
    let args = [
        cluster.bootstrap(),
        TOPIC.to_string(),
        PARTITIONS.to_string(),
        RATE.to_string(),
        PRODUCE_SECONDS.to_string(),
        "linger.ms=0".to_string(),
    ];
    partition_probe(cluster, &args, out)
}

/// The counters the figures come from, summed over their labels.
#[derive(Clone, Copy, Debug, Default)]
struct Scrape {
    records: f64,
    batches: f64,
    requests: f64,
    request_seconds: f64,
    queue_seconds: f64,
    queue_count: f64,
    lag_records: f64,
    assigned: f64,
}

impl Scrape {
    fn take(metrics: SocketAddr) -> Option<Scrape> {
        let (_, text) = http_get(metrics, "/metrics")?;
        // `name` alone or `name{labels}`: every series of that name, summed.
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                .sum()
        };
        Some(Scrape {
            records: sum("strait_records_total"),
            batches: sum("strait_batches_total"),
            requests: sum("strait_produce_request_seconds_count"),
            request_seconds: sum("strait_produce_request_seconds_sum"),
            queue_seconds: sum("strait_produce_queue_seconds_sum"),
            queue_count: sum("strait_produce_queue_seconds_count"),
            lag_records: sum("strait_lag_records"),
            assigned: sum("strait_partitions_assigned"),
        })
    }

    /// Figures over the interval from `earlier` to `self`.
    fn report(&self, earlier: &Scrape, seconds: f64, what: &str) {
        let records = self.records - earlier.records;
        let batches = self.batches - earlier.batches;
        let requests = self.requests - earlier.requests;
        if records <= 0.0 {
            eprintln!("wan: {what}: nothing forwarded");
            return;
        }
        let per = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        eprintln!(
            "wan: {what}: {records:.0} records forwarded in {seconds:.1} s = {:.0} records/s; \
             {:.2} records per target batch, {:.2} batches per Produce request, \
             {:.1} ms per Produce request, {:.1} ms average wait for a request slot",
            per(records, seconds),
            per(records, batches),
            per(batches, requests),
            1000.0 * per(self.request_seconds - earlier.request_seconds, requests),
            1000.0
                * per(
                    self.queue_seconds - earlier.queue_seconds,
                    self.queue_count - earlier.queue_count
                ),
        );
    }
}

/// `strait run --config <config>` (or `STRAIT_WAN_BIN run ...`), killed when the guard drops.
fn spawn_mirror(config: &Path) -> (Proc, PathBuf) {
    let bin = std::env::var_os("STRAIT_WAN_BIN").map_or_else(common::strait_bin, PathBuf::from);
    eprintln!("wan: mirror binary {}", bin.display());
    let log = config.with_extension("log");
    let child = Command::new(&bin)
        .args(["run", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    (Proc::new(child), log)
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn keeps_up_with_small_batches_over_a_50ms_round_trip() {
    let began = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let src_thread = std::thread::spawn(|| Cluster::builder("wan-src").start().expect("source"));
    let dst = Cluster::builder("wan-dst")
        .wan(Link::delay(ONE_WAY))
        .start()
        .expect("target");
    let src = src_thread.join().unwrap();
    src.create_topic(TOPIC, PARTITIONS, 1, &[]).unwrap();
    let wan_bootstrap = dst.wan_bootstrap().expect("the target has a WAN listener");

    let metrics = free_port();
    let config = dir.path().join("wan.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{}\"\n\n\
             [target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{wan_bootstrap}\"\n\n\
             [mirror]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"wan-mirror\"\nstart = \"earliest\"\n\
             refresh_interval = \"1s\"\ncommit_interval = \"1s\"\nsession_timeout = \"10s\"\n\n\
             [metrics]\nlisten = \"{metrics}\"\nlag_interval = \"1s\"\n",
            src.bootstrap()
        ),
    )
    .unwrap();
    let (mut strait, log) = spawn_mirror(&config);
    let log_tail = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };

    // Mirroring all 12 partitions (the target topic created through the proxy) before producing.
    let deadline = Instant::now() + Duration::from_secs(120);
    let at_start = loop {
        if let Some(s) = Scrape::take(metrics).filter(|s| s.assigned >= PARTITIONS as f64) {
            break s;
        }
        if let Ok(Some(status)) = strait.0.try_wait() {
            panic!("strait exited ({status}):\n{}", log_tail());
        }
        assert!(
            Instant::now() < deadline,
            "strait did not take its 12 partitions within 120 s:\n{}",
            log_tail()
        );
        std::thread::sleep(Duration::from_millis(250));
    };

    let rt = runtime();
    let (src_client, dst_client) = rt.block_on(async { (client(&src).await, client(&dst).await) });
    let out = dir.path().join("producer.out");
    let produce_began = Instant::now();
    let mut java = producer(&src, &out);
    // The lag every 5 s while producing, to show whether it is bounded or growing.
    let mut next_sample = produce_began + Duration::from_secs(5);
    let producer_limit = Duration::from_secs(PRODUCE_SECONDS + 90);
    let status = loop {
        if let Some(status) = java.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            produce_began.elapsed() < producer_limit,
            "the Java producer did not finish within {producer_limit:?}"
        );
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(5);
            let (s, d) = rt.block_on(async {
                (
                    end_offsets(&src_client, TOPIC, PARTITIONS).await,
                    end_offsets(&dst_client, TOPIC, PARTITIONS).await,
                )
            });
            let behind: i64 = s.iter().zip(&d).map(|(a, b)| a - b).sum();
            eprintln!(
                "wan: t={:>4.1} s: source {} target {} behind {behind} records ({:.1} s of production)",
                produce_began.elapsed().as_secs_f64(),
                s.iter().sum::<i64>(),
                d.iter().sum::<i64>(),
                behind as f64 / RATE as f64
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The producer has flushed and closed: the source holds every record. Sample both sides now.
    let window = produce_began.elapsed().as_secs_f64();
    let (source_ends, target_ends) = rt.block_on(async {
        (
            end_offsets(&src_client, TOPIC, PARTITIONS).await,
            end_offsets(&dst_client, TOPIC, PARTITIONS).await,
        )
    });
    let at_stop = Scrape::take(metrics).expect("scrape at the end of the window");
    let stopped_at = Instant::now();
    let produced = std::fs::read_to_string(&out).unwrap();
    let done = produced
        .lines()
        .find(|l| l.starts_with("DONE "))
        .unwrap_or_else(|| {
            panic!(
                "the Java producer exited ({status}) without DONE: {}",
                std::fs::read_to_string(out.with_extension("err")).unwrap_or_default()
            )
        });
    let counts: Vec<u64> = done
        .split(' ')
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts[2], 0, "the Java producer failed records: {done}");
    let total: i64 = source_ends.iter().sum();
    assert_eq!(
        total as u64, counts[1],
        "source holds what was acknowledged"
    );
    assert!(
        source_ends.iter().all(|&e| e > 0),
        "every partition got records: {source_ends:?}"
    );
    let behind: i64 = source_ends
        .iter()
        .zip(&target_ends)
        .map(|(s, t)| (s - t).max(0))
        .sum();
    let lag_seconds = behind as f64 / RATE as f64;
    eprintln!(
        "wan: producer done after {window:.1} s ({total} records, {:.0} records/s acknowledged by the source); \
         target behind {behind} records = {lag_seconds:.1} s of production (strait_lag_records {:.0})",
        total as f64 / window,
        at_stop.lag_records
    );
    at_stop.report(&at_start, window, "producing window");

    // Everything arrives (however long the backlog takes), in order.
    rt.block_on(wait_until_complete(
        &dst_client,
        TOPIC,
        &source_ends,
        Duration::from_secs(300),
    ));
    let drained = stopped_at.elapsed().as_secs_f64();
    let at_end = Scrape::take(metrics).expect("final scrape");
    at_end.report(&at_stop, drained, "after the producer stopped");
    eprintln!("wan: the target held every record {drained:.1} s after the producer stopped");
    let source = rt.block_on(read_all(&src_client, TOPIC, PARTITIONS));
    let target = rt.block_on(read_all(&dst_client, TOPIC, PARTITIONS));
    let mut duplicates = 0;
    for p in 0..PARTITIONS {
        duplicates += assert_complete_in_order(&source[&p], &target[&p], &format!("{TOPIC}-{p}"));
    }
    let proxy = dst.wan_proxy(1).expect("the target's proxy").stats();
    eprintln!(
        "wan: {duplicates} duplicates; through the proxy: {} connections, {} bytes to the target, {} bytes back; \
         test wall time {:.0} s",
        proxy.connections,
        proxy.bytes_up,
        proxy.bytes_down,
        began.elapsed().as_secs_f64()
    );
    // The records crossed the link (not some direct path): at least their values went up through it.
    let value_bytes: usize = source.values().flatten().map(Vec::len).sum();
    assert!(
        proxy.bytes_up >= value_bytes as u64,
        "only {} bytes went up through the proxy, less than the {value_bytes} bytes of values",
        proxy.bytes_up
    );
    assert!(
        lag_seconds < MAX_LAG,
        "lag at the end of the producing window: the target was {behind} records ({lag_seconds:.1} s of \
         production) behind when the producer stopped; the limit is {MAX_LAG} s"
    );
}
