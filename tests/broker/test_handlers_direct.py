"""The handlers called directly: a validated request body in, an answer out, no socket.

Each test builds its request with the schema layer (`validate_request_body`, what the
msgpack codec does after reading a frame) and awaits the handler from the dispatch
table with a real BrokerContext over a real LogManager in a temporary directory. This
is the seam a second codec (the Kafka listener) uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.context import Answer, BrokerContext, Deferred
from broker.dispatch import HANDLERS, handler_for
from protocol.batch import encode_batch
from protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.schemas import validate_request_body
from tests.broker.contexts import NOW_MS, open_context


@pytest.fixture
async def ctx(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[BrokerContext]:
    context = open_context(tmp_path / "data", nursery)
    try:
        yield context
    finally:
        context.manager.close()


async def call(ctx: BrokerContext, api: str, body: dict[str, Any]) -> Answer | Deferred | None:
    """What the codec does after decoding: validate the body, run the API's handler."""
    return await handler_for(api)(ctx, validate_request_body(api, body))


async def answer(ctx: BrokerContext, api: str, body: dict[str, Any]) -> Answer:
    result = await call(ctx, api, body)
    assert isinstance(result, dict), result
    return result


def batch(*values: bytes, timestamp: int = NOW_MS) -> bytes:
    return encode_batch([(None, v, None, timestamp) for v in values])


def only_partition(result: Answer) -> dict[str, Any]:
    [topic] = result["topics"]
    [part] = topic["partitions"]
    return part


async def produce(ctx: BrokerContext, topic: str, partition: int, records: bytes) -> dict:
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "records": records}]}],
    }
    return only_partition(await answer(ctx, "produce", body))


# --- dispatch and api_versions -------------------------------------------------


async def test_api_versions_lists_the_dispatch_table(ctx: BrokerContext) -> None:
    result = await answer(ctx, "api_versions", {})
    assert set(result["apis"]) == set(HANDLERS)
    assert result["limits"]["message.max.bytes"] == ctx.config.message_max_bytes


def test_an_unknown_api_has_no_handler() -> None:
    with pytest.raises(InvalidRequest, match="unknown api 'nope'"):
        handler_for("nope")


# --- topics and configs ----------------------------------------------------------


async def test_create_then_describe_a_topic(ctx: BrokerContext) -> None:
    created = await answer(
        ctx, "create_topic", {"topic": "t", "partitions": 2, "configs": {"retention.ms": 5000}}
    )
    assert created == {}
    meta = await answer(ctx, "metadata", {"topics": ["t"]})
    [entry] = meta["topics"]
    assert entry["error"] is None
    assert [p["partition"] for p in entry["partitions"]] == [0, 1]
    assert entry["configs"] == {"retention.ms": "5000"}
    configs = (await answer(ctx, "describe_configs", {"topic": "t"}))["configs"]
    assert configs["retention.ms"] == {"value": 5000, "source": "topic"}


async def test_create_topic_errors(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    with pytest.raises(TopicAlreadyExists):
        await call(ctx, "create_topic", {"topic": "t"})
    with pytest.raises(InvalidPartitions, match="between 1 and"):
        await call(ctx, "create_topic", {"topic": "u", "partitions": 0})
    with pytest.raises(InvalidConfig, match=r"retention\.msx"):
        await call(ctx, "create_topic", {"topic": "u", "configs": {"retention.msx": 1}})
    with pytest.raises(InvalidTopic):
        await call(ctx, "create_topic", {"topic": "bad/name"})
    with pytest.raises(InvalidTopic, match="internal topic"):
        await call(ctx, "create_topic", {"topic": "__consumer_offsets"})


async def test_metadata_reports_an_unknown_topic_in_its_entry(ctx: BrokerContext) -> None:
    meta = await answer(ctx, "metadata", {"topics": ["missing"]})
    assert meta["topics"] == [
        {
            "topic": "missing",
            "error": "UNKNOWN_TOPIC_OR_PARTITION",
            "message": "unknown topic 'missing'",
            "configs": {},
            "partitions": [],
        }
    ]


async def test_alter_configs_and_its_errors(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    assert await answer(ctx, "alter_configs", {"topic": "t", "set": {"segment.ms": 60000}}) == {}
    assert ctx.manager.topic_overrides("t") == {"segment.ms": "60000"}
    with pytest.raises(InvalidConfig, match=r"segment\.msx"):
        await call(ctx, "alter_configs", {"topic": "t", "set": {"segment.msx": 1}})
    with pytest.raises(UnknownTopicOrPartition):
        await call(ctx, "describe_configs", {"topic": "missing"})


async def test_validate_only_checks_like_the_real_call_and_changes_nothing(
    ctx: BrokerContext,
) -> None:
    """The `validate_only` extension (docs/protocol.md §9), used by Kafka's admin APIs."""
    body = {"topic": "v", "partitions": 2, "configs": {"retention.ms": 1000}}
    assert await answer(ctx, "create_topic", {**body, "validate_only": True}) == {}
    assert "v" not in ctx.manager.topics()
    with pytest.raises(InvalidConfig, match=r"retention\.ms"):
        await call(
            ctx, "create_topic", {**body, "configs": {"retention.ms": -5}, "validate_only": True}
        )
    await answer(ctx, "create_topic", body)
    with pytest.raises(TopicAlreadyExists):
        await call(ctx, "create_topic", {**body, "validate_only": True})
    change = {
        "topic": "v",
        "set": {"segment.ms": 5},
        "delete": ["retention.ms"],
        "validate_only": True,
    }
    assert await answer(ctx, "alter_configs", change) == {}
    assert ctx.manager.topic_overrides("v") == {"retention.ms": "1000"}
    lags = {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}  # invalid only together
    with pytest.raises(InvalidConfig, match=r"max\.compaction\.lag\.ms"):
        await call(ctx, "alter_configs", {"topic": "v", "set": lags, "validate_only": True})


async def test_delete_topic_and_deleting_it_again(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    assert await answer(ctx, "delete_topic", {"topic": "t"}) == {}
    assert "t" not in ctx.manager.topics()
    with pytest.raises(UnknownTopicOrPartition):
        await call(ctx, "delete_topic", {"topic": "t"})


# --- produce -------------------------------------------------------------------


async def test_produce_appends_and_reports_offsets(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    first = await produce(ctx, "t", 0, batch(b"a", b"b"))
    second = await produce(ctx, "t", 0, batch(b"c"))
    assert (first["error"], first["base_offset"]) == (None, 0)
    assert (second["error"], second["base_offset"]) == (None, 2)
    assert ctx.manager.get_log("t", 0).log_end_offset == 3


async def test_produce_errors_are_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t", "partitions": 2})
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": 0, "records": batch(b"ok")},
                    {"partition": 7, "records": batch(b"nowhere")},
                    {"partition": 1, "records": b"\x00" * 70},  # not a batch
                ],
            }
        ],
    }
    parts = (await answer(ctx, "produce", body))["topics"][0]["partitions"]
    assert [p["error"] for p in parts] == [None, "UNKNOWN_TOPIC_OR_PARTITION", "CORRUPT_MESSAGE"]
    assert parts[1]["base_offset"] == -1
    internal = await produce(ctx, "__consumer_offsets", 0, batch(b"x"))
    assert internal["error"] == "INVALID_TOPIC_EXCEPTION"


async def test_produce_acks_0_answers_nothing_and_acks_all_defers(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    parts = [{"partition": 0, "records": batch(b"a")}]
    quiet = {"acks": 0, "timeout_ms": 1000, "topics": [{"topic": "t", "partitions": parts}]}
    assert await call(ctx, "produce", quiet) is None
    durable = {**quiet, "acks": -1}
    deferred = await call(ctx, "produce", durable)
    assert isinstance(deferred, Deferred)
    result = only_partition(await deferred.finish())
    assert (result["error"], result["base_offset"]) == (None, 1)
    assert ctx.manager.get_log("t", 0).log_end_offset == 2


# --- fetch ---------------------------------------------------------------------


def fetch_body(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "offset": offset, "max_bytes": 1 << 20}],
            }
        ],
    }


async def test_fetch_returns_the_stored_batches(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    records = batch(b"a", b"b")
    await produce(ctx, "t", 0, records)
    part = only_partition(await answer(ctx, "fetch", fetch_body("t", 0, 0)))
    assert part["error"] is None
    assert part["high_watermark"] == 2
    assert bytes(part["records"])[12:] == records[12:]  # the broker sets the base offset


async def test_fetch_errors_are_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    out_of_range = only_partition(await answer(ctx, "fetch", fetch_body("t", 0, 5)))
    assert out_of_range["error"] == "OFFSET_OUT_OF_RANGE"
    assert (out_of_range["records"], out_of_range["high_watermark"]) == (b"", -1)
    missing = only_partition(await answer(ctx, "fetch", fetch_body("missing", 0, 0)))
    assert missing["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_fetch_long_poll_answers_when_records_arrive(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    body = {**fetch_body("t", 0, 0), "max_wait_ms": 10_000, "min_bytes": 1}
    got: list[Answer] = []

    async def poll() -> None:
        got.append(await answer(ctx, "fetch", body))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(0.05)
        assert got == []  # waiting: nothing to read yet
        await produce(ctx, "t", 0, batch(b"late"))
    assert only_partition(got[0])["high_watermark"] == 1


# --- offsets over partitions -------------------------------------------------------


async def test_list_offsets_offset_for_time_and_delete_records(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    await produce(ctx, "t", 0, batch(b"a", timestamp=1000))
    await produce(ctx, "t", 0, batch(b"b", timestamp=2000))

    def body(**fields: Any) -> dict[str, Any]:
        return {"topics": [{"topic": "t", "partitions": [{"partition": 0, **fields}]}]}

    latest = only_partition(await answer(ctx, "list_offsets", body(spec="latest")))
    assert (latest["offset"], latest["timestamp"]) == (2, -1)
    newest = only_partition(await answer(ctx, "list_offsets", body(spec="max_timestamp")))
    assert (newest["offset"], newest["timestamp"]) == (1, 2000)
    by_time = only_partition(await answer(ctx, "offset_for_time", body(timestamp=1500)))
    assert (by_time["offset"], by_time["timestamp"]) == (1, 2000)
    deleted = only_partition(await answer(ctx, "delete_records", body(offset=1)))
    assert (deleted["error"], deleted["low_watermark"]) == (None, 1)
    earliest = only_partition(await answer(ctx, "list_offsets", body(spec="earliest")))
    assert earliest["offset"] == 1


async def test_offset_apis_report_errors_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t"})
    missing = {"topics": [{"topic": "t", "partitions": [{"partition": 3, "spec": "latest"}]}]}
    part = only_partition(await answer(ctx, "list_offsets", missing))
    assert (part["error"], part["offset"]) == ("UNKNOWN_TOPIC_OR_PARTITION", None)
    too_far = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 9}]}]}
    part = only_partition(await answer(ctx, "delete_records", too_far))
    assert (part["error"], part["low_watermark"]) == ("OFFSET_OUT_OF_RANGE", -1)


# --- consumer group offsets ----------------------------------------------------------


async def test_commit_then_fetch_offsets(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t", "partitions": 2})
    commit = {
        "group": "g",
        "topics": [{"topic": "t", "partitions": [{"partition": 1, "offset": 42}]}],
    }
    assert only_partition(await answer(ctx, "commit_offsets", commit))["error"] is None
    fetched = await answer(ctx, "fetch_offsets", {"group": "g"})
    assert fetched["topics"] == [
        {
            "topic": "t",
            "partitions": [
                {"partition": 1, "offset": 42, "metadata": "", "error": None, "message": None}
            ],
        }
    ]


async def test_group_offsets_errors(ctx: BrokerContext) -> None:
    with pytest.raises(InvalidRequest, match="group"):
        await call(ctx, "fetch_offsets", {"group": ""})
    entry = {"partition": 0, "offset": 1}
    commit = {"group": "g", "topics": [{"topic": "missing", "partitions": [entry]}]}
    part = only_partition(await answer(ctx, "commit_offsets", commit))
    assert part["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


# --- housekeeping: explain_retention -------------------------------------------------


async def test_explain_retention(ctx: BrokerContext) -> None:
    await answer(ctx, "create_topic", {"topic": "t", "partitions": 1})
    await produce(ctx, "t", 0, batch(b"a"))
    result = await answer(ctx, "explain_retention", {"topic": "t", "partitions": [0, 4]})
    good, bad = result["partitions"]
    assert (good["partition"], good["error"], good["log_end_offset"]) == (0, None, 1)
    assert [s["verdict"] for s in good["segments"]] == ["keep_active"]
    assert (bad["partition"], bad["error"]) == (4, "UNKNOWN_TOPIC_OR_PARTITION")
    with pytest.raises(UnknownTopicOrPartition):
        await call(ctx, "explain_retention", {"topic": "missing"})
