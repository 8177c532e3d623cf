//! Batches produced by this crate, checked by the real Kafka broker code: every rewritten,
//! re-encoded and merged batch is written to a directory and run through Kafka 4.3.1's
//! `LogValidator` (client origin, CreateTime topic, codec = the batch's) by
//! tests/fixtures/gen/Fixtures.java, which also dumps what the Java consumer code reads from it.
//!
//! Needs `java` (17+) and the Kafka jars, so it is ignored by default:
//!
//! ```text
//! STRAIT_KAFKA_LIB=/root/.cache/strait/kafka-4.3.1/lib \
//!   cargo test -p strait-forward --test offline -- java_verify:: -- --ignored
//! ```

#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use common::*;
use strait_forward::merge::merge;
use strait_forward::reencode::{Allowance, reencode_run_within};
use strait_forward::{
    Compression, FetchedBatch, FetchedRecords, LogAppendTimePolicy, ProducerStamp, RecordBatch,
    TargetPolicy, reencode, rewrite_for_produce,
};

fn kafka_lib() -> String {
    std::env::var("STRAIT_KAFKA_LIB")
        .unwrap_or_else(|_| "/root/.cache/strait/kafka-4.3.1/lib".into())
}

fn first_v2(name: &str) -> RecordBatch {
    match FetchedRecords::new(fixture(name)).next().unwrap().unwrap() {
        FetchedBatch::V2(b) => b,
        FetchedBatch::Legacy(_) => panic!("{name}: legacy"),
    }
}

#[test]
#[ignore = "needs java and the Kafka jars; see the module docs"]
fn kafka_log_validator_accepts_everything_we_produce() {
    // name -> (bytes, expected verdict)
    let mut produced: BTreeMap<String, (Bytes, &str)> = BTreeMap::new();
    let stamp = ProducerStamp::idempotent(123, 4, 1000);

    for c in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let src = first_v2(&format!("v2_{c}"));
        produced.insert(
            format!("pass_{c}"),
            (rewrite_for_produce(&src, stamp), "ok inplace=true"),
        );
        for target in Compression::ALL {
            let policy = TargetPolicy {
                compression: Some(target),
                ..TargetPolicy::default()
            };
            let out = reencode(&src, 1003, stamp, &policy).unwrap();
            for (i, o) in out.into_iter().enumerate() {
                produced.insert(
                    format!("reencode_{c}_to_{target}_{i}"),
                    (o.into_batch().into_bytes(), "ok inplace=true"),
                );
            }
        }
        // Split into small batches.
        let policy = TargetPolicy {
            max_message_bytes: 74 * 1024,
            compression: Some(Compression::Zstd),
            ..TargetPolicy::default()
        };
        for (i, o) in reencode(&src, 0, ProducerStamp::NONE, &policy)
            .unwrap()
            .into_iter()
            .enumerate()
        {
            produced.insert(
                format!("split_{c}_{i}"),
                (o.into_batch().into_bytes(), "ok inplace=true"),
            );
        }
    }
    for c in ["none", "zstd"] {
        let src = first_v2(&format!("v2_compacted_{c}"));
        let out = reencode(&src, 0, ProducerStamp::NONE, &TargetPolicy::default()).unwrap();
        produced.insert(
            format!("compacted_{c}"),
            (out[0].batch().as_bytes().clone(), "ok inplace=true"),
        );
        // Negative control: forwarding the gapped batch as is must be rejected.
        produced.insert(
            format!("compacted_{c}_unfixed"),
            (
                rewrite_for_produce(&src, ProducerStamp::NONE),
                "REJECTED InvalidRecordException: Inconsistent batch offset range",
            ),
        );
    }
    let lat = first_v2("v2_log_append_time");
    produced.insert(
        "lat_pass".into(),
        (rewrite_for_produce(&lat, stamp), "ok inplace=true"),
    );
    let keep = TargetPolicy {
        log_append_time: LogAppendTimePolicy::KeepAppendTime,
        ..TargetPolicy::default()
    };
    produced.insert(
        "lat_keep".into(),
        (
            reencode(&lat, 0, stamp, &keep).unwrap()[0]
                .batch()
                .as_bytes()
                .clone(),
            "ok inplace=true",
        ),
    );
    for name in [
        "v0_none",
        "v0_gzip",
        "v1_none",
        "v1_gzip",
        "v1_snappy",
        "v1_lz4",
        "v1_gzip_log_append_time",
    ] {
        for (i, entry) in FetchedRecords::new(fixture(name)).enumerate() {
            let FetchedBatch::Legacy(l) = entry.unwrap() else {
                panic!()
            };
            for (j, o) in l
                .reencode(0, stamp, &TargetPolicy::default())
                .unwrap()
                .into_iter()
                .enumerate()
            {
                produced.insert(
                    format!("legacy_{name}_{i}_{j}"),
                    (o.into_batch().into_bytes(), "ok inplace=true"),
                );
            }
        }
    }
    // Re-batching: Java-written batches merged (the same batch twice; compacted ones close their
    // gaps), then stamped as the pipeline stamps every produced batch.
    for c in [
        "none",
        "gzip",
        "snappy",
        "lz4",
        "zstd",
        "compacted_none",
        "compacted_zstd",
    ] {
        let src = first_v2(&format!("v2_{c}")).into_bytes();
        let merged = merge(&[src.clone(), src], 64 << 20).unwrap();
        let merged = RecordBatch::parse(merged.batch).unwrap();
        produced.insert(
            format!("merged_{c}"),
            (rewrite_for_produce(&merged, stamp), "ok inplace=true"),
        );
    }
    // Re-compression runs: Java-written batches (each fixture three times, compacted ones with
    // their gaps) re-encoded together to zstd and cut by compressed size, as the planner does
    // when `mirror.compression` changes the codec; a small target cuts them into several. The
    // large target must hold all three copies (3 x 170 KB for `none`), or it cuts too.
    for c in ["none", "gzip", "lz4", "compacted_none", "compacted_zstd"] {
        let src = first_v2(&format!("v2_{c}"));
        let policy = TargetPolicy {
            compression: Some(Compression::Zstd),
            ..TargetPolicy::default()
        };
        for (target, name) in [(4 << 20, "one"), (600, "cut")] {
            let run = reencode_run_within(
                &[src.clone(), src.clone(), src.clone()],
                0,
                stamp,
                &policy,
                target,
                1.0,
                &mut Allowance::unlimited(),
            )
            .unwrap();
            for (i, o) in run.batches.into_iter().enumerate() {
                produced.insert(
                    format!("run_{c}_{name}_{i}"),
                    (o.into_batch().into_bytes(), "ok inplace=true"),
                );
            }
        }
    }
    assert!(
        produced.contains_key("run_none_cut_1") && !produced.contains_key("run_none_one_1"),
        "a small target cuts a run, a large one does not"
    );
    // Negative control: a transaction marker must be rejected.
    let marker = FetchedRecords::new(fixture("v2_txn_markers"))
        .filter_map(|e| match e.unwrap() {
            FetchedBatch::V2(b) if b.is_control() => Some(b),
            _ => None,
        })
        .next()
        .unwrap();
    produced.insert(
        "marker".into(),
        (
            rewrite_for_produce(&marker, ProducerStamp::NONE),
            "REJECTED InvalidRecordException: Clients are not allowed to write control records",
        ),
    );

    let dir: PathBuf =
        std::env::temp_dir().join(format!("strait-forward-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, (bytes, _)) in &produced {
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
    let out = Command::new("java")
        .arg("-cp")
        .arg(format!("{}/*", kafka_lib()))
        .arg(fixtures_dir().join("gen/Fixtures.java"))
        .arg("verify")
        .arg(&dir)
        .output()
        .expect("run java");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "java failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // Split the output per file.
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("verify ") {
            current = rest.split(' ').next().unwrap().to_string();
            sections.insert(current.clone(), format!("{line}\n"));
        } else {
            sections
                .get_mut(&current)
                .unwrap()
                .push_str(&format!("{line}\n"));
        }
    }
    assert_eq!(sections.len(), produced.len(), "{stdout}");
    for (name, (bytes, verdict)) in &produced {
        let section = &sections[name];
        let first = section.lines().next().unwrap();
        assert!(
            first.starts_with(&format!("verify {name} {verdict}")),
            "{name}: expected {verdict}, Kafka said: {first}"
        );
        if verdict.starts_with("REJECTED") {
            eprintln!("{first}");
        } else {
            let batch = RecordBatch::parse(bytes.clone()).unwrap();
            let rust_view = dump_batch(name, &batch);
            let java_view: String = section.lines().skip(1).map(|l| format!("{l}\n")).collect();
            assert_eq!(
                java_view, rust_view,
                "{name}: Java reads the batch differently"
            );
        }
    }
    eprintln!(
        "{} batches verified by Kafka's LogValidator",
        produced.len()
    );
}
