"""Unit tests of the exactly-once pieces of the bench (python3 -m unittest discover -s benches/mirror): the kill
phase's counting and verdict (kill_count.py), the read_committed verification of an exactly-once target
(verdict.compare with transactional=True) and the Strait exactly-once contender's config."""

import tempfile
import tomllib
import unittest
from pathlib import Path

import kill_count as kc
from contenders import RunSpec, Strait
from verdict import compare


def part(records: int, distinct: int, max_seq: int, alien: int = 0, ooo: int = 0) -> dict:
    return {"records": records, "distinct": distinct, "max_seq": max_seq, "alien": alien, "out_of_order": ooo}


class ScheduleTest(unittest.TestCase):
    def test_every_ten_seconds_inside_the_production(self) -> None:
        self.assertEqual(kc.schedule(60, 10), [10, 20, 30, 40, 50])
        self.assertEqual(kc.schedule(65, 10), [10, 20, 30, 40, 50, 60])
        self.assertEqual(kc.schedule(5, 10), [])
        self.assertEqual(kc.schedule(60, 0), [])

    def test_expected_counts_match_the_producer(self) -> None:
        # record i goes to partition i % n
        self.assertEqual(kc.expected_counts(3000, 60, 12), [15000] * 12)
        self.assertEqual(kc.expected_counts(10, 1.4, 4), [4, 4, 3, 3])
        self.assertEqual(sum(kc.expected_counts(7, 3, 5)), 21)


class SummarizeTest(unittest.TestCase):
    def test_exact_copy(self) -> None:
        s = kc.summarize([5, 3], {"partitions": [part(5, 5, 4), part(3, 3, 2)]})
        self.assertEqual((s["missing"], s["duplicates"], s["alien"]), (0, 0, 0))
        self.assertEqual(kc.verdict(s), "exactly once")

    def test_duplicates_are_records_beyond_the_first_copy(self) -> None:
        s = kc.summarize([5, 3], {"partitions": [part(9, 5, 4), part(3, 3, 2)]})
        self.assertEqual(s["duplicates"], 4)
        self.assertEqual(s["partitions_with_duplicates"], 1)
        self.assertEqual(s["max_duplicates_in_a_partition"], 4)
        self.assertEqual(s["missing"], 0)
        self.assertEqual(kc.verdict(s), "at least once")

    def test_missing_seqs_make_a_loss_even_with_duplicates(self) -> None:
        s = kc.summarize([5, 3], {"partitions": [part(6, 4, 4), part(3, 3, 2)]})
        self.assertEqual((s["missing"], s["duplicates"]), (1, 2))
        self.assertEqual(s["partitions_with_missing"], 1)
        self.assertEqual(kc.verdict(s), "LOSS")

    def test_a_partition_never_read_is_all_missing(self) -> None:
        s = kc.summarize([5, 3], {"partitions": [part(5, 5, 4)]})
        self.assertEqual(s["missing"], 3)
        self.assertEqual(s["produced"], 8)

    def test_alien_records_are_neither_copies_nor_duplicates(self) -> None:
        s = kc.summarize([2], {"partitions": [part(3, 2, 1, alien=1)]})
        self.assertEqual((s["missing"], s["duplicates"], s["alien"]), (0, 0, 1))
        self.assertEqual(kc.verdict(s), "WRONG RECORDS")
        # a seq above what was written is alien too, and does not hide a missing one
        s = kc.summarize([2], {"partitions": [part(2, 2, 2)]})
        self.assertEqual((s["missing"], s["alien"]), (1, 1))

    def test_reordering_is_not_exactly_once(self) -> None:
        s = kc.summarize([3], {"partitions": [part(3, 3, 2, ooo=1)]})
        self.assertEqual(kc.verdict(s), "at least once")

    def test_bound(self) -> None:
        self.assertEqual(kc.alo_bound(3000, 5, 5), 75_000)
        self.assertEqual(kc.alo_bound(3000, 5, 0), 0)


def digest(parts: list[tuple[int, int, str]]) -> dict:
    """(end offset, records, hash) per partition."""
    return {
        "count": sum(c for _, c, _ in parts),
        "set": "s",
        "set_ts": "st",
        "partitions": [{"end": e, "count": c, "seq": h, "seq_ts": h + "t"} for e, c, h in parts],
    }


class TransactionalVerdictTest(unittest.TestCase):
    SRC = {"ends": [10, 12], "digest": digest([(10, 10, "a"), (12, 12, "b")])}

    def test_markers_in_the_end_offsets_pass_read_committed(self) -> None:
        # 3 and 5 transaction markers (and aborted batches) push the target's end offsets past the source's
        offs = {"partitions": [13, 17], "bytes": 1}
        td = digest([(13, 10, "a"), (17, 12, "b")])
        ok, text, _, _ = compare(self.SRC, offs, td, per_partition=True, transactional=True)
        self.assertTrue(ok, text)
        self.assertIn("read_committed", text)
        # the at-least-once check still refuses those end offsets
        self.assertFalse(compare(self.SRC, offs, td, per_partition=True)[0])

    def test_a_duplicate_or_a_gap_still_fails(self) -> None:
        offs = {"partitions": [14, 17], "bytes": 1}
        dup = digest([(14, 11, "a2"), (17, 12, "b")])
        self.assertFalse(compare(self.SRC, offs, dup, per_partition=True, transactional=True)[0])
        gap = digest([(14, 9, "a3"), (17, 12, "b")])
        self.assertFalse(compare(self.SRC, offs, gap, per_partition=True, transactional=True)[0])
        reordered = digest([(13, 10, "a-other-order"), (17, 12, "b")])
        self.assertFalse(compare(self.SRC, offs, reordered, per_partition=True, transactional=True)[0])

    def test_end_below_the_records_read_is_impossible(self) -> None:
        offs = {"partitions": [9, 17], "bytes": 1}
        td = digest([(9, 10, "a"), (17, 12, "b")])
        self.assertFalse(compare(self.SRC, offs, td, per_partition=True, transactional=True)[0])


class StraitEosConfigTest(unittest.TestCase):
    def test_exactly_once_key_once_in_mirror(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            c = Strait(Path("/nonexistent"), None, name="straiteos", label="Strait exactly-once", exactly_once=True)
            self.assertTrue(c.transactional)
            spec = RunSpec("k01", d, "127.0.0.1:1", "127.0.0.1:2", "t", "none", 5, 65536)
            spec.strait_mirror_extra = 'instance_id = "strait-bench-k01"\n'
            c.command(spec)
            conf = tomllib.loads((d / "strait.toml").read_text())
            self.assertIs(conf["mirror"]["exactly_once"], True)
            self.assertEqual(conf["mirror"]["instance_id"], "strait-bench-k01")
            self.assertNotIn("isolation", conf["mirror"])  # stays read_committed, the default
            plain = Strait(Path("/nonexistent"), None)
            self.assertFalse(plain.transactional)
            plain.command(spec)
            self.assertNotIn("exactly_once", tomllib.loads((d / "strait.toml").read_text())["mirror"])


if __name__ == "__main__":
    unittest.main()
