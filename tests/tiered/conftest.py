"""A real S3-compatible server for the tiered-storage tests: moto in server mode.

`moto_server` (session) runs `moto.server.ThreadedMotoServer` on a free loopback port
in this process; S3 requests reach it over TCP like any store's. `s3_server` (per test)
creates a fresh bucket on it and yields an `S3Server`: the endpoint, the bucket, the
credentials (as settings, as environment variables for a broker process, and as
`--set` options), and a plain boto3 client for a test to look at the bucket itself.
No part of Tidelog is mocked: the broker talks to the server through boto3.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.config
import pytest
from moto.server import ThreadedMotoServer

from storage.remote import Credentials, RemoteStoreSettings

ACCESS_KEY_ID = "tidelog-test-key"
SECRET_ACCESS_KEY = "tidelog-test-secret"
REGION = "us-east-1"
_bucket_numbers = itertools.count()


@dataclass(frozen=True)
class S3Server:
    """One test's bucket on the shared moto server."""

    endpoint: str
    bucket: str
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    region: str = REGION

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.access_key_id, self.secret_access_key)

    def settings(self, prefix: str = "tidelog", **changes: Any) -> RemoteStoreSettings:
        """Store settings for this bucket (short timeouts: the server is local)."""
        values: dict[str, Any] = {
            "bucket": self.bucket,
            "endpoint": self.endpoint,
            "prefix": prefix,
            "region": self.region,
            "credentials": self.credentials,
            "connect_timeout_ms": 2000,
            "read_timeout_ms": 10000,
        }
        values.update(changes)
        return RemoteStoreSettings(**values)

    @property
    def env(self) -> dict[str, str]:
        """Environment variables a broker process reads its credentials from."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }

    def broker_options(self, prefix: str = "tidelog") -> list[str]:
        """`key=value` settings (for `--set`) turning tiered storage on for this bucket."""
        return [
            "remote.log.storage.system.enable=true",
            f"tidelog.remote.storage.endpoint={self.endpoint}",
            f"tidelog.remote.storage.bucket={self.bucket}",
            f"tidelog.remote.storage.prefix={prefix}",
            f"tidelog.remote.storage.region={self.region}",
        ]

    def client(self) -> Any:
        """A boto3 client of its own, for tests to inspect or damage the bucket."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def object_keys(self, prefix: str = "") -> list[str]:
        """Every key in the bucket under `prefix`, sorted."""
        paginator = self.client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def get(self, key: str) -> bytes:
        body: bytes = self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server on a free loopback port."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_server(moto_server: str) -> Iterator[S3Server]:
    """A fresh, empty bucket on the moto server."""
    server = S3Server(endpoint=moto_server, bucket=f"tidelog-{os.getpid()}-{next(_bucket_numbers)}")
    client = server.client()
    client.create_bucket(Bucket=server.bucket)
    yield server
    for key in server.object_keys():
        client.delete_object(Bucket=server.bucket, Key=key)
    client.delete_bucket(Bucket=server.bucket)


@dataclass
class OwnS3:
    """A moto server of one test's own, which the test may stop (the store going down),
    with one bucket (`s3`: endpoint, bucket, broker options, a client)."""

    moto: ThreadedMotoServer
    s3: S3Server
    running: bool = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.moto.stop()


@pytest.fixture
def own_s3() -> Iterator[OwnS3]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3Server(
        endpoint=f"http://{host}:{port}", bucket=f"own-{os.getpid()}-{next(_bucket_numbers)}"
    )
    s3.client().create_bucket(Bucket=s3.bucket)
    own = OwnS3(server, s3)
    yield own
    own.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `tiered` (the long kill -9 sweep) run under `make tiered` only:
    `-m tiered` selects them; `make test` deselects them (reported as deselected)."""
    if re.search(r"(?<!not )\btiered\b", config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("tiered") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
