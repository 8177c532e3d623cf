//! Topic handling of the binary against real brokers: `strait check` prints the plan; `strait
//! run` creates missing target topics with the source's partition count and topic configs,
//! picks up new topics and partition increases without a restart; MirrorMaker 1 options work
//! as a drop-in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use strait_wire::admin::Admin;

#[test]
fn creates_topics_with_configs_follows_new_topics_and_partitions() {
    let (source, target) = clusters("topics");
    source
        .create_topic(
            "orders",
            3,
            1,
            &[
                ("retention.ms", "7200000"),
                ("segment.bytes", "1073741824"),
                ("max.message.bytes", "2000000"),
            ],
        )
        .unwrap();
    source.create_topic("ignored", 1, 1, &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "topics",
        &source,
        &target,
        "orders|payments",
        "topics-mirror",
        "",
    );

    // check: connects and prints the plan, creating nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("orders [3 partitions] -> orders (will be created)"),
        "plan missing: {stdout}"
    );
    assert!(
        !stdout.contains("ignored"),
        "unselected topic in the plan: {stdout}"
    );

    produce_monotonic(&source, "orders", 3_000, -1);
    let (mut child, log) = spawn_strait(&config, 0);
    let rt = runtime();
    rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        wait_until_complete(
            &dst,
            "orders",
            &end_offsets(&src, "orders", 3).await,
            Duration::from_secs(60),
        )
        .await;

        // Same partition count and the source's overrides.
        let md = dst
            .metadata(Some(&["orders".to_string(), "ignored".to_string()]))
            .await
            .unwrap();
        assert_eq!(md.topic("orders").unwrap().partitions.len(), 3);
        assert!(
            md.topic("ignored").is_none_or(|t| t.error.is_some()),
            "an unselected topic was created"
        );
        let configs = Admin::new(&dst)
            .describe_topic_configs("orders")
            .await
            .unwrap();
        assert_eq!(configs.value("retention.ms"), Some("7200000"));
        assert_eq!(configs.value("max.message.bytes"), Some("2000000"));

        // Partitions added on the source appear on the target, and their records arrive.
        Admin::new(&src)
            .create_partitions("orders", 5)
            .await
            .unwrap();
        // The Java producer below reads metadata once at start: let the new partitions settle
        // first, or it may only know the first three.
        assert!(
            Admin::new(&src)
                .wait_for_leaders("orders", 5, Duration::from_secs(30))
                .await
                .unwrap()
        );
        // A new matching topic is picked up without a restart.
        source.create_topic("payments", 2, 1, &[]).unwrap();
        produce_monotonic(&source, "orders", 5_000, -1);
        produce_monotonic(&source, "payments", 1_000, -1);
        let orders = end_offsets(&src, "orders", 5).await;
        assert!(
            orders[3] + orders[4] > 0,
            "the producer never wrote to the new partitions: {orders:?}"
        );
        wait_until_complete(&dst, "orders", &orders, Duration::from_secs(90)).await;
        wait_until_complete(
            &dst,
            "payments",
            &end_offsets(&src, "payments", 2).await,
            Duration::from_secs(90),
        )
        .await;
        let md = dst.metadata(Some(&["orders".to_string()])).await.unwrap();
        assert_eq!(md.topic("orders").unwrap().partitions.len(), 5);
        for topic in ["orders", "payments"] {
            let n = if topic == "orders" { 5 } else { 2 };
            let s = read_all(&src, topic, n).await;
            let d = read_all(&dst, topic, n).await;
            for p in 0..n {
                assert_complete_in_order(&s[&p], &d[&p], &format!("{topic}-{p}"));
            }
        }
    });
    let status = terminate(&mut child);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[test]
fn mirror_maker_1_options_are_a_drop_in() {
    let (source, target) = clusters("mm1");
    source.create_topic("legacy-app", 2, 1, &[]).unwrap();
    produce_monotonic(&source, "legacy-app", 2_000, -1);
    let dir = tempfile::tempdir().unwrap();
    let consumer = dir.path().join("consumer.properties");
    let producer = dir.path().join("producer.properties");
    std::fs::write(
        &consumer,
        format!("bootstrap.servers={}\ngroup.id=mm1-compat\nauto.offset.reset=earliest\nenable.auto.commit=false\n", source.bootstrap()),
    )
    .unwrap();
    std::fs::write(
        &producer,
        format!("bootstrap.servers={}\nacks=all\n", target.bootstrap()),
    )
    .unwrap();
    let log = dir.path().join("mm1.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(["mirror-maker", "--consumer.config"])
        .arg(&consumer)
        .arg("--producer.config")
        .arg(&producer)
        .args([
            "--whitelist",
            "legacy-.*",
            "--offset.commit.interval.ms",
            "500",
        ])
        .env("STRAIT_METRICS_LISTEN", "")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let rt = runtime();
    rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        wait_until_complete(
            &dst,
            "legacy-app",
            &end_offsets(&src, "legacy-app", 2).await,
            Duration::from_secs(60),
        )
        .await;
    });
    let status = terminate(&mut child);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{text}");
    // Consumer-only settings are reported, not silently dropped.
    assert!(
        text.contains("enable.auto.commit"),
        "ignored keys were not listed: {text}"
    );
}
