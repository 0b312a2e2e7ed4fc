"""What a partition holds around transactions, seen on the wire (issue 36): a raw Fetch v4
under either isolation level gives the batches (transactional? control? COMMIT or ABORT?),
the last stable offset, the high watermark and the aborted-transactions list, which no
client library exposes. Requests and records are kafka-python's classes (a codec nobody
here wrote), sent by `interop.admin_requests.WireClient`.

Producer ids differ between brokers (and runs), so `partition_view` names them by order
of first appearance: "P0", "P1", ...
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.record.memory_records import MemoryRecords

from interop.admin_requests import WireClient

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_VERSION = 4  # the first with IsolationLevel, the aborted list and the LSO
MAX_BYTES = 1 << 20
_MARKER_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
MARKER_TYPES = {0: "ABORT", 1: "COMMIT"}


class ProducerNames:
    """Producer ids -> "P0", "P1", ... in the order they are first met."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def __call__(self, producer_id: int) -> str:
        if producer_id < 0:
            return "none"
        return self._names.setdefault(producer_id, f"P{len(self._names)}")


def fetch(bootstrap: str, topic: str, partition: int, offset: int, isolation: int) -> Any:
    """One Fetch v4 of `topic`/`partition` from `offset`: the response's partition data."""
    client = WireClient(bootstrap)
    try:
        part = FetchRequest[FETCH_VERSION].FetchTopic.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=MAX_BYTES
        )
        request = FetchRequest[FETCH_VERSION](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MAX_BYTES,
            isolation_level=isolation,
            topics=[FetchRequest[FETCH_VERSION].FetchTopic(topic=topic, partitions=[part])],
        )  # fmt: skip
        response = client.call(request)
    finally:
        client.close()
    [topic_response] = response.responses
    [data] = topic_response.partitions
    return data


def batches(records: bytes | None, names: ProducerNames) -> list[dict[str, Any]]:
    """Each batch's offsets, producer, flags and (control batches) marker type."""
    out: list[dict[str, Any]] = []
    memory = MemoryRecords(records or b"")
    while (batch := memory.next_batch()) is not None:
        entry: dict[str, Any] = {
            "base_offset": batch.base_offset,
            "last_offset": batch.last_offset,
            "producer": names(batch.producer_id),
            "transactional": bool(batch.is_transactional),
            "control": bool(batch.is_control_batch),
        }
        if batch.is_control_batch:
            [record] = list(batch)
            _version, kind = _MARKER_KEY.unpack(bytes(record.key)[: _MARKER_KEY.size])
            entry["marker"] = MARKER_TYPES.get(kind, kind)
        else:
            entry["values"] = [bytes(r.value).decode() for r in batch]
        out.append(entry)
    return out


def partition_view(
    bootstrap: str, topic: str, partition: int, isolation: int, names: ProducerNames
) -> dict[str, Any]:
    """Everything one Fetch from offset 0 answers, producer ids named by `names`."""
    data = fetch(bootstrap, topic, partition, 0, isolation)
    aborted = data.aborted_transactions
    return {
        "error_code": data.error_code,
        "high_watermark": data.high_watermark,
        "last_stable_offset": data.last_stable_offset,
        # null (not asked, or none) and [] are different answers on the wire: keep which
        "aborted": None
        if aborted is None
        else sorted([names(a.producer_id), a.first_offset] for a in aborted),
        "batches": batches(data.records, names),
    }


def topic_view(bootstrap: str, topic: str, partitions: int, names: ProducerNames) -> dict[str, Any]:
    """`partition_view` of every partition under both isolation levels."""
    return {
        level: {
            str(p): partition_view(bootstrap, topic, p, isolation, names)
            for p in range(partitions)
        }
        for level, isolation in (("read_uncommitted", READ_UNCOMMITTED),
                                 ("read_committed", READ_COMMITTED))
    }  # fmt: skip


def offset_fetch(
    bootstrap: str, group: str, topic: str, partitions: int, *, require_stable: bool
) -> dict[str, Any]:
    """OffsetFetch v7 (the first with require_stable, KIP-447): per partition its
    committed offset and error code, and the top-level error code."""
    from kafka.protocol.consumer.group import OffsetFetchRequest

    request_class = OffsetFetchRequest[7]
    client = WireClient(bootstrap)
    try:
        response = client.call(
            request_class(
                group_id=group,
                topics=[
                    request_class.OffsetFetchRequestTopic(
                        name=topic, partition_indexes=list(range(partitions))
                    )
                ],
                require_stable=require_stable,
            )
        )
    finally:
        client.close()
    return {
        "error_code": response.error_code,
        "partitions": {
            str(p.partition_index): [p.committed_offset, p.error_code]
            for t in response.topics
            for p in t.partitions
        },
    }
