//! Active-active between two clusters in one `strait` process (two flows, a->b and b->a, with
//! MirrorMaker 2's prefix naming), against real Kafka: both clusters write to their own topic
//! `x`, every record arrives once on the other side (`a.x` on b, `b.x` on a), and nothing loops
//! back (`a.b.x` / `b.a.x` never appear). Run first from a strait.toml with `[clusters.*]` +
//! `[[flows]]`, then from the equivalent mm2.properties (`strait mm2`), which resumes from the
//! same consumer groups. Each run ends with SIGTERM and exit code 0. Last, a flow whose target
//! does not answer is retried and reported (log, `/readyz`) while the other flow keeps mirroring,
//! and SIGTERM then exits with code 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{StraitCommand, StraitProcess};
use strait_testkit::Cluster;
use strait_wire::Client;
use strait_wire::admin::{Admin, NewTopic};

const PARTITIONS: i32 = 3;
/// Records per partition per phase.
const PER_PHASE: usize = 200;
const WAIT: Duration = Duration::from_secs(120);

fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn spawn(args: &[&str], log: &Path, env: &[(&str, &str)]) -> StraitProcess {
    let mut cmd = StraitCommand::new(args.iter().copied());
    cmd.command()
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    for (k, v) in env {
        cmd.command().env(k, v);
    }
    cmd.spawn()
}

async fn topic_names(client: &Client) -> Vec<String> {
    let md = client.metadata(None).await.unwrap();
    let mut names: Vec<String> = md
        .topics
        .keys()
        .map(|t| t.to_string())
        .filter(|t| !t.starts_with("__"))
        .collect();
    names.sort();
    names
}

/// Waits until `group` on `source` has committed `x`'s end offsets: everything written so far
/// is on the other side.
async fn wait_mirrored(source: &Client, group: &str, log: &Path) {
    let ends = common::end_offsets(source, "x", PARTITIONS).await;
    let offsets = strait_wire::offset_commit::GroupOffsets::new(source, group);
    let tps: Vec<strait_wire::TopicPartition> = (0..PARTITIONS)
        .map(|p| strait_wire::TopicPartition::new("x", p).unwrap())
        .collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let committed: Vec<i64> = match offsets.fetch(&tps).await {
            Ok(c) => tps
                .iter()
                .map(|tp| c.get(tp).and_then(|o| o.as_ref()).map_or(0, |o| o.offset))
                .collect(),
            Err(_) => vec![0; tps.len()],
        };
        if committed.iter().zip(&ends).all(|(c, e)| c >= e) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} committed {committed:?} < {ends:?} after {WAIT:?}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Both mirrored topics hold exactly their source's records, in order, once each.
async fn assert_exact(a: &Client, b: &Client) {
    for (src, dst, mirrored) in [(a, b, "a.x"), (b, a, "b.x")] {
        let want: BTreeMap<i32, Vec<Vec<u8>>> = common::read_all(src, "x", PARTITIONS).await;
        let got = common::read_all(dst, mirrored, PARTITIONS).await;
        for p in 0..PARTITIONS {
            assert_eq!(
                got[&p].len(),
                want[&p].len(),
                "{mirrored} partition {p}: {} records, the source has {} (no kill, so no \
                 duplicates and no loss are allowed)",
                got[&p].len(),
                want[&p].len()
            );
            assert!(
                got[&p] == want[&p],
                "{mirrored} partition {p} differs from x"
            );
        }
    }
}

/// Nothing loops back: each cluster has its own `x` and the other's mirror, nothing else.
async fn assert_no_loop(a: &Client, b: &Client, log: &Path) {
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    assert_eq!(
        topic_names(a).await,
        ["b.x", "x"],
        "topics on a; log:\n{}",
        text()
    );
    assert_eq!(
        topic_names(b).await,
        ["a.x", "x"],
        "topics on b; log:\n{}",
        text()
    );
    assert!(
        !text().contains("the set of matching topics changed"),
        "a flow selected a mirrored topic; log:\n{}",
        text()
    );
}

/// Gives the flows' topic refresh (1 s) a few rounds with both mirrored topics present, so
/// that a flow that would select the other's mirror had the chance to (checked after).
fn let_refresh_run() {
    std::thread::sleep(Duration::from_secs(4));
}

fn stop(mut process: StraitProcess, log: &Path) {
    let status = common::terminate(&mut process);
    assert_eq!(
        status.code(),
        Some(0),
        "strait exit status {status}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn two_flows_mirror_both_ways_once_and_nothing_loops_back() {
    let (ca, cb): (Cluster, Cluster) = common::clusters("active-active");
    let rt = common::runtime();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = rt.block_on(async { (common::client(&ca).await, common::client(&cb).await) });
    rt.block_on(async {
        for c in [&a, &b] {
            let admin = Admin::new(c);
            admin
                .create_topic(&NewTopic::new("x", PARTITIONS, 1))
                .await
                .unwrap();
            admin
                .wait_for_leaders("x", PARTITIONS, Duration::from_secs(30))
                .await
                .unwrap();
            common::produce_numbered(c, "x", 0..PARTITIONS, 0..PER_PHASE).await;
        }
    });

    // 1. strait.toml, both flows; records written before and while it runs. Every topic is
    // selected (the default `.*`): only the cycle rule keeps `b.x` on a from going back to b.
    let addr = free_addr();
    let toml = dir.path().join("strait.toml");
    std::fs::write(
        &toml,
        format!(
            "[clusters.a]\n\"bootstrap.servers\" = \"{}\"\n\n[clusters.b]\n\"bootstrap.servers\" = \"{}\"\n\n\
             [mirror]\nrename = \"prefix\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\nreplication_factor = 1\n\n\
             [[flows]]\nsource = \"a\"\ntarget = \"b\"\n\n\
             [[flows]]\nsource = \"b\"\ntarget = \"a\"\n\n\
             [metrics]\nlisten = \"{addr}\"\nlag_interval = \"1s\"\n",
            ca.bootstrap(),
            cb.bootstrap()
        ),
    )
    .unwrap();
    let log = dir.path().join("toml.log");
    let process = spawn(&["run", "--config", toml.to_str().unwrap()], &log, &[]);
    rt.block_on(async {
        wait_mirrored(&a, "strait-a-b", &log).await;
        wait_mirrored(&b, "strait-b-a", &log).await;
        for c in [&a, &b] {
            common::produce_numbered(c, "x", 0..PARTITIONS, PER_PHASE..2 * PER_PHASE).await;
        }
        wait_mirrored(&a, "strait-a-b", &log).await;
        wait_mirrored(&b, "strait-b-a", &log).await;
    });
    // One /readyz for both flows, one /metrics with each flow's labels.
    let deadline = Instant::now() + WAIT;
    let ready = loop {
        match common::http_get(addr, "/readyz") {
            Some((200, body)) => break body,
            other => assert!(
                Instant::now() < deadline,
                "/readyz not 200 after {WAIT:?}: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for flow in ["\"flow\":\"a->b\"", "\"flow\":\"b->a\""] {
        assert!(ready.contains(flow), "/readyz lists {flow}: {ready}");
    }
    let (status, metrics) = common::http_get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    for labels in ["source=\"a\",target=\"b\"", "source=\"b\",target=\"a\""] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("strait_records_total{") && l.contains(labels)),
            "/metrics has strait_records_total with {labels}:\n{metrics}"
        );
    }
    assert_eq!(
        metrics.matches("# TYPE strait_records counter").count(),
        1,
        "each metric family is described once"
    );
    let_refresh_run();
    rt.block_on(async {
        assert_exact(&a, &b).await;
        assert_no_loop(&a, &b, &log).await;
    });
    stop(process, &log);

    // 2. The same flows from mm2.properties: resumes from the same groups (strait-<src>-<dst>),
    // so the records written while no mirror ran arrive once, after the earlier ones.
    rt.block_on(async {
        for c in [&a, &b] {
            common::produce_numbered(c, "x", 0..PARTITIONS, 2 * PER_PHASE..3 * PER_PHASE).await;
        }
    });
    let props = dir.path().join("mm2.properties");
    std::fs::write(
        &props,
        format!(
            "clusters = a, b\na.bootstrap.servers = {}\nb.bootstrap.servers = {}\n\
             a->b.enabled = true\nb->a.enabled = true\na->b.topics = .*\nb->a.topics = .*\n\
             replication.factor = 1\nrefresh.topics.interval.seconds = 1\n",
            ca.bootstrap(),
            cb.bootstrap()
        ),
    )
    .unwrap();
    let log = dir.path().join("mm2.log");
    let process = spawn(
        &["mm2", props.to_str().unwrap()],
        &log,
        &[
            ("STRAIT_METRICS_LISTEN", ""),
            ("STRAIT_MIRROR_COMMIT_INTERVAL", "200ms"),
            ("STRAIT_MIRROR_SESSION_TIMEOUT", "6s"),
        ],
    );
    rt.block_on(async {
        wait_mirrored(&a, "strait-a-b", &log).await;
        wait_mirrored(&b, "strait-b-a", &log).await;
    });
    let_refresh_run();
    rt.block_on(async {
        assert_exact(&a, &b).await;
        assert_no_loop(&a, &b, &log).await;
    });
    stop(process, &log);

    // 3. A flow that cannot start (its target does not answer) is reported and retried while
    // the healthy flow keeps mirroring; stopping the process then exits non-zero.
    let dead = free_addr();
    let addr = free_addr();
    let toml = dir.path().join("dead.toml");
    std::fs::write(
        &toml,
        format!(
            "[clusters.a]\n\"bootstrap.servers\" = \"{}\"\n\n[clusters.b]\n\"bootstrap.servers\" = \"{}\"\n\n\
             [clusters.dead]\n\"bootstrap.servers\" = \"{dead}\"\n\n\
             [mirror]\nrename = \"prefix\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\nreplication_factor = 1\n\n\
             [[flows]]\nsource = \"a\"\ntarget = \"b\"\n\n\
             [[flows]]\nsource = \"a\"\ntarget = \"dead\"\n\n\
             [metrics]\nlisten = \"{addr}\"\n",
            ca.bootstrap(),
            cb.bootstrap()
        ),
    )
    .unwrap();
    let log = dir.path().join("dead.log");
    let mut process = spawn(&["run", "--config", toml.to_str().unwrap()], &log, &[]);
    common::wait_for_log(&log, "flow stopped on an error; restarting it in", WAIT);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .any(|l| l.contains("flow stopped on an error") && l.contains("a->dead")),
        "the error names the flow"
    );
    rt.block_on(async {
        common::produce_numbered(&a, "x", 0..PARTITIONS, 3 * PER_PHASE..4 * PER_PHASE).await;
        wait_mirrored(&a, "strait-a-b", &log).await;
        assert_exact(&a, &b).await;
    });
    let (status, body) = common::http_get(addr, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("flow a->dead: stopped on an error"), "{body}");
    let status = common::terminate(&mut process);
    assert_eq!(
        status.code(),
        // 4: a cluster cannot be reached (`strait --help` lists the codes).
        Some(4),
        "stopping while a flow is down exits with its error code; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
