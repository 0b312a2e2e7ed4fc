"""Run every benchmark in `bench/` and collect their JSON into `bench/results/<date>.json`.

Each benchmark is a module with a command line that prints one JSON document on
stdout (and progress on stderr). They run one after another in child processes, so
a crash in one is reported and the others still run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

# Module name -> extra arguments for the quick run (`make bench-quick`, < 3 minutes).
BENCHMARKS: dict[str, list[str]] = {
    "storage_bench": ["--quick"],
    "produce_fetch": ["--quick"],
    "retention_bench": ["--quick"],
    "compaction_bench": ["--quick"],
    "spark_bench": ["--quick"],
    "compare": ["--quick"],
}


def machine() -> dict[str, object]:
    """What the numbers were measured on."""
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def run_one(module: str, args: list[str]) -> dict[str, object]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    elapsed_s = round(time.monotonic() - started, 1)
    if proc.returncode != 0:
        return {"error": f"exit status {proc.returncode}", "elapsed_s": elapsed_s}
    try:
        return {"result": json.loads(proc.stdout), "elapsed_s": elapsed_s}
    except json.JSONDecodeError as exc:
        return {"error": f"output is not JSON: {exc}", "elapsed_s": elapsed_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (under 3 minutes)")
    parser.add_argument("--only", nargs="*", help="run only these benchmark modules")
    opts = parser.parse_args(argv)
    report: dict[str, object] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": opts.quick,
        "machine": machine(),
        "benchmarks": {},
    }
    for module, quick_args in BENCHMARKS.items():
        if opts.only and module not in opts.only:
            continue
        if not (BENCH_DIR / f"{module}.py").exists():
            continue
        print(f"== {module}", file=sys.stderr, flush=True)
        report["benchmarks"][module] = run_one(module, quick_args if opts.quick else [])  # type: ignore[index]
    RESULTS_DIR.mkdir(exist_ok=True)
    suffix = "-quick" if opts.quick else ""
    out = RESULTS_DIR / f"{dt.date.today().isoformat()}{suffix}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    failed = [m for m, r in report["benchmarks"].items() if "error" in r]  # type: ignore[union-attr]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
