//! ACL sync keeps the source's denies (issue 28 item 1), against real Kafka with mTLS users.
//!
//! The source lets everyone do everything on `t` (`ALLOW ALL User:*`) but denies mallory
//! everything there (`DENY ALL User:mallory`) and denies trudy reading any topic (`DENY READ
//! User:trudy` on the wildcard topic `*`). With `mirror.sync_topic_acls = true`, on the target:
//! mallory and trudy get TOPIC_AUTHORIZATION_FAILED when they fetch `europe.t` (MirrorMaker 2's
//! rules, and Strait's before, copied the ALLOW as ALLOW READ and dropped both denies, so both
//! could read the mirror), alice (allowed by `User:*` on the source) reads every record, and the
//! mirror itself keeps writing into the topic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, Admin, PatternType, ResourceType,
};
use strait_wire::{
    Client, ClientConfig, FetchOptions, FetchPartition, ResponseError, TopicPartition,
};

const TOPIC: &str = "t";
const MIRROR: &str = "europe.t";
const EUROPE_USER: &str = "my-europe-user";
const US_USER: &str = "my-us-user";
const GROUP: &str = "acl-deny";

async fn connect_as(cluster: &Cluster, user: Option<&str>) -> Client {
    Client::connect(
        ClientConfig::from_properties(cluster.client_properties(Listener::Ssl, user)).unwrap(),
    )
    .await
    .unwrap()
}

async fn topic_acls(client: &Client) -> Vec<AclBinding> {
    Admin::new(client)
        .describe_acls(&AclFilter {
            resource_type: ResourceType::Topic,
            ..AclFilter::any()
        })
        .await
        .unwrap()
}

fn literal(principal: &str, op: AclOperation, perm: AclPermission) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: MIRROR.to_owned(),
        pattern_type: PatternType::Literal,
        principal: principal.to_owned(),
        host: "*".to_owned(),
        operation: op,
        permission: perm,
    }
}

/// One Fetch of `MIRROR` partition 0 from offset 0 as `user`: the number of bytes of records
/// it returned, or the error code the broker (or the metadata lookup before it) answered.
async fn fetch_as(us: &Cluster, user: &str) -> Result<usize, (Option<ResponseError>, String)> {
    let client = connect_as(us, Some(user)).await;
    let tp = TopicPartition::new(MIRROR, 0).unwrap();
    match client
        .fetch(&[FetchPartition::new(tp, 0)], &FetchOptions::default())
        .await
    {
        Err(e) => Err((e.code(), e.to_string())),
        Ok(mut v) => match v.pop() {
            Some(f) => match f.error {
                Some(code) => Err((Some(code), format!("{code:?}"))),
                None => Ok(f.records.len()),
            },
            None => Err((None, "no partition in the answer".into())),
        },
    }
}

#[test]
fn denies_on_the_source_keep_the_same_principals_out_of_the_mirror() {
    let (europe, us) = std::thread::scope(|s| {
        let e = s.spawn(|| {
            let c = Cluster::builder("acldeny-europe")
                .mtls()
                .user(EUROPE_USER, "secret")
                .start()
                .expect("europe");
            c.admin(&[
                AdminOp::topic(TOPIC, 1, 1),
                AdminOp::allow(
                    &format!("User:{EUROPE_USER}"),
                    Resource::Cluster,
                    &["Describe"],
                ),
                AdminOp::allow(
                    &format!("User:{EUROPE_USER}"),
                    Resource::Group(GROUP.into()),
                    &["Read"],
                ),
                // The ACLs under test; the first also lets the mirror read `t`.
                AdminOp::allow("User:*", Resource::Topic(TOPIC.into()), &["All"]),
                AdminOp::deny("User:mallory", Resource::Topic(TOPIC.into()), &["All"]),
                AdminOp::deny("User:trudy", Resource::Topic("*".into()), &["Read"]),
            ])
            .unwrap();
            c
        });
        let u = Cluster::builder("acldeny-us")
            .mtls()
            .user(US_USER, "secret")
            .user("alice", "secret")
            .user("mallory", "secret")
            .user("trudy", "secret")
            .start()
            .expect("us");
        u.admin(&[
            AdminOp::allow(
                &format!("User:{US_USER}"),
                Resource::TopicPrefix("europe.".into()),
                &["Write", "Create", "Describe", "DescribeConfigs", "Alter"],
            ),
            AdminOp::allow(
                &format!("User:{US_USER}"),
                Resource::Cluster,
                &["Describe", "Alter"],
            ),
        ])
        .unwrap();
        (e.join().unwrap(), u)
    });
    let first: Vec<String> = (0..10).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &first, None).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"{TOPIC}\"]\n\
             rename = \"prefix\"\ngroup_id = \"{GROUP}\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\nsync_topic_acls = true\n\
             sync_topic_acls_interval = \"1s\"\ntarget_principal = \"User:{US_USER}\"\n\n\
             [metrics]\nlisten = \"\"\n",
            mtls_section(&europe, "europe", EUROPE_USER),
            mtls_section(&us, "us", US_USER),
        ),
    )
    .unwrap();
    let (mut strait, log) = spawn_strait(&config, 0);

    let rt = runtime();
    let us_admin = rt.block_on(connect_as(&us, None));
    let europe_admin = rt.block_on(connect_as(&europe, None));
    use AclOperation as Op;
    use AclPermission::{Allow, Deny};
    // One round creates all of these in one CreateAcls. The ALLOW shows the round ran; the
    // denies are waited for a while longer, then the fetches below decide.
    let allow = literal("User:*", Op::Read, Allow);
    let denies = [
        literal("User:mallory", Op::Read, Deny),
        literal("User:mallory", Op::Describe, Deny),
        literal("User:trudy", Op::Read, Deny),
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut denies_deadline = None;
    let acls = loop {
        let acls = rt.block_on(topic_acls(&us_admin));
        if acls.contains(&allow) {
            let d =
                *denies_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(20));
            if denies.iter().all(|x| acls.contains(x)) || Instant::now() > d {
                break acls;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the copied ALLOW READ for User:* is missing on us after 120 s; have:\n{}\nlog:\n{}",
            acls.iter().map(|a| format!("  {a}\n")).collect::<String>(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for a in &acls {
        eprintln!("us: {a}");
        // Nothing copied may deny the mirror's own writes.
        assert!(
            !(a.permission == Deny && matches!(a.operation, Op::Write | Op::All)),
            "{a}"
        );
    }

    let expected_ends = rt.block_on(end_offsets(&europe_admin, TOPIC, 1));
    rt.block_on(wait_until_complete(
        &us_admin,
        MIRROR,
        &expected_ends,
        Duration::from_secs(120),
    ));
    // alice is allowed on the source by User:*: she reads every mirrored record.
    let alice = rt.block_on(connect_as(&us, Some("alice")));
    let read = rt.block_on(read_all(&alice, MIRROR, 1));
    assert_eq!(read[&0].len(), 10, "alice reads the mirror");
    // mallory (DENY ALL on t) and trudy (DENY READ on *) cannot.
    for user in ["mallory", "trudy"] {
        let got = rt.block_on(fetch_as(&us, user));
        eprintln!("{user} fetching {MIRROR}: {got:?}");
        match got {
            Err((Some(ResponseError::TopicAuthorizationFailed), _)) => {}
            other => panic!(
                "{user} is denied reading {TOPIC} on the source but fetching its mirror \
                 {MIRROR} gave {other:?} (want TOPIC_AUTHORIZATION_FAILED)"
            ),
        }
    }

    // The translated denies do not hit the mirror: it keeps writing.
    let more: Vec<String> = (10..20).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &more, None).unwrap();
    let expected_ends = rt.block_on(end_offsets(&europe_admin, TOPIC, 1));
    assert_eq!(expected_ends, [20]);
    rt.block_on(wait_until_complete(
        &us_admin,
        MIRROR,
        &expected_ends,
        Duration::from_secs(120),
    ));
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");
    let status = terminate(&mut strait);
    assert!(status.success(), "strait exited with {status}");
}
