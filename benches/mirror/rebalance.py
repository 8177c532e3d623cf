"""Rebalance phase (--rebalance, issue 30): what scaling a group of Strait instances out and in costs each partition,
per group protocol.

Per protocol (`--rebalance-protocols`, default all three, each on fresh one-broker source and target clusters):

* `consumer`: KIP-848 (`mirror.group_protocol = "consumer"`), source Kafka 4.x (the bench's `--kafka-lib4`);
* `cooperative`: the classic protocol with `partition_assignment_strategy = ["cooperative-sticky"]` (KIP-429), source
  Kafka 3.9 (`--kafka-lib39`: the brokers before 4.0 that have no consumer protocol);
* `eager`: the classic protocol with the default strategy (`roundrobin`, `range`: every rebalance revokes everything
  first), source Kafka 3.9.

The target is Kafka 4.x. One topic of `--rebalance-partitions` partitions; one Java producer (java/KillLoad.java
`produce`) writes `--rebalance-rate` records/s, record i to partition i % P, for the whole sequence. Three Strait
instances `s1`..`s3` (static members: `instance_id` as the Helm chart sets it from the pod name) share the group
before the load starts. Then, `--rebalance-every` s apart after `--rebalance-warmup` s of steady load:

1. scale-up: `s4` starts (with `leave_group_on_shutdown = true`: it is the one scaled down later);
2. restart: `s2` gets SIGTERM and is started again at once (a rolling restart: `leave_group_on_shutdown` false);
3. scale-down: `s4` gets SIGTERM and stays down (a static member that leaves on shutdown);
4. crash: `s1` gets SIGKILL and stays down; its partitions move after the session timeout (45 s), so the last
   phase lasts `--rebalance-tail` s.

A watcher (java/RebalanceWatch.java) lists every source partition's end offset, then every target partition's, every
`--rebalance-watch-ms`, and the group's assignment on the source about once a second. Per phase (from its event to the
next event; the baseline is the steady load before the first event), rebalance_stats.phase_stats: a partition's
longest interval without progress on the target, and the longest such interval counted only while the mirror had
something to copy (the *lagging* pause: the source ahead or a new source record); *moved* = its owner differs between the settled assignments before and after the event;
*own* = the partitions of the instance the event acted on that did not move (the restarted member's); every other
partition is *unmoved*. After the production, once every record is visible (`KillLoad watch`), the instances get
SIGTERM and the target is counted (`KillLoad count`, kill_count.summarize): missing, duplicates, out of order.

MirrorMaker 2 is not run here: see `markdown()` (why).
"""

from __future__ import annotations

import csv
import json
import queue
import signal
import time
from pathlib import Path

import cluster
import kill_count as kc
import rebalance_stats as rs
from contenders import RunSpec, Strait
from procs import cpu_seconds, load_average
from tools import ToolError, Watch, tail
from wan import DelayProxy

PROTOCOLS = {
    # name: (source is Kafka 3.9, [mirror] lines)
    "consumer": (False, 'group_protocol = "consumer"\n'),
    "cooperative": (True, 'group_protocol = "classic"\npartition_assignment_strategy = ["cooperative-sticky"]\n'),
    "eager": (True, 'group_protocol = "classic"\n'),
}
EVENTS = ("scale-up", "restart", "scale-down", "crash")


def parse_protocols(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out or any(x not in PROTOCOLS for x in out) or len(set(out)) != len(out):
        raise SystemExit(f"--rebalance-protocols: a list of {', '.join(PROTOCOLS)} without repeats; got {s!r}")
    return out


# The members each event expects to find settled (rebalance_stats.ready) before it acts.
MEMBERS_BEFORE = {
    "scale-up": {"s1", "s2", "s3"},
    "restart": {"s1", "s2", "s3", "s4"},
    "scale-down": {"s1", "s2", "s3", "s4"},
    "crash": {"s1", "s2", "s3"},
}


def schedule(warmup: float, every: float, tail_s: float, slack: float) -> tuple[list[float], float]:
    """The earliest event instants (s after the producer's first send) and the production's length: an event waits
    for the previous rebalance to settle, up to `slack` s in all, so that each phase measures its own event."""
    events = [warmup + k * every for k in range(len(EVENTS))]
    return events, events[-1] + tail_s + slack


class RebalanceBench:
    def __init__(self, bench) -> None:  # noqa: ANN001 - run.Bench (import cycle)
        self.b = bench
        self.a = bench.args
        self.protocols = parse_protocols(self.a.rebalance_protocols)
        self.strait = next((c for c in bench.contenders if isinstance(c, Strait) and not c.exactly_once), None)
        if self.strait is None:
            raise SystemExit("--rebalance needs strait among --contenders")
        for c in bench.contenders:
            if c is not self.strait:
                bench.notes.append(f"{c.label}: not in the rebalance phase (Strait only; see 'MirrorMaker 2' below)")
        self.events, self.seconds = schedule(
            self.a.rebalance_warmup, self.a.rebalance_every, self.a.rebalance_tail, self.a.rebalance_slack
        )
        self.expected = kc.expected_counts(self.a.rebalance_rate, self.seconds, self.a.rebalance_partitions)
        self.rows: list[dict] = []  # one per protocol
        self.phase_rows: list[dict] = []  # one per protocol x phase
        self.seq = 0

    def log(self, msg: str) -> None:
        self.b.log(msg)

    def setup(self) -> None:
        self.b.tools.compile()
        if self.a.rebalance_target_delay_ms > 0 and not Path(self.a.delay_proxy_bin).is_file():
            raise SystemExit(
                f"{self.a.delay_proxy_bin} missing (--rebalance-target-delay-ms needs the delay proxy): "
                "cargo build --release -p strait-testkit --bin strait-delay-proxy, or pass --delay-proxy-bin"
            )

    def run(self) -> None:
        for proto in self.protocols:
            row = self.protocol_run(proto)
            self.rows.append(row)
            self.log(f"rebalance {proto}: {row['status']} {row.get('reason', '')}")

    # --- one protocol --------------------------------------------------------------------------------------------

    def _java(self, name: str, run_dir: Path, *args: str) -> Watch:
        b = self.b
        main, *rest = args
        cmd = b.kafka.tool_cmd(main, *rest, heap="512m", classes=b.tools.classes)
        log = run_dir / f"{name}.log"
        return Watch(b.reg, b.reg.spawn(name, cmd, log, stdout_pipe=True), log)

    def protocol_run(self, proto: str) -> dict:
        a, b = self.a, self.b
        self.seq += 1
        rid = f"r{self.seq:02d}"
        legacy, lines = PROTOCOLS[proto]
        lib = b.kafka.lib39 if legacy else b.kafka.lib4
        row: dict = {"run": rid, "protocol": proto, "source_kafka": lib.parent.name.removeprefix("kafka-")}
        run_dir = b.logs / f"{rid}-rebalance-{proto}"
        run_dir.mkdir(parents=True, exist_ok=True)
        src = dst = proxy = None
        procs: dict[str, object] = {}
        watch = producer = None
        delay = a.rebalance_target_delay_ms
        row["target_delay_ms"] = delay
        try:
            t = time.monotonic()
            src = cluster.start(b.reg, b.kafka, f"src-{rid}", b.work, a.broker_heap, legacy=legacy)
            # a slow target: the instances reach it through a delay proxy (its WAN listener), the watcher directly
            dst = cluster.start(b.reg, b.kafka, f"dst-{rid}", b.work, a.broker_heap,
                                wan_proxy_port=cluster.free_port() if delay > 0 else None)
            if delay > 0:
                proxy = DelayProxy(b.reg, Path(a.delay_proxy_bin), dst.wan_proxy_port, dst.wan_port, delay,
                                   run_dir / "proxy.log")
            mirror_target = dst.wan_bootstrap if delay > 0 else dst.bootstrap
            self.log(f"{rid} {proto}: source (Kafka {row['source_kafka']}) and target ready in {time.monotonic() - t:.1f} s"
                     + (f" (instances reach the target through a {delay:g} ms each-way delay proxy)" if delay > 0 else ""))
            topic = f"rebalance-{rid}"
            group = f"strait-bench-{rid}"
            b.tools.create_topics(src.bootstrap, a.rebalance_partitions, topic)

            def spec(name: str, leave: bool) -> RunSpec:
                d = run_dir / name
                d.mkdir(exist_ok=True)
                extra = f'instance_id = "{name}"\n{lines}' + ("leave_group_on_shutdown = true\n" if leave else "")
                return RunSpec(rid, d, src.bootstrap, mirror_target, topic, "none", 5, 65536, strait_mirror_extra=extra)

            specs = {f"s{k}": spec(f"s{k}", k == 4) for k in range(1, 5)}
            starts = {k: 0 for k in specs}

            def start(name: str) -> None:
                cmd, env = self.strait.command(specs[name])
                starts[name] += 1
                log = specs[name].dir / f"stdout-{starts[name]}.log"
                procs[name] = b.reg.spawn(f"strait-{rid}-{name}", cmd, log, env=env)

            for name in ("s1", "s2", "s3"):
                start(name)
            watch = self._java(
                "watch", run_dir, "RebalanceWatch", dst.bootstrap, topic, src.bootstrap, group, str(a.rebalance_watch_ms)
            )
            watch.wait_for("ready", a.first_timeout)
            # the event stream, from the start: advances per partition, listing times, assignment snapshots
            adv: dict[int, list[float]] = {}
            src_adv: dict[int, list[float]] = {}  # the source's advances (new records to copy)
            behind: dict[int, list[float]] = {}  # listings that found the source ahead of the target
            polls: list[float] = []
            snaps: list[tuple[float, str, dict[int, str]]] = []
            raw = open(run_dir / "watch-events.txt", "w")  # noqa: SIM115 - closed in finally

            def pump(until: float) -> None:
                """Reads the watcher's lines until `until` (epoch s)."""
                while True:
                    left = until - time.time()
                    try:
                        line = watch.events.get(timeout=max(0.01, min(0.2, left)))
                    except queue.Empty:
                        if left <= 0:
                            return
                        continue
                    if line is None:
                        raise RuntimeError(f"watcher died: {tail(watch.log)}")
                    raw.write(line + "\n")
                    kind, ms, rest = (line.split(" ", 2) + ["", ""])[:3]
                    ts = int(ms) / 1000
                    if kind == "adv":
                        polls.append(ts)
                    if kind in ("adv", "src", "behind") and rest != "-":
                        into = {"adv": adv, "src": src_adv, "behind": behind}[kind]
                        for p in rest.split(","):
                            into.setdefault(int(p), []).append(ts)
                    elif kind == "owners":
                        state, owners = rs.parse_owners(rest)
                        snaps.append((ts, state, owners))
                    if left <= 0 and watch.events.empty():
                        return

            try:
                # the three instances share the group before the load starts
                deadline = time.time() + a.first_timeout
                while True:
                    pump(time.time() + 1)
                    if snaps:
                        _, state, owners = snaps[-1]
                        if state.upper() == "STABLE" and len(owners) == a.rebalance_partitions and \
                                len(set(owners.values())) == 3:
                            break
                    for name, p in procs.items():
                        if p.poll() is not None:
                            raise RuntimeError(f"{name} exited with {p.returncode}: "
                                               f"{tail(specs[name].dir / f'stdout-{starts[name]}.log')}")
                    if time.time() > deadline:
                        raise RuntimeError(f"the group did not settle on 3 members within {a.first_timeout:.0f} s")
                row["load_before"] = load_average()
                producer = self._java(
                    "produce", run_dir, "KillLoad", src.bootstrap, "produce", topic, str(a.rebalance_partitions),
                    str(a.rebalance_rate), str(self.seconds), str(a.rebalance_value_bytes),
                )
                t0 = int(producer.wait_for("start", 60)[1]) / 1000
                at: list[float] = []
                waited: list[float] = []
                # CPU s of each instance (and both brokers) at each event and at the end: who was busy in a phase
                cpu: list[dict] = []

                def sample_cpu(label: str) -> None:
                    c = {n: cpu_seconds(p.pid) for n, p in procs.items() if p.poll() is None}
                    c.update(src=cluster.cpu_seconds(src), dst=cluster.cpu_seconds(dst), producer=cpu_seconds(producer.proc.pid))
                    cpu.append({"at": label, "t": round(time.time() - t0, 2), **{k: v for k, v in c.items() if v is not None}})

                due = t0 + self.events[0]
                last_call = t0 + self.seconds - a.rebalance_tail  # the crash needs its tail (the session timeout)
                for event in EVENTS:
                    pump(due)
                    sample_cpu(f"before {event}")
                    # the previous rebalance has settled (or the schedule has no room left to wait)
                    w0 = time.time()
                    while not (snaps and rs.ready(snaps[-1][2], snaps[-1][1], MEMBERS_BEFORE[event],
                                                  a.rebalance_partitions)) and time.time() < last_call:
                        pump(time.time() + 0.5)
                    waited.append(round(time.time() - w0, 2))
                    at.append(time.time() - t0)
                    if event == "scale-up":
                        start("s4")
                    elif event == "restart":
                        row["restart_stop_s"] = b.reg.stop(procs["s2"], timeout=60)
                        start("s2")
                    elif event == "scale-down":
                        row["scale_down_stop_s"] = b.reg.stop(procs["s4"], timeout=60)
                    elif event == "crash":
                        b.reg.stop(procs["s1"], timeout=5, sig=signal.SIGKILL)
                    self.log(f"{rid} {proto}: {event} at {at[-1]:.2f} s (waited {waited[-1]:.1f} s for the group)")
                    due = time.time() + a.rebalance_every
                pump(t0 + self.seconds)
                sample_cpu("end")
                row["cpu"] = cpu
                end_line = producer.wait_for("done", 120)
                row["load_during"] = load_average()
                # A producer that fell behind (a starved machine) ends after the schedule: read the watcher up to its
                # end too, or its last seconds look like a pause of every partition. The last phase ends at the last
                # listing at the latest.
                pump(time.time() + 1)
                produce_end = int(end_line[1]) / 1000 - t0
                t_end = min(produce_end, (polls[-1] if polls else t0) - t0)
                produced = [int(x) for x in end_line[2].split(",")]
                if produced != self.expected:
                    raise RuntimeError(f"producer wrote {produced[:5]}..., expected {self.expected[:5]}...")
                row["produced"] = sum(produced)
                row["produce_s"] = produce_end
                row["measured_s"] = t_end
                row["events"] = [round(x, 2) for x in at]
                row["waited"] = waited
                # phases: the baseline (the steady load's second half before the first event), then each event to the
                # next / to the end of the production
                bounds = [at[0] / 2, *at, t_end]
                labels = ["baseline", *EVENTS]
                acted = {"scale-up": None, "restart": "s2", "scale-down": "s4", "crash": "s1"}
                rel = {p: [x - t0 for x in ts] for p, ts in adv.items()}
                rel_src = {p: [x - t0 for x in ts] for p, ts in src_adv.items()}
                rel_behind = {p: [x - t0 for x in ts] for p, ts in behind.items()}
                rsnaps = [(ts - t0, st, o) for ts, st, o in snaps]
                for k, label in enumerate(labels):
                    start_s, end_s = bounds[k], bounds[k + 1]
                    before = rs.settled(rsnaps, start_s)
                    after = rs.settled(rsnaps, end_s)
                    mv = rs.moved(before, after, a.rebalance_partitions) if label != "baseline" else set()
                    who = acted.get(label)
                    own = {p for p, o in before.items() if o == who} if who else set()
                    s = rs.phase_stats(rel, a.rebalance_partitions, start_s, end_s, start_s, mv, own,
                                       src=rel_src, behind=rel_behind)
                    s.update(run=rid, protocol=proto, phase=label, start_s=round(start_s, 2), end_s=round(end_s, 2),
                             owners_after=len(set(after.values())),
                             settled_s=rs.settled_after(rsnaps, start_s, end_s, before) if label != "baseline" else None)
                    self.phase_rows.append(s)
                row["watch"] = rs.poll_spacing([x - t0 for x in polls if t0 <= x <= t0 + t_end])
                # every record on the target, then stop what is left and count
                done = self._java(
                    "complete", run_dir, "KillLoad", dst.bootstrap, "watch", topic, ",".join(map(str, self.expected)),
                    "500",
                )
                try:
                    done.wait_for("done", a.rebalance_catchup)
                    row["complete"] = True
                except ToolError as e:
                    row["complete"] = False
                    row["reason"] = f"not every record on the target {a.rebalance_catchup:.0f} s after the production: {e}"
                finally:
                    done.stop()
            finally:
                raw.close()
            for name, p in procs.items():
                if p.poll() is None:
                    Strait.scrape(specs[name].dir)
                    b.reg.stop(p, timeout=60)
            out = b.tools._run(f"count-{rid}", "KillLoad", dst.bootstrap, "count", topic, "read_committed", heap="1g",
                               timeout=900)
            s = kc.summarize(self.expected, json.loads(out.strip().splitlines()[-1]))
            row.update({k: v for k, v in s.items() if k != "per_partition"})
            row["verdict"] = kc.verdict(s)
            row["status"] = "OK" if row.get("complete") else "INCOMPLETE"
        except (ToolError, RuntimeError) as e:
            row.update(status="FAILED", reason=str(e))
        finally:
            for w in (watch, producer):
                if w is not None and w.proc.poll() is None:
                    w.stop()
            for p in procs.values():
                if p.poll() is None:
                    b.reg.stop(p, timeout=30)
            if proxy is not None:
                proxy.stop()
            for c in (src, dst):
                if c is not None:
                    cluster.discard(b.reg, c)
        (run_dir / "row.json").write_text(json.dumps(row, indent=1) + "\n")
        return row

    # --- report --------------------------------------------------------------------------------------------------

    def markdown(self) -> str:
        a = self.a
        ev = ", ".join(f"{e} at {t:g} s" for e, t in zip(EVENTS, self.events))
        lines = [
            "## Rebalance: pauses per partition while the group scales\n",
            (
                f"{a.rebalance_partitions:,} partitions, {a.rebalance_rate:,} records/s ({a.rebalance_value_bytes} B "
                f"values) for {self.seconds:g} s; 3 static Strait instances, then (scheduled, s after the first send) "
                f"{ev} at the earliest. One-broker source and target clusters"
                + (f"; a **slow target**: the instances reach it through a delay proxy, {a.rebalance_target_delay_ms:g} ms "
                   "each way (the watcher lists it directly)" if a.rebalance_target_delay_ms > 0 else "")
                + ". A partition's *pause* is its longest interval without "
                f"progress of its end offset on the target inside the phase (listed every {a.rebalance_watch_ms} ms); "
                "its *lagging* pause counts only the part of each such interval in which the mirror had something to "
                "copy (the source's end offset, listed just before the target's each round, was ahead, or the source "
                "got a new record): a source that got no writes (a starved producer or source broker) is not a mirror "
                "pause. "
                "*Unmoved*: owner the same before and after the event (not the instance the event acted on); "
                "*moved*: owner changed; *own*: the restarted instance's partitions. *Resume*: from the event to the "
                "end of the partition's longest pause. *Group settled after*: the first Stable assignment that differs from "
                "the one before the event (the group is described about once a second). Each event waits for the "
                "previous one's assignment to settle (up to the schedule's slack). Times in s.\n"
            ),
            "| Protocol | Source Kafka | Phase | Moved | Unmoved pause p50 / p99 / max | Unmoved lagging pause p50 / p99 "
            "/ max | Moved pause p50 / max | Moved lagging pause p50 / max | Moved resume p50 / max (not resumed) | "
            "Own pause max / lagging max / resume max | Group settled after |",
            "|---|---|---|---:|---|---|---|---|---|---|---:|",
        ]
        kafka = {r["run"]: r["source_kafka"] for r in self.rows}
        for s in self.phase_rows:
            moved = s["moved"] > 0
            lines.append(
                "| "
                + " | ".join(
                    [
                        s["protocol"],
                        kafka.get(s["run"], "?"),
                        s["phase"],
                        f"{s['moved']:,}",
                        f"{_f(s['unmoved_pause_p50'])} / {_f(s['unmoved_pause_p99'])} / **{_f(s['unmoved_pause_max'])}**",
                        f"{_f(s.get('unmoved_lag_pause_p50'))} / {_f(s.get('unmoved_lag_pause_p99'))} / "
                        f"**{_f(s.get('unmoved_lag_pause_max'))}**",
                        f"{_f(s['moved_pause_p50'])} / {_f(s['moved_pause_max'])}" if moved else "–",
                        f"{_f(s.get('moved_lag_pause_p50'))} / **{_f(s.get('moved_lag_pause_max'))}**" if moved else "–",
                        f"{_f(s['moved_resume_p50'])} / **{_f(s['moved_resume_max'])}** ({s['moved_not_resumed']})"
                        if moved
                        else "–",
                        f"{_f(s['own_pause_max'])} / {_f(s.get('own_lag_pause_max'))} / {_f(s['own_resume_max'])}"
                        if s["own"]
                        else "–",
                        _f(s.get("settled_s"), 1),
                    ]
                )
                + " |"
            )
        lines += [
            "",
            "| Protocol | Status | Produced | Missing | Duplicates | Out of order | Verdict | Events at (s) | "
            "Listing interval p50 / p99 / max (s) | Load before / during |",
            "|---|---|---:|---:|---:|---:|---|---|---|---|",
        ]
        for r in self.rows:
            w = r.get("watch") or {}
            lines.append(
                "| "
                + " | ".join(
                    [
                        r["protocol"],
                        r["status"],
                        _n(r.get("produced")),
                        f"**{_n(r.get('missing'))}**",
                        _n(r.get("duplicates")),
                        _n(r.get("out_of_order")),
                        r.get("verdict", "–"),
                        ", ".join(f"{x:.1f}" for x in r.get("events", [])) or "–",
                        f"{_f(w.get('p50'))} / {_f(w.get('p99'))} / {_f(w.get('max'))}",
                        f"{_f(r.get('load_before'), 1)} / {_f(r.get('load_during'), 1)}",
                    ]
                )
                + " |"
            )
        for r in self.rows:
            if r.get("reason"):
                lines.append(f"- {r['run']} {r['protocol']}: **{r['status']}**: {r['reason']}")
        lines.append(
            "\nMirrorMaker 2 is not in this table: scaling it the same way means 3-4 dedicated-mode Connect worker "
            "JVMs (plus the brokers, producer and watcher) on this 2-core machine, and its task assignment lives in "
            "Connect's config topic on the target, not in a consumer group the watcher can describe, so moved and "
            "unmoved partitions could not be told apart the same way.\n"
        )
        return "\n".join(lines) + "\n"

    def settings(self) -> list[str]:
        out = [f"- Strait: {self.strait.settings()}; `instance_id = \"s<k>\"`, `leave_group_on_shutdown = true` on s4"]
        for proto, (legacy, lines) in PROTOCOLS.items():
            if proto in self.protocols:
                out.append(
                    f"- {proto}: source Kafka {(self.b.kafka.lib39 if legacy else self.b.kafka.lib4).parent.name}, "
                    f"`{lines.strip().replace(chr(10), '; ')}`"
                )
        out.append(
            "- Load: java/KillLoad.java produce (acks=all, idempotent, linger.ms=5, no compression, 16 KiB batches above "
            "256 partitions with buffer.memory for two per partition; its buffer-pool wait and request latency once a "
            "second in `logs/*/produce.log`); watcher java/RebalanceWatch.java (Admin listOffsets latest of every "
            "source partition, then of every target partition, each round; describeConsumerGroups ~1/s)"
        )
        return out

    def write_csv(self, path: Path) -> None:
        rows = [{"kind": "protocol", **{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()}}
                for r in self.rows] + [{"kind": "phase", **r} for r in self.phase_rows]
        keys: list[str] = []
        for row in rows:
            for k in row:
                if k not in keys:
                    keys.append(k)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)


def _f(v, digits: int = 2) -> str:  # noqa: ANN001
    return "–" if v is None else f"{v:,.{digits}f}"


def _n(v) -> str:  # noqa: ANN001
    return "–" if v is None else f"{v:,}"
