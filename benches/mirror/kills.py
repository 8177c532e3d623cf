"""Kill phase of the side-by-side bench (issue 12): what the target holds after the same SIGKILL sequence, for Strait
at-least-once, Strait exactly-once and MirrorMaker 2 exactly-once (and MM2 at-least-once).

Per contender (a fresh target each, same source cluster, a topic of its own with the same records):

1. the mirror starts on an empty 12-partition source topic; once it has created the target topic, one Java producer
   (java/KillLoad.java `produce`) writes `--kills-rate` records/s for `--kills-seconds` s to explicit partitions
   (record i to partition i % 12, its value naming (partition, seq)); a read_committed watcher on the target
   (`KillLoad watch`) follows which seqs are visible from the start;
2. the mirror is SIGKILLed every `--kills-every` s after the producer's first send (the same instants for every
   contender), and started again at once with the same config;
3. after the production, once the watcher has seen every seq in every partition (or `--kills-catchup` s passed), the
   mirror is stopped with SIGTERM;
4. the target is read from the beginning with read_committed (and, for the exactly-once contenders, also with
   read_uncommitted) and counted per partition (`KillLoad count`, kill_count.py): records missing, duplicates.

Strait runs with `mirror.instance_id` (static membership: a restarted process gets its partitions back at once,
the documented setting for restarts; without it every restart waits out the dead member's session, 45 s); its other
keys keep their defaults (`commit_interval` 5 s). MM2 has no such setting: its restarted Connect worker rejoins the
worker group on the target.
"""

from __future__ import annotations

import csv
import json
import signal
import time
from pathlib import Path

import cluster
import kill_count as kc
from contenders import Contender, RunSpec, Strait
from procs import Sampler
from tools import ToolError, Watch, tail

WATCH_MS = 200


class KillBench:
    """Runs the kill phase with the plumbing of a `run.Bench` (registry, tools, contenders, logging)."""

    def __init__(self, bench) -> None:  # noqa: ANN001 - run.Bench (import cycle)
        self.b = bench
        self.a = bench.args
        self.rows: list[dict] = []
        self.partition_rows: list[dict] = []
        self.seq = 0
        self.contenders: list[Contender] = []
        for c in bench.contenders:
            if c.keeps_partitions:
                self.contenders.append(c)
            else:
                bench.notes.append(f"{c.label}: not in the kill phase (it re-partitions records)")
        if not self.contenders:
            raise SystemExit("--kills needs strait, straiteos, mm2eos and/or mm2 among --contenders")
        self.kills = kc.schedule(self.a.kills_seconds, self.a.kills_every)
        self.expected = kc.expected_counts(self.a.kills_rate, self.a.kills_seconds, self.a.partitions)

    def log(self, msg: str) -> None:
        self.b.log(msg)

    # --- setup ---------------------------------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.a
        self.b.tools.compile()
        t = time.monotonic()
        self.b.source = cluster.start(self.b.reg, self.b.kafka, "src", self.b.work, a.broker_heap)
        src = self.b.source
        self.log(f"source cluster on {src.bootstrap} ready in {time.monotonic() - t:.1f} s")
        # __consumer_offsets exists on the source before any run, as on a real cluster
        self.b.tools.create_topics(src.bootstrap, 1, "bench-coordinator")
        self.b.tools._run(
            "coordinator-produce", "KillLoad", src.bootstrap, "produce", "bench-coordinator", "1", "100", "0.1", "16"
        )
        self.b.tools.consumer_perf("coordinator", src.bootstrap, "bench-coordinator", 1, "bench-coordinator")

    # --- runs ----------------------------------------------------------------------------------------------------

    def order(self, k: int) -> list[Contender]:
        n = len(self.contenders)
        return [self.contenders[(i + k) % n] for i in range(n)]

    def run(self) -> None:
        for rep in range(1, self.a.reps + 1):
            for c in self.order(rep - 1):
                row = self.kill_run(c, rep)
                self.rows.append(row)
                self.log(f"kill run {row['run']} {c.name}: {summary_line(row)}")

    def _loader(self, name: str, *args: str) -> Watch:
        cmd = self.b.kafka.tool_cmd("KillLoad", *args, heap="512m", classes=self.b.tools.classes)
        log = self.b.logs / "tools" / f"{name}.log"
        proc = self.b.reg.spawn(name, cmd, log, stdout_pipe=True)
        return Watch(self.b.reg, proc, log)

    def count(self, name: str, bootstrap: str, topic: str, isolation: str) -> dict:
        out = self.b.tools._run(name, "KillLoad", bootstrap, "count", topic, isolation, heap="1g", timeout=900)
        return json.loads(out.strip().splitlines()[-1])

    def kill_run(self, c: Contender, rep: int) -> dict:
        a = self.a
        b = self.b
        self.seq += 1
        rid = f"k{self.seq:02d}"
        topic = f"kill-{rid}"
        row: dict = {
            "run": rid,
            "rep": rep,
            "contender": c.name,
            "label": c.label,
            "transactional": c.transactional,
            "rate": a.kills_rate,
            "seconds": a.kills_seconds,
        }
        if c.name in b.disabled:
            row.update(status="SKIPPED", reason=b.disabled[c.name])
            return row
        run_dir = b.logs / f"{rid}-{c.name}-kills-r{rep}"
        run_dir.mkdir(parents=True, exist_ok=True)
        src = b.source.bootstrap
        b.tools.create_topics(src, a.partitions, topic)
        target = b.fresh_target()
        extra = f'instance_id = "strait-bench-{rid}"\n' if isinstance(c, Strait) else ""
        spec = RunSpec(rid, run_dir, src, target.bootstrap, topic, "none", 5, 65536, strait_mirror_extra=extra)
        cmd, cenv = c.command(spec)
        (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        instances: list[dict] = []
        cpu_done = [0.0]
        peak = [0]

        def start() -> tuple:
            n = len(instances)
            p = b.reg.spawn(c.name, cmd, run_dir / f"stdout-{n}.log", env=cenv)
            s = Sampler(p.pid)
            s.start()
            instances.append({"started": time.time(), "pid": p.pid})
            return p, s

        def retire(p, s, sig: int, timeout: float) -> float:  # noqa: ANN001
            cpu, hwm = s.sample()
            stop_s = b.reg.stop(p, timeout=timeout, sig=sig)
            s.finish()
            cpu_done[0] += s.cpu if s.cpu else cpu
            peak[0] = max(peak[0], hwm)
            instances[-1]["ended"] = time.time()
            instances[-1]["code"] = p.returncode
            return stop_s

        proc, sampler = start()
        watch = producer = None
        progress = open(run_dir / "progress.txt", "w")  # noqa: SIM115 - closed in finally
        try:
            # 1. the mirror is up once it created the target topic (the source topic is still empty)
            t_start = time.time()
            while True:
                try:
                    b.tools.offsets(target.bootstrap, topic)
                    break
                except ToolError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError(f"{c.label} exited with code {proc.returncode}: {tail(run_dir / 'stdout-0.log')}")
                if time.time() - t_start > a.first_timeout:
                    raise RuntimeError(f"target topic not created {a.first_timeout:.0f} s after start")
                time.sleep(0.5)
            row["topic_created_s"] = time.time() - t_start
            watch = self._loader(
                f"watch-{rid}", target.bootstrap, "watch", topic, ",".join(map(str, self.expected)), str(WATCH_MS)
            )
            watch.wait_for("ready", 120)
            producer = self._loader(
                f"produce-{rid}",
                src,
                "produce",
                topic,
                str(a.partitions),
                str(a.kills_rate),
                str(a.kills_seconds),
                str(a.kills_value_bytes),
            )
            t0 = int(producer.wait_for("start", 60)[1]) / 1000
            visible: list[tuple[float, int]] = []
            done_at = [None]

            def drain(until: float) -> None:
                """Reads the watcher's lines until `until` (epoch s) or until it is done."""
                while time.time() < until and done_at[0] is None:
                    try:
                        line = watch.events.get(timeout=min(0.1, max(0.01, until - time.time())))
                    except Exception:  # noqa: BLE001 - queue.Empty
                        continue
                    if line is None:
                        raise RuntimeError(f"watcher died: {tail(watch.log)}")
                    progress.write(f"{time.time() - t0:.3f} {line}\n")
                    progress.flush()
                    parts = line.split()
                    if parts[0] in ("progress", "done"):
                        visible.append((int(parts[1]) / 1000 - t0, int(parts[2])))
                    if parts[0] == "done":
                        done_at[0] = int(parts[1]) / 1000

            # 2. the same SIGKILL instants for every contender, each followed by a restart at once
            kills = []
            for k in self.kills:
                drain(t0 + k)
                alive = proc.poll() is None
                at = time.time() - t0
                retire(proc, sampler, signal.SIGKILL, 5)
                kills.append({"at_s": round(at, 2), "was_running": alive, "visible": visible[-1][1] if visible else 0})
                proc, sampler = start()
            row["kills"] = kills
            at = ", ".join(f"{k['at_s']:.1f}" for k in kills)
            self.log(f"{rid} {c.name}: SIGKILLed at {at} s")
            # 3. the production ends; wait until every record is visible read_committed
            end_line = producer.wait_for("done", a.kills_seconds + 120)
            t_end = int(end_line[1]) / 1000
            produced = [int(x) for x in end_line[2].split(",")]
            if produced != self.expected:
                raise RuntimeError(f"producer wrote {produced}, expected {self.expected}")
            row["produced"] = sum(produced)
            row["produce_s"] = t_end - t0
            deadline = t_end + a.kills_catchup
            exited = None
            while done_at[0] is None and time.time() < deadline:
                drain(min(deadline, time.time() + 1))
                if proc.poll() is not None and exited is None:
                    last_log = run_dir / f"stdout-{len(instances) - 1}.log"
                    exited = (
                        f"{c.label} exited by itself with code {proc.returncode} {time.time() - t0:.0f} s after the "
                        f"producer started: {tail(last_log)}"
                    )
                    self.log(exited)
                    break
            row["visible_at_end_of_production"] = next((v for t, v in reversed(visible) if t <= row["produce_s"]), 0)
            if done_at[0] is not None:
                row["caught_up_s"] = done_at[0] - t_end
            else:
                row["not_caught_up"] = (
                    exited or f"not every record visible (read_committed) {a.kills_catchup:.0f} s after the production"
                )
                row["visible_at_stop"] = visible[-1][1] if visible else 0
            # 4. SIGTERM, then count what the target holds
            row["stop_s"] = retire(proc, sampler, signal.SIGTERM, 60)
            row["stop_code"] = proc.returncode
            watch.stop()
            watch = None
            row["instances"] = len(instances)
            row["cpu_s"] = cpu_done[0]
            row["peak_rss_mb"] = peak[0] / (1 << 20)
            committed = self.count(f"count-{rid}-committed", target.bootstrap, topic, "read_committed")
            s = kc.summarize(self.expected, committed)
            row.update({k: v for k, v in s.items() if k != "per_partition"})
            row["verdict"] = kc.verdict(s)
            if c.transactional:
                unc = kc.summarize(
                    self.expected, self.count(f"count-{rid}-uncommitted", target.bootstrap, topic, "read_uncommitted")
                )
                row["uncommitted_records"] = unc["records"]
                row["uncommitted_duplicates"] = unc["duplicates"]
                row["uncommitted_missing"] = unc["missing"]
            for pr in s["per_partition"]:
                self.partition_rows.append({"run": rid, "contender": c.name, **pr})
            row["status"] = "OK" if "not_caught_up" not in row else "INCOMPLETE"
            if "not_caught_up" in row:
                row["reason"] = row["not_caught_up"]
            if isinstance(c, Strait):
                Strait.scrape(run_dir)
        except (ToolError, RuntimeError) as e:
            row.update(status="FAILED", reason=str(e))
            if proc.poll() is None:
                retire(proc, sampler, signal.SIGTERM, 30)
        finally:
            progress.close()
            if watch is not None:
                watch.stop()
            if producer is not None and producer.proc.poll() is None:
                producer.stop()
        (run_dir / "instances.json").write_text(json.dumps(instances, indent=1) + "\n")
        return row

    # --- report --------------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        a = self.a
        kills = ", ".join(f"{k:g}" for k in self.kills)
        lines = [
            "## Duplicates after the kill sequence\n",
            (
                f"{sum(self.expected):,} records ({a.kills_rate:,} records/s for {a.kills_seconds:g} s, "
                f"{a.kills_value_bytes} B values, no compression) written by one Java producer to {a.partitions} "
                f"partitions (explicitly, each value naming its partition and seq), while the mirror was SIGKILLed "
                f"at {kills} s after the producer's first send (scheduled; actual instants per run below) and "
                "restarted at once; SIGTERM once every record was visible read_committed on the target (or "
                f"{a.kills_catchup:g} s after the production). Then the target was read from the beginning: *missing* = "
                "records written but not read, *duplicates* = records read beyond the first copy of their seq. "
                "*read_uncommitted* = what a reader with the Java consumer's default isolation sees on the "
                "exactly-once targets (aborted transactions included).\n"
            ),
            "| Rep | Contender | Status | Produced | Missing | Duplicates | Verdict (read_committed) | "
            "Partitions with duplicates | Max duplicates in a partition | Out of order | read_uncommitted records | "
            "read_uncommitted duplicates | Visible at end of production | Catch-up after production s | "
            "Mirror starts | Mirror CPU s | Peak RSS MB |",
            "|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            has = "missing" in r
            lines.append(
                "| "
                + " | ".join(
                    [
                        str(r["rep"]),
                        r["label"],
                        r["status"],
                        _n(r.get("produced")),
                        f"**{_n(r.get('missing'))}**" if has else "–",
                        f"**{_n(r.get('duplicates'))}**" if has else "–",
                        r.get("verdict", "–"),
                        _n(r.get("partitions_with_duplicates")),
                        _n(r.get("max_duplicates_in_a_partition")),
                        _n(r.get("out_of_order")),
                        _n(r.get("uncommitted_records")),
                        _n(r.get("uncommitted_duplicates")),
                        _n(r.get("visible_at_end_of_production")),
                        _f(r.get("caught_up_s"), 1),
                        _n(r.get("instances")),
                        _f(r.get("cpu_s"), 1),
                        _f(r.get("peak_rss_mb"), 0),
                    ]
                )
                + " |"
            )
        lines.append("")
        for r in self.rows:
            if r.get("kills"):
                lines.append(
                    f"- {r['run']} {r['label']}: SIGKILL at "
                    + ", ".join(
                        f"{k['at_s']:.2f} s ({_n(k['visible'])} visible{'' if k['was_running'] else ', had exited'})"
                        for k in r["kills"]
                    )
                    + f"; target topic created {_f(r.get('topic_created_s'), 1)} s after the first start"
                    + (f"; SIGTERM took {_f(r.get('stop_s'), 1)} s (exit code {r.get('stop_code')})" if "stop_s" in r else "")
                )
            if r.get("reason"):
                lines.append(f"- {r['run']} {r['label']}: **{r['status']}**: {r['reason']}")
        bound = kc.alo_bound(a.kills_rate, 5.0, len(self.kills))
        lines.append(
            f"\nAt-least-once bound (kill_count.alo_bound): {len(self.kills)} kills x {a.kills_rate:,} records/s x "
            f"`commit_interval` 5 s = {bound:,} duplicates at most, plus the batches in flight at each kill.\n"
        )
        return "\n".join(lines) + "\n"

    def settings(self) -> list[str]:
        out = []
        for c in self.contenders:
            if isinstance(c, Strait):
                out.append(f"- {c.label}: {c.settings()}; `instance_id = \"strait-bench-<run>\"` (static membership)")
            else:
                out.append(f"- {c.label}: {c.settings()}")
        out.append(
            f"- Load: java/KillLoad.java produce (acks=all, idempotent, linger.ms=5, batch.size=64 KiB, no "
            f"compression), {self.a.kills_rate:,} records/s; watcher and counts: Kafka consumer, read_committed "
            f"(read_uncommitted for the second count of the exactly-once targets)"
        )
        return out

    def write_csv(self, path: Path) -> None:
        rows = [{**r, "kills": json.dumps(r.get("kills", []))} for r in self.rows]
        keys: list[str] = []
        for row in rows + self.partition_rows:
            for k in row:
                if k not in keys:
                    keys.append(k)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["kind", *keys])
            w.writeheader()
            for row in rows:
                w.writerow({"kind": "kills", **row})
            for row in self.partition_rows:
                w.writerow({"kind": "partition", **row})


def _f(v, digits: int = 2) -> str:  # noqa: ANN001
    return "–" if v is None else f"{v:,.{digits}f}"


def _n(v) -> str:  # noqa: ANN001
    return "–" if v is None else f"{v:,}"


def summary_line(row: dict) -> str:
    if row["status"] in ("SKIPPED", "FAILED"):
        return f"{row['status']}: {row.get('reason', '')}"
    return (
        f"{row['status']}: {row.get('produced', 0):,} produced, {row.get('missing', 0):,} missing, "
        f"{row.get('duplicates', 0):,} duplicates ({row.get('verdict')})"
        + (
            f", read_uncommitted {row['uncommitted_records']:,} records / {row['uncommitted_duplicates']:,} duplicates"
            if "uncommitted_records" in row
            else ""
        )
        + (f", caught up {row['caught_up_s']:.1f} s after the production" if "caught_up_s" in row else "")
        + (f"; {row['reason']}" if row.get("reason") else "")
    )

