"""Admin requests a client library would not send, straight on the wire: the error
codes a broker answers to refused creations, deletions, alterations and record
deletions, for comparing Apache Kafka with Tidelog code by code.

    codes = admin_error_codes(bootstrap, prefix)   # {case: [error codes]}

Requests are built by kafka-python's protocol classes (a codec nobody here wrote) and
sent over one blocking socket; every case uses topic names under `prefix`, so runs on
one broker do not meet.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.api_message import ApiMessage

from interop.observed import SCENARIO_TIMEOUT_S

_SIZE = struct.Struct(">i")
CT = CreateTopicsRequest[4].CreatableTopic
IAC = IncrementalAlterConfigsRequest[0]
SET, APPEND = 0, 2


class WireClient:
    """One connection; `call(request)` sends a kafka-python request, returns its response."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=SCENARIO_TIMEOUT_S)
        self._correlation = 0

    def call(self, request: Any) -> Any:
        self._correlation += 1
        request.with_header(correlation_id=self._correlation, client_id="admin-requests")
        self._sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = _SIZE.unpack(self._read(_SIZE.size))
        response_class = _response_class(request)
        return response_class.decode(self._read(size), header=True)

    def _read(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self._sock.recv(count)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()


def _response_class(request: Any) -> type[ApiMessage]:
    for cls in ApiMessage.__subclasses__():
        if cls.API_KEY == request.API_KEY and not cls.is_request():
            return cls[request.API_VERSION]
    raise LookupError(f"no response class for API key {request.API_KEY}")


def creatable(name: str, partitions: int = 1, factor: int = 1, **configs: str | None) -> Any:
    return CT(
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        assignments=[],
        configs=[
            CT.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()
        ],
    )


def _create(client: WireClient, *topics: Any) -> list[int]:
    response = client.call(CreateTopicsRequest[4](topics=list(topics), timeout_ms=10_000))
    by_name = {t.name: t.error_code for t in response.topics}
    return [by_name[name] for name in dict.fromkeys(t.name for t in topics)]


def _alter(client: WireClient, topic: str, *ops: tuple[str, int, str | None]) -> list[int]:
    configs = [
        IAC.AlterConfigsResource.AlterableConfig(name=k, config_operation=o, value=v)
        for k, o, v in ops
    ]
    resource = IAC.AlterConfigsResource(resource_type=2, resource_name=topic, configs=configs)
    response = client.call(IAC(resources=[resource], validate_only=False))
    return [r.error_code for r in response.responses]


def _delete_records(client: WireClient, topic: str, partition: int, offset: int) -> list[int]:
    R = DeleteRecordsRequest[1]
    part = R.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=partition, offset=offset)
    response = client.call(
        R(topics=[R.DeleteRecordsTopic(name=topic, partitions=[part])], timeout_ms=10_000)
    )
    return [p.error_code for t in response.topics for p in t.partitions]


def _cases(p: str) -> dict[str, Callable[[WireClient], list[int]]]:
    """Case name -> what it answers; `p` prefixes every topic name."""
    return {
        "create": lambda c: _create(c, creatable(f"{p}-a", 2)),
        "create_existing": lambda c: _create(c, creatable(f"{p}-a")),
        "replication_factor_3": lambda c: _create(c, creatable(f"{p}-b", 1, 3)),
        "replication_factor_0": lambda c: _create(c, creatable(f"{p}-b", 1, 0)),
        "partitions_0": lambda c: _create(c, creatable(f"{p}-b", 0)),
        "illegal_name": lambda c: _create(c, creatable(f"{p} b")),
        "name_too_long": lambda c: _create(c, creatable("x" * 250)),
        "collides_in_one_request": lambda c: _create(c, creatable(f"{p}.c"), creatable(f"{p}_c")),
        "collides": lambda c: _create(c, creatable(f"{p}.e")) + _create(c, creatable(f"{p}_e")),
        "bad_value": lambda c: _create(c, creatable(f"{p}-b", retention_ms="abc")),
        "unknown_key": lambda c: _create(c, creatable(f"{p}-b", no_such_key="1")),
        "null_value": lambda c: _create(c, creatable(f"{p}-b", retention_ms=None)),
        "duplicate_names": lambda c: _create(c, creatable(f"{p}-d"), creatable(f"{p}-d")),
        "cluster_metadata": lambda c: _create(c, creatable("__cluster_metadata")),
        "append_to_scalar": lambda c: _alter(c, f"{p}-a", ("retention.ms", APPEND, "1")),
        "null_set": lambda c: _alter(c, f"{p}-a", ("retention.ms", SET, None)),
        "duplicate_keys": lambda c: _alter(
            c, f"{p}-a", ("retention.ms", SET, "1"), ("retention.ms", SET, "2")
        ),
        "alter_unknown_topic": lambda c: _alter(c, f"{p}-nope", ("retention.ms", SET, "1")),
        "delete_records_beyond": lambda c: _delete_records(c, f"{p}-a", 0, 5),
        "delete_records_minus_two": lambda c: _delete_records(c, f"{p}-a", 0, -2),
        "delete_records_no_partition": lambda c: _delete_records(c, f"{p}-a", 7, 0),
        "delete_records_to_end": lambda c: _delete_records(c, f"{p}-a", 0, -1),
        "delete_unknown": lambda c: _delete(c, f"{p}-nope", f"{p} bad"),
        "delete_twice_in_one": lambda c: _delete(c, f"{p}-a", f"{p}-a"),
        "delete": lambda c: _delete(c, f"{p}-a"),
    }


def _delete(client: WireClient, *names: str) -> list[int]:
    response = client.call(DeleteTopicsRequest[3](topic_names=list(names), timeout_ms=10_000))
    by_name = {r.name: r.error_code for r in response.responses}
    return [by_name[n] for n in dict.fromkeys(names)]


def admin_error_codes(bootstrap: str, prefix: str) -> dict[str, list[int]]:
    """Every case's error codes, in order (later cases see what earlier ones created)."""
    client = WireClient(bootstrap)
    try:
        return {name: case(client) for name, case in _cases(prefix).items()}
    finally:
        client.close()
