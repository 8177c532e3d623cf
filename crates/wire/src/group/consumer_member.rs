//! The async driver of a KIP-848 member: sends the heartbeats [`ConsumerMembership`] asks
//! for, resolves topic ids through Metadata, and turns reconciliations into
//! [`GroupEvent`]s: `Revoked` for only the partitions that move (the member waits for the
//! application's `done` before it acknowledges), `Assigned` for only the new ones (and, with
//! no partitions, whenever the member epoch moves on, so commits carry the current epoch).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use tokio::sync::oneshot;

use super::driver::{Events, Membership};
use super::heartbeat::{
    ConsumerMembership, HeartbeatPlan, HeartbeatReply, HeartbeatStep, IdPartitions,
};
use super::{
    Generation, GroupEvent, PartitionSet, Shared, group_id_field, millis_i32, str_bytes,
    to_topic_partitions, with_principal,
};
use crate::Connection;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::group::coordinator::is_coordinator_error;

/// What a heartbeat round ended in, for the loop that sent it.
enum Round {
    /// Nothing for the caller to do.
    Quiet,
    /// The target changed: reconcile.
    Reconcile,
    /// The membership was lost (already announced as a lost revocation).
    Lost,
}

pub(super) struct ConsumerDriver {
    pub shared: Arc<Shared>,
    pub membership: Arc<Mutex<ConsumerMembership>>,
    pub events: Events,
}

impl Membership for ConsumerDriver {
    fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    fn events(&self) -> &Events {
        &self.events
    }

    async fn membership_loop(&self) -> Result<std::convert::Infallible> {
        ConsumerDriver::membership_loop(self).await
    }

    async fn leave(&self) -> Result<()> {
        ConsumerDriver::leave(self).await
    }

    fn fail_now(&self) -> PartitionSet {
        self.m().fail_now()
    }
}

impl ConsumerDriver {
    fn m(&self) -> MutexGuard<'_, ConsumerMembership> {
        self.membership
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, event: GroupEvent) {
        self.events.emit(event);
    }

    fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    fn emit_revoked(&self, partitions: &PartitionSet, lost: bool) -> oneshot::Receiver<()> {
        self.events.revoked(partitions, lost)
    }

    /// Heartbeat, reconcile, heartbeat... until a fatal error.
    async fn membership_loop(&self) -> Result<std::convert::Infallible> {
        let mut backoff = Backoff::for_retries(self.shared.client.config());
        let mut announced = self.m().generation();
        loop {
            match self.round(&mut backoff).await? {
                Round::Reconcile => self.reconcile(&mut backoff, &mut announced).await?,
                Round::Quiet | Round::Lost => {}
            }
            // The epoch moves on after each acknowledged reconciliation: tell the
            // application, whose commits must carry it.
            let now = self.m().generation();
            if now != announced
                && let Some(generation) = now.clone()
            {
                self.emit(GroupEvent::Assigned {
                    generation,
                    partitions: Vec::new(),
                });
            }
            announced = now;
        }
    }

    /// Waits until the next heartbeat is due, sends it and applies the answer.
    async fn round(&self, backoff: &mut Backoff) -> Result<Round> {
        let due = self.m().next_heartbeat();
        let at = due.unwrap_or_else(|| Instant::now() + self.m().heartbeat_interval());
        tokio::time::sleep_until(at.into()).await;
        // The broker's session timeout is not known here; never give up within three of its
        // heartbeat intervals, whatever the local setting.
        let session = self
            .shared
            .config
            .session_timeout
            .max(self.m().heartbeat_interval() * 3);
        let expired = self.m().expire_if_silent(Instant::now(), session);
        if let Some(lost) = expired {
            tracing::warn!(
                group = self.group_id(),
                "no heartbeat reached the coordinator within the session timeout; partitions lost, rejoining"
            );
            self.emit_revoked(&lost, true);
            return Ok(Round::Lost);
        }
        let plan = self.m().heartbeat_request(Instant::now());
        let conn = match self.shared.coordinator.get().await {
            Ok(c) => c,
            Err(e) => return self.transport_error(e, backoff).map(|()| Round::Quiet),
        };
        let reply = match send_heartbeat(&conn, self.group_id(), &plan).await {
            Ok(r) => r,
            Err(e) => return self.transport_error(e, backoff).map(|()| Round::Quiet),
        };
        let step = self.m().on_response(Instant::now(), reply);
        match step {
            HeartbeatStep::Continue => {
                backoff.reset();
                Ok(Round::Quiet)
            }
            HeartbeatStep::Reconcile => {
                backoff.reset();
                Ok(Round::Reconcile)
            }
            HeartbeatStep::Lost { partitions } => {
                tracing::warn!(
                    group = self.group_id(),
                    "the coordinator fenced this member; partitions lost, rejoining"
                );
                if !partitions.is_empty() {
                    self.emit_revoked(&partitions, true);
                }
                Ok(Round::Lost)
            }
            HeartbeatStep::FindCoordinator => {
                self.shared.coordinator.invalidate();
                self.retry_later(backoff);
                Ok(Round::Quiet)
            }
            HeartbeatStep::Backoff => {
                self.retry_later(backoff);
                Ok(Round::Quiet)
            }
            HeartbeatStep::Fatal { partitions, error } => {
                if !partitions.is_empty() {
                    self.emit_revoked(&partitions, true);
                }
                Err(with_principal(error, &conn))
            }
        }
    }

    fn retry_later(&self, backoff: &mut Backoff) {
        let at = Instant::now() + backoff.next_delay();
        self.m().request_failed(at);
    }

    /// A heartbeat got no answer: retriable errors retry after the backoff, others end the
    /// membership.
    fn transport_error(&self, e: Error, backoff: &mut Backoff) -> Result<()> {
        self.m().request_failed(Instant::now());
        if !e.is_retriable() {
            return Err(e);
        }
        if is_coordinator_error(&e) {
            self.shared.coordinator.invalidate();
        }
        tracing::debug!(group = self.group_id(), error = %e, "consumer group heartbeat failed; retrying");
        self.retry_later(backoff);
        Ok(())
    }

    /// Reconciles the target: revoke what moves (heartbeating while the application drains
    /// it), then assign what is new, until nothing is pending.
    /// `announced` is the generation of the last `Assigned` event.
    async fn reconcile(
        &self,
        backoff: &mut Backoff,
        announced: &mut Option<Generation>,
    ) -> Result<()> {
        loop {
            if !self.m().unresolved_topics().is_empty() {
                self.resolve_topic_ids().await;
            }
            let Some(rec) = self.m().reconcile() else {
                return Ok(());
            };
            let epoch = self.m().epoch();
            tracing::info!(
                group = self.group_id(),
                epoch,
                revoke = rec.revoke.len(),
                assign = rec.assign.len(),
                "reconciling the consumer group assignment"
            );
            if !rec.revoke.is_empty() && !self.revoke(&rec.revoke, backoff).await? {
                // Fenced while revoking: everything was announced lost.
                return Ok(());
            }
            let generation = self.m().finish_reconcile(&rec, Instant::now());
            let Some(generation) = generation else {
                return Ok(());
            };
            *announced = Some(generation.clone());
            self.emit(GroupEvent::Assigned {
                generation,
                partitions: to_topic_partitions(&rec.assign)?,
            });
            if !self.m().has_pending_target() {
                return Ok(());
            }
        }
    }

    /// Announces the revocation of `partitions` and keeps heartbeating until the application
    /// releases them. Returns false if the membership was lost meanwhile.
    async fn revoke(&self, partitions: &PartitionSet, backoff: &mut Backoff) -> Result<bool> {
        let mut done = self.emit_revoked(partitions, false);
        // The coordinator fences a member that does not acknowledge within the rebalance
        // timeout; finish a little earlier even if the application is late.
        let cfg = &self.shared.config;
        let wait = cfg
            .rebalance_timeout
            .checked_sub(self.m().heartbeat_interval() * 2)
            .filter(|d| !d.is_zero())
            .unwrap_or(cfg.rebalance_timeout);
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let due = self.m().next_heartbeat();
            let at = due.unwrap_or_else(|| Instant::now() + self.m().heartbeat_interval());
            tokio::select! {
                _ = &mut done => return Ok(true),
                () = &mut deadline => {
                    tracing::warn!(
                        group = self.group_id(),
                        "the application did not release revoked partitions within the rebalance timeout; acknowledging anyway"
                    );
                    return Ok(true);
                }
                () = tokio::time::sleep_until(at.into()) => {}
            }
            // Not raced against `done`: a heartbeat in flight gets its answer.
            if let Round::Lost = self.round(backoff).await? {
                return Ok(false);
            }
        }
    }

    /// Learns the names of the subscribed topics' ids from Metadata.
    async fn resolve_topic_ids(&self) {
        let topics = self.shared.config.topics.clone();
        match self.shared.client.metadata(Some(&topics)).await {
            Ok(md) => {
                let names: Vec<_> = md
                    .topics
                    .values()
                    .filter_map(|t| t.id.map(|id| (id.to_uuid(), t.name.to_string())))
                    .collect();
                self.m().learn_names(names);
            }
            Err(e) => {
                tracing::debug!(group = self.group_id(), error = %e, "metadata for topic ids failed; retrying at the next heartbeat");
            }
        }
    }

    /// Leaves the group: epoch -1 (partitions move at once), or -2 for a static member that
    /// keeps its assignment for a restart.
    async fn leave(&self) -> Result<()> {
        let for_good = self.shared.config.leaves_on_close();
        let Some(plan) = self.m().leave(for_good) else {
            return Ok(());
        };
        if !for_good && plan.instance_id.is_none() {
            // A dynamic member told not to leave just stops; the coordinator expires it.
            return Ok(());
        }
        let group_id = self.group_id();
        let plan = &plan;
        let reply = self
            .shared
            .coordinator
            .call(
                "ConsumerGroupHeartbeat",
                self.shared.client.config().request_timeout(),
                |conn| async move { send_heartbeat(&conn, group_id, plan).await },
            )
            .await?;
        match reply.error {
            None | Some(ResponseError::UnknownMemberId | ResponseError::FencedMemberEpoch) => {}
            Some(code) => {
                return Err(Error::Broker {
                    code,
                    context: format!(
                        "leaving consumer group '{group_id}' (member epoch {})",
                        plan.member_epoch
                    ),
                });
            }
        }
        tracing::info!(group = group_id, member = %plan.member_id, epoch = plan.member_epoch, "left consumer group");
        Ok(())
    }
}

/// Generates the member id (ConsumerGroupHeartbeat v1 leaves it to the client), like Java's
/// `Uuid.randomUuid().toString()`: 16 random bytes, base64url.
pub(super) fn new_member_id() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn to_request_partitions(owned: &IdPartitions) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(*id)
                .with_partitions(ps.iter().copied().collect())
        })
        .collect()
}

async fn send_heartbeat(
    conn: &Connection,
    group_id: &str,
    plan: &HeartbeatPlan,
) -> Result<HeartbeatReply> {
    let version = conn.pick_version::<ConsumerGroupHeartbeatRequest>(0..=1)?;
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = group_id_field(group_id);
    // v0 has the coordinator generate the id on join; v1 takes the client's.
    req.member_id = if version == 0 && plan.member_epoch == 0 {
        str_bytes("")
    } else {
        str_bytes(&plan.member_id)
    };
    req.member_epoch = plan.member_epoch;
    req.instance_id = plan.instance_id.as_deref().map(str_bytes);
    if plan.member_epoch >= 0 {
        req.rebalance_timeout_ms = millis_i32(plan.rebalance_timeout);
        req.subscribed_topic_names = Some(
            plan.topics
                .iter()
                .map(|t| TopicName(str_bytes(t)))
                .collect(),
        );
        req.server_assignor = plan.server_assignor.as_deref().map(str_bytes);
        req.topic_partitions = Some(to_request_partitions(&plan.owned));
    } else {
        req.rebalance_timeout_ms = -1;
    }
    let resp = conn.send(req, version).await?;
    Ok(HeartbeatReply {
        error: ResponseError::try_from_code(resp.error_code),
        error_message: resp.error_message.map(|m| m.as_str().to_owned()),
        member_id: resp.member_id.map(|m| m.as_str().to_owned()),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.map(|a| {
            let mut out: IdPartitions = BTreeMap::new();
            for t in a.topic_partitions {
                out.entry(t.topic_id).or_default().extend(t.partitions);
            }
            out
        }),
    })
}

/// Whether the group coordinator runs the generally available consumer group protocol:
/// ConsumerGroupHeartbeat v1 (Kafka 4.0+). Kafka 3.7 to 3.9 advertise v0, the early-access
/// and preview versions, which this client does not use unless told to.
pub(super) fn supports_consumer_protocol(conn: &Connection) -> bool {
    conn.supported_versions(kafka_protocol::messages::ApiKey::ConsumerGroupHeartbeat)
        .is_some_and(|v| *v.end() >= 1)
}
