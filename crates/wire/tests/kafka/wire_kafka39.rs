//! strait-wire against a Kafka 3.9 broker (the line MirrorMaker 1 still ships in), with PLAINTEXT
//! and SASL listeners: version negotiation picks 3.9's maxima (Produce v11, no v12/13), topic ids,
//! byte-exact round trips for all five codecs, ListOffsets, SCRAM, and the Java console consumer.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_kafka39:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use common::*;
use kafka_protocol::messages::{FetchRequest, ProduceRequest};
use strait_testkit::{AdminOp, Cluster, KafkaVersion, Listener};
use strait_wire::{
    FetchOptions, FetchPartition, Isolation, OffsetSpec, ProduceBatch, ProduceOptions,
};

const CODECS: [&str; 5] = ["v2_none", "v2_gzip", "v2_snappy", "v2_lz4", "v2_zstd"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3_9_broker() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-39")
            .version(KafkaVersion::V3_9)
            .sasl()
            .user("alice", "alice-secret")
            .start()
            .unwrap();
        c.admin(&[
            // The Java-written fixtures carry 2023 timestamps: with the default time-based
            // retention (7 days) the broker deletes them at its first retention check, 30 s after it
            // started, and a slow run then reads OFFSET_OUT_OF_RANGE where it expects them.
            AdminOp::CreateTopic {
                name: "codecs".into(),
                partitions: 5,
                replication: 1,
                configs: vec![("retention.ms".into(), "-1".into())],
            },
            AdminOp::topic("to-java", 1, 1),
        ])
        .unwrap();
        Arc::new(c)
    })
    .await;
    let client = connect(props(&cluster, Listener::Plaintext, None))
        .await
        .unwrap();

    let conn = client.any_broker().await.unwrap();
    let produce = conn.pick_version::<ProduceRequest>(0..=i16::MAX).unwrap();
    let fetch = conn.pick_version::<FetchRequest>(0..=i16::MAX).unwrap();
    eprintln!("Kafka 3.9: Produce v{produce}, Fetch v{fetch}");
    assert_eq!(produce, 11, "3.9 tops out at Produce v11");
    assert!((13..=17).contains(&fetch), "Fetch v{fetch}");

    let md = client
        .metadata(Some(&["codecs".to_string()]))
        .await
        .unwrap();
    assert!(
        md.topic("codecs").unwrap().id.is_some(),
        "3.9 has topic ids"
    );

    let to_send: Vec<ProduceBatch> = CODECS
        .iter()
        .enumerate()
        .map(|(p, name)| ProduceBatch::new(tp("codecs", p as i32), fixture(name)))
        .collect();
    let sent: Vec<_> = to_send.iter().map(|b| b.records.clone()).collect();
    let results = client
        .produce(to_send, &ProduceOptions::default())
        .await
        .unwrap();
    for (r, name) in results.iter().zip(CODECS) {
        assert_eq!(
            r.outcome
                .as_ref()
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .base_offset,
            0
        );
    }
    let wanted: Vec<FetchPartition> = (0..5)
        .map(|p| FetchPartition::new(tp("codecs", p), 0))
        .collect();
    let options = FetchOptions {
        isolation: Isolation::ReadCommitted,
        ..FetchOptions::default()
    };
    let got = client.fetch(&wanted, &options).await.unwrap();
    for (i, p) in got.iter().enumerate() {
        p.check(None).unwrap();
        let b = &batches(&p.records)[0].1;
        assert_eq!(b.len(), sent[i].len(), "{}", CODECS[i]);
        assert_eq!(
            &b[16..],
            &sent[i][16..],
            "{}: same bytes from magic on",
            CODECS[i]
        );
    }

    let offsets = client
        .list_offsets(
            &[
                (tp("codecs", 3), OffsetSpec::Earliest),
                (tp("codecs", 3), OffsetSpec::Latest),
            ],
            Isolation::ReadUncommitted,
        )
        .await
        .unwrap();
    assert_eq!((offsets[0].offset, offsets[1].offset), (Some(0), Some(20)));

    // SCRAM on 3.9, then the Java console consumer reads what strait-wire wrote.
    let alice = connect(props(&cluster, Listener::SaslPlaintext, Some("alice")))
        .await
        .unwrap();
    let values: Vec<String> = (0..5).map(|i| format!("to-java-39-{i}")).collect();
    let recs: Vec<Rec> = values.iter().map(|v| Rec::value(v)).collect();
    let r = alice
        .produce(
            vec![ProduceBatch::new(
                tp("to-java", 0),
                build_batch(&recs, -1, -1, -1),
            )],
            &ProduceOptions::default(),
        )
        .await
        .unwrap();
    r[0].outcome.as_ref().unwrap();
    let c = cluster.clone();
    let consumed = blocking(move || c.console_consume("to-java", 5, None).unwrap()).await;
    assert_eq!(consumed, values);
}
