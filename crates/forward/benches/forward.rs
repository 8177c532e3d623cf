//! Forwarder hot paths: the pass-through rewrite (parse + CRC-32C verify, header rewrite + CRC
//! recompute, one copy of the records) against a plain `memcpy` of the same size, and the
//! re-encode path (decompress, walk, re-encode, compress) per codec, and re-batching (16 small
//! batches merged into one: deltas rewritten when uncompressed, recompressed once otherwise).
//!
//! Batches hold realistic records (JSON-like text with random fields, 100 B or 1 KiB each) filling
//! 16 KiB or 1 MiB uncompressed; throughput is counted in bytes of the batch as it travels on the
//! wire (compressed size for compressed codecs).
//!
//! Run: `cargo bench -p strait-forward --bench forward`

use std::fmt;
use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};
use strait_forward::merge::merge;
use strait_forward::{
    Compression, ProducerStamp, RecordBatch, TargetPolicy, reencode, rewrite_for_produce_into,
};
use strait_testkit::batch::{Batch, Record, put_record};

fn main() {
    divan::main();
}

#[derive(Clone, Copy, Debug)]
struct Case {
    batch_bytes: usize,
    record_bytes: usize,
    codec: Compression,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = if self.batch_bytes >= 1 << 20 {
            format!("{}MiB", self.batch_bytes >> 20)
        } else {
            format!("{}KiB", self.batch_bytes >> 10)
        };
        write!(f, "{size}/{}B/{}", self.record_bytes, self.codec)
    }
}

const fn case(batch_bytes: usize, record_bytes: usize, codec: Compression) -> Case {
    Case {
        batch_bytes,
        record_bytes,
        codec,
    }
}

macro_rules! cases_for {
    ($batch:expr, $record:expr) => {
        [
            case($batch, $record, Compression::None),
            case($batch, $record, Compression::Gzip),
            case($batch, $record, Compression::Snappy),
            case($batch, $record, Compression::Lz4),
            case($batch, $record, Compression::Zstd),
        ]
    };
}

const fn concat<const N: usize>(parts: [[Case; 5]; 4]) -> [Case; N] {
    let mut out = [case(0, 0, Compression::None); N];
    let mut i = 0;
    while i < N {
        out[i] = parts[i / 5][i % 5];
        i += 1;
    }
    out
}

const CASES: [Case; 20] = concat([
    cases_for!(16 << 10, 100),
    cases_for!(16 << 10, 1024),
    cases_for!(1 << 20, 100),
    cases_for!(1 << 20, 1024),
]);

/// Small batches (about 1 KiB of 100 B records), the shape re-batching is for.
const MERGE_CASES: [Case; 5] = cases_for!(1 << 10, 100);

/// xorshift64*: deterministic filler without another dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// An uncompressed batch of JSON-like records filling about `case.batch_bytes`, framed by the
/// test kit's independent encoder (not the code under measurement).
fn uncompressed_batch(case: Case) -> Bytes {
    const BASE_TIMESTAMP: i64 = 1_700_000_000_000;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ case.batch_bytes as u64 ^ case.record_bytes as u64);
    let mut section = Vec::with_capacity(case.batch_bytes + 4096);
    let mut records = Vec::new();
    while section.len() < case.batch_bytes {
        let mut value = format!(
            "{{\"id\":{},\"user\":\"user-{}\",\"event\":\"{}\",\"amount\":{}.{:02},\"note\":\"",
            rng.next() % 1_000_000_000,
            rng.next() % 10_000,
            ["click", "view", "purchase", "login"][(rng.next() % 4) as usize],
            rng.next() % 10_000,
            rng.next() % 100
        )
        .into_bytes();
        let alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 ";
        while value.len() + 2 < case.record_bytes {
            value.push(alphabet[(rng.next() % alphabet.len() as u64) as usize]);
        }
        value.extend_from_slice(b"\"}");
        let key = format!("user-{}", rng.next() % 10_000).into_bytes();
        let n = records.len() as i32;
        let record = Record {
            offset_delta: n,
            timestamp: BASE_TIMESTAMP + i64::from(n),
            key: Some(key),
            value: Some(value),
            headers: Vec::new(),
        };
        // Measures the batch as it grows (the section is what fills `batch_bytes`).
        put_record(&mut section, &record, BASE_TIMESTAMP);
        records.push(record);
    }
    let batch = Batch {
        base_offset: 1000,
        partition_leader_epoch: 0,
        base_timestamp: BASE_TIMESTAMP,
        max_timestamp: BASE_TIMESTAMP + records.len() as i64 - 1,
        records,
        ..Batch::default()
    };
    Bytes::from(batch.encode())
}

/// The case's batch in its codec, as fetched (base offset 1000).
fn source_batch(case: Case) -> RecordBatch {
    let plain = RecordBatch::parse(uncompressed_batch(case)).expect("valid batch");
    let policy = TargetPolicy {
        compression: Some(case.codec),
        max_message_bytes: 64 << 20,
        ..TargetPolicy::default()
    };
    let mut out = reencode(&plain, 0, ProducerStamp::NONE, &policy).expect("encode");
    let mut bytes = BytesMut::from(&out.remove(0).into_batch().into_bytes()[..]);
    bytes[..8].copy_from_slice(&1000i64.to_be_bytes());
    RecordBatch::parse(bytes.freeze()).expect("valid batch")
}

/// Pass-through: verify the source CRC, rewrite the header, copy the records, new CRC.
#[divan::bench(args = CASES)]
fn pass_through(bencher: Bencher, case: Case) {
    let src = source_batch(case).into_bytes();
    let stamp = ProducerStamp::idempotent(4242, 1, 0);
    let mut out = BytesMut::with_capacity(src.len());
    bencher.counter(BytesCount::new(src.len())).bench_local(|| {
        out.clear();
        let batch = RecordBatch::parse(black_box(src.clone())).expect("valid batch");
        rewrite_for_produce_into(&batch, stamp, &mut out);
        black_box(&out);
    });
}

/// Baseline: one plain copy of the same number of bytes.
#[divan::bench(args = CASES)]
fn memcpy_baseline(bencher: Bencher, case: Case) {
    let src = source_batch(case).into_bytes();
    let mut out = vec![0u8; src.len()];
    bencher.counter(BytesCount::new(src.len())).bench_local(|| {
        out.copy_from_slice(black_box(&src[..]));
        black_box(&out);
    });
}

/// The slow path: decompress, walk and re-encode every record, compress again (same codec).
#[divan::bench(args = CASES, sample_count = 20)]
fn reencode_same_codec(bencher: Bencher, case: Case) {
    let batch = source_batch(case);
    let policy = TargetPolicy {
        max_message_bytes: 64 << 20,
        ..TargetPolicy::default()
    };
    bencher
        .counter(BytesCount::new(batch.size_in_bytes()))
        .counter(ItemsCount::new(batch.record_count() as usize))
        .bench_local(|| {
            black_box(
                reencode(black_box(&batch), 1000, ProducerStamp::NONE, &policy).expect("reencode"),
            );
        });
}

/// Re-batching: 16 small batches of one partition merged into one batch.
#[divan::bench(args = MERGE_CASES, sample_count = 20)]
fn merge_small_batches(bencher: Bencher, case: Case) {
    let one = source_batch(case);
    let records = 16 * one.record_count() as usize;
    let batches = vec![one.into_bytes(); 16];
    let bytes = batches.iter().map(Bytes::len).sum::<usize>();
    bencher
        .counter(BytesCount::new(bytes))
        .counter(ItemsCount::new(records))
        .bench_local(|| {
            black_box(merge(black_box(&batches), 64 << 20).expect("merge"));
        });
}
