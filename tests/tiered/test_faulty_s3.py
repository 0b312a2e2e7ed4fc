"""The fault proxy itself, against the real moto server: each fault reaches a real boto3
client as the failure it stands for, only for the methods chosen, and healing restores
service (the same port: clients keep their endpoint)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from tests.tiered.faulty_s3 import Fault, FaultyS3

BUCKET = "faulty-proxy-test"


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultyS3]:
    proxy = FaultyS3(moto_server)
    yield proxy
    proxy.close()


def client(endpoint: str) -> Any:
    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=2,
        read_timeout=10,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


@pytest.fixture
def s3(proxy: FaultyS3) -> Any:
    s3 = client(proxy.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="obj", Body=bytes(range(256)) * 64)
    return s3


def get(s3: Any, **kw: Any) -> bytes:
    return bytes(s3.get_object(Bucket=BUCKET, Key="obj", **kw)["Body"].read())


def test_passes_requests_through_unchanged_when_healthy(s3: Any, proxy: FaultyS3) -> None:
    assert get(s3) == bytes(range(256)) * 64
    assert get(s3, Range="bytes=10-19") == bytes(range(10, 20))
    assert proxy.counters.total("GET") == 2 and not proxy.counters.faulted


def test_down_refuses_connections_and_heals_on_the_same_port(s3: Any, proxy: FaultyS3) -> None:
    port = proxy.port
    proxy.set(Fault.DOWN)
    with pytest.raises((EndpointConnectionError, ConnectionClosedError)):
        get(s3)
    fresh = client(proxy.endpoint)  # a new connection: refused outright
    with pytest.raises(EndpointConnectionError):
        fresh.get_object(Bucket=BUCKET, Key="obj")
    proxy.heal()
    assert proxy.port == port
    assert get(fresh) == bytes(range(256)) * 64


def test_reset_500_and_truncate_fail_the_request_only_for_chosen_methods(
    s3: Any, proxy: FaultyS3
) -> None:
    proxy.set(Fault.RESET)
    with pytest.raises(ConnectionClosedError):
        get(s3)
    proxy.set(Fault.ERROR_500, methods={"GET"})
    with pytest.raises(ClientError) as info:
        get(s3)
    assert info.value.response["Error"]["Code"] == "InternalError"
    s3.put_object(Bucket=BUCKET, Key="other", Body=b"x")  # PUTs still pass
    proxy.set(Fault.ERROR_500, status=503)
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=BUCKET, Key="other", Body=b"x")
    assert info.value.response["Error"]["Code"] == "SlowDown"
    proxy.set(Fault.TRUNCATE, keep_fraction=0.25)
    with pytest.raises(Exception) as broken:  # botocore: ResponseStreamingError / IncompleteRead
        get(s3)
    assert "ClientError" not in type(broken.value).__name__
    proxy.heal()
    assert get(s3) == bytes(range(256)) * 64
    assert proxy.counters.faulted["GET"] >= 3  # urllib3 may retry a reset once itself


def test_slow_delays_every_matching_request(s3: Any, proxy: FaultyS3) -> None:
    with proxy.fault(Fault.SLOW, slow_s=1.0, methods={"GET"}):
        began = time.monotonic()
        assert get(s3, Range="bytes=0-0") == b"\x00"
        assert time.monotonic() - began >= 1.0
    began = time.monotonic()
    get(s3, Range="bytes=0-0")
    assert proxy.counters.faulted == {"GET": 1}


def test_uploads_and_heads_report_the_objects_real_size(
    s3: Any, proxy: FaultyS3, tmp_path: Any
) -> None:
    """boto3's upload_file (Expect: 100-continue, a checksum) and HEAD through the proxy."""
    source = tmp_path / "segment"
    source.write_bytes(bytes(range(256)) * 50)
    s3.upload_file(str(source), BUCKET, "uploaded")
    assert s3.head_object(Bucket=BUCKET, Key="uploaded")["ContentLength"] == 256 * 50
    assert s3.get_object(Bucket=BUCKET, Key="uploaded")["Body"].read() == source.read_bytes()
