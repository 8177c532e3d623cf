//! One broker JVM (a combined broker+controller KRaft node): spawning, readiness probing, stopping.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cds::{self, CdsDump, JVM_LOG_ARGS};
use crate::cluster::Listener;
use crate::error::{Error, tail};
use crate::version::KafkaVersion;

/// What the broker logs once it serves clients (`KafkaBroker.STARTED_MESSAGE`); in KRaft it comes after the
/// broker caught up with the metadata log and was unfenced.
const STARTED_MARKER: &[u8] = b"Kafka Server started";
const BIND_FAILURE: &str = "Address already in use";

/// How to launch a JVM for this cluster.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub java: PathBuf,
    pub lib_dir: PathBuf,
    pub version: KafkaVersion,
    pub cluster: String,
    /// Broker JVM options (heap, GC, extra options from the builder).
    pub broker_jvm_opts: Vec<String>,
    /// `java.io.tmpdir` for every JVM of the cluster (snappy/zstd unpack native libraries there).
    pub tmp_dir: PathBuf,
}

impl Launch {
    pub(crate) fn classpath(&self) -> String {
        format!("{}/*", self.lib_dir.display())
    }
}

/// Why a node is not ready (yet).
pub(crate) enum Probe {
    Ready,
    Starting,
    /// The JVM exited; `port_in_use` when it could not bind a listener (the caller may retry with new ports).
    Exited {
        reason: String,
        port_in_use: bool,
    },
}

#[derive(Debug)]
pub(crate) struct Node {
    pub id: i32,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub client_ports: Vec<(Listener, u16)>,
    pub controller_port: u16,
    /// The port the broker binds for the `WAN` listener (clients reach it through a delay proxy).
    pub wan_port: Option<u16>,
    child: Option<Child>,
    /// Length of stdout.log when the current JVM was spawned: output before it belongs to an earlier run.
    out_offset: u64,
    /// How far the readiness probe has scanned stdout.log.
    scan_pos: u64,
    /// The last bytes scanned, so a marker split across two reads is still found.
    carry: Vec<u8>,
    started_seen: bool,
    /// The AppCDS archive this JVM writes at exit, if it is the one creating it.
    cds_dump: Option<CdsDump>,
}

impl Node {
    pub(crate) fn new(
        id: i32,
        dir: PathBuf,
        client_ports: Vec<(Listener, u16)>,
        controller_port: u16,
    ) -> Node {
        let config = dir.join("server.properties");
        Node {
            id,
            dir,
            config,
            client_ports,
            controller_port,
            wan_port: None,
            child: None,
            out_offset: 0,
            scan_pos: 0,
            carry: Vec::new(),
            started_seen: false,
            cds_dump: None,
        }
    }

    pub(crate) fn port(&self, l: Listener) -> Option<u16> {
        self.client_ports
            .iter()
            .find(|(x, _)| *x == l)
            .map(|(_, p)| *p)
    }

    pub(crate) fn out_path(&self) -> PathBuf {
        self.dir.join("stdout.log")
    }

    pub(crate) fn pid_path(&self) -> PathBuf {
        self.dir.join("jvm.pid")
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub(crate) fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    pub(crate) fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Starts the broker JVM; output goes to `stdout.log` (appended, so earlier runs stay readable).
    pub(crate) fn spawn(&mut self, launch: &Launch) -> Result<(), Error> {
        let out_path = self.out_path();
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(|e| Error::io(format!("opening {}", out_path.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("duplicating {}", out_path.display()), e))?;
        self.out_offset = out
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", out_path.display()), e))?
            .len();
        self.scan_pos = self.out_offset;
        self.carry.clear();
        self.started_seen = false;
        let logs = self.logs_dir();
        fs::create_dir_all(&logs)
            .map_err(|e| Error::io(format!("creating {}", logs.display()), e))?;

        let classpath = launch.classpath();
        let flags: Vec<&str> = launch.broker_jvm_opts.iter().map(String::as_str).collect();
        let cds = cds::prepare(&launch.java, &classpath, &launch.lib_dir, "broker", &flags);
        let mut cmd = Command::new(&launch.java);
        cmd.args(&launch.broker_jvm_opts)
            .args(cds.jvm_args())
            .args(JVM_LOG_ARGS)
            .arg("-Dstrait.testkit=1")
            .arg(format!("-Dstrait.cluster={}", launch.cluster))
            .arg(format!("-Dstrait.node={}", self.id))
            .arg(format!("-Djava.io.tmpdir={}", launch.tmp_dir.display()))
            .arg(format!("-Dkafka.logs.dir={}", logs.display()))
            .arg(launch.version.log_config_arg(false))
            .arg("-cp")
            .arg(classpath)
            .arg("kafka.Kafka")
            .arg(&self.config)
            .current_dir(&self.dir)
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
                    format!("starting `{}` for node {}", launch.java.display(), self.id),
                    e,
                ));
            }
        };
        self.cds_dump = cds.into_dump();
        crate::registry::track_process(child.id());
        let pid_path = self.pid_path();
        fs::write(&pid_path, child.id().to_string())
            .map_err(|e| Error::io(format!("writing {}", pid_path.display()), e))?;
        self.child = Some(child);
        Ok(())
    }

    /// One readiness probe: the JVM is alive, its output shows the started marker, and every client listener
    /// accepts a TCP connection.
    pub(crate) fn probe(&mut self) -> Probe {
        let Some(child) = &mut self.child else {
            return Probe::Exited {
                reason: "the node is not running".into(),
                port_in_use: false,
            };
        };
        match child.try_wait() {
            Ok(Some(status)) => {
                let out = self.output_since_spawn();
                return Probe::Exited {
                    reason: format!("the broker JVM exited with {status}"),
                    port_in_use: out.contains(BIND_FAILURE),
                };
            }
            Ok(None) => {}
            Err(e) => {
                return Probe::Exited {
                    reason: format!("could not query the broker JVM: {e}"),
                    port_in_use: false,
                };
            }
        }
        if !self.started_seen {
            self.started_seen = self.scan_for_marker();
            if !self.started_seen {
                return Probe::Starting;
            }
        }
        let mut ports = self
            .client_ports
            .iter()
            .map(|(_, p)| *p)
            .chain(self.wan_port);
        let all_accept = ports.all(|port| {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
        });
        if all_accept {
            Probe::Ready
        } else {
            Probe::Starting
        }
    }

    fn scan_for_marker(&mut self) -> bool {
        let path = self.out_path();
        let Ok(mut f) = File::open(&path) else {
            return false;
        };
        if f.seek(SeekFrom::Start(self.scan_pos)).is_err() {
            return false;
        }
        let mut fresh = Vec::new();
        if f.read_to_end(&mut fresh).is_err() {
            return false;
        }
        self.scan_pos += fresh.len() as u64;
        let mut window = std::mem::take(&mut self.carry);
        window.extend_from_slice(&fresh);
        let found = window
            .windows(STARTED_MARKER.len())
            .any(|w| w == STARTED_MARKER);
        let keep = window.len().saturating_sub(STARTED_MARKER.len());
        self.carry = window.split_off(keep);
        found
    }

    /// Everything the current (or last) JVM wrote.
    pub(crate) fn output_since_spawn(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(self.out_path())
            && f.seek(SeekFrom::Start(self.out_offset)).is_ok()
        {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }

    pub(crate) fn output_tail(&self, lines: usize) -> String {
        tail(&self.output_since_spawn(), lines)
    }

    /// Sends SIGTERM (a clean shutdown: Kafka's shutdown hook runs the controlled shutdown).
    pub(crate) fn terminate(&mut self) {
        if let Some(child) = &mut self.child
            && matches!(child.try_wait(), Ok(None))
        {
            // `kill` the command: std only offers SIGKILL, and sending signals ourselves would need unsafe libc.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits until the JVM has exited or `deadline` passes; true when it exited (and was reaped).
    pub(crate) fn wait_exit(&mut self, deadline: Instant) -> bool {
        let Some(child) = &mut self.child else {
            return true;
        };
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.forget(Some(status));
                    return true;
                }
                Err(_) => {
                    self.forget(None);
                    return true;
                }
                Ok(None) if Instant::now() >= deadline => return false,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) {
        let mut status = None;
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            status = child.wait().ok();
        }
        self.forget(status);
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.terminate();
        if !self.wait_exit(Instant::now() + grace) {
            self.kill();
        }
    }

    /// Whether this node's JVM will write an AppCDS archive when it exits (its shutdown then takes longer).
    pub(crate) fn is_dumping_cds(&self) -> bool {
        self.cds_dump.is_some()
    }

    fn forget(&mut self, status: Option<ExitStatus>) {
        if let Some(child) = self.child.take() {
            crate::registry::untrack_process(child.id());
        }
        // The watchdog SIGKILLs the pids it finds; a reaped pid may be reused, so drop the file now.
        let _ = fs::remove_file(self.pid_path());
        if let Some(dump) = self.cds_dump.take() {
            cds::finish(dump, status);
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}
