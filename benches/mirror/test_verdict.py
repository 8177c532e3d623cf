"""Unit tests of the run verdict (python3 -m unittest discover -s benches/mirror): a fast wrong run must not pass."""

import copy
import unittest

from verdict import compare


def digest(parts: list[tuple[int, str]], set_: str = "s", set_ts: str = "st") -> dict:
    return {
        "count": sum(c for c, _ in parts),
        "set": set_,
        "set_ts": set_ts,
        "partitions": [{"end": c, "count": c, "seq": h, "seq_ts": h + "t"} for c, h in parts],
    }


SRC_PARTS = [(10, "a"), (12, "b"), (0, "0")]
SRC = {"ends": [10, 12, 0], "digest": digest(SRC_PARTS)}
OFFS = {"partitions": [10, 12, 0], "bytes": 1234}


class CompareTest(unittest.TestCase):
    def test_exact_copy_passes(self) -> None:
        ok, text, ts_ok, size = compare(SRC, OFFS, digest(SRC_PARTS), per_partition=True)
        self.assertTrue(ok, text)
        self.assertTrue(ts_ok)
        self.assertEqual(size, 1234)

    def test_duplicates_fail(self) -> None:
        td = digest([(11, "a2"), (12, "b"), (0, "0")])
        ok, text, _, _ = compare(SRC, {"partitions": [11, 12, 0], "bytes": 1}, td, per_partition=True)
        self.assertFalse(ok)
        self.assertIn("p0", text)

    def test_reordered_partition_fails(self) -> None:
        td = digest([(10, "a-reordered"), (12, "b"), (0, "0")])
        ok, text, _, _ = compare(SRC, OFFS, td, per_partition=True)
        self.assertFalse(ok)
        self.assertIn("content/order", text)

    def test_missing_partition_fails(self) -> None:
        td = digest([(10, "a"), (12, "b")])
        ok, text, _, _ = compare(SRC, {"partitions": [10, 12], "bytes": 1}, td, per_partition=True)
        self.assertFalse(ok)
        self.assertIn("2 partitions on the target", text)

    def test_lost_timestamps_are_reported_but_pass(self) -> None:
        td = copy.deepcopy(digest(SRC_PARTS))
        td["partitions"][1]["seq_ts"] = "other"
        ok, text, ts_ok, _ = compare(SRC, OFFS, td, per_partition=True)
        self.assertTrue(ok)
        self.assertFalse(ts_ok)
        self.assertIn("timestamps NOT preserved", text)

    def test_repartitioned_copy_passes_per_topic_only(self) -> None:
        td = digest([(7, "x"), (15, "y"), (0, "0")])  # MM1: same records, other partitions
        offs = {"partitions": [7, 15, 0], "bytes": 99}
        self.assertTrue(compare(SRC, offs, td, per_partition=False)[0])
        self.assertFalse(compare(SRC, offs, td, per_partition=True)[0])

    def test_per_topic_content_or_count_mismatch_fails(self) -> None:
        offs = {"partitions": [7, 15, 0], "bytes": 99}
        self.assertFalse(compare(SRC, offs, digest([(7, "x"), (15, "y"), (0, "0")], set_="other"), False)[0])
        self.assertFalse(compare(SRC, {"partitions": [8, 15, 0], "bytes": 99}, digest([(8, "x"), (15, "y")]), False)[0])

    def test_end_offsets_beyond_records_fail_per_topic(self) -> None:
        td = digest([(7, "x"), (15, "y"), (0, "0")])
        ok, text, _, _ = compare(SRC, {"partitions": [8, 15, 0], "bytes": 1}, td, per_partition=False)
        self.assertFalse(ok)
        self.assertIn("end offsets sum", text)


if __name__ == "__main__":
    unittest.main()
