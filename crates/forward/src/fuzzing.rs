//! Entry points of the fuzz targets under `fuzz/` that exercise this crate (feature
//! `unstable-fuzzing`; not a stable API). The fuzz targets call them on nightly; the unit tests
//! below run them over the committed seeds (`fuzz/seeds/<target>/`), the Java-written fixtures
//! and whatever local corpus and crash artifacts exist, on stable, in the normal suite.

use bytes::Bytes;

use crate::{
    Compression, FetchedBatch, FetchedRecords, ProducerStamp, RecordBatch, ReencodedBatch,
    TargetPolicy, reencode, rewrite_for_produce,
};

/// The `batch_parse` target: arbitrary bytes to the fetch walker, the batch parser, the records
/// walker, `rewrite_for_produce`, `reencode` and legacy conversion. Nothing may panic, and every
/// batch the crate produces must parse again.
///
/// The first byte selects how the rest is used: as fetched records as they are, or (bit 7 set)
/// as a single v2 batch whose length field, magic and CRC are repaired first, so the fuzzer
/// reaches the records decoder and the codecs instead of stopping at the CRC check.
pub fn batch_parse(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 0x80 != 0 && bytes.len() >= 61 {
        // Repair batchLength, magic and CRC so the batch passes the header checks.
        let len = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        bytes[16] = 2;
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    let bytes = Bytes::from(bytes);
    let _ = RecordBatch::parse(bytes.clone());
    let mut walker = FetchedRecords::new(bytes.clone());
    for entry in walker.by_ref() {
        let Ok(entry) = entry else { break };
        match &entry {
            FetchedBatch::V2(batch) => check_v2(batch, mode),
            FetchedBatch::Legacy(legacy) => {
                let policy = TargetPolicy {
                    max_decompressed_bytes: 1 << 20,
                    ..TargetPolicy::default()
                };
                if let Ok(out) = legacy.reencode(0, ProducerStamp::NONE, &policy) {
                    check_output(out);
                }
            }
        }
    }
    assert_eq!(
        walker.position() + walker.truncated_tail_bytes(),
        bytes.len()
    );
}

fn check_v2(batch: &RecordBatch, mode: u8) {
    let _ = batch.control_record();
    if let Ok(decoded) = batch.decode_records(1 << 20) {
        for record in decoded.iter() {
            let Ok(record) = record else { break };
            let _ = record.headers().count();
            let _ = batch.record_timestamp(&record);
        }
    }
    let rewritten = rewrite_for_produce(batch, ProducerStamp::idempotent(1, 0, 0));
    let reparsed = RecordBatch::parse(rewritten.clone()).expect("rewritten batch must parse");
    assert_eq!(&rewritten[61..], &batch.as_bytes()[61..]);
    assert_eq!(reparsed.record_count(), batch.record_count());

    let policy = TargetPolicy {
        max_message_bytes: 512 + usize::from(mode) * 64,
        compression: Compression::from_id(mode % 5).ok(),
        max_decompressed_bytes: 1 << 20,
        ..TargetPolicy::default()
    };
    let from = batch.base_offset().saturating_add(i64::from(mode % 4));
    if let Ok(out) = reencode(batch, from, ProducerStamp::NONE, &policy) {
        check_output(out);
    }
}

fn check_output(out: Vec<ReencodedBatch>) {
    for o in out {
        let b =
            RecordBatch::parse(o.batch().as_bytes().clone()).expect("re-encoded batch must parse");
        assert_eq!(
            i64::from(b.last_offset_delta()) + 1,
            i64::from(b.record_count())
        );
        assert_eq!(b.record_count() as usize, o.source_offsets().len());
        let decoded = b
            .decode_records(64 << 20)
            .expect("re-encoded batch must decompress");
        assert_eq!(
            decoded
                .validate()
                .expect("re-encoded records must be valid"),
            o.source_offsets().len()
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use strait_testkit::fuzz;

    /// The Java-written fixture batches (tests/fixtures/*.bin), each prefixed with the mode bytes
    /// that feed it as fetched records (0x00) and as a repaired v2 batch (0x80, 0x83 with a
    /// re-encode to another codec and a later start offset).
    fn fixture_seeds() -> Vec<(PathBuf, Vec<u8>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "bin") {
                let bytes = std::fs::read(&path).unwrap();
                for mode in [0x00u8, 0x80, 0x83] {
                    let mut seed = vec![mode];
                    seed.extend_from_slice(&bytes);
                    seeds.push((path.with_extension(format!("bin+{mode:#04x}")), seed));
                }
            }
        }
        seeds.sort();
        seeds
    }

    /// `batch_parse` over its committed seeds, the fixtures and any local corpus: a regression on
    /// a known input fails here, on stable, without a fuzz run.
    #[test]
    fn batch_parse_corpus() {
        assert!(!fuzz::seeds("batch_parse").unwrap().is_empty());
        let seeds = fuzz::inputs("batch_parse").unwrap();
        let fixtures = fixture_seeds();
        assert!(fixtures.len() >= 30, "{} fixture seeds", fixtures.len());
        for (path, data) in seeds.iter().chain(&fixtures) {
            let run = std::panic::catch_unwind(|| batch_parse(data));
            assert!(run.is_ok(), "batch_parse panicked on {}", path.display());
        }
    }
}
