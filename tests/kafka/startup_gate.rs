//! Issue 33 item 3: the first topic-config sync no longer stands between a large mirror and its
//! first record, and still comes before each topic's own first write.
//!
//! 256 source topics set `retention.ms`; their target topics exist without it, behind a 500 ms
//! round trip (the testkit's delay proxy), so this run's first config sync has 256 topics to
//! read on both clusters and alter on the target: several seconds of round trips. Before the
//! change the mirror joined its group only after that sync, so every target topic had the
//! retention before the first record arrived. Now each partition starts as soon as its own
//! topic is synced: when the first record arrives, some target topics are still unsynced, and
//! every topic that has records has the retention (never a write before its topic's sync).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::future::join_all;
use strait_testkit::{Cluster, Link};
use strait_wire::admin::{Admin, NewTopic};
use strait_wire::{Client, Isolation, OffsetSpec, TopicPartition};

const TOPICS: usize = 256;
const RETENTION: &str = "7200000";

fn name(i: usize) -> String {
    format!("sg-{i:03}")
}

async fn create(client: &Client, retention: bool) {
    let admin = Admin::new(client);
    let topics: Vec<NewTopic> = (0..TOPICS)
        .map(|i| {
            let t = NewTopic::new(name(i), 1, 1);
            match retention {
                true => t.with_config("retention.ms", RETENTION),
                false => t,
            }
        })
        .collect();
    for chunk in topics.chunks(100) {
        for (topic, r) in admin.create_topics(chunk, false).await.unwrap() {
            r.unwrap_or_else(|e| panic!("{topic}: {e}"));
        }
    }
    let all: Vec<(String, i32)> = (0..TOPICS).map(|i| (name(i), 1)).collect();
    assert!(
        admin
            .wait_for_all_leaders(&all, Duration::from_secs(120))
            .await
            .unwrap(),
        "the {TOPICS} topics got no leaders"
    );
}

/// The target topics that have records.
async fn written(target: &Client) -> Vec<String> {
    let tps: Vec<(TopicPartition, OffsetSpec)> = (0..TOPICS)
        .map(|i| (TopicPartition::new(name(i), 0).unwrap(), OffsetSpec::Latest))
        .collect();
    let listed = target
        .list_offsets(&tps, Isolation::ReadUncommitted)
        .await
        .unwrap();
    listed
        .into_iter()
        .filter(|l| l.offset.is_some_and(|o| o > 0))
        .map(|l| l.partition.topic().to_string())
        .collect()
}

/// The target topics whose retention is the source's.
async fn synced(target: &Client) -> Vec<String> {
    let admin = Admin::new(target);
    let reads = (0..TOPICS).map(|i| {
        let admin = admin.clone();
        async move {
            let c = admin.describe_topic_configs(&name(i)).await.unwrap();
            (c.value("retention.ms") == Some(RETENTION)).then(|| name(i))
        }
    });
    join_all(reads).await.into_iter().flatten().collect()
}

#[test]
fn the_first_record_does_not_wait_for_the_config_sync_of_other_topics() {
    let src_thread = std::thread::spawn(|| Cluster::builder("sg-src").start().expect("source"));
    let dst = Cluster::builder("sg-dst")
        .wan(Link::rtt(Duration::from_millis(500)))
        .start()
        .expect("target");
    let src = src_thread.join().unwrap();
    let wan_bootstrap = dst.wan_bootstrap().expect("the target has a WAN listener");

    let rt = runtime();
    let (src_c, dst_c) = rt.block_on(async {
        let src_c = client(&src).await;
        let dst_c = client(&dst).await;
        create(&src_c, true).await;
        create(&dst_c, false).await;
        for i in 0..TOPICS {
            produce_to_partitions(&src_c, &name(i), 0..1, 5).await;
        }
        (src_c, dst_c)
    });

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "sg",
        &src,
        &dst,
        "sg-.*",
        "sg-mirror",
        "sync_topic_configs_interval = \"10m\"\n",
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&dst.bootstrap(), &wan_bootstrap);
    std::fs::write(&config, text).unwrap();
    let (mut strait, log) = spawn_strait(&config, 0);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    rt.block_on(async {
        // The first record on the target (the test reads it directly, not over the delay).
        let deadline = Instant::now() + Duration::from_secs(180);
        let first = loop {
            let w = written(&dst_c).await;
            if !w.is_empty() {
                break w;
            }
            assert!(
                Instant::now() < deadline,
                "no record mirrored: {}",
                log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let synced_then = synced(&dst_c).await;
        // Each topic's sync came before its first write.
        for t in &first {
            assert!(
                synced_then.contains(t),
                "{t} has records but not the source's retention.ms"
            );
        }
        assert!(
            synced_then.len() < TOPICS,
            "all {TOPICS} target topics were synced before the first record arrived: the mirror \
             waited for the whole config sync ({} topics had records)",
            first.len()
        );

        // Then everything: every record, and every topic's retention.
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let (w, s) = (written(&dst_c).await, synced(&dst_c).await);
            if w.len() == TOPICS && s.len() == TOPICS {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {TOPICS} topics written, {} synced: {}",
                w.len(),
                s.len(),
                log_text()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        drop(src_c);
    });
    let status = terminate(&mut strait);
    assert!(status.success(), "{}", log_text());
    assert!(
        log_text().contains("first topic-config sync done"),
        "{}",
        log_text()
    );
}
