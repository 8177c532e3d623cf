//! Helpers shared by the `forward_*` integration tests (the strait-forward pipeline against real
//! Kafka): the cluster pair, topics, raw batches built here (uncompressed or with the crate's
//! codecs) and produced with strait-wire, and reading a partition back record by record with
//! strait-forward's own walkers, as a read_committed consumer would.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use strait_forward::txn::AbortedTransaction;
use strait_forward::{
    AbortedTransactionFilter, Compression, FetchedBatch, FetchedRecords, RecordBatch, TxnDecision,
};
use strait_testkit::Cluster;
use strait_wire::admin::{Admin, NewTopic};
use strait_wire::{
    Client, ClientConfig, FetchOptions, FetchPartition, Isolation, OffsetSpec, ProduceBatch,
    ProduceOptions, TopicPartition,
};

/// Patience for what a loaded 2-core machine does slowly (never a wall-clock assertion).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Starts the source and target single-node clusters side by side.
pub fn clusters(prefix: &str) -> (Cluster, Cluster) {
    let name = format!("{prefix}-src");
    let source = std::thread::spawn(move || {
        // The log cleaner checks for work every 200 ms instead of 15 s (compaction scenarios).
        Cluster::builder(&name)
            .broker_config("log.cleaner.backoff.ms", "200")
            .start()
            .expect("source cluster")
    });
    let target = Cluster::builder(&format!("{prefix}-dst"))
        .start()
        .expect("target cluster");
    (source.join().expect("source cluster thread"), target)
}

pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition).unwrap()
}

pub fn config(cluster: &Cluster) -> ClientConfig {
    let mut props = cluster.client_properties(cluster.default_listener(), None);
    props.push(("client.id".into(), "strait-forward-test".into()));
    ClientConfig::from_properties(props).unwrap()
}

pub async fn client(cluster: &Cluster) -> Client {
    Client::connect(config(cluster)).await.unwrap()
}

/// Creates topics (single partition unless named otherwise) and waits for their leaders.
pub async fn create_topics(client: &Client, topics: &[NewTopic]) {
    let admin = Admin::new(client);
    for (name, result) in admin.create_topics(topics, false).await.unwrap() {
        result.unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let md = client.metadata(Some(&names)).await.unwrap();
        let ready = topics
            .iter()
            .all(|t| (0..t.partitions.unwrap_or(1)).all(|p| md.leader(&tp(&t.name, p)).is_some()));
        if ready {
            return;
        }
        assert!(Instant::now() < deadline, "no leaders for {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A record as a consumer sees it (`ts` read the Java consumer's way).
#[derive(Clone, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub ts: i64,
}

impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |b: &Option<Vec<u8>>| {
            b.as_ref().map_or("null".to_string(), |b| {
                format!("{:?}", String::from_utf8_lossy(b))
            })
        };
        write!(
            f,
            "Rec(key={} value={} ts={} headers={:?})",
            show(&self.key),
            show(&self.value),
            self.ts,
            self.headers
        )
    }
}

impl Rec {
    pub fn value(v: &str, ts: i64) -> Rec {
        Rec {
            key: None,
            value: Some(v.as_bytes().to_vec()),
            headers: vec![],
            ts,
        }
    }

    pub fn value_str(&self) -> String {
        self.value
            .as_ref()
            .map_or("null".into(), |v| String::from_utf8_lossy(v).into_owned())
    }
}

/// A v2 batch as a (non-idempotent) producer sends it: base offset 0, CreateTime, `codec`;
/// framed by the test kit's independent encoder, compressed with this crate's codec.
pub fn build_batch(records: &[Rec], codec: Compression) -> Bytes {
    let batch = strait_testkit::batch::Batch {
        attributes: i16::from(codec.id()),
        base_timestamp: records[0].ts,
        max_timestamp: records.iter().map(|r| r.ts).max().unwrap(),
        records: records
            .iter()
            .enumerate()
            .map(|(i, r)| strait_testkit::batch::Record {
                offset_delta: i as i32,
                timestamp: r.ts,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
            })
            .collect(),
        ..Default::default()
    };
    Bytes::from(batch.encode_compressed(|section| {
        let mut payload = Vec::new();
        codec.compress(section, None, &mut payload).unwrap();
        payload
    }))
}

/// Produces one batch per call (so each is one batch on the broker).
pub async fn produce(client: &Client, tp: &TopicPartition, batch: Bytes) {
    let results = client
        .produce(
            vec![ProduceBatch::new(tp.clone(), batch)],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    for r in results {
        r.outcome
            .unwrap_or_else(|e| panic!("producing to {tp}: {e}"));
    }
}

pub async fn offset(
    client: &Client,
    tp: &TopicPartition,
    spec: OffsetSpec,
    isolation: Isolation,
) -> i64 {
    client
        .list_offsets(&[(tp.clone(), spec)], isolation)
        .await
        .unwrap()[0]
        .offset
        .unwrap()
}

/// The last stable offsets of partitions `0..partitions` of `topic`: where a read_committed
/// mirror that caught up stands.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub async fn stable_ends(client: &Client, topic: &str, partitions: i32) -> Vec<i64> {
    let mut ends = Vec::new();
    for p in 0..partitions {
        let partition = tp(topic, p);
        ends.push(
            offset(
                client,
                &partition,
                OffsetSpec::Latest,
                Isolation::ReadCommitted,
            )
            .await,
        );
    }
    ends
}

/// What a read_committed consumer gets from `from` to the last stable offset: every record of
/// non-control, non-aborted batches at or after `from`, decoded with strait-forward's walkers;
/// and the data batches it came in.
pub async fn read_committed(
    client: &Client,
    tp: &TopicPartition,
    from: i64,
) -> (Vec<(i64, Rec)>, Vec<RecordBatch>) {
    let end = offset(client, tp, OffsetSpec::Latest, Isolation::ReadCommitted).await;
    let mut records = Vec::new();
    let mut batches = Vec::new();
    let mut next = from;
    let options = FetchOptions {
        isolation: Isolation::ReadCommitted,
        ..FetchOptions::default()
    };
    while next < end {
        let fetched = client
            .fetch(
                &[FetchPartition::new(tp.clone(), next).with_max_bytes(8 << 20)],
                &options,
            )
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
            let batch_next = batch.next_offset();
            if decision == TxnDecision::Keep && batch_next > next {
                let decoded = batch.decode_records(64 << 20).unwrap();
                for r in decoded.iter() {
                    let r = r.unwrap();
                    let offset = batch.record_offset(&r);
                    if offset >= next {
                        records.push((
                            offset,
                            Rec {
                                key: r.key().map(<[u8]>::to_vec),
                                value: r.value().map(<[u8]>::to_vec),
                                headers: r
                                    .headers()
                                    .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                                    .collect(),
                                ts: batch.record_timestamp(&r),
                            },
                        ));
                    }
                }
                if batch.record_count() > 0 {
                    batches.push(batch.clone());
                }
            }
            next = next.max(batch_next);
        }
        assert!(
            next > before || next >= end,
            "no progress reading {tp} at {next} (end {end})"
        );
    }
    (records, batches)
}

/// Just the records.
pub async fn records(client: &Client, tp: &TopicPartition, from: i64) -> Vec<Rec> {
    read_committed(client, tp, from)
        .await
        .0
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// Waits until `tp` on `client` holds at least `n` committed records.
pub async fn wait_records(client: &Client, tp: &TopicPartition, n: usize) -> Vec<Rec> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let end = offset(client, tp, OffsetSpec::Latest, Isolation::ReadCommitted).await;
        if end > 0 {
            let got = records(client, tp, 0).await;
            if got.len() >= n {
                return got;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{tp}: fewer than {n} records after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The two lists are equal record for record (key, value, headers, timestamp).
pub fn assert_same(what: &str, want: &[Rec], got: &[Rec]) {
    if let Some(i) = (0..want.len().min(got.len())).find(|&i| want[i] != got[i]) {
        panic!(
            "{what}: record {i} differs:\n want {:?}\n got  {:?}",
            want[i], got[i]
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} records on the target, {} expected",
        got.len(),
        want.len()
    );
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
