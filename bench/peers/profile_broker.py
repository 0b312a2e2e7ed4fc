"""Where the Tidelog broker spends its CPU in the peer workloads: cProfile of `tidelog serve`.

    .venv/bin/python -m bench.peers.profile_broker [--records N] [--value-bytes B]

Starts the broker under `python -m cProfile`, produces N records (batches of 1,000,
`acks: 1`) and reads them back with Tidelog's own clients, stops the broker with
SIGTERM (cProfile writes its file on the clean exit), and prints one JSON document:
the wall time and CPU split of each phase and the broker's top functions by own
time (start-up imports included: use enough records to dwarf them; only the
broker's main thread is profiled, so fsync and reads done in worker threads show
as the wait for them). docs/benchmarks.md cites it where a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.peers._common import make_values
from bench.peers.tidelog_peer import TidelogClient
from bench.peers.workloads import run_consume, run_produce
from harness.process import ServerProcess, free_port, note

TOP_FUNCTIONS = 15
# The profile is a diagnosis, not a figure: no cap needed beyond a generous one.
PRODUCE_CAP_S = 120.0


def top_functions(profile_path: Path, limit: int) -> list[dict[str, Any]]:
    """The `limit` functions with the most own time, as plain records."""
    stats = pstats.Stats(str(profile_path))
    entries = stats.stats.items()  # type: ignore[attr-defined]
    # Waiting in epoll is idle time, not work: shares are of the time spent working.
    busy = sum(e[1][2] for e in entries if not _is_idle(e[0][2]))
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in entries:
        if _is_idle(name):
            continue
        rows.append(
            {
                "function": f"{Path(filename).name}:{line}:{name}",
                "calls": calls,
                "own_s": round(tottime, 3),
                "own_share_of_busy": round(tottime / busy, 3) if busy else 0.0,
                "cumulative_s": round(cumtime, 3),
            }
        )
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return rows[:limit]


def _is_idle(name: str) -> bool:
    return "poll" in name and "epoll" in name


def profile(records: int, value_bytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidelog-profile-") as tmp:
        root = Path(tmp)
        port = free_port()
        prof = root / "broker.prof"
        argv = [
            sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "broker", "serve",
            "--data-dir", str(root / "data"), "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        server = ServerProcess("tidelog (cProfile)", argv, port, root / "broker.log")
        client = TidelogClient(port)
        try:
            values = make_values(value_bytes)
            client.setup("profile", durable=False)
            note("produce ...")
            produced = run_produce(client, server.pid, "profile", values, records, PRODUCE_CAP_S)
            note("consume ...")
            consumed = run_consume(client, server.pid, "profile", produced.records)
        finally:
            client.close()
            server.stop()
        if not prof.exists():
            raise RuntimeError("the broker wrote no profile (did it exit cleanly on SIGTERM?)")
        return {
            "benchmark": "profile_broker",
            "params": {"records": records, "value_bytes": value_bytes},
            "note": "the broker runs under cProfile, which slows it; compare shares, not rates",
            "produce": produced.to_json(),
            "consume": consumed.to_json(),
            "broker_top_functions": top_functions(prof, TOP_FUNCTIONS),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args(argv)
    print(json.dumps(profile(args.records, args.value_bytes), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
