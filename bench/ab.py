"""Interleaved A/B runs of one benchmark in two checkouts, with median ratios (B / A).

Each checkout runs the benchmark from its own `.venv`, in turn, `--rounds` times, so a
noisy machine slows both sides alike. The order alternates (A B, B A, A B, ...) and each
run starts after a `sync` and `--settle-s` of quiet: a run that follows another inherits
its dirty page cache and the kernel's freeing of its files, and with a fixed order that
cost always fell on the same side. Every numeric leaf of the JSON each run prints is
compared: the median of B's values over the median of A's. Prints one JSON document.

    python -m bench.ab --a /path/to/base --b . --rounds 3 storage_bench --quick
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def numeric_leaves(doc: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) for every int/float in a JSON document (bools excluded)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from numeric_leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from numeric_leaves(value, f"{prefix}[{i}]")
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield prefix, float(doc)


def run_once(tree: Path, module: str, args: list[str]) -> dict[str, float]:
    proc = subprocess.run(
        [str(tree / ".venv" / "bin" / "python"), "-m", f"bench.{module}", *args],
        cwd=tree,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return dict(numeric_leaves(json.loads(proc.stdout)))


def compare(
    runs: dict[str, list[dict[str, float]]], module: str, args: list[str], rounds: int
) -> dict[str, Any]:
    """Median ratios of the leaves both sides print, with every run's value (a single
    median hides a bimodal figure), and the medians of leaves only one side prints."""
    ratios: dict[str, dict[str, Any]] = {}
    for key in sorted(set(runs["a"][0]) & set(runs["b"][0])):
        a_runs = [r[key] for r in runs["a"] if key in r]
        b_runs = [r[key] for r in runs["b"] if key in r]
        a, b = statistics.median(a_runs), statistics.median(b_runs)
        ratios[key] = {"a": a, "b": b, "b_over_a": round(b / a, 3) if a else float("nan"),
                       "a_runs": a_runs, "b_runs": b_runs}  # fmt: skip
    only = {
        side: {
            key: statistics.median(r[key] for r in runs[side] if key in r)
            for key in sorted(set(runs[side][0]) - set(runs[other][0]))
        }
        for side, other in (("a", "b"), ("b", "a"))
    }
    return {"module": module, "args": args, "rounds": rounds, "ratios": ratios,
            "only_a": only["a"], "only_b": only["b"]}  # fmt: skip


def run_order(rounds: int) -> Iterator[tuple[int, str]]:
    """(round, side) in the order the runs happen: A B, then B A, and so on."""
    for round_no in range(rounds):
        yield from ((round_no, side) for side in ("ab" if round_no % 2 == 0 else "ba"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="the base checkout")
    parser.add_argument("--b", type=Path, required=True, help="the checkout under test")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument(
        "--settle-s", type=float, default=3.0, help="quiet seconds after a sync before each run"
    )
    parser.add_argument("module", help="a module of bench/, e.g. storage_bench")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for round_no, side in run_order(opts.rounds):
        os.sync()
        time.sleep(opts.settle_s)
        print(f"round {round_no + 1}/{opts.rounds}: {side}", file=sys.stderr)
        runs[side].append(run_once(getattr(opts, side).resolve(), opts.module, opts.args))
    print(json.dumps(compare(runs, opts.module, opts.args, opts.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
