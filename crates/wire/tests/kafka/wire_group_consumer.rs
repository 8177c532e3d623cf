//! strait-wire on KIP-848's consumer group protocol against a real Kafka 4 cluster: a second
//! member takes some partitions and the first member revokes only those; commits follow the
//! member epoch; a static member that leaves for good (epoch -1) hands its partitions over at
//! once; classic and consumer members share one group; the group's session timeout is set
//! within the broker's bounds; and against Kafka 3.9 the automatic
//! choice falls back to the classic protocol, where cooperative-sticky (KIP-429) revokes only
//! what moves.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_group_consumer:: --nocapture`
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use strait_testkit::{Cluster, KafkaVersion};
use strait_wire::admin::{Admin, ConfigResource, CreateTopicOutcome, NewTopic};
use strait_wire::group::{
    Assignor, Generation, GroupConfig, GroupEvent, GroupMember, GroupProtocol,
    set_consumer_group_timeouts,
};
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{Client, ClientConfig, ResponseError, TopicPartition};

/// Generous upper bound for one rebalance on a loaded 2-core machine (the test only fails if
/// nothing happens for this long).
const PATIENCE: Duration = Duration::from_secs(90);

async fn client(cluster: &Cluster) -> Client {
    let props = cluster.client_properties(cluster.default_listener(), None);
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

fn config(group: &str, topic: &str, protocol: GroupProtocol) -> GroupConfig {
    GroupConfig::new(group, [topic])
        .unwrap()
        .with_protocol(protocol)
        .with_remote_assignor(Some("uniform".to_owned()))
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
    // The broker's metadata cache follows the controller (seconds later under load).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let md = client.metadata(Some(&[name.to_owned()])).await.unwrap();
        let seen = md
            .topic(name)
            .filter(|t| t.error.is_none())
            .map_or(0, |t| t.partitions.len());
        if seen == partitions as usize || Instant::now() > deadline {
            assert_eq!(
                seen, partitions as usize,
                "{name}: metadata never showed it"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn all_partitions(topic: &str, n: i32) -> BTreeSet<TopicPartition> {
    (0..n)
        .map(|p| TopicPartition::new(topic, p).unwrap())
        .collect()
}

/// What one member owns, built from its incremental events.
#[derive(Default)]
struct Owner {
    owned: BTreeSet<TopicPartition>,
    generation: Option<Generation>,
    /// Every partition ever revoked from it (never lost in these tests).
    revoked: BTreeSet<TopicPartition>,
}

impl Owner {
    fn apply(&mut self, event: GroupEvent, who: &str) {
        match event {
            GroupEvent::Assigned {
                generation,
                partitions,
            } => {
                eprintln!(
                    "{who}: +{} partitions at epoch {}",
                    partitions.len(),
                    generation.generation_id
                );
                self.owned.extend(partitions);
                self.generation = Some(generation);
            }
            GroupEvent::Revoked {
                partitions,
                lost,
                done,
            } => {
                eprintln!("{who}: -{} partitions (lost: {lost})", partitions.len());
                assert!(!lost, "{who}: partitions lost: {partitions:?}");
                for tp in &partitions {
                    assert!(self.owned.remove(tp), "{who}: revoked {tp}, never assigned");
                }
                self.revoked.extend(partitions);
                done.done();
            }
            GroupEvent::Failed(e) => panic!("{who} failed: {e}"),
            other => panic!("{who}: unexpected event {other:?}"),
        }
    }
}

/// Pumps the members' events until `settled` holds.
async fn pump(
    members: &mut [(&mut GroupMember, &mut Owner, &str)],
    mut settled: impl FnMut(&[&Owner]) -> bool,
    what: &str,
) {
    let work = async {
        loop {
            let owners: Vec<&Owner> = members.iter().map(|(_, o, _)| &**o).collect();
            if settled(&owners) {
                return;
            }
            // Whichever member has an event first.
            let (i, event) = {
                let futs = members
                    .iter_mut()
                    .enumerate()
                    .map(|(i, (m, _, _))| Box::pin(async move { (i, m.next_event().await) }));
                futures_select(futs.collect()).await
            };
            let (_, owner, who) = &mut members[i];
            owner.apply(event.expect("member stopped"), who);
        }
    };
    tokio::time::timeout(PATIENCE, work)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"));
}

async fn futures_select<F: std::future::Future + Unpin>(futs: Vec<F>) -> F::Output {
    let mut futs = futs;
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn offsets(parts: &BTreeSet<TopicPartition>, base: i64) -> Vec<CommitOffset> {
    parts
        .iter()
        .map(|tp| CommitOffset::new(tp.clone(), base + i64::from(tp.partition())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_on_kafka_4() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::builder("group-consumer")
            .version(KafkaVersion::V4)
            // Heartbeats every second instead of 5 s: the rebalances below take a few
            // heartbeats each. The session timeout stays the default 45 s.
            .broker_config("group.consumer.min.heartbeat.interval.ms", "500")
            .broker_config("group.consumer.heartbeat.interval.ms", "1000")
            .start()
            .unwrap()
    })
    .await
    .unwrap();
    let admin = client(&cluster).await;
    second_member_moves_only_what_it_takes(&cluster, &admin).await;
    released_partitions_are_taken_before_the_next_interval(&cluster, &admin).await;
    static_member_leaving_for_good_hands_over_at_once(&cluster, &admin).await;
    classic_and_consumer_members_share_one_group(&cluster, &admin).await;
    group_timeouts_within_the_broker_bounds(&admin).await;
}

/// The consumer protocol's session timeout is a group config: set within the broker's bounds
/// it reads back from the group; outside them the error names the bound.
async fn group_timeouts_within_the_broker_bounds(admin: &Client) {
    let group = "timeouts-group";
    let e =
        set_consumer_group_timeouts(admin, group, Duration::from_secs(6), Duration::from_secs(1))
            .await
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("group.consumer.min.session.timeout.ms (45000 ms)") && e.contains(group),
        "{e}"
    );
    set_consumer_group_timeouts(
        admin,
        group,
        Duration::from_secs(50),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    // The alter is committed by the controller; the broker answering DescribeConfigs serves
    // its metadata image, which follows a moment later (seen in CI: 45000 read right after).
    let deadline = Instant::now() + Duration::from_secs(60);
    let configs = loop {
        let configs = Admin::new(admin)
            .describe_configs(&ConfigResource::Group(group.to_owned()))
            .await
            .unwrap();
        if configs.value("consumer.session.timeout.ms") == Some("50000")
            || Instant::now() > deadline
        {
            break configs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(configs.value("consumer.session.timeout.ms"), Some("50000"));
    assert_eq!(
        configs.value("consumer.heartbeat.interval.ms"),
        Some("1000")
    );
}

/// Kafka's upgrade path: a group of classic members is converted when a consumer-protocol
/// member joins (group.consumer.migration.policy, bidirectional by default), and both kinds
/// share the partitions; when the consumer member leaves, the classic one gets everything.
async fn classic_and_consumer_members_share_one_group(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("mixed", "mixed-group");
    create_topic(admin, topic, 4).await;
    let all = all_partitions(topic, 4);
    let classic = config(group, topic, GroupProtocol::Classic)
        .with_session_timeout(Duration::from_secs(10))
        .unwrap()
        .with_heartbeat_interval(Duration::from_millis(500))
        .unwrap();
    let mut a = GroupMember::join(&client(cluster).await, classic)
        .await
        .unwrap();
    assert_eq!(a.protocol(), GroupProtocol::Classic);
    let mut oa = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "classic")],
        |o| o[0].owned == all,
        "the classic member owning all 4 partitions",
    )
    .await;
    let mut b = GroupMember::join(
        &client(cluster).await,
        config(group, topic, GroupProtocol::Consumer),
    )
    .await
    .unwrap();
    let mut ob = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "classic"), (&mut b, &mut ob, "consumer")],
        |o| {
            !o[0].owned.is_empty()
                && !o[1].owned.is_empty()
                && o[0].owned.is_disjoint(&o[1].owned)
                && o[0].owned.union(&o[1].owned).count() == 4
        },
        "a split between the classic and the consumer member",
    )
    .await;
    let gb = ob.generation.clone().unwrap();
    b.commit(&gb, &offsets(&ob.owned, 10)).await.unwrap();
    b.close().await.unwrap();
    pump(
        &mut [(&mut a, &mut oa, "classic")],
        |o| o[0].owned == all,
        "the classic member taking everything back",
    )
    .await;
    a.close().await.unwrap();
}

/// A member learns of partitions another member released only from a heartbeat's answer.
/// With the group's interval at 15 s (the broker's maximum), a joining member that waited for
/// it would get its share no sooner than 15 s after joining; after a change both members
/// heartbeat again within a second, so the share moves as soon as the old owner let it go.
async fn released_partitions_are_taken_before_the_next_interval(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("follow-up", "follow-up-group");
    create_topic(admin, topic, 6).await;
    let all = all_partitions(topic, 6);
    set_consumer_group_timeouts(
        admin,
        group,
        Duration::from_secs(45),
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    // The coordinator reads the group's config from its metadata image, a moment behind.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Admin::new(admin)
        .describe_configs(&ConfigResource::Group(group.to_owned()))
        .await
        .unwrap()
        .value("consumer.heartbeat.interval.ms")
        != Some("15000")
    {
        assert!(
            Instant::now() < deadline,
            "group config not visible after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cfg = || config(group, topic, GroupProtocol::Consumer);
    let (a, oa) = sole_owner(cluster, cfg(), &all).await;
    let took = split_after_second_join(cluster, a, oa, cfg()).await;
    eprintln!("3/3 split {took:?} after the second member joined (interval 15 s)");
    assert!(
        took < Duration::from_secs(12),
        "the split took {took:?}: the joining member waited for the 15 s interval"
    );
}

async fn second_member_moves_only_what_it_takes(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("incremental", "incremental-group");
    create_topic(admin, topic, 6).await;
    let all = all_partitions(topic, 6);

    let mut a = GroupMember::join(
        &client(cluster).await,
        config(group, topic, GroupProtocol::Auto),
    )
    .await
    .unwrap();
    assert_eq!(
        a.protocol(),
        GroupProtocol::Consumer,
        "Kafka 4 runs KIP-848"
    );
    let mut oa = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "a")],
        |o| o[0].owned == all,
        "a owning all 6 partitions",
    )
    .await;
    let epoch_alone = oa.generation.clone().unwrap();
    a.commit(&epoch_alone, &offsets(&all, 100)).await.unwrap();

    let mut b = GroupMember::join(
        &client(cluster).await,
        config(group, topic, GroupProtocol::Consumer),
    )
    .await
    .unwrap();
    let mut ob = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "a"), (&mut b, &mut ob, "b")],
        |o| {
            o[0].owned.len() == 3
                && o[1].owned.len() == 3
                && o[0].owned.union(&o[1].owned).count() == 6
        },
        "a 3/3 split",
    )
    .await;
    // Only what moved was revoked from a: exactly what b owns now, nothing a kept.
    assert_eq!(oa.revoked, ob.owned, "a revoked exactly what b took");
    assert!(oa.revoked.is_disjoint(&oa.owned));
    assert!(ob.revoked.is_empty());
    assert_eq!(
        a.assignment().into_iter().collect::<BTreeSet<_>>(),
        oa.owned
    );

    // The member epoch moved on; a commit of this membership made with its first epoch is sent
    // with the current one and lands.
    a.commit(&epoch_alone, &offsets(&oa.owned, 200))
        .await
        .unwrap();
    let gb = ob.generation.clone().unwrap();
    b.commit(&gb, &offsets(&ob.owned, 300)).await.unwrap();
    let committed = GroupOffsets::new(admin, group)
        .fetch(&all.iter().cloned().collect::<Vec<_>>())
        .await
        .unwrap();
    for tp in &all {
        let base = if oa.owned.contains(tp) { 200 } else { 300 };
        let want = base + i64::from(tp.partition());
        assert_eq!(committed[tp].as_ref().map(|c| c.offset), Some(want), "{tp}");
    }
    // Bypassing the member, the broker refuses an epoch this member never had.
    let mut current = a.generation().unwrap();
    assert!(current.generation_id > epoch_alone.generation_id);
    current.generation_id += 10;
    let err = GroupOffsets::new(admin, group)
        .commit(&current, &offsets(&oa.owned, 400))
        .await
        .unwrap_err();
    assert!(err.is_stale_membership(), "{err}");
    assert!(
        matches!(
            err.code(),
            Some(ResponseError::StaleMemberEpoch | ResponseError::FencedMemberEpoch)
        ),
        "{err}"
    );

    b.close().await.unwrap();
    a.close().await.unwrap();
}

async fn static_member_leaving_for_good_hands_over_at_once(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("static-leave", "static-leave-group");
    create_topic(admin, topic, 4).await;
    let all = all_partitions(topic, 4);
    let static_config = |id: &str| {
        config(group, topic, GroupProtocol::Consumer)
            .with_group_instance_id(id)
            .unwrap()
    };
    let mut a = GroupMember::join(&client(cluster).await, static_config("a"))
        .await
        .unwrap();
    let mut b = GroupMember::join(
        &client(cluster).await,
        static_config("b").with_leave_on_close(true),
    )
    .await
    .unwrap();
    let (mut oa, mut ob) = (Owner::default(), Owner::default());
    pump(
        &mut [(&mut a, &mut oa, "a"), (&mut b, &mut ob, "b")],
        |o| o[0].owned.len() == 2 && o[1].owned.len() == 2,
        "a 2/2 split of the static members",
    )
    .await;
    let moved = ob.owned.clone();
    let revoked_before = oa.revoked.clone();
    let left = Instant::now();
    b.close().await.unwrap();
    pump(
        &mut [(&mut a, &mut oa, "a")],
        |o| o[0].owned == all,
        "the survivor taking over",
    )
    .await;
    let took = left.elapsed();
    eprintln!("takeover after the static member left: {took:?}");
    // The session timeout is 45 s: a member that merely stopped would be expelled only then.
    // Generous bound for a loaded machine; the point is not waiting for the session timeout.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(oa.revoked, revoked_before, "a kept what it had");
    assert!(moved.is_subset(&oa.owned));
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3_9_falls_back_to_classic() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::builder("group-consumer-3-9")
            .version(KafkaVersion::V3_9)
            .start()
            .unwrap()
    })
    .await
    .unwrap();
    let admin = client(&cluster).await;
    let (topic, group) = ("fallback", "fallback-group");
    create_topic(&admin, topic, 2).await;
    let mut m = GroupMember::join(&admin, config(group, topic, GroupProtocol::Auto))
        .await
        .unwrap();
    assert_eq!(m.protocol(), GroupProtocol::Classic);
    let mut o = Owner::default();
    pump(
        &mut [(&mut m, &mut o, "m")],
        |o| o[0].owned == all_partitions(topic, 2),
        "the classic member owning both partitions",
    )
    .await;
    m.close().await.unwrap();
    cooperative_sticky_revokes_only_what_moves(&cluster, &admin).await;
    cooperative_second_round_before_the_next_interval(&cluster, &admin).await;
}

/// The second round of a cooperative rebalance starts when the revoking member rejoins; the
/// other members hear of it only from a heartbeat. With a 15 s heartbeat interval a joining
/// member that waited for it would get its share no sooner than 15 s after the first round;
/// after a rebalance members heartbeat again within a second, so the share moves at once.
async fn cooperative_second_round_before_the_next_interval(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("second-round", "second-round-group");
    create_topic(admin, topic, 6).await;
    let cfg = || {
        cooperative_config(
            group,
            topic,
            Duration::from_secs(45),
            Duration::from_secs(15),
            Duration::from_secs(60),
        )
    };
    let (a, oa) = sole_owner(cluster, cfg(), &all_partitions(topic, 6)).await;
    let took = split_after_second_join(cluster, a, oa, cfg()).await;
    eprintln!("cooperative 3/3 split {took:?} after the second member joined (interval 15 s)");
    assert!(
        took < Duration::from_secs(12),
        "the split took {took:?}: the second round waited for the 15 s heartbeat interval"
    );
}

/// Cooperative-sticky alone, with the given session timeout, heartbeat interval and
/// rebalance timeout.
fn cooperative_config(
    group: &str,
    topic: &str,
    session: Duration,
    heartbeat: Duration,
    rebalance: Duration,
) -> GroupConfig {
    GroupConfig::new(group, [topic])
        .unwrap()
        .with_assignors(&[Assignor::CooperativeSticky])
        .unwrap()
        .with_session_timeout(session)
        .unwrap()
        .with_heartbeat_interval(heartbeat)
        .unwrap()
        .with_rebalance_timeout(rebalance)
        .unwrap()
}

/// A member that joined alone and owns all of `all`.
async fn sole_owner(
    cluster: &Cluster,
    cfg: GroupConfig,
    all: &BTreeSet<TopicPartition>,
) -> (GroupMember, Owner) {
    let mut a = GroupMember::join(&client(cluster).await, cfg)
        .await
        .unwrap();
    let mut oa = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "a")],
        |o| o[0].owned == *all,
        "a owning all 6 partitions",
    )
    .await;
    (a, oa)
}

/// A second member joins `a`'s group: how long until each owns 3 of the 6 partitions. Both
/// leave afterwards.
async fn split_after_second_join(
    cluster: &Cluster,
    mut a: GroupMember,
    mut oa: Owner,
    cfg: GroupConfig,
) -> Duration {
    let joined = Instant::now();
    let mut b = GroupMember::join(&client(cluster).await, cfg)
        .await
        .unwrap();
    let mut ob = Owner::default();
    pump(
        &mut [(&mut a, &mut oa, "a"), (&mut b, &mut ob, "b")],
        |o| o[0].owned.len() == 3 && o[1].owned.len() == 3,
        "a 3/3 split",
    )
    .await;
    let took = joined.elapsed();
    b.close().await.unwrap();
    a.close().await.unwrap();
    took
}

/// KIP-429 on the classic protocol: with cooperative-sticky alone, a second member joining
/// makes the first revoke only the partitions that move to it (second round), never the ones
/// it keeps; when the second leaves, the first gets them back without revoking anything.
async fn cooperative_sticky_revokes_only_what_moves(cluster: &Cluster, admin: &Client) {
    let (topic, group) = ("cooperative", "cooperative-group");
    create_topic(admin, topic, 6).await;
    let all = all_partitions(topic, 6);
    let cooperative = || {
        cooperative_config(
            group,
            topic,
            Duration::from_secs(10),
            Duration::from_millis(500),
            Duration::from_secs(30),
        )
    };
    let (mut a, mut oa) = sole_owner(cluster, cooperative(), &all).await;
    let mut b = GroupMember::join(&client(cluster).await, cooperative())
        .await
        .unwrap();
    let mut ob = Owner::default();
    // The first round: a gives up what moves and commits it first, as a mirror does, in the
    // generation it last heard of (the one that revokes: the previous one is refused).
    let revoked = tokio::time::timeout(PATIENCE, async {
        loop {
            match a.next_event().await.expect("a stopped") {
                GroupEvent::Revoked {
                    partitions,
                    lost,
                    done,
                } => {
                    assert!(!lost, "a lost {partitions:?}");
                    let g = oa.generation.clone().unwrap();
                    let set: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
                    a.commit(&g, &offsets(&set, 11))
                        .await
                        .expect("a commits what it revokes in the revoking generation");
                    for tp in &partitions {
                        assert!(oa.owned.remove(tp), "a: revoked {tp}, never assigned");
                    }
                    oa.revoked.extend(partitions);
                    done.done();
                    return set;
                }
                other => oa.apply(other, "a"),
            }
        }
    })
    .await
    .expect("a's cooperative revocation did not happen");
    pump(
        &mut [(&mut a, &mut oa, "a"), (&mut b, &mut ob, "b")],
        |o| {
            let epoch = |i: usize| o[i].generation.as_ref().map(|g| g.generation_id);
            o[0].owned.len() == 3
                && o[1].owned.len() == 3
                && o[0].owned.union(&o[1].owned).count() == 6
                && epoch(0) == epoch(1)
        },
        "a 3/3 cooperative split",
    )
    .await;
    assert_eq!(oa.revoked, ob.owned, "a revoked exactly what b took");
    assert_eq!(revoked, ob.owned);
    // b starts where a stopped (no re-mirroring from an older commit)
    let wanted: Vec<TopicPartition> = revoked.iter().cloned().collect();
    let committed = b.committed(&wanted).await.unwrap();
    for tp in &wanted {
        let got = committed.get(tp).cloned().flatten().map(|c| c.offset);
        assert_eq!(got, Some(11 + i64::from(tp.partition())), "{tp}");
    }
    assert!(
        oa.revoked.is_disjoint(&oa.owned),
        "a never revoked what it kept"
    );
    let ga = oa.generation.clone().unwrap();
    a.commit(&ga, &offsets(&oa.owned, 7)).await.unwrap();
    let revoked_before = oa.revoked.clone();
    b.close().await.unwrap();
    pump(
        &mut [(&mut a, &mut oa, "a")],
        |o| o[0].owned == all,
        "a taking b's partitions back",
    )
    .await;
    assert_eq!(oa.revoked, revoked_before, "nothing revoked when b left");
    a.close().await.unwrap();
}
