//! Exactly-once mirroring into a target that denies the mirror's transactional ids (issue 12:
//! clear errors for what a user can get wrong), against real Kafka.
//!
//! The target (mTLS, one broker) grants the mirror's user what at-least-once mirroring needs
//! (Write, Create, Describe on the topic; Read, Describe on the group `mirror.group_id`) but
//! neither Write and Describe on its transactional ids (`<group_id>-<topic>-<partition>`) nor
//! Read on the topic.
//! An exactly-once `strait run` mirrors a topic of known records (explicit partitions). While
//! the ids are denied:
//! * the process stays up, and within 90 s its log names the denial
//!   (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), the principal, and the fix: the `kafka-acls.sh`
//!   command for the denied id, and the one prefixed ACL (`--transactional-id <prefix>
//!   --resource-pattern-type prefixed`, prefix `<mirror.group_id>-`) that grants them all;
//! * no retry storm: over 20 s the denial is logged a few times per partition, not hundreds;
//! * `/readyz` answers 503 and names the partitions as `blocked` with the error code;
//! * nothing reaches the target (its end offsets stay 0, so a `read_committed` reader sees
//!   nothing either).
//!
//! Then Write and Describe on the prefix are granted. The user still lacks Read on the target
//! topic, which Kafka checks for TxnOffsetCommit: each route's first commit is refused
//! (TOPIC_AUTHORIZATION_FAILED). That is reported the same way (not a silent stall: the route
//! used to wait forever for its quiet source before its error surfaced), the open transaction
//! is aborted, and a `read_committed` reader still sees nothing.
//!
//! Then Read on the topic is granted, and the mirror heals by itself (no restart): the
//! positions stored on the target reach the source's end offsets, and Kafka's Java console
//! consumer reading `read_committed` sees every record exactly once, in order per partition.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- eos_denied:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster, ConsumeOptions, Listener, Resource};
use strait_wire::{Client, ClientConfig, TopicPartition};

const TOPIC: &str = "ledger";
const PARTITIONS: i32 = 3;
const RECORDS: usize = 50;
const MIRROR_GROUP: &str = "strait-eos-denied";
const USER: &str = "eos-mirror";
const DENIAL: &str = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED";

/// A client with the cluster's admin certificate (a super user).
async fn admin(cluster: &Cluster) -> Client {
    Client::connect(
        ClientConfig::from_properties(cluster.client_properties(Listener::Ssl, None)).unwrap(),
    )
    .await
    .unwrap()
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

fn count(log: &Path, line: impl Fn(&str) -> bool) -> usize {
    log_text(log).lines().filter(|l| line(l)).count()
}

/// A loopback port nothing listens on right now.
fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn readyz(addr: SocketAddr) -> Option<(u16, serde_json::Value)> {
    let (status, body) = http_get(addr, "/readyz")?;
    Some((status, serde_json::from_str(&body).ok()?))
}

fn partitions() -> Vec<TopicPartition> {
    (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p).unwrap())
        .collect()
}

/// What Kafka's console consumer reads from the target `read_committed`, per partition, as the
/// numbers produce_numbered wrote ("<partition>-<n>").
fn consume_committed(target: &Cluster, max: usize) -> BTreeMap<i32, Vec<usize>> {
    let mut props = target.client_properties(Listener::Ssl, None);
    props.push(("isolation.level".into(), "read_committed".into()));
    let lines = target
        .console_consume_with(
            TOPIC,
            max,
            &props,
            &ConsumeOptions::default().timeout(Duration::from_secs(20)),
        )
        .unwrap();
    common::numbers_by_partition(lines)
}

#[test]
fn denied_transactional_ids_are_reported_and_heal_once_granted() {
    let principal = format!("User:{USER}");
    let (source, target) = std::thread::scope(|s| {
        let src = s.spawn(|| {
            let c = Cluster::builder("eosd-src")
                .start()
                .expect("source cluster");
            c.admin(&[AdminOp::topic(TOPIC, PARTITIONS, 1)]).unwrap();
            c
        });
        let dst = Cluster::builder("eosd-dst")
            .mtls()
            .user(USER, "secret")
            .start()
            .expect("target cluster");
        // What at-least-once needs, and Read on the group the transactions store positions
        // in. No right on any transactional id, no Read on the topic (Kafka checks it for
        // TxnOffsetCommit): both are granted later, one after the other.
        dst.admin(&[
            AdminOp::topic(TOPIC, PARTITIONS, 1),
            AdminOp::allow(
                &principal,
                Resource::Topic(TOPIC.into()),
                &["Write", "Create", "Describe", "DescribeConfigs"],
            ),
            AdminOp::allow(
                &principal,
                Resource::Group(MIRROR_GROUP.into()),
                &["Read", "Describe"],
            ),
        ])
        .unwrap();
        (src.join().unwrap(), dst)
    });
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(admin(&target));
    rt.block_on(produce_numbered(&src, TOPIC, 0..PARTITIONS, 0..RECORDS));
    let ends = rt.block_on(end_offsets(&src, TOPIC, PARTITIONS));
    assert_eq!(ends, vec![RECORDS as i64; PARTITIONS as usize]);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    let metrics = free_port();
    std::fs::write(
        &config,
        format!(
            "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{}\"\n\n[target]\n{}\n\
             [mirror]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"{MIRROR_GROUP}\"\nstart = \"earliest\"\n\
             refresh_interval = \"1s\"\ncommit_interval = \"200ms\"\nsession_timeout = \"6s\"\n\
             exactly_once = true\ntransaction_interval = \"200ms\"\n\n\
             [metrics]\nlisten = \"{metrics}\"\nlag_interval = \"1s\"\n",
            source.bootstrap(),
            mtls_section(&target, "dst", USER),
        ),
    )
    .unwrap();
    let started = Instant::now();
    let log = config.with_extension("log");
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(&config);
    cmd.command()
        .env(
            "RUST_LOG",
            "info,strait_wire::txn_producer=debug,strait_forward::pipeline=debug",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut strait = cmd.spawn();

    // 1. The denial is reported, with the fix, and the process stays up.
    wait_for_log(&log, "access denied; retrying", Duration::from_secs(90));
    let first = Instant::now();
    eprintln!(
        "denial logged {:.1} s after the start",
        (first - started).as_secs_f64()
    );
    let text = log_text(&log);
    let line = text
        .lines()
        .find(|l| l.contains("access denied; retrying") && l.contains(DENIAL))
        .unwrap()
        .to_string();
    eprintln!("first denial line:\n{line}");
    // The principal, the id, the command, and the prefixed ACL that grants every partition's id.
    for needle in [
        "User:CN=eos-mirror may not Write TransactionalId:",
        &format!(
            "--allow-principal User:CN=eos-mirror --operation Write --transactional-id {MIRROR_GROUP}-{TOPIC}-"
        ),
        "--transactional-id <prefix> --resource-pattern-type prefixed",
        "<mirror.group_id>-<topic>-<partition>",
    ] {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }

    // 2. No retry storm, 3. /readyz names the denial, 4. nothing on the target.
    let deadline = first + Duration::from_secs(20);
    let mut blocked_seen: Option<serde_json::Value> = None;
    while Instant::now() < deadline {
        assert!(
            strait.try_wait().unwrap().is_none(),
            "strait exited; log:\n{}",
            log_text(&log)
        );
        if let Some((status, body)) = readyz(metrics)
            && status == 503
            && body.to_string().contains(DENIAL)
        {
            blocked_seen = Some(body);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let body = blocked_seen.unwrap_or_else(|| {
        panic!(
            "/readyz never named the denial: {:?}; log:\n{}",
            readyz(metrics),
            log_text(&log)
        )
    });
    eprintln!("/readyz while denied: {body}");
    let blocked: Vec<i64> = body["not_ready_partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "blocked" && p["topic"] == TOPIC)
        .map(|p| p["partition"].as_i64().unwrap())
        .collect();
    assert!(!blocked.is_empty(), "no blocked partition in {body}");
    // Reported when it starts, then at attempts 2, 4, 8...; each attempt is one request
    // the broker refuses (logged at debug by the transactional producer).
    let reported = count(&log, |l| {
        l.contains("denied; retrying") && l.contains(DENIAL)
    });
    let refused = count(&log, |l| {
        l.contains("transaction request failed") && l.contains(DENIAL)
    });
    eprintln!(
        "in the first {:.0} s: {reported} log lines report the denial, {refused} requests refused",
        (Instant::now() - started).as_secs_f64()
    );
    assert!(
        (PARTITIONS as usize..=4 * PARTITIONS as usize).contains(&reported),
        "the denial is reported a few times per partition, not {reported}; log:\n{}",
        log_text(&log)
    );
    assert!(
        refused <= 10 * PARTITIONS as usize,
        "retry storm: {refused} refused requests; log:\n{}",
        log_text(&log)
    );
    assert_eq!(
        count(&log, |l| l.contains("panicked")),
        0,
        "a panic:\n{}",
        log_text(&log)
    );
    assert_eq!(
        rt.block_on(end_offsets(&dst, TOPIC, PARTITIONS)),
        vec![0; PARTITIONS as usize],
        "nothing may reach the target while the transactional ids are denied"
    );

    // 5. Grant Write and Describe on the prefix: the mirror heals by itself.
    target
        .admin(&[AdminOp::allow(
            &principal,
            Resource::TransactionalIdPrefix(format!("{MIRROR_GROUP}-")),
            &["Write", "Describe"],
        )])
        .unwrap();
    eprintln!("granted Write, Describe on transactional ids prefixed {MIRROR_GROUP}-");

    // 6. TxnOffsetCommit is refused without Read on the topic: reported, nothing visible.
    let topic_denial = "TOPIC_AUTHORIZATION_FAILED";
    let deadline = Instant::now() + Duration::from_secs(90);
    while count(&log, |l| {
        l.contains("access denied; retrying") && l.contains(topic_denial)
    }) == 0
    {
        assert!(
            Instant::now() < deadline,
            "a refused TxnOffsetCommit was never reported; log:\n{}",
            log_text(&log)
        );
        assert!(
            strait.try_wait().unwrap().is_none(),
            "strait exited; log:\n{}",
            log_text(&log)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let line = log_text(&log)
        .lines()
        .find(|l| l.contains("access denied; retrying") && l.contains(topic_denial))
        .unwrap()
        .to_string();
    eprintln!("refused TxnOffsetCommit reported:\n{line}");
    assert!(
        line.contains(&format!("Topic:{TOPIC}")),
        "the line names the topic: {line}"
    );
    assert!(
        consume_committed(&target, 1).values().all(Vec::is_empty),
        "nothing may become visible while the offsets cannot be stored"
    );
    target
        .admin(&[AdminOp::allow(
            &principal,
            Resource::Topic(TOPIC.into()),
            &["Read"],
        )])
        .unwrap();
    let granted = Instant::now();
    eprintln!("granted Read on topic {TOPIC}");
    let tps = partitions();
    wait_for_group_offsets(
        &rt,
        &dst,
        MIRROR_GROUP,
        &tps,
        "the stored positions reaching the source's end offsets after the grant",
        &log,
        |now| now == ends.as_slice(),
    );
    eprintln!(
        "healed {:.1} s after the grant",
        granted.elapsed().as_secs_f64()
    );
    assert!(
        strait.try_wait().unwrap().is_none(),
        "strait exited; log:\n{}",
        log_text(&log)
    );
    let committed = consume_committed(&target, RECORDS * PARTITIONS as usize);
    for p in 0..PARTITIONS {
        assert_eq!(
            committed.get(&p).cloned().unwrap_or_default(),
            (0..RECORDS).collect::<Vec<_>>(),
            "partition {p}: read_committed must see every record once, in order"
        );
    }
    assert!(count(&log, |l| l.contains("access granted again; resuming")) >= 1);
    assert_eq!(
        count(&log, |l| l.contains("partition stopped")),
        0,
        "no partition stopped"
    );
    let status = terminate(&mut strait);
    assert!(status.success(), "strait exited with {status}");
}
