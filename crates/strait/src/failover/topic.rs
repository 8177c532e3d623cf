//! The small internal topics on the target: create them, append records, read them whole.
//!
//! Records are written as one uncompressed v2 batch per call, built with kafka-protocol's
//! `RecordBatchEncoder` (strait-forward has no public batch builder: it forwards batches, it
//! does not make them). No producer id: a write that fails ambiguously is not retried by the
//! client; the caller writes the same records again later, which is harmless for these topics
//! (a checkpoint or sync written twice reads the same, see `map::OffsetMap::replay`).

use bytes::{Bytes, BytesMut};
use strait_forward::{FetchedBatch, FetchedRecords};
use strait_wire::admin::{Admin, NewTopic};
use strait_wire::fetch::{FetchOptions, FetchPartition};
use strait_wire::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strait_wire::produce::{ProduceBatch, ProduceOptions};
use strait_wire::{Client, Isolation, OffsetSpec, TopicPartition};

use crate::error::{Error, Result};

/// How long a newly created internal topic may take to get a leader.
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Records per produced batch: far below any `max.message.bytes` for these small records.
const RECORDS_PER_BATCH: usize = 1000;

/// Creates `name` (one partition, compacted, `replication_factor` -1 = the broker default)
/// unless it exists.
pub(crate) async fn ensure_compacted(
    client: &Client,
    name: &str,
    replication_factor: i16,
) -> Result<()> {
    let topic = NewTopic::new(name, 1, replication_factor).with_config("cleanup.policy", "compact");
    let admin = Admin::new(client);
    admin.create_topic(&topic).await.map_err(|e| {
        Error::Runtime(format!(
            "cannot create the internal topic {name} on the target: {e}; grant Create on it \
                 or create it (1 partition, cleanup.policy=compact)"
        ))
    })?;
    // A topic just created is not served at once (UNKNOWN_TOPIC_OR_PARTITION until its
    // leader is elected); it is read back right after.
    let served = admin
        .wait_for_leaders(name, 1, LEADER_WAIT)
        .await
        .map_err(|e| Error::Runtime(format!("waiting for the internal topic {name}: {e}")))?;
    if !served {
        return Err(Error::Runtime(format!(
            "the internal topic {name} on the target has no leader after {LEADER_WAIT:?}; \
             check the target brokers (kafka-topics.sh --describe --topic {name})"
        )));
    }
    Ok(())
}

/// Appends `records` (key, value) to partition 0 of `topic`, in order.
pub(crate) async fn append(
    client: &Client,
    topic: &str,
    records: &[(Vec<u8>, Vec<u8>)],
) -> Result<()> {
    let tp = TopicPartition::new(topic, 0).map_err(Error::Wire)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    for chunk in records.chunks(RECORDS_PER_BATCH) {
        let recs: Vec<Record> = chunk
            .iter()
            .zip(0i64..)
            .map(|((k, v), i)| Record {
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
                timestamp: now,
                key: Some(Bytes::copy_from_slice(k)),
                value: Some(Bytes::copy_from_slice(v)),
                headers: Default::default(),
            })
            .collect();
        write_batch(client, &tp, &recs).await.map_err(|f| match f {
            WriteFailure::Encode(e) => {
                Error::Runtime(format!("cannot encode records for {topic}: {e}"))
            }
            WriteFailure::Send(e) => Error::Runtime(format!(
                "writing to {topic} on the target: {e}; it is written again at the next interval"
            )),
        })?;
    }
    Ok(())
}

/// Why [`write_batch`] failed.
pub(crate) enum WriteFailure {
    /// kafka-protocol could not encode the records (a bug or an impossible record).
    Encode(String),
    /// The request failed or the broker refused the batch.
    Send(String),
}

/// Encodes `records` as one uncompressed v2 batch and produces it to `tp`, acknowledged by all
/// in-sync replicas (the wire client's default): the one way failover writes records of its own.
pub(crate) async fn write_batch(
    client: &Client,
    tp: &TopicPartition,
    records: &[Record],
) -> std::result::Result<(), WriteFailure> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| WriteFailure::Encode(e.to_string()))?;
    let results = client
        .produce(
            vec![ProduceBatch::new(tp.clone(), buf.freeze())],
            &ProduceOptions::default(),
        )
        .await
        .map_err(|e| WriteFailure::Send(e.to_string()))?;
    for r in results {
        r.outcome.map_err(|e| WriteFailure::Send(e.to_string()))?;
    }
    Ok(())
}

/// Every record (key, value) of partition 0 of `topic`, from the log start to the end as of
/// the call. A missing topic reads as empty.
pub(crate) async fn read_all(client: &Client, topic: &str) -> Result<Vec<(Bytes, Bytes)>> {
    let tp = TopicPartition::new(topic, 0).map_err(Error::Wire)?;
    let meta = client
        .metadata(Some(&[topic.to_string()]))
        .await
        .map_err(Error::Wire)?;
    if !meta.topics.contains_key(topic) {
        return Ok(Vec::new());
    }
    let listed = client
        .list_offsets(
            &[
                (tp.clone(), OffsetSpec::Earliest),
                (tp.clone(), OffsetSpec::Latest),
            ],
            Isolation::ReadUncommitted,
        )
        .await
        .map_err(|e| Error::Runtime(format!("listing the offsets of {topic}: {e}")))?;
    let start = listed.first().and_then(|l| l.offset).unwrap_or(0);
    let end = listed.get(1).and_then(|l| l.offset).unwrap_or(0);
    let mut out = Vec::new();
    let mut next = start;
    while next < end {
        let fetched = client
            .fetch(
                &[FetchPartition::new(tp.clone(), next)],
                &FetchOptions::default(),
            )
            .await
            .map_err(|e| Error::Runtime(format!("reading {topic}: {e}")))?;
        let Some(p) = fetched.into_iter().next() else {
            break;
        };
        if let Some(e) = p.error {
            return Err(Error::Runtime(format!("reading {topic}: {e:?}")));
        }
        let before = next;
        for entry in FetchedRecords::new(p.records) {
            let entry =
                entry.map_err(|e| Error::Runtime(format!("reading {topic}: bad batch: {e}")))?;
            let FetchedBatch::V2(batch) = entry else {
                continue;
            };
            let batch_next = batch.next_offset();
            if !batch.is_control() && batch_next > next {
                let decoded = batch
                    .decode_records(64 << 20)
                    .map_err(|e| Error::Runtime(format!("reading {topic}: {e}")))?;
                for r in decoded.iter() {
                    let r = r.map_err(|e| Error::Runtime(format!("reading {topic}: {e}")))?;
                    if batch.record_offset(&r) < next {
                        continue;
                    }
                    out.push((
                        Bytes::copy_from_slice(r.key().unwrap_or_default()),
                        Bytes::copy_from_slice(r.value().unwrap_or_default()),
                    ));
                }
            }
            next = next.max(batch_next);
        }
        if next == before {
            // Nothing complete came back (the first batch is larger than the fetch size would
            // be odd for these topics): stop rather than spin.
            return Err(Error::Runtime(format!(
                "reading {topic}: no progress at offset {next} of {end}"
            )));
        }
    }
    Ok(out)
}
