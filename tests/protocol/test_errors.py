"""The error registry: every docs/protocol.md §5 code has exactly one class."""

from __future__ import annotations

import pytest

from protocol import errors

CONTRACT_CODES = [
    "UNKNOWN_SERVER_ERROR",
    "INVALID_REQUEST",
    "UNSUPPORTED_VERSION",
    "CORRUPT_MESSAGE",
    "MESSAGE_TOO_LARGE",
    "INVALID_RECORD",
    "INVALID_TIMESTAMP",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "TOPIC_ALREADY_EXISTS",
    "INVALID_TOPIC_EXCEPTION",
    "INVALID_PARTITIONS",
    "INVALID_CONFIG",
    "OFFSET_OUT_OF_RANGE",
    "STORAGE_ERROR",
    "REMOTE_STORAGE_ERROR",
    "REQUEST_TIMED_OUT",
    "POLICY_VIOLATION",
    # Issue 21 (idempotent producer), Kafka's names; see docs/idempotence.md.
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "DUPLICATE_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "UNKNOWN_PRODUCER_ID",
    "PRODUCER_FENCED",
    # Issue 20 (consumer groups), Kafka's names; see docs/groups.md.
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "NOT_COORDINATOR",
    "INVALID_GROUP_ID",
    "INVALID_SESSION_TIMEOUT",
    "INCONSISTENT_GROUP_PROTOCOL",
    "MEMBER_ID_REQUIRED",
    "UNKNOWN_MEMBER_ID",
    "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS",
    "FENCED_INSTANCE_ID",
    "GROUP_MAX_SIZE_REACHED",
    "NON_EMPTY_GROUP",
    "GROUP_ID_NOT_FOUND",
    "OFFSET_METADATA_TOO_LARGE",
    # Issue 22 (security), Kafka's names; see docs/security.md.
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "UNSUPPORTED_SASL_MECHANISM",
    "ILLEGAL_SASL_STATE",
    "SASL_AUTHENTICATION_FAILED",
    "SECURITY_DISABLED",
]


@pytest.mark.parametrize("code", CONTRACT_CODES)
def test_every_contract_code_round_trips(code: str) -> None:
    cls = errors.error_class(code)
    assert cls.code == code
    exc = errors.error_from_wire(code, "detail")
    assert isinstance(exc, cls)
    assert str(exc) == f"{code}: detail"


def test_registry_has_no_extra_or_duplicate_codes() -> None:
    assert sorted(errors.ERRORS) == sorted(CONTRACT_CODES)


def test_retriable_flags_follow_kafka() -> None:
    assert errors.StorageError.retriable
    assert errors.RequestTimedOut.retriable
    assert errors.UnknownTopicOrPartition.retriable
    assert not errors.InvalidRecord.retriable
    assert not errors.TopicAlreadyExists.retriable
    assert not errors.OutOfOrderSequenceNumber.retriable
    assert not errors.InvalidProducerEpoch.retriable
    assert not errors.ProducerFenced.retriable


def test_unknown_code_from_a_newer_broker_stays_visible() -> None:
    exc = errors.error_from_wire("SOME_FUTURE_ERROR", "why")
    assert isinstance(exc, errors.UnknownServerError)
    assert "SOME_FUTURE_ERROR" in str(exc)
