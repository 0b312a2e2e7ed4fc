"""Every API of docs/protocol.md §4 and every error code of §5, against the real `tidelog serve`.

One broker process serves the whole module (topics have distinct names), so the
suite stays fast on two cores; tests that need special settings start their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from protocol.batch import CRC_OFFSET, HEADER_SIZE, encode_batch
from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import CONTRACT_APIS, WireClient, batch, offsets_of, values_of

pytestmark = pytest.mark.integration

ALL_APIS = set(CONTRACT_APIS)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_broker(
        tmp_path_factory.mktemp("api") / "data", "auto.create.topics.enable=false"
    )
    yield broker
    assert broker.stop() == 0


@pytest.fixture
def client(shared_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(shared_broker.address) as c:
        yield c


def _code(result: dict) -> str | None:
    return result["error"]


# --- api_versions / metadata ------------------------------------------------------


def test_api_versions_lists_every_api_and_the_limits(client: WireClient) -> None:
    body = client.ok("api_versions", {})
    assert body["server"] == "tidelog"
    assert isinstance(body["version"], str)
    assert set(body["apis"]) >= ALL_APIS
    assert all(v == [1, 1] for name, v in body["apis"].items() if name in ALL_APIS)
    assert body["limits"] == {"socket.request.max.bytes": 104857600, "message.max.bytes": 1048588}


def test_metadata_all_and_named_with_unknown(client: WireClient) -> None:
    client.create_topic("meta-a", 2, retention_ms=3_600_000)
    everything = client.ok("metadata", {"topics": None})["topics"]
    assert "meta-a" in {t["topic"] for t in everything}
    named = client.ok("metadata", {"topics": ["meta-a", "meta-missing"]})["topics"]
    a, missing = named
    assert a["error"] is None
    assert a["configs"] == {"retention.ms": "3600000"}
    assert [p["partition"] for p in a["partitions"]] == [0, 1]
    assert a["partitions"][0] == {
        "partition": 0,
        "log_start_offset": 0,
        "high_watermark": 0,
        "log_end_offset": 0,
        "size_bytes": 0,
        "segments": 1,
    }
    assert missing["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert missing["partitions"] == []


# --- create / delete ------------------------------------------------------------


def test_create_topic_then_already_exists(client: WireClient, shared_broker: BrokerProcess) -> None:
    client.create_topic("dup", 3)
    assert sorted(p.name for p in shared_broker.data_dir.glob("dup-*")) == [
        "dup-0",
        "dup-1",
        "dup-2",
    ]
    response = client.call("create_topic", {"topic": "dup"})
    assert response["error"] == "TOPIC_ALREADY_EXISTS"
    assert response["body"] is None and response["message"]


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../escape", "a/b", "a\\b", "a\x00b", "é", " lead", "x" * 250, "../../tmp/x"],
    ids=["empty", "dot", "dotdot", "parent", "slash", "backslash", "nul", "unicode", "space",
         "too-long", "deep-parent"],
)  # fmt: skip
def test_illegal_topic_names_create_nothing_anywhere(
    client: WireClient, shared_broker: BrokerProcess, name: str
) -> None:
    data_dir = shared_broker.data_dir
    before_parent = set(data_dir.parent.iterdir())
    before_data = set(data_dir.iterdir())
    response = client.call("create_topic", {"topic": name})
    assert response["error"] == "INVALID_TOPIC_EXCEPTION"
    assert set(data_dir.parent.iterdir()) == before_parent
    assert set(data_dir.iterdir()) == before_data
    if "\x00" not in name:  # where a partition directory of that name would resolve to
        assert not (data_dir / f"{name}-0").exists()


def test_legal_edge_names(client: WireClient) -> None:
    for name in ("a.b", "a_b", "A-9", "-" * 200):
        client.create_topic(name)


def test_longest_legal_name(client: WireClient) -> None:
    client.create_topic("x" * 249)
    client.ok("delete_topic", {"topic": "x" * 249})


@pytest.mark.parametrize("partitions", [0, -1, 1_000_000])
def test_invalid_partition_counts(client: WireClient, partitions: int) -> None:
    response = client.call(
        "create_topic", {"topic": f"parts-{partitions}", "partitions": partitions}
    )
    assert response["error"] == "INVALID_PARTITIONS"
    meta = client.ok("metadata", {"topics": [f"parts-{partitions}"]})["topics"][0]
    assert meta["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.msec": 5},
        {"segment.bytes": 1},
        {"cleanup.policy": "shred"},
        {"retention.ms": "x"},
    ],
    ids=["unknown", "too-small", "bad-choice", "not-a-number"],
)
def test_invalid_topic_configs_refused_without_half_created_topic(
    client: WireClient, shared_broker: BrokerProcess, configs: dict
) -> None:
    topic = "badcfg-" + str(abs(hash(str(configs))))
    response = client.call("create_topic", {"topic": topic, "configs": configs})
    assert response["error"] == "INVALID_CONFIG"
    assert next(iter(configs)) in response["message"]
    assert not list(shared_broker.data_dir.glob(f"{topic}-*"))


def test_delete_topic(client: WireClient, shared_broker: BrokerProcess) -> None:
    client.create_topic("doomed", 2)
    client.produce("doomed", batch(b"v"))
    client.ok("delete_topic", {"topic": "doomed"})
    meta = client.ok("metadata", {"topics": ["doomed"]})["topics"][0]
    assert meta["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert client.call("delete_topic", {"topic": "doomed"})["error"] == (
        "UNKNOWN_TOPIC_OR_PARTITION"
    )
    client.create_topic("doomed")  # the name is free again, and empty
    assert client.fetch("doomed", 0)["high_watermark"] == 0


# --- configs --------------------------------------------------------------------


def test_describe_and_alter_configs(client: WireClient) -> None:
    client.create_topic("cfg", 1, segment_bytes=1048576)
    configs = client.ok("describe_configs", {"topic": "cfg"})["configs"]
    assert configs["segment.bytes"] == {"value": 1048576, "source": "topic"}
    assert configs["retention.ms"] == {"value": 604800000, "source": "default"}
    client.ok(
        "alter_configs",
        {"topic": "cfg", "set": {"retention.ms": 1000}, "delete": ["segment.bytes"]},
    )
    configs = client.ok("describe_configs", {"topic": "cfg"})["configs"]
    assert configs["retention.ms"] == {"value": 1000, "source": "topic"}
    assert configs["segment.bytes"] == {"value": 1073741824, "source": "default"}
    bad = client.call("alter_configs", {"topic": "cfg", "set": {"retention.mss": 1}})
    assert bad["error"] == "INVALID_CONFIG"
    assert "'retention.mss'" in bad["message"] and "did you mean 'retention.ms'" in bad["message"]
    unknown_delete = client.call("alter_configs", {"topic": "cfg", "delete": ["segment.byte"]})
    assert unknown_delete["error"] == "INVALID_CONFIG"
    missing = client.call("describe_configs", {"topic": "nope"})
    assert missing["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_alter_configs_takes_effect_at_once(client: WireClient) -> None:
    client.create_topic("live")
    client.produce("live", batch(b"x" * 2000))
    client.ok("alter_configs", {"topic": "live", "set": {"max.message.bytes": 1000}})
    result = client.call(
        "produce",
        {
            "acks": 1,
            "timeout_ms": 1000,
            "topics": [
                {"topic": "live", "partitions": [{"partition": 0, "records": batch(b"x" * 2000)}]}
            ],
        },
    )["body"]["topics"][0]["partitions"][0]
    assert result["error"] == "MESSAGE_TOO_LARGE"


# --- produce --------------------------------------------------------------------


def test_produce_acks_1_and_minus_1_assign_consecutive_offsets(client: WireClient) -> None:
    client.create_topic("prod")
    first = client.produce("prod", batch(b"a", b"b", b"c"), acks=1)
    assert first == {
        "partition": 0,
        "error": None,
        "message": None,
        "base_offset": 0,
        "log_append_time": -1,
        "log_start_offset": 0,
    }
    second = client.produce("prod", batch(b"d", b"e"), acks=-1)
    assert second["error"] is None and second["base_offset"] == 3
    fetched = client.fetch("prod", 0)
    assert fetched["high_watermark"] == 5
    assert values_of(fetched["records"]) == [b"a", b"b", b"c", b"d", b"e"]
    assert offsets_of(fetched["records"]) == [0, 1, 2, 3, 4]


def test_log_append_time_topic_reports_the_broker_time(client: WireClient) -> None:
    client.create_topic("lat", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    result = client.produce("lat", batch(b"v", timestamp_ms=1))
    assert result["log_append_time"] >= before


def _flip_crc(records: bytes) -> bytes:
    raw = bytearray(records)
    raw[CRC_OFFSET] ^= 0xFF
    return bytes(raw)


def _with_base_offset(records: bytes, base: int) -> bytes:
    return base.to_bytes(8, "big") + records[8:]


def test_per_partition_errors_do_not_fail_neighbours(client: WireClient) -> None:
    client.create_topic("mixed", 4)
    client.create_topic("compacted", cleanup_policy="compact")
    good = batch(b"ok")
    body = client.ok(
        "produce",
        {
            "acks": 1,
            "timeout_ms": 1000,
            "topics": [
                {
                    "topic": "mixed",
                    "partitions": [
                        {"partition": 0, "records": good},
                        {"partition": 1, "records": _flip_crc(good)},
                        {"partition": 2, "records": _with_base_offset(good, 7)},
                        {"partition": 3, "records": good[: HEADER_SIZE + 2]},
                        {"partition": 9, "records": good},
                    ],
                },
                {
                    "topic": "compacted",
                    "partitions": [{"partition": 0, "records": batch(b"v", key=None)}],
                },
            ],
        },
    )
    mixed, compacted = body["topics"]
    codes = [(p["partition"], p["error"]) for p in mixed["partitions"]]
    assert codes == [
        (0, None),
        (1, "CORRUPT_MESSAGE"),
        (2, "INVALID_RECORD"),
        (3, "CORRUPT_MESSAGE"),
        (9, "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    assert all(p["message"] for p in mixed["partitions"][1:])
    assert compacted["partitions"][0]["error"] == "INVALID_RECORD"
    # Nothing of the refused batches reached the logs.
    for partition, hw in [(0, 1), (1, 0), (2, 0), (3, 0)]:
        assert client.fetch("mixed", 0, partition=partition)["high_watermark"] == hw
    assert client.fetch("compacted", 0)["high_watermark"] == 0


def test_message_too_large_and_invalid_timestamp(client: WireClient) -> None:
    client.create_topic("limits", max_message_bytes=500, message_timestamp_after_max_ms=60_000)
    big = client.call(
        "produce",
        {"acks": 1, "timeout_ms": 1000, "topics": [{"topic": "limits", "partitions": [
            {"partition": 0, "records": batch(b"x" * 1000)}]}]},
    )["body"]["topics"][0]["partitions"][0]  # fmt: skip
    assert big["error"] == "MESSAGE_TOO_LARGE"
    future = int(time.time() * 1000) + 3_600_000
    late = client.call(
        "produce",
        {"acks": 1, "timeout_ms": 1000, "topics": [{"topic": "limits", "partitions": [
            {"partition": 0, "records": batch(b"v", timestamp_ms=future)}]}]},
    )["body"]["topics"][0]["partitions"][0]  # fmt: skip
    assert late["error"] == "INVALID_TIMESTAMP"


def test_produce_to_unknown_topic_without_auto_create(client: WireClient) -> None:
    response = client.call(
        "produce",
        {"acks": 1, "timeout_ms": 1000, "topics": [{"topic": "ghost", "partitions": [
            {"partition": 0, "records": batch(b"v")}]}]},
    )  # fmt: skip
    assert response["body"]["topics"][0]["partitions"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_acks_minus_1_with_zero_timeout_is_request_timed_out(client: WireClient) -> None:
    client.create_topic("slowsync")
    result = client.call(
        "produce",
        {"acks": -1, "timeout_ms": 0, "topics": [{"topic": "slowsync", "partitions": [
            {"partition": 0, "records": batch(b"v")}]}]},
    )["body"]["topics"][0]["partitions"][0]  # fmt: skip
    assert result["error"] == "REQUEST_TIMED_OUT"
    # The append itself happened (it is in the log, just not confirmed durable).
    assert client.fetch("slowsync", 0)["high_watermark"] == 1


# --- fetch ----------------------------------------------------------------------


def test_fetch_ranges(client: WireClient) -> None:
    client.create_topic("ranges")
    for i in range(3):
        client.produce("ranges", batch(b"%d" % i, b"%d" % i))
    middle = client.fetch("ranges", 3)
    # Whole batches from the one holding offset 3 (offsets 2 and 3).
    assert offsets_of(middle["records"])[0] == 2
    at_hw = client.fetch("ranges", 6)
    assert at_hw["error"] is None and at_hw["records"] == b"" and at_hw["high_watermark"] == 6
    above = client.fetch("ranges", 7)
    assert above["error"] == "OFFSET_OUT_OF_RANGE"
    assert client.fetch("ranges", -1)["error"] == "OFFSET_OUT_OF_RANGE"
    tiny = client.fetch("ranges", 0, max_bytes=1)
    assert offsets_of(tiny["records"]) == [0, 1]  # at least one whole batch


def test_fetch_unknown_partition(client: WireClient) -> None:
    client.create_topic("fetchone")
    assert client.fetch("fetchone", 0, partition=3)["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert client.fetch("nowhere", 0)["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


# --- offsets ----------------------------------------------------------------------


def test_list_offsets_and_offset_for_time(client: WireClient) -> None:
    client.create_topic("times")
    empty = client.partition_call("list_offsets", "times", spec="max_timestamp")
    assert empty["error"] is None and empty["offset"] is None and empty["timestamp"] is None
    client.produce("times", encode_batch([(b"k", b"a", (), 1000), (b"k", b"b", (), 5000)]))
    client.produce("times", encode_batch([(b"k", b"c", (), 3000)]))
    assert client.partition_call("list_offsets", "times", spec="earliest")["offset"] == 0
    assert client.partition_call("list_offsets", "times", spec="latest")["offset"] == 3
    top = client.partition_call("list_offsets", "times", spec="max_timestamp")
    assert (top["offset"], top["timestamp"]) == (1, 5000)
    found = client.partition_call("offset_for_time", "times", timestamp=2000)
    assert (found["offset"], found["timestamp"]) == (1, 5000)
    first = client.partition_call("offset_for_time", "times", timestamp=0)
    assert (first["offset"], first["timestamp"]) == (0, 1000)
    none = client.partition_call("offset_for_time", "times", timestamp=6000)
    assert none["error"] is None and none["offset"] is None and none["timestamp"] is None
    bad = client.partition_call("list_offsets", "times", partition=5, spec="latest")
    assert bad["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_delete_records(client: WireClient) -> None:
    client.create_topic("trim")
    client.produce("trim", batch(*[b"v"] * 10))
    assert client.partition_call("delete_records", "trim", offset=4)["low_watermark"] == 4
    assert client.fetch("trim", 3)["error"] == "OFFSET_OUT_OF_RANGE"
    assert client.partition_call("list_offsets", "trim", spec="earliest")["offset"] == 4
    beyond = client.partition_call("delete_records", "trim", offset=11)
    assert beyond["error"] == "OFFSET_OUT_OF_RANGE"
    assert client.partition_call("delete_records", "trim", offset=-1)["low_watermark"] == 10


def test_delete_records_on_compact_only_topic_is_a_policy_violation(client: WireClient) -> None:
    client.create_topic("keyed", cleanup_policy="compact")
    client.produce("keyed", batch(b"v"))
    result = client.partition_call("delete_records", "keyed", offset=1)
    assert result["error"] == "POLICY_VIOLATION"


# --- request-level errors --------------------------------------------------------


def test_request_level_errors_keep_the_connection_open(client: WireClient) -> None:
    cases = [
        ({"api": "metadata", "v": 1, "id": 5}, "INVALID_REQUEST", "body"),
        ({"api": "metadata", "v": 1, "body": {}}, "INVALID_REQUEST", "id"),
        ({"v": 1, "id": 6, "body": {}}, "INVALID_REQUEST", "api"),
        ({"api": "teleport", "v": 1, "id": 7, "body": {}}, "INVALID_REQUEST", "teleport"),
        ({"api": "metadata", "v": 999, "id": 8, "body": {}}, "UNSUPPORTED_VERSION", "v"),
        ({"api": "fetch", "v": 1, "id": 9, "body": {"max_wait_ms": True}}, "INVALID_REQUEST",
         "max_wait_ms"),
        ({"api": "delete_records", "v": 1, "id": 10, "body": {"topics": [{"topic": "t",
          "partitions": [{"partition": 0, "offset": 1.5}]}]}}, "INVALID_REQUEST",
         "partitions[0].offset"),
        ({"api": "produce", "v": 1, "id": 11, "body": {"acks": 2, "timeout_ms": 1, "topics": []}},
         "INVALID_REQUEST", "acks"),
    ]  # fmt: skip
    for request, code, named in cases:
        client.send_obj(request)
        response = client.recv()
        assert response is not None
        assert response["error"] == code, request
        assert named in response["message"], (named, response["message"])
        assert response["body"] is None
        assert response["id"] == request.get("id", -1)
    assert client.ok("api_versions", {})["server"] == "tidelog"


def test_batches_of_one_partition_are_appended_all_or_none(client: WireClient) -> None:
    client.create_topic("atomic")
    first, second = batch(b"a", b"b"), batch(b"c")
    result = client.produce("atomic", first + second + _flip_crc(batch(b"bad")))
    assert result["error"] == "CORRUPT_MESSAGE"
    assert client.fetch("atomic", 0)["high_watermark"] == 0  # nothing of the three
    big = b"".join(batch(*[b"%d" % i * 100] * 3000) for i in range(4))  # > 1 MiB in one append
    assert len(big) > 1 << 20
    result = client.produce("atomic", first + big)
    assert result["error"] is None and result["base_offset"] == 0
    assert client.fetch("atomic", 0)["high_watermark"] == 2 + 4 * 3000
