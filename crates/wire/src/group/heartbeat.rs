//! KIP-848 membership (the "consumer" group protocol), without I/O.
//!
//! The coordinator computes every member's assignment (a server-side assignor) and tells each
//! member its target in ConsumerGroupHeartbeat responses. The member reconciles: it gives up
//! only what it owns but is no longer in its target, takes what is new, and acknowledges by
//! listing what it owns in its next heartbeat. There is no group-wide barrier: a member that
//! keeps its partitions keeps working through a rebalance.
//!
//! The member epoch is the generation: 0 joins, the coordinator answers with the member's
//! epoch, which goes into every heartbeat and into offset commits. Leaving sends -1 (the
//! partitions move at once) or, for a static member coming back, -2 (the coordinator keeps its
//! assignment until the session timeout, so a restart moves nothing).
//!
//! The async driver (`consumer_member.rs`) sends what [`ConsumerMembership::heartbeat_request`]
//! says, feeds the answers to [`ConsumerMembership::on_response`], resolves topic ids to names
//! and runs the revocations the application must do. Time is passed in, so every transition is
//! unit-testable on a virtual clock.
//!
//! ```text
//! Joining --epoch>0--> Stable --new target--> Reconciling --finish_reconcile--> Stable (ack due)
//!    ^                   |                        |
//!    +--FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID (partitions lost, epoch 0)--+
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::assignor::PartitionSet;
use super::follow_up::FollowUps;
use super::{Generation, group_authorization_error, group_broker_error};
use crate::error::Error;

/// The epoch a member joins with.
pub(crate) const JOIN_EPOCH: i32 = 0;
/// The epoch that leaves the group: the member's partitions are reassigned at once.
pub(crate) const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with when it will come back (a restart): the coordinator
/// keeps its assignment until the session timeout.
pub(crate) const STATIC_LEAVE_EPOCH: i32 = -2;

/// Partitions by topic id, as the heartbeat carries them.
pub(crate) type IdPartitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// Where the member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Sends epoch 0 (first join, or after being fenced).
    Joining,
    /// Owns what it acknowledged; heartbeating.
    Stable,
    /// The application is giving up revoked partitions; heartbeats go on meanwhile.
    Reconciling,
    /// A fatal error ended the membership.
    Failed,
    /// Left the group.
    Left,
}

/// What to send in the next ConsumerGroupHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatPlan {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rebalance_timeout: Duration,
    pub topics: Vec<String>,
    pub server_assignor: Option<String>,
    /// What the member owns (its acknowledgement of the assignment).
    pub owned: IdPartitions,
}

/// The ConsumerGroupHeartbeat response fields the state machine looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeartbeatReply {
    pub error: Option<ResponseError>,
    pub error_message: Option<String>,
    /// Set by the coordinator on the first response of a v0 heartbeat.
    pub member_id: Option<String>,
    pub member_epoch: i32,
    /// Zero or negative: keep the current interval.
    pub heartbeat_interval_ms: i32,
    /// The full target assignment, or `None` when it did not change.
    pub assignment: Option<IdPartitions>,
}

/// What the driver does after a response.
#[derive(Debug)]
pub(crate) enum HeartbeatStep {
    /// Nothing to do before the next heartbeat.
    Continue,
    /// The target differs from what the member owns: resolve the topic ids that
    /// [`ConsumerMembership::unresolved_topics`] lists, then [`ConsumerMembership::reconcile`].
    Reconcile,
    /// The coordinator fenced this member or forgot it: `partitions` are lost (commits for them
    /// fail); the member rejoins with epoch 0.
    Lost { partitions: PartitionSet },
    /// The coordinator moved: look it up again, then retry after the backoff.
    FindCoordinator,
    /// A retriable error: retry after the backoff.
    Backoff,
    /// The membership cannot continue; `partitions` are lost.
    Fatal {
        partitions: PartitionSet,
        error: Error,
    },
}

/// One reconciliation: give up `revoke` (only what moves), then take `assign`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reconciliation {
    pub revoke: PartitionSet,
    pub assign: PartitionSet,
}

/// One member's view of its KIP-848 consumer group.
#[derive(Debug)]
pub(crate) struct ConsumerMembership {
    group_id: String,
    instance_id: Option<String>,
    topics: Vec<String>,
    server_assignor: Option<String>,
    rebalance_timeout: Duration,
    member_id: String,
    epoch: i32,
    /// The first epoch of the current membership: commits made with an older one belong to a
    /// membership that was fenced since.
    joined_epoch: i32,
    state: State,
    interval: Duration,
    /// What the member works on (and acknowledges).
    owned: IdPartitions,
    /// Names of the topic ids seen so far.
    names: BTreeMap<Uuid, String>,
    /// The latest target the coordinator sent that is not reconciled yet.
    target: Option<IdPartitions>,
    next_at: Instant,
    in_flight: Option<Instant>,
    /// When the last heartbeat the coordinator answered without error was sent.
    last_ok: Instant,
    /// Quick heartbeats after a change of epoch or assignment (`follow_up.rs`).
    follow_up: FollowUps,
}

impl ConsumerMembership {
    /// A member about to join. `member_id` is generated by the client (ConsumerGroupHeartbeat
    /// v1); `interval` is the heartbeat interval until the coordinator sends its own.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        group_id: String,
        instance_id: Option<String>,
        mut topics: Vec<String>,
        server_assignor: Option<String>,
        rebalance_timeout: Duration,
        member_id: String,
        interval: Duration,
        now: Instant,
    ) -> ConsumerMembership {
        topics.sort();
        topics.dedup();
        ConsumerMembership {
            group_id,
            instance_id,
            topics,
            server_assignor,
            rebalance_timeout,
            member_id,
            epoch: JOIN_EPOCH,
            joined_epoch: JOIN_EPOCH,
            state: State::Joining,
            interval,
            owned: IdPartitions::new(),
            names: BTreeMap::new(),
            target: None,
            next_at: now,
            in_flight: None,
            last_ok: now,
            follow_up: FollowUps::default(),
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn heartbeat_interval(&self) -> Duration {
        self.interval
    }

    /// What the member owns, by name.
    pub fn owned(&self) -> PartitionSet {
        self.by_name(&self.owned)
    }

    /// The generation commits carry (member epoch as generation id), while the member owns
    /// partitions in a membership.
    pub fn generation(&self) -> Option<Generation> {
        matches!(self.state, State::Stable | State::Reconciling).then(|| Generation {
            generation_id: self.epoch,
            member_id: self.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
        })
    }

    /// When the next heartbeat is due; `None` once the membership ended. The driver sends one
    /// heartbeat at a time.
    pub fn next_heartbeat(&self) -> Option<Instant> {
        match self.state {
            State::Failed | State::Left => None,
            _ => Some(self.next_at),
        }
    }

    /// The next heartbeat; remembers when it was sent.
    pub fn heartbeat_request(&mut self, now: Instant) -> HeartbeatPlan {
        self.in_flight = Some(now);
        HeartbeatPlan {
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            instance_id: self.instance_id.clone(),
            rebalance_timeout: self.rebalance_timeout,
            topics: self.topics.clone(),
            server_assignor: self.server_assignor.clone(),
            owned: self.owned.clone(),
        }
    }

    /// The heartbeat got no answer (connection error): retry at `retry_at`.
    pub fn request_failed(&mut self, retry_at: Instant) {
        self.in_flight = None;
        self.next_at = retry_at;
    }

    /// The coordinator has not accepted a heartbeat for `session_timeout`: it has certainly
    /// removed this member. Returns the partitions lost (the member rejoins with epoch 0).
    pub fn expire_if_silent(
        &mut self,
        now: Instant,
        session_timeout: Duration,
    ) -> Option<PartitionSet> {
        let silent = now.saturating_duration_since(self.last_ok) > session_timeout;
        (silent && matches!(self.state, State::Stable | State::Reconciling)).then(|| {
            self.last_ok = now;
            self.fence(now)
        })
    }

    pub fn on_response(&mut self, now: Instant, reply: HeartbeatReply) -> HeartbeatStep {
        let sent = self.in_flight.take().unwrap_or(now);
        if matches!(self.state, State::Failed | State::Left) {
            return HeartbeatStep::Continue;
        }
        if let Some(error) = reply.error {
            return self.on_error(now, error, reply.error_message);
        }
        if let Some(id) = reply.member_id.filter(|id| !id.is_empty()) {
            self.member_id = id;
        }
        if let Ok(ms) = u64::try_from(reply.heartbeat_interval_ms)
            && ms > 0
        {
            self.interval = Duration::from_millis(ms);
        }
        if self.state == State::Joining {
            self.state = State::Stable;
            self.joined_epoch = reply.member_epoch;
        }
        let changed = self.epoch != reply.member_epoch
            || reply.assignment.as_ref().is_some_and(|a| *a != self.owned);
        if changed {
            self.follow_up.changed(sent);
        }
        let wait = self.follow_up.wait(sent, self.interval);
        self.epoch = reply.member_epoch;
        self.last_ok = sent;
        self.next_at = sent + wait;
        if let Some(target) = reply.assignment {
            self.target = Some(target);
        }
        match &self.target {
            Some(t) if *t == self.owned => {
                self.target = None;
                HeartbeatStep::Continue
            }
            Some(_) if self.state == State::Stable => HeartbeatStep::Reconcile,
            // Reconciling already: the driver picks the new target up when it finishes.
            _ => HeartbeatStep::Continue,
        }
    }

    fn on_error(
        &mut self,
        now: Instant,
        error: ResponseError,
        message: Option<String>,
    ) -> HeartbeatStep {
        match error {
            // KIP-848: give everything up and rejoin with epoch 0, keeping the member id.
            ResponseError::FencedMemberEpoch | ResponseError::UnknownMemberId => {
                HeartbeatStep::Lost {
                    partitions: self.fence(now),
                }
            }
            ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable => {
                HeartbeatStep::FindCoordinator
            }
            // The previous process of this static member has not left (it crashed): the
            // coordinator releases the instance id at its session timeout. Keep trying.
            ResponseError::UnreleasedInstanceId => HeartbeatStep::Backoff,
            e if e.is_retriable() => HeartbeatStep::Backoff,
            other => {
                let error = self.fatal_error(other, message);
                let partitions = self.owned();
                self.owned.clear();
                self.target = None;
                self.state = State::Failed;
                HeartbeatStep::Fatal { partitions, error }
            }
        }
    }

    /// Drops everything and gets ready to rejoin with epoch 0 at once.
    fn fence(&mut self, now: Instant) -> PartitionSet {
        let lost = self.owned();
        self.owned.clear();
        self.target = None;
        self.epoch = JOIN_EPOCH;
        self.state = State::Joining;
        self.next_at = now;
        lost
    }

    fn fatal_error(&self, code: ResponseError, message: Option<String>) -> Error {
        let g = &self.group_id;
        let detail = message.map(|m| format!(" ({m})")).unwrap_or_default();
        let context = match code {
            ResponseError::GroupAuthorizationFailed => return group_authorization_error(g),
            ResponseError::FencedInstanceId => format!(
                "ConsumerGroupHeartbeat: another member joined group '{g}' with the same group.instance.id '{}'; this member is fenced. Give every process its own instance id",
                self.instance_id.as_deref().unwrap_or("")
            ),
            ResponseError::UnsupportedAssignor => format!(
                "ConsumerGroupHeartbeat: the coordinator of group '{g}' has no server-side assignor '{}'{detail}; use one of the broker's group.consumer.assignors (uniform, range) or unset it",
                self.server_assignor.as_deref().unwrap_or("")
            ),
            ResponseError::GroupMaxSizeReached => format!(
                "ConsumerGroupHeartbeat: group '{g}' already has the broker's group.consumer.max.size members{detail}; use fewer members or raise the limit"
            ),
            ResponseError::InvalidGroupId => format!(
                "ConsumerGroupHeartbeat: '{g}' is not a valid group id{detail}; set a non-empty group id"
            ),
            ResponseError::UnsupportedVersion | ResponseError::InvalidRequest => format!(
                "ConsumerGroupHeartbeat for group '{g}' was refused{detail}; the broker may not run the consumer group protocol: use the classic protocol"
            ),
            _ => format!("ConsumerGroupHeartbeat for group '{g}' failed{detail}"),
        };
        group_broker_error(code, context)
    }

    /// Topic ids of the pending target whose names are not known yet.
    pub fn unresolved_topics(&self) -> Vec<Uuid> {
        self.target
            .iter()
            .flat_map(|t| t.keys())
            .filter(|id| !self.names.contains_key(id))
            .copied()
            .collect()
    }

    /// Learns topic names (from Metadata).
    pub fn learn_names(&mut self, names: impl IntoIterator<Item = (Uuid, String)>) {
        self.names.extend(names);
    }

    /// Starts reconciling the pending target: what to revoke (owned, not in the target) and
    /// what to assign (in the target, not owned, name known). Partitions of topics whose names
    /// are still unknown stay pending. `None` if there is nothing to do now.
    pub fn reconcile(&mut self) -> Option<Reconciliation> {
        if self.state != State::Stable {
            return None;
        }
        let target = self.target.as_ref()?;
        let resolved: IdPartitions = target
            .iter()
            .filter(|(id, _)| self.names.contains_key(id))
            .map(|(id, ps)| (*id, ps.clone()))
            .collect();
        let revoke = self.by_name(&minus(&self.owned, target));
        let assign = self.by_name(&minus(&resolved, &self.owned));
        if revoke.is_empty() && assign.is_empty() {
            return None;
        }
        self.state = State::Reconciling;
        Some(Reconciliation { revoke, assign })
    }

    /// The application released the revoked partitions and started the assigned ones: own
    /// the new set and acknowledge it with a heartbeat now. Returns the generation to commit
    /// with. A membership lost meanwhile (fenced) owns nothing and stays as it is.
    pub fn finish_reconcile(&mut self, done: &Reconciliation, now: Instant) -> Option<Generation> {
        if self.state != State::Reconciling {
            return None;
        }
        let ids: BTreeMap<&str, Uuid> =
            self.names.iter().map(|(id, n)| (n.as_str(), *id)).collect();
        for (topic, p) in done.revoke.iter() {
            if let Some(id) = ids.get(topic)
                && let Some(ps) = self.owned.get_mut(id)
            {
                ps.remove(&p);
            }
        }
        for (topic, p) in done.assign.iter() {
            if let Some(id) = ids.get(topic) {
                self.owned.entry(*id).or_default().insert(p);
            }
        }
        self.owned.retain(|_, ps| !ps.is_empty());
        if self.target.as_ref() == Some(&self.owned) {
            self.target = None;
        }
        self.state = State::Stable;
        // The coordinator waits for the acknowledgement before it bumps the epoch or hands
        // the revoked partitions to their next owner: send it now, not an interval later.
        self.next_at = now;
        self.generation()
    }

    /// Whether a target is still waiting for reconciliation (e.g. a newer one arrived while
    /// revoking, or a topic name was unknown).
    pub fn has_pending_target(&self) -> bool {
        self.state == State::Stable && self.target.is_some()
    }

    /// Checks a commit made with `generation` before sending it and returns the generation to
    /// send: the epoch moves on with every reconciliation, so a commit of this membership goes
    /// out with the current epoch; one of an older membership (fenced since) is refused.
    pub fn check_commit(&self, generation: &Generation) -> crate::error::Result<Generation> {
        match self.generation() {
            Some(current)
                if generation.member_id == current.member_id
                    && generation.generation_id >= self.joined_epoch =>
            {
                Ok(current)
            }
            _ => Err(group_broker_error(
                ResponseError::FencedMemberEpoch,
                format!(
                    "OffsetCommit for group '{}' with member epoch {} of member '{}' refused before sending: the member was fenced or left since (it is {:?} at epoch {}). \
                     The partitions may belong to another member now: drop uncommitted progress and re-read the committed offsets after the next assignment",
                    self.group_id,
                    generation.generation_id,
                    generation.member_id,
                    self.state,
                    self.epoch
                ),
            )),
        }
    }

    /// Leaves the group: the heartbeat to send (epoch -1, or -2 for a static member that
    /// keeps its assignment for a restart), or `None` if the member never joined.
    pub fn leave(&mut self, for_good: bool) -> Option<HeartbeatPlan> {
        let joined = !matches!(self.state, State::Joining | State::Failed | State::Left);
        let epoch = if for_good || self.instance_id.is_none() {
            LEAVE_EPOCH
        } else {
            STATIC_LEAVE_EPOCH
        };
        self.owned.clear();
        self.target = None;
        self.state = State::Left;
        joined.then(|| HeartbeatPlan {
            member_id: self.member_id.clone(),
            member_epoch: epoch,
            instance_id: self.instance_id.clone(),
            rebalance_timeout: self.rebalance_timeout,
            topics: Vec::new(),
            server_assignor: None,
            owned: IdPartitions::new(),
        })
    }

    /// The driver gave up (a fatal error outside the heartbeat): drops everything owned.
    pub fn fail_now(&mut self) -> PartitionSet {
        let lost = self.owned();
        self.owned.clear();
        self.target = None;
        self.state = State::Failed;
        lost
    }

    fn by_name(&self, parts: &IdPartitions) -> PartitionSet {
        let mut out = PartitionSet::new();
        for (id, ps) in parts {
            if let Some(name) = self.names.get(id) {
                for p in ps {
                    out.insert(name, *p);
                }
            }
        }
        out
    }
}

/// `a` without the partitions in `b`.
fn minus(a: &IdPartitions, b: &IdPartitions) -> IdPartitions {
    a.iter()
        .map(|(id, ps)| {
            let keep: BTreeSet<i32> = match b.get(id) {
                Some(other) => ps.difference(other).copied().collect(),
                None => ps.clone(),
            };
            (*id, keep)
        })
        .filter(|(_, ps)| !ps.is_empty())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const T: Uuid = Uuid::from_u128(1);
    const U: Uuid = Uuid::from_u128(2);

    fn member(now: Instant, instance: Option<&str>) -> ConsumerMembership {
        let mut m = ConsumerMembership::new(
            "g".into(),
            instance.map(str::to_owned),
            vec!["t".into(), "u".into()],
            Some("uniform".into()),
            Duration::from_secs(60),
            "m-1".into(),
            Duration::from_secs(3),
            now,
        );
        m.learn_names([(T, "t".to_owned()), (U, "u".to_owned())]);
        m
    }

    fn ids(parts: &[(Uuid, i32)]) -> IdPartitions {
        let mut out = IdPartitions::new();
        for (id, p) in parts {
            out.entry(*id).or_default().insert(*p);
        }
        out
    }

    fn names(parts: &[(&str, i32)]) -> PartitionSet {
        parts.iter().copied().collect()
    }

    fn ok(epoch: i32, assignment: Option<IdPartitions>) -> HeartbeatReply {
        HeartbeatReply {
            member_epoch: epoch,
            heartbeat_interval_ms: 5000,
            assignment,
            ..HeartbeatReply::default()
        }
    }

    /// Joins and owns `parts` at `epoch`.
    fn stable(m: &mut ConsumerMembership, now: Instant, epoch: i32, parts: &[(Uuid, i32)]) {
        m.heartbeat_request(now);
        assert!(matches!(
            m.on_response(now, ok(epoch, Some(ids(parts)))),
            HeartbeatStep::Reconcile
        ));
        let rec = m.reconcile().unwrap();
        assert!(rec.revoke.is_empty());
        m.finish_reconcile(&rec, now).unwrap();
        assert_eq!(m.state(), State::Stable);
    }

    #[test]
    fn join_sends_epoch_zero_with_subscription_then_follows_the_interval() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        assert_eq!(m.next_heartbeat(), Some(t0));
        let plan = m.heartbeat_request(t0);
        assert_eq!(plan.member_epoch, 0);
        assert_eq!(plan.member_id, "m-1");
        assert_eq!(plan.topics, ["t", "u"]);
        assert_eq!(plan.server_assignor.as_deref(), Some("uniform"));
        assert!(plan.owned.is_empty());
        assert!(m.generation().is_none());
        let step = m.on_response(t0, ok(3, Some(ids(&[(T, 0), (T, 1)]))));
        assert!(matches!(step, HeartbeatStep::Reconcile));
        let rec = m.reconcile().unwrap();
        assert_eq!(rec.assign, names(&[("t", 0), ("t", 1)]));
        assert!(rec.revoke.is_empty());
        // Not owned before the application has started them.
        assert!(m.owned().is_empty());
        let t1 = t0 + Duration::from_millis(20);
        let g = m.finish_reconcile(&rec, t1).unwrap();
        assert_eq!(g.generation_id, 3);
        assert_eq!(m.owned(), names(&[("t", 0), ("t", 1)]));
        assert_eq!(m.next_heartbeat(), Some(t1), "acknowledge at once");
        let plan = m.heartbeat_request(t1);
        assert_eq!(plan.member_epoch, 3);
        assert_eq!(plan.owned, ids(&[(T, 0), (T, 1)]));
        assert!(matches!(
            m.on_response(t1, ok(3, None)),
            HeartbeatStep::Continue
        ));
        assert_eq!(m.heartbeat_interval(), Duration::from_secs(5));
        // Follow-ups after the change (the join), then the interval.
        assert_eq!(m.next_heartbeat(), Some(t1 + Duration::from_millis(500)));
        // The join's answer was at t0: follow-ups until 6 s after it, then the interval.
        let mut at = t1 + Duration::from_millis(500);
        for gap in [1000, 1000, 1000, 1000, 1000, 1000, 5000, 5000] {
            m.heartbeat_request(at);
            assert!(matches!(
                m.on_response(at, ok(3, None)),
                HeartbeatStep::Continue
            ));
            assert_eq!(m.next_heartbeat(), Some(at + Duration::from_millis(gap)));
            at += Duration::from_millis(gap);
        }
    }

    #[test]
    fn a_new_epoch_or_assignment_brings_the_next_heartbeats_closer() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        stable(&mut m, t0, 3, &[(T, 0), (T, 1)]);
        // Follow-ups for one interval (and a second) after the join, then the interval.
        let mut at = t0;
        let mut follow_ups = 0;
        while m.next_heartbeat() != Some(at + Duration::from_secs(5)) {
            at = m.next_heartbeat().unwrap();
            m.heartbeat_request(at);
            m.on_response(at, ok(3, None));
            follow_ups += 1;
            assert!(follow_ups < 10, "follow-ups end after an interval");
        }
        assert!(at <= t0 + Duration::from_secs(7), "{:?}", at - t0);
        // Another member joined: the epoch moves on and partition 1 is revoked. The member
        // asks again soon, because the partitions it is still to get are released by others.
        let t1 = at + Duration::from_secs(5);
        m.heartbeat_request(t1);
        let step = m.on_response(t1, ok(4, Some(ids(&[(T, 0)]))));
        assert!(matches!(step, HeartbeatStep::Reconcile));
        assert_eq!(m.next_heartbeat(), Some(t1 + Duration::from_millis(250)));
        // Never sooner than the coordinator's own interval, when that is shorter.
        let t2 = t1 + Duration::from_secs(1);
        let rec = m.reconcile().unwrap();
        m.finish_reconcile(&rec, t2);
        m.heartbeat_request(t2);
        let short = HeartbeatReply {
            heartbeat_interval_ms: 100,
            ..ok(5, None)
        };
        m.on_response(t2, short);
        assert_eq!(m.next_heartbeat(), Some(t2 + Duration::from_millis(100)));
    }

    #[test]
    fn a_new_member_takes_some_partitions_only_those_are_revoked() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        stable(&mut m, t0, 1, &[(T, 0), (T, 1), (T, 2), (T, 3)]);
        // Another member joined: the coordinator keeps the epoch and drops 2 and 3.
        let t1 = t0 + Duration::from_secs(5);
        m.heartbeat_request(t1);
        let step = m.on_response(t1, ok(1, Some(ids(&[(T, 0), (T, 1)]))));
        assert!(matches!(step, HeartbeatStep::Reconcile));
        let rec = m.reconcile().unwrap();
        assert_eq!(rec.revoke, names(&[("t", 2), ("t", 3)]));
        assert!(rec.assign.is_empty());
        assert_eq!(m.state(), State::Reconciling);
        // While revoking, commits of the current epoch work, heartbeats still list 2 and 3.
        let g = m.generation().unwrap();
        assert_eq!(m.check_commit(&g).unwrap().generation_id, 1);
        let t2 = t1 + Duration::from_secs(5);
        assert_eq!(m.heartbeat_request(t2).owned.len(), 1);
        assert!(matches!(
            m.on_response(t2, ok(1, None)),
            HeartbeatStep::Continue
        ));
        let g = m.finish_reconcile(&rec, t2).unwrap();
        assert_eq!(g.generation_id, 1);
        assert_eq!(m.owned(), names(&[("t", 0), ("t", 1)]));
        let plan = m.heartbeat_request(t2);
        assert_eq!(plan.owned, ids(&[(T, 0), (T, 1)]));
        // The coordinator bumps the epoch once acknowledged.
        assert!(matches!(
            m.on_response(t2, ok(2, None)),
            HeartbeatStep::Continue
        ));
        assert_eq!(m.generation().unwrap().generation_id, 2);
        // A commit made with the previous epoch of this membership goes out with the new one.
        assert_eq!(m.check_commit(&g).unwrap().generation_id, 2);
    }

    #[test]
    fn a_target_that_changes_while_revoking_is_reconciled_next() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        stable(&mut m, t0, 1, &[(T, 0), (T, 1)]);
        m.heartbeat_request(t0);
        m.on_response(t0, ok(1, Some(ids(&[(T, 0)]))));
        let rec = m.reconcile().unwrap();
        m.heartbeat_request(t0);
        // A newer target arrives mid-revocation: nothing happens until the first is done.
        assert!(matches!(
            m.on_response(t0, ok(2, Some(ids(&[(T, 0), (U, 4)])))),
            HeartbeatStep::Continue
        ));
        assert!(m.reconcile().is_none(), "one reconciliation at a time");
        m.finish_reconcile(&rec, t0).unwrap();
        assert!(m.has_pending_target());
        let next = m.reconcile().unwrap();
        assert!(next.revoke.is_empty());
        assert_eq!(next.assign, names(&[("u", 4)]));
        m.finish_reconcile(&next, t0).unwrap();
        assert!(!m.has_pending_target());
        assert_eq!(m.owned(), names(&[("t", 0), ("u", 4)]));
    }

    #[test]
    fn unknown_topic_ids_wait_for_metadata() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        let v = Uuid::from_u128(3);
        m.heartbeat_request(t0);
        m.on_response(t0, ok(1, Some(ids(&[(T, 0), (v, 0)]))));
        assert_eq!(m.unresolved_topics(), vec![v]);
        let rec = m.reconcile().unwrap();
        assert_eq!(rec.assign, names(&[("t", 0)]));
        m.finish_reconcile(&rec, t0).unwrap();
        assert!(m.has_pending_target());
        m.learn_names([(v, "v".to_owned())]);
        let rec = m.reconcile().unwrap();
        assert_eq!(rec.assign, names(&[("v", 0)]));
        m.finish_reconcile(&rec, t0).unwrap();
        assert!(!m.has_pending_target());
    }

    #[test]
    fn fencing_loses_everything_and_rejoins_with_epoch_zero() {
        for error in [
            ResponseError::FencedMemberEpoch,
            ResponseError::UnknownMemberId,
        ] {
            let t0 = Instant::now();
            let mut m = member(t0, None);
            stable(&mut m, t0, 4, &[(T, 0)]);
            let old = m.generation().unwrap();
            let t1 = t0 + Duration::from_secs(5);
            m.heartbeat_request(t1);
            let HeartbeatStep::Lost { partitions } = m.on_response(
                t1,
                HeartbeatReply {
                    error: Some(error),
                    ..HeartbeatReply::default()
                },
            ) else {
                panic!("expected Lost for {error:?}");
            };
            assert_eq!(partitions, names(&[("t", 0)]));
            assert_eq!(m.state(), State::Joining);
            assert_eq!(m.next_heartbeat(), Some(t1), "rejoin at once");
            let plan = m.heartbeat_request(t1);
            assert_eq!(plan.member_epoch, 0);
            assert_eq!(plan.member_id, "m-1", "the member id is kept");
            assert!(plan.owned.is_empty());
            m.on_response(t1, ok(7, Some(ids(&[(T, 0)]))));
            // A commit of the fenced membership is refused although the member id is the same.
            let e = m.check_commit(&old).unwrap_err();
            assert!(e.to_string().contains("fenced"), "{e}");
        }
    }

    #[test]
    fn coordinator_and_retriable_errors_keep_the_partitions() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        stable(&mut m, t0, 1, &[(T, 0)]);
        for (error, want_find) in [
            (ResponseError::NotCoordinator, true),
            (ResponseError::CoordinatorNotAvailable, true),
            (ResponseError::CoordinatorLoadInProgress, false),
            (ResponseError::UnreleasedInstanceId, false),
        ] {
            m.heartbeat_request(t0);
            let step = m.on_response(
                t0,
                HeartbeatReply {
                    error: Some(error),
                    ..HeartbeatReply::default()
                },
            );
            match step {
                HeartbeatStep::FindCoordinator => assert!(want_find, "{error:?}"),
                HeartbeatStep::Backoff => assert!(!want_find, "{error:?}"),
                other => panic!("{error:?}: {other:?}"),
            }
            assert_eq!(m.owned(), names(&[("t", 0)]));
            m.request_failed(t0 + Duration::from_millis(100));
            assert_eq!(m.next_heartbeat(), Some(t0 + Duration::from_millis(100)));
        }
    }

    #[test]
    fn fatal_errors_name_what_to_fix() {
        let t0 = Instant::now();
        let mut m = member(t0, Some("mirror-1"));
        stable(&mut m, t0, 1, &[(T, 0)]);
        m.heartbeat_request(t0);
        let HeartbeatStep::Fatal { partitions, error } = m.on_response(
            t0,
            HeartbeatReply {
                error: Some(ResponseError::FencedInstanceId),
                ..HeartbeatReply::default()
            },
        ) else {
            panic!("expected Fatal");
        };
        assert_eq!(partitions.len(), 1);
        assert!(error.to_string().contains("mirror-1"), "{error}");
        assert_eq!(m.state(), State::Failed);
        assert_eq!(m.next_heartbeat(), None);

        let mut m = member(t0, None);
        m.heartbeat_request(t0);
        let HeartbeatStep::Fatal { error, .. } = m.on_response(
            t0,
            HeartbeatReply {
                error: Some(ResponseError::UnsupportedAssignor),
                ..HeartbeatReply::default()
            },
        ) else {
            panic!("expected Fatal");
        };
        assert!(error.to_string().contains("uniform"), "{error}");
    }

    #[test]
    fn a_silent_coordinator_expires_the_membership_after_the_session_timeout() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        stable(&mut m, t0, 1, &[(T, 0)]);
        let session = Duration::from_secs(45);
        assert!(m.expire_if_silent(t0 + session, session).is_none());
        let lost = m.expire_if_silent(t0 + session + Duration::from_millis(1), session);
        assert_eq!(lost, Some(names(&[("t", 0)])));
        assert_eq!(m.state(), State::Joining);
    }

    #[test]
    fn leave_epochs_static_and_dynamic() {
        let t0 = Instant::now();
        let mut m = member(t0, None);
        assert!(m.leave(false).is_none(), "never joined: nothing to send");
        let mut m = member(t0, None);
        stable(&mut m, t0, 1, &[(T, 0)]);
        assert_eq!(m.leave(false).unwrap().member_epoch, LEAVE_EPOCH);
        assert_eq!(m.state(), State::Left);
        assert!(m.owned().is_empty());
        let mut m = member(t0, Some("i-1"));
        stable(&mut m, t0, 1, &[(T, 0)]);
        assert_eq!(m.leave(false).unwrap().member_epoch, STATIC_LEAVE_EPOCH);
        let mut m = member(t0, Some("i-1"));
        stable(&mut m, t0, 1, &[(T, 0)]);
        let plan = m.leave(true).unwrap();
        assert_eq!(plan.member_epoch, LEAVE_EPOCH);
        assert_eq!(plan.instance_id.as_deref(), Some("i-1"));
    }
}
