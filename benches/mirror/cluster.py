"""Single-node KRaft clusters (combined broker + controller) started from the Maven-Central Kafka jars.

A cluster gets free ports and a fresh data dir, is formatted with kafka.tools.StorageTool (static quorum, so no
--standalone) and is ready once its log says "Kafka Server started" AND its port accepts a TCP connection; no fixed
sleeps. The target cluster is thrown away and started anew for every mirror run: that is the only way to give each
contender a really empty target (no leftover topics, consumer groups, MM2 internal topics, or segment deletion of the
previous run still eating CPU), and on this box it costs ~10 s per run.
"""

from __future__ import annotations

import base64
import shutil
import socket
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
            "-cp",
            self.cp4(classes),
            main,
            *args,
        ]


@dataclass
class Cluster:
    """One running single-node cluster."""

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

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def wan_bootstrap(self) -> str:
        """The bootstrap through the delay proxy: clients that start here get the proxy's address in Metadata."""
        if self.wan_proxy_port is None:
            raise RuntimeError(f"cluster {self.name} has no WAN listener")
        return f"127.0.0.1:{self.wan_proxy_port}"

    @property
    def pid(self) -> int:
        return self.proc.pid


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


def start(
    reg: Registry,
    kafka: Kafka,
    name: str,
    base: Path,
    heap: str,
    timeout: float = 180.0,
    wan_proxy_port: int | None = None,
    jmx: bool = False,
) -> Cluster:
    """Formats and starts a fresh cluster under `base/name`; returns once it serves.

    With `wan_proxy_port`, the broker gets one more listener, WAN, which it advertises at 127.0.0.1:wan_proxy_port:
    a delay proxy listening there (started by the caller) forwarding to `Cluster.wan_port` puts every client that
    bootstraps from `Cluster.wan_bootstrap` behind the simulated link, while the bench's tools use the direct
    PLAINTEXT listener."""
    d = base / name
    if d.exists():
        shutil.rmtree(d)
    (d / "logs").mkdir(parents=True)
    ports: set[int] = set()
    while len(ports) < (3 if wan_proxy_port else 2):
        p = free_port()
        if p != wan_proxy_port:
            ports.add(p)
    port, cport, *rest = sorted(ports)
    wan_port = rest[0] if rest else None
    props = d / "server.properties"
    wan = {"wan_listener": "", "wan_advertised": "", "wan_map": ""}
    if wan_port is not None:
        wan = {
            "wan_listener": f",WAN://127.0.0.1:{wan_port}",
            "wan_advertised": f",WAN://127.0.0.1:{wan_proxy_port}",
            "wan_map": ",WAN:PLAINTEXT",
        }
    props.write_text(SERVER_PROPERTIES.format(port=port, cport=cport, data=d / "data", **wan))
    cluster_id = "-"
    while cluster_id[0] in "-_":  # a leading '-' would read as an option to StorageTool (Kafka's Uuid avoids it too)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fmt = reg.spawn(
        f"{name}-format",
        kafka.tool_cmd("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
        d / "logs" / "format.log",
    )
    if fmt.wait() != 0:
        reg.forget(fmt)
        raise RuntimeError(f"formatting {name} failed: {_tail(d / 'logs' / 'format.log')}")
    reg.forget(fmt)
    log = d / "logs" / "stdout.log"
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
    cmd = [
        kafka.java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        MARK,
        *JVM_PERF_OPTS,
        *jmx_opts,
        f"-Dlog4j2.configurationFile={kafka.log4j2_server}",
        f"-Dkafka.logs.dir={d / 'logs'}",
        "-cp",
        kafka.cp4(),
        "kafka.Kafka",
        str(props),
    ]
    proc = reg.spawn(name, cmd, log)
    deadline = time.monotonic() + timeout
    started = False
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            reg.forget(proc)
            raise RuntimeError(f"broker {name} exited with {proc.returncode}: {_tail(log)}")
        if not started:
            started = "Kafka Server started" in log.read_text(errors="replace")
        if started and tcp_open(port) and (wan_port is None or tcp_open(wan_port)):
            return Cluster(name, port, cport, d, proc, wan_port, wan_proxy_port, jmx_port)
        time.sleep(0.1)
    reg.stop(proc, timeout=5)
    raise RuntimeError(f"broker {name} not ready after {timeout:.0f} s: {_tail(log)}")


def discard(reg: Registry, cluster: Cluster) -> None:
    """Kills a cluster whose data is thrown away (SIGKILL: a clean shutdown would only cost time) and deletes it."""
    import signal

    reg.stop(cluster.proc, timeout=10, sig=signal.SIGKILL)
    shutil.rmtree(cluster.dir, ignore_errors=True)


def stop(reg: Registry, cluster: Cluster) -> None:
    """Clean shutdown (SIGTERM; Kafka's shutdown hook)."""
    reg.stop(cluster.proc, timeout=60)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no log {path})"
