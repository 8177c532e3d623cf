//! Packs ready batches of many partitions into one Produce request per target broker and lane.
//!
//! Kafka accepts exactly one batch per partition per request, so an aggregator takes the oldest
//! waiting batch of every partition, sends them together, and keeps younger batches of the same
//! partitions for the next request, in order. Up to `max_requests` requests are in flight per
//! aggregator; they are started in submission order on one connection, which Kafka processes in
//! order. A broker's partitions are spread over `lanes` aggregators, each with a connection of
//! its own (`Settings::produce_connections`); a partition always takes the same lane.
//!
//! An aggregator lives until the forwarder's [`Senders`] is dropped and every batch it accepted
//! has an answer: it never stops taking batches earlier, because a partition waiting for the
//! answer to a batch nobody sends would wait forever.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use strait_wire::TopicPartition;
use tokio::sync::mpsc;

use super::io::{FailureAction, IoError, ProduceAck, Target};
use crate::observe::Observer;

/// One batch waiting to be produced.
#[derive(Debug)]
pub(crate) struct ProduceItem {
    pub(crate) partition: TopicPartition,
    pub(crate) batch: Bytes,
    /// The caller's id for the batch, echoed in the result.
    pub(crate) slot: u64,
    pub(crate) reply: mpsc::UnboundedSender<SlotResult>,
    /// When the batch was handed to the aggregator.
    pub(crate) queued_at: Instant,
    /// Exactly-once: the transactional id whose open transaction the batch belongs to. A
    /// Produce request carries one transactional id, so only batches of the same one share it.
    pub(crate) transactional_id: Option<Arc<str>>,
}

/// The outcome of one produced batch.
#[derive(Debug)]
pub(crate) struct SlotResult {
    pub(crate) slot: u64,
    pub(crate) result: Result<ProduceAck, IoError>,
}

/// The aggregators, one per target broker and lane, started on first use.
pub(crate) struct Senders<T> {
    target: Arc<T>,
    nodes: Mutex<HashMap<(i32, u16), mpsc::UnboundedSender<ProduceItem>>>,
    max_request_bytes: usize,
    max_requests: usize,
    lanes: u16,
    observer: Arc<dyn Observer>,
}

/// The lane of a partition: the same for all its batches (their order on the wire is theirs on
/// the target), and consecutive partitions of a topic on consecutive lanes.
fn lane_of(partition: &TopicPartition, lanes: u16) -> u16 {
    if lanes <= 1 {
        return 0;
    }
    // FNV-1a of the topic name: stable across runs and processes, unlike a seeded hasher.
    let topic = partition
        .topic()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let index = u64::try_from(partition.partition()).unwrap_or(0);
    // The remainder is below `lanes`, a u16.
    u16::try_from(topic.wrapping_add(index) % u64::from(lanes)).unwrap_or(0)
}

impl<T: Target> Senders<T> {
    pub(crate) fn new(
        target: Arc<T>,
        max_request_bytes: usize,
        max_requests: usize,
        lanes: usize,
        observer: Arc<dyn Observer>,
    ) -> Self {
        Senders {
            target,
            nodes: Mutex::new(HashMap::new()),
            max_request_bytes,
            max_requests: max_requests.max(1),
            lanes: u16::try_from(lanes.max(1)).unwrap_or(u16::MAX),
            observer,
        }
    }

    /// Queues a batch for `node`. The result arrives on the item's reply channel.
    pub(crate) fn submit(&self, node: i32, item: ProduceItem) {
        let lane = lane_of(&item.partition, self.lanes);
        let mut nodes = match self.nodes.lock() {
            Ok(n) => n,
            Err(poisoned) => poisoned.into_inner(),
        };
        let item = match nodes.get(&(node, lane)) {
            Some(tx) => match tx.send(item) {
                Ok(()) => return,
                // The aggregator ended (it panicked); start a fresh one below.
                Err(mpsc::error::SendError(item)) => item,
            },
            None => item,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let aggregator = Aggregator {
            node,
            lane,
            target: self.target.clone(),
            rx,
            max_request_bytes: self.max_request_bytes,
            max_requests: self.max_requests,
            observer: self.observer.clone(),
        };
        tokio::spawn(aggregator.run());
        // A fresh receiver is alive, so this send cannot fail; if it did, the item's reply
        // channel is dropped and the partition sees a disconnect and retries.
        let _ = tx.send(item);
        nodes.insert((node, lane), tx);
    }
}

struct Aggregator<T> {
    node: i32,
    lane: u16,
    target: Arc<T>,
    rx: mpsc::UnboundedReceiver<ProduceItem>,
    max_request_bytes: usize,
    max_requests: usize,
    observer: Arc<dyn Observer>,
}

type Request = Vec<ProduceItem>;

impl<T: Target> Aggregator<T> {
    async fn run(mut self) {
        let mut waiting: VecDeque<ProduceItem> = VecDeque::new();
        let mut in_flight = FuturesOrdered::new();
        let mut open = true;
        loop {
            // Start as many requests as the window allows from what is waiting.
            while in_flight.len() < self.max_requests && !waiting.is_empty() {
                let request = self.take_request(&mut waiting);
                let target = self.target.clone();
                let observer = self.observer.clone();
                let (node, lane) = (self.node, self.lane);
                in_flight.push_back(async move {
                    let batches = request
                        .iter()
                        .map(|i| (i.partition.clone(), i.batch.clone()))
                        .collect();
                    let transactional_id = request.first().and_then(|i| i.transactional_id.clone());
                    let sent = Instant::now();
                    let queued = request
                        .iter()
                        .map(|i| sent.saturating_duration_since(i.queued_at))
                        .max()
                        .unwrap_or_default();
                    let outcome = target
                        .produce(node, lane, batches, transactional_id.as_deref())
                        .await;
                    observer.produce_request(node, request.len(), sent.elapsed(), queued);
                    (request, outcome)
                });
            }
            if !open && waiting.is_empty() && in_flight.is_empty() {
                return;
            }
            tokio::select! {
                item = self.rx.recv(), if open => match item {
                    Some(item) => {
                        waiting.push_back(item);
                        // Drain what is already queued so one request carries it all.
                        while let Ok(item) = self.rx.try_recv() {
                            waiting.push_back(item);
                        }
                    }
                    None => open = false,
                },
                Some((request, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                    deliver(request, outcome);
                }
            }
        }
    }

    /// The oldest waiting batch of each partition, up to the request size limit, all of the
    /// oldest batch's transactional id (or all without one).
    fn take_request(&self, waiting: &mut VecDeque<ProduceItem>) -> Request {
        let mut request = Vec::new();
        let mut seen = HashSet::new();
        let mut size = 0usize;
        let mut kept = VecDeque::with_capacity(waiting.len());
        let id = waiting.front().and_then(|i| i.transactional_id.clone());
        while let Some(item) = waiting.pop_front() {
            let fits = request.is_empty() || size + item.batch.len() <= self.max_request_bytes;
            if fits && item.transactional_id == id && !seen.contains(&item.partition) {
                size += item.batch.len();
                seen.insert(item.partition.clone());
                request.push(item);
            } else {
                kept.push_back(item);
            }
        }
        *waiting = kept;
        request
    }
}

fn deliver(request: Request, outcome: Result<Vec<Result<ProduceAck, IoError>>, IoError>) {
    match outcome {
        Ok(results) if results.len() == request.len() => {
            for (item, result) in request.into_iter().zip(results) {
                let _ = item.reply.send(SlotResult {
                    slot: item.slot,
                    result,
                });
            }
        }
        Ok(results) => {
            let err = IoError::new(
                FailureAction::Retriable,
                "bad_response",
                format!(
                    "the target answered {} partitions for a request of {}; retrying",
                    results.len(),
                    request.len()
                ),
            );
            fail_all(request, &err);
        }
        Err(err) => fail_all(request, &err),
    }
}

fn fail_all(request: Request, err: &IoError) {
    for item in request {
        let _ = item.reply.send(SlotResult {
            slot: item.slot,
            result: Err(err.clone()),
        });
    }
}
