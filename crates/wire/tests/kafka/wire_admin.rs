//! strait-wire admin operations and authorization errors against a real mTLS cluster with ACLs
//! (one cluster for the whole file): CreateTopics with configs, DescribeConfigs, CreatePartitions,
//! TOPIC_ALREADY_EXISTS, DescribeAcls, DescribeCluster, and what a user without ACLs is told.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_admin:: --nocapture`
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use strait_testkit::{AdminOp, Cluster, Resource};
use strait_wire::admin::{
    AclFilter, AclOperation, AclPermission, Admin, ConfigSource, CreateTopicOutcome, NewTopic,
    ResourceType,
};
use strait_wire::group::{GroupConfig, GroupEvent, GroupMember};
use strait_wire::offset_commit::CommitOffset;
use strait_wire::{Client, ClientConfig, Error, ResponseError, TopicPartition};

async fn client(cluster: &Cluster, user: Option<&str>) -> Client {
    let props = cluster.client_properties(cluster.default_listener(), user);
    Client::connect(ClientConfig::from_properties(props).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_against_an_mtls_cluster() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::builder("admin")
            .mtls()
            .user("alice", "alice-secret")
            .start()
            .unwrap()
    })
    .await
    .unwrap();
    let admin_client = client(&cluster, None).await;
    let admin = Admin::new(&admin_client);

    create_describe_and_grow(&admin_client, &admin).await;

    // alice may read `configured` and use group `granted-group`, nothing else.
    let acls = vec![
        AdminOp::allow(
            "User:alice",
            Resource::Topic("configured".into()),
            &["Read", "Describe"],
        ),
        AdminOp::allow(
            "User:alice",
            Resource::Group("granted-group".into()),
            &["Read"],
        ),
    ];
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.admin(&acls).unwrap();
        cluster
    })
    .await
    .unwrap();
    describe_acls_and_cluster(&admin).await;
    unauthorized_user_is_told_what_to_grant(&cluster).await;

    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

async fn create_describe_and_grow(client: &Client, admin: &Admin) {
    let topic = NewTopic::new("configured", 2, 1)
        .with_config("retention.ms", "3600000")
        .with_config("cleanup.policy", "compact")
        .with_config("compression.type", "zstd")
        .with_config("max.message.bytes", "2000000")
        .with_config("message.timestamp.type", "LogAppendTime");
    let outcome = admin.create_topic(&topic).await.unwrap();
    let CreateTopicOutcome::Created {
        topic_id,
        partitions,
        replication_factor,
    } = outcome
    else {
        panic!("expected Created, got {outcome:?}");
    };
    assert!(topic_id.is_some());
    assert_eq!((partitions, replication_factor), (Some(2), Some(1)));
    // Right after creation the leaders are on their way; wait_for_leaders sees them arrive and
    // leaves them in the client's metadata cache.
    assert!(
        admin
            .wait_for_leaders("configured", 2, Duration::from_secs(10))
            .await
            .unwrap()
    );
    let cached = client.cached_metadata();
    for p in 0..2 {
        let tp = TopicPartition::new("configured", p).unwrap();
        assert!(cached.leader(&tp).is_some(), "no cached leader for {tp}");
    }
    // A partition count the topic does not have is never reached.
    assert!(
        !admin
            .wait_for_leaders("configured", 3, Duration::from_millis(300))
            .await
            .unwrap()
    );

    // DescribeConfigs reads them back, marked as set on the topic.
    let configs = admin.describe_topic_configs("configured").await.unwrap();
    for (k, v) in &topic.configs {
        let e = configs.get(k).unwrap_or_else(|| panic!("{k} missing"));
        assert_eq!(e.value.as_deref(), Some(v.as_str()), "{k}");
        assert_eq!(e.source, ConfigSource::Topic, "{k}");
        assert!(!e.is_default(), "{k}");
    }
    let segment = configs.get("segment.bytes").unwrap();
    assert!(segment.is_default(), "{segment:?}");
    let overrides: Vec<&str> = configs.overrides().map(|e| e.name.as_str()).collect();
    assert_eq!(overrides.len(), topic.configs.len(), "{overrides:?}");

    // Creating it again is reported distinctly, not as an error.
    let again = admin
        .create_topic(&NewTopic::new("configured", 2, 1))
        .await
        .unwrap();
    assert!(
        matches!(again, CreateTopicOutcome::AlreadyExists { .. }),
        "{again:?}"
    );

    // A batch with one good and one bad topic: per-topic results.
    let results = admin
        .create_topics(
            &[
                NewTopic::new("batch-ok", 1, 1),
                NewTopic::new("batch-bad", 1, 3),
            ],
            false,
        )
        .await
        .unwrap();
    assert!(matches!(
        results["batch-ok"],
        Ok(CreateTopicOutcome::Created { .. })
    ));
    let bad = results["batch-bad"].as_ref().unwrap_err();
    assert_eq!(
        bad.code(),
        Some(ResponseError::InvalidReplicationFactor),
        "{bad}"
    );
    assert!(bad.to_string().contains("batch-bad"), "{bad}");

    // validate_only creates nothing.
    let dry = admin
        .create_topics(&[NewTopic::new("dry-run", 3, 1)], true)
        .await
        .unwrap();
    assert!(matches!(
        dry["dry-run"],
        Ok(CreateTopicOutcome::Created { .. })
    ));
    let md = client
        .metadata(Some(&["dry-run".to_owned()]))
        .await
        .unwrap();
    assert!(
        md.topic("dry-run").is_none_or(|t| t.error.is_some()),
        "dry run created the topic"
    );

    // CreatePartitions grows it; shrinking is refused with the broker's explanation.
    admin.create_partitions("configured", 4).await.unwrap();
    // The controller has committed the change when CreatePartitions answers; the broker's
    // metadata cache learns it a moment later (on a loaded machine, seconds later).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let md = client
            .metadata(Some(&["configured".to_owned()]))
            .await
            .unwrap();
        let partitions = md.topic("configured").unwrap().partitions.len();
        if partitions == 4 || std::time::Instant::now() > deadline {
            assert_eq!(partitions, 4, "the topic did not grow to 4 partitions");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let err = admin.create_partitions("configured", 3).await.unwrap_err();
    assert_eq!(err.code(), Some(ResponseError::InvalidPartitions), "{err}");
    assert!(err.to_string().contains("configured"), "{err}");
}

async fn describe_acls_and_cluster(admin: &Admin) {
    let acls = admin
        .describe_acls(&AclFilter::applying_to(ResourceType::Topic, "configured"))
        .await
        .unwrap();
    let alice_read = acls.iter().find(|b| {
        b.principal == "User:alice"
            && b.operation == AclOperation::Read
            && b.permission == AclPermission::Allow
    });
    let binding = alice_read.unwrap_or_else(|| panic!("no alice Read ACL in {acls:?}"));
    assert_eq!(
        binding.to_string(),
        "User:alice ALLOW Read on Topic:configured from host *"
    );
    let groups = admin
        .describe_acls(&AclFilter::any().with_principal("User:alice"))
        .await
        .unwrap();
    assert!(
        groups
            .iter()
            .any(|b| b.resource_type == ResourceType::Group && b.resource_name == "granted-group")
    );

    let cluster = admin.describe_cluster().await.unwrap();
    assert!(!cluster.cluster_id.is_empty());
    assert_eq!(cluster.brokers.len(), 1);
}

fn assert_authorization(err: &Error, operation: &str, resource: &str) {
    match err {
        Error::Authorization {
            operation: op,
            resource: res,
            ..
        } => {
            assert_eq!(op, operation, "{err}");
            assert_eq!(res, resource, "{err}");
        }
        other => panic!("expected an authorization error for {operation} {resource}, got {other}"),
    }
    let msg = err.to_string();
    eprintln!("authorization error as shown: {msg}");
    assert!(msg.contains(resource) && msg.contains(operation), "{msg}");
}

async fn unauthorized_user_is_told_what_to_grant(cluster: &Cluster) {
    let alice = client(cluster, Some("alice")).await;
    let admin = Admin::new(&alice);

    let err = admin
        .create_topic(&NewTopic::new("alice-topic", 1, 1))
        .await
        .unwrap_err();
    assert_authorization(&err, "Create", "Topic:alice-topic");
    assert_eq!(err.code(), Some(ResponseError::TopicAuthorizationFailed));

    let err = admin
        .describe_topic_configs("configured")
        .await
        .unwrap_err();
    assert_authorization(&err, "DescribeConfigs", "Topic:configured");

    let err = admin.describe_acls(&AclFilter::any()).await.unwrap_err();
    assert_authorization(&err, "Describe", "Cluster:kafka-cluster");

    let err = admin.create_partitions("configured", 8).await.unwrap_err();
    assert_authorization(&err, "Alter", "Topic:configured");

    // A group alice has no ACL for: the membership fails, naming the group and Read.
    let group = |id: &str| {
        GroupConfig::new(id, ["configured"])
            .unwrap()
            .with_session_timeout(Duration::from_secs(6))
            .unwrap()
            .with_heartbeat_interval(Duration::from_millis(500))
            .unwrap()
    };
    let mut denied = GroupMember::join(&alice, group("no-acl-group"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(90), denied.next_event())
        .await
        .unwrap()
        .unwrap();
    let GroupEvent::Failed(err) = event else {
        panic!("expected Failed, got {event:?}");
    };
    assert_authorization(&err, "Read", "Group:no-acl-group");
    assert!(
        denied.next_event().await.is_none(),
        "no events after Failed"
    );

    // With Read on the group (and the topic) the same user joins and commits.
    let mut member = GroupMember::join(&alice, group("granted-group"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(90), member.next_event())
        .await
        .unwrap()
        .unwrap();
    let GroupEvent::Assigned {
        generation,
        partitions,
    } = event
    else {
        panic!("expected Assigned, got {event:?}");
    };
    assert_eq!(partitions.len(), 4);
    let tp = TopicPartition::new("configured", 0).unwrap();
    member
        .commit(&generation, &[CommitOffset::new(tp.clone(), 7)])
        .await
        .unwrap();
    let committed = member.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(committed[&tp].as_ref().map(|c| c.offset), Some(7));
    member.close().await.unwrap();
}
