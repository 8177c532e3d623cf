"""Scale shapes (--scale): how each mirror's cost grows with the number of partitions.

Shapes (`--scale-shapes`, default all):

* `parts-<T>x<P>`: T topics of P partitions, every partition preloaded with the same number of 1 KiB lz4 records
  (`--scale-records` per partition), written by one Java producer to explicit partitions (`java/ScaleData.java`);
  several sizes give the cost-against-partition-count curve.
* `idle-<T>x<P>`: the same topics, but only the first `--scale-busy` topics hold data (`--scale-records` per
  partition); every other partition holds ONE record (so that "every partition started" is measurable) and is idle
  after that: the cost of watching thousands of idle partitions while a few carry the data.

For every shape x contender (Strait, MM2; MM1 is not run here: one `--include` regex JVM with 2 streams is not how
MM1 is deployed at this scale, and it re-partitions), alternating order, a fresh target: the mirror is started with the
topic regex `<prefix>-.*`; a watcher (`ScaleData watch`, one JVM) lists every target partition's end offset every
`--scale-watch-ms`; the run ends when every partition holds its source's records, then the mirror is stopped and the
target is read in full (`ScaleData digest`) and compared per partition (count and order-sensitive hash) with the
source: a run that does not hold exactly the source records is FAILED.

Reported per run: throughput (MB/s of record values over the whole run, start-up included), CPU s/GB, peak RSS, time
to first record, time until every partition has started (>= 1 record on the target), RSS per 1,000 partitions (peak RSS
minus the same mirror's peak RSS in the smallest `parts-` shape of the bench, per 1,000 extra partitions), the settled
RSS (VmRSS 5 s after the last record arrived, every partition caught up and idle; and per 1,000 partitions as for the
peak: the steady cost of partitions without the start-up transients), and the
source broker's request counts during the run (Fetch and Metadata, from the broker's own RequestsPerSec meters read
over JMX by `java/BrokerRequests.java`): the mirror is the only client of the source during a run, so these are the
mirror's own requests, measured the same way for both contenders.

`--scale-targets new,precreated` runs every contender twice per shape: once creating the target topics itself (a
fresh target), once with the target topics already created by the bench (with a leader for every partition) before
the mirror starts: the difference is what creating thousands of logs costs the target broker. `--scale-referee` adds,
per shape and target kind, Kafka's own producer writing ONE record to each partition of a fresh target (creating the
topics first for `new`, in CreateTopics requests of 100 topics as Strait does): how fast the broker itself lets a
client start every partition.
"""

from __future__ import annotations

import csv
import json
import queue
import time
from pathlib import Path

import cluster
import report
from contenders import Contender, RunSpec, Strait
from procs import Sampler, cpu_seconds, vm_rss_bytes
from tools import ToolError, tail

# Seconds between the last record and the settled-RSS sample.
SETTLE_S = 5.0
MB = 1 << 20
GB = 1 << 30
PREFIX = "scale"


def parse_shape(s: str) -> tuple[str, int, int]:
    kind, _, dims = s.partition("-")
    t, _, p = dims.partition("x")
    if kind not in ("parts", "idle") or not t.isdigit() or not p.isdigit():
        raise SystemExit(f"bad --scale-shapes entry {s!r}: expected parts-<topics>x<partitions> or idle-<T>x<P>")
    return kind, int(t), int(p)


class ScaleBench:
    def __init__(self, bench) -> None:  # noqa: ANN001 - run.Bench (import cycle)
        self.b = bench
        self.a = bench.args
        self.rows: list[dict] = []
        self.contenders: list[Contender] = []
        for c in bench.contenders:
            if c.name.startswith("strait") or c.name.startswith("mm2"):
                self.contenders.append(c)
            else:
                bench.notes.append(f"{c.label}: not in the scale phase (see benches/mirror/scale.py)")
        if not self.contenders:
            raise SystemExit("--scale needs strait and/or mm2 among --contenders")
        self.shapes = [parse_shape(s.strip()) for s in self.a.scale_shapes.split(",") if s.strip()]
        self.targets = parse_targets(self.a.scale_targets)
        self.referees: list[dict] = []
        self.seq = 0

    def log(self, msg: str) -> None:
        self.b.log(msg)

    def setup(self) -> None:
        self.b.tools.compile()

    def run(self) -> None:
        # one source per shape (topics differ); the shapes run smallest first
        for k, (kind, t, p) in enumerate(self.shapes):
            name = f"{kind}-{t}x{p}"
            src = self.b.source = cluster.start(
                self.b.reg, self.b.kafka, f"src-{name}", self.b.work, self.a.broker_heap, jmx=True
            )
            busy = t if kind == "parts" else min(self.a.scale_busy, t)
            idle_recs = 0 if kind == "parts" else 1
            per = self.a.scale_records
            t0 = time.monotonic()
            self.b.tools._run(f"scale-create-{name}", "ScaleData", src.bootstrap, "create", PREFIX, str(t), str(p), "1", "1", timeout=900)
            out = self.b.tools._run(
                f"scale-produce-{name}", "ScaleData", src.bootstrap, "produce", PREFIX, str(t), str(p), str(busy),
                str(per), str(idle_recs), "1024", str(self.b.payload(1024)), "lz4", heap="1g", timeout=3600,
            )
            records = json.loads(out.strip().splitlines()[-1])["records"]
            dig = self.digest(src.bootstrap, t, f"src-{name}")
            if dig["count"] != records:
                raise RuntimeError(f"source of {name} holds {dig['count']} records, {records} written")
            self.log(f"source {name}: {t * p:,} partitions, {records:,} records preloaded and digested in {time.monotonic() - t0:.0f} s")
            # the source's __consumer_offsets, created on first use of a group, exists before any mirror run
            self.b.tools.consumer_perf(f"coordinator-{name}", src.bootstrap, f"{PREFIX}-000", 1, "bench-coordinator")
            shape = {"shape": name, "kind": kind, "topics": t, "partitions": t * p, "busy_topics": busy,
                     "records": records, "payload_bytes": records * 1024, "src_digest": dig,
                     "dims": (t, p, busy, per, idle_recs)}
            if self.a.scale_referee:
                for tk in self.targets:
                    self.referee(shape, tk)
            for rep in range(1, self.a.scale_reps + 1):
                order = self.contenders[(k + rep - 1) % len(self.contenders):] + self.contenders[: (k + rep - 1) % len(self.contenders)]
                runs = [(c, tk) for tk in self.targets for c in order]
                for pos, (c, tk) in enumerate(runs, 1):
                    r = self.mirror_run(c, shape, rep, pos, tk)
                    self.rows.append(r)
                    f = report.fmt
                    self.log(
                        f"run {r['run']} {c.name} {name} ({tk} target topics) rep {rep}: {r['status']} {f(r.get('mb_s'))} MB/s, "
                        f"{f(r.get('cpu_s_per_gb'), 2)} CPU s/GB, RSS {f(r.get('peak_rss_mb'), 0)} MB, first "
                        f"{f(r.get('first_record_s'), 2)} s, all started {f(r.get('all_started_s'), 2)} s, fetch "
                        f"{f(r.get('fetch_per_s'), 0)}/s, metadata {f(r.get('metadata_requests'))} "
                        f"{r.get('reason', '')}"
                    )
            cluster.discard(self.b.reg, src)
            self.b.source = None
        if self.b.target is not None:
            cluster.discard(self.b.reg, self.b.target)
            self.b.target = None
        self.derive()

    def digest(self, bootstrap: str, topics: int, name: str) -> dict:
        out = self.b.tools._run(f"scale-digest-{name}", "ScaleData", bootstrap, "digest", PREFIX, str(topics), heap="1g", timeout=3600)
        return json.loads(out.strip().splitlines()[-1])

    def referee(self, shape: dict, targets: str) -> None:
        """Kafka's producer, one record to each partition of a fresh target: the broker's pace (see the module doc)."""
        self.b.run_seq += 1
        rid = f"s{self.b.run_seq:02d}"
        target = self.b.fresh_target()
        t, p = shape["topics"], shape["dims"][1]
        row = {"run": rid, "shape": shape["shape"], "partitions": t * p, "targets": targets}
        try:
            if targets == "precreated":
                self.b.tools._run(f"scale-precreate-{rid}", "ScaleData", target.bootstrap, "create", PREFIX, str(t), str(p), "1", "1", timeout=900)
            out = self.b.tools._run(
                f"scale-referee-{rid}", "ScaleData", target.bootstrap, "referee", PREFIX, str(t), str(p),
                "1" if targets == "new" else "0", heap="1g", timeout=900,
            )
            got = json.loads(out.strip().splitlines()[-1])
            row.update(
                status="OK",
                created_s=got["created_ms"] / 1000 if targets == "new" else None,
                first_record_s=got["first_ack_ms"] / 1000,
                all_started_s=got["all_acked_ms"] / 1000,
                errors=got["errors"],
            )
        except (ToolError, ValueError, KeyError) as e:
            row.update(status="FAILED", reason=str(e))
        self.referees.append(row)
        f = report.fmt
        self.log(
            f"referee {rid} {shape['shape']} ({targets} target topics): {row['status']} created "
            f"{f(row.get('created_s'), 2)} s, first ack {f(row.get('first_record_s'), 2)} s, every partition acked "
            f"{f(row.get('all_started_s'), 2)} s, errors {row.get('errors')} {row.get('reason', '')}"
        )

    def mirror_run(self, c: Contender, shape: dict, rep: int, pos: int, targets: str = "new") -> dict:
        a = self.a
        self.b.run_seq += 1
        rid = f"s{self.b.run_seq:02d}"
        row = {"run": rid, "rep": rep, "order": pos, "contender": c.name, "label": c.label, "targets": targets,
               **{k: shape[k] for k in ("shape", "kind", "topics", "partitions", "records", "payload_bytes")}}
        if c.name in self.b.disabled:
            row.update(status="SKIPPED", reason=self.b.disabled[c.name])
            return row
        run_dir = self.b.logs / f"{rid}-{c.name}-{shape['shape']}-{targets}-r{rep}"
        run_dir.mkdir(parents=True, exist_ok=True)
        target = self.b.fresh_target()
        t, p, busy, per, idle = shape["dims"]
        if targets == "precreated":
            # as a user who created the mirrors beforehand; every partition has a leader before the mirror starts
            self.b.tools._run(f"scale-precreate-{rid}", "ScaleData", target.bootstrap, "create", PREFIX, str(t), str(p), "1", "1", timeout=900)
        watch_cmd = self.b.kafka.tool_cmd(
            "ScaleData", target.bootstrap, "watch", PREFIX, str(t), str(p), str(busy), str(per), str(idle),
            str(a.scale_watch_ms), heap="256m", classes=self.b.tools.classes,
        )
        from tools import Watch

        watch = Watch(self.b.reg, self.b.reg.spawn(f"scale-watch-{rid}", watch_cmd, self.b.logs / f"scale-watch-{rid}.log", stdout_pipe=True), self.b.logs / f"scale-watch-{rid}.log")
        watch.wait_for("ready", 120)
        spec = RunSpec(rid, run_dir, self.b.source.bootstrap, target.bootstrap, f"{PREFIX}-.*", "lz4", 10, 65536)
        cmd, cenv = c.command(spec)
        (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
        req0 = self.broker_requests(self.b.source)
        t0 = time.time()
        proc = self.b.reg.spawn(c.name, cmd, run_dir / "stdout.log", env=cenv)
        sampler = Sampler(proc.pid)
        sampler.start()
        first = started = done = None
        total, last_change, fail = 0, t0, None
        while True:
            try:
                line = watch.events.get(timeout=0.05)
            except queue.Empty:
                line = ""
            now = time.time()
            if line is None:
                fail = f"watcher died: {tail(watch.log)}"
                break
            if line:
                ev, ts, n, *_ = line.split()
                if ev == "first":
                    first = int(ts) / 1000
                elif ev == "started":
                    started = int(ts) / 1000
                elif ev == "done":
                    done = int(ts) / 1000
                    break
                if ev == "progress" and int(n) != total:
                    total, last_change = int(n), now
            if proc.poll() is not None:
                fail = f"{c.label} exited with code {proc.returncode}: {tail(run_dir / 'stdout.log')}"
                break
            if first is None and now - t0 > a.first_timeout:
                fail = f"no record on the target {a.first_timeout:.0f} s after start"
                break
            if first is not None and now - last_change > a.stall_timeout:
                fail = f"target stalled at {total:,}/{shape['records']:,} records for {a.stall_timeout:.0f} s"
                break
            if now - t0 > a.run_timeout:
                fail = f"not complete after {a.run_timeout:.0f} s"
                break
        cpu, hwm = sampler.sample()
        # What the mirror holds once every partition is caught up and idle (the steady cost of its
        # partitions), apart from the start-up peak: RSS a few seconds after the last record arrived.
        settled = None
        if not fail:
            time.sleep(SETTLE_S)
            settled = vm_rss_bytes(proc.pid)
        req1 = self.broker_requests(self.b.source)
        (run_dir / "broker-requests.json").write_text(json.dumps({"before": req0, "after": req1}, indent=1) + "\n")
        Strait.scrape(run_dir)
        row["stop_s"] = self.b.reg.stop(proc, timeout=30)
        sampler.finish()
        watch.stop()
        if fail:
            row.update(status="FAILED", reason=fail)
            if first is None:
                self.b.disabled[c.name] = f"not run after it failed in run {rid}: {fail}"
            return row
        elapsed = done - t0
        gb = shape["payload_bytes"] / GB
        row.update(
            elapsed_s=elapsed,
            mb_s=shape["payload_bytes"] / MB / elapsed,
            first_record_s=first - t0 if first else None,
            all_started_s=started - t0 if started else None,
            cpu_s=cpu,
            cpu_s_per_gb=cpu / gb,
            peak_rss_mb=hwm / MB,
            settled_rss_mb=settled / MB if settled else None,
        )
        if req0 and req1:
            for k in ("fetch", "metadata"):
                row[f"{k}_requests"] = req1[k] - req0[k]
                row[f"{k}_per_s"] = (req1[k] - req0[k]) / elapsed
        metrics = run_dir / "metrics.txt"
        if metrics.exists():
            row["strait_metadata_refreshes"] = _metric_sum(metrics.read_text(errors="replace"), "strait_wire_metadata")
        dig = self.digest(target.bootstrap, t, rid)
        src = shape["src_digest"]
        bad = [k for k, v in src["partitions"].items() if dig["partitions"].get(k) != v]
        if dig["count"] == src["count"] and not bad:
            row.update(status="OK", verify=f"exact: {len(src['partitions']):,} partitions, count and order hash each")
        else:
            row.update(status="FAILED", reason=f"target differs from the source in {len(bad)} partitions "
                       f"(e.g. {bad[:3]}); {dig['count']:,} of {src['count']:,} records",
                       verify="MISMATCH")
        return row

    def broker_requests(self, src: cluster.Cluster) -> dict | None:
        """Fetch and Metadata requests the source broker has served so far (its JMX meters), or None."""
        if not src.jmx_port:
            return None
        try:
            out = self.b.tools._run("broker-requests", "BrokerRequests", f"127.0.0.1:{src.jmx_port}", heap="64m", timeout=60)
            return json.loads(out.strip().splitlines()[-1])
        except (ToolError, ValueError) as e:
            self.log(f"broker request counts unavailable: {e}")
            return None

    def derive(self) -> None:
        """RSS per 1,000 partitions: against the same mirror's smallest parts- shape."""
        for c in self.contenders:
            ok = [r for r in self.rows if r["contender"] == c.name and r["status"] == "OK" and r["kind"] == "parts"]
            if not ok:
                continue
            base_n = min(r["partitions"] for r in ok)
            base = min(r["peak_rss_mb"] for r in ok if r["partitions"] == base_n)
            settled = [r["settled_rss_mb"] for r in ok if r["partitions"] == base_n and r.get("settled_rss_mb")]
            for r in self.rows:
                if r["contender"] == c.name and r["status"] == "OK" and r["partitions"] > base_n:
                    k = (r["partitions"] - base_n) / 1000
                    r["rss_mb_per_1000_partitions"] = (r["peak_rss_mb"] - base) / k
                    if settled and r.get("settled_rss_mb"):
                        r["settled_rss_mb_per_1000_partitions"] = (r["settled_rss_mb"] - min(settled)) / k

    # --- report --------------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        a = self.a
        f = report.fmt
        lines = [
            "## Scale shapes\n",
            (
                f"1 KiB lz4 records, {a.scale_records:,} per partition (`parts-`), or per partition of the first "
                f"{a.scale_busy} topics and 1 record in every other partition (`idle-`); single-node KRaft clusters, "
                "plaintext; mirror topic regex `scale-.*`; a fresh target per run; contenders alternate. Fetch and "
                "Metadata requests: counted by the source broker (JMX `kafka.network:type=RequestMetrics,"
                "name=RequestsPerSec`), per second of the run. *RSS per 1,000 partitions*: peak RSS minus the same "
                "mirror's peak in the smallest `parts-` shape, per 1,000 extra partitions. *Settled RSS*: RSS "
                f"{SETTLE_S:g} s after the last record arrived (every partition caught up and idle), and per 1,000 "
                "partitions the same difference of settled RSS.\n"
            ),
            "| Shape | Partitions | Target topics | Rep | Contender | Status | s | MB/s | CPU s/GB | Peak RSS MB | RSS MB / 1,000 partitions "
            "| Settled RSS MB | settled MB / 1,000 partitions | 1st record s | all partitions started s | Fetch req/s (source) | Metadata req (source) | Verification |",
            "|---|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.rows:
            status = r["status"] + (": " + r["reason"].replace("|", "/") if r.get("reason") else "")
            lines.append(
                f"| {r['shape']} | {r['partitions']:,} | {r.get('targets', 'new')} | {r['rep']} | {r['label']} | {status} | {f(r.get('elapsed_s'))} "
                f"| {f(r.get('mb_s'))} | {f(r.get('cpu_s_per_gb'), 2)} | {f(r.get('peak_rss_mb'), 0)} "
                f"| {f(r.get('rss_mb_per_1000_partitions'), 1)} | {f(r.get('settled_rss_mb'), 0)} "
                f"| {f(r.get('settled_rss_mb_per_1000_partitions'), 1)} | {f(r.get('first_record_s'), 2)} "
                f"| {f(r.get('all_started_s'), 2)} | {f(r.get('fetch_per_s'), 0)} | {f(r.get('metadata_requests'))} "
                f"| {r.get('verify', '–')} |"
            )
        if self.referees:
            lines += [
                "\nReferee: Kafka's producer (acks=all, linger.ms=0, 16 sending threads) writing ONE record to each "
                "partition of a fresh target (`new`: after creating the topics in CreateTopics requests of 100 topics, "
                "not waiting for leaders; `precreated`: topics created and led beforehand); seconds since its start:\n",
                "| Shape | Partitions | Target topics | Status | topics created s | 1st record acked s | every partition acked s | send errors |",
                "|---|---:|---|---|---:|---:|---:|---:|",
            ]
            for r in self.referees:
                status = r["status"] + (": " + r["reason"].replace("|", "/") if r.get("reason") else "")
                lines.append(
                    f"| {r['shape']} | {r['partitions']:,} | {r['targets']} | {status} | {f(r.get('created_s'), 2)} "
                    f"| {f(r.get('first_record_s'), 2)} | {f(r.get('all_started_s'), 2)} | {r.get('errors', '–')} |"
                )
        chart = self.chart()
        if chart:
            lines.append(f"\n![cost against partition count]({chart})\n")
        return "\n".join(lines) + "\n"

    def chart(self) -> str | None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        ok = [r for r in self.rows if r["status"] == "OK" and r["kind"] == "parts"]
        if not ok:
            return None
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for c in self.contenders:
            rs = sorted((r for r in ok if r["contender"] == c.name), key=lambda r: r["partitions"])
            if not rs:
                continue
            x = [r["partitions"] for r in rs]
            for ax, key, title in zip(
                axes, ("cpu_s_per_gb", "peak_rss_mb", "all_started_s"),
                ("CPU s per GB", "peak RSS MB", "s until every partition started"),
            ):
                ax.plot(x, [r.get(key) or 0 for r in rs], "o-", label=c.label)
                ax.set_title(title)
                ax.set_xlabel("partitions")
                ax.set_xscale("log")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(self.b.out / "scale.png", dpi=100)
        plt.close(fig)
        return "scale.png"

    def settings(self) -> list[str]:
        return [f"- {c.label}: {c.settings()}; topics = `scale-.*`" for c in self.contenders]

    def write_csv(self, path: Path) -> None:
        keys: list[str] = []
        for row in self.rows + self.referees:
            for k in row:
                if k not in keys:
                    keys.append(k)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["kind_", *keys])
            w.writeheader()
            for row in self.rows:
                w.writerow({"kind_": "scale", **row})
            for row in self.referees:
                w.writerow({"kind_": "scale-referee", **row})


def parse_targets(s: str) -> list[str]:
    """`--scale-targets`: new and/or precreated, in the order given."""
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in ("new", "precreated")]
    if bad or not out or len(set(out)) != len(out):
        raise SystemExit(f"bad --scale-targets {s!r}: expected new, precreated or new,precreated")
    return out


def _metric_sum(text: str, name: str) -> float | None:
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except ValueError:
                pass
    return total if seen else None


_ = cpu_seconds  # kept for symmetry with run.py's imports
