"""Kafka's OffsetForLeaderEpoch on one broker whose leader epoch is always 0.

Java consumers send it to check a position after a leader change (truncation
detection); followers to truncate. Tidelog's single node has led every partition
since its creation, in leader epoch 0, so its epoch cache is one entry, epoch 0
from the log start. The answers are Kafka's `LeaderEpochFileCache.endOffsetFor`
over that cache (through the native `list_offsets`, so Describe on each topic):

- epoch 0 -> (0, the log end offset);
- an epoch after 0 -> (-1, -1): Kafka's answer for an epoch it never had;
- -1 (undefined) -> (-1, -1);
- an epoch before 0 (never sent by clients) -> (that epoch, the log start offset);
- `current_leader_epoch` (the client's view of the leader's epoch) other than 0
  fences it: below 0 (but not -1, unset) FENCED_LEADER_EPOCH, above UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from typing import Any, Literal

from broker.context import Deferred
from broker.dispatch import handler_for
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.core import LEADER_EPOCH
from protocol.api_types import ListOffsetsRequest
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import OFFSET_FOR_LEADER_EPOCH

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


async def _offsets(
    call: KafkaCall, spec: Literal["earliest", "latest"], wanted: dict[str, list[int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """The native list_offsets' answer for `spec` per (topic, partition)."""
    if not wanted:
        return {}
    body: ListOffsetsRequest = {
        "topics": [
            {"topic": t, "partitions": [{"partition": p, "spec": spec} for p in parts]}
            for t, parts in wanted.items()
        ]
    }
    answer = await handler_for("list_offsets")(call.ctx, body)
    assert answer is not None and not isinstance(answer, Deferred)
    return {(t["topic"], p["partition"]): p for t in answer["topics"] for p in t["partitions"]}


def _result(partition: int, error: KafkaError, epoch: int, offset: int) -> dict[str, Any]:
    return {
        "error_code": error.code,
        "partition": partition,
        "leader_epoch": epoch,
        "end_offset": offset,
    }


def _fenced(current: int) -> KafkaError | None:
    if current in (UNDEFINED_EPOCH, LEADER_EPOCH):
        return None
    return (
        KafkaError.FENCED_LEADER_EPOCH
        if current < LEADER_EPOCH
        else KafkaError.UNKNOWN_LEADER_EPOCH
    )


async def offset_for_leader_epoch(call: KafkaCall) -> KafkaAnswer:
    """OffsetForLeaderEpoch v2-4."""
    topics = call.body["topics"]
    checked: dict[str, list[int]] = {}
    before_zero: dict[str, list[int]] = {}
    for t in topics:
        for p in t["partitions"]:
            if _fenced(p["current_leader_epoch"]) is None:
                checked.setdefault(t["topic"], []).append(p["partition"])
                if p["leader_epoch"] < UNDEFINED_EPOCH:
                    before_zero.setdefault(t["topic"], []).append(p["partition"])
    ends = await _offsets(call, "latest", checked)
    starts = await _offsets(call, "earliest", before_zero)
    answer = []
    for t in topics:
        parts = []
        for p in t["partitions"]:
            index, epoch = p["partition"], p["leader_epoch"]
            fenced = _fenced(p["current_leader_epoch"])
            found = ends.get((t["topic"], index))
            if fenced is not None or found is None or found["error"]:
                error = fenced or for_tidelog_code(
                    found["error"] if found else "UNKNOWN_SERVER_ERROR"
                )
                parts.append(_result(index, error, UNDEFINED_EPOCH, UNDEFINED_OFFSET))
            elif epoch == LEADER_EPOCH:
                parts.append(_result(index, KafkaError.NONE, LEADER_EPOCH, found["offset"]))
            elif epoch < UNDEFINED_EPOCH:
                start = starts[(t["topic"], index)]["offset"]
                parts.append(_result(index, KafkaError.NONE, epoch, start))
            else:  # undefined, or an epoch this leader never had
                parts.append(_result(index, KafkaError.NONE, UNDEFINED_EPOCH, UNDEFINED_OFFSET))
        answer.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": answer}


HANDLERS: dict[int, KafkaApi] = {
    OFFSET_FOR_LEADER_EPOCH.key: KafkaApi(offset_for_leader_epoch, via=("list_offsets",)),
}
