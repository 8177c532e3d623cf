//! The suite's process registry, so that a test run stops exactly its own processes.
//!
//! With `STRAIT_TEST_PIDS` set to a directory (`scripts/test.sh` gives each run its own), every
//! process the testkit starts (broker JVMs, tool JVMs, `spawn_java` processes, cluster
//! watchdogs), and any process a test registers with [`track_process`] (the `strait` binaries),
//! is recorded there as a file named after its pid that holds the process's start time (field 22
//! of `/proc/<pid>/stat`). The file is removed when the process is reaped. Whatever is left when
//! the run ends was leaked by an abrupt exit; `test.sh` kills those pids, and only if the start
//! time still matches, so a pid reused by someone else's process is never touched. Without
//! `STRAIT_TEST_PIDS` nothing is recorded. Recording is best effort: it never fails a test.

use std::path::PathBuf;

/// The variable naming the registry directory.
pub const PIDS_ENV: &str = "STRAIT_TEST_PIDS";

fn dir() -> Option<PathBuf> {
    std::env::var_os(PIDS_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`); `None` if
/// the process does not exist or this is not Linux.
pub(crate) fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command name, in parentheses) may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts with field 3 (state); field 22 is the 20th after the name.
    rest.split_whitespace().nth(19).map(str::to_owned)
}

/// Records a process this run started (with `STRAIT_TEST_PIDS` set).
pub fn track_process(pid: u32) {
    if let Some(dir) = dir() {
        track_in(&dir, pid);
    }
}

/// Forgets a process once it has been reaped.
pub fn untrack_process(pid: u32) {
    if let Some(dir) = dir() {
        let _ = std::fs::remove_file(dir.join(pid.to_string()));
    }
}

fn track_in(dir: &std::path::Path, pid: u32) {
    if let Some(start) = start_time(pid) {
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(pid.to_string()), start);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_stable_and_absent_for_no_process() {
        let me = std::process::id();
        let a = start_time(me);
        if cfg!(target_os = "linux") {
            assert!(
                a.as_deref().is_some_and(|s| s.parse::<u64>().is_ok()),
                "{a:?}"
            );
        }
        assert_eq!(start_time(me), a);
        // Linux pids stop at 2^22.
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn a_live_process_is_recorded_with_its_start_time() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        track_in(dir.path(), me);
        if let Some(start) = start_time(me) {
            let recorded = std::fs::read_to_string(dir.path().join(me.to_string())).unwrap();
            assert_eq!(recorded, start);
        }
        // A pid that does not exist is not recorded.
        track_in(dir.path(), u32::MAX);
        assert!(!dir.path().join(u32::MAX.to_string()).exists());
    }
}
