//! strait-wire consumer groups against a real Kafka cluster (one cluster for the whole file):
//! two members split a topic, a closing member hands everything to the survivor, a crashed
//! member is expelled after its session timeout, commits follow the generation rules, and a
//! member notices new partitions.
//!
//! Runs against Kafka 4.x and 3.9 (two clusters).
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_group:: --nocapture`
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use strait_testkit::{Cluster, KafkaVersion};
use strait_wire::admin::{Admin, CreateTopicOutcome, NewTopic};
use strait_wire::group::{Generation, GroupConfig, GroupEvent, GroupMember};
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Client, ClientConfig, ResponseError, TopicPartition};

/// Generous upper bound for one rebalance on a loaded 2-core machine (never a wall-clock
/// assertion: the test only fails if nothing happens for this long).
const PATIENCE: Duration = Duration::from_secs(90);

async fn client(cluster: &Cluster) -> Client {
    let props = cluster.client_properties(cluster.default_listener(), None);
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

fn config(group: &str, topic: &str) -> GroupConfig {
    GroupConfig::new(group, [topic])
        .unwrap()
        // The broker's minimum (group.min.session.timeout.ms = 6000).
        .with_session_timeout(Duration::from_secs(6))
        .unwrap()
        .with_heartbeat_interval(Duration::from_millis(500))
        .unwrap()
        .with_rebalance_timeout(Duration::from_secs(30))
        .unwrap()
}

async fn create_topic(client: &Client, name: &str, partitions: i32) {
    let outcome = Admin::new(client)
        .create_topic(&NewTopic::new(name, partitions, 1))
        .await
        .unwrap();
    assert!(
        matches!(outcome, CreateTopicOutcome::Created { .. }),
        "{outcome:?}"
    );
    // CreateTopics answers once the controller committed the topic; the broker's metadata cache
    // follows (seconds later on a loaded machine), and a member that joins before it sees the
    // topic is assigned nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let md = client.metadata(Some(&[name.to_owned()])).await.unwrap();
        let seen = md
            .topic(name)
            .filter(|t| t.error.is_none())
            .map_or(0, |t| t.partitions.len());
        if seen == partitions as usize || std::time::Instant::now() > deadline {
            assert_eq!(
                seen, partitions as usize,
                "{name}: metadata never showed it"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The latest known assignment of one member (None while revoked).
type Latest = Option<(Generation, Vec<TopicPartition>)>;

/// Applies one event: revocations are released at once (after running `on_revoke`).
fn apply(latest: &mut Latest, event: GroupEvent, who: &str) {
    match event {
        GroupEvent::Assigned {
            generation,
            partitions,
        } => {
            eprintln!(
                "{who}: assigned {} partitions in generation {}",
                partitions.len(),
                generation.generation_id
            );
            *latest = Some((generation, partitions));
        }
        GroupEvent::Revoked {
            partitions, lost, ..
        } => {
            eprintln!(
                "{who}: revoked {} partitions (lost: {lost})",
                partitions.len()
            );
            *latest = None;
        }
        GroupEvent::Failed(e) => panic!("{who} failed: {e}"),
        other => panic!("{who}: unexpected event {other:?}"),
    }
}

/// Pumps both members' events until they hold assignments of one generation.
async fn until_same_generation(
    a: &mut GroupMember,
    b: &mut GroupMember,
) -> (
    (Generation, Vec<TopicPartition>),
    (Generation, Vec<TopicPartition>),
) {
    let mut la: Latest = None;
    let mut lb: Latest = None;
    let work = async {
        loop {
            if let (Some((ga, _)), Some((gb, _))) = (&la, &lb)
                && ga.generation_id == gb.generation_id
            {
                return;
            }
            tokio::select! {
                e = a.next_event() => apply(&mut la, e.expect("member a stopped"), "a"),
                e = b.next_event() => apply(&mut lb, e.expect("member b stopped"), "b"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, work)
        .await
        .expect("the two members never settled on one generation");
    (la.unwrap(), lb.unwrap())
}

/// Next Assigned event of one member, releasing revocations on the way.
async fn next_assignment(m: &mut GroupMember, who: &str) -> (Generation, Vec<TopicPartition>) {
    let work = async {
        let mut latest: Latest = None;
        loop {
            apply(
                &mut latest,
                m.next_event().await.expect("member stopped"),
                who,
            );
            if let Some(a) = latest.take() {
                return a;
            }
        }
    };
    tokio::time::timeout(PATIENCE, work)
        .await
        .expect("no assignment arrived")
}

fn all_partitions(topic: &str, n: i32) -> BTreeSet<TopicPartition> {
    (0..n)
        .map(|p| TopicPartition::new(topic, p).unwrap())
        .collect()
}

fn assert_split(a: &[TopicPartition], b: &[TopicPartition], topic: &str, n: i32) {
    let sa: BTreeSet<_> = a.iter().cloned().collect();
    let sb: BTreeSet<_> = b.iter().cloned().collect();
    assert!(sa.is_disjoint(&sb), "overlap: {sa:?} / {sb:?}");
    let union: BTreeSet<_> = sa.union(&sb).cloned().collect();
    assert_eq!(union, all_partitions(topic, n));
}

fn offsets(parts: &[TopicPartition], base: i64) -> Vec<CommitOffset> {
    parts
        .iter()
        .map(|tp| CommitOffset::new(tp.clone(), base + i64::from(tp.partition())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_on_kafka_4() {
    run_all(KafkaVersion::V4).await;
}

/// The 3.9 line still runs the old (Scala) group coordinator, with different code paths for
/// the classic protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_on_kafka_3_9() {
    run_all(KafkaVersion::V3_9).await;
}

async fn run_all(version: KafkaVersion) {
    let name = match version {
        KafkaVersion::V3_9 => "groups-3-9",
        _ => "groups-4",
    };
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::builder(name).version(version).start().unwrap()
    })
    .await
    .unwrap();
    let admin_client = client(&cluster).await;

    split_leave_and_commit(&cluster, &admin_client).await;
    crashed_member_is_expelled(&cluster, &admin_client).await;
    simple_group_commits(&admin_client).await;
    new_partitions_trigger_a_rebalance(&cluster, &admin_client).await;

    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

/// (a) 6 partitions split 3+3, commits with the generation, close hands everything over,
/// commits from the old generation are refused, OffsetFetch reads what was committed.
async fn split_leave_and_commit(cluster: &Cluster, admin: &Client) {
    let topic = "split-topic";
    let group = "split-group";
    create_topic(admin, topic, 6).await;

    let mut a = GroupMember::join(&client(cluster).await, config(group, topic))
        .await
        .unwrap();
    let mut b = GroupMember::join(&client(cluster).await, config(group, topic))
        .await
        .unwrap();
    let ((ga, pa), (gb, pb)) = until_same_generation(&mut a, &mut b).await;
    assert_split(&pa, &pb, topic, 6);
    assert_eq!((pa.len(), pb.len()), (3, 3), "range: 6 partitions -> 3 + 3");
    assert_ne!(ga.member_id, gb.member_id);
    assert!(
        !ga.member_id.is_empty(),
        "KIP-394 two-step join gave a member id"
    );

    a.commit(&ga, &offsets(&pa, 100)).await.unwrap();
    b.commit(&gb, &offsets(&pb, 100)).await.unwrap();
    let committed = a
        .committed(&pa.iter().chain(&pb).cloned().collect::<Vec<_>>())
        .await
        .unwrap();
    for (tp, c) in &committed {
        assert_eq!(
            c.as_ref().map(|c| c.offset),
            Some(100 + i64::from(tp.partition())),
            "{tp}"
        );
    }

    // b leaves cleanly: a is asked to revoke; during the revocation the old generation can
    // still commit (what a mirror does before releasing partitions).
    b.close().await.unwrap();
    let revoked = tokio::time::timeout(PATIENCE, a.next_event())
        .await
        .expect("no revocation after the other member left")
        .expect("member a stopped");
    let GroupEvent::Revoked {
        partitions,
        lost,
        done,
    } = revoked
    else {
        panic!("expected Revoked, got {revoked:?}");
    };
    assert!(!lost);
    assert_eq!(partitions, pa);
    a.commit(&ga, &offsets(&pa, 200)).await.unwrap();
    done.done();

    let (ga2, pa2) = next_assignment(&mut a, "a").await;
    assert!(ga2.generation_id > ga.generation_id);
    assert_eq!(
        pa2.iter().cloned().collect::<BTreeSet<_>>(),
        all_partitions(topic, 6)
    );
    assert_eq!(a.assignment(), pa2);

    // The old generation is refused locally, and by the broker when the local check is bypassed.
    let err = a.commit(&ga, &offsets(&pa, 300)).await.unwrap_err();
    assert!(err.is_stale_membership(), "{err}");
    let err = GroupOffsets::new(admin, group)
        .commit(&ga, &offsets(&pa, 300))
        .await
        .unwrap_err();
    assert!(err.is_stale_membership(), "{err}");
    assert_eq!(err.code(), Some(ResponseError::IllegalGeneration), "{err}");

    // Nothing of the refused commits landed; the revocation commit did.
    let committed = GroupOffsets::new(admin, group).fetch(&pa2).await.unwrap();
    for tp in &pa {
        let want = 200 + i64::from(tp.partition());
        assert_eq!(committed[tp].as_ref().map(|c| c.offset), Some(want), "{tp}");
    }
    for tp in &pb {
        let want = 100 + i64::from(tp.partition());
        assert_eq!(committed[tp].as_ref().map(|c| c.offset), Some(want), "{tp}");
    }

    // The survivor commits everything with its new generation.
    a.commit(&ga2, &offsets(&pa2, 500)).await.unwrap();
    let committed = a.committed(&pa2).await.unwrap();
    assert!(
        committed
            .iter()
            .all(|(tp, c)| c.as_ref().map(|c| c.offset) == Some(500 + i64::from(tp.partition())))
    );
    a.close().await.unwrap();
}

/// A member dropped without LeaveGroup is removed after the session timeout and the survivor
/// takes over its partitions.
async fn crashed_member_is_expelled(cluster: &Cluster, admin: &Client) {
    let topic = "crash-topic";
    let group = "crash-group";
    create_topic(admin, topic, 6).await;
    let mut survivor = GroupMember::join(&client(cluster).await, config(group, topic))
        .await
        .unwrap();
    let mut doomed = GroupMember::join(&client(cluster).await, config(group, topic))
        .await
        .unwrap();
    let ((gs, ps), (_, pd)) = until_same_generation(&mut survivor, &mut doomed).await;
    assert_split(&ps, &pd, topic, 6);

    drop(doomed); // no LeaveGroup: heartbeats just stop
    let (gs2, ps2) = next_assignment(&mut survivor, "survivor").await;
    assert!(gs2.generation_id > gs.generation_id);
    assert_eq!(
        ps2.into_iter().collect::<BTreeSet<_>>(),
        all_partitions(topic, 6)
    );
    survivor.close().await.unwrap();
}

/// Commits without membership (generation -1) work on an empty group and are refused while the
/// group has members.
async fn simple_group_commits(admin: &Client) {
    let topic = "simple-topic";
    create_topic(admin, topic, 2).await;
    let tp0 = TopicPartition::new(topic, 0).unwrap();
    let tp1 = TopicPartition::new(topic, 1).unwrap();
    let offsets_api = GroupOffsets::new(admin, "simple-group");
    let mut with_meta = CommitOffset::new(tp0.clone(), 42);
    with_meta.metadata = Some("from-strait".into());
    offsets_api
        .commit(&Generation::simple(), &[with_meta])
        .await
        .unwrap();
    let got = offsets_api
        .fetch(&[tp0.clone(), tp1.clone()])
        .await
        .unwrap();
    let c0 = got[&tp0].as_ref().unwrap();
    assert_eq!(c0.offset, 42);
    assert_eq!(c0.metadata.as_deref(), Some("from-strait"));
    assert_eq!(got[&tp1], None, "nothing committed for partition 1");

    // A group with a live member refuses memberless commits.
    let mut m = GroupMember::join(admin, config("busy-group", topic))
        .await
        .unwrap();
    next_assignment(&mut m, "busy").await;
    let err = GroupOffsets::new(admin, "busy-group")
        .commit(&Generation::simple(), &[CommitOffset::new(tp0, 1)])
        .await
        .unwrap_err();
    assert!(err.is_stale_membership(), "{err}");
    m.close().await.unwrap();
}

/// When a subscribed topic grows, the member rejoins and gets the new partitions.
async fn new_partitions_trigger_a_rebalance(cluster: &Cluster, admin: &Client) {
    let topic = "growing-topic";
    create_topic(admin, topic, 2).await;
    let cfg =
        config("growing-group", topic).with_metadata_check_interval(Duration::from_millis(500));
    let mut m = GroupMember::join(&client(cluster).await, cfg)
        .await
        .unwrap();
    let (_, before) = next_assignment(&mut m, "grower").await;
    assert_eq!(before.len(), 2);
    Admin::new(admin).create_partitions(topic, 5).await.unwrap();
    let (_, after) = next_assignment(&mut m, "grower").await;
    assert_eq!(
        after.into_iter().collect::<BTreeSet<_>>(),
        all_partitions(topic, 5)
    );
    m.close().await.unwrap();
}
