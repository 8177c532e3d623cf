//! Replication factor, `min.insync.replicas` and the periodic topic config sync against real
//! brokers. One pair of clusters for the whole file: `trio` (3 brokers, the testkit's
//! `min.insync.replicas=2`, and `default.replication.factor=1`, so a topic created with the
//! broker's default factor refuses every acks=all write) and `solo` (1 broker). Three flows run
//! side by side:
//!
//! 1. trio -> trio (prefix renaming, so source and target are distinct topics on one 3-broker
//!    cluster): `orders` (RF 3, min ISR 2, retention set) becomes `src.orders` with RF 3, min
//!    ISR 2 and the retention; the key `mirror.topic_configs_exclude` names is not copied,
//!    and that list replaces the default one.
//! 2. trio -> solo: `orders` is created with RF 1 (capped, warned) and min ISR 1 (lowered,
//!    warned); writes succeed; a key of the default exclude list is not copied.
//! 3. solo -> trio: `legacy` (RF 1, no overrides) is created with RF 1 on the trio, whose
//!    default min ISR 2 would refuse every write: the topic gets min ISR 1 and mirroring works.
//!
//! Then `retention.ms` changes on the source and reaches both targets within the (2 s) sync
//! interval, while the excluded key stays untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster};
use strait_wire::Client;
use strait_wire::admin::{Admin, AlterConfigOp};

const MIN_ISR: &str = "min.insync.replicas";

/// The replica count of every partition of `topic`.
async fn replication_factors(client: &Client, topic: &str) -> Vec<usize> {
    let md = client.metadata(Some(&[topic.to_string()])).await.unwrap();
    let t = md.topic(topic).expect("topic exists");
    t.partitions.iter().map(|p| p.replicas.len()).collect()
}

/// The topic's value of `key` as the broker reports it.
async fn config_value(client: &Client, topic: &str, key: &str) -> Option<String> {
    Admin::new(client)
        .describe_topic_configs(topic)
        .await
        .unwrap()
        .value(key)
        .map(str::to_string)
}

/// Whether the topic itself overrides `key` (not a broker or Kafka default).
async fn overridden(client: &Client, topic: &str, key: &str) -> bool {
    Admin::new(client)
        .describe_topic_configs(topic)
        .await
        .unwrap()
        .get(key)
        .is_some_and(|e| !e.is_default())
}

async fn wait_for_config(client: &Client, topic: &str, key: &str, want: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = config_value(client, topic, key).await;
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {key} is {got:?}, not {want}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn log_text(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn replication_factor_min_isr_and_periodic_config_sync() {
    let trio_thread = std::thread::spawn(|| {
        Cluster::builder("tc-trio")
            .nodes(3)
            .broker_config("default.replication.factor", "1")
            .start()
            .expect("3-node cluster")
    });
    let solo = Cluster::builder("tc-solo").start().expect("1-node cluster");
    let trio = trio_thread.join().unwrap();

    trio.admin(&[
        AdminOp::CreateTopic {
            name: "orders".into(),
            partitions: 2,
            replication: 3,
            configs: vec![
                (MIN_ISR.into(), "2".into()),
                ("retention.ms".into(), "7200000".into()),
                ("retention.bytes".into(), "1073741824".into()),
                ("unclean.leader.election.enable".into(), "true".into()),
            ],
        },
        AdminOp::wait_isr("orders", 3),
    ])
    .unwrap();
    solo.create_topic("legacy", 2, 1, &[]).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let fast = "sync_topic_configs_interval = \"2s\"\n";
    // 1: one 3-broker cluster to itself (prefix renaming), retention.bytes excluded.
    let same = write_config(
        dir.path(),
        "same",
        &trio,
        &trio,
        "orders",
        "tc-same",
        &format!("rename = \"prefix\"\n{fast}topic_configs_exclude = [\"retention\\\\.bytes\"]\n"),
    );
    // 2: to a 1-broker cluster, default exclude list.
    let down = write_config(dir.path(), "down", &trio, &solo, "orders", "tc-down", fast);
    // 3: from the 1-broker cluster up to the 3-broker one.
    let up = write_config(dir.path(), "up", &solo, &trio, "legacy", "tc-up", fast);

    let rt = runtime();
    rt.block_on(async {
        produce_to_partitions(&client(&trio).await, "orders", 0..2, 500).await;
        produce_to_partitions(&client(&solo).await, "legacy", 0..2, 500).await;
    });
    let (mut same_p, same_log) = spawn_strait(&same, 0);
    let (mut down_p, down_log) = spawn_strait(&down, 0);
    let (mut up_p, up_log) = spawn_strait(&up, 0);

    rt.block_on(async {
        let trio_c = client(&trio).await;
        let solo_c = client(&solo).await;
        let orders = end_offsets(&trio_c, "orders", 2).await;
        let legacy = end_offsets(&solo_c, "legacy", 2).await;
        let within = Duration::from_secs(120);
        // Every record arrives: each created topic accepts the mirror's acks=all writes.
        wait_until_complete(&trio_c, "src.orders", &orders, within).await;
        wait_until_complete(&solo_c, "orders", &orders, within).await;
        wait_until_complete(&trio_c, "legacy", &legacy, within).await;

        // 1: the source's factor and min ISR on a 3-broker target whose default factor is 1.
        assert_eq!(replication_factors(&trio_c, "src.orders").await, [3, 3]);
        assert_eq!(
            config_value(&trio_c, "src.orders", MIN_ISR)
                .await
                .as_deref(),
            Some("2")
        );
        assert!(overridden(&trio_c, "src.orders", "retention.ms").await);
        assert_eq!(
            config_value(&trio_c, "src.orders", "retention.ms")
                .await
                .as_deref(),
            Some("7200000")
        );
        // Excluded here (mirror.topic_configs_exclude). The list replaces the default one (as
        // MM2's config.properties.exclude does), so a key only the default excludes is copied.
        assert!(!overridden(&trio_c, "src.orders", "retention.bytes").await);
        assert_eq!(
            config_value(&trio_c, "src.orders", "unclean.leader.election.enable")
                .await
                .as_deref(),
            Some("true")
        );

        // 2: capped to the single broker, min ISR lowered to fit, both said in the log.
        assert_eq!(replication_factors(&solo_c, "orders").await, [1, 1]);
        assert_eq!(
            config_value(&solo_c, "orders", MIN_ISR).await.as_deref(),
            Some("1")
        );
        assert_eq!(
            config_value(&solo_c, "orders", "retention.bytes")
                .await
                .as_deref(),
            Some("1073741824")
        );
        assert!(!overridden(&solo_c, "orders", "unclean.leader.election.enable").await);
        let text = log_text(&down_log);
        assert!(
            text.contains("has replication factor 3 but the target cluster has 1 broker(s)")
                && text.contains("mirror.replication_factor"),
            "no cap warning: {text}"
        );
        assert!(
            text.contains("lowered from the source topic's 2 to 1"),
            "no min ISR warning: {text}"
        );

        // 3: RF 1 from the source, and its own min ISR below the cluster's default 2.
        assert_eq!(replication_factors(&trio_c, "legacy").await, [1, 1]);
        assert_eq!(
            config_value(&trio_c, "legacy", MIN_ISR).await.as_deref(),
            Some("1")
        );
        assert!(
            log_text(&up_log).contains("lowered from the target cluster's default 2 to 1"),
            "no min ISR warning: {}",
            log_text(&up_log)
        );

        // A change on the source reaches both targets within the sync interval; the
        // excluded key stays as it is on flow 1's target.
        Admin::new(&trio_c)
            .incremental_alter_topic_configs(
                "orders",
                &[
                    AlterConfigOp::Set {
                        name: "retention.ms".into(),
                        value: "3600000".into(),
                    },
                    AlterConfigOp::Set {
                        name: "retention.bytes".into(),
                        value: "2147483648".into(),
                    },
                ],
            )
            .await
            .unwrap();
        let within = Duration::from_secs(60);
        wait_for_config(&trio_c, "src.orders", "retention.ms", "3600000", within).await;
        wait_for_config(&solo_c, "orders", "retention.ms", "3600000", within).await;
        wait_for_config(&solo_c, "orders", "retention.bytes", "2147483648", within).await;
        // One IncrementalAlterConfigs carries every changed key, so the round that brought
        // retention.ms would have brought retention.bytes too.
        assert!(!overridden(&trio_c, "src.orders", "retention.bytes").await);
        // The lowered min ISR is not raised back by the sync.
        assert_eq!(
            config_value(&solo_c, "orders", MIN_ISR).await.as_deref(),
            Some("1")
        );
        assert!(log_text(&same_log).contains("copied changed topic configs"));
    });
    for (p, log) in [
        (&mut same_p, &same_log),
        (&mut down_p, &down_log),
        (&mut up_p, &up_log),
    ] {
        let status = terminate(p);
        assert!(status.success(), "{}", log_text(log));
    }
}
