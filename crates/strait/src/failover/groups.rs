//! The source and target clusters' consumer groups as the failover commands and the checkpoint
//! task read them: which groups there are (ListGroups), and how many members a group has.
//!
//! Kafka 4 has two group protocols with a describe call each: DescribeGroups shows members of
//! the classic protocol only, ConsumerGroupDescribe those of the consumer protocol (KIP-848).
//! ListGroups v5 says which protocol each group uses, so a group listed with its type is
//! described with the right call once; a group without a type (brokers before ListGroups v5,
//! or a group the listing did not show) is asked with DescribeGroups first and, when that shows
//! no member, with ConsumerGroupDescribe.

use std::collections::BTreeMap;
use std::time::Duration;

use strait_wire::group::CoordinatorType;
use strait_wire::kafka_protocol::ResponseError;
use strait_wire::kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest,
};
use strait_wire::kafka_protocol::protocol::StrBytes;
use strait_wire::{Client, Connection};

use crate::error::{Error, Result};

/// Which describe call shows a group's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupKind {
    /// The classic protocol (ListGroups type `classic`): DescribeGroups.
    Classic,
    /// The consumer protocol (type `consumer`, KIP-848): ConsumerGroupDescribe.
    Consumer,
    /// Not known (no type in the listing, another type, or not listed): DescribeGroups, then
    /// ConsumerGroupDescribe when it shows no member.
    Unknown,
}

impl GroupKind {
    /// The kind of a ListGroups `group_type` (empty before v5).
    fn of(group_type: &str) -> GroupKind {
        match group_type {
            "classic" => GroupKind::Classic,
            "consumer" => GroupKind::Consumer,
            _ => GroupKind::Unknown,
        }
    }
}

/// Every group of a cluster with its kind, by name.
pub(crate) type Groups = BTreeMap<String, GroupKind>;

/// Every consumer group of the cluster (ListGroups to each broker: each lists the groups it
/// coordinates), sorted.
pub(crate) async fn list_groups(client: &Client) -> Result<Vec<String>> {
    Ok(list_groups_with_kinds(client).await?.into_keys().collect())
}

/// Every consumer group of the cluster with its kind (ListGroups v5 and later say it).
pub(crate) async fn list_groups_with_kinds(client: &Client) -> Result<Groups> {
    let mut nodes: Vec<i32> = client.cached_metadata().brokers.keys().copied().collect();
    if nodes.is_empty() {
        nodes = client
            .metadata(Some(&[]))
            .await
            .map_err(Error::Wire)?
            .brokers
            .keys()
            .copied()
            .collect();
    }
    let mut groups = Groups::new();
    for node in nodes {
        let conn = client.broker(node).await.map_err(Error::Wire)?;
        let version = conn
            .pick_version::<ListGroupsRequest>(0..=5)
            .map_err(Error::Wire)?;
        let resp = conn
            .send(ListGroupsRequest::default(), version)
            .await
            .map_err(Error::Wire)?;
        if let Some(code) = ResponseError::try_from_code(resp.error_code) {
            return Err(Error::Runtime(format!(
                "ListGroups on broker {node} answered {code:?}; the mirror's principal needs \
                 Describe on the groups to checkpoint"
            )));
        }
        for g in resp.groups {
            groups.insert(g.group_id.0.to_string(), GroupKind::of(&g.group_type));
        }
    }
    Ok(groups)
}

/// The number of active members of `group` of `kind` (see [`GroupKind`]) on its coordinator.
/// A coordinator that is loading, moving or not there yet (a cluster whose offsets topic does
/// not exist yet answers NOT_COORDINATOR at first) is asked again for up to 30 s.
pub(crate) async fn active_members(client: &Client, group: &str, kind: GroupKind) -> Result<usize> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let code = match describe_once(client, group, kind).await {
            Ok(Ok(members)) => return Ok(members),
            Ok(Err(code)) => code,
            Err(e) if e.is_retriable() && tokio::time::Instant::now() < deadline => {
                client.forget_coordinator(CoordinatorType::Group, group);
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(e) => return Err(Error::Wire(e)),
        };
        let retriable = matches!(
            code,
            ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress
        );
        if !retriable || tokio::time::Instant::now() >= deadline {
            return Err(Error::Runtime(format!(
                "describing group {group} answered {code:?}"
            )));
        }
        client.forget_coordinator(CoordinatorType::Group, group);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One describe of `group` on its coordinator: the member count, or the group's error code.
async fn describe_once(
    client: &Client,
    group: &str,
    kind: GroupKind,
) -> strait_wire::Result<std::result::Result<usize, ResponseError>> {
    let conn = client.coordinator(CoordinatorType::Group, group).await?;
    if kind == GroupKind::Consumer
        && let Some(members) = consumer_group_members(&conn, group).await?
    {
        return Ok(members);
    }
    let version = conn.pick_version::<DescribeGroupsRequest>(0..=5)?;
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let resp = conn.send(req, version).await?;
    let Some(g) = resp.groups.first() else {
        return Ok(Err(ResponseError::UnknownServerError));
    };
    Ok(match ResponseError::try_from_code(g.error_code) {
        None if !g.members.is_empty() => Ok(g.members.len()),
        None | Some(ResponseError::GroupIdNotFound) if kind == GroupKind::Classic => Ok(0),
        // DescribeGroups shows only members of the classic protocol: Kafka 4's coordinator
        // answers it for a group of the consumer protocol (which strait's own mirror uses by
        // default there) without members or as not found. A group of unknown kind is asked
        // that protocol's own call before it counts as empty.
        None | Some(ResponseError::GroupIdNotFound) => {
            consumer_group_members(&conn, group).await?.unwrap_or(Ok(0))
        }
        Some(code) => Err(code),
    })
}

/// The member count of a consumer-protocol group (ConsumerGroupDescribe, KIP-848); a group the
/// broker does not know has none. None: the broker has no such call.
async fn consumer_group_members(
    conn: &Connection,
    group: &str,
) -> strait_wire::Result<Option<std::result::Result<usize, ResponseError>>> {
    let Ok(version) = conn.pick_version::<ConsumerGroupDescribeRequest>(0..=1) else {
        return Ok(None);
    };
    let req = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let resp = conn.send(req, version).await?;
    let Some(g) = resp.groups.first() else {
        return Ok(Some(Err(ResponseError::UnknownServerError)));
    };
    Ok(Some(match ResponseError::try_from_code(g.error_code) {
        None | Some(ResponseError::GroupIdNotFound) => Ok(g.members.len()),
        Some(code) => Err(code),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_type_picks_the_describe_call() {
        assert_eq!(GroupKind::of("classic"), GroupKind::Classic);
        assert_eq!(GroupKind::of("consumer"), GroupKind::Consumer);
        // Before ListGroups v5 there is no type; share and streams groups are asked both ways.
        for other in ["", "share", "streams"] {
            assert_eq!(GroupKind::of(other), GroupKind::Unknown, "{other:?}");
        }
    }
}
