"""`__consumer_offsets` belongs to the broker: clients cannot write, create, alter or
delete it, and a malformed record in it is skipped and counted, never fatal (issue 23 #2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest
import trio

from broker.config import BrokerConfig
from broker.groups.messages import GroupMetadata
from broker.groups.records import group_record
from broker.server import BrokerHandle, serve_broker
from protocol.batch import encode_batch
from protocol.offsets_schema import OFFSETS_TOPIC, offset_key, offset_value
from storage.manager import LogManager
from tests.broker.rawconn import RawConn, batch


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _commit_body(group: str, topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {
        "group": group,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "offset": offset}]}],
    }


async def _start(nursery: trio.Nursery, data_dir: Path) -> BrokerHandle:
    config = BrokerConfig.from_props(
        {}, data_dir=data_dir, listen=("127.0.0.1", 0), metrics_listen=("127.0.0.1", 0)
    )
    return await nursery.start(serve_broker, config)


def _partition_error(response: dict[str, Any]) -> str | None:
    assert response["error"] is None, response
    return response["body"]["topics"][0]["partitions"][0]["error"]


async def test_clients_cannot_write_create_alter_or_delete_the_offsets_topic(
    inprocess_broker: BrokerHandle,
) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        created = await conn.call(
            "create_topic",
            {"topic": OFFSETS_TOPIC, "configs": {"cleanup.policy": "delete", "retention.ms": 100}},
        )
        assert created["error"] == "INVALID_TOPIC_EXCEPTION", created
        assert "internal" in created["message"]
        produced = await conn.call(
            "produce",
            {
                "acks": 1,
                "timeout_ms": 1000,
                "topics": [
                    {
                        "topic": OFFSETS_TOPIC,
                        "partitions": [{"partition": 0, "records": batch(b"x")}],
                    }
                ],
            },
        )
        assert _partition_error(produced) == "INVALID_TOPIC_EXCEPTION"
        # Not auto-created by that produce either.
        assert OFFSETS_TOPIC not in inprocess_broker.context.manager.topics()

        await conn.call("create_topic", {"topic": "t"})
        assert (
            _partition_error(await conn.call("commit_offsets", _commit_body("g", "t", 0, 5)))
            is None
        )
        assert OFFSETS_TOPIC in inprocess_broker.context.manager.topics()

        altered = await conn.call(
            "alter_configs", {"topic": OFFSETS_TOPIC, "set": {"cleanup.policy": "delete"}}
        )
        assert altered["error"] == "INVALID_TOPIC_EXCEPTION", altered
        trimmed = await conn.call(
            "delete_records",
            {"topics": [{"topic": OFFSETS_TOPIC, "partitions": [{"partition": 0, "offset": -1}]}]},
        )
        assert _partition_error(trimmed) == "INVALID_TOPIC_EXCEPTION"
        deleted = await conn.call("delete_topic", {"topic": OFFSETS_TOPIC})
        assert deleted["error"] == "INVALID_TOPIC_EXCEPTION", deleted

        # The commit is intact and the topic is still compacted; reads stay allowed.
        fetched = await conn.call("fetch_offsets", {"group": "g"})
        assert fetched["body"]["topics"][0]["partitions"][0]["offset"] == 5
        assert (
            inprocess_broker.context.manager.topic_overrides(OFFSETS_TOPIC)["cleanup.policy"]
            == "compact"
        )
        described = await conn.call("describe_configs", {"topic": OFFSETS_TOPIC})
        assert described["error"] is None


# Records an attacker (or a bug, or an old broker) could have left in the topic.
MALFORMED = [
    pytest.param(_pack(["g", ["x"], 0]), offset_value(1, "", 0), id="topic-is-an-array"),
    pytest.param(_pack(["g", "t", "0"]), offset_value(1, "", 0), id="partition-is-a-str"),
    pytest.param(_pack(["g", "t", True]), offset_value(1, "", 0), id="partition-is-a-bool"),
    pytest.param(_pack(["g", "t", -1]), offset_value(1, "", 0), id="partition-negative"),
    pytest.param(_pack(["g", "t", 2**40]), offset_value(1, "", 0), id="partition-above-int32"),
    pytest.param(_pack(["", "t", 0]), offset_value(1, "", 0), id="empty-group"),
    pytest.param(_pack(["g", "t"]), offset_value(1, "", 0), id="key-of-two"),
    pytest.param(_pack({"g": 1}), offset_value(1, "", 0), id="key-is-a-map"),
    pytest.param(b"\xc1", offset_value(1, "", 0), id="key-not-msgpack"),
    pytest.param(offset_key("g", "t", 0), _pack({"offset": float("inf")}), id="offset-inf"),
    pytest.param(offset_key("g", "t", 0), _pack({"offset": 1.5}), id="offset-float"),
    pytest.param(offset_key("g", "t", 0), _pack({"offset": 2**64 - 1}), id="offset-above-int64"),
    pytest.param(offset_key("g", "t", 0), _pack({"offset": "7"}), id="offset-is-a-str"),
    pytest.param(offset_key("g", "t", 0), _pack({"offset": 1, "metadata": 3}), id="metadata-int"),
    pytest.param(offset_key("g", "t", 0), _pack([1, 2]), id="value-is-an-array"),
    pytest.param(offset_key("g", "t", 0), b"\x92\x01", id="value-truncated"),
]


@pytest.mark.parametrize(("key", "value"), MALFORMED)
async def test_a_malformed_offsets_record_is_skipped_and_counted(
    nursery: trio.Nursery, tmp_path: Path, key: bytes, value: bytes
) -> None:
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir)
    manager.open()
    manager.create_topic("t", 1, {})
    manager.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    plog = manager.get_log(OFFSETS_TOPIC, 0)
    plog.append(encode_batch([(offset_key("h", "t", 0), offset_value(3, "m", 0), None, 0)]))
    plog.append(encode_batch([(key, value, None, 0)]))
    plog.append(encode_batch([(offset_key("h", "t", 0), offset_value(4, "n", 0), None, 0)]))
    manager.close()

    handle = await _start(nursery, data_dir)
    conn = await RawConn.open(handle)
    async with conn.stream:
        # Every group keeps working, including the one the bad record names.
        for group in ("h", "g"):
            fetched = await conn.call("fetch_offsets", {"group": group})
            assert fetched["error"] is None, fetched
        fetched = await conn.call("fetch_offsets", {"group": "h"})
        assert fetched["body"]["topics"][0]["partitions"][0]["offset"] == 4
        assert (
            _partition_error(await conn.call("commit_offsets", _commit_body("g", "t", 0, 9)))
            is None
        )
        fetched = await conn.call("fetch_offsets", {"group": "g"})
        assert fetched["body"]["topics"][0]["partitions"][0]["offset"] == 9
    stats = handle.context.groups.statistics()
    assert stats.malformed_records == 1
    assert stats.loaded_records == 2


async def test_offsets_of_partitions_that_cannot_exist_are_refused(
    inprocess_broker: BrokerHandle,
) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "t"})
        for topic, partition in (("", 0), ("t", -1), ("t", 1), ("nope", 0)):
            fetched = await conn.call(
                "fetch_offsets",
                {"group": "g", "topics": [{"topic": topic, "partitions": [partition]}]},
            )
            assert _partition_error(fetched) == "UNKNOWN_TOPIC_OR_PARTITION", (topic, partition)
        assert (
            _partition_error(
                await conn.call(
                    "fetch_offsets", {"group": "g", "topics": [{"topic": "t", "partitions": [0]}]}
                )
            )
            is None
        )
        for offset in (-(2**63), -1):
            refused = await conn.call("commit_offsets", _commit_body("g", "t", 0, offset))
            assert refused["error"] == "INVALID_REQUEST", refused
            assert "offset" in refused["message"]
        assert (
            _partition_error(await conn.call("commit_offsets", _commit_body("g", "t", 0, 0)))
            is None
        )


async def test_group_metadata_records_are_not_malformed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    # The group coordinator writes `[group]`-keyed metadata beside the commits; the
    # load before the coordinator counted them as malformed (1 on the base).
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir)
    manager.open()
    manager.create_topic("t", 1, {})
    manager.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    key, value = group_record("g", GroupMetadata("consumer", 1, "range", None, 0, ()))
    commit = (offset_key("g", "t", 0), offset_value(3, "", 0), None, 0)
    manager.get_log(OFFSETS_TOPIC, 0).append(encode_batch([commit, (key, value, None, 0)]))
    manager.close()

    handle = await _start(nursery, data_dir)
    stats = handle.context.groups.statistics()
    assert (stats.malformed_records, stats.loaded_records) == (0, 2)
    conn = await RawConn.open(handle)
    async with conn.stream:
        [described] = (await conn.call("describe_groups", {"groups": ["g"]}))["body"]["groups"]
        assert (described["state"], described["generation"]) == ("Empty", 1)
        fetched = await conn.call("fetch_offsets", {"group": "g"})
        assert fetched["body"]["topics"][0]["partitions"][0]["offset"] == 3
