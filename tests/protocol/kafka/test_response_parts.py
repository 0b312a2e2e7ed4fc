"""A Kafka Fetch answer framed around spans it does not hold (codec.encode_response_parts):
joined with each span's bytes it is `encode_response`'s frame, at every version."""

from __future__ import annotations

import pytest

from protocol.kafka.codec import encode_response, encode_response_parts
from protocol.kafka.messages import FETCH


class Span:
    """A sized value that is not bytes, as a file span is."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def _answer(records: list[object]) -> dict:
    parts = [
        {"partition_index": i, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
         "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1,
         "records": r}
        for i, r in enumerate(records)
    ]  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "t", "partitions": parts}]}  # fmt: skip


@pytest.mark.parametrize("version", [4, 11, 12])
def test_parts_join_to_the_whole_frame(version: int) -> None:
    first, second = b"A" * 300, b"B" * 70_000
    whole = encode_response(FETCH, version, 5, _answer([first, b"", second]))
    parts = encode_response_parts(FETCH, version, 5, _answer([Span(first), b"", Span(second)]))
    assert isinstance(parts, list)
    spans = [p for p in parts if isinstance(p, Span)]
    assert [s.data for s in spans] == [first, second] and isinstance(parts[0], bytes)
    joined = b"".join(p.data if isinstance(p, Span) else p for p in parts)
    assert joined == whole


def test_an_answer_without_spans_is_one_frame() -> None:
    answer = _answer([b"xyz"])
    assert encode_response_parts(FETCH, 11, 1, answer) == encode_response(FETCH, 11, 1, answer)
