"""Test helpers for the observability tests: scrape a broker, run a real Prometheus.

`scrape(port)` fetches `/metrics` and parses it with prometheus_client's own
text parser. `PrometheusServer` runs `/usr/bin/prometheus` (Debian package
`prometheus`, installed by .ci/run) on loopback with a throwaway config and TSDB
directory, and stops it by PID; `query(expr)` asks its HTTP API.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PROMETHEUS_BIN = "prometheus"
PROMTOOL_BIN = "promtool"
# Prometheus starts in about a second here; on a loaded 2-core CI box allow more.
PROMETHEUS_START_TIMEOUT_S = 20.0
# How long a test waits for a scraped value to show up in a query.
QUERY_WAIT_S = 20.0
# Short enough that a test sees a new value within a second or two.
SCRAPE_INTERVAL = "500ms"
HTTP_TIMEOUT_S = 5.0


def http_get(url: str) -> tuple[int, str]:
    """GET `url`; (status, body) also for 4xx/5xx answers."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
            return resp.status, resp.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def scrape_text(metrics_port: int, host: str = "127.0.0.1") -> str:
    status, body = http_get(f"http://{host}:{metrics_port}/metrics")
    assert status == 200, body
    return body


@dataclass
class Scrape:
    """One parsed scrape: families by name and every sample as (name, labels) -> value."""

    text: str
    types: dict[str, str] = field(default_factory=dict)
    family_samples: dict[str, set[str]] = field(default_factory=dict)
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        assert key in self.samples, f"no sample {name}{labels} in scrape:\n{self.text}"
        return self.samples[key]

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {lbl: v for (n, lbl), v in self.samples.items() if n == name}

    def label_names(self, name: str) -> set[frozenset[str]]:
        """The distinct label-name sets among `name`'s samples."""
        return {frozenset(k for k, _ in lbl) for lbl in self.series(name)}


def parse_scrape(text: str) -> Scrape:
    out = Scrape(text)
    for family in text_string_to_metric_families(text):
        # prometheus_client's parser names counter families without `_total`.
        out.types[family.name] = family.type
        out.family_samples[family.name] = {sample.name for sample in family.samples}
        for sample in family.samples:
            out.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def scrape(metrics_port: int) -> Scrape:
    return parse_scrape(scrape_text(metrics_port))


def free_port() -> int:
    """A loopback port that was free a moment ago (Prometheus cannot report port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prometheus_available() -> bool:
    return shutil.which(PROMETHEUS_BIN) is not None


def scrape_config(targets: list[str], *, rule_files: tuple[Path, ...] = ()) -> str:
    """A minimal prometheus.yml: one `tidelog` job scraping `targets` every 500 ms."""
    rules = "".join(f"  - {json.dumps(str(p))}\n" for p in rule_files)
    return (
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL}\n"
        f"  evaluation_interval: {SCRAPE_INTERVAL}\n"
        + ("rule_files:\n" + rules if rules else "")
        + "scrape_configs:\n"
        "  - job_name: tidelog\n"
        f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
    )


class PrometheusServer:
    """A real Prometheus process on loopback; use as a context manager."""

    def __init__(self, workdir: Path, config_text: str) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(config_text, encoding="utf-8")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.port = free_port()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS_BIN,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited:\n" + self.log())
            try:
                if http_get(self.url + "/-/ready")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("prometheus never became ready:\n" + self.log())

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""))
        assert status == 200, body
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query's vector as labels -> value."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return {
            frozenset(item["metric"].items()): float(item["value"][1]) for item in data["result"]
        }

    def wait_for(self, expr: str, expected: float, timeout_s: float = QUERY_WAIT_S) -> float:
        """Poll `expr` until its single result equals `expected`; returns it."""
        deadline = time.monotonic() + timeout_s
        seen: dict[frozenset[tuple[str, str]], float] = {}
        while time.monotonic() < deadline:
            seen = self.query(expr)
            if len(seen) == 1 and next(iter(seen.values())) == expected:
                return expected
            time.sleep(0.2)
        raise AssertionError(f"{expr} never became {expected}; last result {seen}\n" + self.log())
