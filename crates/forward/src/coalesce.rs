//! Coalesces the partitions' fetches into one Fetch request per round.
//!
//! Each partition's pipeline asks for its own partition, but Kafka serves the requests of one
//! connection strictly one after another: twelve idle partitions each long-polling for
//! `fetch.max.wait.ms` on one connection would delay the thirteenth, which has data, by twelve
//! waits. So, like the Java consumer, the mirror sends one request carrying every partition that
//! is waiting (per leader, through [`Client::fetch`]); the broker answers as soon as any of
//! them has data, and every partition gets its part of the answer.

use std::collections::HashSet;
use std::time::Duration;

use strait_wire::{
    Client, FetchOptions, FetchPartition, FetchedPartition, IsolationLevel, TopicPartition,
};
use tokio::sync::{mpsc, oneshot};

use crate::pipeline::io::{ErrorClass, IoError};
use crate::wire_io::classify;

struct Pending {
    partition: FetchPartition,
    isolation: IsolationLevel,
    max_wait: Duration,
    reply: oneshot::Sender<Result<FetchedPartition, IoError>>,
}

/// A handle to the coalescing task of one source client.
#[derive(Clone)]
pub(crate) struct Coalescer {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Coalescer {
    /// Starts the task (it ends when every handle is dropped).
    pub(crate) fn start(client: Client) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, rx));
        Coalescer { tx }
    }

    /// Fetches one partition as part of the next round.
    pub(crate) async fn fetch(
        &self,
        partition: FetchPartition,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<FetchedPartition, IoError> {
        let (reply, answer) = oneshot::channel();
        let gone = || {
            IoError::new(
                ErrorClass::Retriable,
                "disconnected",
                "the fetch task stopped; retrying",
            )
        };
        self.tx
            .send(Pending {
                partition,
                isolation,
                max_wait,
                reply,
            })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// How long a round waits for the partitions of the previous round to ask again. They normally
/// do within microseconds (the pipeline asks for its next offset as soon as it has planned a
/// response); one that does not is held up by back-pressure and joins a later round.
const REGATHER: Duration = Duration::from_millis(2);

async fn run(client: Client, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut carry: Vec<Pending> = Vec::new();
    // Partitions answered in the previous round: the next round waits (briefly) for them. A
    // partition left out of a round would wait for that round's whole long poll
    // (fetch_max_wait) when data arrives for it meanwhile.
    let mut expected: HashSet<TopicPartition> = HashSet::new();
    loop {
        if carry.is_empty() {
            match rx.recv().await {
                Some(p) => carry.push(p),
                None => return,
            }
        }
        let deadline = tokio::time::Instant::now() + REGATHER;
        loop {
            while let Ok(p) = rx.try_recv() {
                carry.push(p);
            }
            expected.retain(|tp| !carry.iter().any(|p| &p.partition.partition == tp));
            if expected.is_empty() {
                break;
            }
            tokio::select! {
                p = rx.recv() => match p {
                    Some(p) => carry.push(p),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        expected.clear();
        // One entry per partition and one isolation level per request; the rest waits a round.
        let isolation = carry[0].isolation;
        let mut round = Vec::new();
        let mut later = Vec::new();
        for p in carry.drain(..) {
            let duplicate = round
                .iter()
                .any(|r: &Pending| r.partition.partition == p.partition.partition);
            if p.isolation == isolation && !duplicate {
                round.push(p);
            } else {
                later.push(p);
            }
        }
        carry = later;
        let max_wait = round
            .iter()
            .map(|p| p.max_wait)
            .min()
            .unwrap_or(Duration::from_millis(100));
        let max_bytes = round
            .iter()
            .map(|p| i64::from(p.partition.max_bytes))
            .sum::<i64>();
        let options = FetchOptions {
            isolation,
            max_wait,
            max_bytes: i32::try_from(max_bytes).unwrap_or(i32::MAX),
            ..FetchOptions::default()
        };
        let partitions: Vec<FetchPartition> = round.iter().map(|p| p.partition.clone()).collect();
        match client.fetch(&partitions, &options).await {
            Ok(answers) => {
                // Match answers by partition, never by position: a round holds each partition
                // once, and an answer missing for any reason becomes a retriable error.
                let mut by_partition: std::collections::HashMap<_, _> = answers
                    .into_iter()
                    .map(|a| (a.partition.clone(), a))
                    .collect();
                for pending in round {
                    expected.insert(pending.partition.partition.clone());
                    let answer = by_partition
                        .remove(&pending.partition.partition)
                        .ok_or_else(|| {
                            IoError::new(
                                ErrorClass::Retriable,
                                "bad_response",
                                format!(
                                    "the fetch response had no answer for {}",
                                    pending.partition.partition
                                ),
                            )
                        });
                    let _ = pending.reply.send(answer);
                }
            }
            Err(e) => {
                let err = classify(&e);
                for pending in round {
                    let _ = pending.reply.send(Err(err.clone()));
                }
            }
        }
    }
}
