"""Fixtures of the tiered-storage tests: a real S3 server (moto, server mode)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.tiered.s3_helpers import CLIENT_CONFIG, S3Bucket


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def s3_bucket() -> Iterator[S3Bucket]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=CLIENT_CONFIG,
    )
    name = f"b-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=name)
    bucket = S3Bucket(server, endpoint, name, client)
    yield bucket
    bucket.stop()
