//! The strait-forward pipeline (`Forwarder::builder()` over strait-wire) between two real Kafka
//! 4.x clusters, on the edge cases of forwarding.md §9 that need a real broker. One cluster pair
//! serves every scenario (distinct topics, one forwarder):
//!
//! * every codec (batches built by the Java producer: several records, null keys and values,
//!   duplicate header keys, null header values): byte-exact records, and pass-through really is
//!   pass-through (the target stores the source's compressed records section);
//! * old timestamps, headers and codecs in batches built here and produced with strait-wire;
//! * interleaved committed and aborted transactions of two Java transactional producers, with
//!   plain records between them: exactly the committed and plain records arrive;
//! * a committed position inside a batch: nothing before it arrives;
//! * a batch 1 byte over the target topic's max.message.bytes: split, every record arrives;
//! * a compacted source topic whose cleaned batches have offset gaps: the target accepts the
//!   re-encoded batches;
//! * a source offset deleted by DeleteRecords: the partition stops with an error naming
//!   mirror.on_offset_out_of_range, the others go on;
//! * a missing target topic: retried (not a failure) until it exists.
//!
//! Run: `cargo test -p strait-forward --test kafka -- forward_edge:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::broker;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::*;
use strait_forward::pipeline::Target;
use strait_forward::pipeline::io::FailureAction;
use strait_forward::{Compression, Forwarder, RecordBatch, Route, Settings, WireTarget};
use strait_testkit::Cluster;
use strait_wire::admin::NewTopic;
use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Client, Isolation, OffsetSpec};

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const GROUP: &str = "strait-forward-edge";
const TXN_ROUNDS: usize = 6;

#[test]
fn forward_edge_cases() {
    let began = Instant::now();
    let (source, target) = clusters("fwd-edge");
    eprintln!("clusters up after {:.1} s", began.elapsed().as_secs_f64());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenarios(&source, &target));
    eprintln!("done after {:.1} s", began.elapsed().as_secs_f64());
}

fn java(cluster: &Cluster, args: &[&str]) {
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/ForwardData.java");
    let out = tokio::task::block_in_place(|| cluster.java_tool(program, args)).unwrap();
    assert!(
        out.status.success(),
        "ForwardData {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn headers(i: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    match i % 3 {
        0 => vec![],
        1 => vec![
            (b"dup".to_vec(), Some(b"1".to_vec())),
            (b"dup".to_vec(), None),
            (b"dup".to_vec(), Some(b"3".to_vec())),
        ],
        _ => vec![("ключ".as_bytes().to_vec(), Some(Vec::new()))],
    }
}

/// Records with old timestamps (1970, 2000), null keys and values, duplicate header keys.
fn old_records(tag: &str, base_ts: i64, n: usize) -> Vec<Rec> {
    (0..n)
        .map(|i| Rec {
            key: (i % 4 != 0).then(|| format!("{tag}-k{i}").into_bytes()),
            value: (i % 5 != 2).then(|| format!("{tag}-v{i}").into_bytes()),
            headers: headers(i),
            ts: base_ts + (i as i64 * 7919) % 1000,
        })
        .collect()
}

async fn scenarios(source: &Cluster, target: &Cluster) {
    let src = client(source).await;
    let dst = client(target).await;
    let one = |name: &str| NewTopic::new(name, 1, 1);
    let mut src_topics: Vec<NewTopic> = CODECS.iter().map(|c| one(&format!("codec-{c}"))).collect();
    src_topics.extend(["oldts", "mid", "big", "gone", "late", "txn"].map(one));
    src_topics.push(
        one("compacted")
            .with_config("cleanup.policy", "compact")
            .with_config("segment.ms", "100")
            .with_config("min.cleanable.dirty.ratio", "0.01")
            .with_config("min.compaction.lag.ms", "0")
            .with_config("delete.retention.ms", "100"),
    );
    create_topics(&src, &src_topics).await;

    // Data written here, with strait-wire: old timestamps, every codec.
    let oldts = tp("oldts", 0);
    produce(
        &src,
        &oldts,
        build_batch(&old_records("a", 1_000, 9), Compression::None),
    )
    .await;
    produce(
        &src,
        &oldts,
        build_batch(&old_records("b", 946_684_800_000, 12), Compression::Gzip),
    )
    .await;
    produce(
        &src,
        &oldts,
        build_batch(&old_records("c", 86_400_000, 5), Compression::Zstd),
    )
    .await;
    produce(
        &src,
        &oldts,
        build_batch(&old_records("d", 1_234_567_890_000, 7), Compression::Snappy),
    )
    .await;
    produce(
        &src,
        &oldts,
        build_batch(&old_records("e", 1_500_000_000_000, 3), Compression::Lz4),
    )
    .await;
    // One 10-record batch; the mirror's committed position will be 5, inside it.
    let mid = tp("mid", 0);
    let mid_records: Vec<Rec> = (0..10)
        .map(|i| Rec::value(&format!("mid-{i}"), now_ms()))
        .collect();
    produce(&src, &mid, build_batch(&mid_records, Compression::Lz4)).await;
    // One known batch; the target topic will accept 1 byte less than its size.
    let big = tp("big", 0);
    let value = |i: usize| format!("big-{i}-{}", "y".repeat(1000));
    let big_records: Vec<Rec> = (0..30).map(|i| Rec::value(&value(i), now_ms())).collect();
    produce(&src, &big, build_batch(&big_records, Compression::None)).await;
    let (_, stored) = read_committed(&src, &big, 0).await;
    let big_size = stored[0].size_in_bytes();
    // Records to be deleted before the mirror gets to them.
    let gone = tp("gone", 0);
    for b in 0..4 {
        produce(
            &src,
            &gone,
            build_batch(
                &old_records(&format!("gone{b}"), now_ms(), 5),
                Compression::None,
            ),
        )
        .await;
    }
    let late = tp("late", 0);
    produce(
        &src,
        &late,
        build_batch(&old_records("late", now_ms(), 6), Compression::Gzip),
    )
    .await;

    // Java: every codec, transactions, DeleteRecords of gone below 10.
    java(
        source,
        &[
            &source.bootstrap(),
            "codecs:codec:200",
            &format!("txn:txn:{TXN_ROUNDS}"),
            "delete:gone:0:10",
        ],
    );

    // The compacted topic: each batch keeps two records and loses the two whose keys a later
    // batch overwrites; segment.ms rolls a segment per batch, so the cleaner can clean them.
    let compacted = tp("compacted", 0);
    for b in 0..5 {
        let recs: Vec<Rec> = [
            format!("keep-{b}-0"),
            "dup".into(),
            format!("keep-{b}-1"),
            "dup2".into(),
        ]
        .into_iter()
        .map(|k| Rec {
            key: Some(k.into_bytes()),
            value: Some(format!("c{b}").into_bytes()),
            headers: vec![],
            ts: now_ms(),
        })
        .collect();
        produce(
            &src,
            &compacted,
            build_batch(&recs, Compression::ALL[b % 5]),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Target topics (not `late`); `big` takes 1 byte less than the source batch.
    let mut dst_topics: Vec<NewTopic> = CODECS.iter().map(|c| one(&format!("codec-{c}"))).collect();
    dst_topics.extend(["oldts", "mid", "gone", "txn", "compacted"].map(one));
    dst_topics.push(one("big").with_config("max.message.bytes", (big_size - 1).to_string()));
    create_topics(&dst, &dst_topics).await;

    // A committed position in the middle of mid's batch, before the mirror starts.
    GroupOffsets::new(&src, GROUP)
        .commit(&Generation::simple(), &[CommitOffset::new(mid.clone(), 5)])
        .await
        .unwrap();
    GroupOffsets::new(&src, GROUP)
        .commit(&Generation::simple(), &[CommitOffset::new(gone.clone(), 2)])
        .await
        .unwrap();

    let mut settings = Settings::default();
    settings.commit_interval = Duration::from_millis(300);
    settings.fetch_max_wait = Duration::from_millis(200);
    settings.retry_backoff = Duration::from_millis(100);
    settings.retry_backoff_max = Duration::from_secs(1);
    // This test checks pass-through byte for byte: the Java producer's small batches, preloaded,
    // would otherwise wait together and be merged (pipeline_mem, merge_props, java_verify and the
    // WAN test cover merging).
    settings.batch_size = 0;
    let fwd = Arc::new(
        Forwarder::builder()
            .source(config(source))
            .target(config(target))
            .group_id(GROUP)
            .settings(settings)
            .build()
            .await
            .unwrap(),
    );
    let route = |topic: &str| Route {
        source: tp(topic, 0),
        target: tp(topic, 0),
    };
    let mut routes: Vec<Route> = CODECS
        .iter()
        .map(|c| route(&format!("codec-{c}")))
        .collect();
    routes.extend(["oldts", "mid", "big", "gone", "late", "txn"].map(route));
    fwd.assign(routes).await.unwrap();

    // Every codec, byte for byte, and passed through untouched.
    for codec in CODECS {
        let topic = tp(&format!("codec-{codec}"), 0);
        let (want, src_batches) = read_committed(&src, &topic, 0).await;
        let want: Vec<Rec> = want.into_iter().map(|(_, r)| r).collect();
        assert_eq!(want.len(), 200);
        let got = wait_records(&dst, &topic, want.len()).await;
        assert_same(&format!("codec {codec}"), &want, &got);
        let (_, dst_batches) = read_committed(&dst, &topic, 0).await;
        assert!(
            src_batches.len() >= 5,
            "{codec}: the Java producer wrote only {} batches",
            src_batches.len()
        );
        assert_eq!(
            src_batches.len(),
            dst_batches.len(),
            "{codec}: batch boundaries changed"
        );
        for (s, d) in src_batches.iter().zip(&dst_batches) {
            assert_eq!(d.compression().as_str(), codec);
            assert_eq!(
                s.records_payload(),
                d.records_payload(),
                "{codec}: the records section was rewritten"
            );
        }
        assert!(want.iter().any(|r| r.key.is_none()) && want.iter().any(|r| r.value.is_none()));
        assert!(
            want.iter()
                .any(|r| r.headers.iter().filter(|(k, _)| k == b"h").count() == 2)
        );
    }
    eprintln!("codecs: ok");

    let want = records(&src, &oldts, 0).await;
    assert_eq!(want.len(), 36);
    assert!(want.iter().any(|r| r.ts < 2_000));
    assert_same(
        "old timestamps",
        &want,
        &wait_records(&dst, &oldts, want.len()).await,
    );
    eprintln!("old timestamps: ok");

    let got = wait_records(&dst, &mid, 5).await;
    assert_same("start inside a batch", &mid_records[5..], &got);
    eprintln!("start inside a batch: ok");

    let got = wait_records(&dst, &big, 30).await;
    assert_same("1 byte over max.message.bytes", &big_records, &got);
    let (_, dst_batches) = read_committed(&dst, &big, 0).await;
    assert!(dst_batches.len() > 1, "not split");
    assert!(
        dst_batches.iter().all(|b| b.size_in_bytes() < big_size),
        "a piece is too large"
    );
    eprintln!(
        "batch of {big_size} bytes into max.message.bytes {}: {} pieces, ok",
        big_size - 1,
        dst_batches.len()
    );

    let (want, _) = read_committed(&src, &tp("txn", 0), 0).await;
    let want: Vec<Rec> = want.into_iter().map(|(_, r)| r).collect();
    let got = wait_records(&dst, &tp("txn", 0), want.len()).await;
    assert_same("transactions", &want, &got);
    let values: Vec<String> = got.iter().map(Rec::value_str).collect();
    assert!(
        values.iter().all(|v| !v.starts_with("A:")),
        "aborted records arrived: {values:?}"
    );
    assert_eq!(
        values.iter().filter(|v| v.starts_with("C:")).count(),
        5 * TXN_ROUNDS
    );
    assert_eq!(
        values.iter().filter(|v| v.starts_with("P:")).count(),
        TXN_ROUNDS + 1
    );
    eprintln!("transactions: ok ({} records)", got.len());

    // The deleted offset: only `gone` stopped, with the setting to change in its message.
    let deadline = Instant::now() + PATIENCE;
    while fwd.failures().is_empty() {
        assert!(Instant::now() < deadline, "gone did not fail");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failures = fwd.failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].partition, gone);
    let message = failures[0].error.to_string();
    assert!(
        matches!(
            *failures[0].error,
            strait_forward::Error::OffsetOutOfRange { .. }
        ) && message.contains("out-of-range policy")
            && message.contains("offset 2"),
        "{message}"
    );
    assert_eq!(
        offset(&dst, &gone, OffsetSpec::Latest, Isolation::ReadUncommitted).await,
        0
    );
    eprintln!("offset out of range: {message}");

    // The missing target topic: waited for (what the partition keeps logging says so), then
    // mirrored.
    let missing = WireTarget::new(dst.clone())
        .topic_limits("late")
        .await
        .unwrap_err();
    assert_eq!(missing.action, FailureAction::Retriable);
    assert!(
        missing.message.contains("target topic late does not exist"),
        "{}",
        missing.message
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fwd.failures().len(), 1, "{:?}", fwd.failures());
    create_topics(&dst, &[one("late")]).await;
    let want = records(&src, &late, 0).await;
    assert_same(
        "late target topic",
        &want,
        &wait_records(&dst, &late, want.len()).await,
    );
    eprintln!("missing target topic: ok");

    // Compaction: wait until the cleaner left offset gaps, then mirror the topic.
    let roll = Rec {
        key: Some(b"roll".to_vec()),
        ..Rec::value("roll", now_ms())
    };
    produce(&src, &compacted, build_batch(&[roll], Compression::None)).await;
    let gaps = wait_for_gaps(&src, &compacted).await;
    fwd.assign(vec![route("compacted")]).await.unwrap();
    let want = records(&src, &compacted, 0).await;
    assert_same(
        "compacted source",
        &want,
        &wait_records(&dst, &compacted, want.len()).await,
    );
    eprintln!(
        "compacted source with {gaps} gapped batches: ok ({} records)",
        want.len()
    );

    fwd.shutdown().await.unwrap();
    assert_eq!(fwd.failures().len(), 1);
    // The final commits are the log ends (of the partitions that did not fail).
    let partitions: Vec<_> = ["codec-zstd", "txn", "mid", "big", "late", "compacted"]
        .map(|t| tp(t, 0))
        .to_vec();
    let committed = GroupOffsets::new(&src, GROUP)
        .fetch(&partitions)
        .await
        .unwrap();
    for p in &partitions {
        let end = offset(&src, p, OffsetSpec::Latest, Isolation::ReadCommitted).await;
        let c = committed.get(p).and_then(|c| c.as_ref()).map(|c| c.offset);
        assert_eq!(c, Some(end), "committed position of {p}");
    }
    let gone_committed = GroupOffsets::new(&src, GROUP)
        .fetch(std::slice::from_ref(&gone))
        .await
        .unwrap();
    assert_eq!(
        gone_committed
            .get(&gone)
            .and_then(|c| c.as_ref())
            .map(|c| c.offset),
        Some(2)
    );
}

/// Waits until the log cleaner has compacted `tp` completely: the four batches whose `dup` and
/// `dup2` records were overwritten now have offset gaps (lastOffsetDelta + 1 > recordsCount).
/// (Waiting for the first gap is not enough: a later cleaner pass would change the source under
/// the test.) Returns how many batches have gaps.
async fn wait_for_gaps(client: &Client, tp: &strait_wire::TopicPartition) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (records, batches) = read_committed(client, tp, 0).await;
        let gapped: Vec<&RecordBatch> = batches.iter().filter(|b| b.has_offset_gaps()).collect();
        if gapped.len() == 4 && records.len() == 13 {
            let bases: HashSet<i64> = gapped.iter().map(|b| b.base_offset()).collect();
            assert_eq!(bases, HashSet::from([0, 4, 8, 12]));
            assert!(
                gapped
                    .iter()
                    .all(|b| b.record_count() == 2 && b.last_offset_delta() == 3)
            );
            return gapped.len();
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {tp} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
