//! ACL sync and mirror protection against real Kafka with ACLs (issue 15 item 1), on the
//! reference scenario's users: the mirror runs as `my-europe-user` on europe and `my-us-user` on
//! us, with `rename = "prefix"`.
//!
//! 1. The source's topic ACLs of mirrored topics appear on the target under the renamed names,
//!    transformed by the rules (ALLOW ALL -> READ, ALLOW WRITE never, PREFIXED expanded to the
//!    mirrored topics, DENY READ kept, DENY WRITE not copied), and an ACL the target already had
//!    is left alone.
//! 2. `protect_mirrors`: an application principal with Write on the target's `europe.` prefix is
//!    denied producing into a mirror, while Strait keeps writing (records arrive).
//! 3. A source principal without Describe on the cluster, and a target principal without
//!    Alter on the cluster, get clear warnings naming the grant, and mirroring goes on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use strait_testkit::{AdminOp, Cluster, Listener, Resource};
use strait_wire::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, Admin, PatternType, ResourceType,
};
use strait_wire::{Client, ClientConfig};

const TOPIC: &str = "my-topic";
const ORDERS: &str = "orders-eu";
const PARTITIONS: i32 = 2;
const EUROPE_USER: &str = "my-europe-user";
const US_USER: &str = "my-us-user";
/// A mirror principal on europe without Describe on the cluster.
const PLAIN_USER: &str = "plain-mirror";
/// A mirror principal on us without Alter on the cluster.
const US_PLAIN: &str = "us-plain-mirror";
/// An application on us with Write on every `europe.` topic.
const APP: &str = "app";

fn user(u: &str) -> String {
    format!("User:{u}")
}

async fn admin(cluster: &Cluster) -> Client {
    Client::connect(
        ClientConfig::from_properties(cluster.client_properties(Listener::Ssl, None)).unwrap(),
    )
    .await
    .unwrap()
}

fn literal(name: &str, principal: &str, op: AclOperation, perm: AclPermission) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: name.to_owned(),
        pattern_type: PatternType::Literal,
        principal: principal.to_owned(),
        host: "*".to_owned(),
        operation: op,
        permission: perm,
    }
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

fn config(
    dir: &std::path::Path,
    europe: &Cluster,
    us: &Cluster,
    [source_user, target_user]: [&str; 2],
    group: &str,
) {
    std::fs::write(
        dir.join(format!("{group}.toml")),
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"{TOPIC}\", \"{ORDERS}\"]\n\
             rename = \"prefix\"\ngroup_id = \"{group}\"\nrefresh_interval = \"1s\"\n\
             commit_interval = \"200ms\"\nsession_timeout = \"6s\"\nsync_topic_acls = true\n\
             sync_topic_acls_interval = \"1s\"\nprotect_mirrors = true\n\
             target_principal = \"User:{target_user}\"\n\n[metrics]\nlisten = \"\"\n",
            mtls_section(europe, "europe", source_user),
            mtls_section(us, "us", target_user),
        ),
    )
    .unwrap();
}

#[test]
fn acls_are_copied_by_the_rules_and_mirrors_are_protected() {
    let (europe, us) = std::thread::scope(|s| {
        let e = s.spawn(|| {
            let c = Cluster::builder("aclsync-europe")
                .mtls()
                .user(EUROPE_USER, "secret")
                .user(PLAIN_USER, "secret")
                .start()
                .expect("europe");
            let mut ops = vec![
                AdminOp::topic(TOPIC, PARTITIONS, 1),
                AdminOp::topic(ORDERS, 1, 1),
                AdminOp::allow(&user(EUROPE_USER), Resource::Cluster, &["Describe"]),
                // Users whose ACLs are copied.
                AdminOp::allow("User:alice", Resource::Topic(TOPIC.into()), &["All"]),
                AdminOp::allow("User:alice", Resource::Topic(TOPIC.into()), &["Write"]),
                AdminOp::allow(
                    "User:bob",
                    Resource::TopicPrefix("orders-".into()),
                    &["Read", "Describe"],
                ),
                AdminOp::deny(
                    "User:eve",
                    Resource::Topic(TOPIC.into()),
                    &["Read", "Write"],
                ),
                // Not mirrored: never copied.
                AdminOp::allow(
                    "User:alice",
                    Resource::Topic("unmirrored".into()),
                    &["Read"],
                ),
            ];
            for (u, g) in [(EUROPE_USER, "aclsync"), (PLAIN_USER, "aclsync-plain")] {
                ops.push(AdminOp::allow(
                    &user(u),
                    Resource::TopicPrefix("my-".into()),
                    &["Read", "Describe", "DescribeConfigs"],
                ));
                ops.push(AdminOp::allow(
                    &user(u),
                    Resource::Topic(ORDERS.into()),
                    &["Read", "Describe", "DescribeConfigs"],
                ));
                ops.push(AdminOp::allow(
                    &user(u),
                    Resource::Group(g.into()),
                    &["Read"],
                ));
            }
            c.admin(&ops).unwrap();
            c
        });
        let u = Cluster::builder("aclsync-us")
            .mtls()
            .user(US_USER, "secret")
            .user(APP, "secret")
            .user(US_PLAIN, "secret")
            .start()
            .expect("us");
        u.admin(&[
            AdminOp::topic("europe.local", 1, 1),
            AdminOp::allow(
                &user(US_USER),
                Resource::TopicPrefix("europe.".into()),
                &["Write", "Create", "Describe", "DescribeConfigs", "Alter"],
            ),
            AdminOp::allow(&user(US_USER), Resource::Cluster, &["Describe", "Alter"]),
            AdminOp::allow(
                &user(APP),
                Resource::TopicPrefix("europe.".into()),
                &["Write", "Describe"],
            ),
            // The target's own ACL on a mirror: kept.
            AdminOp::allow(
                "User:carol",
                Resource::Topic("europe.my-topic".into()),
                &["Read"],
            ),
        ])
        .unwrap();
        (e.join().unwrap(), u)
    });
    let lines: Vec<String> = (0..40).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &lines, None).unwrap();

    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &europe, &us, [EUROPE_USER, US_USER], "aclsync");
    let (mut strait, log) = spawn_strait(&dir.path().join("aclsync.toml"), 0);

    let rt = runtime();
    let us_admin = rt.block_on(admin(&us));
    let europe_admin = rt.block_on(admin(&europe));
    use AclOperation as Op;
    use AclPermission::{Allow, Deny};
    let mirror = "europe.my-topic";
    let orders = "europe.orders-eu";
    let expected = [
        literal(mirror, "User:alice", Op::Read, Allow),
        literal(orders, "User:bob", Op::Read, Allow),
        literal(orders, "User:bob", Op::Describe, Allow),
        literal(mirror, "User:eve", Op::Read, Deny),
        literal(mirror, &user(APP), Op::Write, Deny),
        literal(orders, &user(APP), Op::Write, Deny),
        literal(mirror, "User:carol", Op::Read, Allow),
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let acls = loop {
        let acls = rt.block_on(topic_acls(&us_admin));
        if expected.iter().all(|e| acls.contains(e)) {
            break acls;
        }
        assert!(
            Instant::now() < deadline,
            "expected ACLs missing on us after 120 s; have:\n{}\nlog:\n{}",
            acls.iter().map(|a| format!("  {a}\n")).collect::<String>(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for a in &acls {
        eprintln!("us: {a}");
    }
    // Never granted: WRITE or ALL on a mirror (alice had both), a DENY WRITE (eve), a DENY on
    // the mirror's own principal, anything about a topic not mirrored.
    for a in &acls {
        let is_mirror = a.resource_name.starts_with("europe.");
        // The target's own grants (set up above) are the only Write/All there.
        if ![user(US_USER), user(APP), user(US_PLAIN)].contains(&a.principal) {
            assert!(
                !(a.permission == Allow && matches!(a.operation, Op::Write | Op::All)),
                "{a}"
            );
        }
        assert!(
            !(a.permission == Deny && a.operation == Op::Write && !is_mirror),
            "{a}"
        );
        assert!(
            !(a.principal == user(US_USER) && a.permission == Deny),
            "the mirror denied itself: {a}"
        );
        assert!(!a.resource_name.contains("unmirrored"), "{a}");
        assert!(
            !(a.principal == "User:eve" && a.operation == Op::Write),
            "{a}"
        );
    }

    // 2. Strait still writes into the protected mirror; the application cannot.
    let expected_ends = rt.block_on(end_offsets(&europe_admin, TOPIC, PARTITIONS));
    rt.block_on(wait_until_complete(
        &us_admin,
        mirror,
        &expected_ends,
        Duration::from_secs(120),
    ));
    let more: Vec<String> = (40..60).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &more, None).unwrap();
    let expected_ends = rt.block_on(end_offsets(&europe_admin, TOPIC, PARTITIONS));
    assert_eq!(expected_ends.iter().sum::<i64>(), 60);
    rt.block_on(wait_until_complete(
        &us_admin,
        mirror,
        &expected_ends,
        Duration::from_secs(120),
    ));
    let denied = us.console_produce(mirror, &["from-app".to_string()], Some(APP));
    let err = denied.expect_err("the application wrote into a protected mirror");
    eprintln!("app produce into {mirror}: {err}");
    assert!(
        format!("{err}").contains("uthoriz"),
        "not an authorization failure: {err}"
    );
    // The application still writes where the mirror is not protected: the DENY is per mirror.
    us.console_produce("europe.local", &["ok".to_string()], Some(APP))
        .unwrap();
    assert_eq!(
        rt.block_on(end_offsets(&us_admin, mirror, PARTITIONS))
            .iter()
            .sum::<i64>(),
        60,
        "exactly the mirrored records"
    );
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");
    let status = terminate(&mut strait);
    assert!(status.success(), "strait exited with {status}");

    // 3. Without Describe on the source cluster: a clear warning, and mirroring goes on. The
    // second mirror's target principal is granted Write only now: granted while the first mirror
    // protected the mirrors, it would have been denied like any other writer.
    us.admin(&[
        AdminOp::allow(
            &user(US_PLAIN),
            Resource::TopicPrefix("europe.".into()),
            &["Write", "Create", "Describe", "DescribeConfigs", "Alter"],
        ),
        AdminOp::allow(&user(US_PLAIN), Resource::Cluster, &["Describe"]),
    ])
    .unwrap();
    config(
        dir.path(),
        &europe,
        &us,
        [PLAIN_USER, US_PLAIN],
        "aclsync-plain",
    );
    let (mut plain, plain_log) = spawn_strait(&dir.path().join("aclsync-plain.toml"), 1);
    wait_for_log(
        &plain_log,
        "lacks Describe on the cluster",
        Duration::from_secs(90),
    );
    // The mirror's principal is now us-plain-mirror: protecting the mirrors means denying
    // my-us-user, which this principal may not do (no Alter on the cluster).
    wait_for_log(
        &plain_log,
        "lacks Alter on the cluster",
        Duration::from_secs(90),
    );
    let text = std::fs::read_to_string(&plain_log).unwrap();
    assert!(
        text.contains("set mirror.sync_topic_acls = false"),
        "the warning says what to do:\n{text}"
    );
    assert!(
        text.contains("--operation Alter --cluster"),
        "the warning names the grant:\n{text}"
    );
    let last: Vec<String> = (60..70).map(|i| format!("record-{i}")).collect();
    europe.console_produce(TOPIC, &last, None).unwrap();
    let expected_ends = rt.block_on(end_offsets(&europe_admin, TOPIC, PARTITIONS));
    rt.block_on(wait_until_complete(
        &us_admin,
        mirror,
        &expected_ends,
        Duration::from_secs(120),
    ));
    assert!(plain.try_wait().unwrap().is_none(), "strait exited");
    let status = terminate(&mut plain);
    assert!(status.success(), "strait exited with {status}");
}
