//! `strait status` against an instance's real HTTP endpoints (`strait::http` serving a
//! `Metrics` fed a lag and a `Readiness` with a stopped partition): the table, the JSON and the
//! exit codes (0 ready, 1 not ready, 4 unreachable).

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::StraitCommand;
use strait::observe::health::partition_problems;
use strait::observe::http::{self, Liveness, Readiness};
use strait::observe::lag::Lag;
use strait::observe::metrics::Metrics;
use strait_wire::TopicPartition;
use tokio_util::sync::CancellationToken;

fn status(args: &[&str]) -> std::process::Output {
    let mut cmd = StraitCommand::new(["status"]);
    cmd.command().env_clear().args(args);
    cmd.output()
}

#[test]
fn status_prints_readiness_and_lag_of_a_running_instance() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _entered = rt.enter();
    let metrics = Arc::new(Metrics::new());
    let (p0, p1) = (
        TopicPartition::new("orders", 0).unwrap(),
        TopicPartition::new("orders", 1).unwrap(),
    );
    let now = Instant::now();
    metrics.record_end_offset(&p0, 100, now);
    metrics.record_end_offset(&p1, 50, now);
    metrics.update_lag(&[(p0.clone(), 90), (p1.clone(), 50)], now);
    let readiness = Readiness::default();
    readiness.set_ready();
    readiness.set_partitions(2, vec![]);
    let shutdown = CancellationToken::new();
    let listener = rt
        .block_on(http::bind("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = http::spawn(
        listener,
        metrics.clone(),
        readiness.clone(),
        Liveness::new(Duration::from_secs(30)),
        shutdown.clone(),
    )
    .unwrap();

    let o = status(&["--url", &url]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("status     ready\n"), "{out}");
    assert!(out.contains("partitions 2 assigned"), "{out}");
    assert!(out.contains("lag        10 records"), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("TOPIC"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "TOPIC",
            "PARTITION",
            "LAG_RECORDS",
            "LAG_SECONDS",
            "STATE",
            "REASON"
        ]
    );
    assert_eq!(rows[1][..3], ["orders", "0", "10"], "{out}");
    assert_eq!(rows[1][4], "ok", "{out}");
    assert_eq!(rows[2][..3], ["orders", "1", "0"], "{out}");

    // A stopped partition: not ready, exit 1, the reason on its row.
    let problems = partition_problems(
        &[(
            p0.clone(),
            Lag {
                acked: 90,
                records: Some(10),
                seconds: Some(3.0),
                since_progress: Duration::from_secs(1),
                end_age: Duration::ZERO,
            },
        )],
        &[(p0.clone(), "record too large".to_string())],
        &Default::default(),
        Duration::from_secs(60),
    );
    readiness.set_partitions(2, problems);
    let o = status(&["--url", &url]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("status     NOT READY: 1 of 2 assigned"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("orders  0")
            && l.contains("stopped")
            && l.contains("record too large")),
        "{out}"
    );
    let o = status(&["--url", &url, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["ready"], false);
    assert_eq!(doc["lag_records"], 10);
    assert_eq!(doc["partitions"][0]["state"], "stopped");

    shutdown.cancel();
    rt.block_on(server.stopped());
    // Nothing listens there any more.
    let o = status(&["--url", &url]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is strait running there"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
