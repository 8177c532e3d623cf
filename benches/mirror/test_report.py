"""Unit tests of report helpers (python3 -m unittest discover -s benches/mirror)."""

import unittest

import report


class LatencySummaryTest(unittest.TestCase):
    def test_median_min_max_per_machine_and_mirror(self) -> None:
        rows = [
            {"contender": "direct", "label": "source only", "status": "OK", "machine": "calm"},
            *[
                {"contender": "strait", "label": "Strait", "status": "OK", "machine": "calm", "added_p50_ms": v,
                 "added_p99_ms": v * 2, "p99_ms": v * 3, "cpu_pct_at_rate": 2.0}
                for v in (3.0, 1.0, 2.0)
            ],
            {"contender": "strait", "label": "Strait", "status": "FAILED", "machine": "busy (2 busy loops)"},
        ]
        text = report.latency_summary(rows)
        self.assertIn("| calm | Strait | 3/3 | 2.0 (1.0–3.0) | 4.0 (2.0–6.0) | 6.0 (3.0–9.0) | 2 (2–2) |", text)
        self.assertIn("| busy (2 busy loops) | Strait | 0/1 | – | – | – | – |", text)
        self.assertNotIn("source only", text)

    def test_spread(self) -> None:
        self.assertEqual(report.spread([]), "–")
        self.assertEqual(report.spread([None, 4.0]), "4.0")


if __name__ == "__main__":
    unittest.main()
