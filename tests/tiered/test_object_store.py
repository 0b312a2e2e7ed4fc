"""ObjectStore against a real S3-compatible server (moto on loopback).

Every operation, its errors (missing key, bad credentials, a store that is down) and
the async face through trio worker threads.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import trio

from broker.tiered.runner import open_object_store
from storage.remote import (
    BlockingObjectStore,
    Credentials,
    RemoteErrorKind,
    RemoteStorageError,
)
from tests.tiered.conftest import S3Server


def test_put_get_range_head_list_delete(s3_server: S3Server, tmp_path: Path) -> None:
    store = BlockingObjectStore(s3_server.settings())
    data = os.urandom(100_000)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    progress: list[int] = []
    store.put_file("p/a.log", path, on_progress=progress.append)
    assert sum(progress) == len(data)
    store.put_bytes("p/b.json", b"{}")
    assert s3_server.get("p/a.log") == data  # what another client sees
    assert store.get_range("p/a.log", 0, 10) == data[:10]
    assert store.get_range("p/a.log", 4096, 5000) == data[4096:9096]
    # A range past the end is cut where the object ends.
    assert store.get_range("p/a.log", len(data) - 3, 100) == data[-3:]
    assert store.get("p/b.json") == b"{}"
    head = store.head("p/a.log")
    assert head is not None and head.size_bytes == len(data) and head.etag
    assert store.head("p/missing") is None
    assert [(o.key, o.size_bytes) for o in store.list("p/")] == [
        ("p/a.log", len(data)),
        ("p/b.json", 2),
    ]
    assert store.list("q/") == []
    store.delete(["p/a.log", "p/never-existed"])
    assert s3_server.object_keys() == ["p/b.json"]


def test_listing_and_deleting_more_than_one_page(s3_server: S3Server) -> None:
    store = BlockingObjectStore(s3_server.settings())
    client = s3_server.client()
    keys = [f"many/{i:05d}" for i in range(25)]
    for key in keys:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"x")
    assert [o.key for o in store.list("many/", page_keys=10)] == keys  # three pages
    store.delete(keys, batch_keys=10)  # three DeleteObjects requests
    assert s3_server.object_keys() == []


def test_large_file_goes_up_in_parts(s3_server: S3Server, tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    part = 5 * 1024 * 1024  # S3's smallest part
    size = 2 * part + 1_000_003
    with path.open("wb") as out:
        out.truncate(size)
        out.seek(size - 7)
        out.write(b"the end")
    store = BlockingObjectStore(
        s3_server.settings(), multipart_threshold_bytes=part, multipart_chunk_bytes=part
    )
    store.put_file("big.log", path)
    head = s3_server.client().head_object(Bucket=s3_server.bucket, Key="big.log")
    assert head["ContentLength"] == size
    assert head["ETag"].strip('"').endswith("-3")  # a multipart ETag is <md5>-<parts>
    assert store.get_range("big.log", size - 7, 7) == b"the end"


def test_missing_key_is_not_found_and_not_retriable(s3_server: S3Server) -> None:
    store = BlockingObjectStore(s3_server.settings())
    with pytest.raises(RemoteStorageError) as caught:
        store.get_range("nope.log", 0, 10)
    assert caught.value.kind is RemoteErrorKind.NOT_FOUND
    assert not caught.value.retriable
    assert "nope.log" in str(caught.value) and caught.value.key == "nope.log"


def test_missing_bucket_is_not_found(s3_server: S3Server, tmp_path: Path) -> None:
    store = BlockingObjectStore(s3_server.settings(bucket="no-such-bucket"))
    path = tmp_path / "x"
    path.write_bytes(b"x")
    with pytest.raises(RemoteStorageError) as caught:
        store.put_file("k", path)
    assert caught.value.kind is RemoteErrorKind.NOT_FOUND
    with pytest.raises(RemoteStorageError) as listed:
        store.list("")
    assert listed.value.kind is RemoteErrorKind.NOT_FOUND


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_store_down_is_unavailable_and_retriable(s3_server: S3Server) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    store = BlockingObjectStore(
        s3_server.settings(endpoint=endpoint, connect_timeout_ms=200, max_attempts=1)
    )
    with pytest.raises(RemoteStorageError) as caught:
        store.get_range("k", 0, 1)
    assert caught.value.kind is RemoteErrorKind.UNAVAILABLE
    assert caught.value.retriable
    assert endpoint.split("//")[1] in str(caught.value) or "Connect" in str(caught.value)


def test_local_file_missing_is_an_os_error_not_a_store_error(
    s3_server: S3Server, tmp_path: Path
) -> None:
    store = BlockingObjectStore(s3_server.settings())
    with pytest.raises(FileNotFoundError):
        store.put_file("k", tmp_path / "gone.log")


def test_credentials_are_hidden_from_repr(s3_server: S3Server) -> None:
    settings = s3_server.settings(credentials=Credentials("AKID", "very-secret", "token"))
    assert "very-secret" not in repr(settings) and "token" not in repr(settings)


async def test_async_store_runs_calls_in_worker_threads(
    s3_server: S3Server, tmp_path: Path
) -> None:
    limiter = trio.CapacityLimiter(2)
    store = open_object_store(s3_server.settings(), limiter)
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    loop_thread = trio.lowlevel.current_trio_token()
    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(store.put_file, f"k{i}", path)
    assert loop_thread is trio.lowlevel.current_trio_token()
    assert [o.key for o in await store.list("k")] == [f"k{i}" for i in range(6)]
    assert await store.get_range("k3", 2, 3) == b"234"
    assert await store.head("k9") is None
    await store.delete([f"k{i}" for i in range(6)])
    assert await store.list("") == []
    with pytest.raises(RemoteStorageError):
        await store.get("k0")
    store.close()


class _AnsweringServer:
    """An HTTP server on loopback that answers every request the same way: a status
    with an S3 error document, or a 206 whose body stops short of its Content-Length.
    (A stand-in for a misbehaving store; the client under test is the real one.)"""

    def __init__(self, status: int, code: str = "", truncate: bool = False) -> None:
        import http.server
        import threading

        answer_status, answer_code = status, code

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.close_connection = True
                if length and "100-continue" not in self.headers.get("Expect", ""):
                    self.rfile.read(length)  # (with Expect, answer before the body comes)
                if truncate:
                    self.send_response(206)
                    self.send_header("Content-Length", "100")
                    self.send_header("Content-Range", "bytes 0-99/1000")
                    self.end_headers()
                    self.wfile.write(b"x" * 40)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                body = (
                    f"<?xml version='1.0'?><Error><Code>{answer_code}</Code>"
                    f"<Message>told to fail</Message></Error>"
                ).encode()
                self.send_response(answer_status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (403, "AccessDenied", RemoteErrorKind.FORBIDDEN),
        (403, "InvalidAccessKeyId", RemoteErrorKind.FORBIDDEN),
        (500, "InternalError", RemoteErrorKind.SERVER_ERROR),
        (503, "SlowDown", RemoteErrorKind.SERVER_ERROR),
    ],
)
def test_error_answers_become_typed_errors(
    s3_server: S3Server, tmp_path: Path, status: int, code: str, kind: RemoteErrorKind
) -> None:
    server = _AnsweringServer(status, code)
    try:
        store = BlockingObjectStore(s3_server.settings(endpoint=server.endpoint, max_attempts=1))
        path = tmp_path / "f"
        path.write_bytes(b"data")
        calls = [
            lambda: store.get_range("k", 0, 10),
            lambda: store.put_file("k", path),
            lambda: store.put_bytes("k", b"x"),
            lambda: store.list("p/"),
            lambda: store.delete(["k"]),
            lambda: store.head("k"),
        ]
        for call in calls:
            with pytest.raises(RemoteStorageError) as caught:
                call()
            assert caught.value.kind is kind, (call, caught.value)
            assert caught.value.retriable is (kind is RemoteErrorKind.SERVER_ERROR)
    finally:
        server.close()


def test_truncated_body_is_corrupt_and_retriable(s3_server: S3Server) -> None:
    server = _AnsweringServer(206, truncate=True)
    try:
        store = BlockingObjectStore(s3_server.settings(endpoint=server.endpoint, max_attempts=1))
        with pytest.raises(RemoteStorageError) as caught:
            store.get_range("k", 0, 100)
        assert caught.value.kind is RemoteErrorKind.CORRUPT and caught.value.retriable
    finally:
        server.close()
