"""Prometheus metrics and the health endpoints on the metrics listener.

The only module that imports prometheus_client (tests/test_layering.py). Metrics
are declared in one table, `METRIC_DEFS`, so the observability pass extends the
set by adding rows. Per-partition gauges are read from the logs at scrape time
by a custom collector, so a deleted topic's series disappear instead of going
stale. Each broker owns its own `CollectorRegistry`: several brokers can run in
one test process.

The HTTP side is a deliberately tiny HTTP/1.0 responder on trio (GET only, one
request per connection): `/metrics`, `/healthz` (alias `/livez`) and `/readyz`
(503 until recovery has finished and the listeners are bound). An `HttpMount`, the
web console (broker/console/, docs/console.md), answers the paths it claims, POST too.

Topic and group names are what the authorizer hides from clients without Describe,
so `MetricsAccess` decides what `/metrics` shows and to whom: the series labelled
with a name (`NAME_LABELS`) can be left out, and a bearer token can be required.
The health endpoints carry no names and are always open (docs/security.md).
"""

from __future__ import annotations

import hmac
import json
import platform
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import prometheus_client
import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.logging import get_logger

log = get_logger(component="metrics")

# `_created` series double the scrape size and no dashboard uses them.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated there

# Sub-millisecond produce latency needs buckets below prometheus' 5 ms default.
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# An HTTP request line plus headers from a scraper fits easily; more is abuse.
HTTP_REQUEST_MAX_BYTES = 16 * 1024
# A scraper that does not send its request within this time is dropped.
HTTP_READ_TIMEOUT_S = 10.0

# Labels whose values are topic or group names: left out of /metrics when names are off.
NAME_LABELS = frozenset({"topic", "group"})
# A token file larger than this is not a token.
TOKEN_FILE_MAX_BYTES = 4096

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One row of the metric table: Prometheus name (without `_total`), kind, help, labels."""

    name: str
    kind: Kind
    doc: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    # Counted in plain ints and read at scrape time (`ScrapedCounter`): for a counter
    # bumped on every frame, where prometheus_client's lock and checks (five calls)
    # would be paid per request.
    scraped: bool = False


METRIC_DEFS: tuple[MetricDef, ...] = (
    MetricDef(
        "tidelog_remote_read_duration_seconds",
        "histogram",
        "Time a read below the local log start took (tiered storage: object store GETs "
        "or the chunk cache), timeouts included.",
        (),
        LATENCY_BUCKETS_S,
    ),
    MetricDef("tidelog_build_info", "gauge", "Build information (value 1).", ("version", "python")),
    MetricDef(
        "tidelog_requests",
        "counter",
        "Requests handled, by API and error (request-level, else first partition error).",
        ("api", "error"),
    ),
    MetricDef(
        "tidelog_request_duration_seconds",
        "histogram",
        "Time from a request's arrival to its response being written.",
        ("api",),
        LATENCY_BUCKETS_S,
    ),
    MetricDef(
        "tidelog_kafka_requests",
        "counter",
        "Kafka-protocol requests handled, by Kafka API and error (the msgpack ones are "
        "tidelog_requests).",
        ("api", "error"),
    ),
    MetricDef(
        "tidelog_kafka_request_duration_seconds",
        "histogram",
        "Time from a Kafka-protocol request's arrival to its response being ready.",
        ("api",),
        LATENCY_BUCKETS_S,
    ),
    MetricDef(
        "tidelog_network_bytes",
        "counter",
        "Bytes received from and sent to clients, by protocol (tidelog, kafka) and direction.",
        ("protocol", "direction"),
        scraped=True,
    ),
    # Per-topic traffic, counted on every produce and fetch: plain ints (`ScrapedCounter`),
    # not prometheus_client counters, whose `inc` takes a lock each time.
    MetricDef(
        "tidelog_records_in", "counter", "Records appended by produce.", ("topic",), scraped=True
    ),
    MetricDef(
        "tidelog_bytes_in", "counter", "Batch bytes appended by produce.", ("topic",), scraped=True
    ),
    MetricDef(
        "tidelog_bytes_out", "counter", "Batch bytes returned by fetch.", ("topic",), scraped=True
    ),
    MetricDef(
        "tidelog_records_out",
        "counter",
        "Records in the batches returned by fetch (whole batches, as on disk).",
        ("topic",),
        scraped=True,
    ),
    MetricDef("tidelog_connections", "gauge", "Open client connections."),
    MetricDef("tidelog_connections_opened", "counter", "Client connections accepted."),
    MetricDef(
        "tidelog_connections_closed",
        "counter",
        "Client connections closed, by reason.",
        ("reason",),
    ),
    MetricDef("tidelog_inflight_requests", "gauge", "Requests read but not yet answered."),
    MetricDef(
        "tidelog_log_flush_duration_seconds",
        "histogram",
        "Duration of one fsync of a partition (acks -1 group commit).",
        (),
        LATENCY_BUCKETS_S,
    ),
    MetricDef(
        "tidelog_group_commit_waiters",
        "histogram",
        "Produce requests acknowledged by one fsync (group commit size).",
        (),
        (1, 2, 4, 8, 16, 32, 64, 128),
    ),
    MetricDef(
        "tidelog_event_loop_lateness_seconds",
        "histogram",
        "How late the event loop woke a heartbeat task (blocking work on the loop shows here).",
        (),
        LATENCY_BUCKETS_S,
    ),
    MetricDef(
        "tidelog_gc_pause_seconds",
        "histogram",
        "Duration of each garbage collection, by generation (every thread waits meanwhile).",
        ("generation",),
        LATENCY_BUCKETS_S,
    ),
    # Security (docs/security.md): counts only, never a name or secret in a label.
    MetricDef(
        "tidelog_authentications",
        "counter",
        "SASL authentications, by mechanism and result (success, failure).",
        ("mechanism", "result"),
    ),
    MetricDef("tidelog_tls_handshake_failures", "counter", "TLS handshakes that failed."),
    MetricDef(
        "tidelog_authorization_denied",
        "counter",
        "Requests (or parts of them) the authorizer denied, by API.",
        ("api",),
    ),
)


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """What the per-partition collector exports for one partition."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segments: int
    offline: int = 0  # 1 after a write/fsync error: writes refused until restart


# Gauge name, help, PartitionStats attribute.
PARTITION_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("tidelog_log_start_offset", "First offset still in the log.", "log_start_offset"),
    ("tidelog_log_end_offset", "Offset the next appended record will get.", "log_end_offset"),
    ("tidelog_log_size_bytes", "Bytes in the partition's segments.", "size_bytes"),
    ("tidelog_log_segments", "Segments in the partition.", "segments"),
    ("tidelog_log_offline", "1 when the partition refuses writes until restart.", "offline"),
)


class _PartitionCollector(Collector):
    """Reads partition statistics at scrape time (no stale series after deletes)."""

    def __init__(self, source: Callable[[], Iterable[PartitionStats]]) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = [
            (GaugeMetricFamily(name, doc, labels=["topic", "partition"]), attr)
            for name, doc, attr in PARTITION_GAUGES
        ]
        try:
            stats = list(self._source())
        except Exception:
            log.exception("metrics_partition_scrape_failed")
            stats = []
        for s in stats:
            for family, attr in families:
                family.add_metric([s.topic, str(s.partition)], getattr(s, attr))
        for family, _ in families:
            yield family


@dataclass(frozen=True, slots=True)
class Sample:
    """One series read from a component's `statistics()` at scrape time."""

    name: str  # counters without `_total`: prometheus_client adds it
    kind: Literal["counter", "gauge"]
    doc: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


class _StatisticsCollector(Collector):
    """Turns components' `statistics()` snapshots into series at scrape time.

    The components (retention, cleaner, long poll) keep their own totals, so no
    prometheus object has to be kept in step with them, and a deleted topic's series
    go away with the snapshot that no longer lists it.
    """

    def __init__(self, source: Callable[[], Iterable[Sample]]) -> None:
        self._source = source

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        try:
            samples = list(self._source())
        except Exception:
            log.exception("metrics_statistics_scrape_failed")
            samples = []
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for sample in samples:
            family = families.get(sample.name)
            if family is None:
                cls = CounterMetricFamily if sample.kind == "counter" else GaugeMetricFamily
                family = cls(sample.name, sample.doc, labels=[k for k, _ in sample.labels])
                families[sample.name] = family
            family.add_metric([v for _, v in sample.labels], sample.value)
        yield from families.values()


class ScrapedCounter(Collector):
    """A labelled counter kept as plain ints by its one writer (the trio thread) and
    read at scrape time from the metrics thread (a `list` of a dict's items is taken
    under the GIL in one step)."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.counts: dict[tuple[str, ...], int] = {}

    def add(self, labels: tuple[str, ...], amount: int) -> None:
        self.counts[labels] = self.counts.get(labels, 0) + amount

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.doc, labels=list(self.labels))
        for labels, value in list(self.counts.items()):
            family.add_metric(list(labels), value)
        yield family


class BrokerMetrics:
    """The broker's metrics, built from `METRIC_DEFS` in a private registry."""

    def __init__(self, version: str) -> None:
        self.registry = CollectorRegistry()
        self._metrics: dict[str, Any] = {}
        for d in METRIC_DEFS:
            self._metrics[d.name] = self._build(d)
        self.get("tidelog_build_info").labels(version, platform.python_version()).set(1)
        # Label children are cached: `.labels()` costs a lock and a dict lookup per call.
        self._request_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._network: ScrapedCounter = self._metrics["tidelog_network_bytes"]
        self._records_in: ScrapedCounter = self._metrics["tidelog_records_in"]
        self._bytes_in: ScrapedCounter = self._metrics["tidelog_bytes_in"]
        self._records_out: ScrapedCounter = self._metrics["tidelog_records_out"]
        self._bytes_out: ScrapedCounter = self._metrics["tidelog_bytes_out"]

    def _build(self, d: MetricDef) -> Any:
        if d.scraped:
            counter = ScrapedCounter(d.name, d.doc, d.labels)
            self.registry.register(counter)
            return counter
        if d.kind == "counter":
            return Counter(d.name, d.doc, d.labels, registry=self.registry)
        if d.kind == "gauge":
            return Gauge(d.name, d.doc, d.labels, registry=self.registry)
        buckets = d.buckets or Histogram.DEFAULT_BUCKETS
        return Histogram(d.name, d.doc, d.labels, registry=self.registry, buckets=buckets)

    def get(self, name: str) -> Any:
        """The metric object for a `METRIC_DEFS` name."""
        return self._metrics[name]

    def add_partition_source(self, source: Callable[[], Iterable[PartitionStats]]) -> None:
        """Export per-partition gauges from `source`, called at every scrape."""
        self.registry.register(_PartitionCollector(source))

    def add_statistics_source(self, source: Callable[[], Iterable[Sample]]) -> None:
        """Export the `Sample`s `source` yields, called at every scrape."""
        self.registry.register(_StatisticsCollector(source))

    def request_finished(
        self, api: str, error: str | None, duration_s: float, *, protocol: str = "tidelog"
    ) -> None:
        """Count a request: `tidelog_requests` for msgpack ones, `tidelog_kafka_requests`
        (Kafka's API names and error names) for Kafka ones."""
        key = (protocol, api, error or "none")
        children = self._request_children.get(key)
        if children is None:
            prefix = "tidelog_kafka" if protocol == "kafka" else "tidelog"
            children = (
                self.get(f"{prefix}_requests").labels(api, error or "none"),
                self.get(f"{prefix}_request_duration_seconds").labels(api),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(duration_s)

    def received(self, protocol: str, size_bytes: int) -> None:
        self._network.add((protocol, "in"), size_bytes)

    def sent(self, protocol: str, size_bytes: int) -> None:
        self._network.add((protocol, "out"), size_bytes)

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        self._records_in.add((topic,), records)
        self._bytes_in.add((topic,), size_bytes)

    def fetched(self, topic: str, size_bytes: int, records: int = 0) -> None:
        if size_bytes:
            self._bytes_out.add((topic,), size_bytes)
            self._records_out.add((topic,), records)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's labelled series."""
        for counter in (self._records_in, self._bytes_in, self._records_out, self._bytes_out):
            counter.counts.pop((topic,), None)

    def render(self, *, names: bool = True) -> bytes:
        """The text exposition format of everything in the registry (without the series
        labelled with a topic or group name unless `names`)."""
        source = self.registry if names else _WithoutNames(self.registry)
        return prometheus_client.generate_latest(source)


class _WithoutNames:
    """A registry's families minus the samples labelled with a name (`NAME_LABELS`);
    a family left with no sample is left out."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            samples = [s for s in family.samples if NAME_LABELS.isdisjoint(s.labels)]
            if samples or not family.samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


def read_token(path: Path) -> bytes:
    """The bearer token in `path` (surrounding whitespace dropped); ValueError if empty
    or too large, OSError if unreadable."""
    with open(path, "rb") as f:
        data = f.read(TOKEN_FILE_MAX_BYTES + 1)
    token = data.strip()
    if not token or len(data) > TOKEN_FILE_MAX_BYTES or b"\n" in token:
        raise ValueError(f"{path}: expected one token of at most {TOKEN_FILE_MAX_BYTES} bytes")
    return token


@dataclass(frozen=True, slots=True)
class MetricsAccess:
    """What /metrics shows (`names`) and whether it asks for `Authorization: Bearer`
    with the token in `token_file` (read at each scrape, so it can be rotated)."""

    names: bool = True
    token_file: Path | None = None

    def allows(self, authorization: str | None) -> bool:
        if self.token_file is None:
            return True
        scheme, _, offered = (authorization or "").strip().partition(" ")
        try:
            token = read_token(self.token_file)
        except (OSError, ValueError) as exc:
            log.warning("metrics_token_unreadable", reason=str(exc)[:200])
            return False  # fail closed
        return scheme.lower() == "bearer" and hmac.compare_digest(
            offered.strip().encode("latin-1", "replace"), token
        )


@dataclass
class Readiness:
    """What `/readyz` checks; the server flips the flags as startup proceeds."""

    recovered: bool = False
    listening: bool = False
    shutting_down: bool = False

    @property
    def ready(self) -> bool:
        return self.recovered and self.listening and not self.shutting_down

    def checks(self) -> dict[str, bool]:
        return {
            "recovered": self.recovered,
            "listening": self.listening,
            "not_shutting_down": not self.shutting_down,
        }


def _http_response(status: str, content_type: str, body: bytes, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def http_reply(
    path: str,
    metrics: BrokerMetrics,
    readiness: Readiness,
    access: MetricsAccess = MetricsAccess(),
    authorization: str | None = None,
) -> bytes:
    """The whole HTTP response for a GET of `path` with that Authorization header."""
    path = path.split("?", 1)[0]
    if path == "/metrics":
        if not access.allows(authorization):
            challenge = 'WWW-Authenticate: Bearer realm="tidelog-metrics"\r\n'
            body = b"a bearer token is required (metrics.bearer.token.file)\n"
            return _http_response("401 Unauthorized", "text/plain", body, challenge)
        text = metrics.render(names=access.names)
        return _http_response("200 OK", prometheus_client.CONTENT_TYPE_LATEST, text)
    if path in ("/healthz", "/livez"):
        return _http_response("200 OK", "text/plain; charset=utf-8", b"ok\n")
    if path == "/readyz":
        body = json.dumps({"ready": readiness.ready, "checks": readiness.checks()}).encode()
        status = "200 OK" if readiness.ready else "503 Service Unavailable"
        return _http_response(status, "application/json", body + b"\n")
    return _http_response("404 Not Found", "text/plain; charset=utf-8", b"not found\n")


class HttpMount(Protocol):
    """An application served beside /metrics on the same listener (the web console,
    broker/console/): it takes over the requests whose path it claims, any method."""

    def claims(self, path: str) -> bool: ...

    async def serve(self, stream: trio.abc.Stream, received: bytes) -> None:
        """Answer the request whose bytes so far (its head, maybe some body) are `received`."""


async def _read_request_head(stream: trio.abc.Stream) -> bytes | None:
    buf = bytearray()
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        if len(buf) > HTTP_REQUEST_MAX_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _header(head: bytes, name: str) -> str | None:
    """The value of header `name` (case-insensitive) in a request head, or None."""
    wanted = name.lower().encode("ascii") + b":"
    for line in head.split(b"\n")[1:]:
        if line.lower().startswith(wanted):
            return line[len(wanted) :].strip().decode("latin-1")
    return None


async def _handle_http(
    stream: trio.abc.Stream,
    metrics: BrokerMetrics,
    ready: Readiness,
    access: MetricsAccess,
    mount: HttpMount | None = None,
) -> None:
    async with stream:
        try:
            with trio.move_on_after(HTTP_READ_TIMEOUT_S):
                head = await _read_request_head(stream)
                if not head:
                    return
                parts = head.split(b"\r\n", 1)[0].split()
                if (
                    mount is not None
                    and len(parts) >= 2
                    and mount.claims(parts[1].decode("latin-1"))
                ):
                    await mount.serve(stream, head)
                    return
                if len(parts) < 2 or parts[0] not in (b"GET", b"HEAD"):
                    reply = _http_response("405 Method Not Allowed", "text/plain", b"GET only\n")
                else:
                    path = parts[1].decode("latin-1")
                    reply = http_reply(path, metrics, ready, access, _header(head, "authorization"))
                    if parts[0] == b"HEAD":
                        reply = reply.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
                await stream.send_all(reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the scraper went away
        except Exception:
            log.exception("metrics_request_failed")  # never take the listener down


async def serve_metrics_http(
    listeners: list[trio.SocketListener],
    metrics: BrokerMetrics,
    readiness: Readiness,
    wrap: Callable[[trio.SocketStream], Awaitable[trio.abc.Stream | None]] | None = None,
    access: MetricsAccess = MetricsAccess(),
    mount: HttpMount | None = None,
) -> None:
    """Answer scrapes and health checks until cancelled; `wrap` adds TLS (None: failed);
    `mount` (the console) answers the paths it claims."""

    async def handler(stream: trio.SocketStream) -> None:
        served: trio.abc.Stream | None = stream if wrap is None else await wrap(stream)
        if served is not None:
            await _handle_http(served, metrics, readiness, access, mount)

    await trio.serve_listeners(handler, listeners)
