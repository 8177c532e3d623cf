"""Failover phase of the side-by-side bench (issue 11): the same consumer-group failover through MirrorMaker 2 and
through Strait, same source data, a fresh target per run, contenders alternating.

Both mirrors write MM2 checkpoints and commit the translated offsets of the groups to the same groups on the target
while they have no members there (MM2: `groups`, `emit.checkpoints.interval.seconds`,
`sync.group.offsets.enabled=true`, `sync.group.offsets.interval.seconds`, `offset.lag.max` left at its default of
100; Strait: `[mirror] groups`, `checkpoint_interval`, `sync_group_offsets = true`, `sync_group_offsets_interval`).
Both name the target topic `src.<topic>` (MM2's default replication policy, Strait's `rename = "prefix"`).

Once, on the source: N records in a 12-partition topic, written by java/FailoverClient.java to explicit partitions,
every value naming its (partition, seq). Then per run, with two consumer groups (Kafka's consumer,
`FailoverClient consume`): *behind*, which reads 30-74 % of every partition (thousands of records behind the end),
and *head*, which reads all but the last 10-87 records of every partition (a group keeping up):

1. a fresh target cluster, a watcher of both groups' committed offsets on the target (`watch-groups`, every 100 ms),
   the mirror; wait until the target topic holds all N records;
2. each group joins on the source and commits its starting offsets (0): the mirror now knows the groups, as it
   would know long-lived ones; wait until they are on the target and have not changed for `--failover-settle` s;
3. each group reads its part (a different amount per partition) and commits at t0 (right after commitSync
   returned); the **delay** per partition is the time from t0 until the watcher first sees the group's offset
   move on the target (min / median / max over partitions); wait until every partition moved and settled;
4. the mirror is stopped (SIGTERM: the site is gone), and the same group ids on the target read from the synced
   offsets (`auto.offset.reset=earliest` where none) to the end of the target topic. **Duplicates**: records read
   there that the group had already read on the source; **losses**: source records the group never read on either
   cluster (failover_count.py, unit-tested in test_failover_count.py).

A record has the same offset on both clusters here (fresh target, no transaction markers, no compaction), so the
exact translation of a commit at source offset c is target offset c: *behind* = commit - synced offset.
"""

from __future__ import annotations

import csv
import queue
import time
from pathlib import Path

import cluster
import failover_count as fc
from contenders import Contender, RunSpec, Strait
from procs import Sampler
from tools import ToolError, Watch, tail

TOPIC = "failover"
GROUP_WATCH_MS = 100


def behind_part(p: int, n: int) -> int:
    """Offset the *behind* group commits in partition p (of n records): 30-74 % of it, uneven."""
    return min(n, n * (30 + 4 * p) // 100 + 13 * p)


def head_part(p: int, n: int) -> int:
    """Offset the *head* group commits in partition p (of n records): 10-87 records before the end."""
    return max(0, n - (10 + 7 * p))


GROUPS = (("behind", behind_part), ("head", head_part))


class FailoverBench:
    """Runs the failover phase with the plumbing of a `run.Bench` (registry, tools, contenders, logging)."""

    def __init__(self, bench) -> None:  # noqa: ANN001 - run.Bench (import cycle)
        self.b = bench
        self.a = bench.args
        self.rows: list[dict] = []
        self.partition_rows: list[dict] = []
        self.seq = 0
        self.n: list[int] = []
        self.contenders: list[Contender] = []
        for c in bench.contenders:
            if c.name == "strait" or c.name.startswith("mm2"):
                self.contenders.append(c)
            else:
                bench.notes.append(f"{c.label}: not in the failover phase (it translates no offsets)")
        if not self.contenders:
            raise SystemExit("--failover needs strait and/or mm2 among --contenders")

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
        self.b.tools.create_topics(src.bootstrap, a.partitions, TOPIC)
        per = a.failover_records // a.partitions
        t = time.monotonic()
        self.b.tools._run(
            "failover-produce",
            "FailoverClient",
            src.bootstrap,
            "produce",
            TOPIC,
            str(a.partitions),
            str(per),
            str(a.failover_value_bytes),
            a.failover_compression,
            timeout=1800,
        )
        ends = self.b.tools.offsets(src.bootstrap, TOPIC)[TOPIC]["partitions"]
        if ends != [per] * a.partitions:
            raise ToolError(f"source topic {TOPIC} has end offsets {ends}, expected {per} in every partition")
        self.n = ends
        self.log(
            f"source {TOPIC}: {sum(ends):,} records ({per:,} per partition, {a.failover_value_bytes} B values, "
            f"{a.failover_compression}) in {time.monotonic() - t:.1f} s"
        )
        # __consumer_offsets exists on the source before any run, as on a real cluster
        self.b.tools.consumer_perf("coordinator", src.bootstrap, TOPIC, 1, "bench-coordinator")

    # --- runs ----------------------------------------------------------------------------------------------------

    def order(self, k: int) -> list[Contender]:
        n = len(self.contenders)
        return [self.contenders[(i + k) % n] for i in range(n)]

    def run(self) -> None:
        k = 0
        for rep in range(1, self.a.reps + 1):
            for c in self.order(k):
                for row in self.failover_run(c, rep):
                    self.rows.append(row)
                    self.log(f"failover run {row['run']} {row['group']}: {summary_line(row)}")
            k += 1

    def consume(self, name: str, bootstrap: str, topic: str, group: str, limits: str) -> fc.Reads:
        out = self.b.tools._run(
            name, "FailoverClient", bootstrap, "consume", topic, group, limits, "earliest", timeout=900
        )
        (self.b.logs / "tools" / f"{name}.out").write_text(out)
        return fc.parse_reads(out.splitlines())

    def failover_run(self, c: Contender, rep: int) -> list[dict]:
        """One mirror run with both groups; one row per group."""
        a = self.a
        self.seq += 1
        rid = f"f{self.seq:02d}"
        groups = {kind: f"app-{rid}-{kind}" for kind, _ in GROUPS}
        ttopic = f"src.{TOPIC}"
        parts = len(self.n)
        base = {"run": rid, "rep": rep, "contender": c.name, "label": c.label, "records": sum(self.n)}
        rows = {kind: {**base, "group": kind} for kind in groups}
        if c.name in self.b.disabled:
            for r in rows.values():
                r.update(status="SKIPPED", reason=self.b.disabled[c.name])
            return list(rows.values())
        run_dir = self.b.logs / f"{rid}-{c.name}-r{rep}"
        run_dir.mkdir(parents=True, exist_ok=True)
        src = self.b.source
        target = self.b.fresh_target()
        interval = a.failover_interval
        pattern = f"app-{rid}-.*"
        spec = RunSpec(
            rid,
            run_dir,
            src.bootstrap,
            target.bootstrap,
            TOPIC,
            a.failover_compression,
            a.producer_linger_ms,
            a.producer_batch_size,
            prefix_topics=True,
            strait_mirror_extra=(
                f'groups = ["{pattern}"]\ncheckpoint_interval = "{interval}s"\n'
                f'sync_group_offsets = true\nsync_group_offsets_interval = "{interval}s"\n'
            ),
            mm2_overrides={
                "groups": pattern,
                "emit.checkpoints.enabled": "true",
                "emit.checkpoints.interval.seconds": str(interval),
                "sync.group.offsets.enabled": "true",
                "sync.group.offsets.interval.seconds": str(interval),
                "refresh.groups.interval.seconds": "5",
            },
        )
        cmd, cenv = c.command(spec)
        (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        ends_watch = self.b.tools.start_watch(f"watch-{rid}", target.bootstrap, ttopic, True, self.n, 100)
        gw_log = run_dir / "group-watch.log"
        gw_proc = self.b.reg.spawn(
            f"group-watch-{rid}",
            self.b.kafka.tool_cmd(
                "FailoverClient",
                target.bootstrap,
                "watch-groups",
                str(GROUP_WATCH_MS),
                *groups.values(),
                heap="128m",
                classes=self.b.tools.classes,
            ),
            gw_log,
            stdout_pipe=True,
        )
        gw = Watch(self.b.reg, gw_proc, gw_log)
        events: dict[str, list[tuple[int, dict[int, int]]]] = {g: [] for g in groups.values()}
        raw = open(run_dir / "group-offsets.txt", "w")  # noqa: SIM115 - closed in finally
        proc = sampler = None
        fail = None
        mirror: dict = {}

        def alive() -> None:
            if proc is not None and proc.poll() is not None:
                raise ToolError(f"{c.label} exited with code {proc.returncode}: {tail(run_dir / 'stdout.log')}")

        def pump(seconds: float) -> None:
            """Moves group-watcher lines into `events` for up to `seconds`."""
            until = time.monotonic() + seconds
            while True:
                try:
                    line = gw.events.get(timeout=max(0.01, until - time.monotonic()))
                except queue.Empty:
                    return
                if line is None:
                    raise ToolError(f"group watcher died: {tail(gw_log)}")
                raw.write(line + "\n")
                raw.flush()
                if line.startswith("offsets "):
                    g, t, offs = fc.parse_offsets(line, ttopic)
                    events[g].append((t, offs))

        def settle(t0: dict[str, int], what: str) -> dict[str, list[dict]]:
            """Waits until every partition of every group moved on the target after its t0 and nothing changed for
            the settle time (or the cap); returns the per-partition delays of each group."""
            cap = time.monotonic() + a.failover_wait
            while True:
                pump(0.25)
                alive()
                delays = {g: fc.translation_delays(events[g], t0[g], parts) for g in t0}
                moved = all(d["first_ms"] is not None for ds in delays.values() for d in ds)
                last_ms = max([t0[g] for g in t0] + [events[g][-1][0] for g in t0 if events[g]])
                if moved and time.time() * 1000 - last_ms >= a.failover_settle * 1000:
                    return delays
                if time.monotonic() > cap:
                    for g, ds in delays.items():
                        missing = [d["partition"] for d in ds if d["first_ms"] is None]
                        if missing:
                            self.log(f"{rid} {c.name} {g}: {what}: partitions {missing} did not move on the target "
                                     f"in {a.failover_wait:g} s")
                    return delays

        try:
            ends_watch.wait_for("ready", 120)
            gw.wait_for("ready", 120)
            t_start = time.time()
            proc = self.b.reg.spawn(c.name, cmd, run_dir / "stdout.log", env=cenv)
            sampler = Sampler(proc.pid)
            sampler.start()
            # 1. the mirror copies the topic
            deadline = time.monotonic() + a.first_timeout + 600
            while True:
                alive()
                try:
                    line = ends_watch.events.get(timeout=0.5)
                except queue.Empty:
                    line = ""
                if line is None:
                    raise ToolError(f"offset watcher died: {tail(ends_watch.log)}")
                if line.startswith("done"):
                    mirror["mirror_complete_s"] = int(line.split()[1]) / 1000 - t_start
                    break
                if time.monotonic() > deadline:
                    raise ToolError("the target topic did not get every record in time")
                pump(0)
            self.log(f"{rid} {c.name}: {ttopic} complete on the target {mirror['mirror_complete_s']:.1f} s after start")
            # 2. the groups join and commit their starting offsets: the mirror knows them before the measured commit
            zeros = ",".join("0" for _ in self.n)
            joined = {}
            for kind, g in groups.items():
                joined[g] = self.consume(f"{rid}-{kind}-join", src.bootstrap, TOPIC, g, zeros).commit_ms
            delays = settle(joined, "join")
            for kind, g in groups.items():
                d = delays[g]
                rows[kind]["join_delay_median_s"] = _s(fc.spread([x["first_ms"] for x in d])[1])
                rows[kind]["join_untranslated"] = sum(1 for x in d if x["first_ms"] is None)
            # 3. the measured commits
            limits = {kind: [f(p, k) for p, k in enumerate(self.n)] for kind, f in GROUPS}
            reads = {}
            t0 = {}
            for kind, g in groups.items():
                reads[kind] = self.consume(
                    f"{rid}-{kind}-source", src.bootstrap, TOPIC, g, ",".join(map(str, limits[kind]))
                )
                t0[g] = reads[kind].commit_ms
            delays = settle(t0, "measured commit")
            # 4. the site is gone: stop the mirror; the groups carry on at the target
            if c.name == "strait":
                Strait.scrape(run_dir)
            cpu, hwm = sampler.sample()
            mirror.update(cpu_s=cpu, peak_rss_mb=hwm / float(1 << 20))
            sampler.finish()
            sampler = None
            self.b.reg.stop(proc, timeout=30)
            proc = None
            pump(0.5)
            for kind, g in groups.items():
                d = delays[g]
                lo, med, hi, missing = fc.spread([x["first_ms"] for x in d])
                rows[kind].update(
                    delay_min_s=_s(lo),
                    delay_median_s=_s(med),
                    delay_max_s=_s(hi),
                    untranslated=missing,
                    final_delay_max_s=_s(fc.spread([x["final_ms"] for x in d])[2]),
                )
                synced = events[g][-1][1] if events[g] else {}
                after = self.consume(f"{rid}-{kind}-target", target.bootstrap, ttopic, g, "end")
                prow = fc.failover_verdict(self.n, [reads[kind]], after)
                for pr, x in zip(prow, d):
                    q = pr["partition"]
                    pr.update(
                        run=rid,
                        contender=c.name,
                        rep=rep,
                        group=kind,
                        commit=limits[kind][q],
                        synced=synced.get(q),
                        behind=limits[kind][q] - synced[q] if q in synced else None,
                        delay_s=_s(x["first_ms"]),
                        final_delay_s=_s(x["final_ms"]),
                    )
                self.partition_rows += prow
                rows[kind].update(fc.totals(prow))
                self.log(f"{rid} {c.name} {kind}: {summary_line({**rows[kind], 'status': 'OK'})}")
        except ToolError as e:
            fail = str(e)
        finally:
            if sampler is not None:
                cpu, hwm = sampler.sample()
                mirror.update(cpu_s=cpu, peak_rss_mb=hwm / float(1 << 20))
                sampler.finish()
            if proc is not None:
                if c.name == "strait":
                    Strait.scrape(run_dir)
                self.b.reg.stop(proc, timeout=30)
            ends_watch.stop()
            gw.stop()
            raw.close()
        if c.name == "strait":
            mirror.update(strait_misses(run_dir / "metrics.txt"))
        for r in rows.values():
            r.update(mirror)
            if fail:
                r.update(status="FAILED", reason=fail)
            else:
                r["status"] = "OK"
        if fail:
            self.b.notes.append(f"{c.label} FAILED failover run {rid}: {fail}")
        return list(rows.values())

    # --- report --------------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        a = self.a
        per = self.n[0] if self.n else 0
        lines = [
            "## Consumer-group failover\n",
            (
                f"{sum(self.n):,} records ({per:,} in each of {len(self.n)} partitions, {a.failover_value_bytes} B "
                f"values, {a.failover_compression}), mirrored to `src.{TOPIC}`. Checkpoint and group-sync interval "
                f"{a.failover_interval:g} s for both mirrors; MM2 `offset.lag.max` at its default (100). Two groups "
                "join on the source and commit offset 0 once the mirror has copied the topic (*join delay*: until "
                "that is on the target); then *behind* reads 30-74 % of every partition and *head* all but the last "
                "10-87 records, and each commits at t0. *Delay* = t0 until the group's offset moves on the target "
                f"(watcher polling every {GROUP_WATCH_MS} ms), min / median / max over partitions. Then the mirror "
                "stops and each group reads the target topic to its end from the synced offsets. *Duplicates* = "
                "records read again after the failover; *losses* = records never read.\n"
            ),
            "| Rep | Contender | Group | Status | Read on source | Read after failover | Duplicates | Losses | "
            "Partitions with duplicates | Max duplicates in a partition | Delay s min / median / max | "
            "Join delay s (median) | Partitions not moved | Mirror CPU s | Peak RSS MB |",
            "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            ok = r["status"] == "OK"
            lines.append(
                "| "
                + " | ".join(
                    [
                        str(r["rep"]),
                        r["label"],
                        r["group"],
                        r["status"],
                        _n(r.get("source_read")) if ok else "–",
                        _n(r.get("target_read")) if ok else "–",
                        _n(r.get("duplicates")) if ok else "–",
                        _n(r.get("losses")) if ok else "–",
                        _n(r.get("partitions_with_duplicates")) if ok else "–",
                        _n(r.get("max_duplicates_per_partition")) if ok else "–",
                        f"{_f(r.get('delay_min_s'))} / {_f(r.get('delay_median_s'))} / {_f(r.get('delay_max_s'))}",
                        _f(r.get("join_delay_median_s")),
                        _n(r.get("untranslated")),
                        _f(r.get("cpu_s"), 1),
                        _f(r.get("peak_rss_mb"), 0),
                    ]
                )
                + " |"
            )
        failed = {(r["run"], r.get("reason")) for r in self.rows if r.get("reason")}
        if failed:
            lines.append("")
            lines += [f"- {run}: {reason}" for run, reason in sorted(failed)]
        for r in self.rows:
            prs = [p for p in self.partition_rows if p["run"] == r["run"] and p["group"] == r["group"]]
            if not prs:
                continue
            lines += [
                f"\n### {r['run']}: {r['label']}, rep {r['rep']}, group *{r['group']}*, per partition\n",
                "*commit* = the group's source offset at t0; *synced* = its offset on the target when the mirror "
                "stopped (the exact translation equals the commit here); *behind* = commit - synced.\n",
                "| Partition | Records | Commit | Synced | Behind | Delay s | Read after failover | Duplicates | "
                "Losses |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for p in prs:
                lines.append(
                    f"| {p['partition']} | {p['records']:,} | {p['commit']:,} | {_n(p['synced'])} | "
                    f"{_n(p['behind'])} | {_f(p['delay_s'])} | {p['target_read']:,} | {p['duplicates']:,} | "
                    f"{p['losses']:,} |"
                )
        return "\n".join(lines) + "\n"

    def settings(self) -> list[str]:
        """Settings lines of the report: how each mirror ran in this phase (not the loopback bench's)."""
        a = self.a
        out = []
        for c in self.contenders:
            if c.name == "strait":
                out.append(
                    f"- {c.label}: `{c.binary} run --config strait.toml`, `rename = \"prefix\"`, "
                    '`groups = ["app-<run>-.*"]`, '
                    f'`checkpoint_interval = "{a.failover_interval}s"`, `sync_group_offsets = true`, '
                    f'`sync_group_offsets_interval = "{a.failover_interval}s"`, other keys default'
                )
            else:
                out.append(
                    f"- {c.label}: {c.settings().replace('IdentityReplicationPolicy', 'DefaultReplicationPolicy')}; "
                    f"`groups = app-<run>-.*`, `emit.checkpoints.interval.seconds = {a.failover_interval}`, "
                    f"`sync.group.offsets.enabled = true`, `sync.group.offsets.interval.seconds = "
                    f"{a.failover_interval}`, `refresh.groups.interval.seconds = 5`, `offset.lag.max` default (100)"
                )
        out.append(
            f"- Group: Kafka {self.b.kafka.lib4.parent.name.removeprefix('kafka-')} consumer "
            "(java/FailoverClient.java), subscribe, manual commitSync, auto.offset.reset=earliest; values written by "
            f"its producer to explicit partitions (acks=all, idempotent, linger.ms=10, {a.failover_compression})"
        )
        return out

    def write_csv(self, path: Path) -> None:
        keys: list[str] = []
        for row in self.rows + self.partition_rows:
            for k in row:
                if k not in keys:
                    keys.append(k)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["kind", *keys])
            w.writeheader()
            for row in self.rows:
                w.writerow({"kind": "failover", **row})
            for row in self.partition_rows:
                w.writerow({"kind": "partition", **row})


def strait_misses(metrics: Path) -> dict:
    """strait_translation_misses_total by reason and strait_groups_synced_total, from Strait's /metrics."""
    try:
        text = metrics.read_text()
    except OSError:
        return {}
    out: dict = {}
    for ln in text.splitlines():
        if ln.startswith("strait_translation_misses_total"):
            reason = ln.split('reason="', 1)[1].split('"', 1)[0] if 'reason="' in ln else "?"
            out[f"strait_misses_{reason}"] = float(ln.rsplit(" ", 1)[1])
        elif ln.startswith("strait_groups_synced_total"):
            out["strait_groups_synced"] = float(ln.rsplit(" ", 1)[1])
    return out


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def _f(v, digits: int = 2) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _n(v) -> str:
    return "–" if v is None else f"{v:,}"


def summary_line(row: dict) -> str:
    if row["status"] != "OK":
        return f"{row['label']}: {row['status']} {row.get('reason', '')}"
    return (
        f"{row['label']}: {row['duplicates']:,} duplicates, {row['losses']:,} losses "
        f"({row['target_read']:,} read after failover); delay {_f(row.get('delay_min_s'))} / "
        f"{_f(row.get('delay_median_s'))} / {_f(row.get('delay_max_s'))} s; {row['untranslated']} partitions "
        "not translated"
    )
