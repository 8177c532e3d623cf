"""Does the target topic hold exactly the source records? (The harness's verdict on one mirror run.)

Inputs are the JSON of java/BenchAdmin.java `offsets` and java/RecordDigest.java for the source and the target.
"""

from __future__ import annotations


def compare(
    src: dict, offs: dict, td: dict, per_partition: bool, transactional: bool = False
) -> tuple[bool, str, bool, int]:
    """(exact?, text for the report, timestamps equal?, target bytes on disk).

    src: {"ends": [source end offsets], "digest": source RecordDigest}; offs: the target topic's BenchAdmin offsets
    entry; td: the target RecordDigest. per_partition: the mirror keeps partitions (record p -> partition p), so
    every partition must match in end offset, count and order; otherwise (MM1) the topic must match as a multiset.
    transactional: an exactly-once mirror wrote the target in transactions, and td was read read_committed. Its end
    offsets include one marker per transaction and partition (and the offsets of aborted batches), so they are only
    checked to be at least the record count; count, order and content must match the source as always.
    """
    sd = src["digest"]
    problems = []
    ends = offs["partitions"]
    if per_partition:
        if len(ends) != len(src["ends"]):
            problems.append(f"{len(ends)} partitions on the target, {len(src['ends'])} on the source")
        for p, (se, sp) in enumerate(zip(src["ends"], sd["partitions"])):
            if p >= len(td["partitions"]):
                break
            tp = td["partitions"][p]
            if transactional:
                if ends[p] < tp["count"]:
                    problems.append(f"p{p} end offset {ends[p]} < {tp['count']} records read")
            elif ends[p] != se:
                problems.append(f"p{p} end offset {ends[p]} != {se}")
            if tp["count"] != sp["count"]:
                problems.append(f"p{p} holds {tp['count']} records, source {sp['count']}")
            elif tp["seq"] != sp["seq"]:
                problems.append(f"p{p} content/order differs")
        ts_ok = all(t["seq_ts"] == s["seq_ts"] for t, s in zip(td["partitions"], sd["partitions"]))
        good = (
            "exact (read_committed): every partition has the source's record count, order and content"
            if transactional
            else "exact: every partition has the source's end offset, record count, order and content"
        )
    else:
        if td["count"] != sd["count"]:
            problems.append(f"{td['count']:,} records on the target, {sd['count']:,} on the source")
        elif td["set"] != sd["set"]:
            problems.append("record contents differ")
        if sum(ends) != td["count"]:
            problems.append(f"target end offsets sum to {sum(ends):,} for {td['count']:,} records")
        ts_ok = td["set_ts"] == sd["set_ts"]
        good = "exact per topic: same record count and contents (MM1 re-partitions, so not per partition)"
    if problems:
        shown = "; ".join(problems[:6]) + (f"; ... {len(problems) - 6} more" if len(problems) > 6 else "")
        return False, f"MISMATCH: {shown}", ts_ok, offs["bytes"]
    return True, good + ("" if ts_ok else "; timestamps NOT preserved"), ts_ok, offs["bytes"]
