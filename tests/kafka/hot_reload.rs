//! Hot reload (issue 14, item 5) against real brokers: one mTLS source cluster with ACLs, one
//! plaintext target, one `strait run`, no restart of it.
//!
//! 1. The include list is rewritten in the file (`hr-alpha` -> `hr-beta`, and a setting that
//!    needs a restart): `hr-beta` starts mirroring, `hr-alpha` stops after its position is
//!    committed (records written to it afterwards never reach the target), and the restart-only
//!    setting is named in the log.
//! 2. An invalid edit is refused with the validation error in the log (on the file change, and
//!    again on SIGHUP, which no longer ends the process); mirroring continues.
//! 3. The client certificate is rotated on disk (same paths, new key, new CN): the broker is
//!    restarted so every connection is new, and the old certificate's principal is denied. Only
//!    the new certificate can read, so mirroring that continues proves the new files are used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{client, end_offsets, produce_numbered, runtime, spawn_strait};
use strait_testkit::{AdminOp, Cluster, Listener, Resource, Validity};
use strait_wire::{Client, ClientConfig};

const ALPHA: &str = "hr-alpha";
const BETA: &str = "hr-beta";
const GROUP: &str = "hr-group";
const OLD_USER: &str = "hr-mirror-old";
const NEW_USER: &str = "hr-mirror-new";

/// The rights the mirror's principal needs on the source.
fn rights(principal: &str) -> Vec<AdminOp> {
    vec![
        AdminOp::allow(
            principal,
            Resource::TopicPrefix("hr-".into()),
            &["Read", "Describe"],
        ),
        AdminOp::allow(
            principal,
            Resource::Group(GROUP.into()),
            &["Read", "Describe"],
        ),
    ]
}

/// Replaces `path` the way cert-manager and the kubelet do: a new file renamed over the old.
fn replace_file(path: &Path, from: &Path) {
    let tmp = path.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The strait.toml text: the source through the client certificate at `tls.crt`/`tls.key`.
fn config_text(src: &Cluster, dst: &Cluster, dir: &Path, topics: &str, commit: &str) -> String {
    let pki = src.pki().unwrap();
    format!(
        "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{}\"\n\"security.protocol\" = \"SSL\"\n\
         \"ssl.ca.location\" = \"{}\"\n\"ssl.certificate.location\" = \"{}\"\n\
         \"ssl.key.location\" = \"{}\"\n\n[target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{}\"\n\n\
         [mirror]\ntopics = [\"{topics}\"]\ngroup_id = \"{GROUP}\"\nstart = \"earliest\"\n\
         refresh_interval = \"1s\"\ncommit_interval = \"{commit}\"\nsession_timeout = \"6s\"\n\
         sync_topic_configs = false\n\n[metrics]\nlisten = \"\"\n",
        src.listener(Listener::Ssl),
        pki.ca_pem().display(),
        dir.join("tls.crt").display(),
        dir.join("tls.key").display(),
        dst.bootstrap(),
    )
}

/// Rewrites the config file (a new file renamed over the old, as editors and ConfigMaps do).
fn rewrite(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits until `topic` holds `want` records on the target; on timeout, fails with the end of
/// the mirror's log (`log`), which goes with the test's temporary directory.
async fn wait_for_end(target: &Client, topic: &str, want: i64, timeout: Duration, log: &Path) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = end_offsets(target, topic, 1).await[0];
        if got >= want {
            assert_eq!(
                got, want,
                "{topic}: more records on the target than written"
            );
            return;
        }
        if Instant::now() >= deadline {
            let text = log_text(log);
            let tail: Vec<&str> = text.lines().rev().take(120).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{topic}: {got} of {want} records on the target after {timeout:?}; the mirror's \
                 log ends:\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The mirror group's committed source position of `topic` partition 0.
async fn committed(source: &Client, topic: &str) -> i64 {
    let tp = strait_wire::TopicPartition::new(topic, 0).unwrap();
    let got = strait_wire::offset_commit::GroupOffsets::new(source, GROUP)
        .fetch(std::slice::from_ref(&tp))
        .await
        .unwrap();
    got.get(&tp)
        .and_then(|o| o.as_ref())
        .map_or(0, |o| o.offset)
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Waits until the log contains `needle`; fails with the whole log.
fn wait_for_log(log: &Path, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !log_text(log).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not logged within {timeout:?}:\n{}",
            log_text(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn filters_reload_invalid_edits_are_refused_and_rotated_certificates_are_used() {
    let (mut src, dst) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let c = Cluster::builder("hr-src")
                .mtls()
                .user(OLD_USER, "unused")
                .start()
                .expect("source cluster");
            let mut ops = vec![AdminOp::topic(ALPHA, 1, 1), AdminOp::topic(BETA, 1, 1)];
            ops.extend(rights(&format!("User:{OLD_USER}")));
            c.admin(&ops).unwrap();
            c
        });
        let b = Cluster::builder("hr-dst").start().expect("target cluster");
        (a.join().unwrap(), b)
    });
    let dir = tempfile::tempdir().unwrap();
    let old = src.pki().unwrap().user(OLD_USER).unwrap().clone();
    replace_file(&dir.path().join("tls.crt"), &old.cert_pem);
    replace_file(&dir.path().join("tls.key"), &old.key_pem);
    let config = dir.path().join("strait.toml");
    rewrite(
        &config,
        &config_text(&src, &dst, dir.path(), ALPHA, "200ms"),
    );

    let rt = runtime();
    // A super user's client (admin certificate) writes the source records.
    let producer = rt.block_on(async {
        Client::connect(
            ClientConfig::from_properties(src.client_properties(Listener::Ssl, None)).unwrap(),
        )
        .await
        .unwrap()
    });
    let target = rt.block_on(client(&dst));
    rt.block_on(async {
        produce_numbered(&producer, ALPHA, 0..1, 0..20).await;
        produce_numbered(&producer, BETA, 0..1, 0..20).await;
    });
    let (mut strait, log) = spawn_strait(&config, 1);
    // The reloader says it runs at start (a strait binary without it fails here, clearly).
    wait_for_log(
        &log,
        "hot reload: SIGHUP or a change",
        Duration::from_secs(60),
    );
    rt.block_on(wait_for_end(
        &target,
        ALPHA,
        20,
        Duration::from_secs(120),
        &log,
    ));
    assert!(
        !rt.block_on(target.metadata(None))
            .unwrap()
            .topics
            .contains_key(BETA),
        "hr-beta is not in the include list yet"
    );

    // 1. The include list changes (and one restart-only setting), in the file alone.
    rewrite(&config, &config_text(&src, &dst, dir.path(), BETA, "300ms"));
    wait_for_log(
        &log,
        "configuration reloaded; applied: mirror.topics",
        Duration::from_secs(30),
    );
    wait_for_log(
        &log,
        "changed settings that need a restart: mirror.commit_interval",
        Duration::from_secs(5),
    );
    rt.block_on(wait_for_end(
        &target,
        BETA,
        20,
        Duration::from_secs(120),
        &log,
    ));
    // hr-alpha stopped cleanly: everything acknowledged was committed before it was released.
    assert_eq!(rt.block_on(committed(&producer, ALPHA)), 20);
    rt.block_on(async {
        produce_numbered(&producer, ALPHA, 0..1, 20..40).await;
        produce_numbered(&producer, BETA, 0..1, 20..40).await;
    });
    rt.block_on(wait_for_end(
        &target,
        BETA,
        40,
        Duration::from_secs(120),
        &log,
    ));
    // Written before hr-beta's last records, which arrived: a mirrored hr-alpha would have too.
    assert_eq!(
        rt.block_on(end_offsets(&target, ALPHA, 1))[0],
        20,
        "records written to hr-alpha after it left the include list reached the target"
    );
    assert_eq!(rt.block_on(committed(&producer, ALPHA)), 20);

    // 2. An invalid edit is refused, with the reason; the mirror keeps its configuration.
    rewrite(
        &config,
        &config_text(&src, &dst, dir.path(), "hr-(beta", "300ms"),
    );
    wait_for_log(
        &log,
        "configuration reload refused",
        Duration::from_secs(30),
    );
    let text = log_text(&log);
    let refused = text
        .lines()
        .find(|l| l.contains("configuration reload refused"))
        .unwrap();
    assert!(refused.contains("mirror.topics"), "{refused}");
    // SIGHUP reloads too (and no longer ends the process): the same file, refused again.
    let hup = std::process::Command::new("kill")
        .arg("-HUP")
        .arg(strait.id().to_string())
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for_log(&log, "trigger=\"SIGHUP\"", Duration::from_secs(30));
    rt.block_on(produce_numbered(&producer, BETA, 0..1, 40..60));
    rt.block_on(wait_for_end(
        &target,
        BETA,
        60,
        Duration::from_secs(120),
        &log,
    ));
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");

    // 3. Certificate rotation: a new key and certificate (CN hr-mirror-new) at the same paths;
    // the old principal loses its right to read, and the broker restarts so that every
    // connection is new.
    let new = src
        .pki()
        .unwrap()
        .issue(NEW_USER, Validity::Normal)
        .unwrap();
    replace_file(&dir.path().join("tls.key"), &new.key_pem);
    replace_file(&dir.path().join("tls.crt"), &new.cert_pem);
    let mut ops = rights(&format!("User:{NEW_USER}"));
    ops.push(AdminOp::deny(
        &format!("User:{OLD_USER}"),
        Resource::TopicPrefix("hr-".into()),
        &["Read"],
    ));
    src.admin(&ops).unwrap();
    let node = src.node_ids()[0];
    src.stop_node(node).unwrap();
    src.start_node(node).unwrap();
    let producer = rt.block_on(async {
        Client::connect(
            ClientConfig::from_properties(src.client_properties(Listener::Ssl, None)).unwrap(),
        )
        .await
        .unwrap()
    });
    rt.block_on(produce_numbered(&producer, BETA, 0..1, 60..80));
    rt.block_on(wait_for_end(
        &target,
        BETA,
        80,
        Duration::from_secs(180),
        &log,
    ));
    let text = log_text(&log);
    assert!(
        text.lines()
            .any(|l| l.contains("TLS files changed on disk")
                && l.contains(&format!("CN={NEW_USER}"))),
        "no log line says the rotated certificate is used:\n{text}"
    );
    assert!(strait.try_wait().unwrap().is_none(), "strait exited");
    common::terminate(&mut strait);
}
