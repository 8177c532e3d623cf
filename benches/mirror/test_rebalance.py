"""Unit tests of the rebalance phase's pause arithmetic (rebalance_stats.py; python3 -m unittest discover -s
benches/mirror)."""

import unittest

import rebalance_stats as rs


class LongestPauseTest(unittest.TestCase):
    def test_steady_progress_pauses_one_interval(self) -> None:
        adv = [i * 0.2 for i in range(100)]
        length, ended = rs.longest_pause(adv, 5.0, 10.0)
        self.assertAlmostEqual(length, 0.2)
        self.assertIsNotNone(ended)

    def test_a_gap_inside_the_window_and_when_it_ended(self) -> None:
        adv = [1.0, 2.0, 3.0, 7.5, 8.0, 9.0]
        self.assertEqual(rs.longest_pause(adv, 0.0, 10.0), (4.5, 7.5))

    def test_a_gap_that_began_before_the_window_is_clipped(self) -> None:
        adv = [1.0, 6.0, 6.5, 7.0]
        length, ended = rs.longest_pause(adv, 4.0, 7.2)
        self.assertEqual((length, ended), (2.0, 6.0))

    def test_a_pause_open_at_the_end_did_not_resume(self) -> None:
        adv = [1.0, 2.0]
        self.assertEqual(rs.longest_pause(adv, 0.0, 10.0), (8.0, None))

    def test_never_advanced_is_paused_all_window(self) -> None:
        self.assertEqual(rs.longest_pause([], 3.0, 5.0), (2.0, None))

    def test_advances_after_the_window_do_not_count(self) -> None:
        adv = [0.5, 1.0, 20.0]
        self.assertEqual(rs.longest_pause(adv, 0.0, 2.0), (1.0, None))


class OwnersTest(unittest.TestCase):
    def test_parse_and_moved(self) -> None:
        state, before = rs.parse_owners('Stable {"s1": [0, 2], "s2": [1, 3]}')
        self.assertEqual(state, "Stable")
        self.assertEqual(before, {0: "s1", 2: "s1", 1: "s2", 3: "s2"})
        _, after = rs.parse_owners('Stable {"s1": [0], "s2": [1, 3], "s3": [2]}')
        self.assertEqual(rs.moved(before, after, 5), {2})  # partition 4: unowned in both, not moved

    def test_settled_prefers_the_last_stable_snapshot(self) -> None:
        snaps = [
            (1.0, "Stable", {0: "a"}),
            (2.0, "PreparingRebalance", {}),
            (3.0, "Stable", {0: "b"}),
            (4.0, "Reconciling", {0: "c"}),
        ]
        self.assertEqual(rs.settled(snaps, 2.5), {0: "a"})
        self.assertEqual(rs.settled(snaps, 10.0), {0: "b"})
        self.assertEqual(rs.settled(snaps, 0.5), {})
        self.assertEqual(rs.settled([(1.0, "Assigning", {0: "x"})], 2.0), {0: "x"})


class SettleTest(unittest.TestCase):
    def test_settled_after_is_the_first_stable_change(self) -> None:
        before = {0: "a", 1: "a"}
        snaps = [
            (9.0, "Stable", before),
            (11.0, "PreparingRebalance", {}),
            (12.0, "Stable", before),  # the first round gave the new member nothing
            (14.5, "Stable", {0: "a", 1: "b"}),
        ]
        self.assertEqual(rs.settled_after(snaps, 10.0, 20.0, before), 4.5)
        self.assertIsNone(rs.settled_after(snaps, 10.0, 14.0, before))

    def test_ready_needs_every_member_with_partitions(self) -> None:
        self.assertTrue(rs.ready({0: "a", 1: "b"}, "Stable", {"a", "b"}, 2))
        self.assertFalse(rs.ready({0: "a", 1: "a"}, "Stable", {"a", "b"}, 2))
        self.assertFalse(rs.ready({0: "a"}, "Stable", {"a"}, 2))
        self.assertFalse(rs.ready({0: "a", 1: "b"}, "PreparingRebalance", {"a", "b"}, 2))


class PhaseStatsTest(unittest.TestCase):
    def test_moved_partitions_pause_and_resume_unmoved_do_not(self) -> None:
        steady = [i * 0.25 for i in range(200)]  # every 0.25 s for 50 s
        adv = {p: steady for p in range(10)}
        # partitions 8 and 9 move at the event (t = 20): nothing from 20 to 23.5
        gap = [t for t in steady if not 20.0 < t < 23.5]
        adv[8] = adv[9] = gap
        s = rs.phase_stats(adv, 10, 20.0, 40.0, 20.0, {8, 9})
        self.assertEqual((s["unmoved"], s["moved"], s["own"]), (8, 2, 0))
        self.assertAlmostEqual(s["unmoved_pause_max"], 0.25)
        self.assertAlmostEqual(s["unmoved_pause_p99"], 0.25)
        self.assertAlmostEqual(s["moved_pause_max"], 3.5)
        self.assertAlmostEqual(s["moved_resume_max"], 3.5)
        self.assertEqual(s["moved_not_resumed"], 0)

    def test_own_partitions_are_apart_and_a_stuck_partition_is_counted(self) -> None:
        steady = [i * 0.5 for i in range(100)]
        adv = {0: steady, 1: [t for t in steady if t < 12], 2: [t for t in steady if not 10 < t < 12]}
        s = rs.phase_stats(adv, 3, 10.0, 30.0, 10.0, {1}, own={2})
        self.assertEqual(s["moved_not_resumed"], 1)
        self.assertIsNone(s["moved_resume_max"])
        self.assertAlmostEqual(s["own_pause_max"], 2.0)
        self.assertAlmostEqual(s["own_resume_max"], 2.0)
        self.assertAlmostEqual(s["unmoved_pause_max"], 0.5)

    def test_percentile_is_nearest_rank(self) -> None:
        self.assertEqual(rs.percentile(list(range(1, 101)), 99), 99)
        self.assertEqual(rs.percentile([5.0], 99), 5.0)
        self.assertIsNone(rs.percentile([], 50))
        self.assertAlmostEqual(rs.poll_spacing([0.0, 0.1, 0.3])["max"], 0.2)


if __name__ == "__main__":
    unittest.main()
