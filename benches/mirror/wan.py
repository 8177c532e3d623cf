"""WAN shapes of the side-by-side bench (issue 17): the three mirrors over a long link, same proxy, same data.

A delay proxy (`strait-delay-proxy`, the test kit's DelayProxy as a process: every chunk is delayed by RTT/2 in each
direction, pipelined, order kept) sits on one side of the mirror:

* **near-source** (mirror next to the source, proxy between mirror and target): the target broker advertises the
  proxy's address on a WAN listener, and the mirror's target bootstrap is the proxy;
* **near-target** (mirror next to the target, proxy between source and mirror; the usual MirrorMaker deployment):
  the source advertises its proxy on a WAN listener, and the mirror's source bootstrap is the proxy.

Replication-free single-node clusters; the bench's tools (producers, the lag watcher, verification) always use the
direct listeners. One mirror run per (RTT, placement, contender), on a fresh target, mirrors three topics of its own:

1. **backlog catch-up**: `<run>-backlog` is preloaded with N small-batch records (ProducerPerformance at 30,000
   records/s, `linger.ms=0`, round-robin partitioner: a few records per batch) before the mirror starts; throughput = N / (complete - first record on the target),
   capped at `--wan-catchup-cap` s (then: records copied / time);
2. **steady rates**: for each rate R (3,000 and 30,000 records/s), ProducerPerformance writes `<run>-r<R>` at R with
   `linger.ms=0` (round-robin) for `--wan-seconds`; the lag watcher (one JVM, end offsets of both clusters every 250 ms) gives the
   lag over time. *Lag at end* = source total - target total at the first sample after the producer exited, in
   seconds of production (records / R); *growth* = slope of the lag over the second half of the window (records/s:
   about 0 when bounded, R - forwarding rate when the mirror falls behind). **Keeps up** = lag at end under 5 s and
   growth under 5 % of R. Then the topic gets `--wan-drain-cap` s to drain before the next phase.

A referee per RTT: Kafka's ProducerPerformance writing each rate for the same time through a proxy of that RTT
straight into a target (acks=all, `linger.ms=0`): does a plain Java producer keep up over that link?
"""

from __future__ import annotations

import csv
import os
import queue
import re
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import cluster
from contenders import Contender, RunSpec, Strait
from procs import Registry, Sampler, line_reader
from tools import ToolError, tail

PLACEMENTS = ("near-source", "near-target")
# How often the proxy reports the bytes it carried (for the link use over the catch-up window).
STATS_MS = 250
# A capped link counts as filled at this share of its bandwidth (issue 33 item 6).
LINK_FILLED = 0.9
KEEPS_UP_LAG_S = 5.0
KEEPS_UP_GROWTH = 0.05


class DelayProxy:
    """A `strait-delay-proxy` process: 127.0.0.1:listen -> 127.0.0.1:upstream, `delay_ms` each way."""

    def __init__(
        self,
        reg: Registry,
        binary: Path,
        listen: int,
        upstream: int,
        delay_ms: float,
        log: Path,
        bandwidth_mbit: int = 0,
    ) -> None:
        self.reg = reg
        self.log = log
        # (epoch s, bytes up, bytes down) every STATS_MS, read after stop(): how full the link was over a window
        self.samples: list[tuple[float, int, int]] = []
        cmd = [
            str(binary),
            "--listen",
            f"127.0.0.1:{listen}",
            "--upstream",
            f"127.0.0.1:{upstream}",
            "--delay-ms",
            str(int(round(delay_ms))),
            "--stats-ms",
            str(STATS_MS),
        ]
        if bandwidth_mbit > 0:
            cmd += ["--bandwidth-mbit", str(bandwidth_mbit)]
        self.proc = reg.spawn(f"delay-proxy-{listen}", cmd, log, stdout_pipe=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = line_reader(self.proc, self.lines.put)
        deadline = time.monotonic() + 30
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise ToolError(f"strait-delay-proxy not ready after 30 s: {tail(log)}") from None
            if line is None:
                raise ToolError(f"strait-delay-proxy exited: {tail(log)}")
            if line.startswith("READY"):
                return

    def stop(self) -> str:
        """Stops it (SIGTERM); returns its closing lines with the traffic it carried."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.reader.join(timeout=2)  # its last lines (the traffic) come before EOF
        self.reg.stop(self.proc, timeout=5)
        stats = []
        while True:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                break
            if line is None:
                break
            if " connections, " in line:
                stats.append(line)
            elif line.startswith("stats "):
                sample = parse_stats(line)
                if sample:
                    self.samples.append(sample)
        return "; ".join(stats)


@dataclass
class Samples:
    """(epoch s, source total, target total) per topic from the lag watcher."""

    by_topic: dict[str, list[tuple[float, int, int]]]

    def last(self, topic: str) -> tuple[float, int, int] | None:
        s = self.by_topic.get(topic)
        return s[-1] if s else None


class WanBench:
    """Runs the WAN shapes with the plumbing of a `run.Bench` (registry, tools, contenders, logging)."""

    def __init__(self, bench) -> None:  # noqa: ANN001 - run.Bench (import cycle)
        self.b = bench
        self.a = bench.args
        self.rows: list[dict] = []
        self.referees: list[dict] = []
        self.source: cluster.Cluster | None = None
        self.seq = 0
        self.proxy_bin = Path(self.a.delay_proxy_bin)
        self.rtts = [float(x) for x in str(self.a.wan_rtts).split(",") if x.strip()]
        self.placements = [p.strip() for p in str(self.a.wan_placements).split(",") if p.strip()]
        self.rates = [int(x) for x in str(self.a.wan_rates).split(",") if x.strip()]
        for p in self.placements:
            if p not in PLACEMENTS:
                raise SystemExit(f"--wan-placements: unknown {p!r}, expected {', '.join(PLACEMENTS)}")

    def log(self, msg: str) -> None:
        self.b.log(msg)

    # --- setup ---------------------------------------------------------------------------------------------------

    def setup(self) -> None:
        if not self.proxy_bin.is_file():
            raise SystemExit(
                f"{self.proxy_bin} missing: cargo build --release -p strait-testkit --bin strait-delay-proxy "
                "(scripts/bench.sh --wan builds it)"
            )
        self.b.tools.compile()
        t = time.monotonic()
        # The source gets a WAN listener when a placement needs the link in front of it; its proxy's port is fixed
        # (it is in the broker's config), and a proxy with the RTT of the run is started on it per run.
        proxy_port = cluster.free_port() if "near-target" in self.placements else None
        self.source = cluster.start(
            self.b.reg, self.b.kafka, "src", self.b.work, self.a.broker_heap, wan_proxy_port=proxy_port
        )
        self.b.source = self.source
        self.log(f"source cluster on {self.source.bootstrap} ready in {time.monotonic() - t:.1f} s")
        # __consumer_offsets exists before any mirror run, as on a real cluster.
        self.b.tools.create_topics(self.source.bootstrap, 1, "wan-coordinator")
        self.produce("coordinator-record", self.source.bootstrap, "wan-coordinator", 1, 1000)
        self.b.tools.consumer_perf("coordinator", self.source.bootstrap, "wan-coordinator", 1, "bench-coordinator")

    # --- producers -----------------------------------------------------------------------------------------------

    def producer_cmd(self, bootstrap: str, topic: str, records: int, rate: int) -> list[str]:
        a = self.a
        return self.b.kafka.tool_cmd(
            "org.apache.kafka.tools.ProducerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--payload-file",
            str(self.b.payload(a.wan_record_size)),
            "--throughput",
            str(rate),
            "--command-property",
            "acks=all",
            "linger.ms=0",
            # consecutive records to consecutive partitions: with linger.ms=0 every batch holds only the few records
            # that arrived while the previous request was in flight, spread over all partitions (the default sticky
            # partitioner would fill one partition's batch instead)
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
            f"compression.type={a.wan_compression}",
            "client.id=strait-bench-wan",
            heap="512m",
        )

    def produce(self, name: str, bootstrap: str, topic: str, records: int, rate: int) -> dict:
        """ProducerPerformance to completion; its summary (records/s, avg latency)."""
        log = self.b.logs / "tools" / f"{name}.log"
        proc = self.b.reg.spawn(name, self.producer_cmd(bootstrap, topic, records, rate), log, stdout_pipe=True)
        try:
            out, _ = proc.communicate(timeout=records / max(rate, 1) + 300)
        except Exception:
            self.b.reg.stop(proc, timeout=5)
            raise
        self.b.reg.forget(proc)
        if proc.returncode != 0:
            raise ToolError(f"{name} exited with {proc.returncode}: {tail(log)}")
        return parse_perf(out, name)

    # --- the phases ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        k = 0
        for rtt in self.rtts:
            if not self.a.wan_no_referee:
                self.referee(rtt)
            for placement in self.placements:
                for c in self.b.order(k):
                    row = self.mirror_run(c, rtt, placement)
                    self.rows.append(row)
                    self.log(f"wan run {row['run']}: {summary_line(row, self.rates)}")
                k += 1

    def referee(self, rtt: float) -> None:
        """A plain Java producer over the same link: does it keep up at each rate?"""
        self.seq += 1
        rid = f"w{self.seq:02d}"
        proxy_port = cluster.free_port()
        target = self.fresh_target(proxy_port)
        proxy = DelayProxy(
            self.b.reg, self.proxy_bin, proxy_port, target.wan_port, rtt / 2, self.b.logs / f"{rid}-proxy.log",
            self.a.wan_bandwidth_mbit,
        )
        try:
            for rate in self.rates:
                topic = f"{rid}-ref{rate}"
                self.b.tools.create_topics(target.bootstrap, self.a.partitions, topic)
                n = int(rate * self.a.wan_seconds)
                t = time.monotonic()
                r = self.produce(f"{rid}-referee-{rate}", target.wan_bootstrap, topic, n, rate)
                row = {
                    "run": rid,
                    "rtt_ms": rtt,
                    "rate": rate,
                    "records": n,
                    "records_s": r["records_s"],
                    "avg_latency_ms": r["avg_ms"],
                    "wall_s": time.monotonic() - t,
                }
                row["keeps_up"] = r["records_s"] >= rate * (1 - KEEPS_UP_GROWTH)
                self.referees.append(row)
                self.log(
                    f"referee {rtt:g} ms RTT at {rate:,}/s: {r['records_s']:,.0f} records/s, avg latency "
                    f"{r['avg_ms']:.0f} ms"
                )
        finally:
            proxy.stop()

    def fresh_target(self, proxy_port: int | None) -> cluster.Cluster:
        if self.b.target is not None:
            cluster.discard(self.b.reg, self.b.target)
            self.b.target = None
        self.b.target_seq += 1
        t = time.monotonic()
        self.b.target = cluster.start(
            self.b.reg,
            self.b.kafka,
            f"dst-{self.b.target_seq:02d}",
            self.b.work,
            self.a.broker_heap,
            wan_proxy_port=proxy_port,
        )
        self.log(f"target {self.b.target.name} ready in {time.monotonic() - t:.1f} s")
        return self.b.target

    def mirror_run(self, c: Contender, rtt: float, placement: str) -> dict:
        a = self.a
        self.seq += 1
        rid = f"w{self.seq:02d}"
        row: dict = {"run": rid, "contender": c.name, "label": c.label, "rtt_ms": rtt, "placement": placement}
        if c.name in self.b.disabled:
            row.update(status="SKIPPED", reason=self.b.disabled[c.name])
            return row
        run_dir = self.b.logs / f"{rid}-{c.name}-{placement}-{rtt:g}ms"
        run_dir.mkdir(parents=True, exist_ok=True)
        backlog = f"{rid}-backlog"
        steady = {rate: f"{rid}-r{rate}" for rate in self.rates}
        topics = [backlog, *steady.values()]
        src = self.source
        self.b.tools.create_topics(src.bootstrap, a.partitions, *topics)
        t = time.monotonic()
        self.produce(f"{rid}-preload", src.bootstrap, backlog, a.wan_backlog, a.wan_backlog_rate)
        self.log(f"{rid}: preloaded {a.wan_backlog:,} records into {backlog} in {time.monotonic() - t:.1f} s")

        near_source = placement == "near-source"
        target = self.fresh_target(cluster.free_port() if near_source else None)
        if not c.keeps_partitions:
            self.b.tools.create_topics(target.bootstrap, a.partitions, *topics)
        if near_source:
            proxy = DelayProxy(
                self.b.reg, self.proxy_bin, target.wan_proxy_port, target.wan_port, rtt / 2, run_dir / "proxy.log",
                a.wan_bandwidth_mbit,
            )
            src_boot, dst_boot = src.bootstrap, target.wan_bootstrap
        else:
            proxy = DelayProxy(
                self.b.reg, self.proxy_bin, src.wan_proxy_port, src.wan_port, rtt / 2, run_dir / "proxy.log",
                a.wan_bandwidth_mbit,
            )
            src_boot, dst_boot = src.wan_bootstrap, target.bootstrap
        watch_log = run_dir / "lagwatch.log"
        watch_cmd = self.b.kafka.tool_cmd(
            "LagWatch", src.bootstrap, target.bootstrap, "250", *topics, heap="128m", classes=self.b.tools.classes
        )
        watch = self.b.reg.spawn(f"lagwatch-{rid}", watch_cmd, watch_log, stdout_pipe=True)
        events: queue.Queue[str | None] = queue.Queue()
        line_reader(watch, events.put)
        samples = Samples({t: [] for t in topics})
        raw = open(run_dir / "lag.txt", "w")  # noqa: SIM115 - closed in finally

        def pump(until: float | None = None) -> None:
            """Moves watcher lines into `samples`; waits up to `until` (epoch s) for at least one."""
            while True:
                timeout = 0.05 if until is None else max(0.01, min(0.25, until - time.time()))
                try:
                    line = events.get(timeout=timeout)
                except queue.Empty:
                    return
                if line is None:
                    raise ToolError(f"lag watcher died: {tail(watch_log)}")
                raw.write(line + "\n")
                f = line.split()
                if f[0] == "lag" and f[2] in samples.by_topic:
                    samples.by_topic[f[2]].append((int(f[1]) / 1000, int(f[3]), int(f[4])))

        spec = RunSpec(
            rid, run_dir, src_boot, dst_boot, f"{rid}-.*", a.wan_compression, a.producer_linger_ms, a.producer_batch_size
        )
        cmd, cenv = c.command(spec)
        (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        proc = sampler = None
        fail = None
        try:
            # the watcher connects first (its "ready" line), so the run's clock starts with the mirror
            deadline = time.time() + 120
            while not any(samples.by_topic.values()):
                pump(until=time.time() + 0.25)
                if time.time() > deadline:
                    raise ToolError(f"lag watcher not sampling after 120 s: {tail(watch_log)}")
            t0 = time.time()
            proc = self.b.reg.spawn(c.name, cmd, run_dir / "stdout.log", env=cenv)
            sampler = Sampler(proc.pid)
            sampler.start()

            def alive() -> None:
                if proc.poll() is not None:
                    raise ToolError(f"{c.label} exited with code {proc.returncode}: {tail(run_dir / 'stdout.log')}")

            # 1. backlog catch-up
            first = done = None
            cap_at = None
            while done is None:
                pump(until=time.time() + 0.25)
                alive()
                last = samples.last(backlog)
                now = time.time()
                if last and last[2] > 0 and first is None:
                    first = last[0]
                    cap_at = now + a.wan_catchup_cap
                if last and last[2] >= a.wan_backlog:
                    done = last[0]
                elif first is None and now - t0 > a.first_timeout:
                    raise ToolError(f"no record on the target {a.first_timeout:.0f} s after start")
                elif cap_at is not None and now > cap_at:
                    break
            last = samples.last(backlog)
            copied = last[2] if last else 0
            end = done if done is not None else last[0]
            row.update(
                catchup_window=(first, end) if first else None,
                first_record_s=first - t0 if first else None,
                catchup_records=copied,
                catchup_complete=done is not None,
                catchup_records_s=copied / (end - first) if first and end > first else None,
            )
            self.log(
                f"{rid} {c.name}: backlog {copied:,}/{a.wan_backlog:,} records "
                f"({'complete' if done else 'capped'}), {row['catchup_records_s'] or 0:,.0f} records/s"
            )
            # 2. steady rates
            for rate in self.rates:
                topic = steady[rate]
                n = int(rate * a.wan_seconds)
                pcmd = self.producer_cmd(src.bootstrap, topic, n, rate)
                plog = run_dir / f"producer-{rate}.log"
                p = self.b.reg.spawn(f"{rid}-producer-{rate}", pcmd, plog, stdout_pipe=True)
                out: list[str] = []
                reader = line_reader(p, lambda ln, out=out: out.append(ln) if ln is not None else None)
                p_start = time.time()
                while p.poll() is None:
                    pump(until=time.time() + 0.25)
                    alive()
                    if time.time() - p_start > a.wan_seconds + 300:
                        self.b.reg.stop(p, timeout=5)
                        raise ToolError(f"producer at {rate}/s did not finish: {tail(plog)}")
                p_end = time.time()
                reader.join(timeout=5)
                self.b.reg.forget(p)
                if p.returncode != 0:
                    raise ToolError(f"producer at {rate}/s exited with {p.returncode}: {tail(plog)}")
                perf = parse_perf("\n".join(out), f"producer-{rate}")
                # the first sample taken after the producer exited (every record acknowledged by the source)
                while True:
                    pump(until=time.time() + 0.25)
                    last = samples.last(topic)
                    if last and last[0] >= p_end:
                        break
                    alive()
                _, s_end, d_end = last
                lag_end = max(0, s_end - max(d_end, 0))
                window = [(ts, s - max(d, 0)) for ts, s, d in samples.by_topic[topic] if p_start <= ts <= p_end]
                half = [(ts, lag) for ts, lag in window if ts >= p_start + (p_end - p_start) / 2]
                growth = slope(half)
                # drain before the next phase
                drained = None
                drain_deadline = time.time() + a.wan_drain_cap
                while time.time() < drain_deadline:
                    last = samples.last(topic)
                    if last and last[2] >= s_end:
                        drained = last[0] - p_end
                        break
                    pump(until=time.time() + 0.25)
                    alive()
                kept = lag_end / rate < KEEPS_UP_LAG_S and (growth or 0) < KEEPS_UP_GROWTH * rate
                row.update(
                    {
                        f"r{rate}_produced_records_s": perf["records_s"],
                        f"r{rate}_lag_end_records": lag_end,
                        f"r{rate}_lag_end_s": lag_end / rate,
                        f"r{rate}_growth_records_s": growth,
                        f"r{rate}_max_lag_s": max((lag for _, lag in window), default=0) / rate,
                        f"r{rate}_drained_s": drained,
                        f"r{rate}_keeps_up": kept,
                    }
                )
                self.log(
                    f"{rid} {c.name} at {rate:,}/s: lag at end {lag_end:,} records ({lag_end / rate:.1f} s), growth "
                    f"{growth or 0:,.0f} records/s, drained {'in %.1f s' % drained if drained is not None else 'NO'}"
                )
            # 3. complete? (every topic's target total equals the source's)
            deadline = time.time() + a.wan_drain_cap
            while True:
                pump(until=time.time() + 0.25)
                totals = {t: samples.last(t) for t in topics}
                missing = {t: (v[1] - v[2]) for t, v in totals.items() if v and v[2] < v[1]}
                if not missing or time.time() > deadline:
                    break
                alive()
            row["complete"] = not missing
            if missing:
                row["missing"] = missing
        except ToolError as e:
            fail = str(e)
        finally:
            if sampler is not None:
                cpu, hwm = sampler.sample()
                row.update(cpu_s=cpu, peak_rss_mb=hwm / float(1 << 20))
                sampler.finish()
            if proc is not None:
                Strait.scrape(run_dir)
                self.b.reg.stop(proc, timeout=30)
            self.b.reg.stop(watch, timeout=5)
            raw.close()
            row["proxy"] = proxy.stop()
            window = row.pop("catchup_window", None)
            if window:
                # the mirror's data crosses the link up (to the target) near the source, down (from the source)
                # near the target
                mbit = link_use(proxy.samples, window[0], window[1], 1 if near_source else 2)
                row["catchup_link_mbit_s"] = mbit
                if mbit is not None and a.wan_bandwidth_mbit > 0:
                    row["link_fill"] = mbit / a.wan_bandwidth_mbit
        if c.name == "strait":
            row.update(strait_figures(run_dir / "metrics.txt"))
        if fail:
            row.update(status="FAILED", reason=fail)
            self.b.notes.append(f"{c.label} FAILED WAN run {rid} ({placement}, {rtt:g} ms): {fail}")
        else:
            row["status"] = "OK" if row.get("complete") else "INCOMPLETE"
            if not row.get("complete"):
                row["reason"] = f"not every record reached the target within the drain cap: {row.get('missing')}"
        return row

    # --- report --------------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        a = self.a
        lines = [
            "## WAN shapes (delay proxy between the mirror and one cluster)\n",
            (
                f"Delay proxy `strait-delay-proxy` (RTT/2 each way, pipelined"
                + (f", {a.wan_bandwidth_mbit} Mbit/s each way" if a.wan_bandwidth_mbit > 0 else "")
                + f"). {a.partitions} partitions, "
                f"{a.wan_record_size} B records, compression {a.wan_compression}, `linger.ms=0` at the source "
                f"(small batches). Backlog: {a.wan_backlog:,} records preloaded at {a.wan_backlog_rate:,}/s, "
                f"catch-up capped at {a.wan_catchup_cap:g} s. Steady rates: {', '.join(f'{r:,}' for r in self.rates)} "
                f"records/s for {a.wan_seconds:g} s each. *Lag at end*: source minus target right after the producer "
                "finished, in seconds of production; *growth*: slope of the lag over the second half of the window. "
                "*Catch-up link Mbit/s*: bytes the proxy carried in the direction of the mirror's data (to the target "
                "near the source, from the source near the target) between the first and the last backlog record on "
                "the target, from the proxy's own counters. "
                f"Keeps up = lag at end < {KEEPS_UP_LAG_S:g} s and growth < {KEEPS_UP_GROWTH:.0%} of the rate. "
                "MM1/MM2 producers: "
                f"linger.ms={a.producer_linger_ms}, batch.size={a.producer_batch_size}.\n"
            ),
        ]
        head = ["RTT ms", "Mirror", "Contender", "Status", "Catch-up records/s", "Catch-up link Mbit/s"]
        if a.wan_bandwidth_mbit > 0:
            head.append(f"% of the {a.wan_bandwidth_mbit} Mbit/s cap")
        for r in self.rates:
            head += [f"{r:,}/s lag at end (s)", f"{r:,}/s growth (rec/s)", f"{r:,}/s keeps up"]
        head += ["Strait records/batch", "Strait batches/request", "CPU s", "Peak RSS MB"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join("---:" if i not in (1, 2, 3) else "---" for i in range(len(head))) + "|")
        # the cap and the link use are per direction of the mirror's data: up near the source, down near the target
        for row in self.rows:
            cells = [
                f"{row['rtt_ms']:g}",
                row["placement"],
                row["label"],
                row["status"],
                fmt(row.get("catchup_records_s"), 0) + ("" if row.get("catchup_complete", True) else " (capped)"),
                fmt(row.get("catchup_link_mbit_s"), 1),
            ]
            if a.wan_bandwidth_mbit > 0:
                fill = row.get("link_fill")
                cells.append("–" if fill is None else f"{100 * fill:.0f}" if fill >= LINK_FILLED else f"**{100 * fill:.0f}**")
            for r in self.rates:
                cells += [
                    fmt(row.get(f"r{r}_lag_end_s"), 1),
                    fmt(row.get(f"r{r}_growth_records_s"), 0),
                    {True: "yes", False: "**no**"}.get(row.get(f"r{r}_keeps_up"), "–"),
                ]
            cells += [
                fmt(row.get("records_per_batch"), 2),
                fmt(row.get("batches_per_request"), 2),
                fmt(row.get("cpu_s"), 1),
                fmt(row.get("peak_rss_mb"), 0),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        failed = [r for r in self.rows if r.get("reason")]
        if failed:
            lines.append("")
            lines += [f"- {r['run']} {r['label']} ({r['placement']}, {r['rtt_ms']:g} ms): {r['reason']}" for r in failed]
        if self.referees:
            lines += [
                "\nReferee: Kafka's ProducerPerformance (acks=all, linger.ms=0) writing the same rate for the same "
                "time through a proxy of the same RTT:\n",
                "| RTT ms | Rate | Achieved records/s | Avg latency ms | Keeps up |",
                "|---:|---:|---:|---:|---|",
            ]
            for r in self.referees:
                lines.append(
                    f"| {r['rtt_ms']:g} | {r['rate']:,} | {r['records_s']:,.0f} | {r['avg_latency_ms']:.0f} | "
                    f"{'yes' if r['keeps_up'] else '**no**'} |"
                )
        return "\n".join(lines) + "\n"

    def write_csv(self, path: Path) -> None:
        keys: list[str] = []
        for row in self.rows + self.referees:
            for k in row:
                if k not in keys:
                    keys.append(k)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["kind", *keys])
            w.writeheader()
            for row in self.rows:
                w.writerow({"kind": "wan", **row})
            for row in self.referees:
                w.writerow({"kind": "referee", **row})


def parse_stats(line: str) -> tuple[float, int, int] | None:
    """`stats <unix ms> <bytes up> <bytes down>` -> (epoch s, up, down); None for anything else."""
    f = line.split()
    if len(f) != 4 or f[0] != "stats" or not all(x.isdigit() for x in f[1:]):
        return None
    return int(f[1]) / 1000, int(f[2]), int(f[3])


def bytes_at(samples: list[tuple[float, int, int]], t: float, direction: int) -> float | None:
    """Bytes carried by time t in one direction (1 = up, 2 = down), interpolated between the proxy's samples."""
    if not samples or t < samples[0][0] or t > samples[-1][0]:
        return None
    for a, b in zip(samples, samples[1:]):
        if a[0] <= t <= b[0]:
            if b[0] == a[0]:
                return float(b[direction])
            return a[direction] + (b[direction] - a[direction]) * (t - a[0]) / (b[0] - a[0])
    return float(samples[-1][direction])


def link_use(samples: list[tuple[float, int, int]], start: float, end: float, direction: int) -> float | None:
    """Mbit/s carried in one direction between two instants (epoch s), or None if the samples do not cover them."""
    a, b = bytes_at(samples, start, direction), bytes_at(samples, end, direction)
    if a is None or b is None or end <= start:
        return None
    return (b - a) * 8 / 1e6 / (end - start)


def parse_perf(out: str, name: str) -> dict:
    finals = [ln for ln in out.splitlines() if "records sent" in ln and "50th" in ln]
    if not finals:
        raise ToolError(f"{name}: no summary line in ProducerPerformance output:\n{out[-2000:]}")
    m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency", finals[-1])
    if not m:
        raise ToolError(f"{name}: cannot parse {finals[-1]!r}")
    return {"records": int(m.group(1)), "records_s": float(m.group(2)), "avg_ms": float(m.group(4))}


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (units per second) of (time, value) points; None with fewer than 3."""
    if len(points) < 3:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den > 0 else None


def strait_figures(metrics: Path) -> dict:
    """Records per target batch and batches per Produce request over the whole run, from Strait's /metrics."""
    try:
        text = metrics.read_text()
    except OSError:
        return {}

    def total(name: str) -> float:
        v = 0.0
        for ln in text.splitlines():
            if ln.startswith(name) and ln[len(name) : len(name) + 1] in (" ", "{"):
                try:
                    v += float(ln.rsplit(" ", 1)[1])
                except ValueError:
                    pass
        return v

    records, batches = total("strait_records_total"), total("strait_batches_total")
    requests = total("strait_produce_request_seconds_count")
    out = {}
    if batches:
        out["records_per_batch"] = records / batches
    if requests:
        out["batches_per_request"] = batches / requests
    return out


def fmt(v, digits: int) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:,.{digits}f}"


def summary_line(row: dict, rates: list[int]) -> str:
    if row["status"] in ("SKIPPED", "FAILED"):
        return f"{row['label']} {row['placement']} {row['rtt_ms']:g} ms: {row['status']} {row.get('reason', '')}"
    parts = [
        f"{row['label']} {row['placement']} {row['rtt_ms']:g} ms: {row['status']}",
        f"catch-up {fmt(row.get('catchup_records_s'), 0)} records/s, {fmt(row.get('catchup_link_mbit_s'), 1)} Mbit/s",
    ]
    for r in rates:
        parts.append(
            f"{r:,}/s lag {fmt(row.get(f'r{r}_lag_end_s'), 1)} s growth {fmt(row.get(f'r{r}_growth_records_s'), 0)}/s"
        )
    return ", ".join(parts)
