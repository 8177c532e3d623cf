//! The periodic topic config sync heals by itself once the missing rights are granted (real
//! brokers with mTLS and ACLs). The mirror's source user starts without DescribeConfigs on the
//! source topic, its target user without AlterConfigs on the target topic. Each failure is
//! logged once, as a warning naming the right, the resource and the cluster; `strait run` keeps
//! running; once both are granted, the source's `retention.ms` reaches the target and the
//! recovery is logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::admin::Admin;
use strait_wire::{Client, ClientConfig};

const TOPIC: &str = "my-topic";
const EUROPE_USER: &str = "cfg-europe-user";
const US_USER: &str = "cfg-us-user";

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

fn wait_for_count(log: &std::path::Path, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while count(log, needle) == 0 {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not logged within {within:?}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn config_sync_denials_are_reported_once_and_heal_once_granted() {
    let (europe, us) = std::thread::scope(|s| {
        let e = s.spawn(|| {
            let p = format!("User:{EUROPE_USER}");
            mtls(
                "cfgacl-europe",
                EUROPE_USER,
                &[
                    AdminOp::CreateTopic {
                        name: TOPIC.into(),
                        partitions: 1,
                        replication: 1,
                        configs: vec![("retention.ms".into(), "7200000".into())],
                    },
                    // No DescribeConfigs yet.
                    AdminOp::allow(&p, Resource::Topic(TOPIC.into()), &["Read", "Describe"]),
                    AdminOp::allow(&p, Resource::Group("cfgacl".into()), &["Read", "Describe"]),
                ],
            )
        });
        // No AlterConfigs yet.
        let u = mtls(
            "cfgacl-us",
            US_USER,
            &[AdminOp::allow(
                &format!("User:{US_USER}"),
                Resource::Topic(TOPIC.into()),
                &["Describe", "Create", "Write", "DescribeConfigs"],
            )],
        );
        (e.join().unwrap(), u)
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"cfgacl\"\n\
             refresh_interval = \"500ms\"\nsync_topic_configs_interval = \"1s\"\n\n\
             [metrics]\nlisten = \"\"\n",
            mtls_section(&europe, "europe", EUROPE_USER),
            mtls_section(&us, "us", US_USER),
        ),
    )
    .unwrap();
    let (mut strait, log) = spawn_strait(&config, 0);
    let within = Duration::from_secs(90);

    // 1. DescribeConfigs missing on the source: the topic is created with the target's
    //    defaults, and the sync says what to grant, once.
    let source_grant = "grant DescribeConfigs on Topic:my-topic on the source cluster";
    wait_for_count(&log, source_grant, within);
    let rt = runtime();
    let us_admin = rt.block_on(admin(&us));
    let retention = |client: &Client| {
        rt.block_on(async {
            Admin::new(client)
                .describe_topic_configs(TOPIC)
                .await
                .unwrap()
                .get("retention.ms")
                .filter(|e| !e.is_default())
                .and_then(|e| e.value.clone())
        })
    };
    assert_eq!(
        retention(&us_admin),
        None,
        "copied without DescribeConfigs?"
    );
    europe
        .admin(&[AdminOp::allow(
            &format!("User:{EUROPE_USER}"),
            Resource::Topic(TOPIC.into()),
            &["DescribeConfigs"],
        )])
        .unwrap();

    // 2. Now the copy is refused on the target: AlterConfigs is missing.
    let target_grant = "grant AlterConfigs on Topic:my-topic on the target cluster";
    wait_for_count(&log, target_grant, within);
    assert_eq!(retention(&us_admin), None);
    us.admin(&[AdminOp::allow(
        &format!("User:{US_USER}"),
        Resource::Topic(TOPIC.into()),
        &["AlterConfigs"],
    )])
    .unwrap();

    // 3. Healed without a restart.
    let deadline = Instant::now() + within;
    while retention(&us_admin).as_deref() != Some("7200000") {
        assert!(
            Instant::now() < deadline,
            "retention.ms not copied after AlterConfigs was granted: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    wait_for_count(&log, "topic config sync works again", within);
    // Each failure was a warning once, not once per interval (more than 3 rounds each).
    assert_eq!(count(&log, source_grant), 1, "source denial repeated");
    assert_eq!(count(&log, target_grant), 1, "target denial repeated");
    assert!(
        matches!(strait.try_wait(), Ok(None)),
        "strait stopped on a config sync denial"
    );
    let status = terminate(&mut strait);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
