"""Kafka clients in other languages against Tidelog, with Apache Kafka as the oracle
(issue 37): kafka-clients 4.4 (Java), kafkajs (Node), franz-go and sarama (Go), and
@platformatic/kafka 1.35 (Node; issue 36: it speaks only flexible versions, Produce 9+,
Fetch 15+ with topic ids), each built from the project's files under interop/
(interop/ecosystem/toolchains.py).

Each client produces keyed records with headers to a two-partition topic, reads them back
through a consumer group and commits; both brokers must give the same observation, and
that observation must be every record once with the group committed at each partition's end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from interop.ecosystem import kafka_io
from interop.ecosystem.clients import CLIENT_HEADER, CLIENTS, normalise, round_trip
from interop.targets import Target

pytestmark = pytest.mark.interop

COUNT = 12
PARTITIONS = 2


def _observe(target: Target, client: str, unique: Callable[[str], str]) -> dict[str, object]:
    topic, group = unique(f"rt-{client}"), unique(f"rt-{client}-group")
    kafka_io.create_topic(target.bootstrap, topic, PARTITIONS)
    return normalise(round_trip(client, target.bootstrap, topic, group, COUNT))


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_round_trip_through_a_group_as_on_kafka(
    kafka: Target, tidelog: Target, unique: Callable[[str], str], client: str
) -> None:
    on_kafka = _observe(kafka, client, unique)
    records = on_kafka["records"]
    assert isinstance(records, list)
    assert sorted(
        (r["key"], r["value"], tuple(map(tuple, r["headers"]))) for r in records
    ) == sorted(
        (f"key-{i}", f"value-{i}", (("seq", str(i)), ("client", CLIENT_HEADER[client])))
        for i in range(COUNT)
    )
    per_partition = Counter(r["partition"] for r in records)
    assert on_kafka["committed"] == {str(p): n for p, n in per_partition.items()}
    assert _observe(tidelog, client, unique) == on_kafka
