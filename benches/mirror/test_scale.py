"""Unit tests of the scale phase's argument parsing (python3 -m unittest discover -s benches/mirror)."""

import unittest

from scale import parse_shape, parse_targets


class ScaleArgsTest(unittest.TestCase):
    def test_targets(self) -> None:
        self.assertEqual(parse_targets("new"), ["new"])
        self.assertEqual(parse_targets("new, precreated"), ["new", "precreated"])
        for bad in ("", "old", "new,new"):
            with self.assertRaises(SystemExit):
                parse_targets(bad)

    def test_shapes(self) -> None:
        self.assertEqual(parse_shape("idle-500x8"), ("idle", 500, 8))
        with self.assertRaises(SystemExit):
            parse_shape("parts-5")


if __name__ == "__main__":
    unittest.main()
