"""Cold reads: a task reads its offset range's remote segment objects from the bucket.

Below a tiered partition's local log start offset the records live only in the object
store (docs/tiered-storage.md). The planner asks the broker which objects hold a
range (`remote_segments`, docs/protocol.md §9); a task given such a range GETs the
objects itself, so the bytes of a cold read never pass through the broker. What it
reads is a segment's `.log` object, the same bytes the local segment file held, so it
is converted exactly as a fetch answer is: `select_batches` over the batch headers,
then `selection_to_arrow` (both layouts, no Python object per record). A GET brings
`chunk_bytes` of the object at a time (an HTTP range, `bytes=a-b`); a batch cut by the
chunk's end is carried into the next chunk. The segment's offset index object (8-byte
entries `int32 relative offset | int32 position`, docs/storage.md) gives the byte
position to start at, as it does for the broker.

Credentials are the reader's own (the connector's `s3.*` / `fs.s3a.*` options, else
boto3's chain: environment, ~/.aws, instance profile); the broker names only the bucket,
endpoint and keys. A GET that fails is retried by boto3 (standard mode); a body cut
short is retried here. An object that is gone (remote retention deleted it since
planning) raises `RemoteObjectGone`, and the caller reads the rest through the broker,
which then says what happened to those offsets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from protocol.kafka.stored import iter_any_headers
from protocol.remote_schema import SegmentObject, StoreInfo
from spark_connector.options import S3Settings

log = logging.getLogger("spark_connector")

# Bytes per ranged GET: big enough that per-request latency is amortised, small enough
# to keep a task's memory flat (two chunks are alive while the next one is fetched).
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
# Attempts per chunk whose body arrives short or broken (boto3 retries only the request).
BODY_ATTEMPTS = 4
# boto3's own attempts per request (standard retry mode: 5xx, throttling, connections).
REQUEST_ATTEMPTS = 5
# Seconds to connect and per socket read of one GET.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
# One offset index entry (docs/storage.md): relative offset, position, big-endian int32s.
_INDEX_ENTRY = np.dtype([("relative", ">i4"), ("position", ">i4")])


class RemoteObjectGone(Exception):
    """A segment object named at planning is no longer in the bucket."""


class RemoteReadError(Exception):
    """A segment object could not be read (after retries)."""


# boto3 clients by (settings, store), kept for the life of the Python worker: Spark reuses
# its workers across tasks, and building a client (botocore loads its service model)
# costs more CPU than GETting a few MiB. boto3 clients are thread-safe.
_CLIENTS: dict[tuple[S3Settings, StoreInfo], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def bucket_client(settings: S3Settings, store: StoreInfo) -> Any:
    """The worker's boto3 S3 client for `store` with `settings`, made on first use."""
    key = (settings, store)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = open_bucket_client(settings, store)
        return client


def open_bucket_client(settings: S3Settings, store: StoreInfo) -> Any:
    """A new boto3 S3 client (boto3 is imported only by tasks that read cold data)."""
    import boto3  # only cold reads need it
    from botocore.config import Config

    path_style = settings.path_style if settings.path_style is not None else store.path_style
    config = Config(
        s3={"addressing_style": "path" if path_style else "auto"},
        retries={"max_attempts": REQUEST_ATTEMPTS, "mode": "standard"},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.endpoint or store.endpoint,
        region_name=settings.region or store.region or "us-east-1",
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key,
        aws_session_token=settings.session_token,
        config=config,
    )


def _is_missing(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    code = (response or {}).get("Error", {}).get("Code")
    return code in ("NoSuchKey", "404", "NotFound")


class SegmentObjects:
    """One task's GETs of remote segment objects in one bucket. Not thread-safe beyond
    its own prefetch thread (one GET ahead)."""

    def __init__(self, client: Any, bucket: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.client, self.bucket, self.chunk_bytes = client, bucket, chunk_bytes
        self.gets = 0
        self.bytes_read = 0
        self.retried_bodies = 0
        self._prefetch = ThreadPoolExecutor(1, thread_name_prefix="tidelog-s3")

    def close(self) -> None:
        self._prefetch.shutdown(wait=True, cancel_futures=True)

    def get(self, key: str, first: int | None = None, last: int | None = None) -> bytes:
        """The object's bytes [first, last] (inclusive, HTTP's), or all of it."""
        wanted = None if first is None or last is None else last - first + 1
        problem: Exception | None = None
        for _attempt in range(BODY_ATTEMPTS):
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
            if wanted is not None:
                kwargs["Range"] = f"bytes={first}-{last}"
            try:
                response = self.client.get_object(**kwargs)
                body = response["Body"].read()
            except Exception as exc:  # botocore's errors: classified below
                if _is_missing(exc):
                    raise RemoteObjectGone(f"s3://{self.bucket}/{key} is gone") from exc
                if type(exc).__name__ == "ClientError":
                    raise RemoteReadError(f"GET s3://{self.bucket}/{key}: {exc}") from exc
                problem = exc  # a broken stream or connection: try again
                self.retried_bodies += 1
                continue
            expected = wanted if wanted is not None else response.get("ContentLength")
            if expected is not None and len(body) != expected:
                problem = RemoteReadError(f"{key}: {len(body)} bytes of {expected}")
                self.retried_bodies += 1
                continue
            self.gets += 1
            self.bytes_read += len(body)
            return bytes(body)
        raise RemoteReadError(f"GET s3://{self.bucket}/{key} failed: {problem}") from problem

    def start_position(self, segment: SegmentObject, offset: int) -> int:
        """Byte position of the last indexed batch at or below `offset` (0 without an index)."""
        if segment.index_key is None or offset <= segment.base_offset:
            return 0
        entries = np.frombuffer(self.get(segment.index_key), dtype=_INDEX_ENTRY)
        relatives = entries["relative"].astype(np.int64)
        found = int(np.searchsorted(relatives, offset - segment.base_offset, side="right")) - 1
        return int(entries["position"][found]) if found >= 0 else 0

    def chunks(self, segment: SegmentObject, offset: int, end: int) -> Iterator[memoryview]:
        """Buffers of whole batches of `segment` from the one holding `offset`, until the
        batches reach `end` or the object ends; the next chunk is fetched meanwhile."""
        position = self.start_position(segment, offset)
        size, chunk = segment.size_bytes, self.chunk_bytes
        carry = b""
        pending: tuple[int, Future[bytes]] | None = None  # (last byte, its GET)
        try:
            while position < size:
                if pending is None:
                    pending = self._submit(segment.log_key, position, chunk, size)
                last, future = pending
                data = future.result()
                pending = None
                buf = carry + data if carry else data
                whole, reached = _whole_batches(buf, end)
                position = last + 1
                if reached:
                    yield memoryview(buf)[:whole]
                    return
                carry = bytes(memoryview(buf)[whole:])
                if not whole and len(carry) >= chunk:
                    chunk *= 2  # one batch larger than a chunk: ask for more at once
                if position < size:  # on the wire while this chunk converts
                    pending = self._submit(segment.log_key, position, chunk, size)
                if whole:
                    yield memoryview(buf)[:whole]
        finally:
            if pending is not None:
                pending[1].cancel()

    def _submit(self, key: str, position: int, chunk: int, size: int) -> tuple[int, Future[bytes]]:
        last = min(position + chunk, size) - 1
        return last, self._prefetch.submit(self.get, key, position, last)


def _whole_batches(buf: bytes | memoryview, end: int) -> tuple[int, bool]:
    """Bytes of the whole batches at the start of `buf`, and whether one reaches `end`."""
    whole = 0
    for pos, header in iter_any_headers(buf):
        whole = pos + header.size
        if header.next_offset >= end:
            return whole, True
    return whole, False


def segments_for(
    segments: tuple[SegmentObject, ...], start: int, end: int
) -> tuple[SegmentObject, ...]:
    """The segments holding offsets in [start, end), in offset order."""
    return tuple(s for s in segments if s.end_offset >= start and s.base_offset < end)
