"""Unit tests of the failover phase's counting (python3 -m unittest discover -s benches/mirror): a failed-over group
that re-reads or skips records must show it, exactly."""

import unittest

from failover_count import (
    Reads,
    failover_verdict,
    parse_offsets,
    parse_reads,
    spread,
    totals,
    translation_delays,
)


def reads(*ranges: tuple[int, int, int], starts: dict | None = None) -> Reads:
    return Reads(starts=starts or {}, ranges=list(ranges))


class VerdictTest(unittest.TestCase):
    def test_exact_remainder_has_no_duplicates_or_losses(self) -> None:
        n = [10, 8]
        src = [reads((0, 0, 3), (1, 0, 1)), reads((0, 4, 5), (1, 2, 4))]
        dst = reads((0, 6, 9), (1, 5, 7), starts={0: 6, 1: 5})
        rows = failover_verdict(n, src, dst)
        t = totals(rows)
        self.assertEqual((t["duplicates"], t["losses"]), (0, 0))
        self.assertEqual(t["source_read"], 6 + 5)
        self.assertEqual(t["target_read"], 4 + 3)
        self.assertEqual(rows[0]["target_start"], 6)

    def test_rewound_translation_counts_each_reread_record(self) -> None:
        # MM2-like: the group committed 6 on the source, the translation put it at 2 on the target
        rows = failover_verdict([10], [reads((0, 0, 5))], reads((0, 2, 9), starts={0: 2}))
        self.assertEqual(rows[0]["duplicates"], 4)  # seqs 2, 3, 4, 5
        self.assertEqual(rows[0]["losses"], 0)

    def test_translation_past_the_commit_counts_each_skipped_record(self) -> None:
        rows = failover_verdict([10], [reads((0, 0, 5))], reads((0, 8, 9), starts={0: 8}))
        self.assertEqual(rows[0]["losses"], 2)  # seqs 6 and 7 never read
        self.assertEqual(rows[0]["duplicates"], 0)

    def test_untranslated_partition_reset_to_earliest_rereads_everything(self) -> None:
        rows = failover_verdict([10, 4], [reads((0, 0, 5), (1, 0, 3))], reads((0, 6, 9), (1, 0, 3)))
        self.assertEqual([r["duplicates"] for r in rows], [0, 4])
        self.assertEqual(totals(rows)["partitions_with_duplicates"], 1)

    def test_a_record_twice_on_the_target_is_a_duplicate(self) -> None:
        # the mirror wrote seq 7 twice (a re-sent range): the target consumer reads it twice
        rows = failover_verdict([10], [reads((0, 0, 5))], reads((0, 6, 7), (0, 7, 9)))
        self.assertEqual(rows[0]["duplicates"], 1)
        self.assertEqual(rows[0]["losses"], 0)

    def test_records_never_mirrored_are_losses(self) -> None:
        rows = failover_verdict([10], [reads((0, 0, 5))], reads((0, 6, 7)))
        self.assertEqual(rows[0]["losses"], 2)

    def test_outside_and_unknown_partition(self) -> None:
        rows = failover_verdict([3], [reads((0, 0, 2))], reads((0, 3, 4)))
        self.assertEqual(rows[0]["outside"], 2)
        with self.assertRaises(ValueError):
            failover_verdict([3], [reads((1, 0, 0))], reads())


class ParseTest(unittest.TestCase):
    def test_consume_output(self) -> None:
        r = parse_reads(["start 0 5", "read 0 5 9", "alien 1 3", "read 1 0 0", "commit 1700000000123", ""])
        self.assertEqual(r.starts, {0: 5})
        self.assertEqual(r.ranges, [(0, 5, 9), (1, 0, 0)])
        self.assertEqual(r.aliens, {1: 1})
        self.assertEqual(r.commit_ms, 1700000000123)
        with self.assertRaises(ValueError):
            parse_reads(["read 0 9 5"])
        with self.assertRaises(ValueError):
            parse_reads(["hello"])

    def test_watch_line(self) -> None:
        g, t, offs = parse_offsets("offsets 42 app-x src.t:0=5,src.t:11=7,other:1=9", "src.t")
        self.assertEqual((g, t, offs), ("app-x", 42, {0: 5, 11: 7}))
        self.assertEqual(parse_offsets("offsets 43 app-y -", "src.t"), ("app-y", 43, {}))
        with self.assertRaises(ValueError):
            parse_offsets("offsets 43 -", "src.t")


class DelayTest(unittest.TestCase):
    def test_first_and_final_change_after_the_commit(self) -> None:
        events = [
            (100, {0: 10, 1: 20}),  # the earlier commit's translation
            (1100, {0: 10, 1: 20}),
            (1500, {0: 50, 1: 20}),
            (2500, {0: 60, 1: 80}),
        ]
        rows = translation_delays(events, 1000, 3)
        self.assertEqual(rows[0], {"partition": 0, "before": 10, "final": 60, "first_ms": 500, "final_ms": 1500})
        self.assertEqual(rows[1]["first_ms"], 1500)
        self.assertEqual(rows[2], {"partition": 2, "before": None, "final": None, "first_ms": None, "final_ms": None})

    def test_spread(self) -> None:
        self.assertEqual(spread([3.0, None, 1.0, 2.0]), (1.0, 2.0, 3.0, 1))
        self.assertEqual(spread([None]), (None, None, None, 1))


if __name__ == "__main__":
    unittest.main()
