//! The task that runs one broker's [`Scheduler`]: it feeds it the partitions' requests, the
//! clock and the broker's answers, sends the requests it asks for, and hands out the answers.
//! All decisions are the scheduler's.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::future::OptionFuture;
use strait_wire::fetch::SessionFetchResponse;
use strait_wire::{FetchedPartition, TopicPartition};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::SourceCluster;
use super::scheduler::{Answer, Scheduler, Ticket, Want};
use crate::pipeline::io::IoError;

/// One partition's fetch, queued to a broker's task.
pub(super) struct Request {
    pub(super) ticket: Ticket,
    pub(super) want: Want,
    pub(super) reply: oneshot::Sender<Result<FetchedPartition, IoError>>,
}

type InFlight = Pin<Box<dyn Future<Output = Result<SessionFetchResponse, IoError>> + Send>>;
type Check = Pin<Box<dyn Future<Output = Vec<TopicPartition>> + Send>>;

/// Runs until every sender of `rx` is gone and the request in flight (if any) is answered.
pub(super) async fn run<C: SourceCluster>(
    node: i32,
    cluster: Arc<C>,
    sessions: bool,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    let mut scheduler = Scheduler::new(sessions);
    let mut replies: HashMap<Ticket, oneshot::Sender<Result<FetchedPartition, IoError>>> =
        HashMap::new();
    let mut in_flight: Option<InFlight> = None;
    // When the request in flight was sent (for the debug log of each round).
    let mut sent_at = Instant::now();
    // A check of an overdue request's partitions against fresh metadata.
    let mut checking: Option<Check> = None;
    let mut open = true;
    loop {
        if in_flight.is_none() {
            if !open {
                return;
            }
            // Partitions that stopped waiting (their task ended) leave the session.
            replies.retain(|ticket, reply| {
                let gone = reply.is_closed();
                if gone {
                    scheduler.cancel(*ticket);
                }
                !gone
            });
            if let Some(request) = scheduler.poll_request(Instant::now()) {
                let cluster = cluster.clone();
                sent_at = Instant::now();
                in_flight = Some(Box::pin(async move { cluster.fetch(node, request).await }));
            }
        }
        let wakeup = scheduler.next_wakeup();
        tokio::select! {
            request = rx.recv(), if open => match request {
                Some(request) => {
                    accept(&mut scheduler, &mut replies, request);
                    // Take what is already queued, so one round carries it all.
                    while let Ok(request) = rx.try_recv() {
                        accept(&mut scheduler, &mut replies, request);
                    }
                }
                None => open = false,
            },
            Some(result) = OptionFuture::from(in_flight.as_mut()), if in_flight.is_some() => {
                in_flight = None;
                checking = None;
                let answers = match result {
                    Ok(response) => scheduler.on_response(response, Instant::now()),
                    Err(e) => scheduler.on_failure(e),
                };
                tracing::debug!(
                    broker = node,
                    answered = answers.len(),
                    elapsed_ms = sent_at.elapsed().as_secs_f64() * 1e3,
                    "fetch round answered"
                );
                deliver(&mut replies, answers);
            }
            Some(moved) = OptionFuture::from(checking.as_mut()), if checking.is_some() => {
                checking = None;
                if !moved.is_empty() {
                    tracing::info!(
                        broker = node, partitions = moved.len(),
                        "source broker is not answering and leadership moved; fetching those partitions from their new leaders"
                    );
                }
                deliver(&mut replies, scheduler.release(&moved, node));
            }
            () = tokio::time::sleep_until(wakeup.unwrap_or_else(Instant::now)), if wakeup.is_some() => {
                let now = Instant::now();
                if let Some(partitions) = scheduler.overdue(now)
                    && checking.is_none()
                {
                    // Metadata refreshed from now on: an earlier refresh may predate the move.
                    checking = Some(Box::pin(moved_away(cluster.clone(), node, now, partitions)));
                }
            }
        }
    }
}

/// The partitions (of a request `node` has not answered) that metadata refreshed after `since`
/// shows led by another broker.
async fn moved_away<C: SourceCluster>(
    cluster: Arc<C>,
    node: i32,
    since: Instant,
    partitions: Vec<TopicPartition>,
) -> Vec<TopicPartition> {
    // Metadata must not be asked of the broker that does not answer.
    cluster.unresponsive(node);
    let mut moved = Vec::new();
    for tp in partitions {
        if let Ok(route) = cluster.route(&tp, Some(since)).await
            && route.leader != node
        {
            moved.push(tp);
        }
    }
    moved
}

fn accept(
    scheduler: &mut Scheduler,
    replies: &mut HashMap<Ticket, oneshot::Sender<Result<FetchedPartition, IoError>>>,
    request: Request,
) {
    match scheduler.want(request.ticket, request.want) {
        Some(answer) => {
            let _ = request.reply.send(answer.result);
        }
        None => {
            replies.insert(request.ticket, request.reply);
        }
    }
}

fn deliver(
    replies: &mut HashMap<Ticket, oneshot::Sender<Result<FetchedPartition, IoError>>>,
    answers: Vec<Answer>,
) {
    for answer in answers {
        if let Some(reply) = replies.remove(&answer.ticket) {
            // A partition that stopped waiting meanwhile simply does not take its answer.
            let _ = reply.send(answer.result);
        }
    }
}
