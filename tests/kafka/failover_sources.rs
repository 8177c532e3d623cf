//! Exact translation on the sources that make target offsets differ, against real Kafka:
//!
//! * `txn`: interleaved committed and **aborted** transactions of two Java transactional
//!   producers with plain records between them (Kafka's own producer; the aborted records and
//!   every marker take source offsets that have no record on the target);
//! * `compacted`: a compacted topic the log cleaner has already cleaned, so its batches have
//!   **offset gaps**, followed by a tail of new records.
//!
//! The mirror (`isolation = "read_committed"`) persists its offset syncs on the target. Every
//! source offset of both partitions, translated with what is on the target alone, must point at
//! the first mirrored record at or after it. Then a group committed on the source at an offset
//! with no record (an aborted record's, a compacted one's) fails over with
//! `strait failover --apply`, and Kafka's Java console consumer with that group id on the
//! target reads exactly the remainder of both partitions.
//!
//! Run: `cargo test -p strait-e2e --test kafka -- failover_sources:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use strait::failover::OffsetMaps;
use strait::failover::checkpoint::{offset_syncs_topic, replay};
use strait_forward::txn::AbortedTransaction;
use strait_forward::{AbortedTransactionFilter, FetchedBatch, FetchedRecords, TxnDecision};
use strait_testkit::{AdminOp, Cluster, ConsumeOptions};
use strait_wire::admin::NewTopic;
use strait_wire::{Client, FetchOptions, FetchPartition, Isolation, TopicPartition};

const GROUP: &str = "app";
const MIRROR_GROUP: &str = "strait-sources";
const TXN_ROUNDS: usize = 6;

#[test]
fn aborted_transactions_and_compaction_gaps_translate_exactly() {
    let (source, target) = clusters("sources");
    let rt = runtime();
    let src = rt.block_on(client(&source));
    let dst = rt.block_on(client(&target));
    let txn = TopicPartition::new("txn", 0).unwrap();
    let compacted = TopicPartition::new("compacted", 0).unwrap();
    rt.block_on(async {
        strait_wire::admin::Admin::new(&src)
            .create_topic(&NewTopic::new("txn", 1, 1))
            .await
            .unwrap();
        strait_wire::admin::Admin::new(&src)
            .create_topic(
                &NewTopic::new("compacted", 1, 1)
                    .with_config("cleanup.policy", "compact")
                    .with_config("segment.ms", "100")
                    .with_config("min.cleanable.dirty.ratio", "0.01")
                    .with_config("min.compaction.lag.ms", "0")
                    .with_config("delete.retention.ms", "100"),
            )
            .await
            .unwrap();
    });
    // Plain target topics (the compacted one's records have unique keys once cleaned, so the
    // target has nothing to compact either way).
    target
        .admin(&[
            AdminOp::topic("txn", 1, 1),
            AdminOp::topic("compacted", 1, 1),
        ])
        .unwrap();

    forward_data(&source, &[&format!("txn:txn:{TXN_ROUNDS}")]);
    // Five batches of four records; two keys of each are overwritten by the next batch, so the
    // cleaner leaves two records and a gap of two in every batch but the last.
    for b in 0..5 {
        let recs: Vec<(String, String)> = [
            format!("keep-{b}-0"),
            "dup".into(),
            format!("keep-{b}-1"),
            "dup2".into(),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, format!("c{b}-{i}")))
        .collect();
        rt.block_on(produce_keyed(&src, &compacted, &recs));
    }
    std::thread::sleep(Duration::from_millis(200));
    rt.block_on(produce_keyed(
        &src,
        &compacted,
        &[("roll".into(), "roll".into())],
    ));
    wait_for_gaps(&rt, &src, &compacted, 13);
    let tail: Vec<(String, String)> = (0..6)
        .map(|i| (format!("tail-{i}"), format!("t{i}")))
        .collect();
    rt.block_on(produce_keyed(&src, &compacted, &tail));

    let source_txn = rt.block_on(read_committed(&src, &txn));
    let source_compacted = rt.block_on(read_committed(&src, &compacted));
    let txn_end = rt.block_on(end(&src, &txn));
    let compacted_end = rt.block_on(end(&src, &compacted));
    assert!(
        (source_txn.len() as i64) < txn_end,
        "markers and aborted records take offsets"
    );
    assert!((source_compacted.len() as i64) < compacted_end, "gaps");

    // The group's position: the first offset without a record in the second half.
    let hole = |recs: &[(i64, String)], end: i64| {
        (end / 2..end)
            .find(|o| !recs.iter().any(|(r, _)| r == o))
            .unwrap()
    };
    let commits = [
        (txn.clone(), hole(&source_txn, txn_end)),
        (compacted.clone(), hole(&source_compacted, compacted_end)),
    ];
    rt.block_on(commit_group(&src, GROUP, &commits));

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "sources",
        &source,
        &target,
        "txn|compacted",
        MIRROR_GROUP,
        "isolation = \"read_committed\"\ngroups = [\"app\"]\ncheckpoint_interval = \"500ms\"\n",
    );
    let (mut strait, log) = spawn_strait(&config, 0);
    rt.block_on(wait_until_committed(
        &src,
        MIRROR_GROUP,
        "txn",
        &[txn_end],
        Duration::from_secs(120),
    ));
    rt.block_on(wait_until_committed(
        &src,
        MIRROR_GROUP,
        "compacted",
        &[compacted_end],
        Duration::from_secs(120),
    ));
    let wanted: BTreeMap<(String, i32), i64> = commits
        .iter()
        .map(|(tp, c)| ((tp.topic().to_string(), tp.partition()), *c))
        .collect();
    wait_for_checkpoints(&rt, &dst, "src", GROUP, &wanted, &log);
    assert_eq!(terminate(&mut strait).code(), Some(0));
    drop(strait);

    // Every source offset, from the target's syncs alone.
    let maps = OffsetMaps::default();
    rt.block_on(replay(&dst, &offset_syncs_topic("dst"), &maps, |_| true))
        .unwrap();
    for (tp, recs, end_offset) in [
        (&txn, &source_txn, txn_end),
        (&compacted, &source_compacted, compacted_end),
    ] {
        let mirrored = rt.block_on(read_committed(&dst, tp));
        let values = |r: &[(i64, String)]| r.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
        assert_eq!(values(&mirrored), values(recs), "{tp} mirrored in order");
        for c in 0..=end_offset {
            let t = maps
                .translate(tp, c)
                .unwrap_or_else(|miss| panic!("{tp} offset {c}: {miss}"));
            // The first source record at or after c, and the first target record at or
            // after t, are the same record (or there is none).
            let want = recs.iter().find(|(o, _)| *o >= c).map(|(_, v)| v);
            let got = mirrored.iter().find(|(o, _)| *o >= t).map(|(_, v)| v);
            assert_eq!(got, want, "{tp}: source offset {c} -> target {t}");
        }
        println!(
            "{tp}: {} source offsets ({} records) translate exactly",
            end_offset + 1,
            recs.len()
        );
    }

    let out = StraitCommand::new(["failover", "--config"])
        .arg(&config)
        .arg("--apply")
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for ((tp, c), recs) in commits.iter().zip([&source_txn, &source_compacted]) {
        let want: Vec<String> = recs
            .iter()
            .filter(|(o, _)| o >= c)
            .map(|(_, v)| v.clone())
            .collect();
        let got = target
            .console_consume_with(
                tp.topic(),
                want.len() + 1,
                &target.client_properties(target.default_listener(), None),
                &ConsumeOptions::default()
                    .group(GROUP)
                    .timeout(Duration::from_secs(10)),
            )
            .unwrap();
        assert_eq!(
            got, want,
            "{tp}: the failed-over group reads exactly the remainder"
        );
    }
}

/// Runs the forwarder tests' Java producer program (`ForwardData.java`) on `cluster`.
fn forward_data(cluster: &Cluster, ops: &[&str]) {
    let program = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/forward/tests/java/ForwardData.java"
    );
    let mut args = vec![cluster.bootstrap()];
    args.extend(ops.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster.java_tool(program, &args).unwrap();
    assert!(
        out.status.success(),
        "ForwardData failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `records` (key, value) to `tp` as one uncompressed batch.
async fn produce_keyed(client: &Client, tp: &TopicPartition, records: &[(String, String)]) {
    use bytes::{Bytes, BytesMut};
    use strait_wire::kafka_protocol::records::{
        Compression, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
        Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use strait_wire::{ProduceBatch, ProduceOptions};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // One batch: kafka-protocol starts a new one when `offset - sequence` changes.
            sequence: NO_SEQUENCE + i as i32,
            timestamp: now,
            key: Some(Bytes::from(k.clone())),
            value: Some(Bytes::from(v.clone())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    for r in client
        .produce(
            vec![ProduceBatch::new(tp.clone(), buf.freeze())],
            &ProduceOptions::default(),
        )
        .await
        .unwrap()
    {
        r.outcome.unwrap();
    }
}

/// The partition's end offset (high watermark).
async fn end(client: &Client, tp: &TopicPartition) -> i64 {
    end_offsets(client, tp.topic(), 1).await[0]
}

/// What a read_committed consumer gets: (offset, value) of every record of non-control,
/// non-aborted batches, up to the last stable offset.
async fn read_committed(client: &Client, tp: &TopicPartition) -> Vec<(i64, String)> {
    let end = end(client, tp).await;
    let options = FetchOptions {
        isolation: Isolation::ReadCommitted,
        ..FetchOptions::default()
    };
    let mut out = Vec::new();
    let mut next = 0;
    while next < end {
        let fetched = client
            .fetch(&[FetchPartition::new(tp.clone(), next)], &options)
            .await
            .unwrap()
            .pop()
            .unwrap();
        fetched.check(None).unwrap();
        let mut filter =
            AbortedTransactionFilter::new(fetched.aborted_transactions.iter().map(|a| {
                AbortedTransaction {
                    producer_id: a.producer_id,
                    first_offset: a.first_offset,
                }
            }));
        let before = next;
        for item in FetchedRecords::new(fetched.records) {
            let item = item.unwrap();
            let decision = filter.classify_fetched(&item).unwrap();
            let FetchedBatch::V2(batch) = item else {
                panic!("legacy batch on a 4.x broker")
            };
            if decision == TxnDecision::Keep {
                for r in batch.decode_records(64 << 20).unwrap().iter() {
                    let r = r.unwrap();
                    let o = batch.record_offset(&r);
                    if o >= next {
                        let v = String::from_utf8_lossy(r.value().unwrap_or_default());
                        out.push((o, v.into_owned()));
                    }
                }
            }
            next = next.max(batch.next_offset());
        }
        assert!(next > before, "{tp}: no progress at {next}");
    }
    out
}

/// Waits until the log cleaner left exactly `records` records in `tp` (gaps between them).
fn wait_for_gaps(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    tp: &TopicPartition,
    records: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let recs = rt.block_on(read_committed(client, tp));
        if recs.len() == records {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {tp} within 120 s ({} records)",
            recs.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}
