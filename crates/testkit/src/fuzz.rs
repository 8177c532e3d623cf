//! The fuzz targets' inputs (`fuzz/` at the top of the workspace), for the stable tests that run
//! each target's entry function over them: the committed seeds (`fuzz/seeds/<target>/`), and the
//! local corpus and crash artifacts of earlier fuzz runs when there are any (`fuzz/corpus/`,
//! `fuzz/artifacts/`; not committed).

use std::path::{Path, PathBuf};

/// The workspace's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The fuzz targets: the names of `fuzz/fuzz_targets/*.rs`, sorted.
pub fn targets() -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(fuzz_dir().join("fuzz_targets"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem()
        {
            names.push(stem.to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Every input of `target`: (path, bytes), the committed seeds first, sorted by path within each
/// directory. A directory that does not exist contributes nothing.
pub fn inputs(target: &str) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut found = Vec::new();
    for dir in ["seeds", "corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(dir).join(target)) else {
            continue;
        };
        let mut here = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.is_file() {
                let data = std::fs::read(&path)?;
                here.push((path, data));
            }
        }
        here.sort();
        found.extend(here);
    }
    Ok(found)
}

/// The committed seeds of `target` alone (`fuzz/seeds/<target>/`).
pub fn seeds(target: &str) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let seeds = fuzz_dir().join("seeds").join(target);
    Ok(inputs(target)?
        .into_iter()
        .filter(|(p, _)| p.starts_with(&seeds))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// Every fuzz target has committed seeds, so its stable corpus test has inputs (and a new
    /// target cannot be added without them).
    #[test]
    fn every_fuzz_target_has_seeds() {
        let targets = super::targets().unwrap();
        assert!(targets.len() >= 4, "{targets:?}");
        for t in targets {
            assert!(
                !super::seeds(&t).unwrap().is_empty(),
                "fuzz target {t} has no seeds: add inputs under fuzz/seeds/{t}/"
            );
        }
    }
}
