"""Markdown tables of one `bench/compare.py` result, for the Peers section of the docs.

    .venv/bin/python -m bench.peers.report [RESULTS.json]

Generating the tables from the JSON keeps the docs and the measurements in step:
paste the output, then write the prose around it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.plots import find_compare, newest_results

WORKLOAD_TITLES = {
    "produce_100B": "produce 100 B",
    "consume_100B": "consume 100 B",
    "produce_1KiB": "produce 1 KiB",
    "consume_1KiB": "consume 1 KiB",
    "produce_durable_100B": "durable produce 100 B",
    "produce_durable_1KiB": "durable produce 1 KiB",
}


def _k(value: float) -> str:
    """Records/s in thousands, three significant figures at most."""
    k = value / 1000
    return f"{k:,.0f}k" if k >= 100 else f"{k:,.1f}k" if k >= 1 else f"{value:,.0f}"


def _cell(entry: dict[str, Any] | None, fmt: Any = _k) -> str:
    if entry is None:
        return "-"
    return f"{fmt(entry['median'])} ({fmt(entry['min'])}-{fmt(entry['max'])})"


def throughput_table(result: dict[str, Any]) -> str:
    table = result["throughput_records_per_s"]
    clients = list(dict.fromkeys(c for w in table.values() for c in w))
    lines = [
        "| workload | " + " | ".join(clients) + " |",
        "|---|" + "---|" * len(clients),
    ]
    for workload, title in WORKLOAD_TITLES.items():
        if workload in table:
            cells = [_cell(table[workload].get(c)) for c in clients]
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_table(result: dict[str, Any]) -> str:
    ratios, goals, met = result["ratios"], result.get("goals", {}), result.get("goals_met", {})

    def fmt(x: float) -> str:
        return f"{x:.2f}x"

    lines = [
        "| workload | Tidelog / best peer | / best NATS client | / best Redis client | goal |",
        "|---|---|---|---|---|",
    ]
    for workload, title in WORKLOAD_TITLES.items():
        if workload not in ratios:
            continue
        r = ratios[workload]
        goal = "-"
        if workload in goals:
            verdict = {True: "met", False: "**not met**", None: "not measured"}[met.get(workload)]
            goal = f">= {goals[workload]}x: {verdict}"
        cells = [_cell(r.get(k), fmt) for k in ("vs_best_peer", "vs_nats", "vs_redis")]
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {goal} |")
    return "\n".join(lines)


def latency_table(result: dict[str, Any]) -> str:
    def fmt(x: float) -> str:
        return f"{x:.2f}"

    lines = ["| client | p50 ms | p99 ms | p99.9 ms | max ms |", "|---|---|---|---|---|"]
    for client, entry in result["latency"].items():
        cells = [_cell(entry[k], fmt) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")]
        lines.append(f"| {client} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(result: dict[str, Any]) -> str:
    """CPU seconds per million records on each side: the profile behind the ratios."""
    table = result["throughput_records_per_s"]
    lines = [
        "| workload | client | server CPU s / M records | client CPU s / M records |",
        "|---|---|---|---|",
    ]
    for workload, title in WORKLOAD_TITLES.items():
        for client, entry in table.get(workload, {}).items():
            lines.append(
                f"| {title} | {client} | {entry['server_cpu_s_per_million']:.2f} "
                f"| {entry['client_cpu_s_per_million']:.2f} |"
            )
    return "\n".join(lines)


def setup_table(result: dict[str, Any]) -> str:
    m, v, p = result["machine"], result["versions"], result["params"]
    load = result.get("load_average", {})
    rows = [
        ("machine", f"{m['cpu']}, {m['cores']} cores, {m.get('memory_gib', '?')} GiB"),
        ("OS / Python", f"{m['platform']} / Python {m['python']}"),
        ("data directories", f"{m.get('data_filesystem', '?')} (temporary, one per server)"),
        ("versions", ", ".join(f"{k} {val}" for k, val in v.items())),
        (
            "sizes",
            f"{p['records_100b']:,} x 100 B, {p['records_1kib']:,} x 1 KiB; durable "
            f"{p['durable_records_100b']:,} / {p['durable_records_1kib']:,}; {p['runs']} runs",
        ),
        ("caps", f"produce {p['produce_cap_s']} s, durable produce {p['durable_cap_s']} s"),
        (
            "latency",
            f"{p['latency_samples']:,} single-record produces at "
            f"{p['latency_rate_per_s']:g}/s per run",
        ),
        (
            "load average (1 min) at start / end",
            f"{load.get('start', ['?'])[0]:.1f} / {load.get('end', ['?'])[0]:.1f}",
        ),
        ("wall time of the comparison", f"{result.get('elapsed_s', '?')} s"),
    ]
    return "\n".join(["| | |", "|---|---|"] + [f"| {k} | {val} |" for k, val in rows])


def render(result: dict[str, Any]) -> str:
    return "\n\n".join(
        [
            setup_table(result),
            "Throughput, records/s, median (min-max) of the runs:\n\n" + throughput_table(result),
            "Ratios, each taken within one run, median (min-max):\n\n" + ratio_table(result),
            "Single-record produce latency, median (min-max) of the runs' percentiles:\n\n"
            + latency_table(result),
            "CPU cost, median of the runs:\n\n" + cpu_table(result),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path)
    args = parser.parse_args(argv)
    if args.results:
        result = find_compare(json.loads(args.results.read_text()))
        if result is None:
            raise SystemExit(f"{args.results} holds no compare result")
    else:
        _, result = newest_results()
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
