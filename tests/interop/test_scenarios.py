"""Every client scenario against the real Apache Kafka, checked against `expected`.

The same functions run against any bootstrap address; here they establish that the
harness observes what a correct broker does before it is pointed at Tidelog.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from interop import java_tools
from interop.observed import CODECS, PARTITIONS, SAMPLES
from interop.scenarios import CLIENTS
from interop.scenarios.kcat_client import PARTITIONS as KCAT_PARTITIONS
from interop.targets import Target
from tests.interop import expected

pytestmark = pytest.mark.interop

PY_CLIENTS = ("kafka-python", "aiokafka", "confluent-kafka")
ALL_CLIENTS = (*PY_CLIENTS, "kcat")


def stored_codecs(target: Target, topic: str, partitions: int) -> set[str]:
    """The codecs of the batches the broker stored (Kafka's kafka-dump-log on its data dir)."""
    return {
        codec
        for p in range(partitions)
        for _, codec in java_tools.stored_batch_codecs(target.data_dir / f"{topic}-{p}")
    }


def assert_stored_with(target: Target, topic: str, partitions: int, codec: str) -> None:
    """Clients send a batch uncompressed when compressing would not shrink it, so a
    compressed topic holds `codec` batches (the compressible samples) and maybe plain ones."""
    codecs = stored_codecs(target, topic, partitions)
    if codec == "none":
        assert codecs == {"none"}
    else:
        assert codec in codecs and codecs <= {codec, "none"}, codecs


def _without_timestamps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "timestamp_ms"} for r in records]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", PY_CLIENTS)
def test_produce_and_consume_by_assignment(
    kafka: Target, unique: Callable[[str], str], client: str, codec: str
) -> None:
    topic = unique(f"pc-{codec}")
    seen = CLIENTS[client].produce_consume(kafka.bootstrap, topic, codec)
    assert seen["acks"] == expected.offsets_by_sample(SAMPLES)
    assert seen["records"] == expected.records(PARTITIONS)
    assert_stored_with(kafka, topic, PARTITIONS, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_and_consume(kafka: Target, unique: Callable[[str], str], codec: str) -> None:
    topic = unique(f"kc-{codec}")
    seen = CLIENTS["kcat"].produce_consume(kafka.bootstrap, topic, codec)
    want = expected.records(KCAT_PARTITIONS, explicit_timestamps=False)
    # kcat's -Z sends an empty key as null too; only the tombstone uses it.
    assert _without_timestamps(seen["records"]) == want
    stamps = [r["timestamp_ms"] for r in seen["records"]]
    assert stamps == sorted(stamps)
    assert_stored_with(kafka, topic, KCAT_PARTITIONS, codec)


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_group_subscription(kafka: Target, unique: Callable[[str], str], client: str) -> None:
    topic, group = unique("grp"), unique("group")
    seen = CLIENTS[client].group_consume(kafka.bootstrap, topic, group)
    assert seen["assignment"] == [(topic, p) for p in range(PARTITIONS)]
    assert seen["records"] == expected.records(PARTITIONS)
    assert seen["committed"] == expected.end_offsets(PARTITIONS)


def test_two_group_members_split_the_partitions(
    kafka: Target, unique: Callable[[str], str]
) -> None:
    topic, group = unique("grp2"), unique("group2")
    seen = CLIENTS["confluent-kafka"].group_two_members(kafka.bootstrap, topic, group)
    everything = expected.records(PARTITIONS)
    assert seen["shares"] == [
        {
            "assignment": [(topic, p)],
            "records": [r for r in everything if r["partition"] == p],
        }
        for p in range(PARTITIONS)
    ]


def test_kcat_group_subscription(kafka: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("kgrp"), unique("kgroup")
    seen = CLIENTS["kcat"].group_consume(kafka.bootstrap, topic, group)
    assert seen["assignment"] == [(topic, 0)]
    assert _without_timestamps(seen["records"]) == expected.records(
        KCAT_PARTITIONS, explicit_timestamps=False
    )
    assert seen["records_after_rejoin"] == 0


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_list_offsets_and_offsets_for_times(
    kafka: Target, unique: Callable[[str], str], client: str
) -> None:
    seen = CLIENTS[client].offsets(kafka.bootstrap, unique("off"))
    assert seen["earliest"] == dict.fromkeys(range(PARTITIONS), 0)
    assert seen["latest"] == expected.end_offsets(PARTITIONS)
    # confluent-kafka reports only the offset; the others the offset and its timestamp.
    found = {
        delta: {
            p: (hit if hit is None or isinstance(hit, int) else hit[0]) for p, hit in row.items()
        }
        for delta, row in seen["for_times"].items()
    }
    assert found == expected.for_times(PARTITIONS)


def test_kcat_offsets(kafka: Target, unique: Callable[[str], str]) -> None:
    seen = CLIENTS["kcat"].offsets(kafka.bootstrap, unique("koff"))
    count = len(expected.records(KCAT_PARTITIONS, explicit_timestamps=False))
    assert seen["earliest"] == {0: 0}
    assert seen["latest"] == {0: count}
    want = {"before_first": {0: 0}, "after_last": {0: None}}
    want |= {f"record{i}": {0: i} for i in range(count)}
    assert seen["for_times"] == want


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_create_configure_delete_topic(
    kafka: Target, unique: Callable[[str], str], client: str
) -> None:
    seen = CLIENTS[client].admin_topics(kafka.bootstrap, unique("adm"))
    assert seen == {
        "create": "NONE",
        "create_again": "TOPIC_ALREADY_EXISTS",
        "listed_after_create": True,
        "retention_before": ("604800000", "DEFAULT_CONFIG"),
        "retention_after": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
        "listed_after_delete": False,
    }


def test_every_client_is_exercised() -> None:
    """The matrix above covers every registered client (a new one must be added here)."""
    assert set(CLIENTS) == set(ALL_CLIENTS)
