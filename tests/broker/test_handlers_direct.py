"""The handlers called directly: a typed request in, a typed answer out, no socket.

Each test builds its request as its API's generated type (protocol/api_types.py, from
the schema table), runs it through the schema layer (`validate_request_body`, what the
msgpack codec does after reading a frame: a typed request is already a whole validated
body) and awaits the handler from the dispatch table with a real BrokerContext over a
real LogManager in a temporary directory. Every answer is checked against its API's
answer type. This is the seam a second codec (the Kafka listener) uses; mypy checks
this file too (pyproject.toml [tool.mypy]).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import pytest
import trio

from broker.context import BrokerContext, Deferred
from broker.dispatch import HANDLERS, api_versions, handler_for
from broker.handlers.explain import explain_retention
from broker.handlers.fetch import fetch
from broker.handlers.group_offsets import commit_offsets, fetch_offsets
from broker.handlers.offsets import delete_records, list_offsets, offset_for_time
from broker.handlers.produce import produce
from broker.handlers.topics import (
    alter_configs,
    create_topic,
    delete_topic,
    describe_configs,
    metadata,
)
from protocol.api_types import (
    API_TYPES,
    AlterConfigsAnswer,
    AlterConfigsRequest,
    ApiVersionsRequest,
    CommitOffsetsPartition,
    CommitOffsetsRequest,
    CommitOffsetsTopic,
    CreateTopicAnswer,
    CreateTopicRequest,
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
    DeleteTopicAnswer,
    DeleteTopicRequest,
    DescribeConfigsRequest,
    ExplainRetentionRequest,
    FetchAnswer,
    FetchOffsetsRequest,
    FetchPartition,
    FetchPartitionAnswer,
    FetchRequest,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
    OffsetForTimePartition,
    OffsetForTimeRequest,
    OffsetForTimeTopic,
    ProduceAnswer,
    ProducePartition,
    ProducePartitionAnswer,
    ProduceRequest,
    ProduceTopic,
)
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
from storage.record_source import FileSpan
from tests.broker.contexts import NOW_MS, open_context
from tests.broker.typed_bodies import problems
from tests.storage.helpers import drop_from_page_cache

R = TypeVar("R")  # an API's request type
A = TypeVar("A")  # what its handler returns


@pytest.fixture
async def ctx(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[BrokerContext]:
    context = open_context(tmp_path / "data", nursery)
    try:
        yield context
    finally:
        context.manager.close()


async def call(
    ctx: BrokerContext, handler: Callable[[BrokerContext, R], Awaitable[A]], body: R
) -> A:
    """What the codec does after decoding: validate the body, run the API's handler
    from the dispatch table (the row of `handler`), check the answer's shape."""
    api = handler.__name__
    assert HANDLERS[api] is handler
    validated = validate_request_body(api, body)
    assert validated == body  # a typed request is a whole validated body
    result = await handler_for(api)(ctx, validated)
    if isinstance(result, dict):
        assert problems(result, API_TYPES[api][1]) == []
    return cast(A, result)  # the table's row is `handler`: its own return type


async def answer(
    ctx: BrokerContext,
    handler: Callable[[BrokerContext, R], Awaitable[A | Deferred[Any] | None]],
    body: R,
) -> A:
    result = await call(ctx, handler, body)
    assert result is not None and not isinstance(result, Deferred), result
    return result


def batch(*values: bytes, timestamp: int = NOW_MS) -> bytes:
    return encode_batch([(None, v, None, timestamp) for v in values])


def create(
    topic: str,
    partitions: int = 1,
    configs: dict[str, str | int | float] | None = None,
    *,
    validate_only: bool = False,
) -> CreateTopicRequest:
    return CreateTopicRequest(
        topic=topic, partitions=partitions, configs=configs or {}, validate_only=validate_only
    )


def alter(
    topic: str,
    changes: dict[str, str | int | float],
    delete: list[str] | None = None,
    *,
    validate_only: bool = False,
) -> AlterConfigsRequest:
    return AlterConfigsRequest(
        topic=topic, set=changes, delete=delete or [], validate_only=validate_only
    )


def produce_body(
    topic: str, parts: list[ProducePartition], *, acks: Literal[-1, 0, 1] = 1
) -> ProduceRequest:
    return ProduceRequest(
        acks=acks, timeout_ms=1000, topics=[ProduceTopic(topic=topic, partitions=parts)]
    )


def only_partition(result: ProduceAnswer) -> ProducePartitionAnswer:
    [topic] = result["topics"]
    [part] = topic["partitions"]
    return part


async def produce_to(
    ctx: BrokerContext, topic: str, partition: int, records: bytes
) -> ProducePartitionAnswer:
    body = produce_body(topic, [ProducePartition(partition=partition, records=records)])
    return only_partition(await answer(ctx, produce, body))


# --- dispatch and api_versions -------------------------------------------------


async def test_api_versions_lists_the_dispatch_table(ctx: BrokerContext) -> None:
    result = await answer(ctx, api_versions, ApiVersionsRequest())
    assert set(result["apis"]) == set(HANDLERS)
    assert result["limits"]["message.max.bytes"] == ctx.config.message_max_bytes


def test_an_unknown_api_has_no_handler() -> None:
    with pytest.raises(InvalidRequest, match="unknown api 'nope'"):
        handler_for("nope")


# --- topics and configs ----------------------------------------------------------


async def test_create_then_describe_a_topic(ctx: BrokerContext) -> None:
    created = await answer(ctx, create_topic, create("t", 2, {"retention.ms": 5000}))
    assert created == CreateTopicAnswer()
    meta = await answer(ctx, metadata, MetadataRequest(topics=["t"]))
    [entry] = meta["topics"]
    assert entry["error"] is None
    assert [p["partition"] for p in entry["partitions"]] == [0, 1]
    assert entry["configs"] == {"retention.ms": "5000"}
    configs = (await answer(ctx, describe_configs, DescribeConfigsRequest(topic="t")))["configs"]
    assert configs["retention.ms"] == {"value": 5000, "source": "topic"}


async def test_create_topic_errors(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    with pytest.raises(TopicAlreadyExists):
        await call(ctx, create_topic, create("t"))
    with pytest.raises(InvalidPartitions, match="between 1 and"):
        await call(ctx, create_topic, create("u", 0))
    with pytest.raises(InvalidConfig, match=r"retention\.msx"):
        await call(ctx, create_topic, create("u", configs={"retention.msx": 1}))
    with pytest.raises(InvalidTopic):
        await call(ctx, create_topic, create("bad/name"))
    with pytest.raises(InvalidTopic, match="internal topic"):
        await call(ctx, create_topic, create("__consumer_offsets"))


async def test_metadata_reports_an_unknown_topic_in_its_entry(ctx: BrokerContext) -> None:
    meta = await answer(ctx, metadata, MetadataRequest(topics=["missing"]))
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
    await answer(ctx, create_topic, create("t"))
    assert (
        await answer(ctx, alter_configs, alter("t", {"segment.ms": 60000})) == AlterConfigsAnswer()
    )
    assert ctx.manager.topic_overrides("t") == {"segment.ms": "60000"}
    with pytest.raises(InvalidConfig, match=r"segment\.msx"):
        await call(ctx, alter_configs, alter("t", {"segment.msx": 1}))
    with pytest.raises(UnknownTopicOrPartition):
        await call(ctx, describe_configs, DescribeConfigsRequest(topic="missing"))


async def test_validate_only_checks_like_the_real_call_and_changes_nothing(
    ctx: BrokerContext,
) -> None:
    """The `validate_only` extension (docs/protocol.md §9), used by Kafka's admin APIs."""
    configs: dict[str, str | int | float] = {"retention.ms": 1000}
    created = await answer(ctx, create_topic, create("v", 2, configs, validate_only=True))
    assert created == CreateTopicAnswer()
    assert "v" not in ctx.manager.topics()
    with pytest.raises(InvalidConfig, match=r"retention\.ms"):
        await call(ctx, create_topic, create("v", 2, {"retention.ms": -5}, validate_only=True))
    await answer(ctx, create_topic, create("v", 2, configs))
    with pytest.raises(TopicAlreadyExists):
        await call(ctx, create_topic, create("v", 2, configs, validate_only=True))
    change = alter("v", {"segment.ms": 5}, ["retention.ms"], validate_only=True)
    assert await answer(ctx, alter_configs, change) == AlterConfigsAnswer()
    assert ctx.manager.topic_overrides("v") == {"retention.ms": "1000"}
    lags: dict[str, str | int | float] = {
        "min.compaction.lag.ms": 10,
        "max.compaction.lag.ms": 5,
    }  # invalid only together
    with pytest.raises(InvalidConfig, match=r"max\.compaction\.lag\.ms"):
        await call(ctx, alter_configs, alter("v", lags, validate_only=True))


async def test_delete_topic_and_deleting_it_again(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    deleted = await answer(ctx, delete_topic, DeleteTopicRequest(topic="t"))
    assert deleted == DeleteTopicAnswer()
    assert "t" not in ctx.manager.topics()
    with pytest.raises(UnknownTopicOrPartition):
        await call(ctx, delete_topic, DeleteTopicRequest(topic="t"))


# --- produce -------------------------------------------------------------------


async def test_produce_appends_and_reports_offsets(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    first = await produce_to(ctx, "t", 0, batch(b"a", b"b"))
    second = await produce_to(ctx, "t", 0, batch(b"c"))
    assert (first["error"], first["base_offset"]) == (None, 0)
    assert (second["error"], second["base_offset"]) == (None, 2)
    assert ctx.manager.get_log("t", 0).log_end_offset == 3


async def test_produce_errors_are_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t", 2))
    body = produce_body(
        "t",
        [
            ProducePartition(partition=0, records=batch(b"ok")),
            ProducePartition(partition=7, records=batch(b"nowhere")),
            ProducePartition(partition=1, records=b"\x00" * 70),  # not a batch
        ],
    )
    parts = (await answer(ctx, produce, body))["topics"][0]["partitions"]
    assert [p["error"] for p in parts] == [None, "UNKNOWN_TOPIC_OR_PARTITION", "CORRUPT_MESSAGE"]
    assert parts[1]["base_offset"] == -1
    internal = await produce_to(ctx, "__consumer_offsets", 0, batch(b"x"))
    assert internal["error"] == "INVALID_TOPIC_EXCEPTION"


async def test_produce_acks_0_answers_nothing_and_acks_all_defers(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    parts = [ProducePartition(partition=0, records=batch(b"a"))]
    assert await call(ctx, produce, produce_body("t", parts, acks=0)) is None
    deferred = await call(ctx, produce, produce_body("t", parts, acks=-1))
    assert isinstance(deferred, Deferred)
    finished = await deferred.finish()
    assert problems(finished, API_TYPES["produce"][1]) == []
    result = only_partition(finished)
    assert (result["error"], result["base_offset"]) == (None, 1)
    assert ctx.manager.get_log("t", 0).log_end_offset == 2


# --- fetch ---------------------------------------------------------------------


def fetch_body(
    topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 0
) -> FetchRequest:
    wanted = FetchPartition(partition=partition, offset=offset, max_bytes=1 << 20)
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        topics=[FetchTopic(topic=topic, partitions=[wanted])],
        local_read=False,
        kafka_batches=False,
        isolation_level=0,
    )


def only_fetched(result: FetchAnswer) -> FetchPartitionAnswer:
    [topic] = result["topics"]
    [part] = topic["partitions"]
    return part


async def test_fetch_returns_the_stored_batches(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    records = batch(b"a", b"b")
    await produce_to(ctx, "t", 0, records)
    part = only_fetched(await answer(ctx, fetch, fetch_body("t", 0, 0)))
    assert part["error"] is None
    assert part["high_watermark"] == 2
    fetched = part["records"]
    assert isinstance(fetched, bytes)  # a small read is copied, not sent from the file
    assert fetched[12:] == records[12:]  # the broker sets the base offset


async def test_a_large_fetch_is_the_same_from_a_cold_or_a_cached_segment(
    ctx: BrokerContext,
) -> None:
    """Located on the event loop when its headers are cached, else in a worker thread
    (RWF_NOWAIT): the answer is the same."""
    await answer(ctx, create_topic, create("t"))
    for tag in range(6):
        await produce_to(ctx, "t", 0, batch(*[bytes([tag]) * 100 for _ in range(300)]))
    plog = ctx.manager.get_log("t", 0)
    plog.flush()
    expected = plog.read(0, 1 << 20).records
    for cold in (True, False):
        if cold:
            for segment_file in plog.directory.glob("*.log"):
                drop_from_page_cache(segment_file)
        part = only_fetched(await answer(ctx, fetch, fetch_body("t", 0, 0)))
        span = part["records"]
        assert isinstance(span, FileSpan)  # sent from the file, located either way
        try:
            assert (part["error"], span.read()) == (None, expected)
        finally:
            span.close()


async def test_fetch_errors_are_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    out_of_range = only_fetched(await answer(ctx, fetch, fetch_body("t", 0, 5)))
    assert out_of_range["error"] == "OFFSET_OUT_OF_RANGE"
    assert (out_of_range["records"], out_of_range["high_watermark"]) == (b"", -1)
    missing = only_fetched(await answer(ctx, fetch, fetch_body("missing", 0, 0)))
    assert missing["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_fetch_long_poll_answers_when_records_arrive(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    body = fetch_body("t", 0, 0, max_wait_ms=10_000, min_bytes=1)
    got: list[FetchAnswer] = []

    async def poll() -> None:
        got.append(await answer(ctx, fetch, body))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(0.05)
        assert got == []  # waiting: nothing to read yet
        await produce_to(ctx, "t", 0, batch(b"late"))
    assert only_fetched(got[0])["high_watermark"] == 1


# --- offsets over partitions -------------------------------------------------------


def list_offsets_body(
    partition: int, spec: Literal["earliest", "latest", "max_timestamp"]
) -> ListOffsetsRequest:
    wanted = ListOffsetsPartition(partition=partition, spec=spec)
    return ListOffsetsRequest(topics=[ListOffsetsTopic(topic="t", partitions=[wanted])])


def delete_records_body(offset: int) -> DeleteRecordsRequest:
    wanted = DeleteRecordsPartition(partition=0, offset=offset)
    return DeleteRecordsRequest(topics=[DeleteRecordsTopic(topic="t", partitions=[wanted])])


async def test_list_offsets_offset_for_time_and_delete_records(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    await produce_to(ctx, "t", 0, batch(b"a", timestamp=1000))
    await produce_to(ctx, "t", 0, batch(b"b", timestamp=2000))

    async def offsets(spec: Literal["earliest", "latest", "max_timestamp"]) -> tuple[Any, Any]:
        [topic] = (await answer(ctx, list_offsets, list_offsets_body(0, spec)))["topics"]
        [part] = topic["partitions"]
        return part["offset"], part["timestamp"]

    assert await offsets("latest") == (2, -1)
    assert await offsets("max_timestamp") == (1, 2000)
    by_time_body = OffsetForTimeRequest(
        topics=[
            OffsetForTimeTopic(
                topic="t", partitions=[OffsetForTimePartition(partition=0, timestamp=1500)]
            )
        ]
    )
    [by_time] = (await answer(ctx, offset_for_time, by_time_body))["topics"][0]["partitions"]
    assert (by_time["offset"], by_time["timestamp"]) == (1, 2000)
    [deleted] = (await answer(ctx, delete_records, delete_records_body(1)))["topics"][0][
        "partitions"
    ]
    assert (deleted["error"], deleted["low_watermark"]) == (None, 1)
    assert (await offsets("earliest"))[0] == 1


async def test_offset_apis_report_errors_per_partition(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t"))
    [part] = (await answer(ctx, list_offsets, list_offsets_body(3, "latest")))["topics"][0][
        "partitions"
    ]
    assert (part["error"], part["offset"]) == ("UNKNOWN_TOPIC_OR_PARTITION", None)
    [too_far] = (await answer(ctx, delete_records, delete_records_body(9)))["topics"][0][
        "partitions"
    ]
    assert (too_far["error"], too_far["low_watermark"]) == ("OFFSET_OUT_OF_RANGE", -1)


# --- consumer group offsets ----------------------------------------------------------


def commit_body(topic: str, partition: int, offset: int) -> CommitOffsetsRequest:
    entry = CommitOffsetsPartition(partition=partition, offset=offset, metadata="")
    return CommitOffsetsRequest(
        group="g",
        topics=[CommitOffsetsTopic(topic=topic, partitions=[entry])],
        generation=-1,
        member_id="",
        group_instance_id=None,
    )


async def test_commit_then_fetch_offsets(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t", 2))
    [committed] = (await answer(ctx, commit_offsets, commit_body("t", 1, 42)))["topics"]
    assert committed["partitions"][0]["error"] is None
    fetched = await answer(ctx, fetch_offsets, FetchOffsetsRequest(group="g", topics=None))
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
        await call(ctx, fetch_offsets, FetchOffsetsRequest(group="", topics=None))
    [topic] = (await answer(ctx, commit_offsets, commit_body("missing", 0, 1)))["topics"]
    assert topic["partitions"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


# --- housekeeping: explain_retention -------------------------------------------------


async def test_explain_retention(ctx: BrokerContext) -> None:
    await answer(ctx, create_topic, create("t", 1))
    await produce_to(ctx, "t", 0, batch(b"a"))
    body = ExplainRetentionRequest(topic="t", partitions=[0, 4])
    good, bad = (await answer(ctx, explain_retention, body))["partitions"]
    assert (good["partition"], good["error"], good["log_end_offset"]) == (0, None, 1)
    assert [s["verdict"] for s in good["segments"]] == ["keep_active"]
    assert (bad["partition"], bad["error"]) == (4, "UNKNOWN_TOPIC_OR_PARTITION")
    with pytest.raises(UnknownTopicOrPartition):
        await call(
            ctx, explain_retention, ExplainRetentionRequest(topic="missing", partitions=None)
        )
