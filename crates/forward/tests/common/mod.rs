//! Test helpers: fixture loading, a Java-compatible dump, and an independent batch encoder
//! (written separately from the crate's re-encoder so tests do not check the code with itself).
#![allow(dead_code, clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::PathBuf;

use bytes::Bytes;
use strait_forward::{
    Compression, FetchedBatch, FetchedRecords, LogAppendTimePolicy, ProducerStamp, RecordBatch,
    TargetPolicy, TimestampType,
};

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture(name: &str) -> Bytes {
    let p = fixtures_dir().join(format!("{name}.bin"));
    Bytes::from(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

pub fn fixture_dump(name: &str) -> String {
    let p = fixtures_dir().join(format!("{name}.txt"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// All fixture names (without extension), sorted.
pub fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".bin").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Byte strings as the Java dump prints them.
pub fn hex(b: Option<&[u8]>) -> String {
    match b {
        None => "null".into(),
        Some(b) if b.len() > 64 => {
            let mut crc = flate2::Crc::new();
            crc.update(b);
            format!("#{}:{:08x}", b.len(), crc.sum())
        }
        Some(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// A decoded record, as a consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Rec {
    pub fn dump_line(&self) -> String {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(k, v)| format!("{}={}", hex(Some(k)), hex(v.as_deref())))
            .collect();
        format!(
            "record offset={} ts={} key={} value={} headers=[{}]\n",
            self.offset,
            self.timestamp,
            hex(self.key.as_deref()),
            hex(self.value.as_deref()),
            headers.join(",")
        )
    }
}

/// Records of a v2 batch with Java consumer semantics (LogAppendTime -> maxTimestamp).
pub fn records_of(batch: &RecordBatch) -> Vec<Rec> {
    let decoded = batch.decode_records(256 << 20).unwrap();
    decoded
        .iter()
        .map(|r| {
            let r = r.unwrap();
            Rec {
                offset: batch.record_offset(&r),
                timestamp: batch.record_timestamp(&r),
                key: r.key().map(<[u8]>::to_vec),
                value: r.value().map(<[u8]>::to_vec),
                headers: r
                    .headers()
                    .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                    .collect(),
            }
        })
        .collect()
}

fn tstype(t: TimestampType) -> &'static str {
    match t {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

pub fn dump_batch(name: &str, b: &RecordBatch) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "batch {name} magic={} codec={} base={} last={} count={} pid={} epoch={} seq={} txn={} control={} tstype={} maxts={} horizon={}",
        b.magic(),
        b.compression(),
        b.base_offset(),
        b.last_offset(),
        b.record_count(),
        b.producer_id(),
        b.producer_epoch(),
        b.base_sequence(),
        b.is_transactional(),
        b.is_control(),
        tstype(b.attributes().timestamp_type()),
        b.max_timestamp(),
        b.delete_horizon().map_or("none".to_string(), |h| h.to_string()),
    )
    .unwrap();
    for r in records_of(b) {
        s.push_str(&r.dump_line());
    }
    s
}

/// The dump Java's `Fixtures.java dump` prints for fetched records. Legacy entries are
/// converted with the crate's legacy path (keeping append time, as Java's deep iterator reads it).
pub fn dump_fetched(name: &str, records: Bytes) -> String {
    let mut s = String::new();
    let mut walker = FetchedRecords::new(records);
    for entry in walker.by_ref() {
        match entry.unwrap() {
            FetchedBatch::V2(b) => s.push_str(&dump_batch(name, &b)),
            FetchedBatch::Legacy(l) => {
                let ts_type = match l.timestamp_type() {
                    None => "NoTimestampType",
                    Some(t) => tstype(t),
                };
                let maxts = l.timestamp().unwrap_or(-1);
                writeln!(
                    s,
                    "batch {name} magic={} codec={} base=- last={} count=- pid=- epoch=- seq=- txn=false control=false tstype={ts_type} maxts={maxts} horizon=-",
                    l.magic(),
                    l.compression(),
                    l.last_offset(),
                )
                .unwrap();
                let policy = TargetPolicy {
                    log_append_time: LogAppendTimePolicy::KeepAppendTime,
                    ..TargetPolicy::default()
                };
                for out in l.reencode(0, ProducerStamp::NONE, &policy).unwrap() {
                    let recs = records_of(out.batch());
                    assert_eq!(recs.len(), out.source_offsets().len());
                    for (mut r, &src) in recs.into_iter().zip(out.source_offsets()) {
                        r.offset = src;
                        s.push_str(&r.dump_line());
                    }
                }
            }
        }
    }
    assert_eq!(walker.truncated_tail_bytes(), 0, "{name}: unexpected tail");
    s
}

// ------------------------------------------------------------------ independent encoder

/// A record for [`encode_batch`]: the test kit's independent encoder's record (offset delta and
/// absolute timestamp).
pub use strait_testkit::batch::Record as SpecRecord;

/// Everything that goes into a v2 batch header, with the codec as this crate names it.
#[derive(Clone, Debug)]
pub struct BatchSpec {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    /// Bits other than the codec (bit 3, 4, 5, 6, unused high bits).
    pub flags: i16,
    pub codec: Compression,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// `None`: the last record's offset delta (0 with no records).
    pub last_offset_delta: Option<i32>,
    pub records: Vec<SpecRecord>,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_offset: 0,
            partition_leader_epoch: 5,
            flags: 0,
            codec: Compression::None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            base_timestamp: 0,
            max_timestamp: 0,
            last_offset_delta: None,
            records: Vec::new(),
        }
    }
}

impl BatchSpec {
    fn to_batch(&self) -> strait_testkit::batch::Batch {
        strait_testkit::batch::Batch {
            base_offset: self.base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            attributes: self.flags | i16::from(self.codec.id()),
            last_offset_delta: self.last_offset_delta,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records: self.records.clone(),
        }
    }
}

/// The records section, uncompressed.
pub fn encode_records(spec: &BatchSpec) -> Vec<u8> {
    spec.to_batch().records_section()
}

/// The batch, framed by the test kit's encoder; only the compression is this crate's.
pub fn encode_batch(spec: &BatchSpec) -> Vec<u8> {
    spec.to_batch().encode_compressed(|section| {
        let mut payload = Vec::new();
        spec.codec.compress(section, None, &mut payload).unwrap();
        payload
    })
}

/// A simple batch of `n` records with consecutive offsets from `base_offset`.
pub fn simple_batch(base_offset: i64, n: i32, codec: Compression) -> Vec<u8> {
    encode_batch(&BatchSpec {
        base_offset,
        codec,
        base_timestamp: 1_000,
        max_timestamp: 1_000 + i64::from(n),
        records: (0..n)
            .map(|i| SpecRecord {
                offset_delta: i,
                timestamp: 1_000 + i64::from(i),
                key: Some(format!("k{i}").into_bytes()),
                value: Some(format!("value {i}").into_bytes()),
                headers: vec![(b"h".to_vec(), Some(b"1".to_vec())), (b"h".to_vec(), None)],
            })
            .collect(),
        ..BatchSpec::default()
    })
}

/// Source-group positions for tests that start every partition from `start`: nothing stored,
/// every commit accepted.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPositions;

impl strait_forward::pipeline::io::Positions for NoPositions {
    async fn load(
        &self,
        partitions: &[strait_wire::TopicPartition],
    ) -> Result<Vec<Option<i64>>, strait_forward::pipeline::io::IoError> {
        Ok(vec![None; partitions.len()])
    }

    async fn commit(
        &self,
        _: &[(strait_wire::TopicPartition, i64)],
    ) -> Result<(), strait_forward::pipeline::io::IoError> {
        Ok(())
    }
}
