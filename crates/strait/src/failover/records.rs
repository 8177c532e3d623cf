//! Stranded records for `strait failback`: read a range of a partition record by record, copy
//! records to the new primary with a header naming where they came from, and export them as
//! JSON lines.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use strait_forward::{FetchedBatch, FetchedRecords};
use strait_wire::fetch::{FetchOptions, FetchPartition};
use strait_wire::kafka_protocol::indexmap::IndexMap;
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::kafka_protocol::records::{Record, TimestampType};
use strait_wire::{Client, TopicPartition};

use super::file::{Access, write_atomically};
use super::topic::WriteFailure;
use crate::error::{Error, Result};

/// The header a copied record carries: `<source alias>/<topic>/<partition>/<offset>` of the
/// record on the old source. It makes the copy idempotent (a re-run skips what is there) and
/// tells a reader where a record came from.
pub const ORIGIN_HEADER: &str = "strait.failback.origin";

/// Bytes per produced batch of copied records (far below the default `max.message.bytes`; a
/// single larger record goes alone).
const BATCH_BYTES: usize = 512 * 1024;

/// One record of a partition, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrandedRecord {
    /// Where it is.
    pub partition: TopicPartition,
    /// Its offset there.
    pub offset: i64,
    /// Its timestamp (ms since the epoch).
    pub timestamp: i64,
    /// The key; `None` when null.
    pub key: Option<Bytes>,
    /// The value; `None` for a tombstone.
    pub value: Option<Bytes>,
    /// The headers in order, duplicates included.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

impl StrandedRecord {
    /// The record as one JSON line (no newline): topic, partition, offset, timestamp, key and
    /// value in base64 (`null` when null), headers as `{"key": <UTF-8 or lossy>, "value":
    /// <base64>}`.
    pub fn to_json_line(&self) -> String {
        let b64 = |b: &Option<Bytes>| b.as_ref().map(|b| BASE64.encode(b));
        let headers: Vec<serde_json::Value> = self
            .headers
            .iter()
            .map(|(k, v)| {
                serde_json::json!({
                    "key": String::from_utf8_lossy(k),
                    "value": b64(v),
                })
            })
            .collect();
        serde_json::json!({
            "topic": self.partition.topic(),
            "partition": self.partition.partition(),
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": b64(&self.key),
            "value": b64(&self.value),
            "headers": headers,
        })
        .to_string()
    }
}

/// The origin header value of a record at `offset` of `tp` on the cluster `alias`.
pub fn origin(alias: &str, tp: &TopicPartition, offset: i64) -> String {
    format!("{alias}/{}/{}/{offset}", tp.topic(), tp.partition())
}

/// One batch as read: its offsets `[base, next)` and its records inside the range read.
#[derive(Debug, Clone)]
pub struct ReadBatch {
    /// The batch's base offset.
    pub base: i64,
    /// The offset after its last one.
    pub next: i64,
    /// Its records with an offset inside the range read.
    pub records: Vec<StrandedRecord>,
}

/// Every record of `tp` with an offset in `[from, to)`, in order (control records and
/// transaction markers are not records).
pub async fn read_range(
    client: &Client,
    tp: &TopicPartition,
    from: i64,
    to: i64,
) -> Result<Vec<StrandedRecord>> {
    Ok(read_batches(client, tp, from, to)
        .await?
        .into_iter()
        .flat_map(|b| b.records)
        .collect())
}

/// The data batches of `tp` holding records in `[from, to)`, in order, with those records.
pub async fn read_batches(
    client: &Client,
    tp: &TopicPartition,
    from: i64,
    to: i64,
) -> Result<Vec<ReadBatch>> {
    let mut out = Vec::new();
    let mut next = from;
    let read_err = |e: String| Error::Runtime(format!("reading {tp} in {from}..{to}: {e}"));
    while next < to {
        let fetched = client
            .fetch(
                &[FetchPartition::new(tp.clone(), next).with_max_bytes(4 << 20)],
                &FetchOptions::default(),
            )
            .await
            .map_err(|e| read_err(e.to_string()))?;
        let Some(p) = fetched.into_iter().next() else {
            return Err(read_err("the broker returned no data for it".into()));
        };
        p.check(client.principal()).map_err(Error::Wire)?;
        let before = next;
        for entry in FetchedRecords::new(p.records) {
            let entry = entry.map_err(|e| read_err(format!("bad batch: {e}")))?;
            let FetchedBatch::V2(batch) = entry else {
                return Err(read_err(
                    "a legacy (v0/v1) batch; export it with a Kafka consumer instead".into(),
                ));
            };
            let batch_next = batch.next_offset();
            if !batch.is_control() && batch_next > next {
                let decoded = batch
                    .decode_records(256 << 20)
                    .map_err(|e| read_err(e.to_string()))?;
                let mut records = Vec::new();
                for r in decoded.iter() {
                    let r = r.map_err(|e| read_err(e.to_string()))?;
                    let offset = batch.record_offset(&r);
                    if offset < next || offset >= to {
                        continue;
                    }
                    records.push(StrandedRecord {
                        partition: tp.clone(),
                        offset,
                        timestamp: batch.record_timestamp(&r),
                        key: r.key().map(Bytes::copy_from_slice),
                        value: r.value().map(Bytes::copy_from_slice),
                        headers: r
                            .headers()
                            .map(|h| {
                                (
                                    Bytes::copy_from_slice(h.key),
                                    h.value.map(Bytes::copy_from_slice),
                                )
                            })
                            .collect(),
                    });
                }
                if !records.is_empty() {
                    out.push(ReadBatch {
                        base: batch.base_offset(),
                        next: batch_next,
                        records,
                    });
                }
            }
            next = next.max(batch_next);
        }
        if next == before {
            // The range ends in offsets without records readable here (e.g. above the high
            // watermark of a follower): nothing more to read.
            break;
        }
    }
    Ok(out)
}

/// Records of the old source copied to a target partition, found by their [`ORIGIN_HEADER`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copies {
    /// Their offsets on the old source.
    pub source_offsets: BTreeSet<i64>,
    /// The target batches made of copies only, as `[base, next)` (adjacent ones joined): what
    /// the reverse mirror must not copy back (see [`super::copies`]).
    pub batches: Vec<Range<i64>>,
}

/// The records copied from `source` (on the cluster `alias`) found in `[from, to)` of `target`.
pub async fn copied(
    target: &Client,
    target_tp: &TopicPartition,
    from: i64,
    to: i64,
    alias: &str,
    source: &TopicPartition,
) -> Result<Copies> {
    let batches = read_batches(target, target_tp, from, to).await?;
    Ok(find_copies(&batches, alias, source, from, to))
}

/// [`copied`] on batches already read from `[from, to)`.
pub fn find_copies(
    batches: &[ReadBatch],
    alias: &str,
    source: &TopicPartition,
    from: i64,
    to: i64,
) -> Copies {
    let prefix = format!("{alias}/{}/{}/", source.topic(), source.partition());
    let origin_of = |r: &StrandedRecord| -> Option<i64> {
        r.headers.iter().find_map(|(k, v)| {
            if k.as_ref() != ORIGIN_HEADER.as_bytes() {
                return None;
            }
            let v = std::str::from_utf8(v.as_ref()?).ok()?;
            v.strip_prefix(&prefix)?.parse().ok()
        })
    };
    let mut out = Copies::default();
    let mut ranges = Vec::new();
    for b in batches {
        let origins: Vec<Option<i64>> = b.records.iter().map(origin_of).collect();
        out.source_offsets.extend(origins.iter().flatten());
        // Only a whole batch of copies inside the range read is excluded: the reverse mirror
        // skips whole batches, never part of one.
        if b.base >= from && b.next <= to && origins.iter().all(Option::is_some) {
            ranges.push(b.base..b.next);
        }
    }
    out.batches = super::copies::merge(ranges);
    out
}

/// Appends `records` to `to` on `target`, in order, each with its key, value, timestamp
/// (CreateTime), headers and an [`ORIGIN_HEADER`] naming it on the cluster `alias`.
pub async fn append(
    target: &Client,
    to: &TopicPartition,
    records: &[StrandedRecord],
    alias: &str,
) -> Result<()> {
    let mut start = 0;
    while start < records.len() {
        // One batch: up to BATCH_BYTES of keys and values (at least one record).
        let mut end = start;
        let mut bytes = 0usize;
        while end < records.len() && (end == start || bytes < BATCH_BYTES) {
            let r = &records[end];
            bytes += r.key.as_ref().map_or(0, Bytes::len) + r.value.as_ref().map_or(0, Bytes::len);
            end += 1;
        }
        let chunk = &records[start..end];
        let encoded: Vec<Record> = chunk
            .iter()
            .zip(0i64..)
            .map(|(r, i)| to_record(r, i, alias))
            .collect::<Result<_>>()?;
        super::topic::write_batch(target, to, &encoded)
            .await
            .map_err(|f| match f {
                WriteFailure::Encode(e) => {
                    Error::Runtime(format!("cannot encode the copied records for {to}: {e}"))
                }
                WriteFailure::Send(e) => Error::Runtime(format!(
                    "copying records to {to}: {e}; run strait failback again (records copied \
                     already are skipped)"
                )),
            })?;
        start = end;
    }
    Ok(())
}

fn to_record(r: &StrandedRecord, i: i64, alias: &str) -> Result<Record> {
    // kafka-protocol keeps headers in a map keyed by UTF-8 strings: a record with a
    // non-UTF-8 or repeated header key cannot be copied as it is, so it is refused rather
    // than changed.
    let mut headers: IndexMap<StrBytes, Option<Bytes>> = IndexMap::new();
    for (k, v) in &r.headers {
        let key = std::str::from_utf8(k).map_err(|_| unsupported_header(r))?;
        if headers
            .insert(StrBytes::from_string(key.to_owned()), v.clone())
            .is_some()
        {
            return Err(unsupported_header(r));
        }
    }
    headers.insert(
        StrBytes::from_static_str(ORIGIN_HEADER),
        Some(Bytes::from(origin(alias, &r.partition, r.offset))),
    );
    Ok(Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: i,
        // kafka-protocol starts a new batch when offset - sequence changes.
        sequence: i32::try_from(i).unwrap_or(i32::MAX).wrapping_sub(1),
        timestamp: r.timestamp,
        key: r.key.clone(),
        value: r.value.clone(),
        headers,
    })
}

fn unsupported_header(r: &StrandedRecord) -> Error {
    Error::Runtime(format!(
        "{} offset {}: a header key that is not UTF-8 or appears twice cannot be copied \
         unchanged; use --stranded export FILE and re-produce it with a Kafka producer",
        r.partition, r.offset
    ))
}

/// The export file's contents for `records`.
pub fn export_text(records: &[StrandedRecord]) -> String {
    let mut s = String::new();
    for r in records {
        s.push_str(&r.to_json_line());
        s.push('\n');
    }
    s
}

/// Writes the export file (replaced atomically).
pub fn export(file: &Path, records: &[StrandedRecord]) -> Result<()> {
    write_atomically(file, export_text(records).as_bytes(), Access::Default).map_err(|e| {
        Error::Runtime(format!(
            "cannot write the stranded records to {}: {e}; check the directory and its \
                 permissions",
            file.display()
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_record_exports_as_one_json_line_with_base64_bytes() {
        let r = StrandedRecord {
            partition: TopicPartition::new("orders", 2).unwrap(),
            offset: 41,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![(
                Bytes::from_static(b"h"),
                Some(Bytes::from_static(b"\x00\xff")),
            )],
        };
        let v: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"topic": "orders", "partition": 2, "offset": 41,
                "timestamp": 1_700_000_000_000i64, "key": "aw==", "value": null,
                "headers": [{"key": "h", "value": "AP8="}]})
        );
        assert_eq!(origin("eu", &r.partition, 41), "eu/orders/2/41");
    }

    #[test]
    fn repeated_header_keys_are_refused_not_dropped() {
        let mut r = StrandedRecord {
            partition: TopicPartition::new("t", 0).unwrap(),
            offset: 3,
            timestamp: 0,
            key: None,
            value: None,
            headers: vec![(Bytes::from_static(b"a"), None)],
        };
        let rec = to_record(&r, 0, "src").unwrap();
        assert_eq!(rec.headers.len(), 2, "own header plus the origin");
        r.headers.push((Bytes::from_static(b"a"), None));
        assert!(
            to_record(&r, 0, "src")
                .unwrap_err()
                .to_string()
                .contains("export")
        );
    }
}
