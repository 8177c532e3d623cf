//! `strait run` between two 3-node clusters (replication 3, min.insync.replicas 2) while a
//! steady stream is produced: the target broker leading the most mirrored partitions is
//! SIGKILLed and restarted, then the same happens to a source broker. Proves that nothing is
//! lost, that partitions led by the surviving brokers keep flowing during each outage, and
//! measures the stall of the partitions that lost their leader beside a Java producer's stall
//! in the same outage (the referee: `tests/java/PartitionProbe.java`, writing to explicit
//! partitions of the same clusters at the same rate). The mirror uses three produce connections
//! per target broker (`mirror.produce_connections`).
//!
//! Run: `cargo test -p strait-e2e --test kafka -- --exact failover::leaders_die_mid_stream_without_loss --nocapture`
//! (after `cargo build -p strait`; prints the stall figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use strait_testkit::{AdminOp, Cluster};
use strait_wire::{Client, TopicPartition};

const TOPIC: &str = "fo";
const PROBE_TOPIC: &str = "probe";
const PARTITIONS: i32 = 6;
/// Records per second of each producer (spread evenly over the partitions).
const RATE: u32 = 300;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// How long each phase may wait for the mirror to move every partition: well beyond what it takes
/// (a few seconds, plus the controller's 9 s broker session timeout in an outage), a bound for a
/// loaded machine. A phase that reaches it goes on; the assertions below judge what happened.
const PHASE_BOUND: Duration = Duration::from_secs(90);

/// Starts the Java referee producer; its acknowledgements go to `out`. It stops after `seconds`
/// or once `stop` exists.
fn probe(cluster: &Cluster, topic: &str, seconds: u64, out: &Path, stop: &Path) -> Proc {
    let args = [
        cluster.bootstrap(),
        topic.to_string(),
        PARTITIONS.to_string(),
        RATE.to_string(),
        seconds.to_string(),
        // Long enough to ride out every outage of the test without giving up a record.
        "delivery.timeout.ms=300000".to_string(),
        format!("probe.stop.file={}", stop.display()),
    ];
    partition_probe(cluster, &args, out)
}

/// Acknowledgement times (epoch ms) per partition from a probe's output; panics on a failed
/// record (the referee must not lose anything either).
fn probe_acks(out: &Path) -> BTreeMap<i32, Vec<i64>> {
    let mut acks: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for line in BufReader::new(std::fs::File::open(out).unwrap()).lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "A" => acks
                .entry(f[1].parse().unwrap())
                .or_default()
                .push(f[3].parse().unwrap()),
            "E" => panic!("the Java probe lost a record: {line}"),
            _ => {}
        }
    }
    for v in acks.values_mut() {
        v.sort_unstable();
    }
    acks
}

fn wait_done(out: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !std::fs::read_to_string(out)
        .unwrap_or_default()
        .contains("DONE")
    {
        assert!(
            Instant::now() < deadline,
            "{} did not finish",
            out.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The longest gap between consecutive acknowledgements within `[from, to]` (epoch ms).
fn longest_gap(times: &[i64], from: i64, to: i64) -> i64 {
    let inside: Vec<i64> = times
        .iter()
        .copied()
        .filter(|t| *t >= from && *t <= to)
        .collect();
    let mut edges = vec![from];
    edges.extend(inside);
    edges.push(to);
    edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}

/// One sample of both clusters' end offsets.
#[derive(Clone, Debug)]
struct Sample {
    at_ms: i64,
    /// Per partition; `None` when that partition could not be listed (its leader is down).
    source: Vec<Option<i64>>,
    target: Vec<Option<i64>>,
}

/// The longest time within `[from, to]` that partition `p` of the target did not move while
/// the source had records for it that the target did not: from the moment records were seen
/// waiting (or the last advance) to the next advance. Samples where either side could not be
/// listed count as waiting, so an outage shows whole.
fn mirror_stall(samples: &[Sample], p: usize, from: i64, to: i64) -> i64 {
    let mut worst = 0;
    // (since, target value then) while records wait; the target value when idle.
    let mut waiting: Option<i64> = None;
    let mut value: Option<i64> = None;
    for s in samples.iter().filter(|s| s.at_ms >= from && s.at_ms <= to) {
        let (Some(src), Some(dst)) = (s.source[p], s.target[p]) else {
            continue;
        };
        let advanced = value.is_some_and(|v| dst > v);
        if advanced && let Some(since) = waiting {
            worst = worst.max(s.at_ms - since);
        }
        if advanced || value.is_none() {
            value = Some(dst);
            waiting = (src > dst).then_some(s.at_ms);
        } else if waiting.is_none() && src > dst {
            waiting = Some(s.at_ms);
        }
    }
    worst
}

/// Waits (at most `bound`) until the sampler has seen every partition of the target advance after
/// `since` (epoch ms): the event each phase of the schedule waits for instead of a fixed time.
/// Returns whether it happened.
fn wait_all_advanced(
    samples: &Mutex<Vec<Sample>>,
    since: i64,
    bound: Duration,
    what: &str,
) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        let moved = {
            let samples = samples.lock().unwrap();
            (0..PARTITIONS as usize)
                .filter(|&p| {
                    let mut after = samples
                        .iter()
                        .filter(|s| s.at_ms >= since)
                        .filter_map(|s| s.target[p]);
                    after.next().is_some_and(|first| after.any(|v| v > first))
                })
                .count()
        };
        if moved == PARTITIONS as usize {
            eprintln!("{what}: every partition advanced on the target");
            return true;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "{what}: {moved}/{PARTITIONS} partitions advanced within {bound:?}; going on"
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The node leading the most partitions of `topic`, and which partitions it leads.
async fn busiest_leader(client: &Client, topic: &str) -> (i32, Vec<usize>) {
    let md = client.metadata(Some(&[topic.to_string()])).await.unwrap();
    let mut by_node: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let leader = md
            .partition(&TopicPartition::new(topic, p).unwrap())
            .and_then(|pi| pi.leader)
            .expect("a leader");
        by_node.entry(leader).or_default().push(p as usize);
    }
    by_node
        .into_iter()
        .max_by_key(|(_, ps)| ps.len())
        .expect("some leader")
}

fn three_nodes(name: &str) -> Cluster {
    Cluster::builder(name)
        .nodes(3)
        .start()
        .expect("3-node cluster")
}

#[test]
fn leaders_die_mid_stream_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let src_thread = std::thread::spawn(|| three_nodes("fo-src"));
    let dst = three_nodes("fo-dst");
    let src = src_thread.join().unwrap();
    let topic = |name: &str| AdminOp::CreateTopic {
        name: name.into(),
        partitions: PARTITIONS,
        replication: 3,
        configs: vec![("min.insync.replicas".into(), "2".into())],
    };
    src.admin(&[topic(TOPIC), AdminOp::wait_isr(TOPIC, 3)])
        .unwrap();
    dst.admin(&[topic(PROBE_TOPIC), AdminOp::wait_isr(PROBE_TOPIC, 3)])
        .unwrap();
    let src = Arc::new(Mutex::new(src));
    let dst = Arc::new(Mutex::new(dst));

    let config = write_config(
        dir.path(),
        "fo",
        &src.lock().unwrap(),
        &dst.lock().unwrap(),
        TOPIC,
        "fo-mirror",
        // Three produce connections per target broker: the leader kill also proves that
        // partitions spread over lanes lose nothing and stay in order.
        "replication_factor = 3\ndrain_timeout = \"5s\"\nproduce_connections = 3\n",
    );
    // Debug logs of the pipeline, so a failure shows which partition side was waited for.
    let log = config.with_extension("0.log");
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(&config);
    cmd.command()
        .env("RUST_LOG", "info,strait_forward::pipeline=debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut strait = cmd.spawn();
    // The schedule, driven by what the sampler sees rather than by the clock: steady until every
    // partition flows, the target leader down until every partition (those with surviving leaders
    // and those whose leadership moved) has advanced on the target since 3 s after the kill,
    // steady again until every partition has advanced after the preferred leader election, the
    // source leader down (same event), and after its restart until every partition has advanced
    // once more. Each phase is bounded by PHASE_BOUND. The producers run until then, however long
    // the schedule took; `seconds` only bounds them if the test dies without stopping them.
    let seconds = 900;
    let src_out = dir.path().join("source-probe.out");
    let dst_out = dir.path().join("target-probe.out");
    let stop = dir.path().join("probes.stop");
    let _src_probe = probe(&src.lock().unwrap(), TOPIC, seconds, &src_out, &stop);
    let _dst_probe = probe(&dst.lock().unwrap(), PROBE_TOPIC, seconds, &dst_out, &stop);

    let rt = runtime();
    let bootstrap = |c: &Mutex<Cluster>| c.lock().unwrap().bootstrap();
    let (src_bootstrap, dst_bootstrap) = (bootstrap(&src), bootstrap(&dst));
    let connect = |b: String| async move {
        Client::connect(
            strait_wire::ClientConfig::from_properties([("bootstrap.servers", b)]).unwrap(),
        )
        .await
        .unwrap()
    };
    let (src_client, dst_client) =
        rt.block_on(async { (connect(src_bootstrap).await, connect(dst_bootstrap).await) });
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (samples, sampling) = (samples.clone(), sampling.clone());
        let (s, d) = (src_client.clone(), dst_client.clone());
        rt.spawn(async move {
            while sampling.load(std::sync::atomic::Ordering::Acquire) {
                let (source, target) = tokio::join!(
                    try_end_offsets(&s, TOPIC, PARTITIONS),
                    try_end_offsets(&d, TOPIC, PARTITIONS)
                );
                samples.lock().unwrap().push(Sample {
                    at_ms: now_ms(),
                    source,
                    target,
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let mut outages = Vec::new();
    // Steady: the mirror moves every partition before the first kill.
    let mut steady_since = now_ms();
    for (side, cluster, lead_client) in [
        ("target", dst.clone(), dst_client.clone()),
        ("source", src.clone(), src_client.clone()),
    ] {
        wait_all_advanced(
            &samples,
            steady_since,
            PHASE_BOUND,
            &format!("{side}: before the kill"),
        );
        assert!(
            strait.try_wait().unwrap().is_none(),
            "strait exited; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let (node, led) = rt.block_on(busiest_leader(&lead_client, TOPIC));
        // The referee's partitions that lose their leader in the same outage.
        let probe_led = if side == "target" {
            rt.block_on(busiest_leader_of(&lead_client, PROBE_TOPIC, node))
        } else {
            led.clone()
        };
        let killed_at = now_ms();
        cluster.lock().unwrap().kill_node(node).unwrap();
        eprintln!("{side}: killed node {node}, which led {TOPIC} partitions {led:?}");
        // Down until the outage has shown what the assertions below look at: the partitions whose
        // leader survived moving on the target (from 3 s after the kill), and those that lost
        // theirs moving again under the new leader (this was a fixed 20 s).
        wait_all_advanced(
            &samples,
            killed_at + 3_000,
            PHASE_BOUND,
            &format!("{side}: node {node} down"),
        );
        let restarted_at = now_ms();
        cluster.lock().unwrap().start_node(node).unwrap();
        eprintln!("{side}: node {node} restarted");
        steady_since = now_ms();
        outages.push((
            side,
            node,
            led.clone(),
            probe_led.clone(),
            killed_at,
            restarted_at,
        ));
        if side == "target" {
            // Leadership moves back to the restarted node (a preferred leader election, as
            // Kafka's auto-rebalance does after leader.imbalance.check.interval): the mirror's
            // and the Java producer's partitions are told NOT_LEADER by the old leaders.
            let c = cluster.lock().unwrap();
            c.admin(&[
                AdminOp::wait_isr(TOPIC, 3),
                AdminOp::wait_isr(PROBE_TOPIC, 3),
            ])
            .unwrap();
            let moved_at = now_ms();
            let out = c
                .java_tool(
                    "org.apache.kafka.tools.LeaderElectionCommand",
                    &[
                        "--bootstrap-server",
                        &c.bootstrap(),
                        "--election-type",
                        "PREFERRED",
                        "--all-topic-partitions",
                    ],
                )
                .unwrap();
            eprintln!(
                "target: preferred leader election: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
            drop(c);
            let back = rt.block_on(busiest_leader_of(&lead_client, TOPIC, node));
            let probe_back = rt.block_on(busiest_leader_of(&lead_client, PROBE_TOPIC, node));
            // Recorded like an outage of no length: the stall is what follows the move.
            steady_since = now_ms();
            outages.push((
                "target leadership back",
                node,
                back,
                probe_back,
                moved_at,
                moved_at,
            ));
        }
    }

    // After the last restart: until every partition has moved again (this was a fixed 30 s).
    wait_all_advanced(
        &samples,
        steady_since,
        PHASE_BOUND,
        "after the last restart",
    );
    let stopped_at = now_ms();
    std::fs::write(&stop, b"").unwrap();
    wait_done(&src_out, Duration::from_secs(240));
    wait_done(&dst_out, Duration::from_secs(240));
    let expected = rt.block_on(end_offsets(&src_client, TOPIC, PARTITIONS));
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(wait_until_committed(
            &src_client,
            "fo-mirror",
            TOPIC,
            &expected,
            Duration::from_secs(240),
        ))
    }));
    // What the mirror said about the outages (leader moves, rebalances, drains), for the record
    // and for a failure's diagnosis.
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    for line in said
        .lines()
        .filter(|l| {
            l.contains("WARN")
                || l.contains("ERROR")
                || l.contains("assigned")
                || l.contains("revoked")
                || l.contains("side ended")
                || l.contains("drain")
        })
        .filter(|l| !l.contains("produce failed") && !l.contains("fetch failed"))
        .take(150)
    {
        eprintln!("strait: {line}");
    }
    if let Err(panic) = waited {
        std::panic::resume_unwind(panic);
    }
    std::thread::sleep(Duration::from_secs(1));
    sampling.store(false, std::sync::atomic::Ordering::Release);
    rt.block_on(sampler).unwrap();

    // Nothing lost, nothing out of order.
    let source = rt.block_on(read_all(&src_client, TOPIC, PARTITIONS));
    let target = rt.block_on(read_all(&dst_client, TOPIC, PARTITIONS));
    let mut duplicates = 0;
    for p in 0..PARTITIONS {
        duplicates += assert_complete_in_order(&source[&p], &target[&p], &format!("partition {p}"));
    }
    let produced: usize = source.values().map(Vec::len).sum();
    eprintln!("{produced} records mirrored, {duplicates} duplicates");

    let samples = samples.lock().unwrap().clone();
    let acks = [
        ("source", probe_acks(&src_out)),
        ("target", probe_acks(&dst_out)),
    ];
    // Each event's stall window ends where the next event begins.
    let next_starts: Vec<i64> = outages
        .iter()
        .skip(1)
        .map(|o| o.4 - 1_000)
        .chain([i64::MAX])
        .collect();
    for ((side, node, led, probe_led, killed_at, restarted_at), next_start) in
        outages.into_iter().zip(next_starts)
    {
        // Partitions whose leaders survived kept flowing while the node was down (from 3 s
        // after the kill, once the broken connections were noticed, to the restart).
        let during: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.at_ms >= killed_at + 3_000 && s.at_ms <= restarted_at)
            .collect();
        let real_outage = restarted_at > killed_at;
        assert!(
            !real_outage || during.len() >= 2,
            "{side}: too few samples during the outage"
        );
        let span = |v: Vec<i64>| {
            (
                v.first().copied().unwrap_or(0),
                v.last().copied().unwrap_or(0),
            )
        };
        let mut fed = 0;
        for p in (0..PARTITIONS as usize).filter(|p| real_outage && !led.contains(p)) {
            let (first, last) = span(during.iter().filter_map(|s| s.target[p]).collect());
            let (src_first, src_last) = span(during.iter().filter_map(|s| s.source[p]).collect());
            // Only a partition the producer still wrote to during the outage can move.
            if src_last > src_first {
                fed += 1;
                assert!(
                    last > first,
                    "{side} outage: partition {p} (leader alive) did not move on the target \
                     while node {node} was down ({first} -> {last}; source {src_first} -> \
                     {src_last})"
                );
            }
        }
        assert!(
            !real_outage || fed > 0,
            "{side} outage: the producer wrote to no partition with a live leader while node \
             {node} was down"
        );
        // The stall of the partitions that lost their leader, beside the Java producer's, up to
        // 30 s after the restart, the next event or the producers' stop.
        let window_end = (restarted_at + 30_000).min(next_start).min(stopped_at);
        let mirror: Vec<i64> = led
            .iter()
            .map(|&p| mirror_stall(&samples, p, killed_at - 1_000, window_end))
            .collect();
        let referee = &acks.iter().find(|(s, _)| side.starts_with(s)).unwrap().1;
        let java: Vec<i64> = probe_led
            .iter()
            .map(|&p| {
                longest_gap(
                    referee.get(&(p as i32)).map_or(&[][..], Vec::as_slice),
                    killed_at - 1_000,
                    window_end,
                )
            })
            .collect();
        eprintln!(
            "STALL {side} leader kill (node {node}): strait per moved partition {mirror:?} ms \
             (max {} ms); Java producer per moved partition {java:?} ms (max {} ms)",
            mirror.iter().max().unwrap_or(&0),
            java.iter().max().unwrap_or(&0)
        );
    }
    let status = terminate(&mut strait);
    assert!(status.success(), "strait exited with {status}");
}

/// End offsets, or `None` if the listing failed (the topic does not exist yet, a node is down).
async fn try_end_offsets(client: &Client, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    // One listing per partition: a partition whose leader is down must not hide the others.
    let one = |p: i32| async move {
        let tp = TopicPartition::new(topic, p).unwrap();
        let listed = tokio::time::timeout(
            Duration::from_secs(1),
            client.list_offsets(
                &[(tp, strait_wire::OffsetSpec::Latest)],
                strait_wire::Isolation::ReadUncommitted,
            ),
        )
        .await;
        match listed {
            Ok(Ok(l)) => l.first().and_then(|l| l.offset),
            _ => None,
        }
    };
    futures_util::future::join_all((0..partitions).map(one)).await
}

/// The partitions of `topic` that `node` leads.
async fn busiest_leader_of(client: &Client, topic: &str, node: i32) -> Vec<usize> {
    let md = client.metadata(Some(&[topic.to_string()])).await.unwrap();
    (0..PARTITIONS)
        .filter(|&p| {
            md.partition(&TopicPartition::new(topic, p).unwrap())
                .and_then(|pi| pi.leader)
                == Some(node)
        })
        .map(|p| p as usize)
        .collect()
}
