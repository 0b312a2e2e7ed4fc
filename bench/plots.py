"""Plots of `bench/compare.py`'s results (matplotlib PNGs) for docs/benchmarks.md.

    .venv/bin/python -m bench.plots [RESULTS.json] [--out docs]

RESULTS.json is either `compare`'s own output or a `bench/results/<date>.json` of
`bench/run_all.py` (the compare result is found inside it); without it, the newest
file in bench/results/ that holds one. Bars are medians, whiskers min and max.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
DOCS_DIR = ROOT / "docs"
PREFIX = "bench-peers"
# One colour per system, lighter for its official (slower) client.
COLOURS = {
    "tidelog/tidelog": "#1b7837",
    "nats/raw": "#2166ac",
    "nats/nats-py": "#92c5de",
    "redis/raw": "#b2182b",
    "redis/redis-py": "#f4a582",
}
DPI = 110


def find_compare(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The compare result inside either file shape, or None."""
    if doc.get("benchmark") == "compare":
        return doc
    entry = doc.get("benchmarks", {}).get("compare", {})
    result = entry.get("result") if isinstance(entry, dict) else None
    return result if isinstance(result, dict) and result.get("benchmark") == "compare" else None


def newest_results() -> tuple[Path, dict[str, Any]]:
    for path in sorted(RESULTS_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            found = find_compare(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
        if found is not None:
            return path, found
    raise SystemExit(f"no compare results in {RESULTS_DIR}")


def _bars(ax: Any, table: dict[str, dict[str, Any]], workloads: list[str], log: bool) -> None:
    clients = list(dict.fromkeys(c for w in workloads for c in table.get(w, {})))
    width = 0.8 / max(1, len(clients))
    for i, client in enumerate(clients):
        xs, meds, lo, hi = [], [], [], []
        for j, workload in enumerate(workloads):
            entry = table.get(workload, {}).get(client)
            if entry is None:
                continue
            xs.append(j + (i - (len(clients) - 1) / 2) * width)
            meds.append(entry["median"])
            lo.append(entry["median"] - entry["min"])
            hi.append(entry["max"] - entry["median"])
        ax.bar(
            xs, meds, width, yerr=[lo, hi], capsize=2, label=client,
            color=COLOURS.get(client, "#999999"),
        )  # fmt: skip
    ax.set_xticks(range(len(workloads)), [w.replace("_", " ") for w in workloads])
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    if clients:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)


def plot_throughput(result: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    table = result["throughput_records_per_s"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    _bars(left, table, [w for w in ("produce_100B", "consume_100B") if w in table], log=False)
    left.set_title("100-byte records")
    left.set_ylabel("records/s (median; whiskers min-max)")
    _bars(right, table, [w for w in ("produce_1KiB", "consume_1KiB") if w in table], log=False)
    right.set_title("1 KiB records")
    fig.suptitle("Produce then consume, each system with each client, one machine")
    return _save(fig, path)


def plot_durable(result: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    table = result["throughput_records_per_s"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    workloads = [w for w in ("produce_durable_100B", "produce_durable_1KiB") if w in table]
    _bars(ax, table, workloads, log=True)
    ax.set_ylabel("records/s, log scale")
    ax.set_title("Durable produce: acks -1 / sync_interval always / appendfsync always")
    return _save(fig, path)


def plot_latency(result: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    latency = result["latency"]
    keys = ["p50_ms", "p99_ms", "p999_ms"]
    table = {k: {c: v[k] for c, v in latency.items()} for k in keys}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    _bars(ax, table, keys, log=True)
    rate = result.get("params", {}).get("latency_rate_per_s")
    ax.set_ylabel("ms from scheduled send to ack, log scale")
    ax.set_title(f"Single-record produce latency at {rate:g} records/s" if rate else "Latency")
    return _save(fig, path)


def plot_ratios(result: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    ratios = result["ratios"]
    goals = result.get("goals", {})
    workloads = [w for w in ratios if "vs_best_peer" in ratios[w]]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    meds = [ratios[w]["vs_best_peer"]["median"] for w in workloads]
    lo = [m - ratios[w]["vs_best_peer"]["min"] for m, w in zip(meds, workloads, strict=True)]
    hi = [ratios[w]["vs_best_peer"]["max"] - m for m, w in zip(meds, workloads, strict=True)]
    ax.bar(range(len(workloads)), meds, yerr=[lo, hi], capsize=3, color=COLOURS["tidelog/tidelog"])
    for i, workload in enumerate(workloads):
        if workload in goals:
            ax.hlines(goals[workload], i - 0.4, i + 0.4, colors="black", linestyles="dashed")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(workloads)), [w.replace("_", " ") for w in workloads], fontsize=8)
    ax.set_ylabel("Tidelog / best peer (per run), log scale")
    ax.set_title("Ratios taken pair by pair within each run; dashed: the issue's goals")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(result: dict[str, Any], out: Path, prefix: str | None = None) -> list[Path]:
    """Every plot of one compare result, as PNGs `<prefix>-<what>.png` in `out`."""
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    prefix = prefix or PREFIX
    return [
        plot(result, out / f"{prefix}-{what}.png")
        for what, plot in (
            ("throughput", plot_throughput),
            ("durable", plot_durable),
            ("latency", plot_latency),
            ("ratios", plot_ratios),
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, help="a results JSON file")
    parser.add_argument("--out", type=Path, default=DOCS_DIR, help="directory for the PNGs")
    parser.add_argument("--prefix", default=PREFIX, help="file name prefix of the PNGs")
    args = parser.parse_args(argv)
    if args.results:
        found = find_compare(json.loads(args.results.read_text()))
        if found is None:
            raise SystemExit(f"{args.results} holds no compare result")
        result = found
    else:
        _, result = newest_results()
    for path in write_plots(result, args.out, args.prefix):
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
