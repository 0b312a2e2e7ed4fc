"""Offsets looked up as the principal, and the times forms give: shared by the record
browser and the group offset reset."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from broker.console.acting import first_error
from broker.console.base import Call
from protocol.errors import InvalidRequest


async def offset_of(call: Call, topic: str, partition: int, api: str, item: dict[str, Any]) -> int:
    """The offset `api` (list_offsets, offset_for_time) answers for one partition, as the
    principal (-1: none); the partition's error raised."""
    body = {"topics": [{"topic": topic, "partitions": [{"partition": partition, **item}]}]}
    [found] = (await call.actor.call(api, body))["topics"][0]["partitions"]
    error = first_error([found])
    if error is not None:
        raise error
    return -1 if found.get("offset") is None else int(found["offset"])


def time_ms(call: Call) -> int:
    """The `time` field: ms since the epoch, or an ISO 8601 time (UTC unless it says)."""
    text = call.request.arg("time").strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidRequest(f"time: expected ms or ISO 8601, got {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
