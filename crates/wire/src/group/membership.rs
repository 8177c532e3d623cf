//! The classic-protocol membership state machine, without I/O.
//!
//! The async driver in `group.rs` sends the requests and feeds the broker's answers in here;
//! this module decides what they mean (join again, compute an assignment, revoke, give up).
//! Keeping it free of I/O and clocks makes every transition unit-testable.
//!
//! Phases (eager rebalancing: a member gives up everything before it rejoins; with only
//! cooperative assignors offered (KIP-429) the member rejoins keeping what it owns, revokes
//! after SyncGroup only what its new assignment lacks, and rejoins once more if it revoked any):
//!
//! ```text
//! Unjoined --join_request--> Joining --Lead/Follow--> Syncing --Assigned--> Stable
//!    ^                         |  ^ MEMBER_ID_REQUIRED                        |
//!    |                         +--+                                           | REBALANCE_IN_PROGRESS
//!    +--------- finish_revoke <--------- Revoking <---------------------------+
//!    +--------- (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID: partitions lost) ----+
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::assignor::{Assignor, MemberSubscription, PartitionSet};
use super::protocol::{self, CONSUMER_PROTOCOL_TYPE, Subscription};
use super::{Generation, group_authorization_error, group_broker_error, group_protocol_error};
use crate::error::{Error, Result};

/// Where a member is in the join/sync/heartbeat cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Owns nothing; must send JoinGroup.
    Unjoined,
    /// A JoinGroup is in flight.
    Joining,
    /// Joined a generation; a SyncGroup is in flight.
    Syncing,
    /// Owns its assignment for the current generation; heartbeating.
    Stable,
    /// A rebalance started; the application is giving up its partitions (it may still commit
    /// them with the current generation) before the member rejoins.
    Revoking,
    /// A fatal error ended the membership.
    Failed,
    /// Left the group.
    Left,
}

/// What to send in JoinGroup.
#[derive(Debug, Clone)]
pub(crate) struct JoinPlan {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// (assignor name, subscription bytes), most preferred first.
    pub protocols: Vec<(&'static str, Bytes)>,
}

/// The JoinGroup response fields the state machine looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct JoinReply {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    /// Absent before JoinGroup v7.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// (member id, group instance id, subscription bytes); only the leader gets these.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// What the driver does after a JoinGroup response.
#[derive(Debug)]
pub(crate) enum JoinStep {
    /// Send JoinGroup again now (MEMBER_ID_REQUIRED gave this member its id, or the id was reset).
    Rejoin,
    /// Send JoinGroup again after the retry backoff.
    Backoff,
    /// The coordinator moved or is unavailable: find it again, then rejoin.
    FindCoordinator,
    /// This member leads: compute the assignment (see [`Membership::leader_assignments`]).
    Lead {
        protocol: Assignor,
        members: Vec<MemberSubscription>,
    },
    /// This member follows: SyncGroup with no assignments.
    Follow,
    /// The membership cannot continue.
    Fatal(Error),
}

/// The SyncGroup response fields the state machine looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct SyncReply {
    pub error: Option<ResponseError>,
    /// Absent before SyncGroup v5.
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

/// What the driver does after a SyncGroup response.
#[derive(Debug)]
pub(crate) enum SyncStep {
    /// The member owns its new assignment in `generation`: `added` is what it did not own
    /// before (eager: everything), `revoked` what it owned but must give up (cooperative only;
    /// the driver revokes it, calls [`Membership::finish_cooperative_revoke`] and rejoins).
    Assigned {
        generation: Generation,
        added: PartitionSet,
        revoked: PartitionSet,
    },
    /// Join again now.
    Rejoin,
    /// Join again after the retry backoff.
    Backoff,
    /// Find the coordinator again, then rejoin.
    FindCoordinator,
    /// The membership cannot continue.
    Fatal(Error),
}

/// What the driver does after a Heartbeat response.
#[derive(Debug)]
pub(crate) enum HeartbeatStep {
    /// Nothing changed.
    Continue,
    /// A rebalance started: tell the application to revoke what it owns (commits with the
    /// current generation still work), then rejoin. Phase is now `Revoking`.
    Rebalance,
    /// The membership is gone (the coordinator no longer knows this generation or member):
    /// `partitions` are lost, commits for them will fail. Phase is now `Unjoined`.
    Lost { partitions: PartitionSet },
    /// Find the coordinator again and keep heartbeating.
    FindCoordinator,
    /// The membership cannot continue; `partitions` are lost.
    Fatal {
        partitions: PartitionSet,
        error: Error,
    },
}

/// One member's view of its classic consumer group.
#[derive(Debug)]
pub(crate) struct Membership {
    group_id: String,
    group_instance_id: Option<String>,
    topics: Vec<String>,
    assignors: Vec<Assignor>,
    member_id: String,
    generation_id: i32,
    phase: Phase,
    owned: PartitionSet,
    /// The assignor the coordinator picked for the current generation.
    protocol: Option<Assignor>,
    /// Only cooperative assignors offered: rebalances keep what stays (KIP-429).
    cooperative: bool,
}

impl Membership {
    /// A member that has not joined yet. `topics` and `assignors` must be non-empty (checked
    /// by `GroupConfig`).
    pub fn new(
        group_id: String,
        group_instance_id: Option<String>,
        mut topics: Vec<String>,
        assignors: Vec<Assignor>,
    ) -> Membership {
        topics.sort();
        topics.dedup();
        let cooperative = !assignors.is_empty() && assignors.iter().all(|a| a.is_cooperative());
        Membership {
            cooperative,
            group_id,
            group_instance_id,
            topics,
            assignors,
            member_id: String::new(),
            generation_id: -1,
            phase: Phase::Unjoined,
            owned: PartitionSet::new(),
            protocol: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn owned(&self) -> &PartitionSet {
        &self.owned
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// The generation this member owns partitions in (Stable or Revoking), if any.
    pub fn generation(&self) -> Option<Generation> {
        matches!(self.phase, Phase::Stable | Phase::Revoking).then(|| self.identity())
    }

    /// generation/member id/instance id as they would go into a request now.
    pub fn identity(&self) -> Generation {
        Generation {
            generation_id: self.generation_id,
            member_id: self.member_id.clone(),
            group_instance_id: self.group_instance_id.clone(),
        }
    }

    /// The assignor chosen for the current generation.
    pub fn protocol(&self) -> Option<Assignor> {
        self.protocol
    }

    /// Whether rebalances are incremental (only cooperative assignors offered).
    pub fn is_cooperative(&self) -> bool {
        self.cooperative
    }

    /// Builds the next JoinGroup. An eager member must own nothing; a cooperative one lists
    /// what it owns (and its generation) so the leader keeps it there.
    pub fn join_request(&mut self) -> Result<JoinPlan> {
        let owning_ok = self.cooperative || self.owned.is_empty();
        if !matches!(self.phase, Phase::Unjoined | Phase::Joining) || !owning_ok {
            return Err(group_protocol_error(format!(
                "internal: JoinGroup for group '{}' requested in phase {:?} while owning {} partitions",
                self.group_id,
                self.phase,
                self.owned.len()
            )));
        }
        let subscription = protocol::encode_subscription(&Subscription {
            topics: self.topics.clone(),
            owned: if self.cooperative {
                self.owned.clone()
            } else {
                PartitionSet::new()
            },
            generation_id: self.generation_id,
            rack_id: None,
        })?;
        self.phase = Phase::Joining;
        Ok(JoinPlan {
            member_id: self.member_id.clone(),
            group_instance_id: self.group_instance_id.clone(),
            protocols: self
                .assignors
                .iter()
                .map(|a| (a.name(), subscription.clone()))
                .collect(),
        })
    }

    pub fn on_join_response(&mut self, reply: JoinReply) -> JoinStep {
        if let Some(error) = reply.error {
            return self.on_join_error(error, reply.member_id);
        }
        if let Some(pt) = &reply.protocol_type
            && pt != CONSUMER_PROTOCOL_TYPE
        {
            return self.fail(group_protocol_error(format!(
                "group '{}' uses protocol type '{pt}', not '{CONSUMER_PROTOCOL_TYPE}': it is not a consumer group; use another group.id",
                self.group_id
            )));
        }
        let chosen = reply.protocol_name.as_deref().unwrap_or_default();
        let Some(protocol) = Assignor::from_name(chosen).filter(|a| self.assignors.contains(a))
        else {
            return self.fail(group_protocol_error(format!(
                "the coordinator of group '{}' chose assignor '{chosen}', which this member did not offer",
                self.group_id
            )));
        };
        self.member_id = reply.member_id;
        self.generation_id = reply.generation_id;
        self.protocol = Some(protocol);
        self.phase = Phase::Syncing;
        if reply.leader != self.member_id || reply.skip_assignment {
            return JoinStep::Follow;
        }
        let mut members = Vec::with_capacity(reply.members.len());
        for (member_id, group_instance_id, metadata) in reply.members {
            match protocol::decode_subscription(&metadata) {
                Ok(sub) => members.push(MemberSubscription {
                    member_id,
                    group_instance_id,
                    topics: sub.topics.into_iter().collect(),
                    owned: sub.owned,
                }),
                Err(e) => return self.fail(e),
            }
        }
        JoinStep::Lead { protocol, members }
    }

    fn on_join_error(&mut self, error: ResponseError, member_id: String) -> JoinStep {
        match error {
            ResponseError::MemberIdRequired => {
                // KIP-394: the coordinator hands out the id in the first reply.
                self.member_id = member_id;
                JoinStep::Rejoin
            }
            ResponseError::UnknownMemberId => {
                self.member_id.clear();
                self.generation_id = -1;
                JoinStep::Rejoin
            }
            ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable => {
                JoinStep::FindCoordinator
            }
            ResponseError::CoordinatorLoadInProgress
            | ResponseError::RebalanceInProgress
            | ResponseError::IllegalGeneration
            | ResponseError::RequestTimedOut
            | ResponseError::NetworkException => JoinStep::Backoff,
            other => {
                let e = self.fatal_error(other, "JoinGroup");
                self.fail(e)
            }
        }
    }

    fn fail<T: From<Error>>(&mut self, e: Error) -> T {
        self.phase = Phase::Failed;
        T::from(e)
    }

    /// Errors that end the membership, with what to do about them.
    fn fatal_error(&self, code: ResponseError, api: &str) -> Error {
        let g = &self.group_id;
        let context = match code {
            ResponseError::GroupAuthorizationFailed => {
                return group_authorization_error(g);
            }
            ResponseError::FencedInstanceId => format!(
                "{api}: another member joined group '{g}' with the same group.instance.id '{}'; this member is fenced. Give every process its own instance id",
                self.group_instance_id.as_deref().unwrap_or("")
            ),
            ResponseError::InvalidSessionTimeout => format!(
                "{api}: the session timeout is outside the broker's group.min.session.timeout.ms..group.max.session.timeout.ms for group '{g}'; change session.timeout.ms"
            ),
            ResponseError::InconsistentGroupProtocol => format!(
                "{api}: the members of group '{g}' share no assignor with this member (offered: {}) or use another protocol type; use another group.id or matching assignors",
                self.assignors
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ResponseError::GroupMaxSizeReached => format!(
                "{api}: group '{g}' already has the broker's group.max.size members; use fewer members or raise the limit"
            ),
            ResponseError::InvalidGroupId => {
                format!("{api}: '{g}' is not a valid group id; set a non-empty group.id")
            }
            ResponseError::UnreleasedInstanceId => format!(
                "{api}: group.instance.id of this member is still held in group '{g}'; wait for the session timeout and retry"
            ),
            _ => format!("{api} for group '{g}' failed"),
        };
        group_broker_error(code, context)
    }

    /// The leader's SyncGroup assignments: one entry per member, encoded.
    pub fn leader_assignments(
        &self,
        protocol: Assignor,
        members: &[MemberSubscription],
        partition_counts: &BTreeMap<String, i32>,
    ) -> Result<Vec<(String, Bytes)>> {
        protocol
            .assign(partition_counts, members)
            .into_iter()
            .map(|(member, parts)| Ok((member, protocol::encode_assignment(&parts)?)))
            .collect()
    }

    pub fn on_sync_response(&mut self, reply: SyncReply) -> SyncStep {
        if let Some(error) = reply.error {
            return match error {
                ResponseError::RebalanceInProgress => {
                    self.phase = Phase::Unjoined;
                    SyncStep::Rejoin
                }
                ResponseError::UnknownMemberId => {
                    self.member_id.clear();
                    self.generation_id = -1;
                    self.phase = Phase::Unjoined;
                    SyncStep::Rejoin
                }
                ResponseError::IllegalGeneration => {
                    self.generation_id = -1;
                    self.phase = Phase::Unjoined;
                    SyncStep::Rejoin
                }
                ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable => {
                    self.phase = Phase::Unjoined;
                    SyncStep::FindCoordinator
                }
                ResponseError::CoordinatorLoadInProgress
                | ResponseError::RequestTimedOut
                | ResponseError::NetworkException => {
                    self.phase = Phase::Unjoined;
                    SyncStep::Backoff
                }
                other => {
                    let e = self.fatal_error(other, "SyncGroup");
                    self.fail(e)
                }
            };
        }
        if let (Some(name), Some(chosen)) = (&reply.protocol_name, self.protocol)
            && name != chosen.name()
        {
            let e = group_protocol_error(format!(
                "SyncGroup for group '{}' answered with assignor '{name}' but JoinGroup chose '{}'",
                self.group_id,
                chosen.name()
            ));
            return self.fail(e);
        }
        match protocol::decode_assignment(&reply.assignment) {
            Ok(partitions) => {
                let added = partitions.difference(&self.owned);
                let revoked = self.owned.difference(&partitions);
                // Revoked partitions stay owned until the application released them.
                for (t, p) in added.iter() {
                    self.owned.insert(t, p);
                }
                self.phase = Phase::Stable;
                SyncStep::Assigned {
                    generation: self.identity(),
                    added,
                    revoked,
                }
            }
            Err(e) => self.fail(e),
        }
    }

    pub fn on_heartbeat(&mut self, error: Option<ResponseError>) -> HeartbeatStep {
        let Some(error) = error else {
            return HeartbeatStep::Continue;
        };
        match error {
            ResponseError::RebalanceInProgress => match self.phase {
                // Cooperative: rejoin keeping everything; nothing is revoked before the new
                // assignment says what moves.
                Phase::Stable if self.cooperative => {
                    self.phase = Phase::Unjoined;
                    HeartbeatStep::Rebalance
                }
                Phase::Stable => {
                    self.phase = Phase::Revoking;
                    HeartbeatStep::Rebalance
                }
                _ => HeartbeatStep::Continue,
            },
            ResponseError::IllegalGeneration => HeartbeatStep::Lost {
                partitions: self.lose_all(false),
            },
            ResponseError::UnknownMemberId => HeartbeatStep::Lost {
                partitions: self.lose_all(true),
            },
            ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable => {
                HeartbeatStep::FindCoordinator
            }
            e if e.is_retriable() => HeartbeatStep::Continue,
            other => {
                let error = self.fatal_error(other, "Heartbeat");
                let partitions = std::mem::take(&mut self.owned);
                self.phase = Phase::Failed;
                HeartbeatStep::Fatal { partitions, error }
            }
        }
    }

    /// A JoinGroup or SyncGroup got no answer (connection error): start the round again.
    pub fn abort_round(&mut self) {
        if matches!(self.phase, Phase::Joining | Phase::Syncing) {
            self.phase = Phase::Unjoined;
        }
    }

    /// The application asked for a rebalance (e.g. partition counts changed): Stable -> Revoking.
    /// Returns false if the member is not Stable.
    pub fn request_rebalance(&mut self) -> bool {
        if self.phase == Phase::Stable {
            self.phase = if self.cooperative {
                Phase::Unjoined
            } else {
                Phase::Revoking
            };
            true
        } else {
            false
        }
    }

    /// Cooperative: the application released `revoked` after SyncGroup; drop them and rejoin
    /// (the second round hands them to their new owner).
    pub fn finish_cooperative_revoke(&mut self, revoked: &PartitionSet) {
        for (t, p) in revoked.iter() {
            self.owned.remove(t, p);
        }
        if self.phase == Phase::Stable {
            self.phase = Phase::Unjoined;
        }
    }

    /// The application finished revoking: drop the partitions and get ready to rejoin.
    /// Returns what was revoked.
    pub fn finish_revoke(&mut self) -> PartitionSet {
        if self.phase == Phase::Revoking {
            self.phase = Phase::Unjoined;
        }
        std::mem::take(&mut self.owned)
    }

    /// The membership is gone: forget the generation (and the member id if the coordinator
    /// does not know it any more) and drop everything owned.
    pub fn lose_all(&mut self, reset_member_id: bool) -> PartitionSet {
        if reset_member_id {
            self.member_id.clear();
        }
        self.generation_id = -1;
        if !matches!(self.phase, Phase::Failed | Phase::Left) {
            self.phase = Phase::Unjoined;
        }
        std::mem::take(&mut self.owned)
    }

    /// The driver gave up (a fatal error outside the group protocol, e.g. a missing ACL on
    /// the coordinator lookup): drops everything owned and ends the membership.
    pub fn fail_now(&mut self) -> PartitionSet {
        let lost = self.lose_all(false);
        self.phase = Phase::Failed;
        lost
    }

    /// Checks that a commit made with `generation` still owns its partitions as far as this
    /// member knows. The coordinator checks again; this catches what is already known locally.
    pub fn check_commit(&self, generation: &Generation) -> Result<()> {
        let current = matches!(self.phase, Phase::Stable | Phase::Revoking)
            && generation.generation_id == self.generation_id
            && generation.member_id == self.member_id;
        if current {
            return Ok(());
        }
        Err(group_broker_error(
            ResponseError::IllegalGeneration,
            format!(
                "OffsetCommit for group '{}' with generation {} of member '{}' refused before sending: the group has rebalanced since (this member is {:?} in generation {}). \
                 The partitions may belong to another member now: drop uncommitted progress and re-read the committed offsets after the next assignment",
                self.group_id,
                generation.generation_id,
                generation.member_id,
                self.phase,
                self.generation_id
            ),
        ))
    }

    /// Leaves the group: returns the member id to send LeaveGroup for (None if the coordinator
    /// never gave one). Drops everything owned.
    pub fn leave(&mut self) -> Option<String> {
        self.owned = PartitionSet::new();
        self.phase = Phase::Left;
        let id = std::mem::take(&mut self.member_id);
        self.generation_id = -1;
        (!id.is_empty()).then_some(id)
    }
}

impl From<Error> for JoinStep {
    fn from(e: Error) -> JoinStep {
        JoinStep::Fatal(e)
    }
}

impl From<Error> for SyncStep {
    fn from(e: Error) -> SyncStep {
        SyncStep::Fatal(e)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn member(topics: &[&str]) -> Membership {
        Membership::new(
            "g".into(),
            None,
            topics.iter().map(|t| (*t).to_owned()).collect(),
            vec![Assignor::Range, Assignor::RoundRobin],
        )
    }

    fn sub(topics: &[&str]) -> Bytes {
        protocol::encode_subscription(&Subscription {
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            ..Subscription::default()
        })
        .unwrap()
    }

    fn joined(m: &mut Membership, id: &str, leader: &str, generation: i32) -> JoinStep {
        m.join_request().unwrap();
        m.on_join_response(JoinReply {
            generation_id: generation,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: leader.into(),
            member_id: id.into(),
            members: if id == leader {
                vec![
                    (id.into(), None, sub(&["t"])),
                    ("other".into(), None, sub(&["t"])),
                ]
            } else {
                vec![]
            },
            ..JoinReply::default()
        })
    }

    fn stable(m: &mut Membership, parts: &[(&str, i32)]) -> Generation {
        let set: PartitionSet = parts.iter().copied().collect();
        match m.on_sync_response(SyncReply {
            error: None,
            protocol_name: Some("range".into()),
            assignment: protocol::encode_assignment(&set).unwrap(),
        }) {
            SyncStep::Assigned {
                generation,
                added,
                revoked,
            } => {
                assert_eq!(added, set);
                assert!(revoked.is_empty());
                generation
            }
            other => panic!("expected Assigned, got {other:?}"),
        }
    }

    #[test]
    fn two_step_join_then_lead_then_sync() {
        let mut m = member(&["t"]);
        let plan = m.join_request().unwrap();
        assert_eq!(plan.member_id, "");
        assert_eq!(
            plan.protocols.iter().map(|p| p.0).collect::<Vec<_>>(),
            ["range", "roundrobin"]
        );
        let step = m.on_join_response(JoinReply {
            error: Some(ResponseError::MemberIdRequired),
            member_id: "m-1".into(),
            ..JoinReply::default()
        });
        assert!(matches!(step, JoinStep::Rejoin));
        assert_eq!(m.join_request().unwrap().member_id, "m-1");
        let step = m.on_join_response(JoinReply {
            generation_id: 3,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            member_id: "m-1".into(),
            members: vec![
                ("m-1".into(), None, sub(&["t"])),
                ("m-2".into(), None, sub(&["t"])),
            ],
            ..JoinReply::default()
        });
        let JoinStep::Lead { protocol, members } = step else {
            panic!("expected Lead, got {step:?}");
        };
        assert_eq!(protocol, Assignor::Range);
        assert_eq!(m.phase(), Phase::Syncing);
        let counts = BTreeMap::from([("t".to_owned(), 6)]);
        let assignments = m.leader_assignments(protocol, &members, &counts).unwrap();
        let decoded: BTreeMap<_, _> = assignments
            .iter()
            .map(|(id, b)| (id.clone(), protocol::decode_assignment(b).unwrap().len()))
            .collect();
        assert_eq!(
            decoded,
            BTreeMap::from([("m-1".into(), 3), ("m-2".into(), 3)])
        );
        assert!(m.generation().is_none(), "no generation before SyncGroup");
        let g = stable(&mut m, &[("t", 0), ("t", 1), ("t", 2)]);
        assert_eq!(g.generation_id, 3);
        assert_eq!(g.member_id, "m-1");
        assert_eq!(m.phase(), Phase::Stable);
        assert_eq!(m.generation(), Some(g));
    }

    #[test]
    fn follower_syncs_without_assignments() {
        let mut m = member(&["t"]);
        assert!(matches!(joined(&mut m, "m-2", "m-1", 1), JoinStep::Follow));
        stable(&mut m, &[("t", 3)]);
        assert_eq!(m.owned().len(), 1);
    }

    #[test]
    fn rebalance_revokes_then_rejoins_and_commit_rules_follow_the_phase() {
        let mut m = member(&["t"]);
        joined(&mut m, "m-2", "m-1", 4);
        let g = stable(&mut m, &[("t", 3), ("t", 4)]);
        assert!(m.check_commit(&g).is_ok());
        assert!(matches!(m.on_heartbeat(None), HeartbeatStep::Continue));
        assert!(matches!(
            m.on_heartbeat(Some(ResponseError::RebalanceInProgress)),
            HeartbeatStep::Rebalance
        ));
        assert_eq!(m.phase(), Phase::Revoking);
        // While revoking the application may still commit what it processed.
        assert!(m.check_commit(&g).is_ok());
        // More REBALANCE_IN_PROGRESS heartbeats while revoking change nothing.
        assert!(matches!(
            m.on_heartbeat(Some(ResponseError::RebalanceInProgress)),
            HeartbeatStep::Continue
        ));
        assert!(
            m.join_request().is_err(),
            "must not rejoin while owning partitions"
        );
        assert_eq!(m.finish_revoke().len(), 2);
        assert_eq!(m.phase(), Phase::Unjoined);
        assert!(
            m.check_commit(&g).is_err(),
            "revoked: commit refused locally"
        );
        assert_eq!(
            m.join_request().unwrap().member_id,
            "m-2",
            "keeps its member id"
        );
        joined(&mut m, "m-2", "m-1", 5);
        let g5 = stable(&mut m, &[("t", 0)]);
        let err = m.check_commit(&g).unwrap_err();
        assert!(err.to_string().contains("generation 4"), "{err}");
        assert!(m.check_commit(&g5).is_ok());
    }

    #[test]
    fn illegal_generation_loses_partitions_keeps_member_id() {
        let mut m = member(&["t"]);
        joined(&mut m, "m-2", "m-1", 4);
        let g = stable(&mut m, &[("t", 1)]);
        let HeartbeatStep::Lost { partitions } =
            m.on_heartbeat(Some(ResponseError::IllegalGeneration))
        else {
            panic!("expected Lost");
        };
        assert_eq!(partitions.len(), 1);
        assert!(m.owned().is_empty());
        assert!(m.check_commit(&g).is_err());
        assert_eq!(m.join_request().unwrap().member_id, "m-2");
    }

    #[test]
    fn unknown_member_resets_member_id() {
        let mut m = member(&["t"]);
        joined(&mut m, "m-2", "m-1", 4);
        stable(&mut m, &[("t", 1)]);
        assert!(matches!(
            m.on_heartbeat(Some(ResponseError::UnknownMemberId)),
            HeartbeatStep::Lost { .. }
        ));
        assert_eq!(m.join_request().unwrap().member_id, "");
    }

    #[test]
    fn fenced_instance_id_is_fatal_and_names_the_instance() {
        let mut m = Membership::new(
            "g".into(),
            Some("mirror-1".into()),
            vec!["t".into()],
            vec![Assignor::Range],
        );
        joined(&mut m, "m-2", "m-1", 1);
        stable(&mut m, &[("t", 0)]);
        let HeartbeatStep::Fatal { partitions, error } =
            m.on_heartbeat(Some(ResponseError::FencedInstanceId))
        else {
            panic!("expected Fatal");
        };
        assert_eq!(partitions.len(), 1);
        assert!(error.to_string().contains("mirror-1"), "{error}");
        assert_eq!(m.phase(), Phase::Failed);
    }

    #[test]
    fn coordinator_errors_rediscover_without_losing_partitions() {
        let mut m = member(&["t"]);
        joined(&mut m, "m-2", "m-1", 1);
        stable(&mut m, &[("t", 0)]);
        for e in [
            ResponseError::NotCoordinator,
            ResponseError::CoordinatorNotAvailable,
        ] {
            assert!(matches!(
                m.on_heartbeat(Some(e)),
                HeartbeatStep::FindCoordinator
            ));
            assert_eq!(m.owned().len(), 1);
        }
        assert!(matches!(
            m.on_heartbeat(Some(ResponseError::CoordinatorLoadInProgress)),
            HeartbeatStep::Continue
        ));
    }

    #[test]
    fn authorization_failure_on_join_is_fatal_and_says_what_to_grant() {
        let mut m = member(&["t"]);
        m.join_request().unwrap();
        let JoinStep::Fatal(e) = m.on_join_response(JoinReply {
            error: Some(ResponseError::GroupAuthorizationFailed),
            ..JoinReply::default()
        }) else {
            panic!("expected Fatal");
        };
        let msg = e.to_string();
        assert!(msg.contains("Read Group:g"), "{msg}");
        assert!(msg.contains("--group g"), "{msg}");
        assert_eq!(m.phase(), Phase::Failed);
    }

    #[test]
    fn sync_errors_send_the_member_back_to_join() {
        for (err, keeps_id) in [
            (ResponseError::RebalanceInProgress, true),
            (ResponseError::IllegalGeneration, true),
            (ResponseError::UnknownMemberId, false),
        ] {
            let mut m = member(&["t"]);
            joined(&mut m, "m-2", "m-1", 1);
            let step = m.on_sync_response(SyncReply {
                error: Some(err),
                ..SyncReply::default()
            });
            assert!(matches!(step, SyncStep::Rejoin), "{err:?}");
            assert_eq!(m.phase(), Phase::Unjoined);
            assert_eq!(m.join_request().unwrap().member_id == "m-2", keeps_id);
        }
    }

    #[test]
    fn a_non_consumer_group_or_unoffered_assignor_is_refused() {
        let mut m = member(&["t"]);
        m.join_request().unwrap();
        let step = m.on_join_response(JoinReply {
            protocol_type: Some("connect".into()),
            protocol_name: Some("range".into()),
            ..JoinReply::default()
        });
        assert!(matches!(step, JoinStep::Fatal(_)));
        let mut m = Membership::new("g".into(), None, vec!["t".into()], vec![Assignor::Range]);
        m.join_request().unwrap();
        let step = m.on_join_response(JoinReply {
            protocol_type: Some("consumer".into()),
            protocol_name: Some("roundrobin".into()),
            ..JoinReply::default()
        });
        assert!(matches!(step, JoinStep::Fatal(_)));
    }

    #[test]
    fn transport_errors_restart_the_round_and_app_rebalances_need_stable() {
        let mut m = member(&["t"]);
        assert!(
            !m.request_rebalance(),
            "nothing to rebalance before joining"
        );
        m.join_request().unwrap();
        m.abort_round();
        assert_eq!(m.phase(), Phase::Unjoined);
        joined(&mut m, "m-2", "m-1", 1);
        assert_eq!(m.phase(), Phase::Syncing);
        m.abort_round();
        assert_eq!(m.phase(), Phase::Unjoined);
        assert_eq!(m.join_request().unwrap().member_id, "m-2");
        joined(&mut m, "m-2", "m-1", 2);
        let g = stable(&mut m, &[("t", 0)]);
        m.abort_round();
        assert_eq!(m.phase(), Phase::Stable, "a stable member is not affected");
        assert!(m.request_rebalance());
        assert_eq!(m.phase(), Phase::Revoking);
        assert!(m.check_commit(&g).is_ok());
        assert!(!m.request_rebalance(), "already revoking");
        assert_eq!(m.finish_revoke().len(), 1);
        assert!(m.fail_now().is_empty());
        assert_eq!(m.phase(), Phase::Failed);
        assert!(m.check_commit(&g).is_err());
    }

    #[test]
    fn cooperative_rebalance_keeps_what_stays_and_revokes_only_what_moves() {
        let mut m = Membership::new(
            "g".into(),
            None,
            vec!["t".into()],
            vec![Assignor::CooperativeSticky],
        );
        assert!(m.is_cooperative());
        let sync = |m: &mut Membership, parts: &[(&str, i32)]| {
            let set: PartitionSet = parts.iter().copied().collect();
            m.on_sync_response(SyncReply {
                error: None,
                protocol_name: Some("cooperative-sticky".into()),
                assignment: protocol::encode_assignment(&set).unwrap(),
            })
        };
        let join = |m: &mut Membership, generation: i32| {
            let plan = m.join_request().unwrap();
            let step = m.on_join_response(JoinReply {
                generation_id: generation,
                protocol_type: Some("consumer".into()),
                protocol_name: Some("cooperative-sticky".into()),
                leader: "m-1".into(),
                member_id: "m-2".into(),
                ..JoinReply::default()
            });
            assert!(matches!(step, JoinStep::Follow));
            protocol::decode_subscription(&plan.protocols[0].1).unwrap()
        };
        join(&mut m, 1);
        let SyncStep::Assigned { added, revoked, .. } =
            sync(&mut m, &[("t", 0), ("t", 1), ("t", 2), ("t", 3)])
        else {
            panic!("expected Assigned");
        };
        assert_eq!(added.len(), 4);
        assert!(revoked.is_empty());
        // A rebalance starts: nothing is revoked, the member rejoins owning everything.
        assert!(matches!(
            m.on_heartbeat(Some(ResponseError::RebalanceInProgress)),
            HeartbeatStep::Rebalance
        ));
        assert_eq!(m.owned().len(), 4);
        let sub = join(&mut m, 2);
        assert_eq!(sub.owned.len(), 4, "the subscription lists what it owns");
        assert_eq!(sub.generation_id, 1);
        let SyncStep::Assigned { added, revoked, .. } = sync(&mut m, &[("t", 0), ("t", 1)]) else {
            panic!("expected Assigned");
        };
        assert!(added.is_empty());
        assert_eq!(revoked, [("t", 2), ("t", 3)].into_iter().collect());
        assert_eq!(m.owned().len(), 4, "owned until released");
        m.finish_cooperative_revoke(&revoked);
        assert_eq!(m.owned().len(), 2);
        assert_eq!(m.phase(), Phase::Unjoined, "second round");
        assert_eq!(join(&mut m, 3).owned.len(), 2);
        let SyncStep::Assigned { added, revoked, .. } = sync(&mut m, &[("t", 0), ("t", 1)]) else {
            panic!("expected Assigned");
        };
        assert!(added.is_empty() && revoked.is_empty());
        assert_eq!(m.phase(), Phase::Stable);
    }

    #[test]
    fn leave_returns_member_id_once() {
        let mut m = member(&["t"]);
        assert_eq!(m.leave(), None);
        let mut m = member(&["t"]);
        joined(&mut m, "m-2", "m-1", 1);
        stable(&mut m, &[("t", 0)]);
        assert_eq!(m.leave().as_deref(), Some("m-2"));
        assert!(m.owned().is_empty());
        assert_eq!(m.phase(), Phase::Left);
    }
}
