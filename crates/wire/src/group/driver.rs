//! What the two membership drivers share (the classic protocol's in `group.rs`, KIP-848's in
//! `consumer_member.rs`): the event channel to the [`GroupMember`](super::GroupMember) handle,
//! and the task's shape: run the membership until the handle asks to close (then leave the
//! group and answer) or the membership fails (then announce what is lost, and the failure).

use std::convert::Infallible;

use tokio::sync::{mpsc, oneshot};

use super::{GroupEvent, PartitionSet, Revocation, to_topic_partitions};
use crate::error::{Error, Result};

/// The sending side of a member's events.
pub(super) struct Events(mpsc::UnboundedSender<GroupEvent>);

impl Events {
    pub fn new(sender: mpsc::UnboundedSender<GroupEvent>) -> Events {
        Events(sender)
    }

    pub fn emit(&self, event: GroupEvent) {
        // The receiver is gone only while the member is being dropped.
        let _ = self.0.send(event);
    }

    /// Announces a revocation; the receiver completes when the application releases it.
    pub fn revoked(&self, partitions: &PartitionSet, lost: bool) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.emit(GroupEvent::Revoked {
            partitions: to_topic_partitions(partitions).unwrap_or_default(),
            lost,
            done: Revocation { _release: tx },
        });
        rx
    }
}

/// One protocol's membership, as [`run`] drives it.
pub(super) trait Membership {
    fn group_id(&self) -> &str;
    fn events(&self) -> &Events;
    /// Joins, owns, heartbeats, rebalances... until a fatal error.
    async fn membership_loop(&self) -> Result<Infallible>;
    /// Leaves the group as the configuration says (on close).
    async fn leave(&self) -> Result<()>;
    /// Ends the membership after a fatal error: what the application owned, now lost.
    fn fail_now(&self) -> PartitionSet;
}

/// The member's task: `close` carries the handle's request to leave and where to answer it.
pub(super) async fn run<M: Membership>(
    member: M,
    close: oneshot::Receiver<oneshot::Sender<Result<()>>>,
) {
    let outcome: std::result::Result<_, Result<Infallible>> = tokio::select! {
        r = member.membership_loop() => Err(r),
        reply = close => Ok(reply),
    };
    match outcome {
        Ok(Ok(reply)) => {
            let r = member.leave().await;
            let _ = reply.send(r);
        }
        // The handle is gone; Drop aborts this task anyway.
        Ok(Err(_)) => {}
        Err(Err(error)) => fail(&member, error),
        Err(Ok(never)) => match never {},
    }
}

fn fail<M: Membership>(member: &M, error: Error) {
    let lost = member.fail_now();
    if !lost.is_empty() {
        member.events().revoked(&lost, true);
    }
    tracing::warn!(group = member.group_id(), %error, "consumer group membership failed");
    member.events().emit(GroupEvent::Failed(error));
}
