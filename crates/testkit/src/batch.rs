//! An independent Kafka record-batch (magic v2) encoder and decoder for tests and benchmarks.
//!
//! Written from the protocol description, and deliberately sharing no code with `strait-forward`'s
//! codec: tests that build their input here and read it back with the forwarder (or the reverse)
//! check the codec against a second implementation, not against itself. The unit tests pin it to
//! batches written by the Java client (`crates/forward/tests/fixtures`).
//!
//! Compression is left to the caller ([`Batch::encode_compressed`] takes the compressed records
//! section): the codecs are the compression libraries' business, the framing is this module's.

/// Attribute bit of a transactional batch.
pub const TRANSACTIONAL: i16 = 0x10;
/// Attribute bit of a control (transaction marker) batch.
pub const CONTROL: i16 = 0x20;
/// Attribute bit of LogAppendTime timestamps.
pub const LOG_APPEND_TIME: i16 = 0x08;
/// The attribute bits naming the compression codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub const CODEC_MASK: i16 = 0x07;

/// Size of the v2 batch header, up to and including the record count.
pub const HEADER_LEN: usize = 61;

/// One record of a batch: its offset delta and absolute timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Record {
    /// Offset relative to the batch's base offset.
    pub offset_delta: i32,
    /// Absolute timestamp (stored as a delta from the batch's base timestamp).
    pub timestamp: i64,
    /// `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// `None` is a null value (a tombstone).
    pub value: Option<Vec<u8>>,
    /// Header keys are bytes here (Kafka requires UTF-8; tests may not).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Everything in a v2 batch header, and its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// First offset of the batch.
    pub base_offset: i64,
    /// Set by the broker; producers send -1.
    pub partition_leader_epoch: i32,
    /// All attribute bits, codec bits included.
    pub attributes: i16,
    /// `None`: the last record's offset delta (0 with no records).
    pub last_offset_delta: Option<i32>,
    /// Timestamp the record deltas are relative to (or the delete horizon, see Kafka's bit 6).
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// -1 for a non-idempotent producer.
    pub producer_id: i64,
    /// -1 for a non-idempotent producer.
    pub producer_epoch: i16,
    /// -1 for a non-idempotent producer.
    pub base_sequence: i32,
    /// The records, in order.
    pub records: Vec<Record>,
}

impl Default for Batch {
    /// An empty batch as a plain (non-idempotent) producer sends it: base offset 0, no codec.
    fn default() -> Self {
        Batch {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: 0,
            last_offset_delta: None,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records: Vec::new(),
        }
    }
}

/// Appends a zigzag varint (Kafka's signed varint; the 64-bit form gives the same bytes as the
/// 32-bit one for i32 values).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Reads a zigzag varint at `*pos`, advancing it. Panics on truncated input (test data).
pub fn get_varint(b: &[u8], pos: &mut usize) -> i64 {
    let mut z: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = b[*pos];
        *pos += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        assert!(shift < 70, "varint longer than 10 bytes at {}", *pos);
    }
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

fn get_nullable(b: &[u8], pos: &mut usize) -> Option<Vec<u8>> {
    let n = get_varint(b, pos);
    if n < 0 {
        return None;
    }
    let n = usize::try_from(n).expect("length fits usize");
    let v = b[*pos..*pos + n].to_vec();
    *pos += n;
    Some(v)
}

/// Appends one record (length prefix included), its timestamp relative to `base_timestamp`.
pub fn put_record(out: &mut Vec<u8>, r: &Record, base_timestamp: i64) {
    let mut body = vec![0u8]; // record attributes: unused, always 0
    put_varint(&mut body, r.timestamp.wrapping_sub(base_timestamp));
    put_varint(&mut body, i64::from(r.offset_delta));
    put_nullable(&mut body, r.key.as_deref());
    put_nullable(&mut body, r.value.as_deref());
    put_varint(&mut body, r.headers.len() as i64);
    for (k, v) in &r.headers {
        put_nullable(&mut body, Some(k));
        put_nullable(&mut body, v.as_deref());
    }
    put_varint(out, body.len() as i64);
    out.extend_from_slice(&body);
}

/// Decodes `count` uncompressed records from `section`.
pub fn get_records(section: &[u8], count: usize, base_timestamp: i64) -> Vec<Record> {
    let mut pos = 0;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let len = usize::try_from(get_varint(section, &mut pos)).expect("record length");
        let end = pos + len;
        pos += 1; // record attributes
        let timestamp = base_timestamp.wrapping_add(get_varint(section, &mut pos));
        let offset_delta = i32::try_from(get_varint(section, &mut pos)).expect("offset delta");
        let key = get_nullable(section, &mut pos);
        let value = get_nullable(section, &mut pos);
        let headers = (0..get_varint(section, &mut pos))
            .map(|_| {
                let k = get_nullable(section, &mut pos).expect("header key is never null");
                (k, get_nullable(section, &mut pos))
            })
            .collect();
        assert_eq!(pos, end, "record length prefix disagrees with its fields");
        out.push(Record {
            offset_delta,
            timestamp,
            key,
            value,
            headers,
        });
    }
    assert_eq!(pos, section.len(), "bytes left after {count} records");
    out
}

impl Batch {
    /// `n` records with consecutive offsets from `base_offset` and the given values, timestamps
    /// `timestamp`, `timestamp + 1`, ... (keys and headers none).
    pub fn of_values<V: AsRef<[u8]>>(base_offset: i64, timestamp: i64, values: &[V]) -> Batch {
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                offset_delta: i as i32,
                timestamp: timestamp + i as i64,
                value: Some(v.as_ref().to_vec()),
                ..Record::default()
            })
            .collect();
        Batch {
            base_offset,
            base_timestamp: timestamp,
            max_timestamp: timestamp + (records.len() as i64 - 1).max(0),
            records,
            ..Batch::default()
        }
    }

    /// The records section, uncompressed.
    pub fn records_section(&self) -> Vec<u8> {
        let mut section = Vec::new();
        for r in &self.records {
            put_record(&mut section, r, self.base_timestamp);
        }
        section
    }

    /// The batch with its records uncompressed (the codec bits of `attributes` are written as
    /// they are: set them only with [`Batch::encode_compressed`]).
    pub fn encode(&self) -> Vec<u8> {
        self.frame(&self.records_section())
    }

    /// The batch with `compress(records section)` as its payload; `attributes` must name the
    /// codec `compress` applies.
    pub fn encode_compressed(&self, compress: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
        self.frame(&compress(&self.records_section()))
    }

    /// Header + `payload`, with the batch length and CRC-32C (from the attributes onwards)
    /// computed here.
    fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let last_offset_delta = self
            .last_offset_delta
            .unwrap_or_else(|| self.records.last().map_or(0, |r| r.offset_delta));
        let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
        b.extend_from_slice(&self.base_offset.to_be_bytes());
        b.extend_from_slice(&((HEADER_LEN - 12 + payload.len()) as i32).to_be_bytes());
        b.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b.push(2); // magic
        b.extend_from_slice(&[0; 4]); // CRC, filled in below
        b.extend_from_slice(&self.attributes.to_be_bytes());
        b.extend_from_slice(&last_offset_delta.to_be_bytes());
        b.extend_from_slice(&self.base_timestamp.to_be_bytes());
        b.extend_from_slice(&self.max_timestamp.to_be_bytes());
        b.extend_from_slice(&self.producer_id.to_be_bytes());
        b.extend_from_slice(&self.producer_epoch.to_be_bytes());
        b.extend_from_slice(&self.base_sequence.to_be_bytes());
        b.extend_from_slice(&(self.records.len() as i32).to_be_bytes());
        b.extend_from_slice(payload);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// Decodes one whole v2 batch, checking its length and CRC; `decompress` turns the payload
    /// into the records section (called only when the codec bits are set). Panics on anything
    /// malformed: this reads test data, not peer input.
    pub fn decode(b: &[u8], decompress: impl FnOnce(i16, &[u8]) -> Vec<u8>) -> Batch {
        assert!(
            b.len() >= HEADER_LEN,
            "{} bytes is shorter than a batch header",
            b.len()
        );
        let be = |range: std::ops::Range<usize>| -> Vec<u8> { b[range].to_vec() };
        let i16_at = |at: usize| i16::from_be_bytes([b[at], b[at + 1]]);
        let i32_at = |at: usize| i32::from_be_bytes(be(at..at + 4).try_into().expect("4 bytes"));
        let i64_at = |at: usize| i64::from_be_bytes(be(at..at + 8).try_into().expect("8 bytes"));
        let len = usize::try_from(i32_at(8)).expect("batch length");
        assert_eq!(b.len(), 12 + len, "batch length field");
        assert_eq!(b[16], 2, "magic");
        let crc = u32::from_be_bytes(be(17..21).try_into().expect("4 bytes"));
        assert_eq!(crc, crc32c::crc32c(&b[21..]), "CRC-32C");
        let attributes = i16_at(21);
        let base_timestamp = i64_at(27);
        let count = usize::try_from(i32_at(57)).expect("record count");
        let payload = &b[HEADER_LEN..];
        let section = if attributes & CODEC_MASK == 0 {
            payload.to_vec()
        } else {
            decompress(attributes & CODEC_MASK, payload)
        };
        Batch {
            base_offset: i64_at(0),
            partition_leader_epoch: i32_at(12),
            attributes,
            last_offset_delta: Some(i32_at(23)),
            base_timestamp,
            max_timestamp: i64_at(35),
            producer_id: i64_at(43),
            producer_epoch: i16_at(51),
            base_sequence: i32_at(53),
            records: get_records(&section, count, base_timestamp),
        }
    }
}

/// Splits fetched bytes into whole batches, `(base offset, batch bytes)`; a partial batch at the
/// end (a fetch may cut one) is left out.
pub fn split_batches(records: &[u8]) -> Vec<(i64, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0;
    while records.len() - pos >= 12 {
        let base = i64::from_be_bytes(records[pos..pos + 8].try_into().expect("8 bytes"));
        let len = i32::from_be_bytes(records[pos + 8..pos + 12].try_into().expect("4 bytes"));
        let end = pos + 12 + usize::try_from(len).expect("batch length");
        if end > records.len() {
            break;
        }
        out.push((base, &records[pos..end]));
        pos = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../forward/tests/fixtures/{name}.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
    }

    fn no_codec(codec: i16, _: &[u8]) -> Vec<u8> {
        panic!("uncompressed fixture has codec {codec}")
    }

    /// Decoding a batch the Java client wrote and encoding it again gives the same bytes: the
    /// encoder agrees with Kafka on varints, nulls, headers, deltas, length and CRC.
    #[test]
    fn java_batches_round_trip_byte_for_byte() {
        for name in ["v2_none", "v2_compacted_none", "v2_empty"] {
            let java = fixture(name);
            for (_, batch) in split_batches(&java) {
                let decoded = Batch::decode(batch, no_codec);
                assert_eq!(decoded.encode(), batch, "{name}");
            }
        }
    }

    /// Field values read from `v2_none` match what Kafka's reader printed (`v2_none.txt`).
    #[test]
    fn decodes_java_fields() {
        let java = fixture("v2_none");
        let b = Batch::decode(&java, no_codec);
        assert_eq!(
            (
                b.base_offset,
                b.producer_id,
                b.producer_epoch,
                b.base_sequence
            ),
            (1000, 4242, 3, 17)
        );
        assert_eq!(b.records.len(), 20);
        assert_eq!(b.max_timestamp, 1_700_000_000_030);
        let r2 = &b.records[2];
        assert_eq!((r2.offset_delta, r2.timestamp), (2, 1_699_999_999_997));
        assert_eq!(
            (r2.key.as_deref(), r2.value.as_deref()),
            (Some(&b""[..]), None)
        );
        assert_eq!(r2.headers[0], (b"nullval".to_vec(), None));
    }

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [
            0,
            -1,
            1,
            63,
            -64,
            64,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
            i64::MAX,
            i64::MIN,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(get_varint(&out, &mut pos), v);
            assert_eq!(pos, out.len());
        }
        let mut out = Vec::new();
        put_varint(&mut out, -1);
        assert_eq!(out, [1], "zigzag: -1 is 1");
    }

    #[test]
    fn split_leaves_out_a_partial_tail() {
        let one = Batch::of_values(5, 1_000, &["a", "b"]).encode();
        let mut fetched = one.clone();
        fetched.extend_from_slice(&one[..20]);
        let split = split_batches(&fetched);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0], (5, &one[..]));
    }
}
