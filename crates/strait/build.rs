//! Stamps the binary with the git commit and the build date for `strait --version`.
//!
//! Neither may break a build: a source tarball or a Docker context without `.git`, or a machine
//! without git, gets `unknown` for the commit. `STRAIT_GIT_COMMIT` set in the environment wins
//! (a Docker build passes it as a build argument), and `SOURCE_DATE_EPOCH` (reproducible
//! builds) fixes the date.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=STRAIT_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = std::env::var("STRAIT_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild the stamp when HEAD moves (a commit, a checkout), not on every build. Only
    // files that exist: cargo treats a missing one as always changed (a packed ref).
    let head_ref = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in std::iter::once("HEAD").chain(head_ref.as_deref()) {
        if let Some(p) = git(&["rev-parse", "--git-path", path])
            && std::path::Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
        });
    println!("cargo:rustc-env=STRAIT_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=STRAIT_BUILD_DATE={}", date(secs));
}

/// The trimmed output of a successful git command, if git and a repository are there.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// `YYYY-MM-DD` (UTC) of a Unix time, by Howard Hinnant's days-to-civil algorithm (no date crate
/// for one line of output).
fn date(secs: i64) -> String {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
