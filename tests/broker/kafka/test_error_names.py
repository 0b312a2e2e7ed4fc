"""The error a Kafka answer is counted under (`tidelog_kafka_requests{error=...}`)."""

from __future__ import annotations

from broker.kafka.connection import first_error_code_name


def _produce(*codes: int) -> dict:
    partitions = [
        {"index": i, "error_code": code, "base_offset": -1, "record_errors": [], "records": b""}
        for i, code in enumerate(codes)
    ]
    return {"responses": [{"name": "t", "partition_responses": partitions}], "throttle_time_ms": 0}


def test_an_answer_without_errors_counts_none() -> None:
    assert first_error_code_name(_produce(0, 0)) is None
    assert first_error_code_name({"error_code": 0, "api_keys": []}) is None


def test_the_first_error_depth_first_in_field_order() -> None:
    assert first_error_code_name(_produce(0, 3, 6)) == "UNKNOWN_TOPIC_OR_PARTITION"
    nested = {
        "topics": [{"error_code": 0, "parts": [{"error_code": 0}, {"error_code": 5}]}],
        "more": [{"error_code": 7}],
    }
    assert first_error_code_name(nested) == "LEADER_NOT_AVAILABLE"
    assert first_error_code_name({"error_code": 29, "topics": [{"error_code": 3}]}) == (
        "TOPIC_AUTHORIZATION_FAILED"
    )


def test_only_lists_of_dicts_are_walked() -> None:
    answer = {"records": b"\x00\x03", "ids": [1, 2], "nested": {"error_code": 3}, "x": [[{}]]}
    assert first_error_code_name(answer) is None
