"""Damage in one partition stays in that partition (issue 23, finding 4).

A batch header spoiled on disk while the broker is stopped (a clean stop: nothing
is rescanned at start) is found by the fetch that walks into it. That partition
gets CORRUPT_MESSAGE for the damaged range, the rest of the request is served, and
no fetch answers "nothing" below the high watermark.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from protocol.batch import BATCH_LENGTH_OFFSET, iter_records
from storage.files import log_path
from tests.conftest import BrokerFactory
from tests.integration.wire import WireClient, batch

BATCHES = 6
DAMAGED = 3
# An index entry per batch: a clean start scans only from the last one, so it does
# not see damage further back (the case a fetch must handle).
SETTINGS = ("log.index.interval.bytes=0",)


def _fetch_body(offsets: dict[int, int]) -> dict[str, Any]:
    partitions = [{"partition": p, "offset": o, "max_bytes": 1 << 20} for p, o in offsets.items()]
    return {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [{"topic": "t", "partitions": partitions}],
    }


def test_damage_in_one_partition_leaves_the_other_served(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(*SETTINGS)
    sizes = []
    with WireClient(broker.address) as client:
        client.create_topic("t", 2)
        for partition in (0, 1):
            for i in range(BATCHES):
                records = batch(f"p{partition}-{i}".encode())
                sizes.append(len(records))
                assert client.produce("t", records, partition=partition)["error"] is None
    assert broker.stop() == 0
    segment = log_path(tmp_path / "data" / "t-0", 0)
    with open(segment, "r+b") as f:
        at = sum(sizes[:DAMAGED]) + BATCH_LENGTH_OFFSET
        f.seek(at)
        (length,) = struct.unpack(">i", f.read(4))
        f.seek(at)
        f.write(struct.pack(">i", length + 9))

    broker = broker_factory(*SETTINGS)
    with WireClient(broker.address) as client:
        response = client.call("fetch", _fetch_body({0: 0, 1: 0}))
        assert response["error"] is None, response
        first, second = response["body"]["topics"][0]["partitions"]
        assert first["error"] is None and first["high_watermark"] == BATCHES
        assert [r.offset for r in iter_records(first["records"])] == [0, 1, 2]
        assert second["error"] is None
        assert [r.value for r in iter_records(second["records"])] == [
            f"p1-{i}".encode() for i in range(BATCHES)
        ]
        for offset in range(DAMAGED, BATCHES):
            response = client.call("fetch", _fetch_body({0: offset, 1: 2}))
            assert response["error"] is None, response
            first, second = response["body"]["topics"][0]["partitions"]
            assert first["error"] == "CORRUPT_MESSAGE" and first["records"] == b""
            assert "fenced" in first["message"]
            assert [r.offset for r in iter_records(second["records"])] == [2, 3, 4, 5]
    assert len(broker.events("segment_fenced")) == 1
