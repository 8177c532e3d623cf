//! Helpers shared by the `wire_*` integration tests: record batches built and read with the test
//! kit's independent encoder (`strait_testkit::batch`, uncompressed v2), Java-built fixture
//! batches from `crates/forward/tests/fixtures`, and client construction from testkit properties.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use strait_testkit::batch::{Batch, CONTROL, Record, split_batches};
use strait_testkit::{Cluster, Listener};
use strait_wire::{Client, ClientConfig, FetchOptions, FetchPartition, TopicPartition};

/// Patience for things a loaded 2-core machine does slowly (never a wall-clock assertion).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// One record to put in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

impl Rec {
    pub fn value(v: &str) -> Rec {
        Rec {
            key: None,
            value: Some(v.as_bytes().to_vec()),
            headers: Vec::new(),
            timestamp: now_ms(),
        }
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// An uncompressed v2 record batch, base offset 0, as a producer sends it (framed by the test
/// kit's independent encoder).
pub fn build_batch(records: &[Rec], producer_id: i64, epoch: i16, base_sequence: i32) -> Bytes {
    let batch = Batch {
        base_timestamp: records.iter().map(|r| r.timestamp).min().unwrap_or(0),
        max_timestamp: records.iter().map(|r| r.timestamp).max().unwrap_or(0),
        producer_id,
        producer_epoch: epoch,
        base_sequence,
        records: records
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
                offset_delta: i as i32,
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                    .collect(),
            })
            .collect(),
        ..Batch::default()
    };
    Bytes::from(batch.encode())
}

/// A record read back from a fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRec {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: i64,
}

/// One batch in fetched bytes: (base offset, the whole batch); a partial batch at the end of a
/// fetch is left out.
pub fn batches(records: &Bytes) -> Vec<(i64, Bytes)> {
    split_batches(records)
        .into_iter()
        .map(|(base, b)| (base, records.slice_ref(b)))
        .collect()
}

/// Decodes the records of uncompressed, non-control v2 batches (panics on anything else).
pub fn read_records(records: &Bytes) -> Vec<ReadRec> {
    let mut out = Vec::new();
    for (base, b) in split_batches(records) {
        let batch = Batch::decode(b, |codec, _| {
            panic!("only uncompressed batches are decoded here, not codec {codec}")
        });
        if batch.attributes & CONTROL != 0 {
            continue;
        }
        out.extend(batch.records.into_iter().map(|r| {
            ReadRec {
                offset: base + i64::from(r.offset_delta),
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (String::from_utf8(k).unwrap(), v))
                    .collect(),
                timestamp: r.timestamp,
            }
        }));
    }
    out
}

/// A Java-built fixture batch (see `crates/forward/tests/fixtures/*.txt`) with base offset 0, as
/// a producer would send it (the base offset is outside the CRC).
pub fn fixture(name: &str) -> Bytes {
    let path = format!(
        "{}/../forward/tests/fixtures/{name}.bin",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v = std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
    v[0..8].copy_from_slice(&0i64.to_be_bytes());
    Bytes::from(v)
}

/// Properties for `user` on listener `l`, with short timeouts suited to tests.
pub fn props(cluster: &Cluster, l: Listener, user: Option<&str>) -> Vec<(String, String)> {
    let mut p = cluster.client_properties(l, user);
    p.push(("client.id".into(), "strait-wire-test".into()));
    p
}

pub async fn connect(props: Vec<(String, String)>) -> strait_wire::Result<Client> {
    Client::connect(ClientConfig::from_properties(props)?).await
}

pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition).unwrap()
}

/// Fetches `tp` from `from` until `want` records have been read (or PATIENCE runs out).
pub async fn fetch_all(
    client: &Client,
    tp: &TopicPartition,
    from: i64,
    want: usize,
) -> Vec<ReadRec> {
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut out: Vec<ReadRec> = Vec::new();
    let mut offset = from;
    while out.len() < want {
        assert!(
            std::time::Instant::now() < deadline,
            "read only {} of {want} records from {tp}",
            out.len()
        );
        let got = client
            .fetch(
                &[FetchPartition::new(tp.clone(), offset)],
                &FetchOptions::default(),
            )
            .await
            .unwrap();
        let p = &got[0];
        p.check(None).unwrap();
        for r in read_records(&p.records) {
            if r.offset >= offset {
                offset = r.offset + 1;
                out.push(r);
            }
        }
        if let Some((base, b)) = batches(&p.records).last() {
            let last_delta = i32::from_be_bytes(b[23..27].try_into().unwrap()) as i64;
            offset = offset.max(base + last_delta + 1);
        }
    }
    out
}

/// Runs blocking testkit work off the async runtime.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}
