"""Kafka's error registry: complete, consistent with kafka-python's, and Tidelog's names mapped."""

from __future__ import annotations

import warnings

import pytest

from protocol.errors import ERRORS as TIDELOG_ERRORS
from protocol.kafka.errors import (
    ERRORS_BY_CODE,
    ERRORS_BY_NAME,
    KafkaCodecError,
    KafkaError,
    error_for_code,
    for_tidelog_code,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors


def _kafka_python_errors() -> dict[int, type]:
    out = {}
    for obj in vars(kafka.errors).values():
        if isinstance(obj, type) and isinstance(getattr(obj, "errno", None), int):
            out[obj.errno] = obj
    return out


# kafka-python keeps some older names for the same codes.
KAFKA_PYTHON_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


def test_codes_and_names_are_unique():
    # Kafka 4.4 defines -1..129 except 99 (never assigned).
    assert sorted(ERRORS_BY_CODE) == [c for c in range(-1, 130) if c != 99]
    assert len(ERRORS_BY_NAME) == len(ERRORS_BY_CODE)


@pytest.mark.parametrize(
    ("name", "code", "retriable"),
    [
        ("NONE", 0, False),
        ("OFFSET_OUT_OF_RANGE", 1, False),
        ("CORRUPT_MESSAGE", 2, True),
        ("NOT_LEADER_OR_FOLLOWER", 6, True),
        ("REQUEST_TIMED_OUT", 7, True),
        ("UNSUPPORTED_VERSION", 35, False),
        ("INVALID_REQUEST", 42, False),
        ("KAFKA_STORAGE_ERROR", 56, True),
        ("MEMBER_ID_REQUIRED", 79, False),
        ("INVALID_RECORD", 87, False),
    ],
)
def test_well_known_entries(name, code, retriable):
    error = ERRORS_BY_NAME[name]
    assert (error.code, error.retriable) == (code, retriable)
    assert error_for_code(code) is error


def test_agrees_with_kafka_python_on_every_shared_code():
    theirs = _kafka_python_errors()
    shared = set(theirs) & set(ERRORS_BY_CODE)
    assert len(shared) > 100
    for code in shared:
        ours = ERRORS_BY_CODE[code]
        assert KAFKA_PYTHON_NAMES.get(ours.name, ours.name) == theirs[code].message, code
        if code != 2:  # Java's CorruptRecordException is retriable; kafka-python's is not
            assert bool(theirs[code].retriable) == ours.retriable, ours.name


def test_codes_go_on_the_wire_as_plain_ints():
    for error in KafkaError:
        assert type(error.code) is int
        assert KafkaError(error.code) is error


def test_a_member_is_truthy_and_no_int():
    # Adapters pick an error with `refused.get(key) or mapped`: NONE must not be a falsy 0.
    assert all(bool(error) for error in KafkaError)
    assert KafkaError.NONE != 0


def test_unknown_code_is_unknown_server_error():
    assert error_for_code(4242) is KafkaError.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("code", sorted(TIDELOG_ERRORS))
def test_every_tidelog_error_maps_to_kafka_with_the_same_retriability(code):
    kafka_error = for_tidelog_code(code)
    assert kafka_error is not KafkaError.UNKNOWN_SERVER_ERROR or code == "UNKNOWN_SERVER_ERROR"
    assert kafka_error.retriable == TIDELOG_ERRORS[code].retriable


def test_tidelog_success_and_unknown_names():
    assert for_tidelog_code(None) is KafkaError.NONE
    assert for_tidelog_code("STORAGE_ERROR").name == "KAFKA_STORAGE_ERROR"
    assert for_tidelog_code("SOMETHING_NEW") is KafkaError.UNKNOWN_SERVER_ERROR


def test_codec_error_carries_its_code():
    error = KafkaCodecError(KafkaError.CORRUPT_MESSAGE, "bad CRC")
    assert error.code == 2
    assert str(error) == "CORRUPT_MESSAGE (2): bad CRC"
