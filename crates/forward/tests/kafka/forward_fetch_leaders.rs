//! Fetch scheduling per source broker, against real brokers: a `Forwarder` mirrors a topic whose
//! partition leaders are spread over a 3-node source cluster (replication 3,
//! min.insync.replicas 2) into a single-node target, while every partition is written steadily
//! (explicit partitions). One source broker at a time goes away mid-stream and comes back
//! (each time back in the ISR before the next): SIGKILL; SIGSTOP (a black hole: connections
//! stay open, requests are never answered); a clean stop (controlled shutdown).
//!
//! Proves:
//! - for each outage, the partitions led by the other brokers keep being mirrored while the
//!   broker is down (their acknowledged positions advance). With replication 3 on 3 brokers
//!   every partition has the lost broker in its ISR, so after a SIGKILL or SIGSTOP no partition
//!   can advance its high watermark until the controller fences the broker
//!   (`broker.session.timeout.ms`); what matters is what happens then;
//! - while a broker is frozen (SIGSTOP) and the mirror's requests to it are never answered (its
//!   `request.timeout.ms` is set beyond the test's patience), the other brokers' partitions are
//!   mirrored (before, one round for all leaders held every partition up until that request
//!   timed out), and the frozen broker's partitions move to their new leaders;
//! - after the restarts, every source record is on the target exactly once and in order (the
//!   forwarder does not restart, so there may be no duplicates).
//!
//! Measures (printed, not asserted: wall clock on a shared machine): for the partitions that
//! moved, the longest time their acknowledged position stood still (the mirror's stall), next
//! to the longest time the source refused writes to them (what any client sees); and the same
//! for the partitions that did not move.
//!
//! Run: `cargo test -p strait-forward --test kafka -- forward_fetch_leaders:: --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::broker;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use broker::*;
use strait_forward::{Compression, Forwarder, Route, Settings, WireForwarder};
use strait_testkit::{AdminOp, Cluster};
use strait_wire::admin::NewTopic;
use strait_wire::{Client, ProduceBatch, ProduceOptions};

const TOPIC: &str = "spread";
const PARTITIONS: i32 = 6;
const GROUP: &str = "strait-fetch-leaders";
/// Each partition gets one batch every this often.
const PRODUCE_EVERY: Duration = Duration::from_millis(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outage {
    /// SIGKILL.
    Kill,
    /// SIGSTOP: the broker's connections stay open and nothing is answered.
    Freeze,
    /// SIGTERM: controlled shutdown (leadership moves before the broker exits).
    Stop,
}

/// A frozen (SIGSTOPped) broker JVM, thawed (SIGCONT) on drop so that the cluster's own
/// teardown can stop it even if the test panics.
struct Frozen(Option<String>);

impl Frozen {
    fn freeze(cluster: &Cluster, node: i32) -> Frozen {
        let pid_file = cluster.node_dir(node).unwrap().join("jvm.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", pid_file.display()))
            .trim()
            .to_string();
        signal("-STOP", &pid);
        Frozen(Some(pid))
    }

    fn thaw(&mut self) {
        if let Some(pid) = self.0.take() {
            signal("-CONT", &pid);
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
    }
}

fn signal(sig: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// When things happened, per partition.
#[derive(Default)]
struct Timeline {
    /// (when, acknowledged position) each time the position changed.
    acked: HashMap<i32, Vec<(Instant, i64)>>,
    /// When each produce to the source succeeded.
    produced: HashMap<i32, Vec<Instant>>,
}

impl Timeline {
    fn acked_at(&self, p: i32) -> i64 {
        self.acked
            .get(&p)
            .and_then(|v| v.last())
            .map_or(0, |(_, o)| *o)
    }

    /// The longest interval in [from, to] without an event, and when it ended.
    fn longest_gap(times: &[Instant], from: Instant, to: Instant) -> (Duration, Instant) {
        let mut last = from;
        let mut worst = (Duration::ZERO, from);
        for &t in times.iter().filter(|t| **t > from && **t <= to) {
            if t - last > worst.0 {
                worst = (t - last, t);
            }
            last = t;
        }
        if to - last > worst.0 {
            worst = (to - last, to);
        }
        worst
    }

    fn ack_gap(&self, p: i32, from: Instant, to: Instant) -> (Duration, Instant) {
        let times: Vec<Instant> = self
            .acked
            .get(&p)
            .map(|v| v.iter().map(|(t, _)| *t).collect())
            .unwrap_or_default();
        Self::longest_gap(&times, from, to)
    }

    fn produce_gap(&self, p: i32, from: Instant, to: Instant) -> Duration {
        let times = self.produced.get(&p).cloned().unwrap_or_default();
        Self::longest_gap(&times, from, to).0
    }
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

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn leaders(client: &Client) -> BTreeMap<i32, i32> {
    let md = client.metadata(Some(&[TOPIC.to_string()])).await.unwrap();
    (0..PARTITIONS)
        .filter_map(|p| md.leader(&tp(TOPIC, p)).map(|l| (p, l)))
        .collect()
}

/// Polls `cond` every 20 ms until it holds; panics after PATIENCE.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_leaders_keep_flowing_while_a_source_broker_is_down() {
    // RUST_LOG (e.g. `info,strait_forward::fetch=debug`) shows the forwarder's and the clients'
    // logs, for a failure's diagnosis.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let began = Instant::now();
    let (source, target) = blocking(|| {
        let source = std::thread::spawn(|| {
            Cluster::builder("fetch-leaders-src")
                .nodes(3)
                .start()
                .expect("source cluster")
        });
        let target = Cluster::builder("fetch-leaders-dst")
            .start()
            .expect("target cluster");
        (source.join().expect("source cluster thread"), target)
    })
    .await;
    // The mirror's source client waits 5 minutes for an answer (request.timeout.ms), longer
    // than the test's patience: partitions stuck behind a request that a frozen broker never
    // answers could only move by timing it out, so they must move another way.
    let source_config = {
        let mut props = source.client_properties(source.default_listener(), None);
        props.push(("request.timeout.ms".into(), "300000".into()));
        strait_wire::ClientConfig::from_properties(props).unwrap()
    };
    let target_config = config(&target);
    let (src, dst) = (client(&source).await, client(&target).await);
    // The test's own writer gives up on a dead or frozen leader quickly, so that the source has
    // new records as soon as Kafka can take them and the stall measured is the mirror's.
    let writer = {
        let mut props = source.client_properties(source.default_listener(), None);
        props.push(("request.timeout.ms".into(), "3000".into()));
        props.push(("socket.connection.setup.timeout.ms".into(), "1000".into()));
        Client::connect(strait_wire::ClientConfig::from_properties(props).unwrap())
            .await
            .unwrap()
    };
    let source = Arc::new(Mutex::new(source));
    create_topics(
        &src,
        &[NewTopic::new(TOPIC, PARTITIONS, 3).with_config("min.insync.replicas", "2")],
    )
    .await;
    create_topics(&dst, &[NewTopic::new(TOPIC, PARTITIONS, 1)]).await;
    let initial = leaders(&src).await;
    let spread: BTreeSet<i32> = initial.values().copied().collect();
    eprintln!("leaders by partition: {initial:?}");
    assert_eq!(
        spread.len(),
        3,
        "leaders spread over the 3 brokers: {initial:?}"
    );

    let fwd: Arc<WireForwarder> = Arc::new(
        Forwarder::builder()
            .source(source_config)
            .target(target_config)
            .group_id(GROUP)
            .settings(settings())
            .build()
            .await
            .unwrap(),
    );
    fwd.assign(
        (0..PARTITIONS)
            .map(|p| Route {
                source: tp(TOPIC, p),
                target: tp(TOPIC, p),
            })
            .collect(),
    )
    .await
    .unwrap();

    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let running = Arc::new(AtomicBool::new(true));
    // The acknowledged positions, sampled every 10 ms.
    let sampler = {
        let (fwd, timeline, running) = (fwd.clone(), timeline.clone(), running.clone());
        tokio::spawn(async move {
            while running.load(Ordering::Acquire) {
                let now = Instant::now();
                {
                    let mut t = timeline.lock().unwrap();
                    for (s, o) in fwd.acknowledged_positions() {
                        let p = s.partition();
                        if t.acked_at(p) != o {
                            t.acked.entry(p).or_default().push((now, o));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    // One writer per partition, so that a partition whose leader is gone holds up only itself.
    let producing = Arc::new(AtomicBool::new(true));
    let producers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let (writer, producing, timeline) =
                (writer.clone(), producing.clone(), timeline.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                let mut failures = 0usize;
                while producing.load(Ordering::Acquire) {
                    let records: Vec<Rec> = (0..1 + n % 4)
                        .map(|i| Rec::value(&format!("p{p}-{n}-{i}"), now_ms()))
                        .collect();
                    let batch = ProduceBatch::new(
                        tp(TOPIC, p),
                        build_batch(&records, Compression::ALL[n % 5]),
                    );
                    let ok = match writer
                        .produce(vec![batch], &ProduceOptions::default())
                        .await
                    {
                        Ok(results) => results.into_iter().all(|r| r.outcome.is_ok()),
                        Err(_) => false,
                    };
                    if ok {
                        timeline
                            .lock()
                            .unwrap()
                            .produced
                            .entry(p)
                            .or_default()
                            .push(Instant::now());
                    } else {
                        // Leadership is moving; the batch may or may not be in the log (the
                        // comparison below reads the source log, whatever it holds).
                        failures += 1;
                    }
                    n += 1;
                    tokio::time::sleep(PRODUCE_EVERY).await;
                }
                (n, failures)
            })
        })
        .collect();

    let mut report = Vec::new();
    let mut previous_victim = None;
    for outage in [Outage::Kill, Outage::Freeze, Outage::Stop] {
        // Every partition is being mirrored before the outage.
        let marks: Vec<i64> = {
            let t = timeline.lock().unwrap();
            (0..PARTITIONS).map(|p| t.acked_at(p)).collect()
        };
        wait_until("every partition mirrors before the outage", || {
            let t = timeline.lock().unwrap();
            (0..PARTITIONS).all(|p| t.acked_at(p) >= marks[p as usize] + 20)
        })
        .await;

        // The victim: the broker leading the most partitions but not all of them (some must
        // stay healthy), not the one just restarted if possible.
        let now_leaders = leaders(&src).await;
        let mut count: BTreeMap<i32, usize> = BTreeMap::new();
        for l in now_leaders.values() {
            *count.entry(*l).or_default() += 1;
        }
        let candidates = || count.iter().filter(|(_, n)| **n < PARTITIONS as usize);
        let best = |it: &mut dyn Iterator<Item = (&i32, &usize)>| {
            it.max_by_key(|(node, n)| (**n, -**node))
                .map(|(node, _)| *node)
        };
        let victim = best(&mut candidates().filter(|(node, _)| Some(**node) != previous_victim))
            .or_else(|| best(&mut candidates()));
        let Some(victim) = victim else {
            eprintln!("{outage:?}: skipped, one broker leads every partition: {now_leaders:?}");
            continue;
        };
        previous_victim = Some(victim);
        let moved: Vec<i32> = (0..PARTITIONS)
            .filter(|p| now_leaders.get(p) == Some(&victim))
            .collect();
        let healthy: Vec<i32> = (0..PARTITIONS).filter(|p| !moved.contains(p)).collect();
        assert!(!moved.is_empty() && !healthy.is_empty(), "{now_leaders:?}");
        eprintln!("{outage:?}: broker {victim} leads {moved:?}; the others lead {healthy:?}");

        let t0 = Instant::now();
        let c = source.clone();
        let mut frozen = blocking(move || {
            let mut c = c.lock().unwrap();
            match outage {
                Outage::Kill => c.kill_node(victim).unwrap(),
                Outage::Freeze => return Some(Frozen::freeze(&c, victim)),
                Outage::Stop => c.stop_node(victim).unwrap(),
            }
            None
        })
        .await;
        let down = Instant::now();
        eprintln!(
            "{outage:?}: broker {victim} down after {:.1} s",
            (down - t0).as_secs_f64()
        );

        // While it is down, the other brokers' partitions keep being mirrored. (Batches fetched
        // before the outage may still be acknowledged just after it: positions are taken 1 s in.)
        tokio::time::sleep(Duration::from_secs(1)).await;
        let at_down: Vec<i64> = {
            let t = timeline.lock().unwrap();
            (0..PARTITIONS).map(|p| t.acked_at(p)).collect()
        };
        wait_until(
            "the other leaders' partitions advance during the outage",
            || {
                let t = timeline.lock().unwrap();
                healthy
                    .iter()
                    .all(|&p| t.acked_at(p) > at_down[p as usize] + 10)
            },
        )
        .await;
        let healthy_progress = down.elapsed();
        // The moved partitions resume once they are fetched from their new leaders (for the
        // frozen broker: while it is still frozen, long before its requests time out).
        // Waited by hand, not with wait_until: a timeout here (once in a full run, cause not
        // known yet) reports where the leaders and the positions were.
        let deadline = Instant::now() + PATIENCE;
        loop {
            let resumed = {
                let t = timeline.lock().unwrap();
                moved
                    .iter()
                    .all(|&p| t.acked_at(p) > at_down[p as usize] + 10)
            };
            if resumed {
                break;
            }
            if Instant::now() >= deadline {
                let now = leaders(&src).await;
                let (acked, written): (Vec<i64>, Vec<usize>) = {
                    let t = timeline.lock().unwrap();
                    (
                        (0..PARTITIONS).map(|p| t.acked_at(p)).collect(),
                        // Whether the source took new records at all (a cluster that does not
                        // is not the mirror's stall).
                        (0..PARTITIONS)
                            .map(|p| {
                                t.produced
                                    .get(&p)
                                    .map_or(0, |at| at.iter().filter(|&&i| i > down).count())
                            })
                            .collect(),
                    )
                };
                panic!(
                    "timed out waiting: the moved partitions resume ({outage:?}: moved {moved:?}, \
                     leaders now {now:?}, acknowledged {acked:?}, at the outage {at_down:?}, \
                     batches the source acknowledged since the outage {written:?})"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let end = Instant::now();
        let after = leaders(&src).await;
        eprintln!("{outage:?}: leaders now {after:?}");
        {
            let t = timeline.lock().unwrap();
            let from = t0 - Duration::from_secs(1);
            let mut stalls = Vec::new();
            for &p in &moved {
                let (gap, ended) = t.ack_gap(p, from, end);
                let source_gap = t.produce_gap(p, from, end);
                stalls.push((p, gap, ended - t0, source_gap));
            }
            let healthy_gaps: Vec<(i32, Duration)> = healthy
                .iter()
                .map(|&p| (p, t.ack_gap(p, from, end).0))
                .collect();
            for (p, gap, resumed, source_gap) in &stalls {
                let line = format!(
                    "{outage:?} broker {victim}: moved partition {p}: mirror stalled {:.2} s \
                     (resumed {:.2} s after the outage began); source writes stalled {:.2} s",
                    gap.as_secs_f64(),
                    resumed.as_secs_f64(),
                    source_gap.as_secs_f64()
                );
                eprintln!("{line}");
                report.push(line);
            }
            let line = format!(
                "{outage:?} broker {victim}: other partitions: all advanced {:.2} s after the \
                 broker was down (positions taken 1 s in); longest pause per partition {:?}",
                healthy_progress.as_secs_f64(),
                healthy_gaps
                    .iter()
                    .map(|(p, g)| format!("{p}: {:.2} s", g.as_secs_f64()))
                    .collect::<Vec<_>>()
            );
            eprintln!("{line}");
            report.push(line);
        }

        // Back in the cluster and in sync before the next outage.
        let c = source.clone();
        blocking(move || {
            let mut c = c.lock().unwrap();
            match frozen.as_mut() {
                Some(f) => f.thaw(),
                None => c.start_node(victim).unwrap(),
            }
            c.admin(&[AdminOp::wait_isr(TOPIC, 3)]).unwrap();
        })
        .await;
        eprintln!("{outage:?}: broker {victim} back in the ISR");
    }

    producing.store(false, Ordering::Release);
    for (p, producer) in producers.into_iter().enumerate() {
        let (n, failures) = producer.await.unwrap();
        eprintln!("partition {p}: {n} batches written, {failures} failed writes (retried)");
    }
    let ends = stable_ends(&src, TOPIC, PARTITIONS).await;
    wait_until("the mirror catches up", || {
        let t = timeline.lock().unwrap();
        (0..PARTITIONS).all(|p| t.acked_at(p) == ends[p as usize])
    })
    .await;
    running.store(false, Ordering::Release);
    sampler.await.unwrap();
    fwd.shutdown().await.unwrap();
    assert!(fwd.failures().is_empty(), "{:?}", fwd.failures());

    // Every source record, exactly once, in order.
    let mut total = 0;
    for p in 0..PARTITIONS {
        let want = records(&src, &tp(TOPIC, p), 0).await;
        let got = records(&dst, &tp(TOPIC, p), 0).await;
        assert_same(&format!("partition {p}"), &want, &got);
        total += want.len();
    }
    eprintln!(
        "{total} records mirrored exactly once in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    for line in report {
        eprintln!("STALL {line}");
    }
}
