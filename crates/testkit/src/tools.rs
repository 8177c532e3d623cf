//! Java tools run against a cluster: any main class, the console producer/consumer, and the StraitAdmin helper
//! (kafka/tools/StraitAdmin.java) that creates topics and ACLs in one JVM.

use std::collections::HashMap;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cds::{self, JVM_LOG_ARGS};
use crate::cluster::{AdminOp, Cluster, Resource};
use crate::error::{Error, tail};
use crate::node::Launch;
use crate::props::write_properties;

/// Tool JVMs are short-lived: a small heap, C1 only and the serial GC start fastest.
const TOOL_JVM_OPTS: &[&str] = &[
    "-Xms32m",
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
];
/// Upper bound for one tool run; the console tools stop on their own well before.
const TOOL_TIMEOUT: Duration = Duration::from_secs(180);
/// The admin helper's source, compiled once per lib dir into the jar cache.
const ADMIN_SOURCE: &str = include_str!("../../../kafka/tools/StraitAdmin.java");

/// Options for [`Cluster::console_consume_with`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConsumeOptions {
    /// Consumer group (`--group`); None lets the tool pick a random `console-consumer-*` group.
    pub group: Option<String>,
    /// Stop after this long without a new message (`--timeout-ms`); default 30 s.
    pub timeout: Duration,
    /// Start from the earliest offset when the group has none (`--from-beginning`); default true.
    pub from_beginning: bool,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            group: None,
            timeout: Duration::from_secs(30),
            from_beginning: true,
        }
    }
}

impl ConsumeOptions {
    /// Consume as group `group`.
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_string());
        self
    }

    /// Idle timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Start from the latest offset when the group has none.
    pub fn from_latest(mut self) -> Self {
        self.from_beginning = false;
        self
    }
}

impl Cluster {
    /// Runs a Kafka tool JVM (`main_class` from this cluster's lib dir) to completion and returns its output,
    /// whatever its exit status. Logging goes to stderr at WARN. Errs only if it cannot run or takes over 180 s.
    pub fn java_tool(&self, main_class: &str, args: &[&str]) -> Result<Output, Error> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run_java(None, main_class, &args, None, TOOL_TIMEOUT)
    }

    /// [`java_tool`](Self::java_tool) with data on stdin and a custom timeout.
    pub fn java_tool_with(
        &self,
        main_class: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Output, Error> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run_java(None, main_class, &args, stdin.map(<[u8]>::to_vec), timeout)
    }

    /// Writes `lines` to `topic` with the console producer as `user` (None = admin) on the default listener,
    /// acks=all. Errs if the tool fails or logs an error (e.g. an authorization failure).
    pub fn console_produce(
        &self,
        topic: &str,
        lines: &[String],
        user: Option<&str>,
    ) -> Result<(), Error> {
        let props = self.client_properties(self.default_listener(), user);
        self.console_produce_with(topic, lines, &props)
    }

    /// Console producer with explicit librdkafka-style client properties (from
    /// [`client_properties`](Self::client_properties), possibly edited: another mechanism, a wrong password...).
    /// Producer properties in `props` (acks, linger.ms, ...) override the testkit's defaults.
    pub fn console_produce_with(
        &self,
        topic: &str,
        lines: &[String],
        props: &[(String, String)],
    ) -> Result<(), Error> {
        if let Some(bad) = lines.iter().find(|l| l.contains('\n')) {
            return Err(Error::Invalid(format!(
                "console producer lines cannot contain a newline: {bad:?}"
            )));
        }
        let mut java = vec![
            ("acks".to_string(), "all".to_string()),
            ("linger.ms".to_string(), "5".to_string()),
            ("retries".to_string(), "2147483647".to_string()),
            ("retry.backoff.ms".to_string(), "200".to_string()),
            ("request.timeout.ms".to_string(), "15000".to_string()),
            ("delivery.timeout.ms".to_string(), "60000".to_string()),
            ("max.block.ms".to_string(), "60000".to_string()),
        ];
        java.extend(self.java_client_properties(props)?);
        let config = self.tool_file("producer.properties");
        write_properties(&config, &java)?;
        let bootstrap = bootstrap_of(props).unwrap_or_else(|| self.bootstrap());
        let args = vec![
            "--bootstrap-server".to_string(),
            bootstrap,
            "--topic".to_string(),
            topic.to_string(),
            self.version.client_config_flag(true).to_string(),
            config.display().to_string(),
        ];
        let mut input = lines.join("\n");
        input.push('\n');
        let main = self.version.console_producer_class();
        let out = self.run_java(None, main, &args, Some(input.into_bytes()), TOOL_TIMEOUT)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The producer logs failed sends (authorization, timeouts) through a callback and still exits 0.
        if !out.status.success() || stderr.contains("] ERROR ") {
            return Err(tool_error(
                format!("console producer to {topic}"),
                &out,
                "reported errors",
            ));
        }
        Ok(())
    }

    /// Reads up to `max_messages` values from `topic` (from the beginning, random group) as `user` on the default
    /// listener; stops after 30 s without a message. Returns what it read (possibly fewer lines).
    pub fn console_consume(
        &self,
        topic: &str,
        max_messages: usize,
        user: Option<&str>,
    ) -> Result<Vec<String>, Error> {
        let props = self.client_properties(self.default_listener(), user);
        self.console_consume_with(topic, max_messages, &props, &ConsumeOptions::default())
    }

    /// Console consumer with explicit client properties and options (group, timeout, start offset).
    /// Errs if the tool fails or logs an error other than its idle timeout.
    pub fn console_consume_with(
        &self,
        topic: &str,
        max_messages: usize,
        props: &[(String, String)],
        opts: &ConsumeOptions,
    ) -> Result<Vec<String>, Error> {
        let java = self.java_client_properties(props)?;
        let config = self.tool_file("consumer.properties");
        write_properties(&config, &java)?;
        let bootstrap = bootstrap_of(props).unwrap_or_else(|| self.bootstrap());
        let mut args = vec![
            "--bootstrap-server".to_string(),
            bootstrap,
            "--topic".to_string(),
            topic.to_string(),
            self.version.client_config_flag(false).to_string(),
            config.display().to_string(),
            "--max-messages".to_string(),
            max_messages.to_string(),
            "--timeout-ms".to_string(),
            opts.timeout.as_millis().to_string(),
        ];
        if opts.from_beginning {
            args.push("--from-beginning".to_string());
        }
        if let Some(g) = &opts.group {
            args.push("--group".to_string());
            args.push(g.clone());
        }
        let main = self.version.console_consumer_class();
        let out = self.run_java(None, main, &args, None, TOOL_TIMEOUT + opts.timeout)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || has_error_besides_idle_timeout(&stderr) {
            return Err(tool_error(
                format!("console consumer of {topic}"),
                &out,
                "reported errors",
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Creates a topic (as admin) and waits until every partition has a leader.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Result<(), Error> {
        self.admin(&[AdminOp::CreateTopic {
            name: name.to_string(),
            partitions,
            replication,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }])
    }

    /// Adds ALLOW ACLs (host `*`) for `principal` (e.g. `User:alice`) on `resource`, ops like "Read", "Write",
    /// "Create", "Describe", and waits until the broker lists them. Needs the authorizer (mTLS clusters).
    pub fn add_acls(&self, principal: &str, resource: Resource, ops: &[&str]) -> Result<(), Error> {
        self.admin(&[AdminOp::allow(principal, resource, ops)])
    }

    /// Runs admin operations in order in ONE JVM (a JVM start costs seconds: batch topic and ACL setup here).
    pub fn admin(&self, ops: &[AdminOp]) -> Result<(), Error> {
        if ops.is_empty() {
            return Ok(());
        }
        let java =
            self.java_client_properties(&self.client_properties(self.default_listener(), None))?;
        let config = self.tool_file("admin.properties");
        write_properties(&config, &java)?;
        let mut args = vec![config.display().to_string()];
        for (i, op) in ops.iter().enumerate() {
            if i > 0 {
                args.push("--".to_string());
            }
            args.extend(op.helper_args()?);
        }
        let helper = admin_helper(&self.launch)?;
        let out = match &helper {
            AdminHelper::Compiled(classes) => {
                self.run_java(Some(classes), "StraitAdmin", &args, None, TOOL_TIMEOUT)?
            }
            AdminHelper::Source(source) => {
                let main = source.display().to_string();
                self.run_java(None, &main, &args, None, TOOL_TIMEOUT)?
            }
        };
        if !out.status.success() {
            return Err(tool_error(format!("StraitAdmin {ops:?}"), &out, "failed"));
        }
        Ok(())
    }

    /// A fresh file name under `<dir>/tools`.
    fn tool_file(&self, suffix: &str) -> PathBuf {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        self.dir.join("tools").join(format!("{n:04}-{suffix}"))
    }

    /// Runs one tool JVM with this cluster's classpath (plus `extra_cp`), output captured in files under
    /// `<dir>/tools` (no pipe can fill up), killed after `timeout`.
    pub(crate) fn run_java(
        &self,
        extra_cp: Option<&Path>,
        main: &str,
        args: &[String],
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Output, Error> {
        let out_path = self.tool_file("stdout.txt");
        let err_path = self.tool_file("stderr.txt");
        let create = |p: &Path| {
            File::create(p).map_err(|e| Error::io(format!("creating {}", p.display()), e))
        };
        let mut classpath = self.launch.classpath();
        if let Some(extra) = extra_cp {
            classpath = format!("{}:{classpath}", extra.display());
        }
        let cds = cds::prepare(
            &self.launch.java,
            &classpath,
            &self.launch.lib_dir,
            "tool",
            TOOL_JVM_OPTS,
        );
        let mut cmd = Command::new(&self.launch.java);
        cmd.args(TOOL_JVM_OPTS)
            .args(cds.jvm_args())
            .args(JVM_LOG_ARGS)
            .arg("-Dstrait.testkit=1")
            .arg(format!("-Dstrait.cluster={}", self.name))
            .arg(format!(
                "-Djava.io.tmpdir={}",
                self.launch.tmp_dir.display()
            ))
            .arg(format!(
                "-Dkafka.logs.dir={}",
                self.dir.join("tools").display()
            ))
            .arg(self.launch.version.log_config_arg(true))
            .arg("-cp")
            .arg(classpath)
            .arg(main)
            .args(args)
            .current_dir(&self.dir)
            .stdout(create(&out_path)?)
            .stderr(create(&err_path)?)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(dump) = cds.into_dump() {
                    cds::finish(dump, None);
                }
                return Err(Error::io(
                    format!("starting `{}` for {main}", self.launch.java.display()),
                    e,
                ));
            }
        };
        crate::registry::track_process(child.id());
        // Feed stdin from a thread: a tool that stops reading must not block us past the timeout.
        let feeder = match (stdin, child.stdin.take()) {
            (Some(data), Some(mut pipe)) => Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            })),
            _ => None,
        };
        let deadline = Instant::now() + timeout;
        // Err(reason) when we had to kill it.
        let status: Result<ExitStatus, String> = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!("timed out after {timeout:?} and was killed"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!("could not be waited for ({e}) and was killed"));
                }
            }
        };
        crate::registry::untrack_process(child.id());
        if let Some(f) = feeder {
            let _ = f.join();
        }
        if let Some(dump) = cds.into_dump() {
            cds::finish(dump, status.as_ref().ok().copied());
        }
        let read = |p: &Path| fs::read(p).unwrap_or_default();
        let (stdout, stderr) = (read(&out_path), read(&err_path));
        match status {
            Ok(status) => Ok(Output {
                status,
                stdout,
                stderr,
            }),
            Err(reason) => Err(Error::Tool {
                tool: format!("{main} {}", args.join(" ")),
                status: reason,
                stderr_tail: tail(&String::from_utf8_lossy(&stderr), 60),
                stdout_tail: tail(&String::from_utf8_lossy(&stdout), 20),
            }),
        }
    }
}

fn bootstrap_of(props: &[(String, String)]) -> Option<String> {
    props
        .iter()
        .rev()
        .find(|(k, _)| k == "bootstrap.servers")
        .map(|(_, v)| v.clone())
}

fn tool_error(tool: String, out: &Output, what: &str) -> Error {
    Error::Tool {
        tool,
        status: describe_status(out.status, what),
        stderr_tail: tail(&String::from_utf8_lossy(&out.stderr), 60),
        stdout_tail: tail(&String::from_utf8_lossy(&out.stdout), 20),
    }
}

fn describe_status(status: ExitStatus, what: &str) -> String {
    if status.success() {
        format!("exit 0 but {what}")
    } else {
        status.to_string()
    }
}

/// The console consumer ends an idle wait by logging an ERROR with a TimeoutException: that one is the normal way
/// `--timeout-ms` stops it, anything else is a real error.
fn has_error_besides_idle_timeout(stderr: &str) -> bool {
    let lines: Vec<&str> = stderr.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        line.contains("] ERROR ")
            && !lines.get(i + 1).is_some_and(|next| {
                next.trim() == "org.apache.kafka.common.errors.TimeoutException"
            })
    })
}

/// How to run StraitAdmin: compiled classes, or the source file (Java's source-file mode) when javac is missing.
#[derive(Clone, Debug)]
enum AdminHelper {
    Compiled(PathBuf),
    Source(PathBuf),
}

/// Compiles StraitAdmin once per lib dir into `<lib>/../strait-tools/<source hash>/` (shared by every process
/// through the jar cache; a rename publishes it atomically).
fn admin_helper(launch: &Launch) -> Result<AdminHelper, Error> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, AdminHelper>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut known = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(h) = known.get(&launch.lib_dir) {
        return Ok(h.clone());
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ADMIN_SOURCE.hash(&mut hasher);
    // The layout of the compiled dir (jar + classes/), so an older layout is never mistaken for this one.
    2u32.hash(&mut hasher);
    let base = launch
        .lib_dir
        .parent()
        .unwrap_or(&launch.lib_dir)
        .join("strait-tools");
    let dir = base.join(format!("{:016x}", hasher.finish()));
    let helper = match compiled_in(&dir) {
        Some(path) => AdminHelper::Compiled(path),
        None => compile_admin(launch, &base, &dir)?,
    };
    known.insert(launch.lib_dir.clone(), helper.clone());
    Ok(helper)
}

/// The compiled helper in `dir`: a jar (what AppCDS accepts on a classpath), else a classes directory.
fn compiled_in(dir: &Path) -> Option<PathBuf> {
    let jar = dir.join("strait-admin.jar");
    let classes = dir.join("classes");
    if jar.is_file() {
        Some(jar)
    } else if classes.join("StraitAdmin.class").is_file() {
        Some(classes)
    } else {
        None
    }
}

fn compile_admin(launch: &Launch, base: &Path, dir: &Path) -> Result<AdminHelper, Error> {
    let staging = base.join(format!("staging-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging)
        .map_err(|e| Error::io(format!("creating {}", staging.display()), e))?;
    let source = staging.join("StraitAdmin.java");
    fs::write(&source, ADMIN_SOURCE)
        .map_err(|e| Error::io(format!("writing {}", source.display()), e))?;
    let javac = match launch.java.parent() {
        Some(bin) if !bin.as_os_str().is_empty() => bin.join("javac"),
        _ => PathBuf::from("javac"),
    };
    let classes = staging.join("classes");
    let out = Command::new(&javac)
        .arg("-nowarn")
        .arg("-cp")
        .arg(launch.classpath())
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .output();
    match out {
        Ok(out) if out.status.success() => {
            // A jar, because AppCDS refuses class directories on the classpath; without `jar` the directory
            // still works (the helper then runs without CDS).
            let jar = staging.join("strait-admin.jar");
            let jarred = Command::new(javac.with_file_name("jar"))
                .arg("--create")
                .arg("--file")
                .arg(&jar)
                .arg("-C")
                .arg(&classes)
                .arg(".")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !jarred {
                // A half-written jar would be preferred over classes/ and hide the main class
                // ("Could not find or load main class StraitAdmin" once, on a loaded machine).
                let _ = fs::remove_file(&jar);
            }
            // Another process may have won the race: its classes are as good as ours. If what is there is
            // unusable, keep using our own copy.
            let published = fs::rename(&staging, dir).is_ok();
            let found = compiled_in(dir);
            if !published && found.is_some() {
                let _ = fs::remove_dir_all(&staging);
            }
            let found = found.or_else(|| compiled_in(&staging));
            found.map(AdminHelper::Compiled).ok_or_else(|| {
                Error::Invalid(format!(
                    "compiled StraitAdmin but {} holds neither strait-admin.jar nor classes/StraitAdmin.class",
                    dir.display()
                ))
            })
        }
        Ok(out) => Err(Error::Tool {
            tool: format!("{} StraitAdmin.java", javac.display()),
            status: out.status.to_string(),
            stderr_tail: tail(&String::from_utf8_lossy(&out.stderr), 40),
            stdout_tail: tail(&String::from_utf8_lossy(&out.stdout), 10),
        }),
        // No JDK, only a JRE: run the source file directly (compiles in memory on every run, slower).
        Err(_) => Ok(AdminHelper::Source(source)),
    }
}
