"""Broker metrics: the table-driven registry, scrape-time partition gauges, HTTP replies."""

from __future__ import annotations

import json
from functools import partial

import trio

from broker.metrics import (
    METRIC_DEFS,
    BrokerMetrics,
    PartitionStats,
    Readiness,
    http_reply,
    serve_metrics_http,
)


def _body(reply: bytes) -> bytes:
    return reply.split(b"\r\n\r\n", 1)[1]


def test_every_table_row_is_exported() -> None:
    text = BrokerMetrics("1.2.3").render().decode()
    for d in METRIC_DEFS:
        assert f"# HELP {d.name}" in text
    assert 'tidelog_build_info{python="' in text and 'version="1.2.3"' in text
    assert "_created" not in text


def test_request_and_traffic_counters() -> None:
    m = BrokerMetrics("0")
    m.request_finished("produce", None, 0.0003)
    m.request_finished("produce", None, 0.0004)
    m.request_finished("fetch", "OFFSET_OUT_OF_RANGE", 0.002)
    m.produced("orders", 1000, 120_000)
    m.fetched("orders", 50_000)
    text = m.render().decode()
    assert 'tidelog_requests_total{api="produce",error="none"} 2.0' in text
    assert 'tidelog_requests_total{api="fetch",error="OFFSET_OUT_OF_RANGE"} 1.0' in text
    assert 'tidelog_request_duration_seconds_bucket{api="produce",le="0.0005"} 2.0' in text
    assert 'tidelog_records_in_total{topic="orders"} 1000.0' in text
    assert 'tidelog_bytes_in_total{topic="orders"} 120000.0' in text
    assert 'tidelog_bytes_out_total{topic="orders"} 50000.0' in text
    m.forget_topic("orders")
    assert 'topic="orders"' not in m.render().decode()


def test_partition_gauges_follow_the_source_at_scrape_time() -> None:
    m = BrokerMetrics("0")
    stats = [PartitionStats("t", 0, 5, 42, 4096, 2)]
    m.add_partition_source(lambda: stats)
    text = m.render().decode()
    assert 'tidelog_log_end_offset{partition="0",topic="t"} 42.0' in text
    assert 'tidelog_log_segments{partition="0",topic="t"} 2.0' in text
    stats.clear()
    assert 'topic="t"' not in m.render().decode()


def test_a_failing_partition_source_does_not_break_the_scrape() -> None:
    m = BrokerMetrics("0")

    def broken() -> list[PartitionStats]:
        raise RuntimeError("boom")

    m.add_partition_source(broken)
    assert b"tidelog_requests" in m.render()


def test_readyz_is_503_until_recovered_and_listening() -> None:
    m, ready = BrokerMetrics("0"), Readiness()
    reply = http_reply("/readyz", m, ready)
    assert reply.startswith(b"HTTP/1.0 503")
    assert json.loads(_body(reply))["checks"]["recovered"] is False
    ready.recovered = ready.listening = True
    assert http_reply("/readyz", m, ready).startswith(b"HTTP/1.0 200")
    ready.shutting_down = True
    assert http_reply("/readyz", m, ready).startswith(b"HTTP/1.0 503")


def test_healthz_metrics_and_404() -> None:
    m, ready = BrokerMetrics("0"), Readiness()
    assert http_reply("/healthz", m, ready).startswith(b"HTTP/1.0 200")
    assert http_reply("/livez", m, ready).startswith(b"HTTP/1.0 200")
    assert b"tidelog_requests" in _body(http_reply("/metrics?x=1", m, ready))
    assert http_reply("/nope", m, ready).startswith(b"HTTP/1.0 404")


async def _get(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def test_http_listener_serves_scrapes_and_refuses_other_methods() -> None:
    m, ready = BrokerMetrics("0"), Readiness()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_metrics_http, listeners, m, ready)
        got = await _get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 200") and b"tidelog_build_info" in got
        got = await _get(port, b"POST /metrics HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 405")
        got = await _get(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 200") and got.endswith(b"\r\n\r\n")
        nursery.cancel_scope.cancel()


def test_network_bytes_are_counted_per_protocol_and_direction() -> None:
    m = BrokerMetrics("0")
    m.received("tidelog", 100)
    m.received("tidelog", 50)
    m.sent("kafka", 7)
    text = m.render().decode()
    assert 'tidelog_network_bytes_total{direction="in",protocol="tidelog"} 150.0' in text
    assert 'tidelog_network_bytes_total{direction="out",protocol="kafka"} 7.0' in text
    assert "# TYPE tidelog_network_bytes_total counter" in text
    assert 'direction="out",protocol="tidelog"' not in text  # nothing sent on it yet


async def test_http_listener_refuses_past_its_connection_limit_then_serves_again() -> None:
    m, ready = BrokerMetrics("0"), Readiness()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(serve_metrics_http, listeners, m, ready, max_connections=2))
        idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        await trio.sleep(0.2)  # both accepted and waiting for their request
        got = await _get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 503") and b"too many connections" in got
        await idle.pop().aclose()
        await trio.sleep(0.2)  # the handler saw the close and gave its slot back
        got = await _get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.0 200") and b"tidelog_build_info" in got
        for stream in idle:
            await stream.aclose()
        nursery.cancel_scope.cancel()
