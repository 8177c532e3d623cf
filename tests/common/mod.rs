//! Helpers for the binary's end-to-end tests: real Kafka clusters, the `strait` process, and
//! reading both sides back record by record.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use strait_forward::{FetchedBatch, FetchedRecords};
use strait_testkit::{Cluster, ClusterBuilder};
use strait_wire::{
    Client, ClientConfig, FetchOptions, FetchPartition, Isolation, OffsetSpec, TopicPartition,
};

/// Starts the source and target single-node clusters side by side.
pub fn clusters(prefix: &str) -> (Cluster, Cluster) {
    let p1 = format!("{prefix}-src");
    let p2 = format!("{prefix}-dst");
    let a = std::thread::spawn(move || {
        consumer_sessions_of_6s(Cluster::builder(&p1))
            .start()
            .expect("source cluster")
    });
    let b = Cluster::builder(&p2).start().expect("target cluster");
    (a.join().expect("source thread"), b)
}

/// A source cluster whose consumer groups (KIP-848, the default on Kafka 4) expire a member
/// after 6 s, as the mirror configs' `session_timeout = "6s"` does on the classic protocol:
/// that protocol takes the session timeout and heartbeat interval from the broker (45 s and
/// 5 s by default), so a SIGKILLed mirror's partitions, and the restart of a killed static
/// member, would wait 45 s (three kills made `eos_failover` take 338 s instead of 93 s).
pub fn consumer_sessions_of_6s(builder: ClusterBuilder) -> ClusterBuilder {
    builder
        .broker_config("group.consumer.min.session.timeout.ms", "6000")
        .broker_config("group.consumer.session.timeout.ms", "6000")
        .broker_config("group.consumer.min.heartbeat.interval.ms", "1000")
        .broker_config("group.consumer.heartbeat.interval.ms", "1000")
}

/// Writes `count` records with values "1", "2", ... (ProducerPerformance --payload-monotonic),
/// lz4-compressed batches as a real producer makes them, at `rate` records/s (-1: unthrottled).
pub fn produce_monotonic(cluster: &Cluster, topic: &str, count: u64, rate: i64) {
    let out = cluster
        .java_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            &[
                "--topic",
                topic,
                "--num-records",
                &count.to_string(),
                "--payload-monotonic",
                "--throughput",
                &rate.to_string(),
                "--producer-props",
                &format!("bootstrap.servers={}", cluster.bootstrap()),
                "compression.type=lz4",
                "linger.ms=5",
                "acks=all",
            ],
        )
        .expect("ProducerPerformance");
    assert!(
        out.status.success(),
        "producer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A strait.toml mirroring `topics` from `source` to `target`.
pub fn write_config(
    dir: &Path,
    name: &str,
    source: &Cluster,
    target: &Cluster,
    topics: &str,
    group: &str,
    extra: &str,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{}\"\n\n[target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{}\"\n\n\
         [mirror]\ntopics = [\"{topics}\"]\ngroup_id = \"{group}\"\nstart = \"earliest\"\nrefresh_interval = \"1s\"\n\
         commit_interval = \"200ms\"\nsession_timeout = \"6s\"\n{extra}\n[metrics]\nlisten = \"\"\n",
        source.bootstrap(),
        target.bootstrap()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A running `strait` process that is SIGKILLed and reaped when dropped, so that a test that
/// panics (or returns early) never leaves it running. Every `strait` a test starts goes through
/// [`StraitCommand`], which returns one of these. Derefs to the [`Child`].
#[derive(Debug)]
pub struct StraitProcess {
    child: Option<Child>,
}

impl StraitProcess {
    /// Gives up the guard: the caller takes over stopping the process (only for tests that wrap
    /// the child in a kill-on-drop guard of their own).
    pub fn into_child(mut self) -> Child {
        self.child
            .take()
            .expect("the child is present until into_child or drop")
    }
}

impl std::ops::Deref for StraitProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.child
            .as_ref()
            .expect("the child is present until into_child or drop")
    }
}

impl std::ops::DerefMut for StraitProcess {
    fn deref_mut(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .expect("the child is present until into_child or drop")
    }
}

impl Drop for StraitProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            strait_testkit::untrack_process(child.id());
        }
    }
}

/// The `strait` binary under test. Built by cargo for this package's own tests when they are
/// the `strait` crate's (its offline tests include this file); for the end-to-end tests, a
/// package of their own, it is `STRAIT_BIN` (scripts/test-runner.py sets it to the binary cargo
/// just built), else `strait` next to the test binary's directory (`target/<profile>/`), which
/// `cargo build -p strait` (or any workspace build of the tests) writes.
pub fn strait_bin() -> PathBuf {
    if let Some(built) = option_env!("CARGO_BIN_EXE_strait") {
        return PathBuf::from(built);
    }
    if let Some(bin) = std::env::var_os("STRAIT_BIN") {
        return PathBuf::from(bin);
    }
    // target/<profile>/deps/kafka-<hash> -> target/<profile>/strait
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("strait"))
        .expect("the test binary lies in target/<profile>/deps");
    assert!(
        bin.is_file(),
        "{} does not exist: build the binary first (`cargo build -p strait`), or set STRAIT_BIN",
        bin.display()
    );
    bin
}

/// The `strait` binary with arguments. Runs only through [`spawn`](Self::spawn) (a guarded
/// [`StraitProcess`]) or [`output`](Self::output) (bounded in time, killed if it hangs).
pub struct StraitCommand {
    cmd: Command,
}

/// How long a one-shot `strait` command (`check`, `--help`) may run before the test fails.
const ONE_SHOT_LIMIT: Duration = Duration::from_secs(180);

impl StraitCommand {
    /// `strait <args>`.
    pub fn new<I, S>(args: I) -> StraitCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(strait_bin());
        cmd.args(args).stdin(Stdio::null());
        StraitCommand { cmd }
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> StraitCommand {
        self.cmd.arg(arg);
        self
    }

    /// The underlying command, for environment and output settings.
    pub fn command(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Starts it; the process is killed when the returned guard drops.
    pub fn spawn(mut self) -> StraitProcess {
        let child = self.cmd.spawn().expect("start strait");
        strait_testkit::track_process(child.id());
        StraitProcess { child: Some(child) }
    }

    /// Runs it to completion and returns its output. Output goes through files (no pipe can
    /// fill up); a process still running after 3 minutes is killed and the test fails.
    pub fn output(mut self) -> Output {
        let mut out = tempfile::tempfile().expect("temp file for stdout");
        let mut err = tempfile::tempfile().expect("temp file for stderr");
        self.cmd
            .stdout(out.try_clone().expect("dup stdout file"))
            .stderr(err.try_clone().expect("dup stderr file"));
        let mut process = self.spawn();
        let deadline = Instant::now() + ONE_SHOT_LIMIT;
        let status = loop {
            if let Some(status) = process.try_wait().expect("wait for strait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "strait did not finish within {ONE_SHOT_LIMIT:?} (killed)"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |f: &mut std::fs::File| {
            use std::io::{Read, Seek};
            let mut buf = Vec::new();
            f.seek(std::io::SeekFrom::Start(0)).expect("rewind output");
            f.read_to_end(&mut buf).expect("read output");
            buf
        };
        Output {
            status,
            stdout: read(&mut out),
            stderr: read(&mut err),
        }
    }
}

/// Starts `strait run --config <config>`, logging to `<config>.<n>.log`. The process is killed
/// when the returned guard drops.
pub fn spawn_strait(config: &Path, n: usize) -> (StraitProcess, PathBuf) {
    let log = config.with_extension(format!("{n}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(config);
    cmd.command()
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(file);
    (cmd.spawn(), log)
}

/// SIGTERM, and asserts a clean exit (code 0), showing the process's log when it was not.
pub fn terminate_cleanly(child: &mut Child, log: &Path) {
    assert_eq!(
        terminate(child).code(),
        Some(0),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// SIGTERM, then the exit status.
pub fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "strait did not exit within 60 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub async fn client(cluster: &Cluster) -> Client {
    Client::connect(
        ClientConfig::from_properties([("bootstrap.servers", cluster.bootstrap())]).unwrap(),
    )
    .await
    .unwrap()
}

/// End offset of each partition of `topic`.
pub async fn end_offsets(client: &Client, topic: &str, partitions: i32) -> Vec<i64> {
    let tps: Vec<(TopicPartition, OffsetSpec)> = (0..partitions)
        .map(|p| (TopicPartition::new(topic, p).unwrap(), OffsetSpec::Latest))
        .collect();
    client
        .list_offsets(&tps, Isolation::ReadUncommitted)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.offset.unwrap_or(0))
        .collect()
}

/// Every record value of every partition, in log order.
pub async fn read_all(
    client: &Client,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<Vec<u8>>> {
    let ends = end_offsets(client, topic, partitions).await;
    let mut out = BTreeMap::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p).unwrap();
        let mut values = Vec::new();
        let mut offset = 0i64;
        while offset < ends[p as usize] {
            let fetched = client
                .fetch(
                    &[FetchPartition::new(tp.clone(), offset).with_max_bytes(4 << 20)],
                    &FetchOptions::default(),
                )
                .await
                .unwrap()
                .pop()
                .unwrap();
            fetched.check(None).unwrap();
            for item in FetchedRecords::new(fetched.records) {
                let FetchedBatch::V2(batch) = item.unwrap() else {
                    panic!("legacy batch on a 4.x broker")
                };
                let decoded = batch.decode_records(64 << 20).unwrap();
                for record in decoded.iter() {
                    let record = record.unwrap();
                    if batch.record_offset(&record) >= offset {
                        values.push(record.value().unwrap_or_default().to_vec());
                    }
                }
                offset = batch.next_offset();
            }
        }
        out.insert(p, values);
    }
    out
}

/// Waits until the mirror's consumer group `group` on the source has committed `expected` (the
/// source's end offsets) for every partition: the mirror commits only what the target
/// acknowledged, so everything is on the target then. Unlike [`wait_until_complete`], not
/// fooled by duplicates (a target that holds re-sent records reaches the source's count early).
pub async fn wait_until_committed(
    source: &Client,
    group: &str,
    topic: &str,
    expected: &[i64],
    timeout: Duration,
) {
    let offsets = strait_wire::offset_commit::GroupOffsets::new(source, group);
    let partitions: Vec<TopicPartition> = (0..expected.len() as i32)
        .map(|p| TopicPartition::new(topic, p).unwrap())
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        let committed: Vec<i64> = match offsets.fetch(&partitions).await {
            Ok(c) => partitions
                .iter()
                .map(|tp| c.get(tp).and_then(|o| o.as_ref()).map_or(0, |o| o.offset))
                .collect(),
            Err(_) => vec![0; partitions.len()],
        };
        if committed
            .iter()
            .zip(expected)
            .all(|(got, want)| got >= want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} committed {committed:?} < {expected:?} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the target's end offsets cover `expected` records per partition.
pub async fn wait_until_complete(
    target: &Client,
    topic: &str,
    expected: &[i64],
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    let tps: Vec<(TopicPartition, OffsetSpec)> = (0..expected.len() as i32)
        .map(|p| (TopicPartition::new(topic, p).unwrap(), OffsetSpec::Latest))
        .collect();
    loop {
        // The mirror may not have created the topic yet (a loaded machine once took longer
        // than the test's first look): an unknown topic is "not there yet", not a failure.
        let ends = match target.list_offsets(&tps, Isolation::ReadUncommitted).await {
            Ok(listed) => Ok(listed
                .into_iter()
                .map(|l| l.offset.unwrap_or(0))
                .collect::<Vec<_>>()),
            Err(e) => Err(e),
        };
        if let Ok(ends) = &ends
            && ends.iter().zip(expected).all(|(got, want)| got >= want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "target incomplete after {timeout:?}: {ends:?} < {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks that `target` holds every record of `source`, in order, and that anything extra is a
/// re-sent stretch of records it already had (what a restart after a crash produces). Values
/// need not be unique. Returns the number of duplicates.
pub fn assert_complete_in_order(source: &[Vec<u8>], target: &[Vec<u8>], what: &str) -> usize {
    // `cur`: the source position the current stretch of the target is at; `high`: how many
    // source records the target has shown so far. A record is either the next of the stretch, or
    // the start of a re-send from an earlier position (below `high`); anything else is a gap.
    let (mut cur, mut high, mut duplicates) = (0usize, 0usize, 0usize);
    for (i, v) in target.iter().enumerate() {
        if cur < source.len() && source[cur] == *v {
            cur += 1;
            if cur > high {
                high = cur;
            } else {
                duplicates += 1;
            }
            continue;
        }
        match (0..high).rev().find(|&j| source[j] == *v) {
            Some(j) => {
                cur = j + 1;
                duplicates += 1;
            }
            None => panic!(
                "{what}: gap at target record {i} ({:?}): the next new source record is {high} ({:?})",
                String::from_utf8_lossy(v),
                source
                    .get(high)
                    .map(|s| String::from_utf8_lossy(s).into_owned())
            ),
        }
    }
    assert_eq!(
        high,
        source.len(),
        "{what}: only {high} of {} source records reached the target",
        source.len()
    );
    duplicates
}

/// Waits until `log` contains `needle`.
pub fn wait_for_log(log: &Path, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(needle)
    {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not in {} after {timeout:?}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes `per_partition` records to every partition in `partitions` of `topic`, each batch
/// addressed to its partition explicitly, so no partitioner decides where records go (a
/// keyless Java producer may leave whole partitions empty). Values are `<partition>-<n>`,
/// uncompressed batches of at most 500 records.
pub async fn produce_to_partitions(
    client: &Client,
    topic: &str,
    partitions: std::ops::Range<i32>,
    per_partition: usize,
) {
    produce_numbered(client, topic, partitions, 0..per_partition).await;
}

/// The numbers per partition in values [`produce_numbered`] wrote (`<partition>-<n>`), in the
/// order read: what a consumer of the mirrored topic got.
pub fn numbers_by_partition(values: impl IntoIterator<Item = String>) -> BTreeMap<i32, Vec<usize>> {
    let mut out: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for value in values {
        let (p, n) = value.split_once('-').expect("a numbered record");
        out.entry(p.parse().unwrap())
            .or_default()
            .push(n.parse().unwrap());
    }
    out
}

/// The numbers in values [`produce_numbered`] wrote (`<partition>-<n>`), in the order given.
pub fn numbers(values: &[Vec<u8>]) -> Vec<usize> {
    values
        .iter()
        .map(|v| {
            let v = String::from_utf8_lossy(v);
            let (_, n) = v.split_once('-').expect("a numbered record");
            n.parse().expect("a numbered record")
        })
        .collect()
}

/// `strait <command> --config <config> --timeout 60s <extra>` for `switchover` or `failback`,
/// exiting right after step `exit_after` when given (the commands' test hook, to re-run an
/// interrupted command); its output is printed for the test log.
pub fn handover(command: &str, config: &Path, extra: &[&str], exit_after: Option<&str>) -> Output {
    let mut cmd = StraitCommand::new([command, "--config"])
        .arg(config)
        .arg("--timeout")
        .arg("60s");
    for a in extra {
        cmd = cmd.arg(a);
    }
    if let Some(step) = exit_after {
        cmd.command()
            .env(strait::failover::plan::TEST_EXIT_AFTER, step);
    }
    let out = cmd.output();
    println!(
        "strait {command} {extra:?} (exit after {exit_after:?}): {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs the mirror of `config` (`strait run`, log number `n`) until its group `group` on
/// `source` has committed the current end of every partition of `topic`, then stops it and
/// asserts a clean exit: a reverse mirror copying what the new source took.
pub fn mirror_until_caught_up(
    rt: &tokio::runtime::Runtime,
    config: &Path,
    n: usize,
    source: &Client,
    group: &str,
    topic: &str,
    partitions: i32,
) {
    let (mut mirror, log) = spawn_strait(config, n);
    let ends = rt.block_on(end_offsets(source, topic, partitions));
    rt.block_on(wait_until_committed(
        source,
        group,
        topic,
        &ends,
        Duration::from_secs(120),
    ));
    terminate_cleanly(&mut mirror, &log);
}

/// Like [`produce_to_partitions`], for the records numbered `numbers` (values
/// `<partition>-<n>`), so that successive calls write unique values.
pub async fn produce_numbered(
    client: &Client,
    topic: &str,
    partitions: std::ops::Range<i32>,
    numbers: std::ops::Range<usize>,
) {
    use bytes::BytesMut;
    use strait_wire::kafka_protocol::indexmap::IndexMap;
    use strait_wire::kafka_protocol::protocol::StrBytes;
    use strait_wire::kafka_protocol::records::{
        Compression, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
        Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use strait_wire::{ProduceBatch, ProduceOptions};

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut sent = numbers.start;
    while sent < numbers.end {
        let n = (numbers.end - sent).min(500);
        let mut batches = Vec::new();
        for p in partitions.clone() {
            let records: Vec<Record> = (sent..sent + n)
                .map(|i| Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                    producer_id: NO_PRODUCER_ID,
                    producer_epoch: NO_PRODUCER_EPOCH,
                    timestamp_type: TimestampType::Creation,
                    offset: (i - sent) as i64,
                    // kafka-protocol starts a new batch when `offset - sequence` changes; a
                    // Produce partition takes exactly one v2 batch. The batch's base sequence
                    // stays NO_SEQUENCE (-1), as a non-idempotent producer sends it.
                    sequence: NO_SEQUENCE + (i - sent) as i32,
                    timestamp: now,
                    key: None,
                    value: Some(bytes::Bytes::from(format!("{p}-{i}"))),
                    headers: IndexMap::<StrBytes, Option<bytes::Bytes>>::new(),
                })
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                records.iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::None,
                },
            )
            .unwrap();
            batches.push(ProduceBatch::new(
                TopicPartition::new(topic, p).unwrap(),
                buf.freeze(),
            ));
        }
        for r in client
            .produce(batches, &ProduceOptions::default())
            .await
            .unwrap()
        {
            r.outcome
                .unwrap_or_else(|e| panic!("producing to {}: {e}", r.partition));
        }
        sent += n;
    }
}

/// Every `partitions=N` the mirror logged when it was assigned partitions, in order.
pub fn assigned_counts(log: &Path) -> Vec<usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("strait::run::mirror: assigned"))
        .filter_map(|l| {
            l.split("partitions=")
                .nth(1)
                .and_then(|n| n.trim().parse().ok())
        })
        .collect()
}

/// A strait.toml cluster section for `user`'s client certificate on the mTLS listener.
pub fn mtls_section(cluster: &strait_testkit::Cluster, alias: &str, user: &str) -> String {
    let mut s = format!("alias = \"{alias}\"\n");
    for (k, v) in cluster.client_properties(strait_testkit::Listener::Ssl, Some(user)) {
        s.push_str(&format!("\"{k}\" = \"{v}\"\n"));
    }
    s
}

/// The `java` launcher: `$JAVA_HOME/bin/java`, else `java` on the PATH.
pub fn java() -> PathBuf {
    std::env::var("JAVA_HOME").map_or_else(
        |_| PathBuf::from("java"),
        |h| Path::new(&h).join("bin/java"),
    )
}

/// A child process (a Java tool, a mirror) killed and reaped when the test ends, passed or
/// not, and listed in the test kit's process registry meanwhile, so that `scripts/test.sh`
/// still kills it if the test binary itself dies.
pub struct Proc(pub Child);

impl Proc {
    pub fn new(child: Child) -> Proc {
        strait_testkit::track_process(child.id());
        Proc(child)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        strait_testkit::untrack_process(self.0.id());
    }
}

/// Kafka's own producer (`tests/java/PartitionProbe.java`, at the workspace's top) against `cluster`, with `args` after
/// the program; acknowledgements to `out`, errors to `out` with extension `err`.
pub fn partition_probe(cluster: &Cluster, args: &[String], out: &Path) -> Proc {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/PartitionProbe.java");
    let child = Command::new(java())
        .arg("-cp")
        .arg(format!("{}/*", cluster.lib_dir().display()))
        .arg(source)
        .args(args)
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .expect("start the Java probe");
    Proc::new(child)
}

/// One HTTP/1.1 GET over loopback: (status, body), or `None` while nothing listens.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Commits `offsets` for `group` on `client`'s cluster without membership, as a consumer group
/// that has stopped left them.
pub async fn commit_group(client: &Client, group: &str, offsets: &[(TopicPartition, i64)]) {
    use strait_wire::group::Generation;
    use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
    let offsets: Vec<CommitOffset> = offsets
        .iter()
        .map(|(tp, o)| CommitOffset::new(tp.clone(), *o))
        .collect();
    GroupOffsets::new(client, group)
        .commit(&Generation::simple(), &offsets)
        .await
        .unwrap();
}

/// Waits (60 s at most) until `target` holds a checkpoint of `group` (from the cluster aliased
/// `source_alias`) with upstream offset `c` for every ((target topic, partition), c) in
/// `commits`; returns every checkpoint of the group as (upstream offset, target offset). On
/// timeout, fails with `log` (the mirror's).
pub fn wait_for_checkpoints(
    rt: &tokio::runtime::Runtime,
    target: &Client,
    source_alias: &str,
    group: &str,
    commits: &BTreeMap<(String, i32), i64>,
    log: &Path,
) -> BTreeMap<(String, i32), (i64, i64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let latest = rt
            .block_on(strait::failover::command::latest_checkpoints(
                target,
                source_alias,
            ))
            .unwrap_or_default();
        let got: BTreeMap<(String, i32), (i64, i64)> = latest
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), cp)| ((t.clone(), *p), (cp.upstream_offset, cp.offset)))
            .collect();
        if commits
            .iter()
            .all(|(k, c)| got.get(k).is_some_and(|(up, _)| up == c))
        {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "no complete checkpoints of {group} after 60 s (commits {commits:?}, checkpoints \
             {got:?}); log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits (at most 120 s) until the committed offsets of `group` for `tps` (0 where none) satisfy
/// `done`; returns them. The failure names `what` was awaited and shows the mirror's log.
pub fn wait_for_group_offsets(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    group: &str,
    tps: &[TopicPartition],
    what: &str,
    log: &Path,
    done: impl Fn(&[i64]) -> bool,
) -> Vec<i64> {
    use strait_wire::offset_commit::GroupOffsets;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now: Option<Vec<i64>> = rt.block_on(async {
            let c = GroupOffsets::new(client, group).fetch(tps).await.ok()?;
            Some(
                tps.iter()
                    .map(|tp| c.get(tp).and_then(|o| o.as_ref()).map_or(0, |o| o.offset))
                    .collect(),
            )
        });
        if let Some(now) = &now
            && done(now)
        {
            return now.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: group {group} is at {now:?}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most 120 s) until `group` committed past `previous` in every partition of `tps`;
/// returns the offsets.
pub fn wait_for_group_progress(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    group: &str,
    tps: &[TopicPartition],
    previous: &[i64],
    log: &Path,
) -> Vec<i64> {
    let what = format!("a commit past {previous:?} in every partition");
    wait_for_group_offsets(rt, client, group, tps, &what, log, |now| {
        now.iter().zip(previous).all(|(n, p)| n > p)
    })
}

/// A cluster as the reference walkthrough (`shared/seed`) sets it up: an mTLS listener, the
/// mirror's user `user` with the walkthrough's ACLs on `my-topic` and group `my-group`, and on
/// `europe*` the topic itself with 12 partitions.
pub fn walkthrough_cluster(name: &str, user: &str) -> Cluster {
    use strait_testkit::{AdminOp, Resource};
    let cluster = Cluster::builder(name)
        .mtls()
        .user(user, "secret")
        .start()
        .unwrap();
    let principal = format!("User:{user}");
    let mut ops = vec![
        AdminOp::allow(
            &principal,
            Resource::Topic("my-topic".into()),
            &["Read", "Describe", "Write", "Create"],
        ),
        AdminOp::allow(&principal, Resource::Group("my-group".into()), &["Read"]),
    ];
    if name.starts_with("europe") {
        ops.insert(0, AdminOp::topic("my-topic", 12, 1));
    }
    cluster.admin(&ops).unwrap();
    cluster
}

/// What Kafka's console consumer reads from `topic` on `target` at `isolation` (at most
/// `records` records, 10 s without a new one ends it), per partition, as the numbers
/// produce_numbered wrote ("<partition>-<n>").
pub fn consume_numbered(
    target: &Cluster,
    topic: &str,
    records: usize,
    isolation: &str,
) -> BTreeMap<i32, Vec<usize>> {
    let mut props = target.client_properties(target.default_listener(), None);
    props.push(("isolation.level".into(), isolation.into()));
    let lines = target
        .console_consume_with(
            topic,
            records,
            &props,
            &strait_testkit::ConsumeOptions::default().timeout(Duration::from_secs(10)),
        )
        .unwrap();
    numbers_by_partition(lines)
}
