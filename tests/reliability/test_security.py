"""Security basics (docs/reliability.md SE-01, SE-05): loopback by default, a warning when
a listener leaves loopback without TLS, and topic-name rules wherever a name arrives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import WireClient, batch

BAD_NAMES = [
    "",
    ".",
    "..",
    "../escape",
    "a/b",
    "a\\b",
    "a\x00b",
    "é",
    " lead",
    "x" * 250,
]


def listening_addresses(pid: int) -> set[str]:
    """Local addresses of the LISTEN sockets of `pid` (from /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    host_hex = cols[1].split(":")[0]
                    found.add(host_hex)
    return found


def test_listeners_default_to_loopback(tmp_path: Path) -> None:
    config = BrokerConfig.from_sources(data_dir=tmp_path)
    assert config.listen[0] == "127.0.0.1"
    assert config.metrics_listen[0] == "127.0.0.1"


def test_running_broker_listens_only_on_loopback(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "data")
    try:
        hosts = listening_addresses(broker.proc.pid)
        assert hosts == {"0100007F"}, hosts  # 127.0.0.1, little-endian hex
        assert not broker.events("listener_not_loopback")
    finally:
        assert broker.stop() == 0


def test_binding_elsewhere_without_tls_logs_a_warning(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "data", extra_args=("--listen", "0.0.0.0:0"))
    try:
        warning = broker.wait_for_event("listener_not_loopback")
        assert warning["listener"] == "listen"
        assert warning["spec"] == "PLAINTEXT://0.0.0.0:0"
    finally:
        assert broker.stop() == 0


@pytest.fixture(scope="module")
def names_broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    broker = start_broker(
        tmp_path_factory.mktemp("names") / "data", "auto.create.topics.enable=true"
    )
    yield broker
    assert broker.stop() == 0


def partitions_body(name: str, **fields: object) -> dict:
    return {"topics": [{"topic": name, "partitions": [{"partition": 0, **fields}]}]}


def requests_for(name: str) -> list[tuple[str, dict]]:
    return [
        ("create_topic", {"topic": name}),
        ("delete_topic", {"topic": name}),
        ("describe_configs", {"topic": name}),
        ("alter_configs", {"topic": name, "set": {"retention.ms": "1000"}}),
        ("metadata", {"topics": [name]}),
        ("produce", {"acks": 1, "timeout_ms": 1000, **partitions_body(name, records=batch(b"v"))}),
        (
            "fetch",
            {
                "max_wait_ms": 0,
                "min_bytes": 1,
                "max_bytes": 1000,
                **partitions_body(name, offset=0, max_bytes=1000),
            },
        ),
        ("list_offsets", partitions_body(name, spec="latest")),
        ("offset_for_time", partitions_body(name, timestamp=0)),
        ("delete_records", partitions_body(name, offset=0)),
    ]


def errors_in(response: dict) -> list[str | None]:
    """The request-level error, or every topic/partition-level one."""
    if response["error"] is not None:
        return [response["error"]]
    body = response["body"] or {}
    found: list[str | None] = []
    for topic in body.get("topics", []):
        if "partitions" in topic and topic["partitions"] and "error" in topic["partitions"][0]:
            found += [p.get("error") for p in topic["partitions"]]
        else:
            found.append(topic.get("error"))
    return found or [None]


# Codes that refuse a name; a bad name must never be accepted by any API.
REFUSALS = {"INVALID_TOPIC_EXCEPTION", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REQUEST"}


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:12] for n in BAD_NAMES])
def test_bad_topic_names_are_refused_by_every_api(names_broker: BrokerProcess, name: str) -> None:
    data_dir = names_broker.data_dir
    before = sorted(p.name for p in data_dir.parent.iterdir())
    with WireClient(names_broker.address, timeout_s=20) as wire:
        for api, body in requests_for(name):
            response = wire.call(api, body)
            errors = errors_in(response)
            assert errors and all(e in REFUSALS for e in errors), (api, response)
            if api == "create_topic":
                assert errors == ["INVALID_TOPIC_EXCEPTION"], response
    # Nothing created beside or inside the data directory.
    assert sorted(p.name for p in data_dir.parent.iterdir()) == before
    for path in data_dir.iterdir():
        assert path.resolve().is_relative_to(data_dir.resolve())
        assert not path.name.startswith((".-", "..-", "-"))
