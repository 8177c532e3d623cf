#!/usr/bin/env python3
"""Side-by-side mirror benchmark: Strait vs MirrorMaker 2 vs MirrorMaker 1 on the same data and the same machine.

One run of this script:
  1. starts a source cluster (single-node KRaft, Kafka 4.x jars) and preloads one topic per dataset with Kafka's
     ProducerPerformance (record size x compression, 12 partitions), then reads each back once (RecordDigest);
  2. measures what the brokers allow on that data: ProducerPerformance into a target, ConsumerPerformance from the
     source;
  3. for every repetition x dataset x contender (order rotated so no contender always runs first or last): starts a
     FRESH target cluster, starts the mirror, times it until the target end offsets equal the source's (first record
     and completion seen by an offset watcher polling every 20 ms), samples its CPU and peak RSS from /proc, stops it,
     and verifies the target holds exactly the source records (count, order per partition, content hash);
  4. fixed-rate latency phase: 10,000 records/s of 1 KiB lz4 through each mirror, send-to-arrival percentiles, beside
     the same measured on the source cluster alone;
  5. writes bench-results/<date>/ (results.md, results.csv, chart.png, logs/) and prints the Markdown.

Normally started by scripts/bench.sh (venv, matplotlib, Kafka jars, release build of strait); see benches/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import cluster
import datasets as dsets
import report
import verdict
from contenders import Contender, MirrorMaker1, MirrorMaker2, RunSpec, Strait
from procs import Registry, Sampler, cpu_seconds, load_average, machine_busy_seconds, start_hogs, stop_hogs
from tools import ToolError, Tools, tail

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MB = float(1 << 20)
GB = float(1 << 30)


def env(name: str, default):
    v = os.environ.get(f"STRAIT_BENCH_{name}")
    return default if v is None or v == "" else type(default)(v) if default is not None else v


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every option also reads STRAIT_BENCH_<NAME> from the environment (e.g. STRAIT_BENCH_REPS=3).",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        default=env("QUICK", "") not in ("", "0"),
        help="1 dataset (1k-lz4), 200k records, 1 repetition, 15 s latency phase",
    )
    p.add_argument("--reps", type=int, default=env("REPS", 0), help="repetitions of every mirror run (default 2)")
    p.add_argument(
        "--datasets", default=env("DATASETS", ""), help=f"comma-separated, from {','.join(dsets.ALL)} (default: all)"
    )
    p.add_argument("--records-1k", type=int, default=env("RECORDS_1K", 0), help="records per 1 KiB dataset (1,000,000)")
    p.add_argument(
        "--records-100", type=int, default=env("RECORDS_100", 0), help="records per 100 B dataset (5,000,000)"
    )
    p.add_argument("--partitions", type=int, default=env("PARTITIONS", 12))
    p.add_argument(
        "--contenders",
        default=env("CONTENDERS", "strait,mm2,mm1"),
        help="subset/order of strait,mm2,mm1; mm2@N / mm1@N add a variant with tasks.max / num.streams = N "
        "(e.g. mm2@1,mm2@2,mm2@4); exactly-once: straiteos (Strait, mirror.exactly_once = true), mm2eos (MM2, "
        "exactly.once.source.support = enabled), e.g. --contenders strait,straiteos,mm2eos,mm2; straitb / straitc: "
        "Strait with --strait-b-mirror / --strait-c-mirror lines; mm2zstd: MM2 whose producer writes zstd "
        "(dst.producer.compression.type = zstd) whatever the dataset's codec",
    )
    p.add_argument(
        "--producer-linger-ms",
        type=int,
        default=env("LINGER_MS", 10),
        help="linger.ms of the preloading producer (and of MM1/MM2's producers)",
    )
    p.add_argument(
        "--producer-batch-size",
        type=int,
        default=env("BATCH_SIZE", 65536),
        help="batch.size of the preloading producer (and of MM1/MM2's producers)",
    )
    p.add_argument(
        "--mirror-linger-ms",
        type=int,
        default=env("MIRROR_LINGER_MS", -1),
        help="linger.ms of MM1/MM2's producers when it should differ from the preload's (-1: --producer-linger-ms)",
    )
    p.add_argument(
        "--mirror-batch-size",
        type=int,
        default=env("MIRROR_BATCH_SIZE", -1),
        help="batch.size of MM1/MM2's producers when it should differ from the preload's (a small-batch source: "
        "--producer-batch-size 2048 --mirror-batch-size 65536; -1: --producer-batch-size)",
    )
    p.add_argument("--mm2-tasks", type=int, default=env("MM2_TASKS", 2))
    p.add_argument("--mm1-streams", type=int, default=env("MM1_STREAMS", 2))
    p.add_argument(
        "--mirror-heap",
        default=env("MIRROR_HEAP", "1g"),
        help="-Xmx of the MM1/MM2 JVMs (brokers: -Xms = -Xmx, as kafka-server-start.sh)",
    )
    p.add_argument("--broker-heap", default=env("BROKER_HEAP", "1g"))
    p.add_argument("--latency-rate", type=int, default=env("LATENCY_RATE", 10_000), help="records/s (0 = skip phase)")
    p.add_argument("--latency-seconds", type=float, default=env("LATENCY_SECONDS", 0.0), help="measured window (60)")
    p.add_argument("--latency-warmup", type=float, default=env("LATENCY_WARMUP", 0.0), help="warm-up at rate (10)")
    p.add_argument("--latency-reps", type=int, default=env("LATENCY_REPS", 1))
    p.add_argument("--latency-linger-ms", type=int, default=env("LATENCY_LINGER_MS", 5))
    p.add_argument(
        "--busy",
        action="store_true",
        default=env("BUSY", "") not in ("", "0"),
        help="run the latency phase a second time on a busy machine: --hogs busy loops (one pinned per core, nice 0) "
        "run during every latency run of that pass, the baseline's included",
    )
    p.add_argument(
        "--hogs", type=int, default=env("HOGS", 0), help="busy-loop processes of --busy (default: one per core)"
    )
    p.add_argument(
        "--latency-target-warmup",
        type=int,
        default=env("LATENCY_TARGET_WARMUP", 200_000),
        help="records written to and read back from each fresh target cluster before a latency run, so its JIT is "
        "as warm as the source's (0 = off)",
    )
    p.add_argument("--no-limits", action="store_true", help="skip the broker-limit phase")
    p.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=env("BROKERS", 1),
        help="nodes per cluster (source and every target): 3 = combined KRaft nodes, RF 3 and min ISR 2 for the data "
        "and internal topics (throughput and latency phases)",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        default=env("TLS", "") not in ("", "0"),
        help="mTLS on both clusters: SSL listener with ssl.client.auth=required, a CA and client certificate made by "
        "openssl; every tool and mirror connects with the client certificate (throughput and latency phases)",
    )
    w = p.add_argument_group("WAN shapes (--wan: only these run; see benches/mirror/wan.py)")
    w.add_argument(
        "--wan",
        action="store_true",
        default=env("WAN", "") not in ("", "0"),
        help="run the WAN shapes instead of the loopback bench: each mirror over a delay proxy",
    )
    w.add_argument("--wan-rtts", default=env("WAN_RTTS", "50,100"), help="round-trip times in ms")
    w.add_argument(
        "--wan-placements",
        default=env("WAN_PLACEMENTS", ""),
        help="near-source (proxy between mirror and target), near-target (proxy between source and mirror); "
        "default both (--quick: near-source)",
    )
    w.add_argument("--wan-rates", default=env("WAN_RATES", "3000,30000"), help="steady source rates, records/s")
    w.add_argument("--wan-seconds", type=float, default=env("WAN_SECONDS", 0.0), help="per steady rate (60; quick 15)")
    w.add_argument(
        "--wan-backlog", type=int, default=env("WAN_BACKLOG", 0), help="records preloaded (300,000; quick 60,000)"
    )
    w.add_argument("--wan-backlog-rate", type=int, default=env("WAN_BACKLOG_RATE", 30_000))
    w.add_argument(
        "--wan-catchup-cap", type=float, default=env("WAN_CATCHUP_CAP", 0.0), help="s of catch-up (180; quick 40)"
    )
    w.add_argument(
        "--wan-drain-cap", type=float, default=env("WAN_DRAIN_CAP", 0.0), help="s to drain a phase (60; quick 15)"
    )
    w.add_argument("--wan-record-size", type=int, default=env("WAN_RECORD_SIZE", 100), choices=(100, 1024))
    w.add_argument("--wan-compression", default=env("WAN_COMPRESSION", "none"))
    w.add_argument(
        "--wan-bandwidth-mbit",
        type=int,
        default=env("WAN_BANDWIDTH_MBIT", 0),
        help="bandwidth cap of the link per direction, Mbit/s (0 = none): with a large backlog of 1 KiB records the "
        "link, not the RTT, is the limit; the report gives the share of the cap each mirror used while catching up",
    )
    w.add_argument("--wan-no-referee", action="store_true", help="skip the Java-producer-over-the-link referee")
    w.add_argument(
        "--delay-proxy-bin",
        default=env("DELAY_PROXY_BIN", ""),
        help="default: $CARGO_TARGET_DIR or <repo>/target, /release/strait-delay-proxy",
    )
    f = p.add_argument_group("Consumer-group failover (--failover: only this runs; see benches/mirror/failover.py)")
    f.add_argument(
        "--failover",
        action="store_true",
        default=env("FAILOVER", "") not in ("", "0"),
        help="run the failover phase instead of the loopback bench: a consumer group fails over through MM2 and "
        "through Strait (checkpoints + group offset sync); duplicates, losses and sync delay",
    )
    f.add_argument(
        "--failover-records", type=int, default=env("FAILOVER_RECORDS", 0), help="records (600,000; quick 120,000)"
    )
    f.add_argument("--failover-value-bytes", type=int, default=env("FAILOVER_VALUE_BYTES", 100))
    f.add_argument("--failover-compression", default=env("FAILOVER_COMPRESSION", "lz4"))
    f.add_argument(
        "--failover-interval",
        type=int,
        default=env("FAILOVER_INTERVAL", 5),
        help="s, both mirrors: checkpoint interval and group-offset-sync interval",
    )
    f.add_argument(
        "--failover-settle",
        type=float,
        default=env("FAILOVER_SETTLE", 12.0),
        help="s without a change of the target group's offsets before the next step",
    )
    f.add_argument(
        "--failover-wait",
        type=float,
        default=env("FAILOVER_WAIT", 180.0),
        help="s to wait for translated offsets on the target before going on without them",
    )
    s = p.add_argument_group("Scale shapes (--scale: only these run; see benches/mirror/scale.py)")
    s.add_argument(
        "--scale",
        action="store_true",
        default=env("SCALE", "") not in ("", "0"),
        help="run the scale shapes instead of the loopback bench: thousands of partitions, many idle and few busy",
    )
    s.add_argument(
        "--scale-shapes",
        default=env("SCALE_SHAPES", ""),
        help="parts-<T>x<P> / idle-<T>x<P>, comma-separated (default parts-2x6,parts-125x8,parts-500x8,"
        "idle-500x8; quick: parts-2x6,parts-100x8,idle-100x8)",
    )
    s.add_argument(
        "--scale-records", type=int, default=env("SCALE_RECORDS", 0), help="records per busy partition (quick 100)"
    )
    s.add_argument("--scale-busy", type=int, default=env("SCALE_BUSY", 2), help="busy topics of the idle- shapes")
    s.add_argument("--scale-reps", type=int, default=env("SCALE_REPS", 1))
    s.add_argument("--scale-watch-ms", type=int, default=env("SCALE_WATCH_MS", 100))
    s.add_argument(
        "--scale-targets",
        default=env("SCALE_TARGETS", "new"),
        help="new (the mirror creates the target topics), precreated (the bench creates them, with leaders, before "
        "the mirror starts), or both: new,precreated; separates what creating the logs costs the target broker",
    )
    s.add_argument(
        "--scale-referee",
        action="store_true",
        default=env("SCALE_REFEREE", "") not in ("", "0"),
        help="per shape and --scale-targets entry, a Java producer writing one record to each target partition on a "
        "fresh target (java/ScaleData.java referee): the broker's own pace",
    )
    k = p.add_argument_group("Kill sequence (--kills: only this runs; see benches/mirror/kills.py)")
    k.add_argument(
        "--kills",
        action="store_true",
        default=env("KILLS", "") not in ("", "0"),
        help="run the kill phase instead of the loopback bench: a steady load while each mirror is SIGKILLed at the "
        "same instants; missing and duplicate records after (default contenders strait,straiteos,mm2eos)",
    )
    k.add_argument("--kills-rate", type=int, default=env("KILLS_RATE", 3000), help="records/s of the steady load")
    k.add_argument(
        "--kills-seconds", type=float, default=env("KILLS_SECONDS", 0.0), help="s of production (120; quick 60)"
    )
    k.add_argument("--kills-every", type=float, default=env("KILLS_EVERY", 10.0), help="s between SIGKILLs")
    k.add_argument("--kills-value-bytes", type=int, default=env("KILLS_VALUE_BYTES", 256))
    k.add_argument(
        "--kills-catchup",
        type=float,
        default=env("KILLS_CATCHUP", 420.0),
        help="s after the production to wait for every record on the target (MM2's worker may wait out "
        "scheduled.rebalance.max.delay.ms, 300 s, after a SIGKILL)",
    )
    r = p.add_argument_group("Rebalance (--rebalance: only this runs; see benches/mirror/rebalance.py)")
    r.add_argument(
        "--rebalance",
        action="store_true",
        default=env("REBALANCE", "") not in ("", "0"),
        help="run the rebalance phase instead of the loopback bench: 3 Strait instances share a group, a 4th joins, "
        "one restarts, one leaves, one is SIGKILLed; per partition the longest pause on the target, per protocol",
    )
    r.add_argument(
        "--rebalance-protocols",
        default=env("REBALANCE_PROTOCOLS", "consumer,cooperative,eager"),
        help="consumer (KIP-848, Kafka 4.x source), cooperative (classic + cooperative-sticky, Kafka 3.9 source), "
        "eager (classic, default assignors, Kafka 3.9 source)",
    )
    r.add_argument("--rebalance-partitions", type=int, default=env("REBALANCE_PARTITIONS", 1000))
    r.add_argument("--rebalance-rate", type=int, default=env("REBALANCE_RATE", 2000), help="records/s, all partitions")
    r.add_argument("--rebalance-value-bytes", type=int, default=env("REBALANCE_VALUE_BYTES", 100))
    r.add_argument(
        "--rebalance-warmup", type=float, default=env("REBALANCE_WARMUP", 20.0), help="s of steady load before the 1st event"
    )
    r.add_argument(
        "--rebalance-every", type=float, default=env("REBALANCE_EVERY", 20.0), help="s between events (at least)"
    )
    r.add_argument(
        "--rebalance-tail",
        type=float,
        default=env("REBALANCE_TAIL", 65.0),
        help="s of load after the SIGKILL (more than the 45 s session timeout)",
    )
    r.add_argument(
        "--rebalance-slack",
        type=float,
        default=env("REBALANCE_SLACK", 30.0),
        help="s of extra load the events may be delayed by, waiting for the previous rebalance to settle",
    )
    r.add_argument(
        "--rebalance-watch-ms", type=int, default=env("REBALANCE_WATCH_MS", 200), help="target end-offset listing interval"
    )
    r.add_argument(
        "--rebalance-catchup", type=float, default=env("REBALANCE_CATCHUP", 180.0), help="s to wait for every record"
    )
    r.add_argument(
        "--rebalance-target-delay-ms",
        type=float,
        default=env("REBALANCE_TARGET_DELAY_MS", 0.0),
        help="a slow target: a delay proxy (--delay-proxy-bin) between the instances and the target, this many ms "
        "each way (0 = none; the watcher lists the target directly)",
    )
    p.add_argument(
        "--skip-after-failure",
        action="store_true",
        help="stop running a contender after ANY failed run (default: only after one that never delivered a record)",
    )
    p.add_argument("--watch-interval-ms", type=int, default=env("WATCH_INTERVAL_MS", 20))
    p.add_argument(
        "--watch-committed",
        action="store_true",
        default=env("WATCH_COMMITTED", "") not in ("", "0"),
        help="every contender's run completes when a read_committed consumer has counted the source's records in "
        "every target partition (the exactly-once contenders always do): the same watcher, and the same CPU it "
        "takes from the machine, for every contender of an exactly-once comparison",
    )
    p.add_argument(
        "--first-timeout",
        type=float,
        default=env("FIRST_TIMEOUT", 180.0),
        help="fail a run whose first record is not on the target after this many s",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=env("STALL_TIMEOUT", 60.0),
        help="fail a run whose target stops growing for this many s",
    )
    p.add_argument("--run-timeout", type=float, default=env("RUN_TIMEOUT", 1800.0))
    p.add_argument(
        "--strait-bin",
        default=env("STRAIT_BIN", ""),
        help="default: $CARGO_TARGET_DIR or <repo>/target, /release/strait",
    )
    p.add_argument(
        "--strait-b",
        default=env("STRAIT_B", ""),
        help="a second Strait binary, contender 'straitb' (A/B of two builds in one run, alternating order)",
    )
    p.add_argument(
        "--strait-b-mirror",
        default=env("STRAIT_B_MIRROR", ""),
        help="extra [mirror] lines of contender 'straitb' (A/B of two configurations; without --strait-b it runs the "
        "same binary as 'strait'), e.g. 'max_in_flight = 1'",
    )
    p.add_argument(
        "--strait-c-mirror",
        default=env("STRAIT_C_MIRROR", ""),
        help="extra [mirror] lines of contender 'straitc' (a third configuration of the same binary as 'strait'), "
        "e.g. 'compression = \"zstd\"'",
    )
    p.add_argument("--kafka-lib4", default=env("KAFKA_LIB4", ""), help="lib dir of Kafka 4.x (scripts/kafka-jars.sh 4)")
    p.add_argument("--kafka-lib39", default=env("KAFKA_LIB39", ""), help="lib dir of Kafka 3.9 (kafka-jars.sh 3.9)")
    p.add_argument("--java", default=env("JAVA", ""), help="java binary (default: $JAVA_HOME/bin/java or java)")
    p.add_argument("--out", default=env("OUT", ""), help="results dir (default <repo>/bench-results/<date>)")
    p.add_argument("--work", default=env("WORK", ""), help="scratch dir (default <repo>/bench-results/tmp/<date>)")
    p.add_argument("--keep-work", action="store_true", help="keep broker data and logs of the scratch dir")
    p.add_argument(
        "--update-readme",
        choices=("auto", "yes", "no"),
        default=env("UPDATE_README", "auto"),
        help="write the summary into benches/README.md (auto = only for full runs)",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.datasets = a.datasets or "1k-lz4"
        a.records_1k = a.records_1k or 200_000
        a.records_100 = a.records_100 or 1_000_000
        a.reps = a.reps or 1
        a.latency_seconds = a.latency_seconds or 15.0
        a.latency_warmup = a.latency_warmup or 3.0
    if a.wan:
        a.wan_placements = a.wan_placements or ("near-source" if a.quick else "near-source,near-target")
        a.wan_seconds = a.wan_seconds or (15.0 if a.quick else 60.0)
        a.wan_backlog = a.wan_backlog or (60_000 if a.quick else 300_000)
        a.wan_catchup_cap = a.wan_catchup_cap or (40.0 if a.quick else 180.0)
        a.wan_drain_cap = a.wan_drain_cap or (15.0 if a.quick else 60.0)
        a.delay_proxy_bin = a.delay_proxy_bin or str(
            Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release" / "strait-delay-proxy"
        )
    if a.rebalance and a.rebalance_target_delay_ms > 0:
        a.delay_proxy_bin = a.delay_proxy_bin or str(
            Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release" / "strait-delay-proxy"
        )
    if a.failover:
        a.failover_records = a.failover_records or (120_000 if a.quick else 600_000)
        if a.wan:
            p.error("--failover and --wan are separate phases: run one at a time")
    if a.scale:
        a.scale_shapes = a.scale_shapes or (
            "parts-2x6,parts-100x8,idle-100x8" if a.quick else "parts-2x6,parts-125x8,parts-500x8,idle-500x8"
        )
        a.scale_records = a.scale_records or (100 if a.quick else 500)
        if a.wan or a.failover:
            p.error("--scale, --wan and --failover are separate phases: run one at a time")
    if a.kills:
        a.kills_seconds = a.kills_seconds or (60.0 if a.quick else 120.0)
        if a.contenders == "strait,mm2,mm1":
            a.contenders = "strait,straiteos,mm2eos"
        if a.wan or a.failover or a.scale:
            p.error("--kills, --scale, --wan and --failover are separate phases: run one at a time")
    if a.rebalance and (a.wan or a.failover or a.scale or a.kills):
        p.error("--rebalance, --kills, --scale, --wan and --failover are separate phases: run one at a time")
    if (a.brokers != 1 or a.tls) and (a.wan or a.failover or a.scale or a.kills or a.rebalance):
        p.error("--brokers and --tls apply to the throughput and latency phases only")
    a.datasets = a.datasets or ",".join(dsets.ALL)
    a.records_1k = a.records_1k or 1_000_000
    a.records_100 = a.records_100 or 5_000_000
    a.reps = a.reps or 2
    a.latency_seconds = a.latency_seconds or 60.0
    a.latency_warmup = a.latency_warmup or 10.0
    return a


class Bench:
    def __init__(self, args: argparse.Namespace, reg: Registry) -> None:
        self.args = args
        self.reg = reg
        self.t_start = time.monotonic()
        self.load_at_start = load_average()
        self.started_at = dt.datetime.now()
        stamp = self.started_at.strftime("%Y-%m-%d_%H%M%S")
        self.out = Path(args.out) if args.out else REPO / "bench-results" / stamp
        self.work = Path(args.work) if args.work else REPO / "bench-results" / "tmp" / stamp
        self.out.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.logs = self.out / "logs"
        self.logs.mkdir(exist_ok=True)
        self.logf = open(self.out / "bench.log", "a")  # noqa: SIM115 - open for the whole bench
        java = args.java or (
            str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME") else "java"
        )
        java = shutil.which(java) or java
        for name, val in (("--kafka-lib4", args.kafka_lib4), ("--kafka-lib39", args.kafka_lib39)):
            if not val or not Path(val).is_dir():
                raise SystemExit(f"{name} must name a Kafka lib dir (scripts/kafka-jars.sh prints it); got {val!r}")
        kdir = REPO / "kafka"
        self.kafka = cluster.Kafka(
            java=java,
            lib4=Path(args.kafka_lib4),
            lib39=Path(args.kafka_lib39),
            log4j2_server=kdir / "log4j2.properties",
            log4j2_tools=kdir / "tools-log4j2.properties",
            log4j1_server=kdir / "log4j.properties",
        )
        # --brokers / --tls: the same for the source and every target cluster
        self.topo = cluster.Topology(args.brokers, args.tls)
        self.pki = cluster.make_pki(self.work / "pki") if args.tls else None
        if self.pki is not None:
            self.kafka.client_config = self.pki.write_java_client()
        self.tools = Tools(reg, self.kafka, self.work, self.logs / "tools")
        sizes = {"1k": args.records_1k, "100": args.records_100}
        self.datasets = [dsets.parse(n.strip(), sizes) for n in args.datasets.split(",") if n.strip()]
        strait_bin = (
            Path(args.strait_bin)
            if args.strait_bin
            else (Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release" / "strait")
        )
        available = {
            "strait": lambda n: Strait(strait_bin, os.environ.get("STRAIT_BENCH_BUILD_ERROR") or None),
            "straitb": lambda n: Strait(
                Path(args.strait_b) if args.strait_b else strait_bin,
                None if args.strait_b else os.environ.get("STRAIT_BENCH_BUILD_ERROR") or None,
                name="straitb",
                label="Strait B (" + "; ".join(x for x in (args.strait_b, args.strait_b_mirror.strip()) if x) + ")",
                mirror_extra=args.strait_b_mirror.replace("\\n", "\n").rstrip("\n") + "\n" if args.strait_b_mirror else "",
            ),
            "straitc": lambda n: Strait(
                strait_bin,
                os.environ.get("STRAIT_BENCH_BUILD_ERROR") or None,
                name="straitc",
                label="Strait C (" + args.strait_c_mirror.strip() + ")",
                mirror_extra=args.strait_c_mirror.replace("\\n", "\n").rstrip("\n") + "\n" if args.strait_c_mirror else "",
            ),
            "straiteos": lambda n: Strait(
                strait_bin,
                os.environ.get("STRAIT_BENCH_BUILD_ERROR") or None,
                name="straiteos",
                label="Strait exactly-once",
                exactly_once=True,
            ),
            "mm2": lambda n: MirrorMaker2(self.kafka, args.mirror_heap, n or args.mm2_tasks),
            "mm2eos": lambda n: MirrorMaker2(self.kafka, args.mirror_heap, n or args.mm2_tasks, eos=True),
            "mm2zstd": lambda n: MirrorMaker2(self.kafka, args.mirror_heap, n or args.mm2_tasks, compression="zstd"),
            "mm1": lambda n: MirrorMaker1(self.kafka, args.mirror_heap, n or args.mm1_streams),
        }
        self.contenders: list[Contender] = []
        for spec in args.contenders.split(","):
            kind, _, n = spec.strip().partition("@")
            if kind not in available or (n and (kind.startswith("strait") or not n.isdigit() or int(n) < 1)):
                raise SystemExit(
                    f"unknown contender {spec!r}: expected strait, straitb, straitc, straiteos, mm2, mm2eos, mm2zstd, mm1, "
                    "mm2@N or mm1@N"
                )
            c = available[kind](int(n) if n else None)
            if n:
                c.name = f"{kind}@{n}"  # a variant gets its own rows, logs and group ids
            if any(o.name == c.name for o in self.contenders):
                raise SystemExit(f"contender {spec!r} given twice")
            self.contenders.append(c)
        self.disabled: dict[str, str] = {}
        for c in self.contenders:
            why = c.unavailable()
            if why:
                self.disabled[c.name] = why
        self.notes: list[str] = []
        self.timings: list[tuple[str, float]] = []
        self.source: cluster.Cluster | None = None
        self.target: cluster.Cluster | None = None
        self.target_seq = 0
        self.run_seq = 0
        self.src_state: dict[str, dict] = {}
        self.payloads: dict[int, Path] = {}
        self.runs: list[dict] = []
        self.latency: list[dict] = []
        self.limits: list[dict] = []

    # --- plumbing ------------------------------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t_start:7.1f}s] {msg}"
        print(line, flush=True)
        self.logf.write(line + "\n")
        self.logf.flush()

    def phase(self, name: str, fn) -> None:
        t = time.monotonic()
        self.log(f"=== {name}")
        fn()
        self.timings.append((name, time.monotonic() - t))
        self.log(f"=== {name}: {time.monotonic() - t:.1f} s")

    def fresh_target(self) -> cluster.Cluster:
        """Discards the current target cluster and starts an empty one."""
        if self.target is not None:
            cluster.discard(self.reg, self.target)
            self.target = None
        self.target_seq += 1
        t = time.monotonic()
        self.target = cluster.start(
            self.reg, self.kafka, f"dst-{self.target_seq:02d}", self.work, self.args.broker_heap, topo=self.topo,
            pki=self.pki,
        )
        self.log(f"target cluster {self.target.name} on {self.target.bootstrap} ready in {time.monotonic() - t:.1f} s")
        return self.target

    def payload(self, size: int) -> Path:
        if size not in self.payloads:
            self.payloads[size] = dsets.write_payload_file(self.work / f"payload-{size}.txt", size)
        return self.payloads[size]

    # --- phases --------------------------------------------------------------------------------------------------

    def setup(self) -> None:
        self.tools.compile()
        t = time.monotonic()
        self.source = cluster.start(
            self.reg, self.kafka, "src", self.work, self.args.broker_heap, topo=self.topo, pki=self.pki
        )
        self.log(f"source cluster ({self.topo.label}) on {self.source.bootstrap} ready in {time.monotonic() - t:.1f} s")

    def preload(self) -> None:
        a = self.args
        self.tools.create_topics(self.source.bootstrap, a.partitions, *[d.topic for d in self.datasets])
        for d in self.datasets:
            r = self.tools.producer_perf(
                f"preload-{d.name}",
                self.source.bootstrap,
                d.topic,
                d.records,
                self.payload(d.record_size),
                d.compression,
                a.producer_linger_ms,
                a.producer_batch_size,
            )
            self.log(
                f"preloaded {d.topic}: {d.records:,} records in {r['elapsed_s']:.1f} s "
                f"({r['mb_s']:.1f} MB/s by ProducerPerformance)"
            )
        offs = self.tools.offsets(self.source.bootstrap, *[d.topic for d in self.datasets])
        for d in self.datasets:
            t = time.monotonic()
            dig = self.tools.digest(self.source.bootstrap, d.topic)
            ends = offs[d.topic]["partitions"]
            if dig["count"] != d.records or sum(ends) != d.records:
                raise RuntimeError(
                    f"source topic {d.topic} holds {dig['count']} records (end offsets sum "
                    f"{sum(ends)}), expected {d.records}"
                )
            self.src_state[d.name] = {"ends": ends, "bytes": offs[d.topic]["bytes"], "digest": dig}
            self.log(
                f"source {d.topic}: {d.records:,} records, {offs[d.topic]['bytes'] / MB:.1f} MB on disk, "
                f"digest read in {time.monotonic() - t:.1f} s"
            )

    def group_coordinator(self) -> None:
        """A fresh cluster creates __consumer_offsets (50 partitions) on first use of a group, which takes about a
        second; production clusters have it. Create it once here, so that no mirror run pays it."""
        if self.datasets:
            self.tools.consumer_perf("coordinator", self.source.bootstrap, self.datasets[0].topic, 1, "bench-coordinator")

    def broker_limits(self) -> None:
        a = self.args
        target = self.fresh_target()
        for d in self.datasets:
            topic = f"limit-{d.name}"
            self.tools.create_topics(target.bootstrap, a.partitions, topic)
            prod = self.tools.producer_perf(
                f"limit-produce-{d.name}",
                target.bootstrap,
                topic,
                d.records,
                self.payload(d.record_size),
                d.compression,
                a.producer_linger_ms,
                a.producer_batch_size,
            )
            cons = self.tools.consumer_perf(
                f"limit-consume-{d.name}",
                self.source.bootstrap,
                d.topic,
                d.records,
                f"bench-limit-{d.name}-{self.started_at:%H%M%S}",
            )
            row = {
                "dataset": d.name,
                "produce_mb_s": prod["mb_s"],
                "produce_records_s": prod["records_s"],
                "consume_mb_s": cons["mb_s"],
                "consume_records_s": cons["records_s"],
                "limit_mb_s": min(prod["mb_s"], cons["mb_s"]),
            }
            self.limits.append(row)
            self.log(
                f"limits {d.name}: produce {prod['mb_s']:.1f} MB/s ({prod['records_s']:,.0f} rec/s), "
                f"consume {cons['mb_s']:.1f} MB/s ({cons['records_s']:,.0f} rec/s)"
            )

    def order(self, k: int) -> list[Contender]:
        """Rotation k of the contender list: over consecutive groups every contender takes every position."""
        n = len(self.contenders)
        return [self.contenders[(i + k) % n] for i in range(n)]

    def throughput(self) -> None:
        k = 0
        for rep in range(1, self.args.reps + 1):
            for d in self.datasets:
                for pos, c in enumerate(self.order(k), start=1):
                    row = self.mirror_run(c, d, rep, pos)
                    self.runs.append(row)
                    self.log(
                        f"run {row['run']} {c.name} {d.name} rep {rep}: {row['status']} "
                        + (
                            f"{row['mb_s']:.1f} MB/s, {row['records_s']:,.0f} rec/s, first record "
                            f"{row['first_record_s']:.2f} s, {row['cpu_s_per_gb']:.2f} CPU s/GB, "
                            f"RSS {row['peak_rss_mb']:.0f} MB; {row['verify']}"
                            if row["status"] == "OK"
                            else row.get("reason", "")
                        )
                    )
                k += 1

    # --- one mirror run ------------------------------------------------------------------------------------------

    def mirror_run(self, c: Contender, d: dsets.Dataset, rep: int, pos: int) -> dict:
        a = self.args
        self.run_seq += 1
        rid = f"t{self.run_seq:02d}"
        row = {
            "run": rid,
            "rep": rep,
            "order": pos,
            "dataset": d.name,
            "contender": c.name,
            "label": c.label,
            "records": d.records,
            "payload_bytes": d.payload_bytes,
        }
        if c.name in self.disabled:
            row.update(status="SKIPPED", reason=self.disabled[c.name])
            return row
        src = self.src_state[d.name]
        expected = src["ends"]
        run_dir = self.logs / f"{rid}-{c.name}-{d.name}-r{rep}"
        run_dir.mkdir(parents=True, exist_ok=True)
        target = self.fresh_target()
        if not c.keeps_partitions:
            self.tools.create_topics(target.bootstrap, len(expected), d.topic)
        watch = self.tools.start_watch(
            f"watch-{rid}",
            target.bootstrap,
            d.topic,
            c.keeps_partitions,
            expected,
            a.watch_interval_ms,
            committed=c.transactional or a.watch_committed,
        )
        watch.wait_for("ready", 120)
        spec = RunSpec(
            rid,
            run_dir,
            self.source.bootstrap,
            target.bootstrap,
            d.topic,
            d.compression,
            a.mirror_linger_ms if a.mirror_linger_ms >= 0 else a.producer_linger_ms,
            a.mirror_batch_size if a.mirror_batch_size > 0 else a.producer_batch_size,
            replication_factor=self.topo.rf,
            pki=self.pki,
        )
        cmd, cenv = c.command(spec)
        (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        b0 = (cluster.cpu_seconds(self.source), cluster.cpu_seconds(target))  # every node
        w0, m0, h0, load0 = cpu_seconds(watch.proc.pid) or 0.0, machine_busy_seconds(), _self_cpu(), load_average()
        log = run_dir / "stdout.log"
        t0 = time.time()
        proc = self.reg.spawn(c.name, cmd, log, env=cenv)
        sampler = Sampler(proc.pid)
        sampler.start()
        first = done = target_partitions = None
        total, last_change = 0, t0
        fail = None
        while True:
            try:
                line = watch.events.get(timeout=0.05)
            except queue.Empty:
                line = ""
            now = time.time()
            if line is None:
                fail = f"offset watcher died: {tail(watch.log)}"
                break
            if line:
                ev, ts, tot = line.split()
                if ev == "topic":
                    target_partitions = int(tot)
                elif int(tot) != total:
                    total, last_change = int(tot), now
                if ev == "first":
                    first = int(ts) / 1000
                elif ev == "done":
                    done = int(ts) / 1000
                    break
            if proc.poll() is not None:
                fail = (
                    f"{c.label} exited with code {proc.returncode} after {now - t0:.1f} s, before completion "
                    f"({total:,}/{d.records:,} records on the target): {tail(log)}"
                )
                break
            if first is None and now - t0 > a.first_timeout:
                fail = f"no record on the target {a.first_timeout:.0f} s after start: {tail(log)}"
                break
            if first is not None and now - last_change > a.stall_timeout:
                fail = f"target stalled at {total:,}/{d.records:,} records for {a.stall_timeout:.0f} s: {tail(log)}"
                break
            if now - t0 > a.run_timeout:
                fail = f"not complete after {a.run_timeout:.0f} s ({total:,}/{d.records:,} records)"
                break
        cpu, hwm = sampler.sample()
        b1 = (cluster.cpu_seconds(self.source), cluster.cpu_seconds(target))
        w1, m1, h1 = cpu_seconds(watch.proc.pid) or w0, machine_busy_seconds(), _self_cpu()
        Strait.scrape(run_dir)
        stop_s = self.reg.stop(proc, timeout=30)
        sampler.finish()
        watch.stop()
        row["stop_s"] = stop_s
        row["cpu_s_at_exit"] = sampler.cpu  # last sample (<= 100 ms before exit): includes the shutdown
        if fail:
            if target_partitions is not None and target_partitions != len(expected):
                fail += f" [the target topic has {target_partitions} partitions, the source {len(expected)}]"
            elif target_partitions is None and first is None:
                fail += " [the target topic was never created]"
            row.update(status="FAILED", reason=fail)
            # A mirror that never delivered a record cannot run here at all (missing engine, crash at start, bad
            # config): skip its other runs. One that worked and then stalled or died may still do the other
            # datasets: keep measuring it, the failed run stays FAILED in the tables.
            if first is None or a.skip_after_failure:
                self.disabled[c.name] = f"not run after it failed in run {rid} ({d.name}): {fail}"
            else:
                self.notes.append(f"{c.label} FAILED run {rid} ({d.name}, rep {rep}): {fail}")
            return row
        elapsed = done - t0
        gb = d.payload_bytes / GB
        row.update(
            elapsed_s=elapsed,
            mb_s=d.payload_bytes / MB / elapsed,
            records_s=d.records / elapsed,
            first_record_s=first - t0 if first else None,
            mb_s_after_first=d.payload_bytes / MB / (done - first) if first and done > first else None,
            cpu_s=cpu,
            cpu_s_per_gb=cpu / gb,
            peak_rss_mb=hwm / MB,
            src_broker_cpu_s=b1[0] - b0[0],
            dst_broker_cpu_s=b1[1] - b0[1],
            broker_cpu_s_per_gb=((b1[0] - b0[0]) + (b1[1] - b0[1])) / gb,
            source_log_bytes=src["bytes"],
            # machine CPU not spent by the mirror, the two brokers, the watcher or this harness: other tenants
            other_cpu_cores=max(0.0, (m1 - m0) - cpu - (b1[0] - b0[0]) - (b1[1] - b0[1]) - (w1 - w0) - (h1 - h0))
            / elapsed,
            load_avg_start=load0,
        )
        lim = next((x["limit_mb_s"] for x in self.limits if x["dataset"] == d.name), None)
        if lim:
            row["limit_mb_s"] = lim
            row["fraction_of_limit"] = row["mb_s"] / lim
        ok, text, ts_ok, tbytes = self.verify(target, d, c.keeps_partitions, c.transactional)
        row.update(verify=text, timestamps_preserved=ts_ok, target_log_bytes=tbytes)
        row["status"] = "OK" if ok else "FAILED"
        if not ok:
            row["reason"] = "target does not hold exactly the source records"
        return row

    def verify(
        self, target: cluster.Cluster, d: dsets.Dataset, per_partition: bool, transactional: bool = False
    ) -> tuple[bool, str, bool, int]:
        """Compares the target topic with the source: (exact?, text for the report, timestamps equal?, target bytes).
        transactional (exactly-once mirrors): the target is read read_committed and its end offsets, which include
        transaction markers, are not compared with the source's."""
        src = self.src_state[d.name]
        try:
            offs = self.tools.offsets(target.bootstrap, d.topic)[d.topic]
            td = self.tools.digest(target.bootstrap, d.topic, "read_committed" if transactional else None)
        except ToolError as e:
            return False, f"cannot read the target topic: {e}", False, 0
        return verdict.compare(src, offs, td, per_partition, transactional)

    # --- latency -------------------------------------------------------------------------------------------------

    def latency_phase(self) -> None:
        a = self.args
        passes = [0] + ([a.hogs or len(os.sched_getaffinity(0))] if a.busy else [])
        for hogs in passes:
            for rep in range(1, a.latency_reps + 1):
                self.latency.append(self.latency_run(None, rep, hogs))
                base = self.latency[-1]
                for c in self.order(rep - 1):
                    row = self.latency_run(c, rep, hogs)
                    if row["status"] == "OK" and base["status"] == "OK":
                        for q in ("p50", "p99", "max"):
                            row[f"added_{q}_ms"] = row[f"{q}_ms"] - base[f"{q}_ms"]
                    self.latency.append(row)
        for r in self.latency:
            self.log(
                f"latency rep {r['rep']} {r['label']}: {r['status']} p50 {r.get('p50_ms')} p99 {r.get('p99_ms')} "
                f"max {r.get('max_ms')} ms, mirror CPU {report.fmt(r.get('cpu_pct_at_rate'), 0)} % "
                f"{r.get('reason', '')}"
            )

    def warm_target(self, target: cluster.Cluster, rid: str) -> None:
        """Writes and reads back records on a fresh target, so that the latency a mirror adds is not the target JVM's
        JIT warm-up (the source-only baseline runs on a source broker warmed by the preload). Same for every mirror."""
        a = self.args
        n = a.latency_target_warmup
        if n <= 0:
            return
        t = time.monotonic()
        topic = "bench-warmup"
        self.tools.create_topics(target.bootstrap, a.partitions, topic)
        self.tools.producer_perf(
            f"warm-produce-{rid}", target.bootstrap, topic, n, self.payload(1024), "lz4", a.latency_linger_ms,
            a.producer_batch_size,
        )
        self.tools.consumer_perf(f"warm-consume-{rid}", target.bootstrap, topic, n, f"bench-warmup-{rid}")
        self.log(f"target {target.name} warmed with {n:,} records in {time.monotonic() - t:.1f} s")

    def latency_run(self, c: Contender | None, rep: int, hogs: int = 0) -> dict:
        a = self.args
        self.run_seq += 1
        rid = f"l{self.run_seq:02d}"
        name = c.name if c else "direct"
        row = {
            "run": rid,
            "rep": rep,
            "contender": name,
            "dataset": "latency-1k-lz4",
            "label": c.label if c else "source only (no mirror)",
            "machine": f"busy ({hogs} busy loops)" if hogs else "calm",
        }
        if c and c.name in self.disabled:
            row.update(status="SKIPPED", reason=self.disabled[c.name])
            return row
        topic = f"lat-{name.replace('@', '_')}-{rid}"  # topic names allow [a-zA-Z0-9._-] only
        run_dir = self.logs / f"{rid}-{name}-latency-r{rep}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.tools.create_topics(self.source.bootstrap, a.partitions, topic)
        proc = sampler = None
        consume = self.source.bootstrap
        if c is None and self.target is not None:
            cluster.discard(self.reg, self.target)  # an idle target would only add noise to the baseline
            self.target = None
        if c:
            target = self.fresh_target()
            self.warm_target(target, rid)
            consume = target.bootstrap
            if not c.keeps_partitions:
                self.tools.create_topics(target.bootstrap, a.partitions, topic)
            spec = RunSpec(
                rid,
                run_dir,
                self.source.bootstrap,
                target.bootstrap,
                topic,
                "lz4",
                a.latency_linger_ms,
                a.producer_batch_size,
                replication_factor=self.topo.rf,
                pki=self.pki,
            )
            cmd, cenv = c.command(spec)
            (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
            proc = self.reg.spawn(c.name, cmd, run_dir / "stdout.log", env=cenv)
            sampler = Sampler(proc.pid)
            sampler.start()
        # The hog runs from just before the probe starts until the probe has finished (fresh target and warm-up
        # excluded, they would only take longer): the mirror, the brokers and the probe all compete with it.
        hog_procs = start_hogs(self.reg, hogs, run_dir) if hogs else []
        probe = self.tools.start_latency_probe(
            f"latency-{rid}",
            self.source.bootstrap,
            consume,
            topic,
            a.latency_rate,
            1024,
            self.payload(1024),
            a.latency_warmup,
            a.latency_seconds,
            "lz4",
            a.latency_linger_ms,
            a.producer_batch_size,
            # an exactly-once mirror's records count when its transaction commits: what read_committed consumers see
            "read_committed" if c and c.transactional else None,
        )
        fail = None
        result = None
        marks: dict[str, tuple[float, float]] = {}
        t0 = time.time()
        deadline = t0 + a.first_timeout + a.latency_warmup + a.latency_seconds + 120
        probe_out = open(run_dir / "probe.txt", "w")  # noqa: SIM115 - closed after the loop
        while result is None and fail is None:
            try:
                line = probe.events.get(timeout=0.1)
            except queue.Empty:
                line = ""
            if line:
                probe_out.write(f"{time.time():.3f} {line}\n")
            if line is None:
                fail = f"latency probe exited: {tail(probe.log)}"
            elif line.startswith("phase "):
                ph = line.split()[1]
                marks[ph] = (time.time(), sampler.sample()[0] if sampler else 0.0)
            elif line.startswith("result "):
                result = json.loads(line[len("result ") :])
            if proc is not None and proc.poll() is not None:
                fail = f"{c.label} exited with code {proc.returncode}: {tail(run_dir / 'stdout.log')}"
            elif "warmup" not in marks and time.time() - t0 > a.first_timeout:
                fail = f"no record arrived {a.first_timeout:.0f} s after start"
            elif time.time() > deadline:
                fail = "latency probe did not finish in time"
        probe_out.close()
        stop_hogs(self.reg, hog_procs)
        if sampler:
            row["peak_rss_mb"] = sampler.sample()[1] / MB
            sampler.finish()
        if proc is not None:
            Strait.scrape(run_dir)
            self.reg.stop(proc, timeout=30)
        probe.stop()
        if fail:
            row.update(status="FAILED", reason=fail)
            if c and ("warmup" not in marks or a.skip_after_failure):
                self.disabled[c.name] = f"not run after it failed in latency run {rid}: {fail}"
            return row
        row.update(result)
        if "measure" in marks and "drain" in marks and c:
            (m0, c0), (m1, c1) = marks["measure"], marks["drain"]
            row["cpu_pct_at_rate"] = 100 * (c1 - c0) / (m1 - m0)
        row["status"] = "OK" if result.get("missing", 1) == 0 and result.get("p50_ms") is not None else "FAILED"
        if row["status"] != "OK":
            row["reason"] = f"{result.get('missing')} of {result.get('sent')} measured records never arrived"
        return row

    # --- report --------------------------------------------------------------------------------------------------

    def environment(self) -> dict:
        def cmd_out(cmd: list[str], stderr: bool = False) -> str:
            try:
                r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=10)
                return (r.stderr if stderr else r.stdout).strip()
            except (OSError, subprocess.TimeoutExpired):
                return ""

        lscpu = cmd_out(["lscpu"])
        model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
        mem_kb = 0
        with open("/proc/meminfo") as f:
            for ln in f:
                if ln.startswith("MemTotal:"):
                    mem_kb = int(ln.split()[1])
        commit = cmd_out(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]) or "?"
        dirty = cmd_out(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
        strait = next((c for c in self.contenders if c.name == "strait"), None)
        strait_version = ""
        if strait is not None and not strait.unavailable():
            strait_version = cmd_out([str(strait.binary), "--version"]).splitlines()[:1]
            strait_version = strait_version[0] if strait_version else ""

        def kver(lib: Path) -> str:
            jar = next(iter(sorted(lib.glob("kafka-clients-*.jar"))), None)
            return jar.name.removeprefix("kafka-clients-").removesuffix(".jar") if jar else "?"

        return {
            "cpu": model,
            "cores": os.cpu_count(),
            "ram_gib": round(mem_kb / (1 << 20), 1),
            "kernel": platform.release(),
            "java": cmd_out([self.kafka.java, "-version"], stderr=True).splitlines()[0:1],
            "kafka_brokers": kver(self.kafka.lib4),
            "kafka_mm2": kver(self.kafka.lib4),
            "kafka_mm1": kver(self.kafka.lib39),
            "strait_commit": commit + ("-dirty" if dirty else ""),
            "strait_version": strait_version,
            "python": platform.python_version(),
        }

    def clusters_text(self) -> str:
        """The clusters' shape for the report: "single-node KRaft" or "3 combined KRaft nodes each, RF 3, ..."."""
        t = self.topo
        if t.brokers == 1:
            nodes = "single-node KRaft"
        else:
            nodes = (
                f"{t.brokers} combined KRaft nodes per cluster, RF {t.rf} and min ISR {t.min_isr} for the data and "
                "internal topics"
            )
        if t.tls:
            return nodes + ", mTLS: SSL listener with ssl.client.auth=required for clients and between brokers"
        return nodes + ", PLAINTEXT"

    def write_report(self) -> str:
        a = self.args
        envi = self.environment()
        (self.out / "environment.json").write_text(json.dumps({"environment": envi, "args": vars(a)}, indent=2) + "\n")
        names = [d.name for d in self.datasets]
        cons = [(c.name, c.label) for c in self.contenders]
        mode = "quick" if a.quick else "full"
        title = (
            f"Strait mirror bench {self.started_at:%Y-%m-%d %H:%M} ({mode}; {envi['cores']} cores, "
            f"Kafka {envi['kafka_brokers']}, Strait {envi['strait_commit']}; {self.topo.label})"
        )
        for r in self.runs + self.latency + self.limits:
            r.setdefault("clusters", self.topo.label)
        chart_err = report.chart(self.out / "chart.png", self.runs, names, cons, title)
        report.write_csv(self.out / "results.csv", self.runs, self.latency, self.limits)
        java = envi["java"][0] if envi["java"] else "?"
        machine = (
            f"{envi['cpu']}, {envi['cores']} cores, {envi['ram_gib']} GiB RAM, Linux {envi['kernel']}; "
            f"{java}; Kafka {envi['kafka_brokers']} brokers ({self.clusters_text()}) and MM2, Kafka "
            f"{envi['kafka_mm1']} MM1; Strait commit {envi['strait_commit']}"
            + (f" ({envi['strait_version']})" if envi["strait_version"] else "")
        )
        skipped = []
        for c in self.contenders:
            if c.name in self.disabled:
                skipped.append(f"- **{c.label}**: {self.disabled[c.name]}")
        dsl = ", ".join(f"`{d.topic}` ({d.records:,} x {d.record_size} B, {d.compression})" for d in self.datasets)
        lat = (
            f"{a.latency_rate:,} records/s of 1 KiB, lz4, linger.ms={a.latency_linger_ms}; {a.latency_warmup:g} s "
            f"warm-up, {a.latency_seconds:g} s measured"
            + (
                f"; every fresh target cluster first took {a.latency_target_warmup:,} records written and read back by "
                "the Java perf tools (JIT warm-up, same for every mirror)"
                if a.latency_target_warmup > 0
                else ""
            )
        )
        summary = report.throughput_table(self.runs, names, cons)
        md = [
            f"# {title}\n",
            f"Machine: {machine}.\n",
            f"Results dir: `{self.out.relative_to(REPO) if self.out.is_relative_to(REPO) else self.out}`.\n",
            f"Load average (1 min): {self.load_at_start:.1f} at start, {load_average():.1f} at the end.\n",
        ]
        others = [r["other_cpu_cores"] for r in self.runs if r.get("other_cpu_cores") is not None]
        noise = ""
        if self.load_at_start > 0.5 or (others and max(others) > 0.2):
            noise = (
                f"**The machine was not idle**: load average {self.load_at_start:.1f} at start"
                + (
                    f"; other processes used {min(others):.2f}–{max(others):.2f} cores during the mirror runs "
                    "(column *Other CPU*)"
                    if others
                    else ""
                )
                + ". Treat the figures as noisy.\n"
            )
            md.append(noise)
        if skipped:
            md += ["## Contenders not measured\n", "\n".join(skipped) + "\n"]
        if self.notes:
            md += ["## Failed runs and notes\n", "\n".join(f"- {n}" for n in self.notes) + "\n"]
        md += [
            (
                f"## Throughput (median over {a.reps} repetition(s), (min–max) when several; MB = 2^20 bytes of record "
                "values)\n"
            ),
            (
                f"Datasets: {dsl}; {a.partitions} partitions; preloaded by ProducerPerformance with acks=all, "
                f"linger.ms={a.producer_linger_ms}, batch.size={a.producer_batch_size}.\n"
            ),
            summary,
            "\n## Latency added by the mirror (fixed rate)\n",
            (
                f"{lat}. *added* = mirror path minus the source-only path of the same repetition. *p50 first → last "
                "10%*: median latency of the first and of the last tenth of the window; a large rise means the mirror "
                "did not keep up with the rate and its backlog grew.\n"
            ),
            report.latency_table(self.latency),
            "\nAdded latency over the repetitions, median (min–max):\n",
            report.latency_summary(self.latency),
            "\n## What the brokers allow on the same data\n",
            report.limits_table(self.limits),
            "\n## Every run\n",
            report.runs_table(self.runs),
            "\n## Settings\n",
            "\n".join(
                [f"- {c.label}: {c.settings()}" for c in self.contenders]
                + [
                    (
                        f"- MM1/MM2 producers: compression.type = the dataset's, linger.ms={a.producer_linger_ms}, "
                        f"batch.size={a.producer_batch_size} (latency phase: lz4, linger.ms={a.latency_linger_ms})"
                    ),
                    (
                        f"- Brokers: -Xmx{a.broker_heap}, num.network.threads=2, num.io.threads=4, "
                        "auto.create.topics.enable=false; a fresh target cluster for every run"
                    ),
                    (
                        f"- Completion: offset watcher polling every {a.watch_interval_ms} ms; first-record timeout "
                        f"{a.first_timeout:g} s, stall timeout {a.stall_timeout:g} s"
                        + (
                            "; exactly-once contenders"
                            + (" (and, with --watch-committed, every contender)" if a.watch_committed else "")
                            + ": a read_committed consumer counting the records of every target partition (their "
                            "end offsets include transaction markers); exactly-once contenders: verification read "
                            "read_committed, latency probe consuming read_committed"
                            if any(c.transactional for c in self.contenders)
                            else ""
                        )
                    ),
                    f"- Command: `{' '.join(sys.argv)}`",
                ]
            )
            + "\n",
            "\n## Timings\n",
            "\n".join(f"- {n}: {s:.0f} s" for n, s in self.timings)
            + f"\n- total: {time.monotonic() - self.t_start:.0f} s\n",
        ]
        if chart_err:
            md.append(f"\n{chart_err}\n")
        else:
            md.insert(3, "![throughput and CPU per GB](chart.png)\n")
        text = "\n".join(md)
        (self.out / "results.md").write_text(text)
        upd = a.update_readme == "yes" or (a.update_readme == "auto" and not a.quick)
        if upd:
            rel = self.out.relative_to(REPO) if self.out.is_relative_to(REPO) else self.out
            block = "\n".join(
                [
                    f"_{title}_ — full results in `{rel}/results.md`.\n",
                    f"Machine: {machine}.\n",
                    *([noise] if noise else []),
                    *(["Not measured:\n", "\n".join(skipped) + "\n"] if skipped else []),
                    summary,
                    f"\nLatency ({lat}):\n",
                    report.latency_table(self.latency),
                ]
            )
            if not report.update_readme(HERE.parent / "README.md", block):
                self.log("benches/README.md has no bench markers: not updated")
        return text

    def run_wan(self) -> str:
        """The WAN shapes only (--wan): every mirror over a delay proxy; see wan.py."""
        import wan

        w = wan.WanBench(self)
        text = ""
        try:
            self.phase("setup (javac helpers, source cluster with a WAN listener)", w.setup)
            self.phase("WAN shapes", w.run)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if w.rows or w.referees:
                text = self.write_phase_report(w, "WAN")
                self.log(f"wrote {self.out}/results.md, results.csv")
        return text

    def run_failover(self) -> str:
        """The consumer-group failover phase only (--failover); see failover.py."""
        import failover

        f = failover.FailoverBench(self)
        text = ""
        try:
            self.phase("setup (javac helpers, source cluster, failover topic)", f.setup)
            self.phase("failover runs", f.run)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if f.rows:
                text = self.write_phase_report(f, "failover")
                self.log(f"wrote {self.out}/results.md, results.csv")
        return text

    def run_scale(self) -> str:
        """The scale shapes only (--scale): thousands of partitions; see scale.py."""
        import scale

        s = scale.ScaleBench(self)
        text = ""
        try:
            self.phase("setup (javac helpers)", s.setup)
            self.phase("scale shapes", s.run)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if s.rows:
                text = self.write_phase_report(s, "scale")
                self.log(f"wrote {self.out}/results.md, results.csv")
        return text

    def run_kills(self) -> str:
        """The kill sequence only (--kills): duplicates after the same SIGKILLs; see kills.py."""
        import kills

        k = kills.KillBench(self)
        text = ""
        try:
            self.phase("setup (javac helpers, source cluster)", k.setup)
            self.phase("kill runs", k.run)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if k.rows:
                text = self.write_phase_report(k, "kills")
                self.log(f"wrote {self.out}/results.md, results.csv")
        return text

    def run_rebalance(self) -> str:
        """The rebalance phase only (--rebalance): pauses per partition while the group scales; see rebalance.py."""
        import rebalance

        r = rebalance.RebalanceBench(self)
        text = ""
        try:
            self.phase("setup (javac helpers)", r.setup)
            self.phase("rebalance runs", r.run)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if r.rows:
                text = self.write_phase_report(r, "rebalance")
                self.log(f"wrote {self.out}/results.md, results.csv")
        return text

    def write_phase_report(self, w, phase: str) -> str:  # noqa: ANN001 - wan.WanBench or failover.FailoverBench
        """results.md / results.csv / environment.json of a phase that runs alone (--wan, --failover): `w` gives
        the Markdown of its results and writes its CSV."""
        envi = self.environment()
        (self.out / "environment.json").write_text(
            json.dumps({"environment": envi, "args": vars(self.args)}, indent=2) + "\n"
        )
        mode = f"{phase} quick" if self.args.quick else phase
        title = (
            f"Strait mirror bench {self.started_at:%Y-%m-%d %H:%M} ({mode}; {envi['cores']} cores, "
            f"Kafka {envi['kafka_brokers']}, Strait {envi['strait_commit']})"
        )
        java = envi["java"][0] if envi["java"] else "?"
        md = [
            f"# {title}\n",
            f"Machine: {envi['cpu']}, {envi['cores']} cores, {envi['ram_gib']} GiB RAM, Linux {envi['kernel']}; {java}; "
            f"load average {self.load_at_start:.1f} at start, {load_average():.1f} at the end.\n",
        ]
        skipped = [f"- **{c.label}**: {self.disabled[c.name]}" for c in self.contenders if c.name in self.disabled]
        if skipped:
            md += ["## Contenders not measured\n", "\n".join(skipped) + "\n"]
        if self.notes:
            md += ["## Failed runs and notes\n", "\n".join(f"- {n}" for n in self.notes) + "\n"]
        md.append(w.markdown())
        md += [
            "\n## Settings\n",
            "\n".join(
                (w.settings() if hasattr(w, "settings") else [f"- {c.label}: {c.settings()}" for c in self.contenders])
                + [f"- Command: `{' '.join(sys.argv)}`"]
            )
            + "\n",
            "\n## Timings\n",
            "\n".join(f"- {n}: {s:.0f} s" for n, s in self.timings)
            + f"\n- total: {time.monotonic() - self.t_start:.0f} s\n",
        ]
        text = "\n".join(md)
        (self.out / "results.md").write_text(text)
        w.write_csv(self.out / "results.csv")
        return text

    def run(self) -> str:
        text = ""
        self.log(f"results -> {self.out}; scratch -> {self.work}")
        for c in self.contenders:
            if c.name in self.disabled:
                self.log(f"{c.label}: {self.disabled[c.name]}")
        if self.args.wan:
            return self.run_wan()
        if self.args.failover:
            return self.run_failover()
        if self.args.scale:
            return self.run_scale()
        if self.args.kills:
            return self.run_kills()
        if self.args.rebalance:
            return self.run_rebalance()
        try:
            self.phase("setup (javac helpers, source cluster)", self.setup)
            self.phase("preload source", self.preload)
            self.phase("source group coordinator", self.group_coordinator)
            if not self.args.no_limits:
                self.phase("broker limits", self.broker_limits)
            self.phase("mirror runs", self.throughput)
            if self.args.latency_rate > 0:
                self.phase("latency", self.latency_phase)
        except Exception as e:  # report what we have, then fail
            self.notes.append(f"bench aborted: {e}")
            self.log(f"ABORTED: {e}\n{traceback.format_exc()}")
            raise
        finally:
            if self.runs or self.latency:
                text = self.write_report()
                self.log(f"wrote {self.out}/results.md, results.csv, chart.png")
        return text


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    reg = Registry()

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    bench = None
    code = 0
    try:
        bench = Bench(args, reg)
        text = bench.run()
        print("\n" + text)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({e}); stopping every process the bench started", file=sys.stderr)
        code = 130
    except Exception as e:  # noqa: BLE001 - the top level reports any failure and cleans up
        print(f"\nbench failed: {e}", file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        reg.stop_all()
        if bench is not None:
            if args.keep_work:
                print(f"scratch kept in {bench.work}", file=sys.stderr)
            else:
                shutil.rmtree(bench.work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
