//! `strait failback` against real Kafka, after an unplanned failover.
//!
//! `strait run` mirrors two topics (checkpoints on) and is stopped; records then written to the
//! source never reach the target (stranded: stopping the mirror makes the stranded range
//! deterministic, where killing the source cluster under a producer would leave a range that
//! depends on timing). The source's broker is then SIGKILLed while the target takes writes of
//! its own (the failover), and restarted; some producers still write to the old source after
//! the failover (diverged records, told apart with `--failed-over-at`).
//!
//! * `fbc`, `--stranded copy`: without a decision the command refuses and names the range;
//!   with `copy`, first interrupted by the test hook right after the copy, then run again: the
//!   target holds every record exactly once (mirrored, written after the failover, stranded),
//!   the original mirror's group on the old source is past the stranded records, and the
//!   reverse mirror started from the written configuration copies to the old source exactly
//!   what the target took after the failover except the stranded copies (their offsets are
//!   recorded in the group `<mirror group>.failback-copies` on the target, and the reverse
//!   mirror skips those batches): the old source holds every record exactly once.
//! * `fbe`, `--stranded export FILE`: the file holds exactly the stranded range, record by
//!   record, and nothing is written to the target.
//!
//! Run: `cargo test -p strait --test kafka -- failback:: --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use strait_testkit::AdminOp;
use strait_wire::TopicPartition;
use strait_wire::offset_commit::GroupOffsets;

const COPY: &str = "fbc";
const EXPORT: &str = "fbe";
const PARTITIONS: i32 = 2;
const MIRROR: &str = "strait-fb";
/// Mirrored before the failure.
const MIRRORED: usize = 100;
/// Written to the source after the mirror stopped: stranded.
const STRANDED: usize = 130;
/// Written to the target after the failover (numbered from 1000).
const AFTER: std::ops::Range<usize> = 1000..1020;
/// Written to the old source after the failover (producers that kept writing there).
const DIVERGED: std::ops::Range<usize> = 2000..2010;
/// Offsets on the old source after the diverged records.
const END: usize = STRANDED + 10;

fn failback(
    config: &Path,
    failed_over_at: &str,
    extra: &[&str],
    exit_after: Option<&str>,
) -> std::process::Output {
    let mut args = vec!["--failed-over-at", failed_over_at];
    args.extend_from_slice(extra);
    handover("failback", config, &args, exit_after)
}

/// Waits (60 s at most) until the restarted old source serves both topics' partitions and the
/// mirror's group coordinator: leaders are elected again some time after the broker is back.
async fn wait_served(s: &strait_wire::Client) {
    let tps: Vec<(TopicPartition, strait_wire::OffsetSpec)> = [COPY, EXPORT]
        .into_iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| TopicPartition::new(t, p).unwrap()))
        .map(|tp| (tp, strait_wire::OffsetSpec::Latest))
        .collect();
    let only: Vec<TopicPartition> = tps.iter().map(|(tp, _)| tp.clone()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = s
            .list_offsets(&tps, strait_wire::Isolation::ReadUncommitted)
            .await
            .is_ok_and(|l| l.iter().all(|l| l.offset.is_some()));
        let group = GroupOffsets::new(s, MIRROR).fetch(&only).await.is_ok();
        if listed && group {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted source does not serve its partitions after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn failback_copies_or_exports_exactly_the_stranded_records() {
    let (mut src, dst) = clusters("fb");
    for t in [COPY, EXPORT] {
        src.admin(&[AdminOp::topic(t, PARTITIONS, 1)]).unwrap();
        dst.admin(&[AdminOp::topic(t, PARTITIONS, 1)]).unwrap();
    }
    let rt = runtime();
    let (s, d) = rt.block_on(async { (client(&src).await, client(&dst).await) });
    rt.block_on(async {
        for t in [COPY, EXPORT] {
            produce_numbered(&s, t, 0..PARTITIONS, 0..MIRRORED).await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let extra = "groups = [\"app\"]\ncheckpoint_interval = \"500ms\"\n";
    let mirror_config = write_config(dir.path(), "fb", &src, &dst, "fb.", MIRROR, extra);
    let (mut mirror, log) = spawn_strait(&mirror_config, 0);
    for t in [COPY, EXPORT] {
        rt.block_on(wait_until_committed(
            &s,
            MIRROR,
            t,
            &[MIRRORED as i64; PARTITIONS as usize],
            Duration::from_secs(120),
        ));
    }
    terminate_cleanly(&mut mirror, &log);
    drop(mirror);
    // The source site "fails": what it takes now never reaches the target.
    rt.block_on(async {
        for t in [COPY, EXPORT] {
            produce_numbered(&s, t, 0..PARTITIONS, MIRRORED..STRANDED).await;
        }
    });
    // The source's broker dies (SIGKILL); the target takes the writes meanwhile; the old source
    // comes back with everything it had acknowledged.
    let node = src.node_ids()[0];
    src.kill_node(node).unwrap();
    rt.block_on(async {
        for t in [COPY, EXPORT] {
            produce_numbered(&d, t, 0..PARTITIONS, AFTER).await;
        }
    });
    src.start_node(node).unwrap();
    let s = rt.block_on(client(&src));
    rt.block_on(wait_served(&s));
    // The failover's time; then some producers still write to the old source (diverged).
    let failed_over_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    std::thread::sleep(Duration::from_millis(20));
    rt.block_on(async {
        for t in [COPY, EXPORT] {
            produce_numbered(&s, t, 0..PARTITIONS, DIVERGED).await;
        }
    });
    let copy_config = write_config(dir.path(), "fbc", &src, &dst, COPY, MIRROR, extra);
    let export_config = write_config(dir.path(), "fbe", &src, &dst, EXPORT, MIRROR, extra);

    // No decision: refused, naming the exact range.
    let out = failback(&copy_config, &failed_over_at, &[], None);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    for p in 0..PARTITIONS {
        assert!(
            text.contains(&format!(
                "{COPY}-{p}: {} record(s) at offsets {MIRRORED}..{END}; stranded: {}",
                END - MIRRORED,
                STRANDED - MIRRORED
            )),
            "{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "{} stranded, {} diverged",
            2 * (STRANDED - MIRRORED),
            2 * DIVERGED.len()
        )),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stranded"));

    // Copy, interrupted right after the copy, then again.
    let crashed = failback(
        &copy_config,
        &failed_over_at,
        &["--stranded", "copy"],
        Some("stranded_decision"),
    );
    assert_eq!(
        crashed.status.code(),
        Some(strait::failover::plan::TEST_EXIT_CODE)
    );
    let reverse = dir.path().join("reverse.toml");
    let out = failback(
        &copy_config,
        &failed_over_at,
        &[
            "--stranded",
            "copy",
            "--write-reverse-config",
            reverse.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("copied: "), "{text}");
    assert!(text.contains("[done] copies_excluded: "), "{text}");
    let want: Vec<usize> = (0..MIRRORED)
        .chain(AFTER)
        .chain(MIRRORED..STRANDED)
        .chain(DIVERGED)
        .collect();
    let on_target = rt.block_on(read_all(&d, COPY, PARTITIONS));
    for p in 0..PARTITIONS {
        assert_eq!(
            numbers(&on_target[&p]),
            want,
            "{COPY}-{p} on the target: every record once, the stranded ones appended once"
        );
    }
    let tps = |t: &str| -> Vec<TopicPartition> {
        (0..PARTITIONS)
            .map(|p| TopicPartition::new(t, p).unwrap())
            .collect()
    };
    let commits = |client: &strait_wire::Client, t: &str| -> BTreeMap<i32, (i64, Option<String>)> {
        rt.block_on(async {
            GroupOffsets::new(client, MIRROR)
                .fetch(&tps(t))
                .await
                .unwrap()
                .into_iter()
                .filter_map(|(tp, c)| {
                    let c = c?;
                    Some((tp.partition(), (c.offset, c.metadata)))
                })
                .collect()
        })
    };
    for (p, (offset, metadata)) in commits(&s, COPY) {
        assert_eq!(offset, END as i64, "partition {p}");
        assert_eq!(metadata.as_deref(), Some("strait.failback=copy"));
    }
    assert_eq!(
        commits(&d, COPY)
            .into_iter()
            .map(|(p, (o, _))| (p, o))
            .collect::<BTreeMap<_, _>>(),
        (0..PARTITIONS)
            .map(|p| (p, MIRRORED as i64))
            .collect::<BTreeMap<_, _>>(),
        "the reverse mirror starts after the last record mirrored before the failover"
    );

    // The reverse mirror copies what the target took after the failover to the old source.
    mirror_until_caught_up(&rt, &reverse, 1, &d, MIRROR, COPY, PARTITIONS);
    // Nothing writes to the target from here on: a later change is a copy back.
    let target_ends = rt.block_on(end_offsets(&d, COPY, PARTITIONS));
    let on_old_source = rt.block_on(read_all(&s, COPY, PARTITIONS));
    let old_want: Vec<usize> = (0..STRANDED).chain(DIVERGED).chain(AFTER).collect();
    for p in 0..PARTITIONS {
        assert_eq!(
            numbers(&on_old_source[&p]),
            old_want,
            "{COPY}-{p} on the old source: its history, then what the target took after the \
             failover, every record exactly once (the stranded copies are not copied back)"
        );
    }

    // Later, the switchover back through the reverse flow moves the original mirror's group
    // past everything the reverse mirror wrote: restarted, it copies nothing back.
    let out = handover("switchover", &reverse, &[], None);
    assert!(out.status.success());
    let source_ends = rt.block_on(end_offsets(&s, COPY, PARTITIONS));
    assert_eq!(
        commits(&s, COPY)
            .into_iter()
            .map(|(p, (o, _))| (p, o))
            .collect::<BTreeMap<_, _>>(),
        (0..PARTITIONS)
            .map(|p| (p, source_ends[p as usize]))
            .collect::<BTreeMap<_, _>>(),
        "the original mirror's group is past the reverse mirror's records"
    );
    let (mut again, again_log) = spawn_strait(&copy_config, 2);
    rt.block_on(wait_until_committed(
        &s,
        MIRROR,
        COPY,
        &source_ends,
        Duration::from_secs(120),
    ));
    // A few commit intervals in which a loop would show.
    std::thread::sleep(Duration::from_secs(2));
    terminate_cleanly(&mut again, &again_log);
    assert_eq!(
        rt.block_on(end_offsets(&d, COPY, PARTITIONS)),
        target_ends,
        "the original mirror copied something back"
    );

    // Export: the file holds exactly the stranded range; the target is untouched.
    let file = dir.path().join("stranded.jsonl");
    let target_before = rt.block_on(end_offsets(&d, EXPORT, PARTITIONS));
    let out = failback(
        &export_config,
        &failed_over_at,
        &["--stranded", "export", file.to_str().unwrap()],
        None,
    );
    assert!(out.status.success());
    assert_eq!(
        rt.block_on(end_offsets(&d, EXPORT, PARTITIONS)),
        target_before
    );
    let mut exported: BTreeMap<i32, Vec<(i64, usize)>> = BTreeMap::new();
    for line in std::fs::read_to_string(&file).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["topic"], EXPORT);
        let value = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().unwrap())
            .unwrap();
        let (p, n) = std::str::from_utf8(&value)
            .unwrap()
            .split_once('-')
            .unwrap();
        assert_eq!(p, v["partition"].as_i64().unwrap().to_string());
        assert!(v["timestamp"].as_i64().unwrap() > 0);
        exported
            .entry(p.parse().unwrap())
            .or_default()
            .push((v["offset"].as_i64().unwrap(), n.parse().unwrap()));
    }
    for p in 0..PARTITIONS {
        assert_eq!(
            exported.get(&p).cloned().unwrap_or_default(),
            (MIRRORED..STRANDED)
                .chain(DIVERGED)
                .zip(MIRRORED as i64..)
                .map(|(n, o)| (o, n))
                .collect::<Vec<_>>(),
            "{EXPORT}-{p}: the exported records are the stranded range"
        );
    }
    for (_, (offset, metadata)) in commits(&s, EXPORT) {
        assert_eq!(offset, END as i64);
        assert_eq!(metadata.as_deref(), Some("strait.failback=export"));
    }
}
