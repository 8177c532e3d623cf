"""Datasets the bench preloads into the source cluster, and the payload files they are made from.

A dataset is one topic (`perf-<size>-<compression>`) filled by Kafka's own ProducerPerformance, so the record batches
on the source are exactly what a real Java producer makes with that compression, linger and batch size. Its stock
payload (one random string repeated for every record) would compress absurdly well, so the bench gives it a payload
file instead: a fixed, seeded set of distinct log-like lines of the exact record size, which compress about like
real JSON events (~2-4x with lz4/zstd over a batch).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

SIZES = {"100": 100, "1k": 1024}
COMPRESSIONS = ("none", "lz4", "zstd")

# Every dataset name the harness knows, in report order.
ALL = [f"{s}-{c}" for s in SIZES for c in COMPRESSIONS]


@dataclass(frozen=True)
class Dataset:
    """One source topic: record size, compression, how many records."""

    name: str  # e.g. "1k-lz4"
    record_size: int
    compression: str
    records: int

    @property
    def topic(self) -> str:
        return f"perf-{self.name}"

    @property
    def payload_bytes(self) -> int:
        """Bytes of record values: the unit every MB/s and CPU-per-GB figure of the bench is computed from."""
        return self.records * self.record_size


def parse(name: str, records_by_size: dict[str, int]) -> Dataset:
    """`1k-lz4` -> Dataset; raises ValueError with the accepted names."""
    try:
        size, compression = name.split("-", 1)
        if size not in SIZES or compression not in COMPRESSIONS:
            raise ValueError
    except ValueError:
        raise ValueError(f"unknown dataset {name!r}: expected one of {', '.join(ALL)}") from None
    return Dataset(name, SIZES[size], compression, records_by_size[size])


_WORDS = (  # noqa: SIM905 - a word list reads better as text
    "order payment checkout cart user session login logout search product inventory shipment invoice refund "
    "catalog price discount coupon review rating address billing account profile settings notification email sms "
    "push retry timeout accepted rejected pending completed failed cancelled created updated deleted warehouse "
    "carrier tracking delivered returned exchange subscription renewal trial upgrade downgrade europe-west us-east "
    "ap-south frontend backend gateway worker scheduler cache database queue stream"
).split()
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_SERVICES = ("checkout", "payments", "catalog", "search", "accounts", "shipping", "notifications", "gateway")


def _line(rng: random.Random, size: int) -> str:
    """One log-like JSON event, cut or padded to exactly `size` ASCII bytes, without newline."""
    parts = [
        (
            f'{{"ts":"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:'
            f'{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z"'
        ),
        f'"level":"{rng.choice(_LEVELS)}"',
        f'"service":"{rng.choice(_SERVICES)}"',
        f'"host":"node-{rng.randint(1, 64)}"',
        f'"trace":"{rng.getrandbits(64):016x}"',
        f'"user":{rng.randint(1, 5_000_000)}',
        f'"amount":{rng.randint(1, 99999) / 100:.2f}',
    ]
    text = ",".join(parts) + ',"msg":"'
    while len(text) < size:
        text += " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 9))) + f" id={rng.randint(1, 10**9)}. "
    return text[:size]


def write_payload_file(path: Path, size: int, lines: int = 20_000, seed: int = 20261125) -> Path:
    """Writes `lines` distinct payloads of exactly `size` bytes, one per line; same seed -> same file everywhere."""
    rng = random.Random(seed + size)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for _ in range(lines):
            f.write(_line(rng, size))
            f.write("\n")
    return path
