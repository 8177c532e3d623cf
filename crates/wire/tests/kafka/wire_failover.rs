//! strait-wire on a 3-node Kafka 4.x cluster (replication 3, min.insync.replicas 2) whose
//! partition leader goes away in the middle of a produce and fetch stream, first by a clean stop
//! (controlled shutdown), then, once the node is back in the ISR, by SIGKILL of the new leader.
//! Both streams continue after leadership moves (metadata refresh, reconnect with backoff,
//! leader-epoch fencing), and every acknowledged record is there exactly once (idempotent
//! batches, acks=all).
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_failover:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener};
use strait_wire::{
    Client, FetchOptions, FetchPartition, ProduceBatch, ProduceOptions, ProducerIdentity,
};
use tokio::sync::watch;

const TOPIC: &str = "ha";
const BATCHES: usize = 200;
const PER_BATCH: usize = 5;
/// The leader goes away after this many acknowledged batches of a phase.
const STOP_AFTER: usize = 60;

#[derive(Clone, Copy, Debug)]
enum Outage {
    Stop,
    Kill,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_lost_mid_stream() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-ha").nodes(3).start().unwrap();
        c.admin(&[
            AdminOp::CreateTopic {
                name: TOPIC.into(),
                partitions: 1,
                replication: 3,
                configs: vec![("min.insync.replicas".into(), "2".into())],
            },
            AdminOp::wait_isr(TOPIC, 3),
        ])
        .unwrap();
        Arc::new(Mutex::new(c))
    })
    .await;
    let p = props(&cluster.lock().unwrap(), Listener::Plaintext, None);
    let client = connect(p).await.unwrap();
    let id = client.init_producer_id().await.unwrap();

    let mut acked_total = BTreeMap::new();
    let mut next_offset = 0;
    for (phase, outage) in [Outage::Stop, Outage::Kill].into_iter().enumerate() {
        let md = client.metadata(Some(&[TOPIC.to_string()])).await.unwrap();
        let before = md.partition(&tp(TOPIC, 0)).unwrap().clone();
        let leader = before.leader.unwrap();
        eprintln!(
            "phase {phase}: leader of {TOPIC}-0 is node {leader} (epoch {}), {outage:?} it",
            before.leader_epoch
        );

        let (acked_tx, mut acked_rx) = watch::channel(0usize);
        let producer = tokio::spawn(produce_stream(client.clone(), id, phase, acked_tx));
        let consumer = tokio::spawn(consume_stream(
            client.clone(),
            next_offset,
            BATCHES * PER_BATCH,
        ));
        acked_rx.wait_for(|n| *n >= STOP_AFTER).await.unwrap();
        let c = cluster.clone();
        blocking(move || {
            let mut c = c.lock().unwrap();
            match outage {
                Outage::Stop => c.stop_node(leader).unwrap(),
                Outage::Kill => c.kill_node(leader).unwrap(),
            }
        })
        .await;
        eprintln!(
            "phase {phase}: node {leader} gone after {} acknowledged batches",
            *acked_rx.borrow()
        );

        let acked: BTreeMap<i64, String> = producer.await.unwrap();
        let read: Vec<ReadRec> = consumer.await.unwrap();
        assert_eq!(acked.len(), BATCHES * PER_BATCH);

        let md = client.metadata(Some(&[TOPIC.to_string()])).await.unwrap();
        let after = md.partition(&tp(TOPIC, 0)).unwrap();
        assert_ne!(after.leader, Some(leader), "leadership moved");
        assert!(
            after.leader_epoch > before.leader_epoch,
            "the leader epoch grew"
        );
        eprintln!(
            "phase {phase}: new leader node {:?} (epoch {})",
            after.leader, after.leader_epoch
        );

        // Every acknowledged record is there, at its acknowledged offset, once.
        let by_offset: BTreeMap<i64, String> = read
            .iter()
            .map(|r| {
                (
                    r.offset,
                    String::from_utf8(r.value.clone().unwrap()).unwrap(),
                )
            })
            .collect();
        assert_eq!(by_offset.len(), read.len(), "no offset read twice");
        for (offset, value) in &acked {
            assert_eq!(
                by_offset.get(offset),
                Some(value),
                "acknowledged record at offset {offset}"
            );
        }
        let mut values: Vec<&String> = by_offset.values().collect();
        values.sort();
        values.dedup();
        assert_eq!(values.len(), read.len(), "no record written twice");
        next_offset = acked.keys().last().unwrap() + 1;
        acked_total.extend(acked);

        // Bring the node back and wait until it is in sync again.
        let c = cluster.clone();
        blocking(move || {
            let mut c = c.lock().unwrap();
            c.start_node(leader).unwrap();
            c.admin(&[AdminOp::wait_isr(TOPIC, 3)]).unwrap();
        })
        .await;
    }

    // The whole log, read again from the start, holds both phases in order.
    let all = fetch_all(&client, &tp(TOPIC, 0), 0, acked_total.len()).await;
    let got: BTreeMap<i64, String> = all
        .into_iter()
        .map(|r| (r.offset, String::from_utf8(r.value.unwrap()).unwrap()))
        .collect();
    assert_eq!(got, acked_total);
}

/// Produces BATCHES idempotent batches in order (one in flight); a batch that fails is resent
/// with the same sequence until it is acknowledged. Returns offset -> value of every record.
async fn produce_stream(
    client: Client,
    id: ProducerIdentity,
    phase: usize,
    acked: watch::Sender<usize>,
) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for b in 0..BATCHES {
        let values: Vec<String> = (0..PER_BATCH)
            .map(|i| format!("phase{phase}-{b}-{i}"))
            .collect();
        let recs: Vec<Rec> = values.iter().map(|v| Rec::value(v)).collect();
        let seq = ((phase * BATCHES + b) * PER_BATCH) as i32;
        let batch = build_batch(&recs, id.producer_id, id.epoch, seq);
        let deadline = Instant::now() + PATIENCE;
        let base = loop {
            let r = client
                .produce(
                    vec![ProduceBatch::new(tp(TOPIC, 0), batch.clone())],
                    &ProduceOptions::default(),
                )
                .await
                .unwrap();
            match &r[0].outcome {
                Ok(ack) => break ack.base_offset,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "batch {b} never acknowledged: {e}"
                    );
                    eprintln!("phase {phase} batch {b}: {e} (resending)");
                }
            }
        };
        for (i, v) in values.into_iter().enumerate() {
            out.insert(base + i as i64, v);
        }
        acked.send_replace(b + 1);
    }
    out
}

/// Fetches from `from` until `want` records have been read.
async fn consume_stream(client: Client, from: i64, want: usize) -> Vec<ReadRec> {
    let deadline = Instant::now() + PATIENCE * 2;
    let mut out = Vec::new();
    let mut offset = from;
    while out.len() < want {
        assert!(
            Instant::now() < deadline,
            "read only {} of {want}",
            out.len()
        );
        let got = match client
            .fetch(
                &[FetchPartition::new(tp(TOPIC, 0), offset)],
                &FetchOptions::default(),
            )
            .await
        {
            Ok(got) => got,
            Err(e) => {
                eprintln!("fetch at {offset}: {e} (retrying)");
                continue;
            }
        };
        if let Err(e) = got[0].check(None) {
            eprintln!("fetch at {offset}: {e} (retrying)");
            continue;
        }
        for r in read_records(&got[0].records) {
            if r.offset >= offset {
                offset = r.offset + 1;
                out.push(r);
            }
        }
    }
    out
}
