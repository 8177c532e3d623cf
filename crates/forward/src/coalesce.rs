//! Coalesces the partitions' fetches into one Fetch request per round.
//!
//! Each partition's pipeline asks for its own partition, but Kafka serves the requests of one
//! connection strictly one after another: twelve idle partitions each long-polling for
//! `fetch.max.wait.ms` on one connection would delay the thirteenth, which has data, by twelve
//! waits. So, like the Java consumer, the mirror sends one request carrying every partition that
//! is waiting (per leader, through [`Client::fetch`]); the broker answers as soon as any of
//! them has data, and every partition gets its part of the answer.
//!
//! A round waits briefly for the partitions the previous round answered: they ask again within
//! microseconds, and one that missed the round would wait for the round's whole long poll while
//! data arrives for it.

use std::collections::HashSet;
use std::time::Duration;

use strait_wire::Error as WireError;
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
    pub(crate) fn start<C: RoundFetch>(client: C) -> Self {
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
/// do within microseconds (a partition asks for its next offset as soon as it has handed the
/// response's batches to its produce side); one that does not is held up by back-pressure (a
/// full in-flight window or memory budget) and joins a later round.
const REGATHER: Duration = Duration::from_millis(2);

/// Sends one round: a Fetch of several partitions (per leader). [`Client::fetch`] in production;
/// the tests drive rounds in memory.
pub(crate) trait RoundFetch: Send + Sync + 'static {
    fn fetch_round(
        &self,
        partitions: Vec<FetchPartition>,
        options: FetchOptions,
    ) -> impl std::future::Future<Output = Result<Vec<FetchedPartition>, WireError>> + Send;
}

impl RoundFetch for Client {
    async fn fetch_round(
        &self,
        partitions: Vec<FetchPartition>,
        options: FetchOptions,
    ) -> Result<Vec<FetchedPartition>, WireError> {
        self.fetch(&partitions, &options).await
    }
}

async fn run<C: RoundFetch>(client: C, mut rx: mpsc::UnboundedReceiver<Pending>) {
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
        for p in &carry {
            expected.remove(&p.partition.partition);
        }
        let mut arrive = |p: Pending, expected: &mut HashSet<TopicPartition>| {
            expected.remove(&p.partition.partition);
            carry.push(p);
        };
        loop {
            while let Ok(p) = rx.try_recv() {
                arrive(p, &mut expected);
            }
            if expected.is_empty() {
                break;
            }
            tokio::select! {
                p = rx.recv() => match p {
                    Some(p) => arrive(p, &mut expected),
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
        match client.fetch_round(partitions, options).await {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;

    use super::*;

    /// Records each round's partitions and answers every partition with no data.
    #[derive(Clone, Default)]
    struct Rounds(Arc<Mutex<Vec<Vec<i32>>>>);

    impl RoundFetch for Rounds {
        async fn fetch_round(
            &self,
            partitions: Vec<FetchPartition>,
            _options: FetchOptions,
        ) -> Result<Vec<FetchedPartition>, WireError> {
            let mut ids: Vec<i32> = partitions.iter().map(|p| p.partition.partition()).collect();
            ids.sort_unstable();
            self.0.lock().unwrap().push(ids);
            // Like a long poll that returns soon: every round takes a millisecond.
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(partitions
                .into_iter()
                .map(|p| FetchedPartition {
                    partition: p.partition,
                    fetch_offset: p.offset,
                    error: None,
                    high_watermark: p.offset,
                    last_stable_offset: p.offset,
                    log_start_offset: 0,
                    aborted_transactions: Vec::new(),
                    preferred_read_replica: None,
                    current_leader: None,
                    records: Bytes::new(),
                })
                .collect())
        }
    }

    fn fetch(c: &Coalescer, p: i32) -> impl std::future::Future<Output = ()> + use<> {
        let c = c.clone();
        async move {
            let tp = TopicPartition::new("t", p).unwrap();
            let answer = c
                .fetch(
                    FetchPartition::new(tp.clone(), 0),
                    IsolationLevel::ReadCommitted,
                    Duration::from_millis(100),
                )
                .await
                .unwrap();
            assert_eq!(answer.partition, tp, "every partition gets its own answer");
        }
    }

    /// A partition that is slower to ask again (it was busy handing over data) is still part of
    /// the next round, instead of waiting for a round that left without it.
    #[tokio::test(start_paused = true)]
    async fn next_round_waits_for_partitions_just_answered() {
        let rounds = Rounds::default();
        let c = Coalescer::start(rounds.clone());
        let fast = tokio::spawn({
            let c = c.clone();
            async move {
                for _ in 0..3 {
                    fetch(&c, 0).await;
                }
            }
        });
        let slow = tokio::spawn({
            let c = c.clone();
            async move {
                for _ in 0..3 {
                    fetch(&c, 1).await;
                    // Busy for a while (well under the 2 ms regather window) before asking again.
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            }
        });
        fast.await.unwrap();
        slow.await.unwrap();
        let rounds = rounds.0.lock().unwrap().clone();
        assert_eq!(rounds, vec![vec![0, 1]; 3], "rounds: {rounds:?}");
    }

    /// A partition that does not ask again (held up by back-pressure) delays the next round by
    /// the regather window only.
    #[tokio::test(start_paused = true)]
    async fn a_partition_that_stays_away_costs_one_short_wait() {
        let rounds = Rounds::default();
        let c = Coalescer::start(rounds.clone());
        let (a, b) = tokio::join!(fetch(&c, 0), fetch(&c, 1));
        let ((), ()) = (a, b);
        let start = tokio::time::Instant::now();
        fetch(&c, 0).await;
        let took = start.elapsed();
        assert!(
            took >= REGATHER && took < REGATHER + Duration::from_millis(5),
            "second round took {took:?}"
        );
        let rounds = rounds.0.lock().unwrap().clone();
        assert_eq!(rounds, vec![vec![0, 1], vec![0]], "rounds: {rounds:?}");
    }
}
