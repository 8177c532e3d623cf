//! strait-wire against one real Kafka 4.x broker over PLAINTEXT (one cluster for the file):
//! version negotiation, metadata with topic ids, byte-exact produce/fetch round trips for all
//! five codecs (Java-built batches with keys, null keys and values, duplicate headers and
//! timestamps), ListOffsets, interop with the Java console tools both ways, pipelining and
//! cancellation, the response size cap, request timeouts, reconnects, unknown topics, leader
//! epoch fencing, InitProducerId, concurrent (coalesced) lookups.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_plaintext:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::fetch_request::{FetchPartition as WireFetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, MetadataRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use strait_testkit::{AdminOp, Cluster, Listener};
use strait_wire::{
    Error, FetchOptions, FetchPartition, Isolation, OffsetSpec, ProduceBatch, ProduceOptions,
    ResponseError,
};
use tokio::task::JoinSet;

const CODECS: [&str; 5] = ["v2_none", "v2_gzip", "v2_snappy", "v2_lz4", "v2_zstd"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_broker() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-plain").start().unwrap();
        c.admin(&[
            // The Java-written fixtures carry 2023 timestamps: with the default time-based
            // retention (7 days) the broker deletes them at its first retention check, 30 s after it
            // started, and a slow run then reads OFFSET_OUT_OF_RANGE where it expects them.
            AdminOp::CreateTopic {
                name: "codecs".into(),
                partitions: 5,
                replication: 1,
                configs: vec![("retention.ms".into(), "-1".into())],
            },
            AdminOp::topic("records", 1, 1),
            AdminOp::topic("to-java", 1, 1),
            AdminOp::topic("from-java", 1, 1),
            AdminOp::topic("big", 1, 1),
            AdminOp::topic("pipeline", 1, 1),
        ])
        .unwrap();
        Arc::new(c)
    })
    .await;
    let client = connect(props(&cluster, Listener::Plaintext, None))
        .await
        .unwrap();

    negotiation(&client).await;
    metadata_with_topic_ids(&client).await;
    codecs_round_trip(&client).await;
    hand_built_records_round_trip(&client).await;
    list_offsets(&client).await;
    java_interop(&client, cluster.clone()).await;
    pipelining_and_cancellation(&client).await;
    response_size_cap(&cluster).await;
    timeout_and_reconnect(&client).await;
    unknown_topics_and_partitions(&client).await;
    leader_epoch_fencing(&client).await;
    producer_ids(&client).await;
    concurrent_lookups_get_their_own_answers(&client).await;
}

async fn negotiation(client: &strait_wire::Client) {
    let conn = client.any_broker().await.unwrap();
    // Kafka 4.x speaks Fetch v13+ (topic ids) and Produce v3+; we pick the highest both know.
    let fetch = conn.pick_version::<FetchRequest>(0..=i16::MAX).unwrap();
    assert!(fetch >= 16, "Fetch v{fetch}");
    let produce = conn.pick_version::<ProduceRequest>(0..=i16::MAX).unwrap();
    assert!(produce >= 11, "Produce v{produce}");
    let range = conn.supported_versions(ApiKey::Produce).unwrap();
    assert!(*range.start() >= 3 && *range.end() == produce, "{range:?}");
    let metadata = conn.pick_version::<MetadataRequest>(0..=i16::MAX).unwrap();
    assert!(metadata >= 12);
    // A range the broker cannot serve is a typed error naming the API.
    match conn.pick_version::<FetchRequest>(100..=200) {
        Err(Error::UnsupportedVersion { api, .. }) => assert_eq!(api, "Fetch"),
        other => panic!("{other:?}"),
    }
    eprintln!("negotiated Fetch v{fetch}, Produce v{produce}, Metadata v{metadata}");
}

async fn metadata_with_topic_ids(client: &strait_wire::Client) {
    let md = client
        .metadata(Some(&["codecs".to_string()]))
        .await
        .unwrap();
    let t = md.topic("codecs").unwrap();
    assert!(t.id.is_some(), "Metadata v10+ carries topic ids");
    assert_eq!(t.partitions.len(), 5);
    assert!(
        t.partitions
            .iter()
            .all(|p| p.leader == Some(1) && p.leader_epoch >= 0)
    );
    assert_eq!(md.brokers.len(), 1);
    assert!(md.cluster_id.is_some());
    assert_eq!(md.topic_name(t.id.unwrap()).map(|n| &**n), Some("codecs"));
}

/// Compares a fetched batch with the one produced: the broker assigns the base offset and stamps
/// the partition leader epoch (both outside the CRC); every other byte must be identical.
fn assert_same_batch(sent: &Bytes, fetched: &Bytes, base_offset: i64, what: &str) {
    assert_eq!(fetched.len(), sent.len(), "{what}: batch length");
    assert_eq!(
        &fetched[0..8],
        &base_offset.to_be_bytes(),
        "{what}: base offset"
    );
    assert_eq!(&fetched[8..12], &sent[8..12], "{what}: batch length field");
    assert_eq!(
        &fetched[16..],
        &sent[16..],
        "{what}: bytes from magic to the end"
    );
}

async fn codecs_round_trip(client: &strait_wire::Client) {
    let to_send: Vec<ProduceBatch> = CODECS
        .iter()
        .enumerate()
        .map(|(p, name)| ProduceBatch::new(tp("codecs", p as i32), fixture(name)))
        .collect();
    let sent: Vec<Bytes> = to_send.iter().map(|b| b.records.clone()).collect();
    let results = client
        .produce(to_send, &ProduceOptions::default())
        .await
        .unwrap();
    for (r, name) in results.iter().zip(CODECS) {
        let ack = r.outcome.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ack.base_offset, 0, "{name}");
    }

    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let wanted: Vec<FetchPartition> = (0..5)
            .map(|p| FetchPartition::new(tp("codecs", p), 0))
            .collect();
        let options = FetchOptions {
            isolation,
            ..FetchOptions::default()
        };
        let got = client.fetch(&wanted, &options).await.unwrap();
        assert_eq!(got.len(), 5);
        for (i, p) in got.iter().enumerate() {
            let name = CODECS[i];
            assert_eq!(
                p.partition,
                tp("codecs", i as i32),
                "results come in input order"
            );
            p.check(None).unwrap();
            assert_eq!(p.high_watermark, 20, "{name}");
            assert_eq!(p.last_stable_offset, 20, "{name}");
            assert_eq!(p.log_start_offset, 0, "{name}");
            assert!(p.aborted_transactions.is_empty());
            let bs = batches(&p.records);
            assert_eq!(bs.len(), 1, "{name}: one batch");
            assert_same_batch(&sent[i], &bs[0].1, 0, name);
        }
    }

    // The same through a single connection without topic ids: Fetch v12 with names.
    let md = client.cached_metadata();
    let conn = client.broker(1).await.unwrap();
    let by_name = conn
        .fetch(
            &[FetchPartition::new(tp("codecs", 4), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    let mut with_id = FetchPartition::new(tp("codecs", 4), 0);
    with_id.topic_id = md.topic("codecs").unwrap().id;
    let by_id = conn
        .fetch(&[with_id], &FetchOptions::default())
        .await
        .unwrap();
    assert_eq!(
        by_name[0].records, by_id[0].records,
        "v12 (names) and v13+ (ids) return the same bytes"
    );
    assert_same_batch(&sent[4], &by_name[0].records, 0, "zstd via v12");
}

async fn hand_built_records_round_trip(client: &strait_wire::Client) {
    let now = now_ms();
    let recs = vec![
        Rec {
            key: Some(b"k1".to_vec()),
            value: Some(b"v1".to_vec()),
            headers: vec![
                ("h".into(), Some(b"1".to_vec())),
                ("h".into(), Some(b"2".to_vec())),
            ],
            timestamp: now - 1000,
        },
        Rec {
            key: None,
            value: Some(b"null key".to_vec()),
            headers: vec![],
            timestamp: now,
        },
        Rec {
            key: Some(b"tombstone".to_vec()),
            value: None,
            headers: vec![("n".into(), None)],
            timestamp: now - 5,
        },
        Rec {
            key: Some(Vec::new()),
            value: Some(vec![0xff; 70_000]),
            headers: vec![],
            timestamp: now + 7,
        },
    ];
    let batch = build_batch(&recs, -1, -1, -1);
    let r = client
        .produce(
            vec![ProduceBatch::new(tp("records", 0), batch.clone())],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    let base = r[0].outcome.as_ref().unwrap().base_offset;
    let got = client
        .fetch(
            &[FetchPartition::new(tp("records", 0), base)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    assert_same_batch(&batch, &batches(&got[0].records)[0].1, base, "hand-built");
    let read = read_records(&got[0].records);
    assert_eq!(read.len(), recs.len());
    for (i, (r, want)) in read.iter().zip(&recs).enumerate() {
        assert_eq!(r.offset, base + i as i64);
        assert_eq!(
            (&r.key, &r.value, &r.headers, r.timestamp),
            (&want.key, &want.value, &want.headers, want.timestamp)
        );
    }
}

async fn list_offsets(client: &strait_wire::Client) {
    let asks = [
        (tp("codecs", 0), OffsetSpec::Earliest),
        (tp("codecs", 0), OffsetSpec::Latest),
        (tp("codecs", 0), OffsetSpec::Timestamp(1_700_000_000_010)),
        (tp("codecs", 1), OffsetSpec::Timestamp(4_000_000_000_000)),
        (tp("codecs", 2), OffsetSpec::MaxTimestamp),
    ];
    let got = client
        .list_offsets(&asks, Isolation::ReadCommitted)
        .await
        .unwrap();
    assert_eq!(got[0].offset, Some(0));
    assert_eq!(got[1].offset, Some(20));
    // Fixture records: offset 3 is the first with a timestamp >= ...010 (offset 2 has ...997).
    assert_eq!(got[2].offset, Some(3));
    assert_eq!(got[2].timestamp, Some(1_700_000_000_010));
    assert_eq!(got[3].offset, None, "no record that late");
    assert!(
        got[4].offset.is_some() && got[4].timestamp == Some(1_700_000_000_030),
        "{:?}",
        got[4]
    );
}

async fn java_interop(client: &strait_wire::Client, cluster: Arc<Cluster>) {
    // strait-wire -> Java console consumer.
    let values: Vec<String> = (0..10).map(|i| format!("from-wire-{i}")).collect();
    let recs: Vec<Rec> = values.iter().map(|v| Rec::value(v)).collect();
    let r = client
        .produce(
            vec![ProduceBatch::new(
                tp("to-java", 0),
                build_batch(&recs, -1, -1, -1),
            )],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    r[0].outcome.as_ref().unwrap();
    let c = cluster.clone();
    let consumed = blocking(move || c.console_consume("to-java", 10, None).unwrap()).await;
    assert_eq!(consumed, values);

    // Java console producer -> strait-wire.
    let lines: Vec<String> = (0..10).map(|i| format!("from-java-{i}")).collect();
    let l = lines.clone();
    let c = cluster.clone();
    blocking(move || c.console_produce("from-java", &l, None).unwrap()).await;
    let read = fetch_all(client, &tp("from-java", 0), 0, 10).await;
    let got: Vec<String> = read
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(got, lines);
}

async fn pipelining_and_cancellation(client: &strait_wire::Client) {
    let conn = client.broker(1).await.unwrap();
    // 64 requests in flight on one connection, answered out of their own tasks' order.
    let mut set = JoinSet::new();
    for i in 0..64 {
        let conn = conn.clone();
        set.spawn(async move {
            let recs = vec![Rec::value(&format!("p{i}"))];
            let r = conn
                .produce(
                    &[ProduceBatch::new(
                        tp("pipeline", 0),
                        build_batch(&recs, -1, -1, -1),
                    )],
                    &ProduceOptions::default(),
                    |_| None,
                )
                .await
                .unwrap();
            assert!(r[0].error.is_none());
            r[0].base_offset
        });
    }
    let mut offsets = Vec::new();
    while let Some(r) = set.join_next().await {
        offsets.push(r.unwrap());
    }
    offsets.sort();
    assert_eq!(
        offsets,
        (0..64).collect::<Vec<i64>>(),
        "every request got its own answer"
    );

    // A request dropped before its answer (cancelled) leaves the connection usable.
    let long_poll = FetchOptions {
        max_wait: Duration::from_secs(3),
        min_bytes: 1 << 30,
        ..FetchOptions::default()
    };
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        conn.fetch(&[FetchPartition::new(tp("pipeline", 0), 64)], &long_poll),
    )
    .await;
    assert!(cancelled.is_err(), "the long poll was cancelled");
    let after = conn
        .fetch(
            &[FetchPartition::new(tp("pipeline", 0), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    assert!(!after[0].records.is_empty());
    assert!(!conn.is_closed());
}

async fn response_size_cap(cluster: &Cluster) {
    let mut p = props(cluster, Listener::Plaintext, None);
    p.push(("receive.message.max.bytes".into(), "4096".into()));
    let small = connect(p).await.unwrap();
    // codecs-0 holds a ~180 KB uncompressed batch: its fetch response exceeds the cap.
    let e = small
        .fetch(
            &[FetchPartition::new(tp("codecs", 0), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap_err();
    match &e {
        Error::FrameTooLarge { max, size, .. } => assert!(*max == 4096 && *size > 4096),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("receive.message.max.bytes"), "{e}");
}

async fn timeout_and_reconnect(client: &strait_wire::Client) {
    let conn = client.broker(1).await.unwrap();
    // A long poll at the end of the log (an empty fetch would be answered at once).
    let req = FetchRequest::default()
        .with_max_wait_ms(5_000)
        .with_min_bytes(1 << 30)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("codecs")))
                .with_partitions(vec![
                    WireFetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(20)
                        .with_partition_max_bytes(1024),
                ]),
        ]);
    let version = conn.pick_version::<FetchRequest>(4..=12).unwrap();
    let e = conn
        .send_with_timeout(req, version, Duration::from_millis(200))
        .await
        .unwrap_err();
    match &e {
        Error::Timeout { api, setting, .. } => {
            assert_eq!(api, "Fetch");
            assert_eq!(*setting, "request.timeout.ms");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        conn.is_closed(),
        "a timed-out request closes the connection"
    );
    let e = conn
        .fetch(
            &[FetchPartition::new(tp("codecs", 0), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Disconnected { .. }), "{e:?}");
    // The client reconnects on next use.
    let fresh = client.broker(1).await.unwrap();
    assert!(!fresh.is_closed());
    let got = client
        .fetch(
            &[FetchPartition::new(tp("codecs", 1), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    got[0].check(None).unwrap();
}

async fn unknown_topics_and_partitions(client: &strait_wire::Client) {
    // Fetch reports partition errors per partition (after a bounded number of metadata refreshes).
    let got = client
        .fetch(
            &[FetchPartition::new(tp("no-such-topic", 0), 0)],
            &FetchOptions::default(),
        )
        .await
        .unwrap();
    let e = got[0].check(client.principal()).unwrap_err();
    assert_eq!(
        e.code(),
        Some(ResponseError::UnknownTopicOrPartition),
        "{e}"
    );
    assert!(e.to_string().contains("does not exist"), "{e}");

    let r = client
        .produce(
            vec![ProduceBatch::new(
                tp("codecs", 9),
                build_batch(&[Rec::value("x")], -1, -1, -1),
            )],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    let e = r[0].outcome.as_ref().unwrap_err();
    assert_eq!(e.code(), Some(ResponseError::UnknownTopicOrPartition));
    assert!(e.to_string().contains("has 5 partitions"), "{e}");

    let e = client
        .list_offsets(
            &[(tp("no-such-topic", 0), OffsetSpec::Latest)],
            Isolation::ReadUncommitted,
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(ResponseError::UnknownTopicOrPartition),
        "{e}"
    );
}

async fn leader_epoch_fencing(client: &strait_wire::Client) {
    let md = client
        .metadata(Some(&["codecs".to_string()]))
        .await
        .unwrap();
    let epoch = md.partition(&tp("codecs", 0)).unwrap().leader_epoch;
    let conn = client.broker(1).await.unwrap();
    let mut ahead = FetchPartition::new(tp("codecs", 0), 0);
    ahead.leader_epoch = Some(epoch + 10);
    let got = conn
        .fetch(&[ahead], &FetchOptions::default())
        .await
        .unwrap();
    assert_eq!(got[0].error, Some(ResponseError::UnknownLeaderEpoch));
    let mut current = FetchPartition::new(tp("codecs", 0), 0);
    current.leader_epoch = Some(epoch);
    let got = conn
        .fetch(&[current], &FetchOptions::default())
        .await
        .unwrap();
    assert_eq!(got[0].error, None);
}

async fn producer_ids(client: &strait_wire::Client) {
    let id = client.init_producer_id().await.unwrap();
    assert!(id.producer_id >= 0);
    let other = client.init_producer_id().await.unwrap();
    assert_ne!(
        other.producer_id, id.producer_id,
        "every call gets a new producer id"
    );
    // An idempotent batch with that identity is accepted and deduplicated on resend.
    let batch = build_batch(&[Rec::value("idem")], id.producer_id, id.epoch, 0);
    let first = client
        .produce(
            vec![ProduceBatch::new(tp("records", 0), batch.clone())],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    let again = client
        .produce(
            vec![ProduceBatch::new(tp("records", 0), batch)],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        first[0].outcome.as_ref().unwrap().base_offset,
        again[0].outcome.as_ref().unwrap().base_offset,
        "the broker deduplicated the resent idempotent batch"
    );
    // A locally bumped epoch restarts at sequence 0 and is accepted.
    let bumped = id.next_epoch().unwrap();
    let batch = build_batch(&[Rec::value("idem-2")], bumped.producer_id, bumped.epoch, 0);
    let r = client
        .produce(
            vec![ProduceBatch::new(tp("records", 0), batch)],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    r[0].outcome.as_ref().unwrap();
}

/// Many partitions starting at once look up their topic's metadata, configuration and start
/// offset concurrently; the client shares requests between them (`coalesce.rs`). Each caller
/// must still get its own topic's answer: every topic here has its own retention.ms, partition
/// count and number of records.
async fn concurrent_lookups_get_their_own_answers(client: &strait_wire::Client) {
    use strait_wire::OffsetSpec;
    use strait_wire::admin::{Admin, NewTopic};
    const TOPICS: usize = 24;
    let admin = Admin::new(client);
    let name = |i: usize| format!("lookup-{i:02}");
    let topics: Vec<NewTopic> = (0..TOPICS)
        .map(|i| {
            NewTopic::new(name(i), 1 + (i % 3) as i32, 1)
                .with_config("retention.ms", (3_600_000 + i).to_string())
        })
        .collect();
    let created = admin.create_topics(&topics, false).await.unwrap();
    assert!(created.values().all(Result::is_ok), "{created:?}");
    for i in 0..TOPICS {
        let partitions = 1 + (i % 3) as i32;
        assert!(
            admin
                .wait_for_leaders(&name(i), partitions, Duration::from_secs(30))
                .await
                .unwrap(),
            "{} has no leaders",
            name(i)
        );
        let recs: Vec<Rec> = (0..=i).map(|n| Rec::value(&n.to_string())).collect();
        let r = client
            .produce(
                vec![ProduceBatch::new(
                    tp(&name(i), 0),
                    build_batch(&recs, -1, -1, -1),
                )],
                &ProduceOptions::default(),
            )
            .await
            .unwrap();
        r[0].outcome.as_ref().unwrap();
    }
    let mut lookups = JoinSet::new();
    for i in 0..TOPICS {
        let client = client.clone();
        let topic = name(i);
        lookups.spawn(async move {
            let admin = Admin::new(&client);
            let first = tp(&topic, 0);
            let (configs, latest, md) = tokio::join!(
                admin.describe_topic_configs(&topic),
                client.list_offset(&first, OffsetSpec::Latest, Isolation::ReadCommitted),
                client.metadata(Some(std::slice::from_ref(&topic))),
            );
            let retention = configs.unwrap().value("retention.ms").map(str::to_owned);
            assert_eq!(retention, Some((3_600_000 + i).to_string()), "{topic}");
            assert_eq!(latest.unwrap().offset, Some(i as i64 + 1), "{topic}");
            let md = md.unwrap();
            let partitions = md.topic(&topic).map(|t| t.partitions.len());
            assert_eq!(partitions, Some(1 + i % 3), "{topic}");
        });
    }
    while let Some(done) = lookups.join_next().await {
        done.unwrap();
    }
    // A partition that does not exist gets its own error, not a neighbour's offset.
    let missing = client
        .list_offset(
            &tp(&name(0), 7),
            OffsetSpec::Latest,
            Isolation::ReadCommitted,
        )
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        Some(ResponseError::UnknownTopicOrPartition),
        "{missing}"
    );
}
