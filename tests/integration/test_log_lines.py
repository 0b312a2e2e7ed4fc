"""Every line the broker prints during a varied run is a JSON object with `timestamp`,
`level` and `event` (what log shippers and `jq` rely on)."""

from __future__ import annotations

import json
import socket
import struct
import time
from datetime import datetime

import pytest

from protocol.batch import encode_batch
from protocol.errors import OffsetOutOfRange, TopicAlreadyExists
from tests.conftest import BrokerFactory
from tidelog.client import Client

pytestmark = pytest.mark.integration


def test_every_log_line_is_json_with_timestamp_level_event(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(
        "log.retention.check.interval.ms=100",
        "log.initial.task.delay.ms=0",
        "log.cleaner.backoff.ms=100",
    )
    now = int(time.time() * 1000)
    with Client(broker.bootstrap) as client:
        client.create_topic("plain", 2, {"segment.bytes": 1024, "retention.bytes": 1024})
        client.create_topic("keyed", 1, {"cleanup.policy": "compact", "segment.bytes": 1024})
        with pytest.raises(TopicAlreadyExists):
            client.create_topic("plain")
        for i in range(20):
            client.produce("plain", 0, encode_batch([(b"k", b"v" * 100, None, now)]))
            client.produce("keyed", 0, encode_batch([(b"k%d" % (i % 2), b"v" * 100, None, now)]))
        client.fetch("plain", 1, 0)
        with pytest.raises(OffsetOutOfRange):
            client.fetch("plain", 1, 99)
        client.alter_configs("plain", {"retention.ms": 3_600_000})
        broker.wait_for_event("retention_deleted_segments")
        client.delete_topic("plain")
    with socket.create_connection(broker.address, timeout=10) as bad:  # a client error
        bad.sendall(struct.pack(">I", 3) + b"\xc1\xc1\xc1")
        bad.recv(1024)
    assert broker.stop() == 0

    lines = [line for line in broker.lines if line.strip()]
    assert len(lines) > 10
    for line in lines:
        event = json.loads(line)
        assert isinstance(event, dict), line
        assert {"timestamp", "level", "event"} <= event.keys(), line
        assert event["level"] in {"debug", "info", "warning", "error", "critical"}, line
        assert datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).tzinfo, line
    names = {json.loads(line)["event"] for line in lines}
    for expected in ("broker_ready", "topic_created", "topic_deleted", "shutdown_complete"):
        assert expected in names, (expected, sorted(names))
