//! ACL denials heal by themselves (issue 10 item 10): the reference scenario's target user
//! starts with Describe and Create on `my-topic` only. `strait run` does not exit and does not
//! stop the partitions: it reports the denial, retries with a slow backoff, and mirrors
//! everything once the grants exist, without a restart. First the producer id is denied (no
//! Write on any topic: Kafka 3.0+ (KIP-679) lets Write on any topic stand for IdempotentWrite),
//! then, with Write granted on another topic, every produce to `my-topic` is denied
//! (TOPIC_AUTHORIZATION_FAILED), until Write on `my-topic` is granted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::{Client, ClientConfig};

const TOPIC: &str = "my-topic";
const PARTITIONS: i32 = 3;
const EUROPE_USER: &str = "my-europe-user";
const US_USER: &str = "my-us-user";

fn mtls(name: &str, user: &str, acls: &[AdminOp]) -> Cluster {
    let c = Cluster::builder(name)
        .mtls()
        .user(user, "secret")
        .start()
        .expect("cluster");
    c.admin(acls).unwrap();
    c
}

/// A client with the cluster's admin certificate (a super user).
async fn admin(cluster: &Cluster) -> Client {
    Client::connect(
        ClientConfig::from_properties(cluster.client_properties(Listener::Ssl, None)).unwrap(),
    )
    .await
    .unwrap()
}

fn count(log: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(needle)
        .count()
}

#[test]
fn access_denied_on_the_target_heals_once_granted() {
    let (europe, us) = std::thread::scope(|s| {
        let e = s.spawn(|| {
            let p = format!("User:{EUROPE_USER}");
            mtls(
                "heal-europe",
                EUROPE_USER,
                &[
                    AdminOp::topic(TOPIC, PARTITIONS, 1),
                    AdminOp::allow(
                        &p,
                        Resource::Topic(TOPIC.into()),
                        &["Read", "Describe", "DescribeConfigs"],
                    ),
                    AdminOp::allow(&p, Resource::Group("heal".into()), &["Read", "Describe"]),
                ],
            )
        });
        let u = mtls(
            "heal-us",
            US_USER,
            &[AdminOp::allow(
                &format!("User:{US_USER}"),
                Resource::Topic(TOPIC.into()),
                &["Describe", "Create"],
            )],
        );
        (e.join().unwrap(), u)
    });
    let lines: Vec<String> = (0..60).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &lines, None).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"heal\"\n\
             refresh_interval = \"1s\"\ncommit_interval = \"200ms\"\nsession_timeout = \"6s\"\n\n\
             [metrics]\nlisten = \"\"\n",
            mtls_section(&europe, "europe", EUROPE_USER),
            mtls_section(&us, "us", US_USER),
        ),
    )
    .unwrap();
    let (mut strait, log) = spawn_strait(&config, 0);

    // 1. No Write anywhere: the producer id is denied; the process waits instead of exiting.
    wait_for_log(&log, "access denied", Duration::from_secs(90));
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");
    // The advice names the topic the mirror writes, as `strait check` does, not a placeholder.
    let text = std::fs::read_to_string(&log).unwrap();
    let denied = text
        .lines()
        .find(|l| l.contains("idempotent producer id"))
        .unwrap_or_else(|| panic!("no producer id denial in:\n{text}"));
    assert!(
        denied.contains(&format!(
            "it writes {TOPIC}: kafka-acls.sh --bootstrap-server <broker> --add \
             --allow-principal User:CN={US_USER} --operation Write --topic {TOPIC}"
        )),
        "{denied}"
    );
    assert!(!denied.contains("<topic>"), "{denied}");
    us.admin(&[AdminOp::allow(
        &format!("User:{US_USER}"),
        Resource::Topic("some-other-topic".into()),
        &["Write"],
    )])
    .unwrap();

    // 2. The producer id is granted; every produce to my-topic is denied, and retried.
    wait_for_log(
        &log,
        "strait::run::mirror: assigned",
        Duration::from_secs(90),
    );
    wait_for_log(&log, "TOPIC_AUTHORIZATION_FAILED", Duration::from_secs(90));
    let rt = runtime();
    let us_admin = rt.block_on(admin(&us));
    let europe_admin = rt.block_on(admin(&europe));
    let expected = rt.block_on(end_offsets(&europe_admin, TOPIC, PARTITIONS));
    assert_eq!(expected.iter().sum::<i64>(), 60);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        rt.block_on(end_offsets(&us_admin, TOPIC, PARTITIONS))
            .iter()
            .sum::<i64>(),
        0,
        "nothing written while denied"
    );
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");

    // 3. Write on my-topic: the partitions resume by themselves.
    us.admin(&[AdminOp::allow(
        &format!("User:{US_USER}"),
        Resource::Topic(TOPIC.into()),
        &["Write"],
    )])
    .unwrap();
    rt.block_on(wait_until_complete(
        &us_admin,
        TOPIC,
        &expected,
        Duration::from_secs(120),
    ));
    let source = rt.block_on(read_all(&europe_admin, TOPIC, PARTITIONS));
    let target = rt.block_on(read_all(&us_admin, TOPIC, PARTITIONS));
    for p in 0..PARTITIONS {
        assert_eq!(source[&p], target[&p], "partition {p}");
    }
    // Reported, not flooded: one line per partition when it started, a few "still denied".
    let denied = count(&log, "access denied");
    let still = count(&log, "still denied");
    eprintln!("log: {denied} 'access denied' lines, {still} 'still denied' lines");
    assert!(
        denied <= 1 + PARTITIONS as usize,
        "each denial is reported once: {denied}"
    );
    assert_eq!(count(&log, "partition stopped"), 0, "no partition stopped");
    assert!(count(&log, "access granted again; resuming") >= 1);
    let status = terminate(&mut strait);
    assert!(status.success(), "strait exited with {status}");
}
