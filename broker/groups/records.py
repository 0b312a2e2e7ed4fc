"""The `__consumer_offsets` record format for groups, and the loader that replays it.

Two record types share the compacted topic (the cleaner keeps the latest per key):

- offset commit (unchanged, protocol/offsets_schema.py): key msgpack
  `[group, topic, partition]`, value msgpack `{offset, metadata, commit_timestamp}`;
- group metadata (new): key msgpack `[group]` (a one-element array, so older readers
  that unpack three fields skip it), value msgpack
  `{version: 0, protocol_type, generation, protocol, leader, state_timestamp,
    members: [{member_id, group_instance_id, client_id, client_host,
               rebalance_timeout_ms, session_timeout_ms, subscription, assignment}]}`
  where `subscription` is the selected protocol's metadata and `assignment` the bytes
  the leader gave the member (both msgpack bin). A tombstone (value None) deletes.

The loader accepts any bytes: a record it cannot decode is skipped and counted, never
raised, so a damaged record cannot stop the coordinator from starting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

import msgpack

from broker.groups.messages import (
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    Record,
    TopicPartition,
)
from protocol.offsets_schema import MAX_GROUP_CHARS, offset_key, offset_value

GROUP_METADATA_VERSION = 0
# Bounds on decoded fields: a record beyond them is malformed, not a reason to grow memory.
MAX_NAME_CHARS = 32_767  # Kafka's STRING limit (int16 length)
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1

_MEMBER_FIELDS = (
    "member_id",
    "group_instance_id",
    "client_id",
    "client_host",
    "rebalance_timeout_ms",
    "session_timeout_ms",
    "subscription",
    "assignment",
)


class MalformedRecord(ValueError):
    """A `__consumer_offsets` record that is neither a valid offset nor group record."""


def group_key(group_id: str) -> bytes:
    key: bytes = msgpack.packb([group_id], use_bin_type=True)
    return key


def group_value(metadata: GroupMetadata) -> bytes:
    value: bytes = msgpack.packb(
        {
            "version": GROUP_METADATA_VERSION,
            "protocol_type": metadata.protocol_type,
            "generation": metadata.generation_id,
            "protocol": metadata.protocol_name,
            "leader": metadata.leader_id,
            "state_timestamp": metadata.state_timestamp_ms,
            "members": [
                {name: getattr(m, name) for name in _MEMBER_FIELDS} for m in metadata.members
            ],
        },
        use_bin_type=True,
    )
    return value


def group_record(group_id: str, metadata: GroupMetadata | None) -> Record:
    """The record storing `metadata`, or the tombstone deleting the group if None."""
    return group_key(group_id), None if metadata is None else group_value(metadata)


def offset_record(group_id: str, tp: TopicPartition, committed: CommittedOffset | None) -> Record:
    key = offset_key(group_id, tp[0], tp[1])
    if committed is None:
        return key, None
    return key, offset_value(committed.offset, committed.metadata, committed.commit_timestamp_ms)


@overload
def _string(value: Any) -> str: ...
@overload
def _string(value: Any, *, nullable: bool) -> str | None: ...
def _string(value: Any, *, nullable: bool = False) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise MalformedRecord(f"expected a string, got {type(value).__name__}")
    return value


@overload
def _integer(value: Any) -> int: ...
@overload
def _integer(value: Any, *, nullable: bool) -> int | None: ...
def _integer(value: Any, *, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedRecord(f"expected an integer, got {type(value).__name__}")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise MalformedRecord(f"expected bytes, got {type(value).__name__}")
    return value


def _member(raw: Any) -> MemberMetadata:
    if not isinstance(raw, dict):
        raise MalformedRecord("member: expected a map")
    return MemberMetadata(
        member_id=_string(raw["member_id"]),
        group_instance_id=_string(raw["group_instance_id"], nullable=True),
        client_id=_string(raw["client_id"]),
        client_host=_string(raw["client_host"]),
        rebalance_timeout_ms=_integer(raw["rebalance_timeout_ms"]),
        session_timeout_ms=_integer(raw["session_timeout_ms"]),
        subscription=_bytes(raw["subscription"]),
        assignment=_bytes(raw["assignment"]),
    )


def decode_group_value(value: bytes) -> GroupMetadata:
    """Raises MalformedRecord (cause chained) for anything but a valid version-0 value."""
    try:
        raw = msgpack.unpackb(value, raw=False)
        if not isinstance(raw, dict) or raw.get("version") != GROUP_METADATA_VERSION:
            raise MalformedRecord("group metadata: not a version-0 map")
        members = raw["members"]
        if not isinstance(members, list):
            raise MalformedRecord("group metadata: members is not a list")
        return GroupMetadata(
            protocol_type=_string(raw["protocol_type"], nullable=True),
            generation_id=_integer(raw["generation"]),
            protocol_name=_string(raw["protocol"], nullable=True),
            leader_id=_string(raw["leader"], nullable=True),
            state_timestamp_ms=_integer(raw["state_timestamp"], nullable=True),
            members=tuple(_member(m) for m in members),
        )
    except MalformedRecord:
        raise
    except Exception as exc:  # any bytes: msgpack raises many types on garbage
        raise MalformedRecord(f"group metadata: {exc!r}") from exc


def decode_offset_value(value: bytes) -> CommittedOffset:
    try:
        raw = msgpack.unpackb(value, raw=False)
        if not isinstance(raw, dict):
            raise MalformedRecord("offset commit: not a map")
        offset = _integer(raw["offset"])
        if not 0 <= offset <= MAX_OFFSET:
            raise MalformedRecord(f"offset commit: offset {offset} out of range")
        return CommittedOffset(
            offset,
            _string(raw.get("metadata", "")),
            _integer(raw["commit_timestamp"]),
        )
    except MalformedRecord:
        raise
    except Exception as exc:  # any bytes
        raise MalformedRecord(f"offset commit: {exc!r}") from exc


def _group_id(value: Any) -> str:
    """A group id as a commit or join could have written it: 1-249 characters."""
    group = _string(value)
    if not group or len(group) > MAX_GROUP_CHARS:
        raise MalformedRecord(f"key: group id of {len(group or '')} characters")
    return group


def decode_key(key: bytes) -> tuple[str] | tuple[str, str, int]:
    """`(group,)` for a group record, `(group, topic, partition)` for an offset."""
    try:
        raw = msgpack.unpackb(key, raw=False)
    except Exception as exc:  # any bytes
        raise MalformedRecord(f"key: {exc!r}") from exc
    if isinstance(raw, list) and len(raw) == 1:
        return (_group_id(raw[0]),)
    if isinstance(raw, list) and len(raw) == 3:
        partition = _integer(raw[2])
        if not 0 <= partition <= MAX_PARTITION:
            raise MalformedRecord(f"key: partition {partition} out of range")
        return (_group_id(raw[0]), _string(raw[1]), partition)
    raise MalformedRecord("key: neither [group] nor [group, topic, partition]")


@dataclass(slots=True)
class LoadedState:
    """The latest record of every key, as the coordinator needs it."""

    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    records: int = 0
    malformed: int = 0


def load_records(records: Iterable[tuple[bytes | None, bytes | None]]) -> LoadedState:
    """Replay `__consumer_offsets` in log order; malformed records are skipped and counted."""
    state = LoadedState()
    for key, value in records:
        state.records += 1
        try:
            if key is None:
                raise MalformedRecord("record without a key")
            decoded = decode_key(key)
            if len(decoded) == 1:
                _apply_group(state, decoded[0], value)
            else:
                _apply_offset(state, decoded, value)
        except MalformedRecord:
            state.malformed += 1
    return state


def _apply_group(state: LoadedState, group_id: str, value: bytes | None) -> None:
    if value is None:
        state.groups.pop(group_id, None)
    else:
        state.groups[group_id] = decode_group_value(value)


def _apply_offset(state: LoadedState, key: tuple[str, str, int], value: bytes | None) -> None:
    group_id, topic, partition = key
    if value is None:
        offsets = state.offsets.get(group_id, {})
        offsets.pop((topic, partition), None)
        if not offsets:
            state.offsets.pop(group_id, None)
        return
    committed = decode_offset_value(value)
    state.offsets.setdefault(group_id, {})[(topic, partition)] = committed
