//! Route and retry: the one loop that every partition-routed request of [`Client`] goes
//! through (Fetch, Produce, ListOffsets).
//!
//! Each round: metadata for the pending partitions (refreshed after the first round), each
//! partition routed to its leader, one request per leader (leaders concurrently), and each
//! partition's answer judged by the request type ([`PartitionRequest::judge`]): done, failed,
//! or retried in the next round. Between rounds the client backs off (`retry.backoff.ms` ..
//! `retry.backoff.max.ms`); it gives up after `request.timeout.ms`, or sooner when every
//! partition left is of a topic that does not exist. A retried partition that runs out of time
//! reports the error of its last attempt.
//!
//! What differs between APIs (what to send, which answers to retry, whether an ambiguous
//! failure may be resent) is in the [`PartitionRequest`] implementations next to each API.

use std::collections::HashMap;
use std::future::Future;

use kafka_protocol::ResponseError;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::metadata::{ClusterMetadata, PartitionLeader};
use crate::topic::TopicPartition;

/// How many rounds may fail only with UNKNOWN_TOPIC_OR_PARTITION (a new topic takes a moment
/// to reach every broker) before the call gives up.
pub(crate) const UNKNOWN_TOPIC_RETRIES: u32 = 5;

/// What to do with one partition after an attempt.
#[derive(Debug)]
pub(crate) enum Verdict<T> {
    /// Finished: this is the partition's outcome.
    Done(T),
    /// Finished with an error retrying cannot fix (for a fail-fast request: the whole call
    /// fails with it).
    Fail(Error),
    /// Refresh metadata, back off and send it again. If time runs out, the outcome is `or`
    /// when given, else `error`.
    Retry {
        /// Why it is retried.
        error: Error,
        /// The outcome to report instead of `error` if this was the last attempt.
        or: Option<T>,
    },
}

impl<T> Verdict<T> {
    /// Retry; if time runs out, fail with `error`.
    pub(crate) fn retry(error: Error) -> Verdict<T> {
        Verdict::Retry { error, or: None }
    }

    /// Retry if `error` is retriable, else fail with it.
    pub(crate) fn retry_if_retriable(error: Error) -> Verdict<T> {
        if error.is_retriable() {
            Verdict::retry(error)
        } else {
            Verdict::Fail(error)
        }
    }
}

/// One kind of request that is sent to each partition's leader.
pub(crate) trait PartitionRequest: Clone + Send + Sync + 'static {
    /// One partition's part of the request.
    type Item: Clone + Send + Sync + 'static;
    /// One partition's part of the answer.
    type Answer: Send + 'static;
    /// A partition's outcome.
    type Out;

    /// The API name, for logs and the give-up error.
    const API: &'static str;
    /// The ACL operation the request needs on the topic (named in authorization errors).
    const OPERATION: &'static str;
    /// Whether the first error that retrying cannot fix fails the whole call (the other
    /// partitions' answers are dropped), rather than only that partition's outcome.
    const FAIL_FAST: bool;

    /// The partition an item is for.
    fn partition(item: &Self::Item) -> &TopicPartition;

    /// The partition an answer is for.
    fn answered(answer: &Self::Answer) -> &TopicPartition;

    /// The item as sent to the leader of `route` (e.g. with its leader epoch and topic id).
    fn routed(item: &Self::Item, _route: &PartitionLeader) -> Self::Item {
        item.clone()
    }

    /// Sends `items` (one per partition) to one leader.
    fn send(
        &self,
        conn: &Connection,
        items: &[Self::Item],
        metadata: &ClusterMetadata,
    ) -> impl Future<Output = Result<Vec<Self::Answer>>> + Send;

    /// What to do with a partition's answer.
    fn judge(&self, item: &Self::Item, answer: Self::Answer) -> Verdict<Self::Out>;

    /// What to do when the partition has no route (no leader, unknown topic, not authorized).
    fn unroutable(&self, _item: &Self::Item, error: Error) -> Verdict<Self::Out> {
        Verdict::retry_if_retriable(error)
    }

    /// What to do when the request carrying the partition failed as a whole: `sent` is false
    /// if it certainly never reached the broker (no connection).
    fn failed(&self, _item: &Self::Item, error: &Error, _sent: bool) -> Verdict<Self::Out> {
        Verdict::retry_if_retriable(error.clone())
    }
}

/// The state of one call: outcomes so far and why the others are retried.
struct Progress<T> {
    outcomes: Vec<Option<Result<T>>>,
    /// Per item: the error of its last failed attempt and the outcome to report instead.
    last: Vec<Option<(Error, Option<T>)>>,
    /// Items to send again in the next round.
    next: Vec<usize>,
    fail_fast: bool,
}

impl<T> Progress<T> {
    fn new(items: usize, fail_fast: bool) -> Self {
        Progress {
            outcomes: (0..items).map(|_| None).collect(),
            last: (0..items).map(|_| None).collect(),
            next: Vec::new(),
            fail_fast,
        }
    }

    /// Records a verdict; `Err` if it fails the whole call.
    fn settle(&mut self, i: usize, verdict: Verdict<T>) -> Result<()> {
        match verdict {
            Verdict::Done(out) => self.outcomes[i] = Some(Ok(out)),
            Verdict::Fail(e) if self.fail_fast => return Err(e),
            Verdict::Fail(e) => self.outcomes[i] = Some(Err(e)),
            Verdict::Retry { error, or } => {
                self.last[i] = Some((error, or));
                self.next.push(i);
            }
        }
        Ok(())
    }

    /// The outcomes, once time ran out for the items still `pending`: each reports its last
    /// attempt.
    fn finish(mut self, pending: &[usize], api: &str) -> Vec<Result<T>> {
        for &i in pending {
            self.outcomes[i] = Some(match self.last[i].take() {
                Some((_, Some(out))) => Ok(out),
                Some((e, None)) => Err(e),
                None => Err(Error::broker(
                    ResponseError::RequestTimedOut,
                    format!("{api} did not complete within request.timeout.ms"),
                )),
            });
        }
        self.outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(Error::broker(
                        ResponseError::UnknownServerError,
                        format!("{api}: no outcome (a bug in strait-wire)"),
                    ))
                })
            })
            .collect()
    }

    /// Whether every item left last failed because its topic does not exist (yet).
    fn only_unknown_topics(&self, pending: &[usize]) -> bool {
        pending.iter().all(|&i| {
            self.last[i]
                .as_ref()
                .is_some_and(|(e, _)| e.code() == Some(ResponseError::UnknownTopicOrPartition))
        })
    }
}

impl Client {
    /// Sends each item to its partition's leader, retrying as [`PartitionRequest`] says;
    /// returns one outcome per item, in input order (or the error that failed a fail-fast
    /// request). Items must be for distinct partitions.
    pub(crate) async fn route_and_retry<R: PartitionRequest>(
        &self,
        request: &R,
        items: &[R::Item],
    ) -> Result<Vec<Result<R::Out>>> {
        let mut progress = Progress::new(items.len(), R::FAIL_FAST);
        let mut pending: Vec<usize> = (0..items.len()).collect();
        let mut retry = self.retry();
        let mut force = false;
        let mut unknown_topic_rounds = 0u32;
        while !pending.is_empty() {
            self.attempt(request, items, &pending, force, &mut progress)
                .await?;
            pending = std::mem::take(&mut progress.next);
            if pending.is_empty() {
                break;
            }
            force = true;
            if progress.only_unknown_topics(&pending) {
                unknown_topic_rounds += 1;
            }
            if unknown_topic_rounds > UNKNOWN_TOPIC_RETRIES || !retry.wait().await {
                break;
            }
            tracing::debug!(
                api = R::API,
                partitions = pending.len(),
                attempt = retry.attempts(),
                "retrying"
            );
        }
        Ok(progress.finish(&pending, R::API))
    }

    /// One round of [`Client::route_and_retry`], without its retries: an item that would be
    /// retried reports this round's error, for a caller that retries on its own.
    pub(crate) async fn route_once<R: PartitionRequest>(
        &self,
        request: &R,
        items: &[R::Item],
    ) -> Result<Vec<Result<R::Out>>> {
        let mut progress = Progress::new(items.len(), R::FAIL_FAST);
        let all: Vec<usize> = (0..items.len()).collect();
        self.attempt(request, items, &all, false, &mut progress)
            .await?;
        let left = std::mem::take(&mut progress.next);
        Ok(progress.finish(&left, R::API))
    }

    /// One round: route the `pending` items, send to every leader, judge the answers.
    async fn attempt<R: PartitionRequest>(
        &self,
        request: &R,
        items: &[R::Item],
        pending: &[usize],
        force: bool,
        progress: &mut Progress<R::Out>,
    ) -> Result<()> {
        let topics: Vec<&str> = pending
            .iter()
            .map(|&i| R::partition(&items[i]).topic())
            .collect();
        let md = match self.metadata_for(&topics, force).await {
            Ok(md) => md,
            Err(e) => {
                for &i in pending {
                    progress.settle(i, Verdict::retry_if_retriable(e.clone()))?;
                }
                return Ok(());
            }
        };
        let mut by_leader: HashMap<i32, Vec<(usize, R::Item)>> = HashMap::new();
        for &i in pending {
            match self.route(&md, R::partition(&items[i]), R::OPERATION) {
                Ok(route) => by_leader
                    .entry(route.leader)
                    .or_default()
                    .push((i, R::routed(&items[i], &route))),
                Err(e) => progress.settle(i, request.unroutable(&items[i], e))?,
            }
        }
        // Items sent and not answered yet (a task that panicked leaves its items here).
        let mut in_flight = vec![false; items.len()];
        let mut set = JoinSet::new();
        for (leader, group) in by_leader {
            for (i, _) in &group {
                in_flight[*i] = true;
            }
            let client = self.clone();
            let request = request.clone();
            let md = md.clone();
            set.spawn(async move {
                let (idxs, sent): (Vec<usize>, Vec<R::Item>) = group.into_iter().unzip();
                // `reached`: whether the request may have reached the broker.
                let (reached, r) = match client.broker(leader).await {
                    Ok(conn) => (true, request.send(&conn, &sent, &md).await),
                    Err(e) => (false, Err(e)),
                };
                (idxs, reached, r)
            });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((idxs, reached, r)) = joined else {
                continue;
            };
            for &i in &idxs {
                in_flight[i] = false;
            }
            match r {
                Err(e) => {
                    if e.is_retriable() {
                        self.leader_request_failed();
                    }
                    for i in idxs {
                        progress.settle(i, request.failed(&items[i], &e, reached))?;
                    }
                }
                Ok(answers) => {
                    let mut answers: Vec<Option<R::Answer>> =
                        answers.into_iter().map(Some).collect();
                    for i in idxs {
                        let tp = R::partition(&items[i]);
                        let answer = answers
                            .iter_mut()
                            .find(|a| a.as_ref().is_some_and(|a| R::answered(a) == tp))
                            .and_then(Option::take);
                        match answer {
                            Some(a) => progress.settle(i, request.judge(&items[i], a))?,
                            // No answer for it: send it again.
                            None => progress.next.push(i),
                        }
                    }
                }
            }
        }
        // Lost with a panicked task: send again.
        progress
            .next
            .extend((0..items.len()).filter(|&i| in_flight[i]));
        Ok(())
    }
}

/// The ACL-aware error for a partition-level error code of `R`'s API.
pub(crate) fn code_error<R: PartitionRequest>(
    client_principal: Option<&str>,
    item: &R::Item,
    code: ResponseError,
) -> Error {
    crate::client::partition_error(
        code,
        client_principal,
        R::OPERATION,
        R::partition(item),
        R::API,
        None,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn progress(n: usize, fail_fast: bool) -> Progress<&'static str> {
        Progress {
            outcomes: (0..n).map(|_| None).collect(),
            last: (0..n).map(|_| None).collect(),
            next: Vec::new(),
            fail_fast,
        }
    }

    fn code(c: ResponseError) -> Error {
        Error::broker(c, "x")
    }

    /// Done and failed items keep their outcome; retried ones go to the next round and, when
    /// time runs out, report their fallback, else their last error, else a timeout.
    #[test]
    fn outcomes_after_the_last_round() {
        let mut p = progress(5, false);
        p.settle(0, Verdict::Done("a")).unwrap();
        p.settle(1, Verdict::Fail(code(ResponseError::InvalidRecord)))
            .unwrap();
        p.settle(
            2,
            Verdict::Retry {
                error: code(ResponseError::NotLeaderOrFollower),
                or: Some("stale answer"),
            },
        )
        .unwrap();
        p.settle(3, Verdict::retry(code(ResponseError::LeaderNotAvailable)))
            .unwrap();
        p.next.push(4); // no answer at all
        let pending = std::mem::take(&mut p.next);
        assert_eq!(pending, [2, 3, 4]);
        let out = p.finish(&pending, "Test");
        assert_eq!(out[0].as_ref().unwrap(), &"a");
        assert_eq!(
            out[1].as_ref().unwrap_err().code(),
            Some(ResponseError::InvalidRecord)
        );
        assert_eq!(out[2].as_ref().unwrap(), &"stale answer");
        assert_eq!(
            out[3].as_ref().unwrap_err().code(),
            Some(ResponseError::LeaderNotAvailable)
        );
        let timeout = out[4].as_ref().unwrap_err();
        assert_eq!(timeout.code(), Some(ResponseError::RequestTimedOut));
        assert!(
            timeout.to_string().contains("Test did not complete"),
            "{timeout}"
        );
    }

    #[test]
    fn a_fail_fast_request_fails_at_the_first_unfixable_error() {
        let mut p = progress(2, true);
        p.settle(0, Verdict::Done("a")).unwrap();
        let e = p
            .settle(1, Verdict::Fail(code(ResponseError::InvalidRecord)))
            .unwrap_err();
        assert_eq!(e.code(), Some(ResponseError::InvalidRecord));
    }

    #[test]
    fn retriable_errors_are_retried_others_fail() {
        let table = [
            (code(ResponseError::NotLeaderOrFollower), true),
            (code(ResponseError::NotEnoughReplicas), true),
            (
                Error::Disconnected {
                    broker: "b:1".into(),
                    reason: "eof".into(),
                },
                true,
            ),
            (code(ResponseError::TopicAuthorizationFailed), false),
            (Error::protocol("b:1", "garbage"), false),
        ];
        for (e, retried) in table {
            let label = e.to_string();
            match Verdict::<()>::retry_if_retriable(e) {
                Verdict::Retry { or: None, .. } => assert!(retried, "{label}"),
                Verdict::Fail(_) => assert!(!retried, "{label}"),
                other => panic!("{other:?}"),
            }
        }
    }

    /// The unknown-topic give-up counts only rounds in which every partition left failed
    /// because its topic does not exist.
    #[test]
    fn only_unknown_topics() {
        let mut p = progress(2, false);
        p.settle(
            0,
            Verdict::retry(code(ResponseError::UnknownTopicOrPartition)),
        )
        .unwrap();
        p.settle(
            1,
            Verdict::retry(code(ResponseError::UnknownTopicOrPartition)),
        )
        .unwrap();
        assert!(p.only_unknown_topics(&[0, 1]));
        p.settle(1, Verdict::retry(code(ResponseError::NotLeaderOrFollower)))
            .unwrap();
        assert!(!p.only_unknown_topics(&[0, 1]));
        assert!(p.only_unknown_topics(&[0]));
    }
}
