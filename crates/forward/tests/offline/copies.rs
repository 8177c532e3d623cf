//! Copies of the record bytes per batch on the plain pass-through path, pinned (issue 33,
//! item 1): the copy count is part of the design, so a regression fails here, not in a
//! benchmark.
//!
//! A fake source answers each partition's fetch with one response buffer holding several
//! batches; a fake target keeps every batch it is asked to produce. The pipeline reports each
//! copy of record bytes it makes (`pipeline::copies`, debug builds); the test checks that each
//! produced batch was copied exactly once, out of the fetch response, and that the target got
//! that copy's very buffer (same address, same length: stamped in place, not copied again).
//! strait-wire's side (encoder and writer hand the batch to the socket from this buffer) is
//! pinned by its unit tests `produce::encode::tests::batches_are_pieces_of_the_frame_not_copies`
//! and `conn::tests::the_writer_hands_batches_to_the_socket_from_their_own_buffers`.
#![allow(clippy::unwrap_used)]

use crate::common::{self, NoPositions};

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strait_forward::observe::Observer;
use strait_forward::pipeline::copies;
use strait_forward::pipeline::io::{
    FetchSpec, Fetched, IoError, NoTransactions, ProduceAck, ProducerIdentity, Source,
    StartPosition, Target, TopicLimits,
};
use strait_forward::{Compression, Forwarder, Route, Settings};
use strait_wire::TopicPartition;

const PARTITIONS: i32 = 3;
const BATCHES: i64 = 4;
/// Records per batch: ~20 KB batches, too large to be merged.
const RECORDS: i32 = 800;

/// Each partition's log as one fetch response buffer, answered whole below its end.
#[derive(Clone)]
struct ResponseSource {
    responses: Arc<Vec<(Bytes, i64)>>,
}

impl Source for ResponseSource {
    fn fetch(&self, spec: &FetchSpec) -> impl Future<Output = Result<Fetched, IoError>> + Send {
        let (response, end) = self.responses[spec.partition.partition() as usize].clone();
        let records = if spec.offset < end {
            response
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

/// Keeps every produced batch (so their buffers stay allocated and addresses stay unique).
#[derive(Clone, Default)]
struct KeepingTarget {
    produced: Arc<Mutex<Vec<(TopicPartition, Bytes)>>>,
}

impl Target for KeepingTarget {
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
        let mut produced = self.produced.lock().unwrap();
        let mut acks = Vec::new();
        for (tp, b) in batches {
            let base_offset =
                produced.iter().filter(|(t, _)| *t == tp).count() as i64 * i64::from(RECORDS);
            produced.push((tp, b));
            acks.push(Ok(ProduceAck {
                base_offset,
                log_append_time_ms: None,
                log_start_offset: None,
            }));
        }
        Ok(acks)
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

fn range(b: &[u8]) -> std::ops::Range<usize> {
    let r = b.as_ptr_range();
    r.start as usize..r.end as usize
}

/// One copy per batch, out of the fetch response, and the target gets that copy.
#[cfg(debug_assertions)]
#[tokio::test(start_paused = true)]
async fn a_pass_through_batch_is_copied_once_between_fetch_and_target() {
    let responses: Vec<(Bytes, i64)> = (0..PARTITIONS)
        .map(|_| {
            let mut log = Vec::new();
            for b in 0..BATCHES {
                log.extend(common::simple_batch(
                    b * i64::from(RECORDS),
                    RECORDS,
                    Compression::None,
                ));
            }
            (Bytes::from(log), BATCHES * i64::from(RECORDS))
        })
        .collect();
    let source = ResponseSource {
        responses: Arc::new(responses.clone()),
    };
    let target = KeepingTarget::default();
    let mut settings = Settings::default();
    settings.batch_size = 0; // no merging: this is the plain pass-through path
    let watch = copies::watch();
    let forwarder = Forwarder::new(
        source,
        target.clone(),
        NoPositions,
        settings,
        Arc::new(Quiet),
    )
    .await
    .unwrap();
    let routes = (0..PARTITIONS)
        .map(|p| Route {
            source: TopicPartition::new("src", p).unwrap(),
            target: TopicPartition::new("dst", p).unwrap(),
        })
        .collect();
    forwarder.assign(routes).await.unwrap();
    let want = (PARTITIONS as usize) * BATCHES as usize;
    for _ in 0..10_000 {
        if target.produced.lock().unwrap().len() >= want || !forwarder.failures().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        forwarder.failures().is_empty(),
        "{:?}",
        forwarder.failures()
    );
    forwarder.shutdown().await.unwrap();
    let copies = watch.copies();
    let produced = target.produced.lock().unwrap().clone();
    assert_eq!(produced.len(), want, "every batch produced once");

    assert_eq!(
        copies.len(),
        produced.len(),
        "copies of record bytes per batch changed (one expected): {copies:?}"
    );
    for (tp, batch) in &produced {
        let (response, _) = &responses[tp.partition() as usize];
        let made: Vec<_> = copies.iter().filter(|c| c.to == range(batch)).collect();
        assert_eq!(
            made.len(),
            1,
            "{tp}: the target did not get the buffer of the one copy (copied again?)"
        );
        let from = &made[0].from;
        let resp = range(response);
        assert!(
            from.start >= resp.start && from.end <= resp.end,
            "{tp}: the copy was not made from the fetch response"
        );
        // Same records; only the 61-byte header is stamped.
        let at = from.start - resp.start;
        assert_eq!(&batch[61..], &response[at + 61..at + batch.len()], "{tp}");
    }
}
