"""Unit tests of the WAN phase's link-use arithmetic (python3 -m unittest discover -s benches/mirror)."""

import unittest

from wan import bytes_at, link_use, parse_stats


class LinkUseTest(unittest.TestCase):
    def test_parse_stats(self) -> None:
        self.assertEqual(parse_stats("stats 1000 10 20"), (1.0, 10, 20))
        self.assertIsNone(parse_stats("route 127.0.0.1:1 -> 127.0.0.1:2: 1 connections, 3 bytes up, 4 bytes down"))
        self.assertIsNone(parse_stats("stats 1000 x 20"))

    def test_interpolates_between_samples(self) -> None:
        samples = [(10.0, 0, 0), (11.0, 1_000_000, 10), (12.0, 3_000_000, 20)]
        self.assertEqual(bytes_at(samples, 11.5, 1), 2_000_000)
        self.assertEqual(bytes_at(samples, 10.0, 2), 0)
        self.assertIsNone(bytes_at(samples, 9.0, 1))
        self.assertIsNone(bytes_at(samples, 12.5, 1))
        # 2,500,000 bytes in 1.5 s up: 13.33 Mbit/s
        self.assertAlmostEqual(link_use(samples, 10.5, 12.0, 1), 2_500_000 * 8 / 1e6 / 1.5)
        self.assertIsNone(link_use(samples, 12.0, 12.0, 1))
        self.assertIsNone(link_use([], 1.0, 2.0, 1))


if __name__ == "__main__":
    unittest.main()
