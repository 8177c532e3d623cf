"""The mirrors under test and how each one is configured and started.

Each contender gets, per run: the source and (fresh) target bootstrap, ONE topic to mirror (named exactly, so a run
measures one dataset), a group id nobody used before, and the producer settings of the dataset (compression, linger,
batch size) for the mirrors that re-produce records (MM1, MM2) so that their output batches compare with what Strait
forwards. `MirrorMaker 1` re-partitions records (its producer gets partition = null), so the bench creates its target
topic with the source's partition count beforehand and verifies it per topic, not per partition.
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cluster import JVM_PERF_OPTS, MARK, Kafka, Pki, free_port


@dataclass
class RunSpec:
    """What one mirror run needs to know."""

    run_id: str  # unique per run, e.g. "t07": group ids, client ids
    dir: Path  # config files and logs of this run
    source: str  # bootstrap
    target: str
    topic: str
    compression: str  # the dataset's: MM1/MM2 producers re-compress with it
    linger_ms: int
    batch_size: int
    # failover phase: name target topics "<source alias>.<topic>" (Strait rename = "prefix", MM2's default
    # replication policy) instead of keeping the name, and extra settings: Strait TOML lines inside [mirror],
    # MM2 properties (a key already in the file gets the new value in place, others are appended)
    prefix_topics: bool = False
    strait_mirror_extra: str = ""
    mm2_overrides: dict[str, str] | None = None
    # 3-broker clusters (--brokers 3): replication factor of the topics and internal topics MM2 creates (Strait takes
    # the source topic's, MM1's target topic is created by the bench with the cluster's default)
    replication_factor: int = 1
    # mTLS clusters (--tls): the client certificate and CA every mirror gets for both clusters (None = PLAINTEXT)
    pki: Pki | None = None


@dataclass
class Contender:
    """A mirror implementation; `command` writes its config files into spec.dir and returns its command line."""

    name: str  # short, used in file names and CSV: strait, mm2, mm1
    label: str  # human name for the report
    keeps_partitions: bool  # record p of the source lands in partition p of the target
    # writes the target in transactions (exactly-once): the target holds transaction markers, so completion and
    # verification count records read_committed instead of comparing end offsets
    transactional: bool = False

    def unavailable(self) -> str | None:
        """Why this contender cannot run at all (missing binary...), or None."""
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str] | None]:
        raise NotImplementedError

    def settings(self) -> str:
        """One line for the report: how it is run."""
        raise NotImplementedError


def strait_security(spec: RunSpec) -> str:
    """Lines of Strait's [source] / [target] for an mTLS cluster (examples/strait.toml), else nothing."""
    if spec.pki is None:
        return ""
    return "".join(f'"{k}" = "{v}"\n' for k, v in spec.pki.strait_client().items())


def java_security(spec: RunSpec) -> str:
    """Lines of a Java client's properties file (MM1) for an mTLS cluster, else nothing."""
    if spec.pki is None:
        return ""
    return "".join(f"{k}={v}\n" for k, v in spec.pki.java_client().items())


class Strait(Contender):
    def __init__(
        self,
        binary: Path,
        build_error: str | None,
        name: str = "strait",
        label: str = "Strait",
        exactly_once: bool = False,
        mirror_extra: str = "",
    ) -> None:
        super().__init__(name, label, True, transactional=exactly_once)
        self.binary = binary
        self.build_error = build_error
        self.exactly_once = exactly_once
        # Extra `[mirror]` lines of this contender only (a configuration A/B: `--strait-b-mirror`).
        self.mirror_extra = mirror_extra

    def unavailable(self) -> str | None:
        if self.build_error:
            return self.build_error
        if not self.binary.is_file() or not os.access(self.binary, os.X_OK):
            return f"binary {self.binary} missing (build: cargo build --release -p strait)"
        return None

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str] | None]:
        toml = spec.dir / "strait.toml"
        toml.write_text(
            f"""[source]
alias = "src"
"bootstrap.servers" = "{spec.source}"
{strait_security(spec)}
[target]
alias = "dst"
"bootstrap.servers" = "{spec.target}"
{strait_security(spec)}
[mirror]
topics = ["{spec.topic}"]
group_id = "strait-bench-{spec.run_id}"
start = "earliest"
rename = "{'prefix' if spec.prefix_topics else 'identity'}"
{STRAIT_EOS if self.exactly_once else ""}{spec.strait_mirror_extra}{self.mirror_extra}
[metrics]
listen = "127.0.0.1:{self.metrics_port(spec)}"
"""
        )
        return [str(self.binary), "run", "--config", str(toml)], None

    @staticmethod
    def metrics_port(spec: RunSpec) -> int:
        """A free port for Strait's /metrics, remembered in the run dir so the bench can scrape it."""
        f = spec.dir / "metrics-port"
        if not f.exists():
            f.write_text(str(free_port()))
        return int(f.read_text())

    @staticmethod
    def scrape(run_dir: Path) -> None:
        """Saves Strait's Prometheus metrics (time inside the mirror, batches, bytes) into the run dir."""
        f = run_dir / "metrics-port"
        if not f.exists():
            return
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{f.read_text()}/metrics", timeout=5) as r:
                (run_dir / "metrics.txt").write_bytes(r.read())
        except OSError as e:
            (run_dir / "metrics.txt").write_text(f"# scrape failed: {e}\n")

    def settings(self) -> str:
        return (
            f"`{self.binary} run --config strait.toml` (topics = [the dataset topic], start = earliest, rename = identity"
            + ("; `exactly_once = true`, transaction_interval and isolation at their defaults (300ms, read_committed)"
               if self.exactly_once else "")
            + (f"; `{self.mirror_extra.strip()}`" if self.mirror_extra else "")
            + ")"
        )


# Strait's exactly-once mode (docs/exactly-once.md): transaction_interval (300ms) and isolation (read_committed) stay
# at their defaults. The bench's "straiteos" contender.
STRAIT_EOS = "exactly_once = true\n"


# MM2 with exactly-once (KIP-618 source connectors on the target's Connect worker, Kafka 3.5+ dedicated mode): the
# worker writes records and source offsets in one transaction per batch, and fences zombie tasks through the internal
# REST server (KIP-710), which dedicated mode only starts when asked to. The source consumer reads committed records
# only, as Kafka's geo-replication docs recommend. The bench's "mm2eos" contender; the counterpart of Strait's
# `mirror.exactly_once = true`.
MM2_EOS = {
    "dst.exactly.once.source.support": "enabled",
    "src.consumer.isolation.level": "read_committed",
    "dedicated.mode.enable.internal.rest": "true",
}


class MirrorMaker2(Contender):
    def __init__(self, kafka: Kafka, heap: str, tasks: int, eos: bool = False, compression: str | None = None) -> None:
        name = "mm2eos" if eos else "mm2zstd" if compression == "zstd" else "mm2"
        label = f"MM2 {'exactly-once ' if eos else ''}(tasks.max={tasks}" + (
            f", compression.type={compression})" if compression else ")"
        )
        super().__init__(name, label, True, eos)
        self.kafka = kafka
        self.heap = heap
        self.tasks = tasks
        self.eos = eos
        # The codec of MM2's producer whatever the dataset's (None: the dataset's, like the other mirrors); MM2
        # re-compresses every batch it writes, so this is its `mirror.compression` (issue 33 item 4, bytes on the link).
        self.compression = compression

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str] | None]:
        props = spec.dir / "mm2.properties"
        text = (
            f"""# MM2 dedicated mode, written by benches/mirror
clusters = src, dst
src.bootstrap.servers = {spec.source}
dst.bootstrap.servers = {spec.target}
src->dst.enabled = true
src->dst.topics = {spec.topic}
dst->src.enabled = false
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = {self.tasks}
replication.factor = {spec.replication_factor}
checkpoints.topic.replication.factor = {spec.replication_factor}
heartbeats.topic.replication.factor = {spec.replication_factor}
offset-syncs.topic.replication.factor = {spec.replication_factor}
offset.storage.replication.factor = {spec.replication_factor}
status.storage.replication.factor = {spec.replication_factor}
config.storage.replication.factor = {spec.replication_factor}
# keep the source read-only for every contender: offset syncs go to the target
offset-syncs.topic.location = target
refresh.topics.interval.seconds = 5
refresh.groups.interval.seconds = 5
emit.checkpoints.interval.seconds = 5
sync.group.offsets.enabled = false
sync.topic.configs.enabled = true
sync.topic.acls.enabled = false
emit.heartbeats.enabled = true
# Connect's own advice at startup ("All plugins have ServiceLoader manifests"): skips a reflective classpath scan
# (~10 s on 2 cores). The top-level key covers MirrorMaker's own plugin loading, the dst. one the herder's worker.
plugin.discovery = service_load
dst.plugin.discovery = service_load
# producer like the dataset's (MM2 re-compresses every record batch it writes)
dst.producer.compression.type = {self.compression or spec.compression}
dst.producer.linger.ms = {spec.linger_ms}
dst.producer.batch.size = {spec.batch_size}
"""
        )
        if spec.pki is not None:  # mTLS: every client of each cluster (consumer, producer, admin, Connect worker)
            text += "# mTLS on both clusters\n" + "".join(
                f"{alias}.{k} = {v}\n" for alias in ("src", "dst") for k, v in spec.pki.java_client().items()
            )
        if spec.prefix_topics:  # MM2's default policy: "<source alias>.<topic>" on the target
            text = text.replace(
                "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n", ""
            )
        overrides = dict(spec.mm2_overrides or {})
        if self.eos:
            # the internal REST server needs a listener of its own (a free port per run)
            overrides = {**MM2_EOS, "listeners": f"http://127.0.0.1:{free_port()}", **overrides}
        for key, value in overrides.items():
            line = f"{key} = {value}"
            lines = text.splitlines()
            at = [i for i, ln in enumerate(lines) if ln.split("=", 1)[0].strip() == key]
            if at:
                lines[at[0]] = line
                text = "\n".join(lines) + "\n"
            else:
                text += line + "\n"
        props.write_text(text)
        cmd = [
            self.kafka.java,
            f"-Xmx{self.heap}",
            MARK,
            *JVM_PERF_OPTS,
            f"-Dlog4j2.configurationFile={self.kafka.log4j2_server}",
            f"-Dkafka.logs.dir={spec.dir}",
            "-cp",
            self.kafka.cp4(),
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(props),
            "--clusters",
            "dst",
        ]
        return cmd, None

    def settings(self) -> str:
        return (
            f"Kafka {self.kafka.lib4.parent.name.removeprefix('kafka-')} `org.apache.kafka.connect.mirror.MirrorMaker "
            f"mm2.properties --clusters dst`, IdentityReplicationPolicy, tasks.max={self.tasks}, replication.factor and internal RFs = the clusters' RF, "
            f"refresh intervals 5 s, offset-syncs on the target, plugin.discovery=service_load, -Xmx{self.heap}"
            + (f"; `dst.producer.compression.type = {self.compression}`" if self.compression else "")
            + (
                "; exactly-once: " + ", ".join(f"`{k} = {v}`" for k, v in MM2_EOS.items()) + ", `listeners` on a free port"
                if self.eos
                else ""
            )
        )


class MirrorMaker1(Contender):
    def __init__(self, kafka: Kafka, heap: str, streams: int) -> None:
        super().__init__("mm1", f"MM1 (num.streams={streams})", False)
        self.kafka = kafka
        self.heap = heap
        self.streams = streams

    def command(self, spec: RunSpec) -> tuple[list[str], dict[str, str] | None]:
        consumer = spec.dir / "mm1-consumer.properties"
        consumer.write_text(
            f"""bootstrap.servers={spec.source}
group.id=mm1-bench-{spec.run_id}
# MM1 does not set it; the consumer default (latest) would skip the preloaded data
auto.offset.reset=earliest
{java_security(spec)}"""
        )
        producer = spec.dir / "mm1-producer.properties"
        producer.write_text(
            f"""bootstrap.servers={spec.target}
compression.type={spec.compression}
linger.ms={spec.linger_ms}
batch.size={spec.batch_size}
{java_security(spec)}"""
        )
        cmd = [
            self.kafka.java,
            f"-Xmx{self.heap}",
            MARK,
            *JVM_PERF_OPTS,
            f"-Dlog4j.configuration=file:{self.kafka.log4j1_server}",
            f"-Dkafka.logs.dir={spec.dir}",
            "-cp",
            f"{self.kafka.lib39}/*",
            "kafka.tools.MirrorMaker",
            "--consumer.config",
            str(consumer),
            "--producer.config",
            str(producer),
            "--include",
            spec.topic,
            "--num.streams",
            str(self.streams),
        ]
        return cmd, None

    def settings(self) -> str:
        return (
            f"Kafka {self.kafka.lib39.parent.name.removeprefix('kafka-')} `kafka.tools.MirrorMaker --include <topic> "
            f"--num.streams {self.streams}`, auto.offset.reset=earliest, MM1's producer defaults (acks=all, "
            f"max.in.flight=1), -Xmx{self.heap}; target topic pre-created with the source's partition count"
        )
