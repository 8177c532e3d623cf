//! `mirror.compression` re-compression between two real Kafka 4.x clusters (issue 33, item 4),
//! with `compression = zstd`:
//!
//! * `small`: small uncompressed batches (a producer with `linger.ms=0`), a few lz4 batches in
//!   the middle and the committed position inside the first batch;
//! * `large`: uncompressed batches of 60 records of 1 KiB (a producer that batches well: each
//!   compresses to more than the window's merge bar, so before runs each went alone).
//!
//! Every record arrives once, in order, with its key, value, headers and timestamp; the target
//! holds zstd batches only, several times fewer than the source's, and fewer bytes than
//! re-compressing each source batch alone would write; the committed position is the end.
//!
//! Run: `cargo test -p strait-forward --test kafka -- forward_recompress:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::broker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::*;
use strait_forward::{
    Compression, Forwarder, ProducerStamp, Route, Settings, TargetPolicy, reencode,
};
use strait_wire::admin::NewTopic;
use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Isolation, OffsetSpec};

const GROUP: &str = "strait-forward-recompress";
const BATCHES: usize = 300;
const PER_BATCH: usize = 18;
/// Batches of 60 records of 1 KiB in `large`.
const LARGE_BATCHES: usize = 40;
/// The committed position before the mirror starts: inside the first batch.
const START: i64 = 5;

/// A log line of about 100 bytes, varying from record to record as real logs do.
fn line(i: usize) -> Rec {
    let x = (i as u64)
        .wrapping_mul(6_364_136_223_846_793_005)
        .rotate_left(17);
    let value = format!(
        r#"{{"level":"{}","user":{},"path":"/api/v1/items/{}","ms":{}}}"#,
        ["INFO", "WARN", "DEBUG"][(x % 3) as usize],
        x % 10_000,
        (x >> 20) % 100_000,
        (x >> 40) % 900
    );
    Rec {
        key: (!i.is_multiple_of(7)).then(|| format!("host-{}", i % 13).into_bytes()),
        headers: if i.is_multiple_of(5) {
            vec![(b"trace".to_vec(), Some(format!("{x:x}").into_bytes()))]
        } else {
            vec![]
        },
        ..Rec::value(&value, 1_700_000_000_000 + i as i64)
    }
}

/// A record of about 1 KiB: ten log lines.
fn wide(i: usize) -> Rec {
    let values: Vec<String> = (i * 10..i * 10 + 10).map(|j| line(j).value_str()).collect();
    Rec {
        value: Some(format!("[{}]", values.join(",")).into_bytes()),
        ..line(i)
    }
}

/// What the source holds for `topic` from `from`, and what re-compressing each of its batches
/// alone to zstd writes (the behaviour before runs).
async fn source_side(
    src: &strait_wire::Client,
    topic: &strait_wire::TopicPartition,
    from: i64,
) -> (Vec<Rec>, usize, usize) {
    let (want, batches) = read_committed(src, topic, from).await;
    let policy = TargetPolicy {
        compression: Some(Compression::Zstd),
        ..TargetPolicy::default()
    };
    let one_by_one: usize = batches
        .iter()
        .flat_map(|b| reencode(b, from, ProducerStamp::NONE, &policy).unwrap())
        .map(|o| o.batch().size_in_bytes())
        .sum();
    (
        want.into_iter().map(|(_, r)| r).collect(),
        batches.len(),
        one_by_one,
    )
}

/// Waits for `want` on the target and checks the batches it came in.
async fn check_target(
    dst: &strait_wire::Client,
    topic: &strait_wire::TopicPartition,
    want: &[Rec],
    src_batches: usize,
    one_by_one: usize,
    fewer: usize,
) {
    let got = wait_records(dst, topic, want.len()).await;
    assert_same(&format!("{topic} re-compressed"), want, &got);
    let (_, dst_batches) = read_committed(dst, topic, 0).await;
    assert!(
        dst_batches
            .iter()
            .all(|b| b.compression() == Compression::Zstd),
        "{topic}: a batch is not zstd"
    );
    let written: usize = dst_batches.iter().map(|b| b.size_in_bytes()).sum();
    eprintln!(
        "{topic}: {src_batches} source batches -> {} target batches, {written} B (one by one: {one_by_one} B)",
        dst_batches.len()
    );
    assert!(
        dst_batches.len() * fewer <= src_batches,
        "{topic}: {} target batches for {src_batches} source batches: the runs were not merged",
        dst_batches.len(),
    );
    assert!(
        written < one_by_one,
        "{topic}: {written} B written, {one_by_one} B re-compressing batch by batch"
    );
}

#[test]
fn forward_recompress_merges_small_batches() {
    let began = Instant::now();
    let (source, target) = clusters("fwd-recompress");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let src = client(&source).await;
        let dst = client(&target).await;
        let logs = tp("small", 0);
        let large = tp("large", 0);
        let topics = [NewTopic::new("small", 1, 1), NewTopic::new("large", 1, 1)];
        create_topics(&src, &topics).await;
        create_topics(&dst, &topics).await;
        for b in 0..LARGE_BATCHES {
            let records: Vec<Rec> = (b * 60..(b + 1) * 60).map(wide).collect();
            produce(&src, &large, build_batch(&records, Compression::None)).await;
        }
        for b in 0..BATCHES {
            let records: Vec<Rec> = (b * PER_BATCH..(b + 1) * PER_BATCH).map(line).collect();
            // A few lz4 batches in the middle: a change of source codec ends a run.
            let codec = if (100..105).contains(&b) {
                Compression::Lz4
            } else {
                Compression::None
            };
            produce(&src, &logs, build_batch(&records, codec)).await;
        }
        GroupOffsets::new(&src, GROUP)
            .commit(
                &Generation::simple(),
                &[CommitOffset::new(logs.clone(), START)],
            )
            .await
            .unwrap();
        let (want, src_batches, one_by_one) = source_side(&src, &logs, START).await;
        assert_eq!(want.len(), BATCHES * PER_BATCH - START as usize);
        assert_eq!(src_batches, BATCHES);
        let (want_large, large_batches, large_one_by_one) = source_side(&src, &large, 0).await;
        assert_eq!(want_large.len(), LARGE_BATCHES * 60);
        assert_eq!(large_batches, LARGE_BATCHES);

        let mut settings = Settings::default();
        settings.commit_interval = Duration::from_millis(300);
        settings.compression = Some(Compression::Zstd);
        let fwd = Arc::new(
            Forwarder::builder()
                .source(config(&source))
                .target(config(&target))
                .group_id(GROUP)
                .settings(settings)
                .build()
                .await
                .unwrap(),
        );
        let route = |tp: &strait_wire::TopicPartition| Route {
            source: tp.clone(),
            target: tp.clone(),
        };
        fwd.assign(vec![route(&logs), route(&large)]).await.unwrap();
        check_target(&dst, &logs, &want, src_batches, one_by_one, 10).await;
        check_target(
            &dst,
            &large,
            &want_large,
            large_batches,
            large_one_by_one,
            4,
        )
        .await;

        fwd.shutdown().await.unwrap();
        assert!(fwd.failures().is_empty(), "{:?}", fwd.failures());
        let both = [logs.clone(), large.clone()];
        let committed = GroupOffsets::new(&src, GROUP).fetch(&both).await.unwrap();
        for p in &both {
            let end = offset(&src, p, OffsetSpec::Latest, Isolation::ReadCommitted).await;
            let c = committed.get(p).and_then(|c| c.as_ref()).map(|c| c.offset);
            assert_eq!(c, Some(end), "committed position of {p}");
        }
    });
    eprintln!("done after {:.1} s", began.elapsed().as_secs_f64());
}
