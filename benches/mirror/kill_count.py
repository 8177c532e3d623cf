"""The counting of the kill phase (kills.py), kept apart so that it is unit-tested (test_kill_count.py).

Inputs: the records per partition the producer wrote (seq 0..n_p-1 in partition p, java/KillLoad.java `produce`) and
what `KillLoad count` read from the target: per partition the records read, the distinct seqs among them, the
highest seq, records not naming the partition (alien) and first copies that arrived after a higher seq.
"""

from __future__ import annotations


def schedule(seconds: float, every: float) -> list[float]:
    """The kill instants, in s after the producer's first send: every `every` s, strictly inside the production."""
    if every <= 0:
        return []
    out = []
    k = 1
    while k * every < seconds - 1e-9:
        out.append(round(k * every, 3))
        k += 1
    return out


def expected_counts(rate: float, seconds: float, partitions: int) -> list[int]:
    """Records per partition KillLoad produce writes: int(rate * seconds) records, record i to partition i % n."""
    total = int(rate * seconds)
    return [total // partitions + (1 if p < total % partitions else 0) for p in range(partitions)]


def summarize(expected: list[int], count: dict) -> dict:
    """Missing and duplicate records of one read of the target, in total and per partition.

    missing = seqs the producer wrote that the read did not see; duplicates = records read beyond the first copy of
    their seq; alien = records that do not belong (another partition's, or not the bench's): counted apart.
    """
    parts = count["partitions"]
    rows = []
    for p, n in enumerate(expected):
        c = parts[p] if p < len(parts) else {"records": 0, "distinct": 0, "max_seq": -1, "alien": 0, "out_of_order": 0}
        beyond = max(0, c["max_seq"] + 1 - n)  # seqs above what was written: cannot happen unless values are wrong
        rows.append(
            {
                "partition": p,
                "produced": n,
                "records": c["records"],
                "distinct": c["distinct"],
                "missing": max(0, n - (c["distinct"] - beyond)),
                "duplicates": c["records"] - c["alien"] - c["distinct"],
                "alien": c["alien"] + beyond,
                "out_of_order": c["out_of_order"],
            }
        )
    extra = parts[len(expected) :]
    total = {
        k: sum(r[k] for r in rows) for k in ("produced", "records", "distinct", "missing", "duplicates", "alien")
    }
    total["out_of_order"] = sum(r["out_of_order"] for r in rows)
    total["alien"] += sum(c["records"] for c in extra)
    total["partitions_with_duplicates"] = sum(1 for r in rows if r["duplicates"] > 0)
    total["max_duplicates_in_a_partition"] = max((r["duplicates"] for r in rows), default=0)
    total["partitions_with_missing"] = sum(1 for r in rows if r["missing"] > 0)
    total["per_partition"] = rows
    return total


def verdict(s: dict) -> str:
    """exactly once / at least once / LOSS, for one read (summarize's result)."""
    if s["missing"] > 0:
        return "LOSS"
    if s["alien"] > 0:
        return "WRONG RECORDS"
    if s["duplicates"] > 0 or s["out_of_order"] > 0:
        return "at least once"
    return "exactly once"


def alo_bound(rate: float, commit_interval_s: float, kills: int) -> int:
    """What bounds the duplicates of an at-least-once mirror after `kills` SIGKILLs of a steady load: each restart
    re-sends what was acknowledged since the last commit of source positions, at most one commit interval of
    production (rate x interval), plus the batches in flight at the kill (not counted here: at most max_in_flight
    batches per partition, small at a steady rate). Holds while the mirror keeps up between kills; a mirror that is
    catching up copies faster than `rate` and can re-send more."""
    return int(kills * rate * commit_interval_s)
