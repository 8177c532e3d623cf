//! strait-wire against one real Kafka 4.x broker: group coordinator requests have their own
//! connection, so a JoinGroup the coordinator holds does not stall fetches to the same broker.
//!
//! Kafka serves one connection's requests strictly in order, and the coordinator answers a
//! JoinGroup only once every member has rejoined (up to the rebalance timeout). When group
//! requests shared the data connection, a Fetch sent to the coordinator's broker while a
//! JoinGroup was held waited behind it, and timed out after `request.timeout.ms`.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_coordinator:: --nocapture`
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use strait_testkit::Cluster;
use strait_wire::admin::{Admin, CreateTopicOutcome, NewTopic};
use strait_wire::group::{CoordinatorType, GroupConfig, GroupEvent, GroupMember, Revocation};
use strait_wire::{Client, ClientConfig, FetchOptions, FetchPartition, TopicPartition};

/// Generous upper bound for one step on a loaded 2-core machine: the test only fails if
/// nothing happens for this long, never on how long something took.
const PATIENCE: Duration = Duration::from_secs(90);

/// How long the coordinator may hold a JoinGroup: far longer than the test needs.
const REBALANCE_TIMEOUT: Duration = Duration::from_secs(240);

async fn client(cluster: &Cluster, request_timeout_ms: &str) -> Client {
    let mut props = cluster.client_properties(cluster.default_listener(), None);
    props.push(("request.timeout.ms".into(), request_timeout_ms.into()));
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

fn config(group: &str, topic: &str) -> GroupConfig {
    GroupConfig::new(group, [topic])
        .unwrap()
        // Longer than the whole test, so the held member is not expelled meanwhile.
        .with_session_timeout(Duration::from_secs(120))
        .unwrap()
        .with_heartbeat_interval(Duration::from_millis(500))
        .unwrap()
        .with_rebalance_timeout(REBALANCE_TIMEOUT)
        .unwrap()
}

/// Waits for the next event of `m` that `want` accepts; fails on a member failure.
async fn next<T>(
    m: &mut GroupMember,
    who: &str,
    mut want: impl FnMut(GroupEvent) -> Option<T>,
) -> T {
    let work = async {
        loop {
            match m.next_event().await {
                Some(GroupEvent::Failed(e)) => panic!("{who} failed: {e}"),
                Some(e) => {
                    eprintln!("{who}: {e:?}");
                    if let Some(t) = want(e) {
                        return t;
                    }
                }
                None => panic!("{who} stopped"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, work)
        .await
        .unwrap_or_else(|_| panic!("{who}: no such event within {PATIENCE:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_join_group_does_not_stall_fetches_to_the_same_broker() {
    let cluster =
        tokio::task::spawn_blocking(|| Cluster::builder("wire-coordinator").start().unwrap())
            .await
            .unwrap();
    let topic = "coordinator-conn";
    let group = "coordinator-conn-group";
    let admin = client(&cluster, "30000").await;
    let outcome = Admin::new(&admin)
        .create_topic(&NewTopic::new(topic, 1, 1))
        .await
        .unwrap();
    assert!(
        matches!(outcome, CreateTopicOutcome::Created { .. }),
        "{outcome:?}"
    );
    let tp = TopicPartition::new(topic, 0).unwrap();

    // Member a joins alone and gets the partition.
    let client_a = client(&cluster, "30000").await;
    let mut a = GroupMember::join(&client_a, config(group, topic))
        .await
        .unwrap();
    next(&mut a, "a", |e| {
        matches!(e, GroupEvent::Assigned { .. }).then_some(())
    })
    .await;

    // The client under test, with its routes settled before anything is held: the group's
    // coordinator and the partition's leader are the same broker (one node). Nothing on this
    // client needs metadata or a coordinator lookup from here on. request.timeout.ms 15 s:
    // with one shared connection, the fetch below fails after that.
    let client_b = client(&cluster, "15000").await;
    let coordinator = client_b
        .coordinator(CoordinatorType::Group, group)
        .await
        .unwrap();
    let leader = client_b.partition_leader(&tp, false).await.unwrap().leader;
    assert_eq!(coordinator.node_id(), Some(leader));
    let data = client_b.broker(leader).await.unwrap();

    // Member b joins through that client. Its JoinGroup starts a rebalance, and the
    // coordinator holds it until a rejoins. a learns of the rebalance from a heartbeat answer
    // and is told to revoke: that proves the coordinator has b's JoinGroup. Holding the
    // revocation keeps a from rejoining, so b's JoinGroup stays held.
    let mut b = GroupMember::join(&client_b, config(group, topic))
        .await
        .unwrap();
    let held: Revocation = next(&mut a, "a", |e| match e {
        GroupEvent::Revoked {
            lost: false, done, ..
        } => Some(done),
        _ => None,
    })
    .await;
    assert!(
        b.generation().is_none(),
        "b joined although a has not rejoined"
    );

    // A fetch from that broker over the client's data connection, without retries: it comes
    // back while b's JoinGroup is still held.
    let options = FetchOptions {
        max_wait: Duration::from_millis(100),
        ..FetchOptions::default()
    };
    let fetched = tokio::time::timeout(
        PATIENCE,
        data.fetch(&[FetchPartition::new(tp.clone(), 0)], &options),
    )
    .await
    .expect("the fetch never returned")
    .expect("the fetch failed (queued behind the held JoinGroup?)");
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0].error, None, "{:?}", fetched[0]);
    assert!(
        b.generation().is_none(),
        "the fetch came back only after b's JoinGroup was answered"
    );

    // Releasing a lets it rejoin; then b's held JoinGroup completes: it really was held, not
    // failed.
    drop(held);
    next(&mut b, "b", |e| {
        matches!(e, GroupEvent::Assigned { .. }).then_some(())
    })
    .await;
    assert!(b.generation().is_some());

    // Let a follow the rebalance before leaving, so closing does not race it.
    next(&mut a, "a", |e| {
        matches!(e, GroupEvent::Assigned { .. }).then_some(())
    })
    .await;
    b.close().await.unwrap();
    a.close().await.unwrap();
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}
