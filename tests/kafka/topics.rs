//! Topic handling of the binary against real brokers: `strait check` prints the plan; `strait
//! run` creates missing target topics with the source's partition count and topic configs,
//! picks up new topics and partition increases without a restart; MirrorMaker 1 options work
//! as a drop-in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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
    let out = StraitCommand::new(["check", "--config"])
        .arg(&config)
        .output();
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

    let rt = runtime();
    // Explicit partitions: a keyless producer may leave partitions empty.
    rt.block_on(async {
        produce_to_partitions(&client(&source).await, "orders", 0..3, 1_000).await;
    });
    let (mut child, log) = spawn_strait(&config, 0);
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
        // Produce to every partition, the new ones included, once they have leaders.
        assert!(
            Admin::new(&src)
                .wait_for_leaders("orders", 5, Duration::from_secs(30))
                .await
                .unwrap()
        );
        // A new matching topic is picked up without a restart.
        source.create_topic("payments", 2, 1, &[]).unwrap();
        produce_to_partitions(&src, "orders", 0..5, 1_000).await;
        produce_to_partitions(&src, "payments", 0..2, 500).await;
        let orders = end_offsets(&src, "orders", 5).await;
        assert_eq!(orders, [2_000, 2_000, 2_000, 1_000, 1_000]);
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
    let rt = runtime();
    rt.block_on(async {
        produce_to_partitions(&client(&source).await, "legacy-app", 0..2, 1_000).await;
    });
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
    let mut cmd = StraitCommand::new(["mirror-maker", "--consumer.config"])
        .arg(&consumer)
        .arg("--producer.config")
        .arg(&producer)
        .arg("--whitelist")
        .arg("legacy-.*")
        .arg("--offset.commit.interval.ms")
        .arg("500");
    cmd.command()
        .env("STRAIT_METRICS_LISTEN", "")
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd.spawn();
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
