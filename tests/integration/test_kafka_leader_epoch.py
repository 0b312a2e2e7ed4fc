"""OffsetForLeaderEpoch on the real broker process, through kafka-python's classes:
epoch 0 (the only one this node has led in) ends at the log end offset, other epochs
as Kafka answers them, a fenced or unknown current epoch refused; and Metadata's
leader epoch 0, which is what lets Java consumers validate their positions with it."""

from __future__ import annotations

import confluent_kafka
import pytest

from tests.conftest import BrokerProcess
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S
from tests.integration.kp_wire import KpWire

pytestmark = pytest.mark.integration

OFFSET_FOR_LEADER_EPOCH, METADATA = 23, 3
FENCED, UNKNOWN_EPOCH, UNKNOWN_TOPIC = 74, 75, 3


Outcome = tuple[int, int, int, int]


def _ask(wire: KpWire, version: int, topic: str, *parts: tuple[int, int, int]) -> list[Outcome]:
    """(error, partition, leader epoch, end offset) per (partition, current, asked)."""
    fields = {
        "topics": [{
            "topic": topic,
            "partitions": [
                {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
                for p, current, epoch in parts
            ],
        }],
    }  # fmt: skip
    if version >= 3:
        fields["replica_id"] = -1
    answer = wire.ask(OFFSET_FOR_LEADER_EPOCH, version, **fields)
    [topic_answer] = answer.topics
    return [
        (p.error_code, p.partition, p.leader_epoch, p.end_offset) for p in topic_answer.partitions
    ]


def _produce(broker: BrokerProcess, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


@pytest.mark.parametrize("version", [2, 3, 4])
def test_epoch_zero_ends_at_the_log_end_and_others_as_kafka_answers(
    broker_process: BrokerProcess, version: int
) -> None:
    _produce(broker_process, "epochs", 5)
    with KpWire(broker_process.address) as wire:
        assert _ask(wire, version, "epochs", (0, 0, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)) == [
            (0, 0, 0, 5),  # epoch 0: the log end offset
            (0, 0, 0, 5),  # no current epoch given: not fenced
            (0, 0, -1, -1),  # an epoch this leader never had
            (0, 0, -1, -1),  # undefined
        ]
        assert _ask(wire, version, "epochs", (0, 1, 0), (0, -3, 0), (7, 0, 0)) == [
            (UNKNOWN_EPOCH, 0, -1, -1),
            (FENCED, 0, -1, -1),
            (UNKNOWN_TOPIC, 7, -1, -1),
        ]
        assert _ask(wire, version, "no-such-topic", (0, 0, 0)) == [(UNKNOWN_TOPIC, 0, -1, -1)]
        # What lets a Java consumer validate its position: Metadata's leader epoch.
        metadata = wire.ask(METADATA, 8, topics=[{"name": "epochs"}],
                            allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False)  # fmt: skip
        assert [p.leader_epoch for p in metadata.topics[0].partitions] == [0]
