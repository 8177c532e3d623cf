//! `strait check` against real authorizers: the reference scenario (mTLS users `my-europe-user`
//! and `my-us-user`), with the target user lacking Write on `my-topic` (it has Describe and
//! Create) and the source user lacking Read on the group (it has Describe). `strait check` must
//! exit non-zero and print exactly those two grants, for the principals the brokers really see;
//! once the printed grants are applied, it exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;

use common::{StraitCommand, mtls_section};
use strait_testkit::{AdminOp, Cluster, Resource};

const USER: &str = "my-us-user";
const EUROPE_USER: &str = "my-europe-user";

/// An mTLS cluster with StandardAuthorizer and the broker's *default* principal mapping, so the
/// principal is `User:` plus the certificate's whole subject, as on a cluster that sets no
/// `ssl.principal.mapping.rules` (the testkit's own rule maps CN only).
fn cluster(name: &str, user: &str, acls: &[AdminOp]) -> Cluster {
    let c = Cluster::builder(name)
        .mtls()
        .user(user, "secret")
        .broker_config("ssl.principal.mapping.rules", "DEFAULT")
        .broker_config("super.users", "User:CN=broker;User:CN=admin")
        .start()
        .expect("cluster");
    c.admin(acls).unwrap();
    c
}

fn check(config: &std::path::Path) -> Output {
    StraitCommand::new(["check", "--config"])
        .arg(config)
        .output()
}

/// The `fix:` line `strait check` should print for this grant.
fn fix(cluster: &Cluster, principal: &str, op: &str, resource: &str) -> String {
    let bootstrap = cluster.bootstrap();
    let first = bootstrap.split(',').next().unwrap();
    format!(
        "fix: kafka-acls.sh --bootstrap-server {first} --add --allow-principal {principal} \
         --operation {op} {resource}"
    )
}

/// Applies a printed `kafka-acls.sh` line as written: its principal, operation and resource.
fn apply(cluster: &Cluster, fix: &str) {
    let words: Vec<&str> = fix.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
    let resource = match (after("--topic"), after("--group")) {
        (Some(t), _) => Resource::Topic(t.to_string()),
        (_, Some(g)) => Resource::Group(g.to_string()),
        _ => panic!("no resource in {fix}"),
    };
    cluster
        .admin(&[AdminOp::allow(
            after("--allow-principal").unwrap(),
            resource,
            &[after("--operation").unwrap()],
        )])
        .unwrap();
}

#[test]
fn check_names_the_missing_grants_and_passes_once_they_exist() {
    // europe: the walkthrough's source rights, except Read on the group (Describe only).
    // us: Describe and Create on my-topic, no Write.
    let (europe, us) = std::thread::scope(|s| {
        let e = s.spawn(|| {
            let p = format!("User:CN={EUROPE_USER}");
            cluster(
                "check-europe",
                EUROPE_USER,
                &[
                    AdminOp::topic("my-topic", 12, 1),
                    AdminOp::allow(
                        &p,
                        Resource::Topic("my-topic".into()),
                        &["Read", "Describe"],
                    ),
                    AdminOp::allow(&p, Resource::Group("my-group".into()), &["Describe"]),
                ],
            )
        });
        let u = cluster(
            "check-us",
            USER,
            &[AdminOp::allow(
                &format!("User:CN={USER}"),
                Resource::Topic("my-topic".into()),
                &["Describe", "Create"],
            )],
        );
        (e.join().unwrap(), u)
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strait.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\n{}\n[target]\n{}\n[mirror]\ntopics = [\"my-topic\"]\ngroup_id = \"my-group\"\n\n\
             [metrics]\nlisten = \"\"\n",
            mtls_section(&europe, "europe", EUROPE_USER),
            mtls_section(&us, "us", USER),
        ),
    )
    .unwrap();

    let out = check(&config);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stdout}{stderr}");
    // Rights missing has its own exit code (5), distinct from a cluster that cannot be reached.
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    let write = fix(&us, &format!("User:CN={USER}"), "Write", "--topic my-topic");
    let read_group = fix(
        &europe,
        &format!("User:CN={EUROPE_USER}"),
        "Read",
        "--group my-group",
    );
    for needed in [
        "MISSING  us: Write on topic my-topic",
        &write,
        "MISSING  europe: Read on group my-group",
        &read_group,
        "ok       us: Create on topic my-topic",
        "ok       europe: Read on topic my-topic",
        "us: the mirror's principal is User:CN=my-us-user",
        "europe: the mirror's principal is User:CN=my-europe-user",
    ] {
        assert!(stdout.contains(needed), "{needed:?} not in:\n{stdout}");
    }
    assert_eq!(stdout.matches("MISSING").count(), 2, "{stdout}");
    assert!(!stdout.contains("IdempotentWrite"), "{stdout}");
    assert!(
        stderr.contains("2 rights the mirror needs are missing"),
        "{stderr}"
    );

    // The same findings as one JSON document for scripts.
    let out = StraitCommand::new(["check", "--output", "json", "--config"])
        .arg(&config)
        .output();
    assert_eq!(out.status.code(), Some(5));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "rights_missing", "{doc}");
    assert_eq!(doc["exit_code"], 5);
    let rights = doc["flows"][0]["rights"].as_array().unwrap();
    let missing: Vec<String> = rights
        .iter()
        .filter(|r| r["status"] == "missing")
        .map(|r| {
            format!(
                "{} {}",
                r["right"].as_str().unwrap(),
                r["fix"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(missing.len(), 2, "{doc}");
    assert!(
        missing
            .iter()
            .any(|m| m.starts_with("Write on topic my-topic kafka-acls.sh")),
        "{missing:?}"
    );
    assert_eq!(doc["flows"][0]["plan"][0]["source_topic"], "my-topic");

    // Apply exactly the printed grants.
    apply(&us, &write);
    apply(&europe, &read_group);
    let out = check(&config);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needed in [
        "ok       us: Write on topic my-topic",
        "ok       europe: Read on group my-group",
    ] {
        assert!(stdout.contains(needed), "{needed:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("MISSING"), "{stdout}");
}
