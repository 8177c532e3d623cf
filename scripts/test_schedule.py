"""Unit tests of the test runner's scheduling rule (scripts/test-runner.py `schedule`):
python3 -m unittest discover -s scripts (scripts/test.sh runs them)."""

import importlib.util
import os
import unittest

_spec = importlib.util.spec_from_file_location(
    "test_runner", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-runner.py")
)
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


def ready(*units):
    """(name, weight, seconds) longest first, as the runner orders them; weight >= budget runs alone."""
    return [(name, min(w, 3), secs, w < 3) for name, w, secs in units]


class Schedule(unittest.TestCase):
    def test_longest_first_when_everything_fits(self):
        got = runner.schedule(ready(("a", 1, 90), ("b", 1, 60), ("c", 1, 30), ("d", 1, 10)), 0, 3, [])
        self.assertEqual(got, ["a", "b", "c"])

    def test_a_waiting_heavy_unit_keeps_its_place_against_longer_fillers(self):
        # One slot free, the 3-broker head needs two; the running unit ends in 40 s. A
        # 100 s unit would delay the head: it must wait. A 20 s one ends before: it starts.
        got = runner.schedule(
            ready(("eos_failover", 2, 300), ("wan", 1, 100), ("scale", 1, 20)),
            2,
            3,
            [(40.0, 1), (500.0, 1)],
        )
        self.assertEqual(got, ["scale"])

    def test_the_slot_the_head_leaves_free_is_filled(self):
        # Two slots taken by units ending in 10 s and 400 s; the head (weight 2) can start in
        # 10 s beside... nothing else: it would need both freed. With one unit of weight 1
        # ending at 10 s, free becomes 2 then: the head fits with 0 left; nothing long backfills.
        got = runner.schedule(ready(("head", 2, 300), ("long", 1, 200)), 2, 3, [(10.0, 1), (400.0, 1)])
        self.assertEqual(got, [])
        # Nothing running but the build (weight 1, ending in 100 s): the head fits now; a long
        # unit fits beside it too (budget 3).
        got = runner.schedule(ready(("head", 2, 300), ("long", 1, 200)), 1, 3, [(100.0, 1)])
        self.assertEqual(got, ["head"])

    def test_extra_capacity_at_the_heads_start_takes_long_units(self):
        # Budget 4, 3 used by one unit of weight 3 ending in 50 s: the head (2) starts then with
        # 2 left; one long unit of weight 1 fits now and still leaves room for the head.
        got = runner.schedule(
            [("head", 2, 300, True), ("long1", 1, 200, True), ("long2", 1, 150, True)], 3, 4, [(50.0, 3)]
        )
        self.assertEqual(got, ["long1"])

    def test_units_that_run_alone_never_hold_the_others(self):
        got = runner.schedule(ready(("alone", 99, 500), ("a", 1, 10)), 1, 3, [(30.0, 1)])
        self.assertEqual(got, ["a"])

    def test_overdue_units_count_as_ending_soon(self):
        # A running unit past its expected time counts as ending in 1 s: only units shorter
        # than that backfill.
        got = runner.schedule(ready(("head", 2, 300), ("b", 1, 5)), 2, 3, [(-20.0, 1), (300.0, 1)])
        self.assertEqual(got, [])


if __name__ == "__main__":
    unittest.main()
