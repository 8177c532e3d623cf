//! Fetch scheduling: how every partition's fetch reaches its source leader.
//!
//! Each partition's fetch loop (`pipeline/partition/fetch.rs`) asks for one partition at a time. The
//! [`Fetcher`] routes each ask to the partition's leader by the metadata at that moment, and
//! hands it to that broker's scheduler. One scheduler per source broker (symmetric with the
//! per-broker produce aggregator in `pipeline/sender.rs`):
//!
//! | file | what it holds |
//! |---|---|
//! | [`scheduler`] | the state machine of one broker: rounds of one Fetch request carrying every waiting partition, the short regather wait, per-partition answers and errors |
//! | [`session`] | the broker's incremental fetch session (KIP-227): only changed partitions are sent |
//! | [`driver`] | the task that runs a scheduler (the only async code) |
//! | `wire` | [`SourceCluster`] over a `strait-wire` client: routes from metadata, single-shot fetches |
//!
//! Brokers never wait for each other: an idle broker's long poll, a dead or black-holed broker,
//! or one partition's error affects only that broker's partitions (or that partition). Nothing
//! is retried inside a round; the partition's fetch loop backs off and asks again. When an
//! answer says leadership moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH) or the broker failed, the partition's route is marked stale: the new
//! leader the broker named (KIP-951 `CurrentLeader`) is used at once, otherwise the next ask
//! refreshes the topic's metadata first.

mod driver;
mod scheduler;
mod session;
mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use strait_wire::PartitionLeader;
use strait_wire::fetch::{SessionFetch, SessionFetchResponse};
use strait_wire::{FetchPartition, FetchedPartition, ResponseError, TopicPartition};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::pipeline::io::{FailureAction, FetchSpec, IoError};
pub(crate) use wire::WireCluster;

/// The source cluster as the fetch schedulers need it; `strait-wire` in production
/// ([`WireCluster`]), in memory in the tests.
pub(crate) trait SourceCluster: Send + Sync + 'static {
    /// Where `partition`'s fetches go now. `stale_since`: an answer showed at that instant that
    /// the route may be out of date (leadership moved, the broker failed): refresh the metadata
    /// first, unless it was refreshed since.
    fn route(
        &self,
        partition: &TopicPartition,
        stale_since: Option<Instant>,
    ) -> impl Future<Output = Result<PartitionLeader, IoError>> + Send;

    /// A broker named `partition`'s new leader (KIP-951). Returns false if the hint cannot be
    /// used (unknown broker), and the route is then refreshed from metadata.
    fn leader_hint(&self, partition: &TopicPartition, leader: i32, leader_epoch: i32) -> bool;

    /// `node` has not answered a request for a while (frozen, black-holed): metadata should be
    /// asked of other brokers.
    fn unresponsive(&self, node: i32);

    /// One Fetch request to `node`: no routing, no retries.
    fn fetch(
        &self,
        node: i32,
        request: SessionFetch,
    ) -> impl Future<Output = Result<SessionFetchResponse, IoError>> + Send;
}

/// Routes each partition's fetch to its leader's scheduler.
pub(crate) struct Fetcher<C> {
    cluster: Arc<C>,
    /// One scheduler task per broker, started on first use.
    brokers: Mutex<HashMap<i32, mpsc::UnboundedSender<driver::Request>>>,
    /// Partitions whose route must be checked before the next fetch, and since when.
    stale: Mutex<HashMap<TopicPartition, Instant>>,
    tickets: AtomicU64,
    /// Whether the schedulers use incremental fetch sessions.
    sessions: bool,
}

impl<C: SourceCluster> Fetcher<C> {
    /// A fetcher over `cluster`; `sessions: false` sends sessionless full requests only.
    pub(crate) fn new(cluster: C, sessions: bool) -> Self {
        Fetcher {
            cluster: Arc::new(cluster),
            brokers: Mutex::new(HashMap::new()),
            stale: Mutex::new(HashMap::new()),
            tickets: AtomicU64::new(0),
            sessions,
        }
    }

    /// Fetches one partition from its leader, as part of that broker's next round. The answer
    /// may carry the partition's own error code; `Err` is a failure of the route or of the
    /// whole request to that broker.
    pub(crate) async fn fetch(&self, spec: &FetchSpec) -> Result<FetchedPartition, IoError> {
        let tp = &spec.partition;
        let stale = lock(&self.stale).remove(tp);
        // Boxed: a lookup that refreshes metadata is a future of several KiB, and held inline
        // it would be part of every partition's task while it long-polls.
        let route = match Box::pin(self.cluster.route(tp, stale)).await {
            Ok(route) => route,
            Err(e) => {
                if e.action == FailureAction::Retriable {
                    self.mark_stale(tp);
                }
                return Err(e);
            }
        };
        let want = scheduler::Want {
            partition: FetchPartition {
                partition: tp.clone(),
                offset: spec.offset,
                max_bytes: spec.max_bytes,
                leader_epoch: (route.leader_epoch >= 0).then_some(route.leader_epoch),
                topic_id: route.topic_id,
            },
            isolation: spec.isolation,
            max_wait: spec.max_wait,
        };
        let (reply, answer) = oneshot::channel();
        let request = driver::Request {
            ticket: self.tickets.fetch_add(1, Ordering::Relaxed),
            want,
            reply,
        };
        self.submit(route.leader, request);
        let result = answer.await.unwrap_or_else(|_| {
            Err(IoError::new(
                FailureAction::Retriable,
                "disconnected",
                format!(
                    "the fetch task of source broker {} stopped; retrying",
                    route.leader
                ),
            ))
        });
        self.check_route(tp, &result);
        result
    }

    /// Marks the route stale when the answer says leadership moved or the broker failed.
    fn check_route(&self, tp: &TopicPartition, result: &Result<FetchedPartition, IoError>) {
        match result {
            Ok(answer) => match answer.error {
                Some(ResponseError::NotLeaderOrFollower | ResponseError::FencedLeaderEpoch) => {
                    let hinted = answer.current_leader.is_some_and(|(leader, epoch)| {
                        leader >= 0 && self.cluster.leader_hint(tp, leader, epoch)
                    });
                    if !hinted {
                        self.mark_stale(tp);
                    }
                }
                Some(code) if reroute(code) => self.mark_stale(tp),
                _ => {}
            },
            // The broker failed (disconnected, refused, timed out): leadership may be moving
            // away from it; the next ask checks the metadata.
            Err(e) if e.action == FailureAction::Retriable => self.mark_stale(tp),
            Err(_) => {}
        }
    }

    fn mark_stale(&self, tp: &TopicPartition) {
        lock(&self.stale).insert(tp.clone(), Instant::now());
    }

    fn submit(&self, node: i32, request: driver::Request) {
        let mut brokers = lock(&self.brokers);
        let request = match brokers.get(&node) {
            Some(tx) => match tx.send(request) {
                Ok(()) => return,
                // The task ended (it panicked); start a fresh one below.
                Err(mpsc::error::SendError(request)) => request,
            },
            None => request,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(driver::run(node, self.cluster.clone(), self.sessions, rx));
        // A fresh receiver is alive, so this cannot fail; if it did, the reply channel is
        // dropped and the partition sees a retriable error.
        let _ = tx.send(request);
        brokers.insert(node, tx);
    }
}

/// Partition errors after which the route is refreshed from metadata.
fn reroute(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::NotLeaderOrFollower
            | ResponseError::FencedLeaderEpoch
            | ResponseError::UnknownLeaderEpoch
            | ResponseError::LeaderNotAvailable
            | ResponseError::UnknownTopicOrPartition
            | ResponseError::UnknownTopicId
            | ResponseError::InconsistentTopicId
            | ResponseError::KafkaStorageError
            | ResponseError::ReplicaNotAvailable
            | ResponseError::BrokerNotAvailable
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
