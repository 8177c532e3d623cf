//! Helpers shared by the `wire_*` integration tests: record batches built by hand (uncompressed
//! v2, with a real CRC-32C), Java-built fixture batches from `crates/forward/tests/fixtures`, a
//! minimal batch walker to read fetched records, and client construction from testkit properties.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
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

fn put_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn get_varint(b: &[u8], pos: &mut usize) -> i64 {
    let mut shift = 0;
    let mut z: u64 = 0;
    loop {
        let byte = b[*pos];
        *pos += 1;
        z |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn put_bytes(buf: &mut BytesMut, b: &Option<Vec<u8>>) {
    match b {
        None => put_varint(buf, -1),
        Some(b) => {
            put_varint(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

/// An uncompressed v2 record batch, base offset 0, as a producer sends it.
pub fn build_batch(records: &[Rec], producer_id: i64, epoch: i16, base_sequence: i32) -> Bytes {
    let base_ts = records.iter().map(|r| r.timestamp).min().unwrap_or(0);
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(0);
    let mut body = BytesMut::new();
    for (i, r) in records.iter().enumerate() {
        let mut rec = BytesMut::new();
        rec.put_u8(0); // attributes
        put_varint(&mut rec, r.timestamp - base_ts);
        put_varint(&mut rec, i as i64);
        put_bytes(&mut rec, &r.key);
        put_bytes(&mut rec, &r.value);
        put_varint(&mut rec, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_varint(&mut rec, k.len() as i64);
            rec.put_slice(k.as_bytes());
            put_bytes(&mut rec, v);
        }
        put_varint(&mut body, rec.len() as i64);
        body.put_slice(&rec);
    }
    let mut b = BytesMut::new();
    b.put_i64(0); // base offset
    b.put_i32(0); // batch length, patched below
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2); // magic
    b.put_u32(0); // crc, patched below
    b.put_i16(0); // attributes: no compression, CreateTime
    b.put_i32(records.len() as i32 - 1); // last offset delta
    b.put_i64(base_ts);
    b.put_i64(max_ts);
    b.put_i64(producer_id);
    b.put_i16(epoch);
    b.put_i32(base_sequence);
    b.put_i32(records.len() as i32);
    b.put_slice(&body);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
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

/// One batch in fetched bytes: (base offset, the whole batch).
pub fn batches(records: &Bytes) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while records.len() - pos >= 12 {
        let base = i64::from_be_bytes(records[pos..pos + 8].try_into().unwrap());
        let len = i32::from_be_bytes(records[pos + 8..pos + 12].try_into().unwrap()) as usize;
        if records.len() - pos < 12 + len {
            break; // a partial batch at the end of a fetch
        }
        out.push((base, records.slice(pos..pos + 12 + len)));
        pos += 12 + len;
    }
    out
}

/// Decodes the records of uncompressed, non-control v2 batches (panics on anything else).
pub fn read_records(records: &Bytes) -> Vec<ReadRec> {
    let mut out = Vec::new();
    for (base, b) in batches(records) {
        assert_eq!(b[16], 2, "magic");
        let attributes = i16::from_be_bytes([b[21], b[22]]);
        if attributes & 0x20 != 0 {
            continue; // control batch
        }
        assert_eq!(
            attributes & 0x7,
            0,
            "only uncompressed batches are decoded here"
        );
        let base_ts = i64::from_be_bytes(b[27..35].try_into().unwrap());
        let count = i32::from_be_bytes(b[57..61].try_into().unwrap());
        let mut pos = 61;
        for _ in 0..count {
            let _len = get_varint(&b, &mut pos);
            pos += 1; // attributes
            let ts_delta = get_varint(&b, &mut pos);
            let off_delta = get_varint(&b, &mut pos);
            let bytes = |pos: &mut usize| {
                let n = get_varint(&b, pos);
                if n < 0 {
                    None
                } else {
                    let v = b[*pos..*pos + n as usize].to_vec();
                    *pos += n as usize;
                    Some(v)
                }
            };
            let key = bytes(&mut pos);
            let value = bytes(&mut pos);
            let nh = get_varint(&b, &mut pos);
            let mut headers = Vec::new();
            for _ in 0..nh {
                let k = bytes(&mut pos).unwrap();
                let v = bytes(&mut pos);
                headers.push((String::from_utf8(k).unwrap(), v));
            }
            out.push(ReadRec {
                offset: base + off_delta,
                key,
                value,
                headers,
                timestamp: base_ts + ts_delta,
            });
        }
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
