"""The S3 client: boto3 behind two small classes, blocking and async.

`BlockingObjectStore` makes the calls (boto3's client is thread-safe, so one instance
serves every worker thread); `ObjectStore` offers the same operations as coroutines that
run each blocking call through a `RunSync` the caller provides. The broker passes one
that calls `trio.to_thread.run_sync` under its own `trio.CapacityLimiter`
(broker/tiered/runner.py), so no store call ever blocks the event loop and at most
`tidelog.remote.storage.threads` of them run at once. (storage/ imports no trio.)

Why boto3 and not our own HTTP client: SigV4 signing, botocore's retry policy, ranged
GETs and multipart uploads are a well-kept library's job; moto's server (tests) and
every S3-compatible store speak to it.

Errors: every failure becomes `RemoteStorageError` (errors.py) with its kind and
`retriable`; a missing key is `head() -> None`, and NOT_FOUND for `get_range`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import boto3
import botocore.config
import botocore.exceptions
from boto3.s3.transfer import TransferConfig

from storage.remote.errors import RemoteErrorKind, RemoteStorageError
from storage.remote.settings import RemoteStoreSettings

__all__ = ["BlockingObjectStore", "ObjectInfo", "ObjectStore", "RunSync"]

T = TypeVar("T")

# S3's DeleteObjects takes at most 1000 keys per request.
DELETE_BATCH_KEYS_MAX = 1000
# ListObjectsV2 answers at most 1000 keys per page.
LIST_PAGE_KEYS = 1000
# Files above this go up in parts (S3's smallest part is 5 MiB); a part is retried alone.
MULTIPART_THRESHOLD_BYTES = 64 * 1024 * 1024
MULTIPART_CHUNK_BYTES = 16 * 1024 * 1024
# HTTP connections botocore keeps per client: one per worker thread that may call it.
CONNECTION_POOL_MAX = 32

ProgressFn = Callable[[int], None]
OCTET_STREAM = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object's key and size (and ETag, quotes removed)."""

    key: str
    size_bytes: int
    etag: str = ""


_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NoSuchBucket", "NotFound"})
_FORBIDDEN_CODES = frozenset(
    {"401", "403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}
)


def _kind_of_client_error(exc: botocore.exceptions.ClientError) -> RemoteErrorKind:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _NOT_FOUND_CODES or status == 404:
        return RemoteErrorKind.NOT_FOUND
    if code in _FORBIDDEN_CODES or status in (401, 403):
        return RemoteErrorKind.FORBIDDEN
    if status == 412 or code == "PreconditionFailed":
        return RemoteErrorKind.PRECONDITION
    if status >= 500 or status == 429 or code in ("SlowDown", "InternalError", "RequestTimeout"):
        return RemoteErrorKind.SERVER_ERROR
    return RemoteErrorKind.CLIENT_ERROR


def classify(exc: Exception) -> RemoteErrorKind:
    """The kind of a boto3/botocore/transfer exception."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return _kind_of_client_error(exc)
    if isinstance(
        exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return RemoteErrorKind.FORBIDDEN
    if isinstance(
        exc, botocore.exceptions.IncompleteReadError | botocore.exceptions.ResponseStreamingError
    ):
        return RemoteErrorKind.CORRUPT
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, boto3.exceptions.S3UploadFailedError) and isinstance(cause, Exception):
        return classify(cause)
    if isinstance(exc, boto3.exceptions.S3UploadFailedError):
        # s3transfer folds the ClientError into the message: "... (500) ..."
        text = str(exc)
        if "(403)" in text or "AccessDenied" in text or "InvalidAccessKeyId" in text:
            return RemoteErrorKind.FORBIDDEN
        if "(404)" in text or "NoSuchBucket" in text:
            return RemoteErrorKind.NOT_FOUND
        return RemoteErrorKind.SERVER_ERROR
    # Connection refused/reset, timeouts, DNS: the store is not answering.
    return RemoteErrorKind.UNAVAILABLE


@contextmanager
def _translated(operation: str, bucket: str, key: str) -> Iterator[None]:
    try:
        yield
    except RemoteStorageError:
        raise
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError,
            boto3.exceptions.Boto3Error, OSError) as exc:  # fmt: skip
        if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
            raise  # a local file problem, not the store's
        kind = classify(exc)
        raise RemoteStorageError(
            f"{operation} s3://{bucket}/{key} failed: {type(exc).__name__}: {exc}", kind, key=key
        ) from exc


class BlockingObjectStore:
    """S3 operations that block the calling thread. Thread-safe (one boto3 client)."""

    def __init__(
        self,
        settings: RemoteStoreSettings,
        *,
        multipart_threshold_bytes: int = MULTIPART_THRESHOLD_BYTES,
        multipart_chunk_bytes: int = MULTIPART_CHUNK_BYTES,
    ) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        credentials = settings.credentials
        config = botocore.config.Config(
            region_name=settings.region,
            signature_version="s3v4",
            s3={"addressing_style": "path" if settings.path_style else "virtual"},
            retries={"max_attempts": settings.max_attempts, "mode": "standard"},
            connect_timeout=settings.connect_timeout_ms / 1000,
            read_timeout=settings.read_timeout_ms / 1000,
            max_pool_connections=CONNECTION_POOL_MAX,
            # Checksums only when an operation requires them: S3-compatible servers differ.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = boto3.session.Session(
            aws_access_key_id=credentials.access_key_id if credentials else None,
            aws_secret_access_key=credentials.secret_access_key if credentials else None,
            aws_session_token=(credentials.session_token or None) if credentials else None,
            region_name=settings.region,
        )
        self._client: Any = session.client(
            "s3", endpoint_url=settings.endpoint or None, config=config
        )
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold_bytes,
            multipart_chunksize=multipart_chunk_bytes,
            use_threads=False,  # already in a worker thread; the limiter bounds threads
        )

    def put_file(self, key: str, path: Path, on_progress: ProgressFn | None = None) -> None:
        """Upload a local file (multipart above MULTIPART_THRESHOLD_BYTES).

        `on_progress(bytes)` is called in this thread as bytes go out; a bandwidth
        throttle sleeps in it."""
        with _translated("PUT", self.bucket, key):
            self._client.upload_file(
                str(path), self.bucket, key, Config=self._transfer, Callback=on_progress
            )

    def put_bytes(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        with _translated("PUT", self.bucket, key):
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType=content_type
            )

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of an object; fewer only where the object ends.

        A body shorter than the store announced is CORRUPT (retriable)."""
        if start < 0 or length < 1:
            raise ValueError(f"get_range {key}: bad range start={start} length={length}")
        with _translated("GET", self.bucket, key):
            answer = self._client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )
            data: bytes = answer["Body"].read()
            expected = length
            total = _total_size(answer.get("ContentRange", ""))
            if total is not None:
                expected = max(0, min(length, total - start))
            if len(data) != expected:
                raise RemoteStorageError(
                    f"GET s3://{self.bucket}/{key} bytes={start}+{length}: body of "
                    f"{len(data)} bytes, expected {expected}",
                    RemoteErrorKind.CORRUPT,
                    key=key,
                )
            return data

    def get(self, key: str) -> bytes:
        """A whole object (small ones: manifests, indexes)."""
        with _translated("GET", self.bucket, key):
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
            data: bytes = answer["Body"].read()
            announced = answer.get("ContentLength")
            if announced is not None and len(data) != int(announced):
                raise RemoteStorageError(
                    f"GET s3://{self.bucket}/{key}: body of {len(data)} bytes, "
                    f"expected {announced}",
                    RemoteErrorKind.CORRUPT,
                    key=key,
                )
            return data

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size and ETag, or None when there is no such key."""
        try:
            with _translated("HEAD", self.bucket, key):
                answer = self._client.head_object(Bucket=self.bucket, Key=key)
        except RemoteStorageError as exc:
            if exc.kind is RemoteErrorKind.NOT_FOUND and "NoSuchBucket" not in exc.message:
                return None
            raise
        return ObjectInfo(key, int(answer["ContentLength"]), str(answer.get("ETag", "")).strip('"'))

    def delete(self, keys: Iterable[str], batch_keys: int = DELETE_BATCH_KEYS_MAX) -> None:
        """Delete keys (missing ones are not an error: S3 deletes are idempotent), in
        DeleteObjects requests of `batch_keys`."""
        pending = list(dict.fromkeys(keys))
        for i in range(0, len(pending), batch_keys):
            batch = pending[i : i + batch_keys]
            with _translated("DELETE", self.bucket, batch[0]):
                answer = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                code = str(first.get("Code", ""))
                kind = (
                    RemoteErrorKind.FORBIDDEN
                    if code in _FORBIDDEN_CODES
                    else RemoteErrorKind.SERVER_ERROR
                )
                raise RemoteStorageError(
                    f"DELETE s3://{self.bucket}/{first.get('Key')} failed: {code}: "
                    f"{first.get('Message', '')} ({len(errors)} of {len(batch)} keys)",
                    kind,
                    key=str(first.get("Key", "")),
                )

    def list(self, prefix: str, page_keys: int = LIST_PAGE_KEYS) -> list[ObjectInfo]:
        """Every object under `prefix`, in key order (ListObjectsV2 pages of `page_keys`)."""
        found: list[ObjectInfo] = []
        with _translated("LIST", self.bucket, prefix):
            paginator = self._client.get_paginator("list_objects_v2")
            pages = paginator.paginate(
                Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": page_keys}
            )
            for page in pages:
                for item in page.get("Contents", []):
                    found.append(
                        ObjectInfo(
                            item["Key"], int(item["Size"]), str(item.get("ETag", "")).strip('"')
                        )
                    )
        return found

    def close(self) -> None:
        self._client.close()


def _total_size(content_range: str) -> int | None:
    """The total of `bytes a-b/total`, or None if absent or unknown (`*`)."""
    _, sep, total = content_range.rpartition("/")
    return int(total) if sep and total.isdigit() else None


class RunSync(Protocol):
    """Runs a blocking callable off the event loop and returns its result."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class ObjectStore:
    """The blocking store's operations as coroutines, each run through `run_sync`."""

    def __init__(self, blocking: BlockingObjectStore, run_sync: RunSync) -> None:
        self.blocking = blocking
        self.settings = blocking.settings
        self._run_sync = run_sync

    async def put_file(self, key: str, path: Path, on_progress: ProgressFn | None = None) -> None:
        await self._run_sync(partial(self.blocking.put_file, key, path, on_progress))

    async def put_bytes(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        await self._run_sync(partial(self.blocking.put_bytes, key, data, content_type))

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        return await self._run_sync(partial(self.blocking.get_range, key, start, length))

    async def get(self, key: str) -> bytes:
        return await self._run_sync(partial(self.blocking.get, key))

    async def head(self, key: str) -> ObjectInfo | None:
        return await self._run_sync(partial(self.blocking.head, key))

    async def delete(self, keys: Iterable[str]) -> None:
        await self._run_sync(partial(self.blocking.delete, list(keys)))

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self._run_sync(partial(self.blocking.list, prefix))

    def close(self) -> None:
        self.blocking.close()
