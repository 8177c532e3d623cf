"""Turns the bench's rows into results.md, results.csv, chart.png and the "Latest results" block of benches/README.md.

Units: MB = 2^20 bytes and GB = 2^30 bytes of record VALUES (records x record size), the unit Kafka's perf tools use,
so a mirror's MB/s and the broker limits compare directly. The compressed size on disk is reported separately.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"

RUN_FIELDS = [
    "kind",
    "run",
    "rep",
    "order",
    "dataset",
    "contender",
    "clusters",
    "machine",
    "status",
    "reason",
    "records",
    "payload_bytes",
    "elapsed_s",
    "mb_s",
    "records_s",
    "first_record_s",
    "mb_s_after_first",
    "cpu_s",
    "cpu_s_per_gb",
    "cpu_s_at_exit",
    "peak_rss_mb",
    "src_broker_cpu_s",
    "dst_broker_cpu_s",
    "broker_cpu_s_per_gb",
    "limit_mb_s",
    "fraction_of_limit",
    "source_log_bytes",
    "target_log_bytes",
    "stop_s",
    "verify",
    "timestamps_preserved",
    "other_cpu_cores",
    "load_avg_start",
    "sent",
    "received",
    "missing",
    "duplicates",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "mean_ms",
    "added_p50_ms",
    "added_p99_ms",
    "added_max_ms",
    "p50_first10_ms",
    "p50_last10_ms",
    "cpu_pct_at_rate",
    "produce_mb_s",
    "produce_records_s",
    "consume_mb_s",
    "consume_records_s",
]


def fmt(v, digits: int = 1) -> str:
    if v is None or v == "":
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _cell(values: list[float], digits: int = 1) -> str:
    """median, and (min–max) when several repetitions disagree."""
    if not values:
        return "–"
    m = fmt(float(statistics.median(values)), digits)
    if len(values) > 1:
        return f"{m} ({fmt(float(min(values)), digits)}–{fmt(float(max(values)), digits)})"
    return m


def summary_rows(runs: list[dict], datasets: list[str], contenders: list[tuple[str, str]]) -> list[dict]:
    """One row per (dataset, contender) with the medians over its OK runs."""
    out = []
    for ds in datasets:
        for name, label in contenders:
            mine = [r for r in runs if r["dataset"] == ds and r["contender"] == name]
            ok = [r for r in mine if r["status"] == "OK"]
            out.append({"dataset": ds, "contender": name, "label": label, "runs": mine, "ok": ok})
    return out


def throughput_table(runs: list[dict], datasets: list[str], contenders: list[tuple[str, str]]) -> str:
    head = (
        "| Dataset | Contender | OK/runs | MB/s | records/s | MB/s after 1st record | 1st record (s) | CPU s/GB "
        "| Peak RSS (MB) | Broker CPU s/GB | Target/source size | % of broker limit | Other CPU (cores) |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for s in summary_rows(runs, datasets, contenders):
        ok, mine = s["ok"], s["runs"]
        if not mine:
            continue
        if not ok:
            counts: dict[str, int] = {}
            for r in mine:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
            status = ", ".join(f"{k} {v}" if len(mine) > 1 else k for k, v in counts.items())
            lines.append(f"| {s['dataset']} | {s['label']} | 0/{len(mine)} | {status} | | | | | | | | | |")
            continue

        def col(key: str, ok: list[dict] = ok) -> list[float]:
            return [r[key] for r in ok if r.get(key) is not None]

        ratio = [r["target_log_bytes"] / r["source_log_bytes"] for r in ok if r.get("source_log_bytes")]
        frac = [100 * r["fraction_of_limit"] for r in ok if r.get("fraction_of_limit") is not None]
        lines.append(
            f"| {s['dataset']} | {s['label']} | {len(ok)}/{len(mine)} | {_cell(col('mb_s'))} "
            f"| {_cell(col('records_s'), 0)} | {_cell(col('mb_s_after_first'))} | {_cell(col('first_record_s'), 2)} "
            f"| {_cell(col('cpu_s_per_gb'), 2)} | {_cell(col('peak_rss_mb'), 0)} | {_cell(col('broker_cpu_s_per_gb'), 2)} "
            f"| {_cell(ratio, 2)} | {_cell(frac, 0)} | {_cell(col('other_cpu_cores'), 2)} |"
        )
    return head + "\n".join(lines) + "\n"


def latency_table(lat: list[dict]) -> str:
    if not lat:
        return "_latency phase not run_\n"
    head = (
        "| Machine | Rep | Path | Status | p50 ms | p99 ms | max ms | added p50 ms | added p99 ms "
        "| p50 first → last 10% ms | mirror CPU % at rate | Peak RSS (MB) | sent | missing | duplicates |\n"
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in lat:
        status = r["status"]
        if status == "FAILED" and r.get("reason"):
            status += ": " + r["reason"].replace("|", "/")
        trend = "–"
        if r.get("p50_first10_ms") is not None:
            trend = f"{fmt(r['p50_first10_ms'], 1)} → {fmt(r['p50_last10_ms'], 1)}"
        lines.append(
            f"| {r.get('machine', 'calm')} | {r['rep']} | {r['label']} | {status} "
            f"| {fmt(r.get('p50_ms'), 2)} | {fmt(r.get('p99_ms'), 2)} | {fmt(r.get('max_ms'), 2)} "
            f"| {fmt(r.get('added_p50_ms'), 2)} | {fmt(r.get('added_p99_ms'), 2)} | {trend} "
            f"| {fmt(r.get('cpu_pct_at_rate'), 0)} "
            f"| {fmt(r.get('peak_rss_mb'), 0)} | {fmt(r.get('sent'))} | {fmt(r.get('missing'))} "
            f"| {fmt(r.get('duplicates'))} |"
        )
    return head + "\n".join(lines) + "\n"


def latency_summary(lat: list[dict]) -> str:
    """Added latency per machine state and mirror over the repetitions: median (min–max)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in lat:
        if r.get("contender") != "direct":
            groups.setdefault((r.get("machine", "calm"), r["label"]), []).append(r)
    if not groups:
        return ""
    head = (
        "| Machine | Mirror | OK/runs | added p50 ms | added p99 ms | p99 ms | mirror CPU % at rate |\n"
        "|---|---|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for (machine, label), rows in groups.items():
        ok = [r for r in rows if r["status"] == "OK" and r.get("added_p50_ms") is not None]

        def col(key: str, digits: int) -> str:
            return spread([r.get(key) for r in ok], digits)

        lines.append(
            f"| {machine} | {label} | {len(ok)}/{len(rows)} | {col('added_p50_ms', 1)} | {col('added_p99_ms', 1)} "
            f"| {col('p99_ms', 1)} | {col('cpu_pct_at_rate', 0)} |"
        )
    return head + "\n".join(lines) + "\n"


def spread(values: list, digits: int = 1) -> str:
    """median (min–max) of the values present; one value alone; – if none."""
    v = sorted(x for x in values if x is not None and x != "")
    if not v:
        return "–"
    med = statistics.median(v)
    if len(v) == 1:
        return fmt(float(med), digits)
    return f"{fmt(float(med), digits)} ({fmt(float(v[0]), digits)}–{fmt(float(v[-1]), digits)})"


def limits_table(limits: list[dict]) -> str:
    if not limits:
        return "_broker-limit phase not run_\n"
    head = (
        "| Dataset | ProducerPerformance into target MB/s (records/s) | ConsumerPerformance from source MB/s "
        "(records/s) | limit = min, MB/s |\n|---|---:|---:|---:|\n"
    )
    note = (
        "\nThe produce figure is what ONE Java producer (ProducerPerformance, same settings) writes into the target; "
        "with small records it is bound by that client's per-record cost more than by the broker, so a mirror that "
        "forwards whole batches can exceed 100 % of this limit.\n"
    )
    lines = [
        f"| {r['dataset']} | {fmt(r['produce_mb_s'])} ({fmt(r['produce_records_s'], 0)}) "
        f"| {fmt(r['consume_mb_s'])} ({fmt(r['consume_records_s'], 0)}) | {fmt(r['limit_mb_s'])} |"
        for r in limits
    ]
    return head + "\n".join(lines) + "\n" + note


def runs_table(runs: list[dict]) -> str:
    head = (
        "| Run | Rep | Order | Dataset | Contender | Status | s | MB/s | records/s | 1st rec s | CPU s | CPU s/GB "
        "| Peak RSS MB | Broker CPU s/GB | stop s | Other CPU (cores) | Verification |\n"
        "|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for r in runs:
        verify = r.get("verify") or ""
        if r["status"] != "OK" and r.get("reason"):
            verify = (verify + "; " if verify else "") + r["reason"]
        verify = verify.replace("|", "/").replace("\n", " ")
        lines.append(
            f"| {r['run']} | {r['rep']} | {r['order']} | {r['dataset']} | {r['label']} | {r['status']} "
            f"| {fmt(r.get('elapsed_s'), 1)} | {fmt(r.get('mb_s'))} | {fmt(r.get('records_s'), 0)} "
            f"| {fmt(r.get('first_record_s'), 2)} | {fmt(r.get('cpu_s'), 1)} | {fmt(r.get('cpu_s_per_gb'), 2)} "
            f"| {fmt(r.get('peak_rss_mb'), 0)} | {fmt(r.get('broker_cpu_s_per_gb'), 2)} | {fmt(r.get('stop_s'), 1)} "
            f"| {fmt(r.get('other_cpu_cores'), 2)} | {verify} |"
        )
    return head + "\n".join(lines) + "\n"


def write_csv(path: Path, runs: list[dict], lat: list[dict], limits: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in runs:
            w.writerow({"kind": "throughput", **r})
        for r in lat:
            w.writerow({"kind": "latency", **r})
        for r in limits:
            w.writerow({"kind": "limit", **r})


def chart(
    path: Path, runs: list[dict], datasets: list[str], contenders: list[tuple[str, str]], title: str
) -> str | None:
    """Grouped bars (median of OK runs, one dot per run) of MB/s and CPU s/GB; returns an error text if it could not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no chart: matplotlib not importable ({e}); run through scripts/bench.sh, which installs it"
    # only contenders with at least one good run get a slot (a skipped one would leave a hole in every group)
    contenders = [(n, lb) for n, lb in contenders if any(r["contender"] == n and r["status"] == "OK" for r in runs)]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(datasets) + 4), 4.8))
    width = 0.8 / max(1, len(contenders))
    for ax, key, ylabel in (
        (axes[0], "mb_s", "MB/s (record values, start to completion)"),
        (axes[1], "cpu_s_per_gb", "CPU seconds per GB mirrored"),
    ):
        for ci, (name, label) in enumerate(contenders):
            xs, meds = [], []
            for di, ds in enumerate(datasets):
                vals = [
                    r[key]
                    for r in runs
                    if r["dataset"] == ds and r["contender"] == name and r["status"] == "OK" and r.get(key) is not None
                ]
                x = di - 0.4 + width * (ci + 0.5)
                if vals:
                    xs.append(x)
                    meds.append(statistics.median(vals))
                    ax.scatter([x] * len(vals), vals, color="black", s=8, zorder=3)
            if xs:
                ax.bar(xs, meds, width=width * 0.95, label=label)
        ax.set_xticks(range(len(datasets)))
        ax.set_xticklabels(datasets)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    if contenders:
        axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def update_readme(readme: Path, block: str) -> bool:
    """Replaces the text between the bench markers; False if the markers are missing."""
    text = readme.read_text()
    a, b = text.find(README_START), text.find(README_END)
    if a < 0 or b < a:
        return False
    readme.write_text(text[: a + len(README_START)] + "\n" + block.rstrip() + "\n" + text[b:])
    return True
