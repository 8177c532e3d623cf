//! Request encode and response decode cost of the wire client's hot APIs, with the same
//! kafka-protocol codecs and versions `strait-wire` uses: a Produce request carrying 12
//! partitions' batches (encode copies each batch once into the frame), and a Fetch response
//! carrying 12 partitions' records (decode from `Bytes` is zero-copy: the records stay slices of
//! the frame). Counted per byte of records.
//!
//! Run: `cargo bench -p strait-wire --bench wire`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use divan::Bencher;
use divan::counter::BytesCount;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchResponse, ProduceRequest, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

fn main() {
    divan::main();
}

const PARTITIONS: i32 = 12;
const SIZES: &[usize] = &[16 << 10, 1 << 20];

fn records(size: usize) -> Bytes {
    Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

fn produce_request(size: usize) -> ProduceRequest {
    let data = records(size);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partition_data(
                    (0..PARTITIONS)
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(data.clone()))
                        })
                        .collect(),
                ),
        ])
}

fn fetch_response_bytes(size: usize) -> Bytes {
    let data = records(size);
    let resp = FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        PartitionData::default()
                            .with_partition_index(p)
                            .with_high_watermark(1_000_000)
                            .with_records(Some(data.clone()))
                    })
                    .collect(),
            ),
    ]);
    let mut buf = BytesMut::new();
    resp.encode(&mut buf, 12).expect("encode fetch response");
    buf.freeze()
}

#[divan::bench(args = SIZES)]
fn produce_request_encode_v9(bencher: Bencher, size: usize) {
    let req = produce_request(size);
    let mut buf = BytesMut::with_capacity(size * PARTITIONS as usize + 4096);
    bencher
        .counter(BytesCount::new(size * PARTITIONS as usize))
        .bench_local(|| {
            buf.clear();
            black_box(&req).encode(&mut buf, 9).expect("encode");
            black_box(buf.len())
        });
}

#[divan::bench(args = SIZES)]
fn fetch_response_decode_v12(bencher: Bencher, size: usize) {
    let frame = fetch_response_bytes(size);
    bencher
        .counter(BytesCount::new(size * PARTITIONS as usize))
        .bench_local(|| {
            let mut f = black_box(&frame).clone();
            let resp = FetchResponse::decode(&mut f, 12).expect("decode");
            // Zero-copy: the records are slices of the frame, not copies.
            let first = resp.responses[0].partitions[0]
                .records
                .as_ref()
                .map(|r| r.as_ptr());
            black_box(first)
        });
}
