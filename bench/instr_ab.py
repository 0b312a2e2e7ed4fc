"""A/B of instructions per unit of work (callgrind), for a machine too noisy for timings.

`bench.ab` compares wall-clock rates, which on a shared 2-core machine swing by up to 2x
even for identical code. Instructions executed do not depend on the neighbours: this
runs each probe of `bench/instr_probe.py` under valgrind's callgrind in both checkouts,
for two amounts of work, and reports instructions per unit (the difference over the
difference, so start-up cancels out) and the ratio B / A. User-space instructions
only: the kernel's share (pwrite, sendfile, socket copies) is not counted, so a ratio
overstates a change in the total cost when the kernel's share is large.

    python -m bench.instr_ab --a <base checkout> --b . [--probes append,broker,consume]

Needs valgrind (Debian package `valgrind`); each probe takes about a minute.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = Path(__file__).with_name("instr_probe.py")
# (smaller, larger) amounts of work per probe: enough units for the difference to
# dwarf the run-to-run jitter of start-up (imports, timers), small enough for callgrind.
AMOUNTS = {
    "append": (10, 60),
    "broker": (30, 130),
    "broker-producer": (30, 130),
    "consume": (20, 120),
    "produce": (20, 120),
    "clean": (8, 24),
    "kafka-edge": (10, 40),
    "kafka-small": (100, 400),
}
# Without these the counts move by ~4% between runs of the same code: str hashes are
# salted per process (dict and set probing differ), and OpenBLAS's idle worker threads
# spin-wait, which callgrind counts.
DETERMINISTIC_ENV = {
    "PYTHONHASHSEED": "0",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
UNITS = {
    "append": "Log.append of a 1,000-record batch",
    "broker": "broker: one produce request of 1,000 records, and its share of the fetches",
    "consume": "client: Consumer.poll of one 1,000-record batch",
    "broker-producer": "broker: one Producer.send_batch of 1,000 records, acks 1",
    "produce": "client: Producer.send_batch of one 1,000-record batch, acks 1",
    "clean": "cleaning 1 MiB of the compaction benchmark's dirty log",
    "kafka-edge": "broker: one Kafka produce request of 1,000 records, and its share of "
    "the Kafka fetches",
    "kafka-small": "broker: one Kafka produce request of 16 x 1 KiB records, and one Kafka "
    "fetch of it",
}


def instructions(tree: Path, probe: str, amount: int) -> int:
    """callgrind's total for one run of `probe` with `amount` units of work in `tree`."""
    python = str(tree / ".venv" / "bin" / "python")
    env = {**os.environ, **DETERMINISTIC_ENV, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory() as scratch:
        out_file = f"{scratch}/callgrind.out"
        command = [python, str(PROBE), probe, str(tree), str(amount), out_file]
        if probe in ("append", "build", "clean"):
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *command]
        subprocess.run(
            command,
            check=True,
            cwd=scratch,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for line in Path(out_file).read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no instruction total in callgrind's output for {probe}")


def per_unit(tree: Path, probe: str) -> float:
    small, large = AMOUNTS[probe]
    if probe == "clean":  # building the log is not the cleaner's work: subtract it
        cleaning = [
            instructions(tree, "clean", amount) - instructions(tree, "build", amount)
            for amount in (small, large)
        ]
        return (cleaning[1] - cleaning[0]) / (large - small)
    return (instructions(tree, probe, large) - instructions(tree, probe, small)) / (large - small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="the base checkout")
    parser.add_argument("--b", type=Path, required=True, help="the checkout under test")
    parser.add_argument(
        "--probes",
        default="append,broker,consume,clean",
        help=f"comma-separated, of: {', '.join(AMOUNTS)}",
    )
    opts = parser.parse_args(argv)
    result: dict[str, object] = {"unit": "instructions per unit of work (callgrind)"}
    for probe in opts.probes.split(","):
        print(f"{probe}: {UNITS[probe]} ...", file=sys.stderr)
        a = per_unit(opts.a.resolve(), probe)
        b = per_unit(opts.b.resolve(), probe)
        result[probe] = {
            "unit": UNITS[probe],
            "a": round(a),
            "b": round(b),
            "b_over_a": round(b / a, 4),
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
