"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs adapters, in kafka-python's
bytes (conftest.py). Expected sources, synonyms, types and error codes are what Apache
Kafka 4.4 answered for the same topic and broker settings (interop/admin_scenarios.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from broker.context import BrokerContext
from broker.kafka.config_view import java_double
from tests.broker.contexts import open_context
from tests.broker.kafka.conftest import LISTEN, KafkaRun, admin, run_kafka

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def describe_request(
    kind: int,
    name: str,
    keys: list[str] | None = None,
    *,
    version: int = 3,
    synonyms: bool = True,
    documentation: bool = False,
) -> Any:
    R = admin.DescribeConfigsRequest[version]
    fields: dict[str, Any] = {
        "resources": [
            R.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=keys
            )
        ],
        "include_synonyms": synonyms,
    }
    if version >= 3:
        fields["include_documentation"] = documentation
    return R(**fields)


async def describe(kafka: KafkaRun, kind: int, name: str, keys: list[str] | None = None, **kw: Any):
    response = await kafka(describe_request(kind, name, keys, **kw))
    [result] = response.results
    assert (result.resource_type, result.resource_name) == (kind, name)
    return result


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


async def test_topic_configs_with_sources_and_synonyms_as_kafka(
    kafka: KafkaRun, ctx: BrokerContext
) -> None:
    ctx.manager.create_topic(
        "dc",
        1,
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
        },
    )
    result = await describe(kafka, TOPIC, "dc")
    assert (result.error_code, result.error_message) == (0, None)
    configs = by_name(result)
    assert set(configs) == set(ctx.config.describe_topic_configs({}))  # every topic key
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only) == ("1000", 1, False)
    assert synonyms(retention) == [("retention.ms", "1000", DYNAMIC_TOPIC)]
    policy = configs["cleanup.policy"]
    assert (policy.value, policy.config_source, policy.config_type) == ("compact,delete", 1, 7)
    assert synonyms(policy) == [
        ("cleanup.policy", "compact,delete", DYNAMIC_TOPIC),
        ("log.cleanup.policy", "delete", DEFAULT),
    ]
    ratio = configs["min.cleanable.dirty.ratio"]
    assert (ratio.value, ratio.config_type) == ("0.25", 6)
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source, segment.config_type) == ("1073741824", 5, 3)
    assert synonyms(segment) == [("log.segment.bytes", "1073741824", DEFAULT)]
    # Kafka lists no synonym for keys whose primary broker key has no default.
    for name in ("segment.ms", "segment.jitter.ms", "flush.ms"):
        assert (synonyms(configs[name]), configs[name].config_source) == ([], DEFAULT)
    assert configs["message.timestamp.type"].config_type == 2
    assert configs["retention.bytes"].config_type == 5
    assert not any(c.is_sensitive for c in result.configs)


async def test_topic_defaults_from_server_properties(tmp_path: Path, nursery: trio.Nursery) -> None:
    props = {"log.retention.hours": "24", "log.segment.bytes": "1000000", "log.roll.ms": "5000"}
    ctx = open_context(tmp_path / "d", nursery, props, listen=LISTEN)
    try:
        ctx.manager.create_topic("t", 1)
        result = await run_kafka(
            ctx, describe_request(TOPIC, "t", ["retention.ms", "segment.bytes", "segment.ms"])
        )
        configs = by_name(result.results[0])
        # log.retention.hours sets the value but is not a synonym Kafka lists for retention.ms
        # (only log.retention.ms's group from log.retention.ms on): source DEFAULT_CONFIG.
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (
            "86400000",
            5,
        )
        assert synonyms(configs["retention.ms"]) == []
        assert configs["segment.bytes"].config_source == STATIC_BROKER
        assert synonyms(configs["segment.bytes"]) == [
            ("log.segment.bytes", "1000000", STATIC_BROKER),
            ("log.segment.bytes", "1073741824", DEFAULT),
        ]
        assert synonyms(configs["segment.ms"]) == [
            ("log.roll.ms", "5000", STATIC_BROKER),
            ("log.roll.hours", "168", DEFAULT),
        ]
    finally:
        ctx.manager.close()


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_key_filter_versions_and_no_synonyms(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("t", 1)
    result = await describe(
        kafka,
        TOPIC,
        "t",
        ["retention.ms", "nope", "segment.bytes"],
        version=version,
        synonyms=False,
    )
    assert [c.name for c in result.configs] == ["retention.ms", "segment.bytes"]
    assert all(c.synonyms == [] for c in result.configs)
    assert result.configs[0].config_source == DEFAULT


async def test_documentation_only_when_asked(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("t", 1)
    plain = await describe(kafka, TOPIC, "t", ["retention.ms"])
    assert plain.configs[0].documentation is None
    documented = await describe(kafka, TOPIC, "t", ["retention.ms"], documentation=True)
    assert "Delete segments" in documented.configs[0].documentation


async def test_describe_errors_as_kafka(kafka: KafkaRun) -> None:
    assert (await describe(kafka, TOPIC, "nope")).error_code == 3
    bad = await describe(kafka, TOPIC, "bad name")
    assert bad.error_code == 17 and "bad name" in bad.error_message
    assert (await describe(kafka, 7, "x")).error_code == 42
    other = await describe(kafka, BROKER, "2")
    assert (other.error_code, other.error_message) == (
        42,
        "Unexpected broker id, expected 1 or empty string, but received 2",
    )
    word = await describe(kafka, BROKER, "abc")
    assert (word.error_code, word.error_message) == (
        42,
        "Broker id must be an integer, but it is: abc",
    )
    cluster_default = await describe(kafka, BROKER, "", ["num.partitions"])
    assert cluster_default.error_code == 0
    assert [(c.name, c.value, c.config_source) for c in cluster_default.configs] == [
        ("num.partitions", "1", DEFAULT)
    ]


async def test_broker_configs(tmp_path: Path, nursery: trio.Nursery) -> None:
    ctx = open_context(tmp_path / "d", nursery, {"num.partitions": "3"}, listen=LISTEN)
    try:
        keys = [
            "num.partitions",
            "log.retention.hours",
            "log.retention.ms",
            "message.max.bytes",
            "log.dirs",
        ]
        result = await run_kafka(ctx, describe_request(BROKER, "1", keys))
        configs = by_name(result.results[0])
        assert list(configs) == keys
        partitions = configs["num.partitions"]
        assert (partitions.value, partitions.config_source, partitions.config_type) == ("3", 4, 3)
        assert synonyms(partitions) == [
            ("num.partitions", "3", STATIC_BROKER),
            ("num.partitions", "1", DEFAULT),
        ]
        hours = configs["log.retention.hours"]
        assert (hours.value, hours.config_source, synonyms(hours)) == (
            "168",
            DEFAULT,
            [("log.retention.hours", "168", DEFAULT)],
        )
        assert (configs["log.retention.ms"].value, synonyms(configs["log.retention.ms"])) == (
            None,
            [],
        )
        assert configs["message.max.bytes"].value == "1048588"
        assert configs["log.dirs"].value == str(ctx.config.data_dir)
        assert all(c.read_only for c in configs.values())  # nothing is dynamic in Tidelog
    finally:
        ctx.manager.close()


# --- AlterConfigs -----------------------------------------------------------------------


async def alter(
    kafka: KafkaRun,
    kind: int,
    name: str,
    configs: dict[str, str | None],
    *,
    validate_only: bool = False,
    version: int = 1,
) -> tuple[int, str | None]:
    R = admin.AlterConfigsRequest[version]
    C = R.AlterConfigsResource.AlterableConfig
    response = await kafka(
        R(
            resources=[
                R.AlterConfigsResource(
                    resource_type=kind,
                    resource_name=name,
                    configs=[C(name=k, value=v) for k, v in configs.items()],
                )
            ],
            validate_only=validate_only,
        )
    )
    [result] = response.responses
    assert (result.resource_type, result.resource_name) == (kind, name)
    return result.error_code, result.error_message


@pytest.mark.parametrize("version", [0, 1])
async def test_alter_configs_replaces_the_overrides(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("t", 2, {"retention.ms": "5000"})
    assert await alter(kafka, TOPIC, "t", {"segment.ms": "6000"}, version=version) == (0, None)
    assert ctx.manager.topic_overrides("t") == {
        "segment.ms": "6000"
    }  # retention.ms back to default
    assert ctx.manager.get_log("t", 1).config.segment_ms == 6000
    assert await alter(kafka, TOPIC, "t", {"segment.ms": "7000"}, validate_only=True) == (0, None)
    assert ctx.manager.topic_overrides("t") == {"segment.ms": "6000"}


async def test_alter_configs_errors_as_kafka(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("t", 1, {"retention.ms": "5000"})
    code, message = await alter(kafka, TOPIC, "t", {"segment.ms": "abc"})
    assert code == 40 and "segment.ms" in message
    code, message = await alter(kafka, TOPIC, "t", {"segment.ms": "7000", "foo": "1"})
    assert code == 40 and "foo" in message
    assert await alter(kafka, TOPIC, "t", {"segment.ms": None}) == (
        42,
        "Null value not supported for : segment.ms",
    )
    assert (await alter(kafka, TOPIC, "nope", {"segment.ms": "1"}))[0] == 3
    assert (await alter(kafka, TOPIC, "bad name", {"segment.ms": "1"}))[0] == 17
    assert await alter(kafka, BROKER, "1", {"num.partitions": "3"}) == (
        42,
        "Cannot update these configs dynamically: [num.partitions]",
    )
    assert (await alter(kafka, BROKER, "2", {"num.partitions": "3"}))[0] == 42
    assert await alter(kafka, 7, "x", {"a": "1"}) == (42, "Unknown resource type 7")
    assert ctx.manager.topic_overrides("t") == {"retention.ms": "5000"}  # nothing applied


# --- IncrementalAlterConfigs ------------------------------------------------------------


async def change(
    kafka: KafkaRun,
    kind: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
    version: int = 1,
) -> tuple[int, str | None]:
    R = admin.IncrementalAlterConfigsRequest[version]
    C = R.AlterConfigsResource.AlterableConfig
    response = await kafka(
        R(
            resources=[
                R.AlterConfigsResource(
                    resource_type=kind,
                    resource_name=name,
                    configs=[C(name=k, config_operation=op, value=v) for k, op, v in ops],
                )
            ],
            validate_only=validate_only,
        )
    )
    [result] = response.responses
    return result.error_code, result.error_message


@pytest.mark.parametrize("version", [0, 1])
async def test_incremental_set_delete_append_subtract(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("t", 1, {"segment.ms": "5000"})

    async def ok(*ops: tuple[str, int, str | None]) -> None:
        assert await change(kafka, TOPIC, "t", list(ops), version=version) == (0, None)

    await ok(("retention.ms", SET, "7000"))
    assert ctx.manager.topic_overrides("t") == {"segment.ms": "5000", "retention.ms": "7000"}
    await ok(("segment.ms", DELETE, None), ("nope.key", DELETE, None))
    assert ctx.manager.topic_overrides("t") == {"retention.ms": "7000"}
    await ok(("cleanup.policy", APPEND, "compact"))  # onto Kafka's default, delete
    assert ctx.manager.topic_overrides("t")["cleanup.policy"] == "delete,compact"
    await ok(("cleanup.policy", APPEND, "compact"))
    assert ctx.manager.topic_config("t").cleanup_policy == {"delete", "compact"}
    await ok(("cleanup.policy", SUBTRACT, "delete"))
    assert ctx.manager.topic_config("t").cleanup_policy == {"compact"}
    assert await change(kafka, TOPIC, "t", [("retention.ms", SET, "1")], validate_only=True) == (
        0,
        None,
    )
    assert ctx.manager.topic_overrides("t")["retention.ms"] == "7000"


async def test_incremental_errors_as_kafka(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("t", 1)
    assert await change(kafka, TOPIC, "t", [("retention.ms", APPEND, "5")]) == (
        40,
        "Can't APPEND to key retention.ms because its type is not LIST.",
    )
    assert await change(kafka, TOPIC, "t", [("retention.ms", SET, None)]) == (
        42,
        "Null value not supported for : retention.ms",
    )
    assert (await change(kafka, TOPIC, "t", [("retention.ms", 7, "1")]))[0] == -1
    assert await change(
        kafka, TOPIC, "t", [("retention.ms", SET, "1"), ("retention.ms", SET, "2")]
    ) == (
        42,
        "Error due to duplicate config keys",
    )
    assert (await change(kafka, TOPIC, "t", [("nope.key", SET, "1")]))[0] == 40
    code, message = await change(
        kafka, TOPIC, "t", [("retention.ms", SET, "x")], validate_only=True
    )
    assert code == 40 and "retention.ms" in message
    assert await change(kafka, BROKER, "1", [("log.retention.hours", SET, "3")]) == (
        42,
        "Cannot update these configs dynamically: [log.retention.hours]",
    )
    assert (await change(kafka, TOPIC, "nope", [("retention.ms", SET, "1")]))[0] == 3
    assert ctx.manager.topic_overrides("t") == {}


@pytest.mark.parametrize(
    ("value", "java"),
    [
        (0.5, "0.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (1e7, "1.0E7"),
        (12345678.5, "1.23456785E7"),
        (0.0001, "1.0E-4"),
        (1.7976931348623157e308, "1.7976931348623157E308"),  # Kafka's unthrottled cleaner I/O
    ],
)
def test_doubles_are_written_as_java_writes_them(value: float, java: str) -> None:
    assert java_double(value) == java


async def test_broker_key_types_and_doubles_as_kafka(kafka: KafkaRun) -> None:
    keys = [
        "log.cleaner.threads",
        "socket.request.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
    ]
    configs = by_name(await describe(kafka, BROKER, "1", keys))
    assert configs["log.cleaner.threads"].config_type == 3  # INT, as Kafka declares it
    assert configs["socket.request.max.bytes"].config_type == 3
    throttle = configs["log.cleaner.io.max.bytes.per.second"]
    assert (throttle.value, throttle.config_type) == ("1.7976931348623157E308", 6)


async def test_an_empty_key_list_means_every_key(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("t", 1)
    every = await describe(kafka, TOPIC, "t", None)
    assert [c.name for c in (await describe(kafka, TOPIC, "t", [])).configs] == [
        c.name for c in every.configs
    ]
    assert len(every.configs) == len(ctx.config.describe_topic_configs({}))


@pytest.mark.parametrize("name", ["", "1"])
async def test_every_broker_default_with_its_source(
    tmp_path: Path, nursery: trio.Nursery, name: str
) -> None:
    """The broker and the cluster-wide default (`--entity-default`) list every key:
    server.properties' as STATIC_BROKER_CONFIG, the rest DEFAULT_CONFIG, and the
    inter-broker protocol Kafbat UI reads."""
    ctx = open_context(tmp_path / "d", nursery, {"num.partitions": "3"}, listen=LISTEN)
    try:
        result = (await run_kafka(ctx, describe_request(BROKER, name))).results[0]
        configs = by_name(result)
        assert result.error_code == 0 and len(configs) > 60
        assert (configs["num.partitions"].value, configs["num.partitions"].config_source) == (
            "3",
            STATIC_BROKER,
        )
        assert configs["log.retention.hours"].config_source == DEFAULT
        protocol = configs["inter.broker.protocol.version"]
        assert (protocol.value, protocol.config_source, protocol.read_only) == (
            "4.4-IV2",
            DEFAULT,
            True,
        )
        assert synonyms(protocol) == [("inter.broker.protocol.version", "4.4-IV2", DEFAULT)]
    finally:
        ctx.manager.close()
