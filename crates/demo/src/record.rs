//! Building the one-record batches the demo producer sends.
//!
//! The encoding is kafka-protocol's `RecordBatchEncoder` (the codec crate strait-wire is built
//! on, re-exported by it); the result is checked with strait-forward's `RecordBatch::parse`
//! (lengths, magic, CRC-32C) before it is produced. Fresh records only: forwarded records are
//! never re-encoded through kafka-protocol's `Record` (it would collapse duplicate headers).

use bytes::{Bytes, BytesMut};
use strait_forward::RecordBatch;
use strait_wire::kafka_protocol::indexmap::IndexMap;
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::kafka_protocol::records::{
    Compression, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, Record,
    RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::{Error, Result};

/// One uncompressed v2 batch holding one record: null key, `value`, `headers` in order,
/// CreateTime `timestamp_ms`, no producer id (not idempotent), base offset 0.
pub fn single_record_batch(
    value: &[u8],
    headers: &[(String, Vec<u8>)],
    timestamp_ms: i64,
) -> Result<Bytes> {
    let mut h = IndexMap::new();
    for (k, v) in headers {
        h.insert(
            StrBytes::from_string(k.clone()),
            Some(Bytes::copy_from_slice(v)),
        );
    }
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: NO_SEQUENCE,
        timestamp: timestamp_ms,
        key: None,
        value: Some(Bytes::copy_from_slice(value)),
        headers: h,
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| Error::Usage(format!("cannot encode the record: {e}")))?;
    let batch = RecordBatch::parse(buf.freeze())?;
    Ok(batch.into_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_carries_the_value_and_headers() {
        let bytes = single_record_batch(
            b"Hello world - 1",
            &[("traceparent".into(), b"00-ab-cd-01".to_vec())],
            1_700_000_000_000,
        )
        .unwrap();
        let batch = RecordBatch::parse(bytes).unwrap();
        assert_eq!(batch.record_count(), 1);
        assert_eq!(batch.base_offset(), 0);
        assert_eq!(batch.producer_id(), -1);
        let decoded = batch.decode_records(1 << 20).unwrap();
        let record = decoded.iter().next().unwrap().unwrap();
        assert_eq!(record.key(), None);
        assert_eq!(record.value(), Some(&b"Hello world - 1"[..]));
        let h: Vec<_> = record.headers().collect();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].key, b"traceparent");
        assert_eq!(h[0].value, Some(&b"00-ab-cd-01"[..]));
        assert_eq!(batch.create_time(&record), 1_700_000_000_000);
    }
}
