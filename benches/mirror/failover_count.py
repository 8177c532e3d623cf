"""What a failed-over consumer group saw (failover phase, see failover.py): duplicates, losses, translation delays.

Pure functions over the output of java/FailoverClient.java, so that the counting is unit-tested
(test_failover_count.py) apart from brokers and mirrors.

Every source record is named by (partition, seq), carried in its value, with seq = 0 .. n[p]-1 in partition p. The
group consumed some of them on the source (before the failover), then the same group id consumed on the target from
where the mirror's translated offsets put it, to the end:

* **duplicate**: a record read on the target that the group had already read (on the source, or earlier on the target);
* **loss**: a record of the source that the group never read, on either cluster;
* a record whose value does not name a record of the source partition it was read from (*alien*) counts apart.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Reads:
    """What one FailoverClient `consume` run printed."""

    starts: dict[int, int] = field(default_factory=dict)  # partition -> offset it was read from
    ranges: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, seq from, seq to), inclusive
    aliens: dict[int, int] = field(default_factory=dict)  # partition -> records not of the bench's source partition
    commit_ms: int | None = None  # epoch ms right after its commitSync returned


def parse_reads(lines: list[str]) -> Reads:
    """Parses FailoverClient `consume` stdout; raises ValueError on a line it does not know."""
    r = Reads()
    for line in lines:
        f = line.split()
        if not f:
            continue
        if f[0] == "start" and len(f) == 3:
            r.starts[int(f[1])] = int(f[2])
        elif f[0] == "read" and len(f) == 4:
            p, a, b = int(f[1]), int(f[2]), int(f[3])
            if b < a:
                raise ValueError(f"bad range {line!r}")
            r.ranges.append((p, a, b))
        elif f[0] == "alien" and len(f) == 3:
            p = int(f[1])
            r.aliens[p] = r.aliens.get(p, 0) + 1
        elif f[0] == "commit" and len(f) == 2:
            r.commit_ms = int(f[1])
        else:
            raise ValueError(f"unexpected FailoverClient line {line!r}")
    return r


def _counts(n: list[int], reads: list[Reads]) -> tuple[list[bytearray], list[int]]:
    """Per partition: how many times each seq was read (saturating at 255), and reads of seqs outside 0..n[p]-1."""
    counts = [bytearray(k) for k in n]
    outside = [0] * len(n)
    for r in reads:
        for p, a, b in r.ranges:
            if p < 0 or p >= len(n):
                raise ValueError(f"read partition {p}, the source topic has {len(n)}")
            c = counts[p]
            for s in range(a, b + 1):
                if s >= len(c):
                    outside[p] += 1
                elif c[s] < 255:
                    c[s] += 1
    return counts, outside


def failover_verdict(n: list[int], source: list[Reads], target: Reads) -> list[dict]:
    """One row per partition: what the group read on the source and on the target, duplicates and losses.

    n[p]: records the source partition p holds (seq 0..n[p]-1); source: the group's runs on the source, in order;
    target: its run on the target after the failover.
    """
    src, src_out = _counts(n, source)
    dst, dst_out = _counts(n, [target])
    rows = []
    for p, k in enumerate(n):
        s, d = src[p], dst[p]
        source_read = sum(s)
        target_read = sum(d)
        # re-read on the target: every target read of a seq the source run had read, plus every target read of a
        # seq beyond its first
        dup = sum(d[i] if s[i] else max(0, d[i] - 1) for i in range(k) if d[i])
        lost = sum(1 for i in range(k) if not s[i] and not d[i])
        rows.append(
            {
                "partition": p,
                "records": k,
                "source_read": source_read,
                "source_duplicates": sum(max(0, c - 1) for c in s),
                "target_start": target.starts.get(p),
                "target_read": target_read,
                "duplicates": dup,
                "losses": lost,
                "aliens": target.aliens.get(p, 0) + sum(r.aliens.get(p, 0) for r in source),
                "outside": src_out[p] + dst_out[p],
            }
        )
    return rows


def totals(rows: list[dict]) -> dict:
    keys = ("records", "source_read", "source_duplicates", "target_read", "duplicates", "losses", "aliens", "outside")
    out = {k: sum(r[k] for r in rows) for k in keys}
    out["partitions_with_duplicates"] = sum(1 for r in rows if r["duplicates"])
    out["partitions_with_losses"] = sum(1 for r in rows if r["losses"])
    out["max_duplicates_per_partition"] = max((r["duplicates"] for r in rows), default=0)
    return out


def parse_offsets(line: str, topic: str) -> tuple[str, int, dict[int, int]]:
    """A FailoverClient `watch-groups` line "offsets <ms> <group> t:p=o,..." -> (group, ms, {p: o} for `topic`)."""
    f = line.split()
    if len(f) != 4 or f[0] != "offsets":
        raise ValueError(f"not an offsets line: {line!r}")
    out: dict[int, int] = {}
    if f[3] != "-":
        for item in f[3].split(","):
            tp, _, off = item.rpartition("=")
            t, _, p = tp.rpartition(":")
            if t == topic:
                out[int(p)] = int(off)
    return f[2], int(f[1]), out


def translation_delays(events: list[tuple[int, dict[int, int]]], t0_ms: int, partitions: int) -> list[dict]:
    """Per partition, when the target group's committed offset moved after a source commit at t0_ms.

    events: (poll time ms, offsets of every partition at that poll) in time order, as the watcher printed them (only
    on change). The baseline is the last value before t0_ms (None: none yet). Returns per partition:
    first_ms = delay of the first change after t0, final = the offset at the last event, final_ms = delay of the
    event that set the final value (None when it never changed after t0).
    """
    base: dict[int, int | None] = {p: None for p in range(partitions)}
    for t, offs in events:
        if t < t0_ms:
            base = {p: offs.get(p) for p in range(partitions)}
    rows = []
    for p in range(partitions):
        first = final_t = None
        value = base[p]
        for t, offs in events:
            if t < t0_ms:
                continue
            v = offs.get(p)
            if v != value:
                value = v
                final_t = t - t0_ms
                if first is None:
                    first = final_t
        rows.append({"partition": p, "before": base[p], "final": value, "first_ms": first, "final_ms": final_t})
    return rows


def spread(values: list[float | None]) -> tuple[float | None, float | None, float | None, int]:
    """(min, median, max) of the values that are not None, and how many were None."""
    xs = [v for v in values if v is not None]
    missing = len(values) - len(xs)
    if not xs:
        return None, None, None, missing
    return min(xs), statistics.median(xs), max(xs), missing
