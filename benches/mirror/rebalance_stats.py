"""The pause arithmetic of the rebalance phase (rebalance.py), kept apart so that it is unit-tested
(test_rebalance.py).

Inputs: when each target partition's end offset was seen to grow (`java/RebalanceWatch.java` lists every partition's
end offset every `--rebalance-watch-ms`; an "advance" is a listing where it grew) and the group's assignment snapshots
(owner per partition). Times are seconds on one clock (the watcher's epoch ms / 1000, minus the producer's start).

A partition's *pause* is an interval between two consecutive advances (or between its last advance and the end of the
window): no record of it reached the target then. Measured at the watcher's resolution: a pause is known to within
one listing interval (the achieved interval is reported beside the figures).

A pause alone cannot tell a mirror that stopped from a source that got no writes (a starved producer or source
broker). The watcher therefore also lists the source's end offsets each round: a partition's *lagging pause* is the
part of a pause during which the mirror had something to copy, from the first listing inside it that saw the source
ahead of the target ("behind") or a new source record ("src"), to the target's next advance (longest_lag_pause).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right


def parse_owners(line_rest: str) -> tuple[str, dict[int, str]]:
    """`<state> {"owner": [p, ...], ...}` (RebalanceWatch's owners line after the time) -> (state, {partition: owner})."""
    state, _, js = line_rest.partition(" ")
    owners: dict[int, str] = {}
    for who, parts in json.loads(js or "{}").items():
        for p in parts:
            owners[int(p)] = who
    return state, owners


def settled(snapshots: list[tuple[float, str, dict[int, str]]], at: float) -> dict[int, str]:
    """The assignment in force at `at`: the last snapshot at or before `at` whose group state was Stable (a group in
    the middle of a rebalance shows a partial assignment), else the last one at or before `at`, else {}."""
    last: dict[int, str] = {}
    stable: dict[int, str] | None = None
    for t, state, owners in snapshots:
        if t > at:
            break
        last = owners
        if state.upper() == "STABLE":
            stable = owners
    return stable if stable is not None else last


def moved(before: dict[int, str], after: dict[int, str], n: int) -> set[int]:
    """Partitions (0..n-1) whose owner differs between two assignments (an unowned partition counts as owner None)."""
    return {p for p in range(n) if before.get(p) != after.get(p)}


def longest_pause(adv: list[float], start: float, end: float) -> tuple[float, float | None]:
    """The longest pause of one partition that overlaps [start, end], clipped to it: (length s, when it ended).

    `adv`: the partition's advance times, sorted. A pause still open at `end` ends at `end` and is returned with
    None (not resumed inside the window). Before its first advance a partition is paused since `start`."""
    i = bisect_right(adv, start)
    prev = adv[i - 1] if i > 0 else start
    j = bisect_left(adv, end)
    best = (0.0, start)
    for t in adv[i:j]:
        length = t - max(prev, start)
        if length > best[0]:
            best = (length, t)
        prev = t
    tail = end - max(prev, start)
    if tail > best[0]:
        return (tail, None)
    return best


def longest_lag_pause(
    adv: list[float], src: list[float], behind: list[float], start: float, end: float
) -> tuple[float, float | None]:
    """The longest *lagging* pause of one partition inside [start, end]: like longest_pause, but each pause counts only
    from the first sign that the mirror had something to copy in it, to the target's next advance.

    adv: the target's advance times; src: the source's (a new record was written, seen at the source listing, which
    precedes the round's target listing); behind: the target listings that found the source's end offset ahead of the
    target's. All sorted. In a pause that began at the target advance `a`, the mirror lags from the first `behind` at or
    after `a` (the round of `a` itself may have copied only part of what was there) or the first `src` after `a` (that
    record cannot be on the target at `a`), whichever comes first; a pause with neither is a source with nothing new,
    not a mirror pause, and counts 0. A `src` also catches a partition whose duplicates put the target's end offset at
    or above the source's. Clipped to the window; (0.0, start) when the partition never lagged in a pause."""

    def lag_from(prev: float | None, upto: float) -> float | None:
        """The first sign of lag in the pause (prev, upto): `behind` at or after prev, `src` after prev."""
        cands = []
        k = bisect_left(behind, prev) if prev is not None else 0
        if k < len(behind) and behind[k] < upto:
            cands.append(behind[k])
        k = bisect_right(src, prev) if prev is not None else 0
        if k < len(src) and src[k] < upto:
            cands.append(src[k])
        return min(cands) if cands else None

    i = bisect_right(adv, start)
    prev = adv[i - 1] if i > 0 else None
    j = bisect_left(adv, end)
    best: tuple[float, float | None] = (0.0, start)
    for t in adv[i:j]:
        lag = lag_from(prev, t)
        if lag is not None and t - max(lag, start) > best[0]:
            best = (t - max(lag, start), t)
        prev = t
    lag = lag_from(prev, end)
    if lag is not None and end - max(lag, start) > best[0]:
        return (end - max(lag, start), None)
    return best


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`, None if empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(q / 100 * len(s)))
    return s[k - 1]


def phase_stats(
    adv: dict[int, list[float]],
    n: int,
    start: float,
    end: float,
    event_at: float,
    moved_set: set[int],
    own: set[int] | None = None,
    src: dict[int, list[float]] | None = None,
    behind: dict[int, list[float]] | None = None,
) -> dict:
    """Pauses of one phase [start, end) after an event at `event_at`.

    moved_set: partitions whose owner changed across the event; own: partitions of the instance the event acted on
    that did not move (e.g. a restarted static member's): reported apart, neither moved nor untouched. Every other
    partition is *unmoved*: the ones an incremental protocol must not pause.

    Returns for unmoved partitions the p50/p99/max of each partition's longest pause; for moved ones the p50/max of
    the longest pause, and of the time from the event to the end of that pause (the resume), and how many did not
    resume inside the window; the same for `own`. With the source's listings (`src`, `behind`: see longest_lag_pause)
    also the same figures of the *lagging* pause under `<group>_lag_pause_*` (the pause while the mirror had something
    to copy), and `<group>_lag_resume_*` from the event to the end of that pause."""
    own = (own or set()) - moved_set
    out: dict = {"partitions": n, "moved": len(moved_set), "own": len(own)}

    def summarize(ps: set[int], key: str, resume: bool, measure, resumed_only_after_pause: bool) -> None:
        """`measure(p)` -> (longest pause, when it ended or None); writes `<key>_pause_*` (and `<key>_resume_*`)."""
        pauses, resumes, stuck = [], [], 0
        for p in sorted(ps):
            length, ended = measure(p)
            pauses.append(length)
            if ended is None:
                stuck += 1
            elif length > 0 or not resumed_only_after_pause:
                resumes.append(ended - event_at)
        out[f"{key}_pause_p50"] = percentile(pauses, 50)
        out[f"{key}_pause_p99"] = percentile(pauses, 99)
        out[f"{key}_pause_max"] = max(pauses) if pauses else None
        if resume:
            out[f"{key}_resume_p50"] = percentile(resumes, 50)
            out[f"{key}_resume_max"] = max(resumes) if resumes else None
            out[f"{key}_not_resumed"] = stuck

    def group(ps: set[int], prefix: str, resume: bool) -> None:
        summarize(ps, prefix, resume, lambda p: longest_pause(adv.get(p, []), start, end), False)
        if src is None or behind is None:
            return
        summarize(
            ps,
            f"{prefix}_lag",
            resume,
            lambda p: longest_lag_pause(adv.get(p, []), src.get(p, []), behind.get(p, []), start, end),
            True,
        )

    unmoved = set(range(n)) - moved_set - own
    out["unmoved"] = len(unmoved)
    group(unmoved, "unmoved", False)
    group(moved_set, "moved", True)
    group(own, "own", True)
    return out


def poll_spacing(times: list[float]) -> dict:
    """The watcher's achieved listing interval (p50/p99/max s): the resolution of every pause figure."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"p50": percentile(gaps, 50), "p99": percentile(gaps, 99), "max": max(gaps) if gaps else None}


def settled_after(
    snapshots: list[tuple[float, str, dict[int, str]]], start: float, end: float, before: dict[int, str]
) -> float | None:
    """When the group was Stable again with an assignment other than `before` inside [start, end): seconds after
    `start` of the first such snapshot (at the watcher's ~1 s describe interval), None if none."""
    for t, state, owners in snapshots:
        if start <= t < end and state.upper() == "STABLE" and owners != before:
            return t - start
    return None


def ready(owners: dict[int, str], state: str, members: set[str], n: int) -> bool:
    """A Stable group whose members are exactly `members`, each owning a partition, and every partition owned: the
    assignment an event may act on (a cooperative first round has the new member Stable with nothing yet)."""
    return (
        state.upper() == "STABLE"
        and len(owners) == n
        and set(owners.values()) == members
    )
