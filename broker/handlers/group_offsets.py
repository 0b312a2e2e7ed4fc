"""Consumer offsets on a compacted topic: the `commit_offsets` and `fetch_offsets` handlers.

A group's committed positions are records of the internal compacted topic
`__consumer_offsets` (format in protocol/offsets_schema.py and
broker/groups/records.py), created on the first commit with one partition. The
group coordinator (broker/groups/, driven by broker/group_service.py) owns the
topic: it keeps the committed offsets in memory, loaded at start, and answers a
commit once its batch is appended and fsynced, so an acknowledged commit survives a
crash or power loss.

A commit may carry the committer's `generation`, `member_id` and
`group_instance_id`; the coordinator fences it by them as Kafka does (docs/groups.md).
Without them (generation -1) a commit is accepted while the group has no members,
exactly as before groups had members.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.groups import OffsetCommitRequest
from protocol.api_types import (
    CommitOffsetsAnswer,
    CommitOffsetsPartitionAnswer,
    CommitOffsetsRequest,
    CommitOffsetsTopicAnswer,
    FetchOffsetsAnswer,
    FetchOffsetsPartitionAnswer,
    FetchOffsetsRequest,
    FetchOffsetsTopicAnswer,
)
from protocol.errors import InvalidRequest, InvalidTopic, UnknownTopicOrPartition
from protocol.offsets_schema import (
    INTERNAL_TOPICS,
    MAX_GROUP_CHARS,
    MAX_METADATA_CHARS,
    NO_OFFSET,
)
from storage.manager import LogManager

__all__ = [
    "check_not_internal",
    "commit_offsets",
    "fetch_offsets",
]


def check_not_internal(topic: str, action: str) -> None:
    """INVALID_TOPIC_EXCEPTION for a client's write, create, alter or delete of an
    internal topic (what Kafka answers a produce or delete_records to one)."""
    if topic in INTERNAL_TOPICS:
        raise InvalidTopic(f"cannot {action} internal topic {topic}: it is managed by the broker")


def _check_group(group: str) -> None:
    if not group or len(group) > MAX_GROUP_CHARS:
        raise InvalidRequest(f"group: must be 1-{MAX_GROUP_CHARS} characters")


def _partition_error(manager: LogManager, topic: str, partition: int) -> str | None:
    if topic not in manager.topics():
        return f"unknown topic {topic!r}"
    count = manager.partition_count(topic)
    if not 0 <= partition < count:
        return f"{topic} has partitions 0..{count - 1}, not {partition}"
    return None


async def commit_offsets(ctx: BrokerContext, body: CommitOffsetsRequest) -> CommitOffsetsAnswer:
    """Store the group's positions, fenced by generation and member when given;
    per-partition UNKNOWN_TOPIC_OR_PARTITION, and a group-level refusal (e.g.
    ILLEGAL_GENERATION) on every partition, as Kafka answers it."""
    group = body["group"]
    _check_group(group)
    accepted: dict[tuple[str, int], tuple[int, str]] = {}
    answer: list[CommitOffsetsTopicAnswer] = []
    for topic in body["topics"]:
        parts: list[CommitOffsetsPartitionAnswer] = []
        for p in topic["partitions"]:
            if len(p["metadata"]) > MAX_METADATA_CHARS:
                raise InvalidRequest(f"metadata: longer than {MAX_METADATA_CHARS} characters")
            if p["offset"] < 0:  # a position is an offset to read next, never negative
                raise InvalidRequest(f"offset: must be >= 0, got {p['offset']}")
            problem = _partition_error(ctx.manager, topic["topic"], p["partition"])
            if problem is None:
                accepted[(topic["topic"], p["partition"])] = (p["offset"], p["metadata"])
            parts.append(
                {
                    "partition": p["partition"],
                    "error": None if problem is None else UnknownTopicOrPartition.code,
                    "message": problem,
                }
            )
        answer.append({"topic": topic["topic"], "partitions": parts})
    request = OffsetCommitRequest(
        group_id=group,
        offsets=accepted,
        member_id=body["member_id"],
        generation_id=body["generation"],
        group_instance_id=body["group_instance_id"],
    )
    result = await ctx.groups.call(lambda c: c.commit_offsets(request))
    if result.error is not None:
        message = f"group {group}: commit refused ({result.error})"
        for answered in answer:
            for part in answered["partitions"]:
                if part["error"] is None:
                    part["error"], part["message"] = result.error, message
    return {"topics": answer}


async def fetch_offsets(ctx: BrokerContext, body: FetchOffsetsRequest) -> FetchOffsetsAnswer:
    """The group's positions (-1 where nothing was committed); a partition with no
    commit that does not exist either gets UNKNOWN_TOPIC_OR_PARTITION, as in commit."""
    group = body["group"]
    _check_group(group)
    committed = await ctx.groups.query(lambda c: c.fetch_offsets(group))
    wanted = body["topics"]
    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            by_topic.setdefault(topic, []).append(partition)
        wanted = [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]
    answer: list[FetchOffsetsTopicAnswer] = []
    for entry in wanted:
        topic = entry["topic"]
        partitions = entry["partitions"]
        if partitions is None:
            partitions = sorted(p for t, p in committed if t == topic)
        parts: list[FetchOffsetsPartitionAnswer] = []
        for partition in partitions:
            position = committed.get((topic, partition))
            problem = None
            if position is None:
                problem = _partition_error(ctx.manager, topic, partition)
            parts.append(
                {
                    "partition": partition,
                    "offset": NO_OFFSET if position is None else position.offset,
                    "metadata": "" if position is None else position.metadata,
                    "error": None if problem is None else UnknownTopicOrPartition.code,
                    "message": problem,
                }
            )
        answer.append({"topic": topic, "partitions": parts})
    return {"topics": answer}
