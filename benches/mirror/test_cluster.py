"""Unit tests of the cluster shapes (python3 -m unittest discover -s benches/mirror): server.properties of one node,
three nodes and mTLS, the PKI made by openssl, and the security settings every mirror gets."""

import shutil
import subprocess
import tempfile
import tomllib
import unittest
from pathlib import Path

import cluster
from cluster import Kafka, Pki, Topology, make_pki, server_properties
from contenders import MirrorMaker1, MirrorMaker2, RunSpec, Strait


def props(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ln in text.splitlines():
        if ln.strip() and not ln.lstrip().startswith("#"):
            k, _, v = ln.partition("=")
            assert k.strip() not in out, f"{k} twice"
            out[k.strip()] = v.strip()
    return out


def fake_pki(d: Path) -> Pki:
    return Pki(d, d / "ca.pem", d / "broker.keystore.pem", d / "client.cert.pem", d / "client.key.pem",
               d / "client.keystore.pem")


PORTS = [(9001, 9101), (9002, 9102), (9003, 9103)]


class TopologyTest(unittest.TestCase):
    def test_labels_and_factors(self) -> None:
        self.assertEqual(Topology().label, "1 broker, plaintext")
        self.assertEqual((Topology().rf, Topology().min_isr), (1, 1))
        t = Topology(3, True)
        self.assertEqual((t.rf, t.min_isr), (3, 2))
        self.assertEqual(t.label, "3 brokers, RF 3, min ISR 2, mTLS")
        self.assertEqual(Topology(3).label, "3 brokers, RF 3, min ISR 2, plaintext")


class ServerPropertiesTest(unittest.TestCase):
    def test_single_plaintext_node_is_the_historical_file(self) -> None:
        text = server_properties(Topology(), 1, PORTS[:1], Path("/d"))
        expected = cluster.SERVER_PROPERTIES.format(
            port=9001, cport=9101, data=Path("/d"), wan_listener="", wan_advertised="", wan_map=""
        )
        self.assertEqual(text, expected)

    def test_three_nodes_share_a_static_quorum_with_rf3_min_isr2(self) -> None:
        for node in (1, 2, 3):
            p = props(server_properties(Topology(3), node, PORTS, Path(f"/d{node}")))
            self.assertEqual(p["node.id"], str(node))
            self.assertEqual(p["controller.quorum.voters"], "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103")
            self.assertEqual(p["listeners"], f"PLAINTEXT://127.0.0.1:900{node},CONTROLLER://127.0.0.1:910{node}")
            self.assertEqual(p["advertised.listeners"], f"PLAINTEXT://127.0.0.1:900{node}")
            self.assertEqual(p["log.dirs"], f"/d{node}")
            for k in ("default.replication.factor", "offsets.topic.replication.factor",
                      "transaction.state.log.replication.factor", "share.coordinator.state.topic.replication.factor"):
                self.assertEqual(p[k], "3", k)
            for k in ("min.insync.replicas", "transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr"):
                self.assertEqual(p[k], "2", k)
            self.assertEqual(p["auto.create.topics.enable"], "false")
            self.assertNotIn("ssl.client.auth", p)

    def test_mtls_listener_requires_client_certificates(self) -> None:
        pki = fake_pki(Path("/pki"))
        p = props(server_properties(Topology(3, True), 2, PORTS, Path("/d"), pki))
        self.assertEqual(p["listeners"], "SSL://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102")
        self.assertEqual(p["advertised.listeners"], "SSL://127.0.0.1:9002")
        self.assertEqual(p["inter.broker.listener.name"], "SSL")
        self.assertEqual(p["listener.security.protocol.map"], "CONTROLLER:PLAINTEXT,SSL:SSL")
        self.assertEqual(p["ssl.client.auth"], "required")
        self.assertEqual(p["ssl.keystore.type"], "PEM")
        self.assertEqual(p["ssl.keystore.location"], "/pki/broker.keystore.pem")
        self.assertEqual(p["ssl.truststore.type"], "PEM")
        self.assertEqual(p["ssl.truststore.location"], "/pki/ca.pem")
        # a single mTLS node too
        p1 = props(server_properties(Topology(1, True), 1, PORTS[:1], Path("/d"), pki))
        self.assertEqual((p1["ssl.client.auth"], p1["default.replication.factor"]), ("required", "1"))
        with self.assertRaises(ValueError):
            server_properties(Topology(3, True), 1, PORTS, Path("/d"))


@unittest.skipUnless(shutil.which("openssl"), "openssl not installed")
class PkiTest(unittest.TestCase):
    def test_openssl_pki(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            pki = make_pki(Path(tmp) / "pki")
            for cert in (pki.dir / "broker.cert.pem", pki.client_cert):
                r = subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca_pem), str(cert)],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            broker = subprocess.run(["openssl", "x509", "-in", str(pki.dir / "broker.cert.pem"), "-noout", "-text"],
                                    capture_output=True, text=True, check=True).stdout
            self.assertIn("IP Address:127.0.0.1", broker)
            self.assertIn("TLS Web Server Authentication", broker)
            self.assertIn("TLS Web Client Authentication", broker)
            # unencrypted PKCS#8 keys; a key store = key then certificate
            self.assertTrue(pki.client_key.read_text().startswith("-----BEGIN PRIVATE KEY-----"))
            ks = pki.client_keystore.read_text()
            self.assertLess(ks.index("BEGIN PRIVATE KEY"), ks.index("BEGIN CERTIFICATE"))
            self.assertEqual(props(pki.write_java_client().read_text()), pki.java_client())


class MirrorSecurityTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        p = Path("/nonexistent")
        self.kafka = Kafka("java", p, p, p, p, p)
        self.pki = fake_pki(Path("/pki"))

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def spec(self, **kw) -> RunSpec:
        return RunSpec("t01", self.dir, "127.0.0.1:1,127.0.0.1:2", "127.0.0.1:3", "perf-1k-lz4", "lz4", 10, 65536, **kw)

    def test_strait_gets_ssl_settings_for_both_clusters(self) -> None:
        Strait(Path("/bin/true"), None).command(self.spec(pki=self.pki))
        cfg = tomllib.loads((self.dir / "strait.toml").read_text())
        for side in ("source", "target"):
            self.assertEqual(cfg[side]["security.protocol"], "SSL")
            self.assertEqual(cfg[side]["ssl.ca.location"], "/pki/ca.pem")
            self.assertEqual(cfg[side]["ssl.certificate.location"], "/pki/client.cert.pem")
            self.assertEqual(cfg[side]["ssl.key.location"], "/pki/client.key.pem")
        self.assertEqual(cfg["source"]["bootstrap.servers"], "127.0.0.1:1,127.0.0.1:2")
        Strait(Path("/bin/true"), None).command(self.spec())
        cfg = tomllib.loads((self.dir / "strait.toml").read_text())
        self.assertNotIn("security.protocol", cfg["source"])
        self.assertNotIn("security.protocol", cfg["target"])

    def test_mm2_gets_ssl_per_cluster_and_the_replication_factor(self) -> None:
        MirrorMaker2(self.kafka, "1g", 2).command(self.spec(pki=self.pki, replication_factor=3))
        p = props((self.dir / "mm2.properties").read_text())
        for alias in ("src", "dst"):
            self.assertEqual(p[f"{alias}.security.protocol"], "SSL")
            self.assertEqual(p[f"{alias}.ssl.keystore.type"], "PEM")
            self.assertEqual(p[f"{alias}.ssl.keystore.location"], "/pki/client.keystore.pem")
            self.assertEqual(p[f"{alias}.ssl.truststore.location"], "/pki/ca.pem")
        for k in ("replication.factor", "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor",
                  "offset-syncs.topic.replication.factor", "offset.storage.replication.factor",
                  "status.storage.replication.factor", "config.storage.replication.factor"):
            self.assertEqual(p[k], "3", k)
        MirrorMaker2(self.kafka, "1g", 2).command(self.spec())
        p = props((self.dir / "mm2.properties").read_text())
        self.assertEqual(p["replication.factor"], "1")
        self.assertNotIn("src.security.protocol", p)

    def test_mm1_gets_ssl_in_consumer_and_producer(self) -> None:
        MirrorMaker1(self.kafka, "1g", 2).command(self.spec(pki=self.pki))
        for f in ("mm1-consumer.properties", "mm1-producer.properties"):
            p = props((self.dir / f).read_text())
            self.assertEqual(p["security.protocol"], "SSL", f)
            self.assertEqual(p["ssl.keystore.location"], "/pki/client.keystore.pem", f)
            self.assertEqual(p["ssl.truststore.type"], "PEM", f)

    def test_tools_get_the_client_config(self) -> None:
        k = Kafka("java", Path("/l"), Path("/l"), Path("/a"), Path("/b"), Path("/c"))
        self.assertFalse(any(a.startswith("-Dbench.client.config") for a in k.tool_cmd("X")))
        k.client_config = Path("/pki/client.properties")
        self.assertIn("-Dbench.client.config=/pki/client.properties", k.tool_cmd("X"))


if __name__ == "__main__":
    unittest.main()
