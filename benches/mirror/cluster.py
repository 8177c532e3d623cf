"""KRaft clusters of combined broker + controller nodes started from the Maven-Central Kafka jars: one node (the
default), or N nodes (`--brokers 3`: every node a voter of a static quorum, RF 3 and min ISR 2 for the data and the
internal topics), PLAINTEXT or mTLS (`--tls`: an SSL listener with `ssl.client.auth=required`, certificates made by
`openssl` into the bench's scratch dir, see `make_pki`).

Every node gets free ports and a fresh data dir, is formatted with kafka.tools.StorageTool (static quorum, so no
--standalone); the nodes of a cluster start together (a static quorum needs a majority to elect its leader) and the
cluster is ready once every node's log says "Kafka Server started" AND its client port accepts a TCP connection; no
fixed sleeps. The target cluster is thrown away and started anew for every mirror run: that is the only way to give each
contender a really empty target (no leftover topics, consumer groups, MM2 internal topics, or segment deletion of the
previous run still eating CPU), and on this box it costs ~10 s per run.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from procs import Registry

# Same JVM flags as Kafka's bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS), for every JVM of the bench.
JVM_PERF_OPTS = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
MARK = "-Dstrait.bench=1"  # every bench JVM carries it, so a leftover one is easy to find


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Kafka:
    """Where the bench finds the Kafka jars, Java, and the log4j configs."""

    java: str
    lib4: Path
    lib39: Path
    log4j2_server: Path  # kafka/log4j2.properties: INFO to stdout + ${kafka.logs.dir}/server.log
    log4j2_tools: Path  # kafka/tools-log4j2.properties: WARN to stderr
    log4j1_server: Path  # kafka/log4j.properties (3.9 / MM1)
    # mTLS clusters: the Java client settings file (Pki.write_java_client) every bench tool JVM gets as
    # -Dbench.client.config (java/BenchClient.java) and Kafka's perf tools as --command-config
    client_config: Path | None = None

    def cp4(self, extra: Path | None = None) -> str:
        return f"{self.lib4}/*" + (f":{extra}" if extra else "")

    def tool_cmd(self, main: str, *args: str, heap: str = "512m", classes: Path | None = None) -> list[str]:
        """A short-lived 4.x tool JVM (ProducerPerformance, StorageTool, the bench's own helpers)."""
        return [
            self.java,
            f"-Xmx{heap}",
            MARK,
            *JVM_PERF_OPTS,
            f"-Dlog4j2.configurationFile={self.log4j2_tools}",
            *([f"-Dbench.client.config={self.client_config}"] if self.client_config else []),
            "-cp",
            self.cp4(classes),
            main,
            *args,
        ]


@dataclass(frozen=True)
class Topology:
    """How many nodes each cluster has and how clients reach it: the same for the source and every target."""

    brokers: int = 1
    tls: bool = False

    @property
    def rf(self) -> int:
        """Replication factor of the data topics and of the internal topics (offsets, transaction state...)."""
        return min(self.brokers, 3)

    @property
    def min_isr(self) -> int:
        return 2 if self.brokers >= 3 else 1

    @property
    def label(self) -> str:
        """For titles and the CSV: "1 broker, plaintext", "3 brokers, RF 3, min ISR 2, mTLS"."""
        nodes = "1 broker" if self.brokers == 1 else f"{self.brokers} brokers, RF {self.rf}, min ISR {self.min_isr}"
        return f"{nodes}, {'mTLS' if self.tls else 'plaintext'}"


@dataclass(frozen=True)
class Pki:
    """A CA, the broker certificate (CN=broker, SAN IP:127.0.0.1 and DNS:localhost, server and client auth: the
    brokers talk SSL to each other) and one client certificate (CN=strait-bench, client auth), every key unencrypted
    PKCS#8 PEM (what Kafka's PEM key store, KIP-651, and Strait read), as in the test kit (crates/testkit/src/pki.rs).
    One CA for the source and every target cluster, so that one client certificate opens both (the bench's tools,
    e.g. the latency probe, talk to both in one JVM); each mirror still gets the settings per cluster."""

    dir: Path
    ca_pem: Path
    broker_keystore: Path  # key + certificate, PEM (ssl.keystore.type=PEM)
    client_cert: Path
    client_key: Path
    client_keystore: Path  # key + certificate, PEM: the form Java clients take

    def broker_properties(self) -> dict[str, str]:
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
            "ssl.client.auth": "required",
        }

    def java_client(self) -> dict[str, str]:
        """Client settings of a Java client (tools, MM1, MM2)."""
        return {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.client_keystore),
        }

    def strait_client(self) -> dict[str, str]:
        """Client settings of Strait's [source] / [target] (librdkafka names, examples/strait.toml)."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_pem),
            "ssl.certificate.location": str(self.client_cert),
            "ssl.key.location": str(self.client_key),
        }

    def write_java_client(self) -> Path:
        """The Java client settings as a properties file (Kafka.client_config)."""
        f = self.dir / "client.properties"
        f.write_text("".join(f"{k}={v}\n" for k, v in self.java_client().items()))
        return f


# openssl's extensions per certificate kind (`-extfile`)
_CA_EXT = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
_BROKER_EXT = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
)
_CLIENT_EXT = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"


def openssl_commands(d: Path) -> list[list[str]]:
    """The openssl command lines that make the PKI in `d` (EC P-256 keys, like rcgen's default in the test kit;
    valid 10 years)."""
    cmds: list[list[str]] = []

    def key(name: str) -> None:
        cmds.append(
            ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(d / f"{name}.key.pem")]
        )

    key("ca")
    cmds.append(
        ["openssl", "req", "-new", "-x509", "-key", str(d / "ca.key.pem"), "-out", str(d / "ca.pem"), "-days", "3650",
         "-subj", "/CN=Strait bench CA", "-extensions", "v3_ca_bench", "-config", str(d / "ca.cnf")]
    )
    for name, cn, ext in (("broker", "broker", "broker.ext"), ("client", "strait-bench", "client.ext")):
        key(name)
        cmds.append(
            ["openssl", "req", "-new", "-key", str(d / f"{name}.key.pem"), "-out", str(d / f"{name}.csr"),
             "-subj", f"/CN={cn}"]
        )
        cmds.append(
            ["openssl", "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"), "-CAkey",
             str(d / "ca.key.pem"), "-CAcreateserial", "-out", str(d / f"{name}.cert.pem"), "-days", "3650",
             "-extfile", str(d / ext)]
        )
    return cmds


def make_pki(d: Path) -> Pki:
    """Writes a fresh PKI into `d` with openssl (a few hundred ms)."""
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "ca.cnf").write_text(
        "[req]\ndistinguished_name = dn\n[dn]\n[v3_ca_bench]\n" + _CA_EXT + "subjectKeyIdentifier=hash\n"
    )
    (d / "broker.ext").write_text(_BROKER_EXT)
    (d / "client.ext").write_text(_CLIENT_EXT)
    for cmd in openssl_commands(d):
        r = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    for name in ("broker", "client"):
        # Kafka's PEM key store: the private key, then the certificate chain, in one file
        (d / f"{name}.keystore.pem").write_text(
            (d / f"{name}.key.pem").read_text() + (d / f"{name}.cert.pem").read_text()
        )
    return Pki(
        dir=d,
        ca_pem=d / "ca.pem",
        broker_keystore=d / "broker.keystore.pem",
        client_cert=d / "client.cert.pem",
        client_key=d / "client.key.pem",
        client_keystore=d / "client.keystore.pem",
    )


@dataclass
class Node:
    """One broker + controller JVM of a cluster."""

    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: object = field(repr=False)


@dataclass
class Cluster:
    """One running cluster (one node, or several: `nodes`; `port`, `controller_port` and `proc` are the first
    node's)."""

    name: str
    port: int
    controller_port: int
    dir: Path
    proc: object = field(repr=False)
    # WAN shapes: the port of the broker's WAN listener, and the port it advertises there (a delay proxy's)
    wan_port: int | None = None
    wan_proxy_port: int | None = None
    # scale shapes: the broker's JMX port (its request meters), when started with jmx=True
    jmx_port: int | None = None
    nodes: list[Node] = field(default_factory=list, repr=False)

    @property
    def bootstrap(self) -> str:
        """Every node's client listener (SSL on an mTLS cluster)."""
        ports = [n.port for n in self.nodes] if self.nodes else [self.port]
        return ",".join(f"127.0.0.1:{p}" for p in ports)

    @property
    def wan_bootstrap(self) -> str:
        """The bootstrap through the delay proxy: clients that start here get the proxy's address in Metadata."""
        if self.wan_proxy_port is None:
            raise RuntimeError(f"cluster {self.name} has no WAN listener")
        return f"127.0.0.1:{self.wan_proxy_port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes] if self.nodes else [self.proc.pid]


def cpu_seconds(c: Cluster) -> float:
    """utime + stime of every node of the cluster (0 for a node that is gone)."""
    from procs import cpu_seconds as pid_cpu

    return sum(pid_cpu(p) or 0.0 for p in c.pids)


SERVER_PROPERTIES = """\
# written by benches/mirror (single-node combined KRaft node, PLAINTEXT, static quorum)
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}{wan_listener}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}{wan_advertised}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT{wan_map}
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# every topic is created explicitly (the bench, MM2, Strait; MM1's target topics by the bench): a mirror that
# forgets to create one fails loudly instead of writing into an auto-created 1-partition topic
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
"""


def server_properties(
    topo: Topology, node_id: int, ports: list[tuple[int, int]], data: Path, pki: Pki | None = None
) -> str:
    """server.properties of node `node_id` (1-based) of a cluster whose nodes listen on `ports` = [(client port,
    controller port)] in node order. One plaintext node: the historical single-node file (SERVER_PROPERTIES), so the
    default bench is unchanged. Otherwise every node is a voter of a static quorum; with mTLS the client and
    inter-broker listener is SSL with `ssl.client.auth=required` (the controller listener stays PLAINTEXT on
    loopback: the quorum's own traffic, not what a mirror touches)."""
    if topo.tls and pki is None:
        raise ValueError("an mTLS cluster needs a Pki")
    port, cport = ports[node_id - 1]
    if topo.brokers == 1 and not topo.tls:
        return SERVER_PROPERTIES.format(port=port, cport=cport, data=data, wan_listener="", wan_advertised="", wan_map="")
    proto = "SSL" if topo.tls else "PLAINTEXT"
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, start=1))
    rf, isr = topo.rf, topo.min_isr
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"{proto}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "advertised.listeners": f"{proto}://127.0.0.1:{port}",
        "inter.broker.listener.name": proto,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{proto}:{proto}",
        "log.dirs": str(data),
        "num.partitions": "1",
        # topics created without a factor (BenchAdmin, MM2's replication.factor = -1 would too) get the cluster's
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(isr),
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(isr),
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(isr),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    if pki is not None and topo.tls:
        props.update(pki.broker_properties())
    head = f"# written by benches/mirror (node {node_id} of {topo.brokers}, combined KRaft node, {topo.label})\n"
    return head + "".join(f"{k}={v}\n" for k, v in props.items())


def _format(
    reg: Registry, kafka: Kafka, name: str, cluster_id: str, props: Path, logs: Path, legacy: bool = False
) -> subprocess.Popen:
    args = ("format", "-t", cluster_id, "-c", str(props))
    if legacy:
        # a 3.9 broker needs a log formatted by its own StorageTool (the 4.x one writes a newer metadata version)
        cmd = [kafka.java, "-Xmx256m", MARK, *JVM_PERF_OPTS, f"-Dlog4j.configuration=file:{kafka.log4j1_server}",
               "-cp", f"{kafka.lib39}/*", "kafka.tools.StorageTool", *args]
    else:
        cmd = kafka.tool_cmd("kafka.tools.StorageTool", *args)
    return reg.spawn(f"{name}-format", cmd, logs / "format.log")


def start(
    reg: Registry,
    kafka: Kafka,
    name: str,
    base: Path,
    heap: str,
    timeout: float = 180.0,
    wan_proxy_port: int | None = None,
    jmx: bool = False,
    topo: Topology | None = None,
    pki: Pki | None = None,
    legacy: bool = False,
) -> Cluster:
    """Formats and starts a fresh cluster under `base/name`; returns once it serves.

    `legacy`: a Kafka 3.9 broker (`Kafka.lib39`, log4j 1 config) instead of 4.x, one PLAINTEXT node only: the
    rebalance phase's classic-protocol group coordinator.

    `topo`: the number of nodes and PLAINTEXT/mTLS (default one PLAINTEXT node); mTLS needs `pki`. Nodes of a
    multi-node cluster live in `base/name/n<id>`.

    With `wan_proxy_port` (one PLAINTEXT node only), the broker gets one more listener, WAN, which it advertises at
    127.0.0.1:wan_proxy_port: a delay proxy listening there (started by the caller) forwarding to `Cluster.wan_port`
    puts every client that bootstraps from `Cluster.wan_bootstrap` behind the simulated link, while the bench's tools
    use the direct PLAINTEXT listener."""
    topo = topo or Topology()
    if topo != Topology() and (wan_proxy_port or jmx):
        raise ValueError("the WAN listener and JMX are only set up on a single PLAINTEXT node")
    if legacy and (topo != Topology() or wan_proxy_port or jmx):
        raise ValueError("a Kafka 3.9 cluster is only set up as a single PLAINTEXT node without WAN listener or JMX")
    d = base / name
    if d.exists():
        shutil.rmtree(d)
    (d / "logs").mkdir(parents=True)
    n = topo.brokers
    ports: set[int] = set()
    while len(ports) < (3 if wan_proxy_port else 2 * n):
        p = free_port()
        if p != wan_proxy_port:
            ports.add(p)
    ordered = sorted(ports)
    if wan_proxy_port:
        port, cport, wan_port = ordered
        node_ports = [(port, cport)]
    else:
        wan_port = None
        node_ports = [(ordered[2 * i], ordered[2 * i + 1]) for i in range(n)]
    cluster_id = "-"
    while cluster_id[0] in "-_":  # a leading '-' would read as an option to StorageTool (Kafka's Uuid avoids it too)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    node_dirs = [d] if n == 1 else [d / f"n{i}" for i in range(1, n + 1)]
    formats = []
    for i, nd in enumerate(node_dirs, start=1):
        (nd / "logs").mkdir(parents=True, exist_ok=True)
        props = nd / "server.properties"
        if wan_port is not None:
            props.write_text(
                SERVER_PROPERTIES.format(
                    port=node_ports[0][0],
                    cport=node_ports[0][1],
                    data=nd / "data",
                    wan_listener=f",WAN://127.0.0.1:{wan_port}",
                    wan_advertised=f",WAN://127.0.0.1:{wan_proxy_port}",
                    wan_map=",WAN:PLAINTEXT",
                )
            )
        else:
            props.write_text(server_properties(topo, i, node_ports, nd / "data", pki))
        formats.append(
            (nd, _format(reg, kafka, name if n == 1 else f"{name}-n{i}", cluster_id, props, nd / "logs", legacy))
        )
    for nd, fmt in formats:
        code = fmt.wait()
        reg.forget(fmt)
        if code != 0:
            raise RuntimeError(f"formatting {name} ({nd}) failed: {_tail(nd / 'logs' / 'format.log')}")
    jmx_port = free_port() if jmx else None
    jmx_opts = (
        [
            f"-Dcom.sun.management.jmxremote.port={jmx_port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={jmx_port}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
            "-Djava.rmi.server.hostname=127.0.0.1",
        ]
        if jmx_port
        else []
    )
    nodes: list[Node] = []
    for i, nd in enumerate(node_dirs, start=1):
        cmd = [
            kafka.java,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            MARK,
            *JVM_PERF_OPTS,
            *jmx_opts,
            f"-Dlog4j.configuration=file:{kafka.log4j1_server}"
            if legacy
            else f"-Dlog4j2.configurationFile={kafka.log4j2_server}",
            f"-Dkafka.logs.dir={nd / 'logs'}",
            "-cp",
            f"{kafka.lib39}/*" if legacy else kafka.cp4(),
            "kafka.Kafka",
            str(nd / "server.properties"),
        ]
        proc = reg.spawn(name if n == 1 else f"{name}-n{i}", cmd, nd / "logs" / "stdout.log")
        nodes.append(Node(i, node_ports[i - 1][0], node_ports[i - 1][1], nd, proc))
    deadline = time.monotonic() + timeout
    started = [False] * n
    while time.monotonic() < deadline:
        for k, node in enumerate(nodes):
            log = node.dir / "logs" / "stdout.log"
            if node.proc.poll() is not None:
                reg.forget(node.proc)
                for other in nodes:
                    reg.stop(other.proc, timeout=5, sig=signal.SIGKILL)
                raise RuntimeError(f"broker {name} node {node.node_id} exited with {node.proc.returncode}: {_tail(log)}")
            if not started[k]:
                started[k] = "Kafka Server started" in log.read_text(errors="replace")
        if all(started) and all(tcp_open(x.port) for x in nodes) and (wan_port is None or tcp_open(wan_port)):
            first = nodes[0]
            return Cluster(
                name, first.port, first.controller_port, d, first.proc, wan_port, wan_proxy_port, jmx_port, nodes
            )
        time.sleep(0.1)
    for node in nodes:
        reg.stop(node.proc, timeout=5)
    logs = " || ".join(_tail(x.dir / "logs" / "stdout.log", 3) for x in nodes)
    raise RuntimeError(f"broker {name} not ready after {timeout:.0f} s: {logs}")


def discard(reg: Registry, cluster: Cluster) -> None:
    """Kills a cluster whose data is thrown away (SIGKILL: a clean shutdown would only cost time) and deletes it."""
    for proc in [x.proc for x in cluster.nodes] or [cluster.proc]:
        reg.stop(proc, timeout=10, sig=signal.SIGKILL)
    shutil.rmtree(cluster.dir, ignore_errors=True)


def stop(reg: Registry, cluster: Cluster) -> None:
    """Clean shutdown (SIGTERM; Kafka's shutdown hook), every node at once."""
    procs = [x.proc for x in cluster.nodes] or [cluster.proc]
    for proc in procs:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        reg.stop(proc, timeout=60)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no log {path})"
