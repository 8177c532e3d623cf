//! A tiny `sh` process per cluster that SIGKILLs the cluster's JVMs (brokers and `spawn_java` processes) and
//! removes its dir if this process dies without running `Drop` (SIGKILL, abort, a test harness timeout). It waits
//! for EOF on a pipe that only this process holds open: the kernel closes it however we exit. Pipes are
//! close-on-exec, so the JVMs we start do not hold it open.

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::error::Error;

const SCRIPT: &str = r#"
trap '' INT HUP
while read -r _; do :; done
for f in "$1"/node-*/jvm.pid "$1"/procs/*/jvm.pid; do
  [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
done
[ "$2" = keep ] || rm -rf "$1"
"#;

#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    pub(crate) fn start(cluster_dir: &Path, keep: bool) -> Result<Watchdog, Error> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            // $0: shows in `ps`.
            .arg("strait.testkit-watchdog")
            .arg(cluster_dir)
            .arg(if keep { "keep" } else { "remove" })
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io("starting the cluster watchdog (sh)", e))?;
        let stdin = child.stdin.take();
        crate::registry::track_process(child.id());
        Ok(Watchdog { child, stdin })
    }

    /// Ends the watchdog: EOF on its pipe. The caller has already stopped the JVMs and removed their pid files,
    /// so it only removes the directory (unless kept).
    pub(crate) fn finish(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.wait();
        crate::registry::untrack_process(self.child.id());
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.finish();
    }
}
