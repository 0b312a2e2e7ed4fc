"""A `bench.kafka_vs` result as docs/benchmarks.md shows it: markdown tables and a PNG.

    .venv/bin/python -m bench.kafka_vs_report RESULT.json [--plot docs/bench-kafka-vs.png]

The first table has both brokers' figures per phase, the second the Tidelog/Kafka
ratios (median of the runs, min-max when there were several); the plot draws the
throughput ratio of every phase against the 1x line (matplotlib, the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DPI = 110
# Bar colours: Tidelog at or above Kafka, below it.
AT_OR_ABOVE, BELOW = "#1b7837", "#b2182b"
LOG_TICKS = (0.1, 0.2, 0.5, 1, 2, 5)


def _size(value_bytes: int) -> str:
    return "1 KiB" if value_bytes == 1024 else f"{value_bytes} B"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value < 100:
        return f"{value:,.2f}"
    return f"{value:,.0f}"


def figures_table(rows: list[dict[str, Any]]) -> str:
    """Both brokers side by side, phase by phase (run 0 only if there were several)."""
    lines = [
        "| client | workload | record | acks | broker | records/s | MB/s | p50 ms | p99 ms "
        "| broker CPU s / M |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["run"] != 0:
            continue
        lines.append(
            f"| {r['client']} | {r['workload']} | {_size(r['value_bytes'])} | {r['acks']} "
            f"| {r['target']} | {_fmt(r['records_per_s'])} | {_fmt(r['mb_per_s'])} "
            f"| {_fmt(r.get('p50_ms'))} | {_fmt(r.get('p99_ms'))} "
            f"| {_fmt(r['broker_cpu_s_per_m'])} |"
        )
    return "\n".join(lines)


def _ratio(entry: dict[str, Any], name: str) -> str:
    spread = entry.get(name)
    if spread is None:
        return "-"
    text = f"{spread['median']:.2f}x"
    if spread["runs"] > 1:
        text += f" ({spread['min']:.2f}-{spread['max']:.2f})"
    return text


def ratio_table(summary: list[dict[str, Any]]) -> str:
    lines = [
        "| client | workload | record | acks | throughput | p50 latency | p99 latency "
        "| broker CPU / record |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for e in summary:
        lines.append(
            f"| {e['client']} | {e['workload']} | {_size(e['value_bytes'])} | {e['acks']} "
            f"| {_ratio(e, 'records_per_s')} | {_ratio(e, 'p50_ms')} "
            f"| {_ratio(e, 'p99_ms')} | {_ratio(e, 'broker_cpu_s_per_m')} |"
        )
    return "\n".join(lines)


def plot(summary: list[dict[str, Any]], out: Path) -> None:
    """Horizontal bars of Tidelog/Kafka throughput, one per phase, log scale around 1x;
    whiskers span the runs' min and max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        f"{e['client']} {e['workload']} {_size(e['value_bytes'])} acks={e['acks']}" for e in summary
    ]
    spreads = [e["records_per_s"] for e in summary]
    values = [s["median"] for s in spreads]
    whiskers = [[v - s["min"] for v, s in zip(values, spreads, strict=True)],
                [s["max"] - v for v, s in zip(values, spreads, strict=True)]]  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(values) + 1.2), dpi=DPI)
    colours = [AT_OR_ABOVE if v >= 1 else BELOW for v in values]
    ax.barh(range(len(values)), values, color=colours, xerr=whiskers, capsize=2)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xticks(LOG_TICKS, [f"{t:g}x" for t in LOG_TICKS])
    ax.minorticks_off()
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(LOG_TICKS[0], i, f"  {v:.2f}x", va="center", fontsize=8, color="white")
    ax.set_xlabel("Tidelog / Apache Kafka records/s (same run; > 1 = Tidelog faster)")
    ax.set_title("Tidelog vs Apache Kafka 4.4.0, Kafka clients, one partition", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path)
    parser.add_argument("--plot", type=Path, help="write the ratio bar chart here")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text())
    print(figures_table(result["rows"]))
    print()
    print(ratio_table(result["ratio_summary"]))
    if args.plot:
        plot(result["ratio_summary"], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
