"""A Kafka Produce is checked cheapest first (issue 38 #3): login, Write on the topic,
the batch size (`max.message.bytes`, on the batch as sent), and only then are its
records inflated and converted. A batch whose records are damaged tells which ran:
the conversion would answer CORRUPT_MESSAGE, a check before it answers its own code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from protocol.kafka.errors import ERRORS_BY_NAME
from tests.broker.security.conftest import add_user
from tests.broker.security.test_kafka_acl_matrix import KafkaWire, kafka_batch
from tests.broker.security.test_sasl_acl_inprocess import grant
from tidelog.aio import open_client

SASL = (
    "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=PLAIN",
    "authorizer=on",
    "super.users=User:admin",
    "connection.failed.authentication.delay.ms=0",
)
PRODUCE_KEY, PRODUCE_VERSION = 0, 7
TOPIC_DENIED = ERRORS_BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code
TOO_LARGE = ERRORS_BY_NAME["MESSAGE_TOO_LARGE"].code
CORRUPT = ERRORS_BY_NAME["CORRUPT_MESSAGE"].code


def damaged_batch(value_bytes: int = 16) -> bytes:
    """A Kafka batch whose last byte (inside its records) is flipped: its CRC fails."""
    batch = bytearray(kafka_batch(value_bytes))
    batch[-1] ^= 0xFF
    return bytes(batch)


def produce_fields(records: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": records}]}],
    }


def code_of(answer: Any) -> int:
    return int(answer.responses[0].partition_responses[0].error_code)


async def produce(handle: Any, records: bytes, user: str | None = None) -> int:
    stream = await trio.open_tcp_stream(handle.host, handle.port)
    async with KafkaWire(stream) as wire:
        if user is not None:
            assert (await wire.login(user, f"pw-{user}")).error_code == 0
        return code_of(await wire.ask(PRODUCE_KEY, PRODUCE_VERSION, **produce_fields(records)))


async def test_a_damaged_batch_is_corrupt_when_every_check_passes(secured_broker: Any) -> None:
    async with secured_broker() as handle:
        async with open_client(f"{handle.host}:{handle.port}") as client:
            await client.create_topic("orders")
        assert await produce(handle, damaged_batch()) == CORRUPT


async def test_write_is_checked_before_the_batch_is_converted(
    secured_broker: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    add_user(data, "bob", "pw-bob")
    grant(data, "Allow User:bob Describe Topic Literal orders")
    async with secured_broker(*SASL) as handle:
        await produce(handle, kafka_batch(), "admin")  # creates the topic
        assert await produce(handle, damaged_batch(), "bob") == TOPIC_DENIED


async def test_the_batch_size_is_checked_before_the_batch_is_converted(
    secured_broker: Any,
) -> None:
    async with secured_broker() as handle:
        async with open_client(f"{handle.host}:{handle.port}") as client:
            await client.create_topic("orders", configs={"max.message.bytes": "1024"})
        assert await produce(handle, damaged_batch(4096)) == TOO_LARGE
