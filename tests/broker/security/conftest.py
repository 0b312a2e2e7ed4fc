"""Fixtures for security tests: a throwaway CA (trustme) and an in-process secured broker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from broker.config import BrokerConfig
from broker.security.credentials import CredentialStore
from broker.server import BrokerHandle, serve_broker
from protocol.sasl.scram import ITERATIONS_MIN


@dataclass
class Pki:
    """A CA and the PEM files of a server certificate (127.0.0.1, localhost) and its key."""

    ca: trustme.CA
    ca_file: Path
    cert_file: Path
    key_file: Path
    root: Path

    def client_cert(self, name: str, **kwargs: Any) -> tuple[str, str]:
        """(certfile, keyfile) of a client certificate with CN=name, signed by this CA."""
        leaf = self.ca.issue_cert(f"{name}.clients.test", common_name=name, **kwargs)
        cert, key = self.root / f"{name}.crt", self.root / f"{name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return str(cert), str(key)

    def tls_sets(self) -> tuple[str, ...]:
        return (f"ssl.certfile={self.cert_file}", f"ssl.keyfile={self.key_file}")


def make_pki(root: Path) -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = root / "ca.pem", root / "server.crt", root / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    for blob in leaf.cert_chain_pems:
        blob.write_to_path(str(cert_file), append=True)
    leaf.private_key_pem.write_to_path(str(key_file))
    return Pki(ca, ca_file, cert_file, key_file, root)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def add_user(data_dir: Path, name: str, password: str) -> None:
    CredentialStore(data_dir).set_user(name, password, iterations=ITERATIONS_MIN)


SecuredBroker = Callable[..., Any]


@pytest.fixture
def secured_broker(tmp_path: Path) -> Callable[..., Any]:
    """`async with secured_broker(*sets) as handle:` an in-process broker with these keys."""

    @asynccontextmanager
    async def start(*sets: str) -> AsyncIterator[BrokerHandle]:
        props = dict(item.split("=", 1) for item in sets)
        config = BrokerConfig.from_props(
            props,
            data_dir=tmp_path / "data",
            listen=("127.0.0.1", 0),
            metrics_listen=("127.0.0.1", 0),
        )
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(serve_broker, config)
            try:
                yield handle
            finally:
                handle.request_shutdown()

    return start
