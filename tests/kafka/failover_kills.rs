//! Exact translation survives SIGKILL, against real Kafka.
//!
//! A killed mirror re-sends, after its restart, everything after its last committed source
//! position, so the target log holds duplicates of those ranges. For a restarted instance to
//! translate exactly, the mapping up to that committed position must already be on the target:
//! the mirror persists its offset syncs **before** every commit of source positions.
//!
//! Here the mirror is SIGKILLed four times, each time after the target acknowledged records it
//! had not committed yet (so each restart re-sends them), with a checkpoint interval far longer
//! than the run (so only the commit gate persists syncs). Then:
//! * every source offset of every partition, translated with the syncs persisted on the target,
//!   points at a target copy of the record at it, after which the target holds every later
//!   source record and no earlier one (the later copy when the range was re-sent);
//! * a group committed on the source fails over with `strait failover --apply`, and the same
//!   group id read on the target by Kafka's Java console consumer gets exactly the remainder.
//!
//! The last instance also serves MirrorMaker 2's metric names (`metrics.mm2_compat`): every
//! series Strimzi's JMX exporter rules give MirrorMaker 2 is scraped from it, and every metric
//! the shipped Grafana dashboard queries.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- failover_kills:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use strait::failover::OffsetMaps;
use strait::failover::checkpoint::{offset_syncs_topic, replay};
use strait_testkit::{AdminOp, ConsumeOptions};
use strait_wire::TopicPartition;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;
/// Records per partition per half-round.
const HALF: usize = 40;
const KILLS: usize = 4;
const GROUP: &str = "app";
const MIRROR_GROUP: &str = "strait-kills";

#[test]
fn sigkill_restarts_keep_translation_exact() {
    let (source, target) = clusters("kills");
    for c in [&source, &target] {
        c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    let dir = tempfile::tempdir().unwrap();
    // Commits: the first one 200 ms after the first acknowledgement, then not for a minute;
    // checkpoint rounds (which also persist syncs) not at all while killed.
    let killed = write_config(
        dir.path(),
        "killed",
        &source,
        &target,
        TOPIC,
        MIRROR_GROUP,
        "groups = [\"app\"]\ncheckpoint_interval = \"10m\"\ninstance_id = \"kills-0\"\n",
    );
    let killed_text = std::fs::read_to_string(&killed)
        .unwrap()
        .replace("commit_interval = \"200ms\"", "commit_interval = \"60s\"");
    std::fs::write(&killed, killed_text).unwrap();

    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect();
    let mut produced = 0usize;
    let mut committed = vec![0i64; PARTITIONS as usize];
    for round in 0..KILLS {
        // New records, then a start: the instance re-sends what the last one had not
        // committed, mirrors these, and commits once (the first commit after a start)...
        rt.block_on(produce_numbered(
            &src,
            TOPIC,
            0..PARTITIONS,
            produced..produced + HALF,
        ));
        produced += HALF;
        let (mut strait, log) = spawn_strait(&killed, round);
        committed = wait_for_group_progress(&rt, &src, MIRROR_GROUP, &tps, &committed, &log);
        // ...so these are acknowledged but not committed when it is killed: the next start
        // re-sends them.
        let before = rt.block_on(end_offsets(&dst, TOPIC, PARTITIONS));
        rt.block_on(produce_numbered(
            &src,
            TOPIC,
            0..PARTITIONS,
            produced..produced + HALF,
        ));
        produced += HALF;
        wait_for_target(&rt, &dst, &before, HALF as i64, &log);
        strait.kill().unwrap(); // SIGKILL
        let _ = strait.wait();
    }

    // The group's commits: past every re-sent range (a group committed before one re-reads
    // it on the target: the duplicates are in the target log), at a different point in every
    // partition.
    rt.block_on(produce_numbered(
        &src,
        TOPIC,
        0..PARTITIONS,
        produced..produced + 2 * HALF,
    ));
    produced += 2 * HALF;
    let commits: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, (KILLS * 2 * HALF) as i64 + i64::from(p) * 5))
        .collect();
    let offsets: Vec<(TopicPartition, i64)> = tps
        .iter()
        .map(|tp| (tp.clone(), commits[&tp.partition()]))
        .collect();
    rt.block_on(commit_group(&src, GROUP, &offsets));

    // A last instance, with checkpoints every 500 ms, catches up and checkpoints the group.
    let live = write_config(
        dir.path(),
        "live",
        &source,
        &target,
        TOPIC,
        MIRROR_GROUP,
        "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\ninstance_id = \"kills-0\"\n",
    );
    // With MirrorMaker 2's metric names on, scraped below.
    let metrics_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let live_text = std::fs::read_to_string(&live).unwrap().replace(
        "listen = \"\"",
        &format!("listen = \"{metrics_addr}\"\nmm2_compat = true\nlag_interval = \"200ms\""),
    );
    std::fs::write(&live, live_text).unwrap();
    let (mut strait, log) = spawn_strait(&live, KILLS);
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    assert!(ends.iter().all(|e| *e == produced as i64));
    rt.block_on(wait_until_committed(
        &src,
        MIRROR_GROUP,
        TOPIC,
        &ends,
        Duration::from_secs(120),
    ));
    let wanted: BTreeMap<(String, i32), i64> = commits
        .iter()
        .map(|(p, c)| ((TOPIC.to_string(), *p), *c))
        .collect();
    wait_for_checkpoints(&rt, &dst, "src", GROUP, &wanted, &log);
    // The lag gauges appear with the first lag listing after the start.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = http_get(metrics_addr, "/metrics").expect("the metrics listener");
        assert_eq!(status, 200);
        if body.contains("strait_partition_lag_records{") || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_mm2_series(&body);
    assert_dashboard_series(&body);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);

    // The scenario happened: the target holds re-sent duplicates.
    let source_values = rt.block_on(read_all(&src, TOPIC, PARTITIONS));
    let target_values = rt.block_on(read_all(&dst, TOPIC, PARTITIONS));
    let duplicates: usize = (0..PARTITIONS)
        .map(|p| target_values[&p].len() - source_values[&p].len())
        .sum();
    println!("{duplicates} re-sent records on the target after {KILLS} SIGKILLs");
    // Each kill leaves records acknowledged after the instance's first commit; a rebalance
    // at a start may commit some of them before the kill, so not all are re-sent.
    assert!(duplicates > 0, "the kills left nothing to re-send");

    // Every source offset translates exactly with what is persisted on the target alone.
    let maps = OffsetMaps::default();
    rt.block_on(replay(&dst, &offset_syncs_topic("dst"), &maps, |_| true))
        .unwrap();
    for tp in &tps {
        let p = tp.partition();
        let (src_p, dst_p) = (&source_values[&p], &target_values[&p]);
        for c in 0..=src_p.len() {
            let t = maps
                .translate(tp, c as i64)
                .unwrap_or_else(|miss| panic!("{tp} offset {c}: {miss}"));
            let t = usize::try_from(t).unwrap();
            // The target from `t` on holds every source record from `c` on and none before
            // it (later re-sent ranges repeat some), starting with `c`'s own.
            assert_eq!(dst_p.get(t), src_p.get(c), "{tp}: source offset {c} -> {t}");
            let after: BTreeSet<&Vec<u8>> = dst_p[t..].iter().collect();
            let want: BTreeSet<&Vec<u8>> = src_p[c..].iter().collect();
            assert!(after == want, "{tp}: source offset {c} -> {t}");
        }
    }

    // Failover with the source still up but unused: the group on the target reads exactly
    // the remainder.
    let out = StraitCommand::new(["failover", "--config"])
        .arg(&live)
        .arg("--apply")
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want: Vec<String> = commits
        .iter()
        .flat_map(|(p, c)| {
            source_values[p][usize::try_from(*c).unwrap()..]
                .iter()
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .collect();
    let mut got = target
        .console_consume_with(
            TOPIC,
            want.len() + 1,
            &target.client_properties(target.default_listener(), None),
            &ConsumeOptions::default()
                .group(GROUP)
                .timeout(Duration::from_secs(10)),
        )
        .unwrap();
    want.sort();
    got.sort();
    assert_eq!(got.len(), want.len(), "records read after failover");
    assert_eq!(
        got, want,
        "the failed-over group reads exactly the remainder"
    );
}

/// Waits until every partition of the target grew by `by` records since `before`.
fn wait_for_target(
    rt: &tokio::runtime::Runtime,
    dst: &strait_wire::Client,
    before: &[i64],
    by: i64,
    log: &std::path::Path,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = rt.block_on(end_offsets(dst, TOPIC, PARTITIONS));
        if now.iter().zip(before).all(|(n, b)| *n >= b + by) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the target did not receive the records ({now:?} from {before:?}); log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every series MirrorMaker 2 reports under Strimzi's JMX exporter rules (the names Strimzi's
/// own metrics test expects), for a mirrored partition and for the checkpointed group.
fn assert_mm2_series(exposition: &str) {
    let labels = "{partition=\"0\",source=\"src\",target=\"dst\",topic=\"orders\"}";
    let source = "kafka_connect_mirror_mirrorsourceconnector_";
    for name in [
        "byte_count",
        "byte_rate",
        "record_age_ms",
        "record_age_ms_avg",
        "record_age_ms_max",
        "record_age_ms_min",
        "record_count",
        "record_rate",
        "replication_latency_ms",
        "replication_latency_ms_avg",
        "replication_latency_ms_max",
        "replication_latency_ms_min",
    ] {
        let series = format!("{source}{name}{labels} ");
        assert!(
            exposition.lines().any(|l| l.starts_with(&series)),
            "no {series} in\n{exposition}"
        );
    }
    let count: f64 = exposition
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{source}record_count{labels} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(count > 0.0, "records counted");
    let labels = "{group=\"app\",partition=\"0\",source=\"src\",target=\"dst\",topic=\"orders\"}";
    for suffix in ["", "_avg", "_max", "_min"] {
        let series = format!(
            "kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms{suffix}{labels} "
        );
        assert!(
            exposition.lines().any(|l| l.starts_with(&series)),
            "no {series} in\n{exposition}"
        );
    }
}

/// Every metric the shipped Grafana dashboard (`deploy/helm/strait/dashboards/strait.json`) queries
/// is served: with samples, or at least declared (an error counter has no sample until an
/// error happens).
fn assert_dashboard_series(exposition: &str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/helm/strait/dashboards/strait.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("strait_") {
                    names.insert(word.to_string());
                }
            }
        }
    }
    assert!(names.len() >= 15, "{names:?}");
    let mut missing = Vec::new();
    for name in &names {
        let family = name
            .strip_suffix("_bucket")
            .unwrap_or(name)
            .trim_end_matches("_total");
        let served = exposition.lines().any(|l| {
            l.starts_with(&format!("{name}{{"))
                || l.starts_with(&format!("{name} "))
                || l.starts_with(&format!("# TYPE {family} "))
                || l.starts_with(&format!("# TYPE {family}_total "))
        });
        if !served {
            missing.push(name.clone());
        }
    }
    // Counters of events this run does not have (no errors, losses, markers or misses): they
    // get their first series with their first event.
    const EVENTS_ONLY: [&str; 5] = [
        "strait_batches_skipped_total",
        "strait_fetch_errors_total",
        "strait_produce_errors_total",
        "strait_records_lost_total",
        "strait_translation_misses_total",
    ];
    missing.retain(|m| !EVENTS_ONLY.contains(&m.as_str()));
    assert!(
        missing.is_empty(),
        "the dashboard queries series the mirror does not serve: {missing:?}"
    );
}
