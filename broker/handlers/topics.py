"""The topic and config APIs: create_topic, delete_topic, metadata, describe_configs,
alter_configs. Admin changes run in worker threads (a directory per partition).

`metadata` lists a topic's config overrides only to a principal that may
DescribeConfigs it (its policy row checks Describe alone): the overrides are what
describe_configs guards, and one door must not open what the other keeps shut.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker import offload
from broker.authz.access import allows
from broker.config import unknown_key_error
from broker.context import BrokerContext
from broker.handlers.common import high_watermark, partition_error, require_topic, share_loop
from broker.handlers.group_offsets import check_not_internal
from broker.security.acl import Operation, ResourceType
from protocol import api_types as wire
from protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.schemas import check_topic_name
from protocol.settings import config_text
from storage.config import REMOTE_TURN_OFF_MESSAGE, TOPIC_CONFIG_DEFS
from storage.log import Log

# Partitions one topic may have: each is a directory with open files, and a
# typo of 10^6 should not exhaust file descriptors (BI-09).
MAX_PARTITIONS_PER_TOPIC = 10_000


async def create_topic(ctx: BrokerContext, body: wire.CreateTopicRequest) -> wire.CreateTopicAnswer:
    topic, partitions, configs = body["topic"], body["partitions"], body["configs"]
    check_topic_name(topic)
    check_not_internal(topic, "create")
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitions(
            f"partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {partitions}"
        )
    _check_topic_keys(configs)
    str_configs = {k: config_text(v) for k, v in configs.items()}
    if body.get("validate_only"):  # every check of a creation, nothing written
        if topic in ctx.manager.topics():
            raise TopicAlreadyExists(f"topic {topic!r} already exists")
        ctx.manager.validate_topic_config(str_configs)
        return {}
    await offload.to_worker(ctx.manager.create_topic, topic, partitions, str_configs)
    return {}


async def delete_topic(ctx: BrokerContext, body: wire.DeleteTopicRequest) -> wire.DeleteTopicAnswer:
    topic = body["topic"]
    check_topic_name(topic)
    check_not_internal(topic, "delete")
    require_topic(ctx, topic)
    logs = [ctx.manager.get_log(topic, p) for p in range(ctx.manager.partition_count(topic))]
    await offload.to_worker(ctx.manager.delete_topic, topic)
    for plog in logs:
        ctx.notifier.wake(plog)  # their long polls answer UNKNOWN_TOPIC_OR_PARTITION now
    ctx.metrics.forget_topic(topic)
    return {}


def _check_topic_keys(names: Iterable[str]) -> None:
    """INVALID_CONFIG for an unknown topic key, naming the closest valid one."""
    for name in names:
        if name not in TOPIC_CONFIG_DEFS:
            raise unknown_key_error(name, TOPIC_CONFIG_DEFS)


def _partition_meta(plog: Log, partition: int) -> wire.MetadataPartitionAnswer:
    return {
        "partition": partition,
        "log_start_offset": plog.log_start_offset,
        "high_watermark": high_watermark(plog),
        "log_end_offset": plog.log_end_offset,
        "size_bytes": plog.size_bytes,
        "segments": plog.segment_count,
    }


async def metadata(ctx: BrokerContext, body: wire.MetadataRequest) -> wire.MetadataAnswer:
    names = body["topics"]
    known = set(ctx.manager.topics())
    wanted = sorted(known) if names is None else list(names)
    out: list[wire.MetadataTopicAnswer] = []
    done = 0
    for topic in wanted:
        done = await share_loop(done)  # every topic's partitions are listed: share the loop
        entry: wire.MetadataTopicAnswer = {"topic": topic, "error": None, "message": None}
        try:
            if topic not in known:
                raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
            count = ctx.manager.partition_count(topic)
            shown = allows(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic)
            entry["configs"] = dict(ctx.manager.topic_overrides(topic)) if shown else {}
            entry["partitions"] = [
                _partition_meta(ctx.manager.get_log(topic, p), p) for p in range(count)
            ]
        except Exception as exc:
            entry["error"], entry["message"] = partition_error(exc)
            entry["configs"], entry["partitions"] = {}, []
        out.append(entry)
    return {"topics": out}


async def describe_configs(
    ctx: BrokerContext, body: wire.DescribeConfigsRequest
) -> wire.DescribeConfigsAnswer:
    topic = body["topic"]
    require_topic(ctx, topic)
    overrides = ctx.manager.topic_overrides(topic)
    return {"configs": ctx.config.describe_topic_configs(overrides)}


async def alter_configs(
    ctx: BrokerContext, body: wire.AlterConfigsRequest
) -> wire.AlterConfigsAnswer:
    topic = body["topic"]
    require_topic(ctx, topic)
    check_not_internal(topic, "alter the configs of")
    _check_topic_keys([*body["set"], *body["delete"]])
    new_values = {k: config_text(v) for k, v in body["set"].items()}
    if body.get("validate_only"):  # the whole result validated, as the manager would, not applied
        overrides = ctx.manager.topic_overrides(topic)
        for key in body["delete"]:
            overrides.pop(key, None)
        config = ctx.manager.validate_topic_config({**overrides, **new_values})
        if (
            ctx.manager.topic_config(topic).remote_storage_enable
            and not config.remote_storage_enable
        ):
            raise InvalidConfig(REMOTE_TURN_OFF_MESSAGE)
        return {}
    # The manager validates the whole result, persists it, applies it to every
    # partition at once and logs `config_changed`.
    await offload.to_worker(ctx.manager.alter_topic_config, topic, new_values, list(body["delete"]))
    return {}
