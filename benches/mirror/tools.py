"""The Java programs the harness drives: the bench's own helpers (java/*.java, compiled once per bench run with javac
against the Kafka 4.x client jars) and Kafka's ProducerPerformance / ConsumerPerformance.

Why Java helpers rather than a Python Kafka client: they use the same kafka-clients as the brokers and tools, decode
lz4/zstd without native Python packages (kafka-python needs the C `lz4`/`zstandard` wheels for that), and a watcher
JVM started before the mirror polls end offsets every 20 ms at no JVM-start cost (GetOffsetShell would be a new JVM,
~1 s, per poll).
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import time
from pathlib import Path

from cluster import Kafka
from procs import Registry, line_reader

JAVA_DIR = Path(__file__).resolve().parent / "java"


class ToolError(RuntimeError):
    pass


class Tools:
    def __init__(self, reg: Registry, kafka: Kafka, work: Path, logs: Path) -> None:
        self.reg = reg
        self.kafka = kafka
        self.work = work
        self.classes = work / "classes"
        self.logs = logs

    def compile(self) -> None:
        """javac the helpers once (source-file mode would recompile on every launch)."""
        self.classes.mkdir(parents=True, exist_ok=True)
        javac = str(Path(self.kafka.java).with_name("javac")) if "/" in self.kafka.java else "javac"
        sources = sorted(str(p) for p in JAVA_DIR.glob("*.java"))
        r = subprocess.run(
            [javac, "-nowarn", "-d", str(self.classes), "-cp", self.kafka.cp4(), *sources],
            check=False,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise ToolError(f"javac failed:\n{r.stderr}")

    def _run(self, name: str, main: str, *args: str, heap: str = "512m", timeout: float = 600) -> str:
        """Runs a tool to completion; returns its stdout; raises ToolError with the log tail on failure."""
        log = self.logs / f"{name}.log"
        proc = self.reg.spawn(
            name, self.kafka.tool_cmd(main, *args, heap=heap, classes=self.classes), log, stdout_pipe=True
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.reg.stop(proc, timeout=5)
            raise ToolError(f"{name} timed out after {timeout:.0f} s: see {log}") from None
        self.reg.forget(proc)
        if proc.returncode != 0:
            raise ToolError(f"{name} exited with {proc.returncode}: {tail(log)}")
        return out

    # --- bench helpers -------------------------------------------------------------------------------------------

    def create_topics(self, bootstrap: str, partitions: int, *topics: str) -> None:
        self._run("admin-create", "BenchAdmin", bootstrap, "create", str(partitions), *topics, timeout=120)

    def offsets(self, bootstrap: str, *topics: str) -> dict:
        """{topic: {"partitions": [end offsets], "bytes": on-disk size}}."""
        out = self._run("admin-offsets", "BenchAdmin", bootstrap, "offsets", *topics, timeout=120)
        return json.loads(out.strip().splitlines()[-1])

    def digest(self, bootstrap: str, topic: str, isolation: str | None = None) -> dict:
        """See java/RecordDigest.java; isolation "read_committed" for the target of an exactly-once mirror."""
        extra = [isolation] if isolation else []
        out = self._run(f"digest-{topic}", "RecordDigest", bootstrap, topic, *extra, heap="1g", timeout=1800)
        return json.loads(out.strip().splitlines()[-1])

    def start_watch(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        per_partition: bool,
        expected: list[int],
        interval_ms: int,
        committed: bool = False,
    ) -> Watch:
        """committed: count records read_committed per partition instead of end offsets (exactly-once mirrors)."""
        cmd = self.kafka.tool_cmd(
            "OffsetWatch",
            bootstrap,
            topic,
            "committed" if committed else "partition" if per_partition else "total",
            ",".join(map(str, expected)),
            str(interval_ms),
            heap="128m",
            classes=self.classes,
        )
        proc = self.reg.spawn(name, cmd, self.logs / f"{name}.log", stdout_pipe=True)
        return Watch(self.reg, proc, self.logs / f"{name}.log")

    def start_latency_probe(
        self,
        name: str,
        produce: str,
        consume: str,
        topic: str,
        rate: int,
        size: int,
        payload: Path,
        warmup_s: float,
        measure_s: float,
        compression: str,
        linger_ms: int,
        batch_size: int,
        isolation: str | None = None,
    ) -> Watch:
        cmd = self.kafka.tool_cmd(
            "LatencyProbe",
            produce,
            consume,
            topic,
            str(rate),
            str(size),
            str(payload),
            str(warmup_s),
            str(measure_s),
            compression,
            str(linger_ms),
            str(batch_size),
            *([isolation] if isolation else []),
            heap="512m",
            classes=self.classes,
        )
        proc = self.reg.spawn(name, cmd, self.logs / f"{name}.log", stdout_pipe=True)
        return Watch(self.reg, proc, self.logs / f"{name}.log")

    # --- Kafka's perf tools --------------------------------------------------------------------------------------

    def _command_config(self) -> list[str]:
        """The clusters' client settings (mTLS) for Kafka's perf tools; the bench's own helpers get them as
        -Dbench.client.config (Kafka.tool_cmd)."""
        return ["--command-config", str(self.kafka.client_config)] if self.kafka.client_config else []

    def producer_perf(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        records: int,
        payload: Path,
        compression: str,
        linger_ms: int,
        batch_size: int,
    ) -> dict:
        """Kafka's ProducerPerformance, unthrottled; returns {"records_s", "mb_s", "elapsed_s"}."""
        start = time.monotonic()
        out = self._run(
            name,
            "org.apache.kafka.tools.ProducerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--payload-file",
            str(payload),
            "--throughput",
            "-1",
            *self._command_config(),
            "--command-property",
            "acks=all",
            f"compression.type={compression}",
            f"linger.ms={linger_ms}",
            f"batch.size={batch_size}",
            "client.id=strait-bench-perf",
            heap="1g",
            timeout=3600,
        )
        # progress lines also say "records sent"; the summary of the whole run is the one with percentiles
        finals = [ln for ln in out.splitlines() if "records sent" in ln and "50th" in ln]
        if not finals:
            raise ToolError(f"{name}: no summary line in ProducerPerformance output:\n{out[-2000:]}")
        m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", finals[-1])
        if not m:
            raise ToolError(f"{name}: cannot parse {finals!r}")
        return {
            "records": int(m.group(1)),
            "records_s": float(m.group(2)),
            "mb_s": float(m.group(3)),
            "elapsed_s": time.monotonic() - start,
        }

    def consumer_perf(self, name: str, bootstrap: str, topic: str, records: int, group: str) -> dict:
        """Kafka's ConsumerPerformance; returns fetch-phase rates (group join excluded) and the overall ones."""
        out = self._run(
            name,
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--group",
            group,
            "--timeout",
            "60000",
            *self._command_config(),
            heap="1g",
            timeout=3600,
        )
        lines = [ln for ln in out.splitlines() if ln.strip()]
        header_idx = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
        if header_idx is None or header_idx + 1 >= len(lines):
            raise ToolError(f"{name}: no CSV in ConsumerPerformance output:\n{out[-2000:]}")
        keys = [k.strip() for k in lines[header_idx].split(",")]
        vals = [v.strip() for v in lines[header_idx + 1].split(",")]
        row = dict(zip(keys, vals))
        return {
            "records": int(float(row["data.consumed.in.nMsg"])),
            "mb_s": float(row["fetch.MB.sec"]),
            "records_s": float(row["fetch.nMsg.sec"]),
            "mb_s_overall": float(row["MB.sec"]),
            "rebalance_ms": float(row["rebalance.time.ms"]),
        }


class Watch:
    """A long-lived helper JVM whose stdout lines arrive on `events` (None at EOF)."""

    def __init__(self, reg: Registry, proc: subprocess.Popen, log: Path) -> None:
        self.reg = reg
        self.proc = proc
        self.log = log
        self.events: queue.Queue[str | None] = queue.Queue()
        line_reader(proc, self.events.put)

    def wait_for(self, prefix: str, timeout: float) -> list[str]:
        """Blocks until a line starting with `prefix`; returns it split; raises ToolError on EOF/timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise ToolError(f"no '{prefix}' from {self.log.name} after {timeout:.0f} s: {tail(self.log)}") from None
            if line is None:
                raise ToolError(f"{self.log.name} exited before '{prefix}': {tail(self.log)}")
            if line.startswith(prefix):
                return line.split()

    def stop(self) -> None:
        self.reg.stop(self.proc, timeout=5)


def tail(path: Path, lines: int = 8, width: int = 400) -> str:
    """The last lines of a log, squeezed onto one line for a report cell: whole lines, newest last, <= width chars."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"(no log {path})"
    text = [ln.strip() for ln in text if ln.strip() and not ln.startswith("# ")]
    # a failing program's warnings say more than its last INFO lines
    problems = [ln for ln in text if re.search(r"\b(ERROR|WARN|FATAL|Exception|error)\b", ln)]
    keep: list[str] = []
    size = 0
    for ln in reversed((problems or text)[-lines:]):
        if keep and size + len(ln) + 3 > width:
            break
        keep.insert(0, ln if len(ln) <= width else ln[: width - 1] + "…")
        size += len(keep[0]) + 3
    return " | ".join(keep)
