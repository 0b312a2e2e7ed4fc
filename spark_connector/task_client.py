"""One Spark task's blocking connection: fetch answers received without copying records.

`tidelog.client.Client` decodes every answer with msgpack, which copies a fetch
answer's records (8 MiB by default) into a fresh `bytes`. A task reads hundreds of
megabytes that way, so this connection receives each frame into one buffer it keeps,
and decodes fetch answers with a typed msgspec decoder whose `records` are views of
that buffer. A view is valid until the next `receive`: the reader converts an answer
(Arrow copies the keys and values out) before it receives the next one.

Everything else is `tidelog.client.Client`'s (this class only overrides how an
answer is decoded); anything the typed decoder does not recognise is decoded the
ordinary way, so errors read exactly as the Client's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.connection import DEFAULT_MAX_RESPONSE_BYTES
from protocol.framing import decode_body
from protocol.schema_types import decoder_struct
from protocol.schemas import FETCH_PARTITION_ANSWER
from tidelog.client import Client
from tidelog.security import PLAINTEXT, Security

# The receive buffer's first size; it grows to the largest answer seen (a fetch answer
# is at most fetch.max.bytes and one batch), and stays for the task's next answers.
INITIAL_BUFFER_BYTES = 1024 * 1024

_UNSET = msgspec.UNSET


# One partition of a fetch answer, typed from the schema table (protocol/schemas.py);
# `records` decodes as a view of the receive buffer.
_Partition = decoder_struct("_Partition", FETCH_PARTITION_ANSWER, {"records": memoryview | None})


class _Topic(msgspec.Struct):
    topic: str
    partitions: list[_Partition]  # type: ignore[valid-type]


class _Body(msgspec.Struct):
    topics: list[_Topic]


class _Envelope(msgspec.Struct):
    id: int
    error: str | None = None
    message: str | None = None
    body: _Body | None = None


_FETCH_DECODER = msgspec.msgpack.Decoder(_Envelope)
_PARTITION_FIELDS = _Partition.__struct_fields__


def _fetch_response(body: memoryview) -> dict[str, Any] | None:
    """A fetch answer as the dict `decode_body` would give, records as views; None if
    it is not shaped as one (then it is decoded generically)."""
    try:
        envelope = _FETCH_DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    wire_body = None
    if envelope.body is not None:
        topics = []
        for topic in envelope.body.topics:
            partitions = []
            for part in topic.partitions:
                fields = {name: getattr(part, name) for name in _PARTITION_FIELDS}
                partitions.append({k: v for k, v in fields.items() if v is not _UNSET})
            topics.append({"topic": topic.topic, "partitions": partitions})
        wire_body = {"topics": topics}
    return {
        "id": envelope.id,
        "error": envelope.error,
        "message": envelope.message,
        "body": wire_body,
    }


class TaskClient(Client):
    """`tidelog.client.Client` whose fetch answers keep their records in the receive
    buffer: a fetch answer's `records` is a view, valid until the next `receive`."""

    def __init__(
        self,
        bootstrap_server: str,
        *,
        client_id: str | None,
        request_timeout_ms: int,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: Security = PLAINTEXT,
    ) -> None:
        super().__init__(
            bootstrap_server,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            max_response_bytes=max_response_bytes,
            security=security,
        )
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)

    def _decode_answer(self, body: memoryview) -> Any:
        if self._conn.next_api == "fetch":
            obj = _fetch_response(body)
            if obj is not None:
                return obj
        return decode_body(body)
