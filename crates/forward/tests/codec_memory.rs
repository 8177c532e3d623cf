//! Codec work stays in the memory budget and off the runtime's workers (issue 28, item 4).
//!
//! A 100 KB zstd batch can hold 9.5 million empty records (66 MB decompressed); re-encoding it
//! used to reserve an 80-byte entry per record from the header's count (about 770 MB per
//! partition) outside `Settings::memory_budget`, inline on a runtime worker. Here a counting
//! global allocator measures the peak heap while the forwarder meets such batches on several
//! partitions, and refuses any allocation past budget + [`SLACK`] (the process then aborts with
//! "memory allocation failed", so a regression cannot take the machine down). Its own test binary
//! (a global allocator needs one); the tests take [`SERIAL`] so no other test allocates while one
//! measures.
#![allow(clippy::unwrap_used)]

mod common;

use common::NoPositions;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strait_forward::observe::Observer;
use strait_forward::pipeline::io::{
    FetchSpec, Fetched, IoError, NoTransactions, ProduceAck, ProducerIdentity, Source,
    StartPosition, Target, TopicLimits,
};
use strait_forward::reencode::{Allowance, reencode_within};
use strait_forward::{
    CodecError, Compression, Error, Forwarder, ProducerStamp, RecordBatch, Route, Settings,
    TargetPolicy,
};
use strait_testkit::heap;
use strait_wire::TopicPartition;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

/// One measuring test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;

/// Heap allowed beyond the budget: the codec libraries' own state (zstd's window and contexts,
/// lz4's tables: a few MB per job running at once), the runtime and its blocking threads, and the
/// tests' own bookkeeping.
const SLACK: usize = 32 * MIB;

/// The issue's batch: this many empty records.
const HOSTILE_RECORDS: usize = 9_500_000;

/// A v2 batch framed by hand (the test kit's encoder wants one entry per record, which for
/// millions of records is the very allocation under test).
fn frame(
    base_offset: i64,
    codec: Compression,
    count: i32,
    last_delta: i32,
    payload: &[u8],
) -> Bytes {
    let mut b = Vec::with_capacity(61 + payload.len());
    b.extend_from_slice(&base_offset.to_be_bytes());
    b.extend_from_slice(&((49 + payload.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
    b.push(2); // magic
    b.extend_from_slice(&[0; 4]); // crc, below
    b.extend_from_slice(&i16::from(codec.id()).to_be_bytes());
    b.extend_from_slice(&last_delta.to_be_bytes());
    b.extend_from_slice(&1_000i64.to_be_bytes()); // baseTimestamp
    b.extend_from_slice(&1_000i64.to_be_bytes()); // maxTimestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(payload);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// `n` empty records (no key, no value, no headers, deltas 0): 7 bytes each, the smallest a
/// record can be, zstd-compressed. 9.5 million of them weigh about 100 KB.
fn empty_records_batch(base_offset: i64, n: usize) -> Bytes {
    let section: Vec<u8> = [12u8, 0, 0, 0, 1, 1, 0].repeat(n);
    let mut payload = Vec::new();
    Compression::Zstd
        .compress(&section, None, &mut payload)
        .unwrap();
    drop(section);
    frame(base_offset, Compression::Zstd, n as i32, 0, &payload)
}

/// A source whose partitions hold `batches[p]` at offset 0; past it a fetch long-polls empty.
#[derive(Clone)]
struct OneBatchSource {
    batches: Arc<Vec<Bytes>>,
}

impl Source for OneBatchSource {
    fn fetch(&self, spec: &FetchSpec) -> impl Future<Output = Result<Fetched, IoError>> + Send {
        let batch = self.batches[spec.partition.partition() as usize].clone();
        let end = RecordBatch::parse(batch.clone()).unwrap().next_offset();
        let records = if spec.offset < end {
            batch
        } else {
            Bytes::new()
        };
        let wait = records.is_empty().then_some(spec.max_wait);
        async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            Ok(Fetched {
                records,
                high_watermark: end,
                last_stable_offset: end,
                log_start_offset: 0,
                aborted: Vec::new(),
            })
        }
    }

    async fn resolve(&self, _: &TopicPartition, _: StartPosition) -> Result<i64, IoError> {
        Ok(0)
    }
}

/// A target that takes every batch and counts records per partition.
#[derive(Clone, Default)]
struct CountingTarget {
    records: Arc<Mutex<std::collections::HashMap<i32, u64>>>,
    /// Called with each produced (target partition, record count).
    on_produce: Option<Arc<dyn Fn(i32, u64) + Send + Sync>>,
}

impl Target for CountingTarget {
    async fn init_producer_id(&self) -> Result<ProducerIdentity, IoError> {
        Ok(ProducerIdentity {
            producer_id: 1,
            epoch: 0,
        })
    }

    async fn leader(&self, _: &TopicPartition, _: bool) -> Result<i32, IoError> {
        Ok(1)
    }

    async fn end_offset(&self, _: &TopicPartition) -> Result<i64, IoError> {
        Ok(0)
    }

    async fn produce(
        &self,
        _: i32,
        _: u16,
        batches: Vec<(TopicPartition, Bytes)>,
        _: Option<&str>,
    ) -> Result<Vec<Result<ProduceAck, IoError>>, IoError> {
        for (tp, b) in &batches {
            let n = u64::from(u32::from_be_bytes(b[57..61].try_into().unwrap()));
            *self
                .records
                .lock()
                .unwrap()
                .entry(tp.partition())
                .or_default() += n;
            if let Some(f) = &self.on_produce {
                f(tp.partition(), n);
            }
        }
        let ack = ProduceAck {
            base_offset: 0,
            log_append_time_ms: None,
            log_start_offset: None,
        };
        Ok(batches.iter().map(|_| Ok(ack)).collect())
    }

    async fn topic_limits(&self, _: &str) -> Result<TopicLimits, IoError> {
        Ok(TopicLimits::default())
    }

    type Transactions = NoTransactions;

    fn transactions(&self, _: &str, _: Duration) -> Result<NoTransactions, IoError> {
        Ok(NoTransactions)
    }

    async fn stable_positions(
        &self,
        _: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Option<i64>>, IoError> {
        Ok(vec![None; partitions.len()])
    }
}

struct Quiet;
impl Observer for Quiet {}

fn routes(n: i32) -> Vec<Route> {
    (0..n)
        .map(|p| Route {
            source: TopicPartition::new("src", p).unwrap(),
            target: TopicPartition::new("dst", p).unwrap(),
        })
        .collect()
}

/// Runs `f` with allocations past `limit` bytes more than the heap holds now refused, and
/// returns its result and the peak growth of the heap.
fn measured<T>(limit: usize, f: impl FnOnce() -> T) -> (T, usize) {
    let base = heap::live_bytes();
    heap::reset_peak();
    heap::set_limit(base + limit as isize);
    let out = f();
    heap::set_limit(isize::MAX);
    (out, (heap::peak_bytes() - base).max(0) as usize)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_time()
        .build()
        .unwrap()
}

/// The issue's batch, re-encoded directly within a 256 MiB allowance: refused with the typed
/// error before its 9.5 million entries are allocated, the heap growing by at most the
/// allowance plus the slack.
#[test]
fn the_issues_batch_is_refused_within_the_allowance() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let batch = RecordBatch::parse(empty_records_batch(0, HOSTILE_RECORDS)).unwrap();
    assert!(
        batch.as_bytes().len() < 200_000,
        "{} bytes: not the issue's shape",
        batch.as_bytes().len()
    );
    let allowance_bytes = 256 * MIB;
    let mut allowance = Allowance::new(allowance_bytes);
    let policy = TargetPolicy {
        compression: Some(Compression::Lz4),
        ..TargetPolicy::default()
    };
    let (result, peak) = measured(allowance_bytes + SLACK, || {
        reencode_within(&batch, 0, ProducerStamp::NONE, &policy, &mut allowance)
    });
    println!(
        "peak heap {} MiB, accounted {} MiB",
        peak / MIB,
        allowance.peak() / MIB
    );
    match result {
        Err(CodecError::OverAllowance { needed, allowance }) => {
            assert_eq!(allowance, allowance_bytes);
            // 9.5 M entries alone are about 760 MB.
            assert!(needed > 700_000_000, "needed {needed}");
        }
        other => panic!("expected OverAllowance, got {other:?}"),
    }
    assert!(allowance.peak() <= allowance_bytes);
    assert!(peak <= allowance_bytes + SLACK, "peak heap {peak}");
}

/// The same batch on three partitions of a forwarder with a 256 MiB budget, re-encoded to lz4:
/// each partition stops with `Error::CodecMemory` (naming the budget), none allocates beyond it.
/// Before the fix each partition reserved ~770 MB for the header's record count: the allocation
/// limit aborts the process.
#[test]
fn hostile_batches_on_three_partitions_stop_them_within_the_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let budget = 256 * MIB;
    let batch = empty_records_batch(0, HOSTILE_RECORDS);
    let source = OneBatchSource {
        batches: Arc::new(vec![batch; 3]),
    };
    let target = CountingTarget::default();
    let rt = runtime();
    let (failures, peak) = measured(budget + SLACK, || {
        rt.block_on(async {
            let mut settings = Settings::default();
            settings.memory_budget = budget;
            settings.compression = Some(Compression::Lz4);
            let forwarder = Forwarder::new(
                source,
                target.clone(),
                NoPositions,
                settings,
                Arc::new(Quiet),
            )
            .await
            .unwrap();
            forwarder.assign(routes(3)).await.unwrap();
            // Generous: a debug build on a loaded machine decompresses 3 x 66 MB a few times.
            for _ in 0..3_000 {
                if forwarder.failures().len() == 3 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let failures = forwarder.failures();
            forwarder.shutdown().await.unwrap();
            failures
        })
    });
    drop(rt);
    println!("peak heap {} MiB", peak / MIB);
    assert_eq!(failures.len(), 3, "{failures:?}");
    for f in &failures {
        let Error::Partition { source, .. } = f.error.as_ref() else {
            panic!("{}", f.error);
        };
        assert!(
            matches!(**source, Error::CodecMemory { budget: b, needed, .. } if b == budget && needed > budget),
            "{source}"
        );
        assert!(f.error.to_string().contains("Settings::memory_budget"));
    }
    assert!(target.records.lock().unwrap().is_empty());
    assert!(peak <= budget + SLACK, "peak heap {peak}");
}

/// Batches of 300,000 small records (about 10 MB decompressed, ~100 MB of working memory to
/// re-encode) on three partitions with a 256 MiB budget: all of them are re-encoded and
/// delivered, the partitions taking turns at the budget, and the heap stays under it.
#[test]
fn large_batches_within_the_budget_are_reencoded_under_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: i32 = 300_000;
    let budget = 256 * MIB;
    let batches: Vec<Bytes> = (0..3)
        .map(|_| Bytes::from(common::simple_batch(0, N, Compression::Zstd)))
        .collect();
    let source = OneBatchSource {
        batches: Arc::new(batches),
    };
    let target = CountingTarget::default();
    let rt = runtime();
    let (failures, peak) = measured(budget + SLACK, || {
        rt.block_on(async {
            let mut settings = Settings::default();
            settings.memory_budget = budget;
            settings.compression = Some(Compression::Gzip);
            let forwarder = Forwarder::new(
                source,
                target.clone(),
                NoPositions,
                settings,
                Arc::new(Quiet),
            )
            .await
            .unwrap();
            forwarder.assign(routes(3)).await.unwrap();
            for _ in 0..3_000 {
                let done = target.records.lock().unwrap().values().sum::<u64>();
                if done == 3 * N as u64 || !forwarder.failures().is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let failures = forwarder.failures();
            forwarder.shutdown().await.unwrap();
            failures
        })
    });
    drop(rt);
    println!("peak heap {} MiB", peak / MIB);
    assert!(failures.is_empty(), "{failures:?}");
    let records = target.records.lock().unwrap().clone();
    assert_eq!(records.len(), 3);
    assert!(records.values().all(|&n| n == N as u64), "{records:?}");
    assert!(peak <= budget + SLACK, "peak heap {peak}");
}

/// A source where partition 0 holds one large batch with offset gaps (every other offset, as
/// compaction leaves them: it must be re-encoded) and partition 1 an endless stream of
/// one-record batches (passed through).
#[derive(Clone)]
struct BusySource {
    large: Bytes,
    large_end: i64,
    /// Partition 1's records acknowledged when partition 0's fetch returned.
    at_fetch: Arc<AtomicU64>,
    small_done: Arc<AtomicU64>,
}

impl Source for BusySource {
    fn fetch(&self, spec: &FetchSpec) -> impl Future<Output = Result<Fetched, IoError>> + Send {
        let this = self.clone();
        let (partition, offset, max_wait) =
            (spec.partition.partition(), spec.offset, spec.max_wait);
        async move {
            if partition == 0 {
                if offset >= this.large_end {
                    tokio::time::sleep(max_wait).await;
                    return Ok(fetched(Bytes::new(), this.large_end));
                }
                this.at_fetch
                    .store(this.small_done.load(Ordering::SeqCst), Ordering::SeqCst);
                return Ok(fetched(this.large.clone(), this.large_end));
            }
            // Let time pass a little, as a broker would.
            tokio::task::yield_now().await;
            let batch = Bytes::from(common::simple_batch(offset, 1, Compression::None));
            Ok(fetched(batch, offset + 1_000_000))
        }
    }

    async fn resolve(&self, _: &TopicPartition, _: StartPosition) -> Result<i64, IoError> {
        Ok(0)
    }
}

fn fetched(records: Bytes, end: i64) -> Fetched {
    Fetched {
        records,
        high_watermark: end,
        last_stable_offset: end,
        log_start_offset: 0,
        aborted: Vec::new(),
    }
}

/// While one partition re-encodes a large batch (~40 MB decompressed), another one on the same
/// single-threaded runtime keeps forwarding: the codec work runs on a blocking thread. Before the
/// fix it ran inline, and the other partition forwarded nothing from the moment the large batch
/// was fetched until its re-encoding was produced. No wall-clock bound: progress is counted in
/// records of the other partition between those two events.
#[test]
fn other_partitions_keep_forwarding_while_one_reencodes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 300_000;
    // Every other offset: the gaps force a re-encode.
    let mut section = Vec::new();
    for i in 0..N {
        let value = format!("value {i:>12} with some text that compresses well ............");
        let mut body = vec![0u8, 0]; // attributes, timestampDelta 0
        put_varint(&mut body, (2 * i) as i64); // offsetDelta
        put_varint(&mut body, -1); // no key
        put_varint(&mut body, value.len() as i64);
        body.extend_from_slice(value.as_bytes());
        body.push(0); // no headers
        put_varint(&mut section, body.len() as i64);
        section.extend_from_slice(&body);
    }
    let mut payload = Vec::new();
    Compression::Zstd
        .compress(&section, None, &mut payload)
        .unwrap();
    let last_delta = 2 * (N as i32 - 1);
    let large = frame(0, Compression::Zstd, N as i32, last_delta, &payload);
    drop(section);

    let small_done = Arc::new(AtomicU64::new(0));
    let at_fetch = Arc::new(AtomicU64::new(0));
    let at_produce = Arc::new(AtomicU64::new(u64::MAX));
    let source = BusySource {
        large,
        large_end: i64::from(last_delta) + 1,
        at_fetch: at_fetch.clone(),
        small_done: small_done.clone(),
    };
    let target = CountingTarget {
        on_produce: Some(Arc::new({
            let (small_done, at_produce) = (small_done.clone(), at_produce.clone());
            move |partition, n| {
                if partition == 1 {
                    small_done.fetch_add(n, Ordering::SeqCst);
                } else {
                    let now = small_done.load(Ordering::SeqCst);
                    let _ = at_produce.compare_exchange(
                        u64::MAX,
                        now,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
            }
        })),
        ..CountingTarget::default()
    };
    // One worker thread: inline codec work would stop every partition.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let failures = rt.block_on(async {
        let forwarder = Forwarder::new(
            source,
            target.clone(),
            NoPositions,
            Settings::default(),
            Arc::new(Quiet),
        )
        .await
        .unwrap();
        forwarder.assign(routes(2)).await.unwrap();
        for _ in 0..3_000 {
            if at_produce.load(Ordering::SeqCst) != u64::MAX || !forwarder.failures().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let failures = forwarder.failures();
        forwarder.shutdown().await.unwrap();
        failures
    });
    assert!(failures.is_empty(), "{failures:?}");
    let (fetched_at, produced_at) = (
        at_fetch.load(Ordering::SeqCst),
        at_produce.load(Ordering::SeqCst),
    );
    assert_ne!(produced_at, u64::MAX, "the large batch was never produced");
    let during = produced_at - fetched_at;
    println!("partition 1 forwarded {during} records while partition 0 re-encoded");
    assert!(
        during >= 100,
        "partition 1 forwarded only {during} records while partition 0 re-encoded"
    );
    assert_eq!(
        target.records.lock().unwrap().get(&0).copied(),
        Some(N as u64)
    );
}

/// Zigzag varint, as Kafka's records use.
fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}
