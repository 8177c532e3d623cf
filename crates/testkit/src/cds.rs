//! AppCDS (class data sharing) archives for the broker and tool JVMs: loading Kafka's classes from a memory-mapped
//! archive instead of parsing and verifying ~100 jars cuts a broker start by about a second and a tool run by a
//! third of a second on the 2-core machines (measured: broker 1.9 s -> 1.05 s, console producer 0.81 s -> 0.50 s).
//!
//! The first JVM of a kind (per process, while no archive exists) dumps one at exit (`-XX:ArchiveClassesAtExit`)
//! into a temp file; after a clean exit the archive is checked with `-Xshare:on` (a truncated archive makes the
//! JVM abort, so nothing unchecked is ever used) and renamed into the jar cache, keyed by the JVM, the classpath
//! and the jars' sizes and times. `STRAIT_CDS=0` turns it off.

use std::collections::HashSet;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::UNIX_EPOCH;

/// JVM logging: nothing on stdout (a tool's stdout is data), warnings on stderr, CDS chatter (a dump warns about
/// every class it skips; a stale archive warns before falling back) nowhere.
pub(crate) const JVM_LOG_ARGS: &[&str] = &["-Xlog:disable", "-Xlog:all=warning,cds*=off:stderr"];

/// An archive being written by one JVM.
#[derive(Debug)]
pub(crate) struct CdsDump {
    tmp: PathBuf,
    target: PathBuf,
    java: PathBuf,
    classpath: String,
    vm_flags: Vec<String>,
}

/// What a JVM does about class data sharing.
#[derive(Debug)]
pub(crate) enum Cds {
    Off,
    Use(PathBuf),
    Dump(CdsDump),
}

impl Cds {
    pub(crate) fn jvm_args(&self) -> Vec<String> {
        match self {
            Cds::Off => Vec::new(),
            Cds::Use(archive) => vec![format!("-XX:SharedArchiveFile={}", archive.display())],
            Cds::Dump(d) => vec![format!("-XX:ArchiveClassesAtExit={}", d.tmp.display())],
        }
    }

    pub(crate) fn into_dump(self) -> Option<CdsDump> {
        match self {
            Cds::Dump(d) => Some(d),
            _ => None,
        }
    }
}

/// Targets some JVM of this process is dumping right now.
fn dumping() -> &'static Mutex<HashSet<PathBuf>> {
    static DUMPING: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    DUMPING.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Decides how a JVM of `kind` ("broker", "tool") with this classpath uses CDS. `vm_flags` are the GC/JIT flags
/// of that kind, used again to check a fresh archive.
pub(crate) fn prepare(
    java: &Path,
    classpath: &str,
    lib_dir: &Path,
    kind: &str,
    vm_flags: &[&str],
) -> Cds {
    if std::env::var_os("STRAIT_CDS").is_some_and(|v| v == "0") {
        return Cds::Off;
    }
    // CDS refuses directories on the classpath ("Cannot have non-empty directory in paths").
    if classpath
        .split(':')
        .any(|entry| !entry.ends_with("/*") && Path::new(entry).is_dir())
    {
        return Cds::Off;
    }
    let Some(java_resolved) = resolve_on_path(java) else {
        return Cds::Off;
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    kind.hash(&mut hasher);
    classpath.hash(&mut hasher);
    vm_flags.hash(&mut hasher);
    stamp(&java_resolved).hash(&mut hasher);
    java_resolved.hash(&mut hasher);
    for entry in classpath.split(':') {
        stamp(Path::new(entry)).hash(&mut hasher);
        let dir = entry.strip_suffix("/*").unwrap_or(entry);
        let mut files: Vec<(String, Option<(u64, u64)>)> = fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| {
                        (
                            e.file_name().to_string_lossy().into_owned(),
                            stamp(&e.path()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files.hash(&mut hasher);
    }
    let dir = lib_dir.parent().unwrap_or(lib_dir).join("strait-cds");
    let target = dir.join(format!("{kind}-{:016x}.jsa", hasher.finish()));
    if target.is_file() {
        return Cds::Use(target);
    }
    let mut busy = dumping().lock().unwrap_or_else(|p| p.into_inner());
    if busy.contains(&target) || fs::create_dir_all(&dir).is_err() {
        return Cds::Off;
    }
    busy.insert(target.clone());
    let tmp = dir.join(format!(
        "{kind}-{}-{:x}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ));
    Cds::Dump(CdsDump {
        tmp,
        target,
        java: java.to_path_buf(),
        classpath: classpath.to_string(),
        vm_flags: vm_flags.iter().map(|s| s.to_string()).collect(),
    })
}

/// Called once the dumping JVM has exited (`status` None when it was killed by us): publishes the archive if the
/// JVM exited by itself or on SIGTERM and the archive loads; discards it otherwise.
pub(crate) fn finish(dump: CdsDump, status: Option<ExitStatus>) {
    // A JVM killed by a signal (SIGKILL) may have died mid-dump; one that exited ran its exit path to the end.
    let exited = status.is_some_and(|s| s.code().is_some() || s.signal() == Some(15));
    if exited && dump.tmp.is_file() && !dump.target.is_file() && archive_loads(&dump) {
        let _ = fs::rename(&dump.tmp, &dump.target);
    }
    let _ = fs::remove_file(&dump.tmp);
    dumping()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&dump.target);
}

fn archive_loads(dump: &CdsDump) -> bool {
    Command::new(&dump.java)
        .args(&dump.vm_flags)
        .arg("-Xshare:on")
        .arg(format!("-XX:SharedArchiveFile={}", dump.tmp.display()))
        .arg("-cp")
        .arg(&dump.classpath)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// (size, mtime) of a file, for cache keys.
fn stamp(path: &Path) -> Option<(u64, u64)> {
    let meta = fs::metadata(path).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some((meta.len(), mtime))
}

/// The real file behind `java` (searched on PATH when it has no directory), so a JDK upgrade changes the key.
fn resolve_on_path(java: &Path) -> Option<PathBuf> {
    if java.components().count() > 1 {
        return fs::canonicalize(java).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(java))
        .find(|candidate| candidate.is_file())
        .and_then(|found| fs::canonicalize(found).ok())
}
