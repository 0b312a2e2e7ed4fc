"""Structured logging: JSON lines with bound context, redaction, stdlib bridged in."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
import structlog
import trio

from broker.logging import configure_logging, get_logger, request_fields
from broker.native.requests import handle_request
from protocol.batch import encode_batch
from tests.broker.contexts import NOW_MS, open_context

pytestmark = pytest.mark.usefixtures("restore_logging")


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_with_context_and_redaction() -> None:
    out = io.StringIO()
    configure_logging(fmt="json", level="info", stream=out)
    log = get_logger(component="test")
    with structlog.contextvars.bound_contextvars(conn_id=7, peer="127.0.0.1:5"):
        log.info("config_changed", topic="t", sasl_password="hunter2", api_token="x")
    log.debug("too_quiet")
    (event,) = _lines(out)
    assert event["event"] == "config_changed"
    assert event["conn_id"] == 7 and event["peer"] == "127.0.0.1:5"
    assert event["component"] == "test" and event["level"] == "info"
    assert event["timestamp"].endswith("Z")
    assert event["sasl_password"] == "[redacted]" and event["api_token"] == "[redacted]"
    assert "hunter2" not in out.getvalue()


def test_exceptions_become_structured_tracebacks() -> None:
    out = io.StringIO()
    configure_logging(fmt="json", stream=out)
    record_value = b"card-number-4111"  # a local of the failing frame
    try:
        raise ValueError(f"boom after {len(record_value)} bytes")
    except ValueError:
        get_logger().exception("request_crashed", api="fetch")
    (event,) = _lines(out)
    assert event["event"] == "request_crashed"
    assert event["exception"][0]["exc_type"] == "ValueError"
    assert event["exception"][0]["frames"], "the frames are kept"
    assert "card-number" not in out.getvalue(), "locals must not reach the log"


def test_stdlib_loggers_share_the_format_and_reconfiguring_does_not_duplicate() -> None:
    configure_logging(fmt="json", stream=io.StringIO())
    out = io.StringIO()
    configure_logging(fmt="json", stream=out)
    logging.getLogger("storage.something").warning("disk %s", "slow")
    (event,) = _lines(out)
    assert event["event"] == "disk slow"
    assert event["logger"] == "storage.something" and event["level"] == "warning"


def test_console_renderer_when_asked() -> None:
    out = io.StringIO()
    configure_logging(fmt="console", stream=out)
    get_logger().info("broker_ready", port=9092)
    text = out.getvalue()
    assert "broker_ready" in text and "port=9092" in text
    assert not text.lstrip().startswith("{")


async def test_request_fields_tag_the_lines_of_the_request_and_its_tasks() -> None:
    out = io.StringIO()
    configure_logging(fmt="json", stream=out)
    log = get_logger()

    def in_thread() -> None:
        log.info("from_thread")

    with structlog.contextvars.bound_contextvars(conn_id=3):
        with request_fields(api="fetch", request_id=11):
            log.info("inside", request_id=12)  # the line's own key wins
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: trio.to_thread.run_sync(in_thread))
        log.info("after")
    inside, from_thread, after = _lines(out)
    assert (inside["api"], inside["request_id"], inside["conn_id"]) == ("fetch", 12, 3)
    assert (from_thread["api"], from_thread["request_id"]) == ("fetch", 11)
    assert "api" not in after and "request_id" not in after and after["conn_id"] == 3


async def test_a_handlers_log_line_names_the_api_and_request_id(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The msgspec codec tags what a handler logs with the request it serves."""
    out = io.StringIO()
    configure_logging(fmt="json", stream=out)
    ctx = open_context(tmp_path / "data", nursery)
    batch = encode_batch([(None, b"v", (), None)], now_ms=NOW_MS)
    partitions = [{"partition": 0, "records": batch}]
    topics = [{"topic": "__consumer_offsets", "partitions": partitions}]
    body = {"acks": 1, "timeout_ms": 1000, "topics": topics}
    try:
        await handle_request(ctx, {"api": "produce", "v": 1, "id": 41, "body": body}, 0.0)
    finally:
        ctx.manager.close()
    (rejected,) = (line for line in _lines(out) if line["event"] == "produce_rejected")
    assert (rejected["api"], rejected["request_id"]) == ("produce", 41)
