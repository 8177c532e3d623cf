//! Long-running Java processes next to a cluster (MirrorMaker 1/2, perf tools): started with the cluster's jars,
//! logged to files, stopped on `Drop`, and killed by the cluster's watchdog if the test process dies.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cds::{self, CdsDump, JVM_LOG_ARGS};
use crate::cluster::Cluster;
use crate::error::{Error, tail};

/// JVM options of spawned processes: full JIT (they are what throughput comparisons measure) and a modest heap;
/// options given to [`Cluster::spawn_java`] come after these and win.
const PROCESS_JVM_OPTS: &[&str] = &[
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
];
/// How long `stop`/`Drop` wait after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A Java process started by [`Cluster::spawn_java`]. `Drop` stops it (SIGTERM, then SIGKILL after 10 s).
#[derive(Debug)]
pub struct JavaProcess {
    main_class: String,
    dir: PathBuf,
    child: Option<Child>,
    status: Option<ExitStatus>,
    cds_dump: Option<CdsDump>,
}

impl Cluster {
    /// Starts `main_class` from this cluster's lib dir in the background, e.g. MirrorMaker 2
    /// (`KafkaVersion::mirror_maker2_class`) with a properties file from
    /// [`write_java_client_config`](Cluster::write_java_client_config).
    ///
    /// `jvm_opts` follow the defaults (`-Xmx512m`, G1, full JIT). Output (stdout+stderr, INFO log) goes to
    /// `output.log` in [`JavaProcess::dir`], also the process's working directory.
    pub fn spawn_java(
        &self,
        main_class: &str,
        args: &[&str],
        jvm_opts: &[&str],
    ) -> Result<JavaProcess, Error> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let short = main_class.rsplit('.').next().unwrap_or(main_class);
        let dir = self.dir.join("procs").join(format!("{n:04}-{short}"));
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let out_path = dir.join("output.log");
        let out = File::create(&out_path)
            .map_err(|e| Error::io(format!("creating {}", out_path.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("duplicating {}", out_path.display()), e))?;
        let classpath = self.launch.classpath();
        let mut flags: Vec<&str> = PROCESS_JVM_OPTS.to_vec();
        flags.extend_from_slice(jvm_opts);
        let cds = cds::prepare(
            &self.launch.java,
            &classpath,
            &self.launch.lib_dir,
            "process",
            &flags,
        );
        let mut cmd = Command::new(&self.launch.java);
        cmd.args(&flags)
            .args(cds.jvm_args())
            .args(JVM_LOG_ARGS)
            .arg("-Dstrait.testkit=1")
            .arg(format!("-Dstrait.cluster={}", self.name))
            .arg(format!(
                "-Djava.io.tmpdir={}",
                self.launch.tmp_dir.display()
            ))
            .arg(format!("-Dkafka.logs.dir={}", dir.display()))
            .arg(self.launch.version.log_config_arg(false))
            .arg("-cp")
            .arg(classpath)
            .arg(main_class)
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(dump) = cds.into_dump() {
                    cds::finish(dump, None);
                }
                return Err(Error::io(
                    format!("starting `{}` for {main_class}", self.launch.java.display()),
                    e,
                ));
            }
        };
        crate::registry::track_process(child.id());
        let pid_path = dir.join("jvm.pid");
        fs::write(&pid_path, child.id().to_string())
            .map_err(|e| Error::io(format!("writing {}", pid_path.display()), e))?;
        Ok(JavaProcess {
            main_class: main_class.to_string(),
            dir,
            child: Some(child),
            status: None,
            cds_dump: cds.into_dump(),
        })
    }
}

impl JavaProcess {
    /// The process's directory (working dir, `output.log`, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id, while it runs.
    pub fn pid(&mut self) -> Option<u32> {
        self.is_running()
            .then(|| self.child.as_ref().map(Child::id))
            .flatten()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => match child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    self.reaped(Some(status));
                    false
                }
                Err(_) => false,
            },
            None => false,
        }
    }

    /// Its exit status, once it has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        let _ = self.is_running();
        self.status
    }

    /// Everything it wrote so far (stdout, stderr and its INFO log).
    pub fn output(&self) -> String {
        fs::read(self.dir.join("output.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last `lines` lines of [`output`](Self::output).
    pub fn output_tail(&self, lines: usize) -> String {
        tail(&self.output(), lines)
    }

    /// Stops it: SIGTERM (clean shutdown), SIGKILL after 10 s. Returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if let Some(child) = &mut self.child {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(child.id().to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            let deadline = Instant::now() + STOP_GRACE;
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = child.kill();
                        break child.wait().ok();
                    }
                }
            };
            self.reaped(status);
        }
        self.status
    }

    fn reaped(&mut self, status: Option<ExitStatus>) {
        if let Some(child) = self.child.take() {
            crate::registry::untrack_process(child.id());
        }
        self.status = status;
        let _ = fs::remove_file(self.dir.join("jvm.pid"));
        if let Some(dump) = self.cds_dump.take() {
            cds::finish(dump, status);
        }
    }

    /// The main class it runs.
    pub fn main_class(&self) -> &str {
        &self.main_class
    }
}

impl Drop for JavaProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
