"""The `explain_retention` API (an extension, docs/retention.md): per partition, what
the next retention pass will do with each segment and why (retention/explain.py).

Every answer carries the topic's retention settings, so its row in broker/dispatch.py
declares DescribeConfigs on the topic, as describe_configs needs.
"""

from __future__ import annotations

from typing import cast

from broker import offload
from broker.context import BrokerContext
from broker.tiered.explain import explain_tiered_log
from protocol.api_types import (
    ExplainRetentionAnswer,
    ExplainRetentionRequest,
    PartitionExplanation,
)
from protocol.errors import UnknownTopicOrPartition
from retention.task import explain_log
from storage.manager import LogManager


async def explain_retention(
    ctx: BrokerContext, body: ExplainRetentionRequest
) -> ExplainRetentionAnswer:
    """`explain_retention`: per partition, each segment's verdict (protocol/retention_schema)."""
    topic = body["topic"]
    if topic not in ctx.manager.topics():
        raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
    # Metadata only, but one stat per segment: off the event loop, like other admin work.
    partitions = await offload.to_worker(
        explain_partitions, ctx.manager, topic, body["partitions"], ctx.clock_ms()
    )
    return {"topic": topic, "partitions": partitions}


def explain_partitions(
    manager: LogManager, topic: str, wanted: list[int] | None, now_ms: int
) -> list[PartitionExplanation]:
    """The wire form of every requested partition's explanation at one instant."""
    count = manager.partition_count(topic)
    out: list[PartitionExplanation] = []
    for partition in range(count) if wanted is None else wanted:
        if not 0 <= partition < count:
            message = f"{topic} has partitions 0..{count - 1}, not {partition}"
            out.append(
                {"partition": partition, "error": UnknownTopicOrPartition.code, "message": message}
            )
            continue
        log = manager.get_log(topic, partition)
        if log.config.remote_storage_enable:
            wire = explain_tiered_log(log, now_ms)
        else:
            wire = explain_log(log, now_ms).to_wire()
        # retention/ writes the rest of PARTITION_EXPLANATION's keys (untyped).
        answer = {"partition": partition, "error": None, "message": None, **wire}
        out.append(cast(PartitionExplanation, answer))
    return out
