//! Clusters: the builder, broker configuration, start/stop, and client properties.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::delay_proxy::{DelayProxy, Link};
use crate::error::Error;
use crate::node::{Launch, Node, Probe};
use crate::pki::{ADMIN_CN, Pki};
use crate::ports::free_ports;
use crate::props::{java_client_properties, write_properties};
use crate::version::{KafkaVersion, kafka_lib_dir};
use crate::watchdog::Watchdog;

/// The admin user's SASL password (the admin is a super user when the authorizer is on).
pub const ADMIN_PASSWORD: &str = "admin-secret";

/// Default time a cluster (or a restarted node) gets to become ready; `STRAIT_START_TIMEOUT_SECS` overrides it.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// Attempts at starting a cluster when a port turned out to be taken by someone else.
const START_ATTEMPTS: usize = 3;
/// How long `Drop` lets the JVMs shut down cleanly before SIGKILL. A single node needs about 0.7 s; the nodes of
/// a multi-node cluster stopping together wait for a quorum that is going away, and the dir is deleted anyway.
const DROP_GRACE: Duration = Duration::from_secs(2);
/// The same while a node writes the AppCDS archive (see `cds`) at exit.
const DROP_GRACE_DUMPING: Duration = Duration::from_secs(20);
/// How long `stop_node` lets a node shut down cleanly (controlled shutdown) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(60);
/// Readiness probe period.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// The name of the listener reached through the delay proxies (see [`ClusterBuilder::wan`]).
const WAN_LISTENER: &str = "WAN";

/// Default broker JVM options: a small heap (several clusters share a 2-core box), G1 as in Kafka's scripts, and
/// the C1 JIT only: it starts a broker ~0.8 s faster and spares the C2 compile threads' CPU during short tests
/// (measured 2.7 s -> 1.9 s to `Kafka Server started`). Benchmarks use `ClusterBuilder::full_jit`.
const BROKER_JVM_OPTS: &[&str] = &[
    "-Xms256m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
];

/// A client-facing listener. The listener name in the broker config equals its security protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Listener {
    /// No TLS, no authentication (only on clusters without mTLS).
    Plaintext,
    /// mTLS: TLS with a required client certificate; the principal is `User:<CN>`.
    Ssl,
    /// SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) without TLS.
    SaslPlaintext,
    /// SASL over TLS (server authentication only: no client certificate needed).
    SaslSsl,
}

impl Listener {
    /// The security protocol (`security.protocol`), which is also the listener name.
    pub fn security_protocol(self) -> &'static str {
        match self {
            Listener::Plaintext => "PLAINTEXT",
            Listener::Ssl => "SSL",
            Listener::SaslPlaintext => "SASL_PLAINTEXT",
            Listener::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether clients must speak TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Listener::Ssl | Listener::SaslSsl)
    }

    /// Whether clients authenticate with SASL.
    pub fn is_sasl(self) -> bool {
        matches!(self, Listener::SaslPlaintext | Listener::SaslSsl)
    }
}

/// An ACL resource.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resource {
    /// A topic (literal name).
    Topic(String),
    /// A consumer group (literal name).
    Group(String),
    /// The cluster resource.
    Cluster,
    /// A transactional id (literal).
    TransactionalId(String),
    /// Every transactional id that starts with this prefix.
    TransactionalIdPrefix(String),
    /// Every topic whose name starts with this prefix.
    TopicPrefix(String),
    /// Every group whose name starts with this prefix.
    GroupPrefix(String),
}

impl Resource {
    fn helper_args(&self) -> [&str; 2] {
        match self {
            Resource::Topic(n) => ["topic", n],
            Resource::Group(n) => ["group", n],
            Resource::Cluster => ["cluster", "kafka-cluster"],
            Resource::TransactionalId(n) => ["transactional-id", n],
            Resource::TransactionalIdPrefix(n) => ["transactional-id-prefix", n],
            Resource::TopicPrefix(n) => ["topic-prefix", n],
            Resource::GroupPrefix(n) => ["group-prefix", n],
        }
    }
}

/// One admin operation for [`Cluster::admin`], which runs a batch of them in a single JVM.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdminOp {
    /// Create a topic and wait until every partition has a leader.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Partition count.
        partitions: i32,
        /// Replication factor.
        replication: i16,
        /// Topic configs (`cleanup.policy`, `min.insync.replicas`, ...).
        configs: Vec<(String, String)>,
    },
    /// Add ACL entries (host `*`) and wait until the broker lists them.
    Acl {
        /// Principal, e.g. `User:alice`.
        principal: String,
        /// The resource.
        resource: Resource,
        /// Operations: `Read`, `Write`, `Create`, `Describe`, `DescribeConfigs`, `IdempotentWrite`, `All`, ...
        ops: Vec<String>,
        /// ALLOW (true) or DENY (false).
        allow: bool,
    },
    /// Wait until every partition of `topic` has at least `min_isr` in-sync replicas (e.g. a restarted node
    /// caught up and rejoined the ISR).
    WaitIsr {
        /// Topic name.
        topic: String,
        /// Minimum ISR size.
        min_isr: usize,
    },
}

impl AdminOp {
    /// A topic without configs.
    pub fn topic(name: &str, partitions: i32, replication: i16) -> AdminOp {
        AdminOp::CreateTopic {
            name: name.to_string(),
            partitions,
            replication,
            configs: Vec::new(),
        }
    }

    /// ALLOW entries.
    pub fn allow(principal: &str, resource: Resource, ops: &[&str]) -> AdminOp {
        AdminOp::Acl {
            principal: principal.to_string(),
            resource,
            ops: ops.iter().map(|s| s.to_string()).collect(),
            allow: true,
        }
    }

    /// DENY entries.
    pub fn deny(principal: &str, resource: Resource, ops: &[&str]) -> AdminOp {
        AdminOp::Acl {
            principal: principal.to_string(),
            resource,
            ops: ops.iter().map(|s| s.to_string()).collect(),
            allow: false,
        }
    }

    /// Wait for every partition's ISR to reach `min_isr`.
    pub fn wait_isr(topic: &str, min_isr: usize) -> AdminOp {
        AdminOp::WaitIsr {
            topic: topic.to_string(),
            min_isr,
        }
    }

    pub(crate) fn helper_args(&self) -> Result<Vec<String>, Error> {
        match self {
            AdminOp::WaitIsr { topic, min_isr } => Ok(vec![
                "wait-isr".to_string(),
                topic.clone(),
                min_isr.to_string(),
            ]),
            AdminOp::CreateTopic {
                name,
                partitions,
                replication,
                configs,
            } => {
                let mut args = vec![
                    "topic".to_string(),
                    name.clone(),
                    partitions.to_string(),
                    replication.to_string(),
                ];
                args.extend(configs.iter().map(|(k, v)| format!("{k}={v}")));
                Ok(args)
            }
            AdminOp::Acl {
                principal,
                resource,
                ops,
                allow,
            } => {
                if ops.is_empty() {
                    return Err(Error::Invalid(format!(
                        "no ACL operations given for {principal} on {resource:?}"
                    )));
                }
                let [kind, name] = resource.helper_args();
                let mut args = vec![
                    "acl".to_string(),
                    if *allow { "allow" } else { "deny" }.to_string(),
                    principal.clone(),
                    kind.to_string(),
                    name.to_string(),
                ];
                args.push(ops.join(","));
                Ok(args)
            }
        }
    }
}

/// Builds and starts a [`Cluster`].
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    name: String,
    version: KafkaVersion,
    nodes: usize,
    mtls: bool,
    sasl: bool,
    users: Vec<(String, String)>,
    broker_config: Vec<(String, String)>,
    jvm_opts: Vec<String>,
    start_timeout: Option<Duration>,
    wan: Option<Link>,
}

impl ClusterBuilder {
    /// The Kafka line (default [`KafkaVersion::V4`]).
    pub fn version(mut self, v: KafkaVersion) -> Self {
        self.version = v;
        self
    }

    /// Number of nodes (combined broker+controller): 1 (default) or 3. With 3, internal topics and the default
    /// replication factor are 3 and `min.insync.replicas` is 2.
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// mTLS: an SSL listener with `ssl.client.auth=required` becomes the default listener; StandardAuthorizer with
    /// `allow.everyone.if.no.acl.found=false`, principal `User:<CN>`, super users `broker` and `admin`. There is no
    /// PLAINTEXT listener at all: controller and inter-broker traffic also use mTLS with the broker certificate.
    pub fn mtls(mut self) -> Self {
        self.mtls = true;
        self
    }

    /// SASL: a SASL_PLAINTEXT listener (plus SASL_SSL with [`mtls`](Self::mtls)) with PLAIN, SCRAM-SHA-256 and
    /// SCRAM-SHA-512 for `admin` (password [`ADMIN_PASSWORD`]) and every [`user`](Self::user).
    /// Without mTLS there is no authorizer: SASL then checks identities only.
    pub fn sasl(mut self) -> Self {
        self.sasl = true;
        self
    }

    /// A user: a client certificate with CN=`name` (with mTLS) and SASL credentials (PLAIN and SCRAM).
    /// Names and passwords are limited to letters, digits and `._@-` (they end up in JAAS and CLI arguments).
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.users.push((name.to_string(), password.to_string()));
        self
    }

    /// Sets (or overrides) a broker config on every node.
    pub fn broker_config(mut self, key: &str, value: &str) -> Self {
        self.broker_config
            .push((key.to_string(), value.to_string()));
        self
    }

    /// Adds a broker JVM option (after the defaults, so `-Xmx2g` wins over the default heap).
    pub fn jvm_opt(mut self, opt: &str) -> Self {
        self.jvm_opts.push(opt.to_string());
        self
    }

    /// Full tiered JIT (C1 then C2) for the brokers instead of the default C1 only: for throughput benchmarks.
    pub fn full_jit(self) -> Self {
        self.jvm_opt("-XX:TieredStopAtLevel=4")
    }

    /// A long-distance path to the cluster: every node gets one more listener, `WAN` (same security as the
    /// default listener), that it advertises at the address of its own [`DelayProxy`] over `link`. A client
    /// bootstrapped from [`Cluster::wan_bootstrap`] is told the proxies' addresses in Metadata, so all its traffic
    /// crosses the simulated link; replication between nodes, the controller and the Java tools keep using the
    /// direct listeners. The proxies live as long as the cluster (a restarted node keeps its proxy).
    pub fn wan(mut self, link: Link) -> Self {
        self.wan = Some(link);
        self
    }

    /// How long the cluster (and later a restarted node) may take to become ready (default 120 s, or
    /// `STRAIT_START_TIMEOUT_SECS`).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = Some(timeout);
        self
    }

    /// Starts the cluster: free ports, its own temp dir, PKI, storage format, JVMs; then waits until every node
    /// is ready (probing, no fixed sleep). Retries with new ports if one turned out to be taken.
    pub fn start(self) -> Result<Cluster, Error> {
        self.validate()?;
        let lib_dir = kafka_lib_dir(self.version)?;
        let mut attempt = 1;
        loop {
            match self.try_start(&lib_dir) {
                Ok(cluster) => return Ok(cluster),
                Err(StartFailure::PortInUse(e)) if attempt < START_ATTEMPTS => {
                    eprintln!(
                        "strait-testkit: cluster {}: a port was taken, retrying with new ports ({e})",
                        self.name
                    );
                    attempt += 1;
                }
                Err(StartFailure::PortInUse(e) | StartFailure::Other(e)) => return Err(e),
            }
        }
    }

    fn validate(&self) -> Result<(), Error> {
        check_name("cluster name", &self.name)?;
        if self.nodes == 0 || self.nodes > 9 {
            return Err(Error::Invalid(format!(
                "nodes({}) is out of range: use 1 or 3",
                self.nodes
            )));
        }
        for (name, password) in &self.users {
            check_name("user name", name)?;
            check_name("password", password)?;
            if name == ADMIN_CN || name == crate::pki::BROKER_CN {
                return Err(Error::Invalid(format!(
                    "user name {name} is reserved (it is a super user the testkit creates)"
                )));
            }
        }
        Ok(())
    }

    fn listeners(&self) -> Vec<Listener> {
        let mut ls = Vec::new();
        if self.mtls {
            ls.push(Listener::Ssl);
        } else {
            ls.push(Listener::Plaintext);
        }
        if self.sasl {
            ls.push(Listener::SaslPlaintext);
            if self.mtls {
                ls.push(Listener::SaslSsl);
            }
        }
        ls
    }

    fn try_start(&self, lib_dir: &Path) -> Result<Cluster, StartFailure> {
        let began = Instant::now();
        let keep = std::env::var_os("STRAIT_KEEP_CLUSTERS").is_some_and(|v| v == "1");
        let base = std::env::temp_dir().join("strait-clusters");
        fs::create_dir_all(&base)
            .map_err(|e| Error::io(format!("creating {}", base.display()), e))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}-", self.name))
            .tempdir_in(&base)
            .map_err(|e| Error::io(format!("creating a cluster dir in {}", base.display()), e))?;
        let dir = tmp.path().to_path_buf();
        let watchdog = Watchdog::start(&dir, keep)?;
        let tmp = if keep {
            eprintln!(
                "strait-testkit: STRAIT_KEEP_CLUSTERS=1: cluster {} stays in {}",
                self.name,
                dir.display()
            );
            let _ = tmp.keep();
            None
        } else {
            Some(tmp)
        };
        for sub in ["tools", "clients", "tmp", "procs"] {
            let p = dir.join(sub);
            fs::create_dir_all(&p)
                .map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        }

        let user_names: Vec<String> = self.users.iter().map(|(n, _)| n.clone()).collect();
        let pki = if self.mtls {
            Some(Pki::generate(&dir.join("pki"), &self.name, &user_names)?)
        } else {
            None
        };

        let listeners = self.listeners();
        // Client listeners, the controller, and with a WAN path the WAN listener and its proxy.
        let wan_ports = if self.wan.is_some() { 2 } else { 0 };
        let per_node = listeners.len() + 1 + wan_ports;
        let ports = free_ports(self.nodes * per_node)?;
        let mut nodes: Vec<Node> = (0..self.nodes)
            .map(|i| {
                let id = i as i32 + 1;
                let mine = &ports[i * per_node..(i + 1) * per_node];
                let client = listeners
                    .iter()
                    .copied()
                    .zip(mine.iter().copied())
                    .collect();
                let mut node = Node::new(
                    id,
                    dir.join(format!("node-{id}")),
                    client,
                    mine[listeners.len()],
                );
                if wan_ports > 0 {
                    node.wan_port = Some(mine[listeners.len() + 1]);
                }
                node
            })
            .collect();
        // The proxies bind their ports now (the brokers advertise them) and connect upstream per connection.
        let mut wan = Vec::new();
        if let Some(link) = self.wan {
            for (i, node) in nodes.iter_mut().enumerate() {
                let Some(broker_port) = node.wan_port else {
                    continue;
                };
                let listen =
                    std::net::SocketAddr::from(([127, 0, 0, 1], ports[(i + 1) * per_node - 1]));
                let proxy = DelayProxy::start_on(listen, &format!("127.0.0.1:{broker_port}"), link)
                    .map_err(|e| match &e {
                        Error::Io { source, .. }
                            if source.kind() == std::io::ErrorKind::AddrInUse =>
                        {
                            StartFailure::PortInUse(e)
                        }
                        _ => StartFailure::Other(e),
                    })?;
                wan.push(proxy);
            }
        }

        let mut jvm_opts: Vec<String> = BROKER_JVM_OPTS.iter().map(|s| s.to_string()).collect();
        jvm_opts.extend(self.jvm_opts.iter().cloned());
        let launch = Launch {
            java: java_binary(),
            lib_dir: lib_dir.to_path_buf(),
            version: self.version,
            cluster: self.name.clone(),
            broker_jvm_opts: jvm_opts,
            tmp_dir: dir.join("tmp"),
        };
        let mut users = vec![(ADMIN_CN.to_string(), ADMIN_PASSWORD.to_string())];
        users.extend(self.users.iter().cloned());

        let start_timeout = self.start_timeout.unwrap_or_else(|| {
            std::env::var("STRAIT_START_TIMEOUT_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_START_TIMEOUT)
        });

        // From here on, dropping `cluster` stops whatever was started and removes the dir.
        let mut cluster = Cluster {
            name: self.name.clone(),
            version: self.version,
            dir,
            _tmp: tmp,
            nodes,
            pki,
            listeners,
            mtls: self.mtls,
            sasl: self.sasl,
            users,
            launch,
            start_timeout,
            seq: AtomicUsize::new(0),
            watchdog: Some(watchdog),
            wan,
        };
        for i in 0..cluster.nodes.len() {
            let props = cluster.server_properties(i, &self.broker_config);
            let node = &cluster.nodes[i];
            fs::create_dir_all(node.dir())
                .map_err(|e| Error::io(format!("creating {}", node.dir().display()), e))?;
            write_properties(&node.config, &props)?;
        }
        let formatting = Instant::now();
        cluster.format()?;
        let format_secs = formatting.elapsed().as_secs_f64();
        for node in &mut cluster.nodes {
            node.spawn(&cluster.launch)?;
        }
        let ids = cluster.node_ids();
        cluster.wait_ready(&ids)?;
        eprintln!(
            "strait-testkit: cluster {} ({} node{}, {}{}{}) ready in {:.1} s (storage format {:.1} s) at {} (dir {})",
            cluster.name,
            cluster.nodes.len(),
            if cluster.nodes.len() == 1 { "" } else { "s" },
            cluster.version,
            if cluster.mtls { ", mTLS" } else { "" },
            if cluster.sasl { ", SASL" } else { "" },
            began.elapsed().as_secs_f64(),
            format_secs,
            cluster.bootstrap(),
            cluster.dir.display()
        );
        Ok(cluster)
    }
}

/// Why one start attempt failed.
pub(crate) enum StartFailure {
    /// A listener port was taken by someone else between our probe and the broker's bind: retry.
    PortInUse(Error),
    Other(Error),
}

impl From<Error> for StartFailure {
    fn from(e: Error) -> Self {
        StartFailure::Other(e)
    }
}

/// A running Kafka cluster (KRaft, combined broker+controller nodes). `Drop` stops every JVM and deletes the dir
/// (kept with `STRAIT_KEEP_CLUSTERS=1`).
#[derive(Debug)]
pub struct Cluster {
    pub(crate) name: String,
    pub(crate) version: KafkaVersion,
    pub(crate) dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) pki: Option<Pki>,
    listeners: Vec<Listener>,
    mtls: bool,
    sasl: bool,
    /// (name, password), admin first.
    users: Vec<(String, String)>,
    pub(crate) launch: Launch,
    start_timeout: Duration,
    pub(crate) seq: AtomicUsize,
    watchdog: Option<Watchdog>,
    /// One delay proxy per node (in node order) when built with [`ClusterBuilder::wan`]. Dropped after the JVMs.
    wan: Vec<DelayProxy>,
}

impl Cluster {
    /// A builder for a cluster called `name` (shows in dirs, logs and JVM command lines).
    pub fn builder(name: &str) -> ClusterBuilder {
        ClusterBuilder {
            name: name.to_string(),
            version: KafkaVersion::V4,
            nodes: 1,
            mtls: false,
            sasl: false,
            users: Vec::new(),
            broker_config: Vec::new(),
            jvm_opts: Vec::new(),
            start_timeout: None,
            wan: None,
        }
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The listener clients use by default: SSL with mTLS, else PLAINTEXT.
    pub fn default_listener(&self) -> Listener {
        self.listeners[0]
    }

    /// The enabled client listeners, default first.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,...` of the default listener (every node, running or not).
    pub fn bootstrap(&self) -> String {
        self.listener(self.default_listener())
    }

    /// The bootstrap of listener `l`. Panics if the listener is not enabled (a test bug).
    pub fn listener(&self, l: Listener) -> String {
        self.try_listener(l).unwrap_or_else(|| {
            panic!(
                "listener {l:?} is not enabled on cluster {} (enabled: {:?})",
                self.name, self.listeners
            )
        })
    }

    /// The bootstrap of listener `l`, or None if it is not enabled.
    pub fn try_listener(&self, l: Listener) -> Option<String> {
        let addrs: Option<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| n.port(l).map(|p| format!("127.0.0.1:{p}")))
            .collect();
        addrs.map(|a| a.join(","))
    }

    /// The address of listener `l` on one node.
    pub fn node_address(&self, node_id: i32, l: Listener) -> Result<String, Error> {
        let node = self.node(node_id)?;
        node.port(l)
            .map(|p| format!("127.0.0.1:{p}"))
            .ok_or_else(|| Error::Invalid(format!("listener {l:?} is not enabled")))
    }

    /// The bootstrap through the delay proxies (`127.0.0.1:proxy1,...`), or None without
    /// [`ClusterBuilder::wan`]. Clients bootstrapped here stay on the WAN path: Metadata answers with the proxies.
    pub fn wan_bootstrap(&self) -> Option<String> {
        if self.wan.is_empty() {
            return None;
        }
        let addrs: Vec<String> = self.wan.iter().map(|p| p.addr().to_string()).collect();
        Some(addrs.join(","))
    }

    /// The delay proxy in front of node `node_id`'s WAN listener (its address, link and traffic so far), or None
    /// without [`ClusterBuilder::wan`].
    pub fn wan_proxy(&self, node_id: i32) -> Option<&DelayProxy> {
        let index = self.nodes.iter().position(|n| n.id == node_id)?;
        self.wan.get(index)
    }

    /// [`client_properties`](Self::client_properties) of the default listener with the bootstrap through the
    /// delay proxies. Panics without [`ClusterBuilder::wan`] (a test bug).
    pub fn wan_client_properties(&self, user: Option<&str>) -> Vec<(String, String)> {
        let bootstrap = self.wan_bootstrap().unwrap_or_else(|| {
            panic!(
                "cluster {} has no WAN listener: build it with ClusterBuilder::wan",
                self.name
            )
        });
        let mut props = self.client_properties(self.default_listener(), user);
        for (k, v) in &mut props {
            if k == "bootstrap.servers" {
                *v = bootstrap.clone();
            }
        }
        props
    }

    /// Client properties, named as a librdkafka/Strait user writes them, for `user` on listener `l`
    /// (`None` = the admin super user):
    /// `bootstrap.servers`, `security.protocol`, and as the listener needs: `ssl.ca.location`,
    /// `ssl.certificate.location` + `ssl.key.location` (mTLS), `sasl.mechanism` (SCRAM-SHA-512) +
    /// `sasl.username` + `sasl.password`. On PLAINTEXT, `user` is ignored (there is no identity).
    /// Panics if the listener is not enabled or the user does not exist (a test bug).
    pub fn client_properties(&self, l: Listener, user: Option<&str>) -> Vec<(String, String)> {
        let mut props = vec![
            ("bootstrap.servers".to_string(), self.listener(l)),
            (
                "security.protocol".to_string(),
                l.security_protocol().to_string(),
            ),
        ];
        let name = user.unwrap_or(ADMIN_CN);
        if l.is_tls() {
            let pki = self
                .pki
                .as_ref()
                .unwrap_or_else(|| panic!("cluster {} has a TLS listener but no PKI", self.name));
            props.push(("ssl.ca.location".into(), pki.ca_pem().display().to_string()));
            if l == Listener::Ssl {
                let cert = pki.user(name).unwrap_or_else(|| {
                    panic!(
                        "no certificate for user {name} on cluster {}: add it with ClusterBuilder::user",
                        self.name
                    )
                });
                props.push((
                    "ssl.certificate.location".into(),
                    cert.cert_pem.display().to_string(),
                ));
                props.push((
                    "ssl.key.location".into(),
                    cert.key_pem.display().to_string(),
                ));
            }
        }
        if l.is_sasl() {
            let password = self.password(name).unwrap_or_else(|| {
                panic!(
                    "no SASL user {name} on cluster {}: add it with ClusterBuilder::user",
                    self.name
                )
            });
            props.push(("sasl.mechanism".into(), "SCRAM-SHA-512".into()));
            props.push(("sasl.username".into(), name.to_string()));
            props.push(("sasl.password".into(), password.to_string()));
        }
        props
    }

    /// Translates librdkafka-style properties (as from [`client_properties`](Self::client_properties)) into Java
    /// client properties: PEM trust/key stores and `sasl.jaas.config`.
    pub fn java_client_properties(
        &self,
        props: &[(String, String)],
    ) -> Result<Vec<(String, String)>, Error> {
        java_client_properties(props, &|cert, key| self.keystore_for(cert, key))
    }

    /// Writes a Java client config file for `user` on listener `l` (for `--command-config`, MM2, ...) as
    /// `<dir>/clients/<protocol>-<user>.java.properties` and returns its path.
    pub fn write_java_client_config(
        &self,
        l: Listener,
        user: Option<&str>,
    ) -> Result<PathBuf, Error> {
        let props = self.java_client_properties(&self.client_properties(l, user))?;
        let path = self.dir.join("clients").join(format!(
            "{}-{}.java.properties",
            l.security_protocol().to_ascii_lowercase(),
            user.unwrap_or(ADMIN_CN)
        ));
        write_properties(&path, &props)?;
        Ok(path)
    }

    fn keystore_for(&self, cert: &Path, key: &Path) -> Result<PathBuf, Error> {
        if let Some(pki) = &self.pki {
            let known = pki
                .user_names()
                .into_iter()
                .filter_map(|n| pki.user(n))
                .chain([pki.broker(), &pki.foreign_ca().user])
                .find(|u| u.cert_pem == cert && u.key_pem == key);
            if let Some(u) = known {
                return Ok(u.keystore_pem.clone());
            }
        }
        let read = |p: &Path| {
            fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))
        };
        let combined = format!("{}\n{}", read(key)?.trim_end(), read(cert)?);
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join("clients").join(format!("keystore-{n}.pem"));
        fs::write(&path, combined)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    }

    /// The SASL password of `user` ("admin" included), if that user exists.
    pub fn password(&self, user: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|(n, _)| n == user)
            .map(|(_, p)| p.as_str())
    }

    /// The users given to the builder (without admin).
    pub fn user_names(&self) -> Vec<&str> {
        self.users.iter().skip(1).map(|(n, _)| n.as_str()).collect()
    }

    /// The PKI, when mTLS is enabled.
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// The node ids (1..=n).
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Whether node `node_id`'s JVM is running.
    pub fn is_running(&mut self, node_id: i32) -> Result<bool, Error> {
        Ok(self.node_mut(node_id)?.is_running())
    }

    /// Stops a node cleanly: SIGTERM, wait for the controlled shutdown (SIGKILL after 60 s).
    pub fn stop_node(&mut self, node_id: i32) -> Result<(), Error> {
        self.node_mut(node_id)?.stop(STOP_GRACE);
        Ok(())
    }

    /// Kills a node: SIGKILL (a crash; the controller notices after `broker.session.timeout.ms`).
    pub fn kill_node(&mut self, node_id: i32) -> Result<(), Error> {
        self.node_mut(node_id)?.kill();
        Ok(())
    }

    /// Starts a stopped node again with the same config, ports and data, and waits until it is ready.
    ///
    /// Right after a stop this can take up to `broker.session.timeout.ms` (9 s): the controller refuses the new
    /// registration (DUPLICATE_BROKER_REGISTRATION) until the previous incarnation's session has expired.
    pub fn start_node(&mut self, node_id: i32) -> Result<(), Error> {
        let launch = self.launch.clone();
        let node = self.node_mut(node_id)?;
        if node.is_running() {
            return Err(Error::Invalid(format!(
                "node {node_id} is already running; stop or kill it first"
            )));
        }
        node.spawn(&launch)?;
        self.wait_ready(&[node_id]).map_err(|f| match f {
            StartFailure::PortInUse(e) | StartFailure::Other(e) => e,
        })
    }

    /// The cluster's directory (node dirs, PKI, tool output).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Kafka line the cluster runs.
    pub fn version(&self) -> KafkaVersion {
        self.version
    }

    /// The lib dir of the cluster's Kafka jars.
    pub fn lib_dir(&self) -> &Path {
        &self.launch.lib_dir
    }

    /// The directory of one node (config, data, logs, stdout.log).
    pub fn node_dir(&self, node_id: i32) -> Result<&Path, Error> {
        Ok(self.node(node_id)?.dir())
    }

    fn node(&self, node_id: i32) -> Result<&Node, Error> {
        self.nodes
            .iter()
            .find(|n| n.id == node_id)
            .ok_or(Error::UnknownNode(node_id))
    }

    fn node_mut(&mut self, node_id: i32) -> Result<&mut Node, Error> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == node_id)
            .ok_or(Error::UnknownNode(node_id))
    }

    /// Waits until every node in `ids` probes ready; on exit/timeout returns the node's output tail.
    fn wait_ready(&mut self, ids: &[i32]) -> Result<(), StartFailure> {
        let deadline = Instant::now() + self.start_timeout;
        let mut pending: Vec<i32> = ids.to_vec();
        loop {
            let mut still = Vec::new();
            for id in pending {
                let node = self.node_mut(id)?;
                match node.probe() {
                    Probe::Ready => {}
                    Probe::Starting => still.push(id),
                    Probe::Exited {
                        reason,
                        port_in_use,
                    } => {
                        let e = self.not_ready(id, reason);
                        return Err(if port_in_use {
                            StartFailure::PortInUse(e)
                        } else {
                            StartFailure::Other(e)
                        });
                    }
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let id = still[0];
                return Err(StartFailure::Other(self.not_ready(
                    id,
                    format!(
                        "not ready after {:?} (no `Kafka Server started` in its output, or a listener refused \
                         connections); raise STRAIT_START_TIMEOUT_SECS on a loaded machine",
                        self.start_timeout
                    ),
                )));
            }
            pending = still;
            std::thread::sleep(PROBE_EVERY);
        }
    }

    fn not_ready(&self, id: i32, reason: String) -> Error {
        let (dir, log_tail) = match self.node(id) {
            Ok(n) => (n.dir().to_path_buf(), n.output_tail(40)),
            Err(_) => (self.dir.clone(), String::new()),
        };
        Error::NotReady {
            cluster: self.name.clone(),
            node: id,
            reason,
            dir,
            log_tail,
        }
    }

    /// Formats every node's storage (in parallel: one StorageTool JVM per node), with the SCRAM credentials.
    fn format(&self) -> Result<(), Error> {
        let bytes: [u8; 16] = rand::random();
        let mut cluster_id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        // Kafka never hands out ids starting with '-' (they would parse as a CLI option).
        if cluster_id.starts_with('-') {
            cluster_id.replace_range(0..1, "A");
        }
        let mut scram = Vec::new();
        if self.sasl {
            for (name, password) in &self.users {
                for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                    scram.push("--add-scram".to_string());
                    scram.push(format!("{mech}=[name={name},password={password}]"));
                }
            }
        }
        let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|node| {
                    let mut args = vec![
                        "format".to_string(),
                        "--cluster-id".to_string(),
                        cluster_id.clone(),
                        "--config".to_string(),
                        node.config.display().to_string(),
                    ];
                    args.extend(scram.iter().cloned());
                    let id = node.id;
                    s.spawn(move || {
                        let out = self.run_java(
                            None,
                            self.version.storage_tool_class(),
                            &args,
                            None,
                            Duration::from_secs(180),
                        )?;
                        if out.status.success() {
                            Ok(())
                        } else {
                            Err(Error::Format {
                                node: id,
                                status: out.status.to_string(),
                                output: format!(
                                    "{}\n{}",
                                    crate::error::tail(&String::from_utf8_lossy(&out.stdout), 20),
                                    crate::error::tail(&String::from_utf8_lossy(&out.stderr), 20)
                                ),
                            })
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::Invalid("a storage format thread panicked".into()))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// The broker config of node `index`.
    fn server_properties(
        &self,
        index: usize,
        overrides: &[(String, String)],
    ) -> Vec<(String, String)> {
        let node = &self.nodes[index];
        let n = self.nodes.len();
        let rf = n.min(3);
        let min_isr = if n >= 3 { 2 } else { 1 };
        let controller_protocol = if self.mtls { "SSL" } else { "PLAINTEXT" };
        let voters: Vec<String> = self
            .nodes
            .iter()
            .map(|x| format!("{}@127.0.0.1:{}", x.id, x.controller_port))
            .collect();
        let client: Vec<String> = node
            .client_ports
            .iter()
            .map(|(l, p)| format!("{}://127.0.0.1:{p}", l.security_protocol()))
            .collect();
        let mut listeners = client.clone();
        listeners.push(format!("CONTROLLER://127.0.0.1:{}", node.controller_port));
        let mut advertised = client.clone();
        let mut protocol_map: Vec<String> = self
            .listeners
            .iter()
            .map(|l| format!("{0}:{0}", l.security_protocol()))
            .collect();
        protocol_map.push(format!("CONTROLLER:{controller_protocol}"));
        // The WAN listener binds its own port and advertises the node's proxy, with the default listener's security.
        if let (Some(bind), Some(proxy)) = (node.wan_port, self.wan.get(index)) {
            listeners.push(format!("{WAN_LISTENER}://127.0.0.1:{bind}"));
            advertised.push(format!("{WAN_LISTENER}://{}", proxy.addr()));
            protocol_map.push(format!(
                "{WAN_LISTENER}:{}",
                self.default_listener().security_protocol()
            ));
        }

        let mut p: Vec<(String, String)> = Vec::new();
        let mut set = |k: &str, v: String| p.push((k.to_string(), v));
        set("process.roles", "broker,controller".into());
        set("node.id", node.id.to_string());
        // Static quorum: format without --standalone/--initial-controllers.
        set("controller.quorum.voters", voters.join(","));
        set("listeners", listeners.join(","));
        set("advertised.listeners", advertised.join(","));
        set("listener.security.protocol.map", protocol_map.join(","));
        set("controller.listener.names", "CONTROLLER".into());
        // Inter-broker traffic uses the default client listener: with mTLS that is SSL with the broker
        // certificate (User:broker, a super user). No PLAINTEXT listener exists on an mTLS cluster, so no
        // connection can ever be ANONYMOUS, and ANONYMOUS is never a super user.
        set(
            "inter.broker.listener.name",
            self.default_listener().security_protocol().into(),
        );
        set("log.dirs", node.data_dir().display().to_string());
        set("num.partitions", "1".into());
        set("default.replication.factor", rf.to_string());
        set("min.insync.replicas", min_isr.to_string());
        set("offsets.topic.replication.factor", rf.to_string());
        // Fewer internal partitions: the first group/transaction creates them, and 50 (x RF) is slow on 2 cores.
        set("offsets.topic.num.partitions", "5".into());
        set("transaction.state.log.replication.factor", rf.to_string());
        set("transaction.state.log.min.isr", min_isr.to_string());
        set("transaction.state.log.num.partitions", "5".into());
        if self.version == KafkaVersion::V4 {
            set(
                "share.coordinator.state.topic.replication.factor",
                rf.to_string(),
            );
            set("share.coordinator.state.topic.min.isr", min_isr.to_string());
            set("share.coordinator.state.topic.num.partitions", "5".into());
        }
        set("group.initial.rebalance.delay.ms", "0".into());
        // Sized for a 2-core machine running several clusters.
        set("num.network.threads", "2".into());
        set("num.io.threads", "2".into());
        set("num.recovery.threads.per.data.dir", "1".into());
        set("num.replica.fetchers", "1".into());
        set("background.threads", "4".into());
        // The cleaner allocates its dedupe buffer up front (128 MiB by default): too much for a 512 MiB heap.
        set("log.cleaner.dedupe.buffer.size", "16777216".into());

        if let Some(pki) = &self.pki {
            let pki_dir = pki.dir();
            set("ssl.keystore.type", "PEM".into());
            set(
                "ssl.keystore.location",
                pki_dir.join("broker.keystore.pem").display().to_string(),
            );
            set("ssl.truststore.type", "PEM".into());
            set(
                "ssl.truststore.location",
                pki.ca_pem().display().to_string(),
            );
            // Applies to SSL and CONTROLLER; SASL_SSL relaxes it below.
            set("ssl.client.auth", "required".into());
            set(
                "ssl.principal.mapping.rules",
                "RULE:^CN=([^,]+).*$/$1/,DEFAULT".into(),
            );
            set(
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            );
            set(
                "super.users",
                format!("User:{};User:{ADMIN_CN}", crate::pki::BROKER_CN),
            );
            set("allow.everyone.if.no.acl.found", "false".into());
        }
        if self.sasl {
            set(
                "sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".into(),
            );
            let plain_users: Vec<String> = self
                .users
                .iter()
                .map(|(u, pw)| format!("user_{u}=\"{pw}\""))
                .collect();
            for l in self.listeners.iter().filter(|l| l.is_sasl()) {
                let name = l.security_protocol().to_ascii_lowercase();
                set(
                    &format!("listener.name.{name}.plain.sasl.jaas.config"),
                    format!(
                        "org.apache.kafka.common.security.plain.PlainLoginModule required {};",
                        plain_users.join(" ")
                    ),
                );
                for mech in ["scram-sha-256", "scram-sha-512"] {
                    set(
                        &format!("listener.name.{name}.{mech}.sasl.jaas.config"),
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;".into(),
                    );
                }
                if *l == Listener::SaslSsl {
                    set(
                        &format!("listener.name.{name}.ssl.client.auth"),
                        "none".into(),
                    );
                }
            }
        }
        for (k, v) in overrides {
            match p.iter_mut().find(|(pk, _)| pk == k) {
                Some(entry) => entry.1 = v.clone(),
                None => p.push((k.clone(), v.clone())),
            }
        }
        p
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let began = Instant::now();
        // SIGTERM everyone first so the nodes shut down in parallel, then SIGKILL whoever is left.
        for node in &mut self.nodes {
            node.terminate();
        }
        // A node writing the AppCDS archive at exit needs a little longer; killing it would waste the archive.
        let grace = if self.nodes.iter().any(Node::is_dumping_cds) {
            DROP_GRACE_DUMPING
        } else {
            DROP_GRACE
        };
        let deadline = Instant::now() + grace;
        for node in &mut self.nodes {
            if !node.wait_exit(deadline) {
                node.kill();
            }
        }
        if let Some(mut w) = self.watchdog.take() {
            w.finish();
        }
        eprintln!(
            "strait-testkit: cluster {} stopped in {:.1} s",
            self.name,
            began.elapsed().as_secs_f64()
        );
        // `_tmp` (if any) removes the directory when it drops right after this.
    }
}

/// The `java` to run: `STRAIT_JAVA` if set, else `$JAVA_HOME/bin/java`, else `java` from PATH.
pub(crate) fn java_binary() -> PathBuf {
    if let Some(j) = std::env::var_os("STRAIT_JAVA") {
        return PathBuf::from(j);
    }
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let j = PathBuf::from(home).join("bin").join("java");
        if j.is_file() {
            return j;
        }
    }
    PathBuf::from("java")
}

/// Names end up in file names, JAAS configs and StorageTool arguments: keep them to a safe alphabet.
pub(crate) fn check_name(what: &str, s: &str) -> Result<(), Error> {
    let ok = !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} {s:?} must be 1-100 characters of letters, digits and ._@- (not starting with -)"
        )))
    }
}
