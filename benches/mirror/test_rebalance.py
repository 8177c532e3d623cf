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


class LagPauseTest(unittest.TestCase):
    """The pause while the mirror had something to copy (the source ahead of the target, or a new source record)."""

    def test_a_source_without_writes_is_not_a_mirror_pause(self) -> None:
        # the target did not advance from 10 to 15 s, but neither did the source until 14.6 s (a starved producer):
        # a 5 s pause on the target, 0.4 s of it with something to copy
        adv = [t / 2 for t in range(0, 41) if not 10 < t / 2 < 15]
        src = [t / 2 - 0.05 for t in range(0, 41) if not 10 < t / 2 < 14.6] + [14.6]
        src.sort()
        self.assertEqual(rs.longest_pause(adv, 0.0, 20.0), (5.0, 15.0))
        length, ended = rs.longest_lag_pause(adv, src, [], 0.0, 20.0)
        self.assertAlmostEqual(length, 0.4)  # from the write at 14.6 s; the steady part lags 0.05 s per record
        self.assertEqual(ended, 15.0)

    def test_a_mirror_pause_while_the_source_is_ahead_counts_whole(self) -> None:
        # the source writes every 0.5 s throughout; the target stops from 10 to 15 s: lagging from the first src
        adv = [t / 2 for t in range(0, 41) if not 10 < t / 2 < 15]
        src = [t / 2 + 0.1 for t in range(0, 40)]
        length, ended = rs.longest_lag_pause(adv, src, [], 0.0, 20.0)
        self.assertAlmostEqual(length, 4.9)
        self.assertEqual(ended, 15.0)

    def test_behind_at_the_advance_itself_counts_from_there(self) -> None:
        # the target advanced at 2 s but was still behind (copying in progress), then stopped until 6 s
        self.assertEqual(rs.longest_lag_pause([1.0, 2.0, 6.0], [], [2.0, 2.2], 0.0, 7.0), (4.0, 6.0))
        # a src in the round of the advance at 2 s (listed just before it) is no sign of lag after 2 s
        length, ended = rs.longest_lag_pause([1.0, 2.0, 6.0], [1.99], [], 0.0, 7.0)
        self.assertAlmostEqual(length, 0.01)
        self.assertEqual(ended, 2.0)

    def test_an_open_lagging_pause_did_not_resume_and_is_clipped(self) -> None:
        self.assertEqual(rs.longest_lag_pause([1.0], [1.5], [2.0], 3.0, 8.0), (5.0, None))
        self.assertEqual(rs.longest_lag_pause([], [], [], 3.0, 8.0), (0.0, 3.0))

    def test_phase_stats_reports_both_figures(self) -> None:
        # partition 0 and 1 unmoved; the source wrote nothing to 0 from 20 to 24.9 s (target: a 5 s pause on both),
        # the mirror stopped copying 1 from 20 to 25 s while the source kept writing
        steady = [i * 0.25 for i in range(200)]
        adv = {0: [t for t in steady if not 20 < t < 25], 1: [t for t in steady if not 20 < t < 25]}
        src = {0: [t - 0.1 for t in steady if not 20 < t - 0.1 < 24.9], 1: [t - 0.1 for t in steady]}
        s = rs.phase_stats(adv, 2, 10.0, 40.0, 10.0, set(), src=src, behind={})
        self.assertAlmostEqual(s["unmoved_pause_max"], 5.0)
        self.assertAlmostEqual(s["unmoved_lag_pause_max"], 5.0 - 0.15)  # 1: from the src at 20.15 to 25
        self.assertAlmostEqual(s["unmoved_lag_pause_p50"], 0.1)  # 0: src 0.1 s before each advance, 24.9 -> 25
        self.assertNotIn("unmoved_lag_pause_max", rs.phase_stats(adv, 2, 10.0, 40.0, 10.0, set()))


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
