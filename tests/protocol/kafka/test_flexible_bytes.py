"""Flexible versions (KIP-482) byte for byte: the layouts Kafka's JSON schemas imply,
written out by hand here (compact lengths as unsigned varints of length + 1, null as
0, a tagged-field section ending every struct, request header v2 and response header
v1), against what our codec writes and reads; unknown tags are skipped, known ones read
wherever they sit in the section."""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol.kafka import KafkaCodecError, RequestHeader, decode_request, encode_request
from protocol.kafka.codec import decode_response, encode_response
from protocol.kafka.messages import FETCH, METADATA, OFFSET_FETCH, PRODUCE

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def _header_v2(api_key: int, version: int, correlation: int = 7) -> bytes:
    """Request header v2: key, version, correlation id, client id (a classic int16
    string even here), then an empty tagged-field section."""
    return _i16(api_key) + _i16(version) + _i32(correlation) + _i16(1) + b"c" + b"\x00"


def _frame(body: bytes) -> bytes:
    return _i32(len(body)) + body


METADATA_V12_BY_ID = (
    b"\x02"  # topics: compact array of 1
    + TOPIC_ID
    + b"\x00"  # name: compact nullable string, null
    + b"\x00"  # the topic's tagged fields
    + b"\x01"  # allow_auto_topic_creation
    + b"\x00"  # include_topic_authorized_operations
    + b"\x00"  # the request's tagged fields
)


def test_metadata_v12_by_topic_id_is_kafkas_bytes() -> None:
    body = {
        "topics": [{"topic_id": TOPIC_ID, "name": None}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    frame = encode_request(RequestHeader(METADATA.key, 12, 7, "c"), body)
    assert frame == _frame(_header_v2(METADATA.key, 12) + METADATA_V12_BY_ID)
    decoded = decode_request(frame[4:])
    assert decoded.body["topics"] == [{"topic_id": TOPIC_ID, "name": None}]
    assert decoded.body["allow_auto_topic_creation"] is True


def test_unknown_tags_are_skipped_in_every_struct() -> None:
    """A tag we do not know, in the topic's section and in the request's, with bytes:
    read past, the rest of the message unchanged."""
    tagged = (
        b"\x02"
        + TOPIC_ID
        + b"\x00"
        + b"\x01\x05\x02zz"  # one tagged field: tag 5, 2 bytes
        + b"\x01\x00"
        + b"\x02\x03\x01x\x63\x00"  # two: tag 3 (1 byte), tag 99 (empty)
    )
    decoded = decode_request(_header_v2(METADATA.key, 12) + tagged)
    assert decoded.body["topics"] == [{"topic_id": TOPIC_ID, "name": None}]
    assert decoded.body["allow_auto_topic_creation"] is True


def test_a_tag_running_past_the_end_is_invalid() -> None:
    body = b"\x01" + b"\x01\x00" + b"\x01\x05\x09zz"  # tag 5 claims 9 bytes, 2 follow
    with pytest.raises(KafkaCodecError):
        decode_request(_header_v2(METADATA.key, 12) + body)


def test_trailing_tag_sections_are_ignored_as_kafka_ignores_them() -> None:
    """librdkafka 2.16's Metadata v13 ends with one more section (01 00 00); a trailing
    byte that is no section stays refused."""
    body = b"\x01" + b"\x00\x00" + b"\x00"
    decoded = decode_request(_header_v2(METADATA.key, 13) + body + b"\x01\x00\x00")
    assert decoded.body["topics"] == []
    with pytest.raises(KafkaCodecError):
        decode_request(_header_v2(METADATA.key, 13) + body + b"\x05")


def test_fetch_v13_response_with_a_diverging_epoch_is_kafkas_bytes() -> None:
    """Response header v1 (a tagged section after the correlation id), topics by id,
    `diverging_epoch` as tag 0 of the partition: its struct's bytes, sized."""
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 10,
                        "last_stable_offset": 10,
                        "log_start_offset": 0,
                        "diverging_epoch": {"epoch": 0, "end_offset": 10},
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"",
                    }
                ],
            }
        ],
    }
    epoch_end = _i32(0) + _i64(10) + b"\x00"
    expected = (
        _i32(9)  # correlation id
        + b"\x00"  # response header v1's tagged fields
        + _i32(0)
        + _i16(0)
        + _i32(0)
        + b"\x02"
        + TOPIC_ID
        + b"\x02"
        + _i32(0)
        + _i16(0)
        + _i64(10)
        + _i64(10)
        + _i64(0)
        + b"\x00"  # aborted_transactions: null
        + _i32(-1)
        + b"\x01"  # records: compact, empty
        + b"\x01\x00"
        + bytes([len(epoch_end)])
        + epoch_end  # tag 0: diverging_epoch
        + b"\x00"  # the topic's tagged fields
        + b"\x00"  # the response's (node_endpoints, tag 0, absent)
    )
    frame = encode_response(FETCH, 13, 9, body)
    assert frame == _frame(expected)
    decoded = decode_response(frame[4:], FETCH, 13).body
    part = decoded["responses"][0]["partitions"][0]
    assert part["diverging_epoch"] == {"epoch": 0, "end_offset": 10}
    assert part["current_leader"] == {}  # absent tag 1: its default


def test_produce_v9_request_is_compact() -> None:
    records = b"\x00" * 61
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }
    frame = encode_request(RequestHeader(PRODUCE.key, 9, 7, "c"), body)
    expected = (
        _header_v2(PRODUCE.key, 9)
        + b"\x00"  # transactional_id: compact nullable string, null
        + _i16(-1)
        + _i32(1000)
        + b"\x02"
        + b"\x02t"  # name: compact string of 1
        + b"\x02"
        + _i32(0)
        + bytes([len(records) + 1])
        + records  # compact records
        + b"\x00\x00\x00"  # partition, topic and request tagged fields
    )
    assert frame == _frame(expected)
    assert decode_request(frame[4:]).body["topic_data"][0]["partition_data"][0]["records"] == (
        records
    )


def test_offset_fetch_v8_batches_groups() -> None:
    body = {
        "groups": [
            {"group_id": "g", "topics": None},
            {"group_id": "h", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        ],
        "require_stable": True,
    }
    frame = encode_request(RequestHeader(OFFSET_FETCH.key, 8, 7, "c"), body)
    expected = (
        _header_v2(OFFSET_FETCH.key, 8)
        + b"\x03"
        + b"\x02g"
        + b"\x00"  # topics: null (every topic)
        + b"\x00"
        + b"\x02h"
        + b"\x02"
        + b"\x02t"
        + b"\x03"
        + _i32(0)
        + _i32(1)
        + b"\x00"
        + b"\x00"
        + b"\x01"  # require_stable
        + b"\x00"
    )
    assert frame == _frame(expected)
    assert decode_request(frame[4:]).body["groups"][1]["topics"][0]["partition_indexes"] == [0, 1]
