"""Unit tests of the mirrors' config files (python3 -m unittest discover -s benches/mirror): the failover phase's
settings must reach each mirror once, with the value asked for, in the right section."""

import tempfile
import tomllib
import unittest
from pathlib import Path

from cluster import Kafka
from contenders import MirrorMaker2, RunSpec, Strait


def spec(d: Path, **kw) -> RunSpec:
    return RunSpec("f01", d, "127.0.0.1:1", "127.0.0.1:2", "failover", "lz4", 10, 65536, **kw)


def properties(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ln in text.splitlines():
        if ln.strip() and not ln.lstrip().startswith("#"):
            k, _, v = ln.partition("=")
            out.setdefault(k.strip(), []).append(v.strip())
    return out


class ContenderConfigTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        p = Path("/nonexistent")
        self.kafka = Kafka("java", p, p, p, p, p)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_mm2_overrides_replace_in_place_and_append(self) -> None:
        overrides = {"sync.group.offsets.enabled": "true", "groups": "app-f01-.*"}
        MirrorMaker2(self.kafka, "1g", 2).command(spec(self.dir, prefix_topics=True, mm2_overrides=overrides))
        props = properties((self.dir / "mm2.properties").read_text())
        self.assertEqual(props["sync.group.offsets.enabled"], ["true"])
        self.assertEqual(props["groups"], ["app-f01-.*"])
        self.assertNotIn("replication.policy.class", props)  # the default policy: src.<topic>

    def test_mm2_defaults_unchanged(self) -> None:
        MirrorMaker2(self.kafka, "1g", 2).command(spec(self.dir))
        props = properties((self.dir / "mm2.properties").read_text())
        self.assertEqual(props["sync.group.offsets.enabled"], ["false"])
        self.assertEqual(
            props["replication.policy.class"], ["org.apache.kafka.connect.mirror.IdentityReplicationPolicy"]
        )

    def test_mm2zstd_writes_zstd_whatever_the_dataset(self) -> None:
        c = MirrorMaker2(self.kafka, "1g", 2, compression="zstd")
        self.assertEqual(c.name, "mm2zstd")
        c.command(spec(self.dir))  # the dataset is lz4
        props = properties((self.dir / "mm2.properties").read_text())
        self.assertEqual(props["dst.producer.compression.type"], ["zstd"])
        MirrorMaker2(self.kafka, "1g", 2).command(spec(self.dir))
        props = properties((self.dir / "mm2.properties").read_text())
        self.assertEqual(props["dst.producer.compression.type"], ["lz4"])

    def test_strait_failover_keys_in_mirror_section(self) -> None:
        extra = 'groups = ["app-f01-.*"]\nsync_group_offsets = true\n'
        Strait(Path("/bin/true"), None).command(spec(self.dir, prefix_topics=True, strait_mirror_extra=extra))
        cfg = tomllib.loads((self.dir / "strait.toml").read_text())
        self.assertEqual(cfg["mirror"]["rename"], "prefix")
        self.assertEqual(cfg["mirror"]["groups"], ["app-f01-.*"])
        self.assertIs(cfg["mirror"]["sync_group_offsets"], True)
        self.assertIn("listen", cfg["metrics"])

    def test_strait_default_identity(self) -> None:
        Strait(Path("/bin/true"), None).command(spec(self.dir))
        cfg = tomllib.loads((self.dir / "strait.toml").read_text())
        self.assertEqual(cfg["mirror"]["rename"], "identity")
        self.assertNotIn("groups", cfg["mirror"])

    def test_strait_b_mirror_lines_only_for_that_contender(self) -> None:
        # `--strait-b-mirror`: a configuration A/B; the lines follow the run's own [mirror] keys.
        Strait(Path("/bin/true"), None, name="straitb", mirror_extra="max_in_flight = 1\n").command(spec(self.dir))
        cfg = tomllib.loads((self.dir / "strait.toml").read_text())
        self.assertEqual(cfg["mirror"]["max_in_flight"], 1)
        self.assertEqual(cfg["mirror"]["rename"], "identity")
        Strait(Path("/bin/true"), None).command(spec(self.dir))
        self.assertNotIn("max_in_flight", tomllib.loads((self.dir / "strait.toml").read_text())["mirror"])



class Mm2ExactlyOnceTest(unittest.TestCase):
    """The exactly-once MM2 contender (mm2eos): KIP-618 on the target's worker, the internal REST server it needs in
    dedicated mode (KIP-710) on a listener of its own, read_committed on the source; each key once."""

    def test_eos_keys_once(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            p = Path("/nonexistent")
            c = MirrorMaker2(Kafka("java", p, p, p, p, p), "1g", 2, eos=True)
            self.assertEqual(c.name, "mm2eos")
            c.command(spec(d))
            props = properties((d / "mm2.properties").read_text())
            self.assertEqual(props["dst.exactly.once.source.support"], ["enabled"])
            self.assertEqual(props["src.consumer.isolation.level"], ["read_committed"])
            self.assertEqual(props["dedicated.mode.enable.internal.rest"], ["true"])
            self.assertEqual(len(props["listeners"]), 1)
            self.assertTrue(props["listeners"][0].startswith("http://127.0.0.1:"))
            # the plain contender has none of them
            MirrorMaker2(Kafka("java", p, p, p, p, p), "1g", 2).command(spec(d))
            plain = properties((d / "mm2.properties").read_text())
            self.assertNotIn("dst.exactly.once.source.support", plain)
            self.assertNotIn("listeners", plain)


if __name__ == "__main__":
    unittest.main()
