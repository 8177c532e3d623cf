//! `strait check`: connects to both clusters, tests every right `strait run` needs, names the
//! least grant that fixes each missing one, and prints the plan.
//!
//! Rights are read from the brokers' own authorizer, not guessed from ACL listings: Metadata
//! (v8 to v10) with `include_topic_authorized_operations` and
//! `include_cluster_authorized_operations` returns, per topic, the operations the connection's
//! principal may perform (implied operations included: Write and Read imply Describe), and
//! DescribeGroups (v3+) with `include_authorized_operations` does the same for the source group.
//! That is exactly what the broker checks when `strait run` later produces, fetches or commits,
//! and it needs no right of its own beyond Describe. Nothing is written.
//!
//! | cluster | right | why | missing |
//! |---|---|---|---|
//! | source | Read on each source topic | fetch | fails |
//! | source | Read on the group | join the group, commit positions | fails |
//! | source | AlterConfigs on the group | set `mirror.session_timeout` as the group's `consumer.session.timeout.ms` (consumer protocol, a value other than 45s) | warning |
//! | source | DescribeConfigs on each source topic | copy topic configs to topics it creates | warning |
//! | target | Write on each target topic | produce (also grants the idempotent producer id, KIP-679) | fails |
//! | target | Create on the topic or the cluster | create a missing target topic | fails if needed now |
//! | target | Alter on each target topic | add partitions the source gained | fails if needed now, else warning |
//! | target | DescribeConfigs on each target topic | read `max.message.bytes` | warning |

use std::collections::BTreeMap;
use std::fmt::Write as _;

use strait_wire::error::{AclPrincipal, acl_principal, error_name};
use strait_wire::group::CoordinatorType;
use strait_wire::kafka_protocol::ResponseError;
use strait_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use strait_wire::kafka_protocol::messages::{
    DescribeGroupsRequest, GroupId, MetadataRequest, TopicName,
};
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::{Client, Error as WireError};

use crate::config::connect::connect;
use crate::config::{Config, GroupProtocol};
use crate::error::{Error, Result};
use crate::run::group_timeouts;
use crate::run::topics::{SelectedTopic, Topics};

/// Kafka's ACL operation codes (`AclOperation`), as bit positions in authorized-operation sets.
mod op {
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
    pub const CREATE: u8 = 5;
    pub const ALTER: u8 = 7;
    pub const DESCRIBE_CONFIGS: u8 = 10;
    pub const ALTER_CONFIGS: u8 = 11;
}

/// What `strait check` found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The text to print: reachability, every right with its state and fix, the plan.
    pub text: String,
    /// Rights the run needs that are not granted (non-zero: exit with an error).
    pub missing: usize,
    /// Rights that are not granted but only degrade the run (printed as warnings).
    pub warnings: usize,
    /// The same findings as data, for `strait check --output json`: `principals`, `rights`
    /// (cluster, operation, resource, purpose, status, fix), `notes` and `plan`.
    pub details: serde_json::Value,
}

/// Whether a right is needed for the mirror to work, or only for something optional.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    Required,
    /// Missing it only degrades the run; the text says what happens.
    Optional(String),
}

/// A resource an ACL names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resource {
    Topic(String),
    Group(String),
    /// A topic that is created by name: Create on the topic, or Create on the cluster.
    NewTopic(String),
}

/// One right the run uses.
#[derive(Debug, Clone)]
struct Right {
    side: Side,
    operation: &'static str,
    resource: Resource,
    purpose: String,
    need: Need,
    /// `None`: the broker did not say (the line says why in `unknown`).
    granted: Option<bool>,
    unknown: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Source,
    Target,
}

/// The authorized operations of one cluster's topics and of the cluster itself, as the broker
/// reports them for this connection's principal.
#[derive(Debug, Default)]
struct Authorized {
    /// Per topic: the operation bit set (`None` when the broker sent none).
    topics: BTreeMap<String, TopicState>,
    cluster: Option<i32>,
}

#[derive(Debug, Clone, Copy)]
struct TopicState {
    exists: bool,
    partitions: usize,
    ops: Option<i32>,
}

/// Whether an operation set holds `op`. Kafka sends `i32::MIN` for "not requested/unknown".
fn has(ops: Option<i32>, op: u8) -> Option<bool> {
    ops.filter(|o| *o != i32::MIN).map(|o| o & (1 << op) != 0)
}

/// `strait check`: connects, tests the rights, prints the plan. A `Report` with `missing > 0`
/// means `strait run` would fail; the caller exits non-zero.
pub async fn check(config: &Config) -> Result<Report> {
    let (source, target) = connect(config).await?;
    let topics = Topics::new(source.clone(), target.clone(), config.clone());
    let selected = topics.discover().await?;
    let source_names: Vec<String> = selected.keys().cloned().collect();
    let target_names: Vec<String> = selected.values().map(|t| t.target.clone()).collect();
    let mut notes = Vec::new();
    let src = match authorized(&source, &source_names).await {
        Ok(a) => Some(a),
        Err(e) => {
            notes.push(format!(
                "source {}: cannot read the principal's rights ({e})",
                config.source.alias
            ));
            None
        }
    };
    let dst = match authorized(&target, &target_names).await {
        Ok(a) => Some(a),
        Err(e) => {
            notes.push(format!(
                "target {}: cannot read the principal's rights ({e})",
                config.target.alias
            ));
            None
        }
    };
    let group = group_ops(&source, &config.mirror.group_id).await;
    let rights = rights(
        config,
        &selected,
        src.as_ref(),
        dst.as_ref(),
        group,
        &mut notes,
    );
    let source_principal = acl_principal(source.principal());
    let target_principal = acl_principal(target.principal());
    Ok(render(
        config,
        &selected,
        dst.as_ref(),
        &rights,
        &notes,
        [&source_principal, &target_principal],
    ))
}

/// Topic and cluster authorized operations from one Metadata request.
async fn authorized(client: &Client, names: &[String]) -> strait_wire::Result<Authorized> {
    let conn = client.any_broker().await?;
    // v8-v10 return both topic and cluster operations (v11 dropped the cluster ones).
    let version = conn.pick_version::<MetadataRequest>(8..=10)?;
    let req = MetadataRequest::default()
        .with_topics(Some(
            names
                .iter()
                .map(|n| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
        .with_include_cluster_authorized_operations(true)
        .with_include_topic_authorized_operations(true);
    let resp = conn.send(req, version).await?;
    let mut out = Authorized {
        cluster: Some(resp.cluster_authorized_operations),
        ..Authorized::default()
    };
    for t in resp.topics {
        let Some(name) = t.name else { continue };
        let error = ResponseError::try_from_code(t.error_code);
        let state = match error {
            None => TopicState {
                exists: true,
                partitions: t.partitions.len(),
                ops: Some(t.topic_authorized_operations),
            },
            // Unknown to a principal that may Describe it: the broker still reports what the
            // principal may do with that name (Create, Write once it exists).
            Some(ResponseError::UnknownTopicOrPartition) => TopicState {
                exists: false,
                partitions: 0,
                ops: Some(t.topic_authorized_operations),
            },
            // Not even Describe: no Read, Write, Alter or Delete either (each implies it);
            // whether the topic exists is not disclosed.
            Some(ResponseError::TopicAuthorizationFailed) => TopicState {
                exists: false,
                partitions: 0,
                ops: Some(0),
            },
            Some(_) => TopicState {
                exists: true,
                partitions: t.partitions.len(),
                ops: None,
            },
        };
        out.topics.insert(name.0.to_string(), state);
    }
    Ok(out)
}

/// The principal's operations on the group: `Ok(Some(bits))`, `Ok(None)` when it may not even
/// describe it, or `Err(why)` when the broker did not say. A fresh cluster answers
/// COORDINATOR_LOAD_IN_PROGRESS while it loads the offsets topic: retried for up to
/// [`GROUP_PATIENCE`].
async fn group_ops(client: &Client, group: &str) -> std::result::Result<Option<i32>, String> {
    let deadline = tokio::time::Instant::now() + GROUP_PATIENCE;
    loop {
        match describe_group_once(client, group).await {
            Err(Retry::Later(why)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(group, why, "retrying DescribeGroups");
                client.forget_coordinator(CoordinatorType::Group, group);
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(Retry::Later(why) | Retry::Never(why)) => return Err(why),
            Ok(ops) => return Ok(ops),
        }
    }
}

/// How long `strait check` waits for a group coordinator that is loading or moving.
const GROUP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

enum Retry {
    Later(String),
    Never(String),
}

async fn describe_group_once(
    client: &Client,
    group: &str,
) -> std::result::Result<Option<i32>, Retry> {
    let conn = match client.coordinator(CoordinatorType::Group, group).await {
        Ok(c) => c,
        // FindCoordinator needs Describe on the group, which Read implies.
        Err(WireError::Authorization { .. }) => return Ok(None),
        Err(e) if e.is_retriable() => return Err(Retry::Later(e.to_string())),
        Err(e) => return Err(Retry::Never(e.to_string())),
    };
    // v6 answers a group that does not exist yet with GROUP_ID_NOT_FOUND and no operations;
    // v3-v5 describe it as Dead, with the principal's operations.
    let version = conn
        .pick_version::<DescribeGroupsRequest>(3..=5)
        .map_err(|e| Retry::Never(e.to_string()))?;
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))])
        .with_include_authorized_operations(true);
    let resp = match conn.send(req, version).await {
        Ok(r) => r,
        Err(e) if e.is_retriable() => return Err(Retry::Later(e.to_string())),
        Err(e) => return Err(Retry::Never(e.to_string())),
    };
    let Some(g) = resp.groups.first() else {
        return Err(Retry::Never("the broker described no group".into()));
    };
    match ResponseError::try_from_code(g.error_code) {
        None if g.authorized_operations == i32::MIN => Err(Retry::Never(
            "the broker did not report the group's operations".to_owned(),
        )),
        None => Ok(Some(g.authorized_operations)),
        Some(ResponseError::GroupAuthorizationFailed) => Ok(None),
        Some(
            code @ (ResponseError::CoordinatorLoadInProgress
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator),
        ) => Err(Retry::Later(format!(
            "DescribeGroups answered {}",
            error_name(code)
        ))),
        Some(code) => Err(Retry::Never(format!(
            "DescribeGroups answered {}",
            error_name(code)
        ))),
    }
}

/// Every right the configuration needs, with what the brokers said.
fn rights(
    config: &Config,
    selected: &BTreeMap<String, SelectedTopic>,
    src: Option<&Authorized>,
    dst: Option<&Authorized>,
    group: std::result::Result<Option<i32>, String>,
    notes: &mut Vec<String>,
) -> Vec<Right> {
    let m = &config.mirror;
    let mut out = Vec::new();
    // no Describe on the group: no operation at all
    let (group_bits, group_unknown) = match group {
        Ok(ops) => (Some(ops.unwrap_or(0)), None),
        Err(why) => (None, Some(why)),
    };
    out.push(Right {
        unknown: group_unknown.clone(),
        ..right(
            Side::Source,
            "Read",
            Resource::Group(m.group_id.clone()),
            "join the group and commit the mirrored positions",
            Need::Required,
            has(group_bits, op::READ),
        )
    });
    // On the consumer protocol the session timeout is the group's config (KIP-848): the run
    // sets it only when mirror.session_timeout is not the default, and goes on without it.
    if group_timeouts::wanted(config) && m.group_protocol != GroupProtocol::Classic {
        out.push(Right {
            unknown: group_unknown,
            ..right(
                Side::Source,
                "AlterConfigs",
                Resource::Group(m.group_id.clone()),
                "set mirror.session_timeout as the group's consumer.session.timeout.ms \
                 (consumer group protocol, Kafka 4.0+)",
                Need::Optional(
                    "the group keeps the broker's group.consumer.session.timeout.ms (45s by \
                     default): a crashed instance's partitions wait that long for a new owner"
                        .into(),
                ),
                has(group_bits, op::ALTER_CONFIGS),
            )
        });
    }
    for t in selected.values() {
        source_topic_rights(m, t, src, &mut out);
        target_topic_rights(m, t, dst, &mut out, notes);
    }
    out
}

/// A right the broker did (or did not) say is granted.
fn right(
    side: Side,
    operation: &'static str,
    resource: Resource,
    purpose: &str,
    need: Need,
    granted: Option<bool>,
) -> Right {
    Right {
        side,
        operation,
        resource,
        purpose: purpose.to_owned(),
        need,
        granted,
        unknown: None,
    }
}

/// The rights on the source topic of `t`: Read, and DescribeConfigs when configs are copied.
fn source_topic_rights(
    m: &crate::config::Mirror,
    t: &SelectedTopic,
    src: Option<&Authorized>,
    out: &mut Vec<Right>,
) {
    let s_ops = src
        .and_then(|a| a.topics.get(&t.source))
        .and_then(|s| s.ops);
    out.push(right(
        Side::Source,
        "Read",
        Resource::Topic(t.source.clone()),
        "fetch its records",
        Need::Required,
        has(s_ops, op::READ),
    ));
    if m.create_topics && m.sync_topic_configs {
        out.push(right(
            Side::Source,
            "DescribeConfigs",
            Resource::Topic(t.source.clone()),
            "copy its configs to the target topic strait creates",
            Need::Optional(
                "a target topic strait creates gets the broker's defaults instead of the \
                 source topic's retention, cleanup policy and limits"
                    .into(),
            ),
            has(s_ops, op::DESCRIBE_CONFIGS),
        ));
    }
}

/// The rights on the target topic of `t`: Write, Create when it is missing, Alter,
/// DescribeConfigs and AlterConfigs; a missing topic strait may not create is a note.
fn target_topic_rights(
    m: &crate::config::Mirror,
    t: &SelectedTopic,
    dst: Option<&Authorized>,
    out: &mut Vec<Right>,
    notes: &mut Vec<String>,
) {
    let state = dst.and_then(|a| a.topics.get(&t.target)).copied();
    let d_ops = state.and_then(|s| s.ops);
    let exists = state.is_some_and(|s| s.exists);
    out.push(right(
        Side::Target,
        "Write",
        Resource::Topic(t.target.clone()),
        "produce the mirrored records (Write also grants the idempotent producer id, KIP-679)",
        Need::Required,
        has(d_ops, op::WRITE),
    ));
    if !exists && dst.is_some() {
        if m.create_topics {
            let cluster = has(dst.and_then(|a| a.cluster), op::CREATE);
            let topic = has(d_ops, op::CREATE);
            let granted = match (topic, cluster) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            };
            out.push(right(
                Side::Target,
                "Create",
                Resource::NewTopic(t.target.clone()),
                &format!("create it with {} partitions", t.partitions),
                Need::Required,
                granted,
            ));
        } else if state.is_some_and(|s| s.ops.is_some_and(|o| o != 0)) {
            notes.push(format!(
                "target topic {} does not exist and mirror.create_topics is false: create it \
                 with {} partitions, or set mirror.create_topics = true",
                t.target, t.partitions
            ));
        }
    }
    if m.create_topics {
        let grow_now = state.is_some_and(|s| s.exists && s.partitions < t.partitions as usize);
        out.push(right(
            Side::Target,
            "Alter",
            Resource::Topic(t.target.clone()),
            "add the partitions the source topic gains",
            if grow_now {
                Need::Required
            } else {
                Need::Optional(
                    "when the source topic gains partitions, the new ones are not mirrored \
                     (and the topic refresh fails) until someone adds them on the target"
                        .into(),
                )
            },
            has(d_ops, op::ALTER),
        ));
    }
    out.push(right(
        Side::Target,
        "DescribeConfigs",
        Resource::Topic(t.target.clone()),
        "read its max.message.bytes",
        Need::Optional(
            "strait assumes the broker default max.message.bytes and learns a lower limit \
             only from a rejected batch"
                .into(),
        ),
        has(d_ops, op::DESCRIBE_CONFIGS),
    ));
    if m.sync_topic_configs {
        out.push(right(
            Side::Target,
            "AlterConfigs",
            Resource::Topic(t.target.clone()),
            "copy the source topic's changed configs every mirror.sync_topic_configs_interval",
            Need::Optional(
                "config changes on the source topic do not reach the target (logged at \
                 every sync), and a created topic whose replication factor is below the \
                 cluster's min.insync.replicas keeps refusing writes"
                    .into(),
            ),
            has(d_ops, op::ALTER_CONFIGS),
        ));
    }
}

/// The exact `kafka-acls.sh` command that grants `r` to `principal`.
fn fix(r: &Right, bootstrap: &str, principal: &AclPrincipal) -> String {
    let resource = match &r.resource {
        Resource::Topic(t) | Resource::NewTopic(t) => format!("--topic {t}"),
        Resource::Group(g) => format!("--group {g}"),
    };
    format!(
        "kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {} --operation {} {resource}",
        principal.shell(),
        r.operation
    )
}

fn describe(r: &Right) -> String {
    match &r.resource {
        Resource::Topic(t) => format!("{} on topic {t}", r.operation),
        Resource::NewTopic(t) => format!("{} on topic {t} or on the cluster", r.operation),
        Resource::Group(g) => format!("{} on group {g}", r.operation),
    }
}

fn render(
    config: &Config,
    selected: &BTreeMap<String, SelectedTopic>,
    dst: Option<&Authorized>,
    rights: &[Right],
    notes: &[String],
    principals: [&AclPrincipal; 2],
) -> Report {
    let mut out = String::new();
    let (mut missing, mut warnings) = (0usize, 0usize);
    let _ = writeln!(
        out,
        "source {} and target {} are reachable",
        config.source.alias, config.target.alias
    );
    for (side, p) in [(Side::Source, principals[0]), (Side::Target, principals[1])] {
        let alias = alias(config, side);
        let _ = match p.caveat {
            Some(c) => writeln!(out, "{alias}: the mirror's principal is {} ({c})", p.name),
            None => writeln!(out, "{alias}: the mirror's principal is {}", p.name),
        };
    }
    let _ = writeln!(out, "rights:");
    let mut json_rights = Vec::new();
    for r in rights {
        let (counts, json) = render_right(&mut out, config, r, principals);
        json_rights.push(json);
        match counts {
            Counts::Ok => {}
            Counts::Missing => missing += 1,
            Counts::Warning => warnings += 1,
        }
    }
    for n in notes {
        warnings += 1;
        let _ = writeln!(out, "  warning  {n}");
    }
    if missing > 0 {
        let _ = writeln!(
            out,
            "run the fixes as a cluster admin (on a secured cluster, add --command-config with the \
             admin's client properties); Write and Read also grant Describe"
        );
    }
    if selected.is_empty() {
        let _ = writeln!(
            out,
            "no source topic matches mirror.topics (a topic the principal may not Describe is \
             invisible: grant Read on it)"
        );
    }
    let plan = render_plan(&mut out, config, selected, dst);
    let details = serde_json::json!({
        "principals": {
            "source": principals[0].name,
            "target": principals[1].name,
        },
        "rights": json_rights,
        "notes": notes,
        "plan": plan,
        "missing": missing,
        "warnings": warnings,
    });
    Report {
        text: out,
        missing,
        warnings,
        details,
    }
}

/// How one right counts in the report.
enum Counts {
    Ok,
    Missing,
    Warning,
}

/// One line (with its fix) per right, and the right as `--output json` prints it.
fn render_right(
    out: &mut String,
    config: &Config,
    r: &Right,
    principals: [&AclPrincipal; 2],
) -> (Counts, serde_json::Value) {
    let alias = alias(config, r.side);
    let what = describe(r);
    let (cluster, principal) = match r.side {
        Side::Source => (&config.source, principals[0]),
        Side::Target => (&config.target, principals[1]),
    };
    let bootstrap = cluster
        .property("bootstrap.servers")
        .and_then(|b| b.split(',').next())
        .unwrap_or("<broker>")
        .trim();
    let fix_line = fix(r, bootstrap, principal);
    let json = right_json(r, alias, &what, &fix_line);
    let counts = match (r.granted, &r.need) {
        (Some(true), _) => {
            let _ = writeln!(out, "  ok       {alias}: {what} ({})", r.purpose);
            Counts::Ok
        }
        (Some(false), Need::Required) => {
            let _ = writeln!(
                out,
                "  MISSING  {alias}: {what}, needed to {}\n           fix: {fix_line}",
                r.purpose
            );
            Counts::Missing
        }
        (Some(false), Need::Optional(consequence)) => {
            let _ = writeln!(
                out,
                "  warning  {alias}: {what} is not granted, so {consequence}\n           fix: {fix_line}"
            );
            Counts::Warning
        }
        (None, _) => {
            let why = r
                .unknown
                .as_deref()
                .unwrap_or("the broker did not report the principal's rights");
            let _ = writeln!(
                out,
                "  unknown  {alias}: {what}, needed to {}: {why}",
                r.purpose
            );
            Counts::Warning
        }
    };
    (counts, json)
}

/// The plan: each selected topic and what happens to its target topic.
fn render_plan(
    out: &mut String,
    config: &Config,
    selected: &BTreeMap<String, SelectedTopic>,
    dst: Option<&Authorized>,
) -> Vec<serde_json::Value> {
    let _ = writeln!(out, "plan ({} topics):", selected.len());
    let mut plan = Vec::new();
    for t in selected.values() {
        let state = dst.and_then(|a| a.topics.get(&t.target));
        let state = match state {
            Some(s) if s.exists && s.partitions >= t.partitions as usize => "exists".to_string(),
            Some(s) if s.exists => format!("exists with {} partitions, will grow", s.partitions),
            _ if config.mirror.create_topics => "will be created".to_string(),
            _ => "MISSING (mirror.create_topics = false)".to_string(),
        };
        let _ = writeln!(
            out,
            "  {} [{} partitions] -> {} ({state})",
            t.source, t.partitions, t.target
        );
        plan.push(serde_json::json!({
            "source_topic": t.source,
            "partitions": t.partitions,
            "target_topic": t.target,
            "state": state,
        }));
    }
    plan
}

/// One right as `--output json` prints it; `status` is `ok`, `missing`, `warning` (an optional
/// right not granted) or `unknown`.
fn right_json(r: &Right, alias: &str, what: &str, fix: &str) -> serde_json::Value {
    let (status, consequence) = match (r.granted, &r.need) {
        (Some(true), _) => ("ok", None),
        (Some(false), Need::Required) => ("missing", None),
        (Some(false), Need::Optional(c)) => ("warning", Some(c.as_str())),
        (None, _) => ("unknown", None),
    };
    let (kind, name) = match &r.resource {
        Resource::Topic(t) => ("topic", t),
        Resource::NewTopic(t) => ("topic_or_cluster", t),
        Resource::Group(g) => ("group", g),
    };
    serde_json::json!({
        "cluster": alias,
        "side": match r.side { Side::Source => "source", Side::Target => "target" },
        "operation": r.operation,
        "resource_type": kind,
        "resource": name,
        "right": what,
        "purpose": r.purpose,
        "status": status,
        "consequence": consequence,
        "why_unknown": r.unknown,
        "fix": (status != "ok").then_some(fix),
    })
}

fn alias(config: &Config, side: Side) -> &str {
    match side {
        Side::Source => &config.source.alias,
        Side::Target => &config.target.alias,
    }
}

impl Report {
    /// The error `strait check` exits with (after printing the report) when something the run
    /// needs is missing.
    pub fn failure(&self) -> Option<Error> {
        (self.missing > 0).then_some(Error::RightsMissing {
            missing: self.missing,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::Environment;

    fn config(extra: &str) -> Config {
        Config::from_toml_str(
            &format!(
                "[source]\nalias = \"europe\"\n\"bootstrap.servers\" = \"europe:9093\"\n\
                 [target]\nalias = \"us\"\n\"bootstrap.servers\" = \"us:9093,us2:9093\"\n\
                 [mirror]\ngroup_id = \"my-group\"\n{extra}"
            ),
            std::path::Path::new("t.toml"),
            &Environment::default(),
        )
        .unwrap()
        .config
    }

    fn my_topic() -> BTreeMap<String, SelectedTopic> {
        BTreeMap::from([(
            "my-topic".to_string(),
            SelectedTopic {
                source: "my-topic".into(),
                target: "my-topic".into(),
                partitions: 12,
            },
        )])
    }

    fn bits(ops: &[u8]) -> i32 {
        ops.iter().fold(0, |acc, o| acc | (1 << o))
    }

    fn cluster(topic_ops: &[u8], exists: bool, cluster_ops: &[u8]) -> Authorized {
        Authorized {
            topics: BTreeMap::from([(
                "my-topic".to_string(),
                TopicState {
                    exists,
                    partitions: if exists { 12 } else { 0 },
                    ops: Some(bits(topic_ops)),
                },
            )]),
            cluster: Some(bits(cluster_ops)),
        }
    }

    const DESCRIBE: u8 = 8;

    fn report(c: &Config, src: &Authorized, dst: &Authorized, group: bool) -> Report {
        let mut notes = Vec::new();
        let selected = my_topic();
        let ops = if group {
            bits(&[op::READ, DESCRIBE])
        } else {
            0
        };
        let rights = rights(
            c,
            &selected,
            Some(src),
            Some(dst),
            Ok(Some(ops)),
            &mut notes,
        );
        render(
            c,
            &selected,
            Some(dst),
            &rights,
            &notes,
            [
                &acl_principal(Some("CN=my-europe-user")),
                &acl_principal(Some("CN=my-us-user")),
            ],
        )
    }

    /// The reference scenario's target user without Write: the one missing right is named,
    /// with the exact grant.
    #[test]
    fn missing_write_on_the_target_topic_is_named_with_its_grant() {
        let c = config("");
        let src = cluster(&[op::READ, DESCRIBE], true, &[]);
        let dst = cluster(&[DESCRIBE, op::CREATE], false, &[]);
        let r = report(&c, &src, &dst, true);
        assert_eq!(r.missing, 1, "{}", r.text);
        assert!(
            r.text.contains(
                "  MISSING  us: Write on topic my-topic, needed to produce the mirrored records \
                 (Write also grants the idempotent producer id, KIP-679)\n           fix: \
                 kafka-acls.sh --bootstrap-server us:9093 --add --allow-principal \
                 User:CN=my-us-user --operation Write --topic my-topic\n"
            ),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains("  ok       us: Create on topic my-topic or on the cluster"),
            "{}",
            r.text
        );
        assert!(r.text.contains("  ok       europe: Read on group my-group"));
        assert!(
            r.text
                .contains("my-topic [12 partitions] -> my-topic (will be created)")
        );
        assert!(!r.text.contains("IdempotentWrite"), "{}", r.text);
        assert_eq!(
            r.failure().unwrap().to_string(),
            "1 right the mirror needs is missing; grant it with the kafka-acls.sh command above, \
             then run strait check again"
        );
    }

    #[test]
    fn the_reference_scenario_grants_pass_with_warnings_for_optional_rights() {
        let c = config("");
        // Read, Describe, Write, Create on my-topic; Read on my-group (the walkthrough's ACLs).
        let grants = [op::READ, DESCRIBE, op::WRITE, op::CREATE];
        let r = report(
            &c,
            &cluster(&grants, true, &[]),
            &cluster(&grants, false, &[]),
            true,
        );
        assert_eq!(r.missing, 0, "{}", r.text);
        // DescribeConfigs on both sides, Alter and AlterConfigs on the target are not in the
        // walkthrough.
        assert_eq!(r.warnings, 4, "{}", r.text);
        assert!(
            r.text
                .contains("AlterConfigs on topic my-topic is not granted"),
            "{}",
            r.text
        );
        assert!(r.text.contains(
            "  warning  us: Alter on topic my-topic is not granted, so when the source topic \
             gains partitions"
        ));
        assert!(r.failure().is_none());
    }

    #[test]
    fn cluster_create_is_enough_and_group_and_source_read_are_required() {
        let c = config("sync_topic_configs = false");
        let r = report(
            &c,
            &cluster(&[DESCRIBE], true, &[]),
            &cluster(&[op::WRITE, DESCRIBE], false, &[op::CREATE]),
            false,
        );
        assert!(
            r.text
                .contains("  ok       us: Create on topic my-topic or on the cluster")
        );
        assert_eq!(r.missing, 2, "{}", r.text);
        assert!(r.text.contains(
            "fix: kafka-acls.sh --bootstrap-server europe:9093 --add --allow-principal \
             User:CN=my-europe-user --operation Read --group my-group"
        ));
        assert!(r.text.contains("--operation Read --topic my-topic"));
        assert!(
            !r.text
                .contains("DescribeConfigs on topic my-topic is not granted, so a target")
        );
    }

    #[test]
    fn growth_needed_now_makes_alter_required() {
        let c = config("");
        let mut dst = cluster(&[op::WRITE, DESCRIBE], true, &[]);
        if let Some(s) = dst.topics.get_mut("my-topic") {
            s.partitions = 6;
        }
        let r = report(&c, &cluster(&[op::READ], true, &[]), &dst, true);
        assert!(
            r.text.contains("  MISSING  us: Alter on topic my-topic"),
            "{}",
            r.text
        );
        assert!(r.text.contains("exists with 6 partitions, will grow"));
    }

    /// A session timeout other than 45s on the consumer protocol is the group's config: its
    /// AlterConfigs right is listed (optional: the run goes on with the broker's default).
    #[test]
    fn a_session_timeout_lists_alter_configs_on_the_group() {
        let grants = [op::READ, DESCRIBE, op::WRITE, op::CREATE];
        let (src, dst) = (cluster(&grants, true, &[]), cluster(&grants, true, &[]));
        let with = |extra: &str, group: Option<i32>| {
            let c = config(extra);
            let selected = my_topic();
            let mut notes = Vec::new();
            let rights = rights(&c, &selected, Some(&src), Some(&dst), Ok(group), &mut notes);
            render(
                &c,
                &selected,
                Some(&dst),
                &rights,
                &notes,
                [&acl_principal(Some("CN=a")), &acl_principal(Some("CN=b"))],
            )
        };
        let r = with(
            "session_timeout = \"10s\"",
            Some(bits(&[op::READ, DESCRIBE])),
        );
        assert_eq!(r.missing, 0, "{}", r.text);
        assert!(
            r.text.contains(
                "  warning  europe: AlterConfigs on group my-group is not granted, so the group \
                 keeps the broker's group.consumer.session.timeout.ms (45s by default)"
            ),
            "{}",
            r.text
        );
        assert!(r.text.contains(
            "fix: kafka-acls.sh --bootstrap-server europe:9093 --add --allow-principal \
             User:CN=a --operation AlterConfigs --group my-group"
        ));
        let granted = with(
            "session_timeout = \"10s\"",
            Some(bits(&[op::READ, DESCRIBE, op::ALTER_CONFIGS])),
        );
        assert!(
            granted
                .text
                .contains("  ok       europe: AlterConfigs on group my-group"),
            "{}",
            granted.text
        );
        // the default session timeout, or the classic protocol, never alters the group
        for extra in [
            "",
            "session_timeout = \"10s\"\ngroup_protocol = \"classic\"",
        ] {
            let r = with(extra, Some(bits(&[op::READ, DESCRIBE])));
            assert!(
                !r.text.contains("on group my-group is not granted"),
                "{}",
                r.text
            );
        }
        // no Describe on the group: Read is missing, and so is AlterConfigs
        let denied = with("session_timeout = \"10s\"", None);
        assert_eq!(denied.missing, 1, "{}", denied.text);
        assert!(
            denied
                .text
                .contains("AlterConfigs on group my-group is not granted")
        );
    }

    #[test]
    fn unknown_operations_are_reported_not_guessed() {
        assert_eq!(has(Some(i32::MIN), op::READ), None);
        assert_eq!(has(None, op::READ), None);
        assert_eq!(has(Some(bits(&[op::READ])), op::READ), Some(true));
        assert_eq!(has(Some(bits(&[op::READ])), op::WRITE), Some(false));
    }
}
