//! ACL sync (`mirror.sync_topic_acls`, MirrorMaker 2's `sync.topic.acls.enabled`) and mirror
//! protection (`mirror.protect_mirrors`). See docs/acls.md, "Copying ACLs to the target".
//!
//! A background task, on start and every `mirror.sync_topic_acls_interval`:
//! 1. lists the mirrored topics (the source topics the mirror selects);
//! 2. with `sync_topic_acls`, reads the source's topic ACLs and derives the target ACLs with
//!    [`target_acls`] (MM2's rules, plus PREFIXED patterns, and DENY entries translated so that
//!    none that keeps a principal from reading is lost and none can stop the mirror);
//! 3. with `protect_mirrors`, derives a DENY WRITE on each mirrored target topic for every other
//!    principal that an ALLOW ACL lets write to it ([`protect_acls`]);
//! 4. creates what the target lacks. It never deletes an ACL (MM2 does not either).
//!
//! Nothing here stops the mirror: missing rights and broker errors are logged as warnings that
//! say which right is missing, and the next round tries again.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use strait_wire::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, Admin, PatternType, ResourceType,
};
use strait_wire::error::acl_principal;
use strait_wire::kafka_protocol::messages::CreateAclsRequest;
use strait_wire::kafka_protocol::messages::create_acls_request::AclCreation;
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::{Client, ResponseError};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Why a round could not do (all of) its work. Never fatal: the task logs it and retries.
#[derive(Debug, thiserror::Error)]
pub enum AclSyncError {
    /// DescribeAcls denied on the source.
    #[error(
        "cannot read the topic ACLs of source cluster {alias}: {principal} lacks Describe on \
         the cluster ({source}); grant it (kafka-acls.sh --add --allow-principal {principal} \
         --operation Describe --cluster) or set mirror.sync_topic_acls = false. Mirroring \
         continues; no ACL is copied until then"
    )]
    SourceDescribeDenied {
        /// Source alias.
        alias: String,
        /// The mirror's principal on the source, as far as the client can tell.
        principal: String,
        /// The broker's answer.
        source: strait_wire::Error,
    },
    /// DescribeAcls denied on the target.
    #[error(
        "cannot read the topic ACLs of target cluster {alias}: {principal} lacks Describe on \
         the cluster ({source}); grant it (kafka-acls.sh --add --allow-principal {principal} \
         --operation Describe --operation Alter --cluster) or set mirror.sync_topic_acls and \
         mirror.protect_mirrors to false. Mirroring continues"
    )]
    TargetDescribeDenied {
        /// Target alias.
        alias: String,
        /// The mirror's principal on the target.
        principal: String,
        /// The broker's answer.
        source: strait_wire::Error,
    },
    /// CreateAcls denied on the target.
    #[error(
        "cannot create {count} ACL(s) on target cluster {alias}: {principal} lacks Alter on the \
         cluster ({code:?}); grant it (kafka-acls.sh --add --allow-principal {principal} \
         --operation Alter --cluster) or set mirror.sync_topic_acls and mirror.protect_mirrors \
         to false. Mirroring continues; first missing ACL: {first}"
    )]
    CreateDenied {
        /// Target alias.
        alias: String,
        /// The mirror's principal on the target.
        principal: String,
        /// How many ACLs were not created.
        count: usize,
        /// One of them, for the log.
        first: String,
        /// The broker's error.
        code: ResponseError,
    },
    /// One ACL was rejected for another reason.
    #[error("target cluster {alias} rejected the ACL {acl}: {code:?} {message}")]
    CreateFailed {
        /// Target alias.
        alias: String,
        /// The ACL.
        acl: String,
        /// The broker's error.
        code: ResponseError,
        /// The broker's message, if any.
        message: String,
    },
    /// Any other client or broker error (connection, timeout...): retried next round.
    #[error("{side} cluster {alias}: {source}; retrying at the next ACL sync round")]
    Wire {
        /// `source` or `target`.
        side: &'static str,
        /// The cluster's alias.
        alias: String,
        /// The error.
        source: strait_wire::Error,
    },
}

/// A mirrored topic: its source and target names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrored {
    /// Name on the source.
    pub source: String,
    /// Name on the target (after `mirror.rename`).
    pub target: String,
}

/// Whom a source ACL entry names, as seen from the target: what decides which DENY entries
/// Strait may create there without stopping the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// `User:*`: a DENY for it also matches the mirror's own principal.
    Everyone,
    /// The mirror's principal on the target (`mirror.target_principal`, or the one the target
    /// brokers report).
    Mirror,
    /// Any other principal: a DENY for it cannot match the mirror.
    Named,
}

impl Who {
    /// Classifies `principal` against the mirror's principal on the target.
    pub fn of(principal: &str, mirror: &str) -> Who {
        if principal == WILDCARD_PRINCIPAL {
            Who::Everyone
        } else if principal == mirror {
            Who::Mirror
        } else {
            Who::Named
        }
    }
}

/// Kafka's wildcard principal (`AclEntry.WILDCARD_PRINCIPAL_STRING`).
const WILDCARD_PRINCIPAL: &str = "User:*";

/// The topic operations an ALLOW may be copied for (every one but Write): a DENY ALL for a
/// named principal becomes a DENY of each, so that no copied ALLOW outlives the source's DENY.
const COPIED_OPERATIONS: [AclOperation; 7] = [
    AclOperation::Read,
    AclOperation::Describe,
    AclOperation::DescribeConfigs,
    AclOperation::Create,
    AclOperation::Alter,
    AclOperation::AlterConfigs,
    AclOperation::Delete,
];

/// What a source topic ACL entry becomes on a mirror: the (operation, permission) pairs to
/// create, none when it is not copied. See docs/acls.md, "Which ACLs are copied, and how".
///
/// ALLOW follows MirrorMaker 2: ALLOW WRITE is never copied (a mirror is written by the mirror
/// only), ALLOW ALL becomes ALLOW READ, other ALLOW entries are copied unchanged.
///
/// DENY: a deny that keeps a principal from reading is never lost, and no DENY can stop the
/// mirror, which on a target topic produces (Write), reads metadata (Describe) and creates,
/// grows and configures it (Create, Alter, DescribeConfigs, AlterConfigs), but never reads or
/// deletes it:
/// * DENY READ and DELETE are copied for anyone;
/// * for a named principal (not `User:*`, not the mirror's), every DENY but WRITE is copied,
///   and DENY ALL becomes a DENY of each operation an ALLOW may be copied for;
/// * for `User:*` or the mirror's principal, DENY ALL becomes DENY READ and DELETE, DENY
///   DESCRIBE becomes DENY READ (a principal who may not describe a topic cannot consume it),
///   and the other DENY entries are not copied ([`target_acls`] then drops the ALLOW entries
///   that a `User:*` DENY overrode on the source);
/// * DENY WRITE is never copied: it does not restrict reading, and `mirror.protect_mirrors`
///   is the way to keep writers out of a mirror.
pub fn target_entries(
    operation: AclOperation,
    permission: AclPermission,
    who: Who,
) -> Vec<(AclOperation, AclPermission)> {
    use AclOperation as Op;
    let deny = |ops: &[Op]| ops.iter().map(|op| (*op, AclPermission::Deny)).collect();
    match (permission, operation) {
        (AclPermission::Allow, Op::Write | Op::Any | Op::Unknown(_)) => Vec::new(),
        (AclPermission::Allow, Op::All) => vec![(Op::Read, permission)],
        (AclPermission::Allow, op) => vec![(op, permission)],
        (AclPermission::Deny, Op::Read | Op::Delete) => deny(&[operation]),
        (AclPermission::Deny, Op::All) => match who {
            Who::Named => deny(&COPIED_OPERATIONS),
            Who::Everyone | Who::Mirror => deny(&[Op::Read, Op::Delete]),
        },
        (AclPermission::Deny, Op::Describe) => match who {
            Who::Named => deny(&[Op::Describe]),
            Who::Everyone | Who::Mirror => deny(&[Op::Read]),
        },
        (
            AclPermission::Deny,
            op @ (Op::DescribeConfigs | Op::Create | Op::Alter | Op::AlterConfigs),
        ) => match who {
            Who::Named => deny(&[op]),
            Who::Everyone | Who::Mirror => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The operations whose ALLOW entries a DENY of `operation` for `User:*` makes void: the
/// operation itself (every one for ALL) and those that imply it in Kafka's authorizer (READ,
/// WRITE, DELETE and ALTER allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS), so that no
/// copied ALLOW grants it back.
fn closed_by(operation: AclOperation) -> Vec<AclOperation> {
    use AclOperation as Op;
    let mut ops = vec![operation];
    match operation {
        Op::All => ops.extend(COPIED_OPERATIONS.iter().copied().chain([Op::Write])),
        Op::Describe => ops.extend([Op::Read, Op::Write, Op::Delete, Op::Alter]),
        Op::DescribeConfigs => ops.push(Op::AlterConfigs),
        _ => {}
    }
    ops
}

/// The target ACLs for the source's topic ACLs `source`, for the mirrored topics `mirrored`;
/// `mirror` is the mirror's principal on the target.
///
/// A LITERAL pattern naming a mirrored topic, and a PREFIXED pattern that a mirrored topic's
/// name starts with, give LITERAL ACLs on each such mirrored topic's target name (a prefixed
/// pattern is expanded so it grants nothing on target topics that are not mirrors of topics it
/// covers). The wildcard `*` restricts: its DENY entries apply to every mirrored topic, its
/// ALLOW entries are not copied (they would grant on every topic of the target).
///
/// An ALLOW is not copied for an operation a DENY for `User:*` covered on the source (nobody
/// but super users could perform it there) when that DENY itself cannot be copied. Entries are
/// translated by [`target_entries`]. Sorted, without duplicates.
pub fn target_acls(source: &[AclBinding], mirrored: &[Mirrored], mirror: &str) -> Vec<AclBinding> {
    let topics = |acl: &AclBinding| -> Vec<&Mirrored> {
        let wildcard = acl.pattern_type == PatternType::Literal && acl.resource_name == "*";
        mirrored
            .iter()
            .filter(|m| match acl.pattern_type {
                _ if wildcard => acl.permission == AclPermission::Deny,
                PatternType::Literal => m.source == acl.resource_name,
                PatternType::Prefixed => m.source.starts_with(acl.resource_name.as_str()),
                _ => false,
            })
            .collect()
    };
    let topic_acls = source
        .iter()
        .filter(|a| a.resource_type == ResourceType::Topic);
    // (target topic, operation) that a DENY for User:* closed to everyone on the source.
    let mut closed: HashSet<(&str, AclOperation)> = HashSet::new();
    for acl in topic_acls.clone() {
        if acl.permission != AclPermission::Deny || Who::of(&acl.principal, mirror) != Who::Everyone
        {
            continue;
        }
        let ops = closed_by(acl.operation);
        for m in topics(acl) {
            closed.extend(ops.iter().map(|op| (m.target.as_str(), *op)));
        }
    }
    let mut out: Vec<AclBinding> = Vec::new();
    for acl in topic_acls {
        let who = Who::of(&acl.principal, mirror);
        let entries = target_entries(acl.operation, acl.permission, who);
        for m in topics(acl) {
            for &(operation, permission) in &entries {
                if permission == AclPermission::Allow
                    && closed.contains(&(m.target.as_str(), operation))
                {
                    continue;
                }
                out.push(AclBinding {
                    resource_type: ResourceType::Topic,
                    resource_name: m.target.clone(),
                    pattern_type: PatternType::Literal,
                    principal: acl.principal.clone(),
                    host: acl.host.clone(),
                    operation,
                    permission,
                });
            }
        }
    }
    sort_dedup(out)
}

/// What [`protect_acls`] decided for the mirrored target topics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protection {
    /// DENY WRITE ACLs to create (literal, one per other writer and topic).
    pub denies: Vec<AclBinding>,
    /// Target topics left unprotected because the mirror's own principal holds no ALLOW WRITE
    /// (or ALL) that applies to them: the principal name may be wrong (then a DENY could hit
    /// the mirror itself), or the mirror writes as a super user.
    pub mirror_not_a_writer: Vec<String>,
    /// Target topics anyone may write (`User:*` has ALLOW WRITE or ALL): a DENY for `User:*`
    /// would deny the mirror too, so they cannot be protected by ACLs.
    pub open_to_everyone: Vec<String>,
}

/// DENY WRITE on each target topic in `targets` for every principal other than `mirror` that an
/// ALLOW WRITE or ALLOW ALL in `existing` (the target's topic ACLs) lets write to it.
///
/// Kafka's authorizer cannot express "everyone but one principal" (a DENY for `User:*` would
/// deny the mirror too, since DENY wins over ALLOW); with `allow.everyone.if.no.acl.found =
/// false` only principals holding an ALLOW may write, so denying each of them is exact.
pub fn protect_acls(existing: &[AclBinding], targets: &[String], mirror: &str) -> Protection {
    let mut p = Protection::default();
    for topic in targets {
        let writers: BTreeSet<&str> = existing
            .iter()
            .filter(|a| {
                a.resource_type == ResourceType::Topic
                    && a.permission == AclPermission::Allow
                    && matches!(a.operation, AclOperation::Write | AclOperation::All)
                    && applies_to(a, topic)
            })
            .map(|a| a.principal.as_str())
            .collect();
        if writers.contains("User:*") {
            p.open_to_everyone.push(topic.clone());
            continue;
        }
        if !writers.contains(mirror) {
            p.mirror_not_a_writer.push(topic.clone());
            continue;
        }
        for w in writers.into_iter().filter(|w| *w != mirror) {
            p.denies.push(AclBinding {
                resource_type: ResourceType::Topic,
                resource_name: topic.clone(),
                pattern_type: PatternType::Literal,
                principal: w.to_owned(),
                host: "*".to_owned(),
                operation: AclOperation::Write,
                permission: AclPermission::Deny,
            });
        }
    }
    p.denies = sort_dedup(p.denies);
    p
}

/// True when the topic ACL `a` applies to the topic `topic` (literal, wildcard or prefix).
fn applies_to(a: &AclBinding, topic: &str) -> bool {
    match a.pattern_type {
        PatternType::Literal => a.resource_name == topic || a.resource_name == "*",
        PatternType::Prefixed => topic.starts_with(a.resource_name.as_str()),
        _ => false,
    }
}

/// The ACLs in `wanted` that `existing` lacks.
pub fn missing(wanted: &[AclBinding], existing: &[AclBinding]) -> Vec<AclBinding> {
    let have: BTreeSet<_> = existing.iter().map(key).collect();
    wanted
        .iter()
        .filter(|a| !have.contains(&key(a)))
        .cloned()
        .collect()
}

type Key = (String, String, String, String, String, String, String);

fn key(a: &AclBinding) -> Key {
    (
        format!("{:?}", a.resource_type),
        a.resource_name.clone(),
        format!("{:?}", a.pattern_type),
        a.principal.clone(),
        a.host.clone(),
        format!("{:?}", a.operation),
        format!("{:?}", a.permission),
    )
}

fn sort_dedup(mut v: Vec<AclBinding>) -> Vec<AclBinding> {
    v.sort_by_key(key);
    v.dedup();
    v
}

/// Kafka's codes for what CreateAcls sends (`strait_wire` keeps its own private).
fn operation_code(op: AclOperation) -> Option<i8> {
    Some(match op {
        AclOperation::All => 2,
        AclOperation::Read => 3,
        AclOperation::Write => 4,
        AclOperation::Create => 5,
        AclOperation::Delete => 6,
        AclOperation::Alter => 7,
        AclOperation::Describe => 8,
        AclOperation::ClusterAction => 9,
        AclOperation::DescribeConfigs => 10,
        AclOperation::AlterConfigs => 11,
        AclOperation::IdempotentWrite => 12,
        AclOperation::CreateTokens => 13,
        AclOperation::DescribeTokens => 14,
        AclOperation::TwoPhaseCommit => 15,
        _ => return None,
    })
}

fn creation(a: &AclBinding) -> Option<AclCreation> {
    let permission = match a.permission {
        AclPermission::Deny => 2,
        AclPermission::Allow => 3,
        _ => return None,
    };
    let pattern = match a.pattern_type {
        PatternType::Literal => 3,
        PatternType::Prefixed => 4,
        _ => return None,
    };
    (a.resource_type == ResourceType::Topic).then_some(())?;
    Some(
        AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(a.resource_name.clone()))
            .with_resource_pattern_type(pattern)
            .with_principal(StrBytes::from_string(a.principal.clone()))
            .with_host(StrBytes::from_string(a.host.clone()))
            .with_operation(operation_code(a.operation)?)
            .with_permission_type(permission),
    )
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Mirrored topics seen.
    pub topics: usize,
    /// ACLs created on the target this round.
    pub created: usize,
    /// Problems (logged as warnings by [`AclSync::run`]).
    pub problems: Vec<String>,
}

/// The ACL sync task's state.
pub struct AclSync {
    config: Config,
    source: Client,
    target: Client,
    target_principal: String,
    source_principal: String,
}

impl AclSync {
    /// Connects to both clusters.
    pub async fn connect(config: Config) -> Result<AclSync, AclSyncError> {
        let wire = |side, alias: &str| {
            let alias = alias.to_owned();
            move |source| AclSyncError::Wire {
                side,
                alias,
                source,
            }
        };
        let source_cfg = config
            .source
            .client_config()
            .map_err(wire("source", &config.source.alias))?;
        let target_cfg = config
            .target
            .client_config()
            .map_err(wire("target", &config.target.alias))?;
        let source = Client::connect(source_cfg)
            .await
            .map_err(wire("source", &config.source.alias))?;
        let target = Client::connect(target_cfg)
            .await
            .map_err(wire("target", &config.target.alias))?;
        let source_principal = match source.any_broker().await {
            Ok(c) => acl_principal(c.principal()).name,
            Err(_) => "the mirror's principal".to_owned(),
        };
        let target_principal = match &config.mirror.target_principal {
            Some(p) => p.clone(),
            None => {
                let conn = target
                    .any_broker()
                    .await
                    .map_err(wire("target", &config.target.alias))?;
                acl_principal(conn.principal()).name
            }
        };
        Ok(AclSync {
            config,
            source,
            target,
            target_principal,
            source_principal,
        })
    }

    /// The principal the target brokers are assumed to see for the mirror.
    pub fn target_principal(&self) -> &str {
        &self.target_principal
    }

    /// One sync round: copies missing ACLs and adds missing protections.
    pub async fn round(&self) -> Round {
        let mut round = Round::default();
        let target_alias = &self.config.target.alias;
        let Some(mirrored) = self.mirrored_topics(&mut round).await else {
            return round;
        };
        round.topics = mirrored.len();
        let topic_acls = AclFilter {
            resource_type: ResourceType::Topic,
            ..AclFilter::any()
        };
        let mut wanted = Vec::new();
        if self.config.mirror.sync_topic_acls {
            wanted.extend(self.copied_acls(&topic_acls, &mirrored, &mut round).await);
        }
        let target_admin = Admin::new(&self.target);
        let existing = match target_admin.describe_acls(&topic_acls).await {
            Ok(v) => Some(v),
            Err(e) if e.code() == Some(ResponseError::SecurityDisabled) => {
                round.problems.push(format!(
                    "target cluster {target_alias} has no authorizer \
                     (authorizer.class.name): ACLs cannot be copied or protect mirrors there; \
                     set mirror.sync_topic_acls and mirror.protect_mirrors to false"
                ));
                return round;
            }
            Err(e) => {
                round.problems.push(self.classify_target(e).to_string());
                None
            }
        };
        if self.config.mirror.protect_mirrors {
            wanted.extend(self.protections(existing.as_deref(), &mirrored, &mut round));
        }
        // Without the target's list, create everything: CreateAcls of an existing ACL is a
        // no-op in Kafka.
        let to_create = match &existing {
            Some(existing) => missing(&sort_dedup(wanted), existing),
            None => sort_dedup(wanted),
        };
        if to_create.is_empty() {
            return round;
        }
        match self.create(&to_create).await {
            Ok(n) => round.created = n,
            Err(errors) => {
                round.created = to_create.len().saturating_sub(errors.len());
                round
                    .problems
                    .extend(errors.into_iter().map(|e| e.to_string()));
            }
        }
        round
    }

    /// The source topics the mirror selects, with their target names (`None`: the source's
    /// metadata could not be read, a problem of `round`).
    async fn mirrored_topics(&self, round: &mut Round) -> Option<Vec<Mirrored>> {
        let md = match self.source.metadata(None).await {
            Ok(md) => md,
            Err(source) => {
                round.problems.push(
                    AclSyncError::Wire {
                        side: "source",
                        alias: self.config.source.alias.clone(),
                        source,
                    }
                    .to_string(),
                );
                return None;
            }
        };
        Some(
            md.topics
                .values()
                .filter(|t| !t.is_internal && t.error.is_none() && self.config.selects(&t.name))
                .map(|t| Mirrored {
                    source: t.name.to_string(),
                    target: self.config.target_topic(&t.name),
                })
                .collect(),
        )
    }

    /// The source's topic ACLs as they apply to the mirrored target topics.
    async fn copied_acls(
        &self,
        topic_acls: &AclFilter,
        mirrored: &[Mirrored],
        round: &mut Round,
    ) -> Vec<AclBinding> {
        match Admin::new(&self.source).describe_acls(topic_acls).await {
            Ok(source_acls) => target_acls(&source_acls, mirrored, &self.target_principal),
            Err(e) if e.code() == Some(ResponseError::SecurityDisabled) => {
                tracing::debug!(
                    cluster = %self.config.source.alias,
                    "the source has no authorizer: no ACLs to copy"
                );
                Vec::new()
            }
            Err(e) => {
                round.problems.push(self.classify_source(e).to_string());
                Vec::new()
            }
        }
    }

    /// `mirror.protect_mirrors`: the DENY ACLs that keep other writers off the mirrored target
    /// topics (none when the target's ACLs could not be read); what cannot be protected is a
    /// problem of `round`.
    fn protections(
        &self,
        existing: Option<&[AclBinding]>,
        mirrored: &[Mirrored],
        round: &mut Round,
    ) -> Vec<AclBinding> {
        let target_alias = &self.config.target.alias;
        match existing {
            Some(existing) => {
                let targets: Vec<String> = mirrored.iter().map(|m| m.target.clone()).collect();
                let p = protect_acls(existing, &targets, &self.target_principal);
                if !p.mirror_not_a_writer.is_empty() {
                    round.problems.push(format!(
                        "mirror.protect_mirrors: no DENY added on {:?}: no ALLOW Write or \
                         All ACL on target cluster {target_alias} names the mirror's \
                         principal {} for them, so Strait cannot tell writers from itself; \
                         set mirror.target_principal to the principal the target brokers \
                         see for Strait, or grant it Write on these topics by ACL",
                        p.mirror_not_a_writer, self.target_principal
                    ));
                }
                if !p.open_to_everyone.is_empty() {
                    round.problems.push(format!(
                        "mirror.protect_mirrors: {:?} on target cluster {target_alias} \
                         cannot be protected: an ACL lets User:* write to them, and a DENY \
                         for User:* would stop the mirror too; grant Write to named \
                         principals instead",
                        p.open_to_everyone
                    ));
                }
                p.denies
            }
            None => {
                round.problems.push(
                    "mirror.protect_mirrors: skipped this round (the target's ACLs could not \
                     be read)"
                        .to_owned(),
                );
                Vec::new()
            }
        }
    }

    fn classify_source(&self, e: strait_wire::Error) -> AclSyncError {
        if e.code() == Some(ResponseError::ClusterAuthorizationFailed) {
            AclSyncError::SourceDescribeDenied {
                alias: self.config.source.alias.clone(),
                principal: self.source_principal.clone(),
                source: e,
            }
        } else {
            AclSyncError::Wire {
                side: "source",
                alias: self.config.source.alias.clone(),
                source: e,
            }
        }
    }

    fn classify_target(&self, e: strait_wire::Error) -> AclSyncError {
        if e.code() == Some(ResponseError::ClusterAuthorizationFailed) {
            AclSyncError::TargetDescribeDenied {
                alias: self.config.target.alias.clone(),
                principal: self.target_principal.clone(),
                source: e,
            }
        } else {
            AclSyncError::Wire {
                side: "target",
                alias: self.config.target.alias.clone(),
                source: e,
            }
        }
    }

    /// CreateAcls for `acls`; the number created, or every failure.
    async fn create(&self, acls: &[AclBinding]) -> Result<usize, Vec<AclSyncError>> {
        let alias = &self.config.target.alias;
        let wire = |source| {
            vec![AclSyncError::Wire {
                side: "target",
                alias: alias.clone(),
                source,
            }]
        };
        let sent: Vec<&AclBinding> = acls.iter().filter(|a| creation(a).is_some()).collect();
        let req = CreateAclsRequest::default()
            .with_creations(sent.iter().filter_map(|a| creation(a)).collect());
        let conn = self.target.any_broker().await.map_err(wire)?;
        let version = conn
            .pick_version::<CreateAclsRequest>(1..=3)
            .map_err(wire)?;
        let resp = conn.send(req, version).await.map_err(wire)?;
        let mut denied = Vec::new();
        let mut errors = Vec::new();
        let mut created = 0;
        for (acl, result) in sent.iter().zip(&resp.results) {
            match ResponseError::try_from_code(result.error_code) {
                None => {
                    created += 1;
                    tracing::info!(cluster = %alias, acl = %acl, "created ACL on the target");
                }
                Some(
                    code @ (ResponseError::ClusterAuthorizationFailed
                    | ResponseError::TopicAuthorizationFailed),
                ) => denied.push((acl, code)),
                Some(code) => errors.push(AclSyncError::CreateFailed {
                    alias: alias.clone(),
                    acl: acl.to_string(),
                    code,
                    message: result
                        .error_message
                        .as_ref()
                        .map(|m| m.as_str().to_owned())
                        .unwrap_or_default(),
                }),
            }
        }
        if let Some((first, code)) = denied.first() {
            errors.push(AclSyncError::CreateDenied {
                alias: alias.clone(),
                principal: self.target_principal.clone(),
                count: denied.len(),
                first: first.to_string(),
                code: *code,
            });
        }
        if errors.is_empty() {
            Ok(created)
        } else {
            Err(errors)
        }
    }

    /// Runs a round now and then every `interval` until `stop`.
    pub async fn run(self, interval: Duration, stop: CancellationToken) {
        loop {
            let r = self.round().await;
            for p in &r.problems {
                tracing::warn!("ACL sync: {p}");
            }
            tracing::debug!(
                topics = r.topics,
                created = r.created,
                "ACL sync round done"
            );
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Starts the ACL sync task when `mirror.sync_topic_acls` or `mirror.protect_mirrors` is on.
/// It never stops the mirror: a connection failure is logged and retried.
pub fn spawn(config: &Config, stop: CancellationToken) -> Option<tokio::task::JoinHandle<()>> {
    let m = &config.mirror;
    if !m.sync_topic_acls && !m.protect_mirrors {
        return None;
    }
    let config = config.clone();
    Some(tokio::spawn(async move {
        let interval = config.mirror.sync_topic_acls_interval;
        loop {
            match AclSync::connect(config.clone()).await {
                Ok(sync) => {
                    tracing::info!(
                        principal = %sync.target_principal(),
                        sync_topic_acls = config.mirror.sync_topic_acls,
                        protect_mirrors = config.mirror.protect_mirrors,
                        "ACL sync started"
                    );
                    return sync.run(interval, stop).await;
                }
                Err(e) => tracing::warn!("ACL sync: {e}"),
            }
            // A failed connection is retried sooner than a whole (10-minute) interval.
            tokio::select! {
                _ = tokio::time::sleep(interval.min(Duration::from_secs(30))) => {}
                _ = stop.cancelled() => return,
            }
        }
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
        perm: AclPermission,
    ) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.to_owned(),
            pattern_type: pattern,
            principal: principal.to_owned(),
            host: "*".to_owned(),
            operation: op,
            permission: perm,
        }
    }

    fn mirrored(pairs: &[(&str, &str)]) -> Vec<Mirrored> {
        pairs
            .iter()
            .map(|(s, t)| Mirrored {
                source: (*s).to_owned(),
                target: (*t).to_owned(),
            })
            .collect()
    }

    use AclOperation as Op;
    use AclPermission::{Allow, Deny};
    use PatternType::{Literal, Prefixed};

    const MIRROR: &str = "User:mirror";

    /// Every topic-relevant operation, plus the ones a topic ACL cannot mean.
    const OPS: [AclOperation; 16] = [
        Op::All,
        Op::Read,
        Op::Write,
        Op::Create,
        Op::Delete,
        Op::Alter,
        Op::Describe,
        Op::DescribeConfigs,
        Op::AlterConfigs,
        Op::ClusterAction,
        Op::IdempotentWrite,
        Op::CreateTokens,
        Op::DescribeTokens,
        Op::TwoPhaseCommit,
        Op::Any,
        Op::Unknown(99),
    ];

    /// The whole table: operation x permission x whom it names.
    #[test]
    fn translation_table() {
        use Who::{Everyone, Mirror, Named};
        let allow = |ops: &[Op]| ops.iter().map(|o| (*o, Allow)).collect::<Vec<_>>();
        let deny = |ops: &[Op]| ops.iter().map(|o| (*o, Deny)).collect::<Vec<_>>();
        for who in [Everyone, Mirror, Named] {
            for op in OPS {
                let want_allow = match op {
                    Op::Write | Op::Any | Op::Unknown(_) => vec![],
                    Op::All => allow(&[Op::Read]),
                    op => allow(&[op]),
                };
                assert_eq!(
                    target_entries(op, Allow, who),
                    want_allow,
                    "ALLOW {op} {who:?}"
                );
                let want_deny = match (op, who) {
                    (Op::Read | Op::Delete, _) => deny(&[op]),
                    (Op::All, Named) => deny(&COPIED_OPERATIONS),
                    (Op::All, Everyone | Mirror) => deny(&[Op::Read, Op::Delete]),
                    (Op::Describe, Everyone | Mirror) => deny(&[Op::Read]),
                    (
                        Op::Describe
                        | Op::DescribeConfigs
                        | Op::Create
                        | Op::Alter
                        | Op::AlterConfigs,
                        Named,
                    ) => deny(&[op]),
                    _ => vec![],
                };
                assert_eq!(
                    target_entries(op, Deny, who),
                    want_deny,
                    "DENY {op} {who:?}"
                );
                assert_eq!(target_entries(op, AclPermission::Unknown(9), who), vec![]);
            }
        }
        assert_eq!(Who::of("User:*", MIRROR), Everyone);
        assert_eq!(Who::of(MIRROR, MIRROR), Mirror);
        assert_eq!(Who::of("User:mallory", MIRROR), Named);
    }

    /// What the mirror does on a target topic: a DENY on any of these would stop or cripple it.
    const MIRROR_NEEDS: [Op; 6] = [
        Op::Write,
        Op::Describe,
        Op::Create,
        Op::Alter,
        Op::DescribeConfigs,
        Op::AlterConfigs,
    ];

    #[test]
    fn no_translated_deny_can_hit_the_mirror() {
        for who in [Who::Everyone, Who::Mirror, Who::Named] {
            for op in OPS {
                for (to, perm) in target_entries(op, Deny, who) {
                    assert_eq!(perm, Deny);
                    // Never a DENY WRITE or ALL, for anyone: a wrongly guessed mirror principal
                    // could be hit otherwise.
                    assert!(
                        !matches!(to, Op::Write | Op::All),
                        "DENY {op} {who:?} -> {to}"
                    );
                    if who != Who::Named {
                        assert!(!MIRROR_NEEDS.contains(&to), "DENY {op} {who:?} -> {to}");
                    }
                }
            }
        }
    }

    /// Kafka's authorizer (StandardAuthorizer) on topic ACLs with host `*` and
    /// `allow.everyone.if.no.acl.found = false`: a matching DENY of the operation or ALL wins,
    /// then a matching ALLOW of the operation, ALL, or an operation implying it.
    fn authorized(acls: &[AclBinding], principal: &str, topic: &str, op: Op) -> bool {
        let matching = |a: &&AclBinding| {
            a.resource_type == ResourceType::Topic
                && applies_to(a, topic)
                && (a.principal == principal || a.principal == "User:*")
        };
        if acls
            .iter()
            .filter(matching)
            .any(|a| a.permission == Deny && (a.operation == op || a.operation == Op::All))
        {
            return false;
        }
        let implied: &[Op] = match op {
            Op::Describe => &[Op::Read, Op::Write, Op::Delete, Op::Alter],
            Op::DescribeConfigs => &[Op::AlterConfigs],
            _ => &[],
        };
        acls.iter().filter(matching).any(|a| {
            a.permission == Allow
                && (a.operation == op || a.operation == Op::All || implied.contains(&a.operation))
        })
    }

    /// Every pair of source entries (operation x permission x principal x pattern): on the
    /// target, no principal but the mirror's may do what the source did not let it do, and no
    /// DENY matches what the mirror needs.
    #[test]
    fn sync_never_widens_access_and_never_denies_the_mirror() {
        let m = mirrored(&[("t", "europe.t")]);
        let mut entries = Vec::new();
        for op in &OPS[..9] {
            for perm in [Allow, Deny] {
                for who in ["User:*", "User:alice", MIRROR] {
                    for (name, pattern) in [("t", Literal), ("*", Literal), ("t", Prefixed)] {
                        entries.push(acl(name, pattern, who, *op, perm));
                    }
                }
            }
        }
        let checked = [
            Op::Read,
            Op::Describe,
            Op::DescribeConfigs,
            Op::Create,
            Op::Alter,
            Op::AlterConfigs,
            Op::Delete,
            Op::Write,
        ];
        for a in &entries {
            for b in &entries {
                let source = [a.clone(), b.clone()];
                let target = target_acls(&source, &m, MIRROR);
                for principal in ["User:alice", "User:mallory"] {
                    for op in checked {
                        assert!(
                            !authorized(&target, principal, "europe.t", op)
                                || authorized(&source, principal, "t", op),
                            "{principal} may {op} on the mirror only: source {a} + {b}, \
                             target {target:?}"
                        );
                    }
                }
                for d in target.iter().filter(|d| d.permission == Deny) {
                    assert!(
                        !(matches!(d.principal.as_str(), "User:*" | MIRROR)
                            && MIRROR_NEEDS.contains(&d.operation)),
                        "{d} from {a} + {b}"
                    );
                }
            }
        }
    }

    /// The scenario: ALLOW ALL for everyone and DENY ALL for mallory; a DENY on the
    /// wildcard topic; DENY on what cannot be copied for `User:*`.
    #[test]
    fn denies_that_restrict_reading_are_never_lost() {
        let m = mirrored(&[("t", "europe.t"), ("u", "europe.u")]);
        let source = vec![
            acl("t", Literal, "User:*", Op::All, Allow),
            acl("t", Literal, "User:mallory", Op::All, Deny),
            acl("*", Literal, "User:trudy", Op::Read, Deny),
            acl("*", Literal, "User:carol", Op::Read, Allow),
            acl("u", Prefixed, "User:*", Op::Describe, Deny),
            acl("u", Literal, "User:bob", Op::Read, Allow),
            acl("u", Literal, "User:bob", Op::Alter, Allow),
        ];
        let got = target_acls(&source, &m, MIRROR);
        let mut want = vec![
            acl("europe.t", Literal, "User:*", Op::Read, Allow),
            acl("europe.t", Literal, "User:trudy", Op::Read, Deny),
            acl("europe.u", Literal, "User:trudy", Op::Read, Deny),
            // Nobody may describe u on the source, so nobody reads its mirror; bob's Read and
            // Alter (which imply Describe) are not copied.
            acl("europe.u", Literal, "User:*", Op::Read, Deny),
        ];
        want.extend(
            COPIED_OPERATIONS
                .iter()
                .map(|op| acl("europe.t", Literal, "User:mallory", *op, Deny)),
        );
        assert_eq!(got, sort_dedup(want));
        for who in ["User:mallory", "User:trudy"] {
            assert!(!authorized(&got, who, "europe.t", Op::Read), "{who}");
        }
        assert!(authorized(&got, "User:alice", "europe.t", Op::Read));
        assert!(!authorized(&got, "User:bob", "europe.u", Op::Read));
        assert!(!authorized(&got, "User:bob", "europe.u", Op::Describe));
        // The mirror's own DENY ALL keeps only what it never does.
        let own = target_acls(&[acl("t", Literal, MIRROR, Op::All, Deny)], &m, MIRROR);
        assert_eq!(
            own,
            sort_dedup(vec![
                acl("europe.t", Literal, MIRROR, Op::Read, Deny),
                acl("europe.t", Literal, MIRROR, Op::Delete, Deny),
            ])
        );
    }

    #[test]
    fn literal_and_prefixed_patterns_become_literal_acls_on_renamed_topics() {
        let m = mirrored(&[
            ("my-topic", "europe.my-topic"),
            ("orders-eu", "europe.orders-eu"),
            ("orders-us", "europe.orders-us"),
        ]);
        let source = vec![
            acl("my-topic", Literal, "User:alice", Op::All, Allow),
            acl("my-topic", Literal, "User:alice", Op::Write, Allow),
            acl("orders-", Prefixed, "User:bob", Op::Read, Allow),
            acl("orders-", Prefixed, "User:eve", Op::Read, Deny),
            // Not mirrored, a wildcard, a group ACL, a prefix covering nothing mirrored.
            acl("other", Literal, "User:alice", Op::Read, Allow),
            acl("*", Literal, "User:carol", Op::Read, Allow),
            acl("pay", Prefixed, "User:carol", Op::Read, Allow),
            AclBinding {
                resource_type: ResourceType::Group,
                ..acl("my-topic", Literal, "User:alice", Op::Read, Allow)
            },
        ];
        let got = target_acls(&source, &m, MIRROR);
        let want = sort_dedup(vec![
            acl("europe.my-topic", Literal, "User:alice", Op::Read, Allow),
            acl("europe.orders-eu", Literal, "User:bob", Op::Read, Allow),
            acl("europe.orders-us", Literal, "User:bob", Op::Read, Allow),
            acl("europe.orders-eu", Literal, "User:eve", Op::Read, Deny),
            acl("europe.orders-us", Literal, "User:eve", Op::Read, Deny),
        ]);
        assert_eq!(got, want);
        // Host restrictions are kept.
        let mut hosted = acl("my-topic", Literal, "User:alice", Op::Read, Allow);
        hosted.host = "10.0.0.1".into();
        assert_eq!(target_acls(&[hosted], &m, MIRROR)[0].host, "10.0.0.1");
    }

    #[test]
    fn allow_all_and_read_give_one_acl() {
        let m = mirrored(&[("t", "t")]);
        let source = vec![
            acl("t", Literal, "User:a", Op::All, Allow),
            acl("t", Literal, "User:a", Op::Read, Allow),
        ];
        assert_eq!(target_acls(&source, &m, MIRROR).len(), 1);
    }

    #[test]
    fn protection_denies_every_other_writer_never_the_mirror() {
        let existing = vec![
            acl("t1", Literal, "User:mirror", Op::Write, Allow),
            acl("t1", Literal, "User:app", Op::All, Allow),
            acl("t", Prefixed, "User:batch", Op::Write, Allow),
            acl("*", Literal, "User:ops", Op::Write, Allow),
            acl("t1", Literal, "User:reader", Op::Read, Allow),
            acl("x", Prefixed, "User:unrelated", Op::Write, Allow),
            acl("t1", Literal, "User:blocked", Op::Write, Deny),
        ];
        let p = protect_acls(&existing, &["t1".to_owned()], "User:mirror");
        let who: Vec<&str> = p.denies.iter().map(|a| a.principal.as_str()).collect();
        assert_eq!(who, ["User:app", "User:batch", "User:ops"]);
        for d in &p.denies {
            assert_eq!(
                (d.operation, d.permission, d.pattern_type, d.host.as_str()),
                (Op::Write, Deny, Literal, "*")
            );
            assert_eq!(d.resource_name, "t1");
        }
        assert!(p.mirror_not_a_writer.is_empty() && p.open_to_everyone.is_empty());
    }

    #[test]
    fn protection_refuses_when_it_cannot_tell_the_mirror_apart() {
        let existing = vec![
            acl("a", Literal, "User:CN=mirror", Op::Write, Allow),
            acl("a", Literal, "User:app", Op::Write, Allow),
            acl("b", Literal, "User:*", Op::Write, Allow),
            acl("b", Literal, "User:mirror", Op::Write, Allow),
        ];
        let p = protect_acls(&existing, &["a".into(), "b".into()], "User:mirror");
        assert!(p.denies.is_empty(), "{:?}", p.denies);
        assert_eq!(p.mirror_not_a_writer, ["a"]);
        assert_eq!(p.open_to_everyone, ["b"]);
    }

    #[test]
    fn missing_skips_what_exists() {
        let a = acl("t", Literal, "User:a", Op::Read, Allow);
        let b = acl("t", Literal, "User:b", Op::Read, Allow);
        assert_eq!(missing(&[a.clone(), b.clone()], &[a]), [b]);
    }

    #[test]
    fn creation_codes_match_kafka() {
        let c = creation(&acl("t", Prefixed, "User:a", Op::Read, Deny)).unwrap();
        assert_eq!(
            (
                c.resource_type,
                c.resource_pattern_type,
                c.operation,
                c.permission_type
            ),
            (2, 4, 3, 2)
        );
        assert!(creation(&acl("t", Literal, "User:a", Op::Any, Allow)).is_none());
    }
}
