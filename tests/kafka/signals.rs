//! Signals an operator can trust (issue 18), with real brokers and a real `strait run` scraped
//! over HTTP:
//! * lag keeps growing in `/metrics` while the target is down and records keep arriving on the
//!   source (data fetched but not acknowledged counts), readiness turns false when the partition
//!   stops making progress and true again once the target is back and the mirror caught up;
//! * a partition stopped on an error makes `/readyz` answer 503 naming it;
//! * records deleted by retention before they were mirrored, skipped with
//!   `on_offset_out_of_range = "earliest"`, are counted exactly in `strait_records_lost_total`;
//!   a target topic deleted behind the mirror's back is reported as a loss event;
//! * a partition blocked by a missing Write grant is not ready until the grant exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{client, clusters, end_offsets, http_get, produce_monotonic, runtime};
use strait_forward::GroupPositions;
use strait_forward::pipeline::Positions;
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::{Client, ClientConfig, Isolation, OffsetSpec, TopicPartition};

/// A `strait run` that is killed when dropped, so a failing test leaves nothing running.
struct Mirror {
    child: Child,
    log: PathBuf,
    metrics: SocketAddr,
}

impl Mirror {
    fn start(config: &Path, metrics: SocketAddr) -> Mirror {
        let log = config.with_extension("log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(common::strait_bin())
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start strait");
        Mirror {
            child,
            log,
            metrics,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics, path)
    }

    /// The value of one sample (`name{labels}` exactly as exposed), if present.
    fn sample(&self, series: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics")?;
        sample(&text, series)
    }

    fn readyz(&self) -> Option<(u16, serde_json::Value)> {
        let (status, body) = self.get("/readyz")?;
        Some((status, serde_json::from_str(&body).ok()?))
    }

    /// Polls `f` every 250 ms until it returns `Some`, failing after `timeout` with `what`, the
    /// last scrape and the log tail.
    fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Self) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "strait exited ({status}) while waiting for {what}:\n{}",
                    tail(&self.log(), 40)
                );
            }
            if Instant::now() > deadline {
                let ready = self.get("/readyz").map(|r| r.1).unwrap_or_default();
                panic!(
                    "{what}: not within {timeout:?}\n/readyz: {ready}\nlog:\n{}",
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGTERM and a bounded wait; the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "strait did not exit within 60 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// A loopback port nothing listens on right now.
fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn lag_series(topic: &str, partition: i32) -> String {
    format!("strait_partition_lag_records{{topic=\"{topic}\",partition=\"{partition}\"}}")
}

/// The not-ready partitions of a `/readyz` body as (topic, partition, state).
fn not_ready(body: &serde_json::Value) -> Vec<(String, i64, String)> {
    body["not_ready_partitions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["topic"].as_str().unwrap_or_default().to_string(),
                        p["partition"].as_i64().unwrap_or(-1),
                        p["state"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A strait.toml for plaintext clusters with the metrics listener on `metrics`.
fn config(
    dir: &Path,
    source: &Cluster,
    target: &Cluster,
    topics: &str,
    group: &str,
    metrics: SocketAddr,
    extra: &str,
) -> PathBuf {
    let path = dir.join(format!("{group}.toml"));
    std::fs::write(
        &path,
        format!(
            "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{}\"\n\n[target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{}\"\n\n\
             [mirror]\ntopics = [\"{topics}\"]\ngroup_id = \"{group}\"\nstart = \"earliest\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\n{extra}\n\
             [metrics]\nlisten = \"{metrics}\"\nlag_interval = \"1s\"\nstall_timeout = \"3s\"\n",
            source.bootstrap(),
            target.bootstrap()
        ),
    )
    .unwrap();
    path
}

#[test]
fn lag_grows_while_the_target_is_down_and_readiness_follows_progress() {
    let (source, mut target) = clusters("lagsig");
    let topic = "lag-t";
    source.create_topic(topic, 1, 1, &[]).unwrap();
    produce_monotonic(&source, topic, 2_000, -1);
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let cfg = config(dir.path(), &source, &target, topic, "lagsig", metrics, "");
    let mut mirror = Mirror::start(&cfg, metrics);
    let series = lag_series(topic, 0);

    // Caught up and ready.
    mirror.wait_for("caught up and ready", Duration::from_secs(120), |m| {
        let ready = m.readyz()?.0 == 200;
        (ready && m.sample(&series)? == 0.0).then_some(())
    });

    // The target goes away; the source keeps receiving records.
    target.stop_node(1).unwrap();
    let stopped_at = Instant::now();
    let total_after = std::thread::scope(|s| {
        let producer = s.spawn(|| produce_monotonic(&source, topic, 20_000, 2_000));
        // Growing lag within seconds: two scrapes, the later one larger, both well above 0.
        let first = mirror.wait_for("lag above 500 records", Duration::from_secs(60), |m| {
            m.sample(&series).filter(|&v| v >= 500.0)
        });
        let later = mirror.wait_for("lag growing further", Duration::from_secs(60), |m| {
            m.sample(&series).filter(|&v| v >= first + 500.0)
        });
        eprintln!(
            "lag with the target down: {first} then {later} records ({:.1?} after the stop)",
            stopped_at.elapsed()
        );
        let total = mirror.sample("strait_lag_records").unwrap();
        assert!(
            total >= later,
            "the total ({total}) includes the partition ({later})"
        );
        let seconds = mirror.sample(&format!(
            "strait_partition_lag_seconds{{topic=\"{topic}\",partition=\"0\"}}"
        ));
        assert!(
            seconds.is_some_and(|s| s > 0.0),
            "lag in seconds: {seconds:?}"
        );
        // No progress while behind for longer than stall_timeout (3 s): not ready, saying why.
        let body = mirror.wait_for(
            "/readyz reports the stalled partition",
            Duration::from_secs(60),
            |m| {
                let (status, body) = m.readyz()?;
                (status == 503
                    && not_ready(&body).contains(&(topic.to_string(), 0, "stalled".to_string())))
                .then_some(body)
            },
        );
        eprintln!("/readyz with the target down: {body}");
        producer.join().expect("producer thread");
        22_000.0
    });

    // The target comes back: the mirror catches up, the lag returns to 0, ready again.
    target.start_node(1).unwrap();
    mirror.wait_for(
        "caught up and ready after the target returned",
        Duration::from_secs(240),
        |m| {
            let ready = m.readyz()?.0 == 200;
            (ready && m.sample(&series)? == 0.0).then_some(())
        },
    );
    let rt = runtime();
    let ends = rt.block_on(async { end_offsets(&client(&target).await, topic, 1).await });
    assert!(
        ends[0] as f64 >= total_after,
        "target end offset {ends:?} < {total_after}"
    );
    assert!(mirror.terminate().success(), "{}", tail(&mirror.log(), 40));
}

#[test]
fn losses_are_counted_and_a_stopped_partition_is_not_ready() {
    let (source, target) = clusters("losssig");
    let gap = "gap-t";
    let big = "big-t";
    let group = "losssig";
    source.create_topic(gap, 1, 1, &[]).unwrap();
    source.create_topic(big, 1, 1, &[]).unwrap();
    // The target refuses records larger than 4 KiB on `big`.
    target
        .create_topic(big, 1, 1, &[("max.message.bytes", "4096")])
        .unwrap();
    let (records, deleted) = (1_000i64, 300i64);
    produce_monotonic(&source, gap, records as u64, -1);
    let rt = runtime();
    rt.block_on(async {
        let src = client(&source).await;
        // The mirror's group had mirrored nothing of `gap` (position 0) when retention struck.
        let tp = TopicPartition::new(gap, 0).unwrap();
        GroupPositions::new(&src, group).commit(&[(tp.clone(), 0)]).await.unwrap();
        let json = format!("{{\"version\":1,\"partitions\":[{{\"topic\":\"{gap}\",\"partition\":0,\"offset\":{deleted}}}]}}");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), json).unwrap();
        let out = source
            .java_tool(
                "org.apache.kafka.tools.DeleteRecordsCommand",
                &["--bootstrap-server", &source.bootstrap(), "--offset-json-file", &file.path().display().to_string()],
            )
            .unwrap();
        assert!(out.status.success(), "kafka-delete-records: {}", String::from_utf8_lossy(&out.stderr));
        let earliest = src
            .list_offsets(&[(tp, OffsetSpec::Earliest)], Isolation::ReadUncommitted)
            .await
            .unwrap();
        assert_eq!(earliest[0].offset, Some(deleted), "the source's log now starts at {deleted}");
    });
    // Small records first, then one the target cannot take.
    let mut lines: Vec<String> = (0..5).map(|i| format!("small-{i}")).collect();
    lines.push("x".repeat(10_000));
    source.console_produce(big, &lines, None).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let cfg = config(
        dir.path(),
        &source,
        &target,
        "(gap|big)-t",
        group,
        metrics,
        "on_offset_out_of_range = \"earliest\"\n",
    );
    let mut mirror = Mirror::start(&cfg, metrics);

    // Exactly the deleted records are counted as lost, the rest is mirrored.
    let lost_series = format!(
        "strait_records_lost_total{{topic=\"{gap}\",partition=\"0\",reason=\"offset_out_of_range\"}}"
    );
    let lost = mirror.wait_for("the retention gap counted", Duration::from_secs(120), |m| {
        m.sample(&lost_series)
    });
    assert_eq!(lost, deleted as f64, "records lost");
    let dst = rt.block_on(client(&target));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ends = rt.block_on(end_offsets(&dst, gap, 1));
        if ends[0] >= records - deleted {
            assert_eq!(
                ends[0],
                records - deleted,
                "the target holds what was left on the source"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "target {gap} incomplete: {ends:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        mirror.sample(&format!(
            "strait_loss_events_total{{topic=\"{gap}\",reason=\"offset_out_of_range\"}}"
        )),
        Some(1.0)
    );
    assert!(
        mirror.log().contains(&format!("{deleted} records lost")),
        "the log line counts the loss:\n{}",
        tail(&mirror.log(), 40)
    );

    // `big` stopped on the record too large for the target: not ready, naming it; `gap` is fine.
    let body = mirror.wait_for(
        "/readyz reports the stopped partition",
        Duration::from_secs(60),
        |m| {
            let (status, body) = m.readyz()?;
            (status == 503 && not_ready(&body) == [(big.to_string(), 0, "stopped".to_string())])
                .then_some(body)
        },
    );
    let reason = body["not_ready_partitions"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("max.message.bytes"), "{reason}");
    assert_eq!(body["assigned_partitions"], 2, "{body}");

    // The target topic `gap` is deleted behind the mirror's back: it is created again at the
    // next refresh, and that is reported as a loss.
    let out = target
        .java_tool(
            "org.apache.kafka.tools.TopicCommand",
            &[
                "--bootstrap-server",
                &target.bootstrap(),
                "--delete",
                "--topic",
                gap,
            ],
        )
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-topics --delete: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recreated =
        format!("strait_loss_events_total{{topic=\"{gap}\",reason=\"target_topic_recreated\"}}");
    mirror.wait_for(
        "the re-created target topic reported",
        Duration::from_secs(120),
        |m| m.sample(&recreated).filter(|&v| v == 1.0),
    );
    let log = mirror.log();
    assert!(
        log.contains("ERROR")
            && log.contains("every record mirrored into it before the deletion is gone"),
        "{}",
        tail(&log, 40)
    );
    drop(dst);
    mirror.terminate();
}

fn mtls_cluster(name: &str, user: &str) -> Cluster {
    Cluster::builder(name)
        .mtls()
        .user(user, "secret")
        .start()
        .unwrap()
}

fn toml_section(cluster: &Cluster, alias: &str, user: &str) -> String {
    let mut s = format!("alias = \"{alias}\"\n");
    for (k, v) in cluster.client_properties(Listener::Ssl, Some(user)) {
        s.push_str(&format!("\"{k}\" = \"{v}\"\n"));
    }
    s
}

#[test]
fn a_partition_blocked_by_a_missing_grant_is_not_ready_until_granted() {
    let (src_user, dst_user) = ("eu-user", "us-user");
    let (source, target) = {
        let s = std::thread::spawn(move || mtls_cluster("aclsig-src", src_user));
        let t = mtls_cluster("aclsig-dst", dst_user);
        (s.join().unwrap(), t)
    };
    let topic = "acl-t";
    let group = "aclsig";
    let src_principal = format!("User:{src_user}");
    let dst_principal = format!("User:{dst_user}");
    source
        .admin(&[
            AdminOp::topic(topic, 1, 1),
            AdminOp::allow(
                &src_principal,
                Resource::Topic(topic.into()),
                &["Read", "Describe"],
            ),
            AdminOp::allow(&src_principal, Resource::Group(group.into()), &["Read"]),
        ])
        .unwrap();
    // The target user may describe and create `acl-t` but not write it (Write on another topic
    // lets it get a producer id, KIP-679).
    target
        .admin(&[
            AdminOp::topic(topic, 1, 1),
            AdminOp::allow(
                &dst_principal,
                Resource::Topic(topic.into()),
                &["Describe", "Create", "DescribeConfigs"],
            ),
            AdminOp::allow(
                &dst_principal,
                Resource::Topic("other".into()),
                &["Write", "Describe"],
            ),
        ])
        .unwrap();
    source
        .console_produce(
            topic,
            &(0..10).map(|i| format!("r{i}")).collect::<Vec<_>>(),
            None,
        )
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let cfg = dir.path().join("acl.toml");
    std::fs::write(
        &cfg,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"{topic}\"]\ngroup_id = \"{group}\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\n\n[metrics]\nlisten = \"{metrics}\"\nlag_interval = \"1s\"\n\
             stall_timeout = \"3s\"\n",
            toml_section(&source, "europe", src_user),
            toml_section(&target, "us", dst_user),
        ),
    )
    .unwrap();
    let mut mirror = Mirror::start(&cfg, metrics);
    let body = mirror.wait_for(
        "/readyz reports the blocked partition",
        Duration::from_secs(120),
        |m| {
            let (status, body) = m.readyz()?;
            (status == 503 && not_ready(&body) == [(topic.to_string(), 0, "blocked".to_string())])
                .then_some(body)
        },
    );
    eprintln!("/readyz without the grant: {body}");
    assert!(
        body["not_ready_partitions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("TOPIC_AUTHORIZATION_FAILED"),
        "{body}"
    );
    assert_eq!(mirror.sample("strait_partitions_blocked"), Some(1.0));

    target
        .add_acls(&dst_principal, Resource::Topic(topic.into()), &["Write"])
        .unwrap();
    mirror.wait_for(
        "ready once the grant exists",
        Duration::from_secs(180),
        |m| {
            let ready = m.readyz()?.0 == 200;
            (ready && m.sample(&lag_series(topic, 0))? == 0.0).then_some(())
        },
    );
    assert_eq!(mirror.sample("strait_partitions_blocked"), Some(0.0));
    let rt = runtime();
    let ends = rt.block_on(async {
        let props = target.client_properties(Listener::Ssl, None);
        let admin: Client = Client::connect(ClientConfig::from_properties(props).unwrap())
            .await
            .unwrap();
        end_offsets(&admin, topic, 1).await
    });
    assert_eq!(ends, [10], "every record reached the target once granted");
    mirror.terminate();
}
