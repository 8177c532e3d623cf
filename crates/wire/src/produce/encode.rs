//! The Produce request encoded by hand around its record batches, so that a batch goes to the
//! socket from the buffer it is in and is never copied into the request.
//!
//! kafka-protocol encodes a request into one contiguous buffer: one `memcpy` of every batch per
//! request, the largest user-space cost of a mirror after the fetch itself. Here everything but
//! the records (size prefix, header, topic and partition fields, the records' length prefixes)
//! is encoded into small buffers, and the frame is the sequence piece, batch, piece, batch, ...
//! that the connection writes vectored (`frame::OutFrame`). kafka-protocol still encodes the
//! header and computes the size, and the tests hold the bytes equal to its encoding of the same
//! request for every version, so the two cannot drift apart unnoticed.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ProduceRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

use crate::frame::{self, OutFrame};

/// Produce v9+ is a flexible version (compact lengths, tagged fields).
const FIRST_FLEXIBLE: i16 = 9;
/// Produce v13+ names topics by id.
const FIRST_WITH_IDS: i16 = 13;

/// Encodes `req` at `version` behind `header` as a frame whose record batches are the very
/// `Bytes` of `req` (same allocation, not copied). Fails on what the hand encoding does not
/// write (unknown tagged fields, which strait-wire never sets) and if its size disagrees with
/// kafka-protocol's.
pub(crate) fn produce_frame(
    req: &ProduceRequest,
    version: i16,
    header: &RequestHeader,
) -> Result<OutFrame, String> {
    if !(3..=13).contains(&version) {
        return Err(format!(
            "Produce v{version} is not encoded by hand (v3-v13 are)"
        ));
    }
    let flexible = version >= FIRST_FLEXIBLE;
    let hv = ProduceRequest::header_version(version);
    let size = header.compute_size(hv).map_err(|e| e.to_string())?
        + req.compute_size(version).map_err(|e| e.to_string())?;
    let size32 =
        u32::try_from(size).map_err(|_| format!("request of {size} bytes is too large"))?;

    let mut w = Pieces::new(frame::PREFIX + 64);
    w.meta.put_u32(size32);
    header.encode(&mut w.meta, hv).map_err(|e| e.to_string())?;
    if !req.unknown_tagged_fields.is_empty() {
        return Err("Produce request with unknown tagged fields".into());
    }
    w.string(req.transactional_id.as_ref().map(|t| &t.0), flexible)?;
    w.meta.put_i16(req.acks);
    w.meta.put_i32(req.timeout_ms);
    w.count(req.topic_data.len(), flexible)?;
    for topic in &req.topic_data {
        if !topic.unknown_tagged_fields.is_empty() {
            return Err("Produce topic with unknown tagged fields".into());
        }
        if version >= FIRST_WITH_IDS {
            w.meta.put_slice(topic.topic_id.as_bytes());
        } else {
            w.string(Some(&topic.name.0), flexible)?;
        }
        w.count(topic.partition_data.len(), flexible)?;
        for p in &topic.partition_data {
            if !p.unknown_tagged_fields.is_empty() {
                return Err("Produce partition with unknown tagged fields".into());
            }
            w.meta.put_i32(p.index);
            w.records(p.records.as_ref(), flexible)?;
            if flexible {
                w.meta.put_u8(0); // no tagged fields
            }
        }
        if flexible {
            w.meta.put_u8(0);
        }
    }
    if flexible {
        w.meta.put_u8(0);
    }
    let out = w.finish();
    if out.len() != frame::PREFIX + size {
        return Err(format!(
            "hand-encoded Produce v{version} is {} bytes, kafka-protocol computes {}",
            out.len(),
            frame::PREFIX + size
        ));
    }
    Ok(out)
}

/// The frame under construction: finished pieces, and the small buffer being written.
struct Pieces {
    done: Vec<Bytes>,
    meta: BytesMut,
}

impl Pieces {
    fn new(capacity: usize) -> Pieces {
        Pieces {
            done: Vec::new(),
            meta: BytesMut::with_capacity(capacity),
        }
    }

    /// A (nullable) string: i16 length (-1 = null), or compact: unsigned varint length + 1.
    fn string(&mut self, s: Option<&StrBytes>, flexible: bool) -> Result<(), String> {
        match (s, flexible) {
            (None, false) => self.meta.put_i16(-1),
            (None, true) => self.meta.put_u8(0),
            (Some(s), false) => {
                let len = i16::try_from(s.len())
                    .map_err(|_| format!("string of {} bytes is too long", s.len()))?;
                self.meta.put_i16(len);
                self.meta.put_slice(s.as_bytes());
            }
            (Some(s), true) => {
                varint(&mut self.meta, length_plus_one(s.len())?);
                self.meta.put_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    /// An array's element count: i32, or compact: unsigned varint count + 1.
    fn count(&mut self, n: usize, flexible: bool) -> Result<(), String> {
        if flexible {
            varint(&mut self.meta, length_plus_one(n)?);
        } else {
            self.meta
                .put_i32(i32::try_from(n).map_err(|_| format!("{n} elements are too many"))?);
        }
        Ok(())
    }

    /// The records' length prefix, then the records themselves as a piece of their own.
    fn records(&mut self, records: Option<&Bytes>, flexible: bool) -> Result<(), String> {
        let Some(records) = records else {
            match flexible {
                true => self.meta.put_u8(0),
                false => self.meta.put_i32(-1),
            }
            return Ok(());
        };
        if flexible {
            varint(&mut self.meta, length_plus_one(records.len())?);
        } else {
            let len = i32::try_from(records.len())
                .map_err(|_| format!("records of {} bytes are too large", records.len()))?;
            self.meta.put_i32(len);
        }
        if !records.is_empty() {
            self.done.push(self.meta.split().freeze());
            self.done.push(records.clone());
        }
        Ok(())
    }

    fn finish(mut self) -> OutFrame {
        if !self.meta.is_empty() {
            self.done.push(self.meta.freeze());
        }
        OutFrame::Pieces(self.done)
    }
}

fn length_plus_one(n: usize) -> Result<u32, String> {
    u32::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| format!("length {n} does not fit a compact length"))
}

/// Kafka's unsigned varint: 7 bits per byte, least significant first.
fn varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::conn::encode_request;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{TopicName, TransactionalId};

    fn request(txn: Option<&str>, records: &[Option<Bytes>]) -> ProduceRequest {
        let parts = |topic: usize| {
            records
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    PartitionProduceData::default()
                        .with_index((topic * 100 + i) as i32)
                        .with_records(r.clone())
                })
                .collect::<Vec<_>>()
        };
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
            .with_topic_data(
                (0..2)
                    .map(|t| {
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(format!("topic-{t}"))))
                            .with_topic_id(uuid::Uuid::from_u128(0x1234_5678_9abc_def0 + t as u128))
                            .with_partition_data(parts(t))
                    })
                    .collect(),
            )
    }

    fn header(version: i16) -> RequestHeader {
        RequestHeader::default()
            .with_request_api_key(0)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("strait")))
    }

    /// Byte for byte what kafka-protocol encodes, for every version, transactional or not,
    /// with small, large (multi-byte varint lengths), empty and null records.
    #[test]
    fn same_bytes_as_kafka_protocol_for_every_version() {
        let records = [
            Some(Bytes::from(vec![7u8; 61])),
            Some(Bytes::from(vec![9u8; 70_000])),
            Some(Bytes::new()),
            None,
        ];
        for version in 3..=13 {
            for txn in [None, Some("mirror-txn")] {
                let req = request(txn, &records);
                let want = encode_request(
                    &req,
                    version,
                    42,
                    Some(&StrBytes::from_static_str("strait")),
                )
                .unwrap();
                let got = produce_frame(&req, version, &header(version)).unwrap();
                assert_eq!(got.len(), want.len(), "v{version} {txn:?}");
                assert!(
                    got.to_vec() == want.to_vec(),
                    "v{version} {txn:?}: bytes differ"
                );
            }
        }
    }

    /// The copy count of the encoder, pinned: every non-empty batch is a piece of the frame that
    /// points at the caller's bytes (same address, same length), so encoding copies no record.
    #[test]
    fn batches_are_pieces_of_the_frame_not_copies() {
        let batches: Vec<Bytes> = (0..3)
            .map(|i| Bytes::from(vec![i as u8; 1000 + i]))
            .collect();
        let req = request(None, &batches.iter().cloned().map(Some).collect::<Vec<_>>());
        for version in [3, 8, 9, 12, 13] {
            let OutFrame::Pieces(pieces) = produce_frame(&req, version, &header(version)).unwrap()
            else {
                panic!("a Produce frame is pieces")
            };
            for b in &batches {
                // Each batch appears once per topic (the request has two topics).
                let shared = pieces
                    .iter()
                    .filter(|p| p.as_ptr() == b.as_ptr() && p.len() == b.len())
                    .count();
                assert_eq!(shared, 2, "v{version}: a batch was copied into the request");
            }
            // What is not a batch is the small encoded rest.
            let meta: usize = pieces
                .iter()
                .filter(|p| !batches.iter().any(|b| b.as_ptr() == p.as_ptr()))
                .map(Bytes::len)
                .sum();
            assert!(meta < 200, "v{version}: {meta} bytes besides the batches");
        }
    }

    #[test]
    fn varints_match_kafkas() {
        for (v, want) in [
            (0u32, &[0u8][..]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (70_001, &[0xf1, 0xa2, 0x04]),
        ] {
            let mut b = BytesMut::new();
            varint(&mut b, v);
            assert_eq!(&b[..], want, "{v}");
        }
    }
}
